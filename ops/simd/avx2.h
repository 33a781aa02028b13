/* The SIMD layer on AVX2 + FMA + F16C: 8 float lanes in a ymm register.
 * Included through ops/simd/simd.h only; the operations and their exact
 * semantics are listed there. */
#ifndef GGMLITE_SIMD_AVX2_H
#define GGMLITE_SIMD_AVX2_H

#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GML_SIMD_ISA GML_ISA_AVX2
#define GML_SIMD_TAG avx2
#define GML_VL 8
#define GML_SIMD_U1 8
#define GML_SIMD_U2 16
#define GML_SIMD_U4 32

typedef __m256 gml_vf;   /* GML_VL floats */
typedef __m256 gml_vm;   /* a predicate per float lane: all ones or zero */
typedef __m256i gml_vi;  /* GML_VL int32 */
typedef __m256d gml_vd;  /* GML_VL / 2 doubles */
typedef __m256d gml_vdm; /* a predicate per double lane */

/* ---- floats: memory ---- */
static inline gml_vf gml_vf_zero(void) { return _mm256_setzero_ps(); }
static inline gml_vf gml_vf_set1(float x) { return _mm256_set1_ps(x); }
static inline gml_vf gml_vf_load(const float *p) { return _mm256_loadu_ps(p); }
static inline gml_vf gml_vf_loada(const float *p) { return _mm256_load_ps(p); }
static inline void gml_vf_store(float *p, gml_vf v) { _mm256_storeu_ps(p, v); }
static inline void gml_vf_storea(float *p, gml_vf v) { _mm256_store_ps(p, v); }
static inline gml_vm gml_vm_first(size_t k) {
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)k),
                                                  _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}
static inline gml_vf gml_vf_load_m(const float *p, gml_vm m) {
    return _mm256_maskload_ps(p, _mm256_castps_si256(m));
}
static inline void gml_vf_store_m(float *p, gml_vm m, gml_vf v) {
    _mm256_maskstore_ps(p, _mm256_castps_si256(m), v);
}

