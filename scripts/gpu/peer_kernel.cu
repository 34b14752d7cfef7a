// A kernel on GPU 1 that reads and writes GPU 0's memory directly after
// cudaDeviceEnablePeerAccess, for blocks allocated before and after the enable: what
// rocmguard's virtual segments must allow as the runtime's own allocations do (issue 14).
// Prints `peer before|after OK|FAIL <detail>`; exit 1 on any FAIL. Needs two GPUs.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void add_one(int* p, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1;
}

static bool check(const char* what, int* p, size_t n) {
    cudaSetDevice(0);
    cudaMemset(p, 0, n * sizeof(int));
    cudaDeviceSynchronize();
    cudaSetDevice(1);
    add_one<<<(unsigned)((n + 255) / 256), 256>>>(p, n);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        printf("peer %s FAIL kernel on GPU 1: %s\n", what, cudaGetErrorString(e));
        return false;
    }
    int* host = new int[n];
    cudaSetDevice(0);
    cudaMemcpy(host, p, n * sizeof(int), cudaMemcpyDeviceToHost);
    size_t ok = 0;
    for (size_t i = 0; i < n; i++) ok += host[i] == 1;
    delete[] host;
    printf("peer %s %s %zu of %zu written by GPU 1\n", what, ok == n ? "OK" : "FAIL", ok, n);
    return ok == n;
}

int main() {
    int count = 0;
    cudaGetDeviceCount(&count);
    if (count < 2) {
        printf("peer SKIP one GPU\n");
        return 0;
    }
    const size_t n = (48u << 20) / sizeof(int);
    int *before = nullptr, *after = nullptr;
    cudaSetDevice(0);
    if (cudaMalloc(&before, n * sizeof(int)) != cudaSuccess) return 2;
    cudaSetDevice(1);
    cudaError_t e = cudaDeviceEnablePeerAccess(0, 0);
    printf("enable %d\n", (int)e);
    bool ok = check("before", before, n);
    cudaSetDevice(0);
    if (cudaMalloc(&after, 300u << 20) != cudaSuccess) return 2;
    ok = check("after", after + (200u << 20) / sizeof(int), n) && ok;
    return ok ? 0 : 1;
}
