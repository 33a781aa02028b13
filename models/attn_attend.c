/* Stage 3, attention over the heads: the fused graph (one
 * gml_flash_attn_ext) or the unfused one (attn_unfused.c), with the
 * attention weights when asked. */
#include "misuse.h"
#include "attn_internal.h"

gml_attn_heads gml_attn_attend_p(gml_context *ctx, const gml_attn_plan *p, gml_attn_qkv qkv,
                                 const gml_attn_inputs *in, gml_tensor *sinks) {
    if (!qkv.q || !qkv.k || !qkv.v) return (gml_attn_heads){0};
    if (p->fused) { /* flash [B, H, Tq, d_k], stored [B, Tq, H, d_k] */
        const gml_attn_opts o = gml_attn_opts_of(p, in, sinks);
        gml_tensor *f = gml_flash_attn_ext(ctx, qkv.q, qkv.k, qkv.v, p->scale, &o);
        return (gml_attn_heads){.heads = gml_set_name(f, "flash")};
    }
    gml_tensor *attn = gml_attn_softmax(ctx, p, gml_attn_scores(ctx, p, qkv.q, qkv.k), in, sinks);
    gml_tensor *heads = gml_attn_context(ctx, p, attn, qkv.v); /* [B, H, Tq, d_k] */
    if (!heads) return (gml_attn_heads){0};
    /* The weights only when asked: not handed out, they are an intermediate
     * whose memory the planner reuses once the context has read them. */
    return (gml_attn_heads){.heads = heads, .weights = p->cfg.graph.want_weights ? attn : NULL};
}

gml_attn_heads gml_attn_attend(gml_context *ctx, const gml_attn_config *cfg, gml_attn_qkv qkv,
                               gml_attn_inputs in, gml_tensor *sinks) {
    GML_MODELS_NONNULL(NULL, ctx, (gml_attn_heads){0});
    GML_MODELS_NONNULL(ctx, cfg, (gml_attn_heads){0});
    gml_attn_plan p;
    if (!gml_attn_plan_qkv(ctx, "attn_attend", cfg, qkv, &p) ||
        !gml_attn_check_config(ctx, &p, cfg, true) || !gml_attn_check_masks(ctx, &p, &in, sinks) ||
        !gml_attn_no_extras(ctx, &p, NULL, "the stages"))
        return (gml_attn_heads){0};
    return gml_attn_attend_p(ctx, &p, qkv, &in, sinks);
}
