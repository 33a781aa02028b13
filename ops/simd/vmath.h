/* Vector math over the SIMD layer, written once for every ISA: exp (the
 * algorithm and constants of ops/vexp.h), the unary functions of
 * ops/vunary.h (tanh, sigmoid, silu, gelu_tanh, gelu) and their derivatives
 * in double lanes (unary_back). The same operations in the same order on
 * every ISA: bitwise equal results. */
#ifndef GGMLITE_SIMD_VMATH_H
#define GGMLITE_SIMD_VMATH_H

#include "../vexp.h"
#include "../vunary.h"
#include "simd.h"

#include <math.h>

/* ---- exp ---- */

/* exp(x) = p 2^n without the clamps, for arguments that need none
 * (flash_attn's x <= 0): n = round(x log2 e), r = x - n ln 2 (two steps,
 * the first exact), p(r) the degree-6 polynomial of ops/vexp.h. */
static GML_SIMD_INLINE gml_vf gml_vexp_reduce(gml_vf x, gml_vf *n_out) {
    const gml_vf n = gml_vf_round(gml_vf_mul(x, gml_vf_set1(GML_VEXP_LOG2E)));
    gml_vf r = gml_vf_fnma(n, gml_vf_set1(GML_VEXP_LN2_HI), x); /* exact */
    r = gml_vf_fnma(n, gml_vf_set1(GML_VEXP_LN2_LO), r);
    gml_vf p = gml_vf_set1(GML_VEXP_C6);
    p = gml_vf_fma(p, r, gml_vf_set1(GML_VEXP_C5));
    p = gml_vf_fma(p, r, gml_vf_set1(GML_VEXP_C4));
    p = gml_vf_fma(p, r, gml_vf_set1(GML_VEXP_C3));
    p = gml_vf_fma(p, r, gml_vf_set1(GML_VEXP_C2));
    p = gml_vf_fma(p, r, gml_vf_set1(1.0f));
    *n_out = n;
    return gml_vf_fma(p, r, gml_vf_set1(1.0f));
}

/* gml_vexp_reduce after clamping x to [GML_VEXP_LO, GML_VEXP_HI] (a NaN
 * stays: max and min return their second operand then). */
static inline gml_vf gml_vexp_poly(gml_vf x, gml_vf *n_out) {
    x = gml_vf_max(gml_vf_set1(GML_VEXP_LO), x);
    x = gml_vf_min(gml_vf_set1(GML_VEXP_HI), x);
    return gml_vexp_reduce(x, n_out);
}

/* exp(x): -inf and below GML_VEXP_LO give +0, above GML_VEXP_HI +inf, NaN
 * NaN; subnormal results scaled with one rounding. */
static inline gml_vf gml_vexp(gml_vf x) {
    gml_vf n;
    const gml_vf p = gml_vexp_poly(x, &n);
    return gml_vf_ldexp(p, n);
}

/* gml_vexp, but +0 where the result would be below 2^-125.5 (x below about
 * -86.99, where n <= -126): no subnormal is ever computed. For sums of
 * exp(s - max), whose terms are added to a sum >= 1: on Intel a subnormal
 * result costs a microcode assist (~100+ cycles), and an online softmax
 * makes them by the million when scores spread over more than 87. A term so
 * flushed changes the sum by less than 2^-125 (far below its ulp). */
static inline gml_vf gml_vexp_nosub(gml_vf x) {
    gml_vf n;
    gml_vf p = gml_vexp_poly(x, &n);
    /* n > -126 (or NaN) keeps p 2^n normal; the other lanes scale a +0 */
    p = gml_vf_zero_unless(gml_vm_not(gml_vf_le(n, gml_vf_set1(-126.0f))), p);
    return gml_vf_ldexp(p, n);
}

/* ---- sigmoid, silu, gelu_tanh, tanh (formulas: ops/vunary.h) ---- */

/* n / (1 + e) with e = exp(-|s|), n = x where s >= 0, x e elsewhere (NaN s:
 * NaN). sigmoid: x = 1, s = the input; silu: x = s. */
