/* AVX-512F f32 matrix-vector and few-rows kernels (gemm.h); the register
 * tile is ops/gemm_tile_avx512.c. */
#include "gemm.h"

#include <immintrin.h>

/* Mask of the first n lanes of 16 (n may be <= 0 or >= 16). */
static inline __mmask16 lanes(int n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* A hint for the line `floats` floats past p; the address may lie past the
 * operand (prefetches never fault), hence integer arithmetic. */
static inline void prefetch(const float *p, size_t floats) {
    _mm_prefetch((const char *)((uintptr_t)p + floats * sizeof(float)), _MM_HINT_T0);
}

/* ---- matrix-vector (gemm.h): lanes over 16 rows of W ---------------------- */

/* r[j] = row j of a 16 x 16 block -> r[k] = column k (four rounds of
 * shuffles: pairs of floats, of doubles, then 128-bit lanes twice). */
static inline void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) { /* r[i + c], lane L: rows i..i+3 of column 4L + c */
        const __m512d t0 = _mm512_castps_pd(t[i]), t1 = _mm512_castps_pd(t[i + 1]);
        const __m512d t2 = _mm512_castps_pd(t[i + 2]), t3 = _mm512_castps_pd(t[i + 3]);
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
    }
    for (int c = 0; c < 4; c++) { /* lanes 0 and 2 of two row groups, then 1 and 3 */
        t[c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88);
        t[4 + c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd);
        t[8 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
        t[12 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
    }
    for (int c = 0; c < 4; c++) { /* columns c, 8 + c, 4 + c, 12 + c, all 16 rows */
        r[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
        r[8 + c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xdd);
        r[4 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0xdd);
    }
}

/* The whole blocks of 16 k (k0 < kf) of 16 rows of W (row j at w + j * ldw)
 * for M rows of A, M known: the loop below without its tests, so that the
 * compiler keeps the block and the accumulators in registers (the general
 * loop, m and n at run time, spilled the transposed block and the
 * accumulators to the stack every 16 k: 73 -> 61 cycles a block with W in
 * L1, m = 1). The same loads, prefetches and fmas in the same order. */
static inline __attribute__((always_inline)) void gemv_full16(size_t k, size_t kf, const float *a,
                                                              size_t lda, const float *w, size_t ldw,
                                                              __m512 acc[4], const int M) {
    for (size_t k0 = 0; k0 < kf; k0 += 16) {
        __m512 r[16];
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) {
            if (k0 + 64 < k) prefetch(w + j * ldw, k0 + 64);
            r[j] = _mm512_loadu_ps(w + j * ldw + k0);
        }
        transpose16(r);
#pragma GCC unroll 16
        for (int kk = 0; kk < 16; kk++)
#pragma GCC unroll 4
            for (int i = 0; i < M; i++)
                acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(a[i * lda + k0 + kk]), r[kk], acc[i]);
    }
}

/* c[i][j] for m <= 4 rows of A and n <= 16 rows of W: per 16 k, the block of
 * W is loaded by rows (rows past n reread row 0; k past the end are zero and
 * skipped), transposed, and column k feeds one fma per row of A. With all 16
 * rows, the whole blocks go through gemv_full16. */
void gml_f32_gemv_ukernel__avx512_4x16(size_t k, const float *a, size_t lda, int m,
                                       const float *w, size_t ldw, int n, float *c, size_t ldc) {
    const float *row[16];
    for (int j = 0; j < 16; j++) row[j] = w + (j < n ? (size_t)j : 0) * ldw;
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    size_t k0 = 0;
    if (n == 16) {
        k0 = k / 16 * 16;
        switch (m) {
        case 1: gemv_full16(k, k0, a, lda, w, ldw, acc, 1); break;
        case 2: gemv_full16(k, k0, a, lda, w, ldw, acc, 2); break;
        case 3: gemv_full16(k, k0, a, lda, w, ldw, acc, 3); break;
        default: gemv_full16(k, k0, a, lda, w, ldw, acc, 4); break;
        }
    }
    for (; k0 < k; k0 += 16) {
        const int nk = (int)GML_MIN((size_t)16, k - k0);
        const __mmask16 km = lanes(nk);
        __m512 r[16];
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) {
            if (k0 + 64 < k) prefetch(row[j], k0 + 64);
            r[j] = _mm512_maskz_loadu_ps(km, row[j] + k0);
        }
        transpose16(r);
        for (int kk = 0; kk < nk; kk++)
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
                if (i < m)
                    acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(a[i * lda + k0 + kk]), r[kk], acc[i]);
    }
    for (int i = 0; i < m; i++) _mm512_mask_storeu_ps(c + i * ldc, lanes(n), acc[i]);
}

