/* AVX2+FMA f32 matrix-vector and few-rows kernels (gemm.h); the register
 * tiles are ops/gemm_tile_avx2.c. Compiled with -mavx2 -mfma -mf16c. */
#include "gemm.h"

#include <immintrin.h>

/* Lane mask for the first n of 8 lanes (n may be <= 0 or >= 8). */
static inline __m256i lanes(int n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

/* A hint for the line `floats` floats past p; the address may lie past the
 * operand (prefetches never fault), hence integer arithmetic. */
static inline void prefetch(const float *p, size_t floats) {
    _mm_prefetch((const char *)((uintptr_t)p + floats * sizeof(float)), _MM_HINT_T0);
}

/* ---- matrix-vector (gemm.h): lanes over 8 rows of W ----------------------- */

/* r[j] = row j of an 8 x 8 block -> r[k] = column k. */
static inline void transpose8(__m256 r[8]) {
    __m256 t[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) { /* r[i + c], half H: rows i..i+3 of column 4H + c */
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int c = 0; c < 4; c++) { /* low halves make column c, high ones 4 + c */
        t[c] = _mm256_permute2f128_ps(r[c], r[4 + c], 0x20);
        t[4 + c] = _mm256_permute2f128_ps(r[c], r[4 + c], 0x31);
    }
    for (int i = 0; i < 8; i++) r[i] = t[i];
}

/* The whole blocks of 8 k (k0 < kf) of 8 rows of W for M rows of A, M
 * known, as gemm_avx512.c's gemv_full16: the loop below without its tests,
 * block and accumulators in registers, and W prefetched 64 floats ahead
 * (the loop below had no prefetch). The same fmas in the same order. With
 * W in L2 (a 1 MiB weight), m = 1: 19.6 -> 24.1 GB/s; with W in memory, 38
 * layers of C5's weights on huge pages, 1 thread: 12.8 -> 14.2 GB/s. */
static inline __attribute__((always_inline)) void gemv_full8(size_t k, size_t kf, const float *a,
                                                             size_t lda, const float *w, size_t ldw,
                                                             __m256 acc[4], const int M) {
    for (size_t k0 = 0; k0 < kf; k0 += 8) {
        __m256 r[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            if (k0 + 64 < k) prefetch(w + j * ldw, k0 + 64);
            r[j] = _mm256_loadu_ps(w + j * ldw + k0);
        }
        transpose8(r);
#pragma GCC unroll 8
        for (int kk = 0; kk < 8; kk++)
#pragma GCC unroll 4
            for (int i = 0; i < M; i++)
                acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(a[i * lda + k0 + kk]), r[kk], acc[i]);
    }
}

/* As the AVX-512 variant, 8 rows of W per call, 8 k at a time. */
void gml_f32_gemv_ukernel__avx2_4x8(size_t k, const float *a, size_t lda, int m, const float *w,
                                    size_t ldw, int n, float *c, size_t ldc) {
    const float *row[8];
    for (int j = 0; j < 8; j++) row[j] = w + (j < n ? (size_t)j : 0) * ldw;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    size_t k0 = 0;
    if (n == 8) {
        k0 = k / 8 * 8;
        switch (m) {
        case 1: gemv_full8(k, k0, a, lda, w, ldw, acc, 1); break;
        case 2: gemv_full8(k, k0, a, lda, w, ldw, acc, 2); break;
        case 3: gemv_full8(k, k0, a, lda, w, ldw, acc, 3); break;
        default: gemv_full8(k, k0, a, lda, w, ldw, acc, 4); break;
        }
    }
    for (; k0 < k; k0 += 8) {
        const int nk = (int)GML_MIN((size_t)8, k - k0);
        const __m256i km = lanes(nk);
        __m256 r[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) r[j] = _mm256_maskload_ps(row[j] + k0, km);
        transpose8(r);
        for (int kk = 0; kk < nk; kk++)
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
                if (i < m)
                    acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(a[i * lda + k0 + kk]), r[kk], acc[i]);
    }
    const __m256i nm = lanes(n);
    for (int i = 0; i < m; i++) _mm256_maskstore_ps(c + i * ldc, nm, acc[i]);
}

