/* The scalar micro-kernels of flash attention (ops/flash_attn.inc): the
 * prefill one (gml_f32_flash_ukernel__scalar_x8) and the decode one
 * (gml_f32_flash_dec_ukernel__scalar_d1, over ops/flash_dec.h's loop). */
#include "flash_dec.h"
#include "ukernels.h"

#include <math.h>
#include <string.h>

/* ---- scalar micro-kernel ---------------------------------------------------
 * The algorithm of every variant (ops/ukernels.h), in plain C on float: key
 * blocks of SCALAR_KEY_BLOCK, scores s[j][l] and output ot[c][l] transposed
 * in work, a running max m[l] and sum sum[l] per lane. */

#define SCALAR_KEY_BLOCK 32

/* expf, but +0 below -87.33654 (about ln FLT_MIN): the terms of the online
 * softmax (summed to at least 1) are never subnormal, whose arithmetic costs
 * a microcode assist on Intel (as gml_vexp_nosub in ops/simd/vmath.h). */
static inline float expf_nosub(float x) { return x < -87.33654f ? 0.0f : expf(x); }

static void flash_block_scalar(const gml_flash_args *a, size_t tile) {
    const size_t nq = a->nq, dk = a->dk, dv = a->dv;
    float *s = a->work, *ot = s + (size_t)SCALAR_KEY_BLOCK * tile;
    float m[32], sum[32];
    int32_t nmax = 0;
    for (size_t l = 0; l < nq; l++) {
        m[l] = -INFINITY;
        sum[l] = 0;
        nmax = GML_MAX(nmax, a->n_keys[l]);
    }
    for (size_t i = 0; i < dv * tile; i++) ot[i] = 0;
    /* size_t keys: n_keys < INT32_MAX, but the block after the last may
     * start past it (an int32 j0 += 32 would overflow from Tk > 2^31 - 33) */
    for (size_t j0 = a->key0; j0 < (size_t)nmax; j0 += SCALAR_KEY_BLOCK) {
        const size_t nk = GML_MIN((size_t)SCALAR_KEY_BLOCK, (size_t)nmax - j0);
        const float *kb, *vb; /* rows j0 .. j0 + nk - 1, converted when typed */
        gml_flash_kv_rows(a, j0, nk, &kb, &vb);
        for (size_t j = 0; j < nk; j++) {
            const float *kj = kb + j * a->ldk;
            for (size_t l = 0; l < nq; l++) {
                float dot = 0; /* an FMA chain over d in order, as every variant's */
                for (size_t d = 0; d < dk; d++) dot = fmaf(kj[d], a->qt[d * tile + l], dot);
                /* softcap, the mask, alibi: a hidden key stays -inf whatever it holds */
                const float sc = gml_flash_score(a, l, j0 + j, dot);
                const bool seen = j0 + j < (size_t)a->n_keys[l] &&
                                  (!a->first_key || j0 + j >= (size_t)a->first_key[l]);
                s[j * tile + l] = seen ? sc : -INFINITY;
            }
        }
        for (size_t l = 0; l < nq; l++) {
            float bmax = -INFINITY;
            for (size_t j = 0; j < nk; j++) bmax = s[j * tile + l] > bmax ? s[j * tile + l] : bmax;
            const float mnew = bmax > m[l] ? bmax : m[l];
            const float base = mnew == -INFINITY ? 0.0f : mnew; /* no key seen yet */
            const float alpha = expf_nosub(m[l] - base);
            float bsum = 0;
            for (size_t j = 0; j < nk; j++) {
                float e = expf_nosub(s[j * tile + l] - base);
                if (a->round_p) e = gml_bf16_to_fp32(gml_fp32_to_bf16(e)); /* compute bf16 */
                s[j * tile + l] = e;
                bsum += e;
            }
            sum[l] = sum[l] * alpha + bsum;
            if (alpha != 1.0f)
                for (size_t c = 0; c < dv; c++) ot[c * tile + l] *= alpha;
            m[l] = mnew;
        }
        for (size_t j = 0; j < nk; j++) {
            const float *vj = vb + j * a->ldv;
            for (size_t c = 0; c < dv; c++)
                for (size_t l = 0; l < nq; l++) ot[c * tile + l] += vj[c] * s[j * tile + l];
        }
    }
    gml_flash_finish(a, tile, sum, m, ot, true);
}

void gml_f32_flash_ukernel__scalar_x8(const gml_flash_args *a) { flash_block_scalar(a, 8); }

/* Element d of a row of d contiguous f32, f16 or bf16 elements, as a float. */
static inline float kv_elem(gml_type t, const char *row, size_t d) {
    if (t == GML_F32) {
        float f;
        memcpy(&f, row + d * sizeof f, sizeof f);
        return f;
    }
    uint16_t h;
    memcpy(&h, row + d * sizeof h, sizeof h);
    return t == GML_F16 ? gml_fp16_to_fp32(h) : gml_bf16_to_fp32(h);
}

/* ---- decoding: the scalar micro-kernel, partials and their merge -----------
 * (ops/ukernels.h, "flash attention, decoding"; the loop: ops/flash_dec.h) */

static void dec_dots_scalar(const gml_flash_dec_args *a, size_t jb, size_t nk, float *s) {
    for (size_t jj = 0; jj < nk; jj++) {
        const char *kr = a->k + (jb - a->j0 + jj) * a->k_row;
        for (size_t l = 0; l < a->nq; l++) {
            const float *ql = a->q + l * a->ldq;
            float dot = 0; /* an FMA chain over d in order */
            for (size_t d = 0; d < a->dk; d++) dot = fmaf(kv_elem(a->k_type, kr, d), ql[d], dot);
            s[l * GML_FLASH_DEC_KEY_BLOCK + jj] = dot;
        }
    }
}

static void dec_cap_scalar(const gml_flash_dec_args *a, size_t n, float *x) {
    for (size_t i = 0; i < n; i++)
        x[i] = isfinite(x[i]) ? a->softcap * tanhf(x[i] / a->softcap) : NAN;
}

static float dec_expsum_scalar(size_t n, float *x, float base) {
    float sum = 0;
    for (size_t i = 0; i < n; i++) {
        x[i] = expf_nosub(x[i] - base);
        sum += x[i];
    }
    return sum;
}

static void dec_values_scalar(const gml_flash_dec_args *a, size_t jb, size_t nk, const float *p,
                              const uint8_t *bits) {
    for (size_t jj = 0; jj < nk; jj++) {
        const char *vr = a->v + (jb - a->j0 + jj) * a->v_row;
        for (size_t l = 0; l < a->nq; l++) {
            if (!(bits[jj] >> l & 1)) continue; /* not seen by row l: never multiplied */
            const float w = p[l * GML_FLASH_DEC_KEY_BLOCK + jj];
            float *o = a->o + l * a->ldo;
            for (size_t c = 0; c < a->dv; c++) o[c] = fmaf(w, kv_elem(a->v_type, vr, c), o[c]);
        }
    }
}

static float dec_max_scalar(size_t n, const float *x) {
    float m = -INFINITY;
    for (size_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

void gml_f32_flash_dec_ukernel__scalar_d1(const gml_flash_dec_args *a) {
    gml_flash_dec_run(a, dec_dots_scalar, dec_cap_scalar, dec_expsum_scalar, dec_max_scalar,
                      dec_values_scalar);
}
