/* The gradient checker: gml_grad's gradients against central finite
 * differences computed in double.
 *
 * For a graph from leafs (inputs and weights, their data set) to an f32
 * output out, with a fixed random dy of out's shape and L = sum(out * dy):
 *   - the analytic side: gml_grad(ctx, out, dy, wrt) computed under every
 *     ISA of GML_TEST_ISAS the CPU has, at 1, 2, 3, 4 and 7 threads (1, 3
 *     and 7 in check.h's quick mode); each ISA's gradients must be the same
 *     bits at every thread count;
 *   - the numeric side: dL/dx for each element x of each wrt, by central
 *     differences (L(x + h) - L(x - h)) / 2h, where L is evaluated by this
 *     file's own evaluator of the graph in double: every op's meaning
 *     written again as plain loops in double (no library kernel runs), over
 *     double copies of the tensors' storage (views read and cpy/set_rows
 *     write the same cells as the f32 graph's, so strided, permuted and
 *     sliced inputs mean the same thing). The step h (1e-4 by default) makes
 *     the truncation error h^2/6 |L'''| (about 1e-9 for these graphs'
 *     O(1) values) and the rounding error about 1e-16 |L| / h (1e-12): the
 *     differences are exact to far below f32's resolution, so what is left
 *     is the analytic side's f32 rounding.
 * Each gradient element must satisfy
 *     |g - fd| <= rtol (|fd| + max |fd|) + atol
 * (max over that gradient's elements; rtol 1e-4, atol 1e-6 by default),
 * which an f32 computation of sums of up to ~100 terms meets (K eps ~ 1e-5)
 * and a wrong gradient (a missing term, a wrong sign, a transposed index)
 * does not. Ops with kinks (max) need inputs whose kinks are further than
 * h away, which random data gives.
 *
 * wrt tensors must be leafs or views of leafs (the storage perturbed is a
 * leaf's). Ops the evaluator does not know fail the check by name. */
#ifndef GGMLITE_TESTS_GRAD_CHECK_H
#define GGMLITE_TESTS_GRAD_CHECK_H

#include <ggmlite/ggmlite.h>

typedef struct grad_check_opts {
    double h;      /* the step (0: 1e-4) */
    double rtol;   /* 0: 1e-4 */
    double atol;   /* 0: 1e-6 */
    uint64_t seed; /* of dy (0: 1) */
    /* > 0: the differences for this many elements of each wrt only (every
     * element when it has fewer), spread evenly: for shapes large enough
     * that threads split the backward's nodes (compute runs nodes under
     * 262,144 flops plus elements on one thread), whose every element still
     * has to be the same bits at every thread count. */
    int64_t samples;
} grad_check_opts;

/* At most this many wrt per check (a whole tiny model's parameters). */
#define GRAD_CHECK_MAX_WRT 32

/* Checks the gradients of out with respect to wrt[0..n_wrt-1] (ctx
 * allocating, the leafs' data set); name labels the printed lines. Returns
 * the number of failures, each printed; prints one summary line. opts may
 * be NULL. */
int grad_check(const char *name, gml_context *ctx, gml_tensor *out, gml_tensor *const *wrt,
               int n_wrt, const grad_check_opts *opts);

/* The largest |g - fd| / (|fd| + max |fd|) grad_check has seen, over every
 * call, ISA and gradient: the number a test prints at its end. */
extern double grad_check_max_rel;

#endif
