/* The unary functions of ops/vunary.h on registers, for ops/unary_avx2.c
 * and ops/unary_avx512.c: the same operations in the same order on both
 * ISAs (bitwise equal results). Include from a source compiled with the
 * ISA's flags: the 8-lane ones need AVX2 and FMA, the 16-lane ones
 * AVX-512F. */
#ifndef GGMLITE_VUNARY_X86_H
#define GGMLITE_VUNARY_X86_H

#include "vexp_x86.h"
#include "vunary.h"

#include <math.h>

#if defined(__AVX2__) && defined(__FMA__)
static inline __m256 vabs8(__m256 x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }

/* n / (1 + e) with e = exp(-|s|), n = x where s >= 0, x * e elsewhere (NaN
 * s: NaN). sigmoid: x = 1, s = the input; silu: x = s; gelu_tanh: s = 2u. */
static inline __m256 vsigmul8(__m256 x, __m256 s) {
    const __m256 e = vexp8(_mm256_sub_ps(_mm256_setzero_ps(), vabs8(s)));
    const __m256 ge = _mm256_cmp_ps(s, _mm256_setzero_ps(), _CMP_GE_OQ);
    const __m256 n = _mm256_blendv_ps(_mm256_mul_ps(x, e), x, ge);
    return _mm256_div_ps(n, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}
static inline __m256 vsigmoid8(__m256 x) { return vsigmul8(_mm256_set1_ps(1.0f), x); }
static inline __m256 vsilu8(__m256 x) { return vsigmul8(x, x); }
/* 2u of 4 floats in double: s rounded to float, and d = 2u - s. */
static inline __m128 vgelu_s4(__m128 x, __m128 *d) {
    const __m256d xd = _mm256_cvtps_pd(x);
    const __m256d sd = _mm256_mul_pd(
        xd, _mm256_fmadd_pd(_mm256_set1_pd(GML_VGELU_C3), _mm256_mul_pd(xd, xd),
                            _mm256_set1_pd(GML_VGELU_C1)));
    const __m128 s = _mm256_cvtpd_ps(sd);
    *d = _mm256_cvtpd_ps(_mm256_sub_pd(sd, _mm256_cvtps_pd(s)));
    return s;
}
static inline __m256 vgelu_tanh8(__m256 x) {
    __m128 dl, dh;
    const __m128 sl = vgelu_s4(_mm256_castps256_ps128(x), &dl);
    const __m128 sh = vgelu_s4(_mm256_extractf128_ps(x, 1), &dh);
    const __m256 s = _mm256_insertf128_ps(_mm256_castps128_ps256(sl), sh, 1);
    __m256 d = _mm256_insertf128_ps(_mm256_castps128_ps256(dl), dh, 1);
    __m256 e = vexp8(_mm256_sub_ps(_mm256_setzero_ps(), vabs8(s)));
    const __m256 ge = _mm256_cmp_ps(s, _mm256_setzero_ps(), _CMP_GE_OQ);
    d = _mm256_blendv_ps(_mm256_sub_ps(_mm256_setzero_ps(), d), d, ge); /* |2u| - |s| */
    /* s +-inf (2u beyond float): d is NaN or inf there, and e already exact */
    d = _mm256_and_ps(d, _mm256_cmp_ps(vabs8(s), _mm256_set1_ps(INFINITY), _CMP_LT_OQ));
    e = _mm256_fnmadd_ps(e, d, e); /* e (1 - d) */
    const __m256 n = _mm256_blendv_ps(_mm256_mul_ps(x, e), x, ge);
    return _mm256_div_ps(n, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}
static inline __m256 vtanh8(__m256 x) {
    const __m256 a = vabs8(x);
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 e = vexp8(_mm256_add_ps(a, a));
    const __m256 big = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(one, e)));
    const __m256 a2 = _mm256_mul_ps(a, a);
    __m256 p = _mm256_set1_ps(GML_VTANH_P5);
    p = _mm256_fmadd_ps(p, a2, _mm256_set1_ps(GML_VTANH_P4));
    p = _mm256_fmadd_ps(p, a2, _mm256_set1_ps(GML_VTANH_P3));
    p = _mm256_fmadd_ps(p, a2, _mm256_set1_ps(GML_VTANH_P2));
    p = _mm256_fmadd_ps(p, a2, _mm256_set1_ps(GML_VTANH_P1));
    p = _mm256_fmadd_ps(p, a2, _mm256_set1_ps(GML_VTANH_P0));
    const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(a, a2), p, a);
    const __m256 t = _mm256_blendv_ps(big, small,
                                      _mm256_cmp_ps(a, _mm256_set1_ps(GML_VTANH_SMALL), _CMP_LT_OQ));
    return _mm256_or_ps(t, _mm256_and_ps(x, _mm256_set1_ps(-0.0f))); /* x's sign */
}

