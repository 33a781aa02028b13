/* The reference kernels of flash_attn and flash_attn_partial: one query row
 * at a time, every product, exp and sum in double. */
#include "flash_attn.h"

#include <math.h>
#include <string.h>

/* Element d of row `row` of K or V (f32, f16 or bf16), as a double. */
static double kv_at(const gml_tensor *t, const char *row, int64_t d) {
    const char *e = row + d * (int64_t)t->nb[3];
    if (t->type == GML_F32) return *(const float *)(const void *)e;
    uint16_t h;
    memcpy(&h, e, sizeof h);
    return t->type == GML_F16 ? gml_fp16_to_fp32(h) : gml_bf16_to_fp32(h);
}


/* One query row at a time (rows of [B, H, Tq] split across threads), keys in
 * blocks of REF_KEY_BLOCK; every product, exp and sum in double. The
 * contract (ggmlite.h, MASKS) is judged on floats, as the fast kernels see
 * it: a key whose mask is -inf is skipped before its k row is read; a key
 * the row sees whose score, rounded to float, is not finite (or whose
 * float score (capped) plus its mask is not: an overflow, a NaN or +inf
 * mask), or whose v row holds a NaN or inf, makes the row NaN. The
 * arithmetic stays in double (the float roundings only judge). Options
 * literally: s = q.k scale; c tanh(s / c); + mask; + slope (j - i'); keys
 * outside [lo, hi) (causal, window, lengths) never read; the sink joins the
 * max and the sum at the end. */
void gml_f32_flash_attn__ref(const gml_compute_params *p, gml_tensor *dst) {
    if (gml_flash_compute(dst) == GML_COMPUTE_BF16) { /* ops/flash_attn_bf16_ref.c */
        gml_bf16_flash_attn__ref(p, dst);
        return;
    }
    const gml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *mask = dst->src[3];
    const gml_attn_params par = params_of(dst);
    const double scale = par.scale, cap = par.softcap;
    const int64_t H = dst->ne[1], Tq = q->ne[2], Tk = k->ne[2], dv = v->ne[3], dk = q->ne[3];
    const bool keep_lse = dst->op == GML_OP_FLASH_ATTN_LSE;
    const int64_t rep = H / k->ne[1]; /* query heads per kv head */
    double *s = (double *)p->wdata + (size_t)p->ith * ref_work_doubles(dst);
    double *acc = s + REF_KEY_BLOCK;
    if (!lens_ok(p, dst)) return;
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t b, h, i, lo, hi;
        gml_row_index(dst, r, &b, &h, &i);
        key_range(dst, &par, b, i, &lo, &hi);
        const double slope = par.alibi > 0 ? gml_alibi_slope(par.alibi, h, H) : 0.0;
        const double ip = (double)gml_attn_qpos(&par, dst->src[SRC_POS], b, i, Tq, Tk);
        const char *qi = gml_ptr(q, b, h, i, 0);
        const char *mrow =
            mask ? gml_ptr(mask, b % mask->ne[0], h % mask->ne[1], i % mask->ne[2], 0) : NULL;
        const int64_t mstride = mask && mask->ne[3] > 1 ? (int64_t)mask->nb[3] : 0;
        double m = -INFINITY, l = 0;
        bool nan = false;
        for (int64_t c = 0; c < dv; c++) acc[c] = 0;
        for (int64_t j0 = lo; j0 < hi; j0 += REF_KEY_BLOCK) {
            const int64_t nj = GML_MIN(REF_KEY_BLOCK, hi - j0);
            double bmax = -INFINITY;
            for (int64_t jj = 0; jj < nj; jj++) {
                const float mv = mrow ? *(const float *)(mrow + (j0 + jj) * mstride) : 0.0f;
                s[jj] = -INFINITY;
                if (mv == -INFINITY) continue; /* hidden: k and v unread */
                const char *kj = gml_ptr(k, b, h / rep, j0 + jj, 0);
                double dot = 0;
                for (int64_t d = 0; d < dk; d++)
                    dot += (double)*(const float *)(qi + d * (int64_t)q->nb[3]) * kv_at(k, kj, d);
                double sc = dot * scale;
                if (!isfinite((float)sc)) { /* the score as a float overflowed, or NaN */
                    nan = true;
                    continue;
                }
                if (cap > 0) sc = cap * tanh(sc / cap);
                const float judged = (float)sc + mv; /* the score as floats */
                if (!isfinite(judged)) {
                    nan = true;
                    continue;
                }
                s[jj] = sc;
                if (mrow) s[jj] += mv;
                s[jj] += slope * ((double)(j0 + jj) - ip);
                bmax = s[jj] > bmax ? s[jj] : bmax;
            }
            if (bmax == -INFINITY) continue; /* the mask drops the whole block */
            if (bmax > m) {                  /* rescale what the old max weighted */
                const double alpha = exp(m - bmax); /* 0 while m is -inf */
                l *= alpha;
                for (int64_t c = 0; c < dv; c++) acc[c] *= alpha;
                m = bmax;
            }
            for (int64_t jj = 0; jj < nj; jj++) {
                if (s[jj] == -INFINITY) continue;
                const double e = exp(s[jj] - m);
                const char *vj = gml_ptr(v, b, h / rep, j0 + jj, 0);
                l += e;
                for (int64_t c = 0; c < dv; c++)
                    acc[c] += e * kv_at(v, vj, c);
            }
        }
        /* a NaN or inf in a v row the row sees: NaN (0 * inf too, as the
         * weights may underflow); the sums cannot overflow in double */
        for (int64_t c = 0; c < dv; c++) nan |= !isfinite(acc[c]);
        double lse = -INFINITY, psink = 0; /* flash_attn_lse's columns dv, dv + 1 */
        if (l > 0) lse = m + log(l);
        if (l > 0 && dst->src[SRC_SINKS]) { /* the sink joins the max and the sum */
            const double sk = sink_of(dst, h);
            const double top = sk > m ? sk : m;
            lse = top + log(l * exp(m - top) + exp(sk - top));
            psink = exp(sk - lse);
            if (isnan(sk) || sk == INFINITY) nan = true; /* MASKS: NaN row */
            else if (sk > m) {
                const double f = exp(m - sk);
                l = l * f + 1;
                for (int64_t c = 0; c < dv; c++) acc[c] *= f;
            } else {
                l += exp(sk - m);
            }
        }
        /* no visible key: zeros */
        char *out = gml_ptr(dst, b, h, i, 0);
        for (int64_t c = 0; c < dv; c++)
            *(float *)(out + c * (int64_t)dst->nb[3]) = nan     ? NAN
                                                        : l > 0 ? (float)(acc[c] / l)
                                                                : 0.0f;
        if (keep_lse) {
            *(float *)(void *)(out + dv * (int64_t)dst->nb[3]) = nan ? NAN : (float)lse;
            *(float *)(void *)(out + (dv + 1) * (int64_t)dst->nb[3]) = nan ? NAN : (float)psink;
        }
    }
}

