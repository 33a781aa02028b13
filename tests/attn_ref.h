/* A naive attention reference for tests: plain loops over flat row-major
 * arrays, double accumulation, written from the math (not from the graph
 * code in models/). Covers MHA, GQA (kv head of query head h is h / (H/G)),
 * Shaw et al. relative positions, causal (bottom-right or top-left) and
 * valid-length masks, an additive mask, rope (Hugging Face's rotate_half or
 * interleaved pairs) at given or default positions, per-head RMS norms of q
 * and k (Qwen3's q_norm/k_norm), sliding window, logit soft-capping, ALiBi
 * and attention sinks.
 * Depends on nothing but libc and libm. */
#ifndef GGMLITE_ATTN_REF_H
#define GGMLITE_ATTN_REF_H

#include <stdbool.h>
#include <stdint.h>

typedef struct gml_ref_attn {
    int B, Tq, Tk, D, H, G; /* G kv heads (G divides H); d_k = D / H */
    /* Query i sits at position pos_i = q_pos[b, i] if given, else
     * i + (Tk - Tq) (i when top_left); key j at j. */
    bool causal;            /* key j visible to query i iff j <= pos_i */
    bool top_left;          /* default positions i (torch.tril alignment) */
    const int32_t *q_pos;   /* [B, Tq] or NULL */
    int64_t window;         /* > 0: key j visible iff 0 <= pos_i - j < window */
    double scale;           /* the scores' factor; 0 = 1/sqrt(d_k) */
    double softcap;         /* > 0: scaled score s -> c tanh(s / c) */
    double alibi_max_bias;  /* > 0: score += -slope_h (pos_i - j) */
    const float *sinks;     /* [H] or NULL: an extra logit per head in the denominator */
    const float *mask;      /* additive, [mB, mH, mQ, mK] (each 1 or full), or NULL */
    int mask_ne[4];
    /* rope on q and k after the projections (and norms): angle of pair i
     * = (pos / pos_scale) theta^(-2i/r); keys at k_pos[b, j] or j */
    bool rope;
    double theta, pos_scale;
    int rotary_dim;         /* r, even; 0 = d_k */
    bool interleaved;       /* pairs (2i, 2i+1); else (i, i + r/2) */
    const int32_t *k_pos;   /* [B, Tk] or NULL */
    const float *q_norm, *k_norm; /* [d_k] or NULL: RMS norm of each q / k head, eps 1e-6 */
    const int32_t *lens;    /* NULL, or [B] (lens_per_query false) or [B, Tq] */
    bool lens_per_query;
    int P;                /* max relative distance, when rel_k is set */
    const float *rel_k;   /* [2P+1, d_k] or NULL */
    const float *rel_v;   /* [2P+1, d_k] or NULL */
    const float *xq;      /* [B, Tq, D] */
    const float *xk, *xv; /* [B, Tk, D] */
    const float *wq, *bq; /* [D, D] ([out, in]), [D] or NULL */
    const float *wk, *bk; /* [G*d_k, D], [G*d_k] or NULL */
    const float *wv, *bv;
    const float *wo, *bo; /* [D, D], [D] or NULL */
} gml_ref_attn;

/* out [B, Tq, D], attn [B, H, Tq, Tk] (either may be NULL). Rows that see no
 * key get zero weights and a zero context. */
/* ALiBi slope of head h of H with max bias m (ggml's and the paper's: with
 * n = 2^floor(log2 H), 2^(-m (h+1) / n) for h < n, else
 * 2^(-m (2 (h - n) + 1) / (2 n))). */
double gml_ref_alibi_slope(int h, int H, double max_bias);
void gml_ref_attention(const gml_ref_attn *c, float *out, float *attn);

#endif
