"""A test double of :class:`vslice_node.nodeapi.NodeApi`: pods and nodes in memory.

It keeps the API server's semantics the node agent relies on (field selection by node,
merge-patched annotations where ``None`` removes a key, the uid precondition answering 409,
a resourceVersion on every change, watches that replay the changes after a resourceVersion
and answer 410 Gone once that history is compacted); the gRPC tests feed it pods and the
agent runs against it exactly as against a cluster.

Knobs for the tests: ``reachable = False`` makes every call fail the way an unreachable API
server does (open watches end with that error too); ``failing_writes = True`` makes only the
patches fail (a server that lists but times out on writes); ``latency_s`` delays every call
(a remote server); ``before_call(name)`` runs at the start of every call, outside the
double's lock (a test blocks a call there); ``watch_paused = True`` holds back watch events
(a watch that lags behind the server); :meth:`compact` forgets the history (410 for every
older resourceVersion); :meth:`break_watches` ends every open watch with an error. ``calls``
counts the calls by method name. The real implementation is
:class:`vslice_kube.nodestate.NodeState`.
"""

from __future__ import annotations

import collections
import copy
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from vslice_core.errors import ClusterError

Change = tuple[int, dict[str, Any] | None, dict[str, Any] | None]  # version, before, after


def _merge(target: dict[str, Any], annotations: Mapping[str, str | None]) -> None:
    current = target.setdefault("metadata", {}).setdefault("annotations", {})
    for key, value in annotations.items():
        if value is None:
            current.pop(key, None)
        else:
            current[key] = value


def _on(pod: dict[str, Any] | None, node: str) -> bool:
    return pod is not None and (pod.get("spec") or {}).get("nodeName") == node


