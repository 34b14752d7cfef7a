/* Calls that bypass the program's own symbol binding: hipGetProcAddress, dlsym on a handle of
 * the runtime, and a dlopened RTLD_LOCAL module. Run with ROCMGUARD_VRAM_LIMIT=1GiB on a 16 GiB
 * simulated device: a 2 GiB request succeeds only where the guard was bypassed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include "guard_common.h"

typedef hipError_t (*malloc_fn)(void**, size_t);
typedef hipError_t (*free_fn)(void*);

static hipError_t try_2gib(malloc_fn m, free_fn f) {
    void* p = NULL;
    hipError_t e = m(&p, 2 * GiB);
    if (e == hipSuccess) f(p);
    return e;
}

int main(int argc, char** argv) {
    CHECK(argc == 2, "usage: guard_lookup MODULE_PATH");
    void* fn = NULL;
    OK(hipGetProcAddress("hipMalloc", &fn, 600, 0, NULL));
    printf("proc_address %d\n", try_2gib((malloc_fn)fn, hipFree));

    void* runtime = dlopen("libamdhip64.so.6", RTLD_NOW | RTLD_LOCAL);
    CHECK(runtime != NULL, "%s", dlerror());
    malloc_fn m = (malloc_fn)dlsym(runtime, "hipMalloc");
    free_fn f = (free_fn)dlsym(runtime, "hipFree");
    printf("dlsym_handle %d\n", try_2gib(m, f));

    void* module = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    CHECK(module != NULL, "%s", dlerror());
    int (*past)(size_t, size_t*) = (int (*)(size_t, size_t*))dlsym(module, "module_alloc_past");
    size_t total = 0;
    int e = past(2 * GiB, &total);
    printf("module %d\nmodule_total %zu\n", e, total);
    return 0;
}
