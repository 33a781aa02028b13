/* rms_norm and layer_norm over the last dim: the micro-kernel of
 * ops/norm.inc (every variant the CPU runs, bitwise equal to the scalar
 * one, also in place), then the ops against a naive double reference
 * written here from the definitions,
 *     rms_norm:   y = x / sqrt(mean(x^2) + eps) * w
 *     layer_norm: y = (x - mean) / sqrt(var + eps) * w + b   (biased var)
 * on odd shapes, every input layout (sliced, transposed, permuted), with and
 * without w and b, several eps, large and small magnitudes, NaN and inf, at
 * 1-4 and 7 threads under the reference kernels and under every ISA,
 * bitwise the same across ISAs; and the builders' errors.
 *
 * Tolerance, per element: the kernels round x^2 (or (x - mean)^2), x * r,
 * * w and + b to float and sum the statistics as ops/reduce.h does; so
 *     4 FLT_EPSILON |y| + 2 FLT_EPSILON |b|
 * and for layer_norm also what the float mean costs the float x - mean:
 *     2 FLT_EPSILON (|mean| + |x - mean|) r |w| (1 + |x - mean| r).
 * The largest error seen on the shapes of test_shapes (x in [-2, 3]), in
 * units of FLT_EPSILON (|y| + |w| + |b|) (the row's scale: y = 0 may be
 * the difference of two numbers of the size of w and b), is printed. */
#include "../ops/norm.h"
#include "check.h"

#include <float.h>

/* ---- the micro-kernel --------------------------------------------------------- */

typedef struct {
    gml_isa isa;
    const char *name;
    gml_f32_vnorm_ukernel *fn;
} variant;
#define ENTRY(isa, fn, tile) {isa, #fn, fn},
static const variant VARIANTS[] = {GML_F32_VNORM_UKERNELS(ENTRY)};

static void check_ukernels(void) {
    chk_rng r = chk_seed(11);
    size_t lengths[90];
    int n_len = 0;
    for (size_t n = 1; n <= 70; n++) lengths[n_len++] = n;
    const size_t big[] = {255, 256, 257, 1031};
    for (size_t k = 0; k < 4; k++) lengths[n_len++] = big[k];
    for (int li = 0; li < n_len; li++)
        for (int wb = 0; wb < 4; wb++) {
            const size_t n = lengths[li], pad = 32;
            float *x = malloc((n + pad) * sizeof *x), *w = malloc(n * sizeof *w), *b = malloc(n * sizeof *b);
            float *want = malloc(n * sizeof *want), *got = malloc((n + pad) * sizeof *got);
            float *inplace = malloc((n + pad) * sizeof *inplace);
            for (size_t i = 0; i < n; i++) {
                x[i] = chk_uniform(&r, -3, 3);
                w[i] = chk_uniform(&r, -2, 2);
                b[i] = chk_uniform(&r, -1, 1);
            }
            if (n > 3) x[n / 2] = NAN, x[n / 3] = INFINITY;
            const float c = chk_uniform(&r, -1, 1), s = chk_uniform(&r, 0.1f, 3);
            const float *wp = wb & 1 ? w : NULL, *bp = wb & 2 ? b : NULL;
            gml_f32_vnorm_ukernel__scalar_u1(n, x, c, s, wp, bp, want);
            chk_case("vnorm n %zu, %s, %s", n, wp ? "w" : "no w", bp ? "b" : "no b");
            for (size_t i = 0; i < n; i++) {
                float y = (x[i] - c) * s;
                if (wp) y *= wp[i];
                if (bp) y += bp[i];
                CHECK(memcmp(&y, &want[i], 4) == 0 || (isnan(y) && isnan(want[i])),
                      "scalar [%zu]: %.9g, want %.9g", i, (double)want[i], (double)y);
            }
            for (size_t v = 0; v < sizeof VARIANTS / sizeof *VARIANTS; v++) {
                if (!gml_cpu_has(VARIANTS[v].isa)) continue;
                for (size_t i = 0; i < n + pad; i++) got[i] = 1234.5f;
                VARIANTS[v].fn(n, x, c, s, wp, bp, got);
                memcpy(inplace, x, (n + pad) * sizeof *x);
                VARIANTS[v].fn(n, inplace, c, s, wp, bp, inplace);
                CHECK(memcmp(got, want, n * 4) == 0, "%s: differs from the scalar variant", VARIANTS[v].name);
                CHECK(memcmp(inplace, want, n * 4) == 0, "%s in place: differs from the scalar variant",
                      VARIANTS[v].name);
                bool untouched = true;
                for (size_t i = n; i < n + pad; i++) untouched = untouched && got[i] == 1234.5f;
                CHECK(untouched, "%s: wrote past n", VARIANTS[v].name);
            }
            free(x), free(w), free(b), free(want), free(got), free(inplace);
        }
    chk_case("%s", "");
}

