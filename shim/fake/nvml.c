/* A fake NVML (libnvidia-ml.so.1) over the same shared state as the fake driver. Like the real
   NVML it ignores CUDA_VISIBLE_DEVICES and lists every device. */
#include <stdio.h>
#include <string.h>

#include "device.h"
#include "vslice/nvml_abi.h"

struct nvmlDevice_st {
    unsigned int index;
};
static struct nvmlDevice_st handles[FAKE_MAX_DEVICES];
static int initialized;

nvmlReturn_t nvmlInit_v2(void) {
    for (unsigned i = 0; i < FAKE_MAX_DEVICES; i++) handles[i].index = i;
    fake_state();
    initialized = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }

nvmlReturn_t nvmlShutdown(void) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    initialized = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (deviceCount == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = fake_state()->device_count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (device == NULL || index >= fake_state()->device_count) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &handles[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (uuid == NULL || device == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < fake_state()->device_count; i++) {
        char text[96];
        uint8_t u[16];
        fake_uuid((int)i, u);
        snprintf(text, sizeof text,
                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                 u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                 u[14], u[15]);
        if (strcmp(text, uuid) == 0) {
            *device = &handles[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

#define NEED_DEVICE(d)                                                                             \
    if (!initialized) return NVML_ERROR_UNINITIALIZED;                                            \
    if ((d) == NULL || (d) < handles || (d) >= handles + fake_state()->device_count)             \
    return NVML_ERROR_INVALID_ARGUMENT

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    NEED_DEVICE(device);
    if (uuid == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (length < 41) return NVML_ERROR_INSUFFICIENT_SIZE;
    uint8_t u[16];
    fake_uuid((int)device->index, u);
    snprintf(uuid, length,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
             u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
             u[15]);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    NEED_DEVICE(device);
    if (index == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *index = device->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    NEED_DEVICE(device);
    if (name == NULL || length == 0) return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(name, length, "Fake NVIDIA GPU %u", device->index);
    return NVML_SUCCESS;
}

static void memory_of(nvmlDevice_t device, unsigned long long *total, unsigned long long *used) {
    struct fake_device_state *d = &fake_state()->dev[device->index];
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

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    NEED_DEVICE(device);
    if (memory == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory_of(device, &memory->total, &memory->used);
    memory->reserved = 0;
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    default: return "Unknown Error";
    }
}
