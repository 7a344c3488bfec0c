"""Python side of the vslice shim: read (and, for tests and tools, write) the shared region.

The region is the file named by ``CUDA_DEVICE_MEMORY_SHARED_CACHE`` that every process of one
container maps; its layout is documented in docs/shim-region.md and declared in
``shim/include/vslice/region_abi.h``. The node monitor reads it through :func:`open_region`.
"""

from vslice_shim.region import (
    DeviceLimit,
    DeviceUsage,
    ProcessSlot,
    Region,
    RegionError,
    RegionSnapshot,
    create_region,
    open_region,
)

__all__ = [
    "DeviceLimit",
    "DeviceUsage",
    "ProcessSlot",
    "Region",
    "RegionError",
    "RegionSnapshot",
    "create_region",
    "open_region",
]
