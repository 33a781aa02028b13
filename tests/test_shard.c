/* Context-parallel decoding (mpi/shard.c, <ggmlite/mpi.h>) without MPI: P =
 * 1..4 ranks simulated in one process. Each rank's shard takes its prompt
 * rows and the tokens it holds; each step's partials (computed at 1 to 4
 * threads, varied by rank) are placed in rank order as gml_mpi_gather_f32
 * places them and merged by gml_shard_attn_out. Against the single-process
 * decode (gml_attn_decode over a gml_kv_cache of the whole context, fed the
 * same inputs step by step) under every ISA the CPU has: the prompt's last
 * output and every decoded token within 1e-6 of the largest output; at P = 1
 * every decode step bitwise on the fast ISAs (the same flash_attn chunks over
 * the same keys),
 * the prompt too when it is decode-sized (T H / G <= 8); and each run
 * bitwise equal to the run with other thread counts per rank. Cases: MHA
 * and GQA, biases, rope, sinks, window + ALiBi + softcap, B = 1..3; the
 * LLaMA layer (gml_shard_llama_*, against gml_llama_decode); f16 and bf16
 * shards (against the single process's f16 or bf16 cache); shards
 * smaller than the context (P C = T + N exactly, and more than needed),
 * ranks holding nothing. Also the shard's bookkeeping and the refusals with
 * their messages. */
#include <ggmlite/kv_cache.h>
#include <ggmlite/mpi.h>

#include "check.h"

#include <inttypes.h>

#define TOL 1e-6

static const gml_isa ISAS[] = {GML_TEST_ISAS};

static gml_tensor *rnd(gml_context *ctx, chk_rng *r, int n, const int64_t *ne, float a) {
    gml_tensor *t = gml_new_tensor(ctx, GML_F32, n, ne);
    chk_fill_uniform(t, r, -a, a);
    return t;
}

typedef struct dcase {
    const char *name;
    int64_t B, T, N, D;
    int H, G;
    bool bias, rope, sinks;
    int64_t window;
    float softcap, alibi;
    int64_t extra; /* positions per rank beyond ceil((T + N) / P) */
    int64_t ffn;   /* > 0: the LLaMA layer (gml_shard_llama_*) with this MLP width */
    gml_type type; /* of the shards and of the single process's cache */
} dcase;

/* The block decoded: the attention block, or the LLaMA layer (lc set). */
typedef struct model {
    const gml_attn_config *cfg;
    const gml_attn_weights *w;
    const gml_llama_config *lc;
    const gml_llama_weights *lw;
} model;

static gml_tensor *part_of(gml_context *ctx, const model *m, gml_tensor *xn, gml_tensor *xq,
                           const gml_kv_shard_step *st) {
    return m->lc ? gml_shard_llama_partial(ctx, m->lc, m->lw, xn, xq, st)
                 : gml_shard_attn_partial(ctx, m->cfg, m->w, xn, xq, st);
}

static gml_tensor *out_of(gml_context *ctx, const model *m, gml_tensor *parts, int P, gml_tensor *xq) {
    return m->lc ? gml_shard_llama_out(ctx, m->lc, m->lw, parts, P, xq) : gml_shard_attn_out(ctx, m->cfg, m->w, parts, P);
}

enum { PMAX = 4 };

/* One rank: its context, shard, graphs. */
typedef struct rank_s {
    gml_context *ctx;
    gml_kv_shard *shard;
    gml_tensor *x, *x1; /* its copy of the prompt, the step's input */
    gml_kv_shard_step sp, so, sr;
    gml_tensor *pp, *po, *pr;
    gml_graph *gp, *go, *gr;
} rank_s;

/* got (n floats) against want: bitwise, or within TOL of max |want|; worst error kept. */
static double worst;
static void compare(const float *got, const float *want, int64_t n, bool bitwise, const char *what) {
    const double rel = CHECK_REL_CLOSE(got, want, n, bitwise, TOL, what);
    if (rel > worst) worst = rel;
}

/* The sharded decode at P ranks: the prompt's last output, then N tokens each fed
 * want's input (the single process's output before it); outputs into got [(N + 1) B D].
 * Rank k computes at 1 + (k + shift) % 4 threads. */
