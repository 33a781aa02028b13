/* The portable part of the f32 GEMM (see gemm.h): the reference
 * micro-kernel, the variant table, packing from any strides, cache blocking
 * and the split into chunks.
 *
 * Large products run Goto's loops around the micro-kernel, per chunk (a
 * tile of C of one batch):
 *
 *   for jc in tile's N, step NC            B block  kc x nc   (L2/L3)
 *     for pc in K, step KC
 *       pack B[pc.., jc..] -> Bp
 *       for ic in tile's M, step MC         A block  mc x kc   (L2)
 *         pack A[ic.., pc..] -> Ap
 *         for jr in nc, step NR             B micro-panel      (L1/L2)
 *           for ir in mc, step MR
 *             ukernel(Ap[ir], Bp[jr]) -> C[ic+ir.., jc+jr..]
 *
 * Few rows (M <= 32, decoding and small batches) are bound by reading B
 * (the weight) once, not by packing, and take one of two loops that stream
 * it. When B's rows are contiguous (C = A B), all of A's rows sit packed in
 * L1/L2 while B passes by in NR-column micro-panels read in place (this
 * also beats Goto's loops up to M = 64 by ~10%, so it runs up to there:
 * 64 x 4096 x 4096 131 vs 120, 48 x 1024 x 1024 165 vs 134). When B
 * is W^T with W's rows contiguous along k (an nn.Linear weight, or k^T in
 * q k^T), C^T = W A^T: the micro-kernel reads MR rows of W in place as its
 * A operand, against A^T packed once as its B operand, so W is never
 * copied. Measured on one core of this machine, against the loop it
 * replaces (Goto's, which transposes W while packing it, or the first one):
 * W from memory (4096 x 4096): M=1 6.3 vs 3.5, M=20 112 vs 55, M=64 180 vs
 * 102, M=256 188 vs 145 GFLOP/s. With short rows its transposed write of
 * C^T costs more than packing saves (W in cache, K=64: M=20 87 vs 106, 256
 * x 256 79 vs 150), so it takes K >= 256 for M <= 32, K >= 512 up to
 * M = 256, while A^T fits 16 MiB. Where A's M rows would pad a register
 * tile's NR columns (M = 20: 20 of 32 lanes of the AVX-512 14x32 tile), a
 * few-rows kernel of gemm_rt.inc runs instead (gemm.h, "Few rows against
 * W"): every lane busy, at the cost of interleaving W's rows on the stack.
 *
 * One to four rows against an nn.Linear weight (one token per sequence)
 * take a matrix-vector loop instead (gemm.h, "Matrix-vector"): any register
 * tile would be mostly padding there (the C^T = W A^T loop above ran M=1
 * 1024 x 1024 at 6.5 GB/s of weights, 645 us); transposing 16 x 16 blocks of
 * W in registers keeps every lane busy and streams W once.
 *
 * Threads: a chunk is (batch, M tile, N tile); threads take chunks with
 * gml_chunk_next and pack what they need into their own slice of the
 * scratch buffer, so no thread waits for another. One large product (one
 * batch, Goto's loops, tiles that split M) is split as BLIS splits it
 * instead: the threads pack each B block together into a buffer they
 * share, a barrier per block, and take chunks of M's rows against it
 * dynamically (run_large_shared); the tiles would pack B once per M tile. The K loop
 * is the same for every chunk and share, and each element is a single fma
 * chain (gemm.h), so the split changes no bit of the result. */
#include "gemm.h"
#include "ukernels.h"

#include <assert.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* ---- micro-kernels ------------------------------------------------------ */

void gml_f32_gemm_ukernel__ref(int mr, size_t kc, const float *a, size_t lda, const float *b,
                               size_t ldb, float *c, size_t ldc, int m, int n, bool acc) {
    const size_t a_rs = lda ? lda : 1, a_cs = lda ? 1 : (size_t)mr;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float s = acc ? c[(size_t)i * ldc + j] : 0.0f;
            for (size_t k = 0; k < kc; k++) s = fmaf(a[i * a_rs + k * a_cs], b[k * ldb + j], s);
            c[(size_t)i * ldc + j] = s;
        }
}

void gml_f32_gemm_ukernel__scalar_4x16(size_t kc, const float *a, size_t lda, const float *b,
                                       size_t ldb, float *c, size_t ldc, int m, int n, bool acc) {
    gml_f32_gemm_ukernel__ref(4, kc, a, lda, b, ldb, c, ldc, m, n, acc);
}

const gml_gemm_variant gml_gemm_variants[] = {
#define GML_UKERNEL(isa, fn, mr, nr, l1, l2, l3, nc_max)                                       \
    {isa, fn, mr, nr, l1, l2, l3, nc_max, #fn,                                                  \
     {#fn " (large)", #fn " (rows)", #fn " (rows_t)", #fn " (large, shared B)"}},
#include "gemm.inc"
#undef GML_UKERNEL
};
const int gml_gemm_n_variants = sizeof gml_gemm_variants / sizeof gml_gemm_variants[0];

/* Scalar matrix-vector kernel: the definition (gemm.h), any m and n. */
void gml_f32_gemv_ukernel__scalar_4x16(size_t k, const float *a, size_t lda, int m,
                                       const float *w, size_t ldw, int n, float *c, size_t ldc) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float s = 0.0f;
            for (size_t kk = 0; kk < k; kk++) s = fmaf(a[i * lda + kk], w[j * ldw + kk], s);
            c[i * ldc + j] = s;
        }
}

const gml_gemv_variant gml_gemv_variants[] = {
#define GML_GEMV_ENTRY(isa, fn, mr, nr) {isa, fn, mr, nr, #fn},
    GML_F32_GEMV_UKERNELS(GML_GEMV_ENTRY)
#undef GML_GEMV_ENTRY
};
const int gml_gemv_n_variants = sizeof gml_gemv_variants / sizeof gml_gemv_variants[0];

const gml_gemm_rt_variant gml_gemm_rt_variants[] = {
#define GML_RT_UKERNEL(isa, fn, mr, main, lanes, pack) \
    {isa, fn, mr, main, lanes, pack, #fn " (rows_t)"},
#include "gemm_rt.inc"
#undef GML_RT_UKERNEL
};
const int gml_gemm_rt_n_variants = sizeof gml_gemm_rt_variants / sizeof gml_gemm_rt_variants[0];

const gml_gemm_rt_variant *gml_gemm_rt_for(gml_isa isa) {
    for (int i = 0; i < gml_gemm_rt_n_variants; i++)
        if (gml_gemm_rt_variants[i].isa == isa) return &gml_gemm_rt_variants[i];
    return NULL;
}

/* An element of a row of W of type t (f16, bf16, q8_0) as f32. */
static inline float w_at(gml_type t, const char *row, size_t k) {
    uint16_t h;
    if (t == GML_Q8_0) {
        const gml_block_q8_0 *b = (const gml_block_q8_0 *)(const void *)row + k / GML_QK8_0;
        memcpy(&h, &b->d, 2);
        return gml_fp16_to_fp32(h) * (float)b->qs[k % GML_QK8_0];
    }
    memcpy(&h, row + 2 * k, 2);
    return t == GML_F16 ? gml_fp16_to_fp32(h) : gml_bf16_to_fp32(h);
}

/* Scalar matrix-vector kernels on a converted weight: the definition of
 * gemm.h ("against a converted weight"), 16 lane sums emulated. */
static inline void xw_gemv_scalar(gml_type t, size_t k, const float *a, size_t lda, int m,
                                  const void *w, size_t ldw, int n, float *c, size_t ldc) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            const char *row = (const char *)w + (size_t)j * ldw;
            float s[16] = {0};
            for (size_t k0 = 0; k0 < k; k0 += 32) {
                const gml_block_q8_0 *b = (const gml_block_q8_0 *)(const void *)row + k0 / 32;
                for (int l = 0; l < 16; l++) {
                    const size_t k1 = k0 + (size_t)l, k2 = k1 + 16;
                    const float a1 = k1 < k ? a[i * lda + k1] : 0.0f, a2 = k2 < k ? a[i * lda + k2] : 0.0f;
                    if (t == GML_Q8_0) { /* the int8 values, then the block's scale */
                        uint16_t h;
                        memcpy(&h, &b->d, 2);
                        const float p = fmaf(a2, (float)b->qs[l + 16], a1 * (float)b->qs[l]);
                        s[l] = fmaf(gml_fp16_to_fp32(h), p, s[l]);
                    } else {
                        const float w1 = k1 < k ? w_at(t, row, k1) : 0.0f;
                        const float w2 = k2 < k ? w_at(t, row, k2) : 0.0f;
                        s[l] = fmaf(a2, w2, fmaf(a1, w1, s[l]));
                    }
                }
            }
            float u[8];
            for (int l = 0; l < 8; l++) u[l] = s[l] + s[l + 8];
            for (int l = 0; l < 4; l++) u[l] = u[l] + u[l + 4];
            for (int l = 0; l < 2; l++) u[l] = u[l] + u[l + 2];
            c[i * ldc + j] = u[0] + u[1];
        }
}
void gml_f16_gemv_ukernel__scalar_4x16(size_t k, const float *a, size_t lda, int m, const void *w,
                                       size_t ldw, int n, float *c, size_t ldc) {
    xw_gemv_scalar(GML_F16, k, a, lda, m, w, ldw, n, c, ldc);
}
void gml_bf16_gemv_ukernel__scalar_4x16(size_t k, const float *a, size_t lda, int m,
                                        const void *w, size_t ldw, int n, float *c, size_t ldc) {
    xw_gemv_scalar(GML_BF16, k, a, lda, m, w, ldw, n, c, ldc);
}
void gml_q8_0_gemv_ukernel__scalar_4x16(size_t k, const float *a, size_t lda, int m,
                                        const void *w, size_t ldw, int n, float *c, size_t ldc) {
    xw_gemv_scalar(GML_Q8_0, k, a, lda, m, w, ldw, n, c, ldc);
}

