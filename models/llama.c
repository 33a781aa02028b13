/* The LLaMA-style decoder layer (layers.h): RMSNorm, grouped-query attention
 * with rope, residual, RMSNorm, SwiGLU MLP, residual; and its KV-cache
 * decode step. As HF's LlamaDecoderLayer computes it in float32. */
#include "layers_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define L "llama"

typedef struct dims {
    int64_t B, T, D, H, G, hd, F;
    float theta, eps;
} dims;

/* Config, input and weights against each other. */
static bool check(gml_context *ctx, const gml_llama_config *cfg, const gml_llama_weights *w,
                  gml_tensor *x, dims *d) {
    if (!cfg || !w) return lay_fail(ctx, L ": no %s (NULL)", !cfg ? "config" : "weights");
    if (!lay_check_input(ctx, L, x, &d->B, &d->T, &d->D)) return false;
    d->H = cfg->n_heads;
    d->G = cfg->n_kv_heads ? cfg->n_kv_heads : cfg->n_heads;
    if (d->H < 1) return lay_fail(ctx, L ": heads is %d, must be >= 1", cfg->n_heads);
    if (d->G < 1 || d->G > d->H || d->H % d->G)
        return lay_fail(ctx, L ": kv_heads %" PRId64 " must divide heads %" PRId64, d->G, d->H);
    if (!w->wq) return lay_fail(ctx, L ": self_attn.q_proj.weight is missing (NULL)");
    d->hd = cfg->head_dim;
    if (d->hd == 0) {
        char sw[GML_SHAPE_MAX];
        if (w->wq->n_dims != 2 || w->wq->ne[2] % d->H)
            return lay_fail(ctx, L ": self_attn.q_proj.weight is %s: its rows are not heads %" PRId64
                            " x head_dim", LAY_SHAPE(w->wq, sw), d->H);
        d->hd = w->wq->ne[2] / d->H;
    }
    if (d->hd < 2 || d->hd % 2)
        return lay_fail(ctx, L ": head_dim %" PRId64 " must be even (rope rotates pairs)", d->hd);
    if (cfg->softcap < 0 || !isfinite(cfg->softcap))
        return lay_fail(ctx, L ": softcap %g must be finite and >= 0 (0: none)", cfg->softcap);
    if (cfg->window < 0)
        return lay_fail(ctx, L ": window %" PRId64 " must be >= 0 (0: none)", cfg->window);
    d->theta = cfg->rope_theta != 0 ? cfg->rope_theta : 10000.0f;
    d->eps = cfg->rms_eps < 0 ? 1e-6f : cfg->rms_eps;
    d->F = w->w_gate && w->w_gate->n_dims == 2 ? w->w_gate->ne[2] : 0;
    const int64_t D = d->D, qd = d->H * d->hd, kd = d->G * d->hd, F = d->F;
    return lay_check_param(ctx, L, w->attn_norm, "input_layernorm.weight", true, D, -1, "[D]") &&
           lay_check_param(ctx, L, w->wq, "self_attn.q_proj.weight", true, qd, D, "[H*hd, D]") &&
           lay_check_param(ctx, L, w->bq, "self_attn.q_proj.bias", false, qd, -1, "[H*hd]") &&
           lay_check_param(ctx, L, w->wk, "self_attn.k_proj.weight", true, kd, D, "[G*hd, D]") &&
           lay_check_param(ctx, L, w->bk, "self_attn.k_proj.bias", false, kd, -1, "[G*hd]") &&
           lay_check_param(ctx, L, w->wv, "self_attn.v_proj.weight", true, kd, D, "[G*hd, D]") &&
           lay_check_param(ctx, L, w->bv, "self_attn.v_proj.bias", false, kd, -1, "[G*hd]") &&
           lay_check_param(ctx, L, w->wo, "self_attn.o_proj.weight", true, D, qd, "[D, H*hd]") &&
           lay_check_param(ctx, L, w->bo, "self_attn.o_proj.bias", false, D, -1, "[D]") &&
           lay_check_param(ctx, L, w->sinks, "self_attn.sinks", false, d->H, -1, "[H]") &&
           lay_check_param(ctx, L, w->mlp_norm, "post_attention_layernorm.weight", true, D, -1,
                           "[D]") &&
           lay_check_param(ctx, L, w->w_gate, "mlp.gate_proj.weight", true, F ? F : 1, D,
                           "[F, D]") &&
           lay_check_param(ctx, L, w->b_gate, "mlp.gate_proj.bias", false, F, -1, "[F]") &&
           lay_check_param(ctx, L, w->w_up, "mlp.up_proj.weight", true, F, D, "[F, D]") &&
           lay_check_param(ctx, L, w->b_up, "mlp.up_proj.bias", false, F, -1, "[F]") &&
           lay_check_param(ctx, L, w->w_down, "mlp.down_proj.weight", true, D, F, "[D, F]") &&
           lay_check_param(ctx, L, w->b_down, "mlp.down_proj.bias", false, D, -1, "[D]");
}

