/* Memory the program makes with HIP's virtual memory calls, and the address-range queries.
 * Run under a 2 GiB cap (ROCMGUARD_VRAM_LIMIT) or on a 2 GiB simulated device (HIPSIM_VRAM):
 * the program must see the same either way. Prints `key value` lines for the test. */
#include "guard_common.h"
#include "hip_vmm.h"

typedef struct { void* ptr; size_t pitch, xsize, ysize; } PitchedPtr;
typedef struct { size_t width, height, depth; } Extent;
hipError_t hipMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height);
hipError_t hipMalloc3D(PitchedPtr* pitched, Extent extent);
hipError_t hipMemAllocPitch(void** ptr, size_t* pitch, size_t width, size_t height,
                            unsigned int element_size);
hipError_t hipMemGetAddressRange(void** base, size_t* size, void* ptr);
hipError_t hipMemPtrGetInfo(void* ptr, size_t* size);
hipError_t hipMemGetAccess(unsigned long long* flags, const Location* location, void* ptr);
hipError_t hipDeviceEnablePeerAccess(int peer, unsigned int flags);

static size_t free_now(void) {
    size_t free_b = 0, total_b = 0;
    OK(hipMemGetInfo(&free_b, &total_b));
    return free_b;
}

/* Allocation calls that reached the simulated runtime so far, successful or not. */
static uint64_t runtime_calls(void) {
    struct hipsimCounters c = counters();
    return c.allocs + c.failed_allocs;
}

static void counted(void) {
    Prop prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;          /* hipMemAllocationTypePinned */
    prop.location.type = 1; /* hipMemLocationTypeDevice */
    printf("free_before %zu\n", free_now());

    hipMemGenericAllocationHandle_t h = NULL, past = NULL;
    printf("create %d\n", hipMemCreate(&h, 1536 * MiB, &prop, 0));
    printf("free_after_create %zu\n", free_now());

    /* The program's own mapping of it works as without the shim. */
    void* va = NULL;
    OK(hipMemAddressReserve(&va, 1536 * MiB, 0, NULL, 0));
    OK(hipMemMap(va, 1536 * MiB, 0, h, 0));
    AccessDesc rw = {{1, 0}, 3};
    OK(hipMemSetAccess(va, 1536 * MiB, &rw, 1));
    OK(hipMemset(va, 0x5a, 4 * MiB));
    unsigned char back[16];
    OK(hipMemcpy(back, (char*)va + MiB, sizeof back, hipMemcpyDeviceToHost));
    printf("mapped_reads_back %d\n", back[0] == 0x5a && back[15] == 0x5a);

    void* p = NULL;
    printf("malloc_past %d\n", hipMalloc(&p, GiB));
    (void)hipGetLastError();
    uint64_t calls = runtime_calls();
    printf("create_past %d\n", hipMemCreate(&past, GiB, &prop, 0));
    printf("create_past_reached_runtime %d\n", runtime_calls() != calls);
    printf("last_error_after_create_past %d\n", hipGetLastError());

    OK(hipMemUnmap(va, 1536 * MiB));
    printf("release %d\n", hipMemRelease(h));
    printf("free_released_in_range %zu\n", free_now());
    OK(hipMemAddressFree(va, 1536 * MiB));
    printf("free_after_release %zu\n", free_now());
    printf("malloc_after_release %d\n", hipMalloc(&p, GiB));
    printf("free_with_1GiB %zu\n", free_now());
    OK(hipFree(p));
}

