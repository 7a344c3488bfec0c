"""Fixtures of the SDK's pure tests (the objects come from ``api_objects``)."""

from __future__ import annotations

import pytest
from api_objects import cluster_objects
from vslice.snapshot import ClusterSnapshot


@pytest.fixture
def snapshot() -> ClusterSnapshot:
    nodes, pods = cluster_objects()
    return ClusterSnapshot.read(nodes, pods)
