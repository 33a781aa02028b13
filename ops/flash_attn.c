/* Fused attention (flash attention): softmax(q k^T * scale + masks) v in one
 * op. For each query row the keys are visited in blocks; a running max m,
 * a running sum l and an accumulator o of d_v values are kept, and when a
 * block raises the max, l and o are rescaled by exp(m_old - m_new):
 *
 *     m' = max(m, max_j s_j)     l' = l e^(m - m') + sum_j e^(s_j - m')
 *     o' = o e^(m - m') + sum_j e^(s_j - m') v_j          out = o / l
 *
 * so the [Tq, Tk] scores never exist. Keys a query cannot see (causal,
 * valid lengths) are skipped, whole blocks at a time. Masked keys and
 * non-finite scores follow ggmlite.h's MASKS in every kernel (how the
 * variants do it: ops/ukernels.h, flash attention). */
#include "attn_opts.h"
#include "flash_dec.h"
#include "ukernels.h"

#include <math.h>
#include <string.h>

/* ---- shared by the kernels ---------------------------------------------- */

/* Sources: q, k, v, mask, valid_lens, positions, sinks. */
#define SRC_MASK 3
#define SRC_LENS 4
#define SRC_POS 5
#define SRC_SINKS 6

static gml_attn_params params_of(const gml_tensor *t) { return gml_attn_params_of(t); }

static bool lens_ok(const gml_compute_params *p, const gml_tensor *dst) {
    return gml_attn_lens_ok(p, "flash_attn", dst->src[SRC_LENS], dst->src[1]->ne[2]);
}

/* Keys [*lo, *hi) query i of batch b may see (the mask may still drop some). */
static void key_range(const gml_tensor *dst, const gml_attn_params *par, int64_t b, int64_t i,
                      int64_t *lo, int64_t *hi) {
    gml_attn_key_range(par, dst->src[SRC_LENS], dst->src[SRC_POS], b, i, dst->src[0]->ne[2],
                       dst->src[1]->ne[2], lo, hi);
}

static float sink_of(const gml_tensor *dst, int64_t h) {
    const gml_tensor *sk = dst->src[SRC_SINKS];
    return *(const float *)(const void *)gml_ptr(sk, 0, 0, 0, h);
}

const char *const gml_causal_names[] = {"false", "true|bottom_right", "top_left", NULL};

bool gml_attn_lens_ok(const gml_compute_params *p, const char *op, const gml_tensor *lens,
                      int64_t tk) {
    if (!lens) return true;
    const int64_t n = lens->ne[2] * lens->ne[3];
    for (int64_t e = 0; e < n; e++) {
        const int64_t b = lens->n_dims == 1 ? e : e / lens->ne[3], i = e % lens->ne[3];
        const int32_t len = gml_attn_i32_at(lens, b, lens->n_dims == 1 ? 0 : i);
        if (len >= 0 && len <= tk) continue;
        char sl[GML_SHAPE_MAX];
        if (lens->n_dims == 1)
            gml_kernel_fail(p, "%s(%s): valid length %d for batch %" PRId64
                            " is outside [0, %" PRId64 "] (Tk = %" PRId64 ", lens %s)",
                            op, lens->name, (int)len, b, tk, tk, GML_SHAPE(lens, sl));
        else
            gml_kernel_fail(p, "%s(%s): valid length %d at [%" PRId64 ",%" PRId64
                            "] is outside [0, %" PRId64 "] (Tk = %" PRId64 ", lens %s)",
                            op, lens->name, (int)len, b, i, tk, tk, GML_SHAPE(lens, sl));
        return false;
    }
    return true;
}

bool gml_attn_opts_check(gml_context *ctx, const char *op, const char *x_name,
                         const gml_attn_opts *o, bool heads_known, int64_t B, int64_t H,
                         int64_t Tq, int64_t Tk) {
    char sx[GML_SHAPE_MAX];
    (void)Tk;
    if (o->causal != GML_CAUSAL_NONE && o->causal != GML_CAUSAL_BOTTOM_RIGHT &&
        o->causal != GML_CAUSAL_TOP_LEFT)
        return gml_fail(ctx, "%s(%s): causal %d is not NONE (0), BOTTOM_RIGHT (1) or "
                        "TOP_LEFT (2)", op, x_name, (int)o->causal) != NULL;
    if (o->window < 0)
        return gml_fail(ctx, "%s(%s): window %" PRId64 " is negative (0: no window)", op,
                        x_name, o->window) != NULL;
    if (!(o->softcap >= 0) || !isfinite(o->softcap))
        return gml_fail(ctx, "%s(%s): softcap %g must be finite and >= 0 (0: none)", op, x_name,
                        (double)o->softcap) != NULL;
    if (!(o->alibi_max_bias >= 0) || !isfinite(o->alibi_max_bias))
        return gml_fail(ctx, "%s(%s): alibi max bias %g must be finite and >= 0 (0: none)", op,
                        x_name, (double)o->alibi_max_bias) != NULL;
    if (!heads_known) {
        const char *what = o->valid_lens ? "valid_lens" : o->positions ? "positions"
                           : o->sinks    ? "sinks"
                           : o->alibi_max_bias > 0 ? "alibi"
                                                   : NULL;
        if (what)
            return gml_fail(ctx, "%s(%s): %s needs 4-D scores [B, H, Tq, Tk] (head = dim 1)", op,
                            x_name, what) != NULL;
        return true;
    }
    if (o->positions && !(o->positions->type == GML_I32 && o->positions->n_dims == 2 &&
                          o->positions->ne[2] == B && o->positions->ne[3] == Tq))
        return gml_fail(ctx, "%s(%s, %s): positions must be i32 [%" PRId64 ",%" PRId64
                        "] ([B, Tq]), got %s %s", op, x_name, o->positions->name, B, Tq,
                        gml_type_name(o->positions->type), GML_SHAPE(o->positions, sx)) != NULL;
    if (o->sinks && !(o->sinks->type == GML_F32 && o->sinks->n_dims == 1 && o->sinks->ne[3] == H))
        return gml_fail(ctx, "%s(%s, %s): sinks must be f32 [%" PRId64 "] ([H], one logit per "
                        "query head), got %s %s", op, x_name, o->sinks->name, H,
                        gml_type_name(o->sinks->type), GML_SHAPE(o->sinks, sx)) != NULL;
    return true;
}

float gml_alibi_slope(float max_bias, int64_t h, int64_t H) {
    if (!(max_bias > 0) || H < 1 || h < 0 || h >= H) return 0.0f;
    int64_t n = 1; /* the largest power of two <= H */
    while (n * 2 <= H) n *= 2;
    const double e = h < n ? -(double)max_bias * (double)(h + 1) / (double)n
                           : -(double)max_bias / 2 * (double)(2 * (h - n) + 1) / (double)n;
    return (float)exp2(e);
}

/* ---- reference ------------------------------------------------------------ */

/* Element d of row `row` of K or V (f32, f16 or bf16), as a double. */
static double kv_at(const gml_tensor *t, const char *row, int64_t d) {
    const char *e = row + d * (int64_t)t->nb[3];
    if (t->type == GML_F32) return *(const float *)(const void *)e;
    uint16_t h;
    memcpy(&h, e, sizeof h);
    return t->type == GML_F16 ? gml_fp16_to_fp32(h) : gml_bf16_to_fp32(h);
}

#define REF_KEY_BLOCK 32

/* Per thread: the scores of one key block and the accumulator, in double. */
static size_t ref_work_doubles(const gml_tensor *dst) { return REF_KEY_BLOCK + (size_t)dst->ne[3]; }

/* One query row at a time (rows of [B, H, Tq] split across threads), keys in
 * blocks of REF_KEY_BLOCK; every product, exp and sum in double. The
 * contract (ggmlite.h, MASKS) is judged on floats, as the fast kernels see
 * it: a key whose mask is -inf is skipped before its k row is read; a key
 * the row sees whose score, rounded to float, is not finite (or whose
 * float score (capped) plus its mask is not: an overflow, a NaN or +inf
 * mask), or whose v row holds a NaN or inf, makes the row NaN. The
 * arithmetic stays in double (the float roundings only judge). Options
 * literally: s = q.k scale; c tanh(s / c); + mask; + slope (j - i'); keys
 * outside [lo, hi) (causal, window, lengths) never read; the sink joins the
 * max and the sum at the end. */
static void gml_f32_flash_attn__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *mask = dst->src[3];
    const gml_attn_params par = params_of(dst);
    const double scale = par.scale, cap = par.softcap;
    const int64_t H = dst->ne[1], Tq = q->ne[2], Tk = k->ne[2], dv = dst->ne[3], dk = q->ne[3];
    const int64_t rep = H / k->ne[1]; /* query heads per kv head */
    double *s = (double *)p->wdata + (size_t)p->ith * ref_work_doubles(dst);
    double *acc = s + REF_KEY_BLOCK;
    if (!lens_ok(p, dst)) return;
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t b, h, i, lo, hi;
        gml_row_index(dst, r, &b, &h, &i);
        key_range(dst, &par, b, i, &lo, &hi);
        const double slope = par.alibi > 0 ? gml_alibi_slope(par.alibi, h, H) : 0.0;
        const double ip = (double)gml_attn_qpos(&par, dst->src[SRC_POS], b, i, Tq, Tk);
        const char *qi = gml_ptr(q, b, h, i, 0);
        const char *mrow =
            mask ? gml_ptr(mask, b % mask->ne[0], h % mask->ne[1], i % mask->ne[2], 0) : NULL;
        const int64_t mstride = mask && mask->ne[3] > 1 ? (int64_t)mask->nb[3] : 0;
        double m = -INFINITY, l = 0;
        bool nan = false;
        for (int64_t c = 0; c < dv; c++) acc[c] = 0;
        for (int64_t j0 = lo; j0 < hi; j0 += REF_KEY_BLOCK) {
            const int64_t nj = GML_MIN(REF_KEY_BLOCK, hi - j0);
            double bmax = -INFINITY;
            for (int64_t jj = 0; jj < nj; jj++) {
                const float mv = mrow ? *(const float *)(mrow + (j0 + jj) * mstride) : 0.0f;
                s[jj] = -INFINITY;
                if (mv == -INFINITY) continue; /* hidden: k and v unread */
                const char *kj = gml_ptr(k, b, h / rep, j0 + jj, 0);
                double dot = 0;
                for (int64_t d = 0; d < dk; d++)
                    dot += (double)*(const float *)(qi + d * (int64_t)q->nb[3]) * kv_at(k, kj, d);
                double sc = dot * scale;
                if (!isfinite((float)sc)) { /* the score as a float overflowed, or NaN */
                    nan = true;
                    continue;
                }
                if (cap > 0) sc = cap * tanh(sc / cap);
                const float judged = (float)sc + mv; /* the score as floats */
                if (!isfinite(judged)) {
                    nan = true;
                    continue;
                }
                s[jj] = sc;
                if (mrow) s[jj] += mv;
                s[jj] += slope * ((double)(j0 + jj) - ip);
                bmax = s[jj] > bmax ? s[jj] : bmax;
            }
            if (bmax == -INFINITY) continue; /* the mask drops the whole block */
            if (bmax > m) {                  /* rescale what the old max weighted */
                const double alpha = exp(m - bmax); /* 0 while m is -inf */
                l *= alpha;
                for (int64_t c = 0; c < dv; c++) acc[c] *= alpha;
                m = bmax;
            }
            for (int64_t jj = 0; jj < nj; jj++) {
                if (s[jj] == -INFINITY) continue;
                const double e = exp(s[jj] - m);
                const char *vj = gml_ptr(v, b, h / rep, j0 + jj, 0);
                l += e;
                for (int64_t c = 0; c < dv; c++)
                    acc[c] += e * kv_at(v, vj, c);
            }
        }
        /* a NaN or inf in a v row the row sees: NaN (0 * inf too, as the
         * weights may underflow); the sums cannot overflow in double */
        for (int64_t c = 0; c < dv; c++) nan |= !isfinite(acc[c]);
        if (l > 0 && dst->src[SRC_SINKS]) { /* the sink joins the max and the sum */
            const double sk = sink_of(dst, h);
            if (isnan(sk) || sk == INFINITY) nan = true; /* MASKS: NaN row */
            else if (sk > m) {
                const double f = exp(m - sk);
                l = l * f + 1;
                for (int64_t c = 0; c < dv; c++) acc[c] *= f;
            } else {
                l += exp(sk - m);
            }
        }
        /* no visible key: zeros */
        char *out = gml_ptr(dst, b, h, i, 0);
        for (int64_t c = 0; c < dv; c++)
            *(float *)(out + c * (int64_t)dst->nb[3]) = nan     ? NAN
                                                        : l > 0 ? (float)(acc[c] / l)
                                                                : 0.0f;
    }
}

