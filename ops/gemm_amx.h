/* The AMX kernels: the bf16 GEMM here, and the int8 micro-kernel below
 * ("int8").
 *
 * The AMX bf16 GEMM: TDPBF16PS on tiles, for matmul with compute bf16
 * (docs/numerics.md, "The AMX order"). NOT VERIFIED ON AN AMX CPU: written
 * and tested on machines without AMX, against a C emulation of the tile
 * instructions (tests/amx_emul.h). It runs only when asked for
 * (GGMLITE_AMX=1), where the plan's ISA is AVX-512, the CPU has AMX-BF16
 * and Linux grants the tile data permission (gml_amx_bf16_pick); otherwise
 * nothing of it runs and bf16 matmuls run as without it.
 *
 * The order (TDPBF16PS as the Intel SDM defines it): a and b rounded to
 * bf16, K padded with +0 to a multiple of 32; per output element and per
 * step of 32 k (16 pairs, one tile's row), from c = +0:
 *     e = +0, o = +0
 *     for p = 0 .. 15:  e = fma(a_{2p}, b_{2p}, e); o = fma(a_{2p+1}, b_{2p+1}, o)
 *     c = c + (e + o)
 * every operation with subnormal inputs taken as 0 of their sign and a
 * subnormal result flushed to 0 of its sign (DAZ, FTZ, MXCSR ignored). A K
 * block only stores and reloads c, so the result is the same for every
 * block size and thread count.
 *
 * Layouts (uint32 = a pair of bf16: k = 2p in the low half, 2p + 1 high;
 * KQ = ceil(K / 32) steps of 16 pairs):
 *   A: groups of 32 rows (rows past M zero); group g holds KQ blocks of
 *      512 pairs, block q = rows 0..31 of the group x pairs 16q..16q+15,
 *      row-major (row i's 16 pairs at i * 16): tile A0 (rows 0..15) and A1
 *      (16..31) load with a 64-byte stride.
 *   B: panels of 32 columns (columns past N zero), pair p of column j at
 *      b[p * 32 + j] for p < 16 KQ (pairs past K zero): the pairs layout of
 *      gemm_bf16.h at NR = 32, K padded to whole steps; tiles B0 (columns
 *      0..15) and B1 (16..31) of step q load from b + 512 q (+ 16) with a
 *      128-byte stride. A constant B (a weight) is packed once into memory
 *      the graph keeps (gml_kept), as the bf16 and int8 GEMMs keep theirs. */
#ifndef GGMLITE_OPS_GEMM_AMX_H
#define GGMLITE_OPS_GEMM_AMX_H

#include "gemm.h"
#include "gemm_q8.h"

enum {
    GML_AMX_MR = 32,      /* rows of C per micro-kernel call: two tiles of 16 */
    GML_AMX_NR = 32,      /* columns: two tiles of 16 f32 */
    GML_AMX_STEP = 16,    /* pairs of k per TDPBF16PS (64 bytes a tile row) */
    GML_AMX_BLOCK = 512,  /* pairs of an A block or a B step: 32 x 16 */
};

/* The tile kernel, compiled from ops/gemm_amx_bf16.c with the tile
 * instructions (suffix __amx, only where the compiler has -mamx-tile
 * -mamx-bf16: GML_HAVE_AMX) and against the emulation (suffix __amxemul,
 * in tests/test_amx_bf16.c only):
 *   configure: loads the kernel's tile configuration (eight tiles of 16
 *              rows x 64 bytes) on the calling thread, which every thread
 *              does before its first tile call;
 *   tile:      C[32 x 32] (row stride ldc floats) = (acc ? C : 0) + kq
 *              steps of the A group block a and B panel b (layouts above);
 *   tile16:    the same for rows 0..15 of the group only (C[16 x 32]): one
 *              A tile, two TDPBF16PS a step; for a group with at most 16
 *              rows of A (decoding's 1 to 4, M's tail), in the same order;
 *   release:   TILERELEASE on the calling thread (tiles back to their
 *              initial state). */
