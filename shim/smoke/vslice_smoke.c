/*
 * vslice-smoke: what a user runs inside a GPU container to see the slice it was given.
 *
 *   vslice-smoke memory  [--step SIZE] [--device N] [--hold SECONDS]
 *   vslice-smoke hold    --memory SIZE --seconds N [--device N]   (SIGTERM ends it early)
 *   vslice-smoke compute --seconds N [--kernel-ms K] [--device N]
 *   any mode:            --cuda-library PATH  --nvml-library PATH
 *
 * The driver (libcuda.so.1) and NVML (libnvidia-ml.so.1) are loaded with dlopen at run time,
 * so the image needs no driver and the same binary runs on NVIDIA's driver and on the fake one.
 * Output is one key=value per line (docs/smoke.md lists every key); the first line is
 * "vslice-smoke version=1 mode=<mode>", the last "result=ok" or "error=<why>".
 *
 * Exit status: 0 ok, 1 the driver cannot be loaded or initialised, 2 bad command line,
 * 3 no GPU visible, 4 the check failed (a refused hold, a failed launch).
 */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ptx.h"
#include "vslice/cuda_abi.h"
#include "vslice/gpu_uuid.h"
#include "vslice/nvml_abi.h"

#define VERSION 1
#define MIB (1ull << 20)
#define GRAPHS 8 /* measured launches in flight */

enum { EXIT_OK = 0, EXIT_DRIVER = 1, EXIT_USAGE = 2, EXIT_NO_GPU = 3, EXIT_CHECK = 4 };

/* The entry points used, typed from the declarations (checked against NVIDIA's by make drift). */
#define CUDA_CALLS(X)                                                                              \
    X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName)          \
    X(cuDeviceGetUuid) X(cuDeviceTotalMem_v2) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain)  \
    X(cuDevicePrimaryCtxRelease_v2) X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuMemGetInfo_v2)      \
    X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuModuleLoadData) X(cuModuleGetFunction) X(cuEventCreate)   \
    X(cuEventSynchronize) X(cuEventElapsedTime) X(cuGraphCreate) X(cuGraphAddKernelNode_v2)        \
    X(cuGraphAddEventRecordNode) X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) X(cuGetErrorName)
#define NVML_CALLS(X)                                                                              \
    X(nvmlInit_v2) X(nvmlShutdown) X(nvmlDeviceGetCount_v2) X(nvmlDeviceGetHandleByIndex_v2)      \
    X(nvmlDeviceGetName) X(nvmlDeviceGetUUID) X(nvmlDeviceGetMemoryInfo)                           \
    X(nvmlDeviceGetComputeRunningProcesses_v3) X(nvmlErrorString)

static struct {
#define FIELD(name) __typeof__(&name) name;
    CUDA_CALLS(FIELD) NVML_CALLS(FIELD)
#undef FIELD
} api;

struct options {
    const char *mode;
    const char *cuda_library, *nvml_library;
    uint64_t step, memory;
    double seconds, kernel_ms, hold;
    int device;
};

static void say(const char *key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const char *key, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    printf("%s=", key);
    vprintf(fmt, args);
    putchar('\n');
    va_end(args);
}

/* A key with indexes in it: key(buf, "device.%d.name", i). */
static const char *key(char buf[64], const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *key(char buf[64], const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(buf, 64, fmt, args);
    va_end(args);
    return buf;
}

static int fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int status, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    printf("error=");
    vprintf(fmt, args);
    putchar('\n');
    va_end(args);
    return status;
}

static const char *cu_name(CUresult r) {
    const char *name = NULL;
    if (api.cuGetErrorName == NULL || api.cuGetErrorName(r, &name) != CUDA_SUCCESS || name == NULL)
        return "CUDA_ERROR_UNKNOWN";
    return name;
}

static unsigned long long mib(unsigned long long bytes) { return bytes / MIB; }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Set by SIGTERM during a hold: a pod deleted while it holds ends the hold and frees its
 * memory through the driver, as a program that cleans up on SIGTERM does, rather than being
 * killed holding it (the kubelet sends SIGTERM first, even with a grace period of 0). */
