/* trace_player: replays an allocation trace (RMM CSV on stdin: Thread,Time,Action,Pointer,Size,...)
 * as real hipMalloc/hipFree calls, the way the program that was recorded made them. It knows
 * nothing of rocmguard: run it with and without LD_PRELOAD=librocmguard.so to compare.
 *
 *   zcat data/traces/resnet_train.csv.gz | ./trace_player
 *
 * Prints the calls made, the failures, the peak of live bytes, and what the device itself saw
 * (where the runtime is hipsim, the simulator, which counts). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int hipError_t;
hipError_t hipMalloc(void** ptr, size_t size);
hipError_t hipFree(void* ptr);
hipError_t hipMemGetInfo(size_t* free, size_t* total);

/* Open addressing: trace pointer -> (device pointer, size). */
struct slot { uint64_t key; void* ptr; uint64_t size; };
static struct slot* table;
static size_t cap = 1 << 16, used;

static struct slot* find(uint64_t key) {
    size_t i = (key * 0x9E3779B97F4A7C15ull) >> 40 & (cap - 1);
    while (table[i].key && table[i].key != key) i = (i + 1) & (cap - 1);
    return &table[i];
}

static void grow(void) {
    struct slot* old = table;
    size_t n = cap;
    cap *= 2;
    table = calloc(cap, sizeof *table);
    for (size_t i = 0; i < n; i++)
        if (old[i].key) *find(old[i].key) = old[i];
    free(old);
}

static void erase(struct slot* s) {
    /* Backward-shift deletion keeps probe chains intact. */
    size_t i = s - table;
    s->key = 0;
    for (size_t j = (i + 1) & (cap - 1); table[j].key; j = (j + 1) & (cap - 1)) {
        struct slot moved = table[j];
        table[j].key = 0;
        *find(moved.key) = moved;
    }
    used--;
}

int main(void) {
    table = calloc(cap, sizeof *table);
    char line[1024];
    unsigned long allocs = 0, frees = 0, failed = 0;
    uint64_t live = 0, peak = 0;
    size_t free_b = 0, total_b = 0;
    hipMemGetInfo(&free_b, &total_b);
    printf("trace_player: device memory as the program sees it: %.2f GiB\n", total_b / 1073741824.0);
    while (fgets(line, sizeof line, stdin)) {
        char* f[6];
        int n = 0;
        for (char* p = strtok(line, ",\n"); p && n < 6; p = strtok(NULL, ",\n")) f[n++] = p;
        if (n < 5) continue;
        uint64_t key = strtoull(f[3], NULL, 16);
        uint64_t size = strtoull(f[4], NULL, 10);
        if (!strcmp(f[2], "allocate")) {
            if (2 * used >= cap) grow();
            void* p = NULL;
            allocs++;
            if (hipMalloc(&p, size) != 0) {
                failed++;
                continue;
            }
            struct slot* s = find(key);
            *s = (struct slot){key, p, size};
            used++;
            live += size;
            if (live > peak) peak = live;
        } else if (!strcmp(f[2], "free")) {
            struct slot* s = find(key);
            if (!s->key) continue;
            hipFree(s->ptr);
            frees++;
            live -= s->size;
            erase(s);
        }
    }
    printf("trace_player: %lu hipMalloc (%lu failed), %lu hipFree, peak live %.3f GiB\n", allocs,
           failed, frees, peak / 1073741824.0);
    struct { uint64_t allocs, frees, syncs, live_bytes, peak_bytes; } c;
    void (*counters)(void*) = (void (*)(void*))dlsym(RTLD_DEFAULT, "hipsimCounters");
    if (counters) {
        counters(&c);
        printf("trace_player: the (simulated) device saw %lu allocations, peak %.3f GiB in use\n",
               (unsigned long)c.allocs, c.peak_bytes / 1073741824.0);
    }
    return failed ? 1 : 0;
}
