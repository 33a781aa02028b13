/* f32 GEMM, BLIS-style: a portable framework (ops/gemm.c: the loops around
 * the micro-kernel, packing, cache blocking, the thread split) and a
 * register-tile micro-kernel written once over the SIMD layer
 * (ops/gemm_tile.h), whose MR x NR shape each ISA gives in a small file
 * (ops/gemm_tile_<isa>.c; the tiles are listed in ops/gemm.inc). The
 * few-rows kernels (ops/gemm_rt.h, shaped there too) and the matrix-vector
 * ones (ops/gemm_simd.c) are written once over the layer as well.
 *
 * Operand layouts. An A micro-panel holds MR rows of an mc x kc block:
 * packed (lda == 0), k-major with element (i, k) at a[k * MR + i] and rows
 * past the block's end zero; or read in place (lda > 0) from rows that are
 * contiguous along k, element (i, k) at a[i * lda + k]. A B micro-panel
 * holds NR columns of a kc x nc block, k-major: element (k, j) at
 * b[k * ldb + j] (ldb == NR when packed, columns past the end zero; a
 * row-major B with full panels may be read in place with its row stride).
 *
 * Arithmetic. Every output element is one chain of fused multiply-adds in k
 * order, starting from +0: c = fma(a[k], b[k], c) for k = 0, 1, ..., K-1.
 * Blocking K only stores and reloads the running sum (an exact float), so
 * the result is bitwise the same for every block size, tile, thread count
 * and ISA (the scalar kernels use fmaf). tests/test_gemm.c checks this. */
#ifndef GGMLITE_OPS_GEMM_H
#define GGMLITE_OPS_GEMM_H

#include "internal.h"

/* C[m x n] (row stride ldc floats, 1 <= m <= MR, 1 <= n <= NR)
 *   = (acc ? C : 0) + A_panel [m x kc] * B_panel [kc x n],
 * one fma chain per element as above; a, lda, b, ldb as in "Operand
 * layouts". An in-place A is read only in its m rows; C only in its m x n
 * tile. Operands read in place (lda > 0, ldb != NR) come from memory rather
 * than from packed panels in cache, and fast variants prefetch them ahead. */
typedef void (*gml_f32_gemm_ukernel_fn)(size_t kc, const float *a, size_t lda, const float *b,
                                        size_t ldb, float *c, size_t ldc, int m, int n, bool acc);

#define GML_UKERNEL(isa, fn, mr, nr, l1, l2, l3, nc_max)                                    \
    void fn(size_t kc, const float *a, size_t lda, const float *b, size_t ldb, float *c,   \
            size_t ldc, int m, int n, bool acc);
#include "gemm.inc"
#undef GML_UKERNEL

/* The reference micro-kernel for any tile height mr (the scalar variant is
 * this at a fixed tile; the micro-kernel test compares every variant to it). */
void gml_f32_gemm_ukernel__ref(int mr, size_t kc, const float *a, size_t lda, const float *b,
                               size_t ldb, float *c, size_t ldc, int m, int n, bool acc);

typedef struct gml_gemm_variant {
    gml_isa isa;
    gml_f32_gemm_ukernel_fn fn;
    int mr, nr;
    /* percent of L1d, L2, L3 for the B micro-panel, the A block and the B
     * block, and the largest NC (gemm.inc; "Cache blocks" below) */
    int l1_pct, l2_pct, l3_pct, nc_max;
    const char *name;
    /* name with each path of gml_gemm: "(large)", "(rows)", "(rows_t)",
     * "(large, shared B)" (gemm.c) */
    const char *path_names[4];
} gml_gemm_variant;

extern const gml_gemm_variant gml_gemm_variants[];
extern const int gml_gemm_n_variants;

/* The variant ISA isa (the plan's) selects. */
const gml_gemm_variant *gml_gemm_pick(gml_isa isa);

/* ---- Few rows against W, C^T = W A^T, lanes over A's rows with no padding ----
 * PATH_ROWS_T (gemm.c) computes a product of few rows against an nn.Linear
 * weight W [N, K] as C^T = W A^T. With the register tiles above, A's M rows
 * are the tile's NR columns, padded to NR: M = 20 fills 20 of 32 lanes of
 * the 14x32 tile. These kernels cover n <= NR = MAIN + 4 columns (A's rows)
 * without padding: the first MAIN (whole vectors) as usual, with lanes over
 * A's rows and a broadcast of W per row, and the last 4 in vectors of 4 of
 * A's rows x L/4 rows of W (L lanes per vector), so that M = 20 keeps every
 * lane busy (AVX-512: 16 + 4 x 4; AVX2: 8 + 8 + 4 x 2).
 *
 *   c[j * ldc + i] = sum_k w[i * ldw + k] * A[j][k],  i < m <= MR, j < n <= NR
 * (a tile of C itself: the kernel transposes its C^T tile in registers),
 * each element one fma chain in k order from +0 (bitwise the other paths'
 * result). W's rows are read in place (rows past m reread row
 * 0), in blocks of 16 k turned into groups of L/4 rows interleaved on the
 * stack. A^T is packed once per product by gml_gemm_rt_pack: per k, LD =
 * MAIN + L floats, at[k * LD + j] = A[j][k] for j < MAIN and
 * at[k * LD + MAIN + t * (L / 4) + r] = A[MAIN + t][k] for t < 4, r < L / 4;
 * rows of A past n zero. Variants: ops/gemm_rt.inc. */
