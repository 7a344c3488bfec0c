"""The widgets' logic, driven in a plain Python process (no browser, no kernel)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from api_objects import A100, cluster_objects, node, pod
from vslice import InvalidRequest, Slice, VsliceError
from vslice.snapshot import ClusterSnapshot
from vslice.widgets import ANY_MODEL, ClusterView, SlicePicker


class ChangingCluster:
    """A source that returns a new snapshot each call, built from API-shaped objects."""

    def __init__(self) -> None:
        self.nodes, self.pods = cluster_objects()
        self.calls = 0
        self.fail = False

    def __call__(self) -> ClusterSnapshot:
        self.calls += 1
        if self.fail:
            raise VsliceError("apiserver unreachable")
        return ClusterSnapshot.read(self.nodes, self.pods)


def test_the_cluster_view_shows_one_bar_row_per_gpu_with_its_pods() -> None:
    view = ClusterView(source=ChangingCluster())
    rows = view.rows.children
    assert [bar.row.uuid for bar in rows] == ["GPU-node-a-0", "GPU-node-a-1", "GPU-node-b-0"]
    first = rows[0]
    assert (first.memory.value, first.memory.max) == (61440.0, 81920.0)
    assert (first.cores.value, first.cores.max) == (80.0, 100.0)
    assert first.memory_label.value == "60 GiB / 80 GiB"
    assert first.slots.value == "slots 2/4"
    assert "team-a/train" in first.pods.value and "team-b/infer" in first.pods.value
    assert first.cores.bar_style == "warning"
    assert "2 nodes, 3 GPUs" in view.header.value


def test_a_refresh_updates_bars_in_place_and_follows_new_gpus() -> None:
    source = ChangingCluster()
    view = ClusterView(source=source)
    kept = view.bars["GPU-node-a-1"]
    source.pods.append(pod("team-c", "new", "node-a", [("GPU-node-a-1", 1, 81920, 100)]))
    source.nodes.append(node("node-c", A100, 40960, 1))
    view.refresh()
    assert view.bars["GPU-node-a-1"] is kept
    assert kept.memory.value == 81920.0 and kept.memory.bar_style == "danger"
    assert [bar.row.node for bar in view.rows.children][-1] == "node-c"


def test_a_failed_refresh_is_shown_and_keeps_the_last_picture() -> None:
    source = ChangingCluster()
    view = ClusterView(source=source)
    source.fail = True
    view.refresh()
    assert "refresh failed" in view.status.value and "unreachable" in view.status.value
    assert len(view.rows.children) == 3


def test_the_timer_refreshes_until_stopped() -> None:
    source = ChangingCluster()
    view = ClusterView(source=source)
    refreshed = threading.Event()
    original = view.refresh

    def counting_refresh() -> None:
        original()
        if source.calls >= 3:
            refreshed.set()

    view.refresh = counting_refresh  # type: ignore[method-assign]
    view.start(0.05)
    assert refreshed.wait(5), "the timer never refreshed"
    assert view.running
    view.stop()
    assert not view.running
    calls = source.calls
    refreshed.wait(0.2)
    assert source.calls == calls


def test_the_cluster_view_needs_a_client_or_a_source() -> None:
    with pytest.raises(InvalidRequest, match="Client or a source"):
        ClusterView()


def test_picker_choices_come_from_the_cluster() -> None:
    picker = SlicePicker(source=ChangingCluster())
    labels = [label for label, _ in picker.model.options]
    assert labels == [ANY_MODEL, f"{A100} (up to 80 GiB free)", "Tesla-T4 (up to 5 GiB free)"]
    assert picker.memory.max == 81920
    assert picker.gpus.max == 2


def test_picker_shows_the_plan_and_enables_submit_only_when_it_fits() -> None:
    submitted: list[tuple[Slice, str, str]] = []
    picker = SlicePicker(
        source=ChangingCluster(), submit=lambda s, i, c: submitted.append((s, i, c)) or None
    )
    picker.model.value = "Tesla-T4"
    picker.memory.value = 4096
    assert picker.plan is not None and picker.plan.fits and picker.plan.node == "node-b"
    assert not picker.submit_button.disabled
    assert "fits on node-b" in picker.plan_view.value

    picker.memory.value = 8192
    assert picker.plan is not None and not picker.plan.fits
    assert picker.submit_button.disabled
    assert "insufficient_memory" in picker.plan_view.value
    assert picker.submit() is None and submitted == []


def test_picker_submits_the_slice_it_shows() -> None:
    submitted: list[tuple[Slice, str, str]] = []

    def submit(wanted: Slice, image: str, command: str) -> SimpleNamespace:
        submitted.append((wanted, image, command))
        return SimpleNamespace(name="vslice-abc12")

    picker = SlicePicker(source=ChangingCluster(), submit=submit)  # type: ignore[arg-type]
    picker.model.value = A100
    picker.memory.value = 10240
    picker.cores.value = 30
    picker.image.value = "busybox"
    picker.command.value = "sleep 1"
    handle = picker.submit()
    ((wanted, image, command),) = submitted
    assert handle is picker.workload and "vslice-abc12" in picker.status.value
    assert wanted == Slice(10240, cores=30, gpu_type=A100, gpu_policy="spread")
    assert (image, command) == ("busybox", "sleep 1")


def test_picker_without_a_submitter_only_plans() -> None:
    picker = SlicePicker(source=ChangingCluster())
    assert picker.plan is not None and picker.plan.fits
    assert picker.submit_button.disabled
