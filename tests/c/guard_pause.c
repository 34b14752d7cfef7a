/* rocmguard_pause under LD_PRELOAD on hipsim: a new allocation while paused is the runtime's,
 * everything the pool handed out stays the pool's, and pausing or resuming at any moment loses
 * nothing. Prints `key value` lines for tests/tests/guard_pause.rs; a broken invariant exits 1
 * with what failed. Argument `cap`: run under a 64 MiB cap, where a paused allocation past it
 * must be refused as an unpaused one is. */
#include "guard_common.h"

/* The shim's exports (weak: the program also runs without the shim, where they are NULL). */
extern int rocmguard_pause(int on) __attribute__((weak));
extern int rocmguard_pooled(const void* ptr, size_t* start, size_t* size) __attribute__((weak));

static size_t free_now(void) {
    size_t f = 0, t = 0;
    OK(hipMemGetInfo(&f, &t));
    return f;
}

static void fill(void* p, int value, size_t n) { OK(hipMemset(p, value, n)); }

/* Whether all n bytes at p read back as value. */
static int intact(void* p, int value, size_t n) {
    unsigned char* host = malloc(n);
    OK(hipMemcpy(host, p, n, hipMemcpyDeviceToHost));
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= host[i] == (unsigned char)value;
    free(host);
    return ok;
}

static void trim(void) {
    hipMemPool_t pool;
    OK(hipDeviceSynchronize());
    OK(hipDeviceGetDefaultMemPool(&pool, 0));
    OK(hipMemPoolTrimTo(pool, 0));
}

static int cap(void) {
    /* ROCMGUARD_VRAM_LIMIT=64MiB: 40 MiB pooled, then 40 MiB paused is past the cap. */
    void *a = NULL, *b = NULL, *c = NULL;
    OK(hipMalloc(&a, 40 * MiB));
    CHECK(rocmguard_pause(1) == 0, "pause");
    uint64_t calls = counters().allocs + counters().failed_allocs;
    printf("paused_past_cap %d\n", hipMalloc(&b, 40 * MiB));
    printf("paused_past_cap_last_error %d\n", hipGetLastError());
    printf("paused_past_cap_reached_runtime %d\n",
           counters().allocs + counters().failed_allocs != calls);
    OK(hipMalloc(&c, 20 * MiB)); /* within the cap: the runtime's */
    printf("paused_within_cap_pooled %d\n", rocmguard_pooled(c, NULL, NULL));
    printf("free_view_with_both %zu\n", free_now());
    OK(hipFree(c));
    OK(hipFree(a));
    CHECK(rocmguard_pause(0) == 1, "resume");
    return 0;
}

int main(int argc, char** argv) {
    CHECK(rocmguard_pause && rocmguard_pooled, "%s", "run under LD_PRELOAD=librocmguard.so");
    if (argc > 1 && strcmp(argv[1], "cap") == 0) return cap();
    if (argc > 1 && strcmp(argv[1], "state") == 0) {
        printf("pause_returns %d\n", rocmguard_pause(1));
        return 0;
    }
    const size_t na = 4 * MiB + 512, nb = 3 * MiB + 100;
    void* warm = NULL;
    OK(hipMalloc(&warm, MiB)); /* the pool exists before the figures are taken */
    OK(hipFree(warm));
    trim();
    struct hipsimCounters start = counters();
    size_t free_start = free_now();
    printf("device_live_start %lu\n", (unsigned long)start.live_bytes);

    /* A: pooled. */
    void *a = NULL, *b = NULL, *c = NULL;
    OK(hipMalloc(&a, na));
    size_t a_start = 0, a_size = 0;
    printf("a_pooled %d\n", rocmguard_pooled((char*)a + 100, &a_start, &a_size));
    printf("a_block_is_a %d\n", a_start == (size_t)a && a_size == na);
    fill(a, 0xa1, na);

    /* Paused: B is the runtime's, one allocation of exactly its size. */
    printf("pause_was %d\n", rocmguard_pause(1));
    printf("pause_again_was %d\n", rocmguard_pause(1));
    struct hipsimCounters before_b = counters();
    size_t free_before_b = free_now();
    OK(hipMalloc(&b, nb));
    struct hipsimCounters after_b = counters();
    printf("b_pooled %d\n", rocmguard_pooled(b, NULL, NULL));
    printf("b_runtime_allocs %lu\n", (unsigned long)(after_b.allocs - before_b.allocs));
    printf("b_runtime_bytes %lu\n", (unsigned long)(after_b.live_bytes - before_b.live_bytes));
    /* The capped view counts B (at least its size less from what is free). */
    printf("b_counted %d\n", free_before_b - free_now() >= nb);
    fill(b, 0xb2, nb);

    /* A freed while paused: back to the pool, not to the runtime. */
    struct hipsimCounters before_free_a = counters();
    printf("a_intact %d\n", intact(a, 0xa1, na));
    OK(hipFree(a));
    struct hipsimCounters after_free_a = counters();
    printf("free_a_runtime_frees %lu\n", (unsigned long)(after_free_a.frees - before_free_a.frees));
    printf("a_pooled_after_free %d\n", rocmguard_pooled(a, NULL, NULL));

    /* Resumed: C is pooled again; B, the runtime's, is freed by the runtime. */
    printf("resume_was %d\n", rocmguard_pause(0));
    OK(hipMalloc(&c, na));
    printf("c_pooled %d\n", rocmguard_pooled(c, NULL, NULL));
    printf("b_intact %d\n", intact(b, 0xb2, nb));
    struct hipsimCounters before_free_b = counters();
    printf("free_b %d\n", hipFree(b));
    printf("last_error %d\n", hipGetLastError());
    struct hipsimCounters after_free_b = counters();
    printf("free_b_runtime_frees %lu\n", (unsigned long)(after_free_b.frees - before_free_b.frees));
    printf("free_b_runtime_bytes %lu\n", (unsigned long)(before_free_b.live_bytes - after_free_b.live_bytes));
    OK(hipFree(c));

    /* Nothing lost: after a trim the device and the capped view are back where they began. */
    trim();
    printf("device_live_end %lu\n", (unsigned long)counters().live_bytes);
    printf("free_view_back %d\n", free_now() == free_start);
    return 0;
}
