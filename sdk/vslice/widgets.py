"""Notebook widgets: a live cluster view and a slice picker that plans before it submits.

Both are composite ipywidgets that subclass ``VBox``, declare their parts as attributes,
and route every change through one ``update`` method, so they work (and are tested) in a
plain Python process: construct, call ``refresh()``/``update()``, inspect the children.

* :class:`ClusterView` - a legend, column headers, then per GPU a memory bar and a cores bar
  (hover either for each pod's share), slots, and the pods holding the GPU; below, the pods
  that ask for vslice GPUs and have no node yet, each with the engine's one-line reason.
  ``start(interval)`` refreshes it on a timer (a daemon thread), ``stop()`` ends that.
* :class:`SlicePicker` - GPU model choices and memory limits come from the cluster (models
  present, each model's memory); every change shows the engine's plan, Submit is enabled only
  while the plan fits and the request differs from the last one submitted, and a status line
  follows the submitted pod (a daemon thread) to its end (Succeeded, Failed, deleted), saying
  why it does not progress when Kubernetes knows (:mod:`vslice.progress`).

Each takes a :class:`vslice.Client`, or for tests and offline use a ``source`` callable that
returns a :class:`~vslice.snapshot.ClusterSnapshot`.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

import ipywidgets as w
from ipywidgets.widgets.widget_description import DescriptionWidget
from vslice_core.ledger import charges
from vslice_core.model import GPU_POLICIES, PodRequest
from vslice_core.queueing import QueueState

from vslice import progress, views
from vslice.errors import ClusterError, InvalidRequest, VsliceError
from vslice.plans import Plan, plan_manifest, slice_manifest
from vslice.slices import Slice, format_mib
from vslice.snapshot import DELETING, ClusterSnapshot, PendingPod, shown_phase
from vslice.tables import GpuRow, IdleMark

if TYPE_CHECKING:
    from vslice.client import Client
    from vslice.workload import Workload

Source = Callable[[], ClusterSnapshot]
Submit = Callable[[Slice, str, str], "Workload"]
QueuedSubmit = Callable[[Slice, str, str, str], "Workload"]
"""Submit into the Kueue LocalQueue named last (docs/kueue.md)."""
ANY_MODEL = "any model"
GIB = 1024
MEMORY_STEP_GIB = 0.5
DELETED: Final = "deleted"
"""The status line's word for a submitted pod that no longer exists."""
FINAL_PHASES = frozenset({"Succeeded", "Failed", DELETED})
FOLLOW_LIMIT_S = 3600.0
SETTLED_SLOWDOWN = 5
STATUS_CHARS = 300

# Column widths of the cluster view, so bars line up whatever the model names are.
COLUMNS: dict[str, int] = {
    "gpu": 200,
    "memory_bar": 90,
    "memory": 118,
    "cores_bar": 64,
    "cores": 58,
    "slots": 44,
}
WIDGET_MARGIN = 2  # ipywidgets' --jp-widgets-margin, on each side of every widget
MUTED = "color:var(--jp-content-font-color2, #666)"
IDLE_STYLE = "color:var(--jp-warn-color1, #f57c00)"


def _source(client: Client | None, source: Source | None) -> Source:
    if source is not None:
        return source
    if client is None:
        raise InvalidRequest("give a vslice.Client or a source callable", field="client")
    return client.snapshot


def _now() -> str:
    return datetime.datetime.now().strftime("%H:%M:%S")


def _px(*columns: str) -> str:
    """The width of adjacent columns, margins between them included."""
    inner = 2 * WIDGET_MARGIN * (len(columns) - 1)
    return f"{sum(COLUMNS[c] for c in columns) + inner}px"


def _lines(text: str) -> str:
    """Escaped multi-line text shown as lines."""
    return f'<div style="white-space:pre-wrap;line-height:1.35">{views.esc(text)}</div>'


# --- Cluster view ----------------------------------------------------------------------


@dataclass(frozen=True)
class Holding:
    """What one pod takes of one GPU."""

    holder: str
    memory_mib: int
    cores: int
    idle: IdleMark | None = None

    def describe(self) -> str:
        text = f"{self.holder}: {format_mib(self.memory_mib)}, {self.cores}% cores"
        return text + (
            f"; {views.idle_words(self.idle, datetime.datetime.now(datetime.UTC))}"
            if self.idle
            else ""
        )


