/* The flash attention prefill micro-kernels (ops/flash_attn.inc), written
 * once over the SIMD layer and compiled once per ISA; only the register
 * tiles, whose shapes depend on the register file, are chosen per ISA (at
 * the end). The decode ones: ops/flash_dec_simd.c.
 *
 * gml_f32_flash_ukernel__<isa>_x<tile>: query rows along the lanes of NV
 * vectors (tile = NV GML_VL rows), so the per-row softmax statistics are
 * plain vector operations, never a horizontal reduction. For each block of
 * KB keys:
 *
 *   scores   s[j][l] = sum_d k[j][d] qt[d][l]      (MRK keys x NV vectors of
 *            accumulators; k broadcast from its rows in place)
 *   masks    + the additive mask, then -inf for lanes past their key count
 *   softmax  m' = max(m, max_j s[j]); p[j] = exp(s[j] - m'); l = l e^(m - m')
 *            + sum_j p[j]; the output rescaled by e^(m - m') where it moved
 *   values   ot[c][l] += sum_j v[j][c] p[j][l]      (MR output columns x NV
 *            vectors; v broadcast from its rows in place)
 *
 * then out[l][c] = ot[c][l] / l[l].
 *
 * Compute bf16 (ops/flash_attn_bf16.c): every variant rounds each p[j] to
 * bf16 (round_p; its operands come rounded), and compiled once more for
 * AVX-512 with AVX512_BF16 (GML_SIMD_BF16) this file gives the bf16
 * variants, whose two products are VDPBF16PS on pairs of bf16: scores over
 * pairs of d (q^T and each K block packed so), values over pairs of keys
 * (each V block and the weights packed so), and the AMX variant (opt-in,
 * ops/flash_attn_amx.h), whose two products run on AMX tiles through
 * a->amx. */
#include "simd/simd.h"
#include "simd/vmath.h"
#include "ukernels.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#define NV_MAX 4  /* vectors of query rows */
#define MR_MAX 16 /* keys or columns of a register tile */

/* gml_vexp_nosub of x <= 0, -inf or NaN (s - max and m - max of the online
 * softmax), bitwise: no such lane reaches the upper clamp, a lane under the
 * lower one has n <= -126 and is +0 either way (-inf: n = -inf), and the
 * flush to +0 is the scaling's (gml_vf_ldexp_flush); fewer operations an
 * exp, one exp a score. */
static GML_SIMD_INLINE gml_vf vexp_nonpos(gml_vf x) {
    gml_vf n;
    const gml_vf p = gml_vexp_reduce(x, &n);
    return gml_vf_ldexp_flush(p, n);
}

/* The two products' chain step, acc + x b lane by lane: f32 (BF false) an
 * FMA; the pairs (BF: compute bf16 with VDPBF16PS, GML_SIMD_BF16 objects
 * only) a VDPBF16PS on pairs of bf16 (acc + x.lo b.lo + x.hi b.hi), whose
 * bits the gml_vf operands carry. An operand array holds 4-byte elements,
 * floats or uint32_t pairs (gml_vf_pack_bf16_pairs), addressed as floats
 * and read as their own type. */
static GML_SIMD_INLINE gml_vf opnd_loada(const float *p, const bool BF) {
#if defined(GML_SIMD_BF16)
    if (BF) return gml_vi_as_vf(gml_vi_load((const int32_t *)(const void *)p));
#endif
    (void)BF;
    return gml_vf_loada(p);
}

/* the element at p in every lane */
static GML_SIMD_INLINE gml_vf opnd_set1(const float *p, const bool BF) {
#if defined(GML_SIMD_BF16)
    if (BF) return gml_vi_as_vf(gml_vi_set1((int32_t) * (const uint32_t *)(const void *)p));
#endif
    (void)BF;
    return gml_vf_set1(*p);
}

static GML_SIMD_INLINE gml_vf chain_step(gml_vf acc, gml_vf x, gml_vf b, const bool BF) {
#if defined(GML_SIMD_BF16)
    if (BF) return gml_vf_dot_bf16(acc, gml_vf_as_vi(x), gml_vf_as_vi(b));
#endif
    (void)BF;
    return gml_vf_fma(x, b, acc);
}

/* the score chain's steps unrolled: 4 in f32, 2 in pairs (a bf16 object
 * computes only pairs) */
#if defined(GML_SIMD_BF16)
#define CHAIN_UNROLL "GCC unroll 2"
#else
#define CHAIN_UNROLL "GCC unroll 4"
#endif

/* s[j][.] = the chain over d of k[j][d] qt[d][.] for j < nkp (a multiple
 * of MR): f32, k the block's rows kb (stride a->ldk) and qt = q^T
 * [dk][tile]; BF, in pairs of d, k = kb [nk][ceil(dk / 2)] and qt the pairs
 * of q^T (a->pairs [ceil(dk / 2)][tile]). Rows past nk are read as row
 * nk - 1 (their scores are masked afterwards); bmax[v] the max of the
 * scores of keys j < nk (max's order: a NaN passed over), kept in memory
 * while the scores go (BMAX_MEM: the tile leaves no register for it) or in
 * registers. True if a score is NaN or at least 2^102 in magnitude (inf
 * included): then adding a finite mask may overflow, and a -inf score must
 * not pass for a masked key. */
