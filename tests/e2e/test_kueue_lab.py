"""Team queues on the lab's real Kueue (``vslice lab up --kueue``), driven through the SDK.

The session lab runs Kueue with its example queues (``vslice_lab.kueue.LAB_TEAMS``): team-a
and team-b, 40 GiB of GPU memory each, one cohort. Jobs go through everything a site has:
Kueue's webhook suspends them, Kueue admits them under the transformed quota, the Job
controller makes the pods, vslice's webhook and extender place them on simulated GPUs.

A job "finishes" the way a Job controller sees it: its pod's status is set to Succeeded (kwok
runs the simulated pods for ever). Every test leaves both team namespaces without jobs, and
waits until Kueue has let their quota go, since the namespaces and queues are shared.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import vslice
import yaml
from conftest import LabHandle
from kubernetes import client as k8s
from polling import until
from vslice import Slice, Timeout
from vslice.commands.top import frame
from vslice.workload import QUEUED
from vslice_lab.kueue import LAB_TEAMS

pytestmark = pytest.mark.timeout(300)  # may include starting the shared lab
IMAGE = "registry.invalid/sleep:1"  # kwok runs pods without pulling images
# 20 GiB on the H100 node: never the real node, and three fit on one GPU model's node.
TWENTY = Slice("20Gi", gpu_type="H100")
TEAM_A, TEAM_B = (team.namespace for team in LAB_TEAMS)


def _workloads(lab: LabHandle, namespace: str) -> list[dict[str, Any]]:
    found = k8s.CustomObjectsApi(lab.api).list_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", namespace, "workloads"
    )
    return list(found["items"])


def _clean(lab: LabHandle) -> None:
    batch = k8s.BatchV1Api(lab.api)
    custom = k8s.CustomObjectsApi(lab.api)
    for namespace in (TEAM_A, TEAM_B):
        batch.delete_collection_namespaced_job(namespace, propagation_policy="Background")
        lab.core.delete_collection_namespaced_resource_quota(namespace)
        # Not left to the garbage collector, which learns of a new CRD's objects only at its
        # next discovery round (up to 30 s after Kueue's CRDs appear).
        custom.delete_collection_namespaced_custom_object(
            "kueue.x-k8s.io", "v1beta2", namespace, "workloads"
        )
    for namespace in (TEAM_A, TEAM_B):
        until(
            f"Kueue's workloads in {namespace} are gone",
            lambda ns=namespace: not _workloads(lab, ns),  # type: ignore[misc]
        )


@pytest.fixture
def teams(services: LabHandle) -> Iterator[tuple[vslice.Client, vslice.Client]]:
    """SDK clients in team-a's and team-b's namespaces; both emptied before and after."""
    if services.record.ports.get("kueue-webhook") is None or not any(
        p.name == "kueue" for p in services.record.processes
    ):
        pytest.fail("the session lab runs no Kueue (LabOptions.kueue)")
    _clean(services)
    with (
        vslice.Client(services.kubeconfig, namespace=TEAM_A) as a,
        vslice.Client(services.kubeconfig, namespace=TEAM_B) as b,
    ):
        try:
            yield a, b
        finally:
            _clean(services)


def _finish(lab: LabHandle, job: vslice.Workload) -> None:
    """End the job's pod successfully, as its container exiting 0 would."""
    pod = job.pod()
    assert pod is not None, f"{job} has no pod to finish"
    lab.core.patch_namespaced_pod_status(
        pod["metadata"]["name"], job.namespace, {"status": {"phase": "Succeeded"}}
    )


def _states(jobs: list[vslice.Workload]) -> dict[str, list[vslice.Workload]]:
    """The jobs by phase once Kueue has decided on each: Running or Queued."""
    found: dict[str, list[vslice.Workload]] = {}
    for job in jobs:
        status = job.status
        if status.phase == QUEUED and status.queue is not None and status.queue.reason:
            found.setdefault(QUEUED, []).append(job)
        elif status.phase == "Running":
            found.setdefault("Running", []).append(job)
    return found


def _split(jobs: list[vslice.Workload], running: int, queued: int) -> dict[str, Any]:
    return until(
        f"{running} of {[j.name for j in jobs]} running and {queued} queued",
        lambda: (
            found
            if len((found := _states(jobs)).get("Running", [])) == running
            and len(found.get(QUEUED, [])) == queued
            else None
        ),
    )


