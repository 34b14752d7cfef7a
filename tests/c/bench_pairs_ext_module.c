/* The extension bench_pairs_ext.c dlopens: linked to the HIP runtime, one hipMalloc+hipFree
 * pair per call, as a framework's native module makes them. */
#include "hip_subset.h"

int bench_pair(size_t size) {
    void* p = NULL;
    if (hipMalloc(&p, size) != hipSuccess) return 1;
    return hipFree(p) != hipSuccess;
}
