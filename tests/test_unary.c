/* Unary elementwise ops (ops/unary.c): neg, exp, tanh, sigmoid, silu, gelu,
 * gelu_tanh.
 *   1. every micro-kernel variant (ops/unary.inc, exp's in softmax.inc) on
 *      lengths around its tile, against a double reference, in place too,
 *      not writing past the end;
 *   2. a sweep of inputs (a fine grid over [-30, 30], every octave from
 *      2^-149 to 2^127 of both signs, the saturation edges): the largest
 *      error of each variant and of the reference kernel against the double
 *      reference, printed and held to the bounds in OPS below;
 *   3. special values (NaN, +-inf, +-0, subnormals, huge) against what
 *      PyTorch 1.13 gives (the table SPECIALS);
 *   4. the ops on strided inputs (every chk layout, odd shapes) under every
 *      ISA the CPU has at 1, 2, 3, 4 and 7 threads: bitwise across thread
 *      counts and layouts, within the bounds of the reference;
 *   5. a chain of the ops planned in place (the planner writing each over
 *      its source) equal to the same chain with its own memory;
 *   6. builder errors. */
#include "check.h"

#include "../ops/ukernels.h"

#include <float.h>

/* ---- the double reference, written apart from ops/unary.c ----------------- */

static double d_sigmoid(double x) { return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x)); }
static double d_neg(double x) { return -x; }
static double d_silu(double x) { return x * d_sigmoid(x); }
static double d_gelu(double x) { return 0.5 * x * erfc(-x / sqrt(2.0)); }
static double d_gelu_tanh(double x) { /* 0.5 x (1 + tanh(u)) = x sigmoid(2u) */
    const double u = sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x);
    return x * d_sigmoid(2 * u);
}

typedef struct {
    const char *name;
    gml_tensor *(*build)(gml_context *, gml_tensor *);
    double (*ref)(double);
    /* Error bounds, in ulps of the double result where it is a normal float,
     * and in units of 2^-141 (the ulp at 2^-118) where it is below 2^-118:
     * for the reference kernel, the scalar variant, the vector ones. Over
     * |x| <= 4 (tight) and everywhere (all): see the sweep's printout. */
    double ref_ulps, scalar_ulps, vector_ulps, scalar_all, vector_all;
} op_info;

enum { NEG, EXP, TANH, SIGMOID, SILU, GELU, GELU_TANH, N_OPS };
static const op_info OPS[N_OPS] = {
    [NEG] = {"neg", gml_neg, d_neg, 0, 0, 0, 0, 0},
    [EXP] = {"exp", gml_exp, exp, 0.501, 1, 1.5, 1, 1.5},
    [TANH] = {"tanh", gml_tanh, tanh, 0.501, 2.5, 2, 2.5, 2},
    [SIGMOID] = {"sigmoid", gml_sigmoid, d_sigmoid, 0.501, 3, 3, 3, 3},
    [SILU] = {"silu", gml_silu, d_silu, 0.501, 3.5, 3.5, 3.5, 3.5},
    /* gelu: every variant computes in double (the vector ones with their
     * own erfc, 1e-14 relative: check_gelu_dense) */
    [GELU] = {"gelu", gml_gelu, d_gelu, 0.501, 0.501, 0.501, 0.501, 0.501},
    /* gelu_tanh: 2u in double (in float its rounding would cost |2u| ulp:
     * 200 at x = -9.8; PyTorch's float is 1e-5 relative, 90 ulp, off at
     * x = -3) */
    [GELU_TANH] = {"gelu_tanh", gml_gelu_tanh, d_gelu_tanh, 0.501, 3, 3.5, 3, 3.5},
};

typedef struct {
    int op;
    gml_isa isa;
    gml_f32_vunary_ukernel *fn;
    int tile;
    const char *name;
} variant;