static bool check_pos(gml_context *ctx, const dims *d, const gml_tensor *pos) {
    char sp[GML_SHAPE_MAX];
    if (!pos) return lay_fail(ctx, L ": no positions (pos NULL): give i32 [T] (0..T-1) or [B, T]");
    bool ok = pos->type == GML_I32 && ((pos->n_dims == 1 && pos->ne[3] == d->T) ||
                                       (pos->n_dims == 2 && pos->ne[2] == d->B && pos->ne[3] == d->T));
    if (ok) return true;
    return lay_fail(ctx, L ": pos '%s' is %s %s, expected i32 [%" PRId64 "] or [%" PRId64 ",%" PRId64
                    "] ([T] or [B, T])", pos->name, gml_type_name(pos->type), LAY_SHAPE(pos, sp),
                    d->T, d->B, d->T);
}

/* x [B, T, D] -> normed h, and rope'd q [B, H, T, hd], k, v [B, G, T, hd] */
static void project(gml_context *ctx, const dims *d, const gml_llama_weights *w, gml_tensor *h,
                    gml_tensor *pos, gml_tensor **q, gml_tensor **k, gml_tensor **v) {
    const int perm[] = {0, 2, 1, 3};
    gml_tensor *qp = gml_set_name(gml_linear(ctx, h, w->wq, w->bq), "q"); /* [B, T, H*hd] */
    gml_tensor *kp = gml_set_name(gml_linear(ctx, h, w->wk, w->bk), "k"); /* [B, T, G*hd] */
    gml_tensor *vp = gml_set_name(gml_linear(ctx, h, w->wv, w->bv), "v");
    qp = gml_reshape(ctx, qp, 4, (int64_t[]){d->B, d->T, d->H, d->hd});
    kp = gml_reshape(ctx, kp, 4, (int64_t[]){d->B, d->T, d->G, d->hd});
    vp = gml_reshape(ctx, vp, 4, (int64_t[]){d->B, d->T, d->G, d->hd});
    /* rope on [B, T, heads, hd] (seq_dim -3), then heads first (views) */
    *q = gml_permute(ctx, gml_set_name(gml_rope(ctx, qp, pos, -3, 0, d->theta, 1.0f, false), "q_rope"),
                     perm);
    *k = gml_permute(ctx, gml_set_name(gml_rope(ctx, kp, pos, -3, 0, d->theta, 1.0f, false), "k_rope"),
                     perm);
    *v = gml_permute(ctx, vp, perm);
}

/* attention output [B, T, H*hd] -> the layer's output [B, T, D] */
static gml_tensor *finish(gml_context *ctx, const dims *d, const gml_llama_weights *w,
                          gml_tensor *x, gml_tensor *att) {
    gml_tensor *h = gml_set_name(gml_add(ctx, x, gml_linear(ctx, att, w->wo, w->bo)), "h");
    gml_tensor *n = gml_set_name(gml_rms_norm(ctx, h, w->mlp_norm, d->eps), "mlp_norm");
    gml_tensor *g = gml_set_name(gml_silu(ctx, gml_linear(ctx, n, w->w_gate, w->b_gate)), "gate");
    gml_tensor *u = gml_set_name(gml_linear(ctx, n, w->w_up, w->b_up), "up");
    gml_tensor *m = gml_linear(ctx, gml_mul(ctx, g, u), w->w_down, w->b_down);
    return gml_set_name(gml_add(ctx, h, m), "out");
}

static lay_attn attn_opts(const gml_llama_config *cfg, const gml_llama_weights *w, const dims *d) {
    return (lay_attn){.layer = L, .scale = (float)(1.0 / sqrt((double)d->hd)), .causal = true,
                      .sinks = w->sinks, .softcap = cfg->softcap, .window = cfg->window};
}

