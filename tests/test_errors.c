/* Every documented error: builders return NULL with a message naming the op,
 * the inputs and their shapes (checked by substring); compute-time data
 * errors return a status and a message; nothing crashes and the context stays
 * usable. Run under ASan, out-of-range indices must not read out of bounds. */
#include "check.h"

/* expect_error(ctx, result, "piece", ...): result is NULL and the context's
 * message contains every piece. */
#define EXPECT_ERROR(ctx, result, ...) \
    expect_error(__FILE__, __LINE__, (ctx), (result) == NULL, (const char *[]){__VA_ARGS__, NULL})

static void expect_error(const char *file, int line, gml_context *ctx, bool failed,
                         const char *const *pieces) {
    const char *msg = gml_last_error(ctx);
    if (!chk_check(failed, file, line, "the call should have failed (message so far: \"%s\")", msg)) return;
    chk_check(msg[0] != '\0', file, line, "no message recorded");
    for (const char *const *p = pieces; *p; p++)
        chk_check(strstr(msg, *p) != NULL, file, line, "expected \"%s\" in \"%s\"", *p, msg);
    gml_clear_error(ctx);
}

static gml_tensor *tensor(gml_context *ctx, gml_type type, const char *name, int n, const int64_t *ne) {
    return gml_set_name(gml_new_tensor(ctx, type, n, ne), name);
}
#define F32(ctx, name, ...)                                                            \
    tensor((ctx), GML_F32, (name), sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), \
           (int64_t[]){__VA_ARGS__})
#define I32(ctx, name, ...)                                                            \
    tensor((ctx), GML_I32, (name), sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), \
           (int64_t[]){__VA_ARGS__})

static void test_matmul_errors(void) {
    chk_case("matmul errors");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *q = F32(ctx, "q", 2, 8, 10, 64), *k = F32(ctx, "k", 2, 8, 32, 10);
    CHECK(gml_matmul(ctx, q, k) == NULL, "inner sizes differ");
    CHECK(strcmp(gml_last_error(ctx), "matmul(q, k): inner sizes differ: [2,8,10,64] @ [2,8,32,10]") == 0,
          "the documented message, got \"%s\"", gml_last_error(ctx));
    gml_clear_error(ctx);
    CHECK(gml_last_error(ctx)[0] == '\0', "clear_error");

    gml_tensor *a = F32(ctx, "a", 2, 3, 4, 5), *b = F32(ctx, "b", 3, 3, 5, 6);
    EXPECT_ERROR(ctx, gml_matmul(ctx, a, b), "matmul(a, b)", "[2,3,4,5]", "[3,3,5,6]", "broadcast");
    gml_tensor *b3 = F32(ctx, "b3", 2, 5, 6);
    EXPECT_ERROR(ctx, gml_matmul(ctx, a, b3), "matmul(a, b3)", "[2,3,4,5]", "[2,5,6]", "broadcast");
    gml_tensor *v = F32(ctx, "v", 5), *m = F32(ctx, "m", 5, 3);
    EXPECT_ERROR(ctx, gml_matmul(ctx, v, m), "matmul(v, m)", "[5]", "[5,3]", "2-D");
    EXPECT_ERROR(ctx, gml_matmul(ctx, gml_transpose(ctx, m, 0, 1), v), "matmul(", "[3,5]", "[5]", "2-D");
    gml_tensor *idx = I32(ctx, "idx", 4, 5);
    EXPECT_ERROR(ctx, gml_matmul(ctx, idx, m), "matmul(idx)", "f32", "i32", "[4,5]");

    /* linear: in-features, bias shape, weight shape */
    gml_tensor *x = F32(ctx, "x", 2, 5, 7), *w = F32(ctx, "w", 3, 6);
    EXPECT_ERROR(ctx, gml_linear(ctx, x, w, NULL), "linear(x, w)", "[2,5,7]", "[3,6]", "7", "6");
    gml_tensor *w_ok = F32(ctx, "w_ok", 3, 7), *bias4 = F32(ctx, "bias", 4),
               *bias2d = F32(ctx, "bias2d", 1, 3);
    EXPECT_ERROR(ctx, gml_linear(ctx, x, w_ok, bias4), "linear(x, w_ok, bias)", "[3]", "[4]");
    EXPECT_ERROR(ctx, gml_linear(ctx, x, w_ok, bias2d), "linear(x, w_ok, bias2d)", "[1,3]");
    gml_tensor *w3 = F32(ctx, "w3", 1, 3, 7);
    EXPECT_ERROR(ctx, gml_linear(ctx, x, w3, NULL), "linear(x, w3)", "[out, in]", "[1,3,7]");
    gml_free(ctx);
}

