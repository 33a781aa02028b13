/* get_rows: gather rows of a [N, d] table by an i32 index tensor of any shape
 * (embedding lookups, relative-position tables); set_rows: scatter rows into
 * a tensor at run-time indices (appending to a KV cache). */
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
        uint16_t h;
        switch (table->type) { /* f16, bf16, q8_0: the scalar conversions */
        case GML_Q8_0: gml_dequantize_row_q8_0((const void *)src, out, d); break;
        case GML_F16:
        case GML_BF16:
            for (int64_t j = 0; j < d; j++) {
                memcpy(&h, src + j * (int64_t)table->nb[3], 2);
                out[j] = table->type == GML_F16 ? gml_fp16_to_fp32(h) : gml_bf16_to_fp32(h);
            }
            break;
        default:
            for (int64_t j = 0; j < d; j++) memcpy(&out[j], src + j * (int64_t)table->nb[3], 4);
        }
    }
}

/* Same as the reference, each row one memcpy from a table whose rows are
 * contiguous (the reference runs otherwise). */
static void gml_f32_get_rows(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *table = dst->src[0], *idx = dst->src[1];
    const int64_t n_rows = table->ne[2], d = table->ne[3];
    const bool typed = table->type != GML_F32;
    if (d > 1 && table->type != GML_Q8_0 && table->nb[3] != gml_type_size(table->type)) {
        if (typed) gml_kernel_note(p, "reference (the table's rows are strided)");
        gml_f32_get_rows__ref(p, dst);
        return;
    }
    gml_x32_copy_ukernel *const copy =
        GML_PICK_UKERNEL(p->isa, GML_X32_COPY_UKERNELS, gml_x32_copy_ukernel);
    const char *cvt_name = NULL;
    gml_cvt_ukernel *const cvt = typed ? gml_cvt_to_f32(p->isa, table->type, &cvt_name) : NULL;
    if (typed) gml_kernel_note(p, cvt_name);
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
        if (cvt) cvt((size_t)d, gml_ptr(table, 0, 0, row, 0), gml_ptr(dst, i0, i1, i2, 0));
        else
            copy((size_t)d, (const uint32_t *)gml_ptr(table, 0, 0, row, 0),
                 (uint32_t *)gml_ptr(dst, i0, i1, i2, 0));
    }
}

/* table [N, d] f32, idx [...] i32 (1-D to 3-D) -> out [..., d] */
gml_tensor *gml_get_rows(gml_context *ctx, gml_tensor *table, gml_tensor *idx) {
    GML_ENTER(ctx, 2, table, idx);
    char st[GML_SHAPE_MAX], si[GML_SHAPE_MAX];
    if (table->n_dims != 2 || table->type == GML_I32 ||
        (table->type == GML_Q8_0 && table->view_src))
        return gml_fail(ctx, "get_rows(%s, %s): table must be [N, d] of f32, f16, bf16 or q8_0 "
                        "(a q8_0 one a whole tensor), got %s %s%s", table->name, idx->name,
                        gml_type_name(table->type), GML_SHAPE(table, st),
                        table->view_src && table->type == GML_Q8_0 ? " (a view)" : "");
    if (idx->type != GML_I32 || idx->n_dims > 3)
        return gml_fail(ctx, "get_rows(%s, %s): indices must be i32 with 1 to 3 dims, got %s %s",
                        table->name, idx->name, gml_type_name(idx->type), GML_SHAPE(idx, si));
    int n = idx->n_dims + 1;
    int64_t ne[GML_MAX_DIMS];
    for (int i = 0; i < idx->n_dims; i++) ne[i] = idx->ne[GML_MAX_DIMS - idx->n_dims + i];
    ne[n - 1] = table->ne[3];
    return gml_new_op(ctx, GML_OP_GET_ROWS, GML_F32, n, ne, (gml_tensor *[]){table, idx}, 2);
}

/* Every thread checks every index before writing (A n numbers), so a bad
 * one writes nothing and is reported the same way whatever the thread count:
 * the first in row-major order. */
