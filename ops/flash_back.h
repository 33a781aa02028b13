/* The flash attention backward's micro-kernels (ops/flash_attn.inc,
 * GML_F32_FLASH_BACK_UKERNELS): one block of nq <= tile query rows (the
 * lanes) of one (batch, kv head) against its keys, FlashAttention-2's
 * recomputation. For each key block, with s the scores formed as the
 * forward forms them (q scaled, softcap c tanh(dot / c), + mask, + ALiBi;
 * keys a lane does not see: p = 0):
 *
 *     p[j][l]  = exp(s[j][l] - lse[l])                 (the forward's weights)
 *     dp[j][l] = sum_c v[j][c] dot[c][l]               (dO v^T)
 *     ds[j][l] = p (dp - dd[l]) (1 - tanh^2 with a softcap)
 *     dv_acc[j][c] += sum_l p[j][l] dor[l][c]          (P^T dO)
 *     dk_acc[j][d] += sum_l ds[j][l] qr[l][d]          (dS^T (q scale))
 *     dqt[d][l]    += sum_j k[j][d] ds[j][l]           (dS K, unscaled)
 *
 * lanes l, keys j and columns in ascending order, one fixed order of
 * operations per variant: the driver (ops/flash_attn_back.c) gives each
 * (batch, kv head) to one thread, so the sums do not depend on the thread
 * count. A key row with a NaN or inf: kz, kbad below. Lanes >= nq are zeros
 * in qt, qr, dot, dor and dd, with lse +inf: they add nothing. A lane with
 * lse -inf (no key seen) must be given +inf too.
 *
 * The variant first lays out its block's rows (from q_rows, do_rows,
 * o_rows): qr[l][d] = q[l][d] scale (one rounding) and qt its transpose,
 * dor = dO and dot its transpose, and
 *
 *     dd[l] = fma(dO[l][dv-1], O[l][dv-1], ... fma(dO[l][0], O[l][0], 0))
 *
 * (an FMA chain, columns ascending, whatever the ISA: fmaf's bits); and at
 * the end writes dq_rows[l][d] = dqt[d][l] scale (one rounding). */
#ifndef GGMLITE_FLASH_BACK_H
#define GGMLITE_FLASH_BACK_H

#include "ukernels.h"

typedef struct gml_flash_back_args {
    size_t nq, dk, dv;           /* 1 <= nq <= tile */
    const float *const *q_rows;  /* [nq]: q's rows, dk contiguous floats each (not scaled) */
    const float *const *do_rows; /* [nq]: dO's rows, dv contiguous floats each */
    const float *const *o_rows;  /* [nq]: the forward's output O's rows, dv floats each */
    float *const *dq_rows;       /* [nq]: dQ's rows, dk floats each (written) */
    float scale;                 /* q's scale (the forward's) */
    float *qt;                   /* [dk][tile]: q scaled, transposed (written) */
    float *qr;                   /* [tile][dk]: q scaled, by rows (written) */
    float *dot;                  /* [dv][tile]: dO transposed (written) */
    float *dor;                  /* [tile][dv]: dO by rows (written) */
    float *dd;                   /* [tile]: rowsum(dO * O) (written) */
    const float *lse;            /* [tile]: log-sum-exp */
    const float *k, *v;          /* [Tk][dk], [Tk][dv], contiguous f32 */
    /* K's rows for dQ: k itself, or (when some K row holds a NaN or inf,
     * kbad[j] set for those) a copy with those rows zeros, whose products
     * the variants then add lane by lane where ds is not 0: a key a lane
     * does not see (ds 0) adds nothing even when its row is NaN or inf (a
     * padded cache), as in the forward. */
    const float *kz;
    const uint8_t *kbad;
    float *dk_acc, *dv_acc;      /* [Tk][dk], [Tk][dv] */
    float *dqt;                  /* [dk][tile], zeroed by the variant */
    const int32_t *n_keys;       /* [tile]: keys j < n_keys[l]; lanes >= nq 0 */
    const int32_t *first_key;    /* NULL or [tile]: keys j >= first_key[l] (a window) */
    size_t key0;                 /* the first key any lane sees */
    const float *const *mask;    /* NULL or [nq] rows */
    size_t mask_stride;          /* in floats */
    float softcap;               /* > 0: as the forward's */
    const float *slope, *qpos;   /* NULL or [tile]: ALiBi */
    float *work;                 /* GML_FLASH_BACK_WORK_FLOATS(tile) floats, 64-byte aligned */
} gml_flash_back_args;

#define GML_FLASH_BACK_KEY_BLOCK 64
/* s (then p), dp (then ds) and the softcap's tanh of a key block */
#define GML_FLASH_BACK_WORK_FLOATS(tile) (3 * (size_t)GML_FLASH_BACK_KEY_BLOCK * (size_t)(tile))

typedef void gml_f32_flash_back_ukernel(const gml_flash_back_args *a);
#define GML_DECLARE_FLASH_BACK(isa, fn, tile) gml_f32_flash_back_ukernel fn;
GML_F32_FLASH_BACK_UKERNELS(GML_DECLARE_FLASH_BACK)
#undef GML_DECLARE_FLASH_BACK

/* dqt[d][l] += k[j][d] ds[j][l] for the rows j < nk of the key block at j0
 * that kbad marks, lanes l < nq where ds is not 0 (ds[j][l] at ds[j * tile
 * + l]): the bad rows' share, kz having left them out. */
static inline void gml_flash_back_bad_rows(const gml_flash_back_args *a, size_t tile, size_t j0,
                                           size_t nk, const float *ds) {
    if (!a->kbad) return;
    for (size_t j = 0; j < nk; j++) {
        if (!a->kbad[j0 + j]) continue;
        const float *kj = a->k + (j0 + j) * a->dk;
        for (size_t l = 0; l < a->nq; l++) {
            const float w = ds[j * tile + l];
            if (w == 0) continue;
            for (size_t d = 0; d < a->dk; d++) a->dqt[d * tile + l] += kj[d] * w;
        }
    }
}

#endif /* GGMLITE_FLASH_BACK_H */
