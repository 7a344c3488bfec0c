/* Kernel launches (and graph launches) pass through the compute limiter of their device. */
#include "../shim.h"

/* The region device to pace, or -1 when no compute limit applies. */
static int paced_device(void) {
    if (vs_in_shim || !vs_config()->pacing) return -1;
    return vs_current_device();
}

/* 1 once the driver is resolved and the limits are read without any compute limit: from then
   on a launch is a load, a test and a jump into the driver. */
static int passthrough;

/* The first launches, and every launch under a compute limit. */
#define PACED(name, stream, per_thread, ...)                                                       \
    {                                                                                              \
        vs_cuda_ready();                                                                           \
        if (vs_real.name == NULL) return CUDA_ERROR_NOT_FOUND;                                     \
        if (!vs_config()->pacing) __atomic_store_n(&passthrough, 1, __ATOMIC_RELEASE);             \
        int dev_ = paced_device();                                                                 \
        if (dev_ < 0) return vs_real.name(__VA_ARGS__);                                            \
        struct vs_ticket ticket_;                                                                  \
        vs_limiter_before(dev_, (stream), (per_thread), &ticket_);                                 \
        vs_in_shim++;                                                                              \
        CUresult r_ = vs_real.name(__VA_ARGS__);                                                   \
        vs_in_shim--;                                                                              \
        vs_limiter_after(&ticket_, r_);                                                            \
        return r_;                                                                                 \
    }

/* The hook itself: the paced path lives in its own function, so that the passthrough test needs
   nothing saved first and both ways out are tail calls with the caller's own arguments (the
   compiler saves every argument before any call it cannot move out of the fast path). */
#define HOOK(name, ...)                                                                            \
    {                                                                                              \
        if (__builtin_expect(__atomic_load_n(&passthrough, __ATOMIC_ACQUIRE), 1) &&                \
            vs_real.name != NULL)                                                                  \
            return vs_real.name(__VA_ARGS__);                                                      \
        return name##_paced(__VA_ARGS__);                                                          \
    }
#define SLOW __attribute__((noinline)) static CUresult

#define GRID_PARAMS                                                                                \
    CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,              \
        unsigned int by, unsigned int bz, unsigned int shared, CUstream stream
#define GRID_ARGS f, gx, gy, gz, bx, by, bz, shared, stream
#define EX_PARAMS const CUlaunchConfig *config, CUfunction f, void **params, void **extra
#define EX_STREAM (config != NULL ? config->hStream : NULL)

SLOW cuLaunchKernel_paced(GRID_PARAMS, void **params, void **extra)
    PACED(cuLaunchKernel, stream, 0, GRID_ARGS, params, extra)
CUresult cuLaunchKernel(GRID_PARAMS, void **params, void **extra)
    HOOK(cuLaunchKernel, GRID_ARGS, params, extra)

SLOW cuLaunchKernel_ptsz_paced(GRID_PARAMS, void **params, void **extra)
    PACED(cuLaunchKernel_ptsz, stream, 1, GRID_ARGS, params, extra)
CUresult cuLaunchKernel_ptsz(GRID_PARAMS, void **params, void **extra)
    HOOK(cuLaunchKernel_ptsz, GRID_ARGS, params, extra)

SLOW cuLaunchKernelEx_paced(EX_PARAMS) PACED(cuLaunchKernelEx, EX_STREAM, 0, config, f, params, extra)
CUresult cuLaunchKernelEx(EX_PARAMS) HOOK(cuLaunchKernelEx, config, f, params, extra)

SLOW cuLaunchKernelEx_ptsz_paced(EX_PARAMS)
    PACED(cuLaunchKernelEx_ptsz, EX_STREAM, 1, config, f, params, extra)
CUresult cuLaunchKernelEx_ptsz(EX_PARAMS) HOOK(cuLaunchKernelEx_ptsz, config, f, params, extra)

SLOW cuLaunchCooperativeKernel_paced(GRID_PARAMS, void **params)
    PACED(cuLaunchCooperativeKernel, stream, 0, GRID_ARGS, params)
CUresult cuLaunchCooperativeKernel(GRID_PARAMS, void **params)
    HOOK(cuLaunchCooperativeKernel, GRID_ARGS, params)

SLOW cuLaunchCooperativeKernel_ptsz_paced(GRID_PARAMS, void **params)
    PACED(cuLaunchCooperativeKernel_ptsz, stream, 1, GRID_ARGS, params)
CUresult cuLaunchCooperativeKernel_ptsz(GRID_PARAMS, void **params)
    HOOK(cuLaunchCooperativeKernel_ptsz, GRID_ARGS, params)

SLOW cuGraphLaunch_paced(CUgraphExec exec, CUstream stream)
    PACED(cuGraphLaunch, stream, 0, exec, stream)
CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) HOOK(cuGraphLaunch, exec, stream)

SLOW cuGraphLaunch_ptsz_paced(CUgraphExec exec, CUstream stream)
    PACED(cuGraphLaunch_ptsz, stream, 1, exec, stream)
CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream)
    HOOK(cuGraphLaunch_ptsz, exec, stream)
