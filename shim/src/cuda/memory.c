/*
 * Every path that takes device memory is charged to the slice before the driver sees it, and
 * every matching free gives it back. cuMemGetInfo and cuDeviceTotalMem report the slice.
 */
#include "../shim.h"

/* The region device of the calling thread's context, or -1 to pass the call through. */
static int tracked_device(void) {
    if (vs_in_shim || !vs_config()->tracking) return -1;
    return vs_current_device();
}

static CUresult refuse(int dev, uint64_t bytes) {
    VS_LOG(VS_INFO, "allocation of %llu bytes on device %d refused: beyond the memory slice",
           (unsigned long long)bytes, dev);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

/* After the driver answered: remember what succeeded, give back what failed. */
static CUresult settle(CUresult result, enum vs_kind kind, uint64_t key, int dev, uint64_t bytes) {
    if (result == CUDA_SUCCESS)
        vs_table_put(kind, key, dev, bytes);
    else
        vs_release(dev, bytes);
    return result;
}

#define NEED(name)                                                                                 \
    vs_cuda_ready();                                                                               \
    if (vs_real.name == NULL) return CUDA_ERROR_NOT_FOUND

/* Calls into the driver with the re-entry flag set: the driver's own calls pass straight on. */
#define REAL(name, ...)                                                                            \
    ({                                                                                             \
        vs_in_shim++;                                                                              \
        CUresult r_ = vs_real.name(__VA_ARGS__);                                                   \
        vs_in_shim--;                                                                              \
        r_;                                                                                        \
    })

/* The common shape of a counted allocation of a known size on the current device. */
#define COUNTED_ALLOC(name, out, bytes, ...)                                                       \
    do {                                                                                           \
        NEED(name);                                                                                \
        int dev_ = tracked_device();                                                               \
        if (dev_ < 0) return vs_real.name(__VA_ARGS__);                                            \
        if (vs_reserve(dev_, (bytes), 0) != 0) return refuse(dev_, (bytes));                       \
        CUresult r_ = REAL(name, __VA_ARGS__);                                                     \
        return settle(r_, VS_KIND_PTR, r_ == CUDA_SUCCESS ? (uint64_t) * (out) : 0, dev_, (bytes)); \
    } while (0)

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    COUNTED_ALLOC(cuMemAlloc_v2, dptr, bytesize, dptr, bytesize);
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
    COUNTED_ALLOC(cuMemAllocManaged, dptr, bytesize, dptr, bytesize, flags);
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    COUNTED_ALLOC(cuMemAllocAsync, dptr, bytesize, dptr, bytesize, hStream);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    COUNTED_ALLOC(cuMemAllocAsync_ptsz, dptr, bytesize, dptr, bytesize, hStream);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                 CUstream hStream) {
    COUNTED_ALLOC(cuMemAllocFromPoolAsync, dptr, bytesize, dptr, bytesize, pool, hStream);
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                      CUstream hStream) {
    COUNTED_ALLOC(cuMemAllocFromPoolAsync_ptsz, dptr, bytesize, dptr, bytesize, pool, hStream);
}

/* The pitch is the driver's choice: reserve the usual 512-byte alignment, then settle. */
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes) {
    NEED(cuMemAllocPitch_v2);
    int dev = tracked_device();
    if (dev < 0) return vs_real.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    uint64_t guess = (((uint64_t)WidthInBytes + 511) & ~(uint64_t)511) * Height;
    if (vs_reserve(dev, guess, 0) != 0) return refuse(dev, guess);
    CUresult r = REAL(cuMemAllocPitch_v2, dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (r != CUDA_SUCCESS) return settle(r, VS_KIND_PTR, 0, dev, guess);
    uint64_t actual = (uint64_t)*pPitch * Height;
    vs_adjust(dev, guess, actual);
    return settle(r, VS_KIND_PTR, *dptr, dev, actual);
}

/* A free gives back what the allocation charged; unknown handles pass straight through. */
#define COUNTED_FREE(name, kind, key, ...)                                                         \
    do {                                                                                           \
        NEED(name);                                                                                \
        int dev_;                                                                                  \
        uint64_t bytes_;                                                                           \
        if (vs_in_shim || !vs_config()->tracking ||                                                \
            vs_table_take((kind), (uint64_t)(key), &dev_, &bytes_) != 0)                           \
            return vs_real.name(__VA_ARGS__);                                                      \
        CUresult r_ = REAL(name, __VA_ARGS__);                                                     \
        if (r_ == CUDA_SUCCESS)                                                                    \
            vs_release(dev_, bytes_);                                                              \
        else                                                                                       \
            vs_table_put((kind), (uint64_t)(key), dev_, bytes_);                                   \
        return r_;                                                                                 \
    } while (0)

CUresult cuMemFree_v2(CUdeviceptr dptr) { COUNTED_FREE(cuMemFree_v2, VS_KIND_PTR, dptr, dptr); }

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
    COUNTED_FREE(cuMemFreeAsync, VS_KIND_PTR, dptr, dptr, hStream);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
    COUNTED_FREE(cuMemFreeAsync_ptsz, VS_KIND_PTR, dptr, dptr, hStream);
}

