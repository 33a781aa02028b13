/* AVX-512F variants of the flash attention micro-kernel (ops/flash_attn.inc):
 * query rows along the lanes of NV zmm registers (32 or 16 rows), so the
 * per-row softmax statistics are plain vector operations, never a
 * horizontal reduction. For each block of KB keys:
 *
 *   scores   s[j][l] = sum_d k[j][d] qt[d][l]      (MR keys x NV vectors of
 *            accumulators; k broadcast from its rows in place)
 *   masks    + the additive mask, then -inf for lanes past their key count
 *   softmax  m' = max(m, max_j s[j]); p[j] = exp(s[j] - m'); l = l e^(m - m')
 *            + sum_j p[j]; the output rescaled by e^(m - m') where it moved
 *   values   ot[c][l] += sum_j v[j][c] p[j][l]      (MR output columns x NV
 *            vectors; v broadcast from its rows in place)
 *
 * then out[l][c] = ot[c][l] / l[l]. */
#include "ukernels.h"
#include "vexp_x86.h"
#include "vunary_x86.h"

#include <immintrin.h>
#include <limits.h>
#include <math.h>


#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

/* vexp16_nosub of x <= 0, -inf or NaN (s - max and m - max of the online
 * softmax), bitwise: no such lane reaches its upper clamp, a lane under its
 * lower one has n <= -126 and is +0 either way (-inf: n = -inf), and the
 * flush to +0 is the scaling's zero mask; 3 vector operations fewer of 17
 * an exp, one exp a score. */
static ALWAYS_INLINE __m512 vexp16_nonpos(__m512 x) {
    __m512 n;
    const __m512 p = vexp16_reduce(x, &n);
    const __mmask16 keep = _mm512_cmp_ps_mask(n, _mm512_set1_ps(-126.0f), _CMP_NLE_UQ);
    return _mm512_maskz_scalef_ps(keep, p, n);
}

/* s[j][.] for j < nkp (a multiple of MR): key rows past last are read as
 * row last (their scores are masked afterwards); bmax[v] the max of the
 * scores of keys j < nk (max_ps's order: a NaN passed over). True if a score is NaN or
 * at least 2^102 in magnitude (inf included): then adding a finite mask
 * may overflow, and a -inf score must not pass for a masked key. */
static ALWAYS_INLINE bool scores(const gml_flash_args *a, const float *kb, size_t j0, size_t nk,
                                 size_t nkp, size_t last, float *s, __m512 *bmax, const int NV,
                                 const int MR) {
    const size_t tile = 16 * (size_t)NV, dk = a->dk;
    const __m512 big = _mm512_set1_ps(0x1p102f);
    __mmask16 rare = 0;
    for (int v = 0; v < NV; v++) bmax[v] = _mm512_set1_ps(-INFINITY);
    for (size_t jt = 0; jt < nkp; jt += (size_t)MR) {
        const float *kr[16];
#pragma GCC unroll 16
        for (int r = 0; r < MR; r++) kr[r] = kb + (GML_MIN(j0 + jt + (size_t)r, last) - j0) * a->ldk;
        __m512 acc[16][2];
#pragma GCC unroll 16
        for (int r = 0; r < MR; r++)
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
#pragma GCC unroll 4
        for (size_t d = 0; d < dk; d++) {
            __m512 b[2];
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) b[v] = _mm512_load_ps(a->qt + d * tile + 16 * (size_t)v);
#pragma GCC unroll 16
            for (int r = 0; r < MR; r++) {
                const __m512 x = _mm512_set1_ps(kr[r][d]);
#pragma GCC unroll 2
                for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(x, b[v], acc[r][v]);
            }
        }
#pragma GCC unroll 16
        for (int r = 0; r < MR; r++)
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) {
                rare |= _mm512_cmp_ps_mask(_mm512_abs_ps(acc[r][v]), big, _CMP_NLT_UQ);
                _mm512_store_ps(s + (jt + (size_t)r) * tile + 16 * (size_t)v, acc[r][v]);
                if (jt + (size_t)r < nk) bmax[v] = _mm512_max_ps(acc[r][v], bmax[v]);
            }
    }
    return rare != 0;
}

/* ot[c][.] = ot[c][.] alpha[.] (alpha NULL: as it is) + sum_{j < nk} v[j][c]
 * p[j][.] for c in [ct, ct + MR); columns past dv read column dv - 1 (their
 * rows of ot are padding). */