static bool sharded(const dcase *c, const model *m, const gml_tensor *x, const float *want, int P,
                    int shift, float *got) {
    const int64_t B = c->B, D = c->D, H = c->H, dk = D / H, L = c->T + c->N;
    const int64_t C = (L + P - 1) / P + c->extra;
    rank_s rk[PMAX] = {{0}};
    bool ok = true;
    gml_context *mctx = chk_ctx(2 << 20);
    gml_tensor *parts = gml_new_tensor_4d(mctx, GML_F32, P * B, H, 1, dk + 2);
    gml_tensor *xq = gml_new_tensor_3d(mctx, GML_F32, B, 1, D); /* the step's input (the layer's residual) */
    gml_tensor *y = out_of(mctx, m, parts, P, xq);
    gml_graph *gy = y ? gml_build_graph(mctx, &y, 1) : NULL;
    ok = CHECK(gy, "shard_attn_out: %s", gml_last_error(mctx));
    for (int k = 0; k < P && ok; k++) {
        rank_s *r = &rk[k];
        char err[256];
        r->ctx = chk_ctx(4 << 20);
        r->shard = gml_kv_shard_new((gml_kv_shard_params){.batch = B, .n_kv_heads = c->G, .d_k = dk,
                                                          .capacity = C, .type = c->type, .rank = k,
                                                          .n_ranks = P},
                                    err, sizeof err);
        if (!CHECK(r->shard, "kv_shard_new: %s", err)) {
            ok = false;
            break;
        }
        r->x = gml_new_tensor_3d(r->ctx, GML_F32, B, c->T, D);
        memcpy(r->x->data, x->data, gml_nbytes(x));
        r->x1 = gml_new_tensor_3d(r->ctx, GML_F32, B, 1, D);
        const int64_t n = gml_kv_shard_owned(r->shard, c->T), a = k * C < c->T ? k * C : c->T;
        r->sp = gml_kv_shard_step_new(r->ctx, r->shard, n, 1);
        /* strided views of the prompt (B > 1): its rows, its last row */
        r->pp = part_of(r->ctx, m, n ? gml_slice(r->ctx, r->x, 1, a, n) : NULL,
                        gml_slice(r->ctx, r->x, 1, c->T - 1, 1), &r->sp);
        r->so = gml_kv_shard_step_new(r->ctx, r->shard, 1, 1);
        r->po = part_of(r->ctx, m, r->x1, r->x1, &r->so);
        r->sr = gml_kv_shard_step_new(r->ctx, r->shard, 0, 1);
        r->pr = part_of(r->ctx, m, NULL, r->x1, &r->sr);
        r->gp = r->pp ? gml_build_graph(r->ctx, &r->pp, 1) : NULL;
        r->go = r->po ? gml_build_graph(r->ctx, &r->po, 1) : NULL;
        r->gr = r->pr ? gml_build_graph(r->ctx, &r->pr, 1) : NULL;
        ok = CHECK(r->gp && r->go && r->gr, "rank %d: %s", k, gml_last_error(r->ctx));
    }
    const size_t np = (size_t)(B * H * (dk + 2));
    for (int64_t s = 0; s <= c->N && ok; s++) { /* s = 0: the prompt */
        for (int k = 0; k < P && ok; k++) {
            rank_s *r = &rk[k];
            char err[512];
            const bool own = s > 0 && gml_kv_shard_owned(r->shard, 1) == 1;
            gml_kv_shard_step *st = s == 0 ? &r->sp : own ? &r->so : &r->sr;
            gml_graph *g = s == 0 ? r->gp : own ? r->go : r->gr;
            if (s > 0) memcpy(r->x1->data, want + (s - 1) * B * D, (size_t)(B * D) * sizeof(float));
            ok = CHECK(gml_kv_shard_step_compute(st, g, s == 0 ? c->T : 1, 1 + (k + shift) % 4, err,
                                                 sizeof err) == GML_OK, "rank %d step %" PRId64 ": %s", k, s, err);
            if (ok) memcpy((float *)parts->data + k * np, (s == 0 ? r->pp : own ? r->po : r->pr)->data,
                           np * sizeof(float));
        }
        for (int64_t b = 0; b < B; b++)
            memcpy((float *)xq->data + b * D,
                   s ? want + ((s - 1) * B + b) * D : (const float *)x->data + (b * c->T + c->T - 1) * D,
                   (size_t)D * sizeof(float));
        ok = ok && CHECK(gml_graph_compute(gy, 1 + shift % 3) == GML_OK, "merge: %s", gml_graph_error(gy));
        if (ok) memcpy(got + s * B * D, y->data, (size_t)(B * D) * sizeof(float));
    }
    if (ok) { /* the bookkeeping: each rank holds its range of the L positions */
        for (int k = 0; k < P; k++) {
            const int64_t held = L - k * C < 0 ? 0 : L - k * C < C ? L - k * C : C;
            CHECK(gml_kv_shard_len(rk[k].shard) == L && gml_kv_shard_held(rk[k].shard) == held &&
                      gml_kv_shard_first(rk[k].shard) == k * C,
                  "rank %d: len %" PRId64 ", held %" PRId64 ", first %" PRId64 "; want %" PRId64 ", %"
                  PRId64 ", %" PRId64, k, gml_kv_shard_len(rk[k].shard), gml_kv_shard_held(rk[k].shard),
                  gml_kv_shard_first(rk[k].shard), L, held, k * C);
        }
    }
    for (int k = 0; k < P; k++) {
        gml_graph *g[3] = {rk[k].gp, rk[k].go, rk[k].gr};
        for (int i = 0; i < 3; i++)
            if (g[i]) gml_graph_free(g[i]);
        gml_kv_shard_free(rk[k].shard);
        gml_free(rk[k].ctx);
    }
    if (gy) gml_graph_free(gy);
    gml_free(mctx);
    return ok;
}

