/* What test programs need beyond hip_subset.h when they run on hipsim, the simulated HIP runtime
 * (shim/hipsim): its extras (counters, a simulated kernel), a few more HIP prototypes, and the
 * rocBLAS subset that rocblassim (shim/rocblassim) implements. Include after hip_subset.h. */
#ifndef HIPSIM_H
#define HIPSIM_H
#include <stddef.h>
#include <stdint.h>

/* hipsimCounters(): what the simulator did so far in this process. */
struct hipsimCounters {
    uint64_t allocs;                /* successful allocation calls */
    uint64_t frees;                 /* blocks released (hipFree, hipFreeAsync, hipDeviceReset) */
    uint64_t syncs;                 /* hipDeviceSynchronize + the implicit one in each hipFree */
    uint64_t live_bytes;
    uint64_t peak_bytes;
    uint64_t mempool_trims;         /* hipMemPoolTrimTo calls */
    uint64_t capture_invalidations; /* captures invalidated by a forbidden call */
    uint64_t failed_allocs;         /* allocation calls that returned hipErrorOutOfMemory */
    uint64_t live_allocs;
    uint64_t stream_syncs;          /* hipStreamSynchronize calls */
    uint64_t fills;                 /* hipsimLaunchFill work that ran */
    uint64_t dropped_fills;         /* ... that found its memory freed and did nothing */
};
void hipsimCounters(struct hipsimCounters* out);

/* A simulated kernel: delay_us after the work queued before it on `stream`, a background thread
 * memsets `bytes` at `dst` (which must lie in a live allocation) to `value`. */
hipError_t hipsimLaunchFill(void* dst, int value, size_t bytes, unsigned delay_us,
                            hipStream_t stream);

/* More of hip_runtime_api.h (ROCm 6). Macros rather than enumerators, so that hip_subset.h
 * (included first) may grow to declare the same names without a clash. */
#define hipErrorInvalidDevice 101
#define hipErrorInvalidHandle 400
#define hipErrorIllegalState 401
#define hipErrorStreamCaptureUnsupported 900
#define hipErrorStreamCaptureInvalidated 901
#define hipErrorStreamCaptureImplicit 906
#define hipStreamCaptureModeThreadLocal 1
#define hipStreamCaptureModeRelaxed 2
#define hipStreamCaptureStatusNone 0
#define hipStreamCaptureStatusActive 1
#define hipStreamCaptureStatusInvalidated 2
#define hipStreamNonBlocking 1
#define hipMemAttachGlobal 1
#define HIP_GET_PROC_ADDRESS_SUCCESS 0
#define HIP_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND 1
hipError_t hipStreamCreateWithFlags(hipStream_t* stream, unsigned int flags);
hipError_t hipStreamIsCapturing(hipStream_t stream, int* status);
hipError_t hipThreadExchangeStreamCaptureMode(int* mode);
hipError_t hipGraphDestroy(hipGraph_t graph);
hipError_t hipMemset(void* dst, int value, size_t bytes);
hipError_t hipGetDevicePropertiesR0600(void* prop, int device);
const char* hipGetErrorName(hipError_t error);
const char* hipGetErrorString(hipError_t error);
/* hipDeviceProp_tR0600: 1472 bytes; offsets of the fields tests read. */
#define HIPSIM_PROP_R0600_SIZE 1472
#define HIPSIM_PROP_NAME 0
#define HIPSIM_PROP_TOTAL_GLOBAL_MEM 288
#define HIPSIM_PROP_INTEGRATED 396
#define HIPSIM_PROP_GCN_ARCH_NAME 1160

/* rocBLAS subset (rocblassim). */
typedef struct _rocblas_handle* rocblas_handle;
typedef int rocblas_status;
#define rocblas_status_success 0
#define rocblas_status_invalid_handle 1
#define rocblas_status_memory_error 5
#define rocblas_status_internal_error 6
rocblas_status rocblas_create_handle(rocblas_handle* handle);
rocblas_status rocblas_destroy_handle(rocblas_handle handle);

#endif