static GML_SIMD_INLINE bool scores(const gml_flash_args *a, const float *kb, size_t nk, size_t nkp,
                                   float *s, gml_vf *bmax, const int NV, const int MR,
                                   const bool BMAX_MEM, const bool BF) {
    const size_t tile = GML_VL * (size_t)NV, dkp = (a->dk + 1) / 2, nd = BF ? dkp : a->dk;
    const float *qt = BF ? (const float *)(const void *)a->pairs : a->qt;
    const gml_vf big = gml_vf_set1(0x1p102f);
    _Alignas(64) float bm[NV_MAX * GML_VL];
    gml_vm rare = gml_vm_first(0);
    for (int v = 0; v < NV; v++) {
        bmax[v] = gml_vf_set1(-INFINITY);
        if (BMAX_MEM) gml_vf_storea(bm + GML_VL * v, bmax[v]);
    }
    for (size_t jt = 0; jt < nkp; jt += (size_t)MR) {
        const float *kr[MR_MAX];
#pragma GCC unroll 16
        for (int r = 0; r < MR; r++)
            kr[r] = kb + GML_MIN(jt + (size_t)r, nk - 1) * (BF ? dkp : a->ldk);
        gml_vf acc[MR_MAX][NV_MAX];
#pragma GCC unroll 16
        for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[r][v] = gml_vf_zero();
        _Pragma(CHAIN_UNROLL) for (size_t d = 0; d < nd; d++) {
            gml_vf b[NV_MAX];
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) b[v] = opnd_loada(qt + d * tile + GML_VL * (size_t)v, BF);
#pragma GCC unroll 16
            for (int r = 0; r < MR; r++) {
                const gml_vf x = opnd_set1(kr[r] + d, BF);
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++) acc[r][v] = chain_step(acc[r][v], x, b[v], BF);
            }
        }
#pragma GCC unroll 16
        for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) {
                rare = gml_vm_or(rare, gml_vm_not(gml_vf_lt(gml_vf_abs(acc[r][v]), big)));
                gml_vf_storea(s + (jt + (size_t)r) * tile + GML_VL * (size_t)v, acc[r][v]);
                if (jt + (size_t)r >= nk) continue;
                if (BMAX_MEM)
                    gml_vf_storea(bm + GML_VL * v,
                                  gml_vf_max(acc[r][v], gml_vf_loada(bm + GML_VL * v)));
                else
                    bmax[v] = gml_vf_max(acc[r][v], bmax[v]);
            }
    }
    if (BMAX_MEM)
        for (int v = 0; v < NV; v++) bmax[v] = gml_vf_loada(bm + GML_VL * v);
    return gml_vm_any(rare);
}

/* ot[c][.] = ot[c][.] alpha[.] (alpha NULL: as it is) + the chain over
 * j < n of v[j][c] p[j][.] for c in [ct, ct + MR): f32, v the block's rows
 * vb (stride a->ldv) and p the weights [nk][tile]; BF, in pairs of keys,
 * v = vb [ceil(nk / 2)][dv] and p [ceil(nk / 2)][tile]. Columns past dv
 * read column dv - 1 (their rows of ot are padding); skip (f32 only) marks
 * rows left out. */
static GML_SIMD_INLINE void values_group(const gml_flash_args *a, const float *vb, size_t n,
                                         size_t ct, const float *p, float *ot, const gml_vf *alpha,
                                         const int NV, const int MR, const uint8_t *skip,
                                         const bool BF) {
    const size_t tile = GML_VL * (size_t)NV, dv = a->dv;
    size_t off[MR_MAX];
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++) off[r] = GML_MIN(ct + (size_t)r, dv - 1);
    gml_vf acc[MR_MAX][NV_MAX];
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            acc[r][v] = gml_vf_loada(ot + (ct + (size_t)r) * tile + GML_VL * (size_t)v);
            if (alpha) acc[r][v] = gml_vf_mul(acc[r][v], alpha[v]);
        }
    /* columns ct + r of the rows (constant offsets from vr + ct), or the
     * clamped ones of a group past dv */
#define VALUE_LOOP(COL)                                                                  \
    for (size_t j = 0; j < n; j++, vr += BF ? dv : a->ldv) {                             \
        if (skip && skip[j]) continue; /* a v row with NaN or inf (safe pass) */          \
        gml_vf w[NV_MAX];                                                                \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) w[v] =                      \
            opnd_loada(p + j * tile + GML_VL * (size_t)v, BF);                           \
        _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++) {                          \
            const gml_vf x = opnd_set1(vr + (COL), BF);                                  \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) acc[r][v] =             \
                chain_step(acc[r][v], x, w[v], BF);                                      \
        }                                                                                \
    }
    if (ct + (size_t)MR <= dv) {
        const float *vr = vb + ct;
        VALUE_LOOP(r)
    } else {
        const float *vr = vb;
        VALUE_LOOP(off[r])
    }
#undef VALUE_LOOP
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            gml_vf_storea(ot + (ct + (size_t)r) * tile + GML_VL * (size_t)v, acc[r][v]);
}

/* Every column c < dv: groups of MR, then the last few in a group of
 * GML_VL / 4, GML_VL / 2 (if below MR) or MR. */
