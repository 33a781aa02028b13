/* gml_softmax: softmax over the last dim of x * scale + mask, with the causal
 * limit j <= i + (Tk - Tq), against a loop written from those semantics.
 *
 * The reference follows PyTorch's float32 arithmetic where it rounds before
 * the exponential (v = x * scale + mask and v - max in float), then takes
 * exp, the sum and the quotient in double. Tolerance 1e-6 relative (about 8
 * ulp) plus 1e-30 absolute for results that are denormal or flushed to zero.
 * When x * scale is inexact (scale not a power of two), a kernel may fuse it
 * with the mask add, rounding once instead of twice; that moves each v by up
 * to an ulp, so the relative tolerance grows by 2 FLT_EPSILON max |v| of the
 * row. Rows must sum to 1; rows with every key masked must be exactly zero. */
#include "check.h"

#include <float.h>

static const float NEG_INF = -INFINITY;

struct sm_case {
    gml_tensor *x, *mask, *y;
    float scale;
    bool causal;
    double *want, *bound;
};

/* want for y's shape [.., Tq, Tk] (right-aligned 4 entries in x->ne). */
static void reference(struct sm_case *c) {
    const gml_tensor *x = c->x, *m = c->mask;
    float *xd = chk_dense(x), *md = m ? chk_dense(m) : NULL;
    const int64_t *ne = x->ne, tq = ne[2], tk = ne[3];
    float *v = malloc((size_t)tk * sizeof *v);
    int exponent;
    const bool exact_scale = frexpf(c->scale, &exponent) == 0.5f; /* a power of two */
    for (int64_t i0 = 0; i0 < ne[0]; i0++)
        for (int64_t i1 = 0; i1 < ne[1]; i1++)
            for (int64_t i = 0; i < tq; i++) {
                const int64_t row = ((i0 * ne[1] + i1) * tq + i) * tk;
                float max = NEG_INF;
                for (int64_t j = 0; j < tk; j++) {
                    v[j] = xd[row + j] * c->scale;
                    if (md)
                        v[j] += md[(((i0 % m->ne[0]) * m->ne[1] + i1 % m->ne[1]) * m->ne[2] + i % m->ne[2]) *
                                       m->ne[3] + j % m->ne[3]];
                    if (c->causal && j > i + (tk - tq)) v[j] = NEG_INF; /* key in the future */
                    if (v[j] > max) max = v[j];
                }
                double sum = 0, vmax = 0;
                for (int64_t j = 0; j < tk; j++) {
                    float d = v[j] - max; /* float, as PyTorch */
                    c->want[row + j] = max == NEG_INF ? 0 : exp((double)d);
                    sum += c->want[row + j];
                    if (isfinite(v[j]) && fabs(v[j]) > vmax) vmax = fabs(v[j]);
                }
                const double rtol = 1e-6 + (exact_scale ? 0 : 2 * FLT_EPSILON * vmax);
                for (int64_t j = 0; j < tk; j++) {
                    c->want[row + j] = sum > 0 ? c->want[row + j] / sum : 0;
                    c->bound[row + j] = 1e-30 + rtol * c->want[row + j];
                }
            }
    free(v);
    free(xd);
    free(md);
}

static void verify_softmax(void *user) {
    struct sm_case *c = user;
    if (!CHECK_WITHIN(c->y, c->want, c->bound, "softmax vs the reference")) return;
    const int64_t tk = c->y->ne[3], rows = chk_numel(c->y) / tk;
    float *got = chk_dense(c->y);
    for (int64_t r = 0; r < rows; r++) {
        double sum = 0, want_sum = 0;
        bool zero = true;
        for (int64_t j = 0; j < tk; j++) {
            sum += got[r * tk + j];
            want_sum += c->want[r * tk + j];
            zero = zero && got[r * tk + j] == 0.0f;
        }
        if (want_sum == 0) {
            if (!CHECK(zero, "row %lld has every key masked: want exact zeros", (long long)r)) break;
        } else if (!CHECK(fabs(sum - 1) <= 4e-6, "row %lld sums to %.9g", (long long)r, sum)) {
            break;
        }
    }
    free(got);
}

/* Mask values: mostly 0, some -inf, some finite negative biases. */
static void fill_mask(gml_tensor *m, chk_rng *r) {
    for (int64_t e = 0; e < chk_numel(m); e++) {
        int k = chk_randint(r, 0, 7);
        *(float *)chk_at(m, e) = k < 4 ? 0.0f : k < 6 ? NEG_INF : chk_uniform(r, -3, 0);
    }
}

