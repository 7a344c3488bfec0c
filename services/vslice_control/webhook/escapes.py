"""What would let a GPU pod's containers get around the shim, refused in every namespace.

The shim (``libvslice.so``, named by the ``/etc/ld.so.preload`` the node mounts into each GPU
container) holds a container to its slice; the limits file it reads is mounted read-only, and
the node's vslice directories hold every container's limits and usage. Kubernetes' Pod
Security level ``baseline`` refuses every way around that listed here, but a namespace
without the label gets the cluster's default, usually ``privileged``; so for a pod that asks
for GPUs (the extender and the DRA path alike) the webhook refuses them itself:

- a privileged container (it sees every GPU of the node);
- added capabilities: ``SYS_ADMIN`` (mount over or unmount ``/etc/ld.so.preload`` and the
  limits file), ``SYS_PTRACE`` (write into processes that are not its own, the shim's state
  in them), ``SYS_MODULE`` and ``SYS_RAWIO`` (the kernel, raw memory), ``DAC_READ_SEARCH``
  (open host files by handle, outside its mounts), and ``ALL``;
- ``procMount: Unmasked`` (the /proc files the runtime masks, the kernel's among them);
- a seccomp profile ``Unconfined``, on the pod or a container, or through the legacy
  annotations the API server still copies into those fields: without the runtime's filter a
  process can unshare a user namespace and mount over ``/etc/ld.so.preload`` there;
- ``hostPID`` and ``hostIPC`` (every process, and the shared memory, of the node: other
  pods' GPU processes and their shim state);
- a ``hostPath`` volume at, inside or above one of vslice's host directories
  (:data:`HOST_PATHS`): the limits and region files of every container, the shim itself,
  the CDI specs that name GPUs, the kubelet's device-plugin sockets;
- an annotation ``cdi.k8s.io/*``: CDI devices are vslice's to inject (its device plugin or
  DRA driver names the granted GPUs), and a runtime that reads them would give any GPU.

Which containers the container fields are checked in: those that ask for GPUs; every
container when the pod shares one process namespace (``spec.shareProcessNamespace``: each
sees the GPU containers' processes); and every ephemeral container (added to debug a running
one, usually inside its process namespace). A container that asks for no GPU and shares no
processes with those that do is as far from their slices as a CPU pod, and is left to the
namespace's Pod Security level like one. Pods that ask for no GPU are not looked at here.

When neither the pod nor every container names a seccomp profile, the pod gets
``RuntimeDefault`` (:func:`needs_seccomp_default`): the kubelet runs containers
``Unconfined`` by default, which is the hole above.
"""

from __future__ import annotations

import posixpath
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from vslice_core.resources import ResourceNames

from vslice_control.webhook.podspec import EPHEMERAL, Container

HOST_PATHS: Mapping[str, str] = {
    "/var/lib/vslice": "vslice's node state: every container's limits and shim region files",
    "/usr/local/vslice": "the shim library and the preload list that names it",
    "/etc/ld.so.preload": "the host's preload list",
    "/etc/vslice": "vslice's node configuration and allocation keys",
    "/etc/cdi": "the CDI specs that name the node's GPUs",
    "/var/run/cdi": "the CDI specs vslice writes for granted GPUs",
    "/run/cdi": "the CDI specs vslice writes for granted GPUs",
    "/var/lib/kubelet/device-plugins": "the kubelet's and vslice's device-plugin sockets",
    "/var/lib/kubelet/plugins": "the DRA drivers' sockets and prepared claims",
    "/var/lib/kubelet/plugins_registry": "the kubelet's plugin registration sockets",
}
"""vslice's directories on a node as the roles and the node agent's defaults place them
(``handover.cache_root``, ``limits_root``, ``shim_library``, ``preload_file``,
``cdi.spec_dir``, ``device_plugin.dir``, ``dra.kubelet_plugins_dir``), and what each holds;
``/var/run`` is listed with ``/run`` since one links to the other on every distribution."""

CAPABILITIES: Mapping[str, str] = {
    "SYS_ADMIN": "it can mount over or unmount /etc/ld.so.preload and its limits file",
    "SYS_PTRACE": "it can write into processes that are not its own, the shim's state in them",
    "SYS_MODULE": "it can load code into the node's kernel",
    "SYS_RAWIO": "it can read and write the node's memory and I/O ports",
    "DAC_READ_SEARCH": "it can open the node's files by handle, outside its own mounts",
    "ALL": "it adds every capability, SYS_ADMIN and SYS_PTRACE among them",
}
"""Capabilities a container in reach of a GPU slice may not add, and why each gets around
the shim. Others (``IPC_LOCK`` for RDMA, ``NET_ADMIN``) stay the Pod Security level's."""

