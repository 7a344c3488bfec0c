/*
 * The compute limiter: a token bucket of device time, one per device of the container, kept in
 * the shared region so that all processes of the container draw from it together.
 *
 * The bucket fills at sm_limit% of wall time (up to a burst of BURST_NS of wall time) and each
 * launch draws the device time it will take. That time is first estimated (a running average
 * of what this process's launches on the device took), then corrected once the launch
 * completed: the launch is bracketed by two events and their elapsed time, measured by the
 * device itself, replaces the estimate. A launch waits while the bucket is in debt. Nothing
 * here needs host PIDs or NVML utilisation: the device's own clocks drive it, so it works for
 * a single container on a card, for graphs and cooperative launches alike.
 * docs/shim.md derives the bound on the error.
 */
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "shim.h"

enum { SAMPLES = 32 };
#define BURST_NS 50000000ll     /* the bucket holds at most this much wall time of credit */
#define MAX_SLEEP_NS 20000000ll /* re-check the bucket at least this often while waiting */

struct vs_sample {
    CUevent start, end;
    int64_t charged;
    int state; /* 0 free, 1 reserved, 2 in flight */
};

struct device_samples {
    pthread_mutex_t lock;
    struct vs_sample sample[SAMPLES];
    int64_t estimate_ns; /* running average of measured launches; 0 = none measured yet */
};

static struct device_samples devices[VS_MAX_DEVICES] = {
    [0 ... VS_MAX_DEVICES - 1] = {.lock = PTHREAD_MUTEX_INITIALIZER}};

static void bucket_add(int dev, int64_t tokens, uint64_t busy, uint64_t throttled) {
    if (vs_region_lock() != 0) return;
    vs_region_device *d = &vs_region_map()->devices[dev];
    d->tokens_ns += tokens;
    d->busy_ns += busy;
    d->throttled_ns += throttled;
    vs_region_unlock();
}

/* Apply the measurements of completed launches. Called with the device's sample lock held. */
static void collect(int dev, struct device_samples *ds) {
    for (int i = 0; i < SAMPLES; i++) {
        struct vs_sample *s = &ds->sample[i];
        if (s->state != 2) continue;
        CUresult q = vs_real.cuEventQuery(s->end);
        if (q == CUDA_ERROR_NOT_READY) continue;
        float ms = 0;
        s->state = 0;
        if (q != CUDA_SUCCESS || vs_real.cuEventElapsedTime(&ms, s->start, s->end) != CUDA_SUCCESS) {
            /* e.g. the context that owned the events is gone: make new ones next time */
            vs_real.cuEventDestroy_v2(s->start);
            vs_real.cuEventDestroy_v2(s->end);
            s->start = s->end = NULL;
            continue;
        }
        int64_t actual = (int64_t)((double)ms * 1e6);
        bucket_add(dev, s->charged - actual, (uint64_t)actual, 0);
        ds->estimate_ns = ds->estimate_ns == 0 ? actual : (3 * ds->estimate_ns + actual) / 4;
    }
}

/* Until one launch was measured there is no estimate: wait for the first one to finish so a
   fresh process cannot queue an unbounded burst. */
static void wait_first_measure(int dev, struct device_samples *ds) {
    for (int i = 0; i < SAMPLES && ds->estimate_ns == 0; i++) {
        if (ds->sample[i].state != 2) continue;
        vs_real.cuEventSynchronize(ds->sample[i].end);
        collect(dev, ds);
    }
}

static void refill(vs_region_device *d, uint64_t now, uint32_t sm_limit) {
    if (now > d->refill_ns) {
        d->tokens_ns += (int64_t)((now - d->refill_ns) * sm_limit / 100);
        d->refill_ns = now;
    }
    int64_t cap = BURST_NS * sm_limit / 100;
    if (d->tokens_ns > cap) d->tokens_ns = cap;
}

/* Draw `cost` from the bucket, sleeping while it is in debt. 0 = drawn, -1 = not paced. */
static int draw(int dev, int64_t cost, struct device_samples *ds) {
    for (;;) {
        if (vs_region_lock() != 0) return -1;
        vs_region_device *d = &vs_region_map()->devices[dev];
        /* this process's limit, not the region's copy: the container can write the region */
        uint32_t sm_limit = vs_sm_limit(dev);
        if (sm_limit == 0) {
            vs_region_unlock();
            return -1;
        }
        refill(d, vs_now_ns(), sm_limit);
        if (d->tokens_ns > 0) {
            d->tokens_ns -= cost;
            d->launches++;
            vs_region_unlock();
            return 0;
        }
        int64_t wait = -d->tokens_ns * 100 / sm_limit + 1000;
        vs_region_unlock();
        if (wait > MAX_SLEEP_NS) wait = MAX_SLEEP_NS;
        struct timespec ts = {wait / 1000000000ll, wait % 1000000000ll};
        nanosleep(&ts, NULL);
        bucket_add(dev, 0, 0, (uint64_t)wait);
        if (pthread_mutex_trylock(&ds->lock) == 0) {
            collect(dev, ds);
            pthread_mutex_unlock(&ds->lock);
        }
    }
}

static struct vs_sample *reserve_sample(struct device_samples *ds) {
    for (int i = 0; i < SAMPLES; i++) {
        struct vs_sample *s = &ds->sample[i];
        if (s->state != 0) continue;
        if (s->start == NULL && (vs_real.cuEventCreate(&s->start, CU_EVENT_DEFAULT) != CUDA_SUCCESS ||
                                 vs_real.cuEventCreate(&s->end, CU_EVENT_DEFAULT) != CUDA_SUCCESS))
            return NULL;
        s->state = 1;
        return s;
    }
    return NULL;
}

static CUresult record(CUevent event, CUstream stream, int per_thread) {
    if (per_thread && vs_real.cuEventRecord_ptsz != NULL)
        return vs_real.cuEventRecord_ptsz(event, stream);
    return vs_real.cuEventRecord(event, stream);
}

void vs_limiter_before(int dev, CUstream stream, int per_thread, struct vs_ticket *t) {
    t->dev = -1;
    t->stream = stream;
    t->per_thread = per_thread;
    t->sample = NULL;
    if (vs_real.cuEventQuery == NULL || vs_real.cuEventElapsedTime == NULL) return;
    struct device_samples *ds = &devices[dev];
    pthread_mutex_lock(&ds->lock);
    collect(dev, ds);
    wait_first_measure(dev, ds);
    int64_t cost = ds->estimate_ns;
    pthread_mutex_unlock(&ds->lock);
    if (draw(dev, cost, ds) != 0) return;
    t->dev = dev;
    t->cost = cost;
    pthread_mutex_lock(&ds->lock);
    struct vs_sample *s = reserve_sample(ds);
    if (s != NULL && record(s->start, stream, per_thread) != CUDA_SUCCESS) {
        s->state = 0;
        s = NULL;
    }
    pthread_mutex_unlock(&ds->lock);
    t->sample = s;
}

void vs_limiter_after(struct vs_ticket *t, CUresult launched) {
    if (t->dev < 0) return;
    struct device_samples *ds = &devices[t->dev];
    struct vs_sample *s = t->sample;
    if (launched != CUDA_SUCCESS) bucket_add(t->dev, t->cost, 0, 0); /* nothing ran: refund */
    if (s == NULL) return;
    pthread_mutex_lock(&ds->lock);
    if (launched == CUDA_SUCCESS && record(s->end, t->stream, t->per_thread) == CUDA_SUCCESS) {
        s->charged = t->cost;
        s->state = 2;
    } else {
        s->state = 0;
    }
    pthread_mutex_unlock(&ds->lock);
}