/* ---- gelu: 0.5 x erfc(-x / sqrt 2), per lane in double (ops/vunary.h) ---- */
static inline __m256d vabs4d(__m256d x) { return _mm256_andnot_pd(_mm256_set1_pd(-0.0), x); }
static inline __m256d vround4d(__m256d x) {
    return _mm256_round_pd(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
/* p * 2^n for integer n in [-1022, 1023] (the exponent bits; no NaN n) */
static inline __m256d vscale4d(__m256d p, __m256d n) {
    const __m256i ni = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(n));
    return _mm256_mul_pd(p, _mm256_castsi256_pd(
                                _mm256_slli_epi64(_mm256_add_epi64(ni, _mm256_set1_epi64x(1023)), 52)));
}
/* e where a <= b (or NaN), 0 where a > b */
static inline __m256d vzero_gt4d(__m256d e, __m256d a, __m256d b) {
    return _mm256_andnot_pd(_mm256_cmp_pd(a, b, _CMP_GT_OQ), e);
}
/* v where a > b, u elsewhere */
static inline __m256d vblend_gt4d(__m256d u, __m256d v, __m256d a, __m256d b) {
    return _mm256_blendv_pd(u, v, _mm256_cmp_pd(a, b, _CMP_GT_OQ));
}
/* gelu of 4 floats as doubles */
static inline __m256d vgelu4d(__m256d x) {
    const __m256d a0 = _mm256_mul_pd(vabs4d(x), _mm256_set1_pd(GML_VGELU_RSQRT2));
    const __m256d a = _mm256_min_pd(_mm256_set1_pd(GML_VGELU_AMAX), a0); /* min: a NaN a0 stays */
    const __m256d t = _mm256_div_pd(_mm256_set1_pd(GML_VGELU_K), _mm256_add_pd(_mm256_set1_pd(GML_VGELU_K), a));
    const __m256d u = _mm256_sub_pd(t, _mm256_set1_pd(GML_VGELU_TC));
    __m256d g = _mm256_set1_pd(GML_VGELU_G16);
    g = _mm256_fmadd_pd(g, u, _mm256_set1_pd(GML_VGELU_G15));
    g = _mm256_fmadd_pd(g, u, _mm256_set1_pd(GML_VGELU_G14));
    g = _mm256_fmadd_pd(g, u, _mm256_set1_pd(GML_VGELU_G13));
    g = _mm256_fmadd_pd(g, u, _mm256_set1_pd(GML_VGELU_G12));
    g = _mm256_fmadd_pd(g, u, _mm256_set1_pd(GML_VGELU_G11));
    g = _mm256_fmadd_pd(g, u, _mm256_set1_pd(GML_VGELU_G10));
    g = _mm256_fmadd_pd(g, u, _mm256_set1_pd(GML_VGELU_G9));
    g = _mm256_fmadd_pd(g, u, _mm256_set1_pd(GML_VGELU_G8));
    g = _mm256_fmadd_pd(g, u, _mm256_set1_pd(GML_VGELU_G7));
    g = _mm256_fmadd_pd(g, u, _mm256_set1_pd(GML_VGELU_G6));
    g = _mm256_fmadd_pd(g, u, _mm256_set1_pd(GML_VGELU_G5));
    g = _mm256_fmadd_pd(g, u, _mm256_set1_pd(GML_VGELU_G4));
    g = _mm256_fmadd_pd(g, u, _mm256_set1_pd(GML_VGELU_G3));
    g = _mm256_fmadd_pd(g, u, _mm256_set1_pd(GML_VGELU_G2));
    g = _mm256_fmadd_pd(g, u, _mm256_set1_pd(GML_VGELU_G1));
    g = _mm256_fmadd_pd(g, u, _mm256_set1_pd(GML_VGELU_G0));
    const __m256d h = _mm256_mul_pd(a, a), l = _mm256_fmsub_pd(a, a, h); /* a^2 = h + l */
    const __m256d n = vround4d(_mm256_mul_pd(h, _mm256_set1_pd(-GML_VGELU_LOG2E)));
    __m256d r = _mm256_fnmadd_pd(n, _mm256_set1_pd(GML_VGELU_LN2_HI), _mm256_sub_pd(_mm256_setzero_pd(), h));
    r = _mm256_sub_pd(_mm256_fnmadd_pd(n, _mm256_set1_pd(GML_VGELU_LN2_LO), r), l);
    __m256d p = _mm256_set1_pd(GML_VGELU_E12);
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(GML_VGELU_E11));
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(GML_VGELU_E10));
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(GML_VGELU_E9));
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(GML_VGELU_E8));
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(GML_VGELU_E7));
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(GML_VGELU_E6));
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(GML_VGELU_E5));
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(GML_VGELU_E4));
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(GML_VGELU_E3));
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(GML_VGELU_E2));
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(1.0));
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(1.0));
    __m256d e = _mm256_mul_pd(_mm256_mul_pd(vscale4d(p, n), t), g); /* erfc(a); the scaling is exact: n >= -160 */
    e = vzero_gt4d(e, a0, _mm256_set1_pd(GML_VGELU_AMAX)); /* erfc(a > AMAX) = 0 */
    e = vblend_gt4d(_mm256_fnmadd_pd(a, _mm256_set1_pd(GML_VGELU_2RSQRTPI), _mm256_set1_pd(1.0)), e, a,
                    _mm256_set1_pd(GML_VGELU_TINY)); /* a <= TINY: 1 - a 2/sqrt(pi) */
    /* x > 0: erfc(-a) = 2 - erfc(a) */
    const __m256d f = vblend_gt4d(e, _mm256_sub_pd(_mm256_set1_pd(2.0), e), x, _mm256_setzero_pd());
    return _mm256_mul_pd(_mm256_mul_pd(x, _mm256_set1_pd(0.5)), f);
}
static inline __m256 vgelu8(__m256 x) {
    const __m128 lo = _mm256_cvtpd_ps(vgelu4d(_mm256_cvtps_pd(_mm256_castps256_ps128(x))));
    const __m128 hi = _mm256_cvtpd_ps(vgelu4d(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))));
    return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
}
#endif

