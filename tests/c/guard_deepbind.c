/* A program with no HIP link that dlopens a module linked against the HIP runtime with
 * RTLD_DEEPBIND (as some plugins and bindings do): the module's own dependencies, the runtime
 * among them, come before the preloaded shim in its lookups. Prints `key value` lines for
 * tests/tests/guard_deepbind.rs.
 *
 * Usage: guard_deepbind MODULE deep|lazy|plain|refuse: RTLD_NOW|RTLD_DEEPBIND,
 * RTLD_LAZY|RTLD_DEEPBIND, RTLD_NOW alone, or RTLD_NOW|RTLD_DEEPBIND with every
 * mprotect(PROT_READ|PROT_WRITE) refused (a seccomp filter), as a hardened system might. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB ((size_t)1 << 20)

/* The module defines it too: under RTLD_DEEPBIND its own copy wins over this exported one. */
int deepbind_probe_target(void) { return 0; }

static const char* module_path;
static unsigned long relro_start, relro_end;

static int find_relro(struct dl_phdr_info* info, size_t size, void* data) {
    (void)size;
    (void)data;
    if (!info->dlpi_name || strcmp(info->dlpi_name, module_path) != 0) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr)* p = &info->dlpi_phdr[i];
        if (p->p_type == PT_GNU_RELRO) {
            /* glibc protects whole pages: start and end rounded down. */
            relro_start = (info->dlpi_addr + p->p_vaddr) & ~4095UL;
            relro_end = (info->dlpi_addr + p->p_vaddr + p->p_memsz) & ~4095UL;
        }
    }
    return 1;
}

/* -1 when the module has no RELRO page, else whether any of its RELRO pages is writable. */
static int relro_writable(void) {
    dl_iterate_phdr(find_relro, NULL);
    if (relro_end <= relro_start) return -1;
    FILE* maps = fopen("/proc/self/maps", "r");
    if (!maps) return -2;
    char line[512];
    int writable = 0;
    while (fgets(line, sizeof line, maps)) {
        unsigned long start, end;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &start, &end, perms) != 3) continue;
        if (start < relro_end && end > relro_start && perms[1] == 'w') writable = 1;
    }
    fclose(maps);
    return writable;
}

/* From here on mprotect(..., PROT_READ|PROT_WRITE) fails with EPERM. */
static int refuse_writable_mprotect(void) {
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mprotect, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PROT_READ | PROT_WRITE, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 1 /* EPERM */),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof filter / sizeof filter[0], filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    module_path = argv[1];
    int flags = RTLD_NOW;
    if (strcmp(argv[2], "deep") == 0) flags = RTLD_NOW | RTLD_DEEPBIND;
    if (strcmp(argv[2], "lazy") == 0) flags = RTLD_LAZY | RTLD_DEEPBIND;
    if (strcmp(argv[2], "refuse") == 0) {
        flags = RTLD_NOW | RTLD_DEEPBIND;
        if (refuse_writable_mprotect() != 0) {
            perror("seccomp");
            return 1;
        }
    }
    void* module = dlopen(module_path, flags);
    if (!module) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    int (*probe)(void) = (int (*)(void))dlsym(module, "deep_probe");
    int (*info)(size_t*, size_t*) = (int (*)(size_t*, size_t*))dlsym(module, "deep_info");
    int (*alloc)(size_t, void**) = (int (*)(size_t, void**))dlsym(module, "deep_malloc");
    int (*release)(void*) = (int (*)(void*))dlsym(module, "deep_free");
    int (*by_dlsym)(size_t) = (int (*)(size_t))dlsym(module, "deep_dlsym_malloc");
    int (*by_default)(size_t) = (int (*)(size_t))dlsym(module, "deep_default_malloc");
    int (*next_found)(void) = (int (*)(void))dlsym(module, "deep_next_found");
    if (!probe || !info || !alloc || !release || !by_dlsym || !by_default || !next_found) {
        fprintf(stderr, "module functions missing\n");
        return 1;
    }
    printf("probe %d\n", probe());
    size_t free_b = 0, total = 0;
    if (info(&free_b, &total) != 0) return 1;
    printf("total %zu\nfree %zu\n", total, free_b);
    void *a = NULL, *b = NULL;
    printf("first %d\n", alloc(600 * MiB, &a));
    if (info(&free_b, &total) != 0) return 1;
    printf("free_after_600MiB %zu\n", free_b);
    printf("second %d\n", alloc(600 * MiB, &b));
    printf("dlsym_600MiB %d\n", by_dlsym(600 * MiB));
    printf("default_600MiB %d\n", by_default(600 * MiB));
    printf("next_found %d\n", next_found());
    if (a) printf("free_first %d\n", release(a));
    if (b) release(b);
    printf("relro_writable %d\n", relro_writable());
    return 0;
}
