"""One quota for both paths (docs/dra.md, "Quotas"): the claims' allocation check counts the
namespace's extender-path pods (``vslice_control.quota.pods``), and the extender's bind counts
the namespace's allocated DRA claims (``vslice_control.quota.limits.QuotaTotals``). Before,
each path counted only its own against the whole quota, so together they reached twice it."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from test_claim_quota import QUOTA, allocation, cards, slice_of
from vslice_control.quota.claims import ClaimLedger
from vslice_control.quota.limits import QuotaTotals
from vslice_control.quota.pods import PodUsage
from vslice_control.webhook import claimquota
from vslice_core.annotations import ALLOCATION, encode_allocation
from vslice_core.errors import NoFit
from vslice_core.ledger import Ledger
from vslice_core.model import (
    Allocation,
    ContainerAllocation,
    Gpu,
    GpuGrant,
    NamespaceQuota,
    NodeInventory,
    QuotaUsage,
)
from vslice_core.requests import pod_request


def extender_pod(
    name: str,
    mib: int,
    *,
    namespace: str = "team-a",
    node: str = "node-1",
    phase: str = "Running",
    value: str | None = None,
) -> dict[str, Any]:
    """A pod the extender placed: its allocation annotation, bound to ``node``."""
    grant = GpuGrant(uuid="GPU-a", index=0, memory_mib=mib, cores=20)
    allocation = Allocation(
        node=node or "node-1", containers=[ContainerAllocation(name="main", gpus=[grant])]
    )
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "annotations": {
                ALLOCATION: value if value is not None else encode_allocation(allocation)
            },
        },
        "spec": {"nodeName": node},
        "status": {"phase": phase},
    }


def listed(*pods: dict[str, Any]) -> PodUsage:
    usage = PodUsage()
    usage.replace(list(pods))
    return usage


# What the webhook counts of the extender's pods


def test_a_bound_pods_allocation_counts_in_its_namespace_until_it_ends() -> None:
    usage = listed(
        extender_pod("a", 1024),
        extender_pod("b", 2048),
        extender_pod("pending", 4096, node=""),
        extender_pod("done", 4096, phase="Succeeded"),
        extender_pod("elsewhere", 512, namespace="team-b"),
    )
    assert usage.used("team-a") == QuotaUsage(memory_mib=3072, cores=40, gpus=2)
    assert usage.used("team-b").memory_mib == 512
    usage.apply("MODIFIED", extender_pod("a", 1024, phase="Failed"))
    usage.apply("DELETED", extender_pod("b", 2048))
    assert usage.used("team-a") == QuotaUsage()


def test_a_bound_pod_whose_annotation_is_removed_or_unreadable_keeps_its_count() -> None:
    usage = listed(extender_pod("a", 1024))
    bare = extender_pod("a", 1024)
    del bare["metadata"]["annotations"]
    usage.apply("MODIFIED", bare)
    assert usage.used("team-a").memory_mib == 1024
    usage.apply("MODIFIED", extender_pod("a", 1024, value="{not json"))
    assert usage.used("team-a").memory_mib == 1024
    usage.apply("MODIFIED", extender_pod("a", 1024, value="{not json", phase="Succeeded"))
    assert usage.used("team-a").memory_mib == 0


def test_a_claim_is_counted_with_the_namespaces_extender_pods() -> None:
    book = ClaimLedger(cards=cards(), others=listed(extender_pod("notebook", 2048)))
    book.replace([slice_of(512, "a")])
    assert claimquota.review_allocation(allocation(slice_of(512, "b")), book, QUOTA).allowed
    refused = claimquota.review_allocation(allocation(slice_of(1024, "c")), book, QUOTA)
    assert not refused.allowed and refused.code == 403
    assert refused.message == (
        "ResourceClaim team-a/c: status.allocation.devices.results gives it 1024 MiB of GPU "
        "memory, and the other claims of namespace 'team-a' already hold 1024 and its pods on "
        "the extender path 2048: 4096 in all, more than its quota allows (ResourceQuota "
        "requests.nvidia.com/gpumem = 3072); 0 fits now, more once the namespace's other claims "
        "or pods are released (their pods end)"
    )


def test_until_the_pods_are_listed_allocations_in_a_namespace_with_a_quota_wait() -> None:
    book = ClaimLedger(cards=cards(), others=PodUsage())
    book.replace([])
    refused = claimquota.review_allocation(allocation(slice_of(512, "a")), book, QUOTA)
    assert refused.code == 503 and "ResourceClaims and pods" in refused.message


def test_of_ten_claims_at_once_beside_a_1024_mib_pod_two_fit_a_3072_mib_quota() -> None:
    book = ClaimLedger(cards=cards(), others=listed(extender_pod("notebook", 1024)))
    book.replace([])
    start = threading.Barrier(10)

    def allocate(index: int) -> bool:
        request = allocation(slice_of(1024, f"c{index}"))
        start.wait()
        return claimquota.review_allocation(request, book, QUOTA).allowed

    with ThreadPoolExecutor(10) as pool:
        assert sum(pool.map(allocate, range(10))) == 2


# What the extender counts of the claims


def node_ledger() -> tuple[Ledger, QuotaTotals, ClaimLedger]:
    ledger = Ledger()
    gpu = Gpu(uuid="GPU-a", model="NVIDIA-A10G", memory_mib=23034, slots=8, index=0)
    ledger.set_node(NodeInventory(name="node-1", gpus=[gpu]))
    totals = QuotaTotals(ledger.set_quota)
    claims = ClaimLedger(cards=cards(), on_change=totals.claims_changed)
    totals.limits_changed("team-a", NamespaceQuota(limits=QUOTA))
    return ledger, totals, claims


def gpu_pod(name: str, mib: int) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mib)}
    return {
        "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }


def test_the_extenders_bind_counts_the_namespaces_allocated_claims() -> None:
    ledger, _, claims = node_ledger()
    claims.replace([slice_of(2048, "a")])
    assert ledger.quotas()["team-a"].used.memory_mib == 2048
    with pytest.raises(NoFit) as refused:
        ledger.reserve(pod_request(gpu_pod("big", 2048)), "node-1")
    assert refused.value.reasons == {"node-1": {"quota_exceeded": 1}}
    ledger.reserve(pod_request(gpu_pod("small", 1024)), "node-1")
    assert ledger.quotas()["team-a"].used.memory_mib == 3072


def test_a_released_claim_gives_the_extender_its_room_back() -> None:
    ledger, _, claims = node_ledger()
    claims.replace([slice_of(2048, "a")])
    claims.apply("DELETED", slice_of(2048, "a"))
    assert ledger.quotas()["team-a"].used.memory_mib == 0
    ledger.reserve(pod_request(gpu_pod("big", 3072)), "node-1")


def test_claims_in_a_namespace_without_a_quota_count_once_it_gets_one() -> None:
    ledger, totals, claims = node_ledger()
    claims.replace([slice_of(1024, "x", namespace="team-b")])
    assert "team-b" not in ledger.quotas()
    totals.limits_changed("team-b", NamespaceQuota(limits=QUOTA))
    assert ledger.quotas()["team-b"].used.memory_mib == 1024
    totals.limits_changed("team-b", None)
    assert "team-b" not in ledger.quotas()