/* The reference: one row at a time in double, keys as
 * gml_f32_flash_attn__ref judges them; m and l in float at the end. */
void gml_f32_flash_partial__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *mask = dst->src[3];
    const gml_attn_params par = params_of(dst);
    const int64_t key0 = key0_of(dst);
    const double scale = par.scale, cap = par.softcap;
    const int64_t H = dst->ne[1], dv = v->ne[3], dk = q->ne[3], rep = H / k->ne[1];
    double *acc = (double *)p->wdata + (size_t)p->ith * ref_work_doubles(dst);
    if (!gml_attn_lens_ok(p, "flash_attn_partial", dst->src[SRC_LENS], INT32_MAX)) return;
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t b, h, i, lo, hi;
        float qp;
        gml_row_index(dst, r, &b, &h, &i);
        gml_flash_dec_key_range(dst, &par, key0, b, i, &lo, &hi, &qp);
        const double slope = par.alibi > 0 ? gml_alibi_slope(par.alibi, h, H) : 0.0;
        const char *qi = gml_ptr(q, b, h, i, 0);
        const char *mrow =
            mask ? gml_ptr(mask, b % mask->ne[0], h % mask->ne[1], i % mask->ne[2], 0) : NULL;
        const int64_t mstride = mask && mask->ne[3] > 1 ? (int64_t)mask->nb[3] : 0;
        double m = -INFINITY, l = 0;
        bool nan = false;
        for (int64_t c = 0; c < dv; c++) acc[c] = 0;
        for (int64_t j = lo; j < hi && !nan; j++) {
            const float mv = mrow ? *(const float *)(const void *)(mrow + j * mstride) : 0.0f;
            if (mv == -INFINITY) continue;
            const char *kj = gml_ptr(k, b, h / rep, j, 0);
            double dot = 0;
            for (int64_t d = 0; d < dk; d++)
                dot += (double)*(const float *)(const void *)(qi + d * (int64_t)q->nb[3]) * kv_at(k, kj, d);
            double sc = dot * scale;
            if (!isfinite((float)sc)) {
                nan = true;
                break;
            }
            if (cap > 0) sc = cap * tanh(sc / cap);
            if (!isfinite((float)sc + mv)) {
                nan = true;
                break;
            }
            sc += mv + slope * ((double)j - (double)qp);
            if (sc > m) { /* rescale: exact online softmax in double */
                const double f = exp(m - sc);
                l *= f;
                for (int64_t c = 0; c < dv; c++) acc[c] *= f;
                m = sc;
            }
            const double e = exp(sc - m);
            const char *vj = gml_ptr(v, b, h / rep, j, 0);
            l += e;
            for (int64_t c = 0; c < dv; c++) acc[c] += e * kv_at(v, vj, c);
        }
        char *out = gml_ptr(dst, b, h, i, 0);
        const int64_t so = (int64_t)dst->nb[3];
        for (int64_t c = 0; c < dv; c++)
            *(float *)(void *)(out + c * so) = nan ? NAN : l > 0 ? (float)acc[c] : 0.0f;
        *(float *)(void *)(out + dv * so) = nan || l > 0 ? (float)m : -INFINITY;
        *(float *)(void *)(out + (dv + 1) * so) = nan ? NAN : (float)l;
    }
}
