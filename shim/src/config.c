/*
 * Limits, parsed once. Two sources, and exactly one of them is trusted (docs/shim.md):
 *
 * - the limits file: the fixed container path VS_LIMITS_PATH when it exists (the device
 *   plugin mounts it read-only into every container it serves), else the file named by
 *   VSLICE_LIMITS_FILE (tests, bare metal). When a limits file is in force the environment
 *   can only lower a limit, never raise or remove one, and the region path comes from the
 *   file as well;
 * - otherwise the HAMi-compatible environment (CUDA_DEVICE_MEMORY_LIMIT[_i], ...).
 *
 * A limit that cannot be read or parsed fails closed: the device gets no memory at all
 * (mem_limited = 1, mem_limit = 0) and one line on stderr says why.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

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

/* ---- the limits file: "NAME=VALUE" lines, '#' comments, at most VS_LIMITS_MAX bytes ---- */

#define VS_LIMITS_MAX 8192
#define VS_LIMITS_ENTRIES 64

static char file_text[VS_LIMITS_MAX + 1];
static struct { const char *name, *value; } entries[VS_LIMITS_ENTRIES];
static int entry_count;

static const char *file_get(const char *name) {
    for (int i = 0; i < entry_count; i++)
        if (strcmp(entries[i].name, name) == 0) return entries[i].value;
    return NULL;
}

/* Names a limits file may hold: a typo must not silently drop a limit. */
static int known_name(const char *name) {
    static const char *const exact[] = {"VSLICE_LIMITS_VERSION", "CUDA_DEVICE_MEMORY_LIMIT",
                                        "CUDA_DEVICE_SM_LIMIT", "CUDA_DEVICE_MEMORY_SHARED_CACHE",
                                        "VSLICE_CONTEXT_OVERHEAD"};
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (strcmp(name, exact[i]) == 0) return 1;
    static const char *const indexed[] = {"CUDA_DEVICE_MEMORY_LIMIT_", "CUDA_DEVICE_SM_LIMIT_"};
    for (size_t i = 0; i < sizeof indexed / sizeof indexed[0]; i++) {
        size_t n = strlen(indexed[i]);
        if (strncmp(name, indexed[i], n) != 0) continue;
        char *end = NULL;
        errno = 0;
        long index = strtol(name + n, &end, 10);
        if (name[n] >= '0' && name[n] <= '9' && *end == '\0' && errno == 0 && index >= 0 &&
            index < VS_MAX_DEVICES)
            return 1;
    }
    return 0;
}

/* Reads and splits the file; NULL when usable, else why not (for the one stderr line). */
static const char *load_file(const char *path, char *why, size_t length) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, length, "cannot be read (%s)", strerror(errno));
        return why;
    }
    size_t size = 0;
    for (;;) {
        ssize_t n = read(fd, file_text + size, VS_LIMITS_MAX + 1 - size);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            snprintf(why, length, "cannot be read (%s)", strerror(errno));
            close(fd);
            return why;
        }
        if (n == 0) break;
        size += (size_t)n;
        if (size > VS_LIMITS_MAX) {
            close(fd);
            return "is larger than 8 KiB";
        }
    }
    close(fd);
    file_text[size] = '\0';
    int number = 0;
    for (char *save = NULL, *line = strtok_r(file_text, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        number++;
        if (*line == '#' || *line == '\0') continue;
        char *equals = strchr(line, '=');
        if (equals == NULL) {
            snprintf(why, length, "line %d is not NAME=VALUE", number);
            return why;
        }
        *equals = '\0';
        if (!known_name(line)) {
            snprintf(why, length, "line %d names unknown setting '%.64s'", number, line);
            return why;
        }
        if (entry_count == VS_LIMITS_ENTRIES) return "holds too many lines";
        entries[entry_count].name = line;
        entries[entry_count].value = equals + 1;
        entry_count++;
    }
    const char *version = file_get("VSLICE_LIMITS_VERSION");
    if (version == NULL) return "has no VSLICE_LIMITS_VERSION line";
    if (strcmp(version, "1") != 0) {
        snprintf(why, length, "has VSLICE_LIMITS_VERSION=%.16s, this shim reads 1", version);
        return why;
    }
    return NULL;
}