/* ---- matrix-vector against a converted weight (gemv.inc) -------------------
 * As the AVX-512 variants (ops/gemm_avx512.c), each 16-lane sum of the
 * definition held in two ymm (lanes 0-7 and 8-15): per 32 k, a row of W
 * is loaded and converted once (f16 with F16C's vcvtph2ps), two rows of W
 * at a time (against one row of A: 8 rows, q8_0_gemv_1x8 and
 * XW16_GEMV_1XR). */

/* 32 values of a row of W from k0 as f32 in w[0..3] (8 each); for q8_0 the
 * int8 values, *d its block's scale. */
static inline void load32_f16(const char *row, size_t k0, __m256 w[4], __m256 *d) {
    (void)d;
    for (int h = 0; h < 4; h++)
        w[h] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * k0 + 16 * h)));
}
static inline void load32_bf16(const char *row, size_t k0, __m256 w[4], __m256 *d) {
    (void)d;
    for (int h = 0; h < 4; h++)
        w[h] = _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + 2 * k0 + 16 * h))), 16));
}
static inline void load32_q8_0(const char *row, size_t k0, __m256 w[4], __m256 *d) {
    const gml_block_q8_0 *b = (const gml_block_q8_0 *)(const void *)row + k0 / GML_QK8_0;
    uint16_t h;
    memcpy(&h, &b->d, 2);
    *d = _mm256_set1_ps(_cvtsh_ss(h));
    for (int q = 0; q < 4; q++)
        w[q] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + 8 * q))));
}

/* lanes 0-7 and 8-15 of the sums, added as gemm.h fixes */
static inline float reduce16(__m256 lo, __m256 hi) {
    const __m256 t = _mm256_add_ps(lo, hi);
    const __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    const __m128 v = _mm_add_ps(u, _mm_movehl_ps(u, u));
    return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
}

/* s[0] lanes 0-7, s[1] lanes 8-15; a: the 32 values of A's row, w: W's */
#define XW_STEP(Q8, s, a, w, d)                                                                 \
    do {                                                                                        \
        for (int h = 0; h < 2; h++) {                                                           \
            const __m256 a0 = _mm256_loadu_ps((a) + 8 * h), a1 = _mm256_loadu_ps((a) + 16 + 8 * h); \
            if (Q8)                                                                             \
                s[h] = _mm256_fmadd_ps(d, _mm256_fmadd_ps(a1, (w)[2 + h], _mm256_mul_ps(a0, (w)[h])), s[h]); \
            else                                                                                \
                s[h] = _mm256_fmadd_ps(a1, (w)[2 + h], _mm256_fmadd_ps(a0, (w)[h], s[h]));     \
        }                                                                                       \
    } while (0)

/* 8 int8 values from p as f32 */
static inline __m256 q8x8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)));
}

/* The f16 scales of block b of rows row[0..7], as 8 lanes (vpinsrw). */
static inline __m128i q8_0_scales8(const char *const row[8], size_t b) {
    uint16_t x[8];
    for (int j = 0; j < 8; j++) memcpy(&x[j], row[j] + b * sizeof(gml_block_q8_0), 2);
    return _mm_setr_epi16((short)x[0], (short)x[1], (short)x[2], (short)x[3], (short)x[4],
                          (short)x[5], (short)x[6], (short)x[7]);
}

/* q8_0 against one row of A (decoding), the same sums: all 8 rows of W at
 * once (8 streams in flight), and each block's 8 scales gathered as f16
 * (vpinsrw), converted by one vcvtph2ps and stored, so that each row's
 * scale is a broadcast load rather than a scalar conversion and a register
 * broadcast per row. Rows past n reread row 0. */
