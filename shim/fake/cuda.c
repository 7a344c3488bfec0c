/*
 * A fake CUDA driver (libcuda.so.1) for tests: the subset of the driver API vslice and its
 * tests use, with the driver's semantics where tests can observe them: cuInit first, a current
 * context per thread, CUDA_VISIBLE_DEVICES (indices or UUIDs), device memory backed by host
 * memory with the device's capacity enforced, memory pools, pinned host memory (not device
 * memory), VMM granularity, asynchronous kernels on a simulated device timeline, events timed
 * by that timeline, cuGetProcAddress by version.
 *
 * Settings: FAKE_NVIDIA_GPUS and NVIDIA_VISIBLE_DEVICES (the node's GPUs and the container's,
 * see device.h), or FAKE_CUDA_DEVICE_COUNT (1) and FAKE_CUDA_TOTAL_MEM (16g);
 * FAKE_CUDA_CONTEXT_MEM (0), FAKE_CUDA_KERNEL_NS (100000; a function named "fake_kernel_<us>"
 * runs <us> microseconds, the PTX "spin" kernel its cycles argument at the reported clock),
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
#include "vslice/gpu_uuid.h"

#define GRANULARITY (2ull << 20)
#define QUEUE_LIMIT_NS 1000000000ull /* a launch blocks while the queue is this far ahead */
#define CLOCK_KHZ 1000000             /* CU_DEVICE_ATTRIBUTE_CLOCK_RATE: 1 GHz, 1 cycle = 1 ns */

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
    int spin; /* the PTX spin(cycles) kernel: runs its argument's cycles */
};
struct CUarray_st {
    uint64_t bytes;
    int physical;
};
struct CUmipmappedArray_st {
    uint64_t bytes;
    int physical;
};
/* A memory pool. Freed memory stays reserved in the pool up to its release threshold (the
   fake trims at the free, a real driver at the next synchronisation). */
struct CUmemPoolHandle_st {
    int ordinal;
    int created;   /* by cuMemPoolCreate (the default pool is not) */
    int destroyed; /* by cuMemPoolDestroy with allocations outstanding */
    uint64_t max_size, threshold;
    uint64_t used, used_high, reserved, reserved_high;
    int reuse_off[3]; /* CU_MEMPOOL_ATTR_REUSE_*: every policy is on until switched off */
};

static int initialized;
static int visible[FAKE_MAX_DEVICES]; /* ordinal -> physical index */
static const struct fake_gpu *visible_gpu[FAKE_MAX_DEVICES];
static int visible_count;
static struct CUctx_st primary[FAKE_MAX_DEVICES];
static struct CUmemPoolHandle_st pools[FAKE_MAX_DEVICES]; /* default pool per ordinal */
static CUmemoryPool current_pool[FAKE_MAX_DEVICES];
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread CUcontext current;
static uint64_t kernel_ns = 100000, context_bytes;

/* ---- allocations: device pointer, VMM handle or pinned host memory -> (bytes, device, backing) */
enum { DEVICE_PTR = 0, VMM_HANDLE = 1, HOST_PTR = 2 };
struct allocation {
    uint64_t key;
    uint64_t bytes;
    int physical;
    int kind; /* DEVICE_PTR, VMM_HANDLE or HOST_PTR */
    void *host;
    CUmemoryPool pool; /* the pool it came from, or NULL */
    struct allocation *next;
};
enum { BUCKETS = 4096 };
static struct allocation *buckets[BUCKETS];
static pthread_mutex_t alloc_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t next_handle = 1;

static unsigned bucket(uint64_t key) { return (unsigned)((key * 0x9E3779B97F4A7C15ull) >> 52); }

static void remember(uint64_t key, uint64_t bytes, int physical, int kind, void *host,
                     CUmemoryPool pool) {
    struct allocation *a = malloc(sizeof *a);
    *a = (struct allocation){key, bytes, physical, kind, host, pool, NULL};
    pthread_mutex_lock(&alloc_lock);
    a->next = buckets[bucket(key)];
    buckets[bucket(key)] = a;
    pthread_mutex_unlock(&alloc_lock);
}

