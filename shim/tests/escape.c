/*
 * The ways a program can reach the driver's allocation function without the shim in between,
 * tried one by one. Each argument is "<route>[:<value>]"; the route resolves the driver's entry
 * points (cuInit, cuDeviceGet, cuDevicePrimaryCtxRetain, cuCtxSetCurrent, the allocation
 * function) its own way, makes a context with them and allocates <size>. It prints one line
 *
 *   <route> <CUresult of the allocation> <who>
 *
 * where who is "shim" (the allocation function came from libvslice), "driver" (from anywhere
 * else) or "none" (the route found no allocation function; the CUresult is then -1). What was
 * allocated is freed through the same route.
 *
 *   dlsym:<size>            dlopen("libcuda.so.1") + dlsym
 *   deepbind:<size>         the same, opened with RTLD_DEEPBIND
 *   dlvsym:<version>:<size> dlvsym on the driver's handle, with that version string
 *   libc_dlsym:<size>       glibc's dlsym, looked up by name in libc.so.6, on the driver's handle
 *   libc_dlvsym:<size>      the same with glibc's dlsym looked up by dlvsym(libc, "dlsym",
 *                           "GLIBC_2.34")
 *   dlmopen:<size>          dlmopen(LM_ID_NEWLM, "libcuda.so.1"), then the dlsym of that
 *                           namespace's own libc.so.6 on it
 *   dlmopen_path:<path>:<size>  the same with a path (a copy of the driver under another name)
 *   procaddr:<size>         cuGetProcAddress ("cuMemAlloc", CUDA 12.8), found by dlsym
 *   procaddr_v2:<size>      cuGetProcAddress_v2, the same
 *   procaddr_ptsz:<size>    cuGetProcAddress_v2 ("cuMemAllocAsync") with the per-thread default
 *                           stream flag, which selects cuMemAllocAsync_ptsz
 *   namespace:<library>     dlmopen(LM_ID_NEWLM, library): prints "namespace <0|1> new=<0|1>
 *                           error=<0|1>", new=1 when it was loaded outside the base namespace,
 *                           error=1 when dlerror() has an error after it succeeded
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "testlib.h"
#include "vslice/cuda_abi.h"

typedef void *(*dlsym_fn)(void *, const char *);
typedef CUresult (*init_fn)(unsigned int);
typedef CUresult (*device_get_fn)(CUdevice *, int);
typedef CUresult (*retain_fn)(CUcontext *, CUdevice);
typedef CUresult (*set_current_fn)(CUcontext);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*proc_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*proc_v2_fn)(const char *, void **, int, cuuint64_t,
                               CUdriverProcAddressQueryResult *);

/* One route: how it looks a driver entry point up. */
struct route {
    void *handle;        /* the driver's handle, for the symbol routes */
    dlsym_fn lookup;     /* the lookup function, for the symbol routes */
    const char *version; /* dlvsym's version string */
    proc_fn proc;        /* cuGetProcAddress */
    proc_v2_fn proc_v2;  /* cuGetProcAddress_v2 */
    int per_thread;
};

/* Symbol names ("cuMemAlloc_v2") for the symbol routes, base names ("cuMemAlloc") for
   cuGetProcAddress, which picks the variant from the version and flags. */
static void *find(const struct route *r, const char *symbol, const char *base) {
    void *fn = NULL;
    cuuint64_t flags = r->per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0;
    CUdriverProcAddressQueryResult status;
    if (r->proc_v2 != NULL) {
        if (r->proc_v2(base, &fn, 12080, flags, &status) != CUDA_SUCCESS) return NULL;
    } else if (r->proc != NULL) {
        if (r->proc(base, &fn, 12080, flags) != CUDA_SUCCESS) return NULL;
    } else if (r->version != NULL) {
        /* the context calls are not what is tried here; the allocation function is */
        if (strcmp(base, "cuMemAlloc") != 0) return dlsym(r->handle, symbol);
        return dlvsym(r->handle, symbol, r->version);
    } else {
        return r->lookup(r->handle, symbol);
    }
    return fn;
}

static const char *who(void *fn) {
    Dl_info info;
    if (fn == NULL) return "none";
    return dladdr(fn, &info) && info.dli_fname != NULL && strstr(info.dli_fname, "libvslice")
               ? "shim"
               : "driver";
}

