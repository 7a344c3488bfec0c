"""Priority preemption through the extender: a pending pod that fits nowhere evicts the fewest
lower-priority slices that make it fit (vslice_core.preemption's rule), through the Eviction
API with a dry run first (a PodDisruptionBudget's 429 evicts nothing), tells both sides in
events, and has the node held for it until they are gone.

The real HTTP routes over a real ledger fed by the watch handlers; evictions and binds go to
a fake cluster that records them and answers 429 for the pods a budget protects.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from served import call
from test_extender_http import GIB, allocation_on, node, pod
from test_extender_trust import FakeCluster, RecordedEvents
from vslice_control.extender.feed import NodeFeed, PodFeed
from vslice_control.extender.holds import Holds
from vslice_control.extender.main import routes
from vslice_control.extender.metrics import ExtenderMetrics
from vslice_control.extender.preemptor import Preemptor
from vslice_control.extender.trust import Reports
from vslice_control.extender.verbs import Extender
from vslice_core.annotations import ALLOCATION
from vslice_core.errors import ClusterError
from vslice_core.ledger import Ledger
from vslice_core.resources import DEFAULT_RESOURCE_NAMES
from vslice_serving.httpserve import HttpService


@dataclass
class EvictingCluster(FakeCluster):
    evicted: list[str] = field(default_factory=list)
    dry_runs: list[str] = field(default_factory=list)
    protected: set[str] = field(default_factory=set)  # names a PodDisruptionBudget protects

    def evict_pod(self, namespace: str, name: str, uid: str, *, dry_run: bool) -> None:
        if name in self.protected:
            raise ClusterError(f"evict pod {namespace}/{name}: disruption budget", code=429)
        (self.dry_runs if dry_run else self.evicted).append(name)


@dataclass
class Lab:
    port: int
    pods: PodFeed
    cluster: EvictingCluster
    events: RecordedEvents

    def filter(self, manifest: dict[str, Any], names: list[str]) -> dict[str, Any]:
        reply = call(self.port, "POST", "/filter", {"Pod": manifest, "NodeNames": names})
        assert reply.status == 200, reply.body
        result: dict[str, Any] = reply.json()
        return result

    def bind(self, name: str, node_name: str) -> dict[str, Any]:
        body = {
            "PodName": name,
            "PodNamespace": "default",
            "PodUID": f"uid-{name}",
            "Node": node_name,
        }
        result: dict[str, Any] = call(self.port, "POST", "/bind", body).json()
        return result

    def running(
        self, name: str, node_name: str, memory_mib: int, priority: int, start: str
    ) -> None:
        """A Running pod holding ``memory_mib`` on the node's first GPU."""
        manifest = pod(name, {ALLOCATION: allocation_on(node_name, 0, memory_mib)}, node=node_name)
        manifest["spec"]["priority"] = priority
        manifest["status"] = {"phase": "Running", "startTime": start}
        self.pods.apply("ADDED", manifest)
        self.cluster.pods[name] = manifest

    def gone(self, name: str) -> None:
        self.pods.apply("DELETED", self.cluster.pods.pop(name))


@pytest.fixture
def lab() -> Iterator[Lab]:
    ledger, holds, events = Ledger(), Holds(), RecordedEvents()
    metrics = ExtenderMetrics(ledger)
    nodes, pods = NodeFeed(ledger), PodFeed(ledger, holds, reports=Reports(events))
    cluster = EvictingCluster()
    extender = Extender(
        ledger,
        holds,
        cluster,
        metrics,
        names=DEFAULT_RESOURCE_NAMES,
        pods=pods,
        preemptor=Preemptor(ledger, pods, cluster, events),
    )
    nodes.replace([node("n1", 16 * GIB), node("n2", 16 * GIB)])
    pods.replace([])
    service = HttpService(("127.0.0.1", 0), routes(extender, metrics, lambda: True, nodes))
    service.start()
    yield Lab(service.port, pods, cluster, events)
    service.stop()


