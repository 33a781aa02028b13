/* Each op's backward against finite differences in double (grad_check.h):
 * every ISA the CPU has, 1-4 and 7 threads (bitwise the same gradients at
 * each), shapes with odd sizes, inputs in non-contiguous layouts (sliced
 * out of padded storage, transposed, permuted). */
#include "check.h"
#include "grad_check.h"

static int failures;

/* An input of shape ne stored as layout says, uniform in [lo, hi). */
static gml_tensor *in(gml_context *ctx, const char *name, int n, const int64_t *ne, chk_layout l,
                      chk_rng *r, float lo, float hi) {
    return chk_new_input(ctx, GML_F32, n, ne, l, name, r, lo, hi);
}
#define SHAPE(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

static void run(const char *name, gml_context *ctx, gml_tensor *out, gml_tensor *const *wrt, int n) {
    chk_case("%s", name);
    if (!CHECK(out, "%s builds: %s", name, gml_last_error(ctx))) return;
    const int f = grad_check(name, ctx, out, wrt, n, NULL);
    CHECK(f == 0, "%s: %d gradient checks failed (above)", name, f);
    failures += f;
}

static void test_binary(void) {
    static const gml_op ops[] = {GML_OP_ADD, GML_OP_SUB, GML_OP_MUL, GML_OP_DIV};
    for (size_t k = 0; k < 4; k++) {
        for (int bc = 0; bc < 3; bc++) {
            chk_rng r = chk_seed(10 + k * 3 + (uint64_t)bc);
            gml_context *ctx = chk_ctx(16 << 20);
            /* a [2, 3, 5] transposed in storage; b broadcast three ways */
            gml_tensor *a = in(ctx, "a", SHAPE(2, 3, 5), CHK_TRANSPOSED, &r, -1, 1);
            gml_tensor *b = bc == 0   ? in(ctx, "b", SHAPE(2, 3, 5), CHK_SLICED, &r, 0.5f, 1.5f)
                            : bc == 1 ? in(ctx, "b", SHAPE(3, 1), CHK_SLICED, &r, 0.5f, 1.5f)
                                      : in(ctx, "b", SHAPE(5), CHK_CONTIGUOUS, &r, 0.5f, 1.5f);
            gml_tensor *y = ops[k] == GML_OP_ADD   ? gml_add(ctx, a, b)
                            : ops[k] == GML_OP_SUB ? gml_sub(ctx, a, b)
                            : ops[k] == GML_OP_MUL ? gml_mul(ctx, a, b)
                                                   : gml_div(ctx, a, b);
            char name[64];
            snprintf(name, sizeof name, "%s (b %s)", gml_op_name(ops[k]),
                     bc == 0 ? "[2,3,5]" : bc == 1 ? "[3,1]" : "[5]");
            run(name, ctx, y, (gml_tensor *[]){a, b}, 2);
            /* the broadcast operand first: b (op) a */
            if (bc == 2) {
                y = ops[k] == GML_OP_ADD   ? gml_add(ctx, b, a)
                    : ops[k] == GML_OP_SUB ? gml_sub(ctx, b, a)
                    : ops[k] == GML_OP_MUL ? gml_mul(ctx, b, a)
                                           : gml_div(ctx, b, gml_add(ctx, gml_mul(ctx, a, a), b));
                snprintf(name, sizeof name, "%s (a [5] broadcast)", gml_op_name(ops[k]));
                run(name, ctx, y, (gml_tensor *[]){a, b}, 2);
            }
            gml_free(ctx);
        }
    }
    chk_rng r = chk_seed(30);
    gml_context *ctx = chk_ctx(16 << 20);
    gml_tensor *a = in(ctx, "a", SHAPE(3, 17), CHK_REVERSED, &r, -1, 1);
    run("scale", ctx, gml_scale(ctx, a, -0.37f), &a, 1);
    gml_free(ctx);
}

