"""Whatever a container leaves in its region directory, the node's readers of those directories
(the monitor's region reader and the node agent's sweep of region and limits directories) stay
up, answer and touch nothing outside: no link followed, no open that blocks, no SIGBUS."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from deep_trees import deep_nest
from memory_nodeapi import MemoryNodeApi
from prometheus_client.parser import text_string_to_metric_families
from vslice_node.handover.cachedirs import CacheSweeper
from vslice_node.monitor import regions
from vslice_node.monitor.main import metrics_service
from vslice_node.monitor.podnames import PodView
from vslice_node.monitor.settings import MonitorSettings
from vslice_serving.httpserve import HttpService
from vslice_shim import abi
from vslice_shim.region import DeviceLimit, create_region

GPU = "GPU-6c7f0d8e-0000-4000-8000-00000000000a"
MIB = 1024 * 1024
NODE = "node-1"
VSLICE = str(Path(sys.executable).parent / "vslice")
USED = "vslice_container_gpu_memory_limit_bytes"


@pytest.fixture
def cache_root(short_dir: Path) -> Path:
    # Short: a unix socket is one of the things a container can leave there.
    return short_dir / "c"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A host directory no container may reach (standing for /sys, /etc, ...)."""
    path = tmp_path / "host"
    path.mkdir()
    return path


@pytest.fixture
def monitor(cache_root: Path) -> Iterator[HttpService]:
    settings = MonitorSettings(
        listen="127.0.0.1:0",
        node_name=NODE,
        backend="static",
        cache_root=str(cache_root),
        pod_names=False,
    )
    http, _ = metrics_service(settings, lambda _uids: PodView())
    http.start()
    yield http
    http.stop()


def region_at(root: Path, uid: str, container: str = "main") -> Path:
    directory = root / uid / container
    directory.mkdir(parents=True)
    path = directory / "vslice.cache"
    create_region(path, [DeviceLimit(GPU, 1000 * MIB, 50)])
    return path


def region_bytes(tmp_path: Path) -> bytes:
    create_region(tmp_path / "model", [DeviceLimit(GPU, 1000 * MIB, 50)])
    return (tmp_path / "model").read_bytes()


Scraped = dict[tuple[str, str], float]