/* ---- scalar micro-kernel ---------------------------------------------------
 * The algorithm of every variant (ops/ukernels.h), in plain C on float: key
 * blocks of SCALAR_KEY_BLOCK, scores s[j][l] and output ot[c][l] transposed
 * in work, a running max m[l] and sum sum[l] per lane. */

#define SCALAR_KEY_BLOCK 32

/* expf, but +0 below -87.33654 (about ln FLT_MIN): the terms of the online
 * softmax (summed to at least 1) are never subnormal, whose arithmetic costs
 * a microcode assist on Intel (as vexp8_nosub in ops/vexp_x86.h). */
static inline float expf_nosub(float x) { return x < -87.33654f ? 0.0f : expf(x); }

static void flash_block_scalar(const gml_flash_args *a, size_t tile) {
    const size_t nq = a->nq, dk = a->dk, dv = a->dv;
    float *s = a->work, *ot = s + (size_t)SCALAR_KEY_BLOCK * tile;
    float m[32], sum[32];
    int32_t nmax = 0;
    for (size_t l = 0; l < nq; l++) {
        m[l] = -INFINITY;
        sum[l] = 0;
        nmax = GML_MAX(nmax, a->n_keys[l]);
    }
    for (size_t i = 0; i < dv * tile; i++) ot[i] = 0;
    /* size_t keys: n_keys < INT32_MAX, but the block after the last may
     * start past it (an int32 j0 += 32 would overflow from Tk > 2^31 - 33) */
    for (size_t j0 = a->key0; j0 < (size_t)nmax; j0 += SCALAR_KEY_BLOCK) {
        const size_t nk = GML_MIN((size_t)SCALAR_KEY_BLOCK, (size_t)nmax - j0);
        const float *kb, *vb; /* rows j0 .. j0 + nk - 1, converted when typed */
        gml_flash_kv_rows(a, j0, nk, &kb, &vb);
        for (size_t j = 0; j < nk; j++) {
            const float *kj = kb + j * a->ldk;
            for (size_t l = 0; l < nq; l++) {
                float dot = 0; /* an FMA chain over d in order, as every variant's */
                for (size_t d = 0; d < dk; d++) dot = fmaf(kj[d], a->qt[d * tile + l], dot);
                /* softcap, the mask, alibi: a hidden key stays -inf whatever it holds */
                const float sc = gml_flash_score(a, l, j0 + j, dot);
                const bool seen = j0 + j < (size_t)a->n_keys[l] &&
                                  (!a->first_key || j0 + j >= (size_t)a->first_key[l]);
                s[j * tile + l] = seen ? sc : -INFINITY;
            }
        }
        for (size_t l = 0; l < nq; l++) {
            float bmax = -INFINITY;
            for (size_t j = 0; j < nk; j++) bmax = s[j * tile + l] > bmax ? s[j * tile + l] : bmax;
            const float mnew = bmax > m[l] ? bmax : m[l];
            const float base = mnew == -INFINITY ? 0.0f : mnew; /* no key seen yet */
            const float alpha = expf_nosub(m[l] - base);
            float bsum = 0;
            for (size_t j = 0; j < nk; j++) {
                s[j * tile + l] = expf_nosub(s[j * tile + l] - base);
                bsum += s[j * tile + l];
            }
            sum[l] = sum[l] * alpha + bsum;
            if (alpha != 1.0f)
                for (size_t c = 0; c < dv; c++) ot[c * tile + l] *= alpha;
            m[l] = mnew;
        }
        for (size_t j = 0; j < nk; j++) {
            const float *vj = vb + j * a->ldv;
            for (size_t c = 0; c < dv; c++)
                for (size_t l = 0; l < nq; l++) ot[c * tile + l] += vj[c] * s[j * tile + l];
        }
    }
    gml_flash_finish(a, tile, sum, m, ot, true);
}

void gml_f32_flash_ukernel__scalar_x8(const gml_flash_args *a) { flash_block_scalar(a, 8); }

/* The sink s of a lane with running max m and sum *sum (> 0) joins them:
 * the factor its accumulated values take. A NaN or +inf sink makes the sum
 * NaN (MASKS). */
static float fold_sink(float s, float m, float *sum) {
    if (s == INFINITY) {
        *sum = NAN;
        return 1.0f;
    }
    if (s > m) {
        const float f = expf(m - s);
        *sum = *sum * f + 1.0f;
        return f;
    }
    *sum += expf(s - m);
    return 1.0f;
}

bool gml_flash_finish(const gml_flash_args *a, size_t tile, const float *sum, const float *m,
                      float *ot, bool exact) {
    for (size_t l = 0; l < a->nq; l++) {
        float *out = a->out[l];
        if (sum[l] == 0) { /* no key seen: zeros, also where ot holds 0 * inf */
            for (size_t c = 0; c < a->dv; c++) out[c] = 0.0f;
            continue;
        }
        float total = sum[l], f = 1.0f;
        if (a->sink) f = fold_sink(a->sink[l], m[l], &total);
        const float inv = f / total; /* a NaN sum: NaN */
        bool finite = true;
        for (size_t c = 0; c < a->dv; c++) {
            out[c] = ot[c * tile + l] * inv;
            finite &= isfinite(out[c]);
        }
        if (finite || isnan(total)) continue;
        if (!exact) return false;
        gml_flash_lane_exact(a, tile, l, ot + l, tile);
    }
    return true;
}

void gml_flash_lane_exact(const gml_flash_args *a, size_t tile, size_t l, float *acc,
                          size_t acc_stride) {
    const size_t dk = a->dk, dv = a->dv;
    float m = -INFINITY, sum = 0;
    bool nan = false;
    for (size_t c = 0; c < dv; c++) acc[c * acc_stride] = 0;
    for (size_t j = a->first_key ? (size_t)a->first_key[l] : 0; j < (size_t)a->n_keys[l] && !nan;
         j++) {
        const float mv = a->mask ? a->mask[l][j * a->mask_stride] : 0.0f;
        if (mv == -INFINITY) continue; /* hidden */
        const float *kj, *vj;
        gml_flash_kv_rows(a, j, 1, &kj, &vj);
        float dot = 0;
        for (size_t d = 0; d < dk; d++) dot = fmaf(kj[d], a->qt[d * tile + l], dot);
        const float s = gml_flash_score(a, l, j, dot);
        if (!isfinite(s)) {
            nan = true;
            break;
        }
        if (s > m) {
            const float alpha = expf(m - s); /* 0 while m is -inf */
            sum *= alpha;
            for (size_t c = 0; c < dv; c++) acc[c * acc_stride] *= alpha;
            m = s;
        }
        const float e = expf(s - m);
        sum += e;
        for (size_t c = 0; c < dv; c++) acc[c * acc_stride] += e * vj[c];
    }
    float *out = a->out[l];
    for (size_t c = 0; c < dv && !nan; c++) nan = !isfinite(acc[c * acc_stride]);
    if (sum > 0 && a->sink) {
        const float f = fold_sink(a->sink[l], m, &sum);
        nan |= isnan(sum);
        for (size_t c = 0; c < dv; c++) acc[c * acc_stride] *= f;
    }
    for (size_t c = 0; c < dv; c++)
        out[c] = nan ? NAN : sum > 0 ? acc[c * acc_stride] / sum : 0.0f;
}

/* Element d of a row of d contiguous f32, f16 or bf16 elements, as a float. */
static inline float kv_elem(gml_type t, const char *row, size_t d) {
    if (t == GML_F32) {
        float f;
        memcpy(&f, row + d * sizeof f, sizeof f);
        return f;
    }
    uint16_t h;
    memcpy(&h, row + d * sizeof h, sizeof h);
    return t == GML_F16 ? gml_fp16_to_fp32(h) : gml_bf16_to_fp32(h);
}

/* ---- decoding: the scalar micro-kernel, partials and their merge -----------
 * (ops/ukernels.h, "flash attention, decoding"; the loop: ops/flash_dec.h) */

static void dec_dots_scalar(const gml_flash_dec_args *a, size_t jb, size_t nk, float *s) {
    for (size_t jj = 0; jj < nk; jj++) {
        const char *kr = a->k + (jb - a->j0 + jj) * a->k_row;
        for (size_t l = 0; l < a->nq; l++) {
            const float *ql = a->q + l * a->ldq;
            float dot = 0; /* an FMA chain over d in order */
            for (size_t d = 0; d < a->dk; d++) dot = fmaf(kv_elem(a->k_type, kr, d), ql[d], dot);
            s[l * GML_FLASH_DEC_KEY_BLOCK + jj] = dot;
        }
    }
}

static void dec_cap_scalar(const gml_flash_dec_args *a, size_t n, float *x) {
    for (size_t i = 0; i < n; i++)
        x[i] = isfinite(x[i]) ? a->softcap * tanhf(x[i] / a->softcap) : NAN;
}

static float dec_expsum_scalar(size_t n, float *x, float base) {
    float sum = 0;
    for (size_t i = 0; i < n; i++) {
        x[i] = expf_nosub(x[i] - base);
        sum += x[i];
    }
    return sum;
}

static void dec_values_scalar(const gml_flash_dec_args *a, size_t jb, size_t nk, const float *p,
                              const uint8_t *bits) {
    for (size_t jj = 0; jj < nk; jj++) {
        const char *vr = a->v + (jb - a->j0 + jj) * a->v_row;
        for (size_t l = 0; l < a->nq; l++) {
            if (!(bits[jj] >> l & 1)) continue; /* not seen by row l: never multiplied */
            const float w = p[l * GML_FLASH_DEC_KEY_BLOCK + jj];
            float *o = a->o + l * a->ldo;
            for (size_t c = 0; c < a->dv; c++) o[c] = fmaf(w, kv_elem(a->v_type, vr, c), o[c]);
        }
    }
}

