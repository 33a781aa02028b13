/*
 * Training a language model (<ggmlite/lm.h>): a trainer owns one training
 * step as a graph, built and planned once, computed each step:
 *
 *   tokens i32 [B, T] -> logits = gml_lm_logits(lm, tokens)       [B, T, V]
 *   loss = gml_cross_entropy(logits, targets i32 [B, T])           [1]
 *   grads = gml_grad(loss) over every parameter                    (each its param's shape)
 *
 * then gml_optim_step (<ggmlite/optim.h>) updates the parameters in place
 * from those gradients. As PyTorch's
 *
 *   opt.zero_grad(); loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten());
 *   loss.backward(); clip_grad_norm_(params, c); opt.step()
 *
 * with the parameters in one group. The parameters are the f32 tensors of
 * the weights' context (the one gml_lm_find bound lm in; every tensor of it
 * must be f32 with data, an allocating context such as gml_load_safetensors
 * makes) that the loss depends on; a tensor it does not depend on (a
 * buffer a checkpoint carries, GPT-2's attn.bias) is not a parameter and
 * stays as it is. A tied head is one parameter: its gradient is the sum of
 * the embedding's and the head's contributions.
 *
 * Deterministic: the loss, the gradients and the update are the same bits at
 * every thread count (gml_grad's fixed order, gml_optim_step's).
 *
 *     gml_context *w = gml_load_safetensors("init.safetensors", err, sizeof err);
 *     gml_lm lm;
 *     gml_lm_find(w, &(gml_lm_config){.arch = GML_LM_GPT2, .gpt2.n_heads = 8}, &lm, err,
 *                 sizeof err);
 *     gml_trainer *tr = gml_trainer_new(&lm, w, &(gml_trainer_config){
 *         .batch = 4, .seq = 256, .optim = gml_optim_defaults(GML_OPTIM_ADAMW)}, err, sizeof err);
 *     for (int s = 0; s < steps; s++)
 *         if (gml_trainer_step(tr, x[s], y[s], 4, &loss) != GML_OK) puts(gml_trainer_error(tr));
 *     gml_save_safetensors("out.safetensors", ...the tensors of w..., err, sizeof err);
 *     gml_trainer_free(tr); gml_lm_free(&lm); gml_free(w);
 *
 * docs/training.md shows it whole. Misuse: NULL arguments are refused with
 * a message naming the function and the argument, never a crash.
 */
#ifndef GGMLITE_TRAIN_H
#define GGMLITE_TRAIN_H

#include <ggmlite/lm.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gml_trainer_config {
    int64_t batch, seq;     /* B, T: every step's tokens and targets are [B, T] */
    gml_optim_params optim; /* gml_optim_defaults(kind), then set what differs */
} gml_trainer_config;

typedef struct gml_trainer gml_trainer;

/* Builds the step's graph (in a no_alloc context of its own), plans it, and
 * makes the optimizer over the parameters (its state zeroed: the first step
 * is PyTorch's first). lm's tensors must be wctx's. NULL with a message in
 * err (when given): a tensor of wctx that is not f32 or has no data (named,
 * with its type), lm's builders' errors (the tensor, its shape and what was
 * expected), a GPT-2 whose position table is shorter than seq, B or T < 1,
 * the optimizer's parameters out of range (gml_optim_new's message), no
 * memory. lm and wctx must outlive the trainer. */
GML_API gml_trainer *gml_trainer_new(const gml_lm *lm, gml_context *wctx,
                                     const gml_trainer_config *cfg, char *err, size_t err_size);

/* One step: tokens and targets i32 [B, T] (row-major, contiguous); the loss
 * of the parameters as they are (before the update) into *loss (may be
 * NULL), then the update. A token or target outside [0, V) is refused before
 * anything is computed: "gml_trainer_step: target 5000 at [1, 17] is outside
 * [0, V) (V = 4096)". On any error (GML_ERR_INVALID, the message by
 * gml_trainer_error) the parameters are as they were, unless the optimizer
 * itself failed. n_threads: 1 to GML_MAX_THREADS. */
GML_API gml_status gml_trainer_step(gml_trainer *tr, const int32_t *tokens, const int32_t *targets,
                                    int n_threads, float *loss);

/* The parameters (wctx's tensors the loss depends on, in wctx's order). */
GML_API int gml_trainer_n_params(const gml_trainer *tr);
GML_API gml_tensor *gml_trainer_param(const gml_trainer *tr, int i); /* NULL outside [0, n) */
/* The last step's gradient of parameter i, f32 contiguous of its shape,
 * before any clipping (its data valid until the next step or the trainer's
 * free); NULL outside [0, n) or before the first step. */
GML_API const gml_tensor *gml_trainer_grad(const gml_trainer *tr, int i);
/* The global L2 norm of the last step's gradients (before clipping); 0
 * before the first step. */
GML_API float gml_trainer_grad_norm(const gml_trainer *tr);
/* The step's graph (planned): its nodes, gml_graph_plan_peak, its flops. */
GML_API const gml_graph *gml_trainer_graph(const gml_trainer *tr);
/* The last failed step's message ("" when none; tr NULL: the thread's). */
GML_API const char *gml_trainer_error(const gml_trainer *tr);
/* Frees the graph, its context and the optimizer's state, not lm nor wctx. */
GML_API void gml_trainer_free(gml_trainer *tr);

#ifdef __cplusplus
}
#endif
#endif /* GGMLITE_TRAIN_H */