static ALWAYS_INLINE void values_group(const gml_flash_args *a, const float *vb, size_t nk,
                                       size_t ct, const float *p, float *ot, const __m512 *alpha,
                                       const int NV, const int MR, const uint8_t *skip) {
    const size_t tile = 16 * (size_t)NV, dv = a->dv;
    size_t off[16];
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++) off[r] = GML_MIN(ct + (size_t)r, dv - 1);
    __m512 acc[16][2];
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) {
            acc[r][v] = _mm512_load_ps(ot + (ct + (size_t)r) * tile + 16 * (size_t)v);
            if (alpha) acc[r][v] = _mm512_mul_ps(acc[r][v], alpha[v]);
        }
    /* columns ct + r of the rows (constant offsets from vr + ct), or the
     * clamped ones of a group past dv */
#define VALUE_LOOP(COL)                                                                  \
    for (size_t j = 0; j < nk; j++, vr += a->ldv) {                                      \
        if (skip && skip[j]) continue; /* a v row with NaN or inf (safe pass) */          \
        __m512 w[2];                                                                     \
        _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) w[v] =                      \
            _mm512_load_ps(p + j * tile + 16 * (size_t)v);                               \
        _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++) {                          \
            const __m512 x = _mm512_set1_ps(COL);                                        \
            _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) acc[r][v] =             \
                _mm512_fmadd_ps(x, w[v], acc[r][v]);                                     \
        }                                                                                \
    }
    if (ct + (size_t)MR <= dv) {
        const float *vr = vb + ct;
        VALUE_LOOP(vr[r])
    } else {
        const float *vr = vb;
        VALUE_LOOP(vr[off[r]])
    }
#undef VALUE_LOOP
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++)
            _mm512_store_ps(ot + (ct + (size_t)r) * tile + 16 * (size_t)v, acc[r][v]);
}

/* Every column c < dv: groups of MR, then the last few in a group of 4, 8
 * (or MR). */
static ALWAYS_INLINE void values(const gml_flash_args *a, const float *vb, size_t nk,
                                 const float *p, float *ot, const __m512 *alpha, const int NV,
                                 const int MR, const uint8_t *skip) {
    const size_t dv = a->dv;
    size_t ct = 0;
    for (; ct + (size_t)MR <= dv; ct += (size_t)MR)
        values_group(a, vb, nk, ct, p, ot, alpha, NV, MR, skip);
    if (ct == dv) return;
    if (dv - ct <= 4) values_group(a, vb, nk, ct, p, ot, alpha, NV, 4, skip);
    else if (dv - ct <= 8 && MR > 8) values_group(a, vb, nk, ct, p, ot, alpha, NV, 8, skip);
    else values_group(a, vb, nk, ct, p, ot, alpha, NV, MR, skip);
}

/* The options on a block of scores s[j][.], j < nk (gml_flash_score's
 * operations in its order, vectorised): softcap on the dot products (a
 * non-finite one NaN first, when the block is rare), ... */
static ALWAYS_INLINE void softcap_block(const gml_flash_args *a, size_t nk, size_t tile, float *s,
                                        bool rare) {
    if (rare)
        for (size_t i = 0; i < nk * tile; i++)
            if (!isfinite(s[i])) s[i] = NAN;
    const __m512 c = _mm512_set1_ps(a->softcap);
    for (size_t i = 0; i < nk * tile; i += 16)
        _mm512_store_ps(s + i, _mm512_mul_ps(c, vtanh16(_mm512_div_ps(_mm512_load_ps(s + i), c))));
}

/* ... and after the mask, ALiBi: + slope[l] (j - qpos[l]); then -inf before
 * each lane's first key (a window). */