static void test_unary(void) {
    static const gml_op ops[] = {GML_OP_NEG,  GML_OP_EXP,  GML_OP_TANH,     GML_OP_SIGMOID,
                                 GML_OP_SILU, GML_OP_GELU, GML_OP_GELU_TANH};
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
        chk_rng r = chk_seed(40 + k);
        gml_context *ctx = chk_ctx(16 << 20);
        /* [3, 2, 17]: a tail past every vector width; reversed storage */
        gml_tensor *x = in(ctx, "x", SHAPE(3, 2, 17), CHK_REVERSED, &r, -3, 3);
        gml_tensor *y = NULL;
        switch (ops[k]) {
        case GML_OP_NEG: y = gml_neg(ctx, x); break;
        case GML_OP_EXP: y = gml_exp(ctx, x); break;
        case GML_OP_TANH: y = gml_tanh(ctx, x); break;
        case GML_OP_SIGMOID: y = gml_sigmoid(ctx, x); break;
        case GML_OP_SILU: y = gml_silu(ctx, x); break;
        case GML_OP_GELU: y = gml_gelu(ctx, x); break;
        default: y = gml_gelu_tanh(ctx, x); break;
        }
        run(gml_op_name(ops[k]), ctx, y, &x, 1);
        gml_free(ctx);
    }
}

static void test_reduce(void) {
    for (int k = 0; k < 3; k++) {
        chk_rng r = chk_seed(50 + (uint64_t)k);
        gml_context *ctx = chk_ctx(16 << 20);
        gml_tensor *x = in(ctx, "x", SHAPE(2, 3, 19), CHK_OUTER_SWAPPED, &r, -1, 1);
        gml_tensor *y = k == 0 ? gml_sum(ctx, x) : k == 1 ? gml_mean(ctx, x) : gml_max(ctx, x);
        run(k == 0 ? "sum" : k == 1 ? "mean" : "max", ctx, y, &x, 1);
        gml_free(ctx);
    }
    /* a last dim of 1 */
    chk_rng r = chk_seed(53);
    gml_context *ctx = chk_ctx(16 << 20);
    gml_tensor *x = in(ctx, "x", SHAPE(5, 1), CHK_SLICED, &r, -1, 1);
    run("mean (n = 1)", ctx, gml_mean(ctx, x), &x, 1);
    gml_free(ctx);
}

static void test_matmul(void) {
    static const struct {
        const char *name;
        int na, nb;
        int64_t a[4], b[4];
        chk_layout la, lb;
        gml_type tb;
    } cases[] = {
        {"matmul 2-D", 2, 2, {5, 7}, {7, 3}, CHK_CONTIGUOUS, CHK_CONTIGUOUS, GML_F32},
        {"matmul [2,3,5,7] @ [7,4] (a weight)", 4, 2, {2, 3, 5, 7}, {7, 4}, CHK_TRANSPOSED,
         CHK_SLICED, GML_F32},
        {"matmul [2,1,5,7] @ [3,7,4] (both broadcast)", 4, 3, {2, 1, 5, 7}, {3, 7, 4},
         CHK_SLICED, CHK_TRANSPOSED, GML_F32},
        {"matmul [3,5,7] @ [3,7,9] (batched)", 3, 3, {3, 5, 7}, {3, 7, 9}, CHK_REVERSED,
         CHK_OUTER_SWAPPED, GML_F32},
        {"matmul [2,5,7] @ [7,4] f16", 3, 2, {2, 5, 7}, {7, 4}, CHK_CONTIGUOUS, CHK_CONTIGUOUS,
         GML_F16},
        {"matmul [2,5,7] @ [7,4] bf16", 3, 2, {2, 5, 7}, {7, 4}, CHK_SLICED, CHK_CONTIGUOUS,
         GML_BF16},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        chk_rng r = chk_seed(60 + k);
        gml_context *ctx = chk_ctx(16 << 20);
        gml_tensor *a = in(ctx, "a", cases[k].na, cases[k].a, cases[k].la, &r, -1, 1);
        gml_tensor *b;
        if (cases[k].tb == GML_F32) {
            b = in(ctx, "b", cases[k].nb, cases[k].b, cases[k].lb, &r, -1, 1);
        } else { /* values the type holds exactly */
            b = gml_set_name(gml_new_tensor(ctx, cases[k].tb, cases[k].nb, cases[k].b), "b");
            uint16_t *v = b->data;
            for (int64_t e = 0; e < gml_nelements(b); e++) {
                const float x = chk_uniform(&r, -1, 1);
                v[e] = cases[k].tb == GML_F16 ? gml_fp32_to_fp16(x) : gml_fp32_to_bf16(x);
            }
        }
        run(cases[k].name, ctx, gml_matmul(ctx, a, b), (gml_tensor *[]){a, b}, 2);
        gml_free(ctx);
    }
    /* linear: a form of matmul(x, w^T) + bias; 1-D x too */
    for (int one = 0; one < 2; one++) {
        chk_rng r = chk_seed(70 + (uint64_t)one);
        gml_context *ctx = chk_ctx(16 << 20);
        gml_tensor *x = one ? in(ctx, "x", SHAPE(9), CHK_CONTIGUOUS, &r, -1, 1)
                            : in(ctx, "x", SHAPE(2, 5, 9), CHK_SLICED, &r, -1, 1);
        gml_tensor *w = in(ctx, "w", SHAPE(6, 9), CHK_CONTIGUOUS, &r, -1, 1);
        gml_tensor *bias = in(ctx, "bias", SHAPE(6), CHK_CONTIGUOUS, &r, -1, 1);
        run(one ? "linear (1-D x)" : "linear", ctx, gml_linear(ctx, x, w, bias),
            (gml_tensor *[]){x, w, bias}, 3);
        gml_free(ctx);
    }
}