/* ---- lookups ---- */

typedef const char *(*source_fn)(const char *name);

static const char *env_get(const char *name) { return getenv(name); }

/* The value for device i: NAME_<i> if set, else NAME. Writes the name used. */
static const char *lookup(source_fn get, const char *name, int index, char *used, size_t size) {
    snprintf(used, size, "%s_%d", name, index);
    const char *text = get(used);
    if (text != NULL) return text;
    snprintf(used, size, "%s", name);
    return get(name);
}

/* A bad global value is reported once (for device 0), a bad per-device value for its device. */
static int reported_here(const char *used, const char *base, int index) {
    return strlen(used) > strlen(base) || index == 0;
}

static void close_device(int index) {
    config.mem_limited[index] = 1;
    config.mem_limit[index] = 0;
    config.tracking = 1;
}

/* Limits from the environment alone (no limits file). */
static void env_limits(int index) {
    char name[64];
    const char *base = "CUDA_DEVICE_MEMORY_LIMIT";
    const char *text = lookup(env_get, base, index, name, sizeof name);
    if (text != NULL && *text != '\0') {
        if (vs_parse_size(text, &config.mem_limit[index]) == 0) {
            config.mem_limited[index] = config.mem_limit[index] != 0;
        } else {
            close_device(index);
            if (reported_here(name, base, index))
                VS_LOG(VS_ERROR, "%s='%s' is not a size (e.g. 4096m, 4g); %s gets no GPU memory",
                       name, text, strlen(name) > strlen(base) ? "this device" : "every device");
        }
    }
    base = "CUDA_DEVICE_SM_LIMIT";
    text = lookup(env_get, base, index, name, sizeof name);
    if (text != NULL && *text != '\0' && vs_parse_percent(text, &config.sm_limit[index]) != 0) {
        config.sm_limit[index] = 0;
        close_device(index);
        if (reported_here(name, base, index))
            VS_LOG(VS_ERROR, "%s='%s' is not a percentage 0-100; %s gets no GPU memory", name,
                   text, strlen(name) > strlen(base) ? "this device" : "every device");
    }
}

/* Limits from the file; the environment may lower them. A device the file gives no memory
   limit gets no memory: the device plugin writes one for every device it grants. */
static void file_limits(int index, const char *path) {
    char name[64], env_name[64];
    const char *base = "CUDA_DEVICE_MEMORY_LIMIT";
    const char *text = lookup(file_get, base, index, name, sizeof name);
    if (text == NULL || vs_parse_size(text, &config.mem_limit[index]) != 0) {
        close_device(index);
        if (text != NULL && reported_here(name, base, index))
            VS_LOG(VS_ERROR, "limits file %s: %s='%s' is not a size; %s gets no GPU memory", path,
                   name, text, strlen(name) > strlen(base) ? "this device" : "every device");
        else if (text == NULL && index == 0) /* the first device is always granted */
            VS_LOG(VS_ERROR, "limits file %s has no CUDA_DEVICE_MEMORY_LIMIT_0; device 0 gets no "
                             "GPU memory", path);
    } else {
        config.mem_limited[index] = 1;
        uint64_t lower = 0;
        const char *env = lookup(env_get, base, index, env_name, sizeof env_name);
        if (env != NULL && vs_parse_size(env, &lower) == 0 && lower != 0 &&
            lower < config.mem_limit[index])
            config.mem_limit[index] = lower;
    }
    base = "CUDA_DEVICE_SM_LIMIT";
    text = lookup(file_get, base, index, name, sizeof name);
    if (text != NULL && vs_parse_percent(text, &config.sm_limit[index]) != 0) {
        config.sm_limit[index] = 0;
        close_device(index);
        if (reported_here(name, base, index))
            VS_LOG(VS_ERROR, "limits file %s: %s='%s' is not a percentage; %s gets no GPU memory",
                   path, name, text, strlen(name) > strlen(base) ? "this device" : "every device");
        return;
    }
    uint32_t granted = config.sm_limit[index] == 0 ? 100 : config.sm_limit[index], lower = 0;
    const char *env = lookup(env_get, base, index, env_name, sizeof env_name);
    if (env != NULL && vs_parse_percent(env, &lower) == 0 && lower != 0 && lower < granted)
        config.sm_limit[index] = lower;
}

