"""Where a Job stands in Kueue, read from Workload objects shaped as Kueue v0.17 writes them
(the lab's real Kueue is in tests/e2e/test_kueue_lab.py)."""

from __future__ import annotations

from typing import Any

from vslice_core.queueing import queue_states, readable, state_of_job

PENDING = (
    "couldn't assign flavors to pod set main: insufficient unused quota for "
    "vslice.io/gpu-memory in flavor vslice-gpu, 21474836480 more needed"
)


def condition(
    kind: str, status: str, reason: str, message: str = "", at: str = ""
) -> dict[str, str]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": at or "2026-12-05T10:00:00Z",
    }


def workload(
    job: str,
    *conditions: dict[str, str],
    queue: str = "team-a",
    namespace: str = "team-a",
    created: str = "2026-12-05T10:00:00Z",
    priority: int = 0,
    cluster_queue: str | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": list(conditions)}
    if cluster_queue:
        status["admission"] = {"clusterQueue": cluster_queue}
    return {
        "metadata": {
            "name": f"job-{job}-1a2b3",
            "namespace": namespace,
            "creationTimestamp": created,
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job}],
        },
        "spec": {"queueName": queue, "priority": priority},
        "status": status,
    }


def waiting(job: str, **kwargs: Any) -> dict[str, Any]:
    return workload(job, condition("QuotaReserved", "False", "Pending", PENDING), **kwargs)


def admitted(job: str, **kwargs: Any) -> dict[str, Any]:
    return workload(
        job,
        condition("QuotaReserved", "True", "QuotaReserved"),
        condition("Admitted", "True", "Admitted"),
        cluster_queue="team-a",
        **kwargs,
    )


def test_kueues_byte_counts_read_as_gib() -> None:
    assert readable(PENDING).endswith(
        "vslice.io/gpu-memory in flavor vslice-gpu, 20 GiB more needed"
    )
    assert readable("x, 1572864000 more needed") == "x, 1500 MiB more needed"
    assert readable("insufficient quota for cpu, 3 more needed") == (
        "insufficient quota for cpu, 3 more needed"
    )


def test_positions_follow_kueues_order_priority_first_then_age_per_local_queue() -> None:
    states = queue_states(
        [
            admitted("running"),
            waiting("old", created="2026-12-05T10:00:01Z"),
            waiting("new", created="2026-12-05T10:00:05Z"),
            waiting("urgent", created="2026-12-05T10:00:09Z", priority=100),
            waiting("elsewhere", namespace="team-b", queue="team-b"),
        ]
    )
    by_job = {s.job: s for s in states}
    assert [(j, by_job[j].position, by_job[j].waiting) for j in ("urgent", "old", "new")] == [
        ("urgent", 1, 3),
        ("old", 2, 3),
        ("new", 3, 3),
    ]
    assert (by_job["elsewhere"].position, by_job["elsewhere"].waiting) == (1, 1)
    assert by_job["running"].state == "Admitted" and by_job["running"].position is None
    assert by_job["running"].cluster_queue == "team-a"
    assert by_job["old"].words() == (
        "queued in team-a (2 of 3): couldn't assign flavors to pod set main: insufficient "
        "unused quota for vslice.io/gpu-memory in flavor vslice-gpu, 20 GiB more needed"
    )


def test_a_preempted_job_says_why_it_lost_its_quota_and_counts_from_its_eviction() -> None:
    preempted = workload(
        "borrower",
        condition("QuotaReserved", "False", "Pending", PENDING),
        condition(
            "Evicted", "True", "Preempted", "Preempted to accommodate ...", "2026-12-05T10:05:00Z"
        ),
        condition("Preempted", "True", "InCohortReclamation", "Preempted to accommodate ..."),
        created="2026-12-05T09:00:00Z",
    )
    later = waiting("later", created="2026-12-05T10:01:00Z")
    states = {s.job: s for s in queue_states([preempted, later])}
    # Requeued at its eviction (10:05), so behind a job created at 10:01.
    assert (states["later"].position, states["borrower"].position) == (1, 2)
    assert states["borrower"].reason.endswith(
        "(evicted earlier: its cohort took back the quota it had borrowed)"
    )


def test_finished_and_inadmissible_jobs_and_workloads_of_other_owners() -> None:
    finished = workload(
        "done",
        condition("Admitted", "True", "Admitted"),
        condition("Finished", "True", "Succeeded"),
    )
    stuck = workload(
        "stuck",
        condition("QuotaReserved", "False", "Inadmissible", "LocalQueue team-x doesn't exist"),
        queue="team-x",
    )
    pod_owned = waiting("bare")
    pod_owned["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "p"}]
    states = {s.job: s for s in queue_states([finished, stuck, pod_owned])}
    assert set(states) == {"done", "stuck"}
    assert states["done"].state == "Finished" and not states["done"].queued
    assert states["stuck"].state == "Inadmissible" and states["stuck"].queued
    assert states["stuck"].position is None  # not in the queue's order: Kueue skips it
    assert states["stuck"].words() == "not admissible in team-x: LocalQueue team-x doesn't exist"
    assert state_of_job([finished, stuck], "team-a", "stuck") == states["stuck"]
    assert state_of_job([finished], "team-a", "missing") is None


def test_malformed_workloads_do_not_break_the_reading() -> None:
    broken: list[dict[str, Any]] = [
        {"metadata": {"ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j"}]}},
        {"metadata": {}, "status": {"conditions": ["not a mapping"]}},
    ]
    (state,) = queue_states(broken)
    assert (state.job, state.state, state.queue, state.position) == ("j", "Queued", "", 1)
