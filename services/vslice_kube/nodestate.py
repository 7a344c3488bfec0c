"""One node's state in the API server, as the node-side services see it.

The device plugin watches the pods bound to its node (to find the allocation the kubelet is
starting; a list when the watch has not shown a pod yet), marks allocations delivered, and
keeps the node's GPU inventory annotation fresh. :class:`NodeState` does exactly those calls,
each with a timeout so an unresponsive API server never hangs a kubelet call, and returns
plain dicts as the API sent them. Failures arrive as :class:`vslice_core.errors.ClusterError`
(with the server's Status code when there is one; 410 for a watch that must list again).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s
from kubernetes.config import ConfigException
from vslice_core.errors import ClusterError

from vslice_kube.apierrors import translated
from vslice_kube.binding import evict_pod
from vslice_kube.client import api_client
from vslice_kube.responses import drained
from vslice_kube.watch import _events, _interrupt  # the adapter's own watch-stream helpers

__all__ = ["NodeState", "PodWatchStream"]

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

    def list_pods_on_node(self, node: str) -> tuple[list[dict[str, Any]], str]:
        """Every pod bound to ``node`` and the list's resourceVersion (where a watch starts)."""
        with translated(f"list pods on node {node}"):
            response: Any = self._api.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node}",
                _preload_content=False,
                _request_timeout=self._timeout,
            )
        body = json.loads(response.data)
        version = str((body.get("metadata") or {}).get("resourceVersion") or "")
        return list(body.get("items") or []), version

    def watch_pods_on_node(
        self, node: str, resource_version: str, timeout_s: float
    ) -> PodWatchStream:
        """The changes to ``node``'s pods after ``resource_version``; the server ends the
        stream after ``timeout_s``. Bookmarks are asked for, so a quiet node's resourceVersion
        stays fresh and a reconnect rarely meets 410 Gone."""
        what = f"watch pods on node {node}"
        seconds = max(1, int(timeout_s))
        with translated(what):
            response: Any = self._api.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node}",
                watch=True,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=seconds,
                _preload_content=False,
                # The read timeout outlasts the server's own end of the stream.
                _request_timeout=(self._timeout[0], seconds + 30),
            )
        return PodWatchStream(response, what)

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

    def labelled_namespaces(self, label: str) -> dict[str, dict[str, str]]:
        """Name -> labels of the namespaces carrying ``label`` (the idle reclaim opt-in)."""
        with translated(f"list namespaces labelled {label}"):
            response: Any = self._api.list_namespace(
                label_selector=label, _preload_content=False, _request_timeout=self._timeout
            )
        found: dict[str, dict[str, str]] = {}
        for item in json.loads(response.data).get("items") or []:
            meta = item.get("metadata") or {}
            found[str(meta.get("name", ""))] = {
                str(key): str(value) for key, value in (meta.get("labels") or {}).items()
            }
        return found

    def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        """The pod's Eviction, as :func:`vslice_kube.binding.evict_pod` makes it."""
        evict_pod(self._api, namespace, name, uid, timeout_s=self._timeout[1])


class PodWatchStream:
    """One open pod watch: its events as (type, object), ERROR events raised as ClusterError
    (code 410 when the resourceVersion is too old). :meth:`close` may come from another
    thread: it shuts the socket down, which ends a read that is waiting for the next event."""

    def __init__(self, response: Any, what: str) -> None:
        self._response = response
        self._what = what

    def __iter__(self) -> Iterator[tuple[str, dict[str, Any]]]:
        try:
            with translated(self._what):
                for event in _events(self._response):
                    kind = str(event.get("type") or "")
                    obj: dict[str, Any] = event.get("object") or {}
                    if kind == "ERROR":
                        code = obj.get("code")
                        raise ClusterError(
                            f"{self._what}: {code} {obj.get('message', obj)}",
                            status=obj,
                            code=code if isinstance(code, int) else None,
                        )
                    yield kind, obj
        finally:
            self._release()

    def close(self) -> None:
        _interrupt(self._response)
        self._release()

    def _release(self) -> None:
        with contextlib.suppress(Exception):  # a connection already gone needs nothing
            self._response.release_conn()