static GML_SIMD_INLINE void values(const gml_flash_args *a, const float *vb, size_t n,
                                   const float *p, float *ot, const gml_vf *alpha, const int NV,
                                   const int MR, const uint8_t *skip, const bool BF) {
    const size_t dv = a->dv;
    size_t ct = 0;
    for (; ct + (size_t)MR <= dv; ct += (size_t)MR)
        values_group(a, vb, n, ct, p, ot, alpha, NV, MR, skip, BF);
    if (ct == dv) return;
    if (dv - ct <= GML_VL / 4)
        values_group(a, vb, n, ct, p, ot, alpha, NV, GML_VL / 4, skip, BF);
    else if (dv - ct <= GML_VL / 2 && MR > GML_VL / 2)
        values_group(a, vb, n, ct, p, ot, alpha, NV, GML_VL / 2, skip, BF);
    else values_group(a, vb, n, ct, p, ot, alpha, NV, MR, skip, BF);
}

/* The options on a block of scores s[j][.], j < nk (gml_flash_score's
 * operations in its order, vectorised): softcap on the dot products (a
 * non-finite one NaN first, when the block is rare), ... */
static GML_SIMD_INLINE void softcap_block(const gml_flash_args *a, size_t nk, size_t tile,
                                          float *s, bool rare) {
    if (rare)
        for (size_t i = 0; i < nk * tile; i++)
            if (!isfinite(s[i])) s[i] = NAN;
    const gml_vf c = gml_vf_set1(a->softcap);
    for (size_t i = 0; i < nk * tile; i += GML_VL)
        gml_vf_storea(s + i, gml_vf_mul(c, gml_vtanh(gml_vf_div(gml_vf_loada(s + i), c))));
}

/* ... and after the mask, ALiBi: + slope[l] (j - qpos[l]); then -inf before
 * each lane's first key (a window). */
static GML_SIMD_INLINE void alibi_window_block(const gml_flash_args *a, size_t j0, size_t nk,
                                               float *s, const int NV) {
    const size_t tile = GML_VL * (size_t)NV;
    if (a->slope)
        for (size_t j = 0; j < nk; j++) {
            const gml_vf jf = gml_vf_set1((float)(j0 + j));
            for (int v = 0; v < NV; v++) {
                float *sj = s + j * tile + GML_VL * (size_t)v;
                const gml_vf d = gml_vf_sub(jf, gml_vf_load(a->qpos + GML_VL * v));
                gml_vf_storea(sj, gml_vf_add(gml_vf_loada(sj),
                                             gml_vf_mul(gml_vf_load(a->slope + GML_VL * v), d)));
            }
        }
    if (a->first_key) {
        int32_t fmax = 0;
        for (size_t i = 0; i < a->nq; i++) fmax = GML_MAX(fmax, a->first_key[i]);
        for (size_t j = 0; j < nk && j0 + j < (size_t)fmax; j++) {
            const gml_vi jj = gml_vi_set1((int32_t)(j0 + j));
            for (int v = 0; v < NV; v++) {
                const gml_vm before = gml_vi_gt(gml_vi_load(a->first_key + GML_VL * v), jj);
                float *sj = s + j * tile + GML_VL * (size_t)v;
                gml_vf_storea(sj, gml_vf_select(before, gml_vf_set1(-INFINITY), gml_vf_loada(sj)));
            }
        }
    }
}

/* gml_flash_finish's common case in vectors: every lane < nq with a
 * positive finite sum (no poison) and finite outputs. out[l][c] = ot[c][l]
 * * factor[l], the same operations, GML_VL x GML_VL blocks transposed in
 * registers; the factor 1 / sum[l], or with a sink or flash_attn_lse's
 * columns gml_flash_finish's own scalar pieces per lane (the factor,
 * out[l][dv] and out[l][dv + 1]: the same bits). False, nothing written,
 * when a lane needs gml_flash_finish (which then writes every row). */
