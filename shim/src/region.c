/*
 * The container's shared region: attach (create or validate), the robust lock, the process's
 * slot, reclaiming slots of dead processes, and the memory accounts kept under the lock.
 * docs/shim-region.md is the ABI; docs/shim.md explains the safe behaviour on bad files.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shim.h"

_Static_assert(sizeof(pthread_mutex_t) <= VS_LOCK_BYTES, "the mutex fits the region's lock area");

static vs_region *region;      /* NULL until attached */
static vs_region_slot *slot;   /* this process's slot, NULL until taken */
static int attached;           /* 1 = accounting works (shared or private) */
static int shared;             /* 1 = the container's region file, 0 = private to the process */
static pthread_once_t attach_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t local_lock = PTHREAD_MUTEX_INITIALIZER; /* device map, slot taking */
static int device_map[64];     /* CUDA ordinal -> region device index + 1 (0 = unknown) */
/* Region device -> container index + 1 (0 = not registered by this process). Kept here, not in
   the region: the region is writable by the container, so limits are never read back from it. */
static int local_index[VS_MAX_DEVICES];

uint64_t vs_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t wall_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static pthread_mutex_t *lock_of(vs_region *r) { return (pthread_mutex_t *)(void *)r->header.lock; }

static void init_lock(vs_region *r) {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(lock_of(r), &attr);
    pthread_mutexattr_destroy(&attr);
    r->header.lock_ready = 1;
}

static void fill_header(vs_region *r) {
    vs_region_header *h = &r->header;
    h->version_major = VS_REGION_VERSION_MAJOR;
    h->version_minor = VS_REGION_VERSION_MINOR;
    h->header_size = sizeof(vs_region_header);
    h->device_size = sizeof(vs_region_device);
    h->slot_size = sizeof(vs_region_slot);
    h->max_devices = VS_MAX_DEVICES;
    h->max_slots = VS_MAX_SLOTS;
    h->created_ns = wall_ns();
    init_lock(r);
    __atomic_store_n(&h->magic, VS_REGION_MAGIC, __ATOMIC_RELEASE);
}

/* Private accounting: limits still hold for this process, nothing is shared. */
static void attach_private(void) {
    void *memory = mmap(NULL, sizeof(vs_region), PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) {
        VS_LOG(VS_ERROR, "cannot allocate private accounting memory; running unlimited");
        return;
    }
    region = memory;
    fill_header(region);
    attached = 1;
}

/* Why an existing file cannot be used, or NULL if it can. */
static const char *refusal(const vs_region *r, off_t size, char *why, size_t length) {
    const vs_region_header *h = &r->header;
    if (h->magic != VS_REGION_MAGIC) return "it is not a vslice region (bad magic)";
    if (h->version_major != VS_REGION_VERSION_MAJOR) {
        snprintf(why, length, "it has region version %u.%u, this shim uses %u.x",
                 h->version_major, h->version_minor, VS_REGION_VERSION_MAJOR);
        return why;
    }
    if (h->header_size != sizeof(vs_region_header) || h->device_size != sizeof(vs_region_device) ||
        h->slot_size != sizeof(vs_region_slot) || size < (off_t)sizeof(vs_region))
        return "its layout sizes do not match this shim";
    return NULL;
}

static vs_region *map_file(int fd) {
    void *memory = mmap(NULL, sizeof(vs_region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return memory == MAP_FAILED ? NULL : memory;
}

/* Create or validate under flock, which the kernel drops if we die half-way. */
static int attach_file(const char *path) {
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
        VS_LOG(VS_WARN, "cannot open region %s (%s); accounting is private to this process",
               path, strerror(errno));
        return -1;
    }
    flock(fd, LOCK_EX);
    struct stat st;
    int ok = -1;
    const char *why = "it cannot be read";
    char text[128];
    if (fstat(fd, &st) == 0 && st.st_size == 0) {
        fchmod(fd, 0666); /* every user of the container may attach, whatever the umask */
        if (ftruncate(fd, sizeof(vs_region)) == 0 && (region = map_file(fd)) != NULL) {
            fill_header(region);
            ok = 0;
        }
        why = "it cannot be created";
    } else if (st.st_size >= (off_t)sizeof(vs_region_header)) {
        vs_region *candidate = map_file(fd);
        why = candidate == NULL ? "it cannot be mapped" : refusal(candidate, st.st_size, text,
                                                                  sizeof text);
        if (candidate != NULL && why == NULL) {
            if (!candidate->header.lock_ready) init_lock(candidate);
            region = candidate;
            ok = 0;
        } else if (candidate != NULL) {
            munmap(candidate, sizeof(vs_region));
        }
    } else {
        why = "it is too short to be a vslice region";
    }
    flock(fd, LOCK_UN);
    close(fd);
    if (ok != 0)
        VS_LOG(VS_WARN, "region %s is not used: %s; accounting is private to this process",
               path, why);
    return ok;
}

/* /proc/<pid>/stat field 22: tells a reused pid from the process that took the slot. */
static uint64_t start_time_of(int pid) {
    char path[64], buffer[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buffer, sizeof buffer - 1);
    close(fd);
    if (n <= 0) return 0;
    buffer[n] = '\0';
    char *p = strrchr(buffer, ')'); /* the command name may contain spaces */
    if (p == NULL) return 0;
    unsigned long long value = 0;
    /* after ") " come fields 3..: state ppid pgrp sid tty tpgid flags minflt cminflt majflt
       cmajflt utime stime cutime cstime priority nice threads itrealvalue starttime */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d "
                      "%*d %llu", &value) != 1)
        return 0;
    return value;
}