static void q8_0_gemv_1x8(size_t k, const float *a, const void *w, size_t ldw, int n, float *c) {
    const char *row[8];
    for (int j = 0; j < 8; j++) row[j] = (const char *)w + (size_t)(j < n ? j : 0) * ldw;
    __m256 s[8][2];
    for (int j = 0; j < 8; j++) s[j][0] = s[j][1] = _mm256_setzero_ps();
    for (size_t b = 0; b < k / GML_QK8_0; b++) {
        _Alignas(32) float d[8];
        _mm256_store_ps(d, _mm256_cvtph_ps(q8_0_scales8(row, b)));
        /* keeps the compiler from turning the broadcasts of d[j] below into
         * shuffles of the register it was stored from */
        __asm__ volatile("" ::: "memory");
        const float *ab = a + 32 * b;
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            const gml_block_q8_0 *q = (const gml_block_q8_0 *)(const void *)row[j] + b;
            _mm_prefetch((const char *)((uintptr_t)q + 8 * sizeof(gml_block_q8_0)), _MM_HINT_T0);
            const __m256 dj = _mm256_set1_ps(d[j]);
            for (int h2 = 0; h2 < 2; h2++) {
                const __m256 p = _mm256_fmadd_ps(_mm256_loadu_ps(ab + 16 + 8 * h2), q8x8(q->qs + 16 + 8 * h2),
                                                 _mm256_mul_ps(_mm256_loadu_ps(ab + 8 * h2), q8x8(q->qs + 8 * h2)));
                s[j][h2] = _mm256_fmadd_ps(dj, p, s[j][h2]);
            }
        }
    }
    for (int j = 0; j < n; j++) c[j] = reduce16(s[j][0], s[j][1]);
}

/* f16 or bf16 against one row of A (decoding), the same sums: 8 rows of W
 * at a time (the 2-row loop below keeps two streams in flight; 16 of the
 * 16 ymm hold the sums, A's values come as memory operands); k a multiple
 * of 32 (the caller takes a tail). */
#define XW16_ROWS 8
#define XW16_GEMV_1XR(NAME, LOAD32)                                                          \
    static void NAME(size_t kfull, const float *a, const void *w, size_t ldw, int n, __m256 (*s)[2]) { \
        const char *row[XW16_ROWS];                                                          \
        for (int j = 0; j < XW16_ROWS; j++)                                                  \
            row[j] = (const char *)w + (size_t)(j < n ? j : 0) * ldw;                        \
        for (int j = 0; j < XW16_ROWS; j++) s[j][0] = s[j][1] = _mm256_setzero_ps();         \
        for (size_t k0 = 0; k0 < kfull; k0 += 32) {                                          \
            _Pragma("GCC unroll 8") for (int j = 0; j < XW16_ROWS; j++) {                    \
                __m256 wv[4], d;                                                             \
                _mm_prefetch((const char *)((uintptr_t)row[j] + 2 * k0 + 8 * 64), _MM_HINT_T0); \
                LOAD32(row[j], k0, wv, &d);                                                  \
                XW_STEP(0, s[j], a + k0, wv, d);                                             \
            }                                                                                \
        }                                                                                    \
    }
XW16_GEMV_1XR(f16_gemv_1xr, load32_f16)
XW16_GEMV_1XR(bf16_gemv_1xr, load32_bf16)

