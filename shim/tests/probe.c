/*
 * A CUDA program written against the driver API, run by the tests with and without the shim.
 * Each argument is a command; each command prints one line "<command> <CUresult> [key=value]".
 *
 *   ctx:<ordinal>        cuInit, retain the primary context of the device and make it current
 *   alloc:<size>         cuMemAlloc_v2                managed:<size>   cuMemAllocManaged
 *   async:<size>         cuMemAllocAsync              pool:<size>      cuMemAllocFromPoolAsync
 *   pitch:<w>:<h>        cuMemAllocPitch_v2           vmm:<size>       cuMemCreate (+ map)
 *   array:<w>:<h>        cuArrayCreate_v2 (float4)    array3d:<w>:<h>:<d>   cuArray3DCreate_v2
 *   mipmap:<w>:<h>:<levels>  cuMipmappedArrayCreate
 *   procaddr:<size>      cuMemAlloc resolved by dlopen + dlsym(cuGetProcAddress_v2)
 *   procaddr_linked:<size>  cuMemAlloc resolved through the linked cuGetProcAddress
 *   free                 frees the last allocation (of any kind)    freeall   frees them all
 *   info                 cuMemGetInfo_v2              total:<ordinal>  cuDeviceTotalMem_v2
 *   nvml                 NVML memory of every device (GetMemoryInfo and _v2)
 *   procs                NVML compute processes of every device: a "procs" line per device
 *                        (sizing call, room for one, count, whether v1/v2/v3 agree), a "proc"
 *                        line per process
 *   stress:<threads>:<iterations>:<size>   threads allocating and freeing at once
 *   kernels:<seconds>:<us>[:<api>]   launch <us>-microsecond kernels for <seconds>, syncing
 *                        every 16 (fake driver: a function named fake_kernel_<us>); api is
 *                        plain (cuLaunchKernel), ptsz, ex (cuLaunchKernelEx), coop
 *                        (cuLaunchCooperativeKernel)
 *   graph:<seconds>:<us>:<nodes>   launch a graph of <nodes> <us>-microsecond kernels
 *   spin:<seconds>:<us>  the same with the PTX spin kernel (real GPU: SM clock cycles)
 *   version              cuDriverGetVersion
 *   init                 cuInit and cuDeviceGetCount
 *   devices              a "device" line per CUDA device: ordinal, total, uuid (32 hex digits of
 *                        cuDeviceGetUuid), name (last, may hold spaces)
 *   nvmlids              a "nvmlid" line per NVML device: index, minor, uuid, name (last)
 *   nvmlv1               nvmlInit, nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex (v1 names)
 *                        against their _v2 forms
 *   putil:<last_seen_us> nvmlDeviceGetProcessUtilization of every device: a "putil" line each
 *                        (sizing call, room for none, the call, the first sample)
 *   attr:<n>             cuDeviceGetAttribute(n) of the current device
 *   mkpool:<max size>    cuMemPoolCreate on the current device (0 = no maximum)
 *   cpool:<size>         cuMemAllocFromPoolAsync from the pool made by mkpool
 *   setpool / getpool    cuDeviceSetMemPool(that pool) / which pool cuDeviceGetMemPool gives
 *   poolattr             that pool's CU_MEMPOOL_ATTR_* values
 *   threshold:<size>     its release threshold      resethigh   resets its high-water marks
 *   rmpool               cuMemPoolDestroy
 *   host:<size>          cuMemHostAlloc (portable, device-mapped)   pinned:<size>  cuMemAllocHost
 *   hold                 print "ready" and wait to be killed          sleep:<ms>
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ptx.h"
#include "testlib.h"
#include "vslice/cuda_abi.h"
#include "vslice/nvml_abi.h"

enum kind { PTR, ARRAY, MIPMAP, VMM, HOST };
struct held {
    enum kind kind;
    uint64_t handle;
};
static struct held held[4096];
static int held_count;

static void keep(enum kind kind, uint64_t handle) {
    if (held_count < 4096) held[held_count++] = (struct held){kind, handle};
}

static CUresult release(struct held h) {
    switch (h.kind) {
    case PTR: return cuMemFree_v2(h.handle);
    case ARRAY: return cuArrayDestroy((CUarray)(uintptr_t)h.handle);
    case MIPMAP: return cuMipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)h.handle);
    case VMM: return cuMemRelease(h.handle);
    case HOST: return cuMemFreeHost((void *)(uintptr_t)h.handle);
    }
    return CUDA_ERROR_INVALID_VALUE;
}

static CUresult do_ctx(int ordinal) {
    CUresult r = cuInit(0);
    CUdevice dev;
    CUcontext ctx;
    if (r == CUDA_SUCCESS) r = cuDeviceGet(&dev, ordinal);
    if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(&ctx, dev);
    if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(ctx);
    return r;
}

static CUresult do_vmm(uint64_t size) {
    CUdevice dev;
    CUresult r = cuCtxGetDevice(&dev);
    if (r != CUDA_SUCCESS) return r;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    CUmemGenericAllocationHandle handle;
    r = cuMemCreate(&handle, size, &prop, 0);
    if (r != CUDA_SUCCESS) return r;
    CUdeviceptr va;
    if (cuMemAddressReserve(&va, size, 0, 0, 0) == CUDA_SUCCESS) {
        cuMemMap(va, size, 0, handle, 0); /* mapping takes no extra memory */
        cuMemUnmap(va, size);
        cuMemAddressFree(va, size);
    }
    keep(VMM, handle);
    return r;
}

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*proc_v2_fn)(const char *, void **, int, cuuint64_t,
                               CUdriverProcAddressQueryResult *);