static GML_SIMD_INLINE bool finish_vec(const gml_flash_args *a, const gml_vf *l, const gml_vf *m,
                                      const float *ot, const int NV) {
    const size_t tile = GML_VL * (size_t)NV, nq = a->nq, dv = a->dv;
    const gml_vf inf = gml_vf_set1(INFINITY), zero = gml_vf_zero();
    gml_vf inv[NV_MAX];
    gml_vm live[NV_MAX], bad[NV_MAX];
    for (int v = 0; v < NV; v++) {
        const size_t l0 = GML_VL * (size_t)v, n = nq > l0 ? GML_MIN((size_t)GML_VL, nq - l0) : 0;
        live[v] = gml_vm_first(n);
        const gml_vm ok = gml_vm_and(gml_vf_gt(l[v], zero), gml_vf_lt(l[v], inf));
        if (gml_vm_any(gml_vm_and(live[v], gml_vm_not(ok)))) return false;
        inv[v] = gml_vf_div(gml_vf_set1(1.0f), l[v]);
        bad[v] = gml_vm_first(0);
    }
    /* per lane in scalar code: a sink's factor (a NaN one fails the check
     * below), the lse and the sink's weight (written last) */
    const bool lanes = a->sink || a->lse;
    _Alignas(64) float sum[NV_MAX * GML_VL], mx[NV_MAX * GML_VL], f[NV_MAX * GML_VL];
    if (lanes) {
        for (int v = 0; v < NV; v++) {
            gml_vf_storea(sum + GML_VL * v, l[v]);
            gml_vf_storea(mx + GML_VL * v, m[v]);
        }
        for (size_t i = 0; i < tile; i++) {
            float total;
            f[i] = i < nq ? gml_flash_lane_factor(a, i, sum[i], mx[i], &total) : 0.0f;
        }
        for (int v = 0; v < NV; v++) inv[v] = gml_vf_loada(f + GML_VL * v);
    }
    /* every output finite first: nothing is written otherwise (lanes >= nq
     * may hold anything) */
    for (size_t c = 0; c < dv; c++)
        for (int v = 0; v < NV; v++) {
            const gml_vf x = gml_vf_mul(gml_vf_loada(ot + c * tile + GML_VL * (size_t)v), inv[v]);
            bad[v] = gml_vm_or(bad[v], gml_vm_not(gml_vf_lt(gml_vf_abs(x), inf)));
        }
    for (int v = 0; v < NV; v++)
        if (gml_vm_any(gml_vm_and(bad[v], live[v]))) return false;
    for (int v = 0; v < NV; v++)
        for (size_t c0 = 0; c0 < dv; c0 += GML_VL) {
            const size_t nc = GML_MIN((size_t)GML_VL, dv - c0);
            gml_vf r[GML_VL];
            for (size_t i = 0; i < GML_VL; i++)
                r[i] = i < nc ? gml_vf_mul(gml_vf_loada(ot + (c0 + i) * tile + GML_VL * (size_t)v),
                                           inv[v])
                              : zero;
            gml_vf_transpose(r);
            const gml_vm cols = gml_vm_first(nc);
            for (size_t i = 0; i < GML_VL && GML_VL * (size_t)v + i < nq; i++) {
                float *o = a->out[GML_VL * (size_t)v + i] + c0;
                if (nc == GML_VL) gml_vf_store(o, r[i]);
                else gml_vf_store_m(o, cols, r[i]);
            }
        }
    if (a->lse)
        for (size_t i = 0; i < nq; i++) gml_flash_store_lse(a, i, sum[i], mx[i], a->out[i]);
    return true;
}

#if defined(GML_SIMD_BF16)
/* ---- the pairs (compute bf16 with VDPBF16PS) ---------------------------------
 * Operands hold bf16 values as floats (low 16 bits 0): a pair is the two
 * top halves, the even element low (gml_vf_pack_bf16_pairs). */

static inline uint32_t pair_of(float lo, float hi) {
    uint32_t a, b;
    memcpy(&a, &lo, 4);
    memcpy(&b, &hi, 4);
    return a >> 16 | (b & 0xffff0000u);
}

/* q^T [dk][tile] -> qp [ceil(dk / 2)][tile] (pairs of d; an odd dk's last
 * pair has 0 above) */
static GML_SIMD_INLINE void pack_q_pairs(const gml_flash_args *a, size_t tile, uint32_t *qp) {
    const size_t dk = a->dk;
    for (size_t d = 0; d < dk; d += 2)
        for (size_t l = 0; l < tile; l += GML_VL) {
            const gml_vf lo = gml_vf_loada(a->qt + d * tile + l);
            const gml_vf hi = d + 1 < dk ? gml_vf_loada(a->qt + (d + 1) * tile + l) : gml_vf_zero();
            gml_vi_store((int32_t *)(void *)(qp + d / 2 * tile + l), gml_vf_pack_bf16_pairs(lo, hi));
        }
}

/* rows j < nk of a K block -> kp [nk][ceil(dk / 2)] (pairs of d) */
static GML_SIMD_INLINE void pack_k_pairs(const gml_flash_args *a, const float *kb, size_t nk,
                                         uint32_t *kp) {
    const size_t dk = a->dk, dkp = (dk + 1) / 2;
    for (size_t j = 0; j < nk; j++) {
        const float *kr = kb + j * a->ldk;
        uint32_t *o = kp + j * dkp;
        for (size_t d = 0; d + 1 < dk; d += 2) o[d / 2] = pair_of(kr[d], kr[d + 1]);
        if (dk % 2) o[dkp - 1] = pair_of(kr[dk - 1], 0.0f);
    }
}

/* rows j < nk of a V block -> vp [ceil(nk / 2)][dv] (pairs of keys; the
 * partner of an odd nk's last key, and rows skip marks, 0) */
static GML_SIMD_INLINE void pack_v_pairs(const gml_flash_args *a, const float *vb, size_t nk,
                                         const uint8_t *skip, uint32_t *vp) {
    const size_t dv = a->dv;
    for (size_t j = 0; j < nk; j += 2) {
        const bool z0 = skip && skip[j], z1 = j + 1 >= nk || (skip && skip[j + 1]);
        const float *r0 = vb + j * a->ldv, *r1 = vb + (j + 1) * a->ldv;
        uint32_t *o = vp + j / 2 * dv;
        for (size_t c = 0; c < dv; c += GML_VL) {
            const gml_vm m = gml_vm_first_i((int)GML_MIN((size_t)GML_VL, dv - c));
            const gml_vf lo = z0 ? gml_vf_zero() : gml_vf_load_m(r0 + c, m);
            const gml_vf hi = z1 ? gml_vf_zero() : gml_vf_load_m(r1 + c, m);
            gml_vf_store_m((float *)(void *)(o + c), m,
                           gml_vi_as_vf(gml_vf_pack_bf16_pairs(lo, hi)));
        }
    }
}

