/* The backward ops' micro-kernels and fast kernels against independent
 * references: unary_back (every variant of ops/unary.inc's *_BACK lists
 * against the derivative in long double, on a sweep with tails, specials,
 * huge and tiny inputs; the vector variants bitwise equal to each other),
 * sum_to's column sums (every variant of ops/reduce.inc's COLSUM list
 * bitwise against a plain loop: every column length to 64, 0-3 summed dims),
 * rms_norm_back's and layer_norm_back's rows (every variant of
 * ops/norm.inc's VNORM_BACK list bitwise the scalar variant's, each within
 * its bound of a long double truth, odd lengths, in place),
 * then the ops (and view_back, whose fast kernel is binary's vaddc) under
 * every ISA at 1-4 and 7 threads against the reference kernel on
 * contiguous, transposed and sliced inputs, bitwise equal across thread
 * counts, each naming the micro-kernel it ran. */
#include "../ops/norm.h"
#include "../ops/ops_back.h"
#include "simd_check.h"

typedef struct {
    gml_isa isa;
    gml_f32_vunary_back_ukernel *fn;
    int tile;
    const char *name;
    gml_op op;
} back_variant;

#define V_TANH(isa, fn, tile) {isa, fn, tile, #fn, GML_OP_TANH},
#define V_SIGMOID(isa, fn, tile) {isa, fn, tile, #fn, GML_OP_SIGMOID},
#define V_SILU(isa, fn, tile) {isa, fn, tile, #fn, GML_OP_SILU},
#define V_GELU(isa, fn, tile) {isa, fn, tile, #fn, GML_OP_GELU},
#define V_GELU_TANH(isa, fn, tile) {isa, fn, tile, #fn, GML_OP_GELU_TANH},
static const back_variant BACK_VARIANTS[] = {
    GML_F32_VTANH_BACK_UKERNELS(V_TANH) GML_F32_VSIGMOID_BACK_UKERNELS(V_SIGMOID)
    GML_F32_VSILU_BACK_UKERNELS(V_SILU) GML_F32_VGELU_BACK_UKERNELS(V_GELU)
    GML_F32_VGELU_TANH_BACK_UKERNELS(V_GELU_TANH)
};
#define N_BACK_VARIANTS (sizeof BACK_VARIANTS / sizeof *BACK_VARIANTS)

/* ---- the truth: f'(x) in long double, from e = exp(-|s|) (no cancellation
 * but at a root of f'), and the size of its terms, sigma: the bound below
 * allows |dy| sigma 2^-48 beside an ulp (the reference's 1 - tanh^2 and
 * 1 - sigmoid lose that much near 1). */
static long double truth(gml_op op, float xf, long double *sigma) {
    const long double x = xf, C1 = 1.5957691216057307117597842397375l,
                      C3 = C1 * 0.044715l;
    if (isnan(xf)) {
        *sigma = 1;
        return NAN;
    }
    switch (op) {
    case GML_OP_TANH: {
        const long double e = expl(-2 * fabsl(x)), i = 1 / (1 + e);
        *sigma = 2;
        return 4 * e * i * i;
    }
    case GML_OP_SIGMOID: {
        const long double e = expl(-fabsl(x)), i = 1 / (1 + e);
        *sigma = 1;
        return e * i * i;
    }
    case GML_OP_GELU: {
        *sigma = 1 + fabsl(x);
        const long double phi = isinf(xf) ? 0 : expl(-x * x / 2) * 0.39894228040143267793994605993438l;
        return 0.5l * erfcl(-x * 0.70710678118654752440084436210485l) + x * phi;
    }
    default: { /* silu: s + x e/(1+e)^2; gelu_tanh the same with z = 2u, m = x (C1 + 3 C3 x^2) */
        const bool silu = op == GML_OP_SILU;
        const long double z = silu ? x : x * (C1 + C3 * x * x);
        const long double m = silu ? x : x * (C1 + 3 * C3 * x * x);
        const long double e = expl(-fabsl(z)), i = 1 / (1 + e), s = z > 0 ? i : e * i;
        *sigma = 1 + fabsl(m);
        return s + m * e * i * i;
    }
    }
}

