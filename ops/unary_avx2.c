/* AVX2+FMA variants of the unary micro-kernels (ops/unary.inc); bitwise
 * equal to the AVX-512 ones. */
#include "ukernels.h"
#include "vunary_x86.h"

#include <immintrin.h>

#define VUNARY_AVX2(name, f)                                                            \
    void gml_f32_##name##_ukernel__avx2_u8(size_t n, const float *x, float *y) {        \
        size_t i = 0;                                                                   \
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(x + i)));  \
        if (i < n) {                                                                    \
            const __m256i k = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)),       \
                                                 _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); \
            _mm256_maskstore_ps(y + i, k, f(_mm256_maskload_ps(x + i, k)));             \
        }                                                                               \
    }

VUNARY_AVX2(vtanh, vtanh8)
VUNARY_AVX2(vsigmoid, vsigmoid8)
VUNARY_AVX2(vsilu, vsilu8)
VUNARY_AVX2(vgelu_tanh, vgelu_tanh8)
VUNARY_AVX2(vgelu, vgelu8)
