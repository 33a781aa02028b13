/* AVX-512F variants of the softmax micro-kernels (ops/softmax.inc). */
#include "ukernels.h"
#include "vexp_x86.h"

#include <immintrin.h>
#include <math.h>

/* The first r lanes, 1 <= r <= 16. */
static inline __mmask16 first_lanes(size_t r) { return (__mmask16)((1u << r) - 1u); }

/* y = exp(x). Error against exp in double, measured over every float of
 * [-87.34, 88.72] (the normal results) by tests/test_ukernels_vexp.c with
 * GGMLITE_VEXP_EXHAUSTIVE=1: at most 7.7e-8 relative, 0.91 ulp (at x =
 * -26.737; glibc's expf: 0.50 ulp). Subnormal results (x in [-103.97,
 * -87.34]): within 0.86 ulp (of 2^-149). Below -103.98 and at -inf: +0.
 * Above 88.7229 and at +inf: +inf. NaN: NaN. The test asserts 1 ulp and
 * 1e-7 relative on every 128th float. */
void gml_f32_vexp_ukernel__avx512_u16(size_t n, const float *x, float *y) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, vexp16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        const __mmask16 k = first_lanes(n - i);
        _mm512_mask_storeu_ps(y + i, k, vexp16(_mm512_maskz_loadu_ps(k, x + i)));
    }
}

/* Scores of lanes k at i: x * scale (+ mask), as gml_softmax_score: -inf
 * where the mask is -inf (hidden), else NaN for a -inf score. */
static inline __m512 scores(__mmask16 k, const float *x, const float *mask, size_t i,
                            __m512 vscale) {
    const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
    const __m512 xv = _mm512_maskz_loadu_ps(k, x + i);
    __m512 v = _mm512_mul_ps(xv, vscale);
    __mmask16 hidden = 0;
    if (mask) {
        const __m512 mv = _mm512_maskz_loadu_ps(k, mask + i);
        v = _mm512_add_ps(v, mv);
        hidden |= _mm512_cmp_ps_mask(mv, neg_inf, _CMP_EQ_OQ);
    }
    v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, neg_inf, _CMP_EQ_OQ), _mm512_set1_ps(NAN));
    return _mm512_mask_mov_ps(v, hidden, neg_inf);
}

/* Rows in blocks of 512: within a block each float lane sums at most 16
 * exps, blocks are summed in double. */
#define SUM_BLOCK 512

void gml_f32_softmax_ukernel__avx512_u32(size_t n, const float *x, const float *mask, float scale,
                                         float *out) {
    const __m512 vscale = _mm512_set1_ps(scale);
    const __mmask16 all = 0xffff;

    /* pass 1: scores into out, and their max (NaN scores are not the max,
     * as in the reference; they make the sum NaN below) */
    __m512 vmax0 = _mm512_set1_ps(-INFINITY), vmax1 = vmax0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 v0 = scores(all, x, mask, i, vscale);
        const __m512 v1 = scores(all, x, mask, i + 16, vscale);
        _mm512_storeu_ps(out + i, v0);
        _mm512_storeu_ps(out + i + 16, v1);
        vmax0 = _mm512_max_ps(v0, vmax0);
        vmax1 = _mm512_max_ps(v1, vmax1);
    }
    for (; i < n; i += 16) {
        const __mmask16 k = first_lanes(GML_MIN(n - i, 16));
        const __m512 v = scores(k, x, mask, i, vscale);
        _mm512_mask_storeu_ps(out + i, k, v);
        vmax0 = _mm512_mask_max_ps(vmax0, k, v, vmax0);
    }
    const float max = _mm512_reduce_max_ps(_mm512_max_ps(vmax0, vmax1));
    if (max == -INFINITY) { /* every key masked, or NaN scores */
        gml_softmax_no_visible_key(n, out);
        return;
    }

    /* pass 2: out = exp(out - max), summed; +0 below 2^-125.5, never a
     * subnormal (vexp16_nosub: a microcode assist each on Intel) */
    const __m512 vmax = _mm512_set1_ps(max);
    __m512d sum_lo = _mm512_setzero_pd(), sum_hi = _mm512_setzero_pd();
    for (i = 0; i < n;) {
        const size_t end = GML_MIN(n, i + SUM_BLOCK);
        __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
        for (; i + 32 <= end; i += 32) {
            const __m512 e0 = vexp16_nosub(_mm512_sub_ps(_mm512_loadu_ps(out + i), vmax));
            const __m512 e1 = vexp16_nosub(_mm512_sub_ps(_mm512_loadu_ps(out + i + 16), vmax));
            _mm512_storeu_ps(out + i, e0);
            _mm512_storeu_ps(out + i + 16, e1);
            s0 = _mm512_add_ps(s0, e0);
            s1 = _mm512_add_ps(s1, e1);
        }
        for (; i < end; i += 16) {
            const __mmask16 k = first_lanes(GML_MIN(end - i, 16));
            const __m512 e = vexp16_nosub(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, out + i), vmax));
            _mm512_mask_storeu_ps(out + i, k, e);
            s0 = _mm512_mask_add_ps(s0, k, s0, e);
        }
        s0 = _mm512_add_ps(s0, s1);
        sum_lo = _mm512_add_pd(sum_lo, _mm512_cvtps_pd(_mm512_castps512_ps256(s0)));
        sum_hi = _mm512_add_pd(sum_hi, _mm512_cvtps_pd(_mm256_castpd_ps(
                                           _mm512_extractf64x4_pd(_mm512_castps_pd(s0), 1))));
    }
    const double sum = _mm512_reduce_add_pd(_mm512_add_pd(sum_lo, sum_hi));

    /* pass 3: normalize */
    const __m512 inv = _mm512_set1_ps((float)(1.0 / sum));
    for (i = 0; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_loadu_ps(out + i), inv));
    if (i < n) {
        const __mmask16 k = first_lanes(n - i);
        _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, out + i), inv));
    }
}
