/* The backward of fused attention (FlashAttention-2's): from q, k, v, the
 * forward's output and log-sum-exp (flash_attn_lse) and the output's
 * gradient dO, the gradients dQ, dK, dV (and the sinks' when there are
 * sinks), recomputing the weights block by block, never a [Tq, Tk] matrix:
 *
 *     D_i  = sum_c dO[i][c] O[i][c]
 *     P_ij = exp(s_ij - lse_i)      (s_ij as the forward forms it, every option)
 *     dV_j += P_ij dO_i             dP_ij = dO_i . v_j
 *     dS_ij = P_ij (dP_ij - D_i) (1 - tanh^2(dot_ij scale / c) with a softcap)
 *     dQ_i += scale dS_ij k_j       dK_j += scale dS_ij q_i
 *     dsink_h = -sum_{b, i} P_sink(b, h, i) D_i     (P_sink = exp(sink_h - lse))
 *
 * The mask, ALiBi, causality, windows and valid lengths are additive or
 * hide keys: they shape P and get no gradient (the mask is data, not a
 * parameter). GQA/MQA: dK, dV of a kv head sum over its query heads.
 *
 * Determinism: a task is one (batch, kv head); one thread computes it
 * whole, query blocks in order, keys in order (so each dK, dV element is
 * summed over the query rows in one fixed order), and the sinks' partials
 * per (batch, head) are summed over the batch by thread 0 in order: the
 * same bits at every thread count. The result is one f32 vector holding dQ
 * [B, H, Tq, d_k], dK [B, G, Tk, d_k], dV [B, G, Tk, d_v] and dsinks [H],
 * contiguous, one after the other (gml_flash_attn_back_views). */
#include "flash_attn.h"
#include "flash_back.h"

#include <math.h>
#include <string.h>

/* Sources: q, k, v, fwd (flash_attn_lse's [B, H, Tq, d_v + 2]), dout,
 * mask, valid_lens, positions. */
#define B_FWD 3
#define B_DOUT 4
#define B_MASK 5
#define B_LENS 6
#define B_POS 7

typedef struct back_params {
    gml_attn_params attn;
    int32_t sinks; /* 1: the forward had sinks (their weights in fwd), dsinks [H] at the end */
    int32_t pad;
} back_params;
GML_PARAMS_FIT(back_params);

static back_params bparams_of(const gml_tensor *t) {
    back_params p;
    gml_get_params(t, &p, sizeof p);
    return p;
}

typedef struct back_dims {
    int64_t B, H, G, r, Tq, Tk, dk, dv;
    size_t off_dk, off_dv, off_ds; /* in floats */
} back_dims;

static back_dims dims_of(const gml_tensor *dst) {
    const gml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2];
    back_dims d = {q->ne[0], q->ne[1], k->ne[1], q->ne[1] / k->ne[1], q->ne[2], k->ne[2],
                   q->ne[3], v->ne[3], 0, 0, 0};
    d.off_dk = (size_t)(d.B * d.H * d.Tq * d.dk);
    d.off_dv = d.off_dk + (size_t)(d.B * d.G * d.Tk * d.dk);
    d.off_ds = d.off_dv + (size_t)(d.B * d.G * d.Tk * d.dv);
    return d;
}

static inline float f32_at(const gml_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    float f;
    memcpy(&f, gml_ptr(t, i0, i1, i2, i3), sizeof f);
    return f;
}

/* K or V element as a float (f32, f16 or bf16). */
static inline float kv_f(const gml_tensor *t, int64_t b, int64_t g, int64_t j, int64_t c) {
    const char *e = gml_ptr(t, b, g, j, c);
    if (t->type == GML_F32) {
        float f;
        memcpy(&f, e, sizeof f);
        return f;
    }
    uint16_t h;
    memcpy(&h, e, sizeof h);
    return t->type == GML_F16 ? gml_fp16_to_fp32(h) : gml_bf16_to_fp32(h);
}

static void key_range_b(const gml_tensor *dst, const gml_attn_params *par, int64_t b, int64_t i,
                        int64_t *lo, int64_t *hi) {
    gml_attn_key_range(par, dst->src[B_LENS], dst->src[B_POS], b, i, dst->src[0]->ne[2],
                       dst->src[1]->ne[2], lo, hi);
}

static bool back_lens_ok(const gml_compute_params *p, const gml_tensor *dst) {
    return gml_attn_lens_ok(p, "flash_attn_back", dst->src[B_LENS], dst->src[1]->ne[2]);
}

