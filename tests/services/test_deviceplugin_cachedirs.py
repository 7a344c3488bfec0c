"""Region directories of pods that are gone are removed; nothing else is."""

from __future__ import annotations

import os
import time
from pathlib import Path

from memory_nodeapi import MemoryNodeApi
from vslice_node.handover.cachedirs import CacheSweeper

NODE = "n1"


def pod_dir(root: Path, uid: str, age_s: float) -> Path:
    path = root / uid / "main"
    path.mkdir(parents=True)
    (path / "vslice.cache").write_bytes(b"x")
    stamp = time.time() - age_s
    os.utime(root / uid, (stamp, stamp))
    return root / uid


def api_with(*uids: str) -> MemoryNodeApi:
    api = MemoryNodeApi()
    for uid in uids:
        api.put_pod(
            {"metadata": {"name": uid, "namespace": "ns", "uid": uid}, "spec": {"nodeName": NODE}}
        )
    return api


def test_only_old_directories_of_pods_no_longer_on_the_node_are_removed(tmp_path: Path) -> None:
    running = pod_dir(tmp_path, "uid-running", age_s=3600)
    gone_old = pod_dir(tmp_path, "uid-gone", age_s=3600)
    gone_recent = pod_dir(tmp_path, "uid-just-allocated", age_s=5)
    sweeper = CacheSweeper(tmp_path, api_with("uid-running"), NODE, grace_s=300)
    assert sweeper.sweep() == [gone_old]
    assert running.exists() and gone_recent.exists() and not gone_old.exists()


def test_nothing_is_removed_while_the_api_server_cannot_be_asked(tmp_path: Path) -> None:
    gone = pod_dir(tmp_path, "uid-gone", age_s=3600)
    api = api_with()
    api.reachable = False
    assert CacheSweeper(tmp_path, api, NODE, grace_s=0).sweep() == []
    assert gone.exists()


def test_sweeps_run_at_most_once_per_interval(tmp_path: Path) -> None:
    api = api_with()
    sweeper = CacheSweeper(tmp_path, api, NODE, every_s=60, grace_s=0)
    sweeper.maybe_sweep(now=1000.0)
    gone = pod_dir(tmp_path, "uid-gone", age_s=10)
    sweeper.maybe_sweep(now=1030.0)
    assert gone.exists()
    sweeper.maybe_sweep(now=1061.0)
    assert not gone.exists()
