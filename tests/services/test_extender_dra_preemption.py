"""The extender's DRA-path preemption against in-memory reads: ResourceSlices as the node agent
publishes them, claims as kube-scheduler allocates them, pods as the API sends them."""

from __future__ import annotations

from typing import Any

import pytest
from vslice_control.extender.drapreemptor import DraPreemptor
from vslice_control.extender.feed import PodFeed
from vslice_control.extender.holds import Holds
from vslice_core.dra import DEVICE_CLASS, DRIVER
from vslice_core.dra.devices import resource_slice
from vslice_core.dra.preemptviews import waits_for_claims
from vslice_core.errors import ClusterError
from vslice_core.ledger import Ledger
from vslice_core.model import Gpu, NodeInventory

NODE = "node-a"
GPU = "GPU-6c7f0d8e-0000-4000-8000-00000000000a"


def claim(name: str, memory_mib: int, *, pod: tuple[str, str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"namespace": "team", "name": name, "uid": f"claim-{name}"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "main",
                        "exactly": {
                            "deviceClassName": DEVICE_CLASS,
                            "count": 1,
                            "capacity": {"requests": {"memory": f"{memory_mib}Mi"}},
                        },
                    }
                ]
            }
        },
        "status": {},
    }
    if pod is not None:
        body["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "main",
                            "driver": DRIVER,
                            "pool": NODE,
                            "device": "gpu-0",
                            "consumedCapacity": {
                                "memory": f"{memory_mib}Mi",
                                "cores": "0",
                                "slots": "1",
                            },
                            "shareID": f"share-{name}",
                        }
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": pod[0], "uid": pod[1]}],
        }
    return body


def pod(name: str, priority: int, claim_name: str, *, pending: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": "Pending" if pending else "Running",
        "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": claim_name}],
    }
    spec: dict[str, Any] = {"priority": priority, "resourceClaims": [{"name": "gpu"}]}
    if pending:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        ]
    else:
        spec["nodeName"] = NODE
        status["startTime"] = "2026-12-05T08:00:00Z"
    return {
        "metadata": {"namespace": "team", "name": name, "uid": f"uid-{name}"},
        "spec": spec,
        "status": status,
    }


