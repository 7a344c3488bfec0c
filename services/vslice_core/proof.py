"""Proof that vslice's extender made an allocation, for this pod: ``vslice.io/allocation-proof``.

The extender signs what it writes in the Binding; the node side (device plugin, DRA driver)
verifies before it hands a slice to a container. Whoever can write pod annotations but does not
hold the key (a tenant with ``edit`` in a namespace) cannot make a valid proof, so a forged or
edited ``vslice.io/allocation`` is refused on the node even if it got past admission.

Format: ``v1:<key id>:<hex HMAC-SHA256>`` over ``v1\\n<pod uid>\\n<node>\\n<allocation text>``
(the annotation value exactly as written). Keys are named so they can be rotated: the signer
uses one key, verifiers accept any key they hold (old and new during a rotation). A key is at
least 32 bytes; a key file holds one ``<key id> <hex key>`` per line, ``#`` comments allowed.

Pure: no I/O here except :func:`load_keys`, which reads one file.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass

from vslice_core.errors import InvalidRequest

PROOF = "vslice.io/allocation-proof"
VERSION = "v1"
MIN_KEY_BYTES = 32
_KEY_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


@dataclass(frozen=True)
class Key:
    id: str
    secret: bytes


def _message(pod_uid: str, node: str, allocation_text: str) -> bytes:
    return "\n".join((VERSION, pod_uid, node, allocation_text)).encode()


def sign(key: Key, pod_uid: str, node: str, allocation_text: str) -> str:
    """The proof value for an allocation written for ``pod_uid`` on ``node``."""
    digest = hmac.new(key.secret, _message(pod_uid, node, allocation_text), hashlib.sha256)
    return f"{VERSION}:{key.id}:{digest.hexdigest()}"


def check(
    keys: Mapping[str, Key], proof: str | None, pod_uid: str, node: str, allocation_text: str
) -> str | None:
    """None when ``proof`` is valid for this allocation, pod and node; else why not (a short
    phrase for an event: "no proof", "unknown key 'k2'", "proof does not match")."""
    if not proof:
        return "no proof"
    parts = proof.split(":")
    if len(parts) != 3 or parts[0] != VERSION:
        return f"proof is not in the {VERSION} format"
    _, key_id, given = parts
    key = keys.get(key_id)
    if key is None:
        return f"unknown key {key_id!r}"
    expected = sign(key, pod_uid, node, allocation_text).rsplit(":", 1)[1]
    if not hmac.compare_digest(expected, given):
        return "proof does not match (allocation, pod or node changed after signing)"
    return None


def parse_keys(text: str, source: str) -> dict[str, Key]:
    """Keys from a key file's text; InvalidRequest names the file, line and problem."""
    keys: dict[str, Key] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        where = f"{source} line {number}"
        if len(fields) != 2 or not _KEY_ID.match(fields[0]):
            raise InvalidRequest(
                f"{where}: expected '<key id> <hex key>', got {line[:40]!r}",
                field="allocation_key_file",
                value=source,
            )
        try:
            secret = bytes.fromhex(fields[1])
        except ValueError:
            raise InvalidRequest(
                f"{where}: key {fields[0]!r} is not hex", field="allocation_key_file", value=source
            ) from None
        if len(secret) < MIN_KEY_BYTES:
            raise InvalidRequest(
                f"{where}: key {fields[0]!r} has {len(secret)} bytes, at least "
                f"{MIN_KEY_BYTES} are needed",
                field="allocation_key_file",
                value=source,
            )
        keys[fields[0]] = Key(fields[0], secret)
    if not keys:
        raise InvalidRequest(f"{source} holds no key", field="allocation_key_file", value=source)
    return keys


def signing_key(keys: Mapping[str, Key]) -> Key:
    """The key the signer uses: the last one in the file (append a new key to rotate; remove
    the old one once every node has the new file)."""
    return list(keys.values())[-1]
