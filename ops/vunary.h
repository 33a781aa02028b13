/* Constants and formulas of the unary micro-kernels (ops/unary.inc), shared
 * by the scalar variants (ops/unary.c, float libm exp) and the vector ones
 * (ops/simd/vmath.h, on the vector exp of ops/vexp.h; gelu on its own
 * erfc in double lanes, below), written once over the SIMD layer: every
 * ISA does the same operations in the same order, so their results are
 * bitwise equal. Each function is written so that no step cancels:
 *
 *   sigmoid(x)   = n / (1 + e),  e = exp(-|x|),  n = 1 (x >= 0) or e (x < 0)
 *   silu(x)      = x * sigmoid(x) = n / (1 + e), n = x (x >= 0) or x * e
 *   gelu_tanh(x) = 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x +
 *                  0.044715 x^3), 2u = x (C1 + C3 x^2) in double: as silu
 *                  with e = exp(-|2u|) (float exp of 2u rounded to float s,
 *                  times 1 -+ (2u - s): an error in s would cost |s| ulp
 *                  of e), n = x (2u >= 0) or x * e
 *   tanh(x)      = sign(x) t(|x|), t(a) = a + a^3 P(a^2) for a < 0.625 (P
 *                  degree 5: a least-squares fit on Chebyshev nodes made for
 *                  ggmlite, relative error 2.9e-9 before the coefficients are
 *                  rounded to float), else 1 - 2 / (1 + exp(2a))
 *   gelu(x)      = 0.5 x erfc(-x / sqrt 2), in double: libm erfc (scalar);
 *                  a = |x| / sqrt 2, f = erfc(a) (x <= 0) or 2 - erfc(a)
 *                  (x > 0), erfc(a) = exp(-a^2) t G(t) in double lanes
 *                  (vector, below; no step cancels, relative error ~1e-14),
 *                  0.5 x f rounded once to float
 *
 * e <= 1, so n / (1 + e) never overflows; for x < 0 the result is e-sized
 * and keeps exp's relative accuracy down to exp's underflow (x < -87.3
 * gives subnormal e: the result then has an absolute error of about |x|
 * 2^-150), where PyTorch's x / (1 + exp(-x)) flushes to -0 from x < -88.7.
 * Special values as PyTorch gives them: NaN in, NaN out; sigmoid(+-inf) =
 * 1, 0; silu and gelu_tanh (and gelu): +inf -> +inf, -inf -> NaN (-inf *
 * 0); tanh(+-inf) = +-1; tanh and silu keep the sign of a zero.
 *
 * Measured max error against the double reference (tests/test_unary.c's
 * sweep: 306,217 inputs, a 2^-12 grid over [-30, 30], 64 per octave over
 * every float exponent of both signs, [-105, -80] finely), in ulps of the
 * result; results below 2^-118 (exp underflowing) in units of 2^-141:
 *              scalar (libm)   AVX2 = AVX-512   below 2^-118
 *   exp        0.501           0.876            0.37
 *   tanh       1.97 (tanhf)    1.21             -
 *   sigmoid    2.13            2.13             0.37
 *   silu       2.56            2.99             0.57
 *   gelu       0.500 (double)  0.500 (double)   0.25
 *   gelu_tanh  2.50            3.00             0.62
 *   neg        exact           (scalar)
 * The reference kernel (ops/unary.c) is within 0.5 ulp (double, rounded
 * once). gelu's vector variants over all 2^32 floats: max 0.5000 ulp, 50
 * results (near-ties) not the reference's rounding, each 1 ulp from it;
 * specials, subnormals and the underflow to -0 (x < -14.356) as it. */
#ifndef GGMLITE_VUNARY_H
#define GGMLITE_VUNARY_H

/* 2u = x (C1 + C3 x^2), computed in double (C1 = 2 sqrt(2/pi), C3 = C1
 * 0.044715, rounded to double), rounded to float s, and what that rounding
 * dropped, d = 2u - s, corrects exp: exp(-|2u|) = exp(-|s|) (1 -+ d). */
#define GML_VGELU_C1 0x1.9884533d43651p+0 /* 1.5957691216057308 */
#define GML_VGELU_C3 0x1.2444f2a4d8b4bp-4 /* 0.07135481627260025 */
#define GML_VTANH_SMALL 0.625f        /* below: the polynomial */
#define GML_VTANH_P0 -0x1.555554p-2f
#define GML_VTANH_P1 0x1.11106p-3f
#define GML_VTANH_P2 -0x1.b9ed7ep-5f
#define GML_VTANH_P3 0x1.6380e4p-6f
#define GML_VTANH_P4 -0x1.0bc5eep-7f
#define GML_VTANH_P5 0x1.1842f8p-9f