/* Virtual memory management: physical memory is taken by cuMemCreate, not by cuMemMap. */
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                     const CUmemAllocationProp *prop, unsigned long long flags) {
    NEED(cuMemCreate);
    int dev = -1;
    if (!vs_in_shim && vs_config()->tracking && prop != NULL &&
        prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
        dev = vs_device_index(prop->location.id);
    if (dev < 0) return vs_real.cuMemCreate(handle, size, prop, flags);
    if (vs_reserve(dev, size, 0) != 0) return refuse(dev, size);
    CUresult r = REAL(cuMemCreate, handle, size, prop, flags);
    return settle(r, VS_KIND_VMM, r == CUDA_SUCCESS ? *handle : 0, dev, size);
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    COUNTED_FREE(cuMemRelease, VS_KIND_VMM, handle, handle);
}

/* Bytes per element of each channel format; unknown formats count as 4. */
static uint64_t element_bytes(CUarray_format format) {
    switch ((int)format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    default: return 4;
    }
}

static uint64_t at_least_one(size_t n) { return n == 0 ? 1 : (uint64_t)n; }

static uint64_t array3d_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels) {
    uint64_t texel = element_bytes(d->Format) * d->NumChannels, total = 0;
    int layered = (d->Flags & CUDA_ARRAY3D_LAYERED) != 0;
    for (unsigned level = 0; level < (levels == 0 ? 1 : levels); level++) {
        uint64_t w = at_least_one(d->Width >> level), h = at_least_one(d->Height >> level);
        uint64_t depth = layered ? at_least_one(d->Depth) : at_least_one(d->Depth >> level);
        total += w * h * depth * texel;
    }
    return total;
}

#define COUNTED_ARRAY(name, kind, handle, bytes, ...)                                              \
    do {                                                                                           \
        NEED(name);                                                                                \
        int dev_ = (pAllocate == NULL) ? -1 : tracked_device();                                    \
        if (dev_ < 0) return vs_real.name(__VA_ARGS__);                                            \
        uint64_t bytes_ = (bytes);                                                                 \
        if (vs_reserve(dev_, bytes_, 0) != 0) return refuse(dev_, bytes_);                         \
        CUresult r_ = REAL(name, __VA_ARGS__);                                                     \
        return settle(r_, (kind), r_ == CUDA_SUCCESS ? (uint64_t)(uintptr_t) * (handle) : 0, dev_, \
                      bytes_);                                                                     \
    } while (0)

CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray) {
    const CUDA_ARRAY_DESCRIPTOR *pAllocate = pAllocateArray;
    COUNTED_ARRAY(cuArrayCreate_v2, VS_KIND_ARRAY, pHandle,
                  at_least_one(pAllocate->Width) * at_least_one(pAllocate->Height) *
                      element_bytes(pAllocate->Format) * pAllocate->NumChannels,
                  pHandle, pAllocateArray);
}

CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray) {
    const CUDA_ARRAY3D_DESCRIPTOR *pAllocate = pAllocateArray;
    COUNTED_ARRAY(cuArray3DCreate_v2, VS_KIND_ARRAY, pHandle, array3d_bytes(pAllocate, 1), pHandle,
                  pAllocateArray);
}

CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
                                const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
                                unsigned int numMipmapLevels) {
    const CUDA_ARRAY3D_DESCRIPTOR *pAllocate = pMipmappedArrayDesc;
    COUNTED_ARRAY(cuMipmappedArrayCreate, VS_KIND_MIPMAP, pHandle,
                  array3d_bytes(pAllocate, numMipmapLevels), pHandle, pMipmappedArrayDesc,
                  numMipmapLevels);
}

CUresult cuArrayDestroy(CUarray hArray) {
    COUNTED_FREE(cuArrayDestroy, VS_KIND_ARRAY, (uintptr_t)hArray, hArray);
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
    COUNTED_FREE(cuMipmappedArrayDestroy, VS_KIND_MIPMAP, (uintptr_t)hMipmappedArray,
                 hMipmappedArray);
}

/* The slice, exactly: total = the limit, free = limit - used, never below zero, never an error
   for a context that already used its whole slice. */
CUresult cuMemGetInfo_v2(size_t *free, size_t *total) {
    NEED(cuMemGetInfo_v2);
    CUresult r = REAL(cuMemGetInfo_v2, free, total);
    if (r != CUDA_SUCCESS) return r;
    int dev = tracked_device();
    if (dev < 0) return r;
    uint64_t limit = 0, used = 0;
    if (!vs_device_usage(dev, &limit, &used)) return r;
    uint64_t cap = limit < (uint64_t)*total ? limit : (uint64_t)*total;
    uint64_t left = used >= cap ? 0 : cap - used;
    *total = (size_t)cap;
    if (left < (uint64_t)*free) *free = (size_t)left;
    return r;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    NEED(cuDeviceTotalMem_v2);
    CUresult r = REAL(cuDeviceTotalMem_v2, bytes, dev);
    if (r != CUDA_SUCCESS || vs_in_shim || !vs_config()->tracking) return r;
    int index = vs_device_index(dev);
    if (index < 0) return r;
    uint64_t limit = 0, used = 0;
    if (vs_device_usage(index, &limit, &used) && limit < (uint64_t)*bytes) *bytes = (size_t)limit;
    return r;
}
