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

/* dx of one row of rms_norm (layer false) or layer_norm (true): x, dy [n]
 * (n >= 1), w [n] or NULL (1), each element's terms in double, the sums
 * in the 16 lanes of ops/reduce.h (element i in lane i % 16, in order of
 * i, from +0; the lanes added by gml_reduce_tree16), a multiply and an add
 * apart (no fused multiply-add):
 *     mean = sum(x) / n (layer; rms: 0),  d = x - mean,
 *     r = 1 / sqrt(sum(d d) / n + eps),  g = dy w,
 *     mg = sum(g) / n,  mgx = sum(g d) r / n,
 *     out = (float)(r ((g - mg) - (d r) mgx))      (rms: r (g - (d r) mgx))
 * out may be x or dy (in place), not overlap them otherwise. */
typedef void gml_f32_vnorm_back_ukernel(size_t n, const float *x, const float *dy, const float *w,
                                        double eps, bool layer, float *out);
#define GML_DECLARE_VNORM_BACK(isa, fn, tile) gml_f32_vnorm_back_ukernel fn;
GML_F32_VNORM_BACK_UKERNELS(GML_DECLARE_VNORM_BACK)

#endif /* GGMLITE_NORM_H */
