"""The ledger and state it cannot vouch for: unproven allocations, over-booked GPUs, blocks."""

from core_builders import container, gpu, ledger, node, request
from hypothesis import given
from hypothesis import strategies as st
from vslice_core.ledger import BLOCKED, Ledger
from vslice_core.model import (
    Allocation,
    ContainerAllocation,
    Gpu,
    GpuGrant,
    GpuUsage,
    NodeInventory,
)


def allocation(memory_mib: int, cores: int = 0, uuid: str = "G0") -> Allocation:
    grant = GpuGrant(uuid=uuid, index=0, memory_mib=memory_mib, cores=cores)
    return Allocation(node="node-1", containers=[ContainerAllocation(name="main", gpus=[grant])])


def memory(state: Ledger, uuid: str = "G0") -> int:
    return state.gpu_usage("node-1")[uuid].memory_mib


def test_an_unproven_allocation_counts_beside_the_proven_one_and_never_frees_room() -> None:
    state = ledger(node("node-1", gpu("G0")))
    state.add("p1", allocation(8192))
    state.add("p1", allocation(1), proven=False)  # edited down by someone without the key
    assert memory(state) == 8193
    assert state.allocation("p1") == allocation(8192)
    assert state.unproven("p1") == allocation(1)
    assert state.pod_uids() == ["p1"]


def test_an_unproven_value_equal_to_the_proven_one_is_counted_once() -> None:
    state = ledger(node("node-1", gpu("G0")))
    state.add("p1", allocation(8192))
    state.add("p1", allocation(8192), proven=False)
    assert memory(state) == 8192


def test_a_proven_value_replaces_the_unproven_one_and_release_frees_both() -> None:
    state = ledger(node("node-1", gpu("G0")))
    state.add("p1", allocation(8192))
    state.add("p1", allocation(4096), proven=False)
    state.add("p1", allocation(8192))  # the original, signed text is back
    assert memory(state) == 8192 and state.unproven("p1") is None
    state.add("p1", allocation(4096), proven=False)
    assert state.release("p1") == allocation(8192)
    assert memory(state) == 0 and state.pod_uids() == []


def test_counting_past_capacity_marks_the_gpu_overbooked_and_gives_it_nothing_more() -> None:
    state = ledger(node("node-1", gpu("G0", memory_mib=15360)))
    state.add("forged", allocation(15360, 100), proven=False)
    state.add("victim", allocation(8192, 0))
    assert state.overbooked() == {"node-1": {"G0": GpuUsage(slots=2, memory_mib=23552, cores=100)}}
    decision = state.decide(request(container(gpu=1, mem=1, cores=0)))
    assert decision.node is None
    state.release("forged")
    assert state.overbooked() == {}
    assert state.decide(request(container(gpu=1, mem=1024, cores=0))).node == "node-1"


def test_a_blocked_node_takes_nothing_until_every_block_is_lifted() -> None:
    state = ledger(node("node-1", gpu("G0")))
    state.block_node("node-1", "p1", "pod a/p1: unreadable")
    state.block_node("node-1", "p2", "pod a/p2: unreadable")
    ask = request(container(gpu=1, mem=1024))
    assert state.decide(ask).node is None
    assert state.decide(ask, explain=True).nodes["node-1"].reasons == {BLOCKED: 1}
    state.unblock("p1")
    assert state.decide(ask).node is None
    state.add("p3", allocation(1024))  # usage changes re-rank; the block must hold
    assert state.decide(ask).node is None
    state.unblock("p2")
    assert state.blocked_nodes() == {}
    assert state.decide(ask).node == "node-1"


def test_a_blocked_node_stays_blocked_when_its_inventory_comes_back() -> None:
    state = ledger(node("node-1", gpu("G0")))
    state.block_node("node-1", "p1", "unreadable")
    state.remove_node("node-1")
    gpus = [Gpu(uuid="G0", model="A100", memory_mib=81920, slots=10, index=0)]
    state.set_node(NodeInventory(name="node-1", gpus=gpus))
    assert state.decide(request(container(gpu=1, mem=1))).node is None
    state.unblock("p1")
    assert state.decide(request(container(gpu=1, mem=1))).node == "node-1"


@given(st.lists(st.tuples(st.integers(1, 40000), st.booleans()), min_size=1, max_size=8))
def test_no_sequence_of_unproven_values_books_less_than_the_proven_one(
    edits: list[tuple[int, bool]],
) -> None:
    state = ledger(node("node-1", gpu("G0")))
    state.add("p1", allocation(8192))
    for amount, proven in edits:
        if proven:
            state.add("p1", allocation(8192))
        else:
            state.add("p1", allocation(amount), proven=False)
        assert memory(state) >= 8192
