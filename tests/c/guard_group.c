/* A member of a ROCMGUARD_GROUP (tests/tests/guard_group.rs):
 *   guard_group hold BYTES   allocates BYTES, prints "held", then waits to be killed
 *   guard_group want BYTES   prints the capped free view and the code of a first try at BYTES,
 *                            prints "waiting", reads a line from stdin, then retries every 10 ms
 *                            for up to 3 s and prints "got CODE after_ms T"
 *   guard_group ctl          driven line by line on stdin, so a test can interleave members:
 *                            "alloc BYTES" -> "alloc CODE" (the block is kept), "free I" ->
 *                            "free CODE" (the I-th kept block; the last takes its place), "trim"
 *                            -> "trim CODE" (the pool's cache goes back), "info" -> "info FREE" */
#include <time.h>
#include <unistd.h>
#include "guard_common.h"

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int ctl(void) {
    static void* blocks[4096];
    size_t n = 0;
    char cmd[16];
    unsigned long long arg = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready\n");
    while (scanf("%15s", cmd) == 1) {
        if (!strcmp(cmd, "alloc")) {
            CHECK(scanf("%llu", &arg) == 1 && n < 4096, "alloc BYTES");
            void* p = NULL;
            hipError_t e = hipMalloc(&p, (size_t)arg);
            if (e == hipSuccess) blocks[n++] = p;
            printf("alloc %d\n", e);
        } else if (!strcmp(cmd, "free")) {
            CHECK(scanf("%llu", &arg) == 1 && arg < n, "free INDEX");
            hipError_t e = hipFree(blocks[arg]);
            blocks[arg] = blocks[--n];
            printf("free %d\n", e);
        } else if (!strcmp(cmd, "trim")) {
            hipMemPool_t pool = NULL;
            OK(hipDeviceGetDefaultMemPool(&pool, 0));
            printf("trim %d\n", hipMemPoolTrimTo(pool, 0));
        } else if (!strcmp(cmd, "info")) {
            size_t free_b = 0, total_b = 0;
            OK(hipMemGetInfo(&free_b, &total_b));
            printf("info %zu\n", free_b);
        } else {
            CHECK(0, "unknown command %s", cmd);
        }
    }
    return 0;
}

int main(int argc, char** argv) {
    if (argc == 2 && strcmp(argv[1], "ctl") == 0) return ctl();
    CHECK(argc == 3, "usage: guard_group hold|want BYTES | ctl");
    size_t bytes = strtoull(argv[2], NULL, 10);
    void* p = NULL;
    if (strcmp(argv[1], "hold") == 0) {
        OK(hipMalloc(&p, bytes));
        printf("held\n");
        fflush(stdout);
        for (;;) pause();
    }
    size_t free_b = 0, total_b = 0;
    OK(hipMemGetInfo(&free_b, &total_b));
    hipError_t first = hipMalloc(&p, bytes);
    printf("free %zu\ntotal %zu\nfirst %d\nwaiting\n", free_b, total_b, first);
    fflush(stdout);
    char line[16];
    CHECK(fgets(line, sizeof line, stdin) != NULL, "no go line");
    double start = now_ms();
    hipError_t e = hipErrorOutOfMemory;
    while (now_ms() - start < 3000 && (e = hipMalloc(&p, bytes)) != hipSuccess) usleep(10000);
    printf("got %d after_ms %.0f\n", e, now_ms() - start);
    return 0;
}
