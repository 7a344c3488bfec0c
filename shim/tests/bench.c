/*
 * Timing loops for benchmarks/shim.py, run with and without the shim:
 *   bench alloc <pairs> <size> [threads]   ns per cuMemAlloc_v2 + cuMemFree_v2 pair
 *   bench launch <launches> [function]     ns per cuLaunchKernel of an empty kernel
 *                                          (fake_kernel_0 on the fake driver, "empty" on a GPU)
 * Prints "<what> ns=<per call>".
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ptx.h"
#include "testlib.h"
#include "vslice/cuda_abi.h"

struct job {
    CUcontext ctx;
    long pairs;
    uint64_t size;
    int errors;
};

static void *alloc_loop(void *arg) {
    struct job *job = arg;
    cuCtxSetCurrent(job->ctx);
    for (long i = 0; i < job->pairs; i++) {
        CUdeviceptr p;
        if (cuMemAlloc_v2(&p, job->size) != CUDA_SUCCESS || cuMemFree_v2(p) != CUDA_SUCCESS)
            job->errors++;
    }
    return NULL;
}

static int bench_alloc(long pairs, uint64_t size, int threads, CUcontext ctx) {
    pthread_t tid[32];
    struct job jobs[32];
    if (threads < 1 || threads > 32) threads = 1;
    struct job warm = {ctx, 1000, size, 0};
    alloc_loop(&warm);
    uint64_t start = test_now_ns();
    for (int t = 0; t < threads; t++) {
        jobs[t] = (struct job){ctx, pairs, size, 0};
        pthread_create(&tid[t], NULL, alloc_loop, &jobs[t]);
    }
    int errors = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        errors += jobs[t].errors;
    }
    double ns = (double)(test_now_ns() - start) / (double)pairs; /* per pair per thread */
    printf("alloc ns=%.1f errors=%d\n", ns, errors);
    return errors != 0;
}

static int bench_launch(long launches, const char *function) {
    CUmodule module;
    CUfunction f;
    if (cuModuleLoadData(&module, test_ptx) != CUDA_SUCCESS ||
        cuModuleGetFunction(&f, module, function) != CUDA_SUCCESS)
        return 1;
    for (int i = 0; i < 1000; i++) cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
    uint64_t start = test_now_ns();
    int errors = 0;
    for (long i = 0; i < launches; i++)
        errors += cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS;
    cuCtxSynchronize();
    printf("launch ns=%.1f errors=%d\n", (double)(test_now_ns() - start) / (double)launches, errors);
    return errors != 0;
}

int main(int argc, char **argv) {
    CUdevice dev;
    CUcontext ctx;
    if (argc < 3 || cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        fprintf(stderr, "usage: bench alloc <pairs> <size> [threads] | bench launch <launches>\n");
        return 2;
    }
    long n = atol(argv[2]);
    if (strcmp(argv[1], "alloc") == 0 && argc >= 4)
        return bench_alloc(n, test_size(argv[3]), argc >= 5 ? atoi(argv[4]) : 1, ctx);
    if (strcmp(argv[1], "launch") == 0) return bench_launch(n, argc >= 4 ? argv[3] : "fake_kernel_0");
    return 2;
}
