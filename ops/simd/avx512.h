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
static inline gml_vf gml_vf_sqrt(gml_vf a) { return _mm512_sqrt_ps(a); }
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

/* ---- for rope ---- */
#define GML_SIMD_UHALF 8
static inline gml_vf gml_vf_xor(gml_vf a, gml_vf b) {
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}
static inline gml_vf gml_vf_dup2(gml_vf v) {
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7), v);
}
static inline gml_vf gml_vf_swap2(gml_vf v) { return _mm512_permute_ps(v, 0xB1); }

/* ---- for reduce ---- */
static inline void gml_vd_store(double *p, gml_vd v) { _mm512_storeu_pd(p, v); }
static inline gml_vf gml_vf_add_m(gml_vf a, gml_vm m, gml_vf b) { return _mm512_mask_add_ps(a, m, a, b); }

/* ---- for softmax ---- */
static inline double gml_vd_hsum(gml_vd v) { return _mm512_reduce_add_pd(v); }

/* ---- for repeat ---- */
static inline gml_vi gml_vi_load(const int32_t *p) { return _mm512_loadu_si512(p); }
static inline gml_vf gml_vf_permute(gml_vf v, gml_vi idx) { return _mm512_permutexvar_ps(idx, v); }

/* ---- for copy ---- */
/* r[i] lane j becomes r[j] lane i (the GML_VL x GML_VL block transposed) */
static inline void gml_vf_transpose(gml_vf r[GML_VL]) {
    __m512 t[16], u[16];
    /* pairs of rows interleaved, then quads, within 128-bit lanes */
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        u[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xee);
        u[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    /* u[4m + c] lane L holds column 4L + c of rows 4m..4m+3; gather the four
     * lanes L of u[c], u[4 + c], u[8 + c], u[12 + c] into row 4L + c */
    for (int c = 0; c < 4; c++) {
        const __m512 lo01 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44); /* lanes 0,1 | 0,1 */
        const __m512 lo23 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xee); /* lanes 2,3 | 2,3 */
        const __m512 hi01 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
        const __m512 hi23 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xee);
        r[c] = _mm512_shuffle_f32x4(lo01, hi01, 0x88);      /* lane 0 of each */
        r[4 + c] = _mm512_shuffle_f32x4(lo01, hi01, 0xdd);  /* lane 1 */
        r[8 + c] = _mm512_shuffle_f32x4(lo23, hi23, 0x88);  /* lane 2 */
        r[12 + c] = _mm512_shuffle_f32x4(lo23, hi23, 0xdd); /* lane 3 */
    }
}

/* ---- for convert ---- */
static inline gml_vf gml_vf_trunc(gml_vf a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
}
static inline gml_vf gml_vf_load_f16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
static inline void gml_vf_store_f16(uint16_t *p, gml_vf v) {
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
static inline gml_vf gml_vf_load_bf16(const uint16_t *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
static inline void gml_vf_store_bf16(uint16_t *p, gml_vf v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(r));
}
static inline gml_vf gml_vf_round_bf16(gml_vf v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb),
                                       _mm512_set1_epi32((int)0xffff0000u));
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    const __m512i q = _mm512_and_si512(_mm512_or_si512(u, _mm512_set1_epi32(0x400000)),
                                       _mm512_set1_epi32((int)0xffff0000u));
    return _mm512_castsi512_ps(_mm512_mask_mov_epi32(r, nan, q));
}
static inline gml_vf gml_vf_load_i8(const int8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}
static inline void gml_vf_store_i8(int8_t *p, gml_vf v) {
    _mm_storeu_si128((__m128i *)p, _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(v)));
}

/* ---- for gemm ---- */
static inline gml_vm gml_vm_first_i(int n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}
/* r[j] = row j of a GML_VL x GML_VL block -> r[k] = column k (four rounds
 * of shuffles: pairs of floats, of doubles, then 128-bit lanes twice) */
static inline gml_vf gml_vf_set1_f16(uint16_t h) { return _mm512_set1_ps(_cvtsh_ss(h)); }
static inline __m128i gml_avx512_f16x8(const char *const p[8], size_t off) {
    uint16_t x[8];
    for (int j = 0; j < 8; j++) __builtin_memcpy(&x[j], p[j] + off, 2);
    return _mm_setr_epi16((short)x[0], (short)x[1], (short)x[2], (short)x[3], (short)x[4],
                          (short)x[5], (short)x[6], (short)x[7]);
}
static inline gml_vf gml_vf_gather_f16(const char *const p[16], size_t off) {
    const __m128i h0 = gml_avx512_f16x8(p, off), h1 = gml_avx512_f16x8(p + 8, off);
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(h0), h1, 1));
}
static inline float gml_vf_sum16(const gml_vf s[1]) {
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s[0]), 1));
    const __m256 t = _mm256_add_ps(_mm512_castps512_ps256(s[0]), hi);
    const __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    const __m128 v = _mm_add_ps(u, _mm_movehl_ps(u, u));
    return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
}
/* x[r]: row r's values at k = 0..15 (r < 4) -> the 4 rows at k side by
 * side at group gml_interleave_pos(k) of x[0..3] laid end to end (two
 * rounds of unpacks, within 128-bit lanes) */
