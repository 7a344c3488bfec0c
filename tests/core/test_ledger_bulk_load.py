"""A bulk load (``Ledger.bulk``) leaves exactly the state that the same changes one by one leave.

The changes are the ones the extender's feeds make for a full list of nodes and pods: nodes
set and removed, proven and unproven allocations (duplicates and edits of one pod, charges
past a GPU's capacity, GPUs and nodes the ledger does not know), blocks for values that
cannot be read, releases of finished pods.
"""

from __future__ import annotations

from typing import Any

from core_builders import container, request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vslice_core.ledger import Ledger
from vslice_core.model import (
    Allocation,
    ContainerAllocation,
    Gpu,
    GpuGrant,
    NodeInventory,
    PodRequest,
)
from vslice_core.ranking import IDLE_LEVELS, POLICIES, NodeRanking

NODES = ("node-a", "node-b", "node-c", "node-d")
UIDS = ("p0", "p1", "p2", "p3", "p4", "p5")  # few, so the same pod comes up again
NAMESPACES = ("default", "team-a")
PROBES: tuple[PodRequest, ...] = (
    request(container(mem=1024, cores=10)),
    request(container(mem=1024), annotations={"vslice.io/node-policy": "spread"}),
    request(container(gpu=1)),  # a whole GPU: walks the list of nodes with an idle GPU
    request(container(gpu=2, mem=2048)),
)

Op = tuple[Any, ...]


def inventory(name: str, gpus: int, memory_mib: int = 16384) -> NodeInventory:
    return NodeInventory(
        name=name,
        gpus=[
            Gpu(uuid=f"{name}/G{i}", model="A100", memory_mib=memory_mib, slots=3, index=i)
            for i in range(gpus)
        ],
    )


def allocation(node: str, grants: list[tuple[int, int, int]], init: bool = False) -> Allocation:
    """Grants as (GPU index, MiB, cores); index 7 is a GPU no node of the tests has."""
    return Allocation(
        node=node,
        containers=[
            ContainerAllocation(
                name="main",
                init=init,
                gpus=[
                    GpuGrant(uuid=f"{node}/G{index}", index=index, memory_mib=mib, cores=cores)
                    for index, mib, cores in grants
                ],
            )
        ],
    )


nodes = st.sampled_from(NODES)
grant = st.tuples(
    st.sampled_from([0, 1, 2, 7]), st.integers(0, 12288), st.sampled_from([0, 30, 100])
)
allocations = st.builds(
    allocation,
    nodes,
    st.lists(grant, min_size=1, max_size=3, unique_by=lambda g: g[0]),
    st.booleans(),
)
ops: st.SearchStrategy[Op] = st.one_of(
    st.tuples(st.just("set_node"), nodes, st.integers(1, 3), st.sampled_from([8192, 16384])),
    st.tuples(st.just("remove_node"), nodes),
    st.tuples(
        st.just("add"),
        st.sampled_from(UIDS),
        allocations,
        st.sampled_from(NAMESPACES),
        st.booleans(),
    ),
    st.tuples(st.just("unreadable"), st.sampled_from(UIDS), nodes),
    st.tuples(st.just("finished"), st.sampled_from(UIDS)),
)


def apply(state: Ledger, op: Op) -> None:
    """One change, made the way the feeds make it."""
    kind = op[0]
    if kind == "set_node":
        state.set_node(inventory(op[1], op[2], op[3]))
    elif kind == "remove_node":
        state.remove_node(op[1])
    elif kind == "add":  # a readable value: its block (if any) goes, then it is recorded
        _, uid, value, namespace, proven = op
        state.unblock(uid)
        state.add(uid, value, namespace, proven=proven)
    elif kind == "unreadable":  # which GPUs it holds is unknown: the node is blocked
        state.block_node(op[2], op[1], "cannot be read")
    else:
        state.release(op[1])
        state.unblock(op[1])


def snapshot(state: Ledger) -> dict[str, Any]:
    """Everything a decision or a report reads from the ledger."""
    names = state.node_names()
    uids = state.pod_uids()
    return {
        "nodes": names,
        "usage": {name: state.gpu_usage(name) for name in names},
        "overbooked": state.overbooked(),
        "blocked": state.blocked_nodes(),
        "proven": {uid: state.allocation(uid) for uid in uids},
        "unproven": {uid: state.unproven(uid) for uid in uids},
        "namespaces": {ns: state.namespace_usage(ns) for ns in NAMESPACES},
        "ranked": {
            (policy, idle): state.ranked(policy, idle)
            for policy in POLICIES
            for idle in range(IDLE_LEVELS + 1)
        },
        "decisions": [state.decide(probe).model_dump() for probe in PROBES],
        "explained": [state.decide(probe, explain=True).model_dump() for probe in PROBES],
    }


def one_by_one(changes: list[Op], look_at: int) -> tuple[dict[str, Any], dict[str, Any]]:
    state = Ledger()
    for op in changes[:look_at]:
        apply(state, op)
    middle = snapshot(state)
    for op in changes[look_at:]:
        apply(state, op)
    return middle, snapshot(state)


def in_bulk(changes: list[Op], look_at: int) -> tuple[dict[str, Any], dict[str, Any]]:
    state = Ledger()
    with state.bulk():
        for op in changes[:look_at]:
            apply(state, op)
        middle = snapshot(state)  # another thread's decision in the middle of the load
        for op in changes[look_at:]:
            apply(state, op)
    return middle, snapshot(state)


