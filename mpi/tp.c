/* Head-parallel shares of the attention blocks and the LLaMA layer
 * (ggmlite/mpi.h), from public ops and the attention stages only; no MPI here. */
#include <ggmlite/mpi.h>

#include "misuse.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define SHAPE(t, buf) gml_format_shape((t), (buf), sizeof(buf))

void gml_tp_range(int64_t n, int p, int r, int64_t *start, int64_t *len) {
    GML_MPI_NONNULL(NULL, start, );
    GML_MPI_NONNULL(NULL, len, );
    /* floor(r n / p) without overflow for the sizes we take (n < 2^40) */
    const int64_t a = n * r / p, b = n * (r + 1) / p;
    *start = a;
    *len = b - a;
}

static gml_status share_fail(char *err, size_t size, const char *fmt, ...) GML_PRINTF(3, 4);
static gml_status share_fail(char *err, size_t size, const char *fmt, ...) {
    if (err && size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, size, fmt, ap);
        va_end(ap);
    }
    return GML_ERR_INVALID;
}

gml_status gml_tp_share_of(int n_heads, int n_kv_heads, int64_t ffn, int n_ranks, int rank,
                           gml_tp_share *s, char *err, size_t err_size) {
    const int H = n_heads, G = n_kv_heads ? n_kv_heads : n_heads, P = n_ranks;
    GML_MPI_NONNULL_ERR(s, GML_ERR_INVALID, err, err_size);
    *s = (gml_tp_share){0};
    if (P < 1 || rank < 0 || rank >= P)
        return share_fail(err, err_size, "tp_share: rank %d of %d ranks", rank, P);
    if (H < 1 || G < 1 || G > H || H % G)
        return share_fail(err, err_size, "tp_share: kv heads %d must divide heads %d", G, H);
    if (H < P)
        return share_fail(err, err_size, "heads %d cannot be split over %d ranks: each rank needs "
                          "a query head (use at most %d ranks)", H, P, H);
    if (ffn < 0 || (ffn > 0 && ffn < P))
        return share_fail(err, err_size, "the MLP's %" PRId64 " rows cannot be split over %d "
                          "ranks: each rank needs one", ffn, P);
    int64_t h0, nh;
    gml_tp_range(H, P, rank, &h0, &nh);
    const int ratio = H / G;
    s->rank = rank;
    s->n_ranks = P;
    s->n_heads = H;
    s->n_kv_heads = G;
    s->h0 = (int)h0;
    s->nh = (int)nh;
    s->kv_split = G % P == 0;
    s->g0 = s->h0 / ratio;                        /* the kv head of its first query head */
    s->ng = (s->h0 + s->nh - 1) / ratio - s->g0 + 1; /* ... through that of its last */
    if (ffn > 0) gml_tp_range(ffn, P, rank, &s->f0, &s->nf);
    return GML_OK;
}

/* ---- checks and views ---------------------------------------------------------- */

/* t must be [rows, cols] (cols < 0: a vector [rows]); matrices f32, f16 or
 * bf16 (views of q8_0 rows are not taken), vectors f32. */
static bool check_param(gml_context *ctx, const char *block, const gml_tensor *t,
                        const char *name, bool required, int64_t rows, int64_t cols,
                        const char *what) {
    if (!t) {
        if (!required) return true;
        gml_set_error(ctx, "%s: %s is missing (NULL), expected %s", block, name, what);
        return false;
    }
    const bool type_ok = t->type == GML_F32 || (cols >= 0 && (t->type == GML_F16 || t->type == GML_BF16));
    if (type_ok && (cols < 0 ? t->n_dims == 1 && t->ne[3] == rows
                             : t->n_dims == 2 && t->ne[2] == rows && t->ne[3] == cols))
        return true;
    char st[GML_SHAPE_MAX], want[64];
    if (cols < 0)
        snprintf(want, sizeof want, "[%" PRId64 "]", rows);
    else
        snprintf(want, sizeof want, "[%" PRId64 ",%" PRId64 "]", rows, cols);
    gml_set_error(ctx, "%s: %s is %s %s, expected %s %s (%s)", block, name, gml_type_name(t->type),
                  SHAPE(t, st), cols >= 0 ? "f32, f16 or bf16" : "f32", want, what);
    return false;
}

