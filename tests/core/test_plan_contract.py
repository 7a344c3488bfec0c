"""``vslice plan`` as DESIGN.md specifies it: JSON shape, reason codes, exit codes, stderr."""

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from core_builders import container, gpu, node, pod, used
from hypothesis import example, given, settings
from hypothesis import strategies as st
from vslice.cli import main
from vslice_core.annotations import ALLOCATION, NODE_GPUS, encode_allocation, encode_node_gpus
from vslice_core.cluster import parse_cluster
from vslice_core.model import Allocation, ContainerAllocation, GpuGrant

CLUSTER = {
    "nodes": [
        node("node-1", gpu("GPU-0", used=used(slots=1, memory_mib=30720, cores=50))),
        node(
            "node-2",
            gpu("GPU-2", memory_mib=16000, model="Tesla-T4"),
            gpu("GPU-3", memory_mib=16000, model="Tesla-T4"),
        ),
    ]
}
MAIN = pod(container(gpu=1, mem=30720, cores=50))
T4_ROOM = {
    "gpus": 2,
    "usable": 2,
    "open": 2,
    "largest_mib": 16000,
    "free_mib": 16000,
    "free_gpu": 0,
    "free_of_mib": 16000,
    "free_cores": 100,
}
WHY_NOT_TWO_GPUS = (
    "does not fit: asks 2 GPUs with 19.5 GiB each; no node has that free now\n"
    "  node-1: asks 2 GPUs, 1 of its 1 can take it\n"
    "  node-2: its largest GPU has 15.6 GiB, asks 19.5 GiB (memory, x2)\n"
    "would fit now: 2 GPUs with 15.6 GiB on node-2 (GPU 0, 1); "
    "or 1 GPU instead of 2 on node-1 (GPU 0)"
)


def write(tmp_path: Path, name: str, data: Any) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return str(path)


