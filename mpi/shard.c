/* Context-parallel decoding (ggmlite/mpi.h): a KV cache sharded by position
 * over the ranks, each rank's partial attention over its shard, the merge
 * in rank order. Public ops and the attention stages only; the MPI part is
 * one gather. */
#include <ggmlite/kv_cache.h>
#include <ggmlite/mpi.h>

#include "misuse.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHAPE(t, buf) gml_format_shape((t), (buf), sizeof(buf))

struct gml_kv_shard {
    gml_kv_shard_params p;
    gml_kv_cache *cache; /* [B, G, C, d_k]: the storage, max_len = C */
    int64_t len;         /* the whole context's length */
};

static void errf(char *err, size_t size, const char *fmt, ...) GML_PRINTF(3, 4);
static void errf(char *err, size_t size, const char *fmt, ...) {
    if (!err || !size) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
}

gml_kv_shard *gml_kv_shard_new(gml_kv_shard_params p, char *err, size_t err_size) {
    errf(err, err_size, "%s", "");
    if (p.n_ranks < 1 || p.rank < 0 || p.rank >= p.n_ranks) {
        errf(err, err_size, "kv_shard: rank %d of %d ranks", p.rank, p.n_ranks);
        return NULL;
    }
    if (p.capacity < 1 || (double)p.capacity * p.n_ranks > INT32_MAX) {
        errf(err, err_size, "kv_shard: capacity %" PRId64 " positions per rank over %d ranks: "
             "each rank needs >= 1 and P x C must be <= %" PRId32 " (i32 positions)",
             p.capacity, p.n_ranks, INT32_MAX);
        return NULL;
    }
    char why[512];
    gml_kv_cache *c = gml_kv_cache_new((gml_kv_cache_params){.n_layers = 1, .batch = p.batch,
                                                             .n_kv_heads = p.n_kv_heads,
                                                             .max_len = p.capacity, .d_k = p.d_k,
                                                             .type = p.type},
                                       why, sizeof why);
    if (!c) {
        errf(err, err_size, "kv_shard: %s", strncmp(why, "kv_cache: ", 10) ? why : why + 10);
        return NULL;
    }
    gml_kv_shard *s = calloc(1, sizeof *s);
    if (!s) {
        gml_kv_cache_free(c);
        errf(err, err_size, "kv_shard: out of memory");
        return NULL;
    }
    s->p = p;
    s->cache = c;
    gml_set_name(gml_kv_cache_k(c, 0), "k_shard");
    gml_set_name(gml_kv_cache_v(c, 0), "v_shard");
    return s;
}

void gml_kv_shard_free(gml_kv_shard *s) {
    if (!s) return;
    gml_kv_cache_free(s->cache);
    free(s);
}

gml_kv_shard_params gml_kv_shard_get_params(const gml_kv_shard *s) {
    GML_MPI_NONNULL(NULL, s, (gml_kv_shard_params){0});
    return s->p;
}
gml_tensor *gml_kv_shard_k(const gml_kv_shard *s) {
    GML_MPI_NONNULL(NULL, s, NULL);
    return gml_kv_cache_k(s->cache, 0);
}
gml_tensor *gml_kv_shard_v(const gml_kv_shard *s) {
    GML_MPI_NONNULL(NULL, s, NULL);
    return gml_kv_cache_v(s->cache, 0);
}
int64_t gml_kv_shard_len(const gml_kv_shard *s) {
    GML_MPI_NONNULL(NULL, s, 0);
    return s->len;
}
int64_t gml_kv_shard_first(const gml_kv_shard *s) {
    GML_MPI_NONNULL(NULL, s, 0);
    return (int64_t)s->p.rank * s->p.capacity;
}
size_t gml_kv_shard_bytes(const gml_kv_shard *s) {
    GML_MPI_NONNULL(NULL, s, 0);
    return gml_kv_cache_bytes(s->cache);
}

/* Positions of [a, b) in this rank's range [first, first + C). */
static int64_t held_of(const gml_kv_shard *s, int64_t a, int64_t b) {
    const int64_t f = gml_kv_shard_first(s), e = f + s->p.capacity;
    const int64_t lo = a > f ? a : f, hi = b < e ? b : e;
    return hi > lo ? hi - lo : 0;
}