/* weights p[j][.], j < nk -> pp [ceil(nk / 2)][tile] (pairs of keys) */
static GML_SIMD_INLINE void pack_p_pairs(const float *p, size_t nk, size_t tile, uint32_t *pp) {
    for (size_t j = 0; j < nk; j += 2)
        for (size_t l = 0; l < tile; l += GML_VL) {
            const gml_vf lo = gml_vf_loada(p + j * tile + l);
            const gml_vf hi = j + 1 < nk ? gml_vf_loada(p + (j + 1) * tile + l) : gml_vf_zero();
            gml_vi_store((int32_t *)(void *)(pp + j / 2 * tile + l), gml_vf_pack_bf16_pairs(lo, hi));
        }
}

/* ---- AMX (compute bf16 with TDPBF16PS, opt-in: ops/flash_attn_amx.h) --------
 * The products on tiles through a->amx; tile = 32 (NV 2). */

/* q^T in pairs of d into x->qp, rows past ceil(dk / 2) up to ldk 0 */
static GML_SIMD_INLINE void amx_pack_q(const gml_flash_args *a, size_t tile) {
    const gml_flash_amx_args *x = a->amx;
    pack_q_pairs(a, tile, x->qp);
    memset(x->qp + (a->dk + 1) / 2 * tile, 0, (x->ldk - (a->dk + 1) / 2) * tile * sizeof(uint32_t));
}

/* s[j][.] for keys j0 + j, j < nk rounded up to 32 (rows past nk: keys
 * after the block or the head's zero rows, never used); bmax and the
 * return value as scores() gives them, from s. */
static GML_SIMD_INLINE bool amx_scores(const gml_flash_args *a, size_t j0, size_t nk, float *s,
                                       gml_vf *bmax, const int NV) {
    const gml_flash_amx_args *x = a->amx;
    const size_t tile = GML_VL * (size_t)NV;
    for (size_t jt = 0; jt < nk; jt += 32)
        x->tile(x->ldk / 16, x->k + (j0 + jt) * x->ldk, x->ldk, x->qp, tile, s + jt * tile, tile,
                false);
    const gml_vf big = gml_vf_set1(0x1p102f);
    gml_vm rare = gml_vm_first(0);
    for (int v = 0; v < NV; v++) bmax[v] = gml_vf_set1(-INFINITY);
    for (size_t j = 0; j < nk; j++)
        for (int v = 0; v < NV; v++) {
            const gml_vf sj = gml_vf_loada(s + j * tile + GML_VL * (size_t)v);
            rare = gml_vm_or(rare, gml_vm_not(gml_vf_lt(gml_vf_abs(sj), big)));
            bmax[v] = gml_vf_max(sj, bmax[v]);
        }
    return gml_vm_any(rare);
}

/* key j0 + j's v row has a NaN or inf (a bf16 exponent of all ones in vt) */
static GML_SIMD_INLINE bool amx_v_bad(const gml_flash_args *a, size_t j) {
    const gml_flash_amx_args *x = a->amx;
    const unsigned sh = (unsigned)(j % 2) * 16;
    bool bad = false;
    for (size_t c = 0; c < a->dv; c++) bad |= (x->vt[c * x->ldv + j / 2] >> sh & 0x7f80u) == 0x7f80u;
    return bad;
}

/* ot[c][.] = ot[c][.] alpha (alpha NULL: as it is) + the weights p[j][.],
 * j < nk, times V's rows j0 + j, for c < dv rounded up to 32 (rows past
 * dv: 0 in vt). The weights in pairs of keys, +0 past the block up to a
 * whole step; vt in place when the block is whole steps and no row is
 * skipped, else a copy with the halves of skipped keys and of keys past
 * the block +0. */
static GML_SIMD_INLINE void amx_values(const gml_flash_args *a, size_t j0, size_t nk, const float *p,
                                       float *ot, const gml_vf *alpha, const uint8_t *skip,
                                       const int NV) {
    const gml_flash_amx_args *x = a->amx;
    const size_t tile = GML_VL * (size_t)NV, dv32 = (a->dv + 31) / 32 * 32;
    const size_t np = (nk + 1) / 2, steps = (np + 15) / 16;
    if (alpha)
        for (size_t c = 0; c < dv32; c++)
            for (int v = 0; v < NV; v++) {
                float *o = ot + c * tile + GML_VL * (size_t)v;
                gml_vf_storea(o, gml_vf_mul(gml_vf_loada(o), alpha[v]));
            }
    pack_p_pairs(p, nk, tile, x->pp);
    memset(x->pp + np * tile, 0, (steps * 16 - np) * tile * sizeof(uint32_t));
    const uint32_t *vt = x->vt + j0 / 2;
    size_t ld = x->ldv;
    if (skip || nk % 32) {
        for (size_t c = 0; c < dv32; c++)
            for (size_t i = 0; i < steps * 16; i++) {
                const size_t j = 2 * i;
                uint32_t w = i < np ? vt[c * ld + i] : 0;
                if (j >= nk || (skip && skip[j])) w &= 0xffff0000u;
                if (j + 1 >= nk || (skip && skip[j + 1])) w &= 0x0000ffffu;
                x->vblk[c * 32 + i] = w;
            }
        vt = x->vblk;
        ld = 32;
    }
    for (size_t c0 = 0; c0 < dv32; c0 += 32)
        x->tile(steps, vt + c0 * ld, ld, x->pp, tile, ot + c0 * tile, tile, true);
}

