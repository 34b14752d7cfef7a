/* Built against ROCm's own hip_runtime_api.h (Debian's libamdhip64-dev): prints the constants
 * and struct offsets rocmguard relies on, for tests/tests/real_hip.rs to compare with ours. */
#include <stddef.h>
#include <stdio.h>
#include <hip/hip_runtime_api.h>

int main(void) {
    printf("success %d\nout_of_memory %d\ninvalid_value %d\nno_device %d\n", hipSuccess,
           hipErrorOutOfMemory, hipErrorInvalidValue, hipErrorNoDevice);
    printf("attr_total_global_mem %d\nattr_integrated %d\n", hipDeviceAttributeTotalGlobalMem,
           hipDeviceAttributeIntegrated);
    printf("props_total_global_mem %zu\n", offsetof(hipDeviceProp_t, totalGlobalMem));
    printf("ext_malloc_default %d\n", hipDeviceMallocDefault);
    return 0;
}
