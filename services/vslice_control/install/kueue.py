"""What Kueue needs to queue and share vslice's slices between teams (docs/kueue.md).

Two things, both pure functions of vslice's resource names and the teams' quotas:

- :func:`configuration` is the fragment of Kueue's own ``Configuration`` (the controller's
  ``controller_manager_config.yaml``) that makes GPU slices countable. A pod asks
  ``nvidia.com/gpumem`` and ``nvidia.com/gpucores`` *per GPU*; a ResourceQuota or a plain
  ClusterQueue would add them as they are, so two GPUs of 20 GiB would count 20 GiB. Kueue's
  resource transformations (``multiplyBy`` the GPU count, then replaced by an output per unit)
  turn them into totals:

  ========================  =====================================================  ==========
  quota resource            one container adds                                     quota unit
  ========================  =====================================================  ==========
  ``nvidia.com/gpu``        its GPU count (slices and whole GPUs alike)             GPUs
  ``vslice.io/gpu-memory``  ``gpumem`` MiB x GPUs, as bytes                         ``40Gi``
  ``vslice.io/gpu-cores``   ``gpucores`` percent x GPUs (100 = one GPU's SMs)       ``400``
  ========================  =====================================================  ==========

  ``nvidia.com/gpumem-percentage`` cannot be turned into bytes without knowing the card, so
  Kueue is told to ignore it; a job that sizes its slice that way counts no memory in Kueue
  (vslice's own namespace quota still counts it when the pod is admitted; docs/kueue.md).
  On the DRA path, Kueue v0.17 counts *devices* per DeviceClass (``deviceClassMappings``):
  each vslice claim request is one ``vslice.io/gpu-claims``, whatever memory it asks.

- :func:`queue_objects`: one ResourceFlavor for every vslice GPU, and per team a ClusterQueue
  in one cohort (so an idle team's quota can be borrowed, and reclaimed by preemption when
  the team submits) with a LocalQueue of the team's name in its namespace.

One flavor, not one per GPU model: a flavor with node labels becomes a nodeSelector on the
admitted pods, and vslice places slices by its own GPU-type annotations rather than node
labels; a quota per model is written as a vslice annotation on the job, not a flavor.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vslice_core.dra import DEVICE_CLASS
from vslice_core.errors import InvalidRequest
from vslice_core.resources import DEFAULT_RESOURCE_NAMES, ResourceNames

from vslice_control.install.values import InstallValues

KUEUE_API = "kueue.x-k8s.io/v1beta2"
CONFIG_API = "config.kueue.x-k8s.io/v1beta2"
MEMORY_RESOURCE = "vslice.io/gpu-memory"
CORES_RESOURCE = "vslice.io/gpu-cores"
DRA_CLAIMS_RESOURCE = "vslice.io/gpu-claims"
DEFAULT_FLAVOR = "vslice-gpu"
DEFAULT_COHORT = "vslice"
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_QUANTITY = re.compile(r"[0-9]+(Ki|Mi|Gi|Ti)?")
_ANY_QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?")


@dataclass(frozen=True)
class TeamQuota:
    """One team's nominal quota: GPUs, GPU memory (a quantity, e.g. ``40Gi``) and cores
    (percent of one GPU's SMs, summed: ``400`` is four GPUs' worth)."""

    name: str
    namespace: str
    gpus: int
    memory: str
    cores: int
    cpu: str = "64"
    """CPU quota: a ClusterQueue must cover every resource its jobs ask, or Kueue never admits
    a job that asks CPU ("resource cpu unavailable in ClusterQueue")."""
    ram: str = "256Gi"
    """Host memory quota (the ``memory`` resource), for the same reason."""

    def problems(self) -> list[str]:
        found = []
        for field, value in (("name", self.name), ("namespace", self.namespace)):
            if len(value) > 63 or not _NAME.fullmatch(value):
                found.append(f"team {self.name!r}: {field} {value!r} is not a DNS label")
        if not _QUANTITY.fullmatch(self.memory):
            found.append(
                f"team {self.name!r}: memory {self.memory!r} is not a whole quantity such as "
                "40Gi or 40960Mi"
            )
        for field, text in (("cpu", self.cpu), ("ram", self.ram)):
            if not _ANY_QUANTITY.fullmatch(text):
                found.append(
                    f"team {self.name!r}: {field} {text!r} is not a quantity such as 64, 500m "
                    "or 256Gi"
                )
        for field, number in (("gpus", self.gpus), ("cores", self.cores)):
            if number < 0:
                found.append(f"team {self.name!r}: {field} {number} is negative")
        return found


def configuration(
    names: ResourceNames = DEFAULT_RESOURCE_NAMES, device_class: str = DEVICE_CLASS
) -> dict[str, Any]:
    """The ``resources`` part of Kueue's Configuration for vslice (merge it into the
    controller's configuration; Kueue reads it at start)."""
    return {
        "apiVersion": CONFIG_API,
        "kind": "Configuration",
        "resources": {
            "transformations": [
                {
                    "input": names.memory,
                    "strategy": "Replace",
                    "multiplyBy": names.gpu,
                    # Per MiB asked on each GPU: one MiB of the total, so quotas read in Gi.
                    "outputs": {MEMORY_RESOURCE: "1Mi"},
                },
                {
                    "input": names.cores,
                    "strategy": "Replace",
                    "multiplyBy": names.gpu,
                    "outputs": {CORES_RESOURCE: "1"},
                },
                # A share of an unknown card has no size Kueue could count: ignored (outputs
                # empty with Replace), vslice's own quota counts it at admission.
                {"input": names.memory_percent, "strategy": "Replace"},
            ],
            "deviceClassMappings": [
                {"name": DRA_CLAIMS_RESOURCE, "deviceClassNames": [device_class]},
            ],
        },
    }


