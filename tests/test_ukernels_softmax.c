/* Softmax: every micro-kernel variant (ops/softmax.inc) against a softmax
 * computed here in double, then the op under every ISA against its
 * reference kernel, on strided and broadcast inputs at 1-3 threads. */
#include "../ops/ukernels.h"
#include "simd_check.h"

/* Micro-kernels within this relative error of the double softmax of the
 * same float scores (the float subtraction of the max included). */
#define UKERNEL_REL_TOL 1e-6
/* The op within this of its reference kernel (expf, double sums). */
#define OP_REL_TOL 1e-6
#define OP_ABS_TOL 1e-30

typedef struct {
    gml_isa isa;
    gml_f32_softmax_ukernel *fn;
    int tile;
    const char *name;
} variant;

#define ENTRY(isa, fn, tile) {isa, fn, tile, #fn},
static const variant VARIANTS[] = {GML_F32_SOFTMAX_UKERNELS(ENTRY)};

/* The definition, in double from the float scores v = x*scale (+ mask) and
 * their float differences v - max, as every kernel forms them; the
 * contract of ggmlite.h (MASKS): a key whose mask is -inf is hidden (weight
 * 0, whatever x holds), a non-finite score at a key not hidden (a -inf x
 * among them: it is an overflow, not a mask) makes the row NaN. */
static float score(const float *x, const float *mask, float scale, size_t i, bool *nan) {
    if (mask && mask[i] == -INFINITY) return -INFINITY;
    float v = x[i] * scale;
    if (mask) v += mask[i];
    *nan |= !isfinite(v);
    return isfinite(v) ? v : -INFINITY;
}
static void softmax_double(size_t n, const float *x, const float *mask, float scale, double *out) {
    float max = -INFINITY;
    bool nan = false;
    for (size_t i = 0; i < n; i++) {
        const float v = score(x, mask, scale, i, &nan);
        if (v > max) max = v;
    }
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        const float v = score(x, mask, scale, i, &nan);
        out[i] = max == -INFINITY || v == -INFINITY ? 0.0 : exp((double)(v - max));
        sum += out[i];
    }
    /* a NaN score makes the row NaN (even when no other key is visible);
     * else no score above -inf means all keys masked: zeros */
    for (size_t i = 0; i < n; i++)
        out[i] = nan ? NAN : max == -INFINITY ? 0.0 : out[i] / sum;
}

enum { PLAIN, MASKED, ALL_MASKED, LARGE, ONE_KEY, NAN_SCORE, INF_SCORES, ONLY_NAN, GARBAGE,
       OVERFLOW, NEG_SCALE, N_CASES };
static const char *const CASE_NAMES[] = {"plain",           "masked",      "all masked",
                                         "large magnitudes", "one visible key", "a NaN score",
                                         "-inf scores",      "only a NaN visible",
                                         "NaN/inf x at -inf mask keys",
                                         "x * scale overflowing to -inf",
                                         "-inf x, negative scale"};

/* One row of a case; returns the largest relative error seen. */
static double check_row(const variant *v, size_t n, int c) {
    const size_t pad = 40;
    float *x = malloc(n * sizeof *x), *mask = malloc(n * sizeof *mask);
    float *out = malloc((n + pad) * sizeof *out);
    double *want = malloc(n * sizeof *want);
    float scale = c == LARGE ? 1.0f : 0.125f + (float)rand_uniform(0, 1);
    fill_uniform(x, n, c == LARGE ? -3e4f : -6.0f, c == LARGE ? 3e4f : 6.0f);
    if (c == OVERFLOW) scale = 2.0f;
    if (c == NEG_SCALE) scale = -scale;
    bool use_mask = c == MASKED || c == ALL_MASKED || c == LARGE || c == ONE_KEY || c == ONLY_NAN ||
                    c == GARBAGE;
    for (size_t i = 0; i < n; i++) {
        switch (c) {
        case GARBAGE:
            mask[i] = rand_int(10) < 3 ? -INFINITY : rand_uniform(-2, 2);
            if (mask[i] == -INFINITY) x[i] = rand_int(3) == 0 ? NAN : rand_int(2) ? INFINITY : -3e38f;
            break;
        case OVERFLOW: x[i] = rand_int(50) == 0 ? -3e38f : x[i]; break;
        case NEG_SCALE: x[i] = rand_int(3) == 0 ? -INFINITY : x[i]; break;
        case MASKED: mask[i] = rand_int(10) < 3 ? -INFINITY : rand_uniform(-2, 2); break;
        case LARGE: mask[i] = rand_int(10) < 1 ? -INFINITY : 0.0f; break;
        case INF_SCORES: x[i] = rand_int(2) ? -INFINITY : x[i]; break;
        default: mask[i] = -INFINITY; break;
        }
    }
    if (c == ONE_KEY) mask[rand_int((int64_t)n)] = 0.0f;
    if (c == NAN_SCORE) x[rand_int((int64_t)n)] = NAN;
    if (c == ONLY_NAN) { /* every key masked but one, whose score is NaN */
        size_t at = (size_t)rand_int((int64_t)n);
        mask[at] = 0.0f;
        x[at] = NAN;
    }
    for (size_t i = 0; i < n + pad; i++) out[i] = 777.0f;

    v->fn(n, x, use_mask ? mask : NULL, scale, out);
    softmax_double(n, x, use_mask ? mask : NULL, scale, want);

    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs(out[i] - want[i]);
        bool ok;
        if (isnan(want[i]))
            ok = isnan(out[i]);
        else if (c == ALL_MASKED || c == ONE_KEY) /* exactly 0 and 1 */
            ok = out[i] == (float)want[i];
        else
            ok = d <= UKERNEL_REL_TOL * want[i] + 1e-37;
        if (want[i] > 1e-30 && d / want[i] > worst) worst = d / want[i];
        CHECK(ok, "%s n=%zu (%s): out[%zu] = %.9g, want %.9g", v->name, n, CASE_NAMES[c], i,
              (double)out[i], want[i]);
        if (!ok) break;
    }
    for (size_t i = n; i < n + pad; i++)
        CHECK(out[i] == 777.0f, "%s n=%zu: wrote out[%zu] past the end", v->name, n, i);
    free(x);
    free(mask);
    free(out);
    free(want);
    return worst;
}

