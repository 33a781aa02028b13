/* A naive attention reference for tests: plain loops over flat row-major
 * arrays, double accumulation, written from the math (not from the graph
 * code in models/). Covers MHA, GQA (kv head of query head h is h / (H/G)),
 * Shaw et al. relative positions, causal and valid-length masks.
 * Depends on nothing but libc and libm. */
#ifndef GGMLITE_ATTN_REF_H
#define GGMLITE_ATTN_REF_H

#include <stdbool.h>
#include <stdint.h>

typedef struct gml_ref_attn {
    int B, Tq, Tk, D, H, G; /* G kv heads (G divides H); d_k = D / H */
    bool causal;            /* key j visible to query i iff j <= i + (Tk - Tq) */
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
void gml_ref_attention(const gml_ref_attn *c, float *out, float *attn);

#endif
