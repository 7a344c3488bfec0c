"""A GPU pod cannot ask for a way around the shim, whatever its namespace's Pod Security level;
and a review the webhook cannot read as a Pod is refused, never admitted.

Reviews go through ``answer_review`` as the HTTPS route calls it (no server, no API): the
namespace here carries no Pod Security label, so the webhook is all that stands in the way.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Mapping
from typing import Any

import pytest
from served import apply_patch
from vslice_control.webhook.main import Answer, answer_review
from vslice_control.webhook.policy import WebhookPolicy
from vslice_core.resources import DEFAULT_RESOURCE_NAMES

GPU = DEFAULT_RESOURCE_NAMES.gpu
EXTENDER, DRA = WebhookPolicy(), WebhookPolicy(path="dra")
BYPASS = "bypass its GPU slice"


class Templates:
    """A template store that creates everything (the DRA path's side effect)."""

    def create(self, template: Mapping[str, Any]) -> bool:
        return True

    def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None


def container(name: str = "main", gpus: bool = True, **fields: Any) -> dict[str, Any]:
    limits = {GPU: "1"} if gpus else {"cpu": "1"}
    return {"name": name, "image": "busybox", "resources": {"limits": limits}, **fields}


def pod(*containers: dict[str, Any], annotations: dict[str, str] | None = None, **spec: Any) -> Any:
    metadata: dict[str, Any] = {"generateName": "train-", "namespace": "team-a"}
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": list(containers or [container()]), **spec},
    }


def context(**fields: Any) -> dict[str, Any]:
    return {"securityContext": fields}


def answer(obj: Any, policy: WebhookPolicy = EXTENDER) -> tuple[Answer, dict[str, Any]]:
    body = json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "req-1",
                "namespace": "team-a",
                "operation": "CREATE",
                "object": obj,
            },
        }
    ).encode()
    result = answer_review(body, policy, lambda ns: None, lambda ns: None, Templates())
    assert result.response.status == 200, result.response.body
    return result, json.loads(result.response.body)["response"]


def refusal(obj: Any, policy: WebhookPolicy = EXTENDER) -> str:
    _, response = answer(obj, policy)
    assert response["allowed"] is False, response
    message: str = response["status"]["message"]
    return message


def admitted(obj: Any, policy: WebhookPolicy = EXTENDER) -> tuple[dict[str, Any], list[str]]:
    """The pod as the API server would store it, and the warnings."""
    _, response = answer(obj, policy)
    assert response["allowed"] is True, response.get("status")
    ops = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    return apply_patch(copy.deepcopy(obj), ops), response.get("warnings", [])


# --- what a container may not add -----------------------------------------------------------


@pytest.mark.parametrize("capability", ["SYS_ADMIN", "SYS_PTRACE", "ALL", "cap_sys_admin"])
def test_a_gpu_container_adding_a_capability_around_the_shim_is_refused_naming_field_and_value(
    capability: str,
) -> None:
    caps = context(capabilities={"add": ["NET_BIND_SERVICE", capability]})
    message = refusal(pod(container(**caps)))
    assert message.startswith(
        f"spec.containers[0].securityContext.capabilities.add[1] must not be {capability!r} "
        f"in container 'main', which asks for {GPU}: "
    )
    assert BYPASS in message and "remove it from capabilities.add" in message


def test_an_unmasked_proc_is_refused_in_a_gpu_container() -> None:
    message = refusal(pod(container(**context(procMount="Unmasked"))))
    assert message.startswith(
        "spec.containers[0].securityContext.procMount must be 'Default' in container 'main', "
        f"which asks for {GPU}, got 'Unmasked'"
    )
    assert BYPASS in message


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        (
            pod(securityContext={"seccompProfile": {"type": "Unconfined"}}),
            "spec.securityContext.seccompProfile.type",
        ),
        (
            pod(container(**context(seccompProfile={"type": "Unconfined"}))),
            "spec.containers[0].securityContext.seccompProfile.type",
        ),
        (
            pod(annotations={"container.seccomp.security.alpha.kubernetes.io/main": "unconfined"}),
            "metadata.annotations['container.seccomp.security.alpha.kubernetes.io/main']",
        ),
    ],
    ids=["pod", "container", "legacy-annotation"],
)
def test_an_unconfined_seccomp_profile_is_refused_saying_what_works(obj: Any, field: str) -> None:
    message = refusal(obj)
    assert message.startswith(field) and "nconfined" in message and BYPASS in message
    assert "RuntimeDefault" in message and "Localhost" in message


