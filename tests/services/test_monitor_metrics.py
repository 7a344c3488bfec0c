"""The monitor reads real region files (written through vslice_shim's ABI) and serves them as
Prometheus metrics over HTTP."""

from __future__ import annotations

import logging
import mmap
import os
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from vslice_node.monitor import regions
from vslice_node.monitor.collector import Idleness, Utilization
from vslice_node.monitor.main import metrics_service, no_names
from vslice_node.monitor.podnames import PodView
from vslice_node.monitor.settings import MonitorSettings
from vslice_serving.httpserve import HttpService
from vslice_shim import abi, open_region
from vslice_shim.region import DeviceLimit, create_region

GPU_A = "GPU-6c7f0d8e-0000-4000-8000-00000000000a"
GPU_B = "GPU-6c7f0d8e-0000-4000-8000-00000000000b"
MIB = 1024 * 1024
NODE = "node-1"


def write_usage(path: Path, pid: int, used: dict[int, int], busy_ns: int = 0) -> None:
    """Record a process holding ``used`` bytes per device index, as the shim does under its lock."""
    fd = os.open(path, os.O_RDWR)
    try:
        with mmap.mmap(fd, abi.REGION_SIZE) as mapping:
            region = abi.ffi.cast("vs_region *", abi.ffi.from_buffer(mapping))
            slot = region.slots[region.header.slot_hwm]
            slot.pid = pid
            for index, amount in used.items():
                slot.used[index] = amount
                region.devices[index].mem_used += amount
                region.devices[index].busy_ns += busy_ns
                region.devices[index].launches += 3
            region.header.slot_hwm += 1
            del region, slot
    finally:
        os.close(fd)


def region_at(root: Path, uid: str, container: str, *limits: DeviceLimit) -> Path:
    directory = root / uid / container
    directory.mkdir(parents=True)
    path = directory / "vslice.cache"
    create_region(path, list(limits))
    return path


@pytest.fixture
def cache_root(tmp_path: Path) -> Path:
    return tmp_path / "containers"


@pytest.fixture
def monitor(cache_root: Path) -> Iterator[HttpService]:
    settings = MonitorSettings(
        listen="127.0.0.1:0",
        node_name=NODE,
        backend="static",
        cache_root=str(cache_root),
        pod_names=False,
    )
    http, _ = metrics_service(settings, lambda _uids: PodView({"uid-1": ("team-a", "train")}))
    http.start()
    yield http
    http.stop()


Scraped = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(http: HttpService) -> Scraped:
    """Every sample by name and labels, the ``node`` label checked on each and left out."""
    with urllib.request.urlopen(f"http://127.0.0.1:{http.port}/metrics", timeout=5) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    assert samples
    assert {s.labels.get("node") for s in samples} == {NODE}, "every series names the node"
    return {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "node"))): s.value
        for s in samples
    }


def labels(uid: str, container: str, gpu: str, index: int, ns: str = "", pod: str = "") -> tuple:
    return tuple(
        sorted(
            {
                "namespace": ns,
                "pod": pod,
                "pod_uid": uid,
                "container": container,
                "gpu": gpu,
                "index": str(index),
            }.items()
        )
    )


def names(metrics: Scraped) -> set[str]:
    return {name for name, _ in metrics}