def pending(name: str, memory_mib: int, priority: int, policy: str | None = None) -> dict[str, Any]:
    manifest = pod(name, gpu="1", mem=str(memory_mib))
    manifest["spec"]["priority"] = priority
    if policy:
        manifest["spec"]["preemptionPolicy"] = policy
    return manifest


def full(lab: Lab) -> None:
    """n1: old (priority 0, 10 GiB, started first) and young (priority 0, 4 GiB); n2: one pod
    of priority 50 holding 14 GiB. 2 GiB free on each GPU."""
    lab.running("old", "n1", 10 * GIB, 0, "2026-12-01T08:00:00Z")
    lab.running("young", "n1", 4 * GIB, 0, "2026-12-04T08:00:00Z")
    lab.running("team", "n2", 14 * GIB, 50, "2026-12-03T08:00:00Z")


def test_a_higher_priority_pod_evicts_the_youngest_of_the_smallest_sets_and_says_so(
    lab: Lab,
) -> None:
    full(lab)
    answer = lab.filter(pending("train", 6 * GIB, 100), ["n1", "n2"])
    assert answer["NodeNames"] in (None, [])
    # Evicting either n1 pod alone frees enough, and both have priority 0: the younger goes.
    assert lab.cluster.dry_runs == ["young"] and lab.cluster.evicted == ["young"]
    reason = answer["FailedAndUnresolvableNodes"]["n1"]
    assert "preempting 1 lower-priority pod(s) on node n1: default/young (priority 0)" in reason
    reasons = dict((subject, why) for subject, why, _ in lab.events.seen)
    assert reasons == {"Pod/default/train": "Preempting", "Pod/default/young": "Preempted"}
    said = {subject: message for subject, _, message in lab.events.seen}
    assert "priority 100" in said["Pod/default/train"] and "4 GiB" in said["Pod/default/train"]
    assert "for default/train (priority 100 > 0) on node n1" in said["Pod/default/young"]
    # A second try while the victim terminates evicts nothing more.
    again = lab.filter(pending("train", 6 * GIB, 100), ["n1", "n2"])
    assert "waiting for 1 evicted pod(s) on node n1" in again["FailedAndUnresolvableNodes"]["n1"]
    assert lab.cluster.evicted == ["young"]


def test_the_lowest_priority_goes_first_whatever_its_age(lab: Lab) -> None:
    lab.running("old", "n1", 10 * GIB, 0, "2026-12-01T08:00:00Z")
    lab.running("young", "n1", 4 * GIB, 10, "2026-12-04T08:00:00Z")
    lab.filter(pending("train", 6 * GIB, 100), ["n1"])
    assert lab.cluster.evicted == ["old"]


def test_the_node_is_held_for_the_preemptor_until_it_is_placed(lab: Lab) -> None:
    full(lab)
    lab.filter(pending("train", 6 * GIB, 100), ["n1", "n2"])
    lab.gone("young")
    # A pod of lower priority now fitting on n1 must leave the freed room to train.
    other = lab.filter(pending("notebook", 1 * GIB, 0), ["n1"])
    assert other["NodeNames"] in (None, [])
    assert "held for default/train (priority 100)" in other["FailedAndUnresolvableNodes"]["n1"]
    (chosen,) = lab.filter(pending("train", 6 * GIB, 100), ["n1", "n2"])["NodeNames"]
    assert chosen == "n1"
    lab.cluster.pods["train"] = copy.deepcopy(pending("train", 6 * GIB, 100))
    assert lab.bind("train", "n1") == {"Error": ""}
    # Placed: n1 is no longer held (it is full now, for its own reasons).
    after = lab.filter(pending("notebook", 1 * GIB, 0), ["n1"])["FailedAndUnresolvableNodes"]
    assert "held for" not in after["n1"]


