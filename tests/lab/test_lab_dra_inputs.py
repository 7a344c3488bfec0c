"""The lab's DRA inputs: ``dra_gpus`` in the inventory splits a node's GPUs between the paths
(annotation and extended resources for the extender path, the ResourceSlice for DRA), the real
node's agent settings, and the version gate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from vslice_core.errors import InvalidRequest
from vslice_lab import dra
from vslice_lab.inventory import load_inventory
from vslice_lab.nodeconfig import NodeLayout, ShimBuild, device_plugin_settings

GPU = {"model": "Tesla-T4", "memory_mib": 15360, "slots": 4}


def write(tmp_path: Path, dra_gpus: list[int]) -> Path:
    path = tmp_path / "cluster.yaml"
    gpus = [{**GPU, "uuid": f"GPU-{i}"} for i in range(3)]
    path.write_text(yaml.safe_dump({"nodes": [{"name": "n", "gpus": gpus, "dra_gpus": dra_gpus}]}))
    return path


def test_dra_gpus_leave_the_annotation_and_the_extended_resources(tmp_path: Path) -> None:
    (node,) = load_inventory(write(tmp_path, [2]))
    assert [g.index for g in node.dra_inventory.gpus] == [2]
    manifest = node.manifest()
    assert manifest["status"]["capacity"]["nvidia.com/gpu"] == "8"
    listed = json.loads(manifest["metadata"]["annotations"]["vslice.io/node-gpus"])
    assert len(listed["gpus"]) == 2
    assert len(node.inventory.gpus) == 3  # the fake driver and the agent still see all three


def test_a_dra_gpu_the_node_does_not_have_is_named(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match=r"dra_gpus names GPU index 5.*it has \[0, 1, 2\]"):
        load_inventory(write(tmp_path, [5]))


def test_the_real_node_agent_serves_its_dra_gpus(tmp_path: Path) -> None:
    layout = NodeLayout(tmp_path / "node")
    (node,) = load_inventory(write(tmp_path, [2]))
    shim = ShimBuild(tmp_path / "shim")
    settings = device_plugin_settings(
        "n", layout, tmp_path / "cluster.yaml", node.inventory, shim, tmp_path / "k", 1, None, [2]
    )
    assert settings["dra"] is True and settings["dra_gpus"] == [2]
    assert settings["kubelet_plugins_registry"] == str(layout.kubelet_root / "plugins_registry")
    assert Path(settings["dra_socket"]).parent == layout.run_dir
    plain = device_plugin_settings(
        "n", layout, tmp_path / "cluster.yaml", node.inventory, shim, tmp_path / "k", 1
    )
    assert "dra" not in plain


@pytest.mark.parametrize(
    ("version", "served"),
    [
        ("v1.36.3", True),
        ("v1.37.0", True),
        ("v2.0.0", True),
        ("v1.35.4", False),
        ("v1.34.4", False),
        ("x", False),
    ],
)
def test_dra_needs_136(version: str, served: bool) -> None:
    assert dra.supported(version) is served


class Slices:
    """The DRA API as the slice publisher uses it, recording what is written."""

    def __init__(self) -> None:
        self.written: dict[str, dict[str, Any]] = {}

    def resource_slice(self, name: str) -> dict[str, Any] | None:
        return self.written.get(name)

    def put_resource_slice(self, body: dict[str, Any], resource_version: str | None) -> None:
        self.written[body["metadata"]["name"]] = body

    def node_uid(self, name: str) -> str | None:
        return f"uid-{name}"


def test_a_kubelet_node_run_simulated_gets_the_slice_of_its_dra_gpus(tmp_path: Path) -> None:
    """`lab up --simulated-only` runs lab-l4 (`kubelet: true`, `dra_gpus: [2]`) under kwok: its
    DRA GPU must be published like any simulated node's (it was left out: 16 GPUs, not 17)."""
    path = write(tmp_path, [2])
    raw = yaml.safe_load(path.read_text())
    raw["nodes"][0]["kubelet"] = True
    path.write_text(yaml.safe_dump(raw))
    (node,) = load_inventory(path)
    assert node.kubelet
    api = Slices()
    assert dra.publish(api, [node]) == 1  # type: ignore[arg-type]
    (published,) = api.written.values()
    assert [d["name"] for d in published["spec"]["devices"]] == ["gpu-2"]
