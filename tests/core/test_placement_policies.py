from typing import Any

from core_builders import T4, container, gpu, ledger, node, pod, request, used
from vslice_core.ledger import charges
from vslice_core.model import Decision
from vslice_core.requests import pod_request


def uuids(decision: Decision, position: int = 0) -> list[str]:
    assert decision.allocation is not None
    return [g.uuid for g in decision.allocation.containers[position].gpus]


def half(memory: int = 40960) -> dict[str, int]:
    return used(slots=1, memory_mib=memory)


def two_gpu_node(name: str = "node-1", **extra: Any) -> dict[str, Any]:
    return node(name, gpu("G0", used=half(), **extra), gpu("G1", **extra))


def test_gpu_spread_takes_the_least_used_gpu() -> None:
    decision = ledger(two_gpu_node()).decide(request(container(mem=1000)))
    assert uuids(decision) == ["G1"]


def test_gpu_binpack_takes_the_most_used_gpu_that_fits() -> None:
    state = ledger(two_gpu_node())
    decision = state.decide(
        request(container(mem=1000), annotations={"vslice.io/gpu-policy": "binpack"})
    )
    assert uuids(decision) == ["G0"]
    too_big = request(container(mem=50000), annotations={"vslice.io/gpu-policy": "binpack"})
    assert uuids(state.decide(too_big)) == ["G1"]


def test_gpu_ties_go_to_the_lower_index() -> None:
    state = ledger(node("node-1", gpu("B", index=1), gpu("A", index=0), gpu("C", index=2)))
    assert uuids(state.decide(request(container(mem=1)))) == ["A"]
    binpack = request(container(mem=1), annotations={"vslice.io/gpu-policy": "binpack"})
    assert uuids(state.decide(binpack)) == ["A"]


def test_node_binpack_prefers_the_fuller_node_and_spread_the_emptier() -> None:
    state = ledger(node("node-a", gpu("A0")), node("node-b", gpu("B0", used=half())))
    assert state.decide(request(container(mem=1000))).node == "node-b"
    spread = request(container(mem=1000), annotations={"vslice.io/node-policy": "spread"})
    assert state.decide(spread).node == "node-a"
    scores = state.decide(spread, explain=True).nodes
    assert (scores["node-a"].score, scores["node-b"].score) == (10.0, 5.0)
    scores = state.decide(request(container(mem=1000)), explain=True).nodes
    assert (scores["node-a"].score, scores["node-b"].score) == (0.0, 5.0)


def test_node_ties_go_to_the_lexically_smaller_name() -> None:
    state = ledger(node("node-b", gpu("B0")), node("node-a", gpu("A0")), node("node-c", gpu("C0")))
    assert state.decide(request(container(mem=1))).node == "node-a"
    spread = request(container(mem=1), annotations={"vslice.io/node-policy": "spread"})
    assert state.decide(spread).node == "node-a"
    assert state.decide(request(container(mem=1)), ["node-c", "node-b"]).node == "node-b"


def test_mutex_only_takes_gpus_without_any_slice() -> None:
    state = ledger(
        node("node-1", gpu("G0", used=used(slots=1)), gpu("G1", used=half(10)), gpu("G2"))
    )
    decision = state.decide(
        request(container(mem=10), annotations={"vslice.io/gpu-policy": "mutex"})
    )
    assert uuids(decision) == ["G2"]


def test_topology_takes_the_best_linked_set_for_several_gpus() -> None:
    links = {"G0,G1": 10, "G1,G2": 100, "G2,G3": 100, "G1,G3": 50, "G0,G3": 10}
    state = ledger(node("node-1", *(gpu(f"G{i}") for i in range(4)), topology=links))
    annotations = {"vslice.io/gpu-policy": "topology"}
    assert uuids(state.decide(request(container(gpu=2, mem=1), annotations=annotations))) == [
        "G1",
        "G2",
    ]
    assert uuids(state.decide(request(container(gpu=3, mem=1), annotations=annotations))) == [
        "G1",
        "G2",
        "G3",
    ]