@st.composite
def loads(draw: st.DrawFn) -> tuple[list[Op], int]:
    first = [("set_node", name, draw(st.integers(1, 3)), 16384) for name in NODES[:3]]
    changes = first + draw(st.lists(ops, max_size=40))
    return changes, draw(st.integers(0, len(changes)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(loads())
def test_a_bulk_load_leaves_the_state_the_changes_one_by_one_leave(
    load: tuple[list[Op], int],
) -> None:
    changes, look_at = load
    assert in_bulk(changes, look_at) == one_by_one(changes, look_at)


def feed_like_list() -> list[Op]:
    """A first list with every awkward case once, in an order that matters."""
    return [
        ("set_node", "node-a", 2, 16384),
        ("set_node", "node-b", 2, 16384),
        ("set_node", "node-c", 1, 16384),
        ("add", "p0", allocation("node-a", [(0, 12288, 30)]), "default", True),
        ("add", "p1", allocation("node-a", [(0, 8192, 30)]), "team-a", True),  # over-booked
        ("add", "p2", allocation("node-b", [(1, 4096, 0)]), "default", True),
        ("add", "p2", allocation("node-b", [(0, 2048, 0)]), "default", True),  # listed twice
        ("add", "p2", allocation("node-b", [(0, 1024, 0)]), "default", False),  # edited down
        ("unreadable", "p3", "node-c"),
        ("add", "p4", allocation("node-d", [(0, 4096, 30)]), "team-a", True),  # node not there
        ("add", "p5", allocation("node-c", [(7, 4096, 30)]), "default", True),  # GPU not there
        ("set_node", "node-d", 1, 8192),
        ("finished", "p0"),
    ]


def test_the_awkward_cases_are_neither_lost_nor_counted_twice() -> None:
    changes = feed_like_list()
    middle, final = in_bulk(changes, 6)
    assert (middle, final) == one_by_one(changes, 6)
    assert final["blocked"] == {"node-c": {"p3": "cannot be read"}}
    assert final["usage"]["node-a"]["node-a/G0"].memory_mib == 8192  # p0 finished, p1 stays
    assert final["usage"]["node-b"]["node-b/G0"].memory_mib == 2048 + 1024
    assert final["usage"]["node-b"]["node-b/G1"].memory_mib == 0  # p2's first value replaced
    assert final["usage"]["node-d"]["node-d/G0"].memory_mib == 4096  # applied when it came
    assert final["namespaces"]["team-a"].memory_mib == 8192 + 4096
    assert middle["overbooked"] == {"node-a": {"node-a/G0": middle["usage"]["node-a"]["node-a/G0"]}}
    assert "node-c" not in final["ranked"][("binpack", 0)]


def test_the_comparison_tells_a_different_order_of_the_same_changes_apart() -> None:
    # Were the bulk load to apply a pod's values in another order (or skip one), the
    # comparison above must see it: reversed, p2's last value and the node order differ.
    changes = feed_like_list()
    assert in_bulk(changes, 0)[1] != one_by_one(changes[::-1], 0)[1]
    assert in_bulk(changes, 0)[1] != one_by_one(changes[:-1], 0)[1]


def expected_order(entries: dict[str, tuple[float, int]], policy: str, idle: int) -> list[str]:
    """The ranking's contract, computed independently of its lists."""
    sign = -1 if policy == "binpack" else 1
    wanted = [name for name, (_, free) in entries.items() if free >= idle]
    return sorted(wanted, key=lambda name: (sign * entries[name][0], name))


# Thirty nodes ranked first, then changes to a few or many of them: a decision in a bulk load
# brings the lists up to date by moving the few, or by sorting again when many changed.
FIRST = {f"n{i:02d}": (i % 4 / 4, i % (IDLE_LEVELS + 2)) for i in range(30)}
CHANGED = ["n00", "n03", "n07", "n12", "n29", "x", "y"]  # few, so one node changes again
rank_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"),
            st.sampled_from(CHANGED),
            st.sampled_from([0.0, 0.25, 0.5, 1.0]),
            st.integers(0, IDLE_LEVELS + 2),
        ),
        st.tuples(st.just("remove"), st.sampled_from(CHANGED)),
        st.tuples(st.just("defer")),
        st.tuples(st.just("resume")),
        st.tuples(st.just("walk")),
    ),
    max_size=80,
)


def walks_as_expected(ranking: NodeRanking, entries: dict[str, tuple[float, int]]) -> None:
    for policy in POLICIES:
        for idle in range(IDLE_LEVELS + 1):
            assert list(ranking.walk(policy, idle=idle)) == expected_order(entries, policy, idle)


@settings(max_examples=400, deadline=None)
@given(rank_ops)
def test_a_deferred_ranking_walks_the_same_order_as_one_kept_sorted(changes: list[Op]) -> None:
    ranking, entries = NodeRanking(), dict(FIRST)
    for name, (load, idle) in FIRST.items():
        ranking.put(name, load, idle)
    for op in changes:
        if op[0] == "put":
            ranking.put(op[1], op[2], op[3])
            entries[op[1]] = (op[2], op[3])
        elif op[0] == "remove":
            ranking.remove(op[1])
            entries.pop(op[1], None)
        elif op[0] == "defer":
            ranking.defer()
        elif op[0] == "resume":
            ranking.resume()
        else:
            walks_as_expected(ranking, entries)
    for _ in changes:
        ranking.resume()
    # Every defer ended: changes are moved into the lists one by one again, which is only
    # right if the lists were left in order.
    for name in ("n03", "n17", "z"):
        ranking.put(name, 0.75, 2)
        entries[name] = (0.75, 2)
    ranking.remove("n05")
    entries.pop("n05", None)
    walks_as_expected(ranking, entries)