/* thread 0, after every task: dsinks[h] = sum over b in order of part[b][h] */
static void finish_sinks(const gml_compute_params *p, gml_tensor *dst, const back_dims *d,
                         const double *part) {
    gml_barrier(p);
    if (p->ith != 0) return;
    float *out = (float *)dst->data + d->off_ds;
    for (int64_t h = 0; h < d->H; h++) {
        double s = 0;
        for (int64_t b = 0; b < d->B; b++) s += part[b * d->H + h];
        out[h] = (float)s;
    }
}

/* ---- reference kernel ---------------------------------------------------------
 * Per (batch, kv head), split across threads; the rows of its query heads
 * one at a time (position-major, as the fast driver), every key the row
 * sees, in double. Scratch: the sinks' partials [B, H] (shared), then per
 * thread dK and dV accumulators [Tk, d_k + d_v] and a row's dQ [d_k]. */
static size_t ref_thread_doubles(const back_dims *d) {
    return (size_t)(d->Tk * (d->dk + d->dv) + d->dk);
}

static void gml_f32_flash_attn_back__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2];
    const gml_tensor *fwd = dst->src[B_FWD], *dout = dst->src[B_DOUT], *mask = dst->src[B_MASK];
    const back_params bp = bparams_of(dst);
    const gml_attn_params par = bp.attn;
    const back_dims d = dims_of(dst);
    const double scale = par.scale, cap = par.softcap;
    double *part = (double *)p->wdata;
    double *acc_k = part + gml_align_up((size_t)(d.B * d.H), 8) + (size_t)p->ith * ref_thread_doubles(&d);
    double *acc_v = acc_k + d.Tk * d.dk, *dq = acc_v + d.Tk * d.dv;
    if (!back_lens_ok(p, dst)) {
        gml_barrier(p);
        return;
    }
    float *out = (float *)dst->data;
    int64_t t0, t1;
    gml_split(d.B * d.G, p->ith, p->nth, &t0, &t1);
    for (int64_t task = t0; task < t1; task++) {
        const int64_t b = task / d.G, g = task % d.G;
        memset(acc_k, 0, (size_t)(d.Tk * (d.dk + d.dv)) * sizeof(double));
        for (int64_t hh = 0; hh < d.r; hh++) part[b * d.H + g * d.r + hh] = 0;
        for (int64_t row = 0; row < d.r * d.Tq; row++) {
            const int64_t i = row / d.r, h = g * d.r + row % d.r;
            const double lse = f32_at(fwd, b, h, i, d.dv), psink = f32_at(fwd, b, h, i, d.dv + 1);
            double dd = 0;
            for (int64_t c = 0; c < d.dv; c++)
                dd += (double)f32_at(dout, b, h, i, c) * f32_at(fwd, b, h, i, c);
            for (int64_t c = 0; c < d.dk; c++) dq[c] = 0;
            int64_t lo, hi;
            key_range_b(dst, &par, b, i, &lo, &hi);
            if (lse == -INFINITY) lo = hi; /* no key seen: no gradient */
            const double slope = par.alibi > 0 ? gml_alibi_slope(par.alibi, h, d.H) : 0.0;
            const double ip = (double)gml_attn_qpos(&par, dst->src[B_POS], b, i, d.Tq, d.Tk);
            for (int64_t j = lo; j < hi; j++) {
                const float mv = mask ? f32_at(mask, b % mask->ne[0], h % mask->ne[1],
                                               i % mask->ne[2], mask->ne[3] > 1 ? j : 0)
                                      : 0.0f;
                if (mv == -INFINITY) continue;
                double dot = 0, dp = 0;
                for (int64_t c = 0; c < d.dk; c++)
                    dot += (double)f32_at(q, b, h, i, c) * kv_f(k, b, g, j, c);
                double s = dot * scale, t = 0;
                if (cap > 0) {
                    t = tanh(s / cap);
                    s = cap * t;
                }
                s += mv + slope * ((double)j - ip);
                const double pr = exp(s - lse);
                for (int64_t c = 0; c < d.dv; c++)
                    dp += (double)f32_at(dout, b, h, i, c) * kv_f(v, b, g, j, c);
                double ds = pr * (dp - dd);
                if (cap > 0) ds *= 1 - t * t;
                for (int64_t c = 0; c < d.dv; c++) acc_v[j * d.dv + c] += pr * f32_at(dout, b, h, i, c);
                for (int64_t c = 0; c < d.dk; c++) {
                    dq[c] += ds * kv_f(k, b, g, j, c);
                    acc_k[j * d.dk + c] += ds * f32_at(q, b, h, i, c);
                }
            }
            float *dqo = out + ((b * d.H + h) * d.Tq + i) * d.dk;
            for (int64_t c = 0; c < d.dk; c++) dqo[c] = (float)(dq[c] * scale);
            if (bp.sinks && lse != -INFINITY) part[b * d.H + h] -= psink * dd;
        }
        float *dko = out + d.off_dk + (size_t)((b * d.G + g) * d.Tk * d.dk);
        float *dvo = out + d.off_dv + (size_t)((b * d.G + g) * d.Tk * d.dv);
        for (int64_t e = 0; e < d.Tk * d.dk; e++) dko[e] = (float)(acc_k[e] * scale);
        for (int64_t e = 0; e < d.Tk * d.dv; e++) dvo[e] = (float)acc_v[e];
    }
    if (bp.sinks) finish_sinks(p, dst, &d, part);
    else gml_barrier(p);
}

