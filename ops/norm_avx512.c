/* AVX-512F variant of the norm micro-kernel (ops/norm.inc). */
#include "norm.h"

#include <immintrin.h>

static inline __m512 apply(__m512 x, __m512 vc, __m512 vs, bool has_w, __m512 w, bool has_b,
                           __m512 b) {
    __m512 y = _mm512_mul_ps(_mm512_sub_ps(x, vc), vs);
    if (has_w) y = _mm512_mul_ps(y, w);
    if (has_b) y = _mm512_add_ps(y, b);
    return y;
}

static inline void vnorm(size_t n, const float *x, float c, float s, const float *w,
                         const float *b, float *out, bool has_w, bool has_b) {
    const __m512 vc = _mm512_set1_ps(c), vs = _mm512_set1_ps(s), z = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 y0 = apply(_mm512_loadu_ps(x + i), vc, vs, has_w, has_w ? _mm512_loadu_ps(w + i) : z,
                                has_b, has_b ? _mm512_loadu_ps(b + i) : z);
        const __m512 y1 = apply(_mm512_loadu_ps(x + i + 16), vc, vs, has_w,
                                has_w ? _mm512_loadu_ps(w + i + 16) : z, has_b,
                                has_b ? _mm512_loadu_ps(b + i + 16) : z);
        _mm512_storeu_ps(out + i, y0);
        _mm512_storeu_ps(out + i + 16, y1);
    }
    for (; i < n; i += 16) {
        const __mmask16 k = (__mmask16)((1u << GML_MIN(n - i, 16)) - 1u);
        const __m512 y = apply(_mm512_maskz_loadu_ps(k, x + i), vc, vs, has_w,
                               has_w ? _mm512_maskz_loadu_ps(k, w + i) : z, has_b,
                               has_b ? _mm512_maskz_loadu_ps(k, b + i) : z);
        _mm512_mask_storeu_ps(out + i, k, y);
    }
}

void gml_f32_vnorm_ukernel__avx512_u32(size_t n, const float *x, float c, float s, const float *w,
                                       const float *b, float *out) {
    if (w && b) vnorm(n, x, c, s, w, b, out, true, true);
    else if (w) vnorm(n, x, c, s, w, b, out, true, false);
    else if (b) vnorm(n, x, c, s, w, b, out, false, true);
    else vnorm(n, x, c, s, w, b, out, false, false);
}
