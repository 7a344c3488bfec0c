"""The views on the DRA path: ResourceSlices as inventories, allocated ResourceClaims as
allocations, pending DRA pods with their why-not, read beside the extender's annotations."""

from __future__ import annotations

from typing import Any

import pytest
from api_objects import cluster_objects, node
from dra_objects import bare_node, claim, claim_spec, device, dra_pod, resource_slice, result
from dra_objects import template as claim_template
from vslice.commands import allocations, top
from vslice.snapshot import UNRESERVED, ClusterSnapshot
from vslice_core.ledger import charges


def dra_cluster(**extra: Any) -> ClusterSnapshot:
    """node-a and node-b by annotation (api_objects), node-c by its ResourceSlice only, and a
    DRA pod on node-c holding 8 GiB and 30 % of its GPU 0."""
    nodes, pods = cluster_objects()
    nodes.append(bare_node("node-c", "10.0.0.3"))
    pods.append(dra_pod("team-d", "train", node="node-c", generated="train-vslice-gpu-x7k2p"))
    slices = [resource_slice("node-c", [device(0, "GPU-c-0"), device(1, "GPU-c-1")])]
    claims = [
        claim(
            "team-d",
            "train-vslice-gpu-x7k2p",
            results=[result("node-c")],
            reserved=[("train", "uid-train")],
        )
    ]
    pods += extra.get("pods", [])
    slices += extra.get("slices", [])
    claims += extra.get("claims", [])
    return ClusterSnapshot.read(nodes, pods, slices, claims, templates=extra.get("templates"))


def row(snapshot: ClusterSnapshot, node_name: str, index: int) -> Any:
    return next(r for r in snapshot.gpus() if r.node == node_name and r.index == index)


def test_a_node_known_only_by_its_slice_is_an_inventory_with_its_address() -> None:
    snapshot = dra_cluster()
    gpu = row(snapshot, "node-c", 1)
    assert (gpu.uuid, gpu.model, gpu.memory_mib, gpu.slots) == (
        "GPU-c-1",
        "NVIDIA-A100-SXM4-80GB",
        81920,  # "80Gi", the canonical form the API server stores
        4,
    )
    assert gpu.address == "10.0.0.3"
    assert snapshot.problems == []


def test_an_allocated_claim_counts_on_its_gpu_for_the_pod_it_is_reserved_for() -> None:
    snapshot = dra_cluster()
    gpu = row(snapshot, "node-c", 0)
    assert (gpu.memory_used_mib, gpu.cores_used, gpu.slots_used) == (8192, 30, 1)
    assert gpu.pods == ("team-d/train",)
    (grant,) = snapshot.allocations("team-d")
    assert (grant.pod, grant.container, grant.node, grant.gpu_uuid) == (
        "train",
        "main",
        "node-c",
        "GPU-c-0",
    )
    assert (grant.memory_mib, grant.cores, grant.phase, grant.path) == (8192, 30, "Running", "dra")
    (held,) = [p for p in snapshot.pods if p.path == "dra"]
    assert held.claim == "team-d/train-vslice-gpu-x7k2p"
    # The extender path's rows are what they were.
    assert {r.path for r in snapshot.allocations("team-a")} == {"extender"}


def test_a_claim_and_an_annotation_on_one_gpu_are_both_counted() -> None:
    # node-a GPU 0 holds 40 + 20 GiB by annotation (api_objects); a claim adds 8 GiB more.
    on_a = claim("team-d", "infer-a", results=[result("node-a")], reserved=[("infer", "u-1")])
    snapshot = dra_cluster(claims=[on_a])
    gpu = row(snapshot, "node-a", 0)
    assert (gpu.memory_used_mib, gpu.cores_used, gpu.slots_used) == (69632, 110, 3)
    assert gpu.pods == ("team-a/train", "team-b/infer", "team-d/infer")
    assert gpu.overbooked  # 110 % cores: the view says so, as for any allocation
    # The engine counts the same.
    assert snapshot.ledger().gpu_usage("node-a")["GPU-node-a-0"].memory_mib == 69632


def test_the_node_annotation_wins_over_a_slice_of_the_same_node() -> None:
    smaller = resource_slice("node-a", [device(0, "GPU-node-a-0", memory="40Gi")])
    snapshot = dra_cluster(slices=[smaller])
    assert row(snapshot, "node-a", 0).memory_mib == 81920
    assert [r.index for r in snapshot.gpus() if r.node == "node-a"] == [0, 1]


def test_the_newer_pool_generation_of_two_slices_of_a_node_is_read() -> None:
    newer = resource_slice("node-c", [device(0, "GPU-c-0", slots="8")], generation=2)
    newer["metadata"]["name"] = "node-c-gpu.vslice.io-2"
    snapshot = dra_cluster(slices=[newer])
    assert [(r.index, r.slots) for r in snapshot.gpus() if r.node == "node-c"] == [(0, 8)]


