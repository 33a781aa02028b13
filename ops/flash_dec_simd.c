/* The flash attention decode micro-kernels (ops/flash_attn.inc), written
 * once over the SIMD layer and compiled once per ISA: the primitives of the
 * loop of ops/flash_dec.h; the tiles, per ISA, at the end. The prefill
 * ones: ops/flash_attn_simd.c.
 *
 * gml_f32_flash_dec_ukernel__<isa>_d<GML_VL>: lanes over d. q . k_j: DR
 * rows' accumulators take GML_VL elements of 4 keys at a time (one load,
 * converted in registers, for every row), then summed across their lanes
 * (gml_vf_hsum4, the ISA's order). o_l += p v_j: U vectors of columns of
 * every row's o in registers while the block's keys go by, each V load
 * shared by the rows. A tail of d is loaded zero-padded (q and o are zero
 * past d, so the padding adds zeros). */
#include "simd/simd.h"
#include "simd/vmath.h"
#include "flash_dec.h"
#include "ukernels.h"

#include <math.h>
#include <string.h>

/* GML_VL elements of a row of type t from element d (n < GML_VL: only n,
 * zeros after). */
static GML_SIMD_INLINE gml_vf dec_load(gml_type t, const char *row, size_t d, size_t n) {
    if (t == GML_F32) {
        const float *f = (const float *)(const void *)row + d;
        return n >= GML_VL ? gml_vf_load(f) : gml_vf_load_m(f, gml_vm_first(n));
    }
    const uint16_t *h = (const uint16_t *)(const void *)row + d;
    uint16_t buf[GML_VL] = {0};
    if (n < GML_VL) {
        memcpy(buf, h, n * sizeof *h);
        h = buf;
    }
    return t == GML_F16 ? gml_vf_load_f16(h) : gml_vf_load_bf16(h);
}

/* Keys 4 at a time (past nk: the last key again, its sums dropped) against
 * rows l0 .. l0 + ng - 1 (ng <= DR): 4 DR accumulators, each k load used
 * DR times, each q load four times. */
static GML_SIMD_INLINE void dec_dots_t(const gml_flash_dec_args *a, size_t jb, size_t nk, float *s,
                                       const gml_type T, const int DR) {
    const size_t nq = a->nq, dk = a->dk, k_bytes = dk * (T == GML_F32 ? 4 : 2);
    for (size_t l0 = 0; l0 < nq; l0 += (size_t)DR) {
        const size_t ng = GML_MIN((size_t)DR, nq - l0);
        const float *q0 = a->q + l0 * a->ldq;
        for (size_t jj = 0; jj < nk; jj += 4) {
            const char *kr[4];
            for (size_t t = 0; t < 4; t++)
                kr[t] = a->k + (jb - a->j0 + GML_MIN(jj + t, nk - 1)) * a->k_row;
            if (l0 == 0)
                for (size_t t = 0; t < 4; t++)
                    dec_prefetch_row(kr[0] + (GML_DEC_PREFETCH_AHEAD + t) * a->k_row, k_bytes);
            gml_vf acc[4][4];
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++)
#pragma GCC unroll 4
                for (int l = 0; l < DR; l++) acc[t][l] = gml_vf_zero();
            for (size_t d = 0; d < dk; d += GML_VL) {
                gml_vf qv[4];
#pragma GCC unroll 4
                for (size_t l = 0; l < (size_t)DR; l++)
                    qv[l] = l < ng ? gml_vf_loada(q0 + l * a->ldq + d) : gml_vf_zero();
#pragma GCC unroll 4
                for (int t = 0; t < 4; t++) {
                    const gml_vf kv = dec_load(T, kr[t], d, dk - d);
#pragma GCC unroll 4
                    for (size_t l = 0; l < (size_t)DR; l++)
                        if (l < ng) acc[t][l] = gml_vf_fma(kv, qv[l], acc[t][l]);
                }
            }
            float sums[4][4];
#pragma GCC unroll 4
            for (size_t l = 0; l < (size_t)DR; l++)
                if (l < ng) gml_vf_hsum4(acc[0][l], acc[1][l], acc[2][l], acc[3][l], sums[l]);
            for (size_t l = 0; l < ng; l++)
                for (size_t t = 0; t < 4 && jj + t < nk; t++)
                    s[(l0 + l) * GML_FLASH_DEC_KEY_BLOCK + jj + t] = sums[l][t];
        }
    }
}

