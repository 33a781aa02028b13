/* Runs: how the fast elementwise kernels (binary, copy, repeat) walk
 * strided and broadcast tensors. The output's innermost dims [k, 4) over
 * which every operand is either dense (its elements contiguous in the
 * output's order) or constant (broadcast: one value for the whole stretch)
 * form one run; a run is one micro-kernel call. Threads take equal ranges of
 * the output's elements (not of runs), so a few long runs split as well as
 * many short ones, and each element is still computed by exactly one thread.
 * 4-byte elements (f32, i32). */
#ifndef GGMLITE_RUNS_H
#define GGMLITE_RUNS_H

#include "internal.h"

/* An operand (an input, or the output itself) as read along the runs. */
typedef struct {
    char *data;
    int64_t nb[GML_MAX_DIMS]; /* byte strides, 0 along size-1 (broadcast) dims */
    bool dense;               /* else one value per run */
} gml_run_operand;

static inline gml_run_operand gml_run_operand_of(const gml_tensor *t) {
    gml_run_operand o = {.data = t->data};
    for (int d = 0; d < GML_MAX_DIMS; d++) o.nb[d] = t->ne[d] == 1 ? 0 : (int64_t)t->nb[d];
    return o;
}

/* Is o dense (want_dense) or constant over dims [k, 4) of shape ne? */
static inline bool gml_run_fits(const gml_run_operand *o, const int64_t *ne, int k,
                                bool want_dense) {
    int64_t step = 4;
    for (int d = GML_MAX_DIMS - 1; d >= k; d--) {
        if (ne[d] > 1 && o->nb[d] != (want_dense ? step : 0)) return false;
        step *= ne[d];
    }
    return true;
}

/* The smallest k such that over dims [k, 4) of shape ne each of the n
 * operands is dense, or constant where allow_const; sets their `dense`.
 * Returns 4 (no run) when an operand's innermost dim fits neither. */
static inline int gml_find_runs(const int64_t *ne, gml_run_operand *ops, int n, bool allow_const) {
    int k = GML_MAX_DIMS;
    for (; k > 0; k--) {
        bool ok = true;
        for (int i = 0; i < n && ok; i++)
            ok = gml_run_fits(&ops[i], ne, k - 1, true) ||
                 (allow_const && gml_run_fits(&ops[i], ne, k - 1, false));
        if (!ok) break;
    }
    for (int i = 0; i < n; i++) ops[i].dense = gml_run_fits(&ops[i], ne, k, true);
    return k;
}

/* Elements per run over dims [k, 4). */
static inline int64_t gml_run_length(const int64_t *ne, int k) {
    int64_t n = 1;
    for (int d = k; d < GML_MAX_DIMS; d++) n *= ne[d];
    return n;
}

/* Start of run r (a flat index over dims [0, k) of shape ne) in o. */
static inline char *gml_run_start(const gml_run_operand *o, const int64_t *ne, int k, int64_t r) {
    char *p = o->data;
    for (int d = k - 1; d >= 0; d--) {
        p += (r % ne[d]) * o->nb[d];
        r /= ne[d];
    }
    return p;
}

/* This thread's share [*e0, *e1) of n elements, cut at multiples of 16 (a
 * zmm of floats), so threads do not share cache lines of a dense output. */
static inline void gml_split_elements(int64_t n, int ith, int nth, int64_t *e0, int64_t *e1) {
    int64_t u0, u1;
    gml_split((n + 15) / 16, ith, nth, &u0, &u1);
    *e0 = u0 * 16;
    *e1 = GML_MIN(n, u1 * 16);
}

#endif /* GGMLITE_RUNS_H */