static bool set_rows_indices_ok(const gml_compute_params *p, const gml_tensor *dst) {
    const gml_tensor *src = dst->src[1], *idx = dst->src[2];
    const int64_t N = dst->ne[2], n = gml_nelements(idx);
    for (int64_t e = 0; e < n; e++) {
        const int64_t a = e / idx->ne[3], i = e % idx->ne[3];
        int32_t row;
        memcpy(&row, gml_ptr(idx, 0, 0, idx->n_dims == 1 ? 0 : a, i), sizeof row);
        if (row >= 0 && row < N) continue;
        char sd[GML_SHAPE_MAX], si[GML_SHAPE_MAX], at[48];
        if (idx->n_dims == 1) snprintf(at, sizeof at, "[%" PRId64 "]", i);
        else snprintf(at, sizeof at, "[%" PRId64 ",%" PRId64 "]", a, i);
        gml_kernel_fail(p, "set_rows(%s, %s, %s): index %d at %s is out of range [0, %" PRId64
                        ") for %s (index %s)", dst->src[0]->name, src->name, idx->name, (int)row,
                        at, N, GML_SHAPE(dst, sd), GML_SHAPE(idx, si));
        return false;
    }
    return true;
}

/* dst[a, .., idx[a, i], :] = src[a, .., i, :] (idx [n]: idx[i] for every a).
 * Threads split over the slices of dst (all dims but the last two); each
 * slice's rows are written in order, so a repeated index keeps the last row
 * whatever the thread count. Rows are copied by the copy micro-kernel when
 * they are contiguous in src and dst, else element by element (the
 * reference always). */
static void set_rows(const gml_compute_params *p, gml_tensor *dst, bool fast) {
    if (!set_rows_indices_ok(p, dst)) return;
    const gml_tensor *src = dst->src[1], *idx = dst->src[2];
    const int64_t n = src->ne[2], d = dst->ne[3];
    const int first = GML_MAX_DIMS - dst->n_dims; /* dst's first dim: the one idx rows follow */
    const bool convert = dst->type != src->type; /* f32 rows into f16 / bf16 (a KV cache) */
    const size_t esize = gml_type_size(dst->type);
    const bool dense = d == 1 || (dst->nb[3] == esize && src->nb[3] == 4);
    gml_x32_copy_ukernel *const copy =
        fast && dense && !convert ? GML_PICK_UKERNEL(p->isa, GML_X32_COPY_UKERNELS, gml_x32_copy_ukernel)
                                  : NULL;
    const char *cvt_name = NULL;
    gml_cvt_ukernel *const cvt = fast && dense && convert ? gml_cvt_from_f32(p->isa, dst->type, &cvt_name)
                                                          : NULL;
    if (cvt && p->ith == 0) gml_kernel_note(p, cvt_name);
    int64_t s0, s1;
    gml_split(dst->ne[0] * dst->ne[1], p->ith, p->nth, &s0, &s1);
    for (int64_t s = s0; s < s1; s++) {
        const int64_t i0 = s / dst->ne[1], i1 = s % dst->ne[1];
        const int64_t a = first == 0 ? i0 : first == 1 ? i1 : 0;
        for (int64_t i = 0; i < n; i++) {
            int32_t row;
            memcpy(&row, idx->n_dims == 1 ? gml_ptr(idx, 0, 0, 0, i) : gml_ptr(idx, 0, 0, a, i),
                   sizeof row);
            const char *from = gml_ptr(src, i0, i1, i, 0);
            char *to = gml_ptr(dst, i0, i1, row, 0);
            if (copy) {
                copy((size_t)d, (const uint32_t *)from, (uint32_t *)to);
                continue;
            }
            if (cvt) {
                cvt((size_t)d, from, to);
                continue;
            }
            for (int64_t j = 0; j < d; j++) {
                if (!convert) {
                    memcpy(to + j * (int64_t)dst->nb[3], from + j * (int64_t)src->nb[3], 4);
                    continue;
                }
                float x;
                memcpy(&x, from + j * (int64_t)src->nb[3], 4);
                const uint16_t h = dst->type == GML_F16 ? gml_fp32_to_fp16(x) : gml_fp32_to_bf16(x);
                memcpy(to + j * (int64_t)dst->nb[3], &h, 2);
            }
        }
    }
}