typedef struct gml_amx_bf16_kernel {
    void (*configure)(void);
    void (*tile)(size_t kq, const uint32_t *a, const uint32_t *b, float *c, size_t ldc, bool acc);
    void (*tile16)(size_t kq, const uint32_t *a, const uint32_t *b, float *c, size_t ldc, bool acc);
    void (*release)(void);
    /* what gml_kernel_note records (gml_amx_bf16_note): the 32 x 32 kernel
     * only, the 16 x 32 kernel only, or both; each with " (tiles)" */
    const char *name, *name16, *name_both;
} gml_amx_bf16_kernel;

/* The kernel of suffix sfx (amx; amxemul in the tests) with its names. */
#define GML_AMX_BF16_KERNEL(sfx)                                                                   \
    {gml_amx_bf16_configure__##sfx, gml_bf16_gemm_ukernel__##sfx##_32x32,                          \
     gml_bf16_gemm_ukernel__##sfx##_16x32, gml_amx_bf16_release__##sfx,                           \
     "gml_bf16_gemm_ukernel__" #sfx "_32x32 (tiles)", "gml_bf16_gemm_ukernel__" #sfx "_16x32 (tiles)", \
     "gml_bf16_gemm_ukernel__" #sfx "_32x32 and __" #sfx "_16x32 (tiles)"}

#define GML_AMX_BF16_DECLARE(sfx)                                                                  \
    void gml_amx_bf16_configure__##sfx(void);                                                      \
    void gml_bf16_gemm_ukernel__##sfx##_32x32(size_t kq, const uint32_t *a, const uint32_t *b,     \
                                              float *c, size_t ldc, bool acc);                     \
    void gml_bf16_gemm_ukernel__##sfx##_16x32(size_t kq, const uint32_t *a, const uint32_t *b,     \
                                              float *c, size_t ldc, bool acc);                     \
    void gml_amx_bf16_release__##sfx(void);
GML_AMX_BF16_DECLARE(amx)
GML_AMX_BF16_DECLARE(amxemul)
#undef GML_AMX_BF16_DECLARE

/* The AMX kernel where matmul with compute bf16 runs it at ISA isa, else
 * NULL: only with GGMLITE_AMX=1 in the environment (read once), isa AVX-512,
 * a build with GML_HAVE_AMX, a CPU with AMX-BF16 and Linux's permission
 * (gml_cpu_amx_permit); GGMLITE_AMX=1 without one of the last three says
 * once on stderr why AMX does not run. */
const gml_amx_bf16_kernel *gml_amx_bf16_pick(gml_isa isa);
/* The name of what k runs for a product of M rows (of a batch), as the
 * node's kernel note records it: k->name16 where M <= 16 (one group on the
 * 16 x 32 kernel), k->name_both where the last group of 32 rows has 1 to
 * 16 (M > 32, M % 32 <= 16), else k->name. */
const char *gml_amx_bf16_note(const gml_amx_bf16_kernel *k, int64_t M);
/* Whether flash_attn's AMX tiles may run at ISA isa: the checks of
 * gml_amx_bf16_pick (GGMLITE_AMX=1, AVX-512, a build with the tiles,
 * AMX-BF16, Linux's permission), saying once on stderr why not, naming
 * bf16 flash attention as what runs without AMX. */
bool gml_amx_flash_runs(gml_isa isa);
/* For tests: with GGMLITE_AMX=1 and isa AVX-512, gml_amx_bf16_pick hands
 * out k (the kernel compiled against the tile emulation, tests/amx_emul.h)
 * in place of the CPU's and without asking the CPU; NULL: the CPU's again.
 * Not while a product runs. */
void gml_amx_bf16_set_kernel(const gml_amx_bf16_kernel *k);

/* Scratch bytes of the product d for nth threads: A packed, B packed
 * (unless kept), a row of K bf16 and a 32 x 32 edge tile per thread. */
size_t gml_amx_bf16_work_size(const gml_gemm_desc *d, int nth);
/* Bytes of B packed whole (every matrix of B, one when shared). */
size_t gml_amx_bf16_packed_size(const gml_gemm_desc *d);
/* Thread p->ith's share of the product d (b_type f32, f16 or bf16) with
 * kernel k: the threads pack A (and B unless kept holds it for k) together,
 * meet at a barrier, then each configures its tiles, takes tiles of C with
 * gml_chunk_next and releases its tiles. kept: NULL, or
 * gml_amx_bf16_packed_size bytes where B is packed once and reused while
 * its key (B's address, strides, type, k) matches. */
