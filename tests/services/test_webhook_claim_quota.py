"""The webhook holds vslice claims to what exists and to the namespace's quota: at creation a
claim no card can hold or that alone exceeds the quota is refused with the numbers, and over
real HTTPS each allocation kube-scheduler writes is counted with the namespace's others."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from served import call, client_context, running, serving_pair
from test_claim_quota import CARD_MIB, cards, slice_of
from vslice_control.quota.claims import ClaimLedger
from vslice_control.webhook.main import handle_review, routes
from vslice_control.webhook.metrics import WebhookMetrics
from vslice_control.webhook.policy import WebhookPolicy
from vslice_core.dra import DEVICE_CLASS
from vslice_core.model import QuotaLimits
from vslice_serving.httpserve import HttpService, ReloadingTlsContext

QUOTA_2G = QuotaLimits(memory_mib=2048)


def review(obj: dict[str, Any], operation: str = "CREATE", old: Any = None) -> dict[str, Any]:
    metadata = obj["metadata"]
    request: dict[str, Any] = {
        "uid": f"review-{metadata['name']}",
        "kind": {"group": "resource.k8s.io", "version": "v1", "kind": obj["kind"]},
        "operation": operation,
        "namespace": metadata.get("namespace", "team-a"),
        "name": metadata["name"],
        "object": obj,
    }
    if old is not None:
        request["oldObject"] = old
        request["subResource"] = "status"
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def written(
    *requests: dict[str, Any], kind: str = "ResourceClaim", name: str = "mine"
) -> dict[str, Any]:
    spec = {"devices": {"requests": list(requests)}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"spec": spec} if kind == "ResourceClaimTemplate" else spec,
    }


def exactly(name: str = "main", count: int = 1, **capacity: str) -> dict[str, Any]:
    wanted: dict[str, Any] = {"deviceClassName": DEVICE_CLASS, "count": count}
    if capacity:
        wanted["capacity"] = {"requests": capacity}
    return {"name": name, "exactly": wanted}


def answer(
    obj: dict[str, Any], quota: QuotaLimits | None = QUOTA_2G, **review_args: Any
) -> dict[str, Any]:
    body = json.dumps(review(obj, **review_args)).encode()
    reply = handle_review(body, WebhookPolicy(), lambda namespace: quota, claims=ledger())
    response: dict[str, Any] = json.loads(reply.body)["response"]
    return response


def ledger() -> ClaimLedger:
    book = ClaimLedger(cards=cards())
    book.replace([])
    return book


# At creation


def test_a_claim_without_a_memory_request_in_a_quota_smaller_than_every_card_is_refused() -> None:
    response = answer(written(exactly()))
    assert response["allowed"] is False and response["status"]["code"] == 403
    assert response["status"]["message"] == (
        f"ResourceClaim team-a/mine: spec.devices.requests ask at least {CARD_MIB} MiB of GPU "
        "memory (a request without capacity.requests.memory takes a whole card, and the "
        f"smallest the cluster lists has {CARD_MIB} MiB), more than namespace 'team-a' may use "
        "(ResourceQuota requests.nvidia.com/gpumem = 2048); ask at most 2048Mi in "
        "capacity.requests.memory"
    )


def test_a_template_whose_devices_together_exceed_the_quota_is_refused() -> None:
    response = answer(written(exactly(count=3, memory="1Gi"), kind="ResourceClaimTemplate"))
    assert response["allowed"] is False
    assert "ResourceClaimTemplate team-a/mine" in response["status"]["message"]
    assert "ask at least 3072 MiB of GPU memory" in response["status"]["message"]


def test_a_memory_request_beyond_every_card_is_refused_naming_the_largest() -> None:
    response = answer(written(exactly(memory="30Gi")), quota=None)
    assert response["allowed"] is False and response["status"]["code"] == 400
    assert (
        "ResourceClaim team-a/mine: spec.devices.requests[main].exactly.capacity.requests.memory "
        f"is 30720Mi, more than any gpu.vslice.io device has (the largest card the cluster's "
        f"ResourceSlices list has {CARD_MIB} MiB); ask at most {CARD_MIB}Mi"
    ) in response["status"]["message"]


def test_a_claim_with_a_smaller_alternative_within_the_quota_is_admitted() -> None:
    choices = {
        "name": "main",
        "firstAvailable": [
            {
                "name": "big",
                "deviceClassName": DEVICE_CLASS,
                "capacity": {"requests": {"memory": "8Gi"}},
            },
            {
                "name": "small",
                "deviceClassName": DEVICE_CLASS,
                "capacity": {"requests": {"memory": "1Gi"}},
            },
        ],
    }
    assert answer(written(choices))["allowed"] is True
    assert answer(written(exactly(memory="2Gi", cores="30")))["allowed"] is True


# At allocation, over HTTPS


def status_write(name: str) -> bytes:
    new = slice_of(1024, name)
    old = copy.deepcopy(new)
    old["status"] = {}
    return json.dumps(review(new, operation="UPDATE", old=old)).encode()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[int, Any]]:
    ca, serving = serving_pair(tmp_path)
    quota = QuotaLimits(memory_mib=3072)
    service = HttpService(
        ("127.0.0.1", 0),
        routes(WebhookMetrics(), WebhookPolicy(), lambda namespace: quota, claims=ledger()),
        tls=ReloadingTlsContext(str(serving.cert), str(serving.key)),
    )
    with running(service):
        yield service.port, client_context(ca)


def test_of_ten_allocations_sent_at_once_three_fit_a_3072_mib_quota_and_seven_are_refused(
    served: tuple[int, Any],
) -> None:
    port, tls = served

    def send(index: int) -> dict[str, Any]:
        reply = call(port, "POST", "/mutate", status_write(f"c{index}"), tls=tls)
        assert reply.status == 200
        response: dict[str, Any] = reply.json()["response"]
        return response

    with ThreadPoolExecutor(10) as pool:
        responses = list(pool.map(send, range(10)))
    assert sum(r["allowed"] for r in responses) == 3
    refusals = [r["status"]["message"] for r in responses if not r["allowed"]]
    assert len(refusals) == 7
    for message in refusals:
        assert "already hold 3072: 4096 in all" in message, message
        assert "requests.nvidia.com/gpumem = 3072" in message
