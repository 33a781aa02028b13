/* The last step of rms_norm and layer_norm (ops/norm.c): a row's
 * statistics applied. Its statistics come from ops/reduce.h. */
#ifndef GGMLITE_NORM_H
#define GGMLITE_NORM_H

#include "reduce.h"

#include "norm.inc"

/* out[i] = ((x[i] - c) * s) * w[i] + b[i] for i < n (n >= 1), each operation
 * rounded to float in that order (no fused multiply-add); w NULL: no
 * multiply, b NULL: no add. out may be x (in place), not overlap it
 * otherwise. */
typedef void gml_f32_vnorm_ukernel(size_t n, const float *x, float c, float s, const float *w,
                                   const float *b, float *out);
#define GML_DECLARE_VNORM(isa, fn, tile) gml_f32_vnorm_ukernel fn;
GML_F32_VNORM_UKERNELS(GML_DECLARE_VNORM)

#endif /* GGMLITE_NORM_H */
