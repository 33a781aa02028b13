/* The memory planner: graphs planned with and without reuse compute bitwise
 * what the same graphs compute in an allocating context (gml_mha with masks,
 * its weights an output too; a diamond; several outputs; an output that is a
 * view; an in-place chain; a cpy into a cache), on memory poisoned with NaN;
 * no two tensors alive at once share bytes (liveness worked out here,
 * independently); inputs are never overwritten; the MHA graph of benchmark
 * config C2 plans into at most 60% of its intermediates; 10,000 computes at
 * 1, 2, 3 threads in turn do not grow resident memory (the diamond, planned
 * MHA fused and unfused with masks, a KV-cache decode step); the options, a
 * caller's buffer and GGMLITE_PLAN_NOREUSE work; data arenas and plan buffers
 * of 4 MiB or more start on a 2 MiB (huge page) boundary, and
 * GGMLITE_HUGEPAGES=0 still computes.
 *
 * A plan is its graph's own: it writes no tensor header; graphs over shared
 * tensors (the reproducer: a second graph over the tensors of a freed
 * one; two live graphs sharing intermediates computed alternately) each
 * compute from their own places; re-planning follows an input placed by hand;
 * graphs and their context free in either order.
 *
 * `test_plan quick` skips the resident-memory run (for valgrind), as do
 * the quick mode (check.h; under ASan, whose quarantine holds freed memory
 * anyway) and a run under an emulator. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "check.h"
#include <ggmlite/kv_cache.h>

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Leaf k of a case gets the same values in every build. */
static void fill_leaf(gml_tensor *t, int k) {
    chk_rng r = chk_seed((uint64_t)k + 1);
    if (t->type == GML_I32) chk_fill_int(t, &r, 0, 6); /* valid lengths, Tk = 6 */
    else chk_fill_uniform(t, &r, -1.0f, 1.0f);
}

/* A planned tensor's header keeps data == NULL: its data is the graph's
 * (gml_graph_data). fill_leaf on it fills it there. */
static void fill_in_graph(const gml_graph *g, const gml_tensor *t, int k) {
    gml_tensor placed = *t;
    placed.data = gml_graph_data(g, t);
    fill_leaf(&placed, k);
}

#define MAX_IO 12
struct io {
    gml_tensor *in[MAX_IO], *out[MAX_IO];
    int n_in, n_out;
};

static gml_tensor *input(gml_context *ctx, struct io *io, gml_type type, int n, const int64_t *ne) {
    assert(io->n_in < MAX_IO);
    gml_tensor *t = gml_new_tensor(ctx, type, n, ne);
    io->in[io->n_in++] = t;
    return t;
}
#define F32(ctx, io, ...) \
    input(ctx, io, GML_F32, sizeof((int64_t[]){__VA_ARGS__}) / 8, (int64_t[]){__VA_ARGS__})

/* ---- the graphs ------------------------------------------------------------ */

/* gml_mha on x [2,6,16], 4 heads, causal, valid lengths, output bias; the
 * attention weights are an output too. */
static void g_attention(gml_context *ctx, struct io *io) {
    gml_attn_weights w = {.w_q = F32(ctx, io, 16, 16), .w_k = F32(ctx, io, 16, 16),
                          .w_v = F32(ctx, io, 16, 16), .w_o = F32(ctx, io, 16, 16),
                          .b_o = F32(ctx, io, 16)};
    gml_attn_inputs in = {.query = F32(ctx, io, 2, 6, 16),
                          .valid_lens = input(ctx, io, GML_I32, 1, (int64_t[]){2})};
    gml_attn_result r =
        gml_mha(ctx, (gml_attn_config){.dims.n_heads = 4, .score.causal = GML_CAUSAL_BOTTOM_RIGHT, .graph.want_weights = true}, &w, in);
    io->out[io->n_out++] = r.out;
    io->out[io->n_out++] = r.weights;
}

/* Two paths from x that meet again, twice. */
static void g_diamond(gml_context *ctx, struct io *io) {
    gml_tensor *x = F32(ctx, io, 8, 33);
    gml_tensor *a = gml_scale(ctx, x, 2.0f);
    gml_tensor *b = gml_add(ctx, a, x);
    gml_tensor *c = gml_mul(ctx, a, b);
    gml_tensor *d = gml_scale(ctx, c, 0.5f);
    gml_tensor *e = gml_add(ctx, d, b);
    io->out[io->n_out++] = gml_softmax(ctx, e, NULL, 1.0f, false);
}

/* Outputs in the middle of the graph, one of them read again later. */
static void g_multi(gml_context *ctx, struct io *io) {
    gml_tensor *x = F32(ctx, io, 5, 7, 12), *y = F32(ctx, io, 12, 9);
    gml_tensor *h = gml_scale(ctx, x, 1.5f);
    gml_tensor *y1 = gml_add(ctx, h, x);                 /* output, read by y2 */
    gml_tensor *y2 = gml_softmax(ctx, y1, NULL, 0.3f, true);
    gml_tensor *m = gml_matmul(ctx, y2, y);              /* [5,7,9] */
    gml_tensor *y3 = gml_scale(ctx, m, -1.0f);
    io->out[io->n_out++] = y1;
    io->out[io->n_out++] = y3;
    io->out[io->n_out++] = gml_mul(ctx, y3, m);
}

/* The output is a permuted view of a node. */
static void g_view_out(gml_context *ctx, struct io *io) {
    gml_tensor *a = F32(ctx, io, 3, 10, 6), *b = F32(ctx, io, 6, 4);
    gml_tensor *m = gml_matmul(ctx, gml_scale(ctx, a, 0.5f), b);   /* [3,10,4] */
    gml_tensor *t = gml_permute(ctx, m, (int[]){2, 0, 1});        /* [4,3,10] */
    io->out[io->n_out++] = t;
    /* more work after it, which must not write over m */
    gml_tensor *u = gml_cont(ctx, gml_transpose(ctx, m, 0, 1));   /* [10,3,4] */
    io->out[io->n_out++] = gml_scale(ctx, gml_add(ctx, u, u), 3.0f);
}

/* Elementwise chains that can run in place, and one that must not (t is
 * read again after u). */
static void g_inplace(gml_context *ctx, struct io *io) {
    gml_tensor *x = F32(ctx, io, 4, 9, 17), *bias = F32(ctx, io, 17), *z = F32(ctx, io, 4, 1, 17);
    gml_tensor *a = gml_softmax(ctx, gml_mul(ctx, gml_add(ctx, gml_scale(ctx, x, 3.0f), bias), z),
                                NULL, 1.0f, false);
    gml_tensor *t = gml_scale(ctx, a, 2.0f);
    gml_tensor *u = gml_add(ctx, t, x);
    gml_tensor *w = gml_mul(ctx, t, u);
    io->out[io->n_out++] = gml_add(ctx, w, w);
}