static void run_case(struct sm_case *c, gml_context *ctx) {
    char sx[64], sm[64];
    gml_tensor *y = gml_softmax(ctx, c->x, c->mask, c->scale, c->causal);
    if (!CHECK(y, "softmax(x %s, mask %s): %s", chk_shape(c->x, sx, sizeof sx),
               chk_shape(c->mask, sm, sizeof sm), gml_last_error(ctx)))
        return;
    CHECK(gml_same_shape(y, c->x) && gml_is_contiguous(y), "softmax keeps x's shape");
    c->y = y;
    c->want = malloc((size_t)chk_numel(y) * sizeof *c->want);
    c->bound = malloc((size_t)chk_numel(y) * sizeof *c->bound);
    reference(c);
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    CHECK_RUN(g, .outs = &y, .n_outs = 1, .verify = verify_softmax, .user = c);
    gml_graph_free(g);
    free(c->want);
    free(c->bound);
}

/* x [2, 3, Tq, Tk] with every mask shape that broadcasts, causal or not. */
static void test_masks(void) {
    static const int64_t tqk[][2] = {{1, 1}, {1, 7}, {3, 17}, {7, 7}, {17, 3}, {5, 65}, {33, 33}};
    const int64_t B = 2, H = 3;
    uint64_t seed = 100;
    int k = 0;
    for (size_t s = 0; s < sizeof tqk / sizeof *tqk; s++) {
        const int64_t tq = tqk[s][0], tk = tqk[s][1];
        const struct {
            int n;
            int64_t ne[4];
        } masks[] = {
            {0, {0}},          {1, {tk}},           {2, {tq, tk}},    {4, {B, 1, 1, tk}},
            {4, {B, 1, tq, tk}}, {4, {B, H, tq, tk}}, {3, {H, 1, tk}}, {2, {tq, 1}},
        };
        for (size_t mi = 0; mi < sizeof masks / sizeof *masks; mi++)
            for (int causal = 0; causal < 2; causal++, k++) {
                static const float scales[] = {1.0f, 0.125f, 0.2425356f /* 1/sqrt(17) */};
                chk_rng r = chk_seed(seed++);
                gml_context *ctx = chk_ctx(4 << 20);
                chk_layout lx = (chk_layout)(k % CHK_N_LAYOUTS), lm = (chk_layout)((k / 3) % CHK_N_LAYOUTS);
                struct sm_case c = {.scale = scales[k % 3], .causal = causal};
                c.x = chk_new_input(ctx, GML_F32, 4, (int64_t[]){B, H, tq, tk}, lx, "scores", &r, -4, 4);
                if (masks[mi].n) {
                    c.mask = chk_new_layout(ctx, GML_F32, masks[mi].n, masks[mi].ne, lm, "mask");
                    fill_mask(c.mask, &r);
                }
                char sm[64];
                chk_case("softmax %s x [2,3,%lld,%lld], mask %s %s, scale %g, %s", chk_layout_name(lx),
                         (long long)tq, (long long)tk, c.mask ? chk_layout_name(lm) : "",
                         chk_shape(c.mask, sm, sizeof sm), (double)c.scale, causal ? "causal" : "not causal");
                run_case(&c, ctx);
                gml_free(ctx);
            }
    }
}

/* x of 1 to 3 dims: Tq is 1 for a 1-D x (so causal sees every key). */
static void test_low_dims(void) {
    static const struct {
        int n;
        int64_t ne[3];
    } shapes[] = {{1, {1}}, {1, {33}}, {2, {3, 7}}, {2, {7, 3}}, {3, {5, 2, 65}}, {3, {1, 17, 16}}};
    uint64_t seed = 500;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int causal = 0; causal < 2; causal++) {
            chk_rng r = chk_seed(seed++);
            gml_context *ctx = chk_ctx(1 << 20);
            struct sm_case c = {.scale = 0.5f, .causal = causal};
            c.x = chk_new_input(ctx, GML_F32, shapes[s].n, shapes[s].ne, (chk_layout)(s % CHK_N_LAYOUTS),
                                "x", &r, -8, 8);
            char sx[64];
            chk_case("softmax of %s, %s", chk_shape(c.x, sx, sizeof sx), causal ? "causal" : "not causal");
            run_case(&c, ctx);
            gml_free(ctx);
        }
}

/* Values whose exponentials overflow unless the max is subtracted first:
 * +-1e4 at scale 1, +-3e38 at a tiny scale, +-3e38 at scale 1 (x - max
 * overflows to -inf for the small ones: their weight is 0), and equal huge
 * values (uniform weights). No NaN, rows still sum to 1. */
