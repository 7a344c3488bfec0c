"""Which pods wait for the webhook: with the webhook stopped, the API server still creates the
pods its ``matchConditions`` leave out (CPU pods), and refuses, naming the webhook, those the
webhook would change or refuse (GPU pods, forged state, a CPU pod asking the runtime for GPUs).

The webhook is stopped for the module and started again afterwards, and its return is checked,
so the tests after these find the lab as it was.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import LabHandle
from kubernetes.client.exceptions import ApiException
from vslice_control.install.admission import POD_WEBHOOK
from vslice_control.install.namespaces import OPT_OUT_LABEL
from vslice_core.annotations import ALLOCATION
from vslice_lab import lab as lab_module
from vslice_lab import processes, state
from vslice_lab.layout import Layout

pytestmark = pytest.mark.timeout(180)

WEBHOOK = "vslice-webhook"
GPU = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024"}


def _container(name: str = "main", **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": "registry.invalid/sleep:1", **fields}


def _pod(name: str, *containers: dict[str, Any], **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": list(containers) or [_container()],
        "terminationGracePeriodSeconds": 0,
    }
    spec.update(extra.pop("spec", {}))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **extra}, "spec": spec}


def _create(lab: LabHandle, namespace: str, pod: dict[str, Any], dry_run: bool = False) -> Any:
    core: Any = lab.core  # raw JSON in and out
    options = {"dry_run": "All"} if dry_run else {}
    response = core.create_namespaced_pod(namespace, pod, _preload_content=False, **options)
    return json.loads(response.data)


def _refusal(lab: LabHandle, namespace: str, pod: dict[str, Any], dry_run: bool = False) -> str:
    with pytest.raises(ApiException) as caught:
        _create(lab, namespace, pod, dry_run)
    return str(json.loads(caught.value.body or "{}").get("message"))


def _webhook_answers(lab: LabHandle, namespace: str) -> bool:
    pod = _pod("probe", _container(resources={"limits": GPU}))
    try:
        created = _create(lab, namespace, pod, dry_run=True)
    except ApiException:
        return False
    return bool(created["spec"].get("schedulerName") == "vslice-scheduler")


@pytest.fixture(scope="module")
def webhook_down(lab: LabHandle) -> Iterator[LabHandle]:
    """The lab with its webhook process stopped; started again (and waited for) afterwards."""
    if not lab.services:
        pytest.fail("this test needs the vslice webhook in the lab (VSLICE_E2E_SERVICES)")
    record = state.load(Layout.at(lab.state_dir))
    assert record is not None
    (process,) = [p for p in record.processes if p.name == WEBHOOK]
    processes.stop(process)
    try:
        yield lab
    finally:
        lab_module.restart(lab.state_dir, WEBHOOK)
        deadline = time.monotonic() + 60
        while not _webhook_answers(lab, "default"):
            assert time.monotonic() < deadline, "the webhook did not answer again within 60s"
            time.sleep(0.5)


def test_a_cpu_pod_is_created_while_the_webhook_is_down(
    webhook_down: LabHandle, namespace: str
) -> None:
    pod = _pod("cpu", _container(resources={"limits": {"cpu": "100m", "memory": "64Mi"}}))
    created = _create(webhook_down, namespace, pod)
    assert created["metadata"]["name"] == "cpu"
    assert created["spec"]["schedulerName"] == "default-scheduler"


def test_a_gpu_pod_is_refused_naming_the_webhook_while_it_is_down(
    webhook_down: LabHandle, namespace: str
) -> None:
    message = _refusal(webhook_down, namespace, _pod("gpu", _container(resources={"limits": GPU})))
    assert "failed calling webhook" in message and f'"{POD_WEBHOOK}"' in message, message
    with pytest.raises(ApiException):
        webhook_down.read_pod(namespace, "gpu")


def _with(name: str, **container: Any) -> dict[str, Any]:
    """A pod whose one container has these fields."""
    return _pod(name, _container(**container))


def _init(name: str, **container: Any) -> dict[str, Any]:
    """A pod whose one init container has these fields."""
    return _pod(name, spec={"initContainers": [_container("init", **container)]})


CONFIG_MAP = {"configMapRef": {"name": "settings"}}
CASES = [
    (_pod("plain"), False),
    (_with("other-resource", resources={"limits": {"example.com/fpga": "1"}}), False),
    (_pod("user-annotation", annotations={"vslice.io/gpu-type": "A100"}), False),
    (_with("env", env=[{"name": "PATH", "value": "/bin"}]), False),
    (_with("env-from", envFrom=[{**CONFIG_MAP, "prefix": "APP_"}]), False),
    (_init("init"), False),
    (_with("request", resources={"requests": {"nvidia.com/gpumem": "1024"}}), True),
    (_with("cores", resources={"limits": {"nvidia.com/gpucores": "30"}}), True),
    (_with("look-alike", resources={"limits": {"nvidia.com/gpumemory": "1"}}), True),
    (_init("init-gpu", resources={"limits": GPU}), True),
    (_pod("forged", annotations={ALLOCATION: "{}"}), True),
    (_with("runtime", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]), True),
    (_with("prefix", envFrom=[{**CONFIG_MAP, "prefix": "NVIDIA_"}]), True),
]


@pytest.mark.parametrize(("pod", "waits"), CASES, ids=[pod["metadata"]["name"] for pod, _ in CASES])
def test_the_api_server_sends_the_webhook_exactly_the_pods_it_acts_on(
    webhook_down: LabHandle, namespace: str, pod: dict[str, Any], waits: bool
) -> None:
    """The API server's own evaluation of the matchConditions (dry run, nothing is stored):
    the same kinds of pods as tests/services/test_webhook_match_conditions.py."""
    if waits:
        message = _refusal(webhook_down, namespace, pod, dry_run=True)
        assert "failed calling webhook" in message and POD_WEBHOOK in message, message
    else:
        _create(webhook_down, namespace, pod, dry_run=True)


def test_an_opted_out_namespace_creates_gpu_pods_without_the_webhook(
    webhook_down: LabHandle, namespace: str
) -> None:
    labels = {OPT_OUT_LABEL: "disabled"}
    webhook_down.core.patch_namespace(
        namespace, {"metadata": {"labels": labels}}, _preload_content=False
    )
    # A node selector no node matches: the pod stays pending instead of being bound by the
    # default scheduler beside vslice's accounting.
    pod = _pod(
        "gpu",
        _container(resources={"limits": GPU}),
        spec={"nodeSelector": {"e2e.vslice.io/no-such-node": "true"}},
    )
    created = _create(webhook_down, namespace, pod)
    assert created["spec"]["schedulerName"] == "default-scheduler"  # not routed: opted out
