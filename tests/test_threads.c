/* The scheduler: a graph using every op gives bitwise the same results on 1,
 * 2, 3, 4, 7 and 16 threads (more threads than cores too), with the fast
 * kernels and the reference ones; so does an attention graph (flash_attn
 * with every mask, set_rows, gml_mha and gml_gqa fused and unfused) sized so
 * that its matmuls split into several chunks; gml_barrier, gml_chunk_next and
 * gml_kernel_fail behave as internal.h says; the node callback sees each node
 * finished by all threads; the NaN trap, explicit pools, a compute nested in
 * a callback, computes from two threads at once and a forked child work; idle
 * workers use no CPU.
 *
 * `test_threads quick` runs fewer thread counts (for valgrind). */
#define _POSIX_C_SOURCE 200809L /* fork, nanosleep */
#include <ggmlite/attention.h>
#include "check.h"
#include "internal.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static chk_rng rng = {12345};

static gml_tensor *leaf(gml_context *ctx, const char *name, int n, const int64_t *ne) {
    gml_tensor *t = gml_set_name(gml_new_tensor(ctx, GML_F32, n, ne), name);
    chk_fill_uniform(t, &rng, -1.0f, 1.0f);
    return t;
}

/* ---- a graph with every op ------------------------------------------------ */

struct big {
    gml_context *ctx;
    gml_graph *g;
    gml_tensor *written[4];   /* leafs a compute writes (cpy, set_rows) */
    int n_written;
    gml_tensor *a_mm, *bt_mm; /* naive check of one matmul (NULL: none) */
    gml_tensor *mm;
    gml_tensor *fused[2], *unfused[2]; /* the same attention twice (NULL: none) */
    gml_tensor *finite;       /* an output that must be finite (NULL: none) */
};

static struct big build_big(void) {
    struct big b = {0};
    b.ctx = gml_init((gml_init_params){.mem_size = 8 << 20});
    gml_context *ctx = b.ctx;
    /* linear: [2,5,13] x [11,13]^T + [11] */
    gml_tensor *x = leaf(ctx, "x", 3, (int64_t[]){2, 5, 13});
    gml_tensor *w = leaf(ctx, "w", 2, (int64_t[]){11, 13});
    gml_tensor *bias = leaf(ctx, "bias", 1, (int64_t[]){11});
    gml_tensor *h = gml_linear(ctx, x, w, bias); /* [2,5,11] */
    /* attention-like: q [2,3,7,9] @ k^T [2,3,9,6] -> [2,3,7,6] */
    gml_tensor *q = leaf(ctx, "q", 4, (int64_t[]){2, 3, 7, 9});
    gml_tensor *k = leaf(ctx, "k", 4, (int64_t[]){2, 3, 6, 9});
    gml_tensor *v = leaf(ctx, "v", 4, (int64_t[]){2, 1, 6, 5});
    gml_tensor *s = gml_matmul(ctx, q, gml_transpose(ctx, k, -2, -1));
    gml_tensor *lens = gml_new_tensor_1d(ctx, GML_I32, 2);
    ((int32_t *)lens->data)[0] = 4;
    ((int32_t *)lens->data)[1] = 6;
    gml_tensor *mask = gml_valid_len_mask(ctx, lens, 6); /* [2,1,1,6] */
    gml_tensor *p = gml_softmax(ctx, s, mask, 0.33f, false);
    gml_tensor *pc = gml_softmax(ctx, s, NULL, 0.5f, true);
    gml_tensor *vr = gml_repeat_interleave(ctx, v, 3, 1); /* [2,3,6,5] */
    gml_tensor *o = gml_matmul(ctx, p, vr);               /* [2,3,7,5] */
    gml_tensor *o2 = gml_mul(ctx, gml_matmul(ctx, pc, vr), gml_scale(ctx, o, 0.7f));
    gml_tensor *c = gml_cont(ctx, gml_permute(ctx, o2, (int[]){0, 2, 1, 3})); /* [2,7,3,5] */
    gml_tensor *r = gml_reshape(ctx, c, 3, (int64_t[]){2, 7, 15});
    gml_tensor *table = leaf(ctx, "table", 2, (int64_t[]){10, 15});
    gml_tensor *idx = gml_new_tensor_2d(ctx, GML_I32, 2, 7);
    for (int i = 0; i < 14; i++) ((int32_t *)idx->data)[i] = (i * 7 + 3) % 10;
    gml_tensor *y = gml_add(ctx, r, gml_get_rows(ctx, table, idx)); /* [2,7,15] */
    /* relative positions [7,6] into a [5,4] table */
    gml_tensor *rel = leaf(ctx, "rel", 2, (int64_t[]){5, 4});
    gml_tensor *rp = gml_get_rows(ctx, rel, gml_relpos_index(ctx, 7, 6, 2)); /* [7,6,4] */
    /* odd matmuls: [37,29] @ [23,29]^T; [2,1,5,9] @ [1,3,9,6] broadcast */
    b.a_mm = leaf(ctx, "a_mm", 2, (int64_t[]){37, 29});
    b.bt_mm = leaf(ctx, "bt_mm", 2, (int64_t[]){23, 29});
    b.mm = gml_matmul(ctx, b.a_mm, gml_transpose(ctx, b.bt_mm, 0, 1));
    gml_tensor *mm4 = gml_matmul(ctx, leaf(ctx, "a4", 4, (int64_t[]){2, 1, 5, 9}),
                                 leaf(ctx, "b4", 4, (int64_t[]){1, 3, 9, 6}));
    /* cpy of y into rows 2..8 of a cache [2,10,15] */
    gml_tensor *cache = b.written[b.n_written++] = leaf(ctx, "cache", 3, (int64_t[]){2, 10, 15});
    gml_tensor *slot = gml_view(ctx, cache, 3, (int64_t[]){2, 7, 15},
                                (size_t[]){cache->nb[1], cache->nb[2], cache->nb[3]},
                                2 * cache->nb[2]);
    gml_tensor *written = gml_cpy(ctx, y, slot);
    gml_tensor *outs[] = {h, y, rp, b.mm, mm4, written};
    if (!written || !mm4 || !rp || !h) {
        fprintf(stderr, "building the graph failed: %s\n", gml_last_error(ctx));
        exit(1);
    }
    b.g = gml_build_graph(ctx, outs, 6);
    return b;
}