/* Rows [r0, r0 + n) of a matrix, elements of a vector: a view. */
static gml_tensor *rows_of(gml_context *ctx, gml_tensor *t, int64_t r0, int64_t n) {
    if (!t) return NULL;
    if (t->n_dims == 2)
        return gml_view(ctx, t, 2, (int64_t[]){n, t->ne[3]}, (size_t[]){t->nb[2], t->nb[3]},
                        (size_t)r0 * t->nb[2]);
    return gml_view(ctx, t, 1, (int64_t[]){n}, (size_t[]){t->nb[3]}, (size_t)r0 * t->nb[3]);
}

/* Columns [c0, c0 + n) of a matrix [R, C]: a strided view [R, n]. */
static gml_tensor *cols_of(gml_context *ctx, gml_tensor *t, int64_t c0, int64_t n) {
    return gml_view(ctx, t, 2, (int64_t[]){t->ne[2], n}, (size_t[]){t->nb[2], t->nb[3]},
                    (size_t)c0 * t->nb[3]);
}

static gml_tensor *named(gml_tensor *t, const char *fmt, int a, int b) {
    if (!t) return NULL;
    char name[GML_MAX_NAME];
    snprintf(name, sizeof name, fmt, a, b);
    return gml_set_name(t, name);
}

/* x [B, T, n*dk] -> [B, n, T, dk] (a view) */
static gml_tensor *heads_of(gml_context *ctx, gml_tensor *x, int64_t n, int64_t dk) {
    if (!x) return NULL;
    gml_tensor *h = gml_reshape(ctx, x, 4, (int64_t[]){x->ne[1], x->ne[2], n, dk});
    return gml_permute(ctx, h, (int[]){0, 2, 1, 3});
}

/* ---- attention ------------------------------------------------------------------- */

#define A "tp_attn"

/* Query heads [a, a + n) reading kv heads [g, g + ng): projected, positioned,
 * attended, merged through W_o's columns -> [B, T, D]. */
static gml_tensor *segment(gml_context *ctx, const gml_attn_config *cfg, gml_tensor *wq,
                           gml_tensor *bq, gml_tensor *wk, gml_tensor *bk, gml_tensor *wv,
                           gml_tensor *bv, gml_tensor *wo, gml_tensor *bo, gml_tensor *sinks,
                           gml_tensor *x, gml_tensor *positions, int64_t dk, int a, int n, int g,
                           int ng) {
    const int64_t B = x->ne[1], T = x->ne[2];
    gml_tensor *q = named(gml_linear(ctx, x, rows_of(ctx, wq, a * dk, n * dk), rows_of(ctx, bq, a * dk, n * dk)),
                          "q[%d+%d]", a, n);
    gml_tensor *k = named(gml_linear(ctx, x, rows_of(ctx, wk, g * dk, ng * dk), rows_of(ctx, bk, g * dk, ng * dk)),
                          "k[%d+%d]", g, ng);
    gml_tensor *v = named(gml_linear(ctx, x, rows_of(ctx, wv, g * dk, ng * dk), rows_of(ctx, bv, g * dk, ng * dk)),
                          "v[%d+%d]", g, ng);
    gml_attn_config c = *cfg;
    c.dims = (gml_attn_dims){.d_model = n * dk, .n_heads = n, .n_kv_heads = ng};
    gml_attn_inputs in = {.query = x, .positions = positions};
    gml_attn_qkv qkv = {heads_of(ctx, q, n, dk), heads_of(ctx, k, ng, dk), heads_of(ctx, v, ng, dk)};
    if (!qkv.q || !qkv.k || !qkv.v) return NULL;
    qkv = gml_attn_position(ctx, &c, qkv, in);
    gml_attn_heads h = gml_attn_attend(ctx, &c, qkv, in, sinks ? rows_of(ctx, sinks, a, n) : NULL);
    if (!h.heads) return NULL;
    gml_tensor *m = gml_permute(ctx, h.heads, (int[]){0, 2, 1, 3}); /* [B, T, n, dk] */
    if (m && !gml_is_contiguous(m)) m = gml_cont(ctx, m);
    m = gml_reshape(ctx, m, 3, (int64_t[]){B, T, n * dk});
    return named(gml_linear(ctx, m, cols_of(ctx, wo, a * dk, n * dk), bo), "out[%d+%d]", a, n);
}