static void check_variants(void) {
    for (size_t k = 0; k < sizeof VARIANTS / sizeof *VARIANTS; k++) {
        const variant *v = &VARIANTS[k];
        if (!cpu_runs(v->isa, v->name)) continue;
        size_t lens[12];
        const int nl = tile_lengths(v->tile, lens);
        double worst = 0;
        for (int l = 0; l < nl; l++)
            for (int c = 0; c < N_CASES; c++)
                for (int rep = 0; rep < 3; rep++) {
                    double w = check_row(v, lens[l], c);
                    if (w > worst) worst = w;
                }
        /* rows longer than the summation blocks */
        for (size_t n = 2047; n <= 4099; n += 2052) {
            double w = check_row(v, n, PLAIN);
            if (w > worst) worst = w;
        }
        printf("%-40s max relative error %.3g against softmax in double\n", v->name, worst);
    }
}

/* ---- no subnormal exp ------------------------------------------------------
 * A row whose scores lie within 20 of the max or 200 and more below it: the
 * vector variants' exp gives +0 for the far ones without computing a
 * subnormal (ops/simd/vmath.h, gml_vexp_nosub: each subnormal result costs a
 * microcode assist on Intel, which made attention 2-8x slower on a Xeon),
 * and the normal outputs stay subnormal-free too. The thread's MXCSR
 * underflow (0x10) and denormal operand (0x02) flags must stay clear. The
 * scalar variant keeps the reference's expf (its subnormals included). */
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>

static void check_no_subnormals(void) {
    const size_t n = 301;
    float *x = malloc(n * 4), *out = malloc(n * 4);
    double *want = malloc(n * sizeof *want);
    for (size_t k = 0; k < sizeof VARIANTS / sizeof *VARIANTS; k++) {
        const variant *v = &VARIANTS[k];
        if (v->isa == GML_ISA_SCALAR || !cpu_runs(v->isa, v->name)) continue;
        for (size_t i = 0; i < n; i++)
            x[i] = i % 3 == 0 ? rand_uniform(-20, 0) : rand_uniform(-600, -200);
        x[n / 2] = 0.0f;
        _mm_setcsr(_mm_getcsr() & ~0x3fu);
        v->fn(n, x, NULL, 1.0f, out);
        const unsigned flags = _mm_getcsr() & 0x3fu;
        CHECK((flags & 0x12u) == 0, "%s: MXCSR flags 0x%02x after the kernel: a subnormal %s",
              v->name, flags, flags & 0x10u ? "result (underflow)" : "operand");
        softmax_double(n, x, NULL, 1.0f, want);
        for (size_t i = 0; i < n; i++)
            if (!(fabs(out[i] - want[i]) <= UKERNEL_REL_TOL * want[i] + 1e-37)) {
                CHECK(false, "%s: out[%zu] = %.9g, want %.9g", v->name, i, out[i], want[i]);
                break;
            }
    }
    free(x), free(out), free(want);
}
#else
static void check_no_subnormals(void) {}
#endif

/* ---- op level ------------------------------------------------------------ */

static gml_tensor *random_tensor(gml_context *ctx, int n_dims, const int64_t *ne, float lo,
                                 float hi) {
    gml_tensor *t = gml_new_tensor(ctx, GML_F32, n_dims, ne);
    fill_uniform(t->data, (size_t)gml_nelements(t), lo, hi);
    return t;
}

/* An additive mask of shape ne: -inf with probability p_inf_pct percent,
 * else 0; row dead_row of the last-but-one dim (under every leading index)
 * entirely -inf, or none for -1. */
