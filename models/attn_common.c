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

bool gml_attn_check_param(gml_context *ctx, const gml_attn_plan *p, const gml_tensor *t,
                          const char *role, int64_t rows, int64_t cols, const char *what) {
    bool shape_ok = cols < 0 ? t->n_dims == 1 && t->ne[3] == rows
                             : t->n_dims == 2 && t->ne[2] == rows && t->ne[3] == cols;
    if (shape_ok && t->type == GML_F32) return true;
    char label[GML_MAX_NAME + 32], st[GML_SHAPE_MAX], want[GML_SHAPE_MAX];
    if (cols < 0)
        snprintf(want, sizeof want, "[%" PRId64 "]", rows);
    else
        snprintf(want, sizeof want, "[%" PRId64 ",%" PRId64 "]", rows, cols);
    role_label(t, role, label, sizeof label);
    if (t->type != GML_F32)
        return gml_attn_fail(ctx, "%s: %s is %s %s, expected f32 %s (%s)", p->block, label,
                             gml_type_name(t->type), GML_SHAPE(t, st), want, what);
    return gml_attn_fail(ctx, "%s: %s is %s, expected %s (%s)", p->block, label, GML_SHAPE(t, st),
                         want, what);
}

/* x must be f32 [B, T, D] with the given B (b < 0: any) and D. */
static bool check_input(gml_context *ctx, const gml_attn_plan *p, const gml_tensor *x,
                        const char *role, int64_t b, int64_t d) {
    char sx[GML_SHAPE_MAX];
    if (x->type != GML_F32 || x->n_dims != 3) {
        return gml_attn_fail(ctx, "%s: %s '%s' is %s %s, expected f32 [B, T, d_model]", p->block,
                             role, x->name, gml_type_name(x->type), GML_SHAPE(x, sx));
    }
    if ((b >= 0 && x->ne[1] != b) || x->ne[3] != d) {
        return gml_attn_fail(ctx,
                             "%s: %s '%s' is %s, expected [%" PRId64 ", T, %" PRId64 "] "
                             "(batch of the query, d_model)",
                             p->block, role, x->name, GML_SHAPE(x, sx), p->B, d);
    }
    return true;
}

/* Heads, kv heads and d_model against each other and the query. */
static bool check_config(gml_context *ctx, gml_attn_plan *p, const gml_attn_config *cfg,
                         const gml_tensor *query) {
    char sq[GML_SHAPE_MAX];
    if (query->type != GML_F32 || query->n_dims != 3)
        return gml_attn_fail(ctx, "%s: query '%s' is %s %s, expected f32 [B, Tq, d_model]",
                             p->block, query->name, gml_type_name(query->type),
                             GML_SHAPE(query, sq));
    p->B = query->ne[1];
    p->Tq = query->ne[2];
    p->D = query->ne[3];
    if (cfg->d_model != 0 && cfg->d_model != p->D)
        return gml_attn_fail(ctx, "%s: query '%s' is %s, but d_model is %" PRId64, p->block,
                             query->name, GML_SHAPE(query, sq), cfg->d_model);
    if (cfg->n_heads < 1)
        return gml_attn_fail(ctx, "%s: heads is %d, must be >= 1", p->block, cfg->n_heads);
    if (p->D % cfg->n_heads)
        return gml_attn_fail(ctx, "%s: d_model %" PRId64 " is not divisible by heads %d", p->block,
                             p->D, cfg->n_heads);
    int g = cfg->n_kv_heads ? cfg->n_kv_heads : cfg->n_heads;
    if (g < 1 || g > cfg->n_heads || cfg->n_heads % g)
        return gml_attn_fail(ctx, "%s: kv_heads %d must divide heads %d (1 <= kv_heads <= heads)",
                             p->block, g, cfg->n_heads);
    if (cfg->gqa_form != GML_GQA_BROADCAST && cfg->gqa_form != GML_GQA_REPEAT)
        return gml_attn_fail(ctx, "%s: unknown gqa_form %d", p->block, (int)cfg->gqa_form);
    if ((unsigned)cfg->impl > GML_ATTN_UNFUSED)
        return gml_attn_fail(ctx, "%s: unknown attention impl %d (auto, fused or unfused)",
                             p->block, (int)cfg->impl);
    if (cfg->impl == GML_ATTN_FUSED && cfg->want_weights)
        return gml_attn_fail(ctx, "%s: the fused graph has no attention weights; ask for the "
                             "unfused graph (or auto) to get them", p->block);
    p->fused = cfg->impl == GML_ATTN_FUSED || (cfg->impl == GML_ATTN_AUTO && !cfg->want_weights);
    p->H = cfg->n_heads;
    p->G = g;
    p->dk = p->D / p->H;
    p->causal = cfg->causal;
    p->form = cfg->gqa_form;
    return true;
}

