"""What the webhook decides for one pod: a pure function from the pod to a :class:`Verdict`.

For a pod being created, in this order (there is no per-pod opt-out: only an operator's
namespace label keeps the webhook away, through the configuration's ``namespaceSelector``):

1. vslice's state annotations (``vslice_core.annotations.POD_STATE``) are removed, with one
   warning each: they are only ever written later, by vslice, so a pod that carries them at
   creation is either a hand-made forgery or an exported pod being recreated; removing them
   keeps the second working;
2. denied when a vslice value is refused by the core's one pass over the pod
   (``vslice_core.requests.normalize_gpu_pod``: the quantity grammar as the API server
   accepts it, the node side's bounds and ``requests`` equal to ``limits``, for every pod;
   then, for a pod that asks for a GPU, the normalization's rules), naming the field and
   the value; when it names a GPU resource that does not exist (``nvidia.com/gpumemory``);
   or when a container sets the shim's or the NVIDIA runtime's variables (``environment``);
   or, for every pod, when two containers use one claim's slice from separate pid
   namespaces (``claimsharing``; on the DRA path also counting the claim the conversion adds);
3. untouched (but for step 1) when it asks for no GPU resource at all;
4. denied when the GPU pod sets ``spec.nodeName`` (it would bypass the scheduler that
   accounts for slices), when it asks for a way around the shim (``escapes``: a privileged
   container, added ``SYS_ADMIN``, ``hostPID``, a ``hostPath`` over vslice's directories,
   an ``Unconfined`` seccomp profile, a ``cdi.k8s.io/*`` annotation, ...), whatever its
   namespace's Pod Security level, or when the pod alone asks for more than its namespace's
   GPU quota;
5. otherwise patched: a ``RuntimeDefault`` seccomp profile on the pod when it names none
   (with a warning), the normalized limits, ``spec.schedulerName`` (unless the pod already
   names a scheduler of its own) and, if configured, ``NVIDIA_VISIBLE_DEVICES=none`` on its
   containers that ask for no GPU, so they do not see the node's GPUs through the runtime.
   On the DRA path (``routing``: the namespace's label, then the settings) the limits and the
   scheduler name are replaced by a ResourceClaimTemplate the pod references
   (``draconvert``); the verdict then carries the template, which ``main`` creates. With
   ``dra_extended_resource``, a pod that asks whole GPUs by count alone
   (``NormalizedPod.count_only``) keeps its limits and scheduler instead: the DeviceClass
   maps the GPU name, and kube-scheduler claims whole GPUs for it (KEP-5004).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from vslice_core import annotations as keys
from vslice_core.errors import InvalidRequest
from vslice_core.model import PodRequest, QuotaLimits
from vslice_core.requests import limit_patch, normalize_gpu_pod
from vslice_core.resources import DEFAULT_RESOURCE_NAMES, ResourceNames

from vslice_control.quota.limits import exceeded, request_totals
from vslice_control.webhook import claimsharing, draconvert, environment, escapes
from vslice_control.webhook.jsonpatch import PodPatch
from vslice_control.webhook.podspec import Container, containers, every_container
from vslice_control.webhook.review import AdmissionRequest, Verdict, reason_code
from vslice_control.webhook.routing import SchedulingPath, choose_path

HIDE_GPUS_ENV = environment.VISIBLE_DEVICES
DEFAULT_SCHEDULER = "default-scheduler"

# Reason codes of the verdicts (metrics only; a refused value is named by its field instead).
NOT_CREATE = "not_create"  # UPDATE, DELETE, CONNECT: admitted as they are
NOT_GPU_POD = "not_gpu_pod"
FORBIDDEN_ANNOTATION = "forbidden_annotation"  # vslice's state annotations were removed
DRA = "dra"  # patched to reference a ResourceClaimTemplate instead of extended resources
DRA_BY_NAME = "dra_by_name"  # left asking nvidia.com/gpu: the DeviceClass serves it by name
UNKNOWN_RESOURCE = "unknown_resource"
FORBIDDEN_ENV = "forbidden_env"
QUOTA_EXCEEDED = "quota_exceeded"  # the extender's reason code for the same refusal


@dataclass(frozen=True)
class WebhookPolicy:
    names: ResourceNames = DEFAULT_RESOURCE_NAMES
    scheduler_name: str = "vslice-scheduler"
    hide_gpus_from_other_containers: bool = False
    path: SchedulingPath = "extender"
    dra_namespaces: frozenset[str] = frozenset()
    dra_extended_resource: bool = False
    """The DeviceClass maps the GPU resource name (``extendedResourceName``): on the DRA path
    a pod asking whole GPUs by count alone is left for kube-scheduler to serve by name."""


def review_pod(
    request: AdmissionRequest,
    policy: WebhookPolicy,
    quota: QuotaLimits | None = None,
    namespace_labels: Mapping[str, str] | None = None,
) -> Verdict:
    """``namespace_labels``: the labels of the pod's Namespace (None: not known)."""
    if request.operation != "CREATE":
        return Verdict(allowed=True, reason=NOT_CREATE)
    pod = request.pod
    patch = PodPatch(pod)
    warnings = _strip_state(patch)
    items = containers(pod)
    try:
        normalized = normalize_gpu_pod(pod, policy.names)
    except InvalidRequest as exc:
        return Verdict.deny(str(exc), code=400, reason=reason_code(exc.field))
    unknown = _unknown_gpu_resource(pod, policy.names)
    if unknown is not None:
        return Verdict.deny(unknown, code=400, reason=UNKNOWN_RESOURCE)
    shared = claimsharing.refusal(pod)
    if shared is not None:
        return Verdict.deny(shared, code=400, reason=claimsharing.REASON)
    # Whether anything was stripped, as the reason of an admission that changes the pod.
    stripped = FORBIDDEN_ANNOTATION if warnings else ""
    if normalized is None:
        forbidden = environment.refusal(items, ())
        if forbidden is not None:
            return Verdict.deny(forbidden, reason=FORBIDDEN_ENV)
        reason = stripped or NOT_GPU_POD
        return Verdict(allowed=True, patch=patch.ops, warnings=warnings, reason=reason)
    gpu_containers = {(c.init, c.name) for c in normalized.request.containers}
    denial = _refusal(request, policy, quota, normalized.request, gpu_containers, items)
    if denial is not None:
        return denial
    warnings += _confine(patch, every_container(pod))
    route = choose_path(request.namespace, namespace_labels, policy.path, policy.dra_namespaces)
    warnings += route.warnings
    if route.path == "dra" and normalized.count_only and policy.dra_extended_resource:
        # Whole GPUs by name (KEP-5004): kube-scheduler makes the claim itself, on nodes that
        # do not advertise the name through a device plugin; nothing to convert.
        if policy.hide_gpus_from_other_containers:
            _hide_gpus(patch, gpu_containers)
        reason = stripped or DRA_BY_NAME
        return Verdict(allowed=True, patch=patch.ops, warnings=warnings, reason=reason)
    if route.path == "dra":
        verdict = _dra(request, policy, patch, normalized.request, gpu_containers, warnings)
        if verdict.allowed:
            verdict = replace(verdict, reason=stripped or DRA)
        return verdict
    warnings += _route(patch, policy.scheduler_name)
    if policy.hide_gpus_from_other_containers:
        _hide_gpus(patch, gpu_containers)
    return Verdict(
        allowed=True,
        patch=limit_patch(pod, normalized.changes) + patch.ops,
        warnings=warnings,
        reason=stripped,
    )