/* ---- an attention graph whose kernels split ---------------------------------- */

static gml_tensor *leaf_in(gml_context *ctx, const char *name, int n, const int64_t *ne,
                           float bound) {
    gml_tensor *t = gml_set_name(gml_new_tensor(ctx, GML_F32, n, ne), name);
    chk_fill_uniform(t, &rng, -bound, bound);
    return t;
}

static gml_tensor *lens_in(gml_context *ctx, const char *name, int n, const int64_t *ne, int hi) {
    gml_tensor *t = gml_set_name(gml_new_tensor(ctx, GML_I32, n, ne), name);
    chk_fill_int(t, &rng, 0, hi);
    ((int32_t *)t->data)[0] = hi; /* a row that sees every key and one that sees none */
    ((int32_t *)t->data)[gml_nelements(t) - 1] = 0;
    return t;
}

/* Projections of D = 256 (nn.Linear's [out, in], biases). */
static gml_attn_weights attn_weights(gml_context *ctx, int64_t kv) {
    const float s = 0.0625f; /* 1 / sqrt(D): outputs O(1) */
    return (gml_attn_weights){
        .w_q = leaf_in(ctx, "w_q", 2, (int64_t[]){256, 256}, s),
        .b_q = leaf_in(ctx, "b_q", 1, (int64_t[]){256}, s),
        .w_k = leaf_in(ctx, "w_k", 2, (int64_t[]){kv, 256}, s),
        .b_k = leaf_in(ctx, "b_k", 1, (int64_t[]){kv}, s),
        .w_v = leaf_in(ctx, "w_v", 2, (int64_t[]){kv, 256}, s),
        .b_v = leaf_in(ctx, "b_v", 1, (int64_t[]){kv}, s),
        .w_o = leaf_in(ctx, "w_o", 2, (int64_t[]){256, 256}, s),
        .b_o = leaf_in(ctx, "b_o", 1, (int64_t[]){256}, s),
    };
}

/* flash_attn with causal, valid lengths per query and a mask, GQA 6/2,
 * Tq 19 != Tk 150, d_k 13, d_v 11 (tails of every block: 57 query rows per
 * kv head, keys past 128), over K and V caches after set_rows wrote three
 * rows per slice (one index twice: the last write wins); then gml_mha
 * (self, causal, lengths [B]) and gml_gqa (8/2 heads, cross Tq 37 != Tk 70,
 * causal, lengths [B, Tq]), each fused and unfused, D = 256.
 *
 * The GEMM (ops/gemm.c, plan_tiles) cuts a product into min(3 nth, flops /
 * 4 Mi) chunks when it has 2+ threads (1 below 8 Mi flops), as tiles of at
 * least 4 MR rows or 4 NR columns (AVX-512 14 x 32): here mha's q, k, v and
 * o projections, [140, 256] x [256, 256] (2 B T rows, 18.4 M flops), get 4
 * chunks (N cut at 128, then M at 70); gqa's q and o ones, [74, 256] x
 * [256, 256] (9.7 M), 2 (N cut at 128). The reference matmul splits rows. */
static struct big build_attn(void) {
    struct big b = {0};
    b.ctx = gml_init((gml_init_params){.mem_size = 32 << 20});
    gml_context *ctx = b.ctx;
    /* flash_attn over caches written by set_rows */
    gml_tensor *kc = b.written[b.n_written++] =
        leaf_in(ctx, "k_cache", 4, (int64_t[]){2, 2, 150, 13}, 1);
    gml_tensor *vc = b.written[b.n_written++] =
        leaf_in(ctx, "v_cache", 4, (int64_t[]){2, 2, 150, 11}, 1);
    gml_tensor *pos = gml_set_name(gml_new_tensor_2d(ctx, GML_I32, 2, 3), "pos");
    memcpy(pos->data, (int32_t[]){5, 77, 149, 64, 0, 64}, 6 * sizeof(int32_t));
    gml_tensor *k = gml_set_rows(ctx, kc, leaf_in(ctx, "k_new", 4, (int64_t[]){2, 2, 3, 13}, 1),
                                 pos);
    gml_tensor *v = gml_set_rows(ctx, vc, leaf_in(ctx, "v_new", 4, (int64_t[]){2, 2, 3, 11}, 1),
                                 pos);
    gml_tensor *q = leaf_in(ctx, "q", 4, (int64_t[]){2, 6, 19, 13}, 1);
    gml_tensor *mask = leaf_in(ctx, "mask", 2, (int64_t[]){19, 150}, 2);
    for (int i = 0; i < 19 * 150; i += 7) ((float *)mask->data)[i] = -INFINITY;
    gml_tensor *lens = lens_in(ctx, "lens", 2, (int64_t[]){2, 19}, 150);
    gml_tensor *fa = b.finite = gml_flash_attn(ctx, q, k, v, mask, lens, 0.3f, true);

