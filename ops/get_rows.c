/* get_rows: gather rows of a [N, d] table by an i32 index tensor of any shape
 * (embedding lookups, relative-position tables). */
#include "ukernels.h"

#include <string.h>

/* out[.., :] = table[idx[..], :]. Each output row is one index; rows split
 * across threads. An index outside [0, N) fails compute. */
static void gml_f32_get_rows__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *table = dst->src[0], *idx = dst->src[1];
    const int64_t n_rows = table->ne[2], d = table->ne[3];
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        /* dst [a, b, c, d] is idx [a, b, c] padded: idx's entries 1..3 */
        int32_t row;
        memcpy(&row, gml_ptr(idx, 0, i0, i1, i2), sizeof row);
        if (row < 0 || row >= n_rows) {
            char st[GML_SHAPE_MAX], si[GML_SHAPE_MAX];
            gml_kernel_fail(p, "get_rows(%s, %s): index %d at flat position %" PRId64
                            " is out of range [0, %" PRId64 ") for table %s (index %s)",
                            table->name, idx->name, (int)row, r, n_rows, GML_SHAPE(table, st),
                            GML_SHAPE(idx, si));
            return;
        }
        const char *src = gml_ptr(table, 0, 0, row, 0);
        float *out = (float *)gml_ptr(dst, i0, i1, i2, 0);
        for (int64_t j = 0; j < d; j++) memcpy(&out[j], src + j * (int64_t)table->nb[3], 4);
    }
}

/* Same as the reference, each row one memcpy from a table whose rows are
 * contiguous (the reference runs otherwise). */
static void gml_f32_get_rows(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *table = dst->src[0], *idx = dst->src[1];
    const int64_t n_rows = table->ne[2], d = table->ne[3];
    if (d > 1 && table->nb[3] != sizeof(float)) {
        gml_f32_get_rows__ref(p, dst);
        return;
    }
    gml_x32_copy_ukernel *const copy =
        GML_PICK_UKERNEL(GML_X32_COPY_UKERNELS, gml_x32_copy_ukernel);
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        int32_t row;
        memcpy(&row, gml_ptr(idx, 0, i0, i1, i2), sizeof row);
        if (row < 0 || row >= n_rows) {
            gml_f32_get_rows__ref(p, dst); /* reports it, as the reference words it */
            return;
        }
        copy((size_t)d, (const uint32_t *)gml_ptr(table, 0, 0, row, 0),
             (uint32_t *)gml_ptr(dst, i0, i1, i2, 0));
    }
}

const gml_op_def gml_opdef_get_rows = {.name = "get_rows", .forward = gml_f32_get_rows,
                                       .reference = gml_f32_get_rows__ref,
                                       .flags = GML_OPF_MOVES_VALUES};

/* table [N, d] f32, idx [...] i32 (1-D to 3-D) -> out [..., d] */
gml_tensor *gml_get_rows(gml_context *ctx, gml_tensor *table, gml_tensor *idx) {
    if (!table || !idx) return NULL;
    char st[GML_SHAPE_MAX], si[GML_SHAPE_MAX];
    if (table->n_dims != 2 || table->type != GML_F32)
        return gml_fail(ctx, "get_rows(%s, %s): table must be f32 [N, d], got %s %s", table->name,
                        idx->name, gml_type_name(table->type), GML_SHAPE(table, st));
    if (idx->type != GML_I32 || idx->n_dims > 3)
        return gml_fail(ctx, "get_rows(%s, %s): indices must be i32 with 1 to 3 dims, got %s %s",
                        table->name, idx->name, gml_type_name(idx->type), GML_SHAPE(idx, si));
    int n = idx->n_dims + 1;
    int64_t ne[GML_MAX_DIMS];
    for (int i = 0; i < idx->n_dims; i++) ne[i] = idx->ne[GML_MAX_DIMS - idx->n_dims + i];
    ne[n - 1] = table->ne[3];
    gml_tensor *t = gml_new_op(ctx, GML_OP_GET_ROWS, GML_F32, n, ne);
    if (!t) return NULL;
    t->src[0] = table;
    t->src[1] = idx;
    return t;
}
