"""Notebook and terminal output: escaped, styled by shipped CSS, with a text fallback."""

from __future__ import annotations

import re
from importlib import resources

from api_objects import A100, node, pod
from vslice import views
from vslice.plans import plan_manifest, slice_manifest
from vslice.slices import Slice
from vslice.snapshot import ClusterSnapshot

EVIL = "<script>alert(1)</script>"


def _hostile_snapshot() -> ClusterSnapshot:
    """A node and a pod whose names and model carry markup (the API allows odd models)."""
    evil_node = node("node-x", f"{A100}{EVIL}", 81920, 1)
    holder = pod("ns", "p", "node-x", [("GPU-node-x-0", 0, 1024, 10)])
    holder["metadata"]["name"] = f"p{EVIL}"
    return ClusterSnapshot.read([evil_node], [holder])


def test_every_cluster_string_is_escaped_in_html() -> None:
    snapshot = _hostile_snapshot()
    wanted = Slice("1Gi")
    outputs = [
        snapshot.gpus()._repr_html_(),
        snapshot.allocations()._repr_html_(),
        plan_manifest(snapshot, slice_manifest(wanted), slice=wanted)._repr_html_(),
    ]
    for output in outputs:
        assert "<script>" not in output
    assert "&lt;script&gt;" in outputs[0] and "&lt;script&gt;" in outputs[1]


def test_the_stylesheet_ships_as_package_data_and_is_embedded() -> None:
    css = resources.files("vslice").joinpath("static/vslice.css").read_text()
    assert ".vslice-wrap" in css
    assert css in views.gpus_html(ClusterSnapshot().gpus())


def test_the_rich_view_starts_hidden_behind_a_text_fallback(snapshot: ClusterSnapshot) -> None:
    output = snapshot.gpus()._repr_html_()
    fallback = re.search(r'<pre class="vslice-text-fallback">(.*?)</pre>', output, re.S)
    assert fallback is not None
    assert "node-a" in fallback.group(1) and "60.0/80.0" in fallback.group(1)
    assert '<div class="vslice-wrap" style="display:none">' in output


def test_printed_gpus_are_the_same_table_as_vslice_top_in_gib(snapshot: ClusterSnapshot) -> None:
    text = str(snapshot.gpus())
    lines = text.splitlines()
    assert lines[0].split() == views.HEADERS
    assert lines[1].split() == [
        "node-a",
        "-",
        "0",
        A100,
        "ok",
        "2/4",
        "60.0/80.0",
        "80/100",
        "team-a/train,team-b/infer",
    ]
    assert lines[3].split() == [
        "node-a",
        "-",
        "all",
        "2",
        "GPUs",
        "memory=shim",
        "2/8",
        "60.0/160.0",
        "80/200",
        "2",
        "pods",
    ]
    assert "memory 70.0/175.0 GiB (40%)" in lines[-1]
    assert "slots 3/10" in lines[-1]
    assert "1 pods" not in text
    assert text == views.gpu_rows_text(snapshot.gpus()) + "\n" + "\n".join(lines[-2:])


def test_finished_pods_hold_nothing(snapshot: ClusterSnapshot) -> None:
    holders = {row.holder for row in snapshot.allocations()}
    assert holders == {"team-a/train", "team-b/infer", "team-b/small"}


def test_allocations_can_be_filtered_by_namespace(snapshot: ClusterSnapshot) -> None:
    rows = snapshot.allocations("team-a")
    assert [(r.pod, r.gpu_model, r.memory_mib, r.cores) for r in rows] == [
        ("train", A100, 40960, 50)
    ]


def test_tables_convert_to_pandas(snapshot: ClusterSnapshot) -> None:
    frame = snapshot.gpus().to_pandas()
    assert list(frame["memory_used_mib"]) == [61440, 0, 10240]
    assert "slots_used" in frame.columns


def test_an_empty_cluster_says_so() -> None:
    empty = ClusterSnapshot()
    assert "No node advertises vslice GPUs" in empty.gpus()._repr_html_()
    assert str(empty.allocations()) == "No pod holds a GPU slice."


def test_a_malformed_annotation_is_reported_not_raised() -> None:
    broken = {"metadata": {"name": "bad", "annotations": {"vslice.io/node-gpus": "{not json"}}}
    good = node("good", A100, 1024, 1)
    snapshot = ClusterSnapshot.read([broken, good], [])
    assert [row.node for row in snapshot.gpus()] == ["good"]
    assert len(snapshot.problems) == 1 and snapshot.problems[0].startswith("node bad:")


def test_the_gpu_view_counts_usage_exactly_as_the_ledger(snapshot: ClusterSnapshot) -> None:
    ledger = snapshot.ledger()
    for row in snapshot.gpus():
        used = ledger.gpu_usage(row.node).get(row.uuid)
        expected = (used.slots, used.memory_mib, used.cores) if used else (0, 0, 0)
        assert (row.slots_used, row.memory_used_mib, row.cores_used) == expected


def test_a_large_inventory_lists_later_nodes_one_line_each() -> None:
    nodes = [node(f"n-{i:03d}", A100, 81920, 8) for i in range(40)]
    output = ClusterSnapshot.read(nodes, []).gpus()._repr_html_()
    assert output.count("<details") == views.MAX_DETAILED_GPUS // 8
    assert f"{40 - views.MAX_DETAILED_GPUS // 8} more nodes, one line each" in output
    assert "n-039" in output


def test_an_over_booked_gpu_is_shown_as_such_with_its_numbers() -> None:
    """A forged allocation is counted where it claims to be (docs/security.md), so a GPU can
    hold more than it has; the views say so instead of showing a full but healthy card."""
    small = node("node-o", A100, 16384, 1)
    pods = [
        pod("team", "honest", "node-o", [("GPU-node-o-0", 0, 8192, 50)]),
        pod("team", "forged", "node-o", [("GPU-node-o-0", 0, 16384, 100)]),
    ]
    rows = list(ClusterSnapshot.read([small], pods).gpus())
    assert rows[0].overbooked and rows[0].memory_used_mib == 24576
    text = str(ClusterSnapshot.read([small], pods).gpus())
    assert "OVERBOOKED" in text and "24.0/16.0" in text
    assert "OVERBOOKED" in ClusterSnapshot.read([small], pods).gpus()._repr_html_()
    assert not next(iter(ClusterSnapshot.read([small], pods[:1]).gpus())).overbooked


def test_the_gpu_table_wraps_long_pod_and_gpu_names_instead_of_clipping_them(
    snapshot: ClusterSnapshot,
) -> None:
    output = snapshot.gpus()._repr_html_()
    assert '<div class="vslice-pods"><code>team-a/train</code>, <code>team-b/infer</code>' in output
    assert '<div class="vslice-gpu">' in output
    css = views.stylesheet()
    assert "table-layout: auto" in css  # JupyterLab's fixed layout squeezed the columns
    assert re.search(r"\.vslice-pods \{[^}]*white-space: normal", css)


def test_the_gpu_table_shows_memory_in_one_unit_and_cores_as_a_share(
    snapshot: ClusterSnapshot,
) -> None:
    output = snapshot.gpus()._repr_html_()
    assert "60 / 80 GiB" in output and "10 / 15 GiB" in output
    assert "<span>80%</span>" in output
    assert views.gib_pair(81559, 83519) == "79.6 / 81.5 GiB"  # rounded down, as why-not texts
    assert views.cores_label(30, 200) == "30/200%"