UNCONFINED = "Unconfined"
DEFAULT_SECCOMP = "RuntimeDefault"
LEGACY_POD_SECCOMP = "seccomp.security.alpha.kubernetes.io/pod"
LEGACY_CONTAINER_SECCOMP = "container.seccomp.security.alpha.kubernetes.io/"
CDI_PREFIX = "cdi.k8s.io/"

# Reason codes (metrics) of the refusals whose field names a key the pod's author chose.
CDI_ANNOTATION = "cdi_annotation"
SECCOMP_ANNOTATION = "seccomp_annotation"

BYPASS = "which lets a container bypass its GPU slice"
SECCOMP_WARNING = (
    f"spec.securityContext.seccompProfile set to {{'type': '{DEFAULT_SECCOMP}'}}: a pod that "
    "asks for GPUs runs under the container runtime's default seccomp filter, which keeps its "
    "processes from mounting over /etc/ld.so.preload in a namespace of their own; set a "
    "seccompProfile (RuntimeDefault or Localhost) in the pod to choose it yourself"
)


@dataclass(frozen=True)
class Escape:
    """Why a GPU pod is refused: the field, the message, and the metrics' reason code
    (``None``: the field, its indices dropped)."""

    field: str
    message: str
    reason: str | None = None


def refusal(
    pod: Mapping[str, Any],
    items: list[Container],
    gpu_containers: Collection[tuple[bool, str]],
    names: ResourceNames,
    host_paths: Mapping[str, str] = HOST_PATHS,
) -> Escape | None:
    """The first way around the shim the GPU pod asks for, or None.

    ``items``: every container, ephemeral ones included (``podspec.every_container``);
    ``gpu_containers``: the keys of those that ask for GPUs.
    """
    spec = pod.get("spec") or {}
    asks = f"a pod that asks for {names.gpu}"
    return (
        _annotations(pod, asks)
        or _host_namespaces(spec, asks)
        or _host_paths(spec, asks, host_paths)
        or _pod_seccomp(spec, asks)
        or _containers(spec, items, gpu_containers, names)
    )