#define V(op) V_##op
#define V_NEG(isa, fn, tile) {NEG, isa, fn, tile, #fn},
#define V_EXP(isa, fn, tile) {EXP, isa, fn, tile, #fn},
#define V_TANH(isa, fn, tile) {TANH, isa, fn, tile, #fn},
#define V_SIGMOID(isa, fn, tile) {SIGMOID, isa, fn, tile, #fn},
#define V_SILU(isa, fn, tile) {SILU, isa, fn, tile, #fn},
#define V_GELU(isa, fn, tile) {GELU, isa, fn, tile, #fn},
#define V_GELU_TANH(isa, fn, tile) {GELU_TANH, isa, fn, tile, #fn},
static const variant VARIANTS[] = {
    GML_F32_VNEG_UKERNELS(V_NEG) GML_F32_VEXP_UKERNELS(V_EXP) GML_F32_VTANH_UKERNELS(V_TANH)
    GML_F32_VSIGMOID_UKERNELS(V_SIGMOID) GML_F32_VSILU_UKERNELS(V_SILU)
    GML_F32_VGELU_UKERNELS(V_GELU) GML_F32_VGELU_TANH_UKERNELS(V_GELU_TANH)
};
#define N_VARIANTS (int)(sizeof VARIANTS / sizeof *VARIANTS)

#define TINY 0x1p-118

static bool same_bits(float a, float b) {
    uint32_t ua, ub;
    memcpy(&ua, &a, 4);
    memcpy(&ub, &b, 4);
    return ua == ub || (a != a && b != b);
}

/* The error of y against the double r: in ulps of r when |r| is at least
 * 2^-118 (*tiny false), else in units of 2^-141, the ulp at 2^-118 (*tiny
 * true): results that small (sigmoid, silu, gelu_tanh of x < -84, exp of
 * x < -81.8) come from a subnormal exp(-|s|), whose absolute error (half
 * of 2^-149) the functions multiply by up to |x|. 0 for matching NaN and infinities, inf for a
 * mismatch of those. */
static double err_of(float y, double r, bool *tiny) {
    *tiny = false;
    if (isnan(r) || isnan(y)) return isnan(r) && isnan(y) ? 0 : INFINITY;
    if (isinf(r) || isinf(y)) {
        if ((double)y == r) return 0;
        if (isinf(r) && fabs((double)y) >= FLT_MAX) { /* r overflows float: y rounds to inf */
            return isinf(y) && (y > 0) == (r > 0) ? 0 : INFINITY;
        }
        if (isinf(y) && fabs(r) >= (double)FLT_MAX) return (y > 0) == (r > 0) ? 0 : INFINITY;
        return INFINITY;
    }
    const double d = fabs((double)y - r);
    if (fabs(r) < TINY) {
        *tiny = true;
        return d / ldexp(1.0, -141);
    }
    int e;
    frexp(r, &e);
    return d / ldexp(1.0, e - 1 - 23);
}

/* Below 2^-118: 1 ulp at 2^-118, or as far as the op's error grows. */
static double tiny_bound(const op_info *o) { return o->vector_all > 1 ? o->vector_all : 1; }

static bool in_bound(const op_info *o, bool scalar, double err, bool tiny, float x) {
    if (tiny) return err <= tiny_bound(o);
    const bool tight = fabsf(x) <= 4;
    const double b = tight ? (scalar ? o->scalar_ulps : o->vector_ulps)
                           : (scalar ? o->scalar_all : o->vector_all);
    return err <= b;
}

/* ---- 1. variants around their tiles --------------------------------------- */

static float special(chk_rng *r) {
    const float s[] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f, 1e-40f, -1e-40f, 90.0f, -90.0f,
                       1e20f, -1e20f, 0.625f, -0.625f};
    return s[chk_randint(r, 0, (int)(sizeof s / sizeof *s) - 1)];
}

