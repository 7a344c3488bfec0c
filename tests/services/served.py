"""Running the extender and the webhook on loopback for protocol tests, and talking to them.

The servers are the real ones (``HttpService`` with the services' own routes); the clients
are the standard library's HTTP(S) clients, as the scheduler and the apiserver would call.
"""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vslice_lab.pki import KeyPair, ensure_ca, issue
from vslice_serving.httpserve import HttpService


@dataclass
class Reply:
    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@contextmanager
def running(service: HttpService) -> Iterator[HttpService]:
    service.start()
    try:
        yield service
    finally:
        service.stop()


def call(
    port: int,
    method: str,
    path: str,
    body: bytes | dict[str, Any] | None = None,
    *,
    tls: ssl.SSLContext | None = None,
) -> Reply:
    payload = json.dumps(body).encode() if isinstance(body, dict) else body
    if tls is None:
        conn: http.client.HTTPConnection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    else:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=tls)
    try:
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        conn.request(method, path, body=payload, headers=headers)
        response = conn.getresponse()
        return Reply(response.status, response.read())
    finally:
        conn.close()


def serving_pair(directory: Path, name: str = "webhook") -> tuple[KeyPair, KeyPair]:
    """A CA and a serving certificate for 127.0.0.1 signed by it."""
    ca = ensure_ca(directory)
    return ca, issue(ca, directory, name, common_name=name, hosts=("127.0.0.1",), server=True)


def client_context(ca: KeyPair) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca.cert))
    return context


def apply_patch(document: Any, ops: list[dict[str, Any]]) -> Any:
    """Apply ``add``/``replace``/``remove`` JSON Patch operations (enough for the webhook's)."""
    for op in ops:
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        parent = document
        for token in tokens[:-1]:
            parent = parent[int(token)] if isinstance(parent, list) else parent[token]
        last = tokens[-1]
        assert op["op"] in ("add", "replace", "remove"), op
        if op["op"] == "remove":
            assert last in parent, f"remove of a missing key: {op}"
            del parent[last]
            continue
        if isinstance(parent, list):
            if last == "-":
                parent.append(op["value"])
            else:
                parent.insert(int(last), op["value"])
        else:
            if op["op"] == "replace":
                assert last in parent, f"replace of a missing key: {op}"
            parent[last] = op["value"]
    return document
