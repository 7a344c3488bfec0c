"""The HTTP serving pieces every vslice service shares.

- :func:`configure_logging` writes one JSON object per line on stderr (``ts``, ``level``,
  ``service``, ``logger``, ``msg`` and any ``extra=`` fields), so log collectors need no parser.
- :class:`HttpService` is a threaded HTTP(S) server over a table of routes. Handlers receive the
  request body and return a :class:`Response`; ``GET /healthz`` answers ``200 ok`` on its own,
  and ``GET /version`` the installed vslice release (``{"version": "0.1.0"}``), so an operator
  (or the upgrade test) can tell which release a running process is, not only which is on disk.
  With TLS, the certificate files are re-read whenever their modification time changes, so a
  rotated certificate is served without a restart. With a client CA (``client_ca_file``) a
  client certificate signed by it is verified when presented, and :class:`ClientAuth` names
  the routes that answer 403 unless it was presented with an allowed common name (health and
  metrics routes can stay open to probes and scrapers). :func:`serving_tls` builds both from a
  service's ``tls_cert_file``/``tls_key_file``/``client_ca_file``/``client_names`` settings.
- :func:`run_until_signal` serves until SIGTERM or SIGINT, then stops accepting, lets running
  requests finish (up to 10 s) and calls the service's cleanups.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import socketserver
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from http.server import ThreadingHTTPServer
from importlib import metadata
from typing import Any, Protocol

log = logging.getLogger("vslice.http")

MAX_BODY_BYTES = 8 * 1024 * 1024
LISTEN_BACKLOG = 1024
_STANDARD_RECORD_KEYS = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonLineFormatter(logging.Formatter):
    """One JSON object per record; ``extra=`` fields become keys of their own."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_RECORD_KEYS and not key.startswith("_"):
                line[key] = value
        if record.exc_info and record.exc_info[1] is not None:
            line["error"] = f"{type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
        return json.dumps(line, default=str)


