/*
 * Finding the real entry points, and making every way of looking one up return the hook:
 * direct calls (the hooks are exported and LD_PRELOAD puts them first), dlsym() and dlvsym() on
 * the driver's handle (the CUDA runtime and pynvml dlopen the libraries themselves),
 * cuGetProcAddress (the runtime since CUDA 11.3 resolves every driver entry point through it),
 * and dlmopen(), which would otherwise load a second, unshimmed driver.
 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
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
typedef void *(*dlvsym_fn)(void *, const char *, const char *);
typedef void *(*dlmopen_fn)(Lmid_t, const char *, int);
static dlsym_fn real_dlsym;
static dlvsym_fn real_dlvsym;
static dlmopen_fn real_dlmopen;
static pthread_once_t loader_once = PTHREAD_ONCE_INIT;
static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;

/* The shim's own loader functions, by name (src/hooks.def). */
static const struct {
    const char *name;
    void *own;
} loader[] = {
#define VS_LOADER(name) {#name, (void *)name},
#define VS_HOOK(lib, name, ret, params)
#define VS_USE(lib, name, ret, params)
#include "hooks.def"
#undef VS_LOADER
#undef VS_HOOK
#undef VS_USE
};

/* Symbols of an ELF hash table: DT_HASH says so, DT_GNU_HASH must be walked to its last chain. */
static size_t symbol_count(const ElfW(Word) *hash, const uint32_t *gnu_hash) {
    if (hash != NULL) return hash[1];
    if (gnu_hash == NULL) return 0;
    uint32_t buckets = gnu_hash[0], offset = gnu_hash[1], bloom_words = gnu_hash[2];
    const uint32_t *bucket = (const uint32_t *)((const ElfW(Addr) *)&gnu_hash[4] + bloom_words);
    const uint32_t *chain = bucket + buckets;
    uint32_t last = 0;
    for (uint32_t i = 0; i < buckets; i++)
        if (bucket[i] > last) last = bucket[i];
    if (last < offset) return offset;
    while ((chain[last - offset] & 1) == 0) last++;
    return last + 1;
}

/*
 * A function that glibc exports (the default version of it), found in its dynamic symbol table
 * without calling dlsym or dlvsym. The shim exports those names, and every reference to them,
 * the shim's own included, binds to the first definition in the global scope: the shim's. So the
 * first real lookup function has to be read from the library that defines it (libc.so.6 since
 * glibc 2.34, libdl.so.2 before), once, under pthread_once.
 */
static void *glibc_function(const char *name) {
    static const char *const libraries[] = {"libc.so.6", "libdl.so.2"};
    for (size_t l = 0; l < sizeof libraries / sizeof libraries[0]; l++) {
        void *handle = dlopen(libraries[l], RTLD_LAZY | RTLD_NOLOAD);
        struct link_map *map = NULL;
        if (handle == NULL) continue;
        int found_map = dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != NULL;
        dlclose(handle); /* both stay loaded: the program and the shim need them */
        if (!found_map) continue;
        const ElfW(Sym) *symbols = NULL;
        const char *strings = NULL;
        const ElfW(Versym) *versions = NULL;
        const ElfW(Word) *hash = NULL;
        const uint32_t *gnu_hash = NULL;
        for (const ElfW(Dyn) *d = map->l_ld; d->d_tag != DT_NULL; d++) {
            /* glibc rebases these entries in place on most targets, not on all */
            ElfW(Addr) at = d->d_un.d_ptr;
            if (at < map->l_addr) at += map->l_addr;
            if (d->d_tag == DT_SYMTAB) symbols = (const ElfW(Sym) *)at;
            if (d->d_tag == DT_STRTAB) strings = (const char *)at;
            if (d->d_tag == DT_VERSYM) versions = (const ElfW(Versym) *)at;
            if (d->d_tag == DT_HASH) hash = (const ElfW(Word) *)at;
            if (d->d_tag == DT_GNU_HASH) gnu_hash = (const uint32_t *)at;
        }
        if (symbols == NULL || strings == NULL) continue;
        size_t count = symbol_count(hash, gnu_hash);
        for (size_t i = 0; i < count; i++) {
            const ElfW(Sym) *s = &symbols[i];
            if (s->st_shndx == SHN_UNDEF || ELF64_ST_TYPE(s->st_info) != STT_FUNC) continue;
            /* the hidden bit marks an older version of the name (dlsym@GLIBC_2.2.5) */
            if (versions != NULL && (versions[i] & 0x8000) != 0) continue;
            if (strcmp(strings + s->st_name, name) == 0) return (void *)(map->l_addr + s->st_value);
        }
    }
    return NULL;
}

/*
 * With glibc's dlsym in hand, the real functions are the next definitions after the shim
 * (RTLD_NEXT), so an interposer preloaded after the shim keeps its place.
 */
