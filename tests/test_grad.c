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

    chk_case("NULL arguments");
    CHECK(gml_grad(NULL, y, a, &a, 1, g) == GML_ERR_INVALID, "NULL ctx");
    CHECK(gml_grad(ctx, NULL, a, &a, 1, g) == GML_ERR_INVALID, "NULL out");
    CHECK(gml_grad(ctx, y, a, &a, 0, g) == GML_ERR_INVALID, "no wrt");
    CHECK(gml_grad(ctx, y, a, (gml_tensor *[]){NULL}, 1, g) == GML_ERR_INVALID, "NULL wrt");
    gml_free(ctx);
}

int main(void) {
    test_broadcast_and_fan_out();
    test_implicit_one();
    test_refusals();
    return chk_summary();
}
