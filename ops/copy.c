/* Copies: cont (any strides -> contiguous), cpy (write a into a view of
 * another tensor, e.g. a KV cache slot) and concat (a then b along a dim). */
#include "runs.h"
#include "ukernels.h"

#include <string.h>

/* dst[i] = src[i] elementwise over equal shapes, any strides on both; rows
 * split across threads. Works for f32 and i32 alike (4-byte elements). The
 * builders see to it that src and dst share no memory, except a cpy onto
 * the very same elements, which has nothing to do. */
static void copy_rows(const gml_compute_params *p, const gml_tensor *src, gml_tensor *dst) {
    bool same = src->data == dst->data;
    for (int k = 0; k < GML_MAX_DIMS; k++) same = same && (dst->ne[k] == 1 || src->nb[k] == dst->nb[k]);
    if (same) return;
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

/* ---- conversions: f16, bf16, q8_0 ----------------------------------------------
 * cpy between different types (any pair of f32, f16, bf16, q8_0) goes row
 * by row through an f32 row in the thread's scratch: the source row
 * converted to f32, then converted into the destination; a 2-byte type
 * copied to itself (cont, cpy of f16 or bf16) is moved bit for bit. q8_0
 * tensors here are whole leafs (the builders see to it): their rows are
 * contiguous runs of blocks. The reference kernel uses the scalar
 * conversions element by element (gml_fp32_to_fp16, ...); the fast one the
 * micro-kernels of ops/convert.inc on rows that are contiguous, which give
 * the same bits. */

static bool is_x32(gml_type t) { return t == GML_F32 || t == GML_I32; }

/* An element of a 2-byte or f32 row at stride nb, as f32; and back. */
static float load_f32(gml_type t, const char *p) {
    uint16_t h;
    float f;
    switch (t) {
    case GML_F16: memcpy(&h, p, 2); return gml_fp16_to_fp32(h);
    case GML_BF16: memcpy(&h, p, 2); return gml_bf16_to_fp32(h);
    default: memcpy(&f, p, 4); return f;
    }
}
static void store_f32(gml_type t, char *p, float f) {
    uint16_t h;
    switch (t) {
    case GML_F16: h = gml_fp32_to_fp16(f); memcpy(p, &h, 2); break;
    case GML_BF16: h = gml_fp32_to_bf16(f); memcpy(p, &h, 2); break;
    default: memcpy(p, &f, 4); break;
    }
}

static size_t convert_work_size(const gml_tensor *dst, int nth) {
    if (is_x32(dst->type) && is_x32(dst->src[0]->type)) return 0;
    return (size_t)nth * gml_align_up((size_t)dst->ne[3] * sizeof(float), GML_ALIGN);
}

/* Row r of src into dst, converting; fast: the micro-kernels on contiguous rows. */
static void convert_rows(const gml_compute_params *p, gml_tensor *dst, bool fast) {
    const gml_tensor *src = dst->src[0];
    const gml_type ts = src->type, td = dst->type;
    const int64_t n = dst->ne[3];
    const size_t es = gml_type_size(ts), ed = gml_type_size(td);
    float *buf = (float *)((char *)p->wdata +
                           (size_t)p->ith * gml_align_up((size_t)n * sizeof(float), GML_ALIGN));
    const bool s_rows = ts == GML_Q8_0 || src->nb[3] == es;
    const bool d_rows = td == GML_Q8_0 || dst->nb[3] == ed;
    gml_cvt_ukernel *to = fast && s_rows ? gml_cvt_to_f32(p->isa, ts, NULL) : NULL;
    gml_cvt_ukernel *from = fast && d_rows ? gml_cvt_from_f32(p->isa, td, NULL) : NULL;
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        const char *s = gml_ptr(src, i0, i1, i2, 0);
        char *d = gml_ptr(dst, i0, i1, i2, 0);
        if (ts == td) { /* f16, bf16, q8_0: bits moved */
            if (ts == GML_Q8_0 || (fast && s_rows && d_rows)) {
                memcpy(d, s, gml_row_size(ts, n));
            } else {
                for (int64_t i = 0; i < n; i++)
                    memcpy(d + i * (int64_t)dst->nb[3], s + i * (int64_t)src->nb[3], es);
            }
            continue;
        }
        /* the row as f32: in place when dst is a contiguous f32 row */
        float *row = td == GML_F32 && d_rows ? (float *)(void *)d : buf;
        if (ts == GML_F32 && s_rows) row = (float *)(void *)s; /* then td != f32 */
        else if (to) to((size_t)n, s, row);
        else if (ts == GML_Q8_0) gml_dequantize_row_q8_0((const void *)s, row, n);
        else
            for (int64_t i = 0; i < n; i++) row[i] = load_f32(ts, s + i * (int64_t)src->nb[3]);
        if (row == (float *)(void *)d) continue;
        if (from) from((size_t)n, row, d);
        else if (td == GML_Q8_0) gml_quantize_row_q8_0(row, (void *)d, n);
        else
            for (int64_t i = 0; i < n; i++) store_f32(td, d + i * (int64_t)dst->nb[3], row[i]);
    }
}

