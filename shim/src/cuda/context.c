/*
 * A context costs device memory the program never allocated (code, stacks, heaps). It is
 * charged once per process and device when the process first creates or retains a context
 * there, and shown apart in the region's slot. VSLICE_CONTEXT_OVERHEAD gives the amount, or
 * "auto" (the default): the growth of the device's used memory (NVML) across the driver call that created
 * the context, bounded to [0, 2 GiB]. The charge may go past the slice (a context is never
 * refused); allocations then fail cleanly and cuMemGetInfo reports zero free memory.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../shim.h"

#define AUTO_CEILING (2ull << 30)

static uint8_t charged[VS_MAX_DEVICES];
static pid_t charged_by; /* a forked child charges its own contexts */
static pthread_once_t nvml_init_once = PTHREAD_ONCE_INIT;
static int nvml_usable;

static void init_nvml(void) {
    vs_nvml_ready();
    nvml_usable = vs_real.nvmlInit_v2 != NULL && vs_real.nvmlDeviceGetHandleByUUID != NULL &&
                  vs_real.nvmlDeviceGetMemoryInfo != NULL && vs_real.nvmlInit_v2() == NVML_SUCCESS;
    if (!nvml_usable)
        VS_LOG(VS_INFO, "VSLICE_CONTEXT_OVERHEAD=auto needs NVML, which is not usable here; "
                        "context overhead is not charged");
}

/* Device memory in use on the whole card, from NVML; 0 = unknown. */
static uint64_t card_used(CUdevice ordinal) {
    pthread_once(&nvml_init_once, init_nvml);
    CUuuid raw;
    if (!nvml_usable || vs_real.cuDeviceGetUuid == NULL ||
        vs_real.cuDeviceGetUuid(&raw, ordinal) != CUDA_SUCCESS)
        return 0;
    const unsigned char *u = (const unsigned char *)raw.bytes;
    char text[64];
    snprintf(text, sizeof text,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
             u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    nvmlDevice_t device;
    nvmlMemory_t memory;
    if (vs_real.nvmlDeviceGetHandleByUUID(text, &device) != NVML_SUCCESS ||
        vs_real.nvmlDeviceGetMemoryInfo(device, &memory) != NVML_SUCCESS)
        return 0;
    return memory.used;
}

static int first_on(CUdevice ordinal) {
    if (vs_in_shim || !vs_config()->tracking) return 0;
    if (charged_by != getpid()) {
        memset(charged, 0, sizeof charged);
        charged_by = getpid();
    }
    int dev = vs_device_index(ordinal);
    return dev >= 0 && !__atomic_load_n(&charged[dev], __ATOMIC_ACQUIRE);
}

static void charge(CUresult result, CUdevice ordinal, uint64_t before) {
    const struct vs_config *config = vs_config();
    if (result != CUDA_SUCCESS) return;
    uint64_t overhead = config->context_overhead;
    if (config->context_overhead_auto) {
        uint64_t after = card_used(ordinal);
        overhead = after > before ? after - before : 0;
        if (overhead > AUTO_CEILING) overhead = AUTO_CEILING;
    }
    int dev = vs_device_index(ordinal);
    if (dev < 0 || __atomic_exchange_n(&charged[dev], 1, __ATOMIC_ACQ_REL)) return;
    if (overhead != 0) vs_reserve(dev, overhead, 1);
}

/* Wraps a context-creating driver call: measures (for auto) and charges the first one. */
#define CREATES_CONTEXT(name, ordinal, ...)                                                        \
    do {                                                                                           \
        vs_cuda_ready();                                                                           \
        if (vs_real.name == NULL) return CUDA_ERROR_NOT_FOUND;                                     \
        if (!first_on(ordinal)) return vs_real.name(__VA_ARGS__);                                  \
        uint64_t before_ = vs_config()->context_overhead_auto ? card_used(ordinal) : 0;            \
        vs_in_shim++;                                                                              \
        CUresult r_ = vs_real.name(__VA_ARGS__);                                                   \
        vs_in_shim--;                                                                              \
        charge(r_, (ordinal), before_);                                                            \
        return r_;                                                                                 \
    } while (0)

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    CREATES_CONTEXT(cuDevicePrimaryCtxRetain, dev, pctx, dev);
}

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
    CREATES_CONTEXT(cuCtxCreate_v2, dev, pctx, flags, dev);
}

CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                        CUdevice dev) {
    CREATES_CONTEXT(cuCtxCreate_v4, dev, pctx, params, flags, dev);
}
