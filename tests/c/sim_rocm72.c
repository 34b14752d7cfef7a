/* Two ROCm 7.2 facts about virtual memory that hipsim models (HIPSIM_ROCM=7.2, or each knob):
 *   release: hipMemUnmap + hipMemRelease give the memory back only when the address range is
 *            freed with hipMemAddressFree (torch_memory_saver#83, fixed there in #84);
 *   access:  hipMemSetAccess checks the size from the reservation's first mapping, so a legal
 *            call on a later mapping fails unless the sizes add up (SWDEV-568260,
 *            ROCm/rocm-systems#2516).
 * Prints `key value` lines; tests/tests/hipsim_vmm.rs runs it with and without the faults. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "hip_subset.h"
#include "hip_vmm.h"

#define MiB ((size_t)1 << 20)

hipError_t hipRuntimeGetVersion(int* version);

static const AccessDesc rw = {{1, 0}, 3};

/* Bytes the device has handed out, as hipMemGetInfo says. */
static size_t used(void) {
    size_t free_b = 0, total_b = 0;
    hipMemGetInfo(&free_b, &total_b);
    return total_b - free_b;
}

static hipMemGenericAllocationHandle_t create(size_t size) {
    Prop prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;          /* hipMemAllocationTypePinned */
    prop.location.type = 1; /* hipMemLocationTypeDevice */
    hipMemGenericAllocationHandle_t h = NULL;
    if (hipMemCreate(&h, size, &prop, 0) != hipSuccess) {
        printf("create_failed %zu\n", size);
        return NULL;
    }
    return h;
}

/* A handle of `size` mapped at `at` with access, as a pool maps a piece. */
static hipMemGenericAllocationHandle_t piece(char* at, size_t size) {
    hipMemGenericAllocationHandle_t h = create(size);
    if (hipMemMap(at, size, 0, h, 0) != hipSuccess || hipMemSetAccess(at, size, &rw, 1) != hipSuccess)
        printf("piece_failed %zu\n", size);
    return h;
}

static void give_back(char* at, size_t size, hipMemGenericAllocationHandle_t h) {
    if (hipMemUnmap(at, size) != hipSuccess || hipMemRelease(h) != hipSuccess)
        printf("give_back_failed %zu\n", size);
}

static void release_memory(void) {
    int version = 0;
    hipRuntimeGetVersion(&version);
    printf("version %d\n", version);

    /* torch_memory_saver's pause: unmap and release, then (its fix) free and re-reserve. */
    void* va = NULL;
    hipMemAddressReserve(&va, 64 * MiB, 0, NULL, 0);
    hipMemGenericAllocationHandle_t h = piece(va, 16 * MiB);
    printf("used_mapped %zu\n", used());
    give_back(va, 16 * MiB, h);
    printf("used_released %zu\n", used());
    printf("address_free %d\n", hipMemAddressFree(va, 64 * MiB));
    printf("used_range_freed %zu\n", used());
    void* again = NULL;
    printf("reserve_same %d\n", hipMemAddressReserve(&again, 64 * MiB, 0, va, 0));
    printf("same_address %d\n", again == va);
    h = piece(again, 16 * MiB);
    printf("used_resumed %zu\n", used());

    /* A piece given back while its neighbour stays mapped in the same range. */
    hipMemGenericAllocationHandle_t next = piece((char*)again + 16 * MiB, 16 * MiB);
    give_back(again, 16 * MiB, h);
    printf("used_neighbour_mapped %zu\n", used());
    give_back((char*)again + 16 * MiB, 16 * MiB, next);
    printf("used_all_released %zu\n", used());
    printf("address_free_again %d\n", hipMemAddressFree(again, 64 * MiB));
    printf("used_end %zu\n", used());

    /* A handle whose range went first: released later, it owes nothing to the range now
     * reserved at the same address. */
    void* third = NULL;
    hipMemAddressReserve(&third, 64 * MiB, 0, NULL, 0);
    h = piece(third, 4 * MiB);
    hipMemUnmap(third, 4 * MiB);
    hipMemAddressFree(third, 64 * MiB);
    void* fourth = NULL;
    hipMemAddressReserve(&fourth, 64 * MiB, 0, third, 0);
    printf("fourth_same_address %d\n", fourth == third);
    hipMemRelease(h);
    printf("used_stale_range %zu\n", used());
    hipMemAddressFree(fourth, 64 * MiB);
}