def holdings(snapshot: ClusterSnapshot) -> dict[tuple[str, str], list[Holding]]:
    """(node, GPU UUID) -> each live pod's share, counted as the ledger counts it."""
    found: dict[tuple[str, str], list[Holding]] = {}
    for pod in snapshot.pods:
        for uuid, charge in charges(pod.allocation).items():
            idle = snapshot.idle.get(pod.holder)
            share = Holding(pod.holder, charge.memory_mib, charge.cores, idle)
            found.setdefault((pod.allocation.node, uuid), []).append(share)
    return found


def _cell(column: str, **layout: str) -> w.HTML:
    return w.HTML(layout=w.Layout(width=_px(column), **layout))


def untitled(root: w.Widget) -> None:
    """Give every described widget under ``root`` an empty tooltip instead of none.

    JupyterLab's widget views copy ``tooltip`` into the description label's ``title`` as is,
    and a ``None`` becomes the text "null": every label then shows a "null" hover text.
    """
    stack = [root]
    while stack:
        widget = stack.pop()
        if isinstance(widget, DescriptionWidget) and widget.tooltip is None:
            widget.tooltip = ""
        stack.extend(getattr(widget, "children", ()))


class GpuBar(w.HBox):  # type: ignore[misc]  # ipywidgets ships no types
    """One GPU: name, memory bar, cores bar, slots, and the pods holding slices."""

    def __init__(self, row: GpuRow, shares: Sequence[Holding] = ()) -> None:
        self.title = _cell("gpu")
        self.memory = w.FloatProgress(min=0.0, layout=w.Layout(width=_px("memory_bar")))
        self.memory_label = _cell("memory")
        self.cores = w.FloatProgress(min=0.0, layout=w.Layout(width=_px("cores_bar")))
        self.cores_label = _cell("cores")
        self.slots = _cell("slots")
        self.pods = w.HTML(layout=w.Layout(flex="1 1 160px", min_width="120px"))
        parts = [self.title, self.memory, self.memory_label, self.cores, self.cores_label]
        super().__init__(
            [*parts, self.slots, self.pods],
            layout=w.Layout(
                align_items="center", flex_flow="row wrap", border_bottom="1px solid #e0e0e0"
            ),
        )
        self.update(row, shares)

    def update(self, row: GpuRow, shares: Sequence[Holding] = ()) -> None:
        self.row = row
        self.shares = list(shares)
        state = _state(row)
        flag = f' <b style="color:#cf222e">{views.esc(state)}</b>' if state else ""
        self.title.value = (
            f'<div style="line-height:1.3;padding:3px 0"><b>{views.esc(row.node)}</b> '
            f"#{row.index}{flag}<br>"
            f'<span style="font-size:11px;{MUTED};overflow-wrap:anywhere">'
            f"{views.esc(views.model_label(row))}</span></div>"
        )
        self._meter(self.memory, row.memory_used_mib, row.memory_mib)
        self.memory_label.value = views.gib_pair(row.memory_used_mib, row.memory_mib)
        self._meter(self.cores, row.cores_used, row.cores)
        self.cores_label.value = views.cores_label(row.cores_used, row.cores)
        self.slots.value = f"{row.slots_used}/{row.slots}"
        self.memory.tooltip = self._tooltip(
            f"memory: {format_mib(row.memory_used_mib)} of {format_mib(row.memory_mib)} allocated"
        )
        self.cores.tooltip = self._tooltip(f"cores: {row.cores_used}% of {row.cores}% allocated")
        self.slots.tooltip = f"slots: {row.slots_used} of {row.slots} slices held"
        self.pods.value = self._pods_html()

    @staticmethod
    def _meter(bar: w.FloatProgress, used: int, total: int) -> None:
        bar.max = float(max(total, 1))
        bar.value = float(min(used, total))
        bar.bar_style = _bar_style(used, total)

    def _tooltip(self, first: str) -> str:
        return "\n".join([first, *(share.describe() for share in self.shares)])

    def _pods_html(self) -> str:
        if not self.shares:
            return f'<span style="{MUTED}">-</span>'
        now = datetime.datetime.now(datetime.UTC)
        items = [
            f'<span title="{views.esc(s.describe())}"><code>{views.esc(s.holder)}</code> '
            f'<span style="{MUTED}">{format_mib(s.memory_mib)}, {s.cores}%</span>'
            + (
                f' <span class="vslice-idle" style="{IDLE_STYLE}">'
                f"{views.esc(views.idle_words(s.idle, now))}</span>"
                if s.idle
                else ""
            )
            + "</span>"
            for s in self.shares
        ]
        return f'<div style="line-height:1.3;overflow-wrap:anywhere">{", ".join(items)}</div>'