static void try_route(const char *label, const struct route *r, uint64_t size) {
    init_fn init = (init_fn)find(r, "cuInit", "cuInit");
    device_get_fn device_get = (device_get_fn)find(r, "cuDeviceGet", "cuDeviceGet");
    retain_fn retain = (retain_fn)find(r, "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain");
    set_current_fn set_current = (set_current_fn)find(r, "cuCtxSetCurrent", "cuCtxSetCurrent");
    void *alloc = r->per_thread ? find(r, "cuMemAllocAsync_ptsz", "cuMemAllocAsync")
                                : find(r, "cuMemAlloc_v2", "cuMemAlloc");
    if (alloc == NULL || init == NULL || device_get == NULL || retain == NULL ||
        set_current == NULL) {
        printf("%s -1 %s\n", label, who(alloc));
        return;
    }
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p = 0;
    CUresult result = init(0);
    if (result == CUDA_SUCCESS) result = device_get(&dev, 0);
    if (result == CUDA_SUCCESS) result = retain(&ctx, dev);
    if (result == CUDA_SUCCESS) result = set_current(ctx);
    if (result == CUDA_SUCCESS)
        result = r->per_thread ? ((alloc_async_fn)alloc)(&p, size, NULL)
                               : ((alloc_fn)alloc)(&p, size);
    printf("%s %d %s\n", label, (int)result, who(alloc));
    /* give it back the same way, so that the next route starts from an empty card */
    free_fn release = (free_fn)find(r, "cuMemFree_v2", "cuMemFree");
    if (result == CUDA_SUCCESS && release != NULL) release(p);
}

static void *open_driver(int flags) { return dlopen("libcuda.so.1", RTLD_NOW | flags); }

/* dlmopen into a new namespace, then look up with that namespace's own dlsym. */
static struct route in_new_namespace(const char *path) {
    struct route r = {0};
    Lmid_t lmid = LM_ID_BASE;
    r.handle = dlmopen(LM_ID_NEWLM, path, RTLD_NOW | RTLD_LOCAL);
    if (r.handle == NULL || dlinfo(r.handle, RTLD_DI_LMID, &lmid) != 0) return r;
    void *libc = dlmopen(lmid, "libc.so.6", RTLD_NOW | RTLD_LOCAL);
    r.lookup = libc != NULL ? (dlsym_fn)dlsym(libc, "dlsym") : NULL;
    return r;
}

static void run(const char *arg) {
    char text[256], path[4096];
    struct route r = {0};
    if (sscanf(arg, "namespace:%4095s", path) == 1) {
        void *handle = dlmopen(LM_ID_NEWLM, path, RTLD_NOW | RTLD_LOCAL);
        const char *error = handle != NULL ? dlerror() : NULL; /* none after a success */
        Lmid_t lmid = LM_ID_BASE;
        if (handle != NULL) dlinfo(handle, RTLD_DI_LMID, &lmid);
        printf("namespace %d new=%d error=%d\n", handle == NULL, lmid != LM_ID_BASE, error != NULL);
        return;
    } else if (sscanf(arg, "dlsym:%255s", text) == 1) {
        r = (struct route){.handle = open_driver(RTLD_LOCAL), .lookup = dlsym};
    } else if (sscanf(arg, "deepbind:%255s", text) == 1) {
        r = (struct route){.handle = open_driver(RTLD_LOCAL | RTLD_DEEPBIND), .lookup = dlsym};
    } else if (sscanf(arg, "dlvsym:%255[^:]:%255s", path, text) == 2) {
        r = (struct route){.handle = open_driver(RTLD_LOCAL), .version = path};
    } else if (sscanf(arg, "libc_dlsym:%255s", text) == 1) {
        void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
        r = (struct route){.handle = open_driver(RTLD_LOCAL),
                           .lookup = libc ? (dlsym_fn)dlsym(libc, "dlsym") : NULL};
    } else if (sscanf(arg, "libc_dlvsym:%255s", text) == 1) {
        void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
        r = (struct route){.handle = open_driver(RTLD_LOCAL),
                           .lookup = libc ? (dlsym_fn)dlvsym(libc, "dlsym", "GLIBC_2.34") : NULL};
    } else if (sscanf(arg, "dlmopen:%255s", text) == 1) {
        r = in_new_namespace("libcuda.so.1");
    } else if (sscanf(arg, "dlmopen_path:%4095[^:]:%255s", path, text) == 2) {
        r = in_new_namespace(path);
    } else if (sscanf(arg, "procaddr:%255s", text) == 1) {
        r.proc = (proc_fn)dlsym(open_driver(RTLD_LOCAL), "cuGetProcAddress");
    } else if (sscanf(arg, "procaddr_v2:%255s", text) == 1) {
        r.proc_v2 = (proc_v2_fn)dlsym(open_driver(RTLD_LOCAL), "cuGetProcAddress_v2");
    } else if (sscanf(arg, "procaddr_ptsz:%255s", text) == 1) {
        r.proc_v2 = (proc_v2_fn)dlsym(open_driver(RTLD_LOCAL), "cuGetProcAddress_v2");
        r.per_thread = 1;
    } else {
        printf("%s unknown-route\n", arg);
        return;
    }
    char name[64]; /* the route, without its arguments */
    snprintf(name, sizeof name, "%.*s", (int)(strchr(arg, ':') - arg), arg);
    if (r.lookup == NULL && r.version == NULL && r.proc == NULL && r.proc_v2 == NULL) {
        printf("%s -1 none\n", name);
        return;
    }
    try_route(name, &r, test_size(text));
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        run(argv[i]);
        fflush(stdout);
    }
    return 0;
}
