"""The webhook over HTTPS: AdmissionReview v1 requests from a TLS client, as the apiserver sends.

The server is the real one (``HttpService`` with the webhook's routes and a reloading TLS
context); quotas come from ResourceQuota objects handed to the same ``QuotaBook`` the watch
feeds in production.
"""

from __future__ import annotations

import base64
import copy
import json
import shutil
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from served import Reply, apply_patch, call, client_context, running, serving_pair
from vslice_control.quota.limits import QuotaBook
from vslice_control.webhook.jsonpatch import pointer
from vslice_control.webhook.main import MUTATE_PATH, handle_review
from vslice_control.webhook.policy import WebhookPolicy
from vslice_core.annotations import POD_STATE
from vslice_core.resources import DEFAULT_RESOURCE_NAMES
from vslice_lab.pki import KeyPair, ensure_ca, issue
from vslice_serving.httpserve import HttpService, ReloadingTlsContext

GPU, MEM, PCT, CORES = (
    DEFAULT_RESOURCE_NAMES.gpu,
    DEFAULT_RESOURCE_NAMES.memory,
    DEFAULT_RESOURCE_NAMES.memory_percent,
    DEFAULT_RESOURCE_NAMES.cores,
)


class Webhook:
    def __init__(self, port: int, tls: ssl.SSLContext, quotas: QuotaBook, certs: Path) -> None:
        self.port, self.tls, self.quotas, self.certs = port, tls, quotas, certs

    def post(self, body: bytes | dict[str, Any]) -> Reply:
        return call(self.port, "POST", MUTATE_PATH, body, tls=self.tls)

    def review(self, pod: dict[str, Any], **request: Any) -> dict[str, Any]:
        reply = self.post(admission_review(pod, **request))
        assert reply.status == 200, reply.body
        response: dict[str, Any] = reply.json()["response"]
        return response


def container(name: str = "main", **limits: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox", "resources": {"limits": limits}}


def pod(
    *containers: dict[str, Any],
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"generateName": "train-", "namespace": "team-a"}
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": list(containers)},
    }


def admission_review(
    pod: dict[str, Any], uid: str = "req-1", operation: str = "CREATE"
) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "team-a",
            "operation": operation,
            "userInfo": {"username": "alice"},
            "object": pod,
            "dryRun": False,
        },
    }


def patch_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    assert response["patchType"] == "JSONPatch"
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    return ops


@pytest.fixture
def webhook(tmp_path: Path) -> Iterator[Webhook]:
    ca, serving = serving_pair(tmp_path)
    quotas = QuotaBook(DEFAULT_RESOURCE_NAMES)
    policy = WebhookPolicy(hide_gpus_from_other_containers=True)
    service = HttpService(
        ("127.0.0.1", 0),
        {("POST", MUTATE_PATH): lambda body: handle_review(body, policy, quotas.limits)},
        tls=ReloadingTlsContext(str(serving.cert), str(serving.key)),
    )
    with running(service):
        yield Webhook(service.port, client_context(ca), quotas, tmp_path)


def test_a_gpu_pod_is_normalized_and_routed_to_the_vslice_scheduler(webhook: Webhook) -> None:
    original = pod(container(**{MEM: "3000"}))
    response = webhook.review(original)
    assert response["uid"] == "req-1" and response["allowed"] is True
    ops = patch_of(response)
    assert {
        "op": "add",
        "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu",
        "value": "1",
    } in ops
    patched = apply_patch(copy.deepcopy(original), ops)
    assert patched["spec"]["schedulerName"] == "vslice-scheduler"
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {MEM: "3000", GPU: "1"}


def test_a_pod_without_gpu_resources_is_admitted_untouched(webhook: Webhook) -> None:
    response = webhook.review(pod(container(cpu="1")))
    assert response["allowed"] is True
    assert "patch" not in response


