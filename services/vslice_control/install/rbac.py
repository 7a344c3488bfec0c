"""Who may do what: vslice's service accounts, the least access each service needs, and the
ClusterRole ``vslice-viewer`` for users to bind.

The accounts get long-lived token Secrets because the Ansible role runs the services as
systemd units outside the cluster and writes kubeconfigs from those tokens.

``vslice-viewer`` is what the SDK's read path and ``vslice top`` need (docs/sdk.md
"Permissions"): ``Workloads.list_nodes``/``get_node`` and ``list_pods(None)``/``get_pod`` read
the nodes' inventory annotations and every pod's allocation, and the DRA path's ResourceSlices
and ResourceClaims (and the templates of pending pods), and Kueue's Workloads and LocalQueues
(the queued jobs); nothing else is granted (no Secrets,
no ConfigMaps, no writes). Creating and deleting pods and Jobs (``vslice request``,
``Client.run``) is namespaced and left to the site (e.g. the built-in ``edit`` role in the
user's namespace). It carries no ``aggregate-to-view`` label: nodes are cluster-scoped, so
aggregation would add nothing to a namespaced ``view`` binding and would widen every
cluster-wide one.
"""

from __future__ import annotations

from typing import Any

from vslice_control.install.namespaces import PART_OF
from vslice_control.install.values import InstallValues

CONTROL_PLANE_ACCOUNT = "vslice-control-plane"
"""The extender's and the webhook's account (and ClusterRole, and binding)."""
NODE_ACCOUNT = "vslice-node"
"""The node agent's and the monitor's account (and ClusterRole, and binding)."""
ACCOUNTS = (CONTROL_PLANE_ACCOUNT, NODE_ACCOUNT)
VIEWER_ROLE = "vslice-viewer"
RBAC_GROUP = "rbac.authorization.k8s.io"
RBAC_API = f"{RBAC_GROUP}/v1"
_READ = ["get", "list", "watch"]


def account_user(values: InstallValues, account: str) -> str:
    """The user name the API server gives a service account's requests."""
    return f"system:serviceaccount:{values.namespace}:{account}"


def token_secret_name(account: str) -> str:
    return f"{account}-token"


def objects(values: InstallValues) -> list[dict[str, Any]]:
    """Accounts and their tokens, the three ClusterRoles, then the bindings."""
    accounts = [obj for account in ACCOUNTS for obj in _account(values, account)]
    roles = [control_plane_role(values), node_role(), viewer_role()]
    return accounts + roles + [_binding(values, account) for account in ACCOUNTS]


def _account(values: InstallValues, account: str) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": account, "namespace": values.namespace, "labels": dict(PART_OF)},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/service-account-token",
            "metadata": {
                "name": token_secret_name(account),
                "namespace": values.namespace,
                "annotations": {"kubernetes.io/service-account.name": account},
                "labels": dict(PART_OF),
            },
        },
    ]


def _role(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": RBAC_API,
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": dict(PART_OF)},
        "rules": rules,
    }


def control_plane_role(values: InstallValues) -> dict[str, Any]:
    """The extender (filter, bind, node locks, the ledger from annotations) and the webhook
    (quotas, namespace labels, DRA claim templates)."""
    return _role(
        CONTROL_PLANE_ACCOUNT,
        [
            _rule([""], ["pods"], [*_READ, "patch", "update"]),
            # The extender posts its Binding to the namespace's bindings collection
            # (vslice_kube.binding); kube-scheduler posts to pods/binding. Both,
            # as the system:kube-scheduler role grants them.
            _rule([""], ["bindings", "pods/binding"], ["create"]),
            # Preemption evicts lower-priority slices through the Eviction API, which keeps
            # PodDisruptionBudgets (setting preemption; docs/preemption.md).
            _rule([""], ["pods/eviction"], ["create"]),
            _rule([""], ["nodes"], [*_READ, "patch", "update"]),
            _rule([""], ["namespaces", "resourcequotas"], _READ),
            # The webhook's DRA path: the ResourceClaimTemplate a GPU pod references (created
            # before the pod is admitted; read back when one of that name exists).
            _rule(["resource.k8s.io"], ["resourceclaimtemplates"], ["create", "get"]),
            # The webhook's quota on the DRA path: every allocated claim, and the cards' sizes.
            _rule(["resource.k8s.io"], ["resourceclaims", "resourceslices"], _READ),
            _rule(["", "events.k8s.io"], ["events"], ["create", "patch"]),
            # Leader election (scheduler setting leader_election): the one Lease the replicas
            # share, created once and then only read and renewed.
            _rule(["coordination.k8s.io"], ["leases"], ["create"]),
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": [values.lease_name],
                "verbs": ["get", "update"],
            },
        ],
    )


def node_role() -> dict[str, Any]:
    """The device plugin (node inventory, delivered allocations), the DRA driver and the
    monitor."""
    return _role(
        NODE_ACCOUNT,
        [
            _rule([""], ["pods"], [*_READ, "patch"]),
            _rule([""], ["nodes"], [*_READ, "patch"]),
            _rule(["", "events.k8s.io"], ["events"], ["create", "patch"]),
            # The monitor's idle reclaim (docs/idle.md): which namespaces opt in (their
            # labels), and the eviction of an idle pod on its own node, which keeps
            # PodDisruptionBudgets. RBAC cannot narrow either to one node's pods; the monitor
            # evicts only pods of its node (docs/security.md).
            _rule([""], ["namespaces"], ["list"]),
            _rule([""], ["pods/eviction"], ["create"]),
            # The DRA driver (node agent setting dra): the node's ResourceSlice, and the claims
            # the kubelet asks it to prepare (read for their allocation).
            _rule(["resource.k8s.io"], ["resourceslices"], [*_READ, "create", "update"]),
            _rule(["resource.k8s.io"], ["resourceclaims"], ["get"]),
        ],
    )


def viewer_role() -> dict[str, Any]:
    """Read nodes, pods and the DRA objects (slices, claims, templates, classes) in every
    namespace, nothing more (see the module docstring)."""
    return _role(
        VIEWER_ROLE,
        [
            _rule([""], ["nodes", "pods"], _READ),
            # The DRA path (docs/dra.md): the views read slices and claims as they read pods.
            _rule(
                ["resource.k8s.io"],
                ["resourceslices", "resourceclaims", "resourceclaimtemplates", "deviceclasses"],
                _READ,
            ),
            # A slice's priority_class is checked against the cluster's PriorityClasses, which
            # say nothing about any tenant.
            _rule(["scheduling.k8s.io"], ["priorityclasses"], _READ),
            # Queued jobs (docs/kueue.md): `vslice top` and the ClusterView show Kueue's
            # Workloads, the picker and `run(queue=...)` the namespace's LocalQueues. Granting
            # a group the cluster does not serve is allowed and gives nothing.
            _rule(["kueue.x-k8s.io"], ["workloads", "localqueues"], _READ),
        ],
    )


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> dict[str, Any]:
    return {"apiGroups": groups, "resources": resources, "verbs": list(verbs)}


def _binding(values: InstallValues, account: str) -> dict[str, Any]:
    return {
        "apiVersion": RBAC_API,
        "kind": "ClusterRoleBinding",
        "metadata": {"name": account, "labels": dict(PART_OF)},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": account},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": values.namespace}],
    }
