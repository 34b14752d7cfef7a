/* Pooled blocks shared between processes with hipIpcGetMemHandle / hipIpcOpenMemHandle
 * (tests/tests/guard_ipc.rs runs two of these):
 *   guard_ipc export   allocates blocks of several sizes (the pool packs the small ones side by
 *                      side), fills each with its own pattern, prints "handle I OFFSET HEX" for
 *                      each (OFFSET: bytes past the block's start the handle was asked for) and
 *                      "ready"; on the line "check" prints "written N": the blocks whose first
 *                      bytes the opener overwrote.
 *   guard_ipc open     reads the "handle" lines, opens each, compares every byte with the
 *                      pattern, overwrites the first 4 KiB with its inverse, closes it; prints
 *                      "opened N intact N wrong N failed N" and "code C" for the first failure. */
#include "guard_common.h"

typedef struct { unsigned char bytes[64]; } IpcHandle;
hipError_t hipIpcGetMemHandle(IpcHandle* handle, void* ptr);
hipError_t hipIpcOpenMemHandle(void** ptr, IpcHandle handle, unsigned int flags);
hipError_t hipIpcCloseMemHandle(void* ptr);

#define COUNT 8
static const size_t SIZES[COUNT] = {4096, 1 << 20, (3 << 20) + 100, 10 << 20,
                                    10 << 20, 40 << 20, 300 << 20, 4096};
/* Handles asked for past the start: ROCm's opener gets that very address. */
static const size_t OFFSETS[COUNT] = {0, 0, 0, 0, 4096 + 64, 0, 200 << 20, 100};

static unsigned char pattern(int i, size_t j) { return (unsigned char)(i * 31 + j * 7 + (j >> 12)); }

static unsigned char* host_pattern(int i, size_t size) {
    unsigned char* h = malloc(size);
    CHECK(h != NULL, "malloc");
    for (size_t j = 0; j < size; j++) h[j] = pattern(i, j);
    return h;
}

static void export(void) {
    void* blocks[COUNT];
    for (int i = 0; i < COUNT; i++) {
        OK(hipMalloc(&blocks[i], SIZES[i]));
        unsigned char* h = host_pattern(i, SIZES[i]);
        OK(hipMemcpy(blocks[i], h, SIZES[i], hipMemcpyHostToDevice));
        free(h);
    }
    for (int i = 0; i < COUNT; i++) {
        IpcHandle handle;
        OK(hipIpcGetMemHandle(&handle, (char*)blocks[i] + OFFSETS[i]));
        printf("handle %d %zu ", i, OFFSETS[i]);
        for (int b = 0; b < 64; b++) printf("%02x", handle.bytes[b]);
        printf("\n");
    }
    printf("ready\n");
    fflush(stdout);
    char line[16];
    CHECK(fgets(line, sizeof line, stdin) != NULL, "no check line");
    int written = 0;
    for (int i = 0; i < COUNT; i++) {
        unsigned char first[64];
        size_t n = SIZES[i] - OFFSETS[i] < 64 ? SIZES[i] - OFFSETS[i] : 64;
        OK(hipMemcpy(first, (char*)blocks[i] + OFFSETS[i], n, hipMemcpyDeviceToHost));
        int all = 1;
        for (size_t j = 0; j < n; j++) all &= first[j] == (unsigned char)~pattern(i, OFFSETS[i] + j);
        written += all;
        OK(hipFree(blocks[i]));
    }
    printf("written %d\n", written);
}

static void open_all(void) {
    int opened = 0, intact = 0, wrong = 0, failed = 0, code = 0;
    int i;
    size_t offset;
    char hex[129];
    while (scanf(" handle %d %zu %128s", &i, &offset, hex) == 3) {
        IpcHandle handle;
        for (int b = 0; b < 64; b++) sscanf(hex + 2 * b, "%2hhx", &handle.bytes[b]);
        void* p = NULL;
        hipError_t e = hipIpcOpenMemHandle(&p, handle, 1 /* hipIpcMemLazyEnablePeerAccess */);
        if (e != hipSuccess) {
            if (!failed++) code = e;
            continue;
        }
        opened++;
        size_t n = SIZES[i] - offset;
        unsigned char* got = malloc(n);
        CHECK(got != NULL, "malloc");
        OK(hipMemcpy(got, p, n, hipMemcpyDeviceToHost));
        int same = 1;
        for (size_t j = 0; j < n; j++) same &= got[j] == pattern(i, offset + j);
        intact += same;
        wrong += !same;
        size_t w = n < 4096 ? n : 4096;
        for (size_t j = 0; j < w; j++) got[j] = (unsigned char)~pattern(i, offset + j);
        OK(hipMemcpy(p, got, w, hipMemcpyHostToDevice));
        free(got);
        OK(hipIpcCloseMemHandle(p));
    }
    printf("opened %d\nintact %d\nwrong %d\nfailed %d\ncode %d\n", opened, intact, wrong, failed, code);
}

int main(int argc, char** argv) {
    CHECK(argc == 2, "usage: guard_ipc export|open");
    if (strcmp(argv[1], "export") == 0) {
        export();
    } else {
        open_all();
    }
    return 0;
}
