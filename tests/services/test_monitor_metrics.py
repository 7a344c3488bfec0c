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
from vslice_node.monitor.collector import Utilization
from vslice_node.monitor.main import metrics_service, no_names
from vslice_node.monitor.settings import MonitorSettings
from vslice_serving.httpserve import HttpService
from vslice_shim import abi, open_region
from vslice_shim.region import DeviceLimit, create_region

GPU_A = "GPU-6c7f0d8e-0000-4000-8000-00000000000a"
GPU_B = "GPU-6c7f0d8e-0000-4000-8000-00000000000b"
MIB = 1024 * 1024


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
        listen="127.0.0.1:0", backend="static", cache_root=str(cache_root), pod_names=False
    )
    http, _ = metrics_service(settings, lambda _uids: {"uid-1": ("team-a", "train")})
    http.start()
    yield http
    http.stop()


def scrape(http: HttpService) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{http.port}/metrics", timeout=5) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
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
    assert metrics[("vslice_container_gpu_sm_limit_percent", a)] == 50
    assert ("vslice_container_gpu_sm_limit_percent", b) not in metrics  # 0 = no compute limit
    assert metrics[("vslice_container_gpu_busy_seconds_total", a)] == 2.5
    assert metrics[("vslice_container_gpu_launches_total", a)] == 6
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
        listen="127.0.0.1:0", backend="static", cache_root="/nonexistent/vslice", pod_names=False
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
    assert utilization.observe(key, 1_000_000_000) == pytest.approx(50.0)
    now[0] += 0.5  # too soon for a new sample: the last value stands
    assert utilization.observe(key, 1_900_000_000) == pytest.approx(50.0)
    now[0] += 0.5
    assert utilization.observe(key, 1_900_000_000) == pytest.approx(90.0)
    now[0] += 1.0
    assert utilization.observe(key, 5) is None  # counter went back: the region was recreated


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
    names = PodNames(api, "node-1", every_s=3600, clock=lambda: now[0])  # type: ignore[arg-type]
    names.refresh()
    api.pods = [{"metadata": {"uid": "new", "namespace": "team-a", "name": "fresh"}}]
    now[0] += 1.5
    assert names({"new"}) == {"new": ("team-a", "fresh")}
    assert api.calls == 2
    now[0] += 0.5
    assert names({"new", "gone"})["new"] == ("team-a", "fresh")
    assert api.calls == 2  # an unknown uid asks again at most once a second
    assert names({"new"}) and api.calls == 2  # a known one never asks


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
