/* The Windows guard test program, built twice with mingw:
 *   -DLINKED: imports the HIP runtime and rocBLAS through its import table (amdhip64_6.dll and
 *             rocblas.dll beside the program), as programs linked against the HIP SDK do;
 *   -DLOADED: loads them by full path from sim\ beside the program, as AMD's PyTorch wheels
 *             load the runtime, and finds every function with GetProcAddress. Both are loaded
 *             with LoadLibraryW, or the call GUARD_LOADER names (A, ExA, ExW; the Ex calls with
 *             the search flags torch uses; ctypes: LoadLibraryExW found with GetProcAddress on
 *             kernel32, as Python's ctypes finds it when torch loads the runtime).
 * `guard SCENARIO [N]` runs one scenario and prints what it saw as `key value` lines on stdout;
 * the test script (scripts/windows-test.sh) runs it with and without rocmguard.exe. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

typedef int hipError_t;
#define MiB ((size_t)1 << 20)
#define hipDeviceAttributeTotalGlobalMem 84
/* hipDeviceProp_tR0600: 1472 bytes, totalGlobalMem at 288. */
#define PROP_R0600_SIZE 1472
#define PROP_TOTAL_GLOBAL_MEM 288

#define HIP_FUNCTIONS(X)                                                                  \
    X(hipError_t, hipMalloc, (void** ptr, size_t size))                                   \
    X(hipError_t, hipFree, (void* ptr))                                                   \
    X(hipError_t, hipMemGetInfo, (size_t* free_bytes, size_t* total))                     \
    X(hipError_t, hipDeviceTotalMem, (size_t* bytes, int device))                         \
    X(hipError_t, hipDeviceGetAttribute, (int* value, int attribute, int device))         \
    X(hipError_t, hipGetDevicePropertiesR0600, (void* props, int device))                 \
    X(hipError_t, hipGetLastError, (void))                                                \
    X(hipError_t, hipGetProcAddress,                                                      \
      (const char* symbol, void** pfn, int version, uint64_t flags, int* status))
#define BLAS_FUNCTIONS(X)                                                                 \
    X(int, rocblas_create_handle, (void** handle))                                        \
    X(int, rocblas_destroy_handle, (void* handle))

#ifdef LINKED
#define DECLARE(ret, name, args) __declspec(dllimport) ret name args;
HIP_FUNCTIONS(DECLARE)
BLAS_FUNCTIONS(DECLARE)
#define CALL(name) name
static void load(void) {}
#else
#define DECLARE(ret, name, args) static ret(*p_##name) args;
HIP_FUNCTIONS(DECLARE)
BLAS_FUNCTIONS(DECLARE)
#define CALL(name) p_##name

typedef HMODULE(WINAPI* LoadExW)(const wchar_t*, HANDLE, DWORD);

/* Loads sim\FILE beside this program with the call `how` names: W, A, ExW, ExA or ctypes. */
static HMODULE load_beside(const char* file, const char* how) {
    char path[MAX_PATH];
    wchar_t wide[MAX_PATH];
    DWORD n = GetModuleFileNameA(NULL, path, MAX_PATH);
    char* slash = strrchr(path, '\\');
    if (n == 0 || !slash) exit(90);
    snprintf(slash + 1, MAX_PATH - (slash + 1 - path), "sim\\%s", file);
    MultiByteToWideChar(CP_ACP, 0, path, -1, wide, MAX_PATH);
    /* LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR | LOAD_LIBRARY_SEARCH_DEFAULT_DIRS */
    const DWORD flags = 0x1100;
    LoadExW by_name =
        (LoadExW)(void (*)(void))GetProcAddress(GetModuleHandleW(L"kernel32.dll"), "LoadLibraryExW");
    HMODULE m = !strcmp(how, "ctypes") ? by_name(wide, NULL, flags)
                : !strcmp(how, "A")     ? LoadLibraryA(path)
                : !strcmp(how, "ExA") ? LoadLibraryExA(path, NULL, flags)
                : !strcmp(how, "ExW") ? LoadLibraryExW(wide, NULL, flags)
                                      : LoadLibraryW(wide);
    if (!m) {
        fprintf(stderr, "cannot load %s with LoadLibrary%s: error %lu\n", path, how, GetLastError());
        exit(91);
    }
    return m;
}

