/* AVX2 variants of the rope micro-kernels (ops/rope.inc). Multiplies and
 * adds only (no FMA), in the scalar variant's order: the same bits. */
#include "ukernels.h"

#include <immintrin.h>

/* The first m lanes, 0 <= m <= 8. */
static inline __m256i first_lanes(size_t m) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

void gml_f32_rope_ukernel__avx2_u8(size_t n, const float *c, const float *s, const float *x0,
                                   const float *x1, float *o0, float *o1) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 vc = _mm256_loadu_ps(c + i), vs = _mm256_loadu_ps(s + i);
        const __m256 a = _mm256_loadu_ps(x0 + i), b = _mm256_loadu_ps(x1 + i);
        _mm256_storeu_ps(o0 + i, _mm256_sub_ps(_mm256_mul_ps(a, vc), _mm256_mul_ps(b, vs)));
        _mm256_storeu_ps(o1 + i, _mm256_add_ps(_mm256_mul_ps(b, vc), _mm256_mul_ps(a, vs)));
    }
    if (i < n) {
        const __m256i m = first_lanes(n - i);
        const __m256 vc = _mm256_maskload_ps(c + i, m), vs = _mm256_maskload_ps(s + i, m);
        const __m256 a = _mm256_maskload_ps(x0 + i, m), b = _mm256_maskload_ps(x1 + i, m);
        _mm256_maskstore_ps(o0 + i, m, _mm256_sub_ps(_mm256_mul_ps(a, vc), _mm256_mul_ps(b, vs)));
        _mm256_maskstore_ps(o1 + i, m, _mm256_add_ps(_mm256_mul_ps(b, vc), _mm256_mul_ps(a, vs)));
    }
}

/* 4 pairs a vector: cos and sin duplicated per pair, sin negated on the
 * even lanes, the pair swapped: o = x * c + swap(x) * (-s, s):
 * a*c + b*(-s) is a*c - b*s exactly, b*c + a*s as is. */
static inline __m256 ropei4(__m256 x, __m128 c4, __m128 s4) {
    const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    const __m256 neg_even = _mm256_castsi256_ps(_mm256_setr_epi32(
        (int)0x80000000u, 0, (int)0x80000000u, 0, (int)0x80000000u, 0, (int)0x80000000u, 0));
    const __m256 c = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(c4), dup);
    const __m256 s = _mm256_xor_ps(_mm256_permutevar8x32_ps(_mm256_castps128_ps256(s4), dup),
                                   neg_even);
    const __m256 sw = _mm256_permute_ps(x, 0xB1);
    return _mm256_add_ps(_mm256_mul_ps(x, c), _mm256_mul_ps(sw, s));
}

void gml_f32_ropei_ukernel__avx2_u4(size_t n, const float *c, const float *s, const float *x,
                                    float *o) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        _mm256_storeu_ps(o + 2 * i, ropei4(_mm256_loadu_ps(x + 2 * i), _mm_loadu_ps(c + i),
                                           _mm_loadu_ps(s + i)));
    if (i < n) {
        const size_t m = n - i;
        const __m256i mx = first_lanes(2 * m);
        const __m128i mc = _mm256_castsi256_si128(first_lanes(m));
        _mm256_maskstore_ps(o + 2 * i, mx, ropei4(_mm256_maskload_ps(x + 2 * i, mx),
                                                  _mm_maskload_ps(c + i, mc),
                                                  _mm_maskload_ps(s + i, mc)));
    }
}