/* ---- matrix-vector against a converted weight (gemv.inc) -------------------
 * Dot products along k (gemm.h, "Matrix-vector against a converted
 * weight"): per 32 k, a row of W is loaded and converted once (f16:
 * vcvtph2ps; bf16: widened and shifted; q8_0: int8 widened and converted)
 * and meets each row of A in two 16-lane halves; four rows of W at a time
 * keep four independent sums per row of A in flight (against one row of
 * A: 16 rows of W at a time for q8_0, q8_0_gemv_1x16, 8 for f16 and bf16,
 * XW16_GEMV_1XR). */

/* 32 values of a row of W from k0 (a whole run of 32) as f32 in w[0..1];
 * for q8_0 the int8 values, *d its block's scale. */
static inline void load32_f16(const char *row, size_t k0, __m512 w[2], __m512 *d) {
    (void)d;
    w[0] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 2 * k0)));
    w[1] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 2 * k0 + 32)));
}
static inline void load32_bf16(const char *row, size_t k0, __m512 w[2], __m512 *d) {
    (void)d;
    for (int h = 0; h < 2; h++)
        w[h] = _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(row + 2 * k0 + 32 * h))),
            16));
}
static inline void load32_q8_0(const char *row, size_t k0, __m512 w[2], __m512 *d) {
    const gml_block_q8_0 *b = (const gml_block_q8_0 *)(const void *)row + k0 / GML_QK8_0;
    uint16_t h;
    memcpy(&h, &b->d, 2);
    *d = _mm512_set1_ps(_cvtsh_ss(h));
    w[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b->qs)));
    w[1] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b->qs + 16))));
}

/* The 16 lane sums of s added as gemm.h fixes: lanes l and l + 8, then
 * l and l + 4, l and l + 2, then the two left. */
static inline float reduce16(__m512 s) {
    const __m256 t = _mm256_add_ps(_mm512_castps512_ps256(s),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
    const __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    const __m128 v = _mm_add_ps(u, _mm_movehl_ps(u, u));
    return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
}

/* One run of 32 k: s[i] += a_i . w as the definition orders it. */
#define XW_STEP(Q8, s, ai, w, d)                                                       \
    do {                                                                               \
        if (Q8) {                                                                      \
            const __m512 p = _mm512_fmadd_ps((ai)[1], (w)[1], _mm512_mul_ps((ai)[0], (w)[0])); \
            s = _mm512_fmadd_ps(d, p, s);                                              \
        } else {                                                                       \
            s = _mm512_fmadd_ps((ai)[1], (w)[1], _mm512_fmadd_ps((ai)[0], (w)[0], s)); \
        }                                                                              \
    } while (0)

/* The f16 scales of block b of rows row[0..7], as 8 lanes (vpinsrw). */
static inline __m128i q8_0_scales8(const char *const row[8], size_t b) {
    uint16_t x[8];
    for (int j = 0; j < 8; j++) memcpy(&x[j], row[j] + b * sizeof(gml_block_q8_0), 2);
    return _mm_setr_epi16((short)x[0], (short)x[1], (short)x[2], (short)x[3], (short)x[4],
                          (short)x[5], (short)x[6], (short)x[7]);
}

/* q8_0 against one row of A (decoding), the same sums: all 16 rows of W at
 * once (16 streams in flight, A's two loads per block shared by 16 rows),
 * and each block's 16 scales gathered as f16 (vpinsrw), converted by one
 * vcvtph2ps and stored, so that each row's scale is a broadcast load (the
 * scalar conversion and register broadcast per row cost 3 shuffle-port
 * operations per block, as many as the block's products). Rows past n
 * reread row 0. */
static void q8_0_gemv_1x16(size_t k, const float *a, const void *w, size_t ldw, int n, float *c) {
    const char *row[16];
    for (int j = 0; j < 16; j++) row[j] = (const char *)w + (size_t)(j < n ? j : 0) * ldw;
    __m512 s[16];
    for (int j = 0; j < 16; j++) s[j] = _mm512_setzero_ps();
    for (size_t b = 0; b < k / GML_QK8_0; b++) {
        _Alignas(64) float d[16];
        const __m128i h0 = q8_0_scales8(row, b), h1 = q8_0_scales8(row + 8, b);
        _mm512_store_ps(d, _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(h0), h1, 1)));
        /* keeps the compiler from turning the broadcasts of d[j] below into
         * shuffles of the register it was stored from */
        __asm__ volatile("" ::: "memory");
        const __m512 a0 = _mm512_loadu_ps(a + 32 * b), a1 = _mm512_loadu_ps(a + 32 * b + 16);
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) {
            const gml_block_q8_0 *q = (const gml_block_q8_0 *)(const void *)row[j] + b;
            _mm_prefetch((const char *)((uintptr_t)q + 8 * sizeof(gml_block_q8_0)), _MM_HINT_T0);
            const __m512 w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q->qs)));
            const __m512 w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q->qs + 16))));
            s[j] = _mm512_fmadd_ps(_mm512_set1_ps(d[j]), _mm512_fmadd_ps(a1, w1, _mm512_mul_ps(a0, w0)), s[j]);
        }
    }
    for (int j = 0; j < n; j++) c[j] = reduce16(s[j]);
}