static void resolve_loader(void) {
    dlsym_fn glibc_dlsym = (dlsym_fn)glibc_function("dlsym");
    if (glibc_dlsym == NULL) {
        VS_LOG(VS_ERROR, "cannot find glibc's dlsym; symbol lookups fail");
        return;
    }
    real_dlvsym = (dlvsym_fn)glibc_dlsym(RTLD_NEXT, "dlvsym");
    real_dlmopen = (dlmopen_fn)glibc_dlsym(RTLD_NEXT, "dlmopen");
    real_dlsym = (dlsym_fn)glibc_dlsym(RTLD_NEXT, "dlsym");
}

static void resolve_library(enum vs_lib lib, const char *soname) {
    pthread_once(&loader_once, resolve_loader);
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

static void *own_loader_function(const char *name) {
    for (size_t i = 0; i < sizeof loader / sizeof loader[0]; i++)
        if (strcmp(loader[i].name, name) == 0) return loader[i].own;
    return NULL;
}

static int looks_hooked(const char *name) {
    return name != NULL && ((name[0] == 'c' && name[1] == 'u') ||
                            (name[0] == 'n' && strncmp(name, "nvml", 4) == 0) ||
                            (name[0] == 'd' && name[1] == 'l' && own_loader_function(name) != NULL));
}

/*
 * What a lookup by name found, exchanged for the shim's function of that name: the hook of a
 * driver or NVML entry point (when the real one could be resolved), or the shim's own loader
 * function. Only what the library really has is exchanged, so a lookup that finds nothing still
 * finds nothing.
 */
static void *answer(void *found, const char *symbol) {
    if (found == NULL) return NULL;
    void *own = own_loader_function(symbol);
    if (own != NULL) return own;
    const struct vs_hook_entry *entry = find_by_name(symbol);
    if (entry == NULL || found == entry->hook) return found;
    if (entry->lib == VS_LIB_CUDA)
        vs_cuda_ready();
    else
        vs_nvml_ready();
    return *entry->real != NULL ? entry->hook : found;
}

/*
 * dlsym() and dlvsym() interposition complements the above: programs that dlopen the driver and
 * look up cuGetProcAddress or an NVML function themselves get the hook, whatever version string
 * they ask dlvsym for. RTLD_NEXT lookups are passed on as a tail call, so glibc still sees the
 * original caller's return address.
 */
void *dlsym(void *restrict handle, const char *restrict symbol) {
    pthread_once(&loader_once, resolve_loader);
    if (handle == RTLD_NEXT || !looks_hooked(symbol)) return real_dlsym(handle, symbol);
    return answer(real_dlsym(handle, symbol), symbol);
}

void *dlvsym(void *restrict handle, const char *restrict symbol, const char *restrict version) {
    pthread_once(&loader_once, resolve_loader);
    if (handle == RTLD_NEXT || !looks_hooked(symbol)) return real_dlvsym(handle, symbol, version);
    return answer(real_dlvsym(handle, symbol, version), symbol);
}

/* "libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15", ... */
static int names_the_driver(const char *filename) {
    static const char *const sonames[] = {"libcuda.so", "libnvidia-ml.so"};
    if (filename == NULL) return 0;
    const char *base = strrchr(filename, '/');
    base = base != NULL ? base + 1 : filename;
    for (size_t i = 0; i < sizeof sonames / sizeof sonames[0]; i++) {
        size_t length = strlen(sonames[i]);
        if (strncmp(base, sonames[i], length) == 0 && (base[length] == '\0' || base[length] == '.'))
            return 1;
    }
    return 0;
}

/* Whether the driver's entry points can be reached through a handle: the driver itself, a copy
   of it under another name, or a library that depends on it. The lookups that find nothing
   leave an error behind, which is cleared: the program's dlmopen succeeded. */
static int reaches_the_driver(void *handle) {
    int reaches = real_dlsym(handle, "cuGetProcAddress") != NULL ||
                  real_dlsym(handle, "nvmlInit_v2") != NULL;
    (void)dlerror();
    return reaches;
}

/*
 * dlmopen() into any namespace but the base one starts a link map of its own, where
 * LD_PRELOAD and /etc/ld.so.preload are not loaded: a driver loaded there would be called
 * without the shim, and that namespace's own dlsym would hand out its functions. So the driver,
 * named by its soname or a path, is loaded into the base namespace instead (dlopen with the same
 * flags), behind the shim; and anything else that turns out to bring the driver along (a copy
 * under another name, a library linked against it) is unloaded again and loaded the same way.
 * Both dlopen calls are tail calls, so the caller's RUNPATH and $ORIGIN still decide the search;
 * the dlmopen of anything else cannot be one (its result is checked), so a name without a slash
 * is searched without the caller's RUNPATH there. Anything else keeps its namespace.
 */
void *dlmopen(Lmid_t lmid, const char *filename, int flags) {
    pthread_once(&loader_once, resolve_loader);
    if (lmid == LM_ID_BASE) return real_dlmopen(lmid, filename, flags);
    if (names_the_driver(filename)) return dlopen(filename, flags);
    void *handle = real_dlmopen(lmid, filename, flags);
    if (handle == NULL || !reaches_the_driver(handle)) return handle;
    VS_LOG(VS_INFO, "%s brings the GPU driver into a new link-map namespace; loaded into the base "
                    "namespace instead",
           filename);
    dlclose(handle);
    return dlopen(filename, flags);
}
