/* Stage 4, the merge: heads [B, H, Tq, d_k] back to [B, Tq, D], then the
 * output projection W_o. */
#include "misuse.h"
#include "attn_internal.h"

/* heads [B, H, Tq, d_k] -> out [B, Tq, D] */
gml_tensor *gml_attn_merge_p(gml_context *ctx, const gml_attn_plan *p, const gml_attn_weights *w,
                             gml_tensor *heads) {
    if (!heads) return NULL;
    heads = gml_permute(ctx, heads, (int[]){0, 2, 1, 3}); /* [B, Tq, H, d_k] */
    if (heads && !gml_is_contiguous(heads))
        heads = gml_set_name(gml_cont(ctx, heads), "ctx_merged");
    gml_tensor *merged = gml_reshape(ctx, heads, 3, (int64_t[]){p->B, p->Tq, p->H * p->dk});
    return gml_set_name(gml_linear(ctx, merged, w->w_o, w->b_o), "out");
}

gml_tensor *gml_attn_merge(gml_context *ctx, const gml_attn_weights *w, gml_tensor *heads) {
    GML_MODELS_NONNULL(NULL, ctx, NULL);
    if (!heads) {
        if (!gml_last_error(ctx)[0]) gml_set_error(ctx, "attn_merge: heads is NULL");
        return NULL;
    }
    char sh[GML_SHAPE_MAX];
    if (heads->type != GML_F32 || heads->n_dims != 4)
        return gml_set_error(ctx, "attn_merge: heads '%s' is %s %s, expected f32 [B, H, Tq, d_k]",
                             heads->name, gml_type_name(heads->type), GML_SHAPE(heads, sh));
    gml_attn_plan p = {.block = "attn_merge", .B = heads->ne[0], .H = heads->ne[1],
                       .Tq = heads->ne[2], .dk = heads->ne[3]};
    p.D = p.H * p.dk;
    if (!w) return gml_set_error(ctx, "attn_merge: no weights given (NULL)");
    if (!w->w_o)
        return gml_set_error(ctx, "attn_merge: w_o.weight (out_proj.weight) is missing (NULL)");
    gml_attn_weights wt_;
    w = gml_attn_linear_weights(ctx, w, &wt_);
    char what[96];
    snprintf(what, sizeof what, "[d_model, heads*d_k] for heads %s", GML_SHAPE(heads, sh));
    if (!gml_attn_check_param(ctx, &p, w->w_o, "w_o.weight", p.D, p.D, what) ||
        (w->b_o && !gml_attn_check_param(ctx, &p, w->b_o, "w_o.bias", p.D, -1, "[d_model]")))
        return NULL;
    return gml_attn_merge_p(ctx, &p, w, heads);
}
