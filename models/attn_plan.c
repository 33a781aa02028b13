/* A block's plan: its sizes from the inputs (or, for the public stages
 * after the projections, from q, k and v), the checks of its config, inputs
 * and masks, and the attention ops' options it gives. Every message starts
 * with the plan's block. */
#include "attn_internal.h"

#include <math.h>

bool gml_attn_fail(gml_context *ctx, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    gml_set_error_v(ctx, fmt, ap);
    va_end(ap);
    return false;
}

/* x must be f32 [B, T, D] with the given B (b < 0: any) and D (d < 0: any). */
static bool check_input(gml_context *ctx, const gml_attn_plan *p, const gml_tensor *x,
                        const char *role, int64_t b, int64_t d) {
    char sx[GML_SHAPE_MAX];
    if (x->type != GML_F32 || x->n_dims != 3) {
        return gml_attn_fail(ctx, "%s: %s '%s' is %s %s, expected f32 [B, T, d_model]", p->block,
                             role, x->name, gml_type_name(x->type), GML_SHAPE(x, sx));
    }
    if ((b >= 0 && x->ne[1] != b) || (d >= 0 && x->ne[3] != d)) {
        if (d < 0)
            return gml_attn_fail(ctx, "%s: %s '%s' is %s, expected [%" PRId64 ", T, %s] "
                                 "(batch of the query)", p->block, role, x->name,
                                 GML_SHAPE(x, sx), p->B, role[0] == 'k' ? "kdim" : "vdim");
        return gml_attn_fail(ctx,
                             "%s: %s '%s' is %s, expected [%" PRId64 ", T, %" PRId64 "] "
                             "(batch of the query, d_model)",
                             p->block, role, x->name, GML_SHAPE(x, sx), p->B, d);
    }
    return true;
}

/* Heads, kv heads and d_model against each other and the query. */
static bool check_dims(gml_context *ctx, gml_attn_plan *p, const gml_attn_config *cfg,
                       const gml_tensor *query) {
    char sq[GML_SHAPE_MAX];
    if (query->type != GML_F32 || query->n_dims != 3)
        return gml_attn_fail(ctx, "%s: query '%s' is %s %s, expected f32 [B, Tq, d_model]",
                             p->block, query->name, gml_type_name(query->type),
                             GML_SHAPE(query, sq));
    const gml_attn_dims *d = &cfg->dims;
    p->B = query->ne[1];
    p->Tq = query->ne[2];
    p->D = query->ne[3];
    if (d->d_model != 0 && d->d_model != p->D)
        return gml_attn_fail(ctx, "%s: query '%s' is %s, but d_model is %" PRId64, p->block,
                             query->name, GML_SHAPE(query, sq), d->d_model);
    if (d->n_heads < 1)
        return gml_attn_fail(ctx, "%s: heads is %d, must be >= 1", p->block, d->n_heads);
    if (p->D % d->n_heads)
        return gml_attn_fail(ctx, "%s: d_model %" PRId64 " is not divisible by heads %d", p->block,
                             p->D, d->n_heads);
    int g = d->n_kv_heads ? d->n_kv_heads : d->n_heads;
    if (g < 1 || g > d->n_heads || d->n_heads % g)
        return gml_attn_fail(ctx, "%s: kv_heads %d must divide heads %d (1 <= kv_heads <= heads)",
                             p->block, g, d->n_heads);
    p->H = d->n_heads;
    p->G = g;
    p->dk = p->D / p->H;
    return true;
}

