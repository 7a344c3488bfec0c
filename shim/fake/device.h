/*
 * State of the fake GPUs. With FAKE_CUDA_STATE=<file> it lives in a shared file, so every
 * process of a test sees the same devices: memory in use, and the device timeline (when each
 * simulated kernel ran), from which tests measure busy time. tests/shim/timeline.py reads it.
 */
#ifndef VSLICE_FAKE_DEVICE_H
#define VSLICE_FAKE_DEVICE_H

#include <stdint.h>

#define FAKE_MAX_DEVICES 8
#define FAKE_RING 65536
#define FAKE_MAGIC 0x454B414645534C56ULL /* "VSLFAKE" */

struct fake_interval {
    uint64_t start_ns; /* CLOCK_MONOTONIC */
    uint64_t end_ns;
};

struct fake_device_state {
    uint64_t total;    /* bytes */
    uint64_t used;     /* bytes, all processes */
    uint64_t free_at;  /* CLOCK_MONOTONIC when queued work finishes */
    uint64_t head;     /* intervals ever recorded; ring[head % FAKE_RING] is next */
    uint64_t contexts; /* live contexts */
    uint64_t reserved[3];
    struct fake_interval ring[FAKE_RING];
};

struct fake_state {
    uint64_t magic;
    uint32_t device_count;
    uint32_t ring_size;
    uint64_t reserved[6];
    struct fake_device_state dev[FAKE_MAX_DEVICES];
};

struct fake_state *fake_state(void);
uint64_t fake_now_ns(void);
int fake_parse_size(const char *text, uint64_t *out);
void fake_uuid(int physical, uint8_t out[16]);
int fake_reserve_memory(int physical, uint64_t bytes);
void fake_release_memory(int physical, uint64_t bytes);

#endif
