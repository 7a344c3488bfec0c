/* The fake NVML's board information (nvml_board.h). The fake card is the one the fake driver
   describes (fake/device.h): an H100-class data-centre board, compute capability 9.0, PCI bus
   0x18 + its physical index, passively cooled, persistence mode on, ECC on and clean, MIG
   capable but off, no display and no video engines in use. Power and temperature follow the
   same busy time as nvmlDeviceGetUtilizationRates, so a tool sees a busy card warm up. */
#include <stdio.h>
#include <string.h>

#include "device.h"
#include "nvml_board.h"

#define CHECK(device, physical)                                                                    \
    unsigned int physical;                                                                         \
    do {                                                                                           \
        nvmlReturn_t r_ = fake_nvml_physical((device), &physical);                                \
        if (r_ != NVML_SUCCESS) return r_;                                                         \
    } while (0)

#define POWER_LIMIT_MW 700000u /* an SXM5 board's default limit */
#define POWER_IDLE_MW 70000u
#define TEMP_IDLE_C 32u
#define TEMP_BUSY_C 68u

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) {
    if (cudaDriverVersion == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = FAKE_CUDA_DRIVER_VERSION; /* what the fake's cuDriverGetVersion says */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) {
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

/* The legacy layouts (unversioned and _v2) end before the 32-character busId. */
static nvmlReturn_t pci_info(nvmlDevice_t device, nvmlPciInfo_t *pci, int with_bus_id) {
    CHECK(device, physical);
    if (pci == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int bus = FAKE_PCI_BUS_BASE + physical;
    pci->domain = 0;
    pci->bus = bus;
    pci->device = 0;
    pci->pciDeviceId = FAKE_PCI_DEVICE_ID;
    pci->pciSubSystemId = FAKE_PCI_SUBSYSTEM_ID;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", 0u, bus, 0u);
    if (with_bus_id) snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", 0u, bus, 0u);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    return pci_info(device, pci, 1);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    return pci_info(device, pci, 0);
}

nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    return pci_info(device, pci, 0);
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    CHECK(device, physical);
    (void)physical;
    if (major == NULL || minor == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *major = FAKE_CC_MAJOR;
    *minor = FAKE_CC_MINOR;
    return NVML_SUCCESS;
}

static nvmlReturn_t enable_state(nvmlDevice_t device, nvmlEnableState_t *out, nvmlEnableState_t v) {
    CHECK(device, physical);
    (void)physical;
    if (out == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *out = v;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode) {
    return enable_state(device, mode, NVML_FEATURE_ENABLED);
}

nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t device, nvmlEnableState_t *isActive) {
    return enable_state(device, isActive, NVML_FEATURE_DISABLED);
}

nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode) {
    CHECK(device, physical);
    (void)physical;
    if (mode == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *mode = NVML_COMPUTEMODE_DEFAULT; /* several contexts per device: what slicing needs */
    return NVML_SUCCESS;
}

/* Windows only: Linux drivers answer NOT_SUPPORTED. */
nvmlReturn_t nvmlDeviceGetDriverModel_v2(nvmlDevice_t device, nvmlDriverModel_t *current,
                                         nvmlDriverModel_t *pending) {
    CHECK(device, physical);
    (void)physical;
    (void)current;
    (void)pending;
    return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetDriverModel(nvmlDevice_t device, nvmlDriverModel_t *current,
                                      nvmlDriverModel_t *pending) {
    return nvmlDeviceGetDriverModel_v2(device, current, pending);
}

static unsigned last_second_busy(unsigned int physical) {
    uint64_t now = fake_now_ns(), from = now > 1000000000ull ? now - 1000000000ull : 0;
    return fake_nvml_busy_percent(physical, from, now);
}

nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t *pState) {
    CHECK(device, physical);
    if (pState == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *pState = last_second_busy(physical) > 0 ? NVML_PSTATE_0 : NVML_PSTATE_8;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    CHECK(device, physical);
    if (power == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *power = POWER_IDLE_MW + (POWER_LIMIT_MW - POWER_IDLE_MW) / 100u * last_second_busy(physical);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit) {
    CHECK(device, physical);
    (void)physical;
    if (limit == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *limit = POWER_LIMIT_MW;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit) {
    return nvmlDeviceGetPowerManagementLimit(device, limit);
}

static unsigned temperature_of(unsigned int physical) {
    return TEMP_IDLE_C + (TEMP_BUSY_C - TEMP_IDLE_C) * last_second_busy(physical) / 100u;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                      unsigned int *temp) {
    CHECK(device, physical);
    if (temp == NULL || sensorType != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    *temp = temperature_of(physical);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *temperature) {
    CHECK(device, physical);
    if (temperature == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (temperature->version != nvmlTemperature_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (temperature->sensorType != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    temperature->temperature = (int)temperature_of(physical);
    return NVML_SUCCESS;
}

/* Clocks in MHz: the SM and graphics clock the fake driver reports to CUDA (its kernels' cycle
   time), the memory clock likewise; fixed, so the current clock is the maximum. */
nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                       unsigned int *clock) {
    CHECK(device, physical);
    (void)physical;
    if (clock == NULL || (unsigned)type >= NVML_CLOCK_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    *clock = type == NVML_CLOCK_MEM ? FAKE_MEM_CLOCK_MHZ : FAKE_SM_CLOCK_MHZ;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                    unsigned int *clock) {
    return nvmlDeviceGetMaxClockInfo(device, type, clock);
}

/* Data-centre boards are passively cooled: no fan of their own to report. */
nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed) {
    CHECK(device, physical);
    (void)physical;
    if (speed == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                         nvmlEccCounterType_t counterType,
                                         unsigned long long *eccCounts) {
    CHECK(device, physical);
    (void)physical;
    if (eccCounts == NULL || (unsigned)errorType >= NVML_MEMORY_ERROR_TYPE_COUNT ||
        (unsigned)counterType >= NVML_ECC_COUNTER_TYPE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    *eccCounts = 0;
    return NVML_SUCCESS;
}

static nvmlReturn_t engine_idle(nvmlDevice_t device, unsigned int *utilization,
                                unsigned int *samplingPeriodUs) {
    CHECK(device, physical);
    (void)physical;
    if (utilization == NULL || samplingPeriodUs == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *utilization = 0;
    *samplingPeriodUs = 167000; /* the driver's usual sampling period */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                             unsigned int *samplingPeriodUs) {
    return engine_idle(device, utilization, samplingPeriodUs);
}

nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                             unsigned int *samplingPeriodUs) {
    return engine_idle(device, utilization, samplingPeriodUs);
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                  unsigned int *pendingMode) {
    CHECK(device, physical);
    (void)physical;
    if (currentMode == NULL || pendingMode == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *currentMode = 0; /* NVML_DEVICE_MIG_DISABLE */
    *pendingMode = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
    CHECK(device, physical);
    (void)physical;
    if (isMigDevice == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *isMigDevice = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetConfComputeMemSizeInfo(nvmlDevice_t device,
                                                 nvmlConfComputeMemSizeInfo_t *memInfo) {
    CHECK(device, physical);
    (void)physical;
    (void)memInfo;
    return NVML_ERROR_NOT_SUPPORTED;
}

/* Graphics contexts: a CUDA process is listed under compute only, and the fake runs no
   graphics, so the list is empty. NVML's contract for the size query holds all the same. */
static nvmlReturn_t no_graphics(nvmlDevice_t device, unsigned int *infoCount) {
    CHECK(device, physical);
    (void)physical;
    if (infoCount == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *infoCount = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                   nvmlProcessInfo_v1_t *infos) {
    (void)infos;
    return no_graphics(device, infoCount);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_v2_t *infos) {
    (void)infos;
    return no_graphics(device, infoCount);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_t *infos) {
    (void)infos;
    return no_graphics(device, infoCount);
}