static struct allocation *forget(uint64_t key, int kind) {
    pthread_mutex_lock(&alloc_lock);
    struct allocation *found = NULL;
    for (struct allocation **p = &buckets[bucket(key)]; *p != NULL; p = &(*p)->next) {
        if ((*p)->key == key && (*p)->kind == kind) {
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
/* A CUDA_VISIBLE_DEVICES entry: an index among the container's GPUs or a UUID prefix. */
static int parse_visible_entry(const char *item, int count, uint8_t seen[]) {
    char *end = NULL;
    long n = strtol(item, &end, 10);
    if (end != item && *end == '\0') return (n >= 0 && n < count && !seen[n]) ? (int)n : -1;
    for (int i = 0; i < count; i++)
        if (strlen(item) >= 8 && strncmp(fake_gpu(i)->uuid, item, strlen(item)) == 0 && !seen[i])
            return i;
    return -1;
}

/* Like the driver: the list stops at the first entry that is not a valid device. */
static void read_visible(int count) {
    const char *env = getenv("CUDA_VISIBLE_DEVICES");
    uint8_t seen[FAKE_MAX_DEVICES] = {0};
    char list[512];
    snprintf(list, sizeof list, "%s", env != NULL ? env : "");
    visible_count = 0;
    for (char *save = NULL, *item = strtok_r(list, ",", &save); env != NULL && item != NULL;
         item = strtok_r(NULL, ",", &save)) {
        int index = parse_visible_entry(item, count, seen);
        if (index < 0) break;
        seen[index] = 1;
        visible_gpu[visible_count++] = fake_gpu(index);
    }
    for (int i = 0; env == NULL && i < count; i++) visible_gpu[visible_count++] = fake_gpu(i);
    for (int i = 0; i < visible_count; i++) visible[i] = visible_gpu[i]->physical;
}

CUresult cuInit(unsigned int Flags) {
    if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (!initialized) {
        read_visible(fake_gpu_count());
        const char *k = getenv("FAKE_CUDA_KERNEL_NS");
        if (k != NULL) kernel_ns = strtoull(k, NULL, 10);
        const char *c = getenv("FAKE_CUDA_CONTEXT_MEM");
        if (c != NULL && fake_parse_size(c, &context_bytes) != 0) context_bytes = 0;
        for (int i = 0; i < visible_count; i++) {
            primary[i] = (struct CUctx_st){i, visible[i], 1, 0};
            pools[i].ordinal = i;
            current_pool[i] = &pools[i];
        }
        initialized = 1;
    }
    pthread_mutex_unlock(&lock);
    return visible_count > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE; /* like the driver */
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
    snprintf(name, (size_t)len, "%s", visible_gpu[dev]->model);
    return CUDA_SUCCESS;
}

/* What a CUDA 12 runtime, PyTorch and other interposers ask for, with an H100's values (132
   SMs, compute capability 9.0) but a 1 GHz clock so that spin cycles are nanoseconds. Other
   attributes the driver knows answer 0 (not supported), as for a feature the card lacks. */
static const struct {
    int attrib, value;
} attributes[] = {
    {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 2147483647},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65535},
    {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 49152},
    {CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 65536},
    {CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32},
    {CU_DEVICE_ATTRIBUTE_MAX_PITCH, 2147483647},
    {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536},
    {CU_DEVICE_ATTRIBUTE_CLOCK_RATE, CLOCK_KHZ},
    {CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 512},
    {CU_DEVICE_ATTRIBUTE_GPU_OVERLAP, 1},
    {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132},
    {CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1},
    {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH, 131072},
    {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH, 131072},
    {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT, 65536},
    {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH, 16384},
    {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT, 16384},
    {CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH, 16384},
    {CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT, 512},
    {CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1},
    {CU_DEVICE_ATTRIBUTE_ECC_ENABLED, 1},
    {CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, 2619000},
    {CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 5120},
    {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 52428800},
    {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048},
    {CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 3},
    {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
    {CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, 32},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0},
    {CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 233472},
    {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, 65536},
    {CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1},
    {CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO, 2},
    {CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 1},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 1},
    {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 232448},
    {CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 32},
    {CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, 32505856},
    {CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE, 134213632},
    {CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, 1024},
    {CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, 1},
    {CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, 1},
};

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
    NEED_DEVICE(dev);
    if (pi == NULL || (int)attrib < 1 ||
        (int)attrib > CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED)
        return CUDA_ERROR_INVALID_VALUE;
    *pi = 0;
    switch ((int)attrib) {
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *pi = 0x18 + visible[dev]; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_NUMA_ID: *pi = -1; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: *pi = 0; return CUDA_SUCCESS;
    }
    for (size_t i = 0; i < sizeof attributes / sizeof attributes[0]; i++)
        if (attributes[i].attrib == (int)attrib) *pi = attributes[i].value;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) {
    NEED_DEVICE(dev);
    if (uuid == NULL) return CUDA_ERROR_INVALID_VALUE;
    memcpy(uuid->bytes, visible_gpu[dev]->bytes, 16);
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
    remember(*dptr, bytes, physical, DEVICE_PTR, host, NULL);
    return CUDA_SUCCESS;
}

