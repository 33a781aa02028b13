/* The SIMD layer on AArch64 NEON (Advanced SIMD, with its FMA and f16
 * conversions): 4 float lanes in a q register. Included through
 * ops/simd/simd.h only; the operations and their exact semantics are listed
 * there. NEON has no masked loads or stores: the _m forms go through a
 * small buffer, lane by lane (tails only). max and min are x86's (the
 * second operand where either is NaN), not vmaxq_f32's, so that a kernel
 * written over this layer computes what it computes on x86. */
#ifndef GGMLITE_SIMD_NEON_H
#define GGMLITE_SIMD_NEON_H

#include <arm_neon.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GML_SIMD_ISA GML_ISA_NEON
#define GML_SIMD_TAG neon
#define GML_VL 4
#define GML_SIMD_U1 4
#define GML_SIMD_U2 8
#define GML_SIMD_U4 16

typedef float32x4_t gml_vf;
typedef uint32x4_t gml_vm;
typedef int32x4_t gml_vi;
typedef float64x2_t gml_vd;
typedef uint64x2_t gml_vdm;

/* ---- floats: memory ---- */
static inline gml_vf gml_vf_zero(void) { return vdupq_n_f32(0.0f); }
static inline gml_vf gml_vf_set1(float x) { return vdupq_n_f32(x); }
static inline gml_vf gml_vf_load(const float *p) { return vld1q_f32(p); }
static inline gml_vf gml_vf_loada(const float *p) { return vld1q_f32(p); }
static inline void gml_vf_store(float *p, gml_vf v) { vst1q_f32(p, v); }
static inline void gml_vf_storea(float *p, gml_vf v) { vst1q_f32(p, v); }
static inline gml_vm gml_vm_first(size_t k) {
    static const uint32_t idx[4] = {0, 1, 2, 3};
    return vcltq_u32(vld1q_u32(idx), vdupq_n_u32((uint32_t)k));
}
static inline gml_vf gml_vf_load_m(const float *p, gml_vm m) {
    uint32_t mb[4];
    float b[4];
    vst1q_u32(mb, m);
    for (int i = 0; i < 4; i++) b[i] = mb[i] ? p[i] : 0.0f;
    return vld1q_f32(b);
}
static inline void gml_vf_store_m(float *p, gml_vm m, gml_vf v) {
    uint32_t mb[4];
    float b[4];
    vst1q_u32(mb, m);
    vst1q_f32(b, v);
    for (int i = 0; i < 4; i++)
        if (mb[i]) p[i] = b[i];
}

/* ---- floats: arithmetic ---- */
static inline gml_vf gml_vf_add(gml_vf a, gml_vf b) { return vaddq_f32(a, b); }
static inline gml_vf gml_vf_sub(gml_vf a, gml_vf b) { return vsubq_f32(a, b); }
static inline gml_vf gml_vf_mul(gml_vf a, gml_vf b) { return vmulq_f32(a, b); }
static inline gml_vf gml_vf_div(gml_vf a, gml_vf b) { return vdivq_f32(a, b); }
static inline gml_vf gml_vf_sqrt(gml_vf a) { return vsqrtq_f32(a); }
static inline gml_vf gml_vf_fma(gml_vf a, gml_vf b, gml_vf c) { return vfmaq_f32(c, a, b); }
static inline gml_vf gml_vf_fnma(gml_vf a, gml_vf b, gml_vf c) { return vfmsq_f32(c, a, b); }
static inline gml_vf gml_vf_max(gml_vf a, gml_vf b) { return vbslq_f32(vcgtq_f32(a, b), a, b); }
static inline gml_vf gml_vf_min(gml_vf a, gml_vf b) { return vbslq_f32(vcltq_f32(a, b), a, b); }
static inline gml_vf gml_vf_abs(gml_vf a) { return vabsq_f32(a); }
static inline gml_vf gml_vf_round(gml_vf a) { return vrndnq_f32(a); }
static inline gml_vf gml_vf_and(gml_vf a, gml_vf b) {
    return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(a), vreinterpretq_u32_f32(b)));
}
static inline gml_vf gml_vf_or(gml_vf a, gml_vf b) {
    return vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(a), vreinterpretq_u32_f32(b)));
}

