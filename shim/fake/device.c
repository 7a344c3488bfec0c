/* The fake node (see device.h): its GPU list, what the container sees of it, and the shared
   state, set up once per process. */
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "device.h"
#include "vslice/cgroup_path.h"
#include "vslice/gpu_uuid.h"

static struct fake_state *state;
static pthread_once_t state_once = PTHREAD_ONCE_INIT;

/* This process's slot in a shared state file (see device.h); -1: none (no file, or full).
   slot_fd: the file, opened once for the locks (of the slots and of the limits). */
static const char *state_path;
static int slot_fd = -1;
static pthread_once_t fd_once = PTHREAD_ONCE_INIT;
static int my_slot = -1;
static pthread_once_t slot_once = PTHREAD_ONCE_INIT;
/* Lock bytes lie beyond the file's data: a lock on a range past the end is allowed. One per
   slot, then the limits lock. */
#define FAKE_LOCK_BASE ((off_t)1 << 40)
#define FAKE_LIMITS_LOCK (FAKE_LOCK_BASE + FAKE_MAX_PROCS)

/* The limits lock within this process: an OFD lock does not keep out the other threads. */
static pthread_mutex_t limits_mutex = PTHREAD_MUTEX_INITIALIZER;
static char own_namespace[FAKE_NAMESPACE_SIZE];
static pthread_once_t namespace_once = PTHREAD_ONCE_INIT;

/* The node's GPUs (physical order) and, of them, the ones the container sees. */
static struct {
    int from_env; /* FAKE_NVIDIA_GPUS is set */
    int count;
    struct fake_gpu gpu[FAKE_MAX_DEVICES];
    uint64_t total[FAKE_MAX_DEVICES];
} node;
static int seen[FAKE_MAX_DEVICES]; /* container index -> physical */
static int seen_count;
static int reported;

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

int fake_node_reported(void) { return reported; }

/* One line on stderr about the GPU list. Both libraries carry this code; the one whose sibling
   has already spoken stays quiet. */
static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...) {
    void *sibling = dlopen(FAKE_SIBLING, RTLD_LAZY | RTLD_NOLOAD);
    int (*said)(void) = sibling != NULL ? (int (*)(void))dlsym(sibling, "fake_node_reported") : NULL;
    int quiet = said != NULL && said != fake_node_reported && said();
    if (sibling != NULL) dlclose(sibling);
    reported = 1;
    if (quiet) return;
    char line[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(line, sizeof line, fmt, args);
    va_end(args);
    fprintf(stderr, FAKE_LOG "%s\n", line);
}

/* Strips blanks at both ends, in place. */
static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    return s;
}

static int fits(const char *s, size_t size) { return *s != '\0' && strlen(s) < size; }

/* One "UUID,MODEL,MEMORY" entry of FAKE_NVIDIA_GPUS; 0 when it parses. */
static int parse_gpu(char *entry, const char *original) {
    char *fields[4] = {NULL, NULL, NULL, NULL};
    int n = 0;
    for (char *save = NULL, *f = strtok_r(entry, ",", &save); f != NULL && n < 4;
         f = strtok_r(NULL, ",", &save))
        fields[n++] = trim(f);
    struct fake_gpu *g = &node.gpu[node.count];
    uint64_t bytes = 0;
    if (n != 3 || !fits(fields[0], sizeof g->uuid) || !fits(fields[1], sizeof g->model) ||
        fake_parse_size(fields[2], &bytes) != 0 || bytes == 0) {
        report("FAKE_NVIDIA_GPUS entry '%s' is not UUID,MODEL,MEMORY (e.g. "
               "GPU-4c1f0e3a-0000-4000-8000-000000000000,Tesla-T4,15360m); no GPU is visible",
               original);
        return -1;
    }
    for (int i = 0; i < node.count; i++) {
        if (strcmp(node.gpu[i].uuid, fields[0]) == 0) {
            report("FAKE_NVIDIA_GPUS entry '%s' repeats the UUID %s; no GPU is visible", original,
                   fields[0]);
            return -1;
        }
    }
    if (node.count == FAKE_MAX_DEVICES) {
        report("FAKE_NVIDIA_GPUS entry '%s' is one GPU too many (at most %d); no GPU is visible",
               original, FAKE_MAX_DEVICES);
        return -1;
    }
    g->physical = node.count;
    snprintf(g->uuid, sizeof g->uuid, "%s", fields[0]);
    snprintf(g->model, sizeof g->model, "%s", fields[1]);
    vs_uuid_from_text(g->uuid, g->bytes);
    node.total[node.count++] = bytes;
    return 0;
}