/* ---- fast kernel -----------------------------------------------------------
 * A task is one (batch, kv head) (gml_chunk_next): its K and V read in
 * place where they are contiguous f32 rows, else packed so into the
 * thread's scratch (any strides, f16 and bf16 converted), dK and dV
 * accumulated in place in the result, the query rows of its
 * heads (row = i r + head, as the forward) in blocks of the variant's tile
 * through the micro-kernel, each block's dQ written as it ends. */

typedef struct back_variant {
    gml_f32_flash_back_ukernel *fn;
    size_t tile;
    const char *name;
} back_variant;

#define BACK_ENTRY(isa, fn, tile) {fn, tile, #fn},
static back_variant pick_back(gml_isa isa) {
    static const back_variant list[] = {GML_F32_FLASH_BACK_UKERNELS(BACK_ENTRY)};
    static const gml_isa isas[] = {GML_F32_FLASH_BACK_UKERNELS(GML_UKERNEL_ISA)};
    return list[gml_pick_variant(isa, isas, (int)(sizeof isas / sizeof(gml_isa)))];
}
#undef BACK_ENTRY

#define BACK_TILE_MAX 32
#define FL(n) gml_align_up((size_t)(n), GML_ALIGN / sizeof(float)) /* floats, 64-byte pieces */

/* Per thread, in floats: K, V, K for dQ [Tk, d]; K's bad rows [Tk]
 * (bytes); qt, qr [d_k, tile], dqt
 * [d_k + 16, tile] (the variants' column tiles, padded); dot,
 * dor [d_v, tile]; lse, dd, slope, qpos [tile]; n_keys, first_key [tile]
 * (int32); mask rows, q, dO, O and dQ rows [tile] (pointers, 2 floats
 * each); q, dO, O rows gathered where their elements are not contiguous
 * [tile, d]; the variant's work. */
static size_t fast_thread_floats(const back_dims *d) {
    const size_t t = BACK_TILE_MAX;
    return 2 * FL(d->Tk * d->dk) + FL(d->Tk * d->dv) + FL(d->Tk) + 3 * FL((size_t)(d->dk + 16) * t) +
           2 * FL((size_t)d->dv * t) + 6 * FL(t) + 5 * FL(2 * t) + FL((size_t)d->dk * t) +
           2 * FL((size_t)d->dv * t) + FL(GML_FLASH_BACK_WORK_FLOATS(t));
}

static size_t part_bytes(const back_dims *d) {
    return gml_align_up((size_t)(d->B * d->H) * sizeof(double), GML_ALIGN);
}

/* (b, g)'s n rows of dd floats of K or V, contiguous: t's own where they
 * are so (f32, rows one after the other), else packed into o. */
static const float *pack_f32(const gml_tensor *t, int64_t b, int64_t g, int64_t n, int64_t dd,
                             float *o) {
    const char *r0 = gml_ptr(t, b, g, 0, 0);
    if (t->type == GML_F32 && (dd == 1 || t->nb[3] == sizeof(float)) &&
        (n == 1 || t->nb[2] == (size_t)dd * sizeof(float)) && (uintptr_t)r0 % sizeof(float) == 0)
        return (const float *)(const void *)r0;
    if (t->type == GML_F32 && (dd == 1 || t->nb[3] == sizeof(float))) { /* rows of floats */
        for (int64_t j = 0; j < n; j++)
            memcpy(o + j * dd, gml_ptr(t, b, g, j, 0), (size_t)dd * sizeof(float));
        return o;
    }
    for (int64_t j = 0; j < n; j++)
        for (int64_t c = 0; c < dd; c++) o[j * dd + c] = kv_f(t, b, g, j, c);
    return o;
}