static void access_sizes(void) {
    /* ROCm/rocm-systems#2516: mappings of 4, 8 and 8 MiB one after another in one range. */
    char* va = NULL;
    hipMemAddressReserve((void**)&va, 64 * MiB, 0, NULL, 0);
    size_t sizes[3] = {4 * MiB, 8 * MiB, 8 * MiB}, at = 0;
    hipMemGenericAllocationHandle_t h[3];
    for (int i = 0; i < 3; i++) {
        h[i] = create(sizes[i]);
        hipMemMap(va + at, sizes[i], 0, h[i], 0);
        printf("access_%d %d\n", i, hipMemSetAccess(va + at, sizes[i], &rw, 1));
        at += sizes[i];
    }
    printf("access_all %d\n", hipMemSetAccess(va, 20 * MiB, &rw, 1));
    printf("access_first_two %d\n", hipMemSetAccess(va, 12 * MiB, &rw, 1));
    /* Starting inside a mapping, at a non-zero offset: refused by every ROCm. */
    printf("access_interior %d\n", hipMemSetAccess(va + 2 * MiB, 2 * MiB, &rw, 1));
    printf("access_interior_across %d\n", hipMemSetAccess(va + 6 * MiB, 8 * MiB, &rw, 1));
    /* The last two are 8 MiB each: from the second on, two mappings sum to 12, not 16. */
    printf("access_last_two %d\n", hipMemSetAccess(va + 4 * MiB, 16 * MiB, &rw, 1));
    for (int i = 0, off = 0; i < 3; off += (int)(sizes[i] / MiB), i++)
        give_back(va + (size_t)off * MiB, sizes[i], h[i]);
    hipMemAddressFree(va, 64 * MiB);

    /* Granules of one size, mapped as a range grows: each call's size is the first's. */
    char* grow = NULL;
    hipMemAddressReserve((void**)&grow, 64 * MiB, 0, NULL, 0);
    hipMemGenericAllocationHandle_t g[4];
    int granule_fails = 0;
    for (int i = 0; i < 4; i++) {
        g[i] = create(2 * MiB);
        hipMemMap(grow + (size_t)i * 2 * MiB, 2 * MiB, 0, g[i], 0);
        granule_fails += hipMemSetAccess(grow + (size_t)i * 2 * MiB, 2 * MiB, &rw, 1) != hipSuccess;
    }
    printf("granule_fails %d\n", granule_fails);
    printf("granules_three %d\n", hipMemSetAccess(grow + 2 * MiB, 6 * MiB, &rw, 1));
    hipMemGenericAllocationHandle_t big = create(4 * MiB);
    hipMemMap(grow + 8 * MiB, 4 * MiB, 0, big, 0);
    /* Any multiple of the first granule is some first mappings' sum, so this passes too. */
    printf("grow_by_two_granules %d\n", hipMemSetAccess(grow + 8 * MiB, 4 * MiB, &rw, 1));

    /* The order is the order of mapping, not of addresses. */
    char* late = NULL;
    hipMemAddressReserve((void**)&late, 64 * MiB, 0, NULL, 0);
    hipMemGenericAllocationHandle_t high = create(4 * MiB), low = create(2 * MiB);
    hipMemMap(late + 4 * MiB, 4 * MiB, 0, high, 0);
    hipMemMap(late, 2 * MiB, 0, low, 0);
    printf("lowest_mapped_last %d\n", hipMemSetAccess(late, 2 * MiB, &rw, 1));
    printf("first_mapped %d\n", hipMemSetAccess(late + 4 * MiB, 4 * MiB, &rw, 1));
}

int main(int argc, char** argv) {
    const char* mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "release") == 0) release_memory();
    else if (strcmp(mode, "access") == 0) access_sizes();
    else return 2;
    return 0;
}