static void test_views(void) {
    chk_rng r = chk_seed(80);
    gml_context *ctx = chk_ctx(16 << 20);
    gml_tensor *x = in(ctx, "x", SHAPE(4, 6), CHK_CONTIGUOUS, &r, -1, 1);
    /* [2, 3] at strides [12, 2] elements from offset 7 */
    gml_tensor *v = gml_view(ctx, x, 2, (int64_t[]){2, 3}, (size_t[]){48, 8}, 28);
    run("view", ctx, gml_mul(ctx, v, v), &x, 1);
    /* a stride 0: every row the same 6 elements, their gradients summed */
    gml_tensor *x1 = in(ctx, "x1", SHAPE(6), CHK_CONTIGUOUS, &r, -1, 1);
    gml_tensor *rep = gml_view(ctx, x1, 2, (int64_t[]){3, 6}, (size_t[]){0, 4}, 0);
    run("view (stride 0)", ctx, gml_tanh(ctx, rep), &x1, 1);
    gml_tensor *xp = in(ctx, "xp", SHAPE(2, 3, 5), CHK_REVERSED, &r, -1, 1);
    run("permute", ctx, gml_exp(ctx, gml_permute(ctx, xp, (int[]){1, 2, 0})), &xp, 1);
    run("transpose", ctx, gml_sigmoid(ctx, gml_transpose(ctx, xp, 0, 2)), &xp, 1);
    run("reshape (of cont)", ctx,
        gml_tanh(ctx, gml_reshape(ctx, gml_cont(ctx, xp), 2, (int64_t[]){6, 5})), &xp, 1);
    run("slice", ctx, gml_gelu(ctx, gml_slice(ctx, xp, 2, 1, 3)), &xp, 1);
    run("slice (negative start)", ctx, gml_mul(ctx, gml_slice(ctx, xp, 0, -2, 2), xp), &xp, 1);
    gml_tensor *xc = in(ctx, "xc", SHAPE(3, 7), CHK_CONTIGUOUS, &r, -1, 1);
    run("reshape", ctx, gml_exp(ctx, gml_reshape(ctx, xc, 3, (int64_t[]){7, 1, 3})), &xc, 1);
    gml_free(ctx);
}

