/* Constants of the vector exp of ops/simd/vmath.h (gml_vexp), written once
 * over the SIMD layer: every ISA computes it identically (same operations,
 * same roundings: their results are bitwise equal).
 *
 *   exp(x) = 2^n * exp(r),  n = round(x / ln2),  r = x - n ln2, |r| <= ln2/2
 *
 * - x is clamped to [GML_VEXP_LO, GML_VEXP_HI] first (NaN passes through):
 *   below, exp rounds to +0 (and -inf gives 0, not NaN); above, to +inf.
 * - r by Cody-Waite in two steps with FMA: x - n*LN2_HI is exact (LN2_HI is
 *   ln2 rounded to float; the difference is a multiple of 2^-25 below 0.35),
 *   then - n*LN2_LO, LN2_LO = ln2 - LN2_HI rounded to float.
 * - exp(r) by a degree-6 polynomial 1 + r + c2 r^2 + ... + c6 r^6 in Horner
 *   form (FMAs); c2..c6 minimize the maximum relative error on [-0.3466,
 *   0.3466] with c0 = c1 = 1 fixed (a Remez exchange run for ggmlite; degree
 *   5 would leave 1.0e-7, degree 6 leaves 3.1e-9 before the coefficients are
 *   rounded to float, far below float's 6e-8 half-ulp, so the error left is
 *   the arithmetic's).
 * - 2^n applied with one rounding (scalef on AVX-512; two exact power-of-two
 *   factors on AVX2), so results below FLT_MIN are correctly scaled
 *   subnormals, not flushed.
 * Measured error: see gml_f32_vexp_ukernel__avx512_u16 and
 * tests/test_ukernels_vexp.c. */
#ifndef GGMLITE_VEXP_H
#define GGMLITE_VEXP_H

#define GML_VEXP_LO -104.0f          /* exp(-104) = 6.8e-46 < 2^-150: rounds to 0 */
#define GML_VEXP_HI 89.0f            /* exp(89) = 4.5e38 > FLT_MAX: rounds to inf */
#define GML_VEXP_LOG2E 0x1.715476p+0f
#define GML_VEXP_LN2_HI 0x1.62e43p-1f
#define GML_VEXP_LN2_LO -0x1.05c61p-29f
#define GML_VEXP_C2 0x1.fffffcp-2f   /* 0.49999994 */
#define GML_VEXP_C3 0x1.555492p-3f   /* 0.16666521 */
#define GML_VEXP_C4 0x1.5558f2p-5f   /* 0.041668389 */
#define GML_VEXP_C5 0x1.1239e0p-7f   /* 0.0083687156 */
#define GML_VEXP_C6 0x1.6a243ap-10f  /* 0.0013814602 */

#endif /* GGMLITE_VEXP_H */