    /* gml_mha, self-attention */
    gml_attn_weights wm = attn_weights(ctx, 256);
    gml_attn_inputs im = {.query = leaf_in(ctx, "x", 3, (int64_t[]){2, 70, 256}, 1),
                          .valid_lens = lens_in(ctx, "lens_b", 1, (int64_t[]){2}, 70)};
    gml_attn_config cm = {.dims.n_heads = 8, .score.causal = GML_CAUSAL_BOTTOM_RIGHT, .graph.impl = GML_ATTN_FUSED};
    b.fused[0] = gml_mha(ctx, cm, &wm, im).out;
    cm.graph.impl = GML_ATTN_UNFUSED;
    b.unfused[0] = gml_mha(ctx, cm, &wm, im).out;

    /* gml_gqa, cross-attention */
    gml_attn_weights wg = attn_weights(ctx, 64);
    gml_tensor *xkv = leaf_in(ctx, "xkv", 3, (int64_t[]){2, 70, 256}, 1);
    gml_attn_inputs ig = {.query = leaf_in(ctx, "xq", 3, (int64_t[]){2, 37, 256}, 1),
                          .key = xkv, .value = xkv,
                          .valid_lens = lens_in(ctx, "lens_bq", 2, (int64_t[]){2, 37}, 70)};
    gml_attn_config cg = {.dims = {.n_heads = 8, .n_kv_heads = 2}, .score.causal = GML_CAUSAL_BOTTOM_RIGHT,
                          .graph.impl = GML_ATTN_FUSED};
    b.fused[1] = gml_gqa(ctx, cg, &wg, ig).out;
    cg.graph.impl = GML_ATTN_UNFUSED;
    b.unfused[1] = gml_gqa(ctx, cg, &wg, ig).out;

    gml_tensor *outs[] = {fa, b.fused[0], b.unfused[0], b.fused[1], b.unfused[1]};
    for (int i = 0; i < 5; i++)
        if (!outs[i]) {
            fprintf(stderr, "building the attention graph failed: %s\n", gml_last_error(ctx));
            exit(1);
        }
    b.g = gml_build_graph(ctx, outs, 5);
    return b;
}

/* Bytes of every node that computes, and the leafs written: what a
 * compute writes. */
static size_t snapshot_size(const struct big *b) {
    size_t n = 0;
    for (int i = 0; i < b->n_written; i++) n += gml_nbytes(b->written[i]);
    for (int i = 0; i < gml_graph_n_nodes(b->g); i++) {
        gml_tensor *t = gml_graph_node(b->g, i);
        if (!gml_is_view(t)) n += gml_nbytes(t);
    }
    return n;
}

static void snapshot(const struct big *b, char *out) {
    for (int i = 0; i < gml_graph_n_nodes(b->g); i++) {
        gml_tensor *t = gml_graph_node(b->g, i);
        if (gml_is_view(t)) continue;
        memcpy(out, t->data, gml_nbytes(t));
        out += gml_nbytes(t);
    }
    for (int i = 0; i < b->n_written; i++) {
        memcpy(out, b->written[i]->data, gml_nbytes(b->written[i]));
        out += gml_nbytes(b->written[i]);
    }
}

/* The leafs a compute writes, saved (to) or put back (from). */
static void save_written(const struct big *b, char *to) {
    for (int i = 0; i < b->n_written; i++) {
        memcpy(to, b->written[i]->data, gml_nbytes(b->written[i]));
        to += gml_nbytes(b->written[i]);
    }
}

static void restore_written(const struct big *b, const char *from) {
    for (int i = 0; i < b->n_written; i++) {
        memcpy(b->written[i]->data, from, gml_nbytes(b->written[i]));
        from += gml_nbytes(b->written[i]);
    }
}

/* NaN into every node (a share nobody computed stays NaN). */
static void poison(const struct big *b) {
    for (int i = 0; i < gml_graph_n_nodes(b->g); i++) {
        gml_tensor *t = gml_graph_node(b->g, i);
        if (!gml_is_view(t)) chk_poison_bytes(t->data, gml_nbytes(t));
    }
}

static bool quick;

/* |a - b| <= 1e-4 (1 + |b|) for every element: two graphs of one attention. */
static void check_agree(const gml_tensor *a, const gml_tensor *b) {
    float *x = chk_dense(a), *y = chk_dense(b);
    int64_t bad = 0, first = -1;
    for (int64_t e = 0; e < chk_numel(a); e++)
        if (!(fabsf(x[e] - y[e]) <= 1e-4f * (1.0f + fabsf(y[e]))) && bad++ == 0) first = e;
    CHECK(bad == 0, "%s vs %s: %lld elements differ, first [%lld] %g vs %g", a->name, b->name,
          (long long)bad, (long long)first, first < 0 ? 0.0 : (double)x[first],
          first < 0 ? 0.0 : (double)y[first]);
    free(x);
    free(y);
}