static float dec_max_scalar(size_t n, const float *x) {
    float m = -INFINITY;
    for (size_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

void gml_f32_flash_dec_ukernel__scalar_d1(const gml_flash_dec_args *a) {
    gml_flash_dec_run(a, dec_dots_scalar, dec_cap_scalar, dec_expsum_scalar, dec_max_scalar,
                      dec_values_scalar);
}

void gml_flash_partial_merge(size_t dv, float *oa, size_t sa, float *ma, float *la,
                             const float *ob, size_t sb, float mb, float lb) {
    if (lb == 0) return; /* b saw no key: a as it is */
    if (*la == 0) {      /* a saw none: b */
        for (size_t c = 0; c < dv; c++) oa[c * sa] = ob[c * sb];
        *ma = mb;
        *la = lb;
        return;
    }
    const float m = mb > *ma ? mb : *ma; /* a NaN l keeps a finite or -inf m */
    const float fa = expf(*ma - m), fb = expf(mb - m);
    for (size_t c = 0; c < dv; c++) oa[c * sa] = oa[c * sa] * fa + ob[c * sb] * fb;
    *la = *la * fa + lb * fb;
    *ma = m;
}

void gml_flash_partial_finish(size_t dv, const float *o, size_t so, float m, float l,
                              const float *sink, float *out, size_t sout) {
    if (l == 0) { /* no key seen: zeros */
        for (size_t c = 0; c < dv; c++) out[c * sout] = 0.0f;
        return;
    }
    float f = 1.0f;
    if (sink && !isnan(l)) f = fold_sink(*sink, m, &l);
    const float inv = f / l;
    bool finite = !isnan(l);
    for (size_t c = 0; c < dv && finite; c++) finite = isfinite(o[c * so] * inv);
    for (size_t c = 0; c < dv; c++) out[c * sout] = finite ? o[c * so] * inv : NAN;
}

/* ---- fast kernel ------------------------------------------------------------
 * The rows of one batch entry and kv head g, r = H / G query heads by Tq
 * positions, are numbered row = i * r + (h - g r) and cut into blocks of the
 * variant's tile (so a block holds every head of the group at a position:
 * their keys and values are read once). A task is (b, g, block); threads take
 * tasks in turn (gml_chunk_next), each computed whole by one thread, keys in
 * order: results do not depend on the thread count. */

/* K and V are read by the micro-kernels as rows of d contiguous floats (any
 * row stride). When a tensor's rows are not (a permuted view whose last dim
 * is strided), each thread packs the [Tk, d] block of the (b, g) it works on
 * into its scratch, once per (b, g) it meets: the same floats in the same
 * order, so the result is bitwise the contiguous one.
 *
 * Rows of contiguous floats that are not adjacent are packed too, when the
 * block fits PACK_MAX_BYTES: the heads of a [B, T, G, d] projection viewed
 * as [B, G, T, d] (every attention block's K and V) are a row stride of G d
 * floats apart, 2 KiB for G d = 512, so the rows of a key block fall into a
 * few L1 sets (64 keys of 64 floats: 256 lines in 8 of the 64 sets, 12 ways
 * each) and 4 KiB pages (two rows a page): each block's K and V were read
 * from L2 again on every pass of the variants' loops, and the value loop
 * stalled on them (perf: 15% of the AVX-512 kernel's samples at its V load).
 * Packed, C3's flash_attn (B=1 T=2048 H=8 d=64) ran 1.4x to 1.5x faster on
 * AVX-512 and AVX2, 1 and 2 threads, C5's (H=16 G=4, 1 KiB apart) 1.1x, the
 * copy included (best of interleaved runs on the shared machine). */
#define PACK_MAX_BYTES ((size_t)8 << 20) /* per tensor and thread: Tk d <= 2M floats */
#define UNIT_TASKS 8 /* (b, g) per thread from which a task is a whole (b, g) (below) */

static bool elems_dense(const gml_tensor *t) {
    return (t->ne[3] == 1 || t->nb[3] == sizeof(float)) && t->nb[2] % sizeof(float) == 0 &&
           (uintptr_t)t->data % sizeof(float) == 0;
}

static bool rows_dense(const gml_tensor *t) {
    if (t->type != GML_F32) return true; /* typed: converted per key block, never packed */
    if (!elems_dense(t)) return false;
    const size_t row = (size_t)t->ne[3] * sizeof(float);
    return t->ne[2] == 1 || t->nb[2] == row || (size_t)t->ne[2] * row > PACK_MAX_BYTES;
}

/* Floats of t's packed [Tk, d] block (0 when t is read in place). */
static size_t packed_floats(const gml_tensor *t) {
    return rows_dense(t) ? 0 : gml_align_up((size_t)(t->ne[2] * t->ne[3]), GML_ALIGN / sizeof(float));
}

/* t[b, g, :, :] -> dst [Tk, d], contiguous. */
static void pack_rows(const gml_tensor *t, int64_t b, int64_t g, float *dst) {
    const int64_t n = t->ne[2], d = t->ne[3];
    const bool runs = elems_dense(t); /* each row one run of d floats */
    for (int64_t j = 0; j < n; j++) {
        const char *row = gml_ptr(t, b, g, j, 0);
        if (runs) {
            memcpy(dst + j * d, row, (size_t)d * sizeof(float));
            continue;
        }
        for (int64_t c = 0; c < d; c++)
            memcpy(dst + j * d + c, row + c * (int64_t)t->nb[3], sizeof(float));
    }
}

/* ---- f16 / bf16 K and V ------------------------------------------------------
 * The variants take each key block's K and V rows through gml_flash_kv_rows;
 * typed ones are converted here into a block buffer of the thread's scratch
 * (GML_FLASH_MAX_KEY_BLOCK rows), by the conversion micro-kernel of the ISA
 * when a row's elements are contiguous, else element by element: the same
 * floats either way (every conversion variant gives the scalar bits), so a
 * typed K/V gives bitwise what f32 K/V holding the converted values give. */
static bool kv_typed(const gml_tensor *dst) {
    return dst->src[1]->type != GML_F32 || dst->src[2]->type != GML_F32;
}

static void kv_load_rows(const char *base, size_t row, size_t el, gml_type type,
                         gml_cvt_ukernel *cvt, size_t j0, size_t n, size_t d, float *buf) {
    for (size_t j = 0; j < n; j++) {
        const char *r = base + (j0 + j) * row;
        float *o = buf + j * d;
        if (cvt) {
            cvt(d, r, o);
            continue;
        }
        for (size_t c = 0; c < d; c++) {
            const char *e = r + c * el;
            uint16_t h;
            if (type == GML_F32) {
                memcpy(o + c, e, sizeof(float));
                continue;
            }
            memcpy(&h, e, sizeof h);
            o[c] = type == GML_F16 ? gml_fp16_to_fp32(h) : gml_bf16_to_fp32(h);
        }
    }
}

void gml_flash_kv_load(const gml_flash_args *a, size_t j0, size_t n) {
    const gml_flash_kv *kv = a->kv;
    kv_load_rows(kv->k, kv->k_row, kv->k_el, kv->k_type, kv->cvt_k, j0, n, a->dk, kv->kbuf);
    kv_load_rows(kv->v, kv->v_row, kv->v_el, kv->v_type, kv->cvt_v, j0, n, a->dv, kv->vbuf);
}

/* The conversion micro-kernel for rows of t, or NULL (element by element). */
static gml_cvt_ukernel *kv_cvt(gml_isa isa, const gml_tensor *t) {
    const char *name;
    if (t->type == GML_F32 || (t->ne[3] > 1 && t->nb[3] != gml_type_size(t->type))) return NULL;
    return gml_cvt_to_f32(isa, t->type, &name);
}

/* Floats of the typed K and V block buffers. */
static size_t kv_block_floats(const gml_tensor *dst) {
    if (!kv_typed(dst)) return 0;
    return gml_align_up((size_t)GML_FLASH_MAX_KEY_BLOCK * (size_t)dst->src[0]->ne[3],
                        GML_ALIGN / sizeof(float)) +
           gml_align_up((size_t)GML_FLASH_MAX_KEY_BLOCK * (size_t)dst->ne[3],
                        GML_ALIGN / sizeof(float));
}

/* Per lane: n_keys, first_key, slope, qpos, sink, the mask and out rows. */
#define LANE_BYTES (2 * sizeof(int32_t) + 3 * sizeof(float) + 2 * sizeof(void *))

/* Per thread: q^T, the variant's scratch, the lane tables and the packed K
 * and V blocks (when packed); 64-byte aligned pieces. */
static size_t fast_work_bytes(const gml_tensor *dst) {
    const size_t tile = 32, dk = (size_t)dst->src[0]->ne[3], dv = (size_t)dst->ne[3];
    return gml_align_up(dk * tile * sizeof(float), GML_ALIGN) +
           gml_align_up(GML_FLASH_WORK_FLOATS(tile, dv) * sizeof(float), GML_ALIGN) +
           gml_align_up(tile * LANE_BYTES, GML_ALIGN) +
           (packed_floats(dst->src[1]) + packed_floats(dst->src[2]) + kv_block_floats(dst)) *
               sizeof(float);
}

/* Why the fast kernel cannot take dst (a note naming the reference), or
 * NULL: key counts must fit int32 with room for one more (the AVX2 variant
 * compares j + 1 with them); the variants step their key blocks in size_t,
 * past any count. */
static const char *fast_refusal(const gml_tensor *dst) {
    const gml_tensor *k = dst->src[1], *mask = dst->src[3];
    if (k->ne[2] >= INT32_MAX) return "reference (Tk >= 2^31 - 1)";
    if (mask && mask->nb[3] % sizeof(float) != 0)
        return "reference (mask stride not a whole number of floats)";
    return NULL;
}

typedef struct flash_variant {
    gml_f32_flash_ukernel *fn;
    size_t tile;
    const char *name, *packed_name, *typed_name; /* K or V packed; f16/bf16 K or V */
} flash_variant;

#define FLASH_ENTRY(isa, fn, tile) \
    {fn, tile, #fn, #fn " (K/V rows packed)", #fn " (f16/bf16 K/V converted per key block)"},
static flash_variant pick_variant(gml_isa isa, bool few) {
    static const flash_variant wide[] = {GML_F32_FLASH_UKERNELS(FLASH_ENTRY)};
    static const flash_variant narrow[] = {GML_F32_FLASH_FEW_UKERNELS(FLASH_ENTRY)};
    static const gml_isa wide_isa[] = {GML_F32_FLASH_UKERNELS(GML_UKERNEL_ISA)};
    static const gml_isa narrow_isa[] = {GML_F32_FLASH_FEW_UKERNELS(GML_UKERNEL_ISA)};
    if (few)
        return narrow[gml_pick_variant(isa, narrow_isa, (int)(sizeof narrow_isa / sizeof(gml_isa)))];
    return wide[gml_pick_variant(isa, wide_isa, (int)(sizeof wide_isa / sizeof(gml_isa)))];
}
#undef FLASH_ENTRY

/* ---- decoding path -----------------------------------------------------------
 * When a kv head has at most GML_FLASH_DEC_MAX_ROWS query rows (r = H / G
 * heads times Tq: decoding) and K and V have contiguous rows of elements,
 * the decode micro-kernels take the rows of one (b, g) together, lanes over
 * d. The keys are cut into chunks whose length depends on the shapes only
 * (B G, Tk), never on the thread count: a task is (b, g, chunk) and writes
 * its partial (o, m, l) to the shared scratch; after a barrier a task per
 * (b, g) merges its chunks' partials in chunk order (gml_flash_partial_merge)
 * and finishes them (gml_flash_partial_finish, the sink joining there once).
 * So the result is bitwise the same at every thread count, and at B = 1 the
 * keys of a few kv heads still feed every thread. */
#define DEC_MIN_CHUNK 256 /* keys: below this a chunk's partial costs more than it saves */
#define DEC_TASKS 16      /* chunks enough for B G = 1 .. 16 to feed a few threads */

static bool dec_contig(const gml_tensor *t) {
    return t->ne[3] == 1 || t->nb[3] == gml_type_size(t->type);
}

/* flash_attn_partial's params: flash_attn's, then the absolute position of
 * its first key. */
typedef struct gml_partial_params {
    gml_attn_params attn;
    int64_t key0;
} gml_partial_params;
GML_PARAMS_FIT(gml_partial_params);

static bool is_partial(const gml_tensor *dst) { return dst->op == GML_OP_FLASH_ATTN_PARTIAL; }
static int64_t key0_of(const gml_tensor *dst) {
    gml_partial_params pp;
    gml_get_params(dst, &pp, sizeof pp);
    return is_partial(dst) ? pp.key0 : 0;
}

static bool dec_eligible(const gml_tensor *dst) {
    return is_partial(dst) || (dst->ne[1] / dst->src[1]->ne[1]) * dst->ne[2] <= GML_FLASH_DEC_MAX_ROWS;
}

/* The work of dst: *groups of up to GML_FLASH_DEC_MAX_ROWS rows per (b, g)
 * (1 for flash_attn, whose decode path has at most that many), the keys in
 * *n chunks of *len keys (the last shorter), from the shapes only. */
static void dec_layout(const gml_tensor *dst, int64_t *groups, int64_t *n, int64_t *len) {
    const int64_t rows = dst->ne[1] / dst->src[1]->ne[1] * dst->ne[2], tk = dst->src[1]->ne[2];
    *groups = (rows + GML_FLASH_DEC_MAX_ROWS - 1) / GML_FLASH_DEC_MAX_ROWS;
    const int64_t tasks = dst->ne[0] * dst->src[1]->ne[1] * *groups;
    int64_t c = (DEC_TASKS + tasks - 1) / tasks;
    c = GML_MAX(1, GML_MIN(c, tk / DEC_MIN_CHUNK));
    int64_t l = (tk + c - 1) / c;
    l = GML_MAX(1, (l + GML_FLASH_DEC_KEY_BLOCK - 1) / GML_FLASH_DEC_KEY_BLOCK) *
        GML_FLASH_DEC_KEY_BLOCK;
    *len = l;
    *n = GML_MAX(1, (tk + l - 1) / l);
}

static size_t dec_ldq(const gml_tensor *dst) { return gml_align_up((size_t)dst->src[0]->ne[3], 16); }
static size_t dec_ldo(const gml_tensor *dst) { return gml_align_up((size_t)dst->src[2]->ne[3], 16); }
/* Floats of one partial record: GML_FLASH_DEC_MAX_ROWS rows of o, then m, l. */
static size_t dec_record_floats(const gml_tensor *dst) {
    return gml_align_up(GML_FLASH_DEC_MAX_ROWS * (dec_ldo(dst) + 2), GML_ALIGN / sizeof(float));
}
/* K or V whose elements are strided (a permuted view) is packed, a chunk
 * of rows at a time, as f32 rows (the same floats, converted when typed)
 * into the thread's scratch: the kernel then gives bitwise what contiguous
 * rows of those values give. Floats of that buffer (0: read in place). */
static size_t dec_pack_floats(const gml_tensor *dst, const gml_tensor *t) {
    if (dec_contig(t)) return 0;
    int64_t groups, n, len;
    dec_layout(dst, &groups, &n, &len);
    return gml_align_up((size_t)(len * t->ne[3]), GML_ALIGN / sizeof(float));
}
/* Per thread: q, the micro-kernel's scratch, the lane tables, one record,
 * the packed K and V chunks. */
#define DEC_LANE_BYTES (2 * sizeof(int32_t) + 3 * sizeof(float) + sizeof(void *))
static size_t dec_thread_bytes(const gml_tensor *dst) {
    return gml_align_up(GML_FLASH_DEC_MAX_ROWS * dec_ldq(dst) * sizeof(float), GML_ALIGN) +
           gml_align_up(GML_FLASH_DEC_WORK_FLOATS * sizeof(float), GML_ALIGN) +
           gml_align_up(GML_FLASH_DEC_MAX_ROWS * DEC_LANE_BYTES, GML_ALIGN) +
           (dec_record_floats(dst) + dec_pack_floats(dst, dst->src[1]) +
            dec_pack_floats(dst, dst->src[2])) * sizeof(float);
}
/* Shared: one record per task when the keys are split. */
static size_t dec_shared_bytes(const gml_tensor *dst) {
    int64_t groups, n, len;
    dec_layout(dst, &groups, &n, &len);
    return n > 1 ? (size_t)(dst->ne[0] * dst->src[1]->ne[1] * groups * n) * dec_record_floats(dst) *
                       sizeof(float)
                 : 0;
}

/* The picked variant, and its note for the path taken: path 0 f32 read in
 * place, 1 rows packed (strided elements), 2 f16/bf16 converted in
 * registers, 3 f16/bf16 converted while packed; + 4 when the keys are split
 * in chunks. */
#define DEC_NAMES(isa, fn, lanes)                                                           \
    {#fn, #fn " (K/V rows packed)", #fn " (f16/bf16 K/V converted in registers)",           \
     #fn " (f16/bf16 K/V converted, rows packed)", #fn " (keys in chunks, merged in order)", \
     #fn " (K/V rows packed; keys in chunks, merged in order)",                             \
     #fn " (f16/bf16 K/V converted in registers; keys in chunks, merged in order)",         \
     #fn " (f16/bf16 K/V converted, rows packed; keys in chunks, merged in order)"},
static gml_f32_flash_dec_ukernel *dec_pick(gml_isa isa, int path, const char **name) {
    static const char *const names[][8] = {GML_F32_FLASH_DEC_UKERNELS(DEC_NAMES)};
    static const gml_isa isas[] = {GML_F32_FLASH_DEC_UKERNELS(GML_UKERNEL_ISA)};
    static gml_f32_flash_dec_ukernel *const fns[] = {GML_F32_FLASH_DEC_UKERNELS(GML_UKERNEL_FN)};
    const int v = gml_pick_variant(isa, isas, (int)(sizeof isas / sizeof *isas));
    *name = names[v][path];
    return fns[v];
}
#undef DEC_NAMES

/* The keys [*lo, *hi) of dst's K that query i of batch b may see, and its
 * position i' relative to dst's first key. flash_attn: gml_attn_key_range.
 * flash_attn_partial: key jj of its K is key key0 + jj of the whole; causal
 * and the window by i' (positions, or i for TOP_LEFT: the builder refuses
 * the rest), valid lengths absolute. */
static void dec_key_range(const gml_tensor *dst, const gml_attn_params *par, int64_t key0,
                          int64_t b, int64_t i, int64_t *lo, int64_t *hi, float *qpos) {
    const int64_t Tq = dst->src[0]->ne[2], Tk = dst->src[1]->ne[2];
    const gml_tensor *lens = dst->src[SRC_LENS], *pos = dst->src[SRC_POS];
    const int64_t ip = gml_attn_qpos(par, pos, b, i, Tq, Tk);
    *qpos = (float)(ip - key0);
    if (!is_partial(dst)) {
        key_range(dst, par, b, i, lo, hi);
        return;
    }
    int64_t l = INT64_MIN / 4, h = INT64_MAX / 4; /* absolute */
    if (par->causal != GML_CAUSAL_NONE || par->window > 0) {
        h = ip + 1;
        if (par->window > 0) l = ip + 1 - par->window;
    }
    if (lens) h = GML_MIN(h, (int64_t)gml_attn_i32_at(lens, b, i));
    *hi = GML_MAX(0, GML_MIN(Tk, h - key0));
    *lo = GML_MIN(*hi, GML_MAX(0, l - key0));
}

static void dec_forward(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *mask = dst->src[3];
    const gml_attn_params par = params_of(dst);
    const bool partial = is_partial(dst);
    const int64_t key0 = key0_of(dst);
    const int64_t B = dst->ne[0], H = dst->ne[1], Tq = dst->ne[2], dv = v->ne[3], Tk = k->ne[2];
    const int64_t G = k->ne[1], dk = q->ne[3], r = H / G, rows = r * Tq;
    int64_t groups, nchunks, chunk;
    dec_layout(dst, &groups, &nchunks, &chunk);
    const bool pk = !dec_contig(k), pv = !dec_contig(v), typed = kv_typed(dst);
    const char *name;
    gml_f32_flash_dec_ukernel *fn =
        dec_pick(p->isa, (typed ? 2 : 0) + (pk || pv ? 1 : 0) + (nchunks > 1 ? 4 : 0), &name);
    gml_kernel_note(p, name);

    const size_t ldq = dec_ldq(dst), ldo = dec_ldo(dst), rec = dec_record_floats(dst);
    char *w = (char *)p->wdata + (size_t)p->ith * dec_thread_bytes(dst);
    float *qbuf = (float *)(void *)w;
    w += gml_align_up(GML_FLASH_DEC_MAX_ROWS * ldq * sizeof(float), GML_ALIGN);
    float *work = (float *)(void *)w;
    w += gml_align_up(GML_FLASH_DEC_WORK_FLOATS * sizeof(float), GML_ALIGN);
    const float **mask_rows = (const float **)(void *)w;
    int32_t *n_keys = (int32_t *)(void *)(mask_rows + GML_FLASH_DEC_MAX_ROWS);
    int32_t *first_key = n_keys + GML_FLASH_DEC_MAX_ROWS;
    float *slope = (float *)(void *)(first_key + GML_FLASH_DEC_MAX_ROWS);
    float *qpos = slope + GML_FLASH_DEC_MAX_ROWS, *sink = qpos + GML_FLASH_DEC_MAX_ROWS;
    w += gml_align_up(GML_FLASH_DEC_MAX_ROWS * DEC_LANE_BYTES, GML_ALIGN);
    float *own = (float *)(void *)w; /* this thread's record */
    float *kpack = own + rec, *vpack = kpack + dec_pack_floats(dst, k);
    float *shared = (float *)(void *)((char *)p->wdata + (size_t)p->nth * dec_thread_bytes(dst));

    gml_flash_dec_args a = {.dk = (size_t)dk, .dv = (size_t)dv, .q = qbuf, .ldq = ldq,
                            .k_row = pk ? (size_t)dk * 4 : k->nb[2],
                            .v_row = pv ? (size_t)dv * 4 : v->nb[2],
                            .k_type = pk ? GML_F32 : k->type, .v_type = pv ? GML_F32 : v->type,
                            .n_keys = n_keys, .first_key = first_key,
                            .mask = mask ? mask_rows : NULL,
                            .mask_stride = mask && mask->ne[3] > 1 ? mask->nb[3] / 4 : 0,
                            .softcap = par.softcap, .slope = par.alibi > 0 ? slope : NULL,
                            .qpos = qpos, .ldo = ldo, .work = work};
    /* Row l of group grp of (b, g): row grp * 8 + l of its r Tq rows, query
     * position i = row / r, head g r + row % r. */
#define ROW_I(grp, l) (((grp) * GML_FLASH_DEC_MAX_ROWS + (l)) / r)
#define ROW_H(grp, l) (g * r + ((grp) * GML_FLASH_DEC_MAX_ROWS + (l)) % r)
#define NQ(grp) GML_MIN((int64_t)GML_FLASH_DEC_MAX_ROWS, rows - (grp) * GML_FLASH_DEC_MAX_ROWS)
    /* The end of a row: finished (flash_attn), or the partial written out. */
#define ROW_OUT(b_, grp, l, o_, m_, l_, sinkp)                                                     \
    do {                                                                                          \
        float *out_ = (float *)(void *)gml_ptr(dst, b_, ROW_H(grp, l), ROW_I(grp, l), 0);         \
        const int64_t so_ = (int64_t)(dst->nb[3] / 4);                                            \
        if (partial) {                                                                            \
            for (int64_t c_ = 0; c_ < dv; c_++) out_[c_ * so_] = (o_)[c_];                        \
            out_[dv * so_] = (m_);                                                                \
            out_[(dv + 1) * so_] = (l_);                                                          \
        } else {                                                                                  \
            gml_flash_partial_finish((size_t)dv, o_, 1, m_, l_, sinkp, out_, (size_t)so_);        \
        }                                                                                         \
    } while (0)
    int64_t lanes_of = -1; /* the (b, g, group) the lane tables hold */
    for (int64_t task; (task = gml_chunk_next(p)) < B * G * groups * nchunks;) {
        const int64_t unit = task / nchunks, c = task % nchunks, grp = unit % groups;
        const int64_t bg = unit / groups, b = bg / G, g = bg % G;
        a.nq = (size_t)NQ(grp);
        if (lanes_of != unit) {
            for (int64_t l = 0; l < (int64_t)a.nq; l++) {
                const int64_t i = ROW_I(grp, l), h = ROW_H(grp, l);
                const char *qi = gml_ptr(q, b, h, i, 0);
                for (size_t d = 0; d < ldq; d++)
                    qbuf[(size_t)l * ldq + d] =
                        d < (size_t)dk ? *(const float *)(const void *)(qi + (int64_t)d * (int64_t)q->nb[3]) *
                                             par.scale
                                       : 0.0f;
                int64_t lo, hi;
                dec_key_range(dst, &par, key0, b, i, &lo, &hi, &qpos[l]);
                n_keys[l] = (int32_t)hi;
                first_key[l] = (int32_t)lo;
                slope[l] = par.alibi > 0 ? gml_alibi_slope(par.alibi, h, H) : 0.0f;
                sink[l] = dst->src[SRC_SINKS] ? sink_of(dst, h) : 0.0f;
                if (mask)
                    mask_rows[l] = (const float *)(const void *)gml_ptr(
                        mask, b % mask->ne[0], h % mask->ne[1], i % mask->ne[2], 0);
            }
            lanes_of = unit;
        }
        float *recp = nchunks > 1 ? shared + (size_t)task * rec : own;
        a.j0 = (size_t)(c * chunk);
        a.j1 = (size_t)GML_MIN(Tk, (c + 1) * chunk);
        if (pk) kv_load_rows(gml_ptr(k, b, g, 0, 0), k->nb[2], k->nb[3], k->type, NULL, a.j0,
                             a.j1 - a.j0, (size_t)dk, kpack);
        if (pv) kv_load_rows(gml_ptr(v, b, g, 0, 0), v->nb[2], v->nb[3], v->type, NULL, a.j0,
                             a.j1 - a.j0, (size_t)dv, vpack);
        a.k = pk ? (const char *)kpack : gml_ptr(k, b, g, (int64_t)a.j0, 0);
        a.v = pv ? (const char *)vpack : gml_ptr(v, b, g, (int64_t)a.j0, 0);
        a.o = recp;
        a.m = recp + GML_FLASH_DEC_MAX_ROWS * ldo;
        a.l = a.m + GML_FLASH_DEC_MAX_ROWS;
        fn(&a);
        if (nchunks > 1) continue;
        for (int64_t l = 0; l < (int64_t)a.nq; l++)
            ROW_OUT(b, grp, l, a.o + (size_t)l * ldo, a.m[l], a.l[l],
                    dst->src[SRC_SINKS] ? &sink[l] : NULL);
    }
    if (nchunks == 1) return;
    gml_barrier(p); /* every partial written; the tasks count again from 0 */
    for (int64_t unit; (unit = gml_chunk_next(p)) < B * G * groups;) {
        const int64_t grp = unit % groups, bg = unit / groups, b = bg / G, g = bg % G;
        float *r0 = shared + (size_t)(unit * nchunks) * rec; /* chunk 0's record: the sum */
        float *m0 = r0 + GML_FLASH_DEC_MAX_ROWS * ldo, *l0 = m0 + GML_FLASH_DEC_MAX_ROWS;
        for (int64_t c = 1; c < nchunks; c++) {
            const float *rc = shared + (size_t)(unit * nchunks + c) * rec;
            const float *mc = rc + GML_FLASH_DEC_MAX_ROWS * ldo, *lc = mc + GML_FLASH_DEC_MAX_ROWS;
            for (int64_t l = 0; l < NQ(grp); l++)
                gml_flash_partial_merge((size_t)dv, r0 + (size_t)l * ldo, 1, &m0[l], &l0[l],
                                        rc + (size_t)l * ldo, 1, mc[l], lc[l]);
        }
        for (int64_t l = 0; l < NQ(grp); l++) {
            const float sk = dst->src[SRC_SINKS] ? sink_of(dst, ROW_H(grp, l)) : 0.0f;
            ROW_OUT(b, grp, l, r0 + (size_t)l * ldo, m0[l], l0[l], dst->src[SRC_SINKS] ? &sk : NULL);
        }
    }
#undef ROW_I
#undef ROW_H
#undef NQ
#undef ROW_OUT
}

static void gml_f32_flash_attn(const gml_compute_params *p, gml_tensor *dst) {
    const char *refusal = fast_refusal(dst);
    if (refusal) {
        gml_kernel_note(p, refusal);
        gml_f32_flash_attn__ref(p, dst);
        return;
    }
    if (!lens_ok(p, dst)) return;
    if (dec_eligible(dst)) {
        dec_forward(p, dst);
        return;
    }
    const gml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *mask = dst->src[3];
    const gml_attn_params par = params_of(dst);
    const float scale = par.scale;
    const int64_t B = dst->ne[0], H = dst->ne[1], Tq = dst->ne[2], dv = dst->ne[3], Tk = k->ne[2];
    const int64_t G = k->ne[1], dk = q->ne[3], r = H / G, rows = r * Tq;
    const flash_variant var = pick_variant(p->isa, rows <= (int64_t)pick_variant(p->isa, true).tile);
    const int64_t tile = (int64_t)var.tile, blocks = (rows + tile - 1) / tile;
    const bool pack_k = !rows_dense(k), pack_v = !rows_dense(v), typed = kv_typed(dst);
    gml_kernel_note(p, typed ? var.typed_name : pack_k || pack_v ? var.packed_name : var.name);

    char *w = (char *)p->wdata + (size_t)p->ith * fast_work_bytes(dst);
    float *qt = (float *)w;
    w += gml_align_up((size_t)(dk * tile) * sizeof(float), GML_ALIGN);
    float *work = (float *)w;
    w += gml_align_up(GML_FLASH_WORK_FLOATS(tile, dv) * sizeof(float), GML_ALIGN);
    const float **mask_rows = (const float **)(void *)w;
    float **out_rows = (float **)(void *)(mask_rows + tile);
    int32_t *n_keys = (int32_t *)(void *)(out_rows + tile), *first_key = n_keys + tile;
    float *slope = (float *)(void *)(first_key + tile), *qpos = slope + tile, *sink = qpos + tile;
    w += gml_align_up((size_t)tile * LANE_BYTES, GML_ALIGN);
    float *k_packed = (float *)w, *v_packed = k_packed + packed_floats(k);
    float *k_block = v_packed + packed_floats(v);
    gml_flash_kv kv = {.k_row = k->nb[2], .v_row = v->nb[2], .k_el = k->nb[3], .v_el = v->nb[3],
                       .k_type = k->type, .v_type = v->type, .cvt_k = kv_cvt(p->isa, k),
                       .cvt_v = kv_cvt(p->isa, v), .kbuf = k_block,
                       .vbuf = k_block + gml_align_up((size_t)GML_FLASH_MAX_KEY_BLOCK * (size_t)dk,
                                                      GML_ALIGN / sizeof(float))};

    gml_flash_args a = {.dk = (size_t)dk, .dv = (size_t)dv, .qt = qt,
                        .ldk = pack_k || typed ? (size_t)dk : k->nb[2] / 4,
                        .ldv = pack_v || typed ? (size_t)dv : v->nb[2] / 4, .n_keys = n_keys,
                        .mask = mask ? mask_rows : NULL,
                        .mask_stride = mask && mask->ne[3] > 1 ? mask->nb[3] / 4 : 0,
                        .out = out_rows, .work = work,
                        .first_key = par.window > 0 ? first_key : NULL, .softcap = par.softcap,
                        .slope = par.alibi > 0 ? slope : NULL, .qpos = qpos,
                        .sink = dst->src[SRC_SINKS] ? sink : NULL, .kv = typed ? &kv : NULL};
    /* q rows of contiguous floats, 4-byte aligned: transposed in runs */
    const bool q_runs = (q->ne[3] == 1 || q->nb[3] == sizeof(float)) &&
                        (uintptr_t)q->data % sizeof(float) == 0 &&
                        q->nb[0] % sizeof(float) == 0 && q->nb[1] % sizeof(float) == 0 &&
                        q->nb[2] % sizeof(float) == 0;
    gml_x32_transpose_ukernel *const q_transpose =
        GML_PICK_UKERNEL(p->isa, GML_X32_TRANSPOSE_UKERNELS, gml_x32_transpose_ukernel);
    int64_t packed_bg = -1; /* the (b, g) this thread's packed blocks hold */
    /* A task is one block, or every block of a (b, g) when K or V is packed
     * and there are (b, g) enough to share evenly (UNIT_TASKS per thread):
     * threads taking blocks in turn each met every (b, g) and packed its K
     * and V again (B=4 T=256 H=8 at 2 threads: both threads copied all 32
     * heads, about a tenth of the op). Blocks are computed whole by one
     * thread either way: the same results.
     * The next task is taken before a task's last kernel runs, not after:
     * the atomic waits for the store buffer to drain, which after a kernel
     * holds its output rows, mostly cache misses (perf: gml_chunk_next's
     * share of flash_attn, B=4 T=256 H=8, was 3.3%). */
    const int64_t per_task =
        (pack_k || pack_v) && p->nth > 1 && B * G >= UNIT_TASKS * p->nth ? blocks : 1;
    for (int64_t task = gml_chunk_next(p), next = 0, blk = task * per_task; blk < B * G * blocks;
         blk = (blk + 1) % per_task ? blk + 1 : (task = next) * per_task) {
        const int64_t b = blk / (G * blocks), g = blk / blocks % G, row0 = blk % blocks * tile;
        a.nq = (size_t)GML_MIN(tile, rows - row0);
        if ((pack_k || pack_v) && packed_bg != b * G + g) {
            if (pack_k) pack_rows(k, b, g, k_packed);
            if (pack_v) pack_rows(v, b, g, v_packed);
            packed_bg = b * G + g;
        }
        if (typed) { /* rows converted per key block (gml_flash_kv_rows) */
            kv.k = gml_ptr(k, b, g, 0, 0);
            kv.v = gml_ptr(v, b, g, 0, 0);
        } else {
            a.k = pack_k ? k_packed : (const float *)(const void *)gml_ptr(k, b, g, 0, 0);
            a.v = pack_v ? v_packed : (const float *)(const void *)gml_ptr(v, b, g, 0, 0);
        }
        int64_t key0 = Tk;
        /* the block's q rows (a row stride apart in a projection's layout,
         * rarely in cache) requested all at once before they are read: one
         * memory latency a block instead of one a row (perf: 4% of C3's
         * flash_attn time was the loop below waiting on them) */
        if (q_runs) {
            for (int64_t l = 0; l < (int64_t)a.nq; l++) {
                const char *qi = gml_ptr(q, b, g * r + (row0 + l) % r, (row0 + l) / r, 0);
                for (int64_t off = 0; off < dk * (int64_t)sizeof(float); off += 64)
                    __builtin_prefetch(qi + off);
            }
            /* then transposed by the ISA's transpose micro-kernel, a run of
             * rows an equal stride apart at a time (the whole block for
             * MHA, the r heads of a position for GQA), and scaled: the same
             * floats as the loop below (perf: that loop was 5% of
             * flash_attn at T=512, one thread) */
            for (int64_t l0 = 0; l0 < (int64_t)a.nq;) {
                const char *p0 = gml_ptr(q, b, g * r + (row0 + l0) % r, (row0 + l0) / r, 0);
                int64_t n = 1, stride = 0;
                for (; l0 + n < (int64_t)a.nq; n++) {
                    const int64_t R = row0 + l0 + n;
                    const int64_t st = gml_ptr(q, b, g * r + R % r, R / r, 0) - p0;
                    if (st < 0 || (n > 1 && st != n * stride)) break;
                    if (n == 1) stride = st;
                }
                q_transpose((size_t)n, (size_t)dk, (const uint32_t *)(const void *)p0,
                            (size_t)(stride / (int64_t)sizeof(float)),
                            (uint32_t *)(void *)(qt + l0), (size_t)tile);
                l0 += n;
            }
            for (int64_t d = 0; d < dk; d++)
                for (int64_t l = 0; l < (int64_t)a.nq; l++) qt[d * tile + l] *= scale;
        }
        for (int64_t l = 0; l < tile; l++) {
            if (l >= (int64_t)a.nq) { /* idle lane */
                n_keys[l] = first_key[l] = 0;
                slope[l] = qpos[l] = sink[l] = 0.0f;
                for (int64_t d = 0; d < dk; d++) qt[d * tile + l] = 0.0f;
                continue;
            }
            const int64_t i = (row0 + l) / r, h = g * r + (row0 + l) % r;
            if (!q_runs) {
                const char *qi = gml_ptr(q, b, h, i, 0);
                for (int64_t d = 0; d < dk; d++)
                    qt[d * tile + l] = *(const float *)(qi + d * (int64_t)q->nb[3]) * scale;
            }
            int64_t lo, hi;
            key_range(dst, &par, b, i, &lo, &hi);
            n_keys[l] = (int32_t)hi;
            first_key[l] = (int32_t)lo;
            key0 = GML_MIN(key0, lo);
            slope[l] = par.alibi > 0 ? gml_alibi_slope(par.alibi, h, H) : 0.0f;
            qpos[l] = (float)gml_attn_qpos(&par, dst->src[SRC_POS], b, i, Tq, Tk);
            sink[l] = dst->src[SRC_SINKS] ? sink_of(dst, h) : 0.0f;
            if (mask)
                mask_rows[l] = (const float *)(const void *)gml_ptr(
                    mask, b % mask->ne[0], h % mask->ne[1], i % mask->ne[2], 0);
            out_rows[l] = (float *)(void *)gml_ptr(dst, b, h, i, 0);
        }
        a.key0 = par.window > 0 ? (size_t)key0 : 0;
        if ((blk + 1) % per_task == 0) next = gml_chunk_next(p); /* its task's last block */
        var.fn(&a);
    }
}

static size_t flash_attn_work_size(const gml_tensor *dst, int nth) {
    const size_t ref = ref_work_doubles(dst) * sizeof(double);
    const size_t dec = dec_eligible(dst) ? (size_t)nth * dec_thread_bytes(dst) + dec_shared_bytes(dst) : 0;
    return GML_MAX((size_t)nth * GML_MAX(ref, fast_work_bytes(dst)), dec);
}

/* 2 Tk (d_k + d_v) per query row for the two products, 5 Tk for the softmax;
 * counted for every key, as the unfused graph's matmuls and softmax are. */
static double flash_attn_flops(const gml_tensor *dst) {
    const gml_tensor *q = dst->src[0], *k = dst->src[1];
    const double rows = (double)gml_nrows(dst), tk = (double)k->ne[2];
    return rows * tk * (2.0 * (double)(q->ne[3] + dst->ne[3]) + 5.0);
}

/* ---- builder -------------------------------------------------------------- */

/* q [B, H, Tq, d_k], k [B, G, Tk, d_k], v [B, G, Tk, d_v], opts: mask
 * broadcastable to [B, H, Tq, Tk], valid_lens i32 [B] or [B, Tq], positions
 * i32 [B, Tq], sinks f32 [H] (each or NULL) -> out [B, H, Tq, d_v], stored
 * as [B, Tq, H, d_v] */
/* The checks of flash_attn and flash_attn_partial (op names the caller in
 * messages). False with the message on ctx. */
static bool flash_check(gml_context *ctx, const char *op, gml_tensor *q, gml_tensor *k,
                        gml_tensor *v, float scale, const gml_attn_opts *o) {
    gml_tensor *mask = o->mask, *valid_lens = o->valid_lens;
    char sq[GML_SHAPE_MAX], sk[GML_SHAPE_MAX], sv[GML_SHAPE_MAX], sx[GML_SHAPE_MAX];
    if (!gml_expect_type(ctx, op, q, GML_F32)) return false;
    for (int i = 0; i < 2; i++) { /* K and V: f32, f16 or bf16 (a half-precision KV cache) */
        const gml_tensor *t = i ? v : k;
        if (t->type != GML_F32 && t->type != GML_F16 && t->type != GML_BF16)
            return gml_fail(ctx, "%s(%s, %s, %s): '%s' is %s %s; k and v must be f32, f16 "
                            "or bf16", op, q->name, k->name, v->name, t->name, gml_type_name(t->type),
                            GML_SHAPE(t, sx)) != NULL;
    }
#define SHAPES q->name, k->name, v->name, GML_SHAPE(q, sq), GML_SHAPE(k, sk), GML_SHAPE(v, sv)
    const int64_t B = q->ne[0], H = q->ne[1], Tq = q->ne[2], G = k->ne[1], Tk = k->ne[2];
    if (k->ne[0] != B || v->ne[0] != B)
        return gml_fail(ctx, "%s(%s, %s, %s): batch sizes differ: q %s, k %s, v %s "
                        "(want q [B,H,Tq,d_k], k [B,G,Tk,d_k], v [B,G,Tk,d_v])", op, SHAPES) != NULL;
    if (v->ne[1] != G || v->ne[2] != Tk)
        return gml_fail(ctx, "%s(%s, %s, %s): k and v differ in kv heads or length: "
                        "q %s, k %s, v %s (want k [B,G,Tk,d_k], v [B,G,Tk,d_v])", op, SHAPES) != NULL;
    if (H % G)
        return gml_fail(ctx, "%s(%s, %s, %s): kv heads %" PRId64 " do not divide query "
                        "heads %" PRId64 ": q %s, k %s, v %s", op, q->name, k->name, v->name, G, H,
                        GML_SHAPE(q, sq), GML_SHAPE(k, sk), GML_SHAPE(v, sv)) != NULL;
    if (k->ne[3] != q->ne[3])
        return gml_fail(ctx, "%s(%s, %s, %s): q and k differ in d_k: q %s, k %s, v %s", op,
                        SHAPES) != NULL;
#undef SHAPES
    if (!isfinite(scale))
        return gml_fail(ctx, "%s(%s): scale %g is not finite", op, q->name, (double)scale) != NULL;
    const int64_t scores[GML_MAX_DIMS] = {B, H, Tq, Tk};
    if (mask) {
        if (!gml_expect_type(ctx, op, mask, GML_F32)) return false;
        for (int d = 0; d < GML_MAX_DIMS; d++)
            if (mask->ne[d] != 1 && mask->ne[d] != scores[d])
                return gml_fail(ctx, "%s(%s, %s, %s, %s): mask %s does not broadcast to "
                                "the scores [%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 "] "
                                "(each mask dim must be 1 or equal)", op, q->name, k->name, v->name,
                                mask->name, GML_SHAPE(mask, sx), B, H, Tq, Tk) != NULL;
    }
    if (valid_lens) {
        bool ok = valid_lens->type == GML_I32 &&
                  ((valid_lens->n_dims == 1 && valid_lens->ne[3] == B) ||
                   (valid_lens->n_dims == 2 && valid_lens->ne[2] == B && valid_lens->ne[3] == Tq));
        if (!ok)
            return gml_fail(ctx, "%s(%s, %s, %s, %s): valid lengths must be i32 [%" PRId64
                            "] or [%" PRId64 ",%" PRId64 "] ([B] or [B, Tq]), got %s %s", op, q->name,
                            k->name, v->name, valid_lens->name, B, B, Tq,
                            gml_type_name(valid_lens->type), GML_SHAPE(valid_lens, sx)) != NULL;
    }
    return gml_attn_opts_check(ctx, op, q->name, o, true, B, H, Tq, Tk);
}

gml_tensor *gml_flash_attn_ext(gml_context *ctx, gml_tensor *q, gml_tensor *k, gml_tensor *v,
                               float scale, const gml_attn_opts *opts) {
    if (!q || !k || !v) return NULL;
    const gml_attn_opts none = {0};
    const gml_attn_opts *o = opts ? opts : &none;
    if (!flash_check(ctx, "flash_attn", q, k, v, scale, o)) return NULL;
    gml_tensor *mask = o->mask, *valid_lens = o->valid_lens;
    const int64_t B = q->ne[0], H = q->ne[1], Tq = q->ne[2];
    const int n = q->n_dims;
    int64_t ne[GML_MAX_DIMS] = {B, H, Tq, v->ne[3]};
    gml_tensor *t = gml_new_op(ctx, GML_OP_FLASH_ATTN, GML_F32, n, ne + GML_MAX_DIMS - n,
                               (gml_tensor *[]){q, k, v, mask, valid_lens, o->positions, o->sinks},
                               7);
    if (!t) return NULL;
    if (H > 1 && Tq > 1) { /* head-interleaved storage [B, Tq, H, d_v] */
        t->nb[1] = t->nb[3] * (size_t)ne[3];
        t->nb[2] = t->nb[1] * (size_t)H;
        t->nb[0] = t->nb[2] * (size_t)Tq;
    }
    gml_set_params(t,
                   &(gml_attn_params){scale, (int32_t)o->causal, o->window, o->softcap,
                                      o->alibi_max_bias},
                   sizeof(gml_attn_params));
    return t;
}

gml_tensor *gml_flash_attn(gml_context *ctx, gml_tensor *q, gml_tensor *k, gml_tensor *v,
                           gml_tensor *mask, gml_tensor *valid_lens, float scale, bool causal) {
    const gml_attn_opts o = {.mask = mask, .valid_lens = valid_lens,
                             .causal = causal ? GML_CAUSAL_BOTTOM_RIGHT : GML_CAUSAL_NONE};
    return gml_flash_attn_ext(ctx, q, k, v, scale, &o);
}

/* scale: 1/sqrt(d_k) unless given */
static gml_tensor *build_flash_attn(gml_context *ctx, const gml_arg *v) {
    const float scale = v[5].given ? v[5].f : (float)(1.0 / sqrt((double)v[0].t->ne[3]));
#define GIVEN(a, field) (v[a].given ? v[a].field : 0) /* optional ones left out: none */
    const gml_attn_opts o = {.mask = GIVEN(3, t), .valid_lens = GIVEN(4, t),
                             .causal = (gml_causal)GIVEN(6, i), .positions = GIVEN(7, t),
                             .sinks = GIVEN(8, t), .window = GIVEN(9, i),
                             .softcap = GIVEN(10, f), .alibi_max_bias = GIVEN(11, f)};
#undef GIVEN
    return gml_flash_attn_ext(ctx, v[0].t, v[1].t, v[2].t, scale, &o);
}

static void flash_attn_args(const gml_tensor *t, gml_arg *v) {
    const gml_attn_params p = params_of(t);
    for (int i = 0; i < 5; i++) v[i].t = t->src[i]; /* q, k, v, mask, valid_lens */
    v[5].f = p.scale;
    v[6].i = p.causal;
    v[7].t = t->src[SRC_POS];
    v[8].t = t->src[SRC_SINKS];
    v[9].i = p.window;
    v[10].f = p.softcap;
    v[11].f = p.alibi;
}

const gml_op_def gml_opdef_flash_attn = {
    .forward = gml_f32_flash_attn,
    .reference = gml_f32_flash_attn__ref,
    .work_size = flash_attn_work_size,
    .flops = flash_attn_flops,
    GML_ARGS(GML_T("q"), GML_T("k"), GML_T("v"), GML_OPT("mask", OPT_TENSOR, "none"),
             GML_OPT("valid_lens", OPT_TENSOR, "none"), GML_OPT("scale", FLOAT, "1/sqrt(d_k)"),
             GML_OPT_ENUM("causal", "false", gml_causal_names),
             GML_OPT("positions", OPT_TENSOR, "none"), GML_OPT("sinks", OPT_TENSOR, "none"),
             GML_OPT_Z("window", INT), GML_OPT_Z("softcap", FLOAT),
             GML_OPT_Z("alibi", FLOAT)),
    .build = build_flash_attn,
    .get_args = flash_attn_args,
    .doc_args = "q `[B, H, Tq, d_k]`, k `[B, G, Tk, d_k]`, v `[B, G, Tk, d_v]` (G divides H; k, "
                "v f32, f16 or bf16, converted per key block); "
                "mask as softmax's; valid_lens i32 `[B]` or `[B, Tq]`; causal false, true "
                "(= bottom_right: query i at i + Tk - Tq) or top_left (at i); positions i32 "
                "`[B, Tq]` (each query's i', instead); sinks f32 `[H]`; window W: key j seen iff "
                "0 <= i' - j < W (implies causal); softcap c: s -> c tanh(s/c); alibi: max bias "
                "(slopes as ggml's)",
    .doc_result = "`[B, H, Tq, d_v]`: softmax(q k^T * scale (capped) + masks + alibi, sink in "
                  "the denominator) v in one op (online "
                  "softmax, no scores); query head h reads kv head h / (H/G); stored as "
                  "`[B, Tq, H, d_v]`, so `permute(.., [0, 2, 1, 3])` is contiguous",
};

/* ---- partial attention, its merge and its end --------------------------------
 * flash_attn_partial: flash_attn over the keys given, K and V being keys key0
 * .. key0 + Tk - 1 of the whole, stopped before the normalisation: per query
 * row [o (d_v values, unnormalized), m, l] (ops/ukernels.h, decoding: the
 * decode path's chunks do the same). attn_partial_merge joins two partials of the
 * same rows (log-sum-exp, gml_flash_partial_merge); attn_partial_finish divides
 * (gml_flash_partial_finish, the sink joining there once). Any split of the
 * keys, merged in key order, gives flash_attn within rounding. */

/* The reference: one row at a time in double, keys as
 * gml_f32_flash_attn__ref judges them; m and l in float at the end. */
static void gml_f32_flash_partial__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *mask = dst->src[3];
    const gml_attn_params par = params_of(dst);
    const int64_t key0 = key0_of(dst);
    const double scale = par.scale, cap = par.softcap;
    const int64_t H = dst->ne[1], dv = v->ne[3], dk = q->ne[3], rep = H / k->ne[1];
    double *acc = (double *)p->wdata + (size_t)p->ith * ref_work_doubles(dst);
    if (!gml_attn_lens_ok(p, "flash_attn_partial", dst->src[SRC_LENS], INT32_MAX)) return;
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t b, h, i, lo, hi;
        float qp;
        gml_row_index(dst, r, &b, &h, &i);
        dec_key_range(dst, &par, key0, b, i, &lo, &hi, &qp);
        const double slope = par.alibi > 0 ? gml_alibi_slope(par.alibi, h, H) : 0.0;
        const char *qi = gml_ptr(q, b, h, i, 0);
        const char *mrow =
            mask ? gml_ptr(mask, b % mask->ne[0], h % mask->ne[1], i % mask->ne[2], 0) : NULL;
        const int64_t mstride = mask && mask->ne[3] > 1 ? (int64_t)mask->nb[3] : 0;
        double m = -INFINITY, l = 0;
        bool nan = false;
        for (int64_t c = 0; c < dv; c++) acc[c] = 0;
        for (int64_t j = lo; j < hi && !nan; j++) {
            const float mv = mrow ? *(const float *)(const void *)(mrow + j * mstride) : 0.0f;
            if (mv == -INFINITY) continue;
            const char *kj = gml_ptr(k, b, h / rep, j, 0);
            double dot = 0;
            for (int64_t d = 0; d < dk; d++)
                dot += (double)*(const float *)(const void *)(qi + d * (int64_t)q->nb[3]) * kv_at(k, kj, d);
            double sc = dot * scale;
            if (!isfinite((float)sc)) {
                nan = true;
                break;
            }
            if (cap > 0) sc = cap * tanh(sc / cap);
            if (!isfinite((float)sc + mv)) {
                nan = true;
                break;
            }
            sc += mv + slope * ((double)j - (double)qp);
            if (sc > m) { /* rescale: exact online softmax in double */
                const double f = exp(m - sc);
                l *= f;
                for (int64_t c = 0; c < dv; c++) acc[c] *= f;
                m = sc;
            }
            const double e = exp(sc - m);
            const char *vj = gml_ptr(v, b, h / rep, j, 0);
            l += e;
            for (int64_t c = 0; c < dv; c++) acc[c] += e * kv_at(v, vj, c);
        }
        char *out = gml_ptr(dst, b, h, i, 0);
        const int64_t so = (int64_t)dst->nb[3];
        for (int64_t c = 0; c < dv; c++)
            *(float *)(void *)(out + c * so) = nan ? NAN : l > 0 ? (float)acc[c] : 0.0f;
        *(float *)(void *)(out + dv * so) = nan || l > 0 ? (float)m : -INFINITY;
        *(float *)(void *)(out + (dv + 1) * so) = nan ? NAN : (float)l;
    }
}

static void gml_f32_flash_partial(const gml_compute_params *p, gml_tensor *dst) {
    const char *refusal = fast_refusal(dst);
    if (refusal) {
        gml_kernel_note(p, refusal);
        gml_f32_flash_partial__ref(p, dst);
        return;
    }
    if (!gml_attn_lens_ok(p, "flash_attn_partial", dst->src[SRC_LENS], INT32_MAX)) return;
    dec_forward(p, dst);
}

static size_t flash_partial_work_size(const gml_tensor *dst, int nth) {
    return GML_MAX((size_t)nth * ref_work_doubles(dst) * sizeof(double),
                   (size_t)nth * dec_thread_bytes(dst) + dec_shared_bytes(dst));
}

/* q [B, H, Tq, d_k], k [B, G, Tk, d_k], v [B, G, Tk, d_v] (keys key0 .. key0 + Tk - 1)
 * -> [B, H, Tq, d_v + 2] contiguous: o, m, l per row */
gml_tensor *gml_flash_attn_partial(gml_context *ctx, gml_tensor *q, gml_tensor *k, gml_tensor *v,
                                   float scale, const gml_attn_opts *opts, int64_t key0) {
    if (!q || !k || !v) return NULL;
    const gml_attn_opts none = {0};
    const gml_attn_opts *o = opts ? opts : &none;
    if (!flash_check(ctx, "flash_attn_partial", q, k, v, scale, o)) return NULL;
    if (key0 < 0 || key0 > INT32_MAX - k->ne[2])
        return gml_fail(ctx, "flash_attn_partial(%s, %s, %s): first key %" PRId64 " must be in "
                        "[0, 2^31 - 1 - Tk] (Tk = %" PRId64 ")", q->name, k->name, v->name, key0,
                        k->ne[2]);
    if (o->sinks)
        return gml_fail(ctx, "flash_attn_partial(%s, %s): sinks join the sum once: give them to "
                        "attn_partial_finish", q->name, o->sinks->name);
    const bool needs_pos = o->causal == GML_CAUSAL_BOTTOM_RIGHT || o->window > 0 ||
                           (o->alibi_max_bias > 0 && o->causal != GML_CAUSAL_TOP_LEFT);
    if (needs_pos && !o->positions)
        return gml_fail(ctx, "flash_attn_partial(%s, %s, %s): %s needs positions (each query's "
                        "absolute position; the keys are %" PRId64 " .. %" PRId64 " of a whole "
                        "the op does not see), or causal top_left", q->name, k->name, v->name,
                        o->causal == GML_CAUSAL_BOTTOM_RIGHT ? "bottom-right causal"
                        : o->window > 0                      ? "a window"
                                                             : "alibi",
                        key0, key0 + k->ne[2] - 1);
    const int n = q->n_dims;
    int64_t ne[GML_MAX_DIMS] = {q->ne[0], q->ne[1], q->ne[2], v->ne[3] + 2};
    gml_tensor *t = gml_new_op(ctx, GML_OP_FLASH_ATTN_PARTIAL, GML_F32, n, ne + GML_MAX_DIMS - n,
                               (gml_tensor *[]){q, k, v, o->mask, o->valid_lens, o->positions, NULL},
                               7);
    if (!t) return NULL;
    const gml_partial_params pp = {{scale, (int32_t)o->causal, o->window, o->softcap,
                                    o->alibi_max_bias}, key0};
    gml_set_params(t, &pp, sizeof pp);
    return t;
}

static gml_tensor *build_flash_partial(gml_context *ctx, const gml_arg *v) {
    const float scale = v[5].given ? v[5].f : (float)(1.0 / sqrt((double)v[0].t->ne[3]));
#define GIVEN(a, field) (v[a].given ? v[a].field : 0)
    const gml_attn_opts o = {.mask = GIVEN(3, t), .valid_lens = GIVEN(4, t),
                             .causal = (gml_causal)GIVEN(6, i), .positions = GIVEN(7, t),
                             .window = GIVEN(8, i), .softcap = GIVEN(9, f),
                             .alibi_max_bias = GIVEN(10, f)};
#undef GIVEN
    return gml_flash_attn_partial(ctx, v[0].t, v[1].t, v[2].t, scale, &o, v[11].given ? v[11].i : 0);
}

static void flash_partial_args(const gml_tensor *t, gml_arg *v) {
    const gml_attn_params p = params_of(t);
    for (int i = 0; i < 5; i++) v[i].t = t->src[i];
    v[5].f = p.scale;
    v[6].i = p.causal;
    v[7].t = t->src[SRC_POS];
    v[8].i = p.window;
    v[9].f = p.softcap;
    v[10].f = p.alibi;
    v[11].i = key0_of(t);
}

/* 2 Tk (d_k + d_v) + 5 Tk per row, as flash_attn. */
static double flash_partial_flops(const gml_tensor *dst) {
    const gml_tensor *q = dst->src[0], *k = dst->src[1];
    return (double)gml_nrows(dst) * (double)k->ne[2] *
           (2.0 * (double)(q->ne[3] + dst->src[2]->ne[3]) + 5.0);
}

const gml_op_def gml_opdef_flash_attn_partial = {
    .forward = gml_f32_flash_partial,
    .reference = gml_f32_flash_partial__ref,
    .work_size = flash_partial_work_size,
    .flops = flash_partial_flops,
    .flags = GML_OPF_INF_OK, /* m is -inf where a row sees no key */
    GML_ARGS(GML_T("q"), GML_T("k"), GML_T("v"), GML_OPT("mask", OPT_TENSOR, "none"),
             GML_OPT("valid_lens", OPT_TENSOR, "none"), GML_OPT("scale", FLOAT, "1/sqrt(d_k)"),
             GML_OPT_ENUM("causal", "false", gml_causal_names),
             GML_OPT("positions", OPT_TENSOR, "none"), GML_OPT_Z("window", INT),
             GML_OPT_Z("softcap", FLOAT), GML_OPT_Z("alibi", FLOAT), GML_OPT_Z("key0", INT)),
    .build = build_flash_partial,
    .get_args = flash_partial_args,
    .doc_args = "as flash_attn (no sinks: attn_partial_finish takes them), k and v being keys key0 .. "
                "key0 + Tk - 1 of the whole: the mask covers these keys, valid_lens and positions "
                "are absolute; bottom_right causal, a window or alibi need positions",
    .doc_result = "`[B, H, Tq, d_v + 2]` contiguous: per row o (d_v values, unnormalized), its "
                  "max m and sum l (no key seen: 0, -inf, 0; a NaN row: l NaN); attn_partial_merge joins "
                  "such partials, attn_partial_finish divides",
};

/* ---- attn_partial_merge ------------------------------------------------------------ */

static void gml_f32_attn_merge(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *a = dst->src[0], *b = dst->src[1];
    const int64_t n = dst->ne[3], dv = n - 2;
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        const char *ra = gml_ptr(a, i0, i1, i2, 0), *rb = gml_ptr(b, i0, i1, i2, 0);
        float *out = (float *)(void *)gml_ptr(dst, i0, i1, i2, 0); /* contiguous */
        for (int64_t c = 0; c < n; c++) out[c] = *(const float *)(const void *)(ra + c * (int64_t)a->nb[3]);
        const int64_t sb = (int64_t)b->nb[3]; /* b's row read at its stride */
        const float *bo = (const float *)(const void *)rb;
        gml_flash_partial_merge((size_t)dv, out, 1, &out[dv], &out[dv + 1], bo, (size_t)sb / 4,
                                *(const float *)(const void *)(rb + dv * sb),
                                *(const float *)(const void *)(rb + (dv + 1) * sb));
    }
}

