/* Shared state of the fake GPUs (see device.h), attached once per process. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "device.h"

static struct fake_state *state;
static pthread_once_t state_once = PTHREAD_ONCE_INIT;

uint64_t fake_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int fake_parse_size(const char *text, uint64_t *out) {
    char *end = NULL;
    if (text == NULL || *text < '0' || *text > '9') return -1;
    unsigned long long value = strtoull(text, &end, 10);
    unsigned shift = 0;
    if (*end == 'k' || *end == 'K') shift = 10;
    if (*end == 'm' || *end == 'M') shift = 20;
    if (*end == 'g' || *end == 'G') shift = 30;
    if (shift != 0) end++;
    if (*end != '\0') return -1;
    *out = (uint64_t)value << shift;
    return 0;
}

void fake_uuid(int physical, uint8_t out[16]) {
    static const uint8_t base[16] = {0x56, 0x53, 0x4c, 0x46, 0x41, 0x4b, 0x45, 0x10,
                                     0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
    memcpy(out, base, 16);
    out[15] = (uint8_t)physical;
}

static void fill(struct fake_state *s) {
    const char *count = getenv("FAKE_CUDA_DEVICE_COUNT");
    const char *total = getenv("FAKE_CUDA_TOTAL_MEM");
    int n = count != NULL ? atoi(count) : 1;
    uint64_t bytes = 16ull << 30;
    if (total != NULL && fake_parse_size(total, &bytes) != 0) {
        fprintf(stderr, "[fake-cuda] FAKE_CUDA_TOTAL_MEM='%s' is not a size; using 16g\n", total);
        bytes = 16ull << 30;
    }
    s->device_count = (uint32_t)(n < 0 ? 0 : n > FAKE_MAX_DEVICES ? FAKE_MAX_DEVICES : n);
    s->ring_size = FAKE_RING;
    for (int i = 0; i < FAKE_MAX_DEVICES; i++) s->dev[i].total = bytes;
    __atomic_store_n(&s->magic, FAKE_MAGIC, __ATOMIC_RELEASE);
}

static void attach(void) {
    const char *path = getenv("FAKE_CUDA_STATE");
    size_t size = sizeof(struct fake_state);
    if (path == NULL || *path == '\0') {
        state = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (state == MAP_FAILED) abort();
        fill(state);
        return;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
        perror("[fake-cuda] FAKE_CUDA_STATE");
        abort();
    }
    flock(fd, LOCK_EX);
    struct stat st;
    fstat(fd, &st);
    if ((size_t)st.st_size < size && ftruncate(fd, (off_t)size) != 0) abort();
    state = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (state == MAP_FAILED) abort();
    if (state->magic != FAKE_MAGIC) fill(state);
    flock(fd, LOCK_UN);
    close(fd);
}

struct fake_state *fake_state(void) {
    pthread_once(&state_once, attach);
    return state;
}

int fake_reserve_memory(int physical, uint64_t bytes) {
    struct fake_device_state *d = &fake_state()->dev[physical];
    uint64_t used = __atomic_load_n(&d->used, __ATOMIC_RELAXED);
    do {
        if (bytes > d->total || used > d->total - bytes) return -1;
    } while (!__atomic_compare_exchange_n(&d->used, &used, used + bytes, 0, __ATOMIC_ACQ_REL,
                                          __ATOMIC_RELAXED));
    return 0;
}

void fake_release_memory(int physical, uint64_t bytes) {
    __atomic_fetch_sub(&fake_state()->dev[physical].used, bytes, __ATOMIC_ACQ_REL);
}
