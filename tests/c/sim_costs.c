/* Times each driver call hipsim gives a cost (HIPSIM_COST_*): hipMalloc and hipFree of SIZE
 * bytes, then the virtual memory calls on SIZE bytes (rounded up to 2 MiB). Prints
 * `call microseconds rc` lines for tests/tests/hipsim.rs. Usage: sim_costs SIZE */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hip_subset.h"
#include "hip_vmm.h"


static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

#define TIMED(name, call)                                          \
    do {                                                           \
        double t0 = now_us();                                      \
        hipError_t rc_ = (call);                                   \
        printf("%s %.0f %d\n", name, now_us() - t0, (int)rc_);     \
    } while (0)

int main(int argc, char** argv) {
    size_t size = argc > 1 ? strtoull(argv[1], NULL, 0) : 0, granule = (size_t)2 << 20;
    size_t mapped = (size + granule - 1) / granule * granule;
    void* p = NULL;
    TIMED("malloc", hipMalloc(&p, size));
    TIMED("free", hipFree(p));

    Prop prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;          /* hipMemAllocationTypePinned */
    prop.location.type = 1; /* hipMemLocationTypeDevice */
    AccessDesc rw = {{1, 0}, 3};
    void* va = NULL;
    hipMemGenericAllocationHandle_t h = NULL;
    hipMemAddressReserve(&va, mapped, 0, NULL, 0);
    TIMED("create", hipMemCreate(&h, mapped, &prop, 0));
    TIMED("map", hipMemMap(va, mapped, 0, h, 0));
    TIMED("setaccess", hipMemSetAccess(va, mapped, &rw, 1));
    TIMED("unmap", hipMemUnmap(va, mapped));
    TIMED("release", hipMemRelease(h));
    hipMemAddressFree(va, mapped);
    return 0;
}