int64_t gml_kv_shard_held(const gml_kv_shard *s) {
    GML_MPI_NONNULL(NULL, s, 0);
    return held_of(s, 0, s->len);
}
int64_t gml_kv_shard_owned(const gml_kv_shard *s, int64_t n) {
    GML_MPI_NONNULL(NULL, s, 0);
    return n > 0 ? held_of(s, s->len, s->len + n) : 0;
}

int gml_kv_shard_owner(const gml_kv_shard *s, int64_t pos) {
    GML_MPI_NONNULL(NULL, s, -1);
    if (pos < 0 || pos >= s->p.capacity * s->p.n_ranks) return -1;
    return (int)(pos / s->p.capacity);
}

bool gml_kv_shard_truncate(gml_kv_shard *s, int64_t len) {
    GML_MPI_NONNULL(NULL, s, false);
    if (len < 0 || len > s->len) return false;
    s->len = len;
    return true;
}

gml_kv_shard_step gml_kv_shard_step_new(gml_context *ctx, gml_kv_shard *s, int64_t n_new,
                                        int64_t n_query) {
    gml_kv_shard_step st = {.shard = s, .n_new = n_new, .n_query = n_query};
    GML_MPI_NONNULL(NULL, ctx, st);
    GML_MPI_NONNULL(ctx, s, st);
    if (!s) {
        gml_set_error(ctx, "kv_shard_step: no shard (NULL)");
        return st;
    }
    if (n_new < 0 || n_new > s->p.capacity || n_query < 1 || n_query > INT32_MAX) {
        gml_set_error(ctx, "kv_shard_step: %" PRId64 " new rows (0 .. the shard's %" PRId64
                      " positions) and %" PRId64 " queries (>= 1) per step", n_new,
                      s->p.capacity, n_query);
        return st;
    }
    const int64_t B = s->p.batch;
    gml_tensor *t[4] = {NULL, NULL, NULL, NULL};
    static const char *const NAMES[4] = {"shard_new_pos", "shard_rows", "shard_q_pos", "shard_lens"};
    for (int i = n_new ? 0 : 2; i < 4; i++) {
        t[i] = gml_new_tensor_2d(ctx, GML_I32, B, i < 2 ? n_new : n_query);
        if (!t[i]) return st;
        gml_set_flags(gml_set_name(t[i], NAMES[i]), GML_FLAG_INPUT);
    }
    st.new_pos = t[0];
    st.rows = t[1];
    st.q_pos = t[2];
    st.lens = t[3];
    return st;
}

#define S "shard_attn"