static inline void gml_vf_interleave(gml_vf x[4]) {
    const __m512d t0 = _mm512_castps_pd(_mm512_unpacklo_ps(x[0], x[1]));
    const __m512d t1 = _mm512_castps_pd(_mm512_unpackhi_ps(x[0], x[1]));
    const __m512d t2 = _mm512_castps_pd(_mm512_unpacklo_ps(x[2], x[3]));
    const __m512d t3 = _mm512_castps_pd(_mm512_unpackhi_ps(x[2], x[3]));
    x[0] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
    x[1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    x[2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
    x[3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
}
static inline int gml_interleave_pos(int k) { return 4 * (k & 3) + (k >> 2); }
static inline gml_vf gml_vf_bcast_quarter(const float *p) {
    return _mm512_broadcast_f32x4(_mm_load_ps(p));
}
static inline void gml_vf_transpose_quarters(gml_vf q[4]) {
    const __m512 u0 = _mm512_shuffle_f32x4(q[0], q[1], 0x44);
    const __m512 u1 = _mm512_shuffle_f32x4(q[0], q[1], 0xee);
    const __m512 u2 = _mm512_shuffle_f32x4(q[2], q[3], 0x44);
    const __m512 u3 = _mm512_shuffle_f32x4(q[2], q[3], 0xee);
    q[0] = _mm512_shuffle_f32x4(u0, u2, 0x88);
    q[1] = _mm512_shuffle_f32x4(u0, u2, 0xdd);
    q[2] = _mm512_shuffle_f32x4(u1, u3, 0x88);
    q[3] = _mm512_shuffle_f32x4(u1, u3, 0xdd);
}

static inline gml_vi gml_vi_set1(int32_t x) { return _mm512_set1_epi32(x); }
static inline gml_vm gml_vi_gt(gml_vi a, gml_vi b) { return _mm512_cmpgt_epi32_mask(a, b); }
/* p 2^n, n integral <= 0: +0 where n <= -126 (-inf too), NaN where n and p are */
static inline gml_vf gml_vf_ldexp_flush(gml_vf p, gml_vf n) {
    const __mmask16 keep = _mm512_cmp_ps_mask(n, _mm512_set1_ps(-126.0f), _CMP_NLE_UQ);
    return _mm512_maskz_scalef_ps(keep, p, n);
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

/* ---- for int8 (ops/gemm_q8_simd.c) ---- */
/* bits of a float vector as int32 lanes; int32 store and difference */
static inline gml_vi gml_vf_as_vi(gml_vf v) { return _mm512_castps_si512(v); }
static inline void gml_vi_store(int32_t *p, gml_vi v) { _mm512_storeu_si512(p, v); }
static inline gml_vi gml_vi_sub(gml_vi a, gml_vi b) { return _mm512_sub_epi32(a, b); }
/* The 4 bytes at p (any alignment) in every int32 lane */
static inline gml_vi gml_vi_bcast4(const uint8_t *p) {
    int32_t x;
    __builtin_memcpy(&x, p, 4);
    return _mm512_set1_epi32(x);
}
/* int32 lanes as floats (exact for |x| < 2^24) */
static inline gml_vf gml_vf_from_vi(gml_vi v) { return _mm512_cvtepi32_ps(v); }
/* 256 bits at a time without AVX512-BW: exact int16 products (vpmaddwd) */
static inline __m256i gml_avx512_dot4_u8s8_half(__m256i acc, __m256i a, __m256i w) {
    const __m256i lo8 = _mm256_set1_epi16(0x00ff);
    const __m256i a_even = _mm256_and_si256(a, lo8), a_odd = _mm256_srli_epi16(a, 8);
    const __m256i w_even = _mm256_srai_epi16(_mm256_slli_epi16(w, 8), 8);
    const __m256i w_odd = _mm256_srai_epi16(w, 8);
    return _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(a_even, w_even),
                                                  _mm256_madd_epi16(a_odd, w_odd)));
}
/* acc + in each int32 lane l the sum of the 4 products of a's bytes
 * 4l .. 4l + 3 (uint8) with w's (int8): vpdpbusd under AVX512-VNNI */
static inline gml_vi gml_vi_dot4_u8s8(gml_vi acc, gml_vi a, gml_vi w) {
#if defined(__AVX512VNNI__)
    return _mm512_dpbusd_epi32(acc, a, w);
#else
    const __m256i lo = gml_avx512_dot4_u8s8_half(_mm512_castsi512_si256(acc), _mm512_castsi512_si256(a),
                                                 _mm512_castsi512_si256(w));
    const __m256i hi = gml_avx512_dot4_u8s8_half(_mm512_extracti64x4_epi64(acc, 1),
                                                 _mm512_extracti64x4_epi64(a, 1),
                                                 _mm512_extracti64x4_epi64(w, 1));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
#endif
}

/* ---- for compute bf16 (ops/flash_attn_simd.c compiled with -mavx512bf16) ---- */
#if defined(__AVX512BF16__)
/* lanes of lo and hi holding bf16 values (low 16 bits 0) -> pairs: lo's
 * bf16 in the low half of each int32 lane, hi's in the high half */
static inline gml_vi gml_vf_pack_bf16_pairs(gml_vf lo, gml_vf hi) {
    return _mm512_or_si512(_mm512_srli_epi32(_mm512_castps_si512(lo), 16),
                           _mm512_castps_si512(hi));
}
/* the bits of int32 lanes as floats */
static inline gml_vf gml_vi_as_vf(gml_vi v) { return _mm512_castsi512_ps(v); }
/* VDPBF16PS: per lane acc + a.hi b.hi + a.lo b.lo, an fma each, odd pair
 * first, subnormal inputs and results as 0 (Intel SDM; ops/gemm_bf16.h) */
static inline gml_vf gml_vf_dot_bf16(gml_vf acc, gml_vi a, gml_vi b) {
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}
#endif

#endif /* GGMLITE_SIMD_AVX512_H */