#define GML_XW_GEMV_ENTRY(isa, fn, mr, nr) {isa, fn, mr, nr, #fn},
static const gml_xw_gemv_variant f16_gemv[] = {GML_F16_GEMV_UKERNELS(GML_XW_GEMV_ENTRY)};
static const gml_xw_gemv_variant bf16_gemv[] = {GML_BF16_GEMV_UKERNELS(GML_XW_GEMV_ENTRY)};
static const gml_xw_gemv_variant q8_0_gemv[] = {GML_Q8_0_GEMV_UKERNELS(GML_XW_GEMV_ENTRY)};
#undef GML_XW_GEMV_ENTRY

const gml_xw_gemv_variant *gml_xw_gemv_variants(gml_type t, int *n) {
    *n = (int)(sizeof f16_gemv / sizeof f16_gemv[0]); /* each list: one entry per ISA */
    return t == GML_F16 ? f16_gemv : t == GML_BF16 ? bf16_gemv : t == GML_Q8_0 ? q8_0_gemv : NULL;
}

const gml_xw_gemv_variant *gml_xw_gemv_pick(gml_isa isa, gml_type t) {
    int n;
    const gml_xw_gemv_variant *v = gml_xw_gemv_variants(t, &n);
    gml_isa isas[sizeof f16_gemv / sizeof f16_gemv[0]];
    for (int i = 0; i < n; i++) isas[i] = v[i].isa;
    return &v[gml_pick_variant(isa, isas, n)];
}

const gml_gemv_variant *gml_gemv_pick(gml_isa isa) {
    gml_isa isas[sizeof gml_gemv_variants / sizeof gml_gemv_variants[0]];
    for (int i = 0; i < gml_gemv_n_variants; i++) isas[i] = gml_gemv_variants[i].isa;
    return &gml_gemv_variants[gml_pick_variant(isa, isas, gml_gemv_n_variants)];
}

const gml_gemm_variant *gml_gemm_pick(gml_isa isa) {
    gml_isa isas[sizeof gml_gemm_variants / sizeof gml_gemm_variants[0]];
    for (int i = 0; i < gml_gemm_n_variants; i++) isas[i] = gml_gemm_variants[i].isa;
    return &gml_gemm_variants[gml_pick_variant(isa, isas, gml_gemm_n_variants)];
}

/* ---- packing ------------------------------------------------------------ */

static inline float at(const char *p, int64_t i, int64_t si, int64_t j, int64_t sj) {
    return *(const float *)(p + i * si + j * sj);
}

/* dst[k * ld + i] = row i's element k, for i < rows, k < kc: rows that are
 * contiguous along k (row stride rs bytes) turned k-major, as packing needs
 * for a row-major A and for B = W^T. 4x4 blocks go through SSE registers
 * (baseline x86-64), 2.4x faster than element by element; two rows left
 * over go as 2x4 blocks. ahead (bytes, 0 for none): the rows that many
 * bytes further are the next call's (the next MR-row panel), prefetched a
 * line per row every 16 k: the rows are usually pages apart, each read
 * for only kc floats, too short a run for the hardware prefetchers
 * (transpose_rows 3.6-4.2% -> 3.0-3.1% of 1024^3's samples on one thread,
 * perf, cpu-clock). */
#ifdef __SSE2__
static inline void prefetch_line(uintptr_t p) { __builtin_prefetch((const void *)p, 0, 3); }
#endif

static void transpose_rows(const char *src, int64_t rs, int rows, int64_t kc, int ld, float *dst,
                           int64_t ahead) {
    int i = 0;
#ifdef __SSE2__
    for (; i + 4 <= rows; i += 4) {
        const float *r0 = (const float *)(src + i * rs);
        const float *r1 = (const float *)(src + (i + 1) * rs);
        const float *r2 = (const float *)(src + (i + 2) * rs);
        const float *r3 = (const float *)(src + (i + 3) * rs);
        int64_t k = 0;
        for (; k + 4 <= kc; k += 4) {
            if (ahead && k % 16 == 0) /* a line of each of the next 4 rows */
                for (int r = 0; r < 4; r++)
                    prefetch_line((uintptr_t)(r0 + k) + (uintptr_t)ahead + (uintptr_t)(r * rs));
            __m128 x0 = _mm_loadu_ps(r0 + k), x1 = _mm_loadu_ps(r1 + k);
            __m128 x2 = _mm_loadu_ps(r2 + k), x3 = _mm_loadu_ps(r3 + k);
            _MM_TRANSPOSE4_PS(x0, x1, x2, x3);
            _mm_storeu_ps(dst + (k + 0) * ld + i, x0);
            _mm_storeu_ps(dst + (k + 1) * ld + i, x1);
            _mm_storeu_ps(dst + (k + 2) * ld + i, x2);
            _mm_storeu_ps(dst + (k + 3) * ld + i, x3);
        }
        for (; k < kc; k++) {
            dst[k * ld + i] = r0[k];
            dst[k * ld + i + 1] = r1[k];
            dst[k * ld + i + 2] = r2[k];
            dst[k * ld + i + 3] = r3[k];
        }
    }
    /* two rows left (MR 6 and 14: a third and a seventh of A): 4 x 2
     * blocks, pairs (r0[k], r1[k]) stored as 8 bytes each */
    for (; i + 2 <= rows; i += 2) {
        const float *r0 = (const float *)(src + i * rs);
        const float *r1 = (const float *)(src + (i + 1) * rs);
        int64_t k = 0;
        for (; k + 4 <= kc; k += 4) {
            if (ahead && k % 16 == 0)
                for (int r = 0; r < 2; r++)
                    prefetch_line((uintptr_t)(r0 + k) + (uintptr_t)ahead + (uintptr_t)(r * rs));
            const __m128 x0 = _mm_loadu_ps(r0 + k), x1 = _mm_loadu_ps(r1 + k);
            const __m128 lo = _mm_unpacklo_ps(x0, x1), hi = _mm_unpackhi_ps(x0, x1);
            _mm_storel_pi((__m64 *)(void *)(dst + (k + 0) * ld + i), lo);
            _mm_storeh_pi((__m64 *)(void *)(dst + (k + 1) * ld + i), lo);
            _mm_storel_pi((__m64 *)(void *)(dst + (k + 2) * ld + i), hi);
            _mm_storeh_pi((__m64 *)(void *)(dst + (k + 3) * ld + i), hi);
        }
        for (; k < kc; k++) {
            dst[k * ld + i] = r0[k];
            dst[k * ld + i + 1] = r1[k];
        }
    }
#else
    (void)ahead; /* prefetched with the SSE blocks only */
#endif
    for (; i < rows; i++) {
        const float *r = (const float *)(src + i * rs);
        for (int64_t k = 0; k < kc; k++) dst[k * ld + i] = r[k];
    }
}

