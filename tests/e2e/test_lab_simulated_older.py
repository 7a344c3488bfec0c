"""One more lab per older supported Kubernetes minor (docs/kubernetes-versions.md: 1.36, the
previous, and 1.35, the oldest), unlike the shared one in two ways: that version, and
simulated nodes only, the lab a machine that cannot run a real node gets (README promises such
machines the simulated lab).

Each lab starts from its version's binaries (``.ci/setup.d/30-k8s.sh`` builds them) in its
own state dir, on its own free ports, with the example inventory and ``real_nodes=False``
(``lab-l4`` is then simulated like the others), beside the shared lab and its real node, which
it does not disturb; the two run one after the other, never together.

- On each: a sliced pod goes through the webhook and the extender, which must record its
  decision on it.
- On 1.36, the oldest minor of the DRA path: a claim for a slice is allocated by
  kube-scheduler's own allocator from a simulated node's ResourceSlice, with the capacity it
  asked.
- On the oldest: the example notebooks run Run-All as a user would: a cell that needs a real
  container says why it cannot have one here and moves on, nothing fails, nothing is left
  behind (they use nothing version-specific, so one version runs them).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from notebook_runs import execute, kinds, pods_left, text
from vslice_build.versions import OLDEST_KUBERNETES_VERSION, SMOKE_KUBERNETES_VERSIONS
from vslice_core.annotations import ALLOCATION, decode_allocation
from vslice_core.dra import DEVICE_CLASS, DRIVER
from vslice_kube.client import api_client
from vslice_lab import lab as lab_module
from vslice_lab.errors import LabError
from vslice_lab.layout import Layout

pytestmark = pytest.mark.timeout(300)


class SimulatedLab:
    def __init__(self, state_dir: Path, version: str) -> None:
        self.version = version
        self.layout = Layout.at(state_dir)
        self.api = api_client(self.layout.kubeconfig)
        # Untyped: the client stubs know no _preload_content=False (raw JSON) answers.
        self.core: Any = k8s.CoreV1Api(self.api)

    def new_namespace(self, name: str) -> str:
        self.core.create_namespace({"metadata": {"name": name}}, _preload_content=False)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.core.read_namespaced_service_account("default", name, _preload_content=False)
                return name
            except ApiException as error:
                if error.status != 404 or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


EACH = pytest.mark.parametrize("simulated_lab", SMOKE_KUBERNETES_VERSIONS, indirect=True)
OLDEST = pytest.mark.parametrize("simulated_lab", [OLDEST_KUBERNETES_VERSION], indirect=True)


@pytest.fixture(scope="module")
def simulated_lab(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SimulatedLab]:
    """The example inventory on an older version, simulated only, with the vslice services;
    downed afterwards, also on failure."""
    version = str(request.param)
    if not all(lab_module.services_installed().values()):
        pytest.fail("this test needs the vslice extender and webhook installed")
    state_dir = tmp_path_factory.mktemp("simulated-lab") / "state"
    options = lab_module.LabOptions(
        state_dir=state_dir,
        version=version,
        services=True,
        real_nodes=False,
        prometheus=False,
        timeout=90,
    )
    try:
        lab_module.up(options)
    except LabError as error:
        lab_module.down(state_dir)
        pytest.fail(f"the {version} simulated lab did not come up: {error}", pytrace=False)
    try:
        yield SimulatedLab(state_dir, version)
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


@EACH
def test_a_sliced_pod_is_placed_by_the_extender_on_an_older_kubernetes(
    simulated_lab: SimulatedLab,
) -> None:
    assert k8s.VersionApi(simulated_lab.api).get_code().git_version == simulated_lab.version
    core = simulated_lab.core
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
    annotations = pod["metadata"].get("annotations") or {}
    value = annotations.get(ALLOCATION)
    assert value, f"the pod was bound without the extender's decision: {annotations}"
    allocation = decode_allocation(value)
    assert allocation.node == pod["spec"]["nodeName"]
    ((grant,),) = [container.gpus for container in allocation.containers]
    assert grant.uuid.startswith("GPU-")
    assert (grant.memory_mib, grant.cores) == (4000, 25)
    core.delete_namespaced_pod("sliced", "default", _preload_content=False)


@EACH
def test_a_claim_gets_its_slice_where_the_dra_path_runs_and_no_class_where_not(
    simulated_lab: SimulatedLab,
) -> None:
    if simulated_lab.version == OLDEST_KUBERNETES_VERSION:
        # 1.35 serves no consumable capacity by default: the lab publishes no DeviceClass there.
        resource: Any = k8s.ResourceV1Api(simulated_lab.api)
        classes = json.loads(resource.list_device_class(_preload_content=False).data)["items"]
        assert [c["metadata"]["name"] for c in classes] == []
        return
    namespace = simulated_lab.new_namespace("dra-smoke")
    resource = k8s.ResourceV1Api(simulated_lab.api)
    request = {
        "name": "main",
        "exactly": {
            "deviceClassName": DEVICE_CLASS,
            "count": 1,
            "capacity": {"requests": {"memory": "4Gi", "cores": "25"}},
        },
    }
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "slice"},
        "spec": {"devices": {"requests": [request]}},
    }
    resource.create_namespaced_resource_claim(namespace, claim, _preload_content=False)
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "claimed"},
        "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "slice"}],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/sleep:1",
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }
    simulated_lab.core.create_namespaced_pod(namespace, body, _preload_content=False)
    deadline = time.monotonic() + 30
    while True:
        read = resource.read_namespaced_resource_claim("slice", namespace, _preload_content=False)
        allocation = (json.loads(read.data).get("status") or {}).get("allocation")
        if allocation or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert allocation, f"the claim was not allocated within 30 s: {json.loads(read.data)}"
    (result,) = allocation["devices"]["results"]
    assert result["driver"] == DRIVER
    assert result["consumedCapacity"]["memory"] == "4Gi"
    assert result["consumedCapacity"]["cores"] == "25"


@OLDEST
def test_the_quickstart_runs_on_a_simulated_lab_and_says_why_no_container_ran(
    simulated_lab: SimulatedLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    namespace = simulated_lab.new_namespace("quickstart")
    notebook = execute("01-quickstart", simulated_lab.layout.kubeconfig, namespace, monkeypatch)
    shown = text(notebook)
    assert "fits on" in shown and "memory MiB: 10240 cores %: 30" in shown
    assert "simulated" in shown  # the smoke cell says why nothing ran, instead of waiting
    assert "device.0.total_mib" not in shown
    assert "1 GPU, 90 GiB: does not fit: asks 90 GiB per GPU" in shown
    assert pods_left(core=simulated_lab.core, namespace=namespace) == []


@OLDEST
def test_the_widget_and_planning_notebooks_run_on_a_simulated_lab(
    simulated_lab: SimulatedLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    namespace = simulated_lab.new_namespace("notebooks")
    kubeconfig = simulated_lab.layout.kubeconfig
    view = execute("02-cluster-view", kubeconfig, namespace, monkeypatch)
    assert kinds(view).count("application/vnd.jupyter.widget-view+json") == 2
    assert f"'{namespace}/vslice-" in text(view)
    planning = execute("03-capacity-planning", kubeconfig, namespace, monkeypatch)
    assert kinds(planning).count("image/png") == 2
    assert "1 GPU, 96 GiB, 25% cores: does not fit" in text(planning)
    assert pods_left(simulated_lab.core, namespace) == []
