"""Idle slices in the views: ``vslice top`` marks them, ``vslice top --idle`` lists them, the
allocations carry the times, and a malformed mark is a problem, not a crash (docs/idle.md)."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from api_objects import cluster_objects
from vslice import views
from vslice.commands import top
from vslice.snapshot import ClusterSnapshot
from vslice.tables import IdleMark
from vslice_core.annotations import IDLE_RECLAIM_AT, IDLE_SINCE, encode_moment

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def marked(pods: list[dict[str, Any]], name: str, since: str, due: str | None = None) -> None:
    pod = next(p for p in pods if p["metadata"]["name"] == name)
    notes = pod["metadata"]["annotations"]
    notes[IDLE_SINCE] = encode_moment(datetime.fromisoformat(since))
    if due:
        notes[IDLE_RECLAIM_AT] = encode_moment(datetime.fromisoformat(due))


@pytest.fixture
def cluster() -> ClusterSnapshot:
    nodes, pods = cluster_objects()
    marked(pods, "train", "2026-12-05T07:58:00Z", "2026-12-05T12:30:00Z")
    marked(pods, "small", "2026-12-05T11:40:00Z")
    marked(pods, "done", "2026-12-01T00:00:00Z")  # finished: holds nothing
    return ClusterSnapshot.read(nodes, pods)


def test_top_marks_the_idle_holders_of_a_gpu(cluster: ClusterSnapshot) -> None:
    row = cluster.gpus()[0]
    assert row.idle_pods == ("team-a/train",)
    assert views.gpu_cells(row)[-1] == "team-a/train (idle),team-b/infer"


def test_top_idle_lists_slices_idle_longer_than_the_duration(cluster: ClusterSnapshot) -> None:
    every = top.frame(cluster, None, False, idle=0.0, now=NOW)
    assert "team-a/train" in every and "team-b/small" in every and "done" not in every
    assert every.index("team-a/train") < every.index("team-b/small")  # longest idle first
    assert "4h02m" in every and "2026-12-05 12:30 UTC" in every
    assert "2 pods idle now hold 50.0 GiB of GPU memory" in every
    long = top.frame(cluster, None, False, idle=3600.0, now=NOW)
    assert "team-b/small" not in long
    assert "1 pod idle longer than 1h hold 40.0 GiB" in long
    assert top.frame(cluster, None, False, idle=86400.0, now=NOW) == (
        "No slice is idle longer than 1d."
    )
    only_b = json.loads(top.frame(cluster, ["node-b"], True, idle=0.0, now=NOW))
    assert only_b == [
        {
            "pod": "team-b/small",
            "node": "node-b",
            "gpus": "0",
            "memory_mib": 10240,
            "idle_seconds": 1200,
            "reclaim_at": None,
        }
    ]


def test_the_idle_option_reads_a_duration_or_nothing() -> None:
    parser = argparse.ArgumentParser()
    top.add_arguments(parser)
    assert parser.parse_args(["--idle"]).idle == 0.0
    assert parser.parse_args(["--idle", "2h"]).idle == 7200.0
    assert parser.parse_args([]).idle is None
    with pytest.raises(SystemExit):
        parser.parse_args(["--idle", "2hours"])


def test_a_bad_idle_duration_names_the_option_and_the_value(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = argparse.ArgumentParser()
    top.add_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--idle", "2hours"])
    err = capsys.readouterr().err
    assert "--idle" in err and "'2hours' is not a duration" in err


def test_allocations_carry_the_idle_times_and_their_json_holds_them(
    cluster: ClusterSnapshot,
) -> None:
    rows = {row.pod: row for row in cluster.allocations()}
    assert rows["train"].idle_since == datetime(2026, 12, 5, 7, 58, tzinfo=UTC)
    assert rows["train"].reclaim_at == datetime(2026, 12, 5, 12, 30, tzinfo=UTC)
    assert rows["infer"].idle_since is None
    record = next(r for r in cluster.allocations().records() if r["pod"] == "train")
    assert json.loads(json.dumps(record))["idle_since"] == "2026-12-05T07:58:00Z"


def test_a_malformed_idle_mark_is_a_problem_not_a_crash() -> None:
    nodes, pods = cluster_objects()
    pods[0]["metadata"]["annotations"][IDLE_SINCE] = "yesterday"
    snapshot = ClusterSnapshot.read(nodes, pods)
    assert snapshot.idle == {}
    assert any("team-a/train" in p and IDLE_SINCE in p for p in snapshot.problems)


def test_idle_words_say_how_long_and_when_it_is_given_back() -> None:
    since = datetime(2026, 12, 5, 11, 25, tzinfo=UTC)
    assert views.idle_words(IdleMark(since), NOW) == "idle 35m"
    due = datetime(2026, 12, 5, 12, 30, tzinfo=UTC)
    assert views.idle_words(IdleMark(since, due), NOW) == (
        "idle 35m, evicted at 2026-12-05 12:30 UTC unless it launches a kernel"
    )
