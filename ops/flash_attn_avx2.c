/* AVX2+FMA variants of the flash attention micro-kernel (ops/flash_attn.inc):
 * the algorithm of ops/flash_attn_avx512.c (read its comment) on ymm
 * registers, query rows along the lanes of NV of them (16 rows; the 8-row
 * variant went with the decode kernels, which take up to 8 rows). */
#include "ukernels.h"
#include "vexp_x86.h"
#include "vunary_x86.h"

#include <immintrin.h>
#include <limits.h>
#include <math.h>

/* Keys a block: a multiple of the 6 keys the x16 scores loop takes at a
 * time (64 computed 66, 3% for nothing), and K, V, the scores, q^T and o
 * of a block (40 KiB at d = 64) fit a 48 KiB L1. */
#define KEY_BLOCK 48

#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

/* vexp8_nosub of x <= 0, -inf or NaN (s - max and m - max of the online
 * softmax), bitwise: no such lane reaches its upper clamp; a lane with n <=
 * -126 (below the lower clamp, -inf included) is +0 either way; and for n in
 * [-125, 0] the scaling by 2^n is one exact product, not two (n clamped at
 * -127 first, where 2^n's bits are +0: a flushed lane multiplies 0 by 0, a
 * NaN lane stays NaN). 16 vector operations an exp instead of 24. */
static ALWAYS_INLINE __m256 vexp8_nonpos(__m256 x) {
    __m256 n;
    __m256 p = vexp8_reduce(x, &n);
    p = _mm256_and_ps(p, _mm256_cmp_ps(n, _mm256_set1_ps(-126.0f), _CMP_NLE_UQ));
    const __m256i ni = _mm256_cvtps_epi32(_mm256_max_ps(n, _mm256_set1_ps(-127.0f)));
    return _mm256_mul_ps(p, pow2i(ni));
}

/* s[j][.] for j < nkp (a multiple of MR); key rows past last read as last;
 * bmax[8 v ..] the max of the scores of keys j < nk (as the AVX-512
 * variant's). True if a score is NaN or at least 2^102 in magnitude (as the AVX-512
 * variant's). */
static ALWAYS_INLINE bool scores(const gml_flash_args *a, const float *kb, size_t j0, size_t nk,
                                 size_t nkp, size_t last, float *s, float *bmax, const int NV,
                                 const int MR) {
    const size_t tile = 8 * (size_t)NV, dk = a->dk;
    const __m256 big = _mm256_set1_ps(0x1p102f);
    const __m256 abs_bits = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 rare = _mm256_setzero_ps();
    for (int v = 0; v < NV; v++) _mm256_store_ps(bmax + 8 * v, _mm256_set1_ps(-INFINITY));
    for (size_t jt = 0; jt < nkp; jt += (size_t)MR) {
        const float *kr[12];
#pragma GCC unroll 12
        for (int r = 0; r < MR; r++) kr[r] = kb + (GML_MIN(j0 + jt + (size_t)r, last) - j0) * a->ldk;
        __m256 acc[12][2];
#pragma GCC unroll 12
        for (int r = 0; r < MR; r++)
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) acc[r][v] = _mm256_setzero_ps();
#pragma GCC unroll 4
        for (size_t d = 0; d < dk; d++) {
            __m256 b[2];
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) b[v] = _mm256_load_ps(a->qt + d * tile + 8 * (size_t)v);
#pragma GCC unroll 12
            for (int r = 0; r < MR; r++) {
                const __m256 x = _mm256_broadcast_ss(kr[r] + d);
#pragma GCC unroll 2
                for (int v = 0; v < NV; v++) acc[r][v] = _mm256_fmadd_ps(x, b[v], acc[r][v]);
            }
        }
#pragma GCC unroll 12
        for (int r = 0; r < MR; r++)
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) {
                rare = _mm256_or_ps(rare, _mm256_cmp_ps(_mm256_and_ps(acc[r][v], abs_bits), big,
                                                        _CMP_NLT_UQ));
                _mm256_store_ps(s + (jt + (size_t)r) * tile + 8 * (size_t)v, acc[r][v]);
                if (jt + (size_t)r < nk)
                    _mm256_store_ps(bmax + 8 * v,
                                    _mm256_max_ps(acc[r][v], _mm256_load_ps(bmax + 8 * v)));
            }
    }
    return _mm256_movemask_ps(rare) != 0;
}