/* The five projection tensors: separate or packed, shapes as the config says. */
static bool check_weights(gml_context *ctx, const gml_attn_plan *p, const gml_attn_weights *w) {
    const int64_t D = p->D, kv = p->G * p->dk;
    const char *kv_rows = p->G == p->H ? "[d_model, d_model]" : "[kv_heads*d_k, d_model]";
    const char *kv_len = p->G == p->H ? "[d_model]" : "[kv_heads*d_k]";
    bool packed = w->in_proj_weight != NULL;
    if (packed && (w->w_q || w->w_k || w->w_v || w->b_q || w->b_k || w->b_v))
        return gml_attn_fail(ctx,
                             "%s: weights given both packed (in_proj_weight) and separate "
                             "(w_q/w_k/w_v); give one",
                             p->block);
    if (!packed && w->in_proj_bias)
        return gml_attn_fail(ctx, "%s: in_proj_bias given without in_proj_weight", p->block);
    if (packed) {
        char what[96];
        snprintf(what, sizeof what, "rows of w_q, w_k, w_v: [d_model + 2*%s, d_model]",
                 p->G == p->H ? "d_model" : "kv_heads*d_k");
        if (!gml_attn_check_param(ctx, p, w->in_proj_weight, "in_proj_weight", D + 2 * kv, D, what))
            return false;
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
        if (!gml_attn_check_param(ctx, p, w->w_q, "w_q.weight", D, D, "[d_model, d_model]") ||
            !gml_attn_check_param(ctx, p, w->w_k, "w_k.weight", kv, D, kv_rows) ||
            !gml_attn_check_param(ctx, p, w->w_v, "w_v.weight", kv, D, kv_rows) ||
            (w->b_q && !gml_attn_check_param(ctx, p, w->b_q, "w_q.bias", D, -1, "[d_model]")) ||
            (w->b_k && !gml_attn_check_param(ctx, p, w->b_k, "w_k.bias", kv, -1, kv_len)) ||
            (w->b_v && !gml_attn_check_param(ctx, p, w->b_v, "w_v.bias", kv, -1, kv_len)))
            return false;
    }
    if (!w->w_o)
        return gml_attn_fail(ctx, "%s: w_o.weight (out_proj.weight) is missing (NULL)", p->block);
    return gml_attn_check_param(ctx, p, w->w_o, "w_o.weight", D, D, "[d_model, d_model]") &&
           (!w->b_o || gml_attn_check_param(ctx, p, w->b_o, "w_o.bias", D, -1, "[d_model]"));
}

static bool check_lens(gml_context *ctx, const gml_attn_plan *p, const gml_tensor *lens) {
    char sl[GML_SHAPE_MAX];
    bool ok = lens->type == GML_I32 &&
              ((lens->n_dims == 1 && lens->ne[3] == p->B) ||
               (lens->n_dims == 2 && lens->ne[2] == p->B && lens->ne[3] == p->Tq));
    if (ok) return true;
    return gml_attn_fail(ctx,
                         "%s: valid_lens '%s' is %s %s, expected i32 [%" PRId64 "] or [%" PRId64
                         ",%" PRId64 "] ([B] or [B, Tq])",
                         p->block, lens->name, gml_type_name(lens->type), GML_SHAPE(lens, sl), p->B,
                         p->B, p->Tq);
}

/* ---- projections -------------------------------------------------------- */

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