static ALWAYS_INLINE void alibi_window_block(const gml_flash_args *a, size_t j0, size_t nk,
                                             float *s, const int NV) {
    const size_t tile = 16 * (size_t)NV;
    if (a->slope)
        for (size_t j = 0; j < nk; j++) {
            const __m512 jf = _mm512_set1_ps((float)(j0 + j));
            for (int v = 0; v < NV; v++) {
                float *sj = s + j * tile + 16 * (size_t)v;
                const __m512 d = _mm512_sub_ps(jf, _mm512_loadu_ps(a->qpos + 16 * v));
                _mm512_store_ps(sj, _mm512_add_ps(_mm512_load_ps(sj),
                                                  _mm512_mul_ps(_mm512_loadu_ps(a->slope + 16 * v), d)));
            }
        }
    if (a->first_key) {
        int32_t fmax = 0;
        for (size_t i = 0; i < a->nq; i++) fmax = GML_MAX(fmax, a->first_key[i]);
        for (size_t j = 0; j < nk && j0 + j < (size_t)fmax; j++) {
            const __m512i jj = _mm512_set1_epi32((int32_t)(j0 + j));
            for (int v = 0; v < NV; v++) {
                const __mmask16 before =
                    _mm512_cmpgt_epi32_mask(_mm512_loadu_si512(a->first_key + 16 * v), jj);
                float *sj = s + j * tile + 16 * (size_t)v;
                _mm512_store_ps(sj, _mm512_mask_mov_ps(_mm512_load_ps(sj), before,
                                                       _mm512_set1_ps(-INFINITY)));
            }
        }
    }
}

/* r[i] = column i of the 16 x 16 block whose rows r[0..15] are: three
 * rounds of shuffles (unpack ps, unpack pd, 128-bit lane shuffles). */
static ALWAYS_INLINE void transpose16(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) { /* u[4i + k], 128-bit lane q: rows 4i .. 4i+3 at column 4q + k */
#define PD(x) _mm512_castps_pd(x)
        u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(PD(t[4 * i]), PD(t[4 * i + 2])));
        u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(PD(t[4 * i]), PD(t[4 * i + 2])));
        u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(PD(t[4 * i + 1]), PD(t[4 * i + 3])));
        u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(PD(t[4 * i + 1]), PD(t[4 * i + 3])));
#undef PD
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

/* gml_flash_finish's common case in vectors: no sink, every lane < nq with
 * a positive finite sum (no poison) and finite outputs. out[l][c] = ot[c][l]
 * * (1 / sum[l]), the same operations, 16 x 16 blocks transposed in
 * registers (the scalar loop cost 1.7% of C3's flash_attn, 5.6% at T=512).
 * False, nothing decided, when a lane needs gml_flash_finish (which then
 * writes every row again). */
static ALWAYS_INLINE bool finish_vec(const gml_flash_args *a, const __m512 *l, const float *ot,
                                    const int NV) {
    const size_t tile = 16 * (size_t)NV, nq = a->nq, dv = a->dv;
    if (a->sink) return false;
    __m512 inv[2];
    __mmask16 live[2];
    for (int v = 0; v < NV; v++) {
        const size_t n = nq > 16 * (size_t)v ? GML_MIN((size_t)16, nq - 16 * (size_t)v) : 0;
        live[v] = (__mmask16)((1u << n) - 1);
        const __mmask16 ok = _mm512_cmp_ps_mask(l[v], _mm512_setzero_ps(), _CMP_GT_OQ) &
                             _mm512_cmp_ps_mask(l[v], _mm512_set1_ps(INFINITY), _CMP_LT_OQ);
        if ((ok & live[v]) != live[v]) return false;
        inv[v] = _mm512_div_ps(_mm512_set1_ps(1.0f), l[v]);
    }
    /* every output finite first: nothing is written otherwise */
    __mmask16 bad = 0;
    for (size_t c = 0; c < dv; c++)
        for (int v = 0; v < NV; v++) {
            const __m512 x = _mm512_mul_ps(_mm512_load_ps(ot + c * tile + 16 * (size_t)v), inv[v]);
            bad |= _mm512_mask_cmp_ps_mask(live[v], _mm512_abs_ps(x), _mm512_set1_ps(INFINITY),
                                           _CMP_NLT_UQ);
        }
    if (bad) return false;
    for (int v = 0; v < NV; v++)
        for (size_t c0 = 0; c0 < dv; c0 += 16) {
            const size_t nc = GML_MIN((size_t)16, dv - c0);
            __m512 r[16];
            for (size_t i = 0; i < 16; i++)
                r[i] = i < nc ? _mm512_mul_ps(_mm512_load_ps(ot + (c0 + i) * tile + 16 * (size_t)v),
                                              inv[v])
                              : _mm512_setzero_ps();
            transpose16(r);
            const __mmask16 cols = (__mmask16)((1u << nc) - 1);
            for (size_t i = 0; i < 16 && 16 * (size_t)v + i < nq; i++)
                _mm512_mask_storeu_ps(a->out[16 * (size_t)v + i] + c0, cols, r[i]);
        }
    return true;
}

