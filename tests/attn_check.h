/* Test harness for the attention blocks: a case (shapes, masks, weight
 * layout), random data for it, a graph built from it by one of the blocks,
 * computed under every ISA and thread count and compared with the naive
 * reference of attn_ref.h. */
#ifndef GGMLITE_ATTN_CHECK_H
#define GGMLITE_ATTN_CHECK_H

#include <ggmlite/attention.h>
#include "attn_ref.h"

enum { ATTN_LENS_NONE = 0, ATTN_LENS_BATCH = 1 /* [B] */, ATTN_LENS_QUERY = 2 /* [B, Tq] */ };
/* in.mask: random values in [-1, 1), about 1 in 6 of them -inf */
enum { ATTN_MASK_NONE = 0, ATTN_MASK_QK = 1 /* [Tq, Tk] */, ATTN_MASK_B = 2 /* [B, 1, 1, Tk] */ };

typedef struct attn_case {
    int B, Tq, Tk, D, H, G; /* G 0: H */
    bool cross;             /* separate key and value inputs [B, Tk, D]; else Tk = Tq */
    bool causal;
    int lens;         /* ATTN_LENS_* */
    bool bias;        /* all four projections biased */
    bool packed;      /* in_proj_weight (and in_proj_bias) instead of w_q/w_k/w_v */
    bool conv1d;      /* packed, stored [in, out] as GPT-2's Conv1D (c_attn, c_proj):
                       * in_proj_weight and w_o are transposed views */
    bool strided;     /* query a permuted view, key/value offset slices */
    bool rel;         /* relpos: a key table rel_k [2P+1, d_k] */
    int P;            /* relpos: max_rel */
    bool rel_v;       /* relpos: a value table too */
    bool zero_tables; /* relpos: tables of zeros */
    gml_gqa_form form;
    gml_attn_impl impl; /* AUTO here means unfused with weights; FUSED: out only */
    int mask;           /* ATTN_MASK_* */
    bool top_left;      /* causal top-left (with causal) */
    bool positions;     /* in.positions: i32 [B, Tq], start_b + i with start_b in [0, 40) */
    bool rope;          /* cfg.pos rope with the fields below (0: the defaults) */
    float theta, pos_scale;
    int rotary_dim;
    bool interleaved;
    bool qk_norm;       /* per-head RMS norms on q and k (attn_q_norm, attn_k_norm) */
    int64_t window;     /* cfg.score */
    float softcap, alibi, scale;
    bool sinks;         /* w.sinks [H], random in [-1, 1) */
} attn_case;

/* Host data for a case: flat row-major arrays, as attn_ref.h wants them. */
typedef struct attn_data {
    attn_case c; /* with Tk and G resolved */
    float *xq, *xk, *xv;
    float *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo; /* b* NULL without bias */
    float *rel_k, *rel_v;                         /* [2P+1, d_k] */
    int32_t *lens;                                /* [B] or [B, Tq], NULL without */
    float *mask;                                  /* [Tq, Tk] or [B, 1, 1, Tk] */
    int32_t *positions;                           /* [B, Tq] */
    float *q_norm, *k_norm;                       /* [d_k] */
    float *sinks;                                 /* [H] */
} attn_data;

typedef gml_attn_result (*attn_block_fn)(gml_context *, gml_attn_config, const gml_attn_weights *,
                                         gml_attn_inputs);

/* gml_relpos_attn as an attn_block_fn, with max_rel the case's P (set by
 * attn_graph_build before it calls the block). */
gml_attn_result attn_relpos(gml_context *ctx, gml_attn_config cfg, const gml_attn_weights *w,
                            gml_attn_inputs in);

/* The case's q_norm, k_norm [d_k] (qk_norm), made by attn_graph_build before
 * it calls the block; NULL otherwise. */
extern gml_tensor *attn_q_norm, *attn_k_norm;

/* Random data for c from seed (lengths include 0 and Tk where B allows). */
attn_data *attn_data_new(const attn_case *c, uint64_t seed);
void attn_data_free(attn_data *d);
/* The naive reference on d: out [B, Tq, D], attn [B, H, Tq, Tk]. */
void attn_reference(const attn_data *d, float *out, float *attn);
/* "B2 Tq5 Tk5 D16 H4 G2 causal lens[B] bias packed ..." */
const char *attn_case_str(const attn_case *c, char *buf, size_t size);

typedef struct attn_graph {
    gml_context *ctx;
    gml_graph *g;
    gml_attn_result r;
} attn_graph;

/* Builds d's case with fn into a new context holding inputs, weights and
 * the graph (outputs out and, unless the case is fused, weights); copies d's
 * data in unless no_alloc. False (message printed, nothing to free) if the
 * block fails. */
bool attn_graph_build(attn_graph *ag, attn_block_fn fn, const attn_data *d, bool no_alloc);
void attn_graph_free(attn_graph *ag);
/* Computes ag under isa with n threads; false (message printed) on failure. */
bool attn_graph_run(attn_graph *ag, gml_isa isa, int n_threads);

/* Every element of t (any strides) into dst, row-major. */
void attn_read(const gml_tensor *t, float *dst);
/* max |got - want|; counts elements over atol + rtol |want| (NaN counts). */
double attn_max_err(const float *got, const float *want, size_t n, double atol, double rtol,
                    size_t *n_bad);

/* The full check of one case: reference vs the block under every ISA the
 * CPU runs (reference, scalar, avx2, avx512, neon), 1, 2 and 3 threads (results must not depend on the thread
 * count); the same graph built no_alloc must have the same digest. A fused
 * case (impl FUSED) has no weights to compare; its output must also match
 * the unfused graph's within ATTN_FUSED_RTOL. Prints a line; returns the
 * number of failures (0 or 1). */
int attn_check(const char *block, attn_block_fn fn, const attn_case *c, uint64_t seed);

/* Tolerance against the double-precision reference. */
#define ATTN_ATOL 5e-5
#define ATTN_RTOL 5e-5
/* Fused against unfused output: 1e-5 relative, and 1e-6 absolute for
 * outputs near zero (values are O(1)). */
#define ATTN_FUSED_ATOL 1e-6
#define ATTN_FUSED_RTOL 1e-5
/* The largest fused-vs-unfused error attn_check has seen, relative to
 * max(|unfused|, 1e-1) per element: the number tests print. */
extern double attn_fused_max_rel;

#endif
