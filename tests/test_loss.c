/* The losses (ops/loss.c): cross_entropy and mse_loss against plain loops
 * in double on odd shapes and every input layout (targets strided too), at
 * 1-4 and 7 threads under the reference kernels and the CPU's best, bitwise
 * the same across thread counts; cross_entropy_back against the same loop's
 * softmax; NaN rows; a target out of range (the message names it, where it
 * is and V, the same at every thread count, nothing written by the
 * backward); the builders' errors; and loss and gradients against PyTorch
 * (tests/fixtures/optim/losses.safetensors, gen_optim.py).
 *
 * Bound: each row's terms are computed in double and the mean rounded
 * once, so the result is within about 1e-6 relative of the double loop
 * (f32 rounding of the result plus the exp/log differences of libm). */
#include "check.h"
#include "../ops/ops_back.h"

#include <ggmlite/io.h>

static const char *fixtures;

#define SHAPE(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

/* ---- references in double ----------------------------------------------------- */

/* cross-entropy of dense logits [rows, V] and targets [rows]: the mean, and
 * each row's softmax into p (may be NULL) */
static double ref_ce(const float *x, const int32_t *t, int64_t rows, int64_t V, double *p) {
    double s = 0;
    for (int64_t r = 0; r < rows; r++) {
        const float *row = x + r * V;
        double m = -INFINITY;
        for (int64_t j = 0; j < V; j++) m = fmax(m, row[j]);
        double z = 0;
        for (int64_t j = 0; j < V; j++) z += exp(row[j] - m);
        s += m + log(z) - row[t[r]];
        if (p)
            for (int64_t j = 0; j < V; j++) p[r * V + j] = exp(row[j] - m) / z;
    }
    return s / (double)rows;
}

static bool near(double got, double want, double rtol) {
    return fabs(got - want) <= rtol * fabs(want) + 1e-12;
}

/* ---- cross_entropy ------------------------------------------------------------ */

typedef struct ce_case {
    gml_tensor *x, *t, *loss, *dx;
    double want;
    double *dwant;
    int64_t rows, V;
} ce_case;

static void verify_ce(void *user) {
    ce_case *c = user;
    const float got = ((float *)c->loss->data)[0];
    CHECK(near(got, c->want, 1e-6), "cross_entropy %.9g, want %.9g", (double)got, c->want);
    CHECK_CLOSE(c->dx, c->dwant, 1e-9, 1e-6, "cross_entropy_back");
}