static void pool_give_back(CUmemoryPool pool, uint64_t bytes);

/* From a pool: reserved memory the pool holds is used first, the rest is taken from the card. */
static CUresult pool_allocate(CUdeviceptr *dptr, uint64_t bytes, CUmemoryPool pool) {
    if (dptr == NULL || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    int physical = visible[pool->ordinal];
    pthread_mutex_lock(&pool_lock);
    uint64_t cached = pool->reserved - pool->used;
    uint64_t take = bytes > cached ? bytes - cached : 0;
    CUresult r = CUDA_SUCCESS;
    if (pool->destroyed || (pool->max_size != 0 && pool->reserved + take > pool->max_size))
        r = pool->destroyed ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
    else if (take != 0 && fake_reserve_memory(physical, take) != 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        pool->used += bytes;
        pool->reserved += take;
        if (pool->used > pool->used_high) pool->used_high = pool->used;
        if (pool->reserved > pool->reserved_high) pool->reserved_high = pool->reserved;
    }
    pthread_mutex_unlock(&pool_lock);
    if (r != CUDA_SUCCESS) return r;
    void *host = host_memory(bytes);
    if (host == NULL) {
        pool_give_back(pool, bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *dptr = (CUdeviceptr)(uintptr_t)host;
    remember(*dptr, bytes, physical, DEVICE_PTR, host, pool);
    return CUDA_SUCCESS;
}

/* Freed pool memory stays reserved up to the release threshold; the rest goes back to the card.
   A destroyed pool goes away with its last allocation. */
static void pool_give_back(CUmemoryPool pool, uint64_t bytes) {
    int physical = visible[pool->ordinal];
    pthread_mutex_lock(&pool_lock);
    pool->used -= bytes;
    uint64_t keep = pool->destroyed ? 0 : pool->threshold;
    uint64_t excess = pool->reserved - pool->used > keep ? pool->reserved - pool->used - keep : 0;
    pool->reserved -= excess;
    int gone = pool->destroyed && pool->used == 0;
    pthread_mutex_unlock(&pool_lock);
    if (excess != 0) fake_release_memory(physical, excess);
    if (gone) free(pool);
}

static CUresult release(CUdeviceptr dptr) {
    struct allocation *a = forget(dptr, DEVICE_PTR);
    if (a == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (a->pool != NULL)
        pool_give_back(a->pool, a->bytes);
    else
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

/* From the current pool of the context's device (cuDeviceSetMemPool). */
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    (void)hStream;
    NEED_CTX;
    return pool_allocate(dptr, bytesize, current_pool[current->ordinal]);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    return cuMemAllocAsync(dptr, bytesize, hStream);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                 CUstream hStream) {
    (void)hStream;
    NEED_CTX;
    if (pool == NULL) return CUDA_ERROR_INVALID_VALUE;
    return pool_allocate(dptr, bytesize, pool);
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

CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev) {
    NEED_DEVICE(dev);
    if (pool == NULL) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pool_lock);
    *pool = current_pool[dev];
    pthread_mutex_unlock(&pool_lock);
    return CUDA_SUCCESS;
}

CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
    NEED_DEVICE(dev);
    if (pool == NULL || pool->ordinal != dev || pool->destroyed) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pool_lock);
    current_pool[dev] = pool;
    pthread_mutex_unlock(&pool_lock);
    return CUDA_SUCCESS;
}

/* Device pools only: pinned memory on one of the visible devices. */
CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps) {
    NEED_INIT;
    if (pool == NULL || poolProps == NULL ||
        poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE || poolProps->location.id < 0 ||
        poolProps->location.id >= visible_count)
        return CUDA_ERROR_INVALID_VALUE;
    CUmemoryPool p = calloc(1, sizeof *p);
    p->ordinal = poolProps->location.id;
    p->created = 1;
    p->max_size = poolProps->maxSize;
    *pool = p;
    return CUDA_SUCCESS;
}

