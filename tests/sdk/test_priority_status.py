"""A slice's PriorityClass, and what ``Workload.status`` says when vslice took the pod's room
away: preempted by a higher-priority pod (docs/preemption.md) or given back idle
(docs/idle.md). Against in-memory calls shaped as the API answers."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from api_objects import ClusterCalls, pod
from vslice import Client, InvalidRequest, NoFit, Slice
from vslice.manifests import job_manifest, pod_manifest
from vslice.workload import EVICTED, Workload
from vslice_core.annotations import IDLE_SINCE, encode_moment
from vslice_core.errors import ClusterError
from vslice_core.idle import RECLAIMED
from vslice_core.preemption import PREEMPTED, preempted_text
from vslice_kube.workloads import Workloads

CLASSES = [
    {"metadata": {"name": "high"}, "value": 1000},
    {"metadata": {"name": "low"}, "value": 0},
]


class Calls(ClusterCalls):
    """The calls Client and Workload make, in memory."""

    def __init__(self, pods: list[dict[str, Any]] | None = None) -> None:
        super().__init__(pods)
        self.events: list[dict[str, Any]] = []
        self.classes = list(CLASSES)

    def list_priority_classes(self) -> list[dict[str, Any]]:
        return self.classes

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        for found in self.pods:
            if found["metadata"]["name"] == name:
                return found
        raise ClusterError(f'get pod {namespace}/{name}: 404 pods "{name}" not found', code=404)

    def job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        return [p for p in self.pods if p["metadata"]["name"].startswith(job + "-")]

    def events_with_reason(self, namespace: str, reason: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["reason"] == reason]

    def create_pod(self, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
        self.created.append(manifest)
        return {**manifest, "metadata": {**manifest["metadata"], "name": "train"}}


def event(reason: str, about: str, message: str, uid: str = "", at: str = "") -> dict[str, Any]:
    return {
        "reason": reason,
        "message": message,
        "involvedObject": {"kind": "Pod", "name": about, "uid": uid},
        "lastTimestamp": at or "2026-12-05T10:00:00Z",
    }


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    found = Calls()
    monkeypatch.setattr(
        Workloads, "connect", staticmethod(lambda kubeconfig=None: (found, "team-a"))
    )
    monkeypatch.delenv("VSLICE_NAMESPACE", raising=False)
    return found


def test_a_priority_class_goes_on_the_pod_and_in_the_description() -> None:
    wanted = Slice("10Gi", priority_class="high")
    assert pod_manifest("img", slice=wanted)["spec"]["priorityClassName"] == "high"
    assert "priority high" in wanted.describe()
    assert "priorityClassName" not in pod_manifest("img", slice=Slice("10Gi"))["spec"]


@pytest.mark.parametrize("name", ["High", "a_b", "", "-x", 7])
def test_a_malformed_priority_class_names_the_field_and_the_value(name: Any) -> None:
    with pytest.raises(InvalidRequest) as caught:
        Slice("10Gi", priority_class=name)
    assert "priority_class" in str(caught.value) and repr(name) in str(caught.value)


def test_a_jobs_evicted_pod_is_replaced_not_counted_as_a_failure() -> None:
    job = job_manifest(pod_manifest("img", slice=Slice("1Gi")))
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert rules == [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def test_an_unknown_priority_class_is_refused_before_anything_is_created(calls: Calls) -> None:
    with pytest.raises(InvalidRequest) as caught:
        Client().run("img", slice=Slice("1Gi", priority_class="urgent"))
    text = str(caught.value)
    assert "priority_class: no PriorityClass 'urgent'" in text and "high (1000), low (0)" in text
    assert calls.created == []


def test_a_slice_that_fits_nowhere_is_created_when_its_class_outranks_a_running_slice(
    calls: Calls,
) -> None:
    # node-a's GPU 0 has 20 of its 80 GiB free: two 75 GiB slices fit nowhere now.
    with pytest.raises(NoFit):
        Client().run("img", slice=Slice("70Gi", gpu_type="A100", gpus=2))
    for running in calls.pods:
        running["spec"]["priority"] = 0
    Client().run("img", slice=Slice("75Gi", gpus=2, gpu_type="A100", priority_class="high"))
    assert calls.created[-1]["spec"]["priorityClassName"] == "high"


def test_nothing_outranked_means_no_fit_as_before(calls: Calls) -> None:
    for running in calls.pods:
        running["spec"]["priority"] = 1000
    with pytest.raises(NoFit):
        Client().run("img", slice=Slice("75Gi", gpus=2, gpu_type="A100", priority_class="high"))
    assert calls.created == []


def test_a_preempted_pod_that_is_gone_says_by_whom(calls: Calls) -> None:
    text = preempted_text("team-a/train", 1000, 0, "node-a", "10 GiB on GPU-node-a-0")
    calls.events = [event(PREEMPTED, "notebook", text, "uid-old")]
    status = Workload(calls, "Pod", "team-b", "notebook").status  # type: ignore[arg-type]
    assert status.phase == EVICTED and status.preempted_by == "team-a/train"
    assert status.evicted == text
    assert "evicted at 2026-12-05 10:00:00 UTC: evicted by vslice for team-a/train" in str(status)


def test_a_pod_of_the_same_name_created_again_is_not_the_one_preempted(calls: Calls) -> None:
    calls.pods = [pod("team-b", "infer", "node-a", [("GPU-node-a-0", 0, 1024, 0)])]
    text = preempted_text("team-a/train", 1000, 0, "node-a", "1 GiB")
    calls.events = [event(PREEMPTED, "infer", text, "uid-of-an-older-pod")]
    status = Workload(calls, "Pod", "team-b", "infer").status  # type: ignore[arg-type]
    assert status.phase == "Running" and status.preempted_by is None and status.evicted is None
    calls.events = [event(PREEMPTED, "infer", text, "uid-team-b-infer")]
    status = Workload(calls, "Pod", "team-b", "infer").status  # type: ignore[arg-type]
    assert status.preempted_by == "team-a/train"


def test_a_jobs_status_tells_the_latest_eviction_of_any_of_its_pods(calls: Calls) -> None:
    runner = pod("team-b", "train-x7k2p", "node-a", [("GPU-node-a-0", 0, 1024, 0)])
    calls.pods = [runner]
    calls.events = [
        event(
            PREEMPTED,
            "train-ab12c",
            preempted_text("team-a/a", 9, 0, "n", "x"),
            at="2026-12-05T09:00:00Z",
        ),
        event(RECLAIMED, "train-zz99q", "evicted to give back 1.0 GiB", at="2026-12-05T11:00:00Z"),
        event(
            PREEMPTED, "trainer-abcde", preempted_text("team-a/b", 9, 0, "n", "x")
        ),  # another Job
    ]
    status = Workload(calls, "Job", "team-b", "train").status  # type: ignore[arg-type]
    assert status.phase == "Running" and status.node == "node-a"
    assert status.evicted == "evicted to give back 1.0 GiB" and status.preempted_by is None


def test_an_idle_pods_status_says_so(calls: Calls) -> None:
    running = pod("team-b", "nb", "node-a", [("GPU-node-a-0", 0, 1024, 0)])
    running["metadata"]["annotations"][IDLE_SINCE] = encode_moment(
        datetime(2026, 12, 5, tzinfo=UTC)
    )
    calls.pods = [running]
    status = Workload(calls, "Pod", "team-b", "nb").status  # type: ignore[arg-type]
    assert status.idle is not None and status.idle.reclaim_at is None
    assert " - idle " in str(status)