/* ---- floats: predicates ---- */
static inline gml_vm gml_vf_eq(gml_vf a, gml_vf b) { return vceqq_f32(a, b); }
static inline gml_vm gml_vf_lt(gml_vf a, gml_vf b) { return vcltq_f32(a, b); }
static inline gml_vm gml_vf_le(gml_vf a, gml_vf b) { return vcleq_f32(a, b); }
static inline gml_vm gml_vf_gt(gml_vf a, gml_vf b) { return vcgtq_f32(a, b); }
static inline gml_vm gml_vf_ge(gml_vf a, gml_vf b) { return vcgeq_f32(a, b); }
static inline gml_vm gml_vf_unord(gml_vf a, gml_vf b) {
    return vmvnq_u32(vandq_u32(vceqq_f32(a, a), vceqq_f32(b, b)));
}
static inline gml_vm gml_vm_and(gml_vm a, gml_vm b) { return vandq_u32(a, b); }
static inline gml_vm gml_vm_or(gml_vm a, gml_vm b) { return vorrq_u32(a, b); }
static inline gml_vm gml_vm_not(gml_vm a) { return vmvnq_u32(a); }
static inline bool gml_vm_any(gml_vm a) { return vmaxvq_u32(a) != 0; }
static inline gml_vf gml_vf_select(gml_vm m, gml_vf a, gml_vf b) { return vbslq_f32(m, a, b); }
static inline gml_vf gml_vf_zero_unless(gml_vm m, gml_vf a) {
    return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(a), m));
}

/* ---- floats: horizontal (this ISA's order: (0 + 2) + (1 + 3)) ---- */
static inline float gml_vf_hsum(gml_vf v) {
    const float32x2_t s = vadd_f32(vget_low_f32(v), vget_high_f32(v));
    return vget_lane_f32(s, 0) + vget_lane_f32(s, 1);
}
static inline float gml_vf_hmax(gml_vf v) {
    const gml_vf m = gml_vf_max(v, vextq_f32(v, v, 2));
    const float a = vgetq_lane_f32(m, 0), b = vgetq_lane_f32(m, 1);
    return a > b ? a : b;
}

/* ---- floats: p * 2^n for integral n in [-150, 128] (NaN n: NaN) ---- */
static inline float32x4_t gml_neon_pow2i(int32x4_t n) {
    return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n, vdupq_n_s32(127)), 23));
}
static inline gml_vf gml_vf_ldexp(gml_vf p, gml_vf n) {
    /* (p * 2^n1) * 2^n2, n1 = floor(n/2), as the AVX2 layer */
    const int32x4_t ni = vcvtnq_s32_f32(n);
    const int32x4_t n1 = vshrq_n_s32(ni, 1);
    return vmulq_f32(vmulq_f32(p, gml_neon_pow2i(n1)), gml_neon_pow2i(vsubq_s32(ni, n1)));
}