static void check_variant(const variant *v) {
    const op_info *o = &OPS[v->op];
    const bool scalar = v->isa == GML_ISA_SCALAR;
    chk_case("%s around its tile", v->name);
    chk_rng r = chk_seed(7 + (uint64_t)v->tile);
    const int64_t t = v->tile;
    const int64_t lens[] = {1, t - 1, t, t + 1, 2 * t + 3, 3 * t - 1, 1000, 1031};
    for (size_t l = 0; l < sizeof lens / sizeof *lens; l++) {
        if (lens[l] < 1) continue;
        const size_t n = (size_t)lens[l], pad = 40;
        float *x = malloc(n * sizeof *x), *y = malloc((n + pad) * sizeof *y);
        for (size_t i = 0; i < n; i++) x[i] = chk_uniform(&r, -12, 12);
        for (size_t i = 0; i < n; i += 1 + (size_t)chk_randint(&r, 0, 6)) x[i] = special(&r);
        for (size_t i = 0; i < n + pad; i++) y[i] = 555.0f;
        v->fn(n, x, y);
        int bad = 0;
        for (size_t i = 0; i < n && bad < 3; i++) {
            bool tiny;
            const double e = err_of(y[i], o->ref((double)x[i]), &tiny);
            if (!in_bound(o, scalar, e, tiny, x[i]))
                bad += !CHECK(false, "%s n=%zu: f(%.9g) = %.9g, want %.17g (error %g%s)", v->name,
                              n, (double)x[i], (double)y[i], o->ref((double)x[i]), e,
                              tiny ? " x 2^-141" : " ulp");
        }
        for (size_t i = n; i < n + pad; i++)
            CHECK(y[i] == 555.0f, "%s n=%zu: wrote y[%zu] past the end", v->name, n, i);
        v->fn(n, x, x); /* in place */
        for (size_t i = 0; i < n; i++)
            if (!CHECK(same_bits(x[i], y[i]), "%s n=%zu in place: x[%zu] = %.9g, want %.9g",
                       v->name, n, i, (double)x[i], (double)y[i]))
                break;
        free(x);
        free(y);
    }
}

/* ---- 2. the error sweep ------------------------------------------------------ */

/* The sweep's inputs: a grid of step 2^-12 over [-30, 30], 64 points per
 * octave from 2^-149 to 2^127 in both signs, a fine grid over [-105, -80]
 * (where exp(x) turns subnormal and sigmoid, silu, gelu_tanh with it). */
static float *sweep_inputs(size_t *n) {
    size_t cap = 300000 + 2 * 277 * 64 + 30000, k = 0;
    float *x = malloc(cap * sizeof *x);
    for (int i = -30 * 4096; i <= 30 * 4096; i++) x[k++] = (float)ldexp(i, -12);
    for (int e = -149; e < 128; e++)
        for (int j = 0; j < 64; j++) {
            const float m = (float)ldexp(1.0 + j / 64.0, e);
            if (isinf(m)) continue;
            x[k++] = m;
            x[k++] = -m;
        }
    for (int i = 0; i < 25000; i++) x[k++] = -105.0f + 25.0f * (float)i / 25000.0f;
    *n = k;
    return x;
}

typedef struct {
    double worst, worst_tight, worst_tiny;
    float at, at_tight, at_tiny;
} sweep_err;

static sweep_err measure(const op_info *o, const float *x, const float *y, size_t n) {
    sweep_err s = {0, 0, 0, 0, 0, 0};
    for (size_t i = 0; i < n; i++) {
        bool tiny;
        const double e = err_of(y[i], o->ref((double)x[i]), &tiny);
        if (tiny) {
            if (e > s.worst_tiny) s.worst_tiny = e, s.at_tiny = x[i];
        } else {
            if (e > s.worst) s.worst = e, s.at = x[i];
            if (fabsf(x[i]) <= 4 && e > s.worst_tight) s.worst_tight = e, s.at_tight = x[i];
        }
    }
    return s;
}

static void print_err(const char *what, sweep_err s) {
    printf("  %-44s |x|<=4: %6.3f ulp (x=%-11.6g) all: %9.3f ulp (x=%-11.6g) subnormal: %5.2f "
           "(x=%g)\n",
           what, s.worst_tight, (double)s.at_tight, s.worst, (double)s.at, s.worst_tiny,
           (double)s.at_tiny);
}

