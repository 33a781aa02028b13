/* repeat_interleave: each slice along a dim repeated in place, as PyTorch's
 * x.repeat_interleave(repeats, dim) (GQA's K/V head expansion). */
#include "runs.h"
#include "ukernels.h"

#include <string.h>

typedef struct repeat_params {
    int32_t repeats; /* >= 1 */
    int32_t dim;     /* PyTorch's dim, 0..n_dims-1 */
} repeat_params;
GML_PARAMS_FIT(repeat_params);

static repeat_params params_of(const gml_tensor *t) {
    repeat_params p;
    gml_get_params(t, &p, sizeof p);
    return p;
}

/* The index into ne/nb that dst repeats along. */
static int axis_of(const gml_tensor *dst) { return gml_axis(dst, params_of(dst).dim); }

/* out[.., j, ..] = x[.., j / repeats, ..] along axis; rows split across threads. */
static void gml_x32_repeat_interleave__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *x = dst->src[0];
    const int axis = axis_of(dst), reps = params_of(dst).repeats;
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i[GML_MAX_DIMS];
        gml_row_index(dst, r, &i[0], &i[1], &i[2]);
        for (i[3] = 0; i[3] < dst->ne[3]; i[3]++) {
            int64_t s[GML_MAX_DIMS] = {i[0], i[1], i[2], i[3]};
            s[axis] /= reps;
            memcpy(gml_ptr(dst, i[0], i[1], i[2], i[3]), gml_ptr(x, s[0], s[1], s[2], s[3]), 4);
        }
    }
}

/* Repeating along axis < 3: with x dense over dims [k, 4), k > axis, each
 * run of dst over those dims is one memcpy from x (GQA's K/V heads: a whole
 * [T, d] head per call). Threads take equal shares of dst's elements. */
static void repeat_runs(const gml_compute_params *p, gml_tensor *dst, const gml_tensor *x,
                        int axis, int reps, int k) {
    gml_x32_copy_ukernel *const copy =
        GML_PICK_UKERNEL(p->isa, GML_X32_COPY_UKERNELS, gml_x32_copy_ukernel);
    gml_kernel_note(p, GML_PICK_UKERNEL_NAME(p->isa, GML_X32_COPY_UKERNELS));
    const int64_t run = gml_run_length(dst->ne, k);
    int64_t e, end;
    gml_split_elements(gml_nelements(dst), p->ith, p->nth, &e, &end);
    uint32_t *out = dst->data; /* contiguous */
    while (e < end) {
        const int64_t off = e % run, len = GML_MIN(run - off, end - e);
        /* x's element for the start of run e / run: dst's index with the
         * index along axis divided by reps */
        const char *from = x->data;
        for (int64_t d = k - 1, r = e / run; d >= 0; d--) {
            const int64_t i = r % dst->ne[d];
            from += (d == axis ? i / reps : i) * (int64_t)x->nb[d];
            r /= dst->ne[d];
        }
        copy((size_t)len, (const uint32_t *)from + off, out + e);
        e += len;
    }
}

void gml_x32_repeat_ukernel__scalar_u1(size_t n, size_t reps, const uint32_t *x, uint32_t *out) {
    for (size_t i = 0; i < n; i++)
        for (size_t r = 0; r < reps; r++) *out++ = x[i];
}

/* Repeating along the last dim: each row one micro-kernel call when x's
 * rows are contiguous, a plain strided loop otherwise. Rows split across
 * threads. */
static void repeat_last_dim(const gml_compute_params *p, gml_tensor *dst, const gml_tensor *x,
                            int reps) {
    gml_x32_repeat_ukernel *const repeat =
        GML_PICK_UKERNEL(p->isa, GML_X32_REPEAT_UKERNELS, gml_x32_repeat_ukernel);
    const int64_t n = x->ne[3], sx = (int64_t)x->nb[3] / 4;
    gml_kernel_note(p, sx == 1 || n == 1 ? GML_PICK_UKERNEL_NAME(p->isa, GML_X32_REPEAT_UKERNELS)
                                         : "strided loop (x's last dim is strided)");
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        const uint32_t *from = (const uint32_t *)gml_ptr(x, i0, i1, i2, 0);
        uint32_t *out = (uint32_t *)gml_ptr(dst, i0, i1, i2, 0);
        if (sx == 1 || n == 1) {
            repeat((size_t)n, (size_t)reps, from, out);
            continue;
        }
        for (int64_t i = 0; i < n; i++)
            for (int j = 0; j < reps; j++) *out++ = from[i * sx];
    }
}

/* Along the last dim: repeat micro-kernels. Along another: runs of memcpy
 * when x's dims after the repeated one are dense, else the reference. */
