"""The scheduling side of the trust boundary, on the lab: the extender answers only
kube-scheduler, counts what it cannot vouch for without ever freeing room, and lets go of
holds for pods that do not exist.

A tenant cannot write a pod's allocation at all (the webhook removes it at creation, the
state-annotation policy refuses it later: tests/e2e/test_tenant_admission.py). To see what the
extender does when such a value gets through anyway, the forged allocation is written here by
vslice's own services identity, which the policy lets through: that is what a compromised or
buggy component with that identity, but without the allocation key, could write.
"""

from __future__ import annotations

import json
import re
import ssl
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest
from conftest import LabHandle
from extender_processes import wait_until
from kubernetes import client as k8s
from vslice_core.annotations import ALLOCATION, NODE_GPUS, decode_node_gpus, encode_allocation
from vslice_core.model import Allocation, ContainerAllocation, Gpu, GpuGrant
from vslice_core.proof import PROOF
from vslice_kube.client import api_client
from vslice_lab.lab import services_kubeconfig_path
from vslice_lab.layout import Layout

pytestmark = pytest.mark.timeout(180)


class Extender:
    """The lab's own extender, called directly over HTTPS (not through the recording proxy)."""

    def __init__(self, lab: LabHandle) -> None:
        self.url = f"https://127.0.0.1:{lab.record.ports['vslice-scheduler']}"
        self.pki = Layout.at(lab.state_dir).pki

    def context(self, client: str | None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        if client is not None:
            context.load_cert_chain(self.pki / f"{client}.crt", self.pki / f"{client}.key")
        return context

    def post(self, verb: str, body: dict[str, Any], client: str | None) -> tuple[int, bytes]:
        request = urllib.request.Request(
            f"{self.url}/{verb}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10, context=self.context(client)) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(
            f"{self.url}{path}", timeout=10, context=self.context(None)
        ) as r:
            body: bytes = r.read()
            return body

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.get("/status"))
        return result

    def gpu_memory(self, gpu: str) -> int:
        """MiB booked on the GPU (the gauge is in bytes; labels gpu, index, model, node, path)."""
        text = self.get("/metrics").decode()
        found = re.search(
            rf'vslice_gpu_allocated_memory_bytes\{{gpu="{re.escape(gpu)}",[^}}]*\}} (\S+)', text
        )
        assert found, f"no memory gauge for {gpu}"
        return int(float(found.group(1))) // (1024 * 1024)


@pytest.fixture
def extender(services: LabHandle) -> Extender:
    return Extender(services)


def _simulated_gpu(lab: LabHandle, position: int = -1) -> tuple[str, Gpu]:
    """A GPU of a simulated node (kwok runs its pods; no device plugin acts on them)."""
    body: Any = json.loads(lab.core.list_node(_preload_content=False).data)
    for item in sorted(body["items"], key=lambda n: n["metadata"]["name"]):
        name = item["metadata"]["name"]
        value = (item["metadata"].get("annotations") or {}).get(NODE_GPUS)
        if value and name not in lab.record.real_nodes:
            return name, decode_node_gpus(value, name).gpus[position]
    pytest.fail("the lab has no simulated GPU node")


def _pending_pod(name: str, gpu: str, memory_mib: int) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(memory_mib)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"vslice.io/gpu-uuid": gpu}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/sleep:1",
                    "resources": {"limits": limits},
                }
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }


def _events(lab: LabHandle, namespace: str, reason: str) -> list[dict[str, Any]]:
    body: Any = json.loads(lab.core.list_namespaced_event(namespace, _preload_content=False).data)
    return [e for e in body["items"] if e.get("reason") == reason]


