"""Preemption's victim choice (vslice_core.preemption): properties checked against brute force
over every set of evictable pods, and readable cases with the sentences users see."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vslice_core.ledger import Ledger
from vslice_core.model import (
    Allocation,
    ContainerAllocation,
    ContainerRequest,
    Gpu,
    GpuGrant,
    NamespaceQuota,
    NodeInventory,
    PodRequest,
    QuotaCheck,
    QuotaLimits,
)
from vslice_core.preemption import (
    NodeView,
    RunningPod,
    plan_preemption,
    victims_on,
)

A100 = "NVIDIA-A100-SXM4-80GB"
GIB = 1024


# ----- building nodes the way the extender would see them -------------------------------------
def inventory(name: str, *memories: int, slots: int = 10, model: str = A100) -> NodeInventory:
    gpus = [
        Gpu(uuid=f"{name}-G{i}", model=model, memory_mib=memory, slots=slots, index=i)
        for i, memory in enumerate(memories)
    ]
    return NodeInventory(name=name, gpus=gpus)


def running(
    node: str,
    name: str,
    priority: int,
    *grants: tuple[int, int, int],
    started: float = 0.0,
    evictable: bool = True,
    namespace: str = "ml",
) -> RunningPod:
    """A pod on ``node`` holding (GPU index, MiB, cores) grants, one container."""
    gpus = [
        GpuGrant(uuid=f"{node}-G{index}", index=index, memory_mib=memory, cores=cores)
        for index, memory, cores in grants
    ]
    allocation = Allocation(node=node, containers=[ContainerAllocation(name="main", gpus=gpus)])
    return RunningPod(
        uid=f"uid-{name}",
        namespace=namespace,
        name=name,
        priority=priority,
        started_s=started,
        evictable=evictable,
        allocation=allocation,
    )


def loaded(node: NodeInventory, pods: Sequence[RunningPod], quota: Any = None) -> Ledger:
    """A ledger holding the node and the pods' allocations (and a namespace quota)."""
    ledger = Ledger()
    ledger.set_node(node)
    for pod in pods:
        ledger.add(pod.uid, pod.allocation, pod.namespace)
    if quota is not None:
        ledger.set_quota("ml", quota)
    return ledger


def view(node: NodeInventory, pods: Sequence[RunningPod]) -> NodeView:
    """The node as the ledger counts it with every pod on it."""
    return NodeView(node, loaded(node, pods).gpu_usage(node.name), pods)


def ask(gib: float, gpus: int = 1, cores: int = 10, **fields: Any) -> PodRequest:
    container = ContainerRequest(name="main", gpus=gpus, memory_mib=int(gib * GIB), cores=cores)
    return PodRequest(name="urgent", namespace="ml", containers=[container], **fields)


def names(pods: Sequence[RunningPod] | None) -> list[str] | None:
    return None if pods is None else sorted(p.name for p in pods)


# ----- readable cases -------------------------------------------------------------------------
def test_the_fewest_pods_go_even_when_one_of_them_has_a_higher_priority() -> None:
    node = inventory("node-a", 80 * GIB)
    pods = [
        running("node-a", "big", 5, (0, 40 * GIB, 10)),
        running("node-a", "small-1", 0, (0, 20 * GIB, 10)),
        running("node-a", "small-2", 0, (0, 20 * GIB, 10)),
    ]
    answer = victims_on(view(node, pods), ask(40), priority=10)
    assert names(answer.victims) == ["big"]
    assert answer.reason == "node-a: evicting 1 pod (ml/big; priority 5; 40 GiB) makes room"


def test_between_sets_of_one_size_the_lower_priorities_go() -> None:
    node = inventory("node-a", 80 * GIB)
    pods = [
        running("node-a", "p0", 0, (0, 30 * GIB, 10)),
        running("node-a", "p3", 3, (0, 30 * GIB, 10)),
        running("node-a", "p1", 1, (0, 20 * GIB, 10)),
    ]
    # 0 GiB free; any one pod frees 20-30 GiB: the one of priority 0 suffices for 25 GiB.
    assert names(victims_on(view(node, pods), ask(25), priority=10).victims) == ["p0"]
    # 50 GiB needs two: {p0, p1} (highest priority 1) beats {p0, p3} and {p1, p3}.
    assert names(victims_on(view(node, pods), ask(50), priority=10).victims) == ["p0", "p1"]


