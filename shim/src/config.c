/* Limits from the environment (HAMi-compatible names), parsed once. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

static struct vs_config config;
static pthread_once_t config_once = PTHREAD_ONCE_INIT;

/* "4g", "3000m", "512Mi", "1GiB", "1048576": binary units, no suffix = bytes. */
int vs_parse_size(const char *text, uint64_t *out) {
    if (text == NULL || *text < '0' || *text > '9') return -1;
    errno = 0;
    char *end = NULL;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno != 0) return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
    }
    if (shift != 0 && (*end == 'i' || *end == 'I')) end++;
    if (shift != 0 && (*end == 'b' || *end == 'B')) end++;
    if (*end != '\0') return -1;
    if (shift != 0 && value > (UINT64_MAX >> shift)) return -1;
    *out = (uint64_t)value << shift;
    return 0;
}

int vs_parse_percent(const char *text, uint32_t *out) {
    if (text == NULL || *text < '0' || *text > '9') return -1;
    char *end = NULL;
    errno = 0;
    unsigned long value = strtoul(text, &end, 10);
    if (errno != 0 || *end != '\0' || value > 100) return -1;
    *out = (uint32_t)value;
    return 0;
}

/* The value for device i: NAME_<i> if set, else NAME. Writes the variable's name used. */
static const char *lookup(const char *name, int index, char *used, size_t size) {
    snprintf(used, size, "%s_%d", name, index);
    const char *text = getenv(used);
    if (text != NULL) return text;
    snprintf(used, size, "%s", name);
    return getenv(name);
}

/* A bad global value is reported once (for device 0), a bad per-device value for its device. */
static int reported_here(const char *used, const char *base, int index) {
    return strlen(used) > strlen(base) || index == 0;
}

static void read_limits(int index) {
    char name[64];
    const char *base = "CUDA_DEVICE_MEMORY_LIMIT";
    const char *text = lookup(base, index, name, sizeof name);
    if (text != NULL && *text != '\0' && vs_parse_size(text, &config.mem_limit[index]) != 0) {
        config.mem_limit[index] = 0;
        if (reported_here(name, base, index))
            VS_LOG(VS_ERROR, "%s='%s' is not a size (e.g. 4096m, 4g); running without a memory "
                             "limit for %s", name, text, strlen(name) > strlen(base) ? "this device" : "any device");
    }
    base = "CUDA_DEVICE_SM_LIMIT";
    text = lookup(base, index, name, sizeof name);
    if (text != NULL && *text != '\0' && vs_parse_percent(text, &config.sm_limit[index]) != 0) {
        config.sm_limit[index] = 0;
        if (reported_here(name, base, index))
            VS_LOG(VS_ERROR, "%s='%s' is not a percentage 0-100; running without a compute "
                             "limit for %s", name, text, strlen(name) > strlen(base) ? "this device" : "any device");
    }
    if (config.sm_limit[index] >= 100) config.sm_limit[index] = 0; /* 100% = the whole device */
    if (config.mem_limit[index] != 0 || config.sm_limit[index] != 0) config.tracking = 1;
    if (config.sm_limit[index] != 0) config.pacing = 1;
}

static void read_config(void) {
    for (int i = 0; i < VS_MAX_DEVICES; i++) read_limits(i);
    const char *path = getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
    if (path != NULL && *path != '\0') {
        config.region_path = path;
        config.tracking = 1;
    }
    const char *overhead = getenv("VSLICE_CONTEXT_OVERHEAD");
    if (overhead == NULL || *overhead == '\0' || strcmp(overhead, "auto") == 0) {
        config.context_overhead_auto = 1;
    } else if (vs_parse_size(overhead, &config.context_overhead) != 0) {
        config.context_overhead = 0;
        VS_LOG(VS_ERROR, "VSLICE_CONTEXT_OVERHEAD='%s' is not a size (e.g. 300m) or auto; context "
                         "overhead is not charged", overhead);
    }
}

const struct vs_config *vs_config(void) {
    pthread_once(&config_once, read_config);
    return &config;
}
