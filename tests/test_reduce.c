/* sum, mean, max over the last dim (keepdim): the micro-kernels of
 * ops/reduce.inc (every variant the CPU runs, bitwise equal to the scalar
 * one, which spells out the order of ops/reduce.h, and within the error
 * bound of that order of a sum taken here in double), then the ops on odd
 * shapes, every input layout (sliced, transposed, permuted), NaN and inf,
 * at 1-4 and 7 threads under the reference kernels and under every ISA,
 * bitwise the same across ISAs; and the builders' errors.
 *
 * Bound: each float lane of a block adds at most 16 terms, so a sum is off
 * by at most about 16 FLT_EPSILON times the sum of |terms| (taken as
 * 16 FLT_EPSILON sum|x|, plus half an ulp of the float result). */
#include "../ops/reduce.h"
#include "check.h"

#include <float.h>

typedef struct {
    gml_isa isa;
    const char *name;
    gml_f32_rsum_ukernel *sum;
    gml_f32_rsumsq_ukernel *sumsq;
    gml_f32_rmax_ukernel *max;
} variant;

#define SUM_ENTRY(isa, fn, tile) {isa, #fn, fn, NULL, NULL},
#define SUMSQ_ENTRY(isa, fn, tile) {isa, #fn, NULL, fn, NULL},
#define MAX_ENTRY(isa, fn, tile) {isa, #fn, NULL, NULL, fn},
static const variant VARIANTS[] = {GML_F32_RSUM_UKERNELS(SUM_ENTRY) GML_F32_RSUMSQ_UKERNELS(SUMSQ_ENTRY)
                                       GML_F32_RMAX_UKERNELS(MAX_ENTRY)};
#define N_VARIANTS ((int)(sizeof VARIANTS / sizeof *VARIANTS))

static double max_rel_err[N_VARIANTS];

enum { UNIFORM, WIDE, ZEROS, WITH_NAN, WITH_INF, INF_PAIR, OFFSET, N_DATA };
static const char *const DATA_NAMES[] = {"uniform [-1,1]", "magnitudes 1e-30..1e30", "+0 and -0",
                                         "a NaN", "+inf", "+inf and -inf", "1e4 + [-1,1]"};

static void fill(float *x, size_t n, int kind, chk_rng *r) {
    for (size_t i = 0; i < n; i++) {
        switch (kind) {
        case WIDE: x[i] = chk_uniform(r, -1, 1) * powf(10.0f, (float)chk_randint(r, -30, 30)); break;
        case ZEROS: x[i] = chk_randint(r, 0, 1) ? 0.0f : -0.0f; break;
        case OFFSET: x[i] = 1e4f + chk_uniform(r, -1, 1); break;
        default: x[i] = chk_uniform(r, -1, 1);
        }
    }
    const size_t at = (size_t)chk_randint(r, 0, (int)n - 1);
    if (kind == WITH_NAN) x[at] = NAN;
    if (kind == WITH_INF || kind == INF_PAIR) x[at] = INFINITY;
    if (kind == INF_PAIR && n > 1) x[(at + 1) % n] = -INFINITY;
}

