"""The monitor's idle check on real region files, against the in-memory API double: marks,
metrics, and the warning and eviction in opted-in namespaces only."""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

import pytest
from memory_nodeapi import MemoryNodeApi
from vslice_core.annotations import ALLOCATION, IDLE_RECLAIM_AT, IDLE_SINCE, decode_moment
from vslice_node.monitor.collector import Idleness
from vslice_node.monitor.idlereclaim import IdleReclaimer, IdleSettings, Listing
from vslice_node.monitor.regions import RegionReader
from vslice_shim import abi
from vslice_shim.region import DeviceLimit, create_region

NODE = "node-1"
GPU = "GPU-6c7f0d8e-0000-4000-8000-00000000000a"
GIB = 2**30
SETTINGS = IdleSettings(idle_after_s=60, grace_s=30, reclaim=True, every_s=10)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def launch(path: Path, count: int = 1) -> None:
    """Kernels launched in the container, as the shim counts them."""
    fd = os.open(path, os.O_RDWR)
    try:
        with mmap.mmap(fd, abi.REGION_SIZE) as mapping:
            region = abi.ffi.cast("vs_region *", abi.ffi.from_buffer(mapping))
            region.devices[0].launches += count
            del region
    finally:
        os.close(fd)


class Node:
    """One node: the API double, the region tree, the clocks and the reclaimer."""

    def __init__(self, root: Path, settings: IdleSettings = SETTINGS) -> None:
        self.api = MemoryNodeApi()
        self.root = root
        self.clock = Clock()
        self.reclaimer = IdleReclaimer(
            self.api,
            self.listing,
            RegionReader(root),
            Idleness(self.clock),
            settings,
            clock=self.clock,
            wall=lambda: 1_800_000_000.0 + self.clock.now,
        )

    def listing(self) -> Listing | None:
        pods = self.api.pods_on_node(NODE)
        return pods, {
            p["metadata"]["uid"]: (p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods
        }

    def pod(self, namespace: str, name: str, *, region: bool = True, **annotations: str) -> Path:
        uid = f"uid-{name}"
        self.api.put_pod(
            {
                "metadata": {
                    "namespace": namespace,
                    "name": name,
                    "uid": uid,
                    "annotations": {ALLOCATION: allocation(2048), **annotations},
                },
                "spec": {"nodeName": NODE},
                "status": {"phase": "Running"},
            }
        )
        path = self.root / uid / "main" / "vslice.cache"
        if region:
            path.parent.mkdir(parents=True)
            create_region(path, [DeviceLimit(uuid=GPU, memory_limit=4 * GIB)])
        return path

    def check_at(self, now: float) -> None:
        self.clock.now = now
        self.reclaimer.check()

    def annotations(self, namespace: str, name: str) -> Mapping[str, str]:
        return dict(self.api.pod(namespace, name)["metadata"].get("annotations") or {})

    def reasons(self, name: str) -> list[str]:
        return [e["reason"] for e in self.api.events if e["pod"] == name]

    def metric(self, name: str, namespace: str) -> float:
        for family in self.reclaimer.metrics.collect():
            for sample in family.samples:
                if sample.name == name and sample.labels == {"namespace": namespace}:
                    return float(sample.value)
        return 0.0


def allocation(mib: int) -> str:
    grant = {"uuid": GPU, "index": 0, "memory_mib": mib, "cores": 0}
    return json.dumps(
        {"version": 1, "node": NODE, "containers": [{"name": "main", "gpus": [grant]}]}
    )


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path / "containers")


def opt_in(node: Node, namespace: str, **labels: str) -> None:
    node.api.namespaces[namespace] = {"vslice.io/idle-reclaim": "2m", **labels}


def test_an_idle_pod_in_an_opted_in_namespace_is_warned_then_evicted(node: Node) -> None:
    opt_in(node, "team-a", **{"vslice.io/idle-grace": "1m"})
    node.pod("team-a", "notebook")
    node.check_at(1000)
    node.check_at(1059)
    assert IDLE_SINCE not in node.annotations("team-a", "notebook")
    node.check_at(1060)  # idle 60 s: idle_after_seconds
    assert decode_moment(IDLE_SINCE, node.annotations("team-a", "notebook")[IDLE_SINCE]) == at(
        "2027-01-15T08:16:40Z"
    )
    assert node.reasons("notebook") == []
    node.check_at(1120)  # idle 2m: the namespace's reclaim time
    assert node.reasons("notebook") == ["IdleSliceWarning"]
    warning = node.api.events[0]["message"]
    assert "idle for 2m" in warning and "holding 4.0 GiB" in warning
    assert "will be evicted at 2027-01-15T08:19:40Z (in 1m)" in warning
    assert "vslice.io/idle-keep=true" in warning
    assert decode_moment(
        IDLE_RECLAIM_AT, node.annotations("team-a", "notebook")[IDLE_RECLAIM_AT]
    ) == at("2027-01-15T08:19:40Z")
    node.check_at(1179)
    assert node.api.evicted == []
    node.check_at(1180)
    assert node.api.evicted == [("team-a", "notebook")]
    assert node.reasons("notebook")[-1] == "IdleSliceReclaimed"
    assert "give back 4.0 GiB" in node.api.events[-1]["message"]
    assert node.metric("vslice_idle_reclaim_warnings_total", "team-a") == 1
    assert node.metric("vslice_idle_reclaim_evictions_total", "team-a") == 1