static void test_copies(void) {
    chk_rng r = chk_seed(90);
    gml_context *ctx = chk_ctx(16 << 20);
    gml_tensor *a = in(ctx, "a", SHAPE(3, 2, 5), CHK_TRANSPOSED, &r, -1, 1);
    gml_tensor *b = in(ctx, "b", SHAPE(3, 4, 5), CHK_SLICED, &r, -1, 1);
    run("cont", ctx, gml_tanh(ctx, gml_cont(ctx, a)), &a, 1);
    run("concat dim 1", ctx, gml_tanh(ctx, gml_concat(ctx, a, b, 1)), (gml_tensor *[]){a, b}, 2);
    gml_tensor *c = in(ctx, "c", SHAPE(3, 2, 2), CHK_REVERSED, &r, -1, 1);
    run("concat dim -1", ctx, gml_exp(ctx, gml_concat(ctx, a, c, -1)), (gml_tensor *[]){a, c}, 2);
    /* cpy into rows 1..2 of a cache [4, 5]; the cache's gradient is zero
     * there (overwritten) and zero elsewhere (not read through the copy) */
    gml_tensor *cache = in(ctx, "cache", SHAPE(4, 5), CHK_CONTIGUOUS, &r, -1, 1);
    gml_tensor *s = in(ctx, "s", SHAPE(2, 5), CHK_TRANSPOSED, &r, -1, 1);
    gml_tensor *slot = gml_view(ctx, cache, 2, (int64_t[]){2, 5}, (size_t[]){20, 4}, 20);
    run("cpy", ctx, gml_sigmoid(ctx, gml_cpy(ctx, s, slot)), (gml_tensor *[]){s, cache}, 2);
    gml_free(ctx);
}

static void test_rows(void) {
    chk_rng r = chk_seed(100);
    gml_context *ctx = chk_ctx(16 << 20);
    /* table [7, 19] (a tail past 16 columns), indices [2, 4] with repeats */
    gml_tensor *table = in(ctx, "table", SHAPE(7, 19), CHK_SLICED, &r, -1, 1);
    gml_tensor *idx = gml_set_name(gml_new_tensor_2d(ctx, GML_I32, 2, 4), "idx");
    const int32_t iv[8] = {3, 0, 6, 3, 3, 5, 0, 1};
    memcpy(idx->data, iv, sizeof iv);
    run("get_rows", ctx, gml_tanh(ctx, gml_get_rows(ctx, table, idx)), &table, 1);
    gml_tensor *idx1 = gml_set_name(gml_new_tensor_1d(ctx, GML_I32, 5), "idx1");
    memcpy(idx1->data, (int32_t[]){6, 6, 2, 0, 6}, 5 * sizeof(int32_t));
    run("get_rows (1-D idx)", ctx, gml_get_rows(ctx, table, idx1), &table, 1);
    /* set_rows: src's rows into rows 4, 0, 2 of dst [6, 5] */
    gml_tensor *dst = in(ctx, "dst", SHAPE(6, 5), CHK_CONTIGUOUS, &r, -1, 1);
    gml_tensor *dcopy = gml_cont(ctx, gml_scale(ctx, dst, 1.5f)); /* a node to write into */
    gml_tensor *src = in(ctx, "src", SHAPE(3, 5), CHK_TRANSPOSED, &r, -1, 1);
    gml_tensor *si = gml_set_name(gml_new_tensor_1d(ctx, GML_I32, 3), "si");
    memcpy(si->data, (int32_t[]){4, 0, 2}, 3 * sizeof(int32_t));
    run("set_rows", ctx, gml_tanh(ctx, gml_set_rows(ctx, dcopy, src, si)),
        (gml_tensor *[]){dst, src}, 2);
    gml_free(ctx);
}

static void test_repeat(void) {
    chk_rng r = chk_seed(110);
    gml_context *ctx = chk_ctx(16 << 20);
    gml_tensor *x = in(ctx, "x", SHAPE(2, 3, 5), CHK_REVERSED, &r, -1, 1);
    run("repeat_interleave dim 1", ctx, gml_tanh(ctx, gml_repeat_interleave(ctx, x, 3, 1)), &x, 1);
    run("repeat_interleave dim -1", ctx, gml_exp(ctx, gml_repeat_interleave(ctx, x, 2, -1)), &x, 1);
    run("repeat_interleave dim 0", ctx, gml_sigmoid(ctx, gml_repeat_interleave(ctx, x, 4, 0)), &x, 1);
    gml_free(ctx);
}

/* Index ops (i32 results: arange, relpos_index) have no gradient and need
 * none: the gradient stops there, no refusal. valid_len_mask (an f32 mask
 * of i32 lengths) passes none to its lengths. */