gml_tensor *gml_llama_layer(gml_context *ctx, const gml_llama_config *cfg,
                            const gml_llama_weights *w, gml_tensor *x, gml_tensor *pos) {
    if (!ctx) return NULL;
    if (!x) {
        if (!gml_last_error(ctx)[0]) gml_set_error(ctx, L ": x is NULL");
        return NULL;
    }
    dims d;
    if (!check(ctx, cfg, w, x, &d) || !check_pos(ctx, &d, pos)) return NULL;
    gml_tensor *h = gml_set_name(gml_rms_norm(ctx, x, w->attn_norm, d.eps), "attn_norm");
    gml_tensor *q, *k, *v;
    project(ctx, &d, w, h, pos, &q, &k, &v);
    lay_attn a = attn_opts(cfg, w, &d);
    return finish(ctx, &d, w, x, lay_attend(ctx, &a, q, k, v));
}

gml_tensor *gml_llama_decode(gml_context *ctx, const gml_llama_config *cfg,
                             const gml_llama_weights *w, gml_tensor *x, const gml_kv_step *step,
                             int layer) {
    if (!ctx) return NULL;
    if (!x || !step || !step->pos) {
        if (!gml_last_error(ctx)[0])
            gml_set_error(ctx, L " decode: %s is NULL", !x ? "x" : "the step (or its positions)");
        return NULL;
    }
    dims d;
    if (!check(ctx, cfg, w, x, &d)) return NULL;
    gml_tensor *kc = gml_kv_cache_k(step->cache, layer), *vc = gml_kv_cache_v(step->cache, layer);
    gml_kv_cache_params cp = gml_kv_cache_get_params(step->cache);
    if (!kc || !vc)
        return gml_set_error(ctx, L " decode: layer %d is out of range; the cache has %d layers",
                             layer, cp.n_layers);
    char sx[GML_SHAPE_MAX];
    if (d.G != cp.n_kv_heads || d.hd != cp.d_k || d.B != cp.batch || d.T != step->n)
        return gml_set_error(ctx, L " decode: x '%s' %s with %" PRId64 " kv heads of %" PRId64
                             " does not fit the cache (batch %" PRId64 ", kv heads %d, d_k %" PRId64
                             ", %" PRId64 " new tokens per step)", x->name, LAY_SHAPE(x, sx), d.G,
                             d.hd, cp.batch, cp.n_kv_heads, cp.d_k, step->n);
    gml_tensor *h = gml_set_name(gml_rms_norm(ctx, x, w->attn_norm, d.eps), "attn_norm");
    gml_tensor *q, *k, *v;
    project(ctx, &d, w, h, step->pos, &q, &k, &v); /* rope at the step's run-time positions */
    gml_tensor *ka = gml_set_name(gml_set_rows(ctx, kc, k, step->pos), "k_all");
    gml_tensor *va = gml_set_name(gml_set_rows(ctx, vc, v, step->pos), "v_all");
    lay_attn a = attn_opts(cfg, w, &d);
    a.causal = false;     /* causality is in the lengths: a token at pos sees keys 0..pos */
    a.lens = step->lens;
    return finish(ctx, &d, w, x, lay_attend(ctx, &a, q, ka, va));
}

gml_status gml_llama_weights_find(gml_context *wctx, const char *prefix, gml_llama_weights *w,
                                  char *err, size_t err_size) {
#define N(name, field, req) {name, offsetof(gml_llama_weights, field), req}
    static const lay_name names[] = {
        N("input_layernorm.weight", attn_norm, true),
        N("self_attn.q_proj.weight", wq, true),
        N("self_attn.q_proj.bias", bq, false),
        N("self_attn.k_proj.weight", wk, true),
        N("self_attn.k_proj.bias", bk, false),
        N("self_attn.v_proj.weight", wv, true),
        N("self_attn.v_proj.bias", bv, false),
        N("self_attn.o_proj.weight", wo, true),
        N("self_attn.o_proj.bias", bo, false),
        N("self_attn.sinks", sinks, false),
        N("post_attention_layernorm.weight", mlp_norm, true),
        N("mlp.gate_proj.weight", w_gate, true),
        N("mlp.gate_proj.bias", b_gate, false),
        N("mlp.up_proj.weight", w_up, true),
        N("mlp.up_proj.bias", b_up, false),
        N("mlp.down_proj.weight", w_down, true),
        N("mlp.down_proj.bias", b_down, false),
    };
#undef N
    *w = (gml_llama_weights){0};
    return lay_weights_find(L, wctx, prefix, names, (int)(sizeof names / sizeof *names), w, err,
                            err_size);
}
