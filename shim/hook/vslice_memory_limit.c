/*
 * vslice-memory-limit: a container's GPU memory limit, enforced by NVIDIA's driver (R615 and
 * later, cgroup v2) through nvmlDeviceSetMemoryLimits_v1 on the container's cgroup. The
 * container runtime runs `set` as a CDI createRuntime hook, after the container's cgroup exists
 * and before its program starts; the node agent runs `probe` to choose this backend.
 *
 *   vslice-memory-limit probe [--nvml LIB]
 *       "available: driver <version>, <n> GPU(s)" (exit 0) or "unavailable: <reason>" (exit 3)
 *   vslice-memory-limit set [--nvml LIB] [--mark FILE] [--pid PID] UUID=BYTES [UUID=BYTES...]
 *       the OCI state JSON on stdin names the container's pid (--pid instead: by hand, tests);
 *       each GPU's hard limit is set on that pid's cgroup and read back; exit 1 on any failure,
 *       so that the runtime refuses to start the container. --mark FILE: written (atomically,
 *       mode 0444) once every limit is set: "backend=driver", "namespace=<ns>", "<UUID>=<bytes>"
 *   vslice-memory-limit show [--nvml LIB] [--pid PID | --namespace NS] [UUID...]
 *       "<uuid> soft=<n> hard=<n|max> used=<n>" per GPU (all of them without UUIDs), for the
 *       cgroup of PID, NS, or this program's own
 *
 * NVML is opened at run time (LIB, default libnvidia-ml.so.1), so one binary serves NVIDIA's
 * driver and the fake one. A cgroup is named by its sysfs directory, by the rule the fake
 * driver also follows (vslice/cgroup_path.h). Exit status 2: bad usage.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vslice/cgroup_path.h"
#include "vslice/nvml_abi.h"

#define NAME "vslice-memory-limit"
enum { EXIT_FAILED = 1, EXIT_USAGE = 2, EXIT_UNAVAILABLE = 3 };
#define MAX_STATE (1 << 20) /* bytes of OCI state read from stdin */

static const char usage_text[] =
    "usage: " NAME " probe [--nvml LIB]\n"
    "       " NAME " set [--nvml LIB] [--mark FILE] [--pid PID] UUID=BYTES [UUID=BYTES...]\n"
    "       " NAME " show [--nvml LIB] [--pid PID | --namespace NS] [UUID...]\n";

/* ---- what was asked ---- */
struct options {
    const char *command;
    const char *library; /* --nvml */
    const char *mark;    /* --mark */
    const char *ns;      /* --namespace */
    int pid;             /* --pid; 0: not given */
    char **args;         /* UUID=BYTES (set) or UUID (show) */
    int arg_count;
};

static int usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    fprintf(stderr, NAME ": ");
    vfprintf(stderr, fmt, args);
    va_end(args);
    fprintf(stderr, "\n%s", usage_text);
    return EXIT_USAGE;
}

/* One line on stderr; the exit status of a failure. */
static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    fprintf(stderr, NAME ": ");
    vfprintf(stderr, fmt, args);
    va_end(args);
    fputc('\n', stderr);
    return EXIT_FAILED;
}

/* probe's answer when limits cannot be set: one line on stdout. */
static int unavailable(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int unavailable(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    printf("unavailable: ");
    vprintf(fmt, args);
    va_end(args);
    putchar('\n');
    return EXIT_UNAVAILABLE;
}

/* A positive int of digits only at p: just past its digits, NULL when there is none. */
static const char *positive_int(const char *p, int *out) {
    if (*p < '1' || *p > '9') return NULL;
    long long value = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        value = value * 10 + (*p - '0');
        if (value > INT_MAX) return NULL;
    }
    *out = (int)value;
    return p;
}

/* A decimal byte count: digits only, within 64 bits. */
static int parse_bytes(const char *text, unsigned long long *out) {
    if (*text < '0' || *text > '9') return -1;
    errno = 0;
    char *end = NULL;
    *out = strtoull(text, &end, 10);
    return *end != '\0' || errno == ERANGE ? -1 : 0;
}

/* The option's field in o when the command takes it, else NULL. */
static const char **option_field(struct options *o, const char *name) {
    int is_set = strcmp(o->command, "set") == 0, is_show = strcmp(o->command, "show") == 0;
    if (strcmp(name, "--nvml") == 0) return &o->library;
    if (strcmp(name, "--mark") == 0 && is_set) return &o->mark;
    if (strcmp(name, "--namespace") == 0 && is_show) return &o->ns;
    return NULL;
}

