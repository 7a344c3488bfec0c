"""Why a pod does not progress, read from pods and nodes shaped as the API sends them."""

from __future__ import annotations

from typing import Any

from api_objects import A100, cluster_objects, node, pod
from vslice import Slice, progress
from vslice.plans import plan_manifest, slice_manifest
from vslice.snapshot import ClusterSnapshot, shown_phase

SIMULATED_NODE = {
    "metadata": {
        "name": "lab-a100",
        "labels": {"vslice.io/simulated": "true", "type": "kwok"},
        "annotations": {"kwok.x-k8s.io/node": "fake"},
    }
}


def bound(phase: str = "Pending", node_name: str = "node-a", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "team-a", "name": "train", "uid": "uid-train"},
        "spec": {"nodeName": node_name, "containers": [{"name": "main", "image": "x"}]},
        "status": {"phase": phase, **status},
    }


def waiting(reason: str, message: str = "", **extra: Any) -> dict[str, Any]:
    return {
        "name": "main",
        "image": "registry.invalid/nope:1",
        "state": {"waiting": {"reason": reason, "message": message}},
        **extra,
    }


def test_an_image_pull_back_off_is_a_final_blocker_with_kubernetes_words() -> None:
    found = progress.blocker(
        bound(
            containerStatuses=[
                waiting("ImagePullBackOff", 'Back-off pulling image "registry.invalid/nope:1"')
            ]
        )
    )
    assert found is not None and found.final
    assert (found.kind, found.reason, found.container) == ("image", "ImagePullBackOff", "main")
    assert found.line() == (
        "container main cannot pull its image 'registry.invalid/nope:1': ImagePullBackOff: "
        'Back-off pulling image "registry.invalid/nope:1"; give an image node-a can pull (for '
        "the local lab's real node: `vslice lab import-image FILE.tar`)"
    )


def test_an_init_container_is_read_before_the_app_containers() -> None:
    init = waiting("CreateContainerConfigError", 'secret "token" not found')
    init["name"] = "setup"
    found = progress.blocker(
        bound(initContainerStatuses=[init], containerStatuses=[waiting("PodInitializing")])
    )
    assert found is not None and (found.kind, found.container) == ("config", "setup")
    assert found.line().startswith(
        'container setup cannot be created: CreateContainerConfigError: secret "token" not found'
    )


def test_a_crash_loop_names_the_restarts_and_the_last_exit_code() -> None:
    status = waiting(
        "CrashLoopBackOff",
        "back-off 40s restarting failed container=main",
        restartCount=3,
        lastState={"terminated": {"exitCode": 2, "reason": "Error"}},
    )
    found = progress.blocker(bound("Running", containerStatuses=[status]))
    assert found is not None and found.final
    assert found.line() == (
        "container main keeps crashing: CrashLoopBackOff: back-off 40s restarting failed "
        "container=main; 3 restarts, last exit code 2 (Error); its logs say why "
        "(`kubectl logs --previous train -c main`)"
    )


def test_containers_being_created_are_progress_not_a_blocker() -> None:
    assert progress.blocker(bound(containerStatuses=[waiting("ContainerCreating")])) is None
    assert progress.blocker(bound("Running", containerStatuses=[])) is None


def test_an_unschedulable_pod_carries_the_schedulers_word_and_is_not_final() -> None:
    unscheduled = bound(
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/4 nodes are available:\n4 Insufficient nvidia.com/gpumem.",
            }
        ]
    )
    unscheduled["spec"].pop("nodeName")
    found = progress.blocker(unscheduled)
    assert found is not None and not found.final
    assert found.line() == (
        "not scheduled: Unschedulable: 0/4 nodes are available:\\n4 Insufficient nvidia.com/gpumem."
    )


def test_a_running_pod_on_a_simulated_node_never_completes_and_a_real_one_is_fine() -> None:
    found = progress.blocker(bound("Running", "lab-a100"), SIMULATED_NODE)
    assert found is not None and found.final and found.reason == "Simulated"
    assert found.line() == (
        "it runs on lab-a100, a node kwok simulates: its containers never really run, so it "
        "never completes and has no logs"
    )
    real, _ = cluster_objects()
    assert progress.blocker(bound("Running"), real[0]) is None
    # Before kwok has played the pod's start it is Pending there, as anywhere.
    assert progress.blocker(bound("Pending", "lab-a100"), SIMULATED_NODE) is None


