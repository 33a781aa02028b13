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

#include "binary.inc"
#include "copy.inc"
#include "repeat.inc"
#include "softmax.inc"

/* Helpers to turn a list into tables (X-macros). */
#define GML_UKERNEL_ISA(isa, fn, tile) isa,
#define GML_UKERNEL_FN(isa, fn, tile) fn,

/* The variant of `list` (functions of type `type`) for the ISA in effect,
 * as gml_pick_variant chooses it. Kernels take it once per call. */
#define GML_PICK_UKERNEL(list, type)                                                 \
    ((type *const[]){list(GML_UKERNEL_FN)}[gml_pick_variant(                         \
        (const gml_isa[]){list(GML_UKERNEL_ISA)},                                    \
        (int)(sizeof((gml_isa[]){list(GML_UKERNEL_ISA)}) / sizeof(gml_isa)))])

/* A row with no score above -inf: its keys are all masked and it gets
 * zeros, unless a score is NaN (a NaN input, or inf - inf): then the row is
 * NaN, so a NaN is never passed off as "fully masked". out holds the row's
 * n scores. */
static inline void gml_softmax_no_visible_key(size_t n, float *out) {
    float fill = 0.0f;
    for (size_t i = 0; i < n; i++)
        if (out[i] != out[i]) fill = out[i];
    for (size_t i = 0; i < n; i++) out[i] = fill;
}

/* ---- softmax (ops/softmax.inc) --------------------------------------------
 * out[j] = softmax_j(x[j] * scale + mask[j]) for j < n, n >= 1; mask may be
 * NULL (no mask) and may hold -inf. Three passes over the row: scores and
 * their max, exp and the sum, normalize. As the reference: a row with no
 * score above -inf (every key masked) gives zeros; otherwise a NaN score
 * makes the whole row NaN. */
typedef void gml_f32_softmax_ukernel(size_t n, const float *x, const float *mask, float scale,
                                     float *out);
#define GML_DECLARE_SOFTMAX(isa, fn, tile) gml_f32_softmax_ukernel fn;
GML_F32_SOFTMAX_UKERNELS(GML_DECLARE_SOFTMAX)

/* y[i] = exp(x[i]), i < n. The vector variants share one algorithm; its
 * error bound is documented at gml_f32_vexp_ukernel__avx512_u16. */
typedef void gml_f32_vexp_ukernel(size_t n, const float *x, float *y);
#define GML_DECLARE_VEXP(isa, fn, tile) gml_f32_vexp_ukernel fn;
GML_F32_VEXP_UKERNELS(GML_DECLARE_VEXP)

/* ---- binary (ops/binary.inc) ----------------------------------------------
 * vadd: out[i] = a[i] + b[i]   vaddc: out[i] = a[i] + b[0]
 * vmul: out[i] = a[i] * b[i]   vmulc: out[i] = a[i] * b[0]      (i < n, n >= 1)
 * out may be a or b (in place), but not overlap them otherwise. */
typedef void gml_f32_vbinary_ukernel(size_t n, const float *a, const float *b, float *out);
#define GML_DECLARE_VBINARY(isa, fn, tile) gml_f32_vbinary_ukernel fn;
GML_F32_VADD_UKERNELS(GML_DECLARE_VBINARY)
GML_F32_VADDC_UKERNELS(GML_DECLARE_VBINARY)
GML_F32_VMUL_UKERNELS(GML_DECLARE_VBINARY)
GML_F32_VMULC_UKERNELS(GML_DECLARE_VBINARY)

/* ---- copy (ops/copy.inc) --------------------------------------------------
 * 4-byte elements of any type (f32, i32), moved bit for bit.
 * copy:      dst[i] = src[i], i < n; no overlap.
 * transpose: dst[j * dst_stride + i] = src[i * src_stride + j] for i < rows,
 *            j < cols (strides in elements); no overlap. */
typedef void gml_x32_copy_ukernel(size_t n, const uint32_t *src, uint32_t *dst);
typedef void gml_x32_transpose_ukernel(size_t rows, size_t cols, const uint32_t *src,
                                       size_t src_stride, uint32_t *dst, size_t dst_stride);
#define GML_DECLARE_COPY(isa, fn, tile) gml_x32_copy_ukernel fn;
#define GML_DECLARE_TRANSPOSE(isa, fn, tile) gml_x32_transpose_ukernel fn;
GML_X32_COPY_UKERNELS(GML_DECLARE_COPY)
GML_X32_TRANSPOSE_UKERNELS(GML_DECLARE_TRANSPOSE)

/* ---- repeat (ops/repeat.inc) ----------------------------------------------
 * out[i * reps + r] = x[i] for i < n, r < reps (n, reps >= 1); 4-byte
 * elements moved bit for bit; no overlap. */
typedef void gml_x32_repeat_ukernel(size_t n, size_t reps, const uint32_t *x, uint32_t *out);
#define GML_DECLARE_REPEAT(isa, fn, tile) gml_x32_repeat_ukernel fn;
GML_X32_REPEAT_UKERNELS(GML_DECLARE_REPEAT)

#endif /* GGMLITE_UKERNELS_H */