static void finish_device(int index) {
    if (config.sm_limit[index] >= 100) config.sm_limit[index] = 0; /* 100% = the whole device */
    if (config.mem_limited[index] || config.sm_limit[index] != 0) config.tracking = 1;
    if (config.sm_limit[index] != 0) config.pacing = 1;
}

/* The limits file in force: the fixed container path when it exists, else VSLICE_LIMITS_FILE.
   A tenant can neither remove nor replace the read-only mount, and pointing the variable
   elsewhere changes nothing while the fixed file exists. */
static const char *limits_path(int *fixed) {
    struct stat st;
    *fixed = lstat(VS_LIMITS_PATH, &st) == 0;
    if (*fixed) return VS_LIMITS_PATH;
    const char *path = getenv("VSLICE_LIMITS_FILE");
    return path != NULL && *path != '\0' ? path : NULL;
}

/* The device plugin mounts the fixed path read-only; a writable file there is not its file
   (a volume the pod mounted over it), so it is not trusted. */
static const char *writable_mount(const char *path) {
    struct statvfs fs;
    if (statvfs(path, &fs) != 0 || (fs.f_flag & ST_RDONLY) == 0)
        return "is not on a read-only mount (not the device plugin's file)";
    return NULL;
}

static void read_config(void) {
    int fixed = 0;
    const char *path = limits_path(&fixed);
    char why[160];
    const char *problem = path != NULL && fixed ? writable_mount(path) : NULL;
    if (problem == NULL && path != NULL) problem = load_file(path, why, sizeof why);
    if (problem != NULL) {
        VS_LOG(VS_ERROR, "limits file %s %s; this container gets no GPU memory", path, problem);
        config.limits_file = path;
        for (int i = 0; i < VS_MAX_DEVICES; i++) close_device(i);
    } else if (path != NULL) {
        config.limits_file = path;
        for (int i = 0; i < VS_MAX_DEVICES; i++) file_limits(i, path);
        const char *region = file_get("CUDA_DEVICE_MEMORY_SHARED_CACHE");
        if (region != NULL && *region != '\0') config.region_path = region;
        config.tracking = 1;
    } else {
        for (int i = 0; i < VS_MAX_DEVICES; i++) env_limits(i);
        const char *region = getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
        if (region != NULL && *region != '\0') {
            config.region_path = region;
            config.tracking = 1;
        }
    }
    for (int i = 0; i < VS_MAX_DEVICES; i++) finish_device(i);
    /* With a limits file the overhead charged is the node's setting: a process must not make
       its own context free. */
    const char *overhead = config.limits_file != NULL ? file_get("VSLICE_CONTEXT_OVERHEAD")
                                                      : getenv("VSLICE_CONTEXT_OVERHEAD");
    if (overhead == NULL || *overhead == '\0' || strcmp(overhead, "auto") == 0) {
        config.context_overhead_auto = 1;
    } else if (vs_parse_size(overhead, &config.context_overhead) != 0) {
        config.context_overhead = 0;
        VS_LOG(VS_ERROR, "VSLICE_CONTEXT_OVERHEAD='%s' is not a size (e.g. 300m) or auto; context "
                         "overhead is not charged", overhead);
    }
}

const struct vs_config *vs_config_ready;

const struct vs_config *vs_config_read(void) {
    pthread_once(&config_once, read_config);
    __atomic_store_n(&vs_config_ready, &config, __ATOMIC_RELEASE);
    return &config;
}
