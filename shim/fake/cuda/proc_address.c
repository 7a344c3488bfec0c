/* Entry-point lookup: cuGetProcAddress and cuGetProcAddress_v2 resolve a base name ("cuMemAlloc"),
   a CUDA version and the per-thread default stream flag to the variant a driver of that version
   hands out ("cuMemAlloc_v2", "..._ptsz"), with the driver's answers for a name it knows only
   in later versions and for one it does not know. */
#include <string.h>

#include "vslice/cuda_abi.h"

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
    P("cuMemSetAccess", 10020, 0, cuMemSetAccess),
    P("cuMemGetAllocationGranularity", 10020, 0, cuMemGetAllocationGranularity),
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