def test_a_teams_third_job_waits_in_its_queue_and_starts_when_one_finishes(
    services: LabHandle, teams: tuple[vslice.Client, vslice.Client]
) -> None:
    team_a, team_b = teams
    # vslice's own namespace quota at team-a's nominal 40 GiB: counted once beside Kueue's.
    services.core.create_namespaced_resource_quota(
        TEAM_A,
        {"metadata": {"name": "gpu"}, "spec": {"hard": {"requests.nvidia.com/gpumem": "40960"}}},
    )
    # team-b holds its whole quota, so team-a has nothing to borrow.
    b_jobs = [team_b.run(IMAGE, "sleep 3600", slice=TWENTY, queue=TEAM_B) for _ in range(2)]
    _split(b_jobs, running=2, queued=0)
    a_jobs = [team_a.run(IMAGE, "sleep 3600", slice=TWENTY, queue=TEAM_A) for _ in range(3)]
    found = _split(a_jobs, running=2, queued=1)
    (waiting,) = found[QUEUED]

    queue = waiting.status.queue
    assert queue is not None and queue.queue == TEAM_A and (queue.position, queue.waiting) == (1, 1)
    assert "vslice.io/gpu-memory" in queue.reason and "20 GiB more needed" in queue.reason
    assert waiting.pod() is None  # suspended: no pod, nothing for vslice's quota to refuse
    lines: list[str] = []
    with pytest.raises(Timeout, match=r"queued in team-a \(1 of 1\)"):
        waiting.wait(2, report=lines.append)
    assert lines and "queued in team-a (1 of 1)" in lines[0]
    shown = frame(team_a.snapshot(), None, as_json=False)
    assert "QUEUED (1 job waiting in Kueue)" in shown and f"team-a/{waiting.name}" in shown

    quota = services.core.read_namespaced_resource_quota("gpu", TEAM_A)
    assert quota.status.used["requests.nvidia.com/gpumem"] == "40960"  # two pods, once each
    _finish(services, found["Running"][0])
    waiting.wait(60, until="running")
    status = waiting.status
    assert status.queue is not None and status.queue.state == "Admitted"
    assert status.queue.cluster_queue == TEAM_A
    refused = services.core.list_namespaced_event(TEAM_A, field_selector="reason=FailedCreate")
    assert not refused.items, [e.message for e in refused.items]


def test_a_team_borrows_idle_quota_and_kueue_takes_it_back_when_the_owner_submits(
    teams: tuple[vslice.Client, vslice.Client],
) -> None:
    team_a, team_b = teams
    # team-b is idle: team-a's third job borrows 20 GiB of its quota.
    a_jobs = [team_a.run(IMAGE, "sleep 3600", slice=TWENTY, queue=TEAM_A) for _ in range(3)]
    _split(a_jobs, running=3, queued=0)
    b_jobs = [team_b.run(IMAGE, "sleep 3600", slice=TWENTY, queue=TEAM_B) for _ in range(2)]
    _split(b_jobs, running=2, queued=0)
    found = _split(a_jobs, running=2, queued=1)
    (evicted,) = found[QUEUED]
    queue = evicted.status.queue
    assert queue is not None
    assert "its cohort took back the quota it had borrowed" in queue.reason, queue.reason


def test_a_job_kueue_admits_but_no_gpu_can_hold_gets_vslices_why_not(
    teams: tuple[vslice.Client, vslice.Client],
) -> None:
    team_a, _ = teams
    # 30 GiB is within team-a's 40 GiB, but a T4 has 15 GiB: Kueue admits, vslice cannot place.
    job = team_a.run(IMAGE, "sleep 3600", slice=Slice("30Gi", gpu_type="Tesla-T4"), queue=TEAM_A)
    until("Kueue admits it", lambda: (q := job.status.queue) is not None and q.state == "Admitted")
    lines: list[str] = []
    with pytest.raises(Timeout) as waited:
        job.wait(6, until="scheduled", report=lines.append)
    assert any("vslice:" in line for line in lines), lines
    said = str(waited.value)
    assert "vslice:" in said and "the largest matching GPU here has 15 GiB" in said, said