/* In double: the same rules (an empty side leaves the other as it is). */
static void gml_f32_attn_merge__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *a = dst->src[0], *b = dst->src[1];
    const int64_t n = dst->ne[3], dv = n - 2;
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
#define A(c) ((double)*(const float *)(const void *)(gml_ptr(a, i0, i1, i2, 0) + (c) * (int64_t)a->nb[3]))
#define BB(c) ((double)*(const float *)(const void *)(gml_ptr(b, i0, i1, i2, 0) + (c) * (int64_t)b->nb[3]))
        float *out = (float *)(void *)gml_ptr(dst, i0, i1, i2, 0);
        const double ma = A(dv), la = A(dv + 1), mb = BB(dv), lb = BB(dv + 1);
        if (lb == 0 || la == 0) {
            for (int64_t c = 0; c < n; c++) out[c] = (float)(lb == 0 ? A(c) : BB(c));
            continue;
        }
        const double m = mb > ma ? mb : ma, fa = exp(ma - m), fb = exp(mb - m);
        for (int64_t c = 0; c < dv; c++) out[c] = (float)(A(c) * fa + BB(c) * fb);
        out[dv] = (float)m;
        out[dv + 1] = (float)(la * fa + lb * fb);
#undef A
#undef BB
    }
}

/* a, b [..., d_v + 2] partials of the same rows (b's keys after a's) -> [..., d_v + 2] */
gml_tensor *gml_attn_partial_merge(gml_context *ctx, gml_tensor *a, gml_tensor *b) {
    if (!a || !b) return NULL;
    char sa[GML_SHAPE_MAX], sb[GML_SHAPE_MAX];
    if (!gml_expect_type(ctx, "attn_partial_merge", a, GML_F32) || !gml_expect_type(ctx, "attn_partial_merge", b, GML_F32))
        return NULL;
    bool same = a->n_dims == b->n_dims;
    for (int d = 0; d < GML_MAX_DIMS; d++) same &= a->ne[d] == b->ne[d];
    if (!same || a->ne[3] < 3)
        return gml_fail(ctx, "attn_partial_merge(%s, %s): want two partials of one shape [..., d_v + 2] "
                        "(d_v >= 1; flash_attn_partial's), got %s and %s", a->name, b->name,
                        GML_SHAPE(a, sa), GML_SHAPE(b, sb));
    const int n = a->n_dims;
    return gml_new_op(ctx, GML_OP_ATTN_PARTIAL_MERGE, GML_F32, n, a->ne + GML_MAX_DIMS - n,
                      (gml_tensor *[]){a, b}, 2);
}

