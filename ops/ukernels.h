/* Micro-kernels: the inner loops of the fast op kernels, one function per
 * (kind, ISA). Each works on one contiguous run; the op's forward kernel in
 * ops/<family>.c walks the strides, broadcasting and thread split and calls
 * them. Which variants exist is listed once per kind in ops/<family>.inc
 * (see "ISA variants" in ggmlite/internal.h); this header declares them all,
 * for the ops and for tests/test_ukernels_<family>.c. */
#ifndef GGMLITE_UKERNELS_H
#define GGMLITE_UKERNELS_H

#include "../ggmlite/internal.h"

#include <stddef.h>

#include "softmax.inc"

/* Helpers to turn a list into tables (X-macros). */
#define GML_UKERNEL_ISA(isa, fn, tile) isa,
#define GML_UKERNEL_FN(isa, fn, tile) fn,

/* ---- softmax (ops/softmax.inc) --------------------------------------------
 * out[j] = softmax_j(x[j] * scale + mask[j]) for j < n, n >= 1; mask may be
 * NULL (no mask) and may hold -inf. Three passes over the row: scores and
 * their max, exp and the sum, normalize. A row whose every score is -inf
 * gives zeros. NaN anywhere gives a NaN row. */
typedef void gml_f32_softmax_ukernel(size_t n, const float *x, const float *mask, float scale,
                                     float *out);
#define GML_DECLARE_SOFTMAX(isa, fn, tile) gml_f32_softmax_ukernel fn;
GML_F32_SOFTMAX_UKERNELS(GML_DECLARE_SOFTMAX)

/* y[i] = exp(x[i]), i < n. The vector variants share one algorithm; its
 * error bound is documented at gml_f32_vexp_ukernel__avx512_u16. */
typedef void gml_f32_vexp_ukernel(size_t n, const float *x, float *y);
#define GML_DECLARE_VEXP(isa, fn, tile) gml_f32_vexp_ukernel fn;
GML_F32_VEXP_UKERNELS(GML_DECLARE_VEXP)

#endif /* GGMLITE_UKERNELS_H */
