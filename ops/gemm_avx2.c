/* AVX2+FMA f32 GEMM micro-kernel (see gemm.h): 6 rows x 16 columns of C in
 * 12 ymm accumulators; per k, 2 vector loads of B and 6 broadcasts of A
 * feed 12 FMAs (15 of the 16 ymm registers). Compiled with -mavx2 -mfma.
 * Operands read in place are prefetched ahead as in gemm_avx512.c. */
#include "gemm.h"

#include <immintrin.h>

/* Lane mask for the first n of 8 lanes (n may be <= 0 or >= 8). */
static inline __m256i lanes(int n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

#define MR 6
#define NR 16
#define PF_B_ROWS 24
#define PF_A_FLOATS 128

/* A hint for the line `floats` floats past p; the address may lie past the
 * operand (prefetches never fault), hence integer arithmetic. */
static inline void prefetch(const float *p, size_t floats) {
    _mm_prefetch((const char *)((uintptr_t)p + floats * sizeof(float)), _MM_HINT_T0);
}

/* One k step: c[i] += a_i * b[k, 0:16] for the 6 rows, a_i at A_I. */
#define STEP(A_I)                                                           \
    do {                                                                    \
        const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);  \
        _Pragma("GCC unroll 6") for (int i = 0; i < MR; i++) {              \
            const __m256 ai = _mm256_broadcast_ss(A_I);                     \
            c0[i] = _mm256_fmadd_ps(ai, b0, c0[i]);                         \
            c1[i] = _mm256_fmadd_ps(ai, b1, c1[i]);                         \
        }                                                                   \
    } while (0)

void gml_f32_gemm_ukernel__avx2_6x16(size_t kc, const float *a, size_t lda, const float *b,
                                     size_t ldb, float *c, size_t ldc, int m, int n, bool acc) {
    const __m256i m0 = lanes(n), m1 = lanes(n - 8);
    __m256 c0[MR], c1[MR];
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
        c0[i] = c1[i] = _mm256_setzero_ps();
        if (acc && i < m) {
            c0[i] = _mm256_maskload_ps(c + i * ldc, m0);
            c1[i] = _mm256_maskload_ps(c + i * ldc + 8, m1);
        }
    }
    if (lda == 0 && ldb == NR) { /* both packed */
        for (size_t k = 0; k < kc; k++, a += MR, b += NR) STEP(a + i);
    } else if (lda == 0) { /* B in place */
        for (size_t k = 0; k < kc; k++, a += MR, b += ldb) {
            prefetch(b, PF_B_ROWS * ldb);
            STEP(a + i);
        }
    } else { /* A in place: a[i * lda + k]; rows past m reread row 0 */
        const float *row[MR];
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) row[i] = a + (i < m ? (size_t)i : 0) * lda;
        for (size_t k = 0; k < kc; k++, b += ldb) {
            if (k % 16 == 0) {
#pragma GCC unroll 6
                for (int i = 0; i < MR; i++) prefetch(row[i], k + PF_A_FLOATS);
            }
            STEP(row[i] + k);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
        if (i < m) {
            _mm256_maskstore_ps(c + i * ldc, m0, c0[i]);
            _mm256_maskstore_ps(c + i * ldc + 8, m1, c1[i]);
        }
    }
}
