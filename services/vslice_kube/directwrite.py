"""JSON writes to the API server over kept-alive TLS connections, without the client stack.

The extender creates a Binding per pod while kube-scheduler waits for its filter answers in
the same interpreter. Through the generated Kubernetes client (37.x: pydantic validation of
every call's arguments, its model serialization, then urllib3 and ``http.client``, whose
header parsing goes through the e-mail package) a Binding cost more interpreter time than
the extender's whole filter decision; the part of that which was urllib3 and ``http.client``
alone was still about a fifth of the extender's interpreter time in a burst. A
:class:`DirectWriter` sends the request in one write and reads the answer's status line,
headers and body itself (``Content-Length`` or chunked), over connections it keeps open.

What it takes from the client's configuration, so it talks to the same server the same way:
the URL, the CA (file or data), the client certificate, ``verify_ssl``, ``assert_hostname``,
``tls_server_name``, the credentials (``auth_settings()``, refreshed as the client refreshes
them) and the User-Agent. A configuration that goes through a proxy, or plain HTTP, is
written through the client's own urllib3 pool instead (:func:`_pooled`): slower, but every
setting honoured. Refusals raise the client's own ``ApiException``, so
:func:`~vslice_kube.apierrors.translated` gives the same ``ClusterError`` (with the server's
code) as for generated calls; a connection failure raises ``OSError``.
"""

from __future__ import annotations

import contextlib
import io
import json
import socket
import ssl
import threading
import weakref
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

__all__ = ["DirectWriter", "post_json"]

_MAX_LINE = 65536
_MAX_HEADERS = 200
_IDLE_KEPT = 8


@dataclass
class _Connection:
    sock: ssl.SSLSocket
    reader: io.BufferedReader
    reused: bool = False

    def close(self) -> None:
        for closing in (self.reader.close, self.sock.close):
            with contextlib.suppress(OSError):
                closing()


@dataclass(frozen=True)
class _Answer:
    status: int
    reason: str
    body: bytes
    keep_alive: bool


class _Stale(Exception):
    """A kept-alive connection the server had closed before this request reached it."""


