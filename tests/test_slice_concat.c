/* slice (a view, torch.narrow) and concat (a copy, torch.cat of two inputs).
 *
 * slice: along every dim of 1-D to 4-D inputs of every layout check.h makes
 * (contiguous, sliced, transposed, reversed, outer dims swapped, sliced and
 * transposed), dims and starts negative too, odd sizes; the view must point
 * into its input's data (no copy) with its strides; chained slices; a slice
 * as an input of matmul and softmax; a slice as the destination of cpy (from
 * another tensor, and from a disjoint slice of the same tensor: accepted; an
 * overlapping one: refused) and of set_rows; slices of intermediate results
 * in a planned (no_alloc) graph, where an in-place node could take the
 * storage a slice still reads.
 * concat: along every dim of 1-D to 4-D inputs, f32 and i32, of every pair of
 * layouts, of slices of one tensor, and of inputs strided on every dim, at
 * 1, 2, 3, 4 and 7 threads under the reference kernels and every ISA the
 * CPU has, against naive loops (bitwise: it moves values).
 * Builder errors of both, messages checked. */
#include "check.h"

#include <inttypes.h>
#include <math.h>

static const gml_isa ISAS[] = {GML_TEST_FAST_ISAS};

/* Index e (logical order) of shape ne (right-aligned, 4 entries) -> i. */
static void unflat(const int64_t *ne, int64_t e, int64_t *i) {
    for (int d = GML_MAX_DIMS - 1; d >= 0; d--) {
        i[d] = e % ne[d];
        e /= ne[d];
    }
}
static int64_t flat(const int64_t *ne, const int64_t *i) {
    int64_t e = 0;
    for (int d = 0; d < GML_MAX_DIMS; d++) e = e * ne[d] + i[d];
    return e;
}

/* Runs g under the reference kernels and every ISA the CPU has (CHECK_RUN:
 * each at 1, 2, 3, 4, 7 threads, bitwise across them), verify after each. */
static void run_all_isas(gml_graph *g, gml_tensor *const *outs, int n_outs, void (*verify)(void *),
                         void *user) {
    for (size_t s = 0; s < sizeof ISAS / sizeof *ISAS; s++) {
        if (!gml_cpu_has(ISAS[s])) {
            printf("  the CPU lacks %s: not checked\n", gml_isa_name(ISAS[s]));
            continue;
        }
        CHECK_RUN(g, .outs = outs, .n_outs = n_outs, .verify = verify, .user = user,
                  .isa = ISAS[s]);
    }
}

/* ---- slice ------------------------------------------------------------------- */

/* want = x[.., s:s+len, ..] along axis (right-aligned), from x's dense copy */
static void naive_slice(const gml_tensor *x, const uint32_t *xd, int axis, int64_t s,
                        int64_t len, uint32_t *want) {
    int64_t ne[GML_MAX_DIMS];
    memcpy(ne, x->ne, sizeof ne);
    ne[axis] = len;
    for (int64_t e = 0; e < ne[0] * ne[1] * ne[2] * ne[3]; e++) {
        int64_t i[GML_MAX_DIMS];
        unflat(ne, e, i);
        i[axis] += s;
        want[e] = xd[flat(x->ne, i)];
    }
}

struct slice_check {
    gml_tensor *c; /* cont(slice) */
    const uint32_t *want;
};
static void verify_slice(void *u) {
    struct slice_check *sc = u;
    CHECK_EQUAL(sc->c, sc->want, "cont of the slice");
}

