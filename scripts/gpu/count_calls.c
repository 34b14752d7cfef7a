/* A counting interposer for the overhead benchmark (overhead.py): preloaded in front of
 * librocmguard.so (LD_PRELOAD=count_calls.so:librocmguard.so), it counts every call the program
 * makes to a CUDA runtime function that rocmguard hooks, then forwards it to the next definition
 * (rocmguard's hook). It answers "what does the shim do per step" with counts, not times.
 *
 * Forwarding without knowing each prototype: every function below takes at most six integer or
 * pointer arguments and returns an int, so on x86-64 System V its arguments are all in
 * registers; a wrapper taking six longs and passing them on hands the callee exactly what it got.
 *
 * Build: cc -O2 -shared -fPIC -o count_calls.so count_calls.c -ldl
 * Read: rocmguard_counts(names, counts, n) copies the names and counts (overhead.py via ctypes).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <string.h>

#define HOOKED(X)                                                                              \
    X(cudaMalloc) X(cudaFree) X(cudaMallocManaged) X(cudaMallocAsync)                          \
    X(cudaMallocFromPoolAsync) X(cudaFreeAsync) X(cudaMemPoolTrimTo) X(cudaMemGetInfo)         \
    X(cudaGetDeviceProperties) X(cudaGetDeviceProperties_v2) X(cudaDeviceSynchronize)          \
    X(cudaDeviceReset) X(cudaGetLastError) X(cudaPeekAtLastError) X(cudaStreamCreate)          \
    X(cudaStreamCreateWithFlags) X(cudaStreamCreateWithPriority) X(cudaDeviceEnablePeerAccess) \
    X(cudaStreamBeginCapture) X(cudaStreamEndCapture) X(cudaIpcGetMemHandle)                   \
    X(cudaIpcOpenMemHandle) X(cudaIpcCloseMemHandle) X(cudaGetDriverEntryPoint)                \
    X(cudaGetDriverEntryPointByVersion)

typedef int (*fn6)(long, long, long, long, long, long);

#define INDEX(name) IDX_##name,
enum { HOOKED(INDEX) COUNT };

static atomic_long counts[COUNT];
static const char *names[COUNT] = {
#define NAME(name) #name,
    HOOKED(NAME)
};

#define WRAP(name)                                                                   \
    int name(long a, long b, long c, long d, long e, long f) {                       \
        static fn6 next;                                                             \
        atomic_fetch_add_explicit(&counts[IDX_##name], 1, memory_order_relaxed);     \
        if (!next) next = (fn6)dlsym(RTLD_NEXT, #name);                              \
        return next ? next(a, b, c, d, e, f) : 500; /* cudaErrorSymbolNotFound */    \
    }
HOOKED(WRAP)

int rocmguard_counts(const char **out_names, long *out_counts, int n) {
    int i;
    for (i = 0; i < n && i < COUNT; i++) {
        out_names[i] = names[i];
        out_counts[i] = atomic_load(&counts[i]);
    }
    return COUNT;
}