/* ---- doubles: GML_VL / 2 lanes, for the float lanes' low and high halves ---- */
static inline gml_vd gml_vd_lo(gml_vf v) { return vcvt_f64_f32(vget_low_f32(v)); }
static inline gml_vd gml_vd_hi(gml_vf v) { return vcvt_high_f64_f32(v); }
static inline gml_vf gml_vf_from_vd(gml_vd lo, gml_vd hi) {
    return vcvt_high_f32_f64(vcvt_f32_f64(lo), hi);
}
static inline gml_vd gml_vd_zero(void) { return vdupq_n_f64(0.0); }
static inline gml_vd gml_vd_set1(double x) { return vdupq_n_f64(x); }
static inline gml_vd gml_vd_add(gml_vd a, gml_vd b) { return vaddq_f64(a, b); }
static inline gml_vd gml_vd_sub(gml_vd a, gml_vd b) { return vsubq_f64(a, b); }
static inline gml_vd gml_vd_mul(gml_vd a, gml_vd b) { return vmulq_f64(a, b); }
static inline gml_vd gml_vd_div(gml_vd a, gml_vd b) { return vdivq_f64(a, b); }
static inline gml_vd gml_vd_fma(gml_vd a, gml_vd b, gml_vd c) { return vfmaq_f64(c, a, b); }
static inline gml_vd gml_vd_fnma(gml_vd a, gml_vd b, gml_vd c) { return vfmsq_f64(c, a, b); }
static inline gml_vd gml_vd_fms(gml_vd a, gml_vd b, gml_vd c) {
    return vnegq_f64(vfmsq_f64(c, a, b)); /* -(c - a b) = a b - c, one rounding */
}
static inline gml_vd gml_vd_min(gml_vd a, gml_vd b) { return vbslq_f64(vcltq_f64(a, b), a, b); }
static inline gml_vd gml_vd_abs(gml_vd a) { return vabsq_f64(a); }
static inline gml_vd gml_vd_round(gml_vd a) { return vrndnq_f64(a); }
static inline gml_vdm gml_vd_gt(gml_vd a, gml_vd b) { return vcgtq_f64(a, b); }
static inline gml_vd gml_vd_select(gml_vdm m, gml_vd a, gml_vd b) { return vbslq_f64(m, a, b); }
static inline gml_vd gml_vd_zero_unless(gml_vdm m, gml_vd a) {
    return vreinterpretq_f64_u64(vandq_u64(vreinterpretq_u64_f64(a), m));
}
static inline gml_vdm gml_vdm_not(gml_vdm a) {
    return vreinterpretq_u64_u32(vmvnq_u32(vreinterpretq_u32_u64(a)));
}
/* p * 2^n for integral n in [-1022, 1023] (exact: a normal power of two) */
static inline gml_vd gml_vd_ldexp(gml_vd p, gml_vd n) {
    const int64x2_t ni = vcvtnq_s64_f64(n);
    return vmulq_f64(p, vreinterpretq_f64_s64(vshlq_n_s64(vaddq_s64(ni, vdupq_n_s64(1023)), 52)));
}

/* ---- for rope ---- */
#define GML_SIMD_UHALF 2
static inline gml_vf gml_vf_xor(gml_vf a, gml_vf b) {
    return vreinterpretq_f32_u32(veorq_u32(vreinterpretq_u32_f32(a), vreinterpretq_u32_f32(b)));
}
static inline gml_vf gml_vf_dup2(gml_vf v) { return vzip1q_f32(v, v); }
static inline gml_vf gml_vf_swap2(gml_vf v) { return vrev64q_f32(v); }

/* ---- for reduce ---- */
static inline void gml_vd_store(double *p, gml_vd v) { vst1q_f64(p, v); }
/* a + b in the lanes of m, a + -0 (a itself) in the others */
static inline gml_vf gml_vf_add_m(gml_vf a, gml_vm m, gml_vf b) {
    return vaddq_f32(a, vbslq_f32(m, b, vdupq_n_f32(-0.0f)));
}

/* ---- for softmax ---- */
static inline double gml_vd_hsum(gml_vd v) { return vgetq_lane_f64(v, 0) + vgetq_lane_f64(v, 1); }

/* ---- for repeat ---- */
static inline gml_vi gml_vi_load(const int32_t *p) { return vld1q_s32(p); }
static inline gml_vf gml_vf_permute(gml_vf v, gml_vi idx) {
    /* the bytes 4 idx + 0..3 of each lane */
    const uint32x4_t b = vaddq_u32(vmulq_n_u32(vreinterpretq_u32_s32(idx), 0x04040404u),
                                   vdupq_n_u32(0x03020100u));
    return vreinterpretq_f32_u8(vqtbl1q_u8(vreinterpretq_u8_f32(v), vreinterpretq_u8_u32(b)));
}