static void test_slice_layouts(void) {
    chk_case("slice along every dim of 1-D to 4-D inputs of every layout, dims and starts "
             "negative too: a view into the input, read directly and through cont");
    chk_rng r = chk_seed(11);
    static const int64_t shapes[4][4] = {{13}, {5, 9}, {3, 7, 6}, {2, 5, 3, 11}};
    for (int n = 1; n <= 4; n++)
        for (int lay = 0; lay < CHK_N_LAYOUTS; lay++)
            for (int dim = -n; dim < n; dim++) {
                gml_context *ctx = chk_ctx(1 << 20);
                gml_tensor *x = chk_new_input(ctx, GML_F32, n, shapes[n - 1], (chk_layout)lay, "x",
                                              &r, -1, 1);
                const int axis = GML_MAX_DIMS - n + (dim < 0 ? dim + n : dim);
                const int64_t size = x->ne[axis];
                /* (start as written, len): the first, the last, the middle, all, from the end */
                const int64_t cases[][2] = {{0, 1}, {size - 1, 1}, {1, size - 2 > 0 ? size - 2 : 1},
                                            {0, size}, {-2, 2}, {-size, size - 1 > 0 ? size - 1 : 1}};
                uint32_t *xd = chk_dense(x);
                for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
                    const int64_t st = cases[k][0], len = cases[k][1];
                    const int64_t s = st < 0 ? st + size : st;
                    gml_tensor *v = gml_slice(ctx, x, dim, st, len);
                    if (!CHECK(v, "slice(x %s, %d, %" PRId64 ", %" PRId64 "): %s",
                               chk_layout_name((chk_layout)lay), dim, st, len, gml_last_error(ctx)))
                        continue;
                    CHECK(v->op == GML_OP_SLICE && v->n_dims == n && v->ne[axis] == len &&
                              v->data == (char *)x->data + s * (int64_t)x->nb[axis] &&
                              memcmp(v->nb + GML_MAX_DIMS - n, x->nb + GML_MAX_DIMS - n, (size_t)n * sizeof *v->nb) == 0 &&
                              gml_is_view(v),
                          "slice(x %s, %d, %" PRId64 ", %" PRId64 "): a view of x's data with x's "
                          "strides", chk_layout_name((chk_layout)lay), dim, st, len);
                    uint32_t *want = malloc((size_t)chk_numel(v) * 4);
                    naive_slice(x, xd, axis, s, len, want);
                    CHECK_EQUAL(v, want, "slice(x %s, %d, %" PRId64 ", %" PRId64 ") read directly",
                                chk_layout_name((chk_layout)lay), dim, st, len);
                    if (k == 2 || k == 4) { /* through a graph: cont(slice) */
                        gml_tensor *c = gml_cont(ctx, v);
                        gml_graph *g = gml_build_graph(ctx, &c, 1);
                        struct slice_check sc = {c, want};
                        run_all_isas(g, &c, 1, verify_slice, &sc);
                        gml_graph_free(g);
                    }
                    free(want);
                }
                free(xd);
                gml_free(ctx);
            }
}

static void test_slice_chained(void) {
    chk_case("chained slices: slice(slice(x)) along the same and other dims");
    chk_rng r = chk_seed(12);
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *x = chk_new_input(ctx, GML_F32, 3, (int64_t[]){4, 9, 7}, CHK_REVERSED, "x", &r, -1, 1);
    gml_tensor *a = gml_slice(ctx, gml_slice(ctx, x, 1, 2, 6), 1, 1, 3); /* = slice(x, 1, 3, 3) */
    gml_tensor *b = gml_slice(ctx, x, 1, 3, 3);
    CHECK(a && b && a->data == b->data && memcmp(a->ne, b->ne, sizeof a->ne) == 0 &&
              memcmp(a->nb + 1, b->nb + 1, 3 * sizeof *a->nb) == 0 && a->view_src == x->view_src &&
              a->view_offs == b->view_offs,
          "slice(slice(x, 1, 2, 6), 1, 1, 3) is slice(x, 1, 3, 3)");
    /* along three dims, then a transpose, then a slice of that */
    gml_tensor *c = gml_slice(ctx, gml_slice(ctx, gml_slice(ctx, x, 0, 1, 2), -1, -4, 3), 1, 5, 4);
    gml_tensor *ct = gml_slice(ctx, gml_transpose(ctx, c, 0, 2), 2, 1, 1); /* [3, 4, 1] */
    uint32_t *xd = chk_dense(x);
    uint32_t want[2 * 4 * 3], want_t[3 * 4];
    int64_t n = 0;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 3; k++) want[n++] = xd[(1 + i) * 63 + (5 + j) * 7 + 3 + k];
    n = 0;
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < 4; j++) want_t[n++] = xd[(1 + 1) * 63 + (5 + j) * 7 + 3 + k];
    if (CHECK(c && ct, "%s", gml_last_error(ctx))) {
        CHECK(ct->ne[1] == 3 && ct->ne[2] == 4 && ct->ne[3] == 1, "shape of ct");
        CHECK_EQUAL(c, want, "three slices");
        CHECK_EQUAL(ct, want_t, "three slices, a transpose and a slice");
        gml_tensor *cc = gml_cont(ctx, ct);
        gml_graph *g = gml_build_graph(ctx, &cc, 1);
        struct slice_check sc = {cc, want_t};
        run_all_isas(g, &cc, 1, verify_slice, &sc);
        gml_graph_free(g);
    }
    free(xd);
    gml_free(ctx);
}