/* Like the driver: outstanding allocations keep a destroyed pool's memory until they are freed;
   a device whose current pool it was falls back to its default pool. */
CUresult cuMemPoolDestroy(CUmemoryPool pool) {
    NEED_INIT;
    if (pool == NULL || !pool->created || pool->destroyed) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pool_lock);
    if (current_pool[pool->ordinal] == pool) current_pool[pool->ordinal] = &pools[pool->ordinal];
    pool->destroyed = 1;
    uint64_t cached = pool->reserved - pool->used;
    pool->reserved = pool->used;
    int gone = pool->used == 0;
    pthread_mutex_unlock(&pool_lock);
    if (cached != 0) fake_release_memory(visible[pool->ordinal], cached);
    if (gone) free(pool);
    return CUDA_SUCCESS;
}

static int reuse_index(CUmemPool_attribute attr) {
    return (int)attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES;
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
    NEED_INIT;
    if (pool == NULL || value == NULL) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&pool_lock);
    switch ((int)attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value = !pool->reuse_off[reuse_index(attr)];
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *)value = pool->threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = pool->reserved; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)value = pool->reserved_high; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = pool->used; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = pool->used_high; break;
    default: r = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&pool_lock);
    return r;
}

/* The reuse policies, the release threshold, and resetting the high-water marks (value 0). */
CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
    NEED_INIT;
    if (pool == NULL || value == NULL) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    uint64_t excess = 0;
    pthread_mutex_lock(&pool_lock);
    switch ((int)attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        pool->reuse_off[reuse_index(attr)] = !*(int *)value;
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        pool->threshold = *(cuuint64_t *)value;
        if (pool->reserved - pool->used > pool->threshold)
            excess = pool->reserved - pool->used - pool->threshold;
        pool->reserved -= excess;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        if (*(cuuint64_t *)value != 0) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else if ((int)attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH) {
            pool->used_high = pool->used;
        } else {
            pool->reserved_high = pool->reserved;
        }
        break;
    default: r = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&pool_lock);
    if (excess != 0) fake_release_memory(visible[pool->ordinal], excess);
    return r;
}