static void test_elementwise_errors(void) {
    chk_case("add/mul/sub/div/scale errors");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *a = F32(ctx, "a", 2, 3), *b = F32(ctx, "b", 4, 3), *c = F32(ctx, "c", 5, 1, 2);
    EXPECT_ERROR(ctx, gml_add(ctx, a, b), "add(a, b)", "[2,3]", "[4,3]", "broadcast");
    EXPECT_ERROR(ctx, gml_mul(ctx, b, a), "mul(b, a)", "[4,3]", "[2,3]", "broadcast");
    EXPECT_ERROR(ctx, gml_add(ctx, c, a), "add(c, a)", "[5,1,2]", "[2,3]");
    EXPECT_ERROR(ctx, gml_sub(ctx, a, b), "sub(a, b)", "[2,3]", "[4,3]", "broadcast");
    EXPECT_ERROR(ctx, gml_div(ctx, c, a), "div(c, a)", "[5,1,2]", "[2,3]", "broadcast");
    gml_tensor *i = I32(ctx, "i", 2, 3);
    EXPECT_ERROR(ctx, gml_add(ctx, a, i), "add(i)", "f32", "i32 [2,3]");
    EXPECT_ERROR(ctx, gml_scale(ctx, i, 2.0f), "scale(i)", "f32", "i32 [2,3]");
    EXPECT_ERROR(ctx, gml_div(ctx, i, a), "div(i)", "f32", "i32 [2,3]");
    gml_free(ctx);
}

static void test_view_errors(void) {
    chk_case("view/reshape/permute/transpose errors");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *x = F32(ctx, "x", 2, 3, 4);
    gml_tensor *xt = gml_set_name(gml_transpose(ctx, x, 1, 2), "xt");
    EXPECT_ERROR(ctx, gml_reshape(ctx, xt, 1, (int64_t[]){24}), "reshape(xt)", "[2,4,3]", "not contiguous",
                 "gml_cont");
    EXPECT_ERROR(ctx, gml_reshape(ctx, x, 2, (int64_t[]){5, 5}), "reshape(x)", "[2,3,4]", "[5,5]", "24",
                 "25");
    EXPECT_ERROR(ctx, gml_reshape(ctx, x, 2, (int64_t[]){5, -1}), "reshape(x)", "[5,-1]", "[2,3,4]");
    EXPECT_ERROR(ctx, gml_reshape(ctx, x, 3, (int64_t[]){-1, 2, -1}), "reshape(x)", "[-1,2,-1]");
    EXPECT_ERROR(ctx, gml_reshape(ctx, x, 2, (int64_t[]){0, 24}), "reshape(x)", "[0,24]");
    EXPECT_ERROR(ctx, gml_reshape(ctx, x, 5, (int64_t[]){1, 1, 2, 3, 4}), "reshape(x)", "5 dimensions");

    EXPECT_ERROR(ctx, gml_permute(ctx, x, (int[]){0, 0, 1}), "permute(x)", "[0,0,1]", "[2,3,4]");
    EXPECT_ERROR(ctx, gml_permute(ctx, x, (int[]){0, 1, 3}), "permute(x)", "[0,1,3]", "[2,3,4]");
    EXPECT_ERROR(ctx, gml_permute(ctx, x, (int[]){-4, 1, 2}), "permute(x)", "[-4,1,2]");
    EXPECT_ERROR(ctx, gml_transpose(ctx, x, 0, 3), "transpose(x)", "(0, 3)", "[2,3,4]");
    EXPECT_ERROR(ctx, gml_transpose(ctx, x, -4, 1), "transpose(x)", "(-4, 1)", "[2,3,4]");

    gml_tensor *base = F32(ctx, "base", 4, 5);
    EXPECT_ERROR(ctx, gml_view(ctx, base, 2, (int64_t[]){2, 5}, (size_t[]){20, 4}, 3 * 20), "view(base)",
                 "past", "[4,5]", "[2,5]", "80");
    EXPECT_ERROR(ctx, gml_view(ctx, base, 1, (int64_t[]){21}, (size_t[]){4}, 0), "view(base)", "[21]",
                 "past");
    /* a view of a view at an offset: the bound is the root's storage */
    gml_tensor *tail = gml_set_name(gml_view(ctx, base, 1, (int64_t[]){10}, (size_t[]){4}, 40), "tail");
    CHECK(tail, "view of the last 10 elements: %s", gml_last_error(ctx));
    EXPECT_ERROR(ctx, gml_view(ctx, tail, 1, (int64_t[]){2}, (size_t[]){4}, 36), "view(tail)", "past",
                 "'base'");
    EXPECT_ERROR(ctx, gml_view(ctx, base, 1, (int64_t[]){2}, (size_t[]){4}, 2), "view(base)", "offset 2");
    EXPECT_ERROR(ctx, gml_view(ctx, base, 1, (int64_t[]){2}, (size_t[]){6}, 0), "view(base)", "stride 6");
    EXPECT_ERROR(ctx, gml_view(ctx, base, 2, (int64_t[]){0, 2}, (size_t[]){20, 4}, 0), "view(base)",
                 "size 0");
    /* sizes and strides whose byte extent overflows 64 bits still reach past the end */
    EXPECT_ERROR(ctx,
                 gml_view(ctx, base, 1, (int64_t[]){((int64_t)1 << 24) + 1}, (size_t[]){(size_t)1 << 40}, 0),
                 "view(base)", "past", "[4,5]");
    EXPECT_ERROR(ctx, gml_view(ctx, base, 2, (int64_t[]){2, 2}, (size_t[]){SIZE_MAX - 3, 4}, 0), "view(base)",
                 "past");
    /* element counts that overflow: an error, not a wrapped product */
    EXPECT_ERROR(ctx, gml_reshape(ctx, x, 2, (int64_t[]){(int64_t)1 << 32, (int64_t)1 << 32}), "reshape(x)",
                 "[2,3,4]");
    EXPECT_ERROR(
        ctx,
        gml_reshape(ctx, x, 4,
                    (int64_t[]){(int64_t)1 << 20, (int64_t)1 << 20, (int64_t)1 << 20, (int64_t)1 << 20}),
        "reshape(x)");
    EXPECT_ERROR(ctx, gml_reshape(ctx, x, 3, (int64_t[]){(int64_t)1 << 40, (int64_t)1 << 40, -1}),
                 "reshape(x)");
    gml_free(ctx);
}

