"""Priority preemption on the DRA path, on the lab's real node (docs/preemption.md, "The DRA
path"): kube-scheduler cannot allocate a higher-priority pod's claim while lower-priority
claims hold the card, and does not preempt for it; vslice's extender evicts the claim pod
that frees enough, and kube-scheduler then allocates the waiting claim and the pod runs.
"""

from __future__ import annotations

import time

import pytest
from realnode_pods import RealNode, running
from test_dra_realnode import SLEEP, claim_pod, dra_gpu, template

pytestmark = pytest.mark.timeout(300)


def test_a_higher_priority_claim_evicts_the_lower_priority_claim_pod_and_runs(
    real_node: RealNode, namespace: str, classes: dict[str, str]
) -> None:
    card = dra_gpu(real_node).memory_mib
    share = f"{card * 6 // 10}Mi"  # two of these never fit one card
    template(real_node, namespace, "share", memory=share)
    claim_pod(real_node, namespace, "notebook", "share", SLEEP, priority_class=classes["low"])
    real_node.wait_running(namespace, "notebook")
    claim_pod(real_node, namespace, "train", "share", SLEEP, priority_class=classes["high"])
    pod = real_node.wait(namespace, "train", running, "Running after preemption", timeout=120)
    assert pod["spec"]["nodeName"] == real_node.name
    assert real_node.gone(namespace, "notebook")
    said = real_node.events(namespace, "notebook")
    assert f"evicted by vslice for {namespace}/train (priority 1000 > 0)" in said.get(
        "Preempted", ""
    ), said
    assert "can be allocated there" in real_node.events(namespace, "train").get("Preempting", "")


def test_an_equal_priority_claim_evicts_nothing(
    real_node: RealNode, namespace: str, classes: dict[str, str]
) -> None:
    card = dra_gpu(real_node).memory_mib
    template(real_node, namespace, "share", memory=f"{card * 6 // 10}Mi")
    claim_pod(real_node, namespace, "first", "share", SLEEP, priority_class=classes["low"])
    real_node.wait_running(namespace, "first")
    claim_pod(real_node, namespace, "second", "share", SLEEP, priority_class=classes["low"])
    real_node.wait(
        namespace,
        "second",
        lambda p: any(
            c.get("reason") == "Unschedulable" for c in p["status"].get("conditions") or []
        ),
        "marked Unschedulable",
        timeout=60,
    )
    time.sleep(6)  # three passes of the DRA preemption
    assert running(real_node.lab.read_pod(namespace, "first"))
    assert "Preempted" not in real_node.events(namespace, "first")
