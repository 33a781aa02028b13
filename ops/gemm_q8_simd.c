/* The int8 GEMM micro-kernel and the activation quantizer of ops/gemm_q8.h,
 * written once over the SIMD layer and compiled once per ISA; the
 * micro-kernel again with -mavx512vnni or -mavxvnni (GML_SIMD_VNNI), where
 * gml_vi_dot4_u8s8 is vpdpbusd. Every variant gives the bits gemm_q8.h
 * defines. */
#include "gemm_q8.h"
#include "simd/simd.h"

#if defined(GML_SIMD_VNNI)
#if defined(GML_SIMD_AVX512)
#define Q8_TAG avx512vnni
#elif defined(GML_SIMD_AVX2)
#define Q8_TAG avx2vnni
#else
#error "GML_SIMD_VNNI is for the AVX2 and AVX-512 objects"
#endif
#else
#define Q8_TAG GML_SIMD_TAG
#endif

/* Tiles (gemm_q8.inc): MR rows of A x NV vectors of GML_VL rows of W. */
#define MR 4
#if defined(GML_SIMD_AVX2)
#define NV 1
#define TILE 4x8
#define PACK x8
#elif defined(GML_SIMD_AVX512)
#define NV 2
#define TILE 4x32
#define PACK x32
#else
#define NV 2
#define TILE 4x8
#define PACK x8
#endif
#define NR (NV * GML_VL)
/* The 8 groups of 4 k unrolled with vpdpbusd; without it, GCC hoists the
 * int16 halves of all 8 groups' W vectors and spills them (AVX2: 37 ->
 * 106 GOP/s, AVX-512 61 -> 100, one core of this Zen 5, 256 x 1024 x
 * 1024; unrolled twice: 82 and 80) */
#if defined(GML_SIMD_VNNI)
#define Q8_UNROLL_G _Pragma("GCC unroll 8")
#else
#define Q8_UNROLL_G _Pragma("GCC unroll 1")
#endif

#define Q8_NAME(kind, tag, tile) Q8_NAME_(kind, tag, tile)
#define Q8_NAME_(kind, tag, tile) gml_##kind##_ukernel__##tag##_##tile
#define Q8_QNAME(tag) Q8_QNAME_(tag)
#define Q8_QNAME_(tag) gml_q8_quantize_ukernel__##tag

/* The tile for M rows of A (M known, so the sums stay in registers). Per
 * block: the int32 sums start from the panel's corrections (-128 sum q of
 * each row of W: the +128 on A), take the 8 groups of 4 k, then
 * c = fma((float)s, da * dw, c) per lane. */
