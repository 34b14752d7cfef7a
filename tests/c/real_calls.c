/* Every hooked HIP call, made against the real libamdhip64 (ROCm 5.2 from Debian) on a machine
 * without a GPU; prints each return code. Run with and without the shim: the output must match. */
#include <stdio.h>
#include <hip/hip_runtime_api.h>

int main(void) {
    void* p = NULL;
    size_t a = 0, b = 0;
    int v = 0;
    hipDeviceProp_t props;
    hipStream_t s = NULL;
    hipMemPool_t pool = NULL;
    printf("hipMalloc %d\n", hipMalloc(&p, 1 << 20));
    printf("hipMalloc_zero %d\n", hipMalloc(&p, 0));
    printf("hipExtMallocWithFlags %d\n", hipExtMallocWithFlags(&p, 1 << 20, 0));
    printf("hipMallocManaged %d\n", hipMallocManaged(&p, 1 << 20, hipMemAttachGlobal));
    printf("hipMallocAsync %d\n", hipMallocAsync(&p, 1 << 20, s));
    printf("hipFreeAsync %d\n", hipFreeAsync(p, s));
    printf("hipFree_null %d\n", hipFree(NULL));
    printf("hipFree_bad %d\n", hipFree(&v));
    printf("hipMemGetInfo %d\n", hipMemGetInfo(&a, &b));
    printf("hipMallocPitch %d\n", hipMallocPitch(&p, &a, 1000, 10));
    printf("hipMemAllocPitch %d\n", hipMemAllocPitch(&p, &a, 1000, 10, 4));
    hipPitchedPtr pitched;
    printf("hipMalloc3D %d\n", hipMalloc3D(&pitched, make_hipExtent(1000, 10, 3)));
    printf("hipMemGetAddressRange %d\n", hipMemGetAddressRange(&p, &a, &v));
    printf("hipMemPtrGetInfo %d\n", hipMemPtrGetInfo(&v, &a));
    hipMemAllocationProp prop = {0};
    prop.type = hipMemAllocationTypePinned;
    prop.location.type = hipMemLocationTypeDevice;
    hipMemGenericAllocationHandle_t handle = NULL;
    printf("hipMemCreate %d\n", hipMemCreate(&handle, 2 << 20, &prop, 0));
    printf("hipMemRelease %d\n", hipMemRelease(handle));
    printf("hipDeviceTotalMem %d\n", hipDeviceTotalMem(&a, 0));
    printf("hipDeviceGetAttribute %d\n", hipDeviceGetAttribute(&v, hipDeviceAttributeTotalGlobalMem, 0));
    printf("hipGetDeviceProperties %d\n", hipGetDeviceProperties(&props, 0));
    printf("hipDeviceGetDefaultMemPool %d\n", hipDeviceGetDefaultMemPool(&pool, 0));
    printf("hipMemPoolTrimTo %d\n", hipMemPoolTrimTo(pool, 0));
    printf("hipDeviceSynchronize %d\n", hipDeviceSynchronize());
    hipStream_t made = NULL;
    unsigned mask = 1;
    printf("hipStreamCreate %d\n", hipStreamCreate(&made));
    printf("hipStreamCreateWithFlags %d\n", hipStreamCreateWithFlags(&made, hipStreamNonBlocking));
    printf("hipStreamCreateWithPriority %d\n", hipStreamCreateWithPriority(&made, 0, 0));
    printf("hipExtStreamCreateWithCUMask %d\n", hipExtStreamCreateWithCUMask(&made, 1, &mask));
    printf("hipDeviceEnablePeerAccess %d\n", hipDeviceEnablePeerAccess(1, 0));
    printf("hipStreamBeginCapture %d\n", hipStreamBeginCapture(s, hipStreamCaptureModeGlobal));
    printf("hipPeekAtLastError %d\n", hipPeekAtLastError());
    printf("hipGetLastError %d\n", hipGetLastError());
    printf("hipGetLastError_again %d\n", hipGetLastError());
    printf("hipDeviceReset %d\n", hipDeviceReset());
    return 0;
}