/* o_l[c0 .. c0 + GML_VL U) += sum_jj p[l][jj] v_jj[...] for the rows l < nq
 * <= R seeing key jj: R U accumulators, each V load used R times. */
static GML_SIMD_INLINE void dec_values_t(const gml_flash_dec_args *a, size_t jb, size_t nk,
                                         const float *p, const uint8_t *bits, const gml_type T,
                                         const int R, const int U) {
    const size_t nq = a->nq, dv = a->dv, v_bytes = dv * (T == GML_F32 ? 4 : 2);
    const uint8_t all = (uint8_t)((1u << nq) - 1);
    for (size_t c0 = 0; c0 < dv; c0 += GML_VL * (size_t)U) {
        gml_vf acc[GML_FLASH_DEC_MAX_ROWS][4];
#pragma GCC unroll 8
        for (int l = 0; l < R; l++)
#pragma GCC unroll 4
            for (int u = 0; u < U; u++)
                acc[l][u] = (size_t)l < nq && c0 + GML_VL * (size_t)u < a->ldo
                                ? gml_vf_loada(a->o + (size_t)l * a->ldo + c0 + GML_VL * (size_t)u)
                                : gml_vf_zero();
        for (size_t jj = 0; jj < nk; jj++) {
            const uint8_t b = bits[jj];
            if (!b) continue; /* no row sees it */
            const char *vr = a->v + (jb - a->j0 + jj) * a->v_row;
            if (c0 == 0) dec_prefetch_row(vr + GML_DEC_PREFETCH_AHEAD * a->v_row, v_bytes);
            gml_vf vv[4];
#pragma GCC unroll 4
            for (int u = 0; u < U; u++) {
                const size_t c = c0 + GML_VL * (size_t)u;
                vv[u] = c < dv ? dec_load(T, vr, c, dv - c) : gml_vf_zero();
            }
#pragma GCC unroll 8
            for (int l = 0; l < R; l++)
                if ((size_t)l < nq && (b == all || (b >> l & 1))) {
                    const gml_vf w = gml_vf_set1(p[(size_t)l * GML_FLASH_DEC_KEY_BLOCK + jj]);
#pragma GCC unroll 4
                    for (int u = 0; u < U; u++) acc[l][u] = gml_vf_fma(w, vv[u], acc[l][u]);
                }
        }
#pragma GCC unroll 8
        for (int l = 0; l < R; l++)
#pragma GCC unroll 4
            for (int u = 0; u < U; u++)
                if ((size_t)l < nq && c0 + GML_VL * (size_t)u < a->ldo)
                    gml_vf_storea(a->o + (size_t)l * a->ldo + c0 + GML_VL * (size_t)u, acc[l][u]);
    }
}

static void dec_cap(const gml_flash_dec_args *a, size_t n, float *x) {
    const gml_vf c = gml_vf_set1(a->softcap), nan = gml_vf_set1(NAN), inf = gml_vf_set1(INFINITY);
    for (size_t i = 0; i < n; i += GML_VL) {
        const gml_vm live = gml_vm_first(GML_MIN((size_t)GML_VL, n - i));
        const gml_vf v = gml_vf_load_m(x + i, live);
        const gml_vm fin = gml_vf_lt(gml_vf_abs(v), inf);
        const gml_vf t = gml_vf_mul(c, gml_vtanh(gml_vf_div(v, c)));
        gml_vf_store_m(x + i, live, gml_vf_select(fin, t, nan));
    }
}

static float dec_expsum(size_t n, float *x, float base) {
    const gml_vf b = gml_vf_set1(base), neg_inf = gml_vf_set1(-INFINITY);
    gml_vf acc = gml_vf_zero();
    size_t i = 0;
    for (; i + GML_VL <= n; i += GML_VL) {
        const gml_vf e = gml_vexp_nosub(gml_vf_sub(gml_vf_load(x + i), b));
        gml_vf_store(x + i, e);
        acc = gml_vf_add(acc, e);
    }
    if (i < n) { /* lanes past n: -inf, their terms +0 */
        const gml_vm live = gml_vm_first(n - i);
        const gml_vf v = gml_vf_select(live, gml_vf_load_m(x + i, live), neg_inf);
        const gml_vf e = gml_vexp_nosub(gml_vf_sub(v, b));
        gml_vf_store_m(x + i, live, e);
        acc = gml_vf_add(acc, e);
    }
    return gml_vf_hsum(acc);
}

