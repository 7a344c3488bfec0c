"""The webhook registered in the lab's API server: real pod creations are mutated or refused."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from conftest import LabHandle
from kubernetes.client.exceptions import ApiException

pytestmark = pytest.mark.timeout(120)


def _create(lab: LabHandle, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
    response: Any = lab.core.create_namespaced_pod(namespace, pod, _preload_content=False)
    created: dict[str, Any] = json.loads(response.data)
    return created


def _pod(name: str, resources: dict[str, Any], **extra: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "registry.invalid/sleep:1", "resources": resources}
    container.update(extra.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **extra.pop("metadata", {})},
        "spec": {"containers": [container], "terminationGracePeriodSeconds": 0},
    }


def _refusal(lab: LabHandle, namespace: str, pod: dict[str, Any]) -> tuple[int, str]:
    with pytest.raises(ApiException) as caught:
        _create(lab, namespace, pod)
    message = json.loads(caught.value.body)["message"]
    return int(caught.value.status), str(message)


def test_a_gpu_pod_is_normalized_and_routed_when_it_is_created(
    services: LabHandle, namespace: str
) -> None:
    # Memory given only as a request: the webhook writes the limits the kubelet needs.
    created = _create(services, namespace, _pod("norm", {"requests": {"nvidia.com/gpumem": "4Gi"}}))
    assert created["spec"]["schedulerName"] == "vslice-scheduler"
    limits = created["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "1"
    assert limits["nvidia.com/gpumem"] == "4Gi"


def test_an_invalid_value_is_refused_naming_the_field_and_the_value(
    services: LabHandle, namespace: str
) -> None:
    status, message = _refusal(
        services,
        namespace,
        _pod("bad", {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "120"}}),
    )
    assert status == 400
    assert "nvidia.com/gpucores" in message and "120" in message


def test_a_privileged_container_asking_for_a_gpu_is_refused(
    services: LabHandle, namespace: str
) -> None:
    pod = _pod(
        "priv",
        {"limits": {"nvidia.com/gpu": "1"}},
        container={"securityContext": {"privileged": True}},
    )
    status, message = _refusal(services, namespace, pod)
    assert status == 403
    assert "securityContext.privileged" in message and "got true" in message


def test_a_pod_asking_for_more_than_its_namespace_quota_is_refused(
    services: LabHandle, namespace: str
) -> None:
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpu"},
        "spec": {"hard": {"requests.nvidia.com/gpumem": "40960"}},
    }
    services.core.create_namespaced_resource_quota(namespace, quota, _preload_content=False)
    # Two GPUs of 30720 MiB: 61440 MiB in all. The API server's own quota counts 30720 (it
    # does not multiply by the GPU count); the webhook counts what the pod really takes.
    pod = _pod("big", {"limits": {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "30720"}})
    deadline = time.monotonic() + 15
    while True:  # the webhook learns about the new quota through its watch
        try:
            _create(services, namespace, pod)
        except ApiException as error:
            message = json.loads(error.body)["message"]
            break
        services.core.delete_namespaced_pod(
            "big", namespace, grace_period_seconds=0, _preload_content=False
        )
        assert time.monotonic() < deadline, "the webhook never enforced the new quota"
        time.sleep(0.5)
    assert "nvidia.com/gpumem" in message and "61440" in message and "40960" in message


def test_an_operators_namespace_label_leaves_a_gpu_pod_untouched(
    services: LabHandle, namespace: str
) -> None:
    label = {"metadata": {"labels": {"vslice.io/webhook": "disabled"}}}
    services.core.patch_namespace(namespace, label, _preload_content=False)
    pod = _pod("raw", {"limits": {"nvidia.com/gpumem": "1024"}})
    deadline = time.monotonic() + 10
    # The API server's namespace informer sees the new label within moments.
    while True:
        created = _create(services, namespace, {**pod, "metadata": {"generateName": "raw-"}})
        if created["spec"]["schedulerName"] == "default-scheduler" or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert created["spec"]["schedulerName"] == "default-scheduler"
    assert "nvidia.com/gpu" not in created["spec"]["containers"][0]["resources"]["limits"]