static void test_op_errors(void) {
    chk_case("softmax/get_rows/repeat_interleave/cpy/mask errors");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *x = F32(ctx, "x", 2, 3, 4, 5), *mask = F32(ctx, "mask", 3, 5),
               *mask_q = F32(ctx, "mask_q", 2, 1, 3, 5);
    EXPECT_ERROR(ctx, gml_softmax(ctx, x, mask, 1.0f, false), "softmax(x, mask)", "[3,5]", "[2,3,4,5]");
    EXPECT_ERROR(ctx, gml_softmax(ctx, x, mask_q, 1.0f, false), "softmax(x, mask_q)", "[2,1,3,5]",
                 "[2,3,4,5]");
    EXPECT_ERROR(ctx, gml_softmax(ctx, x, NULL, INFINITY, false), "softmax(x)", "scale");
    gml_tensor *imask = I32(ctx, "imask", 5);
    EXPECT_ERROR(ctx, gml_softmax(ctx, x, imask, 1.0f, false), "softmax(imask)", "f32", "i32");

    gml_tensor *table = F32(ctx, "table", 7, 3), *fidx = F32(ctx, "fidx", 4), *idx = I32(ctx, "idx", 4);
    gml_tensor *table3 = F32(ctx, "table3", 2, 7, 3), *idx4 = I32(ctx, "idx4", 1, 2, 2, 2);
    EXPECT_ERROR(ctx, gml_get_rows(ctx, table, fidx), "get_rows(table, fidx)", "i32", "f32 [4]");
    EXPECT_ERROR(ctx, gml_get_rows(ctx, table3, idx), "get_rows(table3, idx)", "[N, d]", "[2,7,3]");
    EXPECT_ERROR(ctx, gml_get_rows(ctx, table, idx4), "get_rows(table, idx4)", "[1,2,2,2]");
    EXPECT_ERROR(ctx, gml_get_rows(ctx, idx4, idx), "get_rows(idx4, idx)", "i32");

    EXPECT_ERROR(ctx, gml_repeat_interleave(ctx, x, 2, 4), "repeat_interleave(x)", "dim 4", "[2,3,4,5]");
    EXPECT_ERROR(ctx, gml_repeat_interleave(ctx, x, 2, -5), "repeat_interleave(x)", "dim -5", "[2,3,4,5]");
    EXPECT_ERROR(ctx, gml_repeat_interleave(ctx, x, 0, 1), "repeat_interleave(x)", "repeats is 0");
    EXPECT_ERROR(ctx, gml_repeat_interleave(ctx, x, -2, 1), "repeat_interleave(x)", "repeats is -2");

    /* a result size that overflows (headers only: no data for 2^33 elements) */
    gml_context *na = gml_init((gml_init_params){.mem_size = 1 << 16, .no_alloc = true});
    gml_tensor *long_x = gml_set_name(gml_new_tensor_1d(na, GML_F32, ((int64_t)1 << 33) + 1), "long_x");
    EXPECT_ERROR(na, gml_repeat_interleave(na, long_x, 2147483647, 0), "repeat_interleave(long_x)",
                 "2147483647", "2^40");
    gml_free(na);

    gml_tensor *small = F32(ctx, "small", 3, 5);
    EXPECT_ERROR(ctx, gml_cpy(ctx, x, small), "cpy(x, small)", "[2,3,4,5]", "[3,5]");
    gml_tensor *ismall = I32(ctx, "ismall", 3, 5);
    EXPECT_ERROR(ctx, gml_cpy(ctx, small, ismall), "cpy(small, ismall)", "f32", "i32");

    gml_tensor *flens = F32(ctx, "flens", 2), *lens3 = I32(ctx, "lens3", 2, 2, 2);
    EXPECT_ERROR(ctx, gml_valid_len_mask(ctx, flens, 4), "valid_len_mask(flens)", "i32", "f32 [2]");
    EXPECT_ERROR(ctx, gml_valid_len_mask(ctx, lens3, 4), "valid_len_mask(lens3)", "[2,2,2]");
    EXPECT_ERROR(ctx, gml_valid_len_mask(ctx, idx, 0), "valid_len_mask(idx)", "Tk is 0");
    EXPECT_ERROR(ctx, gml_relpos_index(ctx, 3, 4, -1), "relpos_index", "-1");
    EXPECT_ERROR(ctx, gml_relpos_index(ctx, 0, 4, 2), "relpos_index", "size 0");

    EXPECT_ERROR(ctx, gml_new_tensor(ctx, GML_F32, 5, (int64_t[]){1, 1, 1, 1, 1}), "new_tensor",
                 "5 dimensions");
    EXPECT_ERROR(ctx, gml_new_tensor(ctx, GML_F32, 2, (int64_t[]){3, 0}), "new_tensor", "size 0");
    EXPECT_ERROR(ctx, gml_new_tensor(ctx, GML_F32, 1, (int64_t[]){-2}), "new_tensor", "-2");
    /* each size is allowed but the element count overflows 64 bits */
    const int64_t huge = (int64_t)1 << 40;
    EXPECT_ERROR(ctx, gml_new_tensor_4d(ctx, GML_F32, huge, huge, huge, huge), "new_tensor", "2^40 elements");
    EXPECT_ERROR(ctx, gml_new_tensor_4d(ctx, GML_F32, 1 << 16, 1 << 16, 1 << 16, 1 << 16), "new_tensor",
                 "2^40");
    EXPECT_ERROR(ctx, gml_new_tensor_2d(ctx, GML_F32, huge, huge), "new_tensor");
    EXPECT_ERROR(ctx, gml_new_tensor(ctx, (gml_type)7, 1, (int64_t[]){2}), "new_tensor", "type");
    gml_free(ctx);
}