/* ---- for copy ---- */
/* r[i] lane j becomes r[j] lane i (the GML_VL x GML_VL block transposed) */
static inline void gml_vf_transpose(gml_vf r[GML_VL]) {
    const float32x4x2_t a = vtrnq_f32(r[0], r[1]), b = vtrnq_f32(r[2], r[3]);
    r[0] = vcombine_f32(vget_low_f32(a.val[0]), vget_low_f32(b.val[0]));
    r[1] = vcombine_f32(vget_low_f32(a.val[1]), vget_low_f32(b.val[1]));
    r[2] = vcombine_f32(vget_high_f32(a.val[0]), vget_high_f32(b.val[0]));
    r[3] = vcombine_f32(vget_high_f32(a.val[1]), vget_high_f32(b.val[1]));
}

/* ---- for convert ---- */
static inline gml_vf gml_vf_trunc(gml_vf a) { return vrndq_f32(a); }
static inline gml_vf gml_vf_load_f16(const uint16_t *p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}
static inline void gml_vf_store_f16(uint16_t *p, gml_vf v) {
    vst1_u16(p, vreinterpret_u16_f16(vcvt_f16_f32(v)));
}
static inline gml_vf gml_vf_load_bf16(const uint16_t *p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}
static inline void gml_vf_store_bf16(uint16_t *p, gml_vf v) {
    const uint32x4_t u = vreinterpretq_u32_f32(v);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    const uint32x4_t r = vshrq_n_u32(vaddq_u32(vaddq_u32(u, vdupq_n_u32(0x7fff)), lsb), 16);
    const uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffff)), vdupq_n_u32(0x7f800000));
    const uint32x4_t q = vorrq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(0x40));
    vst1_u16(p, vmovn_u32(vbslq_u32(nan, q, r)));
}
static inline gml_vf gml_vf_round_bf16(gml_vf v) {
    const uint32x4_t u = vreinterpretq_u32_f32(v), hi16 = vdupq_n_u32(0xffff0000u);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    const uint32x4_t r = vandq_u32(vaddq_u32(vaddq_u32(u, vdupq_n_u32(0x7fff)), lsb), hi16);
    const uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffff)), vdupq_n_u32(0x7f800000));
    const uint32x4_t q = vandq_u32(vorrq_u32(u, vdupq_n_u32(0x400000)), hi16);
    return vreinterpretq_f32_u32(vbslq_u32(nan, q, r));
}
static inline gml_vf gml_vf_load_i8(const int8_t *p) {
    int8x8_t b = vdup_n_s8(0);
    b = vld1_lane_s8(p, b, 0);
    b = vld1_lane_s8(p + 1, b, 1);
    b = vld1_lane_s8(p + 2, b, 2);
    b = vld1_lane_s8(p + 3, b, 3);
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(vmovl_s8(b))));
}
static inline void gml_vf_store_i8(int8_t *p, gml_vf v) {
    const int16x4_t h = vmovn_s32(vcvtq_s32_f32(v));
    const int8x8_t b = vmovn_s16(vcombine_s16(h, h));
    vst1_lane_s8(p, b, 0);
    vst1_lane_s8(p + 1, b, 1);
    vst1_lane_s8(p + 2, b, 2);
    vst1_lane_s8(p + 3, b, 3);
}

/* ---- for gemm ---- */
static inline gml_vm gml_vm_first_i(int n) {
    static const int32_t idx[4] = {0, 1, 2, 3};
    return vcltq_s32(vld1q_s32(idx), vdupq_n_s32(n));
}
/* 4 x 4 transpose, for gml_vf_transpose and gml_vf_transpose_quarters */
static inline void gml_neon_tr4(float32x4_t r[4]) {
    const float32x4_t t0 = vtrn1q_f32(r[0], r[1]), t1 = vtrn2q_f32(r[0], r[1]);
    const float32x4_t t2 = vtrn1q_f32(r[2], r[3]), t3 = vtrn2q_f32(r[2], r[3]);
    r[0] = vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2)));
    r[1] = vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3)));
    r[2] = vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2)));
    r[3] = vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3)));
}
static inline gml_vf gml_vf_set1_f16(uint16_t h) {
    return vdupq_laneq_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}
