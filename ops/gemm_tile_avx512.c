/* The AVX-512 register tile of the f32 GEMM (gemm.h, ops/gemm.inc; the tile
 * itself is ops/gemm_tile.h), compiled with the AVX-512 flags only.
 *
 * 14 x 32: 28 zmm accumulators; per k, 2 vector loads of B and 14
 * broadcasts of A feed 28 fmas (2 zmm for B, 1 for the broadcast: all 32
 * registers busy). Prefetching the operands read in place took M=20 x 4096
 * x 4096 on one thread from 57 to 83 GFLOP/s (B in place) and from 90 to
 * 110 (A in place). A packed A micro-panel streams from L2 (the A block
 * lives there) at 56 bytes per k: a line prefetched 32 k ahead every k,
 * past the first MR, gained 1.5-2.5% on 1024^3, one thread on the Xeon
 * (145 -> 148 GFLOP/s, medians of 4 interleaved rounds; 16 or 64 k ahead
 * did as well, the AVX2 tiles gained nothing). */
#define GML_TILE_FN gml_f32_gemm_ukernel__avx512_14x32
#define GML_TILE_MR 14
#define GML_TILE_NV 2
#define GML_TILE_PF_C 1
#define GML_TILE_PF_A_PACKED 1
#include "gemm_tile.h"

/* The few-rows kernel (ops/gemm_rt.h): 16 rows of W x 20 of A, 20
 * accumulators (16 + 4 tail vectors of 4 rows of W), 2 vectors of A; W's
 * rows prefetched into L2 256 floats ahead (16 rows 4 KiB apart would
 * share L1's sets). */
#define GML_RT_FN gml_f32_gemm_ukernel__avx512_rt16x20
#define GML_RT_MR 16
#define GML_RT_PF 256
#define GML_RT_PF_LOCALITY 2
#include "gemm_rt.h"