/* Row (b, h, i) of the f32 tensor t, n elements: in place where they are
 * contiguous, else gathered into buf. */
static const float *row_f32(const gml_tensor *t, int64_t b, int64_t h, int64_t i, int64_t n,
                            float *buf) {
    const char *r = gml_ptr(t, b, h, i, 0);
    if ((n == 1 || t->nb[3] == sizeof(float)) && (uintptr_t)r % sizeof(float) == 0)
        return (const float *)(const void *)r;
    for (int64_t c = 0; c < n; c++) memcpy(buf + c, r + c * (int64_t)t->nb[3], sizeof(float));
    return buf;
}

static void gml_f32_flash_attn_back(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2];
    const gml_tensor *fwd = dst->src[B_FWD], *dout = dst->src[B_DOUT], *mask = dst->src[B_MASK];
    if (mask && mask->nb[3] % sizeof(float) != 0) {
        gml_kernel_note(p, "reference (mask stride not a whole number of floats)");
        gml_f32_flash_attn_back__ref(p, dst);
        return;
    }
    const back_params bp = bparams_of(dst);
    const gml_attn_params par = bp.attn;
    const back_dims d = dims_of(dst);
    const back_variant var = pick_back(p->isa);
    const int64_t tile = (int64_t)var.tile, rows = d.r * d.Tq;
    gml_kernel_note(p, var.name);
    double *part = (double *)p->wdata;
    float *w = (float *)(void *)((char *)p->wdata + part_bytes(&d)) + (size_t)p->ith * fast_thread_floats(&d);
    float *kp = w, *vp = kp + FL(d.Tk * d.dk), *kz = vp + FL(d.Tk * d.dv);
    uint8_t *kbad = (uint8_t *)(void *)(kz + FL(d.Tk * d.dk));
    float *qt = (float *)(void *)(kbad + 4 * FL(d.Tk)), *qr = qt + FL(d.dk * tile), *dqt = qr + FL(d.dk * tile);
    float *dot = dqt + FL((d.dk + 16) * tile), *dor = dot + FL(d.dv * tile);
    float *lse = dor + FL(d.dv * tile), *dd = lse + FL(tile), *slope = dd + FL(tile);
    float *qpos = slope + FL(tile);
    int32_t *n_keys = (int32_t *)(void *)(qpos + FL(tile)), *first_key = n_keys + FL(tile);
    const float **mrows = (const float **)(void *)(first_key + FL(tile));
    const float **qrow = mrows + FL(2 * tile) / 2, **gorow = qrow + FL(2 * tile) / 2;
    const float **orow = gorow + FL(2 * tile) / 2;
    float **dqrow = (float **)(void *)(orow + FL(2 * tile) / 2);
    float *qs = (float *)(void *)(dqrow + FL(2 * tile) / 2), *gs = qs + FL(d.dk * tile);
    float *os = gs + FL(d.dv * tile), *work = os + FL(d.dv * tile);
    gml_flash_back_args a = {.dk = (size_t)d.dk, .dv = (size_t)d.dv, .q_rows = qrow,
                             .do_rows = gorow, .o_rows = orow, .dq_rows = dqrow,
                             .scale = par.scale, .qt = qt, .qr = qr,
                             .dot = dot, .dor = dor, .lse = lse, .dd = dd,
                             .dqt = dqt, .n_keys = n_keys,
                             .first_key = par.window > 0 ? first_key : NULL,
                             .mask = mask ? mrows : NULL,
                             .mask_stride = mask && mask->ne[3] > 1 ? mask->nb[3] / 4 : 0,
                             .softcap = par.softcap, .slope = par.alibi > 0 ? slope : NULL,
                             .qpos = qpos, .work = work};
    if (!back_lens_ok(p, dst)) {
        gml_barrier(p);
        return;
    }
    float *out = (float *)dst->data;
    for (int64_t task = gml_chunk_next(p); task < d.B * d.G; task = gml_chunk_next(p)) {
        const int64_t b = task / d.G, g = task % d.G;
        const float *kr = pack_f32(k, b, g, d.Tk, d.dk, kp);
        a.k = kr;
        a.v = pack_f32(v, b, g, d.Tk, d.dv, vp);
        /* K rows with a NaN or inf (rare: a padded cache): zeros in kz for
         * dQ, their share added lane by lane (ops/flash_back.h) */
        bool any_bad = false;
        for (int64_t j = 0; j < d.Tk; j++) {
            uint32_t top = 0; /* all exponent bits set: NaN or inf (an OR, no chain of adds) */
            for (int64_t c = 0; c < d.dk; c++) {
                uint32_t u;
                memcpy(&u, kr + j * d.dk + c, sizeof u);
                top |= (u & 0x7f800000u) == 0x7f800000u;
            }
            kbad[j] = (uint8_t)top;
            any_bad |= top != 0;
        }
        a.kz = kr;
        a.kbad = NULL;
        if (any_bad) {
            for (int64_t j = 0; j < d.Tk; j++)
                for (int64_t c = 0; c < d.dk; c++) kz[j * d.dk + c] = kbad[j] ? 0.0f : kr[j * d.dk + c];
            a.kz = kz;
            a.kbad = kbad;
        }
        /* dK, dV accumulated in place in the result (q was scaled) */
        float *dko = out + d.off_dk + (size_t)((b * d.G + g) * d.Tk * d.dk);
        float *dvo = out + d.off_dv + (size_t)((b * d.G + g) * d.Tk * d.dv);
        a.dk_acc = dko;
        a.dv_acc = dvo;
        memset(dko, 0, (size_t)(d.Tk * d.dk) * sizeof(float));
        memset(dvo, 0, (size_t)(d.Tk * d.dv) * sizeof(float));
        for (int64_t hh = 0; hh < d.r; hh++) part[b * d.H + g * d.r + hh] = 0;
        for (int64_t row0 = 0; row0 < rows; row0 += tile) {
            a.nq = (size_t)GML_MIN(tile, rows - row0);
            int64_t key0 = d.Tk;
            for (int64_t l = 0; l < tile; l++) {
                if (l >= (int64_t)a.nq) { /* idle lane: adds nothing */
                    lse[l] = INFINITY;
                    slope[l] = qpos[l] = 0;
                    n_keys[l] = first_key[l] = 0;
                    continue;
                }
                const int64_t i = (row0 + l) / d.r, h = g * d.r + (row0 + l) % d.r;
                qrow[l] = row_f32(q, b, h, i, d.dk, qs + l * d.dk);
                gorow[l] = row_f32(dout, b, h, i, d.dv, gs + l * d.dv);
                orow[l] = row_f32(fwd, b, h, i, d.dv, os + l * d.dv);
                dqrow[l] = out + ((b * d.H + h) * d.Tq + i) * d.dk;
                const float ls = f32_at(fwd, b, h, i, d.dv);
                lse[l] = ls == -INFINITY ? INFINITY : ls; /* no key seen: p = 0 */
                int64_t lo, hi;
                key_range_b(dst, &par, b, i, &lo, &hi);
                n_keys[l] = (int32_t)hi;
                first_key[l] = (int32_t)lo;
                key0 = GML_MIN(key0, lo);
                slope[l] = par.alibi > 0 ? gml_alibi_slope(par.alibi, h, d.H) : 0.0f;
                qpos[l] = (float)gml_attn_qpos(&par, dst->src[B_POS], b, i, d.Tq, d.Tk);
                if (mask)
                    mrows[l] = (const float *)(const void *)gml_ptr(
                        mask, b % mask->ne[0], h % mask->ne[1], i % mask->ne[2], 0);
            }
            a.key0 = par.window > 0 ? (size_t)key0 : 0;
            var.fn(&a);
            if (bp.sinks)
                for (int64_t l = 0; l < (int64_t)a.nq; l++) {
                    const int64_t i = (row0 + l) / d.r, h = g * d.r + (row0 + l) % d.r;
                    if (f32_at(fwd, b, h, i, d.dv) != -INFINITY)
                        part[b * d.H + h] -= (double)f32_at(fwd, b, h, i, d.dv + 1) * (double)dd[l];
                }
        }
    }
    if (bp.sinks) finish_sinks(p, dst, &d, part);
    else gml_barrier(p);
}

