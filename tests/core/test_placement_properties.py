"""Properties of the engine and the ledger over random clusters and pods (hypothesis)."""

import dataclasses
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vslice_core.cluster import Cluster, build_ledger, parse_cluster
from vslice_core.errors import NoFit
from vslice_core.gputypes import type_matches
from vslice_core.ledger import Ledger, charges
from vslice_core.model import ContainerRequest, PodRequest
from vslice_core.placement import GpuState, NodeState, Want, compile_request, gpu_reason

MODELS = ("NVIDIA-A100-SXM4-80GB", "Tesla-T4", "NVIDIA-L40S", "NVIDIA A10")


@st.composite
def gpus(draw: st.DrawFn, uuid: str) -> dict[str, Any]:
    memory = draw(st.sampled_from((1000, 4000, 16000)))
    slots = draw(st.integers(1, 4))
    entry: dict[str, Any] = {
        "uuid": uuid,
        "model": draw(st.sampled_from(MODELS)),
        "memory_mib": memory,
        "slots": slots,
        "numa": draw(st.integers(0, 1)),
        "healthy": draw(st.booleans() | st.just(True)),
        "cordoned": draw(st.just(False) | st.booleans()),
    }
    if draw(st.booleans()):
        entry["used"] = {
            "slots": draw(st.integers(0, slots)),
            "memory_mib": draw(st.integers(0, memory)),
            "cores": draw(st.sampled_from((0, 30, 100))),
        }
    return entry


@st.composite
def clusters(draw: st.DrawFn) -> Cluster:
    nodes = []
    for n in range(draw(st.integers(1, 4))):
        count = draw(st.integers(0, 4))
        node_gpus = [draw(gpus(f"N{n}G{i}")) for i in range(count)]
        links = {
            f"N{n}G{a},N{n}G{b}": draw(st.integers(0, 100))
            for a in range(count)
            for b in range(a + 1, count)
        }
        nodes.append(
            {"name": f"node-{draw(st.integers(0, 9))}{n}", "gpus": node_gpus, "topology": links}
        )
    quotas = {
        "team": {
            "limits": {"memory_mib": draw(st.integers(0, 40000)), "gpus": draw(st.integers(0, 6))}
        }
    }
    return parse_cluster({"nodes": nodes, "quotas": quotas})


@st.composite
def containers(draw: st.DrawFn, position: int) -> ContainerRequest:
    percent = draw(st.none() | st.integers(1, 100))
    return ContainerRequest(
        name=f"c{position}",
        init=draw(st.booleans()) if position else False,
        gpus=draw(st.integers(1, 3)),
        memory_mib=None if percent else draw(st.integers(1, 8000)),
        memory_percent=percent,
        cores=draw(st.sampled_from((0, 10, 50, 100))),
    )


@st.composite
def requests(draw: st.DrawFn, uid: str = "p") -> PodRequest:
    count = draw(st.integers(1, 3))
    return PodRequest(
        uid=uid,
        name=uid,
        namespace=draw(st.sampled_from(("default", "team"))),
        containers=[draw(containers(i)) for i in range(count)],
        gpu_types=draw(st.sampled_from(([], ["a100"], ["t4", "l40s"], ["a10"]))),
        gpu_uuids_exclude=draw(st.sampled_from(([], ["N0G0"]))),
        numa_bind=draw(st.booleans()),
        node_policy=draw(st.sampled_from(("binpack", "spread"))),
        gpu_policy=draw(st.sampled_from(("binpack", "spread", "mutex", "topology"))),
    )


def capacities(cluster: Cluster) -> dict[tuple[str, str], tuple[int, int, int]]:
    return {
        (n.name, g.uuid): (g.slots, g.memory_mib, g.cores) for n in cluster.nodes for g in n.gpus
    }


def snapshot(ledger: Ledger, cluster: Cluster) -> dict[str, Any]:
    return {node.name: ledger.gpu_usage(node.name) for node in cluster.nodes}