/* A NULL input (from an earlier failed builder) gives NULL and keeps the
 * first message, through any chain of builders and build_graph. */
static void test_null_inputs(void) {
    chk_case("NULL inputs keep the first message");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *q = F32(ctx, "q", 2, 8, 10, 64), *k = F32(ctx, "k", 2, 8, 32, 10),
               *v = F32(ctx, "v", 2, 8, 10, 64);
    gml_tensor *t = F32(ctx, "t", 4, 3), *i = I32(ctx, "i", 4), *w = F32(ctx, "w", 64, 64);
    const char *first = "matmul(q, k): inner sizes differ: [2,8,10,64] @ [2,8,32,10]";
    gml_tensor *s = gml_matmul(ctx, q, k);
    CHECK(s == NULL && strcmp(gml_last_error(ctx), first) == 0, "first failure: %s", gml_last_error(ctx));
    gml_tensor *n = NULL;
    gml_tensor *results[] = {
        gml_softmax(ctx, s, NULL, 0.125f, true),
        gml_softmax(ctx, s, t, 0.125f, true),
        gml_matmul(ctx, s, v),
        gml_matmul(ctx, v, n),
        gml_linear(ctx, n, w, NULL),
        gml_linear(ctx, v, n, NULL),
        gml_add(ctx, n, t),
        gml_add(ctx, t, n),
        gml_mul(ctx, n, t),
        gml_scale(ctx, n, 2.0f),
        gml_view(ctx, n, 1, (int64_t[]){2}, (size_t[]){4}, 0),
        gml_reshape(ctx, n, 1, (int64_t[]){-1}),
        gml_permute(ctx, n, (int[]){1, 0}),
        gml_transpose(ctx, n, 0, 1),
        gml_cont(ctx, n),
        gml_cpy(ctx, n, t),
        gml_cpy(ctx, t, n),
        gml_repeat_interleave(ctx, n, 2, 0),
        gml_get_rows(ctx, n, i),
        gml_get_rows(ctx, t, n),
        gml_valid_len_mask(ctx, n, 4),
    };
    for (size_t r = 0; r < sizeof results / sizeof *results; r++)
        CHECK(results[r] == NULL, "builder %zu given NULL returns NULL", r);
    CHECK(strcmp(gml_last_error(ctx), first) == 0, "the first message is kept: \"%s\"", gml_last_error(ctx));
    gml_tensor *out = gml_matmul(ctx, gml_softmax(ctx, s, NULL, 1.0f, false), v);
    CHECK(gml_build_graph(ctx, &out, 1) == NULL, "build_graph of a NULL output is NULL");
    CHECK(strcmp(gml_last_error(ctx), first) == 0, "build_graph keeps it too: \"%s\"", gml_last_error(ctx));

    gml_clear_error(ctx);
    CHECK(gml_build_graph(ctx, &out, 1) == NULL && strstr(gml_last_error(ctx), "NULL"),
          "build_graph of a NULL output with no earlier error says so: \"%s\"", gml_last_error(ctx));
    gml_clear_error(ctx);
    CHECK(gml_build_graph(ctx, &t, 0) == NULL && gml_last_error(ctx)[0], "build_graph with no outputs");
    gml_free(ctx);
}

