"""Pods and Jobs carrying a slice: what client.run creates and client.submit accepts."""

from __future__ import annotations

import pytest
from vslice import InvalidRequest, Slice
from vslice.manifests import apply_slice, job_manifest, pod_manifest


def test_a_pod_runs_once_with_the_limits_on_its_container() -> None:
    pod = pod_manifest("busybox", "echo hi", slice=Slice("1Gi", cores=10), name="hello")
    (container,) = pod["spec"]["containers"]
    assert pod["metadata"]["name"] == "hello"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert container["command"] == ["sh", "-c", "echo hi"]
    assert container["resources"]["limits"]["nvidia.com/gpumem"] == "1024"


def test_an_unnamed_pod_gets_a_generated_name() -> None:
    pod = pod_manifest("busybox", ["echo", "hi"], slice=Slice("1Gi"))
    assert pod["metadata"]["generateName"] == "vslice-"
    assert pod["spec"]["containers"][0]["command"] == ["echo", "hi"]


def test_a_job_carries_the_annotations_on_its_pod_template() -> None:
    pod = pod_manifest("busybox", "true", slice=Slice("1Gi", gpu_type="T4"), name="j")
    job = job_manifest(pod)
    template = job["spec"]["template"]
    assert job["kind"] == "Job" and job["metadata"]["name"] == "j"
    assert template["metadata"]["annotations"] == {"vslice.io/gpu-type": "T4"}
    assert template["spec"]["restartPolicy"] == "Never"


def test_applying_a_slice_keeps_the_users_other_limits_and_leaves_the_input_alone() -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "mine"},
        "spec": {
            "containers": [
                {"name": "side", "image": "a"},
                {"name": "app", "image": "b", "resources": {"limits": {"cpu": "2"}}},
            ]
        },
    }
    result = apply_slice(manifest, Slice("2Gi", cores=20), container="app")
    limits = result["spec"]["containers"][1]["resources"]["limits"]
    assert limits == {
        "cpu": "2",
        "nvidia.com/gpu": "1",
        "nvidia.com/gpumem": "2048",
        "nvidia.com/gpucores": "20",
    }
    assert "resources" not in result["spec"]["containers"][0]
    assert manifest["spec"]["containers"][1]["resources"]["limits"] == {"cpu": "2"}


def test_an_unknown_container_lists_the_containers() -> None:
    manifest = {"kind": "Pod", "spec": {"containers": [{"name": "a"}, {"name": "b"}]}}
    with pytest.raises(InvalidRequest, match="no container named 'c'; containers: a, b"):
        apply_slice(manifest, Slice("1Gi"), container="c")


def test_only_pods_and_jobs_are_accepted() -> None:
    with pytest.raises(InvalidRequest, match="kind must be one of Job, Pod, got 'Deployment'"):
        apply_slice({"kind": "Deployment", "spec": {}}, Slice("1Gi"))


def test_names_must_be_dns_labels() -> None:
    with pytest.raises(InvalidRequest, match="'My_Pod'") as caught:
        pod_manifest("busybox", slice=Slice("1Gi"), name="My_Pod")
    assert caught.value.field == "name"
