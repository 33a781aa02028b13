/* Row reductions shared by ops/reduce.c (sum, mean, max) and ops/norm.c
 * (rms_norm, layer_norm): their micro-kernels (ops/reduce.inc) and the one
 * order of operations every variant follows, so that all give bitwise the
 * same result on every ISA and at every thread count (a row is one call).
 *
 * Sums (rsum: x[i]; rsumsq: (x[i] - c)^2, the difference and the square
 * each rounded to float, as PyTorch's float x.pow(2) or (x - mean)^2):
 * the row is cut into blocks of GML_REDUCE_BLOCK elements from its start;
 * within a block, lane l (of GML_REDUCE_LANES) adds the terms i with
 * i % 16 == l in float, in order of i, from -0 (so a lane with no term adds
 * nothing: t + -0 = t for every t); each block's 16 lane sums are added,
 * converted exactly, to 16 double accumulators; the 16 doubles are then
 * added as a tree (gml_reduce_tree16). Each float lane sums at most 16 terms,
 * so the error is at most about 16 ulp of the block's sum of |terms| (plus
 * double rounding): better than a plain float loop and about as good as
 * PyTorch's cascade sum. Overflow: a float lane sum above FLT_MAX is inf
 * (as in PyTorch), NaN and inf propagate as in any sum.
 *
 * Max: lane l keeps m = x > m ? x : m over its terms, from -inf (so of +0
 * and -0 the first one in its lane stays), then the 16 lanes meet as a tree
 * (gml_reduce_tree16_max); any NaN makes the result NaN (the default quiet
 * NaN, whatever the payloads), as torch.max propagates NaN. */
#ifndef GGMLITE_REDUCE_H
#define GGMLITE_REDUCE_H

#include "ukernels.h"

#include "reduce.inc"

#define GML_REDUCE_LANES 16
#define GML_REDUCE_BLOCK 256

/* sum of x[i], i < n (n >= 1), in double (the order above) */
typedef double gml_f32_rsum_ukernel(size_t n, const float *x);
/* sum of (x[i] - c)^2 in double, each (x[i] - c) and its square a float */
typedef double gml_f32_rsumsq_ukernel(size_t n, const float *x, float c);
/* max of x[i] (n >= 1), NaN if any x[i] is NaN */
typedef float gml_f32_rmax_ukernel(size_t n, const float *x);

/* sum_to's columns: out[j] = the sum of x_t[j] over the terms t in order, j
 * < len (1 <= len <= GML_COLSUM_MAX), added in double from +0 and rounded
 * once. The terms are rows x_t = x + sum_d i_d nb[d] (bytes), the indices
 * i_d < ne[d] of the n summed dims (outermost first) in row-major order (n
 * = 0: x alone); each row's len floats are contiguous. */
#define GML_COLSUM_MAX 64
typedef struct gml_colsum_terms {
    int n;
    int64_t ne[GML_MAX_DIMS], nb[GML_MAX_DIMS];
} gml_colsum_terms;
typedef void gml_f32_colsum_ukernel(size_t len, const char *x, const gml_colsum_terms *t,
                                    float *out);

/* The terms' walk: *p moves to the next row (an odometer over idx, the
 * innermost dim fastest). */
static inline void gml_colsum_next(const gml_colsum_terms *t, int64_t idx[GML_MAX_DIMS],
                                   const char **p) {
    for (int d = t->n - 1; d >= 0; d--) {
        *p += t->nb[d];
        if (++idx[d] < t->ne[d]) return;
        *p -= t->nb[d] * t->ne[d];
        idx[d] = 0;
    }
}
static inline int64_t gml_colsum_count(const gml_colsum_terms *t) {
    int64_t n = 1;
    for (int d = 0; d < t->n; d++) n *= t->ne[d];
    return n;
}

#define GML_DECLARE_RSUM(isa, fn, tile) gml_f32_rsum_ukernel fn;
#define GML_DECLARE_RSUMSQ(isa, fn, tile) gml_f32_rsumsq_ukernel fn;
#define GML_DECLARE_RMAX(isa, fn, tile) gml_f32_rmax_ukernel fn;
GML_F32_RSUM_UKERNELS(GML_DECLARE_RSUM)
GML_F32_RSUMSQ_UKERNELS(GML_DECLARE_RSUMSQ)
GML_F32_RMAX_UKERNELS(GML_DECLARE_RMAX)
#define GML_DECLARE_COLSUM(isa, fn, tile) gml_f32_colsum_ukernel fn;
GML_F32_COLSUM_UKERNELS(GML_DECLARE_COLSUM)

/* The 16 double accumulators added as a tree: d[l] + d[l + 8], then the 8
 * the same way (l + 4), then l + 2, then l + 1. */
static inline double gml_reduce_tree16(const double d[GML_REDUCE_LANES]) {
    double t[GML_REDUCE_LANES];
    for (int l = 0; l < 16; l++) t[l] = d[l];
    for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) t[l] = t[l] + t[l + w];
    return t[0];
}

/* The 16 lane maxima met as the same tree, lane l + w winning only when it
 * is larger (as x > m ? x : m); NaN when nan. */
static inline float gml_reduce_tree16_max(const float m[GML_REDUCE_LANES], bool nan) {
    float t[GML_REDUCE_LANES];
    for (int l = 0; l < 16; l++) t[l] = m[l];
    for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) t[l] = t[l + w] > t[l] ? t[l + w] : t[l];
    return nan ? NAN : t[0];
}

#endif /* GGMLITE_REDUCE_H */