static void queries(void) {
    void *a = NULL, *b = NULL, *m = NULL, *base = NULL;
    size_t size = 0;
    OK(hipMalloc(&a, MiB + 100));
    OK(hipMalloc(&b, 3000));
    OK(hipMallocManaged(&m, 5000, 1));
    unsigned char last = 0;
    OK(hipMemset(a, 0x11, MiB + 100));
    OK(hipMemcpy(&last, (char*)a + MiB + 99, 1, hipMemcpyDeviceToHost));
    printf("data_ok %d\n", last == 0x11);
    printf("range %d\n", hipMemGetAddressRange(&base, &size, (char*)a + 1000));
    printf("range_base_is_block %d\n", base == a);
    printf("range_size %zu\n", size);
    base = NULL;
    OK(hipMemGetAddressRange(&base, &size, (char*)b + 2999));
    printf("range_last_byte_base_is_block %d\nrange_last_byte_size %zu\n", base == b, size);
    size = 0;
    printf("ptr_info %d\n", hipMemPtrGetInfo((char*)b + 10, &size));
    printf("ptr_info_size %zu\n", size);
    base = NULL;
    OK(hipMemGetAddressRange(&base, &size, (char*)m + 4000));
    printf("managed_base_is_block %d\nmanaged_size %zu\n", base == m, size);
    int local = 0;
    printf("unknown_range %d\n", hipMemGetAddressRange(&base, &size, &local));
    printf("unknown_ptr_info %d\n", hipMemPtrGetInfo(&local, &size));
    OK(hipFree(a));
    OK(hipFree(b));
    OK(hipFree(m));
}

static void pitched(void) {
    size_t before = free_now(), pitch = 0, size = 0;
    void *p = NULL, *q = NULL, *big = NULL, *zero = &size, *base = NULL;
    printf("pitch_rc %d\n", hipMallocPitch(&p, &pitch, 1000, 300));
    printf("pitch %zu\n", pitch);
    printf("pitch_counted %zu\n", before - free_now());
    OK(hipMemset((char*)p + 299 * pitch, 7, 1000));
    OK(hipMemGetAddressRange(&base, &size, (char*)p + 5 * pitch + 7));
    printf("pitch_range_base_is_block %d\npitch_range_size %zu\n", base == p, size);

    PitchedPtr pp;
    memset(&pp, 0, sizeof pp);
    Extent extent = {1000, 10, 3};
    printf("m3d %d\n", hipMalloc3D(&pp, extent));
    printf("m3d_pitch %zu\nm3d_xsize %zu\nm3d_ysize %zu\n", pp.pitch, pp.xsize, pp.ysize);
    OK(hipMemPtrGetInfo(pp.ptr, &size));
    printf("m3d_size %zu\n", size);

    printf("alloc_pitch_bad_element %d\n", hipMemAllocPitch(&q, &pitch, 64, 2, 3));
    printf("alloc_pitch %d\n", hipMemAllocPitch(&q, &pitch, 64, 2, 4));
    printf("alloc_pitch_pitch %zu\n", pitch);
    printf("pitch_past %d\n", hipMallocPitch(&big, &pitch, GiB, 3));
    (void)hipGetLastError();
    printf("pitch_zero %d\n", hipMallocPitch(&zero, &pitch, 0, 5));
    printf("pitch_zero_null %d\n", zero == NULL);
    OK(hipFree(p));
    OK(hipFree(pp.ptr));
    OK(hipFree(q));
    printf("pitch_all_back %d\n", free_now() == before);
}

/* What device 1 may do with pooled memory of device 0 (hipMemGetAccess, 0 none, 3 read-write)
 * before and after device 1 enables peer access to device 0, for a block made before the
 * enable and one made after (in memory mapped later). Two simulated devices. */
static void peer(void) {
    Location one = {1, 1};
    unsigned long long flags = 99;
    void *before = NULL, *after = NULL;
    OK(hipSetDevice(0));
    OK(hipMalloc(&before, 64 * MiB));
    OK(hipMemGetAccess(&flags, &one, before));
    printf("peer_before_enable %llu\n", flags);
    OK(hipSetDevice(1));
    printf("enable %d\n", hipDeviceEnablePeerAccess(0, 0));
    printf("enable_again %d\n", hipDeviceEnablePeerAccess(0, 0));
    OK(hipSetDevice(0));
    OK(hipMemGetAccess(&flags, &one, before));
    printf("peer_existing %llu\n", flags);
    OK(hipMalloc(&after, 700 * MiB));
    OK(hipMemGetAccess(&flags, &one, (char*)after + 650 * MiB));
    printf("peer_later %llu\n", flags);
    Location zero = {1, 0};
    OK(hipMemGetAccess(&flags, &zero, after));
    printf("own_later %llu\n", flags);
    OK(hipFree(before));
    OK(hipFree(after));
}

/* N handles of 2 MiB from hipMemCreate, kept: the runtime (ROCm 7, and hipsim) holds a file
 * descriptor for each, so the soft limit on open files decides how many there can be. */
