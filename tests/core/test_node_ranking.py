from core_builders import container, gpu, ledger, node, request, used
from hypothesis import given
from hypothesis import strategies as st
from vslice_core.cluster import build_ledger, parse_cluster
from vslice_core.model import ContainerRequest, PodRequest
from vslice_core.placement import compile_request, evaluate, largest_percent, quick_reject
from vslice_core.ranking import IDLE_LEVELS, NodeRanking


def test_nodes_are_walked_best_first_with_ties_to_the_smaller_name() -> None:
    ranking = NodeRanking()
    ranking.put("b", 0.5, 0)
    ranking.put("a", 0.5, 2)
    ranking.put("c", 0.9, 1)
    ranking.put("d", 0.1, 3)
    assert list(ranking.walk("binpack")) == ["c", "a", "b", "d"]
    assert list(ranking.walk("spread")) == ["d", "a", "b", "c"]
    assert list(ranking.walk("binpack", idle=2)) == ["a", "d"]
    assert list(ranking.walk("spread", ["c", "b", "zz"])) == ["b", "c"]


def test_re_ranking_and_removal_keep_every_list_consistent() -> None:
    ranking = NodeRanking()
    ranking.put("a", 0.2, 12)
    ranking.put("a", 0.7, 1)
    assert list(ranking.walk("binpack", idle=IDLE_LEVELS)) == []
    assert list(ranking.walk("binpack", idle=1)) == ["a"]
    ranking.remove("a")
    ranking.remove("never-there")
    assert len(ranking) == 0 and list(ranking.walk("spread")) == []


def test_a_few_candidates_are_sorted_directly() -> None:
    nodes = [
        node(f"node-{i:02d}", gpu(f"G{i}", used=used(slots=0, memory_mib=i * 1000)))
        for i in range(20)
    ]
    state = ledger(*nodes)
    assert state.decide(request(container(mem=1)), ["node-03", "node-07"]).node == "node-07"
    spread = request(container(mem=1), annotations={"vslice.io/node-policy": "spread"})
    assert state.decide(spread, ["node-07", "node-03", "ghost"]).node == "node-03"
    whole = request(container(gpu=1))
    assert state.decide(whole, ["node-00", "node-05"]).node == "node-00"


@given(st.integers(1, 10**6), st.integers(-5, 10**6))
def test_largest_percent_is_exact(memory: int, free: int) -> None:
    percent = largest_percent(memory, free)
    if free < 0:
        assert percent == -1
        return
    assert 0 <= percent <= 100
    assert memory * percent // 100 <= free
    assert percent == 100 or memory * (percent + 1) // 100 > free


@st.composite
def scenes(draw: st.DrawFn) -> tuple[PodRequest, dict[str, object]]:
    gpus = []
    for i in range(draw(st.integers(0, 4))):
        memory = draw(st.sampled_from((100, 1000, 81920)))
        slots = draw(st.integers(1, 3))
        taken = {
            "slots": draw(st.integers(0, slots)),
            "memory_mib": draw(st.integers(0, memory)),
            "cores": draw(st.sampled_from((0, 50, 100))),
        }
        gpus.append(
            gpu(f"G{i}", memory_mib=memory, slots=slots, used=taken, healthy=draw(st.booleans()))
        )
    percent = draw(st.none() | st.integers(1, 100))
    wanted = ContainerRequest(
        name="main",
        gpus=draw(st.integers(1, 3)),
        memory_mib=None if percent else draw(st.integers(1, 90000)),
        memory_percent=percent,
        cores=draw(st.sampled_from((0, 30, 100))),
    )
    policy = draw(st.sampled_from(("spread", "mutex")))
    return PodRequest(containers=[wanted], gpu_policy=policy), node("n", *gpus)


@given(scenes())
def test_the_cheap_node_check_never_rejects_a_node_that_fits(
    scene: tuple[PodRequest, dict[str, object]],
) -> None:
    pod, described = scene
    state = build_ledger(parse_cluster({"nodes": [described]}))
    ask = compile_request(pod)
    node_state = state._nodes["n"]  # the engine's own view of the node
    if evaluate(node_state, ask, None).fits:
        assert not quick_reject(node_state, ask)
