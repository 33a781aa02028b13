/* Constants and formulas of the unary micro-kernels (ops/unary.inc), shared
 * by the scalar variants (ops/unary.c, float libm exp) and the vector ones
 * (ops/vunary_x86.h, on the vector exp of ops/vexp.h); AVX2 and AVX-512 do
 * the same operations in the same order, so their results are bitwise
 * equal. Each function is written so that no step cancels:
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
 *   gelu(x)      = 0.5 x erfc(-x / sqrt 2), in double (libm erfc; scalar
 *                  only: no vector erfc yet)
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
 *   gelu       0.500 (double)  (scalar)         0.25
 *   gelu_tanh  2.50            3.00             0.62
 *   neg        exact           (scalar)
 * The reference kernel (ops/unary.c) is within 0.5 ulp (double, rounded
 * once). */
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

#endif /* GGMLITE_VUNARY_H */