/* f16 or bf16 against one row of A (decoding), the same sums: 8 rows of W
 * at a time (twice the streams of the 4-row loop), A's two loads per 32 k
 * shared by the 8 rows; k a multiple of 32 (the caller takes a tail). */
#define XW16_ROWS 8
#define XW16_GEMV_1XR(NAME, LOAD32)                                                          \
    static void NAME(size_t kfull, const float *a, const void *w, size_t ldw, int n, __m512 *s) { \
        const char *row[XW16_ROWS];                                                          \
        for (int j = 0; j < XW16_ROWS; j++)                                                  \
            row[j] = (const char *)w + (size_t)(j < n ? j : 0) * ldw;                        \
        for (int j = 0; j < XW16_ROWS; j++) s[j] = _mm512_setzero_ps();                      \
        for (size_t k0 = 0; k0 < kfull; k0 += 32) {                                          \
            const __m512 a0 = _mm512_loadu_ps(a + k0), a1 = _mm512_loadu_ps(a + k0 + 16);    \
            _Pragma("GCC unroll 16") for (int j = 0; j < XW16_ROWS; j++) {                   \
                __m512 wv[2], d;                                                             \
                _mm_prefetch((const char *)((uintptr_t)row[j] + 2 * k0 + 8 * 64), _MM_HINT_T0); \
                LOAD32(row[j], k0, wv, &d);                                                  \
                s[j] = _mm512_fmadd_ps(a1, wv[1], _mm512_fmadd_ps(a0, wv[0], s[j]));         \
            }                                                                                \
        }                                                                                    \
    }
XW16_GEMV_1XR(f16_gemv_1xr, load32_f16)
XW16_GEMV_1XR(bf16_gemv_1xr, load32_bf16)

