/* The reverse-mode engine (gml_grad, ggmlite/grad.c): gradients built as
 * nodes and computed as any graph; contributions of a tensor that feeds
 * several nodes summed in a fixed order; broadcast operands' gradients
 * summed back to their shapes; what is refused, by name. Each op's backward
 * is checked against finite differences in test_grad_ops.c. */
#include "check.h"
#include "internal.h"

static gml_tensor *input(gml_context *ctx, const char *name, int n, const int64_t *ne, chk_rng *r) {
    gml_tensor *t = gml_set_name(gml_new_tensor(ctx, GML_F32, n, ne), name);
    chk_fill_uniform(t, r, -1.0f, 1.0f);
    return t;
}

/* y = a * b + a, a [3, 5], b [5] (broadcast), loss = sum(y * dy) by dout:
 * da = dy * b + dy (a feeds two nodes), db = sum over rows of dy * a. The
 * gradients against plain loops in double (a few f32 roundings apart). */
static void test_broadcast_and_fan_out(void) {
    chk_case("a * b + a");
    chk_rng r = chk_seed(1);
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *a = input(ctx, "a", 2, (int64_t[]){3, 5}, &r);
    gml_tensor *b = input(ctx, "b", 1, (int64_t[]){5}, &r);
    gml_tensor *dy = input(ctx, "dy", 2, (int64_t[]){3, 5}, &r);
    gml_tensor *y = gml_add(ctx, gml_mul(ctx, a, b), a);
    gml_tensor *g[2] = {NULL, NULL};
    if (!CHECK(gml_grad(ctx, y, dy, (gml_tensor *[]){a, b}, 2, g) == GML_OK, "grad: %s",
               gml_last_error(ctx)))
        goto done;
    CHECK(gml_same_shape(g[0], a) && gml_same_shape(g[1], b) && g[0]->type == GML_F32 &&
              gml_is_contiguous(g[0]) && gml_is_contiguous(g[1]),
          "gradients have the shapes of a and b");
    gml_graph *gr = gml_build_graph(ctx, g, 2);
    double da[15], db[5] = {0};
    const float *A = a->data, *B = b->data, *DY = dy->data;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 5; j++) {
            da[i * 5 + j] = (double)DY[i * 5 + j] * B[j] + DY[i * 5 + j];
            db[j] += (double)DY[i * 5 + j] * A[i * 5 + j];
        }
    for (int nth = 1; nth <= 4; nth++) {
        CHECK(gml_graph_compute(gr, nth) == GML_OK, "compute: %s", gml_graph_error(gr));
        CHECK_CLOSE(g[0], da, 1e-6, 1e-6, "da at %d threads", nth);
        CHECK_CLOSE(g[1], db, 1e-6, 1e-6, "db at %d threads", nth);
    }
    gml_graph_free(gr);
done:
    gml_free(ctx);
}

/* A loss of one element without dout: its gradient is 1. */
static void test_implicit_one(void) {
    chk_case("implicit dout");
    chk_rng r = chk_seed(2);
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *a = input(ctx, "a", 1, (int64_t[]){1}, &r);
    gml_tensor *loss = gml_scale(ctx, a, 3.0f);
    gml_tensor *g = NULL;
    if (CHECK(gml_grad(ctx, loss, NULL, &a, 1, &g) == GML_OK, "grad: %s", gml_last_error(ctx))) {
        gml_graph *gr = gml_build_graph(ctx, &g, 1);
        CHECK(gml_graph_compute(gr, 1) == GML_OK, "compute: %s", gml_graph_error(gr));
        CHECK(*(float *)g->data == 3.0f, "d(3a)/da = 3, got %g", (double)*(float *)g->data);
        gml_graph_free(gr);
    }
    gml_free(ctx);
}

