"""Turning the Kubernetes client's failures into :class:`vslice_core.errors.ClusterError`.

``ApiException`` carries the server's Status as a JSON body; it is parsed and kept on the
error (``.status``, ``.code``) so callers can branch on ``code == 409`` without string
matching. Connection failures (urllib3) become a ClusterError without a code, in one line
that names the server and the cause ("connection refused", "timed out").
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError
from vslice_core.errors import ClusterError


def cluster_error(exc: ApiException | HTTPError | OSError, what: str) -> ClusterError:
    if not isinstance(exc, ApiException):
        return unreachable(exc, what)
    status = _parsed_status(exc.body)
    message = status.get("message") if status else None
    return ClusterError(
        f"{what}: {exc.status} {message or exc.reason}", status=status, code=exc.status
    )


def unreachable(exc: HTTPError | OSError, what: str) -> ClusterError:
    """No answer from the server: which server, why, and what to check."""
    pool = getattr(exc, "pool", None)
    scheme, host, port = (getattr(pool, name, None) for name in ("scheme", "host", "port"))
    server = f" at {scheme}://{host}:{port}" if host else ""
    return ClusterError(
        f"{what}: cannot reach the API server{server} ({_cause(exc)}); is it running? "
        "(for the local lab: `vslice lab status`)"
    )


def _cause(exc: BaseException) -> str:
    """The innermost reason of a connection failure, in a few words."""
    seen: BaseException | None = getattr(exc, "reason", None) or exc
    while seen is not None:
        if isinstance(seen, TimeoutError) or "timed out" in str(seen):
            return "timed out"
        if isinstance(seen, ssl.SSLError):
            return f"TLS failed: {seen.reason or seen}"
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror.lower()
        inner = seen.__cause__ or seen.__context__
        if inner is None:
            return str(seen).splitlines()[0] if str(seen) else type(seen).__name__
        seen = inner
    return type(exc).__name__


@contextmanager
def translated(what: str) -> Iterator[None]:
    """Re-raise client failures inside the block as ClusterError (``raise ... from``)."""
    try:
        yield
    except (ApiException, HTTPError, OSError) as exc:
        raise cluster_error(exc, what) from exc


def _parsed_status(body: Any) -> dict[str, Any] | None:
    if not body:
        return None
    try:
        parsed = json.loads(body)
    except (TypeError, ValueError):
        return None
    return parsed if isinstance(parsed, dict) else None
