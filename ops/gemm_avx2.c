/* AVX2+FMA f32 few-rows kernel (gemm.h, "Few rows against W"); the register
 * tiles are ops/gemm_tile_avx2.c. Compiled with -mavx2 -mfma -mf16c. */
#include "gemm.h"

#include <immintrin.h>

/* Lane mask for the first n of 8 lanes (n may be <= 0 or >= 8). */
static inline __m256i lanes(int n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

/* ---- few rows against W: C^T = W A^T, 4 rows of W x 20 of A ---------------
 * gemm.h, "Few rows against W"; the AVX-512 kernel's scheme at 8 lanes.
 * Per k, the first 16 of A's rows are two vectors, each row of W meets them
 * with two fmas against a broadcast of w[i][k]; the last 4 rows of A
 * against 2 rows of W at a time fill one more vector (lane 2 t + r: A's
 * row 16 + t, W's row 2 p + r): 8 + 2 fmas per k for 4 x 20 outputs, every
 * lane busy, where the 4x24 tile spends 12 (M = 20 padded to 24). Each
 * block of 16 k of 2 rows is loaded, interleaved by one round of unpacks
 * (4 shuffles, on a port the fmas do not use) and stored on the stack,
 * where the broadcasts read it (64-bit ones for the pairs); the next block
 * is packed before the current one is consumed. 10 accumulators, 3 vectors
 * of A, one broadcast: 14 of the 16 ymm. */

#define RT2_MR 4
#define RT2_LD 24  /* floats of packed A^T per k: 16, then 4 rows x 2 */
#define RT2_PF 128 /* W's rows prefetched this many floats ahead */

/* Rows r0, r1 at k0..k0+15 into dst (32 floats): the pair of k0 + 8 h +
 * 4 l + q at dst[16 h + 8 (q / 2) + 4 l + 2 (q % 2)]. FULL: all 16 k exist,
 * else only those below k (masked loads, the rest zero). */
static inline void rt2_pack2(bool full, const float *r0, const float *r1, size_t k0, size_t k,
                             float *dst) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m256 x0, x1;
        if (full) {
            x0 = _mm256_loadu_ps(r0 + k0 + 8 * h);
            x1 = _mm256_loadu_ps(r1 + k0 + 8 * h);
        } else {
            const __m256i km = lanes((int)k - (int)(k0 + 8 * (size_t)h));
            x0 = _mm256_maskload_ps(r0 + k0 + 8 * h, km);
            x1 = _mm256_maskload_ps(r1 + k0 + 8 * h, km);
        }
        _mm256_store_ps(dst + 16 * h, _mm256_unpacklo_ps(x0, x1));
        _mm256_store_ps(dst + 16 * h + 8, _mm256_unpackhi_ps(x0, x1));
    }
}

/* The block of 16 k from k0 of the 4 rows into dst (2 x 32 floats); each
 * row's line RT2_PF floats ahead prefetched, past the row's end the next
 * call's (4 rows of W further; the address may lie past W). */
#define RT2_PACK(k0, dst)                                                                  \
    do {                                                                                   \
        const size_t ahead_ = (k0) + RT2_PF;                                               \
        const uintptr_t pf_ = ahead_ < k ? (uintptr_t)(r0 + ahead_)                        \
                                         : (uintptr_t)w + (RT2_MR * ldw + ahead_ - k) * 4; \
        _Pragma("GCC unroll 4") for (int r = 0; r < RT2_MR; r++)                           \
            _mm_prefetch((const char *)(pf_ + (size_t)r * ldw * 4), _MM_HINT_T0);          \
        const bool full_ = (k0) + 16 <= k;                                                 \
        if (full_) {                                                                       \
            rt2_pack2(true, r0, r1, (k0), k, (dst));                                       \
            rt2_pack2(true, r2, r3, (k0), k, (dst) + 32);                                  \
        } else {                                                                           \
            rt2_pack2(false, r0, r1, (k0), k, (dst));                                      \
            rt2_pack2(false, r2, r3, (k0), k, (dst) + 32);                                 \
        }                                                                                  \
    } while (0)

/* k step KK (< 16) of a packed block p, A^T's row at ak. */
#define RT2_STEP(TAIL, p, ak, KK)                                                          \
    do {                                                                                   \
        const __m256 a0 = _mm256_loadu_ps(ak), a1 = _mm256_loadu_ps((ak) + 8);             \
        const int o = 16 * ((KK) >> 3) + 8 * (((KK) & 3) >> 1) + 4 * (((KK) >> 2) & 1) +  \
                      2 * ((KK) & 1);                                                      \
        _Pragma("GCC unroll 2") for (int pr = 0; pr < 2; pr++) {                           \
            _Pragma("GCC unroll 2") for (int r = 0; r < 2; r++) {                          \
                const __m256 wv = _mm256_broadcast_ss((p) + 32 * pr + o + r);              \
                acc0[2 * pr + r] = _mm256_fmadd_ps(wv, a0, acc0[2 * pr + r]);              \
                acc1[2 * pr + r] = _mm256_fmadd_ps(wv, a1, acc1[2 * pr + r]);              \
            }                                                                              \
            if (TAIL)                                                                      \
                acct[pr] = _mm256_fmadd_ps(                                                \
                    _mm256_castpd_ps(_mm256_broadcast_sd((const double *)(const void *)    \
                                                         ((p) + 32 * pr + o))),            \
                    _mm256_loadu_ps((ak) + 16), acct[pr]);                                 \
        }                                                                                  \
    } while (0)