/* What gml_grad refuses, each by name. */
static void test_refusals(void) {
    chk_rng r = chk_seed(3);
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *a = input(ctx, "a", 2, (int64_t[]){3, 4}, &r);
    gml_tensor *w = input(ctx, "w", 1, (int64_t[]){4}, &r);
    gml_tensor *other = input(ctx, "other", 1, (int64_t[]){4}, &r);
    gml_tensor *dy3 = input(ctx, "dy3", 2, (int64_t[]){3, 1}, &r);
    gml_tensor *g[2] = {NULL, NULL};

    chk_case("an op with no backward");
    /* sum_to has none: the gradient of w must pass through it */
    gml_tensor *s = gml_set_name(gml_sum_to(ctx, gml_mul(ctx, a, w), 2, (int64_t[]){3, 1}), "s");
    CHECK(gml_grad(ctx, s, dy3, (gml_tensor *[]){a, w}, 2, g) == GML_ERR_INVALID && !g[0],
          "refused, grads untouched");
    CHECK_CONTAINS(gml_last_error(ctx),
                   "grad: no backward for op 'sum_to' (node 's'), needed for the gradient of 'a'");
    gml_clear_error(ctx);
    CHECK(gml_grad(ctx, s, dy3, &w, 1, g) == GML_ERR_INVALID, "refused for w alone");
    CHECK_CONTAINS(gml_last_error(ctx), "needed for the gradient of 'w'");
    gml_clear_error(ctx);

    chk_case("not on a path");
    gml_tensor *y = gml_mul(ctx, a, w);
    CHECK(gml_grad(ctx, y, a, &other, 1, g) == GML_ERR_INVALID, "refused");
    CHECK_CONTAINS(gml_last_error(ctx), "'other' [4] is not among the tensors");
    gml_clear_error(ctx);

    chk_case("dout of another shape");
    CHECK(gml_grad(ctx, y, w, &a, 1, g) == GML_ERR_INVALID, "refused");
    CHECK_CONTAINS(gml_last_error(ctx), "the output's gradient is f32 [4], the output [3,4]");
    gml_clear_error(ctx);

    chk_case("no dout for a loss of many elements");
    CHECK(gml_grad(ctx, y, NULL, &a, 1, g) == GML_ERR_INVALID, "refused");
    CHECK_CONTAINS(gml_last_error(ctx), "the output [3,4] has 12 elements");
    gml_clear_error(ctx);

    chk_case("an integer wrt");
    gml_tensor *idx = gml_set_name(gml_new_tensor_1d(ctx, GML_I32, 2), "idx");
    CHECK(gml_grad(ctx, y, a, &idx, 1, g) == GML_ERR_INVALID, "refused");
    CHECK_CONTAINS(gml_last_error(ctx), "'idx' is i32 [2]; gradients are taken with respect to");
    gml_clear_error(ctx);

    chk_case("backwards that cannot build");
    gml_tensor *xt = gml_transpose(ctx, a, 0, 1); /* [4, 3], strided */
    gml_tensor *v = gml_view(ctx, xt, 1, (int64_t[]){3}, (size_t[]){xt->nb[3]}, 0);
    CHECK(gml_grad(ctx, v, v, &a, 1, g) == GML_ERR_INVALID, "a view of a strided source");
    CHECK_CONTAINS(gml_last_error(ctx), "grad: backward of view (node 'a (transposed) (view)'): "
                                        "the source 'a (transposed)' [4,3] is strided");
    gml_clear_error(ctx);
    /* a write into a cache that the graph then reads whole */
    gml_tensor *cache = input(ctx, "cache", 2, (int64_t[]){4, 5}, &r);
    gml_tensor *s2 = input(ctx, "s2", 2, (int64_t[]){2, 5}, &r);
    gml_tensor *slot = gml_view(ctx, cache, 2, (int64_t[]){2, 5}, (size_t[]){20, 4}, 20);
    gml_tensor *all = gml_after(ctx, cache, gml_cpy(ctx, s2, slot));
    gml_tensor *sq = gml_mul(ctx, all, all);
    CHECK(gml_grad(ctx, sq, sq, &s2, 1, g) == GML_ERR_INVALID, "after over a written storage");
    CHECK_CONTAINS(gml_last_error(ctx), "grad: backward of after");
    CHECK_CONTAINS(gml_last_error(ctx), "writes into the storage of 'cache'");
    gml_clear_error(ctx);
    /* set_rows beyond 2-D */
    gml_tensor *d3 = input(ctx, "d3", 3, (int64_t[]){2, 4, 3}, &r);
    gml_tensor *s3 = input(ctx, "s3", 3, (int64_t[]){2, 2, 3}, &r);
    gml_tensor *i3 = gml_set_name(gml_new_tensor_1d(ctx, GML_I32, 2), "i3");
    gml_tensor *w3 = gml_set_rows(ctx, gml_cont(ctx, d3), s3, i3);
    CHECK(gml_grad(ctx, w3, d3, &s3, 1, g) == GML_ERR_INVALID, "set_rows 3-D");
    CHECK_CONTAINS(gml_last_error(ctx), "set_rows is taken for a 2-D destination and 1-D indices; "
                                        "got [2,4,3] and [2]");
    gml_clear_error(ctx);
    /* a q8_0 weight: no gradient through it, none of it */
    gml_tensor *wq = gml_set_name(gml_new_tensor_2d(ctx, GML_Q8_0, 4, 32), "wq");
    gml_tensor *xq = input(ctx, "xq", 2, (int64_t[]){2, 32}, &r);
    gml_tensor *yq = gml_linear(ctx, xq, wq, NULL);
    gml_tensor *dyq = input(ctx, "dyq", 2, (int64_t[]){2, 4}, &r);
    CHECK(yq && gml_grad(ctx, yq, dyq, &xq, 1, g) == GML_ERR_INVALID, "through a q8_0 b");
    CHECK_CONTAINS(gml_last_error(ctx), "the gradient of 'xq' through a q8_0 b 'wq (transposed)' "
                                        "[32,4] is not computed");
    gml_clear_error(ctx);
    CHECK(gml_grad(ctx, yq, dyq, &wq, 1, g) == GML_ERR_INVALID, "a q8_0 wrt");
    CHECK_CONTAINS(gml_last_error(ctx), "'wq' is q8_0 [4,32]; gradients are taken with respect to");
    gml_clear_error(ctx);
    CHECK(!g[0], "no gradient written by any refusal");

    chk_case("NULL arguments");
    CHECK(gml_grad(NULL, y, a, &a, 1, g) == GML_ERR_INVALID, "NULL ctx");
    CHECK(gml_grad(ctx, NULL, a, &a, 1, g) == GML_ERR_INVALID, "NULL out");
    CHECK(gml_grad(ctx, y, a, &a, 0, g) == GML_ERR_INVALID, "no wrt");
    CHECK(gml_grad(ctx, y, a, (gml_tensor *[]){NULL}, 1, g) == GML_ERR_INVALID, "NULL wrt");
    gml_free(ctx);
}