/* ---- the ops ------------------------------------------------------------------- */

struct norm_case {
    bool layer;
    gml_tensor *x, *w, *b, *y;
    float eps;
    bool track; /* counts in worst_err (well-conditioned rows) */
    double *want, *bound;
};

static double worst_err[2]; /* rms_norm, layer_norm: max |got - want| / (FLT_EPSILON (|y| + |w| + |b|)) */

static void reference(struct norm_case *c) {
    float *xd = chk_dense(c->x), *wd = c->w ? chk_dense(c->w) : NULL, *bd = c->b ? chk_dense(c->b) : NULL;
    const int64_t d = c->x->ne[3], rows = chk_numel(c->x) / d;
    for (int64_t r = 0; r < rows; r++) {
        const float *x = xd + r * d;
        double mean = 0, var = 0;
        if (c->layer) {
            for (int64_t j = 0; j < d; j++) mean += x[j];
            mean /= (double)d;
        }
        for (int64_t j = 0; j < d; j++) var += ((double)x[j] - mean) * ((double)x[j] - mean);
        var /= (double)d;
        const double rr = 1.0 / sqrt(var + (double)c->eps);
        for (int64_t j = 0; j < d; j++) {
            const double w = wd ? wd[j] : 1.0, b = bd ? bd[j] : 0.0, dev = (double)x[j] - mean;
            double y = dev * rr * w + b;
            if (!c->layer) y = (double)x[j] / sqrt(var + (double)c->eps) * w;
            c->want[r * d + j] = y;
            double bound = 4 * FLT_EPSILON * fabs(y) + 2 * FLT_EPSILON * fabs(b) + 1e-37;
            if (c->layer)
                bound += 2 * FLT_EPSILON * (fabs(mean) + fabs(dev)) * rr * fabs(w) * (1 + fabs(dev) * rr);
            c->bound[r * d + j] = bound;
        }
    }
    free(xd), free(wd), free(bd);
}

static void verify(void *user) {
    struct norm_case *c = user;
    CHECK_WITHIN(c->y, c->want, c->bound, "%s vs the double reference", c->layer ? "layer_norm" : "rms_norm");
    float *got = chk_dense(c->y), *bd = c->b ? chk_dense(c->b) : NULL, *wd = c->w ? chk_dense(c->w) : NULL;
    const int64_t d = c->x->ne[3];
    for (int64_t e = 0; e < chk_numel(c->y); e++) {
        const double want = c->want[e];
        if (!c->track || !isfinite(want) || !isfinite(got[e])) continue;
        const double scale =
            FLT_EPSILON * (fabs(want) + (wd ? fabs(wd[e % d]) : 1) + (bd ? fabs(bd[e % d]) : 0)) + 1e-37;
        worst_err[c->layer] = fmax(worst_err[c->layer], fabs(got[e] - want) / scale);
    }
    free(got), free(bd), free(wd);
}

static void run_case(gml_context *ctx, struct norm_case *c) {
    c->y = c->layer ? gml_layer_norm(ctx, c->x, c->w, c->b, c->eps) : gml_rms_norm(ctx, c->x, c->w, c->eps);
    if (!CHECK(c->y, "builder: %s", gml_last_error(ctx))) return;
    CHECK(gml_same_shape(c->y, c->x) && gml_is_contiguous(c->y), "y is x's shape, contiguous");
    const size_t n = (size_t)chk_numel(c->x);
    c->want = malloc(n * sizeof(double));
    c->bound = malloc(n * sizeof(double));
    reference(c);
    gml_graph *g = gml_build_graph(ctx, &c->y, 1);
    static const gml_isa isas[] = {GML_TEST_FAST_ISAS};
    float *first = NULL;
    for (size_t i = 0; i < sizeof isas / sizeof *isas; i++) {
        if (!gml_cpu_has(isas[i])) continue;
        CHECK_RUN(g, .outs = &c->y, .n_outs = 1, .verify = verify, .user = c, .isa = isas[i]);
        const gml_isa saved = gml_get_isa();
        gml_set_isa(isas[i]);
        CHECK(gml_graph_compute(g, 3) == GML_OK, "compute");
        gml_set_isa(saved);
        if (!first) first = chk_dense(c->y);
        else CHECK_EQUAL(c->y, first, "%s: bitwise the scalar kernels' result", gml_isa_name(isas[i]));
    }
    free(first);
    gml_graph_free(g);
    free(c->want);
    free(c->bound);
}