/* cpy into a slice of a cache leaf, then read through it. */
static void g_cache(gml_context *ctx, struct io *io) {
    gml_tensor *cache = F32(ctx, io, 2, 8, 5), *k = F32(ctx, io, 2, 3, 5);
    gml_tensor *slot = gml_view(ctx, cache, 3, (int64_t[]){2, 3, 5},
                                (size_t[]){cache->nb[1], cache->nb[2], cache->nb[3]},
                                4 * cache->nb[2]);
    gml_tensor *done = gml_cpy(ctx, gml_scale(ctx, k, 2.0f), slot);
    io->out[io->n_out++] = done;
    io->out[io->n_out++] = gml_softmax(ctx, gml_scale(ctx, cache, 1.0f), NULL, 1.0f, false);
}

/* rms_norm and layer_norm run in place on the add before them; sum, mean
 * and max (a transposed one, with scratch) read the norms. */
static void g_norms(gml_context *ctx, struct io *io) {
    gml_tensor *x = F32(ctx, io, 3, 7, 33), *bias = F32(ctx, io, 33), *w = F32(ctx, io, 33);
    gml_tensor *h = gml_rms_norm(ctx, gml_add(ctx, x, bias), w, 1e-6f);
    gml_tensor *l = gml_layer_norm(ctx, gml_scale(ctx, h, 2.0f), NULL, bias, 1e-5f);
    io->out[io->n_out++] = gml_add(ctx, gml_sum(ctx, l), gml_mean(ctx, h));
    io->out[io->n_out++] = gml_max(ctx, gml_transpose(ctx, l, 1, 2));
}

/* ---- checks ------------------------------------------------------------------ */

/* Liveness from the graph alone: node i's storage is alive from i to the
 * last node that reads it or a view of it; outputs (or views of outputs)
 * and leafs to the end. */
static gml_tensor *root(gml_tensor *t) { return t->view_src ? t->view_src : t; }

static void check_no_overlap(gml_graph *g, const char *what) {
    const int n = gml_graph_n_nodes(g);
    int *last = calloc((size_t)n, sizeof *last);
    for (int i = 0; i < n; i++) last[i] = i;
    for (int j = 0; j < n; j++) {
        gml_tensor *t = gml_graph_node(g, j);
        gml_tensor *users[GML_MAX_SRC + 1] = {t};
        for (int s = 0; s < GML_MAX_SRC; s++) users[s + 1] = t->src[s];
        for (int s = 0; s <= GML_MAX_SRC; s++) {
            if (!users[s]) continue;
            int i = gml_graph_find(g, root(users[s]));
            if (i >= 0 && last[i] < j) last[i] = j;
            if (i >= 0 && gml_graph_tensor(g, users[s])->flags & GML_FLAG_OUTPUT) last[i] = n;
        }
    }
    for (int a = 0; a < n; a++) {
        gml_tensor *ta = gml_graph_node(g, a);
        if (gml_is_view(ta)) continue;
        for (int b = a + 1; b < n; b++) {
            gml_tensor *tb = gml_graph_node(g, b);
            if (gml_is_view(tb) || last[a] < b) continue; /* a is dead when b is made */
            const char *a0 = gml_graph_data(g, ta), *a1 = a0 + gml_nbytes(ta);
            const char *b0 = gml_graph_data(g, tb), *b1 = b0 + gml_nbytes(tb);
            if (a1 <= b0 || b1 <= a0) continue;
            /* allowed: b written over its first source a, at a's last use */
            bool inplace = last[a] == b && tb->src[0] && root(tb->src[0]) == ta && a0 == b0 &&
                           (tb->op == GML_OP_ADD || tb->op == GML_OP_MUL ||
                            tb->op == GML_OP_SCALE || tb->op == GML_OP_SOFTMAX ||
                            tb->op == GML_OP_RMS_NORM || tb->op == GML_OP_LAYER_NORM);
            CHECK(inplace, "%s: '%s' (alive to node %d) and node %d '%s' share bytes", what,
                  ta->name, last[a], b, tb->name);
        }
    }
    for (int l = 0; l < gml_graph_n_leafs(g); l++) { /* placed leafs: nobody's */
        gml_tensor *tl = gml_graph_leaf(g, l);
        const char *l0 = gml_graph_data(g, tl), *l1 = l0 + gml_nbytes(tl);
        for (int b = 0; b < n; b++) {
            gml_tensor *tb = gml_graph_node(g, b);
            if (gml_is_view(tb)) continue;
            const char *b0 = gml_graph_data(g, tb), *b1 = b0 + gml_nbytes(tb);
            CHECK(l1 <= b0 || b1 <= l0, "%s: leaf '%s' and node '%s' share bytes", what, tl->name,
                  tb->name);
        }
    }
    free(last);
}

static void poison_nodes(gml_graph *g) {
    for (int i = 0; i < gml_graph_n_nodes(g); i++) {
        gml_tensor *t = gml_graph_node(g, i);
        if (!gml_is_view(t)) chk_poison_bytes(gml_graph_data(g, t), gml_nbytes(t));
    }
}

typedef void (*builder)(gml_context *ctx, struct io *io);

struct built {
    gml_context *ctx;
    gml_graph *g;
    struct io io;
};

static struct built build(builder fn, bool no_alloc) {
    struct built b = {.ctx = gml_init((gml_init_params){.mem_size = 4 << 20, .no_alloc = no_alloc})};
    fn(b.ctx, &b.io);
    for (int i = 0; i < b.io.n_out; i++)
        if (!b.io.out[i]) {
            fprintf(stderr, "building failed: %s\n", gml_last_error(b.ctx));
            exit(1);
        }
    for (int i = 0; i < b.io.n_in; i++) gml_set_flags(b.io.in[i], GML_FLAG_INPUT);
    b.g = gml_build_graph(b.ctx, b.io.out, b.io.n_out);
    if (!no_alloc)
        for (int i = 0; i < b.io.n_in; i++) fill_leaf(b.io.in[i], i);
    return b;
}

static void drop(struct built *b) {
    gml_graph_free(b->g);
    gml_free(b->ctx);
}

/* Plans p with opt, fills its inputs, poisons the rest, computes on nth
 * threads and compares with ref; inputs must come out unchanged. */