typedef void (*gml_f32_gemm_rt_ukernel_fn)(size_t k, const float *w, size_t ldw, int m,
                                           const float *at, int n, float *c, size_t ldc);

#define GML_RT_UKERNEL(isa, fn, mr, main, lanes, pack)                                   \
    void fn(size_t k, const float *w, size_t ldw, int m, const float *at, int n, float *c, \
            size_t ldc);
#include "gemm_rt.inc"
#undef GML_RT_UKERNEL

typedef struct gml_gemm_rt_variant {
    gml_isa isa;
    gml_f32_gemm_rt_ukernel_fn fn;
    int mr, main, lanes; /* NR = main + 4; LD = main + lanes */
    int pack_pct;        /* time its packing of W adds to its fmas' (gemm_rt.inc) */
    const char *name;    /* with " (rows_t)", as gml_kernel_note records it */
} gml_gemm_rt_variant;

extern const gml_gemm_rt_variant gml_gemm_rt_variants[];
extern const int gml_gemm_rt_n_variants;

/* The variant of exactly this ISA, or NULL (none for scalar). */
const gml_gemm_rt_variant *gml_gemm_rt_for(gml_isa isa);

/* A^T for variant v: rows [0, n) of A (element (j, k) at a + j*rs + k*cs,
 * n <= MAIN + 4) into K * (MAIN + lanes) floats as above. */
void gml_gemm_rt_pack(const gml_gemm_rt_variant *v, const char *a, int64_t rs, int64_t cs,
                      int64_t K, int n, float *at);

/* ---- Cache blocks -------------------------------------------------------
 * Goto's loops (gemm.c) block K by KC, M by MC and N by NC per variant,
 * from the data cache sizes per core (L3 divided among the cores sharing
 * it), read once from sysfs (/sys/devices/system/cpu/cpu0/cache/index*)
 * or, where that is absent, taken as 32 KiB, 512 KiB and 2 MiB:
 *   KC = L1 * l1_pct / 100 / (4 NR), a multiple of 8 in [64, 1024]:
 *        the B micro-panel, reused by every A micro-panel of the block,
 *        stays in L1;
 *   MC = L2 * l2_pct / 100 / (4 KC), a multiple of MR in [MR, 4096]:
 *        the packed A block stays in L2;
 *   NC = L3 * l3_pct / 100 / (4 KC), a multiple of NR in [4 NR, nc_max]
 *        (nc_max at least 4 NR): the packed B block stays in L3.
 * The blocks change no bit of any result (see "Arithmetic" above). */
typedef struct gml_gemm_blocks {
    int64_t kc, mc, nc;
} gml_gemm_blocks;
gml_gemm_blocks gml_gemm_blocking(const gml_gemm_variant *v);

/* Bytes of L1d, L2 and L3 per core that the blocks are computed from. */
void gml_gemm_caches(int64_t bytes[3]);
/* For tests: use these sizes instead (bytes per core, each > 0), or read
 * the machine's again with NULL. Not while a product runs. */
void gml_gemm_set_caches(const int64_t bytes[3]);

/* ---- Matrix-vector ----------------------------------------------------------
 * A few rows of A (decoding: one token per sequence) against W, an nn.Linear
 * weight [N, K] whose rows are contiguous along k (B = W^T):
 *     c[i * ldc + j] = sum_k a[i * lda + k] * w[j * ldw + k],  i < m, j < n
 * with 1 <= m <= MR, 1 <= n <= NR, each element one fma chain in k order from
 * +0 as above (so bitwise what the other paths give). The lanes run over
 * W's rows (C's columns): 16 x 16 (AVX-512), 8 x 8 (AVX2) or 4 x 4 (NEON)
 * blocks of W are transposed in registers, W is read once, in place, and
 * nothing is wasted on padding a single row of A to a register tile. Variants: ops/gemv.inc. */
typedef void (*gml_f32_gemv_ukernel_fn)(size_t k, const float *a, size_t lda, int m,
                                        const float *w, size_t ldw, int n, float *c, size_t ldc);

#include "gemv.inc"
#define GML_DECLARE_GEMV(isa, fn, mr, nr)                                                    \
    void fn(size_t k, const float *a, size_t lda, int m, const float *w, size_t ldw, int n, \
            float *c, size_t ldc);
GML_F32_GEMV_UKERNELS(GML_DECLARE_GEMV)
#undef GML_DECLARE_GEMV

typedef struct gml_gemv_variant {
    gml_isa isa;
    gml_f32_gemv_ukernel_fn fn;
    int mr, nr;
    const char *name;
} gml_gemv_variant;

extern const gml_gemv_variant gml_gemv_variants[];
extern const int gml_gemv_n_variants;