struct consumers {
    gml_tensor *mm, *sm;
    const double *want_mm, *want_sm;
};
static void verify_consumers(void *u) {
    struct consumers *c = u;
    CHECK_CLOSE(c->mm, c->want_mm, 1e-5, 1e-5, "matmul of slices");
    CHECK_CLOSE(c->sm, c->want_sm, 1e-6, 1e-5, "softmax of a slice");
}

static void test_slice_consumers(void) {
    chk_case("slices as inputs of matmul and softmax");
    chk_rng r = chk_seed(13);
    gml_context *ctx = chk_ctx(4 << 20);
    /* a [3, 20, 31] rows 2..18 along dim 1, cols 1..29; b [29, 40] cols 5..27 */
    gml_tensor *a = chk_new_input(ctx, GML_F32, 3, (int64_t[]){3, 20, 31}, CHK_TRANSPOSED, "a", &r, -1, 1);
    gml_tensor *b = chk_new_input(ctx, GML_F32, 2, (int64_t[]){29, 40}, CHK_CONTIGUOUS, "b", &r, -1, 1);
    gml_tensor *as = gml_slice(ctx, gml_slice(ctx, a, 1, 2, 17), -1, 1, 29); /* [3, 17, 29] */
    gml_tensor *bs = gml_slice(ctx, b, 1, 5, 23);                             /* [29, 23] */
    gml_tensor *mm = gml_matmul(ctx, as, bs);
    gml_tensor *s = chk_new_input(ctx, GML_F32, 3, (int64_t[]){2, 6, 40}, CHK_OUTER_SWAPPED, "s", &r, -4, 4);
    gml_tensor *ss = gml_slice(ctx, s, -1, -37, 35); /* [2, 6, 35] from col 3 */
    gml_tensor *sm = gml_softmax(ctx, ss, NULL, 0.7f, true);
    if (!CHECK(mm && sm, "%s", gml_last_error(ctx))) {
        gml_free(ctx);
        return;
    }
    float *ad = chk_dense(as), *bd = chk_dense(bs), *sd = chk_dense(ss);
    double *want_mm = malloc(3 * 17 * 23 * sizeof(double)), *want_sm = malloc(2 * 6 * 35 * sizeof(double));
    for (int i = 0; i < 3; i++)
        for (int m = 0; m < 17; m++)
            for (int nn = 0; nn < 23; nn++) {
                double acc = 0;
                for (int k = 0; k < 29; k++) acc += (double)ad[(i * 17 + m) * 29 + k] * bd[k * 23 + nn];
                want_mm[(i * 17 + m) * 23 + nn] = acc;
            }
    for (int i = 0; i < 2; i++)
        for (int q = 0; q < 6; q++) {
            const float *row = sd + (i * 6 + q) * 35;
            const int vis = q + (35 - 6) + 1; /* keys j <= q + Tk - Tq */
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < vis; j++) mx = fmax(mx, 0.7 * row[j]);
            for (int j = 0; j < vis; j++) sum += exp(0.7 * row[j] - mx);
            for (int j = 0; j < 35; j++)
                want_sm[(i * 6 + q) * 35 + j] = j < vis ? exp(0.7 * row[j] - mx) / sum : 0.0;
        }
    gml_tensor *outs[] = {mm, sm};
    gml_graph *g = gml_build_graph(ctx, outs, 2);
    struct consumers c = {mm, sm, want_mm, want_sm};
    run_all_isas(g, outs, 2, verify_consumers, &c);
    gml_graph_free(g);
    free(ad);
    free(bd);
    free(sd);
    free(want_mm);
    free(want_sm);
    gml_free(ctx);
}

