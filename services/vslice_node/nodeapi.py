"""The API-server calls the node agent and the monitor need, as an interface.

:class:`vslice_kube.nodestate.NodeState` talks to a real API server;
:class:`ConnectingNodeApi` connects to it lazily. The tests' in-memory double
(tests/services/memory_nodeapi.py) keeps the same semantics.

Besides one-off lists, the node agent keeps a watched view of its node's pods
(:mod:`vslice_node.deviceplugin.podview`): :meth:`NodeApi.list_pods_on_node` gives the pods
with the list's resourceVersion, :meth:`NodeApi.watch_pods_on_node` the changes after one.
Both speak the API server's own terms (plain dicts, event types ``ADDED``, ``MODIFIED``,
``DELETED``, ``BOOKMARK``), so the loop that uses them is the same against a cluster and
against the double.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

PodEvent = tuple[str, dict[str, Any]]
"""One watch event: its type and the pod as the API sent it (for ``BOOKMARK``, only its
``metadata.resourceVersion``)."""

EXPIRED = 410
"""The ClusterError code of a watch whose resourceVersion the server no longer holds (410
Gone): the watcher must list again."""


class PodWatch(Protocol):
    """An open watch: iterating yields events until the server ends the stream (its timeout)
    or :meth:`close` is called; a failure raises ClusterError (code 410: list again)."""

    def __iter__(self) -> Iterator[PodEvent]: ...

    def close(self) -> None:
        """End the stream, also from another thread (a blocked iteration then ends)."""
        ...


class NodeApi(Protocol):
    def pods_on_node(self, node: str) -> list[dict[str, Any]]: ...

    def list_pods_on_node(self, node: str) -> tuple[list[dict[str, Any]], str]:
        """The pods bound to ``node`` and the resourceVersion of that list."""
        ...

    def watch_pods_on_node(self, node: str, resource_version: str, timeout_s: float) -> PodWatch:
        """The changes to the pods bound to ``node`` after ``resource_version``, for at most
        ``timeout_s`` seconds."""
        ...

    def annotate_pod(
        self, namespace: str, name: str, uid: str, annotations: Mapping[str, str | None]
    ) -> None: ...

    def annotate_node(self, node: str, annotations: Mapping[str, str | None]) -> None: ...

    def pod_event(self, namespace: str, name: str, uid: str, reason: str, message: str) -> None:
        """A Warning event about the pod (``kubectl describe pod`` shows it)."""
        ...

    def labelled_namespaces(self, label: str) -> dict[str, dict[str, str]]:
        """Name -> labels of every namespace that carries ``label`` (any value)."""
        ...

    def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        """Evict the pod through the Eviction API (ClusterError 429 while a
        PodDisruptionBudget forbids it; 409 when another pod now has the name)."""
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

    def list_pods_on_node(self, node: str) -> tuple[list[dict[str, Any]], str]:
        return self._target().list_pods_on_node(node)

    def watch_pods_on_node(self, node: str, resource_version: str, timeout_s: float) -> PodWatch:
        return self._target().watch_pods_on_node(node, resource_version, timeout_s)

    def annotate_pod(
        self, namespace: str, name: str, uid: str, annotations: Mapping[str, str | None]
    ) -> None:
        self._target().annotate_pod(namespace, name, uid, annotations)

    def annotate_node(self, node: str, annotations: Mapping[str, str | None]) -> None:
        self._target().annotate_node(node, annotations)

    def pod_event(self, namespace: str, name: str, uid: str, reason: str, message: str) -> None:
        self._target().pod_event(namespace, name, uid, reason, message)

    def labelled_namespaces(self, label: str) -> dict[str, dict[str, str]]:
        return self._target().labelled_namespaces(label)

    def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        self._target().evict_pod(namespace, name, uid)