def _refusal(
    request: AdmissionRequest,
    policy: WebhookPolicy,
    quota: QuotaLimits | None,
    pod_request: PodRequest,
    gpu_containers: set[tuple[bool, str]],
    items: list[Container],
) -> Verdict | None:
    """The GPU pod's refusal, if any, in the order the module docstring gives."""
    forbidden = environment.refusal(items, gpu_containers)
    if forbidden is not None:
        return Verdict.deny(forbidden, reason=FORBIDDEN_ENV)
    pod = request.pod
    node = _node_name(pod, policy)
    if node is not None:
        return Verdict.deny(node, reason="spec.nodeName")
    escape = escapes.refusal(pod, every_container(pod), gpu_containers, policy.names)
    if escape is not None:
        return Verdict.deny(escape.message, reason=escape.reason or reason_code(escape.field))
    if quota is not None:
        over = _over_quota(request, quota, pod_request, policy.names)
        if over is not None:
            return Verdict.deny(over, reason=QUOTA_EXCEEDED)
    return None


def _dra(
    request: AdmissionRequest,
    policy: WebhookPolicy,
    patch: PodPatch,
    pod_request: PodRequest,
    gpu_containers: set[tuple[bool, str]],
    warnings: list[str],
) -> Verdict:
    shared = claimsharing.refusal(patch.pod, claimsharing.converted(patch.pod, gpu_containers))
    if shared is not None:
        return Verdict.deny(shared, code=400, reason=claimsharing.REASON)
    try:
        conversion = draconvert.convert(patch, pod_request, policy.names, request.namespace)
    except InvalidRequest as exc:
        return Verdict.deny(str(exc), code=400, reason=reason_code(exc.field))
    warnings += conversion.warnings
    # The pod alone was checked above, as an early message; the namespace's running total is
    # counted when kube-scheduler allocates the claims (webhook/claimquota.py).
    if policy.hide_gpus_from_other_containers:
        _hide_gpus(patch, gpu_containers)
    return Verdict(allowed=True, patch=patch.ops, warnings=warnings, objects=[conversion.template])