def configure_logging(service: str, level: str = "info") -> None:
    """Route every logger to structured lines on stderr at ``level``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLineFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The Kubernetes client logs every retry at warning level through urllib3; keep ours.
    logging.getLogger("urllib3").setLevel(logging.ERROR)


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"

    @classmethod
    def json(cls, payload: object, status: int = 200) -> Response:
        return cls(status, json.dumps(payload, separators=(",", ":")).encode())

    @classmethod
    def text(cls, text: str, status: int = 200) -> Response:
        return cls(status, text.encode(), "text/plain; charset=utf-8")


Handler = Callable[[bytes], Response]


@dataclass(frozen=True)
class ClientAuth:
    """Routes only callers with a verified client certificate of an allowed CN may use."""

    names: frozenset[str]
    routes: frozenset[tuple[str, str]]

    def refusal(self, peer: dict[str, Any] | None) -> str | None:
        """None when ``peer`` (``SSLSocket.getpeercert()``) may call, else why not."""
        if not peer:
            return "a client certificate signed by the configured client CA is required"
        names = [v for rdn in peer.get("subject", ()) for k, v in rdn if k == "commonName"]
        if not set(names) & self.names:
            allowed = ", ".join(sorted(self.names))
            return f"client certificate CN {names[0] if names else ''!r} is not one of: {allowed}"
        return None


@dataclass
class ReloadingTlsContext:
    """An SSL server context rebuilt whenever the certificate, key or client CA file changes."""

    cert_file: str
    key_file: str
    client_ca_file: str = ""
    _stamp: tuple[float, ...] = ()
    _context: ssl.SSLContext | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def current(self) -> ssl.SSLContext:
        """The context for the files as they are now; while a rotation is half written (the
        new pair does not load), the previous context keeps serving."""
        with self._lock:
            try:
                files = [self.cert_file, self.key_file, *filter(None, [self.client_ca_file])]
                stamp = tuple(os.stat(name).st_mtime for name in files)
                if self._context is None or stamp != self._stamp:
                    self._context, self._stamp = self._load(), stamp
            except (OSError, ssl.SSLError) as exc:
                if self._context is None:
                    raise
                log.warning(
                    "certificate reload failed; serving the previous one", extra={"error": str(exc)}
                )
            return self._context

    def _load(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # A connection's client certificate is checked once (ClientAuth); no renegotiation
        # may replace it afterwards.
        context.options |= ssl.OP_NO_RENEGOTIATION
        context.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca_file:
            # OPTIONAL: a presented certificate must verify; which routes need one is ClientAuth's.
            context.verify_mode = ssl.CERT_OPTIONAL
            context.load_verify_locations(cafile=self.client_ca_file)
        log.info("certificate loaded", extra={"cert_file": self.cert_file})
        return context


class TlsSettings(Protocol):
    """The four settings of a service that may serve HTTPS with client certificates."""

    tls_cert_file: str
    tls_key_file: str
    client_ca_file: str
    client_names: list[str]


def serving_tls(
    settings: TlsSettings, guarded: Iterable[tuple[str, str]]
) -> tuple[ReloadingTlsContext | None, ClientAuth | None]:
    """HTTPS when ``tls_cert_file`` is set; with ``client_ca_file`` too, the ``guarded``
    routes answer only the allowed client certificates."""
    if not settings.tls_cert_file:
        return None, None
    tls = ReloadingTlsContext(
        settings.tls_cert_file, settings.tls_key_file, settings.client_ca_file
    )
    if not settings.client_ca_file:
        return tls, None
    return tls, ClientAuth(frozenset(settings.client_names), frozenset(guarded))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    # listen(2) backlog. socketserver's default of 5 overflows when the API server or the
    # scheduler opens a burst of connections at once (the kernel then drops SYNs: 1 s
    # retransmit tails and resets at 20 concurrent connections); the kernel caps it at
    # net.core.somaxconn anyway.
    request_queue_size = LISTEN_BACKLOG

    def __init__(
        self,
        address: tuple[str, int],
        routes: Mapping[tuple[str, str], Handler],
        tls: ReloadingTlsContext | None,
        client_auth: ClientAuth | None = None,
    ) -> None:
        self.routes = routes
        self.tls = tls
        self.client_auth = client_auth
        self.in_flight = 0
        self.settled = threading.Condition()
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _RequestHandler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        if self.tls is None:
            return sock, address
        try:
            context = self.tls.current()
        except (OSError, ssl.SSLError) as exc:
            # This connection is dropped; the server keeps accepting and retries the files.
            sock.close()
            log.error("cannot load TLS certificate", extra={"error": str(exc)})
            raise
        # The handshake runs in the request's own thread, not in the accept loop.
        return context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), address

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        log.debug("connection error", extra={"peer": str(client_address), "error": str(exc)})


_MAX_LINE = 65536
_MAX_HEADERS = 100
_REASONS = {status.value: status.phrase for status in HTTPStatus}


class _Refused(Exception):
    """A request that cannot be served; the answer is sent and the connection closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.response = Response.text(message, status)


@dataclass
class _Request:
    method: str
    path: str
    headers: dict[str, str]
    keep_alive: bool


