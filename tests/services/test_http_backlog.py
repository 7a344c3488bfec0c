"""The shared HTTP server holds a burst of connections (extender and webhook alike).

With socketserver's default listen backlog of 5, a burst of connections overflows the
kernel's accept queue, SYNs are dropped and the clients retransmit after 1 s (or get reset):
the 1 s tails seen at 20 concurrent scheduler calls.
"""

from __future__ import annotations

import http.client
import threading
import time

from served import running
from vslice_serving.httpserve import HttpService, Response

BURST = 64


def test_64_concurrent_connections_all_succeed_quickly() -> None:
    service = HttpService(("127.0.0.1", 0), {("POST", "/echo"): lambda body: Response.text("ok")})
    with running(service):
        start = threading.Barrier(BURST)
        latencies: list[float] = []
        failures: list[str] = []

        def one() -> None:
            start.wait()
            began = time.perf_counter()
            try:
                conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=10)
                conn.request("POST", "/echo", b"x")
                reply = conn.getresponse()
                assert reply.read() == b"ok"
                conn.close()
            except (OSError, AssertionError) as exc:
                failures.append(repr(exc))
            latencies.append(time.perf_counter() - began)

        threads = [threading.Thread(target=one) for _ in range(BURST)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []
    # A dropped SYN is retried after 1 s: every connection must beat that by a wide margin.
    assert max(latencies) < 0.8, sorted(latencies)[-5:]
