"""Unparsed API answers, handed back to the connection pool.

With ``_preload_content=False`` the Kubernetes client returns urllib3's response unread.
Left so, its connection never returns to the pool, and the next call opens a new one: a TCP
connect and a TLS handshake per call, which at a few hundred binds a second costs more than
the binds themselves. Every write whose answer is not parsed goes through :func:`drained`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["drained"]


def drained(response: Any) -> None:
    """Read ``response`` to its end and release its connection for the next call (anything
    that is not a pooled response, e.g. an already-parsed answer, needs nothing)."""
    release = getattr(response, "release_conn", None)
    if release is None:
        return
    try:
        response.read()
    finally:
        release()