static inline gml_vf gml_vsigmul(gml_vf x, gml_vf s) {
    const gml_vf e = gml_vexp(gml_vf_sub(gml_vf_zero(), gml_vf_abs(s)));
    const gml_vm ge = gml_vf_ge(s, gml_vf_zero());
    const gml_vf n = gml_vf_select(ge, x, gml_vf_mul(x, e));
    return gml_vf_div(n, gml_vf_add(gml_vf_set1(1.0f), e));
}
static inline gml_vf gml_vsigmoid(gml_vf x) { return gml_vsigmul(gml_vf_set1(1.0f), x); }
static inline gml_vf gml_vsilu(gml_vf x) { return gml_vsigmul(x, x); }

/* 2u = x (C1 + C3 x^2) of a half of the lanes, in double. */
static inline gml_vd gml_vgelu_2u(gml_vd xd) {
    return gml_vd_mul(xd, gml_vd_fma(gml_vd_set1(GML_VGELU_C3), gml_vd_mul(xd, xd),
                                     gml_vd_set1(GML_VGELU_C1)));
}
/* x sigmoid(2u): as silu with s = 2u rounded to float and e = exp(-|s|)
 * corrected by what the rounding dropped, d = 2u - s. */
static inline gml_vf gml_vgelu_tanh(gml_vf x) {
    const gml_vd lo = gml_vgelu_2u(gml_vd_lo(x)), hi = gml_vgelu_2u(gml_vd_hi(x));
    const gml_vf s = gml_vf_from_vd(lo, hi);
    gml_vf d = gml_vf_from_vd(gml_vd_sub(lo, gml_vd_lo(s)), gml_vd_sub(hi, gml_vd_hi(s)));
    gml_vf e = gml_vexp(gml_vf_sub(gml_vf_zero(), gml_vf_abs(s)));
    const gml_vm ge = gml_vf_ge(s, gml_vf_zero());
    d = gml_vf_select(ge, d, gml_vf_sub(gml_vf_zero(), d)); /* |2u| - |s| */
    /* s +-inf (2u beyond float): d is NaN or inf there, and e already exact */
    d = gml_vf_zero_unless(gml_vf_lt(gml_vf_abs(s), gml_vf_set1(INFINITY)), d);
    e = gml_vf_fnma(e, d, e); /* e (1 - d) */
    const gml_vf n = gml_vf_select(ge, x, gml_vf_mul(x, e));
    return gml_vf_div(n, gml_vf_add(gml_vf_set1(1.0f), e));
}

static inline gml_vf gml_vtanh(gml_vf x) {
    const gml_vf a = gml_vf_abs(x);
    const gml_vf one = gml_vf_set1(1.0f);
    const gml_vf e = gml_vexp(gml_vf_add(a, a));
    const gml_vf big = gml_vf_sub(one, gml_vf_div(gml_vf_set1(2.0f), gml_vf_add(one, e)));
    const gml_vf a2 = gml_vf_mul(a, a);
    gml_vf p = gml_vf_set1(GML_VTANH_P5);
    p = gml_vf_fma(p, a2, gml_vf_set1(GML_VTANH_P4));
    p = gml_vf_fma(p, a2, gml_vf_set1(GML_VTANH_P3));
    p = gml_vf_fma(p, a2, gml_vf_set1(GML_VTANH_P2));
    p = gml_vf_fma(p, a2, gml_vf_set1(GML_VTANH_P1));
    p = gml_vf_fma(p, a2, gml_vf_set1(GML_VTANH_P0));
    const gml_vf small = gml_vf_fma(gml_vf_mul(a, a2), p, a);
    const gml_vf t = gml_vf_select(gml_vf_lt(a, gml_vf_set1(GML_VTANH_SMALL)), small, big);
    return gml_vf_or(t, gml_vf_and(x, gml_vf_set1(-0.0f))); /* x's sign */
}

/* ---- gelu: 0.5 x erfc(-x / sqrt 2), per lane in double (ops/vunary.h) ---- */