static void plan_and_compare(const char *name, struct built *ref, struct built *p,
                             const gml_plan_options *opt, const char *mode, int nth) {
    char what[128];
    snprintf(what, sizeof what, "%s (%s, %d threads)", name, mode, nth);
    gml_status st = gml_graph_plan(p->g, opt);
    CHECK(st == GML_OK, "%s: plan: %s", what, gml_graph_error(p->g));
    if (st != GML_OK) return;
    size_t peak = gml_graph_plan_peak(p->g), naive = gml_graph_plan_naive(p->g);
    CHECK(peak <= naive && peak > 0 && peak % 64 == 0, "%s: peak %zu, naive %zu", what, peak, naive);
    if (opt->no_reuse) CHECK(peak == naive, "%s: no reuse, yet peak %zu < naive %zu", what, peak, naive);
    /* The plan is the graph's: it writes no header. */
    int placed_headers = 0;
    for (int i = 0; i < gml_graph_n_nodes(p->g); i++) placed_headers += !!gml_graph_node(p->g, i)->data;
    CHECK(placed_headers == 0, "%s: the plan wrote data into %d node headers", what, placed_headers);
    poison_nodes(p->g);
    for (int i = 0; i < p->io.n_in; i++) fill_in_graph(p->g, p->io.in[i], i);
    check_no_overlap(p->g, what);
    st = gml_graph_compute(p->g, nth);
    CHECK(st == GML_OK, "%s: %s", what, gml_graph_error(p->g));
    for (int i = 0; i < p->io.n_out; i++) {
        float *want = chk_dense(ref->io.out[i]);
        CHECK_EQUAL(gml_graph_tensor(p->g, p->io.out[i]), want, "%s: output %d", what, i);
        free(want);
    }
    for (int i = 0; i < p->io.n_in; i++) {
        gml_tensor *in = p->io.in[i];
        CHECK(memcmp(gml_graph_data(p->g, in), ref->io.in[i]->data, gml_nbytes(in)) == 0 ||
                  in == root(p->io.out[0]) /* the cache is written on purpose */,
              "%s: input %d was overwritten", what, i);
    }
    printf("  %-10s %-10s peak %7zu of %7zu bytes (%3.0f%%)\n", name, mode, peak, naive,
           100.0 * (double)peak / (double)naive);
}

static void test_graphs(void) {
    static const struct {
        const char *name;
        builder fn;
    } cases[] = {{"attention", g_attention}, {"diamond", g_diamond}, {"multi", g_multi},
                 {"view_out", g_view_out},   {"inplace", g_inplace}, {"cache", g_cache},
                 {"norms", g_norms}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        struct built ref = build(cases[c].fn, false);
        CHECK(gml_graph_compute(ref.g, 1) == GML_OK, "%s: %s", cases[c].name, gml_graph_error(ref.g));
        struct built p = build(cases[c].fn, true);
        const char *name = cases[c].name;
        plan_and_compare(name, &ref, &p, &(gml_plan_options){.no_reuse = true}, "no reuse", 2);
        plan_and_compare(name, &ref, &p, &(gml_plan_options){.no_inplace = true}, "no inplace", 3);
        plan_and_compare(name, &ref, &p, &(gml_plan_options){0}, "reuse", 3);
        plan_and_compare(name, &ref, &p, &(gml_plan_options){0}, "reuse", 1);
        drop(&p);
        drop(&ref);
    }
}

/* ---- options, caller buffers, errors ------------------------------------------ */

static void test_options(void) {
    struct built ref = build(g_attention, false);
    gml_graph_compute(ref.g, 1);
    struct built p = build(g_attention, true);

    CHECK(gml_graph_plan_peak(p.g) == 0, "peak before planning");
    CHECK(gml_graph_compute(p.g, 2) == GML_ERR_INVALID && strstr(gml_graph_error(p.g), "no data"),
          "unplanned: '%s'", gml_graph_error(p.g));

    /* measure only: sizes, no data */
    CHECK(gml_graph_plan(p.g, &(gml_plan_options){.measure_only = true}) == GML_OK, "measure");
    size_t peak = gml_graph_plan_peak(p.g);
    CHECK(peak > 0 && gml_graph_data(p.g, gml_graph_node(p.g, -1)) == NULL, "measure placed data");

    /* into a caller buffer of exactly that size */
    char *buf = aligned_alloc(64, peak);
    gml_plan_options opt = {.buffer = buf, .buffer_size = peak};
    plan_and_compare("attention", &ref, &p, &opt, "caller buf", 2);
    for (int i = 0; i < gml_graph_n_nodes(p.g); i++) {
        const char *d = gml_graph_data(p.g, gml_graph_node(p.g, i));
        CHECK(d >= buf && d < buf + peak, "node %d outside the caller's buffer", i);
    }
    opt.buffer_size = peak - 64;
    CHECK(gml_graph_plan(p.g, &opt) == GML_ERR_NOMEM && strstr(gml_graph_error(p.g), "needs"),
          "small buffer: '%s'", gml_graph_error(p.g));
    CHECK(gml_graph_data(p.g, gml_graph_node(p.g, -1)) == NULL &&
              gml_graph_tensor(p.g, gml_graph_node(p.g, -1))->data == NULL,
          "a failed plan left data behind");
    opt = (gml_plan_options){.buffer = buf + 4, .buffer_size = peak};
    CHECK(gml_graph_plan(p.g, &opt) == GML_ERR_INVALID && strstr(gml_graph_error(p.g), "aligned"),
          "misaligned: '%s'", gml_graph_error(p.g));
    free(buf);

    /* the environment variable forces no reuse */
    setenv("GGMLITE_PLAN_NOREUSE", "1", 1);
    CHECK(gml_graph_plan(p.g, NULL) == GML_OK, "env plan");
    CHECK(gml_graph_plan_peak(p.g) == gml_graph_plan_naive(p.g), "GGMLITE_PLAN_NOREUSE=1: "
          "peak %zu, naive %zu", gml_graph_plan_peak(p.g), gml_graph_plan_naive(p.g));
    unsetenv("GGMLITE_PLAN_NOREUSE");
    CHECK(gml_graph_plan(p.g, NULL) == GML_OK, "plan");
    CHECK(gml_graph_plan_peak(p.g) < gml_graph_plan_naive(p.g), "reuse saves nothing");
    drop(&p);
    drop(&ref);

    /* a view whose storage the graph does not reach (made by hand) */
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 16, .no_alloc = true});
    gml_tensor *a = gml_set_name(gml_new_tensor_1d(ctx, GML_F32, 8), "a");
    gml_tensor *v = gml_reshape(ctx, a, 2, (int64_t[]){2, 4});
    v->src[0] = gml_new_tensor_1d(ctx, GML_F32, 8);
    gml_tensor *y = gml_scale(ctx, v, 2.0f);
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    CHECK(gml_graph_plan(g, NULL) == GML_ERR_INVALID && strstr(gml_graph_error(g), "'a'"),
          "foreign view: '%s'", gml_graph_error(g));
    gml_graph_free(g);
    gml_free(ctx);
}

/* ---- data placed by hand ---------------------------------------------------------- */

/* y = cont(transpose(x)) built without data; the user then gives x a buffer
 * of their own, before planning or after it. The view between them must
 * read that buffer: y is x's transpose, computed here by plain loops. */
