/* The few-rows kernel C^T = W A^T (gemm.h, "Few rows against W"; ops/
 * gemm_rt.inc), written once over the SIMD layer and included by the
 * per-ISA tile files (ops/gemm_tile_<isa>.c), which give it its shape.
 * A template: define
 *   GML_RT_FN    the kernel's name
 *   GML_RT_MR    rows of W per call (a multiple of GML_VL / 4, at most GML_VL)
 *   GML_RT_PF    W's rows prefetched this many floats ahead, with
 *   GML_RT_PF_LOCALITY  __builtin_prefetch's locality (3: into L1, 2: L2)
 * and include this header once per ISA.
 *
 * Per k, the first MAIN = 16 of A's rows are MAIN / GML_VL vectors (lanes
 * over A's rows), each meeting each row of W with one fma against a
 * broadcast of w[i][k]; the last 4 rows of A against L4 = GML_VL / 4 rows
 * of W at a time fill one more vector (lane L4 t + r: A's row 16 + t, W's
 * row L4 g + r): MR (MAIN / GML_VL + 4 / GML_VL) fmas per k for MR x 20
 * outputs, every lane busy (AVX-512, MR 16: 20 fmas where the 14x32 tile
 * spends 32 on M = 20 padded to 32; AVX2, MR 4: 8 + 2 where the 4x24 tile
 * spends 12). The L4 values of W that vector needs sit apart in W's rows:
 * each block of 16 k of the MR rows is loaded, interleaved
 * (gml_vf_interleave: AVX-512 8 shuffles per 64 values, AVX2 4 per 32,
 * NEON none) and stored on the stack, from where both kinds of broadcast
 * read it; the next block is packed before the current one is consumed
 * (reading a block packed just before stalls). The kernel alone, 112 rows
 * of W in L2 x 20 x K = 512, one core of the Xeon: AVX-512 138 GFLOP/s
 * against 103 for the 14x32 tile (170 with the packing left out); the ring
 * below in this loop form ran at 138 where a plain s ^= 1 toggle compiled
 * to 125. */
#ifndef GGMLITE_OPS_GEMM_RT_H
#define GGMLITE_OPS_GEMM_RT_H

#include "gemm.h"
#include "simd/simd.h"

#define RT_L4 (GML_VL / 4)       /* rows of W per tail vector */
#define RT_MAIN 16               /* A's rows in whole vectors */
#define RT_NA (RT_MAIN / GML_VL) /* vectors of them */
#define RT_LD (RT_MAIN + GML_VL) /* floats of packed A^T per k */
#define RT_RING 2                /* blocks on the stack, packed RT_RING - 1 ahead */

#endif /* GGMLITE_OPS_GEMM_RT_H */

#define RT_MR GML_RT_MR
#define RT_G (RT_MR / RT_L4) /* groups of L4 rows of W */

/* The block of 16 k from k0 of the RT_MR rows row[] into dst (16 RT_MR
 * floats: group g at 16 L4 g, its k in GML_VL-runs h at GML_VL L4 h, in
 * gml_interleave_pos order). FULL: all 16 k exist, else only those below
 * k (the rest zero). Each row's line GML_RT_PF floats ahead is prefetched,
 * past the row's end the line of the next call's row (RT_MR rows of W
 * further; short rows, K = 512, would otherwise start each call with
 * RT_MR misses; the address may lie past W); an add a row (a multiply a
 * row cost 3% on AVX-512). */
static GML_SIMD_INLINE void rt_pack(const bool full, const float *const *row, const float *w,
                                    size_t ldw, size_t k0, size_t k, float *dst) {
    const size_t ahead = k0 + GML_RT_PF; /* row r's line: w + r ldw + ahead, or past the end */
    uintptr_t pf = (uintptr_t)w + (ahead < k ? ahead : RT_MR * ldw + ahead - k) * sizeof(float);
#pragma GCC unroll 16
    for (int g = 0; g < RT_G; g++) {
#pragma GCC unroll 4
        for (int r = 0; r < RT_L4; r++, pf += ldw * sizeof(float))
            __builtin_prefetch((const void *)pf, 0, GML_RT_PF_LOCALITY);
#pragma GCC unroll 4
        for (int h = 0; h < 16 / GML_VL; h++) {
            const size_t kh = k0 + (size_t)(GML_VL * h);
            gml_vf x[RT_L4];
#pragma GCC unroll 4
            for (int r = 0; r < RT_L4; r++) {
                const float *p = row[RT_L4 * g + r] + kh;
                x[r] = full ? gml_vf_load(p) : gml_vf_load_m(p, gml_vm_first_i((int)k - (int)kh));
            }
            gml_vf_interleave(x);
#pragma GCC unroll 4
            for (int q = 0; q < RT_L4; q++)
                gml_vf_storea(dst + 16 * RT_L4 * g + GML_VL * RT_L4 * h + GML_VL * q, x[q]);
        }
    }
}

