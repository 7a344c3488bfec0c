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
 *
 * The state also holds the driver-enforced memory limits (R615's nvmlDeviceSetMemoryLimits_v1,
 * memory_limits.c): per GPU and cgroup directory ("namespace", vslice/cgroup_path.h) a hard
 * limit on what the processes of that cgroup and those below it hold together. Each slot
 * records the namespace of its process, so that usage can be counted per cgroup.
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

/* Driver-enforced memory limits (memory_limits.c): a cgroup's cap on one GPU, set through
   nvmlDeviceSetMemoryLimits_v1. A namespace is a cgroup's directory (vslice/cgroup_path.h);
   namespace[0] == 0: a free entry. */
#define FAKE_MAX_LIMITS 256
#define FAKE_NAMESPACE_SIZE 512

struct fake_limit {
    uint32_t physical;
    uint32_t reserved;
    uint64_t soft; /* recorded and answered; the fake reserves nothing for it */
    uint64_t hard;
    char namespace[FAKE_NAMESPACE_SIZE];
};

struct fake_state {
    uint64_t magic;
    uint32_t device_count; /* GPUs of the node */
    uint32_t ring_size;
    uint64_t reserved[6];
    struct fake_device_state dev[FAKE_MAX_DEVICES];
    struct fake_proc procs[FAKE_MAX_PROCS]; /* after dev: readers of the file keep its offsets */
    /* Added last, so that the offsets above stay where readers of the file expect them. */
    struct fake_limit limits[FAKE_MAX_LIMITS];
    char proc_namespace[FAKE_MAX_PROCS][FAKE_NAMESPACE_SIZE]; /* of procs[i]'s process */
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

/* Driver-enforced memory limits. The table is changed, and memory taken under a limit, with
   the limits lock held (device.c): a lock byte of the state file and a mutex of the process. */
const char *fake_own_namespace(void); /* this process's; "" when /proc/self/cgroup says none */
void fake_lock_limits(void);
void fake_unlock_limits(void);
void fake_sweep_dead(void); /* give back what dead processes held, before counting usage */
/* memory_limits.c; the caller holds the limits lock unless said otherwise. */
int fake_namespace_within(const char *path, const char *ancestor);
int fake_limits_apply(int physical, const char *ns); /* any limit on ns or above; no lock */
int fake_limits_allow(int physical, const char *ns, uint64_t bytes);
uint64_t fake_namespace_used(int physical, const char *ns);
int fake_set_limit(int physical, const char *ns, uint64_t soft, uint64_t hard); /* -1: full */
void fake_get_limit(int physical, const char *ns, uint64_t *soft, uint64_t *hard);
/* The card as a process of ns sees it: its total and free memory are the card's, lowered by
   the limits of ns and its ancestors (takes the lock). */
void fake_memory_view(int physical, const char *ns, uint64_t *total, uint64_t *free);

/* Exported by both fake libraries: 1 once this copy has reported a bad GPU list, so a process
   that loads both libraries separately prints it once. */
int fake_node_reported(void);

#endif