def _state(row: GpuRow) -> str:
    """The views' one-word state, as a flag beside the GPU's name (none when it is ok)."""
    state = views.gpu_state(row)
    return {"ok": "", "OVERBOOKED": "over-booked"}.get(state, state)


def _bar_style(used: int, total: int) -> str:
    share = used / total if total else 0.0
    return "danger" if share >= 1.0 else "warning" if share >= 0.8 else "info"


# The colours ipywidgets gives the bar styles (JupyterLab's theme variables).
SWATCHES = {
    "info": "var(--jp-info-color1, #0097a7)",
    "warning": "var(--jp-warn-color1, #f57c00)",
    "danger": "var(--jp-error-color1, #d32f2f)",
}


def legend() -> str:
    """What the bars and columns mean, in one short block."""
    swatch = '<span style="display:inline-block;width:10px;height:10px;background:{}"></span>'
    colours = " &middot; ".join(
        f"{swatch.format(SWATCHES[style])} {words}"
        for style, words in (("info", "under 80%"), ("warning", "80% or more"), ("danger", "full"))
    )
    return (
        f'<div style="font-size:12px;{MUTED};line-height:1.4">'
        "<b>memory</b>: GiB allocated / GPU memory &middot; <b>cores</b>: share of the GPU's "
        "compute allocated &middot; <b>slots</b>: slices held / most it takes<br>"
        f"bars: {colours} &middot; hover a bar for each pod's share</div>"
    )


def _headers() -> w.HBox:
    def head(text: str, width: str) -> w.HTML:
        return w.HTML(f"<b>{text}</b>", layout=w.Layout(width=width))

    return w.HBox(
        [
            head("GPU", _px("gpu")),
            head("memory (GiB)", _px("memory_bar", "memory")),
            head("cores", _px("cores_bar", "cores")),
            head("slots", _px("slots")),
            w.HTML("<b>pods</b> (memory, cores)", layout=w.Layout(flex="1 1 160px")),
        ],
        layout=w.Layout(flex_flow="row wrap", border_bottom="2px solid #bdbdbd"),
    )


@dataclass(frozen=True)
class PendingPlan:
    """A pod that asks for vslice GPUs and has no node, with the engine's answer for it."""

    pod: PendingPod
    plan: Plan

    @property
    def holder(self) -> str:
        return self.pod.holder


def pending_plans(snapshot: ClusterSnapshot) -> list[PendingPlan]:
    """Every pod in :attr:`ClusterSnapshot.pending`, planned against the snapshot."""
    return [
        PendingPlan(
            p,
            Plan(
                snapshot.decide(p.request, p.path),
                namespace=p.namespace,
                request=p.request,
                path=p.path,
                notes=p.notes,
            ),
        )
        for p in snapshot.pending
    ]


def describe_request(request: PodRequest) -> str:
    """``1 GPU, 90 GiB, 25% cores`` (per container, joined with ``+``)."""
    parts = []
    for c in request.containers:
        memory = format_mib(c.memory_mib) if c.memory_mib else f"{c.memory_percent}% memory"
        words = [f"{c.gpus} GPU" + ("s" if c.gpus > 1 else ""), memory]
        words[1] += " each" if c.gpus > 1 else ""
        words += [f"{c.cores}% cores"] if c.cores else []
        parts.append(", ".join(words))
    return " + ".join(parts)


DRA_MARK: Final = " (DRA claim)"
"""After what a pending pod asks, when it asks through a ResourceClaim (kube-scheduler's DRA
allocator places it, not the extender)."""