static void decode_case(const dcase *c) {
    chk_case("shard %s", c->name);
    gml_context *ctx = chk_ctx(8 << 20);
    chk_rng r = chk_seed(0x5ad + (uint64_t)c->H * 7 + (uint64_t)c->T);
    const int64_t B = c->B, D = c->D, kv = c->G * (D / c->H), N = c->N;
    gml_tensor *x = rnd(ctx, &r, 3, (int64_t[]){B, c->T, D}, 1.0f);
    const float a = 1.0f / sqrtf((float)D);
    gml_attn_weights w = {.w_q = rnd(ctx, &r, 2, (int64_t[]){D, D}, a), .w_k = rnd(ctx, &r, 2, (int64_t[]){kv, D}, a),
                          .w_v = rnd(ctx, &r, 2, (int64_t[]){kv, D}, a), .w_o = rnd(ctx, &r, 2, (int64_t[]){D, D}, a)};
    if (c->bias)
        w.b_q = rnd(ctx, &r, 1, (int64_t[]){D}, 0.5f), w.b_k = rnd(ctx, &r, 1, (int64_t[]){kv}, 0.5f),
        w.b_v = rnd(ctx, &r, 1, (int64_t[]){kv}, 0.5f), w.b_o = rnd(ctx, &r, 1, (int64_t[]){D}, 0.5f);
    if (c->sinks) w.sinks = rnd(ctx, &r, 1, (int64_t[]){c->H}, 2.0f);
    const int64_t F = c->ffn;
    gml_llama_weights lw = {.attn_norm = rnd(ctx, &r, 1, (int64_t[]){D}, 1.0f), .wq = w.w_q, .bq = w.b_q,
                            .wk = w.w_k, .bk = w.b_k, .wv = w.w_v, .bv = w.b_v, .wo = w.w_o, .bo = w.b_o,
                            .sinks = w.sinks, .mlp_norm = rnd(ctx, &r, 1, (int64_t[]){D}, 1.0f)};
    if (F) {
        lw.w_gate = rnd(ctx, &r, 2, (int64_t[]){F, D}, a), lw.w_up = rnd(ctx, &r, 2, (int64_t[]){F, D}, a);
        lw.w_down = rnd(ctx, &r, 2, (int64_t[]){D, F}, 1.0f / sqrtf((float)F));
    }
    const gml_llama_config lc = {.n_heads = c->H, .n_kv_heads = c->G, .rope_theta = 500, .window = c->window,
                                 .softcap = c->softcap};
    gml_attn_config cfg = {.dims = {.d_model = D, .n_heads = c->H, .n_kv_heads = c->G},
                           .score = {.causal = GML_CAUSAL_BOTTOM_RIGHT, .window = c->window,
                                     .softcap = c->softcap, .alibi_max_bias = c->alibi},
                           .pos = {.kind = c->rope ? GML_POS_ROPE : GML_POS_NONE, .rope.theta = 500}};
    /* the single process: one cache of the whole context, a prompt step, N one-token steps */
    char err[512];
    gml_kv_cache *cache = gml_kv_cache_new((gml_kv_cache_params){.n_layers = 1, .batch = B, .n_kv_heads = c->G,
                                                                 .max_len = c->T + N, .d_k = D / c->H,
                                                                 .type = c->type},
                                           err, sizeof err);
    gml_tensor *x1 = gml_new_tensor_3d(ctx, GML_F32, B, 1, D);
    gml_kv_step sp = gml_kv_step_new(ctx, cache, c->T), s1 = gml_kv_step_new(ctx, cache, 1);
    gml_tensor *yp = F ? gml_llama_decode(ctx, &lc, &lw, x, &sp, 0) : gml_attn_decode(ctx, cfg, &w, x, &sp, 0);
    gml_tensor *y1 = F ? gml_llama_decode(ctx, &lc, &lw, x1, &s1, 0) : gml_attn_decode(ctx, cfg, &w, x1, &s1, 0);
    const model m = {.cfg = &cfg, .w = &w, .lc = F ? &lc : NULL, .lw = &lw};
    gml_graph *gp = yp ? gml_build_graph(ctx, &yp, 1) : NULL, *g1 = y1 ? gml_build_graph(ctx, &y1, 1) : NULL;
    if (!CHECK(cache && gp && g1, "the single-process decode: %s %s", err, gml_last_error(ctx))) {
        gml_kv_cache_free(cache);
        return gml_free(ctx);
    }
    const size_t n = (size_t)((N + 1) * B * D);
    float *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got), *again = malloc(n * sizeof *again);
    for (size_t i = 0; i < sizeof ISAS / sizeof *ISAS; i++) {
        if (gml_set_isa(ISAS[i]) != GML_OK) continue;
        /* want: [0] the prompt's last output, [s] token s's output (its input want[s - 1]) */
        gml_kv_cache_truncate(cache, 0);
        bool ok = CHECK(gml_kv_step_compute(&sp, gp, 2, err, sizeof err) == GML_OK, "prompt: %s", err);
        for (int64_t b = 0; ok && b < B; b++)
            memcpy(want + b * D, (float *)yp->data + (b * c->T + c->T - 1) * D, (size_t)D * sizeof *want);
        for (int64_t s = 1; ok && s <= N; s++) {
            memcpy(x1->data, want + (s - 1) * B * D, (size_t)(B * D) * sizeof *want);
            ok = CHECK(gml_kv_step_compute(&s1, g1, 2, err, sizeof err) == GML_OK, "step: %s", err);
            memcpy(want + s * B * D, y1->data, (size_t)(B * D) * sizeof *want);
        }
        if (!ok) continue;
        for (int P = 1; P <= PMAX; P++) {
            char what[160];
            if (!sharded(c, &m, x, want, P, 0, got) || !sharded(c, &m, x, want, P, 2, again)) continue;
            snprintf(what, sizeof what, "%s %s P=%d: other threads per rank", c->name, gml_isa_name(ISAS[i]), P);
            compare(again, got, (int64_t)n, true, what);
            /* P = 1 (the whole context in one shard, C = T + N): the decode steps are flash_attn's
             * chunks over the same keys; the prompt's row too when the prompt is decode-sized */
            const bool one = P == 1 && c->extra == 0 && ISAS[i] != GML_ISA_REFERENCE; /* the reference
                kernels of flash_attn (one pass in double) and of the partial (m, l in float) differ */
            snprintf(what, sizeof what, "%s %s P=%d: the prompt's last output", c->name, gml_isa_name(ISAS[i]), P);
            compare(got, want, B * D, one && c->T * (c->H / c->G) <= 8, what);
            snprintf(what, sizeof what, "%s %s P=%d: the decoded tokens", c->name, gml_isa_name(ISAS[i]), P);
            compare(got + B * D, want + B * D, N * B * D, one, what);
        }
    }
    gml_set_isa(GML_ISA_AUTO);
    free(want);
    free(got);
    free(again);
    gml_graph_free(gp);
    gml_graph_free(g1);
    gml_kv_cache_free(cache);
    gml_free(ctx);
}

