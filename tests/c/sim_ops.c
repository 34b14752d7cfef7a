/* Runs HIP calls named on the command line against the simulated runtime and prints one line
 * per call, "<op> rc=<code> [key=value ...]", for tests/tests/hipsim.rs to assert on.
 *
 * Allocations (SIZE in bytes) append their pointer to a list that later ops index (I):
 *   malloc:SIZE ext:SIZE managed:SIZE async:SIZE pool:SIZE   free:I freeasync:I
 * Queries: info  total:DEV  attr:ATTR  props  count  setdev:DEV  last  peek  counters
 * Streams and capture: stream  begin:MODE  end  capturing  streamsync  mode:MODE  sync  reset
 * Pools: trim    Errors: errname:CODE */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hip_subset.h"
#include "hipsim.h"

static void* ptrs[4096];
static int nptrs;
static hipStream_t stream;

static void print_counters(void) {
    struct hipsimCounters c;
    hipsimCounters(&c);
    printf("counters allocs=%llu frees=%llu syncs=%llu live_bytes=%llu peak_bytes=%llu "
           "mempool_trims=%llu capture_invalidations=%llu failed_allocs=%llu live_allocs=%llu "
           "stream_syncs=%llu fills=%llu dropped_fills=%llu\n",
           (unsigned long long)c.allocs, (unsigned long long)c.frees,
           (unsigned long long)c.syncs, (unsigned long long)c.live_bytes,
           (unsigned long long)c.peak_bytes, (unsigned long long)c.mempool_trims,
           (unsigned long long)c.capture_invalidations, (unsigned long long)c.failed_allocs,
           (unsigned long long)c.live_allocs, (unsigned long long)c.stream_syncs,
           (unsigned long long)c.fills, (unsigned long long)c.dropped_fills);
}

static void* nth(const char* arg) {
    int i = atoi(arg);
    if (i < 0 || i >= nptrs) {
        fprintf(stderr, "sim_ops: no allocation #%d\n", i);
        exit(2);
    }
    return ptrs[i];
}

static void alloc_done(const char* op, hipError_t rc, void* p) {
    if (nptrs < (int)(sizeof ptrs / sizeof ptrs[0])) ptrs[nptrs++] = p;
    int aligned2m = ((uintptr_t)p & ((2u << 20) - 1)) == 0;
    printf("%s rc=%d ptr=%p aligned2m=%d\n", op, rc, p, aligned2m);
}

