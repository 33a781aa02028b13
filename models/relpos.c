/* Relative-position attention (Shaw, Uszkoreit, Vaswani 2018). Distances
 * j - i clipped to [-P, P] pick rows of tables rel_k, rel_v [2P+1, d_k]
 * shared by all heads:
 *
 *   e_ij = (q_i . k_j + q_i . a^K_ij) / sqrt(d_k)     a^K_ij = rel_k[clip(j-i) + P]
 *   z_i  = sum_j attn_ij (v_j + a^V_ij)               a^V_ij = rel_v[clip(j-i) + P]
 *
 * As a graph, with no loop over positions in C: the index matrix
 * idx [Tq, Tk] (gml_relpos_index) gathers a^K = rel_k[idx] [Tq, Tk, d_k];
 * the relative scores are one matmul batched over the query position i,
 *
 *   q as [Tq, B, H, d_k] (a permuted view) @ a^K^T as [Tq, 1, d_k, Tk]
 *     = rel_scores [Tq, B, H, Tk]  -> permuted view [B, H, Tq, Tk],
 *
 * added to the raw q k^T before the softmax's 1/sqrt(d_k) (which scales the
 * sum). The value term is the same in reverse: attn as [Tq, B, H, Tk] @
 * a^V [Tq, 1, Tk, d_k] = [Tq, B, H, d_k], added to the context while its
 * heads are merged (the add writes [B, Tq, H, d_k] contiguous, so it replaces
 * the merge's copy). */
#include "misuse.h"
#include "attn_internal.h"

/* table must be f32 [2P+1, d_k] */
static bool check_table(gml_context *ctx, const gml_attn_plan *p, const gml_tensor *t,
                        const char *role, int max_rel) {
    char what[96];
    snprintf(what, sizeof what, "[2*max_rel+1, d_k] with max_rel %d, d_k %" PRId64, max_rel,
             p->dk);
    return gml_attn_check_param(ctx, p, t, role, 2 * (int64_t)max_rel + 1, p->dk, what);
}

/* table [2P+1, d_k], idx [Tq, Tk] -> rows [Tq, 1, Tk, d_k] */
static gml_tensor *gather(gml_context *ctx, const gml_attn_plan *p, gml_tensor *table,
                          gml_tensor *idx, const char *name) {
    gml_tensor *rows = gml_set_name(gml_get_rows(ctx, table, idx), name); /* [Tq, Tk, d_k] */
    return gml_reshape(ctx, rows, 4, (int64_t[]){p->Tq, 1, p->Tk, p->dk});
}

gml_attn_result gml_relpos_attn(gml_context *ctx, gml_attn_config cfg, int max_rel,
                                const gml_attn_weights *w, gml_attn_inputs in) {
    GML_MODELS_NONNULL(NULL, ctx, (gml_attn_result){0});
    GML_MODELS_NONNULL(ctx, w, (gml_attn_result){0});
    const gml_attn_result fail = {0};
    gml_attn_plan p;
    gml_attn_weights wt_;
    if (!gml_attn_plan_inputs(ctx, "relpos", &cfg, &in, false, &p) ||
        !gml_attn_check_weights(ctx, &p, (w = gml_attn_linear_weights(ctx, w, &wt_)), true) ||
        !gml_attn_check_masks(ctx, &p, &in, w->sinks) ||
        !gml_attn_no_extras(ctx, &p, w, "relative-position attention"))
        return fail;
    if (max_rel < 0 || max_rel > (1 << 24)) {
        gml_attn_fail(ctx, "relpos: max_rel %d is out of range [0, 2^24]", max_rel);
        return fail;
    }
    if (!w->rel_k) {
        gml_attn_fail(ctx, "relpos: rel_k.weight is missing (NULL); relative attention needs a "
                           "key table [2*max_rel+1, d_k] (rel_v is optional)");
        return fail;
    }
    if (!check_table(ctx, &p, w->rel_k, "rel_k.weight", max_rel) ||
        (w->rel_v && !check_table(ctx, &p, w->rel_v, "rel_v.weight", max_rel)))
        return fail;

    gml_attn_qkv qkv = gml_attn_project_p(ctx, &p, w, &in);
    qkv = gml_attn_position_p(ctx, &p, qkv, in.positions, NULL);
    if (!qkv.q) return fail;
    gml_tensor *idx = gml_set_name(gml_relpos_index(ctx, p.Tq, p.Tk, max_rel), "rel_idx");
    gml_tensor *ak = gather(ctx, &p, w->rel_k, idx, "rel_k_rows"); /* [Tq, 1, Tk, d_k] */
    gml_tensor *q_by_pos = gml_permute(ctx, qkv.q, (int[]){2, 0, 1, 3}); /* [Tq, B, H, d_k] */
    gml_tensor *rel_scores = gml_set_name(gml_matmul(ctx, q_by_pos, gml_transpose(ctx, ak, -2, -1)),
                                          "rel_scores");                  /* [Tq,B,H,Tk] */
    gml_tensor *qk = gml_set_name(gml_attn_scores(ctx, &p, qkv.q, qkv.k), "scores_qk");
    gml_tensor *scores = /* [B, H, Tq, Tk] */
        gml_set_name(gml_add(ctx, qk, gml_permute(ctx, rel_scores, (int[]){1, 2, 0, 3})), "scores");
    gml_tensor *attn = gml_attn_softmax(ctx, &p, scores, &in, w->sinks); /* [B, H, Tq, Tk] */

    gml_tensor *heads = gml_attn_context(ctx, &p, attn, qkv.v); /* [B, H, Tq, d_k] */
    if (w->rel_v) {
        gml_tensor *av = gather(ctx, &p, w->rel_v, idx, "rel_v_rows"); /* [Tq, 1, Tk, d_k] */
        gml_tensor *attn_by_pos = gml_permute(ctx, attn, (int[]){2, 0, 1, 3}); /* [Tq,B,H,Tk] */
        gml_tensor *rel_ctx = gml_set_name(gml_matmul(ctx, attn_by_pos, av), "rel_ctx");
        /* [B, Tq, H, d_k] contiguous (replaces the merge's copy), seen as [B, H, Tq, d_k] */
        heads = gml_set_name(gml_add(ctx, gml_permute(ctx, heads, (int[]){0, 2, 1, 3}),
                                     gml_permute(ctx, rel_ctx, (int[]){1, 0, 2, 3})),
                             "ctx_merged");
        heads = gml_permute(ctx, heads, (int[]){0, 2, 1, 3});
    }
    gml_tensor *out = gml_attn_merge_p(ctx, &p, w, heads);
    if (!out || !attn) return fail;
    return (gml_attn_result){.out = out, .weights = p.cfg.graph.want_weights ? attn : NULL};
}
