/* The f32 matrix-vector micro-kernels of gemm.h ("Matrix-vector", "against
 * a converted weight"; ops/gemv.inc), written once over the SIMD layer and
 * compiled once per ISA: lanes over GML_VL rows of W (f32), or 16-lane dot
 * products along k held in 16 / GML_VL vectors (f16, bf16, q8_0). Every
 * ISA's variant gives the bits gemm.h defines. */
#include "gemm.h"
#include "simd/simd.h"

/* gml_<kind>_ukernel__<isa>_<tile> */
#define GEMM_UKERNEL(kind, tile) GEMM_UKERNEL_(kind, GML_SIMD_TAG, tile)
#define GEMM_UKERNEL_(kind, tag, tile) GEMM_UKERNEL__(kind, tag, tile)
#define GEMM_UKERNEL__(kind, tag, tile) gml_##kind##_ukernel__##tag##_##tile
#define TILE_4xVL GEMM_CAT(4x, GML_SIMD_U1)
#define GEMM_CAT(a, b) GEMM_CAT_(a, b)
#define GEMM_CAT_(a, b) a##b

/* A hint for the line `floats` floats past p; the address may lie past the
 * operand (prefetches never fault), hence integer arithmetic. */
static inline void prefetch(const float *p, size_t floats) {
    __builtin_prefetch((const void *)((uintptr_t)p + floats * sizeof(float)), 0, 3);
}

/* ---- matrix-vector (gemm.h): lanes over GML_VL rows of W ------------------ */

/* The whole blocks of GML_VL k (k0 < kf) of GML_VL rows of W (row j at w +
 * j * ldw) for M rows of A, M known: the loop below without its tests, so
 * that the compiler keeps the block and the accumulators in registers (the
 * general loop, m and n at run time, spilled the transposed block and the
 * accumulators to the stack every 16 k on AVX-512: 73 -> 61 cycles a block
 * with W in L1, m = 1; AVX2, W in L2, a 1 MiB weight, m = 1: 19.6 -> 24.1
 * GB/s; W in memory, 38 layers of C5's weights on huge pages, 1 thread:
 * 12.8 -> 14.2 GB/s). No software prefetch here (those measured ran
 * without one). The same fmas in the same order. */
static GML_SIMD_INLINE void gemv_full(size_t kf, const float *a, size_t lda,
                                      const float *w, size_t ldw, gml_vf acc[4], const int M) {
    for (size_t k0 = 0; k0 < kf; k0 += GML_VL) {
        gml_vf r[GML_VL];
#pragma GCC unroll 16
        for (int j = 0; j < GML_VL; j++) r[j] = gml_vf_load(w + j * ldw + k0);
        gml_vf_transpose(r);
#pragma GCC unroll 16
        for (int kk = 0; kk < GML_VL; kk++)
#pragma GCC unroll 4
            for (int i = 0; i < M; i++)
                acc[i] = gml_vf_fma(gml_vf_set1(a[i * lda + k0 + kk]), r[kk], acc[i]);
    }
}

/* c[i][j] for m <= 4 rows of A and n <= GML_VL rows of W: per GML_VL k, the
 * block of W is loaded by rows (rows past n reread row 0; k past the end
 * are zero and skipped), transposed, and column k feeds one fma per row of
 * A. With all GML_VL rows, the whole blocks go through gemv_full. */
void GEMM_UKERNEL(f32_gemv, TILE_4xVL)(size_t k, const float *a, size_t lda, int m,
                                       const float *w, size_t ldw, int n, float *c, size_t ldc) {
    const float *row[GML_VL];
    for (int j = 0; j < GML_VL; j++) row[j] = w + (j < n ? (size_t)j : 0) * ldw;
    gml_vf acc[4] = {gml_vf_zero(), gml_vf_zero(), gml_vf_zero(), gml_vf_zero()};
    size_t k0 = 0;
    if (n == GML_VL) {
        k0 = k / GML_VL * GML_VL;
        switch (m) {
        case 1: gemv_full(k0, a, lda, w, ldw, acc, 1); break;
        case 2: gemv_full(k0, a, lda, w, ldw, acc, 2); break;
        case 3: gemv_full(k0, a, lda, w, ldw, acc, 3); break;
        default: gemv_full(k0, a, lda, w, ldw, acc, 4); break;
        }
    }
    for (; k0 < k; k0 += GML_VL) {
        const int nk = (int)GML_MIN((size_t)GML_VL, k - k0);
        const gml_vm km = gml_vm_first_i(nk);
        gml_vf r[GML_VL];
#pragma GCC unroll 16
        for (int j = 0; j < GML_VL; j++) {
            if (k0 + 64 < k) prefetch(row[j], k0 + 64);
            r[j] = gml_vf_load_m(row[j] + k0, km);
        }
        gml_vf_transpose(r);
        for (int kk = 0; kk < nk; kk++)
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
                if (i < m) acc[i] = gml_vf_fma(gml_vf_set1(a[i * lda + k0 + kk]), r[kk], acc[i]);
    }
    for (int i = 0; i < m; i++) gml_vf_store_m(c + i * ldc, gml_vm_first_i(n), acc[i]);
}

/* ---- matrix-vector against a converted weight (gemv.inc) -------------------
 * Dot products along k (gemm.h, "Matrix-vector against a converted
 * weight"): each 16-lane sum of the definition is S = 16 / GML_VL vectors
 * (lanes 0 .. GML_VL - 1, ...); per 32 k, a row of W is loaded and
 * converted once (2 S vectors: f16 with the ISA's conversion, bf16 widened
 * and shifted, q8_0's int8 widened and converted) and meets each row of A;
 * J = 4 / S rows of W at a time keep 4 J S = 16 sums in flight against 4
 * rows of A. Against one row of A: GML_VL rows of W at a time for q8_0
 * (q8_0_gemv_1xr), XW16_ROWS for f16 and bf16 (xw16_gemv_1xr). */
#define S (16 / GML_VL)
#define J (4 / S > 0 ? 4 / S : 1)

/* 32 values of a row of W from k0 (a whole run of 32) as f32 in w[0 .. 2S);
 * for q8_0 the int8 values, *d its block's scale. */
static inline void load32_f16(const char *row, size_t k0, gml_vf w[2 * S], gml_vf *d) {
    (void)d;
    const uint16_t *p = (const uint16_t *)(const void *)row + k0;
    for (int h = 0; h < 2 * S; h++) w[h] = gml_vf_load_f16(p + GML_VL * h);
}
static inline void load32_bf16(const char *row, size_t k0, gml_vf w[2 * S], gml_vf *d) {
    (void)d;
    const uint16_t *p = (const uint16_t *)(const void *)row + k0;
    for (int h = 0; h < 2 * S; h++) w[h] = gml_vf_load_bf16(p + GML_VL * h);
}
static inline void load32_q8_0(const char *row, size_t k0, gml_vf w[2 * S], gml_vf *d) {
    const gml_block_q8_0 *b = (const gml_block_q8_0 *)(const void *)row + k0 / GML_QK8_0;
    uint16_t h;
    memcpy(&h, &b->d, 2);
    *d = gml_vf_set1_f16(h);
    for (int q = 0; q < 2 * S; q++) w[q] = gml_vf_load_i8(b->qs + GML_VL * q);
}

/* One run of 32 k: s[0 .. S) += a . w as the definition orders it; ai the
 * 32 values of A's row in 2 S vectors. */
#define XW_STEP(Q8, s, ai, w, d)                                                          \
    do {                                                                                  \
        _Pragma("GCC unroll 4") for (int h = 0; h < S; h++) {                             \
            if (Q8) {                                                                     \
                const gml_vf p_ = gml_vf_fma((ai)[S + h], (w)[S + h],                     \
                                             gml_vf_mul((ai)[h], (w)[h]));                \
                (s)[h] = gml_vf_fma(d, p_, (s)[h]);                                       \
            } else {                                                                      \
                (s)[h] = gml_vf_fma((ai)[S + h], (w)[S + h],                              \
                                    gml_vf_fma((ai)[h], (w)[h], (s)[h]));                 \
            }                                                                             \
        }                                                                                 \
    } while (0)

/* A's 32 values from p in 2 S vectors */
#define LOAD_A32(ai, p)                                                                   \
    gml_vf ai[2 * S];                                                                     \
    _Pragma("GCC unroll 8") for (int h_ = 0; h_ < 2 * S; h_++) ai[h_] =                   \
        gml_vf_load((p) + GML_VL * h_)

/* q8_0 against one row of A (decoding), the same sums: GML_VL rows of W at
 * once (GML_VL streams in flight, A's loads per block shared by the rows),
 * and each block's GML_VL scales gathered as f16, converted by one vector
 * conversion and stored, so that each row's scale is a broadcast load (the
 * scalar conversion and register broadcast per row cost 3 shuffle-port
 * operations per block on AVX-512, as many as the block's products). Rows
 * past n reread row 0. */
static void q8_0_gemv_1xr(size_t k, const float *a, const void *w, size_t ldw, int n, float *c) {
    const char *row[GML_VL];
    for (int j = 0; j < GML_VL; j++) row[j] = (const char *)w + (size_t)(j < n ? j : 0) * ldw;
    gml_vf s[GML_VL][S];
    for (int j = 0; j < GML_VL; j++)
        for (int h = 0; h < S; h++) s[j][h] = gml_vf_zero();
    for (size_t b = 0; b < k / GML_QK8_0; b++) {
        _Alignas(64) float d[GML_VL];
        gml_vf_storea(d, gml_vf_gather_f16(row, b * sizeof(gml_block_q8_0)));
        /* keeps the compiler from turning the broadcasts of d[j] below into
         * shuffles of the register it was stored from */
        __asm__ volatile("" ::: "memory");
        const float *ab = a + 32 * b;
#pragma GCC unroll 16
        for (int j = 0; j < GML_VL; j++) {
            const gml_block_q8_0 *q = (const gml_block_q8_0 *)(const void *)row[j] + b;
            __builtin_prefetch((const void *)((uintptr_t)q + 8 * sizeof(gml_block_q8_0)), 0, 3);
            const gml_vf dj = gml_vf_set1(d[j]);
#pragma GCC unroll 4
            for (int h = 0; h < S; h++) {
                const gml_vf w0 = gml_vf_load_i8(q->qs + GML_VL * h);
                const gml_vf w1 = gml_vf_load_i8(q->qs + 16 + GML_VL * h);
                const gml_vf p = gml_vf_fma(gml_vf_load(ab + 16 + GML_VL * h), w1,
                                            gml_vf_mul(gml_vf_load(ab + GML_VL * h), w0));
                s[j][h] = gml_vf_fma(dj, p, s[j][h]);
            }
        }
    }
    for (int j = 0; j < n; j++) c[j] = gml_vf_sum16(s[j]);
}

/* f16 or bf16 against one row of A (decoding), the same sums: XW16_ROWS
 * rows of W at a time (twice the streams of the 4-row loop), A's loads per
 * 32 k shared by the rows; k a multiple of 32 (the caller takes a tail). */
#define XW16_ROWS (16 / S < 8 ? 16 / S : 8)
#define XW16_GEMV_1XR(NAME, LOAD32)                                                          \
    static void NAME(size_t kfull, const float *a, const void *w, size_t ldw, int n,         \
                     gml_vf (*s)[S]) {                                                       \
        const char *row[XW16_ROWS];                                                          \
        for (int j = 0; j < XW16_ROWS; j++)                                                  \
            row[j] = (const char *)w + (size_t)(j < n ? j : 0) * ldw;                        \
        for (int j = 0; j < XW16_ROWS; j++)                                                  \
            for (int h = 0; h < S; h++) s[j][h] = gml_vf_zero();                             \
        for (size_t k0 = 0; k0 < kfull; k0 += 32) {                                          \
            LOAD_A32(ai, a + k0);                                                            \
            _Pragma("GCC unroll 16") for (int j = 0; j < XW16_ROWS; j++) {                   \
                gml_vf wv[2 * S], d = gml_vf_zero();                                         \
                __builtin_prefetch((const void *)((uintptr_t)row[j] + 2 * k0 + 8 * 64), 0, 3); \
                LOAD32(row[j], k0, wv, &d);                                                  \
                XW_STEP(0, s[j], ai, wv, d);                                                 \
            }                                                                                \
        }                                                                                    \
    }
XW16_GEMV_1XR(f16_gemv_1xr, load32_f16)
XW16_GEMV_1XR(bf16_gemv_1xr, load32_bf16)

/* BLK: bytes per run of 32 values (the prefetch runs 8 runs ahead): f16,
 * bf16 64, q8_0 34. ROW1: the kernel for one row of A, or nothing. */
#define XW_GEMV(NAME, LOAD32, Q8, BLK, ROW1)                                                     \
    void NAME(size_t k, const float *a, size_t lda, int m, const void *w, size_t ldw, int n,     \
              float *c, size_t ldc) {                                                            \
        const size_t kfull = k / 32 * 32;                                                        \
        /* the tail (f16, bf16): A's rows and W's rows zero-padded to 32 */                      \
        float at[4][32];                                                                         \
        uint16_t wt[32];                                                                         \
        for (int i = 0; i < m; i++) {                                                            \
            memset(at[i], 0, sizeof at[i]);                                                      \
            memcpy(at[i], a + i * lda + kfull, (k - kfull) * sizeof(float));                     \
        }                                                                                        \
        ROW1                                                                                     \
        for (int j0 = 0; j0 < n; j0 += J) {                                                      \
            const int nj = GML_MIN(J, n - j0);                                                   \
            const char *row[J];                                                                  \
            for (int j = 0; j < J; j++)                                                          \
                row[j] = (const char *)w + (size_t)(j0 + (j < nj ? j : 0)) * ldw;                \
            gml_vf s[4][J][S];                                                                   \
            for (int i = 0; i < 4; i++)                                                          \
                for (int j = 0; j < J; j++)                                                      \
                    for (int h = 0; h < S; h++) s[i][j][h] = gml_vf_zero();                      \
            for (size_t k0 = 0; k0 < kfull; k0 += 32) {                                          \
                gml_vf wv[J][2 * S], d[J];                                                       \
                _Pragma("GCC unroll 4") for (int j = 0; j < J; j++) {                            \
                    d[j] = gml_vf_zero();                                                        \
                    __builtin_prefetch((const void *)((uintptr_t)row[j] + (k0 / 32 + 8) * BLK),  \
                                       0, 3);                                                    \
                    LOAD32(row[j], k0, wv[j], &d[j]);                                            \
                }                                                                                \
                _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {                            \
                    if (i >= m) break;                                                           \
                    LOAD_A32(ai, a + i * lda + k0);                                              \
                    _Pragma("GCC unroll 4") for (int j = 0; j < J; j++)                          \
                        XW_STEP(Q8, s[i][j], ai, wv[j], d[j]);                                   \
                }                                                                                \
            }                                                                                    \
            if (kfull < k) { /* never for q8_0 */                                                \
                for (int j = 0; j < nj; j++) {                                                   \
                    memset(wt, 0, sizeof wt);                                                    \
                    memcpy(wt, row[j] + 2 * kfull, (k - kfull) * 2);                             \
                    gml_vf wv[2 * S], d = gml_vf_zero();                                         \
                    LOAD32((const char *)wt, 0, wv, &d);                                         \
                    for (int i = 0; i < m; i++) {                                                \
                        LOAD_A32(ai, at[i]);                                                     \
                        XW_STEP(Q8, s[i][j], ai, wv, d);                                         \
                    }                                                                            \
                }                                                                                \
            }                                                                                    \
            for (int i = 0; i < m; i++)                                                          \
                for (int j = 0; j < nj; j++) c[i * ldc + j0 + j] = gml_vf_sum16(s[i][j]);        \
        }                                                                                        \
    }

/* One row of A against f16 or bf16 rows: FN over whole runs of 32, then the
 * tail as the loop above takes it. */
#define XW16_ROW1(FN, LOAD32)                                                                   \
    if (m == 1) {                                                                               \
        for (int j0 = 0; j0 < n; j0 += XW16_ROWS) {                                             \
            const int nj = GML_MIN(XW16_ROWS, n - j0);                                          \
            gml_vf s1[XW16_ROWS][S];                                                            \
            FN(kfull, a, (const char *)w + (size_t)j0 * ldw, ldw, nj, s1);                      \
            for (int j = 0; j < nj && kfull < k; j++) {                                         \
                memset(wt, 0, sizeof wt);                                                       \
                memcpy(wt, (const char *)w + (size_t)(j0 + j) * ldw + 2 * kfull, (k - kfull) * 2); \
                gml_vf wv[2 * S], d = gml_vf_zero();                                            \
                LOAD32((const char *)wt, 0, wv, &d);                                            \
                LOAD_A32(ai, at[0]);                                                            \
                XW_STEP(0, s1[j], ai, wv, d);                                                   \
            }                                                                                   \
            for (int j = 0; j < nj; j++) c[j0 + j] = gml_vf_sum16(s1[j]);                       \
        }                                                                                       \
        return;                                                                                 \
    }
XW_GEMV(GEMM_UKERNEL(f16_gemv, TILE_4xVL), load32_f16, 0, 64, XW16_ROW1(f16_gemv_1xr, load32_f16))
XW_GEMV(GEMM_UKERNEL(bf16_gemv, TILE_4xVL), load32_bf16, 0, 64,
        XW16_ROW1(bf16_gemv_1xr, load32_bf16))
XW_GEMV(GEMM_UKERNEL(q8_0_gemv, TILE_4xVL), load32_q8_0, 1, 34,
        if (m == 1) { q8_0_gemv_1xr(k, a, w, ldw, n, c); return; })
