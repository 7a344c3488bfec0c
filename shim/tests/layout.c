/* Prints the region's sizes and offsets as the C compiler lays them out ("key value" lines);
   tests/shim/test_region_layout.py compares them with the Python (cffi) layout. */
#include <stddef.h>
#include <stdio.h>

#include "testlib.h"
#include "vslice/region_abi.h"

#define SIZE(type) printf("%s %zu\n", #type, sizeof(type))
#define FIELD(type, field) printf("%s.%s %zu\n", #type, #field, offsetof(type, field))

int main(void) {
    SIZE(vs_region_header);
    FIELD(vs_region_header, magic);
    FIELD(vs_region_header, version_major);
    FIELD(vs_region_header, version_minor);
    FIELD(vs_region_header, header_size);
    FIELD(vs_region_header, device_size);
    FIELD(vs_region_header, slot_size);
    FIELD(vs_region_header, max_devices);
    FIELD(vs_region_header, max_slots);
    FIELD(vs_region_header, device_count);
    FIELD(vs_region_header, slot_hwm);
    FIELD(vs_region_header, lock_ready);
    FIELD(vs_region_header, created_ns);
    FIELD(vs_region_header, recoveries);
    FIELD(vs_region_header, reserved0);
    FIELD(vs_region_header, lock);
    FIELD(vs_region_header, reserved1);
    SIZE(vs_region_device);
    FIELD(vs_region_device, uuid);
    FIELD(vs_region_device, mem_limit);
    FIELD(vs_region_device, mem_used);
    FIELD(vs_region_device, sm_limit);
    FIELD(vs_region_device, index);
    FIELD(vs_region_device, tokens_ns);
    FIELD(vs_region_device, refill_ns);
    FIELD(vs_region_device, busy_ns);
    FIELD(vs_region_device, throttled_ns);
    FIELD(vs_region_device, launches);
    FIELD(vs_region_device, reserved);
    SIZE(vs_region_slot);
    FIELD(vs_region_slot, pid);
    FIELD(vs_region_slot, flags);
    FIELD(vs_region_slot, start_time);
    FIELD(vs_region_slot, last_seen_ns);
    FIELD(vs_region_slot, used);
    FIELD(vs_region_slot, ctx);
    FIELD(vs_region_slot, reserved);
    SIZE(vs_region);
    FIELD(vs_region, header);
    FIELD(vs_region, devices);
    FIELD(vs_region, slots);
    printf("magic %llu\n", (unsigned long long)VS_REGION_MAGIC);
    printf("version_major %u\n", VS_REGION_VERSION_MAJOR);
    return 0;
}
