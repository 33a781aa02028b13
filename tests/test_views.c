/* Views: gml_view, gml_reshape, gml_permute, gml_transpose. Shapes, byte
 * strides, data pointers and offsets, and every element read through the view
 * against the element of the base it must alias (exact). */
#include "check.h"

/* Fills t with its own flat logical index: every element distinct and exact. */
static void fill_iota(gml_tensor *t) {
    for (int64_t e = 0; e < chk_numel(t); e++) *(float *)chk_at(t, e) = (float)e;
}

/* Flat row-major index of idx (n entries) in a shape ne (n entries). */
static int64_t flat(int n, const int64_t *ne, const int64_t *idx) {
    int64_t f = 0;
    for (int d = 0; d < n; d++) f = f * ne[d] + idx[d];
    return f;
}

/* The n logical indices of element e of shape ne (n entries). */
static void unflat(int n, const int64_t *ne, int64_t e, int64_t *idx) {
    for (int d = n - 1; d >= 0; d--) {
        idx[d] = e % ne[d];
        e /= ne[d];
    }
}

static void test_view_offsets(void) {
    chk_case("view of a [6,10] tensor with offsets");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *base = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 6, 10), "base"); /* [6, 10] */
    fill_iota(base);

    /* rows 2..4, columns 3..6: [3, 4] with the base's row stride */
    gml_tensor *v = gml_view(ctx, base, 2, (int64_t[]){3, 4}, (size_t[]){10 * 4, 4},
                             (2 * 10 + 3) * 4);
    if (!CHECK(v, "view failed: %s", gml_last_error(ctx))) return;
    CHECK(v->n_dims == 2 && gml_dim(v, 0) == 3 && gml_dim(v, 1) == 4 && gml_dim(v, -1) == 4,
          "view shape");
    CHECK(v->nb[2] == 40 && v->nb[3] == 4, "view strides %zu %zu", v->nb[2], v->nb[3]);
    CHECK(v->data == (char *)base->data + 92, "view data pointer: base + %td, want base + 92",
          (char *)v->data - (char *)base->data);
    CHECK(v->view_src == base && v->view_offs == 92, "view_src/view_offs");
    CHECK(gml_is_view(v) && !gml_is_view(base), "is_view");
    CHECK(!gml_is_contiguous(v) && gml_is_contiguous(base), "is_contiguous");
    CHECK(gml_nelements(v) == 12, "nelements %lld", (long long)gml_nelements(v));
    CHECK(gml_nbytes(v) == (size_t)(2 * 40 + 3 * 4 + 4), "nbytes spans first to last: %zu",
          gml_nbytes(v));
    float want[12];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) want[i * 4 + j] = (float)((2 + i) * 10 + 3 + j);
    CHECK_EQUAL(v, want, "view elements");
    /* the library's own accessors agree */
    CHECK(gml_get_f32(v, (int64_t[]){2, 3}) == 46.0f, "gml_get_f32 through a view");

    /* view of a view: the diagonal of v, starting at v[0,1] -> base[2+i, 4+i] */
    gml_tensor *d = gml_view(ctx, v, 1, (int64_t[]){3}, (size_t[]){44}, 4);
    if (!CHECK(d, "view of a view failed: %s", gml_last_error(ctx))) return;
    CHECK(d->view_src == base, "a view of a view has the root as view_src");
    CHECK(d->view_offs == 96, "view offsets accumulate: %zu, want 96", d->view_offs);
    CHECK(d->data == (char *)v->data + 4, "view of a view data pointer");
    CHECK_EQUAL(d, ((float[]){24, 35, 46}), "diagonal elements");

    /* writing through a view changes the base */
    gml_set_f32(d, (int64_t[]){1}, -1.0f);
    CHECK(((float *)base->data)[35] == -1.0f, "write through a view reaches the base");

    /* a view touching exactly the last byte is fine */
    gml_tensor *last = gml_view(ctx, base, 1, (int64_t[]){5}, (size_t[]){4}, 55 * 4);
    CHECK(last && ((float *)last->data)[4] == 59.0f, "view ending at the last element: %s",
          gml_last_error(ctx));
    /* a 3-D view with a stride of whole rows, stepping over every other row */
    gml_tensor *v3 = gml_view(ctx, base, 3, (int64_t[]){3, 2, 5}, (size_t[]){80, 4 * 5, 4}, 0);
    if (CHECK(v3, "3-D view: %s", gml_last_error(ctx))) {
        float w3[30];
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 2; b++)
                for (int c = 0; c < 5; c++) w3[a * 10 + b * 5 + c] = (float)(a * 20 + b * 5 + c);
        CHECK_EQUAL(v3, w3, "3-D view elements");
    }
    gml_free(ctx);
}