def assert_within_capacity(ledger: Ledger, cluster: Cluster) -> None:
    limits = capacities(cluster)
    base = {(n.name, g.uuid): g.used for n in cluster.nodes for g in n.gpus}
    for node in cluster.nodes:
        for uuid, usage in ledger.gpu_usage(node.name).items():
            slots, memory, cores = limits[(node.name, uuid)]
            before = base[(node.name, uuid)]
            # Base usage is whatever the file says; what the ledger adds must fit around it.
            assert usage.slots <= max(slots, before.slots)
            assert usage.memory_mib <= max(memory, before.memory_mib)
            assert usage.cores <= max(cores, before.cores)


quick = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@quick
@given(clusters(), st.lists(st.tuples(requests(), st.booleans(), st.integers(0, 5)), max_size=12))
def test_decisions_never_over_allocate_memory_cores_or_slots(
    cluster: Cluster, steps: list[tuple[PodRequest, bool, int]]
) -> None:
    ledger = build_ledger(cluster)
    placed: list[str] = []
    for number, (pod, use_reserve, release) in enumerate(steps):
        pod = pod.model_copy(update={"uid": f"p{number}"})
        decision = ledger.decide(pod)
        if decision.allocation is not None:
            if use_reserve:
                ledger.reserve(pod, decision.allocation.node)
            else:
                ledger.try_commit(pod.uid, decision.allocation, pod.namespace)
            placed.append(pod.uid)
        if release and placed:
            ledger.release(placed.pop(release % len(placed)))
        assert_within_capacity(ledger, cluster)
        assert_exclusive_grants_are_alone(ledger, cluster)
        assert_quota_is_kept(ledger, cluster)


def assert_exclusive_grants_are_alone(ledger: Ledger, cluster: Cluster) -> None:
    for uid in ledger.pod_uids():
        allocation = ledger.allocation(uid)
        assert allocation is not None
        taken = charges(allocation)
        for container in allocation.containers:
            for grant in container.gpus:
                if grant.cores == 100:
                    usage = ledger.gpu_usage(allocation.node)[grant.uuid]
                    assert usage.slots == taken[grant.uuid].slots


def assert_quota_is_kept(ledger: Ledger, cluster: Cluster) -> None:
    limits = cluster.quotas["team"].limits
    usage = ledger.namespace_usage("team")
    assert limits.memory_mib is not None and usage.memory_mib <= limits.memory_mib
    assert limits.gpus is not None and usage.gpus <= limits.gpus


@quick
@given(clusters(), st.lists(requests(), min_size=1, max_size=6), st.data())
def test_releasing_restores_the_ledger_exactly(
    cluster: Cluster, pods: list[PodRequest], data: st.DataObject
) -> None:
    ledger = build_ledger(cluster)
    empty = snapshot(ledger, cluster)
    history = []
    for number, pod in enumerate(pods):
        before = snapshot(ledger, cluster)
        decision = ledger.decide(pod)
        if decision.allocation is None:
            continue
        ledger.add(f"p{number}", decision.allocation, pod.namespace)
        history.append((f"p{number}", before))
    for uid, before in reversed(history):
        ledger.release(uid)
        assert snapshot(ledger, cluster) == before
    assert snapshot(ledger, cluster) == empty
    assert ledger.namespace_usage("team").model_dump() == {"memory_mib": 0, "cores": 0, "gpus": 0}


@quick
@given(clusters(), st.lists(requests(), min_size=1, max_size=6))
def test_incremental_usage_equals_a_rebuild_from_the_allocations(
    cluster: Cluster, pods: list[PodRequest]
) -> None:
    ledger = build_ledger(cluster)
    for number, pod in enumerate(pods):
        decision = ledger.decide(pod)
        if decision.allocation is not None:
            ledger.try_commit(f"p{number}", decision.allocation, pod.namespace)
        if number % 3 == 2:
            ledger.release(f"p{number - 1}")
    rebuilt = build_ledger(cluster)
    for uid in ledger.pod_uids():
        allocation = ledger.allocation(uid)
        assert allocation is not None
        rebuilt.add(uid, allocation)
    assert snapshot(rebuilt, cluster) == snapshot(ledger, cluster)