/* got within ulp(want) + |dy| sigma 2^-48 of dy f'(x) (NaN where it is NaN) */
static bool close_to_truth(gml_op op, float x, float dy, float got, double *worst) {
    long double sigma;
    const long double t = truth(op, x, &sigma) * (long double)dy;
    /* an infinite dy: inf or NaN (inf times an f' that underflows in double) */
    if (isinf(dy) && !isnan(t)) return !isfinite(got);
    if (isnan(t) || isinf(t)) return same_f32(got, (float)t) || (isnan(got) && isnan(t));
    const double want = (double)t, d = fabs((double)got - want), ulp = ulp_of(fabs(want));
    const double cancel = fabs((double)dy) * (double)sigma * 0x1p-48;
    if (cancel < ulp / 64 && d / ulp > *worst) *worst = d / ulp;
    return d <= ulp + cancel;
}

static float special_x(void) {
    const float s[] = {NAN,    INFINITY, -INFINITY, -0.0f,  0.0f,   3e38f,  -3e38f,
                       1e-40f, -1e-40f,  1e-30f,    -14.9f, -20.0f, 100.0f, -100.0f,
                       -0.75f, -1.28f,   9.5f,      -9.5f,  800.0f, -800.0f};
    return s[rand_int(sizeof s / sizeof *s)];
}

/* x: a sweep of [-30, 30], a log sweep of both signs and specials; dy in
 * [-2, 2] with some specials (NaN, inf, 0, 1e30) */
static void fill_back_inputs(size_t n, float *x, float *dy) {
    for (size_t i = 0; i < n; i++) {
        const int kind = (int)rand_int(10);
        x[i] = kind < 5 ? rand_uniform(-30, 30)
             : kind < 8 ? (rand_int(2) ? 1 : -1) * ldexpf(rand_uniform(1, 2), (int)rand_int(60) - 40)
                        : special_x();
        const int dk = (int)rand_int(40);
        dy[i] = dk == 0 ? NAN : dk == 1 ? INFINITY : dk == 2 ? 0.0f : dk == 3 ? 1e30f
              : rand_uniform(-2, 2);
    }
}

static void check_back_variants(void) {
    const size_t big = 20011;
    float *x = malloc(big * sizeof *x), *dy = malloc(big * sizeof *dy);
    float *out = malloc((big + 40) * sizeof *out), *first = malloc(big * sizeof *first);
    fill_back_inputs(big, x, dy);
    gml_op first_op = GML_OP_NONE;
    for (size_t v = 0; v < N_BACK_VARIANTS; v++) {
        const back_variant *bv = &BACK_VARIANTS[v];
        if (!cpu_runs(bv->isa, bv->name)) continue;
        /* tails: every length around the tile, then the sweep */
        size_t lens[13];
        int nl = tile_lengths(bv->tile, lens);
        lens[nl++] = big;
        double worst = 0;
        for (int l = 0; l < nl; l++) {
            const size_t n = lens[l];
            for (size_t i = 0; i < n + 40; i++) out[i] = 555.0f;
            bv->fn(n, x, dy, out);
            int bad = 0;
            for (size_t i = 0; i < n && bad < 5; i++)
                if (!close_to_truth(bv->op, x[i], dy[i], out[i], &worst)) {
                    bad++;
                    CHECK(false, "%s n=%zu: dy %.9g x %.9g: got %.9g", bv->name, n,
                          (double)dy[i], (double)x[i], (double)out[i]);
                }
            for (size_t i = n; i < n + 40; i++)
                CHECK(out[i] == 555.0f, "%s n=%zu: wrote out[%zu] past the end", bv->name, n, i);
        }
        /* the vector variants of one op: bitwise equal to each other */
        if (bv->isa != GML_ISA_SCALAR) {
            if (first_op != bv->op) {
                memcpy(first, out, big * sizeof *out);
                first_op = bv->op;
            } else {
                for (size_t i = 0; i < big; i++)
                    CHECK(same_f32(out[i], first[i]), "%s: out[%zu] = %.9g, another ISA's %.9g",
                          bv->name, i, (double)out[i], (double)first[i]);
            }
        }
        /* in place: out = dy, then out = x */
        float *a = malloc(big * sizeof *a);
        memcpy(a, dy, big * sizeof *a);
        bv->fn(big, x, a, a);
        for (size_t i = 0; i < big; i++)
            CHECK(same_f32(a[i], out[i]), "%s in place (dy): %zu", bv->name, i);
        memcpy(a, x, big * sizeof *a);
        bv->fn(big, a, dy, a);
        for (size_t i = 0; i < big; i++)
            CHECK(same_f32(a[i], out[i]), "%s in place (x): %zu", bv->name, i);
        free(a);
        printf("%-44s max %.3f ulp from the truth (where |dy| sigma 2^-48 is below ulp / 64)\n", bv->name, worst);
    }
    free(x);
    free(dy);
    free(out);
    free(first);
}