static volatile sig_atomic_t stop_requested;

static void on_stop(int sig) {
    (void)sig;
    stop_requested = 1;
}

/* In steps of at most 100 ms: the signal may be handled on another thread of the process (the
 * shim's), which does not interrupt this thread's nanosleep, so the flag is polled. */
static void sleep_s(double seconds) {
    double left = seconds;
    while (left > 0 && !stop_requested) {
        double step = left < 0.1 ? left : 0.1;
        struct timespec ts = {(time_t)step, (long)((step - (double)(time_t)step) * 1e9)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !stop_requested) {
        }
        left -= step;
    }
}

/* "256m", "4g", "512Mi", "1GiB", "1048576": binary units. */
static int parse_size(const char *text, uint64_t *out) {
    char *end = NULL;
    if (text == NULL || *text < '0' || *text > '9') return -1;
    unsigned long long value = strtoull(text, &end, 10);
    const char *units = "kmgt";
    const char *unit = *end != '\0' ? strchr(units, *end | 0x20) : NULL;
    unsigned shift = unit != NULL ? 10u * (unsigned)(unit - units + 1) : 0;
    if (unit != NULL) end++;
    if (unit != NULL && *end == 'i') end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end != '\0' || value == 0) return -1;
    *out = (uint64_t)value << shift;
    return 0;
}

static int parse_seconds(const char *text, double *out) {
    char *end = NULL;
    double value = text != NULL ? strtod(text, &end) : -1;
    if (text == NULL || end == text || *end != '\0' || !(value >= 0)) return -1;
    *out = value;
    return 0;
}

static int usage(const char *why) {
    fprintf(stderr,
            "vslice-smoke: %s\n"
            "usage: vslice-smoke memory [--step SIZE] [--device N] [--hold SECONDS]\n"
            "       vslice-smoke hold --memory SIZE --seconds N [--device N]\n"
            "       vslice-smoke compute --seconds N [--kernel-ms K] [--device N]\n"
            "       (any mode: --cuda-library PATH --nvml-library PATH)\n",
            why);
    return EXIT_USAGE;
}

static int parse_options(int argc, char **argv, struct options *o) {
    *o = (struct options){NULL, "libcuda.so.1", "libnvidia-ml.so.1", 256 * MIB, 0, -1, 2, 0, 0};
    if (argc < 2) return usage("no mode given");
    o->mode = argv[1];
    if (strcmp(o->mode, "memory") != 0 && strcmp(o->mode, "hold") != 0 &&
        strcmp(o->mode, "compute") != 0)
        return usage("the mode is one of memory, hold, compute");
    for (int i = 2; i < argc; i++) {
        const char *flag = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = value == NULL;
        char *end = NULL;
        if (strcmp(flag, "--step") == 0)
            bad = bad || parse_size(value, &o->step) != 0;
        else if (strcmp(flag, "--memory") == 0)
            bad = bad || parse_size(value, &o->memory) != 0;
        else if (strcmp(flag, "--seconds") == 0)
            bad = bad || parse_seconds(value, &o->seconds) != 0;
        else if (strcmp(flag, "--kernel-ms") == 0)
            bad = bad || parse_seconds(value, &o->kernel_ms) != 0 || o->kernel_ms <= 0;
        else if (strcmp(flag, "--hold") == 0)
            bad = bad || parse_seconds(value, &o->hold) != 0;
        else if (strcmp(flag, "--device") == 0)
            bad = bad || (o->device = (int)strtol(value, &end, 10)) < 0 || *end != '\0';
        else if (strcmp(flag, "--cuda-library") == 0)
            o->cuda_library = value;
        else if (strcmp(flag, "--nvml-library") == 0)
            o->nvml_library = value;
        else
            return usage("unknown option");
        if (bad) return usage("an option lacks its value or has a bad one");
        i++;
    }
    if (strcmp(o->mode, "hold") == 0 && (o->memory == 0 || o->seconds < 0))
        return usage("hold needs --memory SIZE and --seconds N");
    if (strcmp(o->mode, "compute") == 0 && o->seconds < 0)
        return usage("compute needs --seconds N");
    return 0;
}