static void test_large_magnitudes(void) {
    static const struct {
        float lo, hi, scale;
        const char *what;
    } cases[] = {
        {-1e4f, 1e4f, 1.0f, "+-1e4"},
        {-3e38f, 3e38f, 0x1p-100f, "+-3e38 at scale 2^-100"},
        {-3e38f, 3e38f, 1.0f, "+-3e38 at scale 1"},
        {3e38f, 3e38f, 1.0f, "all 3e38"},
        {-3e38f, -3e38f, 1.0f, "all -3e38"},
        {1e4f, 1e4f + 8, 1.0f, "1e4 + small differences"},
    };
    uint64_t seed = 600;
    for (size_t s = 0; s < sizeof cases / sizeof *cases; s++)
        for (int masked = 0; masked < 2; masked++) {
            chk_rng r = chk_seed(seed++);
            gml_context *ctx = chk_ctx(1 << 20);
            struct sm_case c = {.scale = cases[s].scale, .causal = masked};
            c.x = chk_new_input(ctx, GML_F32, 3, (int64_t[]){2, 9, 17}, CHK_SLICED, "x", &r, 0, 0);
            for (int64_t e = 0; e < chk_numel(c.x); e++) {
                /* the extremes themselves, and values in between */
                int k = chk_randint(&r, 0, 3);
                float v = k == 0   ? cases[s].lo
                          : k == 1 ? cases[s].hi
                                   : chk_uniform(&r, cases[s].lo, cases[s].hi);
                *(float *)chk_at(c.x, e) = v;
            }
            if (masked) {
                c.mask = gml_new_tensor_2d(ctx, GML_F32, 9, 17);
                fill_mask(c.mask, &r);
            }
            chk_case("softmax of %s%s", cases[s].what, masked ? ", causal + mask" : "");
            run_case(&c, ctx);
            gml_free(ctx);
        }
}

/* Fully masked rows, made every way: a mask row of -inf, causal with Tq > Tk
 * (the first Tq - Tk queries see no key), and a mask that removes exactly the
 * keys causal leaves. All such rows are exactly zero; the others sum to 1. */
static void test_fully_masked(void) {
    uint64_t seed = 700;
    for (int way = 0; way < 3; way++) {
        chk_rng r = chk_seed(seed++);
        gml_context *ctx = chk_ctx(1 << 20);
        const int64_t tq = way == 1 ? 9 : 6, tk = way == 1 ? 4 : 6;
        struct sm_case c = {.scale = 1.0f, .causal = way != 0};
        c.x = chk_new_input(ctx, GML_F32, 3, (int64_t[]){2, tq, tk}, CHK_TRANSPOSED, "x", &r, -2, 2);
        c.mask = gml_new_tensor_3d(ctx, GML_F32, 2, tq, tk);
        chk_fill_value(c.mask, 0.0f);
        for (int64_t b = 0; b < 2; b++)
            for (int64_t i = 0; i < tq; i++)
                for (int64_t j = 0; j < tk; j++) {
                    float *m = (float *)c.mask->data + (b * tq + i) * tk + j;
                    if (way == 0 && (i == 0 || i == tq - 1 || b == 1)) *m = NEG_INF;
                    if (way == 2 && i % 2 == 0 && j <= i) *m = NEG_INF; /* causal allows j <= i */
                }
        chk_case("fully masked rows, way %d", way);
        run_case(&c, ctx);
        gml_free(ctx);
    }
}

/* A NaN score is never passed off as "fully masked": a row whose only
 * visible score is NaN is NaN, under every kernel set and thread count,
 * strided or not; a fully masked row next to it stays zeros. */
