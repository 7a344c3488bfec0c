import threading

import pytest
from core_builders import container, gpu, ledger, node, request, used
from vslice_core.errors import InvalidRequest, NoFit
from vslice_core.ledger import Ledger
from vslice_core.model import Allocation, ContainerAllocation, GpuGrant, GpuUsage, NodeInventory


def allocation(node_name: str, *grants: tuple[str, int, int], init: bool = False) -> Allocation:
    gpus = [GpuGrant(uuid=u, index=0, memory_mib=m, cores=c) for u, m, c in grants]
    return Allocation(
        node=node_name, containers=[ContainerAllocation(name="main", init=init, gpus=gpus)]
    )


def usage(state: Ledger, node_name: str = "node-1", uuid: str = "G0") -> tuple[int, int, int]:
    taken = state.gpu_usage(node_name)[uuid]
    return (taken.slots, taken.memory_mib, taken.cores)


def test_adding_the_same_pod_twice_counts_it_once() -> None:
    state = ledger(node("node-1", gpu("G0")))
    state.add("p1", allocation("node-1", ("G0", 1000, 10)), "team")
    state.add("p1", allocation("node-1", ("G0", 1000, 10)), "team")
    assert usage(state) == (1, 1000, 10)
    assert state.namespace_usage("team").model_dump() == {
        "memory_mib": 1000,
        "cores": 10,
        "gpus": 1,
    }


def test_a_different_allocation_for_the_same_pod_replaces_the_old_one() -> None:
    state = ledger(node("node-1", gpu("G0")), node("node-2", gpu("H0")))
    state.add("p1", allocation("node-1", ("G0", 1000, 10)))
    state.add("p1", allocation("node-2", ("H0", 500, 5)))
    assert usage(state) == (0, 0, 0)
    assert usage(state, "node-2", "H0") == (1, 500, 5)
    assert state.pod_uids() == ["p1"]


def test_released_allocation_restores_the_ledger() -> None:
    state = ledger(node("node-1", gpu("G0", used=used(slots=1, memory_mib=7, cores=3))))
    before = state.gpu_usage("node-1")
    state.add("p1", allocation("node-1", ("G0", 1000, 10)))
    assert state.release("p1") == allocation("node-1", ("G0", 1000, 10))
    assert state.gpu_usage("node-1") == before
    assert state.namespace_usage("default").model_dump() == {"memory_mib": 0, "cores": 0, "gpus": 0}
    assert state.release("p1") is None


def test_recording_and_releasing_a_pod_update_what_the_cheap_node_checks_read() -> None:
    state = ledger(node("node-1", gpu("G0", memory_mib=1000), gpu("G1", memory_mib=1000)))
    two = request(container(gpu=2, mem=500))
    idle = (1000, 100, 100, True)  # free MiB, largest free percent, free cores, idle
    assert state._nodes["node-1"].free == (idle, idle)
    state.add("p1", allocation("node-1", ("G1", 600, 30)))
    assert state._nodes["node-1"].free == (idle, (400, 40, 70, False))
    assert not state.decide(two).fits
    state.release("p1")
    assert state._nodes["node-1"].free == (idle, idle)
    assert state.decide(two).fits


def test_allocations_on_a_vanished_node_come_back_with_the_node() -> None:
    inventory = NodeInventory.model_validate(
        {"name": "node-1", "gpus": [{"uuid": "G0", "model": "m", "memory_mib": 100, "slots": 4}]}
    )
    state = Ledger()
    state.set_node(inventory)
    state.add("p1", allocation("node-1", ("G0", 60, 10)))
    state.remove_node("node-1")
    assert state.node_names() == [] and state.allocation("p1") is not None
    assert state.namespace_usage("default").memory_mib == 60
    state.add("p2", allocation("node-1", ("G0", 30, 0)))
    state.set_node(inventory)
    assert usage(state) == (2, 90, 10)
    assert not state.decide(request(container(mem=20))).fits


def test_replacing_an_inventory_keeps_the_usage_recorded_on_it() -> None:
    state = ledger(node("node-1", gpu("G0")))
    state.add("p1", allocation("node-1", ("G0", 1000, 10)))
    unhealthy = NodeInventory.model_validate(
        {
            "name": "node-1",
            "gpus": [
                {"uuid": "G0", "model": "m", "memory_mib": 81920, "slots": 10, "healthy": False}
            ],
        }
    )
    state.set_node(unhealthy)
    assert usage(state) == (1, 1000, 10)
    assert state.decide(request(container(mem=1)), explain=True).nodes["node-1"].reasons == {
        "unhealthy": 1
    }


def test_try_commit_rechecks_capacity_and_names_the_reason() -> None:
    state = ledger(node("node-1", gpu("G0", memory_mib=1000)))
    first = state.decide(request(container(mem=600)))
    second = state.decide(request(container(mem=600)))
    assert first.allocation is not None and second.allocation is not None
    state.try_commit("p1", first.allocation)
    with pytest.raises(NoFit) as caught:
        state.try_commit("p2", second.allocation)
    assert caught.value.reasons == {"node-1": {"insufficient_memory": 1}}
    assert usage(state) == (1, 600, 0)
    state.try_commit("p1", first.allocation)
    assert usage(state) == (1, 600, 0)


