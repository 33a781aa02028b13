/* The SIMD layer on AVX-512F (with AVX2, FMA, F16C): 16 float lanes in a
 * zmm register, predicates in mask registers. Included through
 * ops/simd/simd.h only; the operations and their exact semantics are listed
 * there. */
#ifndef GGMLITE_SIMD_AVX512_H
#define GGMLITE_SIMD_AVX512_H

#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GML_SIMD_ISA GML_ISA_AVX512
#define GML_SIMD_TAG avx512
#define GML_VL 16
#define GML_SIMD_U1 16
#define GML_SIMD_U2 32
#define GML_SIMD_U4 64

typedef __m512 gml_vf;
typedef __mmask16 gml_vm;
typedef __m512i gml_vi;
typedef __m512d gml_vd;
typedef __mmask8 gml_vdm;

/* ---- floats: memory ---- */
static inline gml_vf gml_vf_zero(void) { return _mm512_setzero_ps(); }
static inline gml_vf gml_vf_set1(float x) { return _mm512_set1_ps(x); }
static inline gml_vf gml_vf_load(const float *p) { return _mm512_loadu_ps(p); }
static inline gml_vf gml_vf_loada(const float *p) { return _mm512_load_ps(p); }
static inline void gml_vf_store(float *p, gml_vf v) { _mm512_storeu_ps(p, v); }
static inline void gml_vf_storea(float *p, gml_vf v) { _mm512_store_ps(p, v); }
static inline gml_vm gml_vm_first(size_t k) { return (__mmask16)((1u << k) - 1u); }
static inline gml_vf gml_vf_load_m(const float *p, gml_vm m) { return _mm512_maskz_loadu_ps(m, p); }
static inline void gml_vf_store_m(float *p, gml_vm m, gml_vf v) { _mm512_mask_storeu_ps(p, m, v); }

