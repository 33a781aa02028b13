/* Elementwise arithmetic: add, mul, sub and div with PyTorch broadcasting,
 * and scale. */
#include "runs.h"
#include "ukernels.h"

#include <string.h>

/* out[i] = a[i % a.shape] (op) b[i % b.shape]; rows split across threads. */
#define BINARY_KERNEL(fn, expr)                                                        \
    static void fn(const gml_compute_params *p, gml_tensor *dst) {                     \
        const gml_tensor *a = dst->src[0], *b = dst->src[1];                           \
        int64_t r0, r1;                                                                \
        gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);                           \
        const int64_t n = dst->ne[3];                                                  \
        const int64_t sa = a->ne[3] == 1 ? 0 : (int64_t)a->nb[3];                      \
        const int64_t sb = b->ne[3] == 1 ? 0 : (int64_t)b->nb[3];                      \
        for (int64_t r = r0; r < r1; r++) {                                            \
            int64_t i0, i1, i2;                                                        \
            gml_row_index(dst, r, &i0, &i1, &i2);                                      \
            const char *pa = gml_ptr(a, i0 % a->ne[0], i1 % a->ne[1], i2 % a->ne[2], 0); \
            const char *pb = gml_ptr(b, i0 % b->ne[0], i1 % b->ne[1], i2 % b->ne[2], 0); \
            float *out = (float *)gml_ptr(dst, i0, i1, i2, 0);                         \
            for (int64_t i = 0; i < n; i++) {                                          \
                float x = *(const float *)(pa + i * sa), y = *(const float *)(pb + i * sb); \
                out[i] = expr;                                                         \
            }                                                                          \
        }                                                                              \
    }

typedef struct scale_params {
    float s;
} scale_params;
GML_PARAMS_FIT(scale_params);

static float scale_of(const gml_tensor *t) {
    scale_params p;
    gml_get_params(t, &p, sizeof p);
    return p.s;
}

BINARY_KERNEL(gml_f32_add__ref, x + y)
BINARY_KERNEL(gml_f32_mul__ref, x * y)
BINARY_KERNEL(gml_f32_sub__ref, x - y)
BINARY_KERNEL(gml_f32_div__ref, x / y)

static void gml_f32_scale__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *a = dst->src[0];
    const float s = scale_of(dst);
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        const char *pa = gml_ptr(a, i0, i1, i2, 0);
        float *out = (float *)gml_ptr(dst, i0, i1, i2, 0);
        for (int64_t i = 0; i < dst->ne[3]; i++) out[i] = *(const float *)(pa + i * (int64_t)a->nb[3]) * s;
    }
}

/* ---- fast kernels ----------------------------------------------------------
 * dst is cut into runs (ops/runs.h) over which each input is dense or
 * constant (broadcast); each run is one micro-kernel call: vadd for dense +
 * dense, vaddc for dense + constant. */

/* The portable variants; the compiler may vectorize them for the baseline. */
void gml_f32_vadd_ukernel__scalar_u1(size_t n, const float *a, const float *b, float *out) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}
void gml_f32_vaddc_ukernel__scalar_u1(size_t n, const float *a, const float *b, float *out) {
    const float c = *b;
    for (size_t i = 0; i < n; i++) out[i] = a[i] + c;
}
void gml_f32_vmul_ukernel__scalar_u1(size_t n, const float *a, const float *b, float *out) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] * b[i];
}
void gml_f32_vmulc_ukernel__scalar_u1(size_t n, const float *a, const float *b, float *out) {
    const float c = *b;
    for (size_t i = 0; i < n; i++) out[i] = a[i] * c;
}

void gml_f32_vsub_ukernel__scalar_u1(size_t n, const float *a, const float *b, float *out) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] - b[i];
}
void gml_f32_vsubc_ukernel__scalar_u1(size_t n, const float *a, const float *b, float *out) {
    const float c = *b;
    for (size_t i = 0; i < n; i++) out[i] = a[i] - c;
}
void gml_f32_vrsubc_ukernel__scalar_u1(size_t n, const float *a, const float *b, float *out) {
    const float c = *b;
    for (size_t i = 0; i < n; i++) out[i] = c - a[i];
}
void gml_f32_vdiv_ukernel__scalar_u1(size_t n, const float *a, const float *b, float *out) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] / b[i];
}
void gml_f32_vdivc_ukernel__scalar_u1(size_t n, const float *a, const float *b, float *out) {
    const float c = *b;
    for (size_t i = 0; i < n; i++) out[i] = a[i] / c;
}
void gml_f32_vrdivc_ukernel__scalar_u1(size_t n, const float *a, const float *b, float *out) {
    const float c = *b;
    for (size_t i = 0; i < n; i++) out[i] = c / a[i];
}