@pytest.mark.parametrize(
    ("grant", "base_cores", "expected"),
    [
        (("G9", 1, 0), 0, "too_few_gpus"),
        (("G0", 1, 100), 0, "exclusive_conflict"),
        (("G0", 1, 95), 10, "insufficient_cores"),
        (("G0", 1, 0), 100, "cores_exhausted"),
        (("G0", 2000, 0), 0, "insufficient_memory"),
    ],
)
def test_try_commit_rejects_what_no_longer_fits(
    grant: tuple[str, int, int], base_cores: int, expected: str
) -> None:
    base = used(slots=1, memory_mib=10, cores=base_cores)
    state = ledger(node("node-1", gpu("G0", memory_mib=1000, used=base)))
    with pytest.raises(NoFit) as caught:
        state.try_commit("p", allocation("node-1", grant))
    assert caught.value.reasons == {"node-1": {expected: 1}}
    with pytest.raises(NoFit, match="too_few_gpus"):
        state.try_commit("p", allocation("node-9", grant))


def test_a_failed_recommit_keeps_the_previous_allocation() -> None:
    state = ledger(node("node-1", gpu("G0", memory_mib=1000)))
    state.try_commit("p1", allocation("node-1", ("G0", 500, 0)))
    with pytest.raises(NoFit):
        state.try_commit("p1", allocation("node-1", ("G0", 5000, 0)))
    assert state.allocation("p1") == allocation("node-1", ("G0", 500, 0))
    assert usage(state) == (1, 500, 0)


def test_reserve_places_and_records_in_one_step() -> None:
    state = ledger(node("node-1", gpu("G0", memory_mib=1000)), node("node-2", gpu("H0")))
    wanted = request(container(mem=600), name="a")
    reserved = state.reserve(wanted, "node-1")
    assert reserved.node == "node-1" and state.allocation("uid-a") == reserved
    with pytest.raises(NoFit) as caught:
        state.reserve(request(container(mem=600), name="b"), "node-1")
    assert caught.value.reasons == {"node-1": {"insufficient_memory": 1}}
    with pytest.raises(NoFit):
        state.reserve(request(container(mem=1), name="c"), "node-404")


def test_concurrent_commits_never_over_allocate() -> None:
    state = ledger(
        node(
            "node-1",
            gpu("G0", memory_mib=10_000, slots=100),
            gpu("G1", memory_mib=10_000, slots=100),
        )
    )
    accepted: list[str] = []
    start = threading.Barrier(8)

    def bind(worker: int) -> None:
        start.wait()
        for attempt in range(20):
            uid = f"w{worker}-{attempt}"
            decision = state.decide(request(container(mem=700), name=uid))
            if decision.allocation is None:
                continue
            try:
                state.try_commit(uid, decision.allocation)
                accepted.append(uid)
            except NoFit:
                pass

    threads = [threading.Thread(target=bind, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    totals = state.gpu_usage("node-1")
    assert all(u.memory_mib <= 10_000 for u in totals.values())
    assert len(accepted) == 28  # 14 slices of 700 MiB per 10,000 MiB GPU
    assert sum(u.memory_mib for u in totals.values()) == 700 * len(accepted)


def test_concurrent_reserves_on_one_node_never_over_allocate() -> None:
    state = ledger(node("node-1", gpu("G0", memory_mib=1000, slots=50)))
    won: list[str] = []

    def bind(uid: str) -> None:
        try:
            state.reserve(request(container(mem=300), name=uid), "node-1")
            won.append(uid)
        except NoFit:
            pass

    threads = [threading.Thread(target=bind, args=(f"p{n}",)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 3
    assert usage(state) == (3, 900, 0)


def test_base_usage_and_the_gpu_view_are_reported_per_gpu() -> None:
    state = ledger(node("node-1", gpu("G0", used=used(slots=2, memory_mib=5, cores=1)), gpu("G1")))
    assert state.gpu_usage("node-1") == {
        "G0": GpuUsage(slots=2, memory_mib=5, cores=1),
        "G1": GpuUsage(),
    }
    assert state.gpu_usage("node-404") == {}


def test_reserving_needs_a_pod_uid() -> None:
    state = ledger(node("node-1", gpu("G0")))
    nameless = request(container(mem=1)).model_copy(update={"uid": ""})
    with pytest.raises(InvalidRequest, match=r"^metadata.uid must be set"):
        state.reserve(nameless, "node-1")
    assert state.pod_uids() == []


def test_reserving_again_replaces_the_pods_own_earlier_slices() -> None:
    state = ledger(node("node-1", gpu("G0", memory_mib=1000)))
    wanted = request(container(mem=700), name="a")
    first = state.reserve(wanted, "node-1")
    assert state.reserve(wanted, "node-1") == first
    assert usage(state) == (1, 700, 0)
    with pytest.raises(NoFit):
        state.reserve(request(container(mem=2000), name="a"), "node-1")
    assert state.allocation("uid-a") == first and usage(state) == (1, 700, 0)


def test_concurrent_adds_releases_and_decisions_leave_a_consistent_ledger() -> None:
    nodes = [node(f"node-{n}", *(gpu(f"N{n}G{i}", slots=4) for i in range(4))) for n in range(6)]
    state = ledger(*nodes)
    errors: list[BaseException] = []

    def churn(worker: int) -> None:
        try:
            for attempt in range(60):
                uid = f"w{worker}-{attempt % 7}"
                decision = state.decide(request(container(mem=1000 + attempt, cores=5), name=uid))
                if decision.allocation is not None and attempt % 3:
                    state.add(uid, decision.allocation)
                else:
                    state.release(uid)
                state.decide(request(container(gpu=2, mem=10)), explain=attempt % 5 == 0)
        except BaseException as error:  # surfaced in the main thread below
            errors.append(error)

    threads = [threading.Thread(target=churn, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    rebuilt = ledger(*nodes)
    for uid in state.pod_uids():
        held = state.allocation(uid)
        assert held is not None
        rebuilt.add(uid, held)
    for n in range(6):
        assert state.gpu_usage(f"node-{n}") == rebuilt.gpu_usage(f"node-{n}")
    assert state.namespace_usage("default") == rebuilt.namespace_usage("default")
