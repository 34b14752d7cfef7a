/* One scenario per argument, each printing `key value` lines; see tests/tests/guard.rs. */
#include <dirent.h>
#include <pthread.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>
#include "guard_common.h"

static int retry(void) {
    /* HIPSIM_FAIL_NTH=1 makes the first device allocation fail: the guard absorbs it. */
    void* p = NULL;
    hipError_t e = hipMalloc(&p, 8 * MiB);
    hipError_t last = hipGetLastError();
    printf("malloc %d\nlast_error %d\n", e, last);
    return hipFree(p);
}

static int sticky(void) {
    /* An error pending before a recovered allocation is still pending after it. */
    CHECK(hipSetDevice(99) != hipSuccess, "device 99 does not exist");
    void* p = NULL;
    hipError_t e = hipMalloc(&p, 8 * MiB);
    hipError_t first = hipGetLastError();
    hipError_t second = hipGetLastError();
    printf("malloc %d\nfirst %d\nsecond %d\n", e, first, second);
    return hipFree(p);
}

static int threshold(void) {
    /* ROCMGUARD_VRAM_LIMIT=1GiB, ROCMGUARD_TRIM_THRESHOLD=0.5. */
    void* p[8];
    for (int i = 0; i < 8; i++) OK(hipMalloc(&p[i], 100 * MiB));
    printf("device_live_full %lu\n", (unsigned long)counters().live_bytes);
    for (int i = 0; i < 8; i++) OK(hipFree(p[i]));
    OK(hipDeviceSynchronize());
    printf("device_live_after %lu\n", (unsigned long)counters().live_bytes);
    return 0;
}

static int pool_trim(void) {
    void* p = NULL;
    OK(hipMalloc(&p, 64 * MiB));
    OK(hipFree(p));
    printf("device_live_cached %lu\n", (unsigned long)counters().live_bytes);
    hipMemPool_t pool;
    OK(hipDeviceGetDefaultMemPool(&pool, 0));
    OK(hipMemPoolTrimTo(pool, 0));
    printf("device_live_trimmed %lu\n", (unsigned long)counters().live_bytes);
    return 0;
}

static int pooled(void) {
    /* 1000 pairs of the same size: the device sees a handful of allocations. */
    for (int i = 0; i < 1000; i++) {
        void* p = NULL;
        OK(hipMalloc(&p, 3 * MiB));
        OK(hipFree(p));
    }
    printf("device_allocs %lu\n", (unsigned long)counters().allocs);
    return 0;
}

static int capture(void) {
    /* ROCMGUARD_WARMUP=256MiB: a freed block waits in quarantine (the program has a stream);
     * an allocation during a capture must be served without the synchronize that would
     * invalidate the capture. */
    void *a = NULL, *b = NULL;
    hipStream_t s;
    OK(hipStreamCreate(&s));
    OK(hipMalloc(&a, 64 * MiB));
    OK(hipFree(a));
    OK(hipStreamBeginCapture(s, hipStreamCaptureModeGlobal));
    hipError_t e = hipMalloc(&b, 64 * MiB);
    hipGraph_t g = NULL;
    hipError_t end = hipStreamEndCapture(s, &g);
    printf("malloc_in_capture %d\nend_capture %d\ninvalidations %lu\n", e, end,
           (unsigned long)counters().capture_invalidations);
    if (g) hipGraphDestroy(g);
    OK(hipFree(b));
    return 0;
}