static void gml_x32_copy__ref(const gml_compute_params *p, gml_tensor *dst) {
    if (!is_x32(dst->type) || !is_x32(dst->src[0]->type)) {
        convert_rows(p, dst, false);
        return;
    }
    copy_rows(p, dst->src[0], dst);
}

/* ---- fast kernels ---------------------------------------------------------- */

void gml_x32_copy_ukernel__scalar_memcpy(size_t n, const uint32_t *src, uint32_t *dst) {
    memcpy(dst, src, n * sizeof *dst);
}

void gml_x32_transpose_ukernel__scalar_8x8(size_t rows, size_t cols, const uint32_t *src,
                                           size_t src_stride, uint32_t *dst, size_t dst_stride) {
    for (size_t j0 = 0; j0 < cols; j0 += 8)
        for (size_t i0 = 0; i0 < rows; i0 += 8)
            for (size_t j = j0; j < GML_MIN(cols, j0 + 8); j++)
                for (size_t i = i0; i < GML_MIN(rows, i0 + 8); i++)
                    dst[j * dst_stride + i] = src[i * src_stride + j];
}

/* Both innermost dims dense (gml_find_runs gave k < 4): one memcpy per run,
 * this thread's share of the elements. */
static void copy_runs(const gml_compute_params *p, gml_tensor *dst, const gml_run_operand *d,
                      const gml_run_operand *s, int k) {
    gml_x32_copy_ukernel *const copy =
        GML_PICK_UKERNEL(p->isa, GML_X32_COPY_UKERNELS, gml_x32_copy_ukernel);
    const int64_t run = gml_run_length(dst->ne, k);
    int64_t e, end;
    gml_split_elements(gml_nelements(dst), p->ith, p->nth, &e, &end);
    while (e < end) {
        const int64_t r = e / run, off = e % run, len = GML_MIN(run - off, end - e);
        const uint32_t *from = (const uint32_t *)gml_run_start(s, dst->ne, k, r) + off;
        uint32_t *to = (uint32_t *)gml_run_start(d, dst->ne, k, r) + off;
        if (from != to) copy((size_t)len, from, to);
        e += len;
    }
}

/* Columns of dst handed out per unit of work in copy_transposed. */
#define TRANSPOSE_BLOCK 32

/* dst's last dim is dense but src's is strided, while src is dense along
 * dim t: each plane (dims t and 3, the other two fixed) is a transpose.
 * Units of work: TRANSPOSE_BLOCK indices along t of one plane. */
static void copy_transposed(const gml_compute_params *p, gml_tensor *dst, const gml_tensor *src,
                            int t) {
    gml_x32_transpose_ukernel *const transpose =
        GML_PICK_UKERNEL(p->isa, GML_X32_TRANSPOSE_UKERNELS, gml_x32_transpose_ukernel);
    int o[2], n_o = 0; /* the other two dims */
    for (int d = 0; d < 3; d++)
        if (d != t) o[n_o++] = d;
    const int64_t cols = dst->ne[t], blocks = (cols + TRANSPOSE_BLOCK - 1) / TRANSPOSE_BLOCK;
    int64_t u0, u1;
    gml_split(dst->ne[o[0]] * dst->ne[o[1]] * blocks, p->ith, p->nth, &u0, &u1);
    for (int64_t u = u0; u < u1; u++) {
        const int64_t plane = u / blocks, j = u % blocks * TRANSPOSE_BLOCK;
        const int64_t i0 = plane / dst->ne[o[1]], i1 = plane % dst->ne[o[1]];
        const char *from = (const char *)src->data + i0 * (int64_t)src->nb[o[0]] +
                           i1 * (int64_t)src->nb[o[1]] + j * 4;
        char *to = (char *)dst->data + i0 * (int64_t)dst->nb[o[0]] + i1 * (int64_t)dst->nb[o[1]] +
                   j * (int64_t)dst->nb[t];
        transpose((size_t)dst->ne[3], (size_t)GML_MIN(TRANSPOSE_BLOCK, cols - j),
                  (const uint32_t *)from, src->nb[3] / 4, (uint32_t *)to, dst->nb[t] / 4);
    }
}

