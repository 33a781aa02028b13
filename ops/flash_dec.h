/* The decode micro-kernels' common loop (ops/ukernels.h, "flash attention,
 * decoding"): each variant (ops/flash_attn_scalar.c's scalar one, the SIMD
 * ones of ops/flash_dec_simd.c) supplies four vector primitives and
 * calls gml_flash_dec_run with them; the order of operations around them
 * (scores, masks, the running max, the rescale) is this file's, the same for
 * every variant. For a key block of nk <= GML_FLASH_DEC_KEY_BLOCK keys
 * from jb:
 *
 *   dots(a, jb, nk, s)         s[l * KB + jj] = q_l . k_{jb + jj}      (lanes over d_k)
 *   cap(a, n, x)               x <- softcap tanh(x / softcap), NaN where x is not finite
 *   expsum(n, x, base)         x <- e^(x - base) (+0 below 2^-125.5), returns their sum
 *   max(n, x)                  max_i x[i] (no NaN among them; -inf if all are)
 *   values(a, jb, nk, p, bits) o_l += p[l * KB + jj] v_{jb + jj} where bit l of bits[jj]
 *                                                                      (lanes over d_v)
 *
 * Per row, per block: the options and masks on s (gml_flash_dec_scores), the
 * block max, the running max m, the factor e^(m_old - m) on o and l when m
 * grew, then the terms and their sum. */
#ifndef GGMLITE_FLASH_DEC_H
#define GGMLITE_FLASH_DEC_H

#include "ukernels.h"

#include <math.h>
#include <stdint.h>

/* A K or V row GML_DEC_PREFETCH_AHEAD keys ahead (its first `bytes`),
 * fetched into L1 line by line: the decode kernels read each row once and
 * waited on the loads without it (perf: most samples right after the V
 * loads; C4's decode attention over 8 MiB of f16 K/V, 1 thread: AVX-512
 * 1.44 -> 1.19 ms, AVX2 about 15% less). A prefetch never faults. */
#define GML_DEC_PREFETCH_AHEAD 8
static inline void dec_prefetch_row(const char *row, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(row + o, 0, 3);
}

#if defined(__GNUC__)
#define GML_DEC_INLINE inline __attribute__((always_inline))
#else
#define GML_DEC_INLINE inline
#endif

typedef void gml_flash_dec_dots(const gml_flash_dec_args *a, size_t jb, size_t nk, float *s);
typedef void gml_flash_dec_cap(const gml_flash_dec_args *a, size_t n, float *x);
typedef float gml_flash_dec_expsum(size_t n, float *x, float base);
typedef float gml_flash_dec_max(size_t n, const float *x);
typedef void gml_flash_dec_values(const gml_flash_dec_args *a, size_t jb, size_t nk,
                                  const float *p, const uint8_t *bits);

/* Row l's scores of keys jb .. jb + nk - 1 (s: the dot products, capped),
 * as gml_flash_score forms them: the mask (gml_masked_score /
 * gml_visible_score), then ALiBi. A key the row does not see (outside
 * [first_key, n_keys), or hidden by a -inf mask) gets -inf; one it sees
 * whose score is not finite gets -inf too and sets *nan; every key it sees
 * with a finite score sets bit l of bits[jj]. */
static GML_DEC_INLINE void gml_flash_dec_scores(const gml_flash_dec_args *a, size_t l, size_t jb,
                                                size_t nk, float *s, bool *nan, uint8_t *bits) {
    const size_t lo = (size_t)a->first_key[l], hi = (size_t)a->n_keys[l];
    const float *mrow = a->mask ? a->mask[l] : NULL;
    const uint8_t bit = (uint8_t)(1u << l);
    if (!mrow && !a->slope && jb >= lo && jb + nk <= hi) { /* every key seen: the usual case */
        bool bad = false;
        for (size_t jj = 0; jj < nk; jj++) bad |= s[jj] - s[jj] != 0; /* NaN or +-inf */
        if (!bad) {
            for (size_t jj = 0; jj < nk; jj++) bits[jj] |= bit;
            return;
        }
    }
    for (size_t jj = 0; jj < nk; jj++) {
        const size_t j = jb + jj;
        if (j < lo || j >= hi) {
            s[jj] = -INFINITY;
            continue;
        }
        float x = mrow ? gml_masked_score(s[jj], mrow[j * a->mask_stride]) : gml_visible_score(s[jj]);
        if (x == -INFINITY) { /* hidden by the mask */
            s[jj] = -INFINITY;
            continue;
        }
        if (a->slope) x += a->slope[l] * ((float)j - a->qpos[l]);
        if (!(x < INFINITY)) { /* NaN or +inf at a key the row sees: the row is NaN */
            *nan = true;
            s[jj] = -INFINITY;
            continue;
        }
        s[jj] = x;
        bits[jj] |= bit;
    }
}

static GML_DEC_INLINE void gml_flash_dec_run(const gml_flash_dec_args *a, gml_flash_dec_dots *dots,
                                             gml_flash_dec_cap *cap, gml_flash_dec_expsum *expsum,
                                             gml_flash_dec_max *max, gml_flash_dec_values *values) {
    const size_t nq = a->nq, KB = GML_FLASH_DEC_KEY_BLOCK;
    float *s = a->work;
    bool nan[GML_FLASH_DEC_MAX_ROWS];
    size_t lo = a->j1, hi = a->j0;
    for (size_t l = 0; l < nq; l++) {
        a->m[l] = -INFINITY;
        a->l[l] = 0.0f;
        nan[l] = false;
        for (size_t c = 0; c < a->ldo; c++) a->o[l * a->ldo + c] = 0.0f;
        lo = GML_MIN(lo, (size_t)a->first_key[l]);
        hi = GML_MAX(hi, (size_t)a->n_keys[l]);
    }
    lo = GML_MAX(lo, a->j0);
    hi = GML_MIN(hi, a->j1);
    for (size_t jb = lo; jb < hi; jb += KB) {
        const size_t nk = GML_MIN(KB, hi - jb);
        uint8_t bits[GML_FLASH_DEC_KEY_BLOCK] = {0};
        dots(a, jb, nk, s);
        for (size_t l = 0; l < nq; l++) {
            float *sl = s + l * KB;
            if (a->softcap > 0) cap(a, nk, sl);
            gml_flash_dec_scores(a, l, jb, nk, sl, &nan[l], bits);
            const float bmax = max(nk, sl);
            if (bmax == -INFINITY) continue; /* no key of this block: its bits are 0 */
            const float m = a->m[l], mnew = bmax > m ? bmax : m;
            if (mnew != m) { /* the max grew: rescale (0 while m was -inf) */
                const float alpha = expf(m - mnew);
                a->l[l] *= alpha;
                for (size_t c = 0; c < a->dv; c++) a->o[l * a->ldo + c] *= alpha;
                a->m[l] = mnew;
            }
            a->l[l] += expsum(nk, sl, mnew);
        }
        values(a, jb, nk, s, bits);
    }
    for (size_t l = 0; l < nq; l++)
        if (nan[l]) a->l[l] = NAN;
}

#endif /* GGMLITE_FLASH_DEC_H */