/* ---- sum_to's column sums: every variant against a plain loop, bitwise --- */

typedef struct {
    gml_isa isa;
    gml_f32_colsum_ukernel *fn;
    int tile;
    const char *name;
} colsum_variant;
#define V_COLSUM(isa, fn, tile) {isa, fn, tile, #fn},
static const colsum_variant COLSUM_VARIANTS[] = {GML_F32_COLSUM_UKERNELS(V_COLSUM)};

static float special_sum(void) {
    const float s[] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f, 3e38f, -3e38f, 1e-40f};
    return s[rand_int(sizeof s / sizeof *s)];
}

static void check_colsum_variants(void) {
    /* terms: none, 1 dim, 2 and 3 dims with odd counts and padded strides */
    static const struct {
        int n;
        int64_t ne[3];
    } shapes[] = {{0, {0}}, {1, {1}}, {1, {300}}, {2, {3, 37}}, {3, {2, 3, 5}}};
    static const size_t lens[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 63, 64};
    const size_t row_floats = 80; /* > GML_COLSUM_MAX: padded rows */
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        gml_colsum_terms t = {.n = shapes[si].n};
        int64_t rows = 1;
        for (int d = t.n - 1; d >= 0; d--) {
            t.ne[d] = shapes[si].ne[d];
            t.nb[d] = rows * (int64_t)(row_floats * sizeof(float));
            rows *= t.ne[d];
        }
        /* the outer dim's stride past the inner ones (a sliced view) */
        if (t.n >= 2) {
            t.nb[0] += 3 * (int64_t)(row_floats * sizeof(float));
            rows += 3 * (t.ne[0] - 1);
        }
        float *x = malloc((size_t)rows * row_floats * sizeof *x);
        fill_uniform(x, (size_t)rows * row_floats, -100, 100);
        for (size_t i = 0; i < (size_t)rows * row_floats; i += 1 + (size_t)rand_int(97))
            x[i] = special_sum();
        for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
            const size_t len = lens[li], off = (size_t)rand_int(5);
            /* the plain loop: the terms in row-major order, in double */
            float want[GML_COLSUM_MAX];
            for (size_t j = 0; j < len; j++) {
                double acc = 0;
                for (int64_t r = 0; r < gml_colsum_count(&t); r++) {
                    int64_t rest = r, o = 0;
                    for (int d = t.n - 1; d >= 0; d--) {
                        o += rest % t.ne[d] * t.nb[d];
                        rest /= t.ne[d];
                    }
                    acc += *(const float *)(const void *)((const char *)(x + off + j) + o);
                }
                want[j] = (float)acc;
            }
            for (size_t v = 0; v < sizeof COLSUM_VARIANTS / sizeof *COLSUM_VARIANTS; v++) {
                const colsum_variant *cv = &COLSUM_VARIANTS[v];
                if (li == 0 && si == 0 && !cpu_runs(cv->isa, cv->name)) continue;
                if (!gml_cpu_has(cv->isa)) continue;
                float out[GML_COLSUM_MAX + 16];
                for (size_t j = 0; j < GML_COLSUM_MAX + 16; j++) out[j] = 555.0f;
                cv->fn(len, (const char *)(x + off), &t, out);
                for (size_t j = 0; j < len; j++)
                    CHECK(same_f32(out[j], want[j]), "%s len %zu, %d dims: out[%zu] = %.9g, want %.9g",
                          cv->name, len, t.n, j, (double)out[j], (double)want[j]);
                for (size_t j = len; j < GML_COLSUM_MAX + 16; j++)
                    CHECK(out[j] == 555.0f, "%s len %zu: wrote out[%zu] past the end", cv->name, len, j);
            }
        }
        free(x);
    }
}

