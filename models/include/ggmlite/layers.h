/*
 * Whole transformer layers built from ggmlite's public ops and the attention
 * stages of attention.h (project, position, attend, merge): a LLaMA-style
 * decoder layer, a GPT-2 layer and a BERT layer, computed the way Hugging
 * Face's modeling_llama, modeling_gpt2 and modeling_bert compute them (in
 * float32), with weights bound by the names of their state_dict.
 *
 * Shapes outermost first (ggmlite.h): x [B, T, D] -> [B, T, D]. H query heads,
 * G key/value heads (LLaMA), hd = the head size.
 *
 *   LLaMA  h   = x + o_proj(attn(rope(q_proj(rms(x))), rope(k_proj(rms(x))), v_proj(rms(x))))
 *          out = h + down_proj(silu(gate_proj(rms2(h))) * up_proj(rms2(h)))
 *          rms: RMSNorm (x * rsqrt(mean(x^2) + eps) * w, float32); rope:
 *          rotate_half at the given positions, theta; attention causal,
 *          scaled by hd^-0.5, kv head i / (H/G) for query head i (repeat_kv).
 *   GPT-2  h   = x + c_proj(attn(c_attn(ln_1(x))))          (causal)
 *          out = h + mlp.c_proj(gelu_tanh(mlp.c_fc(ln_2(h))))
 *          Conv1D weights are [in, out]: y = x @ W + b (the attention's as
 *          transposed views, no copy).
 *   BERT   a   = LayerNorm(x + dense(attn(query(x), key(x), value(x))))
 *          out = LayerNorm(a + output.dense(gelu(intermediate.dense(a))))
 *          (post-LN); keys j >= valid_lens[b] are masked (padding; a
 *          length of 0 attends uniformly over all keys, as HF's finite mask).
 *
 * Options of the LLaMA layer (gpt-oss, Mistral, Gemma 2 style), the
 * attention stages' scoring options (fused: one gml_flash_attn_ext):
 *   sinks   self_attn.sinks [H]: one extra logit per head in each softmax
 *           row's denominator (the row's weights sum to less than 1);
 *   softcap scores = softcap * tanh(scores / softcap), after the scaling;
 *   window  query i sees key j iff 0 <= i - j < window (sliding window).
 *
 * Errors: a builder given what it cannot use returns NULL and records a
 * message on ctx naming the layer, the tensor (by its HF name) and the shapes,
 * e.g. "llama: self_attn.k_proj.weight is f32 [16,48], expected f32 [24,48] ([G*hd, D])".
 * Builders never touch tensor data: graphs build in no_alloc contexts.
 *
 * Misuse: NULL arguments are refused with a message naming the function
 * and the argument, never a crash (attention.h, "Misuse", states the rule).
 */
#ifndef GGMLITE_LAYERS_H
#define GGMLITE_LAYERS_H

#include <ggmlite/kv_cache.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- LLaMA -------------------------------------------------------------- */

typedef struct gml_llama_config {
    int n_heads;      /* H (required) */
    int n_kv_heads;   /* G, divides H; 0 = H. The head size hd is D / H */
    float rope_theta; /* 0 = 10000 */
    float rms_eps;    /* RMSNorm eps; 0 = 1e-6 */
    int64_t window;   /* sliding window (keys seen, itself included); 0 = none */
    float softcap;    /* attention logit soft-capping; 0 = none */
} gml_llama_config;

/* Hugging Face names under the layer's prefix (model.layers.<i>.) */
typedef struct gml_llama_weights {
    gml_tensor *attn_norm;        /* input_layernorm.weight [D] */
    gml_tensor *wq, *bq;          /* self_attn.q_proj.{weight,bias} [H*hd, D], [H*hd] */
    gml_tensor *wk, *bk;          /* self_attn.k_proj.{weight,bias} [G*hd, D], [G*hd] */
    gml_tensor *wv, *bv;          /* self_attn.v_proj.{weight,bias} [G*hd, D], [G*hd] */
    gml_tensor *wo, *bo;          /* self_attn.o_proj.{weight,bias} [D, H*hd], [D] */
    gml_tensor *sinks;            /* self_attn.sinks [H], optional */
    gml_tensor *mlp_norm;         /* post_attention_layernorm.weight [D] */
    gml_tensor *w_gate, *b_gate;  /* mlp.gate_proj.{weight,bias} [F, D], [F] */
    gml_tensor *w_up, *b_up;      /* mlp.up_proj.{weight,bias} [F, D], [F] */
    gml_tensor *w_down, *b_down;  /* mlp.down_proj.{weight,bias} [D, F], [D] */
} gml_llama_weights;

/* One decoder layer: x f32 [B, T, D] (any strides) -> [B, T, D], causal,
 * rope at positions 0..T-1 (positions NULL), or at positions i32 [B, T]
 * given to the attention stages as in.positions (attention.h: rope at them
 * for queries and keys; causality and the window compare each query's
 * position with the key indices 0..T-1). */
