/*
 * Attention blocks built from ggmlite's ops (no block-specific kernel).
 *
 * Each block takes a config, its weights and its inputs, adds the ops of one
 * attention layer to a context and returns two tensors: the output and, when
 * asked for, the attention weights (softmax probabilities, for inspection and
 * heatmaps).
 *
 *     gml_attn_weights w;                       // bound from a weights file
 *     if (gml_attn_weights_find(wctx, &w, err, sizeof err) != GML_OK) ...
 *     gml_attn_result r = gml_mha(ctx, (gml_attn_config){.n_heads = 8, .causal = true,
 *                                                        .want_weights = true},
 *                                 &w, (gml_attn_inputs){.query = x});
 *     if (!r.out) fprintf(stderr, "%s\n", gml_last_error(ctx));
 *     gml_graph *g = gml_build_graph(ctx, (gml_tensor *[]){r.out, r.weights}, 2);
 *
 * Two graphs compute the same attention (cfg.impl):
 *   fused    one gml_flash_attn op: online softmax over key blocks, memory
 *            O(B H Tq d_k) whatever Tk, no weights (.weights is NULL);
 *   unfused  scores, softmax and context as separate ops, the weights
 *            [B, H, Tq, Tk] a tensor of the graph (.weights).
 * The default (GML_ATTN_AUTO) is fused unless cfg.want_weights asks for the
 * weights. gml_relpos_attn is always unfused.
 *
 * Shapes follow ggmlite.h (outermost first). B batch, Tq query length, Tk
 * key/value length, D = d_model, H query heads, G key/value heads, d_k = D/H.
 *
 * The math, as PyTorch code writes it (nn.Linear weights are [out, in]):
 *     q = query W_q^T + b_q    -> [B, Tq, H, d_k] -> [B, H, Tq, d_k]
 *     k = key   W_k^T + b_k    -> [B, Tk, G, d_k] -> [B, G, Tk, d_k]
 *     v = value W_v^T + b_v    (as k)
 *     scores = q k^T                               [B, H, Tq, Tk]
 *     attn   = softmax(scores / sqrt(d_k) + masks) [B, H, Tq, Tk]  (the weights)
 *     ctx    = attn v                              [B, H, Tq, d_k]
 *     out    = ctx -> [B, Tq, H, d_k] -> [B, Tq, D], then W_o^T + b_o
 * Query head i uses key/value head i / (H / G) (repeat_interleave order).
 *
 * Masks: causal (query i sees key j iff j <= i + (Tk - Tq)) and valid
 * lengths (key j is seen iff j < len), combined. A row that sees no key gets
 * all-zero weights and a zero context (its output is b_o).
 *
 * The fused graph names its op "flash" ([B, H, Tq, d_k]); both graphs name
 * q, k, v and out.
 *
 * Errors: a block given inputs it cannot use returns .out == NULL and
 * .weights == NULL and records a message on the context (gml_last_error)
 * naming the block, the tensor and the shapes, e.g.
 *     mha: d_model 100 is not divisible by heads 3
 *     mha: w_k.weight is [64,32], expected [32,32] ([d_model, d_model])
 * A valid length outside [0, Tk] is data: compute fails, and
 * gml_graph_error names the length and its batch.
 *
 * The builders never touch tensor data, so graphs also build in a no_alloc
 * context.
 */
#ifndef GGMLITE_ATTENTION_H
#define GGMLITE_ATTENTION_H

#include <ggmlite/ggmlite.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How gml_gqa (and gml_relpos_attn with G < H) lets H query heads share G
 * key/value heads. */
typedef enum gml_gqa_form {
    /* Q [B, H, Tq, d_k] made contiguous (a copy unless Tq = 1) and seen as
     * [B, G, H/G * Tq, d_k]: one matmul per kv head, K and V never repeated
     * in memory. */
    GML_GQA_BROADCAST = 0,
    /* PyTorch's usual code: K and V repeat_interleave'd to H heads
     * [B, Tk, H, d_k], then exactly MHA. Kept as the check of the above. */
    GML_GQA_REPEAT = 1,
} gml_gqa_form;

/* Which graph computes the attention (see the top of this file). */
typedef enum gml_attn_impl {
    GML_ATTN_AUTO = 0,     /* fused, or unfused when want_weights */
    GML_ATTN_FUSED = 1,    /* gml_flash_attn; asking for weights too is an error */
    GML_ATTN_UNFUSED = 2,  /* scores, softmax, context: always gives the weights */
} gml_attn_impl;

