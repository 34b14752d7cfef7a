/* Linked with a DT_RUNPATH (or DT_RPATH) of $ORIGIN/sub, it dlopens a bare name that exists
 * only there: glibc finds it through the caller's search path, which a dlopen wrapper that
 * changed the caller would lose. Usage: guard_runpath deep|plain. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    int flags = RTLD_NOW | (strcmp(argv[1], "deep") == 0 ? RTLD_DEEPBIND : 0);
    void* lib = dlopen("libguard_runpath_dep.so", flags);
    if (!lib) {
        printf("loaded 0\n");
        fprintf(stderr, "%s\n", dlerror());
        return 0;
    }
    int (*f)(void) = (int (*)(void))dlsym(lib, "runpath_dep");
    printf("loaded 1\nvalue %d\n", f ? f() : -1);
    return 0;
}
