"""The namespace quota over allocated DRA claims (``vslice_control.quota.claims``,
``vslice_control.webhook.claimquota``): what a claim counts, the ledger the watches keep, and
the one check-and-record step the webhook runs for each allocation kube-scheduler writes."""

from __future__ import annotations

import copy
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from vslice_control.quota.claims import Cards, ClaimLedger, claim_charge
from vslice_control.webhook import claimquota
from vslice_control.webhook.review import ClaimAdmission
from vslice_core.dra import DEVICE_CLASS, DRIVER
from vslice_core.dra.devices import resource_slice
from vslice_core.model import Gpu, NodeInventory, QuotaLimits, QuotaUsage

CARD_MIB = 23034
QUOTA = QuotaLimits(memory_mib=3072)


def cards() -> Cards:
    found = Cards()
    gpu = Gpu(uuid="GPU-a", model="NVIDIA-A10G", memory_mib=CARD_MIB, slots=8, index=0)
    found.replace([resource_slice(NodeInventory(name="node-1", gpus=[gpu]), 1)])
    return found


def claim(
    name: str,
    *,
    namespace: str = "team-a",
    version: str = "10",
    consumed: dict[str, str] | None = None,
    allocated: bool = True,
    device: str = "gpu-0",
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "resourceVersion": version,
        },
        "spec": {
            "devices": {
                "requests": [{"name": "main", "exactly": {"deviceClassName": DEVICE_CLASS}}]
            }
        },
        "status": {},
    }
    if allocated:
        result: dict[str, Any] = {
            "request": "main",
            "driver": DRIVER,
            "pool": "node-1",
            "device": device,
        }
        if consumed is not None:
            result["consumedCapacity"] = consumed
        body["status"] = {"allocation": {"devices": {"results": [result]}}}
    return body


def slice_of(mib: int, name: str, **fields: Any) -> dict[str, Any]:
    return claim(name, consumed={"memory": f"{mib}Mi", "cores": "0", "slots": "1"}, **fields)


def allocation(new: dict[str, Any]) -> ClaimAdmission:
    """kube-scheduler's UPDATE of resourceclaims/status that allocates ``new``."""
    old = copy.deepcopy(new)
    old["status"] = {}
    metadata = new["metadata"]
    return ClaimAdmission(
        uid=f"review-{metadata['name']}",
        operation="UPDATE",
        namespace=metadata["namespace"],
        name=metadata["name"],
        kind="ResourceClaim",
        claim=new,
        old_claim=old,
    )


def ledger(*allocated: dict[str, Any], clock: list[float] | None = None) -> ClaimLedger:
    now = clock if clock is not None else [0.0]
    book = ClaimLedger(cards=cards(), hold_s=60.0, clock=lambda: now[0])
    book.replace(list(allocated))
    return book


# What a claim counts


def test_an_allocation_counts_its_consumed_memory_and_cores_and_one_slice_per_device() -> None:
    charged = claim_charge(claim("a", consumed={"memory": "1Gi", "cores": "30"}), cards())
    assert charged == QuotaUsage(memory_mib=1024, cores=30, gpus=1)


def test_a_result_without_consumed_capacity_counts_the_whole_card() -> None:
    charged = claim_charge(claim("whole"), cards())
    assert charged == QuotaUsage(memory_mib=CARD_MIB, cores=100, gpus=1)


def test_a_whole_card_result_on_a_device_no_slice_lists_cannot_be_counted_and_is_refused() -> None:
    request = allocation(claim("ghost", device="gpu-9"))
    verdict = claimquota.review_allocation(request, ledger(), QUOTA)
    assert not verdict.allowed
    assert "ResourceClaim team-a/ghost" in verdict.message
    assert "status.allocation.devices.results[0]" in verdict.message
    assert "node-1/gpu-9" in verdict.message


# The check at allocation


def test_a_claim_is_counted_with_every_allocated_claim_of_its_namespace() -> None:
    book = ledger(
        slice_of(1024, "a"), slice_of(1024, "b"), slice_of(8192, "elsewhere", namespace="team-b")
    )
    assert claimquota.review_allocation(allocation(slice_of(1024, "c")), book, QUOTA).allowed
    refused = claimquota.review_allocation(allocation(slice_of(1024, "d")), book, QUOTA)
    assert not refused.allowed and refused.code == 403
    assert refused.reason == "quota_exceeded"
    assert refused.message == (
        "ResourceClaim team-a/d: status.allocation.devices.results gives it 1024 MiB of GPU "
        "memory, and the other claims of namespace 'team-a' already hold 3072: 4096 in all, "
        "more than its quota allows (ResourceQuota requests.nvidia.com/gpumem = 3072); 0 fits "
        "now, more once the namespace's other claims are released (their pods end)"
    )


