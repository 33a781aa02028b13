/* AVX2 variant of the norm micro-kernel (ops/norm.inc). */
#include "norm.h"

#include <immintrin.h>

static inline __m256 apply(__m256 x, __m256 vc, __m256 vs, bool has_w, __m256 w, bool has_b,
                           __m256 b) {
    __m256 y = _mm256_mul_ps(_mm256_sub_ps(x, vc), vs);
    if (has_w) y = _mm256_mul_ps(y, w);
    if (has_b) y = _mm256_add_ps(y, b);
    return y;
}

static inline void vnorm(size_t n, const float *x, float c, float s, const float *w,
                         const float *b, float *out, bool has_w, bool has_b) {
    const __m256 vc = _mm256_set1_ps(c), vs = _mm256_set1_ps(s), z = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 y0 = apply(_mm256_loadu_ps(x + i), vc, vs, has_w, has_w ? _mm256_loadu_ps(w + i) : z,
                                has_b, has_b ? _mm256_loadu_ps(b + i) : z);
        const __m256 y1 = apply(_mm256_loadu_ps(x + i + 8), vc, vs, has_w,
                                has_w ? _mm256_loadu_ps(w + i + 8) : z, has_b,
                                has_b ? _mm256_loadu_ps(b + i + 8) : z);
        _mm256_storeu_ps(out + i, y0);
        _mm256_storeu_ps(out + i + 8, y1);
    }
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (; i < n; i += 8) {
        const __m256i k = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)GML_MIN(n - i, 8)), idx);
        const __m256 y = apply(_mm256_maskload_ps(x + i, k), vc, vs, has_w,
                               has_w ? _mm256_maskload_ps(w + i, k) : z, has_b,
                               has_b ? _mm256_maskload_ps(b + i, k) : z);
        _mm256_maskstore_ps(out + i, k, y);
    }
}

void gml_f32_vnorm_ukernel__avx2_u16(size_t n, const float *x, float c, float s, const float *w,
                                     const float *b, float *out) {
    if (w && b) vnorm(n, x, c, s, w, b, out, true, true);
    else if (w) vnorm(n, x, c, s, w, b, out, true, false);
    else if (b) vnorm(n, x, c, s, w, b, out, false, true);
    else vnorm(n, x, c, s, w, b, out, false, false);
}
