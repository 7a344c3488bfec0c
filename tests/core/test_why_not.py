"""Why a request does not fit, in words and numbers, and the engine's own suggestions."""

from __future__ import annotations

from core_builders import T4, container, gpu, ledger, node, request, used
from hypothesis import HealthCheck, given, settings
from test_placement_properties import clusters, requests
from vslice_core.cluster import Cluster, build_ledger
from vslice_core.model import Decision, PodRequest, Suggestion
from vslice_core.whynot import explain, render_plan

H100 = "NVIDIA-H100-80GB"


def _h100s(name: str, count: int, **fields: object) -> dict[str, object]:
    return node(name, *(gpu(f"{name}-{i}", model=H100, slots=4, **fields) for i in range(count)))


def _decide(pod: PodRequest, *nodes: dict[str, object]) -> Decision:
    return ledger(*nodes).decide(pod, explain=True, suggest=True)


def test_a_request_larger_than_any_gpu_names_the_card_size_not_free_memory() -> None:
    pod = request(container(mem=200 * 1024, cores=30))
    why = explain(_decide(pod, _h100s("node-a", 8)), pod)
    assert why.headline == ("does not fit: asks 200 GiB per GPU; the largest GPU here has 80 GiB")
    assert why.nodes == ["node-a: its largest GPU has 80 GiB, asks 200 GiB (memory, x8)"]
    assert why.suggestions == ["1 GPU with 80 GiB, 30% cores on node-a (GPU 0)"]
    assert "free" not in why.headline


def test_a_used_up_gpu_names_what_is_free_of_how_much() -> None:
    busy = node(
        "node-b",
        gpu("B0", model=H100, used=used(memory_mib=70 * 1024, cores=50)),
        gpu("B1", model=H100, used=used(memory_mib=68 * 1024, cores=20)),
    )
    pod = request(container(mem=20 * 1024, cores=30))
    decision = _decide(pod, busy)
    why = explain(decision, pod)
    assert (
        why.headline == "does not fit: asks 1 GPU with 20 GiB, 30% cores; no node has that free now"
    )
    assert why.nodes == ["node-b: the most free is 12 GiB on GPU 1, of 80 GiB (memory, x2)"]
    assert why.suggestion_line() == "would fit now: 1 GPU with 12 GiB, 30% cores on node-b (GPU 1)"
    room = decision.nodes["node-b"].room
    assert room is not None and (room.free_mib, room.free_gpu) == (12 * 1024, 1)


def test_more_gpus_than_any_node_has_says_so_and_offers_the_most_that_fit() -> None:
    pod = request(container(gpu=9, mem=1024))
    why = explain(_decide(pod, _h100s("node-a", 8), _h100s("node-b", 2)), pod)
    assert why.headline == "does not fit: asks 9 GPUs on one node; the most any node has is 8"
    assert "node-a: asks 9 GPUs, 8 of its 8 can take it" in why.nodes
    assert why.suggestions == [
        "8 GPUs instead of 9 on node-a (GPU 0, 1, 2, 3, 4, 5, 6, 7)",
    ]


def test_a_type_filter_that_rules_out_the_big_cards_suggests_dropping_it() -> None:
    t4 = node("node-t4", gpu("T0", model=T4, memory_mib=15360))
    pod = request(container(mem=20 * 1024), annotations={"vslice.io/gpu-type": "t4"})
    why = explain(_decide(pod, t4, _h100s("node-a", 1)), pod)
    assert why.headline.endswith("asks 20 GiB per GPU; the largest matching GPU here has 15 GiB")
    assert "node-a: 1 of 1 GPU not a wanted model (gpu_type)" in why.nodes
    assert why.suggestions[-1] == (
        "without the GPU type filter on node-a (GPU 0, NVIDIA-H100-80GB)"
    )