/* ROW1: the kernel for one row of A, or nothing */
#define XW_GEMV_AVX512(NAME, LOAD32, Q8, BLK, ROW1)                                             \
    void NAME(size_t k, const float *a, size_t lda, int m, const void *w, size_t ldw, int n,     \
              float *c, size_t ldc) {                                                            \
        const size_t kfull = k / 32 * 32;                                                        \
        /* the tail (f16, bf16): A's rows and W's rows zero-padded to 32 */                      \
        float at[4][32];                                                                         \
        uint16_t wt[4][32];                                                                      \
        for (int i = 0; i < m; i++) {                                                            \
            memset(at[i], 0, sizeof at[i]);                                                      \
            memcpy(at[i], a + i * lda + kfull, (k - kfull) * sizeof(float));                     \
        }                                                                                        \
        ROW1                                                                                     \
        for (int j0 = 0; j0 < n; j0 += 4) {                                                      \
            const int nj = GML_MIN(4, n - j0);                                                   \
            const char *row[4];                                                                  \
            for (int j = 0; j < 4; j++)                                                          \
                row[j] = (const char *)w + (size_t)(j0 + (j < nj ? j : 0)) * ldw;                \
            __m512 s[4][4];                                                                      \
            for (int i = 0; i < 4; i++)                                                          \
                for (int j = 0; j < 4; j++) s[i][j] = _mm512_setzero_ps();                       \
            for (size_t k0 = 0; k0 < kfull; k0 += 32) {                                          \
                __m512 wv[4][2], d[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(),               \
                                         _mm512_setzero_ps(), _mm512_setzero_ps()};              \
                _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {                            \
                    _mm_prefetch((const char *)((uintptr_t)row[j] + (k0 / 32 + 8) * BLK), _MM_HINT_T0);                  \
                    LOAD32(row[j], k0, wv[j], &d[j]);                                            \
                }                                                                                \
                _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {                            \
                    if (i >= m) break;                                                           \
                    const __m512 ai[2] = {_mm512_loadu_ps(a + i * lda + k0),                     \
                                          _mm512_loadu_ps(a + i * lda + k0 + 16)};               \
                    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++)                          \
                        XW_STEP(Q8, s[i][j], ai, wv[j], d[j]);                                   \
                }                                                                                \
            }                                                                                    \
            if (kfull < k) { /* never for q8_0 */                                                \
                for (int j = 0; j < nj; j++) {                                                   \
                    memset(wt[j], 0, sizeof wt[j]);                                              \
                    memcpy(wt[j], row[j] + 2 * kfull, (k - kfull) * 2);                          \
                    __m512 wv[2], d = _mm512_setzero_ps();                                       \
                    LOAD32((const char *)wt[j], 0, wv, &d);                                      \
                    for (int i = 0; i < m; i++) {                                                \
                        const __m512 ai[2] = {_mm512_loadu_ps(at[i]), _mm512_loadu_ps(at[i] + 16)}; \
                        XW_STEP(Q8, s[i][j], ai, wv, d);                                         \
                    }                                                                            \
                }                                                                                \
            }                                                                                    \
            for (int i = 0; i < m; i++)                                                          \
                for (int j = 0; j < nj; j++) c[i * ldc + j0 + j] = reduce16(s[i][j]);            \
        }                                                                                        \
    }

/* bytes per run of 32 values (the prefetch runs 8 runs ahead): f16, bf16 64; q8_0 34 */
/* One row of A against f16 or bf16 rows: FN over whole runs of 32, then the
 * tail as the loop above takes it. */
#define XW16_ROW1(FN, LOAD32)                                                                   \
    if (m == 1) {                                                                               \
        for (int j0 = 0; j0 < n; j0 += XW16_ROWS) {                                             \
            const int nj = GML_MIN(XW16_ROWS, n - j0);                                          \
            __m512 s1[XW16_ROWS];                                                               \
            FN(kfull, a, (const char *)w + (size_t)j0 * ldw, ldw, nj, s1);                      \
            for (int j = 0; j < nj && kfull < k; j++) {                                         \
                memset(wt[0], 0, sizeof wt[0]);                                                 \
                memcpy(wt[0], (const char *)w + (size_t)(j0 + j) * ldw + 2 * kfull, (k - kfull) * 2); \
                __m512 wv[2], d;                                                                \
                LOAD32((const char *)wt[0], 0, wv, &d);                                         \
                const __m512 ai[2] = {_mm512_loadu_ps(at[0]), _mm512_loadu_ps(at[0] + 16)};     \
                XW_STEP(0, s1[j], ai, wv, d);                                                   \
            }                                                                                   \
            for (int j = 0; j < nj; j++) c[j0 + j] = reduce16(s1[j]);                           \
        }                                                                                       \
        return;                                                                                 \
    }
XW_GEMV_AVX512(gml_f16_gemv_ukernel__avx512_4x16, load32_f16, 0, 64,
               XW16_ROW1(f16_gemv_1xr, load32_f16))
XW_GEMV_AVX512(gml_bf16_gemv_ukernel__avx512_4x16, load32_bf16, 0, 64,
               XW16_ROW1(bf16_gemv_1xr, load32_bf16))
XW_GEMV_AVX512(gml_q8_0_gemv_ukernel__avx512_4x16, load32_q8_0, 1, 34,
               if (m == 1) { q8_0_gemv_1x16(k, a, w, ldw, n, c); return; })

