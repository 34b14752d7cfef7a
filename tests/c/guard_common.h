/* Helpers of the guard test programs: each check prints what failed and exits non-zero. */
#ifndef GUARD_COMMON_H
#define GUARD_COMMON_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hip_subset.h"
#include "hipsim.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "FAILED %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
            exit(1);                                                       \
        }                                                                  \
    } while (0)

#define OK(call) CHECK((call) == hipSuccess, "%s", "call failed")

static inline struct hipsimCounters counters(void) {
    struct hipsimCounters c;
    hipsimCounters(&c);
    return c;
}
#endif