def test_full_slots_and_whole_gpu_conflicts_are_counted_in_words() -> None:
    full = node("node-f", gpu("F0", slots=2, used=used(slots=2, memory_mib=1024)))
    shared = node("node-s", gpu("S0", used=used(slots=1, memory_mib=1024, cores=10)))
    pod = request(container(gpu=1))  # no memory: the whole GPU, exclusively
    why = explain(_decide(pod, full, shared), pod)
    assert why.headline == "does not fit: asks 1 whole GPU; no node has that free now"
    assert why.nodes == [
        "node-f: every slice slot taken on 1 of 1 GPU (slots)",
        "node-s: the most free is 79 GiB on GPU 0, of 80 GiB (memory)",
    ]
    # The shared GPU can still give a slice of what is left.
    assert why.suggestions == ["1 GPU with 79 GiB, 90% cores on node-s (GPU 0)"]


def test_a_fitting_request_has_no_why_not_and_renders_its_grant() -> None:
    pod = request(container(mem=10 * 1024, cores=20))
    decision = _decide(pod, _h100s("node-a", 1))
    why = explain(decision, pod)
    assert why.fits and why.headline == "fits on node-a" and why.nodes == []
    assert render_plan(decision, pod).splitlines()[:2] == [
        "1 GPU with 10 GiB, 20% cores: fits on node-a",
        "  main: GPU 0 node-a-0, 10 GiB, 20% cores",
    ]


def test_several_gpu_containers_get_reasons_but_no_suggestion() -> None:
    pod = request(container("a", mem=60 * 1024), container("b", mem=60 * 1024))
    decision = _decide(pod, _h100s("node-a", 1))
    why = explain(decision, pod)
    assert not why.fits and why.suggestions == [] and decision.suggestions == []
    assert why.headline == (
        "does not fit: asks a: 1 GPU with 60 GiB; b: 1 GPU with 60 GiB; no node has that free now"
    )


def test_one_line_joins_the_cause_and_the_best_suggestion() -> None:
    pod = request(container(mem=200 * 1024))
    line = explain(_decide(pod, _h100s("node-a", 1)), pod).one_line()
    assert "\n" not in line
    assert line == (
        "does not fit: asks 200 GiB per GPU; the largest GPU here has 80 GiB; "
        "would fit now: 1 GPU with 80 GiB on node-a (GPU 0)"
    )


def test_an_empty_cluster_says_there_is_nothing_to_place_on() -> None:
    pod = request(container(mem=1024))
    assert explain(_decide(pod), pod).headline == (
        "does not fit: the cluster has no node with vslice GPUs"
    )


def _applied(pod: PodRequest, suggestion: Suggestion) -> PodRequest:
    changed = pod.containers[0].model_copy(
        update={
            "gpus": suggestion.gpus,
            "memory_mib": None if suggestion.memory_percent else suggestion.memory_mib,
            "memory_percent": suggestion.memory_percent,
            "cores": suggestion.cores,
        }
    )
    update: dict[str, object] = {"containers": [changed]}
    if suggestion.change == "other_type":
        update |= {"gpu_types": [], "gpu_types_exclude": []}
    return pod.model_copy(update=update)


@given(clusters(), requests())
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_suggestion_fits_where_it_says_when_applied(
    cluster: Cluster, pod: PodRequest
) -> None:
    book = build_ledger(cluster)
    decision = book.decide(pod, explain=True, suggest=True)
    if decision.fits or len(pod.containers) != 1:
        assert decision.suggestions == []
        return
    why = explain(decision, pod)
    assert why.headline.startswith("does not fit: ")
    assert len(why.nodes) == len(decision.nodes)
    for suggestion in decision.suggestions:
        retry = book.decide(_applied(pod, suggestion), [suggestion.node], explain=True)
        assert retry.fits, (suggestion, retry.nodes)
        granted = [g.index for c in retry.allocation.containers for g in c.gpus]  # type: ignore[union-attr]
        assert len(granted) == suggestion.gpus


def test_a_request_larger_than_the_whole_quota_says_so_and_offers_what_the_quota_allows() -> None:
    small = node("node-t4", gpu("T0", model=T4, memory_mib=15360))
    pod = request(container(mem=80 * 1024, cores=30), namespace="team-a")
    book = ledger(_h100s("node-a", 1), small, quotas={"team-a": {"limits": {"memory_mib": 40960}}})
    why = explain(book.decide(pod, explain=True, suggest=True), pod)
    assert why.headline == (
        "does not fit: asks 80 GiB of GPU memory, the quota of namespace team-a allows 40 GiB "
        "in all (nothing in use)"
    )
    assert "used up" not in why.text()
    assert "node-a: its GPUs have room, the namespace quota does not: asks 80 GiB of GPU " in (
        why.text()
    )
    # The largest slice the quota leaves room for, on a GPU that has it (not the 15 GiB T4).
    assert why.suggestions == ["1 GPU with 40 GiB, 30% cores on node-a (GPU 0)"]