gml_tensor *gml_shard_attn_partial(gml_context *ctx, const gml_attn_config *cfg,
                                   const gml_attn_weights *w, gml_tensor *x_new, gml_tensor *x_q,
                                   const gml_kv_shard_step *st) {
    GML_MPI_NONNULL(NULL, ctx, NULL);
    GML_MPI_NONNULL(ctx, cfg, NULL);
    GML_MPI_NONNULL(ctx, w, NULL);
    GML_MPI_NONNULL(ctx, st, NULL);
    if (!x_q || !st || !st->q_pos || (st->n_new && !x_new)) {
        if (!gml_last_error(ctx)[0])
            gml_set_error(ctx, S ": %s is NULL", !x_q ? "x_q" : !st || !st->q_pos ? "the step (or its "
                          "positions)" : "x_new (the step writes rows)");
        return NULL;
    }
    if (!cfg || !w) return gml_set_error(ctx, S ": no %s (NULL)", !cfg ? "config" : "weights");
    const gml_kv_shard *s = st->shard;
    const gml_kv_shard_params *sp = &s->p;
    char sx[GML_SHAPE_MAX], sn[GML_SHAPE_MAX];
    if (x_q->type != GML_F32 || x_q->n_dims != 3 || x_q->ne[1] != sp->batch || x_q->ne[2] != st->n_query)
        return gml_set_error(ctx, S ": x_q '%s' is %s %s, expected f32 [%" PRId64 ", %" PRId64 ", D] "
                             "(the shard's batch, the step's queries)", x_q->name,
                             gml_type_name(x_q->type), SHAPE(x_q, sx), sp->batch, st->n_query);
    const int64_t D = x_q->ne[3];
    if (!st->n_new && x_new)
        return gml_set_error(ctx, S ": x_new '%s' %s given, but the step writes no rows (n_new 0)",
                             x_new->name, SHAPE(x_new, sn));
    if (x_new && (x_new->type != GML_F32 || x_new->n_dims != 3 || x_new->ne[1] != sp->batch ||
                  x_new->ne[2] != st->n_new || x_new->ne[3] != D))
        return gml_set_error(ctx, S ": x_new '%s' is %s %s, expected f32 [%" PRId64 ", %" PRId64
                             ", %" PRId64 "] (batch, the step's new rows, x_q's D)", x_new->name,
                             gml_type_name(x_new->type), SHAPE(x_new, sn), sp->batch, st->n_new, D);
    const int H = cfg->dims.n_heads, G = cfg->dims.n_kv_heads ? cfg->dims.n_kv_heads : H;
    if (H < 1 || D % H || G < 1 || G > H || H % G)
        return gml_set_error(ctx, S ": heads %d, kv heads %d and d_model %" PRId64 " do not fit: "
                             "heads must divide d_model and kv heads heads", H, G, D);
    if (G != sp->n_kv_heads || D / H != sp->d_k)
        return gml_set_error(ctx, S ": %d kv heads of d_k %" PRId64 " (x_q %s, %d heads) do not fit "
                             "the shard's %d kv heads of d_k %" PRId64, G, D / H, SHAPE(x_q, sx), H,
                             sp->n_kv_heads, sp->d_k);
    if (cfg->score.causal != GML_CAUSAL_BOTTOM_RIGHT)
        return gml_set_error(ctx, S ": decoding is causal (each token sees the ones before it); "
                             "set cfg.score.causal = GML_CAUSAL_BOTTOM_RIGHT");
    if (cfg->graph.want_weights || cfg->graph.impl == GML_ATTN_UNFUSED)
        return gml_set_error(ctx, S ": the partials are flash_attn's (impl auto or fused, no "
                             "attention weights)");
    if (cfg->score.add_zero_attn || w->bias_k || w->bias_v)
        return gml_set_error(ctx, S ": %s adds key rows outside the cache; not supported",
                             cfg->score.add_zero_attn ? "add_zero_attn" : "bias_k/bias_v");
    if (!(cfg->score.scale >= 0 && cfg->score.scale < INFINITY))
        return gml_set_error(ctx, S ": scale %g must be finite and >= 0 (0: 1/sqrt(d_k))",
                             (double)cfg->score.scale);
    /* the queries: q [B, H, n_query, d_k], rope at their absolute positions */
    gml_attn_qkv qq = gml_attn_project(ctx, cfg, w, (gml_attn_inputs){.query = x_q});
    if (!qq.q) return NULL;
    qq = gml_attn_position(ctx, cfg, qq, (gml_attn_inputs){.query = x_q, .positions = st->q_pos});
    if (!qq.q) return NULL;
    gml_tensor *kc = gml_kv_shard_k(s), *vc = gml_kv_shard_v(s);
    if (x_new) { /* the new rows' K, V: rope at their positions, written at their rows */
        gml_attn_qkv kv = gml_attn_project(ctx, cfg, w, (gml_attn_inputs){.query = x_new});
        if (!kv.k) return NULL;
        kv = gml_attn_position(ctx, cfg, kv, (gml_attn_inputs){.query = x_new, .positions = st->new_pos});
        if (!kv.k) return NULL;
        kc = gml_set_name(gml_set_rows(ctx, kc, kv.k, st->rows), "k_shard_all");
        vc = gml_set_name(gml_set_rows(ctx, vc, kv.v, st->rows), "v_shard_all");
        if (!kc || !vc) return NULL;
    }
    const float scale = cfg->score.scale ? cfg->score.scale : (float)(1.0 / sqrt((double)sp->d_k));
    const gml_attn_opts o = {.valid_lens = st->lens,
                             .positions = st->q_pos,
                             .causal = GML_CAUSAL_BOTTOM_RIGHT,
                             .window = cfg->score.window,
                             .softcap = cfg->score.softcap,
                             .alibi_max_bias = cfg->score.alibi_max_bias};
    return gml_set_name(gml_flash_attn_partial(ctx, qq.q, kc, vc, scale, &o, gml_kv_shard_first(s)),
                        "partial");
}

