/* A program with no HIP link at all that dlopens a module (RTLD_LOCAL) which brings the runtime
 * in: the shim must find the real functions in that local copy. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stddef.h>

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    void* module = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!module) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    int (*past)(size_t, size_t*) = (int (*)(size_t, size_t*))dlsym(module, "module_alloc_past");
    size_t total = 0;
    int e = past((size_t)2 << 30, &total);
    printf("module %d\nmodule_total %zu\n", e, total);
    return 0;
}
