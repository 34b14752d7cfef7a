/* hipMalloc+hipFree pairs of mixed sizes, timed: the median nanoseconds per pair over batches.
 * With a second argument `lasterror`: hipGetLastError calls instead, the median nanoseconds per
 * call (what a program with its own cache pays per kernel launch: PyTorch checks the last error
 * after every launch). With `idle`: a stream made, a block allocated and freed, then the
 * milliseconds of CPU the process spends and its voluntary context switches (threads waking)
 * over 2 s of sleep: what the shim's background threads cost a program that waits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include "hip_subset.h"

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

static double cpu_ms(const struct rusage* u) {
    return (u->ru_utime.tv_sec + u->ru_stime.tv_sec) * 1e3 +
           (u->ru_utime.tv_usec + u->ru_stime.tv_usec) / 1e3;
}

static int idle(void) {
    hipStream_t s;
    void* p = NULL;
    if (hipStreamCreate(&s) != hipSuccess || hipMalloc(&p, 1 << 20) != hipSuccess ||
        hipFree(p) != hipSuccess)
        return 1;
    struct rusage a, b;
    getrusage(RUSAGE_SELF, &a);
    struct timespec two = {2, 0};
    nanosleep(&two, NULL);
    getrusage(RUSAGE_SELF, &b);
    printf("%.1f %ld\n", cpu_ms(&b) - cpu_ms(&a), b.ru_nvcsw - a.ru_nvcsw);
    return 0;
}

int main(int argc, char** argv) {
    if (argc > 1 && strcmp(argv[1], "idle") == 0) return idle();
    int pairs = argc > 1 ? atoi(argv[1]) : 200000;
    int lasterror = argc > 2 && strcmp(argv[2], "lasterror") == 0;
    const size_t sizes[] = {512, 4096, 65536, 1 << 20, 3 << 20, 8 << 20};
    double batch[15];
    for (int b = 0; b < 15; b++) {
        double start = now_ns();
        for (int i = 0; i < pairs; i++) {
            if (lasterror) {
                if (hipGetLastError() != hipSuccess) return 1;
                continue;
            }
            void* p = NULL;
            if (hipMalloc(&p, sizes[i % 6]) != hipSuccess || hipFree(p) != hipSuccess) return 1;
        }
        batch[b] = (now_ns() - start) / pairs;
    }
    qsort(batch, 15, sizeof batch[0], cmp);
    printf("%.1f\n", batch[7]);
    return 0;
}