def test_a_quota_with_too_little_left_says_what_is_left_of_how_much() -> None:
    quota = {"team-a": {"limits": {"memory_mib": 40960}, "used": {"memory_mib": 32768}}}
    pod = request(container(mem=10 * 1024, cores=30), namespace="team-a")
    book = ledger(_h100s("node-a", 1), quotas=quota)
    why = explain(book.decide(pod, explain=True, suggest=True), pod)
    assert why.headline == (
        "does not fit: asks 10 GiB of GPU memory, the quota of namespace team-a has 8 GiB left "
        "(32 GiB of 40 GiB in use)"
    )
    assert why.suggestions == ["1 GPU with 8 GiB, 30% cores on node-a (GPU 0)"]


def test_running_pods_of_the_namespace_count_as_in_use() -> None:
    book = ledger(_h100s("node-a", 2), quotas={"team-a": {"limits": {"gpus": 2}}})
    running = request(container(gpu=2, mem=1024), namespace="team-a", name="running")
    decision = book.decide(running)
    assert decision.allocation is not None
    book.try_commit("uid-running", decision.allocation, "team-a")
    pod = request(container(mem=1024), namespace="team-a")
    why = explain(book.decide(pod, explain=True, suggest=True), pod)
    assert why.headline == (
        "does not fit: asks 1 GPU slice, the quota of namespace team-a has 0 left (2 of 2 in use)"
    )
    assert why.suggestions == []


def test_a_cores_quota_is_counted_in_percent() -> None:
    book = ledger(_h100s("node-a", 1), quotas={"team-a": {"limits": {"cores": 20}}})
    pod = request(container(mem=1024, cores=30), namespace="team-a")
    why = explain(book.decide(pod, explain=True, suggest=True), pod)
    assert why.headline == (
        "does not fit: asks 30% cores, the quota of namespace team-a allows 20% in all "
        "(nothing in use)"
    )
    assert why.suggestions == ["1 GPU with 80 GiB, 20% cores on node-a (GPU 0)"]


def test_a_gpu_prints_the_same_in_tables_and_why_not_texts() -> None:
    from vslice_core.quantities import format_gib, format_mib

    a10 = 23028  # MiB: 22.49 GiB, shown rounded down everywhere
    assert (format_gib(a10, decimal=True), format_mib(a10)) == ("22.4", "22.4 GiB")
    pod = request(container(mem=30 * 1024))
    why = explain(
        _decide(pod, node("node-a10", gpu("A0", model="NVIDIA A10", memory_mib=a10))), pod
    )
    assert why.headline.endswith("the largest GPU here has 22.4 GiB")


def test_quota_amounts_that_would_print_alike_are_shown_in_mib() -> None:
    quota = {"team-a": {"limits": {"memory_mib": 81920}, "used": {"memory_mib": 40930}}}
    pod = request(container(mem=41000), namespace="team-a")
    book = ledger(_h100s("node-a", 1), quotas=quota)
    why = explain(book.decide(pod, explain=True), pod)
    assert why.headline == (
        "does not fit: asks 41000 MiB of GPU memory, the quota of namespace team-a has "
        "40990 MiB left (39.9 GiB of 80 GiB in use)"
    )


def test_a_quota_already_past_its_limit_has_nothing_left() -> None:
    quota = {"team-a": {"limits": {"memory_mib": 10240}, "used": {"memory_mib": 12288}}}
    pod = request(container(mem=1024), namespace="team-a")
    why = explain(ledger(_h100s("node-a", 1), quotas=quota).decide(pod, explain=True), pod)
    assert why.headline == (
        "does not fit: asks 1 GiB of GPU memory, the quota of namespace team-a has 0 MiB left "
        "(12 GiB of 10 GiB in use)"
    )