static gml_tensor *build_attn_merge(gml_context *ctx, const gml_arg *v) {
    return gml_attn_partial_merge(ctx, v[0].t, v[1].t);
}
static void attn_merge_args(const gml_tensor *t, gml_arg *v) {
    v[0].t = t->src[0];
    v[1].t = t->src[1];
}

const gml_op_def gml_opdef_attn_partial_merge = {
    .forward = gml_f32_attn_merge,
    .reference = gml_f32_attn_merge__ref,
    .flags = GML_OPF_INF_OK,
    GML_ARGS(GML_T("a"), GML_T("b")),
    .build = build_attn_merge,
    .get_args = attn_merge_args,
    .doc_args = "a, b: partials `[..., d_v + 2]` of the same rows (flash_attn_partial's), b's keys "
                "after a's",
    .doc_result = "`[..., d_v + 2]`: the partial over both key sets (log-sum-exp merge: m = "
                  "max(ma, mb), o = oa e^(ma - m) + ob e^(mb - m), l likewise; an empty side (l "
                  "= 0) leaves the other bit for bit)",
};

/* ---- attn_partial_finish ----------------------------------------------------------- */

static void gml_f32_attn_finish(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *pa = dst->src[0], *sk = dst->src[1];
    const int64_t dv = dst->ne[3];
    const int64_t sp = (int64_t)pa->nb[3];
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        const char *row = gml_ptr(pa, i0, i1, i2, 0);
        const float *sink = sk ? (const float *)(const void *)gml_ptr(sk, 0, 0, 0, i1) : NULL;
        gml_flash_partial_finish((size_t)dv, (const float *)(const void *)row, (size_t)sp / 4,
                                 *(const float *)(const void *)(row + dv * sp),
                                 *(const float *)(const void *)(row + (dv + 1) * sp), sink,
                                 (float *)(void *)gml_ptr(dst, i0, i1, i2, 0), 1);
    }
}

