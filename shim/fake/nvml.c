/* A fake NVML (libnvidia-ml.so.1) over the same shared state as the fake driver. Like the real
   NVML it ignores CUDA_VISIBLE_DEVICES and lists every device the container has (after
   NVIDIA_VISIBLE_DEVICES): index = position in the container, minor number = physical index. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "device.h"
#include "nvml_board.h"
#include "vslice/nvml_abi.h"

struct nvmlDevice_st {
    unsigned int index;    /* in the container */
    unsigned int physical; /* in the node, and in the shared state */
};
static struct nvmlDevice_st handles[FAKE_MAX_DEVICES];
static int initialized;

nvmlReturn_t nvmlInit_v2(void) {
    for (int i = 0; i < fake_gpu_count(); i++)
        handles[i] = (struct nvmlDevice_st){(unsigned)i, (unsigned)fake_gpu(i)->physical};
    initialized = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return nvmlInit_v2();
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (version == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (length < 8) return NVML_ERROR_INSUFFICIENT_SIZE;
    snprintf(version, length, "570.00");
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    initialized = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (deviceCount == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = (unsigned)fake_gpu_count();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount) {
    return nvmlDeviceGetCount_v2(deviceCount);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (device == NULL || index >= (unsigned)fake_gpu_count()) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &handles[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (uuid == NULL || device == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < fake_gpu_count(); i++) {
        if (strcmp(fake_gpu(i)->uuid, uuid) == 0) {
            *device = &handles[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

#define NEED_DEVICE(d)                                                                             \
    if (!initialized) return NVML_ERROR_UNINITIALIZED;                                            \
    if ((d) == NULL || (d) < handles || (d) >= handles + fake_gpu_count())                        \
    return NVML_ERROR_INVALID_ARGUMENT

nvmlReturn_t fake_nvml_physical(nvmlDevice_t device, unsigned int *physical) {
    NEED_DEVICE(device);
    *physical = device->physical;
    return NVML_SUCCESS;
}

/* Writes text into buf, or says how short buf is. */
static nvmlReturn_t copy_out(const char *text, char *buf, unsigned int length) {
    if (buf == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (length < strlen(text) + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, text, strlen(text) + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    NEED_DEVICE(device);
    return copy_out(fake_gpu((int)device->index)->uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    NEED_DEVICE(device);
    if (index == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *index = device->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    NEED_DEVICE(device);
    return copy_out(fake_gpu((int)device->index)->model, name, length);
}

static void memory_of(nvmlDevice_t device, unsigned long long *total, unsigned long long *used) {
    struct fake_device_state *d = &fake_state()->dev[device->physical];
    *total = d->total;
    *used = __atomic_load_n(&d->used, __ATOMIC_RELAXED);
    if (*used > *total) *used = *total;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    NEED_DEVICE(device);
    if (memory == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    memory_of(device, &memory->total, &memory->used);
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

/* Under a driver-enforced memory limit the caller sees it here (NVIDIA documents _v2 and
   cuMemGetInfo for it; the v1 form above stays the card's): total = the limit, free = what
   is left of it (or of the card, if less), used = the rest. */
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    NEED_DEVICE(device);
    if (memory == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    uint64_t total, free;
    fake_memory_view((int)device->physical, fake_own_namespace(), &total, &free);
    memory->total = total;
    memory->free = free;
    memory->used = total - free;
    memory->reserved = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber) {
    NEED_DEVICE(device);
    if (minorNumber == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *minorNumber = device->physical; /* /dev/nvidia<minor> on the node */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node) {
    NEED_DEVICE(device);
    if (node == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *node = 0;
    return NVML_SUCCESS;
}

#ifndef FAKE_NVML_WITHOUT_MEMORY_LIMITS
/* Driver-enforced memory limits (R615), kept in the node's state by memory_limits.c. A
   namespace must be the absolute path of an existing directory (NVML_ERROR_NOT_FOUND) and fit
   the table (NVML_ERROR_INVALID_ARGUMENT); trailing slashes are dropped. */
static nvmlReturn_t namespace_of(const char *given, char *ns) {
    struct stat st;
    if (given[0] != '/' || stat(given, &st) != 0 || !S_ISDIR(st.st_mode))
        return NVML_ERROR_NOT_FOUND;
    size_t n = strlen(given);
    while (n > 1 && given[n - 1] == '/') n--;
    if (n >= FAKE_NAMESPACE_SIZE) return NVML_ERROR_INVALID_ARGUMENT;
    memcpy(ns, given, n);
    ns[n] = '\0';
    return NVML_SUCCESS;
}

/* Root only, as on the real driver; soft 0 with hard "max" removes the namespace's limit. */
nvmlReturn_t nvmlDeviceSetMemoryLimits_v1(nvmlDevice_t device, nvmlSetMemoryLimits_v1_t *limits) {
    if (limits == NULL || limits->nameSpace == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    NEED_DEVICE(device);
    if (geteuid() != 0) return NVML_ERROR_NO_PERMISSION;
    char ns[FAKE_NAMESPACE_SIZE];
    nvmlReturn_t r = namespace_of(limits->nameSpace, ns);
    if (r != NVML_SUCCESS) return r;
    if (limits->softLimit > limits->hardLimit) return NVML_ERROR_INVALID_ARGUMENT;
    fake_lock_limits();
    int full = fake_set_limit((int)device->physical, ns, limits->softLimit, limits->hardLimit);
    fake_unlock_limits();
    return full ? NVML_ERROR_INSUFFICIENT_RESOURCES : NVML_SUCCESS;
}

/* Open to everyone. nameSpace NULL: the caller's own cgroup. A namespace without a limit
   answers soft 0 and hard "max"; currentUsed counts its processes and those below it. */
nvmlReturn_t nvmlDeviceGetMemoryLimits_v1(nvmlDevice_t device, nvmlGetMemoryLimits_v1_t *limits) {
    if (limits == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    NEED_DEVICE(device);
    char ns[FAKE_NAMESPACE_SIZE];
    const char *given = limits->nameSpace != NULL ? limits->nameSpace : fake_own_namespace();
    nvmlReturn_t r = namespace_of(given, ns);
    if (r != NVML_SUCCESS) return r;
    uint64_t soft, hard;
    fake_lock_limits();
    fake_sweep_dead();
    fake_get_limit((int)device->physical, ns, &soft, &hard);
    limits->currentUsed = fake_namespace_used((int)device->physical, ns);
    fake_unlock_limits();
    limits->softLimit = soft;
    limits->hardLimit = hard;
    return NVML_SUCCESS;
}
#endif

/* Percent of [from, now) during which a kernel was running on the device. */
unsigned fake_nvml_busy_percent(unsigned int physical, uint64_t from, uint64_t now) {
    struct fake_device_state *d = &fake_state()->dev[physical];
    uint64_t busy = 0;
    uint64_t head = __atomic_load_n(&d->head, __ATOMIC_ACQUIRE);
    for (uint64_t i = head > FAKE_RING ? head - FAKE_RING : 0; i < head; i++) {
        const struct fake_interval *k = &d->ring[i % FAKE_RING];
        uint64_t start = k->start_ns > from ? k->start_ns : from, end = k->end_ns < now ? k->end_ns : now;
        if (end > start) busy += end - start;
    }
    return now > from ? (unsigned)(busy * 100 / (now - from)) : 0;
}

/* Like the real sampler: the share of the last second during which a kernel was running. */
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    NEED_DEVICE(device);
    if (utilization == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t now = fake_now_ns(), from = now > 1000000000ull ? now - 1000000000ull : 0;
    utilization->gpu = fake_nvml_busy_percent(device->physical, from, now);
    utilization->memory = 0;
    return NVML_SUCCESS;
}

/* Like the driver seen from inside a container: the processes holding memory are listed with
   host PIDs, which do not exist in the caller's PID namespace. The fake keeps no per-process
   account, so it reports one such process holding everything in use. */
#define FAKE_HOST_PID 4000000u

static nvmlReturn_t host_processes(nvmlDevice_t device, unsigned int *count,
                                   unsigned long long *used, int *listed) {
    NEED_DEVICE(device);
    if (count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long total;
    memory_of(device, &total, used);
    *listed = *used > 0;
    if (*count < (unsigned)*listed) {
        *count = (unsigned)*listed;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = (unsigned)*listed;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_v2_t *infos) {
    unsigned long long used;
    int listed;
    nvmlReturn_t r = host_processes(device, infoCount, &used, &listed);
    if (r == NVML_SUCCESS && listed) {
        if (infos == NULL) return NVML_ERROR_INVALID_ARGUMENT;
        infos[0] = (nvmlProcessInfo_v2_t){FAKE_HOST_PID + device->physical, used, 0xFFFFFFFFu,
                                          0xFFFFFFFFu};
    }
    return r;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                  nvmlProcessInfo_v1_t *infos) {
    nvmlProcessInfo_v2_t full[1]; /* the fake lists one process at most */
    nvmlReturn_t r = nvmlDeviceGetComputeRunningProcesses_v2(device, infoCount,
                                                             infos != NULL ? full : NULL);
    if (r == NVML_SUCCESS && *infoCount == 1)
        infos[0] = (nvmlProcessInfo_v1_t){full[0].pid, full[0].usedGpuMemory};
    return r;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos) {
    return nvmlDeviceGetComputeRunningProcesses_v2(device, infoCount, infos);
}

/* The detail list of drivers from R550: compute (and all) mode lists the one host process,
   with no protected memory; the fake runs no graphics and no MPS. */
nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device,
                                                   nvmlProcessDetailList_t *plist) {
    NEED_DEVICE(device);
    if (plist == NULL || plist->version != nvmlProcessDetailList_v1 ||
        plist->mode > NVML_PROCESS_MODE_ALL)
        return NVML_ERROR_INVALID_ARGUMENT;
    int compute =
        plist->mode == NVML_PROCESS_MODE_COMPUTE || plist->mode == NVML_PROCESS_MODE_ALL;
    unsigned long long used = 0;
    int listed = 0;
    unsigned int count = plist->numProcArrayEntries;
    nvmlReturn_t r = compute ? host_processes(device, &count, &used, &listed) : NVML_SUCCESS;
    if (r == NVML_SUCCESS && listed && plist->procArray == NULL) {
        count = 1;
        r = NVML_ERROR_INSUFFICIENT_SIZE;
    }
    plist->numProcArrayEntries = compute ? count : 0;
    if (r == NVML_SUCCESS && listed)
        plist->procArray[0] = (nvmlProcessDetail_v1_t){FAKE_HOST_PID + device->physical, used,
                                                       0xFFFFFFFFu, 0xFFFFFFFFu, 0};
    return r;
}

static uint64_t wall_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000ull + (uint64_t)ts.tv_nsec / 1000;
}

/* Per-process utilisation, as seen from a container: the same single host process, with one
   sample when a kernel ran since lastSeenTimeStamp (CPU time in microseconds; the fake keeps a
   second of samples). Sizing (utilization NULL) and too small a buffer get
   NVML_ERROR_INSUFFICIENT_SIZE and the count; no sample is NVML_ERROR_NOT_FOUND. */
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                             nvmlProcessUtilizationSample_t *utilization,
                                             unsigned int *processSamplesCount,
                                             unsigned long long lastSeenTimeStamp) {
    NEED_DEVICE(device);
    if (processSamplesCount == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t now_us = wall_us(), now = fake_now_ns();
    uint64_t span = lastSeenTimeStamp >= now_us ? 0 : (now_us - lastSeenTimeStamp) * 1000ull;
    if (span > 1000000000ull) span = 1000000000ull;
    unsigned sm =
        span > 0 && span <= now ? fake_nvml_busy_percent(device->physical, now - span, now) : 0;
    unsigned samples = sm > 0;
    if (samples == 0) return NVML_ERROR_NOT_FOUND;
    if (utilization == NULL || *processSamplesCount < samples) {
        *processSamplesCount = samples;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    utilization[0] = (nvmlProcessUtilizationSample_t){FAKE_HOST_PID + device->physical, now_us, sm,
                                                      0, 0, 0};
    *processSamplesCount = samples;
    return NVML_SUCCESS;
}

/* Events. A fake GPU fails when told to: with FAKE_NVML_XID_FILE set, each line
   "<UUID> <xid>" appended to that file after an event set was created is one Xid event of
   that GPU, delivered by nvmlEventSetWait to the sets that registered
   nvmlEventTypeXidCriticalError for it (other sets skip it). Without the file, or with nothing
   new in it, a wait times out, as on a healthy card. */
#define XID_CRITICAL_ERROR 0x8ull /* nvmlEventTypeXidCriticalError */

struct nvmlEventSet_st {
    unsigned long long types[FAKE_MAX_DEVICES]; /* by index in the container */
    long offset;                                /* bytes of the XID file already read */
};

static long xid_file_size(void) {
    const char *path = getenv("FAKE_NVML_XID_FILE");
    FILE *f = path != NULL && path[0] != '\0' ? fopen(path, "r") : NULL;
    if (f == NULL) return 0;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    return size < 0 ? 0 : size;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (set == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *set = calloc(1, sizeof **set);
    if (*set == NULL) return NVML_ERROR_UNKNOWN;
    (*set)->offset = xid_file_size();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                      nvmlEventSet_t set) {
    NEED_DEVICE(device);
    if (set == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    set->types[device->index] |= eventTypes;
    return NVML_SUCCESS;
}

/* The next whole line of the XID file for a GPU of this set that registered Xid events: 1 and
   *data filled, else 0. Lines for other GPUs, or that do not parse, are passed over. */
static int next_xid(nvmlEventSet_t set, nvmlEventData_t *data) {
    const char *path = getenv("FAKE_NVML_XID_FILE");
    FILE *f = path != NULL && path[0] != '\0' ? fopen(path, "r") : NULL;
    if (f == NULL) return 0;
    int found = 0;
    char line[256];
    if (fseek(f, set->offset, SEEK_SET) != 0) {
        fclose(f);
        return 0;
    }
    while (!found && fgets(line, sizeof line, f) != NULL) {
        size_t length = strlen(line);
        if (length == 0 || line[length - 1] != '\n') break; /* a line still being written */
        set->offset += (long)length;
        char uuid[96];
        unsigned long long xid;
        if (sscanf(line, "%95s %llu", uuid, &xid) != 2) continue;
        for (int i = 0; i < fake_gpu_count(); i++) {
            if (strcmp(fake_gpu(i)->uuid, uuid) != 0) continue;
            if ((set->types[i] & XID_CRITICAL_ERROR) == 0) break;
            *data = (nvmlEventData_t){&handles[i], XID_CRITICAL_ERROR, xid, 0xFFFFFFFFu,
                                      0xFFFFFFFFu};
            found = 1;
            break;
        }
    }
    fclose(f);
    return found;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (set == NULL || data == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t deadline = fake_now_ns() + (uint64_t)timeoutms * 1000000ull;
    for (;;) {
        if (next_xid(set, data)) return NVML_SUCCESS;
        uint64_t now = fake_now_ns();
        if (now >= deadline) return NVML_ERROR_TIMEOUT;
        uint64_t nap = deadline - now < 20000000ull ? deadline - now : 20000000ull; /* 20 ms */
        struct timespec ts = {(time_t)(nap / 1000000000ull), (long)(nap % 1000000000ull)};
        nanosleep(&ts, NULL);
    }
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    free(set);
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient Resources";
    default: return "Unknown Error";
    }
}