/* Computes b at 1 thread, then at each of counts[n]: every node and every
 * leaf written bitwise the same. The leafs written are put back before each
 * compute and every node poisoned, so a share nobody computed shows. */
static void test_determinism(struct big *b, gml_isa isa, const int *counts, int n) {
    if (!gml_cpu_has(isa)) return;
    CHECK(gml_set_isa(isa) == GML_OK, "set_isa %s", gml_isa_name(isa));
    const size_t size = snapshot_size(b);
    char *ref = malloc(size), *got = malloc(size), *written0 = malloc(size);
    save_written(b, written0);

    poison(b);
    CHECK(gml_graph_compute(b->g, 1) == GML_OK, "%s", gml_graph_error(b->g));
    snapshot(b, ref);

    /* One matmul against a naive loop, so the 1-thread result is right too. */
    for (int m = 0; b->mm && m < 37; m++)
        for (int n = 0; n < 23; n++) {
            const float *a = b->a_mm->data, *bt = b->bt_mm->data;
            double acc = 0;
            for (int k = 0; k < 29; k++) acc += (double)a[m * 29 + k] * bt[n * 29 + k];
            float v = ((float *)b->mm->data)[m * 23 + n];
            CHECK(fabs(v - acc) <= 1e-5 * (1 + fabs(acc)), "matmul [%d,%d] %g vs %g", m, n, v, acc);
        }
    /* The fused and unfused graphs of one attention agree; no NaN is
     * compared bitwise with itself. */
    for (int i = 0; i < 2; i++)
        if (b->fused[i]) check_agree(b->fused[i], b->unfused[i]);
    if (b->finite) {
        float *x = chk_dense(b->finite);
        int64_t bad = 0;
        for (int64_t e = 0; e < chk_numel(b->finite); e++) bad += !isfinite(x[e]);
        CHECK(bad == 0, "%s: %lld elements not finite", b->finite->name, (long long)bad);
        free(x);
    }

    for (int c = 0; c < n; c++) {
        restore_written(b, written0);
        poison(b);
        gml_status st = gml_graph_compute(b->g, counts[c]);
        CHECK(st == GML_OK, "%d threads: %s", counts[c], gml_graph_error(b->g));
        snapshot(b, got);
        CHECK(memcmp(ref, got, size) == 0, "isa %s: %d threads differ from 1", gml_isa_name(isa),
              counts[c]);
    }
    restore_written(b, written0);
    free(ref);
    free(got);
    free(written0);
    gml_set_isa(GML_ISA_AUTO);
}

/* ---- the primitives, through test kernels ---------------------------------- */

enum { MAX_T = 16, NCH = 97, ROUNDS = 40, KNODES = 6 };
static atomic_int hits[KNODES][2][NCH];     /* [node][phase][chunk] */
static int slots[MAX_T];
static atomic_int bad_reads, ran_after_fail;

/* Two phases of dynamic chunks around a barrier: every chunk exactly once in
 * each, so the count must restart per node and after the barrier. */
static void k_chunks(const gml_compute_params *p, gml_tensor *dst) {
    int node = dst->op_params[0];
    for (int phase = 0; phase < 2; phase++) {
        for (int64_t c; (c = gml_chunk_next(p)) < NCH;) atomic_fetch_add(&hits[node][phase][c], 1);
        gml_barrier(p);
    }
}

/* Rounds of write own slot, barrier, read all, barrier. */
static void k_rounds(const gml_compute_params *p, gml_tensor *dst) {
    GML_UNUSED(dst);
    for (int r = 0; r < ROUNDS; r++) {
        slots[p->ith] = r * 1000 + p->ith;
        gml_barrier(p);
        for (int j = 0; j < p->nth; j++)
            if (slots[j] != r * 1000 + j) atomic_fetch_add(&bad_reads, 1);
        gml_barrier(p);
    }
}

/* Shared scratch: each thread fills its part, thread 0 sums after a barrier. */
static void k_scratch(const gml_compute_params *p, gml_tensor *dst) {
    int64_t *w = p->wdata;
    w[p->ith] = p->ith + 1;
    gml_barrier(p);
    if (p->ith == 0) {
        int64_t sum = 0;
        for (int j = 0; j < p->nth; j++) sum += w[j];
        dst->op_params[1] = (int32_t)sum;
    }
}

static void k_fail_last(const gml_compute_params *p, gml_tensor *dst) {
    GML_UNUSED(dst);
    if (p->ith == p->nth - 1) gml_kernel_fail(p, "thread %d of %d failed", p->ith, p->nth);
    gml_barrier(p); /* a failing kernel still meets the others */
}

static void k_fail_all(const gml_compute_params *p, gml_tensor *dst) {
    GML_UNUSED(dst);
    gml_kernel_fail(p, "thread %d failed", p->ith);
}

static void k_mark(const gml_compute_params *p, gml_tensor *dst) {
    GML_UNUSED(p);
    GML_UNUSED(dst);
    atomic_fetch_add(&ran_after_fail, 1);
}

