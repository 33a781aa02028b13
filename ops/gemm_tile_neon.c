/* The NEON register tile and few-rows kernel of the f32 GEMM (gemm.h,
 * ops/gemm.inc, ops/gemm_rt.inc; the code itself is ops/gemm_tile.h and
 * ops/gemm_rt.h), compiled for AArch64's Advanced SIMD. Speed on ARM is
 * not measured here: the shapes are chosen by the register file only.
 *
 * 8 x 12: 24 q accumulators; per k, 3 vector loads of B and 8 broadcasts
 * of A feed 24 fmas (28 of the 32 q registers).
 *
 * Few rows: 4 rows of W x 20 of A, 20 accumulators (4 x 4 + 4 tail
 * vectors of one row of W), 5 vectors of A, one broadcast: 26 of 32. */
#define GML_TILE_FN gml_f32_gemm_ukernel__neon_8x12
#define GML_TILE_MR 8
#define GML_TILE_NV 3
#define GML_TILE_PF_C 1
#define GML_TILE_PF_A_PACKED 0
#include "gemm_tile.h"

#define GML_RT_FN gml_f32_gemm_ukernel__neon_rt4x20
#define GML_RT_MR 4
#define GML_RT_PF 128
#define GML_RT_PF_LOCALITY 3
#include "gemm_rt.h"
