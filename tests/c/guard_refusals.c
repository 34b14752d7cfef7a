/* Asks for `count` blocks of `mib` MiB (arguments, default 200 x 1 MiB), keeping what it gets,
 * and prints how many were granted and refused: a program that meets the cap many times. A
 * third argument asks for one block of that many KiB first, kept too. */
#include "guard_common.h"

int main(int argc, char **argv) {
    int count = argc > 1 ? atoi(argv[1]) : 200;
    size_t mib = argc > 2 ? (size_t)atoi(argv[2]) : 1;
    int granted = 0, refused = 0;
    if (argc > 3) {
        void *p = NULL;
        if (hipMalloc(&p, (size_t)atoi(argv[3]) * 1024) != hipSuccess)
            return 1;
    }
    for (int i = 0; i < count; i++) {
        void *p = NULL;
        if (hipMalloc(&p, mib * MiB) == hipSuccess)
            granted++;
        else
            refused++;
    }
    printf("granted %d\nrefused %d\n", granted, refused);
    return 0;
}
