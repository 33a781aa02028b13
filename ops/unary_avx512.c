/* AVX-512F variants of the unary micro-kernels (ops/unary.inc); bitwise
 * equal to the AVX2 ones. */
#include "ukernels.h"
#include "vunary_x86.h"

#include <immintrin.h>

#define VUNARY_AVX512(name, f)                                                          \
    void gml_f32_##name##_ukernel__avx512_u16(size_t n, const float *x, float *y) {     \
        size_t i = 0;                                                                   \
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, f(_mm512_loadu_ps(x + i))); \
        if (i < n) {                                                                    \
            const __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);                      \
            _mm512_mask_storeu_ps(y + i, k, f(_mm512_maskz_loadu_ps(k, x + i)));        \
        }                                                                               \
    }

VUNARY_AVX512(vtanh, vtanh16)
VUNARY_AVX512(vsigmoid, vsigmoid16)
VUNARY_AVX512(vsilu, vsilu16)
VUNARY_AVX512(vgelu_tanh, vgelu_tanh16)
VUNARY_AVX512(vgelu, vgelu16)