static void test_placed_by_hand(void) {
    float xs[12], want[12];
    for (int e = 0; e < 12; e++) xs[e] = (float)(e * e) - 7.5f;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) want[i * 3 + j] = xs[j * 4 + i]; /* want[i][j] = x[j][i] */
    for (int after_plan = 0; after_plan < 2; after_plan++) {
        chk_case("x's data placed by hand %s planning", after_plan ? "after" : "before");
        gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 16, .no_alloc = true});
        gml_tensor *x = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 3, 4), "x");
        gml_tensor *y = gml_cont(ctx, gml_transpose(ctx, x, 0, 1)); /* [4, 3] */
        gml_graph *g = gml_build_graph(ctx, &y, 1);
        if (!CHECK(g, "build: %s", gml_last_error(ctx))) continue;
        float *mine = aligned_alloc(64, 64);
        memcpy(mine, xs, sizeof xs);
        if (!after_plan) x->data = mine;
        CHECK(gml_graph_plan(g, NULL) == GML_OK, "plan: %s", gml_graph_error(g));
        if (after_plan) x->data = mine;
        gml_status st = gml_graph_compute(g, 2);
        CHECK(st == GML_OK, "compute: status %d (%s)", (int)st, gml_graph_error(g));
        if (st == GML_OK) CHECK_EQUAL(gml_graph_tensor(g, y), want, "cont(transpose(x)) vs the loops");
        gml_graph_free(g);
        gml_free(ctx);
        free(mine);
    }
}

/* ---- the plan belongs to its graph ------------------------------------------------ */

/* The reproducer: h = scale(a, 2), y = add(h, a) in a no_alloc
 * context; graph 1 planned, computed and freed; graph 2 over the same y
 * planned and computed must give 3 for a = 1 (it gave -0, reading graph 1's
 * freed buffer, when plans wrote the shared headers). */
static void test_second_graph_over_same_tensors(void) {
    chk_case("a second graph over the tensors of a freed one");
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 16, .no_alloc = true});
    gml_tensor *a = gml_set_name(gml_new_tensor_1d(ctx, GML_F32, 4), "a");
    gml_set_flags(a, GML_FLAG_INPUT);
    gml_tensor *h = gml_scale(ctx, a, 2.0f);
    gml_tensor *y = gml_add(ctx, h, a);
    for (int round = 0; round < 2; round++) {
        gml_graph *g = gml_build_graph(ctx, &y, 1);
        if (!CHECK(g, "build %d: %s", round, gml_last_error(ctx))) break;
        CHECK(gml_graph_plan(g, NULL) == GML_OK, "plan %d: %s", round, gml_graph_error(g));
        float *in = gml_graph_data(g, a), *out = gml_graph_data(g, y);
        if (!CHECK(in && out, "round %d: a and y have no place in the graph", round)) break;
        for (int i = 0; i < 4; i++) in[i] = 1.0f + (float)i;
        gml_status st = gml_graph_compute(g, 2);
        CHECK(st == GML_OK, "compute %d: %s", round, gml_graph_error(g));
        for (int i = 0; i < 4; i++) {
            const float want = 3.0f * (1.0f + (float)i);
            CHECK(out[i] == want, "round %d: y[%d] = %g, want %g", round, i, (double)out[i],
                  (double)want);
            CHECK(gml_get_f32(gml_graph_tensor(g, y), (int64_t[]){i}) == want,
                  "round %d: y[%d] through the graph's copy", round, i);
        }
        CHECK(!a->data && !h->data && !y->data, "round %d: the plan wrote a header", round);
        gml_graph_free(g);
        CHECK(!a->data && !h->data && !y->data, "round %d: freeing wrote a header", round);
    }
    gml_free(ctx);
}

/* Outputs are the graph's: y = scale(a, 2), the output of graph 1, is an
 * intermediate of graph 2 (z = scale(y, 3)), whose plan runs z in place
 * over y (it kept y, as graph 1's output marked on its header, before);
 * y marked by hand (GML_FLAG_OUTPUT on the header) stays kept in every
 * graph. Both graphs alive, each computed at several thread counts. */
static void test_outputs_per_graph(void) {
    chk_case("a graph's outputs are kept by that graph only");
    for (int by_hand = 0; by_hand < 2; by_hand++) {
        gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 16, .no_alloc = true});
        gml_tensor *a = gml_set_name(gml_new_tensor_1d(ctx, GML_F32, 5), "a");
        gml_set_flags(a, GML_FLAG_INPUT);
        gml_tensor *y = gml_set_name(gml_scale(ctx, a, 2.0f), "y");
        gml_tensor *z = gml_set_name(gml_scale(ctx, y, 3.0f), "z");
        if (by_hand) gml_set_flags(y, GML_FLAG_OUTPUT);
        gml_graph *g1 = gml_build_graph(ctx, &y, 1), *g2 = gml_build_graph(ctx, &z, 1);
        if (!CHECK(g1 && g2, "build: %s", gml_last_error(ctx))) break;
        CHECK(gml_graph_plan(g1, NULL) == GML_OK && gml_graph_plan(g2, NULL) == GML_OK, "plan: %s %s",
              gml_graph_error(g1), gml_graph_error(g2));
        CHECK((y->flags & GML_FLAG_OUTPUT) == (by_hand ? GML_FLAG_OUTPUT : 0) &&
                  !(z->flags & GML_FLAG_OUTPUT),
              "by hand %d: building marked a header (y flags %d, z flags %d)", by_hand, y->flags,
              z->flags);
        CHECK(gml_graph_tensor(g1, y)->flags & GML_FLAG_OUTPUT, "y is graph 1's output");
        CHECK(gml_graph_tensor(g2, z)->flags & GML_FLAG_OUTPUT, "z is graph 2's output");
        CHECK(!(gml_graph_tensor(g2, y)->flags & GML_FLAG_OUTPUT) == !by_hand,
              "by hand %d: y's flags in graph 2: %d", by_hand, gml_graph_tensor(g2, y)->flags);
        const bool shared = gml_graph_data(g2, y) == gml_graph_data(g2, z);
        CHECK(shared == !by_hand, "by hand %d: z %s y's bytes in graph 2", by_hand,
              shared ? "took" : "did not take");
        const int threads[] = {1, 2, 3, 4, 7};
        for (int k = 0; k < 5; k++) {
            float *in1 = gml_graph_data(g1, a), *in2 = gml_graph_data(g2, a);
            if (!CHECK(in1 && in2, "a has no place")) break;
            for (int i = 0; i < 5; i++) in1[i] = in2[i] = (float)(i - 2) + 0.25f * (float)k;
            CHECK(gml_graph_compute(g2, threads[k]) == GML_OK &&
                      gml_graph_compute(g1, threads[k]) == GML_OK,
                  "compute at %d threads: %s %s", threads[k], gml_graph_error(g1),
                  gml_graph_error(g2));
            for (int i = 0; i < 5; i++) {
                const float x = (float)(i - 2) + 0.25f * (float)k;
                const float *o1 = gml_graph_data(g1, y), *o2 = gml_graph_data(g2, z);
                CHECK(o1[i] == x * 2.0f && o2[i] == x * 2.0f * 3.0f,
                      "%d threads: y[%d] = %g (want %g), z[%d] = %g (want %g)", threads[k], i,
                      (double)o1[i], (double)(x * 2.0f), i, (double)o2[i], (double)(x * 6.0f));
            }
        }
        gml_graph_free(g1);
        gml_graph_free(g2);
        gml_free(ctx);
    }
}

