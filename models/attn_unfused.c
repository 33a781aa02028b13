/* The unfused attention, three ops over the heads:
 *
 *   gml_attn_scores   q k^T                          [B, H, Tq, Tk]
 *   gml_attn_softmax  scale, masks, softmax -> attn  [B, H, Tq, Tk]
 *   gml_attn_context  attn v                         [B, H, Tq, d_k]
 *
 * Grouped-query attention: H query heads share G key/value heads, query
 * head i using kv head i / (H/G). MHA is the case G = H, so the two matmuls
 * of every block live here, in both of GQA's graph forms:
 *
 *   GML_GQA_REPEAT     PyTorch's usual code: K and V repeat_interleave'd from
 *                      [B, G, Tk, d_k] to [B, H, Tk, d_k], then plain MHA.
 *   GML_GQA_BROADCAST  Q [B, H, Tq, d_k] made contiguous and seen as
 *                      [B, G, r*Tq, d_k] (r = H/G): the r query heads of kv
 *                      head g are rows of one matrix, multiplied by that kv
 *                      head's K^T [d_k, Tk] once. K and V stay [B, G, Tk, d_k];
 *                      the only copy is Q's (B*Tq*D floats against the
 *                      2*B*Tk*D of the repeated K and V).
 *
 * Both give the scores and attention weights as [B, H, Tq, Tk] (head i of
 * the broadcast form's [B, G, r*Tq, Tk] is row block i % r of group i / r,
 * which is the same memory), so masks, softmax and relative terms see one
 * layout. */
#include "attn_internal.h"

/* r = H/G query heads per kv head. */
static int64_t group(const gml_attn_plan *p) { return p->H / p->G; }

static bool grouped(const gml_attn_plan *p) {
    return p->cfg.graph.gqa_form == GML_GQA_BROADCAST && p->G != p->H;
}

/* kv heads [B, G, Tk, d_k] as the scores/context matmuls want them: repeated
 * to [B, H, Tk, d_k] (repeat form) or left at G (broadcast form). */
static gml_tensor *kv_heads(gml_context *ctx, const gml_attn_plan *p, gml_tensor *x,
                            const char *rep_name) {
    if (p->cfg.graph.gqa_form == GML_GQA_REPEAT && p->G != p->H)
        return gml_set_name(gml_repeat_interleave(ctx, x, (int)group(p), 1), rep_name);
    return x;
}

/* q [B, H, Tq, d_k], k [B, G, Tk, d_k] -> scores [B, H, Tq, Tk] = q k^T */
gml_tensor *gml_attn_scores(gml_context *ctx, const gml_attn_plan *p, gml_tensor *q,
                            gml_tensor *k) {
    gml_tensor *kt = gml_transpose(ctx, kv_heads(ctx, p, k, "k_rep"), -2, -1);
    if (!grouped(p)) /* [B, H, Tq, d_k] @ [B, H, d_k, Tk] */
        return gml_set_name(gml_matmul(ctx, q, kt), "scores");
    if (q && !gml_is_contiguous(q)) q = gml_set_name(gml_cont(ctx, q), "q_heads");
    q = gml_reshape(ctx, q, 4, (int64_t[]){p->B, p->G, group(p) * p->Tq, p->dk});
    gml_tensor *s = gml_set_name(gml_matmul(ctx, q, kt), "scores_grouped"); /* [B, G, r*Tq, Tk] */
    return gml_set_name(gml_reshape(ctx, s, 4, (int64_t[]){p->B, p->H, p->Tq, p->Tk}), "scores");
}

/* scores [B, H, Tq, Tk] -> attn [B, H, Tq, Tk] */
gml_tensor *gml_attn_softmax(gml_context *ctx, const gml_attn_plan *p, gml_tensor *scores,
                             const gml_attn_inputs *in, gml_tensor *sinks) {
    const gml_attn_opts o = gml_attn_opts_of(p, in, sinks);
    return gml_set_name(gml_softmax_ext(ctx, scores, p->scale, &o), "attn");
}

/* attn [B, H, Tq, Tk], v [B, G, Tk, d_k] -> ctx [B, H, Tq, d_k] = attn v */
gml_tensor *gml_attn_context(gml_context *ctx, const gml_attn_plan *p, gml_tensor *attn,
                             gml_tensor *v) {
    v = kv_heads(ctx, p, v, "v_rep");
    if (!grouped(p)) return gml_set_name(gml_matmul(ctx, attn, v), "ctx");
    gml_tensor *a = gml_reshape(ctx, attn, 4, (int64_t[]){p->B, p->G, group(p) * p->Tq, p->Tk});
    gml_tensor *c = gml_set_name(gml_matmul(ctx, a, v), "ctx_grouped"); /* [B, G, r*Tq, d_k] */
    return gml_set_name(gml_reshape(ctx, c, 4, (int64_t[]){p->B, p->H, p->Tq, p->dk}), "ctx");
}