#endif /* GML_SIMD_BF16 */

/* NV vectors of lanes, scores MRK keys at a time, values MR columns at a
 * time, key blocks of KB <= GML_FLASH_MAX_KEY_BLOCK keys; RP: each weight
 * rounded to bf16 (compute bf16), BF: both products in pairs of bf16
 * (VDPBF16PS; GML_SIMD_BF16 objects only, RP with it). */
static GML_SIMD_INLINE bool flash_block(const gml_flash_args *a, const int NV, const int MRK,
                                        const int MR, const int KB, const bool BMAX_MEM,
                                        const bool SAFE, const bool RP, const bool BF,
                                        const bool AMX) {
    const size_t tile = GML_VL * (size_t)NV, nq = a->nq, dv = a->dv;
    const size_t dvm = AMX ? 32 : (size_t)MR; /* AMX: blocks of 32 columns */
    const size_t dvp = (dv + dvm - 1) / dvm * dvm;
    float *s = a->work, *ot = s + (size_t)GML_FLASH_MAX_KEY_BLOCK * tile;
    const gml_vf neg_inf = gml_vf_set1(-INFINITY), zero = gml_vf_zero(), one = gml_vf_set1(1.0f);
    gml_vf m[NV_MAX], l[NV_MAX];
    gml_vi nkeys[NV_MAX];
    gml_vm poison[NV_MAX]; /* safe pass: lanes that see a v row with NaN or inf */
    uint8_t skip[GML_FLASH_MAX_KEY_BLOCK];
    for (int v = 0; v < NV; v++) {
        poison[v] = gml_vm_first(0);
        m[v] = neg_inf;
        l[v] = zero;
        nkeys[v] = gml_vi_load(a->n_keys + GML_VL * v);
    }
    int32_t nmax = 0, nmin = INT32_MAX;
    for (size_t i = 0; i < nq; i++) {
        nmax = GML_MAX(nmax, a->n_keys[i]);
        nmin = GML_MIN(nmin, a->n_keys[i]);
    }
    for (size_t i = 0; i < dvp * tile; i += GML_VL) gml_vf_storea(ot + i, zero);
#if defined(GML_SIMD_BF16)
    /* the pairs: q^T once, then each block's K, V and weights */
    const size_t dkp = (a->dk + 1) / 2;
    uint32_t *qp = a->pairs, *kp = qp + dkp * tile, *vp = kp + (size_t)GML_FLASH_MAX_KEY_BLOCK * dkp;
    uint32_t *pp = vp + (size_t)GML_FLASH_MAX_KEY_BLOCK / 2 * dv;
    if (AMX) amx_pack_q(a, tile);
    else if (BF) pack_q_pairs(a, tile, qp);
    /* the head's K and V in pairs (a->kpairs, or AMX's): blocks from an
     * even key, so that a block's pairs of keys are the head's (a key
     * before every lane's first weighs 0) */
    const bool head = BF && (a->kpairs || AMX);
    const size_t jstart = head ? a->key0 & ~(size_t)1 : a->key0;
#else
    (void)BF, (void)AMX;
    const size_t jstart = a->key0;
#endif

    for (size_t j0 = jstart; j0 < (size_t)nmax; j0 += (size_t)KB) {
        const size_t nk = GML_MIN((size_t)KB, (size_t)nmax - j0);
        const float *kb = NULL, *vb = NULL; /* rows j0 .. j0 + nk - 1, converted when typed */
#if defined(GML_SIMD_BF16)
        if (!head)
#endif
            gml_flash_kv_rows(a, j0, nk, &kb, &vb);
        const size_t nkp = (nk + (size_t)MRK - 1) / (size_t)MRK * (size_t)MRK;
        gml_vf smax[NV_MAX];
        const float *ko = kb; /* K's rows, or their pairs */
#if defined(GML_SIMD_BF16)
        if (BF && !AMX) {
            if (!head) pack_k_pairs(a, kb, nk, kp);
            ko = (const float *)(const void *)(head ? a->kpairs + j0 * dkp : kp);
        }
        const bool rare = AMX ? amx_scores(a, j0, nk, s, smax, NV)
                              : scores(a, ko, nk, nkp, s, smax, NV, MRK, BMAX_MEM, BF);
#else
        const bool rare = scores(a, ko, nk, nkp, s, smax, NV, MRK, BMAX_MEM, BF);
#endif
        /* smax holds the block's max unless something below changes scores */
        const bool plain = !rare && !a->mask && !(a->softcap > 0) && !a->slope && !a->first_key &&
                           j0 + nk <= (size_t)nmin;
        if (a->softcap > 0) softcap_block(a, nk, tile, s, rare);

        /* the mask first, then -inf past each lane's keys: a key the lane
         * does not see stays hidden whatever the mask holds there (NaN and
         * +inf added to -inf would make the lane NaN). Scores under 2^102
         * (the usual case) plus a mask cannot overflow, and a -inf mask
         * makes them -inf: a plain add keeps the contract (ggmlite.h,
         * MASKS). Otherwise (a score huge, inf or NaN: rare) each score goes
         * through gml_masked_score / gml_visible_score: -inf where the mask
         * is -inf whatever the score, NaN for a -inf score not hidden. */
        if (a->mask && !rare)
            for (size_t i = 0; i < nq; i++)
                for (size_t j = 0; j < nk; j++)
                    s[j * tile + i] += a->mask[i][(j0 + j) * a->mask_stride];
        else if (a->mask)
            for (size_t i = 0; i < nq; i++)
                for (size_t j = 0; j < nk; j++)
                    s[j * tile + i] =
                        gml_masked_score(s[j * tile + i], a->mask[i][(j0 + j) * a->mask_stride]);
        else if (rare)
            for (size_t i = 0; i < nq; i++)
                for (size_t j = 0; j < nk; j++)
                    s[j * tile + i] = gml_visible_score(s[j * tile + i]);
        alibi_window_block(a, j0, nk, s, NV);
        if (j0 + nk > (size_t)nmin) /* some lane's keys end in this block */
            for (size_t j = 0; j < nk; j++) {
                const gml_vi jj1 = gml_vi_set1((int32_t)(j0 + j + 1));
                for (int v = 0; v < NV; v++) { /* j >= n_keys, as j + 1 > n_keys */
                    const gml_vm past = gml_vi_gt(jj1, nkeys[v]);
                    float *sj = s + j * tile + GML_VL * (size_t)v;
                    gml_vf_storea(sj, gml_vf_select(past, neg_inf, gml_vf_loada(sj)));
                }
            }

        if (SAFE) /* v rows with a NaN or inf: skipped, their lanes NaN */
            for (size_t j = 0; j < nk; j++) {
#if defined(GML_SIMD_BF16)
                if (AMX) {
                    skip[j] = amx_v_bad(a, j0 + j);
                } else if (head) { /* from the pairs: a bf16 exponent of all ones */
                    const uint32_t *pr = a->vpairs + (j0 + j) / 2 * dv;
                    const unsigned sh = (unsigned)((j0 + j) % 2) * 16;
                    bool bad = false;
                    for (size_t c = 0; c < dv; c++) bad |= (pr[c] >> sh & 0x7f80u) == 0x7f80u;
                    skip[j] = bad;
                } else
#endif
                {
                    const float *vr = vb + j * a->ldv;
                    float z = 0;
                    for (size_t c = 0; c < dv; c++) z += vr[c] * 0.0f; /* NaN iff one is not finite */
                    skip[j] = z != z;
                }
                if (skip[j])
                    for (int v = 0; v < NV; v++) {
                        const gml_vf sj = gml_vf_loada(s + j * tile + GML_VL * (size_t)v);
                        poison[v] = gml_vm_or(poison[v], gml_vm_not(gml_vf_eq(sj, neg_inf)));
                    }
            }

        /* online softmax. NaN scores are passed over by the max (max returns
         * its second operand) and make their lane NaN through exp. exp
         * without subnormals (vexp_nonpos, as gml_vexp_nosub): terms below
         * 2^-125.5 are +0, else the scores of a real model (spread over more
         * than 87) make millions of subnormals, each a microcode assist on
         * Intel. Without masks or options the block's max comes from the
         * score registers (no pass over s). */
        gml_vf base[NV_MAX], alpha[NV_MAX];
        bool moved = false;
        for (int v = 0; v < NV; v++) {
            gml_vf bmax = plain ? smax[v] : neg_inf;
            if (!plain)
                for (size_t j = 0; j < nk; j++)
                    bmax = gml_vf_max(gml_vf_loada(s + j * tile + GML_VL * (size_t)v), bmax);
            const gml_vf mnew = gml_vf_max(bmax, m[v]);
            /* a lane that has seen no key yet takes exp(s - 0): every term 0 */
            const gml_vm none = gml_vf_eq(mnew, neg_inf);
            base[v] = gml_vf_select(none, zero, mnew);
            alpha[v] = vexp_nonpos(gml_vf_sub(m[v], base[v])); /* 0 while m is -inf */
            moved |= gml_vm_any(gml_vm_not(gml_vf_eq(alpha[v], one)));
            m[v] = mnew;
        }
        for (int v = 0; v < NV; v++) {
            gml_vf acc = zero;
            for (size_t j = 0; j < nk; j++) {
                float *sj = s + j * tile + GML_VL * (size_t)v;
                gml_vf e = vexp_nonpos(gml_vf_sub(gml_vf_loada(sj), base[v]));
                if (RP) e = gml_vf_round_bf16(e); /* compute bf16: p rounded before use */
                gml_vf_storea(sj, e);
                acc = gml_vf_add(acc, e);
            }
            l[v] = gml_vf_fma(l[v], alpha[v], acc);
        }
        /* the values' operands: V's rows and the weights, or their pairs */
        const float *vo = vb, *po = s;
        size_t nv = nk;
#if defined(GML_SIMD_BF16)
        if (AMX) {
            amx_values(a, j0, nk, s, ot, moved ? alpha : NULL, SAFE ? skip : NULL, NV);
            continue;
        }
        if (BF) {
            const uint32_t *vpb = vp;
            if (head && !SAFE) {
                vpb = a->vpairs + j0 / 2 * dv; /* in place */
            } else if (head) { /* a copy with the halves of skipped rows, and of a key
                                  past the block, 0 */
                memcpy(vp, a->vpairs + j0 / 2 * dv, (nk + 1) / 2 * dv * sizeof(uint32_t));
                for (size_t j = 0; j < nk + 1; j++)
                    if (j == nk ? nk % 2 == 1 : skip[j])
                        for (size_t c = 0; c < dv; c++)
                            vp[j / 2 * dv + c] &= j % 2 ? 0x0000ffffu : 0xffff0000u;
            } else {
                pack_v_pairs(a, vb, nk, SAFE ? skip : NULL, vp);
            }
            pack_p_pairs(s, nk, tile, pp);
            vo = (const float *)(const void *)vpb;
            po = (const float *)(const void *)pp;
            nv = (nk + 1) / 2;
        }
#endif
        /* where the max grew in some lane, what it weighted is rescaled as
         * the value loop loads it; the pairs hold skipped rows as 0 */
        values(a, vo, nv, po, ot, moved ? alpha : NULL, NV, MR, SAFE && !BF ? skip : NULL, BF);
    }

    /* out = ot / l (gml_flash_finish: zeros where no key was seen, NaN
     * where l is, the rare lanes with a NaN or inf in v recomputed) */
    if (!SAFE && finish_vec(a, l, m, ot, NV)) return true;
    float sum[NV_MAX * GML_VL], mx[NV_MAX * GML_VL];
    for (int v = 0; v < NV; v++) {
        gml_vf_store(sum + GML_VL * v, gml_vf_select(poison[v], gml_vf_set1(NAN), l[v]));
        gml_vf_store(mx + GML_VL * v, m[v]);
    }
    return gml_flash_finish(a, tile, sum, mx, ot, SAFE);
}

