/* hipGetProcAddress must hand out the runtime's own functions, never a preloaded library's:
 * prints what it returned compared with the program's view of hipMalloc (the interposer's when
 * sim_interposer is preloaded) and with the runtime's own export. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

#include "hip_subset.h"
#include "hipsim.h"

typedef hipError_t (*malloc_fn)(void**, size_t);

int main(void) {
    int (*interposer_calls)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "sim_interposer_calls");
    void* runtime = dlopen("libamdhip64.so.6", RTLD_NOLOAD | RTLD_LAZY);
    void* own_malloc = runtime ? dlsym(runtime, "hipMalloc") : NULL;

    void* p = NULL;
    hipError_t direct_rc = hipMalloc(&p, 4096);

    void* fn = NULL;
    int status = -1;
    hipError_t rc = hipGetProcAddress("hipMalloc", &fn, 600, 0, &status);
    void* q = NULL;
    hipError_t via_rc = fn ? ((malloc_fn)fn)(&q, 4096) : -1;
    struct hipsimCounters c;
    hipsimCounters(&c);
    printf("malloc rc=%d status=%d direct_rc=%d via_rc=%d same_as_program=%d same_as_runtime=%d "
           "interposed=%d allocs=%llu\n",
           rc, status, direct_rc, via_rc, fn == (void*)&hipMalloc, fn != NULL && fn == own_malloc,
           interposer_calls ? interposer_calls() : 0, (unsigned long long)c.allocs);

    fn = (void*)&fn;
    status = -1;
    rc = hipGetProcAddress("hipNoSuchFunction", &fn, 600, 0, &status);
    printf("unknown rc=%d status=%d pfn_null=%d last=%d\n", rc, status, fn == NULL,
           hipGetLastError());

    void* v600 = NULL;
    void* v500 = NULL;
    hipGetProcAddress("hipGetDeviceProperties", &v600, 600, 0, NULL);
    hipGetProcAddress("hipGetDeviceProperties", &v500, 500, 0, NULL);
    printf("props r0600=%d r0000=%d\n",
           v600 != NULL && v600 == dlsym(runtime, "hipGetDevicePropertiesR0600"),
           v500 != NULL && v500 == dlsym(runtime, "hipGetDeviceProperties"));
    return 0;
}
