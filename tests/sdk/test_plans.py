"""Plans: would a slice fit, where, and if not why, per node (the core engine's answer)."""

from __future__ import annotations

import pytest
from api_objects import A100
from vslice import InvalidRequest, NoFit, Slice
from vslice.plans import plan_manifest, slice_manifest
from vslice.snapshot import ClusterSnapshot


def _plan(snapshot: ClusterSnapshot, wanted: Slice):  # type: ignore[no-untyped-def]
    return plan_manifest(snapshot, slice_manifest(wanted), slice=wanted, namespace="team-a")


def test_a_slice_that_fits_names_the_node_and_the_gpu(snapshot: ClusterSnapshot) -> None:
    plan = _plan(snapshot, Slice("30Gi", cores=30))
    assert plan.fits and plan.node == "node-a"
    (grant,) = plan.grants["main"]
    assert (grant.uuid, grant.memory_mib, grant.cores) == ("GPU-node-a-1", 30720, 30)
    assert plan.raise_for_fit() is plan


def test_a_slice_that_cannot_fit_says_why_per_node(snapshot: ClusterSnapshot) -> None:
    plan = _plan(snapshot, Slice("70Gi", gpus=2))
    assert not plan.fits and plan.node is None
    assert set(plan.reasons) == {"node-a", "node-b"}
    assert plan.reasons["node-b"].get("insufficient_memory") == 1
    with pytest.raises(NoFit) as caught:
        plan.raise_for_fit()
    assert caught.value.reasons == plan.reasons
    message = str(caught.value)
    assert message.startswith("2 GPUs, 70 GiB each: does not fit: asks 2 GPUs with 70 GiB each")
    assert "\n  node-b: " in message and "(memory" in message
    assert message.splitlines()[-1].startswith("would fit now: ")


def test_the_json_shape_is_the_one_vslice_plan_prints(snapshot: ClusterSnapshot) -> None:
    result = _plan(snapshot, Slice("1Gi", cores=10)).to_dict()
    assert set(result) == {"fits", "node", "containers", "nodes", "suggestions", "why_not"}
    assert result["containers"][0]["gpus"][0].keys() == {"uuid", "memory_mib", "cores"}
    assert set(result["nodes"]) == {"node-a", "node-b"}


def test_an_unknown_gpu_type_lists_the_models_present(snapshot: ClusterSnapshot) -> None:
    with pytest.raises(InvalidRequest) as caught:
        _plan(snapshot, Slice("1Gi", gpu_type="H200"))
    assert caught.value.field == "gpu_type"
    assert "'h200'" in str(caught.value)
    assert f"models present: {A100}, Tesla-T4" in str(caught.value)


def test_a_type_filter_is_a_case_insensitive_substring(snapshot: ClusterSnapshot) -> None:
    plan = _plan(snapshot, Slice("1Gi", gpu_type="t4"))
    assert plan.node == "node-b"


def test_an_unknown_gpu_uuid_is_refused(snapshot: ClusterSnapshot) -> None:
    with pytest.raises(InvalidRequest, match="GPU-nope"):
        _plan(snapshot, Slice("1Gi", gpu_uuid="GPU-nope"))


def test_a_pod_without_gpus_is_not_a_slice_request(snapshot: ClusterSnapshot) -> None:
    manifest = {"kind": "Pod", "spec": {"containers": [{"name": "c", "image": "x"}]}}
    with pytest.raises(InvalidRequest, match="asks for no GPU"):
        plan_manifest(snapshot, manifest)


def test_text_and_repr_say_whether_it_fits(snapshot: ClusterSnapshot) -> None:
    plan = _plan(snapshot, Slice("1Gi", cores=10))
    assert str(plan).splitlines()[0] == "1 GPU, 1 GiB, 10% cores: fits on node-b"
    assert repr(plan) == "<Plan: 1 GPU, 1 GiB, 10% cores fits on node-b>"