int main(int argc, char** argv) {
    hipMemPool_t pool = NULL;
    for (int a = 1; a < argc; a++) {
        const char* op = argv[a];
        const char* colon = strchr(op, ':');
        const char* arg = colon ? colon + 1 : "";
        size_t name_len = colon ? (size_t)(colon - op) : strlen(op);
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)name_len, op);
        unsigned long long n = strtoull(arg, NULL, 0);
        void* p = NULL;
        hipError_t rc;

        if (!strcmp(name, "malloc")) {
            rc = hipMalloc(&p, n);
            alloc_done(op, rc, p);
        } else if (!strcmp(name, "ext")) {
            rc = hipExtMallocWithFlags(&p, n, 0);
            alloc_done(op, rc, p);
        } else if (!strcmp(name, "managed")) {
            rc = hipMallocManaged(&p, n, hipMemAttachGlobal);
            alloc_done(op, rc, p);
        } else if (!strcmp(name, "async")) {
            rc = hipMallocAsync(&p, n, stream);
            alloc_done(op, rc, p);
        } else if (!strcmp(name, "pool")) {
            if (!pool) hipDeviceGetDefaultMemPool(&pool, 0);
            rc = hipMallocFromPoolAsync(&p, n, pool, stream);
            alloc_done(op, rc, p);
        } else if (!strcmp(name, "free")) {
            printf("%s rc=%d\n", op, hipFree(nth(arg)));
        } else if (!strcmp(name, "freeasync")) {
            printf("%s rc=%d\n", op, hipFreeAsync(nth(arg), stream));
        } else if (!strcmp(name, "info")) {
            size_t free_b = 0, total_b = 0;
            rc = hipMemGetInfo(&free_b, &total_b);
            printf("%s rc=%d free=%zu total=%zu\n", op, rc, free_b, total_b);
        } else if (!strcmp(name, "total")) {
            size_t total_b = 0;
            rc = hipDeviceTotalMem(&total_b, (int)n);
            printf("%s rc=%d total=%zu\n", op, rc, total_b);
        } else if (!strcmp(name, "attr")) {
            int v = -1;
            rc = hipDeviceGetAttribute(&v, (int)n, 0);
            printf("%s rc=%d value=%d\n", op, rc, v);
        } else if (!strcmp(name, "props")) {
            static unsigned char prop[HIPSIM_PROP_R0600_SIZE + 64];
            memset(prop, 0x5a, sizeof prop);
            rc = hipGetDevicePropertiesR0600(prop, 0);
            size_t total_b;
            int integrated;
            memcpy(&total_b, prop + HIPSIM_PROP_TOTAL_GLOBAL_MEM, sizeof total_b);
            memcpy(&integrated, prop + HIPSIM_PROP_INTEGRATED, sizeof integrated);
            /* Names print with '_' for ' ' so every value is one token. */
            char dev_name[257], arch[257];
            memcpy(dev_name, prop + HIPSIM_PROP_NAME, 256);
            memcpy(arch, prop + HIPSIM_PROP_GCN_ARCH_NAME, 256);
            dev_name[256] = arch[256] = 0;
            for (char* c = dev_name; *c; c++) if (*c == ' ') *c = '_';
            printf("%s rc=%d name=%s arch=%s total=%zu integrated=%d past_end_untouched=%d\n", op,
                   rc, dev_name, arch, total_b, integrated,
                   prop[HIPSIM_PROP_R0600_SIZE] == 0x5a);
        } else if (!strcmp(name, "count")) {
            int c = -1;
            rc = hipGetDeviceCount(&c);
            printf("%s rc=%d count=%d\n", op, rc, c);
        } else if (!strcmp(name, "setdev")) {
            printf("%s rc=%d\n", op, hipSetDevice((int)n));
        } else if (!strcmp(name, "last")) {
            printf("%s rc=%d\n", op, hipGetLastError());
        } else if (!strcmp(name, "peek")) {
            printf("%s rc=%d\n", op, hipPeekAtLastError());
        } else if (!strcmp(name, "counters")) {
            print_counters();
        } else if (!strcmp(name, "stream")) {
            rc = hipStreamCreate(&stream);
            printf("%s rc=%d\n", op, rc);
        } else if (!strcmp(name, "begin")) {
            printf("%s rc=%d\n", op, hipStreamBeginCapture(stream, (int)n));
        } else if (!strcmp(name, "end")) {
            hipGraph_t graph = (hipGraph_t)&graph;
            rc = hipStreamEndCapture(stream, &graph);
            printf("%s rc=%d graph_null=%d\n", op, rc, graph == NULL);
            if (rc == hipSuccess) hipGraphDestroy(graph);
        } else if (!strcmp(name, "capturing")) {
            int status = -1;
            rc = hipStreamIsCapturing(stream, &status);
            printf("%s rc=%d status=%d\n", op, rc, status);
        } else if (!strcmp(name, "streamsync")) {
            printf("%s rc=%d\n", op, hipStreamSynchronize(stream));
        } else if (!strcmp(name, "mode")) {
            int mode = (int)n;
            rc = hipThreadExchangeStreamCaptureMode(&mode);
            printf("%s rc=%d previous=%d\n", op, rc, mode);
        } else if (!strcmp(name, "sync")) {
            printf("%s rc=%d\n", op, hipDeviceSynchronize());
        } else if (!strcmp(name, "reset")) {
            printf("%s rc=%d\n", op, hipDeviceReset());
        } else if (!strcmp(name, "trim")) {
            if (!pool) hipDeviceGetDefaultMemPool(&pool, 0);
            printf("%s rc=%d\n", op, hipMemPoolTrimTo(pool, 0));
        } else if (!strcmp(name, "errname")) {
            char text[256];
            snprintf(text, sizeof text, "%s", hipGetErrorString((hipError_t)n));
            for (char* c = text; *c; c++) if (*c == ' ') *c = '_';
            printf("%s rc=0 name=%s string=%s\n", op, hipGetErrorName((hipError_t)n), text);
        } else {
            fprintf(stderr, "sim_ops: unknown op %s\n", op);
            return 2;
        }
    }
    return 0;
}
