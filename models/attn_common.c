/* What every attention block does the same way: check the config, inputs
 * and weights; the q, k, v projections (separate or packed weights); the
 * valid-length mask; the softmax; merging heads and the output projection;
 * binding weights by name; parameter counts. */
#include "attn_internal.h"

#include <math.h>
#include <string.h>

/* ---- checks ------------------------------------------------------------- */

bool gml_attn_fail(gml_context *ctx, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    gml_set_error_v(ctx, fmt, ap);
    va_end(ap);
    return false;
}

/* "w_k.weight" or, when the tensor carries another name, "w_k.weight ('x')". */
static const char *role_label(const gml_tensor *t, const char *role, char *buf, size_t size) {
    if (strcmp(t->name, role) == 0)
        snprintf(buf, size, "%s", role);
    else
        snprintf(buf, size, "%s ('%s')", role, t->name);
    return buf;
}

bool gml_attn_weight_type(gml_type t) {
    return t == GML_F32 || t == GML_F16 || t == GML_BF16 || t == GML_Q8_0;
}

bool gml_attn_check_param(gml_context *ctx, const gml_attn_plan *p, const gml_tensor *t,
                          const char *role, int64_t rows, int64_t cols, const char *what) {
    bool shape_ok = cols < 0 ? t->n_dims == 1 && t->ne[3] == rows
                             : t->n_dims == 2 && t->ne[2] == rows && t->ne[3] == cols;
    /* matrices (projections, relative-position tables) may be f16, bf16 or
     * q8_0 (linear and get_rows convert them); vectors (biases, sinks) f32 */
    const bool type_ok = t->type == GML_F32 || (cols >= 0 && gml_attn_weight_type(t->type));
    if (shape_ok && type_ok) return true;
    char label[GML_MAX_NAME + 32], st[GML_SHAPE_MAX], want[GML_SHAPE_MAX];
    if (cols < 0)
        snprintf(want, sizeof want, "[%" PRId64 "]", rows);
    else
        snprintf(want, sizeof want, "[%" PRId64 ",%" PRId64 "]", rows, cols);
    role_label(t, role, label, sizeof label);
    if (!type_ok)
        return gml_attn_fail(ctx, "%s: %s is %s %s, expected %s %s (%s)", p->block, label,
                             gml_type_name(t->type), GML_SHAPE(t, st),
                             cols >= 0 ? "f32, f16, bf16 or q8_0" : "f32", want, what);
    return gml_attn_fail(ctx, "%s: %s is %s, expected %s (%s)", p->block, label, GML_SHAPE(t, st),
                         want, what);
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

/* The projection tensors: separate or packed, shapes as the config says. */
bool gml_attn_check_weights(gml_context *ctx, const gml_attn_plan *p, const gml_attn_weights *w,
                            bool out_proj) {
    if (!w) return gml_attn_fail(ctx, "%s: no weights given (NULL)", p->block);
    const int64_t D = p->D, kv = p->G * p->dk;
    const char *kv_rows = p->G == p->H ? "[d_model, d_model]" : "[kv_heads*d_k, d_model]";
    const char *kv_len = p->G == p->H ? "[d_model]" : "[kv_heads*d_k]";
    bool packed = w->in_proj_weight != NULL;
    if (packed && (w->w_q || w->w_k || w->w_v || w->b_q || w->b_k || w->b_v))
        return gml_attn_fail(ctx,
                             "%s: weights given both packed (in_proj_weight) and separate "
                             "(w_q/w_k/w_v); give one",
                             p->block);
    if (!packed && w->in_proj_bias && (w->b_q || w->b_k || w->b_v))
        return gml_attn_fail(ctx, "%s: in_proj_bias given with separate biases b_q/b_k/b_v; "
                             "give one", p->block);
    if (!packed && w->in_proj_bias &&
        !gml_attn_check_param(ctx, p, w->in_proj_bias, "in_proj_bias", D + 2 * kv, -1,
                              "b_q, b_k, b_v"))
        return false;
    const int64_t kdim = p->kdim ? p->kdim : D, vdim = p->vdim ? p->vdim : D;
    if (packed && (kdim != D || vdim != D))
        return gml_attn_fail(ctx,
                             "%s: in_proj_weight needs key and value of d_model %" PRId64
                             ", got kdim %" PRId64 " and vdim %" PRId64
                             "; give separate w_q, w_k [kv, kdim], w_v [kv, vdim] "
                             "(q_proj_weight, k_proj_weight, v_proj_weight)",
                             p->block, D, kdim, vdim);
    if (!!w->bias_k != !!w->bias_v)
        return gml_attn_fail(ctx, "%s: %s given without %s (add_bias_kv needs both)", p->block,
                             w->bias_k ? "bias_k" : "bias_v", w->bias_k ? "bias_v" : "bias_k");
    for (int i = 0; i < 2 && w->bias_k; i++) {
        const gml_tensor *t = i ? w->bias_v : w->bias_k;
        bool ok = t->type == GML_F32 && t->ne[3] == kv &&
                  (t->n_dims == 1 || (t->n_dims == 3 && t->ne[1] == 1 && t->ne[2] == 1));
        if (!ok) {
            char st[GML_SHAPE_MAX];
            return gml_attn_fail(ctx, "%s: %s '%s' is %s %s, expected f32 [1,1,%" PRId64
                                 "] or [%" PRId64 "] ([1, 1, %s])", p->block,
                                 i ? "bias_v" : "bias_k", t->name, gml_type_name(t->type),
                                 GML_SHAPE(t, st), kv, kv,
                                 p->G == p->H ? "d_model" : "kv_heads*d_k");
        }
    }
    if (packed) {
        char what[96];
        snprintf(what, sizeof what, "rows of w_q, w_k, w_v: [d_model + 2*%s, d_model]",
                 p->G == p->H ? "d_model" : "kv_heads*d_k");
        if (!gml_attn_check_param(ctx, p, w->in_proj_weight, "in_proj_weight", D + 2 * kv, D, what))
            return false;
        if (w->in_proj_weight->type == GML_Q8_0) {
            char st[GML_SHAPE_MAX];
            return gml_attn_fail(ctx,
                                 "%s: in_proj_weight is q8_0 %s: a q8_0 tensor cannot be split "
                                 "into the q, k, v row blocks (no views of q8_0 but its "
                                 "transpose); give w_q, w_k, w_v separately, or f32/f16/bf16",
                                 p->block, GML_SHAPE(w->in_proj_weight, st));
        }
        if (w->in_proj_bias && !gml_attn_check_param(ctx, p, w->in_proj_bias, "in_proj_bias",
                                                     D + 2 * kv, -1, "b_q, b_k, b_v"))
            return false;
    } else {
        const char *missing = !w->w_q ? "w_q" : !w->w_k ? "w_k" : !w->w_v ? "w_v" : NULL;
        if (missing)
            return gml_attn_fail(ctx,
                                 "%s: %s.weight is missing (NULL): give w_q, w_k, w_v or "
                                 "in_proj_weight",
                                 p->block, missing);
        char k_rows[128], v_rows[128];
        snprintf(k_rows, sizeof k_rows, "%s", kv_rows);
        snprintf(v_rows, sizeof v_rows, "%s", kv_rows);
        if (kdim != D)
            snprintf(k_rows, sizeof k_rows, "[%s, kdim]: the key's last dim is %" PRId64,
                     p->G == p->H ? "d_model" : "kv_heads*d_k", kdim);
        if (vdim != D)
            snprintf(v_rows, sizeof v_rows, "[%s, vdim]: the value's last dim is %" PRId64,
                     p->G == p->H ? "d_model" : "kv_heads*d_k", vdim);
        if (!gml_attn_check_param(ctx, p, w->w_q, "w_q.weight", D, D, "[d_model, d_model]") ||
            !gml_attn_check_param(ctx, p, w->w_k, "w_k.weight", kv, kdim, k_rows) ||
            !gml_attn_check_param(ctx, p, w->w_v, "w_v.weight", kv, vdim, v_rows) ||
            (w->b_q && !gml_attn_check_param(ctx, p, w->b_q, "w_q.bias", D, -1, "[d_model]")) ||
            (w->b_k && !gml_attn_check_param(ctx, p, w->b_k, "w_k.bias", kv, -1, kv_len)) ||
            (w->b_v && !gml_attn_check_param(ctx, p, w->b_v, "w_v.bias", kv, -1, kv_len)))
            return false;
    }
    if (!out_proj) return true;
    if (!w->w_o)
        return gml_attn_fail(ctx, "%s: w_o.weight (out_proj.weight) is missing (NULL)", p->block);
    return gml_attn_check_param(ctx, p, w->w_o, "w_o.weight", D, D, "[d_model, d_model]") &&
           (!w->b_o || gml_attn_check_param(ctx, p, w->b_o, "w_o.bias", D, -1, "[d_model]"));
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

/* ---- stage 1: projections ------------------------------------------------ */

/* Rows [r0, r0 + n) of a packed [R, C] matrix, or elements of a [R] vector:
 * a view, no copy. */
static gml_tensor *packed_rows(gml_context *ctx, gml_tensor *t, int64_t r0, int64_t n,
                               const char *name) {
    if (!t) return NULL;
    gml_tensor *v = t->n_dims == 2 ? gml_view(ctx, t, 2, (int64_t[]){n, t->ne[3]},
                                              (size_t[]){t->nb[2], t->nb[3]}, (size_t)r0 * t->nb[2])
                                   : gml_view(ctx, t, 1, (int64_t[]){n}, (size_t[]){t->nb[3]},
                                              (size_t)r0 * t->nb[3]);
    return gml_set_name(v, name);
}

/* x [B, T, n*d_k] -> [B, n, T, d_k] (a view) */
static gml_tensor *heads_of(gml_context *ctx, gml_tensor *x, int64_t n, int64_t dk) {
    if (!x) return NULL;
    gml_tensor *h = gml_reshape(ctx, x, 4, (int64_t[]){x->ne[1], x->ne[2], n, dk});
    return gml_permute(ctx, h, (int[]){0, 2, 1, 3});
}

gml_attn_qkv gml_attn_project_p(gml_context *ctx, const gml_attn_plan *p,
                                const gml_attn_weights *w, const gml_attn_inputs *in) {
    gml_tensor *key = in->key ? in->key : in->query;
    gml_tensor *value = in->value ? in->value : key;
    gml_tensor *wq = w->w_q, *wk = w->w_k, *wv = w->w_v;
    gml_tensor *bq = w->b_q, *bk = w->b_k, *bv = w->b_v;
    const int64_t D = p->D, kv = p->G * p->dk;
    if (w->in_proj_weight) { /* nn.MultiheadAttention: q | k | v rows */
        wq = packed_rows(ctx, w->in_proj_weight, 0, D, "in_proj_weight[q]");
        wk = packed_rows(ctx, w->in_proj_weight, D, kv, "in_proj_weight[k]");
        wv = packed_rows(ctx, w->in_proj_weight, D + kv, kv, "in_proj_weight[v]");
    }
    if (w->in_proj_bias) { /* packed biases, also with separate weights (kdim/vdim) */
        bq = packed_rows(ctx, w->in_proj_bias, 0, D, "in_proj_bias[q]");
        bk = packed_rows(ctx, w->in_proj_bias, D, kv, "in_proj_bias[k]");
        bv = packed_rows(ctx, w->in_proj_bias, D + kv, kv, "in_proj_bias[v]");
    }
    gml_tensor *q = gml_set_name(gml_linear(ctx, in->query, wq, bq), "q"); /* [B, Tq, H*d_k] */
    gml_tensor *k = gml_set_name(gml_linear(ctx, key, wk, bk), "k");       /* [B, Tk, G*d_k] */
    gml_tensor *v = gml_set_name(gml_linear(ctx, value, wv, bv), "v");     /* [B, Tk, G*d_k] */
    gml_attn_qkv r = {.q = heads_of(ctx, q, p->H, p->dk), /* [B, H, Tq, d_k] */
                      .k = heads_of(ctx, k, p->G, p->dk), /* [B, G, Tk, d_k] */
                      .v = heads_of(ctx, v, p->G, p->dk)};
    if (!r.q || !r.k || !r.v) return (gml_attn_qkv){0};
    return r;
}

/* ---- stage 2: position encoding ------------------------------------------ */

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

/* ---- stage 3: attention --------------------------------------------------- */

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

/* scores [B, H, Tq, Tk] -> attn [B, H, Tq, Tk] */
gml_tensor *gml_attn_softmax(gml_context *ctx, const gml_attn_plan *p, gml_tensor *scores,
                             const gml_attn_inputs *in, gml_tensor *sinks) {
    const gml_attn_opts o = gml_attn_opts_of(p, in, sinks);
    return gml_set_name(gml_softmax_ext(ctx, scores, p->scale, &o), "attn");
}

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

/* ---- stage 4: merge -------------------------------------------------------- */

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

/* ---- extra key rows: add_bias_kv, add_zero_attn ---------------------------- */

bool gml_attn_no_extras(gml_context *ctx, const gml_attn_plan *p, const gml_attn_weights *w,
                        const char *which) {
    if (w && (w->bias_k || w->bias_v))
        return gml_attn_fail(ctx, "%s: bias_k/bias_v (add_bias_kv) are not supported by %s; "
                             "gml_mha and gml_gqa append them", p->block, which);
    if (p->cfg.score.add_zero_attn)
        return gml_attn_fail(ctx, "%s: add_zero_attn is not supported by %s; gml_mha and gml_gqa "
                             "append the zero row", p->block, which);
    return true;
}

/* Zeros as ops (a builder touches no data): a zero row [1, c] is the mask of
 * length c over c keys; a zero index is a relative-position index with
 * max_rel 0; get_rows of the one row at zero indices gives any shape. */
static gml_tensor *zero_row(gml_context *ctx, int64_t c) { /* [1, c] */
    gml_tensor *m = gml_valid_len_mask(ctx, gml_arange(ctx, 1, c), c); /* [1, 1, 1, c] */
    return gml_reshape(ctx, m, 2, (int64_t[]){1, c});
}

/* row [1, c] repeated: ne[0..nd-2] leading dims (nd in 2..4) -> [ne..., c] */
static gml_tensor *rows_of(gml_context *ctx, gml_tensor *row, int nd, const int64_t *ne) {
    int64_t lead = 1;
    for (int d = 0; d < nd - 1; d++) lead *= ne[d];
    gml_tensor *idx = gml_relpos_index(ctx, lead, 1, 0); /* i32 [lead, 1] of zeros */
    idx = gml_reshape(ctx, idx, nd - 1, ne);
    return gml_get_rows(ctx, row, idx);
}

/* m [..., Tk] -> [..., Tk + n], the new columns 0 (visible), as PyTorch pads
 * attn_mask and key_padding_mask. */
static gml_tensor *pad_mask(gml_context *ctx, gml_tensor *m, int64_t n) {
    if (!m) return NULL;
    if (m->n_dims == 1)
        return gml_concat(ctx, m, gml_reshape(ctx, zero_row(ctx, n), 1, (int64_t[]){n}), -1);
    int64_t ne[4];
    for (int d = 0; d < m->n_dims; d++) ne[d] = m->ne[4 - m->n_dims + d];
    return gml_concat(ctx, m, rows_of(ctx, zero_row(ctx, n), m->n_dims, ne), -1);
}

static gml_tensor *add_mask(gml_context *ctx, gml_tensor *a, gml_tensor *b) {
    return a ? gml_add(ctx, a, b) : b;
}

/* k, v [B, G, Tk, d_k] -> [B, G, Tk + n, d_k] (bias_k/bias_v, then a zero row);
 * *p and *in become the plan and inputs of attending over them: Tk + n keys,
 * one additive mask of the valid lengths, causal and in.mask, padded. */
bool gml_attn_append_extras(gml_context *ctx, gml_attn_plan *p, const gml_attn_weights *w,
                            gml_attn_qkv *qkv, gml_attn_inputs *in) {
    const bool zero = p->cfg.score.add_zero_attn;
    const int64_t n = (w->bias_k ? 1 : 0) + (zero ? 1 : 0);
    if (!n || !qkv->q) return true;
    const gml_attn_scoring *s = &p->cfg.score;
    if (s->window || s->alibi_max_bias)
        return gml_attn_fail(ctx, "%s: %s with %s: the extra key rows have no position; "
                             "not supported", p->block, w->bias_k ? "bias_k/bias_v" : "add_zero_attn",
                             s->window ? "a sliding window" : "ALiBi");
    if (s->causal && in->positions)
        return gml_attn_fail(ctx, "%s: causal with positions and %s is not supported",
                             p->block, w->bias_k ? "bias_k/bias_v" : "add_zero_attn");
    const int64_t off = s->causal == GML_CAUSAL_TOP_LEFT ? 0 : p->Tk - p->Tq;
    if (s->causal && (off + 1 < 0 || off + p->Tq > p->Tk))
        return gml_attn_fail(ctx, "%s: causal (%s) with %s needs Tq <= Tk%s; Tq is %" PRId64
                             ", Tk %" PRId64, p->block,
                             s->causal == GML_CAUSAL_TOP_LEFT ? "top-left" : "bottom-right",
                             w->bias_k ? "bias_k/bias_v" : "add_zero_attn",
                             s->causal == GML_CAUSAL_TOP_LEFT ? "" : " + 1", p->Tq, p->Tk);
    const int64_t kv = p->G * p->dk, B = p->B;
    gml_tensor *k = qkv->k, *v = qkv->v;
    for (int i = 0; i < 2; i++) {
        gml_tensor *t = i ? v : k, *row;
        if (w->bias_k) { /* bias [1, 1, kv] repeated over the batch: [B, G, 1, d_k] */
            row = gml_reshape(ctx, i ? w->bias_v : w->bias_k, 2, (int64_t[]){1, kv});
            row = gml_reshape(ctx, rows_of(ctx, row, 2, (int64_t[]){B}), 4,
                              (int64_t[]){B, 1, p->G, p->dk});
            row = gml_permute(ctx, row, (int[]){0, 2, 1, 3});
            t = gml_set_name(gml_concat(ctx, t, row, 2), i ? "v_bias" : "k_bias");
        }
        if (zero) { /* [B, G, 1, d_k] zeros */
            row = gml_reshape(ctx, rows_of(ctx, zero_row(ctx, p->dk), 3, (int64_t[]){B, p->G}),
                              4, (int64_t[]){B, p->G, 1, p->dk});
            t = gml_set_name(gml_concat(ctx, t, row, 2), i ? "v_zero" : "k_zero");
        }
        if (i) v = t; else k = t;
    }
    gml_tensor *m = NULL; /* [B|1, 1|H, Tq|1, Tk + n] */
    if (in->mask) {
        m = in->mask;
        if (m->ne[3] == p->Tk) m = pad_mask(ctx, m, n); /* else [.., 1]: broadcast to all */
    }
    if (in->valid_lens)
        m = add_mask(ctx, m, pad_mask(ctx, gml_valid_len_mask(ctx, in->valid_lens, p->Tk), n));
    if (s->causal) { /* query i sees keys j < i + off + 1: per-query lengths */
        gml_tensor *lens = gml_reshape(ctx, gml_arange(ctx, p->Tq, off + 1), 2,
                                       (int64_t[]){1, p->Tq});
        m = add_mask(ctx, m, pad_mask(ctx, gml_valid_len_mask(ctx, lens, p->Tk), n));
    }
    if (!k || !v || ((in->mask || in->valid_lens || s->causal) && !m)) return false;
    qkv->k = k;
    qkv->v = v;
    in->mask = m ? gml_set_name(m, "mask_ext") : NULL;
    in->valid_lens = NULL;
    in->positions = NULL;
    p->Tk += n;
    p->cfg.score.causal = GML_CAUSAL_NONE;
    return true;
}

/* ---- blocks and public stages ------------------------------------------------ */

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

gml_attn_qkv gml_attn_project(gml_context *ctx, const gml_attn_config *cfg,
                              const gml_attn_weights *w, gml_attn_inputs in) {
    gml_attn_plan p;
    gml_attn_weights wt_;
    if (!gml_attn_plan_inputs(ctx, "attn_project", cfg, &in, true, &p) ||
        !gml_attn_check_weights(ctx, &p, (w = gml_attn_linear_weights(ctx, w, &wt_)), false) ||
        !gml_attn_no_extras(ctx, &p, w, "the stages"))
        return (gml_attn_qkv){0};
    return gml_attn_project_p(ctx, &p, w, &in);
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

gml_attn_qkv gml_attn_position(gml_context *ctx, const gml_attn_config *cfg, gml_attn_qkv qkv,
                               gml_attn_inputs in) {
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

gml_attn_heads gml_attn_attend(gml_context *ctx, const gml_attn_config *cfg, gml_attn_qkv qkv,
                               gml_attn_inputs in, gml_tensor *sinks) {
    gml_attn_plan p;
    if (!gml_attn_plan_qkv(ctx, "attn_attend", cfg, qkv, &p) ||
        !gml_attn_check_config(ctx, &p, cfg, true) || !gml_attn_check_masks(ctx, &p, &in, sinks) ||
        !gml_attn_no_extras(ctx, &p, NULL, "the stages"))
        return (gml_attn_heads){0};
    return gml_attn_attend_p(ctx, &p, qkv, &in, sinks);
}

gml_tensor *gml_attn_merge(gml_context *ctx, const gml_attn_weights *w, gml_tensor *heads) {
    if (!ctx) return NULL;
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

/* ---- weights by name ----------------------------------------------------- */

enum { CONV_FIXTURE, CONV_TORCH, CONV_HF, CONV_BERT, CONV_GPT2, CONV_ANY, N_CONV };
static const char *const CONV_NAME[N_CONV] = {
    "w_q/w_k/w_v/w_o", "nn.MultiheadAttention (in_proj_*, *_proj_weight, out_proj.*)",
    "q_proj/k_proj/v_proj/o_proj", "BERT (attention.self.*, attention.output.dense)",
    "GPT-2 (attn.c_attn, attn.c_proj)", ""};

#define SLOT(f) offsetof(gml_attn_weights, f)
static const struct {
    const char *name;
    size_t offset;
    int conv;
} NAMES[] = {
    {"w_q.weight", SLOT(w_q), CONV_FIXTURE},
    {"w_q.bias", SLOT(b_q), CONV_FIXTURE},
    {"w_k.weight", SLOT(w_k), CONV_FIXTURE},
    {"w_k.bias", SLOT(b_k), CONV_FIXTURE},
    {"w_v.weight", SLOT(w_v), CONV_FIXTURE},
    {"w_v.bias", SLOT(b_v), CONV_FIXTURE},
    {"w_o.weight", SLOT(w_o), CONV_FIXTURE},
    {"w_o.bias", SLOT(b_o), CONV_FIXTURE},
    {"in_proj_weight", SLOT(in_proj_weight), CONV_TORCH},
    {"in_proj_bias", SLOT(in_proj_bias), CONV_TORCH},
    {"q_proj_weight", SLOT(w_q), CONV_TORCH},
    {"k_proj_weight", SLOT(w_k), CONV_TORCH},
    {"v_proj_weight", SLOT(w_v), CONV_TORCH},
    {"bias_k", SLOT(bias_k), CONV_TORCH},
    {"bias_v", SLOT(bias_v), CONV_TORCH},
    {"out_proj.weight", SLOT(w_o), CONV_TORCH},
    {"out_proj.bias", SLOT(b_o), CONV_TORCH},
    {"q_proj.weight", SLOT(w_q), CONV_HF},
    {"q_proj.bias", SLOT(b_q), CONV_HF},
    {"k_proj.weight", SLOT(w_k), CONV_HF},
    {"k_proj.bias", SLOT(b_k), CONV_HF},
    {"v_proj.weight", SLOT(w_v), CONV_HF},
    {"v_proj.bias", SLOT(b_v), CONV_HF},
    {"o_proj.weight", SLOT(w_o), CONV_HF},
    {"o_proj.bias", SLOT(b_o), CONV_HF},
    {"attention.self.query.weight", SLOT(w_q), CONV_BERT},
    {"attention.self.query.bias", SLOT(b_q), CONV_BERT},
    {"attention.self.key.weight", SLOT(w_k), CONV_BERT},
    {"attention.self.key.bias", SLOT(b_k), CONV_BERT},
    {"attention.self.value.weight", SLOT(w_v), CONV_BERT},
    {"attention.self.value.bias", SLOT(b_v), CONV_BERT},
    {"attention.output.dense.weight", SLOT(w_o), CONV_BERT},
    {"attention.output.dense.bias", SLOT(b_o), CONV_BERT},
    {"c_attn.weight", SLOT(in_proj_weight), CONV_GPT2},
    {"c_attn.bias", SLOT(in_proj_bias), CONV_GPT2},
    {"c_proj.weight", SLOT(w_o), CONV_GPT2},
    {"c_proj.bias", SLOT(b_o), CONV_GPT2},
    {"rel_k.weight", SLOT(rel_k), CONV_ANY},
    {"rel_v.weight", SLOT(rel_v), CONV_ANY},
    {"sinks", SLOT(sinks), CONV_ANY},
};
#undef SLOT
/* Optional prefixes of every name ("self_attn.sinks", "attn.c_proj.weight"). */
static const char *const PREFIXES[] = {"", "self_attn.", "attn."};

/* The NAMES entry name is, under one of PREFIXES; -1 if none. */
static int name_index(const char *name) {
    for (size_t p = 0; p < sizeof PREFIXES / sizeof *PREFIXES; p++) {
        size_t lp = strlen(PREFIXES[p]);
        if (strncmp(name, PREFIXES[p], lp) != 0) continue;
        for (size_t i = 0; i < sizeof NAMES / sizeof *NAMES; i++)
            if (strcmp(name + lp, NAMES[i].name) == 0) return (int)i;
    }
    return -1;
}

bool gml_attn_weight_name_known(const char *name) { return name && name_index(name) >= 0; }

gml_status gml_attn_weights_find(gml_context *wctx, gml_attn_weights *w, char *err,
                                 size_t err_size) {
    *w = (gml_attn_weights){0};
    if (err_size) err[0] = '\0';
    if (!wctx) {
        if (err_size) snprintf(err, err_size, "attention weights: no weights context (NULL)");
        return GML_ERR_INVALID;
    }
    char problem[512] = "";
    const char *bound[sizeof(gml_attn_weights) / sizeof(gml_tensor *) + 1] = {0};
    int conv = -1;
    const char *conv_first = NULL;
    for (gml_tensor *t = gml_get_first_tensor(wctx); t && !problem[0];
         t = gml_get_next_tensor(wctx, t)) {
        int i = name_index(t->name);
        if (i < 0) continue;
        size_t slot_no = NAMES[i].offset / sizeof(gml_tensor *);
        gml_tensor **slot = (gml_tensor **)(void *)((char *)w + NAMES[i].offset);
        if (*slot) {
            snprintf(problem, sizeof problem, "both %s and %s are present", bound[slot_no],
                     t->name);
            break;
        }
        if (NAMES[i].conv != CONV_ANY) {
            if (conv >= 0 && conv != NAMES[i].conv) {
                snprintf(problem, sizeof problem,
                         "two naming conventions mix: %s is %s, %s is %s; give one", conv_first,
                         CONV_NAME[conv], t->name, CONV_NAME[NAMES[i].conv]);
                break;
            }
            conv = NAMES[i].conv;
            if (!conv_first) conv_first = t->name;
        }
        *slot = t;
        bound[slot_no] = t->name;
    }
    bool separate = w->w_q || w->w_k || w->w_v;
    if (problem[0]) {
    } else if (separate && w->in_proj_weight) {
        snprintf(problem, sizeof problem, "both in_proj_weight and q/k/v weights are present");
    } else if (!w->in_proj_weight && !(w->w_q && w->w_k && w->w_v)) {
        static const char *const QKV[N_CONV] = {
            "w_q.weight, w_k.weight and w_v.weight",
            "q_proj_weight, k_proj_weight and v_proj_weight",
            "q_proj.weight, k_proj.weight and v_proj.weight",
            "attention.self.query.weight, .key.weight and .value.weight", "", ""};
        if (separate)
            snprintf(problem, sizeof problem, "%s are not all present",
                     conv >= 0 ? QKV[conv] : "the query, key and value weights");
        else
            snprintf(problem, sizeof problem, "%s",
                     "no input projection (w_q/w_k/w_v.weight, in_proj_weight, "
                            "q_proj_weight.., q_proj/k_proj/v_proj.weight, "
                            "attention.self.query/key/value.weight or attn.c_attn.weight)");
    } else if (!w->w_o) {
        snprintf(problem, sizeof problem, "no output projection (w_o.weight, out_proj.weight, "
                 "o_proj.weight, attention.output.dense.weight or attn.c_proj.weight)");
    }
    if (!problem[0]) {
        w->conv1d = conv == CONV_GPT2;
        return GML_OK;
    }

    *w = (gml_attn_weights){0};
    size_t n =
        err_size ? (size_t)snprintf(err, err_size, "attention weights: %s; present:", problem) : 0;
    int count = 0;
    for (gml_tensor *t = gml_get_first_tensor(wctx); t; t = gml_get_next_tensor(wctx, t), count++) {
        char s[GML_SHAPE_MAX];
        if (n < err_size)
            n += (size_t)snprintf(err + n, err_size - n, "%s %s %s", count ? "," : "", t->name,
                                  GML_SHAPE(t, s));
    }
    if (!count && n < err_size) snprintf(err + n, err_size - n, " (nothing)");
    return GML_ERR_INVALID;
}

/* w with GPT-2's Conv1D weights [in, out] replaced by transposed views in
 * ctx (nn.Linear's [out, in]); w itself otherwise. */
const gml_attn_weights *gml_attn_linear_weights(gml_context *ctx, const gml_attn_weights *w,
                                                gml_attn_weights *tmp) {
    if (!w || !w->conv1d) return w;
    *tmp = *w;
    tmp->conv1d = false;
    if (w->in_proj_weight) tmp->in_proj_weight = gml_transpose(ctx, w->in_proj_weight, 0, 1);
    if (w->w_o) tmp->w_o = gml_transpose(ctx, w->w_o, 0, 1);
    for (int i = 0; i < 3; i++) { /* separate q/k/v under conv1d: transposed too */
        gml_tensor **s = i == 0 ? &tmp->w_q : i == 1 ? &tmp->w_k : &tmp->w_v;
        if (*s) *s = gml_transpose(ctx, *s, 0, 1);
    }
    return tmp;
}

/* ---- sizes -------------------------------------------------------------- */

int64_t gml_gqa_param_count(int64_t d_model, int n_heads, int n_kv_heads, bool bias) {
    if (d_model < 1 || n_heads < 1 || n_kv_heads < 1 || d_model % n_heads || n_heads % n_kv_heads)
        return -1;
    const int64_t kv = n_kv_heads * (d_model / n_heads);
    int64_t n = 2 * d_model * d_model + 2 * kv * d_model; /* W_q, W_o; W_k, W_v */
    if (bias) n += 2 * d_model + 2 * kv;
    return n;
}

int64_t gml_mha_param_count(int64_t d_model, int n_heads, bool bias) {
    return gml_gqa_param_count(d_model, n_heads, n_heads, bias);
}
