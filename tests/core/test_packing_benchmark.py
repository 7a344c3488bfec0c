"""The packing simulation (benchmarks/packing.py): small seeded traces through the real engine.

These check what the benchmark is for: binpack keeps whole GPUs free for large slices, spread
really spreads, the FIFO queue skips ahead, and the figures are consistent with the ledger.
"""

from __future__ import annotations

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
