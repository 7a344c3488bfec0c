"""One node's state in the API server, as the node-side services see it.

The device plugin lists the pods bound to its node (to find the allocation the kubelet is
starting), marks allocations delivered, and keeps the node's GPU inventory annotation fresh.
:class:`NodeState` does exactly those calls, each with a timeout so an unresponsive API server
never hangs a kubelet call, and returns plain dicts as the API sent them. Failures arrive as
:class:`vslice_core.errors.ClusterError` (with the server's Status code when there is one).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s
from kubernetes.config import ConfigException
from vslice_core.errors import ClusterError

from vslice_kube.apierrors import translated
from vslice_kube.client import api_client
from vslice_kube.responses import drained

__all__ = ["NodeState"]

REQUEST_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 3.0


class NodeState:
    def __init__(self, api: k8s.CoreV1Api, *, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self._api = api
        # (connect, read): an unroutable server fails fast, a slow answer gets its time.
        self._timeout = (min(CONNECT_TIMEOUT_S, timeout_s), timeout_s)

    @classmethod
    def connect(cls, kubeconfig: str | None = None) -> NodeState:
        """Connect by the lookup order of :mod:`vslice_kube.client`; ClusterError if none works."""
        try:
            return cls(k8s.CoreV1Api(api_client(kubeconfig or None)))
        except (ConfigException, OSError, ValueError) as exc:
            raise ClusterError(f"cannot load the Kubernetes connection settings: {exc}") from exc

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        """Every pod bound to ``node``, listed from the API server now."""
        with translated(f"list pods on node {node}"):
            response: Any = self._api.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node}",
                _preload_content=False,
                _request_timeout=self._timeout,
            )
        return list(json.loads(response.data).get("items") or [])

    def annotate_pod(
        self, namespace: str, name: str, uid: str, annotations: Mapping[str, str | None]
    ) -> None:
        """Merge-patch the pod's annotations; the uid precondition makes a same-named
        replacement pod answer 409 instead of receiving another pod's record."""
        body = {"metadata": {"uid": uid, "annotations": dict(annotations)}}
        with translated(f"annotate pod {namespace}/{name}"):
            drained(
                self._api.patch_namespaced_pod(
                    name, namespace, body, _preload_content=False, _request_timeout=self._timeout
                )
            )

    def annotate_node(self, node: str, annotations: Mapping[str, str | None]) -> None:
        """Merge-patch the node's annotations (``None`` removes a key)."""
        body = {"metadata": {"annotations": dict(annotations)}}
        with translated(f"annotate node {node}"):
            drained(
                self._api.patch_node(
                    node, body, _preload_content=False, _request_timeout=self._timeout
                )
            )

    def pod_event(self, namespace: str, name: str, uid: str, reason: str, message: str) -> None:
        """Create a Warning event about the pod, from component ``vslice-device-plugin``."""
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body: Any = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{name}.vslice.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": name,
                "namespace": namespace,
                "uid": uid,
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning",
            "source": {"component": "vslice-device-plugin"},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        with translated(f"create event {reason} about pod {namespace}/{name}"):
            drained(
                self._api.create_namespaced_event(
                    namespace, body, _preload_content=False, _request_timeout=self._timeout
                )
            )
