/* Internal interfaces of libvslice.so; nothing here is exported. */
#ifndef VSLICE_SHIM_H
#define VSLICE_SHIM_H

#include <stdint.h>

#include "vslice/cuda_abi.h"
#include "vslice/nvml_abi.h"
#include "vslice/region_abi.h"

#define VS_INTERNAL __attribute__((visibility("hidden")))
#define VS_TLS __thread __attribute__((tls_model("initial-exec")))

/* ---- real entry points (src/dispatch.c) ---- */
struct vs_real {
#define VS_HOOK(lib, name, ret, params) ret(*name) params;
#define VS_USE(lib, name, ret, params) ret(*name) params;
#include "hooks.def"
#undef VS_HOOK
#undef VS_USE
};
extern struct vs_real vs_real VS_INTERNAL;

enum vs_lib { VS_LIB_CUDA, VS_LIB_NVML };
struct vs_hook_entry {
    const char *name;
    void *hook;
    void **real;
    enum vs_lib lib;
    int exported; /* 1 = hook, 0 = used only */
};
/* Resolves the driver's entry points once. Hooks call it on every call, so after the first
   resolution it costs one load: the flag is set only once pthread_once has finished. */
extern int vs_cuda_resolved VS_INTERNAL;
VS_INTERNAL void vs_cuda_resolve(void);
static inline void vs_cuda_ready(void) {
    if (__builtin_expect(!__atomic_load_n(&vs_cuda_resolved, __ATOMIC_ACQUIRE), 0))
        vs_cuda_resolve();
}
VS_INTERNAL void vs_nvml_ready(void); /* resolves NVML's entry points once */

/* Set while the shim calls into the driver, so driver-internal calls pass straight through. */
extern VS_TLS int vs_in_shim VS_INTERNAL;

/* ---- logging (src/log.c) ---- */
enum vs_level { VS_ERROR = 1, VS_WARN = 2, VS_INFO = 3, VS_DEBUG = 4 };
extern int vs_log_level VS_INTERNAL;
VS_INTERNAL void vs_log(enum vs_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
#define VS_LOG(level, ...)                                                                          \
    do {                                                                                           \
        if ((level) <= vs_log_level) vs_log((level), __VA_ARGS__);                                 \
    } while (0)

/* ---- configuration: the limits file or the environment (src/config.c) ---- */
/* The fixed container path of the limits file the device plugin mounts read-only. */
#define VS_LIMITS_PATH "/run/vslice-limits/limits"
struct vs_config {
    int tracking;                        /* 1 = keep accounts (a limit or a region is set) */
    int pacing;                          /* 1 = some device has a compute limit */
    uint64_t mem_limit[VS_MAX_DEVICES];  /* bytes where mem_limited; index = container index */
    uint8_t mem_limited[VS_MAX_DEVICES]; /* 1 = mem_limit holds (0 bytes: fail closed) */
    uint32_t sm_limit[VS_MAX_DEVICES];   /* percent, 0 = none */
    uint64_t context_overhead;           /* bytes charged per process and device */
    int context_overhead_auto;           /* 1 = measure it with NVML around the creation */
    const char *region_path;             /* NULL = private accounting */
    const char *limits_file;             /* NULL = limits from the environment */
};
/* Parsed on first use; afterwards one load (the pointer is published after pthread_once). */
extern const struct vs_config *vs_config_ready VS_INTERNAL;
VS_INTERNAL const struct vs_config *vs_config_read(void);
static inline const struct vs_config *vs_config(void) {
    const struct vs_config *config = __atomic_load_n(&vs_config_ready, __ATOMIC_ACQUIRE);
    return __builtin_expect(config != NULL, 1) ? config : vs_config_read();
}
VS_INTERNAL int vs_parse_size(const char *text, uint64_t *out);
VS_INTERNAL int vs_parse_percent(const char *text, uint32_t *out);

/* ---- the shared region (src/region.c) ---- */
VS_INTERNAL int vs_region_attached(void);         /* 1 when the region can be read */
VS_INTERNAL int vs_region_ready(void);            /* attached, and this process has a slot */
VS_INTERNAL vs_region *vs_region_map(void);
VS_INTERNAL int vs_region_shared(void);           /* attached to the container's region file */
struct vs_process {
    int32_t pid;   /* in the container's pid namespace */
    uint64_t used; /* bytes held on the device, context overhead included */
};
/* Live processes holding memory on region device dev: the count (may exceed max; the first max
   are written to out), -1 when the region cannot be locked. */
VS_INTERNAL int vs_device_processes(int dev, struct vs_process *out, int max);
VS_INTERNAL int vs_device_index(CUdevice ordinal); /* region device index, -1 = untracked */
VS_INTERNAL int vs_current_device(void);           /* of the calling thread's context */
VS_INTERNAL int vs_device_by_uuid(const uint8_t uuid[16]);
VS_INTERNAL int vs_reserve(int dev, uint64_t bytes, int context);   /* 0 ok, -1 over the slice */
VS_INTERNAL void vs_release(int dev, uint64_t bytes);
VS_INTERNAL void vs_adjust(int dev, uint64_t reserved, uint64_t actual);
/* Usage of region device dev and this process's limit for it (never the region's copy, which
   the container can write): 1 = *limit holds (0 = no memory at all), 0 = no memory limit. */
VS_INTERNAL int vs_device_usage(int dev, uint64_t *limit, uint64_t *used);
VS_INTERNAL int vs_local_index(int dev);    /* container index this process gave dev, or -1 */
VS_INTERNAL uint32_t vs_sm_limit(int dev);  /* this process's compute limit for dev, 0 = none */
VS_INTERNAL int vs_region_lock(void);
VS_INTERNAL void vs_region_unlock(void);
VS_INTERNAL uint64_t vs_now_ns(void); /* CLOCK_MONOTONIC */

/* ---- NVML devices (src/nvml/memory.c) ---- */
/* Region device (-1: none yet) and container index (-1: not visible here) of an NVML device;
   returns -1 when the shim does not track it. */
VS_INTERNAL int vs_nvml_place(nvmlDevice_t device, int *dev, int *index);

/* ---- allocations of this process (src/alloc_table.c) ---- */
enum vs_kind { VS_KIND_PTR = 1, VS_KIND_ARRAY, VS_KIND_MIPMAP, VS_KIND_VMM };
VS_INTERNAL void vs_table_put(enum vs_kind kind, uint64_t key, int dev, uint64_t bytes);
VS_INTERNAL int vs_table_take(enum vs_kind kind, uint64_t key, int *dev, uint64_t *bytes);
VS_INTERNAL void vs_table_forget_all(void);

/* ---- the compute limiter (src/limiter.c) ---- */
struct vs_sample;
struct vs_ticket {
    int dev;                  /* region device index */
    int64_t cost;             /* device time charged to the bucket for this launch */
    struct vs_sample *sample; /* events timing this launch, NULL if not sampled */
    CUstream stream;
    int per_thread;           /* launched through a _ptsz entry point */
};
VS_INTERNAL void vs_limiter_before(int dev, CUstream stream, int per_thread, struct vs_ticket *t);
VS_INTERNAL void vs_limiter_after(struct vs_ticket *t, CUresult launched);

#endif
