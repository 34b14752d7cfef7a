/* The same constants as abi_real.c, from the header our test programs use and the values the
 * shim hard-codes (shim/preload/src/hip.rs), for tests/tests/real_hip.rs to compare. */
#include <stdio.h>
#include "hip_subset.h"

int main(void) {
    printf("success %d\nout_of_memory %d\ninvalid_value %d\nno_device %d\n", hipSuccess,
           hipErrorOutOfMemory, hipErrorInvalidValue, hipErrorNoDevice);
    printf("attr_total_global_mem %d\nattr_integrated %d\n", hipDeviceAttributeTotalGlobalMem,
           hipDeviceAttributeIntegrated);
    printf("props_total_global_mem %d\n", 256);
    printf("ext_malloc_default %d\n", 0);
    return 0;
}
