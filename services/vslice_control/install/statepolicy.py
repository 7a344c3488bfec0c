"""The ValidatingAdmissionPolicy that keeps vslice's pod state annotations vslice's own.

The webhook removes the state annotations (``vslice_core.annotations.POD_STATE``) when a pod
is created; this policy (``admissionregistration.k8s.io/v1``, CEL evaluated by the API server
itself) refuses every later change to them (add, edit, remove) by anyone but vslice's
identities, and also a pod created with them where the webhook did not run (a namespace an
operator opted out). It matches ``pods`` (kubectl edit/annotate/patch), ``pods/status``,
``pods/binding`` and ``bindings`` (a Binding may be posted to either): the extender writes
the allocation in a Binding, whose annotations the API server copies onto the pod, and the
device plugin writes ``vslice.io/delivered`` with a PATCH, so both run under an exempt
identity: vslice's service accounts, and the groups ``state_writer_groups`` names (the lab's
services). The namespaces the webhook leaves out by name are left out here too: only
administrators create pods there.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from vslice_core.annotations import POD_STATE

from vslice_control.install import rbac
from vslice_control.install.namespaces import PART_OF, excluded_namespaces
from vslice_control.install.values import InstallValues

POLICY_NAME = "vslice-state-annotations"
ADMISSION_API = "admissionregistration.k8s.io/v1"


def cel_list(items: Sequence[str]) -> str:
    return json.dumps(list(items)).replace('"', "'")


def exempt_condition(users: Sequence[str], groups: Sequence[str]) -> str:
    """CEL that is true for a request made by anyone but vslice's identities."""
    return (
        f"!(request.userInfo.username in {cel_list(users)}) && "
        f"!request.userInfo.groups.exists(g, g in {cel_list(groups)})"
    )


def objects(values: InstallValues) -> list[dict[str, Any]]:
    """The policy, then its binding (a binding to a missing policy is ignored until the
    policy exists)."""
    users = [rbac.account_user(values, account) for account in rbac.ACCOUNTS]
    return [
        policy(users, values.state_writer_groups, excluded_namespaces(values)),
        binding(),
    ]


def policy(users: Sequence[str], groups: Sequence[str], excluded: Sequence[str]) -> dict[str, Any]:
    """Requests by ``users`` or members of ``groups`` pass, and so does everything in the
    ``excluded`` namespaces."""
    return admission_policy(
        POLICY_NAME,
        {
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["pods", "pods/status", "pods/binding", "bindings"],
                    }
                ],
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": list(excluded),
                        }
                    ]
                },
            },
            "matchConditions": [
                {"name": "not-vslice", "expression": exempt_condition(users, groups)}
            ],
            "variables": [
                {"name": "keys", "expression": cel_list(POD_STATE)},
                {
                    "name": "new",
                    "expression": "has(object.metadata.annotations) ? "
                    "object.metadata.annotations : {}",
                },
                {
                    "name": "old",
                    "expression": "oldObject != null && has(oldObject.metadata.annotations) ? "
                    "oldObject.metadata.annotations : {}",
                },
                {
                    "name": "changed",
                    "expression": "variables.keys.filter(k, (k in variables.new) != "
                    "(k in variables.old) || (k in variables.new && "
                    "variables.new[k] != variables.old[k]))",
                },
            ],
            "validations": [
                {
                    "expression": "size(variables.changed) == 0",
                    "reason": "Forbidden",
                    "messageExpression": "'annotation ' + variables.changed.join(', ') + "
                    "' is written by vslice only (its scheduler extender and device "
                    "plugins): leave it as it is; to change a slice, delete the pod and "
                    "create it again'",
                }
            ],
        },
    )


def admission_policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A ValidatingAdmissionPolicy of vslice's (``failurePolicy: Fail`` unless ``spec`` says
    otherwise): every vslice policy is made here and bound by :func:`binding`."""
    return {
        "apiVersion": ADMISSION_API,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": dict(PART_OF)},
        "spec": {"failurePolicy": "Fail", **spec},
    }


def binding(name: str = POLICY_NAME) -> dict[str, Any]:
    """The binding that makes the policy ``name`` refuse (every vslice policy is bound so)."""
    return {
        "apiVersion": ADMISSION_API,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": dict(PART_OF)},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