/* ---- few rows against W: C^T = W A^T, 16 rows of W x 20 of A --------------
 * gemm.h, "Few rows against W". Per k, the first 16 of A's rows are one
 * vector (lanes over A's rows) and take one fma per row of W against a
 * broadcast of w[i][k], 16 fmas; the last 4 rows of A against 4 rows of W
 * at a time fill the 16 lanes of one more vector (lane 4 t + r: A's row
 * 16 + t, W's row 4 g + r): 4 fmas, so 20 per k for 16 x 20 outputs, every
 * lane busy, where the 14x32 tile spends 32 fmas (M = 20 padded to 32).
 * The 4 values of W that vector needs sit apart in W's rows: each block of
 * 16 k of 4 rows is loaded (4 vectors), interleaved by two rounds of
 * unpacks (8 shuffles per 64 values) and stored on the stack, from where
 * both kinds of broadcast read it; the next block is packed before the
 * current one is consumed (reading a block packed just before stalls).
 * 20 accumulators (16 + 4), 2 vectors of A. The kernel alone, 112 rows of
 * W in L2 x 20 x K = 512, one core of the Xeon: 138 GFLOP/s against 103
 * for the 14x32 tile (170 with the packing left out: it costs ~20%). */

#define RT_MR 16
#define RT_G (RT_MR / 4)     /* groups of 4 rows of W */
#define RT_LD 32             /* floats of packed A^T per k */
#define RT_RING 2 /* blocks on the stack, packed RT_RING - 1 ahead (this loop form:
                     138 GFLOP/s; a plain s ^= 1 toggle compiled to 125) */
#define RT_PF 256            /* W's rows prefetched into L2 this many floats ahead */

/* Rows row[0..3] at k0..k0+15 (lanes past km zero) into dst: dst[16 q +
 * 4 c + r] = row r at k0 + 4 c + q (the unpacks keep 128-bit lanes). */
static inline void rt_pack4(const float *const *row, size_t k0, __mmask16 km, float *dst) {
    const __m512 r0 = _mm512_maskz_loadu_ps(km, row[0] + k0);
    const __m512 r1 = _mm512_maskz_loadu_ps(km, row[1] + k0);
    const __m512 r2 = _mm512_maskz_loadu_ps(km, row[2] + k0);
    const __m512 r3 = _mm512_maskz_loadu_ps(km, row[3] + k0);
    const __m512d t0 = _mm512_castps_pd(_mm512_unpacklo_ps(r0, r1));
    const __m512d t1 = _mm512_castps_pd(_mm512_unpackhi_ps(r0, r1));
    const __m512d t2 = _mm512_castps_pd(_mm512_unpacklo_ps(r2, r3));
    const __m512d t3 = _mm512_castps_pd(_mm512_unpackhi_ps(r2, r3));
    _mm512_store_ps(dst, _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2)));
    _mm512_store_ps(dst + 16, _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2)));
    _mm512_store_ps(dst + 32, _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3)));
    _mm512_store_ps(dst + 48, _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3)));
}

/* The block of 16 k from k0 of all 16 rows into dst (RT_G x 64 floats).
 * Each row's line RT_PF floats ahead is prefetched into L2 (16 rows 4 KiB
 * apart would share L1's sets), past the row's end the line of the next
 * call's row (16 rows of W further; short rows, K = 512, would otherwise
 * start each call with 16 misses; the address may lie past W). */
static inline void rt_pack(const float *const *row, const float *w, size_t ldw, size_t k0,
                           size_t k, float *dst) {
    const __mmask16 km = lanes((int)GML_MIN((size_t)16, k - k0));
    const size_t ahead = k0 + RT_PF; /* row r's line: w + r ldw + ahead, or past the end */
    uintptr_t pf = (uintptr_t)w + (ahead < k ? ahead : RT_MR * ldw + ahead - k) * sizeof(float);
#pragma GCC unroll 4
    for (int g = 0; g < RT_G; g++) {
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++, pf += ldw * sizeof(float)) /* an add a row (a multiply */
            _mm_prefetch((const char *)pf, _MM_HINT_T1);       /* a row cost 3%) */
        rt_pack4(row + 4 * g, k0, km, dst + 64 * g);
    }
}

/* k step KK of a packed block p (its A^T row at ak): q = KK % 4, c = KK / 4. */
#define RT_STEP(TAIL, p, ak, KK)                                                        \
    do {                                                                                \
        const __m512 am = _mm512_loadu_ps(ak), atl = _mm512_loadu_ps((ak) + 16);        \
        _Pragma("GCC unroll 4") for (int g = 0; g < RT_G; g++) {                        \
            const float *pw = (p) + 64 * g + 16 * ((KK) & 3) + 4 * ((KK) >> 2);         \
            _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) acc[4 * g + r] =        \
                _mm512_fmadd_ps(_mm512_set1_ps(pw[r]), am, acc[4 * g + r]);             \
            if (TAIL)                                                                   \
                acct[g] = _mm512_fmadd_ps(_mm512_broadcast_f32x4(_mm_load_ps(pw)), atl, \
                                          acct[g]);                                     \
        }                                                                               \
    } while (0)