/* ---- loading: every CUDA entry point is needed, NVML is optional ---- */
static int load_cuda(const char *path) {
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) return fail(EXIT_DRIVER, "cannot load %s: %s", path, dlerror());
#define LOAD(name)                                                                                 \
    if ((api.name = (__typeof__(api.name))dlsym(lib, #name)) == NULL)                              \
        return fail(EXIT_DRIVER, "%s has no %s", path, #name);
    CUDA_CALLS(LOAD)
#undef LOAD
    return 0;
}

static int load_nvml(const char *path) {
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        say("nvml.error", "cannot load %s: %s", path, dlerror());
        return -1;
    }
#define LOAD(name)                                                                                 \
    if ((api.name = (__typeof__(api.name))dlsym(lib, #name)) == NULL) {                            \
        say("nvml.error", "%s has no %s", path, #name);                                            \
        return -1;                                                                                 \
    }
    NVML_CALLS(LOAD)
#undef LOAD
    nvmlReturn_t r = api.nvmlInit_v2();
    if (r != NVML_SUCCESS) {
        say("nvml.error", "nvmlInit: %s", api.nvmlErrorString(r));
        return -1;
    }
    say("nvml", "ok");
    return 0;
}

/* ---- what the container sees ---- */
static CUcontext contexts[64];
static int device_count;

/* The CUDA devices; EXIT_NO_GPU (nothing printed yet about it) when there are none. */
static int report_devices(void) {
    CUresult r = api.cuInit(0);
    if (r == CUDA_ERROR_NO_DEVICE) {
        say("devices", "0");
        return EXIT_NO_GPU;
    }
    if (r != CUDA_SUCCESS) return fail(EXIT_DRIVER, "cuInit: %s", cu_name(r));
    int version = 0;
    api.cuDriverGetVersion(&version);
    say("cuda_driver_version", "%d", version);
    r = api.cuDeviceGetCount(&device_count);
    if (r != CUDA_SUCCESS) return fail(EXIT_DRIVER, "cuDeviceGetCount: %s", cu_name(r));
    say("devices", "%d", device_count);
    if (device_count == 0) return EXIT_NO_GPU;
    if (device_count > 64) device_count = 64;
    for (int i = 0; i < device_count; i++) {
        CUdevice dev;
        char name[256] = "", kb[64], text[48];
        CUuuid uuid;
        size_t total = 0, free = 0, info_total = 0;
        if ((r = api.cuDeviceGet(&dev, i)) != CUDA_SUCCESS ||
            (r = api.cuDeviceGetName(name, sizeof name, dev)) != CUDA_SUCCESS ||
            (r = api.cuDeviceGetUuid(&uuid, dev)) != CUDA_SUCCESS ||
            (r = api.cuDeviceTotalMem_v2(&total, dev)) != CUDA_SUCCESS ||
            (r = api.cuDevicePrimaryCtxRetain(&contexts[i], dev)) != CUDA_SUCCESS ||
            (r = api.cuCtxSetCurrent(contexts[i])) != CUDA_SUCCESS ||
            (r = api.cuMemGetInfo_v2(&free, &info_total)) != CUDA_SUCCESS)
            return fail(EXIT_DRIVER, "device %d: %s", i, cu_name(r));
        vs_uuid_format((const uint8_t *)uuid.bytes, text, sizeof text);
        say(key(kb, "device.%d.name", i), "%s", name);
        say(key(kb, "device.%d.uuid", i), "%s", text);
        say(key(kb, "device.%d.total_mib", i), "%llu", mib(total));
        say(key(kb, "device.%d.info_free_mib", i), "%llu", mib(free));
        say(key(kb, "device.%d.info_total_mib", i), "%llu", mib(info_total));
    }
    return 0;
}

static unsigned processes(nvmlDevice_t d, nvmlProcessInfo_t *out, unsigned room) {
    unsigned n = room;
    return api.nvmlDeviceGetComputeRunningProcesses_v3(d, &n, out) == NVML_SUCCESS ? n : 0;
}

static void print_used(const char *name, unsigned long long bytes) {
    if (bytes == ~0ull) /* NVML_VALUE_NOT_AVAILABLE */
        say(name, "n/a");
    else
        say(name, "%llu", mib(bytes));
}

static void report_nvml(void) {
    unsigned count = 0;
    api.nvmlDeviceGetCount_v2(&count);
    say("nvml.devices", "%u", count);
    for (unsigned j = 0; j < count; j++) {
        nvmlDevice_t d;
        nvmlMemory_t m = {0, 0, 0};
        nvmlProcessInfo_t procs[64];
        char name[96] = "", uuid[96] = "", kb[64];
        if (api.nvmlDeviceGetHandleByIndex_v2(j, &d) != NVML_SUCCESS) continue;
        api.nvmlDeviceGetName(d, name, sizeof name);
        api.nvmlDeviceGetUUID(d, uuid, sizeof uuid);
        api.nvmlDeviceGetMemoryInfo(d, &m);
        unsigned n = processes(d, procs, 64);
        say(key(kb, "nvml.%u.name", j), "%s", name);
        say(key(kb, "nvml.%u.uuid", j), "%s", uuid);
        say(key(kb, "nvml.%u.total_mib", j), "%llu", mib(m.total));
        say(key(kb, "nvml.%u.used_mib", j), "%llu", mib(m.used));
        say(key(kb, "nvml.%u.free_mib", j), "%llu", mib(m.free));
        say(key(kb, "nvml.%u.processes", j), "%u", n);
        for (unsigned k = 0; k < n; k++) {
            say(key(kb, "nvml.%u.process.%u.pid", j, k), "%u", procs[k].pid);
            print_used(key(kb, "nvml.%u.process.%u.used_mib", j, k), procs[k].usedGpuMemory);
        }
    }
}

/* The NVML device that is CUDA device dev (matched by UUID), or NULL. */
static nvmlDevice_t nvml_device_of(int dev) {
    CUdevice d;
    CUuuid uuid;
    unsigned count = 0;
    if (api.nvmlDeviceGetCount_v2 == NULL || api.cuDeviceGet(&d, dev) != CUDA_SUCCESS ||
        api.cuDeviceGetUuid(&uuid, d) != CUDA_SUCCESS || api.nvmlDeviceGetCount_v2(&count) != 0)
        return NULL;
    for (unsigned j = 0; j < count; j++) {
        nvmlDevice_t handle;
        char text[96];
        uint8_t bytes[16];
        if (api.nvmlDeviceGetHandleByIndex_v2(j, &handle) != NVML_SUCCESS ||
            api.nvmlDeviceGetUUID(handle, text, sizeof text) != NVML_SUCCESS)
            continue;
        vs_uuid_from_text(text, bytes);
        if (memcmp(bytes, uuid.bytes, 16) == 0) return handle;
    }
    return NULL;
}

/* ---- memory: allocate until the driver refuses ---- */
static CUdeviceptr *held;
static size_t held_count, held_room;
static uint64_t held_bytes;

static CUresult take(uint64_t bytes) {
    CUdeviceptr p;
    CUresult r = api.cuMemAlloc_v2(&p, bytes);
    if (r != CUDA_SUCCESS) return r;
    if (held_count == held_room) {
        held_room = held_room ? 2 * held_room : 1024;
        held = realloc(held, held_room * sizeof *held);
    }
    held[held_count++] = p;
    held_bytes += bytes;
    return r;
}

static void release_all(void) {
    while (held_count > 0) api.cuMemFree_v2(held[--held_count]);
    say("freed_mib", "%llu", mib(held_bytes));
    held_bytes = 0;
}

static void report_at_oom(int dev, int nvml_ok) {
    size_t free = 0, total = 0;
    api.cuMemGetInfo_v2(&free, &total);
    say("at_oom.info_free_mib", "%llu", mib(free));
    nvmlDevice_t d = nvml_ok ? nvml_device_of(dev) : NULL;
    nvmlMemory_t m = {0, 0, 0};
    if (d == NULL || api.nvmlDeviceGetMemoryInfo(d, &m) != NVML_SUCCESS) {
        say("at_oom.nvml_used_mib", "n/a");
        say("at_oom.nvml_process_used_mib", "n/a");
        return;
    }
    say("at_oom.nvml_used_mib", "%llu", mib(m.used));
    nvmlProcessInfo_t procs[64];
    unsigned n = processes(d, procs, 64);
    unsigned long long mine = ~0ull;
    for (unsigned k = 0; k < n; k++)
        if (procs[k].pid == (unsigned)getpid()) mine = procs[k].usedGpuMemory;
    print_used("at_oom.nvml_process_used_mib", mine);
}

static int run_memory(const struct options *o, int nvml_ok) {
    say("step_mib", "%llu", mib(o->step));
    CUresult r;
    while ((r = take(o->step)) == CUDA_SUCCESS) {
    }
    say("allocated_mib", "%llu", mib(held_bytes));
    say("oom_at_mib", "%llu", mib(held_bytes + o->step));
    say("oom_error", "%s", cu_name(r));
    for (uint64_t step = o->step / 2; step >= MIB; step /= 2) /* to the last MiB */
        while (take(step) == CUDA_SUCCESS) {
        }
    say("max_allocated_mib", "%llu", mib(held_bytes));
    report_at_oom(o->device, nvml_ok);
    if (o->hold > 0) {
        say("holding_seconds", "%g", o->hold);
        fflush(stdout);
        sleep_s(o->hold);
    }
    release_all();
    if (r != CUDA_ERROR_OUT_OF_MEMORY)
        return fail(EXIT_CHECK, "the driver refused with %s, not out of memory", cu_name(r));
    return 0;
}

static int run_hold(const struct options *o) {
    CUresult r = take(o->memory);
    if (r != CUDA_SUCCESS) {
        say("hold_error", "%s", cu_name(r));
        return fail(EXIT_CHECK, "cannot allocate %llu MiB on device %d", mib(o->memory), o->device);
    }
    /* sleep_s polls the flag (the handler may run on another thread). */
    struct sigaction stop = {.sa_handler = on_stop};
    sigemptyset(&stop.sa_mask);
    sigaction(SIGTERM, &stop, NULL);
    say("held_mib", "%llu", mib(held_bytes));
    say("holding_seconds", "%g", o->seconds);
    fflush(stdout);
    sleep_s(o->seconds);
    if (stop_requested) say("hold_stopped", "SIGTERM");
    release_all();
    return 0;
}

/* ---- compute: a graph [record start, spin kernel, record end] launched for N seconds ----
 * The kernel is timed by the two events inside one launch: a compute limiter that delays the
 * launch (vslice, HAMi) delays both events with it, so the idle time it inserts is not counted
 * as kernel time, as it would be with events recorded around a cuLaunchKernel call. */
struct measured {
    CUgraphExec exec;
    CUevent start, end;
    int in_flight;
};

static CUresult build(struct measured *m, CUfunction f, void **params) {
    CUgraph graph;
    CUgraphNode first, kernel, last;
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.func = f;
    p.gridDimX = p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = 32;
    p.blockDimY = p.blockDimZ = 1;
    p.kernelParams = params;
    CUresult r = api.cuEventCreate(&m->start, CU_EVENT_DEFAULT);
    if (r == CUDA_SUCCESS) r = api.cuEventCreate(&m->end, CU_EVENT_DEFAULT);
    if (r == CUDA_SUCCESS) r = api.cuGraphCreate(&graph, 0);
    if (r == CUDA_SUCCESS) r = api.cuGraphAddEventRecordNode(&first, graph, NULL, 0, m->start);
    if (r == CUDA_SUCCESS) r = api.cuGraphAddKernelNode_v2(&kernel, graph, &first, 1, &p);
    if (r == CUDA_SUCCESS) r = api.cuGraphAddEventRecordNode(&last, graph, &kernel, 1, m->end);
    if (r == CUDA_SUCCESS) r = api.cuGraphInstantiateWithFlags(&m->exec, graph, 0);
    return r;
}

/* Waits for a launch to finish and adds its kernel time. */
static CUresult settle(struct measured *m, double *busy_ms) {
    float ms = 0;
    if (!m->in_flight) return CUDA_SUCCESS;
    m->in_flight = 0;
    CUresult r = api.cuEventSynchronize(m->end);
    if (r == CUDA_SUCCESS) r = api.cuEventElapsedTime(&ms, m->start, m->end);
    *busy_ms += ms;
    return r;
}

static int run_compute(const struct options *o) {
    CUdevice dev;
    CUmodule module;
    CUfunction spin;
    int khz = 0;
    CUresult r = api.cuDeviceGet(&dev, o->device);
    if (r == CUDA_SUCCESS) r = api.cuDeviceGetAttribute(&khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev);
    if (r == CUDA_SUCCESS) r = api.cuModuleLoadData(&module, test_ptx);
    if (r == CUDA_SUCCESS) r = api.cuModuleGetFunction(&spin, module, "spin");
    if (r != CUDA_SUCCESS) return fail(EXIT_CHECK, "cannot load the PTX kernel: %s", cu_name(r));
    unsigned long long cycles = (unsigned long long)(o->kernel_ms * khz); /* ms x kHz */
    void *params[] = {&cycles};
    struct measured m[GRAPHS];
    memset(m, 0, sizeof m);
    for (int i = 0; i < GRAPHS && r == CUDA_SUCCESS; i++) r = build(&m[i], spin, params);
    if (r != CUDA_SUCCESS) return fail(EXIT_CHECK, "cannot build the kernel graph: %s", cu_name(r));
    say("kernel_ms", "%g", o->kernel_ms);
    say("seconds", "%g", o->seconds);
    double busy_ms = 0, start = now_s();
    long launches = 0;
    while (r == CUDA_SUCCESS && now_s() - start < o->seconds) {
        struct measured *next = &m[launches % GRAPHS];
        r = settle(next, &busy_ms);
        if (r == CUDA_SUCCESS) r = api.cuGraphLaunch(next->exec, NULL);
        next->in_flight = r == CUDA_SUCCESS;
        launches += r == CUDA_SUCCESS;
    }
    for (int i = 0; i < GRAPHS; i++) {
        CUresult s = settle(&m[i], &busy_ms);
        if (r == CUDA_SUCCESS) r = s;
    }
    double wall_ms = (now_s() - start) * 1000;
    say("launches", "%ld", launches);
    say("busy_ms", "%.1f", busy_ms);
    say("wall_ms", "%.1f", wall_ms);
    say("busy_fraction", "%.2f", wall_ms > 0 ? busy_ms / wall_ms : 0);
    if (r != CUDA_SUCCESS) return fail(EXIT_CHECK, "a launch failed: %s", cu_name(r));
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct options o;
    int status = parse_options(argc, argv, &o);
    if (status != 0) return status;
    printf("vslice-smoke version=%d mode=%s\n", VERSION, o.mode);
    say("pid", "%d", (int)getpid());
    if ((status = load_cuda(o.cuda_library)) != 0) return status;
    int cuda_status = report_devices();
    if (cuda_status != 0 && cuda_status != EXIT_NO_GPU) return cuda_status;
    int nvml_ok = load_nvml(o.nvml_library) == 0;
    if (nvml_ok) report_nvml(); /* also without a CUDA device: NVML may say why */
    if (cuda_status == EXIT_NO_GPU) return fail(EXIT_NO_GPU, "no GPU visible to CUDA");
    if (o.device >= device_count)
        return fail(EXIT_USAGE, "--device %d: only %d GPU(s) visible", o.device, device_count);
    say("device", "%d", o.device);
    api.cuCtxSetCurrent(contexts[o.device]);
    status = strcmp(o.mode, "memory") == 0 ? run_memory(&o, nvml_ok)
             : strcmp(o.mode, "hold") == 0 ? run_hold(&o)
                                           : run_compute(&o);
    if (nvml_ok) api.nvmlShutdown();
    for (int i = 0; i < device_count; i++) {
        CUdevice dev;
        if (api.cuDeviceGet(&dev, i) == CUDA_SUCCESS) api.cuDevicePrimaryCtxRelease_v2(dev);
    }
    if (status == 0) say("result", "ok");
    return status;
}
