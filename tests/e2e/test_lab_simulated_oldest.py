"""The lab on Kubernetes 1.34, the oldest minor vslice still supports (docs/kubernetes-versions.md).

The shared lab of the other tests runs the default version; this test starts its own small lab
from the 1.34 binaries (``.ci/setup.d/30-k8s.sh`` builds them) in its own state dir, on its own
free ports and with simulated nodes only, so the shared lab and its real node are not disturbed.
One sliced pod goes through the webhook and the extender, which must record its decision on it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from vslice_build.versions import OLDEST_KUBERNETES_VERSION
from vslice_core.annotations import ALLOCATION, decode_allocation
from vslice_kube.client import api_client
from vslice_lab import lab as lab_module
from vslice_lab.errors import LabError
from vslice_lab.layout import Layout

pytestmark = pytest.mark.timeout(180)

VERSION = OLDEST_KUBERNETES_VERSION
ONE_NODE = """
nodes:
  - name: old-t4
    gpus:
      - {uuid: GPU-old0-0000-0000-0000-000000000000, model: Tesla-T4, memory_mib: 15360, slots: 4}
"""


@pytest.fixture
def lab_134(tmp_path: Path) -> Iterator[k8s.ApiClient]:
    """A one-node 1.34 lab with the vslice services; downed afterwards, also on failure."""
    if not all(lab_module.services_installed().values()):
        pytest.fail("this test needs the vslice extender and webhook installed")
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(ONE_NODE)
    state_dir = tmp_path / "state"
    options = lab_module.LabOptions(
        state_dir=state_dir,
        inventory=inventory,
        version=VERSION,
        services=True,
        real_nodes=False,
        timeout=90,
    )
    try:
        lab_module.up(options)
    except LabError as error:
        lab_module.down(state_dir)
        pytest.fail(f"the {VERSION} lab did not come up: {error}", pytrace=False)
    api = api_client(Layout.at(state_dir).kubeconfig)
    try:
        yield api
    finally:
        lab_module.down(state_dir)


def _pod(core: Any, name: str) -> dict[str, Any]:
    pod: dict[str, Any] = json.loads(
        core.read_namespaced_pod(name, "default", _preload_content=False).data
    )
    return pod


def _wait_running(core: Any, name: str, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    pod = _pod(core, name)
    while not (pod["spec"].get("nodeName") and pod["status"].get("phase") == "Running"):
        if time.monotonic() > deadline:
            pytest.fail(f"pod {name} was not bound and Running within {timeout:.0f}s: {pod}")
        time.sleep(0.2)
        pod = _pod(core, name)
    return pod


def test_a_sliced_pod_is_placed_by_the_extender_on_kubernetes_1_34(
    lab_134: k8s.ApiClient,
) -> None:
    assert k8s.VersionApi(lab_134).get_code().git_version == VERSION
    # Untyped: the client stubs know no _preload_content=False (raw JSON) answers.
    core: Any = k8s.CoreV1Api(lab_134)
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "25"}
    container = {"name": "main", "image": "registry.invalid/sleep:1"}
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sliced"},
        "spec": {
            "containers": [{**container, "resources": {"limits": limits}}],
            "terminationGracePeriodSeconds": 0,
        },
    }
    created = json.loads(core.create_namespaced_pod("default", body, _preload_content=False).data)
    # The webhook routed it to the extender's scheduler profile.
    assert created["spec"]["schedulerName"] == "vslice-scheduler"

    pod = _wait_running(core, "sliced")
    assert pod["spec"]["nodeName"] == "old-t4"
    annotations = pod["metadata"].get("annotations") or {}
    value = annotations.get(ALLOCATION)
    assert value, f"the pod was bound without the extender's decision: {annotations}"
    allocation = decode_allocation(value)
    assert allocation.node == "old-t4"
    ((grant,),) = [container.gpus for container in allocation.containers]
    assert grant.uuid == "GPU-old0-0000-0000-0000-000000000000"
    assert (grant.memory_mib, grant.cores) == (4000, 25)