static void test_shapes(void) {
    static const struct {
        int n;
        int64_t ne[4];
    } shapes[] = {{1, {1}},        {1, {7}},           {2, {5, 1}},     {2, {3, 17}},
                  {2, {7, 64}},    {3, {3, 5, 33}},    {3, {2, 3, 257}}, {4, {2, 3, 5, 31}},
                  {2, {9, 1031}},  {4, {1, 3, 1, 65}}};
    static const float eps[] = {1e-6f, 1e-5f, 0.1f, 0.0f};
    uint64_t seed = 100;
    int k = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int l = 0; l < CHK_N_LAYOUTS; l++)
            for (int layer = 0; layer < 2; layer++, k++) {
                chk_rng r = chk_seed(seed++);
                gml_context *ctx = chk_ctx(8 << 20);
                struct norm_case c = {.layer = layer, .eps = eps[k % 4], .track = true};
                const int64_t d = shapes[s].ne[shapes[s].n - 1];
                c.x = chk_new_input(ctx, GML_F32, shapes[s].n, shapes[s].ne, (chk_layout)l, "x", &r, -2, 3);
                if (k % 3 != 0)
                    c.w = chk_new_input(ctx, GML_F32, 1, &d, (chk_layout)(k % 2), "w", &r, -2, 2);
                if (layer && k % 5 != 1)
                    c.b = chk_new_input(ctx, GML_F32, 1, &d, (chk_layout)(k % 2), "b", &r, -1, 1);
                char sx[64];
                chk_case("%s, %s x %s, %s, %s, eps %g", layer ? "layer_norm" : "rms_norm",
                         chk_layout_name((chk_layout)l), chk_shape(c.x, sx, sizeof sx), c.w ? "w" : "no w",
                         c.b ? "b" : "no b", (double)c.eps);
                run_case(ctx, &c);
                gml_free(ctx);
            }
}

/* Magnitudes: huge (x^2 still finite in float), tiny (eps 0 so they count),
 * and a large offset (layer_norm's mean cancels). */
static void test_magnitudes(void) {
    static const struct {
        float lo, hi, eps;
        const char *what;
    } cases[] = {
        {-1e17f, 1e17f, 1e-6f, "+-1e17"},       {-1e-15f, 1e-15f, 0.0f, "+-1e-15, eps 0"},
        {1e4f, 1e4f + 2, 1e-5f, "1e4 + [0, 2]"}, {-3.0f, 3.0f, 1e30f, "eps 1e30"},
        {5.0f, 5.0f, 1e-5f, "a constant row"},
    };
    uint64_t seed = 700;
    for (size_t s = 0; s < sizeof cases / sizeof *cases; s++)
        for (int layer = 0; layer < 2; layer++) {
            chk_rng r = chk_seed(seed++);
            gml_context *ctx = chk_ctx(4 << 20);
            struct norm_case c = {.layer = layer, .eps = cases[s].eps};
            c.x = chk_new_input(ctx, GML_F32, 2, (int64_t[]){6, 300}, CHK_SLICED, "x", &r, cases[s].lo, cases[s].hi);
            c.w = chk_new_input(ctx, GML_F32, 1, (int64_t[]){300}, CHK_CONTIGUOUS, "w", &r, -2, 2);
            if (layer) c.b = chk_new_input(ctx, GML_F32, 1, (int64_t[]){300}, CHK_CONTIGUOUS, "b", &r, -1, 1);
            chk_case("%s, %s", layer ? "layer_norm" : "rms_norm", cases[s].what);
            run_case(ctx, &c);
            gml_free(ctx);
        }
}

/* A NaN makes its row NaN; an inf makes a layer_norm row NaN and an
 * rms_norm row 0 but NaN at the inf; other rows are untouched. */
