/*
 * The shared region: one file per container, mapped by every process of the container and read
 * by the node monitor. This header is the ABI; docs/shim-region.md describes it field by field
 * and the Python reader (shim/python/vslice_shim/abi.py) declares the same structures.
 *
 * Rules that keep it an ABI: fixed-width types only, natural alignment, explicit reserved bytes,
 * every structure size fixed by a static assertion. A new field takes reserved bytes and bumps
 * the minor version; anything else bumps the major version, which readers refuse.
 */
#ifndef VSLICE_REGION_ABI_H
#define VSLICE_REGION_ABI_H

#include <stdint.h>

#define VS_REGION_MAGIC 0x47524543494C5356ULL /* the bytes "VSLICERG" read little-endian */
#define VS_REGION_VERSION_MAJOR 1u
#define VS_REGION_VERSION_MINOR 0u
#define VS_MAX_DEVICES 16
#define VS_MAX_SLOTS 1024
#define VS_LOCK_BYTES 64

typedef struct vs_region_header {
    uint64_t magic;           /* VS_REGION_MAGIC; written last when a region is created */
    uint32_t version_major;   /* readers refuse another major version */
    uint32_t version_minor;   /* readers accept any minor version */
    uint32_t header_size;     /* sizeof(vs_region_header) */
    uint32_t device_size;     /* sizeof(vs_region_device) */
    uint32_t slot_size;       /* sizeof(vs_region_slot) */
    uint32_t max_devices;     /* VS_MAX_DEVICES */
    uint32_t max_slots;       /* VS_MAX_SLOTS */
    uint32_t device_count;    /* devices[0..device_count) are in use */
    uint32_t slot_hwm;        /* slots[0..slot_hwm) have been used at least once */
    uint32_t lock_ready;      /* 1 once the lock below was initialised by a shim */
    uint64_t created_ns;      /* CLOCK_REALTIME at creation */
    uint64_t recoveries;      /* times the lock was taken over from a holder that died */
    uint8_t reserved0[64];
    uint8_t lock[VS_LOCK_BYTES]; /* opaque to readers: a process-shared robust mutex */
    uint8_t reserved1[64];
} vs_region_header;

typedef struct vs_region_device {
    uint8_t uuid[16];     /* the GPU's UUID bytes (as cuDeviceGetUuid returns them) */
    uint64_t mem_limit;   /* bytes; 0 = no memory limit */
    uint64_t mem_used;    /* bytes; always the sum of used[] over the live slots */
    uint32_t sm_limit;    /* percent 1..100; 0 = no compute limit */
    uint32_t index;       /* the device's index in the container (CUDA_DEVICE_*_LIMIT_<index>) */
    int64_t tokens_ns;    /* compute limiter bucket: device time that may still be spent */
    uint64_t refill_ns;   /* CLOCK_MONOTONIC of the last bucket refill */
    uint64_t busy_ns;     /* device busy time measured so far (all processes) */
    uint64_t throttled_ns;/* host time launches spent waiting for the bucket */
    uint64_t launches;    /* launches seen (all processes) */
    uint8_t reserved[48];
} vs_region_device;

typedef struct vs_region_slot {
    int32_t pid;              /* 0 = free; a pid of the container's pid namespace */
    uint32_t flags;           /* reserved, 0 */
    uint64_t start_time;      /* /proc/<pid>/stat starttime: tells a reused pid apart */
    uint64_t last_seen_ns;    /* CLOCK_REALTIME of the process's last allocation or free */
    uint64_t used[VS_MAX_DEVICES]; /* bytes held per device, context overhead included */
    uint64_t ctx[VS_MAX_DEVICES];  /* the context overhead part of used[] */
    uint8_t reserved[40];
} vs_region_slot;

typedef struct vs_region {
    vs_region_header header;
    vs_region_device devices[VS_MAX_DEVICES];
    vs_region_slot slots[VS_MAX_SLOTS];
} vs_region;

_Static_assert(sizeof(vs_region_header) == 256, "region header is 256 bytes");
_Static_assert(sizeof(vs_region_device) == 128, "region device is 128 bytes");
_Static_assert(sizeof(vs_region_slot) == 320, "region slot is 320 bytes");
_Static_assert(sizeof(vs_region) == 256 + 16 * 128 + 1024 * 320, "region size");

#endif