@quick
@given(clusters(), requests())
def test_same_input_same_answer_in_every_mode(cluster: Cluster, pod: PodRequest) -> None:
    first = build_ledger(cluster).decide(pod, explain=True)
    again = build_ledger(cluster).decide(pod, explain=True)
    assert first == again
    fast = build_ledger(cluster).decide(pod)
    assert (fast.node, fast.allocation) == (first.node, first.allocation)
    if fast.node is not None:
        assert fast.nodes[fast.node] == first.nodes[fast.node]
    else:
        assert fast.nodes == first.nodes
    names = [node.name for node in reversed(cluster.nodes)]
    subset = build_ledger(cluster).decide(pod, names)
    assert (subset.node, subset.allocation) == (first.node, first.allocation)


@quick
@given(clusters(), requests())
def test_a_chosen_allocation_commits_and_honours_the_request(
    cluster: Cluster, pod: PodRequest
) -> None:
    ledger = build_ledger(cluster)
    decision = ledger.decide(pod)
    if decision.allocation is None:
        assert all(not verdict.fits and verdict.reasons for verdict in decision.nodes.values())
        return
    try:
        ledger.try_commit("p", decision.allocation, pod.namespace)
    except NoFit as error:  # pragma: no cover - a failure here is the bug being looked for
        raise AssertionError(f"engine and commit disagree: {error.reasons}") from error
    gpus = {g.uuid: g for node in cluster.nodes if node.name == decision.node for g in node.gpus}
    for wanted, got in zip(pod.containers, decision.allocation.containers, strict=True):
        assert got.name == wanted.name and len(got.gpus) == wanted.gpus
        assert len({g.uuid for g in got.gpus}) == wanted.gpus
        for grant in got.gpus:
            assert grant.memory_mib == wanted.memory_on(gpus[grant.uuid].memory_mib)
            assert grant.cores == wanted.cores
            assert gpus[grant.uuid].healthy and not gpus[grant.uuid].cordoned
            if pod.gpu_types:
                assert any(type_matches(t, gpus[grant.uuid].model) for t in pod.gpu_types)
        if pod.numa_bind:
            assert len({gpus[g.uuid].numa for g in got.gpus}) == 1


def summary(state: NodeState) -> tuple[object, ...]:
    """What the cheap node checks read, kept up to date by every change of usage."""
    return (
        state.free,
        state.open_gpus,
        state.idle_gpus,
        state.max_free_memory,
        state.max_free_cores,
        state.max_free_percent,
        state.used_memory,
    )


def assert_node_summaries_are_current(ledger: Ledger) -> None:
    for state in ledger._nodes.values():
        recount = dataclasses.replace(state)  # the same GPUs, its summary counted afresh
        recount.refresh()
        assert summary(state) == summary(recount), state.name


@quick
@given(
    clusters(),
    st.lists(
        st.tuples(requests(), st.sampled_from(("commit", "reserve", "unproven", "replace"))),
        max_size=10,
    ),
    st.data(),
)
def test_every_change_of_usage_keeps_the_node_summaries_current(
    cluster: Cluster, steps: list[tuple[PodRequest, str]], data: st.DataObject
) -> None:
    ledger = build_ledger(cluster)
    placed: list[str] = []
    for number, (pod, how) in enumerate(steps):
        pod = pod.model_copy(update={"uid": f"p{number}"})
        decision = ledger.decide(pod)
        if decision.allocation is not None:
            if how == "reserve":
                ledger.reserve(pod, decision.allocation.node)
            elif how == "unproven":
                ledger.add(pod.uid, decision.allocation, pod.namespace, proven=False)
            else:
                ledger.try_commit(pod.uid, decision.allocation, pod.namespace)
            placed.append(pod.uid)
        if how == "replace" and cluster.nodes:
            # The node comes back with its first GPU cordoned: its allocations are re-applied.
            described = data.draw(st.sampled_from(cluster.nodes))
            inventory = described.inventory()
            if inventory.gpus:
                inventory.gpus[0] = inventory.gpus[0].model_copy(update={"cordoned": True})
            ledger.set_node(inventory, described.usage())
        assert_node_summaries_are_current(ledger)
        if placed and data.draw(st.booleans()):
            ledger.release(placed.pop(data.draw(st.integers(0, len(placed) - 1))))
            assert_node_summaries_are_current(ledger)