/* A graph of many ops and its gradients, built twice: in an allocating
 * context, and in a no_alloc one whose graph the planner places (memory of
 * dead tensors reused, elementwise nodes written over their sources): the
 * same gradients, bit for bit, so no backward reads memory the planner gave
 * away. */
static gml_tensor *planned_model(gml_context *ctx, gml_tensor **wrt) {
    gml_tensor *x = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, 2, 9, 16), "x");
    gml_tensor *w1 = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 24, 16), "w1");
    gml_tensor *b1 = gml_set_name(gml_new_tensor_1d(ctx, GML_F32, 24), "b1");
    gml_tensor *w2 = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 16, 24), "w2");
    gml_tensor *emb = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 11, 16), "emb");
    gml_tensor *idx = gml_set_name(gml_new_tensor_2d(ctx, GML_I32, 2, 9), "idx");
    gml_set_flags(idx, GML_FLAG_INPUT);
    gml_tensor *h = gml_add(ctx, x, gml_get_rows(ctx, emb, idx));
    gml_tensor *u = gml_tanh(ctx, gml_linear(ctx, h, w1, b1));
    gml_tensor *v = gml_linear(ctx, gml_silu(ctx, u), w2, NULL);
    gml_tensor *k = gml_repeat_interleave(ctx, gml_slice(ctx, v, 1, 2, 5), 2, 1); /* [2, 10, 16] */
    v = gml_mul(ctx, v, gml_exp(ctx, gml_scale(ctx, h, 0.1f)));
    gml_tensor *kp = gml_permute(ctx, k, (int[]){0, 2, 1});                    /* [2, 16, 10] */
    gml_tensor *m = gml_max(ctx, gml_mul(ctx, kp, kp));                         /* [2, 16, 1] */
    gml_tensor *s = gml_sum(ctx, gml_gelu(ctx, gml_permute(ctx, v, (int[]){0, 2, 1})));
    gml_tensor *loss = gml_mean(ctx, gml_reshape(ctx, gml_cont(ctx, gml_add(ctx, m, s)), 1,
                                                 (int64_t[]){32}));
    wrt[0] = x, wrt[1] = w1, wrt[2] = b1, wrt[3] = w2, wrt[4] = emb;
    return loss;
}