static void test_index_ops(void) {
    chk_rng r = chk_seed(140);
    gml_context *ctx = chk_ctx(16 << 20);
    gml_tensor *table = in(ctx, "table", SHAPE(9, 6), CHK_CONTIGUOUS, &r, -1, 1);
    gml_tensor *rel = gml_relpos_index(ctx, 3, 5, 4); /* [3, 5] in [0, 8] */
    run("get_rows of relpos_index", ctx, gml_tanh(ctx, gml_get_rows(ctx, table, rel)), &table, 1);
    run("get_rows of arange", ctx, gml_exp(ctx, gml_get_rows(ctx, table, gml_arange(ctx, 4, 3))),
        &table, 1);
    gml_tensor *x = in(ctx, "x", SHAPE(2, 1, 3, 5), CHK_CONTIGUOUS, &r, -1, 1);
    gml_tensor *lens = gml_set_name(gml_new_tensor_1d(ctx, GML_I32, 2), "lens");
    memcpy(lens->data, (int32_t[]){5, 5}, 2 * sizeof(int32_t));
    gml_tensor *y = gml_add(ctx, x, gml_valid_len_mask(ctx, lens, 5));
    gml_tensor *g;
    chk_case("valid_len_mask");
    CHECK(gml_grad(ctx, y, x, &x, 1, &g) == GML_OK && g, "grad through valid_len_mask's add: %s",
          gml_last_error(ctx));
    gml_free(ctx);
}

/* Graphs of several ops: a tensor feeding several nodes, two layers. */
static void test_composites(void) {
    chk_rng r = chk_seed(120);
    gml_context *ctx = chk_ctx(16 << 20);
    gml_tensor *x = in(ctx, "x", SHAPE(3, 11), CHK_TRANSPOSED, &r, -1, 1);
    /* x feeds four nodes */
    gml_tensor *y = gml_add(ctx, gml_mul(ctx, x, x), gml_sub(ctx, gml_exp(ctx, x), gml_tanh(ctx, x)));
    run("x*x + exp(x) - tanh(x)", ctx, y, &x, 1);
    /* a two-layer MLP to a mean loss (implicit upstream: dy of a [1] is random) */
    gml_tensor *h = in(ctx, "h", SHAPE(2, 5, 8), CHK_SLICED, &r, -1, 1);
    gml_tensor *w1 = in(ctx, "w1", SHAPE(12, 8), CHK_CONTIGUOUS, &r, -0.5f, 0.5f);
    gml_tensor *b1 = in(ctx, "b1", SHAPE(12), CHK_CONTIGUOUS, &r, -0.5f, 0.5f);
    gml_tensor *w2 = in(ctx, "w2", SHAPE(8, 12), CHK_CONTIGUOUS, &r, -0.5f, 0.5f);
    gml_tensor *z = gml_linear(ctx, gml_gelu(ctx, gml_linear(ctx, h, w1, b1)), w2, NULL);
    gml_tensor *loss = gml_mean(ctx, gml_sum(ctx, gml_add(ctx, z, h)));
    run("mlp", ctx, loss, (gml_tensor *[]){h, w1, b1, w2}, 4);
    /* docs/training.md's example, as written there */
    {
        gml_tensor *x = in(ctx, "x", SHAPE(4, 8), CHK_CONTIGUOUS, &r, -1, 1);
        gml_tensor *w1 = in(ctx, "w1", SHAPE(16, 8), CHK_CONTIGUOUS, &r, -1, 1);
        gml_tensor *b1 = in(ctx, "b1", SHAPE(16), CHK_CONTIGUOUS, &r, -1, 1);
        /* x [4, 8], w1 [16, 8], b1 [16] */
        gml_tensor *h = gml_gelu(ctx, gml_linear(ctx, x, w1, b1));                     /* [4, 16] */
        gml_tensor *loss = gml_mean(ctx, gml_reshape(ctx, gml_sum(ctx, h), 1, (int64_t[]){4})); /* [1] */
        run("docs/training.md's example", ctx, loss, (gml_tensor *[]){w1, b1, x}, 3);
    }
    gml_free(ctx);
}

/* The losses: cross_entropy (its own backward op) and mse_loss (built of
 * binary ops), on odd shapes and strided inputs and targets, and each at
 * the end of a small network. */
