/* The LLaMA-style decoder layer (layers.h): RMSNorm, grouped-query attention
 * with rope, residual, RMSNorm, SwiGLU MLP, residual; and its KV-cache
 * decode step. As HF's LlamaDecoderLayer computes it in float32. */
#include "misuse.h"
#include "layers_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define L "llama"

typedef struct dims {
    int64_t B, T, D, H, G, hd, F;
    float theta, eps;
} dims;

/* Config, input and weights against each other (HF names in the messages). */
static bool check(gml_context *ctx, const gml_llama_config *cfg, const gml_llama_weights *w,
                  gml_tensor *x, dims *d) {
    if (!cfg || !w) return gml_lay_fail(ctx, L ": no %s (NULL)", !cfg ? "config" : "weights");
    if (!gml_lay_check_input(ctx, L, x, &d->B, &d->T, &d->D)) return false;
    d->H = cfg->n_heads;
    d->G = cfg->n_kv_heads ? cfg->n_kv_heads : cfg->n_heads;
    if (d->H < 1) return gml_lay_fail(ctx, L ": heads is %d, must be >= 1", cfg->n_heads);
    if (d->D % d->H)
        return gml_lay_fail(ctx, L ": d_model %" PRId64 " is not divisible by heads %" PRId64, d->D,
                            d->H);
    if (d->G < 1 || d->G > d->H || d->H % d->G)
        return gml_lay_fail(ctx, L ": kv_heads %" PRId64 " must divide heads %" PRId64, d->G, d->H);
    d->hd = d->D / d->H;
    if (d->hd % 2)
        return gml_lay_fail(ctx, L ": head_dim %" PRId64 " (d_model / heads) must be even: rope "
                            "rotates pairs", d->hd);
    if (!(cfg->softcap >= 0 && cfg->softcap < INFINITY))
        return gml_lay_fail(ctx, L ": softcap %g must be finite and >= 0 (0: none)",
                            (double)cfg->softcap);
    if (cfg->window < 0)
        return gml_lay_fail(ctx, L ": window %" PRId64 " must be >= 0 (0: none)", cfg->window);
    d->theta = cfg->rope_theta != 0 ? cfg->rope_theta : 10000.0f;
    if (!(cfg->rms_eps >= 0 && cfg->rms_eps < INFINITY))
        return gml_lay_fail(ctx, L ": rms_eps %g must be finite and >= 0 (0: 1e-6)",
                            (double)cfg->rms_eps);
    d->eps = cfg->rms_eps != 0 ? cfg->rms_eps : 1e-6f;
    d->F = w->w_gate && w->w_gate->n_dims == 2 ? w->w_gate->ne[2]
           : w->w_up && w->w_up->n_dims == 2   ? w->w_up->ne[2]
                                               : 1;
    const int64_t D = d->D, kd = d->G * d->hd, F = d->F;
    return gml_lay_check_param(ctx, L, w->attn_norm, "input_layernorm.weight", true, D, -1,
                               "[D]") &&
           gml_lay_check_param(ctx, L, w->wq, "self_attn.q_proj.weight", true, D, D, "[H*hd, D]") &&
           gml_lay_check_param(ctx, L, w->bq, "self_attn.q_proj.bias", false, D, -1, "[H*hd]") &&
           gml_lay_check_param(ctx, L, w->wk, "self_attn.k_proj.weight", true, kd, D,
                               "[G*hd, D]") &&
           gml_lay_check_param(ctx, L, w->bk, "self_attn.k_proj.bias", false, kd, -1, "[G*hd]") &&
           gml_lay_check_param(ctx, L, w->wv, "self_attn.v_proj.weight", true, kd, D,
                               "[G*hd, D]") &&
           gml_lay_check_param(ctx, L, w->bv, "self_attn.v_proj.bias", false, kd, -1, "[G*hd]") &&
           gml_lay_check_param(ctx, L, w->wo, "self_attn.o_proj.weight", true, D, D, "[D, H*hd]") &&
           gml_lay_check_param(ctx, L, w->bo, "self_attn.o_proj.bias", false, D, -1, "[D]") &&
           gml_lay_check_param(ctx, L, w->sinks, "self_attn.sinks", false, d->H, -1, "[H]") &&
           gml_lay_check_param(ctx, L, w->mlp_norm, "post_attention_layernorm.weight", true, D, -1,
                               "[D]") &&
           gml_lay_check_param(ctx, L, w->w_gate, "mlp.gate_proj.weight", true, F, D, "[F, D]") &&
           gml_lay_check_param(ctx, L, w->b_gate, "mlp.gate_proj.bias", false, F, -1, "[F]") &&
           gml_lay_check_param(ctx, L, w->w_up, "mlp.up_proj.weight", true, F, D, "[F, D]") &&
           gml_lay_check_param(ctx, L, w->b_up, "mlp.up_proj.bias", false, F, -1, "[F]") &&
           gml_lay_check_param(ctx, L, w->w_down, "mlp.down_proj.weight", true, D, F, "[D, F]") &&
           gml_lay_check_param(ctx, L, w->b_down, "mlp.down_proj.bias", false, D, -1, "[D]");
}