def test_init_and_ephemeral_containers_are_checked_too() -> None:
    init = container("setup", **context(capabilities={"add": ["SYS_PTRACE"]}))
    message = refusal(pod(container(), initContainers=[init]))
    assert message.startswith("spec.initContainers[0].securityContext.capabilities.add[0]")
    debug = {"name": "debug", "image": "busybox", "targetContainerName": "main"}
    message = refusal(pod(container(), ephemeralContainers=[debug | context(privileged=True)]))
    assert message.startswith(
        "spec.ephemeralContainers[0].securityContext.privileged must be false in container "
        "'debug', an ephemeral container of a pod that asks for"
    )


def test_a_sidecar_without_gpus_is_checked_once_it_shares_the_gpu_containers_processes() -> None:
    sidecar = container("tracer", gpus=False, **context(capabilities={"add": ["SYS_PTRACE"]}))
    admitted(pod(container(), sidecar))
    message = refusal(pod(container(), sidecar, shareProcessNamespace=True))
    assert message.startswith(
        "spec.containers[1].securityContext.capabilities.add[0] must not be 'SYS_PTRACE' in "
        "container 'tracer', which shares its processes with the pod's GPU containers"
    )


# --- what the pod may not share with the node ----------------------------------------------


@pytest.mark.parametrize("flag", ["hostPID", "hostIPC"])
def test_host_namespaces_are_refused_on_a_gpu_pod(flag: str) -> None:
    message = refusal(pod(**{flag: True}))
    assert message.startswith(f"spec.{flag} must be false in a pod that asks for {GPU}, got true")
    assert BYPASS in message and f"remove spec.{flag}" in message


@pytest.mark.parametrize(
    ("path", "how"),
    [
        ("/var/lib/vslice/limits", "lies inside /var/lib/vslice"),
        ("/var/lib/vslice", "is /var/lib/vslice"),
        ("/usr/local/vslice/lib", "lies inside /usr/local/vslice"),
        ("/etc/ld.so.preload", "is /etc/ld.so.preload"),
        ("/var/run/cdi", "is /var/run/cdi"),
        ("/run/cdi/", "is /run/cdi"),
        ("/var/lib/kubelet/device-plugins", "is /var/lib/kubelet/device-plugins"),
        ("/etc", "holds /etc/ld.so.preload"),
        ("/", "holds /var/lib/vslice"),
        ("//var/lib/data/../../lib/vslice/./containers", "lies inside /var/lib/vslice"),
    ],
)
def test_a_host_path_meeting_vslices_directories_is_refused_and_others_are_not(
    path: str, how: str
) -> None:
    volumes = [{"name": "data", "hostPath": {"path": "/data/sets"}}]
    admitted(pod(volumes=[*volumes, {"name": "x", "hostPath": {"path": "/var/lib/vslicer"}}]))
    message = refusal(pod(volumes=[*volumes, {"name": "state", "hostPath": {"path": path}}]))
    assert message.startswith(f"spec.volumes[1].hostPath.path must not be {path!r}"), message
    assert f"it {how} (" in message and BYPASS in message and "emptyDir" in message


def test_a_cdi_annotation_on_a_gpu_pod_is_refused_without_minting_a_metrics_label() -> None:
    key = "cdi.k8s.io/all-gpus"
    result, response = answer(pod(annotations={key: "nvidia.com/gpu=all"}))
    message = response["status"]["message"]
    assert response["allowed"] is False
    assert message.startswith(f"metadata.annotations[{key!r}] is not allowed on a pod that asks")
    assert "CDI devices are vslice's to inject" in message
    assert result.reason == "cdi_annotation"


