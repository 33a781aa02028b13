/* A tiny test harness for ggmlite's tests. Header-only: each test program
 * includes it once and ends with `return chk_summary();`.
 *
 *   CHECK(cond, fmt, ...)      records a failure (file:line, message) and goes on;
 *                              evaluates to cond, so `if (!CHECK(..)) return;`
 *   chk_case(fmt, ...)         names the case being run; failures show it
 *   chk_summary()              prints a summary; returns the exit code
 *   chk_rng                    seeded splitmix64 random numbers
 *   chk_new_input(...)         an input tensor in a chosen storage layout:
 *                              contiguous, sliced (a view at a byte offset into a
 *                              larger padded tensor whose padding is NaN), or
 *                              permuted/transposed views, possibly sliced too
 *   chk_read, chk_fill_*       read/write any-strided tensors in logical order
 *   CHECK_EQUAL(t, want, ...)  bitwise equality with a dense array
 *   CHECK_CLOSE(t, want, atol, rtol, ...)  |got - want| <= atol + rtol |want|
 *   CHECK_WITHIN(t, want, bound, ...)      |got - want| <= bound[i]
 *   CHECK_RUN(g, .outs, .n_outs, .verify, ...)  computes g at 1, 2, 3, 4 and 7
 *                              threads under the reference kernels and under the
 *                              best the CPU has (or GGMLITE_ISA's choice, or .isa);
 *                              verifies every result and that results are bitwise
 *                              identical across thread counts for each kernel set
 *   chk_quick()                the quick mode (GGMLITE_TEST_QUICK=1): set by CTest
 *                              on the heaviest tests under ASan+UBSan and under
 *                              qemu (tests/CMakeLists.txt); CHECK_RUN then runs
 *                              1, 3 and 7 threads (chk_threads), a test may also
 *                              take fewer samples; the full runs are the native
 *                              Release and OpenMP builds' (docs/testing.md)
 *
 * Elements are addressed by their flat logical index e: row-major over the
 * tensor's shape, whatever its strides. References are written as plain loops
 * over dense arrays in that order. */
#ifndef GGMLITE_TESTS_CHECK_H
#define GGMLITE_TESTS_CHECK_H

#include <ggmlite/ggmlite.h>

#include "isas.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__)
#define CHK_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define CHK_PRINTF(f, a)
#endif

#define CHK_MAX_PRINTED 60 /* failures printed in full; the rest only counted */

static struct {
    long checks, failures;
    char case_name[256]; /* set by chk_case */
    char config[64];     /* set by CHECK_RUN: kernel set and thread count */
} chk_state;

/* ---- checks -------------------------------------------------------------- */

static inline void chk_case(const char *fmt, ...) CHK_PRINTF(1, 2);
static inline void chk_case(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(chk_state.case_name, sizeof chk_state.case_name, fmt, ap);
    va_end(ap);
}

