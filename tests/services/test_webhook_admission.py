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
from vslice_core.resources import DEFAULT_RESOURCE_NAMES
from vslice_lab.pki import KeyPair, issue
from vslice_services.httpserve import HttpService, ReloadingTlsContext
from vslice_services.quota import QuotaBook
from vslice_services.webhook.jsonpatch import pointer
from vslice_services.webhook.main import MUTATE_PATH, handle_review
from vslice_services.webhook.policy import WebhookPolicy

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


def pod(*containers: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"generateName": "train-", "namespace": "team-a"}
    if labels:
        metadata["labels"] = labels
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


def test_the_opt_out_label_leaves_even_a_gpu_pod_untouched(webhook: Webhook) -> None:
    response = webhook.review(
        pod(container(**{GPU: "1"}), labels={"vslice.io/webhook": "disabled"})
    )
    assert response["allowed"] is True
    assert "patch" not in response


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