/* A NULL optional input (bias, mask) means "none": one that is NULL because
 * its builder failed must not build a graph without it. */
static void test_failed_optional_input(void) {
    chk_case("a failed optional input stops build_graph");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *x = F32(ctx, "x", 2, 5), *w = F32(ctx, "w", 3, 5);
    gml_tensor *bias = gml_add(ctx, F32(ctx, "b1", 3), F32(ctx, "b2", 4)); /* fails */
    gml_tensor *y = gml_linear(ctx, x, w, bias);                            /* builds, no bias */
    CHECK(bias == NULL && y != NULL, "linear with a NULL bias builds");
    CHECK(gml_build_graph(ctx, &y, 1) == NULL, "build_graph refuses a context holding an error");
    CHECK_CONTAINS(gml_last_error(ctx), "add(b1, b2): shapes [3] and [4] do not broadcast");
    gml_clear_error(ctx);
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    CHECK(g != NULL, "after gml_clear_error the graph builds: %s", gml_last_error(ctx));
    gml_graph_free(g);
    gml_free(ctx);
}

/* ---- memory ----------------------------------------------------------------- */

/* A small attention graph; returns its output or NULL. */
static gml_tensor *attention(gml_context *ctx) {
    gml_tensor *x = F32(ctx, "x", 2, 6, 16), *wq = F32(ctx, "wq", 16, 16), *wk = F32(ctx, "wk", 16, 16);
    gml_tensor *lens = I32(ctx, "lens", 2);
    gml_tensor *q = gml_reshape(ctx, gml_linear(ctx, x, wq, NULL), 4, (int64_t[]){2, 6, 2, 8});
    gml_tensor *k = gml_reshape(ctx, gml_linear(ctx, x, wk, NULL), 4, (int64_t[]){2, 6, 2, 8});
    q = gml_permute(ctx, q, (int[]){0, 2, 1, 3});
    k = gml_permute(ctx, k, (int[]){0, 2, 1, 3});
    gml_tensor *s = gml_matmul(ctx, q, gml_transpose(ctx, k, -2, -1));
    return gml_softmax(ctx, s, gml_valid_len_mask(ctx, lens, 6), 0.35f, true);
}

static void fill_leafs(gml_graph *g) {
    chk_rng r = chk_seed(5);
    for (int i = 0; i < gml_graph_n_leafs(g); i++) {
        gml_tensor *l = gml_graph_leaf(g, i);
        if (l->type == GML_F32) chk_fill_uniform(l, &r, -1, 1);
        else chk_fill_int(l, &r, 0, 6);
    }
}

/* gml_get/set_*: an index out of range, the wrong type or a tensor without
 * data give NAN / INT32_MIN / false and touch nothing. The tensor tried is a
 * view of rows 1..2 of a larger one, so that a bad index that slipped through
 * would land in the larger tensor's bytes (seen here, no sanitizer needed). */
