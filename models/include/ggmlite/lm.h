/*
 * Whole language models producing logits: GPT-2 and LLaMA, built from the
 * layers of layers.h (gml_gpt2_layer, gml_llama_layer) and the engine's ops,
 * computed as Hugging Face's GPT2LMHeadModel and LlamaForCausalLM compute
 * them in float32, with weights bound by their state_dict names.
 *
 * Shapes outermost first (ggmlite.h): tokens i32 [B, T] -> logits f32
 * [B, T, V]; D = d_model, V = the vocabulary.
 *
 *   GPT-2  x = wte[tokens] + wpe[0..T-1]                      [B, T, D]
 *          x = h.<i>(x) for each layer i (gml_gpt2_layer)
 *          logits = ln_f(x) @ head^T                         [B, T, V]
 *   LLaMA  x = embed_tokens[tokens]
 *          x = layers.<i>(x) for each layer i (gml_llama_layer, rope at 0..T-1)
 *          logits = norm(x) @ head^T                          (RMSNorm)
 *   head = lm_head.weight [V, D], or the token embedding when the weights
 *   have no lm_head.weight (tied, as HF's tie_word_embeddings).
 *
 * Names (gml_lm_find), each under an optional prefix ("transformer." for
 * GPT-2, "model." for LLaMA; lm_head.weight is never prefixed, as in HF's
 * state_dict):
 *   GPT-2  wte.weight [V, D], wpe.weight [n_ctx, D], h.<i>.* (the names of
 *          gml_gpt2_weights_find), ln_f.weight [D], ln_f.bias [D],
 *          lm_head.weight [V, D] (optional)
 *   LLaMA  embed_tokens.weight [V, D], layers.<i>.* (gml_llama_weights_find),
 *          norm.weight [D], lm_head.weight [V, D] (optional)
 * The layers are counted: i runs 0..n_layers-1 with none missing. Strict:
 * every tensor of the weights' context must be one of these.
 *
 * Errors: gml_lm_find returns GML_ERR_INVALID with a message in err naming
 * the tensors missing, the ones it does not know, or a tensor of the wrong
 * shape; gml_lm_logits returns NULL with a message on ctx (a layer's own
 * messages name the layer: "gpt2 lm: h.1: gpt2: ln_1.weight is ...").
 * Misuse: NULL arguments are refused naming the function and the argument
 * (attention.h, "Misuse").
 */
#ifndef GGMLITE_LM_H
#define GGMLITE_LM_H

#include <ggmlite/layers.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gml_lm_arch { GML_LM_GPT2, GML_LM_LLAMA } gml_lm_arch;

typedef struct gml_lm_config {
    gml_lm_arch arch;
    gml_gpt2_config gpt2;   /* n_heads, eps (also ln_f's) */
    gml_llama_config llama; /* n_heads, n_kv_heads, rope_theta, rms_eps (also norm's) */
} gml_lm_config;

typedef struct gml_lm {             /* tensors of the weights' context */
    gml_lm_config cfg;
    int n_layers;
    int64_t n_vocab, d_model, n_ctx; /* n_ctx: wpe rows (GPT-2), 0 = unbounded */
    gml_tensor *tok_emb, *pos_emb;   /* wte / embed_tokens [V, D]; wpe [n_ctx, D] (GPT-2) */
    gml_gpt2_weights *gpt2;          /* [n_layers] (malloc'd) or NULL */
    gml_llama_weights *llama;        /* [n_layers] or NULL */
    gml_tensor *norm_w, *norm_b;     /* ln_f.{weight,bias} / model.norm.weight (norm_b NULL) */
    gml_tensor *head;                /* lm_head.weight [V, D], or tok_emb when tied */
} gml_lm;

/* Binds *lm to the tensors of wctx by their HF names (above) for
 * cfg->arch, copies *cfg into lm->cfg and sets the sizes. GML_OK, or
 * GML_ERR_INVALID with a message in err (err may be NULL, err_size 0) and
 * *lm zeroed: missing tensors and unknown ones listed by name, no layer
 * h.0 / layers.0, a gap in the layers, a top-level tensor of the wrong
 * shape or type. Layer shapes are checked by the layer builders
 * (gml_lm_logits). GML_ERR_NOMEM when the layers' arrays cannot be
 * allocated. Free with gml_lm_free. */
GML_API gml_status gml_lm_find(gml_context *wctx, const gml_lm_config *cfg, gml_lm *lm,
                               char *err, size_t err_size);

/* tokens i32 [B, T] (any strides) -> logits f32 [B, T, V] (a node of ctx).
 * GPT-2 needs T <= n_ctx. A token outside [0, V) fails compute (get_rows
 * names it). NULL with a message on ctx when the model or the tokens are
 * not usable (names and shapes in the message). Builds only; lm's tensors
 * may live in another context (wctx), which must stay alive. */
GML_API gml_tensor *gml_lm_logits(gml_context *ctx, const gml_lm *lm, gml_tensor *tokens);

/* Frees lm's layer arrays (not the tensors) and zeroes *lm. NULL: nothing. */
GML_API void gml_lm_free(gml_lm *lm);

#ifdef __cplusplus
}
#endif
#endif /* GGMLITE_LM_H */
