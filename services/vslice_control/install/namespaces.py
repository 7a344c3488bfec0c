"""The namespaces an installation creates or labels.

- vslice's own namespace, where its service accounts live: the webhook must never gate it (it
  is also left out by name);
- the namespaces where tenants run GPU pods, with Pod Security enforced (docs/security.md):
  ``baseline`` refuses hostPID and the other host namespaces, added capabilities, privileged
  containers and hostPath volumes, so a tenant's pod cannot reach vslice's directories or
  other pods' processes on the node. Such a namespace may already exist with labels of its
  own: apply it server-side (the role) or merge the labels (the lab), never replace it.
"""

from __future__ import annotations

from typing import Any

from vslice_control.install.values import InstallValues

PART_OF = {"app.kubernetes.io/part-of": "vslice"}
"""The label every object vslice installs carries."""
OPT_OUT_LABEL = "vslice.io/webhook"
"""Label a namespace ``vslice.io/webhook: disabled`` to keep the webhook out of it; only
administrators can label namespaces, so no tenant can opt a pod out."""


def pod_security_labels(level: str = "baseline") -> dict[str, str]:
    """The Pod Security labels of a GPU namespace."""
    return {
        "pod-security.kubernetes.io/enforce": level,
        "pod-security.kubernetes.io/enforce-version": "latest",
    }


def vslice_namespace(values: InstallValues) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": values.namespace,
                "labels": {**PART_OF, OPT_OUT_LABEL: "disabled"},
            },
        }
    ]


def gpu_namespaces(values: InstallValues) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": pod_security_labels(values.pod_security_level)},
        }
        for name in values.gpu_namespaces
    ]


def excluded_namespaces(values: InstallValues) -> list[str]:
    """Namespaces the webhook and the state policy leave out by name: vslice's own first, then
    the operator's, each once."""
    return list(dict.fromkeys([values.namespace, *values.webhook.excluded_namespaces]))
