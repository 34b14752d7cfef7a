/* The subset of the HIP runtime API that rocmguard's C test programs and examples call.
 * Prototypes and constants as in ROCm's hip_runtime_api.h (checked against the real header by
 * tests/c/abi_check.c), so the programs need no ROCm install to build. */
#ifndef HIP_SUBSET_H
#define HIP_SUBSET_H
#include <stddef.h>
#include <stdint.h>

typedef int hipError_t;
typedef struct ihipStream_t* hipStream_t;
typedef struct ihipMemPoolHandle_t* hipMemPool_t;
typedef struct ihipGraph* hipGraph_t;

enum {
    hipSuccess = 0,
    hipErrorInvalidValue = 1,
    hipErrorOutOfMemory = 2,
    hipErrorInvalidDevicePointer = 17,
    hipErrorNoDevice = 100,
    hipErrorNotReady = 600,
    hipErrorNotSupported = 801,
};
enum { hipDeviceAttributeIntegrated = 16, hipDeviceAttributeTotalGlobalMem = 84 };
enum { hipStreamCaptureModeGlobal = 0 };
enum { hipMemcpyHostToDevice = 1, hipMemcpyDeviceToHost = 2 };

hipError_t hipMalloc(void** ptr, size_t size);
hipError_t hipFree(void* ptr);
hipError_t hipExtMallocWithFlags(void** ptr, size_t size, unsigned int flags);
hipError_t hipMallocManaged(void** ptr, size_t size, unsigned int flags);
hipError_t hipMallocAsync(void** ptr, size_t size, hipStream_t stream);
hipError_t hipFreeAsync(void* ptr, hipStream_t stream);
hipError_t hipMallocFromPoolAsync(void** ptr, size_t size, hipMemPool_t pool, hipStream_t stream);
hipError_t hipDeviceGetDefaultMemPool(hipMemPool_t* pool, int device);
hipError_t hipMemPoolTrimTo(hipMemPool_t pool, size_t min_bytes_to_hold);
hipError_t hipMemGetInfo(size_t* free, size_t* total);
hipError_t hipDeviceTotalMem(size_t* bytes, int device);
hipError_t hipDeviceGetAttribute(int* value, int attr, int device);
hipError_t hipDeviceSynchronize(void);
hipError_t hipDeviceReset(void);
hipError_t hipGetDevice(int* device);
hipError_t hipSetDevice(int device);
hipError_t hipGetDeviceCount(int* count);
hipError_t hipGetLastError(void);
hipError_t hipPeekAtLastError(void);
hipError_t hipStreamCreate(hipStream_t* stream);
hipError_t hipStreamDestroy(hipStream_t stream);
hipError_t hipStreamSynchronize(hipStream_t stream);
hipError_t hipStreamBeginCapture(hipStream_t stream, int mode);
hipError_t hipStreamEndCapture(hipStream_t stream, hipGraph_t* graph);
hipError_t hipMemcpy(void* dst, const void* src, size_t bytes, int kind);
hipError_t hipGetProcAddress(const char* symbol, void** pfn, int hipVersion, uint64_t flags, void* status);

#endif