typedef struct gml_attn_config {
    int64_t d_model;       /* D; 0 = the query's last dim */
    int n_heads;           /* H, must divide D */
    int n_kv_heads;        /* G, must divide H; 0 = H. gml_mha wants G == H */
    bool causal;           /* query i sees key j iff j <= i + (Tk - Tq) */
    int max_rel;           /* P (gml_relpos_attn): distances clipped to [-P, P] */
    gml_gqa_form gqa_form; /* when G < H (unfused graph) */
    gml_attn_impl impl;    /* fused or unfused graph; AUTO: fused unless want_weights */
    bool want_weights;     /* the result must carry the attention weights */
} gml_attn_config;

/* Parameters, PyTorch layouts. Either w_q, w_k, w_v (separate nn.Linear) or
 * in_proj_weight (nn.MultiheadAttention's packed q|k|v rows, used through
 * views, never copied). Biases are optional (NULL). */
typedef struct gml_attn_weights {
    gml_tensor *w_q, *b_q;      /* [D, D], [D] */
    gml_tensor *w_k, *b_k;      /* [G*d_k, D], [G*d_k] */
    gml_tensor *w_v, *b_v;      /* [G*d_k, D], [G*d_k] */
    gml_tensor *w_o, *b_o;      /* [D, D], [D]  (out_proj.weight, out_proj.bias) */
    gml_tensor *in_proj_weight; /* [D + 2*G*d_k, D]: rows of w_q, then w_k, then w_v */
    gml_tensor *in_proj_bias;   /* [D + 2*G*d_k] */
    gml_tensor *rel_k, *rel_v;  /* [2P+1, d_k], shared by all heads (rel_v optional) */
} gml_attn_weights;

typedef struct gml_attn_inputs {
    gml_tensor *query;      /* [B, Tq, D] f32, any strides */
    gml_tensor *key;        /* [B, Tk, D]; NULL = self-attention (key = value = query) */
    gml_tensor *value;      /* [B, Tk, D]; NULL = the key */
    gml_tensor *valid_lens; /* i32 [B] or [B, Tq] (per query), or NULL */
} gml_attn_inputs;

typedef struct gml_attn_result {
    gml_tensor *out;     /* [B, Tq, D], named "out" */
    gml_tensor *weights; /* [B, H, Tq, Tk], named "attn"; NULL from the fused graph */
} gml_attn_result;

/* Multi-head attention (G must equal H; rel_k/rel_v are ignored). */
gml_attn_result gml_mha(gml_context *ctx, gml_attn_config cfg, const gml_attn_weights *w,
                        gml_attn_inputs in);

/* Grouped-query attention: H query heads share G key/value heads; G = 1 is
 * multi-query attention, G = H is gml_mha. cfg.gqa_form picks the graph. */
gml_attn_result gml_gqa(gml_context *ctx, gml_attn_config cfg, const gml_attn_weights *w,
                        gml_attn_inputs in);

/* Shaw et al. (2018) relative-position attention, with P = cfg.max_rel and
 * a^K_ij = rel_k[clip(j - i, -P, P) + P] (a^V likewise from rel_v):
 *     e_ij = (q_i . k_j + q_i . a^K_ij) / sqrt(d_k)
 *     z_i  = sum_j attn_ij (v_j + a^V_ij)
 * rel_k is required, rel_v optional. G < H works as in gml_gqa. */
gml_attn_result gml_relpos_attn(gml_context *ctx, gml_attn_config cfg, const gml_attn_weights *w,
                                gml_attn_inputs in);

/* Binds *w to the tensors of wctx (e.g. from gml_load_safetensors) by the
 * names PyTorch state dicts and the fixtures use: w_q.weight, w_q.bias, w_k.*,
 * w_v.*, w_o.* | in_proj_weight, in_proj_bias, out_proj.weight,
 * out_proj.bias; rel_k.weight, rel_v.weight. Shapes are checked by the
 * blocks. GML_ERR_INVALID, with a message listing the names present, when
 * the projections are missing or given both ways. */
gml_status gml_attn_weights_find(gml_context *wctx, gml_attn_weights *w, char *err,
                                 size_t err_size);

/* Parameters of the four projections: 4 D^2 (+ 4 D with bias) for MHA;
 * 2 D^2 + 2 D G d_k (+ 2 D + 2 G d_k) for GQA. -1 if D % H or H % G. */
int64_t gml_mha_param_count(int64_t d_model, int n_heads, bool bias);
int64_t gml_gqa_param_count(int64_t d_model, int n_heads, int n_kv_heads, bool bias);

#ifdef __cplusplus
}
#endif
#endif /* GGMLITE_ATTENTION_H */
