"""What ``vslice top`` and ``vslice allocations`` print, built from a snapshot without I/O."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from api_objects import cluster_objects
from vslice import views
from vslice.commands import allocations, top
from vslice.errors import InvalidRequest
from vslice.snapshot import ClusterSnapshot
from vslice.views import gib


def pending_pod(name: str, gpus: int, memory_mib: int, **extra: Any) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus), "nvidia.com/gpumem": str(memory_mib)}
    pod: dict[str, Any] = {
        "metadata": {"namespace": "team-c", "name": name},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
        "status": {"phase": "Pending"},
    }
    pod.update(extra)
    return pod


@pytest.fixture
def cluster() -> ClusterSnapshot:
    nodes, pods = cluster_objects()
    nodes[0]["status"] = {
        "addresses": [
            {"type": "Hostname", "address": "node-a"},
            {"type": "InternalIP", "address": "10.0.0.1"},
        ]
    }
    pods += [
        pending_pod("big", 1, 92160),
        pending_pod("bound", 1, 1024, spec={"nodeName": "node-b", "containers": []}),
        {"metadata": {"namespace": "x", "name": "cpu-only"}, "status": {"phase": "Pending"}},
    ]
    return ClusterSnapshot.read(nodes, pods)


def test_gib_shows_one_decimal() -> None:
    assert [gib(12288), gib(81920), gib(512), gib(0)] == ["12.0", "80.0", "0.5", "0.0"]


def test_a_gpu_line_shows_memory_in_gib_and_the_node_address(cluster: ClusterSnapshot) -> None:
    row = cluster.gpus()[0]
    assert views.gpu_cells(row) == [
        "node-a",
        "10.0.0.1",
        "0",
        "NVIDIA-A100-SXM4-80GB",
        "ok",
        "2/4",
        "60.0/80.0",
        "80/100",
        "team-a/train,team-b/infer",
    ]


@pytest.mark.parametrize(
    ("written", "shown"),
    [("driver", "driver"), ("shim", "shim"), (None, "shim"), ("kernel", "shim")],
)
def test_the_node_line_says_what_holds_the_slices_memory(written: str | None, shown: str) -> None:
    nodes, pods = cluster_objects()
    if written is not None:
        nodes[1]["metadata"]["annotations"]["vslice.io/memory-backend"] = written
    rows = [row for row in ClusterSnapshot.read(nodes, pods).gpus() if row.node == "node-b"]
    assert {row.memory_backend for row in rows} == {shown}
    assert views.node_cells("node-b", rows)[4] == f"memory={shown}"


def test_a_node_without_an_internal_ip_shows_a_dash(cluster: ClusterSnapshot) -> None:
    node_b = [row for row in cluster.gpus() if row.node == "node-b"]
    assert node_b[0].address == "" and views.gpu_cells(node_b[0])[1] == "-"
    assert views.node_cells("node-b", node_b)[1:4] == ["-", "all", "1 GPU"]


def test_only_unplaced_pods_that_ask_for_gpus_are_pending(cluster: ClusterSnapshot) -> None:
    assert [pod.holder for pod in cluster.pending] == ["team-c/big"]


def test_a_pending_pod_says_why_it_waits_with_numbers(cluster: ClusterSnapshot) -> None:
    (line,) = top.pending_lines(cluster)
    assert line.pod == "team-c/big" and line.asks.startswith("1 GPU with 90 GiB")
    assert line.why.startswith("does not fit: asks 90 GiB per GPU; the largest GPU here has 80")
    assert "\n" not in line.why


def test_the_cluster_footer_counts_nodes_gpus_and_pending_pods(cluster: ClusterSnapshot) -> None:
    assert views.footer(cluster.gpus(), None, pending=1) == (
        "cluster (2 nodes, 3 GPUs): memory 70.0/175.0 GiB (40%), cores 100/300% (33%), "
        "slots 3/10 allocated; 1 pod waiting for a slice"
    )


def test_under_node_the_footer_names_the_node_not_the_cluster(cluster: ClusterSnapshot) -> None:
    gpus = top.select_nodes(cluster.gpus(), ["node-b"])
    text = views.footer(gpus, ["node-b"], pending=2)
    assert text.startswith("node node-b (1 GPU): memory 10.0/15.0 GiB (67%)")
    assert text.endswith("2 pods waiting for a slice in the cluster") and "cluster (" not in text


def test_an_unknown_node_lists_the_nodes_that_have_gpus(cluster: ClusterSnapshot) -> None:
    with pytest.raises(
        InvalidRequest, match=r"--node 'node-z' has no vslice GPUs; .*node-a, node-b"
    ):
        top.select_nodes(cluster.gpus(), ["node-z"])


def test_the_whole_view_has_table_pending_section_and_footer_last(
    cluster: ClusterSnapshot,
) -> None:
    lines = top.frame(cluster, None, as_json=False).splitlines()
    assert lines[0].split() == views.HEADERS
    assert lines.index("PENDING (1 waiting for a slice)") < len(lines) - 2
    assert any(line.startswith("team-c/big") and "80 GiB" in line for line in lines)
    assert lines[-1].startswith("cluster (2 nodes, 3 GPUs)")


def test_an_empty_cluster_says_so(cluster: ClusterSnapshot) -> None:
    text = top.frame(ClusterSnapshot(), None, as_json=False)
    assert text.startswith("No node advertises vslice GPUs.")
    assert text.endswith(
        "cluster (0 nodes, 0 GPUs): memory 0.0/0.0 GiB (0%), cores 0/0% (0%), slots 0/0 allocated"
    )


def test_an_overbooked_gpu_is_warned_about_in_gib() -> None:
    nodes, pods = cluster_objects()
    pods.append(
        {
            **pods[2],
            "metadata": {**pods[2]["metadata"], "name": "forged", "uid": "forged"},
        }
    )
    pods.append({**pods[2], "metadata": {**pods[2]["metadata"], "name": "f2", "uid": "f2"}})
    snapshot = ClusterSnapshot.read(nodes, pods)
    (warning,) = top.warnings(snapshot, snapshot.gpus())
    assert warning.startswith("warning: GPU 0 of node-b is over-booked (memory 30.0/15.0 GiB")


@pytest.mark.parametrize("value", ["0", "-1", "soon", "inf", "nan"])
def test_watch_refuses_an_interval_that_is_not_positive_seconds(value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=f"got {value!r}"):
        top.watch_seconds(value)


def test_watch_accepts_fractions_of_a_second() -> None:
    assert top.watch_seconds("0.5") == 0.5


def test_allocations_show_per_pod_memory_in_gib_and_cores(cluster: ClusterSnapshot) -> None:
    lines = allocations.render(cluster.allocations()).splitlines()
    assert lines[0].split() == allocations.HEADERS
    train = next(line.split() for line in lines if " train " in line)
    assert train[-3:] == ["40.0", "50", "Running"]
    assert lines[-1] == (
        "3 pods in all namespaces hold 3 GPU grants: memory 70.0 GiB, cores 100% summed over "
        "their GPUs"
    )


def test_allocations_footer_names_the_namespace(cluster: ClusterSnapshot) -> None:
    text = allocations.render(cluster.allocations("team-b"), "team-b")
    assert text.splitlines()[-1].startswith("2 pods in namespace team-b hold 2 GPU grants")
    assert allocations.render(cluster.allocations("nobody"), "nobody") == (
        "No pod in namespace nobody holds a GPU slice."
    )


@pytest.mark.parametrize("tty", [False, True])
def test_watch_redraws_until_ctrl_c_and_then_exits_0(
    tty: bool,
    cluster: ClusterSnapshot,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    class Client:
        def __enter__(self) -> Client:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def snapshot(self) -> ClusterSnapshot:
            return cluster

    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(top, "connect", lambda args: Client())
    monkeypatch.setattr(top.time, "sleep", sleep)
    monkeypatch.setattr(top.sys.stdout, "isatty", lambda: tty)
    args = argparse.Namespace(kubeconfig=None, node=None, json=False, watch=0.5, idle=None)
    assert top.run(args) == 0
    out = capsys.readouterr().out
    assert pauses == [0.5, 0.5] and out.count("PENDING (1 waiting") == 2
    # Only a terminal is cleared between frames; a file or pipe gets them one after another.
    assert out.count(top.CLEAR_SCREEN) == (2 if tty else 0)
