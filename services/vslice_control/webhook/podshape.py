"""The shape of a pod under review: every field a rule reads has the JSON type a Pod gives it.

The API server decodes a pod into its typed form before calling, so a review from it always
has this shape; a body that does not is not from it, or is from a client that talks to the
webhook directly. Either way a rule must not guess at it: a ``securityContext`` that is a
string, or ``hostPID: "true"``, would otherwise slip past the check that reads it (or crash
it, which the API server answers by its failurePolicy). So the review is refused, naming the
first field that has the wrong type, before any rule runs (``review.parse_review``).

Only the fields the webhook reads are checked; the API server validates the rest. An absent
field (or ``null``, which Kubernetes treats alike) is always fine here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vslice_core.errors import InvalidRequest

from vslice_control.webhook.podspec import KINDS

_SHOWN = 80  # characters of a wrong value quoted in the message


def check(pod: Mapping[str, Any]) -> None:
    """Raise :class:`InvalidRequest` naming the first field whose type is wrong."""
    metadata = _object(pod.get("metadata"), "metadata")
    annotations = _object(metadata.get("annotations"), "metadata.annotations")
    for key, value in annotations.items():
        _string(value, f"metadata.annotations[{key!r}]")
    spec = _object(pod.get("spec"), "spec")
    for flag in ("hostPID", "hostIPC", "shareProcessNamespace"):
        _boolean(spec.get(flag), f"spec.{flag}")
    for name in ("nodeName", "schedulerName"):
        _string(spec.get(name), f"spec.{name}")
    _security_context(spec.get("securityContext"), "spec.securityContext")
    for where, volume in _objects(spec.get("volumes"), "spec.volumes"):
        host_path = _object(volume.get("hostPath"), f"{where}.hostPath")
        _string(host_path.get("path"), f"{where}.hostPath.path")
    for where, claim in _objects(spec.get("resourceClaims"), "spec.resourceClaims"):
        _string(claim.get("name"), f"{where}.name")
    for kind in KINDS:
        for where, container in _objects(spec.get(kind), f"spec.{kind}"):
            _container(container, where)


def _container(container: Mapping[str, Any], where: str) -> None:
    _string(container.get("name"), f"{where}.name")
    resources = _object(container.get("resources"), f"{where}.resources")
    for part in ("limits", "requests"):
        _object(resources.get(part), f"{where}.resources.{part}")
    for at, variable in _objects(container.get("env"), f"{where}.env"):
        _string(variable.get("name"), f"{at}.name")
    for at, source in _objects(container.get("envFrom"), f"{where}.envFrom"):
        _string(source.get("prefix"), f"{at}.prefix")
    context = _security_context(container.get("securityContext"), f"{where}.securityContext")
    _boolean(context.get("privileged"), f"{where}.securityContext.privileged")
    _string(context.get("procMount"), f"{where}.securityContext.procMount")
    capabilities = _object(context.get("capabilities"), f"{where}.securityContext.capabilities")
    for part in ("add", "drop"):
        field = f"{where}.securityContext.capabilities.{part}"
        for position, name in enumerate(_list(capabilities.get(part), field)):
            _string(name, f"{field}[{position}]")


def _security_context(value: Any, where: str) -> Mapping[str, Any]:
    context = _object(value, where)
    profile = _object(context.get("seccompProfile"), f"{where}.seccompProfile")
    _string(profile.get("type"), f"{where}.seccompProfile.type")
    return context


def _objects(value: Any, where: str) -> list[tuple[str, Mapping[str, Any]]]:
    """Each entry of a list of objects with the field that names it."""
    return [
        (f"{where}[{i}]", _object(item, f"{where}[{i}]"))
        for i, item in enumerate(_list(value, where))
    ]


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _wrong(where, "an object", value)
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _wrong(where, "a list", value)
    return value


def _string(value: Any, where: str) -> None:
    if value is not None and not isinstance(value, str):
        raise _wrong(where, "a string", value)


def _boolean(value: Any, where: str) -> None:
    if value is not None and not isinstance(value, bool):
        raise _wrong(where, "true or false", value)


def _wrong(where: str, expected: str, value: Any) -> InvalidRequest:
    shown = repr(value)
    if len(shown) > _SHOWN:
        shown = shown[: _SHOWN - 3] + "..."
    return InvalidRequest(
        f"{where} must be {expected}, as in a Pod, got {shown} ({_json_type(value)})",
        field=where,
        value=value,
    )


def _json_type(value: Any) -> str:
    """The JSON name of a decoded value's type: what the sender wrote, not Python's name."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"