/* The variant ISA isa (the plan's) selects. */
const gml_gemv_variant *gml_gemv_pick(gml_isa isa);

/* ---- Matrix-vector against a converted weight --------------------------------
 * The same product with W's rows f16, bf16 or q8_0 (ldw bytes apart):
 * bound by reading W, which these types shrink 2x and 3.8x, so the kernels
 * read each run of 32 k of a row of W once, convert it in registers and
 * take dot products along k, not the transposed fma chains above (whose
 * transposes would make them compute-bound). Each c[i][j] is, with w the
 * converted weight (q8_0: q the int8 values, d the block's scale) and the
 * k past the end taken as 0:
 *     s[l] = +0 for l < 16; per run of 32 from k0, for l < 16,
 *         f16, bf16: s[l] = fma(a[k0+16+l], w[k0+16+l], fma(a[k0+l], w[k0+l], s[l]))
 *         q8_0:      s[l] = fma(d, fma(a[k0+16+l], q[16+l], a[k0+l] * q[l]), s[l])
 *     then lanes l and l + 8 added, l and l + 4, l and l + 2, and the two left.
 * Every variant gives these bits (the same on every ISA and thread count);
 * they differ from the f32 chains above (and from the packed paths, which
 * convert W into f32 panels and are bitwise the f32 product) by rounding
 * only: within a few ulp of sum_k |a w|. */
typedef void (*gml_xw_gemv_ukernel_fn)(size_t k, const float *a, size_t lda, int m,
                                       const void *w, size_t ldw, int n, float *c, size_t ldc);
#define GML_DECLARE_XW_GEMV(isa, fn, mr, nr)                                                 \
    void fn(size_t k, const float *a, size_t lda, int m, const void *w, size_t ldw, int n,  \
            float *c, size_t ldc);
GML_F16_GEMV_UKERNELS(GML_DECLARE_XW_GEMV)
GML_BF16_GEMV_UKERNELS(GML_DECLARE_XW_GEMV)
GML_Q8_0_GEMV_UKERNELS(GML_DECLARE_XW_GEMV)
#undef GML_DECLARE_XW_GEMV

typedef struct gml_xw_gemv_variant {
    gml_isa isa;
    gml_xw_gemv_ukernel_fn fn;
    int mr, nr;
    const char *name;
} gml_xw_gemv_variant;

/* The variants for weights of type t (f16, bf16, q8_0; *n their count),
 * NULL for another type; and the one ISA isa selects. */
const gml_xw_gemv_variant *gml_xw_gemv_variants(gml_type t, int *n);
const gml_xw_gemv_variant *gml_xw_gemv_pick(gml_isa isa, gml_type t);

/* One batched product C[b] = A[b] @ B[b], every operand through byte strides
 * (any layout: transposed, permuted, sliced, broadcast with a 0 stride).
 *   A [nb0, nb1, M, K]: element (m, k) of batch (i0, i1) at
 *       a + i0*a_bs[0] + i1*a_bs[1] + m*a_rs + k*a_cs
 *   B [nb0, nb1, K, N]: (k, n) at b + i0*b_bs[0] + i1*b_bs[1] + k*b_rs + n*b_cs
 *   C [nb0, nb1, M, N]: (m, n) at c + i0*c_bs[0] + i1*c_bs[1] + m*c_rs + n*4 */
typedef struct gml_gemm_desc {
    int64_t M, N, K;
    int64_t nb0, nb1;
    const char *a;
    int64_t a_rs, a_cs, a_bs[2];
    const char *b;
    int64_t b_rs, b_cs, b_bs[2];
    char *c;
    int64_t c_rs, c_bs[2];
    /* B's element type: f32 (0, the default), or f16, bf16 (any strides,
     * b_rs and b_cs in bytes as for f32), or q8_0 as W^T of a q8_0 weight
     * whose rows are contiguous runs of blocks along k: b_cs the row
     * stride, b_rs the block size (34), element (k, n) the value k % 32 of
     * block k / 32 of row n; K a multiple of 32. B is converted to f32 in
     * registers (matrix-vector) or while packing its panels. */
    gml_type b_type;
    /* The plan's ISA (p->isa): B's conversion and the matrix-vector kernels
     * are its variants. */
    gml_isa isa;
} gml_gemm_desc;

/* Scratch bytes gml_gemm needs for nth threads (any variant). */
size_t gml_gemm_work_size(const gml_gemm_desc *d, int nth);
/* Thread p->ith's share of the product with micro-kernel v; call from every
 * thread of the node. Shares are chunks taken with gml_chunk_next, each
 * packing its own panels into the thread's slice of p->wdata, no barrier;
 * except one large product (one batch, Goto's loops) on several threads:
 * there the threads pack each B block together into a buffer they share,
 * meet at a gml_barrier per block, and take chunks of M's rows against it
 * with gml_chunk_next (gemm.c, run_large_shared). */
void gml_gemm(const gml_compute_params *p, const gml_gemm_desc *d, const gml_gemm_variant *v);

#endif /* GGMLITE_OPS_GEMM_H */
