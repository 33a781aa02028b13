/* Reductions over the last dim, keeping it: sum, mean and max,
 * x [..., n] -> [..., 1], as torch.sum/mean/amax(x, -1, keepdim=True).
 * The order of the fast kernels' arithmetic, the same on every ISA, is in
 * ops/reduce.h; the reference kernels add in order in double. */
#include "reduce.h"

#include <math.h>

typedef enum { R_SUM, R_MEAN, R_MAX } reduce_kind;

/* ---- reference kernels: plain loops over any strides ---------------------- */

static void reduce_ref(const gml_compute_params *p, gml_tensor *dst, reduce_kind kind) {
    const gml_tensor *x = dst->src[0];
    const int64_t n = x->ne[3], sx = (int64_t)x->nb[3];
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        const char *xr = gml_ptr(x, i0, i1, i2, 0);
        float *out = (float *)gml_ptr(dst, i0, i1, i2, 0);
        if (kind == R_MAX) {
            float m = -INFINITY;
            bool nan = false;
            for (int64_t j = 0; j < n; j++) {
                const float v = *(const float *)(xr + j * sx);
                nan |= v != v;
                m = v > m ? v : m;
            }
            *out = nan ? NAN : m;
        } else {
            double s = 0;
            for (int64_t j = 0; j < n; j++) s += *(const float *)(xr + j * sx);
            *out = (float)(kind == R_MEAN ? s / (double)n : s);
        }
    }
}

static void gml_f32_sum__ref(const gml_compute_params *p, gml_tensor *dst) { reduce_ref(p, dst, R_SUM); }
static void gml_f32_mean__ref(const gml_compute_params *p, gml_tensor *dst) { reduce_ref(p, dst, R_MEAN); }
static void gml_f32_max__ref(const gml_compute_params *p, gml_tensor *dst) { reduce_ref(p, dst, R_MAX); }

/* ---- the portable variants (the order of ops/reduce.h) -------------------- */

double gml_f32_rsum_ukernel__scalar_u16(size_t n, const float *x) {
    double acc[GML_REDUCE_LANES] = {0};
    for (size_t b = 0; b < n; b += GML_REDUCE_BLOCK) {
        const size_t end = GML_MIN(n, b + GML_REDUCE_BLOCK);
        float lane[GML_REDUCE_LANES];
        for (int l = 0; l < GML_REDUCE_LANES; l++) lane[l] = -0.0f;
        for (size_t i = b; i < end; i++) lane[i % GML_REDUCE_LANES] += x[i];
        for (int l = 0; l < GML_REDUCE_LANES; l++) acc[l] += (double)lane[l];
    }
    return gml_reduce_tree16(acc);
}

double gml_f32_rsumsq_ukernel__scalar_u16(size_t n, const float *x, float c) {
    double acc[GML_REDUCE_LANES] = {0};
    for (size_t b = 0; b < n; b += GML_REDUCE_BLOCK) {
        const size_t end = GML_MIN(n, b + GML_REDUCE_BLOCK);
        float lane[GML_REDUCE_LANES];
        for (int l = 0; l < GML_REDUCE_LANES; l++) lane[l] = -0.0f;
        for (size_t i = b; i < end; i++) {
            const float d = x[i] - c;
            const float sq = d * d;
            lane[i % GML_REDUCE_LANES] += sq;
        }
        for (int l = 0; l < GML_REDUCE_LANES; l++) acc[l] += (double)lane[l];
    }
    return gml_reduce_tree16(acc);
}

float gml_f32_rmax_ukernel__scalar_u16(size_t n, const float *x) {
    float m[GML_REDUCE_LANES];
    for (int l = 0; l < GML_REDUCE_LANES; l++) m[l] = -INFINITY;
    bool nan = false;
    for (size_t i = 0; i < n; i++) {
        const float v = x[i];
        nan |= v != v;
        m[i % GML_REDUCE_LANES] = v > m[i % GML_REDUCE_LANES] ? v : m[i % GML_REDUCE_LANES];
    }
    return gml_reduce_tree16_max(m, nan);
}

/* ---- fast kernels ----------------------------------------------------------
 * One micro-kernel call per row; a row that is not contiguous (a transposed
 * or permuted view) is gathered first into this thread's part of the
 * scratch, so the result is bitwise what the same numbers give contiguous. */

static size_t row_bytes(const gml_tensor *dst) {
    return gml_align_up((size_t)dst->src[0]->ne[3] * sizeof(float), GML_ALIGN);
}

static size_t reduce_work_size(const gml_tensor *dst, int nth) {
    const gml_tensor *x = dst->src[0];
    return x->ne[3] > 1 && x->nb[3] != sizeof(float) ? (size_t)nth * row_bytes(dst) : 0;
}

