"""Applying install objects (``vslice_control.install``) through the API, as the lab does: each
object is created, or the stored one of that name is replaced by it, in the order given, so a
second run brings them to the current text. A Namespace that exists is not replaced: its
labels are merged in (others, such as the API server's ``kubernetes.io/metadata.name``, stay),
as the Ansible role's server-side apply leaves them.

Only the kinds vslice installs are known; another kind is refused before anything is applied.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from vslice_core.errors import InvalidRequest

from vslice_kube.apierrors import cluster_error, translated
from vslice_kube.applying import create_or_replace
from vslice_kube.responses import drained

__all__ = ["KINDS", "apply_objects"]

Applier = Callable[[k8s.ApiClient, Mapping[str, Any]], None]


def apply_objects(api_client: k8s.ApiClient, objects: Sequence[Mapping[str, Any]]) -> None:
    """Apply ``objects`` in order (a namespace before what lives in it)."""
    unknown = [str(body.get("kind")) for body in objects if body.get("kind") not in _APPLIERS]
    if unknown:
        raise InvalidRequest(
            f"kind must be one of {', '.join(KINDS)}, got {unknown[0]!r}",
            field="kind",
            value=unknown[0],
        )
    for body in objects:
        _APPLIERS[str(body["kind"])](api_client, body)


def _namespace(api_client: k8s.ApiClient, body: Mapping[str, Any]) -> None:
    api: Any = k8s.CoreV1Api(api_client)  # stubs reject dict bodies
    name = str(body["metadata"]["name"])
    try:
        drained(api.create_namespace(dict(body), _preload_content=False))
        return
    except ApiException as exc:
        if exc.status != 409:
            raise cluster_error(exc, f"create namespace {name}") from exc
    labels = dict(body["metadata"].get("labels") or {})
    with translated(f"label namespace {name}"):
        drained(api.patch_namespace(name, {"metadata": {"labels": labels}}, _preload_content=False))


def _namespaced(kind: str, stem: str) -> Applier:
    def apply(api_client: k8s.ApiClient, body: Mapping[str, Any]) -> None:
        api: Any = k8s.CoreV1Api(api_client)
        namespace = str(body["metadata"]["namespace"])
        create_or_replace(
            kind,
            body,
            lambda obj, **kw: getattr(api, f"create_namespaced_{stem}")(namespace, obj, **kw),
            lambda name: getattr(api, f"read_namespaced_{stem}")(name, namespace),
            lambda name, obj, **kw: getattr(api, f"replace_namespaced_{stem}")(
                name, namespace, obj, **kw
            ),
        )

    return apply


def _cluster_scoped(api_class: Callable[[k8s.ApiClient], Any], kind: str, stem: str) -> Applier:
    def apply(api_client: k8s.ApiClient, body: Mapping[str, Any]) -> None:
        api = api_class(api_client)
        create_or_replace(
            kind,
            body,
            getattr(api, f"create_{stem}"),
            getattr(api, f"read_{stem}"),
            getattr(api, f"replace_{stem}"),
        )

    return apply


_ADMISSION = k8s.AdmissionregistrationV1Api
_RBAC = k8s.RbacAuthorizationV1Api
_APPLIERS: dict[str, Applier] = {
    "Namespace": _namespace,
    "ServiceAccount": _namespaced("serviceaccount", "service_account"),
    "Secret": _namespaced("secret", "secret"),
    "ClusterRole": _cluster_scoped(_RBAC, "clusterrole", "cluster_role"),
    "ClusterRoleBinding": _cluster_scoped(_RBAC, "clusterrolebinding", "cluster_role_binding"),
    "ValidatingAdmissionPolicy": _cluster_scoped(
        _ADMISSION, "validatingadmissionpolicy", "validating_admission_policy"
    ),
    "ValidatingAdmissionPolicyBinding": _cluster_scoped(
        _ADMISSION, "validatingadmissionpolicybinding", "validating_admission_policy_binding"
    ),
    "MutatingWebhookConfiguration": _cluster_scoped(
        _ADMISSION, "mutatingwebhookconfiguration", "mutating_webhook_configuration"
    ),
    "ValidatingWebhookConfiguration": _cluster_scoped(
        _ADMISSION, "validatingwebhookconfiguration", "validating_webhook_configuration"
    ),
    "DeviceClass": _cluster_scoped(k8s.ResourceV1Api, "deviceclass", "device_class"),
}
KINDS = tuple(sorted(_APPLIERS))
"""The kinds ``apply_objects`` knows: every kind ``vslice_control.install`` builds."""