typedef enum { OP_ADD, OP_MUL, OP_SUB, OP_DIV } binop;

static float apply(binop op, float x, float y) {
    switch (op) {
    case OP_ADD: return x + y;
    case OP_MUL: return x * y;
    case OP_SUB: return x - y;
    default: return x / y;
    }
}

/* An op's micro-kernels for ISA isa, and their names: v (dense,
 * dense), vc (dense a, constant b), rvc (constant a, dense b: c (op) b[i],
 * given b as its first operand; for add and mul vc itself, as a + b = b + a
 * bitwise); g*: the names with the gathered path. */
typedef struct binop_kernels {
    gml_f32_vbinary_ukernel *v, *vc, *rvc;
    const char *nv, *nvc, *nrvc, *gv, *gvc, *grvc;
} binop_kernels;

#define BINOP_KERNELS(V, VC, RVC)                                                      \
    (binop_kernels) {                                                                  \
        GML_PICK_UKERNEL(isa, V, gml_f32_vbinary_ukernel),                                  \
            GML_PICK_UKERNEL(isa, VC, gml_f32_vbinary_ukernel),                             \
            GML_PICK_UKERNEL(isa, RVC, gml_f32_vbinary_ukernel), GML_PICK_UKERNEL_NAME(isa, V),   \
            GML_PICK_UKERNEL_NAME(isa, VC), GML_PICK_UKERNEL_NAME(isa, RVC),                     \
            GML_PICK_UKERNEL_NAME_AS(isa, V, GML_UKERNEL_NAME_GATHERED),                    \
            GML_PICK_UKERNEL_NAME_AS(isa, VC, GML_UKERNEL_NAME_GATHERED),                   \
            GML_PICK_UKERNEL_NAME_AS(isa, RVC, GML_UKERNEL_NAME_GATHERED)                   \
    }

static binop_kernels kernels_of(gml_isa isa, binop op) {
    switch (op) {
    case OP_ADD:
        return BINOP_KERNELS(GML_F32_VADD_UKERNELS, GML_F32_VADDC_UKERNELS, GML_F32_VADDC_UKERNELS);
    case OP_MUL:
        return BINOP_KERNELS(GML_F32_VMUL_UKERNELS, GML_F32_VMULC_UKERNELS, GML_F32_VMULC_UKERNELS);
    case OP_SUB:
        return BINOP_KERNELS(GML_F32_VSUB_UKERNELS, GML_F32_VSUBC_UKERNELS, GML_F32_VRSUBC_UKERNELS);
    default:
        return BINOP_KERNELS(GML_F32_VDIV_UKERNELS, GML_F32_VDIVC_UKERNELS, GML_F32_VRDIVC_UKERNELS);
    }
}

/* dst = a (op) b, a and b classified by gml_find_runs over dims [k, 4);
 * this thread's share of dst's elements. */
static void binary_runs(const gml_compute_params *p, gml_tensor *dst, binop op,
                        const gml_run_operand *a, const gml_run_operand *b, int k) {
    const binop_kernels kn = kernels_of(p->isa, op);
    gml_kernel_note(p, a->dense && b->dense ? kn.nv
                       : a->dense           ? kn.nvc
                       : b->dense           ? kn.nrvc
                                            : "fill (both operands constant along each run)");
    const int64_t run = gml_run_length(dst->ne, k);
    int64_t e, end;
    gml_split_elements(gml_nelements(dst), p->ith, p->nth, &e, &end);
    float *out = dst->data; /* contiguous */
    while (e < end) {
        const int64_t r = e / run, off = e % run, len = GML_MIN(run - off, end - e);
        const float *pa = (const float *)gml_run_start(a, dst->ne, k, r) + (a->dense ? off : 0);
        const float *pb = (const float *)gml_run_start(b, dst->ne, k, r) + (b->dense ? off : 0);
        if (a->dense && b->dense) {
            kn.v((size_t)len, pa, pb, out + e);
        } else if (a->dense) {
            kn.vc((size_t)len, pa, pb, out + e);
        } else if (b->dense) { /* *pa (op) b[i] */
            kn.rvc((size_t)len, pb, pa, out + e);
        } else {
            const float v = apply(op, *pa, *pb);
            for (int64_t i = 0; i < len; i++) out[e + i] = v;
        }
        e += len;
    }
}

