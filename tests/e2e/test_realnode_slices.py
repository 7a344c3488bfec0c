"""What a process inside a real container sees of its slice, on the lab's real node.

The pods run ``vslice-smoke`` (shim/smoke/, docs/smoke.md) in runc containers started by a
real kubelet and containerd; the shim is preloaded through the CDI spec the device plugin
wrote, the fake driver stands in for the GPUs (one shared state per node, so two slices on one
card add up against that card).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import vslice
from realnode_pods import RealNode, parse_smoke
from vslice_build import images

pytestmark = pytest.mark.timeout(240)
STEP_MIB = 256


def test_allocations_stop_at_the_memory_slice_in_a_real_container(
    real_node: RealNode, namespace: str
) -> None:
    text = real_node.run_smoke(namespace, "memory", ["memory"], memory_mib=4096, cores=30)
    seen = parse_smoke(text)
    assert seen["devices"] == "1", text
    assert seen["device.0.total_mib"] == seen["device.0.info_total_mib"] == "4096", text
    assert seen["nvml.0.total_mib"] == "4096", text
    assert seen["device.0.uuid"] in {gpu.uuid for gpu in real_node.gpus}
    assert seen["oom_error"] == "CUDA_ERROR_OUT_OF_MEMORY", text
    # No context overhead is configured in the lab: the slice is the limit, to one step.
    assert 4096 - STEP_MIB < int(seen["max_allocated_mib"]) <= 4096, text
    assert seen["at_oom.info_free_mib"] == "0", text
    assert seen["result"] == "ok"


def test_the_container_gets_the_shim_through_a_read_only_preload(
    real_node: RealNode, namespace: str
) -> None:
    script = (
        "cat /etc/ld.so.preload; (echo x > /etc/ld.so.preload) 2>/dev/null && echo WRITABLE; "
        "env | grep -E '^(CUDA_DEVICE|NVIDIA_VISIBLE|LD_LIBRARY_PATH)' | sort"
    )
    text = real_node.shell(namespace, "shell", script)
    assert "libvslice.so" in text
    assert "WRITABLE" not in text  # read-only: a process cannot drop the shim
    assert "CUDA_DEVICE_MEMORY_LIMIT_0=1024m" in text
    assert "LD_LIBRARY_PATH=/usr/local/nvidia/lib64" in text  # from the CDI spec
    pod = real_node.lab.read_pod(namespace, "shell")
    assert pod["spec"]["nodeName"] == real_node.name


def test_two_pods_on_one_gpu_each_see_their_own_slice_and_never_exceed_the_card(
    real_node: RealNode, namespace: str
) -> None:
    gpu = real_node.gpus[0]
    sizes = {"small": 8192, "large": 12288}
    assert sum(sizes.values()) <= gpu.memory_mib
    for name, size in sizes.items():
        real_node.smoke_pod(
            namespace, name, ["memory", "--hold", "6"], memory_mib=size, gpu=gpu.uuid
        )
    seen = {}
    for name in sizes:
        real_node.wait_finished(namespace, name)
        seen[name] = parse_smoke(real_node.logs(namespace, name))
    for name, size in sizes.items():
        assert seen[name]["device.0.uuid"] == gpu.uuid
        assert seen[name]["device.0.total_mib"] == str(size), seen[name]
        assert size - STEP_MIB < int(seen[name]["max_allocated_mib"]) <= size, seen[name]
    held = sum(int(seen[name]["max_allocated_mib"]) for name in sizes)
    assert held <= gpu.memory_mib


def test_the_compute_slice_paces_kernels_in_a_real_container(
    real_node: RealNode, namespace: str
) -> None:
    text = real_node.run_smoke(
        namespace, "compute", ["compute", "--seconds", "4"], memory_mib=1024, cores=30
    )
    busy = float(parse_smoke(text)["busy_fraction"])
    assert 0.25 <= busy <= 0.35, text


def _metric(text: str, name: str, pod: str) -> float | None:
    pattern = re.compile(rf'^{name}\{{[^}}]*pod="{re.escape(pod)}"[^}}]*\}} (\S+)$', re.M)
    found = pattern.search(text)
    return float(found.group(1)) if found else None


def test_the_monitor_reports_what_the_container_holds_and_forgets_it_when_deleted(
    real_node: RealNode, namespace: str
) -> None:
    real_node.smoke_pod(
        namespace, "holder", ["hold", "--memory", "3g", "--seconds", "60"], memory_mib=4096
    )
    real_node.wait_running(namespace, "holder")
    deadline = time.monotonic() + 30
    while "held_mib" not in real_node.logs(namespace, "holder"):
        assert time.monotonic() < deadline, real_node.logs(namespace, "holder")
        time.sleep(0.5)
    held = int(parse_smoke(real_node.logs(namespace, "holder"))["held_mib"])
    metrics = real_node.metrics()
    used = _metric(metrics, "vslice_container_gpu_memory_used_bytes", "holder")
    limit = _metric(metrics, "vslice_container_gpu_memory_limit_bytes", "holder")
    assert used == held * 1024 * 1024, metrics
    assert limit == 4096 * 1024 * 1024
    uid = real_node.lab.read_pod(namespace, "holder")["metadata"]["uid"]
    region_dir = real_node.layout.cache_root / uid
    assert region_dir.is_dir()
    real_node.delete_all(namespace)
    deadline = time.monotonic() + 90  # sweep every 10 s, 30 s grace
    while (
        region_dir.exists()
        or _metric(real_node.metrics(), "vslice_container_gpu_memory_used_bytes", "holder")
        is not None
    ):
        assert time.monotonic() < deadline, "region or metrics of a deleted pod are still there"
        time.sleep(1)


def test_the_sdk_waits_for_completion_and_reads_the_logs(
    real_node: RealNode, namespace: str
) -> None:
    client = vslice.Client(kubeconfig=str(real_node.lab.kubeconfig), namespace=namespace)
    job = client.run(
        "vslice.local/smoke:1",
        ["vslice-smoke", "memory"],
        slice=vslice.Slice("2Gi", cores=20, gpu_uuid=real_node.gpus[1].uuid),
    )
    job.wait(120, until="completed")
    seen = parse_smoke(job.logs())
    assert seen["device.0.total_mib"] == "2048"
    assert seen["device.0.uuid"] == real_node.gpus[1].uuid
    assert job.allocation is not None and job.allocation.node == real_node.name


def test_pods_of_different_sizes_created_together_each_get_their_own_slice(
    real_node: RealNode, namespace: str
) -> None:
    """The "device number not matched" race, with the real kubelet's admission order and
    PodResources API: two pods of different sizes created in the same second, twenty times."""
    rounds, sizes = 20, (1024, 3072)

    def one_round(index: int) -> list[tuple[str, int]]:
        names = []
        with ThreadPoolExecutor(max_workers=2) as pool:
            for size in sizes:
                name = f"r{index}-{size}"
                pool.submit(
                    real_node.smoke_pod,
                    namespace,
                    name,
                    ["memory", "--step", "512m"],
                    memory_mib=size,
                )
                names.append((name, size))
        return names

    created = []
    for index in range(rounds):
        created += one_round(index)
        if index % 2 == 1:  # at most four pods at once: the node has 8 slots
            for name, _ in created[-4:]:
                real_node.wait_finished(namespace, name, timeout=120)
    wrong = []
    for name, size in created:
        pod = real_node.wait_finished(namespace, name, timeout=120)
        seen = parse_smoke(real_node.logs(namespace, name))
        if pod["status"]["phase"] != "Succeeded" or seen.get("device.0.total_mib") != str(size):
            wrong.append((name, size, seen.get("device.0.total_mib"), pod["status"]["phase"]))
    assert wrong == []


def test_a_users_own_image_is_imported_with_one_command_and_runs(
    real_node: RealNode, namespace: str, tmp_path: Path
) -> None:
    busybox = Path("/bin/busybox")
    files = [images.ImageFile("bin/busybox", source=busybox)]
    files += [images.ImageFile(f"bin/{name}", link="busybox") for name in ("sh", "echo")]
    spec = images.ImageSpec("example.org/team/mine:2", files, cmd=["sh", "-c", "echo mine-ran"])
    images.write_archive(spec, tmp_path / "mine.tar")
    state_dir = str(real_node.lab.state_dir)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "vslice.cli",
            "lab",
            "import-image",
            str(tmp_path / "mine.tar"),
            "--state-dir",
            state_dir,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert real_node.name in result.stdout
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "mine"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": real_node.name},
            "containers": [{"name": "main", "image": "example.org/team/mine:2"}],
        },
    }
    real_node.lab.core.create_namespaced_pod(namespace, body)
    pod = real_node.wait_finished(namespace, "mine")
    assert pod["status"]["phase"] == "Succeeded"
    assert real_node.logs(namespace, "mine").strip() == "mine-ran"