/* What the CUDA runtime does: dlopen the driver, look up cuGetProcAddress, resolve by name. */
static CUresult do_procaddr(uint64_t size, int linked) {
    void *fn = NULL;
    CUdriverProcAddressQueryResult status;
    CUresult r;
    if (linked) {
        r = cuGetProcAddress_v2("cuMemAlloc", &fn, 12080, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    } else {
        void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        proc_v2_fn get = lib ? (proc_v2_fn)dlsym(lib, "cuGetProcAddress_v2") : NULL;
        if (get == NULL) return CUDA_ERROR_NOT_FOUND;
        r = get("cuMemAlloc", &fn, 12080, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    }
    if (r != CUDA_SUCCESS) return r;
    CUdeviceptr p;
    r = ((alloc_fn)fn)(&p, size);
    if (r == CUDA_SUCCESS) keep(PTR, p);
    return r;
}

static void do_nvml(void) {
    unsigned count = 0;
    nvmlInit_v2();
    nvmlDeviceGetCount_v2(&count);
    for (unsigned i = 0; i < count; i++) {
        nvmlDevice_t d;
        nvmlMemory_t m;
        nvmlMemory_v2_t m2;
        memset(&m2, 0, sizeof m2);
        m2.version = nvmlMemory_v2;
        nvmlDeviceGetHandleByIndex_v2(i, &d);
        int r1 = nvmlDeviceGetMemoryInfo(d, &m), r2 = nvmlDeviceGetMemoryInfo_v2(d, &m2);
        printf("nvml %d index=%u total=%llu used=%llu free=%llu total2=%llu used2=%llu "
               "free2=%llu\n",
               r1 | r2, i, m.total, m.used, m.free, m2.total, m2.used, m2.free);
    }
    nvmlShutdown();
}

static void do_procs(void) {
    unsigned count = 0;
    nvmlInit_v2();
    nvmlDeviceGetCount_v2(&count);
    for (unsigned i = 0; i < count; i++) {
        nvmlDevice_t d;
        nvmlProcessInfo_v1_t v1[64];
        nvmlProcessInfo_v2_t v2[64];
        nvmlProcessInfo_t v3[64];
        unsigned needed = 0, n1 = 64, n2 = 64, n3 = 64;
        nvmlDeviceGetHandleByIndex_v2(i, &d);
        int sizing = nvmlDeviceGetComputeRunningProcesses_v3(d, &needed, NULL);
        unsigned one = 1;
        int small = nvmlDeviceGetComputeRunningProcesses_v3(d, &one, v3);
        int r = nvmlDeviceGetComputeRunningProcesses_v3(d, &n3, v3);
        r |= nvmlDeviceGetComputeRunningProcesses_v2(d, &n2, v2);
        r |= nvmlDeviceGetComputeRunningProcesses(d, &n1, v1);
        int agree = n1 == n3 && n2 == n3;
        for (unsigned k = 0; agree && k < n3; k++)
            agree = v1[k].pid == v3[k].pid && v2[k].pid == v3[k].pid &&
                    v1[k].usedGpuMemory == v3[k].usedGpuMemory &&
                    v2[k].usedGpuMemory == v3[k].usedGpuMemory &&
                    v2[k].gpuInstanceId == v3[k].gpuInstanceId;
        printf("procs %d index=%u count=%u sizing=%d needed=%u small=%d one=%u agree=%d\n", r, i,
               n3, sizing, needed, small, one, agree);
        for (unsigned k = 0; r == 0 && k < n3; k++)
            printf("proc 0 index=%u pid=%u used=%llu gi=%u ci=%u\n", i, v3[k].pid,
                   v3[k].usedGpuMemory, v3[k].gpuInstanceId, v3[k].computeInstanceId);
    }
    nvmlShutdown();
}

static void do_devices(void) {
    int count = 0;
    cuDeviceGetCount(&count);
    for (int i = 0; i < count; i++) {
        CUdevice dev;
        CUuuid u;
        size_t total = 0;
        char name[256] = "", hex[33];
        CUresult r = cuDeviceGet(&dev, i);
        if (r == CUDA_SUCCESS) r = cuDeviceGetName(name, sizeof name, dev);
        if (r == CUDA_SUCCESS) r = cuDeviceGetUuid(&u, dev);
        if (r == CUDA_SUCCESS) r = cuDeviceTotalMem_v2(&total, dev);
        for (int k = 0; k < 16; k++) snprintf(hex + 2 * k, 3, "%02x", (unsigned char)u.bytes[k]);
        printf("device %d ordinal=%d total=%zu uuid=%s name=%s\n", r, i, total, hex, name);
    }
}

static void do_nvmlids(void) {
    unsigned count = 0;
    nvmlInit_v2();
    nvmlDeviceGetCount_v2(&count);
    for (unsigned i = 0; i < count; i++) {
        nvmlDevice_t d;
        unsigned index = 99, minor = 99;
        char uuid[96] = "", name[96] = "";
        int r = nvmlDeviceGetHandleByIndex_v2(i, &d);
        r |= nvmlDeviceGetIndex(d, &index) | nvmlDeviceGetMinorNumber(d, &minor);
        r |= nvmlDeviceGetUUID(d, uuid, sizeof uuid) | nvmlDeviceGetName(d, name, sizeof name);
        nvmlDevice_t by_uuid = NULL;
        r |= nvmlDeviceGetHandleByUUID(uuid, &by_uuid);
        printf("nvmlid %d index=%u minor=%u byuuid=%d uuid=%s name=%s\n", r, index, minor,
               by_uuid == d, uuid, name);
    }
    nvmlShutdown();
}

static void do_nvml_v1(void) {
    unsigned count = 0, count2 = 0;
    int r = nvmlInit() | nvmlDeviceGetCount(&count) | nvmlDeviceGetCount_v2(&count2);
    int same = count == count2;
    for (unsigned i = 0; i < count; i++) {
        nvmlDevice_t v1 = NULL, v2 = NULL;
        r |= nvmlDeviceGetHandleByIndex(i, &v1) | nvmlDeviceGetHandleByIndex_v2(i, &v2);
        same = same && v1 == v2 && v1 != NULL;
    }
    nvmlDevice_t beyond = NULL;
    int out_of_range = nvmlDeviceGetHandleByIndex(count, &beyond);
    printf("nvmlv1 %d count=%u same=%d beyond=%d\n", r, count, same, out_of_range);
    nvmlShutdown();
}

static void do_putil(unsigned long long last_seen) {
    unsigned count = 0;
    nvmlInit_v2();
    nvmlDeviceGetCount_v2(&count);
    for (unsigned i = 0; i < count; i++) {
        nvmlDevice_t d;
        nvmlProcessUtilizationSample_t samples[8];
        memset(samples, 0, sizeof samples);
        nvmlDeviceGetHandleByIndex_v2(i, &d);
        unsigned needed = 0, none = 0, n = 8;
        int sizing = nvmlDeviceGetProcessUtilization(d, NULL, &needed, last_seen);
        int small = nvmlDeviceGetProcessUtilization(d, samples, &none, last_seen);
        int r = nvmlDeviceGetProcessUtilization(d, samples, &n, last_seen);
        printf("putil %d index=%u sizing=%d needed=%u small=%d none=%u count=%u pid=%u sm=%u "
               "mem=%u ts=%llu\n",
               r, i, sizing, needed, small, none, r == 0 ? n : 0, samples[0].pid,
               samples[0].smUtil, samples[0].memUtil, samples[0].timeStamp);
    }
    nvmlShutdown();
}

static CUmemoryPool made_pool;

static CUresult do_mkpool(uint64_t max_size) {
    CUdevice dev;
    CUresult r = cuCtxGetDevice(&dev);
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = dev;
    props.maxSize = max_size;
    if (r == CUDA_SUCCESS) r = cuMemPoolCreate(&made_pool, &props);
    return r;
}

static void do_poolattr(void) {
    cuuint64_t used = 0, used_high = 0, reserved = 0, reserved_high = 0, threshold = 0;
    int reuse = 0;
    CUresult r = cuMemPoolGetAttribute(made_pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used);
    r |= cuMemPoolGetAttribute(made_pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &used_high);
    r |= cuMemPoolGetAttribute(made_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
    r |= cuMemPoolGetAttribute(made_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &reserved_high);
    r |= cuMemPoolGetAttribute(made_pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
    r |= cuMemPoolGetAttribute(made_pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse);
    printf("poolattr %d used=%llu used_high=%llu reserved=%llu reserved_high=%llu threshold=%llu "
           "reuse=%d\n",
           (int)r, (unsigned long long)used, (unsigned long long)used_high,
           (unsigned long long)reserved, (unsigned long long)reserved_high,
           (unsigned long long)threshold, reuse);
}

struct stress {
    CUcontext ctx;
    int iterations;
    uint64_t size;
    int failures, refused;
};

static void *stress_thread(void *arg) {
    struct stress *s = arg;
    cuCtxSetCurrent(s->ctx);
    for (int i = 0; i < s->iterations; i++) {
        CUdeviceptr p;
        CUresult r = cuMemAlloc_v2(&p, s->size);
        if (r == CUDA_ERROR_OUT_OF_MEMORY) {
            s->refused++;
            continue;
        }
        if (r != CUDA_SUCCESS || cuMemFree_v2(p) != CUDA_SUCCESS) s->failures++;
    }
    return NULL;
}

static int do_stress(int threads, int iterations, uint64_t size) {
    pthread_t tid[64];
    struct stress work[64];
    CUcontext ctx;
    cuCtxGetCurrent(&ctx);
    int failures = 0, refused = 0;
    for (int t = 0; t < threads && t < 64; t++) {
        work[t] = (struct stress){ctx, iterations, size, 0, 0};
        pthread_create(&tid[t], NULL, stress_thread, &work[t]);
    }
    for (int t = 0; t < threads && t < 64; t++) {
        pthread_join(tid[t], NULL);
        failures += work[t].failures;
        refused += work[t].refused;
    }
    printf("stress %d failures=%d refused=%d\n", failures ? 1 : 0, failures, refused);
    return 0;
}

static CUresult launch(const char *api, CUfunction f, void **params) {
    if (strcmp(api, "ptsz") == 0)
        return cuLaunchKernel_ptsz(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL);
    if (strcmp(api, "coop") == 0)
        return cuLaunchCooperativeKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, params);
    if (strcmp(api, "ex") == 0) {
        CUlaunchConfig config;
        memset(&config, 0, sizeof config);
        config.gridDimX = config.gridDimY = config.gridDimZ = 1;
        config.blockDimX = 32;
        config.blockDimY = config.blockDimZ = 1;
        return cuLaunchKernelEx(&config, f, params, NULL);
    }
    return cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL);
}

static CUresult do_kernels(const char *label, double seconds, unsigned us, int spin,
                           const char *api) {
    CUmodule module;
    CUfunction f;
    char name[64];
    snprintf(name, sizeof name, spin ? "spin" : "fake_kernel_%u", us);
    CUresult r = cuModuleLoadData(&module, test_ptx);
    if (r == CUDA_SUCCESS) r = cuModuleGetFunction(&f, module, name);
    CUdevice dev;
    int khz = 0;
    if (r == CUDA_SUCCESS) r = cuCtxGetDevice(&dev);
    if (r == CUDA_SUCCESS) r = cuDeviceGetAttribute(&khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev);
    if (r != CUDA_SUCCESS) {
        printf("%s %d\n", label, r);
        return r;
    }
    unsigned long long cycles = (unsigned long long)us * (unsigned long long)khz / 1000ull;
    void *params[] = {&cycles};
    uint64_t start = test_now_ns(), stop = start + (uint64_t)(seconds * 1e9);
    long launches = 0;
    while (test_now_ns() < stop && r == CUDA_SUCCESS) {
        r = launch(api, f, spin ? params : NULL);
        if (++launches % 16 == 0) cuCtxSynchronize();
    }
    cuCtxSynchronize();
    printf("%s %d start=%llu end=%llu launches=%ld\n", label, r, (unsigned long long)start,
           (unsigned long long)test_now_ns(), launches);
    return r;
}

static CUresult do_graph(double seconds, unsigned us, unsigned nodes) {
    CUmodule module;
    CUfunction f;
    CUgraph graph;
    CUgraphExec exec;
    char name[64];
    snprintf(name, sizeof name, "fake_kernel_%u", us);
    CUresult r = cuModuleLoadData(&module, test_ptx);
    if (r == CUDA_SUCCESS) r = cuModuleGetFunction(&f, module, name);
    if (r == CUDA_SUCCESS) r = cuGraphCreate(&graph, 0);
    CUgraphNode previous = NULL;
    for (unsigned i = 0; i < nodes && r == CUDA_SUCCESS; i++) {
        CUDA_KERNEL_NODE_PARAMS p;
        memset(&p, 0, sizeof p);
        p.func = f;
        p.gridDimX = p.gridDimY = p.gridDimZ = 1;
        p.blockDimX = 32;
        p.blockDimY = p.blockDimZ = 1;
        CUgraphNode node;
        r = cuGraphAddKernelNode_v2(&node, graph, previous ? &previous : NULL, previous ? 1 : 0, &p);
        previous = node;
    }
    if (r == CUDA_SUCCESS) r = cuGraphInstantiateWithFlags(&exec, graph, 0);
    uint64_t start = test_now_ns(), stop = start + (uint64_t)(seconds * 1e9);
    long launches = 0;
    while (r == CUDA_SUCCESS && test_now_ns() < stop) {
        r = cuGraphLaunch(exec, NULL);
        if (++launches % 4 == 0) cuCtxSynchronize();
    }
    cuCtxSynchronize();
    printf("graph %d start=%llu end=%llu launches=%ld\n", r, (unsigned long long)start,
           (unsigned long long)test_now_ns(), launches);
    return r;
}

#define ARGS(fmt, ...) (sscanf(arg, fmt, __VA_ARGS__))
#define REPORT(r) printf("%s %d\n", arg, (int)(r))

static void run(const char *arg) {
    char size_text[32];
    unsigned long a = 0, b = 0, c = 0;
    CUdeviceptr p = 0;
    CUresult r;
    if (ARGS("ctx:%lu", &a) == 1) {
        REPORT(do_ctx((int)a));
    } else if (ARGS("alloc:%31s", size_text) == 1) {
        r = cuMemAlloc_v2(&p, test_size(size_text));
        if (r == CUDA_SUCCESS) keep(PTR, p);
        REPORT(r);
    } else if (ARGS("managed:%31s", size_text) == 1) {
        r = cuMemAllocManaged(&p, test_size(size_text), CU_MEM_ATTACH_GLOBAL);
        if (r == CUDA_SUCCESS) keep(PTR, p);
        REPORT(r);
    } else if (ARGS("async:%31s", size_text) == 1) {
        r = cuMemAllocAsync(&p, test_size(size_text), NULL);
        if (r == CUDA_SUCCESS) keep(PTR, p);
        REPORT(r);
    } else if (ARGS("pool:%31s", size_text) == 1) {
        CUmemoryPool pool;
        CUdevice dev;
        cuCtxGetDevice(&dev);
        cuDeviceGetDefaultMemPool(&pool, dev);
        r = cuMemAllocFromPoolAsync(&p, test_size(size_text), pool, NULL);
        if (r == CUDA_SUCCESS) keep(PTR, p);
        REPORT(r);
    } else if (ARGS("mkpool:%31s", size_text) == 1) {
        REPORT(do_mkpool(test_size(size_text)));
    } else if (ARGS("cpool:%31s", size_text) == 1) {
        r = cuMemAllocFromPoolAsync(&p, test_size(size_text), made_pool, NULL);
        if (r == CUDA_SUCCESS) keep(PTR, p);
        REPORT(r);
    } else if (strcmp(arg, "setpool") == 0) {
        CUdevice dev;
        cuCtxGetDevice(&dev);
        REPORT(cuDeviceSetMemPool(dev, made_pool));
    } else if (strcmp(arg, "getpool") == 0) {
        CUdevice dev;
        CUmemoryPool current = NULL, fallback = NULL;
        cuCtxGetDevice(&dev);
        cuDeviceGetDefaultMemPool(&fallback, dev);
        r = cuDeviceGetMemPool(&current, dev);
        printf("getpool %d made=%d default=%d\n", r, current != NULL && current == made_pool,
               current != NULL && current == fallback);
    } else if (strcmp(arg, "poolattr") == 0) {
        do_poolattr();
    } else if (ARGS("threshold:%31s", size_text) == 1) {
        cuuint64_t value = test_size(size_text);
        REPORT(cuMemPoolSetAttribute(made_pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &value));
    } else if (strcmp(arg, "resethigh") == 0) {
        cuuint64_t zero = 0;
        r = cuMemPoolSetAttribute(made_pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero);
        r |= cuMemPoolSetAttribute(made_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero);
        REPORT(r);
    } else if (strcmp(arg, "rmpool") == 0) {
        REPORT(cuMemPoolDestroy(made_pool));
    } else if (ARGS("host:%31s", size_text) == 1) {
        void *h = NULL;
        r = cuMemHostAlloc(&h, test_size(size_text),
                           CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
        if (r == CUDA_SUCCESS) keep(HOST, (uintptr_t)h);
        REPORT(r);
    } else if (ARGS("pinned:%31s", size_text) == 1) {
        void *h = NULL;
        r = cuMemAllocHost_v2(&h, test_size(size_text));
        if (r == CUDA_SUCCESS) keep(HOST, (uintptr_t)h);
        REPORT(r);
    } else if (ARGS("attr:%lu", &a) == 1) {
        CUdevice dev;
        int value = -1;
        r = cuCtxGetDevice(&dev);
        if (r == CUDA_SUCCESS) r = cuDeviceGetAttribute(&value, (CUdevice_attribute)a, dev);
        printf("%s %d value=%d\n", arg, r, value);
    } else if (strcmp(arg, "init") == 0) {
        int count = -1;
        r = cuInit(0);
        cuDeviceGetCount(&count);
        printf("init %d count=%d\n", r, count);
    } else if (strcmp(arg, "devices") == 0) {
        do_devices();
    } else if (strcmp(arg, "nvmlids") == 0) {
        do_nvmlids();
    } else if (strcmp(arg, "nvmlv1") == 0) {
        do_nvml_v1();
    } else if (ARGS("putil:%31s", size_text) == 1) {
        do_putil(strtoull(size_text, NULL, 10));
    } else if (ARGS("pitch:%lu:%lu", &a, &b) == 2) {
        size_t pitch = 0;
        r = cuMemAllocPitch_v2(&p, &pitch, a, b, 4);
        if (r == CUDA_SUCCESS) keep(PTR, p);
        printf("%s %d pitch=%zu\n", arg, r, pitch);
    } else if (ARGS("vmm:%31s", size_text) == 1) {
        REPORT(do_vmm(test_size(size_text)));
    } else if (ARGS("array3d:%lu:%lu:%lu", &a, &b, &c) == 3) {
        CUDA_ARRAY3D_DESCRIPTOR d = {a, b, c, CU_AD_FORMAT_FLOAT, 4, 0};
        CUarray h;
        r = cuArray3DCreate_v2(&h, &d);
        if (r == CUDA_SUCCESS) keep(ARRAY, (uintptr_t)h);
        REPORT(r);
    } else if (ARGS("array:%lu:%lu", &a, &b) == 2) {
        CUDA_ARRAY_DESCRIPTOR d = {a, b, CU_AD_FORMAT_FLOAT, 4};
        CUarray h;
        r = cuArrayCreate_v2(&h, &d);
        if (r == CUDA_SUCCESS) keep(ARRAY, (uintptr_t)h);
        REPORT(r);
    } else if (ARGS("mipmap:%lu:%lu:%lu", &a, &b, &c) == 3) {
        CUDA_ARRAY3D_DESCRIPTOR d = {a, b, 0, CU_AD_FORMAT_FLOAT, 4, 0};
        CUmipmappedArray h;
        r = cuMipmappedArrayCreate(&h, &d, (unsigned)c);
        if (r == CUDA_SUCCESS) keep(MIPMAP, (uintptr_t)h);
        REPORT(r);
    } else if (ARGS("procaddr:%31s", size_text) == 1) {
        REPORT(do_procaddr(test_size(size_text), 0));
    } else if (ARGS("procaddr_linked:%31s", size_text) == 1) {
        REPORT(do_procaddr(test_size(size_text), 1));
    } else if (strcmp(arg, "free") == 0) {
        REPORT(held_count > 0 ? release(held[--held_count]) : CUDA_ERROR_INVALID_VALUE);
    } else if (strcmp(arg, "freeall") == 0) {
        r = CUDA_SUCCESS;
        while (held_count > 0 && r == CUDA_SUCCESS) r = release(held[--held_count]);
        REPORT(r);
    } else if (strcmp(arg, "info") == 0) {
        size_t free = 0, total = 0;
        r = cuMemGetInfo_v2(&free, &total);
        printf("info %d free=%zu total=%zu\n", r, free, total);
    } else if (ARGS("total:%lu", &a) == 1) {
        size_t bytes = 0;
        r = cuDeviceTotalMem_v2(&bytes, (CUdevice)a);
        printf("%s %d bytes=%zu\n", arg, r, bytes);
    } else if (strcmp(arg, "nvml") == 0) {
        do_nvml();
    } else if (strcmp(arg, "procs") == 0) {
        do_procs();
    } else if (ARGS("stress:%lu:%lu:%31s", &a, &b, size_text) == 3) {
        do_stress((int)a, (int)b, test_size(size_text));
    } else if (ARGS("kernels:%lu:%lu:%31s", &a, &b, size_text) == 3) {
        do_kernels("kernels", (double)a, (unsigned)b, 0, size_text);
    } else if (ARGS("kernels:%lu:%lu", &a, &b) == 2) {
        do_kernels("kernels", (double)a, (unsigned)b, 0, "plain");
    } else if (ARGS("graph:%lu:%lu:%lu", &a, &b, &c) == 3) {
        do_graph((double)a, (unsigned)b, (unsigned)c);
    } else if (ARGS("spin:%lu:%lu", &a, &b) == 2) {
        do_kernels("spin", (double)a, (unsigned)b, 1, "plain");
    } else if (strcmp(arg, "version") == 0) {
        int version = 0;
        r = cuDriverGetVersion(&version);
        printf("version %d value=%d\n", r, version);
    } else if (ARGS("sleep:%lu", &a) == 1) {
        usleep((useconds_t)a * 1000);
    } else if (strcmp(arg, "hold") == 0) {
        printf("ready\n");
        fflush(stdout);
        for (;;) pause();
    } else {
        printf("%s unknown-command\n", arg);
    }
    fflush(stdout);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) run(argv[i]);
    return 0;
}