/* Runs over dense or broadcast inputs; an input whose last dim is strided
 * (a transposed view) sends the whole op to the reference. */
/* Stretches of a row gathered at a time (stack buffers). */
#define GATHER_CHUNK 256

/* An operand's last dim is strided (a transposed view), so there are no
 * runs: each output row (dst is contiguous) is done in stretches, strided
 * operands gathered into buffers first, then the micro-kernels run as on
 * runs: the same sums and products, bitwise. b == NULL: the constant *bc
 * (scale). Rows split across threads; in place, the thread writing out[i]
 * reads a[i] (same row) before it. */
static void binary_gather(const gml_compute_params *p, gml_tensor *dst, binop op,
                          const gml_tensor *a, const gml_tensor *b, const float *bc) {
    const binop_kernels kn = kernels_of(p->isa, op);
    const int64_t n = dst->ne[3];
    /* byte strides along the row; 0: one value for the whole row */
    const int64_t sa = a->ne[3] == 1 ? 0 : (int64_t)a->nb[3];
    const int64_t sb = !b || b->ne[3] == 1 ? 0 : (int64_t)b->nb[3];
    const bool both = sa && sb;
    gml_kernel_note(p, both ? kn.gv : sa ? kn.gvc : kn.grvc);
    float buf_a[GATHER_CHUNK], buf_b[GATHER_CHUNK];
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        const char *pa = gml_ptr(a, i0 % a->ne[0], i1 % a->ne[1], i2 % a->ne[2], 0);
        const char *pb = b ? gml_ptr(b, i0 % b->ne[0], i1 % b->ne[1], i2 % b->ne[2], 0)
                           : (const char *)bc;
        float *out = (float *)gml_ptr(dst, i0, i1, i2, 0);
        for (int64_t j0 = 0; j0 < n; j0 += GATHER_CHUNK) {
            const int64_t len = GML_MIN((int64_t)GATHER_CHUNK, n - j0);
            const float *xa = (const float *)(const void *)pa, *xb = (const float *)(const void *)pb;
            if (sa == (int64_t)sizeof(float)) {
                xa += j0;
            } else if (sa) {
                for (int64_t j = 0; j < len; j++) memcpy(&buf_a[j], pa + (j0 + j) * sa, sizeof(float));
                xa = buf_a;
            }
            if (sb == (int64_t)sizeof(float)) {
                xb += j0;
            } else if (sb) {
                for (int64_t j = 0; j < len; j++) memcpy(&buf_b[j], pb + (j0 + j) * sb, sizeof(float));
                xb = buf_b;
            }
            if (both) kn.v((size_t)len, xa, xb, out + j0);
            else if (sa) kn.vc((size_t)len, xa, xb, out + j0);
            else kn.rvc((size_t)len, xb, xa, out + j0); /* *xa (op) b[j] */
        }
    }
}

static void binary_forward(const gml_compute_params *p, gml_tensor *dst, binop op) {
    gml_run_operand ops[2] = {gml_run_operand_of(dst->src[0]), gml_run_operand_of(dst->src[1])};
    const int k = gml_find_runs(dst->ne, ops, 2, true);
    if (k == GML_MAX_DIMS) {
        binary_gather(p, dst, op, dst->src[0], dst->src[1], NULL);
        return;
    }
    binary_runs(p, dst, op, &ops[0], &ops[1], k);
}

static void gml_f32_add(const gml_compute_params *p, gml_tensor *dst) {
    binary_forward(p, dst, OP_ADD);
}
static void gml_f32_mul(const gml_compute_params *p, gml_tensor *dst) {
    binary_forward(p, dst, OP_MUL);
}
static void gml_f32_sub(const gml_compute_params *p, gml_tensor *dst) {
    binary_forward(p, dst, OP_SUB);
}
static void gml_f32_div(const gml_compute_params *p, gml_tensor *dst) {
    binary_forward(p, dst, OP_DIV);
}
/* a * s: b is the constant s */
static void gml_f32_scale(const gml_compute_params *p, gml_tensor *dst) {
    const float s = scale_of(dst);
    gml_run_operand ops[2] = {gml_run_operand_of(dst->src[0]), {.data = (char *)&s}};
    const int k = gml_find_runs(dst->ne, ops, 2, true);
    if (k == GML_MAX_DIMS) {
        binary_gather(p, dst, OP_MUL, dst->src[0], NULL, &s);
        return;
    }
    binary_runs(p, dst, OP_MUL, &ops[0], &ops[1], k);
}