/* NV vectors of lanes, scores MRK keys at a time, values MR columns at a
 * time, key blocks of KB <= GML_FLASH_MAX_KEY_BLOCK keys. */
static ALWAYS_INLINE bool flash_block(const gml_flash_args *a, const int NV, const int MRK,
                                      const int MR, const int KB, const bool SAFE) {
    const size_t tile = 16 * (size_t)NV, nq = a->nq, dv = a->dv;
    const size_t dvp = (dv + (size_t)MR - 1) / (size_t)MR * (size_t)MR;
    float *s = a->work, *ot = s + (size_t)GML_FLASH_MAX_KEY_BLOCK * tile;
    const __m512 neg_inf = _mm512_set1_ps(-INFINITY), zero = _mm512_setzero_ps();
    __m512 m[2], l[2];
    __m512i nkeys[2];
    __mmask16 poison[2] = {0, 0}; /* safe pass: lanes that see a v row with NaN or inf */
    uint8_t skip[GML_FLASH_MAX_KEY_BLOCK];
    for (int v = 0; v < NV; v++) {
        m[v] = neg_inf;
        l[v] = zero;
        nkeys[v] = _mm512_loadu_si512(a->n_keys + 16 * v);
    }
    int32_t nmax = 0, nmin = INT32_MAX;
    for (size_t i = 0; i < nq; i++) {
        nmax = GML_MAX(nmax, a->n_keys[i]);
        nmin = GML_MIN(nmin, a->n_keys[i]);
    }
    for (size_t i = 0; i < dvp * tile; i += 16) _mm512_store_ps(ot + i, zero);

    for (size_t j0 = a->key0; j0 < (size_t)nmax; j0 += (size_t)KB) {
        const size_t nk = GML_MIN((size_t)KB, (size_t)nmax - j0);
        const float *kb, *vb; /* rows j0 .. j0 + nk - 1, converted when typed */
        gml_flash_kv_rows(a, j0, nk, &kb, &vb);
        const size_t nkp = (nk + (size_t)MRK - 1) / (size_t)MRK * (size_t)MRK;
        __m512 smax[2];
        const bool rare = scores(a, kb, j0, nk, nkp, (size_t)nmax - 1, s, smax, NV, MRK);
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
                for (size_t j = 0; j < nk; j++) s[j * tile + i] = gml_visible_score(s[j * tile + i]);
        alibi_window_block(a, j0, nk, s, NV);
        if (j0 + nk > (size_t)nmin) /* some lane's keys end in this block */
            for (size_t j = 0; j < nk; j++) {
                const __m512i jj = _mm512_set1_epi32((int32_t)(j0 + j));
                for (int v = 0; v < NV; v++) {
                    const __mmask16 past = _mm512_cmpge_epi32_mask(jj, nkeys[v]);
                    float *sj = s + j * tile + 16 * (size_t)v;
                    _mm512_store_ps(sj, _mm512_mask_mov_ps(_mm512_load_ps(sj), past, neg_inf));
                }
            }

        if (SAFE) /* v rows with a NaN or inf: skipped, their lanes NaN */
            for (size_t j = 0; j < nk; j++) {
                const float *vr = vb + j * a->ldv;
                float z = 0;
                for (size_t c = 0; c < dv; c++) z += vr[c] * 0.0f; /* NaN iff one is not finite */
                skip[j] = z != z;
                if (skip[j])
                    for (int v = 0; v < NV; v++)
                        poison[v] |= _mm512_cmp_ps_mask(_mm512_load_ps(s + j * tile + 16 * (size_t)v),
                                                        neg_inf, _CMP_NEQ_UQ);
            }

        /* online softmax. NaN scores are passed over by the max (max_ps
         * returns its second operand) and make their lane NaN through exp.
         * exp without subnormals (vexp16_nonpos, as vexp16_nosub): terms
         * below 2^-125.5 are +0, else the scores of a real model (spread
         * over more than 87) make millions of subnormals, each a microcode
         * assist on Intel. Without masks or options the block's max comes
         * from the score registers (no pass over s). */
        __m512 base[2], alpha[2];
        __mmask16 moved = 0;
        for (int v = 0; v < NV; v++) {
            __m512 bmax = plain ? smax[v] : neg_inf;
            if (!plain)
                for (size_t j = 0; j < nk; j++)
                    bmax = _mm512_max_ps(_mm512_load_ps(s + j * tile + 16 * (size_t)v), bmax);
            const __m512 mnew = _mm512_max_ps(bmax, m[v]);
            /* a lane that has seen no key yet takes exp(s - 0): every term 0 */
            const __mmask16 none = _mm512_cmp_ps_mask(mnew, neg_inf, _CMP_EQ_OQ);
            base[v] = _mm512_mask_blend_ps(none, mnew, zero);
            alpha[v] = vexp16_nonpos(_mm512_sub_ps(m[v], base[v])); /* 0 while m is -inf */
            moved |= _mm512_cmp_ps_mask(alpha[v], _mm512_set1_ps(1.0f), _CMP_NEQ_UQ);
            m[v] = mnew;
        }
        for (int v = 0; v < NV; v++) {
            __m512 acc = zero;
            for (size_t j = 0; j < nk; j++) {
                float *sj = s + j * tile + 16 * (size_t)v;
                const __m512 e = vexp16_nonpos(_mm512_sub_ps(_mm512_load_ps(sj), base[v]));
                _mm512_store_ps(sj, e);
                acc = _mm512_add_ps(acc, e);
            }
            l[v] = _mm512_fmadd_ps(l[v], alpha[v], acc);
        }
        /* where the max grew in some lane, what it weighted is rescaled as
         * the value loop loads it */
        values(a, vb, nk, s, ot, moved ? alpha : NULL, NV, MR, SAFE ? skip : NULL);
    }

    /* out = ot / l (gml_flash_finish: zeros where no key was seen, NaN
     * where l is, the rare lanes with a NaN or inf in v recomputed) */
    if (!SAFE && finish_vec(a, l, ot, NV)) return true;
    float sum[32], mx[32];
    for (int v = 0; v < NV; v++) {
        _mm512_storeu_ps(sum + 16 * v, _mm512_mask_mov_ps(l[v], poison[v], _mm512_set1_ps(NAN)));
        _mm512_storeu_ps(mx + 16 * v, m[v]);
    }
    return gml_flash_finish(a, tile, sum, mx, ot, SAFE);
}

