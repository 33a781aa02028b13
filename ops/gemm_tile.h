/* The f32 GEMM register tile (gemm.h), written once over the SIMD layer and
 * included by the per-ISA tile files (ops/gemm_tile_<isa>.c), which give
 * it its shape: MR rows x NV vectors of C (NR = NV GML_VL columns) in
 * MR NV accumulators; per k, NV vector loads of B and MR broadcasts of A
 * feed MR NV fmas; the accumulators live in registers, the loops over rows
 * and vectors are unrolled.
 *
 * Operands read in place come from memory rather than from packed panels
 * in L1/L2, so they are prefetched ahead: B rows PF_B_ROWS k ahead (a row
 * per k, each on its own page when B is wide, which the hardware
 * prefetchers do not follow), A rows PF_A_FLOATS floats ahead every 16 k.
 * With both panels packed, the C tile MR rows below this one (the next
 * call's, in every loop of gemm.c) is prefetched over the first MR k
 * steps, one row per step, so that its load at the next call's start hits
 * L1 without a burst of misses at once (issued together before the call
 * they filled the line fill buffers and stalled 2048^3 for ~8% of the time
 * on the Xeon, perf); and, where the tile asks, the packed A micro-panel a
 * line PF_A_PACKED_K k ahead every k past the first MR. */
#ifndef GGMLITE_OPS_GEMM_TILE_H
#define GGMLITE_OPS_GEMM_TILE_H

#include "gemm.h"
#include "simd/simd.h"

#define GML_TILE_MR_MAX 16
#define GML_TILE_NV_MAX 4
#define PF_B_ROWS 24
#define PF_A_FLOATS 128
#define PF_A_PACKED_K 32

/* A hint for the line `floats` floats past p; the address may lie past the
 * operand (prefetches never fault), hence integer arithmetic. */
static inline void gml_tile_prefetch(const float *p, size_t floats) {
    __builtin_prefetch((const void *)((uintptr_t)p + floats * sizeof(float)), 0, 3);
}

/* The lines of a row of the tile (NV GML_VL floats, 16 to a line, the
 * first line only if the row is shorter) from p. */
static GML_SIMD_INLINE void gml_tile_prefetch_row(const float *p, size_t floats, int NV) {
    const int lines = NV * GML_VL < 16 ? 1 : NV * GML_VL / 16;
#pragma GCC unroll 4
    for (int l = 0; l < lines; l++) gml_tile_prefetch(p, floats + 16 * (size_t)l);
}

/* One k step: c[i][v] += a_i * b[k, v GML_VL : (v + 1) GML_VL] for the MR
 * rows, a_i at A_I. */
#define GML_TILE_STEP(A_I)                                                          \
    do {                                                                            \
        gml_vf bv[GML_TILE_NV_MAX];                                                 \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) bv[v] =                \
            gml_vf_load(b + v * GML_VL);                                            \
        _Pragma("GCC unroll 16") for (int i = 0; i < MR; i++) {                     \
            const gml_vf ai = gml_vf_set1(*(A_I));                                  \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) cv[v][i] =         \
                gml_vf_fma(ai, bv[v], cv[v][i]);                                    \
        }                                                                           \
    } while (0)

#endif /* GGMLITE_OPS_GEMM_TILE_H */

/* The micro-kernel GML_TILE_FN (gemm.h):
 *   C[m x n] = (acc ? C : 0) + A_panel [m x kc] * B_panel [kc x n]
 * on a GML_TILE_MR x GML_TILE_NV GML_VL tile; GML_TILE_PF_C: prefetch the
 * next tile of C, GML_TILE_PF_A_PACKED: prefetch the packed A micro-panel.
 * A template: define these and include this header once per tile (the
 * constants as macros keep the compiler's loop shapes those of a kernel
 * written for one tile). Full tiles load and store C with plain moves
 * (masked stores cost ~16 cycles each on Zen 3). */
void GML_TILE_FN(size_t kc, const float *a, size_t lda, const float *b, size_t ldb, float *c,
                 size_t ldc, int m, int n, bool acc) {
    enum { MR = GML_TILE_MR, NV = GML_TILE_NV };
    enum { PF_C = GML_TILE_PF_C, PF_A_PACKED = GML_TILE_PF_A_PACKED };
    const int NR = NV * GML_VL;
    const bool full = n == NR;
    gml_vm mv[GML_TILE_NV_MAX];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) mv[v] = gml_vm_first_i(n - v * GML_VL);
    gml_vf cv[GML_TILE_NV_MAX][GML_TILE_MR_MAX];
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++) {
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) cv[v][i] = gml_vf_zero();
        if (acc && i < m) {
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) {
                const float *ci = c + i * ldc + v * GML_VL;
                cv[v][i] = full ? gml_vf_load(ci) : gml_vf_load_m(ci, mv[v]);
            }
        }
    }
    if (lda == 0 && ldb == (size_t)NR) { /* both packed */
        size_t k = 0;
        for (; k < kc && k < (size_t)MR; k++, a += MR, b += NR) {
            if (PF_C) gml_tile_prefetch_row(c, (MR + k) * ldc, NV);
            GML_TILE_STEP(a + i);
        }
        for (; k < kc; k++, a += MR, b += NR) {
            if (PF_A_PACKED) gml_tile_prefetch(a, PF_A_PACKED_K * MR);
            GML_TILE_STEP(a + i);
        }
    } else if (lda == 0) { /* B in place */
        for (size_t k = 0; k < kc; k++, a += MR, b += ldb) {
            gml_tile_prefetch_row(b, PF_B_ROWS * ldb, NV);
            GML_TILE_STEP(a + i);
        }
    } else { /* A in place: a[i * lda + k]; rows past m reread row 0 */
        const float *row[GML_TILE_MR_MAX];
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++) row[i] = a + (i < m ? (size_t)i : 0) * lda;
        for (size_t k = 0; k < kc; k++, b += ldb) {
            if (k % 16 == 0) {
#pragma GCC unroll 16
                for (int i = 0; i < MR; i++) gml_tile_prefetch(row[i], k + PF_A_FLOATS);
            }
            GML_TILE_STEP(row[i] + k);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++) {
        if (i < m) {
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) {
                float *ci = c + i * ldc + v * GML_VL;
                if (full) gml_vf_store(ci, cv[v][i]);
                else gml_vf_store_m(ci, mv[v], cv[v][i]);
            }
        }
    }
}

#undef GML_TILE_FN
#undef GML_TILE_MR
#undef GML_TILE_NV
#undef GML_TILE_PF_C
#undef GML_TILE_PF_A_PACKED
