/* ggmlite's optimizers: SGD and AdamW with torch.optim's semantics, and
 * global-norm gradient clipping as torch.nn.utils.clip_grad_norm_. The
 * library keeps their state (ggmlite/optim.c). Part of <ggmlite/ggmlite.h>,
 * which includes it. The update rules written out, and what differs from
 * PyTorch: docs/training.md.
 *
 *     gml_optim_params op = gml_optim_defaults(GML_OPTIM_ADAMW);
 *     op.lr = 3e-4f;
 *     op.clip_grad_norm = 1.0f;
 *     char err[256];
 *     gml_optim *o = gml_optim_new(&op, params, n, err, sizeof err);
 *     if (!o) fprintf(stderr, "%s\n", err);
 *     for (step...) {
 *         ... compute the graph holding loss and grads[i] = dloss/dparams[i] ...
 *         if (gml_optim_step(o, grads, n_threads, &norm) != GML_OK)
 *             fprintf(stderr, "%s\n", gml_optim_error(o));
 *     }
 *     gml_optim_free(o);
 */
#ifndef GGMLITE_OPTIM_H
#define GGMLITE_OPTIM_H

#include <ggmlite/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gml_optimizer { GML_OPTIM_SGD, GML_OPTIM_ADAMW } gml_optimizer;

/* The hyper-parameters, named as torch.optim names them. Each float is
 * taken as the shortest decimal that reads back as it (0.9f as 0.9), as
 * Python would hold the number written, and the update's scalars
 * (1 - beta1, the bias corrections, lr / (1 - beta1^t), ...) are computed
 * from those in double, as PyTorch computes them. */
typedef struct gml_optim_params {
    gml_optimizer kind;
    float lr;
    float beta1, beta2, eps;          /* AdamW */
    float weight_decay;               /* AdamW: decoupled; SGD: L2 added to the grad */
    float momentum, dampening;        /* SGD */
    bool nesterov;                    /* SGD */
    float clip_grad_norm;             /* > 0: clip the global L2 norm first (torch.nn.utils.clip_grad_norm_) */
} gml_optim_params;

/* torch.optim's defaults for kind: AdamW lr 1e-3, betas 0.9, 0.999, eps
 * 1e-8, weight_decay 1e-2; SGD lr 1e-3 (torch 1.13 has no default: pass
 * yours), momentum, dampening and weight_decay 0, no nesterov. No clipping
 * (clip_grad_norm 0). Another kind: zeros but kind. */
GML_API gml_optim_params gml_optim_defaults(gml_optimizer kind);

typedef struct gml_optim gml_optim;

/* An optimizer over params[0..n_params-1] (one parameter group): f32
 * tensors with data (any strides, no two sharing an element), which each
 * step updates in place. Its state (AdamW's exp_avg and exp_avg_sq, SGD's
 * momentum buffers) is malloc'd here, zeros, f32 of each parameter's
 * element count, and the step count starts at 0. The tensors must outlive
 * it. NULL, with a message in err (err_size bytes; err may be NULL) naming
 * gml_optim_new and what is wrong, when: p or params is NULL, n_params < 1,
 * a parameter is NULL, not f32, has no data or shares memory with another;
 * a hyper-parameter is out of torch's range (lr, eps, weight_decay,
 * momentum, dampening, clip_grad_norm < 0 or not finite; a beta outside
 * [0, 1)); nesterov without momentum or with dampening; an unknown kind;
 * malloc failed. */
GML_API gml_optim *gml_optim_new(const gml_optim_params *p, gml_tensor *const *params, int n_params,
                                 char *err, size_t err_size);

/* One update of every parameter from its gradient grads[i] (f32, of
 * params[i]'s shape, any strides, computed): as torch's
 *     clip_grad_norm_(params, clip_grad_norm)   (when clip_grad_norm > 0)
 *     optimizer.step()
 * on n_threads threads (< 1: 1). *grad_norm (grad_norm may be NULL): the
 * global L2 norm of the gradients before clipping, each square summed in
 * double in a fixed order, rounded once; the update is elementwise, so
 * params and state are the same bits at every n_threads. The gradients are
 * read, never written (clipping scales them as they are read).
 * A graph planned in a no_alloc context computes its nodes in its own
 * buffer, their headers without data: pass the graph's copies,
 * (gml_tensor *)gml_graph_tensor(g, grads[i]) (the step only reads them).
 * GML_ERR_INVALID, nothing updated, the message for gml_optim_error: o or
 * grads NULL, a gradient NULL, not f32, of another shape than its
 * parameter (both named with their shapes) or without data.
 * GML_ERR_NONFINITE, nothing updated: the global norm is not finite (a NaN
 * or an infinity in a gradient; the message names the first such
 * parameter and where): PyTorch would write NaNs into the parameters. */
GML_API gml_status gml_optim_step(gml_optim *o, gml_tensor *const *grads, int n_threads,
                                  float *grad_norm);

/* The steps taken so far (successful gml_optim_step calls); -1 for NULL. */
GML_API int64_t gml_optim_steps(const gml_optim *o);

/* The last step's message, "" when none; o NULL: "gml_optim_error: o is NULL". */
GML_API const char *gml_optim_error(const gml_optim *o);

/* Frees o and its state (not the parameters); NULL does nothing. */
GML_API void gml_optim_free(gml_optim *o);

#ifdef __cplusplus
}
#endif

#endif /* GGMLITE_OPTIM_H */