static void gml_x32_repeat_interleave(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *x = dst->src[0];
    const int axis = axis_of(dst), reps = params_of(dst).repeats;
    if (axis == GML_MAX_DIMS - 1) {
        repeat_last_dim(p, dst, x, reps);
        return;
    }
    gml_run_operand xo = gml_run_operand_of(x);
    int k = GML_MAX_DIMS;
    while (k > axis + 1 && gml_run_fits(&xo, dst->ne, k - 1, true)) k--;
    if (k == GML_MAX_DIMS) { /* x's last dim strided */
        gml_kernel_note(p, "reference (x's last dim is strided)");
        gml_x32_repeat_interleave__ref(p, dst);
        return;
    }
    repeat_runs(p, dst, x, axis, reps, k);
}

/* x [.., n, ..] -> out [.., n * repeats, ..] (dim may be negative) */
gml_tensor *gml_repeat_interleave(gml_context *ctx, gml_tensor *x, int repeats, int dim) {
    GML_ENTER(ctx, 1, x);
    char sx[GML_SHAPE_MAX];
    int axis = gml_axis(x, dim);
    if (axis < 0)
        return gml_fail(ctx, "repeat_interleave(%s): dim %d out of range for a %d-D input %s",
                        x->name, dim, x->n_dims, GML_SHAPE(x, sx));
    if (repeats < 1)
        return gml_fail(ctx, "repeat_interleave(%s): repeats is %d, must be >= 1", x->name, repeats);
    if (x->ne[axis] > ((int64_t)1 << 40) / repeats) /* the size limit, checked without overflow */
        return gml_fail(ctx, "repeat_interleave(%s): %" PRId64 " * %d along dim %d of %s is more "
                        "than 2^40", x->name, x->ne[axis], repeats, dim, GML_SHAPE(x, sx));
    int64_t ne[GML_MAX_DIMS];
    for (int i = 0; i < GML_MAX_DIMS; i++) ne[i] = x->ne[i];
    ne[axis] *= repeats;
    gml_tensor *t = gml_new_op(ctx, GML_OP_REPEAT_INTERLEAVE, x->type, x->n_dims,
                               ne + GML_MAX_DIMS - x->n_dims, &x, 1);
    if (!t) return NULL;
    gml_set_params(t, &(repeat_params){repeats, axis - (GML_MAX_DIMS - x->n_dims)},
                   sizeof(repeat_params));
    return t;
}

static gml_tensor *build_repeat_interleave(gml_context *ctx, const gml_arg *v) {
    int dim;
    if (!gml_arg_range(ctx, "repeat_interleave", v[0].t, "repeats", v[1].i, 1, INT32_MAX) ||
        !gml_arg_dim(ctx, "repeat_interleave", v[0].t, "dim", v[2].i, &dim))
        return NULL;
    return gml_repeat_interleave(ctx, v[0].t, (int)v[1].i, dim);
}

static void repeat_interleave_args(const gml_tensor *t, gml_arg *v) {
    const repeat_params p = params_of(t);
    v[0].t = t->src[0];
    v[1].i = p.repeats;
    v[2].i = p.dim;
}

/* Backward (gml_grad): dx[.., j, ..] = sum_r dy[.., j R + r, ..]. dy (made
 * contiguous) read as [before, n, R, after] and summed over R by sum_to. */
static bool repeat_interleave_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    gml_context *ctx = gml_backward_context(b);
    gml_tensor *x = node->src[0];
    const repeat_params p = params_of(node);
    const int axis = gml_axis(x, p.dim);
    int64_t before = 1, after = 1;
    for (int k = GML_MAX_DIMS - x->n_dims; k < axis; k++) before *= x->ne[k];
    for (int k = axis + 1; k < GML_MAX_DIMS; k++) after *= x->ne[k];
    const int64_t n = x->ne[axis];
    gml_tensor *c = gml_is_contiguous(dy) ? dy : gml_cont(ctx, dy);
    gml_tensor *r = gml_reshape(ctx, c, 4, (int64_t[]){before, n, p.repeats, after});
    gml_tensor *s = gml_sum_to(ctx, r, 4, (int64_t[]){before, n, 1, after});
    return gml_backward_add(b, x, gml_reshape(ctx, s, x->n_dims, x->ne + GML_MAX_DIMS - x->n_dims));
}

const gml_op_def gml_opdef_repeat_interleave = {
    .forward = gml_x32_repeat_interleave,
    .reference = gml_x32_repeat_interleave__ref,
    .flags = GML_OPF_MOVES_VALUES,
    GML_ARGS(GML_T("x"), GML_REQ("repeats", INT), GML_REQ("dim", INT)),
    .build = build_repeat_interleave,
    .get_args = repeat_interleave_args,
    .doc_args = "dim negative from the end",
    .doc_result = "each slice along dim repeated `repeats` times in place",
    .backward = repeat_interleave_backward,
};
