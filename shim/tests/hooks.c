/*
 * Consistency of the hook table (src/hooks.def), checked inside a process running under the
 * shim: every hook is what the dynamic linker, dlsym() on the driver's own handle and
 * cuGetProcAddress hand out. Prints one line per hook: "<name> <export> <dlsym> <procaddr>"
 * with each check "ok", "absent" (the driver does not have it) or "WRONG".
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "testlib.h"
#include "vslice/cuda_abi.h"
#include "vslice/nvml_abi.h"

static const char *const hooks[] = {
#define VS_HOOK(lib, name, ret, params) #name,
#define VS_USE(lib, name, ret, params)
#include "hooks.def"
};

/* "cuMemAllocAsync_ptsz" -> "cuMemAllocAsync" + per-thread; "cuMemAlloc_v2" -> "cuMemAlloc" */
static int base_name(const char *name, char *base, size_t size) {
    snprintf(base, size, "%s", name);
    int per_thread = 0;
    char *suffix = strstr(base, "_ptsz");
    if (suffix != NULL) {
        *suffix = '\0';
        per_thread = 1;
    }
    char *version = strrchr(base, '_');
    if (version != NULL && version[1] == 'v' && version[2] >= '0' && version[2] <= '9')
        *version = '\0';
    return per_thread;
}

static const char *via_procaddr(const char *name, void *hook) {
    if (strncmp(name, "cu", 2) != 0) return "absent";
    char base[128];
    int per_thread = base_name(name, base, sizeof base);
    static const int versions[] = {13000, 12080, 12000, 11040, 11000, 7000, 4000, 3020};
    int found = 0;
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult status;
        cuuint64_t flags = per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0;
        if (cuGetProcAddress_v2(base, &fn, versions[i], flags, &status) != CUDA_SUCCESS) continue;
        found = 1;
        if (fn == hook) return "ok";
    }
    return found ? "WRONG" : "absent";
}

int main(void) {
    cuInit(0);
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    for (size_t i = 0; i < sizeof hooks / sizeof hooks[0]; i++) {
        const char *name = hooks[i];
        void *hook = dlsym(RTLD_DEFAULT, name);
        Dl_info info;
        int exported = hook != NULL && dladdr(hook, &info) && strstr(info.dli_fname, "libvslice");
        void *lib = strncmp(name, "nvml", 4) == 0 ? nvml : cuda;
        void *looked_up = dlsym(lib, name);
        printf("%s %s %s %s\n", name, exported ? "ok" : "WRONG",
               looked_up == NULL ? "absent" : looked_up == hook ? "ok" : "WRONG",
               via_procaddr(name, hook));
    }
    /* what is not hooked resolves to the driver's own entry point */
    void *fn = NULL;
    CUdriverProcAddressQueryResult status;
    cuGetProcAddress_v2("cuMemcpyHtoD", &fn, 12080, 0, &status);
    printf("unhooked:cuMemcpyHtoD %s\n", fn != NULL && fn == dlsym(cuda, "cuMemcpyHtoD_v2") ? "ok" : "WRONG");
    return 0;
}
