/* AVX-512F variants of the elementwise micro-kernels (ops/binary.inc). */
#include "ukernels.h"

#include <immintrin.h>

enum { ADD, MUL };

static inline __m512 apply(int op, __m512 x, __m512 y) {
    return op == ADD ? _mm512_add_ps(x, y) : _mm512_mul_ps(x, y);
}

/* out = a (op) b, b read densely or, if b_const, as one value. */
static inline void vbinary(int op, bool b_const, size_t n, const float *a, const float *b,
                           float *out) {
    const __m512 bc = b_const ? _mm512_set1_ps(*b) : _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 b0 = b_const ? bc : _mm512_loadu_ps(b + i);
        const __m512 b1 = b_const ? bc : _mm512_loadu_ps(b + i + 16);
        const __m512 y0 = apply(op, _mm512_loadu_ps(a + i), b0);
        const __m512 y1 = apply(op, _mm512_loadu_ps(a + i + 16), b1);
        _mm512_storeu_ps(out + i, y0);
        _mm512_storeu_ps(out + i + 16, y1);
    }
    for (; i < n; i += 16) {
        const __mmask16 k = (__mmask16)((1u << (n - i < 16 ? n - i : 16)) - 1u);
        const __m512 bv = b_const ? bc : _mm512_maskz_loadu_ps(k, b + i);
        _mm512_mask_storeu_ps(out + i, k, apply(op, _mm512_maskz_loadu_ps(k, a + i), bv));
    }
}

void gml_f32_vadd_ukernel__avx512_u32(size_t n, const float *a, const float *b, float *out) {
    vbinary(ADD, false, n, a, b, out);
}
void gml_f32_vaddc_ukernel__avx512_u32(size_t n, const float *a, const float *b, float *out) {
    vbinary(ADD, true, n, a, b, out);
}
void gml_f32_vmul_ukernel__avx512_u32(size_t n, const float *a, const float *b, float *out) {
    vbinary(MUL, false, n, a, b, out);
}
void gml_f32_vmulc_ukernel__avx512_u32(size_t n, const float *a, const float *b, float *out) {
    vbinary(MUL, true, n, a, b, out);
}