bool gml_attn_prepare(gml_context *ctx, const char *block, const gml_attn_config *cfg,
                      const gml_attn_weights *w, const gml_attn_inputs *in, bool can_fuse,
                      gml_attn_plan *p) {
    if (!ctx) return false;
    *p = (gml_attn_plan){.block = block, .w = w};
    if (!in->query || (in->key == NULL && in->value != NULL)) {
        /* A NULL input is an earlier builder's failure: keep its message. */
        if (!gml_last_error(ctx)[0])
            gml_set_error(ctx, "%s: %s is NULL", block,
                          in->query ? "key (with a value given)" : "query");
        return false;
    }
    if (!w) return gml_attn_fail(ctx, "%s: no weights given (NULL)", block);
    if (!check_config(ctx, p, cfg, in->query)) return false;
    if (!can_fuse && cfg->impl == GML_ATTN_FUSED)
        return gml_attn_fail(ctx, "%s: has no fused graph; use impl unfused (or auto)", block);
    p->fused = p->fused && can_fuse;

    gml_tensor *key = in->key ? in->key : in->query;
    gml_tensor *value = in->value ? in->value : key;
    if (!check_input(ctx, p, key, "key", p->B, p->D) ||
        !check_input(ctx, p, value, "value", p->B, p->D))
        return false;
    if (value->ne[2] != key->ne[2]) {
        char sk[GML_SHAPE_MAX], sv[GML_SHAPE_MAX];
        return gml_attn_fail(ctx, "%s: key '%s' %s and value '%s' %s differ in length Tk", block,
                             key->name, GML_SHAPE(key, sk), value->name, GML_SHAPE(value, sv));
    }
    p->Tk = key->ne[2];
    if (!check_weights(ctx, p, w)) return false;
    if (in->valid_lens && !check_lens(ctx, p, in->valid_lens)) return false;

    gml_tensor *wq = w->w_q, *wk = w->w_k, *wv = w->w_v;
    gml_tensor *bq = w->b_q, *bk = w->b_k, *bv = w->b_v;
    if (w->in_proj_weight) { /* nn.MultiheadAttention: q | k | v rows */
        const int64_t D = p->D, kv = p->G * p->dk;
        wq = packed_rows(ctx, w->in_proj_weight, 0, D, "in_proj_weight[q]");
        wk = packed_rows(ctx, w->in_proj_weight, D, kv, "in_proj_weight[k]");
        wv = packed_rows(ctx, w->in_proj_weight, D + kv, kv, "in_proj_weight[v]");
        bq = packed_rows(ctx, w->in_proj_bias, 0, D, "in_proj_bias[q]");
        bk = packed_rows(ctx, w->in_proj_bias, D, kv, "in_proj_bias[k]");
        bv = packed_rows(ctx, w->in_proj_bias, D + kv, kv, "in_proj_bias[v]");
    }
    p->q = gml_set_name(gml_linear(ctx, in->query, wq, bq), "q"); /* [B, Tq, H*d_k] */
    p->k = gml_set_name(gml_linear(ctx, key, wk, bk), "k");       /* [B, Tk, G*d_k] */
    p->v = gml_set_name(gml_linear(ctx, value, wv, bv), "v");     /* [B, Tk, G*d_k] */
    p->lens = in->valid_lens;
    if (in->valid_lens && !p->fused) /* [B, 1, 1|Tq, Tk] */
        p->mask = gml_set_name(gml_valid_len_mask(ctx, in->valid_lens, p->Tk), "mask");
    return p->q && p->k && p->v && (!in->valid_lens || p->fused || p->mask);
}

/* ---- steps -------------------------------------------------------------- */

/* x [B, T, n*d_k] -> [B, T, n, d_k] */
gml_tensor *gml_attn_split(gml_context *ctx, gml_tensor *x, int64_t n, int64_t dk) {
    if (!x) return NULL;
    return gml_reshape(ctx, x, 4, (int64_t[]){x->ne[1], x->ne[2], n, dk});
}

/* scores [B, H, Tq, Tk] -> attn [B, H, Tq, Tk] */
gml_tensor *gml_attn_softmax(gml_context *ctx, const gml_attn_plan *p, gml_tensor *scores) {
    const float scale = (float)(1.0 / sqrt((double)p->dk));
    return gml_set_name(gml_softmax(ctx, scores, p->mask, scale, p->causal), "attn");
}