@pytest.mark.parametrize(
    "escape",
    [
        {"hostPID": True},
        {"volumes": [{"name": "s", "hostPath": {"path": "/var/lib/vslice"}}]},
        {"securityContext": {"seccompProfile": {"type": "Unconfined"}}},
    ],
    ids=["hostPID", "hostPath", "seccomp"],
)
def test_a_cpu_pod_is_left_to_pod_security_while_the_same_gpu_pod_is_refused(
    escape: dict[str, Any],
) -> None:
    annotations = {"cdi.k8s.io/x": "vendor.com/device=1"}
    sys_admin = context(capabilities={"add": ["SYS_ADMIN"]})
    cpu = pod(container(gpus=False, **sys_admin), annotations=annotations, **escape)
    assert admitted(cpu) == (cpu, [])
    refusal(pod(**escape))


# --- the seccomp default ---------------------------------------------------------------------


@pytest.mark.parametrize("policy", [EXTENDER, DRA], ids=["extender", "dra"])
def test_a_gpu_pod_without_a_seccomp_profile_gets_runtime_default_and_a_warning(
    policy: WebhookPolicy,
) -> None:
    stored, warnings = admitted(pod(securityContext={"runAsUser": 1000}), policy)
    assert stored["spec"]["securityContext"] == {
        "runAsUser": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert any(w.startswith("spec.securityContext.seccompProfile set to") for w in warnings)
    bare, _ = admitted(pod(), policy)
    assert bare["spec"]["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    localhost = {"seccompProfile": {"type": "Localhost", "localhostProfile": "gpu.json"}}
    own, warnings = admitted(pod(securityContext=localhost), policy)
    assert own["spec"]["securityContext"] == localhost
    assert not any("seccompProfile" in w for w in warnings)


# --- the DRA path -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "obj",
    [
        pod(hostIPC=True),
        pod(container(**context(capabilities={"add": ["SYS_ADMIN"]}))),
        pod(annotations={"cdi.k8s.io/x": "nvidia.com/gpu=all"}),
    ],
    ids=["hostIPC", "capability", "cdi"],
)
def test_the_dra_path_refuses_the_same_escapes(obj: Any) -> None:
    assert refusal(obj, DRA) == refusal(obj, EXTENDER)


# --- reviews that are not shaped like a Pod ---------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "field", "got"),
    [
        ({"containers": {"main": container()}}, "spec.containers", "a list"),
        ({"containers": [container(), "sidecar"]}, "spec.containers[1]", "an object"),
        (
            {"containers": [container(env="CUDA_DEVICE_SM_LIMIT=100")]},
            "spec.containers[0].env",
            "a list",
        ),
        (
            {"containers": [container(securityContext="privileged")]},
            "spec.containers[0].securityContext",
            "an object",
        ),
        (
            {"containers": [container(**context(privileged="true"))]},
            "spec.containers[0].securityContext.privileged",
            "true or false",
        ),
        (
            {"containers": [container(**context(capabilities={"add": "SYS_ADMIN"}))]},
            "spec.containers[0].securityContext.capabilities.add",
            "a list",
        ),
        (
            {"containers": [container(resources={"limits": [GPU]})]},
            "spec.containers[0].resources.limits",
            "an object",
        ),
        ({"containers": [container()], "hostPID": "true"}, "spec.hostPID", "true or false"),
        ({"containers": [container()], "volumes": {"hostPath": "/"}}, "spec.volumes", "a list"),
        (
            {"containers": [container()], "ephemeralContainers": ["debug"]},
            "spec.ephemeralContainers[0]",
            "an object",
        ),
    ],
)
def test_a_review_not_shaped_like_a_pod_is_refused_naming_the_field(
    spec: dict[str, Any], field: str, got: str
) -> None:
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
    result, response = answer(obj)
    assert response["allowed"] is False and response["status"]["code"] == 400
    assert response["status"]["message"].startswith(f"malformed request: {field} must be {got}")
    assert result.reason == "malformed_review"


def test_metadata_that_is_not_an_object_is_refused_not_a_crash() -> None:
    obj = {"kind": "Pod", "metadata": ["train"], "spec": {"containers": [container()]}}
    assert refusal(obj).startswith("malformed request: metadata must be an object")