static GML_SIMD_INLINE void q8_tile(size_t nblk, const uint8_t *aq, size_t lda, const float *ad,
                                    size_t ldd, const char *panel, const char *ahead,
                                    gml_vf acc[MR][NV], const int M) {
    for (size_t b = 0; b < nblk; b++) {
        const char *blk = panel + b * GML_Q8_PANEL_BLOCK(NR);
        if (ahead)
            for (size_t l = 0; l < GML_Q8_PANEL_BLOCK(NR); l += 64)
                __builtin_prefetch((const void *)(ahead + b * GML_Q8_PANEL_BLOCK(NR) + l), 0, 3);
        const int32_t *corr = (const int32_t *)(const void *)blk;
        const float *dw = (const float *)(const void *)(blk + 4 * NR);
        const char *q = blk + 8 * NR;
        gml_vi s[MR][NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            const gml_vi c0 = gml_vi_load(corr + v * GML_VL);
#pragma GCC unroll 4
            for (int i = 0; i < M; i++) s[i][v] = c0;
        }
        Q8_UNROLL_G
        for (int g = 0; g < 8; g++) {
            gml_vi w[NV];
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                w[v] = gml_vi_load((const int32_t *)(const void *)(q + (g * NR + v * GML_VL) * 4));
#pragma GCC unroll 4
            for (int i = 0; i < M; i++) {
                const gml_vi a4 = gml_vi_bcast4(aq + i * lda + 32 * b + 4 * g);
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++) s[i][v] = gml_vi_dot4_u8s8(s[i][v], a4, w[v]);
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < M; i++) {
            const gml_vf da = gml_vf_set1(ad[i * ldd + b]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                acc[i][v] = gml_vf_fma(gml_vf_from_vi(s[i][v]),
                                       gml_vf_mul(da, gml_vf_load(dw + v * GML_VL)), acc[i][v]);
        }
    }
}

void Q8_NAME(q8_gemm, Q8_TAG, TILE)(size_t nblk, const uint8_t *aq, size_t lda, const float *ad,
                                    size_t ldd, int m, const void *panel, int n, float *c,
                                    size_t ldc, bool acc_c, const void *ahead) {
    gml_vf acc[MR][NV];
    for (int i = 0; i < MR; i++)
        for (int v = 0; v < NV; v++) {
            const int nv = n - v * GML_VL;
            acc[i][v] = !acc_c || i >= m || nv <= 0 ? gml_vf_zero()
                        : nv >= GML_VL ? gml_vf_load(c + i * ldc + v * GML_VL)
                                       : gml_vf_load_m(c + i * ldc + v * GML_VL, gml_vm_first_i(nv));
        }
    const char *pp = panel, *pa = ahead;
    switch (m) {
    case 1: q8_tile(nblk, aq, lda, ad, ldd, pp, pa, acc, 1); break;
    case 2: q8_tile(nblk, aq, lda, ad, ldd, pp, pa, acc, 2); break;
    case 3: q8_tile(nblk, aq, lda, ad, ldd, pp, pa, acc, 3); break;
    default: q8_tile(nblk, aq, lda, ad, ldd, pp, pa, acc, 4); break;
    }
    for (int i = 0; i < m; i++)
        for (int v = 0; v < NV; v++) {
            const int nv = n - v * GML_VL;
            if (nv <= 0) break;
            if (nv >= GML_VL)
                gml_vf_store(c + i * ldc + v * GML_VL, acc[i][v]);
            else
                gml_vf_store_m(c + i * ldc + v * GML_VL, gml_vm_first_i(nv), acc[i][v]);
        }
}

/* W's rows [0, n) (row j at w + j * ldw, nblk q8_0 blocks) into a panel of
 * NR rows as gemm_q8.h lays it out, GML_VL rows at a time: per block, the
 * rows' 32 values copied side by side (8 int32 each) and transposed as
 * floats (bits kept), so that lane j of vector g holds 4 k of row j; the
 * scales gathered as f16; the corrections -128 sum q from dot4 with 128s.
 * Rows past n repeat row 0 (their lanes are never stored by the tile). */
void Q8_NAME(q8_pack, Q8_TAG, PACK)(const char *w, size_t ldw, int n, size_t nblk, void *panel) {
    enum { NB = GML_VL > 8 ? GML_VL : 8 };
    float buf[GML_VL][NB];
    memset(buf, 0, sizeof buf);
    const gml_vi bias = gml_vi_set1((int32_t)0x80808080u);
    for (int v = 0; v < NV; v++) {
        const char *row[GML_VL];
        for (int j = 0; j < GML_VL; j++) {
            const int jj = v * GML_VL + j;
            row[j] = w + (size_t)(jj < n ? jj : 0) * ldw;
        }
        for (size_t b = 0; b < nblk; b++) {
            char *blk = (char *)panel + b * GML_Q8_PANEL_BLOCK(NR);
            int32_t *corr = (int32_t *)(void *)blk;
            float *dw = (float *)(void *)(blk + 4 * NR);
            float *q = (float *)(void *)(blk + 8 * NR);
            const size_t off = b * sizeof(gml_block_q8_0);
            gml_vf_store(dw + v * GML_VL, gml_vf_gather_f16(row, off));
            for (int j = 0; j < GML_VL; j++) memcpy(buf[j], row[j] + off + 2, 32);
            gml_vi sum = gml_vi_set1(0);
            for (int g0 = 0; g0 < 8; g0 += GML_VL) {
                gml_vf r[GML_VL];
                for (int j = 0; j < GML_VL; j++) r[j] = gml_vf_load(buf[j] + g0);
                gml_vf_transpose(r);
                for (int g = 0; g < GML_MIN(GML_VL, 8); g++) {
                    gml_vf_store(q + (g0 + g) * NR + v * GML_VL, r[g]);
                    sum = gml_vi_dot4_u8s8(sum, bias, gml_vf_as_vi(r[g]));
                }
            }
            gml_vi_store(corr + v * GML_VL, gml_vi_sub(gml_vi_set1(0), sum));
        }
    }
}

#if !defined(GML_SIMD_VNNI)
/* roundf's rounding (to nearest, ties away from zero) of integral-range
 * floats: the truncation, plus the sign of y where the part cut off is at
 * least one half (y - trunc(y) is exact). */
static inline gml_vf round_away(gml_vf y) {
    const gml_vf t = gml_vf_trunc(y), one = gml_vf_set1(1.0f);
    const gml_vf step = gml_vf_select(gml_vf_lt(y, gml_vf_zero()), gml_vf_set1(-1.0f), one);
    const gml_vm up = gml_vf_ge(gml_vf_abs(gml_vf_sub(y, t)), gml_vf_set1(0.5f));
    return gml_vf_add(t, gml_vf_zero_unless(up, step));
}

/* One row into q8 blocks (gemm_q8.h): per block the max |x| (max is exact
 * in any order) and whether any value is inf or NaN (x * 0 is NaN), the
 * scale in scalar code as gml_quantize_row_q8_0 makes it, the values
 * rounded as roundf does, stored as int8 and moved to uint8 by + 128. */
void Q8_QNAME(GML_SIMD_TAG)(size_t nblk, const float *x, uint8_t *aq, float *ad) {
    enum { NQ = 32 / GML_VL };
    for (size_t b = 0; b < nblk; b++, x += 32, aq += 32) {
        gml_vf v[NQ], mx = gml_vf_zero();
        gml_vm bad = gml_vf_unord(mx, mx);
        for (int h = 0; h < NQ; h++) {
            v[h] = gml_vf_load(x + h * GML_VL);
            const gml_vf z = gml_vf_mul(v[h], gml_vf_zero());
            bad = gml_vm_or(bad, gml_vf_unord(z, z));
            mx = gml_vf_max(mx, gml_vf_abs(v[h]));
        }
        if (gml_vm_any(bad)) {
            ad[b] = gml_fp16_to_fp32(0x7e00u);
            memset(aq, 128, 32);
            continue;
        }
        const float d = gml_vf_hmax(mx) / 127.0f;
        const uint16_t dh = gml_fp32_to_fp16(d);
        ad[b] = gml_fp16_to_fp32(dh);
        if ((dh & 0x7fffu) == 0) {
            memset(aq, 128, 32);
            continue;
        }
        const gml_vf id = gml_vf_set1(1.0f / d);
        int8_t q[32];
        for (int h = 0; h < NQ; h++) gml_vf_store_i8(q + h * GML_VL, round_away(gml_vf_mul(v[h], id)));
        for (int k = 0; k < 32; k++) aq[k] = (uint8_t)(q[k] + 128);
    }
}
#endif
