"""The SDK against the lab's real API server, scheduler, extender and webhook.

Every test works in its own namespace; the lab is shared with other tests, so assertions
never assume an otherwise empty cluster.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import vslice
from conftest import LabHandle
from vslice import ClusterError, InvalidRequest, NoFit, Slice, Timeout
from vslice_core.annotations import NODE_GPUS, decode_node_gpus

pytestmark = pytest.mark.timeout(300)  # may include starting the shared lab
IMAGE = "registry.invalid/sleep:1"  # kwok runs pods without pulling images


@pytest.fixture
def client(services: LabHandle, namespace: str) -> Iterator[vslice.Client]:
    with vslice.Client(services.kubeconfig, namespace=namespace) as connected:
        yield connected


def _models(lab: LabHandle, node: str) -> dict[str, str]:
    annotations = lab.core.read_node(node).metadata.annotations
    return {g.uuid: g.model for g in decode_node_gpus(annotations[NODE_GPUS], node).gpus}


def test_run_places_a_slice_and_reads_the_allocation_back(
    lab: LabHandle, client: vslice.Client, namespace: str
) -> None:
    workload = client.run(IMAGE, "sleep 3600", slice=Slice("10Gi", cores=30))
    placement = workload.wait(60, until="running").allocation
    assert placement is not None and placement.node in lab.record.nodes
    (grant,) = placement.grants
    assert (grant.memory_mib, grant.cores, grant.container) == (10240, 30, "main")
    assert placement.gpu_models == [_models(lab, placement.node)[grant.gpu_uuid]]
    pod = lab.read_pod(namespace, workload.name)
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpumem"] == "10240" and limits["nvidia.com/gpucores"] == "30"
    assert pod["spec"]["schedulerName"] == "vslice-scheduler"  # the webhook routed it


def test_a_gpu_type_filter_lands_on_that_model_where_the_plan_said(
    client: vslice.Client,
) -> None:
    wanted = Slice("2Gi", cores=10, gpu_type="t4")
    plan = client.plan(wanted)
    assert plan.fits and plan.node == "lab-t4"
    placement = client.run(IMAGE, slice=wanted).wait(60, until="scheduled").allocation
    assert placement is not None
    assert placement.node == "lab-t4" and placement.gpu_models == ["Tesla-T4"]


def test_the_new_pod_shows_in_allocations_and_in_the_gpu_view(
    client: vslice.Client, namespace: str
) -> None:
    workload = client.run(IMAGE, slice=Slice("3Gi", cores=5, gpu_type="A100"))
    placement = workload.wait(60, until="scheduled").allocation
    assert placement is not None
    rows = client.allocations(namespace)
    assert [(r.pod, r.gpu_uuid, r.memory_mib) for r in rows] == [
        (workload.name, placement.gpu_uuids[0], 3072)
    ]
    holder = f"{namespace}/{workload.name}"
    (gpu,) = [g for g in client.gpus() if g.uuid == placement.gpu_uuids[0]]
    assert holder in gpu.pods and gpu.memory_used_mib >= 3072 and gpu.slots_used >= 1


def test_an_unknown_gpu_type_fails_before_anything_is_created(
    lab: LabHandle, client: vslice.Client, namespace: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        client.run(IMAGE, slice=Slice("1Gi", gpu_type="H200"))
    assert caught.value.field == "gpu_type"
    for model in ("NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "Tesla-T4"):
        assert model in str(caught.value)
    assert lab.core.list_namespaced_pod(namespace).items == []


def test_a_slice_that_cannot_fit_says_why_per_node_and_creates_nothing(
    lab: LabHandle, client: vslice.Client, namespace: str
) -> None:
    with pytest.raises(NoFit) as caught:
        client.run(IMAGE, slice=Slice("90Gi"))
    assert set(caught.value.reasons) == set(lab.record.nodes)
    for reasons in caught.value.reasons.values():
        assert reasons.get("insufficient_memory", 0) >= 1
    message = str(caught.value)
    # Larger than any card: the card size is named, not free memory.
    assert "asks 90 GiB per GPU; the largest GPU here has 80 GiB" in message
    assert "\n  lab-t4: its largest GPU has 15 GiB, asks 90 GiB (memory, x4)" in message
    assert message.splitlines()[-1].startswith("would fit now: 1 GPU with ")
    assert lab.core.list_namespaced_pod(namespace).items == []


def test_a_queued_slice_that_cannot_fit_times_out_with_the_schedulers_reason(
    client: vslice.Client,
) -> None:
    workload = client.run(IMAGE, slice=Slice("90Gi"), queue=True)
    with pytest.raises(Timeout) as caught:
        workload.wait(5, until="scheduled")
    assert "not scheduled" in str(caught.value)
    assert workload.allocation is None
    assert workload.delete() is True


def test_a_submitted_job_manifest_gets_its_slice_and_deletes_with_its_pods(
    client: vslice.Client, namespace: str
) -> None:
    manifest = f"""
apiVersion: batch/v1
kind: Job
metadata: {{name: train}}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers: [{{name: trainer, image: {IMAGE}}}]
"""
    workload = client.submit(manifest, slice=Slice("25%", cores=20, gpu_type="H100"))
    placement = workload.wait(60, until="scheduled").allocation
    assert placement is not None and placement.node == "lab-h100"
    (grant,) = placement.grants
    assert grant.container == "trainer" and grant.memory_mib == 81559 * 25 // 100
    assert workload.delete() is True
    assert workload.delete() is False  # already gone


def test_api_failures_keep_the_parsed_status(client: vslice.Client) -> None:
    with pytest.raises(ClusterError) as caught:
        client.workload("no-such-pod").pod()
    assert caught.value.code == 404
    assert caught.value.status is not None and caught.value.status["reason"] == "NotFound"


def test_logs_are_read_through_the_api_server_and_failures_are_cluster_errors(
    client: vslice.Client,
) -> None:
    # The lab's nodes are simulated and may have no kubelet serving logs: then the API
    # server's answer must arrive as a ClusterError with its code, never a client exception.
    workload = client.run(IMAGE, "echo hi", slice=Slice("1Gi"))
    workload.wait(60, until="running")
    try:
        text = workload.logs(tail=10)
    except ClusterError as error:
        assert error.code is not None and error.code >= 400
        assert workload.name in str(error)
    else:
        assert isinstance(text, str)


INVENTORY_GPUS = 17  # inventory/lab/cluster.yaml: 2 A100, 4 T4, 8 H100 (simulated), 3 L4 (real;
# GPU 2 on the DRA path, read from the node's ResourceSlice)


def test_the_client_works_inside_a_running_event_loop(client: vslice.Client) -> None:
    async def inside_a_notebook() -> int:
        return len(client.gpus())

    assert asyncio.run(inside_a_notebook()) == INVENTORY_GPUS


def test_the_widgets_read_the_live_cluster(client: vslice.Client) -> None:
    view = vslice.ClusterView(client)
    assert len(view.rows.children) == INVENTORY_GPUS
    picker = vslice.SlicePicker(client)
    models = [value for _, value in picker.model.options]
    assert models == ["", "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-L4", "Tesla-T4"]
    picker.model.value = "Tesla-T4"
    picker.memory.value = 2048
    assert picker.plan is not None and picker.plan.node == "lab-t4"
    workload = picker.submit()
    assert workload is not None
    placement = workload.wait(60, until="scheduled").allocation
    assert placement is not None and placement.gpu_models == ["Tesla-T4"]
