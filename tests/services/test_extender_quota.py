"""GPU quotas read from ResourceQuota objects, and what a pod asks for at its peak."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from vslice_control.quota.limits import QuotaBook, exceeded, limits_from_quotas, request_totals
from vslice_core.model import NamespaceQuota, QuotaLimits
from vslice_core.requests import pod_request
from vslice_core.resources import DEFAULT_RESOURCE_NAMES, ResourceNames

NAMES = DEFAULT_RESOURCE_NAMES


def quota(name: str, namespace: str = "team-a", **hard: str) -> dict[str, Any]:
    keys = {k.replace("__", "/").replace("_", "."): v for k, v in hard.items()}
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"hard": keys}}


def test_the_smallest_ceiling_of_all_quotas_and_prefixes_wins() -> None:
    quotas = [
        quota(
            "a", **{"requests_nvidia.com__gpumem": "40Gi", "requests_nvidia.com__gpucores": "300"}
        ),
        quota("b", **{"limits_nvidia.com__gpumem": "30000", "requests_nvidia.com__gpu": "4"}),
        quota("c", cpu="4"),
    ]
    assert limits_from_quotas(quotas, NAMES) == QuotaLimits(memory_mib=30000, cores=300, gpus=4)


def test_canonical_memory_values_are_mib_and_binary_units_are_bytes() -> None:
    assert limits_from_quotas([quota("a", **{"requests_nvidia.com__gpumem": "60k"})], NAMES) == (
        QuotaLimits(memory_mib=60000)
    )
    assert limits_from_quotas([quota("a", **{"requests_nvidia.com__gpumem": "2Gi"})], NAMES) == (
        QuotaLimits(memory_mib=2048)
    )


def test_a_namespace_without_gpu_keys_has_no_gpu_limit() -> None:
    assert limits_from_quotas([quota("a", pods="10")], NAMES) is None


def test_an_unreadable_value_is_logged_and_skipped(caplog: pytest.LogCaptureFixture) -> None:
    hard = {"requests_nvidia.com__gpumem": "lots", "requests_nvidia.com__gpucores": "100"}
    with caplog.at_level(logging.WARNING):
        limits = limits_from_quotas([quota("a", **hard)], NAMES)
    assert limits == QuotaLimits(cores=100)
    (record,) = caplog.records
    assert "lots" in record.error  # type: ignore[attr-defined]


def test_configured_resource_names_change_the_quota_keys() -> None:
    names = ResourceNames(memory="example.com/vram")
    found = limits_from_quotas([quota("a", **{"requests_example.com__vram": "100"})], names)
    assert found == QuotaLimits(memory_mib=100)


def test_a_pod_peaks_at_its_app_containers_or_its_largest_init_container() -> None:
    def container(name: str, **limits: str) -> dict[str, Any]:
        return {"name": name, "resources": {"limits": limits}}

    pod = {
        "metadata": {"name": "p", "namespace": "team-a"},
        "spec": {
            "initContainers": [container("prep", **{NAMES.gpu: "4", NAMES.memory: "10000"})],
            "containers": [
                container("a", **{NAMES.gpu: "2", NAMES.memory: "8000", NAMES.cores: "30"}),
                container("b", **{NAMES.gpu: "1", NAMES.memory: "1000", NAMES.cores: "10"}),
            ],
        },
    }
    totals = request_totals(pod_request(pod))
    assert (totals.memory_mib, totals.cores, totals.gpus) == (40000, 70, 4)
    assert exceeded(totals, QuotaLimits(memory_mib=39999, gpus=4)) == [("memory_mib", 40000, 39999)]


def test_the_quota_book_follows_watch_events_and_reports_changes() -> None:
    changes: list[tuple[str, NamespaceQuota | None]] = []
    book = QuotaBook(NAMES, lambda ns, q: changes.append((ns, q)))
    book.replace([quota("a", **{"requests_nvidia.com__gpucores": "100"})])
    book.apply("ADDED", quota("b", **{"requests_nvidia.com__gpucores": "50"}))
    assert book.limits("team-a") == QuotaLimits(cores=50)
    book.apply("DELETED", quota("b"))
    book.apply("DELETED", quota("a"))
    assert book.limits("team-a") is None
    assert [q.limits.cores if q else None for _, q in changes] == [100, 50, 100, None]