def _strip_state(patch: PodPatch) -> list[str]:
    """Remove vslice's state annotations; one warning per annotation removed."""
    annotations = (patch.pod.get("metadata") or {}).get("annotations")
    if not isinstance(annotations, Mapping):
        return []
    warnings = []
    for key in keys.POD_STATE:
        if key in annotations:
            patch.remove(("metadata", "annotations", key))
            warnings.append(
                f"metadata.annotations[{key!r}] removed: only vslice writes it, once the pod is "
                "scheduled (an exported pod's copy does not carry over to a new pod)"
            )
    return warnings


def _node_name(pod: Mapping[str, Any], policy: WebhookPolicy) -> str | None:
    node = (pod.get("spec") or {}).get("nodeName")
    if not node:
        return None
    return (
        f"spec.nodeName must be unset for a pod that asks for {policy.names.gpu}, got {node!r}: "
        "a pod with a node set skips the scheduler, which is what accounts for GPU slices; "
        "remove spec.nodeName (use a nodeSelector or node affinity to choose nodes)"
    )


def _unknown_gpu_resource(pod: Mapping[str, Any], names: ResourceNames) -> str | None:
    """A resource that looks like one of ours but is not (``nvidia.com/gpumemory``): without
    this check the pod would wait forever for a resource no node has."""
    known = {*names.managed(), names.priority}
    for init, index, container in _triples(pod):
        resources = container.get("resources") or {}
        for part in ("limits", "requests"):
            section = resources.get(part) if isinstance(resources, Mapping) else None
            for key in section if isinstance(section, Mapping) else {}:
                if str(key).startswith(names.gpu) and key not in known:
                    kind = "initContainers" if init else "containers"
                    return (
                        f"spec.{kind}[{index}].resources.{part}: unknown resource {key!r}; "
                        f"known GPU resources: {', '.join(sorted(known))}"
                    )
    return None


def _confine(patch: PodPatch, items: list[Container]) -> list[str]:
    """Give a GPU pod that names no seccomp profile the runtime's default one (the kubelet
    would run it Unconfined); the warning says so."""
    if not escapes.needs_seccomp_default(patch.pod, items):
        return []
    patch.set(("spec", "securityContext", "seccompProfile"), {"type": escapes.DEFAULT_SECCOMP})
    return [escapes.SECCOMP_WARNING]


def _over_quota(
    request: AdmissionRequest, quota: QuotaLimits, pod_request: PodRequest, names: ResourceNames
) -> str | None:
    over = exceeded(request_totals(pod_request), quota)
    if not over:
        return None
    resource = {"memory_mib": names.memory, "cores": names.cores, "gpus": names.gpu}
    field_name, asked, limit = over[0]
    return (
        f"{resource[field_name]}: the pod asks for {asked} in total, more than namespace "
        f"{request.namespace!r} may use (ResourceQuota requests.{resource[field_name]} = {limit})"
    )


def _route(patch: PodPatch, scheduler_name: str) -> list[str]:
    if not scheduler_name:
        return []
    current = (patch.pod.get("spec") or {}).get("schedulerName")
    if current in (None, "", DEFAULT_SCHEDULER):
        patch.set(("spec", "schedulerName"), scheduler_name)
        return []
    if current == scheduler_name:
        return []
    return [
        f"spec.schedulerName {current!r} kept: GPU slices are only accounted by {scheduler_name!r}"
    ]


def _hide_gpus(patch: PodPatch, gpu_containers: set[tuple[bool, str]]) -> None:
    for init, index, container in _triples(patch.pod):
        if (init, container.get("name")) in gpu_containers:
            continue
        env = container.get("env") or []
        if any(isinstance(e, Mapping) and e.get("name") == HIDE_GPUS_ENV for e in env):
            continue
        kind = "initContainers" if init else "containers"
        patch.append(("spec", kind, index, "env"), {"name": HIDE_GPUS_ENV, "value": "none"})


def _triples(pod: Mapping[str, Any]) -> list[tuple[bool, int, Mapping[str, Any]]]:
    return [(c.init, c.index, c.spec) for c in containers(pod)]