def plan(tmp_path: Path, cluster: Any, manifest: Any, *flags: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    args = [
        "plan",
        write(tmp_path, "cluster.yaml", cluster),
        write(tmp_path, "pod.yaml", manifest),
        *flags,
    ]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(args)
    return status, out.getvalue(), err.getvalue()


def test_a_fitting_pod_prints_the_design_json_and_exits_0(tmp_path: Path) -> None:
    status, out, err = plan(tmp_path, CLUSTER, MAIN, "--json")
    assert (status, err) == (0, "")
    assert json.loads(out) == {
        "fits": True,
        "node": "node-1",
        "containers": [
            {"name": "main", "gpus": [{"uuid": "GPU-0", "memory_mib": 30720, "cores": 50}]}
        ],
        "nodes": {
            "node-1": {"fits": True, "score": 3.75, "reasons": {}},
            "node-2": {
                "fits": False,
                "score": None,
                "reasons": {"insufficient_memory": 2},
                "room": T4_ROOM,
            },
        },
        "suggestions": [],
        "why_not": None,
    }
    assert out.count("\n") == 1


def test_a_pod_that_fits_nowhere_prints_fits_false_and_exits_1(tmp_path: Path) -> None:
    status, out, err = plan(tmp_path, CLUSTER, pod(container(gpu=2, mem=20000)), "--json")
    assert (status, err) == (1, "")
    assert json.loads(out) == {
        "fits": False,
        "node": None,
        "containers": [],
        "nodes": {
            "node-1": {
                "fits": False,
                "score": None,
                "reasons": {"too_few_gpus": 1},
                "room": {
                    "gpus": 1,
                    "usable": 1,
                    "open": 1,
                    "largest_mib": 81920,
                    "free_mib": 81920 - 30720,
                    "free_gpu": 0,
                    "free_of_mib": 81920,
                    "free_cores": 50,
                },
            },
            "node-2": {
                "fits": False,
                "score": None,
                "reasons": {"insufficient_memory": 2},
                "room": T4_ROOM,
            },
        },
        # The engine's own answer: the largest slice two GPUs can each give now, and
        # the same slice on one GPU (node-1 has 50 GiB free).
        "suggestions": [
            {
                "change": "smaller",
                "node": "node-2",
                "gpus": 2,
                "memory_mib": 16000,
                "memory_percent": None,
                "cores": 0,
                "gpu_indices": [0, 1],
                "gpu_model": None,
            },
            {
                "change": "fewer_gpus",
                "node": "node-1",
                "gpus": 1,
                "memory_mib": 20000,
                "memory_percent": None,
                "cores": 0,
                "gpu_indices": [0],
                "gpu_model": None,
            },
        ],
        "why_not": WHY_NOT_TWO_GPUS,
    }


def test_the_text_form_names_the_node_the_gpus_and_the_reasons(tmp_path: Path) -> None:
    status, out, _ = plan(tmp_path, CLUSTER, MAIN)
    assert status == 0
    assert out.splitlines() == [
        "1 GPU with 30 GiB, 50% cores: fits on node-1",
        "  main: GPU 0 GPU-0, 30 GiB, 50% cores",
        "  node-1  fits  score 3.75",
        "  node-2  no    its largest GPU has 15.6 GiB, asks 30 GiB (memory, x2)",
    ]


def test_the_text_of_a_pod_that_fits_nowhere_is_the_json_why_not(tmp_path: Path) -> None:
    status, out, _ = plan(tmp_path, CLUSTER, pod(container(gpu=2, mem=20000)))
    assert status == 1
    assert out == "2 GPUs with 19.5 GiB each: " + WHY_NOT_TWO_GPUS + "\n"


def test_a_request_larger_than_any_gpu_is_not_blamed_on_free_memory(tmp_path: Path) -> None:
    status, out, _ = plan(tmp_path, CLUSTER, pod(container(mem=200 * 1024, cores=30)))
    assert status == 1
    lines = out.splitlines()
    assert lines[0] == (
        "1 GPU with 200 GiB, 30% cores: does not fit: "
        "asks 200 GiB per GPU; the largest GPU here has 80 GiB"
    )
    assert lines[-1] == "would fit now: 1 GPU with 50 GiB, 30% cores on node-1 (GPU 0)"


@pytest.mark.parametrize(
    ("cluster", "manifest", "message"),
    [
        (CLUSTER, pod(container(cores=120)), "nvidia.com/gpucores must be 0..100, got 120"),
        (
            CLUSTER,
            pod(container(mem=1), annotations={"vslice.io/gpu-policy": "fastest"}),
            "vslice.io/gpu-policy must be one of binpack, mutex, spread, topology, got 'fastest'",
        ),
        (
            CLUSTER,
            pod(container(mem=1), annotations={"vslice.io/node-policy": "x"}),
            "vslice.io/node-policy must be one of binpack, spread, got 'x'",
        ),
        ("nodes: [", MAIN, "CLUSTER must be valid YAML or JSON, got "),
        (CLUSTER, "kind: Pod\nspec: {containers: [}", "POD must be valid YAML or JSON, got "),
        ("", MAIN, "cluster must be a mapping with 'nodes', got NoneType"),
        (
            {"nodes": [{"name": "n", "gpus": [{"uuid": "G"}]}]},
            MAIN,
            "nodes.0.gpus.0.model must be set, got nothing",
        ),
        (CLUSTER, pod(container("web")), "spec.containers must request a GPU (nvidia.com/gpu, "),
        (CLUSTER, {"kind": "Service"}, "kind must be one of Pod, Deployment"),
        (
            CLUSTER,
            {"kind": "Deployment", "spec": {}},
            "spec.template of a Deployment must be a pod template (a mapping), got None",
        ),
        (CLUSTER, "- just\n- a list\n", "pod must be a Pod manifest (a mapping), got list"),
    ],
)
def test_invalid_input_exits_2_with_one_line_naming_the_field(
    tmp_path: Path, cluster: Any, manifest: Any, message: str
) -> None:
    status, out, err = plan(tmp_path, cluster, manifest, "--json")
    assert (status, out) == (2, "")
    assert err.startswith(f"vslice plan: {message}")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_unreadable_files_exit_2(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    (tmp_path / "binary").write_bytes(b"\xff\xfe\x00nodes")
    for cluster in (str(tmp_path / "missing.yaml"), str(tmp_path / "binary"), str(tmp_path)):
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            assert main(["plan", cluster, write(tmp_path, "pod.yaml", MAIN)]) == 2
    lines = err.getvalue().splitlines()
    assert (
        lines[0] == "vslice plan: CLUSTER must be a readable UTF-8 file, got "
        f"'{tmp_path / 'missing.yaml'}' (No such file or directory)"
    )
    assert len(lines) == 3 and all(
        line.startswith("vslice plan: CLUSTER must be a readable") for line in lines
    )


def test_cluster_and_pod_cannot_both_come_from_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(CLUSTER)))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["plan", "-", "-"]) == 2
    assert err.getvalue() == "vslice plan: CLUSTER and POD cannot both be '-' (stdin)\n"


def _dump() -> dict[str, Any]:
    inventory = (
        parse_cluster({"nodes": [node("node-1", gpu("G0", memory_mib=40000))]}).nodes[0].inventory()
    )
    grant = GpuGrant(uuid="G0", index=0, memory_mib=30000, cores=10)
    held = Allocation(node="node-1", containers=[ContainerAllocation(name="main", gpus=[grant])])
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "kind": "Node",
                "metadata": {
                    "name": "node-1",
                    "annotations": {NODE_GPUS: encode_node_gpus(inventory)},
                },
            },
            {
                "kind": "Pod",
                "metadata": {"name": "busy", "annotations": {ALLOCATION: encode_allocation(held)}},
                "status": {"phase": "Running"},
            },
        ],
    }


def test_a_kubectl_dump_answers_why_a_pod_does_not_fit(tmp_path: Path) -> None:
    status, out, err = plan(tmp_path, _dump(), pod(container(mem=20000)), "--json", "--from-dump")
    assert (status, err) == (1, "")
    verdict = json.loads(out)["nodes"]["node-1"]
    assert (verdict["fits"], verdict["reasons"]) == (False, {"insufficient_memory": 1})
    assert (verdict["room"]["free_mib"], verdict["room"]["free_of_mib"]) == (10000, 40000)
    status, out, _ = plan(tmp_path, _dump(), pod(container(mem=10000)), "--json")
    assert status == 0 and json.loads(out)["node"] == "node-1"