static void test_primitives(int nth) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 16});
    gml_tensor *d[KNODES];
    for (int i = 0; i < KNODES; i++) {
        d[i] = gml_new_tensor_1d(ctx, GML_F32, 1);
        d[i]->op_params[0] = i;
    }
    memset(hits, 0, sizeof hits);
    atomic_store(&bad_reads, 0);
    char err[256];
    int64_t scratch[MAX_T];
    gml_kernel_fn fns[] = {k_chunks, k_rounds, k_chunks, k_scratch, k_chunks, k_chunks};
    gml_status st = gml_run_kernels(fns, d, KNODES, nth, scratch, sizeof scratch, err, sizeof err);
    CHECK(st == GML_OK, "%d threads: %s", nth, err);
    for (int node = 0; node < KNODES; node++) {
        if (fns[node] != k_chunks) continue;
        for (int ph = 0; ph < 2; ph++)
            for (int c = 0; c < NCH; c++)
                CHECK(atomic_load(&hits[node][ph][c]) == 1, "%d threads: node %d phase %d chunk %d "
                      "handed out %d times", nth, node, ph, c, atomic_load(&hits[node][ph][c]));
    }
    CHECK(atomic_load(&bad_reads) == 0, "%d threads: %d reads saw a slot from another round", nth,
          atomic_load(&bad_reads));
    CHECK(d[3]->op_params[1] == nth * (nth + 1) / 2, "%d threads: scratch sum %d", nth,
          d[3]->op_params[1]);

    /* A failure stops every thread after the node; the first message wins. */
    for (int variant = 0; variant < 2; variant++) {
        atomic_store(&ran_after_fail, 0);
        gml_kernel_fn ffns[] = {k_mark, variant ? k_fail_all : k_fail_last, k_mark, k_mark};
        st = gml_run_kernels(ffns, d, 4, nth, NULL, 0, err, sizeof err);
        CHECK(st == GML_ERR_INVALID, "%d threads: status %d", nth, st);
        CHECK(strncmp(err, "thread ", 7) == 0 && strstr(err, "failed"), "message '%s'", err);
        CHECK(atomic_load(&ran_after_fail) == nth, "%d threads: %d kernel calls besides the "
              "failing node, want %d (only the node before it)", nth, atomic_load(&ran_after_fail), nth);
    }
    gml_free(ctx);
}

/* ---- callback, NaN trap ------------------------------------------------------ */

struct watch {
    const struct big *b;
    const char *ref; /* snapshot of a finished compute */
    int calls, last_index, stop_at, mismatches;
};

/* Each node's data, when its callback runs, is already the final one. */
static bool watch_cb(const gml_tensor *node, int index, void *user) {
    struct watch *w = user;
    CHECK(index == w->last_index + 1, "callback order: %d after %d", index, w->last_index);
    w->last_index = index;
    w->calls++;
    const char *r = w->ref;
    for (int i = 0; i < gml_graph_n_nodes(w->b->g); i++) {
        gml_tensor *t = gml_graph_node(w->b->g, i);
        if (gml_is_view(t)) continue;
        /* the callback gets the graph's copy of the node, its data bound */
        if (gml_graph_tensor(w->b->g, t) == node && memcmp(r, node->data, gml_nbytes(t)) != 0)
            w->mismatches++;
        r += gml_nbytes(t);
    }
    return index != w->stop_at;
}

static void test_callback(struct big *b) {
    const size_t size = snapshot_size(b);
    char *ref = malloc(size);
    CHECK(gml_graph_compute(b->g, 1) == GML_OK, "%s", gml_graph_error(b->g));
    snapshot(b, ref);
    const int n = gml_graph_n_nodes(b->g);
    for (int nth = 1; nth <= 4; nth += 3) {
        struct watch w = {.b = b, .ref = ref, .last_index = -1, .stop_at = -1};
        gml_graph_set_callback(b->g, watch_cb, &w);
        poison(b);
        CHECK(gml_graph_compute(b->g, nth) == GML_OK, "%s", gml_graph_error(b->g));
        CHECK(w.calls == n && w.mismatches == 0, "%d threads: %d calls of %d, %d unfinished nodes",
              nth, w.calls, n, w.mismatches);

        /* Stop at the first matmul: nothing after it runs. */
        int stop = -1, next = -1;
        for (int i = 0; i < n && next < 0; i++) {
            gml_tensor *t = gml_graph_node(b->g, i);
            if (stop < 0 && t->op == GML_OP_MATMUL) stop = i;
            else if (stop >= 0 && !gml_is_view(t)) next = i;
        }
        w = (struct watch){.b = b, .ref = ref, .last_index = -1, .stop_at = stop};
        poison(b);
        gml_status st = gml_graph_compute(b->g, nth);
        CHECK(st == GML_ERR_ABORTED && w.calls == stop + 1, "%d threads: status %d after %d calls",
              nth, st, w.calls);
        uint32_t bits;
        memcpy(&bits, gml_graph_node(b->g, next)->data, 4);
        CHECK(bits == CHK_POISON_BITS, "%d threads: node %d ran after the callback stopped at %d", nth,
              next, stop);
        gml_graph_set_callback(b->g, NULL, NULL);
    }
    free(ref);
}

