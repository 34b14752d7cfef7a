/* A stand-in for an interposing library (built with -shared and preloaded): its hipMalloc counts
 * calls and forwards to the next definition. Tests use it to see which calls reach a preloaded
 * hipMalloc and which bypass it (hipGetProcAddress must). */
#define _GNU_SOURCE
#include <dlfcn.h>

#include "hip_subset.h"

static int calls;

int sim_interposer_calls(void) { return calls; }

hipError_t hipMalloc(void** ptr, size_t size) {
    static hipError_t (*next)(void**, size_t);
    if (!next) next = (hipError_t(*)(void**, size_t))dlsym(RTLD_NEXT, "hipMalloc");
    calls++;
    return next ? next(ptr, size) : hipErrorNotSupported;
}
