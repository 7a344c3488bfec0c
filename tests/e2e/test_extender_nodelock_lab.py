"""The node lock against the lab's API server, on a Node object of the test's own."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import LabHandle
from vslice_core.annotations import NODE_LOCK, NodeLock, decode_node_lock, encode_node_lock
from vslice_kube.nodelock import LockBusy, NodeLocker

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def node(lab: LabHandle) -> Iterator[str]:
    name = f"e2e-lock-{uuid.uuid4().hex[:6]}"
    lab.core.create_node({"metadata": {"name": name}}, _preload_content=False)
    yield name
    lab.core.delete_node(name, _preload_content=False)


def _lock_value(lab: LabHandle, node: str) -> str | None:
    body: Any = json.loads(lab.core.read_node(node, _preload_content=False).data)
    value: str | None = (body["metadata"].get("annotations") or {}).get(NODE_LOCK)
    return value


def _set_lock(lab: LabHandle, node: str, value: str) -> None:
    patch = {"metadata": {"annotations": {NODE_LOCK: value}}}
    lab.core.patch_node(node, patch, _preload_content=False)


def _other(expires_in: float) -> str:
    expires = datetime.now(UTC) + timedelta(seconds=expires_in)
    return encode_node_lock(NodeLock(holder="other-replica", expires=expires))


def test_a_lock_held_by_another_replica_is_waited_for_then_refused(
    lab: LabHandle, node: str
) -> None:
    _set_lock(lab, node, _other(10))  # within the TTL (15 s): a lock a replica could hold
    locker = NodeLocker(lab.core, "me", wait_seconds=0.3)
    with pytest.raises(LockBusy, match="locked by other-replica"):
        locker.acquire(node)
    assert decode_node_lock(_lock_value(lab, node) or "").holder == "other-replica"


def test_a_lock_expiring_beyond_the_ttl_does_not_stop_binds(lab: LabHandle, node: str) -> None:
    """A lock "until 2100" (a mistake, or a compromised service with node write access)."""
    _set_lock(
        lab, node, _other((datetime(2100, 1, 1, tzinfo=UTC) - datetime.now(UTC)).total_seconds())
    )
    locker = NodeLocker(lab.core, "me", ttl_seconds=15, wait_seconds=0.3)
    held = locker.acquire(node)
    assert decode_node_lock(_lock_value(lab, node) or "").holder == "me"
    locker.release(held)


def test_an_expired_or_malformed_lock_is_taken_over(lab: LabHandle, node: str) -> None:
    locker = NodeLocker(lab.core, "me")
    for leftover in (_other(-1), "{not a lock"):
        _set_lock(lab, node, leftover)
        held = locker.acquire(node)
        assert held.others_since  # someone else held it: the node's pods must be re-read
        assert decode_node_lock(_lock_value(lab, node) or "").holder == "me"
        locker.release(held)


def test_the_same_replica_takes_its_released_lock_back_in_one_step(
    lab: LabHandle, node: str
) -> None:
    locker = NodeLocker(lab.core, "me")
    locker.release(locker.acquire(node))
    released = decode_node_lock(_lock_value(lab, node) or "")
    assert released.holder == "me" and released.expired(datetime.now(UTC))
    again = locker.acquire(node)
    assert not again.others_since  # nobody else held it since: no re-read needed
    locker.release(again)


def test_a_lock_taken_over_after_expiry_is_not_released_by_its_old_holder(
    lab: LabHandle, node: str
) -> None:
    slow = NodeLocker(lab.core, "slow", ttl_seconds=0.5)
    held = slow.acquire(node)
    _set_lock(lab, node, _other(60))  # the TTL passed and another replica took it
    slow.release(held)
    assert decode_node_lock(_lock_value(lab, node) or "").holder == "other-replica"


def test_two_lockers_never_hold_a_node_at_once(lab: LabHandle, node: str) -> None:
    first, second = NodeLocker(lab.core, "a"), NodeLocker(lab.core, "b", wait_seconds=0.3)
    held = first.acquire(node)
    with pytest.raises(LockBusy):
        second.acquire(node)
    first.release(held)
    taken = second.acquire(node)
    assert taken.others_since
    second.release(taken)
