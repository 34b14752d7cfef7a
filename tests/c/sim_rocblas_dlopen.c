/* Loads the simulated rocBLAS the way Python extensions load libraries (dlopen, RTLD_LOCAL), with
 * nothing linked in: its NEEDED entry must bring the HIP runtime along. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

#include "hip_subset.h"
#include "hipsim.h"

int main(void) {
    void* blas = dlopen("librocblas.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!blas) {
        printf("dlopen error=%s\n", dlerror());
        return 1;
    }
    rocblas_status (*create)(rocblas_handle*) =
        (rocblas_status(*)(rocblas_handle*))dlsym(blas, "rocblas_create_handle");
    rocblas_handle h = NULL;
    rocblas_status st = create(&h);
    void* hip = dlopen("libamdhip64.so.6", RTLD_NOLOAD | RTLD_LAZY);
    void (*counters)(struct hipsimCounters*) =
        hip ? (void (*)(struct hipsimCounters*))dlsym(hip, "hipsimCounters") : NULL;
    struct hipsimCounters c = {0};
    if (counters) counters(&c);
    printf("dlopen status=%d handle=%d runtime_loaded=%d allocs=%llu\n", st, h != NULL, hip != NULL,
           (unsigned long long)c.allocs);
    return 0;
}
