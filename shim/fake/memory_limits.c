/* Driver-enforced memory limits, as R615 drivers keep them for nvmlDeviceSetMemoryLimits_v1
   (fake/nvml.c): a table in the node's shared state of (GPU, namespace) -> soft and hard limit,
   where a namespace is a cgroup's directory (vslice/cgroup_path.h). A limit binds the processes
   of its namespace and of every namespace below it: together they hold at most hardLimit on
   that GPU. Usage is what the processes with a slot in the state (device.c) hold, by the
   namespace each recorded when it took its slot. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "device.h"
#include "vslice/nvml_abi.h"

/* path is ancestor or lies below it: ancestor is a prefix of path that ends at a '/'. */
int fake_namespace_within(const char *path, const char *ancestor) {
    size_t n = strlen(ancestor);
    if (n == 0 || strncmp(path, ancestor, n) != 0) return 0;
    return path[n] == '\0' || path[n] == '/' || ancestor[n - 1] == '/';
}

static int applies(const struct fake_limit *l, int physical, const char *ns) {
    return l->namespace[0] != '\0' && l->physical == (uint32_t)physical &&
           fake_namespace_within(ns, l->namespace);
}

int fake_limits_apply(int physical, const char *ns) {
    const struct fake_state *s = fake_state();
    for (int i = 0; i < FAKE_MAX_LIMITS; i++)
        if (applies(&s->limits[i], physical, ns)) return 1;
    return 0;
}

uint64_t fake_namespace_used(int physical, const char *ns) {
    const struct fake_state *s = fake_state();
    uint64_t used = 0;
    for (int i = 0; i < FAKE_MAX_PROCS; i++) {
        if (__atomic_load_n(&s->procs[i].token, __ATOMIC_ACQUIRE) == 0) continue;
        uint64_t held = __atomic_load_n(&s->procs[i].used[physical], __ATOMIC_RELAXED);
        if (held != 0 && fake_namespace_within(s->proc_namespace[i], ns)) used += held;
    }
    return used;
}

int fake_limits_allow(int physical, const char *ns, uint64_t bytes) {
    const struct fake_state *s = fake_state();
    for (int i = 0; i < FAKE_MAX_LIMITS; i++) {
        const struct fake_limit *l = &s->limits[i];
        if (!applies(l, physical, ns)) continue;
        uint64_t used = fake_namespace_used(physical, l->namespace);
        if (used > l->hard || bytes > l->hard - used) return 0;
    }
    return 1;
}

static struct fake_limit *find(int physical, const char *ns) {
    struct fake_state *s = fake_state();
    for (int i = 0; i < FAKE_MAX_LIMITS; i++) {
        struct fake_limit *l = &s->limits[i];
        if (l->namespace[0] != '\0' && l->physical == (uint32_t)physical &&
            strcmp(l->namespace, ns) == 0)
            return l;
    }
    return NULL;
}

/* Entries of cgroups that were deleted since: the kernel forgets their limits with them. */
static void drop_deleted(void) {
    struct fake_state *s = fake_state();
    struct stat st;
    for (int i = 0; i < FAKE_MAX_LIMITS; i++) {
        char *ns = s->limits[i].namespace;
        if (ns[0] != '\0' && (stat(ns, &st) != 0 || !S_ISDIR(st.st_mode))) ns[0] = '\0';
    }
}

/* A free entry, after dropping those of deleted cgroups; NULL when the table is full. */
static struct fake_limit *free_entry(void) {
    struct fake_state *s = fake_state();
    drop_deleted();
    for (int i = 0; i < FAKE_MAX_LIMITS; i++)
        if (s->limits[i].namespace[0] == '\0') return &s->limits[i];
    return NULL;
}

/* Soft 0 with hard "max" removes the entry; otherwise it is replaced or added. */
int fake_set_limit(int physical, const char *ns, uint64_t soft, uint64_t hard) {
    struct fake_limit *l = find(physical, ns);
    if (soft == 0 && hard == VSLICE_NVML_MEMORY_LIMIT_MAX) {
        if (l != NULL) l->namespace[0] = '\0';
        return 0;
    }
    if (l == NULL && (l = free_entry()) == NULL) return -1;
    l->physical = (uint32_t)physical;
    l->soft = soft;
    l->hard = hard;
    snprintf(l->namespace, sizeof l->namespace, "%s", ns);
    return 0;
}

void fake_get_limit(int physical, const char *ns, uint64_t *soft, uint64_t *hard) {
    const struct fake_limit *l = find(physical, ns);
    *soft = l != NULL ? l->soft : 0;
    *hard = l != NULL ? l->hard : VSLICE_NVML_MEMORY_LIMIT_MAX;
}

/* total: the card's, or the smallest limit that applies; free: the card's, or less when a
   limit has less room left. */
void fake_memory_view(int physical, const char *ns, uint64_t *total, uint64_t *free) {
    struct fake_device_state *d = &fake_state()->dev[physical];
    uint64_t used = __atomic_load_n(&d->used, __ATOMIC_RELAXED);
    *total = d->total;
    *free = used >= d->total ? 0 : d->total - used;
    if (!fake_limits_apply(physical, ns)) return;
    fake_lock_limits();
    const struct fake_state *s = fake_state();
    for (int i = 0; i < FAKE_MAX_LIMITS; i++) {
        const struct fake_limit *l = &s->limits[i];
        if (!applies(l, physical, ns)) continue;
        uint64_t held = fake_namespace_used(physical, l->namespace);
        uint64_t room = held >= l->hard ? 0 : l->hard - held;
        if (l->hard < *total) *total = l->hard;
        if (room < *free) *free = room;
    }
    fake_unlock_limits();
}