/* gelu's erfc in double (ops/simd/vmath.h, gml_vgelu_d): a = |x| / sqrt 2 clamped to
 * GML_VGELU_AMAX, t = K / (K + a) in (0.276, 1], and
 *   erfc(a) = exp(-a^2) t G(t - GML_VGELU_TC),
 * G of degree 16: a least-squares fit (relative weights, 400 Chebyshev
 * nodes, mpmath at 40 digits: tools/fit_vgelu_erfc.py, made for ggmlite)
 * of erfc(a) exp(a^2) / t,
 * relative error 1.1e-14 in double over a in [0, 10.5]. exp(-a^2) with a^2
 * = h + l split by an FMA: n = round(-h log2 e), r = -h - n ln2 - l, exp(r)
 * by its Taylor polynomial of degree 12 (|r| <= 0.347: 2e-16), times 2^n
 * (n >= -160: a normal double). Where a > AMAX (x < -14.85, beyond where
 * gelu is -0 in float from x < -14.356) erfc is taken as 0; where a <=
 * GML_VGELU_TINY, erfc(a) = 1 - a 2/sqrt(pi) (relative error a^2/3), which
 * is exactly 1 in double for a < 2^-54 as libm's erfc: G(1) is only within
 * 1e-15 of 1, and the odd subnormal x, whose 0.5 x is a tie, would round
 * the other way on either side of it. */
#define GML_VGELU_K 4.0
#define GML_VGELU_AMAX 10.5
#define GML_VGELU_TC 0x1.469ee58469ee6p-1 /* 0.6379310344827587 */
#define GML_VGELU_RSQRT2 0x1.6a09e667f3bcdp-1 /* 1 / sqrt 2 */
#define GML_VGELU_TINY 0x1p-24
#define GML_VGELU_2RSQRTPI 0x1.20dd750429b6dp+0 /* 2 / sqrt pi */
#define GML_VGELU_LOG2E 0x1.71547652b82fep+0
#define GML_VGELU_LN2_HI 0x1.62e42fefa39efp-1
#define GML_VGELU_LN2_LO 0x1.abc9e3b39803fp-56
#define GML_VGELU_G0 0x1.7014a125571b0p-2
#define GML_VGELU_G1 0x1.8f6d73f34861ap-1
#define GML_VGELU_G2 0x1.6a7f43402bbc7p+0
#define GML_VGELU_G3 0x1.1389904730abap+1
#define GML_VGELU_G4 0x1.5c1e0d4d011dap+1
#define GML_VGELU_G5 0x1.6624a6983fbd5p+1
#define GML_VGELU_G6 0x1.1f0234b657bb7p+1
#define GML_VGELU_G7 0x1.40c2dfcf06801p+0
#define GML_VGELU_G8 0x1.322e0f208a67bp-2
#define GML_VGELU_G9 -0x1.ae885bf528bcbp-3
#define GML_VGELU_G10 -0x1.ccbc6c3331945p-3
#define GML_VGELU_G11 -0x1.dec3ae38c46d4p-6
#define GML_VGELU_G12 0x1.3ca8aefaaa322p-4
#define GML_VGELU_G13 0x1.29450e3403dfdp-5
#define GML_VGELU_G14 -0x1.7b5ee512ac79cp-6
#define GML_VGELU_G15 -0x1.0ce4fdf64dab5p-6
#define GML_VGELU_G16 0x1.620f1e4a4056fp-8
#define GML_VGELU_E2 0x1.0000000000000p-1 /* 1/2! */
#define GML_VGELU_E3 0x1.5555555555555p-3 /* 1/3! */
#define GML_VGELU_E4 0x1.5555555555555p-5 /* 1/4! */
#define GML_VGELU_E5 0x1.1111111111111p-7 /* 1/5! */
#define GML_VGELU_E6 0x1.6c16c16c16c17p-10 /* 1/6! */
#define GML_VGELU_E7 0x1.a01a01a01a01ap-13 /* 1/7! */
#define GML_VGELU_E8 0x1.a01a01a01a01ap-16 /* 1/8! */
#define GML_VGELU_E9 0x1.71de3a556c734p-19 /* 1/9! */
#define GML_VGELU_E10 0x1.27e4fb7789f5cp-22 /* 1/10! */
#define GML_VGELU_E11 0x1.ae64567f544e4p-26 /* 1/11! */
#define GML_VGELU_E12 0x1.1eed8eff8d898p-29 /* 1/12! */

#endif /* GGMLITE_VUNARY_H */
