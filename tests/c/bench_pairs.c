/* hipMalloc+hipFree pairs of mixed sizes, timed: the median nanoseconds per pair over batches.
 * With a second argument `lasterror`: hipGetLastError calls instead, the median nanoseconds per
 * call (what a program with its own cache pays per kernel launch: PyTorch checks the last error
 * after every launch). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
