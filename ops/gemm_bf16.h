/* bf16 compute for matmul (gml_set_compute, docs/numerics.md "bf16
 * compute"): a and b rounded to bf16 (gml_fp32_to_bf16: nearest, ties to
 * even, subnormals kept, NaN stays NaN), the products summed in f32 in a
 * fixed order, f32 out, bitwise the same at every thread count:
 *   chain: c = fma(a_k, b_k, c) for k = 0, 1, ..., K-1 from +0. The
 *          products of two bf16 are exact in f32 (8 + 8 significant
 *          bits), so fma rounds only the sum. The reference kernel, and
 *          the fast one, which runs the f32 GEMM of gemm.h (the same chain,
 *          bitwise) on f32 copies of the rounded operands. */
#ifndef GGMLITE_OPS_GEMM_BF16_H
#define GGMLITE_OPS_GEMM_BF16_H

#include "gemm.h"

/* A matmul node's compute precision (its op_params; ops/matmul.c). */
gml_compute gml_matmul_compute(const gml_tensor *node);
/* The product of node dst as gemm.h sees it, with a and b standing for
 * dst's sources (headers that place the same shapes elsewhere). */
gml_gemm_desc gml_matmul_desc(const gml_tensor *dst, const gml_tensor *a, const gml_tensor *b,
                              gml_isa isa);

/* The kernels of a matmul node with compute bf16: the plain loop, the
 * fast one, and its scratch. */
void gml_bf16_matmul__ref(const gml_compute_params *p, gml_tensor *dst);
void gml_bf16_matmul(const gml_compute_params *p, gml_tensor *dst);
size_t gml_bf16_matmul_work_size(const gml_tensor *dst, int nth);

/* x rounded to bf16 and widened back to f32 (exact). */
static inline float gml_round_bf16(float x) { return gml_bf16_to_fp32(gml_fp32_to_bf16(x)); }

#endif /* GGMLITE_OPS_GEMM_BF16_H */
