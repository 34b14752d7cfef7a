/* Which of the runtime's calls to its own exports reach a preloaded library (run with
 * LD_PRELOAD=libsim_interposer.so): none natively, those HIPSIM_SELF_CALLS=1 routes through the
 * dynamic linker under it. Prints `step mallocs=N frees=N syncs=N rc=N` after each call, the
 * counts being what the interposer saw beyond the program's own calls. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hip_subset.h"
#include "hipsim.h"

hipError_t hipMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height);

static void (*counts)(int*, int*, int*);
static int program_mallocs, program_frees, program_syncs;

static void step(const char* name, hipError_t rc) {
    int m = 0, f = 0, s = 0;
    counts(&m, &f, &s);
    printf("%s mallocs=%d frees=%d syncs=%d rc=%d\n", name, m - program_mallocs,
           f - program_frees, s - program_syncs, rc);
}

int main(void) {
    counts = (void (*)(int*, int*, int*))dlsym(RTLD_DEFAULT, "sim_interposer_counts");
    if (!counts) {
        fprintf(stderr, "run with LD_PRELOAD=libsim_interposer.so\n");
        return 2;
    }
    void *managed = NULL, *pitched = NULL, *d = NULL;
    size_t pitch = 0, n = 1 << 20;
    step("managed", hipMallocManaged(&managed, n, hipMemAttachGlobal));
    step("pitched", hipMallocPitch(&pitched, &pitch, 1000, 10));
    program_mallocs++;
    step("malloc", hipMalloc(&d, n));
    char* host = calloc(1, n);
    step("h2d", hipMemcpy(d, host, n, hipMemcpyHostToDevice));
    step("d2h", hipMemcpy(host, d, n, hipMemcpyDeviceToHost));
    step("d2d", hipMemcpy(d, d, n, 3));
    program_frees++;
    step("free", hipFree(d));
    program_frees++;
    step("free_managed", hipFree(managed));
    free(host);
    return 0;
}
