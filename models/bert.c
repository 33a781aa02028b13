/* The BERT layer (layers.h): self-attention with biases and a padding mask,
 * post-LayerNorm residuals, GELU (erf) MLP. As HF's BertLayer computes it,
 * also for an item of valid length 0 (no_key_context). */
#include "misuse.h"
#include "layers_internal.h"

#include <math.h>
#include <stdio.h>

#define L "bert"

static bool check(gml_context *ctx, const gml_bert_config *cfg, const gml_bert_weights *w,
                  gml_tensor *x, gml_tensor *lens, int64_t *B, int64_t *T, int64_t *D,
                  int64_t *F) {
    if (!cfg || !w) return gml_lay_fail(ctx, L ": no %s (NULL)", !cfg ? "config" : "weights");
    if (!gml_lay_check_input(ctx, L, x, B, T, D)) return false;
    if (!(cfg->eps >= 0 && cfg->eps < INFINITY))
        return gml_lay_fail(ctx, L ": eps %g must be finite and >= 0 (0: 1e-12)", (double)cfg->eps);
    if (cfg->n_heads < 1 || *D % cfg->n_heads)
        return gml_lay_fail(ctx, L ": heads %d must be >= 1 and divide d_model %" PRId64,
                            cfg->n_heads, *D);
    char sl[GML_SHAPE_MAX];
    if (lens && (lens->type != GML_I32 || lens->n_dims != 1 || lens->ne[3] != *B))
        return gml_lay_fail(ctx, L ": valid_lens '%s' is %s %s, expected i32 [%" PRId64 "] ([B])",
                            lens->name, gml_type_name(lens->type), GML_LAY_SHAPE(lens, sl), *B);
    const int64_t d = *D;
    *F = w->wi && w->wi->n_dims == 2 ? w->wi->ne[2] : 4 * d;
    return gml_lay_check_param(ctx, L, w->wq, "attention.self.query.weight", true, d, d,
                               "[D, D]") &&
           gml_lay_check_param(ctx, L, w->bq, "attention.self.query.bias", true, d, -1, "[D]") &&
           gml_lay_check_param(ctx, L, w->wk, "attention.self.key.weight", true, d, d, "[D, D]") &&
           gml_lay_check_param(ctx, L, w->bk, "attention.self.key.bias", true, d, -1, "[D]") &&
           gml_lay_check_param(ctx, L, w->wv, "attention.self.value.weight", true, d, d,
                               "[D, D]") &&
           gml_lay_check_param(ctx, L, w->bv, "attention.self.value.bias", true, d, -1, "[D]") &&
           gml_lay_check_param(ctx, L, w->wo, "attention.output.dense.weight", true, d, d,
                               "[D, D]") &&
           gml_lay_check_param(ctx, L, w->bo, "attention.output.dense.bias", true, d, -1, "[D]") &&
           gml_lay_check_param(ctx, L, w->ln1_w, "attention.output.LayerNorm.weight", true, d, -1,
                               "[D]") &&
           gml_lay_check_param(ctx, L, w->ln1_b, "attention.output.LayerNorm.bias", true, d, -1,
                               "[D]") &&
           gml_lay_check_param(ctx, L, w->wi, "intermediate.dense.weight", true, *F, d, "[F, D]") &&
           gml_lay_check_param(ctx, L, w->bi, "intermediate.dense.bias", true, *F, -1, "[F]") &&
           gml_lay_check_param(ctx, L, w->wout, "output.dense.weight", true, d, *F, "[D, F]") &&
           gml_lay_check_param(ctx, L, w->bout, "output.dense.bias", true, d, -1, "[D]") &&
           gml_lay_check_param(ctx, L, w->ln2_w, "output.LayerNorm.weight", true, d, -1, "[D]") &&
           gml_lay_check_param(ctx, L, w->ln2_b, "output.LayerNorm.bias", true, d, -1, "[D]");
}

/* What HF's BertLayer adds for an item whose valid length is 0. HF masks
 * padding keys with the additive finfo(float32).min, a finite value: with no
 * valid key every score of the row rounds to that same value in float32, so
 * its softmax is uniform over all T keys and the context is the mean of v
 * over T (through W_o: u = mean_T(v) W_o^T, b_o being the block's). The
 * engine's own rule for a row with no visible key is zeros (flash_attn,
 * docs/contracts.md): the block's output there is b_o alone, so u is added,
 * selected per item by z = 1 when the length is 0, else 0:
 *     u = (mean_T(x) W_v^T + b_v) W_o^T       [B, 1, D]  (v is linear in x)
 *     keep0 = exp(valid_len_mask(lens)[.., 0]) [B, 1, 1, 1]: 1 when key 0 is valid
 *     z = exp(-1e30 keep0)                    1 when the length is 0, else 0
 * Lengths >= 1 add z u = 0: their output keeps its bits. */
