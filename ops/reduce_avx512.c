/* AVX-512F variants of the row reductions (ops/reduce.inc): one zmm holds
 * the 16 lanes of ops/reduce.h, two hold their double accumulators. */
#include "reduce.h"

#include <immintrin.h>

static inline __mmask16 first_lanes(size_t k) { return (__mmask16)((1u << k) - 1u); }

/* Adds the 16 float lanes, converted, to the double accumulators lo, hi. */
static inline void accumulate(__m512 lane, __m512d *lo, __m512d *hi) {
    *lo = _mm512_add_pd(*lo, _mm512_cvtps_pd(_mm512_castps512_ps256(lane)));
    *hi = _mm512_add_pd(*hi, _mm512_cvtps_pd(_mm256_castpd_ps(
                                 _mm512_extractf64x4_pd(_mm512_castps_pd(lane), 1))));
}

static inline double finish(__m512d lo, __m512d hi) {
    double d[GML_REDUCE_LANES];
    _mm512_storeu_pd(d, lo);
    _mm512_storeu_pd(d + 8, hi);
    return gml_reduce_tree16(d);
}

double gml_f32_rsum_ukernel__avx512_u16(size_t n, const float *x) {
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
    for (size_t b = 0; b < n; b += GML_REDUCE_BLOCK) {
        const size_t end = GML_MIN(n, b + GML_REDUCE_BLOCK);
        __m512 lane = _mm512_set1_ps(-0.0f);
        size_t i = b;
        for (; i + 16 <= end; i += 16) lane = _mm512_add_ps(lane, _mm512_loadu_ps(x + i));
        if (i < end) {
            const __mmask16 k = first_lanes(end - i);
            lane = _mm512_mask_add_ps(lane, k, lane, _mm512_maskz_loadu_ps(k, x + i));
        }
        accumulate(lane, &lo, &hi);
    }
    return finish(lo, hi);
}

double gml_f32_rsumsq_ukernel__avx512_u16(size_t n, const float *x, float c) {
    const __m512 vc = _mm512_set1_ps(c);
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
    for (size_t b = 0; b < n; b += GML_REDUCE_BLOCK) {
        const size_t end = GML_MIN(n, b + GML_REDUCE_BLOCK);
        __m512 lane = _mm512_set1_ps(-0.0f);
        size_t i = b;
        for (; i + 16 <= end; i += 16) {
            const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + i), vc);
            lane = _mm512_add_ps(lane, _mm512_mul_ps(d, d));
        }
        if (i < end) {
            const __mmask16 k = first_lanes(end - i);
            const __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vc);
            lane = _mm512_mask_add_ps(lane, k, lane, _mm512_mul_ps(d, d));
        }
        accumulate(lane, &lo, &hi);
    }
    return finish(lo, hi);
}

float gml_f32_rmax_ukernel__avx512_u16(size_t n, const float *x) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    __mmask16 nan = 0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        m = _mm512_max_ps(v, m); /* v > m ? v : m */
    }
    if (i < n) {
        const __mmask16 k = first_lanes(n - i);
        const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
        nan |= _mm512_mask_cmp_ps_mask(k, v, v, _CMP_UNORD_Q);
        m = _mm512_mask_max_ps(m, k, v, m);
    }
    float lanes[GML_REDUCE_LANES];
    _mm512_storeu_ps(lanes, m);
    return gml_reduce_tree16_max(lanes, nan != 0);
}
