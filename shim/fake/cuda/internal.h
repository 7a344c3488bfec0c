/*
 * The fake CUDA driver (libcuda.so.1) for tests: the subset of the driver API vslice and its
 * tests use, with the driver's semantics where tests can observe them: cuInit first, a current
 * context per thread, CUDA_VISIBLE_DEVICES (indices or UUIDs), device memory backed by host
 * memory with the device's capacity enforced, memory pools, pinned host memory (not device
 * memory), VMM granularity, asynchronous kernels on a simulated device timeline, events timed
 * by that timeline, cuGetProcAddress by version.
 *
 * One file per API area: init_device.c (cuInit, versions, devices, error names), context.c,
 * memory.c, launch.c (modules, streams, events, kernels, graphs) and proc_address.c. This
 * header holds what they share. None of it is exported: the library exports the driver's entry
 * points and the node functions of ../device.h, nothing else.
 *
 * Settings: FAKE_NVIDIA_GPUS and NVIDIA_VISIBLE_DEVICES (the node's GPUs and the container's,
 * see device.h), or FAKE_CUDA_DEVICE_COUNT (1) and FAKE_CUDA_TOTAL_MEM (16g);
 * FAKE_CUDA_CONTEXT_MEM (0), FAKE_CUDA_KERNEL_NS (100000; a function named "fake_kernel_<us>"
 * runs <us> microseconds, the PTX "spin" kernel its cycles argument at the reported clock),
 * FAKE_CUDA_STATE (file shared by processes; private memory when unset).
 */
#ifndef VSLICE_FAKE_CUDA_INTERNAL_H
#define VSLICE_FAKE_CUDA_INTERNAL_H

#include <stdint.h>

#include "../device.h"
#include "vslice/cuda_abi.h"

#define FAKE_INTERNAL __attribute__((visibility("hidden")))

#define CLOCK_KHZ (FAKE_SM_CLOCK_MHZ * 1000) /* CU_DEVICE_ATTRIBUTE_CLOCK_RATE */

struct CUctx_st {
    int ordinal;
    int physical;
    int primary;
    int refcount;
};

/* ---- the devices this process sees, set once by cuInit (init_device.c) ---- */
extern int initialized FAKE_INTERNAL;
extern int visible[FAKE_MAX_DEVICES] FAKE_INTERNAL; /* ordinal -> physical index */
extern int visible_count FAKE_INTERNAL;

/* Each area's share of cuInit, run once under cuInit's lock before `initialized` is set. */
FAKE_INTERNAL void context_setup(void); /* primary contexts, FAKE_CUDA_CONTEXT_MEM */
FAKE_INTERNAL void memory_setup(void);  /* the default memory pools */
FAKE_INTERNAL void launch_setup(void);  /* FAKE_CUDA_KERNEL_NS */

/* ---- the calling thread's context (context.c) ---- */
extern __thread CUcontext current FAKE_INTERNAL;
FAKE_INTERNAL struct fake_device_state *device_of_current(void);

/* ---- the device timeline (launch.c) ---- */
FAKE_INTERNAL void sleep_until(uint64_t when); /* CLOCK_MONOTONIC nanoseconds */

#define NEED_INIT                                                                                  \
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED
#define NEED_CTX                                                                                   \
    NEED_INIT;                                                                                     \
    if (current == NULL) return CUDA_ERROR_INVALID_CONTEXT
#define NEED_DEVICE(dev)                                                                           \
    NEED_INIT;                                                                                     \
    if ((dev) < 0 || (dev) >= visible_count) return CUDA_ERROR_INVALID_DEVICE

#endif