def pending_html(pending: Sequence[PendingPlan]) -> str:
    if not pending:
        return f'<div style="{MUTED};padding-top:4px">No pod waits for a GPU.</div>'
    items = "".join(
        f'<li title="{views.esc(p.plan.why_not())}"><code>{views.esc(p.holder)}</code> '
        f'<span style="{MUTED}">{views.esc(describe_request(p.pod.request))}'
        f"{DRA_MARK if p.pod.path == 'dra' else ''}</span>: "
        f"{views.esc(p.plan.headline())}</li>"
        for p in pending
    )
    return (
        f'<div style="padding-top:6px"><b>Pending ({len(pending)})</b> '
        f'<span style="{MUTED}">pods asking for GPUs that have no node yet</span>'
        f'<ul style="margin:2px 0;padding-left:20px;line-height:1.4">{items}</ul></div>'
    )


def queued_html(queued: Sequence[QueueState]) -> str:
    """Jobs waiting in Kueue (no pod yet): their queue, place and Kueue's reason."""
    if not queued:
        return ""
    items = "".join(
        f"<li><code>{views.esc(q.namespace)}/{views.esc(q.job)}</code> "
        f'<span style="{MUTED}">in {views.esc(q.queue)}'
        f"{f' ({q.position} of {q.waiting})' if q.position else ''}</span>: "
        f"{views.esc(q.reason or 'waiting for Kueue')}</li>"
        for q in queued
    )
    return (
        f'<div style="padding-top:6px"><b>Queued ({len(queued)})</b> '
        f'<span style="{MUTED}">jobs waiting in a Kueue queue for their team&#39;s quota</span>'
        f'<ul style="margin:2px 0;padding-left:20px;line-height:1.4">{items}</ul></div>'
    )


class ClusterView(w.VBox):  # type: ignore[misc]  # ipywidgets ships no types
    """Every GPU with its memory and cores bars and its pods, then the pending pods;
    refreshed on demand or on a timer."""

    def __init__(
        self,
        client: Client | None = None,
        *,
        source: Source | None = None,
        interval: float | None = None,
    ) -> None:
        self._timer: threading.Thread | None = None
        self._stop = threading.Event()
        self._source = _source(client, source)
        self.header = w.HTML(layout=w.Layout(flex="1 1 auto"))
        self.refresh_button = w.Button(
            description="Refresh", icon="refresh", layout=w.Layout(width="100px", flex="0 0 auto")
        )
        self.refresh_button.on_click(lambda _b: self.refresh())
        self.legend = w.HTML(legend())
        self.columns = _headers()
        self.rows = w.VBox()
        self.pending = w.HTML()
        self.queued = w.HTML()
        self.status = w.HTML()
        self.bars: dict[str, GpuBar] = {}
        self.pending_pods: list[PendingPlan] = []
        self.queued_jobs: list[QueueState] = []
        top = w.HBox([self.header, self.refresh_button], layout=w.Layout(align_items="center"))
        parts = [top, self.legend, self.columns, self.rows, self.pending, self.queued, self.status]
        super().__init__(parts, layout=w.Layout(max_width="1100px"))
        self.refresh()
        if interval:
            self.start(interval)

    def refresh(self) -> None:
        """Read the cluster once and update; a failure is shown, never raised."""
        try:
            snapshot = self._source()
        except VsliceError as exc:
            self.status.value = (
                f'<span style="color:#cf222e">refresh failed at {_now()}: {views.esc(exc)}</span>'
            )
            return
        self.update(snapshot)

    def update(self, snapshot: ClusterSnapshot) -> None:
        """Show ``snapshot``: bars are updated in place, added or dropped as GPUs come and go."""
        gpus, shares = snapshot.gpus(), holdings(snapshot)
        uuids = [row.uuid for row in gpus]
        for row in gpus:
            mine = shares.get((row.node, row.uuid), [])
            if row.uuid in self.bars:
                self.bars[row.uuid].update(row, mine)
            else:
                self.bars[row.uuid] = GpuBar(row, mine)
        for gone in set(self.bars) - set(uuids):
            self.bars.pop(gone).close()
        if [bar.row.uuid for bar in self.rows.children] != uuids:
            self.rows.children = tuple(self.bars[uuid] for uuid in uuids)
        self.pending_pods = pending_plans(snapshot)
        self.pending.value = pending_html(self.pending_pods)
        self.queued_jobs = list(snapshot.queued)
        self.queued.value = queued_html(self.queued_jobs)
        rows = list(gpus)
        used = sum(r.memory_used_mib for r in rows)
        total = sum(r.memory_mib for r in rows)
        cores, all_cores = sum(r.cores_used for r in rows), sum(r.cores for r in rows)
        self.header.value = (
            f'<div style="line-height:1.4"><b>{len(gpus.nodes())} nodes, {len(rows)} GPUs</b>'
            f" &middot; memory {views.gib_pair(used, total)} allocated &middot; cores "
            f"{views.percent(cores, all_cores)}% allocated &middot; "
            f"{len(self.pending_pods)} pending"
            + (f" &middot; {len(self.queued_jobs)} queued" if self.queued_jobs else "")
            + "</div>"
        )
        self.status.value = f'<span style="{MUTED};font-size:11px">updated {_now()}</span>'
        untitled(self)

    def start(self, interval: float = 5.0) -> None:
        """Refresh every ``interval`` seconds until :meth:`stop` (or the widget closes)."""
        self.stop()
        self._stop = threading.Event()
        stop = self._stop

        def loop() -> None:
            while not stop.wait(interval):
                self.refresh()

        self._timer = threading.Thread(target=loop, name="vslice-cluster-view", daemon=True)
        self._timer.start()

    def stop(self) -> None:
        self._stop.set()
        if self._timer is not None:
            self._timer.join(timeout=5)
            self._timer = None

    @property
    def running(self) -> bool:
        return self._timer is not None and self._timer.is_alive()

    def close(self) -> None:
        self.stop()
        super().close()


