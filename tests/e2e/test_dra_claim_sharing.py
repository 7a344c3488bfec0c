"""One vslice claim, one slice, whoever uses it: on the lab's real node, a claim is held to its
size across pods and containers (docs/dra.md, "One claim, one pod").

The shim counts a slice's processes by pid, which means something in one pid namespace only.
So the API server refuses to reserve a vslice claim for a second pod (the ValidatingAdmission
Policy of ``vslice_control.install.claimreservation``), the webhook refuses containers in
separate pid namespaces on one slice (``vslice_control.webhook.claimsharing``), and
containers of a pod that shares its process namespace are held to the slice together.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from dra_claims import claim_spec, create_template
from kubernetes import client as k8s
from realnode_pods import RealNode, running
from vslice_build.images import SMOKE_IMAGE
from vslice_control.install.claimreservation import POLICY_NAME

pytestmark = pytest.mark.timeout(300)
CLAIM = "gpu"
SLEEP = ["sh", "-c", "sleep 600"]


def resource(node: RealNode) -> k8s.ResourceV1Api:
    return k8s.ResourceV1Api(node.lab.api)


def claim(node: RealNode, namespace: str, name: str, memory: str) -> None:
    body: Any = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": claim_spec(memory),
    }
    resource(node).create_namespaced_resource_claim(namespace, body, _preload_content=False)


def template(node: RealNode, namespace: str, name: str, memory: str) -> None:
    create_template(resource(node), namespace, name, memory)


def container(name: str, command: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "image": SMOKE_IMAGE,
        "command": command,
        "resources": {"claims": [{"name": CLAIM}]},
    }


def pod(
    node: RealNode,
    namespace: str,
    name: str,
    source: dict[str, str],
    *containers: dict[str, Any],
    **spec: Any,
) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": CLAIM, **source}],
            "containers": list(containers),
            **spec,
        },
    }
    node.lab.core.create_namespaced_pod(namespace, body, _preload_content=False)


def refusal_of(error: k8s.ApiException) -> str:
    body = error.body.decode() if isinstance(error.body, bytes) else str(error.body)
    message: str = json.loads(body)["message"]
    return message


def test_a_claim_reserved_for_one_pod_is_refused_to_a_second_until_the_first_ends(
    real_node: RealNode, namespace: str
) -> None:
    claim(real_node, namespace, "shared", "2000Mi")
    by_name = {"resourceClaimName": "shared"}
    pod(real_node, namespace, "first", by_name, container("main", SLEEP))
    real_node.wait_running(namespace, "first")
    pod(real_node, namespace, "second", by_name, container("main", SLEEP))

    def refused(body: dict[str, Any]) -> bool:
        conditions = body.get("status", {}).get("conditions") or []
        return any("serves one pod only" in (c.get("message") or "") for c in conditions)

    second = real_node.wait(namespace, "second", refused, "the policy's refusal", timeout=60)
    message = next(
        c["message"] for c in second["status"]["conditions"] if c["type"] == "PodScheduled"
    )
    assert f"ResourceClaim {namespace}/shared holds a gpu.vslice.io GPU slice" in message
    assert POLICY_NAME in message and "ResourceClaimTemplate" in message, message
    assert not second["spec"].get("nodeName")
    stored: Any = resource(real_node).read_namespaced_resource_claim(
        "shared", namespace, _preload_content=False
    )
    reserved = json.loads(stored.data)["status"]["reservedFor"]
    assert [r["name"] for r in reserved] == ["first"], reserved
    # Once the first pod is gone its reservation goes with it, and kube-scheduler's retry of
    # the second one gets through. A grace period, not 0: with 0 the pod object goes at once,
    # the second pod can land while the kubelet still unprepares the claim for the first, and
    # the kubelet then fails the second's container ("unable to get claim info").
    real_node.lab.core.delete_namespaced_pod("first", namespace, grace_period_seconds=1)
    real_node.wait(namespace, "second", running, "Running", timeout=120)


def test_two_containers_on_one_claim_in_separate_pid_namespaces_are_refused(
    real_node: RealNode, namespace: str
) -> None:
    template(real_node, namespace, "two-gib", "2000Mi")
    source = {"resourceClaimTemplateName": "two-gib"}
    with pytest.raises(k8s.ApiException) as caught:
        pod(real_node, namespace, "pair", source, container("a", SLEEP), container("b", SLEEP))
    assert caught.value.status == 400
    message = refusal_of(caught.value)
    assert "containers 'a' and 'b' both use claim 'gpu'" in message, message
    assert "spec.shareProcessNamespace: true" in message, message


def test_containers_sharing_a_process_namespace_are_held_to_the_claim_together(
    real_node: RealNode, namespace: str
) -> None:
    template(real_node, namespace, "two-gib", "2000Mi")
    hold = ["vslice-smoke", "hold", "--memory", "1200Mi"]
    first = container("first", [*hold, "--seconds", "25"])
    # Started after the first holds its 1200 MiB: 1200 more would make 2400 of the claim's 2000.
    second = container("second", ["sh", "-c", " ".join(["sleep 6;", *hold, "--seconds", "1"])])
    source = {"resourceClaimTemplateName": "two-gib"}
    pod(real_node, namespace, "pair", source, first, second, shareProcessNamespace=True)
    real_node.wait_finished(namespace, "pair", timeout=120)
    logs = {
        name: real_node.lab.core.read_namespaced_pod_log("pair", namespace, container=name)
        for name in ("first", "second")
    }
    assert "held_mib=1200" in logs["first"], logs
    assert "hold_error=CUDA_ERROR_OUT_OF_MEMORY" in logs["second"], logs
    assert "held_mib" not in logs["second"], logs