/* A lane whose output came out NaN or inf though its sum is finite: a v
 * row with NaN or inf, hidden (0 * NaN) or not. The block is computed again
 * with those rows skipped and the lanes that see them NaN: the others get
 * bitwise what they got (but for the sign of a zero). */
static ALWAYS_INLINE void flash(const gml_flash_args *a, const int NV, const int MRK, const int MR,
                                const int KB) {
    if (!flash_block(a, NV, MRK, MR, KB, false)) flash_block(a, NV, MRK, MR, KB, true);
}

void gml_f32_flash_ukernel__avx512_x32(const gml_flash_args *a) { flash(a, 2, 8, 8, 64); }

void gml_f32_flash_ukernel__avx512_x16(const gml_flash_args *a) { flash(a, 1, 16, 16, 64); }

/* ---- decoding (ops/flash_dec.h): lanes over d ------------------------------
 * q . k_j: the rows' accumulators take 16 elements of k_j at a time (one
 * load, converted in registers, for every row), then each is summed across
 * its lanes (_mm512_reduce_add_ps). o_l += p v_j: 32 columns of every row's
 * o in registers while the block's keys go by, each V load shared by the
 * rows. A tail of d is loaded through a zeroed buffer (q and o are zero past
 * d, so the padding adds zeros). */
#include "flash_dec.h"

#include <string.h>

/* 16 elements of a row of type t from element d (n < 16: only n, zeros after). */
static ALWAYS_INLINE __m512 dec_load16(gml_type t, const char *row, size_t d, size_t n) {
    if (t == GML_F32) {
        const float *f = (const float *)(const void *)row + d;
        return n >= 16 ? _mm512_loadu_ps(f) : _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), f);
    }
    const uint16_t *h = (const uint16_t *)(const void *)row + d;
    __m256i x;
    if (n >= 16) {
        x = _mm256_loadu_si256((const __m256i *)(const void *)h);
    } else {
        uint16_t buf[16] = {0};
        memcpy(buf, h, n * sizeof *h);
        x = _mm256_loadu_si256((const __m256i *)(const void *)buf);
    }
    if (t == GML_F16) return _mm512_cvtph_ps(x);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));
}