bool gml_attn_check_config(gml_context *ctx, gml_attn_plan *p, const gml_attn_config *cfg,
                           bool can_fuse) {
    const gml_attn_scoring *s = &cfg->score;
    const gml_attn_posenc *pe = &cfg->pos;
    const gml_attn_graph_opts *go = &cfg->graph;
    if (go->gqa_form != GML_GQA_BROADCAST && go->gqa_form != GML_GQA_REPEAT)
        return gml_attn_fail(ctx, "%s: unknown gqa_form %d", p->block, (int)go->gqa_form);
    if ((unsigned)go->impl > GML_ATTN_UNFUSED)
        return gml_attn_fail(ctx, "%s: unknown attention impl %d (auto, fused or unfused)",
                             p->block, (int)go->impl);
    if (go->impl == GML_ATTN_FUSED && go->want_weights)
        return gml_attn_fail(ctx, "%s: the fused graph has no attention weights; ask for the "
                             "unfused graph (or auto) to get them", p->block);
    if (!can_fuse && go->impl == GML_ATTN_FUSED)
        return gml_attn_fail(ctx, "%s: has no fused graph; use impl unfused (or auto)", p->block);
    if ((unsigned)s->causal > GML_CAUSAL_TOP_LEFT)
        return gml_attn_fail(ctx, "%s: unknown causal alignment %d (none, bottom-right, "
                             "top-left)", p->block, (int)s->causal);
    if (s->window < 0)
        return gml_attn_fail(ctx, "%s: window %" PRId64 " is negative (0: no window)", p->block,
                             s->window);
    if (!(s->softcap >= 0 && s->softcap < INFINITY))
        return gml_attn_fail(ctx, "%s: softcap %g must be finite and >= 0 (0: none)", p->block,
                             (double)s->softcap);
    if (!(s->alibi_max_bias >= 0 && s->alibi_max_bias < INFINITY))
        return gml_attn_fail(ctx, "%s: alibi_max_bias %g must be finite and >= 0 (0: none)",
                             p->block, (double)s->alibi_max_bias);
    if (!(s->scale >= 0 && s->scale < INFINITY))
        return gml_attn_fail(ctx, "%s: scale %g must be finite and > 0 (0: 1/sqrt(d_k))",
                             p->block, (double)s->scale);
    if (pe->kind != GML_POS_NONE && pe->kind != GML_POS_ROPE)
        return gml_attn_fail(ctx, "%s: unknown position encoding %d (none or rope)", p->block,
                             (int)pe->kind);
    if (pe->kind == GML_POS_ROPE) {
        const gml_attn_rope *r = &pe->rope;
        if (r->rotary_dim < 0 || r->rotary_dim % 2 || r->rotary_dim > p->dk)
            return gml_attn_fail(ctx, "%s: rope rotary_dim %d must be even and in [0, d_k %" PRId64
                                 "] (0: d_k)", p->block, r->rotary_dim, p->dk);
        if (p->dk % 2 && r->rotary_dim == 0)
            return gml_attn_fail(ctx, "%s: rope needs an even d_k, or an even rotary_dim < d_k; "
                                 "d_k is %" PRId64, p->block, p->dk);
        if (!(r->theta >= 0 && r->theta < INFINITY) || r->theta == 1)
            return gml_attn_fail(ctx, "%s: rope theta %g must be finite, > 0 and not 1 (0: 10000)",
                                 p->block, (double)r->theta);
        if (!(r->pos_scale >= 0 && r->pos_scale < INFINITY))
            return gml_attn_fail(ctx, "%s: rope pos_scale %g must be finite and > 0 (0: 1)",
                                 p->block, (double)r->pos_scale);
    }
    p->cfg = *cfg;
    p->cfg.dims = (gml_attn_dims){.d_model = p->D, .n_heads = (int)p->H, .n_kv_heads = (int)p->G};
    p->fused = can_fuse && (go->impl == GML_ATTN_FUSED ||
                            (go->impl == GML_ATTN_AUTO && !go->want_weights));
    p->scale = s->scale ? s->scale : (float)(1.0 / sqrt((double)p->dk));
    return true;
}

bool gml_attn_plan_inputs(gml_context *ctx, const char *block, const gml_attn_config *cfg,
                          const gml_attn_inputs *in, bool can_fuse, gml_attn_plan *p) {
    if (!ctx) return false;
    *p = (gml_attn_plan){.block = block};
    if (!cfg) return gml_attn_fail(ctx, "%s: no config (NULL)", block);
    if (!in->query || (in->key == NULL && in->value != NULL)) {
        /* A NULL input is an earlier builder's failure: keep its message. */
        if (!gml_last_error(ctx)[0])
            gml_set_error(ctx, "%s: %s is NULL", block,
                          in->query ? "key (with a value given)" : "query");
        return false;
    }
    if (!check_dims(ctx, p, cfg, in->query)) return false;
    if (!gml_attn_check_config(ctx, p, cfg, can_fuse)) return false;

    gml_tensor *key = in->key ? in->key : in->query;
    gml_tensor *value = in->value ? in->value : key;
    /* kdim, vdim: checked against w_k, w_v (gml_attn_check_weights) */
    if (!check_input(ctx, p, key, "key", p->B, -1) ||
        !check_input(ctx, p, value, "value", p->B, -1))
        return false;
    p->kdim = key->ne[3];
    p->vdim = value->ne[3];
    if (value->ne[2] != key->ne[2]) {
        char sk[GML_SHAPE_MAX], sv[GML_SHAPE_MAX];
        return gml_attn_fail(ctx, "%s: key '%s' %s and value '%s' %s differ in length Tk", block,
                             key->name, GML_SHAPE(key, sk), value->name, GML_SHAPE(value, sv));
    }
    p->Tk = key->ne[2];
    p->self = in->key == NULL;
    return true;
}