static size_t back_work_size(const gml_tensor *dst, int nth) {
    const back_dims d = dims_of(dst);
    const size_t ref = gml_align_up((size_t)(d.B * d.H), 8) * sizeof(double) +
                       (size_t)nth * ref_thread_doubles(&d) * sizeof(double);
    const size_t fast = part_bytes(&d) + (size_t)nth * fast_thread_floats(&d) * sizeof(float);
    return GML_MAX(ref, fast);
}

/* 5 products of [rows, Tk] by d: 2 Tk (2 d_k + 3 d_v)... counted as the
 * forward counts, for every key: QK^T and dS K, dS^T Q (d_k), dO V^T and
 * P^T dO (d_v), plus the weights. */
static double back_flops(const gml_tensor *dst) {
    const back_dims d = dims_of(dst);
    return (double)(d.B * d.H * d.Tq) * (double)d.Tk *
           (2.0 * (3.0 * (double)d.dk + 2.0 * (double)d.dv) + 8.0);
}

/* ---- builder ---------------------------------------------------------------- */

/* q [B, H, Tq, d_k], k [B, G, Tk, d_k], v [B, G, Tk, d_v], fwd [B, H, Tq, d_v + 2]
 * (flash_attn_lse of them with the same scale and opts), dout [B, H, Tq, d_v],
 * opts as the forward's (sinks: only whether there are) -> f32 [n]: dQ, dK,
 * dV, dsinks [H] (with sinks) one after the other, contiguous */
