/* The optimizers' updates (ops/optim.h), written once over the SIMD layer
 * and compiled once per ISA: GML_VL elements at a time, the tail under a
 * mask, each lane doing the scalar variant's operations in its order (mul,
 * add, div and sqrt round once on every ISA; no gml_vf_fma, and the source
 * is compiled with -ffp-contract=off), so every variant gives its bits. */
#include "optim.h"
#include "simd/simd.h"

void GML_SIMD_UKERNEL(f32_adamw, GML_SIMD_U1)(size_t n, const gml_adamw_scalars *s, float *p,
                                              const float *g, float *m, float *v) {
    const gml_vf coef = gml_vf_set1(s->coef), decay = gml_vf_set1(s->decay);
    const gml_vf b1 = gml_vf_set1(s->b1), omb1 = gml_vf_set1(s->omb1);
    const gml_vf b2 = gml_vf_set1(s->b2), omb2 = gml_vf_set1(s->omb2);
    const gml_vf neg_step = gml_vf_set1(s->neg_step), bc2_sqrt = gml_vf_set1(s->bc2_sqrt);
    const gml_vf eps = gml_vf_set1(s->eps);
    for (size_t i = 0; i < n; i += GML_VL) {
        const gml_vm k = gml_vm_first(GML_MIN(n - i, (size_t)GML_VL));
        const bool full = n - i >= GML_VL;
        const gml_vf gi = gml_vf_mul(full ? gml_vf_load(g + i) : gml_vf_load_m(g + i, k), coef);
        gml_vf pi = full ? gml_vf_load(p + i) : gml_vf_load_m(p + i, k);
        gml_vf mi = full ? gml_vf_load(m + i) : gml_vf_load_m(m + i, k);
        gml_vf vi = full ? gml_vf_load(v + i) : gml_vf_load_m(v + i, k);
        pi = gml_vf_mul(pi, decay);                               /* param.mul_(1 - lr * wd) */
        mi = gml_vf_add(gml_vf_mul(mi, b1), gml_vf_mul(omb1, gi)); /* exp_avg.mul_.add_ */
        vi = gml_vf_add(gml_vf_mul(vi, b2), gml_vf_mul(gml_vf_mul(omb2, gi), gi)); /* addcmul_ */
        const gml_vf denom = gml_vf_add(gml_vf_div(gml_vf_sqrt(vi), bc2_sqrt), eps);
        pi = gml_vf_add(pi, gml_vf_div(gml_vf_mul(neg_step, mi), denom)); /* addcdiv_ */
        if (full) {
            gml_vf_store(m + i, mi);
            gml_vf_store(v + i, vi);
            gml_vf_store(p + i, pi);
        } else {
            gml_vf_store_m(m + i, k, mi);
            gml_vf_store_m(v + i, k, vi);
            gml_vf_store_m(p + i, k, pi);
        }
    }
}

/* One vector of SGD's update: d the scaled gradient, pi the parameter, mi
 * the momentum buffer's lanes (unused without momentum); the new buffer in
 * *bo, the new parameter returned. */
static GML_SIMD_INLINE gml_vf sgd_lanes(const gml_sgd_scalars *s, bool has_m, gml_vf d, gml_vf pi,
                                        gml_vf mi, gml_vf *bo) {
    if (s->wd != 0) d = gml_vf_add(d, gml_vf_mul(gml_vf_set1(s->wd), pi)); /* d_p.add(param) */
    if (has_m) {
        const gml_vf mom = gml_vf_set1(s->mom);
        const gml_vf b = s->first ? d
                                  : gml_vf_add(gml_vf_mul(mi, mom),
                                               gml_vf_mul(gml_vf_set1(s->omdamp), d));
        *bo = b;
        d = s->nesterov ? gml_vf_add(d, gml_vf_mul(mom, b)) : b;
    }
    return gml_vf_add(pi, gml_vf_mul(gml_vf_set1(s->neg_lr), d)); /* param.add_(d_p, -lr) */
}

void GML_SIMD_UKERNEL(f32_sgd, GML_SIMD_U1)(size_t n, const gml_sgd_scalars *s, float *p,
                                            const float *g, float *m) {
    const gml_vf coef = gml_vf_set1(s->coef);
    const bool has_m = m != NULL, read_m = has_m && !s->first;
    for (size_t i = 0; i < n; i += GML_VL) {
        const gml_vm k = gml_vm_first(GML_MIN(n - i, (size_t)GML_VL));
        const bool full = n - i >= GML_VL;
        const gml_vf d = gml_vf_mul(full ? gml_vf_load(g + i) : gml_vf_load_m(g + i, k), coef);
        const gml_vf pi = full ? gml_vf_load(p + i) : gml_vf_load_m(p + i, k);
        const gml_vf mi = !read_m ? gml_vf_zero()
                          : full  ? gml_vf_load(m + i)
                                  : gml_vf_load_m(m + i, k);
        gml_vf b = mi;
        const gml_vf po = sgd_lanes(s, has_m, d, pi, mi, &b);
        if (full) {
            if (has_m) gml_vf_store(m + i, b);
            gml_vf_store(p + i, po);
        } else {
            if (has_m) gml_vf_store_m(m + i, k, b);
            gml_vf_store_m(p + i, k, po);
        }
    }
}
