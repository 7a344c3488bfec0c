"""The ClusterRole ``vslice-viewer``: what the SDK's read path and ``vslice top`` need.

``Workloads.list_nodes``/``get_node`` and ``list_pods(None)``/``get_pod`` read the nodes'
inventory annotations and every pod's allocation, and the DRA path's ResourceSlices and
ResourceClaims (and the templates of pending pods); nothing else is granted (no Secrets, no
ConfigMaps, no writes). Creating and deleting pods and Jobs (``vslice request``, ``Client.run``)
is namespaced and left to the site (e.g. the built-in ``edit`` role in the user's namespace).
It carries no ``aggregate-to-view`` label: nodes are cluster-scoped, so aggregation would add
nothing to a namespaced ``view`` binding and would widen every cluster-wide one.

The lab installs it at ``up``; the Ansible role renders the same object (checked by its tests).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s

from vslice_kube.applying import create_or_replace

VIEWER_ROLE = "vslice-viewer"


def viewer_cluster_role() -> dict[str, Any]:
    """Read nodes, pods and the DRA objects (slices, claims, templates, classes) in every
    namespace, nothing more."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": VIEWER_ROLE, "labels": {"app.kubernetes.io/part-of": "vslice"}},
        "rules": [
            {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch"]},
            # The DRA path (docs/dra.md): the views read slices and claims as they read pods.
            {
                "apiGroups": ["resource.k8s.io"],
                "resources": [
                    "resourceslices",
                    "resourceclaims",
                    "resourceclaimtemplates",
                    "deviceclasses",
                ],
                "verbs": ["get", "list", "watch"],
            },
        ],
    }


def apply_cluster_role(api_client: k8s.ApiClient, body: Mapping[str, Any]) -> None:
    """Create the ClusterRole, or replace an existing one of the same name."""
    api: Any = k8s.RbacAuthorizationV1Api(api_client)  # stubs reject dict bodies
    create_or_replace(
        "clusterrole",
        body,
        api.create_cluster_role,
        api.read_cluster_role,
        api.replace_cluster_role,
    )