def test_a_workload_manifest_is_planned_through_its_pod_template(tmp_path: Path) -> None:
    template = pod(container(mem=1000))
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"template": template},
    }
    status, out, _ = plan(tmp_path, CLUSTER, deployment, "--json")
    assert status == 0 and json.loads(out)["containers"][0]["name"] == "main"


@settings(max_examples=60, deadline=None)
@given(
    st.text(max_size=300)
    | st.recursive(
        st.none() | st.integers() | st.text(max_size=5),
        lambda c: st.lists(c) | st.dictionaries(st.text(max_size=8), c),
        max_leaves=20,
    ).map(yaml.safe_dump)
)
@example(text="? '\n\n'\n")  # a key made of newlines once broke the one-line promise
def test_arbitrary_input_never_produces_a_traceback(text: str) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        folder = Path(directory)
        for cluster, manifest in ((text, yaml.safe_dump(MAIN)), (yaml.safe_dump(CLUSTER), text)):
            out, err = io.StringIO(), io.StringIO()
            (folder / "c.yaml").write_text(cluster)
            (folder / "p.yaml").write_text(manifest)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                status = main(["plan", str(folder / "c.yaml"), str(folder / "p.yaml"), "--json"])
            assert status in (0, 1, 2)
            if status == 2:
                assert (
                    err.getvalue().startswith("vslice plan: ") and err.getvalue().count("\n") == 1
                )
            else:
                assert json.loads(out.getvalue())["fits"] is (status == 0)


def test_the_installed_command_follows_the_contract(tmp_path: Path) -> None:
    cluster = write(tmp_path, "cluster.yaml", CLUSTER)
    bad = write(tmp_path, "bad.yaml", pod(container(cores=120)))
    command = [sys.executable, "-m", "vslice.cli", "plan", cluster, bad, "--json"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "vslice plan: nvidia.com/gpucores must be 0..100, got 120\n"


DESIGN_CLUSTER = """
nodes:
  - name: node-1
    gpus:
      - uuid: GPU-0
        model: NVIDIA-A100-SXM4-80GB
        memory_mib: 81920
        cores: 100            # optional, default 100
        slots: 10             # max slices at once on this GPU
        index: 0              # optional, default: position in the list
        numa: 0               # optional, default 0
        healthy: true         # optional, default true
        cordoned: false       # optional, default false
        used: {slots: 1, memory_mib: 30720, cores: 50}   # optional, default all zero
    topology: {"GPU-0,GPU-1": 100}                         # optional pair link scores
quotas:                                                    # optional, per namespace
  team-a: {limits: {memory_mib: 40960, cores: 200}, used: {memory_mib: 1024, cores: 20}}
"""
DESIGN_POD = """
apiVersion: v1
kind: Pod
metadata: {name: notebook}
spec:
  containers:
    - name: main
      image: pytorch
      resources:
        limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 30720, nvidia.com/gpucores: 50}
"""


def test_the_design_example_gives_the_design_answer(tmp_path: Path) -> None:
    status, out, err = plan(tmp_path, DESIGN_CLUSTER, DESIGN_POD, "--json")
    assert (status, err) == (0, "")
    result = json.loads(out)
    assert (result["fits"], result["node"]) == (True, "node-1")
    assert result["containers"] == [
        {"name": "main", "gpus": [{"uuid": "GPU-0", "memory_mib": 30720, "cores": 50}]}
    ]
    assert result["nodes"]["node-1"]["fits"] is True and result["nodes"]["node-1"]["reasons"] == {}
    quota_pod = DESIGN_POD.replace("{name: notebook}", "{name: notebook, namespace: team-a}")
    status, out, _ = plan(tmp_path, DESIGN_CLUSTER, quota_pod, "--json")
    assert status == 0
    too_much = quota_pod.replace("30720", "40000")
    status, out, _ = plan(tmp_path, DESIGN_CLUSTER, too_much, "--json")
    assert status == 1
    assert json.loads(out)["nodes"]["node-1"]["reasons"] == {"quota_exceeded": 1}


EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def test_the_example_pod_does_not_fit_its_namespaces_quota_and_says_what_would(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = main(["plan", str(EXAMPLES / "cluster.yaml"), str(EXAMPLES / "pod.yaml")])
    out, err = capsys.readouterr()
    assert (status, err) == (1, "")
    assert out.splitlines() == [
        "1 GPU with 10 GiB, 30% cores: does not fit: asks 10 GiB of GPU memory, the quota of "
        "namespace team-a has 8 GiB left (32 GiB of 40 GiB in use)",
        "  node-a100: its GPUs have room, the namespace quota does not: asks 10 GiB of GPU "
        "memory here (quota)",
        "  node-t4: its GPUs have room, the namespace quota does not: asks 10 GiB of GPU "
        "memory here (quota)",
        "would fit now: 1 GPU with 8 GiB, 30% cores on node-t4 (GPU 0)",
    ]
