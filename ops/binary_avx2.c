/* AVX2 variants of the elementwise micro-kernels (ops/binary.inc). */
#include "ukernels.h"

#include <immintrin.h>

enum { ADD, MUL, SUB, DIV };

static inline __m256 apply(int op, __m256 x, __m256 y) {
    return op == ADD   ? _mm256_add_ps(x, y)
           : op == MUL ? _mm256_mul_ps(x, y)
           : op == SUB ? _mm256_sub_ps(x, y)
                       : _mm256_div_ps(x, y);
}

/* out = a (op) b, b read densely or, if b_const, as one value; rev (with
 * b_const): out = b[0] (op) a. */
static inline void vbinary(int op, bool b_const, bool rev, size_t n, const float *a,
                           const float *b, float *out) {
    const __m256 bc = b_const ? _mm256_set1_ps(*b) : _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 a0 = _mm256_loadu_ps(a + i), a1 = _mm256_loadu_ps(a + i + 8);
        const __m256 b0 = b_const ? bc : _mm256_loadu_ps(b + i);
        const __m256 b1 = b_const ? bc : _mm256_loadu_ps(b + i + 8);
        const __m256 y0 = rev ? apply(op, b0, a0) : apply(op, a0, b0);
        const __m256 y1 = rev ? apply(op, b1, a1) : apply(op, a1, b1);
        _mm256_storeu_ps(out + i, y0);
        _mm256_storeu_ps(out + i + 8, y1);
    }
    for (; i < n; i += 8) {
        const __m256i k = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i < 8 ? n - i : 8)),
                                             _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const __m256 av = _mm256_maskload_ps(a + i, k);
        const __m256 bv = b_const ? bc : _mm256_maskload_ps(b + i, k);
        _mm256_maskstore_ps(out + i, k, rev ? apply(op, bv, av) : apply(op, av, bv));
    }
}

void gml_f32_vadd_ukernel__avx2_u16(size_t n, const float *a, const float *b, float *out) {
    vbinary(ADD, false, false, n, a, b, out);
}
void gml_f32_vaddc_ukernel__avx2_u16(size_t n, const float *a, const float *b, float *out) {
    vbinary(ADD, true, false, n, a, b, out);
}
void gml_f32_vmul_ukernel__avx2_u16(size_t n, const float *a, const float *b, float *out) {
    vbinary(MUL, false, false, n, a, b, out);
}
void gml_f32_vmulc_ukernel__avx2_u16(size_t n, const float *a, const float *b, float *out) {
    vbinary(MUL, true, false, n, a, b, out);
}
void gml_f32_vsub_ukernel__avx2_u16(size_t n, const float *a, const float *b, float *out) {
    vbinary(SUB, false, false, n, a, b, out);
}
void gml_f32_vsubc_ukernel__avx2_u16(size_t n, const float *a, const float *b, float *out) {
    vbinary(SUB, true, false, n, a, b, out);
}
void gml_f32_vrsubc_ukernel__avx2_u16(size_t n, const float *a, const float *b, float *out) {
    vbinary(SUB, true, true, n, a, b, out);
}
void gml_f32_vdiv_ukernel__avx2_u16(size_t n, const float *a, const float *b, float *out) {
    vbinary(DIV, false, false, n, a, b, out);
}
void gml_f32_vdivc_ukernel__avx2_u16(size_t n, const float *a, const float *b, float *out) {
    vbinary(DIV, true, false, n, a, b, out);
}
void gml_f32_vrdivc_ukernel__avx2_u16(size_t n, const float *a, const float *b, float *out) {
    vbinary(DIV, true, true, n, a, b, out);
}
