"""The webhook's /metrics: every answer /mutate gives, counted by result and reason, and timed.

The server is the real one (``HttpService`` over HTTPS with the webhook's own ``routes``);
reviews are posted as the API server posts them and the counts are read back by scraping
``GET /metrics`` and parsing it with ``prometheus_client``'s parser.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from served import call, client_context, running, serving_pair
from test_webhook_dra import FakeTemplates, resource_claim
from vslice_control.extender.metrics import BUCKETS as EXTENDER_BUCKETS
from vslice_control.quota.limits import QuotaBook
from vslice_control.webhook.main import MUTATE_PATH, client_auth, routes
from vslice_control.webhook.metrics import BUCKETS, WebhookMetrics
from vslice_control.webhook.policy import WebhookPolicy
from vslice_control.webhook.review import reason_code
from vslice_core.annotations import ALLOCATION
from vslice_core.model import QuotaLimits
from vslice_core.resources import DEFAULT_RESOURCE_NAMES
from vslice_lab.pki import KeyPair, issue
from vslice_serving.httpserve import HttpService, ReloadingTlsContext
from vslice_serving.settings import WebhookSettings

GPU, MEM = DEFAULT_RESOURCE_NAMES.gpu, DEFAULT_RESOURCE_NAMES.memory


def container(name: str = "main", **limits: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox", "resources": {"limits": limits}}


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "train-", "namespace": "team-a"},
        "spec": {"containers": list(containers), **spec},
    }


def review(obj: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "req-1",
            "namespace": "team-a",
            "operation": operation,
            "userInfo": {"username": "alice"},
            "object": obj,
            "dryRun": False,
        },
    }


Key = tuple[str, str]


@dataclass
class Webhook:
    port: int
    tls: ssl.SSLContext

    def post(self, body: bytes | dict[str, Any]) -> int:
        return call(self.port, "POST", MUTATE_PATH, body, tls=self.tls).status

    def admit(self, obj: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
        reply = call(self.port, "POST", MUTATE_PATH, review(obj, operation), tls=self.tls)
        assert reply.status == 200, reply.body
        response: dict[str, Any] = reply.json()["response"]
        return response

    def scrape(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        reply = call(self.port, "GET", "/metrics", tls=self.tls)
        assert reply.status == 200
        found: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(reply.body.decode()):
            for sample in family.samples:
                found.setdefault(sample.name, []).append((sample.labels, sample.value))
        return found

    def admissions(self) -> dict[Key, float]:
        """``{(result, reason): count}``."""
        return {
            (labels["result"], labels["reason"]): value
            for labels, value in self.scrape().get("vslice_webhook_admissions_total", [])
        }


def _served(
    tmp_path: Path, policy: WebhookPolicy, quota: QuotaLimits | None = None, **kwargs: Any
) -> Iterator[Webhook]:
    ca, serving = serving_pair(tmp_path)
    service = HttpService(
        ("127.0.0.1", 0),
        routes(WebhookMetrics(), policy, lambda namespace: quota, **kwargs),
        tls=ReloadingTlsContext(str(serving.cert), str(serving.key)),
    )
    with running(service):
        yield Webhook(service.port, client_context(ca))


@pytest.fixture
def webhook(tmp_path: Path) -> Iterator[Webhook]:
    yield from _served(tmp_path, WebhookPolicy(), QuotaLimits(memory_mib=40960))


def test_a_patched_gpu_pod_counts_as_mutated_with_no_reason(webhook: Webhook) -> None:
    assert webhook.admit(pod(container(**{GPU: "1", MEM: "1024"})))["allowed"] is True
    assert webhook.admissions() == {("mutated", "none"): 1}


def test_answers_that_change_nothing_count_as_allowed_with_why(webhook: Webhook) -> None:
    assert "patch" not in webhook.admit(pod(container()))
    assert "patch" not in webhook.admit(pod(container(**{GPU: "1"})), operation="UPDATE")
    assert webhook.admissions() == {("allowed", "not_gpu_pod"): 1, ("allowed", "not_create"): 1}


def test_removed_state_annotations_are_the_reason_of_a_mutation(webhook: Webhook) -> None:
    plain = pod(container())
    plain["metadata"]["annotations"] = {ALLOCATION: "{}"}
    assert webhook.admit(plain)["patchType"] == "JSONPatch"
    assert webhook.admissions() == {("mutated", "forbidden_annotation"): 1}


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        (
            pod(container("a"), container("b", **{MEM: "lots"})),
            "spec.containers[].resources.limits['nvidia.com/gpumem']",
        ),
        (
            pod(container(**{GPU: "1"}) | {"securityContext": {"privileged": True}}),
            "spec.containers[].securityContext.privileged",
        ),
        (pod(container(**{GPU: "1"}), nodeName="n1"), "spec.nodeName"),
        (pod(container(**{"nvidia.com/gpumemory": "1"})), "unknown_resource"),
        (
            pod(container(**{GPU: "1"}) | {"env": [{"name": "CUDA_DEVICE_SM_LIMIT"}]}),
            "forbidden_env",
        ),
        (pod(container(**{GPU: "1", MEM: "50000"})), "quota_exceeded"),
    ],
    ids=["invalid-value", "privileged", "node-name", "unknown-resource", "env", "quota"],
)
def test_a_refusal_counts_with_a_short_code(
    webhook: Webhook, obj: dict[str, Any], reason: str
) -> None:
    assert webhook.admit(obj)["allowed"] is False
    assert webhook.admissions() == {("refused", reason): 1}


def test_the_same_mistake_in_another_container_is_the_same_series(webhook: Webhook) -> None:
    webhook.admit(pod(container("a", **{MEM: "lots"})))
    webhook.admit(pod(container("a"), container("b"), container("c", **{MEM: "lots"})))
    assert webhook.admissions() == {
        ("refused", "spec.containers[].resources.limits['nvidia.com/gpumem']"): 2
    }


def test_a_broken_body_counts_as_refused_malformed(webhook: Webhook) -> None:
    assert webhook.post(b"not json") == 400
    no_pod = review(pod(container()))
    del no_pod["request"]["object"]
    assert webhook.post(no_pod) == 200  # denied inside a review that keeps the request uid
    assert webhook.admissions() == {("refused", "malformed_review"): 2}


def test_every_answer_is_timed_in_the_extenders_buckets(webhook: Webhook) -> None:
    webhook.admit(pod(container(**{GPU: "1"})))
    webhook.admit(pod(container()))
    webhook.post(b"{}")
    scrape = webhook.scrape()
    ((_, count),) = scrape["vslice_webhook_admission_seconds_count"]
    assert count == 3 == sum(webhook.admissions().values())
    bounds = [
        float(labels["le"])
        for labels, _ in scrape["vslice_webhook_admission_seconds_bucket"]
        if labels["le"] != "+Inf"
    ]
    assert tuple(bounds) == BUCKETS == EXTENDER_BUCKETS
    assert not [name for name in scrape if name.endswith("_created")]


def test_an_internal_error_is_counted_before_the_server_answers_500(tmp_path: Path) -> None:
    def broken(namespace: str) -> QuotaLimits | None:
        raise RuntimeError("quota lookup broke")

    ca, serving = serving_pair(tmp_path)
    service = HttpService(
        ("127.0.0.1", 0),
        routes(WebhookMetrics(), WebhookPolicy(), broken),
        tls=ReloadingTlsContext(str(serving.cert), str(serving.key)),
    )
    with running(service):
        webhook = Webhook(service.port, client_context(ca))
        assert webhook.post(review(pod(container(**{GPU: "1"})))) == 500
        assert webhook.admissions() == {("refused", "internal_error"): 1}


# ----- the DRA path and claims -----------------------------------------------------------


def test_a_dra_pod_counts_as_mutated_for_dra(tmp_path: Path) -> None:
    templates = FakeTemplates()
    for webhook in _served(tmp_path, WebhookPolicy(path="dra"), templates=templates):
        assert webhook.admit(pod(container(**{GPU: "1", MEM: "1024"})))["allowed"] is True
        assert webhook.admissions() == {("mutated", "dra"): 1}
        assert len(templates.stored) == 1


def test_a_dra_pod_without_api_access_is_refused_saying_so(tmp_path: Path) -> None:
    for webhook in _served(tmp_path, WebhookPolicy(path="dra")):
        assert webhook.admit(pod(container(**{GPU: "1", MEM: "1024"})))["allowed"] is False
        assert webhook.admissions() == {("refused", "no_api_access"): 1}


def test_claims_count_as_claim_answers(webhook: Webhook) -> None:
    assert webhook.admit(resource_claim({"memory": "8Gi"}))["allowed"] is True
    assert webhook.admit(resource_claim({"bandwidth": "1"}))["allowed"] is False
    assert webhook.admissions() == {
        ("allowed", "claim"): 1,
        ("refused", "spec.devices.requests"): 1,
    }


# ----- who may read /metrics -------------------------------------------------------------


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[tuple[int, KeyPair]]:
    ca, serving = serving_pair(tmp_path)
    settings = WebhookSettings(
        tls_cert_file=str(serving.cert), tls_key_file=str(serving.key), client_ca_file=str(ca.cert)
    )
    service = HttpService(
        ("127.0.0.1", 0),
        routes(WebhookMetrics(), WebhookPolicy(), QuotaBook(DEFAULT_RESOURCE_NAMES).limits),
        tls=ReloadingTlsContext(str(serving.cert), str(serving.key), str(ca.cert)),
        client_auth=client_auth(settings),
    )
    with running(service):
        yield service.port, ca


def test_metrics_stay_open_while_mutate_needs_the_api_servers_certificate(
    guarded: tuple[int, KeyPair], tmp_path: Path
) -> None:
    port, ca = guarded
    anonymous = client_context(ca)
    assert call(port, "POST", MUTATE_PATH, review(pod(container())), tls=anonymous).status == 403
    scraped = call(port, "GET", "/metrics", tls=anonymous)
    assert scraped.status == 200
    # The 403 is the server's, not an admission answer: nothing was counted.
    assert b"vslice_webhook_admissions_total{" not in scraped.body
    apiserver = client_context(ca)
    pair = issue(ca, tmp_path, "apiserver", common_name="kube-apiserver-webhook-client")
    apiserver.load_cert_chain(str(pair.cert), str(pair.key))
    reply = call(port, "POST", MUTATE_PATH, review(pod(container())), tls=apiserver)
    assert json.loads(reply.body)["response"]["allowed"] is True
    text = call(port, "GET", "/metrics", tls=anonymous).body.decode()
    assert 'vslice_webhook_admissions_total{reason="not_gpu_pod",result="allowed"} 1.0' in text


# ----- the reason code itself ------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "code"),
    [
        ("spec.containers[3].env[12].name", "spec.containers[].env[].name"),
        (
            "spec.initContainers[0].resources.limits['nvidia.com/gpu']",
            "spec.initContainers[].resources.limits['nvidia.com/gpu']",
        ),
        ("containers[my-container].resources", "containers[].resources"),
        ("spec.devices.requests[gpu].exactly", "spec.devices.requests[].exactly"),
        (None, "invalid"),
    ],
)
def test_reason_codes_keep_the_field_and_drop_what_a_user_chose(
    field: str | None, code: str
) -> None:
    assert reason_code(field) == code
