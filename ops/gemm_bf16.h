/* bf16 compute for matmul (gml_set_compute, docs/numerics.md "bf16
 * compute"): a and b rounded to bf16 (gml_fp32_to_bf16: nearest, ties to
 * even, subnormals kept, NaN stays NaN), the products summed in f32 in a
 * fixed order, f32 out.
 *
 * Two orders, each bitwise the same at every thread count:
 *   chain: c = fma(a_k, b_k, c) for k = 0, 1, ..., K-1 from +0. The
 *          products of two bf16 are exact in f32 (8 + 8 significant
 *          bits), so fma rounds only the sum. The reference kernel and
 *          every ISA without AVX512-BF16: those run the f32 GEMM of gemm.h
 *          (the same chain, bitwise) on f32 copies of the rounded operands.
 *   pairs: VDPBF16PS's order (Intel SDM), where the plan's ISA is AVX-512
 *          and the CPU has AVX512_BF16: K padded with a 0 to even, per
 *          pair of k (2p, 2p+1) for p = 0, 1, ...:
 *              c = fma(a_{2p+1}, b_{2p+1}, c); c = fma(a_{2p}, b_{2p}, c)
 *          each fma taking subnormal inputs (the bf16 operands and c) as 0
 *          of their sign and flushing a subnormal result to 0 of its sign
 *          (the instruction's DAZ and FTZ; it ignores MXCSR). */
#ifndef GGMLITE_OPS_GEMM_BF16_H
#define GGMLITE_OPS_GEMM_BF16_H

#include "gemm.h"

/* A matmul node's compute precision (its op_params; ops/matmul.c). */
gml_compute gml_matmul_compute(const gml_tensor *node);
/* The product of node dst as gemm.h sees it, with a and b standing for
 * dst's sources (headers that place the same shapes elsewhere). */
gml_gemm_desc gml_matmul_desc(const gml_tensor *dst, const gml_tensor *a, const gml_tensor *b,
                              gml_isa isa);

/* The kernels of a matmul node with compute bf16: the plain loop (the
 * chain order), the fast one (pairs where the plan's ISA is AVX-512 and
 * the CPU has AVX512_BF16, the chain elsewhere), and its scratch. */
void gml_bf16_matmul__ref(const gml_compute_params *p, gml_tensor *dst);
void gml_bf16_matmul(const gml_compute_params *p, gml_tensor *dst);
size_t gml_bf16_matmul_work_size(const gml_tensor *dst, int nth);
/* Bytes a matmul node with compute bf16 keeps for its constant b at ISA
 * isa: b packed in pairs (gml_bf16_gemm_packed_size) where the pairs order
 * runs there, else b's copy rounded to bf16 values in f32, which the chain
 * order's f32 GEMM multiplies. */
size_t gml_bf16_matmul_kept_size(const gml_tensor *dst, gml_isa isa);

/* n elements of type t (f32, f16, bf16), stride bytes apart, rounded to
 * bf16 into dst (the bits of gml_fp32_to_bf16) through the conversion
 * micro-kernels of isa: how the GEMMs of bf16 compute pack their operands. */
void gml_bf16_convert_run(gml_isa isa, gml_type t, const char *src, int64_t stride, int64_t n, uint16_t *dst);

/* x rounded to bf16 and widened back to f32 (exact). */
static inline float gml_round_bf16(float x) { return gml_bf16_to_fp32(gml_fp32_to_bf16(x)); }

/* ---- the pairs order: a GEMM on packed bf16 pairs ------------------------
 * Operands are packed once per product, both in pairs of k (a uint32: the
 * bf16 of k = 2p in the low half, 2p + 1 in the high half, K padded with
 * a 0 to even; KP = ceil(K / 2) pairs):
 *   A: MR-row panels, panel g holding rows g MR .. g MR + MR - 1 (rows
 *      past M zero), pair p of row i at a[p * MR + i];
 *   B: NR-column panels, panel q holding columns q NR .. (columns past N
 *      zero), pair p of column j at b[p * NR + j].
 * The micro-kernel: C[m x n] (row stride ldc floats, 1 <= m <= MR,
 * 1 <= n <= NR) = (acc ? C : 0) + kp pairs of the panels from a and b, in
 * the pairs order; a K block only stores and reloads the running sums, so
 * the result is the same for every block size and thread count. The A
 * operand is packed (lda == 0) or read in place (lda > 0, m == MR): row
 * i's pair p at a[i * lda + p] (a bf16 weight W [N, K] with K
 * even is its own pairs: gml_bf16_gemm multiplies C^T = W A^T then, W read
 * in place as the A operand, A^T packed as the B one). */
#include "gemm_bf16.inc"
typedef void gml_bf16_gemm_ukernel_fn(size_t kp, const uint32_t *a, size_t lda, const uint32_t *b,
                                      float *c, size_t ldc, int m, int n, bool acc);
#define GML_DECLARE_BF16_GEMM(isa, fn, mr, nr) gml_bf16_gemm_ukernel_fn fn;
GML_BF16_GEMM_UKERNELS(GML_DECLARE_BF16_GEMM)
#undef GML_DECLARE_BF16_GEMM

typedef struct gml_bf16_gemm_variant {
    gml_isa isa;
    gml_bf16_gemm_ukernel_fn *fn;
    int mr, nr;
    const char *name; /* with " (pairs)", as gml_kernel_note records it */
} gml_bf16_gemm_variant;
extern const gml_bf16_gemm_variant gml_bf16_gemm_variants[];
extern const int gml_bf16_gemm_n_variants;

/* The variant that runs products at ISA isa: AVX-512's where the CPU has
 * AVX512_BF16, else NULL (the chain order runs). */
const gml_bf16_gemm_variant *gml_bf16_gemm_pick(gml_isa isa);

/* Scratch bytes and thread p->ith's share of the product d (b_type f32,
 * f16 or bf16) with variant v: the threads pack both operands together,
 * meet at a barrier, then take tiles of C with gml_chunk_next. */
size_t gml_bf16_gemm_work_size(const gml_gemm_desc *d, int nth);
void gml_bf16_gemm(const gml_compute_params *p, const gml_gemm_desc *d, const gml_bf16_gemm_variant *v);
/* How the bf16 GEMMs split C among nth threads: tiles of *tm rows and *tn
 * columns (multiples of mr and nr), about 3 per thread and none under
 * min_flops, the larger side split first. The pairs GEMM takes their
 * number, cdiv(M, *tm) by cdiv(N, *tn), and shares C's MR-row and
 * NR-column panels out among them as evenly as whole panels go. */
void gml_bf16_gemm_tiles(const gml_gemm_desc *d, int mr, int nr, int nth, double min_flops, int64_t *tm,
                         int64_t *tn);
/* Bytes of B packed whole for variant v: its NR-column panels over all of
 * K, for every matrix of B (one when the batches share it). */
size_t gml_bf16_gemm_packed_size(const gml_gemm_desc *d, const gml_bf16_gemm_variant *v);
/* gml_bf16_gemm with B's panels in kept (gml_bf16_gemm_packed_size bytes,
 * packed there beside A when kept does not hold this B for v yet), never
 * swapped: the same bits. kept NULL: gml_bf16_gemm. */
void gml_bf16_gemm_kept(const gml_compute_params *p, const gml_gemm_desc *d, const gml_bf16_gemm_variant *v,
                        gml_kept *kept);

#endif /* GGMLITE_OPS_GEMM_BF16_H */