/* Inputs [6, 10] shared by two graphs, with shared intermediates (one of them
 * a view) and a by hand (the same buffer for both), b planned (each graph its
 * own place): y1 = (scale(a, 2) * b)^T cont + b^T, y2 = softmax(t + scale(a,2)). */
struct shared_io {
    gml_tensor *a, *b, *y1, *y2;
};

static struct shared_io shared_build(gml_context *ctx) {
    struct shared_io s;
    s.a = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 6, 10), "a");
    s.b = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 6, 10), "b");
    gml_set_flags(s.a, GML_FLAG_INPUT);
    gml_set_flags(s.b, GML_FLAG_INPUT);
    gml_tensor *h = gml_scale(ctx, s.a, 2.0f);                    /* shared */
    gml_tensor *m = gml_mul(ctx, h, s.b);                         /* shared */
    gml_tensor *mt = gml_cont(ctx, gml_transpose(ctx, m, 0, 1));  /* shared, through a view */
    gml_tensor *bt = gml_transpose(ctx, s.b, 0, 1);
    s.y1 = gml_add(ctx, mt, bt);
    s.y2 = gml_softmax(ctx, gml_add(ctx, m, h), NULL, 1.0f, false);
    return s;
}

/* Input values of variant k. */
static void shared_fill(float *a, float *b, int k) {
    for (int i = 0; i < 60; i++) {
        a[i] = (float)((i * 7 + k * 13) % 17) / 8.0f - 1.0f;
        b[i] = (float)((i * 5 + k * 3) % 11) / 5.0f - 1.0f;
    }
}

static void test_two_live_graphs(void) {
    chk_case("two live graphs sharing intermediates, computed alternately");
    enum { VARIANTS = 3 };
    float want1[VARIANTS][60], want2[VARIANTS][60];
    for (int k = 0; k < VARIANTS; k++) { /* each from a fresh single graph, allocating */
        gml_context *ref = gml_init((gml_init_params){.mem_size = 1 << 20});
        struct shared_io r = shared_build(ref);
        shared_fill(r.a->data, r.b->data, k);
        gml_tensor *outs[2] = {r.y1, r.y2};
        gml_graph *g = gml_build_graph(ref, outs, 2);
        CHECK(g && gml_graph_compute(g, 1) == GML_OK, "reference %d", k);
        memcpy(want1[k], r.y1->data, sizeof want1[k]);
        memcpy(want2[k], r.y2->data, sizeof want2[k]);
        gml_graph_free(g);
        gml_free(ref);
    }
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true});
    struct shared_io s = shared_build(ctx);
    float *a = aligned_alloc(64, 256), b_dummy[60];
    s.a->data = a; /* by hand: both graphs read this buffer */
    gml_graph *g1 = gml_build_graph(ctx, &s.y1, 1), *g2 = gml_build_graph(ctx, &s.y2, 1);
    if (!CHECK(g1 && g2, "build: %s", gml_last_error(ctx))) return;
    CHECK(gml_graph_plan(g1, NULL) == GML_OK && gml_graph_plan(g2, NULL) == GML_OK, "plan");
    CHECK(gml_graph_data(g1, s.a) == a && gml_graph_data(g2, s.a) == a, "a by hand in both");
    CHECK(gml_graph_data(g1, s.b) != gml_graph_data(g2, s.b), "b: one place per graph");
    CHECK(gml_graph_data(g1, s.y2) == NULL && gml_graph_data(g2, s.y1) == NULL,
          "a tensor outside the graph has no data in it");
    /* the shared intermediates: placed in each graph, apart */
    const gml_tensor *m = s.y2->src[0]->src[0];
    CHECK(gml_graph_data(g1, m) && gml_graph_data(g2, m) &&
              gml_graph_data(g1, m) != gml_graph_data(g2, m),
          "the shared intermediate m has two places");
    int bad1 = 0, bad2 = 0;
    for (int it = 0; it < 100; it++) {
        const int k = it % VARIANTS, nth = 1 + it % 3;
        shared_fill(a, gml_graph_data(g1, s.b), k);
        shared_fill(b_dummy, gml_graph_data(g2, s.b), k);
        /* in either order, each recomputing from its own places */
        gml_graph *first = it % 2 ? g2 : g1, *second = it % 2 ? g1 : g2;
        CHECK(gml_graph_compute(first, nth) == GML_OK, "compute: %s", gml_graph_error(first));
        CHECK(gml_graph_compute(second, nth) == GML_OK, "compute: %s", gml_graph_error(second));
        bad1 += memcmp(gml_graph_data(g1, s.y1), want1[k], sizeof want1[k]) != 0;
        bad2 += memcmp(gml_graph_data(g2, s.y2), want2[k], sizeof want2[k]) != 0;
        if (it == 50) { /* re-plan one while the other lives on */
            CHECK(gml_graph_plan(g1, &(gml_plan_options){.no_inplace = true}) == GML_OK, "re-plan");
        }
    }
    CHECK(bad1 == 0 && bad2 == 0, "of 100 alternate computes, y1 differed %d times, y2 %d", bad1,
          bad2);
    CHECK(!s.b->data && !m->data && !s.y1->data && !s.y2->data, "a plan wrote a header");
    gml_graph_free(g2); /* freed in the other order than built */
    gml_graph_free(g1);
    gml_free(ctx);
    free(a);
}

/* The plan decides from the headers at plan time; a header with data at
 * compute wins; re-planning follows the headers. y = cont(x^T) * 2. */
