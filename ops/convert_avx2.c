/* AVX2 (with F16C) variants of the conversion micro-kernels
 * (ops/convert.inc); tails by the scalar conversions, which give the same
 * bits. Compiled with -mavx2 -mfma -mf16c. */
#include "ukernels.h"

#include <immintrin.h>

void gml_f32_f16_cvt_ukernel__avx2_u8(size_t n, const void *x, void *y) {
    const float *s = x;
    uint16_t *d = y;
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) d[i] = gml_fp32_to_fp16(s[i]);
}

void gml_f16_f32_cvt_ukernel__avx2_u8(size_t n, const void *x, void *y) {
    const uint16_t *s = x;
    float *d = y;
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
    for (; i < n; i++) d[i] = gml_fp16_to_fp32(s[i]);
}

/* bf16 of 8 floats' bits, as gml_fp32_to_bf16: u + 0x7fff + lsb, >> 16;
 * NaN: u >> 16 | 0x40. In the low 16 bits of each 32-bit lane. */
static inline __m256i bf16_round(__m256i u) {
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(r, q, nan);
}

void gml_f32_bf16_cvt_ukernel__avx2_u8(size_t n, const void *x, void *y) {
    const float *s = x;
    uint16_t *d = y;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i r = bf16_round(_mm256_loadu_si256((const __m256i *)(s + i)));
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
        _mm_storeu_si128((__m128i *)(d + i), _mm256_castsi256_si128(p));
    }
    for (; i < n; i++) d[i] = gml_fp32_to_bf16(s[i]);
}

void gml_bf16_f32_cvt_ukernel__avx2_u8(size_t n, const void *x, void *y) {
    const uint16_t *s = x;
    float *d = y;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + i)));
        _mm256_storeu_si256((__m256i *)(d + i), _mm256_slli_epi32(w, 16));
    }
    for (; i < n; i++) d[i] = gml_bf16_to_fp32(s[i]);
}

/* roundf (ties away from zero) of floats under 2^23 in magnitude. */
static inline __m256 round_away(__m256 v) {
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 sign = _mm256_and_ps(v, _mm256_set1_ps(-0.0f));
    const __m256 frac = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(v, t));
    const __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    return _mm256_add_ps(t, _mm256_and_ps(up, _mm256_or_ps(sign, _mm256_set1_ps(1.0f))));
}

void gml_f32_q8_0_cvt_ukernel__avx2_u32(size_t n, const void *x, void *y) {
    const float *s = x;
    gml_block_q8_0 *b = y;
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i exp_mask = _mm256_set1_epi32(0x7f800000);
    for (size_t k = 0; k < n / GML_QK8_0; k++, s += GML_QK8_0) {
        __m256 v[4], amax = _mm256_setzero_ps();
        __m256i bad = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            v[j] = _mm256_loadu_ps(s + 8 * j);
            amax = _mm256_max_ps(amax, _mm256_and_ps(v[j], abs_mask));
            bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(
                                                               _mm256_castps_si256(v[j]), exp_mask),
                                                           exp_mask));
        }
        if (!_mm256_testz_si256(bad, bad)) { /* NaN or inf: as the scalar rule */
            gml_quantize_row_q8_0(s, b + k, GML_QK8_0);
            continue;
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float d = _mm_cvtss_f32(m4) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b[k].d = gml_fp32_to_fp16(d);
        __m256i q[4];
        for (int j = 0; j < 4; j++)
            q[j] = _mm256_cvttps_epi32(round_away(_mm256_mul_ps(v[j], _mm256_set1_ps(id))));
        const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]),
                                             _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256((__m256i *)b[k].qs,
                            _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
}

void gml_q8_0_f32_cvt_ukernel__avx2_u32(size_t n, const void *x, void *y) {
    const gml_block_q8_0 *b = x;
    float *d = y;
    for (size_t k = 0; k < n / GML_QK8_0; k++, d += GML_QK8_0) {
        const __m256 s = _mm256_set1_ps(gml_fp16_to_fp32(b[k].d));
        for (int j = 0; j < 4; j++) {
            const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b[k].qs + 8 * j)));
            _mm256_storeu_ps(d + 8 * j, _mm256_mul_ps(s, _mm256_cvtepi32_ps(q)));
        }
    }
}