static void test_cross_entropy(void) {
    static const struct {
        int n;
        int64_t ne[4];
        chk_layout lx, lt;
    } cases[] = {
        {2, {1, 1}, CHK_CONTIGUOUS, CHK_CONTIGUOUS},
        {2, {7, 33}, CHK_SLICED, CHK_CONTIGUOUS},
        {3, {3, 5, 17}, CHK_TRANSPOSED, CHK_TRANSPOSED},
        {3, {2, 9, 1000}, CHK_CONTIGUOUS, CHK_SLICED},
        {4, {2, 3, 4, 65}, CHK_REVERSED, CHK_REVERSED},
        {4, {3, 2, 5, 31}, CHK_OUTER_SWAPPED, CHK_OUTER_SWAPPED},
        {2, {300, 129}, CHK_SLICED_TRANSPOSED, CHK_SLICED},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        chk_rng r = chk_seed(10 + k);
        gml_context *ctx = chk_ctx(64 << 20);
        const int n = cases[k].n;
        const int64_t V = cases[k].ne[n - 1];
        ce_case c = {.V = V, .rows = 1};
        for (int d = 0; d < n - 1; d++) c.rows *= cases[k].ne[d];
        c.x = chk_new_input(ctx, GML_F32, n, cases[k].ne, cases[k].lx, "logits", &r, -8, 8);
        c.t = chk_new_input(ctx, GML_I32, n - 1, cases[k].ne, cases[k].lt, "targets", &r, 0,
                            (float)(V - 1));
        chk_case("cross_entropy %s (logits %d, targets %d)", chk_shape(c.x, (char[64]){0}, 64),
                 (int)cases[k].lx, (int)cases[k].lt);
        c.loss = gml_cross_entropy(ctx, c.x, c.t);
        gml_tensor *dy = gml_set_name(gml_new_tensor_1d(ctx, GML_F32, 1), "dy");
        ((float *)dy->data)[0] = -1.75f;
        c.dx = gml_cross_entropy_back(ctx, c.x, c.t, dy);
        if (!CHECK(c.loss && c.dx, "builds: %s", gml_last_error(ctx))) {
            gml_free(ctx);
            continue;
        }
        float *x = chk_dense(c.x);
        int32_t *t = chk_dense(c.t);
        c.dwant = malloc((size_t)(c.rows * V) * sizeof *c.dwant);
        c.want = ref_ce(x, t, c.rows, V, c.dwant);
        for (int64_t r2 = 0; r2 < c.rows; r2++) {
            c.dwant[r2 * V + t[r2]] -= 1;
            for (int64_t j = 0; j < V; j++) c.dwant[r2 * V + j] *= -1.75 / (double)c.rows;
        }
        gml_graph *g = gml_build_graph(ctx, (gml_tensor *[]){c.loss, c.dx}, 2);
        CHECK_RUN(g, .outs = (gml_tensor *[]){c.loss, c.dx}, .n_outs = 2, .verify = verify_ce,
                  .user = &c);
        /* the fast kernels ran (the last compute is under the CPU's best):
         * both name the vexp micro-kernel of that ISA */
        char want[64];
        snprintf(want, sizeof want, "gml_f32_vexp_ukernel__%s",
                 gml_get_isa() == GML_ISA_REFERENCE ? "" : gml_isa_name(gml_get_isa()));
        for (int i = 0; gml_get_isa() != GML_ISA_REFERENCE && i < gml_graph_n_nodes(g); i++) {
            const gml_op op = gml_graph_node(g, i)->op;
            if (op != GML_OP_CROSS_ENTROPY && op != GML_OP_CROSS_ENTROPY_BACK) continue;
            const char *kn = gml_graph_node_kernel(g, i);
            CHECK(kn && strstr(kn, want), "node %d ran %s, want %s...", i, kn ? kn : "(null)",
                  want);
        }
        gml_graph_free(g);
        free(x);
        free(t);
        free(c.dwant);
        gml_free(ctx);
    }

    /* a row with a NaN makes the loss NaN; a row of -inf too (no finite max) */
    for (int k = 0; k < 2; k++) {
        chk_case("cross_entropy with %s", k ? "a row of -inf" : "a NaN");
        gml_context *ctx = chk_ctx(1 << 20);
        gml_tensor *x = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 3, 4), "logits");
        gml_tensor *t = gml_set_name(gml_new_tensor_1d(ctx, GML_I32, 3), "targets");
        float xv[12] = {1, 2, 3, 4, 0, 0, 0, 0, -1, -2, -3, -4};
        if (k) for (int j = 4; j < 8; j++) xv[j] = -INFINITY;
        else xv[6] = NAN;
        memcpy(x->data, xv, sizeof xv);
        memcpy(t->data, (int32_t[]){0, 1, 2}, 3 * sizeof(int32_t));
        gml_tensor *loss = gml_cross_entropy(ctx, x, t);
        gml_graph *g = gml_build_graph(ctx, &loss, 1);
        CHECK(gml_graph_compute(g, 2) == GML_OK, "compute: %s", gml_graph_error(g));
        CHECK(isnan(((float *)loss->data)[0]), "loss %g, want NaN", (double)((float *)loss->data)[0]);
        gml_graph_free(g);
        gml_free(ctx);
    }
}

/* ---- a target out of range ----------------------------------------------------- */

