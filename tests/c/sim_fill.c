/* Simulated kernels (hipsimLaunchFill) against the calls that must wait for them: prints what
 * memory held at each point and the counters. */
#include <stdio.h>
#include <string.h>

#include "hip_subset.h"
#include "hipsim.h"

#define MIB (1u << 20)
#define DELAY_US 500000u

static struct hipsimCounters counters(void) {
    struct hipsimCounters c;
    hipsimCounters(&c);
    return c;
}

int main(void) {
    hipStream_t s, other;
    hipStreamCreate(&s);
    hipStreamCreate(&other);

    /* Queued work runs later; hipStreamSynchronize waits for it. */
    unsigned char* a = NULL;
    hipMalloc((void**)&a, MIB);
    hipError_t rc = hipsimLaunchFill(a, 0xab, MIB, DELAY_US, s);
    int before = a[0];
    hipError_t sync_rc = hipStreamSynchronize(s);
    printf("stream rc=%d sync_rc=%d before=%d after_first=%d after_last=%d\n", rc, sync_rc, before,
           a[0], a[MIB - 1]);

    /* hipFree waits for the device's queued work (implicit synchronize) before unmapping. */
    unsigned char* b = NULL;
    hipMalloc((void**)&b, MIB);
    hipsimLaunchFill(b, 0x11, MIB, DELAY_US, s);
    struct hipsimCounters c0 = counters();
    hipError_t free_rc = hipFree(b);
    struct hipsimCounters c1 = counters();
    printf("free rc=%d fills_before=%llu fills_after=%llu syncs_added=%llu dropped=%llu\n", free_rc,
           (unsigned long long)c0.fills, (unsigned long long)c1.fills,
           (unsigned long long)(c1.syncs - c0.syncs), (unsigned long long)c1.dropped_fills);

    /* A copy on the null stream waits for earlier work of blocking streams. */
    unsigned char host[16] = {0};
    hipsimLaunchFill(a, 0xcd, MIB, DELAY_US, s);
    rc = hipMemcpy(host, a, sizeof host, hipMemcpyDeviceToHost);
    printf("memcpy rc=%d host=%d\n", rc, host[0]);

    /* hipFreeAsync is ordered after the stream's earlier work. */
    unsigned char* d = NULL;
    hipMalloc((void**)&d, MIB);
    hipsimLaunchFill(d, 0x22, MIB, DELAY_US, s);
    c0 = counters();
    rc = hipFreeAsync(d, s);
    c1 = counters();
    hipStreamSynchronize(s);
    struct hipsimCounters c2 = counters();
    printf("freeasync rc=%d live_before=%llu live_queued=%llu live_synced=%llu fills_added=%llu "
           "dropped=%llu\n",
           rc, (unsigned long long)c0.live_allocs, (unsigned long long)c1.live_allocs,
           (unsigned long long)c2.live_allocs, (unsigned long long)(c2.fills - c0.fills),
           (unsigned long long)c2.dropped_fills);

    /* Work on one stream whose memory another stream frees first is dropped, not a crash. */
    unsigned char* e = NULL;
    hipMalloc((void**)&e, MIB);
    hipsimLaunchFill(e, 0x33, MIB, DELAY_US, other);
    hipFreeAsync(e, s);
    hipStreamSynchronize(other);
    printf("dropped rc=%d dropped=%llu\n", hipStreamSynchronize(s),
           (unsigned long long)counters().dropped_fills);

    /* Launching on memory that is not allocated is refused. */
    unsigned char stack[64];
    printf("invalid rc=%d\n", hipsimLaunchFill(stack, 0, sizeof stack, 0, s));
    return 0;
}