/* ot[c][.] = ot[c][.] alpha[.] (alpha NULL: as it is) + sum_{j < nk} v[j][c]
 * p[j][.] for c in [ct, ct + MR); columns past dv read column dv - 1 (their
 * rows of ot are padding). */
static ALWAYS_INLINE void values_group(const gml_flash_args *a, const float *vb, size_t nk,
                                       size_t ct, const float *p, float *ot, const float *alpha,
                                       const int NV, const int MR, const uint8_t *skip) {
    const size_t tile = 8 * (size_t)NV, dv = a->dv;
    size_t off[12];
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) off[r] = GML_MIN(ct + (size_t)r, dv - 1);
    __m256 acc[12][2];
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) {
            acc[r][v] = _mm256_load_ps(ot + (ct + (size_t)r) * tile + 8 * (size_t)v);
            if (alpha) acc[r][v] = _mm256_mul_ps(acc[r][v], _mm256_load_ps(alpha + 8 * v));
        }
    const float *vr = vb;
    for (size_t j = 0; j < nk; j++, vr += a->ldv) {
        if (skip && skip[j]) continue; /* a v row with NaN or inf (safe pass) */
        __m256 w[2];
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) w[v] = _mm256_load_ps(p + j * tile + 8 * (size_t)v);
#pragma GCC unroll 12
        for (int r = 0; r < MR; r++) {
            const __m256 x = _mm256_broadcast_ss(vr + off[r]);
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) acc[r][v] = _mm256_fmadd_ps(x, w[v], acc[r][v]);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++)
            _mm256_store_ps(ot + (ct + (size_t)r) * tile + 8 * (size_t)v, acc[r][v]);
}

/* Every column c < dv: groups of MR, then the last few columns in a group
 * of 2, 4 (or MR) (d_v = 64 in groups of 6 computed 66: 3% for nothing). */
static ALWAYS_INLINE void values(const gml_flash_args *a, const float *vb, size_t nk,
                                 const float *p, float *ot, const float *alpha, const int NV,
                                 const int MR, const uint8_t *skip) {
    const size_t dv = a->dv;
    size_t ct = 0;
    for (; ct + (size_t)MR <= dv; ct += (size_t)MR)
        values_group(a, vb, nk, ct, p, ot, alpha, NV, MR, skip);
    if (ct == dv) return;
    if (dv - ct <= 2) values_group(a, vb, nk, ct, p, ot, alpha, NV, 2, skip);
    else if (dv - ct <= 4) values_group(a, vb, nk, ct, p, ot, alpha, NV, 4, skip);
    else values_group(a, vb, nk, ct, p, ot, alpha, NV, MR, skip);
}

/* The options on a block of scores, as the AVX-512 variant's: softcap on
 * the dot products (a non-finite one NaN first, when the block is rare), ... */
static ALWAYS_INLINE void softcap_block(const gml_flash_args *a, size_t nk, size_t tile, float *s,
                                        bool rare) {
    if (rare)
        for (size_t i = 0; i < nk * tile; i++)
            if (!isfinite(s[i])) s[i] = NAN;
    const __m256 c = _mm256_set1_ps(a->softcap);
    for (size_t i = 0; i < nk * tile; i += 8)
        _mm256_store_ps(s + i, _mm256_mul_ps(c, vtanh8(_mm256_div_ps(_mm256_load_ps(s + i), c))));
}

/* ... and after the mask, ALiBi: + slope[l] (j - qpos[l]); then -inf before
 * each lane's first key (a window). */
