"""The AdmissionReview v1 wire format: parse a request, encode a response.

Parsing is strict about what the webhook needs (``request.uid``, ``request.object`` as a Pod,
or as a ``resource.k8s.io/v1`` ResourceClaim or ResourceClaimTemplate: :class:`ClaimAdmission`)
and reports the first problem as :class:`vslice_core.errors.InvalidRequest` naming the field
and the value, so a broken body gets a clear 400 instead of a traceback. A pod is also held to
the shape of a Pod in every field a rule reads (``podshape``): a rule never sees a list where
an object belongs, so none can be slipped past by a wrong type.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from typing import Any

from vslice_core.errors import InvalidRequest

from vslice_control.webhook import podshape

API_VERSION = "admission.k8s.io/v1"
CLAIM_API_VERSION = "resource.k8s.io/v1"
CLAIM_KINDS = ("ResourceClaim", "ResourceClaimTemplate")


@dataclass(frozen=True)
class AdmissionRequest:
    uid: str
    operation: str
    namespace: str
    name: str
    pod: dict[str, Any]
    dry_run: bool = False


@dataclass(frozen=True)
class ClaimAdmission:
    """A ResourceClaim or ResourceClaimTemplate being created or updated."""

    uid: str
    operation: str
    namespace: str
    name: str
    kind: str
    claim: dict[str, Any]
    old_claim: dict[str, Any] | None = None
    """The stored object of an UPDATE (None for a CREATE)."""
    dry_run: bool = False


@dataclass(frozen=True)
class Verdict:
    """What the webhook decided: allow (with an optional JSON Patch) or deny with a message."""

    allowed: bool
    patch: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""
    code: int = 200
    warnings: list[str] = field(default_factory=list)
    objects: list[dict[str, Any]] = field(default_factory=list)
    """Objects that must exist before the request is admitted (a DRA pod's
    ResourceClaimTemplate): ``main`` creates them, except on a dry run; never encoded."""
    reason: str = ""
    """Why, as a short machine code for the metrics (the field of a refused value,
    ``not_gpu_pod``, ...; :func:`reason_code`); never encoded."""

    @classmethod
    def deny(cls, message: str, code: int = 403, reason: str = "") -> Verdict:
        return cls(allowed=False, message=message, code=code, reason=reason)


_INDEX = re.compile(r"\[(?!')[^\]]*\]")


def reason_code(field: str | None, default: str = "invalid") -> str:
    """A field path as a metrics label: every index or name in brackets becomes ``[]``
    (``spec.containers[3].env[0]`` -> ``spec.containers[].env[]``), so a pod cannot mint
    label values; quoted keys (``limits['nvidia.com/gpumem']``, vslice's own resource names)
    stay, since they say which value was wrong."""
    return _INDEX.sub("[]", field) if field else default


class NotAReview(InvalidRequest):
    """The body is not an ``admission.k8s.io/v1`` AdmissionReview at all: answered with HTTP
    400 even when it carries a uid, since no API server sent it."""


def _load(body: bytes) -> Any:
    try:
        return json.loads(body)
    except RecursionError as exc:
        # Nesting deeper than the parser's recursion limit: a crafted body, not a pod.
        raise NotAReview(
            "body is nested too deeply to be an AdmissionReview", field="body", value=body[:80]
        ) from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NotAReview(f"body is not JSON: {exc}", field="body", value=body[:80]) from exc


def parse_review(body: bytes) -> AdmissionRequest | ClaimAdmission:
    """The pod (or claim) and metadata of an AdmissionReview body."""
    review = _load(body)
    if not isinstance(review, dict):
        raise NotAReview("body must be an AdmissionReview object", field="body", value=review)
    if review.get("kind") != "AdmissionReview" or review.get("apiVersion") != API_VERSION:
        raise NotAReview(
            f"expected apiVersion {API_VERSION} kind AdmissionReview, got "
            f"{review.get('apiVersion')!r} {review.get('kind')!r}",
            field="apiVersion",
            value=review.get("apiVersion"),
        )
    request = _mapping(review.get("request"), "request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise InvalidRequest(
            f"request.uid must be a non-empty string, got {uid!r}", field="request.uid", value=uid
        )
    pod = _mapping(request.get("object"), "request.object")
    if pod.get("kind") in CLAIM_KINDS:
        return _claim_admission(request, uid, pod)
    if pod.get("kind", "Pod") != "Pod":
        raise InvalidRequest(
            f"request.object.kind must be Pod, got {pod.get('kind')!r}",
            field="request.object.kind",
            value=pod.get("kind"),
        )
    _mapping(pod.get("spec"), "request.object.spec")
    podshape.check(pod)
    metadata = pod.get("metadata") or {}
    return AdmissionRequest(
        uid=uid,
        operation=str(request.get("operation", "CREATE")),
        namespace=str(request.get("namespace") or metadata.get("namespace") or "default"),
        name=str(request.get("name") or metadata.get("name") or metadata.get("generateName") or ""),
        pod=pod,
        dry_run=bool(request.get("dryRun", False)),
    )


def _claim_admission(request: dict[str, Any], uid: str, claim: dict[str, Any]) -> ClaimAdmission:
    # Only v1 is read: the webhook's rule names v1, and with matchPolicy Equivalent the API
    # server converts a request for another version to v1 before calling.
    if claim.get("apiVersion") != CLAIM_API_VERSION:
        raise InvalidRequest(
            f"request.object.apiVersion must be {CLAIM_API_VERSION} for a {claim.get('kind')}, "
            f"got {claim.get('apiVersion')!r}",
            field="request.object.apiVersion",
            value=claim.get("apiVersion"),
        )
    _mapping(claim.get("spec"), "request.object.spec")
    metadata = _mapping(claim.get("metadata") or {}, "request.object.metadata")
    old = request.get("oldObject")
    return ClaimAdmission(
        uid=uid,
        operation=str(request.get("operation", "CREATE")),
        namespace=str(request.get("namespace") or metadata.get("namespace") or "default"),
        name=str(request.get("name") or metadata.get("name") or metadata.get("generateName") or ""),
        kind=str(claim["kind"]),
        claim=claim,
        old_claim=_mapping(old, "request.oldObject") if old is not None else None,
        dry_run=bool(request.get("dryRun", False)),
    )


def request_uid(body: bytes) -> str:
    """The request uid if the body has one, so even a rejected review can be answered."""
    try:
        uid = json.loads(body)["request"]["uid"]
    except (ValueError, TypeError, KeyError, RecursionError):
        return ""
    return uid if isinstance(uid, str) else ""


def encode_review(uid: str, verdict: Verdict) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        response["status"] = {"code": verdict.code, "message": verdict.message}
    if verdict.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(verdict.patch).encode()).decode()
    if verdict.warnings:
        response["warnings"] = verdict.warnings
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


def _mapping(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidRequest(
            f"{name} must be an object, got {type(value).__name__}", field=name, value=value
        )
    return value