struct writes {
    gml_tensor *cache, *all, *x_all, *rows_all;
    uint32_t *cache0, *x0, *rows0;
    uint32_t *src, *src_rows;
};
static void reset_writes(void *u) {
    struct writes *w = u;
    chk_write(w->cache, w->cache0);
    chk_write(w->x_all, w->x0);
    chk_write(w->rows_all, w->rows0);
}
static void verify_writes(void *u) {
    struct writes *w = u;
    /* cache [4, 6, 5]: [:, 3:5, :] = src [4, 2, 5] */
    uint32_t want[4 * 6 * 5];
    memcpy(want, w->cache0, sizeof want);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++)
            for (int k = 0; k < 5; k++) want[(i * 6 + 3 + j) * 5 + k] = w->src[(i * 2 + j) * 5 + k];
    CHECK_EQUAL(w->all, want, "cache after cpy into its slice");
    /* x [3, 8]: [:, 5:8] = x[:, 0:3] (disjoint slices of one tensor) */
    uint32_t wx[3 * 8];
    memcpy(wx, w->x0, sizeof wx);
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 3; k++) wx[i * 8 + 5 + k] = w->x0[i * 8 + k];
    CHECK_EQUAL(w->x_all, wx, "x after cpy of slice [:, 0:3] into slice [:, 5:8]");
    /* rows_all [2, 7, 6]: slice [:, :, 2:5] rows idx {4, 0, 6} = src_rows [2, 3, 3] */
    uint32_t wr[2 * 7 * 6];
    memcpy(wr, w->rows0, sizeof wr);
    static const int idx[3] = {4, 0, 6};
    for (int a = 0; a < 2; a++)
        for (int i = 0; i < 3; i++)
            for (int k = 0; k < 3; k++) wr[(a * 7 + idx[i]) * 6 + 2 + k] = w->src_rows[(a * 3 + i) * 3 + k];
    CHECK_EQUAL(w->rows_all, wr, "set_rows into a slice of the last dim");
}