/* erfc(-x / sqrt 2) (= 2 Phi(x)) in double lanes */
static inline gml_vd gml_verfc_neg_d(gml_vd x) {
    const gml_vd a0 = gml_vd_mul(gml_vd_abs(x), gml_vd_set1(GML_VGELU_RSQRT2));
    const gml_vd a = gml_vd_min(gml_vd_set1(GML_VGELU_AMAX), a0); /* min: a NaN a0 stays */
    const gml_vd t = gml_vd_div(gml_vd_set1(GML_VGELU_K), gml_vd_add(gml_vd_set1(GML_VGELU_K), a));
    const gml_vd u = gml_vd_sub(t, gml_vd_set1(GML_VGELU_TC));
    static const double G[] = {GML_VGELU_G15, GML_VGELU_G14, GML_VGELU_G13, GML_VGELU_G12,
                               GML_VGELU_G11, GML_VGELU_G10, GML_VGELU_G9,  GML_VGELU_G8,
                               GML_VGELU_G7,  GML_VGELU_G6,  GML_VGELU_G5,  GML_VGELU_G4,
                               GML_VGELU_G3,  GML_VGELU_G2,  GML_VGELU_G1,  GML_VGELU_G0};
    gml_vd g = gml_vd_set1(GML_VGELU_G16);
    for (int i = 0; i < 16; i++) g = gml_vd_fma(g, u, gml_vd_set1(G[i]));
    const gml_vd h = gml_vd_mul(a, a), l = gml_vd_fms(a, a, h); /* a^2 = h + l */
    const gml_vd n = gml_vd_round(gml_vd_mul(h, gml_vd_set1(-GML_VGELU_LOG2E)));
    gml_vd r = gml_vd_fnma(n, gml_vd_set1(GML_VGELU_LN2_HI), gml_vd_sub(gml_vd_zero(), h));
    r = gml_vd_sub(gml_vd_fnma(n, gml_vd_set1(GML_VGELU_LN2_LO), r), l);
    static const double E[] = {GML_VGELU_E11, GML_VGELU_E10, GML_VGELU_E9, GML_VGELU_E8,
                               GML_VGELU_E7,  GML_VGELU_E6,  GML_VGELU_E5, GML_VGELU_E4,
                               GML_VGELU_E3,  GML_VGELU_E2,  1.0,          1.0};
    gml_vd p = gml_vd_set1(GML_VGELU_E12);
    for (int i = 0; i < 12; i++) p = gml_vd_fma(p, r, gml_vd_set1(E[i]));
    /* erfc(a); the scaling is exact: n >= -160 */
    gml_vd e = gml_vd_mul(gml_vd_mul(gml_vd_ldexp(p, n), t), g);
    /* erfc(a > AMAX) = 0 */
    e = gml_vd_zero_unless(gml_vdm_not(gml_vd_gt(a0, gml_vd_set1(GML_VGELU_AMAX))), e);
    /* a <= TINY: 1 - a 2/sqrt(pi) */
    e = gml_vd_select(gml_vd_gt(a, gml_vd_set1(GML_VGELU_TINY)), e,
                      gml_vd_fnma(a, gml_vd_set1(GML_VGELU_2RSQRTPI), gml_vd_set1(1.0)));
    /* x > 0: erfc(-a) = 2 - erfc(a) */
    return gml_vd_select(gml_vd_gt(x, gml_vd_zero()), gml_vd_sub(gml_vd_set1(2.0), e), e);
}
static inline gml_vd gml_vgelu_d(gml_vd x) {
    return gml_vd_mul(gml_vd_mul(x, gml_vd_set1(0.5)), gml_verfc_neg_d(x));
}
static inline gml_vf gml_vgelu(gml_vf x) {
    return gml_vf_from_vd(gml_vgelu_d(gml_vd_lo(x)), gml_vgelu_d(gml_vd_hi(x)));
}

/* ---- derivatives, for unary_back: f'(x) per lane in double ---------------
 * Each from e = exp(-|s|) (s = 2x for tanh, x for sigmoid and silu, 2u for
 * gelu_tanh) as sums of positive terms, so that only a root of f' cancels:
 *     tanh'    = 4 e / (1 + e)^2
 *     sigmoid' = e / (1 + e)^2                       (= s (1 - s))
 *     silu'    = s + x e / (1 + e)^2,  s = sigmoid(x)
 *     gelu_tanh' = s + x (C1 + 3 C3 x^2) e / (1 + e)^2,  s = sigmoid(2u)
 *     gelu'    = 0.5 erfc(-x / sqrt 2) + x exp(-x^2 / 2) / sqrt(2 pi)
 * s = 1 / (1 + e) where its argument is > 0, e / (1 + e) elsewhere. */

/* exp(-a) for a >= 0 (NaN: NaN), +0 where a > GML_VDEXP_MAX: n = round(-a
 * log2 e), r = -a - n ln2 (two steps), the degree-12 Taylor polynomial of
 * gml_verfc_neg_d's exp (|r| <= 0.347: relative error 2e-16), times 2^n
 * (n >= -1021: a normal power of two). */