static void test_nan_not_masked(void) {
    for (int strided = 0; strided < 2; strided++) {
        chk_case("only visible score NaN (%s)", strided ? "transposed x" : "contiguous x");
        chk_rng r = chk_seed(900);
        gml_context *ctx = chk_ctx(1 << 20);
        const int64_t tq = 3, tk = 37;
        gml_tensor *x = chk_new_input(ctx, GML_F32, 2, (int64_t[]){tq, tk},
                                      strided ? CHK_TRANSPOSED : CHK_CONTIGUOUS, "x", &r, -2, 2);
        gml_tensor *mask = gml_new_tensor_2d(ctx, GML_F32, tq, tk);
        chk_fill_value(mask, NEG_INF);
        int64_t at[GML_MAX_DIMS] = {0, 5};
        gml_set_f32(x, at, NAN);
        ((float *)mask->data)[5] = 0.0f; /* row 0 sees only key 5: NaN */
        for (int64_t j = 0; j < tk; j++) ((float *)mask->data)[2 * tk + j] = 0.0f; /* row 2 all visible */
        gml_tensor *y = gml_softmax(ctx, x, mask, 0.5f, false);
        gml_graph *g = gml_build_graph(ctx, &y, 1);
        static const gml_isa isas[] = {GML_TEST_ISAS};
        for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
            const gml_isa isa = isas[k];
            if (gml_set_isa(isa) != GML_OK) continue;
            for (int nth = 1; nth <= 3; nth += 2) {
                CHECK(gml_graph_compute(g, nth) == GML_OK, "compute: %s", gml_graph_error(g));
                const float *o = y->data;
                bool row0_nan = true, row1_zero = true, row2_sums = true;
                double sum = 0;
                for (int64_t j = 0; j < tk; j++) {
                    row0_nan &= isnan(o[j]) || j != 5;
                    row1_zero &= o[tk + j] == 0.0f;
                    sum += o[2 * tk + j];
                }
                row2_sums = fabs(sum - 1.0) < 1e-5;
                CHECK(row0_nan, "%s, %d threads: the NaN row is NaN (got %g)", gml_isa_name((gml_isa)isa), nth,
                      (double)o[5]);
                CHECK(row1_zero && row2_sums, "%s, %d threads: the other rows are unaffected",
                      gml_isa_name((gml_isa)isa), nth);
            }
        }
        gml_set_isa(GML_ISA_AUTO);
        gml_graph_free(g);
        gml_free(ctx);
    }
}

/* Causal masking alone, checked without the reference: for Tq vs Tk in
 * every order, weight (i, j) is zero iff j > i + (Tk - Tq). */
static void test_causal_pattern(void) {
    static const int64_t tqk[][2] = {{4, 4}, {1, 9}, {3, 8}, {8, 3}, {5, 1}};
    for (size_t s = 0; s < sizeof tqk / sizeof *tqk; s++) {
        const int64_t tq = tqk[s][0], tk = tqk[s][1];
        chk_case("causal pattern Tq %lld Tk %lld", (long long)tq, (long long)tk);
        gml_context *ctx = chk_ctx(1 << 20);
        gml_tensor *x = gml_new_tensor_2d(ctx, GML_F32, tq, tk);
        chk_fill_value(x, 0.0f);
        gml_tensor *y = gml_softmax(ctx, x, NULL, 1.0f, true);
        gml_graph *g = gml_build_graph(ctx, &y, 1);
        CHECK(gml_graph_compute(g, 3) == GML_OK, "compute: %s", gml_graph_error(g));
        for (int64_t i = 0; i < tq; i++) {
            int64_t seen = 0;
            for (int64_t j = 0; j < tk; j++) seen += j <= i + (tk - tq);
            for (int64_t j = 0; j < tk; j++) {
                float got = ((float *)y->data)[i * tk + j];
                float want = j <= i + (tk - tq) ? 1.0f / (float)seen : 0.0f;
                CHECK(fabsf(got - want) <= 1e-7f, "weight (%lld, %lld) is %g, want %g", (long long)i,
                      (long long)j, (double)got, (double)want);
            }
        }
        gml_graph_free(g);
        gml_free(ctx);
    }
}

/* ---- no subnormal exp terms, options path included --------------------------
 * The AVX2 and AVX-512 softmax forms exp(s - max) with vexp*_nosub: a term
 * below 2^-125.5 is +0, never a subnormal (each costs a microcode assist on
 * Intel). gml_softmax_ext's options (window, softcap, alibi, sinks, valid
 * lengths, positions, top-left causal) form the scores in scratch and then
 * run that same micro-kernel; softcap's tanh takes exp(+2|s/c|), which
 * overflows but never underflows. Rows here: one key at the max, the rest
 * 80 to 104 below it (across exp's subnormal range) or far below, so the sum stays
 * under sqrt(2) and a normal term stays normal once normalized. The
 * thread's MXCSR flags (underflow 0x10, denormal operand 0x02) must stay
 * clear; the public vexp (gml_exp) on the same scores raises underflow, which
 * shows the flags are read where the kernels run. */
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>

static unsigned mxcsr_flags_of(gml_graph *g) {
    _mm_setcsr(_mm_getcsr() & ~0x3fu);
    const gml_status st = gml_graph_compute(g, 1); /* 1 thread: the caller's */
    const unsigned flags = _mm_getcsr() & 0x3fu;
    CHECK(st == GML_OK, "compute: %s", gml_graph_error(g));
    return flags;
}