class _RequestHandler(socketserver.StreamRequestHandler):
    """HTTP/1.1 with persistent connections, read directly from the socket's buffer.

    The standard library's ``BaseHTTPRequestHandler`` parses each request's headers with the
    e-mail package's parser and formats a log line and a date for every answer: that was most
    of the extender's interpreter time per call outside its handlers, and kube-scheduler waits
    for every filter answer inside its scheduling cycle. The callers here (kube-scheduler,
    the API server, probes, Prometheus) send small requests with ``Content-Length``; a
    chunked body, a folded header line or an over-long line is refused with a status naming
    it, as the standard server refuses what it cannot read.
    """

    timeout = 60
    # Headers and body leave in one write; without Nagle's algorithm no answer waits for the
    # client's delayed ACK (40 ms).
    disable_nagle_algorithm = True
    server: _Server
    _peer: tuple[dict[str, Any] | None] | None = None  # the client certificate, once read

    def handle(self) -> None:
        while True:
            try:
                request = self._read_request()
            except _Refused as refused:
                self._send(refused.response, keep_alive=False)
                return
            except (OSError, ValueError) as exc:  # reset, timeout, TLS failure
                log.debug("connection ended", extra={"error": str(exc)})
                return
            if request is None:  # the client closed the connection between requests
                return
            response = self._serve(request)
            self._send(response, request.keep_alive)
            if not request.keep_alive:
                return

    def _line(self) -> bytes:
        line = self.rfile.readline(_MAX_LINE + 1)
        if len(line) > _MAX_LINE:
            raise _Refused(431, f"a request line or header is longer than {_MAX_LINE} bytes")
        return line

    def _read_request(self) -> _Request | None:
        line = self._line()
        if not line:
            return None
        parts = line.split()
        if len(parts) != 3:
            raise _Refused(400, f"malformed request line {line[:80]!r}")
        method, target, version = (part.decode("latin-1") for part in parts)
        if version not in ("HTTP/1.1", "HTTP/1.0"):
            raise _Refused(505, f"HTTP version {version[:20]!r} is not served; use HTTP/1.1")
        headers: dict[str, str] = {}
        for _ in range(_MAX_HEADERS + 1):
            raw = self._line()
            if not raw:  # the client went away in the middle of its headers
                return None
            if raw in (b"\r\n", b"\n"):
                break
            name, colon, value = raw.partition(b":")
            if not colon or not name or name[:1] in b" \t" or name != name.rstrip():
                raise _Refused(400, f"malformed header line {raw[:80]!r}")
            headers[name.decode("latin-1").lower()] = value.strip().decode("latin-1")
        else:
            raise _Refused(431, f"more than {_MAX_HEADERS} header lines")
        tokens = headers.get("connection", "").lower()
        keep_alive = "close" not in tokens and (version == "HTTP/1.1" or "keep-alive" in tokens)
        if "transfer-encoding" in headers:
            raise _Refused(411, "a request body must be sent with Content-Length, not chunked")
        if headers.get("expect", "").lower() == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return _Request(method, target.split("?", 1)[0], headers, keep_alive)

    def _serve(self, request: _Request) -> Response:
        method, path = request.method, request.path
        handler = self.server.routes.get((method, path))
        if handler is None:
            if method not in {m for m, _ in self.server.routes}:
                return Response.text(f"method {method!r} is not served", 501)
            known = sorted({p for m, p in self.server.routes if m == method})
            return Response.text(f"no route {method} {path}; known: {', '.join(known)}", 404)
        body = self._read_body(request)
        if isinstance(body, Response):
            return body
        refusal = self._refusal(method, path)
        if refusal is not None:
            log.warning("caller refused", extra={"path": path, "error": refusal})
            return Response.text(f"forbidden: {refusal}", 403)
        started = time.perf_counter()
        with self.server.settled:
            self.server.in_flight += 1
        try:
            response = handler(body)
        except Exception as exc:  # a handler bug must not take the server down
            log.exception("handler failed", extra={"path": path})
            response = Response.text(f"internal error: {type(exc).__name__}: {exc}", 500)
        finally:
            with self.server.settled:
                self.server.in_flight -= 1
                if self.server.in_flight == 0:  # only stop() waits, and only for zero
                    self.server.settled.notify_all()
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "request",
                extra={
                    "method": method,
                    "path": path,
                    "status": response.status,
                    "ms": round((time.perf_counter() - started) * 1000, 3),
                },
            )
        return response

    def _refusal(self, method: str, path: str) -> str | None:
        auth = self.server.client_auth
        if auth is None or (method, path) not in auth.routes:
            return None
        if not isinstance(self.connection, ssl.SSLSocket):
            return "this route is served over HTTPS with a client certificate only"
        if self._peer is None:
            # Decoded once per connection (a dict built from the certificate on every call
            # was 5 % of the extender's interpreter time); renegotiation, which could change
            # the peer mid-connection, is off in the server's context.
            self._peer = (self.connection.getpeercert(),)
        return auth.refusal(self._peer[0])

    def _read_body(self, request: _Request) -> bytes | Response:
        raw_length = request.headers.get("content-length", "0")
        if not (raw_length.isascii() and raw_length.isdigit()):  # not "²", which int() refuses
            request.keep_alive = False  # the body's end is unknown: nothing after it is read
            return Response.text(f"Content-Length must be a number, got {raw_length!r}", 400)
        length = int(raw_length)
        if length > MAX_BODY_BYTES:
            request.keep_alive = False  # the body is not read: it must not pass for a request
            return Response.text(f"body of {length} bytes exceeds {MAX_BODY_BYTES}", 413)
        return self.rfile.read(length) if length else b""

    def _send(self, response: Response, keep_alive: bool) -> None:
        head = (
            f"HTTP/1.1 {response.status} {_REASONS.get(response.status, '')}\r\n"
            f"Date: {_http_date()}\r\n"
            f"Content-Type: {response.content_type}\r\n"
            f"Content-Length: {len(response.body)}\r\n"
        )
        if not keep_alive:
            head += "Connection: close\r\n"
        head += "\r\n"
        # Status line, headers and body in one write: over TLS every write is a record and a
        # system call, and the extender answers hundreds of calls a second.
        self.wfile.write(head.encode("latin-1") + response.body)