static void test_bad_target(void) {
    gml_context *ctx = chk_ctx(4 << 20);
    gml_tensor *x = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, 2, 3, 5), "logits");
    gml_tensor *t = gml_set_name(gml_new_tensor_2d(ctx, GML_I32, 2, 3), "tgt");
    chk_rng r = chk_seed(3);
    chk_fill_uniform(x, &r, -1, 1);
    gml_tensor *dy = gml_set_name(gml_new_tensor_1d(ctx, GML_F32, 1), "dy");
    ((float *)dy->data)[0] = 1;
    gml_tensor *loss = gml_cross_entropy(ctx, x, t);
    gml_tensor *dx = gml_cross_entropy_back(ctx, x, t, dy);
    gml_graph *gl = gml_build_graph(ctx, &loss, 1), *gd = gml_build_graph(ctx, &dx, 1);
    static const struct {
        int32_t v[6];
        const char *want;
    } cases[] = {
        {{0, 1, 2, 3, 4, 5}, "target 5 at [1,2] of targets [2,3] is outside [0, V) for V = 5 (logits [2,3,5])"},
        {{0, -1, 2, 7, 4, 0}, "target -1 at [0,1] of targets [2,3]"}, /* the first of two */
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
        for (int nth = 1; nth <= 7; nth += 2) {
            chk_case("bad target case %zu, %d threads", k, nth);
            memcpy(t->data, cases[k].v, sizeof cases[k].v);
            CHECK(gml_graph_compute(gl, nth) == GML_ERR_INVALID, "cross_entropy fails");
            const char *e = gml_graph_error(gl);
            CHECK(strstr(e, "cross_entropy(logits, tgt)") && strstr(e, cases[k].want),
                  "message: %s", e);
            float *d = dx->data;
            for (int i = 0; i < 30; i++) d[i] = 12345.0f;
            CHECK(gml_graph_compute(gd, nth) == GML_ERR_INVALID, "cross_entropy_back fails");
            e = gml_graph_error(gd);
            CHECK(strstr(e, "cross_entropy_back(logits, tgt)") && strstr(e, cases[k].want),
                  "message: %s", e);
            bool untouched = true;
            for (int i = 0; i < 30; i++) untouched &= d[i] == 12345.0f;
            CHECK(untouched, "cross_entropy_back writes nothing on a bad target");
        }
    gml_graph_free(gl);
    gml_graph_free(gd);
    gml_free(ctx);
}

/* ---- mse_loss ------------------------------------------------------------------- */

typedef struct mse_case {
    gml_tensor *a, *b, *loss;
    double want;
} mse_case;

static void verify_mse(void *user) {
    mse_case *c = user;
    const float got = ((float *)c->loss->data)[0];
    CHECK(near(got, c->want, 6e-8), "mse_loss %.9g, want %.9g", (double)got, c->want);
}

static void test_mse(void) {
    static const struct {
        int n;
        int64_t ne[4];
        chk_layout la, lb;
    } cases[] = {
        {1, {1}, CHK_CONTIGUOUS, CHK_CONTIGUOUS},
        {1, {10001}, CHK_CONTIGUOUS, CHK_SLICED}, /* one row past 2 blocks of 4096 */
        {2, {7, 33}, CHK_TRANSPOSED, CHK_SLICED},
        {3, {3, 5, 17}, CHK_REVERSED, CHK_OUTER_SWAPPED},
        {4, {2, 3, 4, 5}, CHK_SLICED_TRANSPOSED, CHK_CONTIGUOUS},
        {2, {500, 257}, CHK_CONTIGUOUS, CHK_TRANSPOSED},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        chk_rng r = chk_seed(40 + k);
        gml_context *ctx = chk_ctx(64 << 20);
        mse_case c;
        c.a = chk_new_input(ctx, GML_F32, cases[k].n, cases[k].ne, cases[k].la, "a", &r, -3, 3);
        c.b = chk_new_input(ctx, GML_F32, cases[k].n, cases[k].ne, cases[k].lb, "b", &r, -3, 3);
        chk_case("mse_loss %s", chk_shape(c.a, (char[64]){0}, 64));
        c.loss = gml_mse_loss(ctx, c.a, c.b);
        if (!CHECK(c.loss, "builds: %s", gml_last_error(ctx))) {
            gml_free(ctx);
            continue;
        }
        float *a = chk_dense(c.a), *b = chk_dense(c.b);
        double s = 0;
        const int64_t n = chk_numel(c.a);
        for (int64_t e = 0; e < n; e++) s += ((double)a[e] - b[e]) * ((double)a[e] - b[e]);
        c.want = s / (double)n;
        gml_graph *g = gml_build_graph(ctx, &c.loss, 1);
        CHECK_RUN(g, .outs = &c.loss, .n_outs = 1, .verify = verify_mse, .user = &c);
        gml_graph_free(g);
        free(a);
        free(b);
        gml_free(ctx);
    }
}

