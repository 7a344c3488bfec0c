import json
from typing import Any

import pytest
import yaml
from core_builders import container, gpu, node, request
from vslice_core.annotations import ALLOCATION, NODE_GPUS, encode_allocation, encode_node_gpus
from vslice_core.cluster import build_ledger, cluster_from_dump, load_cluster, parse_cluster
from vslice_core.errors import InvalidRequest
from vslice_core.model import Allocation, ContainerAllocation, GpuGrant, GpuUsage

DESIGN_EXAMPLE = """
nodes:
  - name: node-1
    gpus:
      - uuid: GPU-0
        model: NVIDIA-A100-SXM4-80GB
        memory_mib: 81920
        cores: 100
        slots: 10
        index: 0
        numa: 0
        healthy: true
        cordoned: false
        used: {slots: 1, memory_mib: 30720, cores: 50}
      - {uuid: GPU-1, model: NVIDIA-A100-SXM4-80GB, memory_mib: 81920, slots: 10}
    topology: {"GPU-0,GPU-1": 100}
quotas:
  team-a: {limits: {memory_mib: 40960, cores: 200}, used: {memory_mib: 1024, cores: 20}}
"""


def test_the_design_example_parses_with_its_defaults() -> None:
    cluster = load_cluster(DESIGN_EXAMPLE)
    first, second = cluster.nodes[0].gpus
    assert (second.index, second.cores, second.numa, second.healthy, second.cordoned) == (
        1,
        100,
        0,
        True,
        False,
    )
    assert first.used == GpuUsage(slots=1, memory_mib=30720, cores=50)
    assert cluster.nodes[0].usage() == {"GPU-0": first.used}
    assert cluster.nodes[0].inventory().link("GPU-1", "GPU-0") == 100
    assert cluster.quotas["team-a"].limits.cores == 200
    assert json.loads(json.dumps(yaml.safe_load(DESIGN_EXAMPLE))) == yaml.safe_load(DESIGN_EXAMPLE)
    assert load_cluster(json.dumps(yaml.safe_load(DESIGN_EXAMPLE))) == cluster


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "cluster must be a mapping with 'nodes', got list"),
        (
            {"nodes": [{"name": "n", "gpus": [gpu("G0", memory_mib=-1)]}]},
            "nodes.0.gpus.0.memory_mib must be greater than 0, got -1",
        ),
        (
            {"nodes": [{"name": "n", "gpus": [gpu("G0", slots="many")]}]},
            "nodes.0.gpus.0.slots must be a valid integer, unable to parse string as an integer,"
            " got 'many'",
        ),
        (
            {"nodes": [{"name": "n", "gpus": [gpu("G0"), gpu("G0")]}]},
            "gpus[].uuid must be unique, got 'G0' twice",
        ),
        (
            {"nodes": [{"name": "n", "gpus": [gpu("G0")], "topology": {"G0,G0": 1}}]},
            "topology keys must be 'UUID-A,UUID-B' of two GPUs, got 'G0,G0'",
        ),
        ({"nodes": [node("n"), node("n")]}, "nodes[].name must be unique, got 'n' twice"),
        (
            {"nodes": [{"name": "n", "gpus": [gpu("G0", colour="red")]}]},
            "nodes.0.gpus.0.colour must not be set (unknown field), got 'red'",
        ),
        (
            {"nodes": [], "quotas": {"t": {"limits": {"cores": -5}}}},
            "quotas.t.limits.cores must be greater than or equal to 0, got -5",
        ),
    ],
)
def test_invalid_clusters_name_the_field_and_the_value(data: Any, message: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_cluster(data)
    assert message in str(caught.value)


def test_yaml_syntax_errors_are_invalid_requests_with_a_line() -> None:
    with pytest.raises(
        InvalidRequest, match=r"^cluster must be valid YAML or JSON, got .* at line \d+$"
    ):
        load_cluster("nodes:\n  - name: [unclosed\n")


def _node_item(name: str, *gpus: dict[str, Any]) -> dict[str, Any]:
    inventory = parse_cluster({"nodes": [node(name, *gpus)]}).nodes[0].inventory()
    return {
        "kind": "Node",
        "metadata": {"name": name, "annotations": {NODE_GPUS: encode_node_gpus(inventory)}},
    }


def _pod_item(name: str, allocation: Allocation | None, phase: str = "Running") -> dict[str, Any]:
    annotations = {ALLOCATION: encode_allocation(allocation)} if allocation else {}
    return {
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "status": {"phase": phase},
    }


def _grant(node_name: str, uuid: str, memory: int, cores: int = 0) -> Allocation:
    grants = [GpuGrant(uuid=uuid, index=0, memory_mib=memory, cores=cores)]
    return Allocation(node=node_name, containers=[ContainerAllocation(name="main", gpus=grants)])


def test_a_kubectl_dump_counts_live_allocations_only() -> None:
    dump = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            _node_item("node-1", gpu("G0"), gpu("G1")),
            {"kind": "Node", "metadata": {"name": "plain-node"}},
            _pod_item("running", _grant("node-1", "G0", 1000, 10)),
            _pod_item("pending", _grant("node-1", "G0", 500)),
            _pod_item("done", _grant("node-1", "G1", 9999), phase="Succeeded"),
            _pod_item("failed", _grant("node-1", "G1", 9999), phase="Failed"),
            _pod_item("unplaced", None),
            _pod_item("elsewhere", _grant("gone-node", "X0", 5)),
        ],
    }
    cluster = cluster_from_dump(yaml.safe_load(yaml.safe_dump(dump)))
    assert [n.name for n in cluster.nodes] == ["node-1"]
    assert cluster.nodes[0].usage() == {"G0": GpuUsage(slots=2, memory_mib=1500, cores=10)}
    ledger = build_ledger(cluster)
    assert ledger.decide(request(container(mem=1000))).allocation.containers[0].gpus[0].uuid == "G1"  # type: ignore[union-attr]


def test_a_bad_annotation_in_a_dump_names_the_object() -> None:
    broken_node = {"kind": "Node", "metadata": {"name": "n1", "annotations": {NODE_GPUS: "{"}}}
    with pytest.raises(
        InvalidRequest, match=r"^node n1: vslice.io/node-gpus must be a JSON object"
    ):
        cluster_from_dump({"items": [broken_node]})
    broken_pod = {
        "kind": "Pod",
        "metadata": {"name": "p1", "annotations": {ALLOCATION: '{"version": 9}'}},
    }
    with pytest.raises(
        InvalidRequest, match=r"^pod p1: vslice.io/allocation version must be 1, got 9"
    ):
        cluster_from_dump({"items": [broken_pod]})
    with pytest.raises(InvalidRequest, match=r"^dump must be a Kubernetes List"):
        cluster_from_dump({"nodes": []})


def test_build_ledger_applies_usage_and_quotas() -> None:
    cluster = load_cluster(DESIGN_EXAMPLE)
    ledger = build_ledger(cluster)
    assert ledger.gpu_usage("node-1")["GPU-0"] == GpuUsage(slots=1, memory_mib=30720, cores=50)
    over = ledger.decide(request(container(mem=40000), namespace="team-a"), explain=True)
    assert over.nodes["node-1"].reasons == {"quota_exceeded": 1}
    assert ledger.decide(request(container(mem=39000), namespace="team-a")).fits