static void check_sweep(void) {
    size_t n;
    float *x = sweep_inputs(&n), *y = malloc(n * sizeof *y);
    printf("error against the double reference over %zu inputs (ulp of the result; results "
           "below 2^-118: units of 2^-141)\n", n);
    /* the reference kernel, through a graph */
    gml_context *ctx = chk_ctx(64 << 20);
    gml_tensor *xt = gml_new_tensor(ctx, GML_F32, 1, (int64_t[]){(int64_t)n});
    memcpy(xt->data, x, n * sizeof *x);
    for (int op = 0; op < N_OPS; op++) {
        const op_info *o = &OPS[op];
        chk_case("sweep: %s", o->name);
        gml_tensor *out = o->build(ctx, xt);
        gml_graph *g = gml_build_graph(ctx, &out, 1);
        gml_set_isa(GML_ISA_REFERENCE);
        CHECK(gml_graph_compute(g, 2) == GML_OK, "compute");
        gml_set_isa(GML_ISA_AUTO);
        char what[96];
        snprintf(what, sizeof what, "%s reference kernel", o->name);
        const sweep_err sr = measure(o, x, out->data, n);
        print_err(what, sr);
        CHECK(sr.worst <= o->ref_ulps && sr.worst_tiny <= 0.501, "%s: reference error %g ulp at %g, "
              "%g subnormal at %g", o->name, sr.worst, (double)sr.at, sr.worst_tiny, (double)sr.at_tiny);
        gml_graph_free(g);
        for (int v = 0; v < N_VARIANTS; v++) {
            if (VARIANTS[v].op != op || !gml_cpu_has(VARIANTS[v].isa)) continue;
            const bool scalar = VARIANTS[v].isa == GML_ISA_SCALAR;
            VARIANTS[v].fn(n, x, y);
            const sweep_err s = measure(o, x, y, n);
            print_err(VARIANTS[v].name, s);
            CHECK(s.worst_tight <= (scalar ? o->scalar_ulps : o->vector_ulps) &&
                      s.worst <= (scalar ? o->scalar_all : o->vector_all) &&
                      s.worst_tiny <= tiny_bound(o),
                  "%s: error %g ulp at %g (|x| <= 4: %g at %g), %g subnormal at %g",
                  VARIANTS[v].name, s.worst, (double)s.at, s.worst_tight, (double)s.at_tight,
                  s.worst_tiny, (double)s.at_tiny);
        }
    }
    gml_free(ctx);
    free(x);
    free(y);
}

/* ---- 2b. gelu on dense sweeps ------------------------------------------------
 * Every 5th float in [-14.5, -4] (erfc tiny, down to where gelu is -0
 * from x < -14.356), every 181st float (by bits) with 2^-24 <= |x| <= 4
 * (around 0) and every 41st subnormal of both signs: each variant within 1
 * ulp of the double reference rounded to float (the vector erfc is 1e-14
 * relative, so the few misrounded results are near-ties; an exhaustive run
 * over all 2^32 floats found 50 per vector variant, none off by
 * more than 1 ulp), equal to it on subnormals (0.5 x there is a tie for odd
 * x: erfc must be exactly 1, as libm's), within the sweep's bound of the
 * unrounded one, and the AVX2 and AVX-512 variants bitwise equal (the same
 * double operations per lane). */