def test_between_equal_priorities_the_youngest_pods_go() -> None:
    node = inventory("node-a", 80 * GIB)
    pods = [
        running("node-a", f"nb-{age}", 0, (0, 20 * GIB, 10), started=1000.0 - age)
        for age in (300, 100, 200, 400)
    ]
    answer = victims_on(view(node, pods), ask(40), priority=10)
    assert names(answer.victims) == ["nb-100", "nb-200"]


def test_pods_of_equal_or_higher_priority_are_never_evicted() -> None:
    node = inventory("node-a", 80 * GIB)
    pods = [
        running("node-a", "same", 10, (0, 40 * GIB, 10)),
        running("node-a", "above", 20, (0, 40 * GIB, 10)),
    ]
    answer = victims_on(view(node, pods), ask(40), priority=10)
    assert answer.victims is None
    assert answer.reason == "node-a: no pod here may be evicted (2 pods of priority 10 or more)"


def test_a_disruption_budget_keeps_its_pod_and_the_next_best_set_is_chosen() -> None:
    node = inventory("node-a", 80 * GIB)
    pods = [
        running("node-a", "guarded", 0, (0, 40 * GIB, 10), evictable=False),
        running("node-a", "a", 1, (0, 20 * GIB, 10)),
        running("node-a", "b", 1, (0, 20 * GIB, 10)),
    ]
    answer = victims_on(view(node, pods), ask(40), priority=10)
    assert names(answer.victims) == ["a", "b"]
    guarded = running("node-a", "guarded", 0, (0, 80 * GIB, 10), evictable=False)
    only = victims_on(view(node, [guarded]), ask(40), priority=10)
    assert only.reason == (
        "node-a: no pod here may be evicted (1 pod of lower priority kept by a disruption budget)"
    )


def test_a_node_that_eviction_cannot_help_says_how_far_short_it_stays() -> None:
    node = inventory("node-a", 80 * GIB)
    pods = [
        running("node-a", "low-1", 0, (0, 4 * GIB, 10)),
        running("node-a", "low-2", 0, (0, 4 * GIB, 10)),
        running("node-a", "low-3", 0, (0, 4 * GIB, 10)),
        running("node-a", "serving", 100, (0, 68 * GIB, 50)),
    ]
    answer = victims_on(view(node, pods), ask(16), priority=50)
    assert answer.victims is None
    assert answer.reason == (
        "node-a: evicting every pod it may (3 pods below priority 50, 12 GiB; 1 other pod must "
        "stay) "
        "still leaves no room for 1 GPU with 16 GiB, 10% cores: "
        "the most free is 12 GiB on GPU 0, of 80 GiB (memory)"
    )


def test_a_pod_that_fits_already_evicts_nothing() -> None:
    node = inventory("node-a", 80 * GIB)
    pods = [running("node-a", "low", 0, (0, 10 * GIB, 10))]
    plan = plan_preemption([view(node, pods)], ask(40), priority=10)
    assert (plan.node, plan.victims) == ("node-a", ())
    assert plan.headline == "fits on node-a without evicting any pod"


def test_preemption_policy_never_evicts_nothing_even_when_eviction_would_make_room() -> None:
    node = inventory("node-a", 80 * GIB)
    pods = [running("node-a", "low", 0, (0, 80 * GIB, 100))]
    assert plan_preemption([view(node, pods)], ask(40), priority=10).node == "node-a"
    never = plan_preemption([view(node, pods)], ask(40), priority=10, policy="Never")
    assert (never.node, never.victims) == (None, ())
    assert "preemptionPolicy is Never" in never.headline


def test_an_unknown_preemption_policy_names_the_choices() -> None:
    with pytest.raises(ValueError, match="one of Never, PreemptLowerPriority, got 'Sometimes'"):
        plan_preemption([], ask(1), priority=0, policy="Sometimes")  # type: ignore[arg-type]


def test_across_nodes_the_fewest_victims_win_then_the_node_listed_first() -> None:
    a, b, c = (inventory(n, 80 * GIB) for n in ("node-a", "node-b", "node-c"))
    views = [
        view(a, [running("node-a", f"a{i}", 0, (0, 40 * GIB, 10)) for i in range(2)]),
        view(b, [running("node-b", "b0", 0, (0, 80 * GIB, 10))]),
        view(c, [running("node-c", "c0", 0, (0, 80 * GIB, 10))]),
    ]
    plan = plan_preemption(views, ask(60), priority=10)
    assert plan.node == "node-b"
    assert names(plan.victims) == ["b0"]
    assert plan.headline == "evict 1 pod on node-b: ml/b0 (priority 0)"
    assert plan.nodes["node-c"].reason == "node-c: no set here beats node-b's (1 pod, priority 0)"
    assert plan.nodes["node-a"].victims is not None  # two pods: a set, not the best one


