"""How vslice objects look: HTML for notebooks, aligned text for terminals.

Every HTML view is one ``<div class="vslice">`` holding the stylesheet (shipped as package
data, ``vslice/static/vslice.css``), a plain-text fallback and the rich view. The rich view
starts hidden and the stylesheet reveals it while hiding the fallback, so where styles are
stripped (untrusted notebooks, static viewers) the text shows instead of a broken layout.
Every string that comes from the cluster or the user goes through :func:`html.escape`;
numbers are formatted by us. Node groups collapse with ``<details>`` (no JavaScript).

The tables and plans render through :mod:`vslice.rendering`: this module reads their fields,
so it registers its renderers there rather than being imported by them.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Iterable, Sequence
from datetime import datetime
from importlib import resources

from vslice_core import whynot
from vslice_core.idle import format_duration
from vslice_core.model import NodeVerdict, PodRequest
from vslice_core.quantities import format_gib

from vslice import dra, rendering
from vslice.plans import Plan, explain
from vslice.slices import format_mib
from vslice.tables import (
    AllocationRow,
    AllocationTable,
    GpuRow,
    GpuTable,
    IdleMark,
    Placement,
)

# Beyond this many GPUs the HTML inventory lists nodes one line each.
MAX_DETAILED_GPUS = 256
MAX_FALLBACK_LINES = 200
MAX_HTML_ROWS = 500


@functools.cache
def stylesheet() -> str:
    """The CSS every HTML view embeds."""
    return resources.files("vslice").joinpath("static/vslice.css").read_text(encoding="utf-8")


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def wrap(body: str, text: str) -> str:
    """The common envelope: stylesheet, text fallback, rich view."""
    return (
        f'<div class="vslice"><style>{stylesheet()}</style>'
        f'<pre class="vslice-text-fallback">{esc(text)}</pre>'
        f'<div class="vslice-wrap" style="display:none">{body}</div></div>'
    )


def percent(used: int, total: int) -> int:
    return round(100 * used / total) if total > 0 else 0


def gib_pair(used_mib: int, total_mib: int) -> str:
    """``61440, 81920`` -> ``60 / 80 GiB`` (one unit, so the pair reads at a glance)."""
    return f"{format_gib(used_mib)} / {format_gib(total_mib)} GiB"


def cores_label(used: int, total: int) -> str:
    """``80, 100`` -> ``80%``; other totals keep both numbers."""
    return f"{used}%" if total == 100 else f"{used}/{total}%"


def meter(used: int, total: int, label: str) -> str:
    """A bar filled to used/total with a label beside it."""
    share = min(100, percent(used, total))
    level = " vslice-full" if share >= 100 else " vslice-high" if share >= 80 else ""
    return (
        f'<span class="vslice-meter"><span class="vslice-bar{level}" title="{share}%">'
        f'<span style="width:{share}%"></span></span><span>{esc(label)}</span></span>'
    )


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], numeric: set[int]) -> str:
    """An HTML table; cells are already-escaped HTML, columns in ``numeric`` align right."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="vslice-num">{cell}</td>' if i in numeric else f"<td>{cell}</td>"
            for i, cell in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return (
        f'<table class="vslice-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    )


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces (the kubectl look)."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = [headers, *rows]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


# --- GPU inventory ---------------------------------------------------------------------


def _totals(rows: Sequence[GpuRow]) -> dict[str, int]:
    return {
        "memory_used": sum(r.memory_used_mib for r in rows),
        "memory": sum(r.memory_mib for r in rows),
        "cores_used": sum(r.cores_used for r in rows),
        "cores": sum(r.cores for r in rows),
        "slots_used": sum(r.slots_used for r in rows),
        "slots": sum(r.slots for r in rows),
    }


def model_label(row: GpuRow) -> str:
    """The GPU's model, marked ``(DRA)`` when its slices are ResourceClaims: such a GPU takes
    no ``nvidia.com/gpu*`` pod, which a reader of the table should see at once."""
    return f"{row.model} (DRA)" if row.path == "dra" else row.model


def gpu_state(row: GpuRow) -> str:
    """``OVERBOOKED``, ``unhealthy``, ``cordoned`` or ``ok``: one word per GPU, for tables."""
    if row.overbooked:
        return "OVERBOOKED"
    if not row.healthy:
        return "unhealthy"
    return "cordoned" if row.cordoned else "ok"


def _gpu_cells(row: GpuRow) -> list[str]:
    pods = (
        ", ".join(f"<code>{esc(p)}</code>" for p in row.pods)
        or '<span class="vslice-muted">-</span>'
    )
    state = gpu_state(row)
    chip = "vslice-ok" if state == "ok" else "vslice-bad"
    return [
        esc(row.index),
        f'<div class="vslice-gpu">{esc(model_label(row))}<br>'
        f'<code class="vslice-muted">{esc(row.uuid)}</code></div>',
        f'<span class="vslice-chip {chip}">{esc(state)}</span>',
        meter(row.slots_used, row.slots, f"{row.slots_used}/{row.slots}"),
        meter(row.memory_used_mib, row.memory_mib, gib_pair(row.memory_used_mib, row.memory_mib)),
        meter(row.cores_used, row.cores, cores_label(row.cores_used, row.cores)),
        f'<div class="vslice-pods">{pods}</div>',
    ]


def _summary_chips(totals: dict[str, int]) -> str:
    memory = (
        f"memory {gib_pair(totals['memory_used'], totals['memory'])} "
        f"({percent(totals['memory_used'], totals['memory'])}%)"
    )
    cores = f"cores {percent(totals['cores_used'], totals['cores'])}%"
    slots = f"slots {totals['slots_used']}/{totals['slots']}"
    return "".join(f'<span class="vslice-chip">{esc(c)}</span>' for c in (memory, cores, slots))


def by_node(gpus: Iterable[GpuRow]) -> dict[str, list[GpuRow]]:
    """Rows grouped by node, nodes in name order (one pass, not one per node)."""
    groups: dict[str, list[GpuRow]] = {}
    for row in gpus:
        groups.setdefault(row.node, []).append(row)
    return dict(sorted(groups.items()))


def _node_details(node: str, rows: list[GpuRow]) -> str:
    headers = ["#", "GPU", "state", "slots", "memory", "cores", "pods"]
    summary = (
        f'<summary><span class="vslice-node">{esc(node)}</span> '
        f'<span class="vslice-muted">{len(rows)} GPUs</span> {_summary_chips(_totals(rows))}'
        "</summary>"
    )
    return f"<details open>{summary}{table(headers, map(_gpu_cells, rows), set())}</details>"


def _node_summaries(groups: dict[str, list[GpuRow]]) -> str:
    """One compact row per node, for the nodes past the detailed ones."""
    rows = []
    for node, gpu_rows in groups.items():
        t = _totals(gpu_rows)
        rows.append(
            [
                esc(node),
                str(len(gpu_rows)),
                meter(t["slots_used"], t["slots"], f"{t['slots_used']}/{t['slots']}"),
                meter(t["memory_used"], t["memory"], gib_pair(t["memory_used"], t["memory"])),
                meter(t["cores_used"], t["cores"], f"{percent(t['cores_used'], t['cores'])}%"),
            ]
        )
    return table(["node", "GPUs", "slots", "memory", "cores"], rows, {1})


def gpus_html(gpus: GpuTable) -> str:
    """Per node a collapsible GPU table; past ``MAX_DETAILED_GPUS`` one summary row per node
    (a notebook output of megabytes helps nobody; ``to_pandas()`` has every row)."""
    groups = by_node(gpus)
    sections: list[str] = []
    shown = 0
    for node, rows in groups.items():
        if shown + len(rows) > MAX_DETAILED_GPUS and sections:
            break
        sections.append(_node_details(node, rows))
        shown += len(rows)
    rest = dict(list(groups.items())[len(sections) :])
    if rest:
        sections.append(
            f'<p class="vslice-muted">{len(rest)} more nodes, one line each '
            "(<code>.to_pandas()</code> has every GPU):</p>" + _node_summaries(rest)
        )
    header = (
        f'<div class="vslice-header"><span class="vslice-title">GPU inventory</span>'
        f'<span class="vslice-muted">{len(groups)} nodes, {len(gpus)} GPUs</span>'
        f"{_summary_chips(_totals(list(gpus)))}</div>"
    )
    if not groups:
        sections.append('<p class="vslice-muted">No node advertises vslice GPUs.</p>')
    return wrap(header + "".join(sections), truncated(gpus_text(gpus)))


def truncated(text: str, max_lines: int = MAX_FALLBACK_LINES) -> str:
    """The text fallback inside HTML output, cut to its first lines and its last line."""
    lines = text.splitlines()
    if len(lines) <= max_lines:
        return text
    cut = len(lines) - max_lines
    return "\n".join(
        [*lines[: max_lines - 1], f"... {cut} more lines (print() shows all)", lines[-1]]
    )


HEADERS = ["NODE", "ADDRESS", "GPU", "MODEL", "STATE", "SLOTS", "MEMORY(GiB)", "CORES(%)", "PODS"]
"""The columns of the GPU table in a terminal: ``vslice top`` and ``print(client.gpus())``."""


def plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def memory_cell(used_mib: int, total_mib: int) -> str:
    return f"{gib(used_mib)}/{gib(total_mib)}"


def idle_words(mark: IdleMark, now: datetime) -> str:
    """``idle 4h02m`` and, for a warned pod, when it will be evicted (docs/idle.md)."""
    words = f"idle {format_duration(mark.idle_s(now))}"
    if mark.reclaim_at is not None:
        words += f", evicted at {mark.reclaim_at:%Y-%m-%d %H:%M} UTC unless it launches a kernel"
    return words


def _holder_cell(row: GpuRow) -> str:
    idle = set(row.idle_pods)
    return ",".join(p + (" (idle)" if p in idle else "") for p in row.pods) or "-"


def gpu_cells(row: GpuRow) -> list[str]:
    return [
        row.node,
        row.address or "-",
        str(row.index),
        model_label(row),
        gpu_state(row),
        f"{row.slots_used}/{row.slots}",
        memory_cell(row.memory_used_mib, row.memory_mib),
        f"{row.cores_used}/{row.cores}",
        _holder_cell(row),
    ]


def node_cells(node: str, rows: Sequence[GpuRow]) -> list[str]:
    """The node's subtotal, under its GPUs (GPU column ``all``); its state cell says what
    holds the slices' memory there (``memory=driver`` or ``memory=shim``)."""
    pods = len({pod for r in rows for pod in r.pods})
    return [
        node,
        rows[0].address or "-",
        "all",
        plural(len(rows), "GPU"),
        f"memory={rows[0].memory_backend}",
        f"{sum(r.slots_used for r in rows)}/{sum(r.slots for r in rows)}",
        memory_cell(sum(r.memory_used_mib for r in rows), sum(r.memory_mib for r in rows)),
        f"{sum(r.cores_used for r in rows)}/{sum(r.cores for r in rows)}",
        plural(pods, "pod"),
    ]


def scope(gpus: GpuTable, nodes: Sequence[str] | None) -> str:
    """What the footer's totals cover: the cluster, or the nodes asked for."""
    count = plural(len(gpus), "GPU")
    if not nodes:
        return f"cluster ({plural(len(gpus.nodes()), 'node')}, {count})"
    chosen = gpus.nodes()
    word = "node" if len(chosen) == 1 else "nodes"
    return f"{word} {', '.join(chosen)} ({count})"


def footer(gpus: GpuTable, nodes: Sequence[str] | None, pending: int = 0) -> str:
    """``cluster (3 nodes, 10 GPUs): memory 52.0/400.0 GiB (13%), cores ... allocated``."""
    used = sum(r.memory_used_mib for r in gpus)
    memory = sum(r.memory_mib for r in gpus)
    cores_used = sum(r.cores_used for r in gpus)
    cores = sum(r.cores for r in gpus)
    text = (
        f"{scope(gpus, nodes)}: memory {memory_cell(used, memory)} GiB "
        f"({percent(used, memory)}%), cores {cores_used}/{cores}% ({percent(cores_used, cores)}%), "
        f"slots {sum(r.slots_used for r in gpus)}/{sum(r.slots for r in gpus)} allocated"
    )
    if pending:
        where = " in the cluster" if nodes else ""
        text += f"; {plural(pending, 'pod')} waiting for a slice{where}"
    return text


def gpu_rows_text(gpus: GpuTable) -> str:
    """Per node its GPUs, then the node's subtotal (GPU column ``all``)."""
    lines: list[list[str]] = []
    for node, rows in by_node(gpus).items():
        lines.extend(gpu_cells(r) for r in rows)
        lines.append(node_cells(node, rows))
    return text_table(HEADERS, lines)


def gpus_text(gpus: GpuTable) -> str:
    """The same table as ``vslice top`` (GiB, ``1 pod``), then what the totals cover."""
    if not len(gpus):
        return "No node advertises vslice GPUs."
    end = footer(gpus, None)
    return gpu_rows_text(gpus) + "\n" + "-" * min(len(end), 100) + "\n" + end


# --- Allocations -----------------------------------------------------------------------

_ALLOCATION_HEADERS = ["NAMESPACE", "POD", "CONTAINER", "NODE", "GPU", "MODEL", "MEMORY", "CORES"]


def _allocation_row(row: AllocationRow) -> list[str]:
    return [
        row.namespace,
        row.pod,
        row.container,
        row.node,
        f"{row.gpu_index} {row.gpu_uuid}",
        row.gpu_model,
        format_mib(row.memory_mib),
        f"{row.cores}%",
    ]


def allocations_html(allocations: AllocationTable) -> str:
    rows = [[esc(cell) for cell in _allocation_row(r)] for r in allocations[:MAX_HTML_ROWS]]
    if len(allocations) > MAX_HTML_ROWS:
        more = f"... {len(allocations) - MAX_HTML_ROWS} more (.to_pandas() has every row)"
        rows.append([esc(more), *[""] * (len(_ALLOCATION_HEADERS) - 1)])
    pods = len({r.holder for r in allocations})
    header = (
        f'<div class="vslice-header"><span class="vslice-title">GPU allocations</span>'
        f'<span class="vslice-muted">{pods} pods, {len(allocations)} GPU grants</span></div>'
    )
    body = (
        table([h.lower() for h in _ALLOCATION_HEADERS], rows, {6, 7})
        if rows
        else '<p class="vslice-muted">No pod holds a GPU slice.</p>'
    )
    return wrap(header + body, truncated(allocations_text(allocations)))


def allocations_text(allocations: AllocationTable) -> str:
    if not len(allocations):
        return "No pod holds a GPU slice."
    return text_table(_ALLOCATION_HEADERS, [_allocation_row(r) for r in allocations])


# --- Plans -----------------------------------------------------------------------------


def _reason_chips(reasons: dict[str, int]) -> str:
    return " ".join(
        f'<span class="vslice-chip vslice-bad" title="{esc(explain(code))}">'
        f"{esc(code)} &times;{count}</span>"
        for code, count in reasons.items()
    )


def _why_cell(plan: Plan, verdict: NodeVerdict) -> str:
    if verdict.fits:
        return ""
    words = whynot.node_line(verdict, plan.request or PodRequest())
    return f'{_reason_chips(verdict.reasons)} <span class="vslice-why">{esc(words)}</span>'


def plan_html(plan: Plan) -> str:
    wanted = esc(plan.slice.describe() if plan.slice else "request")
    explanation = plan.explanation()
    if plan.fits:
        badge = f'<span class="vslice-badge vslice-ok">fits on {esc(plan.node)}</span>'
    else:
        badge = '<span class="vslice-badge vslice-bad">does not fit</span>'
    header = (
        f'<div class="vslice-header"><span class="vslice-title">Plan</span>{badge}'
        f'<span class="vslice-muted">{wanted} in namespace {esc(plan.namespace)}</span></div>'
    )
    cause = ""
    if not plan.fits:
        cause = f'<div class="vslice-cause">{esc(explanation.headline)}</div>'
        if explanation.suggestions:
            cause += f'<div class="vslice-suggestion">{esc(explanation.suggestion_line())}</div>'
    grants = [
        [
            esc(name),
            f"{g.index} <code>{esc(g.uuid)}</code>",
            esc(format_mib(g.memory_mib)),
            f"{g.cores}%",
        ]
        for name, gs in plan.grants.items()
        for g in gs
    ]
    grant_table = table(["container", "GPU", "memory", "cores"], grants, {2, 3}) if grants else ""
    verdicts = [
        [
            esc(name),
            '<span class="vslice-chip vslice-ok">fits</span>'
            if v.fits
            else '<span class="vslice-chip vslice-bad">no</span>',
            "" if v.score is None else f"{v.score:.2f}",
            _why_cell(plan, v),
        ]
        for name, v in sorted(plan.decision.nodes.items())
    ]
    node_table = table(["node", "fits", "score", "why not"], verdicts, {2})
    path = ""
    if plan.path == "dra":
        first, *rest = dra.plan_lines(plan.notes)
        items = "".join(f"<li>{esc(line.strip())}</li>" for line in rest)
        path = (
            f'<div class="vslice-cause"><span class="vslice-chip">DRA</span> {esc(first)}</div>'
            + (f'<ul class="vslice-muted">{items}</ul>' if items else "")
        )
    return wrap(header + cause + path + grant_table + node_table, plan_text(plan))


def plan_text(plan: Plan) -> str:
    """The core's plan text (the same ``vslice plan`` prints), titled with the slice; a DRA
    plan ends with who places the pod and what the answer leaves out."""
    title = plan.slice.describe() if plan.slice else None
    text = whynot.render_plan(plan.decision, plan.request or PodRequest(), title)
    if plan.path == "dra":
        text += "\n" + "\n".join(dra.plan_lines(plan.notes))
    return text


# --- One pod's placement ---------------------------------------------------------------


def placement_text(placement: Placement) -> str:
    head = f"{placement.namespace}/{placement.pod} on node {placement.node}"
    return head + "\n" + allocations_text(placement.grants)


def placement_html(placement: Placement) -> str:
    header = (
        f'<div class="vslice-header"><span class="vslice-title">{esc(placement.pod)}</span>'
        f'<span class="vslice-muted">namespace {esc(placement.namespace)}</span>'
        f'<span class="vslice-chip vslice-ok">on {esc(placement.node)}</span></div>'
    )
    rows = [
        [
            esc(r.container),
            f"{esc(r.gpu_index)} <code>{esc(r.gpu_uuid)}</code>",
            esc(r.gpu_model),
            esc(format_mib(r.memory_mib)),
            f"{r.cores}%",
        ]
        for r in placement.grants
    ]
    body = table(["container", "GPU", "model", "memory", "cores"], rows, {3, 4})
    return wrap(header + body, placement_text(placement))


# --- Amounts for terminal tables -------------------------------------------------------


def gib(mib: int) -> str:
    """MiB as GiB with one decimal and no unit, for columns headed ``(GiB)``: ``12288`` ->
    ``12.0``, ``512`` -> ``0.5``; rounded down like every GiB amount (:func:`format_gib`)."""
    return format_gib(mib, decimal=True)


# --- What renders which object (its ``_repr_html_`` and ``str``) ------------------------

rendering.register(GpuTable, html=gpus_html, text=gpus_text)
rendering.register(AllocationTable, html=allocations_html, text=allocations_text)
rendering.register(Placement, html=placement_html, text=placement_text)
rendering.register(Plan, html=plan_html, text=plan_text)
