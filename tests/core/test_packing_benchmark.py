"""The packing simulation (benchmarks/packing.py): small seeded traces through the real engine.

These check what the benchmark is for: binpack keeps whole GPUs free for large slices, spread
really spreads, the FIFO queue skips ahead, and the figures are consistent with the ledger.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("packing", ROOT / "benchmarks" / "packing.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["packing"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


packing = _load()
A100 = packing.NodeType("NVIDIA-A100-SXM4-80GB", 81920, 10, 2, gpus=4)
HOUR = 3600.0


def notebook(uid: str, at: float, gib: int = 8, hours: float = 10) -> Any:
    return packing.Workload(uid, "notebook", at, hours * HOUR, 1, gib * 1024, 10)


def whole_a100(uid: str, at: float, gpus: int = 1) -> Any:
    return packing.Workload(uid, "training", at, 10 * HOUR, gpus, 81920, 100)


def fragmenting_trace() -> list[Any]:
    """Eight small notebooks, then four jobs that each need a whole idle A100."""
    small = [notebook(f"nb-{i}", i * 10.0) for i in range(8)]
    large = [whole_a100(f"big-{i}", 100.0 + i) for i in range(4)]
    return [*small, *large]


def test_binpack_keeps_whole_gpus_free_for_large_slices_that_spread_fragments() -> None:
    nodes = packing.fleet([A100])
    trace = fragmenting_trace()
    binpack = packing.simulate(trace, nodes, "binpack", horizon_s=HOUR)
    spread = packing.simulate(trace, nodes, "spread", horizon_s=HOUR)
    assert binpack.large_admitted == 4
    assert spread.large_admitted == 0  # one notebook on each of the 8 GPUs
    assert binpack.large_admitted > spread.large_admitted
    assert spread.stranded > binpack.stranded


def test_spread_balances_node_load_better_than_binpack_on_a_seeded_trace() -> None:
    nodes = packing.fleet([packing.NodeType("NVIDIA-A100-SXM4-80GB", 81920, 10, 4, gpus=4)])
    trace = packing.synthetic_trace(seed=5, hours=3, rate_per_hour=12)
    binpack = packing.simulate(trace, nodes, "binpack", horizon_s=3 * HOUR)
    spread = packing.simulate(trace, nodes, "spread", horizon_s=3 * HOUR)
    assert spread.node_var < binpack.node_var / 2
    assert len({spread.started[w.uid] for w in trace if w.uid in spread.started}) == 4


def test_a_small_workload_skips_ahead_of_a_large_one_that_does_not_fit() -> None:
    nodes = packing.fleet([packing.NodeType("NVIDIA-A100-SXM4-80GB", 81920, 10, 1, gpus=1)])
    trace = [notebook("first", 0.0, hours=2), whole_a100("big", 10.0), notebook("small", 20.0)]
    result = packing.simulate(trace, nodes, "binpack", horizon_s=HOUR)
    assert set(result.started) == {"first", "small"}
    assert result.wait_mean_s == pytest.approx((0 + (HOUR - 10) + 0) / 3)


def test_a_departure_starts_the_queue_in_arrival_order() -> None:
    nodes = packing.fleet([packing.NodeType("NVIDIA-A100-SXM4-80GB", 81920, 10, 1, gpus=1)])
    holder = packing.Workload("holder", "training", 0.0, 100.0, 1, 81920, 100)
    trace = [holder, notebook("a", 1.0, gib=60), notebook("b", 2.0, gib=60)]
    sim = packing.Simulation(nodes, "binpack", horizon_s=HOUR)
    result = sim.run(trace)
    assert set(result.started) == {"holder", "a"}  # b (60 GiB) no longer fits beside a
    assert [w.uid for w in sim.queue] == ["b"]


def test_whole_gpus_use_less_memory_than_slices_and_no_policy_beats_the_bound() -> None:
    nodes = packing.fleet([packing.NodeType("NVIDIA-L4", 23034, 4, 2, gpus=4), A100])
    trace = packing.synthetic_trace(seed=11, hours=4, rate_per_hour=40)
    results = {p: packing.simulate(trace, nodes, p, horizon_s=4 * HOUR) for p in packing.POLICIES}
    assert results["whole-gpu"].mem_util < results["binpack"].mem_util
    assert results["whole-gpu"].alloc_util > results["whole-gpu"].mem_util
    for result in results.values():
        assert 0 < result.of_bound <= 1.0 + 1e-9
        assert result.admitted <= result.arrivals


def test_the_tracked_usage_matches_the_ledger_after_a_run() -> None:
    nodes = packing.fleet([packing.NodeType("NVIDIA-L4", 23034, 4, 2, gpus=4), A100])
    trace = packing.synthetic_trace(seed=3, hours=4, rate_per_hour=40)
    sim = packing.Simulation(nodes, "spread", horizon_s=4 * HOUR)
    sim.run(trace)
    for node in nodes:
        usage = sim.ledger.gpu_usage(node.name)
        for gpu in node.gpus:
            view = sim.gpus[gpu.uuid]
            assert (usage[gpu.uuid].memory_mib, usage[gpu.uuid].slots) == (
                view.used_memory,
                view.used_slots,
            )


def test_the_trace_is_seeded() -> None:
    first = packing.synthetic_trace(seed=7, hours=2, rate_per_hour=50)
    assert first == packing.synthetic_trace(seed=7, hours=2, rate_per_hour=50)
    assert first != packing.synthetic_trace(seed=8, hours=2, rate_per_hour=50)
    assert all(0 <= w.arrival_s < 2 * HOUR for w in first)


def test_an_unknown_policy_names_the_choices() -> None:
    nodes = packing.fleet([A100])
    with pytest.raises(ValueError, match="whole-gpu, binpack, spread, got 'tetris'"):
        packing.request_for(notebook("x", 0.0), "tetris", nodes)


def test_on_a_mixed_fleet_binpack_puts_notebooks_on_the_small_gpus_and_keeps_a100s_whole() -> None:
    # One node of 4 A100s, one of 4 L4s: four 8 GiB notebooks, then four whole-A100 jobs. By
    # share of memory in use, binpack sent every notebook to the A100 node (the first on the
    # name tie, the rest as it was then the fuller) and left three whole A100s (measured on
    # the engine before); by GPU size it fills the L4s first.
    l4 = packing.NodeType("NVIDIA-L4", 23034, 4, 1, gpus=4)
    nodes = packing.fleet([packing.NodeType("NVIDIA-A100-SXM4-80GB", 81920, 10, 1, gpus=4), l4])
    small = [notebook(f"nb-{i}", i * 10.0) for i in range(4)]
    trace = [*small, *(whole_a100(f"big-{i}", 100.0 + i) for i in range(4))]
    results = {p: packing.simulate(trace, nodes, p, horizon_s=HOUR) for p in packing.POLICIES}
    for policy in ("binpack", "default"):
        assert results[policy].large_admitted == 4
        assert {results[policy].started[w.uid] for w in small} == {"l4-000"}
        assert results[policy].large_admitted >= results["spread"].large_admitted


def test_the_split_fleet_has_both_models_in_every_node() -> None:
    nodes = packing.fleet(packing.FLEETS["split"])
    assert len(nodes) == 50 and nodes[0].name == "a100l4-000"
    assert [gpu.memory_mib for gpu in nodes[0].gpus] == [81920] * 4 + [23034] * 4


def training(uid: str, at: float, gib: int = 80, hours: float = 10, gpus: int = 1) -> Any:
    cores = 100 if gib >= 80 else 50
    return packing.Workload(
        uid, "training", at, hours * HOUR, gpus, gib * 1024, cores, priority=packing.HIGH_PRIORITY
    )


def test_the_trace_marks_training_jobs_high_and_notebooks_idle_without_changing_the_rest() -> None:
    marked = packing.synthetic_trace(seed=7, hours=3, rate_per_hour=60)
    plain = packing.synthetic_trace(seed=7, hours=3, rate_per_hour=60, priorities=False)
    assert [w.uid for w in marked] == [w.uid for w in plain]
    for w, p in zip(marked, plain, strict=True):
        assert (w.arrival_s, w.duration_s, w.gpus, w.memory_mib, w.cores) == (
            p.arrival_s,
            p.duration_s,
            p.gpus,
            p.memory_mib,
            p.cores,
        )
        if w.kind == "training":
            assert (w.priority, w.idle_from_s) == (packing.HIGH_PRIORITY, None)
        else:
            assert w.priority == 0 and w.idle_from_s is not None
            assert 0.3 * w.duration_s <= w.idle_from_s <= 0.9 * w.duration_s


def test_preemption_starts_a_high_priority_job_that_notebooks_keep_waiting() -> None:
    # One A100 full of notebooks for ten hours; a whole-GPU training job arrives after them.
    nodes = packing.fleet([packing.NodeType("NVIDIA-A100-SXM4-80GB", 81920, 10, 1, gpus=1)])
    trace = [notebook(f"nb-{i}", i * 1.0, gib=20) for i in range(4)] + [training("job", 60.0)]
    without = packing.simulate(trace, nodes, "default", horizon_s=HOUR)
    with_ = packing.simulate(trace, nodes, "default", horizon_s=HOUR, preempt=True)
    assert without.waits["job"] == pytest.approx(HOUR - 60)
    assert with_.waits["job"] == 0
    assert with_.started["job"] == "a100-000" and with_.evicted == 4
    # The evicted notebooks wait from then on (they cannot come back beside a whole GPU).
    assert all(with_.waits[f"nb-{i}"] == pytest.approx(HOUR - 60) for i in range(4))
    line = packing.preemption_line(trace, without, with_)
    assert "high_jobs=1 wait_mean_s=3540 -> 0" in line and "evicted=4" in line


def test_preemption_evicts_the_fewest_notebooks_and_never_a_job_of_equal_priority() -> None:
    nodes = packing.fleet([packing.NodeType("NVIDIA-A100-SXM4-80GB", 81920, 10, 1, gpus=1)])
    # 74 GiB and 70 % cores taken; the urgent job needs 36 GiB and 40 %: only evicting the
    # 30 GiB notebook (or the running job, of its own priority) alone makes room.
    urgent = dataclasses.replace(training("urgent", 60.0, gib=36), cores=40)
    trace = [
        training("running-job", 0.0, gib=40),
        notebook("nb-small", 1.0, gib=4),
        notebook("nb-big", 2.0, gib=30),
        urgent,
    ]
    result = packing.simulate(trace, nodes, "default", horizon_s=HOUR, preempt=True)
    assert result.evicted == 1
    assert result.waits["urgent"] == 0
    assert result.waits["nb-big"] == pytest.approx(HOUR - 60)
    assert result.waits["nb-small"] == 0 and result.waits["running-job"] == 0


def test_without_preemption_nothing_is_evicted_and_the_policy_lines_stay_as_they_were() -> None:
    nodes = packing.fleet([packing.NodeType("NVIDIA-L4", 23034, 4, 2, gpus=4), A100])
    trace = packing.synthetic_trace(seed=11, hours=4, rate_per_hour=60)
    plain = packing.synthetic_trace(seed=11, hours=4, rate_per_hour=60, priorities=False)
    marked = packing.simulate(trace, nodes, "binpack", horizon_s=4 * HOUR)
    unmarked = packing.simulate(plain, nodes, "binpack", horizon_s=4 * HOUR)
    assert marked.line() == unmarked.line()
    assert marked.evicted == 0 and marked.reclaimed_gib_h == 0


def test_on_a_loaded_seeded_trace_preemption_cuts_the_high_priority_wait() -> None:
    nodes = packing.fleet([packing.NodeType("NVIDIA-A100-SXM4-80GB", 81920, 10, 2, gpus=4)])
    trace = packing.synthetic_trace(seed=4, hours=6, rate_per_hour=30)
    without = packing.simulate(trace, nodes, "default", horizon_s=6 * HOUR)
    with_ = packing.simulate(trace, nodes, "default", horizon_s=6 * HOUR, preempt=True)
    high = {w.uid for w in trace if w.priority > 0}
    low = {w.uid for w in trace if w.priority == 0}
    assert without.wait_of(high)[0] > 0  # the trace needs it: jobs wait without preemption
    assert with_.wait_of(high)[0] < without.wait_of(high)[0]
    assert with_.evicted > 0
    assert with_.wait_of(low)[0] >= without.wait_of(low)[0]  # the notebooks pay for it


def test_the_idle_reclaim_returns_what_idle_notebooks_held_past_the_threshold() -> None:
    nodes = packing.fleet([packing.NodeType("NVIDIA-A100-SXM4-80GB", 81920, 10, 1, gpus=1)])
    # Active one hour, then idle for nine: a reclaim after two idle hours returns seven hours
    # of 8 GiB (cut at the horizon of eight hours: five).
    idle = dataclasses.replace(notebook("nb", 0.0, gib=8, hours=10), idle_from_s=HOUR)
    busy = notebook("busy", 0.0, gib=8, hours=10)  # never idle: never reclaimed
    without = packing.simulate([idle, busy], nodes, "default", horizon_s=8 * HOUR)
    reclaimed = packing.simulate(
        [idle, busy], nodes, "default", horizon_s=8 * HOUR, reclaim_idle_s=2 * HOUR
    )
    assert without.idle_gib_h == pytest.approx(8 * 7)  # idle from hour 1 to the horizon
    assert reclaimed.reclaimed_gib_h == pytest.approx(8 * 5)
    assert reclaimed.idle_gib_h == pytest.approx(8 * 2)
    line = packing.idle_line(without, reclaimed, 2)
    assert "after_h=2 returned_gib_h=40 idle_gib_h=56" in line


def test_the_reclaimed_room_starts_a_queued_workload_sooner() -> None:
    nodes = packing.fleet([packing.NodeType("NVIDIA-A100-SXM4-80GB", 81920, 10, 1, gpus=1)])
    idle = dataclasses.replace(notebook("nb", 0.0, gib=60, hours=10), idle_from_s=HOUR)
    waiting = notebook("next", 10.0, gib=60, hours=1)
    without = packing.simulate([idle, waiting], nodes, "default", horizon_s=4 * HOUR)
    reclaimed = packing.simulate(
        [idle, waiting], nodes, "default", horizon_s=4 * HOUR, reclaim_idle_s=HOUR
    )
    assert without.waits["next"] == pytest.approx(4 * HOUR - 10)
    assert reclaimed.waits["next"] == pytest.approx(2 * HOUR - 10)