def test_across_nodes_lower_priorities_beat_the_node_order() -> None:
    a, b = inventory("node-a", 80 * GIB), inventory("node-b", 80 * GIB)
    views = [
        view(a, [running("node-a", "a0", 5, (0, 80 * GIB, 10))]),
        view(b, [running("node-b", "b0", 1, (0, 80 * GIB, 10))]),
    ]
    assert plan_preemption(views, ask(60), priority=10).node == "node-b"


def test_no_node_that_can_be_helped_gives_a_headline_and_a_line_per_node() -> None:
    a = inventory("node-a", 80 * GIB)
    plan = plan_preemption(
        [view(a, [running("node-a", "top", 50, (0, 80 * GIB, 10))])], ask(60), priority=10
    )
    assert plan.node is None
    assert plan.text() == (
        "no node makes room for 1 GPU with 60 GiB, 10% cores by evicting pods of priority "
        "below 10\n  node-a: no pod here may be evicted (1 pod of priority 10 or more)"
    )


def test_pods_on_gpus_the_pod_may_not_use_are_never_chosen() -> None:
    node = NodeInventory(
        name="node-a",
        gpus=[
            Gpu(uuid="node-a-G0", model=A100, memory_mib=80 * GIB, slots=10, index=0),
            Gpu(uuid="node-a-G1", model="NVIDIA-L4", memory_mib=22 * GIB, slots=4, index=1),
        ],
    )
    pods = [
        running("node-a", "on-l4", 0, (1, 22 * GIB, 10)),
        running("node-a", "on-a100", 1, (0, 80 * GIB, 10)),
    ]
    answer = victims_on(view(node, pods), ask(10, gpu_types=["a100"]), priority=10)
    assert names(answer.victims) == ["on-a100"]


def test_victims_of_the_pods_namespace_give_back_quota_and_others_do_not() -> None:
    node = inventory("node-a", 80 * GIB)
    mine = running("node-a", "mine", 0, (0, 30 * GIB, 10))
    theirs = running("node-a", "theirs", 0, (0, 30 * GIB, 10), namespace="other")
    pods = [mine, theirs]
    # 20 GiB free on the GPU; the quota allows 40 GiB and "mine" holds 30 of it.
    limits = QuotaLimits(memory_mib=40 * GIB)
    used = loaded(node, pods, NamespaceQuota(limits=limits)).quotas()["ml"].used
    quota = QuotaCheck(namespace="ml", limits=limits, used=used)
    answer = victims_on(view(node, pods), ask(20), priority=10, quota=quota)
    assert names(answer.victims) == ["mine"]
    alone = victims_on(view(node, [theirs]), ask(20), priority=10, quota=quota)
    assert alone.victims is None
    assert "the namespace quota does not: asks 20 GiB of GPU memory here (quota)" in alone.reason


def test_past_the_search_limit_the_answer_is_greedy_fits_and_says_so() -> None:
    node = inventory("node-a", *(80 * GIB,) * 4)
    pods = [
        running("node-a", f"p{g}{k}", k, (g, 40 * GIB, 10), started=float(k))
        for g in range(4)
        for k in range(2)
    ]
    exact = victims_on(view(node, pods), ask(60, gpus=2), priority=10)
    greedy = victims_on(view(node, pods), ask(60, gpus=2), priority=10, limit=10)
    assert exact.exact and not greedy.exact
    assert greedy.victims is not None and exact.victims is not None
    assert len(greedy.victims) == len(exact.victims) == 4
    assert "the search went greedy: a smaller or better set may exist" in greedy.reason
    assert _fits_without(node, pods, greedy.victims, ask(60, gpus=2))


def test_a_pod_listed_on_another_node_is_refused() -> None:
    node = inventory("node-a", 80 * GIB)
    with pytest.raises(ValueError, match=r"allocation\.node must be 'node-a', got 'node-b'"):
        NodeView(node, {}, [running("node-b", "x", 0, (0, GIB, 10))])


# ----- properties against brute force ---------------------------------------------------------
def _fits_without(
    node: NodeInventory,
    pods: Sequence[RunningPod],
    gone: Sequence[RunningPod],
    request: PodRequest,
    quota: NamespaceQuota | None = None,
) -> bool:
    """Independently of the search: a fresh ledger without ``gone`` decides."""
    left = [p for p in pods if p.uid not in {g.uid for g in gone}]
    return loaded(node, left, quota).decide(request, [node.name]).fits


