/* Copies: cont (any strides -> contiguous) and cpy (write a into a view of
 * another tensor, e.g. a KV cache slot). */
#include "../ggmlite/internal.h"

#include <string.h>

/* dst[i] = src[i] elementwise over equal shapes, any strides on both; rows
 * split across threads. Works for f32 and i32 alike (4-byte elements). */
static void copy_rows(const gml_compute_params *p, const gml_tensor *src, gml_tensor *dst) {
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    const int64_t n = dst->ne[3];
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        const char *s = gml_ptr(src, i0, i1, i2, 0);
        char *d = gml_ptr(dst, i0, i1, i2, 0);
        for (int64_t i = 0; i < n; i++)
            memcpy(d + i * (int64_t)dst->nb[3], s + i * (int64_t)src->nb[3], 4);
    }
}

static void gml_x32_copy__ref(const gml_compute_params *p, gml_tensor *dst) {
    copy_rows(p, dst->src[0], dst);
}

const gml_op_def gml_opdef_cont = {
    .name = "cont", .forward = gml_x32_copy__ref, .reference = gml_x32_copy__ref};
const gml_op_def gml_opdef_cpy = {
    .name = "cpy", .forward = gml_x32_copy__ref, .reference = gml_x32_copy__ref};

/* a [...] (any strides) -> out [...] contiguous */
gml_tensor *gml_cont(gml_context *ctx, gml_tensor *a) {
    if (!a) return NULL;
    gml_tensor *t = gml_new_op(ctx, GML_OP_CONT, a->type, a->n_dims, a->ne + GML_MAX_DIMS - a->n_dims);
    if (!t) return NULL;
    t->src[0] = a;
    snprintf(t->name, sizeof t->name, "%.*s (cont)", GML_MAX_NAME - 16, a->name);
    return t;
}

/* a [...] -> written into dst [...] (same shape and type); returns a view of
 * dst that stands for "dst after the copy". */
gml_tensor *gml_cpy(gml_context *ctx, gml_tensor *a, gml_tensor *dst) {
    if (!a || !dst) return NULL;
    char sa[GML_SHAPE_MAX], sd[GML_SHAPE_MAX];
    if (!gml_same_shape(a, dst) || a->type != dst->type)
        return gml_fail(ctx, "cpy(%s, %s): shapes or types differ: %s %s into %s %s", a->name,
                        dst->name, GML_SHAPE(a, sa), gml_type_name(a->type), GML_SHAPE(dst, sd),
                        gml_type_name(dst->type));
    gml_tensor *t = gml_new_view(ctx, GML_OP_CPY, dst, dst->n_dims, dst->ne + GML_MAX_DIMS - dst->n_dims,
                                 dst->nb + GML_MAX_DIMS - dst->n_dims, 0, "copied into");
    if (!t) return NULL;
    t->src[0] = a;
    t->src[1] = dst;
    snprintf(t->name, sizeof t->name, "%.*s (copy of %.*s)", GML_MAX_NAME / 2 - 8, dst->name,
             GML_MAX_NAME / 2 - 8, a->name);
    return t;
}