gml_tensor *gml_shard_attn_out(gml_context *ctx, const gml_attn_config *cfg,
                               const gml_attn_weights *w, gml_tensor *parts, int n_ranks) {
    GML_MPI_NONNULL(NULL, ctx, NULL);
    GML_MPI_NONNULL(ctx, cfg, NULL);
    GML_MPI_NONNULL(ctx, w, NULL);
    if (!parts) {
        if (!gml_last_error(ctx)[0]) gml_set_error(ctx, S ": parts is NULL");
        return NULL;
    }
    if (!cfg || !w) return gml_set_error(ctx, S ": no %s (NULL)", !cfg ? "config" : "weights");
    char sp[GML_SHAPE_MAX];
    const int H = cfg->dims.n_heads;
    if (parts->type != GML_F32 || parts->n_dims != 4 || n_ranks < 1 || parts->ne[0] % n_ranks ||
        parts->ne[1] != H || parts->ne[3] < 3)
        return gml_set_error(ctx, S ": parts '%s' is %s %s, expected f32 [P B, H, n_query, d_k + 2] "
                             "with P = %d, H = %d", parts->name, gml_type_name(parts->type),
                             SHAPE(parts, sp), n_ranks, H);
    const int64_t B = parts->ne[0] / n_ranks;
    gml_tensor *m = NULL;
    for (int r = 0; r < n_ranks; r++) { /* rank order: key order */
        gml_tensor *p = gml_slice(ctx, parts, 0, r * B, B);
        m = m ? gml_attn_partial_merge(ctx, m, p) : p;
        if (!m) return NULL;
    }
    gml_tensor *heads = gml_set_name(gml_attn_partial_finish(ctx, m, w->sinks), "heads");
    return heads ? gml_set_name(gml_attn_merge(ctx, w, heads), "out") : NULL;
}

/* ---- the LLaMA layer ------------------------------------------------------------------ */

#define LL "shard_llama"

/* The layer's attention as the attention stages see it (as models/llama.c). */
static bool llama_attn(gml_context *ctx, const gml_llama_config *cfg, const gml_llama_weights *w,
                       const gml_tensor *x, gml_attn_config *ac, gml_attn_weights *aw, float *eps) {
    if (!cfg || !w) {
        gml_set_error(ctx, LL ": no %s (NULL)", !cfg ? "config" : "weights");
        return false;
    }
    char sx[GML_SHAPE_MAX];
    if (x->type != GML_F32 || x->n_dims != 3) {
        gml_set_error(ctx, LL ": x_q '%s' is %s %s, expected f32 [B, n_query, D]", x->name,
                      gml_type_name(x->type), SHAPE(x, sx));
        return false;
    }
    const int64_t D = x->ne[3];
    if (cfg->n_heads < 1 || D % cfg->n_heads || (D / cfg->n_heads) % 2) {
        gml_set_error(ctx, LL ": d_model %" PRId64 " and heads %d: heads must divide d_model into "
                      "an even head_dim (rope rotates pairs)", D, cfg->n_heads);
        return false;
    }
    if (!(cfg->rms_eps >= 0 && cfg->rms_eps < INFINITY)) {
        gml_set_error(ctx, LL ": rms_eps %g must be finite and >= 0 (0: 1e-6)", (double)cfg->rms_eps);
        return false;
    }
    *eps = cfg->rms_eps != 0 ? cfg->rms_eps : 1e-6f;
    *ac = (gml_attn_config){
        .dims = {.d_model = D, .n_heads = cfg->n_heads, .n_kv_heads = cfg->n_kv_heads},
        .score = {.causal = GML_CAUSAL_BOTTOM_RIGHT, .window = cfg->window, .softcap = cfg->softcap},
        .pos = {.kind = GML_POS_ROPE, .rope = {.theta = cfg->rope_theta != 0 ? cfg->rope_theta : 10000.0f}},
    };
    *aw = (gml_attn_weights){.w_q = w->wq, .b_q = w->bq, .w_k = w->wk, .b_k = w->bk, .w_v = w->wv,
                             .b_v = w->bv, .w_o = w->wo, .b_o = w->bo, .sinks = w->sinks};
    return true;
}

