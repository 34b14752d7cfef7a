/* hipMalloc+hipFree pairs the way a Python or other plugin host makes them: this program is not
 * linked to the runtime; it dlopens an extension that is (bench_pairs_ext_module.c, linked with
 * -lamdhip64), RTLD_LOCAL, and calls it once per pair. With the shim preloaded the extension's
 * calls reach the hooks through its own PLT. Prints the median nanoseconds per pair over 15
 * batches for 64 KiB pairs, then for 8 MiB pairs: "64KiB 8MiB".
 * Usage: bench_pairs_ext EXTENSION.so [PAIRS] */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int (*pair_fn)(size_t size);

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

/* The median over 15 batches of `pairs` pairs of `size` bytes, or -1 if one failed. */
static double median_ns(pair_fn pair, size_t size, int pairs) {
    double batch[15];
    for (int b = 0; b < 15; b++) {
        double start = now_ns();
        for (int i = 0; i < pairs; i++)
            if (pair(size) != 0) return -1;
        batch[b] = (now_ns() - start) / pairs;
    }
    qsort(batch, 15, sizeof batch[0], cmp);
    return batch[7];
}

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s EXTENSION.so [PAIRS]\n", argv[0]);
        return 2;
    }
    int pairs = argc > 2 ? atoi(argv[2]) : 200000;
    void* ext = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    pair_fn pair = ext ? (pair_fn)dlsym(ext, "bench_pair") : NULL;
    if (!pair) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    double small = median_ns(pair, 64 << 10, pairs), large = median_ns(pair, 8 << 20, pairs);
    if (small < 0 || large < 0) return 1;
    printf("%.1f %.1f\n", small, large);
    return 0;
}