/* ROW1: the kernel for one row of A, or nothing */
#define XW_GEMV_AVX2(NAME, LOAD32, Q8, BLK, ROW1)                                               \
    void NAME(size_t k, const float *a, size_t lda, int m, const void *w, size_t ldw, int n,     \
              float *c, size_t ldc) {                                                            \
        const size_t kfull = k / 32 * 32;                                                        \
        float at[4][32];                                                                         \
        uint16_t wt[32];                                                                         \
        for (int i = 0; i < m; i++) {                                                            \
            memset(at[i], 0, sizeof at[i]);                                                      \
            memcpy(at[i], a + i * lda + kfull, (k - kfull) * sizeof(float));                     \
        }                                                                                        \
        ROW1                                                                                     \
        for (int j0 = 0; j0 < n; j0 += 2) {                                                      \
            const int nj = GML_MIN(2, n - j0);                                                   \
            const char *row[2] = {(const char *)w + (size_t)j0 * ldw,                            \
                                  (const char *)w + (size_t)(j0 + nj - 1) * ldw};                \
            __m256 s[4][2][2];                                                                   \
            for (int i = 0; i < 4; i++)                                                          \
                for (int j = 0; j < 2; j++) s[i][j][0] = s[i][j][1] = _mm256_setzero_ps();      \
            for (size_t k0 = 0; k0 < kfull; k0 += 32) {                                          \
                __m256 wv[2][4], d[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};             \
                for (int j = 0; j < 2; j++) {                                                    \
                    _mm_prefetch((const char *)((uintptr_t)row[j] + (k0 / 32 + 8) * BLK),     \
                                 _MM_HINT_T0);                                                   \
                    LOAD32(row[j], k0, wv[j], &d[j]);                                            \
                }                                                                                \
                for (int i = 0; i < m; i++)                                                      \
                    for (int j = 0; j < 2; j++) XW_STEP(Q8, s[i][j], a + i * lda + k0, wv[j], d[j]); \
            }                                                                                    \
            if (kfull < k) { /* never for q8_0 */                                                \
                for (int j = 0; j < nj; j++) {                                                   \
                    memset(wt, 0, sizeof wt);                                                    \
                    memcpy(wt, row[j] + 2 * kfull, (k - kfull) * 2);                             \
                    __m256 wv[4], d = _mm256_setzero_ps();                                       \
                    LOAD32((const char *)wt, 0, wv, &d);                                         \
                    for (int i = 0; i < m; i++) XW_STEP(Q8, s[i][j], at[i], wv, d);              \
                }                                                                                \
            }                                                                                    \
            for (int i = 0; i < m; i++)                                                          \
                for (int j = 0; j < nj; j++) c[i * ldc + j0 + j] = reduce16(s[i][j][0], s[i][j][1]); \
        }                                                                                        \
    }

/* One row of A against f16 or bf16 rows: FN over whole runs of 32, then the
 * tail as the loop above takes it. */
#define XW16_ROW1(FN, LOAD32)                                                                   \
    if (m == 1) {                                                                               \
        for (int j0 = 0; j0 < n; j0 += XW16_ROWS) {                                             \
            const int nj = GML_MIN(XW16_ROWS, n - j0);                                          \
            __m256 s1[XW16_ROWS][2];                                                            \
            FN(kfull, a, (const char *)w + (size_t)j0 * ldw, ldw, nj, s1);                      \
            for (int j = 0; j < nj && kfull < k; j++) {                                         \
                memset(wt, 0, sizeof wt);                                                       \
                memcpy(wt, (const char *)w + (size_t)(j0 + j) * ldw + 2 * kfull, (k - kfull) * 2); \
                __m256 wv[4], d = _mm256_setzero_ps();                                          \
                LOAD32((const char *)wt, 0, wv, &d);                                            \
                XW_STEP(0, s1[j], at[0], wv, d);                                                \
            }                                                                                   \
            for (int j = 0; j < nj; j++) c[j0 + j] = reduce16(s1[j][0], s1[j][1]);              \
        }                                                                                       \
        return;                                                                                 \
    }
XW_GEMV_AVX2(gml_f16_gemv_ukernel__avx2_4x8, load32_f16, 0, 64, XW16_ROW1(f16_gemv_1xr, load32_f16))
XW_GEMV_AVX2(gml_bf16_gemv_ukernel__avx2_4x8, load32_bf16, 0, 64, XW16_ROW1(bf16_gemv_1xr, load32_bf16))
XW_GEMV_AVX2(gml_q8_0_gemv_ukernel__avx2_4x8, load32_q8_0, 1, 34,
             if (m == 1) { q8_0_gemv_1x8(k, a, w, ldw, n, c); return; })

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
