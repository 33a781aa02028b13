/* What every flash attention micro-kernel calls (ops/ukernels.h): the end
 * of a block (gml_flash_finish, gml_flash_lane_exact), the conversion of
 * f16 / bf16 K and V rows (gml_flash_kv_load), and the merge and end of
 * partials. Below the kernels and the ops' files alike: it calls neither. */
#include "flash_attn.h"

#include <math.h>
#include <string.h>

/* The sink s of a lane with running max m and sum *sum (> 0) joins them:
 * the factor its accumulated values take. A NaN or +inf sink makes the sum
 * NaN (MASKS). */
static float fold_sink(float s, float m, float *sum) {
    if (s == INFINITY) {
        *sum = NAN;
        return 1.0f;
    }
    if (s > m) {
        const float f = expf(m - s);
        *sum = *sum * f + 1.0f;
        return f;
    }
    *sum += expf(s - m);
    return 1.0f;
}

void gml_flash_store_lse(const gml_flash_args *a, size_t l, float sum, float m, float *out) {
    if (sum == 0) { /* no key seen: the row is zeros, its weights all 0 */
        out[a->dv] = -INFINITY;
        out[a->dv + 1] = 0.0f;
        return;
    }
    const float s = a->sink ? a->sink[l] : -INFINITY;
    const float top = s > m ? s : m;
    const float total = sum * expf(m - top) + (a->sink ? expf(s - top) : 0.0f);
    const float lse = top + logf(total);
    out[a->dv] = lse;
    out[a->dv + 1] = a->sink ? expf(s - lse) : 0.0f;
}

float gml_flash_lane_factor(const gml_flash_args *a, size_t l, float sum, float m, float *total) {
    float f = 1.0f;
    *total = sum;
    if (a->sink) f = fold_sink(a->sink[l], m, total);
    return f / *total;
}

bool gml_flash_finish(const gml_flash_args *a, size_t tile, const float *sum, const float *m,
                      float *ot, bool exact) {
    for (size_t l = 0; l < a->nq; l++) {
        float *out = a->out[l];
        if (a->lse) gml_flash_store_lse(a, l, sum[l], m[l], out);
        if (sum[l] == 0) { /* no key seen: zeros, also where ot holds 0 * inf */
            for (size_t c = 0; c < a->dv; c++) out[c] = 0.0f;
            continue;
        }
        float total;
        const float inv = gml_flash_lane_factor(a, l, sum[l], m[l], &total); /* a NaN sum: NaN */
        bool finite = true;
        for (size_t c = 0; c < a->dv; c++) {
            out[c] = ot[c * tile + l] * inv;
            finite &= isfinite(out[c]);
        }
        if (finite || isnan(total)) continue;
        if (!exact) return false;
        gml_flash_lane_exact(a, tile, l, ot + l, tile);
    }
    return true;
}

void gml_flash_lane_exact(const gml_flash_args *a, size_t tile, size_t l, float *acc,
                          size_t acc_stride) {
    const size_t dk = a->dk, dv = a->dv;
    float m = -INFINITY, sum = 0;
    bool nan = false;
    for (size_t c = 0; c < dv; c++) acc[c * acc_stride] = 0;
    for (size_t j = a->first_key ? (size_t)a->first_key[l] : 0; j < (size_t)a->n_keys[l] && !nan;
         j++) {
        const float mv = a->mask ? a->mask[l][j * a->mask_stride] : 0.0f;
        if (mv == -INFINITY) continue; /* hidden */
        const float *kj, *vj;
        gml_flash_kv_rows(a, j, 1, &kj, &vj);
        float dot = 0;
        for (size_t d = 0; d < dk; d++) dot = fmaf(kj[d], a->qt[d * tile + l], dot);
        const float s = gml_flash_score(a, l, j, dot);
        if (!isfinite(s)) {
            nan = true;
            break;
        }
        if (s > m) {
            const float alpha = expf(m - s); /* 0 while m is -inf */
            sum *= alpha;
            for (size_t c = 0; c < dv; c++) acc[c * acc_stride] *= alpha;
            m = s;
        }
        float e = expf(s - m);
        if (a->round_p) e = gml_bf16_to_fp32(gml_fp32_to_bf16(e));
        sum += e;
        for (size_t c = 0; c < dv; c++) acc[c * acc_stride] += e * vj[c];
    }
    float *out = a->out[l];
    for (size_t c = 0; c < dv && !nan; c++) nan = !isfinite(acc[c * acc_stride]);
    if (sum > 0 && a->sink) {
        const float f = fold_sink(a->sink[l], m, &sum);
        nan |= isnan(sum);
        for (size_t c = 0; c < dv; c++) acc[c * acc_stride] *= f;
    }
    for (size_t c = 0; c < dv; c++)
        out[c] = nan ? NAN : sum > 0 ? acc[c * acc_stride] / sum : 0.0f;
}
void gml_flash_partial_merge(size_t dv, float *oa, size_t sa, float *ma, float *la,
                             const float *ob, size_t sb, float mb, float lb) {
    if (lb == 0) return; /* b saw no key: a as it is */
    if (*la == 0) {      /* a saw none: b */
        for (size_t c = 0; c < dv; c++) oa[c * sa] = ob[c * sb];
        *ma = mb;
        *la = lb;
        return;
    }
    const float m = mb > *ma ? mb : *ma; /* a NaN l keeps a finite or -inf m */
    const float fa = expf(*ma - m), fb = expf(mb - m);
    for (size_t c = 0; c < dv; c++) oa[c * sa] = oa[c * sa] * fa + ob[c * sb] * fb;
    *la = *la * fa + lb * fb;
    *ma = m;
}