static ALWAYS_INLINE void alibi_window_block(const gml_flash_args *a, size_t j0, size_t nk,
                                             float *s, const int NV) {
    const size_t tile = 8 * (size_t)NV;
    if (a->slope)
        for (size_t j = 0; j < nk; j++) {
            const __m256 jf = _mm256_set1_ps((float)(j0 + j));
            for (int v = 0; v < NV; v++) {
                float *sj = s + j * tile + 8 * (size_t)v;
                const __m256 d = _mm256_sub_ps(jf, _mm256_loadu_ps(a->qpos + 8 * v));
                _mm256_store_ps(sj, _mm256_add_ps(_mm256_load_ps(sj),
                                                  _mm256_mul_ps(_mm256_loadu_ps(a->slope + 8 * v), d)));
            }
        }
    if (a->first_key) {
        int32_t fmax = 0;
        for (size_t i = 0; i < a->nq; i++) fmax = GML_MAX(fmax, a->first_key[i]);
        for (size_t j = 0; j < nk && j0 + j < (size_t)fmax; j++) {
            const __m256i jj = _mm256_set1_epi32((int32_t)(j0 + j));
            for (int v = 0; v < NV; v++) {
                const __m256i fk = _mm256_loadu_si256((const __m256i *)(const void *)(a->first_key + 8 * v));
                const __m256 before = _mm256_castsi256_ps(_mm256_cmpgt_epi32(fk, jj));
                float *sj = s + j * tile + 8 * (size_t)v;
                _mm256_store_ps(sj, _mm256_blendv_ps(_mm256_load_ps(sj), _mm256_set1_ps(-INFINITY),
                                                     before));
            }
        }
    }
}

/* r[i] = column i of the 8 x 8 block whose rows r[0..7] are. */
static ALWAYS_INLINE void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) { /* u[i + c] lane L: column 4L + c of rows i .. i + 3 */
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int c = 0; c < 4; c++) {
        r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
        r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
    }
}

/* gml_flash_finish's common case in vectors, as the AVX-512 variant's: no
 * sink, every lane < nq with a positive finite sum and finite outputs;
 * out[l][c] = ot[c][l] * (1 / sum[l]), 8 x 8 blocks transposed in
 * registers, the last dv % 8 columns one by one (the same products). False,
 * nothing decided, when a lane needs gml_flash_finish. */