static double elementwise_flops(const gml_tensor *dst) { return (double)gml_nelements(dst); }

static gml_tensor *binary(gml_context *ctx, gml_op op, gml_tensor *a, gml_tensor *b) {
    if (!a || !b) return NULL;
    const char *name = gml_op_name(op);
    if (!gml_expect_type(ctx, name, a, GML_F32) || !gml_expect_type(ctx, name, b, GML_F32))
        return NULL;
    int64_t ne[GML_MAX_DIMS];
    int n;
    if (!gml_broadcast_shape(ctx, name, a, b, ne, &n)) return NULL;
    return gml_new_op(ctx, op, GML_F32, n, ne + GML_MAX_DIMS - n, (gml_tensor *[]){a, b}, 2);
}

/* a [...], b [...] broadcastable -> out [broadcast shape] */
gml_tensor *gml_add(gml_context *ctx, gml_tensor *a, gml_tensor *b) {
    return binary(ctx, GML_OP_ADD, a, b);
}

gml_tensor *gml_mul(gml_context *ctx, gml_tensor *a, gml_tensor *b) {
    return binary(ctx, GML_OP_MUL, a, b);
}

gml_tensor *gml_sub(gml_context *ctx, gml_tensor *a, gml_tensor *b) {
    return binary(ctx, GML_OP_SUB, a, b);
}

gml_tensor *gml_div(gml_context *ctx, gml_tensor *a, gml_tensor *b) {
    return binary(ctx, GML_OP_DIV, a, b);
}

/* a [...] -> out [...] = a * s */
gml_tensor *gml_scale(gml_context *ctx, gml_tensor *a, float s) {
    if (!a) return NULL;
    if (!gml_expect_type(ctx, "scale", a, GML_F32)) return NULL;
    gml_tensor *t = gml_new_op(ctx, GML_OP_SCALE, GML_F32, a->n_dims,
                               a->ne + GML_MAX_DIMS - a->n_dims, &a, 1);
    if (!t) return NULL;
    gml_set_params(t, &(scale_params){s}, sizeof(scale_params));
    return t;
}

/* add(a, none) and mul(a, none) are a: a term or factor left out. */
static gml_tensor *build_add(gml_context *ctx, const gml_arg *v) {
    return v[1].t ? gml_add(ctx, v[0].t, v[1].t) : v[0].t;
}
static gml_tensor *build_mul(gml_context *ctx, const gml_arg *v) {
    return v[1].t ? gml_mul(ctx, v[0].t, v[1].t) : v[0].t;
}
/* sub and div take b always: a - none has no meaning to give it. */
static gml_tensor *build_sub(gml_context *ctx, const gml_arg *v) {
    return gml_sub(ctx, v[0].t, v[1].t);
}
static gml_tensor *build_div(gml_context *ctx, const gml_arg *v) {
    return gml_div(ctx, v[0].t, v[1].t);
}
static gml_tensor *build_scale(gml_context *ctx, const gml_arg *v) {
    return gml_scale(ctx, v[0].t, v[1].f);
}

static void scale_args(const gml_tensor *t, gml_arg *v) {
    v[0].t = t->src[0];
    v[1].f = scale_of(t);
}

/* ---- backwards (gml_grad): dy is the gradient of the result; a broadcast
 * operand's share is summed back to its shape by gml_backward_add ---------- */

