"""A tenant inside a real container cannot raise its slice, and a slice vslice did not sign is
never handed over: the node side of the trust boundary (docs/security.md "Node and container").

The pods run in runc containers started by the lab's real kubelet and containerd, with the
shim preloaded and the fake driver standing in for the GPUs. A variable set *inside* the
container (``export`` in a shell) is something no admission check can see, so that is how
these tests try to raise a limit.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from realnode_pods import RealNode, finished, parse_smoke
from vslice_build.images import SMOKE_IMAGE
from vslice_control.install.namespaces import pod_security_labels
from vslice_core import annotations as ann
from vslice_core.model import Allocation, ContainerAllocation, GpuGrant
from vslice_core.proof import PROOF
from vslice_kube.client import api_client
from vslice_lab.lab import services_kubeconfig_path
from vslice_lab.layout import Layout

pytestmark = pytest.mark.timeout(240)
STEP_MIB = 256


def test_a_container_that_raises_its_limit_in_the_environment_still_stops_at_the_slice(
    real_node: RealNode, namespace: str
) -> None:
    # Every way the environment used to widen a slice, at once: higher limits, a limits file
    # of the tenant's own naming a bigger slice, a private region.
    script = (
        "printf 'VSLICE_LIMITS_VERSION=1\\nCUDA_DEVICE_MEMORY_LIMIT_0=16g\\n' > /tmp/mine; "
        "export CUDA_DEVICE_MEMORY_LIMIT_0=16g CUDA_DEVICE_MEMORY_LIMIT=16g "
        "CUDA_DEVICE_SM_LIMIT=100 VSLICE_LIMITS_FILE=/tmp/mine "
        "CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/region; exec vslice-smoke memory"
    )
    text = real_node.shell(namespace, "raise", script, memory_mib=2048)
    seen = parse_smoke(text)
    assert seen["device.0.total_mib"] == seen["device.0.info_total_mib"] == "2048", text
    assert seen["nvml.0.total_mib"] == "2048", text
    assert seen["oom_error"] == "CUDA_ERROR_OUT_OF_MEMORY", text
    assert 2048 - STEP_MIB < int(seen["max_allocated_mib"]) <= 2048, text


def test_a_lower_limit_in_the_environment_is_honoured(real_node: RealNode, namespace: str) -> None:
    script = "export CUDA_DEVICE_MEMORY_LIMIT_0=512m; exec vslice-smoke memory"
    seen = parse_smoke(real_node.shell(namespace, "lower", script, memory_mib=2048))
    assert seen["device.0.total_mib"] == "512", seen


def test_the_limits_file_is_read_only_inside_the_container(
    real_node: RealNode, namespace: str
) -> None:
    script = (
        "cat /run/vslice-limits/limits; "
        "(echo CUDA_DEVICE_MEMORY_LIMIT_0=16g >> /run/vslice-limits/limits) 2>/dev/null "
        "&& echo APPENDED; "
        "(rm -f /run/vslice-limits/limits) 2>/dev/null && test ! -e /run/vslice-limits/limits "
        "&& echo REMOVED; "
        "(touch /run/vslice-limits/other) 2>/dev/null && echo CREATED; "
        "echo region=$(test -w /run/vslice/*/main && echo writable); exit 0"
    )
    text = real_node.shell(namespace, "readonly", script, memory_mib=1536)
    assert "VSLICE_LIMITS_VERSION=1" in text, text
    assert "CUDA_DEVICE_MEMORY_LIMIT_0=1536m" in text, text
    for done in ("APPENDED", "REMOVED", "CREATED"):
        assert done not in text, text  # root in the container, and still refused
    assert "region=writable" in text, text  # usage stays writable: it is the region's job


@pytest.fixture
def webhook_free_namespace(real_node: RealNode) -> Iterator[str]:
    """A namespace the webhook does not see (an operator's label), Pod Security as usual."""
    name = f"e2e-unwatched-{uuid.uuid4().hex[:6]}"
    labels = {**pod_security_labels(), "vslice.io/webhook": "disabled"}
    real_node.lab.core.create_namespace({"metadata": {"name": name, "labels": labels}})
    yield name
    real_node.delete_all(name)
    try:
        real_node.lab.core.delete_namespace(name)
    except ApiException as error:
        if error.status != 404:
            raise


def _events_of(core: k8s.CoreV1Api, namespace: str, pod: str) -> list[Any]:
    items: list[Any] = core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={pod}"
    ).items
    return items


def test_a_hand_written_allocation_bypassing_the_scheduler_never_starts(
    real_node: RealNode, webhook_free_namespace: str
) -> None:
    """A pod with ``spec.nodeName`` on the real node and an allocation nobody signed.

    Admission normally refuses this twice over (the webhook refuses GPU pods with nodeName,
    the state policy refuses vslice.io/ annotations from anyone but vslice's services). The
    test goes around both, to show the node holds on its own: the namespace carries the
    operator's ``vslice.io/webhook: disabled`` label, and the pod is created with vslice's own
    services identity (which the state policy exempts) but without the proof key."""
    namespace = webhook_free_namespace
    gpu = real_node.gpus[0]
    allocation = ann.encode_allocation(
        Allocation(
            node=real_node.name,
            containers=[
                ContainerAllocation(
                    name="main",
                    gpus=[
                        GpuGrant(
                            uuid=gpu.uuid, index=gpu.index, memory_mib=gpu.memory_mib, cores=100
                        )
                    ],
                )
            ],
        )
    )
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "forged", "annotations": {ann.ALLOCATION: allocation}},
        "spec": {
            "nodeName": real_node.name,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": SMOKE_IMAGE,
                    "command": ["vslice-smoke", "memory"],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }
    services = k8s.CoreV1Api(
        api_client(services_kubeconfig_path(Layout.at(real_node.lab.state_dir)))
    )
    services.create_namespaced_pod(namespace, body)
    pod = real_node.wait(namespace, "forged", finished, "Failed", timeout=60)
    assert pod["status"]["phase"] == "Failed", pod["status"]
    assert "no proof" in pod["status"].get("message", ""), pod["status"]
    for status in pod["status"].get("containerStatuses") or []:
        assert "running" not in (status.get("state") or {}), status
        assert not status.get("started"), status
    assert PROOF not in (pod["metadata"].get("annotations") or {})
    assert ann.DELIVERED not in (pod["metadata"].get("annotations") or {})
    deadline = time.monotonic() + 30
    refused: list[Any] = []
    while not refused and time.monotonic() < deadline:
        refused = [
            e
            for e in _events_of(real_node.lab.core, namespace, "forged")
            if e.reason == "AllocationRefused"
        ]
        time.sleep(0.5)
    assert refused, [e.reason for e in _events_of(real_node.lab.core, namespace, "forged")]
    assert "no proof" in refused[0].message and PROOF in refused[0].message
    assert str(real_node.plugin_status()["allocation_proof"]).startswith("ok")