static ALWAYS_INLINE bool finish_vec(const gml_flash_args *a, const __m256 *l, const float *ot,
                                    const int NV) {
    const size_t tile = 8 * (size_t)NV, nq = a->nq, dv = a->dv;
    if (a->sink) return false;
    const __m256 abs_bits = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 inf = _mm256_set1_ps(INFINITY);
    float inv[16] __attribute__((aligned(32)));
    __m256 iv[2];
    int live[2];
    for (int v = 0; v < NV; v++) {
        const __m256 ok = _mm256_and_ps(_mm256_cmp_ps(l[v], _mm256_setzero_ps(), _CMP_GT_OQ),
                                        _mm256_cmp_ps(l[v], inf, _CMP_LT_OQ));
        const size_t n = nq > 8 * (size_t)v ? GML_MIN((size_t)8, nq - 8 * (size_t)v) : 0;
        live[v] = (1 << n) - 1;
        if ((_mm256_movemask_ps(ok) & live[v]) != live[v]) return false;
        iv[v] = _mm256_div_ps(_mm256_set1_ps(1.0f), l[v]);
        _mm256_store_ps(inv + 8 * v, iv[v]);
    }
    /* every output finite first: nothing is written otherwise (lanes >= nq
     * may hold anything) */
    __m256 bad[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (size_t c = 0; c < dv; c++)
        for (int v = 0; v < NV; v++) {
            const __m256 x = _mm256_mul_ps(_mm256_load_ps(ot + c * tile + 8 * (size_t)v), iv[v]);
            bad[v] = _mm256_or_ps(bad[v], _mm256_cmp_ps(_mm256_and_ps(x, abs_bits), inf,
                                                        _CMP_NLT_UQ));
        }
    for (int v = 0; v < NV; v++)
        if (_mm256_movemask_ps(bad[v]) & live[v]) return false;
    const size_t dv8 = dv / 8 * 8;
    for (int v = 0; v < NV; v++)
        for (size_t c0 = 0; c0 < dv8; c0 += 8) {
            __m256 r[8];
            for (size_t i = 0; i < 8; i++)
                r[i] = _mm256_mul_ps(_mm256_load_ps(ot + (c0 + i) * tile + 8 * (size_t)v), iv[v]);
            transpose8(r);
            for (size_t i = 0; i < 8 && 8 * (size_t)v + i < nq; i++)
                _mm256_storeu_ps(a->out[8 * (size_t)v + i] + c0, r[i]);
        }
    for (size_t q = 0; q < nq; q++)
        for (size_t c = dv8; c < dv; c++) a->out[q][c] = ot[c * tile + q] * inv[q];
    return true;
}

static ALWAYS_INLINE bool flash_block(const gml_flash_args *a, const int NV, const int MR,
                                      const bool SAFE) {
    const size_t tile = 8 * (size_t)NV, nq = a->nq, dv = a->dv;
    const size_t dvp = (dv + (size_t)MR - 1) / (size_t)MR * (size_t)MR;
    float *s = a->work, *ot = s + (size_t)GML_FLASH_MAX_KEY_BLOCK * tile;
    const __m256 neg_inf = _mm256_set1_ps(-INFINITY), zero = _mm256_setzero_ps(),
                 one = _mm256_set1_ps(1.0f);
    __m256 m[2], l[2], poison[2]; /* poison, safe pass: lanes that see a bad v row */
    __m256i nkeys[2];
    uint8_t skip[KEY_BLOCK];
    for (int v = 0; v < NV; v++) {
        poison[v] = zero;
        m[v] = neg_inf;
        l[v] = zero;
        nkeys[v] = _mm256_loadu_si256((const __m256i *)(const void *)(a->n_keys + 8 * v));
    }
    int32_t nmax = 0, nmin = INT32_MAX;
    for (size_t i = 0; i < nq; i++) {
        nmax = GML_MAX(nmax, a->n_keys[i]);
        nmin = GML_MIN(nmin, a->n_keys[i]);
    }
    for (size_t i = 0; i < dvp * tile; i += 8) _mm256_store_ps(ot + i, zero);

    for (size_t j0 = a->key0; j0 < (size_t)nmax; j0 += KEY_BLOCK) {
        const size_t nk = GML_MIN((size_t)KEY_BLOCK, (size_t)nmax - j0);
        const float *kb, *vb; /* rows j0 .. j0 + nk - 1, converted when typed */
        gml_flash_kv_rows(a, j0, nk, &kb, &vb);
        const size_t nkp = (nk + (size_t)MR - 1) / (size_t)MR * (size_t)MR;
        float smax[16] __attribute__((aligned(32)));
        const bool rare = scores(a, kb, j0, nk, nkp, (size_t)nmax - 1, s, smax, NV, MR);
        /* smax holds the block's max unless something below changes scores */
        const bool plain = !rare && !a->mask && !(a->softcap > 0) && !a->slope && !a->first_key &&
                           j0 + nk <= (size_t)nmin;
        if (a->softcap > 0) softcap_block(a, nk, tile, s, rare);

        /* the mask first, then -inf past each lane's keys (as the AVX-512
         * variant: a hidden key stays hidden whatever the mask holds; scores
         * under 2^102 take a plain add, the rare others gml_masked_score or
         * gml_visible_score) */
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
                const __m256i jj1 = _mm256_set1_epi32((int32_t)(j0 + j + 1));
                for (int v = 0; v < NV; v++) { /* j >= n_keys, as j + 1 > n_keys */
                    const __m256 past = _mm256_castsi256_ps(_mm256_cmpgt_epi32(jj1, nkeys[v]));
                    float *sj = s + j * tile + 8 * (size_t)v;
                    _mm256_store_ps(sj, _mm256_blendv_ps(_mm256_load_ps(sj), neg_inf, past));
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
                        poison[v] = _mm256_or_ps(
                            poison[v], _mm256_cmp_ps(_mm256_load_ps(s + j * tile + 8 * (size_t)v),
                                                     neg_inf, _CMP_NEQ_UQ));
            }

        /* online softmax, as the AVX-512 variant */
        __m256 base[2], alpha[2];
        float alpha_f[16] __attribute__((aligned(32)));
        int moved = 0;
        for (int v = 0; v < NV; v++) {
            __m256 bmax = plain ? _mm256_load_ps(smax + 8 * v) : neg_inf;
            if (!plain)
                for (size_t j = 0; j < nk; j++)
                    bmax = _mm256_max_ps(_mm256_load_ps(s + j * tile + 8 * (size_t)v), bmax);
            const __m256 mnew = _mm256_max_ps(bmax, m[v]);
            const __m256 none = _mm256_cmp_ps(mnew, neg_inf, _CMP_EQ_OQ);
            base[v] = _mm256_blendv_ps(mnew, zero, none);
            alpha[v] = vexp8_nonpos(_mm256_sub_ps(m[v], base[v])); /* 0 while m is -inf */
            moved |= _mm256_movemask_ps(_mm256_cmp_ps(alpha[v], one, _CMP_NEQ_UQ));
            _mm256_store_ps(alpha_f + 8 * v, alpha[v]);
            m[v] = mnew;
        }
        for (int v = 0; v < NV; v++) {
            __m256 acc = zero;
            for (size_t j = 0; j < nk; j++) {
                float *sj = s + j * tile + 8 * (size_t)v;
                const __m256 e = vexp8_nonpos(_mm256_sub_ps(_mm256_load_ps(sj), base[v]));
                _mm256_store_ps(sj, e);
                acc = _mm256_add_ps(acc, e);
            }
            l[v] = _mm256_fmadd_ps(l[v], alpha[v], acc);
        }
        /* where the max grew in some lane, what it weighted is rescaled as
         * the value loop loads it */
        values(a, vb, nk, s, ot, moved ? alpha_f : NULL, NV, MR, SAFE ? skip : NULL);
    }

    /* out = ot / l (gml_flash_finish: zeros where no key was seen, NaN
     * where l is, the rare lanes with a NaN or inf in v recomputed) */
    if (!SAFE && finish_vec(a, l, ot, NV)) return true;
    float sum[16], mx[16];
    for (int v = 0; v < NV; v++) {
        _mm256_storeu_ps(sum + 8 * v, _mm256_blendv_ps(l[v], _mm256_set1_ps(NAN), poison[v]));
        _mm256_storeu_ps(mx + 8 * v, m[v]);
    }
    return gml_flash_finish(a, tile, sum, mx, ot, SAFE);
}

/* A lane NaN or inf though its sum is finite: computed again, as the
 * AVX-512 variant does. */
static ALWAYS_INLINE void flash(const gml_flash_args *a, const int NV, const int MR) {
    if (!flash_block(a, NV, MR, false)) flash_block(a, NV, MR, true);
}

void gml_f32_flash_ukernel__avx2_x16(const gml_flash_args *a) { flash(a, 2, 6); }

/* ---- decoding (ops/flash_dec.h): lanes over d ------------------------------
 * The AVX-512 variant's loops (ops/flash_attn_avx512.c) on 8 lanes; o_l
 * takes 8 columns at a time (16 ymm are too few for more). */
#include "flash_dec.h"

#include <string.h>

/* 8 elements of a row of type t from element d (n < 8: only n, zeros after). */
static ALWAYS_INLINE __m256 dec_load8(gml_type t, const char *row, size_t d, size_t n) {
    if (t == GML_F32) {
        const float *f = (const float *)(const void *)row + d;
        if (n >= 8) return _mm256_loadu_ps(f);
        float buf[8] = {0};
        memcpy(buf, f, n * sizeof *f);
        return _mm256_loadu_ps(buf);
    }
    const uint16_t *h = (const uint16_t *)(const void *)row + d;
    __m128i x;
    if (n >= 8) {
        x = _mm_loadu_si128((const __m128i *)(const void *)h);
    } else {
        uint16_t buf[8] = {0};
        memcpy(buf, h, n * sizeof *h);
        x = _mm_loadu_si128((const __m128i *)(const void *)buf);
    }
    if (t == GML_F16) return _mm256_cvtph_ps(x);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16));
}