/* ---- the builders' errors --------------------------------------------------------- */

static void expect_error(gml_context *ctx, gml_tensor *t, const char *want) {
    const char *e = gml_last_error(ctx);
    CHECK(t == NULL && strstr(e, want), "want an error with \"%s\", got %s: \"%s\"", want,
          t ? "a tensor" : "NULL", e);
}

static void test_errors(void) {
    chk_case("builder errors");
    gml_context *ctx = chk_ctx(1 << 20);
#define T(name, type, ...) gml_set_name(gml_new_tensor(ctx, type, SHAPE(__VA_ARGS__)), name)
    gml_tensor *x = T("x", GML_F32, 2, 3, 5), *t = T("t", GML_I32, 2, 3);
    expect_error(ctx, gml_cross_entropy(ctx, x, T("t2", GML_I32, 3, 2)),
                 "cross_entropy(x, t2): want logits [..., V] (2-D to 4-D) and targets of its "
                 "leading shape [...]; got logits [2,3,5], targets [3,2]");
    expect_error(ctx, gml_cross_entropy(ctx, x, T("t3", GML_I32, 2, 3, 5)), "targets [2,3,5]");
    expect_error(ctx, gml_cross_entropy(ctx, T("v", GML_F32, 5), T("s", GML_I32, 1)),
                 "got logits [5], targets [1]");
    expect_error(ctx, gml_cross_entropy(ctx, x, T("tf", GML_F32, 2, 3)), "cross_entropy(tf): 'tf' must be i32, got f32 [2,3]");
    expect_error(ctx, gml_cross_entropy(ctx, T("xi", GML_I32, 2, 3, 5), t), "cross_entropy(xi): 'xi' must be f32, got i32 [2,3,5]");
    gml_clear_error(ctx);
    expect_error(ctx, gml_cross_entropy(ctx, x, NULL), "gml_cross_entropy: targets is NULL");
    expect_error(ctx, gml_cross_entropy_back(ctx, x, t, T("dy", GML_F32, 2)),
                 "cross_entropy_back(x, t, dy): dy must have one element (the loss's gradient), "
                 "got [2]");
    expect_error(ctx, gml_mse_loss(ctx, x, T("b", GML_F32, 3, 5)),
                 "mse_loss(x, b): a and b must have one shape, got [2,3,5] and [3,5]");
    expect_error(ctx, gml_mse_loss(ctx, x, T("bh", GML_F16, 2, 3, 5)), "mse_loss(bh): 'bh' must be f32, got f16 [2,3,5]");
    /* no gradient for targets: integer */
    gml_tensor *g;
    CHECK(gml_grad(ctx, gml_cross_entropy(ctx, x, t), NULL, &t, 1, &g) == GML_ERR_INVALID,
          "no gradient for integer targets");
#undef T
    gml_free(ctx);
}

/* ---- PyTorch ------------------------------------------------------------------------ */