def test_a_launch_withdraws_the_warning_and_starts_the_clock_again(node: Node) -> None:
    opt_in(node, "team-a")
    region = node.pod("team-a", "notebook")
    node.check_at(1000)
    node.check_at(1120)
    assert node.reasons("notebook") == ["IdleSliceWarning"]
    launch(region)
    node.check_at(1130)
    annotations = node.annotations("team-a", "notebook")
    assert IDLE_RECLAIM_AT not in annotations and IDLE_SINCE not in annotations
    node.check_at(10_000 + 0)  # idle again since 1130 ...
    assert node.reasons("notebook") == ["IdleSliceWarning", "IdleSliceWarning"]
    assert node.api.evicted == []  # ... and warned again before any eviction


def test_a_busy_pod_a_kept_pod_and_a_pod_outside_opted_in_namespaces_stay(node: Node) -> None:
    opt_in(node, "team-a")
    busy = node.pod("team-a", "training")
    node.pod("team-a", "kept", **{"vslice.io/idle-keep": "true"})
    node.pod("team-b", "notebook")
    for now in range(1000, 1400, 10):
        launch(busy)
        node.check_at(now)
    assert node.api.evicted == [] and node.api.events == []
    assert IDLE_SINCE in node.annotations("team-b", "notebook")  # shown, never touched
    assert node.metric("vslice_idle_slices", "team-b") == 1
    assert node.metric("vslice_idle_memory_bytes", "team-b") == 4 * GIB


def test_a_namespace_that_forbids_keeping_evicts_a_pod_that_asks_to_be_kept(node: Node) -> None:
    opt_in(node, "team-a", **{"vslice.io/idle-keep": "forbid"})
    node.pod("team-a", "kept", **{"vslice.io/idle-keep": "true"})
    node.check_at(1000)
    node.check_at(1120)
    assert (
        "its annotation vslice.io/idle-keep=true is not honoured" in node.api.events[0]["message"]
    )
    node.check_at(1120 + 1800)
    assert node.api.evicted == [("team-a", "kept")]


def test_a_pdb_refusal_is_reported_once_and_retried(node: Node) -> None:
    opt_in(node, "team-a", **{"vslice.io/idle-grace": "30s"})
    node.pod("team-a", "notebook")
    node.api.blocked_evictions.add(("team-a", "notebook"))
    for now in (1000, 1120, 1150, 1160, 1170):
        node.check_at(now)
    assert node.reasons("notebook") == ["IdleSliceWarning", "IdleSliceReclaimBlocked"]
    assert "disruption budget" in node.api.events[-1]["message"]
    node.api.blocked_evictions.clear()
    node.check_at(1180)
    assert node.api.evicted == [("team-a", "notebook")]


def test_a_bad_namespace_label_reclaims_nothing_there(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    node.api.namespaces["team-a"] = {"vslice.io/idle-reclaim": "4hours"}
    node.pod("team-a", "notebook")
    node.check_at(1000)
    node.check_at(100_000)
    node.check_at(100_010)
    assert node.api.events == [] and node.api.evicted == []
    problems = [r for r in caplog.records if "bad label" in r.getMessage()]
    assert len(problems) == 1
    assert "'4hours'" in str(problems[0].__dict__["error"])


def test_idle_memory_is_counted_in_gib_hours_per_namespace(node: Node) -> None:
    node.pod("team-b", "notebook", region=False)  # no CUDA yet: the allocation's 2 GiB
    node.check_at(1000)
    node.check_at(1060)
    assert node.metric("vslice_idle_memory_gib_hours_total", "team-b") == 0
    node.check_at(1060 + 1800)  # 30 min past the threshold, 2 GiB: 1 GiB-hour
    assert node.metric("vslice_idle_memory_gib_hours_total", "team-b") == pytest.approx(1.0)
    assert node.metric("vslice_idle_memory_bytes", "team-b") == 2 * GIB


def test_a_restarted_monitor_starts_every_clock_again(tmp_path: Path) -> None:
    first = Node(tmp_path / "containers")
    opt_in(first, "team-a")
    first.pod("team-a", "notebook")
    first.check_at(1000)
    first.check_at(1120)
    assert first.reasons("notebook") == ["IdleSliceWarning"]
    second = Node(tmp_path / "containers")
    second.api = first.api
    second.reclaimer.api = first.api
    second.check_at(5000)  # a new process: it saw no idle time yet
    assert first.api.evicted == []
    assert IDLE_RECLAIM_AT not in second.annotations("team-a", "notebook")


def test_reclaim_off_on_a_node_still_marks_and_counts(tmp_path: Path) -> None:
    node = Node(
        tmp_path / "c", IdleSettings(idle_after_s=60, grace_s=30, reclaim=False, every_s=10)
    )
    opt_in(node, "team-a")
    node.pod("team-a", "notebook")
    for now in (1000, 2000, 3000, 4000):
        node.check_at(now)
    assert node.api.evicted == [] and node.api.events == []
    assert node.api.calls["labelled_namespaces"] == 0
    assert IDLE_SINCE in node.annotations("team-a", "notebook")


def test_nothing_is_decided_while_the_pod_list_fails(node: Node) -> None:
    opt_in(node, "team-a")
    node.pod("team-a", "notebook")
    node.check_at(1000)
    node.reclaimer.listing = lambda: None
    node.check_at(100_000)
    node.check_at(100_100)
    assert node.api.events == [] and node.api.evicted == []