static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void check_gelu_dense(void) {
    enum { CHUNK = 4096 };
    static const struct {
        uint32_t lo, hi, step; /* float bits, inclusive */
        bool exact;            /* equal to the rounded reference */
    } ranges[] = {{0xc0800000u, 0xc1680000u, 5, false}, /* -4 .. -14.5 */
                  {0x33800000u, 0x40800000u, 181, false}, /* 2^-24 .. 4 */
                  {0xb3800000u, 0xc0800000u, 181, false},
                  {0x00000001u, 0x007fffffu, 41, true}, /* subnormals */
                  {0x80000001u, 0x807fffffu, 41, true}};
    const variant *vs[8];
    int nv = 0;
    for (int v = 0; v < N_VARIANTS; v++)
        if (VARIANTS[v].op == GELU && gml_cpu_has(VARIANTS[v].isa)) vs[nv++] = &VARIANTS[v];
    float x[CHUNK], y[8][CHUNK];
    long long count = 0, misrounded[8] = {0}, unequal = 0;
    double worst[8] = {0};
    for (size_t ri = 0; ri < sizeof ranges / sizeof *ranges; ri++) {
        chk_case("gelu dense sweep %#x..%#x step %u", ranges[ri].lo, ranges[ri].hi, ranges[ri].step);
        int bad = 0;
        for (uint64_t b = ranges[ri].lo; b <= ranges[ri].hi && bad < 5;) {
            int n = 0;
            for (; n < CHUNK && b <= ranges[ri].hi; n++, b += ranges[ri].step) {
                const uint32_t u = (uint32_t)b;
                memcpy(&x[n], &u, 4);
            }
            for (int v = 0; v < nv; v++) vs[v]->fn((size_t)n, x, y[v]);
            count += n;
            for (int i = 0; i < n && bad < 5; i++) {
                const double r = d_gelu((double)x[i]);
                const float rf = (float)r;
                for (int v = 0; v < nv; v++) {
                    bool tiny;
                    const double e = err_of(y[v][i], r, &tiny);
                    if (!tiny && e > worst[v]) worst[v] = e;
                    const int64_t d = (int64_t)(int32_t)bits_of(y[v][i]) - (int32_t)bits_of(rf);
                    misrounded[v] += d != 0;
                    if (d < -1 || d > 1 || (ranges[ri].exact && d != 0) ||
                        !in_bound(&OPS[GELU], false, e, tiny, x[i]))
                        bad += !CHECK(false, "%s(%a) = %a, want %a (%.17g): %lld ulp apart, error %g",
                                      vs[v]->name, (double)x[i], (double)y[v][i], (double)rf, r,
                                      (long long)d, e);
                }
                for (int v = 1; v < nv; v++)
                    if (vs[v]->isa != GML_ISA_SCALAR && vs[v - 1]->isa != GML_ISA_SCALAR &&
                        !same_bits(y[v][i], y[v - 1][i])) {
                        unequal++;
                        if (unequal <= 3)
                            CHECK(false, "%s(%a) = %a but %s gives %a", vs[v]->name, (double)x[i],
                                  (double)y[v][i], vs[v - 1]->name, (double)y[v - 1][i]);
                    }
            }
        }
    }
    printf("gelu dense sweeps, %lld inputs:", count);
    for (int v = 0; v < nv; v++)
        printf(" %s max %.4f ulp, %lld not the rounded reference;", vs[v]->name, worst[v], misrounded[v]);
    printf(" AVX2 != AVX-512: %lld\n", unequal);
    CHECK(unequal == 0, "AVX2 and AVX-512 gelu differ on %lld inputs", unequal);
}

/* ---- 3. special values against PyTorch ------------------------------------
 * torch 1.13, float32 on CPU: torch.neg/exp/tanh/sigmoid, F.silu, F.gelu,
 * F.gelu(approximate='tanh') of SPECIAL_X. Where PyTorch flushes a tiny
 * result to 0 (sigmoid, silu, gelu_tanh of x <= -88.7: 1 / (1 + inf); gelu
 * of x <= -5.9: 1 + erf(x / sqrt 2) cancels) ggmlite keeps its value (the
 * double reference's), so those compare with a tolerance of 1e-36 in
 * absolute value; signs of zero are compared where PyTorch's and the
 * reference's agree. Everything else: NaN for NaN, equal infinities, finite
 * values within 1e-4 relative of PyTorch's (whose own float gelu and
 * gelu_tanh are 4e-5 and 1e-5 off at x = -3) and, by check_variant and
 * the sweep, within the bounds of OPS of the double reference. */
static const float SPECIAL_X[] = {NAN,    INFINITY, -INFINITY, 0.0f,   -0.0f, 1e-40f, -1e-40f,
                                  1e-3f,  -1e-3f,   0.5f,      -0.5f,  3.0f,  -3.0f,  20.0f,
                                  -20.0f, 88.0f,    -88.0f,    90.0f,  -90.0f, 104.0f, -104.0f,
                                  200.0f, -200.0f,  1e20f,     -1e20f, 3e38f, -3e38f};