void gml_flash_partial_finish(size_t dv, const float *o, size_t so, float m, float l,
                              const float *sink, float *out, size_t sout) {
    if (l == 0) { /* no key seen: zeros */
        for (size_t c = 0; c < dv; c++) out[c * sout] = 0.0f;
        return;
    }
    float f = 1.0f;
    if (sink && !isnan(l)) f = fold_sink(*sink, m, &l);
    const float inv = f / l;
    bool finite = !isnan(l);
    for (size_t c = 0; c < dv && finite; c++) finite = isfinite(o[c * so] * inv);
    for (size_t c = 0; c < dv; c++) out[c * sout] = finite ? o[c * so] * inv : NAN;
}

/* ---- f16 / bf16 K and V ------------------------------------------------------
 * The variants take each key block's K and V rows through gml_flash_kv_rows;
 * typed ones are converted here into a block buffer of the thread's scratch
 * (GML_FLASH_MAX_KEY_BLOCK rows), by the conversion micro-kernel of the ISA
 * when a row's elements are contiguous, else element by element: the same
 * floats either way (every conversion variant gives the scalar bits), so a
 * typed K/V gives bitwise what f32 K/V holding the converted values give. */
void gml_flash_kv_load_rows(const char *base, size_t row, size_t el, gml_type type,
                            gml_cvt_ukernel *cvt, size_t j0, size_t n, size_t d, float *buf) {
    for (size_t j = 0; j < n; j++) {
        const char *r = base + (j0 + j) * row;
        float *o = buf + j * d;
        if (cvt) {
            cvt(d, r, o);
            continue;
        }
        if (type == GML_F32 && el == sizeof(float)) { /* compute bf16 on f32 rows */
            memcpy(o, r, d * sizeof(float));
            continue;
        }
        for (size_t c = 0; c < d; c++) {
            const char *e = r + c * el;
            uint16_t h;
            if (type == GML_F32) {
                memcpy(o + c, e, sizeof(float));
                continue;
            }
            memcpy(&h, e, sizeof h);
            o[c] = type == GML_F16 ? gml_fp16_to_fp32(h) : gml_bf16_to_fp32(h);
        }
    }
}

/* n floats of x rounded to bf16 values in place (compute bf16): through
 * the ISA's conversion micro-kernels, a run at a time. */
static void round_bf16(const gml_flash_kv *kv, size_t n, float *x) {
    enum { RUN = 256 };
    uint16_t tmp[RUN];
    for (size_t i = 0; i < n; i += RUN) {
        const size_t m = GML_MIN((size_t)RUN, n - i);
        kv->to_bf16(m, x + i, tmp);
        kv->from_bf16(m, tmp, x + i);
    }
}

void gml_flash_kv_load(const gml_flash_args *a, size_t j0, size_t n) {
    const gml_flash_kv *kv = a->kv;
    gml_flash_kv_load_rows(kv->k, kv->k_row, kv->k_el, kv->k_type, kv->cvt_k, j0, n, a->dk, kv->kbuf);
    gml_flash_kv_load_rows(kv->v, kv->v_row, kv->v_el, kv->v_type, kv->cvt_v, j0, n, a->dv, kv->vbuf);
    if (kv->to_bf16) {
        round_bf16(kv, n * a->dk, kv->kbuf);
        round_bf16(kv, n * a->dv, kv->vbuf);
    }
}
