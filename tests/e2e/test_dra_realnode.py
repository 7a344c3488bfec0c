"""Slices through DRA on the lab's real node: ResourceClaims allocated by kube-scheduler's own
allocator (consumable capacity, Kubernetes 1.36), prepared by vslice's kubelet plugin in the
node agent, run in real containers with the shim and the fake driver.

The lab's real node serves GPU 2 on the DRA path (``dra_gpus`` in inventory/lab/cluster.yaml)
and GPUs 0 and 1 on the extender path, so these tests and the extender-path tests share the
node without sharing a GPU.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from typing import Any

import pytest
import vslice
from dra_claims import create_template
from kubernetes import client as k8s
from realnode_pods import RealNode, finished, parse_smoke, running
from vslice_build.images import SMOKE_IMAGE
from vslice_core.dra import DEVICE_CLASS, DRIVER
from vslice_lab import lab as lab_module

pytestmark = pytest.mark.timeout(300)
STEP_MIB = 256
CLAIM = "gpu"


def dra_gpu(node: RealNode) -> Any:
    gpus = [g for g in node.all_gpus if g.index in node.dra_gpus]
    if not gpus:
        pytest.fail(f"the lab's real node {node.name} serves no GPU on the DRA path (dra_gpus)")
    return gpus[0]


def resource(node: RealNode) -> k8s.ResourceV1Api:
    return k8s.ResourceV1Api(node.lab.api)


def template(
    node: RealNode, namespace: str, name: str, *, memory: str | None, cores: int | None = None
) -> None:
    create_template(resource(node), namespace, name, memory, cores)


SLEEP = ["sh", "-c", "sleep 600"]
"""A pod that holds its claim and no GPU memory: deleting it kills the process, and the fake
driver (a shared counter, unlike a real driver) would keep what a killed process held."""


def claim_pod(
    node: RealNode,
    namespace: str,
    name: str,
    tmpl: str,
    args: list[str],
    priority_class: str | None = None,
) -> None:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": CLAIM, "resourceClaimTemplateName": tmpl}],
            "containers": [
                {
                    "name": "main",
                    "image": SMOKE_IMAGE,
                    "command": args if args[:1] == ["sh"] else ["vslice-smoke", *args],
                    "resources": {"claims": [{"name": CLAIM}]},
                }
            ],
        },
    }
    if priority_class:
        body["spec"]["priorityClassName"] = priority_class
    node.lab.core.create_namespaced_pod(namespace, body, _preload_content=False)


def claims_of(node: RealNode, namespace: str) -> list[dict[str, Any]]:
    response = resource(node).list_namespaced_resource_claim(namespace, _preload_content=False)
    items: list[dict[str, Any]] = json.loads(response.data)["items"]
    return items


def wait(condition: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout:.0f}s")
        time.sleep(0.3)


def test_a_claim_pod_runs_and_sees_its_slice(real_node: RealNode, namespace: str) -> None:
    gpu = dra_gpu(real_node)
    template(real_node, namespace, "four-gib", memory="4Gi", cores=30)
    claim_pod(real_node, namespace, "claimed", "four-gib", ["memory", "--hold", "5"])
    real_node.wait_running(namespace, "claimed")
    # Read while the pod runs: the controller manager deletes a template's claim once its
    # pod is done.
    (claim,) = claims_of(real_node, namespace)
    pod = real_node.wait_finished(namespace, "claimed")
    text = real_node.logs(namespace, "claimed")
    assert pod["status"]["phase"] == "Succeeded", text
    seen = parse_smoke(text)
    assert seen["devices"] == "1", text
    assert seen["device.0.uuid"] == gpu.uuid, text
    assert seen["device.0.total_mib"] == seen["nvml.0.total_mib"] == "4096", text
    assert seen["oom_error"] == "CUDA_ERROR_OUT_OF_MEMORY", text
    assert 4096 - STEP_MIB < int(seen["max_allocated_mib"]) <= 4096, text
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"]) == (DRIVER, real_node.name)
    assert result["device"] == f"gpu-{gpu.index}"
    assert result["consumedCapacity"]["memory"] == "4Gi"


def test_two_claims_share_one_gpu_and_together_never_exceed_it(
    real_node: RealNode, namespace: str
) -> None:
    gpu = dra_gpu(real_node)
    sizes = {"small": 10240, "large": 12288}
    assert sum(sizes.values()) <= gpu.memory_mib < sum(sizes.values()) + 4096
    for name, mib in sizes.items():
        template(real_node, namespace, name, memory=f"{mib}Mi")
        claim_pod(real_node, namespace, name, name, ["memory", "--hold", "8"])
    for name in sizes:
        real_node.wait_running(namespace, name)
    # With both held, 4 GiB more does not fit on the card: the third claim waits.
    template(real_node, namespace, "third", memory="4Gi")
    claim_pod(real_node, namespace, "third", "third", ["memory"])
    seen = {}
    for name in sizes:
        real_node.wait_finished(namespace, name)
        seen[name] = parse_smoke(real_node.logs(namespace, name))
    for name, mib in sizes.items():
        assert seen[name]["device.0.uuid"] == gpu.uuid
        assert seen[name]["device.0.total_mib"] == str(mib), seen[name]
        assert mib - STEP_MIB < int(seen[name]["max_allocated_mib"]) <= mib, seen[name]
    assert sum(int(s["max_allocated_mib"]) for s in seen.values()) <= gpu.memory_mib
    # Once they are done, the third gets the card's capacity they left.
    third = real_node.wait_finished(namespace, "third")
    assert third["status"]["phase"] == "Succeeded", real_node.logs(namespace, "third")


def test_a_claim_larger_than_any_gpu_is_refused_at_creation_and_planned_with_the_reason(
    real_node: RealNode, namespace: str
) -> None:
    # kube-scheduler would only say "cannot allocate all claims", for ever: the webhook refuses
    # the template at creation, with the largest card the ResourceSlices list.
    with pytest.raises(k8s.ApiException) as refused:
        template(real_node, namespace, "huge", memory="500Gi")
    assert refused.value.status == 400, refused.value.body
    message = str(refused.value.body)
    assert "512000Mi, more than any" in message and "the largest card" in message, message
    claim_doc = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "huge-plan"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "main",
                            "exactly": {
                                "deviceClassName": DEVICE_CLASS,
                                "count": 1,
                                "capacity": {"requests": {"memory": "500Gi"}},
                            },
                        }
                    ]
                }
            }
        },
    }
    pod_doc = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "huge-plan"},
        "spec": {
            "resourceClaims": [{"name": CLAIM, "resourceClaimTemplateName": "huge-plan"}],
            "containers": [
                {"name": "main", "image": SMOKE_IMAGE, "resources": {"claims": [{"name": CLAIM}]}}
            ],
        },
    }
    client = vslice.Client(kubeconfig=str(real_node.lab.kubeconfig), namespace=namespace)
    plan = client.plan(json.dumps(claim_doc) + "\n---\n" + json.dumps(pod_doc))
    assert not plan.fits and plan.path == "dra"
    assert "22.4 GiB" in plan.why_not() and "500 GiB" in plan.why_not(), plan.why_not()


def vslice_cli(node: RealNode, command: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "vslice.cli", command, "--kubeconfig", str(node.lab.kubeconfig)]
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=120)


def test_the_monitor_names_a_claims_region_after_its_pod(
    real_node: RealNode, namespace: str
) -> None:
    template(real_node, namespace, "three-gib", memory="3Gi")
    claim_pod(
        real_node, namespace, "holder", "three-gib", ["hold", "--memory", "2g", "--seconds", "30"]
    )
    real_node.wait_running(namespace, "holder")
    pattern = re.compile(
        r'^vslice_container_gpu_memory_limit_bytes\{[^}]*pod="holder"[^}]*\} (\S+)$', re.M
    )
    deadline = time.monotonic() + 40
    while (found := pattern.search(real_node.metrics())) is None:
        assert time.monotonic() < deadline, real_node.metrics()
        time.sleep(1)
    assert float(found.group(1)) == 3 * 1024**3
    real_node.wait_finished(namespace, "holder")


def test_deleting_the_pod_unprepares_the_claim_and_frees_the_capacity(
    real_node: RealNode, namespace: str
) -> None:
    gpu = dra_gpu(real_node)
    template(real_node, namespace, "whole", memory=None)  # no memory asked: the whole card
    claim_pod(real_node, namespace, "whole", "whole", SLEEP)
    real_node.wait_running(namespace, "whole")
    (claim,) = claims_of(real_node, namespace)
    uid = claim["metadata"]["uid"]
    layout = real_node.layout
    spec = layout.cdi_dir / f"vslice.io-claim_{uid}.json"
    limits = layout.limits_root / uid / "main" / "limits"
    assert spec.exists() and f"CUDA_DEVICE_MEMORY_LIMIT_0={gpu.memory_mib}m" in limits.read_text()
    real_node.lab.core.delete_namespaced_pod("whole", namespace, grace_period_seconds=0)
    wait(lambda: not spec.exists() and not limits.exists(), "unprepare of the claim's files")
    wait(lambda: not claims_of(real_node, namespace), "deletion of the pod's claim")
    template(real_node, namespace, "again", memory=f"{gpu.memory_mib}Mi")
    claim_pod(real_node, namespace, "again", "again", ["memory"])
    again = real_node.wait_finished(namespace, "again")
    assert again["status"]["phase"] == "Succeeded", real_node.logs(namespace, "again")


def test_a_node_agent_restart_loses_no_prepared_claim(real_node: RealNode, namespace: str) -> None:
    template(real_node, namespace, "two-gib", memory="2Gi")
    claim_pod(real_node, namespace, "before", "two-gib", SLEEP)
    before = real_node.wait_running(namespace, "before")
    container = before["status"]["containerStatuses"][0]["containerID"]
    lab_module.restart(real_node.lab.state_dir, f"device-plugin-{real_node.name}", kill=True)
    # The running container is untouched; a new claim pod is prepared by the new process.
    claim_pod(real_node, namespace, "after", "two-gib", ["memory"])
    after = real_node.wait_finished(namespace, "after")
    assert after["status"]["phase"] == "Succeeded", real_node.logs(namespace, "after")
    assert parse_smoke(real_node.logs(namespace, "after"))["device.0.total_mib"] == "2048"
    now = real_node.lab.read_pod(namespace, "before")
    assert running(now) and now["status"]["containerStatuses"][0]["containerID"] == container
    # The claim prepared before the restart is unprepared by the new process.
    uid = next(
        c["metadata"]["uid"]
        for c in claims_of(real_node, namespace)
        if any(r.get("name") == "before" for r in c["status"].get("reservedFor") or [])
    )
    spec = real_node.layout.cdi_dir / f"vslice.io-claim_{uid}.json"
    assert spec.exists()
    real_node.lab.core.delete_namespaced_pod("before", namespace, grace_period_seconds=0)
    wait(lambda: not spec.exists(), "unprepare after the restart")
    assert finished(real_node.lab.read_pod(namespace, "after"))


def test_a_hami_style_pod_in_a_dra_namespace_is_converted_and_sees_its_slice(
    real_node: RealNode, namespace: str
) -> None:
    gpu = dra_gpu(real_node)
    core = real_node.lab.core
    core.patch_namespace(namespace, {"metadata": {"labels": {"vslice.io/path": "dra"}}})
    time.sleep(1.0)  # the webhook follows namespace labels through a watch
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "converted", "annotations": {"nvidia.com/use-gpuuuid": gpu.uuid}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": SMOKE_IMAGE,
                    "command": ["vslice-smoke", "memory"],
                    "resources": {
                        "limits": {
                            "nvidia.com/gpu": "1",
                            "nvidia.com/gpumem": "3072",
                            "nvidia.com/gpucores": "20",
                        }
                    },
                }
            ],
        },
    }
    created = json.loads(core.create_namespaced_pod(namespace, body, _preload_content=False).data)
    spec = created["spec"]
    (reference,) = spec["resourceClaims"]
    assert reference["resourceClaimTemplateName"].startswith("vslice-")
    limits = spec["containers"][0]["resources"].get("limits") or {}
    assert not any(name.startswith("nvidia.com/") for name in limits), limits
    assert spec.get("schedulerName", "default-scheduler") == "default-scheduler"
    pod = real_node.wait_finished(namespace, "converted")
    text = real_node.logs(namespace, "converted")
    assert pod["status"]["phase"] == "Succeeded", text
    seen = parse_smoke(text)
    assert seen["device.0.uuid"] == gpu.uuid, text
    assert seen["device.0.total_mib"] == "3072", text
    assert 3072 - STEP_MIB < int(seen["max_allocated_mib"]) <= 3072, text


def test_a_claim_outside_the_request_policy_is_refused_naming_the_field(
    real_node: RealNode, namespace: str
) -> None:
    with pytest.raises(k8s.ApiException) as refused:
        template(real_node, namespace, "half-mib", memory="1.5Mi")
    assert refused.value.status in (400, 403, 422)
    message = (
        refused.value.body.decode()
        if isinstance(refused.value.body, bytes)
        else str(refused.value.body)
    )
    # The API server stores 1.5Mi as 1536Ki before any webhook sees it.
    assert "capacity.requests.memory" in message and "1536Ki" in message, message
    assert "ResourceClaimTemplate" in message and "half-mib" in message, message