static void gml_x32_set_rows__ref(const gml_compute_params *p, gml_tensor *dst) {
    set_rows(p, dst, false);
}

static void gml_x32_set_rows(const gml_compute_params *p, gml_tensor *dst) {
    set_rows(p, dst, true);
}

/* dst [.., N, d], src [.., n, d] (same type, or f32 into f16/bf16: rounded
 * to nearest even as gml_fp32_to_fp16/bf16; same leading dims), idx i32 [n]
 * or [A, n] (A = dst's first dim) -> a view of dst [.., N, d], after the write.
 * Refused if two elements of dst share memory or dst shares memory with src
 * or idx: each thread then owns its slices of dst outright. */
gml_tensor *gml_set_rows(gml_context *ctx, gml_tensor *dst, gml_tensor *src, gml_tensor *idx) {
    GML_ENTER(ctx, 3, dst, src, idx);
    char sd[GML_SHAPE_MAX], ss[GML_SHAPE_MAX], si[GML_SHAPE_MAX];
#define NAMES dst->name, src->name, idx->name
    const bool converts = src->type == GML_F32 && (dst->type == GML_F16 || dst->type == GML_BF16);
    if (dst->n_dims < 2 || src->n_dims != dst->n_dims || (src->type != dst->type && !converts) ||
        src->ne[0] != dst->ne[0] || src->ne[1] != dst->ne[1] || src->ne[3] != dst->ne[3])
        return gml_fail(ctx, "set_rows(%s, %s, %s): src %s %s does not fit dst %s %s (want dst "
                        "[.., N, d] and src [.., n, d] of one type, or f32 src into an f16/bf16 "
                        "dst, 2-D to 4-D, same leading dims)", NAMES, gml_type_name(src->type), GML_SHAPE(src, ss),
                        gml_type_name(dst->type), GML_SHAPE(dst, sd));
    const int64_t A = dst->ne[GML_MAX_DIMS - dst->n_dims];
    const bool per_slice = idx->n_dims == 2 && idx->ne[2] == A && dst->n_dims > 2;
    if (idx->type != GML_I32 || idx->ne[3] != src->ne[2] || !(idx->n_dims == 1 || per_slice))
        return gml_fail(ctx, "set_rows(%s, %s, %s): indices must be i32 [%" PRId64 "]%s, got %s "
                        "%s (src %s)", NAMES, src->ne[2],
                        dst->n_dims > 2 ? " or [A, n] with A dst's first dim" : "",
                        gml_type_name(idx->type), GML_SHAPE(idx, si), GML_SHAPE(src, ss));
    if (src->type != GML_F32 && src->type != GML_I32)
        return gml_fail(ctx, "set_rows(%s, %s, %s): '%s' is %s %s; set_rows takes f32 and i32 "
                        "(convert other types with cpy)", NAMES, src->name,
                        gml_type_name(src->type), GML_SHAPE(src, ss));
#undef NAMES
    char call[GML_CALL_MAX];
    gml_format_call("set_rows", (gml_tensor *[]){dst, src, idx}, 3, call, sizeof call);
    if (!gml_check_write(ctx, call, dst, (const gml_tensor *[]){src, idx},
                         (const char *[]){"source", "indices"}, 2, false))
        return NULL;
    gml_tensor *t = gml_new_view(ctx, GML_OP_SET_ROWS, dst, dst->n_dims,
                                 dst->ne + GML_MAX_DIMS - dst->n_dims,
                                 dst->nb + GML_MAX_DIMS - dst->n_dims, 0, "rows set");
    if (!t) return NULL;
    t->src[1] = src;
    t->src[2] = idx;
    return t;
}

/* ---- get_rows_back: the table's gradient, a scatter-add ------------------------- */

typedef struct get_rows_back_params {
    int64_t n_rows;
} get_rows_back_params;
GML_PARAMS_FIT(get_rows_back_params);

/* Columns of the result one unit of work holds (threads split the columns). */
#define ROWS_BACK_COLS 16

/* out [N, d] = 0; out[idx[p], :] += dy[p, :] for p in idx's row-major order.
 * Threads split the columns in blocks of ROWS_BACK_COLS, each going through
 * every index in order, so each element sums its terms in the same order at
 * any thread count. Every thread checks every index first: a bad one writes
 * nothing and is reported as get_rows reports it, the first in order. */