static void reduce_forward(const gml_compute_params *p, gml_tensor *dst, reduce_kind kind) {
    const gml_tensor *x = dst->src[0];
    const int64_t n = x->ne[3], sx = (int64_t)x->nb[3];
    const bool gather = n > 1 && sx != (int64_t)sizeof(float);
    gml_f32_rsum_ukernel *const rsum = GML_PICK_UKERNEL(p->isa, GML_F32_RSUM_UKERNELS, gml_f32_rsum_ukernel);
    gml_f32_rmax_ukernel *const rmax = GML_PICK_UKERNEL(p->isa, GML_F32_RMAX_UKERNELS, gml_f32_rmax_ukernel);
    if (kind == R_MAX)
        gml_kernel_note(p, gather ? GML_PICK_UKERNEL_NAME_AS(p->isa, GML_F32_RMAX_UKERNELS, GML_UKERNEL_NAME_GATHERED)
                                  : GML_PICK_UKERNEL_NAME(p->isa, GML_F32_RMAX_UKERNELS));
    else
        gml_kernel_note(p, gather ? GML_PICK_UKERNEL_NAME_AS(p->isa, GML_F32_RSUM_UKERNELS, GML_UKERNEL_NAME_GATHERED)
                                  : GML_PICK_UKERNEL_NAME(p->isa, GML_F32_RSUM_UKERNELS));
    float *buf = gather ? (float *)(void *)((char *)p->wdata + (size_t)p->ith * row_bytes(dst)) : NULL;
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        const char *xr = gml_ptr(x, i0, i1, i2, 0);
        const float *row = (const float *)(const void *)xr;
        if (gather) {
            for (int64_t j = 0; j < n; j++) memcpy(&buf[j], xr + j * sx, sizeof(float));
            row = buf;
        }
        float *out = (float *)gml_ptr(dst, i0, i1, i2, 0);
        if (kind == R_MAX) {
            *out = rmax((size_t)n, row);
        } else {
            const double s = rsum((size_t)n, row);
            *out = (float)(kind == R_MEAN ? s / (double)n : s);
        }
    }
}

static void gml_f32_sum(const gml_compute_params *p, gml_tensor *dst) { reduce_forward(p, dst, R_SUM); }
static void gml_f32_mean(const gml_compute_params *p, gml_tensor *dst) { reduce_forward(p, dst, R_MEAN); }
static void gml_f32_max(const gml_compute_params *p, gml_tensor *dst) { reduce_forward(p, dst, R_MAX); }

static double reduce_flops(const gml_tensor *dst) { return (double)gml_nelements(dst->src[0]); }

static gml_tensor *reduce(gml_context *ctx, gml_op op, gml_tensor *x) {
    if (!x) return NULL;
    if (!gml_expect_type(ctx, gml_op_name(op), x, GML_F32)) return NULL;
    int64_t ne[GML_MAX_DIMS];
    const int nd = x->n_dims;
    for (int d = 0; d < nd; d++) ne[d] = x->ne[GML_MAX_DIMS - nd + d];
    ne[nd - 1] = 1;
    return gml_new_op(ctx, op, GML_F32, nd, ne, &x, 1);
}

/* x [..., n] -> [..., 1] */
gml_tensor *gml_sum(gml_context *ctx, gml_tensor *x) {
    GML_ENTER(ctx, 1, x);
    return reduce(ctx, GML_OP_SUM, x);
}
gml_tensor *gml_mean(gml_context *ctx, gml_tensor *x) {
    GML_ENTER(ctx, 1, x);
    return reduce(ctx, GML_OP_MEAN, x);
}
gml_tensor *gml_max(gml_context *ctx, gml_tensor *x) {
    GML_ENTER(ctx, 1, x);
    return reduce(ctx, GML_OP_MAX, x);
}

static gml_tensor *build_sum(gml_context *ctx, const gml_arg *v) { return gml_sum(ctx, v[0].t); }
static gml_tensor *build_mean(gml_context *ctx, const gml_arg *v) { return gml_mean(ctx, v[0].t); }
static gml_tensor *build_max(gml_context *ctx, const gml_arg *v) { return gml_max(ctx, v[0].t); }

/* ---- backwards (gml_grad) ---------------------------------------------------- */

