"""Node calls the lab makes: create or update (simulated) nodes, annotate them, see which are Ready.

Functions take an ``ApiClient`` (``vslice_kube.client.api_client``); bodies and results are
plain dicts as the API speaks them. A Node's ``status`` (capacity,
allocatable) is accepted on create; on update it goes through the status subresource.
Failures arrive as :class:`vslice_core.errors.ClusterError`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from vslice_kube.apierrors import cluster_error, translated
from vslice_kube.responses import drained


def apply_node(api_client: k8s.ApiClient, body: Mapping[str, Any]) -> None:
    """Create the node, or bring an existing one's labels, annotations and status to ``body``."""
    api: Any = k8s.CoreV1Api(api_client)  # the client's stubs do not accept dict bodies
    name = str(body["metadata"]["name"])
    try:
        drained(api.create_node(dict(body), _preload_content=False))
        return
    except ApiException as exc:
        if exc.status != 409:
            raise cluster_error(exc, f"create node {name}") from exc
    metadata = {k: body["metadata"].get(k) for k in ("labels", "annotations")}
    with translated(f"update node {name}"):
        drained(api.patch_node(name, {"metadata": metadata}, _preload_content=False))
        if "status" in body:
            status = {"status": body["status"]}
            drained(api.patch_node_status(name, status, _preload_content=False))


def annotate_node(
    api_client: k8s.ApiClient, name: str, annotations: Mapping[str, str | None]
) -> None:
    """Merge-patch annotations on a node (``None`` removes a key)."""
    api: Any = k8s.CoreV1Api(api_client)  # the client's stubs do not accept dict bodies
    with translated(f"annotate node {name}"):
        body = {"metadata": {"annotations": dict(annotations)}}
        drained(api.patch_node(name, body, _preload_content=False))


def delete_nodes(api_client: k8s.ApiClient, names: Iterable[str]) -> None:
    """Delete nodes; ones already gone are fine."""
    api: Any = k8s.CoreV1Api(api_client)  # the client's stubs do not accept dict bodies
    for name in names:
        try:
            drained(api.delete_node(name, _preload_content=False))
        except ApiException as exc:
            if exc.status != 404:
                raise cluster_error(exc, f"delete node {name}") from exc


def list_nodes(api_client: k8s.ApiClient, label_selector: str = "") -> list[dict[str, Any]]:
    api: Any = k8s.CoreV1Api(api_client)  # the client's stubs do not accept dict bodies
    with translated("list nodes"):
        response = api.list_node(label_selector=label_selector, _preload_content=False)
    items: list[dict[str, Any]] = json.loads(response.data)["items"]
    return items


def is_ready(node: Mapping[str, Any]) -> bool:
    """True when the node's Ready condition is True."""
    conditions = node.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def ready_node_names(api_client: k8s.ApiClient, label_selector: str = "") -> set[str]:
    """Names of the Ready nodes (optionally only those matching a label selector)."""
    return {n["metadata"]["name"] for n in list_nodes(api_client, label_selector) if is_ready(n)}


def read_node(api_client: k8s.ApiClient, name: str) -> dict[str, Any] | None:
    """The node as the API returns it, or None when it does not exist (yet)."""
    api: Any = k8s.CoreV1Api(api_client)  # the client's stubs do not accept dict bodies
    try:
        response = api.read_node(name, _preload_content=False)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise cluster_error(exc, f"read node {name}") from exc
    node: dict[str, Any] = json.loads(response.data)
    return node


def set_node_addresses(api_client: k8s.ApiClient, name: str, addresses: Mapping[str, str]) -> None:
    """Set the node's status addresses (type -> address), e.g. ``{"InternalIP": "127.0.0.1"}``."""
    api: Any = k8s.CoreV1Api(api_client)  # the client's stubs do not accept dict bodies
    body = {"status": {"addresses": [{"type": t, "address": a} for t, a in addresses.items()]}}
    with translated(f"set addresses of node {name}"):
        drained(api.patch_node_status(name, body, _preload_content=False))