_date_cache: tuple[int, str] = (0, "")


def _http_date() -> str:
    """The Date header (RFC 9110 asks a server with a clock to send it), formatted once a
    second."""
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, formatdate(now, usegmt=True))
    return _date_cache[1]


def _healthz(_: bytes) -> Response:
    return Response.text("ok")


def release_version() -> str:
    """The version of the installed ``vslice`` distribution, read once per process: a
    service keeps answering with the release it was started from after ``current`` moves."""
    try:
        return metadata.version("vslice")
    except metadata.PackageNotFoundError:
        return "unknown"


_VERSION = release_version()


def _version(_: bytes) -> Response:
    return Response.json({"version": _VERSION})


class HttpService:
    """A threaded HTTP(S) server over ``routes`` (``(method, path) -> handler``) plus /healthz
    and /version."""

    def __init__(
        self,
        listen: tuple[str, int],
        routes: Mapping[tuple[str, str], Handler],
        *,
        tls: ReloadingTlsContext | None = None,
        client_auth: ClientAuth | None = None,
    ) -> None:
        table = {("GET", "/healthz"): _healthz, ("GET", "/version"): _version, **routes}
        self._server = _Server(listen, table, tls, client_auth)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True
        )
        self._thread.start()

    def stop(self, grace_seconds: float = 10.0) -> None:
        """Stop accepting, give calls being handled up to ``grace_seconds`` to finish."""
        self._server.shutdown()
        self._server.server_close()
        with self._server.settled:
            if not self._server.settled.wait_for(
                lambda: self._server.in_flight == 0, timeout=grace_seconds
            ):
                log.warning(
                    "stopped with calls still running", extra={"calls": self._server.in_flight}
                )


def run_until_signal(
    services: Iterable[HttpService], cleanups: Iterable[Callable[[], None]] = ()
) -> int:
    """Serve until SIGTERM/SIGINT, then stop the servers and run ``cleanups`` in order."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("stopping", extra={"signal": signal.Signals(signum).name})
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    servers = list(services)
    try:
        for server in servers:
            server.start()
        while not stop.wait(1.0):
            pass
    finally:
        for server in servers:
            server.stop()
        for cleanup in cleanups:
            cleanup()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    log.info("stopped")
    return 0