static void handles(int n) {
    Prop prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;
    prop.location.type = 1;
    int made = 0;
    hipError_t e = hipSuccess;
    for (; made < n; made++) {
        hipMemGenericAllocationHandle_t h = NULL;
        if ((e = hipMemCreate(&h, 2 * MiB, &prop, 0)) != hipSuccess) break;
    }
    printf("created %d\ncode %d\n", made, e);
}

/* A trim after a large block is freed while a smaller one stays in the same reserved range (2
 * MiB: blocks of up to 1 MiB have a range of their own): how much of the device's free memory
 * comes back (hipMemPoolTrimTo(0) trims the pool). */
static void trim(void) {
    void *small = NULL, *large = NULL;
    OK(hipMalloc(&small, 2 * MiB));
    OK(hipMalloc(&large, 600 * MiB));
    size_t before = free_now();
    hipMemPool_t pool = NULL;
    OK(hipDeviceGetDefaultMemPool(&pool, 0));
    OK(hipFree(large));
    OK(hipMemPoolTrimTo(pool, 0));
    printf("trim_came_back_mib %zu\n", (free_now() - before) / MiB);
    OK(hipFree(small));
}

/* At the peak, 64 MiB freed below a live 64 MiB block, then 96 MiB asked: it fits only past
 * the live block, where mapping it would set a new peak, so the freed block's pages go first
 * (with pieces of 2 MiB, ROCMGUARD_CONF=piece_size:2MiB). Device 1 has peer access to device
 * 0's memory throughout. Prints the handles created for the 96 MiB, whether it all reads back
 * what was written and is open to device 1, and the device's free memory before and after. */
static void move(void) {
    OK(hipSetDevice(1));
    OK(hipDeviceEnablePeerAccess(0, 0));
    OK(hipSetDevice(0));
    size_t before = free_now();
    void *a = NULL, *b = NULL, *c = NULL;
    OK(hipMalloc(&a, 64 * MiB));
    OK(hipMalloc(&b, 64 * MiB));
    OK(hipMemset(b, 0x11, 64 * MiB));
    OK(hipFree(a));
    uint64_t creates = counters().allocs;
    OK(hipMalloc(&c, 96 * MiB));
    printf("creates_for_c %llu\n", (unsigned long long)(counters().allocs - creates));
    OK(hipMemset(c, 0x77, 96 * MiB));
    int same = 1;
    unsigned char got[4096];
    for (size_t at = 0; at < 96 * MiB; at += MiB) {
        OK(hipMemcpy(got, (char*)c + at, sizeof got, hipMemcpyDeviceToHost));
        for (size_t i = 0; i < sizeof got; i++) same &= got[i] == 0x77;
    }
    OK(hipMemcpy(got, (char*)b + 63 * MiB, sizeof got, hipMemcpyDeviceToHost));
    for (size_t i = 0; i < sizeof got; i++) same &= got[i] == 0x11;
    printf("reads_back %d\n", same);
    Location one = {1, 1};
    unsigned long long flags = 0, all = 3;
    for (size_t at = 0; at < 96 * MiB; at += 2 * MiB) {
        OK(hipMemGetAccess(&flags, &one, (char*)c + at));
        all &= flags;
    }
    printf("peer_access %llu\n", all);
    OK(hipFree(b));
    OK(hipFree(c));
    hipMemPool_t pool = NULL;
    OK(hipDeviceGetDefaultMemPool(&pool, 0));
    OK(hipMemPoolTrimTo(pool, 0));
    printf("free_before_mib %zu\nfree_after_mib %zu\n", before / MiB, free_now() / MiB);
}

int main(int argc, char** argv) {
    if (argc > 1 && strcmp(argv[1], "move") == 0) {
        move();
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "trim") == 0) {
        trim();
        return 0;
    }
    if (argc > 2 && strcmp(argv[1], "handles") == 0) {
        handles(atoi(argv[2]));
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "peer") == 0) {
        peer();
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "pitched") == 0) {
        pitched();
    } else if (argc > 1 && strcmp(argv[1], "queries") == 0) {
        queries();
    } else {
        counted();
    }
    return 0;
}
