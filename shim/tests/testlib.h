/* Small pieces shared by the C test programs. */
#ifndef VSLICE_TESTLIB_H
#define VSLICE_TESTLIB_H

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static inline uint64_t test_size(const char *text) {
    char *end = NULL;
    uint64_t value = strtoull(text, &end, 10);
    switch (*end) {
    case 'k': return value << 10;
    case 'm': return value << 20;
    case 'g': return value << 30;
    default: return value;
    }
}

static inline uint64_t test_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif
