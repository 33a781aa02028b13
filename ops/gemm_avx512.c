/* AVX-512F f32 few-rows kernel (gemm.h, "Few rows against W"); the register
 * tile is ops/gemm_tile_avx512.c. */
#include "gemm.h"

#include <immintrin.h>

/* Mask of the first n lanes of 16 (n may be <= 0 or >= 16). */
static inline __mmask16 lanes(int n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* ---- 16 x 16 transposes -------------------------------------------------- */

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
