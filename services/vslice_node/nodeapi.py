"""The API-server calls the device plugin needs, as an interface with two implementations.

:class:`vslice_kube.nodestate.NodeState` talks to a real API server. :class:`MemoryNodeApi`
keeps pods and nodes in memory with the same semantics (field selection by node, merge-patched
annotations where ``None`` removes a key, the uid precondition answering 409); the gRPC tests
feed it pods and the plugin runs against it exactly as against a cluster. ``reachable = False``
makes every call fail the way an unreachable API server does; ``failing_writes = True`` makes
only the patches fail (a server that lists but times out on writes).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from vslice_core.errors import ClusterError


class NodeApi(Protocol):
    def pods_on_node(self, node: str) -> list[dict[str, Any]]: ...

    def annotate_pod(
        self, namespace: str, name: str, uid: str, annotations: Mapping[str, str | None]
    ) -> None: ...

    def annotate_node(self, node: str, annotations: Mapping[str, str | None]) -> None: ...

    def pod_event(self, namespace: str, name: str, uid: str, reason: str, message: str) -> None:
        """A Warning event about the pod (``kubectl describe pod`` shows it)."""
        ...


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


class ConnectingNodeApi:
    """Connects on first use and again after a failed connect, so a service starts (and keeps
    serving) while the cluster is not reachable yet; calls fail with ClusterError meanwhile."""

    def __init__(self, connect: Callable[[], NodeApi]) -> None:
        self._connect = connect
        self._api: NodeApi | None = None
        self._lock = threading.Lock()

    def _target(self) -> NodeApi:
        with self._lock:
            if self._api is None:
                self._api = self._connect()
            return self._api

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        return self._target().pods_on_node(node)

    def annotate_pod(
        self, namespace: str, name: str, uid: str, annotations: Mapping[str, str | None]
    ) -> None:
        self._target().annotate_pod(namespace, name, uid, annotations)

    def annotate_node(self, node: str, annotations: Mapping[str, str | None]) -> None:
        self._target().annotate_node(node, annotations)

    def pod_event(self, namespace: str, name: str, uid: str, reason: str, message: str) -> None:
        self._target().pod_event(namespace, name, uid, reason, message)