/* In double: o / l, the sink folded in (flash_attn's reference rules). */
static void gml_f32_attn_finish__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *pa = dst->src[0], *sk = dst->src[1];
    const int64_t dv = dst->ne[3], sp = (int64_t)pa->nb[3];
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        const char *row = gml_ptr(pa, i0, i1, i2, 0);
#define P(c) ((double)*(const float *)(const void *)(row + (c) * sp))
        float *out = (float *)(void *)gml_ptr(dst, i0, i1, i2, 0);
        double l = P(dv + 1), f = 1;
        const double m = P(dv);
        bool nan = isnan(l);
        if (l != 0 && !nan && sk) {
            const double s = *(const float *)(const void *)gml_ptr(sk, 0, 0, 0, i1);
            if (isnan(s) || s == INFINITY) nan = true;
            else if (s > m) f = exp(m - s), l = l * f + 1;
            else l += exp(s - m);
        }
        for (int64_t c = 0; c < dv && !nan; c++) nan = !isfinite((float)(P(c) * f / l));
        for (int64_t c = 0; c < dv; c++) out[c] = l == 0 ? 0.0f : nan ? NAN : (float)(P(c) * f / l);
#undef P
    }
}

/* p [B, H, Tq, d_v + 2] (or any [..., d_v + 2] without sinks), sinks f32 [H] or NULL
 * -> [..., d_v] contiguous */