def scrape_port(port: int) -> Scraped:
    """Samples by name and pod uid; asserts the answer is a 200."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        assert answer.status == 200
        text = answer.read().decode()
    return {
        (s.name, s.labels.get("pod_uid", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def scrape(http: HttpService) -> Scraped:
    return scrape_port(http.port)


def exported_uids(metrics: Scraped) -> set[str]:
    return {uid for name, uid in metrics if name == USED}


def release_readers(fifo: Path) -> None:
    """Unblock a reader stuck opening ``fifo`` (what the old reader did), so a failing test
    fails instead of hanging its server thread for ever."""
    with contextlib.suppress(OSError):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


# -- what a container can put at its region's path -----------------------------------------


def link_to_host_file(path: Path, outside: Path, tmp_path: Path) -> None:
    # Even a file that holds a valid region is not read through a link: the target is the
    # host's, and what the monitor reads from it would be the container's choice of file.
    target = outside / "power"
    target.write_bytes(region_bytes(tmp_path))
    path.symlink_to(target)


def link_to_dev_zero(path: Path, outside: Path, tmp_path: Path) -> None:
    path.symlink_to("/dev/zero")


def fifo(path: Path, outside: Path, tmp_path: Path) -> None:
    os.mkfifo(path)


def directory(path: Path, outside: Path, tmp_path: Path) -> None:
    path.mkdir()
    (path / "vslice.cache").write_bytes(region_bytes(tmp_path))


def unix_socket(path: Path, outside: Path, tmp_path: Path) -> None:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.close()


def device_node(path: Path, outside: Path, tmp_path: Path) -> None:
    # A container's root has CAP_MKNOD: the node of /dev/null here (opening some device
    # nodes, a watchdog, does something to the host; this one is harmless).
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    os.mknod(path, 0o666 | 0o020000, os.makedev(1, 3))


def huge_sparse_file(path: Path, outside: Path, tmp_path: Path) -> None:
    path.write_bytes(region_bytes(tmp_path))
    os.truncate(path, 1 << 40)  # a valid header, then a terabyte of holes


Plant = Callable[[Path, Path, Path], None]
PLANTS: list[Plant] = [
    link_to_host_file,
    link_to_dev_zero,
    fifo,
    directory,
    unix_socket,
    device_node,
    huge_sparse_file,
]


@pytest.mark.parametrize("plant", PLANTS, ids=lambda plant: plant.__name__)
def test_a_region_path_holding_something_else_is_skipped_counted_and_the_scrape_answers(
    monitor: HttpService, cache_root: Path, outside: Path, tmp_path: Path, plant: Plant
) -> None:
    region_at(cache_root, "uid-good")
    bad = cache_root / "uid-bad" / "main"
    bad.mkdir(parents=True)
    plant(bad / "vslice.cache", outside, tmp_path)
    try:
        metrics = scrape(monitor)
    finally:
        release_readers(bad / "vslice.cache")
    assert exported_uids(metrics) == {"uid-good"}
    assert metrics[("vslice_monitor_regions", "")] == 1
    assert metrics[("vslice_monitor_unreadable_regions", "")] == 1


def test_every_kind_of_bad_region_at_once_is_counted_and_logged_once_each(
    monitor: HttpService,
    cache_root: Path,
    outside: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    region_at(cache_root, "uid-good")
    plants: dict[str, Callable[[Path], None]] = {
        plant.__name__: (lambda path, plant=plant: plant(path, outside, tmp_path))
        for plant in PLANTS
        if plant is not device_node or os.geteuid() == 0
    }
    plants["empty"] = lambda path: path.write_bytes(b"")
    plants["half_a_header"] = lambda path: path.write_bytes(b"\0" * (abi.HEADER_SIZE // 2))
    plants["wrong_magic"] = lambda path: create_region(path, [], magic=0x1234)
    for name, plant in plants.items():
        (cache_root / name / "main").mkdir(parents=True)
        plant(cache_root / name / "main" / "vslice.cache")
    with caplog.at_level(logging.WARNING, logger="vslice.monitor.regions"):
        for _ in range(3):
            metrics = scrape(monitor)
            assert exported_uids(metrics) == {"uid-good"}
            assert metrics[("vslice_monitor_unreadable_regions", "")] == len(plants)
    logged = sorted(Path(r.__dict__["path"]).parent.parent.name for r in caplog.records)
    assert logged == sorted(plants)


def test_a_fifo_renamed_over_the_region_after_the_listing_does_not_block_the_scrape(
    monitor: HttpService, cache_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    region_at(cache_root, "uid-good")
    swapped = region_at(cache_root, "uid-bad")
    real_find = regions.find_regions

    def find_then_swap(root: Path) -> list[regions.RegionFile]:
        found = real_find(root)
        os.mkfifo(swapped.with_name("fifo"))
        os.replace(swapped.with_name("fifo"), swapped)
        return found

    monkeypatch.setattr(regions, "find_regions", find_then_swap)
    try:
        metrics = scrape(monitor)
    finally:
        release_readers(swapped)
    assert exported_uids(metrics) == {"uid-good"}
    assert metrics[("vslice_monitor_unreadable_regions", "")] == 1


def test_a_region_whose_problem_keeps_changing_is_logged_once_per_problem(
    monitor: HttpService, cache_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # What a container truncating its region in a loop looks like to scrapes: short, then
    # foreign, then short again. One line per problem, not one per scrape.
    path = region_at(cache_root, "uid-bad")
    with caplog.at_level(logging.WARNING, logger="vslice.monitor.regions"):
        for _ in range(3):
            path.write_bytes(b"\0" * 10)
            scrape(monitor)
            create_region(path, [], magic=0x1234)
            scrape(monitor)
    assert len(caplog.records) == 2


def test_links_and_files_at_the_pod_and_container_levels_are_not_followed(
    monitor: HttpService, cache_root: Path, outside: Path
) -> None:
    # Those levels are the node's, not the containers': a guard that the walk stays so.
    region_at(outside, "uid-elsewhere")
    region_at(cache_root, "uid-good")
    (cache_root / "uid-pod-link").symlink_to(outside / "uid-elsewhere")
    (cache_root / "uid-container-link").mkdir()
    (cache_root / "uid-container-link" / "main").symlink_to(outside / "uid-elsewhere" / "main")
    (cache_root / "uid-file").write_bytes(b"x")
    metrics = scrape(monitor)
    assert exported_uids(metrics) == {"uid-good"}
    assert metrics[("vslice_monitor_unreadable_regions", "")] == 0


def truncate_in_a_loop(path: Path, image: bytes, stop: threading.Event) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        while not stop.is_set():
            os.pwrite(fd, image, 0)
            os.ftruncate(fd, abi.HEADER_SIZE)
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.slow
def test_a_region_truncated_in_a_loop_while_scraped_never_stops_the_monitor(
    cache_root: Path, tmp_path: Path
) -> None:
    # The monitor as its own process: a SIGBUS would kill it, not this test.
    region_at(cache_root, "uid-good")
    hostile = region_at(cache_root, "uid-bad")
    port = free_port()
    config = tmp_path / "monitor.yaml"
    settings = {"listen": f"127.0.0.1:{port}", "cache_root": str(cache_root)}
    config.write_text(yaml.safe_dump(settings | {"backend": "static", "pod_names": False}))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    process = subprocess.Popen(
        [VSLICE, "serve", "monitor", "--config", str(config)],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    stop = threading.Event()
    truncator = threading.Thread(
        target=truncate_in_a_loop, args=(hostile, region_bytes(tmp_path), stop)
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                scrape_port(port)
                break
            except OSError:
                assert time.monotonic() < deadline, "the monitor never answered"
                time.sleep(0.1)
        truncator.start()
        for _ in range(300):
            assert process.poll() is None, f"the monitor died: {process.returncode}"
            metrics = scrape_port(port)  # asserts 200
            assert "uid-good" in exported_uids(metrics)
        assert process.poll() is None
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        stop.set()
        if truncator.is_alive():
            truncator.join()
        if process.poll() is None:
            process.kill()
    lines = [json.loads(line) for line in process.communicate()[1].splitlines()]
    assert lines[-1]["msg"] == "stopped"


# -- the node agent's sweep of region and limits directories -------------------------------


def api_with_no_pods() -> MemoryNodeApi:
    return MemoryNodeApi()


def age(path: Path, seconds: float = 3600) -> None:
    stamp = time.time() - seconds
    os.utime(path, (stamp, stamp), follow_symlinks=False)


def test_a_pod_directory_replaced_by_a_link_is_left_and_its_target_survives(
    cache_root: Path, outside: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (outside / "keep").write_text("host data")
    cache_root.mkdir()
    (cache_root / "uid-gone").symlink_to(outside)
    age(cache_root / "uid-gone")
    sweeper = CacheSweeper(cache_root, api_with_no_pods(), NODE, grace_s=0)
    with caplog.at_level(logging.WARNING, logger="vslice.deviceplugin.cachedirs"):
        assert sweeper.sweep() == []
        assert sweeper.sweep() == []
    assert (outside / "keep").read_text() == "host data"
    assert (cache_root / "uid-gone").is_symlink()
    assert len(caplog.records) == 1  # logged once, not at every sweep


def test_a_gone_pods_tree_is_removed_whatever_its_containers_left_in_it(
    cache_root: Path, outside: Path
) -> None:
    (outside / "keep").write_text("host data")
    (outside / "keep-dir").mkdir()
    (outside / "keep-dir" / "file").write_text("host data")
    mine = cache_root / "uid-a-deep" / "main"
    mine.mkdir(parents=True)
    (mine / "to-file").symlink_to(outside / "keep")
    (mine / "to-dir").symlink_to(outside / "keep-dir")
    os.mkfifo(mine / "fifo")
    # Deeper than Python's recursion limit: shutil.rmtree of Python 3.11 raised out of the
    # sweep on this, every time, and never reached another pod's directory.
    other = cache_root / "uid-b-plain" / "main"
    other.mkdir(parents=True)
    with deep_nest(mine, cache_root / "uid-a-deep", link_to=outside / "keep-dir"):
        for uid in ("uid-a-deep", "uid-b-plain"):
            age(cache_root / uid)
        removed = CacheSweeper(cache_root, api_with_no_pods(), NODE, grace_s=0).sweep()
    assert removed == [cache_root / "uid-a-deep", cache_root / "uid-b-plain"]
    assert os.listdir(cache_root) == []
    assert (outside / "keep").read_text() == "host data"
    assert (outside / "keep-dir" / "file").read_text() == "host data"


def test_a_tree_that_cannot_be_removed_is_reported_and_the_sweep_goes_on(
    cache_root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for uid in ("uid-a-stuck", "uid-b-plain"):
        (cache_root / uid / "main").mkdir(parents=True)
        age(cache_root / uid)
    real_rmdir = os.rmdir

    def refuse_the_first(path: str, *, dir_fd: int | None = None) -> None:
        if path == "uid-a-stuck":
            raise OSError(errno.EBUSY, "busy", path)
        real_rmdir(path, dir_fd=dir_fd)

    monkeypatch.setattr(os, "rmdir", refuse_the_first)
    with caplog.at_level(logging.WARNING, logger="vslice.deviceplugin.cachedirs"):
        removed = CacheSweeper(cache_root, api_with_no_pods(), NODE, grace_s=0).sweep()
    assert removed == [cache_root / "uid-b-plain"]
    assert [r.__dict__["pod_uid"] for r in caplog.records] == ["uid-a-stuck"]