/* d(a + b) = dy, dy */
static bool add_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    return gml_backward_add(b, node->src[0], dy) && gml_backward_add(b, node->src[1], dy);
}
/* d(a - b) = dy, -dy (negated after the sum back to b's shape: one rounding less) */
static bool sub_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    gml_context *ctx = gml_backward_context(b);
    gml_tensor *bb = node->src[1];
    if (!gml_backward_add(b, node->src[0], dy)) return false;
    if (!gml_backward_needs(b, bb)) return true;
    gml_tensor *g = gml_same_shape(bb, dy)
                        ? dy
                        : gml_sum_to(ctx, dy, bb->n_dims, bb->ne + GML_MAX_DIMS - bb->n_dims);
    return gml_backward_add(b, bb, gml_neg(ctx, g));
}
/* d(a * b) = dy * b, dy * a */
static bool mul_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    gml_context *ctx = gml_backward_context(b);
    gml_tensor *a = node->src[0], *bb = node->src[1];
    if (gml_backward_needs(b, a) && !gml_backward_add(b, a, gml_mul(ctx, dy, bb))) return false;
    return !gml_backward_needs(b, bb) || gml_backward_add(b, bb, gml_mul(ctx, dy, a));
}
/* d(a / b) = dy / b, -(dy / b) * (a / b): the second from the first and the
 * result y = a / b (-dy a / b^2, without squaring b) */
static bool div_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    gml_context *ctx = gml_backward_context(b);
    gml_tensor *a = node->src[0], *bb = node->src[1];
    gml_tensor *da = gml_div(ctx, dy, bb);
    if (gml_backward_needs(b, a) && !gml_backward_add(b, a, da)) return false;
    if (!gml_backward_needs(b, bb)) return true;
    gml_tensor *t = gml_mul(ctx, da, node);
    if (t && !gml_same_shape(t, bb))
        t = gml_sum_to(ctx, t, bb->n_dims, bb->ne + GML_MAX_DIMS - bb->n_dims);
    return gml_backward_add(b, bb, gml_neg(ctx, t));
}
/* d(a s) = dy s */
static bool scale_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    return gml_backward_add(b, node->src[0], gml_scale(gml_backward_context(b), dy, scale_of(node)));
}

/* In place (GML_OPF_INPLACE): the thread that writes out[i] reads a[i], and
 * every variant loads a block of a before it stores that block of out. */
const gml_op_def gml_opdef_add = {
    .forward = gml_f32_add,
    .reference = gml_f32_add__ref,
    .flops = elementwise_flops,
    .flags = GML_OPF_INPLACE | GML_OPF_MOVES_VALUES,
    GML_ARGS(GML_T("a"), GML_REQ("b", OPT_TENSOR)),
    .build = build_add,
    .get_args = gml_args_from_srcs,
    .doc_args = "broadcast as in PyTorch; b may be `none`",
    .doc_result = "a + b; with b none: a",
    .backward = add_backward,
};
const gml_op_def gml_opdef_mul = {
    .forward = gml_f32_mul,
    .reference = gml_f32_mul__ref,
    .flops = elementwise_flops,
    .flags = GML_OPF_INPLACE,
    GML_ARGS(GML_T("a"), GML_REQ("b", OPT_TENSOR)),
    .build = build_mul,
    .get_args = gml_args_from_srcs,
    .doc_args = "broadcast as in PyTorch; b may be `none`",
    .doc_result = "a * b; with b none: a",
    .backward = mul_backward,
};
const gml_op_def gml_opdef_scale = {
    .forward = gml_f32_scale,
    .reference = gml_f32_scale__ref,
    .flops = elementwise_flops,
    .flags = GML_OPF_INPLACE,
    GML_ARGS(GML_T("a"), GML_REQ("s", FLOAT)),
    .build = build_scale,
    .get_args = scale_args,
    .doc_args = "s a number",
    .doc_result = "a * s",
    .backward = scale_backward,
};
const gml_op_def gml_opdef_sub = {
    .forward = gml_f32_sub,
    .reference = gml_f32_sub__ref,
    .flops = elementwise_flops,
    .flags = GML_OPF_INPLACE,
    GML_ARGS(GML_T("a"), GML_T("b")),
    .build = build_sub,
    .get_args = gml_args_from_srcs,
    .doc_args = "broadcast as in PyTorch",
    .doc_result = "a - b",
    .backward = sub_backward,
};
const gml_op_def gml_opdef_div = {
    .forward = gml_f32_div,
    .reference = gml_f32_div__ref,
    .flops = elementwise_flops,
    .flags = GML_OPF_INPLACE,
    GML_ARGS(GML_T("a"), GML_T("b")),
    .build = build_div,
    .get_args = gml_args_from_srcs,
    .doc_args = "broadcast as in PyTorch",
    .doc_result = "a / b (IEEE: x / 0 is +-inf, 0 / 0 NaN)",
    .backward = div_backward,
};
