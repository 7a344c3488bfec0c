"""Health probes: an HTTP(S) GET that says whether a component answers "ok"; for ``unix://PATH``
a connection to a unix socket; for ``cri://PATH`` the CRI ``RuntimeService/Version`` call, which
containerd answers only once its CRI plugin serves (the socket accepts connections earlier, and
a kubelet started then exits with "unknown service runtime.v1.RuntimeService").

HTTPS probes trust only the lab's CA and, for the apiserver, present the admin client
certificate. A probe never raises: it returns a short reason when the component is not healthy.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from vslice_lab.pki import KeyPair


@dataclass(frozen=True)
class Probe:
    """Where and how to ask a component whether it is healthy."""

    url: str
    ca: Path | None = None
    client: KeyPair | None = None
    expect: str | None = None
    """Text a healthy answer contains; None: ``ok`` or etcd's ``"health":"true"``."""

    def _context(self) -> ssl.SSLContext | None:
        if not self.url.startswith("https://"):
            return None
        context = ssl.create_default_context(cafile=str(self.ca) if self.ca else None)
        if self.client is not None:
            context.load_cert_chain(str(self.client.cert), str(self.client.key))
        return context

    def check(self, timeout: float = 2.0) -> str | None:
        """None when healthy, else why not (connection refused, HTTP 500: ..., ...)."""
        if self.url.startswith("unix://"):
            return _socket_answers(self.url.removeprefix("unix://"), timeout)
        if self.url.startswith("cri://"):
            return _cri_answers(self.url.removeprefix("cri://"), timeout)
        try:
            with urllib.request.urlopen(
                self.url, timeout=timeout, context=self._context()
            ) as response:
                body = response.read(200).decode(errors="replace")
        except urllib.error.HTTPError as error:
            return f"HTTP {error.code}: {error.read(200).decode(errors='replace').strip()}"
        except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
            reason = getattr(error, "reason", error)
            return f"not answering ({reason})"
        if self.expect is not None:
            return None if self.expect in body else f"unexpected answer {body.strip()[:80]!r}"
        if "ok" in body or '"health":"true"' in body.replace(" ", ""):
            return None
        return f"unexpected answer {body.strip()[:80]!r}"


def _socket_answers(path: str, timeout: float) -> str | None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except OSError as error:
            return f"not answering on {path} ({error.strerror or error})"
    return None


CRI_VERSION = "/runtime.v1.RuntimeService/Version"


def _cri_answers(path: str, timeout: float) -> str | None:
    import grpc

    with grpc.insecure_channel(f"unix://{path}") as channel:
        # An empty VersionRequest is zero bytes on the wire; the answer is not needed.
        call = channel.unary_unary(CRI_VERSION, request_serializer=_raw, response_deserializer=_raw)
        try:
            call(b"", timeout=timeout)
        except grpc.RpcError as error:
            return f"CRI not serving on {path} ({error.code().name})"
    return None


def _raw(data: bytes) -> bytes:
    return data