class MemoryNodeApi:
    """Pods and nodes held in memory; thread-safe; returns copies like a server would."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._pods: dict[tuple[str, str], dict[str, Any]] = {}
        self._nodes: dict[str, dict[str, Any]] = {}
        self._version = 0
        self._history: list[Change] = []
        self._floor = 0  # the oldest resourceVersion a watch may start from
        self._breaks = 0  # break_watches() calls: an open watch ends when this moves
        self.reachable = True
        self.failing_writes = False
        self.latency_s = 0.0
        self.watch_paused = False
        self.before_call: Callable[[str], None] = lambda name: None
        self.calls: collections.Counter[str] = collections.Counter()
        self.events: list[dict[str, str]] = []  # pod_event calls, in order
        self.namespaces: dict[str, dict[str, str]] = {}  # name -> labels
        self.blocked_evictions: set[tuple[str, str]] = set()  # a PodDisruptionBudget says no
        self.evicted: list[tuple[str, str]] = []  # evict_pod calls that succeeded, in order

    # -- the test's side -----------------------------------------------------------------------

    def put_pod(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        key = (meta.get("namespace", "default"), meta["name"])
        with self._lock:
            self._store(key, copy.deepcopy(dict(pod)))

    def put_node(self, name: str) -> None:
        with self._lock:
            self._nodes.setdefault(name, {"metadata": {"name": name, "annotations": {}}})

    def delete_pod(self, namespace: str, name: str) -> None:
        with self._lock:
            self._store((namespace, name), None)

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        with self._lock:
            return copy.deepcopy(self._pods[(namespace, name)])

    def node(self, name: str) -> dict[str, Any]:
        with self._lock:
            return copy.deepcopy(self._nodes[name])

    def compact(self) -> None:
        """Forget every change so far: a watch from an older resourceVersion gets 410 Gone."""
        with self._lock:
            self._history.clear()
            self._floor = self._version
            self._changed.notify_all()

    def break_watches(self) -> None:
        """End every open watch with an error (a dropped connection)."""
        with self._lock:
            self._breaks += 1
            self._changed.notify_all()

    def resume_watches(self) -> None:
        """``watch_paused = False`` and wake the watches to deliver what they held back."""
        with self._lock:
            self.watch_paused = False
            self._changed.notify_all()

    def _store(self, key: tuple[str, str], pod: dict[str, Any] | None) -> None:
        """Replace (None: delete) one pod, as one new resourceVersion; the lock is held."""
        before = self._pods.get(key)
        if pod is None and before is None:
            return
        self._version += 1
        if pod is None:
            del self._pods[key]
            after = None
        else:
            pod.setdefault("metadata", {})["resourceVersion"] = str(self._version)
            self._pods[key] = pod
            after = copy.deepcopy(pod)
        self._history.append((self._version, before and copy.deepcopy(before), after))
        self._changed.notify_all()

    # -- the NodeApi side --------------------------------------------------------------------

    def _call(self, name: str, what: str, write: bool = False) -> None:
        self.calls[name] += 1
        self.before_call(name)
        if self.latency_s:
            time.sleep(self.latency_s)
        if not self.reachable or (write and self.failing_writes):
            raise ClusterError(f"{what}: cannot reach the API server: connection refused")

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        return self.list_pods_on_node(node, _name="pods_on_node")[0]

    def list_pods_on_node(
        self, node: str, _name: str = "list_pods_on_node"
    ) -> tuple[list[dict[str, Any]], str]:
        self._call(_name, f"list pods on node {node}")
        with self._lock:
            pods = [copy.deepcopy(pod) for pod in self._pods.values() if _on(pod, node)]
            return pods, str(self._version)

    def watch_pods_on_node(self, node: str, resource_version: str, timeout_s: float) -> MemoryWatch:
        self._call("watch_pods_on_node", f"watch pods on node {node}")
        return MemoryWatch(self, node, int(resource_version or 0), timeout_s)

    def annotate_pod(
        self, namespace: str, name: str, uid: str, annotations: Mapping[str, str | None]
    ) -> None:
        what = f"annotate pod {namespace}/{name}"
        self._call("annotate_pod", what, write=True)
        with self._lock:
            pod = self._pods.get((namespace, name))
            if pod is None:
                raise ClusterError(f'{what}: 404 pods "{name}" not found', code=404)
            if pod["metadata"].get("uid") != uid:
                raise ClusterError(f"{what}: 409 Precondition failed: UID {uid}", code=409)
            patched = copy.deepcopy(pod)
            _merge(patched, annotations)
            self._store((namespace, name), patched)

    def annotate_node(self, node: str, annotations: Mapping[str, str | None]) -> None:
        what = f"annotate node {node}"
        self._call("annotate_node", what, write=True)
        with self._lock:
            if node not in self._nodes:
                raise ClusterError(f'{what}: 404 nodes "{node}" not found', code=404)
            _merge(self._nodes[node], annotations)

    def pod_event(self, namespace: str, name: str, uid: str, reason: str, message: str) -> None:
        self._call("pod_event", f"create event about pod {namespace}/{name}", write=True)
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

    def labelled_namespaces(self, label: str) -> dict[str, dict[str, str]]:
        self._call("labelled_namespaces", f"list namespaces labelled {label}")
        with self._lock:
            return {
                name: dict(labels) for name, labels in self.namespaces.items() if label in labels
            }

    def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        what = f"evict pod {namespace}/{name}"
        self._call("evict_pod", what, write=True)
        with self._lock:
            pod = self._pods.get((namespace, name))
            if pod is None:
                raise ClusterError(f'{what}: 404 pods "{name}" not found', code=404)
            if pod["metadata"].get("uid") != uid:
                raise ClusterError(f"{what}: 409 Precondition failed: UID {uid}", code=409)
            if (namespace, name) in self.blocked_evictions:
                raise ClusterError(
                    f"{what}: 429 Cannot evict pod as it would violate the pod's disruption "
                    "budget.",
                    code=429,
                )
            self.evicted.append((namespace, name))
            self._store((namespace, name), None)


class MemoryWatch:
    """One open watch on :class:`MemoryNodeApi`: the changes after ``version`` as the API
    server sends them through a field selector (a pod that starts matching is ``ADDED``, one
    that stops matching or goes is ``DELETED``)."""

    def __init__(self, api: MemoryNodeApi, node: str, version: int, timeout_s: float) -> None:
        self._api = api
        self._node = node
        self._version = version
        self._deadline = time.monotonic() + timeout_s
        self._closed = False
        self._breaks = api._breaks

    def close(self) -> None:
        with self._api._lock:
            self._closed = True
            self._api._changed.notify_all()

    def __iter__(self) -> Iterator[tuple[str, dict[str, Any]]]:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            yield from batch

    def _next_batch(self) -> list[tuple[str, dict[str, Any]]] | None:
        api = self._api
        with api._lock:
            while True:
                if self._closed:
                    return None
                if not api.reachable or api._breaks != self._breaks:
                    raise ClusterError(f"watch pods on node {self._node}: connection reset")
                if self._version < api._floor:
                    raise ClusterError(
                        f"watch pods on node {self._node}: 410 too old resource version: "
                        f"{self._version} ({api._floor})",
                        code=410,
                    )
                if not api.watch_paused:
                    events = [
                        event
                        for version, before, after in api._history
                        if version > self._version
                        for event in self._events(version, before, after)
                    ]
                    if api._history and api._history[-1][0] > self._version:
                        self._version = api._history[-1][0]
                    if events:
                        return events
                left = self._deadline - time.monotonic()
                if left <= 0:
                    return None
                api._changed.wait(left)

    def _events(
        self, version: int, before: dict[str, Any] | None, after: dict[str, Any] | None
    ) -> list[tuple[str, dict[str, Any]]]:
        was, now = _on(before, self._node), _on(after, self._node)
        if now and after is not None:
            return [("MODIFIED" if was else "ADDED", copy.deepcopy(after))]
        if was and before is not None:
            gone = copy.deepcopy(before)
            gone["metadata"]["resourceVersion"] = str(version)
            return [("DELETED", gone)]
        return []
