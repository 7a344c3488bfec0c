/* Contexts: the primary context of each device (reference-counted) and created ones, the
   calling thread's current context, and cuCtxSynchronize. A live context is counted in its
   device's shared state and takes FAKE_CUDA_CONTEXT_MEM of the device's memory, as a real
   context's overhead does. */
#include <pthread.h>
#include <stdlib.h>

#include "internal.h"

__thread CUcontext current;
static struct CUctx_st primary[FAKE_MAX_DEVICES];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t context_bytes;

void context_setup(void) {
    const char *c = getenv("FAKE_CUDA_CONTEXT_MEM");
    if (c != NULL && fake_parse_size(c, &context_bytes) != 0) context_bytes = 0;
    for (int i = 0; i < visible_count; i++) primary[i] = (struct CUctx_st){i, visible[i], 1, 0};
}

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

struct fake_device_state *device_of_current(void) {
    return &fake_state()->dev[current->physical];
}

CUresult cuCtxSynchronize(void) {
    NEED_CTX;
    sleep_until(__atomic_load_n(&device_of_current()->free_at, __ATOMIC_ACQUIRE));
    return CUDA_SUCCESS;
}
