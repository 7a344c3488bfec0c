/*
 * A fake CUDA driver (libcuda.so.1) for tests: the subset of the driver API vslice and its
 * tests use, with the driver's semantics where tests can observe them: cuInit first, a current
 * context per thread, CUDA_VISIBLE_DEVICES (indices or UUIDs), device memory backed by host
 * memory with the device's capacity enforced, VMM granularity, asynchronous kernels on a
 * simulated device timeline, events timed by that timeline, cuGetProcAddress by version.
 *
 * Settings: FAKE_CUDA_DEVICE_COUNT (1), FAKE_CUDA_TOTAL_MEM (16g), FAKE_CUDA_CONTEXT_MEM (0),
 * FAKE_CUDA_KERNEL_NS (100000; a function named "fake_kernel_<us>" runs <us> microseconds),
 * FAKE_CUDA_STATE (file shared by processes; private memory when unset).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "device.h"
#include "vslice/cuda_abi.h"

#define GRANULARITY (2ull << 20)
#define QUEUE_LIMIT_NS 1000000000ull /* a launch blocks while the queue is this far ahead */

struct CUctx_st {
    int ordinal;
    int physical;
    int primary;
    int refcount;
};
struct CUstream_st {
    CUcontext ctx;
};
struct CUevent_st {
    uint64_t at_ns; /* 0 = never recorded */
};
struct CUmod_st {
    int loaded;
};
struct CUfunc_st {
    uint64_t duration_ns;
};
struct CUarray_st {
    uint64_t bytes;
    int physical;
};
struct CUmipmappedArray_st {
    uint64_t bytes;
    int physical;
};
struct CUmemPoolHandle_st {
    int ordinal;
};

static int initialized;
static int visible[FAKE_MAX_DEVICES]; /* ordinal -> physical index */
static int visible_count;
static struct CUctx_st primary[FAKE_MAX_DEVICES];
static struct CUmemPoolHandle_st pools[FAKE_MAX_DEVICES];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread CUcontext current;
static uint64_t kernel_ns = 100000, context_bytes;

/* ---- allocations: device pointer or VMM handle -> (bytes, device, host backing) ---- */
struct allocation {
    uint64_t key;
    uint64_t bytes;
    int physical;
    int vmm;
    void *host;
    struct allocation *next;
};
enum { BUCKETS = 4096 };
static struct allocation *buckets[BUCKETS];
static pthread_mutex_t alloc_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t next_handle = 1;

static unsigned bucket(uint64_t key) { return (unsigned)((key * 0x9E3779B97F4A7C15ull) >> 52); }

static void remember(uint64_t key, uint64_t bytes, int physical, int vmm, void *host) {
    struct allocation *a = malloc(sizeof *a);
    *a = (struct allocation){key, bytes, physical, vmm, host, NULL};
    pthread_mutex_lock(&alloc_lock);
    a->next = buckets[bucket(key)];
    buckets[bucket(key)] = a;
    pthread_mutex_unlock(&alloc_lock);
}

static struct allocation *forget(uint64_t key, int vmm) {
    pthread_mutex_lock(&alloc_lock);
    struct allocation *found = NULL;
    for (struct allocation **p = &buckets[bucket(key)]; *p != NULL; p = &(*p)->next) {
        if ((*p)->key == key && (*p)->vmm == vmm) {
            found = *p;
            *p = found->next;
            break;
        }
    }
    pthread_mutex_unlock(&alloc_lock);
    return found;
}

