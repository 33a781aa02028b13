/* The SIMD layer: one vector type and its operations for the ISA a kernel
 * source is being compiled for, so that each kernel is written once and
 * compiled once per ISA (CMake's GGMLITE_SIMD_ISAS: the same source, one
 * object per ISA, each with its ISA's flags and -DGML_SIMD_<ISA>).
 *
 * Per ISA (ops/simd/avx2.h, avx512.h, neon.h):
 *   GML_SIMD_ISA     the gml_isa the objects are for (GML_ISA_AVX2, ...)
 *   GML_SIMD_TAG     its name in kernel names (avx2, avx512, neon)
 *   GML_VL           float lanes per vector (8, 16, 4)
 *   GML_SIMD_U1/U2/U4  GML_VL, 2 GML_VL, 4 GML_VL as literals, for names
 * Types: gml_vf (GML_VL floats), gml_vm (a predicate per float lane), gml_vi
 * (GML_VL int32), gml_vd (GML_VL / 2 doubles), gml_vdm (a predicate per
 * double lane).
 *
 * Operations, each one instruction's rounding (or exact), the same on every
 * ISA, so that a kernel computes bitwise the same on each:
 *   gml_vf_zero, set1, load, loada (aligned), store, storea
 *   gml_vm_first(k)      lanes i < k (0 <= k <= GML_VL)
 *   gml_vf_load_m(p, m)  lanes in m read from p, others 0 (and not read)
 *   gml_vf_store_m(p, m, v)  lanes in m written, others untouched
 *   add, sub, mul, div   one rounding each
 *   fma(a, b, c)         a b + c, one rounding;  fnma(a, b, c): c - a b
 *   max(a, b), min(a, b) a > b ? a : b, a < b ? a : b (b where either is NaN)
 *   abs, round (to nearest even), and, or (bits)
 *   eq, lt, le, gt, ge   ordered (false where either is NaN); unord: either NaN
 *   gml_vm_and, or, not, any
 *   select(m, a, b)      m ? a : b;  zero_unless(m, a): m ? a : +0
 *   hsum, hmax           one float from the lanes, in THIS ISA's order: the
 *                        same kernel gives other bits on another ISA; use
 *                        them only where a family's variants may differ
 *   ldexp(p, n)          p 2^n for integral n in [-150, 128], one rounding
 *   gml_vd_lo, gml_vd_hi the low / high half of a gml_vf as doubles (exact);
 *   gml_vf_from_vd(lo, hi) two gml_vd rounded to floats and joined
 *   gml_vd_*             zero, set1, add, sub, mul, div, fma, fnma, fms (a b
 *                        - c), min, abs, round, gt, select, zero_unless,
 *                        gml_vdm_not, ldexp (exact powers of two only)
 *   rope: xor (bits), dup2 (lanes 0,0,1,1,..), swap2 (1,0,3,2,..), GML_SIMD_UHALF (GML_VL/2)
 *   reduce: gml_vd_store (GML_VL / 2 doubles); add_m(a, m, b): a + b in m, a elsewhere
 *   optim: sqrt (one rounding: sqrtf's bits in every lane)
 *   softmax: gml_vd_hsum (one double from the lanes, in THIS ISA's order, as hsum)
 *   repeat: gml_vi_load; gml_vf_permute(v, idx): lane l is v's lane idx[l] (0 <= idx < GML_VL)
 *   copy: gml_vf_transpose(r[GML_VL]): r[i] lane j becomes r[j] lane i (bits kept)
 *   convert: trunc; load/store_f16 (RNE), _bf16 (as gml_fp32_to_bf16), _i8 (integral floats);
 *     round_bf16 (a float rounded to a bf16 value, as store_bf16 then load_bf16)
 *   for gemm: gml_vm_first_i(n) (lanes i < n, any int n), gml_vf_transpose
 *     (GML_VL x GML_VL), gml_vf_load_f16 / _bf16 / _i8 (GML_VL values as floats),
 *     gml_vf_set1_f16, gml_vf_gather_f16 (lane j from p[j] + off), gml_vf_sum16
 *     (16 lanes in 16 / GML_VL vectors added l + 8, l + 4, l + 2, then the two:
 *     every ISA alike), gml_vf_interleave + gml_interleave_pos (GML_VL / 4 rows
 *     side by side per k, k in the ISA's order), gml_vf_bcast_quarter (GML_VL / 4
 *     floats repeated 4 times), gml_vf_transpose_quarters (quarter t of q[g] ->
 *     quarter g of q[t])
 *   flash_attn: gml_vi_load/set1/gt, ldexp_flush, transpose, load_f16/bf16, hsum4 (ISA order)
 *   bf16 (AVX-512 compiled with -mavx512bf16 only): gml_vf_pack_bf16_pairs(lo, hi) (two
 *     vectors of bf16 values as pairs), gml_vf_dot_bf16(acc, a, b) (VDPBF16PS),
 *     gml_vi_as_vf (the bits)
 *   int8: gml_vi_bcast4(p) (4 bytes in every int32 lane), gml_vf_from_vi (exact below
 *     2^24), gml_vi_dot4_u8s8(acc, a, w) (acc + per int32 lane the 4 products of a's
 *     bytes as uint8 with w's as int8, exact: vpdpbusd where compiled with
 *     -mavx512vnni / -mavxvnni, else exact int16 products), gml_vf_as_vi (the bits),
 *     gml_vi_store, gml_vi_sub
 * The math on top of these (exp, tanh, sigmoid, gelu) is ops/simd/vmath.h.
 *
 * Kernel names: GML_SIMD_UKERNEL(f32_vadd, GML_SIMD_U2) is
 * gml_f32_vadd_ukernel__avx2_u16 in the AVX2 object, ..._avx512_u32 in the
 * AVX-512 one, ..._neon_u8 in the NEON one, as ops/<family>.inc lists them. */
#ifndef GGMLITE_SIMD_H
#define GGMLITE_SIMD_H

#if defined(GML_SIMD_AVX512)
#include "avx512.h"
#elif defined(GML_SIMD_AVX2)
#include "avx2.h"
#elif defined(GML_SIMD_NEON)
#include "neon.h"
#else
#error "ops/simd/simd.h: compile with -DGML_SIMD_AVX2, -DGML_SIMD_AVX512 or -DGML_SIMD_NEON"
#endif

#define GML_SIMD_UKERNEL(kind, u) GML_SIMD_UKERNEL_(kind, GML_SIMD_TAG, u)
#define GML_SIMD_UKERNEL_(kind, tag, u) GML_SIMD_UKERNEL__(kind, tag, u)
#define GML_SIMD_UKERNEL__(kind, tag, u) gml_##kind##_ukernel__##tag##_u##u

/* Inlined always: helpers of the innermost loops. */
#if defined(__GNUC__)
#define GML_SIMD_INLINE inline __attribute__((always_inline))
#else
#define GML_SIMD_INLINE inline
#endif

#endif /* GGMLITE_SIMD_H */
