"""List+watch against the lab's API server: periodic resync, and a prompt stop.

The watch is the one the extender and the webhook run (``vslice_kube.watch.ListWatch``); the
API server is real. The lab's API server serves even very old resourceVersions from its watch
cache, so "410 Gone" cannot be provoked here on demand; tests/services/test_extender_watch.py
feeds the watch the server's exact 410 answers instead.
"""

from __future__ import annotations

import threading
import time
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


def _pods_of(lab: LabHandle, namespace: str) -> Callable[..., Any]:
    def list_call(**kwargs: Any) -> Any:
        return lab.core.list_namespaced_pod(namespace, **kwargs)

    return list_call


def test_the_watch_relists_every_resync_period(lab: LabHandle, namespace: str) -> None:
    recorder = Recorder()
    watch = ListWatch("pods", _pods_of(lab, namespace), recorder, resync_seconds=1)
    watch.start()
    try:
        assert watch.wait_synced(10)
        lab.create_pod(namespace, "seen")
        wait_until(lambda: watch.relists >= 3, 30, "three lists")
        assert recorder.lists[-1] == ["seen"]
    finally:
        watch.stop()


def test_stop_returns_at_once_while_the_watch_waits_for_events(
    lab: LabHandle, namespace: str
) -> None:
    watch = ListWatch("pods", _pods_of(lab, namespace), Recorder())
    watch.start()
    assert watch.wait_synced(10)
    time.sleep(1)  # now blocked reading an idle watch stream
    started = time.monotonic()
    watch.stop()
    assert time.monotonic() - started < 2