/* A block [mc x kc], element (i, k) at a + i*rs + k*cs, into MR-row panels
 * (gemm.h), rows past mc zero. */
static void pack_a(const char *a, int64_t rs, int64_t cs, int64_t mc, int64_t kc, int mr,
                   float *dst) {
    for (int64_t i0 = 0; i0 < mc; i0 += mr, dst += kc * mr) {
        const int rows = (int)GML_MIN((int64_t)mr, mc - i0);
        if (cs == sizeof(float)) { /* rows contiguous along k */
            transpose_rows(a + i0 * rs, rs, rows, kc, mr, dst, i0 + mr < mc ? mr * rs : 0);
        } else {
            for (int64_t k = 0; k < kc; k++)
                for (int i = 0; i < rows; i++) dst[k * mr + i] = at(a, i0 + i, rs, k, cs);
        }
        for (int64_t k = 0; k < kc && rows < mr; k++)
            for (int i = rows; i < mr; i++) dst[k * mr + i] = 0.0f;
    }
}

/* B block [kc x nc], element (k, j) at b + k*rs + j*cs, into NR-column
 * panels (gemm.h), columns past nc zero. */
static void pack_b(const char *b, int64_t rs, int64_t cs, int64_t kc, int64_t nc, int nr,
                   float *dst) {
    if (cs == sizeof(float) && (nr == 16 || nr == 24 || nr == 32)) {
        /* rows contiguous along n, the full panels of the tiles in gemm.inc:
         * row by row across the panels, so that B is read along its rows
         * (a panel at a time read 128 bytes per row, rows a page apart:
         * pack_b 3.7 -> 3.1% of 1024^3 on one thread, perf), in fixed-size
         * copies the compiler inlines as vector moves (a memcpy call per k
         * row cost as much as the copy) */
        const int64_t full = nc / nr, step = kc * nr;
        for (int64_t k = 0; k < kc; k++) {
            const char *src = b + k * rs;
            float *out = dst + k * nr;
            if (nr == 16)
                for (int64_t q = 0; q < full; q++) memcpy(out + q * step, src + q * 16 * 4, 16 * 4);
            else if (nr == 24)
                for (int64_t q = 0; q < full; q++) memcpy(out + q * step, src + q * 24 * 4, 24 * 4);
            else
                for (int64_t q = 0; q < full; q++) memcpy(out + q * step, src + q * 32 * 4, 32 * 4);
        }
        b += full * nr * cs;
        dst += full * step;
        nc -= full * nr;
    }
    for (int64_t j0 = 0; j0 < nc; j0 += nr, dst += kc * nr) {
        const int cols = (int)GML_MIN((int64_t)nr, nc - j0);
        if (cs == sizeof(float)) { /* rows contiguous along n */
            const char *src = b + j0 * cs;
            for (int64_t k = 0; k < kc; k++)
                memcpy(dst + k * nr, src + k * rs, (size_t)cols * sizeof(float));
        } else if (rs == sizeof(float)) { /* columns contiguous along k: b = w^T */
            transpose_rows(b + j0 * cs, cs, cols, kc, nr, dst, j0 + nr < nc ? nr * cs : 0);
        } else {
            for (int64_t k = 0; k < kc; k++)
                for (int j = 0; j < cols; j++) dst[k * nr + j] = at(b, k, rs, j0 + j, cs);
        }
        for (int64_t k = 0; k < kc && cols < nr; k++)
            for (int j = cols; j < nr; j++) dst[k * nr + j] = 0.0f;
    }
}

/* B of another type (gml_gemm_desc.b_type) into the same f32 panels: a
 * W^T (k contiguous in W's rows, and always for q8_0) converts each of W's
 * rows kc values at a time with the conversion micro-kernel of the ISA in
 * effect, into tmp (kc floats), then spreads them over the panel; other
 * strides element by element. b points at element (k0, 0) of the block
 * (for q8_0, k0 a multiple of 32). The values, so the products, are those
 * of an f32 B holding the converted weight. */
static void pack_b_typed(gml_isa isa, gml_type type, const char *b, int64_t rs, int64_t cs, int64_t kc,
                         int64_t nc, int nr, float *dst, float *tmp) {
    const bool rows = type == GML_Q8_0 || rs == 2;
    gml_cvt_ukernel *cvt = gml_cvt_to_f32(isa, type, NULL);
    for (int64_t j0 = 0; j0 < nc; j0 += nr, dst += kc * nr) {
        const int cols = (int)GML_MIN((int64_t)nr, nc - j0);
        for (int j = 0; j < cols; j++) {
            const char *row = b + (j0 + j) * cs;
            if (rows) {
                cvt((size_t)kc, row, tmp);
                for (int64_t k = 0; k < kc; k++) dst[k * nr + j] = tmp[k];
            } else {
                for (int64_t k = 0; k < kc; k++) {
                    uint16_t h;
                    memcpy(&h, row + k * rs, 2);
                    dst[k * nr + j] = type == GML_F16 ? gml_fp16_to_fp32(h) : gml_bf16_to_fp32(h);
                }
            }
        }
        for (int64_t k = 0; k < kc && cols < nr; k++)
            for (int j = cols; j < nr; j++) dst[k * nr + j] = 0.0f;
    }
}

/* A^T for a few-rows kernel (gemm.h, "Few rows against W"). Rows of A
 * contiguous along k go through transpose_rows (the tail rows through a
 * small buffer, then each value repeated); other strides element by element. */
void gml_gemm_rt_pack(const gml_gemm_rt_variant *v, const char *a, int64_t rs, int64_t cs,
                      int64_t K, int n, float *at) {
    const int main = v->main, ld = main + v->lanes, rep = v->lanes / 4;
    if (cs != sizeof(float)) {
        for (int64_t k = 0; k < K; k++) {
            float *dst = at + k * ld;
            for (int j = 0; j < main; j++)
                dst[j] = j < n ? *(const float *)(a + j * rs + k * cs) : 0.0f;
            for (int t = 0; t < 4; t++) {
                const float x =
                    main + t < n ? *(const float *)(a + (main + t) * rs + k * cs) : 0.0f;
                for (int r = 0; r < rep; r++) dst[main + t * rep + r] = x;
            }
        }
        return;
    }
    /* 64 k at a time, so that the rows' passes over the panel stay in L1
     * (the whole panel at once, 64 KiB at K = 512, cost C1's projections 8 us) */
    const int n_main = GML_MIN(n, main), n_tail = GML_MAX(n - main, 0);
    enum { CHUNK = 64 };
    float tmp[CHUNK * 4];
    for (int64_t k0 = 0; k0 < K; k0 += CHUNK) {
        const int64_t kc = GML_MIN((int64_t)CHUNK, K - k0);
        transpose_rows(a + k0 * cs, rs, n_main, kc, ld, at + k0 * ld, 0);
        for (int64_t k = k0; k < k0 + kc && n_main < main; k++)
            for (int j = n_main; j < main; j++) at[k * ld + j] = 0.0f;
        memset(tmp, 0, sizeof tmp);
        if (n_tail > 0) transpose_rows(a + main * rs + k0 * cs, rs, n_tail, kc, 4, tmp, 0);
        for (int64_t k = 0; k < kc; k++) {
            float *dst = at + (k0 + k) * ld + main;
#ifdef __SSE2__
            const __m128 x = _mm_loadu_ps(tmp + k * 4);
            if (rep == 4) {
                _mm_storeu_ps(dst, _mm_shuffle_ps(x, x, 0x00));
                _mm_storeu_ps(dst + 4, _mm_shuffle_ps(x, x, 0x55));
                _mm_storeu_ps(dst + 8, _mm_shuffle_ps(x, x, 0xaa));
                _mm_storeu_ps(dst + 12, _mm_shuffle_ps(x, x, 0xff));
                continue;
            }
            if (rep == 2) {
                _mm_storeu_ps(dst, _mm_unpacklo_ps(x, x));
                _mm_storeu_ps(dst + 4, _mm_unpackhi_ps(x, x));
                continue;
            }
#endif
            for (int t = 0; t < 4; t++)
                for (int r = 0; r < rep; r++) dst[t * rep + r] = tmp[k * 4 + t];
        }
    }
}