static void test_nan_trap(int nth) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20});
    gml_tensor *x = leaf(ctx, "x", 2, (int64_t[]){9, 33});
    ((float *)x->data)[5 * 33 + 7] = 3e30f;
    gml_tensor *y = gml_set_name(gml_scale(ctx, gml_scale(ctx, x, 1.0f), 1e10f), "boom");
    gml_tensor *z = gml_scale(ctx, y, 2.0f);
    gml_graph *g = gml_build_graph(ctx, &z, 1);
    gml_graph_set_nan_trap(g, true);
    gml_status st = gml_graph_compute(g, nth);
    CHECK(st == GML_ERR_NONFINITE && strstr(gml_graph_error(g), "'boom'") &&
              strstr(gml_graph_error(g), "[5,7]"),
          "%d threads: status %d, '%s'", nth, st, gml_graph_error(g));
    gml_graph_free(g);
    gml_free(ctx);
}

/* ---- pools, nesting, concurrency, fork, idle -------------------------------- */

struct small {
    gml_context *ctx;
    gml_graph *g;
    gml_tensor *out;
    float ref[64 * 48];
};

/* [64,40] @ [40,48] then softmax: enough rows for 16 threads. */
static void build_small(struct small *s) {
    s->ctx = gml_init((gml_init_params){.mem_size = 1 << 20});
    gml_tensor *a = leaf(s->ctx, "a", 2, (int64_t[]){64, 40});
    gml_tensor *b = leaf(s->ctx, "b", 2, (int64_t[]){40, 48});
    s->out = gml_softmax(s->ctx, gml_matmul(s->ctx, a, b), NULL, 0.7f, true);
    s->g = gml_build_graph(s->ctx, &s->out, 1);
    gml_graph_compute(s->g, 1);
    memcpy(s->ref, s->out->data, sizeof s->ref);
}

static bool small_ok(struct small *s, gml_status st) {
    return st == GML_OK && memcmp(s->ref, s->out->data, sizeof s->ref) == 0;
}

static void free_small(struct small *s) {
    gml_graph_free(s->g);
    gml_free(s->ctx);
}

static struct small nested_inner;
static int nested_ok;

static bool nested_cb(const gml_tensor *node, int index, void *user) {
    GML_UNUSED(node);
    GML_UNUSED(user);
    if (index == 0) {
        memset(nested_inner.out->data, 0, sizeof nested_inner.ref);
        nested_ok += small_ok(&nested_inner, gml_graph_compute(nested_inner.g, 4));
    }
    return true;
}

static void *concurrent_worker(void *arg) {
    struct small *s = arg;
    for (int i = 0; i < 30; i++) {
        memset(s->out->data, 0, sizeof s->ref);
        if (!small_ok(s, gml_graph_compute(s->g, 2 + i % 3))) return (void *)1;
    }
    return NULL;
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

static void test_pools(void) {
    struct small s;
    build_small(&s);

    CHECK(gml_threadpool_new(0) == NULL && gml_threadpool_new(GML_MAX_THREADS + 1) == NULL, "bad sizes");
    CHECK(gml_graph_compute(s.g, 0) == GML_ERR_INVALID && strstr(gml_graph_error(s.g), "n_threads"),
          "'%s'", gml_graph_error(s.g));
    gml_threadpool *pool = gml_threadpool_new(3);
    CHECK(pool && gml_threadpool_n_threads(pool) == 3, "pool of 3");
    for (int i = 0; i < 5; i++) {
        memset(s.out->data, 0, sizeof s.ref);
        CHECK(small_ok(&s, gml_graph_compute_pool(s.g, pool)), "own pool: %s", gml_graph_error(s.g));
    }
    gml_threadpool_free(pool);

    /* The default pool can be shut down and comes back. */
    gml_threadpool_shutdown();
    memset(s.out->data, 0, sizeof s.ref);
    CHECK(small_ok(&s, gml_graph_compute(s.g, 4)), "after shutdown: %s", gml_graph_error(s.g));

    /* A compute inside a callback runs (alone) instead of deadlocking. */
    build_small(&nested_inner);
    nested_ok = 0;
    gml_graph_set_callback(s.g, nested_cb, NULL);
    CHECK(small_ok(&s, gml_graph_compute(s.g, 3)) && nested_ok == 1, "nested compute");
    gml_graph_set_callback(s.g, NULL, NULL);
    free_small(&nested_inner);

    /* Two application threads computing at once take turns on the pool. */
    struct small t1, t2;
    build_small(&t1);
    build_small(&t2);
    pthread_t th1, th2;
    void *r1, *r2;
    pthread_create(&th1, NULL, concurrent_worker, &t1);
    pthread_create(&th2, NULL, concurrent_worker, &t2);
    pthread_join(th1, &r1);
    pthread_join(th2, &r2);
    CHECK(r1 == NULL && r2 == NULL, "concurrent computes");
    free_small(&t1);
    free_small(&t2);

    /* A forked child has no workers: it makes its own pool. Not under
     * qemu-user (GGMLITE_TEST_EMULATED, set by CTest in a cross build):
     * qemu 7.2 itself aborts in the child of a threaded process. */
    if (getenv("GGMLITE_TEST_EMULATED")) {
        printf("skipped: the forked child (qemu-user aborts in the child of a threaded process)\n");
    } else {
        CHECK(gml_graph_compute(s.g, 4) == GML_OK, "before fork");
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            memset(s.out->data, 0, sizeof s.ref);
            bool ok = small_ok(&s, gml_graph_compute(s.g, 4));
            gml_threadpool_shutdown(); /* _exit skips atexit: join the child's pool */
            _exit(ok ? 0 : 1);
        }
        int status = 0;
        CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
                  WEXITSTATUS(status) == 0, "forked child's compute (status %d)", status);
    }

    /* Idle workers sleep: 16 threads (more than cores), then 0.3 s of nothing. */
    if (!quick) {
        CHECK(gml_graph_compute(s.g, 16) == GML_OK, "16 threads");
        double before = cpu_seconds();
        nanosleep(&(struct timespec){.tv_nsec = 300 * 1000 * 1000}, NULL);
        double used = cpu_seconds() - before;
        printf("idle: %.1f ms of CPU over 300 ms asleep\n", used * 1e3);
        CHECK(used < 0.03, "idle workers used %.1f ms of CPU in 300 ms", used * 1e3);
    }
    free_small(&s);
}