bool gml_attn_check_masks(gml_context *ctx, const gml_attn_plan *p, const gml_attn_inputs *in,
                          const gml_tensor *sinks) {
    char st[GML_SHAPE_MAX];
    const gml_tensor *lens = in->valid_lens, *mask = in->mask, *pos = in->positions;
    if (lens && !(lens->type == GML_I32 &&
                  ((lens->n_dims == 1 && lens->ne[3] == p->B) ||
                   (lens->n_dims == 2 && lens->ne[2] == p->B && lens->ne[3] == p->Tq))))
        return gml_attn_fail(ctx,
                             "%s: valid_lens '%s' is %s %s, expected i32 [%" PRId64 "] or [%" PRId64
                             ",%" PRId64 "] ([B] or [B, Tq])",
                             p->block, lens->name, gml_type_name(lens->type), GML_SHAPE(lens, st),
                             p->B, p->B, p->Tq);
    if (mask) {
        const int64_t full[4] = {p->B, p->H, p->Tq, p->Tk};
        bool ok = mask->type == GML_F32;
        for (int d = 4 - mask->n_dims; d < 4; d++)
            ok = ok && (mask->ne[d] == 1 || mask->ne[d] == full[d]);
        if (!ok)
            return gml_attn_fail(ctx,
                                 "%s: mask '%s' is %s %s, expected f32 broadcastable to [B, H, "
                                 "Tq, Tk] = [%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64
                                 "] (each dim 1 or equal, e.g. [Tq, Tk] or [B, 1, 1, Tk])",
                                 p->block, mask->name, gml_type_name(mask->type),
                                 GML_SHAPE(mask, st), p->B, p->H, p->Tq, p->Tk);
    }
    if (pos && !(pos->type == GML_I32 && pos->n_dims == 2 && pos->ne[2] == p->B &&
                 pos->ne[3] == p->Tq))
        return gml_attn_fail(ctx,
                             "%s: positions '%s' is %s %s, expected i32 [%" PRId64 ",%" PRId64
                             "] ([B, Tq])",
                             p->block, pos->name, gml_type_name(pos->type), GML_SHAPE(pos, st),
                             p->B, p->Tq);
    if (sinks && !(sinks->type == GML_F32 && sinks->n_dims == 1 && sinks->ne[3] == p->H))
        return gml_attn_fail(ctx, "%s: sinks '%s' is %s %s, expected f32 [%" PRId64 "] ([heads])",
                             p->block, sinks->name, gml_type_name(sinks->type),
                             GML_SHAPE(sinks, st), p->H);
    return true;
}

/* Sizes from q [B, H, Tq, d_k], k [B, G, Tk, d_k], v [B, G, Tk, d_k]. */
bool gml_attn_plan_qkv(gml_context *ctx, const char *block, const gml_attn_config *cfg,
                       gml_attn_qkv qkv, gml_attn_plan *p) {
    if (!ctx) return false;
    *p = (gml_attn_plan){.block = block};
    if (!cfg) return gml_attn_fail(ctx, "%s: no config (NULL)", block);
    if (!qkv.q || !qkv.k || !qkv.v) {
        if (!gml_last_error(ctx)[0])
            gml_set_error(ctx, "%s: %s is NULL", block, !qkv.q ? "q" : !qkv.k ? "k" : "v");
        return false;
    }
    char sq[GML_SHAPE_MAX], sk[GML_SHAPE_MAX], sv[GML_SHAPE_MAX];
    const gml_tensor *q = qkv.q, *k = qkv.k, *v = qkv.v;
    if (q->type != GML_F32 || k->type != GML_F32 || v->type != GML_F32 || q->n_dims != 4 ||
        k->n_dims != 4 || v->n_dims != 4 || k->ne[0] != q->ne[0] || v->ne[0] != q->ne[0] ||
        k->ne[3] != q->ne[3] || v->ne[3] != q->ne[3] || v->ne[1] != k->ne[1] ||
        v->ne[2] != k->ne[2] || k->ne[1] < 1 || q->ne[1] % k->ne[1])
        return gml_attn_fail(ctx,
                             "%s: q '%s' %s %s, k '%s' %s %s, v '%s' %s %s do not fit: expected "
                             "f32 q [B, H, Tq, d_k], k and v [B, G, Tk, d_k] with G dividing H",
                             block, q->name, gml_type_name(q->type), GML_SHAPE(q, sq), k->name,
                             gml_type_name(k->type), GML_SHAPE(k, sk), v->name,
                             gml_type_name(v->type), GML_SHAPE(v, sv));
    p->B = q->ne[0];
    p->H = q->ne[1];
    p->Tq = q->ne[2];
    p->dk = q->ne[3];
    p->G = k->ne[1];
    p->Tk = k->ne[2];
    p->D = p->H * p->dk;
    return true;
}

/* The options of the attention ops: the config's scoring, the inputs'
 * masks and positions, the sinks. */
gml_attn_opts gml_attn_opts_of(const gml_attn_plan *p, const gml_attn_inputs *in,
                               gml_tensor *sinks) {
    const gml_attn_scoring *s = &p->cfg.score;
    return (gml_attn_opts){.mask = in->mask,
                           .valid_lens = in->valid_lens,
                           .positions = in->positions,
                           .sinks = sinks,
                           .causal = s->causal,
                           .window = s->window,
                           .softcap = s->softcap,
                           .alibi_max_bias = s->alibi_max_bias};
}