/* ---- pinned host memory: host memory, never charged to a device ---- */
CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags) {
    NEED_CTX;
    if (pp == NULL || bytesize == 0 ||
        (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                             CU_MEMHOSTALLOC_WRITECOMBINED)) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    void *host = host_memory(bytesize);
    if (host == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    remember((uint64_t)(uintptr_t)host, bytesize, -1, HOST_PTR, host, NULL);
    *pp = host;
    return CUDA_SUCCESS;
}

CUresult cuMemAllocHost_v2(void **pp, size_t bytesize) { return cuMemHostAlloc(pp, bytesize, 0); }

CUresult cuMemFreeHost(void *p) {
    NEED_INIT;
    if (p == NULL) return CUDA_SUCCESS;
    struct allocation *a = forget((uint64_t)(uintptr_t)p, HOST_PTR);
    if (a == NULL) return CUDA_ERROR_INVALID_VALUE;
    free_host(a->host, a->bytes);
    free(a);
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
    remember(key, size, physical, VMM_HANDLE, NULL, NULL);
    *handle = key;
    return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    NEED_INIT;
    struct allocation *a = forget(handle, VMM_HANDLE);
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
    struct allocation *a = forget(handle, VMM_HANDLE);
    if (a == NULL) return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = size <= a->bytes ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    remember(a->key, a->bytes, a->physical, VMM_HANDLE, NULL, NULL);
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
    f->spin = strcmp(name, "spin") == 0;
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
static CUresult enqueue(int physical, uint64_t duration, uint64_t *started) {
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
    if (started != NULL) *started = start;
    if (start > now + QUEUE_LIMIT_NS) sleep_until(start - QUEUE_LIMIT_NS);
    return CUDA_SUCCESS;
}

/* How long a kernel runs: spin(cycles) its cycles at the reported clock, others their name's. */
static uint64_t duration(CUfunction f, void **params) {
    if (!f->spin || params == NULL || params[0] == NULL) return f->duration_ns;
    return *(const unsigned long long *)params[0] * 1000000ull / CLOCK_KHZ;
}

static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, CUstream stream, void **params) {
    NEED_CTX;
    if (f == NULL) return CUDA_ERROR_INVALID_HANDLE;
    if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 ||
        (uint64_t)bx * by * bz > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    return enqueue(stream_device(stream), duration(f, params), NULL);
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                        CUstream stream, void **params, void **extra) {
    (void)shared, (void)extra;
    return launch(f, gx, gy, gz, bx, by, bz, stream, params);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                             unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                             CUstream stream, void **params, void **extra) {
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    (void)extra;
    if (c == NULL) return CUDA_ERROR_INVALID_VALUE;
    return launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
                  c->blockDimZ, c->hStream, params);
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

/* ---- graphs: kernel and event-record nodes, run in the order they were added, as one piece
   of device work; an event node records the moment the work before it is done ---- */
#define GRAPH_EVENTS 16
struct graph_mark {
    uint64_t offset_ns; /* from the start of the graph's work */
    CUevent event;
};
struct CUgraph_st {
    uint64_t duration_ns;
    int nodes, marks;
    struct graph_mark mark[GRAPH_EVENTS];
};
struct CUgraphExec_st {
    uint64_t duration_ns;
    int marks;
    struct graph_mark mark[GRAPH_EVENTS];
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
    hGraph->duration_ns += duration(p->func, p->kernelParams); /* nodes run one after another */
    *phGraphNode = (CUgraphNode)(uintptr_t)(++hGraph->nodes);
    return CUDA_SUCCESS;
}

CUresult cuGraphAddEventRecordNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                   const CUgraphNode *dependencies, size_t numDependencies,
                                   CUevent event) {
    NEED_INIT;
    if (phGraphNode == NULL || hGraph == NULL || event == NULL ||
        (numDependencies != 0 && dependencies == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    if (hGraph->marks == GRAPH_EVENTS) return CUDA_ERROR_NOT_SUPPORTED;
    hGraph->mark[hGraph->marks++] = (struct graph_mark){hGraph->duration_ns, event};
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
    (*phGraphExec)->marks = hGraph->marks;
    memcpy((*phGraphExec)->mark, hGraph->mark, sizeof hGraph->mark);
    return CUDA_SUCCESS;
}

CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
    NEED_CTX;
    if (hGraphExec == NULL) return CUDA_ERROR_INVALID_VALUE;
    uint64_t start = 0;
    CUresult r = enqueue(stream_device(hStream), hGraphExec->duration_ns, &start);
    for (int i = 0; r == CUDA_SUCCESS && i < hGraphExec->marks; i++)
        hGraphExec->mark[i].event->at_ns = start + hGraphExec->mark[i].offset_ns;
    return r;
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
    case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
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
    P("cuDeviceGetMemPool", 11020, 0, cuDeviceGetMemPool),
    P("cuDeviceSetMemPool", 11020, 0, cuDeviceSetMemPool),
    P("cuMemPoolCreate", 11020, 0, cuMemPoolCreate), P("cuMemPoolDestroy", 11020, 0, cuMemPoolDestroy),
    P("cuMemPoolGetAttribute", 11020, 0, cuMemPoolGetAttribute),
    P("cuMemPoolSetAttribute", 11020, 0, cuMemPoolSetAttribute),
    P("cuMemHostAlloc", 2020, 0, cuMemHostAlloc), P("cuMemAllocHost", 3020, 0, cuMemAllocHost_v2),
    P("cuMemFreeHost", 2000, 0, cuMemFreeHost),
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
    P("cuGraphAddEventRecordNode", 11010, 0, cuGraphAddEventRecordNode),
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