def test_kwoks_own_annotation_marks_a_simulated_node_too() -> None:
    assert progress.is_simulated({"metadata": {"annotations": {"kwok.x-k8s.io/node": "fake"}}})
    assert not progress.is_simulated({"metadata": {"labels": {"vslice.io/simulated": "false"}}})
    assert not progress.is_simulated(None)


def test_a_pod_being_deleted_is_terminating_whatever_its_phase_says() -> None:
    going = bound("Running")
    going["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    assert shown_phase(going) == "Terminating"
    found = progress.blocker(going)
    assert found is not None and found.kind == "deleting" and found.final
    done = bound("Succeeded")
    done["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    assert shown_phase(done) == "Succeeded"


def test_the_real_gpu_nodes_are_named_with_their_models() -> None:
    simulated = node("lab-a100", A100, 81920, 2)
    simulated["metadata"]["labels"] = {"vslice.io/simulated": "true"}
    real = node("lab-l4", "NVIDIA-L4", 23034, 1)
    assert progress.real_gpu_nodes([simulated, real]) == (
        "a real GPU node: lab-l4 (NVIDIA-L4) (ask for that GPU type)"
    )
    assert progress.real_gpu_nodes([simulated]).startswith("every GPU node here is simulated")


def test_vslices_why_not_is_the_engines_for_a_pending_pod_only() -> None:
    nodes, pods = cluster_objects()
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(100 * 1024)}
    big = {
        "metadata": {"namespace": "team-c", "name": "big", "uid": "uid-big"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
        "status": {"phase": "Pending"},
    }
    snapshot = ClusterSnapshot.read(nodes, [*pods, big])
    said = progress.vslice_why_not(snapshot, "team-c", "big")
    assert said is not None
    assert said.startswith("does not fit: asks 100 GiB per GPU; the largest GPU here has 80 GiB")
    assert progress.vslice_why_not(snapshot, "team-a", "train") is None  # placed, not pending


def test_an_emptied_cluster_tells_never_from_not_now() -> None:
    nodes, pods = cluster_objects()
    hog = pod("team-z", "hog", "node-b", [("GPU-node-b-0", 0, 5120, 80)])
    snapshot = ClusterSnapshot.read(nodes, [*pods, hog])

    def fits(memory: str, where: ClusterSnapshot) -> bool:
        wanted = Slice(memory, gpu_type="T4")
        return plan_manifest(where, slice_manifest(wanted), slice=wanted).fits

    assert not fits("10Gi", snapshot) and fits("10Gi", progress.emptied(snapshot))  # not now
    assert not fits("20Gi", progress.emptied(snapshot))  # never: the T4 has 15 GiB


def test_allocations_of_a_pod_being_deleted_show_it_terminating() -> None:
    nodes, pods = cluster_objects()
    pods[0]["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    shown = ClusterSnapshot.read(nodes, pods).allocations()
    assert [(r.pod, r.phase) for r in shown] == [
        ("train", "Terminating"),
        ("infer", "Running"),
        ("small", "Running"),
    ]


def test_the_newest_warning_event_is_the_one_named() -> None:
    events = [
        {"type": "Warning", "reason": "FailedMount", "message": "old", "lastTimestamp": "1"},
        {"type": "Normal", "reason": "Pulled", "message": "fine", "lastTimestamp": "3"},
        {
            "type": "Warning",
            "reason": "FailedMount",
            "message": "MountVolume.SetUp failed",
            "lastTimestamp": "2",
        },
    ]
    assert progress.last_warning(events) == "FailedMount: MountVolume.SetUp failed"
    assert progress.last_warning([]) is None


def test_a_runtime_failure_the_kubelet_retries_is_reported_but_not_final() -> None:
    found = progress.blocker(
        bound(containerStatuses=[waiting("CreateContainerError", "context deadline exceeded")])
    )
    assert found is not None and found.kind == "runtime" and not found.final
    assert found.line() == (
        "container main cannot start: CreateContainerError: context deadline exceeded; the "
        "kubelet retries it"
    )