/* The paths of copy_fast, slowest last. */
enum { COPY_RUNS, COPY_TRANSPOSED, COPY_NONE };

static const char *copy_path_name(gml_isa isa, int path) {
    return path == COPY_RUNS ? GML_PICK_UKERNEL_NAME(isa, GML_X32_COPY_UKERNELS)
                             : GML_PICK_UKERNEL_NAME(isa, GML_X32_TRANSPOSE_UKERNELS);
}

/* dst[i] = src[i] (equal shapes) by the fast paths: dense runs -> memcpy; a
 * source dense along another dim than the last -> transposes. Returns the
 * path taken, or COPY_NONE (nothing done) when both are strided in a way
 * neither path takes. dst may be a header over a part of a tensor (concat). */
static int copy_fast(const gml_compute_params *p, const gml_tensor *src, gml_tensor *dst) {
    gml_run_operand ops[2] = {gml_run_operand_of(dst), gml_run_operand_of(src)};
    const int k = gml_find_runs(dst->ne, ops, 2, false);
    if (k < GML_MAX_DIMS) {
        copy_runs(p, dst, &ops[0], &ops[1], k);
        return COPY_RUNS;
    }
    if (dst->nb[3] == 4) /* then src's last dim is strided */
        for (int t = 0; t < 3; t++)
            if (dst->ne[t] > 1 && src->nb[t] == 4) {
                copy_transposed(p, dst, src, t);
                return COPY_TRANSPOSED;
            }
    return COPY_NONE;
}

/* Dense runs -> memcpy; a source dense along another dim than the last ->
 * transposes; anything else (both strided) -> the reference. */
static void gml_x32_copy(const gml_compute_params *p, gml_tensor *dst) {
    const gml_type ts = dst->src[0]->type, td = dst->type;
    if (!is_x32(td) || !is_x32(ts)) {
        const char *name = "moves of 2-byte elements";
        if (ts != td) {
            if (ts != GML_F32) gml_cvt_to_f32(p->isa, ts, &name);
            else gml_cvt_from_f32(p->isa, td, &name);
        }
        gml_kernel_note(p, name);
        convert_rows(p, dst, true);
        return;
    }
    const int path = copy_fast(p, dst->src[0], dst);
    if (path != COPY_NONE) {
        gml_kernel_note(p, copy_path_name(p->isa, path));
        return;
    }
    gml_kernel_note(p, "reference (the last dims of both sides are strided)");
    gml_x32_copy__ref(p, dst);
}

/* a [...] (any strides) -> out [...] contiguous */
gml_tensor *gml_cont(gml_context *ctx, gml_tensor *a) {
    GML_ENTER(ctx, 1, a);
    gml_tensor *t = gml_new_op(ctx, GML_OP_CONT, a->type, a->n_dims,
                               a->ne + GML_MAX_DIMS - a->n_dims, &a, 1);
    if (!t) return NULL;
    snprintf(t->name, sizeof t->name, "%.*s (cont)", GML_MAX_NAME - 16, a->name);
    return t;
}

/* a [...] -> written into dst [...] (same shape and type); returns a view of
 * dst that stands for "dst after the copy". Refused if two elements of dst
 * share memory or dst shares memory with a (a with exactly dst's elements
 * is a copy onto itself: allowed, nothing moves). */
gml_tensor *gml_cpy(gml_context *ctx, gml_tensor *a, gml_tensor *dst) {
    GML_ENTER(ctx, 2, a, dst);
    char sa[GML_SHAPE_MAX], sd[GML_SHAPE_MAX];
    const bool floats = a->type != GML_I32 && dst->type != GML_I32;
    if (!gml_same_shape(a, dst) || (a->type != dst->type && !floats))
        return gml_fail(ctx, "cpy(%s, %s): shapes or types differ: %s %s into %s %s", a->name,
                        dst->name, GML_SHAPE(a, sa), gml_type_name(a->type), GML_SHAPE(dst, sd),
                        gml_type_name(dst->type));
    if (a->type == GML_Q8_0 && a->view_src)
        return gml_fail(ctx, "cpy(%s, %s): a q8_0 source must be a whole q8_0 tensor, not a view "
                        "(%s %s)", a->name, dst->name, a->name, GML_SHAPE(a, sa));
    char call[GML_CALL_MAX];
    gml_format_call("cpy", (gml_tensor *[]){a, dst}, 2, call, sizeof call);
    if (!gml_check_write(ctx, call, dst, (const gml_tensor *[]){a}, (const char *[]){"source"}, 1,
                         true))
        return NULL;
    gml_tensor *t = gml_new_view(ctx, GML_OP_CPY, dst, dst->n_dims, dst->ne + GML_MAX_DIMS - dst->n_dims,
                                 dst->nb + GML_MAX_DIMS - dst->n_dims, 0, "copied into");
    if (!t) return NULL;
    t->src[0] = a;
    t->src[1] = dst;
    snprintf(t->name, sizeof t->name, "%.*s (copy of %.*s)", GML_MAX_NAME / 2 - 8, dst->name,
             GML_MAX_NAME / 2 - 8, a->name);
    return t;
}