static void test_losses(void) {
    static const struct {
        const char *name;
        int n;
        int64_t ne[4];
        chk_layout lx, lt;
    } ce[] = {
        {"cross_entropy [5,19]", 2, {5, 19}, CHK_SLICED, CHK_CONTIGUOUS},
        {"cross_entropy [2,3,7] (targets transposed)", 3, {2, 3, 7}, CHK_TRANSPOSED,
         CHK_TRANSPOSED},
        {"cross_entropy [2,2,3,5]", 4, {2, 2, 3, 5}, CHK_REVERSED, CHK_SLICED},
        {"cross_entropy [3,1] (V = 1)", 2, {3, 1}, CHK_CONTIGUOUS, CHK_CONTIGUOUS},
    };
    for (size_t k = 0; k < sizeof ce / sizeof *ce; k++) {
        chk_rng r = chk_seed(150 + k);
        gml_context *ctx = chk_ctx(16 << 20);
        gml_tensor *x = in(ctx, "logits", ce[k].n, ce[k].ne, ce[k].lx, &r, -3, 3);
        const int64_t V = ce[k].ne[ce[k].n - 1];
        gml_tensor *t = chk_new_input(ctx, GML_I32, ce[k].n - 1, ce[k].ne, ce[k].lt, "targets", &r,
                                      0, (float)(V - 1));
        run(ce[k].name, ctx, gml_cross_entropy(ctx, x, t), &x, 1);
        gml_free(ctx);
    }
    chk_rng r = chk_seed(160);
    gml_context *ctx = chk_ctx(16 << 20);
    /* logits of a linear layer: x [2, 4, 6] @ w^T [6, 11] + b */
    gml_tensor *x = in(ctx, "x", SHAPE(2, 4, 6), CHK_SLICED, &r, -1, 1);
    gml_tensor *w = in(ctx, "w", SHAPE(11, 6), CHK_TRANSPOSED, &r, -1, 1);
    gml_tensor *b = in(ctx, "b", SHAPE(11), CHK_CONTIGUOUS, &r, -1, 1);
    gml_tensor *t = chk_new_input(ctx, GML_I32, 2, (int64_t[]){2, 4}, CHK_CONTIGUOUS, "targets", &r,
                                  0, 10);
    run("cross_entropy(linear(x, w, b))", ctx, gml_cross_entropy(ctx, gml_linear(ctx, x, w, b), t),
        (gml_tensor *[]){x, w, b}, 3);
    /* the loss scaled: its dy is not 1 */
    run("3 * cross_entropy", ctx,
        gml_scale(ctx, gml_cross_entropy(ctx, gml_linear(ctx, x, w, NULL), t), 3.0f),
        (gml_tensor *[]){x, w}, 2);
    gml_tensor *a = in(ctx, "a", SHAPE(3, 2, 17), CHK_REVERSED, &r, -2, 2);
    gml_tensor *c = in(ctx, "c", SHAPE(3, 2, 17), CHK_SLICED, &r, -2, 2);
    run("mse_loss", ctx, gml_mse_loss(ctx, a, c), (gml_tensor *[]){a, c}, 2);
    run("mse_loss (b only)", ctx, gml_mse_loss(ctx, a, c), &c, 1);
    run("mse_loss(tanh(a), a)", ctx, gml_mse_loss(ctx, gml_tanh(ctx, a), a), &a, 1);
    gml_tensor *v = in(ctx, "v", SHAPE(9), CHK_CONTIGUOUS, &r, -2, 2);
    gml_tensor *u = in(ctx, "u", SHAPE(9), CHK_CONTIGUOUS, &r, -2, 2);
    run("mse_loss 1-D", ctx, gml_mse_loss(ctx, v, u), (gml_tensor *[]){v, u}, 2);
    gml_free(ctx);
}

/* Shapes large enough that compute splits the backward's nodes across
 * threads (every element the same bits at 1-4 and 7 threads), the
 * differences taken for 40 elements of each gradient; in the quick mode
 * (check.h: under ASan and qemu, where the double evaluator's pass over the
 * whole graph per difference is most of the test's time) for 4, every
 * element still compared across the thread counts. */
