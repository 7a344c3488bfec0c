"""The API-server calls the node agent and the monitor need, as an interface.

:class:`vslice_kube.nodestate.NodeState` talks to a real API server;
:class:`ConnectingNodeApi` connects to it lazily. The tests' in-memory double
(tests/services/memory_nodeapi.py) keeps the same semantics.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol


class NodeApi(Protocol):
    def pods_on_node(self, node: str) -> list[dict[str, Any]]: ...

    def annotate_pod(
        self, namespace: str, name: str, uid: str, annotations: Mapping[str, str | None]
    ) -> None: ...

    def annotate_node(self, node: str, annotations: Mapping[str, str | None]) -> None: ...

    def pod_event(self, namespace: str, name: str, uid: str, reason: str, message: str) -> None:
        """A Warning event about the pod (``kubectl describe pod`` shows it)."""
        ...


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