static int parse_options(int argc, char **argv, struct options *o) {
    *o = (struct options){.command = argv[1], .library = "libnvidia-ml.so.1", .args = argv + 2};
    int takes_pid = strcmp(o->command, "set") == 0 || strcmp(o->command, "show") == 0;
    for (int i = 2; i < argc; i++) {
        const char *name = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL, *end;
        const char **field = option_field(o, name);
        if (strncmp(name, "--", 2) != 0) {
            o->args[o->arg_count++] = argv[i]; /* positional: kept in order, in place */
            continue;
        }
        if (field == NULL && !(takes_pid && strcmp(name, "--pid") == 0))
            return usage("%s is not an option of %s", name, o->command);
        if (value == NULL) return usage("%s needs a value", name);
        if (field != NULL)
            *field = value;
        else if ((end = positive_int(value, &o->pid)) == NULL || *end != '\0')
            return usage("--pid '%s' is not a positive integer", value);
        i++;
    }
    if (o->pid != 0 && o->ns != NULL) return usage("--pid and --namespace exclude each other");
    return 0;
}

/* ---- the OCI state on stdin: {"ociVersion": .., "id": .., "pid": 1234, ...} ---- */
static const char *skip_space(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

/* p at a '"': just past the closing one, NULL when the string does not end. */
static const char *skip_string(const char *p) {
    for (p++; *p != '\0'; p++) {
        if (*p == '\\' && *++p == '\0') return NULL;
        if (*p == '"') return p + 1;
    }
    return NULL;
}

/* Past one value (strings, objects and arrays skipped whole): at the ',' or '}' after it. */
static const char *skip_value(const char *p) {
    int depth = 0;
    while (*p != '\0') {
        if (*p == '"') {
            if ((p = skip_string(p)) == NULL) return NULL;
            continue;
        }
        if (depth == 0 && (*p == ',' || *p == '}')) return p;
        if (*p == '{' || *p == '[') depth++;
        if (*p == '}' || *p == ']') depth--;
        if (depth < 0) return NULL;
        p++;
    }
    return NULL;
}

/* The top-level "pid" member: 0 with *pid, -1 when there is none or it is not a positive
   integer (a string, a fraction, a negative number, more than an int). */
static int state_pid(const char *json, int *pid) {
    const char *p = skip_space(json);
    if (*p++ != '{') return -1;
    for (;;) {
        p = skip_space(p);
        if (*p != '"') return -1;
        const char *key = p + 1;
        if ((p = skip_string(p)) == NULL) return -1;
        int is_pid = p - key == 4 && memcmp(key, "pid\"", 4) == 0;
        p = skip_space(p);
        if (*p++ != ':') return -1;
        p = skip_space(p);
        if (is_pid) {
            p = positive_int(p, pid);
            return p != NULL && (*(p = skip_space(p)) == ',' || *p == '}') ? 0 : -1;
        }
        if ((p = skip_value(p)) == NULL || *p++ != ',') return -1;
    }
}

static int pid_from_stdin(int *pid) {
    static char state[MAX_STATE + 1];
    size_t got = 0;
    ssize_t n;
    while (got < MAX_STATE && (n = read(0, state + got, MAX_STATE - got)) != 0) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return fail("cannot read the OCI state on stdin: %s", strerror(errno));
        got += (size_t)n;
    }
    state[got] = '\0';
    if (state_pid(state, pid) != 0)
        return fail("the OCI state on stdin has no \"pid\" that is a positive integer "
                    "(%zu bytes read)", got);
    return 0;
}

/* The cgroup namespace of pid (0: this program), or a failure naming the pid. */
static int namespace_of(int pid, char *ns, size_t size) {
    if (vs_cgroup_path(pid, ns, size) == 0) return 0;
    if (pid == 0) return fail("no cgroup in /proc/self/cgroup: %s", strerror(errno));
    return fail("no cgroup for pid %d in /proc/%d/cgroup: %s", pid, pid, strerror(errno));
}