#if !defined(GML_SIMD_BF16) /* the f32 variants (the bf16 objects: flash_bf16 below) */
/* A lane whose output came out NaN or inf though its sum is finite: a v
 * row with NaN or inf, hidden (0 * NaN) or not. The block is computed again
 * with those rows skipped and the lanes that see them NaN: the others get
 * bitwise what they got (but for the sign of a zero). */
static GML_SIMD_INLINE void flash(const gml_flash_args *a, const int NV, const int MRK,
                                  const int MR, const int KB, const bool BMAX_MEM) {
    if (a->round_p) { /* compute bf16 in the chain order (ops/flash_attn_bf16.c) */
        if (!flash_block(a, NV, MRK, MR, KB, BMAX_MEM, false, true, false, false))
            flash_block(a, NV, MRK, MR, KB, BMAX_MEM, true, true, false, false);
        return;
    }
    if (!flash_block(a, NV, MRK, MR, KB, BMAX_MEM, false, false, false, false))
        flash_block(a, NV, MRK, MR, KB, BMAX_MEM, true, false, false, false);
}
#endif

/* ---- the register tiles, per ISA ---------------------------------------------
 * flash(a, NV, MRK, MR, KB, BMAX_MEM): NV vectors of query rows, MRK keys a
 * score tile and MR columns a value tile (MR NV accumulators, with NV + 1
 * registers for the operands), key blocks of KB (a multiple of MRK whose K,
 * V, scores, q^T and o fit L1), the block max in memory when the score tile
 * leaves no register for it. */
