/* rocblas_create_handle allocates its workspace through hipMalloc (the preloaded one, if any)
 * and fails cleanly when that allocation fails. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

#include "hip_subset.h"
#include "hipsim.h"

int main(void) {
    int (*interposer_calls)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "sim_interposer_calls");
    rocblas_handle sentinel = (rocblas_handle)&sentinel;
    rocblas_handle h = sentinel;
    rocblas_status st = rocblas_create_handle(&h);
    struct hipsimCounters c;
    hipsimCounters(&c);
    printf("create status=%d untouched=%d null=%d live_bytes=%llu last=%d interposed=%d\n", st,
           h == sentinel, h == NULL, (unsigned long long)c.live_bytes, hipGetLastError(),
           interposer_calls ? interposer_calls() : 0);
    if (st == rocblas_status_success) {
        st = rocblas_destroy_handle(h);
        hipsimCounters(&c);
        printf("destroy status=%d live_bytes=%llu\n", st, (unsigned long long)c.live_bytes);
    }
    printf("null status=%d\n", rocblas_create_handle(NULL));
    return 0;
}
