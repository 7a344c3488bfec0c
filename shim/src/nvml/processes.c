/*
 * nvidia-smi inside a container lists the container's processes. The driver answers with host
 * PIDs, which mean nothing in the container's PID namespace, so nvidia-smi shows no process
 * (or strangers). For a device of this container the answer comes from the shared region
 * instead: every live process holding memory on the device, with its container PID and the
 * bytes it holds (context overhead included), which is what nvidia-smi's "GPU Memory Usage"
 * column means. Devices the container does not use, or a process without the container's
 * region file, get the driver's answer unchanged.
 *
 * The three entry points differ only in the record written: v1 {pid, usedGpuMemory}; v2 and v3
 * add gpuInstanceId and computeInstanceId, 0xFFFFFFFF as the driver reports without MIG.
 * nvmlDeviceGetRunningProcessDetailList (drivers from R550, what newer tools ask first) gets the
 * same answer for its compute and all modes, with no protected memory; its graphics and MPS
 * modes list nothing, since every process the region knows is a CUDA process of its own.
 */
#include <stddef.h>
#include <string.h>

#include "../shim.h"

#define NOT_MIG 0xFFFFFFFFu

enum record { V1, V2, DETAIL };

static void put(void *infos, enum record kind, unsigned int i, const struct vs_process *p) {
    if (kind == V1) {
        nvmlProcessInfo_v1_t *out = (nvmlProcessInfo_v1_t *)infos + i;
        out->pid = (unsigned int)p->pid;
        out->usedGpuMemory = p->used;
    } else if (kind == DETAIL) {
        nvmlProcessDetail_v1_t *out = (nvmlProcessDetail_v1_t *)infos + i;
        *out = (nvmlProcessDetail_v1_t){(unsigned int)p->pid, p->used, NOT_MIG, NOT_MIG, 0};
    } else {
        nvmlProcessInfo_v2_t *out = (nvmlProcessInfo_v2_t *)infos + i;
        out->pid = (unsigned int)p->pid;
        out->usedGpuMemory = p->used;
        out->gpuInstanceId = NOT_MIG;
        out->computeInstanceId = NOT_MIG;
    }
}

/* Writes the region's processes of device dev (none when dev < 0 or !any) as NVML does. */
static int listed(int dev, unsigned int *count, void *infos, enum record kind,
                  nvmlReturn_t *result, int any) {
    struct vs_process found[VS_MAX_SLOTS]; /* 16 KiB: every slot fits */
    int n = dev >= 0 && any ? vs_device_processes(dev, found, VS_MAX_SLOTS) : 0;
    if (n < 0) return 0; /* region unusable: better the driver's view than none */
    /* NVML's contract: a too small array (or a NULL one, to ask the size) gets the number
       needed and INSUFFICIENT_SIZE; no process at all is SUCCESS with 0. */
    if ((unsigned int)n > *count || (infos == NULL && n > 0)) {
        *count = (unsigned int)n;
        *result = NVML_ERROR_INSUFFICIENT_SIZE;
        return 1;
    }
    for (int i = 0; i < n; i++) put(infos, kind, (unsigned int)i, &found[i]);
    *count = (unsigned int)n;
    *result = NVML_SUCCESS;
    return 1;
}

/* 1 when answered from the region (*result set), 0 when the driver should answer. */
static int from_region(nvmlDevice_t device, unsigned int *count, void *infos, enum record kind,
                       nvmlReturn_t *result) {
    int dev, index;
    if (!vs_region_shared() || vs_nvml_place(device, &dev, &index) != 0) return 0;
    if (dev < 0 && index < 0) return 0; /* not one of this container's devices */
    if (count == NULL) {
        *result = NVML_ERROR_INVALID_ARGUMENT;
        return 1;
    }
    return listed(dev, count, infos, kind, result, 1);
}

#define RUNNING_PROCESSES(name, type, kind)                                                       \
    nvmlReturn_t name(nvmlDevice_t device, unsigned int *infoCount, type *infos) {               \
        vs_nvml_ready();                                                                           \
        nvmlReturn_t result;                                                                       \
        if (from_region(device, infoCount, infos, kind, &result)) return result;                  \
        if (vs_real.name == NULL) return NVML_ERROR_FUNCTION_NOT_FOUND;                           \
        return vs_real.name(device, infoCount, infos);                                             \
    }

RUNNING_PROCESSES(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t, V1)
RUNNING_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_v2_t, V2)
RUNNING_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t, V2)

nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device,
                                                   nvmlProcessDetailList_t *plist) {
    vs_nvml_ready();
    int dev, index;
    int ours = vs_region_shared() && vs_nvml_place(device, &dev, &index) == 0 &&
               (dev >= 0 || index >= 0); /* one of this container's devices */
    if (ours) {
        if (plist == NULL || plist->version != nvmlProcessDetailList_v1 ||
            plist->mode > NVML_PROCESS_MODE_ALL)
            return NVML_ERROR_INVALID_ARGUMENT;
        int compute =
            plist->mode == NVML_PROCESS_MODE_COMPUTE || plist->mode == NVML_PROCESS_MODE_ALL;
        nvmlReturn_t result;
        if (listed(dev, &plist->numProcArrayEntries, plist->procArray, DETAIL, &result, compute))
            return result;
    }
    if (vs_real.nvmlDeviceGetRunningProcessDetailList == NULL) return NVML_ERROR_FUNCTION_NOT_FOUND;
    return vs_real.nvmlDeviceGetRunningProcessDetailList(device, plist);
}
