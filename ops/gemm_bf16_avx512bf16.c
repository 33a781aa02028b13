/* The AVX512-BF16 micro-kernel of the pairs-order bf16 GEMM (gemm_bf16.h,
 * ops/gemm_bf16.inc): VDPBF16PS on a 14 x 32 register tile. Only one ISA
 * has the instruction, so it is written here with its intrinsics rather
 * than over the SIMD layer; it is compiled in the AVX-512 objects with a
 * target attribute adding AVX512_BF16 (the other AVX-512 kernels must run
 * on CPUs without it) and runs only where gml_cpu_has_feature says the
 * CPU has it (gml_bf16_gemm_pick). */
#include "gemm_bf16.h"

#include <immintrin.h>
#include <stdint.h>

#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

/* B_AHEAD: how far ahead of its reads the tile fetches B, in pairs (2 KiB:
 * 16 steps). Few rows stream B from memory at 128 bytes per 14 (or
 * fewer) cycles, faster than the hardware prefetchers alone brought it
 * (M = 20, N = K = 4096, one thread on a loaded machine: 190 GFLOP/s
 * without, 300 with); elsewhere B's micro-panel is in L1 already and the
 * fetches cost a load slot each. */
enum { MR = 14, NR = 32, B_AHEAD = 512 };

/* The tile's first ROWS rows (a constant: m <= ROWS <= MR) over kp
 * pairs, A's pair p of row i at a[i * ars + p * aps]. */
static inline __attribute__((always_inline)) BF16_TARGET void tile(size_t kp, const uint32_t *a, size_t ars,
                                                                  size_t aps, const uint32_t *b, float *c,
                                                                  size_t ldc, int m, int n, bool acc,
                                                                  const int ROWS) {
    const __mmask16 k0 = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
    const __mmask16 k1 = n >= 32 ? (__mmask16)0xffff : n > 16 ? (__mmask16)((1u << (n - 16)) - 1) : 0;
    __m512 c0[MR], c1[MR];
#pragma GCC unroll 14
    for (int i = 0; i < ROWS; i++) {
        c0[i] = _mm512_setzero_ps();
        c1[i] = _mm512_setzero_ps();
        if (acc && i < m) {
            c0[i] = _mm512_maskz_loadu_ps(k0, c + (size_t)i * ldc);
            c1[i] = _mm512_maskz_loadu_ps(k1, c + (size_t)i * ldc + 16);
        }
    }
    /* one pair of k: 2 vectors of B, 14 broadcasts of A, 28 VDPBF16PS;
     * B's two lines B_AHEAD pairs on fetched */
#define BF16_STEP()                                                                  \
    do {                                                                             \
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b);                         \
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + 16);                    \
        _Pragma("GCC unroll 14") for (int i = 0; i < ROWS; i++) {                    \
            const __m512bh ai = (__m512bh)_mm512_set1_epi32((int)a[(size_t)i * ars]); \
            c0[i] = _mm512_dpbf16_ps(c0[i], ai, b0);                                 \
            c1[i] = _mm512_dpbf16_ps(c1[i], ai, b1);                                 \
        }                                                                            \
        _mm_prefetch((const char *)(b + B_AHEAD), _MM_HINT_T0);                      \
        _mm_prefetch((const char *)(b + B_AHEAD + 16), _MM_HINT_T0);                 \
        a += aps, b += NR;                                                           \
    } while (0)
    /* the first MR pairs also fetch the C tile MR rows below (the next
     * call's, in gemm_bf16.c's loops) a row per pair, so that its loads hit
     * L1 (prefetches never fault: past C's end they do nothing) */
    size_t p = 0;
    for (; p < kp && p < MR; p++) {
        const uintptr_t next = (uintptr_t)c + (MR + p) * ldc * sizeof(float);
        __builtin_prefetch((const void *)next, 1, 3);
        __builtin_prefetch((const void *)(next + 64), 1, 3);
        BF16_STEP();
    }
    for (; p < kp; p++) BF16_STEP();
#undef BF16_STEP
#pragma GCC unroll 14
    for (int i = 0; i < ROWS; i++)
        if (i < m) {
            _mm512_mask_storeu_ps(c + (size_t)i * ldc, k0, c0[i]);
            _mm512_mask_storeu_ps(c + (size_t)i * ldc + 16, k1, c1[i]);
        }
}

/* Packed A (lda == 0), or MR rows in place (lda > 0, m == MR): each a
 * copy of the tile with its steps; a packed A of m < MR rows computes
 * only those rows (few rows: decoding's 1 to 4, a 20-row prompt's 14 + 6). */
BF16_TARGET void gml_bf16_gemm_ukernel__avx512bf16_14x32(size_t kp, const uint32_t *a, size_t lda,
                                                         const uint32_t *b, float *c, size_t ldc,
                                                         int m, int n, bool acc) {
    if (lda > 0) {
        tile(kp, a, lda, 1, b, c, ldc, MR, n, acc, MR);
        return;
    }
    switch (m) {
#define BF16_ROWS(r) \
    case r: tile(kp, a, 1, MR, b, c, ldc, m, n, acc, r); break;
        BF16_ROWS(1) BF16_ROWS(2) BF16_ROWS(3) BF16_ROWS(4) BF16_ROWS(5) BF16_ROWS(6) BF16_ROWS(7)
        BF16_ROWS(8) BF16_ROWS(9) BF16_ROWS(10) BF16_ROWS(11) BF16_ROWS(12) BF16_ROWS(13)
#undef BF16_ROWS
    default: tile(kp, a, 1, MR, b, c, ldc, m, n, acc, MR);
    }
}