/* lanes 0..7 summed: (0+4, 1+5, 2+6, 3+7), then pairs, then the two. */
static ALWAYS_INLINE float dec_hsum8(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
}

/* The sums of the lanes of a, b, c, d, as [a b c d] (hadd pairs, then the
 * halves: one order, every time). */
static ALWAYS_INLINE __m128 dec_hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
    const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

/* Keys 4 at a time (past nk: the last key again, its sums dropped) against
 * rows l0, l0 + 1: 8 accumulators, each k load used twice, each q load four
 * times. */
static ALWAYS_INLINE void dec_dots_t(const gml_flash_dec_args *a, size_t jb, size_t nk, float *s,
                                     const gml_type T) {
    const size_t nq = a->nq, dk = a->dk, k_bytes = dk * (T == GML_F32 ? 4 : 2);
    for (size_t l0 = 0; l0 < nq; l0 += 2) {
        const bool two = l0 + 1 < nq;
        const float *q0 = a->q + l0 * a->ldq, *q1 = two ? q0 + a->ldq : q0;
        for (size_t jj = 0; jj < nk; jj += 4) {
            const char *kr[4];
            for (size_t t = 0; t < 4; t++) kr[t] = a->k + (jb - a->j0 + GML_MIN(jj + t, nk - 1)) * a->k_row;
            if (l0 == 0)
                for (size_t t = 0; t < 4; t++)
                    dec_prefetch_row(kr[0] + (GML_DEC_PREFETCH_AHEAD + t) * a->k_row, k_bytes);
            __m256 acc0[4], acc1[4];
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++) acc0[t] = acc1[t] = _mm256_setzero_ps();
            for (size_t d = 0; d < dk; d += 8) {
                const __m256 qa = _mm256_load_ps(q0 + d), qb = _mm256_load_ps(q1 + d);
#pragma GCC unroll 4
                for (int t = 0; t < 4; t++) {
                    const __m256 kv = dec_load8(T, kr[t], d, dk - d);
                    acc0[t] = _mm256_fmadd_ps(kv, qa, acc0[t]);
                    acc1[t] = _mm256_fmadd_ps(kv, qb, acc1[t]);
                }
            }
            float sums[2][4];
            _mm_storeu_ps(sums[0], dec_hsum4(acc0[0], acc0[1], acc0[2], acc0[3]));
            _mm_storeu_ps(sums[1], dec_hsum4(acc1[0], acc1[1], acc1[2], acc1[3]));
            for (size_t l = 0; l < (two ? 2u : 1u); l++)
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
    const __m256 c = _mm256_set1_ps(a->softcap), inf = _mm256_set1_ps(INFINITY);
    const __m256 abs_bits = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256 fin = _mm256_cmp_ps(_mm256_and_ps(v, abs_bits), inf, _CMP_LT_OQ);
        const __m256 t = _mm256_mul_ps(c, vtanh8(_mm256_div_ps(v, c)));
        _mm256_storeu_ps(x + i, _mm256_blendv_ps(_mm256_set1_ps(NAN), t, fin));
    }
    if (i < n) {
        float buf[8] = {0};
        memcpy(buf, x + i, (n - i) * sizeof *x);
        const __m256 v = _mm256_loadu_ps(buf);
        const __m256 fin = _mm256_cmp_ps(_mm256_and_ps(v, abs_bits), inf, _CMP_LT_OQ);
        const __m256 t = _mm256_mul_ps(c, vtanh8(_mm256_div_ps(v, c)));
        _mm256_storeu_ps(buf, _mm256_blendv_ps(_mm256_set1_ps(NAN), t, fin));
        memcpy(x + i, buf, (n - i) * sizeof *x);
    }
}

