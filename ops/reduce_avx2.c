/* AVX2 variants of the row reductions (ops/reduce.inc): two ymm hold the 16
 * lanes of ops/reduce.h (0-7, 8-15), four their double accumulators. */
#include "reduce.h"

#include <immintrin.h>

/* lanes j < k (k <= 8) set */
static inline __m256 first_lanes(size_t k) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)k), idx));
}

/* x[i + j] for j < k (k <= 8), -0 in the other lanes: a term that adds nothing */
static inline __m256 load_or_neg0(const float *x, size_t k) {
    const __m256 m = first_lanes(k);
    return _mm256_blendv_ps(_mm256_set1_ps(-0.0f), _mm256_maskload_ps(x, _mm256_castps_si256(m)), m);
}

static inline void accumulate(__m256 lane, __m256d acc[2]) {
    acc[0] = _mm256_add_pd(acc[0], _mm256_cvtps_pd(_mm256_castps256_ps128(lane)));
    acc[1] = _mm256_add_pd(acc[1], _mm256_cvtps_pd(_mm256_extractf128_ps(lane, 1)));
}

static inline double finish(const __m256d acc[4]) {
    double d[GML_REDUCE_LANES];
    for (int k = 0; k < 4; k++) _mm256_storeu_pd(d + 4 * k, acc[k]);
    return gml_reduce_tree16(d);
}

double gml_f32_rsum_ukernel__avx2_u16(size_t n, const float *x) {
    __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                      _mm256_setzero_pd()};
    for (size_t b = 0; b < n; b += GML_REDUCE_BLOCK) {
        const size_t end = GML_MIN(n, b + GML_REDUCE_BLOCK);
        __m256 l0 = _mm256_set1_ps(-0.0f), l1 = l0;
        size_t i = b;
        for (; i + 16 <= end; i += 16) {
            l0 = _mm256_add_ps(l0, _mm256_loadu_ps(x + i));
            l1 = _mm256_add_ps(l1, _mm256_loadu_ps(x + i + 8));
        }
        if (i < end) {
            const size_t r = end - i;
            l0 = _mm256_add_ps(l0, load_or_neg0(x + i, GML_MIN(r, 8)));
            if (r > 8) l1 = _mm256_add_ps(l1, load_or_neg0(x + i + 8, r - 8));
        }
        accumulate(l0, acc);
        accumulate(l1, acc + 2);
    }
    return finish(acc);
}

double gml_f32_rsumsq_ukernel__avx2_u16(size_t n, const float *x, float c) {
    const __m256 vc = _mm256_set1_ps(c), neg0 = _mm256_set1_ps(-0.0f);
    __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                      _mm256_setzero_pd()};
    for (size_t b = 0; b < n; b += GML_REDUCE_BLOCK) {
        const size_t end = GML_MIN(n, b + GML_REDUCE_BLOCK);
        __m256 l0 = neg0, l1 = neg0;
        size_t i = b;
        for (; i + 16 <= end; i += 16) {
            const __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), vc);
            const __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vc);
            l0 = _mm256_add_ps(l0, _mm256_mul_ps(d0, d0));
            l1 = _mm256_add_ps(l1, _mm256_mul_ps(d1, d1));
        }
        for (size_t h = 0; i < end; i += 8, h++) { /* h: which of the two lane vectors */
            const size_t k = GML_MIN(end - i, 8);
            const __m256 m = first_lanes(k);
            const __m256 d = _mm256_sub_ps(_mm256_maskload_ps(x + i, _mm256_castps_si256(m)), vc);
            const __m256 sq = _mm256_blendv_ps(neg0, _mm256_mul_ps(d, d), m);
            if (h == 0) l0 = _mm256_add_ps(l0, sq);
            else l1 = _mm256_add_ps(l1, sq);
        }
        accumulate(l0, acc);
        accumulate(l1, acc + 2);
    }
    return finish(acc);
}

float gml_f32_rmax_ukernel__avx2_u16(size_t n, const float *x) {
    const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
    __m256 m0 = neg_inf, m1 = neg_inf, nan = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v0, v1, _CMP_UNORD_Q));
        m0 = _mm256_max_ps(v0, m0); /* v > m ? v : m */
        m1 = _mm256_max_ps(v1, m1);
    }
    for (size_t h = 0; i < n; i += 8, h++) {
        const __m256 k = first_lanes(GML_MIN(n - i, 8));
        const __m256 v = _mm256_blendv_ps(neg_inf, _mm256_maskload_ps(x + i, _mm256_castps_si256(k)), k);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        if (h == 0) m0 = _mm256_max_ps(v, m0);
        else m1 = _mm256_max_ps(v, m1);
    }
    float lanes[GML_REDUCE_LANES];
    _mm256_storeu_ps(lanes, m0);
    _mm256_storeu_ps(lanes + 8, m1);
    return gml_reduce_tree16_max(lanes, _mm256_movemask_ps(nan) != 0);
}
