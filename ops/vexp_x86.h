/* The vector exp of ops/vexp.h as inline functions on registers, for the
 * kernels that need exp inside their loops (softmax, flash_attn). Include it
 * from a source compiled with the ISA's flags: vexp8 needs AVX2 and FMA,
 * vexp16 AVX-512F. */
#ifndef GGMLITE_VEXP_X86_H
#define GGMLITE_VEXP_X86_H

#include "vexp.h"

#include <immintrin.h>

#if defined(__AVX2__) && defined(__FMA__)
/* 2^n for integer n in [-75, 64]: the exponent bits. */
static inline __m256 pow2i(__m256i n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
}

/* exp of 8 floats; the algorithm is described in ops/vexp.h. Bitwise equal
 * to the AVX-512 one. */
static inline __m256 vexp8(__m256 x) {
    /* max/min return their second operand when either is NaN: NaN stays */
    x = _mm256_max_ps(_mm256_set1_ps(GML_VEXP_LO), x);
    x = _mm256_min_ps(_mm256_set1_ps(GML_VEXP_HI), x);
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
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* p * 2^n as (p * 2^n1) * 2^n2, n1 = floor(n/2): the first product is
     * exact, the second rounds once (subnormals, inf) as scalef does. n is in
     * [-150, 128] after the clamp; a NaN lane stays NaN whatever the bits. */
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1);
    return _mm256_mul_ps(_mm256_mul_ps(p, pow2i(n1)), pow2i(_mm256_sub_epi32(ni, n1)));
}

#endif

#if defined(__AVX512F__)
/* exp of 16 floats; the algorithm is described in ops/vexp.h. */
static inline __m512 vexp16(__m512 x) {
    /* max/min return their second operand when either is NaN: NaN stays */
    x = _mm512_max_ps(_mm512_set1_ps(GML_VEXP_LO), x);
    x = _mm512_min_ps(_mm512_set1_ps(GML_VEXP_HI), x);
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
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n); /* p * 2^n, one rounding (subnormals, inf) */
}

#endif

#endif /* GGMLITE_VEXP_X86_H */
