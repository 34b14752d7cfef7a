/* hipMalloc+hipFree pairs of mixed sizes, timed: the median nanoseconds per pair over batches. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
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

int main(int argc, char** argv) {
    int pairs = argc > 1 ? atoi(argv[1]) : 200000;
    const size_t sizes[] = {512, 4096, 65536, 1 << 20, 3 << 20, 8 << 20};
    double batch[15];
    for (int b = 0; b < 15; b++) {
        double start = now_ns();
        for (int i = 0; i < pairs; i++) {
            void* p = NULL;
            if (hipMalloc(&p, sizes[i % 6]) != hipSuccess || hipFree(p) != hipSuccess) return 1;
        }
        batch[b] = (now_ns() - start) / pairs;
    }
    qsort(batch, 15, sizeof batch[0], cmp);
    printf("%.1f\n", batch[7]);
    return 0;
}
