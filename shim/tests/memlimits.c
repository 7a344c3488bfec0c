/*
 * An NVML client of driver-enforced memory limits, run by tests/shim/test_driver_memory_limits.py
 * (CUDA allocations are the probe program's). Each argument is a command; each prints one line
 * "<command> <nvmlReturn_t> [key=value ...]".
 *
 *   set:<index>:<ns>:<soft>:<hard>  nvmlDeviceSetMemoryLimits_v1 on GPU <index>; ns "null" is a
 *                                   NULL nameSpace, "self" this process's cgroup; hard "max" is
 *                                   VSLICE_NVML_MEMORY_LIMIT_MAX
 *   get:<index>:<ns>                nvmlDeviceGetMemoryLimits_v1: soft, hard, used
 *   mem:<index>                     nvmlDeviceGetMemoryInfo_v2 (total, free, used) and the v1
 *                                   form's total (total1)
 *   rule:<file>                     the cgroup rule (vslice/cgroup_path.h) on a file holding a
 *                                   /proc/<pid>/cgroup text: "rule <0|errno> <namespace>"
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vslice/cgroup_path.h"
#include "vslice/nvml_abi.h"

static char self[VS_CGROUP_PATH_MAX];

static char *namespace_arg(char *text) {
    if (strcmp(text, "null") == 0) return NULL;
    if (strcmp(text, "self") == 0) return self;
    return text;
}

static unsigned long long limit_arg(const char *text) {
    return strcmp(text, "max") == 0 ? VSLICE_NVML_MEMORY_LIMIT_MAX : strtoull(text, NULL, 10);
}

static nvmlDevice_t device(const char *index) {
    nvmlDevice_t d = NULL;
    nvmlDeviceGetHandleByIndex_v2((unsigned)atoi(index), &d);
    return d;
}

static void do_set(char *args) {
    char *save = NULL, *index = strtok_r(args, ":", &save), *ns = strtok_r(NULL, ":", &save);
    char *soft = strtok_r(NULL, ":", &save), *hard = strtok_r(NULL, ":", &save);
    nvmlSetMemoryLimits_v1_t limits = {namespace_arg(ns), limit_arg(soft), limit_arg(hard)};
    printf("set %d\n", (int)nvmlDeviceSetMemoryLimits_v1(device(index), &limits));
}

static void do_get(char *args) {
    char *save = NULL, *index = strtok_r(args, ":", &save), *ns = strtok_r(NULL, ":", &save);
    nvmlGetMemoryLimits_v1_t limits = {namespace_arg(ns), 0, 0, 0};
    nvmlReturn_t r = nvmlDeviceGetMemoryLimits_v1(device(index), &limits);
    printf("get %d soft=%llu hard=%llu used=%llu\n", (int)r, limits.softLimit, limits.hardLimit,
           limits.currentUsed);
}

static void do_mem(const char *index) {
    nvmlMemory_t v1 = {0, 0, 0};
    nvmlMemory_v2_t v2;
    memset(&v2, 0, sizeof v2);
    v2.version = nvmlMemory_v2;
    nvmlReturn_t r = nvmlDeviceGetMemoryInfo_v2(device(index), &v2);
    nvmlDeviceGetMemoryInfo(device(index), &v1);
    printf("mem %d total=%llu free=%llu used=%llu total1=%llu\n", (int)r, v2.total, v2.free,
           v2.used, v1.total);
}

static void do_rule(const char *file) {
    char text[16384], ns[VS_CGROUP_PATH_MAX] = "-";
    FILE *f = fopen(file, "r");
    size_t n = f != NULL ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f != NULL) fclose(f);
    text[n] = '\0';
    int r = vs_cgroup_path_from(text, ns, sizeof ns) == 0 ? 0 : errno;
    printf("rule %d %s\n", r, r == 0 ? ns : "-");
}

int main(int argc, char **argv) {
    if (vs_cgroup_path(0, self, sizeof self) != 0) self[0] = '\0';
    nvmlReturn_t r = nvmlInit_v2();
    if (r != NVML_SUCCESS) {
        printf("init %d\n", (int)r);
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "set:", 4) == 0)
            do_set(argv[i] + 4);
        else if (strncmp(argv[i], "get:", 4) == 0)
            do_get(argv[i] + 4);
        else if (strncmp(argv[i], "mem:", 4) == 0)
            do_mem(argv[i] + 4);
        else if (strncmp(argv[i], "rule:", 5) == 0)
            do_rule(argv[i] + 5);
        else
            printf("%s unknown-command\n", argv[i]);
        fflush(stdout);
    }
    nvmlShutdown();
    return 0;
}