def test_topology_keeps_well_linked_gpus_free_for_a_single_gpu() -> None:
    links = {"G0,G1": 100, "G1,G2": 100, "G0,G2": 100, "G2,G3": 5}
    state = ledger(node("node-1", *(gpu(f"G{i}") for i in range(4)), topology=links))
    single = request(container(mem=1), annotations={"vslice.io/gpu-policy": "topology"})
    assert uuids(state.decide(single)) == ["G3"]


def test_topology_ties_go_to_the_lowest_indices() -> None:
    state = ledger(node("node-1", *(gpu(f"G{i}") for i in range(4))))
    pair = request(container(gpu=2, mem=1), annotations={"vslice.io/gpu-policy": "topology"})
    assert uuids(state.decide(pair)) == ["G0", "G1"]


def test_numa_bind_keeps_a_container_on_one_numa_node() -> None:
    gpus = [
        gpu("G0", numa=0),
        gpu("G1", numa=1, used=half()),
        gpu("G2", numa=1),
        gpu("G3", numa=0, used=used(slots=10)),
    ]
    state = ledger(node("node-1", *gpus))
    bound = request(container(gpu=2, mem=1000), annotations={"vslice.io/numa-bind": "true"})
    assert uuids(state.decide(bound)) == ["G1", "G2"]
    assert uuids(state.decide(request(container(gpu=2, mem=1000)))) == ["G0", "G2"]


def test_several_gpus_per_container_are_distinct() -> None:
    state = ledger(node("node-1", gpu("G0"), gpu("G1"), gpu("G2")))
    decision = state.decide(request(container(gpu=3, mem=100, cores=10)))
    assert uuids(decision) == ["G0", "G1", "G2"]
    assert state.decide(request(container(gpu=4, mem=1))).node is None


def test_several_containers_may_share_a_gpu_and_each_takes_a_slot() -> None:
    state = ledger(node("node-1", gpu("G0", slots=2)))
    manifest = pod(container("a", mem=1000, cores=40), container("b", mem=2000, cores=40))
    decision = state.decide(pod_request(manifest))
    assert decision.allocation is not None
    assert charges(decision.allocation)["G0"].model_dump() == {
        "slots": 2,
        "memory_mib": 3000,
        "cores": 80,
    }
    three = pod(container("a", mem=1), container("b", mem=1), container("c", mem=1))
    assert state.decide(pod_request(three), explain=True).nodes["node-1"].reasons == {
        "slots_exhausted": 1
    }


def test_memory_percent_takes_the_floor_of_each_chosen_gpu() -> None:
    state = ledger(node("node-1", gpu("G0", memory_mib=15109, model=T4)))
    decision = state.decide(request(container(pct=33, cores=10)))
    assert decision.allocation is not None
    assert decision.allocation.containers[0].gpus[0].memory_mib == 15109 * 33 // 100


def test_a_whole_gpu_request_needs_an_idle_gpu_and_blocks_the_gpu_for_others() -> None:
    state = ledger(node("node-1", gpu("G0", used=used(slots=1, memory_mib=1)), gpu("G1")))
    whole = request(container(gpu=1))
    decision = state.decide(whole)
    assert uuids(decision) == ["G1"]
    assert decision.allocation is not None
    assert decision.allocation.containers[0].gpus[0].model_dump() == {
        "uuid": "G1",
        "index": 1,
        "memory_mib": 81920,
        "cores": 100,
    }
    state.try_commit("whole", decision.allocation)
    small = state.decide(
        request(container(mem=1, cores=0), annotations={"vslice.io/gpu-uuid": "G1"}), explain=True
    )
    assert small.nodes["node-1"].reasons == {"uuid_mismatch": 1, "insufficient_memory": 1}


def test_init_containers_are_charged_their_peak_not_added_to_the_app_containers() -> None:
    state = ledger(node("node-1", gpu("G0", memory_mib=10000, slots=1)))
    manifest = pod(
        container("main", mem=6000, cores=20), init=(container("setup", mem=8000, cores=50),)
    )
    decision = state.decide(pod_request(manifest))
    assert decision.allocation is not None
    assert [(c.name, c.init, [g.uuid for g in c.gpus]) for c in decision.allocation.containers] == [
        ("setup", True, ["G0"]),
        ("main", False, ["G0"]),
    ]
    assert charges(decision.allocation)["G0"].model_dump() == {
        "slots": 1,
        "memory_mib": 8000,
        "cores": 50,
    }