static gml_tensor *build_cont(gml_context *ctx, const gml_arg *v) { return gml_cont(ctx, v[0].t); }
static gml_tensor *build_cpy(gml_context *ctx, const gml_arg *v) { return gml_cpy(ctx, v[0].t, v[1].t); }

/* Backwards (gml_grad). cont: dy itself. cpy: a's gradient is dy (across a
 * conversion too: the rounding to f16 is taken as the identity, as
 * PyTorch's .to() does); dst's elements are overwritten, so the values dst
 * held get none. */
static bool cont_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    return gml_backward_add(b, node->src[0], dy);
}
static bool cpy_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    return gml_backward_add(b, node->src[0], dy);
}

const gml_op_def gml_opdef_cont = {
    .forward = gml_x32_copy,
    .reference = gml_x32_copy__ref,
    .work_size = convert_work_size,
    .flags = GML_OPF_MOVES_VALUES,
    GML_ARGS(GML_T("a")),
    .build = build_cont,
    .get_args = gml_args_from_srcs,
    .doc_args = "any strides",
    .doc_result = "a contiguous copy",
    .backward = cont_backward,
};
const gml_op_def gml_opdef_cpy = {
    .forward = gml_x32_copy,
    .reference = gml_x32_copy__ref,
    .work_size = convert_work_size,
    .flags = GML_OPF_MOVES_VALUES,
    GML_ARGS(GML_T("a"), GML_T("dst")),
    .build = build_cpy,
    .get_args = gml_args_from_srcs,
    .doc_args = "same shape; types equal or any pair of f32, f16, bf16, q8_0 (converted); no "
                "two elements of dst, nor dst and a, share memory (unless a is dst)",
    .doc_result = "writes a into dst (e.g. a view into a cache); the result is dst",
    .backward = cpy_backward,
};

/* ---- concat ------------------------------------------------------------------ */

typedef struct concat_params {
    int32_t dim; /* PyTorch's dim, 0..n-1 */
} concat_params;
GML_PARAMS_FIT(concat_params);

static int concat_axis(const gml_tensor *dst) {
    concat_params cp;
    gml_get_params(dst, &cp, sizeof cp);
    return GML_MAX_DIMS - dst->n_dims + cp.dim;
}

/* out[.., i, ..] = i < n_a ? a[.., i, ..] : b[.., i - n_a, ..] along the
 * concat axis, plain loops over any strides; rows of out split across threads. */
static void gml_x32_concat__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *a = dst->src[0], *b = dst->src[1];
    const int axis = concat_axis(dst);
    const int64_t na = a->ne[axis];
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i[GML_MAX_DIMS];
        gml_row_index(dst, r, &i[0], &i[1], &i[2]);
        for (i[3] = 0; i[3] < dst->ne[3]; i[3]++) {
            int64_t s[GML_MAX_DIMS] = {i[0], i[1], i[2], i[3]};
            const gml_tensor *from = a;
            if (s[axis] >= na) {
                s[axis] -= na;
                from = b;
            }
            memcpy(gml_ptr(dst, i[0], i[1], i[2], i[3]), gml_ptr(from, s[0], s[1], s[2], s[3]), 4);
        }
    }
}

/* Each input is copied into its part of out (a header over out's data: out's
 * strides, the input's sizes) by cpy's fast paths, memcpy of dense runs or
 * transposes, or by plain loops when its layout fits neither. Threads split
 * each part's elements; every element is moved, never computed, so the
 * result is the same bits at any thread count and ISA. The kernel noted is
 * that of the slower part (plain loops, then transposes, then memcpy). */
