"""Kubernetes Events (``core/v1``) that vslice's services write about pods and nodes.

:class:`EventRecorder` queues events and writes them from one background thread, so a caller
(a watch handler, a verb) never waits for the API server, and a burst of problems cannot pile
up calls: beyond ``MAX_QUEUED`` events are dropped with one log line each. An event that fails
to be written is logged and forgotten; events are a report, never state.

``kubectl describe pod|node`` shows them; ``reason`` is CamelCase (``UnprovenAllocation``).
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes import client as k8s
from vslice_core.errors import ClusterError

from vslice_kube.apierrors import translated
from vslice_kube.responses import drained

__all__ = ["EventRecorder", "Subject"]

log = logging.getLogger("vslice.events")

MAX_QUEUED = 1000
REQUEST_TIMEOUT_S = 5.0
NODE_EVENT_NAMESPACE = "default"  # where kubectl looks for events about cluster-scoped nodes


@dataclass(frozen=True)
class Subject:
    """What an event is about: a Pod (``namespace``, ``name``, ``uid``) or a Node."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""

    @classmethod
    def pod(cls, namespace: str, name: str, uid: str = "") -> Subject:
        return cls("Pod", name, namespace, uid)

    @classmethod
    def node(cls, name: str) -> Subject:
        return cls("Node", name, "", name)  # the kubelet names its node events with uid = name


def event_body(
    subject: Subject, reason: str, message: str, component: str, moment: datetime
) -> dict[str, Any]:
    """The Event object for ``subject`` (type Warning: every vslice event reports a problem)."""
    namespace = subject.namespace or NODE_EVENT_NAMESPACE
    involved: dict[str, Any] = {"apiVersion": "v1", "kind": subject.kind, "name": subject.name}
    if subject.namespace:
        involved["namespace"] = subject.namespace
    if subject.uid:
        involved["uid"] = subject.uid
    stamp = moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{subject.name}.vslice.", "namespace": namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": message[:1024],
        "type": "Warning",
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class EventRecorder:
    def __init__(self, api: k8s.CoreV1Api, component: str) -> None:
        self._api = api
        self._component = component
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(MAX_QUEUED)
        self._thread = threading.Thread(target=self._run, name="events", daemon=True)
        self._thread.start()

    def warn(self, subject: Subject, reason: str, message: str) -> None:
        body = event_body(subject, reason, message, self._component, datetime.now(UTC))
        try:
            self._queue.put_nowait(body)
        except queue.Full:
            log.warning(
                "event dropped, queue full", extra={"reason": reason, "about": subject.name}
            )

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while (body := self._queue.get()) is not None:
            namespace = str(body["metadata"]["namespace"])
            try:
                with translated(f"create event {body['reason']} in {namespace}"):
                    drained(
                        self._api.create_namespaced_event(
                            namespace,
                            cast(Any, body),
                            _preload_content=False,
                            _request_timeout=REQUEST_TIMEOUT_S,
                        )
                    )
            except ClusterError as exc:
                log.warning(
                    "event not written", extra={"reason": body["reason"], "error": str(exc)}
                )