def test_metrics_show_each_containers_memory_used_against_its_limit(
    monitor: HttpService, cache_root: Path
) -> None:
    path = region_at(
        cache_root,
        "uid-1",
        "main",
        DeviceLimit(GPU_A, 3000 * MIB, 50),
        DeviceLimit(GPU_B, 1000 * MIB, 0),
    )
    write_usage(path, pid=41, used={0: 700 * MIB, 1: 10 * MIB}, busy_ns=2_500_000_000)
    write_usage(path, pid=42, used={0: 100 * MIB})
    other = region_at(cache_root, "uid-2", "side", DeviceLimit(GPU_A, 512 * MIB, 20))
    write_usage(other, pid=7, used={0: 64 * MIB})

    metrics = scrape(monitor)

    a = labels("uid-1", "main", GPU_A, 0, "team-a", "train")
    b = labels("uid-1", "main", GPU_B, 1, "team-a", "train")
    side = labels("uid-2", "side", GPU_A, 0)
    assert metrics[("vslice_container_gpu_memory_used_bytes", a)] == 800 * MIB
    assert metrics[("vslice_container_gpu_memory_limit_bytes", a)] == 3000 * MIB
    assert metrics[("vslice_container_gpu_memory_used_bytes", b)] == 10 * MIB
    assert metrics[("vslice_container_gpu_memory_used_bytes", side)] == 64 * MIB
    assert metrics[("vslice_container_gpu_sm_limit_ratio", a)] == 0.5
    assert ("vslice_container_gpu_sm_limit_ratio", b) not in metrics  # 0 = no compute limit
    assert metrics[("vslice_container_gpu_busy_seconds_total", a)] == 2.5
    assert metrics[("vslice_container_gpu_launches_total", a)] == 6
    assert metrics[("vslice_container_gpu_idle_seconds", a)] == 0  # first seen just now
    assert not {n for n in names(metrics) if n.endswith("_created") or "percent" in n}
    assert not {n for n in names(metrics) if not n.startswith("vslice_")}  # no HAMi names
    owner = tuple(
        sorted(
            {"namespace": "team-a", "pod": "train", "pod_uid": "uid-1", "container": "main"}.items()
        )
    )
    assert metrics[("vslice_container_processes", owner)] == 2
    assert metrics[("vslice_monitor_regions", ())] == 2


