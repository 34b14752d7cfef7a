/* The current device and the last error belong to each thread. */
#include <pthread.h>
#include <stdio.h>

#include "hip_subset.h"
#include "hipsim.h"

static int worker_device, worker_set_rc, worker_malloc_rc, worker_peek;

static void* worker(void* arg) {
    (void)arg;
    void* p = NULL;
    worker_set_rc = hipSetDevice(1);
    worker_malloc_rc = hipMalloc(&p, (size_t)1 << 50);
    hipGetDevice(&worker_device);
    worker_peek = hipPeekAtLastError();
    return NULL;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    int device = -1;
    hipGetDevice(&device);
    printf("worker set_rc=%d malloc_rc=%d device=%d peek=%d\n", worker_set_rc, worker_malloc_rc,
           worker_device, worker_peek);
    printf("main device=%d peek=%d\n", device, hipPeekAtLastError());
    return 0;
}