static gml_tensor *back_node(gml_context *ctx, gml_tensor *q, gml_tensor *k, gml_tensor *v,
                             gml_tensor *fwd, gml_tensor *dout, float scale,
                             const gml_attn_opts *opts, bool sinks) {
    if (!q || !k || !v || !fwd || !dout) return NULL;
    gml_attn_opts o1 = {0};
    if (opts) o1 = *opts;
    o1.sinks = NULL; /* checked by the caller when given; only their presence counts */
    const gml_attn_opts *o = &o1;
    if (!gml_flash_check(ctx, "flash_attn_back", q, k, v, scale, o)) return NULL;
    const int64_t B = q->ne[0], H = q->ne[1], Tq = q->ne[2], dv = v->ne[3];
    char sf[GML_SHAPE_MAX], sq[GML_SHAPE_MAX], sv[GML_SHAPE_MAX];
    const gml_tensor *want[2] = {fwd, dout};
    for (int w = 0; w < 2; w++) {
        const gml_tensor *t = want[w];
        const int64_t n = dv + (w == 0 ? 2 : 0);
        if (t->type != GML_F32 || t->ne[0] != B || t->ne[1] != H || t->ne[2] != Tq || t->ne[3] != n)
            return gml_fail(ctx, "flash_attn_back(%s, %s, %s, %s, %s): %s must be f32 [%" PRId64
                            ",%" PRId64 ",%" PRId64 ",%" PRId64 "] (%s), got %s %s (q %s, v %s)",
                            q->name, k->name, v->name, fwd->name, dout->name, t->name, B, H, Tq, n,
                            w == 0 ? "flash_attn_lse's: out, lse, sink weight" : "the output's gradient",
                            gml_type_name(t->type), GML_SHAPE(t, sf), GML_SHAPE(q, sq),
                            GML_SHAPE(v, sv));
    }
    const back_dims d = dims_of(&(gml_tensor){.src = {q, k, v}});
    const int64_t n = (int64_t)d.off_ds + (sinks ? H : 0);
    gml_tensor *t = gml_new_op(ctx, GML_OP_FLASH_ATTN_BACK, GML_F32, 1, &n,
                               (gml_tensor *[]){q, k, v, fwd, dout, o->mask, o->valid_lens,
                                                o->positions},
                               8);
    if (!t) return NULL;
    const back_params bp = {{scale, (int32_t)o->causal, o->window, o->softcap, o->alibi_max_bias},
                            sinks, 0};
    gml_set_params(t, &bp, sizeof bp);
    return t;
}

gml_tensor *gml_flash_attn_back(gml_context *ctx, gml_tensor *q, gml_tensor *k, gml_tensor *v,
                                gml_tensor *fwd, gml_tensor *dout, float scale,
                                const gml_attn_opts *opts) {
    GML_ENTER(ctx, 5, q, k, v, fwd, dout);
    GML_ENTER_OPTS(ctx, opts);
    if (opts && opts->sinks &&
        !gml_attn_opts_check(ctx, "flash_attn_back", q->name, &(gml_attn_opts){.sinks = opts->sinks},
                             true, q->ne[0], q->ne[1], q->ne[2], k->ne[2]))
        return NULL;
    return back_node(ctx, q, k, v, fwd, dout, scale, opts, opts && opts->sinks);
}