# --- Slice picker ----------------------------------------------------------------------


class Followed(Protocol):
    """What the status line needs of a submitted workload."""

    name: str
    namespace: str

    def pod(self) -> dict[str, Any] | None: ...

    def read_node(self, name: str) -> dict[str, Any] | None: ...


def pod_status(pod: dict[str, Any] | None, node: dict[str, Any] | None = None) -> tuple[str, str]:
    """(phase, one line of words) for the status line: where the pod is and, when it does not
    progress, why (:mod:`vslice.progress`; ``node`` is the Node it is bound to, if read)."""
    if pod is None:
        return "", "waiting for its pod to be created"
    status = pod.get("status") or {}
    phase = shown_phase(pod) or "Pending"
    where = (pod.get("spec") or {}).get("nodeName")
    words = f"{phase} on {where}" if where else f"{phase}, no node yet"
    found = progress.blocker(pod, node)
    if found is not None and found.kind == "simulated":
        words += " (a simulated node: its containers run nothing, it never completes)"
    elif found is not None and found.kind != "deleting":  # the phase says that one
        words += f": {_clipped(found.line())}"
    if phase == "Failed":
        words += f": {status.get('message') or status.get('reason') or 'see its logs'}"
    return phase, words


def _clipped(text: str, limit: int = STATUS_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


class PodFollower:
    """Polls one pod in a daemon thread and reports its state each time it changes, until it
    ends (Succeeded, Failed, deleted), ``limit`` seconds pass, or :meth:`stop`. Once the pod
    runs it is polled ``SETTLED_SLOWDOWN`` times less often: only its end is left to see."""

    def __init__(
        self,
        workload: Followed,
        report: Callable[[str, str], None],
        *,
        interval: float = 1.0,
        limit: float = FOLLOW_LIMIT_S,
    ) -> None:
        self.workload, self.report = workload, report
        self.interval, self.limit = interval, limit
        self._stop = threading.Event()
        self._nodes: dict[str, dict[str, Any] | None] = {}
        self._seen = False
        self.thread = threading.Thread(target=self._loop, name="vslice-follow", daemon=True)

    def start(self) -> PodFollower:
        self.thread.start()
        return self

    def _loop(self) -> None:
        deadline = time.monotonic() + self.limit
        known, said = "", ""
        while not self._stop.is_set():
            phase, words = self._read()
            known = phase or known
            if self._stop.is_set():
                return
            if words != said:
                self.report(phase, words)
                said = words
            if phase in FINAL_PHASES:
                return
            if time.monotonic() > deadline:
                self.report(known, f"{words} (stopped following after {self.limit:.0f}s)")
                return
            settled = known in ("Running", DELETING)
            self._stop.wait(self.interval * (SETTLED_SLOWDOWN if settled else 1))

    def _read(self) -> tuple[str, str]:
        """(phase, words) now; a pod that is gone is ``deleted``; a failed read has no
        phase (the next read may succeed)."""
        try:
            pod = self.workload.pod()
        except ClusterError as exc:
            if exc.code == 404:
                return DELETED, DELETED
            return "", f"cannot read the pod: {exc}"
        except VsliceError as exc:
            return "", f"cannot read the pod: {exc}"
        if pod is None and self._seen:  # a Job's pods went with the Job
            return DELETED, DELETED
        self._seen = self._seen or pod is not None
        return pod_status(pod, self._node(pod))

    def _node(self, pod: dict[str, Any] | None) -> dict[str, Any] | None:
        """The pod's Node, read once per name (what matters of it, kwok or not, stays)."""
        name = str(((pod or {}).get("spec") or {}).get("nodeName") or "")
        if name and name not in self._nodes:
            self._nodes[name] = self.workload.read_node(name)
        return self._nodes.get(name)

    def stop(self) -> None:
        self._stop.set()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout=5)

    @property
    def running(self) -> bool:
        return self.thread.is_alive()


