/* AVX-512 variants of the rope micro-kernels (ops/rope.inc). Multiplies and
 * adds only (no FMA), in the scalar variant's order: the same bits. */
#include "ukernels.h"

#include <immintrin.h>

static inline __mmask16 first_lanes(size_t m) { return (__mmask16)((1u << m) - 1u); }

void gml_f32_rope_ukernel__avx512_u16(size_t n, const float *c, const float *s, const float *x0,
                                      const float *x1, float *o0, float *o1) {
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : first_lanes(n - i);
        const __m512 vc = _mm512_maskz_loadu_ps(m, c + i), vs = _mm512_maskz_loadu_ps(m, s + i);
        const __m512 a = _mm512_maskz_loadu_ps(m, x0 + i), b = _mm512_maskz_loadu_ps(m, x1 + i);
        _mm512_mask_storeu_ps(o0 + i, m, _mm512_sub_ps(_mm512_mul_ps(a, vc), _mm512_mul_ps(b, vs)));
        _mm512_mask_storeu_ps(o1 + i, m, _mm512_add_ps(_mm512_mul_ps(b, vc), _mm512_mul_ps(a, vs)));
    }
}

/* 8 pairs a vector, as the AVX2 variant: o = x * c + swap(x) * (-s, s). */
void gml_f32_ropei_ukernel__avx512_u8(size_t n, const float *c, const float *s, const float *x,
                                      float *o) {
    const __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i neg_even = _mm512_set1_epi64((long long)0x0000000080000000ull);
    for (size_t i = 0; i < n; i += 8) {
        const size_t m = GML_MIN(8, n - i);
        const __mmask16 mc = first_lanes(m), mx = first_lanes(2 * m);
        const __m512 vc = _mm512_permutexvar_ps(dup, _mm512_maskz_loadu_ps(mc, c + i));
        const __m512 vs = _mm512_castsi512_ps(_mm512_xor_si512(
            _mm512_castps_si512(_mm512_permutexvar_ps(dup, _mm512_maskz_loadu_ps(mc, s + i))),
            neg_even));
        const __m512 v = _mm512_maskz_loadu_ps(mx, x + 2 * i);
        const __m512 sw = _mm512_permute_ps(v, 0xB1);
        _mm512_mask_storeu_ps(o + 2 * i, mx, _mm512_add_ps(_mm512_mul_ps(v, vc), _mm512_mul_ps(sw, vs)));
    }
}