static void read_node_list(const char *list) {
    char *copy = strdup(list), *save = NULL;
    for (char *entry = strtok_r(copy, ";", &save); entry != NULL; entry = strtok_r(NULL, ";", &save)) {
        char original[256];
        snprintf(original, sizeof original, "%s", trim(entry));
        if (*original == '\0') continue; /* "a;b;" */
        if (parse_gpu(entry, original) != 0) {
            node.count = 0;
            break;
        }
    }
    free(copy);
}

/* Without FAKE_NVIDIA_GPUS: FAKE_CUDA_DEVICE_COUNT cards of FAKE_CUDA_TOTAL_MEM each. */
static void read_node_counts(void) {
    const char *count = getenv("FAKE_CUDA_DEVICE_COUNT");
    const char *total = getenv("FAKE_CUDA_TOTAL_MEM");
    int n = count != NULL ? atoi(count) : 1;
    uint64_t bytes = 16ull << 30;
    if (total != NULL && fake_parse_size(total, &bytes) != 0) {
        fprintf(stderr, FAKE_LOG "FAKE_CUDA_TOTAL_MEM='%s' is not a size; using 16g\n", total);
        bytes = 16ull << 30;
    }
    node.count = n < 0 ? 0 : n > FAKE_MAX_DEVICES ? FAKE_MAX_DEVICES : n;
    for (int i = 0; i < FAKE_MAX_DEVICES; i++) node.total[i] = bytes;
}

