/* The capped view and refusal past the cap. Run with ROCMGUARD_VRAM_LIMIT=1GiB on a simulated
 * 16 GiB device; prints what it saw as `key value` lines for the test to assert on. */
#include "guard_common.h"

int main(void) {
    size_t free_b = 0, total_b = 0, dev_total = 0;
    OK(hipMemGetInfo(&free_b, &total_b));
    OK(hipDeviceTotalMem(&dev_total, 0));
    int attr = 0;
    OK(hipDeviceGetAttribute(&attr, hipDeviceAttributeTotalGlobalMem, 0));
    unsigned char props[HIPSIM_PROP_R0600_SIZE];
    OK(hipGetDevicePropertiesR0600(props, 0));
    size_t prop_total;
    memcpy(&prop_total, props + HIPSIM_PROP_TOTAL_GLOBAL_MEM, sizeof prop_total);
    printf("total %zu\nfree %zu\ndevice_total %zu\nattribute %d\nprops_total %zu\n", total_b, free_b,
           dev_total, attr, prop_total);

    void *a = NULL, *b = NULL, *c = NULL;
    OK(hipMalloc(&a, 600 * MiB));
    OK(hipMemGetInfo(&free_b, &total_b));
    printf("free_after_600MiB %zu\n", free_b);
    hipError_t e = hipMalloc(&b, 600 * MiB);
    printf("past_cap %d\n", e);
    CHECK(b == NULL || e == hipSuccess, "a refused allocation leaves the pointer NULL");
    hipError_t last = hipGetLastError();
    printf("last_error_after_refusal %d\n", last);
    last = hipGetLastError();
    printf("last_error_then %d\n", last);
    OK(hipFree(a));
    OK(hipMalloc(&c, 600 * MiB));
    printf("after_free %d\n", 0);
    OK(hipFree(c));
    return 0;
}