/* Byte offset of k along B's rows: k * b_rs, or k / 32 blocks for q8_0. */
static inline int64_t b_koff(const gml_gemm_desc *d, int64_t k) {
    return d->b_type == GML_Q8_0 ? k / GML_QK8_0 * d->b_rs : k * d->b_rs;
}

/* ---- cache sizes and blocks (gemm.h, "Cache blocks") -------------------- */

enum { DEFAULT_L1 = 32 << 10, DEFAULT_L2 = 512 << 10, DEFAULT_L3 = 2 << 20 };

/* L1d, L2, L3 bytes per core; 0 until read. */
static _Atomic int64_t cache_bytes[3];

/* The first line of a sysfs file, or "" when it cannot be read. */
static void read_line(const char *path, char *buf, size_t size) {
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (!fgets(buf, (int)size, f)) buf[0] = '\0';
    fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
}

/* "48K", "2048K", "260M" -> bytes; 0 if not such a size. */
static int64_t parse_size(const char *s) {
    char *end;
    const long long v = strtoll(s, &end, 10);
    if (end == s || v <= 0) return 0;
    const int64_t unit = *end == 'K' ? 1 << 10 : *end == 'M' ? 1 << 20 : *end == 'G' ? 1 << 30 : 1;
    return (int64_t)v * unit;
}

/* CPUs in a list such as "0-1" or "0,2,4-7"; at least 1. */
static int64_t count_cpus(const char *s) {
    int64_t n = 0;
    while (*s) {
        char *end;
        const long a = strtol(s, &end, 10);
        if (end == s) break;
        long b = a;
        if (*end == '-') b = strtol(end + 1, &end, 10);
        if (b >= a) n += b - a + 1;
        s = *end == ',' ? end + 1 : end;
        if (*end != ',') break;
    }
    return n > 0 ? n : 1;
}

/* The machine's data caches from sysfs; the defaults where absent. */
static void read_caches(int64_t bytes[3]) {
    bytes[0] = DEFAULT_L1, bytes[1] = DEFAULT_L2, bytes[2] = DEFAULT_L3;
    for (int i = 0; i < 8; i++) {
        char path[96], level[16], type[32], size[32], shared[256];
        const char *dir = "/sys/devices/system/cpu/cpu0/cache/index";
        snprintf(path, sizeof path, "%s%d/level", dir, i);
        read_line(path, level, sizeof level);
        snprintf(path, sizeof path, "%s%d/type", dir, i);
        read_line(path, type, sizeof type);
        snprintf(path, sizeof path, "%s%d/size", dir, i);
        read_line(path, size, sizeof size);
        snprintf(path, sizeof path, "%s%d/shared_cpu_list", dir, i);
        read_line(path, shared, sizeof shared);
        const int lv = atoi(level);
        const int64_t b = parse_size(size);
        if (lv < 1 || lv > 3 || b <= 0 || strcmp(type, "Instruction") == 0) continue;
        bytes[lv - 1] = lv == 3 ? b / count_cpus(shared) : b;
    }
}

void gml_gemm_caches(int64_t bytes[3]) {
    if (atomic_load(&cache_bytes[0]) == 0) {
        int64_t b[3];
        read_caches(b);
        atomic_store(&cache_bytes[2], b[2]);
        atomic_store(&cache_bytes[1], b[1]);
        atomic_store(&cache_bytes[0], b[0]); /* last: the flag */
    }
    for (int i = 0; i < 3; i++) bytes[i] = atomic_load(&cache_bytes[i]);
}

void gml_gemm_set_caches(const int64_t bytes[3]) {
    atomic_store(&cache_bytes[0], 0);
    if (!bytes) return;
    atomic_store(&cache_bytes[2], bytes[2]);
    atomic_store(&cache_bytes[1], bytes[1]);
    atomic_store(&cache_bytes[0], bytes[0]);
}

static int64_t clamp64(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : x > hi ? hi : x; }

gml_gemm_blocks gml_gemm_blocking(const gml_gemm_variant *v) {
    int64_t c[3];
    gml_gemm_caches(c);
    const int64_t mr = v->mr, nr = v->nr, fl = (int64_t)sizeof(float);
    gml_gemm_blocks b;
    b.kc = clamp64(c[0] * v->l1_pct / 100 / (fl * nr) / 8 * 8, 64, 1024);
    b.mc = clamp64(c[1] * v->l2_pct / 100 / (fl * b.kc) / mr * mr, mr, 4096 / mr * mr);
    const int64_t nc_max = GML_MAX((int64_t)v->nc_max / nr * nr, 4 * nr);
    b.nc = clamp64(c[2] * v->l3_pct / 100 / (fl * b.kc) / nr * nr, 4 * nr, nc_max);
    return b;
}

/* ---- blocking and chunks ------------------------------------------------ */

enum {
    GEMM_SMALL_M = 32,      /* few rows: decoding, small batches */
    GEMM_ROWS_M = 64,       /* PATH_ROWS up to here */
    GEMM_ROWS_T_M = 256,    /* PATH_ROWS_T up to here, when K is at least */
    GEMM_ROWS_T_K = 512,    /* this (M > 32) */
    GEMM_ROWS_T_K_SMALL = 256, /* or this (M <= 32), and while A^T fits: */
    GEMM_ROWS_T_MAX_FLOATS = 4 << 20,
    GEMM_MAX_NR = 32,       /* the widest tile in gemm.inc */
    GEMM_SMALL_KC = 512,
    GEMM_MIN_CHUNK_FLOPS = 4 << 20, /* smaller chunks cost more than they balance */
    GEMM_GEMV_M = 4,        /* PATH_GEMV up to here (every gemv.inc variant's MR) */
    GEMM_GEMV_NR = 16,      /* the widest gemv.inc tile */
    GEMM_GEMV_CHUNK_N = 64, /* PATH_GEMV chunks: at least this many columns */
    /* run_large_shared: MR-row panels per thread and per row chunk at
     * least, NR-column panels; NR-column panels per packing item */
    GEMM_SHARED_MIN_PANELS = 4,
    GEMM_SHARED_PACK_PANELS = 4,
};

/* How a product runs: Goto's loops, or one of the few-rows loops. */
typedef enum gemm_path {
    PATH_LARGE,  /* Goto's loops */
    PATH_ROWS,   /* M <= 64, C = A B: B streams in NR-column micro-panels */
    PATH_ROWS_T, /* M <= 256 and long K, B = W^T with W's rows contiguous
                    along k (an nn.Linear weight): C^T = W A^T, W read in
                    place as the micro-kernel's A, A^T packed as its B */
    PATH_GEMV,   /* M <= 4, B = W^T as above: the matrix-vector kernels */
} gemm_path;

