"""The idle rules: durations, a namespace's opt-in, and the step for a pod at each check."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from vslice_core.errors import InvalidRequest
from vslice_core.idle import (
    GRACE_LABEL,
    KEEP_LABEL,
    RECLAIM_LABEL,
    PodIdleness,
    ReclaimPolicy,
    Step,
    format_duration,
    gib_hours,
    keep_requested,
    namespace_policy,
    next_step,
    parse_duration,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("30m", 1800),
        ("4h", 14400),
        ("1h30m", 5400),
        ("2d", 172800),
        ("1d2h3m4s", 93784),
    ],
)
def test_durations_are_written_as_kubernetes_writes_them(text: str, seconds: int) -> None:
    assert parse_duration(text, field="f") == seconds


@pytest.mark.parametrize("text", ["", "4", "4hours", "30m1h", "1h1h", "-5m", "1.5h", "h", "4 h x"])
def test_a_bad_duration_names_the_field_and_the_value(text: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_duration(text, field="namespace 'a' label vslice.io/idle-reclaim")
    assert "vslice.io/idle-reclaim" in str(caught.value)
    assert repr(text) in str(caught.value)
    assert "90s, 30m, 4h" in str(caught.value)


def test_a_zero_duration_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="'0m' is zero"):
        parse_duration("0m", field="grace")


@given(st.integers(min_value=1, max_value=10**7))
def test_a_formatted_duration_reads_back_within_its_rounding(seconds: int) -> None:
    text = format_duration(seconds)
    back = parse_duration(text, field="f")
    assert 0 <= seconds - back < max(60, seconds * 0.05)


def test_a_namespace_without_the_label_does_not_opt_in() -> None:
    assert namespace_policy("a", {"team": "x"}, 1800) is None


def test_a_namespace_policy_reads_its_three_labels() -> None:
    labels = {RECLAIM_LABEL: "4h", GRACE_LABEL: "15m", KEEP_LABEL: "forbid"}
    assert namespace_policy("a", labels, 1800) == ReclaimPolicy(14400, 900, keep_allowed=False)
    assert namespace_policy("a", {RECLAIM_LABEL: "1h"}, 1800) == ReclaimPolicy(3600, 1800)


@pytest.mark.parametrize(
    ("labels", "named"),
    [
        ({RECLAIM_LABEL: "4hours"}, RECLAIM_LABEL),
        ({RECLAIM_LABEL: "4h", GRACE_LABEL: "soon"}, GRACE_LABEL),
        ({RECLAIM_LABEL: "4h", KEEP_LABEL: "never"}, KEEP_LABEL),
    ],
)
def test_a_bad_label_names_the_namespace_the_label_and_the_value(
    labels: dict[str, str], named: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        namespace_policy("team-a", labels, 1800)
    assert "'team-a'" in str(caught.value) and named in str(caught.value)
    assert repr(labels[named]) in str(caught.value)


def test_the_keep_annotation_is_true_or_false() -> None:
    assert keep_requested("a", "p", {"vslice.io/idle-keep": "true"})
    assert not keep_requested("a", "p", {"vslice.io/idle-keep": "false"})
    assert not keep_requested("a", "p", {})
    with pytest.raises(InvalidRequest, match=r"pod a/p annotation vslice\.io/idle-keep: 'yes'"):
        keep_requested("a", "p", {"vslice.io/idle-keep": "yes"})


POLICY = ReclaimPolicy(after_s=100, grace_s=50)


@pytest.mark.parametrize(
    ("idle", "warned_for", "keep", "policy", "step"),
    [
        (99, None, False, POLICY, Step.NOTHING),
        (100, None, False, POLICY, Step.WARN),
        (140, 40, False, POLICY, Step.NOTHING),
        (150, 50, False, POLICY, Step.EVICT),
        (10, 30, False, POLICY, Step.CLEAR),  # launched a kernel after the warning
        (500, None, True, POLICY, Step.NOTHING),
        (500, 60, True, POLICY, Step.CLEAR),  # kept after the warning
        (500, None, True, ReclaimPolicy(100, 50, keep_allowed=False), Step.WARN),
        (500, None, False, None, Step.NOTHING),  # the namespace did not opt in
        (500, 60, False, None, Step.CLEAR),  # it opted out again
    ],
)
def test_the_step_for_a_pod(
    idle: float, warned_for: float | None, keep: bool, policy: ReclaimPolicy | None, step: Step
) -> None:
    assert next_step(PodIdleness(idle, warned_for, keep), policy) is step


@given(
    st.floats(0, 1e6),
    st.none() | st.floats(0, 1e6),
    st.booleans(),
    st.none() | st.builds(ReclaimPolicy, st.floats(1, 1e5), st.floats(1, 1e5), st.booleans()),
)
def test_only_a_warned_pod_idle_past_policy_and_grace_is_ever_evicted(
    idle: float, warned_for: float | None, keep: bool, policy: ReclaimPolicy | None
) -> None:
    step = next_step(PodIdleness(idle, warned_for, keep), policy)
    if step is Step.EVICT:
        assert policy is not None and warned_for is not None
        assert idle >= policy.after_s and warned_for >= policy.grace_s
        assert not (keep and policy.keep_allowed)
    if policy is None:
        assert step in (Step.NOTHING, Step.CLEAR)


def test_gib_hours() -> None:
    assert gib_hours(2 * 2**30, 1800) == 1.0
    assert gib_hours(2**30, -1) == 0.0