/* heads [B, Tq, H, d_k] -> out [B, Tq, D] */
gml_attn_result gml_attn_output(gml_context *ctx, const gml_attn_plan *p, gml_tensor *heads,
                                gml_tensor *attn) {
    if (heads && !gml_is_contiguous(heads))
        heads = gml_set_name(gml_cont(ctx, heads), "ctx_merged");
    gml_tensor *merged = gml_reshape(ctx, heads, 3, (int64_t[]){p->B, p->Tq, p->D});
    gml_tensor *out = gml_set_name(gml_linear(ctx, merged, p->w->w_o, p->w->b_o), "out");
    if (!out || (!attn && !p->fused)) return (gml_attn_result){0};
    return (gml_attn_result){.out = out, .weights = attn};
}

/* q [B, Tq, H*d_k], k, v [B, Tk, G*d_k] -> flash [B, H, Tq, d_k] (stored
 * [B, Tq, H, d_k], so the heads merge without a copy) -> out [B, Tq, D] */
gml_attn_result gml_attn_fused(gml_context *ctx, const gml_attn_plan *p) {
    const int perm[] = {0, 2, 1, 3};
    gml_tensor *q = gml_permute(ctx, gml_attn_split(ctx, p->q, p->H, p->dk), perm);
    gml_tensor *k = gml_permute(ctx, gml_attn_split(ctx, p->k, p->G, p->dk), perm);
    gml_tensor *v = gml_permute(ctx, gml_attn_split(ctx, p->v, p->G, p->dk), perm);
    const float scale = (float)(1.0 / sqrt((double)p->dk));
    gml_tensor *o = gml_set_name(gml_flash_attn(ctx, q, k, v, NULL, p->lens, scale, p->causal),
                                 "flash");
    return gml_attn_output(ctx, p, gml_permute(ctx, o, perm), NULL);
}

/* ---- weights by name ----------------------------------------------------- */

gml_status gml_attn_weights_find(gml_context *wctx, gml_attn_weights *w, char *err,
                                 size_t err_size) {
    *w = (gml_attn_weights){0};
    if (err_size) err[0] = '\0';
    if (!wctx) {
        if (err_size) snprintf(err, err_size, "attention weights: no weights context (NULL)");
        return GML_ERR_INVALID;
    }
    static const struct {
        const char *name;
        size_t offset;
    } NAMES[] = {
        {"w_q.weight", offsetof(gml_attn_weights, w_q)},
        {"w_q.bias", offsetof(gml_attn_weights, b_q)},
        {"w_k.weight", offsetof(gml_attn_weights, w_k)},
        {"w_k.bias", offsetof(gml_attn_weights, b_k)},
        {"w_v.weight", offsetof(gml_attn_weights, w_v)},
        {"w_v.bias", offsetof(gml_attn_weights, b_v)},
        {"w_o.weight", offsetof(gml_attn_weights, w_o)},
        {"w_o.bias", offsetof(gml_attn_weights, b_o)},
        {"out_proj.weight", offsetof(gml_attn_weights, w_o)},
        {"out_proj.bias", offsetof(gml_attn_weights, b_o)},
        {"in_proj_weight", offsetof(gml_attn_weights, in_proj_weight)},
        {"in_proj_bias", offsetof(gml_attn_weights, in_proj_bias)},
        {"rel_k.weight", offsetof(gml_attn_weights, rel_k)},
        {"rel_v.weight", offsetof(gml_attn_weights, rel_v)},
    };
    const char *problem = NULL;
    for (size_t i = 0; i < sizeof NAMES / sizeof *NAMES; i++) {
        gml_tensor **slot = (gml_tensor **)(void *)((char *)w + NAMES[i].offset);
        gml_tensor *t = gml_get_tensor(wctx, NAMES[i].name);
        if (!t) continue;
        if (*slot) problem = "both w_o.* and out_proj.* are present";
        *slot = t;
    }
    bool separate = w->w_q || w->w_k || w->w_v;
    if (!problem && separate && w->in_proj_weight)
        problem = "both in_proj_weight and w_q/w_k/w_v are present";
    else if (!problem && !w->in_proj_weight && !(w->w_q && w->w_k && w->w_v))
        problem = separate ? "w_q.weight, w_k.weight and w_v.weight are not all present"
                           : "no input projection (w_q.weight, w_k.weight, w_v.weight or "
                             "in_proj_weight)";
    else if (!problem && !w->w_o)
        problem = "no output projection (w_o.weight or out_proj.weight)";
    if (!problem) return GML_OK;

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
