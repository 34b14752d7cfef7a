/* The module guard_deepbind opens with RTLD_DEEPBIND: linked against the HIP runtime, so its
 * hipMalloc binds to the runtime ahead of anything preloaded unless the shim patches it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include "hip_subset.h"

int deepbind_probe_target(void) { return 1; }

/* 1 when the module's own deepbind_probe_target wins (RTLD_DEEPBIND), 0 for the program's. */
int deep_probe(void) { return deepbind_probe_target(); }

int deep_info(size_t* free_b, size_t* total) { return hipMemGetInfo(free_b, total); }

int deep_malloc(size_t bytes, void** p) { return hipMalloc(p, bytes); }

int deep_free(void* p) { return hipFree(p); }

/* hipMalloc found with dlsym on the runtime's handle, as bindings do. */
int deep_dlsym_malloc(size_t bytes) {
    void* hip = dlopen("libamdhip64.so.6", RTLD_NOW | RTLD_NOLOAD);
    if (!hip) return -1;
    hipError_t (*m)(void**, size_t) = (hipError_t(*)(void**, size_t))dlsym(hip, "hipMalloc");
    dlclose(hip);
    if (!m) return -1;
    void* p = 0;
    int e = m(&p, bytes);
    if (e == hipSuccess) hipFree(p);
    return e;
}

/* hipMalloc found with dlsym(RTLD_DEFAULT): from here the module's own dependencies come first. */
int deep_default_malloc(size_t bytes) {
    hipError_t (*m)(void**, size_t) =
        (hipError_t(*)(void**, size_t))dlsym(RTLD_DEFAULT, "hipMalloc");
    if (!m) return -1;
    void* p = 0;
    int e = m(&p, bytes);
    if (e == hipSuccess) hipFree(p);
    return e;
}

/* 1 when dlsym(RTLD_NEXT) still searches what follows this module (the runtime has hipMalloc),
 * as glibc does for its caller. */
int deep_next_found(void) { return dlsym(RTLD_NEXT, "hipMalloc") != NULL; }