/* The sums of the lanes of a, b, c, d, as [a b c d]: the halves added,
 * then pairs by hadd (one order, every time). */
static ALWAYS_INLINE __m128 dec_hsum4(__m512 a, __m512 b, __m512 c, __m512 d) {
#define HALF(x) _mm256_add_ps(_mm512_castps512_ps256(x), \
                              _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)))
    const __m256 ab = _mm256_hadd_ps(HALF(a), HALF(b)), cd = _mm256_hadd_ps(HALF(c), HALF(d));
#undef HALF
    const __m256 abcd = _mm256_hadd_ps(ab, cd);
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

/* Keys 4 at a time (past nk: the last key again, its sums dropped) against
 * rows l0 .. l0 + ng - 1 (ng <= 4): 16 accumulators, each k and q load used
 * four times. */
static ALWAYS_INLINE void dec_dots_t(const gml_flash_dec_args *a, size_t jb, size_t nk, float *s,
                                     const gml_type T) {
    const size_t nq = a->nq, dk = a->dk, k_bytes = dk * (T == GML_F32 ? 4 : 2);
    for (size_t l0 = 0; l0 < nq; l0 += 4) {
        const size_t ng = GML_MIN((size_t)4, nq - l0);
        const float *q0 = a->q + l0 * a->ldq;
        for (size_t jj = 0; jj < nk; jj += 4) {
            const char *kr[4];
            for (size_t t = 0; t < 4; t++) kr[t] = a->k + (jb - a->j0 + GML_MIN(jj + t, nk - 1)) * a->k_row;
            if (l0 == 0)
                for (size_t t = 0; t < 4; t++)
                    dec_prefetch_row(kr[0] + (GML_DEC_PREFETCH_AHEAD + t) * a->k_row, k_bytes);
            __m512 acc[4][4];
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++)
#pragma GCC unroll 4
                for (int l = 0; l < 4; l++) acc[t][l] = _mm512_setzero_ps();
            for (size_t d = 0; d < dk; d += 16) {
                __m512 qv[4];
#pragma GCC unroll 4
                for (size_t l = 0; l < 4; l++)
                    qv[l] = l < ng ? _mm512_load_ps(q0 + l * a->ldq + d) : _mm512_setzero_ps();
#pragma GCC unroll 4
                for (int t = 0; t < 4; t++) {
                    const __m512 kv = dec_load16(T, kr[t], d, dk - d);
#pragma GCC unroll 4
                    for (size_t l = 0; l < 4; l++)
                        if (l < ng) acc[t][l] = _mm512_fmadd_ps(kv, qv[l], acc[t][l]);
                }
            }
            float sums[4][4];
#pragma GCC unroll 4
            for (size_t l = 0; l < 4; l++)
                if (l < ng) _mm_storeu_ps(sums[l], dec_hsum4(acc[0][l], acc[1][l], acc[2][l], acc[3][l]));
            for (size_t l = 0; l < ng; l++)
                for (size_t t = 0; t < 4 && jj + t < nk; t++)
                    s[(l0 + l) * GML_FLASH_DEC_KEY_BLOCK + jj + t] = sums[l][t];
        }
    }
}

static void dec_dots(const gml_flash_dec_args *a, size_t jb, size_t nk, float *s) {
    switch (a->k_type) {
    case GML_F16: dec_dots_t(a, jb, nk, s, GML_F16); break;
    case GML_BF16: dec_dots_t(a, jb, nk, s, GML_BF16); break;
    default: dec_dots_t(a, jb, nk, s, GML_F32); break;
    }
}

static void dec_cap(const gml_flash_dec_args *a, size_t n, float *x) {
    const __m512 c = _mm512_set1_ps(a->softcap), nan = _mm512_set1_ps(NAN),
                 inf = _mm512_set1_ps(INFINITY);
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 live = (__mmask16)(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1);
        const __m512 v = _mm512_maskz_loadu_ps(live, x + i);
        const __mmask16 fin = _mm512_cmp_ps_mask(_mm512_abs_ps(v), inf, _CMP_LT_OQ);
        const __m512 t = _mm512_mul_ps(c, vtanh16(_mm512_div_ps(v, c)));
        _mm512_mask_storeu_ps(x + i, live, _mm512_mask_blend_ps(fin, nan, t));
    }
}