def needs_seccomp_default(pod: Mapping[str, Any], items: list[Container]) -> bool:
    """Whether the pod leaves a container without a seccomp profile (which the kubelet runs
    Unconfined): none on the pod, and at least one container without its own.

    A legacy annotation counts as a profile: the API server copies it into the empty field
    after the webhook, and refuses a pod whose annotation and field disagree."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if LEGACY_POD_SECCOMP in annotations:
        return False
    if _profile((pod.get("spec") or {}).get("securityContext")) is not None:
        return False
    return any(
        _profile(c.spec.get("securityContext")) is None
        and f"{LEGACY_CONTAINER_SECCOMP}{c.name}" not in annotations
        for c in items
    )


def _annotations(pod: Mapping[str, Any], asks: str) -> Escape | None:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    for key, value in annotations.items():
        where = f"metadata.annotations[{key!r}]"
        if key.startswith(CDI_PREFIX):
            return Escape(
                where,
                f"{where} is not allowed on {asks}: CDI devices are vslice's to inject (its "
                "device plugin or DRA driver names the GPUs the pod was granted), and a CDI "
                f"annotation could name any device of the node, {BYPASS}; remove the "
                "annotation and ask for GPUs with resources.limits",
                CDI_ANNOTATION,
            )
        legacy = key == LEGACY_POD_SECCOMP or key.startswith(LEGACY_CONTAINER_SECCOMP)
        if legacy and str(value).lower() == UNCONFINED.lower():
            return Escape(
                where,
                f"{where} must not be {value!r} on {asks}: the API server copies it into the "
                f"seccompProfile field, and without a seccomp filter a process can mount over "
                f"/etc/ld.so.preload in a namespace of its own, {BYPASS}; remove the "
                "annotation (the pod then runs with RuntimeDefault) or set "
                "securityContext.seccompProfile to a Localhost profile",
                SECCOMP_ANNOTATION,
            )
    return None


def _host_namespaces(spec: Mapping[str, Any], asks: str) -> Escape | None:
    shares = {
        "hostPID": "every process of the node, other pods' GPU processes and their shim state "
        "among them",
        "hostIPC": "the shared memory of every process of the node, other pods' GPU processes "
        "among them",
    }
    for flag, what in shares.items():
        if spec.get(flag) is True:
            where = f"spec.{flag}"
            return Escape(
                where,
                f"{where} must be false in {asks}, got true: it gives the pod's containers "
                f"{what}, {BYPASS} and reach its neighbours'; remove {where}",
            )
    return None


def _host_paths(spec: Mapping[str, Any], asks: str, host_paths: Mapping[str, str]) -> Escape | None:
    for index, volume in enumerate(spec.get("volumes") or []):
        path = (volume.get("hostPath") or {}).get("path")
        if not isinstance(path, str) or not path:
            continue
        clash = _overlap(path, host_paths)
        if clash is None:
            continue
        where = f"spec.volumes[{index}].hostPath.path"
        return Escape(
            where,
            f"{where} must not be {path!r} in {asks}: {clash}, {BYPASS} or change its "
            "neighbours'; mount another directory of the node, or use an emptyDir or a "
            "PersistentVolumeClaim",
        )
    return None


def _overlap(path: str, host_paths: Mapping[str, str]) -> str | None:
    """How ``path`` meets one of vslice's directories (it is one, lies inside one, or holds
    one), or None. Compared as written, after ``..`` and doubled slashes are resolved: the
    kubelet mounts what the path names."""
    wanted = _normal(path)
    for protected, holds in host_paths.items():
        if wanted == protected:
            return f"it is {protected} ({holds})"
        if wanted.startswith(protected + "/"):
            return f"it lies inside {protected} ({holds})"
        if wanted == "/" or protected.startswith(wanted + "/"):
            return f"it holds {protected} ({holds})"
    return None


def _normal(path: str) -> str:
    normal = posixpath.normpath("/" + path.lstrip("/"))
    return "/" + normal.lstrip("/")


def _pod_seccomp(spec: Mapping[str, Any], asks: str) -> Escape | None:
    if _profile(spec.get("securityContext")) == UNCONFINED:
        return _unconfined("spec.securityContext.seccompProfile.type", f"in {asks}")
    return None


def _unconfined(where: str, whose: str) -> Escape:
    return Escape(
        where,
        f"{where} must not be {UNCONFINED!r} {whose}: without a seccomp filter a process can "
        f"mount over /etc/ld.so.preload in a namespace of its own, {BYPASS}; use "
        f"{DEFAULT_SECCOMP} (or leave seccompProfile unset: the webhook sets {DEFAULT_SECCOMP}) "
        "or a Localhost profile",
    )


def _containers(
    spec: Mapping[str, Any],
    items: list[Container],
    gpu_containers: Collection[tuple[bool, str]],
    names: ResourceNames,
) -> Escape | None:
    shared = spec.get("shareProcessNamespace") is True
    for container in items:
        whose = _in_reach(container, container.key in gpu_containers, shared, names)
        if whose is None:
            continue
        escape = _container(container, whose)
        if escape is not None:
            return escape
    return None


def _in_reach(container: Container, gpu: bool, shared: bool, names: ResourceNames) -> str | None:
    """How the message names a container within reach of a GPU slice, or None."""
    named = f"in container {container.name!r}"
    if gpu:
        return f"{named}, which asks for {names.gpu}"
    if container.kind == EPHEMERAL:
        return f"{named}, an ephemeral container of a pod that asks for {names.gpu}"
    if shared:
        return (
            f"{named}, which shares its processes with the pod's GPU containers "
            "(spec.shareProcessNamespace)"
        )
    return None


def _container(container: Container, whose: str) -> Escape | None:
    context = container.spec.get("securityContext") or {}
    base = f"{container.field}.securityContext"
    if context.get("privileged") is True:
        where = f"{base}.privileged"
        return Escape(
            where,
            f"{where} must be false {whose}, got true (a privileged container sees every GPU "
            f"of the node, {BYPASS}); remove it",
        )
    added = (context.get("capabilities") or {}).get("add") or []
    for position, capability in enumerate(added):
        why = CAPABILITIES.get(_capability(capability))
        if why is not None:
            where = f"{base}.capabilities.add[{position}]"
            return Escape(
                where,
                f"{where} must not be {capability!r} {whose}: {why}, {BYPASS}; remove it from "
                "capabilities.add (a tool that needs it can run in a pod that asks for no GPU)",
            )
    if context.get("procMount") not in (None, "Default"):
        where = f"{base}.procMount"
        return Escape(
            where,
            f"{where} must be 'Default' {whose}, got {context['procMount']!r}: an unmasked "
            f"/proc shows the node's kernel interfaces that the runtime hides, {BYPASS}; remove "
            "procMount",
        )
    if _profile(context) == UNCONFINED:
        return _unconfined(f"{base}.seccompProfile.type", whose)
    return None


def _capability(name: str) -> str:
    """The capability as the runtime reads it: ``cap_sys_admin`` is ``SYS_ADMIN`` too."""
    upper = name.strip().upper()
    return upper.removeprefix("CAP_")


def _profile(context: Any) -> str | None:
    """The seccomp profile type a security context names, or None."""
    if not isinstance(context, Mapping):
        return None
    profile = context.get("seccompProfile")
    kind = profile.get("type") if isinstance(profile, Mapping) else None
    return kind if isinstance(kind, str) and kind else None