static gml_tensor *no_key_context(gml_context *ctx, const gml_bert_weights *w, gml_tensor *x,
                                  gml_tensor *lens, int64_t B, int64_t T, int64_t D) {
    gml_tensor *xm = gml_mean(ctx, gml_transpose(ctx, x, 1, 2));              /* [B, D, 1] */
    xm = gml_reshape(ctx, xm, 3, (int64_t[]){B, 1, D});                        /* [B, 1, D] */
    gml_tensor *u = gml_linear(ctx, gml_linear(ctx, xm, w->wv, w->bv), w->wo, NULL);
    gml_tensor *m = gml_valid_len_mask(ctx, lens, T);                          /* [B, 1, 1, T] */
    gml_tensor *m0 =
        m ? gml_view(ctx, m, 3, (int64_t[]){B, 1, 1}, (size_t[]){m->nb[0], m->nb[2], m->nb[3]}, 0)
          : NULL; /* key 0: [B, 1, 1] */
    gml_tensor *z = gml_exp(ctx, gml_scale(ctx, gml_exp(ctx, m0), -1e30f));
    return gml_set_name(gml_mul(ctx, z, u), "no_key_context");                 /* [B, 1, D] */
}

gml_tensor *gml_bert_layer(gml_context *ctx, const gml_bert_config *cfg, const gml_bert_weights *w,
                           gml_tensor *x, gml_tensor *valid_lens) {
    GML_MODELS_NONNULL(NULL, ctx, NULL);
    GML_MODELS_NONNULL(ctx, cfg, NULL);
    GML_MODELS_NONNULL(ctx, w, NULL);
    if (!x) {
        if (!gml_last_error(ctx)[0]) gml_set_error(ctx, L ": x is NULL");
        return NULL;
    }
    int64_t B, T, D, F;
    if (!check(ctx, cfg, w, x, valid_lens, &B, &T, &D, &F)) return NULL;
    const float eps = cfg->eps != 0 ? cfg->eps : 1e-12f;
    gml_attn_weights aw = {.w_q = w->wq, .b_q = w->bq, .w_k = w->wk, .b_k = w->bk,
                           .w_v = w->wv, .b_v = w->bv, .w_o = w->wo, .b_o = w->bo};
    gml_attn_config c = {.dims = {.d_model = D, .n_heads = cfg->n_heads}};
    gml_tensor *att =
        gml_mha(ctx, c, &aw, (gml_attn_inputs){.query = x, .valid_lens = valid_lens}).out;
    if (valid_lens) att = gml_add(ctx, att, no_key_context(ctx, w, x, valid_lens, B, T, D));
    gml_tensor *s = gml_add(ctx, att, x); /* dense (W_o) is the block's */
    gml_tensor *h = gml_set_name(gml_layer_norm(ctx, s, w->ln1_w, w->ln1_b, eps), "attn_out");
    gml_tensor *i = gml_set_name(gml_gelu(ctx, gml_linear(ctx, h, w->wi, w->bi)), "intermediate");
    gml_tensor *o = gml_add(ctx, gml_linear(ctx, i, w->wout, w->bout), h);
    return gml_set_name(gml_layer_norm(ctx, o, w->ln2_w, w->ln2_b, eps), "out");
}

gml_status gml_bert_weights_find(gml_context *wctx, const char *prefix, gml_bert_weights *w,
                                 char *err, size_t err_size) {
    GML_MODELS_NONNULL_ERR(wctx, GML_ERR_INVALID, err, err_size);
    GML_MODELS_NONNULL_ERR(w, GML_ERR_INVALID, err, err_size);
    if (!err) err_size = 0;
#define N(name, field) {name, offsetof(gml_bert_weights, field), true}
    static const gml_lay_name names[] = {
        N("attention.self.query.weight", wq),       N("attention.self.query.bias", bq),
        N("attention.self.key.weight", wk),         N("attention.self.key.bias", bk),
        N("attention.self.value.weight", wv),       N("attention.self.value.bias", bv),
        N("attention.output.dense.weight", wo),     N("attention.output.dense.bias", bo),
        N("attention.output.LayerNorm.weight", ln1_w),
        N("attention.output.LayerNorm.bias", ln1_b),
        N("intermediate.dense.weight", wi),         N("intermediate.dense.bias", bi),
        N("output.dense.weight", wout),             N("output.dense.bias", bout),
        N("output.LayerNorm.weight", ln2_w),        N("output.LayerNorm.bias", ln2_b),
    };
#undef N
    *w = (gml_bert_weights){0};
    return gml_lay_weights_find(L, wctx, prefix, names, (int)(sizeof names / sizeof *names), w, err,
                                err_size);
}