typedef struct gemm_plan {
    gemm_path path;
    int64_t MC, KC, NC;     /* cache blocks */
    int64_t tm, tn;         /* chunk tile */
    int64_t mt, nt;         /* tiles per batch along M and N */
    int64_t n_chunks;
    size_t a_floats, b_floats; /* per-thread panels */
    /* PATH_LARGE, one product on several threads: the threads split M and
     * share each packed B block (run_large_shared); shared_floats is the
     * two B blocks they take turns on, ahead of the threads' slices */
    bool shared;
    size_t shared_floats;
} gemm_plan;

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t round_up(int64_t a, int64_t b) { return cdiv(a, b) * b; }

/* The block size that cuts n into as few blocks of at most `block` as
 * `block` does, as evenly as multiples of unit allow (block a multiple of
 * unit): at most block, and round_up(n, unit) when n <= block. */
static int64_t even_block(int64_t n, int64_t block, int64_t unit) {
    return round_up(cdiv(n, cdiv(n, block)), unit);
}

static bool is_float_stride(int64_t s) { return s > 0 && s % (int64_t)sizeof(float) == 0; }

static gemm_path choose_path(const gml_gemm_desc *d) {
    if (d->b_type != GML_F32) { /* no path reads such a B in place but the gemv */
        const bool w_rows = d->b_type == GML_Q8_0 || d->b_rs == 2;
        if (w_rows && d->M <= GEMM_GEMV_M) return PATH_GEMV;
        return d->M > GEMM_ROWS_M ? PATH_LARGE : PATH_ROWS;
    }
    const bool w_rows = d->b_rs == sizeof(float) && d->b_cs != sizeof(float) &&
                        is_float_stride(d->b_cs) && (uintptr_t)d->b % sizeof(float) == 0 &&
                        d->b_bs[0] % (int64_t)sizeof(float) == 0 &&
                        d->b_bs[1] % (int64_t)sizeof(float) == 0;
    if (w_rows && d->M <= GEMM_GEMV_M) return PATH_GEMV;
    const bool long_k = d->K >= (d->M <= GEMM_SMALL_M ? GEMM_ROWS_T_K_SMALL : GEMM_ROWS_T_K);
    if (w_rows && long_k && d->M <= GEMM_ROWS_T_M &&
        round_up(d->M, GEMM_MAX_NR) * d->K <= GEMM_ROWS_T_MAX_FLOATS)
        return PATH_ROWS_T;
    if (d->M > GEMM_ROWS_M) return PATH_LARGE;
    return PATH_ROWS;
}

/* Tiles of C handed out as chunks: about 3 per thread (dynamic chunks
 * absorb threads that run slower), each large enough to amortize packing
 * (the larger side of a tile is split first). One thread: one tile. Few
 * rows: only N is split. */
static void plan_tiles(gemm_plan *pl, const gml_gemm_desc *d, int mr, int nr, int nth,
                       int rt_mr) {
    const int64_t M = d->M, N = d->N, nbatch = d->nb0 * d->nb1;
    int64_t want = 1;
    if (nth > 1) {
        double flops = 2.0 * (double)M * (double)N * (double)d->K * (double)nbatch;
        want = GML_MIN(3 * (int64_t)nth, (int64_t)(flops / GEMM_MIN_CHUNK_FLOPS));
        if (pl->path == PATH_GEMV) /* bound by reading W: split it from a few rows on */
            want = GML_MIN(3 * (int64_t)nth, cdiv(N, GEMM_GEMV_CHUNK_N));
        want = GML_MAX(want, (int64_t)1);
    }
    const bool large = pl->path == PATH_LARGE;
    const int64_t n_unit = pl->path == PATH_ROWS_T ? (rt_mr ? rt_mr : mr) /* whole micro-tiles */
                           : pl->path == PATH_GEMV ? GEMM_GEMV_NR
                                                   : nr;
    const int64_t per_batch = cdiv(want, nbatch);
    const int64_t min_m = large ? 4 * mr : M, min_n = (large ? 4 : 2) * n_unit;
    int64_t mt = 1, nt = 1;
    while (mt * nt < per_batch) {
        const int64_t tile_m = cdiv(M, mt), tile_n = cdiv(N, nt);
        const bool split_n = tile_n >= 2 * min_n, split_m = large && tile_m >= 2 * min_m;
        if (split_n && (tile_n >= tile_m || !split_m)) nt++;
        else if (split_m) mt++;
        else break;
    }
    pl->tm = mt == 1 ? M : round_up(cdiv(M, mt), mr);
    pl->tn = nt == 1 ? N : round_up(cdiv(N, nt), n_unit);
    pl->mt = cdiv(M, pl->tm);
    pl->nt = cdiv(N, pl->tn);
    pl->n_chunks = nbatch * pl->mt * pl->nt;
}

/* Floats per k of A^T packed for the widest few-rows kernel (gemm_rt.inc). */
static int64_t rt_floats(int64_t M) {
    int64_t most = 0;
    for (int i = 0; i < gml_gemm_rt_n_variants; i++) {
        const gml_gemm_rt_variant *v = &gml_gemm_rt_variants[i];
        most = GML_MAX(most, cdiv(M, v->main + 4) * (v->main + v->lanes));
    }
    return most;
}

/* rt_mr: the few-rows kernel's MR when PATH_ROWS_T runs one (its N tiles in
 * whole calls), else 0. */
static gemm_plan make_plan(const gml_gemm_desc *d, const gml_gemm_variant *v, int nth, int rt_mr) {
    const int mr = v->mr, nr = v->nr;
    gemm_plan pl = {.path = choose_path(d)};
    plan_tiles(&pl, d, mr, nr, nth, rt_mr);
    const int64_t K = GML_MAX(d->K, (int64_t)1);
    switch (pl.path) {
    case PATH_LARGE: {
        const gml_gemm_blocks bl = gml_gemm_blocking(v);
        /* KC, MC, NC as even as the same number of blocks allow (1024 =
         * 5 x 176 + 144, not 5 x 192 + 64): no thin last block, whose
         * B micro-panels pass through L1 for a few calls each */
        const int64_t k_unit = d->b_type == GML_Q8_0 ? GML_QK8_0 : 8;
        /* q8_0: whole blocks of 32 (a tile's KC is a multiple of 8 only:
         * 336 for NEON's 8x12 with a 32 KiB L1) */
        pl.KC = even_block(K, GML_MAX(bl.kc / k_unit * k_unit, k_unit), k_unit);
        pl.KC = GML_MIN(K, pl.KC);
        /* only where the tiles split M (mt > 1: each M tile packed B again);
         * tiles split along N alone pack B once already, and each thread
         * reads only its columns of B */
        pl.shared = nth > 1 && d->nb0 * d->nb1 == 1 && pl.n_chunks >= nth && pl.mt > 1 &&
                    d->M >= (int64_t)nth * GEMM_SHARED_MIN_PANELS * mr &&
                    d->N > GEMM_SHARED_MIN_PANELS * (int64_t)nr;
        if (pl.shared) { /* each thread's rows in MR units, the whole N */
            pl.MC = even_block(cdiv(cdiv(d->M, mr), (int64_t)nth) * mr, bl.mc, mr);
            pl.NC = even_block(d->N, bl.nc, nr);
            pl.a_floats = (size_t)(pl.MC * pl.KC);
            if (d->b_type != GML_F32) pl.a_floats += (size_t)pl.KC; /* pack_b_typed's row */
            pl.shared_floats = 2 * gml_align_up((size_t)(pl.KC * pl.NC), GML_ALIGN / sizeof(float));
            break;
        }
        pl.MC = even_block(pl.tm, bl.mc, mr);
        pl.NC = even_block(pl.tn, bl.nc, nr);
        pl.a_floats = (size_t)(pl.MC * pl.KC);
        pl.b_floats = (size_t)(pl.KC * pl.NC);
        if (d->b_type != GML_F32) pl.b_floats += (size_t)pl.KC; /* pack_b_typed's row */
        break;
    }
    case PATH_ROWS:
        pl.KC = GML_MIN(K, (int64_t)GEMM_SMALL_KC);
        pl.a_floats = (size_t)(round_up(d->M, mr) * pl.KC);
        pl.b_floats = (size_t)(pl.KC * nr);
        if (d->b_type != GML_F32) pl.b_floats += (size_t)pl.KC; /* pack_b_typed's row */
        break;
    case PATH_ROWS_T: /* A^T, all of K, in NR-column panels (or a few-rows kernel's) */
        pl.KC = K;
        pl.b_floats = (size_t)(K * GML_MAX(round_up(d->M, nr), rt_floats(d->M)));
        break;
    case PATH_GEMV: /* A's rows, contiguous */
        pl.KC = K;
        pl.a_floats = (size_t)(d->M * K);
        break;
    }
    pl.a_floats = gml_align_up(pl.a_floats, GML_ALIGN / sizeof(float));
    pl.b_floats = gml_align_up(pl.b_floats, GML_ALIGN / sizeof(float));
    return pl;
}