@st.composite
def scenes(draw: st.DrawFn) -> dict[str, Any]:
    """A node the engine itself filled with up to 7 pods, and a pending pod that mostly needs
    some of them gone."""
    memories = [draw(st.sampled_from((4000, 16000, 16000))) for _ in range(draw(st.integers(1, 3)))]
    node = inventory("node-x", *memories, slots=draw(st.integers(2, 5)))
    ledger = Ledger()
    ledger.set_node(node)
    pods: list[RunningPod] = []
    for n in range(draw(st.integers(0, 7))):
        container = ContainerRequest(
            name="main",
            gpus=draw(st.sampled_from((1, 1, 2))),
            memory_mib=draw(st.sampled_from((1000, 3000, 6000))),
            cores=draw(st.sampled_from((0, 20, 30, 100))),
        )
        namespace = draw(st.sampled_from(("ml", "other")))
        pod = PodRequest(uid=f"u{n}", name=f"p{n}", namespace=namespace, containers=[container])
        decision = ledger.decide(pod)
        if decision.allocation is None:
            continue
        ledger.try_commit(pod.uid, decision.allocation, namespace)
        pods.append(
            RunningPod(
                uid=pod.uid,
                namespace=namespace,
                name=pod.name,
                priority=draw(st.integers(0, 4)),
                started_s=draw(st.sampled_from((0.0, 10.0, 20.0))),
                evictable=draw(st.sampled_from((True, True, True, False))),
                allocation=decision.allocation,
            )
        )
    wanted = [
        ContainerRequest(
            name=f"c{i}",
            gpus=draw(st.sampled_from((1, 1, 2))),
            memory_mib=draw(st.sampled_from((2000, 5000, 9000, 12000, 16000))),
            cores=draw(st.sampled_from((0, 30, 60, 100))),
        )
        for i in range(draw(st.sampled_from((1, 1, 2))))
    ]
    request = PodRequest(
        uid="pending",
        name="pending",
        namespace="ml",
        containers=wanted,
        gpu_policy=draw(st.sampled_from(("binpack", "spread", "mutex"))),
    )
    quota = None
    if draw(st.integers(0, 3)) == 0:
        quota = NamespaceQuota(limits=QuotaLimits(memory_mib=draw(st.integers(4000, 30000))))
    return {
        "node": node,
        "pods": pods,
        "used": ledger.gpu_usage(node.name),
        "request": request,
        "priority": draw(st.integers(0, 6)),
        "quota": quota,
    }


def _quota_check(scene: dict[str, Any]) -> QuotaCheck | None:
    quota = scene["quota"]
    if quota is None:
        return None
    used = loaded(scene["node"], scene["pods"], quota).quotas()["ml"].used
    return QuotaCheck(namespace="ml", limits=quota.limits, used=used)


def cost(pods: Sequence[RunningPod]) -> tuple[int, list[int], list[float]]:
    """The issue's order, written out on its own: fewest pods; then priorities compared
    highest first; then start times compared oldest first, the later the better."""
    priorities = sorted((p.priority for p in pods), reverse=True)
    starts = sorted(p.started_s for p in pods)
    return (len(pods), priorities, [-s for s in starts])


def _best_by_brute_force(scene: dict[str, Any]) -> Any:
    """The cost of the best fitting set of evictable lower-priority pods (None: none)."""
    eligible = [p for p in scene["pods"] if p.priority < scene["priority"] and p.evictable]
    for size in range(len(eligible) + 1):
        ranks = [
            cost(chosen)
            for chosen in itertools.combinations(eligible, size)
            if _fits_without(scene["node"], scene["pods"], chosen, scene["request"], scene["quota"])
        ]
        if ranks:
            return min(ranks)
    return None


properties = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@properties
@given(scenes())
def test_the_chosen_set_makes_the_pod_fit_and_no_smaller_or_better_set_does(
    scene: dict[str, Any],
) -> None:
    node_view = NodeView(scene["node"], scene["used"], scene["pods"])
    answer = victims_on(node_view, scene["request"], scene["priority"], quota=_quota_check(scene))
    best = _best_by_brute_force(scene)
    if answer.victims is None:
        # Refusing is always allowed to a pod of several containers (the engine places them
        # greedily, so freeing everything may not fit when a part would): no eviction then.
        if len(scene["request"].containers) == 1:
            assert best is None, answer.reason
        assert answer.reason.startswith("node-x: ")
        return
    assert answer.exact
    assert _fits_without(
        scene["node"], scene["pods"], answer.victims, scene["request"], scene["quota"]
    )
    assert cost(answer.victims) == best


