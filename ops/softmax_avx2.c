/* AVX2+FMA variants of the softmax micro-kernels (ops/softmax.inc). */
#include "ukernels.h"
#include "vexp_x86.h"

#include <immintrin.h>
#include <math.h>

/* Lane mask of the first r lanes, 1 <= r <= 8. */
static inline __m256i first_lanes(size_t r) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static inline double hsum4d(__m256d v) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

/* y = exp(x); bitwise equal to gml_f32_vexp_ukernel__avx512_u16 (see its
 * measured error). */
void gml_f32_vexp_ukernel__avx2_u8(size_t n, const float *x, float *y) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, vexp8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        const __m256i k = first_lanes(n - i);
        _mm256_maskstore_ps(y + i, k, vexp8(_mm256_maskload_ps(x + i, k)));
    }
}

/* Scores of the lanes k at i: x * scale (+ mask), as gml_softmax_score:
 * -inf where the mask is -inf (hidden), else NaN for a -inf score;
 * masked-off lanes 0. */
static inline __m256 scores(__m256i k, const float *x, const float *mask, size_t i,
                            __m256 vscale) {
    const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
    const __m256 xv = _mm256_maskload_ps(x + i, k);
    __m256 v = _mm256_mul_ps(xv, vscale);
    __m256 hidden = _mm256_setzero_ps();
    if (mask) {
        const __m256 mv = _mm256_maskload_ps(mask + i, k);
        v = _mm256_add_ps(v, mv);
        hidden = _mm256_or_ps(hidden, _mm256_cmp_ps(mv, neg_inf, _CMP_EQ_OQ));
    }
    v = _mm256_blendv_ps(v, _mm256_set1_ps(NAN), _mm256_cmp_ps(v, neg_inf, _CMP_EQ_OQ));
    return _mm256_blendv_ps(v, neg_inf, hidden);
}

/* Rows in blocks of 256: within a block each float lane sums at most 16
 * exps, blocks are summed in double. */
#define SUM_BLOCK 256

void gml_f32_softmax_ukernel__avx2_u16(size_t n, const float *x, const float *mask, float scale,
                                       float *out) {
    const __m256 vscale = _mm256_set1_ps(scale);
    const __m256i all = _mm256_set1_epi32(-1);
    const __m256 neg_inf = _mm256_set1_ps(-INFINITY);

    /* pass 1: scores into out, and their max (NaN scores are not the max,
     * as in the reference; they make the sum NaN below) */
    __m256 vmax0 = neg_inf, vmax1 = neg_inf;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 v0 = scores(all, x, mask, i, vscale);
        const __m256 v1 = scores(all, x, mask, i + 8, vscale);
        _mm256_storeu_ps(out + i, v0);
        _mm256_storeu_ps(out + i + 8, v1);
        vmax0 = _mm256_max_ps(v0, vmax0);
        vmax1 = _mm256_max_ps(v1, vmax1);
    }
    for (; i < n; i += 8) {
        const __m256i k = first_lanes(GML_MIN(n - i, 8));
        const __m256 v = scores(k, x, mask, i, vscale);
        _mm256_maskstore_ps(out + i, k, v);
        vmax0 = _mm256_max_ps(_mm256_blendv_ps(neg_inf, v, _mm256_castsi256_ps(k)), vmax0);
    }
    const float max = hmax8(_mm256_max_ps(vmax0, vmax1));
    if (max == -INFINITY) { /* every key masked, or NaN scores */
        gml_softmax_no_visible_key(n, out);
        return;
    }

    /* pass 2: out = exp(out - max), summed; +0 below 2^-125.5, never a
     * subnormal (vexp8_nosub: a microcode assist each on Intel) */
    const __m256 vmax = _mm256_set1_ps(max);
    __m256d sum_lo = _mm256_setzero_pd(), sum_hi = _mm256_setzero_pd();
    for (i = 0; i < n;) {
        const size_t end = GML_MIN(n, i + SUM_BLOCK);
        __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
        for (; i + 16 <= end; i += 16) {
            const __m256 e0 = vexp8_nosub(_mm256_sub_ps(_mm256_loadu_ps(out + i), vmax));
            const __m256 e1 = vexp8_nosub(_mm256_sub_ps(_mm256_loadu_ps(out + i + 8), vmax));
            _mm256_storeu_ps(out + i, e0);
            _mm256_storeu_ps(out + i + 8, e1);
            s0 = _mm256_add_ps(s0, e0);
            s1 = _mm256_add_ps(s1, e1);
        }
        for (; i < end; i += 8) {
            const __m256i k = first_lanes(GML_MIN(end - i, 8));
            const __m256 e = vexp8_nosub(_mm256_sub_ps(_mm256_maskload_ps(out + i, k), vmax));
            _mm256_maskstore_ps(out + i, k, e);
            s0 = _mm256_add_ps(s0, _mm256_and_ps(e, _mm256_castsi256_ps(k)));
        }
        s0 = _mm256_add_ps(s0, s1);
        sum_lo = _mm256_add_pd(sum_lo, _mm256_cvtps_pd(_mm256_castps256_ps128(s0)));
        sum_hi = _mm256_add_pd(sum_hi, _mm256_cvtps_pd(_mm256_extractf128_ps(s0, 1)));
    }
    const double sum = hsum4d(_mm256_add_pd(sum_lo, sum_hi));

    /* pass 3: normalize */
    const __m256 inv = _mm256_set1_ps((float)(1.0 / sum));
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(out + i), inv));
    if (i < n) {
        const __m256i k = first_lanes(n - i);
        _mm256_maskstore_ps(out + i, k, _mm256_mul_ps(_mm256_maskload_ps(out + i, k), inv));
    }
}