static void test_replan_after_placement(void) {
    chk_case("re-plan after changing an input's placement");
    float xs[12], want[12], mine_want[12];
    for (int e = 0; e < 12; e++) xs[e] = (float)e - 3.0f;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) {
            want[i * 3 + j] = 2.0f * xs[j * 4 + i];
            mine_want[i * 3 + j] = 2.0f * (10.0f * xs[j * 4 + i]);
        }
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 16, .no_alloc = true});
    gml_tensor *x = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 3, 4), "x");
    gml_set_flags(x, GML_FLAG_INPUT);
    gml_tensor *y = gml_scale(ctx, gml_cont(ctx, gml_transpose(ctx, x, 0, 1)), 2.0f);
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    if (!CHECK(g, "build: %s", gml_last_error(ctx))) return;
    CHECK(gml_graph_plan(g, NULL) == GML_OK, "plan: %s", gml_graph_error(g));
    const size_t peak_placed = gml_graph_plan_peak(g);
    float *planned_x = gml_graph_data(g, x);
    memcpy(planned_x, xs, sizeof xs);
    CHECK(gml_graph_compute(g, 2) == GML_OK, "compute: %s", gml_graph_error(g));
    CHECK_EQUAL(gml_graph_tensor(g, y), want, "x planned");

    float *mine = aligned_alloc(64, 64);
    for (int e = 0; e < 12; e++) mine[e] = 10.0f * xs[e];
    x->data = mine; /* by hand after planning: wins at the next compute */
    CHECK(gml_graph_data(g, x) == mine, "gml_graph_data follows the header");
    CHECK(gml_graph_compute(g, 2) == GML_OK, "compute: %s", gml_graph_error(g));
    CHECK_EQUAL(gml_graph_tensor(g, y), mine_want, "x by hand, same plan");
    CHECK(gml_graph_plan(g, NULL) == GML_OK, "re-plan: %s", gml_graph_error(g));
    CHECK(gml_graph_plan_peak(g) < peak_placed, "re-planned with x by hand: peak %zu, was %zu",
          gml_graph_plan_peak(g), peak_placed);
    CHECK(gml_graph_compute(g, 3) == GML_OK, "compute: %s", gml_graph_error(g));
    CHECK_EQUAL(gml_graph_tensor(g, y), mine_want, "x by hand, re-planned");

    x->data = NULL; /* taken away: this plan has no place for x */
    CHECK(gml_graph_data(g, x) == NULL, "x has no data now");
    CHECK(gml_graph_compute(g, 1) == GML_ERR_INVALID && strstr(gml_graph_error(g), "'x"),
          "compute without x's data: '%s'", gml_graph_error(g));
    CHECK(gml_graph_plan(g, NULL) == GML_OK && gml_graph_plan_peak(g) == peak_placed,
          "re-planned: x placed again");
    memcpy(gml_graph_data(g, x), xs, sizeof xs);
    CHECK(gml_graph_compute(g, 2) == GML_OK, "compute: %s", gml_graph_error(g));
    CHECK_EQUAL(gml_graph_tensor(g, y), want, "x planned again");
    gml_graph_free(g);
    gml_free(ctx);
    free(mine);
}

/* Graph then context, and context then graph (the header: the graph touches
 * no tensor then), with two planned, computed graphs over shared tensors. */
static void test_free_order(void) {
    for (int ctx_first = 0; ctx_first < 2; ctx_first++) {
        chk_case("free %s", ctx_first ? "the context, then the graphs" : "the graphs, then the context");
        gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true});
        struct shared_io s = shared_build(ctx);
        gml_graph *g1 = gml_build_graph(ctx, &s.y1, 1), *g2 = gml_build_graph(ctx, &s.y2, 1);
        if (!CHECK(g1 && g2, "build: %s", gml_last_error(ctx))) return;
        gml_graph *gs[2] = {g1, g2};
        for (int k = 0; k < 2; k++) {
            CHECK(gml_graph_plan(gs[k], NULL) == GML_OK, "plan: %s", gml_graph_error(gs[k]));
            shared_fill(gml_graph_data(gs[k], s.a), gml_graph_data(gs[k], s.b), 0);
            CHECK(gml_graph_compute(gs[k], 2) == GML_OK, "compute: %s", gml_graph_error(gs[k]));
        }
        if (ctx_first) gml_free(ctx);
        gml_graph_free(g1);
        gml_graph_free(g2);
        if (!ctx_first) gml_free(ctx);
    }
}

/* ---- MHA at benchmark config C2 ------------------------------------------------- */

/* gml_mha as the benchmark's C2 builds it: B=4, T=256, D=512, H=8,
 * self-attention, no bias, no mask, the output alone, through the unfused
 * graph (the planner must reuse its [B, H, T, T] scores' memory) and the
 * fused one (no scores: a smaller peak still). The weights and x have data
 * (their own context); the nodes are planned. */
static void test_c2_peak(void) {
    const int64_t B = 4, T = 256, D = 512;
    gml_context *data = gml_init((gml_init_params){.mem_size = (B * T * D + 4 * D * D) * 4 + (1 << 20)});
    gml_attn_weights w = {0};
    gml_tensor **ws[] = {&w.w_q, &w.w_k, &w.w_v, &w.w_o};
    for (int i = 0; i < 4; i++) *ws[i] = gml_new_tensor_2d(data, GML_F32, D, D);
    gml_attn_inputs in = {.query = gml_new_tensor_3d(data, GML_F32, B, T, D)};
    size_t peaks[2] = {0, 0};
    for (int fused = 0; fused < 2; fused++) {
        gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true});
        const gml_attn_config cfg = {.dims.n_heads = 8,
                                     .graph.impl = fused ? GML_ATTN_FUSED : GML_ATTN_UNFUSED};
        gml_tensor *y = gml_mha(ctx, cfg, &w, in).out;
        gml_graph *g = y ? gml_build_graph(ctx, &y, 1) : NULL;
        CHECK(g && gml_graph_plan(g, &(gml_plan_options){.measure_only = true}) == GML_OK,
              "plan C2");
        size_t peak = peaks[fused] = gml_graph_plan_peak(g), naive = gml_graph_plan_naive(g);
        printf("MHA C2 (B=4 T=256 D=512 H=8), %s: planned peak %.2f MiB, all intermediates "
               "%.2f MiB (%.1f%%)\n", fused ? "fused" : "unfused", peak / 1048576.0,
               naive / 1048576.0, 100.0 * (double)peak / (double)naive);
        if (!fused)
            CHECK((double)peak <= 0.6 * (double)naive, "C2 peak %zu > 60%% of %zu", peak, naive);
        gml_graph_free(g);
        gml_free(ctx);
    }
    CHECK(peaks[1] < peaks[0], "fused C2 peak %zu, unfused %zu", peaks[1], peaks[0]);
    gml_free(data);
}

/* The unfused graph's attention weights [B, H, T, T]: not asked for
 * (want_weights false, .weights NULL) they are an intermediate whose memory
 * the planner reuses; asked for (an output) they stay. Two unfused blocks in
 * a row, the first one's weights wanted or not: the second block's scores
 * reuse the first one's weights, so not wanting them saves at least their
 * bytes at the peak. */
