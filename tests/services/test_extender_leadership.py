"""The leader gate and the leader-election settings, without a cluster.

What the Lease itself does against the API server is in tests/e2e/test_extender_lease_lab.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from vslice_control.extender.leadership import LeaderGate, NotActive
from vslice_core.errors import InvalidRequest
from vslice_kube.lease import LeaseTiming
from vslice_serving.settings import SchedulerSettings, load_settings


class Lease:
    def __init__(self) -> None:
        self.holding = True
        self.term = 1

    def active(self) -> bool:
        return self.holding


def _gate(lease: Lease, calls: list[int]) -> LeaderGate:
    return LeaderGate(lease, lambda: calls.append(lease.term), "replica-a")


def _bind(gate: LeaderGate) -> None:
    with gate.entered("node-a", lambda: pytest.fail("per-node catch-up under a lease")):
        pass


def test_the_first_bind_of_each_term_catches_up_on_every_pod_once() -> None:
    lease, calls = Lease(), []
    gate = _gate(lease, calls)
    _bind(gate)
    _bind(gate)
    assert calls == [1]
    lease.term = 2  # lost and won again: the other holder may have bound meanwhile
    _bind(gate)
    _bind(gate)
    assert calls == [1, 2]


def test_a_standby_refuses_to_bind_and_says_who_it_is() -> None:
    lease, calls = Lease(), []
    lease.holding = False
    with pytest.raises(NotActive, match="replica replica-a is not the active extender"):
        _bind(_gate(lease, calls))
    assert calls == []


def test_a_term_that_changes_during_the_catch_up_is_refused() -> None:
    lease = Lease()

    def catch_up() -> None:
        lease.term += 1

    gate = LeaderGate(lease, catch_up, "replica-a")
    with pytest.raises(NotActive, match="changed terms while catching up"):
        _bind(gate)


def test_leader_election_is_off_by_default() -> None:
    settings = SchedulerSettings()
    assert not settings.leader_election
    assert (settings.lease_namespace, settings.lease_name) == ("kube-system", "vslice-scheduler")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lease_seconds: 8\n", "lease_seconds"),
        (
            "lease_seconds: 10\nlease_renew_seconds: 4\n",
            "lease_renew_seconds must be below lease_seconds - 6 (the holder stops binding that "
            "early), got lease_renew_seconds=4 with lease_seconds=10",
        ),
    ],
)
def test_lease_timings_that_cannot_be_safe_are_refused(
    tmp_path: Path, text: str, message: str
) -> None:
    config = tmp_path / "s.yaml"
    config.write_text(text)
    with pytest.raises(InvalidRequest, match=re.escape(message)):
        load_settings(SchedulerSettings, config)


def test_lease_timing_checks_its_own_arithmetic() -> None:
    with pytest.raises(ValueError, match="renew_seconds < lease_seconds - margin_seconds"):
        LeaseTiming(lease_seconds=5, renew_seconds=2, margin_seconds=4)


def test_winning_the_lease_catches_up_before_the_first_bind_asks() -> None:
    lease, calls = Lease(), []
    gate = _gate(lease, calls)
    gate.prepare()
    assert calls == [1]
    _bind(gate)  # the term is caught up already: the bind does not wait for a re-read
    assert calls == [1]
    lease.holding = False
    lease.term = 2
    gate.prepare()  # not active (any more): nothing to catch up for
    assert calls == [1]