static float dec_expsum(size_t n, float *x, float base) {
    const __m256 b = _mm256_set1_ps(base);
    __m256 acc = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = vexp8_nosub(_mm256_sub_ps(_mm256_loadu_ps(x + i), b));
        _mm256_storeu_ps(x + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    if (i < n) {
        float buf[8];
        for (size_t t = 0; t < 8; t++) buf[t] = i + t < n ? x[i + t] : -INFINITY;
        const __m256 e = vexp8_nosub(_mm256_sub_ps(_mm256_loadu_ps(buf), b));
        _mm256_storeu_ps(buf, e);
        memcpy(x + i, buf, (n - i) * sizeof *x);
        acc = _mm256_add_ps(acc, e);
    }
    return dec_hsum8(acc);
}

/* o_l[c0 .. c0 + 8 U) += sum_jj p[l][jj] v_jj[...] for the rows l < nq <= R
 * seeing key jj: R U accumulators (4 x 2 or 8 x 1), each V load used R times. */
static ALWAYS_INLINE void dec_values_t(const gml_flash_dec_args *a, size_t jb, size_t nk,
                                       const float *p, const uint8_t *bits, const gml_type T,
                                       const int R, const int U) {
    const size_t nq = a->nq, dv = a->dv, v_bytes = dv * (T == GML_F32 ? 4 : 2);
    const uint8_t all = (uint8_t)((1u << nq) - 1);
    for (size_t c0 = 0; c0 < dv; c0 += 8 * (size_t)U) {
        __m256 acc[GML_FLASH_DEC_MAX_ROWS][2];
#pragma GCC unroll 8
        for (int l = 0; l < R; l++)
#pragma GCC unroll 2
            for (int u = 0; u < U; u++)
                acc[l][u] = (size_t)l < nq && c0 + 8 * (size_t)u < a->ldo
                                ? _mm256_load_ps(a->o + (size_t)l * a->ldo + c0 + 8 * (size_t)u)
                                : _mm256_setzero_ps();
        for (size_t jj = 0; jj < nk; jj++) {
            const uint8_t b = bits[jj];
            if (!b) continue; /* no row sees it */
            const char *vr = a->v + (jb - a->j0 + jj) * a->v_row;
            if (c0 == 0) dec_prefetch_row(vr + GML_DEC_PREFETCH_AHEAD * a->v_row, v_bytes);
            __m256 vv[2];
#pragma GCC unroll 2
            for (int u = 0; u < U; u++) {
                const size_t c = c0 + 8 * (size_t)u;
                vv[u] = c < dv ? dec_load8(T, vr, c, dv - c) : _mm256_setzero_ps();
            }
#pragma GCC unroll 8
            for (int l = 0; l < R; l++)
                if ((size_t)l < nq && (b == all || (b >> l & 1))) {
                    const __m256 w = _mm256_set1_ps(p[(size_t)l * GML_FLASH_DEC_KEY_BLOCK + jj]);
#pragma GCC unroll 2
                    for (int u = 0; u < U; u++) acc[l][u] = _mm256_fmadd_ps(w, vv[u], acc[l][u]);
                }
        }
#pragma GCC unroll 8
        for (int l = 0; l < R; l++)
#pragma GCC unroll 2
            for (int u = 0; u < U; u++)
                if ((size_t)l < nq && c0 + 8 * (size_t)u < a->ldo)
                    _mm256_store_ps(a->o + (size_t)l * a->ldo + c0 + 8 * (size_t)u, acc[l][u]);
    }
}

static void dec_values(const gml_flash_dec_args *a, size_t jb, size_t nk, const float *p,
                       const uint8_t *bits) {
    const bool few = a->nq <= 4;
    switch (a->v_type) {
    case GML_F16:
        if (few) dec_values_t(a, jb, nk, p, bits, GML_F16, 4, 2);
        else dec_values_t(a, jb, nk, p, bits, GML_F16, 8, 1);
        break;
    case GML_BF16:
        if (few) dec_values_t(a, jb, nk, p, bits, GML_BF16, 4, 2);
        else dec_values_t(a, jb, nk, p, bits, GML_BF16, 8, 1);
        break;
    default:
        if (few) dec_values_t(a, jb, nk, p, bits, GML_F32, 4, 2);
        else dec_values_t(a, jb, nk, p, bits, GML_F32, 8, 1);
        break;
    }
}

static float dec_max(size_t n, const float *x) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
    float r = -INFINITY, buf[8];
    _mm256_storeu_ps(buf, m);
    for (size_t t = 0; t < 8; t++) r = buf[t] > r ? buf[t] : r;
    for (; i < n; i++) r = x[i] > r ? x[i] : r;
    return r;
}

void gml_f32_flash_dec_ukernel__avx2_d8(const gml_flash_dec_args *a) {
    gml_flash_dec_run(a, dec_dots, dec_cap, dec_expsum, dec_max, dec_values);
}
