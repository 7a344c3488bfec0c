/* Memory: device allocations (cuMemAlloc and its pitched and managed forms), stream-ordered
   allocation from memory pools (the default pool of each device and created ones, with their
   attributes and release threshold), pinned host memory (never charged to a device),
   cuMemGetInfo, host<->device copies, virtual memory management (2 MiB granularity) and arrays.
   Device memory is host memory; what it takes is charged to its device in the node's state
   (fake_reserve_memory), which enforces the device's capacity and the driver-enforced memory
   limits of the process's cgroup. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"

#define GRANULARITY (2ull << 20)

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

static struct CUmemPoolHandle_st pools[FAKE_MAX_DEVICES]; /* default pool per ordinal */
static CUmemoryPool current_pool[FAKE_MAX_DEVICES];
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

void memory_setup(void) {
    for (int i = 0; i < visible_count; i++) {
        pools[i].ordinal = i;
        current_pool[i] = &pools[i];
    }
}

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

/* ---- device memory and pools ---- */
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

/* The card, or under a driver-enforced memory limit the limit and what is left of it
   (memory_limits.c). */
CUresult cuMemGetInfo_v2(size_t *free, size_t *total) {
    NEED_CTX;
    if (free == NULL || total == NULL) return CUDA_ERROR_INVALID_VALUE;
    uint64_t bytes_total, bytes_free;
    fake_memory_view(current->physical, fake_own_namespace(), &bytes_total, &bytes_free);
    *total = (size_t)bytes_total;
    *free = (size_t)bytes_free;
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

/* Unmapping takes access away again (and the pages' contents with it). */
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    NEED_INIT;
    if (ptr == 0 || size == 0 || size % GRANULARITY != 0) return CUDA_ERROR_INVALID_VALUE;
    void *p = (void *)(uintptr_t)ptr;
    if (mprotect(p, size, PROT_NONE) != 0) return CUDA_ERROR_INVALID_VALUE;
    madvise(p, size, MADV_DONTNEED);
    return CUDA_SUCCESS;
}

/* A reserved range is PROT_NONE host memory until cuMemSetAccess opens it, as device memory
   is inaccessible until then: a kernel or copy touching it before faults, here as on a GPU.
   Only device locations of this process are valid; the widest access asked for wins. */
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
    NEED_INIT;
    if (ptr == 0 || size == 0 || size % GRANULARITY != 0 || desc == NULL || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    int prot = PROT_NONE;
    for (size_t i = 0; i < count; i++) {
        const CUmemAccessDesc *d = &desc[i];
        if (d->location.type != CU_MEM_LOCATION_TYPE_DEVICE || d->location.id < 0 ||
            d->location.id >= visible_count)
            return CUDA_ERROR_INVALID_DEVICE;
        switch (d->flags) {
        case CU_MEM_ACCESS_FLAGS_PROT_NONE: break;
        case CU_MEM_ACCESS_FLAGS_PROT_READ: prot |= PROT_READ; break;
        case CU_MEM_ACCESS_FLAGS_PROT_READWRITE: prot |= PROT_READ | PROT_WRITE; break;
        default: return CUDA_ERROR_INVALID_VALUE;
        }
    }
    return mprotect((void *)(uintptr_t)ptr, size, prot) == 0 ? CUDA_SUCCESS
                                                            : CUDA_ERROR_INVALID_VALUE;
}

/* The fake's one granularity serves both the minimum and the recommended one (2 MiB, what
   current data-centre GPUs report for both). */
CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags option) {
    NEED_INIT;
    int known = option == CU_MEM_ALLOC_GRANULARITY_MINIMUM ||
                option == CU_MEM_ALLOC_GRANULARITY_RECOMMENDED;
    if (granularity == NULL || prop == NULL || !known) return CUDA_ERROR_INVALID_VALUE;
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.id < 0 || prop->location.id >= visible_count)
        return CUDA_ERROR_INVALID_DEVICE;
    *granularity = GRANULARITY;
    return CUDA_SUCCESS;
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
