/* Small helpers for the micro-kernel and ISA dispatch tests
 * (tests/test_ukernels_*.c): a seeded random generator, failure counting,
 * the run lengths every variant is tried on, and ISA skipping. */
#ifndef GGMLITE_SIMD_CHECK_H
#define GGMLITE_SIMD_CHECK_H

#include <ggmlite/ggmlite.h>

#include "isas.h"

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

/* Run lengths for a variant of tile t (two vectors for the u16/u32
 * variants): 1, t/2-1, t/2, t/2+1, t-1, t, t+1, 2t+3 and two large ones
 * with tails; distinct, >= 1. Returns how many. */
static inline int tile_lengths(int tile, size_t out[12]) {
    const int64_t t = tile;
    const int64_t want[] = {1, t / 2 - 1, t / 2, t / 2 + 1, t - 1, t, t + 1, 2 * t + 3, 1000, 1031};
    int n = 0;
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        bool dup = want[i] < 1;
        for (int j = 0; j < n; j++) dup |= out[j] == (size_t)want[i];
        if (!dup) out[n++] = (size_t)want[i];
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

/* ---- op level: one graph under every ISA and thread count ------------- */

/* Copies t's elements (any strides, 4-byte) into buf in logical order. */
static inline void read_elems(const gml_tensor *t, uint32_t *buf) {
    size_t k = 0;
    for (int64_t i0 = 0; i0 < t->ne[0]; i0++)
        for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
            for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
                for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
                    memcpy(&buf[k++], (const char *)t->data + i0 * t->nb[0] + i1 * t->nb[1] +
                                          i2 * t->nb[2] + i3 * t->nb[3], 4);
}

/* Sets t's elements to a NaN pattern, so elements a kernel forgets show. */
static inline void poison_elems(gml_tensor *t) {
    const uint32_t nan = 0x7fc0dead;
    for (int64_t i0 = 0; i0 < t->ne[0]; i0++)
        for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
            for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
                for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
                    memcpy((char *)t->data + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] +
                               i3 * t->nb[3], &nan, 4);
}

/* Computes g with isa and nth threads; out's elements into buf. */
static inline bool compute_with(gml_graph *g, gml_tensor *out, gml_isa isa, int nth,
                                uint32_t *buf) {
    if (gml_set_isa(isa) != GML_OK) return false;
    poison_elems(out);
    gml_status st = gml_graph_compute(g, nth);
    gml_set_isa(GML_ISA_AUTO);
    CHECK(st == GML_OK, "compute (%s, %d threads): %s", gml_isa_name(isa), nth,
          gml_graph_error(g));
    read_elems(out, buf);
    return st == GML_OK;
}

/* How fast results may differ from the reference: exactly (copies, gathers,
 * add, mul), or by rel * |ref| + abs (softmax). Returns the largest relative
 * difference seen where |ref| >= 1e-30. */
typedef struct {
    bool exact;
    double rel, abs;
} tolerance;

/* Runs out's graph under REFERENCE (the truth), then under SCALAR, AVX2,
 * AVX512 and NEON (skipping, with a message, those the CPU lacks) at 1, 2 and 3
 * threads: each within tol of the reference, and bitwise equal across
 * thread counts. `what` names the case in messages. */
static inline double check_isas(gml_context *ctx, gml_tensor *out, tolerance tol,
                                const char *what) {
    double worst = 0;
    gml_graph *g = gml_build_graph(ctx, &out, 1);
    CHECK(g != NULL, "%s: build: %s", what, gml_last_error(ctx));
    if (!g) return worst;
    const size_t n = (size_t)gml_nelements(out);
    uint32_t *ref = malloc(n * 4), *first = malloc(n * 4), *got = malloc(n * 4);
    compute_with(g, out, GML_ISA_REFERENCE, 1, ref);
    const gml_isa isas[] = {GML_TEST_ISAS};
    for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
        if (!gml_cpu_has(isas[k])) {
            printf("skip %s under %s: this CPU lacks it\n", what, gml_isa_name(isas[k]));
            continue;
        }
        for (int nth = 1; nth <= 3; nth++) {
            if (!compute_with(g, out, isas[k], nth, nth == 1 ? first : got)) continue;
            const uint32_t *y = nth == 1 ? first : got;
            int bad = 0;
            for (size_t i = 0; i < n && bad < 3; i++) {
                if (nth > 1) { /* bitwise as with one thread */
                    if (y[i] != first[i]) {
                        bad++;
                        CHECK(false, "%s (%s): element %zu differs between 1 and %d threads: "
                              "%08x vs %08x", what, gml_isa_name(isas[k]), i, nth, first[i], y[i]);
                    }
                    continue;
                }
                float a, b;
                memcpy(&a, &y[i], 4);
                memcpy(&b, &ref[i], 4);
                bool ok;
                if (tol.exact || isnan(b) || isinf(b)) {
                    ok = y[i] == ref[i] || (isnan(a) && isnan(b));
                } else {
                    const double d = fabs((double)a - b);
                    ok = d <= tol.rel * fabs(b) + tol.abs;
                    if (fabs(b) >= 1e-30 && d / fabs(b) > worst) worst = d / fabs(b);
                }
                if (!ok) {
                    bad++;
                    CHECK(false, "%s (%s): element %zu is %.9g, the reference %.9g", what,
                          gml_isa_name(isas[k]), i, (double)a, (double)b);
                }
            }
        }
    }
    free(ref);
    free(first);
    free(got);
    gml_graph_free(g);
    return worst;
}

#endif /* GGMLITE_SIMD_CHECK_H */