#define N_SPECIAL (int)(sizeof SPECIAL_X / sizeof *SPECIAL_X)
static const float PYTORCH[N_OPS][N_SPECIAL] = {
    [NEG] = {NAN, -INFINITY, INFINITY, -0.0f, 0.0f, -9.9999461e-41f, 9.9999461e-41f,
             -0.00100000005f, 0.00100000005f, -0.5f, 0.5f, -3, 3, -20, 20, -88, 88, -90, 90,
             -104, 104, -200, 200, -1.00000002e+20f, 1.00000002e+20f, -3.00000001e+38f,
             3.00000001e+38f},
    [EXP] = {NAN, INFINITY, 0, 1, 1, 1, 1, 1.00100052f, 0.99900049f, 1.64872122f, 0.606530666f,
             20.085537f, 0.0497870669f, 485165184, 2.06115369e-09f, 1.65163627e+38f,
             6.05460149e-39f, INFINITY, 8.19400869e-40f, INFINITY, 0, INFINITY, 0, INFINITY, 0,
             INFINITY, 0},
    [TANH] = {NAN, 1, -1, 0, -0.0f, 9.9999461e-41f, -9.9999461e-41f, 0.000999999698f,
              -0.000999999698f, 0.462117165f, -0.462117165f, 0.995054781f, -0.995054781f, 1, -1,
              1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1},
    [SIGMOID] = {NAN, 1, 0, 0.5f, 0.5f, 0.5f, 0.5f, 0.500249982f, 0.499750018f, 0.622459352f,
                 0.377540678f, 0.952574134f, 0.0474258736f, 1, 2.06115369e-09f, 1,
                 6.05460149e-39f, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0},
    [SILU] = {NAN, INFINITY, NAN, 0, -0.0f, 4.99997305e-41f, -4.99997305e-41f, 0.000500250026f,
              -0.000499750022f, 0.311229676f, -0.188770339f, 2.85772252f, -0.142277613f, 20,
              -4.12230747e-08f, 88, -5.32804976e-37f, 90, -0.0f, 104, -0.0f, 200, -0.0f,
              1.00000002e+20f, -0.0f, 3.00000001e+38f, -0.0f},
    [GELU] = {NAN, INFINITY, NAN, 0, 0, 4.99997305e-41f, -4.99997305e-41f, 0.000500398921f,
              -0.000499601127f, 0.345731199f, -0.154268786f, 2.99595022f, -0.00404986739f, 20, 0,
              88, 0, 90, 0, 104, 0, 200, 0, 1.00000002e+20f, 0, 3.00000001e+38f, 0},
    [GELU_TANH] = {NAN, INFINITY, NAN, 0, -0.0f, 4.99997305e-41f, -4.99997305e-41f,
                   0.000500398979f, -0.000499601068f, 0.345714003f, -0.154285997f, 2.99636269f,
                   -0.00363743305f, 20, -0.0f, 88, -0.0f, 90, -0.0f, 104, -0.0f, 200, -0.0f,
                   1.00000002e+20f, -0.0f, 3.00000001e+38f, -0.0f},
};

static void check_special_value(const char *who, int op, int i, float got) {
    const float want = PYTORCH[op][i], x = SPECIAL_X[i];
    if (isnan(want) || isinf(want)) {
        CHECK(same_bits(got, want), "%s(%g) on %s = %.9g, PyTorch %.9g", OPS[op].name, (double)x,
              who, (double)got, (double)want);
        return;
    }
    const double r = OPS[op].ref((double)x);
    if (fabs(r) < 1e-36) { /* tiny: PyTorch may flush it; ggmlite keeps r */
        CHECK(isfinite(got) && fabsf(got - want) <= 1e-36f && fabs((double)got - r) <= 1e-36,
              "%s(%g) on %s = %.9g, PyTorch %.9g, reference %.9g", OPS[op].name, (double)x, who,
              (double)got, (double)want, r);
        if (r == 0 && want == 0 && signbit(r) == signbit(want))
            CHECK(signbit(got) == signbit(want), "%s(%g) on %s: sign of zero %.1g, PyTorch %.1g",
                  OPS[op].name, (double)x, who, (double)got, (double)want);
        return;
    }
    CHECK(fabs((double)got - (double)want) <= 1e-4 * fabs((double)want) &&
              (want != 0 || signbit(got) == signbit(want) || op == GELU),
          "%s(%g) on %s = %.9g, PyTorch %.9g", OPS[op].name, (double)x, who, (double)got,
          (double)want);
}