#define GML_VDEXP_MAX 708.0 /* exp(-708) = 3.3e-308, still normal */
static inline gml_vd gml_vd_expneg(gml_vd a) {
    const gml_vd h = gml_vd_min(gml_vd_set1(GML_VDEXP_MAX), a); /* min: a NaN a stays */
    const gml_vd n = gml_vd_round(gml_vd_mul(h, gml_vd_set1(-GML_VGELU_LOG2E)));
    gml_vd r = gml_vd_fnma(n, gml_vd_set1(GML_VGELU_LN2_HI), gml_vd_sub(gml_vd_zero(), h));
    r = gml_vd_fnma(n, gml_vd_set1(GML_VGELU_LN2_LO), r);
    static const double E[] = {GML_VGELU_E11, GML_VGELU_E10, GML_VGELU_E9, GML_VGELU_E8,
                               GML_VGELU_E7,  GML_VGELU_E6,  GML_VGELU_E5, GML_VGELU_E4,
                               GML_VGELU_E3,  GML_VGELU_E2,  1.0,          1.0};
    gml_vd p = gml_vd_set1(GML_VGELU_E12);
    for (int i = 0; i < 12; i++) p = gml_vd_fma(p, r, gml_vd_set1(E[i]));
    return gml_vd_zero_unless(gml_vdm_not(gml_vd_gt(a, gml_vd_set1(GML_VDEXP_MAX))),
                              gml_vd_ldexp(p, n));
}

/* e / (1 + e)^2 */
static inline gml_vd gml_vd_sig_d1(gml_vd e, gml_vd i) { return gml_vd_mul(gml_vd_mul(e, i), i); }

static inline gml_vd gml_vtanh_d1(gml_vd x) {
    const gml_vd a = gml_vd_abs(x);
    const gml_vd e = gml_vd_expneg(gml_vd_add(a, a));
    const gml_vd i = gml_vd_div(gml_vd_set1(1.0), gml_vd_add(gml_vd_set1(1.0), e));
    return gml_vd_mul(gml_vd_set1(4.0), gml_vd_sig_d1(e, i));
}
static inline gml_vd gml_vsigmoid_d1(gml_vd x) {
    const gml_vd e = gml_vd_expneg(gml_vd_abs(x));
    const gml_vd i = gml_vd_div(gml_vd_set1(1.0), gml_vd_add(gml_vd_set1(1.0), e));
    return gml_vd_sig_d1(e, i);
}
/* s + m e / (1 + e)^2, s = sigmoid(z), e = exp(-|z|) */
static inline gml_vd gml_vsig_plus_d1(gml_vd z, gml_vd m) {
    const gml_vd e = gml_vd_expneg(gml_vd_abs(z));
    const gml_vd i = gml_vd_div(gml_vd_set1(1.0), gml_vd_add(gml_vd_set1(1.0), e));
    const gml_vd s = gml_vd_select(gml_vd_gt(z, gml_vd_zero()), i, gml_vd_mul(e, i));
    return gml_vd_fma(m, gml_vd_sig_d1(e, i), s);
}
static inline gml_vd gml_vsilu_d1(gml_vd x) { return gml_vsig_plus_d1(x, x); }
static inline gml_vd gml_vgelu_tanh_d1(gml_vd x) {
    const gml_vd q = gml_vd_fma(gml_vd_set1(3.0 * GML_VGELU_C3), gml_vd_mul(x, x),
                                gml_vd_set1(GML_VGELU_C1));
    return gml_vsig_plus_d1(gml_vgelu_2u(x), gml_vd_mul(x, q));
}
#define GML_VGELU_RSQRT2PI 0x1.9884533d43651p-2 /* 1 / sqrt(2 pi) */
static inline gml_vd gml_vgelu_d1(gml_vd x) {
    const gml_vd h = gml_vd_mul(gml_vd_mul(x, x), gml_vd_set1(0.5)); /* exact: x is a float */
    const gml_vd phi = gml_vd_mul(gml_vd_expneg(h), gml_vd_set1(GML_VGELU_RSQRT2PI));
    return gml_vd_fma(x, phi, gml_vd_mul(gml_vd_set1(0.5), gml_verfc_neg_d(x)));
}

#endif /* GGMLITE_SIMD_VMATH_H */