/* ---- NVML, resolved by name from the library given ---- */
static struct {
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*shutdown)(void);
    const char *(*error_string)(nvmlReturn_t);
    nvmlReturn_t (*driver_version)(char *, unsigned int);
    nvmlReturn_t (*count)(unsigned int *);
    nvmlReturn_t (*by_index)(unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*by_uuid)(const char *, nvmlDevice_t *);
    nvmlReturn_t (*uuid)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*set_limits)(nvmlDevice_t, nvmlSetMemoryLimits_v1_t *); /* R615 */
    nvmlReturn_t (*get_limits)(nvmlDevice_t, nvmlGetMemoryLimits_v1_t *); /* R615 */
} nvml;
static char driver_version[96] = "unknown";

/* Opens the library and resolves the entry points: those every driver has, and the two limit
   entry points, which stay NULL on a driver older than R615. 0, or -1 with the reason in why. */
static int load(const char *library, char *why, size_t size) {
    void *lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        snprintf(why, size, "cannot load %s: %s", library, dlerror());
        return -1;
    }
    struct {
        const char *name;
        void **fn;
        int optional;
    } entries[] = {
        {"nvmlInit_v2", (void **)&nvml.init, 0},
        {"nvmlShutdown", (void **)&nvml.shutdown, 0},
        {"nvmlErrorString", (void **)&nvml.error_string, 0},
        {"nvmlSystemGetDriverVersion", (void **)&nvml.driver_version, 0},
        {"nvmlDeviceGetCount_v2", (void **)&nvml.count, 0},
        {"nvmlDeviceGetHandleByIndex_v2", (void **)&nvml.by_index, 0},
        {"nvmlDeviceGetHandleByUUID", (void **)&nvml.by_uuid, 0},
        {"nvmlDeviceGetUUID", (void **)&nvml.uuid, 0},
        {"nvmlDeviceSetMemoryLimits_v1", (void **)&nvml.set_limits, 1},
        {"nvmlDeviceGetMemoryLimits_v1", (void **)&nvml.get_limits, 1},
    };
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
        *entries[i].fn = dlsym(lib, entries[i].name);
        if (*entries[i].fn == NULL && !entries[i].optional) {
            snprintf(why, size, "%s has no %s: not NVML", library, entries[i].name);
            return -1;
        }
    }
    return 0;
}

/* load + nvmlInit_v2 + the driver's version. 0, or -1 with the reason in why. */
static int start(const char *library, char *why, size_t size) {
    if (load(library, why, size) != 0) return -1;
    nvmlReturn_t r = nvml.init();
    if (r != NVML_SUCCESS) {
        snprintf(why, size, "nvmlInit_v2 failed: %s (%d)", nvml.error_string(r), (int)r);
        return -1;
    }
    if (nvml.driver_version(driver_version, sizeof driver_version) != NVML_SUCCESS)
        snprintf(driver_version, sizeof driver_version, "unknown");
    return 0;
}

/* Which of the limit entry points the driver lacks, or NULL when it has both. */
static const char *missing_entry_point(void) {
    if (nvml.set_limits == NULL) return "nvmlDeviceSetMemoryLimits_v1";
    if (nvml.get_limits == NULL) return "nvmlDeviceGetMemoryLimits_v1";
    return NULL;
}

