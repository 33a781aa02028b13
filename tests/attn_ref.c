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

static bool visible(const gml_ref_attn *c, int b, int i, int j) {
    if (c->causal && j > i + (c->Tk - c->Tq)) return false;
    if (c->lens) {
        int32_t len = c->lens_per_query ? c->lens[b * c->Tq + i] : c->lens[b];
        if (j >= len) return false;
    }
    return true;
}

static int clip(int d, int p) { return d < -p ? -p : d > p ? p : d; }

void gml_ref_attention(const gml_ref_attn *c, float *out, float *attn) {
    const int B = c->B, Tq = c->Tq, Tk = c->Tk, D = c->D, H = c->H, G = c->G;
    const int dk = D / H, kvd = G * dk, per_kv = H / G;
    double *q = project(c->xq, B * Tq, D, c->wq, c->bq, D);   /* [B, Tq, D] */
    double *k = project(c->xk, B * Tk, D, c->wk, c->bk, kvd); /* [B, Tk, G*dk] */
    double *v = project(c->xv, B * Tk, D, c->wv, c->bv, kvd);
    double *z = calloc((size_t)B * Tq * D, sizeof(double)); /* concatenated heads */
    double *e = malloc(sizeof(double) * (size_t)Tk);

    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int g = h / per_kv; /* the kv head this query head reads */
            for (int i = 0; i < Tq; i++) {
                const double *qi = q + ((size_t)b * Tq + i) * D + (size_t)h * dk;
                double max = -INFINITY;
                for (int j = 0; j < Tk; j++) {
                    if (!visible(c, b, i, j)) continue;
                    const double *kj = k + ((size_t)b * Tk + j) * kvd + (size_t)g * dk;
                    const float *ak =
                        c->rel_k ? c->rel_k + (size_t)(clip(j - i, c->P) + c->P) * dk : NULL;
                    double s = 0;
                    for (int d = 0; d < dk; d++)
                        s += qi[d] * (kj[d] + (ak ? ak[d] : 0.0));
                    e[j] = s / sqrt((double)dk);
                    if (e[j] > max) max = e[j];
                }
                double sum = 0;
                for (int j = 0; j < Tk; j++) {
                    e[j] = visible(c, b, i, j) ? exp(e[j] - max) : 0.0;
                    sum += e[j];
                }
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
