/*
 * Another interposer, preloaded after libvslice.so: it wraps cuDriverGetVersion with the usual
 * dlsym(RTLD_NEXT, ...) idiom. If the shim's dlsym resolved RTLD_NEXT relative to itself, the
 * wrapper would find itself and recurse until the stack overflows.
 */
#include <dlfcn.h>

#include "vslice/cuda_abi.h"

typedef CUresult (*version_fn)(int *);

CUresult cuDriverGetVersion(int *driverVersion) {
    version_fn next = (version_fn)dlsym(RTLD_NEXT, "cuDriverGetVersion");
    if (next == NULL || next == cuDriverGetVersion) return CUDA_ERROR_UNKNOWN;
    CUresult r = next(driverVersion);
    if (r == CUDA_SUCCESS) *driverVersion += 1; /* proves the wrapper ran */
    return r;
}