/* d sum = dy [..., 1] repeated along the last dim */
static bool sum_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    gml_tensor *x = node->src[0];
    const int64_t n = x->ne[3];
    return gml_backward_add(b, x, n == 1 ? dy : gml_repeat_interleave(gml_backward_context(b), dy,
                                                                      (int)n, -1));
}
/* d mean = dy / n repeated (dy times the float nearest 1/n) */
static bool mean_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    gml_context *ctx = gml_backward_context(b);
    gml_tensor *x = node->src[0];
    const int64_t n = x->ne[3];
    gml_tensor *s = gml_scale(ctx, dy, (float)(1.0 / (double)n));
    return gml_backward_add(b, x, n == 1 ? s : gml_repeat_interleave(ctx, s, (int)n, -1));
}
static bool max_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    return gml_backward_add(b, node->src[0],
                            gml_max_back(gml_backward_context(b), node->src[0], node, dy));
}

/* A -inf or +inf input may reach the output (a sum of -inf is -inf). */
const gml_op_def gml_opdef_sum = {
    .forward = gml_f32_sum,
    .reference = gml_f32_sum__ref,
    .work_size = reduce_work_size,
    .flops = reduce_flops,
    .flags = GML_OPF_MOVES_VALUES,
    GML_ARGS(GML_T("x")),
    .build = build_sum,
    .get_args = gml_args_from_srcs,
    .doc_args = "x `[..., n]`",
    .doc_result = "`[..., 1]`: the sum over the last dim (torch.sum(x, -1, keepdim=True))",
    .backward = sum_backward,
};
const gml_op_def gml_opdef_mean = {
    .forward = gml_f32_mean,
    .reference = gml_f32_mean__ref,
    .work_size = reduce_work_size,
    .flops = reduce_flops,
    .flags = GML_OPF_MOVES_VALUES,
    GML_ARGS(GML_T("x")),
    .build = build_mean,
    .get_args = gml_args_from_srcs,
    .doc_args = "x `[..., n]`",
    .doc_result = "`[..., 1]`: the mean over the last dim (torch.mean(x, -1, keepdim=True))",
    .backward = mean_backward,
};
const gml_op_def gml_opdef_max = {
    .forward = gml_f32_max,
    .reference = gml_f32_max__ref,
    .work_size = reduce_work_size,
    .flops = reduce_flops,
    .flags = GML_OPF_MOVES_VALUES,
    GML_ARGS(GML_T("x")),
    .build = build_max,
    .get_args = gml_args_from_srcs,
    .doc_args = "x `[..., n]`",
    .doc_result = "`[..., 1]`: the max over the last dim, NaN if the row has a NaN "
                  "(torch.amax(x, -1, keepdim=True))",
    .backward = max_backward,
};

/* ---- sum_to: a broadcast undone ------------------------------------------------
 * x [...] -> out [ne...] (x's shape is ne broadcast), each output element the
 * sum of the elements of x that broadcast from it: the gradient of a
 * broadcast operand. Each output element's terms in row-major order of x's
 * index, added in double and rounded once, so the result does not depend on
 * how threads split the outputs; the fast kernel (below the reference) adds
 * them in that order too, columns side by side in vectors: its results are
 * the reference's bits. */

/* Output elements one thread sums at a time, side by side, along the last
 * dim (when it is not summed over): each term of the block is read with one
 * pass over the summed dims. */
#define SUM_TO_BLOCK 64

static void gml_f32_sum_to__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *x = dst->src[0];
    int red[GML_MAX_DIMS], n_red = 0; /* the dims summed over, outermost first */
    int64_t n_terms = 1;
    for (int k = 0; k < GML_MAX_DIMS; k++)
        if (dst->ne[k] == 1 && x->ne[k] > 1) {
            red[n_red++] = k;
            n_terms *= x->ne[k];
        }
    const int64_t n3 = dst->ne[3], blocks = (n3 + SUM_TO_BLOCK - 1) / SUM_TO_BLOCK;
    int64_t u0, u1;
    gml_split(gml_nrows(dst) * blocks, p->ith, p->nth, &u0, &u1);
    double acc[SUM_TO_BLOCK];
    for (int64_t u = u0; u < u1; u++) {
        int64_t o[GML_MAX_DIMS];
        gml_row_index(dst, u / blocks, &o[0], &o[1], &o[2]);
        const int64_t j0 = u % blocks * SUM_TO_BLOCK, len = GML_MIN((int64_t)SUM_TO_BLOCK, n3 - j0);
        for (int64_t j = 0; j < len; j++) acc[j] = 0;
        for (int64_t r = 0; r < n_terms; r++) {
            int64_t i[GML_MAX_DIMS] = {o[0], o[1], o[2], j0};
            int64_t rest = r; /* r in row-major order over the summed dims */
            for (int k = n_red - 1; k >= 0; k--) {
                i[red[k]] = rest % x->ne[red[k]];
                rest /= x->ne[red[k]];
            }
            const char *px = gml_ptr(x, i[0], i[1], i[2], i[3]);
            const int64_t sx = (int64_t)x->nb[3];
            for (int64_t j = 0; j < len; j++) acc[j] += *(const float *)(px + j * sx);
        }
        float *out = (float *)gml_ptr(dst, o[0], o[1], o[2], j0);
        for (int64_t j = 0; j < len; j++) out[j] = (float)acc[j];
    }
}

