// What one hooked CUDA runtime call costs a program: the calls PyTorch makes per step with its
// own cache on (overhead.py --counts: cudaGetLastError after every kernel launch,
// cudaPeekAtLastError, cudaGetDeviceProperties) and, with it off, cudaMalloc/cudaFree, each
// timed in a tight loop. Run with and
// without LD_PRELOAD=librocmguard.so; overhead.py takes the difference per call, multiplies it
// by the calls per step and divides by the step time: an upper bound on the CPU time the shim
// adds to a step, which resolves far below 1% where step times between processes do not.
// Prints `<name> <median ns per call>` per line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cuda_runtime.h>
#include <vector>

template <class F>
static double ns_per_call(int calls, F f) {
    std::vector<double> batches;
    for (int b = 0; b < 9; b++) {
        auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; i++) f();
        std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
        batches.push_back(took.count() / calls);
    }
    std::sort(batches.begin(), batches.end());
    return batches[batches.size() / 2];
}

int main() {
    if (cudaFree(nullptr) != cudaSuccess) return 1;  // the context, outside the timing
    cudaDeviceProp prop;
    std::printf("cudaGetLastError %.2f\n", ns_per_call(1000000, [] { (void)cudaGetLastError(); }));
    std::printf("cudaPeekAtLastError %.2f\n", ns_per_call(1000000, [] { (void)cudaPeekAtLastError(); }));
    std::printf("cudaGetDeviceProperties %.2f\n",
                ns_per_call(200, [&] { (void)cudaGetDeviceProperties(&prop, 0); }));
    std::printf("cudaDeviceSynchronize %.2f\n", ns_per_call(20000, [] { (void)cudaDeviceSynchronize(); }));
    // A cudaMalloc and its cudaFree, sizes as a program's tensors vary (per call: half a pair).
    // Under the shim the pool serves them; natively each goes to the driver.
    static const size_t sizes[] = {512, 4096, 65536, 1 << 20, 3 << 20, 8 << 20};
    int i = 0;
    double pair = ns_per_call(2000, [&] {
        void* p = nullptr;
        if (cudaMalloc(&p, sizes[i++ % 6]) == cudaSuccess) (void)cudaFree(p);
    });
    std::printf("cudaMalloc %.2f\ncudaFree %.2f\n", pair / 2, pair / 2);
    return 0;
}