/* ---- where the threads meet -------------------------------------------------- */

static bool spans_overlap(const gml_tensor *a, const gml_tensor *b) {
    if (!a || !b || gml_nelements(a) == 0 || gml_nelements(b) == 0) return false;
    const char *pa = a->data, *pb = b->data;
    return pa < pb + gml_nbytes(b) && pb < pa + gml_nbytes(a);
}

/* Nodes i and j of g (their bound copies) touch the same bytes, one of them
 * writing: they must not run at once. */
static bool nodes_conflict(const gml_graph *g, int i, int j) {
    const gml_tensor *a = gml_graph_tensor(g, gml_graph_node(g, i));
    const gml_tensor *b = gml_graph_tensor(g, gml_graph_node(g, j));
    if (spans_overlap(a, b)) return true;
    for (int k = 0; k < GML_MAX_SRC; k++)
        if (spans_overlap(a, b->src[k]) || spans_overlap(b, a->src[k])) return true;
    return false;
}

/* The scheduler's promise on g as last computed: nodes with no barrier
 * between them (unless thread 0 runs both alone, in order) never touch the
 * same bytes where one writes. Returns the barriers between nodes. */
static int check_schedule(const gml_graph *g, const char *what) {
    int run[256], n_run = 0, barriers = 0, bad = 0;
    for (int i = 0; i < gml_graph_n_nodes(g); i++) {
        const int sched = gml_graph_node_schedule(g, i);
        if (sched < 0) continue;
        if (sched & GML_SCHED_BARRIER) {
            barriers++;
            n_run = 0;
        }
        for (int r = 0; r < n_run; r++) {
            const bool both_alone = (gml_graph_node_schedule(g, run[r]) & GML_SCHED_ALONE) &&
                                    (sched & GML_SCHED_ALONE);
            if (!both_alone && nodes_conflict(g, run[r], i) && bad++ == 0)
                CHECK(false, "%s: nodes %d '%s' and %d '%s' share memory with no barrier between",
                      what, run[r], gml_graph_node(g, run[r])->name, i, gml_graph_node(g, i)->name);
        }
        if (n_run < 256) run[n_run++] = i;
    }
    return barriers;
}

/* The schedule of node named name in g (-2: no such node). */
static int sched_of(const gml_graph *g, const char *name) {
    for (int i = 0; i < gml_graph_n_nodes(g); i++)
        if (strcmp(gml_graph_node(g, i)->name, name) == 0) return gml_graph_node_schedule(g, i);
    return -2;
}

/* C1's shape scaled down (B=2, T=10, D=128, H=2), planned as bench plans it
 * (dead tensors' memory reused: a later node may write where an earlier one
 * read): bitwise the same at 1-4 threads, on every ISA; q, k (and v in the
 * fused graph) run back to back, scores to the merge on thread 0 alone, and
 * no two nodes that may run at once share memory. */
