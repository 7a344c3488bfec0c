"""The allocation proof: only the key holder can make one, and it binds allocation, pod, node."""

from __future__ import annotations

import pytest
from vslice_core import proof
from vslice_core.errors import InvalidRequest

KEYS = proof.parse_keys("# rotated in May\nold " + "11" * 32 + "\nnew " + "22" * 32 + "\n", "k")
ALLOCATION = '{"v":1,"node":"n1"}'


def test_a_proof_made_with_the_signing_key_checks_out() -> None:
    key = proof.signing_key(KEYS)
    assert key.id == "new"
    value = proof.sign(key, "uid-1", "n1", ALLOCATION)
    assert value.startswith("v1:new:")
    assert proof.check(KEYS, value, "uid-1", "n1", ALLOCATION) is None
    assert (
        proof.check(
            KEYS, proof.sign(KEYS["old"], "uid-1", "n1", ALLOCATION), "uid-1", "n1", ALLOCATION
        )
        is None
    )


@pytest.mark.parametrize(
    ("uid", "node", "text", "why"),
    [
        ("uid-2", "n1", ALLOCATION, "does not match"),
        ("uid-1", "n2", ALLOCATION, "does not match"),
        ("uid-1", "n1", ALLOCATION.replace("n1", "n9"), "does not match"),
    ],
)
def test_a_proof_does_not_carry_over_to_another_pod_node_or_allocation(
    uid: str, node: str, text: str, why: str
) -> None:
    value = proof.sign(proof.signing_key(KEYS), "uid-1", "n1", ALLOCATION)
    assert why in (proof.check(KEYS, value, uid, node, text) or "")


def test_missing_foreign_and_malformed_proofs_say_why() -> None:
    assert proof.check(KEYS, None, "u", "n", ALLOCATION) == "no proof"
    assert proof.check(KEYS, "v1:k9:00", "u", "n", ALLOCATION) == "unknown key 'k9'"
    assert "format" in (proof.check(KEYS, "forged", "u", "n", ALLOCATION) or "")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "holds no key"),
        ("k1 abcd", "at least 32"),
        ("k1 zz" + "00" * 32, "not hex"),
        ("only-one-field", "expected"),
    ],
)
def test_bad_key_files_name_the_line_and_the_problem(text: str, problem: str) -> None:
    with pytest.raises(InvalidRequest, match=problem):
        proof.parse_keys(text, "/etc/vslice/allocation.keys")