/* The GPUs of a state made without FAKE_NVIDIA_GPUS: generated names and UUIDs. */
static void name_counted_gpus(int count) {
    static const uint8_t base[16] = {0x56, 0x53, 0x4c, 0x46, 0x41, 0x4b, 0x45, 0x10,
                                     0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
    node.count = count < 0 ? 0 : count > FAKE_MAX_DEVICES ? FAKE_MAX_DEVICES : count;
    for (int i = 0; i < node.count; i++) {
        struct fake_gpu *g = &node.gpu[i];
        g->physical = i;
        memcpy(g->bytes, base, 16);
        g->bytes[15] = (uint8_t)i;
        vs_uuid_format(g->bytes, g->uuid, sizeof g->uuid);
        snprintf(g->model, sizeof g->model, "Fake NVIDIA GPU %d", i);
    }
}

/* One NVIDIA_VISIBLE_DEVICES entry: an index into the node's list or a UUID; -1 if neither. */
static int find_gpu(const char *entry) {
    char *end = NULL;
    long n = strtol(entry, &end, 10);
    if (end != entry && *end == '\0') return n >= 0 && n < node.count ? (int)n : -1;
    for (int i = 0; i < node.count; i++)
        if (strcasecmp(node.gpu[i].uuid, entry) == 0) return i;
    return -1;
}

/* Like the container toolkit: unset or "all" = every GPU, "none"/"void"/"" = none, else a list
   of indexes and UUIDs; the container sees them in physical order. */
static void read_visible_devices(void) {
    const char *env = node.from_env ? getenv("NVIDIA_VISIBLE_DEVICES") : NULL;
    int wanted[FAKE_MAX_DEVICES] = {0};
    if (env == NULL || strcmp(env, "all") == 0) {
        for (int i = 0; i < node.count; i++) wanted[i] = 1;
    } else {
        char *copy = strdup(env), *save = NULL;
        char *whole = trim(copy);
        if (strcmp(whole, "none") != 0 && strcmp(whole, "void") != 0) {
            for (char *e = strtok_r(whole, ",", &save); e != NULL; e = strtok_r(NULL, ",", &save)) {
                char *entry = trim(e);
                int i = *entry != '\0' ? find_gpu(entry) : -1;
                if (i < 0) {
                    if (node.count > 0)
                        report("NVIDIA_VISIBLE_DEVICES entry '%s' is not a GPU of this node (an "
                               "index into FAKE_NVIDIA_GPUS or one of its UUIDs); no GPU is "
                               "visible",
                               entry);
                    memset(wanted, 0, sizeof wanted);
                    break;
                }
                wanted[i] = 1;
            }
        }
        free(copy);
    }
    seen_count = 0;
    for (int i = 0; i < node.count; i++)
        if (wanted[i]) seen[seen_count++] = i;
}

static void fill(struct fake_state *s) {
    s->device_count = (uint32_t)node.count;
    s->ring_size = FAKE_RING;
    for (int i = 0; i < FAKE_MAX_DEVICES; i++) s->dev[i].total = node.total[i];
    __atomic_store_n(&s->magic, FAKE_MAGIC, __ATOMIC_RELEASE);
}

static void map_state(void) {
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
        perror(FAKE_LOG "FAKE_CUDA_STATE");
        abort();
    }
    state_path = path;
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

static void attach(void) {
    const char *list = getenv("FAKE_NVIDIA_GPUS");
    node.from_env = list != NULL;
    if (node.from_env)
        read_node_list(list);
    else
        read_node_counts();
    map_state();
    if (!node.from_env) name_counted_gpus((int)state->device_count); /* the state's creator's */
    read_visible_devices();
}

struct fake_state *fake_state(void) {
    pthread_once(&state_once, attach);
    return state;
}

int fake_gpu_count(void) {
    fake_state();
    return seen_count;
}

const struct fake_gpu *fake_gpu(int i) {
    fake_state();
    return &node.gpu[seen[i]];
}

/* Take slot i's lock byte without waiting: 1 taken (its owner, if any, is dead), 0 held by a
   live process. */
static int lock_slot(int i, short type) {
    struct flock lock = {
        .l_type = type, .l_whence = SEEK_SET, .l_start = FAKE_LOCK_BASE + i, .l_len = 1};
    return fcntl(slot_fd, F_OFD_SETLK, &lock) == 0;
}

/* Give back what the dead owner of slot i held. The caller holds the slot's lock, so no one
   else reclaims or claims it meanwhile. */
static void reclaim(struct fake_proc *p) {
    for (int g = 0; g < FAKE_MAX_DEVICES; g++) {
        uint64_t held = __atomic_exchange_n(&p->used[g], 0, __ATOMIC_ACQ_REL);
        if (held != 0) __atomic_fetch_sub(&state->dev[g].used, held, __ATOMIC_ACQ_REL);
    }
    state->proc_namespace[p - state->procs][0] = '\0';
    __atomic_store_n(&p->token, 0, __ATOMIC_RELEASE);
}

/* Reclaim every dead process's slot; keep the first free one for this process (mine < 0).
   The number of slots reclaimed. */
static int sweep(int *mine) {
    int reclaimed = 0;
    for (int i = 0; i < FAKE_MAX_PROCS; i++) {
        if (i == my_slot) continue;
        struct fake_proc *p = &state->procs[i];
        uint64_t token = __atomic_load_n(&p->token, __ATOMIC_ACQUIRE);
        if (token == 0 && (mine == NULL || *mine >= 0)) continue; /* free, and not wanted */
        if (!lock_slot(i, F_WRLCK)) continue;                      /* a live owner */
        token = __atomic_load_n(&p->token, __ATOMIC_ACQUIRE);
        if (token != 0) {
            reclaim(p);
            reclaimed++;
        }
        if (mine != NULL && *mine < 0) {
            __atomic_store_n(&p->token, (uint64_t)getpid() << 1 | 1, __ATOMIC_RELEASE);
            *mine = i; /* keep the lock: it is this process's life */
        } else {
            lock_slot(i, F_UNLCK);
        }
    }
    return reclaimed;
}

static void open_state_fd(void) {
    fake_state();
    if (state_path != NULL) slot_fd = open(state_path, O_RDWR | O_CLOEXEC);
}

static void read_own_namespace(void) {
    if (vs_cgroup_path(0, own_namespace, sizeof own_namespace) != 0) own_namespace[0] = '\0';
}

const char *fake_own_namespace(void) {
    pthread_once(&namespace_once, read_own_namespace);
    return own_namespace;
}

void fake_lock_limits(void) {
    pthread_mutex_lock(&limits_mutex);
    pthread_once(&fd_once, open_state_fd);
    struct flock lock = {
        .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = FAKE_LIMITS_LOCK, .l_len = 1};
    while (slot_fd >= 0 && fcntl(slot_fd, F_OFD_SETLKW, &lock) != 0 && errno == EINTR) {
    }
}

void fake_unlock_limits(void) {
    struct flock lock = {
        .l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = FAKE_LIMITS_LOCK, .l_len = 1};
    if (slot_fd >= 0) fcntl(slot_fd, F_OFD_SETLK, &lock);
    pthread_mutex_unlock(&limits_mutex);
}

void fake_sweep_dead(void) {
    pthread_once(&fd_once, open_state_fd);
    if (slot_fd >= 0) sweep(NULL);
}

/* The slot, and in it the namespace the process's memory is charged to (written under the
   limits lock, so that whoever counts a namespace's usage never reads half of it). */
static void claim_slot(void) {
    pthread_once(&fd_once, open_state_fd);
    if (slot_fd < 0) return; /* a private card: one process, nothing to give back */
    const char *ns = fake_own_namespace();
    fake_lock_limits();
    int mine = -1;
    sweep(&mine);
    my_slot = mine; /* -1 when every slot is live: this process's memory is not tracked */
    if (mine >= 0) snprintf(state->proc_namespace[mine], FAKE_NAMESPACE_SIZE, "%s", ns);
    fake_unlock_limits();
}

static int try_take(struct fake_device_state *d, uint64_t bytes) {
    uint64_t used = __atomic_load_n(&d->used, __ATOMIC_RELAXED);
    do {
        if (bytes > d->total || used > d->total - bytes) return -1;
    } while (!__atomic_compare_exchange_n(&d->used, &used, used + bytes, 0, __ATOMIC_ACQ_REL,
                                          __ATOMIC_RELAXED));
    return 0;
}

/* Room on the card, and under every limit on the process's namespace and above. */
static int take(int physical, const char *ns, int limited, uint64_t bytes) {
    if (limited && !fake_limits_allow(physical, ns, bytes)) return -1;
    return try_take(&state->dev[physical], bytes);
}

/* Under a limit, the limits lock is held from the check to the charge to the slot, so that the
   processes of one namespace cannot together pass it. A limit set while an unlimited process
   is past the look below applies from its next reservation. */
int fake_reserve_memory(int physical, uint64_t bytes) {
    fake_state();
    pthread_once(&slot_once, claim_slot);
    const char *ns = fake_own_namespace();
    int limited = fake_limits_apply(physical, ns);
    if (limited) fake_lock_limits();
    /* Short of memory: a process that died holding some may be the reason. */
    int r = take(physical, ns, limited, bytes);
    if (r != 0 && slot_fd >= 0 && sweep(NULL) != 0) r = take(physical, ns, limited, bytes);
    if (r == 0 && my_slot >= 0)
        __atomic_fetch_add(&state->procs[my_slot].used[physical], bytes, __ATOMIC_ACQ_REL);
    if (limited) fake_unlock_limits();
    return r;
}

void fake_release_memory(int physical, uint64_t bytes) {
    __atomic_fetch_sub(&fake_state()->dev[physical].used, bytes, __ATOMIC_ACQ_REL);
    if (my_slot >= 0)
        __atomic_fetch_sub(&state->procs[my_slot].used[physical], bytes, __ATOMIC_ACQ_REL);
}