/* ---- bookkeeping and refusals ------------------------------------------------------ */

static void refusals(void) {
    chk_case("shard refusals");
    char err[512];
    gml_kv_shard_params p = {.batch = 2, .n_kv_heads = 2, .d_k = 8, .capacity = 5, .rank = 4, .n_ranks = 4};
    CHECK(!gml_kv_shard_new(p, err, sizeof err), "rank 4 of 4 accepted");
    CHECK_CONTAINS(err, "kv_shard: rank 4 of 4 ranks");
    p.rank = 1, p.capacity = 0;
    CHECK(!gml_kv_shard_new(p, err, sizeof err), "capacity 0 accepted");
    CHECK_CONTAINS(err, "capacity 0 positions per rank over 4 ranks");
    p.capacity = 5, p.type = GML_Q8_0;
    CHECK(!gml_kv_shard_new(p, err, sizeof err), "q8_0 accepted");
    CHECK_CONTAINS(err, "kv_shard: type q8_0: K and V may be f32, f16 or bf16");
    p.type = GML_F32, p.n_ranks = 2;
    gml_kv_shard *s = gml_kv_shard_new(p, err, sizeof err); /* rank 1 of 2: positions 5 .. 9 */
    if (!CHECK(s, "kv_shard_new: %s", err)) return;
    CHECK(gml_kv_shard_first(s) == 5 && gml_kv_shard_owner(s, 4) == 0 && gml_kv_shard_owner(s, 9) == 1 &&
              gml_kv_shard_owner(s, 10) == -1 && gml_kv_shard_owned(s, 7) == 2 && gml_kv_shard_bytes(s) == 2 * 2 * 2 * 5 * 8 * 4,
          "first %" PRId64 ", owners %d %d %d, owned %" PRId64 ", bytes %zu", gml_kv_shard_first(s),
          gml_kv_shard_owner(s, 4), gml_kv_shard_owner(s, 9), gml_kv_shard_owner(s, 10), gml_kv_shard_owned(s, 7),
          gml_kv_shard_bytes(s));
    gml_context *ctx = chk_ctx(8 << 20);
    chk_rng r = chk_seed(3);
    gml_tensor *x = rnd(ctx, &r, 3, (int64_t[]){2, 1, 32}, 1.0f);
    gml_attn_weights w = {.w_q = rnd(ctx, &r, 2, (int64_t[]){32, 32}, 0.2f), .w_k = rnd(ctx, &r, 2, (int64_t[]){16, 32}, 0.2f),
                          .w_v = rnd(ctx, &r, 2, (int64_t[]){16, 32}, 0.2f), .w_o = rnd(ctx, &r, 2, (int64_t[]){32, 32}, 0.2f)};
    gml_attn_config cfg = {.dims = {.n_heads = 4, .n_kv_heads = 2}, .score.causal = GML_CAUSAL_BOTTOM_RIGHT};
    gml_kv_shard_step bad = gml_kv_shard_step_new(ctx, s, 6, 1);
    CHECK(!bad.q_pos, "6 new rows in a shard of 5 accepted");
    CHECK_CONTAINS(gml_last_error(ctx), "kv_shard_step: 6 new rows (0 .. the shard's 5 positions)");
    gml_clear_error(ctx);
    gml_kv_shard_step st = gml_kv_shard_step_new(ctx, s, 0, 1);
    gml_attn_config nc = cfg;
    nc.score.causal = GML_CAUSAL_NONE;
    CHECK(!gml_shard_attn_partial(ctx, &nc, &w, NULL, x, &st), "causal none accepted");
    CHECK_CONTAINS(gml_last_error(ctx), "shard_attn: decoding is causal");
    gml_clear_error(ctx);
    gml_attn_config g4 = cfg;
    g4.dims.n_kv_heads = 4;
    CHECK(!gml_shard_attn_partial(ctx, &g4, &w, NULL, x, &st), "4 kv heads accepted");
    CHECK_CONTAINS(gml_last_error(ctx), "shard_attn: 4 kv heads of d_k 8 (x_q [2,1,32], 4 heads) do not fit the "
                   "shard's 2 kv heads of d_k 8");
    gml_clear_error(ctx);
    CHECK(!gml_shard_attn_partial(ctx, &cfg, &w, x, x, &st), "x_new with n_new 0 accepted");
    CHECK_CONTAINS(gml_last_error(ctx), "but the step writes no rows (n_new 0)");
    gml_clear_error(ctx);
    gml_tensor *x3 = rnd(ctx, &r, 3, (int64_t[]){3, 1, 32}, 1.0f);
    CHECK(!gml_shard_attn_partial(ctx, &cfg, &w, NULL, x3, &st), "batch 3 accepted");
    CHECK_CONTAINS(gml_last_error(ctx), "is f32 [3,1,32], expected f32 [2, 1, D]");
    gml_clear_error(ctx);
    gml_tensor *parts = rnd(ctx, &r, 4, (int64_t[]){3, 4, 1, 10}, 1.0f);
    CHECK(!gml_shard_attn_out(ctx, &cfg, &w, parts, 2), "3 partial rows over 2 ranks accepted");
    CHECK_CONTAINS(gml_last_error(ctx), "expected f32 [P B, H, n_query, d_k + 2] with P = 2, H = 4");
    gml_clear_error(ctx);
    gml_llama_weights lw = {.wq = w.w_q, .wk = w.w_k, .wv = w.w_v, .wo = w.w_o};
    CHECK(!gml_shard_llama_partial(ctx, &(gml_llama_config){.n_heads = 32}, &lw, NULL, x, &st), "head_dim 1 accepted");
    CHECK_CONTAINS(gml_last_error(ctx), "shard_llama: d_model 32 and heads 32: heads must divide d_model into an "
                   "even head_dim");
    gml_clear_error(ctx);
    /* compute: the step's rows against what this rank holds, and the context's end */
    gml_tensor *pr = gml_shard_attn_partial(ctx, &cfg, &w, NULL, x, &st);
    gml_graph *g = pr ? gml_build_graph(ctx, &pr, 1) : NULL;
    if (CHECK(g, "build: %s", gml_last_error(ctx))) {
        CHECK(gml_kv_shard_step_compute(&st, g, 4, 1, err, sizeof err) == GML_OK, "4 tokens on rank 0: %s", err);
        CHECK(gml_kv_shard_step_compute(&st, g, 2, 1, err, sizeof err) == GML_ERR_INVALID, "a graph writing 0 of 1 held");
        CHECK_CONTAINS(err, "rank 1 holds 1 of the positions [4, 6), but the step's graph writes 0 rows");
        CHECK(gml_kv_shard_step_compute(&st, g, 7, 1, err, sizeof err) == GML_ERR_INVALID, "an over-full context");
        CHECK_CONTAINS(err, "the context of 11 positions would pass the sharded cache's 2 ranks x 5 = 10 positions");
        CHECK(gml_kv_shard_len(s) == 4 && gml_kv_shard_truncate(s, 2) && !gml_kv_shard_truncate(s, 3),
              "len %" PRId64 ", truncate", gml_kv_shard_len(s));
        const float *o = pr->data; /* rank 1 holds none of positions 0 .. 3: (0, -inf, 0) */
        CHECK(o[8] == -INFINITY && o[9] == 0 && o[0] == 0, "an empty shard's partial: m %g, l %g", o[8], o[9]);
        gml_graph_free(g);
    }
    gml_kv_shard_free(s);
    gml_free(ctx);
}

