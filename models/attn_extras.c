/* The extra key rows of nn.MultiheadAttention, between the position
 * encoding and attention: add_bias_kv's bias_k/bias_v and add_zero_attn's
 * zero row appended to k and v, the masks padded to match. */
#include "attn_internal.h"

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
                             "not supported", p->block,
                             w->bias_k ? "bias_k/bias_v" : "add_zero_attn",
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
