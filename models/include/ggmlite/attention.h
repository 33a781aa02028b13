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
 *     gml_attn_config cfg = {.dims = {.n_heads = 8},
 *                            .score = {.causal = GML_CAUSAL_BOTTOM_RIGHT},
 *                            .graph = {.want_weights = true}};
 *     gml_attn_result r = gml_mha(ctx, cfg, &w, (gml_attn_inputs){.query = x});
 *     if (!r.out) fprintf(stderr, "%s\n", gml_last_error(ctx));
 *     gml_graph *g = gml_build_graph(ctx, (gml_tensor *[]){r.out, r.weights}, 2);
 *
 * The config is split by concern: dims (sizes), score (which keys a query
 * sees, how scores become weights), pos (position encoding: rope), graph
 * (fused or unfused, weights wanted, GQA form). Relative-position
 * attention's max_rel is gml_relpos_attn's own argument.
 *
 * A block is four public stages, so a model can put its own transform
 * between them (q/k norms, another position encoding) without rewriting
 * projections, head split or merge:
 *
 *     gml_attn_inputs in = {.query = x};
 *     gml_attn_qkv qkv = gml_attn_project(ctx, &cfg, &w, in); // heads, views
 *     qkv.q = gml_rms_norm(ctx, qkv.q, q_norm, 1e-6f);          // e.g. Qwen3's q_norm
 *     qkv.k = gml_rms_norm(ctx, qkv.k, k_norm, 1e-6f);
 *     qkv = gml_attn_position(ctx, &cfg, qkv, in);             // rope, if cfg.pos says
 *     gml_attn_heads h = gml_attn_attend(ctx, &cfg, qkv, in, w.sinks);
 *     gml_tensor *out = gml_attn_merge(ctx, &w, h.heads);      // [B, Tq, D]
 *
 * gml_mha and gml_gqa are exactly these four calls.
 *
 * Two graphs compute the same attention (cfg.graph.impl):
 *   fused    one gml_flash_attn_ext op: online softmax over key blocks, memory
 *            O(B H Tq d_k) whatever Tk, no weights (.weights is NULL);
 *   unfused  scores, gml_softmax_ext and context as separate ops, the weights
 *            [B, H, Tq, Tk] a tensor of the graph.
 * The default (GML_ATTN_AUTO) is fused unless cfg.graph.want_weights asks
 * for the weights. gml_relpos_attn is always unfused. The weights are
 * returned (.weights) only when cfg.graph.want_weights asks for them, as
 * nn.MultiheadAttention's need_weights: otherwise the unfused graph's
 * weights are an intermediate like the scores, whose memory the planner
 * reuses once the context matmul has read them. Asked for, they cost
 * B H Tq Tk floats that stay live if given to gml_build_graph as an output.
 *
 * Shapes follow ggmlite.h (outermost first). B batch, Tq query length, Tk
 * key/value length, D = d_model, H query heads, G key/value heads, d_k = D/H.
 *
 * The math, as PyTorch code writes it (nn.Linear weights are [out, in]):
 *     q = query W_q^T + b_q    -> [B, Tq, H, d_k] -> [B, H, Tq, d_k]
 *     k = key   W_k^T + b_k    -> [B, Tk, G, d_k] -> [B, G, Tk, d_k]
 *     v = value W_v^T + b_v    (as k)
 *     scores = q k^T                               [B, H, Tq, Tk]
 *     attn   = softmax(scores * scale + masks)     [B, H, Tq, Tk]  (the weights)
 *     ctx    = attn v                              [B, H, Tq, d_k]
 *     out    = ctx -> [B, Tq, H, d_k] -> [B, Tq, D], then W_o^T + b_o
 * Query head i uses key/value head i / (H / G) (repeat_interleave order).
 *
 * scale = 1/sqrt(d_k) unless cfg.score.scale. Masks, combined: causal
 * (bottom-right: query i sees key j iff j <= i + (Tk - Tq); or top-left),
 * a sliding window, valid lengths (key j is seen iff j < len) and an
 * additive mask (in.mask); soft-capping, ALiBi and sinks shape the scores
 * (gml_attn_scoring). A row that sees no key gets all-zero weights and a
 * zero context (its output is b_o).
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
 *
 * Misuse (MISUSE in docs/contracts.md, as <ggmlite/ggmlite.h> states it),
 * for this header, kv_cache.h and layers.h: every function given NULL for
 * a pointer argument returns its error value (a result whose tensors are
 * NULL, NULL, false, 0, GML_ERR_INVALID; a zero gml_kv_cache_params; a
 * step without positions) with the message "<function>: <arg> is NULL"
 * ("gml_mha: w is NULL"), kept on ctx when the call has a live one
 * (gml_last_error(ctx)), else for the calling thread (gml_last_error(NULL)),
 * and written into err too where the function takes one; or does nothing
 * (gml_kv_cache_free). It never crashes. The exceptions are declared where
 * they apply: optional tensors (key, value, masks, positions, biases,
 * sinks), an err of NULL (no message written there), a prefix of NULL ("").
 * A NULL input tensor keeps the message ctx holds already (it says why the
 * input is NULL), else records "mha: query is NULL". A context freed before
 * the call is refused by the engine calls these make (the message for the
 * thread); a tensor of a freed context, or a freed gml_kv_cache, cannot be
 * told here from a live one (the blocks read a tensor's shape first).
 */
#ifndef GGMLITE_ATTENTION_H
#define GGMLITE_ATTENTION_H

#include <ggmlite/ggmlite.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- configuration, by concern ------------------------------------------ */

/* Sizes. */
typedef struct gml_attn_dims {
    int64_t d_model; /* D; 0 = the query's last dim */
    int n_heads;     /* H, must divide D; d_k = D / H */
    int n_kv_heads;  /* G, must divide H; 0 = H. gml_mha wants G == H */
} gml_attn_dims;

/* Which keys a query sees and how scores become weights: the options of
 * gml_flash_attn_ext / gml_softmax_ext (docs/contracts.md, MASKS, "Options": the
 * order a score is formed in, what each masks). Every option works in both
 * graphs (fused, unfused) and in the decode step, with no dense [Tq, Tk]
 * mask. Query i sits at position i' = in.positions[b, i] when given, else
 * i + Tk - Tq (bottom-right, or no causal) or i (top-left); key j at j. */
typedef struct gml_attn_scoring {
    gml_causal causal;    /* NONE; BOTTOM_RIGHT (what `true` means): query i sees key j iff
                           * j <= i' = i + (Tk - Tq), as decoding needs; TOP_LEFT: j <= i
                           * (torch.tril on [Tq, Tk]) */
    int64_t window;       /* W > 0: sliding window, query at position i sees key j iff
                           * 0 <= i - j < W (implies causal); 0 none */
    float softcap;        /* c > 0: each scaled score s -> c tanh(s / c) (Gemma 2); 0 none */
    float alibi_max_bias; /* m > 0: ALiBi, head h adds -slope_h (i - j) (m = 8: the paper's
                           * slopes 2^(-8 (h+1) / H)); 0 none */
    float scale;          /* the scores' factor; 0 = 1/sqrt(d_k) */
    bool add_zero_attn;   /* nn.MultiheadAttention(add_zero_attn=True): a zero key and value
                           * row appended after the keys (after bias_k/bias_v), seen by every
                           * query (gml_mha, gml_gqa only; see "Extra key rows" below) */
} gml_attn_scoring;

/* Position encoding applied to q and k between projection and attention. */
typedef enum gml_pos_kind {
    GML_POS_NONE = 0,
    GML_POS_ROPE = 1, /* rotary embeddings, gml_rope (ggmlite.h) */
} gml_pos_kind;

typedef struct gml_attn_rope {
    float theta;      /* base; 0 = 10000 */
    int rotary_dim;   /* leading dims of each head rotated (even); 0 = d_k */
    float pos_scale;  /* positions divided by it (linear scaling); 0 = 1 */
    bool interleaved; /* pairs (2i, 2i+1) (GPT-J); false: rotate_half (HF LLaMA) */
} gml_attn_rope;

typedef struct gml_attn_posenc {
    gml_pos_kind kind;
    gml_attn_rope rope; /* kind GML_POS_ROPE */
} gml_attn_posenc;

/* How gml_gqa (and gml_relpos_attn with G < H) lets H query heads share G
 * key/value heads in the unfused graph. */
typedef enum gml_gqa_form {
    /* Q [B, H, Tq, d_k] made contiguous (a copy unless Tq = 1) and seen as
     * [B, G, H/G * Tq, d_k]: one matmul per kv head, K and V never repeated
     * in memory. */
    GML_GQA_BROADCAST = 0,
    /* PyTorch's usual code: K and V repeat_interleave'd to H heads
     * [B, H, Tk, d_k], then exactly MHA. Kept as the check of the above. */
    GML_GQA_REPEAT = 1,
} gml_gqa_form;

/* Which graph computes the attention (see the top of this file). */
typedef enum gml_attn_impl {
    GML_ATTN_AUTO = 0,     /* fused, or unfused when want_weights */
    GML_ATTN_FUSED = 1,    /* gml_flash_attn; asking for weights too is an error */
    GML_ATTN_UNFUSED = 2,  /* scores, softmax, context (the weights with want_weights) */
} gml_attn_impl;

/* The graph built; the results do not depend on it beyond rounding. */
typedef struct gml_attn_graph_opts {
    gml_attn_impl impl;    /* AUTO: fused unless want_weights */
    bool want_weights;     /* the result carries the attention weights (.weights; NULL
                            * otherwise, whatever the impl) */
    gml_gqa_form gqa_form; /* when G < H (unfused graph) */
} gml_attn_graph_opts;

typedef struct gml_attn_config {
    gml_attn_dims dims;
    gml_attn_scoring score;
    gml_attn_posenc pos;
    gml_attn_graph_opts graph;
} gml_attn_config;

/* ---- weights and inputs ------------------------------------------------- */

/* Parameters, PyTorch layouts. Either w_q, w_k, w_v (separate nn.Linear) or
 * in_proj_weight (nn.MultiheadAttention's packed q|k|v rows, used through
 * views, never copied). Biases are optional (NULL); in_proj_bias may also
 * go with separate w_q, w_k, w_v (nn.MultiheadAttention with kdim/vdim). Any strides: GPT-2's
 * Conv1D weights, stored [in, out] (c_attn.weight [D, 3D] with q|k|v
 * columns, c_proj.weight [D, D]), go in as gml_transpose views:
 * in_proj_weight = transpose(c_attn.weight), in_proj_bias = c_attn.bias,
 * w_o = transpose(c_proj.weight), b_o = c_proj.bias. */
typedef struct gml_attn_weights {
    gml_tensor *w_q, *b_q;      /* [D, D], [D] */
    gml_tensor *w_k, *b_k;      /* [G*d_k, kdim], [G*d_k]  (kdim: the key's last dim) */
    gml_tensor *w_v, *b_v;      /* [G*d_k, vdim], [G*d_k]  (vdim: the value's last dim) */
    gml_tensor *w_o, *b_o;      /* [D, D], [D]  (out_proj.weight, out_proj.bias) */
    gml_tensor *in_proj_weight; /* [D + 2*G*d_k, D]: rows of w_q, then w_k, then w_v */
    gml_tensor *in_proj_bias;   /* [D + 2*G*d_k] */
    gml_tensor *rel_k, *rel_v;  /* [2P+1, d_k], shared by all heads (rel_v optional) */
    gml_tensor *sinks;          /* [H] attention sinks (gpt-oss): one extra logit per head
                                 * in the softmax's denominator, no value; or NULL */
    gml_tensor *bias_k, *bias_v; /* [1, 1, G*d_k] (or [G*d_k]) nn.MultiheadAttention's
                                 * add_bias_kv: one key and value row appended after the
                                 * projected keys; both or neither (gml_mha, gml_gqa only) */
    bool conv1d; /* in_proj_weight and w_o are stored [in, out] (GPT-2's Conv1D: c_attn.weight
                  * [D, 3D], c_proj.weight [D, D]): the blocks read them transposed. Square
                  * c_proj is why this is a flag and not a guess from the shape. */
} gml_attn_weights;

/* Extra key rows (PyTorch's add_bias_kv and add_zero_attn), as
 * nn.MultiheadAttention: after the projections, k = cat([k, bias_k]) and
 * v = cat([v, bias_v]) along the keys (bias_k repeated over the batch),
 * then, with add_zero_attn, one zero row more in each. Tk grows by n (1 or
 * 2) and the masks are extended by n visible columns, as PyTorch pads
 * attn_mask and key_padding_mask with zeros: every query sees the extra
 * rows whatever its valid length, causal position or mask (an additive
 * mask whose last dim is 1 applies to them as to every key). The blocks
 * then attend with one additive mask made of the valid lengths, causal and
 * in.mask ([B|1, 1, Tq|1, Tk + n]); window, ALiBi, and causal with
 * in.positions are refused with extra rows, as is causal with Tq > Tk + 1
 * (Tq > Tk top-left). The weights are [B, H, Tq, Tk + n]. Graphs of ops
 * only (get_rows repeats bias_k, concat appends). The public stages do not
 * add the rows: gml_attn_project refuses bias_k/bias_v, gml_attn_attend
 * refuses add_zero_attn. */

typedef struct gml_attn_inputs {
    gml_tensor *query;      /* [B, Tq, D] f32, any strides */
    gml_tensor *key;        /* [B, Tk, kdim] (kdim = D, or w_k's columns with separate
                             * weights); NULL = self-attention (key = value = query) */
    gml_tensor *value;      /* [B, Tk, vdim] (as kdim, from w_v); NULL = the key */
    gml_tensor *valid_lens; /* i32 [B] or [B, Tq] (per query): key j seen iff j < len; or NULL */
    gml_tensor *mask;       /* f32 additive (0 keep, -inf drop), broadcastable to
                             * [B, H, Tq, Tk] ([Tq, Tk], [B, 1, 1, Tk], ...), or NULL */
    gml_tensor *positions;  /* i32 [B, Tq]: absolute position of each query, or NULL:
                             * Tk - Tq + i (i with top-left causal). Keys sit at 0 .. Tk-1;
                             * in self-attention (key NULL) rope gives the keys the
                             * queries' positions. Used by rope, causal, window, ALiBi. */
} gml_attn_inputs;

typedef struct gml_attn_result {
    gml_tensor *out;     /* [B, Tq, D], named "out" */
    gml_tensor *weights; /* [B, H, Tq, Tk], named "attn", with cfg.graph.want_weights;
                          * else NULL */
} gml_attn_result;

/* ---- blocks ------------------------------------------------------------- */

/* Multi-head attention (G must equal H; rel_k/rel_v are ignored). */
GML_API gml_attn_result gml_mha(gml_context *ctx, gml_attn_config cfg, const gml_attn_weights *w,
                                gml_attn_inputs in);

/* Grouped-query attention: H query heads share G key/value heads; G = 1 is
 * multi-query attention, G = H is gml_mha. cfg.graph.gqa_form picks the
 * unfused graph's form. */
GML_API gml_attn_result gml_gqa(gml_context *ctx, gml_attn_config cfg, const gml_attn_weights *w,
                                gml_attn_inputs in);

/* Shaw et al. (2018) relative-position attention, with P = max_rel and
 * a^K_ij = rel_k[clip(j - i, -P, P) + P] (a^V likewise from rel_v):
 *     e_ij = (q_i . k_j + q_i . a^K_ij) / sqrt(d_k)
 *     z_i  = sum_j attn_ij (v_j + a^V_ij)
 * rel_k is required, rel_v optional. G < H works as in gml_gqa. Unfused
 * only; the scoring options apply to e_ij as to the other blocks' scores. */
GML_API gml_attn_result gml_relpos_attn(gml_context *ctx, gml_attn_config cfg, int max_rel,
                                        const gml_attn_weights *w, gml_attn_inputs in);

/* ---- stages --------------------------------------------------------------- */

/* The projected heads: views of the projections, no copies. */
typedef struct gml_attn_qkv {
    gml_tensor *q; /* [B, H, Tq, d_k] */
    gml_tensor *k; /* [B, G, Tk, d_k] */
    gml_tensor *v; /* [B, G, Tk, d_k] */
} gml_attn_qkv;

/* What attending gives: the context of every head and, when
 * cfg.graph.want_weights asks (so from the unfused graph), the weights. */
typedef struct gml_attn_heads {
    gml_tensor *heads;   /* [B, H, Tq, d_k] */
    gml_tensor *weights; /* [B, H, Tq, Tk], named "attn", with want_weights; else NULL */
} gml_attn_heads;

/* Stage 1: in.query, in.key, in.value -> q, k, v heads through W_q, W_k, W_v
 * (cfg.dims; the other inputs are not used). On failure all three are
 * NULL and ctx holds the message ("attn_project: ..."). */
GML_API gml_attn_qkv gml_attn_project(gml_context *ctx, const gml_attn_config *cfg,
                                      const gml_attn_weights *w, gml_attn_inputs in);

/* Stage 2: cfg.pos applied to q and k (rope at in.positions, or the default
 * positions; see gml_attn_inputs); v unchanged. With GML_POS_NONE, qkv as
 * given. Shapes are read from qkv; in gives positions and whether the block
 * is self-attention (in.key NULL). */
GML_API gml_attn_qkv gml_attn_position(gml_context *ctx, const gml_attn_config *cfg,
                                       gml_attn_qkv qkv, gml_attn_inputs in);

/* Stage 3: softmax(q k^T * scale + masks) v per head, with cfg.score and
 * cfg.graph, the masks in.valid_lens, in.mask, in.positions, and sinks
 * ([H] or NULL). q [B, H, Tq, d_k], k [B, G, Tk, d_k], v [B, G, Tk, d_k],
 * any strides (G divides H; query head h reads kv head h / (H/G)). */
GML_API gml_attn_heads gml_attn_attend(gml_context *ctx, const gml_attn_config *cfg,
                                       gml_attn_qkv qkv, gml_attn_inputs in, gml_tensor *sinks);

/* Stage 4: heads [B, H, Tq, d_k] -> [B, Tq, H*d_k] -> W_o^T + b_o -> out
 * [B, Tq, D], named "out" (a copy only when the heads are not already
 * stored [B, Tq, H, d_k], as the fused graph stores them). */
GML_API gml_tensor *gml_attn_merge(gml_context *ctx, const gml_attn_weights *w, gml_tensor *heads);

/* Binds *w to the tensors of wctx (e.g. from gml_load_safetensors) by the
 * names of one of these conventions (.weight and .bias each):
 *   fixtures   w_q, w_k, w_v, w_o
 *   PyTorch    nn.MultiheadAttention's state_dict: in_proj_weight, in_proj_bias,
 *              q_proj_weight, k_proj_weight, v_proj_weight (kdim/vdim),
 *              bias_k, bias_v (add_bias_kv), out_proj.*
 *   HF         q_proj, k_proj, v_proj, o_proj (LLaMA, Mistral, OPT, ...)
 *   BERT       attention.self.query, .key, .value, attention.output.dense
 *   GPT-2      attn.c_attn (Conv1D [D, 3D], q|k|v columns), attn.c_proj (Conv1D
 *              [D, D]): bound as in_proj_weight, in_proj_bias, w_o, b_o with
 *              w->conv1d set (transposed by the blocks, by the name: c_proj
 *              is square)
 * each name optionally under "self_attn." or "attn." (BERT's and GPT-2's
 * carry their own), plus rel_k.weight, rel_v.weight and sinks with any of
 * them. Shapes are checked by the blocks. GML_ERR_INVALID, with a message
 * listing the names present, when the projections are missing, given both
 * ways, or two conventions mix. gml_attn_weight_name_known tells a
 * name it accepts (for a loader's unused-tensor check). */
GML_API gml_status gml_attn_weights_find(gml_context *wctx, gml_attn_weights *w, char *err,
                                         size_t err_size);

/* Whether gml_attn_weights_find would bind the tensor called name. */
GML_API bool gml_attn_weight_name_known(const char *name);

/* Parameters of the four projections: 4 D^2 (+ 4 D with bias) for MHA;
 * 2 D^2 + 2 D G d_k (+ 2 D + 2 G d_k) for GQA. -1 if D % H or H % G. */
GML_API int64_t gml_mha_param_count(int64_t d_model, int n_heads, bool bias);
GML_API int64_t gml_gqa_param_count(int64_t d_model, int n_heads, int n_kv_heads, bool bias);

#ifdef __cplusplus
}
#endif
#endif /* GGMLITE_ATTENTION_H */