/* The attention's message, prefixed by the layer's name. */
static gml_tensor *llama_fail(gml_context *ctx) {
    char msg[768];
    snprintf(msg, sizeof msg, "%s", gml_last_error(ctx));
    return gml_set_error(ctx, LL ": %s", msg);
}

gml_tensor *gml_shard_llama_partial(gml_context *ctx, const gml_llama_config *cfg,
                                    const gml_llama_weights *w, gml_tensor *x_new, gml_tensor *x_q,
                                    const gml_kv_shard_step *step) {
    GML_MPI_NONNULL(NULL, ctx, NULL);
    GML_MPI_NONNULL(ctx, cfg, NULL);
    GML_MPI_NONNULL(ctx, w, NULL);
    GML_MPI_NONNULL(ctx, step, NULL);
    if (!x_q) return gml_last_error(ctx)[0] ? NULL : gml_set_error(ctx, LL ": x_q is NULL");
    gml_attn_config ac;
    gml_attn_weights aw;
    float eps;
    if (!llama_attn(ctx, cfg, w, x_q, &ac, &aw, &eps)) return NULL;
    gml_tensor *nq = gml_set_name(gml_rms_norm(ctx, x_q, w->attn_norm, eps), "attn_norm");
    gml_tensor *nn = x_new == x_q ? nq
                     : x_new      ? gml_set_name(gml_rms_norm(ctx, x_new, w->attn_norm, eps), "attn_norm_new")
                                  : NULL;
    if (!nq || (x_new && !nn)) return llama_fail(ctx);
    gml_tensor *p = gml_shard_attn_partial(ctx, &ac, &aw, nn, nq, step);
    return p ? p : llama_fail(ctx);
}

gml_tensor *gml_shard_llama_out(gml_context *ctx, const gml_llama_config *cfg,
                                const gml_llama_weights *w, gml_tensor *parts, int n_ranks,
                                gml_tensor *x_q) {
    GML_MPI_NONNULL(NULL, ctx, NULL);
    GML_MPI_NONNULL(ctx, cfg, NULL);
    GML_MPI_NONNULL(ctx, w, NULL);
    if (!x_q) return gml_last_error(ctx)[0] ? NULL : gml_set_error(ctx, LL ": x_q is NULL");
    gml_attn_config ac;
    gml_attn_weights aw;
    float eps;
    if (!llama_attn(ctx, cfg, w, x_q, &ac, &aw, &eps)) return NULL;
    gml_tensor *att = gml_shard_attn_out(ctx, &ac, &aw, parts, n_ranks);
    if (!att) return llama_fail(ctx);
    gml_tensor *h = gml_set_name(gml_add(ctx, x_q, att), "h");
    gml_tensor *n = gml_set_name(gml_rms_norm(ctx, h, w->mlp_norm, eps), "mlp_norm");
    gml_tensor *g = gml_set_name(gml_silu(ctx, gml_linear(ctx, n, w->w_gate, w->b_gate)), "gate");
    gml_tensor *u = gml_set_name(gml_linear(ctx, n, w->w_up, w->b_up), "up");
    gml_tensor *m = gml_linear(ctx, gml_mul(ctx, g, u), w->w_down, w->b_down);
    gml_tensor *out = gml_set_name(gml_add(ctx, h, m), "out");
    return out ? out : llama_fail(ctx);
}