static void test_special(void) {
    for (int layer = 0; layer < 2; layer++)
        for (int layout = 0; layout < 2; layout++) {
            chk_rng r = chk_seed(800 + (uint64_t)(2 * layer + layout));
            gml_context *ctx = chk_ctx(4 << 20);
            struct norm_case c = {.layer = layer, .eps = 1e-5f};
            const int64_t rows = 5, d = 37;
            c.x = chk_new_input(ctx, GML_F32, 2, (int64_t[]){rows, d}, layout ? CHK_TRANSPOSED : CHK_CONTIGUOUS,
                                "x", &r, -3, 3);
            c.w = chk_new_input(ctx, GML_F32, 1, &d, CHK_CONTIGUOUS, "w", &r, 0.5f, 2);
            *(float *)chk_at(c.x, 0 * d + 5) = NAN;
            *(float *)chk_at(c.x, 1 * d + 7) = INFINITY;
            *(float *)chk_at(c.x, 2 * d + 9) = -INFINITY;
            *(float *)chk_at(c.x, 3 * d + 1) = INFINITY;
            *(float *)chk_at(c.x, 3 * d + 2) = -INFINITY;
            chk_case("%s: NaN, +inf, -inf, +-inf rows, %s", layer ? "layer_norm" : "rms_norm",
                     layout ? "transposed" : "contiguous");
            run_case(ctx, &c);
            gml_free(ctx);
        }
}

static void test_errors(void) {
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *x = gml_set_name(gml_new_tensor(ctx, GML_F32, 3, (int64_t[]){2, 3, 8}), "x");
    gml_tensor *w7 = gml_set_name(gml_new_tensor(ctx, GML_F32, 1, (int64_t[]){7}), "w");
    gml_tensor *w18 = gml_set_name(gml_new_tensor(ctx, GML_F32, 2, (int64_t[]){1, 8}), "w2");
    gml_tensor *b = gml_set_name(gml_new_tensor(ctx, GML_F32, 1, (int64_t[]){9}), "b");
    gml_tensor *w = gml_set_name(gml_new_tensor(ctx, GML_F32, 1, (int64_t[]){8}), "w8");
    gml_tensor *wi = gml_set_name(gml_new_tensor(ctx, GML_I32, 1, (int64_t[]){8}), "wi");
    chk_case("builder errors");
    CHECK(!gml_rms_norm(ctx, x, w7, 1e-6f), "w [7] for x [2,3,8] fails");
    CHECK_CONTAINS(gml_last_error(ctx), "rms_norm(x, w): weight w [7] does not match the last dim of x [2,3,8]");
    CHECK(!gml_rms_norm(ctx, x, w18, 1e-6f), "w [1,8] fails");
    CHECK_CONTAINS(gml_last_error(ctx), "weight w2 [1,8]");
    CHECK(!gml_layer_norm(ctx, x, w, b, 1e-5f), "b [9] fails");
    CHECK_CONTAINS(gml_last_error(ctx), "layer_norm(x, w8, b): bias b [9] does not match the last dim of x [2,3,8]");
    CHECK(!gml_layer_norm(ctx, x, NULL, b, 1e-5f), "b [9] without w fails");
    CHECK_CONTAINS(gml_last_error(ctx), "layer_norm(x, b): bias b [9]");
    CHECK(!gml_rms_norm(ctx, x, wi, 1e-6f), "i32 w fails");
    CHECK_CONTAINS(gml_last_error(ctx), "wi");
    CHECK(!gml_rms_norm(ctx, x, w, -1e-6f), "negative eps fails");
    CHECK_CONTAINS(gml_last_error(ctx), "rms_norm(x, w8): eps -1e-06 must be finite and >= 0");
    CHECK(!gml_layer_norm(ctx, x, NULL, NULL, NAN), "NaN eps fails");
    CHECK_CONTAINS(gml_last_error(ctx), "layer_norm(x): eps nan");
    CHECK(!gml_rms_norm(ctx, NULL, w, 1e-6f), "NULL x gives NULL");
    gml_free(ctx);
}

int main(void) {
    check_ukernels();
    test_shapes();
    test_magnitudes();
    test_special();
    test_errors();
    printf("max error vs double, in FLT_EPSILON (|y| + |w| + |b|): rms_norm %.2f, layer_norm %.2f\n",
           worst_err[0], worst_err[1]);
    return chk_summary();
}
