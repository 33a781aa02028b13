/* Naive attention, straight from the formulas (see attn_ref.h). */
#include "attn_ref.h"

#include <math.h>
#include <stdlib.h>

/* y[t][o] = b[o] + sum_i x[t][i] * w[o][i], for n rows t; doubles out. */
static double *project(const float *x, int n, int in, const float *w, const float *b, int out) {
    double *y = malloc(sizeof(double) * (size_t)n * (size_t)out);
    for (int t = 0; t < n; t++)
        for (int o = 0; o < out; o++) {
            double s = b ? b[o] : 0.0;
            for (int i = 0; i < in; i++)
                s += (double)x[(size_t)t * in + i] * w[(size_t)o * in + i];
            y[(size_t)t * out + o] = s;
        }
    return y;
}

static int64_t q_position(const gml_ref_attn *c, int b, int i) {
    if (c->q_pos) return c->q_pos[b * c->Tq + i];
    return c->top_left ? i : i + (c->Tk - c->Tq);
}

static double mask_at(const gml_ref_attn *c, int b, int h, int i, int j) {
    if (!c->mask) return 0.0;
    const int *n = c->mask_ne;
    const int ib = n[0] == 1 ? 0 : b, ih = n[1] == 1 ? 0 : h, iq = n[2] == 1 ? 0 : i,
              ik = n[3] == 1 ? 0 : j;
    return c->mask[(((size_t)ib * n[1] + ih) * n[2] + iq) * n[3] + ik];
}

static bool visible(const gml_ref_attn *c, int b, int h, int i, int j) {
    const int64_t pos = q_position(c, b, i);
    if ((c->causal || c->window > 0) && j > pos) return false;
    if (c->window > 0 && pos - j >= c->window) return false;
    if (c->lens) {
        int32_t len = c->lens_per_query ? c->lens[b * c->Tq + i] : c->lens[b];
        if (j >= len) return false;
    }
    if (mask_at(c, b, h, i, j) == -INFINITY) return false;
    return true;
}

double gml_ref_alibi_slope(int h, int H, double max_bias) {
    int n = 1;
    while (n * 2 <= H) n *= 2;
    return h < n ? pow(2.0, -max_bias * (h + 1) / n)
                 : pow(2.0, -max_bias * (2 * (h - n) + 1) / (2.0 * n));
}

/* RMS norm of each head's d_k values, eps 1e-6, times w. */
static void head_norm(double *x, int rows, int heads, int dk, const float *w) {
    for (int r = 0; r < rows * heads; r++) {
        double *v = x + (size_t)r * dk, ss = 0;
        for (int d = 0; d < dk; d++) ss += v[d] * v[d];
        const double inv = 1.0 / sqrt(ss / dk + 1e-6);
        for (int d = 0; d < dk; d++) v[d] = v[d] * inv * w[d];
    }
}

/* Rope on x [B, T, heads, d_k] (rows b*T + t), position of row (b, t) from
 * pos [B, T] or t + offset. */
static void rope(const gml_ref_attn *c, double *x, int B, int T, int heads, int dk,
                 const int32_t *pos, int64_t offset) {
    const int r = c->rotary_dim ? c->rotary_dim : dk, half = r / 2;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const double p = pos ? pos[b * T + t] : (double)(t + offset);
            for (int h = 0; h < heads; h++) {
                double *v = x + (((size_t)b * T + t) * heads + h) * dk;
                for (int i = 0; i < half; i++) {
                    const double a = p / c->pos_scale * pow(c->theta, -2.0 * i / r);
                    const int j0 = c->interleaved ? 2 * i : i;
                    const int j1 = c->interleaved ? 2 * i + 1 : i + half;
                    const double x0 = v[j0], x1 = v[j1];
                    v[j0] = x0 * cos(a) - x1 * sin(a);
                    v[j1] = x1 * cos(a) + x0 * sin(a);
                }
            }
        }
}

static int clip(int d, int p) { return d < -p ? -p : d > p ? p : d; }

