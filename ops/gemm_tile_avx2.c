/* The AVX2 register tiles of the f32 GEMM (gemm.h, ops/gemm.inc; the tile
 * itself is ops/gemm_tile.h), compiled with the AVX2 flags only.
 *
 * 6 x 16: 12 ymm accumulators; per k, 2 vector loads of B and 6 broadcasts
 * of A feed 12 fmas (15 of the 16 ymm registers).
 *
 * 4 x 24: three vectors of C per row (12 accumulators, 3 B vectors, one
 * broadcast: all 16 ymm), for the few-rows C^T = W A^T loop (gemm.c), whose
 * tile width covers A's M rows: M = 20 pads to 24 here instead of 32 with
 * the 6x16 tile, 83% of the lanes busy instead of 62%. */
#define GML_TILE_FN gml_f32_gemm_ukernel__avx2_6x16
#define GML_TILE_MR 6
#define GML_TILE_NV 2
#define GML_TILE_PF_C 1
#define GML_TILE_PF_A_PACKED 0
#include "gemm_tile.h"

#define GML_TILE_FN gml_f32_gemm_ukernel__avx2_4x24
#define GML_TILE_MR 4
#define GML_TILE_NV 3
#define GML_TILE_PF_C 0
#define GML_TILE_PF_A_PACKED 0
#include "gemm_tile.h"

/* The few-rows kernel (ops/gemm_rt.h): 4 rows of W x 20 of A, 10
 * accumulators (2 x 4 + 2 tail vectors of 2 rows of W), 3 vectors of A,
 * one broadcast: 14 of the 16 ymm; W's rows prefetched into L1 128 floats
 * ahead. */
#define GML_RT_FN gml_f32_gemm_ukernel__avx2_rt4x20
#define GML_RT_MR 4
#define GML_RT_PF 128
#define GML_RT_PF_LOCALITY 3
#include "gemm_rt.h"
