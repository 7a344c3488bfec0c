"""Pod and Job manifests carrying a :class:`~vslice.slices.Slice`.

The SDK speaks plain manifests (dicts, as ``kubectl apply`` would read them), so what
``client.run`` creates is exactly what a user could write by hand, and ``client.submit``
accepts the user's own manifest. A slice lands on one container as resource limits and on
the pod (or the Job's pod template) as annotations.

A ``Slice(path="dra")`` lands as a claim instead: the pod (or template) gets
``spec.resourceClaims: [{name: vslice-gpu, resourceClaimTemplateName: vslice-<hash>}]``, the
container ``resources.claims: [{name: vslice-gpu, request: <container>}]`` and no
``nvidia.com/*`` limits (no node advertises them on the DRA path). :func:`claim_template`
is the ResourceClaimTemplate it names; ``client.run`` and ``client.submit`` create it first.
The annotations stay, as on pods the webhook converts, so a plan can say which of them DRA
does not apply.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from vslice_core.dra import claims
from vslice_core.model import PodRequest
from vslice_core.queueing import QUEUE_LABEL
from vslice_core.requests import pod_request

from vslice import dra
from vslice.errors import InvalidRequest
from vslice.slices import Slice

MANAGED_BY: Final = {"app.kubernetes.io/managed-by": "vslice-sdk"}
WORKLOAD_KINDS: Final = ("Job", "Pod")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _command(command: str | Sequence[str] | None) -> list[str] | None:
    """A string runs through ``sh -c`` (as in a shell); a list is the exact argv."""
    if command is None:
        return None
    if isinstance(command, str):
        return ["sh", "-c", command]
    return [str(part) for part in command]


def check_name(name: str, field: str = "name") -> str:
    """Kubernetes object names used here must be DNS labels (at most 63 characters)."""
    if len(name) > 63 or not _DNS_LABEL.match(name):
        raise InvalidRequest(
            f"{field} must be a DNS label (lower-case letters, digits, '-', at most 63), "
            f"got {name!r}",
            field=field,
            value=name,
        )
    return name


def pod_manifest(
    image: str,
    command: str | Sequence[str] | None = None,
    *,
    slice: Slice,
    name: str | None = None,
    env: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    container: str = "main",
) -> dict[str, Any]:
    """A Pod that runs ``image`` once (``restartPolicy: Never``) with the slice applied."""
    if not image or not isinstance(image, str):
        raise InvalidRequest(f"image must be a container image name, got {image!r}", field="image")
    metadata: dict[str, Any] = {"labels": {**MANAGED_BY, **(labels or {})}}
    if name is None:
        metadata["generateName"] = "vslice-"
    else:
        metadata["name"] = check_name(name)
    spec_container: dict[str, Any] = {"name": check_name(container, "container"), "image": image}
    if (argv := _command(command)) is not None:
        spec_container["command"] = argv
    if env:
        spec_container["env"] = [{"name": k, "value": str(v)} for k, v in env.items()]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"restartPolicy": "Never", "containers": [spec_container]},
    }
    return apply_slice(pod, slice)


def job_manifest(pod: Mapping[str, Any], *, backoff_limit: int = 0) -> dict[str, Any]:
    """Wrap a pod manifest from :func:`pod_manifest` in a Job that runs it to completion."""
    metadata = dict(pod.get("metadata") or {})
    template = {"metadata": {"labels": metadata.get("labels", {})}, "spec": pod["spec"]}
    if annotations := metadata.get("annotations"):
        template["metadata"]["annotations"] = annotations
    job_meta = {k: v for k, v in metadata.items() if k in ("name", "generateName", "labels")}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": job_meta,
        "spec": {
            "backoffLimit": backoff_limit,
            # A pod evicted to make room (priority preemption) or to give an idle slice back
            # did not fail: the Job makes a new one instead of counting it against the limit.
            "podFailurePolicy": {
                "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
            },
            "template": template,
        },
    }


def in_local_queue(job: dict[str, Any], queue: str) -> dict[str, Any]:
    """Put a Job in Kueue's LocalQueue ``queue`` of its namespace: the queue label, and created
    suspended, so that no pod exists before Kueue admits it (Kueue's own webhook suspends it
    too; suspending here keeps a job from starting past the queue if that webhook is down)."""
    if job.get("kind") != "Job":
        raise InvalidRequest(
            f"queue: Kueue queues Jobs, and this is a {job.get('kind')}; submit a Job (or "
            "run(..., kind='Job')), or leave queue out",
            field="queue",
            value=queue,
        )
    metadata = job.setdefault("metadata", {})
    metadata.setdefault("labels", {})[QUEUE_LABEL] = queue
    job.setdefault("spec", {})["suspend"] = True
    return job


def pod_template(manifest: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(metadata, spec)`` of the pod a Pod or Job manifest describes (the same dicts)."""
    kind = manifest.get("kind")
    if kind not in WORKLOAD_KINDS:
        raise InvalidRequest(
            f"kind must be one of {', '.join(WORKLOAD_KINDS)}, got {kind!r}", field="kind"
        )
    if kind == "Job":
        template = manifest.get("spec", {}).get("template")
        if not isinstance(template, dict):
            raise InvalidRequest("a Job needs spec.template", field="spec.template")
        return template.setdefault("metadata", {}), template.setdefault("spec", {})
    spec = manifest.get("spec")
    if not isinstance(spec, dict) or not spec.get("containers"):
        raise InvalidRequest("a Pod needs spec.containers", field="spec.containers")
    return manifest.setdefault("metadata", {}), spec