static void gml_x32_concat(const gml_compute_params *p, gml_tensor *dst) {
    const int axis = concat_axis(dst);
    int slowest = COPY_RUNS;
    int64_t at = 0;
    for (int k = 0; k < 2; k++) {
        const gml_tensor *src = dst->src[k];
        gml_tensor part = *dst;
        part.ne[axis] = src->ne[axis];
        part.data = (char *)dst->data + at * (int64_t)dst->nb[axis];
        at += src->ne[axis];
        const int path = copy_fast(p, src, &part);
        if (path == COPY_NONE) copy_rows(p, src, &part);
        slowest = GML_MAX(slowest, path);
    }
    gml_kernel_note(p, slowest == COPY_NONE ? "strided loop (an input strided on every dim)"
                                            : copy_path_name(p->isa, slowest));
}

/* a [.., n_a, ..], b [.., n_b, ..] -> out [.., n_a + n_b, ..] contiguous */
gml_tensor *gml_concat(gml_context *ctx, gml_tensor *a, gml_tensor *b, int dim) {
    GML_ENTER(ctx, 2, a, b);
    char sa[GML_SHAPE_MAX], sb[GML_SHAPE_MAX];
    if (a->n_dims != b->n_dims)
        return gml_fail(ctx, "concat(%s, %s): %s %s is %d-D, %s %s is %d-D; the inputs need the "
                        "same number of dims", a->name, b->name, a->name, GML_SHAPE(a, sa),
                        a->n_dims, b->name, GML_SHAPE(b, sb), b->n_dims);
    const int axis = gml_axis(a, dim);
    if (axis < 0)
        return gml_fail(ctx, "concat(%s, %s): dim %d is out of range for %d-D inputs %s %s and %s "
                        "%s", a->name, b->name, dim, a->n_dims, a->name, GML_SHAPE(a, sa),
                        b->name, GML_SHAPE(b, sb));
    if (a->type != b->type)
        return gml_fail(ctx, "concat(%s, %s): types differ: %s %s %s and %s %s %s", a->name,
                        b->name, a->name, GML_SHAPE(a, sa), gml_type_name(a->type), b->name,
                        GML_SHAPE(b, sb), gml_type_name(b->type));
    const int lead = GML_MAX_DIMS - a->n_dims;
    for (int i = lead; i < GML_MAX_DIMS; i++)
        if (i != axis && a->ne[i] != b->ne[i])
            return gml_fail(ctx, "concat(%s, %s): sizes differ in dim %d: %s %s and %s %s; only dim "
                            "%d (the one concatenated along) may differ", a->name, b->name,
                            i - lead, a->name, GML_SHAPE(a, sa), b->name, GML_SHAPE(b, sb), dim);
    int64_t ne[GML_MAX_DIMS];
    for (int i = 0; i < GML_MAX_DIMS; i++) ne[i] = a->ne[i];
    ne[axis] += b->ne[axis];
    gml_tensor *t = gml_new_op(ctx, GML_OP_CONCAT, a->type, a->n_dims, ne + lead,
                               (gml_tensor *[]){a, b}, 2);
    if (!t) return NULL;
    gml_set_params(t, &(concat_params){axis - lead}, sizeof(concat_params));
    return t;
}

static gml_tensor *build_concat(gml_context *ctx, const gml_arg *v) {
    int dim;
    if (!gml_arg_dim(ctx, "concat", v[0].t, "dim", v[2].i, &dim)) return NULL;
    return gml_concat(ctx, v[0].t, v[1].t, dim);
}

static void concat_args(const gml_tensor *t, gml_arg *v) {
    concat_params cp;
    gml_get_params(t, &cp, sizeof cp);
    v[0].t = t->src[0];
    v[1].t = t->src[1];
    v[2].i = cp.dim;
}

/* Backward (gml_grad): a's and b's parts of dy, as slices (views, no copy) */
static bool concat_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    gml_context *ctx = gml_backward_context(b);
    gml_tensor *a = node->src[0], *bb = node->src[1];
    concat_params cp;
    gml_get_params(node, &cp, sizeof cp);
    const int axis = concat_axis(node);
    return gml_backward_add(b, a, gml_slice(ctx, dy, cp.dim, 0, a->ne[axis])) &&
           gml_backward_add(b, bb, gml_slice(ctx, dy, cp.dim, a->ne[axis], bb->ne[axis]));
}

const gml_op_def gml_opdef_concat = {
    .forward = gml_x32_concat,
    .reference = gml_x32_concat__ref,
    .flags = GML_OPF_MOVES_VALUES,
    GML_ARGS(GML_T("a"), GML_T("b"), GML_REQ("dim", INT)),
    .build = build_concat,
    .get_args = concat_args,
    .doc_args = "same type and sizes but along dim (negative from the end); any strides",
    .doc_result = "`[.., n_a + n_b, ..]` contiguous: a then b along dim (torch.cat)",
    .backward = concat_backward,
};
