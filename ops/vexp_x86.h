/* The vector exp of ops/vexp.h as inline functions on registers, for the
 * kernels that need exp inside their loops (softmax, flash_attn). Include it
 * from a source compiled with the ISA's flags: vexp8 needs AVX2 and FMA,
 * vexp16 AVX-512F. */
#ifndef GGMLITE_VEXP_X86_H
#define GGMLITE_VEXP_X86_H

#include "vexp.h"

#include <immintrin.h>

/* The reductions below sit in the innermost loops (flash_attn's online
 * softmax): inlined always, as the kernels' own helpers are. */
#if defined(__GNUC__)
#define GML_VEXP_INLINE inline __attribute__((always_inline))
#else
#define GML_VEXP_INLINE inline
#endif

#if defined(__AVX2__) && defined(__FMA__)
/* 2^n for integer n in [-75, 64]: the exponent bits. */
static inline __m256 pow2i(__m256i n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
}

/* exp(x) = p * 2^n for 8 floats: the clamp, the reduction and the
 * polynomial of ops/vexp.h, the scaling left to the caller. */
static inline __m256 vexp8_reduce(__m256 x, __m256 *n_out);
static inline __m256 vexp8_poly(__m256 x, __m256 *n_out) {
    /* max/min return their second operand when either is NaN: NaN stays */
    x = _mm256_max_ps(_mm256_set1_ps(GML_VEXP_LO), x);
    x = _mm256_min_ps(_mm256_set1_ps(GML_VEXP_HI), x);
    return vexp8_reduce(x, n_out);
}

/* vexp8_poly without the clamps, for arguments that need none (flash_attn's
 * x <= 0): n = round(x log2 e), r = x - n ln 2, p(r) as ops/vexp.h. */
static GML_VEXP_INLINE __m256 vexp8_reduce(__m256 x, __m256 *n_out) {
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(GML_VEXP_LOG2E)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(GML_VEXP_LN2_HI), x); /* exact */
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(GML_VEXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(GML_VEXP_C6);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(GML_VEXP_C5));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(GML_VEXP_C4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(GML_VEXP_C3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(GML_VEXP_C2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    *n_out = n;
    return _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
}

/* p * 2^n as (p * 2^n1) * 2^n2, n1 = floor(n/2): the first product is
 * exact, the second rounds once (subnormals, inf) as scalef does. n is in
 * [-150, 128] after the clamp; a NaN lane stays NaN whatever the bits. */
static inline __m256 vexp8_scale(__m256 p, __m256 n) {
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1);
    return _mm256_mul_ps(_mm256_mul_ps(p, pow2i(n1)), pow2i(_mm256_sub_epi32(ni, n1)));
}

/* exp of 8 floats; the algorithm is described in ops/vexp.h. Bitwise equal
 * to the AVX-512 one. */
static inline __m256 vexp8(__m256 x) {
    __m256 n;
    const __m256 p = vexp8_poly(x, &n);
    return vexp8_scale(p, n);
}

/* vexp8, but +0 where the result would be below 2^-125.5 (x below about
 * -86.99, where n = round(x log2e) <= -126): no subnormal is ever computed.
 * For sums of exp(s - max) (softmax in flash_attn), whose terms are added to
 * a sum >= 1: on Intel a subnormal result costs a microcode assist (~100+
 * cycles), and an online softmax makes them by the million when scores
 * spread over more than 87. A term so flushed changes the sum by less than
 * 2^-125 (far below its ulp). Bitwise equal to vexp16_nosub. */
static inline __m256 vexp8_nosub(__m256 x) {
    __m256 n;
    __m256 p = vexp8_poly(x, &n);
    /* n >= -125 (or NaN) keeps p in (2^-0.5, 2^0.5) times 2^n normal; the
     * other lanes scale a +0 (exact, no subnormal on the way) */
    p = _mm256_and_ps(p, _mm256_cmp_ps(n, _mm256_set1_ps(-126.0f), _CMP_NLE_UQ));
    return vexp8_scale(p, n);
}

#endif

#if defined(__AVX512F__)
/* exp(x) = p * 2^n for 16 floats (vexp8_poly). */
static inline __m512 vexp16_reduce(__m512 x, __m512 *n_out);
static inline __m512 vexp16_poly(__m512 x, __m512 *n_out) {
    /* max/min return their second operand when either is NaN: NaN stays */
    x = _mm512_max_ps(_mm512_set1_ps(GML_VEXP_LO), x);
    x = _mm512_min_ps(_mm512_set1_ps(GML_VEXP_HI), x);
    return vexp16_reduce(x, n_out);
}

/* vexp16_poly without the clamps (vexp8_reduce). */
static GML_VEXP_INLINE __m512 vexp16_reduce(__m512 x, __m512 *n_out) {
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(GML_VEXP_LOG2E)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(GML_VEXP_LN2_HI), x); /* exact */
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(GML_VEXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(GML_VEXP_C6);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(GML_VEXP_C5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(GML_VEXP_C4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(GML_VEXP_C3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(GML_VEXP_C2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    *n_out = n;
    return _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
}

/* exp of 16 floats; the algorithm is described in ops/vexp.h. */
static inline __m512 vexp16(__m512 x) {
    __m512 n;
    const __m512 p = vexp16_poly(x, &n);
    return _mm512_scalef_ps(p, n); /* p * 2^n, one rounding (subnormals, inf) */
}

/* vexp16, but +0 where the result would be below 2^-125.5 (vexp8_nosub). */
static inline __m512 vexp16_nosub(__m512 x) {
    __m512 n;
    __m512 p = vexp16_poly(x, &n);
    /* the lanes with n <= -126 get p = +0: scalef gives +0, no subnormal */
    p = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(n, _mm512_set1_ps(-126.0f), _CMP_NLE_UQ), p);
    return _mm512_scalef_ps(p, n);
}

#endif

#endif /* GGMLITE_VEXP_X86_H */