/* Thorough checks also read /proc to tell a reused pid apart; quick ones only ask kill(). */
static int slot_alive(const vs_region_slot *s, int thorough) {
    if (kill(s->pid, 0) != 0 && errno == ESRCH) return 0;
    if (!thorough) return 1;
    uint64_t now = start_time_of(s->pid);
    return now == 0 || s->start_time == 0 || now == s->start_time;
}

/* Under the lock: free the slots of dead processes and rebuild every device total from the
   live slots, which also repairs an update that a dying holder left half-done. */
static void reclaim(int thorough) {
    vs_region_header *h = &region->header;
    uint64_t totals[VS_MAX_DEVICES] = {0};
    for (uint32_t i = 0; i < h->slot_hwm && i < VS_MAX_SLOTS; i++) {
        vs_region_slot *s = &region->slots[i];
        if (s->pid == 0) continue;
        /* our own pid in another slot: left by this process before it called exec() */
        int stale = s != slot && s->pid == getpid();
        if (s != slot && (stale || !slot_alive(s, thorough))) {
            VS_LOG(VS_INFO, "reclaimed the slot of exited process %d", s->pid);
            memset(s, 0, sizeof *s);
            continue;
        }
        for (int d = 0; d < VS_MAX_DEVICES; d++) totals[d] += s->used[d];
    }
    for (int d = 0; d < VS_MAX_DEVICES; d++) region->devices[d].mem_used = totals[d];
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

/* The owner word of glibc's mutex (0 = free), read only as a hint while spinning. */
static int looks_held(vs_region *r) {
    return __atomic_load_n(&lock_of(r)->__data.__lock, __ATOMIC_RELAXED) != 0;
}

/* Critical sections are a few loads and stores: spin briefly before sleeping in the kernel,
   which is what makes threads allocating at once cheap. The spin only reads the lock word and
   tries to take it when it looks free: a trylock is a write, and waiters writing the line over
   and over would take it away from the holder on every attempt. */
int vs_region_lock(void) {
    int rc = pthread_mutex_trylock(lock_of(region));
    for (int i = 0; i < 200 && rc == EBUSY; i++) {
        cpu_relax();
        if (!looks_held(region)) rc = pthread_mutex_trylock(lock_of(region));
    }
    if (rc == EBUSY) rc = pthread_mutex_lock(lock_of(region));
    if (rc == EOWNERDEAD) {
        VS_LOG(VS_INFO, "a process died holding the region lock; repairing the accounts");
        region->header.recoveries++;
        reclaim(1);
        pthread_mutex_consistent(lock_of(region));
        rc = 0;
    }
    if (rc != 0) VS_LOG(VS_ERROR, "region lock failed (%s)", strerror(rc));
    return rc == 0 ? 0 : -1;
}

void vs_region_unlock(void) { pthread_mutex_unlock(lock_of(region)); }

static void take_slot(void) {
    if (vs_region_lock() != 0) return;
    reclaim(0); /* cheap: many processes may start at once */
    vs_region_header *h = &region->header;
    for (uint32_t i = 0; i < VS_MAX_SLOTS; i++) {
        vs_region_slot *s = &region->slots[i];
        if (s->pid != 0) continue;
        memset(s, 0, sizeof *s);
        s->pid = getpid();
        s->start_time = start_time_of(s->pid);
        s->last_seen_ns = wall_ns();
        if (i >= h->slot_hwm) h->slot_hwm = i + 1;
        slot = s;
        break;
    }
    vs_region_unlock();
    if (slot == NULL) VS_LOG(VS_ERROR, "all %d region slots are taken; this process is not "
                                       "accounted", VS_MAX_SLOTS);
}

/* A process that exits normally gives its slot back at once; a killed one is reclaimed later. */
__attribute__((destructor)) static void give_back_slot(void) {
    if (slot == NULL || slot->pid != getpid() || vs_region_lock() != 0) return;
    for (int d = 0; d < VS_MAX_DEVICES; d++) {
        vs_region_device *device = &region->devices[d];
        device->mem_used = device->mem_used < slot->used[d] ? 0 : device->mem_used - slot->used[d];
    }
    memset(slot, 0, sizeof *slot);
    slot = NULL;
    vs_region_unlock();
}

/* After fork the child is a new process: it takes its own slot when it first allocates. */
static void after_fork_in_child(void) {
    pthread_mutex_init(&local_lock, NULL); /* another parent thread may have held it */
    slot = NULL;
    memset(device_map, 0, sizeof device_map);
    vs_table_forget_all();
}

static void attach(void) {
    const struct vs_config *config = vs_config();
    if (!config->tracking) return;
    if (config->region_path != NULL && attach_file(config->region_path) == 0)
        attached = shared = 1;
    else
        attach_private();
    pthread_atfork(NULL, NULL, after_fork_in_child);
}

/* Every allocation asks: after the first time the answer is one load (published once the
   pthread_once has finished, so no thread reads a half-attached region). */
static int attach_done;

int vs_region_attached(void) {
    if (__builtin_expect(!__atomic_load_n(&attach_done, __ATOMIC_ACQUIRE), 0)) {
        pthread_once(&attach_once, attach);
        __atomic_store_n(&attach_done, 1, __ATOMIC_RELEASE);
    }
    return attached;
}

int vs_region_ready(void) {
    if (!vs_region_attached()) return 0;
    if (slot == NULL) {
        pthread_mutex_lock(&local_lock);
        if (slot == NULL) take_slot();
        pthread_mutex_unlock(&local_lock);
    }
    return slot != NULL;
}

vs_region *vs_region_map(void) { return region; }

int vs_region_shared(void) { return vs_region_attached() && shared; }

int vs_device_processes(int dev, struct vs_process *out, int max) {
    if (vs_region_lock() != 0) return -1;
    reclaim(0); /* a killed process must not be listed */
    int count = 0;
    for (uint32_t i = 0; i < region->header.slot_hwm && i < VS_MAX_SLOTS; i++) {
        const vs_region_slot *s = &region->slots[i];
        if (s->pid == 0 || s->used[dev] == 0) continue; /* like the driver: holders only */
        if (count < max) out[count] = (struct vs_process){s->pid, s->used[dev]};
        count++;
    }
    vs_region_unlock();
    return count;
}

int vs_device_by_uuid(const uint8_t uuid[16]) {
    uint32_t count = __atomic_load_n(&region->header.device_count, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < count && i < VS_MAX_DEVICES; i++)
        if (memcmp(region->devices[i].uuid, uuid, 16) == 0) return (int)i;
    return -1;
}

/* Find the device by UUID, or add it with this process's limits for its ordinal. */
static int register_device(CUdevice ordinal, const uint8_t uuid[16]) {
    const struct vs_config *config = vs_config();
    int index = ordinal < VS_MAX_DEVICES ? ordinal : VS_MAX_DEVICES - 1;
    if (vs_region_lock() != 0) return -1;
    int found = vs_device_by_uuid(uuid);
    if (found < 0 && region->header.device_count < VS_MAX_DEVICES) {
        found = (int)region->header.device_count;
        vs_region_device *d = &region->devices[found];
        memcpy(d->uuid, uuid, 16);
        d->index = (uint32_t)ordinal;
        d->refill_ns = vs_now_ns();
        __atomic_store_n(&region->header.device_count, found + 1, __ATOMIC_RELEASE);
    }
    if (found >= 0) {
        /* The region's limit fields are a copy for readers (the monitor), rewritten by every
           process that registers the device; enforcement uses local_index. */
        vs_region_device *d = &region->devices[found];
        d->mem_limit = config->mem_limited[index] ? config->mem_limit[index] : 0;
        d->sm_limit = config->sm_limit[index];
        local_index[found] = index + 1;
    }
    vs_region_unlock();
    if (found < 0) VS_LOG(VS_ERROR, "the region holds %d devices already; device %d is not "
                                    "accounted", VS_MAX_DEVICES, ordinal);
    return found;
}

int vs_device_index(CUdevice ordinal) {
    if (ordinal < 0 || ordinal >= 64) return -1;
    /* Every allocation comes here: a device already registered, while this process holds its
       slot, needs no other check (both are cleared in a forked child, the slot at exit). */
    int known = __atomic_load_n(&device_map[ordinal], __ATOMIC_ACQUIRE);
    if (__builtin_expect(known != 0 && slot != NULL, 1)) return known - 1;
    if (!vs_region_ready()) return -1;
    known = __atomic_load_n(&device_map[ordinal], __ATOMIC_ACQUIRE);
    if (known != 0) return known - 1;
    CUuuid uuid;
    if (vs_real.cuDeviceGetUuid == NULL || vs_real.cuDeviceGetUuid(&uuid, ordinal) != CUDA_SUCCESS)
        return -1;
    pthread_mutex_lock(&local_lock);
    int index = register_device(ordinal, (const uint8_t *)uuid.bytes);
    if (index >= 0) __atomic_store_n(&device_map[ordinal], index + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&local_lock);
    return index;
}

int vs_current_device(void) {
    CUdevice device;
    if (vs_real.cuCtxGetDevice == NULL || vs_real.cuCtxGetDevice(&device) != CUDA_SUCCESS)
        return -1;
    return vs_device_index(device);
}

int vs_local_index(int dev) {
    return dev >= 0 && dev < VS_MAX_DEVICES ? local_index[dev] - 1 : -1;
}

/* This process's memory limit for region device dev: 1 = *limit holds, 0 = none. A device
   this process never registered (an NVML reader) has no index here: the caller decides. */
static int limit_of(int dev, uint64_t *limit) {
    int index = vs_local_index(dev);
    const struct vs_config *config = vs_config();
    if (index < 0 || !config->mem_limited[index]) return 0;
    *limit = config->mem_limit[index];
    return 1;
}

uint32_t vs_sm_limit(int dev) {
    int index = vs_local_index(dev);
    return index < 0 ? 0 : vs_config()->sm_limit[index];
}

/* limited = 0: no memory limit for the device (everything fits). */
static int fits(int dev, uint64_t bytes, int limited, uint64_t limit) {
    uint64_t used = region->devices[dev].mem_used;
    return !limited || (used <= limit && bytes <= limit - used);
}

/* The slot's last_seen_ns ("last allocation or free") is read from the clock before the lock is
   taken, so the critical section stays a few loads and stores. */
int vs_reserve(int dev, uint64_t bytes, int context) {
    uint64_t now = wall_ns(), limit = 0;
    int limited = limit_of(dev, &limit); /* this process's own limit: no need to hold the lock */
    if (vs_region_lock() != 0) return 0; /* a broken lock never fails the user's program */
    vs_region_device *d = &region->devices[dev];
    int ok = context || fits(dev, bytes, limited, limit);
    if (!ok) {
        reclaim(1); /* memory of a killed process comes back */
        ok = fits(dev, bytes, limited, limit);
    }
    if (ok) {
        d->mem_used += bytes;
        slot->used[dev] += bytes;
        if (context) slot->ctx[dev] += bytes;
    }
    slot->last_seen_ns = now;
    vs_region_unlock();
    return ok ? 0 : -1;
}

void vs_release(int dev, uint64_t bytes) {
    if (slot == NULL) return;
    uint64_t now = wall_ns();
    if (vs_region_lock() != 0) return;
    vs_region_device *d = &region->devices[dev];
    uint64_t mine = slot->used[dev] < bytes ? slot->used[dev] : bytes;
    slot->used[dev] -= mine;
    d->mem_used = d->mem_used < mine ? 0 : d->mem_used - mine;
    slot->last_seen_ns = now;
    vs_region_unlock();
}

/* The driver chose a different size than reserved (pitch): settle the difference. */
void vs_adjust(int dev, uint64_t reserved, uint64_t actual) {
    if (actual > reserved) {
        if (vs_region_lock() != 0) return;
        region->devices[dev].mem_used += actual - reserved;
        slot->used[dev] += actual - reserved;
        vs_region_unlock();
    } else if (actual < reserved) {
        vs_release(dev, reserved - actual);
    }
}

int vs_device_usage(int dev, uint64_t *limit, uint64_t *used) {
    static uint64_t last_reclaim;
    uint64_t now = vs_now_ns();
    *used = 0;
    int limited = limit_of(dev, limit);
    if (vs_region_lock() != 0) return limited;
    if (now - last_reclaim > 100000000ull) { /* at most every 100 ms: it reads /proc */
        last_reclaim = now;
        reclaim(0);
    }
    *used = region->devices[dev].mem_used;
    vs_region_unlock();
    return limited;
}