gml_tensor *gml_tp_attn(gml_context *ctx, const gml_attn_config *cfg, const gml_attn_weights *w,
                        gml_tensor *x, gml_tensor *positions, const gml_tp_share *s,
                        bool with_out_bias) {
    GML_MPI_NONNULL(NULL, ctx, NULL);
    GML_MPI_NONNULL(ctx, cfg, NULL);
    GML_MPI_NONNULL(ctx, w, NULL);
    GML_MPI_NONNULL(ctx, s, NULL);
    if (!x) {
        if (!gml_last_error(ctx)[0]) gml_set_error(ctx, A ": x is NULL");
        return NULL;
    }
    if (!cfg || !w || !s)
        return gml_set_error(ctx, A ": no %s (NULL)", !cfg ? "config" : !w ? "weights" : "share");
    char sx[GML_SHAPE_MAX];
    if (x->type != GML_F32 || x->n_dims != 3)
        return gml_set_error(ctx, A ": x is %s %s, expected f32 [B, T, D]", gml_type_name(x->type),
                             SHAPE(x, sx));
    const int64_t D = x->ne[3];
    const int H = cfg->dims.n_heads, G = cfg->dims.n_kv_heads ? cfg->dims.n_kv_heads : H;
    if (cfg->dims.d_model && cfg->dims.d_model != D)
        return gml_set_error(ctx, A ": x %s does not have d_model %" PRId64, SHAPE(x, sx),
                             cfg->dims.d_model);
    if (H < 1 || D % H || G > H || H % G)
        return gml_set_error(ctx, A ": heads %d, kv heads %d and d_model %" PRId64 " do not fit: "
                             "heads must divide d_model and kv heads heads", H, G, D);
    if (s->n_heads != H || s->n_kv_heads != G)
        return gml_set_error(ctx, A ": the share is of %d heads and %d kv heads, the config has "
                             "%d and %d", s->n_heads, s->n_kv_heads, H, G);
    if (cfg->score.alibi_max_bias != 0)
        return gml_set_error(ctx, A ": ALiBi is not split by heads here (its slopes depend on "
                             "each head's place among all %d)", H);
    if (cfg->score.add_zero_attn || w->bias_k || w->bias_v || w->conv1d)
        return gml_set_error(ctx, A ": %s is not supported by the head-parallel block",
                             cfg->score.add_zero_attn ? "add_zero_attn"
                             : w->conv1d              ? "GPT-2's Conv1D layout"
                                                      : "bias_k/bias_v (add_bias_kv)");
    if (cfg->graph.want_weights)
        return gml_set_error(ctx, A ": the attention weights are not gathered across ranks "
                             "(want_weights)");
    const int64_t dk = D / H, kv = G * dk;
    gml_tensor *wq = w->w_q, *wk = w->w_k, *wv = w->w_v, *bq = w->b_q, *bk = w->b_k, *bv = w->b_v;
    if (w->in_proj_weight) { /* q | k | v rows of one matrix */
        if (!check_param(ctx, A, w->in_proj_weight, "in_proj_weight", true, D + 2 * kv, D,
                         "[D + 2*G*d_k, D]"))
            return NULL;
        wq = rows_of(ctx, w->in_proj_weight, 0, D);
        wk = rows_of(ctx, w->in_proj_weight, D, kv);
        wv = rows_of(ctx, w->in_proj_weight, D + kv, kv);
    }
    if (w->in_proj_bias) {
        if (!check_param(ctx, A, w->in_proj_bias, "in_proj_bias", true, D + 2 * kv, -1, "[D + 2*G*d_k]"))
            return NULL;
        bq = rows_of(ctx, w->in_proj_bias, 0, D);
        bk = rows_of(ctx, w->in_proj_bias, D, kv);
        bv = rows_of(ctx, w->in_proj_bias, D + kv, kv);
    }
    if (!check_param(ctx, A, wq, "w_q.weight", true, D, D, "[D, D]") ||
        !check_param(ctx, A, bq, "w_q.bias", false, D, -1, "[D]") ||
        !check_param(ctx, A, wk, "w_k.weight", true, kv, D, "[G*d_k, D]") ||
        !check_param(ctx, A, bk, "w_k.bias", false, kv, -1, "[G*d_k]") ||
        !check_param(ctx, A, wv, "w_v.weight", true, kv, D, "[G*d_k, D]") ||
        !check_param(ctx, A, bv, "w_v.bias", false, kv, -1, "[G*d_k]") ||
        !check_param(ctx, A, w->w_o, "w_o.weight", true, D, D, "[D, D]") ||
        !check_param(ctx, A, w->b_o, "w_o.bias", false, D, -1, "[D]") ||
        !check_param(ctx, A, w->sinks, "sinks", false, H, -1, "[H]"))
        return NULL;
    gml_tensor *bo = with_out_bias ? w->b_o : NULL;
    const int ratio = H / G;
    /* One GQA block when the rank's query heads are whole groups (or all
     * in one group); else one segment per kv head it reads. */
    if (s->ng == 1 || (s->h0 % ratio == 0 && s->nh % ratio == 0))
        return gml_set_name(segment(ctx, cfg, wq, bq, wk, bk, wv, bv, w->w_o, bo, w->sinks, x, positions,
                                    dk, s->h0, s->nh, s->g0, s->ng), "partial");
    gml_tensor *sum = NULL;
    for (int g = s->g0; g < s->g0 + s->ng; g++) {
        const int a = g * ratio > s->h0 ? g * ratio : s->h0;
        const int b = (g + 1) * ratio < s->h0 + s->nh ? (g + 1) * ratio : s->h0 + s->nh;
        gml_tensor *o = segment(ctx, cfg, wq, bq, wk, bk, wv, bv, w->w_o, g == s->g0 ? bo : NULL,
                                w->sinks, x, positions, dk, a, b - a, g, 1);
        sum = sum ? gml_add(ctx, sum, o) : o;
        if (!sum) return NULL;
    }
    return gml_set_name(sum, "partial");
}