size_t gml_gemm_work_size(const gml_gemm_desc *d, int nth) {
    size_t most = 0;
    for (int i = 0; i < gml_gemm_n_variants; i++) {
        gemm_plan pl = make_plan(d, &gml_gemm_variants[i], nth, 0);
        most = GML_MAX(most, (pl.shared_floats + (pl.a_floats + pl.b_floats) * (size_t)nth) *
                                 sizeof(float));
    }
    return most;
}

/* ---- one chunk ---------------------------------------------------------- */

/* The operands of one tile: A rows [m0, m0+tm), B columns [n0, n0+tn). */
typedef struct gemm_tile {
    const char *a, *b;
    float *c;
    int64_t tm, tn;
} gemm_tile;

/* The macro-kernel: C[mc x nc] (row stride ldc) (+)= the A block (packed
 * MR-row panels, or rows in place lda floats apart) times the packed B
 * block (NR-column panels), kc deep. */
static void macro_kernel(const gml_gemm_variant *v, int64_t mc, int64_t nc, int64_t kc,
                         const float *a, size_t lda, const float *bp, float *c, size_t ldc,
                         bool acc) {
    const int mr = v->mr, nr = v->nr;
    const int64_t a_step = lda ? (int64_t)lda : kc; /* floats between MR-row panels, / mr */
    const int64_t panel = kc * nr, lines = panel / 16; /* a B micro-panel's cache lines */
    const int64_t calls = cdiv(mc, mr), per_call = cdiv(lines, calls);
    for (int64_t jr = 0; jr < nc; jr += nr) {
        const int n = (int)GML_MIN((int64_t)nr, nc - jr);
        /* the next B micro-panel, a share of its lines before each call,
         * towards L2: it comes from L3 when the B block outgrows L2 */
        const char *next = (const char *)(bp + (jr + nr < nc ? jr + nr : jr) * kc);
        int64_t line = 0;
        for (int64_t ir = 0; ir < mc; ir += mr) {
            const int m = (int)GML_MIN((int64_t)mr, mc - ir);
            for (int64_t e = GML_MIN(line + per_call, lines); line < e; line++)
                __builtin_prefetch(next + line * 64, 0, 2);
            v->fn((size_t)kc, a + ir * a_step, lda, bp + jr * kc, (size_t)nr,
                  c + ir * (int64_t)ldc + jr, ldc, m, n, acc);
        }
    }
}

static void run_large(const gml_gemm_desc *d, const gemm_plan *pl, const gml_gemm_variant *v,
                      const gemm_tile *t, float *ap, float *bp) {
    const int mr = v->mr, nr = v->nr;
    const size_t ldc = (size_t)d->c_rs / sizeof(float);
    const bool a_rows = d->a_cs == sizeof(float) && is_float_stride(d->a_rs) &&
                        (uintptr_t)t->a % sizeof(float) == 0;
    for (int64_t jc = 0; jc < t->tn; jc += pl->NC) {
        const int64_t nc = GML_MIN(pl->NC, t->tn - jc);
        /* Few columns: each A element feeds only nc/NR micro-kernel calls,
         * too few to pay for its transposing pack; the micro-kernel reads
         * A's rows in place instead (P @ V with d_k = 64: 2048 x 64 x 2048
         * 112 -> 200 GFLOP/s on one core; from 128 columns on, packing wins
         * on power-of-two row strides, where rows in place share cache sets). */
        const bool a_in_place = a_rows && nc <= 2 * (int64_t)nr;
        const size_t lda = a_in_place ? (size_t)d->a_rs / sizeof(float) : 0;
        for (int64_t pc = 0; pc < d->K; pc += pl->KC) {
            const int64_t kc = GML_MIN(pl->KC, d->K - pc);
            if (d->b_type != GML_F32)
                pack_b_typed(d->isa, d->b_type, t->b + b_koff(d, pc) + jc * d->b_cs, d->b_rs, d->b_cs, kc,
                             nc, nr, bp, bp + kc * round_up(nc, nr));
            else
                pack_b(t->b + pc * d->b_rs + jc * d->b_cs, d->b_rs, d->b_cs, kc, nc, nr, bp);
            for (int64_t ic = 0; ic < t->tm; ic += pl->MC) {
                const int64_t mc = GML_MIN(pl->MC, t->tm - ic);
                const float *a = (const float *)(t->a + ic * d->a_rs) + pc;
                if (!a_in_place) {
                    pack_a(t->a + ic * d->a_rs + pc * d->a_cs, d->a_rs, d->a_cs, mc, kc, mr, ap);
                    a = ap;
                }
                macro_kernel(v, mc, nc, kc, a, lda, bp, t->c + ic * (int64_t)ldc + jc, ldc,
                             pc > 0);
            }
        }
    }
}

/* PATH_LARGE for one product on nth > 1 threads, as BLIS and OpenBLAS
 * split it: the threads pack each B block (kc x nc) together into one
 * buffer, meet at a barrier, then run the macro-kernel over chunks of C's
 * rows, each chunk packing its own A block. B is packed once in all
 * instead of once per M tile, and every thread reads the same block from
 * the shared cache.
 *
 * Nothing is split statically: with even shares of M, a vCPU that the
 * host delays holds the other thread at every block's barrier. Between two
 * barriers the threads take work items with gml_chunk_next, in this order:
 * the row chunks of block t, then the groups of GEMM_SHARED_PACK_PANELS
 * NR-column panels of block t + 1 to pack; a thread done early takes more
 * rows, then packs the next block while the other one computes. Row chunks
 * are guided: each 1/nth of the MR-row panels left, at most MC rows, at
 * least GEMM_SHARED_MIN_PANELS panels (the last ones short, so the threads
 * end a block together; the first is an even share, so that a quiet
 * machine runs as with static shares: long chunks reuse each B micro-panel
 * from L1 over more calls).
 * Two B buffers taken in turn need one barrier per block: a thread packing
 * block t + 1 has passed block t's barrier, which every thread reached only
 * after it was done with block t - 1, the other buffer. Each C element's
 * K blocks still run in order (block t's chunk of its rows after the
 * barrier that ends block t - 1) and are each one fma chain as in
 * run_large: which thread takes which chunk changes no bit. */

/* Block t of run_large_shared: K blocks innermost, as run_large. */
typedef struct shared_block {
    int64_t jc, nc, pc, kc;
} shared_block;

static shared_block shared_block_at(const gml_gemm_desc *d, const gemm_plan *pl, int64_t t) {
    const int64_t nbk = cdiv(d->K, pl->KC), jc = t / nbk * pl->NC, pc = t % nbk * pl->KC;
    return (shared_block){jc, GML_MIN(pl->NC, d->N - jc), pc, GML_MIN(pl->KC, d->K - pc)};
}

/* The guided row chunks: chunk i's first MR-row panel and panel count,
 * walked forward from a cursor (each thread's chunk indices only grow
 * between two barriers). */
typedef struct row_cursor {
    int64_t index, first; /* chunk index, its first panel */
} row_cursor;

