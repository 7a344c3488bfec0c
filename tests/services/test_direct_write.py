"""The extender's Binding writer (vslice_kube.directwrite) against a scripted TLS server.

The writer reads the API server's answers itself, so the framings an HTTP/1.1 server may use
(Content-Length, chunked, end of connection), kept-alive and closed connections, a kept-alive
connection the server dropped meanwhile, and refusals are each checked here over real TLS
with the client configuration the Kubernetes client would use. The real API server answers
the extender's Bindings in the end-to-end tests.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kubernetes import client as k8s
from served import serving_pair
from vslice_core.errors import ClusterError
from vslice_kube.apierrors import translated
from vslice_kube.directwrite import DirectWriter

Reply = Callable[[bytes], bytes]


@dataclass
class Scripted:
    """A TLS server answering each request with the next reply; it records what it got."""

    port: int
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0


def ok(body: bytes = b'{"kind":"Status","status":"Success"}', *extra: str) -> Reply:
    head = ["HTTP/1.1 201 Created", f"Content-Length: {len(body)}", *extra]
    return lambda _request: ("\r\n".join(head) + "\r\n\r\n").encode() + body


def chunked(*chunks: bytes) -> Reply:
    framed = b"".join(f"{len(c):x}\r\n".encode() + c + b"\r\n" for c in chunks) + b"0\r\n\r\n"
    return lambda _request: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + framed


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    ca, server = serving_pair(tmp_path, "apiserver")
    return ca.cert, server.cert, server.key


def serve(files: tuple[Path, Path, Path], replies: list[Reply], *, drop_after: int = 0) -> Scripted:
    """Answer ``replies`` in order; with ``drop_after``, close each connection after that
    many answers without saying so (as a server closing an idle kept-alive connection)."""
    _, cert, key = files
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    scripted = Scripted(listener.getsockname()[1])
    pending = list(replies)

    def one(conn: ssl.SSLSocket) -> None:
        reader = conn.makefile("rb")
        answered = 0
        while pending:
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                line = reader.readline()
                if not line:
                    return
                head += line
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
            request = head + reader.read(length)
            scripted.requests.append(request)
            reply = pending.pop(0)(request)
            conn.sendall(reply)
            answered += 1
            if b"Connection: close" in reply or (drop_after and answered >= drop_after):
                break
        conn.close()

    def accept() -> None:
        while pending:
            raw, _ = listener.accept()
            scripted.connections += 1
            with contextlib.suppress(OSError):  # a client gone mid-request
                one(context.wrap_socket(raw, server_side=True))

    threading.Thread(target=accept, daemon=True).start()
    return scripted


@pytest.fixture
def writer_for(tls_files: tuple[Path, Path, Path]) -> Iterator[Callable[[int], DirectWriter]]:
    made: list[DirectWriter] = []

    def make(port: int) -> DirectWriter:
        configuration = k8s.Configuration(host=f"https://127.0.0.1:{port}")
        configuration.ssl_ca_cert = str(tls_files[0])
        configuration.api_key = {"BearerToken": "secret-token"}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
        writer = DirectWriter(k8s.ApiClient(configuration))
        made.append(writer)
        return writer

    yield make
    for writer in made:
        writer.close()


BODY = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}}


def test_posts_json_with_the_clients_credentials_and_keeps_the_connection(
    tls_files: tuple[Path, Path, Path], writer_for: Callable[[int], DirectWriter]
) -> None:
    server = serve(tls_files, [ok(), ok(b"second")])
    writer = writer_for(server.port)
    assert writer.direct
    writer.post("/api/v1/namespaces/a/bindings", BODY, timeout_s=5)
    assert writer.post("/api/v1/namespaces/a/bindings", BODY, timeout_s=5) == b"second"
    assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"POST /api/v1/namespaces/a/bindings HTTP/1.1\r\n")
    assert f"\r\nHost: 127.0.0.1:{server.port}\r\n".encode() in first
    assert b"\r\nauthorization: Bearer secret-token\r\n" in first
    assert b"Content-Type: application/json" in first
    assert first.endswith(b'{"apiVersion":"v1","kind":"Binding","metadata":{"name":"p"}}')


def test_a_chunked_answer_and_an_answer_ended_by_closing_are_read_whole(
    tls_files: tuple[Path, Path, Path], writer_for: Callable[[int], DirectWriter]
) -> None:
    until_close: Reply = lambda _r: b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it"  # noqa: E731
    server = serve(tls_files, [chunked(b"ab", b"cde"), until_close, ok()])
    writer = writer_for(server.port)
    assert writer.post("/x", BODY, timeout_s=5) == b"abcde"
    assert writer.post("/x", BODY, timeout_s=5) == b"all of it"
    writer.post("/x", BODY, timeout_s=5)
    assert server.connections == 2  # the closing answer was not reused


def test_a_kept_alive_connection_the_server_dropped_is_replaced_and_the_request_sent_once(
    tls_files: tuple[Path, Path, Path], writer_for: Callable[[int], DirectWriter]
) -> None:
    server = serve(tls_files, [ok(b"one"), ok(b"two")], drop_after=1)
    writer = writer_for(server.port)
    assert writer.post("/x", BODY, timeout_s=5) == b"one"
    assert writer.post("/x", BODY, timeout_s=5) == b"two"
    assert server.connections == 2 and len(server.requests) == 2


def test_a_refusal_becomes_a_cluster_error_with_the_servers_code_and_message(
    tls_files: tuple[Path, Path, Path], writer_for: Callable[[int], DirectWriter]
) -> None:
    status = b'{"kind":"Status","message":"pod p is already assigned to node n1","code":409}'
    refused: Reply = lambda _r: (  # noqa: E731
        f"HTTP/1.1 409 Conflict\r\nContent-Length: {len(status)}\r\n\r\n".encode() + status
    )
    server = serve(tls_files, [refused])
    writer = writer_for(server.port)
    with pytest.raises(ClusterError) as caught, translated("bind pod a/p to n1"):
        writer.post("/x", BODY, timeout_s=5)
    assert caught.value.code == 409
    assert "bind pod a/p to n1: 409 pod p is already assigned to node n1" in str(caught.value)


@pytest.mark.parametrize(
    "answer",
    [b"SMTP ready\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\n"],
    ids=["not-http", "bad-length"],
)
def test_an_answer_that_is_not_http_is_a_connection_failure_not_a_traceback(
    tls_files: tuple[Path, Path, Path], writer_for: Callable[[int], DirectWriter], answer: bytes
) -> None:
    server = serve(tls_files, [lambda _r: answer])
    writer = writer_for(server.port)
    with pytest.raises(ClusterError, match="cannot reach the API server"), translated("bind"):
        writer.post("/x", BODY, timeout_s=5)


def test_a_server_that_is_not_there_is_a_connection_failure(
    writer_for: Callable[[int], DirectWriter],
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens once it is closed
    writer = writer_for(port)
    with pytest.raises(ClusterError, match="connection refused"), translated("bind"):
        writer.post("/x", BODY, timeout_s=5)