Request = tuple[Slice, str, str]
STYLE = {"description_width": "90px"}
CONTROL = {"width": "460px"}


class SlicePicker(w.VBox):  # type: ignore[misc]  # ipywidgets ships no types
    """Pick a slice from what the cluster has, see the plan, then submit (once per request).

    Where the namespace has Kueue LocalQueues, a queue can be chosen: the slice is then
    submitted as a Job waiting in that queue, so it may be submitted when it does not fit now
    (Kueue admits it under the team's quota, and vslice places it once there is room)."""

    def __init__(
        self,
        client: Client | None = None,
        *,
        source: Source | None = None,
        submit: Submit | None = None,
        namespace: str | None = None,
        image: str = "python:3.12-slim",
        command: str = "nvidia-smi && sleep 3600",
        follow_interval: float = 1.0,
        queues: Sequence[str] | None = None,
        submit_queued: QueuedSubmit | None = None,
    ) -> None:
        self._source = _source(client, source)
        self._submit = submit or (_client_submit(client) if client is not None else None)
        self._submit_queued = submit_queued or (
            _client_submit_queued(client) if client is not None else None
        )
        self.namespace = namespace or (client.namespace if client is not None else "default")
        if queues is None:
            queues = client.local_queues(self.namespace) if client is not None else []
        self.queues = list(queues)
        self._submitted_queue = ""
        self.follow_interval = follow_interval
        self.snapshot = self._source()
        self.plan: Plan | None = None
        self.slice: Slice | None = None
        self.workload: Workload | None = None
        self.follower: PodFollower | None = None
        self._submitted: Request | None = None
        self._choosing = False
        self._build(image, command)
        self.update()

    def _build(self, image: str, command: str) -> None:
        def layout() -> w.Layout:
            return w.Layout(**CONTROL)

        self.model = w.Dropdown(description="GPU model", style=STYLE, layout=layout())
        self.memory = w.FloatSlider(
            description="memory GiB",
            min=MEMORY_STEP_GIB,
            max=80.0,
            step=MEMORY_STEP_GIB,
            value=1.0,
            readout_format=".1f",
            style=STYLE,
            layout=layout(),
        )
        self.cores = w.IntSlider(
            description="cores %", min=0, max=100, step=5, value=25, style=STYLE, layout=layout()
        )
        self.gpus = w.BoundedIntText(
            description="GPUs", min=1, max=1, value=1, style=STYLE, layout=w.Layout(width="180px")
        )
        self.policy = w.Dropdown(
            description="GPU policy",
            options=list(GPU_POLICIES),
            value="spread",
            style=STYLE,
            layout=w.Layout(width="260px"),
        )
        self.queue = w.Dropdown(
            description="queue",
            options=[("none: run when it fits", "")] + [(f"Kueue: {q}", q) for q in self.queues],
            value="",
            style=STYLE,
            # Only where the namespace has queues: elsewhere it would offer nothing.
            layout=w.Layout(width="460px", display="" if self.queues else "none"),
        )
        self.image = w.Text(description="image", value=image, style=STYLE, layout=layout())
        self.command = w.Text(description="command", value=command, style=STYLE, layout=layout())
        self.refresh_button = w.Button(description="Refresh", icon="refresh")
        self.submit_button = w.Button(description="Submit", button_style="success")
        self.verdict = w.HTML()
        self.plan_view = w.HTML()
        self.details = w.Accordion([self.plan_view], titles=("plan: every node's verdict",))
        self.status = w.HTML()
        self._set_choices()
        for control in (self.model, self.memory, self.cores, self.gpus, self.policy, self.queue):
            control.observe(self._changed, names="value")
        for text in (self.image, self.command):
            text.observe(self._changed, names="value")
        self.refresh_button.on_click(lambda _b: self.refresh())
        self.submit_button.on_click(lambda _b: self.submit())
        buttons = w.HBox([self.refresh_button, self.submit_button])
        controls = [
            self.model,
            self.memory,
            self.cores,
            w.HBox([self.gpus, self.policy]),
            self.queue,
        ]
        parts = [self.image, self.command, buttons, self.verdict, self.status, self.details]
        super().__init__([*controls, *parts])
        untitled(self)

    def _changed(self, change: dict[str, Any]) -> None:
        if self._choosing:
            return
        if change.get("owner") is self.model:
            self._set_limits()
        self.update()

    def _set_choices(self) -> None:
        """Model choices from the snapshot (with each model's largest free slice), then the
        limits for the chosen model."""
        gpus = self.snapshot.gpus()
        options: list[tuple[str, str]] = [(ANY_MODEL, "")]
        for model in gpus.models():
            free = max(r.memory_free_mib for r in gpus if r.model == model)
            options.append((f"{model} (up to {format_mib(free)} free)", model))
        current = self.model.value if self.model.value in dict(options).values() else ""
        self._choosing = True
        try:
            self.model.options = options
            self.model.value = current
        finally:
            self._choosing = False
        self._set_limits()

    def _set_limits(self) -> None:
        """The memory slider spans the chosen model's memory; GPUs up to what one node has."""
        model = self.model.value or None
        rows = [r for r in self.snapshot.gpus() if model is None or r.model == model]
        biggest = max((r.memory_mib for r in rows), default=GIB) / GIB
        per_node: dict[str, int] = {}
        for r in rows:
            per_node[r.node] = per_node.get(r.node, 0) + 1
        self._choosing = True
        try:
            top = max(MEMORY_STEP_GIB, biggest - biggest % MEMORY_STEP_GIB)
            self.memory.max = top
            self.memory.value = min(self.memory.value, top)
            self.gpus.max = max(per_node.values(), default=1)
        finally:
            self._choosing = False

    @property
    def memory_mib(self) -> int:
        return round(float(self.memory.value) * GIB)

    def current_slice(self) -> Slice:
        """The slice the controls describe (raises InvalidRequest for a bad combination)."""
        return Slice(
            self.memory_mib,
            cores=int(self.cores.value),
            gpus=int(self.gpus.value),
            gpu_type=self.model.value or None,
            gpu_policy=str(self.policy.value),
        )

    def request(self) -> Request | None:
        if self.slice is None:
            return None
        return (self.slice, str(self.image.value), str(self.command.value))

    def update(self) -> None:
        """Recompute the slice and its plan against the snapshot; enable Submit if it fits
        and differs from what was last submitted."""
        try:
            self.slice = self.current_slice()
            manifest = slice_manifest(self.slice)
            self.plan = plan_manifest(
                self.snapshot, manifest, slice=self.slice, namespace=self.namespace
            )
        except InvalidRequest as exc:
            self.slice, self.plan = None, None
            self.verdict.value = f'<b style="color:#cf222e">invalid:</b> {views.esc(exc)}'
            self.plan_view.value = ""
        else:
            self.verdict.value = verdict_html(self.plan)
            self.plan_view.value = self.plan._repr_html_()
        queue = str(self.queue.value)
        # A queued Job may be submitted when it does not fit now: it waits for quota and room.
        fits = self.plan is not None and (self.plan.fits or bool(queue))
        again = (
            self._submitted is not None
            and self.request() == self._submitted
            and queue == self._submitted_queue
        )
        submitter = self._submit_queued if queue else self._submit
        self.submit_button.disabled = not fits or submitter is None or again
        self.submit_button.tooltip = (
            "already submitted: change the request to submit another" if again else ""
        )

    def refresh(self) -> None:
        """Re-read the cluster (choices and plan follow)."""
        try:
            self.snapshot = self._source()
        except VsliceError as exc:
            self.status.value = f"refresh failed: {views.esc(exc)}"
            return
        self._set_choices()
        self.update()

    def submit(self) -> Workload | None:
        """Submit the current slice (when it fits and is new); the handle is kept in
        ``.workload`` and the status line follows its pod. The plan is made again against a
        fresh reading now, and again once the pod runs or ends."""
        self.update()
        request = self.request()
        queue = str(self.queue.value)
        queued, plain = self._submit_queued, self._submit
        if request is None or self.submit_button.disabled or (queued if queue else plain) is None:
            self.status.value = (
                "nothing submitted: already submitted, or the slice does not fit or is invalid"
            )
            return None
        self.submit_button.disabled = True
        try:
            if queue:
                assert queued is not None  # checked above
                self.workload = queued(*request, queue)
            else:
                assert plain is not None
                self.workload = plain(*request)
        except VsliceError as exc:
            self.status.value = f"<b>not submitted:</b> {views.esc(exc)}"
            self.update()
            return None
        self._submitted = request
        self._submitted_queue = queue
        self._follow(self.workload)
        self.refresh()
        return self.workload

    def _follow(self, workload: Followed) -> None:
        if self.follower is not None:
            self.follower.stop()
        name = f"{workload.namespace}/{workload.name}"
        last = [""]

        def report(phase: str, words: str) -> None:
            colour = {"Running": "#2da44e", "Succeeded": "#2da44e", "Failed": "#cf222e"}
            # The pod's own states stand out; "deleted" and read failures are plain words.
            shown = views.esc(words)
            if phase in colour:
                shown = f'<b style="color:{colour[phase]}">{shown}</b>'
            elif phase not in (DELETED, ""):
                shown = f"<b>{shown}</b>"
            self.status.value = f"submitted <code>{views.esc(name)}</code>: {shown}"
            if phase != last[0] and (phase == "Running" or phase in FINAL_PHASES):
                self.refresh()  # the plan counts what the pod now holds (or gave back)
            last[0] = phase

        report("", "submitted, waiting for the scheduler")
        self.follower = PodFollower(workload, report, interval=self.follow_interval).start()

    def close(self) -> None:
        if self.follower is not None:
            self.follower.stop()
        super().close()