static int64_t row_chunk_panels(const gemm_plan *pl, int64_t panels, int64_t first, int nth,
                                int mr) {
    const int64_t left = panels - first;
    const int64_t least = GEMM_SHARED_MIN_PANELS;
    const int64_t want = GML_MAX(cdiv(left, (int64_t)nth), least);
    const int64_t most = pl->MC / mr, n = GML_MIN(want, most);
    /* no chunk shorter than the minimum after this one, where MC allows */
    return left - n < least && left <= most ? left : GML_MIN(n, left);
}

/* Advances c to chunk i (< the chunk count): its first panel and count. */
static void row_chunk(row_cursor *c, const gemm_plan *pl, int64_t panels, int nth, int mr,
                      int64_t i, int64_t *first, int64_t *count) {
    for (; c->index < i; c->index++) c->first += row_chunk_panels(pl, panels, c->first, nth, mr);
    *first = c->first;
    *count = row_chunk_panels(pl, panels, c->first, nth, mr);
}

/* B panels [q0, q1) of block b into buffer bp. */
static void shared_pack_b(const gml_gemm_desc *d, const shared_block *b, int nr, int64_t q0,
                          int64_t q1, float *bp, float *tmp) {
    const int64_t j0 = q0 * nr, ncols = GML_MIN(q1 * nr, b->nc) - j0;
    const char *src = d->b + b_koff(d, b->pc) + (b->jc + j0) * d->b_cs;
    if (d->b_type != GML_F32)
        pack_b_typed(d->isa, d->b_type, src, d->b_rs, d->b_cs, b->kc, ncols, nr, bp + j0 * b->kc, tmp);
    else
        pack_b(src, d->b_rs, d->b_cs, b->kc, ncols, nr, bp + j0 * b->kc);
}

static void run_large_shared(const gml_compute_params *p, const gml_gemm_desc *d,
                             const gemm_plan *pl, const gml_gemm_variant *v, float *bshared,
                             float *ap) {
    const int mr = v->mr, nr = v->nr;
    const size_t ldc = (size_t)d->c_rs / sizeof(float);
    const size_t bstride = pl->shared_floats / 2;
    float *tmp = ap + pl->MC * pl->KC; /* pack_b_typed's row */
    const int64_t panels = cdiv(d->M, mr), n_blocks = cdiv(d->N, pl->NC) * cdiv(d->K, pl->KC);
    const int64_t G = GEMM_SHARED_PACK_PANELS;
    int64_t n_rows = 0; /* row chunks per block */
    for (int64_t first = 0; first < panels; n_rows++)
        first += row_chunk_panels(pl, panels, first, p->nth, mr);
    /* block 0's panel groups, then per block t its row chunks and block
     * t + 1's panel groups */
    shared_block next = shared_block_at(d, pl, 0);
    for (int64_t g; (g = gml_chunk_next(p)) < cdiv(next.nc, G * nr);)
        shared_pack_b(d, &next, nr, g * G, GML_MIN(g * G + G, cdiv(next.nc, nr)), bshared, tmp);
    gml_barrier(p);
    for (int64_t t = 0; t < n_blocks; t++) {
        const shared_block b = next;
        const float *bp = bshared + (size_t)(t % 2) * bstride;
        float *bnext = bshared + (size_t)((t + 1) % 2) * bstride;
        const bool more = t + 1 < n_blocks;
        if (more) next = shared_block_at(d, pl, t + 1);
        const int64_t groups = more ? cdiv(next.nc, G * nr) : 0;
        row_cursor cur = {0, 0};
        for (int64_t i; (i = gml_chunk_next(p)) < n_rows + groups;) {
            if (i < n_rows) {
                int64_t first, count;
                row_chunk(&cur, pl, panels, p->nth, mr, i, &first, &count);
                const int64_t ic = first * mr, mc = GML_MIN(count * mr, d->M - ic);
                pack_a(d->a + ic * d->a_rs + b.pc * d->a_cs, d->a_rs, d->a_cs, mc, b.kc, mr, ap);
                macro_kernel(v, mc, b.nc, b.kc, ap, 0, bp,
                             (float *)d->c + ic * (int64_t)ldc + b.jc, ldc, b.pc > 0);
            } else {
                const int64_t g = (i - n_rows) * G;
                shared_pack_b(d, &next, nr, g, GML_MIN(g + G, cdiv(next.nc, nr)), bnext, tmp);
            }
        }
        gml_barrier(p);
    }
}

/* Few rows, C = A B: A's rows (all of the tile's M) packed per K block,
 * B's NR-column micro-panels packed on the fly or read in place. */
static void run_rows(const gml_gemm_desc *d, const gemm_plan *pl, const gml_gemm_variant *v,
                     const gemm_tile *t, float *ap, float *bp) {
    const int mr = v->mr, nr = v->nr;
    const size_t ldc = (size_t)d->c_rs / sizeof(float);
    const bool direct = d->b_type == GML_F32 && d->b_cs == sizeof(float) &&
                        is_float_stride(d->b_rs) && (uintptr_t)t->b % sizeof(float) == 0;
    for (int64_t pc = 0; pc < d->K; pc += pl->KC) {
        const int64_t kc = GML_MIN(pl->KC, d->K - pc);
        pack_a(t->a + pc * d->a_cs, d->a_rs, d->a_cs, t->tm, kc, mr, ap);
        for (int64_t jr = 0; jr < t->tn; jr += nr) {
            const int n = (int)GML_MIN((int64_t)nr, t->tn - jr);
            const char *bsrc = t->b + b_koff(d, pc) + jr * d->b_cs;
            const float *panel = bp;
            size_t ldb = (size_t)nr;
            if (direct && n == nr) {
                panel = (const float *)bsrc;
                ldb = (size_t)d->b_rs / sizeof(float);
            } else if (d->b_type != GML_F32) {
                pack_b_typed(d->isa, d->b_type, bsrc, d->b_rs, d->b_cs, kc, n, nr, bp, bp + kc * nr);
            } else {
                pack_b(bsrc, d->b_rs, d->b_cs, kc, n, nr, bp);
            }
            for (int64_t ir = 0; ir < t->tm; ir += mr) {
                const int m = (int)GML_MIN((int64_t)mr, t->tm - ir);
                v->fn((size_t)kc, ap + ir * kc, 0, panel, ldb, t->c + ir * (int64_t)ldc + jr, ldc,
                      m, n, pc > 0);
            }
        }
    }
}

enum { GEMM_MAX_TILE = 64 * 64 };

/* Few rows, B = W^T: C^T = W A^T. The micro-kernel reads MR rows of W in
 * place (each W element is loaded once, by one broadcast) against A^T
 * packed into NR-column panels, all of K at once, and its MR x NR tile of
 * C^T is written back transposed. */
static void run_rows_t(const gml_gemm_desc *d, const gml_gemm_variant *v, const gemm_tile *t,
                       float *bp) {
    const int mr = v->mr, nr = v->nr;
    const int64_t K = d->K, ldc = d->c_rs / (int64_t)sizeof(float);
    const size_t ldw = (size_t)d->b_cs / sizeof(float);
    float tile[GEMM_MAX_TILE];
    pack_b(t->a, d->a_cs, d->a_rs, K, t->tm, nr, bp); /* A^T [K x M] */
    for (int64_t i0 = 0; i0 < t->tn; i0 += mr) {
        const int rows = (int)GML_MIN((int64_t)mr, t->tn - i0);
        const float *w = (const float *)(t->b + i0 * d->b_cs);
        for (int64_t j0 = 0; j0 < t->tm; j0 += nr) {
            const int cols = (int)GML_MIN((int64_t)nr, t->tm - j0);
            v->fn((size_t)K, w, ldw, bp + j0 * K, (size_t)nr, tile, (size_t)nr, rows, cols, false);
            for (int j = 0; j < cols; j++) {
                float *out = t->c + (j0 + j) * ldc + i0;
                for (int i = 0; i < rows; i++) out[i] = tile[i * nr + j];
            }
        }
    }
}

/* Few rows, B = W^T, with a few-rows kernel (gemm.h, "Few rows against
 * W"): A^T packed by the kernel's layout in NR-column panels once per
 * thread and batch (*packed_bi), then MR rows of W at a time against each
 * panel, the kernel writing its tile of C. */
