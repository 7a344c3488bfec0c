"""How the shared HTTP server reads requests off the wire (vslice_serving.httpserve).

The server reads HTTP/1.1 itself (the standard library's request handler was most of the
extender's interpreter time outside its verbs), so what it refuses and how it keeps
connections is checked here byte for byte, over a raw socket.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from served import running
from vslice_serving.httpserve import HttpService, Response


@pytest.fixture
def port() -> Iterator[int]:
    def echo(body: bytes) -> Response:
        return Response(200, b"got " + body, "text/plain")

    service = HttpService(("127.0.0.1", 0), {("POST", "/echo"): echo})
    with running(service):
        yield service.port


def exchange(port: int, raw: bytes, *, answers: int = 1) -> list[tuple[str, dict[str, str], bytes]]:
    """Send ``raw``, read ``answers`` responses (status line, headers, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(raw)
        reader = sock.makefile("rb")
        replies = []
        for _ in range(answers):
            status = reader.readline().decode().strip()
            headers: dict[str, str] = {}
            while (line := reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                headers[name.lower()] = value.strip()
            body = reader.read(int(headers.get("content-length", "0")))
            replies.append((status, headers, body))
        return replies


def post(body: bytes, *extra: str) -> bytes:
    head = ["POST /echo HTTP/1.1", "Host: x", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def test_requests_on_one_kept_alive_connection_are_answered_in_order(port: int) -> None:
    replies = exchange(port, post(b"one") + post(b"two") + post(b"3"), answers=3)
    assert [(status, body) for status, _, body in replies] == [
        ("HTTP/1.1 200 OK", b"got one"),
        ("HTTP/1.1 200 OK", b"got two"),
        ("HTTP/1.1 200 OK", b"got 3"),
    ]
    assert all("connection" not in headers and "date" in headers for _, headers, _ in replies)


def test_connection_close_and_http_1_0_end_the_connection_after_the_answer(port: int) -> None:
    for raw in (post(b"a", "Connection: close"), post(b"b").replace(b"HTTP/1.1", b"HTTP/1.0")):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(raw)
            received = b""
            while chunk := sock.recv(4096):  # the server closes: recv returns b""
                received += chunk
        assert received.startswith(b"HTTP/1.1 200 OK") and b"Connection: close" in received


@pytest.mark.parametrize(
    ("raw", "status", "says"),
    [
        (b"POST /echo\r\n\r\n", "400", "malformed request line"),
        (b"POST /echo HTTP/2.0\r\n\r\n", "505", "HTTP/2.0"),
        (b"POST /echo HTTP/1.1\r\n folded: x\r\n\r\n", "400", "malformed header line"),
        (b"POST /echo HTTP/1.1\r\nno colon here\r\n\r\n", "400", "malformed header line"),
        (b"POST /echo HTTP/1.1\r\nName : v\r\n\r\n", "400", "malformed header line"),
        (b"POST /echo HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n", "431", "longer than"),
        (b"POST /echo HTTP/1.1\r\n" + b"X: y\r\n" * 101 + b"\r\n", "431", "more than 100"),
        (b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "411", "chunked"),
        (b"POST /echo HTTP/1.1\r\nContent-Length: -1\r\n\r\n", "400", "'-1'"),
        (b"POST /echo HTTP/1.1\r\nContent-Length: \xb2\r\n\r\n", "400", "must be a number"),
        (b"POST /echo HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n", "413", "exceeds"),
        (b"DELETE /echo HTTP/1.1\r\n\r\n", "501", "'DELETE' is not served"),
        (b"POST /other HTTP/1.1\r\n\r\n", "404", "known: /echo"),
    ],
)
def test_what_cannot_be_read_is_refused_with_a_status_that_names_it(
    port: int, raw: bytes, status: str, says: str
) -> None:
    [(line, _, body)] = exchange(port, raw)
    assert line.split()[1] == status, (line, body)
    assert says in body.decode()


def test_a_refused_body_closes_the_connection_so_it_is_never_read_as_a_request(
    port: int,
) -> None:
    raw = b"POST /echo HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n" + post(b"smuggled")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(raw)
        received = b""
        while chunk := sock.recv(4096):
            received += chunk
    assert received.count(b"HTTP/1.1 ") == 1 and b"413" in received
    assert b"smuggled" not in received


def test_expect_100_continue_is_answered_before_the_body_is_read(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(b"body")
        assert b"got body" in sock.recv(4096)