static void test_element_access(void) {
    chk_case("element access");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *p = F32(ctx, "p", 4, 5);
    float *pd = p->data;
    for (int e = 0; e < 20; e++) pd[e] = (float)e;
    gml_tensor *v = gml_view(ctx, p, 2, (int64_t[]){2, 5}, (size_t[]){p->nb[2], p->nb[3]},
                             p->nb[2]); /* v[i][j] is p[1 + i][j] */
    gml_tensor *ix = I32(ctx, "ix", 3);
    int32_t *id = ix->data;
    for (int e = 0; e < 3; e++) id[e] = 10 + e;

    CHECK(gml_get_f32(v, (int64_t[]){1, 4}) == 14.0f, "v[1][4] is p[2][4]");
    CHECK(gml_set_f32(v, (int64_t[]){0, 2}, 100.0f) && pd[7] == 100.0f, "v[0][2] = 100");
    pd[7] = 7.0f;
    CHECK(gml_get_i32(ix, (int64_t[]){2}) == 12, "ix[2]");
    CHECK(gml_set_i32(ix, (int64_t[]){1}, -5) && id[1] == -5, "ix[1] = -5");
    id[1] = 11;

    static const int64_t bad[][2] = {{2, 0}, {0, 5}, {-1, 0}, {0, -1}, {-1, 9}, {1, 5}};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        const int64_t *i = bad[k];
        float got = gml_get_f32(v, i);
        CHECK(isnan(got), "get_f32(v [2,5], [%lld,%lld]) gives NAN, got %g", (long long)i[0],
              (long long)i[1], (double)got);
        CHECK(!gml_set_f32(v, i, -1.0f), "set_f32(v [2,5], [%lld,%lld]) fails", (long long)i[0],
              (long long)i[1]);
    }
    for (int64_t i = -1; i <= 3; i += 4) {
        CHECK(gml_get_i32(ix, &i) == INT32_MIN, "get_i32(ix [3], [%lld])", (long long)i);
        CHECK(!gml_set_i32(ix, &i, -1), "set_i32(ix [3], [%lld]) fails", (long long)i);
    }
    /* the wrong type */
    CHECK(isnan(gml_get_f32(ix, (int64_t[]){0})), "get_f32 of an i32 tensor");
    CHECK(!gml_set_f32(ix, (int64_t[]){0}, -1.0f), "set_f32 of an i32 tensor");
    CHECK(gml_get_i32(p, (int64_t[]){0, 0}) == INT32_MIN, "get_i32 of an f32 tensor");
    CHECK(!gml_set_i32(p, (int64_t[]){0, 0}, -1), "set_i32 of an f32 tensor");
    /* NULL tensor or index */
    CHECK(isnan(gml_get_f32(NULL, (int64_t[]){0})) && isnan(gml_get_f32(p, NULL)), "NULL get_f32");
    CHECK(!gml_set_f32(NULL, (int64_t[]){0}, 1.0f) && !gml_set_f32(p, NULL, -1.0f), "NULL set_f32");
    CHECK(gml_get_i32(NULL, (int64_t[]){0}) == INT32_MIN && gml_get_i32(ix, NULL) == INT32_MIN,
          "NULL get_i32");
    CHECK(!gml_set_i32(NULL, (int64_t[]){0}, 1) && !gml_set_i32(ix, NULL, -1), "NULL set_i32");
    /* nothing was written */
    for (int e = 0; e < 20; e++)
        CHECK(pd[e] == (float)e, "p[%d] is %g, want %d", e, (double)pd[e], e);
    for (int e = 0; e < 3; e++) CHECK(id[e] == 10 + e, "ix[%d] is %d, want %d", e, id[e], 10 + e);
    gml_free(ctx);

    /* no data (a no_alloc context) */
    gml_context *na = gml_init((gml_init_params){.mem_size = 1 << 16, .no_alloc = true});
    gml_tensor *f = gml_new_tensor_1d(na, GML_F32, 4), *n = gml_new_tensor_1d(na, GML_I32, 4);
    CHECK(isnan(gml_get_f32(f, (int64_t[]){1})) && !gml_set_f32(f, (int64_t[]){1}, 1.0f),
          "f32 without data");
    CHECK(gml_get_i32(n, (int64_t[]){1}) == INT32_MIN && !gml_set_i32(n, (int64_t[]){1}, 1),
          "i32 without data");
    gml_free(na);

    chk_case("last_error, clear_error of NULL");
    CHECK(strcmp(gml_last_error(NULL), "") == 0, "gml_last_error(NULL) is \"%s\"",
          gml_last_error(NULL));
    gml_clear_error(NULL); /* nothing happens */
}

/* The pieces an arena failure must hold: who failed (the op and its inputs),
 * what did not fit, and the byte counts, worked out here from the arena's
 * size, what it holds (gml_used_mem) and the documented header size. */
static void expect_arena_error(const char *file, int line, gml_context *ctx, bool failed,
                               const char *who, const char *shape, size_t need_before,
                               size_t data_bytes) {
    const size_t header = gml_tensor_overhead(), size = 64 << 10;
    const size_t left = size - gml_used_mem(ctx); /* a failed call gives back what it took */
    const bool header_fits = left >= header;
    char start[128], what[128], needs[64], avail[64], so_far[64];
    snprintf(start, sizeof start, "%s: arena too small: ", who);
    snprintf(what, sizeof what, "%s of %s f32", header_fits ? "data" : "header", shape);
    snprintf(needs, sizeof needs, "needs %zu bytes", header_fits ? data_bytes : header);
    snprintf(avail, sizeof avail, ", %zu of %zu available", header_fits ? left - header : left,
             size);
    snprintf(so_far, sizeof so_far, "(%zu needed so far)", need_before + header + data_bytes);
    const char *msg = gml_last_error(ctx);
    chk_check(strncmp(msg, start, strlen(start)) == 0, file, line,
              "expected the message to start with \"%s\": \"%s\"", start, msg);
    expect_error(file, line, ctx, failed, (const char *[]){what, needs, avail, so_far, NULL});
}
#define EXPECT_ARENA_ERROR(ctx, result, who, shape, need_before, data_bytes)                      \
    expect_arena_error(__FILE__, __LINE__, (ctx), (result) == NULL, (who), (shape), (need_before), \
                       (data_bytes))