static void test_unfused_weights_reused(void) {
    const int64_t B = 2, T = 48, D = 32;
    gml_context *data = gml_init((gml_init_params){.mem_size = (B * T * D + 4 * D * D) * 4 + (1 << 16)});
    gml_attn_weights w = {0};
    gml_tensor **ws[] = {&w.w_q, &w.w_k, &w.w_v, &w.w_o};
    for (int i = 0; i < 4; i++) *ws[i] = gml_new_tensor_2d(data, GML_F32, D, D);
    gml_attn_inputs in = {.query = gml_new_tensor_3d(data, GML_F32, B, T, D)};
    size_t peak[2] = {0, 0}, attn_bytes = 0;
    for (int want = 0; want < 2; want++) {
        gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true});
        const gml_attn_config cfg = {.dims.n_heads = 4,
                                     .graph = {.impl = GML_ATTN_UNFUSED, .want_weights = want}};
        gml_attn_result r1 = gml_mha(ctx, cfg, &w, in);
        gml_tensor *attn = gml_get_tensor(ctx, "attn"); /* the softmax node, either way */
        CHECK(r1.out && attn && (r1.weights == (want ? attn : NULL)),
              "unfused mha, want_weights %d: weights %p, 'attn' %p: %s", want, (void *)r1.weights,
              (void *)attn, gml_last_error(ctx));
        const gml_attn_config second = {.dims.n_heads = 4, .graph.impl = GML_ATTN_UNFUSED};
        gml_attn_result r2 = gml_mha(ctx, second, &w, (gml_attn_inputs){.query = r1.out});
        CHECK(r2.out && !r2.weights, "the second block: %s", gml_last_error(ctx));
        gml_graph *g = r2.out ? gml_build_graph(ctx, (gml_tensor *[]){r2.out, r1.weights}, want ? 2 : 1)
                              : NULL;
        CHECK(g && gml_graph_plan(g, &(gml_plan_options){.measure_only = true}) == GML_OK,
              "plan two unfused mha blocks (want_weights %d)", want);
        if (g) peak[want] = gml_graph_plan_peak(g);
        if (attn) attn_bytes = gml_nbytes(attn);
        if (g) gml_graph_free(g);
        gml_free(ctx);
    }
    printf("two unfused MHA blocks (B=2 T=48 D=32 H=4): planned peak %zu bytes, %zu with the first "
           "block's weights [2,4,48,48] (%zu bytes) an output\n", peak[0], peak[1], attn_bytes);
    CHECK(peak[0] > 0 && peak[0] + attn_bytes <= peak[1],
          "weights not wanted: peak %zu, wanted: %zu; expected a saving of >= %zu", peak[0], peak[1],
          attn_bytes);
    gml_free(data);
}

/* ---- the cases run 10,000 times -------------------------------------------------- */

#define RSS_T 16 /* B=2 T=16 D=64 H=4: 10,000 runs in about a second */

/* gml_mha on x [2,16,64], 4 heads, causal, per-batch valid lengths, biases:
 * the fused graph (flash_attn and its scratch) or the unfused one (its
 * weights an output too). */
static void g_mha(gml_context *ctx, struct io *io, gml_attn_impl impl) {
    gml_attn_weights w = {.w_q = F32(ctx, io, 64, 64), .b_q = F32(ctx, io, 64),
                          .w_k = F32(ctx, io, 64, 64), .b_k = F32(ctx, io, 64),
                          .w_v = F32(ctx, io, 64, 64), .b_v = F32(ctx, io, 64),
                          .w_o = F32(ctx, io, 64, 64), .b_o = F32(ctx, io, 64)};
    gml_attn_inputs in = {.query = F32(ctx, io, 2, RSS_T, 64),
                          .valid_lens = input(ctx, io, GML_I32, 1, (int64_t[]){2})};
    gml_attn_result r = gml_mha(ctx, (gml_attn_config){.dims.n_heads = 4, .score.causal = GML_CAUSAL_BOTTOM_RIGHT,
                                                  .graph = {.impl = impl, .want_weights = impl == GML_ATTN_UNFUSED}},
                                &w, in);
    io->out[io->n_out++] = r.out;
    if (impl == GML_ATTN_UNFUSED) io->out[io->n_out++] = r.weights;
}
static void g_mha_fused(gml_context *ctx, struct io *io) { g_mha(ctx, io, GML_ATTN_FUSED); }
static void g_mha_unfused(gml_context *ctx, struct io *io) { g_mha(ctx, io, GML_ATTN_UNFUSED); }

/* A graph built without data, planned, its inputs filled; valid lengths
 * T, T - 5, T - 10, ... */
static struct built planned(builder fn) {
    struct built b = build(fn, true);
    if (!CHECK(gml_graph_plan(b.g, NULL) == GML_OK, "plan: %s", gml_graph_error(b.g)))
        exit(chk_summary());
    for (int i = 0; i < b.io.n_in; i++) {
        gml_tensor *t = b.io.in[i];
        fill_in_graph(b.g, t, i);
        if (t->type == GML_I32)
            for (int64_t k = 0; k < gml_nelements(t); k++)
                ((int32_t *)gml_graph_data(b.g, t))[k] = (int32_t)(RSS_T - 5 * k);
    }
    return b;
}

/* Run i of a case, on 1 + i % 3 threads: NULL, or what failed. */
typedef const char *(*run_fn)(void *state, int i);

static const char *run_graph(void *state, int i) {
    struct built *b = state;
    return gml_graph_compute(b->g, 1 + i % 3) == GML_OK ? NULL : gml_graph_error(b->g);
}

/* One KV-cache decode step (kv_cache.h) as run-graph --decode runs it: the
 * weights and the token x have data, the step graph is planned. B=2 D=64
 * H=4 over a cache of 32 positions, truncated back to 8 when full. */
#define DEC_MAX 32
#define DEC_KEEP 8
struct decode {
    gml_context *data, *ctx;
    gml_kv_cache *cache;
    gml_kv_step step;
    gml_graph *g;
    char err[512];
};

static bool decode_new(struct decode *d) {
    const int64_t B = 2, D = 64;
    const int H = 4;
    *d = (struct decode){.data = gml_init((gml_init_params){.mem_size = 1 << 20})};
    chk_rng r = chk_seed(99);
    gml_attn_weights w = {0};
    gml_tensor **ws[] = {&w.w_q, &w.w_k, &w.w_v, &w.w_o}, **bs[] = {&w.b_q, &w.b_k, &w.b_v, &w.b_o};
    for (int i = 0; i < 4; i++) {
        chk_fill_uniform(*ws[i] = gml_new_tensor_2d(d->data, GML_F32, D, D), &r, -0.2f, 0.2f);
        chk_fill_uniform(*bs[i] = gml_new_tensor_1d(d->data, GML_F32, D), &r, -0.2f, 0.2f);
    }
    gml_tensor *x = gml_new_tensor_3d(d->data, GML_F32, B, 1, D);
    chk_fill_uniform(x, &r, -1.0f, 1.0f);
    d->cache = gml_kv_cache_new((gml_kv_cache_params){.n_layers = 1, .batch = B, .n_kv_heads = H,
                                                      .max_len = DEC_MAX, .d_k = D / H},
                                d->err, sizeof d->err);
    if (!CHECK(d->cache, "kv cache: %s", d->err)) return false;
    d->ctx = gml_init((gml_init_params){.mem_size = 256 * gml_tensor_overhead(), .no_alloc = true});
    d->step = gml_kv_step_new(d->ctx, d->cache, 1);
    gml_tensor *y = gml_attn_decode(d->ctx, (gml_attn_config){.dims.n_heads = H, .score.causal = GML_CAUSAL_BOTTOM_RIGHT}, &w, x,
                                    &d->step, 0);
    d->g = y ? gml_build_graph(d->ctx, &y, 1) : NULL;
    if (!CHECK(d->g, "decode step: %s", gml_last_error(d->ctx))) return false;
    return CHECK(gml_graph_plan(d->g, NULL) == GML_OK, "plan the decode step: %s",
                 gml_graph_error(d->g));
}