def test_init_containers_prefer_the_gpus_of_their_pod() -> None:
    state = ledger(node("node-1", gpu("G0"), gpu("G1")))
    manifest = pod(container("main", mem=6000), init=(container("setup", mem=1000),))
    decision = state.decide(pod_request(manifest))
    assert uuids(decision, 0) == uuids(decision, 1) == ["G0"]


def test_quota_counts_memory_cores_and_gpus_of_the_namespace() -> None:
    quotas = {
        "team": {
            "limits": {"memory_mib": 50000, "cores": 100, "gpus": 2},
            "used": {"memory_mib": 1000},
        }
    }
    state = ledger(node("node-1", gpu("G0"), gpu("G1"), gpu("G2")), quotas=quotas)
    first = state.decide(request(container(mem=40000, cores=30), namespace="team"))
    assert first.allocation is not None
    state.try_commit("first", first.allocation, "team")
    assert state.namespace_usage("team").model_dump() == {
        "memory_mib": 40000,
        "cores": 30,
        "gpus": 1,
    }
    over_memory = state.decide(request(container(mem=9001, cores=0), namespace="team"))
    assert over_memory.nodes == {"node-1": over_memory.nodes["node-1"]}
    assert over_memory.nodes["node-1"].reasons == {"quota_exceeded": 1}
    assert state.decide(request(container(mem=9000, cores=70), namespace="team")).fits
    assert not state.decide(request(container(mem=10, cores=71), namespace="team")).fits
    assert not state.decide(request(container(gpu=2, mem=10, cores=0), namespace="team")).fits
    assert state.decide(request(container(gpu=2, mem=10, cores=0), namespace="other")).fits


def test_percent_requests_meet_the_quota_on_small_gpus_only() -> None:
    quotas = {"team": {"limits": {"memory_mib": 20000}}}
    state = ledger(
        node("big", gpu("B0")), node("small", gpu("S0", model=T4, memory_mib=16000)), quotas=quotas
    )
    decision = state.decide(request(container(pct=50), namespace="team"), explain=True)
    assert decision.node == "small"
    assert decision.nodes["big"].reasons == {"quota_exceeded": 1}


def test_only_the_candidates_are_considered_and_reported() -> None:
    state = ledger(node("node-a", gpu("A0")), node("node-b", gpu("B0")), node("node-c", gpu("C0")))
    decision = state.decide(request(container(mem=1)), ["node-c", "node-x"], explain=True)
    assert decision.node == "node-c"
    assert set(decision.nodes) == {"node-c", "node-x"}
    assert decision.nodes["node-x"].reasons == {"too_few_gpus": 1}


def test_the_fast_path_reports_the_chosen_node_and_explains_every_node_when_nothing_fits() -> None:
    state = ledger(node("node-a", gpu("A0")), node("node-b", gpu("B0", used=half())))
    fits = state.decide(request(container(mem=1000)))
    assert (fits.node, list(fits.nodes)) == ("node-b", ["node-b"])
    none = state.decide(request(container(mem=90000)))
    assert none.node is None and none.allocation is None
    assert {name: v.reasons for name, v in none.nodes.items()} == {
        "node-a": {"insufficient_memory": 1},
        "node-b": {"insufficient_memory": 1},
    }


def test_topology_grows_a_well_linked_set_when_there_are_too_many_to_try() -> None:
    links = {f"G{a},G{b}": 100 for a in range(8, 16) for b in range(a + 1, 16)}
    links.update({f"G{a},G{a + 1}": 1 for a in range(0, 8)})
    state = ledger(node("node-1", *(gpu(f"G{i}", index=i) for i in range(16)), topology=links))
    eight = request(container(gpu=8, mem=1), annotations={"vslice.io/gpu-policy": "topology"})
    assert uuids(state.decide(eight)) == [f"G{i}" for i in range(8, 16)]


