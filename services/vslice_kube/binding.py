"""The calls a bind makes beyond :class:`vslice_kube.nodestate.NodeState`: read the pod now,
and create its Binding together with the pod's allocation annotation; and the eviction a
preemption makes.

Both return or take plain dicts; failures arrive as :class:`vslice_core.errors.ClusterError`
with the server's Status code (404: the pod is gone, 409: it is already bound).
"""

from __future__ import annotations

import json
from typing import Any, cast
from urllib.parse import quote

from kubernetes import client as k8s

from vslice_kube.apierrors import translated
from vslice_kube.directwrite import post_json
from vslice_kube.responses import drained

__all__ = ["bind_pod", "evict_pod", "list_bound_pods", "read_pod"]

REQUEST_TIMEOUT_S = 10.0


def read_pod(api: k8s.CoreV1Api, namespace: str, name: str) -> dict[str, Any]:
    with translated(f"read pod {namespace}/{name}"):
        response: Any = api.read_namespaced_pod(
            name, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S
        )
    pod: dict[str, Any] = json.loads(response.data)
    return pod


def bind_pod(
    api: k8s.CoreV1Api,
    namespace: str,
    name: str,
    uid: str,
    node: str,
    annotations: dict[str, str] | None = None,
    *,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> None:
    """Create the pod's Binding to ``node``, setting ``annotations`` on the pod in the same
    write (the API server copies a Binding's annotations onto the pod). The uid makes a
    same-named newer pod answer 409, as does a pod that is already bound."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
    if annotations:
        metadata["annotations"] = annotations
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": metadata,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    with translated(f"bind pod {namespace}/{name} to {node}"):
        # The extender's hottest write: sent without the generated client's per-call layers
        # (vslice_kube.directwrite); the answer, a Status, is not needed.
        post_json(
            api.api_client,
            f"/api/v1/namespaces/{quote(namespace, safe='')}/bindings",
            body,
            timeout_s=timeout_s,
        )


def evict_pod(
    api: k8s.CoreV1Api,
    namespace: str,
    name: str,
    uid: str,
    *,
    dry_run: bool = False,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> None:
    """Create the pod's Eviction (policy/v1), which the API server refuses with 429 while a
    PodDisruptionBudget forbids it; ``dry_run`` asks without evicting. The uid precondition
    keeps a newer pod of the same name from being evicted in its place (409)."""
    options: dict[str, Any] = {"preconditions": {"uid": uid}}
    if dry_run:
        options["dryRun"] = ["All"]
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
        "deleteOptions": options,
    }
    with translated(f"evict pod {namespace}/{name}"):
        drained(
            api.create_namespaced_pod_eviction(
                name,
                namespace,
                cast(Any, body),
                _preload_content=False,
                _request_timeout=timeout_s,
            )
        )


def list_bound_pods(api: k8s.CoreV1Api) -> list[dict[str, Any]]:
    """Every pod bound to a node, listed from the API server now (a quorum read)."""
    with translated("list bound pods"):
        response: Any = api.list_pod_for_all_namespaces(
            field_selector="spec.nodeName!=",
            _preload_content=False,
            _request_timeout=(3.0, 60.0),
        )
    return list(json.loads(response.data).get("items") or [])