/* ---- the LLaMA layer ---------------------------------------------------------------- */

#define L "tp_llama"

static bool llama_dims(gml_context *ctx, const gml_llama_config *cfg, const gml_llama_weights *w,
                       gml_tensor *x, int64_t *D, float *eps) {
    char sx[GML_SHAPE_MAX];
    if (!x) {
        if (!gml_last_error(ctx)[0]) gml_set_error(ctx, L ": x is NULL");
        return false;
    }
    if (!cfg || !w) {
        gml_set_error(ctx, L ": no %s (NULL)", !cfg ? "config" : "weights");
        return false;
    }
    if (x->type != GML_F32 || x->n_dims != 3) {
        gml_set_error(ctx, L ": x is %s %s, expected f32 [B, T, D]", gml_type_name(x->type), SHAPE(x, sx));
        return false;
    }
    if (!(cfg->rms_eps >= 0 && cfg->rms_eps < INFINITY)) {
        gml_set_error(ctx, L ": rms_eps %g must be finite and >= 0 (0: 1e-6)", (double)cfg->rms_eps);
        return false;
    }
    *D = x->ne[3];
    *eps = cfg->rms_eps != 0 ? cfg->rms_eps : 1e-6f;
    return true;
}

gml_tensor *gml_tp_llama_attn(gml_context *ctx, const gml_llama_config *cfg,
                              const gml_llama_weights *w, gml_tensor *x, gml_tensor *positions,
                              const gml_tp_share *s, bool with_out_bias) {
    GML_MPI_NONNULL(NULL, ctx, NULL);
    GML_MPI_NONNULL(ctx, cfg, NULL);
    GML_MPI_NONNULL(ctx, w, NULL);
    GML_MPI_NONNULL(ctx, s, NULL);
    int64_t D;
    float eps;
    if (!llama_dims(ctx, cfg, w, x, &D, &eps)) return NULL;
    const int H = cfg->n_heads, G = cfg->n_kv_heads ? cfg->n_kv_heads : cfg->n_heads;
    if (H < 1 || D % H || (D / H) % 2)
        return gml_set_error(ctx, L ": d_model %" PRId64 " and heads %d: heads must divide d_model "
                             "into an even head_dim (rope rotates pairs)", D, H);
    if (!check_param(ctx, L, w->attn_norm, "input_layernorm.weight", true, D, -1, "[D]"))
        return NULL;
    gml_tensor *n = gml_set_name(gml_rms_norm(ctx, x, w->attn_norm, eps), "attn_norm");
    gml_attn_config c = {
        .dims = {.d_model = D, .n_heads = H, .n_kv_heads = G},
        .score = {.causal = GML_CAUSAL_BOTTOM_RIGHT, .window = cfg->window, .softcap = cfg->softcap},
        .pos = {.kind = GML_POS_ROPE, .rope = {.theta = cfg->rope_theta != 0 ? cfg->rope_theta : 10000.0f}},
    };
    gml_attn_weights aw = {.w_q = w->wq, .b_q = w->bq, .w_k = w->wk, .b_k = w->bk, .w_v = w->wv,
                           .b_v = w->bv, .w_o = w->wo, .b_o = w->bo, .sinks = w->sinks};
    gml_tensor *out = gml_tp_attn(ctx, &c, &aw, n, positions, s, with_out_bias);
    if (!out) { /* the attention's message, in the layer's HF names */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", gml_last_error(ctx));
        static const char *const from[] = {"w_q.", "w_k.", "w_v.", "w_o.", "sinks"};
        static const char *const to[] = {"self_attn.q_proj.", "self_attn.k_proj.", "self_attn.v_proj.",
                                         "self_attn.o_proj.", "self_attn.sinks"};
        for (int i = 0; i < 5; i++) {
            char *p = strstr(msg, from[i]);
            if (!p || strncmp(msg, A ": ", strlen(A) + 2)) continue;
            return gml_set_error(ctx, L ": %.*s%s%s", (int)(p - msg - strlen(A) - 2), msg + strlen(A) + 2,
                                 to[i], p + strlen(from[i]));
        }
        return gml_set_error(ctx, L ": %s", msg);
    }
    return out;
}

