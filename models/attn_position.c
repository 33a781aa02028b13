/* Stage 2, the position encoding: rope on q and k (with no encoding, q and
 * k pass as they are). */
#include "misuse.h"
#include "attn_internal.h"

gml_attn_qkv gml_attn_position_p(gml_context *ctx, const gml_attn_plan *p, gml_attn_qkv qkv,
                                 gml_tensor *q_pos, gml_tensor *k_pos) {
    if (p->cfg.pos.kind == GML_POS_NONE) return qkv;
    const gml_attn_rope *r = &p->cfg.pos.rope;
    const float theta = r->theta ? r->theta : 10000.0f;
    const float pos_scale = r->pos_scale ? r->pos_scale : 1.0f;
    if (!q_pos) { /* the queries are the last Tq positions (top-left: the first) */
        const int64_t start = p->cfg.score.causal == GML_CAUSAL_TOP_LEFT ? 0 : p->Tk - p->Tq;
        q_pos = gml_set_name(gml_arange(ctx, p->Tq, start), "q_pos"); /* [Tq] */
    }
    if (!k_pos) /* self-attention: the keys are the queries */
        k_pos = p->self ? q_pos : gml_set_name(gml_arange(ctx, p->Tk, 0), "k_pos"); /* [Tk] */
    gml_attn_qkv out = {
        .q = gml_set_name(gml_rope(ctx, qkv.q, q_pos, -2, r->rotary_dim, theta, pos_scale,
                                   r->interleaved), "q_rope"),
        .k = gml_set_name(gml_rope(ctx, qkv.k, k_pos, -2, r->rotary_dim, theta, pos_scale,
                                   r->interleaved), "k_rope"),
        .v = qkv.v};
    if (!out.q || !out.k) return (gml_attn_qkv){0};
    return out;
}

gml_attn_qkv gml_attn_position(gml_context *ctx, const gml_attn_config *cfg, gml_attn_qkv qkv,
                               gml_attn_inputs in) {
    GML_MODELS_NONNULL(NULL, ctx, (gml_attn_qkv){0});
    GML_MODELS_NONNULL(ctx, cfg, (gml_attn_qkv){0});
    gml_attn_plan p;
    if (!gml_attn_plan_qkv(ctx, "attn_position", cfg, qkv, &p) ||
        !gml_attn_check_config(ctx, &p, cfg, true) ||
        !gml_attn_check_masks(ctx, &p, &(gml_attn_inputs){.positions = in.positions}, NULL))
        return (gml_attn_qkv){0};
    p.self = in.key == NULL;
    if (p.self && p.Tq != p.Tk) {
        char sq[GML_SHAPE_MAX], sk[GML_SHAPE_MAX];
        gml_attn_fail(ctx, "attn_position: self-attention (no key input) but q %s and k %s differ "
                      "in length; give in.key for cross-attention", GML_SHAPE(qkv.q, sq),
                      GML_SHAPE(qkv.k, sk));
        return (gml_attn_qkv){0};
    }
    return gml_attn_position_p(ctx, &p, qkv, in.positions, NULL);
}