/* Views of back's pieces: dq as q [B, H, Tq, d_k], dk as k, dv as v, dsinks
 * [H] (NULL without sinks). Any pointer may be NULL. */
bool gml_flash_attn_back_views(gml_context *ctx, gml_tensor *back, gml_tensor **dq,
                               gml_tensor **dk, gml_tensor **dv, gml_tensor **dsinks) {
    const back_dims d = dims_of(back);
    const gml_tensor *like[3] = {back->src[0], back->src[1], back->src[2]};
    const size_t off[3] = {0, d.off_dk, d.off_dv};
    gml_tensor **outs[3] = {dq, dk, dv};
    const char *what[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; i++) {
        if (!outs[i]) continue;
        size_t nb[GML_MAX_DIMS];
        gml_contiguous_strides(GML_F32, like[i]->ne, nb);
        const int n = like[i]->n_dims;
        *outs[i] = gml_new_view(ctx, GML_OP_VIEW, back, n, like[i]->ne + GML_MAX_DIMS - n,
                                nb + GML_MAX_DIMS - n, off[i] * sizeof(float), what[i]);
        if (!*outs[i]) return false;
    }
    if (dsinks) {
        *dsinks = NULL;
        if (bparams_of(back).sinks) {
            const int64_t ne = d.H;
            const size_t nb = sizeof(float);
            *dsinks = gml_new_view(ctx, GML_OP_VIEW, back, 1, &ne, &nb, d.off_ds * sizeof(float),
                                   "dsinks");
            if (!*dsinks) return false;
        }
    }
    return true;
}

static gml_tensor *build_flash_attn_back(gml_context *ctx, const gml_arg *v) {
    const float scale = v[7].given ? v[7].f : (float)(1.0 / sqrt((double)v[0].t->ne[3]));
#define GIVEN(a, field) (v[a].given ? v[a].field : 0)
    /* sinks=true: any [H] tensor stands for them (only their presence counts) */
    const gml_attn_opts o = {.mask = GIVEN(5, t), .valid_lens = GIVEN(6, t),
                             .causal = (gml_causal)GIVEN(8, i), .positions = GIVEN(9, t),
                             .window = GIVEN(11, i), .softcap = GIVEN(12, f),
                             .alibi_max_bias = GIVEN(13, f)};
#undef GIVEN
    return back_node(ctx, v[0].t, v[1].t, v[2].t, v[3].t, v[4].t, scale, &o,
                     v[10].given && v[10].i);
}

static void flash_attn_back_args(const gml_tensor *t, gml_arg *v) {
    const back_params bp = bparams_of(t);
    for (int i = 0; i < 7; i++) v[i].t = t->src[i];
    v[7].f = bp.attn.scale;
    v[8].i = bp.attn.causal;
    v[9].t = t->src[B_POS];
    v[10].i = bp.sinks;
    v[11].i = bp.attn.window;
    v[12].f = bp.attn.softcap;
    v[13].f = bp.attn.alibi;
}

const gml_op_def gml_opdef_flash_attn_back = {
    .forward = gml_f32_flash_attn_back,
    .reference = gml_f32_flash_attn_back__ref,
    .work_size = back_work_size,
    .flops = back_flops,
    GML_ARGS(GML_T("q"), GML_T("k"), GML_T("v"), GML_T("fwd"), GML_T("dout"),
             GML_OPT("mask", OPT_TENSOR, "none"), GML_OPT("valid_lens", OPT_TENSOR, "none"),
             GML_OPT("scale", FLOAT, "1/sqrt(d_k)"),
             GML_OPT_ENUM("causal", "false", gml_causal_names),
             GML_OPT("positions", OPT_TENSOR, "none"), GML_OPT("sinks", BOOL, "false"),
             GML_OPT_Z("window", INT), GML_OPT_Z("softcap", FLOAT), GML_OPT_Z("alibi", FLOAT)),
    .build = build_flash_attn_back,
    .get_args = flash_attn_back_args,
    .doc_args = "q, k, v, and the options as flash_attn's (sinks: true when the forward had "
                "them); fwd `[B, H, Tq, d_v + 2]` flash_attn_lse's; dout `[B, H, Tq, d_v]`",
    .doc_result = "f32 `[n]`: dQ `[B, H, Tq, d_k]`, dK `[B, G, Tk, d_k]`, dV `[B, G, Tk, d_v]` "
                  "and dsinks `[H]` (with sinks), one after the other (FlashAttention-2's "
                  "backward: the weights recomputed block by block from the lse)",
};