static inline gml_vf gml_vf_gather_f16(const char *const p[4], size_t off) {
    uint16_t x[4];
    for (int j = 0; j < 4; j++) __builtin_memcpy(&x[j], p[j] + off, 2);
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(x)));
}
static inline float gml_vf_sum16(const gml_vf s[4]) {
    const float32x4_t u = vaddq_f32(vaddq_f32(s[0], s[2]), vaddq_f32(s[1], s[3]));
    const float32x2_t v = vadd_f32(vget_low_f32(u), vget_high_f32(u));
    return vget_lane_f32(v, 0) + vget_lane_f32(v, 1);
}
/* x[0]: one row's values at k = 0..3 (GML_VL / 4 = 1 row): already one
 * value per k, at gml_interleave_pos(k) = k */
static inline void gml_vf_interleave(gml_vf x[1]) { (void)x; }
static inline int gml_interleave_pos(int k) { return k; }
static inline gml_vf gml_vf_bcast_quarter(const float *p) { return vld1q_dup_f32(p); }
static inline void gml_vf_transpose_quarters(gml_vf q[4]) { gml_neon_tr4(q); }

static inline gml_vi gml_vi_set1(int32_t x) { return vdupq_n_s32(x); }
static inline gml_vm gml_vi_gt(gml_vi a, gml_vi b) { return vcgtq_s32(a, b); }
/* p 2^n, n integral <= 0: +0 where n <= -126 (-inf too), NaN where n and p are (as AVX2) */
static inline gml_vf gml_vf_ldexp_flush(gml_vf p, gml_vf n) {
    p = gml_vf_zero_unless(vmvnq_u32(vcleq_f32(n, vdupq_n_f32(-126.0f))), p);
    return vmulq_f32(p, gml_neon_pow2i(vcvtnq_s32_f32(gml_vf_max(n, vdupq_n_f32(-127.0f)))));
}
/* [hsum a, hsum b, hsum c, hsum d]: pairs, then pairs of pairs */
static inline void gml_vf_hsum4(gml_vf a, gml_vf b, gml_vf c, gml_vf d, float out[4]) {
    vst1q_f32(out, vpaddq_f32(vpaddq_f32(a, b), vpaddq_f32(c, d)));
}

/* ---- for int8 (ops/gemm_q8_simd.c) ---- */
/* bits of a float vector as int32 lanes; int32 store and difference */
static inline gml_vi gml_vf_as_vi(gml_vf v) { return vreinterpretq_s32_f32(v); }
static inline void gml_vi_store(int32_t *p, gml_vi v) { vst1q_s32(p, v); }
static inline gml_vi gml_vi_sub(gml_vi a, gml_vi b) { return vsubq_s32(a, b); }
/* The 4 bytes at p (any alignment) in every int32 lane */
static inline gml_vi gml_vi_bcast4(const uint8_t *p) {
    int32_t x;
    __builtin_memcpy(&x, p, 4);
    return vdupq_n_s32(x);
}
/* int32 lanes as floats (exact for |x| < 2^24) */
static inline gml_vf gml_vf_from_vi(gml_vi v) { return vcvtq_f32_s32(v); }
/* acc + in each int32 lane l the sum of the 4 products of a's bytes
 * 4l .. 4l + 3 (uint8) with w's (int8), on baseline Armv8-A (no dotprod):
 * products exact in int16 (255 * -128 fits), pairs summed twice */
static inline gml_vi gml_vi_dot4_u8s8(gml_vi acc, gml_vi a, gml_vi w) {
    const uint8x16_t au = vreinterpretq_u8_s32(a);
    const int8x16_t ws = vreinterpretq_s8_s32(w);
    const int16x8_t lo = vmulq_s16(vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(au))),
                                   vmovl_s8(vget_low_s8(ws)));
    const int16x8_t hi = vmulq_s16(vreinterpretq_s16_u16(vmovl_u8(vget_high_u8(au))),
                                   vmovl_s8(vget_high_s8(ws)));
    return vaddq_s32(acc, vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi)));
}

#endif /* GGMLITE_SIMD_NEON_H */
