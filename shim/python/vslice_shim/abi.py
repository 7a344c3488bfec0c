"""The region ABI as cffi declarations: the same structures as ``region_abi.h``.

cffi computes offsets from these declarations with the platform's natural alignment, exactly as
the C compiler does; tests compare both against each other and against the documented offsets.
"""

from __future__ import annotations

import cffi

MAGIC = 0x47524543494C5356  # the bytes "VSLICERG" read little-endian
VERSION_MAJOR = 1
VERSION_MINOR = 0
MAX_DEVICES = 16
MAX_SLOTS = 1024
LOCK_BYTES = 64

CDEF = """
typedef struct vs_region_header {
    uint64_t magic;
    uint32_t version_major;
    uint32_t version_minor;
    uint32_t header_size;
    uint32_t device_size;
    uint32_t slot_size;
    uint32_t max_devices;
    uint32_t max_slots;
    uint32_t device_count;
    uint32_t slot_hwm;
    uint32_t lock_ready;
    uint64_t created_ns;
    uint64_t recoveries;
    uint8_t reserved0[64];
    uint8_t lock[64];
    uint8_t reserved1[64];
} vs_region_header;

typedef struct vs_region_device {
    uint8_t uuid[16];
    uint64_t mem_limit;
    uint64_t mem_used;
    uint32_t sm_limit;
    uint32_t index;
    int64_t tokens_ns;
    uint64_t refill_ns;
    uint64_t busy_ns;
    uint64_t throttled_ns;
    uint64_t launches;
    uint8_t reserved[48];
} vs_region_device;

typedef struct vs_region_slot {
    int32_t pid;
    uint32_t flags;
    uint64_t start_time;
    uint64_t last_seen_ns;
    uint64_t used[16];
    uint64_t ctx[16];
    uint8_t reserved[40];
} vs_region_slot;

typedef struct vs_region {
    vs_region_header header;
    vs_region_device devices[16];
    vs_region_slot slots[1024];
} vs_region;
"""

ffi = cffi.FFI()
ffi.cdef(CDEF)

REGION_SIZE: int = ffi.sizeof("vs_region")
HEADER_SIZE: int = ffi.sizeof("vs_region_header")
DEVICE_SIZE: int = ffi.sizeof("vs_region_device")
SLOT_SIZE: int = ffi.sizeof("vs_region_slot")

STRUCTS = ("vs_region_header", "vs_region_device", "vs_region_slot", "vs_region")


def layout() -> dict[str, int]:
    """Every structure's size and every field's offset, keyed ``struct`` and ``struct.field``.

    The C layout test prints the same keys from ``offsetof``/``sizeof``; the two must agree.
    """
    result: dict[str, int] = {}
    for name in STRUCTS:
        ctype = ffi.typeof(name)
        result[name] = ffi.sizeof(ctype)
        for field, _ in ctype.fields:
            result[f"{name}.{field}"] = ffi.offsetof(ctype, field)
    return result