/* ---- the portable variant: the reference's loop ---- */
void gml_f32_colsum_ukernel__scalar_u1(size_t len, const char *x, const gml_colsum_terms *t,
                                       float *out) {
    double acc[GML_COLSUM_MAX];
    for (size_t j = 0; j < len; j++) acc[j] = 0;
    int64_t idx[GML_MAX_DIMS] = {0};
    const char *p = x;
    for (int64_t r = gml_colsum_count(t); r > 0; r--) {
        const float *row = (const float *)(const void *)p;
        for (size_t j = 0; j < len; j++) acc[j] += row[j];
        gml_colsum_next(t, idx, &p);
    }
    for (size_t j = 0; j < len; j++) out[j] = (float)acc[j];
}

/* The fast kernel: the reference's blocks of the last dim, each by the
 * colsum micro-kernel (every column's terms in the reference's order: its
 * bits at every ISA). Where the last dim is summed, or x's last dim is not
 * contiguous, the reference. */
static void gml_f32_sum_to(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *x = dst->src[0];
    if ((dst->ne[3] == 1 && x->ne[3] > 1) || (x->ne[3] > 1 && x->nb[3] != sizeof(float))) {
        gml_kernel_note(p, dst->ne[3] == 1 ? "reference (the last dim summed)"
                                           : "reference (x's last dim strided)");
        gml_f32_sum_to__ref(p, dst);
        return;
    }
    gml_f32_colsum_ukernel *const fn = GML_PICK_UKERNEL(p->isa, GML_F32_COLSUM_UKERNELS, gml_f32_colsum_ukernel);
    gml_kernel_note(p, GML_PICK_UKERNEL_NAME(p->isa, GML_F32_COLSUM_UKERNELS));
    gml_colsum_terms t = {0};
    for (int k = 0; k < GML_MAX_DIMS; k++)
        if (dst->ne[k] == 1 && x->ne[k] > 1) {
            t.ne[t.n] = x->ne[k];
            t.nb[t.n++] = (int64_t)x->nb[k];
        }
    const int64_t n3 = dst->ne[3], blocks = (n3 + GML_COLSUM_MAX - 1) / GML_COLSUM_MAX;
    int64_t u0, u1;
    gml_split(gml_nrows(dst) * blocks, p->ith, p->nth, &u0, &u1);
    for (int64_t u = u0; u < u1; u++) {
        int64_t o0, o1, o2;
        gml_row_index(dst, u / blocks, &o0, &o1, &o2);
        const int64_t j0 = u % blocks * GML_COLSUM_MAX;
        fn((size_t)GML_MIN((int64_t)GML_COLSUM_MAX, n3 - j0), gml_ptr(x, o0, o1, o2, j0), &t,
           (float *)gml_ptr(dst, o0, o1, o2, j0));
    }
}

/* x [...] -> [ne...], x's shape ne broadcast */
gml_tensor *gml_sum_to(gml_context *ctx, gml_tensor *x, int n_dims, const int64_t *ne) {
    GML_ENTER(ctx, 1, x);
    if (!ne) return gml_fail(ctx, "gml_sum_to: ne is NULL");
    if (!gml_expect_type(ctx, "sum_to", x, GML_F32)) return NULL;
    char sx[GML_SHAPE_MAX], sn[GML_SHAPE_MAX];
    bool ok = n_dims >= 1 && n_dims <= x->n_dims;
    for (int i = 0; ok && i < n_dims; i++) {
        const int64_t xi = x->ne[GML_MAX_DIMS - n_dims + i];
        ok = ne[i] == 1 || ne[i] == xi;
    }
    if (!ok) {
        size_t k = (size_t)snprintf(sn, sizeof sn, "[");
        for (int i = 0; i < n_dims && i < GML_MAX_DIMS && k < sizeof sn; i++)
            k += (size_t)snprintf(sn + k, sizeof sn - k, "%s%" PRId64, i ? "," : "", ne[i]);
        if (k < sizeof sn) snprintf(sn + k, sizeof sn - k, "]");
        return gml_fail(ctx, "sum_to(%s): %s %s is not a broadcast of %s (each of its last %d "
                        "dims must be 1 or equal)", x->name, x->name, GML_SHAPE(x, sx), sn,
                        n_dims);
    }
    return gml_new_op(ctx, GML_OP_SUM_TO, GML_F32, n_dims, ne, &x, 1);
}