/* max_i x[i] (no NaN among them): SCAN takes the lanes of the vectors'
 * max, then the tail, one by one in order (a tie of -0 and +0 keeps the
 * first); else the tail joins the vectors (-inf past n) and gml_vf_hmax
 * reduces them. */
static GML_SIMD_INLINE float dec_max_t(size_t n, const float *x, const bool SCAN) {
    const gml_vf neg_inf = gml_vf_set1(-INFINITY);
    gml_vf m = neg_inf;
    size_t i = 0;
    for (; i + GML_VL <= n; i += GML_VL) m = gml_vf_max(m, gml_vf_load(x + i));
    if (!SCAN) {
        if (i < n) {
            const gml_vm live = gml_vm_first(n - i);
            m = gml_vf_max(m, gml_vf_select(live, gml_vf_load_m(x + i, live), neg_inf));
        }
        return gml_vf_hmax(m);
    }
    float r = -INFINITY, buf[GML_VL];
    gml_vf_store(buf, m);
    for (size_t t = 0; t < GML_VL; t++) r = buf[t] > r ? buf[t] : r;
    for (; i < n; i++) r = x[i] > r ? x[i] : r;
    return r;
}

/* ---- the register tiles, per ISA ---------------------------------------------
 * DEC_ROWS rows a dot tile (4 DEC_ROWS accumulators), values in R x U tiles
 * (R rows, U vectors of columns), DEC_MAX_SCAN as dec_max_t. */
#if defined(GML_SIMD_AVX512)
#define DEC_ROWS 4
#define DEC_U_FEW 4  /* nq <= 4: 4 x 4 */
#define DEC_U_MANY 2 /* 8 x 2 */
#define DEC_MAX_SCAN false
#define DEC_UKERNEL gml_f32_flash_dec_ukernel__avx512_d16
#elif defined(GML_SIMD_AVX2)
#define DEC_ROWS 2
#define DEC_U_FEW 2  /* 4 x 2 */
#define DEC_U_MANY 1 /* 8 x 1: 16 ymm are too few for more */
#define DEC_MAX_SCAN true
#define DEC_UKERNEL gml_f32_flash_dec_ukernel__avx2_d8
#elif defined(GML_SIMD_NEON)
#define DEC_ROWS 4
#define DEC_U_FEW 4
#define DEC_U_MANY 2
#define DEC_MAX_SCAN false
#define DEC_UKERNEL gml_f32_flash_dec_ukernel__neon_d4
#endif

static void dec_dots(const gml_flash_dec_args *a, size_t jb, size_t nk, float *s) {
    switch (a->k_type) {
    case GML_F16: dec_dots_t(a, jb, nk, s, GML_F16, DEC_ROWS); break;
    case GML_BF16: dec_dots_t(a, jb, nk, s, GML_BF16, DEC_ROWS); break;
    default: dec_dots_t(a, jb, nk, s, GML_F32, DEC_ROWS); break;
    }
}

static void dec_values(const gml_flash_dec_args *a, size_t jb, size_t nk, const float *p,
                       const uint8_t *bits) {
    const bool few = a->nq <= 4;
    switch (a->v_type) {
    case GML_F16:
        if (few) dec_values_t(a, jb, nk, p, bits, GML_F16, 4, DEC_U_FEW);
        else dec_values_t(a, jb, nk, p, bits, GML_F16, 8, DEC_U_MANY);
        break;
    case GML_BF16:
        if (few) dec_values_t(a, jb, nk, p, bits, GML_BF16, 4, DEC_U_FEW);
        else dec_values_t(a, jb, nk, p, bits, GML_BF16, 8, DEC_U_MANY);
        break;
    default:
        if (few) dec_values_t(a, jb, nk, p, bits, GML_F32, 4, DEC_U_FEW);
        else dec_values_t(a, jb, nk, p, bits, GML_F32, 8, DEC_U_MANY);
        break;
    }
}

static float dec_max(size_t n, const float *x) { return dec_max_t(n, x, DEC_MAX_SCAN); }

void DEC_UKERNEL(const gml_flash_dec_args *a) {
    gml_flash_dec_run(a, dec_dots, dec_cap, dec_expsum, dec_max, dec_values);
}