def test_a_malformed_claim_or_slice_is_a_problem_and_the_rest_is_read() -> None:
    bad = claim(
        "team-d",
        "bad",
        results=[result("node-c", memory="lots", cores="10", slots="1")],
        reserved=[("x", "u-x")],
    )
    foreign = resource_slice("node-d", [{"name": "gpu-0", "attributes": {}}])
    snapshot = dra_cluster(claims=[bad, "not a claim"], slices=[foreign])
    assert any(
        p.startswith("ResourceClaim team-d/bad: status.allocation.devices.results[0]")
        and "consumedCapacity.memory" in p
        and "'lots'" in p
        for p in snapshot.problems
    ), snapshot.problems
    assert any(p.startswith("ResourceSlice node-d-gpu.vslice.io: ") for p in snapshot.problems)
    assert any(p.startswith("ResourceClaim: not an object") for p in snapshot.problems)
    assert "node-d" not in snapshot.inventories
    assert row(snapshot, "node-c", 0).memory_used_mib == 8192  # the good claim still counts


def test_a_claim_on_a_device_the_node_lacks_is_a_problem() -> None:
    gone = claim("team-d", "gone", results=[result("node-c", "gpu-7")], reserved=[("g", "u")])
    snapshot = dra_cluster(claims=[gone])
    (problem,) = snapshot.problems
    assert "results[0].device must be one of this node's GPUs (gpu-0, gpu-1), got 'gpu-7'" in (
        problem
    )


def test_a_claim_shared_by_two_pods_counts_once_under_the_first() -> None:
    shared = claim(
        "team-d",
        "shared",
        results=[result("node-c", "gpu-1")],
        reserved=[("reader-1", "u-r1"), ("reader-2", "u-r2")],
    )
    pods = [
        dra_pod("team-d", "reader-1", node="node-c", claim_name="shared"),
        dra_pod("team-d", "reader-2", node="node-c", claim_name="shared", phase="Pending"),
    ]
    snapshot = dra_cluster(claims=[shared], pods=pods)
    gpu = row(snapshot, "node-c", 1)
    assert (gpu.memory_used_mib, gpu.slots_used) == (8192, 1)
    assert gpu.pods == ("team-d/reader-1", "team-d/reader-2")
    (held,) = [p for p in snapshot.pods if p.claim == "team-d/shared"]
    assert (held.name, held.phase, held.shared_with) == (
        "reader-1",
        "Running",
        ("team-d/reader-2",),
    )
    assert [r.pod for r in snapshot.allocations("team-d") if r.gpu_index == 1] == ["reader-1"]
    assert not snapshot.pending  # reader-2 is bound (nodeName set), not waiting


def test_an_allocated_claim_no_pod_reserves_still_holds_its_gpu() -> None:
    snapshot = dra_cluster(claims=[claim("team-d", "kept", results=[result("node-c", "gpu-1")])])
    (held,) = [p for p in snapshot.pods if p.claim == "team-d/kept"]
    assert (held.name, held.phase) == ("kept", UNRESERVED)
    assert row(snapshot, "node-c", 1).memory_used_mib == 8192


def test_claims_of_other_drivers_and_unallocated_claims_hold_nothing() -> None:
    other = claim("team-d", "nic", results=[{**result("node-c"), "driver": "net.example.com"}])
    waiting = claim("team-d", "waiting")
    snapshot = dra_cluster(claims=[other, waiting])
    assert [p.claim for p in snapshot.pods if p.path == "dra"] == ["team-d/train-vslice-gpu-x7k2p"]
    assert snapshot.problems == []


def test_usage_is_the_ledgers_rule_for_dra_allocations_too() -> None:
    snapshot = dra_cluster()
    (held,) = [p for p in snapshot.pods if p.path == "dra"]
    assert charges(held.allocation)["GPU-c-0"].memory_mib == 8192


# --- pending DRA pods ------------------------------------------------------------------------


def waiting_pod(**fields: Any) -> dict[str, Any]:
    return dra_pod("team-d", "big", phase="Pending", template_name="vslice-big", **fields)


def test_a_pending_dra_pod_is_read_from_its_template_with_a_why_not() -> None:
    big = claim_template("team-d", "vslice-big", claim_spec(memory="90Gi", cores=None))
    snapshot = dra_cluster(pods=[waiting_pod()], templates={("team-d", "vslice-big"): big})
    (pending,) = snapshot.pending
    assert (pending.holder, pending.path) == ("team-d/big", "dra")
    assert pending.request.containers[0].memory_mib == 92160
    (line,) = top.pending_lines(snapshot)
    assert line.asks == "1 GPU with 90 GiB (DRA claim)"
    assert line.why.startswith("does not fit: asks 90 GiB per GPU; the largest GPU here has 80 GiB")


def test_a_pending_dra_pod_is_read_from_the_claim_made_from_its_template() -> None:
    made = claim("team-d", "big-vslice-gpu-q2x9", spec=claim_spec(memory="4Gi", cores="10"))
    pod = waiting_pod(generated="big-vslice-gpu-q2x9")
    asked: list[tuple[str, str]] = []

    def templates(namespace: str, name: str) -> None:
        asked.append((namespace, name))

    snapshot = dra_cluster(pods=[pod], claims=[made], templates=templates)
    (pending,) = snapshot.pending
    assert pending.request.containers[0].memory_mib == 4096
    assert asked == []  # the claim was in the list: no template fetched
    plan = snapshot.decide(pending.request)
    assert plan.fits


