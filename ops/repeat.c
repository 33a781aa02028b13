/* repeat_interleave: each slice along a dim repeated in place, as PyTorch's
 * x.repeat_interleave(repeats, dim) (GQA's K/V head expansion). */
#include "../ggmlite/internal.h"

#include <string.h>

/* out[.., j, ..] = x[.., j / repeats, ..] along axis; rows split across threads. */
static void gml_x32_repeat_interleave__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *x = dst->src[0];
    const int axis = dst->op_params[0], reps = dst->op_params[1];
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

const gml_op_def gml_opdef_repeat_interleave = {
    .name = "repeat_interleave",
    .forward = gml_x32_repeat_interleave__ref,
    .reference = gml_x32_repeat_interleave__ref,
};

/* x [.., n, ..] -> out [.., n * repeats, ..] (dim may be negative) */
gml_tensor *gml_repeat_interleave(gml_context *ctx, gml_tensor *x, int repeats, int dim) {
    if (!x) return NULL;
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
                               ne + GML_MAX_DIMS - x->n_dims);
    if (!t) return NULL;
    t->src[0] = x;
    t->op_params[0] = axis;
    t->op_params[1] = repeats;
    return t;
}
