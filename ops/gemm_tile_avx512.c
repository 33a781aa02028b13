/* AVX-512F f32 GEMM micro-kernel (see gemm.h): 14 rows x 32 columns of C in
 * 28 zmm accumulators; per k, 2 vector loads of B and 14 broadcasts of A
 * feed 28 FMAs (2 zmm for B, 1 for the broadcast: all 32 registers busy).
 * Compiled with -mavx512f only.
 *
 * Operands read in place come from memory rather than from packed panels
 * in L1/L2, so they are prefetched ahead: B rows 24 k ahead (a row per k,
 * each on its own page when B is wide, which the hardware prefetchers do
 * not follow), A rows 128 floats ahead every 16 k. On M=20 x 4096 x 4096
 * this took one thread from 57 to 83 GFLOP/s (B in place) and from 90 to
 * 110 (A in place). A packed A micro-panel streams from L2 (the A block
 * lives there) at 56 bytes per k: a line is prefetched 32 k ahead every
 * k, past the first MR (+1.5-2.5% on 1024^3, one thread on the Xeon:
 * 145 -> 148 GFLOP/s, medians of 4 interleaved rounds; 16 or 64 k ahead
 * did as well, the AVX2 tiles gained nothing). */
#include "gemm.h"

#include <immintrin.h>

/* Mask of the first n lanes of 16 (n may be <= 0 or >= 16). */
static inline __mmask16 lanes(int n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

#define MR 14
#define NR 32
#define PF_B_ROWS 24
#define PF_A_FLOATS 128
#define PF_A_PACKED (32 * MR)

/* A hint for the line `floats` floats past p; the address may lie past the
 * operand (prefetches never fault), hence integer arithmetic. */
static inline void prefetch(const float *p, size_t floats) {
    _mm_prefetch((const char *)((uintptr_t)p + floats * sizeof(float)), _MM_HINT_T0);
}

/* One k step: c[i] += a_i * b[k, 0:32] for the 14 rows, a_i = A_I. */
#define STEP(A_I)                                                           \
    do {                                                                    \
        const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16); \
        _Pragma("GCC unroll 14") for (int i = 0; i < MR; i++) {             \
            const __m512 ai = _mm512_set1_ps(A_I);                          \
            c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);                         \
            c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);                         \
        }                                                                   \
    } while (0)

/* The C tile MR rows below this one (the next call's, in every loop of
 * gemm.c) is prefetched over the first MR k steps, one row per step, so its
 * load at the next call's start hits L1 without a burst of 28 misses at
 * once: issued together before the call (the old way) they filled the line
 * fill buffers and stalled on 2048^3 for ~8% of the time (perf). The
 * address may lie past C (prefetches never fault), hence the integers. */
static inline void prefetch_c_row(const float *c, size_t ldc, size_t i) {
    const uintptr_t p = (uintptr_t)c + (MR + i) * ldc * sizeof(float);
    _mm_prefetch((const char *)p, _MM_HINT_T0);
    _mm_prefetch((const char *)(p + 64), _MM_HINT_T0);
}

void gml_f32_gemm_ukernel__avx512_14x32(size_t kc, const float *a, size_t lda, const float *b,
                                        size_t ldb, float *c, size_t ldc, int m, int n, bool acc) {
    const bool full = n == NR;
    const __mmask16 m0 = lanes(n), m1 = lanes(n - 16);
    __m512 c0[MR], c1[MR];
#pragma GCC unroll 14
    for (int i = 0; i < MR; i++) {
        c0[i] = c1[i] = _mm512_setzero_ps();
        if (acc && i < m) { /* full tiles: plain loads */
            c0[i] = full ? _mm512_loadu_ps(c + i * ldc) : _mm512_maskz_loadu_ps(m0, c + i * ldc);
            c1[i] = full ? _mm512_loadu_ps(c + i * ldc + 16)
                         : _mm512_maskz_loadu_ps(m1, c + i * ldc + 16);
        }
    }
    if (lda == 0 && ldb == NR) { /* both packed */
        size_t k = 0;
        for (; k < kc && k < MR; k++, a += MR, b += NR) {
            prefetch_c_row(c, ldc, k);
            STEP(a[i]);
        }
        for (; k < kc; k++, a += MR, b += NR) {
            prefetch(a, PF_A_PACKED);
            STEP(a[i]);
        }
    } else if (lda == 0) { /* B in place */
        for (size_t k = 0; k < kc; k++, a += MR, b += ldb) {
            prefetch(b, PF_B_ROWS * ldb);
            prefetch(b, PF_B_ROWS * ldb + 16);
            STEP(a[i]);
        }
    } else { /* A in place: a[i * lda + k]; rows past m reread row 0 */
        const float *row[MR];
#pragma GCC unroll 14
        for (int i = 0; i < MR; i++) row[i] = a + (i < m ? (size_t)i : 0) * lda;
        for (size_t k = 0; k < kc; k++, b += ldb) {
            if (k % 16 == 0) {
#pragma GCC unroll 14
                for (int i = 0; i < MR; i++) prefetch(row[i], k + PF_A_FLOATS);
            }
            STEP(row[i][k]);
        }
    }
#pragma GCC unroll 14
    for (int i = 0; i < MR; i++) {
        if (i < m) {
            if (full) {
                _mm512_storeu_ps(c + i * ldc, c0[i]);
                _mm512_storeu_ps(c + i * ldc + 16, c1[i]);
            } else {
                _mm512_mask_storeu_ps(c + i * ldc, m0, c0[i]);
                _mm512_mask_storeu_ps(c + i * ldc + 16, m1, c1[i]);
            }
        }
    }
}