def apply_slice(
    manifest: Mapping[str, Any], slice: Slice, container: str | None = None
) -> dict[str, Any]:
    """A copy of a Pod or Job manifest with ``slice`` on one container (default: the first)."""
    result = copy.deepcopy(dict(manifest))
    metadata, spec = pod_template(result)
    containers = spec.get("containers") or []
    target = _find_container(containers, container)
    resources = target.setdefault("resources", {})
    if slice.path == "dra":
        template = claim_template(slice, str(target.get("name") or ""))
        entry = {"name": dra.CLAIM_NAME, "request": claims.request_name(str(target["name"]))}
        resources["claims"] = [
            *(c for c in resources.get("claims") or [] if c.get("name") != dra.CLAIM_NAME),
            entry,
        ]
        reference = {
            "name": dra.CLAIM_NAME,
            "resourceClaimTemplateName": template["metadata"]["name"],
        }
        spec["resourceClaims"] = [
            *(c for c in spec.get("resourceClaims") or [] if c.get("name") != dra.CLAIM_NAME),
            reference,
        ]
    else:
        resources.setdefault("limits", {}).update(slice.limits())
    if slice.annotations():
        metadata.setdefault("annotations", {}).update(slice.annotations())
    if slice.priority_class:
        spec["priorityClassName"] = slice.priority_class
    return result


def slice_request(slice: Slice, container: str = "main") -> PodRequest:
    """The core's normalized request for ``slice`` on one container: what the webhook would
    read from the limits and annotations, so both paths ask the same."""
    pod = {
        "metadata": {"annotations": slice.annotations()},
        "spec": {"containers": [{"name": container, "resources": {"limits": slice.limits()}}]},
    }
    return pod_request(pod)


def claim_template(
    slice: Slice, container: str = "main", namespace: str | None = None
) -> dict[str, Any]:
    """The ResourceClaimTemplate a ``Slice(path="dra")`` on ``container`` names: one request
    named after the container, built by :func:`vslice_core.dra.claims.claim_spec`; named
    ``vslice-`` and a hash of that spec, so the same slice shares one template."""
    try:
        spec = claims.claim_spec(slice_request(slice, container))
    except InvalidRequest as exc:
        # claim_spec names its own field (containers[...]); the SDK's field is memory.
        raise InvalidRequest(f"memory: {exc}", field="memory", value=slice.memory_percent) from None
    return dra.claim_template(spec, namespace, MANAGED_BY)


def container_name(manifest: Mapping[str, Any], container: str | None = None) -> str:
    """The name of the container a slice goes on (default: the first)."""
    _, spec = pod_template(copy.deepcopy(dict(manifest)))
    return str(_find_container(spec.get("containers") or [], container).get("name") or "")


def _find_container(containers: list[dict[str, Any]], name: str | None) -> dict[str, Any]:
    if not containers:
        raise InvalidRequest("the pod has no containers", field="spec.containers")
    if name is None:
        return containers[0]
    for candidate in containers:
        if candidate.get("name") == name:
            return candidate
    names = ", ".join(str(c.get("name")) for c in containers)
    raise InvalidRequest(
        f"no container named {name!r}; containers: {names}", field="container", value=name
    )