static void fill_model(const gml_graph *g, gml_context *ctx, uint64_t seed) {
    chk_rng r = chk_seed(seed);
    static const char *names[] = {"x", "w1", "b1", "w2", "emb", "idx"};
    for (int k = 0; k < 6; k++) {
        gml_tensor *t = gml_get_tensor(ctx, names[k]);
        const int64_t n = gml_nelements(t);
        void *p = gml_graph_data(g, t);
        for (int64_t e = 0; e < n; e++) {
            if (t->type == GML_I32) ((int32_t *)p)[e] = chk_randint(&r, 0, 10);
            else ((float *)p)[e] = chk_uniform(&r, -0.5f, 0.5f);
        }
    }
}

static void test_planned(void) {
    chk_case("planned");
    gml_context *ca = chk_ctx(16 << 20);
    gml_context *cp = gml_init((gml_init_params){.mem_size = 16 << 20, .no_alloc = true});
    gml_tensor *wa[5], *wp[5], *ga[5], *gp[5];
    gml_tensor *la = planned_model(ca, wa), *lp = planned_model(cp, wp);
    if (!CHECK(la && lp, "the model builds: %s %s", gml_last_error(ca), gml_last_error(cp)) ||
        !CHECK(gml_grad(ca, la, NULL, wa, 5, ga) == GML_OK, "grad: %s", gml_last_error(ca)) ||
        !CHECK(gml_grad(cp, lp, NULL, wp, 5, gp) == GML_OK, "grad: %s", gml_last_error(cp)))
        goto done;
    gml_graph *g1 = gml_build_graph(ca, ga, 5), *g2 = gml_build_graph(cp, gp, 5);
    CHECK(gml_graph_plan(g2, NULL) == GML_OK, "plan: %s", gml_graph_error(g2));
    CHECK(gml_graph_plan_peak(g2) < gml_graph_plan_naive(g2), "the plan reuses memory (%zu of %zu)",
          gml_graph_plan_peak(g2), gml_graph_plan_naive(g2));
    fill_model(g1, ca, 7);
    fill_model(g2, cp, 7);
    for (int nth = 1; nth <= 3; nth++) {
        CHECK(gml_graph_compute(g1, nth) == GML_OK, "compute: %s", gml_graph_error(g1));
        CHECK(gml_graph_compute(g2, nth) == GML_OK, "compute planned: %s", gml_graph_error(g2));
        for (int k = 0; k < 5; k++) {
            const gml_tensor *t = gml_graph_tensor(g2, gp[k]);
            CHECK(memcmp(ga[k]->data, t->data, gml_nbytes(ga[k])) == 0,
                  "d/d%s planned == allocated at %d threads", wa[k]->name, nth);
        }
    }
    gml_graph_free(g1);
    gml_graph_free(g2);
done:
    gml_free(ca);
    gml_free(cp);
}

int main(void) {
    test_broadcast_and_fan_out();
    test_implicit_one();
    test_refusals();
    test_planned();
    return chk_summary();
}
