"""List+watch against the lab's API server: relist on an expired resourceVersion, periodic resync.

The watch is the one the extender and the webhook run (``vslice_kube.watch.ListWatch``); the
API server is real. To get a "410 Gone" without waiting for etcd compaction, the first watch
asks for resourceVersion 1, which the server no longer serves.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from conftest import LabHandle
from extender_processes import wait_until
from vslice_kube.watch import ListWatch

pytestmark = pytest.mark.timeout(120)


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lists: list[list[str]] = []
        self.events: list[tuple[str, str]] = []

    def replace(self, items: list[dict[str, Any]]) -> None:
        with self.lock:
            self.lists.append([item["metadata"]["name"] for item in items])

    def apply(self, event: str, obj: dict[str, Any]) -> None:
        with self.lock:
            self.events.append((event, obj["metadata"]["name"]))


def _pods_of(lab: LabHandle, namespace: str, *, first_watch_from: str | None) -> Callable[..., Any]:
    asked = {"watches": 0}

    def list_call(**kwargs: Any) -> Any:
        if kwargs.get("watch"):
            asked["watches"] += 1
            if first_watch_from is not None and asked["watches"] == 1:
                kwargs["resource_version"] = first_watch_from
        return lab.core.list_namespaced_pod(namespace, **kwargs)

    return list_call


def test_an_expired_resource_version_relists_and_the_watch_goes_on(
    lab: LabHandle, namespace: str
) -> None:
    lab.create_pod(namespace, "before")
    recorder = Recorder()
    watch = ListWatch("pods", _pods_of(lab, namespace, first_watch_from="1"), recorder)
    watch.start()
    try:
        wait_until(lambda: watch.relists >= 2, 30, "a relist after 410 Gone")
        assert recorder.lists[0] == ["before"]
        lab.create_pod(namespace, "after")
        wait_until(lambda: ("ADDED", "after") in recorder.events, 30, "the new pod's event")
    finally:
        watch.stop()


def test_the_watch_relists_every_resync_period(lab: LabHandle, namespace: str) -> None:
    recorder = Recorder()
    watch = ListWatch(
        "pods", _pods_of(lab, namespace, first_watch_from=None), recorder, resync_seconds=1
    )
    watch.start()
    try:
        assert watch.wait_synced(10)
        lab.create_pod(namespace, "seen")
        wait_until(lambda: watch.relists >= 3, 30, "three lists")
        assert recorder.lists[-1] == ["seen"]
    finally:
        watch.stop()