def test_gpu_usage_is_compared_by_memory_then_slices_then_cores() -> None:
    gpus = [
        gpu("G0", used=used(slots=2, memory_mib=100)),
        gpu("G1", used=used(slots=1, memory_mib=100, cores=40)),
        gpu("G2", used=used(slots=1, memory_mib=100, cores=20)),
    ]
    state = ledger(node("node-1", *gpus))
    assert uuids(state.decide(request(container(mem=1, cores=10)))) == ["G2"]
    binpack = {"vslice.io/gpu-policy": "binpack"}
    assert uuids(state.decide(request(container(mem=1, cores=10), annotations=binpack))) == ["G0"]


L4 = "NVIDIA-L4"


def test_node_binpack_fills_the_nodes_of_the_smallest_gpus_first() -> None:
    # The A100 node is the fuller by share (HAMi's node score), but a slice an L4 can hold goes
    # to the L4 node, so the A100s stay whole for what only they can hold.
    state = ledger(
        node("a100-node", gpu("A0", used=half()), gpu("A1")),
        node(
            "l4-node", gpu("L0", model=L4, memory_mib=23034), gpu("L1", model=L4, memory_mib=23034)
        ),
    )
    assert state.decide(request(container(mem=4096, cores=10))).node == "l4-node"
    assert state.decide(request(container(mem=40960, cores=50))).node == "a100-node"
    assert state.decide(request(container(gpu=1))).node == "l4-node"  # any whole GPU will do
    assert state.decide(request(container(gpu=1, mem=81920))).node == "a100-node"
    # The reported score is unchanged: the share of the node's memory in use.
    scores = state.decide(request(container(mem=4096)), explain=True).nodes
    assert (scores["a100-node"].score, scores["l4-node"].score) == (2.5, 0.0)
    assert state.ranked("binpack") == ["l4-node", "a100-node"]
    assert state.ranked("spread") == ["l4-node", "a100-node"]  # spread: emptiest by share


def test_node_binpack_walks_past_the_nodes_too_small_or_of_another_model() -> None:
    nodes = [node(f"l4-{i}", gpu(f"L{i}", model=L4, memory_mib=23034)) for i in range(3)]
    state = ledger(
        *nodes, node("t4-0", gpu("T0", model=T4, memory_mib=15360)), node("zz", gpu("A"))
    )
    assert state.decide(request(container(mem=16000, cores=10))).node == "l4-0"
    assert state.decide(request(container(mem=30000, cores=10))).node == "zz"
    a100 = {"vslice.io/gpu-type": "a100"}
    assert state.decide(request(container(mem=100), annotations=a100)).node == "zz"
    t4 = {"vslice.io/gpu-type": "t4"}
    assert state.decide(request(container(pct=50), annotations=t4)).node == "t4-0"
    assert state.decide(request(container(mem=16000, cores=10)), ["zz", "l4-2"]).node == "l4-2"


def test_gpu_binpack_takes_the_best_fit_in_mib_not_in_share() -> None:
    # G0 is the fuller by share (50 % of 80 GiB), G1 by what is left (12,000 MiB of 16,000).
    gpus = [gpu("G0", used=half()), gpu("G1", model=T4, memory_mib=16000, used=half(4000))]
    state = ledger(node("node-1", *gpus))
    binpack = {"vslice.io/gpu-policy": "binpack"}
    assert uuids(state.decide(request(container(mem=8000), annotations=binpack))) == ["G1"]
    assert uuids(state.decide(request(container(mem=13000), annotations=binpack))) == ["G0"]
    # A percentage is measured on each GPU: 10 % leaves 10,400 MiB on G1, 32,768 on G0.
    assert uuids(state.decide(request(container(pct=10), annotations=binpack))) == ["G1"]
    # Memory left being equal, the GPU with more slices in use, then fewer cores left, wins.
    even = [
        gpu("E0", memory_mib=1000, used=used(slots=1, memory_mib=500, cores=10)),
        gpu("E1", memory_mib=2000, used=used(slots=2, memory_mib=1500, cores=10)),
        gpu("E2", memory_mib=3000, used=used(slots=2, memory_mib=2500, cores=30)),
    ]
    state = ledger(node("node-1", *even))
    assert uuids(state.decide(request(container(mem=100, cores=10), annotations=binpack))) == ["E2"]
