"""What a real lab node is configured with, checked without starting it."""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path

import pytest
from vslice_build.binaries import NodeBinaries
from vslice_lab import hostchanges, nodeconfig, realnode
from vslice_lab.inventory import load_inventory
from vslice_lab.pki import KeyPair

REPO = Path(__file__).resolve().parents[2]


def _binaries(tmp_path: Path) -> NodeBinaries:
    return NodeBinaries(
        kubelet=tmp_path / "kubelet",
        containerd=tmp_path / "containerd",
        containerd_shim=tmp_path / "containerd-shim-runc-v2",
        ctr=tmp_path / "ctr",
        runc=Path("/usr/sbin/runc"),
        cni_bin_dir=Path("/usr/lib/cni"),
    )


def _outside(value: object, root: Path) -> list[str]:
    """Absolute paths in a configuration that are not below ``root`` (or the binaries')."""
    found: list[str] = []
    if isinstance(value, dict):
        for item in value.values():
            found += _outside(item, root)
    elif isinstance(value, list):
        for item in value:
            found += _outside(item, root)
    elif (
        isinstance(value, str)
        and value.startswith("/")
        and not value.startswith((str(root), "/usr/"))
    ):
        found.append(value)
    return found


def test_containerd_keeps_every_path_below_the_node_directory(tmp_path: Path) -> None:
    layout = nodeconfig.NodeLayout(tmp_path / "nodes" / "n1")
    config = tomllib.loads(nodeconfig.containerd_config(layout, _binaries(tmp_path), "x/pause:1"))
    assert config["version"] == 4 and config["imports"] == []
    # The one exception, for the length limits of unix socket paths: a short dir under /run.
    assert set(_outside(config, tmp_path)) == {
        str(layout.shim_sockets),
        str(layout.containerd_socket),
        str(layout.containerd_socket) + ".ttrpc",
        # Its debug server (/debug/pprof), as root-only as the others.
        str(layout.containerd_debug_socket),
    }
    assert len(str(layout.shim_sockets)) <= 42
    runtime = config["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True
    assert runtime["netns_mounts_under_state_dir"] is True
    assert runtime["cdi_spec_dirs"] == [str(layout.cdi_dir)]
    assert config["plugins"]["io.containerd.nri.v1.nri"]["disable"] is True
    images = config["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == "x/pause:1"


def test_the_kubelet_listens_on_loopback_and_authenticates_every_caller(tmp_path: Path) -> None:
    layout = nodeconfig.NodeLayout(tmp_path / "n1")
    ports = nodeconfig.NodePorts(10250, 10248, 9400, 9401)
    pair = KeyPair(tmp_path / "s.crt", tmp_path / "s.key")
    config = nodeconfig.kubelet_config(layout, ports, tmp_path / "ca.crt", pair)
    assert config["address"] == config["healthzBindAddress"] == "127.0.0.1"
    assert config["readOnlyPort"] == 0
    assert config["authentication"]["anonymous"] == {"enabled": False}
    assert config["authorization"] == {"mode": "Webhook"}
    assert config["cgroupDriver"] == "cgroupfs" and config["failCgroupV1"] is False
    assert config["podLogsDir"] == str(layout.pod_logs)
    assert _outside(config, tmp_path) == []


def test_the_pod_network_stays_on_this_host(tmp_path: Path) -> None:
    network = nodeconfig.cni_config(nodeconfig.NodeLayout(tmp_path))
    bridge = network["plugins"][0]
    assert bridge["type"] == "bridge" and len(bridge["bridge"]) <= 15  # IFNAMSIZ
    assert bridge["isGateway"] is False and bridge["ipMasq"] is False
    assert bridge["ipam"]["dataDir"].startswith(str(tmp_path))
    json.dumps(network)


def test_the_fake_driver_gets_the_inventory_gpus_in_index_order() -> None:
    node = next(n for n in load_inventory(REPO / "inventory/lab/cluster.yaml") if n.kubelet)
    text = nodeconfig.fake_gpus(node.inventory)
    entries = [entry.split(",") for entry in text.split(";")]
    assert [uuid for uuid, _, _ in entries] == [g.uuid for g in node.inventory.gpus]
    assert {model for _, model, _ in entries} == {"NVIDIA-L4"}
    assert {size for _, _, size in entries} == {"23034m"}


def test_mount_points_with_blanks_are_read_back_from_mountinfo() -> None:
    assert hostchanges._unescape("/a\\040b\\011c") == "/a b\tc"


def test_a_snapshot_round_trips_through_the_lab_record() -> None:
    snap = hostchanges.snapshot(["vslice-lab0"])
    again = hostchanges.HostSnapshot.from_json(json.loads(json.dumps(snap.to_json())))
    assert again == snap
    assert set(snap.sysctls) <= set(hostchanges.SYSCTLS)


def test_a_machine_that_cannot_run_a_real_node_simulates_it_and_says_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    nodes = load_inventory(REPO / "inventory/lab/cluster.yaml")
    monkeypatch.setattr(nodeconfig.os, "geteuid", lambda: 1000)
    real, note = realnode.choose(nodes, nodeconfig.ShimBuild(tmp_path), tmp_path)
    assert real == []
    assert note == (
        "a real node needs root (containerd and the kubelet manage mounts and cgroups); "
        "simulating lab-l4 instead"
    )


def test_without_the_shim_built_the_real_node_is_simulated_with_the_command_to_run(
    tmp_path: Path,
) -> None:
    nodes = load_inventory(REPO / "inventory/lab/cluster.yaml")
    real, note = realnode.choose(nodes, nodeconfig.ShimBuild(tmp_path / "empty"), tmp_path)
    assert real == [] and "make -C shim" in note


def test_only_one_real_node_runs_per_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nodeconfig, "preflight", lambda _shim: None)
    monkeypatch.setattr(realnode, "claim", lambda _owner: None)
    nodes = load_inventory(REPO / "inventory/lab/cluster.yaml")
    doubled = [
        *nodes,
        dataclasses.replace(
            nodes[-1], inventory=nodes[-1].inventory.model_copy(update={"name": "lab-l4-b"})
        ),
    ]
    real, note = realnode.choose(doubled, nodeconfig.ShimBuild(tmp_path), tmp_path)
    assert [n.name for n in real] == ["lab-l4"]
    assert "one real node per machine" in note and "lab-l4-b" in note


def test_two_labs_never_both_claim_the_real_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(realnode, "CLAIM", tmp_path / "claim")
    first, second = tmp_path / "lab-a", tmp_path / "lab-b"
    assert realnode.claim(first) is None
    assert realnode.claim(first) is None  # the owner again: still its own
    # lab-a has no running record, so its claim is stale and lab-b takes it over ...
    assert realnode.claim(second) is None
    monkeypatch.setattr(realnode, "_lab_runs", lambda _dir: True)
    # ... while a running lab's claim is kept, and named.
    assert realnode.claim(first) == f"the lab in {second} runs this machine's real node"
    realnode.release(first)  # not the holder: nothing happens
    assert (tmp_path / "claim").read_text() == str(second)
    realnode.release(second)
    assert not (tmp_path / "claim").exists()


def test_a_state_dir_too_deep_for_the_kubelets_sockets_is_caught(tmp_path: Path) -> None:
    deep = nodeconfig.NodeLayout(tmp_path / ("d" * 90) / "nodes" / "n1")
    assert deep.long_sockets() and all(len(p) > 107 for p in deep.long_sockets())
    assert nodeconfig.NodeLayout(Path("/tmp/lab/nodes/n1")).long_sockets() == []