static float dec_expsum(size_t n, float *x, float base) {
    const __m512 b = _mm512_set1_ps(base);
    __m512 acc = _mm512_setzero_ps();
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 live = (__mmask16)(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1);
        const __m512 e = vexp16_nosub(
            _mm512_sub_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), live, x + i), b));
        _mm512_mask_storeu_ps(x + i, live, e);
        acc = _mm512_add_ps(acc, e);
    }
    return _mm512_reduce_add_ps(acc);
}

/* o_l[c0 .. c0 + 16 U) += sum_jj p[l][jj] v_jj[...] for the rows l < nq <= R
 * seeing key jj: R U accumulators (4 x 4 or 8 x 2), each V load used R times. */
static ALWAYS_INLINE void dec_values_t(const gml_flash_dec_args *a, size_t jb, size_t nk,
                                       const float *p, const uint8_t *bits, const gml_type T,
                                       const int R, const int U) {
    const size_t nq = a->nq, dv = a->dv, v_bytes = dv * (T == GML_F32 ? 4 : 2);
    const uint8_t all = (uint8_t)((1u << nq) - 1);
    for (size_t c0 = 0; c0 < dv; c0 += 16 * (size_t)U) {
        __m512 acc[GML_FLASH_DEC_MAX_ROWS][4];
#pragma GCC unroll 8
        for (int l = 0; l < R; l++)
#pragma GCC unroll 4
            for (int u = 0; u < U; u++)
                acc[l][u] = (size_t)l < nq && c0 + 16 * (size_t)u < a->ldo
                                ? _mm512_load_ps(a->o + (size_t)l * a->ldo + c0 + 16 * (size_t)u)
                                : _mm512_setzero_ps();
        for (size_t jj = 0; jj < nk; jj++) {
            const uint8_t b = bits[jj];
            if (!b) continue; /* no row sees it */
            const char *vr = a->v + (jb - a->j0 + jj) * a->v_row;
            if (c0 == 0) dec_prefetch_row(vr + GML_DEC_PREFETCH_AHEAD * a->v_row, v_bytes);
            __m512 vv[4];
#pragma GCC unroll 4
            for (int u = 0; u < U; u++) {
                const size_t c = c0 + 16 * (size_t)u;
                vv[u] = c < dv ? dec_load16(T, vr, c, dv - c) : _mm512_setzero_ps();
            }
#pragma GCC unroll 8
            for (int l = 0; l < R; l++)
                if ((size_t)l < nq && (b == all || (b >> l & 1))) {
                    const __m512 w = _mm512_set1_ps(p[(size_t)l * GML_FLASH_DEC_KEY_BLOCK + jj]);
#pragma GCC unroll 4
                    for (int u = 0; u < U; u++) acc[l][u] = _mm512_fmadd_ps(w, vv[u], acc[l][u]);
                }
        }
#pragma GCC unroll 8
        for (int l = 0; l < R; l++)
#pragma GCC unroll 4
            for (int u = 0; u < U; u++)
                if ((size_t)l < nq && c0 + 16 * (size_t)u < a->ldo)
                    _mm512_store_ps(a->o + (size_t)l * a->ldo + c0 + 16 * (size_t)u, acc[l][u]);
    }
}

static void dec_values(const gml_flash_dec_args *a, size_t jb, size_t nk, const float *p,
                       const uint8_t *bits) {
    const bool few = a->nq <= 4;
    switch (a->v_type) {
    case GML_F16:
        if (few) dec_values_t(a, jb, nk, p, bits, GML_F16, 4, 4);
        else dec_values_t(a, jb, nk, p, bits, GML_F16, 8, 2);
        break;
    case GML_BF16:
        if (few) dec_values_t(a, jb, nk, p, bits, GML_BF16, 4, 4);
        else dec_values_t(a, jb, nk, p, bits, GML_BF16, 8, 2);
        break;
    default:
        if (few) dec_values_t(a, jb, nk, p, bits, GML_F32, 4, 4);
        else dec_values_t(a, jb, nk, p, bits, GML_F32, 8, 2);
        break;
    }
}

static float dec_max(size_t n, const float *x) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 live = (__mmask16)(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1);
        m = _mm512_max_ps(m, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), live, x + i));
    }
    return _mm512_reduce_max_ps(m);
}

void gml_f32_flash_dec_ukernel__avx512_d16(const gml_flash_dec_args *a) {
    gml_flash_dec_run(a, dec_dots, dec_cap, dec_expsum, dec_max, dec_values);
}