/* reshape(x [2,3,4]) to each target, -1 anywhere: same data, contiguous strides. */
static void test_reshape(void) {
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *x = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, 2, 3, 4), "x");
    fill_iota(x);
    float want[24];
    for (int i = 0; i < 24; i++) want[i] = (float)i;
    static const struct {
        int n;
        int64_t ne[4], out[4];
    } cases[] = {
        {1, {-1}, {24}},          {1, {24}, {24}},          {2, {4, -1}, {4, 6}},
        {2, {-1, 8}, {3, 8}},     {3, {2, -1, 2}, {2, 6, 2}}, {4, {1, 2, 3, 4}, {1, 2, 3, 4}},
        {4, {2, 3, 4, -1}, {2, 3, 4, 1}}, {4, {-1, 1, 1, 1}, {24, 1, 1, 1}}, {2, {24, 1}, {24, 1}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        chk_case("reshape [2,3,4] case %zu", c);
        gml_tensor *r = gml_reshape(ctx, x, cases[c].n, cases[c].ne);
        if (!CHECK(r, "reshape failed: %s", gml_last_error(ctx))) continue;
        CHECK(r->n_dims == cases[c].n, "n_dims %d", r->n_dims);
        for (int d = 0; d < cases[c].n; d++)
            CHECK(gml_dim(r, d) == cases[c].out[d], "dim %d is %lld, want %lld", d,
                  (long long)gml_dim(r, d), (long long)cases[c].out[d]);
        CHECK(gml_is_contiguous(r) && r->data == x->data && r->view_src == x, "same data");
        CHECK(r->op == GML_OP_RESHAPE, "op is reshape");
        CHECK_EQUAL(r, want, "reshaped elements in order");
        /* reshape of a reshape still aliases x */
        gml_tensor *rr = gml_reshape(ctx, r, 2, (int64_t[]){6, 4});
        CHECK(rr && rr->view_src == x && rr->data == x->data, "reshape of a reshape");
    }

    chk_case("reshape of a contiguous slice at an offset");
    gml_tensor *big = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 8, 12), "big");
    fill_iota(big);
    /* rows 2..5: contiguous, 96 bytes in */
    gml_tensor *rows = gml_view(ctx, big, 2, (int64_t[]){4, 12}, (size_t[]){48, 4}, 2 * 48);
    if (CHECK(rows && gml_is_contiguous(rows), "rows view: %s", gml_last_error(ctx))) {
        gml_tensor *r = gml_reshape(ctx, rows, 3, (int64_t[]){2, -1, 3});
        if (CHECK(r, "reshape of a slice: %s", gml_last_error(ctx))) {
            CHECK(gml_dim(r, 1) == 8 && r->view_offs == 96 && r->data == (char *)big->data + 96,
                  "reshape keeps the slice's offset: view_offs %zu", r->view_offs);
            float w[48];
            for (int i = 0; i < 48; i++) w[i] = (float)(24 + i);
            CHECK_EQUAL(r, w, "reshaped slice elements");
        }
    }

    chk_case("reshape of a transposed view whose permutation only moves a size-1 dim");
    gml_tensor *col = gml_new_tensor_2d(ctx, GML_F32, 1, 5);
    fill_iota(col);
    gml_tensor *t = gml_transpose(ctx, col, 0, 1); /* [5, 1] */
    gml_tensor *r = gml_reshape(ctx, t, 1, (int64_t[]){5});
    if (CHECK(r, "reshape [5,1] view: %s", gml_last_error(ctx)))
        CHECK_EQUAL(r, ((float[]){0, 1, 2, 3, 4}), "elements");
    gml_free(ctx);
}

/* Every permutation of 2-D, 3-D and 4-D tensors, of contiguous and of sliced
 * bases: out.shape[i] = in.shape[perm[i]] and out[i...] = in[j...] with
 * j[perm[d]] = i[d]. */