def test_a_pending_dra_pod_whose_template_is_missing_is_a_problem() -> None:
    snapshot = dra_cluster(pods=[waiting_pod()], templates={})
    assert snapshot.pending == []
    assert snapshot.problems == [
        "pod team-d/big waits for ResourceClaimTemplate team-d/vslice-big, which does not "
        "exist: create it, or change spec.resourceClaims to name one that does"
    ]


def test_a_pod_of_another_driver_is_not_pending_for_vslice() -> None:
    other = claim_template("team-d", "vslice-big", claim_spec())
    other["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "nic.example"
    snapshot = dra_cluster(pods=[waiting_pod()], templates={("team-d", "vslice-big"): other})
    assert snapshot.pending == [] and snapshot.problems == []


def test_the_extender_pending_path_is_unchanged_beside_dra_pods() -> None:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "92160"}
    extender = {
        "metadata": {"namespace": "team-c", "name": "big"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
        "status": {"phase": "Pending"},
    }
    snapshot = dra_cluster(pods=[extender])
    (pending,) = snapshot.pending
    assert (pending.holder, pending.path, pending.notes) == ("team-c/big", "extender", ())


# --- the command views ----------------------------------------------------------------------


def test_allocations_have_a_path_column() -> None:
    lines = allocations.render(dra_cluster().allocations()).splitlines()
    assert lines[0].split() == allocations.HEADERS and "PATH" in allocations.HEADERS
    train = next(line for line in lines if line.startswith("team-d "))
    assert train.split()[4] == "dra"
    assert next(line for line in lines if line.startswith("team-a ")).split()[4] == "ext"
    assert lines[-1].startswith("4 pods in all namespaces hold 4 GPU grants: memory 78.0 GiB")


def test_top_shows_dra_allocations_like_the_others() -> None:
    text = top.frame(dra_cluster(), ["node-c"], as_json=False)
    gpu0 = next(line for line in text.splitlines() if line.startswith("node-c") and " 0 " in line)
    assert "8.0/80.0" in gpu0 and "30/100" in gpu0 and "team-d/train" in gpu0
    assert text.splitlines()[-1].startswith("node node-c (2 GPUs): memory 8.0/160.0 GiB")


def test_a_node_in_both_forms_is_listed_once() -> None:
    nodes = [node("node-a", "NVIDIA-A100-SXM4-80GB", 81920, 1)]
    slices = [resource_slice("node-a", [device(0, "GPU-node-a-0")])]
    snapshot = ClusterSnapshot.read(nodes, [], slices)
    assert [r.node for r in snapshot.gpus()] == ["node-a"]


@pytest.mark.parametrize("reserved", [[], [("train", "uid-train")]])
def test_a_finished_pod_still_holds_its_claim_until_it_is_deallocated(
    reserved: list[tuple[str, str]],
) -> None:
    # kube-scheduler counts an allocated claim whatever its pods' phases: so do the views.
    nodes = [bare_node("node-c")]
    pods = [dra_pod("team-d", "train", node="node-c", phase="Succeeded")]
    slices = [resource_slice("node-c", [device(0, "GPU-c-0")])]
    claims = [claim("team-d", "c", results=[result("node-c")], reserved=reserved)]
    snapshot = ClusterSnapshot.read(nodes, pods, slices, claims)
    assert row(snapshot, "node-c", 0).memory_used_mib == 8192
    (held,) = snapshot.pods
    assert held.phase == ("Succeeded" if reserved else UNRESERVED)


def test_a_node_serving_both_paths_lists_both_and_each_path_decides_on_its_own_gpus() -> None:
    from vslice_core.model import ContainerRequest, PodRequest

    nodes = [node("node-a", "NVIDIA-A100-SXM4-80GB", 81920, 1)]  # GPU 0 by annotation
    slices = [resource_slice("node-a", [device(1, "GPU-node-a-dra")])]  # GPU 1 on DRA
    snapshot = ClusterSnapshot.read(nodes, [], slices)
    assert [(r.index, r.uuid) for r in snapshot.gpus()] == [
        (0, "GPU-node-a-0"),
        (1, "GPU-node-a-dra"),
    ]
    request = PodRequest(containers=[ContainerRequest(name="c", gpus=1, memory_mib=1024, cores=0)])
    on_dra = snapshot.decide(request, "dra").allocation
    on_extender = snapshot.decide(request, "extender").allocation
    assert on_dra is not None and on_extender is not None
    assert on_dra.containers[0].gpus[0].uuid == "GPU-node-a-dra"
    assert on_extender.containers[0].gpus[0].uuid == "GPU-node-a-0"
    two = PodRequest(containers=[ContainerRequest(name="c", gpus=2, memory_mib=1024, cores=0)])
    assert not snapshot.decide(two, "dra").fits  # one DRA GPU: two do not fit there
    assert snapshot.decide(two).fits  # both together (the views' reading) would