gml_tensor *gml_attn_partial_finish(gml_context *ctx, gml_tensor *p, gml_tensor *sinks) {
    if (!p) return NULL;
    char sp[GML_SHAPE_MAX], ss[GML_SHAPE_MAX];
    if (!gml_expect_type(ctx, "attn_partial_finish", p, GML_F32)) return NULL;
    if (p->ne[3] < 3)
        return gml_fail(ctx, "attn_partial_finish(%s): want a partial [..., d_v + 2] (d_v >= 1), got %s",
                        p->name, GML_SHAPE(p, sp));
    if (sinks && !(p->n_dims == 4 && sinks->type == GML_F32 && sinks->n_dims == 1 &&
                   sinks->ne[3] == p->ne[1]))
        return gml_fail(ctx, "attn_partial_finish(%s, %s): sinks must be f32 [H] for a partial [B, H, Tq, "
                        "d_v + 2], got %s %s and %s", p->name, sinks->name,
                        gml_type_name(sinks->type), GML_SHAPE(sinks, ss), GML_SHAPE(p, sp));
    const int n = p->n_dims;
    int64_t ne[GML_MAX_DIMS] = {p->ne[0], p->ne[1], p->ne[2], p->ne[3] - 2};
    return gml_new_op(ctx, GML_OP_ATTN_PARTIAL_FINISH, GML_F32, n, ne + GML_MAX_DIMS - n,
                      (gml_tensor *[]){p, sinks}, 2);
}

static gml_tensor *build_attn_finish(gml_context *ctx, const gml_arg *v) {
    return gml_attn_partial_finish(ctx, v[0].t, v[1].given ? v[1].t : NULL);
}
static void attn_finish_args(const gml_tensor *t, gml_arg *v) {
    v[0].t = t->src[0];
    v[1].t = t->src[1];
}

const gml_op_def gml_opdef_attn_partial_finish = {
    .forward = gml_f32_attn_finish,
    .reference = gml_f32_attn_finish__ref,
    GML_ARGS(GML_T("p"), GML_OPT("sinks", OPT_TENSOR, "none")),
    .build = build_attn_finish,
    .get_args = attn_finish_args,
    .doc_args = "p: a partial `[B, H, Tq, d_v + 2]` (flash_attn_partial's, attn_merge's); sinks "
                "f32 `[H]` (joins the sum once, here)",
    .doc_result = "`[..., d_v]` contiguous: o / l with the sink folded in as flash_attn folds it; "
                  "zeros where no key was seen, the row NaN where l is NaN or an output is not "
                  "finite",
};
