/* The optimizers' elementwise updates (ggmlite/optim.c) as micro-kernels
 * over contiguous runs (ops/optim.inc lists the variants): each element is
 * updated by the f32 operations of torch.optim's single-tensor loops (1.13),
 * one rounding each, in the order written at each kernel, no multiply and
 * add fused (the sources are compiled with -ffp-contract=off and the vector
 * variants use no gml_vf_fma). So every variant gives the scalar one's bits,
 * on every ISA, for any split of the elements into runs. */
#ifndef GGMLITE_OPS_OPTIM_H
#define GGMLITE_OPS_OPTIM_H

#include "ukernels.h"

#include "optim.inc"

/* AdamW's scalars, in f32 as PyTorch's kernels take them: coef the clipping
 * factor (1 without clipping), decay = 1 - lr wd, b1 = beta1, omb1 = 1 -
 * beta1, b2 = beta2, omb2 = 1 - beta2, neg_step = -lr / (1 - beta1^t),
 * bc2_sqrt = sqrt(1 - beta2^t), eps. */
typedef struct gml_adamw_scalars {
    float coef, decay, b1, omb1, b2, omb2, neg_step, bc2_sqrt, eps;
} gml_adamw_scalars;

/* For i < n (n >= 0), in this order, with s's scalars:
 *     g = g[i] coef;  p = p[i] decay                 grad, param.mul_(1 - lr wd)
 *     m = m[i] b1;  m = m + omb1 g                   exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
 *     v = v[i] b2;  v = v + (omb2 g) g               exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)
 *     d = sqrt(v) / bc2_sqrt + eps                   denom
 *     p = p + (neg_step m) / d                       param.addcdiv_(exp_avg, denom, value=-step_size)
 *     m[i] = m, v[i] = v, p[i] = p
 * p, m and v are updated in place; g is read only. */
typedef void gml_f32_adamw_ukernel(size_t n, const gml_adamw_scalars *s, float *p, const float *g,
                                   float *m, float *v);

/* SGD's scalars: coef as AdamW's, wd the weight decay, mom the momentum,
 * omdamp = 1 - dampening, neg_lr = -lr; first: the step that starts the
 * momentum buffer; nesterov. */
typedef struct gml_sgd_scalars {
    float coef, wd, mom, omdamp, neg_lr;
    bool first, nesterov;
} gml_sgd_scalars;

/* For i < n (n >= 0), in this order:
 *     d = g[i] coef;  if wd != 0: d = d + wd p[i]    d_p.add(param, alpha=wd)
 *     with momentum (m not NULL):
 *         b = first ? d : m[i] mom + omdamp d        buf.mul_(momentum).add_(d_p, alpha=1 - dampening)
 *         m[i] = b;  d = nesterov ? d + mom b : b
 *     p[i] = p[i] + neg_lr d                         param.add_(d_p, alpha=-lr)
 * (wd == 0 skips the add: wd p would turn an infinite p into NaN.) */
typedef void gml_f32_sgd_ukernel(size_t n, const gml_sgd_scalars *s, float *p, const float *g,
                                 float *m);

#define GML_DECLARE_ADAMW(isa, fn, tile) gml_f32_adamw_ukernel fn;
#define GML_DECLARE_SGD(isa, fn, tile) gml_f32_sgd_ukernel fn;
GML_F32_ADAMW_UKERNELS(GML_DECLARE_ADAMW)
GML_F32_SGD_UKERNELS(GML_DECLARE_SGD)

#endif /* GGMLITE_OPS_OPTIM_H */
