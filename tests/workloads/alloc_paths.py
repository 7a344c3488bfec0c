"""Where NVIDIA's driver bindings (``cuda-bindings``) stop in a slice, on every allocation path
they expose: run as ``python3 alloc_paths.py BIG REST`` (MiB). It takes BIG, then tries REST
more with cuMemAlloc, cuMemAllocAsync (stream-ordered), cuMemAllocManaged and cuMemCreate
(VMM: reserve, map, set access, copy, unmap, as frameworks' caching allocators run it), frees
BIG and takes REST once more. Prints one JSON object: the total cuMemGetInfo reports, the VMM
granularity and, for each path that failed, the driver's error name.

Used by tests/shim/test_nvidia_tools.py (on this machine) and
tests/e2e/test_realnode_nvidia_tools.py (in a pod of the workload image)."""

from __future__ import annotations

import json
import sys
from typing import Any

from cuda.bindings import driver as cu

OK = cu.CUresult.CUDA_SUCCESS
MIB = 1 << 20


def must(result: tuple[Any, ...]) -> Any:
    """The value of a call that has to succeed (a failure here is the program's, not a slice's)."""
    if result[0] != OK:
        raise SystemExit(f"unexpected {result[0]!r}")
    return result[1] if len(result) == 2 else result[1:]


def tried(results: dict[str, object], path: str, result: tuple[Any, ...]) -> Any:
    """The value of a call the slice may refuse: its error name goes into ``results``."""
    if result[0] != OK:
        results[path] = cu.cuGetErrorName(result[0])[1].decode()
        return None
    return result[1]


def vmm(results: dict[str, object], rest: int) -> None:
    prop = cu.CUmemAllocationProp()
    prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = 0
    minimum = cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM
    grain = must(cu.cuMemGetAllocationGranularity(prop, minimum))
    results["granularity"] = grain
    size = (rest + grain - 1) // grain * grain
    handle = tried(results, "cuMemCreate", cu.cuMemCreate(size, prop, 0))
    if handle is None:
        return
    address = must(cu.cuMemAddressReserve(size, 0, 0, 0))
    must(cu.cuMemMap(address, size, 0, handle, 0))
    access = cu.CUmemAccessDesc()
    access.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    access.location.id = 0
    access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    must(cu.cuMemSetAccess(address, size, [access], 1))
    must(cu.cuMemcpyHtoD(address, b"slice", 5))
    must(cu.cuMemUnmap(address, size))
    must(cu.cuMemAddressFree(address, size))
    must(cu.cuMemRelease(handle))


def main(big_mib: int, rest_mib: int) -> dict[str, object]:
    big, rest = big_mib * MIB, rest_mib * MIB
    must(cu.cuInit(0))
    device = must(cu.cuDeviceGet(0))
    must(cu.cuCtxSetCurrent(must(cu.cuDevicePrimaryCtxRetain(device))))
    results: dict[str, object] = {"total": must(cu.cuMemGetInfo())[1]}
    held = must(cu.cuMemAlloc(big))  # most of the slice, so that `rest` does not fit beside it

    pointer = tried(results, "cuMemAlloc", cu.cuMemAlloc(rest))
    if pointer is not None:
        must(cu.cuMemFree(pointer))
    stream = must(cu.cuStreamCreate(0))
    pointer = tried(results, "cuMemAllocAsync", cu.cuMemAllocAsync(rest, stream))
    if pointer is not None:
        must(cu.cuMemFreeAsync(pointer, stream))
    must(cu.cuStreamSynchronize(stream))
    attach = cu.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL
    pointer = tried(results, "cuMemAllocManaged", cu.cuMemAllocManaged(rest, attach))
    if pointer is not None:
        must(cu.cuMemFree(pointer))
    vmm(results, rest)

    must(cu.cuMemFree(held))
    must(cu.cuMemFree(must(cu.cuMemAlloc(rest))))  # with BIG given back, REST fits again
    return results


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]), int(sys.argv[2]))))
