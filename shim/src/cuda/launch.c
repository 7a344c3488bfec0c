/* Kernel launches (and graph launches) pass through the compute limiter of their device. */
#include "../shim.h"

/* The region device to pace, or -1 when no compute limit applies. */
static int paced_device(void) {
    if (vs_in_shim || !vs_config()->pacing) return -1;
    return vs_current_device();
}

#define PACED(name, stream, per_thread, ...)                                                       \
    do {                                                                                           \
        vs_cuda_ready();                                                                           \
        if (vs_real.name == NULL) return CUDA_ERROR_NOT_FOUND;                                     \
        int dev_ = paced_device();                                                                 \
        if (dev_ < 0) return vs_real.name(__VA_ARGS__);                                            \
        struct vs_ticket ticket_;                                                                  \
        vs_limiter_before(dev_, (stream), (per_thread), &ticket_);                                 \
        vs_in_shim++;                                                                              \
        CUresult r_ = vs_real.name(__VA_ARGS__);                                                   \
        vs_in_shim--;                                                                              \
        vs_limiter_after(&ticket_, r_);                                                            \
        return r_;                                                                                 \
    } while (0)

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                        CUstream stream, void **params, void **extra) {
    PACED(cuLaunchKernel, stream, 0, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                             unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                             CUstream stream, void **params, void **extra) {
    PACED(cuLaunchKernel_ptsz, stream, 1, f, gx, gy, gz, bx, by, bz, shared, stream, params,
          extra);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params,
                          void **extra) {
    PACED(cuLaunchKernelEx, config != NULL ? config->hStream : NULL, 0, config, f, params, extra);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params,
                               void **extra) {
    PACED(cuLaunchKernelEx_ptsz, config != NULL ? config->hStream : NULL, 1, config, f, params,
          extra);
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                   unsigned int bx, unsigned int by, unsigned int bz,
                                   unsigned int shared, CUstream stream, void **params) {
    PACED(cuLaunchCooperativeKernel, stream, 0, f, gx, gy, gz, bx, by, bz, shared, stream, params);
}

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                        unsigned int gz, unsigned int bx, unsigned int by,
                                        unsigned int bz, unsigned int shared, CUstream stream,
                                        void **params) {
    PACED(cuLaunchCooperativeKernel_ptsz, stream, 1, f, gx, gy, gz, bx, by, bz, shared, stream,
          params);
}

CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
    PACED(cuGraphLaunch, stream, 0, exec, stream);
}

CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
    PACED(cuGraphLaunch_ptsz, stream, 1, exec, stream);
}
