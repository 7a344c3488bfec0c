"""The widgets' logic, driven in a plain Python process (no browser, no kernel)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from api_objects import A100, cluster_objects, node, pod
from vslice import ClusterError, InvalidRequest, Slice, VsliceError
from vslice.snapshot import ClusterSnapshot
from vslice.widgets import ANY_MODEL, ClusterView, PodFollower, SlicePicker, pod_status
from vslice_core.annotations import IDLE_RECLAIM_AT, IDLE_SINCE, encode_moment


def pending_pod(namespace: str, name: str, memory_mib: int) -> dict[str, Any]:
    """A pod asking for one GPU slice that no scheduler has placed."""
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(memory_mib)}
    return {
        "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
        "status": {"phase": "Pending"},
    }


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


class FakeWorkload:
    """A submitted pod whose states come from a list, one per read (the last one repeats); an
    exception in the list is what that read raises, as ``Workload.pod`` raises it."""

    def __init__(
        self, *pods: dict[str, Any] | Exception | None, nodes: dict[str, Any] | None = None
    ) -> None:
        self.name, self.namespace = "vslice-abc12", "team-a"
        self.pods = list(pods)
        self.nodes = nodes or {}
        self.reads = 0
        self.node_reads: list[str] = []

    def pod(self) -> dict[str, Any] | None:
        self.reads += 1
        found = self.pods[min(self.reads, len(self.pods)) - 1]
        if isinstance(found, Exception):
            raise found
        return found

    def read_node(self, name: str) -> dict[str, Any] | None:
        self.node_reads.append(name)
        found: dict[str, Any] | None = self.nodes.get(name)
        return found


def eventually(check: Any, seconds: float = 5.0) -> bool:
    """Whether ``check()`` becomes true within ``seconds`` (the follower is a thread)."""
    stop = threading.Event()
    for _ in range(int(seconds / 0.01)):
        if check():
            return True
        stop.wait(0.01)
    return bool(check())


def phase(name: str, node_name: str | None = None) -> dict[str, Any]:
    return {"spec": {"nodeName": node_name}, "status": {"phase": name}}


# --- ClusterView -------------------------------------------------------------------------


def test_the_cluster_view_shows_one_bar_row_per_gpu_with_its_pods() -> None:
    view = ClusterView(source=ChangingCluster())
    rows = view.rows.children
    assert [bar.row.uuid for bar in rows] == ["GPU-node-a-0", "GPU-node-a-1", "GPU-node-b-0"]
    first = rows[0]
    assert (first.memory.value, first.memory.max) == (61440.0, 81920.0)
    assert (first.cores.value, first.cores.max) == (80.0, 100.0)
    assert first.memory_label.value == "60 / 80 GiB"
    assert first.cores_label.value == "80%"
    assert first.slots.value == "2/4"
    assert "team-a/train" in first.pods.value and "team-b/infer" in first.pods.value
    assert first.cores.bar_style == "warning"
    assert "2 nodes, 3 GPUs" in view.header.value


def test_every_bar_has_a_tooltip_with_each_pods_share() -> None:
    first = ClusterView(source=ChangingCluster()).rows.children[0]
    assert first.memory.tooltip.splitlines() == [
        "memory: 60 GiB of 80 GiB allocated",
        "team-a/train: 40 GiB, 50% cores",
        "team-b/infer: 20 GiB, 30% cores",
    ]
    assert "team-a/train: 40 GiB, 50% cores" in first.cores.tooltip
    assert 'title="team-b/infer: 20 GiB, 30% cores"' in first.pods.value
    assert "40 GiB, 50%" in first.pods.value


def test_an_idle_pod_shows_how_long_and_when_it_is_given_back() -> None:
    source = ChangingCluster()
    notes = source.pods[0]["metadata"]["annotations"]  # team-a/train
    since = datetime.now(UTC) - timedelta(hours=4, minutes=2)
    notes[IDLE_SINCE] = encode_moment(since)
    notes[IDLE_RECLAIM_AT] = encode_moment(datetime(2030, 1, 2, 3, 4, tzinfo=UTC))
    first = ClusterView(source=source).rows.children[0]
    assert 'class="vslice-idle"' in first.pods.value
    assert "idle 4h02m, evicted at 2030-01-02 03:04 UTC unless it launches a kernel" in (
        first.pods.value
    )
    assert first.pods.value.count("vslice-idle") == 1  # team-b/infer is busy
    assert "team-a/train: 40 GiB, 50% cores; idle 4h02m" in first.memory.tooltip


def described(root: Any) -> list[Any]:
    from ipywidgets.widgets.widget_description import DescriptionWidget

    found, stack = [], [root]
    while stack:
        widget = stack.pop()
        if isinstance(widget, DescriptionWidget):
            found.append(widget)
        stack.extend(getattr(widget, "children", ()))
    return found


def test_no_label_gets_a_null_hover_text_in_either_widget() -> None:
    """JupyterLab shows a tooltip of None as the text "null" on every label."""
    cluster = ChangingCluster()
    view = ClusterView(source=cluster)
    picker = SlicePicker(source=cluster)
    for root in (view, picker):
        labels = described(root)
        assert len(labels) >= 10
        assert [x for x in labels if x.tooltip is None] == []
    view.refresh()  # bars built by a later refresh too
    assert [x for x in described(view) if x.tooltip is None] == []


def test_columns_have_headers_fixed_widths_and_a_legend() -> None:
    view = ClusterView(source=ChangingCluster())
    headers = [h.value for h in view.columns.children]
    assert headers[:4] == ["<b>GPU</b>", "<b>memory (GiB)</b>", "<b>cores</b>", "<b>slots</b>"]
    widths = {tuple(c.layout.width for c in bar.children[:6]) for bar in view.rows.children}
    assert len(widths) == 1 and all(w.endswith("px") for w in widths.pop())
    assert "GiB allocated / GPU memory" in view.legend.value and "full" in view.legend.value


def test_the_cluster_view_lists_pending_pods_with_the_engines_reason() -> None:
    source = ChangingCluster()
    source.pods.append(pending_pod("team-c", "huge", 102400))
    view = ClusterView(source=source)
    assert [p.holder for p in view.pending_pods] == ["team-c/huge"]
    assert "Pending (1)" in view.pending.value and "team-c/huge" in view.pending.value
    assert "1 GPU, 100 GiB</span>" in view.pending.value
    assert "asks 100 GiB" in view.pending.value  # the reason names what the pod asks
    reason = view.pending_pods[0].plan.why_not().splitlines()[0]
    assert reason and reason in view.pending.value.replace("&#x27;", "'")
    assert "1 pending" in view.header.value


def test_without_pending_pods_the_view_says_so() -> None:
    view = ClusterView(source=ChangingCluster())
    assert view.pending_pods == [] and "No pod waits for a GPU" in view.pending.value


def test_a_refresh_updates_bars_in_place_and_follows_new_gpus() -> None:
    source = ChangingCluster()
    view = ClusterView(source=source)
    kept = view.bars["GPU-node-a-1"]
    source.pods.append(pod("team-c", "new", "node-a", [("GPU-node-a-1", 1, 81920, 100)]))
    source.nodes.append(node("node-c", A100, 40960, 1))
    view.refresh_button.click()
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


# --- SlicePicker ---------------------------------------------------------------------------


def test_picker_choices_come_from_the_cluster() -> None:
    picker = SlicePicker(source=ChangingCluster())
    labels = [label for label, _ in picker.model.options]
    assert labels == [ANY_MODEL, f"{A100} (up to 80 GiB free)", "Tesla-T4 (up to 5 GiB free)"]
    assert picker.memory.description == "memory GiB" and picker.memory.max == 80.0
    assert picker.gpus.max == 2


def test_the_memory_range_follows_the_chosen_model() -> None:
    picker = SlicePicker(source=ChangingCluster())
    picker.memory.value = 40.0
    picker.model.value = "Tesla-T4"
    assert picker.memory.max == 15.0 and picker.memory.value == 15.0
    assert picker.gpus.max == 1
    assert picker.plan is not None and picker.plan.slice == picker.slice
    assert picker.slice is not None and picker.slice.memory_mib == 15 * 1024
    picker.model.value = ""
    assert picker.memory.max == 80.0


def test_picker_shows_the_plan_and_enables_submit_only_when_it_fits() -> None:
    submitted: list[tuple[Slice, str, str]] = []
    picker = SlicePicker(
        source=ChangingCluster(),
        submit=lambda s, i, c: submitted.append((s, i, c)) or FakeWorkload(),  # type: ignore[arg-type,func-returns-value]
    )
    picker.model.value = "Tesla-T4"
    picker.memory.value = 4.0
    assert picker.plan is not None and picker.plan.fits and picker.plan.node == "node-b"
    assert not picker.submit_button.disabled
    assert "fits on node-b" in picker.plan_view.value
    assert "node-b" in picker.verdict.value and "GPU 0: 4 GiB, 25% cores" in picker.verdict.value

    picker.memory.value = 8.0
    assert picker.plan is not None and not picker.plan.fits
    assert picker.submit_button.disabled
    assert "insufficient_memory" in picker.plan_view.value
    assert picker.submit() is None and submitted == []


def test_the_why_not_text_shows_as_lines_not_escapes() -> None:
    picker = SlicePicker(source=ChangingCluster())
    picker.memory.value = 80.0
    picker.gpus.value = 2
    assert picker.plan is not None and not picker.plan.fits
    why = picker.plan.why_not()
    assert len(why.splitlines()) > 1
    assert "\\n" not in picker.verdict.value and "white-space:pre-wrap" in picker.verdict.value
    for line in why.splitlines()[1:]:
        assert line.strip().replace("'", "&#x27;") in picker.verdict.value


def test_picker_submits_the_slice_it_shows_once_per_request() -> None:
    submitted: list[tuple[Slice, str, str]] = []
    workload = FakeWorkload(phase("Pending"), phase("Running", "node-a"))

    def submit(wanted: Slice, image: str, command: str) -> FakeWorkload:
        submitted.append((wanted, image, command))
        return workload

    source = ChangingCluster()
    picker = SlicePicker(source=source, submit=submit, follow_interval=0.01)  # type: ignore[arg-type]
    picker.model.value = A100
    picker.memory.value = 10.0
    picker.cores.value = 30
    picker.image.value = "busybox"
    picker.command.value = "sleep 1"
    reads = source.calls
    handle = picker.submit()
    assert handle is picker.workload is workload
    assert source.calls == reads + 1  # the plan is made again against a fresh reading
    ((wanted, image, command),) = submitted
    assert wanted == Slice(10240, cores=30, gpu_type=A100, gpu_policy="spread")
    assert (image, command) == ("busybox", "sleep 1")

    assert picker.submit_button.disabled
    picker.submit_button.click()
    picker.submit_button.click()
    assert len(submitted) == 1
    picker.memory.value = 12.0
    assert not picker.submit_button.disabled
    assert picker.follower is not None
    assert eventually(lambda: "Running on node-a" in picker.status.value)
    assert "vslice-abc12" in picker.status.value
    assert eventually(lambda: source.calls == reads + 2)  # and again once the pod runs
    picker.close()


def test_a_failed_submit_can_be_tried_again() -> None:
    def submit(wanted: Slice, image: str, command: str) -> Any:
        raise VsliceError("quota exceeded")

    picker = SlicePicker(source=ChangingCluster(), submit=submit)
    assert picker.submit() is None
    assert "quota exceeded" in picker.status.value and not picker.submit_button.disabled


def test_the_status_line_follows_the_pod_through_its_run_to_its_deletion() -> None:
    seen: list[str] = []
    unscheduled = phase("Pending")
    unscheduled["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "message": "0/4 nodes are available"}
    ]
    going = phase("Running", "node-a")
    going["metadata"] = {"deletionTimestamp": "2025-01-01T00:00:00Z"}
    gone = ClusterError('get pod team-a/vslice-abc12: 404 pods "vslice-abc12" not found', code=404)
    workload = FakeWorkload(
        None,
        unscheduled,
        phase("Pending", "node-a"),
        phase("Running", "node-a"),
        phase("Running", "node-a"),
        going,
        gone,
    )
    follower = PodFollower(workload, lambda _p, words: seen.append(words), interval=0.001)
    follower.start().thread.join(5)
    assert seen == [
        "waiting for its pod to be created",
        "Pending, no node yet: not scheduled: 0/4 nodes are available",
        "Pending on node-a",
        "Running on node-a",  # reported once, though read twice
        "Terminating on node-a",
        "deleted",
    ]
    assert not follower.running and workload.reads == 7
    assert workload.node_reads == ["node-a"]  # a node is read once, not at every poll
    failed = phase("Failed", "node-a")
    failed["status"]["message"] = "OOMKilled"
    assert pod_status(failed) == ("Failed", "Failed on node-a: OOMKilled")


def test_a_deleted_pod_shows_plainly_as_deleted_not_as_a_raw_404() -> None:
    gone = ClusterError('get pod team-a/vslice-abc12: 404 pods "vslice-abc12" not found', code=404)
    workload = FakeWorkload(phase("Running", "node-a"), gone)
    picker = SlicePicker(
        source=ChangingCluster(),
        submit=lambda *_: workload,  # type: ignore[arg-type,return-value]
        follow_interval=0.001,
    )
    picker.submit()
    assert picker.follower is not None
    picker.follower.thread.join(5)
    assert picker.status.value == "submitted <code>team-a/vslice-abc12</code>: deleted"
    picker.close()


def test_a_jobs_pod_that_goes_away_after_it_was_seen_is_deleted() -> None:
    seen: list[tuple[str, str]] = []
    workload = FakeWorkload(None, phase("Running", "node-a"), None)
    PodFollower(workload, lambda p, w: seen.append((p, w)), interval=0.001).start().thread.join(5)
    assert seen[-1] == ("deleted", "deleted")


def test_the_status_line_says_why_the_image_cannot_be_pulled() -> None:
    pod = phase("Pending", "node-a")
    pod["status"]["containerStatuses"] = [
        {
            "name": "main",
            "image": "registry.invalid/nope:1",
            "state": {
                "waiting": {
                    "reason": "ImagePullBackOff",
                    "message": 'Back-off pulling image "registry.invalid/nope:1"',
                }
            },
        }
    ]
    phase_now, words = pod_status(pod)
    assert phase_now == "Pending"
    assert words.startswith(
        "Pending on node-a: container main cannot pull its image 'registry.invalid/nope:1': "
        'ImagePullBackOff: Back-off pulling image "registry.invalid/nope:1"; give an image '
        "node-a can pull"
    )


def test_a_pod_on_a_simulated_node_is_running_but_said_to_run_nothing() -> None:
    simulated = {"metadata": {"name": "lab-a100", "labels": {"vslice.io/simulated": "true"}}}
    assert pod_status(phase("Running", "lab-a100"), simulated) == (
        "Running",
        "Running on lab-a100 (a simulated node: its containers run nothing, it never completes)",
    )
    assert pod_status(phase("Running", "node-a"), {"metadata": {"name": "node-a"}}) == (
        "Running",
        "Running on node-a",
    )


def test_a_failed_read_is_reported_and_following_goes_on() -> None:
    seen: list[tuple[str, str]] = []
    workload = FakeWorkload(
        VsliceError("list pods: cannot reach the API server"), phase("Succeeded", "node-a")
    )
    PodFollower(workload, lambda p, w: seen.append((p, w)), interval=0.001).start().thread.join(5)
    assert seen == [
        ("", "cannot read the pod: list pods: cannot reach the API server"),
        ("Succeeded", "Succeeded on node-a"),
    ]


def test_following_stops_when_the_picker_closes() -> None:
    workload = FakeWorkload(phase("Pending"))
    picker = SlicePicker(
        source=ChangingCluster(),
        submit=lambda *_: workload,  # type: ignore[arg-type,return-value]
        follow_interval=0.01,
    )
    picker.submit()
    assert picker.follower is not None and picker.follower.running
    picker.close()
    assert not picker.follower.running
    reads = workload.reads
    threading.Event().wait(0.1)
    assert workload.reads == reads


def test_picker_without_a_submitter_only_plans() -> None:
    picker = SlicePicker(source=ChangingCluster())
    assert picker.plan is not None and picker.plan.fits
    assert picker.submit_button.disabled