static void test_no_subnormal_terms(void) {
    const int64_t B = 1, H = 2, TQ = 3, TK = 67;
    static const struct {
        const char *what;
        gml_attn_opts o;
        bool lens, sinks;
    } OPTS[] = {
        {"no options (main path)", {0}, false, false},
        {"window 70, causal", {.window = 70, .causal = GML_CAUSAL_BOTTOM_RIGHT}, false, false},
        {"softcap 400", {.softcap = 400.0f}, false, false},
        {"alibi 8", {.alibi_max_bias = 8.0f}, false, false},
        {"sinks -200", {0}, false, true},
        {"valid lengths", {0}, true, false},
        {"top-left causal", {.causal = GML_CAUSAL_TOP_LEFT}, false, false},
    };
    const gml_isa saved = gml_get_isa();
    static const gml_isa isas[] = {GML_TEST_SIMD_ISAS};
    for (size_t ii = 0; ii < sizeof isas / sizeof *isas; ii++) {
        const gml_isa isa = isas[ii];
        if (!gml_cpu_has(isa)) {
            printf("skipped: no subnormal terms on %s (not this CPU)\n", gml_isa_name((gml_isa)isa));
            continue;
        }
        gml_set_isa((gml_isa)isa);
        for (size_t k = 0; k < sizeof OPTS / sizeof *OPTS; k++) {
            chk_rng r = chk_seed(900 + k);
            chk_case("no subnormal terms: softmax_ext %s on %s", OPTS[k].what, gml_isa_name((gml_isa)isa));
            gml_context *ctx = chk_ctx(1 << 20);
            gml_tensor *x = gml_new_tensor_4d(ctx, GML_F32, B, H, TQ, TK);
            float *xd = x->data;
            for (int64_t i = 0; i < gml_nelements(x); i++) { /* key (i % TK) == 0: the max */
                const int64_t j = i % TK;
                xd[i] = j == 0 ? 0.0f : j % 3 ? chk_uniform(&r, -104.0f, -80.0f) : chk_uniform(&r, -400.0f, -110.0f);
            }
            gml_attn_opts o = OPTS[k].o;
            if (OPTS[k].lens) {
                o.valid_lens = gml_new_tensor_1d(ctx, GML_I32, B);
                ((int32_t *)o.valid_lens->data)[0] = (int32_t)TK - 5;
            }
            if (OPTS[k].sinks) {
                o.sinks = gml_new_tensor_1d(ctx, GML_F32, H);
                for (int64_t h = 0; h < H; h++) ((float *)o.sinks->data)[h] = -200.0f;
            }
            gml_tensor *y = gml_softmax_ext(ctx, x, 1.0f, &o);
            gml_tensor *e = gml_exp(ctx, x);
            gml_graph *gy = y ? gml_build_graph(ctx, &y, 1) : NULL, *ge = gml_build_graph(ctx, &e, 1);
            CHECK(gy && ge, "%s: %s", OPTS[k].what, gml_last_error(ctx));
            if (gy && ge) {
                const unsigned flags = mxcsr_flags_of(gy);
                CHECK((flags & 0x12u) == 0, "softmax_ext %s on %s: MXCSR flags 0x%02x: a subnormal %s",
                      OPTS[k].what, gml_isa_name((gml_isa)isa), flags,
                      flags & 0x10u ? "result (underflow)" : "operand");
                const float *yd = y->data;
                int n_sub = 0, n_pos = 0;
                for (int64_t i = 0; i < gml_nelements(y); i++) {
                    n_sub += fpclassify(yd[i]) == FP_SUBNORMAL;
                    n_pos += yd[i] > 0 && i % TK != 0;
                }
                CHECK(n_sub == 0 && n_pos > 0, "softmax_ext %s on %s: %d subnormal weights, %d "
                      "positive ones besides the max", OPTS[k].what, gml_isa_name((gml_isa)isa), n_sub, n_pos);
                CHECK(mxcsr_flags_of(ge) & 0x10u, "exp on %s: no underflow flag: the flags are not "
                      "read where the kernels run", gml_isa_name((gml_isa)isa));
            }
            if (gy) gml_graph_free(gy);
            if (ge) gml_graph_free(ge);
            gml_free(ctx);
        }
    }
    gml_set_isa(saved);
}
#else
static void test_no_subnormal_terms(void) {}
#endif

int main(void) {
    test_masks();
    test_no_subnormal_terms();
    test_low_dims();
    test_large_magnitudes();
    test_fully_masked();
    test_nan_not_masked();
    test_causal_pattern();
    return chk_summary();
}