static void test_torch(void) {
    chk_case("PyTorch fixture losses.safetensors");
    char path[1024], err[512] = "";
    snprintf(path, sizeof path, "%s/losses.safetensors", fixtures);
    gml_context *fx = gml_load_safetensors(path, err, sizeof err);
    if (!CHECK(fx, "load %s: %s", path, err)) return;
    gml_context *ctx = chk_ctx(4 << 20);
    /* the inputs copied into strided layouts */
    gml_tensor *lx = gml_get_tensor(fx, "ce_logits"), *lt = gml_get_tensor(fx, "ce_targets");
    gml_tensor *ma = gml_get_tensor(fx, "mse_a"), *mb = gml_get_tensor(fx, "mse_b");
    if (!CHECK(lx && lt && ma && mb, "the fixture's tensors")) goto done;
    gml_tensor *x = chk_new_layout(ctx, GML_F32, lx->n_dims, lx->ne + 4 - lx->n_dims,
                                   CHK_TRANSPOSED, "logits");
    gml_tensor *t = chk_new_layout(ctx, GML_I32, lt->n_dims, lt->ne + 4 - lt->n_dims, CHK_SLICED,
                                   "targets");
    gml_tensor *a = chk_new_layout(ctx, GML_F32, ma->n_dims, ma->ne + 4 - ma->n_dims, CHK_REVERSED, "a");
    gml_tensor *b = chk_new_layout(ctx, GML_F32, mb->n_dims, mb->ne + 4 - mb->n_dims, CHK_SLICED, "b");
    gml_tensor *src[] = {lx, lt, ma, mb}, *dst[] = {x, t, a, b};
    for (int k = 0; k < 4; k++) {
        void *d = chk_dense(src[k]);
        chk_write(dst[k], d);
        free(d);
    }
    /* 0.75 * loss, as the fixture's backward */
    gml_tensor *ce = gml_cross_entropy(ctx, x, t), *mse = gml_mse_loss(ctx, a, b);
    gml_tensor *gce, *gm[2];
    CHECK(gml_grad(ctx, gml_scale(ctx, ce, 0.75f), NULL, &x, 1, &gce) == GML_OK, "grad ce: %s",
          gml_last_error(ctx));
    CHECK(gml_grad(ctx, gml_scale(ctx, mse, 0.75f), NULL, (gml_tensor *[]){a, b}, 2, gm) == GML_OK,
          "grad mse: %s", gml_last_error(ctx));
    gml_graph *g = gml_build_graph(ctx, (gml_tensor *[]){ce, mse, gce, gm[0], gm[1]}, 5);
    static const int threads[] = {1, 2, 3, 4, 7};
    for (int k = 0; k < 5; k++) {
        if (!CHECK(gml_graph_compute(g, threads[k]) == GML_OK, "compute: %s", gml_graph_error(g)))
            break;
        const struct {
            gml_tensor *got;
            const char *want;
        } cmp[] = {{ce, "ce_loss"}, {mse, "mse_loss"}, {gce, "ce_dlogits"}, {gm[0], "mse_da"},
                   {gm[1], "mse_db"}};
        for (size_t c = 0; c < sizeof cmp / sizeof *cmp; c++) {
            gml_tensor *w = gml_get_tensor(fx, cmp[c].want);
            float *wf = chk_dense(w);
            double *wd = malloc((size_t)chk_numel(w) * sizeof *wd);
            double scale = 0;
            for (int64_t e = 0; e < chk_numel(w); e++) scale = fmax(scale, fabs(wf[e]));
            for (int64_t e = 0; e < chk_numel(w); e++) wd[e] = wf[e];
            /* PyTorch's own f32 rounding: a few ulp of the largest element */
            CHECK_CLOSE(cmp[c].got, wd, 1e-6 * scale, 1e-6, "%s vs PyTorch (%d threads)",
                        cmp[c].want, threads[k]);
            free(wf);
            free(wd);
        }
    }
    gml_graph_free(g);
done:
    gml_free(ctx);
    gml_free(fx);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_loss FIXTURES_DIR (tests/fixtures/optim)\n");
        return 2;
    }
    fixtures = argv[1];
    test_cross_entropy();
    test_bad_target();
    test_mse();
    test_errors();
    test_torch();
    return chk_summary();
}