static void test_schedule_mha(void) {
    for (int fused = 0; fused < 2; fused++) {
        gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true});
        const int64_t D = 128;
        const gml_attn_weights w = {
            .w_q = gml_new_tensor_2d(ctx, GML_F32, D, D), .w_k = gml_new_tensor_2d(ctx, GML_F32, D, D),
            .w_v = gml_new_tensor_2d(ctx, GML_F32, D, D), .w_o = gml_new_tensor_2d(ctx, GML_F32, D, D)};
        const gml_attn_inputs in = {.query = gml_new_tensor_3d(ctx, GML_F32, 2, 10, D)};
        const gml_attn_config cfg = {.dims = {.n_heads = 2},
                                     .graph.impl = fused ? GML_ATTN_FUSED : GML_ATTN_UNFUSED};
        gml_tensor *out = gml_mha(ctx, cfg, &w, in).out;
        gml_graph *g = out ? gml_build_graph(ctx, &out, 1) : NULL;
        CHECK(g && gml_graph_plan(g, NULL) == GML_OK, "mha graph: %s",
              g ? gml_graph_error(g) : gml_last_error(ctx));
        if (!g) continue;
        for (int l = 0; l < gml_graph_n_leafs(g); l++) {
            gml_tensor *t = gml_graph_leaf(g, l);
            float *x = gml_graph_data(g, t);
            for (int64_t e = 0; e < gml_nelements(t); e++) x[e] = chk_uniform(&rng, -1.0f, 1.0f);
        }
        float *y = gml_graph_data(g, out);
        const size_t bytes = gml_nbytes(out);
        char *ref = malloc(bytes);
        const gml_isa isas[] = {GML_ISA_AUTO, GML_ISA_SCALAR, GML_ISA_AVX2, GML_ISA_REFERENCE};
        for (int ii = 0; ii < (quick ? 1 : 4); ii++) { /* quick (valgrind): the fast ISA, once */
            if (gml_set_isa(isas[ii]) != GML_OK) continue;
            for (int nth = 1; nth <= (quick ? 2 : 4); nth++)
                for (int rep = 0; rep < (quick ? 1 : 5); rep++) {
                    chk_poison_bytes(y, bytes);
                    CHECK(gml_graph_compute(g, nth) == GML_OK, "%s", gml_graph_error(g));
                    if (nth == 1 && rep == 0) memcpy(ref, y, bytes);
                    else if (memcmp(ref, y, bytes) != 0 && rep == 0)
                        CHECK(false, "%s mha, isa %s: %d threads differ from 1",
                              fused ? "fused" : "unfused", gml_isa_name(isas[ii]), nth);
                    const int barriers = check_schedule(g, fused ? "fused mha" : "unfused mha");
                    if (rep || ii) continue;
                    /* what the plan is for: the projections side by side, the
                     * small middle on thread 0 alone, few barriers */
                    CHECK(sched_of(g, "k") == 0, "%d threads: k runs beside q (schedule %d)", nth,
                          sched_of(g, "k"));
                    if (fused) {
                        CHECK(sched_of(g, "v") == 0, "%d threads: v runs beside q and k", nth);
                        CHECK(barriers == 2, "%d threads: fused mha has %d barriers, want 2", nth, barriers);
                    } else {
                        const int alone = GML_SCHED_ALONE;
                        CHECK(sched_of(g, "scores") == (GML_SCHED_BARRIER | alone) &&
                                  sched_of(g, "attn") == alone && sched_of(g, "ctx_merged") == alone,
                              "%d threads: scores %d attn %d ctx_merged %d", nth, sched_of(g, "scores"),
                              sched_of(g, "attn"), sched_of(g, "ctx_merged"));
                        CHECK(barriers <= 4, "%d threads: unfused mha has %d barriers, want <= 4", nth,
                              barriers);
                    }
                }
        }
        gml_set_isa(GML_ISA_AUTO);
        free(ref);
        gml_graph_free(g);
        gml_free(ctx);
    }
}

/* Two independent gathers that run side by side both fail: the earlier
 * node's message wins every time, whichever thread fails first. */
static void test_failure_order(void) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 8 << 20});
    gml_tensor *t1 = leaf(ctx, "table1", 2, (int64_t[]){8, 64});
    gml_tensor *t2 = leaf(ctx, "table2", 2, (int64_t[]){8, 64});
    gml_tensor *i1 = gml_set_name(gml_new_tensor_1d(ctx, GML_I32, 8192), "idx1");
    gml_tensor *i2 = gml_set_name(gml_new_tensor_1d(ctx, GML_I32, 8192), "idx2");
    for (int e = 0; e < 8192; e++) ((int32_t *)i1->data)[e] = ((int32_t *)i2->data)[e] = e % 8;
    ((int32_t *)i1->data)[8191] = 8; /* the first fails late */
    ((int32_t *)i2->data)[0] = -1;   /* the second at once */
    gml_tensor *outs[] = {gml_get_rows(ctx, t1, i1), gml_get_rows(ctx, t2, i2)};
    gml_graph *g = gml_build_graph(ctx, outs, 2);
    CHECK(g != NULL, "%s", gml_last_error(ctx));
    for (int nth = 1; g && nth <= (quick ? 2 : 4); nth++)
        for (int rep = 0; rep < (quick ? 1 : 10); rep++) {
            CHECK(gml_graph_compute(g, nth) == GML_ERR_INVALID, "bad indices computed");
            if (rep == 0 && nth > 1)
                CHECK(gml_graph_node_schedule(g, 1) == 0, "%d threads: the gathers are not side by side",
                      nth);
            if (!strstr(gml_graph_error(g), "get_rows(table1, idx1): index 8 at flat position 8191")) {
                CHECK(false, "%d threads: message '%s'", nth, gml_graph_error(g));
                break;
            }
        }
    gml_graph_free(g);
    gml_free(ctx);
}

int main(int argc, char **argv) {
    quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    struct big b = build_big();
    const int all[] = {2, 3, 4, 7, 16, 1, 4}, few[] = {2, 3, 7};
    test_determinism(&b, GML_ISA_AUTO, quick ? few : all, quick ? 3 : 7);
    test_determinism(&b, GML_ISA_REFERENCE, quick ? few : all, quick ? 3 : 7);
    test_callback(&b);
    struct big a = build_attn();
    const int attn_counts[] = {2, 3, 4, 7}; /* against 1 */
    test_determinism(&a, GML_ISA_AUTO, attn_counts, quick ? 2 : 4);
    test_determinism(&a, GML_ISA_REFERENCE, attn_counts, quick ? 2 : 4);
    gml_graph_free(a.g);
    gml_free(a.ctx);
    const int counts[] = {1, 2, 3, 4, 7, 16};
    for (int i = 0; i < 6; i++) {
        if (quick && counts[i] > 4) continue;
        test_primitives(counts[i]);
        test_nan_trap(counts[i]);
    }
    test_pools();
    test_schedule_mha();
    test_failure_order();
    gml_graph_free(b.g);
    gml_free(b.ctx);
    return chk_summary();
}