#if defined(__AVX512F__)
static inline __m512 vsigmul16(__m512 x, __m512 s) {
    const __m512 e = vexp16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(s)));
    const __mmask16 ge = _mm512_cmp_ps_mask(s, _mm512_setzero_ps(), _CMP_GE_OQ);
    const __m512 n = _mm512_mask_blend_ps(ge, _mm512_mul_ps(x, e), x);
    return _mm512_div_ps(n, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}
static inline __m512 vsigmoid16(__m512 x) { return vsigmul16(_mm512_set1_ps(1.0f), x); }
static inline __m512 vsilu16(__m512 x) { return vsigmul16(x, x); }
/* 2u of 8 floats in double: s rounded to float, and d = 2u - s. */
static inline __m256 vgelu_s8(__m256 x, __m256 *d) {
    const __m512d xd = _mm512_cvtps_pd(x);
    const __m512d sd = _mm512_mul_pd(
        xd, _mm512_fmadd_pd(_mm512_set1_pd(GML_VGELU_C3), _mm512_mul_pd(xd, xd),
                            _mm512_set1_pd(GML_VGELU_C1)));
    const __m256 s = _mm512_cvtpd_ps(sd);
    *d = _mm512_cvtpd_ps(_mm512_sub_pd(sd, _mm512_cvtps_pd(s)));
    return s;
}
static inline __m512 vjoin8(__m256 lo, __m256 hi) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)),
                                               _mm256_castps_pd(hi), 1));
}
static inline __m512 vgelu_tanh16(__m512 x) {
    __m256 dl, dh;
    const __m256 sl = vgelu_s8(_mm512_castps512_ps256(x), &dl);
    const __m256 sh =
        vgelu_s8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)), &dh);
    const __m512 s = vjoin8(sl, sh);
    __m512 d = vjoin8(dl, dh);
    __m512 e = vexp16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(s)));
    const __mmask16 ge = _mm512_cmp_ps_mask(s, _mm512_setzero_ps(), _CMP_GE_OQ);
    d = _mm512_mask_blend_ps(ge, _mm512_sub_ps(_mm512_setzero_ps(), d), d); /* |2u| - |s| */
    /* s +-inf (2u beyond float): d is NaN or inf there, and e already exact */
    d = _mm512_maskz_mov_ps(
        _mm512_cmp_ps_mask(_mm512_abs_ps(s), _mm512_set1_ps(INFINITY), _CMP_LT_OQ), d);
    e = _mm512_fnmadd_ps(e, d, e); /* e (1 - d) */
    const __m512 n = _mm512_mask_blend_ps(ge, _mm512_mul_ps(x, e), x);
    return _mm512_div_ps(n, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}