def queue_objects(
    teams: Sequence[TeamQuota],
    names: ResourceNames = DEFAULT_RESOURCE_NAMES,
    *,
    cohort: str = DEFAULT_COHORT,
    flavor: str = DEFAULT_FLAVOR,
    dra_claims: int | None = None,
) -> list[dict[str, Any]]:
    """The flavor, then each team's ClusterQueue and LocalQueue; raises InvalidRequest naming
    every bad team field (and a team or namespace given twice)."""
    problems = [problem for team in teams for problem in team.problems()]
    seen: set[str] = set()
    for team in teams:
        if team.name in seen:
            problems.append(f"team {team.name!r} is given twice")
        seen.add(team.name)
    if not teams:
        problems.append("no team given: name at least one (--team NAME)")
    if problems:
        raise InvalidRequest("; ".join(problems), field="team", value=[t.name for t in teams])
    documents: list[dict[str, Any]] = [
        {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": flavor}}
    ]
    for team in teams:
        documents.append(_cluster_queue(team, names, cohort, flavor, dra_claims))
    for team in teams:
        documents.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "LocalQueue",
                "metadata": {"name": team.name, "namespace": team.namespace},
                "spec": {"clusterQueue": team.name},
            }
        )
    return documents


def values_objects(values: InstallValues) -> list[dict[str, Any]]:
    """The part ``kueue-queues`` of an installation: the queues of ``values.kueue`` (none
    unless ``kueue.queues``)."""
    wanted = values.kueue
    if not wanted.queues:
        return []
    teams = [
        TeamQuota(t.name, t.namespace or t.name, t.gpus, t.memory, t.cores, t.cpu, t.ram)
        for t in wanted.teams
    ]
    return queue_objects(
        teams, values.resources, cohort=wanted.cohort, dra_claims=wanted.dra_claims
    )


def merge_configuration(existing: Mapping[str, Any], fragment: Mapping[str, Any]) -> dict[str, Any]:
    """Kueue's Configuration ``existing`` with vslice's ``resources`` fragment merged in: a
    transformation of the same input and a device class mapping of the same name are replaced,
    every other setting the site made is kept. Running it again changes nothing."""
    merged = dict(existing)
    ours = fragment.get("resources") or {}
    theirs = dict(merged.get("resources") or {})
    for key, ident in (("transformations", "input"), ("deviceClassMappings", "name")):
        mine = list(ours.get(key) or [])
        taken = {str(item[ident]) for item in mine}
        kept = [item for item in theirs.get(key) or [] if str(item.get(ident)) not in taken]
        if mine or kept:
            theirs[key] = kept + mine
    merged["resources"] = theirs
    merged.setdefault("apiVersion", fragment.get("apiVersion"))
    merged.setdefault("kind", "Configuration")
    return merged


def _cluster_queue(
    team: TeamQuota, names: ResourceNames, cohort: str, flavor: str, dra_claims: int | None
) -> dict[str, Any]:
    quotas: list[tuple[str, str]] = [
        (names.gpu, str(team.gpus)),
        (MEMORY_RESOURCE, team.memory),
        (CORES_RESOURCE, str(team.cores)),
        ("cpu", team.cpu),
        ("memory", team.ram),
    ]
    if dra_claims is not None:
        quotas.append((DRA_CLAIMS_RESOURCE, str(dra_claims)))
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {"name": team.name},
        "spec": {
            "cohortName": cohort,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team.namespace}},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [
                {
                    "coveredResources": [name for name, _ in quotas],
                    "flavors": [
                        {
                            "name": flavor,
                            "resources": [
                                {"name": name, "nominalQuota": quota} for name, quota in quotas
                            ],
                        }
                    ],
                }
            ],
            # Borrowed quota comes back when its owner submits; a team's own jobs are
            # reordered by priority only within its queue.
            "preemption": {
                "reclaimWithinCohort": "Any",
                "withinClusterQueue": "LowerPriority",
            },
        },
    }