/* ---- rms_norm_back / layer_norm_back rows ------------------------------------
 * The truth in long double (sums in order), and each element's bound: an
 * ulp plus 2^-44 r (|g| + |mg| + |xh mgx|) (the double sums' rounding,
 * which only shows where those terms cancel). */
static void norm_back_truth(size_t n, const float *x, const float *dy, const float *w, float eps,
                            bool layer, double *t, double *bound) {
    long double mean = 0, var = 0, mg = 0, mgx = 0;
    if (layer) {
        for (size_t i = 0; i < n; i++) mean += x[i];
        mean /= (long double)n;
    }
    for (size_t i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    const long double r = 1 / sqrtl(var / (long double)n + eps);
    for (size_t i = 0; i < n; i++) {
        const long double g = (long double)dy[i] * (w ? w[i] : 1);
        mg += g;
        mgx += g * (x[i] - mean) * r;
    }
    mg /= (long double)n;
    mgx /= (long double)n;
    for (size_t i = 0; i < n; i++) {
        const long double g = (long double)dy[i] * (w ? w[i] : 1), xh = (x[i] - mean) * r;
        const long double v = r * ((layer ? g - mg : g) - xh * mgx);
        t[i] = (double)v;
        bound[i] = isfinite(v) ? ulp_of(fabs((double)v)) +
                                     (double)(r * (fabsl(g) + fabsl(mg) + fabsl(xh * mgx))) * 0x1p-44
                               : 0;
    }
}
static bool norm_close(float got, double t, double bound) {
    if (!isfinite(t)) return isnan(t) ? isnan(got) : same_f32(got, (float)t);
    return fabs((double)got - t) <= bound;
}

typedef struct {
    gml_isa isa;
    gml_f32_vnorm_back_ukernel *fn;
    int tile;
    const char *name;
} norm_back_variant;
#define V_NORM_BACK(isa, fn, tile) {isa, fn, tile, #fn},
static const norm_back_variant NORM_BACK_VARIANTS[] = {GML_F32_VNORM_BACK_UKERNELS(V_NORM_BACK)};

/* every variant: bitwise the scalar variant's (the first), within the bound
 * of the truth; x and dy in place too */
static void check_norm_back_variants(void) {
    static const size_t lens[] = {1, 2, 7, 15, 16, 17, 31, 33, 100, 257, 512, 1000};
    const size_t maxn = 1000;
    float *x = malloc(maxn * sizeof *x), *dy = malloc(maxn * sizeof *dy), *w = malloc(maxn * sizeof *w);
    float *want = malloc((maxn + 40) * sizeof *want), *out = malloc((maxn + 40) * sizeof *out);
    float *a = malloc(maxn * sizeof *a);
    double *t = malloc(maxn * sizeof *t), *bound = malloc(maxn * sizeof *bound);
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
        for (int c = 0; c < 8; c++) {
            const size_t n = lens[li];
            const bool layer = c & 1, has_w = c & 2, special = c & 4;
            fill_uniform(x, n, -3, 5); /* a mean away from 0 */
            fill_uniform(dy, n, -1, 1);
            fill_uniform(w, n, 0.5f, 1.5f);
            if (special && n > 3) { /* a spread row: one large value, some zeros */
                x[n / 2] = 1e4f;
                x[1] = 0.0f;
                dy[2] = -0.0f;
            }
            const float eps = layer ? 1e-5f : 1e-6f;
            norm_back_truth(n, x, dy, has_w ? w : NULL, eps, layer, t, bound);
            for (size_t v = 0; v < sizeof NORM_BACK_VARIANTS / sizeof *NORM_BACK_VARIANTS; v++) {
                const norm_back_variant *nv = &NORM_BACK_VARIANTS[v];
                if (!gml_cpu_has(nv->isa)) {
                    if (li == 0 && c == 0) cpu_runs(nv->isa, nv->name);
                    continue;
                }
                float *o = v == 0 ? want : out;
                for (size_t i = 0; i < n + 40; i++) o[i] = 555.0f;
                nv->fn(n, x, dy, has_w ? w : NULL, eps, layer, o);
                int bad = 0;
                for (size_t i = 0; i < n && bad < 3; i++) {
                    if (!norm_close(o[i], t[i], bound[i])) {
                        bad++;
                        CHECK(false, "%s n=%zu %s%s: out[%zu] = %.9g, the truth %.9g", nv->name, n,
                              layer ? "layer" : "rms", has_w ? " w" : "", i, (double)o[i], t[i]);
                    }
                    if (v > 0 && !same_f32(o[i], want[i])) {
                        bad++;
                        CHECK(false, "%s n=%zu %s%s: out[%zu] = %.9g, the scalar variant's %.9g",
                              nv->name, n, layer ? "layer" : "rms", has_w ? " w" : "", i,
                              (double)o[i], (double)want[i]);
                    }
                }
                for (size_t i = n; i < n + 40; i++)
                    CHECK(o[i] == 555.0f, "%s n=%zu: wrote out[%zu] past the end", nv->name, n, i);
                memcpy(a, x, n * sizeof *a);
                nv->fn(n, a, dy, has_w ? w : NULL, eps, layer, a);
                for (size_t i = 0; i < n; i++)
                    CHECK(same_f32(a[i], o[i]), "%s n=%zu in place (x): %zu", nv->name, n, i);
                memcpy(a, dy, n * sizeof *a);
                nv->fn(n, x, a, has_w ? w : NULL, eps, layer, a);
                for (size_t i = 0; i < n; i++)
                    CHECK(same_f32(a[i], o[i]), "%s n=%zu in place (dy): %zu", nv->name, n, i);
            }
        }
    /* a NaN in dy: the row NaN */
    fill_uniform(x, 37, -1, 1);
    fill_uniform(dy, 37, -1, 1);
    dy[20] = NAN;
    for (size_t v = 0; v < sizeof NORM_BACK_VARIANTS / sizeof *NORM_BACK_VARIANTS; v++) {
        if (!gml_cpu_has(NORM_BACK_VARIANTS[v].isa)) continue;
        NORM_BACK_VARIANTS[v].fn(37, x, dy, NULL, 1e-5, true, out);
        for (size_t i = 0; i < 37; i++)
            CHECK(isnan(out[i]), "%s: a NaN in dy, out[%zu] = %g", NORM_BACK_VARIANTS[v].name, i,
                  (double)out[i]);
    }
    free(x);
    free(dy);
    free(w);
    free(want);
    free(out);
    free(a);
    free(t);
    free(bound);
}

/* ---- op level ---------------------------------------------------------- */

static const int THREADS[] = {1, 2, 3, 4, 7};
#define N_THREADS (int)(sizeof THREADS / sizeof *THREADS)

/* Computes out under every ISA at every thread count: each element within
 * what ok() allows of the reference kernel's (ok gets the element's index
 * in logical order), bitwise equal across thread counts; and the node ran
 * the ISA's micro-kernel (its name holds the ISA's), or the reference with
 * a reason when fast is false. */
typedef bool elem_ok(size_t i, float got, float ref, const void *arg);
static bool check_fast = true;
static void check_op(gml_context *ctx, gml_tensor *out, elem_ok *ok, const void *arg,
                     const char *what) {
    const bool fast = check_fast;
    check_fast = true;
    gml_graph *g = gml_build_graph(ctx, &out, 1);
    CHECK(g != NULL, "%s: build: %s", what, gml_last_error(ctx));
    if (!g) return;
    const size_t n = (size_t)gml_nelements(out);
    uint32_t *ref = malloc(n * 4), *first = malloc(n * 4), *got = malloc(n * 4);
    compute_with(g, out, GML_ISA_REFERENCE, 1, ref);
    const gml_isa isas[] = {GML_TEST_FAST_ISAS};
    for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
        if (!gml_cpu_has(isas[k])) {
            printf("skip %s under %s: this CPU lacks it\n", what, gml_isa_name(isas[k]));
            continue;
        }
        for (int t = 0; t < N_THREADS; t++) {
            uint32_t *y = t == 0 ? first : got;
            if (!compute_with(g, out, isas[k], THREADS[t], y)) continue;
            const char *kn = gml_graph_node_kernel(g, -1);
            CHECK(kn && (fast ? strstr(kn, gml_isa_name(isas[k])) != NULL
                              : strncmp(kn, "reference (", 11) == 0),
                  "%s (%s): ran %s, want %s", what, gml_isa_name(isas[k]), kn ? kn : "(null)",
                  fast ? "the ISA's micro-kernel" : "the reference, saying why");
            int bad = 0;
            for (size_t i = 0; i < n && bad < 3; i++) {
                float a, b;
                memcpy(&a, &y[i], 4);
                memcpy(&b, &ref[i], 4);
                if (t > 0 && y[i] != first[i]) {
                    bad++;
                    CHECK(false, "%s (%s): element %zu differs between 1 and %d threads", what,
                          gml_isa_name(isas[k]), i, THREADS[t]);
                } else if (t == 0 && !ok(i, a, b, arg)) {
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
}

static gml_tensor *rnd(gml_context *ctx, int n_dims, const int64_t *ne, float lo, float hi) {
    gml_tensor *t = gml_new_tensor(ctx, GML_F32, n_dims, ne);
    fill_uniform(t->data, (size_t)gml_nelements(t), lo, hi);
    return t;
}

/* unary_back: within an ulp of the reference (both are f' in double,
 * rounded once) plus |dy| sigma 2^-48 */
typedef struct {
    gml_op op;
    const float *x, *dy; /* in logical order */
} back_arg;
static bool back_ok(size_t i, float got, float ref, const void *arg) {
    const back_arg *a = arg;
    if (isnan(ref) || isinf(ref)) return same_f32(got, ref) || (isnan(got) && isnan(ref));
    long double sigma;
    (void)truth(a->op, a->x[i], &sigma);
    return fabs((double)got - ref) <=
           ulp_of(fabs((double)ref)) + fabs((double)a->dy[i]) * (double)sigma * 0x1p-47;
}

static float *logical(const gml_tensor *t) {
    float *buf = malloc((size_t)gml_nelements(t) * sizeof *buf);
    read_elems(t, (uint32_t *)(void *)buf);
    return buf;
}

static void check_unary_back_ops(void) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 64 << 20});
    static const gml_op OPS[] = {GML_OP_TANH, GML_OP_SIGMOID, GML_OP_SILU, GML_OP_GELU,
                                 GML_OP_GELU_TANH};
    gml_tensor *x = rnd(ctx, 3, (int64_t[]){3, 37, 129}, -6, 6);
    gml_tensor *dy = rnd(ctx, 3, (int64_t[]){3, 37, 129}, -2, 2);
    float *xs = x->data;
    for (size_t i = 0; i < 3 * 37 * 129; i += 1 + (size_t)rand_int(40)) xs[i] = special_x();
    /* transposed (last dim strided: gathered) and sliced (rows dense) */
    gml_tensor *xt = gml_transpose(ctx, rnd(ctx, 3, (int64_t[]){3, 129, 37}, -6, 6), -2, -1);
    gml_tensor *big = rnd(ctx, 3, (int64_t[]){4, 40, 140}, -2, 2);
    gml_tensor *dys = gml_view(ctx, big, 3, (int64_t[]){3, 37, 129},
                               (size_t[]){big->nb[1], big->nb[2], big->nb[3]},
                               big->nb[1] + 2 * big->nb[2] + 5 * big->nb[3]);
    struct {
        gml_tensor *x, *dy;
        const char *what;
    } cases[] = {{x, dy, "[3,37,129] contiguous"},
                 {xt, dy, "x transposed [3,37,129]"},
                 {x, dys, "dy sliced [3,37,129]"},
                 {xt, dys, "x transposed, dy sliced"}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (size_t o = 0; o < sizeof OPS / sizeof *OPS; o++) {
            char what[160];
            snprintf(what, sizeof what, "unary_back %s, %s", gml_op_name(OPS[o]), cases[c].what);
            const back_arg a = {OPS[o], logical(cases[c].x), logical(cases[c].dy)};
            check_op(ctx, gml_unary_back(ctx, cases[c].x, cases[c].dy, OPS[o]), back_ok, &a, what);
            free((void *)a.x);
            free((void *)a.dy);
        }
    gml_free(ctx);
}

static bool exact_ok(size_t i, float got, float ref, const void *arg) {
    (void)i;
    (void)arg;
    return same_f32(got, ref);
}

static void check_sum_to_ops(void) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 64 << 20});
    gml_tensor *a = rnd(ctx, 2, (int64_t[]){300, 1000}, -1, 1);
    check_op(ctx, gml_sum_to(ctx, a, 1, (int64_t[]){1000}), exact_ok, NULL, "sum_to [300,1000] -> [1000]");
    gml_tensor *b = rnd(ctx, 4, (int64_t[]){2, 3, 5, 37}, -10, 10);
    ((float *)b->data)[77] = INFINITY;
    ((float *)b->data)[500] = NAN;
    check_op(ctx, gml_sum_to(ctx, b, 3, (int64_t[]){3, 1, 37}), exact_ok, NULL,
             "sum_to [2,3,5,37] -> [3,1,37]");
    check_op(ctx, gml_sum_to(ctx, b, 4, (int64_t[]){1, 3, 5, 37}), exact_ok, NULL,
             "sum_to [2,3,5,37] -> [1,3,5,37]");
    check_fast = false;
    check_op(ctx, gml_sum_to(ctx, b, 2, (int64_t[]){5, 1}), exact_ok, NULL,
             "sum_to [2,3,5,37] -> [5,1] (the last dim summed)");
    check_fast = false;
    check_op(ctx, gml_sum_to(ctx, b, 1, (int64_t[]){1}), exact_ok, NULL, "sum_to -> [1]");
    /* rows sliced out of a wider tensor (rows strided, columns dense), and transposed */
    gml_tensor *w = rnd(ctx, 3, (int64_t[]){4, 70, 150}, -1, 1);
    gml_tensor *s = gml_view(ctx, w, 3, (int64_t[]){3, 67, 129},
                             (size_t[]){w->nb[1], w->nb[2], w->nb[3]}, w->nb[2] + 7 * w->nb[3]);
    check_op(ctx, gml_sum_to(ctx, s, 1, (int64_t[]){129}), exact_ok, NULL, "sum_to sliced [3,67,129] -> [129]");
    check_op(ctx, gml_sum_to(ctx, s, 3, (int64_t[]){3, 1, 129}), exact_ok, NULL,
             "sum_to sliced [3,67,129] -> [3,1,129]");
    gml_tensor *tr = gml_transpose(ctx, rnd(ctx, 2, (int64_t[]){129, 67}, -1, 1), -2, -1);
    check_fast = false;
    check_op(ctx, gml_sum_to(ctx, tr, 1, (int64_t[]){129}), exact_ok, NULL,
             "sum_to transposed [67,129] -> [129]");
    gml_free(ctx);
}