class Cluster:
    """The reads, the evictions and the events of one pass."""

    def __init__(self, pods: list[dict[str, Any]], claims: list[dict[str, Any]]) -> None:
        self.pods = pods
        self.claims = claims
        gpu = Gpu(uuid=GPU, model="NVIDIA-L4", memory_mib=23034, slots=4, index=0)
        self.slices = [resource_slice(NodeInventory(name=NODE, gpus=[gpu]), 1)]
        self.evicted: list[tuple[str, bool]] = []
        self.budget: set[str] = set()
        self.events: list[tuple[str, str, str]] = []
        self.pod_reads = 0

    def waiters(self) -> list[dict[str, Any]]:
        """What the extender's pod watch keeps: the pending claim pods marked Unschedulable."""
        return [p for p in self.pods if waits_for_claims(p)]

    def resource_claims(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return self.claims

    def resource_slices(self, driver: str) -> list[dict[str, Any]]:
        return self.slices

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.pod_reads += 1
        return next((p for p in self.pods if p["metadata"]["name"] == name), None)

    def evict_pod(self, namespace: str, name: str, uid: str, *, dry_run: bool) -> None:
        if name in self.budget:
            raise ClusterError(f"evict pod {namespace}/{name}: 429 budget", code=429)
        self.evicted.append((name, dry_run))

    def pod_event(self, namespace: str, name: str, uid: str, reason: str, message: str) -> None:
        self.events.append((name, reason, message))


class Events:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def pod(self, namespace: str, name: str, uid: str, reason: str, message: str) -> None:
        self.cluster.pod_event(namespace, name, uid, reason, message)


def preemptor(cluster: Cluster, **options: Any) -> DraPreemptor:
    return DraPreemptor(cluster.waiters, cluster, cluster, Events(cluster), **options)


@pytest.fixture
def full() -> Cluster:
    """The card (23,034 MiB) holds an old 12,000 MiB claim and a 10,000 MiB one of priority 0;
    a pod of priority 1000 waits for an 11,000 MiB claim."""
    pods = [
        pod("notebook", 0, "nb-gpu"),
        pod("small", 0, "small-gpu"),
        pod("train", 1000, "train-gpu", pending=True),
    ]
    pods[1]["status"]["startTime"] = "2026-12-05T09:00:00Z"
    claims = [
        claim("nb-gpu", 12000, pod=("notebook", "uid-notebook")),
        claim("small-gpu", 10000, pod=("small", "uid-small")),
        claim("train-gpu", 11000),
    ]
    return Cluster(pods, claims)


def test_the_waiting_claim_evicts_the_one_pod_that_frees_enough(full: Cluster) -> None:
    preemptor(full).check()
    # Either alone frees enough (11,000 needed, 1,034 free): the younger, "small", goes.
    assert full.evicted == [("small", True), ("small", False)]
    reasons = {(name, reason) for name, reason, _ in full.events}
    assert reasons == {("train", "Preempting"), ("small", "Preempted")}
    said = next(m for n, r, m in full.events if r == "Preempted")
    assert said.startswith("evicted by vslice for team/train (priority 1000 > 0)")


def test_its_victims_are_not_evicted_twice_while_they_end(full: Cluster) -> None:
    clock = [0.0]
    one = preemptor(full, clock=lambda: clock[0])
    one.check()
    clock[0] = 5.0
    one.check()
    assert [e for e in full.evicted if not e[1]] == [("small", False)]


def test_a_budget_keeps_its_pod_and_the_next_pass_takes_the_other(full: Cluster) -> None:
    full.budget.add("small")
    one = preemptor(full)
    one.check()
    assert full.evicted == []
    one.check()
    assert full.evicted == [("notebook", True), ("notebook", False)]


def test_equal_or_higher_priority_and_never_evict_nothing(full: Cluster) -> None:
    waiting = full.pods[2]
    waiting["spec"]["priority"] = 0
    preemptor(full).check()
    waiting["spec"]["priority"] = 1000
    waiting["spec"]["preemptionPolicy"] = "Never"
    preemptor(full).check()
    assert full.evicted == [] and full.events == []


def test_only_the_active_replica_evicts(full: Cluster) -> None:
    preemptor(full, active=lambda: False).check()
    assert full.evicted == []


def test_a_claim_shared_by_two_pods_frees_nothing_when_one_goes(full: Cluster) -> None:
    for c in full.claims[:2]:
        c["status"]["reservedFor"].append({"resource": "pods", "name": "x", "uid": "uid-x"})
    preemptor(full).check()
    assert full.evicted == []


def test_a_pod_not_marked_unschedulable_is_left_to_kube_scheduler(full: Cluster) -> None:
    full.pods[2]["status"]["conditions"] = []
    preemptor(full).check()
    assert full.evicted == []


def test_a_pod_no_eviction_can_help_is_left_alone_a_while(full: Cluster) -> None:
    full.pods[2]["spec"]["priority"] = 0  # equal to every holder: nothing to evict
    clock = [0.0]
    one = preemptor(full, clock=lambda: clock[0], rest_s=10.0)
    one.check()
    reads = full.pod_reads
    assert reads == 2  # the two holders, read once
    clock[0] = 5.0
    one.check()
    assert full.pod_reads == reads  # resting: no holder is read again
    full.pods[2]["spec"]["priority"] = 1000
    clock[0] = 10.5
    one.check()
    assert ("small", False) in full.evicted


def test_the_pod_watch_keeps_the_pending_claim_pods_and_forgets_them_when_placed() -> None:
    feed = PodFeed(Ledger(), Holds(30.0))
    waiting = pod("train", 1000, "train-gpu", pending=True)
    feed.replace([pod("notebook", 0, "nb-gpu"), waiting])
    assert [p["metadata"]["name"] for p in feed.claim_waiters()] == ["train"]
    bound = pod("train", 1000, "train-gpu")
    feed.apply("MODIFIED", bound)
    assert feed.claim_waiters() == []
    feed.apply("MODIFIED", waiting)
    feed.apply("DELETED", waiting)
    assert feed.claim_waiters() == []
