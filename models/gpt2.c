/* The GPT-2 layer (layers.h): pre-LayerNorm, causal multi-head attention with
 * biases, GELU-tanh MLP; Conv1D weights [in, out] used as they are. As HF's
 * GPT2Block computes it. */
#include "misuse.h"
#include "layers_internal.h"

#include <math.h>
#include <stdio.h>

#define L "gpt2"

/* A Conv1D weight, [rows, cols] = [in, out]: one given in nn.Linear's layout
 * [out, in] (a transpose of the right shape, rows != cols) is named so. */
static bool check_conv(gml_context *ctx, const gml_tensor *t, const char *name, int64_t rows,
                       int64_t cols, const char *what) {
    if (t && t->n_dims == 2 && rows != cols && t->ne[2] == cols && t->ne[3] == rows) {
        char st[GML_SHAPE_MAX];
        return gml_lay_fail(ctx, L ": %s is %s, expected [%" PRId64 ",%" PRId64 "] (%s): it "
                            "looks transposed, nn.Linear's [out, in] layout; GPT-2's Conv1D "
                            "stores [in, out] (give its transpose)",
            name, GML_LAY_SHAPE(t, st), rows, cols, what);
    }
    return gml_lay_check_param(ctx, L, t, name, true, rows, cols, what);
}

static bool check(gml_context *ctx, const gml_gpt2_config *cfg, const gml_gpt2_weights *w,
                  gml_tensor *x, int64_t *B, int64_t *T, int64_t *D, int64_t *F) {
    if (!cfg || !w) return gml_lay_fail(ctx, L ": no %s (NULL)", !cfg ? "config" : "weights");
    if (!gml_lay_check_input(ctx, L, x, B, T, D)) return false;
    if (!(cfg->eps >= 0 && cfg->eps < INFINITY))
        return gml_lay_fail(ctx, L ": eps %g must be finite and >= 0 (0: 1e-5)", (double)cfg->eps);
    if (cfg->n_heads < 1 || *D % cfg->n_heads)
        return gml_lay_fail(ctx, L ": heads %d must be >= 1 and divide d_model %" PRId64,
                            cfg->n_heads, *D);
    const int64_t d = *D;
    /* Conv1D [in, out] is read as the b of x @ w: a q8_0 one would have its
     * blocks along out, where matmul needs them along in (the sum) */
    const gml_tensor *conv[] = {w->attn_w, w->proj_w, w->fc_w, w->mproj_w};
    const char *conv_name[] = {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight",
                               "mlp.c_proj.weight"};
    for (int i = 0; i < 4; i++)
        if (conv[i] && conv[i]->type == GML_Q8_0) {
            char st[GML_SHAPE_MAX];
            return gml_lay_fail(ctx, L ": %s is q8_0 %s: Conv1D weights [in, out] have q8_0's "
                                "blocks along out, and the product sums along in; give them f32, "
                                "f16 or bf16 (or transposed, as nn.Linear's [out, in], to another "
                                "layer)",
                                conv_name[i], GML_LAY_SHAPE(conv[i], st));
        }
    /* F: c_fc's bias [F] (then c_proj's rows, c_fc's columns), so that a c_fc of the
     * wrong shape is named against the F the others say */
    *F = w->fc_b && w->fc_b->n_dims == 1           ? w->fc_b->ne[3]
         : w->mproj_w && w->mproj_w->n_dims == 2 ? w->mproj_w->ne[2]
         : w->fc_w && w->fc_w->n_dims == 2       ? w->fc_w->ne[3]
                                                 : 4 * d;
    return gml_lay_check_param(ctx, L, w->ln1_w, "ln_1.weight", true, d, -1, "[D]") &&
           gml_lay_check_param(ctx, L, w->ln1_b, "ln_1.bias", true, d, -1, "[D]") &&
           check_conv(ctx, w->attn_w, "attn.c_attn.weight", d, 3 * d,
                      "[D, 3D], Conv1D [in, out]") &&
           gml_lay_check_param(ctx, L, w->attn_b, "attn.c_attn.bias", true, 3 * d, -1, "[3D]") &&
           gml_lay_check_param(ctx, L, w->proj_w, "attn.c_proj.weight", true, d, d, "[D, D]") &&
           gml_lay_check_param(ctx, L, w->proj_b, "attn.c_proj.bias", true, d, -1, "[D]") &&
           gml_lay_check_param(ctx, L, w->ln2_w, "ln_2.weight", true, d, -1, "[D]") &&
           gml_lay_check_param(ctx, L, w->ln2_b, "ln_2.bias", true, d, -1, "[D]") &&
           check_conv(ctx, w->fc_w, "mlp.c_fc.weight", d, *F, "[D, F], Conv1D [in, out]") &&
           gml_lay_check_param(ctx, L, w->fc_b, "mlp.c_fc.bias", true, *F, -1, "[F]") &&
           check_conv(ctx, w->mproj_w, "mlp.c_proj.weight", *F, d, "[F, D], Conv1D [in, out]") &&
           gml_lay_check_param(ctx, L, w->mproj_b, "mlp.c_proj.bias", true, d, -1, "[D]");
}

