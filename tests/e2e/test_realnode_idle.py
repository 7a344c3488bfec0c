"""Idle slices on the lab's real node (docs/idle.md): the node's monitor marks a pod whose
slices launch no kernel, and, only in a namespace that opted in, warns it and then evicts it,
on both paths; a busy pod, a pod with the keep annotation and an idle pod elsewhere stay. The
API server's admission policy refuses malformed idle settings with the object, key and value.

The lab's monitor counts a slice idle after 5 s and checks every second
(``vslice_lab.nodeconfig.monitor_settings``); the namespace here reclaims after 6 s with a
4 s grace, so the whole cycle takes seconds.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from conftest import LabHandle
from kubernetes.client.exceptions import ApiException
from realnode_pods import RealNode, running
from test_dra_realnode import claim_pod, template
from vslice_core.annotations import IDLE_RECLAIM_AT, IDLE_SINCE

pytestmark = pytest.mark.timeout(240)

HOLD = ["hold", "--memory", "256Mi", "--seconds", "600"]  # allocates, then never launches
BUSY = ["compute", "--seconds", "600", "--kernel-ms", "20"]  # launches without a pause
KEEP = {"vslice.io/idle-keep": "true"}


def label(lab: LabHandle, namespace: str, labels: dict[str, str | None]) -> None:
    lab.core.patch_namespace(namespace, {"metadata": {"labels": labels}})


def annotations(node: RealNode, namespace: str, name: str) -> dict[str, Any]:
    return dict(node.lab.read_pod(namespace, name)["metadata"].get("annotations") or {})


def wait_until(check: Any, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout:.0f}s")
        time.sleep(0.5)


def test_an_idle_pod_is_warned_then_evicted_and_a_busy_or_kept_one_stays(
    real_node: RealNode, namespace: str
) -> None:
    label(real_node.lab, namespace, {"vslice.io/idle-reclaim": "6s", "vslice.io/idle-grace": "4s"})
    real_node.smoke_pod(namespace, "idle", HOLD)
    real_node.smoke_pod(namespace, "busy", BUSY, cores=30)
    real_node.smoke_pod(namespace, "kept", HOLD, annotations=KEEP)
    for name in ("idle", "busy", "kept"):
        real_node.wait_running(namespace, name)
    wait_until(lambda: real_node.gone(namespace, "idle"), "the idle pod's eviction", 60)
    said = real_node.events(namespace, "idle")
    assert "namespace " + namespace in said.get("IdleSliceWarning", ""), said
    assert "(in 4s) unless it launches a kernel" in said["IdleSliceWarning"]
    assert "evicted to give back 1.0 GiB of GPU memory" in said.get("IdleSliceReclaimed", "")
    time.sleep(3)  # what the monitor would do to the others, it has done by now
    for name in ("busy", "kept"):
        assert running(real_node.lab.read_pod(namespace, name)), name
        assert not [r for r in real_node.events(namespace, name) if r.startswith("Idle")], name
    assert IDLE_SINCE not in annotations(real_node, namespace, "busy")
    kept = annotations(real_node, namespace, "kept")
    assert IDLE_SINCE in kept and IDLE_RECLAIM_AT not in kept  # shown idle, never warned


def test_an_idle_pod_outside_opted_in_namespaces_is_marked_and_never_touched(
    real_node: RealNode, namespace: str
) -> None:
    real_node.smoke_pod(namespace, "notebook", HOLD)
    real_node.wait_running(namespace, "notebook")
    wait_until(
        lambda: IDLE_SINCE in annotations(real_node, namespace, "notebook"), "the idle mark", 30
    )
    time.sleep(8)  # past any reclaim time the other test's namespace uses
    assert running(real_node.lab.read_pod(namespace, "notebook"))
    assert (
        real_node.events(namespace, "notebook")
        .keys()
        .isdisjoint({"IdleSliceWarning", "IdleSliceReclaimed"})
    )
    metrics = real_node.metrics()
    assert f'vslice_idle_slices{{namespace="{namespace}"' in metrics, metrics[-2000:]


def test_an_idle_claim_pod_on_the_dra_path_is_given_back_too(
    real_node: RealNode, namespace: str
) -> None:
    """On the DRA path a region is named by the claim's uid: the monitor finds its pod through
    the DRA driver's checkpoint and the pod's claim statuses."""
    label(real_node.lab, namespace, {"vslice.io/idle-reclaim": "6s", "vslice.io/idle-grace": "4s"})
    template(real_node, namespace, "one-gib", memory="1Gi")
    claim_pod(real_node, namespace, "notebook", "one-gib", HOLD)
    real_node.wait_running(namespace, "notebook")
    wait_until(lambda: real_node.gone(namespace, "notebook"), "the idle claim pod's eviction", 60)
    said = real_node.events(namespace, "notebook")
    assert "(in 4s) unless it launches a kernel" in said.get("IdleSliceWarning", ""), said
    assert "evicted to give back 1.0 GiB of GPU memory" in said.get("IdleSliceReclaimed", "")


def refused(call: Any) -> str:
    with pytest.raises(ApiException) as caught:
        call()
    assert caught.value.status in (400, 403, 422), caught.value
    return str(caught.value.body)


def test_malformed_idle_settings_are_refused_naming_the_object_key_and_value(
    lab: LabHandle, namespace: str
) -> None:
    said = refused(lambda: label(lab, namespace, {"vslice.io/idle-reclaim": "4hours"}))
    assert f"namespace {namespace}: label vslice.io/idle-reclaim 4hours is not a duration" in said
    said = refused(lambda: label(lab, namespace, {"vslice.io/idle-reclaim": "0m"}))
    assert "0m is not a duration longer than 0" in said
    said = refused(lambda: label(lab, namespace, {"vslice.io/idle-keep": "never"}))
    assert "label vslice.io/idle-keep never is neither allow nor forbid" in said
    label(lab, namespace, {"vslice.io/idle-reclaim": "1h30m", "vslice.io/idle-keep": "forbid"})
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kept", "annotations": KEEP},
        "spec": {"containers": [{"name": "main", "image": "registry.invalid/sleep:1"}]},
    }
    said = refused(lambda: lab.core.create_namespaced_pod(namespace, pod))
    assert "pod kept: annotation vslice.io/idle-keep=true is not allowed in namespace" in said
    pod["metadata"]["annotations"] = {"vslice.io/idle-keep": "yes"}
    said = refused(lambda: lab.core.create_namespaced_pod(namespace, pod))
    assert "annotation vslice.io/idle-keep yes is neither true nor false" in said