static void check_permutations(gml_context *ctx, gml_tensor *x, const char *what) {
    const int n = x->n_dims;
    int64_t xne[4];
    for (int d = 0; d < n; d++) xne[d] = gml_dim(x, d);
    float *xd = chk_dense(x);
    float *want = malloc((size_t)chk_numel(x) * sizeof *want);
    int perm[4] = {0, 1, 2, 3};
    int total = 1;
    for (int d = 2; d <= n; d++) total *= d;
    for (int k = 0; k < total; k++) {
        /* k-th permutation by the factorial number system */
        int pool[4] = {0, 1, 2, 3}, left = n, rest = k;
        for (int d = 0; d < n; d++) {
            int f = 1;
            for (int m = 2; m < left; m++) f *= m;
            int pick = rest / f;
            rest %= f;
            perm[d] = pool[pick];
            for (int m = pick; m < left - 1; m++) pool[m] = pool[m + 1];
            left--;
        }
        chk_case("permute %s by [%d,%d,%d,%d](first %d)", what, perm[0], perm[1], perm[2], perm[3], n);
        /* PyTorch accepts negative dims: use them for odd k */
        int arg[4];
        for (int d = 0; d < n; d++) arg[d] = k % 2 ? perm[d] - n : perm[d];
        gml_tensor *p = gml_permute(ctx, x, arg);
        if (!CHECK(p, "permute failed: %s", gml_last_error(ctx))) continue;
        int64_t pne[4];
        for (int d = 0; d < n; d++) {
            pne[d] = xne[perm[d]];
            CHECK(gml_dim(p, d) == pne[d], "dim %d is %lld, want %lld", d, (long long)gml_dim(p, d),
                  (long long)pne[d]);
        }
        CHECK(p->view_src == (x->view_src ? x->view_src : x) && p->data == x->data,
              "a permute aliases its input");
        for (int64_t e = 0; e < chk_numel(x); e++) {
            int64_t i[4], j[4];
            unflat(n, pne, e, i);
            for (int d = 0; d < n; d++) j[perm[d]] = i[d];
            want[e] = xd[flat(n, xne, j)];
        }
        CHECK_EQUAL(p, want, "permuted elements");
        /* permuting back restores x exactly */
        int inv[4];
        for (int d = 0; d < n; d++) inv[perm[d]] = d;
        gml_tensor *back = gml_permute(ctx, p, inv);
        if (CHECK(back, "inverse permute: %s", gml_last_error(ctx))) {
            CHECK(gml_same_shape(back, x), "inverse permute restores the shape");
            for (int d = 0; d < 4; d++) CHECK(back->nb[d] == x->nb[d] || back->ne[d] == 1, "strides");
            CHECK_EQUAL(back, xd, "inverse permute restores the elements");
        }
    }
    free(xd);
    free(want);
}

static void test_permute(void) {
    gml_context *ctx = chk_ctx(8 << 20);
    chk_rng r = chk_seed(11);
    static const int64_t shapes[][4] = {{3, 5}, {2, 3, 4}, {2, 3, 4, 5}, {1, 3, 1, 7}, {3, 1, 2}};
    static const int ndims[] = {2, 3, 4, 4, 3};
    for (size_t s = 0; s < sizeof ndims / sizeof *ndims; s++) {
        for (int l = 0; l < CHK_N_LAYOUTS; l++) {
            char what[96], shape[64];
            gml_tensor *x = chk_new_input(ctx, GML_F32, ndims[s], shapes[s], (chk_layout)l, "x", &r,
                                          -10, 10);
            snprintf(what, sizeof what, "%s x %s", chk_layout_name((chk_layout)l),
                     chk_shape(x, shape, sizeof shape));
            check_permutations(ctx, x, what);
        }
    }
    gml_free(ctx);
}

/* transpose(d0, d1) of 1-D..4-D tensors for all pairs, negative and equal dims. */
static void test_transpose(void) {
    gml_context *ctx = chk_ctx(8 << 20);
    chk_rng r = chk_seed(12);
    static const int64_t ne[4] = {2, 3, 5, 7};
    for (int n = 1; n <= 4; n++) {
        for (int l = 0; l < CHK_N_LAYOUTS; l++) {
            gml_tensor *x = chk_new_input(ctx, GML_F32, n, ne + 4 - n, (chk_layout)l, "x", &r, -1, 1);
            float *xd = chk_dense(x);
            float *want = malloc((size_t)chk_numel(x) * sizeof *want);
            int64_t xne[4];
            for (int d = 0; d < n; d++) xne[d] = gml_dim(x, d);
            for (int d0 = -n; d0 < n; d0++) {
                for (int d1 = -n; d1 < n; d1++) {
                    chk_case("transpose(%d, %d) of a %d-D %s input", d0, d1, n,
                             chk_layout_name((chk_layout)l));
                    gml_tensor *t = gml_transpose(ctx, x, d0, d1);
                    if (!CHECK(t, "transpose failed: %s", gml_last_error(ctx))) continue;
                    int a = (d0 + n) % n, b = (d1 + n) % n;
                    int64_t tne[4];
                    for (int d = 0; d < n; d++) tne[d] = xne[d == a ? b : d == b ? a : d];
                    for (int d = 0; d < n; d++) CHECK(gml_dim(t, d) == tne[d], "dim %d", d);
                    for (int64_t e = 0; e < chk_numel(x); e++) {
                        int64_t i[4], j[4];
                        unflat(n, tne, e, i);
                        for (int d = 0; d < n; d++) j[d] = i[d];
                        j[a] = i[b];
                        j[b] = i[a];
                        want[e] = xd[flat(n, xne, j)];
                    }
                    CHECK_EQUAL(t, want, "transposed elements");
                }
            }
            free(xd);
            free(want);
        }
    }
    gml_free(ctx);
}