class DirectWriter:
    """POSTs of JSON bodies to one API server, as the client's configuration says."""

    def __init__(self, api: k8s.ApiClient) -> None:
        self._api = api
        configuration = api.configuration
        url = urlsplit(configuration.host)
        self._host = url.hostname or "localhost"
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._prefix = url.path.rstrip("/")
        bracketed = f"[{self._host}]" if ":" in self._host else self._host  # an IPv6 address
        self._authority = f"{bracketed}:{url.port}" if url.port else bracketed  # no userinfo
        self.direct = url.scheme == "https" and not configuration.proxy
        self._server_name = configuration.tls_server_name or self._host
        self._context = _tls_context(configuration) if self.direct else None
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()

    def post(self, path: str, body: dict[str, Any], *, timeout_s: float) -> bytes:
        """The raw answer of a 2xx; else ``ApiException`` with the server's status."""
        payload = json.dumps(body, separators=(",", ":")).encode()
        if not self.direct:
            return _pooled(self._api, path, payload, timeout_s)
        request = self._request(path, payload)
        connection = self._take(timeout_s)
        try:
            try:
                answer = self._exchange(connection, request, timeout_s)
            except _Stale:
                connection.close()
                connection = self._open(timeout_s)
                answer = self._exchange(connection, request, timeout_s)
        except BaseException:
            connection.close()
            raise
        if answer.keep_alive:
            self._give_back(connection)
        else:
            connection.close()
        if not 200 <= answer.status < 300:
            text = answer.body.decode("utf-8", errors="replace")
            raise ApiException(status=answer.status, reason=answer.reason, body=text)
        return answer.body

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def _request(self, path: str, payload: bytes) -> bytes:
        lines = [
            f"POST {self._prefix}{path} HTTP/1.1",
            f"Host: {self._authority}",
            "Content-Type: application/json",
            "Accept: application/json",
            f"User-Agent: {self._api.user_agent}",
            f"Content-Length: {len(payload)}",
        ]
        for setting in self._api.configuration.auth_settings().values():
            if setting["in"] == "header":
                lines.append(f"{setting['key']}: {setting['value']}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload

    def _take(self, timeout_s: float) -> _Connection:
        with self._lock:
            if self._idle:
                connection = self._idle.pop()
                connection.reused = True
                return connection
        return self._open(timeout_s)

    def _give_back(self, connection: _Connection) -> None:
        with self._lock:
            if len(self._idle) < _IDLE_KEPT:
                self._idle.append(connection)
                return
        connection.close()

    def _open(self, timeout_s: float) -> _Connection:
        assert self._context is not None
        raw = socket.create_connection((self._host, self._port), timeout=timeout_s)
        try:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock = self._context.wrap_socket(raw, server_hostname=self._server_name)
        except BaseException:
            raw.close()
            raise
        return _Connection(sock, sock.makefile("rb"))

    def _exchange(self, connection: _Connection, request: bytes, timeout_s: float) -> _Answer:
        connection.sock.settimeout(timeout_s)
        try:
            connection.sock.sendall(request)
            status_line = connection.reader.readline(_MAX_LINE + 1)
        except (ConnectionResetError, BrokenPipeError, ssl.SSLEOFError) as exc:
            if connection.reused:
                raise _Stale from exc
            raise
        if not status_line:
            if connection.reused:
                raise _Stale
            raise ConnectionError("the API server closed the connection without an answer")
        return _read_answer(status_line, connection.reader)


def _read_answer(status_line: bytes, reader: io.BufferedReader) -> _Answer:
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise ConnectionError(f"not an HTTP answer from the API server: {status_line[:80]!r}")
    status = int(parts[1])
    reason = parts[2].strip().decode("latin-1") if len(parts) > 2 else ""
    headers: dict[bytes, bytes] = {}
    for _ in range(_MAX_HEADERS):
        line = reader.readline(_MAX_LINE + 1)
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    else:
        raise ConnectionError(f"more than {_MAX_HEADERS} header lines in the API server's answer")
    keep_alive = b"close" not in headers.get(b"connection", b"").lower()
    if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
        body = _chunked(reader)
    elif (length := headers.get(b"content-length")) is not None:
        body = _exactly(reader, _number(length, 10, "Content-Length"))
    else:  # delimited by the end of the connection
        body, keep_alive = reader.read(), False
    return _Answer(status, reason, body, keep_alive)


def _number(text: bytes, base: int, what: str) -> int:
    """A number of the answer's framing; anything else ends the connection (OSError)."""
    try:
        value = int(text.strip(), base)
    except ValueError:
        value = -1
    if value < 0:
        raise ConnectionError(f"the API server's answer has a bad {what}: {text[:40]!r}")
    return value


def _exactly(reader: io.BufferedReader, length: int) -> bytes:
    data = reader.read(length)
    if len(data) != length:
        raise ConnectionError(f"answer cut short: {len(data)} of {length} bytes")
    return data


def _chunked(reader: io.BufferedReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size = _number(reader.readline(_MAX_LINE + 1).split(b";", 1)[0], 16, "chunk size")
        if size == 0:
            while reader.readline(_MAX_LINE + 1) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(parts)
        parts.append(_exactly(reader, size))
        reader.readline(_MAX_LINE + 1)  # the CRLF after each chunk


def _tls_context(configuration: k8s.Configuration) -> ssl.SSLContext:
    """The TLS settings urllib3 would apply for this configuration (kubernetes.client.rest)."""
    context = ssl.create_default_context(
        cafile=configuration.ssl_ca_cert or None, cadata=configuration.ca_cert_data or None
    )
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif configuration.assert_hostname is False:
        context.check_hostname = False
    return context


def _pooled(api: k8s.ApiClient, path: str, payload: bytes, timeout_s: float) -> bytes:
    """The same POST through the client's urllib3 pool (proxies, plain HTTP)."""
    configuration = api.configuration
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json",
        "User-Agent": str(api.user_agent),
    }
    for setting in configuration.auth_settings().values():
        if setting["in"] == "header":
            headers[setting["key"]] = setting["value"]
    answer = api.rest_client.pool_manager.request(
        "POST",
        configuration.host.rstrip("/") + path,
        body=payload,
        headers=headers,
        timeout=urllib3.Timeout(total=timeout_s),
    )
    if not 200 <= answer.status < 300:
        text = answer.data.decode("utf-8", errors="replace")
        raise ApiException(status=answer.status, reason=answer.reason, body=text)
    data: bytes = answer.data
    return data


_WRITERS: weakref.WeakKeyDictionary[k8s.ApiClient, DirectWriter] = weakref.WeakKeyDictionary()
_WRITERS_LOCK = threading.Lock()


def post_json(api: k8s.ApiClient, path: str, body: dict[str, Any], *, timeout_s: float) -> bytes:
    """POST ``body`` as JSON to ``path`` (``/api/v1/...``) through the client's own
    :class:`DirectWriter` (one per client, made on first use)."""
    with _WRITERS_LOCK:
        writer = _WRITERS.get(api)
        if writer is None:
            writer = _WRITERS[api] = DirectWriter(api)
    return writer.post(path, body, timeout_s=timeout_s)