@st.composite
def crowds(draw: st.DrawFn) -> dict[str, Any]:
    """Full GPUs of many small pods, alike in size and often in priority and age, and a
    pending pod that needs several of them gone: where the order between sets decides."""
    node = inventory("node-x", *(16000,) * draw(st.integers(1, 2)), slots=8)
    pods = []
    for n in range(draw(st.integers(1, 8))):
        index = draw(st.integers(0, len(node.gpus) - 1))
        memory = draw(st.sampled_from((2000, 2000, 4000)))
        pods.append(
            running(
                "node-x",
                f"p{n}",
                draw(st.integers(0, 3)),
                (index, memory, 0),
                started=draw(st.sampled_from((0.0, 10.0, 20.0))),
                evictable=draw(st.sampled_from((True, True, True, False))),
            )
        )
    request = ask(draw(st.integers(2, 16)) * 1000 / GIB, cores=0)
    return {
        "node": node,
        "pods": pods,
        "used": loaded(node, pods).gpu_usage("node-x"),
        "request": request,
        "priority": 4,
        "quota": None,
    }


@properties
@given(crowds())
def test_among_crowded_pods_the_set_chosen_is_the_best_by_count_priority_and_age(
    scene: dict[str, Any],
) -> None:
    answer = victims_on(NodeView(scene["node"], scene["used"], scene["pods"]), scene["request"], 4)
    best = _best_by_brute_force(scene)
    assert (None if answer.victims is None else cost(answer.victims)) == best


@properties
@given(scenes())
def test_never_a_pod_of_equal_or_higher_priority_nor_one_its_budget_keeps(
    scene: dict[str, Any],
) -> None:
    node_view = NodeView(scene["node"], scene["used"], scene["pods"])
    plan = plan_preemption([node_view], scene["request"], scene["priority"])
    for pod in plan.victims:
        assert pod.priority < scene["priority"]
        assert pod.evictable
    never = plan_preemption([node_view], scene["request"], scene["priority"], policy="Never")
    assert never.victims == () and never.node is None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(scenes(), min_size=2, max_size=3))
def test_across_nodes_the_best_set_wins_and_ties_go_to_the_first_node(
    scenes_: list[dict[str, Any]],
) -> None:
    views = []
    ranks: list[Any] = []
    for number, scene in enumerate(scenes_):
        # One pending pod and priority for all nodes: the first scene's; nodes renamed apart.
        scene = {**scene, "request": scenes_[0]["request"], "priority": scenes_[0]["priority"]}
        scene["quota"] = None
        node, pods = _renamed(scene["node"], scene["pods"], f"node-{number}")
        scene = {**scene, "node": node, "pods": pods}
        views.append(view(node, pods))
        ranks.append(_best_by_brute_force(scene))
    plan = plan_preemption(views, scenes_[0]["request"], scenes_[0]["priority"])
    if plan.node is None:
        if len(scenes_[0]["request"].containers) == 1:
            assert all(r is None for r in ranks)
        return
    found = [r for r in ranks if r is not None]
    assert cost(plan.victims) == min(found)
    assert plan.node == f"node-{ranks.index(min(found))}"


def _renamed(
    node: NodeInventory, pods: Sequence[RunningPod], name: str
) -> tuple[NodeInventory, list[RunningPod]]:
    def uuid(old: str) -> str:
        return old.replace(node.name, name)

    inventory_ = node.model_copy(
        update={
            "name": name,
            "gpus": [g.model_copy(update={"uuid": uuid(g.uuid)}) for g in node.gpus],
        }
    )
    moved = []
    for pod in pods:
        containers = [
            c.model_copy(
                update={"gpus": [g.model_copy(update={"uuid": uuid(g.uuid)}) for g in c.gpus]}
            )
            for c in pod.allocation.containers
        ]
        allocation = Allocation(node=name, containers=containers)
        moved.append(
            RunningPod(
                uid=f"{name}/{pod.uid}",
                namespace=pod.namespace,
                name=pod.name,
                priority=pod.priority,
                started_s=pod.started_s,
                evictable=pod.evictable,
                allocation=allocation,
            )
        )
    return inventory_, moved
