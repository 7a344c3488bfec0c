/*
 * How a GPU's UUID string (what NVML reports) maps to the 16 bytes of cuDeviceGetUuid.
 *
 * A canonical "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" gives its 32 hex digits, as the real
 * driver does. Any other string (a test inventory's "GPU-0") gives a stable hash of the string:
 * two 64-bit FNV-1a passes, stored big-endian. The fake driver derives cuDeviceGetUuid this way
 * and the shim matches NVML devices to CUDA devices the same way, so both agree on every string.
 */
#ifndef VSLICE_GPU_UUID_H
#define VSLICE_GPU_UUID_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

static inline int vs_hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* 0 and the bytes when text is exactly GPU-8-4-4-4-12 hex digits, -1 otherwise. */
static inline int vs_uuid_parse_canonical(const char *text, uint8_t out[16]) {
    static const char shape[] = "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
    int n = 0;
    for (size_t i = 0; i < sizeof shape - 1; i++) {
        if (shape[i] != 'x') {
            if (text[i] != shape[i]) return -1;
            continue;
        }
        int v = vs_hex_digit(text[i]);
        if (v < 0) return -1;
        if (n % 2 == 0)
            out[n / 2] = (uint8_t)(v << 4);
        else
            out[n / 2] |= (uint8_t)v;
        n++;
    }
    return text[sizeof shape - 1] == '\0' ? 0 : -1;
}

static inline uint64_t vs_fnv1a(const char *text, uint64_t hash) {
    for (const unsigned char *p = (const unsigned char *)text; *p != '\0'; p++)
        hash = (hash ^ *p) * 0x100000001b3ull;
    return hash;
}

static inline void vs_uuid_from_text(const char *text, uint8_t out[16]) {
    if (vs_uuid_parse_canonical(text, out) == 0) return;
    uint64_t high = vs_fnv1a(text, 0xcbf29ce484222325ull);
    uint64_t low = vs_fnv1a(text, high ^ 0x9e3779b97f4a7c15ull);
    for (int i = 0; i < 8; i++) {
        out[i] = (uint8_t)(high >> (56 - 8 * i));
        out[8 + i] = (uint8_t)(low >> (56 - 8 * i));
    }
}

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (41 bytes with the terminator). */
static inline void vs_uuid_format(const uint8_t u[16], char *out, size_t size) {
    snprintf(out, size,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
             u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
             u[15]);
}

#endif