static void *host_memory(uint64_t bytes) {
    if (bytes < (1u << 20)) return aligned_alloc(256, (bytes + 255) & ~255ull);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void free_host(void *p, uint64_t bytes) {
    if (bytes < (1u << 20))
        free(p);
    else
        munmap(p, bytes);
}

/* ---- initialisation and devices ---- */
static int parse_visible_entry(const char *item, int count, uint8_t seen[]) {
    char *end = NULL;
    long n = strtol(item, &end, 10);
    if (end != item && *end == '\0') return (n >= 0 && n < count && !seen[n]) ? (int)n : -1;
    for (int i = 0; i < count; i++) {
        uint8_t u[16];
        char text[64];
        fake_uuid(i, u);
        snprintf(text, sizeof text,
                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                 u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                 u[14], u[15]);
        if (strlen(item) >= 8 && strncmp(text, item, strlen(item)) == 0 && !seen[i]) return i;
    }
    return -1;
}

/* Like the driver: the list stops at the first entry that is not a valid device. */
static void read_visible(int count) {
    const char *env = getenv("CUDA_VISIBLE_DEVICES");
    visible_count = 0;
    if (env == NULL) {
        for (int i = 0; i < count; i++) visible[visible_count++] = i;
        return;
    }
    char list[512];
    uint8_t seen[FAKE_MAX_DEVICES] = {0};
    snprintf(list, sizeof list, "%s", env);
    for (char *save = NULL, *item = strtok_r(list, ",", &save); item != NULL;
         item = strtok_r(NULL, ",", &save)) {
        int physical = parse_visible_entry(item, count, seen);
        if (physical < 0) break;
        seen[physical] = 1;
        visible[visible_count++] = physical;
    }
}

CUresult cuInit(unsigned int Flags) {
    if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (!initialized) {
        struct fake_state *s = fake_state();
        read_visible((int)s->device_count);
        const char *k = getenv("FAKE_CUDA_KERNEL_NS");
        if (k != NULL) kernel_ns = strtoull(k, NULL, 10);
        const char *c = getenv("FAKE_CUDA_CONTEXT_MEM");
        if (c != NULL && fake_parse_size(c, &context_bytes) != 0) context_bytes = 0;
        for (int i = 0; i < visible_count; i++) {
            primary[i] = (struct CUctx_st){i, visible[i], 1, 0};
            pools[i].ordinal = i;
        }
        initialized = 1;
    }
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

#define NEED_INIT                                                                                  \
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED
#define NEED_CTX                                                                                   \
    NEED_INIT;                                                                                     \
    if (current == NULL) return CUDA_ERROR_INVALID_CONTEXT

CUresult cuDriverGetVersion(int *driverVersion) {
    if (driverVersion == NULL) return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = 12080;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
    NEED_INIT;
    if (count == NULL) return CUDA_ERROR_INVALID_VALUE;
    *count = visible_count;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    NEED_INIT;
    if (device == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= visible_count) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

#define NEED_DEVICE(dev)                                                                           \
    NEED_INIT;                                                                                     \
    if ((dev) < 0 || (dev) >= visible_count) return CUDA_ERROR_INVALID_DEVICE

CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    NEED_DEVICE(dev);
    if (name == NULL || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "Fake NVIDIA GPU %d", visible[dev]);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
    NEED_DEVICE(dev);
    if (pi == NULL) return CUDA_ERROR_INVALID_VALUE;
    switch ((int)attrib) {
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *pi = 1000000; return CUDA_SUCCESS; /* kHz */
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = 132; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) {
    NEED_DEVICE(dev);
    if (uuid == NULL) return CUDA_ERROR_INVALID_VALUE;
    fake_uuid(visible[dev], (uint8_t *)uuid->bytes);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) { return cuDeviceGetUuid(uuid, dev); }

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    NEED_DEVICE(dev);
    if (bytes == NULL) return CUDA_ERROR_INVALID_VALUE;
    *bytes = (size_t)fake_state()->dev[visible[dev]].total;
    return CUDA_SUCCESS;
}

/* ---- contexts ---- */
static void context_born(int physical) {
    fake_reserve_memory(physical, context_bytes); /* a full device still gets its context */
    __atomic_fetch_add(&fake_state()->dev[physical].contexts, 1, __ATOMIC_RELAXED);
}

static void context_gone(int physical) {
    fake_release_memory(physical, context_bytes);
    __atomic_fetch_sub(&fake_state()->dev[physical].contexts, 1, __ATOMIC_RELAXED);
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    NEED_DEVICE(dev);
    if (pctx == NULL) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (primary[dev].refcount++ == 0) context_born(visible[dev]);
    pthread_mutex_unlock(&lock);
    *pctx = &primary[dev];
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    NEED_DEVICE(dev);
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_SUCCESS;
    if (primary[dev].refcount == 0)
        r = CUDA_ERROR_INVALID_CONTEXT;
    else if (--primary[dev].refcount == 0)
        context_gone(visible[dev]);
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
    (void)flags;
    NEED_DEVICE(dev);
    if (pctx == NULL) return CUDA_ERROR_INVALID_VALUE;
    CUcontext ctx = calloc(1, sizeof *ctx);
    *ctx = (struct CUctx_st){dev, visible[dev], 0, 1};
    context_born(ctx->physical);
    current = ctx;
    *pctx = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                        CUdevice dev) {
    (void)params;
    return cuCtxCreate_v2(pctx, flags, dev);
}

CUresult cuCtxDestroy_v2(CUcontext ctx) {
    NEED_INIT;
    if (ctx == NULL || ctx->primary) return CUDA_ERROR_INVALID_CONTEXT;
    if (current == ctx) current = NULL;
    context_gone(ctx->physical);
    free(ctx);
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
    NEED_INIT;
    current = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *pctx) {
    NEED_INIT;
    if (pctx == NULL) return CUDA_ERROR_INVALID_VALUE;
    *pctx = current;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device) {
    NEED_CTX;
    if (device == NULL) return CUDA_ERROR_INVALID_VALUE;
    *device = current->ordinal;
    return CUDA_SUCCESS;
}

static void sleep_until(uint64_t when) {
    uint64_t now = fake_now_ns();
    if (when <= now) return;
    struct timespec ts = {(time_t)((when - now) / 1000000000ull), (long)((when - now) % 1000000000ull)};
    nanosleep(&ts, NULL);
}

static struct fake_device_state *device_of_current(void) {
    return &fake_state()->dev[current->physical];
}

CUresult cuCtxSynchronize(void) {
    NEED_CTX;
    sleep_until(__atomic_load_n(&device_of_current()->free_at, __ATOMIC_ACQUIRE));
    return CUDA_SUCCESS;
}

/* ---- memory ---- */
static CUresult allocate(CUdeviceptr *dptr, uint64_t bytes, int physical) {
    if (dptr == NULL || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    if (fake_reserve_memory(physical, bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    void *host = host_memory(bytes);
    if (host == NULL) {
        fake_release_memory(physical, bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *dptr = (CUdeviceptr)(uintptr_t)host;
    remember(*dptr, bytes, physical, 0, host);
    return CUDA_SUCCESS;
}

static CUresult release(CUdeviceptr dptr) {
    struct allocation *a = forget(dptr, 0);
    if (a == NULL) return CUDA_ERROR_INVALID_VALUE;
    fake_release_memory(a->physical, a->bytes);
    free_host(a->host, a->bytes);
    free(a);
    return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    NEED_CTX;
    return allocate(dptr, bytesize, current->physical);
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
    NEED_CTX;
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != 0x2) return CUDA_ERROR_INVALID_VALUE;
    return allocate(dptr, bytesize, current->physical);
}

CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes) {
    NEED_CTX;
    if (pPitch == NULL || (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t pitch = (WidthInBytes + 511) & ~(size_t)511;
    CUresult r = allocate(dptr, (uint64_t)pitch * Height, current->physical);
    if (r == CUDA_SUCCESS) *pPitch = pitch;
    return r;
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    (void)hStream;
    NEED_CTX;
    return allocate(dptr, bytesize, current->physical);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    return cuMemAllocAsync(dptr, bytesize, hStream);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                 CUstream hStream) {
    (void)hStream;
    NEED_CTX;
    if (pool == NULL) return CUDA_ERROR_INVALID_VALUE;
    return allocate(dptr, bytesize, visible[pool->ordinal]);
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                      CUstream hStream) {
    return cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream);
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev) {
    NEED_DEVICE(dev);
    if (pool_out == NULL) return CUDA_ERROR_INVALID_VALUE;
    *pool_out = &pools[dev];
    return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
    NEED_INIT;
    if (dptr == 0) return CUDA_SUCCESS;
    return release(dptr);
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
    (void)hStream;
    NEED_INIT;
    return release(dptr);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
    return cuMemFreeAsync(dptr, hStream);
}

CUresult cuMemGetInfo_v2(size_t *free, size_t *total) {
    NEED_CTX;
    if (free == NULL || total == NULL) return CUDA_ERROR_INVALID_VALUE;
    struct fake_device_state *d = device_of_current();
    uint64_t used = __atomic_load_n(&d->used, __ATOMIC_RELAXED);
    *total = (size_t)d->total;
    *free = (size_t)(used >= d->total ? 0 : d->total - used);
    return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount) {
    NEED_CTX;
    if (dstDevice == 0 || srcHost == NULL) return CUDA_ERROR_INVALID_VALUE;
    memcpy((void *)(uintptr_t)dstDevice, srcHost, ByteCount);
    return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
    NEED_CTX;
    if (srcDevice == 0 || dstHost == NULL) return CUDA_ERROR_INVALID_VALUE;
    memcpy(dstHost, (const void *)(uintptr_t)srcDevice, ByteCount);
    return CUDA_SUCCESS;
}

/* ---- virtual memory management ---- */
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                     const CUmemAllocationProp *prop, unsigned long long flags) {
    NEED_INIT;
    if (handle == NULL || prop == NULL || flags != 0 || size == 0 || size % GRANULARITY != 0 ||
        prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id < 0 ||
        prop->location.id >= visible_count)
        return CUDA_ERROR_INVALID_VALUE;
    int physical = visible[prop->location.id];
    if (fake_reserve_memory(physical, size) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t key = __atomic_fetch_add(&next_handle, 1, __ATOMIC_RELAXED);
    remember(key, size, physical, 1, NULL);
    *handle = key;
    return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    NEED_INIT;
    struct allocation *a = forget(handle, 1);
    if (a == NULL) return CUDA_ERROR_INVALID_VALUE;
    fake_release_memory(a->physical, a->bytes);
    free(a);
    return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
    (void)alignment;
    (void)addr;
    NEED_INIT;
    if (ptr == NULL || size == 0 || size % GRANULARITY != 0 || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    *ptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    NEED_INIT;
    return munmap((void *)(uintptr_t)ptr, size) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Mapping takes no memory of its own: the physical memory was taken by cuMemCreate. */
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
    NEED_INIT;
    if (ptr == 0 || size == 0 || offset != 0 || flags != 0 || size % GRANULARITY != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct allocation *a = forget(handle, 1);
    if (a == NULL) return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = size <= a->bytes ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    remember(a->key, a->bytes, a->physical, 1, NULL);
    free(a);
    return r;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    NEED_INIT;
    return (ptr == 0 || size == 0) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* ---- arrays ---- */
static uint64_t format_bytes(CUarray_format f) {
    switch ((int)f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: return 4;
    default: return 0;
    }
}

static uint64_t one(size_t n) { return n == 0 ? 1 : n; }

CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d) {
    NEED_CTX;
    if (pHandle == NULL || d == NULL || d->Width == 0 || format_bytes(d->Format) == 0 ||
        (d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t bytes = d->Width * one(d->Height) * format_bytes(d->Format) * d->NumChannels;
    if (fake_reserve_memory(current->physical, bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    CUarray a = malloc(sizeof *a);
    *a = (struct CUarray_st){bytes, current->physical};
    *pHandle = a;
    return CUDA_SUCCESS;
}

static uint64_t bytes3d(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels) {
    uint64_t texel = format_bytes(d->Format) * d->NumChannels, total = 0;
    for (unsigned l = 0; l < levels; l++)
        total += one(d->Width >> l) * one(d->Height >> l) *
                 ((d->Flags & CUDA_ARRAY3D_LAYERED) ? one(d->Depth) : one(d->Depth >> l)) * texel;
    return total;
}

static int valid3d(const CUDA_ARRAY3D_DESCRIPTOR *d) {
    return d != NULL && d->Width != 0 && format_bytes(d->Format) != 0 &&
           (d->NumChannels == 1 || d->NumChannels == 2 || d->NumChannels == 4);
}

CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d) {
    NEED_CTX;
    if (pHandle == NULL || !valid3d(d)) return CUDA_ERROR_INVALID_VALUE;
    uint64_t bytes = bytes3d(d, 1);
    if (fake_reserve_memory(current->physical, bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    CUarray a = malloc(sizeof *a);
    *a = (struct CUarray_st){bytes, current->physical};
    *pHandle = a;
    return CUDA_SUCCESS;
}

CUresult cuArrayDestroy(CUarray hArray) {
    NEED_INIT;
    if (hArray == NULL) return CUDA_ERROR_INVALID_HANDLE;
    fake_release_memory(hArray->physical, hArray->bytes);
    free(hArray);
    return CUDA_SUCCESS;
}

CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                unsigned int numMipmapLevels) {
    NEED_CTX;
    if (pHandle == NULL || !valid3d(d) || numMipmapLevels == 0) return CUDA_ERROR_INVALID_VALUE;
    uint64_t bytes = bytes3d(d, numMipmapLevels);
    if (fake_reserve_memory(current->physical, bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    CUmipmappedArray a = malloc(sizeof *a);
    *a = (struct CUmipmappedArray_st){bytes, current->physical};
    *pHandle = a;
    return CUDA_SUCCESS;
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
    NEED_INIT;
    if (hMipmappedArray == NULL) return CUDA_ERROR_INVALID_HANDLE;
    fake_release_memory(hMipmappedArray->physical, hMipmappedArray->bytes);
    free(hMipmappedArray);
    return CUDA_SUCCESS;
}

/* ---- modules, streams, events, launches ---- */
CUresult cuModuleLoadData(CUmodule *module, const void *image) {
    NEED_CTX;
    if (module == NULL || image == NULL) return CUDA_ERROR_INVALID_VALUE;
    *module = calloc(1, sizeof **module);
    (*module)->loaded = 1;
    return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule hmod) {
    NEED_INIT;
    if (hmod == NULL) return CUDA_ERROR_INVALID_HANDLE;
    free(hmod);
    return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
    NEED_CTX;
    if (hfunc == NULL || hmod == NULL || name == NULL) return CUDA_ERROR_INVALID_VALUE;
    CUfunction f = malloc(sizeof *f);
    f->duration_ns = kernel_ns;
    if (strncmp(name, "fake_kernel_", 12) == 0) f->duration_ns = strtoull(name + 12, NULL, 10) * 1000;
    *hfunc = f;
    return CUDA_SUCCESS;
}

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags) {
    (void)Flags;
    NEED_CTX;
    if (phStream == NULL) return CUDA_ERROR_INVALID_VALUE;
    *phStream = malloc(sizeof **phStream);
    (*phStream)->ctx = current;
    return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(CUstream hStream) {
    NEED_INIT;
    if (hStream == NULL) return CUDA_ERROR_INVALID_HANDLE;
    free(hStream);
    return CUDA_SUCCESS;
}

static int stream_device(CUstream s) { return s != NULL ? s->ctx->physical : current->physical; }

CUresult cuStreamSynchronize(CUstream hStream) {
    NEED_CTX;
    sleep_until(__atomic_load_n(&fake_state()->dev[stream_device(hStream)].free_at, __ATOMIC_ACQUIRE));
    return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize_ptsz(CUstream hStream) { return cuStreamSynchronize(hStream); }

CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags) {
    (void)Flags;
    NEED_CTX;
    if (phEvent == NULL) return CUDA_ERROR_INVALID_VALUE;
    *phEvent = calloc(1, sizeof **phEvent);
    return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent hEvent) {
    NEED_INIT;
    if (hEvent == NULL) return CUDA_ERROR_INVALID_HANDLE;
    free(hEvent);
    return CUDA_SUCCESS;
}

/* An event completes when the work queued before it on the device is done. */
CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
    NEED_CTX;
    if (hEvent == NULL) return CUDA_ERROR_INVALID_HANDLE;
    uint64_t now = fake_now_ns();
    uint64_t free_at = __atomic_load_n(&fake_state()->dev[stream_device(hStream)].free_at,
                                       __ATOMIC_ACQUIRE);
    hEvent->at_ns = free_at > now ? free_at : now;
    return CUDA_SUCCESS;
}

CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) { return cuEventRecord(hEvent, hStream); }

CUresult cuEventQuery(CUevent hEvent) {
    NEED_INIT;
    if (hEvent == NULL) return CUDA_ERROR_INVALID_HANDLE;
    return fake_now_ns() >= hEvent->at_ns ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuEventSynchronize(CUevent hEvent) {
    NEED_INIT;
    if (hEvent == NULL) return CUDA_ERROR_INVALID_HANDLE;
    sleep_until(hEvent->at_ns);
    return CUDA_SUCCESS;
}

CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
    NEED_INIT;
    if (pMilliseconds == NULL || hStart == NULL || hEnd == NULL) return CUDA_ERROR_INVALID_HANDLE;
    if (hStart->at_ns == 0 || hEnd->at_ns == 0) return CUDA_ERROR_INVALID_HANDLE;
    uint64_t now = fake_now_ns();
    if (now < hStart->at_ns || now < hEnd->at_ns) return CUDA_ERROR_NOT_READY;
    *pMilliseconds = (float)((double)((int64_t)(hEnd->at_ns - hStart->at_ns)) / 1e6);
    return CUDA_SUCCESS;
}

/* The kernel runs on the device timeline after the work already queued; the call returns at
   once (launches are asynchronous) unless the queue is a second ahead. */
static CUresult enqueue(int physical, uint64_t duration) {
    struct fake_device_state *d = &fake_state()->dev[physical];
    uint64_t now = fake_now_ns(), start, end;
    uint64_t old = __atomic_load_n(&d->free_at, __ATOMIC_ACQUIRE);
    do {
        start = old > now ? old : now;
        end = start + duration;
    } while (!__atomic_compare_exchange_n(&d->free_at, &old, end, 0, __ATOMIC_ACQ_REL,
                                          __ATOMIC_ACQUIRE));
    uint64_t slot = __atomic_fetch_add(&d->head, 1, __ATOMIC_ACQ_REL) % FAKE_RING;
    d->ring[slot].start_ns = start;
    d->ring[slot].end_ns = end;
    if (start > now + QUEUE_LIMIT_NS) sleep_until(start - QUEUE_LIMIT_NS);
    return CUDA_SUCCESS;
}

static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, CUstream stream) {
    NEED_CTX;
    if (f == NULL) return CUDA_ERROR_INVALID_HANDLE;
    if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 ||
        (uint64_t)bx * by * bz > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    return enqueue(stream_device(stream), f->duration_ns);
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                        CUstream stream, void **params, void **extra) {
    (void)shared, (void)params, (void)extra;
    return launch(f, gx, gy, gz, bx, by, bz, stream);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                             unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                             CUstream stream, void **params, void **extra) {
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    (void)params, (void)extra;
    if (c == NULL) return CUDA_ERROR_INVALID_VALUE;
    return launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
                  c->blockDimZ, c->hStream);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    return cuLaunchKernelEx(c, f, params, extra);
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                   unsigned int bx, unsigned int by, unsigned int bz,
                                   unsigned int shared, CUstream stream, void **params) {
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, NULL);
}

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                        unsigned int gz, unsigned int bx, unsigned int by,
                                        unsigned int bz, unsigned int shared, CUstream stream,
                                        void **params) {
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, NULL);
}

/* ---- graphs: a graph of kernel nodes runs as one piece of device work ---- */
struct CUgraph_st {
    uint64_t duration_ns;
    int nodes;
};
struct CUgraphExec_st {
    uint64_t duration_ns;
};

CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags) {
    NEED_INIT;
    if (phGraph == NULL || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    *phGraph = calloc(1, sizeof **phGraph);
    return CUDA_SUCCESS;
}

CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                 const CUgraphNode *dependencies, size_t numDependencies,
                                 const CUDA_KERNEL_NODE_PARAMS *p) {
    NEED_INIT;
    if (phGraphNode == NULL || hGraph == NULL || p == NULL || p->func == NULL ||
        (numDependencies != 0 && dependencies == NULL) || p->gridDimX == 0 || p->blockDimX == 0)
        return CUDA_ERROR_INVALID_VALUE;
    hGraph->duration_ns += p->func->duration_ns; /* the fake runs nodes one after another */
    *phGraphNode = (CUgraphNode)(uintptr_t)(++hGraph->nodes);
    return CUDA_SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                     unsigned long long flags) {
    (void)flags;
    NEED_CTX;
    if (phGraphExec == NULL || hGraph == NULL) return CUDA_ERROR_INVALID_VALUE;
    *phGraphExec = malloc(sizeof **phGraphExec);
    (*phGraphExec)->duration_ns = hGraph->duration_ns;
    return CUDA_SUCCESS;
}

CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
    NEED_CTX;
    if (hGraphExec == NULL) return CUDA_ERROR_INVALID_VALUE;
    return enqueue(stream_device(hStream), hGraphExec->duration_ns);
}

CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
    return cuGraphLaunch(hGraphExec, hStream);
}

CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
    NEED_INIT;
    if (hGraphExec == NULL) return CUDA_ERROR_INVALID_VALUE;
    free(hGraphExec);
    return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph hGraph) {
    NEED_INIT;
    if (hGraph == NULL) return CUDA_ERROR_INVALID_VALUE;
    free(hGraph);
    return CUDA_SUCCESS;
}

/* ---- errors ---- */
static const char *error_name(CUresult e) {
    switch (e) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
    case CUDA_ERROR_INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
    case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_NOT_READY: return "CUDA_ERROR_NOT_READY";
    default: return NULL;
    }
}

CUresult cuGetErrorName(CUresult error, const char **pStr) {
    if (pStr == NULL) return CUDA_ERROR_INVALID_VALUE;
    *pStr = error_name(error);
    return *pStr != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char **pStr) { return cuGetErrorName(error, pStr); }

/* ---- cuGetProcAddress: base name + version (+ per-thread stream flag) -> entry point ---- */
struct proc {
    const char *base;
    int version; /* first CUDA version that resolves base to this entry */
    int per_thread;
    void *fn;
};

#define P(base, version, pt, fn) {base, version, pt, (void *)fn}
static const struct proc procs[] = {
    P("cuInit", 2000, 0, cuInit), P("cuDriverGetVersion", 2020, 0, cuDriverGetVersion),
    P("cuDeviceGet", 2000, 0, cuDeviceGet), P("cuDeviceGetCount", 2000, 0, cuDeviceGetCount),
    P("cuDeviceGetName", 2000, 0, cuDeviceGetName),
    P("cuDeviceGetAttribute", 2000, 0, cuDeviceGetAttribute), P("cuDeviceGetUuid", 9020, 0, cuDeviceGetUuid),
    P("cuDeviceGetUuid", 11040, 0, cuDeviceGetUuid_v2),
    P("cuDeviceTotalMem", 3020, 0, cuDeviceTotalMem_v2),
    P("cuDevicePrimaryCtxRetain", 7000, 0, cuDevicePrimaryCtxRetain),
    P("cuDevicePrimaryCtxRelease", 11000, 0, cuDevicePrimaryCtxRelease_v2),
    P("cuCtxCreate", 3020, 0, cuCtxCreate_v2), P("cuCtxCreate", 12050, 0, cuCtxCreate_v4),
    P("cuCtxDestroy", 4000, 0, cuCtxDestroy_v2), P("cuCtxSetCurrent", 4000, 0, cuCtxSetCurrent),
    P("cuCtxGetCurrent", 4000, 0, cuCtxGetCurrent), P("cuCtxGetDevice", 2000, 0, cuCtxGetDevice),
    P("cuCtxSynchronize", 2000, 0, cuCtxSynchronize),
    P("cuMemAlloc", 3020, 0, cuMemAlloc_v2), P("cuMemAllocPitch", 3020, 0, cuMemAllocPitch_v2),
    P("cuMemAllocManaged", 6000, 0, cuMemAllocManaged),
    P("cuMemAllocAsync", 11020, 0, cuMemAllocAsync),
    P("cuMemAllocAsync", 11020, 1, cuMemAllocAsync_ptsz),
    P("cuMemAllocFromPoolAsync", 11020, 0, cuMemAllocFromPoolAsync),
    P("cuMemAllocFromPoolAsync", 11020, 1, cuMemAllocFromPoolAsync_ptsz),
    P("cuMemFree", 3020, 0, cuMemFree_v2), P("cuMemFreeAsync", 11020, 0, cuMemFreeAsync),
    P("cuMemFreeAsync", 11020, 1, cuMemFreeAsync_ptsz),
    P("cuMemGetInfo", 3020, 0, cuMemGetInfo_v2), P("cuMemcpyHtoD", 3020, 0, cuMemcpyHtoD_v2),
    P("cuMemcpyDtoH", 3020, 0, cuMemcpyDtoH_v2), P("cuMemCreate", 10020, 0, cuMemCreate),
    P("cuMemRelease", 10020, 0, cuMemRelease), P("cuMemMap", 10020, 0, cuMemMap),
    P("cuMemUnmap", 10020, 0, cuMemUnmap), P("cuMemAddressReserve", 10020, 0, cuMemAddressReserve),
    P("cuMemAddressFree", 10020, 0, cuMemAddressFree),
    P("cuDeviceGetDefaultMemPool", 11020, 0, cuDeviceGetDefaultMemPool),
    P("cuArrayCreate", 3020, 0, cuArrayCreate_v2), P("cuArray3DCreate", 3020, 0, cuArray3DCreate_v2),
    P("cuArrayDestroy", 2000, 0, cuArrayDestroy),
    P("cuMipmappedArrayCreate", 5000, 0, cuMipmappedArrayCreate),
    P("cuMipmappedArrayDestroy", 5000, 0, cuMipmappedArrayDestroy),
    P("cuModuleLoadData", 2000, 0, cuModuleLoadData), P("cuModuleUnload", 2000, 0, cuModuleUnload),
    P("cuModuleGetFunction", 2000, 0, cuModuleGetFunction),
    P("cuStreamCreate", 2000, 0, cuStreamCreate), P("cuStreamDestroy", 4000, 0, cuStreamDestroy_v2),
    P("cuStreamSynchronize", 2000, 0, cuStreamSynchronize),
    P("cuStreamSynchronize", 7000, 1, cuStreamSynchronize_ptsz),
    P("cuEventCreate", 2000, 0, cuEventCreate), P("cuEventDestroy", 4000, 0, cuEventDestroy_v2),
    P("cuEventRecord", 2000, 0, cuEventRecord), P("cuEventRecord", 7000, 1, cuEventRecord_ptsz),
    P("cuEventQuery", 2000, 0, cuEventQuery), P("cuEventSynchronize", 2000, 0, cuEventSynchronize),
    P("cuEventElapsedTime", 2000, 0, cuEventElapsedTime),
    P("cuLaunchKernel", 4000, 0, cuLaunchKernel), P("cuLaunchKernel", 7000, 1, cuLaunchKernel_ptsz),
    P("cuLaunchKernelEx", 11060, 0, cuLaunchKernelEx),
    P("cuLaunchKernelEx", 11060, 1, cuLaunchKernelEx_ptsz),
    P("cuLaunchCooperativeKernel", 9000, 0, cuLaunchCooperativeKernel),
    P("cuLaunchCooperativeKernel", 9000, 1, cuLaunchCooperativeKernel_ptsz),
    P("cuGraphCreate", 10000, 0, cuGraphCreate),
    P("cuGraphAddKernelNode", 12000, 0, cuGraphAddKernelNode_v2),
    P("cuGraphInstantiateWithFlags", 11040, 0, cuGraphInstantiateWithFlags),
    P("cuGraphLaunch", 10000, 0, cuGraphLaunch), P("cuGraphLaunch", 10000, 1, cuGraphLaunch_ptsz),
    P("cuGraphExecDestroy", 10000, 0, cuGraphExecDestroy),
    P("cuGraphDestroy", 10000, 0, cuGraphDestroy),
    P("cuGetErrorName", 6000, 0, cuGetErrorName), P("cuGetErrorString", 6000, 0, cuGetErrorString),
    P("cuGetProcAddress", 11030, 0, cuGetProcAddress),
    P("cuGetProcAddress", 12000, 0, cuGetProcAddress_v2),
};

static CUresult lookup(const char *symbol, void **pfn, int version, cuuint64_t flags,
                       CUdriverProcAddressQueryResult *status) {
    if (symbol == NULL || pfn == NULL) return CUDA_ERROR_INVALID_VALUE;
    int want_pt = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const struct proc *best = NULL;
    int known = 0;
    for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++) {
        const struct proc *p = &procs[i];
        if (strcmp(p->base, symbol) != 0) continue;
        known = 1;
        if (p->version > version || (p->per_thread && !want_pt)) continue;
        if (best == NULL || p->per_thread > best->per_thread ||
            (p->per_thread == best->per_thread && p->version > best->version))
            best = p;
    }
    *pfn = best != NULL ? best->fn : NULL;
    if (status != NULL)
        *status = best != NULL ? CU_GET_PROC_ADDRESS_SUCCESS
                  : known      ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                               : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return best != NULL ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus) {
    return lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
    return lookup(symbol, pfn, cudaVersion, flags, NULL);
}