/* the op's rows against norm_back_truth */
typedef struct {
    int64_t d;
    const double *t, *bound;
} norm_arg;
static bool norm_ok(size_t i, float got, float ref, const void *arg) {
    (void)ref;
    const norm_arg *a = arg;
    return norm_close(got, a->t[i], a->bound[i]);
}

static void check_norm_back_ops(void) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 64 << 20});
    const int64_t d = 77, rows = 3 * 41;
    gml_tensor *x = rnd(ctx, 3, (int64_t[]){3, 41, d}, -2, 3);
    gml_tensor *dy = rnd(ctx, 3, (int64_t[]){3, 41, d}, -1, 1);
    gml_tensor *w = rnd(ctx, 1, (int64_t[]){d}, 0.5f, 1.5f);
    gml_tensor *xt = gml_transpose(ctx, rnd(ctx, 3, (int64_t[]){3, d, 41}, -2, 3), -2, -1);
    gml_tensor *dyt = gml_transpose(ctx, rnd(ctx, 3, (int64_t[]){3, d, 41}, -1, 1), -2, -1);
    gml_tensor *big = rnd(ctx, 3, (int64_t[]){4, 45, 90}, -1, 1);
    gml_tensor *dys = gml_view(ctx, big, 3, (int64_t[]){3, 41, d},
                               (size_t[]){big->nb[1], big->nb[2], big->nb[3]},
                               big->nb[1] + 2 * big->nb[2] + 5 * big->nb[3]);
    struct {
        gml_tensor *x, *dy, *w;
        const char *what;
    } cases[] = {{x, dy, w, "[3,41,77] contiguous"}, {x, dy, NULL, "[3,41,77] no weight"},
                 {xt, dy, w, "x transposed"},         {x, dyt, w, "dy transposed"},
                 {xt, dys, NULL, "x transposed, dy sliced"}};
    double *t = malloc((size_t)(rows * d) * sizeof *t), *bound = malloc((size_t)(rows * d) * sizeof *bound);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (int layer = 0; layer < 2; layer++) {
            float *xs = logical(cases[c].x), *gs = logical(cases[c].dy);
            const float eps = layer ? 1e-5f : 1e-6f;
            for (int64_t r = 0; r < rows; r++)
                norm_back_truth((size_t)d, xs + r * d, gs + r * d, cases[c].w ? cases[c].w->data : NULL,
                                eps, layer, t + r * d, bound + r * d);
            char what[160];
            snprintf(what, sizeof what, "%s, %s", layer ? "layer_norm_back" : "rms_norm_back", cases[c].what);
            const norm_arg a = {d, t, bound};
            gml_tensor *out = layer ? gml_layer_norm_back(ctx, cases[c].x, cases[c].dy, cases[c].w, eps)
                                    : gml_rms_norm_back(ctx, cases[c].x, cases[c].dy, cases[c].w, eps);
            check_op(ctx, out, norm_ok, &a, what);
            free(xs);
            free(gs);
        }
    free(t);
    free(bound);
    gml_free(ctx);
}