@pytest.mark.parametrize(("priority", "policy"), [(0, None), (50, "Never"), (-5, None)])
def test_equal_priority_or_never_evicts_nothing(
    lab: Lab, priority: int, policy: str | None
) -> None:
    full(lab)
    lab.filter(pending("train", 6 * GIB, priority, policy), ["n1", "n2"])
    assert lab.cluster.evicted == [] and lab.cluster.dry_runs == []
    assert lab.events.seen == []


def test_a_pod_whose_budget_forbids_it_is_not_evicted_and_another_is_picked_at_once(
    lab: Lab,
) -> None:
    full(lab)
    lab.cluster.protected.add("young")
    answer = lab.filter(pending("train", 6 * GIB, 100), ["n1", "n2"])
    assert lab.cluster.evicted == ["old"]
    assert "default/old (priority 0)" in answer["FailedAndUnresolvableNodes"]["n1"]


def test_when_every_budget_forbids_the_pod_says_so(lab: Lab) -> None:
    full(lab)
    lab.cluster.protected |= {"young", "old", "team"}
    answer = lab.filter(pending("train", 6 * GIB, 100), ["n1", "n2"])
    assert lab.cluster.evicted == []
    reason = answer["FailedAndUnresolvableNodes"]["n1"]
    assert "PodDisruptionBudget forbids evicting default/" in reason, reason


def test_a_pod_that_would_not_fit_even_after_every_eviction_evicts_nothing(lab: Lab) -> None:
    full(lab)
    answer = lab.filter(pending("huge", 17 * GIB, 100), ["n1", "n2"])  # larger than any GPU
    assert lab.cluster.evicted == [] and lab.cluster.dry_runs == []
    assert "preemption:" in answer["FailedAndUnresolvableNodes"]["n1"]


def test_the_priority_and_start_of_a_recorded_pod_come_from_its_manifest(lab: Lab) -> None:
    lab.running("old", "n1", 10 * GIB, 7, "2026-12-01T08:00:00Z")
    held = lab.pods.held_by("uid-old")
    assert held is not None and (held.name, held.priority) == ("old", 7)
    assert held.started_s == datetime(2026, 12, 1, 8, tzinfo=UTC).timestamp()


def test_other_pods_are_filtered_while_an_eviction_is_in_flight(lab: Lab) -> None:
    """The decision lock is held across the Eviction calls; a filter for a pod that fits must
    not wait for it (it only reads the holds)."""
    full(lab)
    entered, release, finished = threading.Event(), threading.Event(), threading.Event()
    evict = lab.cluster.evict_pod

    def slow_evict(namespace: str, name: str, uid: str, *, dry_run: bool) -> None:
        entered.set()
        release.wait(10)
        evict(namespace, name, uid, dry_run=dry_run)
        finished.set()

    lab.cluster.evict_pod = slow_evict  # type: ignore[method-assign]
    preempting = threading.Thread(
        target=lab.filter, args=(pending("train", 6 * GIB, 100), ["n1", "n2"])
    )
    preempting.start()
    try:
        assert entered.wait(10)
        answer = lab.filter(pending("small", 1 * GIB, 0), ["n2"])
        # Answered while the eviction still waits (a filter stuck behind it would only
        # answer once the eviction had given up waiting and finished).
        assert answer["NodeNames"] == ["n2"] and not finished.is_set()
    finally:
        release.set()
        preempting.join(10)
    assert lab.cluster.evicted == ["young"]


def test_a_pod_with_no_lower_priority_pod_anywhere_is_told_so_and_evicts_nothing(
    lab: Lab,
) -> None:
    lab.running("peer", "n1", 15 * GIB, 50, "2026-12-01T08:00:00Z")
    lab.running("other", "n2", 15 * GIB, 70, "2026-12-01T08:00:00Z")
    answer = lab.filter(pending("train", 6 * GIB, 50), ["n1", "n2"])
    reasons = answer["FailedAndUnresolvableNodes"]
    assert all("preemption: no pod below priority 50 holds a slice" in r for r in reasons.values())
    assert lab.cluster.dry_runs == [] and lab.events.seen == []
