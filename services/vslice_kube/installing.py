"""Applying install objects (``vslice_control.install``) through the API, as the lab does: each
object is created, or the stored one of that name is replaced by it, in the order given, so a
second run brings them to the current text. A Namespace that exists is not replaced: its
labels are merged in (others, such as the API server's ``kubernetes.io/metadata.name``, stay),
as the Ansible role's server-side apply leaves them.

Only the kinds vslice installs are known; another kind is refused before anything is applied.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from vslice_core.errors import InvalidRequest, Timeout

from vslice_kube.apierrors import cluster_error, translated
from vslice_kube.applying import create_or_replace
from vslice_kube.responses import drained

__all__ = ["KINDS", "apply_objects", "wait_established"]

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


def wait_established(api_client: k8s.ApiClient, names: Sequence[str], timeout: float) -> None:
    """Wait until the API server serves every named CRD (their ``Established`` condition);
    Timeout lists the ones it does not."""
    api = k8s.ApiextensionsV1Api(api_client)
    deadline = time.monotonic() + timeout
    missing = set(names)
    while True:
        for name in sorted(missing):
            with translated(f"read CustomResourceDefinition {name}"):
                status = api.read_custom_resource_definition(name).status
            conditions = (status.conditions if status else None) or []
            if any(c.type == "Established" and c.status == "True" for c in conditions):
                missing.discard(name)
        if not missing:
            return
        if time.monotonic() > deadline:
            raise Timeout(
                f"the API server did not establish {len(missing)} CRD(s) within "
                f"{timeout:.0f}s: {', '.join(sorted(missing)[:5])}"
            )
        time.sleep(0.2)


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


def _custom(group: str, version: str, plural: str, *, namespaced: bool) -> Applier:
    """Objects of a CustomResourceDefinition (Kueue's queues): the generic API answers plain
    dicts, so the stored resourceVersion is read from the dict."""

    def apply(api_client: k8s.ApiClient, body: Mapping[str, Any]) -> None:
        api = k8s.CustomObjectsApi(api_client)
        scope = (str(body["metadata"]["namespace"]),) if namespaced else ()
        kind = "namespaced" if namespaced else "cluster"
        create_or_replace(
            plural,
            body,
            lambda obj, **kw: getattr(api, f"create_{kind}_custom_object")(
                group, version, *scope, plural, obj, **kw
            ),
            lambda name: _stored_version(
                getattr(api, f"get_{kind}_custom_object")(group, version, *scope, plural, name)
            ),
            lambda name, obj, **kw: getattr(api, f"replace_{kind}_custom_object")(
                group, version, *scope, plural, name, obj, **kw
            ),
        )

    return apply


def _stored_version(stored: Mapping[str, Any]) -> SimpleNamespace:
    """A custom object as ``create_or_replace`` reads one (``.metadata.resource_version``)."""
    return SimpleNamespace(
        metadata=SimpleNamespace(resource_version=stored["metadata"]["resourceVersion"])
    )


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
    "CustomResourceDefinition": _cluster_scoped(
        k8s.ApiextensionsV1Api, "customresourcedefinition", "custom_resource_definition"
    ),
    # Kueue's queue objects (vslice_control.install.kueue), for the lab and `vslice kueue`.
    "ResourceFlavor": _custom("kueue.x-k8s.io", "v1beta2", "resourceflavors", namespaced=False),
    "ClusterQueue": _custom("kueue.x-k8s.io", "v1beta2", "clusterqueues", namespaced=False),
    "LocalQueue": _custom("kueue.x-k8s.io", "v1beta2", "localqueues", namespaced=True),
}
KINDS = tuple(sorted(_APPLIERS))
"""The kinds ``apply_objects`` knows: every kind ``vslice_control.install`` builds."""
