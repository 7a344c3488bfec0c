"""The monitor's names for DRA regions: a region directory is named by claim UID, the DRA
driver's checkpoint names the claim, and the pod's ``resourceClaimStatuses`` the pod."""

from __future__ import annotations

import json
from pathlib import Path

from memory_nodeapi import MemoryNodeApi
from vslice_core.model import GpuGrant
from vslice_node.handover.checkpoint import Checkpoint, PreparedClaim, prepared_claims
from vslice_node.monitor.podnames import PodNames

NODE = "node-a"


def test_a_claims_region_is_named_after_the_pod_using_the_claim(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    grant = GpuGrant(uuid="GPU-1", index=0, memory_mib=1024, cores=10)
    checkpoint = Checkpoint(path)
    checkpoint.put("claim-uid", PreparedClaim("team", "train-gpu-x7k2p", {"main": [grant]}, "s"))
    checkpoint.put("lonely-uid", PreparedClaim("team", "lonely", {"main": [grant]}, "s"))
    api = MemoryNodeApi()
    api.put_node(NODE)
    api.put_pod(
        {
            "metadata": {"namespace": "team", "name": "train", "uid": "pod-uid"},
            "spec": {"nodeName": NODE},
            "status": {
                "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "train-gpu-x7k2p"}]
            },
        }
    )
    names = PodNames(api, NODE, 30, claims=lambda: prepared_claims(path))
    view = names(["claim-uid", "lonely-uid"])
    found = view.names
    assert found["claim-uid"] == ("team", "train")
    assert found["pod-uid"] == ("team", "train")
    assert found["lonely-uid"] == ("team", "lonely")  # no pod lists it yet: the claim's name
    assert view.ended == frozenset()


def test_a_claims_region_ends_with_the_pods_using_it_and_with_the_claim(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    grant = GpuGrant(uuid="GPU-1", index=0, memory_mib=1024, cores=10)
    checkpoint = Checkpoint(path)
    for uid, name in (("shared-uid", "shared"), ("done-uid", "done"), ("fresh-uid", "fresh")):
        checkpoint.put(uid, PreparedClaim("team", name, {"main": [grant]}, "s"))
    api = MemoryNodeApi()

    def pod(name: str, phase: str, claim: str) -> dict[str, object]:
        return {
            "metadata": {"namespace": "team", "name": name, "uid": f"{name}-uid"},
            "spec": {"nodeName": NODE},
            "status": {
                "phase": phase,
                "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": claim}],
            },
        }

    api.put_pod(pod("a", "Succeeded", "shared"))
    api.put_pod(pod("b", "Running", "shared"))  # one user still runs: the claim is in use
    api.put_pod(pod("c", "Failed", "done"))
    now = [10.0]
    names = PodNames(api, NODE, 30, clock=lambda: now[0], claims=lambda: prepared_claims(path))
    uids = ["shared-uid", "done-uid", "fresh-uid", "unprepared-uid"]
    assert names(uids).ended == {"done-uid", "unprepared-uid"}
    api.put_pod(pod("b", "Succeeded", "shared"))
    checkpoint.drop("fresh-uid")  # unprepared by the kubelet: the claim is gone
    now[0] += 60
    names.refresh()
    assert names(uids).ended == {"shared-uid", "done-uid", "fresh-uid", "unprepared-uid"}


def test_an_unreadable_checkpoint_gives_no_claims_and_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    assert prepared_claims(path) == {}
    path.write_text("{broken")
    assert prepared_claims(path) == {}
    assert path.read_text() == "{broken"  # the plugin, not the monitor, deals with it
    path.write_text(json.dumps({"version": 1, "claims": {"u": {"namespace": "n", "name": "c"}}}))
    assert prepared_claims(path) == {"u": ("n", "c")}