static gml_tensor *build_sum_to(gml_context *ctx, const gml_arg *v) {
    return gml_sum_to(ctx, v[0].t, v[1].n, v[1].list);
}

static void sum_to_args(const gml_tensor *t, gml_arg *v) {
    v[0].t = t->src[0];
    v[1].n = t->n_dims;
    memcpy(v[1].list, t->ne + GML_MAX_DIMS - t->n_dims, (size_t)t->n_dims * sizeof *t->ne);
}

static double sum_to_flops(const gml_tensor *dst) { return (double)gml_nelements(dst->src[0]); }

const gml_op_def gml_opdef_sum_to = {
    .forward = gml_f32_sum_to,
    .reference = gml_f32_sum_to__ref,
    .flops = sum_to_flops,
    .flags = GML_OPF_MOVES_VALUES,
    GML_ARGS(GML_T("x"), GML_REQ("shape", INTS)),
    .build = build_sum_to,
    .get_args = sum_to_args,
    .doc_args = "x `[...]` whose shape is `shape` broadcast",
    .doc_result = "`[shape]`: x summed over the broadcast dims (x.sum_to_size(shape)), each sum in "
                  "row-major order, in double",
};

/* ---- max_back: the gradient of max --------------------------------------------- */

/* dx [..., n]: dy / c at the c elements of the row equal to its max, 0
 * elsewhere; rows split across threads. */
static void gml_f32_max_back__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *x = dst->src[0], *y = dst->src[1], *dy = dst->src[2];
    const int64_t n = x->ne[3], sx = (int64_t)x->nb[3];
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        const char *xr = gml_ptr(x, i0, i1, i2, 0);
        const float m = *(const float *)gml_ptr(y, i0, i1, i2, 0);
        const float g = *(const float *)gml_ptr(dy, i0, i1, i2, 0);
        int64_t c = 0;
        for (int64_t j = 0; j < n; j++) c += *(const float *)(xr + j * sx) == m;
        const float share = c ? (float)((double)g / (double)c) : 0.0f;
        float *out = (float *)gml_ptr(dst, i0, i1, i2, 0);
        for (int64_t j = 0; j < n; j++) out[j] = *(const float *)(xr + j * sx) == m ? share : 0.0f;
    }
}

/* x [..., n], y [..., 1], dy [..., 1] -> [..., n] */
gml_tensor *gml_max_back(gml_context *ctx, gml_tensor *x, gml_tensor *y, gml_tensor *dy) {
    GML_ENTER(ctx, 3, x, y, dy);
    if (!gml_expect_type(ctx, "max_back", x, GML_F32) || !gml_expect_type(ctx, "max_back", y, GML_F32) ||
        !gml_expect_type(ctx, "max_back", dy, GML_F32))
        return NULL;
    char sx[GML_SHAPE_MAX], sy[GML_SHAPE_MAX], sd[GML_SHAPE_MAX];
    bool ok = y->n_dims == x->n_dims && gml_same_shape(y, dy) && y->ne[3] == 1;
    for (int k = 0; ok && k < 3; k++) ok = y->ne[k] == x->ne[k];
    if (!ok)
        return gml_fail(ctx, "max_back(%s, %s, %s): want x [..., n] and y, dy [..., 1] with x's "
                        "leading dims; got %s, %s, %s", x->name, y->name, dy->name,
                        GML_SHAPE(x, sx), GML_SHAPE(y, sy), GML_SHAPE(dy, sd));
    return gml_new_op(ctx, GML_OP_MAX_BACK, GML_F32, x->n_dims, x->ne + GML_MAX_DIMS - x->n_dims,
                      (gml_tensor *[]){x, y, dy}, 3);
}

static gml_tensor *build_max_back(gml_context *ctx, const gml_arg *v) {
    return gml_max_back(ctx, v[0].t, v[1].t, v[2].t);
}

const gml_op_def gml_opdef_max_back = {
    .forward = gml_f32_max_back__ref,
    .reference = gml_f32_max_back__ref,
    GML_ARGS(GML_T("x"), GML_T("y"), GML_T("dy")),
    .build = build_max_back,
    .get_args = gml_args_from_srcs,
    .doc_args = "x `[..., n]`, y = max(x) and dy `[..., 1]`",
    .doc_result = "`[..., n]`: dy / c where x equals the row's max (c ties share it, as "
                  "torch.amax's backward), 0 elsewhere (zeros in a row whose max is NaN)",
};
