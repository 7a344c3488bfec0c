/*
 * Finding the real entry points, and making every way of looking one up return the hook:
 * direct calls (the hooks are exported and LD_PRELOAD puts them first), dlsym() on the driver's
 * handle (the CUDA runtime and pynvml dlopen the libraries themselves), and cuGetProcAddress
 * (the runtime since CUDA 11.3 resolves every driver entry point through it).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#include "shim.h"

struct vs_real vs_real;
VS_TLS int vs_in_shim;

static const struct vs_hook_entry table[] = {
#define VS_HOOK(lib, name, ret, params) {#name, (void *)name, (void **)&vs_real.name, VS_LIB_##lib, 1},
#define VS_USE(lib, name, ret, params) {#name, NULL, (void **)&vs_real.name, VS_LIB_##lib, 0},
#include "hooks.def"
#undef VS_HOOK
#undef VS_USE
};
enum { TABLE_SIZE = sizeof table / sizeof table[0] };

typedef void *(*dlsym_fn)(void *, const char *);
static dlsym_fn real_dlsym;
static pthread_once_t dlsym_once = PTHREAD_ONCE_INIT;
static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;

static void resolve_dlsym(void) {
    /* glibc >= 2.34 versions dlsym GLIBC_2.34, older ones GLIBC_2.2.5 (x86_64) */
    real_dlsym = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (real_dlsym == NULL) real_dlsym = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
}

static void resolve_library(enum vs_lib lib, const char *soname) {
    pthread_once(&dlsym_once, resolve_dlsym);
    /* RTLD_LOCAL: the shim only needs the handle and must not change the program's scope */
    void *handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL || real_dlsym == NULL) {
        VS_LOG(VS_ERROR, "cannot load %s (%s); its calls fail", soname,
               handle == NULL ? dlerror() : "no dlsym");
        return;
    }
    for (int i = 0; i < TABLE_SIZE; i++) {
        if (table[i].lib != lib) continue;
        void *found = real_dlsym(handle, table[i].name);
        /* never take our own hook for the real function */
        *table[i].real = (found == table[i].hook) ? NULL : found;
    }
}

static void resolve_cuda(void) { resolve_library(VS_LIB_CUDA, "libcuda.so.1"); }
static void resolve_nvml(void) { resolve_library(VS_LIB_NVML, "libnvidia-ml.so.1"); }

int vs_cuda_resolved;

void vs_cuda_resolve(void) {
    pthread_once(&cuda_once, resolve_cuda);
    __atomic_store_n(&vs_cuda_resolved, 1, __ATOMIC_RELEASE);
}
void vs_nvml_ready(void) { pthread_once(&nvml_once, resolve_nvml); }

static const struct vs_hook_entry *find_by_name(const char *name) {
    for (int i = 0; i < TABLE_SIZE; i++)
        if (table[i].exported && strcmp(table[i].name, name) == 0) return &table[i];
    return NULL;
}

static int looks_hooked(const char *name) {
    return name != NULL && ((name[0] == 'c' && name[1] == 'u') ||
                            (name[0] == 'n' && strncmp(name, "nvml", 4) == 0));
}

/*
 * What cuGetProcAddress returned, exchanged for our hook. The driver hands out the same
 * function as its exported symbol, so matching the pointer picks the right variant (_v2,
 * _ptsz) for the version and flags asked for. A pointer we do not know is matched by name
 * only when the table has no versioned sibling that could be meant instead.
 */
static void *hook_for(void *real, const char *symbol) {
    for (int i = 0; i < TABLE_SIZE; i++)
        if (table[i].exported && *table[i].real == real && real != NULL) return table[i].hook;
    const struct vs_hook_entry *entry = find_by_name(symbol);
    if (entry == NULL) return real;
    size_t length = strlen(symbol);
    for (int i = 0; i < TABLE_SIZE; i++)
        if (table[i].exported && strncmp(table[i].name, symbol, length) == 0 &&
            table[i].name[length] == '_')
            return real;
    return entry->hook;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus) {
    vs_cuda_ready();
    if (vs_real.cuGetProcAddress_v2 == NULL) return CUDA_ERROR_NOT_FOUND;
    CUresult result = vs_real.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (result == CUDA_SUCCESS && pfn != NULL && *pfn != NULL) *pfn = hook_for(*pfn, symbol);
    return result;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
    vs_cuda_ready();
    if (vs_real.cuGetProcAddress == NULL) return CUDA_ERROR_NOT_FOUND;
    CUresult result = vs_real.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
    if (result == CUDA_SUCCESS && pfn != NULL && *pfn != NULL) *pfn = hook_for(*pfn, symbol);
    return result;
}

/*
 * dlsym() interposition complements the above: programs that dlopen the driver and look up
 * cuGetProcAddress or an NVML function themselves get the hook. RTLD_NEXT lookups are passed on
 * as a tail call, so glibc still sees the original caller's return address.
 */
void *dlsym(void *restrict handle, const char *restrict symbol) {
    pthread_once(&dlsym_once, resolve_dlsym);
    if (handle == RTLD_NEXT || !looks_hooked(symbol)) return real_dlsym(handle, symbol);
    void *found = real_dlsym(handle, symbol);
    if (found == NULL) return NULL;
    const struct vs_hook_entry *entry = find_by_name(symbol);
    if (entry == NULL || found == entry->hook) return found;
    if (entry->lib == VS_LIB_CUDA)
        vs_cuda_ready();
    else
        vs_nvml_ready();
    return *entry->real != NULL ? entry->hook : found;
}
