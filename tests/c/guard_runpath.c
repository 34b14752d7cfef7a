/* Linked with a DT_RUNPATH (or DT_RPATH) of $ORIGIN/sub, it dlopens a bare name that exists
 * only there: glibc finds it through the caller's search path, which a dlopen wrapper that
 * changed the caller would lose. The same source built as a library makes the call from a
 * library's search path instead of the executable's.
 *
 * Usage: guard_runpath deep|plain [LIBRARY]: with LIBRARY (guard_runpath.c built with -shared),
 * the call is made by that library. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int runpath_open(const char* mode) {
    int flags = RTLD_NOW | (strcmp(mode, "deep") == 0 ? RTLD_DEEPBIND : 0);
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

#ifndef RUNPATH_LIBRARY
int main(int argc, char** argv) {
    if (argc == 2) return runpath_open(argv[1]);
    if (argc != 3) return 2;
    void* lib = dlopen(argv[2], RTLD_NOW);
    int (*open_from_library)(const char*) =
        lib ? (int (*)(const char*))dlsym(lib, "runpath_open") : NULL;
    if (!open_from_library) {
        fprintf(stderr, "%s: %s\n", argv[2], dlerror());
        return 1;
    }
    return open_from_library(argv[1]);
}
#endif
