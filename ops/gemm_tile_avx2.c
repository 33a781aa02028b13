/* AVX2+FMA f32 GEMM micro-kernel (see gemm.h): 6 rows x 16 columns of C in
 * 12 ymm accumulators; per k, 2 vector loads of B and 6 broadcasts of A
 * feed 12 FMAs (15 of the 16 ymm registers). Compiled with -mavx2 -mfma.
 * Operands read in place are prefetched ahead as in gemm_tile_avx512.c. */
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

/* The C tile MR rows below (the next call's), one row per k step over the
 * first MR steps, as in gemm_tile_avx512.c. */
static inline void prefetch_c_row(const float *c, size_t ldc, size_t i) {
    _mm_prefetch((const char *)((uintptr_t)c + (MR + i) * ldc * sizeof(float)), _MM_HINT_T0);
}

void gml_f32_gemm_ukernel__avx2_6x16(size_t kc, const float *a, size_t lda, const float *b,
                                     size_t ldb, float *c, size_t ldc, int m, int n, bool acc) {
    /* Full tiles load and store C with plain moves: vmaskmovps stores cost
     * ~16 cycles each on Zen 3 (the issue), 12 of them per call. */
    const bool full = n == NR;
    const __m256i m0 = lanes(n), m1 = lanes(n - 8);
    __m256 c0[MR], c1[MR];
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
        c0[i] = c1[i] = _mm256_setzero_ps();
        if (acc && i < m) {
            c0[i] = full ? _mm256_loadu_ps(c + i * ldc) : _mm256_maskload_ps(c + i * ldc, m0);
            c1[i] = full ? _mm256_loadu_ps(c + i * ldc + 8)
                         : _mm256_maskload_ps(c + i * ldc + 8, m1);
        }
    }
    if (lda == 0 && ldb == NR) { /* both packed */
        size_t k = 0;
        for (; k < kc && k < MR; k++, a += MR, b += NR) {
            prefetch_c_row(c, ldc, k);
            STEP(a + i);
        }
        for (; k < kc; k++, a += MR, b += NR) STEP(a + i);
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
            if (full) {
                _mm256_storeu_ps(c + i * ldc, c0[i]);
                _mm256_storeu_ps(c + i * ldc + 8, c1[i]);
            } else {
                _mm256_maskstore_ps(c + i * ldc, m0, c0[i]);
                _mm256_maskstore_ps(c + i * ldc + 8, m1, c1[i]);
            }
        }
    }
}

/* ---- 4 x 24: three vectors of C per row ------------------------------------
 * The same product on a 4 x 24 tile (12 accumulators, 3 B vectors, one
 * broadcast: all 16 ymm), for the few-rows C^T = W A^T loop (gemm.c), whose
 * tile width covers A's M rows: M = 20 pads to 24 here instead of 32 with
 * the 6x16 tile, 83% of the lanes busy instead of 62%. */
#define MR4 4
#define NR24 24

#define STEP24(A_I)                                                          \
    do {                                                                     \
        const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);   \
        const __m256 b2 = _mm256_loadu_ps(b + 16);                           \
        _Pragma("GCC unroll 4") for (int i = 0; i < MR4; i++) {              \
            const __m256 ai = _mm256_broadcast_ss(A_I);                      \
            c0[i] = _mm256_fmadd_ps(ai, b0, c0[i]);                          \
            c1[i] = _mm256_fmadd_ps(ai, b1, c1[i]);                          \
            c2[i] = _mm256_fmadd_ps(ai, b2, c2[i]);                          \
        }                                                                    \
    } while (0)

void gml_f32_gemm_ukernel__avx2_4x24(size_t kc, const float *a, size_t lda, const float *b,
                                     size_t ldb, float *c, size_t ldc, int m, int n, bool acc) {
    const bool full = n == NR24;
    const __m256i m0 = lanes(n), m1 = lanes(n - 8), m2 = lanes(n - 16);
    __m256 c0[MR4], c1[MR4], c2[MR4];
#pragma GCC unroll 4
    for (int i = 0; i < MR4; i++) {
        c0[i] = c1[i] = c2[i] = _mm256_setzero_ps();
        if (acc && i < m) {
            const float *ci = c + i * ldc;
            c0[i] = full ? _mm256_loadu_ps(ci) : _mm256_maskload_ps(ci, m0);
            c1[i] = full ? _mm256_loadu_ps(ci + 8) : _mm256_maskload_ps(ci + 8, m1);
            c2[i] = full ? _mm256_loadu_ps(ci + 16) : _mm256_maskload_ps(ci + 16, m2);
        }
    }
    if (lda == 0) { /* A packed; B packed (ldb == NR24) or in place */
        for (size_t k = 0; k < kc; k++, a += MR4, b += ldb) {
            if (ldb != NR24) prefetch(b, PF_B_ROWS * ldb);
            STEP24(a + i);
        }
    } else { /* A in place: a[i * lda + k]; rows past m reread row 0 */
        const float *row[MR4];
#pragma GCC unroll 4
        for (int i = 0; i < MR4; i++) row[i] = a + (i < m ? (size_t)i : 0) * lda;
        for (size_t k = 0; k < kc; k++, b += ldb) {
            if (k % 16 == 0) {
#pragma GCC unroll 4
                for (int i = 0; i < MR4; i++) prefetch(row[i], k + PF_A_FLOATS);
            }
            STEP24(row[i] + k);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR4; i++) {
        if (i < m) {
            float *ci = c + i * ldc;
            if (full) {
                _mm256_storeu_ps(ci, c0[i]);
                _mm256_storeu_ps(ci + 8, c1[i]);
                _mm256_storeu_ps(ci + 16, c2[i]);
            } else {
                _mm256_maskstore_ps(ci, m0, c0[i]);
                _mm256_maskstore_ps(ci + 8, m1, c1[i]);
                _mm256_maskstore_ps(ci + 16, m2, c2[i]);
            }
        }
    }
}