/* The C^T tile into C: lane j of acc0[i] (acc1[i]) is C[j][i] (C[8 + j][i]),
 * 4 x 4 blocks transposed in registers; acct[p] lane 2 t + r is C[16 +
 * t][2 p + r]. Rows of C past n and columns past m left alone. */
static inline __attribute__((always_inline)) void rt2_store(bool tail, const __m256 *acc0,
                                                            const __m256 *acc1, const __m256 *acct,
                                                            int m, int n, float *c, size_t ldc) {
    const __m128i mm = _mm256_castsi256_si128(lanes(m));
    __m128 x[4][4]; /* x[q][i]: 128-bit half q % 2 of acc0 (q < 2) or acc1 (q >= 2), row i */
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        x[0][i] = _mm256_castps256_ps128(acc0[i]);
        x[1][i] = _mm256_extractf128_ps(acc0[i], 1);
        x[2][i] = _mm256_castps256_ps128(acc1[i]);
        x[3][i] = _mm256_extractf128_ps(acc1[i], 1);
    }
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        _MM_TRANSPOSE4_PS(x[q][0], x[q][1], x[q][2], x[q][3]); /* x[q][j]: C row 4 q + j */
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            if (4 * q + j < n) _mm_maskstore_ps(c + (4 * q + j) * ldc, mm, x[q][j]);
    }
    if (!tail) return;
    const __m128 p0l = _mm256_castps256_ps128(acct[0]), p0h = _mm256_extractf128_ps(acct[0], 1);
    const __m128 p1l = _mm256_castps256_ps128(acct[1]), p1h = _mm256_extractf128_ps(acct[1], 1);
    const __m128 t[4] = {_mm_shuffle_ps(p0l, p1l, 0x44), _mm_shuffle_ps(p0l, p1l, 0xee),
                         _mm_shuffle_ps(p0h, p1h, 0x44), _mm_shuffle_ps(p0h, p1h, 0xee)};
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        if (16 + j < n) _mm_maskstore_ps(c + (16 + j) * ldc, mm, t[j]);
}

/* The kernel with or without the pair vectors (TAIL a constant), its
 * accumulators local so that they stay in registers. */
#define RT2_KERNEL(NAME, TAIL)                                                              \
    static void NAME(size_t k, const float *w, size_t ldw, const float *at, int m, int n,  \
                     float *c, size_t ldc) {                                                \
        const float *r0 = w, *r1 = w + (m > 1 ? ldw : 0), *r2 = w + (m > 2 ? 2 * ldw : 0); \
        const float *r3 = w + (m > 3 ? 3 * ldw : 0); /* rows past m reread row 0 */         \
        _Alignas(32) float buf[2][64];                                                      \
        RT2_PACK((size_t)0, buf[0]);                                                        \
        __m256 acc0[RT2_MR], acc1[RT2_MR], acct[2];                                         \
        _Pragma("GCC unroll 4") for (int i = 0; i < RT2_MR; i++) acc0[i] = acc1[i] =        \
            _mm256_setzero_ps();                                                            \
        acct[0] = acct[1] = _mm256_setzero_ps();                                            \
        int s = 0;                                                                          \
        for (size_t k0 = 0; k0 < k; k0 += 16, s ^= 1) {                                     \
            if (k0 + 16 < k) RT2_PACK(k0 + 16, buf[s ^ 1]);                                 \
            const float *p = buf[s], *ak = at + k0 * RT2_LD;                                \
            if (k0 + 16 <= k) {                                                             \
                _Pragma("GCC unroll 16") for (int kk = 0; kk < 16; kk++)                    \
                    RT2_STEP(TAIL, p, ak + kk * RT2_LD, kk);                                \
            } else {                                                                        \
                for (int kk = 0; kk < (int)(k - k0); kk++)                                  \
                    RT2_STEP(TAIL, p, ak + kk * RT2_LD, kk);                                \
            }                                                                               \
        }                                                                                   \
        rt2_store(TAIL, acc0, acc1, acct, m, n, c, ldc);                                    \
    }
RT2_KERNEL(rt2_kernel_tail, true)
RT2_KERNEL(rt2_kernel_main, false)

void gml_f32_gemm_ukernel__avx2_rt4x20(size_t k, const float *w, size_t ldw, int m,
                                       const float *at, int n, float *c, size_t ldc) {
    if (n > 16) rt2_kernel_tail(k, w, ldw, at, m, n, c, ldc);
    else rt2_kernel_main(k, w, ldw, at, m, n, c, ldc);
}