static void test_slice_writes(void) {
    chk_case("slices as destinations: cpy from another tensor, cpy between disjoint slices of "
             "one tensor, set_rows into a column slice; overlapping slices refused");
    chk_rng r = chk_seed(14);
    gml_context *ctx = chk_ctx(1 << 20);
    struct writes w = {0};
    w.cache = chk_new_input(ctx, GML_F32, 3, (int64_t[]){4, 6, 5}, CHK_CONTIGUOUS, "cache", &r, -1, 1);
    gml_tensor *src = chk_new_input(ctx, GML_F32, 3, (int64_t[]){4, 2, 5}, CHK_TRANSPOSED, "src", &r, -1, 1);
    gml_tensor *slot = gml_cpy(ctx, src, gml_slice(ctx, w.cache, 1, 3, 2));
    w.all = gml_after(ctx, w.cache, slot);
    gml_tensor *x = chk_new_input(ctx, GML_F32, 2, (int64_t[]){3, 8}, CHK_CONTIGUOUS, "x", &r, -1, 1);
    gml_tensor *moved = gml_cpy(ctx, gml_slice(ctx, x, 1, 0, 3), gml_slice(ctx, x, -1, -3, 3));
    CHECK(moved, "a cpy between disjoint slices of one tensor is accepted: %s", gml_last_error(ctx));
    w.x_all = x;
    gml_tensor *x_after = gml_after(ctx, x, moved);
    gml_tensor *rows = chk_new_input(ctx, GML_F32, 3, (int64_t[]){2, 7, 6}, CHK_CONTIGUOUS, "rows", &r, -1, 1);
    gml_tensor *sr = chk_new_input(ctx, GML_F32, 3, (int64_t[]){2, 3, 3}, CHK_SLICED, "sr", &r, -1, 1);
    gml_tensor *idx = gml_new_tensor_1d(ctx, GML_I32, 3);
    chk_write(idx, (int32_t[]){4, 0, 6});
    gml_tensor *set = gml_set_rows(ctx, gml_slice(ctx, rows, -1, 2, 3), sr, idx);
    w.rows_all = rows;
    gml_tensor *rows_after = gml_after(ctx, rows, set);
    if (!CHECK(w.all && x_after && rows_after, "%s", gml_last_error(ctx))) {
        gml_free(ctx);
        return;
    }
    /* the overlapping case: [:, 0:4] into [:, 2:6] */
    gml_tensor *bad = gml_cpy(ctx, gml_slice(ctx, x, 1, 0, 4), gml_slice(ctx, x, 1, 2, 4));
    CHECK(!bad, "a cpy between overlapping slices is refused");
    CHECK_CONTAINS(gml_last_error(ctx), "overlaps the source");
    gml_clear_error(ctx);
    w.cache0 = chk_dense(w.cache);
    w.x0 = chk_dense(x);
    w.rows0 = chk_dense(rows);
    w.src = chk_dense(src);
    w.src_rows = chk_dense(sr);
    gml_tensor *outs[] = {w.all, x_after, rows_after};
    w.all = outs[0];
    gml_graph *g = gml_build_graph(ctx, outs, 3);
    for (size_t s = 0; s < sizeof ISAS / sizeof *ISAS; s++)
        if (gml_cpu_has(ISAS[s]))
            CHECK_RUN(g, .outs = outs, .n_outs = 3, .before = reset_writes, .verify = verify_writes,
                      .user = &w, .isa = ISAS[s]);
    gml_graph_free(g);
    free(w.cache0);
    free(w.x0);
    free(w.rows0);
    free(w.src);
    free(w.src_rows);
    gml_free(ctx);
}

/* A no_alloc graph planned with reuse: y = x * 2, its slices read after
 * y's last direct reader, which may run in place (scale), so the planner
 * must keep y's storage alive for the slices (a view's storage is its root's). */
static void test_slice_planned(void) {
    chk_case("slices of intermediate results in a planned graph (reuse, in place)");
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true});
    gml_tensor *x = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 6, 10), "x");
    gml_set_flags(x, GML_FLAG_INPUT);
    gml_tensor *y = gml_scale(ctx, x, 2.0f);
    gml_tensor *head = gml_slice(ctx, y, 0, 0, 2);   /* y[0:2, :] */
    gml_tensor *tail = gml_slice(ctx, y, -1, -3, 3); /* y[:, 7:10] */
    gml_tensor *z = gml_scale(ctx, y, 3.0f);         /* last direct reader of y */
    gml_tensor *zs = gml_slice(ctx, z, 0, 2, 4);     /* z[2:6, :] */
    gml_tensor *out1 = gml_concat(ctx, head, zs, 0); /* [6, 10] */
    gml_tensor *out2 = gml_concat(ctx, tail, gml_slice(ctx, zs, 1, 0, 3), 0); /* [10, 3] */
    gml_tensor *outs[] = {out1, out2};
    if (!CHECK(out1 && out2, "%s", gml_last_error(ctx))) {
        gml_free(ctx);
        return;
    }
    gml_graph *g = gml_build_graph(ctx, outs, 2);
    CHECK(gml_graph_plan(g, &(gml_plan_options){0}) == GML_OK, "plan: %s", gml_graph_error(g));
    float xv[60];
    for (int i = 0; i < 60; i++) xv[i] = (float)i - 17.5f;
    float w1[60], w2[30];
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 10; j++) w1[i * 10 + j] = i < 2 ? xv[i * 10 + j] * 2 : xv[i * 10 + j] * 2 * 3;
    for (int i = 0; i < 10; i++)
        for (int j = 0; j < 3; j++)
            w2[i * 3 + j] = i < 6 ? xv[i * 10 + 7 + j] * 2 : xv[(2 + i - 6) * 10 + j] * 2 * 3;
    for (int nth = 1; nth <= 4; nth++) {
        memcpy(gml_graph_data(g, x), xv, sizeof xv);
        if (!CHECK(gml_graph_compute(g, nth) == GML_OK, "compute: %s", gml_graph_error(g))) continue;
        CHECK_EQUAL(gml_graph_tensor(g, out1), w1, "out1, %d threads", nth);
        CHECK_EQUAL(gml_graph_tensor(g, out2), w2, "out2, %d threads", nth);
    }
    gml_graph_free(g);
    gml_free(ctx);
}