static void check_specials(void) {
    float y[N_SPECIAL];
    for (int v = 0; v < N_VARIANTS; v++) {
        if (!gml_cpu_has(VARIANTS[v].isa)) continue;
        chk_case("special values: %s", VARIANTS[v].name);
        VARIANTS[v].fn(N_SPECIAL, SPECIAL_X, y);
        for (int i = 0; i < N_SPECIAL; i++) check_special_value(VARIANTS[v].name, VARIANTS[v].op, i, y[i]);
    }
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *x = gml_new_tensor(ctx, GML_F32, 1, (int64_t[]){N_SPECIAL});
    memcpy(x->data, SPECIAL_X, sizeof SPECIAL_X);
    for (int op = 0; op < N_OPS; op++) {
        chk_case("special values: %s reference kernel", OPS[op].name);
        gml_tensor *out = OPS[op].build(ctx, x);
        gml_graph *g = gml_build_graph(ctx, &out, 1);
        gml_set_isa(GML_ISA_REFERENCE);
        CHECK(gml_graph_compute(g, 1) == GML_OK, "compute");
        gml_set_isa(GML_ISA_AUTO);
        for (int i = 0; i < N_SPECIAL; i++)
            check_special_value("the reference", op, i, ((const float *)out->data)[i]);
        gml_graph_free(g);
    }
    gml_free(ctx);
}

/* ---- 4. the ops on every layout, ISA and thread count ------------------------ */

struct op_case {
    int op;
    gml_tensor *y;
    double *want;
    double *bound;
};

static void verify_op(void *user) {
    struct op_case *c = user;
    CHECK_WITHIN(c->y, c->want, c->bound, "%s", OPS[c->op].name);
}

static void check_layouts(void) {
    static const struct {
        int n;
        int64_t ne[4];
    } shapes[] = {{1, {1}}, {1, {67}}, {2, {3, 37}}, {3, {2, 5, 33}}, {4, {2, 3, 5, 19}},
                  {3, {3, 1, 301}}, {2, {7, 1}}};
    const gml_isa isas[] = {GML_TEST_FAST_ISAS};
    uint64_t seed = 300;
    for (int op = 0; op < N_OPS; op++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int l = 0; l < CHK_N_LAYOUTS; l++) {
                chk_rng r = chk_seed(seed++);
                gml_context *ctx = chk_ctx(4 << 20);
                gml_tensor *x = chk_new_input(ctx, GML_F32, shapes[s].n, shapes[s].ne,
                                              (chk_layout)l, "x", &r, -9, 9);
                char sx[64];
                chk_shape(x, sx, sizeof sx);
                gml_tensor *y = OPS[op].build(ctx, x);
                /* the same numbers laid out contiguously: bitwise the same result */
                gml_tensor *yc = OPS[op].build(ctx, gml_cont(ctx, x));
                if (!CHECK(y && yc, "%s: build: %s", OPS[op].name, gml_last_error(ctx))) {
                    gml_free(ctx);
                    continue;
                }
                CHECK(gml_same_shape(y, x) && gml_is_contiguous(y), "%s keeps the shape, contiguous",
                      OPS[op].name);
                float *xd = chk_dense(x);
                const int64_t n = chk_numel(x);
                struct op_case c = {op, y, malloc((size_t)n * sizeof(double)),
                                    malloc((size_t)n * sizeof(double))};
                for (int64_t e = 0; e < n; e++) {
                    c.want[e] = OPS[op].ref((double)xd[e]);
                    const double tol = OPS[op].scalar_all > OPS[op].vector_all ? OPS[op].scalar_all
                                                                               : OPS[op].vector_all;
                    c.bound[e] = tol * fabs(c.want[e]) * FLT_EPSILON + TINY;
                }
                gml_tensor *outs[] = {y, yc};
                gml_graph *g = gml_build_graph(ctx, outs, 2);
                for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
                    if (!gml_cpu_has(isas[k])) continue;
                    chk_case("%s of %s %s, %s kernels", OPS[op].name, chk_layout_name((chk_layout)l),
                             sx, gml_isa_name(isas[k]));
                    CHECK_RUN(g, .outs = outs, .n_outs = 2, .verify = verify_op, .user = &c,
                              .isa = isas[k]);
                    float *a = chk_dense(y);
                    CHECK_EQUAL(yc, a, "%s: contiguous input gives other bits", OPS[op].name);
                    free(a);
                }
                gml_graph_free(g);
                free(c.want);
                free(c.bound);
                free(xd);
                gml_free(ctx);
            }
}

/* ---- 5. in place through the planner ---------------------------------------- */