static int in_order(void) {
    /* All work on the null stream: a block freed while a slow kernel still writes it is handed
     * out again at once, without a synchronize; the kernel queued on it next runs after the
     * first, so the data is the second kernel's. */
    const size_t n = 4 * MiB;
    unsigned char* host = malloc(n);
    int bad = 0, same = 0;
    const int rounds = 5;
    unsigned long syncs = (unsigned long)counters().syncs;
    for (int round = 0; round < rounds; round++) {
        void *a = NULL, *b = NULL;
        OK(hipMalloc(&a, n));
        OK(hipsimLaunchFill(a, 0xAA, n, 20000, NULL));
        OK(hipFree(a));
        OK(hipMalloc(&b, n));
        same += a == b;
        OK(hipsimLaunchFill(b, 0x55, n, 0, NULL));
        OK(hipDeviceSynchronize());
        OK(hipMemcpy(host, b, n, hipMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) bad += host[i] != 0x55;
        OK(hipFree(b));
    }
    printf("same_address %d\ncorrupted_bytes %d\nsyncs_beyond_the_program_own %lu\n", same, bad,
           (unsigned long)counters().syncs - syncs - rounds);
    free(host);
    return 0;
}

static int first_stream(void) {
    /* A block freed in order while the null stream still writes it; then the program makes a
     * non-blocking stream, whose work does not wait for the null stream's. The block may go to
     * work on that stream only once the device has finished the old work. */
    const size_t n = 4 * MiB;
    unsigned char* host = malloc(n);
    void *a = NULL, *b = NULL;
    OK(hipMalloc(&a, n));
    OK(hipsimLaunchFill(a, 0xAA, n, 50000, NULL));
    OK(hipFree(a));
    hipStream_t side;
    OK(hipStreamCreateWithFlags(&side, hipStreamNonBlocking));
    OK(hipMalloc(&b, n));
    OK(hipsimLaunchFill(b, 0x55, n, 0, side));
    OK(hipDeviceSynchronize());
    OK(hipMemcpy(host, b, n, hipMemcpyDeviceToHost));
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += host[i] != 0x55;
    printf("same_address %d\ncorrupted_bytes %d\n", a == b, bad);
    free(host);
    return 0;
}

static int reuse(void) {
    /* A slow simulated kernel on a side stream writes into A; A is freed and at once a block of
     * the same size is allocated and written by the host. The kernel must not land on it, and
     * the block should be A itself (reused once the kernel is done), or nothing was tested. */
    const size_t n = 4 * MiB;
    unsigned char* host = malloc(n);
    hipStream_t side;
    OK(hipStreamCreateWithFlags(&side, hipStreamNonBlocking));
    int bad = 0, same = 0;
    for (int round = 0; round < 5; round++) {
        void *a = NULL, *b = NULL;
        OK(hipMalloc(&a, n));
        OK(hipsimLaunchFill(a, 0xAA, n, 20000, side));
        OK(hipFree(a));
        OK(hipMalloc(&b, n));
        same += a == b;
        memset(host, 0x55, n);
        OK(hipMemcpy(b, host, n, hipMemcpyHostToDevice));
        OK(hipDeviceSynchronize());
        OK(hipMemcpy(host, b, n, hipMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) bad += host[i] != 0x55;
        OK(hipFree(b));
    }
    printf("same_address %d\ncorrupted_bytes %d\n", same, bad);
    free(host);
    return 0;
}

struct worker { unsigned seed; int ops; int errors; };

static void* work(void* arg) {
    struct worker* w = arg;
    void* live[32] = {0};
    size_t sizes[32] = {0};
    unsigned x = w->seed;
    for (int i = 0; i < w->ops; i++) {
        x = x * 1103515245u + 12345u;
        int slot = (x >> 8) % 32;
        if (live[slot]) {
            unsigned char* p = live[slot];
            if (p[0] != (unsigned char)slot || p[sizes[slot] - 1] != (unsigned char)slot) w->errors++;
            if (hipFree(live[slot]) != hipSuccess) w->errors++;
            live[slot] = NULL;
        } else {
            size_t size = (x >> 4) % 7 == 0 ? 1 + (x % (6 * MiB)) : 1 + (x % 65536);
            if (hipMalloc(&live[slot], size) != hipSuccess) { w->errors++; continue; }
            sizes[slot] = size;
            unsigned char* p = live[slot];
            p[0] = p[size - 1] = (unsigned char)slot;
        }
    }
    for (int s = 0; s < 32; s++)
        if (live[s]) hipFree(live[s]);
    return NULL;
}

static int threads(void) {
    /* 16 threads x 100k mixed operations; each block is stamped at both ends and checked before
     * its free, so an overlap between threads shows up as a corrupted stamp. */
    pthread_t t[16];
    struct worker w[16];
    for (int i = 0; i < 16; i++) {
        w[i] = (struct worker){.seed = 7u + i, .ops = 100000, .errors = 0};
        pthread_create(&t[i], NULL, work, &w[i]);
    }
    int errors = 0;
    for (int i = 0; i < 16; i++) {
        pthread_join(t[i], NULL);
        errors += w[i].errors;
    }
    printf("thread_errors %d\n", errors);
    return 0;
}

static int forked(void) {
    void* p = NULL;
    OK(hipMalloc(&p, 8 * MiB));
    pid_t child = fork();
    if (child == 0) {
        void* q = NULL;
        hipError_t e = hipMalloc(&q, 8 * MiB);
        if (e == hipSuccess) e = hipFree(q);
        _exit(e == hipSuccess ? 0 : 10 + e);
    }
    int status = 0;
    waitpid(child, &status, 0);
    printf("child_exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status));
    void* q = NULL;
    OK(hipMalloc(&q, 8 * MiB));
    OK(hipFree(q));
    return hipFree(p);
}

static int live_at_exit(void) {
    for (int i = 0; i < 10; i++) {
        void* p = NULL;
        OK(hipMalloc(&p, (size_t)(i + 1) * MiB));
    }
    printf("exiting_with_live_blocks 1\n");
    return 0;
}

static int errors(void) {
    /* Codes the runtime returns reach the caller unchanged. */
    int local = 0;
    printf("free_bad %d\n", hipFree(&local));
    printf("free_null %d\n", hipFree(NULL));
    void* p = NULL;
    printf("malloc_zero %d\n", hipMalloc(&p, 0));
    printf("malloc_null_out %d\n", hipMalloc(NULL, 16));
    printf("meminfo_null %d\n", hipMemGetInfo(NULL, NULL));
    return 0;
}

static int workload(void) {
    /* A deterministic mix of sizes and lifetimes; prints its own counts and peak live bytes for
     * the trace round trip to compare with the replay of its recording. */
    void* live[64] = {0};
    size_t sizes[64] = {0};
    unsigned long allocs = 0, frees = 0, now = 0, peak = 0;
    unsigned x = 12345;
    for (int i = 0; i < 5000; i++) {
        x = x * 1103515245u + 12345u;
        int slot = (x >> 8) % 64;
        if (live[slot]) {
            OK(hipFree(live[slot]));
            live[slot] = NULL;
            now -= sizes[slot];
            frees++;
        } else {
            size_t size = (x >> 3) % 5 == 0 ? 1 + (x % (24 * MiB)) : 1 + (x % (256 * 1024));
            OK(hipMalloc(&live[slot], size));
            sizes[slot] = size;
            now += size;
            allocs++;
            if (now > peak) peak = now;
        }
    }
    printf("own_allocs %lu\nown_frees %lu\nown_peak_live %lu\n", allocs, frees, peak);
    return 0;
}

static int hold(void) {
    /* Holds 64 MiB until stdin closes, for `rocmguard stats` to look at. */
    void* p = NULL;
    OK(hipMalloc(&p, 64 * MiB));
    printf("ready 1\n");
    fflush(stdout);
    char buf[16];
    while (fread(buf, 1, sizeof buf, stdin) > 0) {
    }
    return hipFree(p);
}

/* Voluntary context switches of the reclaimer thread so far (its wake-ups), -1 without one. */
static long reclaimer_switches(void) {
    DIR* tasks = opendir("/proc/self/task");
    long found = -1;
    struct dirent* t;
    while (tasks && (t = readdir(tasks)) != NULL) {
        char path[300], line[256];
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", t->d_name);
        FILE* f = fopen(path, "r");
        int ours = f && fgets(line, sizeof line, f) && !strncmp(line, "rocmguard-recla", 15);
        if (f) fclose(f);
        if (!ours) continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/status", t->d_name);
        f = fopen(path, "r");
        while (f && fgets(line, sizeof line, f))
            if (sscanf(line, "voluntary_ctxt_switches: %ld", &found) == 1) break;
        if (f) fclose(f);
    }
    if (tasks) closedir(tasks);
    return found;
}

static int background(void) {
    /* A program with a stream of its own frees a block, then idles: the background reclaimer
     * synchronizes the device on its own (the simulator counts it), so the next allocation
     * needs no wait. While nothing waits it sleeps (its wake-ups over half a second idle), and
     * the next free still wakes it. */
    hipStream_t s;
    OK(hipStreamCreate(&s));
    void* p = NULL;
    OK(hipMalloc(&p, 64 * MiB));
    unsigned long before = (unsigned long)counters().syncs;
    OK(hipFree(p));
    struct timespec pause = {0, 300 * 1000 * 1000};
    nanosleep(&pause, NULL);
    printf("background_syncs %lu\n", (unsigned long)counters().syncs - before);
    long switches = reclaimer_switches();
    struct timespec idle = {0, 500 * 1000 * 1000};
    nanosleep(&idle, NULL);
    printf("idle_wakeups %ld\n", switches < 0 ? -1 : reclaimer_switches() - switches);
    OK(hipMalloc(&p, 64 * MiB));
    before = (unsigned long)counters().syncs;
    OK(hipFree(p));
    /* How long until it synchronizes on its own: the free wakes it, well inside its 5 s nap. */
    int waited_ms = 0;
    struct timespec tick = {0, 2 * 1000 * 1000};
    while ((unsigned long)counters().syncs == before && waited_ms < 1000) {
        nanosleep(&tick, NULL);
        waited_ms += 2;
    }
    printf("background_syncs_after_idle %lu\n", (unsigned long)counters().syncs - before);
    printf("wake_ms %d\n", waited_ms);
    return 0;
}

static int holes(void) {
    /* Two 100 MiB blocks freed side by side, then one of 200 MiB; then that freed and a 4 MiB
     * block taken from its space before a trim. Virtual segments serve the 200 MiB across the
     * two without the device and keep only the piece under the 4 MiB block; plain segments
     * need a new segment, and give it back for one of the 4 MiB block's own. */
    hipMemPool_t pool;
    OK(hipDeviceGetDefaultMemPool(&pool, 0));
    void *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    OK(hipMalloc(&a, 100 * MiB));
    OK(hipMalloc(&b, 100 * MiB));
    OK(hipFree(a));
    OK(hipFree(b));
    OK(hipDeviceSynchronize());
    uint64_t allocs = counters().allocs;
    OK(hipMalloc(&c, 200 * MiB));
    printf("span_device_allocs %lu\n", (unsigned long)(counters().allocs - allocs));
    OK(hipMemset(c, 0x5a, 200 * MiB));
    unsigned char probe[8192];
    OK(hipMemcpy(probe, (char*)c + 100 * MiB - 4096, sizeof probe, hipMemcpyDeviceToHost));
    int ok = 1;
    for (size_t i = 0; i < sizeof probe; i++) ok &= probe[i] == 0x5a;
    printf("span_data_ok %d\n", ok);
    OK(hipFree(c));
    OK(hipDeviceSynchronize());
    OK(hipMalloc(&d, 4 * MiB));
    OK(hipMemPoolTrimTo(pool, 0));
    printf("device_live_under_4mib %lu\n", (unsigned long)counters().live_bytes);
    OK(hipFree(d));
    return 0;
}

int main(int argc, char** argv) {
    CHECK(argc == 2, "usage: guard_ops SCENARIO");
    const char* s = argv[1];
    if (!strcmp(s, "retry")) return retry();
    if (!strcmp(s, "sticky")) return sticky();
    if (!strcmp(s, "threshold")) return threshold();
    if (!strcmp(s, "pool_trim")) return pool_trim();
    if (!strcmp(s, "pooled")) return pooled();
    if (!strcmp(s, "capture")) return capture();
    if (!strcmp(s, "reuse")) return reuse();
    if (!strcmp(s, "in_order")) return in_order();
    if (!strcmp(s, "first_stream")) return first_stream();
    if (!strcmp(s, "threads")) return threads();
    if (!strcmp(s, "fork")) return forked();
    if (!strcmp(s, "live_at_exit")) return live_at_exit();
    if (!strcmp(s, "errors")) return errors();
    if (!strcmp(s, "workload")) return workload();
    if (!strcmp(s, "hold")) return hold();
    if (!strcmp(s, "background")) return background();
    if (!strcmp(s, "holes")) return holes();
    fprintf(stderr, "unknown scenario %s\n", s);
    return 2;
}
