"""Containers of one pod that would share a GPU slice across process namespaces are refused
(``vslice_control.webhook.claimsharing``), and the API server sends the webhook those pods.

The shim counts a slice's processes by pid in one pid namespace; each container has its own
unless the pod sets ``shareProcessNamespace: true``. The lab test
(tests/e2e/test_dra_claim_sharing.py) shows the same pods refused, and admitted and held to the
claim's size with a shared process namespace, on a real node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from vslice_control.webhook import reach
from vslice_control.webhook.claimsharing import REASON, refusal
from vslice_control.webhook.policy import WebhookPolicy, review_pod
from vslice_control.webhook.review import AdmissionRequest
from vslice_core.dra.claims import CLAIM_NAME
from vslice_core.resources import DEFAULT_RESOURCE_NAMES

GPU, MEM = DEFAULT_RESOURCE_NAMES.gpu, DEFAULT_RESOURCE_NAMES.memory


def container(name: str, *claims: Mapping[str, str], **fields: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": name, "image": "vslice.local/smoke:1", **fields}
    if claims:
        spec.setdefault("resources", {})["claims"] = [dict(c) for c in claims]
    return spec


def pod(
    *containers: dict[str, Any], init: list[dict[str, Any]] | None = None, **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "four-gib"}],
        "containers": list(containers),
        **spec,
    }
    if init:
        body["initContainers"] = init
    return {"metadata": {"name": "p"}, "spec": body}


EXTENDER = WebhookPolicy()


def review(body: dict[str, Any], policy: WebhookPolicy = EXTENDER) -> Any:
    request = AdmissionRequest(uid="u", operation="CREATE", namespace="team-a", name="p", pod=body)
    return review_pod(request, policy)


WHOLE = {"name": "gpu"}


def test_two_containers_on_one_whole_claim_are_refused_naming_both_and_what_works() -> None:
    verdict = review(pod(container("a", WHOLE), container("b", WHOLE)))
    assert not verdict.allowed and verdict.reason == REASON
    message = verdict.message
    assert "spec.containers[0].resources.claims" in message
    assert "spec.containers[1].resources.claims" in message
    assert "'a' and 'b'" in message and "claim 'gpu'" in message
    assert "resources.claims[].request" in message
    assert "spec.shareProcessNamespace: true" in message


def test_two_containers_on_one_request_are_refused_and_on_different_requests_admitted() -> None:
    same = pod(
        container("a", {"name": "gpu", "request": "main"}),
        container("b", {"name": "gpu", "request": "main"}),
    )
    assert "request 'main' of claim 'gpu'" in review(same).message
    apart = pod(
        container("a", {"name": "gpu", "request": "one"}),
        container("b", {"name": "gpu", "request": "two"}),
    )
    assert refusal(apart) is None and review(apart).allowed


def test_the_whole_claim_overlaps_each_of_its_requests() -> None:
    body = pod(container("a", {"name": "gpu", "request": "main"}), container("b", WHOLE))
    assert "both use claim 'gpu'" in review(body).message


def test_an_init_container_sharing_a_claim_with_a_container_is_refused() -> None:
    body = pod(container("main", WHOLE), init=[container("warm-up", WHOLE)])
    message = review(body).message
    assert "spec.initContainers[0].resources.claims" in message
    assert "spec.containers[0].resources.claims" in message


def test_a_pod_sharing_its_process_namespace_may_share_a_claim_between_containers() -> None:
    body = pod(container("a", WHOLE), container("b", WHOLE), shareProcessNamespace=True)
    assert refusal(body) is None
    assert review(body).allowed


def test_a_container_naming_the_webhooks_claim_beside_converted_gpu_containers_is_refused() -> None:
    # The conversion adds the claim vslice-gpu, each GPU container its own request; a container
    # that already references the whole entry would share every one of those slices.
    body = pod(
        container("train", resources={"limits": {GPU: "1", MEM: "1024"}}),
        container("peek", {"name": CLAIM_NAME}),
    )
    del body["spec"]["resourceClaims"]
    verdict = review(body, WebhookPolicy(path="dra"))
    assert not verdict.allowed and verdict.reason == REASON
    assert "'peek' and 'train'" in verdict.message and f"claim {CLAIM_NAME!r}" in verdict.message


def selected_for_sharing(body: Mapping[str, Any]) -> bool:
    """What the sharing clause of the pods' ``matchConditions`` means, in Python."""
    spec = body["spec"]
    if spec.get("shareProcessNamespace") is True:
        return False
    items = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    return sum(1 for c in items if (c.get("resources") or {}).get("claims")) > 1


@pytest.mark.parametrize(
    "body",
    [
        pod(container("a", WHOLE), container("b", WHOLE)),
        pod(container("main", WHOLE), init=[container("warm-up", WHOLE)]),
        pod(container("a", {"name": "gpu", "request": "x"}), container("b", WHOLE)),
    ],
    ids=["containers", "init-container", "request-and-whole"],
)
def test_the_api_server_sends_the_webhook_every_pod_it_refuses_for_sharing(
    body: dict[str, Any],
) -> None:
    # Without a clause of its own such a pod (no nvidia.com/* limits) never reaches the webhook.
    assert refusal(body) is not None and selected_for_sharing(body)
    text = reach.expression()
    assert "object.spec.shareProcessNamespace" in text
    assert "has(c.resources.claims)" in text and "object.spec.initContainers.filter(" in text


def test_a_pod_with_one_claim_container_or_a_shared_process_namespace_is_not_sent() -> None:
    assert not selected_for_sharing(pod(container("a", WHOLE), container("sidecar")))
    shared = pod(container("a", WHOLE), container("b", WHOLE), shareProcessNamespace=True)
    assert not selected_for_sharing(shared)
    assert "!object.spec.shareProcessNamespace" in reach.expression()