static void test_arena(void) {
    chk_case("arena too small");
    gml_context *ctx = chk_ctx(64 << 10);
    gml_tensor *m = F32(ctx, "m", 2, 5);
    size_t before = gml_mem_required(ctx);
    gml_tensor *big = gml_new_tensor_2d(ctx, GML_F32, 100, 1000);
    EXPECT_ARENA_ERROR(ctx, big, "new_tensor", "[100,1000]", before, 400000);
    /* the context still works for what fits */
    gml_tensor *a = F32(ctx, "a", 10), *b = F32(ctx, "b", 10);
    gml_tensor *y = gml_add(ctx, a, b);
    if (CHECK(y, "a small op after the failure: %s", gml_last_error(ctx))) {
        chk_fill_value(a, 1.0f);
        chk_fill_value(b, 2.0f);
        gml_graph *g = gml_build_graph(ctx, &y, 1);
        CHECK(gml_graph_compute(g, 2) == GML_OK && ((float *)y->data)[9] == 3.0f,
              "compute after the failure");
        gml_graph_free(g);
    }
    /* in a full arena: an op names itself and its inputs, as every builder
     * message does; a view likewise */
    while (gml_new_tensor_1d(ctx, GML_F32, 1)) {
    }
    gml_clear_error(ctx);
    before = gml_mem_required(ctx);
    EXPECT_ARENA_ERROR(ctx, gml_add(ctx, a, b), "add(a, b)", "[10]", before, 64);
    before = gml_mem_required(ctx);
    EXPECT_ARENA_ERROR(ctx, gml_transpose(ctx, m, 0, 1), "transpose(m)", "[5,2]", before, 0);
    before = gml_mem_required(ctx);
    EXPECT_ARENA_ERROR(ctx, gml_softmax(ctx, a, NULL, 1.0f, false), "softmax(a)", "[10]", before,
                       64);
    gml_free(ctx);

    chk_case("no_alloc, gml_mem_required, then an arena of exactly that size");
    gml_context *plan = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true});
    gml_tensor *out = attention(plan);
    CHECK(out && out->data == NULL && gml_get_no_alloc(plan), "no_alloc build: %s", gml_last_error(plan));
    const size_t need = gml_mem_required(plan);
    CHECK(need > gml_used_mem(plan), "data needs more than the headers: %zu vs %zu", need,
          gml_used_mem(plan));
    /* computing a no_alloc graph with no data placed fails clearly */
    gml_graph *g = gml_build_graph(plan, &out, 1);
    gml_status st = gml_graph_compute(g, 2);
    CHECK(st == GML_ERR_INVALID, "compute of a no_alloc graph: status %d", (int)st);
    CHECK_CONTAINS(gml_graph_error(g), "no data");
    CHECK_CONTAINS(gml_graph_error(g), "no_alloc");
    gml_graph_free(g);

    gml_context *exact = chk_ctx(need);
    gml_tensor *out2 = attention(exact);
    if (CHECK(out2, "an arena of gml_mem_required() bytes holds the graph: %s", gml_last_error(exact))) {
        CHECK(gml_used_mem(exact) <= need && gml_mem_required(exact) == need, "used %zu of %zu",
              gml_used_mem(exact), need);
        g = gml_build_graph(exact, &out2, 1);
        fill_leafs(g);
        CHECK(gml_graph_compute(g, 2) == GML_OK, "compute: %s", gml_graph_error(g));
        gml_graph_free(g);
    }
    gml_free(exact);
    /* the same in a caller-owned buffer, which gml_free leaves alone */
    void *buf = aligned_alloc(64, need);
    gml_context *owned = gml_init((gml_init_params){.mem_size = need, .mem_buffer = buf});
    gml_tensor *out3 = attention(owned);
    CHECK(out3 && (char *)out3->data >= (char *)buf &&
              (char *)out3->data + gml_nbytes(out3) <= (char *)buf + need,
          "a caller's buffer of gml_mem_required() bytes holds the graph: %s", gml_last_error(owned));
    gml_free(owned);
    free(buf);

    gml_context *short_ctx = chk_ctx(need - 64);
    CHECK(attention(short_ctx) == NULL && strstr(gml_last_error(short_ctx), "arena too small"),
          "64 bytes less is not enough: \"%s\"", gml_last_error(short_ctx));
    gml_free(short_ctx);
    gml_free(plan);
}

/* ---- compute-time errors ------------------------------------------------------ */

/* Computes g at every thread count and kernel set, expecting status want and
 * every piece in the message. */
