/* A member of a ROCMGUARD_GROUP (tests/tests/guard_group.rs):
 *   guard_group hold BYTES   allocates BYTES, prints "held", then waits to be killed
 *   guard_group want BYTES   prints the capped free view and the code of a first try at BYTES,
 *                            prints "waiting", reads a line from stdin, then retries every 10 ms
 *                            for up to 3 s and prints "got CODE after_ms T" */
#include <time.h>
#include <unistd.h>
#include "guard_common.h"

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char** argv) {
    CHECK(argc == 3, "usage: guard_group hold|want BYTES");
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
