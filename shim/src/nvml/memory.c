/*
 * nvidia-smi and NVML clients inside the container see the slice: total = the memory limit,
 * used = what the container's processes hold (from the region), free = the difference, never
 * below zero. NVML ignores CUDA_VISIBLE_DEVICES, so devices are matched by UUID (NVML's string,
 * turned into cuDeviceGetUuid's bytes as vslice/gpu_uuid.h says); a device no
 * process of the container touched yet takes the limit of its position in
 * CUDA_VISIBLE_DEVICES (or its NVML index).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../shim.h"
#include "vslice/gpu_uuid.h"

/* The container index of an NVML device that is not in the region yet. */
static int container_index(nvmlDevice_t device, const char *uuid) {
    unsigned int nvml_index = 0;
    if (vs_real.nvmlDeviceGetIndex == NULL ||
        vs_real.nvmlDeviceGetIndex(device, &nvml_index) != NVML_SUCCESS)
        return -1;
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    if (visible == NULL || *visible == '\0') return (int)nvml_index;
    char list[512];
    snprintf(list, sizeof list, "%s", visible);
    int position = 0;
    for (char *save = NULL, *item = strtok_r(list, ",", &save); item != NULL;
         item = strtok_r(NULL, ",", &save), position++) {
        char *end = NULL;
        long number = strtol(item, &end, 10);
        if ((*end == '\0' && number == (long)nvml_index) || strstr(uuid, item) == uuid)
            return position;
    }
    return -1; /* not visible to CUDA in this container: report it unchanged */
}

/* Where an NVML device stands for this container: its region device (-1: none yet) and its
   index in the container (-1: not visible to CUDA here). 0 when found, -1 when untracked. */
int vs_nvml_place(nvmlDevice_t device, int *dev, int *index) {
    *dev = *index = -1;
    if (!vs_config()->tracking || vs_real.nvmlDeviceGetUUID == NULL) return -1;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    uint8_t raw[16];
    if (vs_real.nvmlDeviceGetUUID(device, uuid, sizeof uuid) != NVML_SUCCESS) return -1;
    vs_uuid_from_text(uuid, raw); /* the bytes cuDeviceGetUuid gives for it */
    if (vs_region_attached()) *dev = vs_device_by_uuid(raw); /* a reader takes no slot */
    *index = container_index(device, uuid);
    if (*index >= VS_MAX_DEVICES) *index = -1;
    return 0;
}

/* The slice of an NVML device: 1 = *limit holds (0 bytes when failed closed), 0 = no limit
   (report the device unchanged). The limit is this process's own, never the region's copy. */
static int slice_of(nvmlDevice_t device, uint64_t *limit, uint64_t *used) {
    *used = 0;
    int dev, index;
    if (vs_nvml_place(device, &dev, &index) != 0) return 0;
    if (dev >= 0) {
        if (vs_device_usage(dev, limit, used)) return 1;
        if (vs_local_index(dev) >= 0) return 0; /* registered by this process: no limit */
    }
    if (index < 0 || !vs_config()->mem_limited[index]) return 0;
    *limit = vs_config()->mem_limit[index];
    return 1;
}

/* total = the slice, free = what is left of it (never below 0), used = what the container's
   processes really hold, even past the slice (context overhead can take it there): a
   monitoring tool must see an over-full slice, not a full one. */
static void apply(nvmlDevice_t device, unsigned long long *total, unsigned long long *free,
                  unsigned long long *used) {
    uint64_t held = 0, limit = 0;
    if (!slice_of(device, &limit, &held)) return;
    if (limit > *total) limit = *total;
    *total = limit;
    *used = held;
    *free = held < limit ? limit - held : 0;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    vs_nvml_ready();
    if (vs_real.nvmlDeviceGetMemoryInfo == NULL) return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t r = vs_real.nvmlDeviceGetMemoryInfo(device, memory);
    if (r == NVML_SUCCESS) apply(device, &memory->total, &memory->free, &memory->used);
    return r;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    vs_nvml_ready();
    if (vs_real.nvmlDeviceGetMemoryInfo_v2 == NULL) return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t r = vs_real.nvmlDeviceGetMemoryInfo_v2(device, memory);
    if (r == NVML_SUCCESS) {
        apply(device, &memory->total, &memory->free, &memory->used);
        if (memory->reserved > memory->total - memory->used - memory->free)
            memory->reserved = memory->total - memory->used - memory->free;
    }
    return r;
}