static void run_rows_t_rt(const gml_gemm_desc *d, const gml_gemm_rt_variant *rv,
                          const gemm_tile *t, int64_t bi, int64_t *packed_bi, float *bp) {
    const int nr = rv->main + 4, mr = rv->mr;
    const int64_t K = d->K, ldc = d->c_rs / (int64_t)sizeof(float);
    const int64_t panel = K * (rv->main + rv->lanes);
    const size_t ldw = (size_t)d->b_cs / sizeof(float);
    if (*packed_bi != bi) {
        for (int64_t j0 = 0; j0 < t->tm; j0 += nr)
            gml_gemm_rt_pack(rv, t->a + j0 * d->a_rs, d->a_rs, d->a_cs, K,
                             (int)GML_MIN((int64_t)nr, t->tm - j0), bp + j0 / nr * panel);
        *packed_bi = bi;
    }
    for (int64_t i0 = 0; i0 < t->tn; i0 += mr) {
        const int rows = (int)GML_MIN((int64_t)mr, t->tn - i0);
        const float *w = (const float *)(t->b + i0 * d->b_cs);
        for (int64_t j0 = 0; j0 < t->tm; j0 += nr) {
            const int cols = (int)GML_MIN((int64_t)nr, t->tm - j0);
            rv->fn((size_t)K, w, ldw, rows, bp + j0 / nr * panel, cols, t->c + j0 * ldc + i0,
                   (size_t)ldc);
        }
    }
}

/* Vector fmas per row of W and per k, in quarters, that a few-rows kernel
 * (rv) or a register tile nr columns wide spends on M columns of C^T. */
static int64_t rt_cost4(const gml_gemm_rt_variant *rv, int64_t M) {
    const int64_t nr = rv->main + 4, L = rv->lanes, r = M % nr;
    return M / nr * 4 * nr / L + (r == 0 ? 0 : r <= rv->main ? 4 * cdiv(r, L) : 4 * nr / L);
}
static int64_t tile_cost4(int nr, int lanes, int64_t M) { return cdiv(M, nr) * 4 * nr / lanes; }

/* One to four rows against W's rows in place: A's rows packed contiguous,
 * then the matrix-vector kernel over the tile's columns, NR at a time. */
static void run_gemv(const gml_gemm_desc *d, const gemm_tile *t, float *ap) {
    const gml_gemv_variant *gv = gml_gemv_pick(d->isa);
    const gml_xw_gemv_variant *xv = d->b_type != GML_F32 ? gml_xw_gemv_pick(d->isa, d->b_type) : NULL;
    const int64_t K = d->K;
    const size_t ldw = (size_t)d->b_cs / sizeof(float), ldc = (size_t)d->c_rs / sizeof(float);
    for (int64_t i = 0; i < t->tm; i++) {
        if (d->a_cs == sizeof(float))
            memcpy(ap + i * K, t->a + i * d->a_rs, (size_t)K * sizeof(float));
        else
            for (int64_t k = 0; k < K; k++) ap[i * K + k] = at(t->a, i, d->a_rs, k, d->a_cs);
    }
    if (xv) {
        for (int64_t j0 = 0; j0 < t->tn; j0 += xv->nr)
            xv->fn((size_t)K, ap, (size_t)K, (int)t->tm, t->b + j0 * d->b_cs, (size_t)d->b_cs,
                   (int)GML_MIN((int64_t)xv->nr, t->tn - j0), t->c + j0, ldc);
        return;
    }
    const float *w = (const float *)(const void *)t->b;
    for (int64_t j0 = 0; j0 < t->tn; j0 += gv->nr)
        gv->fn((size_t)K, ap, (size_t)K, (int)t->tm, w + j0 * (int64_t)ldw, ldw,
               (int)GML_MIN((int64_t)gv->nr, t->tn - j0), t->c + j0, ldc);
}

/* The variant of v's ISA whose tile width pads M least (the first of
 * equals after v itself), for PATH_ROWS_T, where NR covers A's M rows. */
static const gml_gemm_variant *rows_t_variant(const gml_gemm_variant *v, int64_t M) {
    const gml_gemm_variant *best = v;
    for (int i = 0; i < gml_gemm_n_variants; i++) {
        const gml_gemm_variant *w = &gml_gemm_variants[i];
        if (w->isa == v->isa && round_up(M, w->nr) < round_up(M, best->nr)) best = w;
    }
    return best;
}

void gml_gemm(const gml_compute_params *p, const gml_gemm_desc *d, const gml_gemm_variant *v) {
    if (d->M <= 0 || d->N <= 0 || d->nb0 <= 0 || d->nb1 <= 0) return;
    const gml_gemm_rt_variant *rv = NULL;
    if (choose_path(d) == PATH_ROWS_T) {
        v = rows_t_variant(v, d->M);
        rv = gml_gemm_rt_for(v->isa);
        if (rv && rt_cost4(rv, d->M) * (100 + rv->pack_pct) >=
                      tile_cost4(v->nr, rv->lanes, d->M) * 100)
            rv = NULL;
    }
    int64_t packed_bi = -1; /* the batch whose A^T this thread's panels hold (rv) */
    const gemm_plan pl = make_plan(d, v, p->nth, rv ? rv->mr : 0);
    const size_t slice = pl.a_floats + pl.b_floats; /* floats per thread */
    assert(v->mr * v->nr <= GEMM_MAX_TILE);
    assert((pl.shared_floats + (size_t)(p->ith + 1) * slice) * sizeof(float) <= p->wsize);
    float *ap = (float *)p->wdata + pl.shared_floats + (size_t)p->ith * slice;
    float *bp = ap + pl.a_floats;
    gml_kernel_note(p, pl.path == PATH_GEMV && d->b_type != GML_F32
                           ? gml_xw_gemv_pick(p->isa, d->b_type)->name
                       : pl.path == PATH_GEMV   ? gml_gemv_pick(p->isa)->name
                       : rv                     ? rv->name
                       : pl.path == PATH_ROWS_T ? v->path_names[2]
                       : pl.path == PATH_ROWS   ? v->path_names[1]
                       : pl.shared              ? v->path_names[3]
                                                : v->path_names[0]);
    if (pl.shared && d->K > 0) {
        run_large_shared(p, d, &pl, v, (float *)p->wdata, ap);
        return;
    }
    for (int64_t chunk; (chunk = gml_chunk_next(p)) < pl.n_chunks;) {
        const int64_t tj = chunk % pl.nt, ti = chunk / pl.nt % pl.mt, bi = chunk / (pl.nt * pl.mt);
        const int64_t i1 = bi % d->nb1, i0 = bi / d->nb1;
        const int64_t m0 = ti * pl.tm, n0 = tj * pl.tn;
        gemm_tile t = {
            .a = d->a + i0 * d->a_bs[0] + i1 * d->a_bs[1] + m0 * d->a_rs,
            .b = d->b + i0 * d->b_bs[0] + i1 * d->b_bs[1] + n0 * d->b_cs,
            .c = (float *)(d->c + i0 * d->c_bs[0] + i1 * d->c_bs[1] + m0 * d->c_rs) + n0,
            .tm = GML_MIN(pl.tm, d->M - m0),
            .tn = GML_MIN(pl.tn, d->N - n0),
        };
        if (d->K == 0) { /* an empty sum */
            for (int64_t i = 0; i < t.tm; i++)
                memset((char *)t.c + i * d->c_rs, 0, (size_t)t.tn * sizeof(float));
        } else if (pl.path == PATH_GEMV) {
            run_gemv(d, &t, ap);
        } else if (rv) {
            run_rows_t_rt(d, rv, &t, bi, &packed_bi, bp);
        } else if (pl.path == PATH_ROWS_T) {
            run_rows_t(d, v, &t, bp);
        } else if (pl.path == PATH_ROWS) {
            run_rows(d, &pl, v, &t, ap, bp);
        } else {
            run_large(d, &pl, v, &t, ap, bp);
        }
    }
}