/* view_back: slices and disjoint views (the fast path: dy + 0 into zeros),
 * places shared or rows strided (the reference) */
static void check_view_back_ops(void) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 64 << 20});
    gml_tensor *dy = rnd(ctx, 3, (int64_t[]){3, 37, 129}, -1, 1);
    float *g = dy->data;
    g[5] = -0.0f;
    g[77] = NAN;
    g[300] = -INFINITY;
    /* a slice [3, 37, 129] of [4, 40, 140] at (1, 2, 5) */
    check_op(ctx, gml_view_back(ctx, dy, 3, (int64_t[]){4, 40, 140}, (int64_t[]){40 * 140, 140, 1},
                                1 * 40 * 140 + 2 * 140 + 5),
             exact_ok, NULL, "view_back: a slice of [4,40,140]");
    /* every other row of [3, 74, 129], permuted dims (strides not in order) */
    check_op(ctx, gml_view_back(ctx, dy, 3, (int64_t[]){74, 3, 129}, (int64_t[]){129, 2 * 3 * 129, 1}, 0),
             exact_ok, NULL, "view_back: rows spread, dims permuted");
    /* the whole of [3, 37, 129] (no zeros left) and [3 * 37 * 129] as 1-D */
    check_op(ctx, gml_view_back(ctx, dy, 3, (int64_t[]){3, 37, 129}, (int64_t[]){37 * 129, 129, 1}, 0),
             exact_ok, NULL, "view_back: the whole source");
    gml_tensor *col = rnd(ctx, 2, (int64_t[]){50, 1}, -1, 1);
    check_op(ctx, gml_view_back(ctx, col, 2, (int64_t[]){50, 3}, (int64_t[]){3, 1}, 1), exact_ok,
             NULL, "view_back: a column [50,1] of [50,3]");
    /* the reference's: stride 2 along the row, shared places (stride 0), a transposed dy */
    check_fast = false;
    check_op(ctx, gml_view_back(ctx, dy, 3, (int64_t[]){3, 37, 258}, (int64_t[]){37 * 258, 258, 2}, 0),
             exact_ok, NULL, "view_back: every other element");
    check_fast = false;
    check_op(ctx, gml_view_back(ctx, dy, 2, (int64_t[]){37, 129}, (int64_t[]){0, 129, 1}, 0),
             exact_ok, NULL, "view_back: summed over a broadcast dim");
    check_fast = false;
    gml_tensor *dt = gml_transpose(ctx, rnd(ctx, 2, (int64_t[]){129, 37}, -1, 1), -2, -1);
    check_op(ctx, gml_view_back(ctx, dt, 2, (int64_t[]){40, 130}, (int64_t[]){130, 1}, 131),
             exact_ok, NULL, "view_back: dy transposed");
    gml_free(ctx);
}

int main(void) {
    check_back_variants();
    check_colsum_variants();
    check_norm_back_variants();
    check_norm_back_ops();
    check_unary_back_ops();
    check_sum_to_ops();
    check_view_back_ops();
    return check_report("test_ukernels_backs");
}
