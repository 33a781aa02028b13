/* The scalar variants of the optimizers' updates (ops/optim.h): the
 * reference every vector variant (ops/optim_simd.c) matches bit for bit.
 * Compiled with -ffp-contract=off (CMakeLists.txt): each multiply and add
 * rounds on its own. */
#include "optim.h"

#include <math.h>

void gml_f32_adamw_ukernel__scalar_u1(size_t n, const gml_adamw_scalars *s, float *p,
                                      const float *g, float *m, float *v) {
    for (size_t i = 0; i < n; i++) {
        const float gi = g[i] * s->coef;
        float pi = p[i] * s->decay;                  /* param.mul_(1 - lr * wd) */
        float mi = m[i] * s->b1;                     /* exp_avg.mul_(beta1) */
        mi = mi + s->omb1 * gi;                      /*   .add_(grad, alpha=1 - beta1) */
        float vi = v[i] * s->b2;                     /* exp_avg_sq.mul_(beta2) */
        vi = vi + s->omb2 * gi * gi;                 /*   .addcmul_(grad, grad, value=1 - beta2) */
        const float denom = sqrtf(vi) / s->bc2_sqrt + s->eps;
        pi = pi + s->neg_step * mi / denom;          /* param.addcdiv_(exp_avg, denom, value=-step_size) */
        m[i] = mi;
        v[i] = vi;
        p[i] = pi;
    }
}

void gml_f32_sgd_ukernel__scalar_u1(size_t n, const gml_sgd_scalars *s, float *p, const float *g,
                                    float *m) {
    for (size_t i = 0; i < n; i++) {
        float d = g[i] * s->coef;
        const float pi = p[i];
        if (s->wd != 0) d = d + s->wd * pi;          /* d_p.add(param, alpha=wd) */
        if (m) {
            float b;
            if (s->first) b = d;                     /* buf = clone(d_p) */
            else b = m[i] * s->mom + s->omdamp * d;  /* buf.mul_(momentum).add_(d_p, alpha=1 - dampening) */
            m[i] = b;
            d = s->nesterov ? d + s->mom * b : b;    /* d_p.add(buf, alpha=momentum) or buf */
        }
        p[i] = pi + s->neg_lr * d;                   /* param.add_(d_p, alpha=-lr) */
    }
}
