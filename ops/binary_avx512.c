/* AVX-512F variants of the elementwise micro-kernels (ops/binary.inc). */
#include "ukernels.h"

#include <immintrin.h>

enum { ADD, MUL, SUB, DIV };

static inline __m512 apply(int op, __m512 x, __m512 y) {
    return op == ADD   ? _mm512_add_ps(x, y)
           : op == MUL ? _mm512_mul_ps(x, y)
           : op == SUB ? _mm512_sub_ps(x, y)
                       : _mm512_div_ps(x, y);
}

/* out = a (op) b, b read densely or, if b_const, as one value; rev (with
 * b_const): out = b[0] (op) a. */
static inline void vbinary(int op, bool b_const, bool rev, size_t n, const float *a,
                           const float *b, float *out) {
    const __m512 bc = b_const ? _mm512_set1_ps(*b) : _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 a0 = _mm512_loadu_ps(a + i), a1 = _mm512_loadu_ps(a + i + 16);
        const __m512 b0 = b_const ? bc : _mm512_loadu_ps(b + i);
        const __m512 b1 = b_const ? bc : _mm512_loadu_ps(b + i + 16);
        const __m512 y0 = rev ? apply(op, b0, a0) : apply(op, a0, b0);
        const __m512 y1 = rev ? apply(op, b1, a1) : apply(op, a1, b1);
        _mm512_storeu_ps(out + i, y0);
        _mm512_storeu_ps(out + i + 16, y1);
    }
    for (; i < n; i += 16) {
        const __mmask16 k = (__mmask16)((1u << (n - i < 16 ? n - i : 16)) - 1u);
        const __m512 av = _mm512_maskz_loadu_ps(k, a + i);
        const __m512 bv = b_const ? bc : _mm512_maskz_loadu_ps(k, b + i);
        _mm512_mask_storeu_ps(out + i, k, rev ? apply(op, bv, av) : apply(op, av, bv));
    }
}

void gml_f32_vadd_ukernel__avx512_u32(size_t n, const float *a, const float *b, float *out) {
    vbinary(ADD, false, false, n, a, b, out);
}
void gml_f32_vaddc_ukernel__avx512_u32(size_t n, const float *a, const float *b, float *out) {
    vbinary(ADD, true, false, n, a, b, out);
}
void gml_f32_vmul_ukernel__avx512_u32(size_t n, const float *a, const float *b, float *out) {
    vbinary(MUL, false, false, n, a, b, out);
}
void gml_f32_vmulc_ukernel__avx512_u32(size_t n, const float *a, const float *b, float *out) {
    vbinary(MUL, true, false, n, a, b, out);
}
void gml_f32_vsub_ukernel__avx512_u32(size_t n, const float *a, const float *b, float *out) {
    vbinary(SUB, false, false, n, a, b, out);
}
void gml_f32_vsubc_ukernel__avx512_u32(size_t n, const float *a, const float *b, float *out) {
    vbinary(SUB, true, false, n, a, b, out);
}
void gml_f32_vrsubc_ukernel__avx512_u32(size_t n, const float *a, const float *b, float *out) {
    vbinary(SUB, true, true, n, a, b, out);
}
void gml_f32_vdiv_ukernel__avx512_u32(size_t n, const float *a, const float *b, float *out) {
    vbinary(DIV, false, false, n, a, b, out);
}
void gml_f32_vdivc_ukernel__avx512_u32(size_t n, const float *a, const float *b, float *out) {
    vbinary(DIV, true, false, n, a, b, out);
}
void gml_f32_vrdivc_ukernel__avx512_u32(size_t n, const float *a, const float *b, float *out) {
    vbinary(DIV, true, true, n, a, b, out);
}