def test_a_pod_label_no_longer_opts_a_gpu_pod_out(webhook: Webhook) -> None:
    original = pod(container(**{GPU: "1"}), labels={"vslice.io/webhook": "disabled"})
    response = webhook.review(original)
    patched = apply_patch(copy.deepcopy(original), patch_of(response))
    assert patched["spec"]["schedulerName"] == "vslice-scheduler"
    privileged = container(**{GPU: "1"})
    privileged["securityContext"] = {"privileged": True}
    response = webhook.review(pod(privileged, labels={"vslice.io/webhook": "disabled"}))
    assert response["allowed"] is False


def test_an_invalid_value_is_denied_naming_the_field_and_the_value(webhook: Webhook) -> None:
    response = webhook.review(pod(container(**{GPU: "1", CORES: "120"})))
    assert response["allowed"] is False
    assert response["status"]["code"] == 400
    assert "nvidia.com/gpucores" in response["status"]["message"]
    assert "120" in response["status"]["message"]


def test_a_privileged_container_asking_for_gpus_is_denied(webhook: Webhook) -> None:
    gpu_container = container(**{GPU: "1"})
    gpu_container["securityContext"] = {"privileged": True}
    response = webhook.review(pod(gpu_container))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "spec.containers[0].securityContext.privileged" in message and "got true" in message


def test_a_privileged_container_without_gpus_in_a_gpu_pod_is_admitted(webhook: Webhook) -> None:
    sidecar = container("sidecar", cpu="1")
    sidecar["securityContext"] = {"privileged": True}
    response = webhook.review(pod(container(**{GPU: "1"}), sidecar))
    assert response["allowed"] is True


def test_a_pod_asking_for_more_than_its_namespace_quota_is_denied(webhook: Webhook) -> None:
    webhook.quotas.replace([resource_quota("gpu", {f"requests.{MEM}": "40Gi"})])
    response = webhook.review(pod(container(**{GPU: "2", MEM: "30720"})))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "nvidia.com/gpumem" in message and "61440" in message and "40960" in message


def test_a_pod_within_its_namespace_quota_is_admitted(webhook: Webhook) -> None:
    webhook.quotas.replace(
        [resource_quota("gpu", {f"requests.{MEM}": "40960", f"requests.{CORES}": "100"})]
    )
    response = webhook.review(pod(container(**{GPU: "1", MEM: "30720", CORES: "50"})))
    assert response["allowed"] is True


def test_non_gpu_containers_of_a_gpu_pod_get_no_visible_devices(webhook: Webhook) -> None:
    original = pod(container(**{GPU: "1"}), container("logger", cpu="100m"))
    patched = apply_patch(copy.deepcopy(original), patch_of(webhook.review(original)))
    assert patched["spec"]["containers"][1]["env"] == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}
    ]
    assert "env" not in patched["spec"]["containers"][0]


def test_an_explicit_scheduler_name_is_kept_with_a_warning(webhook: Webhook) -> None:
    original = pod(container(**{GPU: "1"}))
    original["spec"]["schedulerName"] = "batch-scheduler"
    response = webhook.review(original)
    patched = apply_patch(copy.deepcopy(original), patch_of(response))
    assert patched["spec"]["schedulerName"] == "batch-scheduler"
    assert any("batch-scheduler" in warning for warning in response["warnings"])


def test_updates_are_admitted_without_changes(webhook: Webhook) -> None:
    response = webhook.review(pod(container(**{CORES: "500"})), operation="UPDATE")
    assert response["allowed"] is True and "patch" not in response


def test_patch_pointers_escape_slash_and_tilde() -> None:
    assert (
        pointer(("metadata", "annotations", "vslice.io/a~b"))
        == "/metadata/annotations/vslice.io~1a~0b"
    )


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "AdmissionReview"),
        (json.dumps({"apiVersion": "v1", "kind": "Pod"}).encode(), "admission.k8s.io/v1"),
        (
            json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(),
            "request",
        ),
    ],
)
def test_a_broken_body_gets_a_400_that_says_what_is_wrong(
    webhook: Webhook, body: bytes, expected: str
) -> None:
    reply = webhook.post(body)
    assert reply.status == 400
    assert expected in reply.body.decode()
    assert call(webhook.port, "GET", "/healthz", tls=webhook.tls).body == b"ok"