static void test_large(void) {
    const grad_check_opts o = {.samples = chk_quick() ? 4 : 40};
    chk_rng r = chk_seed(130);
    gml_context *ctx = chk_ctx(256 << 20);
#define RUN_LARGE(name, out, ...)                                                          \
    do {                                                                                   \
        gml_tensor *w_[] = {__VA_ARGS__};                                                  \
        chk_case("%s", name);                                                              \
        const int f_ = grad_check(name, ctx, out, w_, (int)(sizeof w_ / sizeof *w_), &o);  \
        CHECK(f_ == 0, "%s: %d gradient checks failed (above)", name, f_);                 \
    } while (0)
    /* sum_to of a broadcast bias: 300 x 1000 terms into [1000] */
    gml_tensor *a = in(ctx, "a", SHAPE(300, 1000), CHK_SLICED, &r, -1, 1);
    gml_tensor *bias = in(ctx, "bias", SHAPE(1000), CHK_CONTIGUOUS, &r, -1, 1);
    RUN_LARGE("large: add, b broadcast", gml_add(ctx, a, bias), a, bias);
    /* unary_back over [64, 257] */
    gml_tensor *x = in(ctx, "x", SHAPE(64, 257), CHK_TRANSPOSED, &r, -3, 3);
    RUN_LARGE("large: gelu", gml_gelu(ctx, x), x);
    /* view_back of a slice [300, 1000] out of [400, 1000] */
    gml_tensor *s = in(ctx, "s", SHAPE(400, 1000), CHK_CONTIGUOUS, &r, -1, 1);
    RUN_LARGE("large: slice", gml_mul(ctx, gml_slice(ctx, s, 0, 60, 300), a), s);
    /* get_rows_back: 600 rows of 500 into a table [50, 500] */
    gml_tensor *table = in(ctx, "table", SHAPE(50, 500), CHK_CONTIGUOUS, &r, -1, 1);
    gml_tensor *idx = gml_set_name(gml_new_tensor_1d(ctx, GML_I32, 600), "idx");
    chk_fill_int(idx, &r, 0, 49);
    RUN_LARGE("large: get_rows", gml_get_rows(ctx, table, idx), table);
    /* max_back over [400, 700] */
    gml_tensor *m = in(ctx, "m", SHAPE(400, 700), CHK_REVERSED, &r, -1, 1);
    RUN_LARGE("large: max", gml_max(ctx, m), m);
    /* matmul, a folded over its batches for the weight's gradient */
    gml_tensor *ma = in(ctx, "ma", SHAPE(4, 64, 96), CHK_CONTIGUOUS, &r, -1, 1);
    gml_tensor *mb = in(ctx, "mb", SHAPE(96, 80), CHK_TRANSPOSED, &r, -1, 1);
    RUN_LARGE("large: matmul", gml_matmul(ctx, ma, mb), ma, mb);
    /* repeat_interleave: sum_to over the repeats */
    gml_tensor *rx = in(ctx, "rx", SHAPE(8, 64, 128), CHK_CONTIGUOUS, &r, -1, 1);
    RUN_LARGE("large: repeat_interleave", gml_repeat_interleave(ctx, rx, 4, 0), rx);
    /* cross_entropy over [3, 100, 1001] logits (rows split), mse_loss over 300k */
    gml_tensor *lg = in(ctx, "lg", SHAPE(3, 100, 1001), CHK_SLICED, &r, -4, 4);
    gml_tensor *tg = gml_set_name(gml_new_tensor_2d(ctx, GML_I32, 3, 100), "tg");
    chk_fill_int(tg, &r, 0, 1000);
    RUN_LARGE("large: cross_entropy", gml_cross_entropy(ctx, lg, tg), lg);
    RUN_LARGE("large: mse_loss", gml_mse_loss(ctx, a, gml_slice(ctx, s, 0, 0, 300)), a, s);
#undef RUN_LARGE
    gml_free(ctx);
}

int main(void) {
    test_binary();
    test_unary();
    test_reduce();
    test_matmul();
    test_views();
    test_copies();
    test_rows();
    test_repeat();
    test_index_ops();
    test_composites();
    test_losses();
    test_large();
    printf("largest |g - fd| / (|fd| + max|fd|) over every check: %.2e\n", grad_check_max_rel);
    return chk_summary();
}