static bool same_double(double a, double b) { return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0; }
static bool same_float(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static void check_ukernels(void) {
    size_t lengths[80];
    int n_len = 0;
    for (size_t n = 1; n <= 40; n++) lengths[n_len++] = n;
    const size_t big[] = {63, 64, 65, 255, 256, 257, 271, 511, 512, 513, 1000, 1031, 4099};
    for (size_t k = 0; k < sizeof big / sizeof *big; k++) lengths[n_len++] = big[k];
    chk_rng r = chk_seed(7);
    for (int li = 0; li < n_len; li++)
        for (int kind = 0; kind < N_DATA; kind++) {
            const size_t n = lengths[li];
            float *x = malloc((n + 16) * sizeof *x);
            fill(x, n, kind, &r);
            for (size_t i = n; i < n + 16; i++) x[i] = NAN; /* past the end: never read */
            const float c = kind == OFFSET ? 1e4f : kind == UNIFORM ? 0.25f : 0.0f;
            double want = 0, want_sq = 0, abs_sum = 0, abs_sq = 0;
            float want_max = -INFINITY;
            bool nan = false;
            for (size_t i = 0; i < n; i++) {
                const double d = (double)x[i] - (double)c;
                want += x[i];
                want_sq += d * d;
                abs_sum += fabs((double)x[i]);
                abs_sq += d * d;
                nan |= isnan(x[i]);
                if (x[i] > want_max) want_max = x[i];
            }
            if (nan) want_max = NAN;
            /* the scalar variants spell out the order; the others must match them bitwise */
            const double s_sum = VARIANTS[0].sum(n, x);
            const double s_sq = gml_f32_rsumsq_ukernel__scalar_u16(n, x, c);
            const float s_max = gml_f32_rmax_ukernel__scalar_u16(n, x);
            chk_case("n %zu, %s", n, DATA_NAMES[kind]);
            for (int v = 0; v < N_VARIANTS; v++) {
                const variant *va = &VARIANTS[v];
                if (!gml_cpu_has(va->isa)) continue;
                if (va->sum) {
                    const double got = va->sum(n, x);
                    CHECK(same_double(got, s_sum), "%s: %.17g, the scalar variant %.17g", va->name, got, s_sum);
                    const double tol = 16 * FLT_EPSILON * abs_sum;
                    if (isfinite(want)) {
                        CHECK(fabs(got - want) <= tol, "%s: %.17g, want %.17g (tol %.3g)", va->name, got, want, tol);
                        if (abs_sum > 0) max_rel_err[v] = fmax(max_rel_err[v], fabs(got - want) / abs_sum);
                    } else {
                        CHECK(same_double(got, want), "%s: %.17g, want %.17g", va->name, got, want);
                    }
                } else if (va->sumsq) {
                    const double got = va->sumsq(n, x, c);
                    CHECK(same_double(got, s_sq), "%s: %.17g, the scalar variant %.17g", va->name, got, s_sq);
                    /* WIDE: squares below FLT_MIN flush to denormals/0 (absolute error < n FLT_MIN) */
                    const double tol = 19 * FLT_EPSILON * abs_sq + (double)n * FLT_MIN;
                    if (isfinite(want_sq) && kind != WIDE) {
                        CHECK(fabs(got - want_sq) <= tol, "%s: %.17g, want %.17g (tol %.3g)", va->name, got, want_sq, tol);
                        if (abs_sq > 0) max_rel_err[v] = fmax(max_rel_err[v], fabs(got - want_sq) / abs_sq);
                    } else if (!isfinite(want_sq)) {
                        CHECK(same_double(got, want_sq), "%s: %.17g, want %.17g", va->name, got, want_sq);
                    }
                } else {
                    const float got = va->max(n, x);
                    CHECK(same_float(got, s_max), "%s: %.9g, the scalar variant %.9g", va->name, (double)got, (double)s_max);
                    CHECK(same_float(got, want_max) || (kind == ZEROS && got == 0.0f),
                          "%s: %.9g, want %.9g", va->name, (double)got, (double)want_max);
                }
            }
            free(x);
        }
    chk_case("%s", "");
    for (int v = 0; v < N_VARIANTS; v++)
        if (gml_cpu_has(VARIANTS[v].isa) && !VARIANTS[v].max)
            printf("%-40s max |error| / sum|terms| vs double: %.3g (%.2f FLT_EPSILON)\n", VARIANTS[v].name,
                   max_rel_err[v], max_rel_err[v] / FLT_EPSILON);
}

/* ---- the ops ----------------------------------------------------------------- */

struct red_case {
    gml_tensor *x, *y[3]; /* sum, mean, max */
    double *want[3], *bound[3];
};

static void reference(struct red_case *c) {
    float *xd = chk_dense(c->x);
    const int64_t n = c->x->ne[3], rows = chk_numel(c->x) / n;
    for (int64_t r = 0; r < rows; r++) {
        double s = 0, a = 0;
        float m = -INFINITY;
        bool nan = false;
        for (int64_t j = 0; j < n; j++) {
            const float v = xd[r * n + j];
            s += v;
            a += fabs((double)v);
            nan |= isnan(v);
            if (v > m) m = v;
        }
        c->want[0][r] = (float)s;
        c->want[1][r] = (float)(s / (double)n);
        c->want[2][r] = nan ? NAN : m;
        c->bound[0][r] = 16 * FLT_EPSILON * a + FLT_EPSILON * fabs(s);
        c->bound[1][r] = c->bound[0][r] / (double)n;
        c->bound[2][r] = 0;
    }
    free(xd);
}

static void verify(void *user) {
    struct red_case *c = user;
    static const char *const names[] = {"sum", "mean", "max"};
    for (int k = 0; k < 3; k++)
        CHECK_WITHIN(c->y[k], c->want[k], c->bound[k], "%s vs the double reference", names[k]);
}

/* Computes the case under the reference kernels and each ISA the CPU has,
 * at every thread count; the results of every ISA bitwise equal. */
static void run_case(gml_context *ctx, gml_tensor *x) {
    struct red_case c = {.x = x};
    c.y[0] = gml_sum(ctx, x);
    c.y[1] = gml_mean(ctx, x);
    c.y[2] = gml_max(ctx, x);
    for (int k = 0; k < 3; k++) {
        if (!CHECK(c.y[k], "builder: %s", gml_last_error(ctx))) return;
        CHECK(c.y[k]->n_dims == x->n_dims && c.y[k]->ne[3] == 1 && c.y[k]->ne[2] == x->ne[2] &&
                  c.y[k]->ne[0] == x->ne[0] && c.y[k]->ne[1] == x->ne[1],
              "the result is x's shape with the last dim 1");
    }
    const int64_t rows = chk_numel(x) / x->ne[3];
    for (int k = 0; k < 3; k++) {
        c.want[k] = malloc((size_t)rows * sizeof(double));
        c.bound[k] = malloc((size_t)rows * sizeof(double));
    }
    reference(&c);
    gml_graph *g = gml_build_graph(ctx, c.y, 3);
    static const gml_isa isas[] = {GML_TEST_FAST_ISAS};
    void *first[3] = {0};
    for (size_t i = 0; i < sizeof isas / sizeof *isas; i++) {
        if (!gml_cpu_has(isas[i])) continue;
        CHECK_RUN(g, .outs = c.y, .n_outs = 3, .verify = verify, .user = &c, .isa = isas[i]);
        gml_isa saved = gml_get_isa();
        gml_set_isa(isas[i]);
        CHECK(gml_graph_compute(g, 3) == GML_OK, "compute");
        gml_set_isa(saved);
        for (int k = 0; k < 3; k++) {
            if (!first[k]) first[k] = chk_dense(c.y[k]);
            else CHECK_EQUAL(c.y[k], first[k], "%s: bitwise the scalar kernels' result", gml_isa_name(isas[i]));
        }
    }
    gml_graph_free(g);
    for (int k = 0; k < 3; k++) {
        free(first[k]);
        free(c.want[k]);
        free(c.bound[k]);
    }
}

static void test_shapes(void) {
    static const struct {
        int n;
        int64_t ne[4];
    } shapes[] = {{1, {1}},         {1, {7}},          {1, {300}},        {2, {5, 1}},
                  {2, {3, 17}},     {2, {7, 31}},      {3, {3, 5, 16}},   {3, {2, 3, 257}},
                  {4, {2, 3, 5, 33}}, {2, {9, 1031}},  {4, {1, 3, 1, 65}}, {3, {5, 7, 9}}};
    uint64_t seed = 100;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int l = 0; l < CHK_N_LAYOUTS; l++) {
            chk_rng r = chk_seed(seed++);
            gml_context *ctx = chk_ctx(8 << 20);
            gml_tensor *x = chk_new_input(ctx, GML_F32, shapes[s].n, shapes[s].ne, (chk_layout)l, "x", &r,
                                          -2, 2);
            char sx[64];
            chk_case("%s x %s", chk_layout_name((chk_layout)l), chk_shape(x, sx, sizeof sx));
            run_case(ctx, x);
            gml_free(ctx);
        }
}