/* ---- the scalar micro-kernel ------------------------------------------------
 * ops/flash_back.h's loop in plain C on float, FMA chains in order. */

static void back_block_scalar(const gml_flash_back_args *a, size_t tile) {
    const size_t nq = a->nq, dk = a->dk, dv = a->dv, KB = GML_FLASH_BACK_KEY_BLOCK;
    for (size_t l = 0; l < tile; l++) {
        for (size_t c = 0; c < dk; c++)
            a->qt[c * tile + l] = a->qr[l * dk + c] = l < nq ? a->q_rows[l][c] * a->scale : 0.0f;
        float sum = 0; /* an FMA chain in order */
        for (size_t c = 0; c < dv; c++) {
            const float g = l < nq ? a->do_rows[l][c] : 0.0f;
            a->dot[c * tile + l] = a->dor[l * dv + c] = g;
            if (l < nq) sum = fmaf(g, a->o_rows[l][c], sum);
        }
        a->dd[l] = sum;
    }
    float *s = a->work, *dp = s + KB * tile;
    int32_t nmax = 0;
    for (size_t l = 0; l < nq; l++) nmax = GML_MAX(nmax, a->n_keys[l]);
    for (size_t i = 0; i < dk * tile; i++) a->dqt[i] = 0;
    for (size_t j0 = a->key0; j0 < (size_t)nmax; j0 += KB) {
        const size_t nk = GML_MIN(KB, (size_t)nmax - j0);
        for (size_t j = 0; j < nk; j++) {
            const float *kj = a->k + (j0 + j) * dk, *vj = a->v + (j0 + j) * dv;
            for (size_t l = 0; l < tile; l++) {
                float dot = 0, g = 0;
                for (size_t c = 0; c < dk; c++) dot = fmaf(kj[c], a->qt[c * tile + l], dot);
                for (size_t c = 0; c < dv; c++) g = fmaf(vj[c], a->dot[c * tile + l], g);
                float t = 0;
                if (a->softcap > 0) {
                    t = tanhf(dot / a->softcap);
                    dot = a->softcap * t;
                }
                const size_t jj = j0 + j;
                bool seen = l < nq && jj < (size_t)a->n_keys[l] &&
                            (!a->first_key || jj >= (size_t)a->first_key[l]);
                if (seen && a->mask) {
                    const float mv = a->mask[l][jj * a->mask_stride];
                    seen = mv != -INFINITY;
                    dot += mv;
                }
                if (a->slope) dot += a->slope[l] * ((float)jj - a->qpos[l]);
                const float pr = seen ? expf(dot - a->lse[l]) : 0.0f;
                float ds = pr == 0 ? 0.0f : pr * (g - a->dd[l]); /* hidden: 0, whatever v holds */
                if (a->softcap > 0) ds *= 1.0f - t * t;
                s[j * tile + l] = pr;
                dp[j * tile + l] = ds;
            }
        }
        for (size_t j = 0; j < nk; j++) {
            float *dvj = a->dv_acc + (j0 + j) * dv, *dkj = a->dk_acc + (j0 + j) * dk;
            for (size_t l = 0; l < tile; l++) {
                const float pr = s[j * tile + l], ds = dp[j * tile + l];
                for (size_t c = 0; c < dv; c++) dvj[c] = fmaf(pr, a->dor[l * dv + c], dvj[c]);
                for (size_t c = 0; c < dk; c++) dkj[c] = fmaf(ds, a->qr[l * dk + c], dkj[c]);
            }
            const float *kj = a->kz + (j0 + j) * dk;
            for (size_t c = 0; c < dk; c++)
                for (size_t l = 0; l < tile; l++)
                    a->dqt[c * tile + l] = fmaf(kj[c], dp[j * tile + l], a->dqt[c * tile + l]);
        }
        gml_flash_back_bad_rows(a, tile, j0, nk, dp);
    }
    for (size_t l = 0; l < nq; l++)
        for (size_t c = 0; c < dk; c++) a->dq_rows[l][c] = a->dqt[c * tile + l] * a->scale;
}

void gml_f32_flash_back_ukernel__scalar_x8(const gml_flash_back_args *a) { back_block_scalar(a, 8); }