gml_tensor *gml_tp_llama_mlp(gml_context *ctx, const gml_llama_config *cfg,
                             const gml_llama_weights *w, gml_tensor *h, const gml_tp_share *s,
                             bool with_out_bias) {
    GML_MPI_NONNULL(NULL, ctx, NULL);
    GML_MPI_NONNULL(ctx, cfg, NULL);
    GML_MPI_NONNULL(ctx, w, NULL);
    GML_MPI_NONNULL(ctx, s, NULL);
    int64_t D;
    float eps;
    if (!llama_dims(ctx, cfg, w, h, &D, &eps)) return NULL;
    if (!s) return gml_set_error(ctx, L ": no share (NULL)");
    const int64_t F = w->w_gate && w->w_gate->n_dims == 2 ? w->w_gate->ne[2] : 1;
    if (!check_param(ctx, L, w->mlp_norm, "post_attention_layernorm.weight", true, D, -1, "[D]") ||
        !check_param(ctx, L, w->w_gate, "mlp.gate_proj.weight", true, F, D, "[F, D]") ||
        !check_param(ctx, L, w->b_gate, "mlp.gate_proj.bias", false, F, -1, "[F]") ||
        !check_param(ctx, L, w->w_up, "mlp.up_proj.weight", true, F, D, "[F, D]") ||
        !check_param(ctx, L, w->b_up, "mlp.up_proj.bias", false, F, -1, "[F]") ||
        !check_param(ctx, L, w->w_down, "mlp.down_proj.weight", true, D, F, "[D, F]") ||
        !check_param(ctx, L, w->b_down, "mlp.down_proj.bias", false, D, -1, "[D]"))
        return NULL;
    if (s->nf < 1 || s->f0 + s->nf > F)
        return gml_set_error(ctx, L ": the share's MLP rows [%" PRId64 ", %" PRId64 ") are not "
                             "rows of the MLP's %" PRId64 " (give F to gml_tp_share_of)",
                             s->f0, s->f0 + s->nf, F);
    gml_tensor *n = gml_set_name(gml_rms_norm(ctx, h, w->mlp_norm, eps), "mlp_norm");
    gml_tensor *g = gml_set_name(gml_silu(ctx, gml_linear(ctx, n, rows_of(ctx, w->w_gate, s->f0, s->nf),
                                                          rows_of(ctx, w->b_gate, s->f0, s->nf))), "gate");
    gml_tensor *u = gml_set_name(gml_linear(ctx, n, rows_of(ctx, w->w_up, s->f0, s->nf),
                                            rows_of(ctx, w->b_up, s->f0, s->nf)), "up");
    gml_tensor *m = gml_linear(ctx, gml_mul(ctx, g, u), cols_of(ctx, w->w_down, s->f0, s->nf),
                               with_out_bias ? w->b_down : NULL);
    return gml_set_name(m, "mlp_partial");
}
