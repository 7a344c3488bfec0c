"""A full list fed in bulk (``NodeFeed.replace``, ``PodFeed.replace``, ``PodFeed.catch_up``)
leaves the ledger exactly as the same objects fed one watch event at a time: nothing awkward
in the list (a pod listed twice, an unreadable or unsigned value, a GPU counted past its
memory, a finished or unbound pod) is lost or counted twice."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from test_extender_http import GIB, allocation_on, node, pod
from vslice_control.extender.feed import NodeFeed, PodFeed
from vslice_control.extender.holds import Holds
from vslice_control.extender.trust import Proofs
from vslice_core.annotations import ALLOCATION
from vslice_core.ledger import Ledger
from vslice_core.model import ContainerRequest, PodRequest
from vslice_core.proof import PROOF, Key, sign
from vslice_core.ranking import IDLE_LEVELS, POLICIES

KEY = Key("k1", b"k" * 32)
NODES = [node("node-a", 16 * GIB, 16 * GIB), node("node-b", 16 * GIB), node("node-c", 8 * GIB)]


def bound(name: str, on: str, value: str, *, signed: bool = True, phase: str = "Running") -> Any:
    annotations = {ALLOCATION: value}
    if signed:
        annotations[PROOF] = sign(KEY, f"uid-{name}", on, value)
    item = pod(name, annotations, node=on, gpu="1")
    item["status"]["phase"] = phase
    return item


PODS = [
    bound("p0", "node-a", allocation_on("node-a", 0, 12 * GIB, 30)),
    bound("p1", "node-a", allocation_on("node-a", 0, 8 * GIB, 30)),  # past the GPU's memory
    bound("p2", "node-b", allocation_on("node-b", 0, 4 * GIB)),
    bound("p2", "node-b", allocation_on("node-b", 0, 2 * GIB)),  # the same pod listed again
    bound("p3", "node-c", "{not an allocation"),  # unreadable: the node is blocked
    bound("p4", "node-b", allocation_on("node-b", 0, 1 * GIB), signed=False),  # unproven
    bound("p5", "node-a", allocation_on("node-a", 1, 4 * GIB), phase="Succeeded"),
    pod("p6", {ALLOCATION: allocation_on("node-a", 1, 4 * GIB)}),  # not bound: books nothing
]


def snapshot(ledger: Ledger) -> dict[str, Any]:
    probe = PodRequest(
        name="probe",
        uid="probe",
        containers=[ContainerRequest(name="main", gpus=1, memory_mib=1024, cores=10)],
    )
    uids = ledger.pod_uids()
    return {
        "usage": {name: ledger.gpu_usage(name) for name in ledger.node_names()},
        "overbooked": ledger.overbooked(),
        "blocked": ledger.blocked_nodes(),
        "pods": {uid: (ledger.allocation(uid), ledger.unproven(uid)) for uid in uids},
        "ranked": {(p, i): ledger.ranked(p, i) for p in POLICIES for i in range(IDLE_LEVELS + 1)},
        "decision": ledger.decide(probe, explain=True).model_dump(),
    }


def loaded(feed: Callable[[NodeFeed, PodFeed], None]) -> dict[str, Any]:
    ledger = Ledger()
    feed(NodeFeed(ledger), PodFeed(ledger, Holds(), Proofs({KEY.id: KEY})))
    return snapshot(ledger)


def event_by_event(nodes: NodeFeed, pods: PodFeed) -> None:
    for item in NODES:
        nodes.apply("ADDED", item)
    for item in PODS:
        pods.apply("ADDED", item)


def listed(nodes: NodeFeed, pods: PodFeed) -> None:
    nodes.replace(NODES)
    pods.replace(PODS)


def caught_up(nodes: NodeFeed, pods: PodFeed) -> None:
    nodes.replace(NODES)
    pods.catch_up(PODS)


def test_a_listed_and_a_caught_up_ledger_equal_one_fed_event_by_event() -> None:
    expected = loaded(event_by_event)
    assert loaded(listed) == expected
    assert loaded(caught_up) == expected


def test_the_bulk_load_keeps_every_awkward_pod_as_the_events_do() -> None:
    state = loaded(listed)
    assert state["usage"]["node-a"]["GPU-node-a-0"].memory_mib == 20 * GIB  # over-booked
    assert set(state["overbooked"]) == {"node-a"}
    assert state["usage"]["node-a"]["GPU-node-a-1"].memory_mib == 0  # finished, unbound
    assert state["usage"]["node-b"]["GPU-node-b-0"].memory_mib == 3 * GIB  # 2 GiB + unproven
    assert set(state["blocked"]) == {"node-c"}
    assert state["ranked"][("binpack", 0)] == ["node-a", "node-b"]
    chosen = state["decision"]["allocation"]["containers"][0]["gpus"][0]["uuid"]
    assert chosen == "GPU-node-a-1"  # the over-booked GPU's neighbour, not the GPU itself
