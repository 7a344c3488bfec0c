"""Jobs queued in Kueue through the SDK, ``vslice top``, the ClusterView and the SlicePicker,
against in-memory calls shaped as the API and Kueue v0.17 answer (the lab's real Kueue is in
tests/e2e/test_kueue_lab.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from api_objects import ClusterCalls
from vslice import Client, InvalidRequest, Slice, Timeout
from vslice.commands.top import frame
from vslice.manifests import pod_manifest
from vslice.widgets import ClusterView, SlicePicker
from vslice.workload import QUEUED, Workload
from vslice_core.errors import ClusterError
from vslice_core.queueing import QUEUE_LABEL
from vslice_kube.workloads import Workloads

WAITING = (
    "couldn't assign flavors to pod set main: insufficient unused quota for "
    "vslice.io/gpu-memory in flavor vslice-gpu, 21474836480 more needed"
)


def kueue_workload(job: str, namespace: str = "team-a", queue: str = "team-a") -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"job-{job}-abcde",
            "namespace": namespace,
            "creationTimestamp": "2026-12-05T10:00:00Z",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job}],
        },
        "spec": {"queueName": queue},
        "status": {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "reason": "Pending",
                    "message": WAITING,
                }
            ]
        },
    }


class Kueue:
    """``Workloads.kueue`` of a cluster running Kueue."""

    unavailable: str | None = None
    forbidden = False

    def __init__(self, queues: dict[str, list[str]], workloads: list[dict[str, Any]]) -> None:
        self.queues, self.items = queues, workloads

    def local_queues(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return [
            {"metadata": {"name": name, "namespace": ns}}
            for ns, names in self.queues.items()
            if namespace in (None, ns)
            for name in names
        ]

    def workloads(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return [w for w in self.items if namespace in (None, w["metadata"]["namespace"])]


class Calls(ClusterCalls):
    def __init__(self, kueue: Any = None) -> None:
        super().__init__()
        if kueue is not None:
            self.kueue = kueue

    def job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        return []

    def events_with_reason(self, namespace: str, reason: str) -> list[dict[str, Any]]:
        return []

    def create_job(self, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
        self.created.append(manifest)
        return {**manifest, "metadata": {**manifest["metadata"], "name": "train"}}

    def create_pod(self, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("a queued run must not create a bare pod")


def connected(monkeypatch: pytest.MonkeyPatch, calls: Calls) -> Client:
    monkeypatch.setattr(
        Workloads, "connect", staticmethod(lambda kubeconfig=None: (calls, "team-a"))
    )
    return Client()


def test_a_queued_run_is_a_suspended_job_in_the_local_queue_even_when_it_does_not_fit_now(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = Calls(Kueue({"team-a": ["team-a", "big"]}, []))
    client = connected(monkeypatch, calls)
    # 79 GiB on each of 2 GPUs: no node has that free now; it waits for Kueue, then for room.
    job = client.run("img", "train.py", slice=Slice("79Gi", gpus=2), queue="team-a")
    (created,) = calls.created
    assert created["kind"] == "Job" and created["spec"]["suspend"] is True
    assert created["metadata"]["labels"][QUEUE_LABEL] == "team-a"
    assert (job.kind, job.name) == ("Job", "train")
    assert client.local_queues() == ["big", "team-a"]


def test_a_queue_that_is_not_there_is_refused_naming_the_namespaces_queues(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = connected(monkeypatch, Calls(Kueue({"team-a": ["team-a"]}, [])))
    with pytest.raises(
        InvalidRequest,
        match="no Kueue LocalQueue 'team-b' in namespace team-a: "
        "namespace team-a has the queues team-a",
    ) as raised:
        client.run("img", slice=Slice("1Gi"), queue="team-b")
    assert raised.value.field == "queue"
    with pytest.raises(InvalidRequest, match="Kueue queues Jobs, and this is a Pod"):
        client.submit(pod_manifest("img", None, slice=Slice("1Gi")), queue="team-a")
    with pytest.raises(InvalidRequest, match="empty name"):
        client.run("img", slice=Slice("1Gi"), queue="")


def test_without_kueue_a_queue_name_says_kueue_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    client = connected(monkeypatch, Calls())
    with pytest.raises(InvalidRequest, match="Kueue is not installed in this cluster"):
        client.run("img", slice=Slice("1Gi"), queue="team-a")
    assert client.local_queues() == []


def test_a_queued_jobs_status_wait_and_views_say_where_it_stands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = Calls(Kueue({"team-a": ["team-a"]}, [kueue_workload("train")]))
    client = connected(monkeypatch, calls)
    job = client.workload("train", kind="Job")
    status = job.status
    assert status.phase == QUEUED and status.queue is not None
    assert (status.queue.queue, status.queue.position, status.queue.waiting) == ("team-a", 1, 1)
    assert str(status).startswith("Queued - queued in team-a (1 of 1): couldn't assign flavors")
    assert str(status).endswith("20 GiB more needed")
    lines: list[str] = []
    with pytest.raises(Timeout, match=r"is not running after 0s: queued in team-a \(1 of 1\)"):
        job.wait(0, report=lines.append)
    assert lines == [f"Job team-a/train: {status.queue.words()}"]

    snapshot = client.snapshot()
    shown = frame(snapshot, None, as_json=False)
    assert "QUEUED (1 job waiting in Kueue)" in shown
    assert re.search(r"team-a/train +team-a +1/1 +couldn.t assign flavors", shown), shown
    view = ClusterView(source=lambda: snapshot)
    assert "Queued (1)" in view.queued.value and "team-a/train" in view.queued.value
    assert "1 queued" in view.header.value


def test_an_inadmissible_job_stops_the_wait_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    stuck = kueue_workload("train", queue="gone")
    stuck["status"]["conditions"][0].update(
        reason="Inadmissible", message="LocalQueue gone doesn't exist"
    )
    client = connected(monkeypatch, Calls(Kueue({}, [stuck])))
    with pytest.raises(ClusterError, match="Kueue does not admit it: LocalQueue gone doesn't"):
        client.workload("train", kind="Job").wait(60)


def test_a_pod_or_a_job_kueue_does_not_manage_has_no_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    client = connected(monkeypatch, Calls(Kueue({}, [kueue_workload("other")])))
    assert Workload(client._calls, "Job", "team-a", "train").queue_state() is None
    assert Workload(client._calls, "Pod", "team-a", "train").queue_state() is None


def test_the_picker_offers_the_namespaces_queues_and_submits_a_misfit_into_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = Calls(Kueue({"team-a": ["team-a"]}, []))
    client = connected(monkeypatch, calls)
    picker = SlicePicker(client)
    assert picker.queue.options == (("none: run when it fits", ""), ("Kueue: team-a", "team-a"))
    assert picker.queue.layout.display == ""
    picker.memory.value = 80.0
    picker.gpus.value = 2
    assert picker.plan is not None and not picker.plan.fits
    assert picker.submit_button.disabled  # no queue: a misfit is not submitted
    picker.queue.value = "team-a"
    assert not picker.submit_button.disabled
    submitted = picker.submit()
    assert submitted is not None and submitted.kind == "Job"
    assert calls.created[0]["metadata"]["labels"][QUEUE_LABEL] == "team-a"
    assert picker.submit_button.disabled  # the same request again is not offered
    picker.close()
    plain = SlicePicker(connected(monkeypatch, Calls()))
    assert plain.queue.layout.display == "none"  # no queues: nothing to choose
    plain.close()


def test_queues_the_user_may_not_read_are_named_as_a_problem_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    refused = Kueue({}, [])
    refused.unavailable = "list Kueue workloads in all namespaces: 403: you may not read ..."
    refused.forbidden = True
    problems = connected(monkeypatch, Calls(refused)).snapshot().problems
    assert problems == [f"queued jobs are not shown: {refused.unavailable}"]
    assert connected(monkeypatch, Calls()).snapshot().problems == []  # no Kueue: nothing to say
