/* rocblas_create_handle, whose 32 MiB workspace allocation fails once (HIPSIM_FAIL_NTH=1). */
#include "guard_common.h"

int main(void) {
    rocblas_handle h = NULL;
    rocblas_status st = rocblas_create_handle(&h);
    printf("create %d\nhandle %d\n", st, h != NULL);
    if (st == rocblas_status_success) printf("destroy %d\n", rocblas_destroy_handle(h));
    return 0;
}