static int nvml_fail(nvmlReturn_t r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int nvml_fail(nvmlReturn_t r, const char *fmt, ...) {
    char what[VS_CGROUP_PATH_MAX + 512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(what, sizeof what, fmt, args);
    va_end(args);
    return fail("%s: %s (%d)", what, nvml.error_string(r), (int)r);
}

/* ---- probe ---- */
static int probe_limits(void) {
    const char *missing = missing_entry_point();
    if (missing != NULL)
        return unavailable("%s missing: driver %s is older than R615", missing, driver_version);
    unsigned int count = 0;
    nvmlReturn_t r = nvml.count(&count);
    if (r != NVML_SUCCESS)
        return unavailable("nvmlDeviceGetCount_v2 failed: %s (%d)", nvml.error_string(r), (int)r);
    if (count == 0) return unavailable("no GPUs (driver %s)", driver_version);
    char ns[VS_CGROUP_PATH_MAX];
    if (vs_cgroup_path(0, ns, sizeof ns) != 0)
        return unavailable("no cgroup in /proc/self/cgroup: %s", strerror(errno));
    nvmlDevice_t device;
    nvmlGetMemoryLimits_v1_t limits = {.nameSpace = ns};
    r = nvml.by_index(0, &device);
    if (r == NVML_SUCCESS) r = nvml.get_limits(device, &limits);
    if (r == NVML_ERROR_NOT_SUPPORTED)
        return unavailable("nvmlDeviceGetMemoryLimits_v1 on GPU 0: not supported by this "
                           "driver/GPU (MIG or no cgroup v2 memory backend), driver %s",
                           driver_version);
    if (r != NVML_SUCCESS)
        return unavailable("nvmlDeviceGetMemoryLimits_v1 on GPU 0 for %s failed: %s (%d), "
                           "driver %s",
                           ns, nvml.error_string(r), (int)r, driver_version);
    printf("available: driver %s, %u GPU(s)\n", driver_version, count);
    return 0;
}

static int probe(const struct options *o) {
    char why[1024];
    if (o->arg_count != 0) return usage("probe takes no arguments");
    if (start(o->library, why, sizeof why) != 0) return unavailable("%s", why);
    int status = probe_limits();
    nvml.shutdown();
    return status;
}

/* ---- set ---- */
struct target {
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    unsigned long long bytes;
};

static int parse_targets(const struct options *o, struct target *targets) {
    if (o->arg_count == 0) return usage("set needs at least one UUID=BYTES");
    for (int i = 0; i < o->arg_count; i++) {
        const char *arg = o->args[i], *eq = strchr(arg, '=');
        size_t length = eq != NULL ? (size_t)(eq - arg) : 0;
        if (length == 0 || length >= sizeof targets[i].uuid)
            return usage("'%s' is not UUID=BYTES", arg);
        if (parse_bytes(eq + 1, &targets[i].bytes) != 0)
            return usage("'%s': BYTES must be a decimal count of bytes", arg);
        memcpy(targets[i].uuid, arg, length);
        targets[i].uuid[length] = '\0';
    }
    return 0;
}

/* Set one GPU's hard limit on ns, and read it back. */
static int set_one(const struct target *t, const char *ns) {
    nvmlDevice_t device;
    nvmlReturn_t r = nvml.by_uuid(t->uuid, &device);
    if (r != NVML_SUCCESS)
        return nvml_fail(r, "no GPU %s for a limit of %llu bytes on %s: nvmlDeviceGetHandleByUUID",
                         t->uuid, t->bytes, ns);
    nvmlSetMemoryLimits_v1_t limits = {.nameSpace = (char *)ns, .softLimit = 0,
                                       .hardLimit = t->bytes};
    r = nvml.set_limits(device, &limits);
    if (r != NVML_SUCCESS)
        return nvml_fail(r, "nvmlDeviceSetMemoryLimits_v1 of %s on %s to %llu bytes", t->uuid, ns,
                         t->bytes);
    nvmlGetMemoryLimits_v1_t now = {.nameSpace = (char *)ns};
    r = nvml.get_limits(device, &now);
    if (r != NVML_SUCCESS)
        return nvml_fail(r, "nvmlDeviceGetMemoryLimits_v1 of %s on %s after setting %llu bytes",
                         t->uuid, ns, t->bytes);
    if (now.hardLimit != t->bytes)
        return fail("the limit of %s on %s reads back as %llu bytes, not the %llu set", t->uuid,
                    ns, now.hardLimit, t->bytes);
    return 0;
}

/* The mark file's lines into fd, made read-only; fd is closed. 0, or -1 with errno set. */
static int write_lines(int fd, const char *ns, const struct target *t, int n) {
    FILE *f = fchmod(fd, 0444) == 0 ? fdopen(fd, "w") : NULL;
    if (f == NULL) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    fprintf(f, "backend=driver\nnamespace=%s\n", ns);
    for (int i = 0; i < n; i++) fprintf(f, "%s=%llu\n", t[i].uuid, t[i].bytes);
    int ok = fflush(f) == 0 && fsync(fd) == 0;
    int saved = errno;
    if (fclose(f) != 0) ok = 0;
    else errno = saved;
    return ok ? 0 : -1;
}

/* FILE, written whole or not at all: a temporary file beside it, renamed over it. */
static int write_mark(const char *file, const char *ns, const struct target *t, int n) {
    char temporary[PATH_MAX];
    int length = snprintf(temporary, sizeof temporary, "%s.%d.tmp", file, (int)getpid());
    if (length < 0 || length >= (int)sizeof temporary)
        return fail("cannot write the mark file %s: %s", file, strerror(ENAMETOOLONG));
    int fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0444);
    if (fd >= 0 && write_lines(fd, ns, t, n) == 0 && rename(temporary, file) == 0) return 0;
    int saved = errno;
    if (fd >= 0) unlink(temporary);
    return fail("cannot write the mark file %s: %s", file, strerror(saved));
}

static int set_all(const struct target *targets, int n, const char *ns, const char *mark) {
    const char *missing = missing_entry_point();
    if (missing != NULL)
        return fail("%s missing: driver %s is older than R615", missing, driver_version);
    for (int i = 0; i < n; i++)
        if (set_one(&targets[i], ns) != 0) return EXIT_FAILED;
    return mark != NULL ? write_mark(mark, ns, targets, n) : 0;
}

static int set(const struct options *o) {
    struct target *targets = calloc((size_t)o->arg_count + 1, sizeof *targets);
    char ns[VS_CGROUP_PATH_MAX], why[1024];
    int pid = o->pid, status = parse_targets(o, targets);
    if (status == 0 && pid == 0) status = pid_from_stdin(&pid);
    if (status == 0) status = namespace_of(pid, ns, sizeof ns);
    if (status == 0 && start(o->library, why, sizeof why) != 0) status = fail("%s", why);
    if (status == 0) {
        status = set_all(targets, o->arg_count, ns, o->mark);
        nvml.shutdown();
    }
    free(targets);
    return status;
}

/* ---- show ---- */
static int show_one(nvmlDevice_t device, const char *ns) {
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    nvmlReturn_t r = nvml.uuid(device, uuid, sizeof uuid);
    if (r != NVML_SUCCESS) return nvml_fail(r, "nvmlDeviceGetUUID");
    nvmlGetMemoryLimits_v1_t limits = {.nameSpace = (char *)ns};
    r = nvml.get_limits(device, &limits);
    if (r != NVML_SUCCESS) return nvml_fail(r, "nvmlDeviceGetMemoryLimits_v1 of %s on %s", uuid, ns);
    char hard[32] = "max";
    if (limits.hardLimit != VSLICE_NVML_MEMORY_LIMIT_MAX)
        snprintf(hard, sizeof hard, "%llu", limits.hardLimit);
    printf("%s soft=%llu hard=%s used=%llu\n", uuid, limits.softLimit, hard, limits.currentUsed);
    return 0;
}

static int show_all(const struct options *o, const char *ns) {
    const char *missing = missing_entry_point();
    if (missing != NULL)
        return fail("%s missing: driver %s is older than R615", missing, driver_version);
    unsigned int count = (unsigned)o->arg_count;
    nvmlReturn_t r = o->arg_count == 0 ? nvml.count(&count) : NVML_SUCCESS;
    if (r != NVML_SUCCESS) return nvml_fail(r, "nvmlDeviceGetCount_v2");
    for (unsigned int i = 0; i < count; i++) {
        nvmlDevice_t device;
        r = o->arg_count == 0 ? nvml.by_index(i, &device) : nvml.by_uuid(o->args[i], &device);
        if (r != NVML_SUCCESS && o->arg_count == 0)
            return nvml_fail(r, "nvmlDeviceGetHandleByIndex_v2(%u)", i);
        if (r != NVML_SUCCESS) return nvml_fail(r, "no GPU %s: nvmlDeviceGetHandleByUUID", o->args[i]);
        if (show_one(device, ns) != 0) return EXIT_FAILED;
    }
    return 0;
}

static int show(const struct options *o) {
    char ns[VS_CGROUP_PATH_MAX], why[1024];
    if (o->ns != NULL)
        snprintf(ns, sizeof ns, "%s", o->ns);
    else if (namespace_of(o->pid, ns, sizeof ns) != 0)
        return EXIT_FAILED;
    if (start(o->library, why, sizeof why) != 0) return fail("%s", why);
    int status = show_all(o, ns);
    nvml.shutdown();
    return status;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage("no command");
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        fputs(usage_text, stdout);
        return 0;
    }
    struct options o;
    int status = parse_options(argc, argv, &o);
    if (status != 0) return status;
    if (strcmp(o.command, "probe") == 0) return probe(&o);
    if (strcmp(o.command, "set") == 0) return set(&o);
    if (strcmp(o.command, "show") == 0) return show(&o);
    return usage("unknown command '%s'", o.command);
}
