"""Turning the Kubernetes client's failures into :class:`vslice_core.errors.ClusterError`.

``ApiException`` carries the server's Status as a JSON body; it is parsed and kept on the
error (``.status``, ``.code``) so callers can branch on ``code == 409`` without string
matching. Connection failures (urllib3) become a ClusterError without a code.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError
from vslice_core.errors import ClusterError


def cluster_error(exc: ApiException | HTTPError | OSError, what: str) -> ClusterError:
    if not isinstance(exc, ApiException):
        return ClusterError(f"{what}: cannot reach the API server: {exc}")
    status = _parsed_status(exc.body)
    message = status.get("message") if status else None
    return ClusterError(
        f"{what}: {exc.status} {message or exc.reason}", status=status, code=exc.status
    )


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
