"""The whole path in the lab: webhook mutates a GPU pod, the vslice extender places and binds it."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import LabHandle
from vslice_core.annotations import ALLOCATION, decode_allocation

pytestmark = pytest.mark.timeout(120)


def _bound(pod: dict[str, Any]) -> bool:
    return bool(pod["spec"].get("nodeName")) and pod["status"].get("phase") == "Running"


def test_a_sliced_gpu_pod_is_routed_placed_bound_and_annotated(
    services: LabHandle, namespace: str
) -> None:
    # No schedulerName: the webhook must route the pod to vslice-scheduler.
    services.create_pod(
        namespace,
        "slice",
        limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20480", "nvidia.com/gpucores": "40"},
        annotations={"vslice.io/gpu-type": "a100"},
    )
    pod = services.wait_for_pod(namespace, "slice", _bound, what="bound and Running", timeout=60)
    assert pod["spec"]["schedulerName"] == "vslice-scheduler"
    assert pod["spec"]["nodeName"] == "lab-a100"

    allocation = decode_allocation(pod["metadata"]["annotations"][ALLOCATION])
    assert allocation.node == "lab-a100"
    (container,) = allocation.containers
    assert container.name == "main"
    (grant,) = container.gpus
    assert grant.uuid.startswith("GPU-a100-")
    assert (grant.memory_mib, grant.cores) == (20480, 40)

    # What kube-scheduler sent the extender, as the recording tap in front of it saw.
    (bind,) = services.extender.calls_for("bind", "slice")
    assert bind.body["Node"] == "lab-a100"
    assert not (bind.answer or {}).get("Error")


def test_a_slice_no_gpu_can_hold_is_left_pending_with_the_extenders_reasons(
    services: LabHandle, namespace: str
) -> None:
    # 100 GiB on one GPU: more than any simulated GPU has.
    services.create_pod(
        namespace, "huge", limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "102400"}
    )

    def unschedulable(pod: dict[str, Any]) -> bool:
        return any(
            c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
            for c in pod["status"].get("conditions") or []
        )

    pod = services.wait_for_pod(namespace, "huge", unschedulable, what="Unschedulable")
    assert pod["spec"].get("nodeName") is None
    assert ALLOCATION not in (pod["metadata"].get("annotations") or {})
    filters = services.extender.calls_for("filter", "huge")
    assert filters and filters[0].answer is not None
    answer = filters[0].answer
    failed = {
        **(answer.get("FailedNodes") or {}),
        **(answer.get("FailedAndUnresolvableNodes") or {}),
    }
    assert set(failed) == set(services.record.nodes), answer
    assert not answer.get("NodeNames"), answer
