/* Execution: modules and their functions, streams, events, kernel launches (every launch entry
   point) and graphs of kernel and event-record nodes. Nothing runs: a kernel takes its duration
   on the device's simulated timeline in the node's state, which is what synchronisation waits
   for, events record and tests measure busy time from. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define QUEUE_LIMIT_NS 1000000000ull /* a launch blocks while the queue is this far ahead */

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

static uint64_t kernel_ns = 100000;

void launch_setup(void) {
    const char *k = getenv("FAKE_CUDA_KERNEL_NS");
    if (k != NULL) kernel_ns = strtoull(k, NULL, 10);
}

void sleep_until(uint64_t when) {
    uint64_t now = fake_now_ns();
    if (when <= now) return;
    struct timespec ts = {(time_t)((when - now) / 1000000000ull), (long)((when - now) % 1000000000ull)};
    nanosleep(&ts, NULL);
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