/* k step KK (< 16) of a packed block p, A^T's row at ak. */
#define RT_STEP(TAIL, p, ak, KK)                                                             \
    do {                                                                                     \
        gml_vf am[RT_NA];                                                                    \
        _Pragma("GCC unroll 4") for (int v = 0; v < RT_NA; v++) am[v] =                      \
            gml_vf_load((ak) + GML_VL * v);                                                  \
        const gml_vf atl = gml_vf_load((ak) + RT_MAIN);                                      \
        _Pragma("GCC unroll 16") for (int g = 0; g < RT_G; g++) {                            \
            const float *pw = (p) + 16 * RT_L4 * g + ((KK) / GML_VL) * GML_VL * RT_L4 +      \
                              gml_interleave_pos((KK) % GML_VL) * RT_L4;                     \
            _Pragma("GCC unroll 4") for (int r = 0; r < RT_L4; r++) {                        \
                const gml_vf wv = gml_vf_set1(pw[r]);                                        \
                _Pragma("GCC unroll 4") for (int v = 0; v < RT_NA; v++) acc[v][RT_L4 * g + r] = \
                    gml_vf_fma(wv, am[v], acc[v][RT_L4 * g + r]);                            \
            }                                                                                \
            if (TAIL) acct[g] = gml_vf_fma(gml_vf_bcast_quarter(pw), atl, acct[g]);          \
        }                                                                                    \
    } while (0)

/* The C^T tile into C: lane j of acc[v][i] is C[GML_VL v + j][i] (blocks of
 * GML_VL x GML_VL transposed in registers, rows past RT_MR zero); quarter
 * t of acct[g] is C[16 + t][L4 g .. L4 g + L4). Rows of C past n and
 * columns past m left alone. */
static GML_SIMD_INLINE void rt_store(bool tail, gml_vf (*acc)[RT_MR], const gml_vf *acct, int m,
                                     int n, float *c, size_t ldc) {
    const gml_vm mm = gml_vm_first_i(m);
#pragma GCC unroll 4
    for (int v = 0; v < RT_NA; v++) {
        gml_vf r[GML_VL];
#pragma GCC unroll 16
        for (int i = 0; i < GML_VL; i++) r[i] = i < RT_MR ? acc[v][i] : gml_vf_zero();
        gml_vf_transpose(r);
#pragma GCC unroll 16
        for (int j = 0; j < GML_VL; j++)
            if (GML_VL * v + j < n) gml_vf_store_m(c + (size_t)(GML_VL * v + j) * ldc, mm, r[j]);
    }
    if (!tail) return;
    gml_vf q[4];
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) q[g] = g < RT_G ? acct[g] : gml_vf_zero();
    gml_vf_transpose_quarters(q);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        if (16 + j < n) gml_vf_store_m(c + (size_t)(16 + j) * ldc, mm, q[j]);
}

/* The kernel with or without the tail vectors (TAIL a constant): the
 * accumulators stay local so that they live in registers. */
#define RT_KERNEL(NAME, TAIL)                                                                 \
    static void NAME(size_t k, const float *const *row, const float *w, size_t ldw,         \
                     const float *at, int m, int n, float *c, size_t ldc) {                  \
        _Alignas(64) float buf[RT_RING][16 * RT_MR];                                          \
        for (int b = 0; b < RT_RING - 1; b++) {                                               \
            const size_t kb = (size_t)b * 16;                                                 \
            if (kb + 16 <= k) rt_pack(true, row, w, ldw, kb, k, buf[b]);                      \
            else if (kb < k) rt_pack(false, row, w, ldw, kb, k, buf[b]);                      \
        }                                                                                     \
        gml_vf acc[RT_NA][RT_MR], acct[RT_G];                                                 \
        _Pragma("GCC unroll 4") for (int v = 0; v < RT_NA; v++)                               \
            _Pragma("GCC unroll 16") for (int i = 0; i < RT_MR; i++) acc[v][i] = gml_vf_zero(); \
        _Pragma("GCC unroll 16") for (int g = 0; g < RT_G; g++) acct[g] = gml_vf_zero();      \
        int s = 0;                                                                            \
        for (size_t k0 = 0; k0 < k; k0 += 16, s = (s + 1) % RT_RING) {                        \
            const size_t kn = k0 + 16 * (RT_RING - 1);                                        \
            float *next = buf[(s + RT_RING - 1) % RT_RING];                                   \
            if (kn + 16 <= k) rt_pack(true, row, w, ldw, kn, k, next);                        \
            else if (kn < k) rt_pack(false, row, w, ldw, kn, k, next);                        \
            const float *p = buf[s], *ak = at + k0 * RT_LD;                                   \
            if (k0 + 16 <= k) {                                                               \
                _Pragma("GCC unroll 16") for (int kk = 0; kk < 16; kk++)                      \
                    RT_STEP(TAIL, p, ak + kk * RT_LD, kk);                                    \
            } else {                                                                          \
                for (int kk = 0; kk < (int)(k - k0); kk++) RT_STEP(TAIL, p, ak + kk * RT_LD, kk); \
            }                                                                                 \
        }                                                                                     \
        rt_store(TAIL, acc, acct, m, n, c, ldc);                                              \
    }
RT_KERNEL(rt_kernel_tail, true)
RT_KERNEL(rt_kernel_main, false)

/* c[j * ldc + i] = sum_k w[i * ldw + k] A[j][k], i < m <= RT_MR, j < n <= 20 */
void GML_RT_FN(size_t k, const float *w, size_t ldw, int m, const float *at, int n, float *c,
               size_t ldc) {
    const float *row[RT_MR];
    for (int i = 0; i < RT_MR; i++) /* rows past m reread row 0 */
        row[i] = w + (i < m ? (size_t)i : 0) * ldw;
    if (n > RT_MAIN) rt_kernel_tail(k, row, w, ldw, at, m, n, c, ldc);
    else rt_kernel_main(k, row, w, ldw, at, m, n, c, ldc);
}

#undef RT_MR
#undef RT_G
#undef GML_RT_FN
#undef GML_RT_MR
#undef GML_RT_PF
#undef GML_RT_PF_LOCALITY