GML_API gml_tensor *gml_llama_layer(gml_context *ctx, const gml_llama_config *cfg,
                                    const gml_llama_weights *w, gml_tensor *x,
                                    gml_tensor *positions);

/* The same layer as a KV-cache decode step (kv_cache.h): x [B, n, D], the
 * step's n new tokens -> [B, n, D]. Their keys and values, rope'd at the
 * step's run-time positions (step->pos), are appended to the cache of
 * `layer`; the queries attend over everything cached. Build the step graph
 * once (every layer on one step) and run it with gml_kv_step_compute.
 * The cache's kv heads and d_k must be G and hd. Its attention is
 * gml_attn_decode's. */
GML_API gml_tensor *gml_llama_decode(gml_context *ctx, const gml_llama_config *cfg,
                                     const gml_llama_weights *w, gml_tensor *x,
                                     const gml_kv_step *step, int layer);

/* ---- GPT-2 -------------------------------------------------------------- */

typedef struct gml_gpt2_config {
    int n_heads; /* H, divides D (required) */
    float eps;   /* layer_norm_epsilon; 0 = 1e-5 */
} gml_gpt2_config;

typedef struct gml_gpt2_weights {
    gml_tensor *ln1_w, *ln1_b;     /* ln_1.{weight,bias} [D] */
    gml_tensor *attn_w, *attn_b;   /* attn.c_attn.{weight,bias} [D, 3D], [3D] (Conv1D) */
    gml_tensor *proj_w, *proj_b;   /* attn.c_proj.{weight,bias} [D, D], [D] */
    gml_tensor *ln2_w, *ln2_b;     /* ln_2.{weight,bias} [D] */
    gml_tensor *fc_w, *fc_b;       /* mlp.c_fc.{weight,bias} [D, F], [F] (F = 4D usually) */
    gml_tensor *mproj_w, *mproj_b; /* mlp.c_proj.{weight,bias} [F, D], [D] */
} gml_gpt2_weights;

/* x f32 [B, T, D] -> [B, T, D], causal. */
GML_API gml_tensor *gml_gpt2_layer(gml_context *ctx, const gml_gpt2_config *cfg,
                                   const gml_gpt2_weights *w, gml_tensor *x);

/* ---- BERT --------------------------------------------------------------- */

typedef struct gml_bert_config {
    int n_heads; /* H, divides D (required) */
    float eps;   /* layer_norm_eps; 0 = 1e-12 */
} gml_bert_config;

typedef struct gml_bert_weights {
    gml_tensor *wq, *bq, *wk, *bk, *wv, *bv; /* attention.self.{query,key,value}.{weight,bias} */
    gml_tensor *wo, *bo;                     /* attention.output.dense.{weight,bias} [D, D] */
    gml_tensor *ln1_w, *ln1_b;               /* attention.output.LayerNorm.{weight,bias} */
    gml_tensor *wi, *bi;                     /* intermediate.dense.{weight,bias} [F, D], [F] */
    gml_tensor *wout, *bout;                 /* output.dense.{weight,bias} [D, F], [D] */
    gml_tensor *ln2_w, *ln2_b;               /* output.LayerNorm.{weight,bias} */
} gml_bert_weights;

/* x f32 [B, T, D] -> [B, T, D]; valid_lens i32 [B] (keys j >= len are
 * padding, as HF's attention_mask of len ones then zeros; 0 <= len <= T) or
 * NULL. HF adds finfo(float32).min to padded keys, we drop them: the same
 * weights whenever a row sees a key (len >= 1). An item of length 0 is
 * computed as HF computes it: its finite mask makes every score of a row the
 * same float, so each query attends uniformly over all T keys (the mean of
 * v over T), not the zeros of the engine's rule for a row with no visible
 * key (which flash_attn and the attention blocks keep). */
GML_API gml_tensor *gml_bert_layer(gml_context *ctx, const gml_bert_config *cfg,
                                   const gml_bert_weights *w, gml_tensor *x,
                                   gml_tensor *valid_lens);

/* ---- weights by Hugging Face name ---------------------------------------- */

/* Bind *w to the tensors of wctx named prefix + the HF names above (prefix
 * "" or e.g. "model.layers.3."). Strict: GML_ERR_INVALID with a message in
 * err when a required tensor is missing or a tensor under prefix is not one
 * the layer knows (both listed by name). Shapes are checked by the builders.
 * Buffers older checkpoints hold are known and unused: LLaMA's
 * self_attn.rotary_emb.inv_freq (rope is computed from the config's theta),
 * GPT-2's attn.bias and attn.masked_bias (causal masks). */
GML_API gml_status gml_llama_weights_find(gml_context *wctx, const char *prefix,
                                          gml_llama_weights *w, char *err, size_t err_size);
GML_API gml_status gml_gpt2_weights_find(gml_context *wctx, const char *prefix, gml_gpt2_weights *w,
                                         char *err, size_t err_size);
GML_API gml_status gml_bert_weights_find(gml_context *wctx, const char *prefix, gml_bert_weights *w,
                                         char *err, size_t err_size);

#ifdef __cplusplus
}
#endif
#endif /* GGMLITE_LAYERS_H */