/* The C^T tile into C: acc[i] lane j is C[j][i] (16 x 16 transposed in
 * registers), acct[g] lane 4 t + r is C[16 + t][4 g + r] (its 128-bit
 * chunks t of the 4 vectors side by side); rows of C past n and columns
 * past m left alone. */
static inline __attribute__((always_inline)) void rt_store(bool tail, __m512 *acc, __m512 *acct,
                                                           int m, int n, float *c, size_t ldc) {
    const __mmask16 mm = lanes(m);
    transpose16(acc);
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++)
        if (j < n) _mm512_mask_storeu_ps(c + j * ldc, mm, acc[j]);
    if (!tail) return;
    const __m512 u0 = _mm512_shuffle_f32x4(acct[0], acct[1], 0x44);
    const __m512 u1 = _mm512_shuffle_f32x4(acct[0], acct[1], 0xee);
    const __m512 u2 = _mm512_shuffle_f32x4(acct[2], acct[3], 0x44);
    const __m512 u3 = _mm512_shuffle_f32x4(acct[2], acct[3], 0xee);
    const __m512 t[4] = {_mm512_shuffle_f32x4(u0, u2, 0x88), _mm512_shuffle_f32x4(u0, u2, 0xdd),
                         _mm512_shuffle_f32x4(u1, u3, 0x88), _mm512_shuffle_f32x4(u1, u3, 0xdd)};
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        if (16 + j < n) _mm512_mask_storeu_ps(c + (16 + j) * ldc, mm, t[j]);
}

/* The kernel with or without the 4-row tail vectors (TAIL a constant):
 * the accumulators stay local so that they live in registers. */
#define RT_KERNEL(NAME, TAIL)                                                               \
    static void NAME(size_t k, const float *const *row, const float *w, size_t ldw,       \
                     const float *at, int m, int n, float *c, size_t ldc) {                \
        _Alignas(64) float buf[RT_RING][RT_G * 64];                                         \
        for (int b = 0; b < RT_RING - 1; b++)                                               \
            if ((size_t)b * 16 < k) rt_pack(row, w, ldw, (size_t)b * 16, k, buf[b]);        \
        __m512 acc[RT_MR], acct[RT_G];                                                      \
        _Pragma("GCC unroll 16") for (int i = 0; i < RT_MR; i++) acc[i] =                   \
            _mm512_setzero_ps();                                                            \
        _Pragma("GCC unroll 4") for (int g = 0; g < RT_G; g++) acct[g] = _mm512_setzero_ps(); \
        int s = 0;                                                                          \
        for (size_t k0 = 0; k0 < k; k0 += 16, s = (s + 1) % RT_RING) {                      \
            const size_t kn = k0 + 16 * (RT_RING - 1);                                      \
            if (kn < k) rt_pack(row, w, ldw, kn, k, buf[(s + RT_RING - 1) % RT_RING]);      \
            const float *p = buf[s], *ak = at + k0 * RT_LD;                                 \
            if (k0 + 16 <= k) {                                                             \
                _Pragma("GCC unroll 16") for (int kk = 0; kk < 16; kk++)                    \
                    RT_STEP(TAIL, p, ak + kk * RT_LD, kk);                                  \
            } else {                                                                        \
                for (int kk = 0; kk < (int)(k - k0); kk++)                                  \
                    RT_STEP(TAIL, p, ak + kk * RT_LD, kk);                                  \
            }                                                                               \
        }                                                                                   \
        rt_store(TAIL, acc, acct, m, n, c, ldc);                                             \
    }
RT_KERNEL(rt_kernel_tail, true)
RT_KERNEL(rt_kernel_main, false)

void gml_f32_gemm_ukernel__avx512_rt16x20(size_t k, const float *w, size_t ldw, int m,
                                          const float *at, int n, float *c, size_t ldc) {
    const float *row[RT_MR];
    for (int i = 0; i < RT_MR; i++) row[i] = w + (i < m ? (size_t)i : 0) * ldw;
    if (n > 16) rt_kernel_tail(k, row, w, ldw, at, m, n, c, ldc);
    else rt_kernel_main(k, row, w, ldw, at, m, n, c, ldc);
}
