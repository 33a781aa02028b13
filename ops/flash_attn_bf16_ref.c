/* The reference kernel of flash_attn with compute bf16 (ops/flash_attn_bf16.c
 * gives the arithmetic): one query row at a time in plain float, the chain
 * order, every key's weight against the row's final max (two passes over
 * the keys, no rescaling). */
#include "flash_attn.h"

#include <math.h>
#include <string.h>

static inline float round_bf16(float x) { return gml_bf16_to_fp32(gml_fp32_to_bf16(x)); }

/* Element d of a row of K or V (f32, f16 or bf16) rounded to bf16. */
static float kv_bf16(const gml_tensor *t, const char *row, int64_t d) {
    const char *e = row + d * (int64_t)t->nb[3];
    uint16_t h;
    if (t->type == GML_F32) {
        float f;
        memcpy(&f, e, sizeof f);
        return round_bf16(f);
    }
    memcpy(&h, e, sizeof h);
    return round_bf16(t->type == GML_F16 ? gml_fp16_to_fp32(h) : gml_bf16_to_fp32(h));
}

/* One row's view of the op. */
typedef struct ref_row {
    const gml_tensor *q, *k;
    const char *qi, *mrow;
    int64_t mstride, b, g, dk;
    float scale, cap, slope, qpos;
    bool alibi;
} ref_row;

/* Key j's score into *s; false when its mask hides it (k unread). */
static bool score(const ref_row *w, int64_t j, float *s) {
    const float mv = w->mrow ? *(const float *)(const void *)(w->mrow + j * w->mstride) : 0.0f;
    if (mv == -INFINITY) return false;
    const char *kj = gml_ptr(w->k, w->b, w->g, j, 0);
    float dot = 0.0f;
    for (int64_t d = 0; d < w->dk; d++) {
        const float qd = *(const float *)(const void *)(w->qi + d * (int64_t)w->q->nb[3]);
        dot = fmaf(round_bf16(qd * w->scale), kv_bf16(w->k, kj, d), dot);
    }
    if (w->cap > 0) dot = isfinite(dot) ? w->cap * tanhf(dot / w->cap) : NAN;
    float sc = w->mrow ? gml_masked_score(dot, mv) : gml_visible_score(dot);
    if (w->alibi) sc += w->slope * ((float)j - w->qpos);
    *s = sc;
    return true;
}

/* Per query row (rows of [B, H, Tq] split across threads):
 *   q~ = bf16(q * scale) (the product in float), k~, v~ rounded;
 *   s_j = the fma chain over d of q~ k~_j from +0, then softcap, the mask
 *         and ALiBi as gml_flash_score forms them, keys outside [lo, hi)
 *         (causal, window, lengths) and keys whose mask is -inf unread;
 *   m = max_j s_j; p_j = bf16(expf(s_j - m)); l = sum_j p_j in key order;
 *   o_c = the fma chain over j of p_j v~_jc from +0; the sink joins m and
 *   l at the end (as gml_flash_finish folds it); out = o / l.
 * A key the row sees whose score is not finite, or a v row it sees that
 * makes o not finite, makes the row NaN; a row that sees no key is zeros
 * (ggmlite.h, MASKS). */
void gml_bf16_flash_attn__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *mask = dst->src[3];
    const gml_attn_params par = params_of(dst);
    const int64_t H = dst->ne[1], Tq = q->ne[2], Tk = k->ne[2], dv = v->ne[3];
    const int64_t rep = H / k->ne[1]; /* query heads per kv head */
    float *acc = (float *)(void *)((double *)p->wdata + (size_t)p->ith * ref_work_doubles(dst));
    if (!lens_ok(p, dst)) return;
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t b, h, i, lo, hi;
        gml_row_index(dst, r, &b, &h, &i);
        key_range(dst, &par, b, i, &lo, &hi);
        const ref_row w = {
            .q = q, .k = k, .qi = gml_ptr(q, b, h, i, 0),
            .mrow = mask ? gml_ptr(mask, b % mask->ne[0], h % mask->ne[1], i % mask->ne[2], 0) : NULL,
            .mstride = mask && mask->ne[3] > 1 ? (int64_t)mask->nb[3] : 0, .b = b, .g = h / rep,
            .dk = q->ne[3], .scale = par.scale, .cap = par.softcap,
            .slope = par.alibi > 0 ? gml_alibi_slope(par.alibi, h, H) : 0.0f,
            .qpos = (float)gml_attn_qpos(&par, dst->src[SRC_POS], b, i, Tq, Tk),
            .alibi = par.alibi > 0};
        bool nan = false;
        float m = -INFINITY, sc;
        for (int64_t j = lo; j < hi && !nan; j++) {
            if (!score(&w, j, &sc)) continue;
            if (!isfinite(sc)) nan = true;
            else m = sc > m ? sc : m;
        }
        float l = 0.0f;
        for (int64_t c = 0; c < dv; c++) acc[c] = 0.0f;
        for (int64_t j = lo; j < hi && !nan; j++) {
            if (!score(&w, j, &sc)) continue; /* hidden: v unread */
            const float pj = round_bf16(expf(sc - m));
            const char *vj = gml_ptr(v, b, h / rep, j, 0);
            l += pj;
            for (int64_t c = 0; c < dv; c++) acc[c] = fmaf(pj, kv_bf16(v, vj, c), acc[c]);
        }
        for (int64_t c = 0; c < dv; c++) nan |= !isfinite(acc[c]);
        if (l > 0 && dst->src[SRC_SINKS]) { /* the sink joins the max and the sum */
            const float sk = sink_of(dst, h);
            if (isnan(sk) || sk == INFINITY) {
                nan = true;
            } else if (sk > m) {
                const float f = expf(m - sk);
                l = l * f + 1.0f;
                for (int64_t c = 0; c < dv; c++) acc[c] *= f;
            } else {
                l += expf(sk - m);
            }
        }
        char *out = gml_ptr(dst, b, h, i, 0);
        for (int64_t c = 0; c < dv; c++)
            *(float *)(void *)(out + c * (int64_t)dst->nb[3]) = nan     ? NAN
                                                                 : l > 0 ? acc[c] / l
                                                                         : 0.0f;
    }
}