/* ---- floats: arithmetic ---- */
static inline gml_vf gml_vf_add(gml_vf a, gml_vf b) { return _mm512_add_ps(a, b); }
static inline gml_vf gml_vf_sub(gml_vf a, gml_vf b) { return _mm512_sub_ps(a, b); }
static inline gml_vf gml_vf_mul(gml_vf a, gml_vf b) { return _mm512_mul_ps(a, b); }
static inline gml_vf gml_vf_div(gml_vf a, gml_vf b) { return _mm512_div_ps(a, b); }
static inline gml_vf gml_vf_fma(gml_vf a, gml_vf b, gml_vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline gml_vf gml_vf_fnma(gml_vf a, gml_vf b, gml_vf c) { return _mm512_fnmadd_ps(a, b, c); }
static inline gml_vf gml_vf_max(gml_vf a, gml_vf b) { return _mm512_max_ps(a, b); }
static inline gml_vf gml_vf_min(gml_vf a, gml_vf b) { return _mm512_min_ps(a, b); }
static inline gml_vf gml_vf_abs(gml_vf a) { return _mm512_abs_ps(a); }
static inline gml_vf gml_vf_round(gml_vf a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline gml_vf gml_vf_and(gml_vf a, gml_vf b) {
    return _mm512_castsi512_ps(_mm512_and_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}
static inline gml_vf gml_vf_or(gml_vf a, gml_vf b) {
    return _mm512_castsi512_ps(_mm512_or_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}

/* ---- floats: predicates ---- */
static inline gml_vm gml_vf_eq(gml_vf a, gml_vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
static inline gml_vm gml_vf_lt(gml_vf a, gml_vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
static inline gml_vm gml_vf_le(gml_vf a, gml_vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
static inline gml_vm gml_vf_gt(gml_vf a, gml_vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
static inline gml_vm gml_vf_ge(gml_vf a, gml_vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
static inline gml_vm gml_vf_unord(gml_vf a, gml_vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q); }
static inline gml_vm gml_vm_and(gml_vm a, gml_vm b) { return (gml_vm)(a & b); }
static inline gml_vm gml_vm_or(gml_vm a, gml_vm b) { return (gml_vm)(a | b); }
static inline gml_vm gml_vm_not(gml_vm a) { return (gml_vm)~a; }
static inline bool gml_vm_any(gml_vm a) { return a != 0; }
static inline gml_vf gml_vf_select(gml_vm m, gml_vf a, gml_vf b) { return _mm512_mask_blend_ps(m, b, a); }
static inline gml_vf gml_vf_zero_unless(gml_vm m, gml_vf a) { return _mm512_maskz_mov_ps(m, a); }

/* ---- floats: horizontal (this ISA's order) ---- */
static inline float gml_vf_hsum(gml_vf v) { return _mm512_reduce_add_ps(v); }
static inline float gml_vf_hmax(gml_vf v) { return _mm512_reduce_max_ps(v); }

/* ---- floats: p * 2^n for integral n in [-150, 128] (NaN n: NaN) ---- */
static inline gml_vf gml_vf_ldexp(gml_vf p, gml_vf n) { return _mm512_scalef_ps(p, n); }

/* ---- doubles: GML_VL / 2 lanes, for the float lanes' low and high halves ---- */
static inline gml_vd gml_vd_lo(gml_vf v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
static inline gml_vd gml_vd_hi(gml_vf v) {
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
static inline gml_vf gml_vf_from_vd(gml_vd lo, gml_vd hi) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo))),
                                               _mm256_castps_pd(_mm512_cvtpd_ps(hi)), 1));
}
static inline gml_vd gml_vd_zero(void) { return _mm512_setzero_pd(); }
static inline gml_vd gml_vd_set1(double x) { return _mm512_set1_pd(x); }
static inline gml_vd gml_vd_add(gml_vd a, gml_vd b) { return _mm512_add_pd(a, b); }
static inline gml_vd gml_vd_sub(gml_vd a, gml_vd b) { return _mm512_sub_pd(a, b); }
static inline gml_vd gml_vd_mul(gml_vd a, gml_vd b) { return _mm512_mul_pd(a, b); }
static inline gml_vd gml_vd_div(gml_vd a, gml_vd b) { return _mm512_div_pd(a, b); }
static inline gml_vd gml_vd_fma(gml_vd a, gml_vd b, gml_vd c) { return _mm512_fmadd_pd(a, b, c); }
static inline gml_vd gml_vd_fnma(gml_vd a, gml_vd b, gml_vd c) { return _mm512_fnmadd_pd(a, b, c); }
static inline gml_vd gml_vd_fms(gml_vd a, gml_vd b, gml_vd c) { return _mm512_fmsub_pd(a, b, c); }
static inline gml_vd gml_vd_min(gml_vd a, gml_vd b) { return _mm512_min_pd(a, b); }
static inline gml_vd gml_vd_abs(gml_vd a) { return _mm512_abs_pd(a); }
static inline gml_vd gml_vd_round(gml_vd a) {
    return _mm512_roundscale_pd(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline gml_vdm gml_vd_gt(gml_vd a, gml_vd b) { return _mm512_cmp_pd_mask(a, b, _CMP_GT_OQ); }
static inline gml_vd gml_vd_select(gml_vdm m, gml_vd a, gml_vd b) { return _mm512_mask_blend_pd(m, b, a); }
static inline gml_vd gml_vd_zero_unless(gml_vdm m, gml_vd a) { return _mm512_maskz_mov_pd(m, a); }
static inline gml_vdm gml_vdm_not(gml_vdm a) { return (gml_vdm)~a; }
/* p * 2^n for integral n in [-1022, 1023] (exact: a normal power of two) */
static inline gml_vd gml_vd_ldexp(gml_vd p, gml_vd n) { return _mm512_scalef_pd(p, n); }

/* ---- for flash_attn ---- */
static inline gml_vi gml_vi_load(const int32_t *p) { return _mm512_loadu_si512(p); }
static inline gml_vi gml_vi_set1(int32_t x) { return _mm512_set1_epi32(x); }
static inline gml_vm gml_vi_gt(gml_vi a, gml_vi b) { return _mm512_cmpgt_epi32_mask(a, b); }
/* p 2^n, n integral <= 0: +0 where n <= -126 (-inf too), NaN where n and p are */
static inline gml_vf gml_vf_ldexp_flush(gml_vf p, gml_vf n) {
    const __mmask16 keep = _mm512_cmp_ps_mask(n, _mm512_set1_ps(-126.0f), _CMP_NLE_UQ);
    return _mm512_maskz_scalef_ps(keep, p, n);
}
/* three rounds of shuffles (unpack ps, unpack pd, 128-bit lane shuffles) */
static inline void gml_vf_transpose(gml_vf r[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) { /* u[4i + k], 128-bit lane q: rows 4i .. 4i+3 at column 4q + k */
#define GML_PD(x) _mm512_castps_pd(x)
        const __m512d a = GML_PD(t[4 * i]), b = GML_PD(t[4 * i + 1]);
        const __m512d c = GML_PD(t[4 * i + 2]), d = GML_PD(t[4 * i + 3]);
        u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
#undef GML_PD
    }
    for (int k = 0; k < 4; k++) {
        const __m512 w0 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x88);
        const __m512 w1 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xdd);
        const __m512 w2 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x88);
        const __m512 w3 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xdd);
        r[k] = _mm512_shuffle_f32x4(w0, w2, 0x88);      /* q = 0 */
        r[8 + k] = _mm512_shuffle_f32x4(w0, w2, 0xdd);  /* q = 2 */
        r[4 + k] = _mm512_shuffle_f32x4(w1, w3, 0x88);  /* q = 1 */
        r[12 + k] = _mm512_shuffle_f32x4(w1, w3, 0xdd); /* q = 3 */
    }
}
static inline gml_vf gml_vf_load_f16(const void *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
}
static inline gml_vf gml_vf_load_bf16(const void *p) {
    const __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));
}
/* [hsum a, hsum b, hsum c, hsum d]: the halves added, then pairs by hadd */
static inline void gml_vf_hsum4(gml_vf a, gml_vf b, gml_vf c, gml_vf d, float out[4]) {
#define GML_HALF(x) _mm256_add_ps(_mm512_castps512_ps256(x), \
                                  _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)))
    const __m256 ab = _mm256_hadd_ps(GML_HALF(a), GML_HALF(b));
    const __m256 cd = _mm256_hadd_ps(GML_HALF(c), GML_HALF(d));
#undef GML_HALF
    const __m256 abcd = _mm256_hadd_ps(ab, cd);
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
}

#endif /* GGMLITE_SIMD_AVX512_H */
