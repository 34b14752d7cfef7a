/* A module linked against the HIP runtime, loaded by guard_lookup with dlopen(RTLD_LOCAL) the
 * way Python loads extensions: the runtime then is not in the global scope. */
#include "hip_subset.h"

int module_alloc_past(size_t bytes, size_t* total) {
    size_t free_b = 0;
    if (hipMemGetInfo(&free_b, total) != hipSuccess) return -1;
    void* p = 0;
    int e = hipMalloc(&p, bytes);
    if (e == hipSuccess) hipFree(p);
    return e;
}
