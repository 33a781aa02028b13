/* Stage 1, the projections: q, k, v = x W^T + b, from separate or packed
 * (in_proj_weight) weights, split into heads as views. */
#include "misuse.h"
#include "attn_internal.h"

/* Rows [r0, r0 + n) of a packed [R, C] matrix, or elements of a [R] vector:
 * a view, no copy. */
static gml_tensor *packed_rows(gml_context *ctx, gml_tensor *t, int64_t r0, int64_t n,
                               const char *name) {
    if (!t) return NULL;
    gml_tensor *v = t->n_dims == 2 ? gml_view(ctx, t, 2, (int64_t[]){n, t->ne[3]},
                                              (size_t[]){t->nb[2], t->nb[3]}, (size_t)r0 * t->nb[2])
                                   : gml_view(ctx, t, 1, (int64_t[]){n}, (size_t[]){t->nb[3]},
                                              (size_t)r0 * t->nb[3]);
    return gml_set_name(v, name);
}

/* x [B, T, n*d_k] -> [B, n, T, d_k] (a view) */
static gml_tensor *heads_of(gml_context *ctx, gml_tensor *x, int64_t n, int64_t dk) {
    if (!x) return NULL;
    gml_tensor *h = gml_reshape(ctx, x, 4, (int64_t[]){x->ne[1], x->ne[2], n, dk});
    return gml_permute(ctx, h, (int[]){0, 2, 1, 3});
}

gml_attn_qkv gml_attn_project_p(gml_context *ctx, const gml_attn_plan *p,
                                const gml_attn_weights *w, const gml_attn_inputs *in) {
    gml_tensor *key = in->key ? in->key : in->query;
    gml_tensor *value = in->value ? in->value : key;
    gml_tensor *wq = w->w_q, *wk = w->w_k, *wv = w->w_v;
    gml_tensor *bq = w->b_q, *bk = w->b_k, *bv = w->b_v;
    const int64_t D = p->D, kv = p->G * p->dk;
    if (w->in_proj_weight) { /* nn.MultiheadAttention: q | k | v rows */
        wq = packed_rows(ctx, w->in_proj_weight, 0, D, "in_proj_weight[q]");
        wk = packed_rows(ctx, w->in_proj_weight, D, kv, "in_proj_weight[k]");
        wv = packed_rows(ctx, w->in_proj_weight, D + kv, kv, "in_proj_weight[v]");
    }
    if (w->in_proj_bias) { /* packed biases, also with separate weights (kdim/vdim) */
        bq = packed_rows(ctx, w->in_proj_bias, 0, D, "in_proj_bias[q]");
        bk = packed_rows(ctx, w->in_proj_bias, D, kv, "in_proj_bias[k]");
        bv = packed_rows(ctx, w->in_proj_bias, D + kv, kv, "in_proj_bias[v]");
    }
    gml_tensor *q = gml_set_name(gml_linear(ctx, in->query, wq, bq), "q"); /* [B, Tq, H*d_k] */
    gml_tensor *k = gml_set_name(gml_linear(ctx, key, wk, bk), "k");       /* [B, Tk, G*d_k] */
    gml_tensor *v = gml_set_name(gml_linear(ctx, value, wv, bv), "v");     /* [B, Tk, G*d_k] */
    gml_attn_qkv r = {.q = heads_of(ctx, q, p->H, p->dk), /* [B, H, Tq, d_k] */
                      .k = heads_of(ctx, k, p->G, p->dk), /* [B, G, Tk, d_k] */
                      .v = heads_of(ctx, v, p->G, p->dk)};
    if (!r.q || !r.k || !r.v) return (gml_attn_qkv){0};
    return r;
}

gml_attn_qkv gml_attn_project(gml_context *ctx, const gml_attn_config *cfg,
                              const gml_attn_weights *w, gml_attn_inputs in) {
    GML_MODELS_NONNULL(NULL, ctx, (gml_attn_qkv){0});
    GML_MODELS_NONNULL(ctx, cfg, (gml_attn_qkv){0});
    GML_MODELS_NONNULL(ctx, w, (gml_attn_qkv){0});
    gml_attn_plan p;
    gml_attn_weights wt_;
    if (!gml_attn_plan_inputs(ctx, "attn_project", cfg, &in, true, &p) ||
        !gml_attn_check_weights(ctx, &p, (w = gml_attn_linear_weights(ctx, w, &wt_)), false) ||
        !gml_attn_no_extras(ctx, &p, w, "the stages"))
        return (gml_attn_qkv){0};
    return gml_attn_project_p(ctx, &p, w, &in);
}