/* ---- concat ------------------------------------------------------------------ */

static void naive_concat(const gml_tensor *a, const gml_tensor *b, int axis, uint32_t *want) {
    uint32_t *ad = chk_dense(a), *bd = chk_dense(b);
    int64_t ne[GML_MAX_DIMS];
    memcpy(ne, a->ne, sizeof ne);
    ne[axis] += b->ne[axis];
    for (int64_t e = 0; e < ne[0] * ne[1] * ne[2] * ne[3]; e++) {
        int64_t i[GML_MAX_DIMS];
        unflat(ne, e, i);
        if (i[axis] < a->ne[axis]) {
            want[e] = ad[flat(a->ne, i)];
        } else {
            i[axis] -= a->ne[axis];
            want[e] = bd[flat(b->ne, i)];
        }
    }
    free(ad);
    free(bd);
}

struct concat_check {
    gml_tensor *const *outs;
    uint32_t **want;
    int n;
};
static void verify_concat(void *u) {
    struct concat_check *c = u;
    for (int i = 0; i < c->n; i++)
        CHECK_EQUAL(c->outs[i], c->want[i], "concat output %d '%s'", i, c->outs[i]->name);
}

/* One graph per (rank, type): for every dim (written positive, and negative)
 * and a rotation of layout pairs, concat(a, b, dim), all checked at once. */
static void test_concat_dims(gml_type type) {
    chk_case("concat along every dim of 1-D to 4-D %s inputs of every layout pair",
             gml_type_name(type));
    chk_rng r = chk_seed(21 + (uint64_t)type);
    static const int64_t shapes[4][4] = {{7}, {5, 9}, {3, 7, 6}, {2, 3, 5, 11}};
    static const int64_t extra[4] = {3, 1, 4, 2}; /* b's size along dim, by rank */
    for (int n = 1; n <= 4; n++) {
        gml_context *ctx = chk_ctx(8 << 20);
        gml_tensor *outs[64];
        uint32_t *want[64];
        int n_out = 0;
        for (int dim = -n; dim < n; dim++)
            for (int la = 0; la < CHK_N_LAYOUTS; la++) {
                const int lb = (la + 2 + dim + n) % CHK_N_LAYOUTS;
                const int d = dim < 0 ? dim + n : dim;
                int64_t nb_[4];
                memcpy(nb_, shapes[n - 1], sizeof nb_);
                nb_[d] = extra[(d + la) % 4];
                gml_tensor *a = chk_new_input(ctx, type, n, shapes[n - 1], (chk_layout)la, "a", &r, -100, 100);
                gml_tensor *b = chk_new_input(ctx, type, n, nb_, (chk_layout)lb, "b", &r, -100, 100);
                gml_tensor *c = gml_concat(ctx, a, b, dim);
                if (!CHECK(c, "concat(a %s, b %s, %d): %s", chk_layout_name((chk_layout)la),
                           chk_layout_name((chk_layout)lb), dim, gml_last_error(ctx)))
                    continue;
                const int axis = GML_MAX_DIMS - n + d;
                CHECK(c->type == type && c->n_dims == n && gml_is_contiguous(c) &&
                          c->ne[axis] == a->ne[axis] + b->ne[axis],
                      "concat(a, b, %d): shape and type", dim);
                char name[64];
                snprintf(name, sizeof name, "cat(%s, %s, %d)", chk_layout_name((chk_layout)la),
                         chk_layout_name((chk_layout)lb), dim);
                gml_set_name(c, name);
                want[n_out] = malloc((size_t)chk_numel(c) * 4);
                naive_concat(a, b, axis, want[n_out]);
                outs[n_out++] = c;
            }
        gml_graph *g = gml_build_graph(ctx, outs, n_out);
        struct concat_check cc = {outs, want, n_out};
        run_all_isas(g, outs, n_out, verify_concat, &cc);
        gml_graph_free(g);
        for (int i = 0; i < n_out; i++) free(want[i]);
        gml_free(ctx);
    }
}

