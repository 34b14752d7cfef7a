// Times the device memory calls an allocator makes, by size, on the current GPU: the plain pair
// (cudaMalloc/cudaFree) and the virtual memory calls (cuMemAddressReserve, cuMemCreate,
// cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree: the CUDA twins of
// hipMem*), each call timed alone, the median of many repetitions. A `granules` row maps the
// same size as 2 MiB handles (one create, map, unmap and release per granule, one access call
// for the range), what a pool that returns memory granule by granule pays instead.
//
// Why: the replay judges a pool design by driver calls; a call's cost depends on its size and
// kind, so the replay and hipsim's latency knobs need these figures (issue 24 item 3).
//
// Build and run: nvcc -O2 -o driver_cost driver_cost.cu -lcuda && ./driver_cost > driver_cost.csv
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#define CHECK_RT(x) check((x) == cudaSuccess, #x, __LINE__)
#define CHECK_DRV(x) check((x) == CUDA_SUCCESS, #x, __LINE__)

static void check(bool ok, const char* what, int line) {
    if (!ok) {
        fprintf(stderr, "driver_cost: %s failed (line %d)\n", what, line);
        exit(1);
    }
}

static double now_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Samples {
    std::vector<double> v;
    double pct(double p) {
        std::sort(v.begin(), v.end());
        return v[std::min(v.size() - 1, (size_t)(p * (v.size() - 1) + 0.5))];
    }
};

static std::string g_device, g_date;
static int g_driver;

static void emit(const char* op, size_t size, Samples& s) {
    printf("%s,%s,%d,%s,%zu,%zu,%.2f,%.2f,%.2f\n", g_device.c_str(), g_date.c_str(), g_driver, op, size, s.v.size(),
           s.pct(0.5), s.pct(0.1), s.pct(0.9));
    fflush(stdout);
}

#define TIMED(samples, call)         \
    do {                             \
        double t0_ = now_us();       \
        call;                        \
        samples.v.push_back(now_us() - t0_); \
    } while (0)

static void plain(size_t size, int reps) {
    Samples m, f;
    for (int i = 0; i < reps + 3; i++) {
        void* p = nullptr;
        CHECK_RT(cudaDeviceSynchronize());
        Samples wm, wf;  // the first three warm up
        Samples& mm = i < 3 ? wm : m;
        Samples& ff = i < 3 ? wf : f;
        TIMED(mm, CHECK_RT(cudaMalloc(&p, size)));
        TIMED(ff, CHECK_RT(cudaFree(p)));
    }
    emit("cudaMalloc", size, m);
    emit("cudaFree", size, f);
}

static CUmemAllocationProp device_prop() {
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    return prop;
}

static CUmemAccessDesc rw_access() {
    CUmemAccessDesc a = {};
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = 0;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return a;
}

static void vmm(size_t size, int reps) {
    CUmemAllocationProp prop = device_prop();
    CUmemAccessDesc access = rw_access();
    const char* names[] = {"cuMemAddressReserve", "cuMemCreate", "cuMemMap", "cuMemSetAccess",
                           "cuMemUnmap", "cuMemRelease", "cuMemAddressFree"};
    Samples s[7];
    for (int i = 0; i < reps + 3; i++) {
        Samples warm[7];
        Samples* t = i < 3 ? warm : s;
        CUdeviceptr ptr;
        CUmemGenericAllocationHandle h;
        CHECK_RT(cudaDeviceSynchronize());
        TIMED(t[0], CHECK_DRV(cuMemAddressReserve(&ptr, size, 0, 0, 0)));
        TIMED(t[1], CHECK_DRV(cuMemCreate(&h, size, &prop, 0)));
        TIMED(t[2], CHECK_DRV(cuMemMap(ptr, size, 0, h, 0)));
        TIMED(t[3], CHECK_DRV(cuMemSetAccess(ptr, size, &access, 1)));
        TIMED(t[4], CHECK_DRV(cuMemUnmap(ptr, size)));
        TIMED(t[5], CHECK_DRV(cuMemRelease(h)));
        TIMED(t[6], CHECK_DRV(cuMemAddressFree(ptr, size)));
    }
    for (int k = 0; k < 7; k++) emit(names[k], size, s[k]);
}

// The same size as 2 MiB granules: totals per size for create, map, access, unmap, release.
static void granules(size_t size, size_t granule, int reps) {
    CUmemAllocationProp prop = device_prop();
    CUmemAccessDesc access = rw_access();
    size_t n = size / granule;
    const char* names[] = {"granules:cuMemCreate", "granules:cuMemMap", "granules:cuMemSetAccess",
                           "granules:cuMemUnmap", "granules:cuMemRelease"};
    Samples s[5];
    std::vector<CUmemGenericAllocationHandle> h(n);
    for (int i = 0; i < reps + 1; i++) {
        Samples warm[5];
        Samples* t = i < 1 ? warm : s;
        CUdeviceptr ptr;
        CHECK_DRV(cuMemAddressReserve(&ptr, size, 0, 0, 0));
        CHECK_RT(cudaDeviceSynchronize());
        TIMED(t[0], for (size_t g = 0; g < n; g++) CHECK_DRV(cuMemCreate(&h[g], granule, &prop, 0)));
        TIMED(t[1], for (size_t g = 0; g < n; g++) CHECK_DRV(cuMemMap(ptr + g * granule, granule, 0, h[g], 0)));
        TIMED(t[2], CHECK_DRV(cuMemSetAccess(ptr, size, &access, 1)));
        TIMED(t[3], for (size_t g = 0; g < n; g++) CHECK_DRV(cuMemUnmap(ptr + g * granule, granule)));
        TIMED(t[4], for (size_t g = 0; g < n; g++) CHECK_DRV(cuMemRelease(h[g])));
        CHECK_DRV(cuMemAddressFree(ptr, size));
    }
    for (int k = 0; k < 5; k++) emit(names[k], size, s[k]);
}

int main() {
    CHECK_RT(cudaSetDevice(0));
    CHECK_RT(cudaFree(0));  // creates the context
    cudaDeviceProp p;
    CHECK_RT(cudaGetDeviceProperties(&p, 0));
    g_device = p.name;
    std::replace(g_device.begin(), g_device.end(), ',', ' ');
    CHECK_RT(cudaDriverGetVersion(&g_driver));
    char date[32];
    time_t t = time(nullptr);
    strftime(date, sizeof date, "%Y-%m-%d", gmtime(&t));
    g_date = date;
    CUmemAllocationProp prop = device_prop();
    size_t granule = 0;
    CHECK_DRV(cuMemGetAllocationGranularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    fprintf(stderr, "driver_cost: %s, driver %d, granularity %zu\n", g_device.c_str(), g_driver, granule);
    printf("device,date,driver_version,op,size_bytes,reps,median_us,p10_us,p90_us\n");
    const size_t MiB = 1 << 20;
    const size_t sizes[] = {2 * MiB, 8 * MiB, 32 * MiB, 128 * MiB, 512 * MiB, 2048 * MiB};
    for (size_t size : sizes) {
        int reps = size <= 128 * MiB ? 200 : size <= 512 * MiB ? 60 : 30;
        plain(size, reps);
        vmm(size, reps);
        if (size <= 512 * MiB) granules(size, granule, size <= 8 * MiB ? 100 : size <= 128 * MiB ? 20 : 5);
    }
    return 0;
}