/* ---- floats: arithmetic ---- */
static inline gml_vf gml_vf_add(gml_vf a, gml_vf b) { return _mm256_add_ps(a, b); }
static inline gml_vf gml_vf_sub(gml_vf a, gml_vf b) { return _mm256_sub_ps(a, b); }
static inline gml_vf gml_vf_mul(gml_vf a, gml_vf b) { return _mm256_mul_ps(a, b); }
static inline gml_vf gml_vf_div(gml_vf a, gml_vf b) { return _mm256_div_ps(a, b); }
static inline gml_vf gml_vf_sqrt(gml_vf a) { return _mm256_sqrt_ps(a); }
static inline gml_vf gml_vf_fma(gml_vf a, gml_vf b, gml_vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline gml_vf gml_vf_fnma(gml_vf a, gml_vf b, gml_vf c) { return _mm256_fnmadd_ps(a, b, c); }
static inline gml_vf gml_vf_max(gml_vf a, gml_vf b) { return _mm256_max_ps(a, b); }
static inline gml_vf gml_vf_min(gml_vf a, gml_vf b) { return _mm256_min_ps(a, b); }
static inline gml_vf gml_vf_abs(gml_vf a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
static inline gml_vf gml_vf_round(gml_vf a) {
    return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline gml_vf gml_vf_and(gml_vf a, gml_vf b) { return _mm256_and_ps(a, b); }
static inline gml_vf gml_vf_or(gml_vf a, gml_vf b) { return _mm256_or_ps(a, b); }

/* ---- floats: predicates ---- */
static inline gml_vm gml_vf_eq(gml_vf a, gml_vf b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
static inline gml_vm gml_vf_lt(gml_vf a, gml_vf b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
static inline gml_vm gml_vf_le(gml_vf a, gml_vf b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
static inline gml_vm gml_vf_gt(gml_vf a, gml_vf b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
static inline gml_vm gml_vf_ge(gml_vf a, gml_vf b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
static inline gml_vm gml_vf_unord(gml_vf a, gml_vf b) { return _mm256_cmp_ps(a, b, _CMP_UNORD_Q); }
static inline gml_vm gml_vm_and(gml_vm a, gml_vm b) { return _mm256_and_ps(a, b); }
static inline gml_vm gml_vm_or(gml_vm a, gml_vm b) { return _mm256_or_ps(a, b); }
static inline gml_vm gml_vm_not(gml_vm a) {
    return _mm256_xor_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(-1)));
}
static inline bool gml_vm_any(gml_vm a) { return _mm256_movemask_ps(a) != 0; }
static inline gml_vf gml_vf_select(gml_vm m, gml_vf a, gml_vf b) { return _mm256_blendv_ps(b, a, m); }
static inline gml_vf gml_vf_zero_unless(gml_vm m, gml_vf a) { return _mm256_and_ps(a, m); }

/* ---- floats: horizontal (this ISA's order) ---- */
static inline float gml_vf_hsum(gml_vf v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline float gml_vf_hmax(gml_vf v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* ---- floats: p * 2^n for integral n in [-150, 128] (NaN n: NaN) ---- */
static inline __m256 gml_avx2_pow2i(__m256i n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
}
static inline gml_vf gml_vf_ldexp(gml_vf p, gml_vf n) {
    /* (p * 2^n1) * 2^n2, n1 = floor(n/2): the first product is exact, the
     * second rounds once (subnormals, inf) */
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1);
    return _mm256_mul_ps(_mm256_mul_ps(p, gml_avx2_pow2i(n1)),
                         gml_avx2_pow2i(_mm256_sub_epi32(ni, n1)));
}

/* ---- doubles: GML_VL / 2 lanes, for the float lanes' low and high halves ---- */
static inline gml_vd gml_vd_lo(gml_vf v) { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); }
static inline gml_vd gml_vd_hi(gml_vf v) { return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)); }
static inline gml_vf gml_vf_from_vd(gml_vd lo, gml_vd hi) {
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)), _mm256_cvtpd_ps(hi), 1);
}
static inline gml_vd gml_vd_zero(void) { return _mm256_setzero_pd(); }
static inline gml_vd gml_vd_set1(double x) { return _mm256_set1_pd(x); }
static inline gml_vd gml_vd_add(gml_vd a, gml_vd b) { return _mm256_add_pd(a, b); }
static inline gml_vd gml_vd_sub(gml_vd a, gml_vd b) { return _mm256_sub_pd(a, b); }
static inline gml_vd gml_vd_mul(gml_vd a, gml_vd b) { return _mm256_mul_pd(a, b); }
static inline gml_vd gml_vd_div(gml_vd a, gml_vd b) { return _mm256_div_pd(a, b); }
static inline gml_vd gml_vd_fma(gml_vd a, gml_vd b, gml_vd c) { return _mm256_fmadd_pd(a, b, c); }
static inline gml_vd gml_vd_fnma(gml_vd a, gml_vd b, gml_vd c) { return _mm256_fnmadd_pd(a, b, c); }
static inline gml_vd gml_vd_fms(gml_vd a, gml_vd b, gml_vd c) { return _mm256_fmsub_pd(a, b, c); }
static inline gml_vd gml_vd_min(gml_vd a, gml_vd b) { return _mm256_min_pd(a, b); }
static inline gml_vd gml_vd_abs(gml_vd a) { return _mm256_andnot_pd(_mm256_set1_pd(-0.0), a); }
static inline gml_vd gml_vd_round(gml_vd a) {
    return _mm256_round_pd(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline gml_vdm gml_vd_gt(gml_vd a, gml_vd b) { return _mm256_cmp_pd(a, b, _CMP_GT_OQ); }
static inline gml_vd gml_vd_select(gml_vdm m, gml_vd a, gml_vd b) { return _mm256_blendv_pd(b, a, m); }
static inline gml_vd gml_vd_zero_unless(gml_vdm m, gml_vd a) { return _mm256_and_pd(a, m); }
static inline gml_vdm gml_vdm_not(gml_vdm a) {
    return _mm256_xor_pd(a, _mm256_castsi256_pd(_mm256_set1_epi32(-1)));
}
/* p * 2^n for integral n in [-1022, 1023] (exact: a normal power of two) */
static inline gml_vd gml_vd_ldexp(gml_vd p, gml_vd n) {
    const __m256i ni = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(n));
    return _mm256_mul_pd(p, _mm256_castsi256_pd(_mm256_slli_epi64(
                                _mm256_add_epi64(ni, _mm256_set1_epi64x(1023)), 52)));
}

/* ---- for rope ---- */
#define GML_SIMD_UHALF 4
static inline gml_vf gml_vf_xor(gml_vf a, gml_vf b) { return _mm256_xor_ps(a, b); }
static inline gml_vf gml_vf_dup2(gml_vf v) {
    return _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
}
static inline gml_vf gml_vf_swap2(gml_vf v) { return _mm256_permute_ps(v, 0xB1); }

/* ---- for reduce ---- */
static inline void gml_vd_store(double *p, gml_vd v) { _mm256_storeu_pd(p, v); }
/* a + b in the lanes of m, a + -0 (a itself) in the others */
static inline gml_vf gml_vf_add_m(gml_vf a, gml_vm m, gml_vf b) {
    return _mm256_add_ps(a, _mm256_blendv_ps(_mm256_set1_ps(-0.0f), b, m));
}

/* ---- for softmax ---- */
static inline double gml_vd_hsum(gml_vd v) {
    const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

/* ---- for repeat ---- */
static inline gml_vi gml_vi_load(const int32_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline gml_vf gml_vf_permute(gml_vf v, gml_vi idx) { return _mm256_permutevar8x32_ps(v, idx); }

/* ---- for copy ---- */
/* r[i] lane j becomes r[j] lane i (the GML_VL x GML_VL block transposed) */
static inline void gml_vf_transpose(gml_vf r[GML_VL]) {
    __m256 t[8], u[8];
    /* pairs of rows interleaved, then quads, within 128-bit lanes */
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    /* u[c] lane L holds column 4L + c of rows 0-3, u[4 + c] of rows 4-7 */
    for (int c = 0; c < 4; c++) {
        r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
        r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
    }
}

/* ---- for convert ---- */
static inline gml_vf gml_vf_trunc(gml_vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
static inline gml_vf gml_vf_load_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
static inline void gml_vf_store_f16(uint16_t *p, gml_vf v) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
static inline gml_vf gml_vf_load_bf16(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
static inline void gml_vf_store_bf16(uint16_t *p, gml_vf v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    const __m256i b = _mm256_blendv_epi8(r, q, nan);
    const __m256i pk = _mm256_permute4x64_epi64(_mm256_packus_epi32(b, b), 0x08);
    _mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(pk));
}
static inline gml_vf gml_vf_round_bf16(gml_vf v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i hi16 = _mm256_set1_epi32((int)0xffff0000u);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), hi16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i q = _mm256_and_si256(_mm256_or_si256(u, _mm256_set1_epi32(0x400000)), hi16);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(r, q, nan));
}
static inline gml_vf gml_vf_load_i8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
static inline void gml_vf_store_i8(int8_t *p, gml_vf v) {
    const __m256i q = _mm256_cvttps_epi32(v);
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    _mm_storel_epi64((__m128i *)p, _mm_packs_epi16(w, w));
}

/* ---- for gemm ---- */
static inline gml_vm gml_vm_first_i(int n) {
    return _mm256_castsi256_ps(
        _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}
static inline gml_vf gml_vf_set1_f16(uint16_t h) { return _mm256_set1_ps(_cvtsh_ss(h)); }
static inline __m128i gml_avx2_f16x8(const char *const p[8], size_t off) {
    uint16_t x[8];
    for (int j = 0; j < 8; j++) __builtin_memcpy(&x[j], p[j] + off, 2);
    return _mm_setr_epi16((short)x[0], (short)x[1], (short)x[2], (short)x[3], (short)x[4],
                          (short)x[5], (short)x[6], (short)x[7]);
}
static inline gml_vf gml_vf_gather_f16(const char *const p[8], size_t off) {
    return _mm256_cvtph_ps(gml_avx2_f16x8(p, off));
}
static inline float gml_vf_sum16(const gml_vf s[2]) {
    const __m256 t = _mm256_add_ps(s[0], s[1]);
    const __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    const __m128 v = _mm_add_ps(u, _mm_movehl_ps(u, u));
    return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
}
/* x[r]: row r's values at k = 0..7 (r < 2) -> the pair (row 0, row 1) at k
 * side by side at pair gml_interleave_pos(k) of x[0], x[1] laid end to end */
static inline void gml_vf_interleave(gml_vf x[2]) {
    const __m256 lo = _mm256_unpacklo_ps(x[0], x[1]), hi = _mm256_unpackhi_ps(x[0], x[1]);
    x[0] = lo;
    x[1] = hi;
}
static inline int gml_interleave_pos(int k) { return 4 * ((k & 3) >> 1) + 2 * (k >> 2) + (k & 1); }
static inline gml_vf gml_vf_bcast_quarter(const float *p) {
    return _mm256_castpd_ps(_mm256_broadcast_sd((const double *)(const void *)p));
}
static inline void gml_vf_transpose_quarters(gml_vf q[4]) {
    const __m256d d0 = _mm256_castps_pd(q[0]), d1 = _mm256_castps_pd(q[1]);
    const __m256d d2 = _mm256_castps_pd(q[2]), d3 = _mm256_castps_pd(q[3]);
    const __m256d t0 = _mm256_unpacklo_pd(d0, d1), t1 = _mm256_unpackhi_pd(d0, d1);
    const __m256d t2 = _mm256_unpacklo_pd(d2, d3), t3 = _mm256_unpackhi_pd(d2, d3);
    q[0] = _mm256_castpd_ps(_mm256_permute2f128_pd(t0, t2, 0x20));
    q[1] = _mm256_castpd_ps(_mm256_permute2f128_pd(t1, t3, 0x20));
    q[2] = _mm256_castpd_ps(_mm256_permute2f128_pd(t0, t2, 0x31));
    q[3] = _mm256_castpd_ps(_mm256_permute2f128_pd(t1, t3, 0x31));
}

static inline gml_vi gml_vi_set1(int32_t x) { return _mm256_set1_epi32(x); }
static inline gml_vm gml_vi_gt(gml_vi a, gml_vi b) {
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(a, b));
}
/* p 2^n, n integral <= 0: +0 where n <= -126 (-inf too), NaN where n and p are */
static inline gml_vf gml_vf_ldexp_flush(gml_vf p, gml_vf n) {
    p = _mm256_and_ps(p, _mm256_cmp_ps(n, _mm256_set1_ps(-126.0f), _CMP_NLE_UQ));
    const __m256i ni = _mm256_cvtps_epi32(_mm256_max_ps(n, _mm256_set1_ps(-127.0f)));
    return _mm256_mul_ps(p, gml_avx2_pow2i(ni));
}
/* [hsum a, hsum b, hsum c, hsum d]: hadd pairs, then the halves */
static inline void gml_vf_hsum4(gml_vf a, gml_vf b, gml_vf c, gml_vf d, float out[4]) {
    const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
}

/* ---- for int8 (ops/gemm_q8_simd.c) ---- */
/* bits of a float vector as int32 lanes; int32 store and difference */
static inline gml_vi gml_vf_as_vi(gml_vf v) { return _mm256_castps_si256(v); }
static inline void gml_vi_store(int32_t *p, gml_vi v) { _mm256_storeu_si256((__m256i *)p, v); }
static inline gml_vi gml_vi_sub(gml_vi a, gml_vi b) { return _mm256_sub_epi32(a, b); }
/* The 4 bytes at p (any alignment) in every int32 lane */
static inline gml_vi gml_vi_bcast4(const uint8_t *p) {
    int32_t x;
    __builtin_memcpy(&x, p, 4);
    return _mm256_set1_epi32(x);
}
/* int32 lanes as floats (exact for |x| < 2^24) */
static inline gml_vf gml_vf_from_vi(gml_vi v) { return _mm256_cvtepi32_ps(v); }
/* acc + in each int32 lane l the sum of the 4 products of a's bytes
 * 4l .. 4l + 3 (uint8) with w's (int8): vpdpbusd under AVX-VNNI (the VEX
 * form); otherwise the even and the odd bytes widened to int16 and
 * multiplied exactly by vpmaddwd (vpmaddubsw would saturate 255 * -128 * 2) */
static inline gml_vi gml_vi_dot4_u8s8(gml_vi acc, gml_vi a, gml_vi w) {
#if defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(acc, a, w);
#else
    const __m256i lo8 = _mm256_set1_epi16(0x00ff);
    const __m256i a_even = _mm256_and_si256(a, lo8), a_odd = _mm256_srli_epi16(a, 8);
    const __m256i w_even = _mm256_srai_epi16(_mm256_slli_epi16(w, 8), 8);
    const __m256i w_odd = _mm256_srai_epi16(w, 8);
    return _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(a_even, w_even),
                                                  _mm256_madd_epi16(a_odd, w_odd)));
#endif
}

#endif /* GGMLITE_SIMD_AVX2_H */