def test_a_review_without_a_pod_is_denied_with_its_uid(webhook: Webhook) -> None:
    review = admission_review(pod(container()), uid="req-9")
    review["request"]["object"] = "nonsense"
    reply = webhook.post(review)
    assert reply.status == 200
    response = reply.json()["response"]
    assert response["uid"] == "req-9" and response["allowed"] is False
    assert "request.object must be an object" in response["status"]["message"]


def test_healthz_answers_ok_over_https(webhook: Webhook) -> None:
    reply = call(webhook.port, "GET", "/healthz", tls=webhook.tls)
    assert (reply.status, reply.body) == (200, b"ok")


def test_a_rotated_certificate_is_served_without_a_restart(webhook: Webhook) -> None:
    first = _peer_certificate(webhook)
    ca = KeyPair(webhook.certs / "ca.crt", webhook.certs / "ca.key")
    (webhook.certs / "next").mkdir()
    fresh = issue(
        ca,
        webhook.certs / "next",
        "webhook",
        common_name="webhook-rotated",
        hosts=("127.0.0.1",),
        server=True,
    )
    time.sleep(0.01)  # a distinct modification time
    shutil.copy(fresh.key, webhook.certs / "webhook.key")
    shutil.copy(fresh.cert, webhook.certs / "webhook.crt")
    second = _peer_certificate(webhook)
    assert first != second
    assert webhook.review(pod(container(cpu="1")))["allowed"] is True


def _peer_certificate(webhook: Webhook) -> bytes:
    with (
        socket.create_connection(("127.0.0.1", webhook.port), timeout=5) as raw,
        webhook.tls.wrap_socket(raw, server_hostname="127.0.0.1") as conn,
    ):
        cert = conn.getpeercert(binary_form=True)
    assert cert is not None
    return cert


