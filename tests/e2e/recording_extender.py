"""A recording scheduler extender for the end-to-end tests (test code, not part of vslice).

kube-scheduler in the test lab is pointed at this server. It records every call (verb and
JSON body) and then either forwards it unchanged to the real vslice extender (``upstream``)
and records the answer too, or, when no real extender runs, answers the way a minimal
extender must: filter passes every node it was sent, bind creates the Binding through the API.
Tests assert on ``calls`` to see exactly what kube-scheduler sent.

With ``tls`` it stands where the real extender stands in the lab: HTTPS with the extender's
serving certificate, answering only clients whose certificate the lab CA signed (so every
pod the e2e tests schedule goes through kube-scheduler's ``enableHTTPS`` + ``tlsConfig``
client certificate), and it forwards to an ``https://`` upstream with kube-scheduler's client
certificate, which the real extender demands for its verbs.
"""

from __future__ import annotations

import json
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

Binder = Callable[[str, str, str, str], None]
"""bind(namespace, pod name, pod uid, node) -> None; raises on failure."""


@dataclass
class Call:
    """One request kube-scheduler made, and what it got back."""

    verb: str
    body: dict[str, Any]
    answer: dict[str, Any] | None = None
    status: int = 200


@dataclass(frozen=True)
class ProxyTls:
    """Certificates of the TLS mode (see the module docstring)."""

    ca: Path
    serving_cert: Path
    serving_key: Path
    client_cert: Path
    client_key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.serving_cert, self.serving_key)
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cafile=self.ca)
        return context

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(self.client_cert, self.client_key)
        return context


class _TlsServer(ThreadingHTTPServer):
    context: ssl.SSLContext | None = None

    def get_request(self) -> tuple[Any, Any]:
        sock, address = super().get_request()
        if self.context is None:
            return sock, address
        # Handshake in the request's thread, so one silent client never stalls the others.
        return self.context.wrap_socket(
            sock, server_side=True, do_handshake_on_connect=False
        ), address


@dataclass
class RecordingExtender:
    """See the module docstring. ``start()`` binds a free loopback port (``url``)."""

    upstream: str | None = None
    binder: Binder | None = None
    tls: ProxyTls | None = None
    calls: list[Call] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: _TlsServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "start() first"
        host, port = self._server.server_address[:2]
        return f"{'https' if self.tls else 'http'}://{host!s}:{port}"

    def start(self) -> RecordingExtender:
        self._server = _TlsServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._server.context = self.tls.server_context() if self.tls else None
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def calls_for(self, verb: str, pod_name: str) -> list[Call]:
        """Recorded calls of one verb that concern the named pod."""
        with self._lock:
            return [c for c in self.calls if c.verb == verb and _pod_name(c.body) == pod_name]

    def answer(self, verb: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        call = Call(verb, body)
        with self._lock:
            self.calls.append(call)
        if self.upstream:
            context = self.tls.client_context() if self.tls else None
            call.status, call.answer = _forward(f"{self.upstream}/{verb}", body, context)
        else:
            call.status, call.answer = 200, self._answer_locally(verb, body)
        return call.status, call.answer

    def _answer_locally(self, verb: str, body: dict[str, Any]) -> dict[str, Any]:
        if verb == "filter":
            return {"NodeNames": body.get("NodeNames") or [], "FailedNodes": {}, "Error": ""}
        if verb == "bind":
            if self.binder is None:
                return {"Error": "recording extender has no binder"}
            try:
                self.binder(body["PodNamespace"], body["PodName"], body["PodUID"], body["Node"])
            except Exception as error:  # answered to kube-scheduler, which retries the pod
                return {"Error": f"bind failed: {error}"}
            return {"Error": ""}
        return {"Error": f"unknown verb {verb}"}


def _pod_name(body: dict[str, Any]) -> str | None:
    if "PodName" in body:
        return str(body["PodName"])
    pod = body.get("Pod") or {}
    name = (pod.get("metadata") or {}).get("name")
    return str(name) if name is not None else None


def _forward(
    url: str, body: dict[str, Any], context: ssl.SSLContext | None
) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    if not url.startswith("https://"):
        context = None  # a plain-HTTP replica a test put in between
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, {"Error": error.read().decode(errors="replace")}


def _handler_for(recorder: RecordingExtender) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._send(200, b"ok", "text/plain")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            status, answer = recorder.answer(self.path.strip("/"), body)
            self._send(status, json.dumps(answer).encode(), "application/json")

        def _send(self, status: int, payload: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            return  # kube-scheduler calls often; the recorded calls are the log

    return Handler
