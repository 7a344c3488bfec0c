"""Create an object, or replace the one of that name: how the lab installs vslice's install
objects (``vslice_kube.installing``), so a second ``up`` brings them to the current text."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from vslice_kube.apierrors import cluster_error, translated
from vslice_kube.responses import drained

__all__ = ["create_or_replace"]


def create_or_replace(
    kind: str,
    body: Mapping[str, Any],
    create: Callable[..., Any],
    read: Callable[..., Any],
    replace: Callable[..., Any],
) -> None:
    """``create(body)``; on 409 ``replace(name, body)`` carrying the current resourceVersion
    (``read(name)``), so a concurrent change makes the replace fail instead of being lost."""
    name = str(body["metadata"]["name"])
    try:
        drained(create(dict(body), _preload_content=False))
        return
    except ApiException as exc:
        if exc.status != 409:
            raise cluster_error(exc, f"create {kind} {name}") from exc
    with translated(f"replace {kind} {name}"):
        current = read(name)
        replacement = {
            **body,
            "metadata": {**body["metadata"], "resourceVersion": current.metadata.resource_version},
        }
        drained(replace(name, replacement, _preload_content=False))
