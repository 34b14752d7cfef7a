/* The ROCm 6 virtual memory types (hip_runtime_api.h), and the calls the C test programs make
 * with them: one copy for guard_vmm.c, sim_rocm72.c and sim_costs.c. Include after
 * hip_subset.h (hipError_t). */
#ifndef HIP_VMM_H
#define HIP_VMM_H
#include <stddef.h>

typedef struct ihipMemGenericAllocationHandle* hipMemGenericAllocationHandle_t;
typedef struct { int type; int id; } Location;
typedef struct {
    int type;
    int requestedHandleType;
    Location location;
    void* win32HandleMetaData;
    struct { unsigned char compressionType, gpuDirectRDMACapable; unsigned short usage; } allocFlags;
} Prop;
typedef struct { Location location; int flags; } AccessDesc;
_Static_assert(sizeof(Prop) == 32 && offsetof(Prop, location) == 8, "hipMemAllocationProp");

hipError_t hipMemCreate(hipMemGenericAllocationHandle_t* handle, size_t size, const Prop* prop,
                        unsigned long long flags);
hipError_t hipMemRelease(hipMemGenericAllocationHandle_t handle);
hipError_t hipMemAddressReserve(void** ptr, size_t size, size_t alignment, void* addr,
                                unsigned long long flags);
hipError_t hipMemAddressFree(void* ptr, size_t size);
hipError_t hipMemMap(void* ptr, size_t size, size_t offset, hipMemGenericAllocationHandle_t handle,
                     unsigned long long flags);
hipError_t hipMemUnmap(void* ptr, size_t size);
hipError_t hipMemSetAccess(void* ptr, size_t size, const AccessDesc* desc, size_t count);

#endif
