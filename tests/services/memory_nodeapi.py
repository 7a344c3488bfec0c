"""A test double of :class:`vslice_node.nodeapi.NodeApi`: pods and nodes in memory.

It keeps the API server's semantics the node agent relies on (field selection by node,
merge-patched annotations where ``None`` removes a key, the uid precondition answering 409);
the gRPC tests feed it pods and the agent runs against it exactly as against a cluster.
``reachable = False`` makes every call fail the way an unreachable API server does;
``failing_writes = True`` makes only the patches fail (a server that lists but times out on
writes). The real implementation is :class:`vslice_kube.nodestate.NodeState`.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from typing import Any

from vslice_core.errors import ClusterError


def _merge(target: dict[str, Any], annotations: Mapping[str, str | None]) -> None:
    current = target.setdefault("metadata", {}).setdefault("annotations", {})
    for key, value in annotations.items():
        if value is None:
            current.pop(key, None)
        else:
            current[key] = value


class MemoryNodeApi:
    """Pods and nodes held in memory; thread-safe; returns copies like a server would."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: dict[tuple[str, str], dict[str, Any]] = {}
        self._nodes: dict[str, dict[str, Any]] = {}
        self.reachable = True
        self.failing_writes = False
        self.events: list[dict[str, str]] = []  # pod_event calls, in order

    def put_pod(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        with self._lock:
            self._pods[(meta.get("namespace", "default"), meta["name"])] = copy.deepcopy(dict(pod))

    def put_node(self, name: str) -> None:
        with self._lock:
            self._nodes.setdefault(name, {"metadata": {"name": name, "annotations": {}}})

    def delete_pod(self, namespace: str, name: str) -> None:
        with self._lock:
            self._pods.pop((namespace, name), None)

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        with self._lock:
            return copy.deepcopy(self._pods[(namespace, name)])

    def node(self, name: str) -> dict[str, Any]:
        with self._lock:
            return copy.deepcopy(self._nodes[name])

    def _check_reachable(self, what: str, write: bool = False) -> None:
        if not self.reachable or (write and self.failing_writes):
            raise ClusterError(f"{what}: cannot reach the API server: connection refused")

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        self._check_reachable(f"list pods on node {node}")
        with self._lock:
            return [
                copy.deepcopy(pod)
                for pod in self._pods.values()
                if pod.get("spec", {}).get("nodeName") == node
            ]

    def annotate_pod(
        self, namespace: str, name: str, uid: str, annotations: Mapping[str, str | None]
    ) -> None:
        what = f"annotate pod {namespace}/{name}"
        self._check_reachable(what, write=True)
        with self._lock:
            pod = self._pods.get((namespace, name))
            if pod is None:
                raise ClusterError(f'{what}: 404 pods "{name}" not found', code=404)
            if pod["metadata"].get("uid") != uid:
                raise ClusterError(f"{what}: 409 Precondition failed: UID {uid}", code=409)
            _merge(pod, annotations)

    def annotate_node(self, node: str, annotations: Mapping[str, str | None]) -> None:
        what = f"annotate node {node}"
        self._check_reachable(what, write=True)
        with self._lock:
            if node not in self._nodes:
                raise ClusterError(f'{what}: 404 nodes "{node}" not found', code=404)
            _merge(self._nodes[node], annotations)

    def pod_event(self, namespace: str, name: str, uid: str, reason: str, message: str) -> None:
        self._check_reachable(f"create event about pod {namespace}/{name}", write=True)
        with self._lock:
            self.events.append(
                {
                    "namespace": namespace,
                    "pod": name,
                    "uid": uid,
                    "reason": reason,
                    "message": message,
                }
            )