/* NaN, +-inf, huge and tiny values and signed zeros in some rows. */
static void test_special(void) {
    static const char *const what[] = {"a NaN", "+inf", "+inf and -inf", "-inf", "+-1e30 and 1e-30",
                                       "-0 only", "+0 and -0", "all -inf"};
    for (int layout = 0; layout < 2; layout++) {
        chk_rng r = chk_seed(900 + (uint64_t)layout);
        gml_context *ctx = chk_ctx(4 << 20);
        const int64_t rows = 8, n = 37;
        gml_tensor *x = chk_new_input(ctx, GML_F32, 2, (int64_t[]){rows, n},
                                      layout ? CHK_TRANSPOSED : CHK_CONTIGUOUS, "x", &r, -3, 3);
        for (int64_t row = 0; row < rows; row++) {
            float *v = malloc((size_t)n * sizeof *v);
            for (int64_t j = 0; j < n; j++) v[j] = *(float *)chk_at(x, row * n + j);
            const int64_t at = chk_randint(&r, 0, (int)n - 2);
            switch (row) {
            case 0: v[at] = NAN; break;
            case 1: v[at] = INFINITY; break;
            case 2: v[at] = INFINITY; v[at + 1] = -INFINITY; break;
            case 3: v[at] = -INFINITY; break;
            case 4:
                for (int64_t j = 0; j < n; j++) v[j] = j % 3 == 0 ? 1e30f : j % 3 == 1 ? -1e30f : 1e-30f;
                break;
            case 5: for (int64_t j = 0; j < n; j++) v[j] = -0.0f; break;
            case 6: for (int64_t j = 0; j < n; j++) v[j] = j % 2 ? -0.0f : 0.0f; break;
            case 7: for (int64_t j = 0; j < n; j++) v[j] = -INFINITY; break;
            }
            for (int64_t j = 0; j < n; j++) *(float *)chk_at(x, row * n + j) = v[j];
            free(v);
        }
        chk_case("special rows (%s, %s, ...), %s", what[0], what[1], layout ? "transposed" : "contiguous");
        run_case(ctx, x);
        gml_free(ctx);
    }
}

static void test_errors(void) {
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *i = gml_set_name(gml_new_tensor(ctx, GML_I32, 2, (int64_t[]){3, 4}), "idx");
    chk_case("builder errors");
    CHECK(gml_sum(ctx, i) == NULL, "sum of i32 fails");
    CHECK_CONTAINS(gml_last_error(ctx), "sum(idx)");
    CHECK_CONTAINS(gml_last_error(ctx), "[3,4]");
    CHECK(gml_max(ctx, i) == NULL, "max of i32 fails");
    CHECK_CONTAINS(gml_last_error(ctx), "max(idx)");
    CHECK(gml_mean(ctx, NULL) == NULL, "mean of NULL is NULL");
    gml_free(ctx);
}

int main(void) {
    check_ukernels();
    test_shapes();
    test_special();
    test_errors();
    return chk_summary();
}