def verdict_html(plan: Plan) -> str:
    """The plan at a glance: a green or red line, and for a miss the engine's why-not."""
    line = views.esc(plan.headline())
    box = '<div style="padding:4px 0;line-height:1.35">'
    if plan.fits:
        where = "; ".join(
            f"GPU {g.index}: {format_mib(g.memory_mib)}, {g.cores}% cores"
            for grants in plan.grants.values()
            for g in grants
        )
        gets = f' <span style="{MUTED}">{views.esc(where)}</span>' if where else ""
        return f'{box}<b style="color:#2da44e">{line}</b>{gets}</div>'
    # The first line of why_not() is the headline's cause; the rest are its numbers per node
    # and the suggestion.
    rest = "\n".join(plan.why_not().splitlines()[1:]).strip("\n")
    detail = _lines(rest) if rest else ""
    return f'{box}<b style="color:#cf222e">{line}</b>{detail}</div>'


def _client_submit(client: Client) -> Submit:
    def submit(wanted: Slice, image: str, command: str) -> Workload:
        return client.run(image, command or None, slice=wanted)

    return submit


def _client_submit_queued(client: Client) -> QueuedSubmit:
    def submit(wanted: Slice, image: str, command: str, queue: str) -> Workload:
        return client.run(image, command or None, slice=wanted, queue=queue)

    return submit
