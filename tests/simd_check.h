/* Small helpers for the micro-kernel and ISA dispatch tests
 * (tests/test_ukernels_*.c): a seeded random generator, failure counting,
 * the run lengths every variant is tried on, and ISA skipping. */
#ifndef GGMLITE_SIMD_CHECK_H
#define GGMLITE_SIMD_CHECK_H

#include "ggmlite.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_failures;

/* Counts and prints a failure (the first 20 of them). */
#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (!(cond)) {                                                        \
            if (check_failures++ < 20) {                                      \
                fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);         \
                fprintf(stderr, __VA_ARGS__);                                 \
                fputc('\n', stderr);                                          \
            }                                                                 \
        }                                                                     \
    } while (0)

static inline int check_report(const char *what) {
    if (check_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", what, check_failures);
        return 1;
    }
    printf("%s: all checks passed\n", what);
    return 0;
}

/* splitmix64: the same numbers on every machine. */
static uint64_t check_rng = 0x9e3779b97f4a7c15u;
static inline uint64_t rand_u64(void) {
    uint64_t z = (check_rng += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}
static inline float rand_uniform(float lo, float hi) {
    return lo + (hi - lo) * (float)((double)(rand_u64() >> 40) / (double)(1u << 24));
}
static inline int64_t rand_int(int64_t n) { return (int64_t)(rand_u64() % (uint64_t)n); }
static inline void fill_uniform(float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = rand_uniform(lo, hi);
}

/* Run lengths for a variant of tile t: 1, t-1, t, t+1, 2t+3 and two large
 * ones with tails; distinct, >= 1. Returns how many. */
static inline int tile_lengths(int tile, size_t out[8]) {
    const size_t want[] = {1, (size_t)tile - 1, (size_t)tile, (size_t)tile + 1,
                           2 * (size_t)tile + 3, 1000, 1031};
    int n = 0;
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        int dup = want[i] == 0;
        for (int j = 0; j < n; j++) dup |= out[j] == want[i];
        if (!dup) out[n++] = want[i];
    }
    return n;
}

/* False, with a message, if the CPU cannot run variant `name` of `isa`. */
static inline bool cpu_runs(gml_isa isa, const char *name) {
    if (gml_cpu_has(isa)) return true;
    printf("skip %s: this CPU lacks %s\n", name, gml_isa_name(isa));
    return false;
}

/* Bit patterns, for exact comparisons that also hold for NaN and -0. */
static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline bool same_f32(float a, float b) {
    return f32_bits(a) == f32_bits(b) || (isnan(a) && isnan(b));
}

/* Size of one unit in the last place of float v (normal v > 0). */
static inline double ulp_of(double v) {
    int e;
    frexp(v, &e);
    return ldexp(1.0, (e - 1 < -126 ? -126 : e - 1) - 23);
}

#endif /* GGMLITE_SIMD_CHECK_H */