def test_a_claim_without_a_memory_request_counts_the_whole_card_against_the_quota() -> None:
    # kube-scheduler writes the request policy's default, the whole card, as consumed memory.
    whole = claim("whole", consumed={"memory": f"{CARD_MIB}Mi", "cores": "0", "slots": "1"})
    refused = claimquota.review_allocation(
        allocation(whole), ledger(), QuotaLimits(memory_mib=2048)
    )
    assert not refused.allowed
    assert f"gives it {CARD_MIB} MiB of GPU memory" in refused.message
    assert "requests.nvidia.com/gpumem = 2048" in refused.message


def test_of_ten_allocations_at_once_only_as_many_as_the_quota_holds_are_admitted() -> None:
    book = ledger()
    start = threading.Barrier(10)

    def allocate(index: int) -> bool:
        request = allocation(slice_of(1024, f"c{index}"))
        start.wait()
        return claimquota.review_allocation(request, book, QUOTA).allowed

    with ThreadPoolExecutor(10) as pool:
        admitted = sum(pool.map(allocate, range(10)))
    assert admitted == 3
    assert book.used("team-a").memory_mib == 3072


def test_the_api_servers_retry_of_one_write_is_not_counted_twice() -> None:
    book = ledger(slice_of(1024, "a"))
    again = allocation(slice_of(2048, "b"))
    assert claimquota.review_allocation(again, book, QUOTA).allowed
    assert claimquota.review_allocation(again, book, QUOTA).allowed
    assert book.used("team-a").memory_mib == 3072


def test_cores_and_slices_are_held_to_their_quota_too() -> None:
    book = ledger(claim("a", consumed={"memory": "1Gi", "cores": "60"}))
    request = allocation(claim("b", consumed={"memory": "1Gi", "cores": "50"}))
    refused = claimquota.review_allocation(request, book, QuotaLimits(cores=100))
    assert "50 percent of a GPU's SMs" in refused.message
    assert "requests.nvidia.com/gpucores = 100" in refused.message
    slices = claimquota.review_allocation(request, book, QuotaLimits(gpus=1))
    assert "requests.nvidia.com/gpu = 1" in slices.message


def test_without_a_quota_every_allocation_is_admitted_and_still_counted() -> None:
    book = ledger()
    assert claimquota.review_allocation(allocation(slice_of(8192, "big")), book, None).allowed
    assert book.used("team-a").memory_mib == 8192


def test_with_a_quota_allocations_wait_until_the_claims_have_been_listed() -> None:
    book = ClaimLedger(cards=cards())
    refused = claimquota.review_allocation(allocation(slice_of(1024, "a")), book, QUOTA)
    assert not refused.allowed
    assert "has not listed its ResourceClaims and pods yet" in refused.message
    assert claimquota.review_allocation(allocation(slice_of(1024, "a")), book, None).allowed


# What the watch tells the ledger


def test_a_released_or_deleted_claim_gives_its_share_back() -> None:
    book = ledger(slice_of(1024, "a"), slice_of(1024, "b"))
    book.apply("MODIFIED", claim("a", version="11", allocated=False))
    book.apply("DELETED", slice_of(1024, "b"))
    assert book.used("team-a") == QuotaUsage()


def test_an_admitted_claim_is_held_through_events_older_than_its_write() -> None:
    book = ledger()
    assert claimquota.review_allocation(allocation(slice_of(1024, "a")), book, QUOTA).allowed
    # The finalizer update kube-scheduler made just before (the version that was judged).
    book.apply("MODIFIED", claim("a", version="10", allocated=False))
    book.replace([claim("a", version="9", allocated=False)])
    assert book.used("team-a").memory_mib == 1024
    book.apply("MODIFIED", slice_of(1024, "a", version="12"))  # stored
    book.apply("MODIFIED", claim("a", version="13", allocated=False))  # released
    assert book.used("team-a").memory_mib == 0


def test_a_hold_whose_write_never_landed_ends_at_a_later_version_or_after_the_hold() -> None:
    clock = [0.0]
    book = ledger(clock=clock)
    for name in ("a", "b"):
        assert claimquota.review_allocation(allocation(slice_of(1024, name)), book, QUOTA).allowed
    book.apply("MODIFIED", claim("a", version="11", allocated=False))
    assert book.used("team-a").memory_mib == 1024
    clock[0] = 61.0
    assert claimquota.review_allocation(allocation(slice_of(3072, "c")), book, QUOTA).allowed


# Which writes are allocations


@pytest.mark.parametrize(
    ("old_allocated", "driver", "expected"),
    [(False, DRIVER, True), (True, DRIVER, False), (False, "nic.example.com", False)],
    ids=["newly-allocated", "reserved-again", "another-driver"],
)
def test_only_a_write_that_newly_allocates_a_vslice_device_is_an_allocation(
    old_allocated: bool, driver: str, expected: bool
) -> None:
    new = slice_of(1024, "a")
    new["status"]["allocation"]["devices"]["results"][0]["driver"] = driver
    request = allocation(new)
    if old_allocated:
        request = ClaimAdmission(**{**request.__dict__, "old_claim": copy.deepcopy(new)})
    assert claimquota.allocates(request) is expected
