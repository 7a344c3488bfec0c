"""The webhook that holds kube-scheduler's allocation of a vslice claim to the namespace's quota
(the second webhook of ``install/admission.py``'s claims configuration), as every consumer
renders it: its rule, its condition, and the permissions its watches need.

The API server's own evaluation of the condition is checked on the lab
(tests/e2e/test_dra_quota.py): of ten claims at once only those within the quota are
allocated.
"""

from __future__ import annotations

from vslice_control.install import rbac
from vslice_control.install.manifests import objects
from vslice_control.install.values import parse_values
from vslice_control.webhook import reach
from vslice_core.dra import DRIVER

VALUES = parse_values({"webhook": {"url": "https://192.0.2.10:8443/mutate", "ca_bundle": "Q0E="}})


def test_the_claims_configuration_sends_status_writes_that_allocate_to_the_same_webhook() -> None:
    (configuration,) = objects(VALUES, ["claims-webhook"])
    claims, allocations = configuration["webhooks"]
    assert allocations["name"] == "gpu-claim-allocations.vslice.io"
    assert allocations["rules"] == [
        {
            "operations": ["UPDATE"],
            "apiGroups": ["resource.k8s.io"],
            "apiVersions": ["v1"],
            "resources": ["resourceclaims/status"],
            "scope": "Namespaced",
        }
    ]
    for key in ("clientConfig", "namespaceSelector", "matchPolicy", "timeoutSeconds"):
        assert allocations[key] == claims[key], key
    assert allocations["failurePolicy"] == "Fail"  # nothing is allocated unchecked
    assert allocations["sideEffects"] == "None"


def test_only_writes_that_newly_allocate_a_vslice_device_reach_it() -> None:
    (configuration,) = objects(VALUES, ["claims-webhook"])
    (condition,) = configuration["webhooks"][1]["matchConditions"]
    assert condition == {
        "name": "newly-allocates-vslice-devices",
        "expression": reach.ALLOCATION_EXPRESSION,
    }
    expression = condition["expression"]
    assert "!has(oldObject.status.allocation)" in expression
    assert f"r.driver == '{DRIVER}'" in expression
    for guarded in (
        "object.status",
        "object.status.allocation",
        "object.status.allocation.devices",
    ):
        assert f"has({guarded})" in expression
    assert expression.count("(") == expression.count(")")


def test_the_webhooks_account_may_list_and_watch_claims_and_slices() -> None:
    role = rbac.control_plane_role(VALUES)
    assert {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaims", "resourceslices"],
        "verbs": ["get", "list", "watch"],
    } in role["rules"]