static void gml_f32_get_rows_back__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *dy = dst->src[0], *idx = dst->src[1];
    const int64_t N = dst->ne[2], d = dst->ne[3];
    for (int64_t r = 0; r < gml_nrows(dy); r++) {
        int64_t i0, i1, i2;
        gml_row_index(dy, r, &i0, &i1, &i2);
        int32_t row;
        memcpy(&row, gml_ptr(idx, 0, i0, i1, i2), sizeof row);
        if (row >= 0 && row < N) continue;
        char sd[GML_SHAPE_MAX], si[GML_SHAPE_MAX];
        gml_kernel_fail(p, "get_rows_back(%s, %s): index %d at flat position %" PRId64 " is out "
                        "of range [0, %" PRId64 ") for the table's gradient %s (index %s)",
                        dy->name, idx->name, (int)row, r, N, GML_SHAPE(dst, sd), GML_SHAPE(idx, si));
        return;
    }
    const int64_t blocks = (d + ROWS_BACK_COLS - 1) / ROWS_BACK_COLS;
    int64_t b0, b1;
    gml_split(blocks, p->ith, p->nth, &b0, &b1);
    if (b0 == b1) return;
    const int64_t c0 = b0 * ROWS_BACK_COLS, c1 = GML_MIN(d, b1 * ROWS_BACK_COLS);
    for (int64_t n = 0; n < N; n++) {
        float *out = (float *)gml_ptr(dst, 0, 0, n, 0);
        for (int64_t j = c0; j < c1; j++) out[j] = 0.0f;
    }
    for (int64_t r = 0; r < gml_nrows(dy); r++) {
        int64_t i0, i1, i2;
        gml_row_index(dy, r, &i0, &i1, &i2);
        int32_t row;
        memcpy(&row, gml_ptr(idx, 0, i0, i1, i2), sizeof row);
        const char *src = gml_ptr(dy, i0, i1, i2, 0);
        float *out = (float *)gml_ptr(dst, 0, 0, row, 0);
        for (int64_t j = c0; j < c1; j++) out[j] += *(const float *)(src + j * (int64_t)dy->nb[3]);
    }
}

/* dy [.., d] (idx's shape, then d), idx i32 [..] -> [n_rows, d] */
gml_tensor *gml_get_rows_back(gml_context *ctx, gml_tensor *dy, gml_tensor *idx, int64_t n_rows) {
    GML_ENTER(ctx, 2, dy, idx);
    if (!gml_expect_type(ctx, "get_rows_back", dy, GML_F32) ||
        !gml_expect_type(ctx, "get_rows_back", idx, GML_I32))
        return NULL;
    char sd[GML_SHAPE_MAX], si[GML_SHAPE_MAX];
    bool ok = idx->n_dims <= 3 && dy->n_dims == idx->n_dims + 1;
    for (int k = 1; ok && k < GML_MAX_DIMS; k++) ok = dy->ne[k - 1] == idx->ne[k];
    if (!ok)
        return gml_fail(ctx, "get_rows_back(%s, %s): dy %s must be idx's shape %s and a last dim "
                        "(idx 1-D to 3-D)", dy->name, idx->name, GML_SHAPE(dy, sd),
                        GML_SHAPE(idx, si));
    gml_tensor *t = gml_new_op(ctx, GML_OP_GET_ROWS_BACK, GML_F32, 2,
                               (int64_t[]){n_rows, dy->ne[3]}, (gml_tensor *[]){dy, idx}, 2);
    if (!t) return NULL;
    gml_set_params(t, &(get_rows_back_params){n_rows}, sizeof(get_rows_back_params));
    return t;
}

static gml_tensor *build_get_rows_back(gml_context *ctx, const gml_arg *v) {
    return gml_get_rows_back(ctx, v[0].t, v[1].t, v[2].i);
}

static void get_rows_back_args(const gml_tensor *t, gml_arg *v) {
    v[0].t = t->src[0];
    v[1].t = t->src[1];
    v[2].i = t->ne[2];
}