def test_a_foreign_or_short_region_file_is_counted_and_logged_once_not_fatal(
    monitor: HttpService, cache_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    region_at(cache_root, "uid-1", "main", DeviceLimit(GPU_A, 3000 * MIB, 50))
    foreign = cache_root / "uid-3" / "x"
    foreign.mkdir(parents=True)
    create_region(foreign / "vslice.cache", [], magic=0x1234)
    short = cache_root / "uid-4" / "y"
    short.mkdir(parents=True)
    (short / "vslice.cache").write_bytes(b"\0" * 10)
    with caplog.at_level(logging.WARNING, logger="vslice.monitor.regions"):
        first = scrape(monitor)
        second = scrape(monitor)
    for metrics in (first, second):
        assert metrics[("vslice_monitor_regions", ())] == 1
        assert metrics[("vslice_monitor_unreadable_regions", ())] == 2
    errors = [r.__dict__["error"] for r in caplog.records]
    assert len(errors) == 2
    assert any("is not a vslice region" in e for e in errors)


def test_an_empty_node_exports_no_container_series() -> None:
    settings = MonitorSettings(
        listen="127.0.0.1:0",
        node_name=NODE,
        backend="static",
        cache_root="/nonexistent/vslice",
        pod_names=False,
    )
    http, _ = metrics_service(settings, no_names)
    http.start()
    try:
        metrics = scrape(http)
    finally:
        http.stop()
    assert not [name for name, _ in metrics if name.startswith("vslice_container_")]
    assert metrics[("vslice_monitor_regions", ())] == 0


def test_utilization_is_busy_time_per_wall_time_between_samples() -> None:
    now = [100.0]
    utilization = Utilization(clock=lambda: now[0])
    key = ("uid", "main", 0)
    assert utilization.observe(key, 0) is None
    now[0] += 2.0
    assert utilization.observe(key, 1_000_000_000) == pytest.approx(0.5)
    now[0] += 0.5  # too soon for a new sample: the last value stands
    assert utilization.observe(key, 1_900_000_000) == pytest.approx(0.5)
    now[0] += 0.5
    assert utilization.observe(key, 1_900_000_000) == pytest.approx(0.9)
    now[0] += 1.0
    assert utilization.observe(key, 5) is None  # counter went back: the region was recreated


def test_idle_seconds_count_from_the_last_change_of_the_launch_count() -> None:
    now = [100.0]
    idleness = Idleness(clock=lambda: now[0])
    key = ("uid", "main", 0)
    assert idleness.observe(key, 0) == 0  # first seen, never launched: counts from here
    now[0] += 30.0
    assert idleness.observe(key, 0) == 30.0
    now[0] += 5.0
    assert idleness.observe(key, 4) == 0  # launched since the last look
    now[0] += 12.5
    assert idleness.observe(key, 4) == 12.5
    idleness.forget_except(set())
    now[0] += 100.0
    assert idleness.observe(key, 4) == 0  # a region seen anew starts over


class _CountingApi:
    def __init__(self) -> None:
        self.calls = 0
        self.pods: list[dict[str, object]] = []

    def pods_on_node(self, node: str) -> list[dict[str, object]]:
        self.calls += 1
        return self.pods


def test_a_pod_newer_than_the_last_refresh_is_named_at_once_but_not_asked_for_twice() -> None:
    from vslice_node.monitor.podnames import PodNames

    api = _CountingApi()
    now = [100.0]
    pods = PodNames(api, "node-1", every_s=3600, clock=lambda: now[0])  # type: ignore[arg-type]
    pods.refresh()
    api.pods = [{"metadata": {"uid": "new", "namespace": "team-a", "name": "fresh"}}]
    now[0] += 0.2  # sooner than a second after the last list: still asked, the list is older
    assert pods({"new"}).names == {"new": ("team-a", "fresh")}
    assert api.calls == 2
    now[0] += 0.5
    view = pods({"new", "gone"})
    assert view.names["new"] == ("team-a", "fresh")
    assert api.calls == 3 and view.ended == {"gone"}  # one list for the uid first seen now
    now[0] += 0.5
    assert pods({"new", "gone"}).ended == {"gone"}
    assert api.calls == 3  # an unknown uid already listed after it was seen: not again
    assert pods({"new"}).names and api.calls == 3  # a known one never asks


def test_a_scrape_during_another_scrapes_list_waits_for_it_and_gets_the_name() -> None:
    """Prometheus and a person scrape at once: the second must not return the list from
    before the pod existed while the first one's list is still on its way."""
    import threading

    from vslice_node.monitor.podnames import PodNames

    listing = threading.Event()
    release = threading.Event()

    class SlowApi(_CountingApi):
        def pods_on_node(self, node: str) -> list[dict[str, object]]:
            listing.set()
            release.wait(5)
            return super().pods_on_node(node)

    api = SlowApi()
    now = [100.0]
    pods = PodNames(api, "node-1", every_s=3600, clock=lambda: now[0])  # type: ignore[arg-type]
    release.set()
    pods.refresh()
    release.clear()
    listing.clear()
    api.pods = [{"metadata": {"uid": "new", "namespace": "team-a", "name": "fresh"}}]
    now[0] += 5.0
    first = threading.Thread(target=pods, args=({"new"},))
    first.start()
    assert listing.wait(5)  # the first scrape's list is in flight
    seen: list[object] = []
    second = threading.Thread(target=lambda: seen.append(pods({"new"}).names))
    second.start()
    second.join(0.2)
    assert second.is_alive()  # waits for the list in flight
    release.set()
    first.join(5)
    second.join(5)
    assert seen == [{"new": ("team-a", "fresh")}]
    assert api.calls == 2  # the second scrape used the first one's list


class _Listing:
    """What ``os.scandir`` returns, from entries already read."""

    def __init__(self, entries: list[os.DirEntry[str]]) -> None:
        self._entries = entries

    def __enter__(self) -> Iterator[os.DirEntry[str]]:
        return iter(self._entries)

    def __exit__(self, *_exc: object) -> None:
        return None

    def __iter__(self) -> Iterator[os.DirEntry[str]]:
        return iter(self._entries)


def test_a_pod_directory_removed_while_the_scrape_walks_is_gone_not_an_error(
    monitor: HttpService, cache_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    region_at(cache_root, "uid-1", "main", DeviceLimit(GPU_A, 3000 * MIB, 50))
    region_at(cache_root, "uid-2", "side", DeviceLimit(GPU_A, 512 * MIB, 20))
    real_scandir = os.scandir

    def scandir_then_delete(path: str | os.PathLike[str]) -> object:
        # The device plugin removes uid-2's directory just after the root was listed.
        if isinstance(path, int) or Path(path) != cache_root:
            return real_scandir(path)  # shutil.rmtree lists by file descriptor
        with real_scandir(path) as listing:
            entries = list(listing)
        if (cache_root / "uid-2").exists():
            shutil.rmtree(cache_root / "uid-2")
        return _Listing(entries)

    monkeypatch.setattr(os, "scandir", scandir_then_delete)
    metrics = scrape(monitor)  # asserts 200
    assert metrics[("vslice_monitor_regions", ())] == 1
    assert metrics[("vslice_monitor_unreadable_regions", ())] == 0


def test_a_region_file_removed_between_listing_and_reading_is_skipped(
    monitor: HttpService, cache_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    region_at(cache_root, "uid-1", "main", DeviceLimit(GPU_A, 3000 * MIB, 50))
    gone = region_at(cache_root, "uid-2", "side", DeviceLimit(GPU_A, 512 * MIB, 20))
    real_open = open_region

    def delete_then_open(path: str | os.PathLike[str]) -> object:
        if Path(path) == gone:
            gone.unlink()
        return real_open(path)

    monkeypatch.setattr(regions, "open_region", delete_then_open)
    metrics = scrape(monitor)
    assert metrics[("vslice_monitor_regions", ())] == 1
    assert metrics[("vslice_monitor_unreadable_regions", ())] == 0


# -- regions of pods that ended ------------------------------------------------------------


def pod(uid: str, name: str, phase: str = "Running") -> dict[str, object]:
    return {
        "metadata": {"uid": uid, "namespace": "team-a", "name": name},
        "spec": {"nodeName": NODE},
        "status": {"phase": phase},
    }


def pod_uids(metrics: Scraped, name: str = "vslice_container_gpu_memory_used_bytes") -> set[str]:
    return {dict(labels)["pod_uid"] for metric, labels in metrics if metric == name}


def test_regions_of_finished_or_deleted_pods_are_not_exported_unless_the_api_is_unreachable(
    cache_root: Path,
) -> None:
    from memory_nodeapi import MemoryNodeApi
    from vslice_node.monitor.podnames import PodNames

    api = MemoryNodeApi()
    api.put_pod(pod("uid-1", "train"))
    api.put_pod(pod("uid-2", "done", phase="Succeeded"))
    api.put_pod(pod("uid-5", "crashed", phase="Failed"))
    for uid in ("uid-1", "uid-2", "uid-3", "uid-5"):  # uid-3: its pod was deleted
        write_usage(
            region_at(cache_root, uid, "main", DeviceLimit(GPU_A, 512 * MIB, 20)), 7, {0: MIB}
        )
    now = [100.0]
    pods = PodNames(api, NODE, every_s=3600, clock=lambda: now[0])
    settings = MonitorSettings(
        listen="127.0.0.1:0", node_name=NODE, backend="static", cache_root=str(cache_root)
    )
    http, _ = metrics_service(settings, pods)
    http.start()
    try:
        metrics = scrape(http)
        assert pod_uids(metrics) == {"uid-1"}
        assert pod_uids(metrics, "vslice_container_processes") == {"uid-1"}
        assert pod_uids(metrics, "vslice_container_gpu_idle_seconds") == {"uid-1"}
        assert metrics[("vslice_monitor_regions", ())] == 4  # read, not exported

        # A region first seen after the last list: its pod is newer than the list, not gone.
        api.put_pod(pod("uid-4", "fresh"))
        region_at(cache_root, "uid-4", "main", DeviceLimit(GPU_A, 512 * MIB, 20))
        now[0] += 0.5  # a list taken before the region was seen cannot say it is gone
        metrics = scrape(http)
        assert pod_uids(metrics) == {"uid-1", "uid-4"}
        assert (
            "vslice_container_gpu_memory_used_bytes",
            labels("uid-4", "main", GPU_A, 0, "team-a", "fresh"),
        ) in metrics

        # The API server cannot say which pods ended: everything is exported, as before.
        api.reachable = False
        now[0] += 2.0
        pods.refresh()  # the background list (every ``every_s``) fails
        assert pod_uids(scrape(http)) == {"uid-1", "uid-2", "uid-3", "uid-4", "uid-5"}

        api.reachable = True
        api.delete_pod("team-a", "train")
        now[0] += 2.0
        pods.refresh()
        assert pod_uids(scrape(http)) == {"uid-4"}
    finally:
        http.stop()


# -- HAMi's names --------------------------------------------------------------------------


def test_hami_metrics_add_hamis_container_series_beside_vslices_own(cache_root: Path) -> None:
    path = region_at(cache_root, "uid-1", "main", DeviceLimit(GPU_A, 3000 * MIB, 50))
    write_usage(path, pid=41, used={0: 700 * MIB})
    region_at(cache_root, "uid-2", "side", DeviceLimit(GPU_B, 0, 0))  # no limits, no launches
    settings = MonitorSettings(
        listen="127.0.0.1:0",
        node_name=NODE,
        backend="static",
        cache_root=str(cache_root),
        pod_names=False,
        hami_metrics=True,
    )
    http, _ = metrics_service(settings, lambda _uids: PodView({"uid-1": ("team-a", "train")}))
    http.start()
    try:
        metrics = scrape(http)
    finally:
        http.stop()
    hami = tuple(
        sorted(
            {
                "podnamespace": "team-a",
                "podname": "train",
                "ctrname": "main",
                "vdeviceid": "0",
                "deviceuuid": GPU_A,
                "zone": "vGPU",
            }.items()
        )
    )
    assert metrics[("vGPU_device_memory_usage_in_bytes", hami)] == 700 * MIB
    assert metrics[("vGPU_device_memory_limit_in_bytes", hami)] == 3000 * MIB
    assert metrics[("Device_last_kernel_of_container", hami)] == 0  # launched, seen just now
    side = {dict(labels)["ctrname"] for name, labels in metrics if name.startswith("vGPU_")}
    assert side == {"main", "side"}
    assert {
        dict(labels)["ctrname"]
        for name, labels in metrics
        if name in ("vGPU_device_memory_limit_in_bytes", "Device_last_kernel_of_container")
    } == {"main"}  # HAMi exports no limit without one, no last kernel before the first
    # vslice's own series stay as they are.
    assert (
        metrics[
            (
                "vslice_container_gpu_memory_used_bytes",
                labels("uid-1", "main", GPU_A, 0, "team-a", "train"),
            )
        ]
        == 700 * MIB
    )


def test_hami_utilization_is_a_percentage_and_last_kernel_the_idle_seconds(
    cache_root: Path,
) -> None:
    from prometheus_client import CollectorRegistry, generate_latest
    from vslice_node.monitor.collector import ContainerCollector
    from vslice_node.monitor.regions import RegionReader

    path = region_at(cache_root, "uid-1", "main", DeviceLimit(GPU_A, 3000 * MIB, 50))
    write_usage(path, pid=41, used={0: MIB})
    now = [100.0]
    registry = CollectorRegistry()
    registry.register(
        ContainerCollector(
            RegionReader(cache_root),
            utilization=Utilization(clock=lambda: now[0]),
            idleness=Idleness(clock=lambda: now[0]),
            hami=True,
        )
    )

    def values(name: str) -> list[float]:
        text = generate_latest(registry).decode()
        return [
            s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == name
        ]

    assert values("Device_utilization_desc_of_container") == []  # one sample is no rate
    now[0] += 4.0
    write_usage(path, pid=42, used={0: MIB}, busy_ns=1_000_000_000)  # 1 s busy in 4 s
    text = generate_latest(registry).decode()
    found = {
        s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples
    }
    assert found["Device_utilization_desc_of_container"] == pytest.approx(25.0)
    assert found["vslice_container_gpu_sm_utilization_ratio"] == pytest.approx(0.25)
    assert found["Device_last_kernel_of_container"] == 0  # the count moved
    now[0] += 90.0
    assert values("Device_last_kernel_of_container") == [90.0]
    assert values("vslice_container_gpu_idle_seconds") == [90.0]