/* The attention stages' view of the layer: config and weights. */
static gml_attn_config attn_config(const gml_llama_config *cfg, const dims *d) {
    return (gml_attn_config){
        .dims = {.d_model = d->D, .n_heads = (int)d->H, .n_kv_heads = (int)d->G},
        .score = {.causal = GML_CAUSAL_BOTTOM_RIGHT,
                  .window = cfg->window,
                  .softcap = cfg->softcap},
        .pos = {.kind = GML_POS_ROPE, .rope = {.theta = d->theta}},
    };
}

static gml_attn_weights attn_weights(const gml_llama_weights *w) {
    return (gml_attn_weights){.w_q = w->wq, .b_q = w->bq, .w_k = w->wk, .b_k = w->bk,
                              .w_v = w->wv, .b_v = w->bv, .w_o = w->wo, .b_o = w->bo,
                              .sinks = w->sinks};
}

/* attention output [B, T, D] -> the layer's output [B, T, D] */
static gml_tensor *finish(gml_context *ctx, const dims *d, const gml_llama_weights *w,
                          gml_tensor *x, gml_tensor *att) {
    gml_tensor *h = gml_set_name(gml_add(ctx, x, att), "h");
    gml_tensor *n = gml_set_name(gml_rms_norm(ctx, h, w->mlp_norm, d->eps), "mlp_norm");
    gml_tensor *g = gml_set_name(gml_silu(ctx, gml_linear(ctx, n, w->w_gate, w->b_gate)), "gate");
    gml_tensor *u = gml_set_name(gml_linear(ctx, n, w->w_up, w->b_up), "up");
    gml_tensor *m = gml_linear(ctx, gml_mul(ctx, g, u), w->w_down, w->b_down);
    return gml_set_name(gml_add(ctx, h, m), "out");
}

gml_tensor *gml_llama_layer(gml_context *ctx, const gml_llama_config *cfg,
                            const gml_llama_weights *w, gml_tensor *x, gml_tensor *positions) {
    GML_MODELS_NONNULL(NULL, ctx, NULL);
    GML_MODELS_NONNULL(ctx, cfg, NULL);
    GML_MODELS_NONNULL(ctx, w, NULL);
    if (!x) {
        if (!gml_last_error(ctx)[0]) gml_set_error(ctx, L ": x is NULL");
        return NULL;
    }
    dims d;
    if (!check(ctx, cfg, w, x, &d)) return NULL;
    gml_tensor *h = gml_set_name(gml_rms_norm(ctx, x, w->attn_norm, d.eps), "attn_norm");
    gml_attn_weights aw = attn_weights(w);
    gml_tensor *att = gml_gqa(ctx, attn_config(cfg, &d), &aw,
                              (gml_attn_inputs){.query = h, .positions = positions}).out;
    return finish(ctx, &d, w, x, att);
}

gml_tensor *gml_llama_decode(gml_context *ctx, const gml_llama_config *cfg,
                             const gml_llama_weights *w, gml_tensor *x, const gml_kv_step *step,
                             int layer) {
    GML_MODELS_NONNULL(NULL, ctx, NULL);
    GML_MODELS_NONNULL(ctx, cfg, NULL);
    GML_MODELS_NONNULL(ctx, w, NULL);
    GML_MODELS_NONNULL(ctx, step, NULL);
    if (!x || !step->pos) {
        if (!gml_last_error(ctx)[0])
            gml_set_error(ctx, L " decode: %s is NULL", !x ? "x" : "the step (or its positions)");
        return NULL;
    }
    dims d;
    if (!check(ctx, cfg, w, x, &d)) return NULL;
    gml_tensor *h = gml_set_name(gml_rms_norm(ctx, x, w->attn_norm, d.eps), "attn_norm");
    gml_attn_weights aw = attn_weights(w); /* rope at the step's run-time positions */
    gml_tensor *att = gml_attn_decode(ctx, attn_config(cfg, &d), &aw, h, step, layer);
    return finish(ctx, &d, w, x, att);
}

gml_status gml_llama_weights_find(gml_context *wctx, const char *prefix, gml_llama_weights *w,
                                  char *err, size_t err_size) {
    GML_MODELS_NONNULL_ERR(wctx, GML_ERR_INVALID, err, err_size);
    GML_MODELS_NONNULL_ERR(w, GML_ERR_INVALID, err, err_size);
    if (!err) err_size = 0;
#define N(name, field, req) {name, offsetof(gml_llama_weights, field), req}
    static const gml_lay_name names[] = {
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
        {"self_attn.rotary_emb.inv_freq", -1, false}, /* older checkpoints' rope buffer */
    };
#undef N
    *w = (gml_llama_weights){0};
    return gml_lay_weights_find(L, wctx, prefix, names, (int)(sizeof names / sizeof *names), w, err,
                                err_size);
}