/* Views inside a graph are no-ops: a graph whose output is a view of an input
 * computes and leaves the data as it was. */
static void test_views_in_graph(void) {
    chk_case("views as graph outputs");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *x = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, 2, 3, 4), "x");
    fill_iota(x);
    gml_tensor *t = gml_transpose(ctx, gml_reshape(ctx, x, 2, (int64_t[]){6, -1}), 0, 1); /* [4, 6] */
    gml_tensor *p = gml_permute(ctx, gml_view(ctx, x, 3, (int64_t[]){2, 2, 4}, x->nb + 1, 16),
                                (int[]){2, 0, 1}); /* [4, 2, 2] */
    gml_tensor *outs[] = {t, p};
    gml_graph *g = gml_build_graph(ctx, outs, 2);
    if (!CHECK(g, "build: %s", gml_last_error(ctx))) return;
    CHECK(gml_graph_n_leafs(g) == 1, "one leaf");
    float wt[24], wp[16];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 6; j++) wt[i * 6 + j] = (float)(j * 4 + i);
    for (int c = 0; c < 4; c++)
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++) wp[c * 4 + a * 2 + b] = (float)(a * 12 + b * 4 + c + 4);
    CHECK_RUN(g, .outs = outs, .n_outs = 2);
    CHECK_EQUAL(t, wt, "transposed reshape after compute");
    CHECK_EQUAL(p, wp, "permuted view after compute");
    gml_graph_free(g);
    gml_free(ctx);
}

static void test_queries(void) {
    chk_case("shape queries");
    gml_context *ctx = chk_ctx(1 << 20);
    char buf[64];
    gml_tensor *a = gml_new_tensor_4d(ctx, GML_F32, 2, 8, 10, 64);
    gml_tensor *b = gml_new_tensor_1d(ctx, GML_I32, 7);
    CHECK(strcmp(gml_format_shape(a, buf, sizeof buf), "[2,8,10,64]") == 0, "format %s", buf);
    CHECK(strcmp(gml_format_shape(b, buf, sizeof buf), "[7]") == 0, "format %s", buf);
    CHECK(a->ne[0] == 2 && a->ne[3] == 64 && b->ne[0] == 1 && b->ne[3] == 7, "right-aligned ne");
    CHECK(b->nb[3] == 4 && b->nb[2] == 28, "leading strides of a 1-D tensor are its extent");
    CHECK(gml_dim(a, -1) == 64 && gml_dim(a, -4) == 2 && gml_dim(a, 1) == 8, "gml_dim");
    CHECK(gml_dim(a, 4) == 0 && gml_dim(a, -5) == 0, "gml_dim out of range is 0");
    CHECK(gml_nelements(a) == 2 * 8 * 10 * 64 && gml_nbytes(a) == 4u * 2 * 8 * 10 * 64, "sizes");
    CHECK(((uintptr_t)a->data % 64) == 0 && ((uintptr_t)b->data % 64) == 0, "data is 64-byte aligned");
    gml_tensor *c = gml_new_tensor_2d(ctx, GML_F32, 8, 10);
    gml_tensor *d = gml_new_tensor_3d(ctx, GML_F32, 1, 8, 10);
    CHECK(!gml_same_shape(c, d), "[8,10] and [1,8,10] are different shapes");
    gml_set_name(c, "c");
    CHECK(gml_get_tensor(ctx, "c") == c && gml_get_tensor(ctx, "nope") == NULL, "get_tensor");
    CHECK(strcmp(gml_op_name(GML_OP_MATMUL), "matmul") == 0, "op names");
    CHECK(strcmp(gml_type_name(GML_I32), "i32") == 0, "type names");
    gml_free(ctx);
}

int main(void) {
    test_view_offsets();
    test_reshape();
    test_permute();
    test_transpose();
    test_views_in_graph();
    test_queries();
    return chk_summary();
}