static inline void chk_vfail(const char *file, int line, const char *fmt, va_list ap) {
    chk_state.failures++;
    if (chk_state.failures > CHK_MAX_PRINTED) return;
    fprintf(stderr, "%s:%d: FAIL", file, line);
    if (chk_state.case_name[0] || chk_state.config[0])
        fprintf(stderr, " [%s%s%s]", chk_state.case_name,
                chk_state.case_name[0] && chk_state.config[0] ? " | " : "", chk_state.config);
    fprintf(stderr, ": ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

/* Records a failure of a check already counted. */
static inline void chk_fail(const char *file, int line, const char *fmt, ...) CHK_PRINTF(3, 4);
static inline void chk_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    chk_vfail(file, line, fmt, ap);
    va_end(ap);
}

static inline bool chk_check(bool ok, const char *file, int line, const char *fmt, ...)
    CHK_PRINTF(4, 5);
static inline bool chk_check(bool ok, const char *file, int line, const char *fmt, ...) {
    chk_state.checks++;
    if (ok) return true;
    va_list ap;
    va_start(ap, fmt);
    chk_vfail(file, line, fmt, ap);
    va_end(ap);
    return false;
}

/* CHECK(cond, "fmt", ...): the message should say what was expected. */
#define CHECK(cond, ...) chk_check((cond) != 0, __FILE__, __LINE__, __VA_ARGS__)

/* CHECK that string s contains sub (an error message names the op, ...). */
#define CHECK_CONTAINS(s, sub)                                                                \
    chk_check(strstr((s), (sub)) != NULL, __FILE__, __LINE__, "expected \"%s\" in \"%s\"", \
              (sub), (s))

static inline int chk_summary(void) {
    if (chk_state.checks == 0) {
        fprintf(stderr, "FAIL: no checks ran\n");
        return 1;
    }
    if (chk_state.failures > CHK_MAX_PRINTED)
        fprintf(stderr, "(%ld more failures not shown)\n", chk_state.failures - CHK_MAX_PRINTED);
    printf("%ld checks, %ld failed\n", chk_state.checks, chk_state.failures);
    return chk_state.failures ? 1 : 0;
}

/* ---- random numbers ------------------------------------------------------- */

typedef struct chk_rng {
    uint64_t s;
} chk_rng;

static inline chk_rng chk_seed(uint64_t seed) { return (chk_rng){seed}; }

static inline uint64_t chk_next(chk_rng *r) { /* splitmix64 */
    uint64_t z = (r->s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi] (in double, so hi - lo may exceed FLT_MAX). */
static inline float chk_uniform(chk_rng *r, float lo, float hi) {
    double u = (double)(chk_next(r) >> 11) * 0x1p-53;
    return (float)((double)lo + ((double)hi - (double)lo) * u);
}

/* Uniform integer in [lo, hi]. */
static inline int chk_randint(chk_rng *r, int lo, int hi) {
    return lo + (int)(chk_next(r) % (uint64_t)(hi - lo + 1));
}

/* ---- element access (written here, independent of the library) ---------- */

/* Flat logical index e -> the 4 right-aligned indices of t. */
static inline void chk_index(const gml_tensor *t, int64_t e, int64_t i[GML_MAX_DIMS]) {
    for (int d = GML_MAX_DIMS - 1; d >= 0; d--) {
        i[d] = e % t->ne[d];
        e /= t->ne[d];
    }
}

static inline void *chk_at(const gml_tensor *t, int64_t e) {
    int64_t i[GML_MAX_DIMS];
    chk_index(t, e, i);
    char *p = t->data;
    for (int d = 0; d < GML_MAX_DIMS; d++) p += i[d] * (int64_t)t->nb[d];
    return p;
}

static inline int64_t chk_numel(const gml_tensor *t) {
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

/* "[1,0,3]": the index of element e as the tensor's n_dims entries. */
static inline const char *chk_fmt_index(const gml_tensor *t, int64_t e, char *buf, size_t size) {
    int64_t i[GML_MAX_DIMS];
    chk_index(t, e, i);
    size_t k = (size_t)snprintf(buf, size, "[");
    for (int d = GML_MAX_DIMS - t->n_dims; d < GML_MAX_DIMS && k < size; d++)
        k += (size_t)snprintf(buf + k, size - k, "%s%lld", d > GML_MAX_DIMS - t->n_dims ? "," : "",
                              (long long)i[d]);
    if (k < size) snprintf(buf + k, size - k, "]");
    return buf;
}

static inline const char *chk_shape(const gml_tensor *t, char *buf, size_t size) {
    return t ? gml_format_shape(t, buf, size) : "(null)";
}

/* Copies every element (4 bytes) between t and dense, in logical order. */
static inline void chk_copy(const gml_tensor *t, void *dense, bool to_tensor) {
    char *d = dense;
    for (int64_t i0 = 0; i0 < t->ne[0]; i0++)
        for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
            for (int64_t i2 = 0; i2 < t->ne[2]; i2++) {
                char *row = (char *)t->data + i0 * (int64_t)t->nb[0] + i1 * (int64_t)t->nb[1] +
                            i2 * (int64_t)t->nb[2];
                for (int64_t i3 = 0; i3 < t->ne[3]; i3++, d += 4) {
                    char *p = row + i3 * (int64_t)t->nb[3];
                    if (to_tensor) memcpy(p, d, 4);
                    else memcpy(d, p, 4);
                }
            }
}

static inline void chk_read(const gml_tensor *t, void *out) { chk_copy(t, out, false); }
static inline void chk_write(gml_tensor *t, const void *in) { chk_copy(t, (void *)in, true); }

/* A malloc'd dense copy of t (f32 or i32). */
static inline void *chk_dense(const gml_tensor *t) {
    void *out = malloc((size_t)chk_numel(t) * 4);
    if (!out) abort();
    chk_read(t, out);
    return out;
}

static inline void chk_fill_uniform(gml_tensor *t, chk_rng *r, float lo, float hi) {
    float *v = malloc((size_t)chk_numel(t) * sizeof *v);
    for (int64_t e = 0; e < chk_numel(t); e++) v[e] = chk_uniform(r, lo, hi);
    chk_write(t, v);
    free(v);
}

static inline void chk_fill_int(gml_tensor *t, chk_rng *r, int lo, int hi) {
    int32_t *v = malloc((size_t)chk_numel(t) * sizeof *v);
    for (int64_t e = 0; e < chk_numel(t); e++) v[e] = chk_randint(r, lo, hi);
    chk_write(t, v);
    free(v);
}

static inline void chk_fill_value(gml_tensor *t, float x) {
    float *v = malloc((size_t)chk_numel(t) * sizeof *v);
    for (int64_t e = 0; e < chk_numel(t); e++) v[e] = x;
    chk_write(t, v);
    free(v);
}

/* A quiet NaN with a recognisable payload, for padding and unwritten outputs. */
#define CHK_POISON_BITS 0x7fc0dead

static inline void chk_poison_bytes(void *p, size_t n) {
    const uint32_t bits = CHK_POISON_BITS;
    for (size_t k = 0; k + 4 <= n; k += 4) memcpy((char *)p + k, &bits, 4);
}

/* ---- inputs in non-contiguous layouts ------------------------------------- */

typedef enum chk_layout {
    CHK_CONTIGUOUS,
    CHK_SLICED,            /* view at a byte offset into a larger tensor, padded on every dim */
    CHK_TRANSPOSED,        /* last two dims swapped in storage: a transpose(-2, -1) view */
    CHK_REVERSED,          /* all dims reversed in storage: permute(n-1, .., 0) */
    CHK_OUTER_SWAPPED,     /* first two dims swapped in storage; rows stay contiguous */
    CHK_SLICED_TRANSPOSED, /* a transposed view of a sliced view */
    CHK_N_LAYOUTS
} chk_layout;

static inline const char *chk_layout_name(chk_layout l) {
    static const char *const names[CHK_N_LAYOUTS] = {"contiguous", "sliced", "transposed",
                                                     "reversed", "outer-swapped", "sliced+transposed"};
    return (unsigned)l < CHK_N_LAYOUTS ? names[l] : "?";
}

/* A tensor of logical shape ne[0..n-1] stored as `layout` says, named name.
 * Its elements are uninitialized; the padding of sliced layouts is NaN (or a
 * huge i32), so reading outside the view shows up in results. Permuted
 * layouts whose permutation is the identity (1-D, or 2-D outer-swapped) are
 * sliced instead, so only CHK_CONTIGUOUS gives a contiguous tensor. */
static inline gml_tensor *chk_new_layout(gml_context *ctx, gml_type type, int n, const int64_t *ne,
                                         chk_layout layout, const char *name) {
    int perm[GML_MAX_DIMS];
    for (int d = 0; d < n; d++) perm[d] = d;
    bool slice = layout == CHK_SLICED || layout == CHK_SLICED_TRANSPOSED;
    if ((layout == CHK_TRANSPOSED || layout == CHK_SLICED_TRANSPOSED) && n >= 2) {
        perm[n - 2] = n - 1;
        perm[n - 1] = n - 2;
    } else if (layout == CHK_REVERSED) {
        for (int d = 0; d < n; d++) perm[d] = n - 1 - d;
    } else if (layout == CHK_OUTER_SWAPPED && n >= 3) {
        perm[0] = 1;
        perm[1] = 0;
    }
    bool identity = true;
    for (int d = 0; d < n; d++) identity = identity && perm[d] == d;
    if (identity && layout != CHK_CONTIGUOUS) slice = true;

    /* storage shape: dim d of storage holds logical dim perm[d] (perm is its own inverse) */
    int64_t st[GML_MAX_DIMS];
    for (int d = 0; d < n; d++) st[d] = ne[perm[d]];
    gml_tensor *t;
    if (slice) {
        /* padded on both sides of every dim: 1 before outer dims, 2 before the last */
        int64_t big[GML_MAX_DIMS];
        for (int d = 0; d < n; d++) big[d] = st[d] + (d == n - 1 ? 5 : 2);
        gml_tensor *b = gml_new_tensor(ctx, type, n, big);
        if (!b) return NULL;
        gml_set_name(b, "padded");
        if (b->data) chk_poison_bytes(b->data, gml_nbytes(b));
        size_t nb[GML_MAX_DIMS], offset = 0;
        for (int d = 0; d < n; d++) {
            nb[d] = b->nb[GML_MAX_DIMS - n + d];
            offset += (d == n - 1 ? 2 : 1) * nb[d];
        }
        t = gml_view(ctx, b, n, st, nb, offset);
    } else {
        t = gml_new_tensor(ctx, type, n, st);
    }
    if (t && !identity) t = gml_permute(ctx, t, perm);
    return gml_set_name(t, name);
}

/* chk_new_layout filled with uniform values in [lo, hi) (f32) or integers in
 * [lo, hi] (i32). */
static inline gml_tensor *chk_new_input(gml_context *ctx, gml_type type, int n, const int64_t *ne,
                                        chk_layout layout, const char *name, chk_rng *r, float lo,
                                        float hi) {
    gml_tensor *t = chk_new_layout(ctx, type, n, ne, layout, name);
    if (t && t->data) {
        if (type == GML_F32) chk_fill_uniform(t, r, lo, hi);
        else chk_fill_int(t, r, (int)lo, (int)hi);
    }
    return t;
}

/* ---- comparisons ----------------------------------------------------------- */

static inline void chk_fmt_elem(const gml_tensor *t, const void *p, char *buf, size_t size) {
    if (t->type == GML_I32) {
        int32_t v;
        memcpy(&v, p, 4);
        snprintf(buf, size, "%d", (int)v);
    } else {
        float v;
        memcpy(&v, p, 4);
        snprintf(buf, size, "%.9g", (double)v);
    }
}

/* Bitwise equality of every element of t with want (dense, 4-byte elements). */
static inline bool chk_equal(const char *file, int line, const gml_tensor *t, const void *want,
                             const char *fmt, ...) CHK_PRINTF(5, 6);
static inline bool chk_equal(const char *file, int line, const gml_tensor *t, const void *want,
                             const char *fmt, ...) {
    chk_state.checks++;
    int64_t n = chk_numel(t), bad = 0, first = -1;
    char *dense = chk_dense(t);
    for (int64_t e = 0; e < n; e++)
        if (memcmp(dense + 4 * e, (const char *)want + 4 * e, 4) != 0 && bad++ == 0) first = e;
    free(dense);
    if (!bad) return true;
    char what[256], idx[64], got[32], exp[32], shape[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    chk_fmt_elem(t, chk_at(t, first), got, sizeof got);
    chk_fmt_elem(t, (const char *)want + 4 * first, exp, sizeof exp);
    chk_fail(file, line, "%s: %lld of %lld elements of '%s' %s differ; first at %s: got %s, want %s",
             what, (long long)bad, (long long)n, t->name, chk_shape(t, shape, sizeof shape),
             chk_fmt_index(t, first, idx, sizeof idx), got, exp);
    return false;
}

/* |got - want| <= tol for every element, tol = bound[e] if bound, else
 * atol + rtol |want|. An infinite want must be matched exactly, a NaN want
 * by a NaN (any payload); a NaN got where want is a number never passes.
 * Reports the worst element (largest |diff| / tol). */
static inline bool chk_close(const char *file, int line, const gml_tensor *t, const double *want,
                             const double *bound, double atol, double rtol, const char *fmt, ...)
    CHK_PRINTF(8, 9);
static inline bool chk_close(const char *file, int line, const gml_tensor *t, const double *want,
                             const double *bound, double atol, double rtol, const char *fmt, ...) {
    chk_state.checks++;
    int64_t n = chk_numel(t), bad = 0, worst = -1;
    double worst_ratio = 0, worst_tol = 0;
    float *dense = chk_dense(t);
    for (int64_t e = 0; e < n; e++) {
        double got = dense[e], w = want[e];
        double tol = bound ? bound[e] : atol + rtol * fabs(w);
        double ratio;
        if (isnan(w)) ratio = isnan(got) ? 0 : INFINITY; /* else |got - NaN| passes */
        else if (isinf(w)) ratio = got == w ? 0 : INFINITY;
        else if (isnan(got) || isinf(got)) ratio = INFINITY;
        else ratio = fabs(got - w) / (tol > 0 ? tol : 1e-300);
        if (ratio > 1) bad++;
        if (ratio > 1 && (worst < 0 || ratio > worst_ratio)) {
            worst = e;
            worst_ratio = ratio;
            worst_tol = tol;
        }
    }
    free(dense);
    if (!bad) return true;
    char what[256], idx[64], shape[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    double got = *(const float *)chk_at(t, worst);
    chk_fail(file, line,
             "%s: %lld of %lld elements of '%s' %s off; worst at %s: got %.9g, want %.9g "
             "(|diff| %.3g > tol %.3g)", what, (long long)bad, (long long)n, t->name,
             chk_shape(t, shape, sizeof shape), chk_fmt_index(t, worst, idx, sizeof idx), got,
             want[worst], fabs(got - want[worst]), worst_tol);
    return false;
}

/* Two arrays of n floats: bitwise equal (bitwise), else max |got - want| <=
 * tol max |want| (a NaN never passes). Returns max |got - want| / max |want|
 * (0 when want is all zeros), for a test's worst-case summary. */
static inline double chk_rel_close(const char *file, int line, const float *got, const float *want,
                                   int64_t n, bool bitwise, double tol, const char *what) {
    double err = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - want[i]);
        err = d > err || isnan(d) ? d : err;
        scale = fabs(want[i]) > scale ? fabs(want[i]) : scale;
    }
    if (bitwise)
        chk_check(memcmp(got, want, (size_t)n * sizeof *got) == 0, file, line,
                  "%s: not bitwise equal (max err %.3g)", what, err);
    else
        chk_check(err <= tol * scale, file, line, "%s: max |got - want| %.3g > %g of max |want| %.4g",
                  what, err, tol, scale);
    return scale > 0 ? err / scale : 0;
}
#define CHECK_REL_CLOSE(got, want, n, bitwise, tol, what) \
    chk_rel_close(__FILE__, __LINE__, (got), (want), (n), (bitwise), (tol), (what))

#define CHECK_EQUAL(t, want, ...) chk_equal(__FILE__, __LINE__, (t), (want), __VA_ARGS__)
#define CHECK_CLOSE(t, want, atol, rtol, ...) \
    chk_close(__FILE__, __LINE__, (t), (want), NULL, (atol), (rtol), __VA_ARGS__)
#define CHECK_WITHIN(t, want, bound, ...) \
    chk_close(__FILE__, __LINE__, (t), (want), (bound), 0, 0, __VA_ARGS__)

/* ---- running graphs --------------------------------------------------------- */

static const int CHK_THREADS[] = {1, 2, 3, 4, 7};

/* The quick mode: GGMLITE_TEST_QUICK set to anything but "" or "0". */
static inline bool chk_quick(void) {
    const char *q = getenv("GGMLITE_TEST_QUICK");
    return q && q[0] && strcmp(q, "0") != 0;
}

/* The thread counts a test runs: CHK_THREADS, or in the quick mode 1, 3
 * and 7 (one thread, an odd split, more threads than rows of small
 * shapes: the splits whose bounds and tails differ most). Sets *n. */
static inline const int *chk_threads(int *n) {
    static const int quick[] = {1, 3, 7};
    if (chk_quick()) {
        *n = (int)(sizeof quick / sizeof *quick);
        return quick;
    }
    *n = (int)(sizeof CHK_THREADS / sizeof *CHK_THREADS);
    return CHK_THREADS;
}

/* The kernel sets CHECK_RUN tries: the reference kernels, then the ISA in
 * effect when the program started, which is the best the CPU has
 * (GML_ISA_AUTO) unless GGMLITE_ISA names another, so that
 * `GGMLITE_ISA=avx2 ctest` runs every test against the AVX2 kernels (a run
 * may name another, chk_run_args.isa). Fills sets and returns how many (1
 * when that ISA is the reference). The first call must come before a test
 * changes the ISA. */
static inline int chk_kernel_sets(gml_isa sets[2]) {
    static gml_isa initial = GML_ISA_AUTO; /* AUTO: not asked yet (gml_get_isa never returns it) */
    if (initial == GML_ISA_AUTO) initial = gml_get_isa();
    sets[0] = GML_ISA_REFERENCE;
    sets[1] = initial;
    return initial == GML_ISA_REFERENCE ? 1 : 2;
}

typedef struct chk_run_args {
    gml_tensor *const *outs;    /* results compared bitwise across thread counts */
    int n_outs;
    void (*before)(void *user); /* optional: reset state before each compute */
    void (*verify)(void *user); /* optional: check the results after each compute */
    void *user;
    gml_isa isa;                /* optional: the kernels besides the reference; unset
                                   (GML_ISA_AUTO): those in effect at the start */
    bool no_reference;          /* optional: those kernels only (the caller ran the
                                   reference kernels on this graph and data already) */
} chk_run_args;

/* Every node that owns its data gets NaN before each compute, so an element
 * a kernel forgets to write shows up. */
static inline void chk_poison_nodes(const gml_graph *g) {
    for (int i = 0; i < gml_graph_n_nodes(g); i++) {
        gml_tensor *t = gml_graph_node(g, i);
        if (!gml_is_view(t) && t->data) chk_poison_bytes(t->data, gml_nbytes(t));
    }
}

static inline bool chk_run(const char *file, int line, gml_graph *g, chk_run_args a) {
    long failures_before = chk_state.failures;
    gml_isa sets[2];
    int n_sets = chk_kernel_sets(sets);
    if (a.isa != GML_ISA_AUTO) { /* the caller's kernels instead of the initial ones */
        sets[1] = a.isa;
        n_sets = a.isa == GML_ISA_REFERENCE ? 1 : 2;
    }
    const gml_isa saved = gml_get_isa();
    void **first = calloc((size_t)(a.n_outs > 0 ? a.n_outs : 1), sizeof *first);
    if (!chk_check(g != NULL, file, line, "CHECK_RUN: no graph")) {
        free(first);
        return false;
    }
    for (int s = a.no_reference && n_sets > 1 ? 1 : 0; s < n_sets; s++) {
        if (!chk_check(gml_set_isa(sets[s]) == GML_OK, file, line, "gml_set_isa(%s)", gml_isa_name(sets[s])))
            continue;
        int n_threads;
        const int *threads = chk_threads(&n_threads);
        for (int k = 0; k < n_threads; k++) {
            int nth = threads[k];
            snprintf(chk_state.config, sizeof chk_state.config, "%s kernels, %d thread%s",
                     gml_isa_name(sets[s]), nth, nth > 1 ? "s" : "");
            chk_poison_nodes(g);
            if (a.before) a.before(a.user);
            gml_status st = gml_graph_compute(g, nth);
            if (!chk_check(st == GML_OK, file, line, "compute failed (status %d): %s", (int)st,
                           gml_graph_error(g)))
                continue;
            if (a.verify) a.verify(a.user);
            for (int o = 0; o < a.n_outs; o++) {
                const gml_tensor *t = a.outs[o];
                if (k == 0) {
                    free(first[o]);
                    first[o] = chk_dense(t);
                } else if (first[o]) {
                    chk_equal(file, line, t, first[o], "result differs from the 1-thread result");
                }
            }
        }
        for (int o = 0; o < a.n_outs; o++) {
            free(first[o]);
            first[o] = NULL;
        }
    }
    chk_state.config[0] = '\0';
    gml_set_isa(saved);
    free(first);
    return chk_state.failures == failures_before;
}

/* CHECK_RUN(g, .outs = outs, .n_outs = 1, .verify = fn, .user = &data) */
#define CHECK_RUN(g, ...) chk_run(__FILE__, __LINE__, (g), (chk_run_args){__VA_ARGS__})

/* Context sized generously for a test case; aborts the program if malloc fails. */
static inline gml_context *chk_ctx(size_t mem_size) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = mem_size});
    if (!ctx) {
        fprintf(stderr, "cannot allocate a %zu-byte context\n", mem_size);
        exit(2);
    }
    return ctx;
}

#endif /* GGMLITE_TESTS_CHECK_H */