static void test_concat_views(void) {
    chk_case("concat of slices of one tensor (a rotation), of inputs strided on every dim, of "
             "a tensor with itself, and the MHA add_bias_kv row");
    chk_rng r = chk_seed(31);
    gml_context *ctx = chk_ctx(4 << 20);
    gml_tensor *x = chk_new_input(ctx, GML_F32, 3, (int64_t[]){3, 10, 37}, CHK_CONTIGUOUS, "x", &r, -1, 1);
    /* rotate by 4 along dim 1: x[:, 4:] then x[:, :4] */
    gml_tensor *rot = gml_concat(ctx, gml_slice(ctx, x, 1, 4, 6), gml_slice(ctx, x, 1, 0, 4), 1);
    /* every other element on every dim: no dense dim (a strided loop) */
    gml_tensor *big = chk_new_input(ctx, GML_F32, 3, (int64_t[]){6, 9, 21}, CHK_CONTIGUOUS, "big", &r, -1, 1);
    gml_tensor *even = gml_view(ctx, big, 3, (int64_t[]){3, 5, 11}, (size_t[]){2 * 9 * 21 * 4, 2 * 21 * 4, 8}, 0);
    gml_tensor *odd = gml_view(ctx, big, 3, (int64_t[]){3, 4, 11}, (size_t[]){2 * 9 * 21 * 4, 2 * 21 * 4, 8},
                               (9 * 21 + 21 + 1) * 4);
    gml_tensor *strided = gml_concat(ctx, even, odd, -2);
    gml_tensor *self = gml_concat(ctx, x, x, -1);
    /* k [B, T, E] plus bias_k [1, 1, E] repeated... here a [2, 1, 16] row along T */
    gml_tensor *k = chk_new_input(ctx, GML_F32, 3, (int64_t[]){2, 13, 16}, CHK_SLICED, "k", &r, -1, 1);
    gml_tensor *bias_k = chk_new_input(ctx, GML_F32, 3, (int64_t[]){2, 1, 16}, CHK_CONTIGUOUS, "bias_k", &r, -1, 1);
    gml_tensor *kb = gml_concat(ctx, k, bias_k, 1);
    gml_tensor *idx = chk_new_input(ctx, GML_I32, 2, (int64_t[]){4, 3}, CHK_TRANSPOSED, "idx", &r, -50, 50);
    gml_tensor *ic = gml_concat(ctx, idx, gml_slice(ctx, idx, 0, 1, 2), 0);
    gml_tensor *outs[] = {rot, strided, self, kb, ic};
    if (!CHECK(rot && strided && self && kb && ic, "%s", gml_last_error(ctx))) {
        gml_free(ctx);
        return;
    }
    uint32_t *want[5];
    for (int i = 0; i < 5; i++) {
        want[i] = malloc((size_t)chk_numel(outs[i]) * 4);
        int axis = GML_MAX_DIMS - 1;
        while (outs[i]->ne[axis] == outs[i]->src[0]->ne[axis]) axis--;
        naive_concat(outs[i]->src[0], outs[i]->src[1], axis, want[i]);
    }
    gml_graph *g = gml_build_graph(ctx, outs, 5);
    struct concat_check cc = {outs, want, 5};
    run_all_isas(g, outs, 5, verify_concat, &cc);
    gml_graph_free(g);
    for (int i = 0; i < 5; i++) free(want[i]);
    gml_free(ctx);
}

/* ---- builder errors ------------------------------------------------------------ */

