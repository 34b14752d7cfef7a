/* A stand-in for an interposing library (built with -shared and preloaded): its hipMalloc,
 * hipFree and hipDeviceSynchronize count calls and forward to the next definition. Tests use it
 * to see which calls reach a preloaded library and which bypass it (hipGetProcAddress must; the
 * runtime's calls to itself do only under HIPSIM_SELF_CALLS=1). */
#define _GNU_SOURCE
#include <dlfcn.h>

#include "hip_subset.h"

static int mallocs, frees, syncs;

int sim_interposer_calls(void) { return mallocs; }

void sim_interposer_counts(int* malloc_calls, int* free_calls, int* sync_calls) {
    *malloc_calls = mallocs;
    *free_calls = frees;
    *sync_calls = syncs;
}

hipError_t hipMalloc(void** ptr, size_t size) {
    static hipError_t (*next)(void**, size_t);
    if (!next) next = (hipError_t(*)(void**, size_t))dlsym(RTLD_NEXT, "hipMalloc");
    mallocs++;
    return next ? next(ptr, size) : hipErrorNotSupported;
}

hipError_t hipFree(void* ptr) {
    static hipError_t (*next)(void*);
    if (!next) next = (hipError_t(*)(void*))dlsym(RTLD_NEXT, "hipFree");
    frees++;
    return next ? next(ptr) : hipErrorNotSupported;
}

hipError_t hipDeviceSynchronize(void) {
    static hipError_t (*next)(void);
    if (!next) next = (hipError_t(*)(void))dlsym(RTLD_NEXT, "hipDeviceSynchronize");
    syncs++;
    return next ? next() : hipErrorNotSupported;
}