#define FIND(ret, name, args)                                                   \
    if (!(p_##name = (ret(*) args)(void (*)(void))GetProcAddress(lib, #name))) { \
        fprintf(stderr, "no %s\n", #name);                                      \
        exit(92);                                                               \
    }

static void load(void) {
    const char* how = getenv("GUARD_LOADER") ? getenv("GUARD_LOADER") : "W";
    HMODULE lib = load_beside("amdhip64_6.dll", how);
    HIP_FUNCTIONS(FIND)
    lib = load_beside("rocblas.dll", how);
    BLAS_FUNCTIONS(FIND)
}
#endif

#define OK(call)                                                                   \
    do {                                                                           \
        hipError_t e_ = (call);                                                    \
        if (e_ != 0) {                                                             \
            fprintf(stderr, "FAILED %s:%d: %s returned %d\n", __FILE__, __LINE__, #call, e_); \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

/* The capped view and refusal past the cap (run with a 1 GiB cap on a 16 GiB device). */
static void cap(void) {
    size_t free_b = 0, total_b = 0, dev_total = 0, prop_total = 0;
    int attr = 0;
    unsigned char props[PROP_R0600_SIZE];
    OK(CALL(hipMemGetInfo)(&free_b, &total_b));
    OK(CALL(hipDeviceTotalMem)(&dev_total, 0));
    OK(CALL(hipDeviceGetAttribute)(&attr, hipDeviceAttributeTotalGlobalMem, 0));
    OK(CALL(hipGetDevicePropertiesR0600)(props, 0));
    memcpy(&prop_total, props + PROP_TOTAL_GLOBAL_MEM, sizeof prop_total);
    printf("total %zu\nfree %zu\ndevice_total %zu\nattribute %d\nprops_total %zu\n", total_b,
           free_b, dev_total, attr, prop_total);
    void *a = NULL, *b = NULL, *c = NULL;
    OK(CALL(hipMalloc)(&a, 600 * MiB));
    OK(CALL(hipMemGetInfo)(&free_b, &total_b));
    printf("free_after_600MiB %zu\n", free_b);
    printf("past_cap %d\n", CALL(hipMalloc)(&b, 600 * MiB));
    printf("past_cap_pointer_null %d\n", b == NULL);
    printf("last_error_after_refusal %d\n", CALL(hipGetLastError)());
    printf("last_error_then %d\n", CALL(hipGetLastError)());
    if (b) OK(CALL(hipFree)(b));
    OK(CALL(hipFree)(a));
    OK(CALL(hipMalloc)(&c, 600 * MiB));
    printf("after_free 0\n");
    OK(CALL(hipFree)(c));
}

/* One allocation; the runtime's first allocating call fails (HIPSIM_FAIL_NTH=1). */
static void transient(void) {
    void* p = NULL;
    hipError_t e = CALL(hipMalloc)(&p, 64 * MiB);
    printf("transient %d\n", e);
    printf("last_error %d\n", CALL(hipGetLastError)());
    if (e == 0) OK(CALL(hipFree)(p));
}

/* A rocBLAS handle, whose workspace allocation fails once (HIPSIM_FAIL_NTH=1). */
static void blas(void) {
    void* h = NULL;
    int st = CALL(rocblas_create_handle)(&h);
    printf("create %d\nhandle %d\n", st, h != NULL);
    if (st == 0) printf("destroy %d\n", CALL(rocblas_destroy_handle)(h));
}

/* rocBLAS's own hipMalloc (its 32 MiB workspace) counts against a 1 GiB cap: 900 MiB + the
 * workspace + 100 MiB is over it, 900 + 100 alone is not. */
static void workspace(void) {
    void *a = NULL, *h = NULL, *b = NULL;
    OK(CALL(hipMalloc)(&a, 900 * MiB));
    printf("create %d\n", CALL(rocblas_create_handle)(&h));
    printf("after_handle %d\n", CALL(hipMalloc)(&b, 100 * MiB));
    CALL(hipGetLastError)();
}

/* The runtime's hipGetProcAddress hands out functions that are guarded too. */
static void procaddr(void) {
    hipError_t (*mall)(void**, size_t) = NULL;
    int status = -1;
    OK(CALL(hipGetProcAddress)("hipMalloc", (void**)&mall, 600, 0, &status));
    void *a = NULL, *b = NULL;
    OK(mall(&a, 600 * MiB));
    printf("procaddr_past_cap %d\n", mall(&b, 600 * MiB));
}

/* Starts this program again as `guard cap` with CreateProcessW, as a venv's python.exe starts
 * the real interpreter, and passes its exit code on; the child prints the `cap` lines. */
static int spawn(void) {
    wchar_t exe[MAX_PATH], cmd[MAX_PATH + 16];
    if (!GetModuleFileNameW(NULL, exe, MAX_PATH)) return 93;
    swprintf(cmd, sizeof cmd / sizeof cmd[0], L"\"%ls\" cap", exe);
    STARTUPINFOW si;
    PROCESS_INFORMATION pi;
    memset(&si, 0, sizeof si);
    si.cb = sizeof si;
    si.dwFlags = STARTF_USESTDHANDLES;
    si.hStdInput = GetStdHandle(STD_INPUT_HANDLE);
    si.hStdOutput = GetStdHandle(STD_OUTPUT_HANDLE);
    si.hStdError = GetStdHandle(STD_ERROR_HANDLE);
    if (!CreateProcessW(exe, cmd, NULL, NULL, TRUE, 0, NULL, NULL, &si, &pi)) {
        fprintf(stderr, "CreateProcessW failed: %lu\n", GetLastError());
        return 94;
    }
    DWORD code = 0;
    WaitForSingleObject(pi.hProcess, INFINITE);
    GetExitCodeProcess(pi.hProcess, &code);
    CloseHandle(pi.hThread);
    CloseHandle(pi.hProcess);
    printf("child_exit %lu\n", code);
    return (int)code;
}

int main(int argc, char** argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    const char* what = argc > 1 ? argv[1] : "";
    if (!strcmp(what, "spawn")) return spawn();
    load();
    if (!strcmp(what, "cap")) cap();
    else if (!strcmp(what, "transient")) transient();
    else if (!strcmp(what, "blas")) blas();
    else if (!strcmp(what, "workspace")) workspace();
    else if (!strcmp(what, "procaddr")) procaddr();
    else if (!strcmp(what, "exit")) {
        void* p = NULL;
        OK(CALL(hipMalloc)(&p, MiB));
        OK(CALL(hipFree)(p));
        return argc > 2 ? atoi(argv[2]) : 0;
    } else {
        fprintf(stderr, "usage: guard cap|transient|blas|workspace|procaddr|spawn|exit N\n");
        return 2;
    }
    return 0;
}
