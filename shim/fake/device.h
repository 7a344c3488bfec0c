/*
 * The fake node: its GPUs and their shared state.
 *
 * The node's GPUs come from FAKE_NVIDIA_GPUS ("UUID,MODEL,MEMORY;..."), or without it from
 * FAKE_CUDA_DEVICE_COUNT and FAKE_CUDA_TOTAL_MEM. A GPU's physical index is its position in that
 * list. The container sees the GPUs NVIDIA_VISIBLE_DEVICES names, in physical order, as the
 * NVIDIA container toolkit gives them; CUDA_VISIBLE_DEVICES applies on top in the driver.
 *
 * With FAKE_CUDA_STATE=<file> the state lives in a shared file, indexed by physical GPU, so
 * every process of a test (and every container of a node) sees the same cards: memory in use,
 * and the device timeline (when each simulated kernel ran), from which tests measure busy time.
 * tests/shim/conftest.py reads it.
 *
 * A real driver frees a process's memory when the process ends, however it ends. So that a
 * killed process does not leave its memory counted forever, each process that takes memory
 * from a shared card holds a slot in the file (what it holds on each GPU) and an open file
 * description lock on one byte of the file for that slot. The kernel drops the lock when the
 * process dies, in whatever pid namespace it ran, so a slot whose lock can be taken belongs to
 * a dead process: the next process to start, or to run short of memory, gives its memory back.
 */
#ifndef VSLICE_FAKE_DEVICE_H
#define VSLICE_FAKE_DEVICE_H

#include <stdint.h>

#define FAKE_MAX_DEVICES 16
#define FAKE_RING 65536
#define FAKE_MAGIC 0x454B414645534C56ULL /* "VSLFAKE" */
#define FAKE_LOG "[fake-nvidia] "

/* One board model for every fake GPU, told the same way by both libraries: an H100 SXM5
   (compute capability 9.0), PCI bus FAKE_PCI_BUS_BASE + its physical index, domain 0. */
#define FAKE_CUDA_DRIVER_VERSION 12080 /* cuDriverGetVersion, nvmlSystemGetCudaDriverVersion */
#define FAKE_CC_MAJOR 9
#define FAKE_CC_MINOR 0
#define FAKE_SM_CLOCK_MHZ 1000 /* 1 cycle = 1 ns: the PTX spin kernel's cycles are nanoseconds */
#define FAKE_MEM_CLOCK_MHZ 2619
#define FAKE_PCI_BUS_BASE 0x18
#define FAKE_PCI_DEVICE_ID 0x233010DEu    /* device 0x2330 << 16 | NVIDIA's vendor id 0x10DE */
#define FAKE_PCI_SUBSYSTEM_ID 0x16C110DEu

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

#define FAKE_MAX_PROCS 4096

/* What one process holds; token 0: a free slot. */
struct fake_proc {
    uint64_t token;
    uint64_t used[FAKE_MAX_DEVICES]; /* bytes, by physical GPU */
};

struct fake_state {
    uint64_t magic;
    uint32_t device_count; /* GPUs of the node */
    uint32_t ring_size;
    uint64_t reserved[6];
    struct fake_device_state dev[FAKE_MAX_DEVICES];
    struct fake_proc procs[FAKE_MAX_PROCS]; /* after dev: readers of the file keep its offsets */
};

/* One GPU the container sees. */
struct fake_gpu {
    int physical;       /* position in the node's list = index in the shared state */
    char uuid[80];      /* as NVML reports it */
    char model[96];     /* cuDeviceGetName, nvmlDeviceGetName */
    uint8_t bytes[16];  /* cuDeviceGetUuid (vslice/gpu_uuid.h) */
};

struct fake_state *fake_state(void);
int fake_gpu_count(void);                /* GPUs the container sees */
const struct fake_gpu *fake_gpu(int i);  /* i < fake_gpu_count(), in physical order */
uint64_t fake_now_ns(void);
int fake_parse_size(const char *text, uint64_t *out);
int fake_reserve_memory(int physical, uint64_t bytes);
void fake_release_memory(int physical, uint64_t bytes);

/* Exported by both fake libraries: 1 once this copy has reported a bad GPU list, so a process
   that loads both libraries separately prints it once. */
int fake_node_reported(void);

#endif