#define EXPECT_ERROR(call, msg)                                                            \
    do {                                                                                   \
        gml_clear_error(ctx);                                                              \
        CHECK((call) == NULL, "%s: refused", #call);                                       \
        CHECK(strcmp(gml_last_error(ctx), msg) == 0, "%s:\n  got  '%s'\n  want '%s'", #call, \
              gml_last_error(ctx), msg);                                                   \
    } while (0)

static void test_errors(void) {
    chk_case("builder errors of slice and concat name the op, the inputs, their shapes and the "
             "value as written");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *x = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, 2, 8, 3), "x");
    EXPECT_ERROR(gml_slice(ctx, x, 1, 5, 4),
                 "slice(x): start 5 + len 4 goes past dim 1 of size 8 in x [2,8,3]");
    EXPECT_ERROR(gml_slice(ctx, x, -2, -3, 4),
                 "slice(x): start -3 + len 4 goes past dim -2 of size 8 in x [2,8,3]");
    EXPECT_ERROR(gml_slice(ctx, x, 3, 0, 1),
                 "slice(x): dim 3 is out of range for a 3-D input x [2,8,3]");
    EXPECT_ERROR(gml_slice(ctx, x, -4, 0, 1),
                 "slice(x): dim -4 is out of range for a 3-D input x [2,8,3]");
    EXPECT_ERROR(gml_slice(ctx, x, 1, 8, 1),
                 "slice(x): start 8 is out of range for dim 1 of size 8 in x [2,8,3] (start is "
                 "in [-8, 8), negative from the end)");
    EXPECT_ERROR(gml_slice(ctx, x, 0, -3, 1),
                 "slice(x): start -3 is out of range for dim 0 of size 2 in x [2,8,3] (start is "
                 "in [-2, 2), negative from the end)");
    EXPECT_ERROR(gml_slice(ctx, x, 2, 1, 0),
                 "slice(x): len 0 along dim 2 of x [2,8,3]; a slice has at least one element");
    EXPECT_ERROR(gml_slice(ctx, x, 2, 1, -1),
                 "slice(x): len -1 along dim 2 of x [2,8,3]; a slice has at least one element");
    CHECK(gml_slice(ctx, NULL, 0, 0, 1) == NULL, "slice(NULL) is NULL");

    gml_tensor *a = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 2, 3), "a");
    gml_tensor *b = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 4, 4), "b");
    gml_tensor *c = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, 1, 2, 3), "c");
    gml_tensor *ia = gml_set_name(gml_new_tensor_2d(ctx, GML_I32, 2, 5), "ia");
    EXPECT_ERROR(gml_concat(ctx, a, b, 0),
                 "concat(a, b): sizes differ in dim 1: a [2,3] and b [4,4]; only dim 0 (the one "
                 "concatenated along) may differ");
    EXPECT_ERROR(gml_concat(ctx, a, b, -1),
                 "concat(a, b): sizes differ in dim 0: a [2,3] and b [4,4]; only dim -1 (the one "
                 "concatenated along) may differ");
    EXPECT_ERROR(gml_concat(ctx, a, c, 0),
                 "concat(a, c): a [2,3] is 2-D, c [1,2,3] is 3-D; the inputs need the same "
                 "number of dims");
    EXPECT_ERROR(gml_concat(ctx, a, ia, 1),
                 "concat(a, ia): types differ: a [2,3] f32 and ia [2,5] i32");
    EXPECT_ERROR(gml_concat(ctx, a, a, 2),
                 "concat(a, a): dim 2 is out of range for 2-D inputs a [2,3] and a [2,3]");
    EXPECT_ERROR(gml_concat(ctx, a, a, -3),
                 "concat(a, a): dim -3 is out of range for 2-D inputs a [2,3] and a [2,3]");
    CHECK(gml_concat(ctx, a, NULL, 0) == NULL && gml_concat(ctx, NULL, a, 0) == NULL,
          "concat with a NULL input is NULL");
    gml_free(ctx);
}

int main(void) {
    test_errors();
    test_slice_layouts();
    test_slice_chained();
    test_slice_consumers();
    test_slice_writes();
    test_slice_planned();
    test_concat_dims(GML_F32);
    test_concat_dims(GML_I32);
    test_concat_views();
    return chk_summary();
}