#if defined(GML_SIMD_BF16)
/* compute bf16 with VDPBF16PS, the tiles of the AVX-512 f32 variants; key
 * blocks of 64 (an even count: pairs of keys never straddle two blocks) */
static GML_SIMD_INLINE void flash_bf16(const gml_flash_args *a, const int NV, const int MRK,
                                       const int MR, const bool AMX) {
    if (!flash_block(a, NV, MRK, MR, 64, false, false, true, true, AMX))
        flash_block(a, NV, MRK, MR, 64, false, true, true, true, AMX);
}
void gml_bf16_flash_ukernel__avx512bf16_x32(const gml_flash_args *a) { flash_bf16(a, 2, 8, 8, false); }
void gml_bf16_flash_ukernel__avx512bf16_x16(const gml_flash_args *a) { flash_bf16(a, 1, 16, 16, false); }
/* the products on AMX tiles (a->amx): 32 rows, the x32 softmax */
void gml_bf16_flash_ukernel__avx512bf16amx_x32(const gml_flash_args *a) { flash_bf16(a, 2, 8, 8, true); }
#elif defined(GML_SIMD_AVX512)
/* 32 zmm: 16 score accumulators and 8 (16 rows: 16) value accumulators */
void gml_f32_flash_ukernel__avx512_x32(const gml_flash_args *a) { flash(a, 2, 8, 8, 64, false); }
void gml_f32_flash_ukernel__avx512_x16(const gml_flash_args *a) { flash(a, 1, 16, 16, 64, false); }
#elif defined(GML_SIMD_AVX2)
/* 16 ymm: 6 keys x 2 vectors of accumulators, 2 of q^T, 1 of k; key blocks
 * of 48 (64 computed 66 in 6s, 3% for nothing), 40 KiB at d = 64 */
void gml_f32_flash_ukernel__avx2_x16(const gml_flash_args *a) { flash(a, 2, 6, 6, 48, true); }
#elif defined(GML_SIMD_NEON)
/* 32 q registers: 6 keys x 4 vectors of accumulators, 4 of q^T, 1 of k */
void gml_f32_flash_ukernel__neon_x16(const gml_flash_args *a) { flash(a, 4, 6, 6, 48, true); }
#endif