def one_gpu_ask(draw: st.DrawFn, count: int) -> PodRequest:
    percent = draw(st.none() | st.integers(1, 100))
    wanted = ContainerRequest(
        name="main",
        gpus=count,
        memory_mib=None if percent else draw(st.integers(1, 16000)),
        memory_percent=percent,
        cores=draw(st.sampled_from((0, 10, 50, 100))),
    )
    return PodRequest(containers=[wanted], gpu_policy="binpack")


@st.composite
def one_node_binpack(draw: st.DrawFn, same_size: bool) -> tuple[Cluster, PodRequest]:
    count = draw(st.integers(1, 6))
    node_gpus = [draw(gpus(f"G{i}")) for i in range(count)]
    if same_size:  # one model and size: where HAMi's share rule is defined the same way
        size = node_gpus[0]["memory_mib"]
        for entry in node_gpus:
            entry.update(model=MODELS[0], memory_mib=size)
            if "used" in entry:
                entry["used"]["memory_mib"] = min(entry["used"]["memory_mib"], size)
    pod = one_gpu_ask(draw, draw(st.integers(1, 3)))
    return parse_cluster({"nodes": [{"name": "n", "gpus": node_gpus}]}), pod


def chosen(ledger: Ledger, pod: PodRequest) -> list[str] | None:
    decision = ledger.decide(pod)
    if decision.allocation is None:
        return None
    return [grant.uuid for grant in decision.allocation.containers[0].gpus]


def expected_gpus(state: NodeState, pod: PodRequest, key: Any) -> list[str] | None:
    """The first ``gpus`` GPUs that can take the container, in ``key`` order, by index."""
    ask = compile_request(pod)
    want = ask.wants[0]
    fitting = [g for g in state.gpus if gpu_reason(g, want, ask, None) is None]
    if len(fitting) < want.count:
        return None
    best = sorted(fitting, key=lambda g: key(g, want))[: want.count]
    return [g.uuid for g in sorted(best, key=lambda g: g.index)]


def best_fit(gpu: GpuState, want: Want) -> tuple[int, int, int, int]:
    left = gpu.memory - gpu.used_memory - want.memory_on(gpu)
    return (left, -gpu.used_slots, gpu.cores - gpu.used_cores, gpu.index)


def share_order(gpu: GpuState, want: Want) -> tuple[float, int, int, int]:
    """vslice's rendering of HAMi's binpack GPU order: most memory in use by share, then
    slices, then cores; ties to the lower index."""
    return (-gpu.used_memory / gpu.memory, -gpu.used_slots, -gpu.used_cores, gpu.index)


@quick
@given(one_node_binpack(same_size=False))
def test_gpu_binpack_takes_the_fitting_gpus_with_the_least_memory_left(
    scene: tuple[Cluster, PodRequest],
) -> None:
    cluster, pod = scene
    ledger = build_ledger(cluster)
    assert chosen(ledger, pod) == expected_gpus(ledger._nodes["n"], pod, best_fit)


@quick
@given(one_node_binpack(same_size=True))
def test_on_gpus_of_one_size_binpack_keeps_the_share_order(
    scene: tuple[Cluster, PodRequest],
) -> None:
    cluster, pod = scene
    ledger = build_ledger(cluster)
    assert chosen(ledger, pod) == expected_gpus(ledger._nodes["n"], pod, share_order)


