"""One table row per reason code: the smallest cluster that produces it, and only it."""

from typing import Any

import pytest
from core_builders import container, gpu, ledger, node, pod, used
from vslice_core.model import REASONS
from vslice_core.requests import pod_request

QUOTA = {"team": {"limits": {"memory_mib": 500, "cores": 40, "gpus": 1}}}

CASES: list[tuple[str, list[dict[str, Any]], dict[str, Any], dict[str, int]]] = [
    ("unhealthy", [gpu("G0", healthy=False, cordoned=True)], {}, {"unhealthy": 1}),
    ("cordoned", [gpu("G0", cordoned=True, used=used(slots=10))], {}, {"cordoned": 1}),
    (
        "type_mismatch",
        [gpu("G0")],
        {"annotations": {"vslice.io/gpu-type": "h100"}},
        {"type_mismatch": 1},
    ),
    (
        "type_mismatch",
        [gpu("G0")],
        {"annotations": {"vslice.io/gpu-type-exclude": "A100"}},
        {"type_mismatch": 1},
    ),
    (
        "uuid_mismatch",
        [gpu("G0")],
        {"annotations": {"vslice.io/gpu-uuid": "G9"}},
        {"uuid_mismatch": 1},
    ),
    (
        "uuid_mismatch",
        [gpu("G0")],
        {"annotations": {"vslice.io/gpu-uuid-exclude": "G0"}},
        {"uuid_mismatch": 1},
    ),
    (
        "slots_exhausted",
        [gpu("G0", slots=2, used=used(slots=2, memory_mib=81920))],
        {},
        {"slots_exhausted": 1},
    ),
    (
        "mutex_busy",
        [gpu("G0", used=used(memory_mib=10))],
        {"annotations": {"vslice.io/gpu-policy": "mutex"}},
        {"mutex_busy": 1},
    ),
    (
        "insufficient_memory",
        [gpu("G0", used=used(memory_mib=81000, cores=100))],
        {},
        {"insufficient_memory": 1},
    ),
    (
        "insufficient_cores",
        [gpu("G0", used=used(memory_mib=10, cores=80))],
        {},
        {"insufficient_cores": 1},
    ),
    (
        "exclusive_conflict",
        [gpu("G0", used=used(memory_mib=10))],
        {"cores": 100},
        {"exclusive_conflict": 1},
    ),
    (
        "cores_exhausted",
        [gpu("G0", used=used(memory_mib=10, cores=100))],
        {"cores": 0},
        {"cores_exhausted": 1},
    ),
    (
        "numa_mismatch",
        [gpu("G0", numa=0), gpu("G1", numa=1)],
        {"gpu": 2, "annotations": {"vslice.io/numa-bind": "true"}},
        {"numa_mismatch": 2},
    ),
    ("too_few_gpus", [gpu("G0")], {"gpu": 2}, {"too_few_gpus": 1}),
    (
        "too_few_gpus",
        [gpu("G0"), gpu("G1", healthy=False)],
        {"gpu": 2},
        {"unhealthy": 1, "too_few_gpus": 1},
    ),
    ("too_few_gpus", [], {}, {"too_few_gpus": 1}),
    ("quota_exceeded", [gpu("G0")], {"namespace": "team", "mem": 600}, {"quota_exceeded": 1}),
    ("quota_exceeded", [gpu("G0")], {"namespace": "team", "cores": 50}, {"quota_exceeded": 1}),
    (
        "quota_exceeded",
        [gpu("G0"), gpu("G1")],
        {"namespace": "team", "gpu": 2, "mem": 10, "cores": 0},
        {"quota_exceeded": 1},
    ),
]


def _pod(options: dict[str, Any]) -> dict[str, Any]:
    limits = {"mem": options.get("mem", 1000), "cores": options.get("cores", 30)}
    if "gpu" in options:
        limits["gpu"] = options["gpu"]
    return pod(
        container(**limits),
        annotations=options.get("annotations"),
        namespace=options.get("namespace", "default"),
    )


@pytest.mark.parametrize(("code", "gpus", "options", "expected"), CASES)
def test_each_reason_code_is_reported_for_the_gpus_it_rejects(
    code: str, gpus: list[dict[str, Any]], options: dict[str, Any], expected: dict[str, int]
) -> None:
    state = ledger(node("node-1", *gpus), quotas=QUOTA)
    decision = state.decide(pod_request(_pod(options)), explain=True)
    assert decision.node is None
    verdict = decision.nodes["node-1"]
    assert (verdict.fits, verdict.score, verdict.reasons) == (False, None, expected)
    assert code in verdict.reasons


def test_every_reason_code_has_a_table_row() -> None:
    assert {code for code, *_ in CASES} == set(REASONS)


def test_without_the_obstacle_each_case_fits() -> None:
    """Guards the table: the rows fail because of their obstacle, not because of the pod."""
    state = ledger(node("node-1", gpu("G0"), gpu("G1")), quotas=QUOTA)
    for _, _, options, _ in CASES:
        relaxed = {k: v for k, v in options.items() if k not in ("annotations", "namespace")}
        assert state.decide(pod_request(_pod(relaxed))).node == "node-1"


def test_checks_run_in_the_documented_order() -> None:
    full = used(slots=10, memory_mib=81920, cores=100)
    state = ledger(
        node(
            "node-1",
            gpu("G0", healthy=False, cordoned=True),
            gpu("G1", cordoned=True, used=full),
            gpu("G2", model="T4", used=full),
            gpu("G3", used=full),
            gpu("G4", used=used(slots=1, memory_mib=81920, cores=100)),
        )
    )
    manifest = pod(container(mem=1000, cores=10), annotations={"vslice.io/gpu-type-exclude": "t4"})
    verdict = state.decide(pod_request(manifest), explain=True).nodes["node-1"]
    assert verdict.reasons == {
        "unhealthy": 1,
        "cordoned": 1,
        "type_mismatch": 1,
        "slots_exhausted": 1,
        "insufficient_memory": 1,
    }


def test_reasons_of_a_later_container_see_what_earlier_containers_took() -> None:
    state = ledger(node("node-1", gpu("G0", memory_mib=1000)))
    manifest = pod(container("a", mem=600), container("b", mem=600))
    decision = state.decide(pod_request(manifest), explain=True)
    assert decision.nodes["node-1"].reasons == {"insufficient_memory": 1}


def test_a_node_with_fewer_gpus_than_asked_says_so_beside_the_gpu_reasons() -> None:
    state = ledger(node("node-1", gpu("G0", memory_mib=100)))
    decision = state.decide(pod_request(pod(container(gpu=2, mem=1000))), explain=True)
    assert decision.nodes["node-1"].reasons == {"insufficient_memory": 1, "too_few_gpus": 1}


def test_reasons_are_listed_in_check_order() -> None:
    state = ledger(node("node-1", gpu("G0", memory_mib=10), gpu("G1", healthy=False)))
    verdict = state.decide(pod_request(pod(container(gpu=3, mem=1000))), explain=True)
    assert list(verdict.nodes["node-1"].reasons) == [
        "unhealthy",
        "insufficient_memory",
        "too_few_gpus",
    ]