void gml_amx_bf16_gemm(const gml_compute_params *p, const gml_gemm_desc *d, const gml_amx_bf16_kernel *k,
                       gml_kept *kept);

/* ---- int8 ------------------------------------------------------------------ */

/* The AMX int8 micro-kernel: TDPBUSD on tiles, for matmul with compute
 * int8 (q8_0 weights), a variant of ops/gemm_q8.h run by its driver
 * (gml_q8_gemm_kept) and giving its bits: NOT VERIFIED ON AN AMX CPU
 * (tests/test_amx_q8.c runs it on the emulation). It runs only where
 * gml_amx_q8_pick hands it out (GGMLITE_AMX=1, AVX-512, AMX-INT8, Linux's
 * permission), through gml_q8_gemm_pick.
 *
 * Per block of 32 k (one q8 block, so that each block's int32 sum stays
 * its own: a tile row of 64 bytes would add two blocks' products), a
 * 32 x 32 tile of C takes four TDPBUSD of 16 rows x 32 bytes of A (the
 * quantized rows as gml_q8_gemm keeps them, q + 128 as uint8, loaded with
 * A's row stride) by 8 rows x 64 bytes of W (the panel of gemm_q8.h at
 * NR = 32: its 4 k of each row side by side are TDPBUSD's B layout; 16
 * columns at q, 16 at q + 64, a row of the panel 128 bytes), into int32
 * tiles that start from the panel's correction -128 sum q (a row loaded
 * with stride 0). The sums of a few blocks are stored, then each element's
 * f32 chain takes them in block order: c = fma((float)s_b, da * dw, c),
 * over the SIMD layer (the kernel's source is compiled for AVX-512 only).
 * Tiles: 0..3 sums (rows 0-15 x columns 0-15, 0-15 x 16-31, 16-31 x 0-15,
 * 16-31 x 16-31), 4..5 A (rows 0-15, 16-31; 16 x 32 bytes), 6..7 W
 * (columns 0-15, 16-31; 8 x 64 bytes); a tile of 16 rows or fewer uses
 * tiles 0, 1, 4, 6, 7 only. Rows of A past the tile's m are never read
 * (a tail's rows are copied into a zeroed block first). */
#define GML_AMX_Q8_DECLARE(sfx)                                                                    \
    void gml_amx_q8_configure__##sfx(void);                                                        \
    void gml_q8_gemm_ukernel__##sfx##_32x32(size_t nblk, const uint8_t *aq, size_t lda,            \
                                            const float *ad, size_t ldd, int m, const void *panel, \
                                            int n, float *c, size_t ldc, bool acc, const void *ahead); \
    void gml_amx_q8_release__##sfx(void);
GML_AMX_Q8_DECLARE(amx)
GML_AMX_Q8_DECLARE(amxemul)
#undef GML_AMX_Q8_DECLARE

/* The variant of the tile kernel with suffix sfx (amx, or amxemul in
 * tests/test_amx_q8.c): MR = NR = 32, W packed by the AVX-512 panel packer
 * (the layout above), the tile configuration loaded by each thread before
 * its first tile and released after its last. */
#define GML_AMX_Q8_VARIANT(sfx)                                                                    \
    {GML_ISA_AVX512, GML_Q8_FEAT_AMX_INT8, gml_q8_gemm_ukernel__##sfx##_32x32,                     \
     gml_q8_pack_ukernel__avx512_x32, GML_AMX_MR, GML_AMX_NR,                                      \
     "gml_q8_gemm_ukernel__" #sfx "_32x32 (tiles)", gml_amx_q8_configure__##sfx,                   \
     gml_amx_q8_release__##sfx}

/* The AMX int8 variant where matmul with compute int8 runs it at ISA isa,
 * else NULL: as gml_amx_bf16_pick, with AMX-INT8 for AMX-BF16. */
const gml_q8_gemm_variant *gml_amx_q8_pick(gml_isa isa);

#endif /* GGMLITE_OPS_GEMM_AMX_H */
