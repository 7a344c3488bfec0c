from typing import Any

import pytest
import vslice_core.ranking as ranking_module
from core_builders import container, gpu, ledger, node, request, used
from hypothesis import given, settings
from hypothesis import strategies as st
from vslice_core.cluster import build_ledger, parse_cluster
from vslice_core.model import ContainerRequest, PodRequest
from vslice_core.placement import (
    compile_request,
    evaluate,
    largest_percent,
    may_fit,
    quick_reject,
)
from vslice_core.ranking import IDLE_LEVELS, POLICIES, ROOM_LEVELS, NodeRanking


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


@pytest.mark.parametrize("share", [8, 10**9], ids=["sorted-directly", "ranked-list-filtered"])
def test_a_few_candidates_get_the_same_answer_sorted_or_filtered(
    share: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Which of the two ways walk() takes depends on the candidates' share of the nodes; the
    # answer never may.
    monkeypatch.setattr(ranking_module, "_SMALL_CANDIDATE_SHARE", share)
    nodes = [
        node(f"node-{i:02d}", gpu(f"G{i}", used=used(slots=0, memory_mib=i * 1000)))
        for i in range(20)
    ]
    state = ledger(*nodes)
    assert state._ranking.few(2) is (share == 8)  # the way the two-name cases take
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
        if draw(st.booleans()):
            taken = {"slots": 0, "memory_mib": 0, "cores": 0}  # idle: whole-GPU asks fit
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
        assert may_fit(node_state, ask)


@st.composite
def pods(draw: st.DrawFn) -> PodRequest:
    """Several containers, init ones among them, so later ones see what earlier ones took."""
    wanted = []
    for position in range(draw(st.integers(1, 3))):
        percent = draw(st.none() | st.integers(1, 100))
        wanted.append(
            ContainerRequest(
                name=f"c{position}",
                init=position > 0 and draw(st.booleans()),
                gpus=draw(st.integers(1, 3)),
                memory_mib=None if percent else draw(st.integers(1, 90000)),
                memory_percent=percent,
                cores=draw(st.sampled_from((0, 30, 50, 100))),
            )
        )
    policy = draw(st.sampled_from(("spread", "binpack", "mutex", "topology")))
    return PodRequest(containers=wanted, gpu_policy=policy, numa_bind=draw(st.booleans()))


@given(scenes(), pods())
def test_the_per_gpu_check_never_rejects_a_node_that_fits_a_pod_of_several_containers(
    scene: tuple[PodRequest, dict[str, object]], pod: PodRequest
) -> None:
    state = build_ledger(parse_cluster({"nodes": [scene[1]]}))
    node_state = state._nodes["n"]
    ask = compile_request(pod)
    if evaluate(node_state, ask, None).fits:
        assert may_fit(node_state, ask)


def test_the_per_gpu_check_lets_a_gpu_with_exactly_the_asked_room_through() -> None:
    taken = used(slots=1, memory_mib=400, cores=70)  # 600 of 1000 MiB (60 %) and 30 cores free
    described = node("n", gpu("G0", memory_mib=1000, used=taken))
    node_state = build_ledger(parse_cluster({"nodes": [described]}))._nodes["n"]
    asks = {  # (MiB, percent, cores): fits
        (600, None, 30): True,
        (None, 60, 30): True,
        (601, None, 30): False,
        (None, 61, 30): False,
        (600, None, 31): False,
    }
    for (memory, percent, cores), fits in asks.items():
        asked = ContainerRequest(
            name="main", gpus=1, memory_mib=memory, memory_percent=percent, cores=cores
        )
        ask = compile_request(PodRequest(containers=[asked]))
        assert evaluate(node_state, ask, None).fits == fits
        assert may_fit(node_state, ask) == fits, (memory, percent, cores)


def test_many_candidates_skip_a_better_ranked_node_that_is_not_one_of_them() -> None:
    # 16 nodes, the fuller the higher the number: binpack ranks node-15 first.
    nodes = [
        node(f"node-{i:02d}", gpu(f"G{i}", used=used(slots=1, memory_mib=i * 1000)))
        for i in range(16)
    ]
    state = ledger(*nodes)
    one = request(container(mem=1))
    candidates = [f"node-{i:02d}" for i in (3, 14, 9, 14)] + ["ghost"]
    assert not state._ranking.few(len(candidates))  # the walk does not filter by them
    assert state.decide(one, candidates).node == "node-14"
    assert state.decide(one, candidates, explain=True).node == "node-14"
    everyone_else = [f"node-{i:02d}" for i in range(15)]
    assert state.decide(one, everyone_else).node == "node-14"
    assert state.decide(one, iter(everyone_else)).node == "node-14"
    assert state.decide(one, ["ghost"] * 4).node is None


# Nodes of three GPU sizes; changes move them between sizes, loads, idle GPUs and free MiB.
# Few names, so a node changes again while it is in the lists; puts outnumber the rest, so
# most changes are moves one by one (a defer re-sorts the few lists from scratch).
SIZES = (15360, 23034, 81920)
ROOMS = (0, 1000, 2047, 2048, 5000, 6143, 6144, 16384, 23034, 70000, 81920)
RANKED_NAMES = [f"n{i}" for i in range(5)]
a_put = st.tuples(
    st.just("put"),
    st.sampled_from(RANKED_NAMES),
    st.sampled_from([0.0, 0.25, 0.5, 1.0]),
    st.integers(0, IDLE_LEVELS + 1),
    st.sampled_from(SIZES),
    st.sampled_from(ROOMS),
)
ranked_ops = st.lists(
    st.one_of(
        a_put,
        a_put,
        a_put,
        st.tuples(st.just("remove"), st.sampled_from(RANKED_NAMES)),
        st.tuples(st.just("defer")),
        st.tuples(st.just("resume")),
    ),
    max_size=40,
)
Ranked = dict[str, tuple[float, int, int, int]]


def recount(entries: Ranked, policy: str, idle: int, size: int, room: int) -> list[str]:
    """The walk's contract, from scratch: the nodes with enough idle GPUs (up to
    ``IDLE_LEVELS``), and for binpack a large enough GPU and, unless idle GPUs are asked, a GPU
    with the room level's MiB free; binpack by (size, -load, name), spread by (load, name)."""
    level = max((t for t in ROOM_LEVELS if t <= room), default=0)
    kept = []
    for name, (_, free_idle, largest, most_free) in entries.items():
        if free_idle < min(idle, IDLE_LEVELS):
            continue
        if policy == "binpack" and (largest < size or (idle <= 0 and most_free < level)):
            continue
        kept.append(name)
    if policy == "binpack":
        return sorted(kept, key=lambda n: (entries[n][2], -entries[n][0], n))
    return sorted(kept, key=lambda n: (entries[n][0], n))


WALKS = [("binpack", 0, size, room) for size in (0, *SIZES) for room in ROOMS] + [
    (policy, idle, size, 0)
    for policy in POLICIES
    for idle in (1, 2, IDLE_LEVELS, IDLE_LEVELS + 1)
    for size in (0, SIZES[1])
]


@settings(max_examples=200, deadline=None)
@given(ranked_ops, st.lists(st.sampled_from([*RANKED_NAMES, "ghost"]), max_size=3))
def test_the_ranking_matches_a_recount_after_every_change(
    ops: list[tuple[Any, ...]], names: list[str]
) -> None:
    ranking, entries = NodeRanking(), Ranked()
    for op in ops:
        if op[0] == "put":
            ranking.put(*op[1:])
            entries[op[1]] = op[2:]
        elif op[0] == "remove":
            ranking.remove(op[1])
            entries.pop(op[1], None)
        elif op[0] == "defer":
            ranking.defer()
        else:
            ranking.resume()
        for policy, idle, size, room in WALKS:
            walked = list(ranking.walk(policy, idle=idle, size=size, room=room))
            assert walked == recount(entries, policy, idle, size, room)
            # Never left out: a node that has what was asked (the room itself, not its level).
            for name, (_, free_idle, largest, most_free) in entries.items():
                if free_idle >= idle and largest >= size and most_free >= room:
                    assert name in walked
            # Candidates keep the order; the walk may leave out more of them (few candidates
            # are sorted directly, without the room lists), never one in the full walk.
            filtered = list(ranking.walk(policy, names, idle=idle, size=size, room=room))
            assert set(filtered) <= set(names)
            assert [n for n in filtered if n in walked] == [n for n in walked if n in names]
