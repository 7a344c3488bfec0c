"""The driver-enforced memory backend end to end on the lab's real node: the node agent told
``memory_backend: driver`` probes the (fake) driver, says so on the node, and every container
it hands a slice gets the CDI ``createRuntime`` hook that sets its limit in the driver by its
cgroup. The proof is a program that goes around the shim entirely: run on the host without
the shim but inside a container's cgroup, it is stopped at that container's slice by the
driver alone (the fake enforces by the cgroup path, as the real one does in the kernel). Both
node paths are covered: a device-plugin pod and a DRA claim pod.

The lab's host runs cgroup v1, so ``auto`` keeps the shim there (checked first); the test
sets ``driver``, which the fake accepts on v1 paths. A real R615 driver is exercised by
tests/gpu/run.sh.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from realnode_pods import RealNode, parse_smoke
from test_dra_realnode import SLEEP, claim_pod, claims_of, dra_gpu, template, wait
from vslice_lab import lab as lab_module
from vslice_lab.nodeconfig import ShimBuild, default_shim_build
from vslice_node.handover.memorybackend import runs_cgroup_v2

pytestmark = pytest.mark.timeout(300)
BACKEND = "vslice.io/memory-backend"
SLICE_MIB = 2048
HELD_MIB = 512


def node_backend(node: RealNode) -> str:
    found = node.lab.core.read_node(node.name).metadata.annotations or {}
    return str(found.get(BACKEND, ""))


def restart_agent(node: RealNode, backend: str | None) -> None:
    """Rewrite the node agent's memory_backend (None: the lab's own) and restart it, as an
    operator would (docs/shim.md "Two memory backends")."""
    path = node.layout.settings("device-plugin")
    settings = yaml.safe_load(path.read_text())
    if backend is None:
        settings.pop("memory_backend", None)
    else:
        settings["memory_backend"] = backend
    path.write_text(yaml.safe_dump(settings, sort_keys=True))
    lab_module.restart(node.lab.state_dir, f"device-plugin-{node.name}")


@pytest.fixture
def driver_node(real_node: RealNode, namespace: str) -> Iterator[RealNode]:
    """The real node with the driver-enforced backend; the lab's own setting put back after."""
    # What auto chose first: the shim on a cgroup v1 host (the lab's), saying why.
    before = real_node.plugin_status()["memory_backend"]
    if not runs_cgroup_v2():
        assert node_backend(real_node) == "shim" == before["backend"]
        assert before["reason"].startswith("the node runs cgroup v1"), before
    try:
        restart_agent(real_node, "driver")
        wait(lambda: node_backend(real_node) == "driver", f"{BACKEND}: driver on the node")
        yield real_node
    finally:
        real_node.delete_all(namespace)
        restart_agent(real_node, None)
        back = before["backend"]
        wait(lambda: node_backend(real_node) == back, f"{BACKEND}: {back} again")


def mark_of(directory: Path) -> dict[str, str]:
    """The hook's mark file of one container (``key=value`` lines)."""
    path = directory / "memory-backend"
    wait(path.is_file, f"the hook's mark {path}")
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def around_the_shim(node: RealNode, cgroup: str, uuid: str) -> dict[str, str]:
    """vslice-smoke on the host, with the fake driver and without the shim, moved into
    ``cgroup`` first: what the driver alone lets a process there allocate."""
    shim: ShimBuild = ShimBuild(default_shim_build())
    fake = shim.driver_libraries[0].parent
    settings = yaml.safe_load(node.layout.settings("device-plugin").read_text())
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LD_LIBRARY_PATH": str(fake),
        "NVIDIA_VISIBLE_DEVICES": uuid,
        **settings["driver_host_env"],
    }
    script = f'echo $$ > "{cgroup}/cgroup.procs" && exec "$0" memory --step 256m'
    done = subprocess.run(
        ["sh", "-c", script, str(shim.smoke)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return parse_smoke(done.stdout)


def test_a_device_plugin_container_is_held_at_its_slice_by_the_driver_alone(
    driver_node: RealNode, namespace: str
) -> None:
    node = driver_node
    status = node.plugin_status()["memory_backend"]
    assert status["backend"] == "driver" and "available: driver" in status["reason"]
    args = ["hold", "--memory", f"{HELD_MIB}m", "--seconds", "120"]
    created = node.smoke_pod(namespace, "held", args, memory_mib=SLICE_MIB)
    node.wait_running(namespace, "held")
    uid = created["metadata"]["uid"]
    mark = mark_of(node.layout.limits_root / uid / "main")
    assert mark["backend"] == "driver"
    ((uuid, limit),) = [(k, v) for k, v in mark.items() if k.startswith("GPU-")]
    assert int(limit) == SLICE_MIB << 20
    cgroup = mark["namespace"]
    assert uid.replace("-", "_") in cgroup or uid in cgroup, cgroup

    # A process that never meets the shim, in the container's cgroup: the driver stops it at
    # the slice less what the container holds (the fake counts both by the cgroup).
    inside = around_the_shim(node, cgroup, uuid)
    assert inside["oom_error"] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert int(inside["max_allocated_mib"]) == SLICE_MIB - HELD_MIB
    assert int(inside["at_oom.info_free_mib"]) == 0
    # The control: the same program in the pod's cgroup, above the container's, reaches the
    # whole card; that is what the shim alone would leave to such a program.
    above = around_the_shim(node, str(Path(cgroup).parent), uuid)
    assert int(above["max_allocated_mib"]) > 4 * SLICE_MIB

    def exported() -> bool:
        wanted = ('backend="driver"', f'namespace="{namespace}"', 'pod="held"')
        return any(
            line.startswith("vslice_container_memory_backend{") and all(w in line for w in wanted)
            for line in node.metrics().splitlines()
        )

    wait(exported, 'vslice_container_memory_backend{backend="driver"} of the pod', timeout=30)


def test_a_dra_claim_container_gets_the_same_hook(driver_node: RealNode, namespace: str) -> None:
    node = driver_node
    dra_gpu(node)
    template(node, namespace, "two-gib", memory="2Gi")
    claim_pod(node, namespace, "claimed", "two-gib", SLEEP)
    node.wait_running(namespace, "claimed")
    (claim,) = claims_of(node, namespace)
    (request,) = (node.layout.limits_root / claim["metadata"]["uid"]).iterdir()
    mark = mark_of(request)
    assert mark["backend"] == "driver"
    ((uuid, limit),) = [(k, v) for k, v in mark.items() if k.startswith("GPU-")]
    assert int(limit) == 2048 << 20
    inside = around_the_shim(node, mark["namespace"], uuid)
    assert int(inside["max_allocated_mib"]) == 2048