def assert_ranking_is_a_recount(ledger: Ledger) -> None:
    """Every ranked node's entry is what its state says now, and each policy's order is the
    from-scratch sort of those (binpack: smallest largest GPU, fullest by share, name)."""
    states = {n: s for n, s in ledger._nodes.items() if n not in ledger._blocks}
    entries = {
        name: (state.load, state.idle_gpus, state.largest_memory, state.max_free_memory)
        for name, state in states.items()
    }
    assert ledger._ranking._entries == entries
    binpack = sorted(states, key=lambda n: (states[n].largest_memory, -states[n].load, n))
    assert ledger.ranked("binpack") == binpack
    assert ledger.ranked("spread") == sorted(states, key=lambda n: (states[n].load, n))


@quick
@given(clusters(), st.lists(st.tuples(requests(), st.booleans()), min_size=1, max_size=8))
def test_the_ranking_follows_every_change_and_the_walk_skips_no_node_that_fits(
    cluster: Cluster, steps: list[tuple[PodRequest, bool]]
) -> None:
    ledger = build_ledger(cluster)
    placed: list[str] = []
    for number, (pod, release) in enumerate(steps):
        pod = pod.model_copy(update={"uid": f"p{number}"})
        fast, full = ledger.decide(pod), ledger.decide(pod, explain=True)
        assert (fast.node, fast.allocation) == (full.node, full.allocation)
        if full.node is not None and pod.node_policy == "binpack":
            fitting = [name for name, verdict in full.nodes.items() if verdict.fits]
            states = ledger._nodes
            best = min(fitting, key=lambda n: (states[n].largest_memory, -states[n].load, n))
            assert full.node == best
        if fast.allocation is not None:
            ledger.try_commit(pod.uid, fast.allocation, pod.namespace)
            placed.append(pod.uid)
        assert_ranking_is_a_recount(ledger)
        if release and placed:
            ledger.release(placed.pop(0))
            assert_ranking_is_a_recount(ledger)


# GPU sizes, free MiB and asks at the edges of the ranking's room levels (2048, 3072, ...).
EDGES = (1, 2047, 2048, 2049, 3071, 3072, 6143, 6144, 6145, 16384, 23034)


@st.composite
def edge_clusters(draw: st.DrawFn) -> Cluster:
    nodes = []
    for n in range(draw(st.integers(1, 5))):
        node_gpus = []
        for i in range(draw(st.integers(1, 3))):
            memory = draw(st.sampled_from((2048, 6144, 15360, 23034, 81920)))
            free = min(memory, draw(st.sampled_from(EDGES)))
            node_gpus.append(
                {
                    "uuid": f"N{n}G{i}",
                    "model": draw(st.sampled_from(MODELS)),
                    "memory_mib": memory,
                    "slots": 4,
                    "used": {"slots": 1, "memory_mib": memory - free, "cores": 0},
                }
            )
        nodes.append({"name": f"node-{n}", "gpus": node_gpus})
    return parse_cluster({"nodes": nodes})


@st.composite
def edge_requests(draw: st.DrawFn) -> PodRequest:
    percent = draw(st.none() | st.sampled_from((1, 13, 33, 34, 40, 50, 100)))
    wanted = ContainerRequest(
        name="main",
        gpus=draw(st.integers(1, 2)),
        memory_mib=None if percent else draw(st.sampled_from(EDGES)),
        memory_percent=percent,
        cores=draw(st.sampled_from((0, 10))),
    )
    return PodRequest(
        containers=[wanted],
        gpu_types=draw(st.sampled_from(([], ["a100"], ["t4", "l40s"], ["a10"]))),
        gpu_policy=draw(st.sampled_from(("binpack", "spread"))),
    )


@settings(max_examples=400, deadline=None)
@given(edge_clusters(), edge_requests())
def test_the_binpack_walk_skips_no_node_that_fits_at_the_edges_of_its_lists(
    cluster: Cluster, pod: PodRequest
) -> None:
    ledger = build_ledger(cluster)
    fast, full = ledger.decide(pod), ledger.decide(pod, explain=True)
    assert (fast.node, fast.allocation) == (full.node, full.allocation)