static gml_tensor *random_mask(gml_context *ctx, int n_dims, const int64_t *ne, int p_inf_pct,
                               int64_t dead_row) {
    gml_tensor *m = gml_new_tensor(ctx, GML_F32, n_dims, ne);
    float *d = m->data;
    const int64_t tk = ne[n_dims - 1], rows = gml_nelements(m) / tk;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < tk; j++) {
            const bool dead = n_dims > 1 && r % ne[n_dims - 2] == dead_row;
            d[r * tk + j] = dead || rand_int(100) < p_inf_pct ? -INFINITY : 0.0f;
        }
    return m;
}

/* The largest relative difference of the op from its reference so far. */
static double op_worst;

static void op_case(const char *what, gml_context *ctx, gml_tensor *x, gml_tensor *mask,
                    float scale, bool causal) {
    gml_tensor *y = gml_softmax(ctx, x, mask, scale, causal);
    CHECK(y != NULL, "%s: %s", what, gml_last_error(ctx));
    if (!y) return;
    const double w = check_isas(ctx, y, (tolerance){.rel = OP_REL_TOL, .abs = OP_ABS_TOL}, what);
    op_worst = GML_MAX(op_worst, w);
}

static void check_op(void) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 64 << 20});
    /* contiguous, broadcast masks, causal with Tq < Tk and Tq > Tk */
    gml_tensor *x = random_tensor(ctx, 4, (int64_t[]){2, 3, 5, 37}, -8, 8);
    op_case("plain [2,3,5,37]", ctx, x, NULL, 0.3f, false);
    gml_tensor *m = random_mask(ctx, 4, (int64_t[]){2, 1, 5, 37}, 30, 2);
    op_case("mask [2,1,5,37] with a dead row", ctx, x, m, 0.3f, false);
    m = random_mask(ctx, 1, (int64_t[]){37}, 20, -1);
    op_case("mask [37], causal", ctx, x, m, 1.0f, true);
    gml_tensor *xw = random_tensor(ctx, 3, (int64_t[]){3, 9, 4}, -8, 8);
    op_case("causal Tq > Tk [3,9,4]", ctx, xw, NULL, 1.0f, true);
    gml_tensor *xl = random_tensor(ctx, 3, (int64_t[]){2, 3, 1100}, -30, 30);
    m = random_mask(ctx, 2, (int64_t[]){3, 1100}, 10, 1);
    op_case("long rows [2,3,1100], mask [3,1100]", ctx, xl, m, 0.5f, true);
    /* permuted: [2,5,3,37] -> [2,3,5,37], rows still contiguous */
    gml_tensor *xp = random_tensor(ctx, 4, (int64_t[]){2, 5, 3, 37}, -8, 8);
    gml_tensor *pv = gml_permute(ctx, xp, (int[]){0, 2, 1, 3});
    m = random_mask(ctx, 2, (int64_t[]){5, 37}, 30, 4);
    op_case("permuted x, mask [5,37]", ctx, pv, m, 0.7f, true);
    /* transposed: the last dim strided (the reference path of the fast kernel) */
    gml_tensor *t = random_tensor(ctx, 3, (int64_t[]){2, 37, 5}, -8, 8);
    gml_tensor *tv = gml_transpose(ctx, t, -2, -1);
    op_case("transposed x [2,5,37]", ctx, tv, NULL, 0.7f, false);
    /* sliced with an offset: [.., 1:6, 2:39] of [2, 3, 6, 40] */
    gml_tensor *big = random_tensor(ctx, 4, (int64_t[]){2, 3, 6, 40}, -8, 8);
    gml_tensor *sv = gml_view(ctx, big, 4, (int64_t[]){2, 3, 5, 37},
                              (size_t[]){big->nb[0], big->nb[1], big->nb[2], big->nb[3]},
                              big->nb[2] + 2 * big->nb[3]);
    m = random_mask(ctx, 4, (int64_t[]){1, 1, 5, 37}, 50, 0);
    op_case("sliced x, mask [1,1,5,37]", ctx, sv, m, 0.7f, false);
    /* a mask broadcast along the keys (reference path) and a strided mask */
    m = random_mask(ctx, 4, (int64_t[]){2, 3, 5, 1}, 30, -1);
    op_case("mask [2,3,5,1]", ctx, x, m, 0.7f, false);
    gml_tensor *mt = gml_transpose(ctx, random_mask(ctx, 2, (int64_t[]){37, 5}, 30, -1), 0, 1);
    op_case("transposed mask [5,37]", ctx, x, mt, 0.7f, true);
    /* a single key */
    gml_tensor *x1 = random_tensor(ctx, 2, (int64_t[]){7, 1}, -8, 8);
    op_case("Tk = 1", ctx, x1, NULL, 1.0f, true);
    printf("softmax op: max relative difference from the reference %.3g\n", op_worst);
    gml_free(ctx);
}

int main(void) {
    check_variants();
    check_no_subnormals();
    check_op();
    return check_report("test_ukernels_softmax");
}