gml_tensor *gml_gpt2_layer(gml_context *ctx, const gml_gpt2_config *cfg, const gml_gpt2_weights *w,
                           gml_tensor *x) {
    GML_MODELS_NONNULL(NULL, ctx, NULL);
    GML_MODELS_NONNULL(ctx, cfg, NULL);
    GML_MODELS_NONNULL(ctx, w, NULL);
    if (!x) {
        if (!gml_last_error(ctx)[0]) gml_set_error(ctx, L ": x is NULL");
        return NULL;
    }
    int64_t B, T, D, F;
    if (!check(ctx, cfg, w, x, &B, &T, &D, &F)) return NULL;
    (void)B, (void)T;
    const float eps = cfg->eps != 0 ? cfg->eps : 1e-5f;
    gml_tensor *h = gml_set_name(gml_layer_norm(ctx, x, w->ln1_w, w->ln1_b, eps), "ln_1");
    /* c_attn's q | k | v columns and c_proj, Conv1D [in, out], seen as
     * nn.Linear's [out, in] (transposed views: the matmuls read them in place) */
    gml_attn_weights aw = {
        .w_q = gml_lay_conv1d_as_linear(ctx, w->attn_w, 0, D, "c_attn.weight[q]"),
        .b_q = gml_lay_conv1d_as_linear(ctx, w->attn_b, 0, D, "c_attn.bias[q]"),
        .w_k = gml_lay_conv1d_as_linear(ctx, w->attn_w, D, D, "c_attn.weight[k]"),
        .b_k = gml_lay_conv1d_as_linear(ctx, w->attn_b, D, D, "c_attn.bias[k]"),
        .w_v = gml_lay_conv1d_as_linear(ctx, w->attn_w, 2 * D, D, "c_attn.weight[v]"),
        .b_v = gml_lay_conv1d_as_linear(ctx, w->attn_b, 2 * D, D, "c_attn.bias[v]"),
        .w_o = gml_lay_conv1d_as_linear(ctx, w->proj_w, 0, 0, "c_proj.weight^T"),
        .b_o = w->proj_b,
    };
    gml_attn_config c = {.dims = {.d_model = D, .n_heads = cfg->n_heads},
                         .score = {.causal = GML_CAUSAL_BOTTOM_RIGHT}};
    gml_tensor *att = gml_mha(ctx, c, &aw, (gml_attn_inputs){.query = h}).out; /* [B, T, D] */
    gml_tensor *r = gml_set_name(gml_add(ctx, x, att), "h");
    gml_tensor *n = gml_set_name(gml_layer_norm(ctx, r, w->ln2_w, w->ln2_b, eps), "ln_2");
    gml_tensor *f =
        gml_set_name(gml_gelu_tanh(ctx, gml_lay_conv1d(ctx, n, w->fc_w, w->fc_b)), "fc");
    return gml_set_name(gml_add(ctx, r, gml_lay_conv1d(ctx, f, w->mproj_w, w->mproj_b)), "out");
}

gml_status gml_gpt2_weights_find(gml_context *wctx, const char *prefix, gml_gpt2_weights *w,
                                 char *err, size_t err_size) {
    GML_MODELS_NONNULL_ERR(wctx, GML_ERR_INVALID, err, err_size);
    GML_MODELS_NONNULL_ERR(w, GML_ERR_INVALID, err, err_size);
    if (!err) err_size = 0;
#define N(name, field) {name, offsetof(gml_gpt2_weights, field), true}
    static const gml_lay_name names[] = {
        N("ln_1.weight", ln1_w),          N("ln_1.bias", ln1_b),
        N("attn.c_attn.weight", attn_w),  N("attn.c_attn.bias", attn_b),
        N("attn.c_proj.weight", proj_w),  N("attn.c_proj.bias", proj_b),
        N("ln_2.weight", ln2_w),          N("ln_2.bias", ln2_b),
        N("mlp.c_fc.weight", fc_w),       N("mlp.c_fc.bias", fc_b),
        N("mlp.c_proj.weight", mproj_w),  N("mlp.c_proj.bias", mproj_b),
        {"attn.bias", -1, false},         {"attn.masked_bias", -1, false}, /* mask buffers */
    };
#undef N
    *w = (gml_gpt2_weights){0};
    return gml_lay_weights_find(L, wctx, prefix, names, (int)(sizeof names / sizeof *names), w, err,
                                err_size);
}