def test_a_client_without_kube_schedulers_certificate_is_refused(extender: Extender) -> None:
    body = {"Pod": {"metadata": {"name": "x", "uid": "x"}, "spec": {}}, "NodeNames": []}
    status, answer = extender.post("filter", body, client=None)
    assert status == 403, answer
    assert b"client certificate" in answer
    status, answer = extender.post("bind", {}, client="admin")  # signed by the CA, wrong CN
    assert status == 403 and b"vslice-lab-admin" in answer
    status, _ = extender.post("filter", body, client="kube-scheduler")
    assert status == 200


def test_a_forged_allocation_is_counted_and_blocks_the_gpu_until_its_pod_is_deleted(
    services: LabHandle, namespace: str, extender: Extender
) -> None:
    node, gpu = _simulated_gpu(services)
    # Created for a scheduler that does not exist, so nothing binds it but the forger below.
    forged = _pending_pod("forged", gpu.uuid, 1024)
    forged["spec"]["schedulerName"] = "e2e-nobody"
    services.core.create_namespaced_pod(namespace, forged, _preload_content=False)
    uid = services.read_pod(namespace, "forged")["metadata"]["uid"]
    grant = GpuGrant(uuid=gpu.uuid, index=gpu.index, memory_mib=2 * gpu.memory_mib, cores=100)
    value = encode_allocation(
        Allocation(node=node, containers=[ContainerAllocation(name="main", gpus=[grant])])
    )
    vslice = k8s.CoreV1Api(api_client(services_kubeconfig_path(Layout.at(services.state_dir))))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "forged", "uid": uid, "annotations": {ALLOCATION: value}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    vslice.create_namespaced_binding(namespace, binding, _preload_content=False)
    assert PROOF not in services.read_pod(namespace, "forged")["metadata"]["annotations"]

    wait_until(lambda: uid in extender.status()["unproven_pods"], 20, "the pod counted unproven")
    assert gpu.uuid in extender.status()["overbooked"].get(node, {})
    assert extender.gpu_memory(gpu.uuid) >= 2 * gpu.memory_mib  # counted, never ignored
    wait_until(lambda: _events(services, namespace, "UnprovenAllocation"), 20, "the pod's event")
    wait_until(lambda: _events(services, "default", "GpuOverbooked"), 20, "the node's event")

    services.core.create_namespaced_pod(
        namespace, _pending_pod("next", gpu.uuid, 1024), _preload_content=False
    )
    time.sleep(5)  # several scheduling attempts
    assert not services.read_pod(namespace, "next")["spec"].get("nodeName")

    services.core.delete_namespaced_pod(
        "forged", namespace, grace_period_seconds=0, _preload_content=False
    )
    pod = services.wait_for_pod(
        namespace,
        "next",
        lambda p: bool(p["spec"].get("nodeName")),
        what="bound once the forged pod is gone",
        timeout=60,
    )
    assert pod["spec"]["nodeName"] == node
    assert PROOF in pod["metadata"]["annotations"]  # vslice's own binds are signed
    assert gpu.uuid not in extender.status()["overbooked"].get(node, {})


def test_holds_for_pods_that_do_not_exist_are_dropped_within_seconds(
    services: LabHandle, extender: Extender
) -> None:
    node, gpu = _simulated_gpu(services, 0)  # not the GPU the test above used
    before = extender.gpu_memory(gpu.uuid)
    ghosts = 4
    for _ in range(ghosts):
        ghost = _pending_pod(f"ghost-{uuid.uuid4().hex[:6]}", gpu.uuid, 1024)
        ghost["metadata"].update(namespace="nowhere", uid=str(uuid.uuid4()))
        status, answer = extender.post(
            "filter", {"Pod": ghost, "NodeNames": [node]}, client="kube-scheduler"
        )
        assert status == 200 and json.loads(answer)["NodeNames"] == [node], answer
    assert extender.gpu_memory(gpu.uuid) >= before + ghosts * 1024
    # <=: pods of earlier tests' namespaces may still be going away meanwhile.
    wait_until(lambda: extender.gpu_memory(gpu.uuid) <= before, 20, "the ghosts' holds to go")