int main(void) {
    static const dcase CASES[] = {
        {"mha", 2, 7, 6, 32, 4, 4, false, false, false, 0, 0, 0, 0, 0, GML_F32},
        {"mha decode-sized prompt, biases", 1, 2, 5, 24, 4, 4, true, false, false, 0, 0, 0, 0, 0, GML_F32},
        {"gqa rope sinks", 3, 9, 7, 48, 6, 2, false, true, true, 0, 0, 0, 0, 0, GML_F32},
        {"gqa window alibi softcap, spare room", 2, 11, 9, 40, 4, 2, true, true, false, 5, 2.5f, 8, 3, 0, GML_F32},
        {"mqa rope, prompt 3 (decode-sized)", 1, 3, 8, 64, 8, 1, false, true, false, 0, 0, 0, 1, 0, GML_F32},
        {"llama gqa sinks", 2, 10, 6, 48, 6, 2, false, true, true, 0, 0, 0, 0, 80, GML_F32},
        {"llama biases window softcap, spare room", 1, 9, 7, 32, 4, 4, true, true, false, 4, 3.0f, 0, 2, 56, GML_F32},
        {"gqa f16 shards, rope sinks", 2, 9, 7, 48, 6, 3, false, true, true, 0, 0, 0, 0, 0, GML_F16},
        {"mha bf16 shards, window", 1, 12, 5, 32, 4, 4, true, false, false, 6, 0, 0, 0, 0, GML_BF16},
        {"llama f16 shards", 1, 2, 6, 32, 4, 2, false, true, false, 0, 0, 0, 0, 40, GML_F16},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) decode_case(&CASES[i]);
    refusals();
    printf("worst error %.3g of max |want|\n", worst);
    return chk_summary();
}