static gml_tensor *chain(gml_context *ctx, gml_tensor *x) {
    gml_tensor *t = gml_scale(ctx, x, 0.5f); /* an intermediate: the chain may reuse it */
    for (int op = 0; op < N_OPS; op++) t = OPS[op].build(ctx, t);
    return gml_silu(ctx, gml_tanh(ctx, t));
}

static void check_inplace(void) {
    const int64_t ne[] = {5, 3, 41};
    const gml_isa isas[] = {GML_TEST_ISAS};
    chk_rng r = chk_seed(77);
    /* the chain with its own memory everywhere */
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *x = chk_new_input(ctx, GML_F32, 3, ne, CHK_CONTIGUOUS, "x", &r, -3, 3);
    gml_tensor *y = chain(ctx, x);
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    /* planned: each unary node over its source */
    gml_context *pctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true});
    gml_tensor *px = gml_new_tensor(pctx, GML_F32, 3, ne);
    gml_set_flags(px, GML_FLAG_INPUT);
    gml_tensor *py = chain(pctx, px);
    gml_set_flags(py, GML_FLAG_OUTPUT);
    gml_graph *pg = gml_build_graph(pctx, &py, 1);
    chk_case("a chain of the unary ops planned in place");
    if (!CHECK(g && pg && gml_graph_plan(pg, NULL) == GML_OK, "plan: %s", pg ? gml_graph_error(pg) : "")) return;
    int inplace = 0;
    for (int i = 0; i < gml_graph_n_nodes(pg); i++) {
        gml_tensor *t = gml_graph_node(pg, i);
        if (t->op >= GML_OP_NEG && t->op <= GML_OP_GELU_TANH && t->src[0]->op != GML_OP_NONE)
            inplace += gml_graph_data(pg, t) == gml_graph_data(pg, t->src[0]);
    }
    CHECK(inplace == N_OPS + 2, "%d of the %d unary nodes were planned in place", inplace, N_OPS + 2);
    memcpy(gml_graph_data(pg, px), x->data, gml_nbytes(x));
    for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
        if (!gml_cpu_has(isas[k])) continue;
        gml_set_isa(isas[k]);
        for (int nth = 1; nth <= 4; nth++) {
            chk_case("in place chain, %s kernels, %d threads", gml_isa_name(isas[k]), nth);
            chk_poison_nodes(g);
            CHECK(gml_graph_compute(g, nth) == GML_OK && gml_graph_compute(pg, nth) == GML_OK,
                  "compute");
            CHECK(memcmp(gml_graph_data(pg, py), y->data, gml_nbytes(y)) == 0,
                  "the chain in place differs from the chain with its own memory");
        }
        gml_set_isa(GML_ISA_AUTO);
    }
    gml_graph_free(pg);
    gml_graph_free(g);
    gml_free(pctx);
    gml_free(ctx);
}

/* ---- 6. builder errors ----------------------------------------------------- */

static void check_errors(void) {
    chk_case("builder errors");
    gml_context *ctx = chk_ctx(1 << 16);
    gml_tensor *i = gml_set_name(gml_new_tensor(ctx, GML_I32, 2, (int64_t[]){2, 3}), "i");
    for (int op = 0; op < N_OPS; op++) {
        CHECK(OPS[op].build(ctx, i) == NULL, "%s(i32) builds", OPS[op].name);
        char want[64];
        snprintf(want, sizeof want, "%s(i): 'i' must be f32, got i32 [2,3]", OPS[op].name);
        CHECK(strstr(gml_last_error(ctx), want) != NULL, "%s: message '%s', want '%s'",
              OPS[op].name, gml_last_error(ctx), want);
        CHECK(OPS[op].build(ctx, NULL) == NULL, "%s(NULL) builds", OPS[op].name);
    }
    gml_free(ctx);
}

int main(void) {
    gml_isa sets[2];
    chk_kernel_sets(sets); /* before any gml_set_isa */
    for (int v = 0; v < N_VARIANTS; v++)
        if (gml_cpu_has(VARIANTS[v].isa)) check_variant(&VARIANTS[v]);
        else printf("skip %s: this CPU lacks %s\n", VARIANTS[v].name, gml_isa_name(VARIANTS[v].isa));
    check_sweep();
    check_gelu_dense();
    check_specials();
    check_layouts();
    check_inplace();
    check_errors();
    return chk_summary();
}
