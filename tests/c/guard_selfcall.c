/* What a program sees under LD_PRELOAD=librocmguard.so on a runtime that calls its own exports
 * through the dynamic linker (HIPSIM_SELF_CALLS=1: hipMallocManaged and the pitched calls over
 * hipMalloc, hipFree's synchronize over hipDeviceSynchronize, host<->device copies staged through
 * hipMalloc/hipFree). Run under ROCMGUARD_VRAM_LIMIT=256MiB; tests/tests/guard_selfcall.rs
 * asserts that every line reads the same with and without the setting. Prints `key value`. */
#include "guard_common.h"

hipError_t hipMallocManaged(void** ptr, size_t size, unsigned int flags);
hipError_t hipMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height);

extern int rocmguard_pooled(const void* ptr, size_t* start, size_t* size) __attribute__((weak));

/* What the capped view says is free. */
static size_t free_now(void) {
    size_t f = 0, t = 0;
    OK(hipMemGetInfo(&f, &t));
    return f;
}

/* Writes `value` over n bytes at p from the host, reads them back, says whether they match. */
static int round_trip(void* p, int value, size_t n) {
    unsigned char* host = malloc(n);
    memset(host, value, n);
    OK(hipMemcpy(p, host, n, hipMemcpyHostToDevice));
    memset(host, 0, n);
    OK(hipMemcpy(host, p, n, hipMemcpyDeviceToHost));
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= host[i] == (unsigned char)value;
    free(host);
    return ok;
}

int main(void) {
    CHECK(rocmguard_pooled != NULL, "%s", "run under LD_PRELOAD=librocmguard.so");
    size_t free0 = free_now();
    printf("free_start %zu\n", free0);

    /* Managed memory: counted once against the cap, whatever the runtime does inside. */
    void* m = NULL;
    OK(hipMallocManaged(&m, 64 * MiB, hipMemAttachGlobal));
    printf("managed_counted %zu\n", free0 - free_now());
    printf("managed_round_trip %d\n", round_trip(m, 0x5A, 64 * MiB));
    OK(hipFree(m));
    printf("managed_freed_view_back %d\n", free_now() == free0);

    /* A pitched allocation: counted once. */
    void* p = NULL;
    size_t pitch = 0;
    OK(hipMallocPitch(&p, &pitch, 1000, 1000));
    printf("pitch %zu\n", pitch);
    printf("pitch_counted %zu\n", free0 - free_now());
    OK(hipFree(p));
    printf("pitch_freed_view_back %d\n", free_now() == free0);

    /* Copies staged through the runtime's own buffers leave nothing counted behind. */
    void* d = NULL;
    OK(hipMalloc(&d, 32 * MiB));
    size_t with_d = free_now();
    printf("copy_round_trip %d\n", round_trip(d, 0xC3, 32 * MiB));
    printf("copies_left_counted %zu\n", with_d - free_now());

    /* hipFree's synchronize: a queued fill lands before the memory goes. */
    void* f = NULL;
    OK(hipMalloc(&f, 4 * MiB));
    OK(hipsimLaunchFill(f, 0x11, 4 * MiB, 20000, NULL));
    OK(hipFree(f));
    printf("dropped_fills %llu\n", (unsigned long long)counters().dropped_fills);

    /* The cap: 32 MiB held, 180 MiB more fits, then 40 MiB of managed memory is 4 MiB past the
     * 256 MiB cap only if something counts twice; 60 MiB is past it either way. */
    void *big = NULL, *m40 = NULL, *m60 = NULL;
    OK(hipMalloc(&big, 180 * MiB));
    printf("managed_past_cap %d\n", hipMallocManaged(&m60, 60 * MiB, hipMemAttachGlobal));
    (void)hipGetLastError();
    printf("managed_within_cap %d\n", hipMallocManaged(&m40, 40 * MiB, hipMemAttachGlobal));
    (void)hipGetLastError();
    if (m40) OK(hipFree(m40));
    printf("copy_near_cap %d\n", round_trip(d, 0x3C, 32 * MiB));
    OK(hipFree(big));
    OK(hipFree(d));
    printf("view_back_at_end %d\n", free_now() == free0);

    /* A trim gives the pool's memory back to the runtime, whose hipFree synchronizes. */
    hipMemPool_t pool;
    OK(hipDeviceSynchronize());
    OK(hipDeviceGetDefaultMemPool(&pool, 0));
    OK(hipMemPoolTrimTo(pool, 0));
    printf("runtime_live_after_trim %llu\n", (unsigned long long)counters().live_bytes);
    printf("last_error %d\n", hipGetLastError());
    return 0;
}
