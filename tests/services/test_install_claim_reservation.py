"""The policy that keeps a vslice ResourceClaim to one pod (``install/claimreservation.py``), as
every consumer renders it: its shape, its CEL, and its place among the install objects.

The API server's own evaluation of the expressions is checked on the lab
(tests/e2e/test_dra_claim_sharing.py): a second pod reserving the claim stays pending with the
message below.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import yaml
from vslice_control.install import claimreservation
from vslice_control.install.manifests import API_PARTS, objects
from vslice_control.install.values import parse_values
from vslice_core.dra import DRIVER

VALUES = {"webhook": {"url": "https://192.0.2.10:8443/mutate"}}
PART = "claim-reservation-policy"


def rendered() -> list[dict[str, Any]]:
    return objects(parse_values(VALUES), [PART])


def test_the_policy_checks_every_status_write_of_a_claim_and_fails_closed() -> None:
    policy, binding = rendered()
    assert policy["kind"] == "ValidatingAdmissionPolicy"
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    constraints = spec["matchConstraints"]
    assert constraints["matchPolicy"] == "Equivalent"
    assert constraints["resourceRules"] == [
        {
            "apiGroups": ["resource.k8s.io"],
            "apiVersions": ["v1"],
            "operations": ["UPDATE"],
            "resources": ["resourceclaims/status"],
        }
    ]
    # Nobody is exempt and no namespace is left out: kube-scheduler is who reserves.
    assert "matchConditions" not in spec and "namespaceSelector" not in constraints
    assert binding["kind"] == "ValidatingAdmissionPolicyBinding"
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }


def test_the_expressions_refuse_a_longer_reservation_of_a_claim_allocated_vslice_devices() -> None:
    (policy, _binding) = rendered()
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert f"r.driver == '{DRIVER}'" in variables["vslice"]
    for field in ("object.status", "object.status.allocation", "object.status.reservedFor"):
        assert f"has({field})" in " ".join(variables.values()), field
    assert "oldObject != null" in variables["before"]
    (validation,) = policy["spec"]["validations"]
    expression = validation["expression"]
    assert expression.startswith("!variables.vslice || variables.reserved <= variables.before")
    assert "c.resource == 'pods'" in expression  # a PodGroup reservation stands for many pods
    for text in (*variables.values(), expression):
        assert text.count("(") == text.count(")")


def test_the_message_names_the_claim_and_says_a_template_gives_each_pod_its_own() -> None:
    (policy, _binding) = rendered()
    (validation,) = policy["spec"]["validations"]
    message = validation["messageExpression"]
    assert "object.metadata.namespace + '/' + object.metadata.name" in message
    assert "serves one pod only" in message
    assert "ResourceClaimTemplate" in message and "resourceClaimTemplateName" in message


def test_every_consumer_gets_the_policy_after_the_state_policy_and_before_the_webhooks() -> None:
    assert PART in API_PARTS
    assert API_PARTS.index("state-policy") < API_PARTS.index(PART) < API_PARTS.index("webhook")
    names = [o["metadata"]["name"] for o in objects(parse_values(VALUES))]
    assert names.count(claimreservation.POLICY_NAME) == 2


def test_vslice_manifests_prints_the_part() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "vslice.cli", "manifests", "--values", "-", "--part", PART],
        input=json.dumps(VALUES),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert list(yaml.safe_load_all(result.stdout)) == rendered()