static double get_rows_back_flops(const gml_tensor *dst) { return (double)gml_nelements(dst->src[0]); }

const gml_op_def gml_opdef_get_rows_back = {
    .forward = gml_f32_get_rows_back__ref,
    .reference = gml_f32_get_rows_back__ref,
    .flops = get_rows_back_flops,
    .flags = GML_OPF_MOVES_VALUES,
    GML_ARGS(GML_T("dy"), GML_T("idx"), GML_REQ("n_rows", INT)),
    .build = build_get_rows_back,
    .get_args = get_rows_back_args,
    .doc_args = "dy `[..., d]` f32, idx i32 `[...]` (get_rows' indices), n_rows N",
    .doc_result = "`[N, d]` f32: row r the sum of dy's rows whose index is r, in idx's order "
                  "(get_rows' table gradient)",
};

/* ---- backwards (gml_grad) ------------------------------------------------------ */

/* get_rows: the table's gradient by get_rows_back; the indices have none */
static bool get_rows_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    gml_tensor *table = node->src[0];
    return gml_backward_add(b, table, gml_get_rows_back(gml_backward_context(b), dy, node->src[1],
                                                        table->ne[2]));
}

/* set_rows(dst [N, d], src [n, d], idx [n]) (2-D; the indices distinct, as
 * a KV-cache append writes them): src's gradient is dy's rows at idx; dst's
 * is dy with those rows zero (they were overwritten). */
static bool set_rows_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    gml_context *ctx = gml_backward_context(b);
    gml_tensor *dst = node->src[0], *src = node->src[1], *idx = node->src[2];
    char sd[GML_SHAPE_MAX], si[GML_SHAPE_MAX];
    if (dst->n_dims != 2 || idx->n_dims != 1)
        return gml_backward_fail(b, "the gradient of set_rows is taken for a 2-D destination and "
                                 "1-D indices; got %s and %s", GML_SHAPE(dst, sd),
                                 GML_SHAPE(idx, si));
    if (gml_backward_needs(b, src) && !gml_backward_add(b, src, gml_get_rows(ctx, dy, idx)))
        return false;
    if (!gml_backward_needs(b, dst)) return true;
    gml_tensor *zeros = gml_full(ctx, 2, (int64_t[]){src->ne[2], src->ne[3]}, 0.0f);
    return gml_backward_add(b, dst, gml_set_rows(ctx, gml_cont(ctx, dy), zeros, idx));
}

static gml_tensor *build_get_rows(gml_context *ctx, const gml_arg *v) {
    return gml_get_rows(ctx, v[0].t, v[1].t);
}

const gml_op_def gml_opdef_get_rows = {
    .forward = gml_f32_get_rows,
    .reference = gml_f32_get_rows__ref,
    .flags = GML_OPF_MOVES_VALUES,
    GML_ARGS(GML_T("table"), GML_T("idx")),
    .build = build_get_rows,
    .get_args = gml_args_from_srcs,
    .doc_args = "table `[N, d]` f32, f16, bf16 or q8_0, idx i32 of any shape (up to 3-D)",
    .doc_result = "`[..., d]` f32: `table[idx[...], :]`",
    .backward = get_rows_backward,
};

static gml_tensor *build_set_rows(gml_context *ctx, const gml_arg *v) {
    return gml_set_rows(ctx, v[0].t, v[1].t, v[2].t);
}

const gml_op_def gml_opdef_set_rows = {
    .forward = gml_x32_set_rows,
    .reference = gml_x32_set_rows__ref,
    .flags = GML_OPF_MOVES_VALUES,
    GML_ARGS(GML_T("dst"), GML_T("src"), GML_T("idx")),
    .build = build_set_rows,
    .get_args = gml_args_from_srcs,
    .doc_args = "dst `[.., N, d]` (f32, i32, or f16/bf16 from an f32 src: converted), src `[.., "
                "n, d]`, idx i32 `[n]` or `[A, n]`; no two elements of "
                "dst, nor dst and src or idx, share memory",
    .doc_result = "writes src's rows into dst at rows idx (a KV-cache append); the result is dst "
                  "after the write",
    .backward = set_rows_backward,
};
