/* AVX-512F variants of the conversion micro-kernels (ops/convert.inc);
 * tails by the scalar conversions, which give the same bits. bf16 is
 * rounded with integer operations (ops/convert.inc says why not
 * vcvtneps2bf16). Compiled with -mavx512f (and -mavx2 -mfma -mf16c). */
#include "ukernels.h"

#include <immintrin.h>

void gml_f32_f16_cvt_ukernel__avx512_u16(size_t n, const void *x, void *y) {
    const float *s = x;
    uint16_t *d = y;
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(d + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(s + i),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) d[i] = gml_fp32_to_fp16(s[i]);
}

void gml_f16_f32_cvt_ukernel__avx512_u16(size_t n, const void *x, void *y) {
    const uint16_t *s = x;
    float *d = y;
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(d + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + i))));
    for (; i < n; i++) d[i] = gml_fp16_to_fp32(s[i]);
}

void gml_f32_bf16_cvt_ukernel__avx512_u16(size_t n, const void *x, void *y) {
    const float *s = x;
    uint16_t *d = y;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i u = _mm512_loadu_si512(s + i);
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        __m512i r = _mm512_srli_epi32(
            _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
        const __mmask16 nan = _mm512_cmpgt_epi32_mask(
            _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
        r = _mm512_mask_mov_epi32(
            r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
        _mm256_storeu_si256((__m256i *)(d + i), _mm512_cvtepi32_epi16(r));
    }
    for (; i < n; i++) d[i] = gml_fp32_to_bf16(s[i]);
}

void gml_bf16_f32_cvt_ukernel__avx512_u16(size_t n, const void *x, void *y) {
    const uint16_t *s = x;
    float *d = y;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s + i)));
        _mm512_storeu_si512(d + i, _mm512_slli_epi32(w, 16));
    }
    for (; i < n; i++) d[i] = gml_bf16_to_fp32(s[i]);
}

void gml_f32_q8_0_cvt_ukernel__avx512_u32(size_t n, const void *x, void *y) {
    const float *s = x;
    gml_block_q8_0 *b = y;
    const __m512i exp_mask = _mm512_set1_epi32(0x7f800000);
    const __m512 sign = _mm512_set1_ps(-0.0f), one = _mm512_set1_ps(1.0f);
    for (size_t k = 0; k < n / GML_QK8_0; k++, s += GML_QK8_0) {
        const __m512 v0 = _mm512_loadu_ps(s), v1 = _mm512_loadu_ps(s + 16);
        const __mmask16 bad =
            _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(v0), exp_mask), exp_mask) |
            _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(v1), exp_mask), exp_mask);
        if (bad) { /* NaN or inf: as the scalar rule */
            gml_quantize_row_q8_0(s, b + k, GML_QK8_0);
            continue;
        }
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b[k].d = gml_fp32_to_fp16(d);
        const __m512 vs[2] = {v0, v1};
        for (int j = 0; j < 2; j++) {
            const __m512 v = _mm512_mul_ps(vs[j], _mm512_set1_ps(id));
            __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)),
                                                    _mm512_set1_ps(0.5f), _CMP_GE_OQ);
            const __m512 step = _mm512_castsi512_ps(_mm512_or_si512(
                _mm512_and_si512(_mm512_castps_si512(v), _mm512_castps_si512(sign)),
                _mm512_castps_si512(one)));
            t = _mm512_mask_add_ps(t, up, t, step);
            _mm_storeu_si128((__m128i *)(b[k].qs + 16 * j),
                             _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(t)));
        }
    }
}

void gml_q8_0_f32_cvt_ukernel__avx512_u32(size_t n, const void *x, void *y) {
    const gml_block_q8_0 *b = x;
    float *d = y;
    for (size_t k = 0; k < n / GML_QK8_0; k++, d += GML_QK8_0) {
        const __m512 s = _mm512_set1_ps(gml_fp16_to_fp32(b[k].d));
        for (int j = 0; j < 2; j++) {
            const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b[k].qs + 16 * j)));
            _mm512_storeu_ps(d + 16 * j, _mm512_mul_ps(s, _mm512_cvtepi32_ps(q)));
        }
    }
}