static inline __m512 vtanh16(__m512 x) {
    const __m512 a = _mm512_abs_ps(x);
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 e = vexp16(_mm512_add_ps(a, a));
    const __m512 big = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(one, e)));
    const __m512 a2 = _mm512_mul_ps(a, a);
    __m512 p = _mm512_set1_ps(GML_VTANH_P5);
    p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(GML_VTANH_P4));
    p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(GML_VTANH_P3));
    p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(GML_VTANH_P2));
    p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(GML_VTANH_P1));
    p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(GML_VTANH_P0));
    const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(a, a2), p, a);
    const __m512 t = _mm512_mask_blend_ps(
        _mm512_cmp_ps_mask(a, _mm512_set1_ps(GML_VTANH_SMALL), _CMP_LT_OQ), big, small);
    const __m512i sign = _mm512_and_epi32(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN));
    return _mm512_castsi512_ps(_mm512_or_epi32(_mm512_castps_si512(t), sign)); /* x's sign */
}

/* ---- gelu: the operations of vgelu4d on 8 double lanes ---- */
static inline __m512d vround8d(__m512d x) {
    return _mm512_roundscale_pd(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline __m512d vzero_gt8d(__m512d e, __m512d a, __m512d b) {
    return _mm512_maskz_mov_pd(_mm512_cmp_pd_mask(a, b, _CMP_NGT_UQ), e);
}
static inline __m512d vblend_gt8d(__m512d u, __m512d v, __m512d a, __m512d b) {
    return _mm512_mask_blend_pd(_mm512_cmp_pd_mask(a, b, _CMP_GT_OQ), u, v);
}
/* gelu of 8 floats as doubles; scalef is exact here as vscale4d */
static inline __m512d vgelu8d(__m512d x) {
    const __m512d a0 = _mm512_mul_pd(_mm512_abs_pd(x), _mm512_set1_pd(GML_VGELU_RSQRT2));
    const __m512d a = _mm512_min_pd(_mm512_set1_pd(GML_VGELU_AMAX), a0); /* min: a NaN a0 stays */
    const __m512d t = _mm512_div_pd(_mm512_set1_pd(GML_VGELU_K), _mm512_add_pd(_mm512_set1_pd(GML_VGELU_K), a));
    const __m512d u = _mm512_sub_pd(t, _mm512_set1_pd(GML_VGELU_TC));
    __m512d g = _mm512_set1_pd(GML_VGELU_G16);
    g = _mm512_fmadd_pd(g, u, _mm512_set1_pd(GML_VGELU_G15));
    g = _mm512_fmadd_pd(g, u, _mm512_set1_pd(GML_VGELU_G14));
    g = _mm512_fmadd_pd(g, u, _mm512_set1_pd(GML_VGELU_G13));
    g = _mm512_fmadd_pd(g, u, _mm512_set1_pd(GML_VGELU_G12));
    g = _mm512_fmadd_pd(g, u, _mm512_set1_pd(GML_VGELU_G11));
    g = _mm512_fmadd_pd(g, u, _mm512_set1_pd(GML_VGELU_G10));
    g = _mm512_fmadd_pd(g, u, _mm512_set1_pd(GML_VGELU_G9));
    g = _mm512_fmadd_pd(g, u, _mm512_set1_pd(GML_VGELU_G8));
    g = _mm512_fmadd_pd(g, u, _mm512_set1_pd(GML_VGELU_G7));
    g = _mm512_fmadd_pd(g, u, _mm512_set1_pd(GML_VGELU_G6));
    g = _mm512_fmadd_pd(g, u, _mm512_set1_pd(GML_VGELU_G5));
    g = _mm512_fmadd_pd(g, u, _mm512_set1_pd(GML_VGELU_G4));
    g = _mm512_fmadd_pd(g, u, _mm512_set1_pd(GML_VGELU_G3));
    g = _mm512_fmadd_pd(g, u, _mm512_set1_pd(GML_VGELU_G2));
    g = _mm512_fmadd_pd(g, u, _mm512_set1_pd(GML_VGELU_G1));
    g = _mm512_fmadd_pd(g, u, _mm512_set1_pd(GML_VGELU_G0));
    const __m512d h = _mm512_mul_pd(a, a), l = _mm512_fmsub_pd(a, a, h); /* a^2 = h + l */
    const __m512d n = vround8d(_mm512_mul_pd(h, _mm512_set1_pd(-GML_VGELU_LOG2E)));
    __m512d r = _mm512_fnmadd_pd(n, _mm512_set1_pd(GML_VGELU_LN2_HI), _mm512_sub_pd(_mm512_setzero_pd(), h));
    r = _mm512_sub_pd(_mm512_fnmadd_pd(n, _mm512_set1_pd(GML_VGELU_LN2_LO), r), l);
    __m512d p = _mm512_set1_pd(GML_VGELU_E12);
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(GML_VGELU_E11));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(GML_VGELU_E10));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(GML_VGELU_E9));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(GML_VGELU_E8));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(GML_VGELU_E7));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(GML_VGELU_E6));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(GML_VGELU_E5));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(GML_VGELU_E4));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(GML_VGELU_E3));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(GML_VGELU_E2));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0));
    __m512d e = _mm512_mul_pd(_mm512_mul_pd(_mm512_scalef_pd(p, n), t), g); /* erfc(a); the scaling is exact: n >= -160 */
    e = vzero_gt8d(e, a0, _mm512_set1_pd(GML_VGELU_AMAX)); /* erfc(a > AMAX) = 0 */
    e = vblend_gt8d(_mm512_fnmadd_pd(a, _mm512_set1_pd(GML_VGELU_2RSQRTPI), _mm512_set1_pd(1.0)), e, a,
                    _mm512_set1_pd(GML_VGELU_TINY)); /* a <= TINY: 1 - a 2/sqrt(pi) */
    /* x > 0: erfc(-a) = 2 - erfc(a) */
    const __m512d f = vblend_gt8d(e, _mm512_sub_pd(_mm512_set1_pd(2.0), e), x, _mm512_setzero_pd());
    return _mm512_mul_pd(_mm512_mul_pd(x, _mm512_set1_pd(0.5)), f);
}
static inline __m512 vgelu16(__m512 x) {
    const __m256 lo = _mm512_cvtpd_ps(vgelu8d(_mm512_cvtps_pd(_mm512_castps512_ps256(x))));
    const __m256 hi = _mm512_cvtpd_ps(
        vgelu8d(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)))));
    return vjoin8(lo, hi);
}
#endif

#endif /* GGMLITE_VUNARY_X86_H */
