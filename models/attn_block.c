/* The whole blocks, gml_mha and gml_gqa: the stages in order
 * (gml_attn_block), plan and checks -> project -> position -> extra key
 * rows -> attend -> merge.
 *
 * Multi-head attention, as PyTorch code writes it:
 *
 *   q, k, v = x W_q^T, x W_k^T, x W_v^T           [B, T, D]
 *   -> view [B, T, H, d_k] -> permute [B, H, T, d_k]  (views, no copies)
 *   attn = softmax(q k^T / sqrt(d_k) + masks)     [B, H, Tq, Tk]
 *   ctx  = attn v                                 [B, H, Tq, d_k]
 *   out  = ctx -> [B, Tq, H, d_k] -> [B, Tq, D], W_o
 *
 * Only the merge of the heads copies (PyTorch's .contiguous()); k^T is a
 * transposed view the matmul reads as it is, and 1/sqrt(d_k) is fused into
 * the softmax. That is the unfused graph, which gives the weights; the fused
 * one replaces scores, softmax and context by one
 * gml_flash_attn and needs no copy at all. */
#include "misuse.h"
#include "attn_internal.h"

gml_attn_result gml_attn_block(gml_context *ctx, const char *block, const gml_attn_config *cfg,
                               const gml_attn_weights *w, const gml_attn_inputs *in) {
    gml_attn_plan p;
    gml_attn_weights wt_;
    if (!gml_attn_plan_inputs(ctx, block, cfg, in, true, &p) ||
        !gml_attn_check_weights(ctx, &p, (w = gml_attn_linear_weights(ctx, w, &wt_)), true) ||
        !gml_attn_check_masks(ctx, &p, in, w->sinks))
        return (gml_attn_result){0};
    gml_attn_qkv qkv = gml_attn_project_p(ctx, &p, w, in);
    qkv = gml_attn_position_p(ctx, &p, qkv, in->positions, NULL);
    gml_attn_inputs ain = *in;
    if (!gml_attn_append_extras(ctx, &p, w, &qkv, &ain)) return (gml_attn_result){0};
    gml_attn_heads h = gml_attn_attend_p(ctx, &p, qkv, &ain, w->sinks);
    gml_tensor *out = gml_attn_merge_p(ctx, &p, w, h.heads);
    if (!out) return (gml_attn_result){0};
    return (gml_attn_result){.out = out, .weights = h.weights};
}

gml_attn_result gml_mha(gml_context *ctx, gml_attn_config cfg, const gml_attn_weights *w,
                        gml_attn_inputs in) {
    GML_MODELS_NONNULL(NULL, ctx, (gml_attn_result){0});
    GML_MODELS_NONNULL(ctx, w, (gml_attn_result){0});
    if (ctx && cfg.dims.n_kv_heads != 0 && cfg.dims.n_kv_heads != cfg.dims.n_heads) {
        gml_set_error(ctx, "mha: kv_heads %d differs from heads %d; grouped-query attention is "
                      "gml_gqa", cfg.dims.n_kv_heads, cfg.dims.n_heads);
        return (gml_attn_result){0};
    }
    /* project -> position -> attend (scores, softmax, context | flash) -> merge */
    return gml_attn_block(ctx, "mha", &cfg, w, &in);
}

gml_attn_result gml_gqa(gml_context *ctx, gml_attn_config cfg, const gml_attn_weights *w,
                        gml_attn_inputs in) {
    GML_MODELS_NONNULL(NULL, ctx, (gml_attn_result){0});
    GML_MODELS_NONNULL(ctx, w, (gml_attn_result){0});
    /* the fused graph reads kv head h / (H/G) in place */
    return gml_attn_block(ctx, "gqa", &cfg, w, &in);
}