gml_status gml_kv_shard_step_compute(gml_kv_shard_step *st, gml_graph *g, int64_t n,
                                     int n_threads, char *err, size_t err_size) {
    GML_MPI_NONNULL_ERR(st, GML_ERR_INVALID, err, err_size);
    GML_MPI_NONNULL_ERR(g, GML_ERR_INVALID, err, err_size);
    errf(err, err_size, "%s", "");
    if (!st || !st->q_pos || !g) {
        errf(err, err_size, "kv_shard_step: no %s", !g ? "graph" : "step");
        return GML_ERR_INVALID;
    }
    gml_kv_shard *s = st->shard;
    const int64_t L = s->len, total = s->p.capacity * s->p.n_ranks;
    if (n < st->n_query || n < 1 || n > total - L) {
        if (n >= 1 && n >= st->n_query)
            errf(err, err_size, "kv_shard: the context of %" PRId64 " positions would pass the "
                 "sharded cache's %d ranks x %" PRId64 " = %" PRId64 " positions (%" PRId64
                 " new at position %" PRId64 ")", L + n, s->p.n_ranks, s->p.capacity, total, n, L);
        else
            errf(err, err_size, "kv_shard_step: %" PRId64 " new tokens, but the step attends the "
                 "last %" PRId64 " of them", n, st->n_query);
        return GML_ERR_INVALID;
    }
    const int64_t own = gml_kv_shard_owned(s, n);
    if (own != st->n_new) {
        errf(err, err_size, "kv_shard_step: rank %d holds %" PRId64 " of the positions [%" PRId64
             ", %" PRId64 "), but the step's graph writes %" PRId64 " rows (gml_kv_shard_owned)",
             s->p.rank, own, L, L + n, st->n_new);
        return GML_ERR_INVALID;
    }
    int32_t *qp = gml_graph_data(g, st->q_pos), *lens = gml_graph_data(g, st->lens);
    int32_t *np = own ? gml_graph_data(g, st->new_pos) : NULL, *rows = own ? gml_graph_data(g, st->rows) : NULL;
    if (!qp || !lens || (own && !rows)) { /* new_pos: only rope reads it */
        errf(err, err_size, "kv_shard_step: the step's positions have no data in this graph (not "
             "in it, or a no_alloc context: plan the graph first)");
        return GML_ERR_INVALID;
    }
    const int64_t first = gml_kv_shard_first(s), end = first + s->p.capacity;
    const int64_t a = L > first ? L : first; /* the first new position this rank holds */
    for (int64_t b = 0; b < s->p.batch; b++) {
        for (int64_t i = 0; i < own; i++) {
            if (np) np[b * own + i] = (int32_t)(a + i);
            rows[b * own + i] = (int32_t)(a + i - first);
        }
        for (int64_t i = 0; i < st->n_query; i++) {
            const int64_t pos = L + n - st->n_query + i;
            qp[b * st->n_query + i] = (int32_t)pos;
            lens[b * st->n_query + i] = (int32_t)(pos + 1 < end ? pos + 1 : end);
        }
    }
    gml_status r = gml_graph_compute(g, n_threads);
    if (r != GML_OK) {
        errf(err, err_size, "%s", gml_graph_error(g));
        return r;
    }
    s->len = L + n;
    return GML_OK;
}

gml_status gml_mpi_gather_f32(MPI_Comm comm, const float *send, size_t n, float *recv, int root,
                              char *err, size_t err_size) {
    if (n > 0) GML_MPI_NONNULL_ERR(send, GML_ERR_INVALID, err, err_size);
    if (n > INT_MAX) {
        errf(err, err_size, "MPI_Gather: %zu floats per rank exceed MPI's int count", n);
        return GML_ERR_INVALID;
    }
    int rc = MPI_Gather(send, (int)n, MPI_FLOAT, recv, (int)n, MPI_FLOAT, root, comm);
    if (rc != MPI_SUCCESS) {
        char s[MPI_MAX_ERROR_STRING];
        int len = 0;
        if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", rc);
        errf(err, err_size, "MPI_Gather: %s", s);
        return GML_ERR_IO;
    }
    return GML_OK;
}