static void expect_compute_error(gml_graph *g, gml_status want, const char *const *pieces) {
    gml_isa sets[2];
    const int n_sets = chk_kernel_sets(sets);
    const gml_isa saved = gml_get_isa();
    for (int s = 0; s < n_sets; s++) {
        gml_set_isa(sets[s]);
        for (size_t k = 0; k < sizeof CHK_THREADS / sizeof *CHK_THREADS; k++) {
            snprintf(chk_state.config, sizeof chk_state.config, "%s kernels, %d threads",
                     gml_isa_name(sets[s]), CHK_THREADS[k]);
            gml_status st = gml_graph_compute(g, CHK_THREADS[k]);
            CHECK(st == want, "status %d, want %d (%s)", (int)st, (int)want, gml_graph_error(g));
            for (const char *const *p = pieces; *p; p++) CHECK_CONTAINS(gml_graph_error(g), *p);
        }
    }
    chk_state.config[0] = '\0';
    gml_set_isa(saved);
}

static void test_get_rows_range(void) {
    static const int32_t bad[] = {7, -1, 1000000, INT32_MIN};
    for (int b = 0; b < 4; b++) {
        chk_case("get_rows index %d out of range", (int)bad[b]);
        gml_context *ctx = chk_ctx(1 << 20);
        gml_tensor *table = F32(ctx, "table", 7, 3);
        gml_tensor *idx = I32(ctx, "idx", 2, 3);
        chk_fill_value(table, 1.0f);
        memcpy(idx->data, (int32_t[]){0, 6, 3, 2, bad[b], 1}, 24);
        gml_tensor *y = gml_get_rows(ctx, table, idx);
        gml_graph *g = gml_build_graph(ctx, &y, 1);
        char num[32];
        snprintf(num, sizeof num, "%d", (int)bad[b]);
        expect_compute_error(g, GML_ERR_INVALID,
                             (const char *[]){"get_rows(table, idx)", num, "[7,3]", NULL});
        /* fixing the data makes it compute */
        ((int32_t *)idx->data)[4] = 5;
        CHECK(gml_graph_compute(g, 3) == GML_OK && gml_graph_error(g)[0] == '\0',
              "after fixing the index: %s", gml_graph_error(g));
        gml_graph_free(g);
        gml_free(ctx);
    }
}

static void test_valid_len_range(void) {
    static const int32_t bad[] = {9, -1};
    for (int b = 0; b < 2; b++)
        for (int per_query = 0; per_query < 2; per_query++) {
            chk_case("valid_len_mask length %d, %s", (int)bad[b], per_query ? "[B, Tq]" : "[B]");
            gml_context *ctx = chk_ctx(1 << 20);
            gml_tensor *lens = per_query ? I32(ctx, "lens", 2, 3) : I32(ctx, "lens", 3);
            memcpy(lens->data, per_query ? (int32_t[]){8, 0, 3, 4, 5, bad[b]} : (int32_t[]){3, bad[b], 8},
                   per_query ? 24 : 12);
            gml_tensor *m = gml_valid_len_mask(ctx, lens, 8);
            gml_graph *g = gml_build_graph(ctx, &m, 1);
            char num[32];
            snprintf(num, sizeof num, "%d", (int)bad[b]);
            expect_compute_error(g, GML_ERR_INVALID,
                                 (const char *[]){"valid_len_mask(lens)", num, "8", NULL});
            gml_graph_free(g);
            gml_free(ctx);
        }
}

static void test_compute_args(void) {
    chk_case("compute arguments");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *a = F32(ctx, "a", 4);
    chk_fill_value(a, 1.0f);
    gml_tensor *y = gml_scale(ctx, a, 2.0f);
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    for (int n = -1; n <= 0; n++) {
        CHECK(gml_graph_compute(g, n) == GML_ERR_INVALID, "n_threads %d is invalid", n);
        CHECK_CONTAINS(gml_graph_error(g), "n_threads");
    }
    CHECK(gml_graph_compute(g, 1) == GML_OK && gml_graph_error(g)[0] == '\0',
          "and 1 works, clearing the error");

    const gml_isa saved = gml_get_isa();
    CHECK(gml_set_isa((gml_isa)99) == GML_ERR_INVALID && gml_get_isa() == saved,
          "an unknown ISA changes nothing");
    gml_isa isa;
    CHECK(!gml_isa_from_name("sse9", &isa), "unknown ISA name");
    CHECK(gml_isa_from_name("reference", &isa) && isa == GML_ISA_REFERENCE, "ISA names");
    CHECK(gml_set_isa(GML_ISA_AUTO) == GML_OK && gml_get_isa() != GML_ISA_AUTO, "AUTO resolves to an ISA");
    gml_set_isa(saved);
    gml_graph_free(g);
    gml_free(ctx);
}

int main(void) {
    test_matmul_errors();
    test_elementwise_errors();
    test_view_errors();
    test_op_errors();
    test_null_inputs();
    test_failed_optional_input();
    test_arena();
    test_get_rows_range();
    test_valid_len_range();
    test_compute_args();
    test_element_access();
    return chk_summary();
}