void gml_ref_attention(const gml_ref_attn *c, float *out, float *attn) {
    const int B = c->B, Tq = c->Tq, Tk = c->Tk, D = c->D, H = c->H, G = c->G;
    const int dk = D / H, kvd = G * dk, per_kv = H / G;
    double *q = project(c->xq, B * Tq, D, c->wq, c->bq, D);   /* [B, Tq, D] */
    double *k = project(c->xk, B * Tk, D, c->wk, c->bk, kvd); /* [B, Tk, G*dk] */
    double *v = project(c->xv, B * Tk, D, c->wv, c->bv, kvd);
    if (c->q_norm) head_norm(q, B * Tq, H, dk, c->q_norm);
    if (c->k_norm) head_norm(k, B * Tk, G, dk, c->k_norm);
    if (c->rope) {
        const int64_t q_off = c->top_left ? 0 : Tk - Tq;
        rope(c, q, B, Tq, H, dk, c->q_pos, q_off);
        rope(c, k, B, Tk, G, dk, c->k_pos, 0);
    }
    double *z = calloc((size_t)B * Tq * D, sizeof(double)); /* concatenated heads */
    double *e = malloc(sizeof(double) * (size_t)Tk);

    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int g = h / per_kv; /* the kv head this query head reads */
            for (int i = 0; i < Tq; i++) {
                const double *qi = q + ((size_t)b * Tq + i) * D + (size_t)h * dk;
                const int64_t pos = q_position(c, b, i);
                const double slope = c->alibi_max_bias > 0
                                         ? gml_ref_alibi_slope(h, H, c->alibi_max_bias) : 0.0;
                double max = c->sinks ? (double)c->sinks[h] : -INFINITY;
                for (int j = 0; j < Tk; j++) {
                    if (!visible(c, b, h, i, j)) continue;
                    const double *kj = k + ((size_t)b * Tk + j) * kvd + (size_t)g * dk;
                    const float *ak =
                        c->rel_k ? c->rel_k + (size_t)(clip(j - i, c->P) + c->P) * dk : NULL;
                    double s = 0;
                    for (int d = 0; d < dk; d++)
                        s += qi[d] * (kj[d] + (ak ? ak[d] : 0.0));
                    s *= c->scale > 0 ? c->scale : 1.0 / sqrt((double)dk);
                    if (c->softcap > 0) s = c->softcap * tanh(s / c->softcap);
                    s += mask_at(c, b, h, i, j) - slope * (double)(pos - j);
                    e[j] = s;
                    if (e[j] > max) max = e[j];
                }
                double sum = 0;
                bool any = false;
                for (int j = 0; j < Tk; j++) {
                    const bool vis = visible(c, b, h, i, j);
                    any = any || vis;
                    e[j] = vis ? exp(e[j] - max) : 0.0;
                    sum += e[j];
                }
                if (c->sinks && any) sum += exp((double)c->sinks[h] - max);
                double *zi = z + ((size_t)b * Tq + i) * D + (size_t)h * dk;
                for (int j = 0; j < Tk; j++) {
                    const double a = sum > 0 ? e[j] / sum : 0.0; /* no visible key: zeros */
                    if (attn) attn[(((size_t)b * H + h) * Tq + i) * Tk + j] = (float)a;
                    const double *vj = v + ((size_t)b * Tk + j) * kvd + (size_t)g * dk;
                    const float *av =
                        c->rel_v ? c->rel_v + (size_t)(clip(j - i, c->P) + c->P) * dk : NULL;
                    for (int d = 0; d < dk; d++)
                        zi[d] += a * (vj[d] + (av ? av[d] : 0.0));
                }
            }
        }

    if (out)
        for (int t = 0; t < B * Tq; t++)
            for (int o = 0; o < D; o++) {
                double s = c->bo ? c->bo[o] : 0.0;
                for (int i = 0; i < D; i++)
                    s += z[(size_t)t * D + i] * c->wo[(size_t)o * D + i];
                out[(size_t)t * D + o] = (float)s;
            }
    free(q);
    free(k);
    free(v);
    free(z);
    free(e);
}