static const char *run_decode(void *state, int i) {
    struct decode *d = state;
    if (gml_kv_cache_len(d->cache) == DEC_MAX && !gml_kv_cache_truncate(d->cache, DEC_KEEP))
        return "truncate";
    return gml_kv_step_compute(&d->step, d->g, 1 + i % 3, d->err, sizeof d->err) == GML_OK ? NULL
                                                                                           : d->err;
}

static void decode_free(struct decode *d) {
    gml_graph_free(d->g);
    gml_free(d->ctx);
    if (d->cache) gml_kv_cache_free(d->cache);
    gml_free(d->data);
}

/* ---- no growth over many computes ------------------------------------------------ */

/* A line of /proc/self/status in KiB: VmRSS is all resident memory, RssAnon
 * the part that is not file pages. A code path of libc run for the first
 * time (a futex call when a worker happens to fall asleep) maps 64 KiB of
 * libc.so at once: VmRSS grows, RssAnon, where leaks and arenas live, not. */
static long status_kib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == ':' && sscanf(line + n + 1, "%ld", &kib) == 1)
            break;
    if (f) fclose(f);
    return kib;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* 100 warm-up runs (the scratch buffer and the pool grow to 3 threads),
 * then 10,000 that must leave resident memory where it was: a leak of 100
 * bytes a run would add ~1 MiB. */
static void check_no_growth(const char *name, run_fn run, void *state) {
    enum { WARMUP = 100, RUNS = 10000 };
    chk_case("%s, %d runs", name, RUNS);
    int bad = 0;
    const char *err = NULL, *e;
    for (int i = 0; i < WARMUP; i++)
        if ((e = run(state, i))) bad++, err = e;
    const long rss0 = status_kib("VmRSS"), anon0 = status_kib("RssAnon");
    const double t0 = now_s();
    for (int i = 0; i < RUNS; i++)
        if ((e = run(state, i))) bad++, err = e;
    const double t1 = now_s();
    const long rss1 = status_kib("VmRSS"), anon1 = status_kib("RssAnon");
    printf("  %-12s %d runs in %.2f s: VmRSS %ld -> %ld KiB (%+ld), RssAnon %ld -> %ld KiB "
           "(%+ld)\n", name, RUNS, t1 - t0, rss0, rss1, rss1 - rss0, anon0, anon1, anon1 - anon0);
    CHECK(bad == 0, "%s: %d runs failed, the last: %s", name, bad, err);
    CHECK(anon0 > 0 && anon1 - anon0 < 64, "%s: anonymous resident memory grew by %ld KiB", name,
          anon1 - anon0);
    CHECK(rss1 - rss0 <= 256, "%s: resident memory grew by %ld KiB", name, rss1 - rss0);
}

/* The diamond, planned MHA (fused: flash_attn and its scratch; unfused:
 * matmuls) and a KV-cache decode step, at 1, 2, 3 threads in turn. */
static void test_rss(void) {
    printf("resident memory over 10000 computes (after 100):\n");
    static const struct {
        const char *name;
        builder fn;
    } cases[] = {{"diamond", g_diamond},
                 {"mha fused", g_mha_fused},
                 {"mha unfused", g_mha_unfused}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        struct built b = planned(cases[c].fn);
        check_no_growth(cases[c].name, run_graph, &b);
        drop(&b);
    }
    struct decode d;
    if (decode_new(&d)) check_no_growth("kv decode", run_decode, &d);
    decode_free(&d);
}

/* ---- huge pages ------------------------------------------------------------ */

/* Data arenas and plan buffers of 4 MiB or more start on a 2 MiB boundary, as
 * the transparent huge pages they are advised onto; GGMLITE_HUGEPAGES=0
 * turns that off, and a plan into ordinary memory computes the same. */
static void test_huge_pages(void) {
    chk_case("huge pages");
    const uintptr_t huge = (uintptr_t)2 << 20;
    gml_context *ctx = gml_init((gml_init_params){.mem_size = (size_t)8 << 20});
    gml_tensor *t = gml_new_tensor_1d(ctx, GML_F32, 1024);
    CHECK(((uintptr_t)t->data & (huge - 1)) < 4096,
          "8 MiB arena: its first tensor's data at %p, not within 4 KiB after a 2 MiB boundary",
          t->data);
    gml_free(ctx);

    /* x [2^21] -> y = 2 x: 16 MiB planned */
    const int64_t n = (int64_t)1 << 21;
    ctx = gml_init((gml_init_params){.mem_size = 1 << 16, .no_alloc = true});
    gml_tensor *x = gml_new_tensor_1d(ctx, GML_F32, n);
    gml_set_flags(x, GML_FLAG_INPUT);
    gml_tensor *y = gml_scale(ctx, x, 2.0f);
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) setenv("GGMLITE_HUGEPAGES", "0", 1);
        const char *mode = pass ? "GGMLITE_HUGEPAGES=0" : "huge pages";
        if (!CHECK(gml_graph_plan(g, NULL) == GML_OK, "%s: plan: %s", mode, gml_graph_error(g)))
            break;
        float *xd = gml_graph_data(g, x), *yd = gml_graph_data(g, y);
        uintptr_t lo = (uintptr_t)(xd < yd ? xd : yd);
        if (pass == 0)
            CHECK((lo & (huge - 1)) == 0, "a 16 MiB plan buffer at %p, not on a 2 MiB boundary",
                  (void *)lo);
        for (int64_t i = 0; i < n; i++) xd[i] = (float)(i % 1000) - 499.5f;
        CHECK(gml_graph_compute(g, 2) == GML_OK, "%s: compute: %s", mode, gml_graph_error(g));
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) bad += yd[i] != 2.0f * ((float)(i % 1000) - 499.5f);
        CHECK(bad == 0, "%s: %lld of %lld elements of 2 x wrong", mode, (long long)bad,
              (long long)n);
    }
    unsetenv("GGMLITE_HUGEPAGES");
    gml_graph_free(g);
    gml_free(ctx);
}

int main(int argc, char **argv) {
    bool quick = (argc > 1 && strcmp(argv[1], "quick") == 0) || chk_quick();
    test_graphs();
    test_options();
    test_placed_by_hand();
    test_second_graph_over_same_tensors();
    test_outputs_per_graph();
    test_two_live_graphs();
    test_replan_after_placement();
    test_free_order();
    test_c2_peak();
    test_unfused_weights_reused();
    test_huge_pages();
    /* Not under qemu-user either (GGMLITE_TEST_EMULATED, set by CTest in a
     * cross build): its 10,000 emulated computes take minutes there, and
     * qemu's own memory is part of the resident set it measures. */
    if (!quick && getenv("GGMLITE_TEST_EMULATED"))
        printf("skipped: the resident-memory run (under an emulator)\n");
    else if (!quick)
        test_rss();
    return chk_summary();
}