ROLE = Path(__file__).resolve().parents[2] / "roles" / "vslice_control_plane"
SITE_CONFIG = """apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
waitForPodsReady: {timeout: 5m}
resources:
  excludeResourcePrefixes: [example.com/]
"""


def _role_kueue_tasks(lab: LabHandle, tmp_path: Path) -> str:
    """Run the role's tasks/kueue.yml (both steps) against the lab; the play's output."""
    venv_bin = Path(sys.executable).parent
    prefix = tmp_path / "release"
    if not prefix.exists():
        # The whole virtualenv as the release: its python finds its pyvenv.cfg (the kubernetes
        # client the role's modules need) beside its bin directory.
        prefix.mkdir()
        (prefix / "current").symlink_to(venv_bin.parent)
    config_dir = tmp_path / "etc"
    (config_dir / "manifests").mkdir(parents=True, exist_ok=True)
    play = {
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "vars_files": [str(ROLE / "defaults" / "main.yml"), str(ROLE / "vars" / "main.yml")],
        "tasks": [
            {
                "ansible.builtin.include_tasks": str(ROLE / "tasks" / "kueue.yml"),
                "vars": {"__vslice_control_plane_kueue_step": step},
            }
            for step in ("check", "configure")
        ],
        "handlers": yaml.safe_load((ROLE / "handlers" / "main.yml").read_text()),
    }
    playbook = tmp_path / "kueue.yml"
    playbook.write_text(yaml.safe_dump([play]))
    overrides = {
        "vslice_release_prefix": str(prefix),
        "vslice_control_plane_config_dir": str(config_dir),
        "vslice_control_plane_admin_kubeconfig": str(lab.kubeconfig),
        "vslice_control_plane_kueue": True,
        "vslice_control_plane_kueue_teams": [{"name": "team-a"}],
        "vslice_control_plane_webhook_host": "192.0.2.10",
        "vslice_control_plane_restart_on_change": False,
        "__vslice_control_plane_ca_bundle": {"content": "Q0EtUEVN"},
    }
    (tmp_path / "vars.json").write_text(json.dumps(overrides))
    done = subprocess.run(
        [str(venv_bin / "ansible-playbook"), "-e", f"@{tmp_path / 'vars.json'}", str(playbook)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1"},
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return done.stdout


def test_the_role_merges_vslices_transformations_into_kueues_configuration_once(
    services: LabHandle, tmp_path: Path
) -> None:
    # Kueue as a site deploys it: its configuration in a ConfigMap, its controller a Deployment
    # (no replicas here: the lab runs Kueue as a process; the restart is the template change).
    core, apps = services.core, k8s.AppsV1Api(services.api)
    core.create_namespaced_config_map(
        "kueue-system",
        {
            "metadata": {"name": "kueue-manager-config"},
            "data": {"controller_manager_config.yaml": SITE_CONFIG},
        },
    )
    labels = {"app": "kueue-site"}
    apps.create_namespaced_deployment(
        "kueue-system",
        {
            "metadata": {"name": "kueue-controller-manager"},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "manager", "image": IMAGE}]},
                },
            },
        },
    )
    try:
        first = _role_kueue_tasks(services, tmp_path)
        data = core.read_namespaced_config_map("kueue-manager-config", "kueue-system").data
        merged = yaml.safe_load(data["controller_manager_config.yaml"])
        assert merged["waitForPodsReady"] == {"timeout": "5m"}  # the site's settings stay
        assert merged["resources"]["excludeResourcePrefixes"] == ["example.com/"]
        inputs = [t["input"] for t in merged["resources"]["transformations"]]
        names = ("gpumem", "gpucores", "gpumem-percentage")
        assert inputs == [f"nvidia.com/{name}" for name in names]
        template = apps.read_namespaced_deployment("kueue-controller-manager", "kueue-system")
        restarted = template.spec.template.metadata.annotations or {}
        assert "vslice.io/kueue-configuration" in restarted, first[-2000:]
        second = _role_kueue_tasks(services, tmp_path)
        assert re.search(r"localhost\s*: ok=\d+\s+changed=0", second), second[-2000:]
    finally:
        core.delete_namespaced_config_map("kueue-manager-config", "kueue-system")
        apps.delete_namespaced_deployment("kueue-controller-manager", "kueue-system")
