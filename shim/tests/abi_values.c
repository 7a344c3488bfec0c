/*
 * Prints the constants and layouts the shim relies on. Built twice by `make drift`: once with
 * the shim's own declarations, once with NVIDIA's cuda.h/nvml.h included first (then the
 * shim's types step aside). The two outputs must be identical.
 */
#include <stddef.h>
#include <stdio.h>

#include "testlib.h"
#include "vslice/cuda_abi.h"
#include "vslice/nvml_abi.h"

#define VALUE(name) printf("%s %lld\n", #name, (long long)(name))
#define SIZE(type) printf("sizeof(%s) %zu\n", #type, sizeof(type))
#define OFFSET(type, field) printf("offsetof(%s, %s) %zu\n", #type, #field, offsetof(type, field))

int main(void) {
    VALUE(CUDA_SUCCESS);
    VALUE(CUDA_ERROR_INVALID_VALUE);
    VALUE(CUDA_ERROR_OUT_OF_MEMORY);
    VALUE(CUDA_ERROR_NOT_INITIALIZED);
    VALUE(CUDA_ERROR_NO_DEVICE);
    VALUE(CUDA_ERROR_INVALID_DEVICE);
    VALUE(CUDA_ERROR_INVALID_IMAGE);
    VALUE(CUDA_ERROR_INVALID_CONTEXT);
    VALUE(CUDA_ERROR_INVALID_HANDLE);
    VALUE(CUDA_ERROR_NOT_FOUND);
    VALUE(CUDA_ERROR_NOT_READY);
    VALUE(CUDA_ERROR_NOT_SUPPORTED);
    VALUE(CUDA_ERROR_UNKNOWN);
    VALUE(CU_AD_FORMAT_UNSIGNED_INT8);
    VALUE(CU_AD_FORMAT_UNSIGNED_INT16);
    VALUE(CU_AD_FORMAT_UNSIGNED_INT32);
    VALUE(CU_AD_FORMAT_SIGNED_INT8);
    VALUE(CU_AD_FORMAT_SIGNED_INT16);
    VALUE(CU_AD_FORMAT_SIGNED_INT32);
    VALUE(CU_AD_FORMAT_HALF);
    VALUE(CU_AD_FORMAT_FLOAT);
    VALUE(CUDA_ARRAY3D_LAYERED);
    VALUE(CU_MEM_ALLOCATION_TYPE_PINNED);
    VALUE(CU_MEM_LOCATION_TYPE_DEVICE);
    VALUE(CU_MEM_LOCATION_TYPE_HOST);
    VALUE(CU_GET_PROC_ADDRESS_DEFAULT);
    VALUE(CU_GET_PROC_ADDRESS_LEGACY_STREAM);
    VALUE(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    VALUE(CU_GET_PROC_ADDRESS_SUCCESS);
    VALUE(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    VALUE(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    VALUE(CU_EVENT_DEFAULT);
    VALUE(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
    VALUE(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    VALUE(CU_MEM_ATTACH_GLOBAL);
    SIZE(CUuuid);
    SIZE(CUDA_ARRAY_DESCRIPTOR);
    OFFSET(CUDA_ARRAY_DESCRIPTOR, Format);
    OFFSET(CUDA_ARRAY_DESCRIPTOR, NumChannels);
    SIZE(CUDA_ARRAY3D_DESCRIPTOR);
    OFFSET(CUDA_ARRAY3D_DESCRIPTOR, Format);
    OFFSET(CUDA_ARRAY3D_DESCRIPTOR, Flags);
    SIZE(CUmemAllocationProp);
    OFFSET(CUmemAllocationProp, location);
    OFFSET(CUmemAllocationProp, win32HandleMetaData);
    OFFSET(CUmemAllocationProp, allocFlags);
    SIZE(CUlaunchConfig);
    OFFSET(CUlaunchConfig, hStream);
    OFFSET(CUlaunchConfig, numAttrs);
    SIZE(CUDA_KERNEL_NODE_PARAMS);
    OFFSET(CUDA_KERNEL_NODE_PARAMS, kernelParams);
    OFFSET(CUDA_KERNEL_NODE_PARAMS, kern);
    OFFSET(CUDA_KERNEL_NODE_PARAMS, ctx);
    VALUE(NVML_SUCCESS);
    VALUE(NVML_ERROR_UNINITIALIZED);
    VALUE(NVML_ERROR_INVALID_ARGUMENT);
    VALUE(NVML_ERROR_NOT_SUPPORTED);
    VALUE(NVML_ERROR_NOT_FOUND);
    VALUE(NVML_ERROR_INSUFFICIENT_SIZE);
    VALUE(NVML_ERROR_FUNCTION_NOT_FOUND);
    VALUE(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    VALUE(NVML_ERROR_UNKNOWN);
    VALUE(NVML_DEVICE_UUID_V2_BUFFER_SIZE);
    VALUE(NVML_ERROR_TIMEOUT);
    SIZE(nvmlUtilization_t);
    SIZE(nvmlEventData_t);
    OFFSET(nvmlEventData_t, eventData);
    OFFSET(nvmlEventData_t, computeInstanceId);
    SIZE(nvmlMemory_t);
    SIZE(nvmlMemory_v2_t);
    VALUE(nvmlMemory_v2);
    SIZE(nvmlProcessInfo_v1_t);
    OFFSET(nvmlProcessInfo_v1_t, usedGpuMemory);
    SIZE(nvmlProcessInfo_v2_t);
    SIZE(nvmlProcessInfo_t);
    OFFSET(nvmlProcessInfo_v2_t, usedGpuMemory);
    OFFSET(nvmlProcessInfo_v2_t, gpuInstanceId);
    OFFSET(nvmlProcessInfo_v2_t, computeInstanceId);
    return 0;
}