def resource_quota(name: str, hard: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team-a"}, "spec": {"hard": hard}}


def test_memory_in_the_apiservers_canonical_form_counts_mib(webhook: Webhook) -> None:
    # the API server turns 60000 into "60k" and a quota's 40960 stays; both are MiB
    webhook.quotas.replace([resource_quota("gpu", {f"requests.{MEM}": "40960"})])
    response = webhook.review(pod(container(**{GPU: "1", MEM: "60k"})))
    assert response["allowed"] is False
    assert "60000" in response["status"]["message"]
    webhook.quotas.replace([resource_quota("gpu", {f"requests.{MEM}": "60k"})])
    assert webhook.review(pod(container(**{GPU: "1", MEM: "60k"})))["allowed"] is True


def test_a_misspelt_gpu_resource_is_denied_listing_the_known_ones(webhook: Webhook) -> None:
    response = webhook.review(pod(container(**{"nvidia.com/gpumemory": "3000"})))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "spec.containers[0].resources.limits: unknown resource 'nvidia.com/gpumemory'" in message
    assert "nvidia.com/gpumem-percentage" in message


def test_other_resources_of_the_same_vendor_are_left_alone(webhook: Webhook) -> None:
    response = webhook.review(pod(container(**{"nvidia.com/mig-1g.10gb": "1"})))
    assert response["allowed"] is True and "patch" not in response


# --- the trust boundary: state annotations, nodeName, environment, strict input ---


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu-pod", "plain-pod"])
def test_state_annotations_are_removed_at_creation_with_a_warning_each(
    webhook: Webhook, gpu: bool
) -> None:
    forged = {key: "{}" for key in POD_STATE} | {"vslice.io/gpu-type": "a100", "team": "x"}
    original = pod(container(**({GPU: "1"} if gpu else {"cpu": "1"})), annotations=forged)
    response = webhook.review(original)
    assert response["allowed"] is True
    patched = apply_patch(copy.deepcopy(original), patch_of(response))
    assert patched["metadata"]["annotations"] == {"vslice.io/gpu-type": "a100", "team": "x"}
    for key in POD_STATE:
        assert any(key in warning and "removed" in warning for warning in response["warnings"])
    removed = [warning for warning in response["warnings"] if "removed" in warning]
    assert len(removed) == len(POD_STATE)


def test_the_state_annotations_include_the_allocation_proof() -> None:
    assert set(POD_STATE) == {
        "vslice.io/allocation",
        "vslice.io/allocation-proof",
        "vslice.io/delivered",
        "vslice.io/bind-time",
        "vslice.io/idle-since",
        "vslice.io/idle-reclaim-at",
    }


def test_a_gpu_pod_with_a_node_name_is_refused_telling_to_remove_it(webhook: Webhook) -> None:
    original = pod(container(**{GPU: "1"}))
    original["spec"]["nodeName"] = "lab-t4"
    response = webhook.review(original)
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "spec.nodeName" in message and "'lab-t4'" in message and "remove" in message


def test_a_plain_pod_with_a_node_name_is_admitted(webhook: Webhook) -> None:
    original = pod(container(cpu="1"))
    original["spec"]["nodeName"] = "lab-t4"
    assert webhook.review(original)["allowed"] is True


def with_env(base: dict[str, Any], *env: dict[str, Any]) -> dict[str, Any]:
    base["env"] = list(env)
    return base


@pytest.mark.parametrize(
    "variable",
    [
        "CUDA_DEVICE_MEMORY_LIMIT",
        "CUDA_DEVICE_MEMORY_LIMIT_0",
        "CUDA_DEVICE_SM_LIMIT",
        "CUDA_DEVICE_SM_LIMIT_1",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE",
        "VSLICE_LOG_LEVEL",
        "NVIDIA_VISIBLE_DEVICES",
    ],
)
def test_a_gpu_container_setting_a_limit_variable_is_refused_naming_it(
    webhook: Webhook, variable: str
) -> None:
    gpu = with_env(container("train", **{GPU: "1"}), {"name": "A", "value": "1"},
                   {"name": variable, "value": "99g"})  # fmt: skip
    response = webhook.review(pod(gpu))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "spec.containers[0].env[1]" in message
    assert variable in message and "'train'" in message


def test_a_variable_from_a_secret_is_refused_by_its_name(webhook: Webhook) -> None:
    ref = {"secretKeyRef": {"name": "s", "key": "k"}}
    gpu = with_env(container(**{GPU: "1"}), {"name": "CUDA_DEVICE_SM_LIMIT", "valueFrom": ref})
    response = webhook.review(pod(gpu))
    assert response["allowed"] is False
    assert "CUDA_DEVICE_SM_LIMIT" in response["status"]["message"]


def test_an_env_from_prefix_inside_the_reserved_names_is_refused(webhook: Webhook) -> None:
    gpu = container(**{GPU: "1"})
    gpu["envFrom"] = [
        {"configMapRef": {"name": "a"}},
        {"prefix": "CUDA_", "secretRef": {"name": "b"}},
    ]
    response = webhook.review(pod(gpu))
    assert response["allowed"] is False
    assert "spec.containers[0].envFrom[1].prefix" in response["status"]["message"]
    # the keys of what envFrom reads are not visible at admission: admitted
    gpu["envFrom"] = [
        {"configMapRef": {"name": "a"}},
        {"prefix": "APP_", "secretRef": {"name": "b"}},
    ]
    assert webhook.review(pod(gpu))["allowed"] is True


def test_init_containers_are_checked_too(webhook: Webhook) -> None:
    original = pod(container(**{GPU: "1"}))
    original["spec"]["initContainers"] = [
        with_env(container("warmup", **{GPU: "1"}), {"name": "VSLICE_LIMITS", "value": "x"})
    ]
    response = webhook.review(original)
    assert response["allowed"] is False
    assert "spec.initContainers[0].env[0]" in response["status"]["message"]


@pytest.mark.parametrize("value", ["all", "0", "GPU-1234", ""])
def test_a_pod_without_gpus_asking_the_runtime_for_gpus_is_refused(
    webhook: Webhook, value: str
) -> None:
    plain = with_env(container("app", cpu="1"), {"name": "NVIDIA_VISIBLE_DEVICES", "value": value})
    response = webhook.review(pod(plain))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "NVIDIA_VISIBLE_DEVICES" in message and "'app'" in message and "none" in message


@pytest.mark.parametrize("value", ["none", "void"])
def test_a_pod_without_gpus_may_hide_them(webhook: Webhook, value: str) -> None:
    plain = with_env(container("app", cpu="1"), {"name": "NVIDIA_VISIBLE_DEVICES", "value": value})
    assert webhook.review(pod(plain))["allowed"] is True


def test_a_sidecar_without_gpus_in_a_gpu_pod_may_not_ask_for_all_gpus(webhook: Webhook) -> None:
    side = with_env(container("side"), {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"})
    response = webhook.review(pod(container(**{GPU: "1"}), side))
    assert response["allowed"] is False
    assert "spec.containers[1].env[0]" in response["status"]["message"]


def test_other_variables_are_left_alone(webhook: Webhook) -> None:
    gpu = with_env(container(**{GPU: "1"}), {"name": "CUDA_VISIBLE_DEVICES", "value": "0"},
                   {"name": "MY_VSLICE_FLAG", "value": "1"})  # fmt: skip
    assert webhook.review(pod(gpu))["allowed"] is True


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("\u0663\u0660\u0660\u0660", "'\u0663\u0660\u0660\u0660'"),  # Arabic-Indic
        ("3000 ", "'3000 '"),
        (" 3000", "' 3000'"),
        ("3000\n", "'3000\\n'"),
        ("\uff13\uff10\uff10\uff10", "'\uff13\uff10\uff10\uff10'"),  # full-width digits
    ],
)
def test_a_quantity_the_api_server_would_not_accept_is_refused(
    webhook: Webhook, value: str, shown: str
) -> None:
    response = webhook.review(pod(container(**{GPU: "1", MEM: value})))
    assert response["allowed"] is False and response["status"]["code"] == 400
    message = response["status"]["message"]
    assert f"spec.containers[0].resources.limits[{MEM!r}]" in message and shown in message


def test_requests_different_from_limits_are_refused(webhook: Webhook) -> None:
    gpu = container(**{GPU: "1", MEM: "3000"})
    gpu["resources"]["requests"] = {GPU: "1", MEM: "2000"}
    response = webhook.review(pod(gpu))
    assert response["allowed"] is False and response["status"]["code"] == 400
    message = response["status"]["message"]
    assert f"requests[{MEM!r}]" in message and "'3000'" in message and "'2000'" in message


def test_requests_equal_to_limits_in_another_spelling_are_admitted(webhook: Webhook) -> None:
    gpu = container(**{GPU: "1", MEM: "3000"})
    gpu["resources"]["requests"] = {GPU: "1", MEM: "3k"}
    assert webhook.review(pod(gpu))["allowed"] is True


@pytest.mark.parametrize(
    ("resource", "value"),
    [(MEM, "9e15"), (MEM, "9Ei"), (GPU, "3e9")],
)
def test_values_too_large_for_the_node_side_are_refused(
    webhook: Webhook, resource: str, value: str
) -> None:
    response = webhook.review(pod(container(**{resource: value})))
    assert response["allowed"] is False and response["status"]["code"] == 400
    message = response["status"]["message"]
    assert resource in message and repr(value) in message and "at most" in message


def test_the_refusal_names_the_path_the_grammar_and_the_value_exactly(webhook: Webhook) -> None:
    response = webhook.review(pod(container(**{GPU: "1", MEM: "3000 "})))
    assert response["status"]["message"] == (
        f"spec.containers[0].resources.limits[{MEM!r}] must be a Kubernetes quantity written "
        "with ASCII digits and no blanks (e.g. '30720' or '4Gi'), got '3000 '"
    )


def test_a_pod_without_gpus_has_its_vslice_values_checked_and_nothing_more(
    webhook: Webhook,
) -> None:
    priority = container("web", **{"nvidia.com/priority": "\u0661"})
    response = webhook.review(pod(priority))
    assert response["allowed"] is False and response["status"]["code"] == 400
    assert response["status"]["message"].startswith(
        "spec.containers[0].resources.limits['nvidia.com/priority'] must be a Kubernetes quantity"
    )
    # a vslice annotation on a pod that asks for no GPU is not vslice's to judge
    plain = pod(container("web", cpu="1"), annotations={"vslice.io/gpu-policy": "best"})
    assert webhook.review(plain)["allowed"] is True


@pytest.mark.parametrize(
    "review",
    [
        {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"},
        {"apiVersion": "admission.k8s.io/v1", "kind": "Pod"},
    ],
)
def test_a_wrong_api_version_or_kind_gets_400_even_with_a_uid(
    webhook: Webhook, review: dict[str, Any]
) -> None:
    body = admission_review(pod(container())) | review
    reply = webhook.post(body)
    assert reply.status == 400
    assert "admission.k8s.io/v1" in reply.body.decode()


def test_a_body_nested_100000_deep_gets_400_not_500(webhook: Webhook) -> None:
    depth = 100_000
    body = b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": '
    body += b'{"uid": "deep", "object": ' + b"[" * depth + b"]" * depth + b"}}"
    reply = webhook.post(body)
    assert reply.status == 400
    assert "nested too deeply" in reply.body.decode()
    assert call(webhook.port, "GET", "/healthz", tls=webhook.tls).body == b"ok"


# --- only the API server may call /mutate ---


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[tuple[int, KeyPair, Path]]:
    from vslice_control.webhook.main import client_auth
    from vslice_serving.settings import WebhookSettings

    ca, serving = serving_pair(tmp_path)
    settings = WebhookSettings(
        tls_cert_file=str(serving.cert), tls_key_file=str(serving.key), client_ca_file=str(ca.cert)
    )
    quotas = QuotaBook(DEFAULT_RESOURCE_NAMES)
    service = HttpService(
        ("127.0.0.1", 0),
        {("POST", MUTATE_PATH): lambda body: handle_review(body, WebhookPolicy(), quotas.limits)},
        tls=ReloadingTlsContext(str(serving.cert), str(serving.key), str(ca.cert)),
        client_auth=client_auth(settings),
    )
    with running(service):
        yield service.port, ca, tmp_path


def _as(ca: KeyPair, directory: Path, common_name: str | None) -> ssl.SSLContext:
    context = client_context(ca)
    if common_name is not None:
        pair = issue(ca, directory, f"client-{common_name}", common_name=common_name)
        context.load_cert_chain(str(pair.cert), str(pair.key))
    return context


def test_the_api_servers_client_certificate_may_call_mutate(
    guarded: tuple[int, KeyPair, Path],
) -> None:
    port, ca, directory = guarded
    tls = _as(ca, directory, "kube-apiserver-webhook-client")
    reply = call(port, "POST", MUTATE_PATH, admission_review(pod(container(**{GPU: "1"}))), tls=tls)
    assert reply.status == 200 and reply.json()["response"]["allowed"] is True


@pytest.mark.parametrize("common_name", [None, "alice"], ids=["no-certificate", "other-name"])
def test_anyone_else_gets_403_naming_why(
    guarded: tuple[int, KeyPair, Path], common_name: str | None
) -> None:
    port, ca, directory = guarded
    tls = _as(ca, directory, common_name)
    reply = call(port, "POST", MUTATE_PATH, admission_review(pod(container())), tls=tls)
    assert reply.status == 403
    assert ("alice" if common_name else "client certificate") in reply.body.decode()
    assert call(port, "GET", "/healthz", tls=tls).body == b"ok"


def test_a_certificate_from_another_ca_fails_the_handshake(
    guarded: tuple[int, KeyPair, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    port, ca, _ = guarded
    other = tmp_path_factory.mktemp("other")
    foreign = issue(ensure_ca(other), other, "api", common_name="kube-apiserver-webhook-client")
    tls = client_context(ca)
    tls.load_cert_chain(str(foreign.cert), str(foreign.key))
    with pytest.raises((ssl.SSLError, ConnectionError)):
        call(port, "POST", MUTATE_PATH, admission_review(pod(container())), tls=tls)
