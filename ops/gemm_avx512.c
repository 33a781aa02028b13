/* AVX-512F f32 GEMM micro-kernel (see gemm.h): 14 rows x 32 columns of C in
 * 28 zmm accumulators; per k, 2 vector loads of B and 14 broadcasts of A
 * feed 28 FMAs. Compiled with -mavx512f only. */
#include "gemm.h"

#include <immintrin.h>

/* Mask of the first n lanes of 16 (n may be <= 0 or >= 16). */
static inline __mmask16 lanes(int n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

#define MR 14

void gml_f32_gemm_ukernel__avx512_14x32(size_t kc, const float *a, size_t lda, const float *b,
                                        size_t ldb, float *c, size_t ldc, int m, int n, bool acc) {
    const __mmask16 m0 = lanes(n), m1 = lanes(n - 16);
    __m512 c0[MR], c1[MR];
#pragma GCC unroll 14
    for (int i = 0; i < MR; i++) {
        c0[i] = c1[i] = _mm512_setzero_ps();
        if (acc && i < m) {
            c0[i] = _mm512_maskz_loadu_ps(m0, c + i * ldc);
            c1[i] = _mm512_maskz_loadu_ps(m1, c + i * ldc + 16);
        }
    }
    if (lda == 0) { /* packed A: a[k * MR + i] */
        for (size_t k = 0; k < kc; k++, a += MR, b += ldb) {
            const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 14
            for (int i = 0; i < MR; i++) {
                const __m512 ai = _mm512_set1_ps(a[i]);
                c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);
                c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);
            }
        }
    } else { /* A in place: a[i * lda + k]; rows past m reread row 0 */
        const float *row[MR];
#pragma GCC unroll 14
        for (int i = 0; i < MR; i++) row[i] = a + (i < m ? (size_t)i : 0) * lda;
        for (size_t k = 0; k < kc; k++, b += ldb) {
            const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 14
            for (int i = 0; i < MR; i++) {
                const __m512 ai = _mm512_set1_ps(row[i][k]);
                c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);
                c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);
            }
        }
    }
#pragma GCC unroll 14
    for (int i = 0; i < MR; i++) {
        if (i < m) {
            _mm512_mask_storeu_ps(c + i * ldc, m0, c0[i]);
            _mm512_mask_storeu_ps(c + i * ldc + 16, m1, c1[i]);
        }
    }
}
