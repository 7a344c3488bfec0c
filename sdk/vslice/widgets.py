"""Notebook widgets: a live cluster view and a slice picker that plans before it submits.

Both are composite ipywidgets that subclass ``VBox``, declare their parts as attributes,
and route every change through one ``update`` method, so they work (and are tested) in a
plain Python process: construct, call ``refresh()``/``update()``, inspect the children.

* :class:`ClusterView` - per GPU a memory bar and a cores bar, slots, and the pods holding
  the GPU; ``start(interval)`` refreshes it on a timer (a daemon thread), ``stop()`` ends that.
* :class:`SlicePicker` - GPU model choices and memory limits come from the cluster (models
  present, the most free memory per model); every change shows the engine's plan, and the
  Submit button is enabled only while the plan fits.

Each takes a :class:`vslice.Client`, or for tests and offline use a ``source`` callable that
returns a :class:`~vslice.snapshot.ClusterSnapshot`.
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import ipywidgets as w
from vslice_core.model import GPU_POLICIES

from vslice import views
from vslice.errors import InvalidRequest, VsliceError
from vslice.plans import Plan, plan_manifest, slice_manifest
from vslice.slices import Slice, format_mib
from vslice.snapshot import ClusterSnapshot
from vslice.tables import GpuRow, GpuTable

if TYPE_CHECKING:
    from vslice.client import Client
    from vslice.workload import Workload

Source = Callable[[], ClusterSnapshot]
Submit = Callable[[Slice, str, str], "Workload"]
ANY_MODEL = "any model"


def _source(client: Client | None, source: Source | None) -> Source:
    if source is not None:
        return source
    if client is None:
        raise InvalidRequest("give a vslice.Client or a source callable", field="client")
    return client.snapshot


def _now() -> str:
    return datetime.datetime.now().strftime("%H:%M:%S")


class GpuBar(w.HBox):  # type: ignore[misc]  # ipywidgets ships no types
    """One GPU: name, memory bar, cores bar, slots, and the pods holding slices."""

    def __init__(self, row: GpuRow) -> None:
        self.title = w.HTML(layout=w.Layout(width="260px"))
        self.memory = w.FloatProgress(min=0.0, layout=w.Layout(width="140px"))
        self.memory_label = w.Label(layout=w.Layout(width="150px"))
        self.cores = w.FloatProgress(min=0.0, layout=w.Layout(width="110px"))
        self.cores_label = w.Label(layout=w.Layout(width="80px"))
        self.slots = w.Label(layout=w.Layout(width="90px"))
        self.pods = w.HTML()
        super().__init__(
            [
                self.title,
                self.memory,
                self.memory_label,
                self.cores,
                self.cores_label,
                self.slots,
                self.pods,
            ]
        )
        self.update(row)

    def update(self, row: GpuRow) -> None:
        self.row = row
        state = "" if row.schedulable else (" (unhealthy)" if not row.healthy else " (cordoned)")
        self.title.value = (
            f"<b>{views.esc(row.node)}</b> #{row.index} {views.esc(row.model)}{views.esc(state)}"
        )
        self.memory.max = float(max(row.memory_mib, 1))
        self.memory.value = float(min(row.memory_used_mib, row.memory_mib))
        self.memory.bar_style = _bar_style(row.memory_used_mib, row.memory_mib)
        self.memory_label.value = (
            f"{format_mib(row.memory_used_mib)} / {format_mib(row.memory_mib)}"
        )
        self.cores.max = float(max(row.cores, 1))
        self.cores.value = float(min(row.cores_used, row.cores))
        self.cores.bar_style = _bar_style(row.cores_used, row.cores)
        self.cores_label.value = f"{row.cores_used}/{row.cores}%"
        self.slots.value = f"slots {row.slots_used}/{row.slots}"
        self.pods.value = ", ".join(f"<code>{views.esc(p)}</code>" for p in row.pods) or "-"


def _bar_style(used: int, total: int) -> str:
    share = used / total if total else 0.0
    return "danger" if share >= 1.0 else "warning" if share >= 0.8 else "info"


class ClusterView(w.VBox):  # type: ignore[misc]  # ipywidgets ships no types
    """Every GPU with its memory and cores bars and its pods, refreshed on demand or a timer."""

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
        self.header = w.HTML()
        self.status = w.Label()
        self.rows = w.VBox()
        self.bars: dict[str, GpuBar] = {}
        super().__init__([self.header, self.rows, self.status])
        self.refresh()
        if interval:
            self.start(interval)

    def refresh(self) -> None:
        """Read the cluster once and update; a failure is shown, never raised."""
        try:
            gpus = self._source().gpus()
        except VsliceError as exc:
            self.status.value = f"refresh failed at {_now()}: {exc}"
            return
        self.update(gpus)

    def update(self, gpus: GpuTable) -> None:
        """Show ``gpus``: bars are updated in place, added or dropped as GPUs come and go."""
        uuids = [row.uuid for row in gpus]
        for row in gpus:
            if row.uuid in self.bars:
                self.bars[row.uuid].update(row)
            else:
                self.bars[row.uuid] = GpuBar(row)
        for gone in set(self.bars) - set(uuids):
            self.bars.pop(gone).close()
        if [bar.row.uuid for bar in self.rows.children] != uuids:
            self.rows.children = tuple(self.bars[uuid] for uuid in uuids)
        rows = list(gpus)
        used = sum(r.memory_used_mib for r in rows)
        total = sum(r.memory_mib for r in rows)
        self.header.value = (
            f"<b>{len(gpus.nodes())} nodes, {len(rows)} GPUs</b> &middot; memory "
            f"{format_mib(used)} / {format_mib(total)} &middot; cores "
            f"{sum(r.cores_used for r in rows)}/{sum(r.cores for r in rows)}%"
        )
        self.status.value = f"updated {_now()}"

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


class SlicePicker(w.VBox):  # type: ignore[misc]  # ipywidgets ships no types
    """Pick a slice from what the cluster has, see the plan, then submit."""

    def __init__(
        self,
        client: Client | None = None,
        *,
        source: Source | None = None,
        submit: Submit | None = None,
        namespace: str | None = None,
        image: str = "python:3.12-slim",
        command: str = "nvidia-smi && sleep 3600",
    ) -> None:
        self._source = _source(client, source)
        self._submit = submit or (_client_submit(client) if client is not None else None)
        self.namespace = namespace or (client.namespace if client is not None else "default")
        self.snapshot = self._source()
        self.plan: Plan | None = None
        self.slice: Slice | None = None
        self.workload: Workload | None = None
        self._build(image, command)
        self.update()

    def _build(self, image: str, command: str) -> None:
        self.model = w.Dropdown(description="GPU model")
        self.memory = w.IntSlider(
            description="memory MiB", min=256, max=1 << 20, step=256, value=1024
        )
        self.cores = w.IntSlider(description="cores %", min=0, max=100, step=5, value=25)
        self.gpus = w.BoundedIntText(description="GPUs", min=1, max=1, value=1)
        self.policy = w.Dropdown(description="GPU policy", options=list(GPU_POLICIES))
        self.policy.value = "spread"
        self.image = w.Text(description="image", value=image)
        self.command = w.Text(description="command", value=command)
        self.refresh_button = w.Button(description="Refresh", icon="refresh")
        self.submit_button = w.Button(description="Submit", button_style="success")
        self.plan_view = w.HTML()
        self.status = w.HTML()
        self._set_choices()
        for control in (self.model, self.memory, self.cores, self.gpus, self.policy):
            control.observe(lambda _change: self.update(), names="value")
        self.refresh_button.on_click(lambda _b: self.refresh())
        self.submit_button.on_click(lambda _b: self.submit())
        buttons = w.HBox([self.refresh_button, self.submit_button])
        controls = [self.model, self.memory, self.cores, self.gpus, self.policy]
        super().__init__(
            [*controls, self.image, self.command, buttons, self.plan_view, self.status]
        )

    def _set_choices(self) -> None:
        """Model choices and the memory/GPU limits from the snapshot (largest free slice)."""
        gpus = self.snapshot.gpus()
        options: list[tuple[str, str]] = [(ANY_MODEL, "")]
        for model in gpus.models():
            free = max(r.memory_free_mib for r in gpus if r.model == model)
            options.append((f"{model} (up to {format_mib(free)} free)", model))
        current = self.model.value if self.model.value in dict(options).values() else ""
        self.model.options = options
        self.model.value = current
        biggest = max((r.memory_mib for r in gpus), default=1024)
        self.memory.max = max(biggest, self.memory.min)
        per_node = max((len([r for r in gpus if r.node == n]) for n in gpus.nodes()), default=1)
        self.gpus.max = max(per_node, 1)

    def current_slice(self) -> Slice:
        """The slice the controls describe (raises InvalidRequest for a bad combination)."""
        return Slice(
            int(self.memory.value),
            cores=int(self.cores.value),
            gpus=int(self.gpus.value),
            gpu_type=self.model.value or None,
            gpu_policy=str(self.policy.value),
        )

    def update(self) -> None:
        """Recompute the slice and its plan against the snapshot; enable Submit if it fits."""
        try:
            self.slice = self.current_slice()
            manifest = slice_manifest(self.slice)
            self.plan = plan_manifest(
                self.snapshot, manifest, slice=self.slice, namespace=self.namespace
            )
        except InvalidRequest as exc:
            self.slice, self.plan = None, None
            self.plan_view.value = f"<b>invalid:</b> {views.esc(exc)}"
        else:
            self.plan_view.value = self.plan._repr_html_()
        fits = self.plan is not None and self.plan.fits
        self.submit_button.disabled = not (fits and self._submit is not None)

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
        """Submit the current slice (when it fits); the handle is kept in ``.workload``."""
        self.update()
        if self.slice is None or self._submit is None or self.submit_button.disabled:
            self.status.value = "nothing submitted: the slice does not fit or is invalid"
            return None
        try:
            self.workload = self._submit(self.slice, self.image.value, self.command.value)
        except VsliceError as exc:
            self.status.value = f"<b>not submitted:</b> {views.esc(exc)}"
            return None
        self.status.value = f"submitted <code>{views.esc(self.workload.name)}</code>"
        return self.workload


def _client_submit(client: Client) -> Submit:
    def submit(wanted: Slice, image: str, command: str) -> Workload:
        return client.run(image, command or None, slice=wanted)

    return submit
