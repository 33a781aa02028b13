/* Elementwise functions of one tensor: neg, exp, tanh, sigmoid, silu, gelu
 * (erf) and gelu_tanh, any shape and strides in, a contiguous tensor of the
 * same shape out. One kernel driver for all, with a reference element
 * function (double libm) and a micro-kernel list (ops/unary.inc) per op. */
#include "runs.h"
#include "ukernels.h"
#include "vunary.h"

#include <math.h>
#include <string.h>

typedef enum { U_NEG, U_EXP, U_TANH, U_SIGMOID, U_SILU, U_GELU, U_GELU_TANH } unop;

/* ---- reference: each element in double, rounded once to float ------------
 * exp, tanh, erfc from double libm; sigmoid, silu and gelu_tanh as x / (1 +
 * exp(-s)) (no cancellation: 1 + tanh(u) = 2 / (1 + exp(-2u))): double's
 * range keeps the tiny results (x / (1 + exp(90)) is 7e-38, a float) and
 * -inf / inf gives NaN where PyTorch's -inf * 0 does. */
static float ref_elem(unop op, float xf) {
    const double x = xf;
    switch (op) {
    case U_NEG: return -xf;
    case U_EXP: return (float)exp(x);
    case U_TANH: return (float)tanh(x);
    case U_SIGMOID: return (float)(1.0 / (1.0 + exp(-x)));
    case U_SILU: return (float)(x / (1.0 + exp(-x)));
    case U_GELU: return (float)(0.5 * x * erfc(-x * 0.70710678118654752));
    default: {
        const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x); /* sqrt(2/pi) */
        return (float)(x / (1.0 + exp(-2.0 * u)));
    }
    }
}

static void unary_ref(const gml_compute_params *p, gml_tensor *dst, unop op) {
    const gml_tensor *a = dst->src[0];
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        const char *pa = gml_ptr(a, i0, i1, i2, 0);
        float *out = (float *)gml_ptr(dst, i0, i1, i2, 0);
        for (int64_t i = 0; i < dst->ne[3]; i++)
            out[i] = ref_elem(op, *(const float *)(pa + i * (int64_t)a->nb[3]));
    }
}

/* ---- scalar variants: float libm (expf, tanhf); gelu, gelu_tanh in double -
 * The formulas of ops/vunary.h; the compiler may vectorize neg. */
void gml_f32_vneg_ukernel__scalar_u1(size_t n, const float *x, float *y) {
    for (size_t i = 0; i < n; i++) y[i] = -x[i];
}
void gml_f32_vtanh_ukernel__scalar_u1(size_t n, const float *x, float *y) {
    for (size_t i = 0; i < n; i++) y[i] = tanhf(x[i]);
}
/* n / (1 + e), e = exp(-|s|), n = v (s >= 0) or v * e */
static inline float sigmul(float v, float s) {
    const float e = expf(-fabsf(s));
    return (s >= 0.0f ? v : v * e) / (1.0f + e);
}
void gml_f32_vsigmoid_ukernel__scalar_u1(size_t n, const float *x, float *y) {
    for (size_t i = 0; i < n; i++) y[i] = sigmul(1.0f, x[i]);
}
void gml_f32_vsilu_ukernel__scalar_u1(size_t n, const float *x, float *y) {
    for (size_t i = 0; i < n; i++) y[i] = sigmul(x[i], x[i]);
}
/* gelu in double: float's x / sqrt 2 rounded would cost erfc up to |x|^2
 * ulp (16 ulp at x = -3.8, 180 at x = -12.6, as erfcf measured); double's
 * erfc keeps it within half an ulp, at about twice erfcf's time. The vector
 * variants compute in double too, with their own erfc (ops/vunary.h). */
void gml_f32_vgelu_ukernel__scalar_u1(size_t n, const float *x, float *y) {
    for (size_t i = 0; i < n; i++) {
        const double v = x[i];
        y[i] = (float)(0.5 * v * erfc(v * -0.70710678118654752));
    }
}
/* 2u in double, as the vector variants; its exp in double too */
void gml_f32_vgelu_tanh_ukernel__scalar_u1(size_t n, const float *x, float *y) {
    for (size_t i = 0; i < n; i++) {
        const float v = x[i];
        const double vd = v, s = vd * (GML_VGELU_C1 + GML_VGELU_C3 * (vd * vd));
        const float e = (float)exp(-fabs(s));
        y[i] = (s >= 0 ? v : v * e) / (1.0f + e);
    }
}

/* ---- the fast driver ------------------------------------------------------ */

/* A micro-kernel of unary, y = f(x) (fn1), or of unary_back, out = dy *
 * f'(x) (fn2), the other NULL; and its names. */
typedef struct unary_kernel {
    gml_f32_vunary_ukernel *fn1;
    gml_f32_vunary_back_ukernel *fn2;
    const char *name, *gathered;
} unary_kernel;

/* The micro-kernel of list L for ISA isa in field FN (of type T), and its
 * names. */
#define UNARY_KERNEL(FN, T, L)                                                          \
    (unary_kernel) {                                                                    \
        .FN = GML_PICK_UKERNEL(isa, L, T), .name = GML_PICK_UKERNEL_NAME(isa, L),       \
        .gathered = GML_PICK_UKERNEL_NAME_AS(isa, L, GML_UKERNEL_NAME_GATHERED)         \
    }
/* The op's micro-kernel. */
#define UNOP_KERNEL(L) UNARY_KERNEL(fn1, gml_f32_vunary_ukernel, L)

static unary_kernel kernel_of(gml_isa isa, unop op) {
    switch (op) {
    case U_NEG: return UNOP_KERNEL(GML_F32_VNEG_UKERNELS);
    case U_EXP: return UNOP_KERNEL(GML_F32_VEXP_UKERNELS);
    case U_TANH: return UNOP_KERNEL(GML_F32_VTANH_UKERNELS);
    case U_SIGMOID: return UNOP_KERNEL(GML_F32_VSIGMOID_UKERNELS);
    case U_SILU: return UNOP_KERNEL(GML_F32_VSILU_UKERNELS);
    case U_GELU: return UNOP_KERNEL(GML_F32_VGELU_UKERNELS);
    default: return UNOP_KERNEL(GML_F32_VGELU_TANH_UKERNELS);
    }
}

/* Stretches of a row gathered at a time (a stack buffer). */
#define GATHER_CHUNK 256

/* out[0, n) = the micro-kernel on in[0] (x) and, for unary_back, in[1] (dy) */
static inline void run_kernel(const unary_kernel *kn, size_t n, const float *const in[2],
                              float *out) {
    if (kn->fn2) kn->fn2(n, in[0], in[1], out);
    else kn->fn1(n, in[0], out);
}

/* dst (contiguous) = the micro-kernel on dst's sources: x for unary, x and
 * dy for unary_back (kn->fn2). Where the sources are all dense along the
 * output's inner dims [k, 4) (ops/runs.h), threads take equal ranges of
 * elements, one micro-kernel call per run; where one's last dim is strided
 * (transposed), rows are split across threads and the sources gathered a
 * stretch at a time into buffers. Either way each element goes through the
 * same micro-kernel, so results do not depend on the layout or the thread
 * count. In place (unary's dst on x's memory: x is then contiguous, the
 * runs path), the thread writing y[i] reads x[i], and every variant loads a
 * vector of x before it stores that vector of y. */
static void unary_drive(const gml_compute_params *p, gml_tensor *dst, const unary_kernel *kn) {
    const int n_src = kn->fn2 ? 2 : 1;
    gml_run_operand ops[2];
    for (int s = 0; s < n_src; s++) ops[s] = gml_run_operand_of(dst->src[s]);
    const int k = gml_find_runs(dst->ne, ops, n_src, false);
    float *out = dst->data;
    if (k < GML_MAX_DIMS) {
        gml_kernel_note(p, kn->name);
        const int64_t run = gml_run_length(dst->ne, k);
        int64_t e, end;
        gml_split_elements(gml_nelements(dst), p->ith, p->nth, &e, &end);
        while (e < end) {
            const int64_t r = e / run, off = e % run, len = GML_MIN(run - off, end - e);
            const float *in[2] = {NULL, NULL};
            for (int s = 0; s < n_src; s++)
                in[s] = (const float *)(const void *)gml_run_start(&ops[s], dst->ne, k, r) + off;
            run_kernel(kn, (size_t)len, in, out + e);
            e += len;
        }
        return;
    }
    gml_kernel_note(p, kn->gathered);
    const int64_t n = dst->ne[3];
    float buf[2][GATHER_CHUNK];
    const float *const in[2] = {buf[0], buf[1]};
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        float *y = (float *)gml_ptr(dst, i0, i1, i2, 0);
        for (int64_t j0 = 0; j0 < n; j0 += GATHER_CHUNK) {
            const int64_t len = GML_MIN((int64_t)GATHER_CHUNK, n - j0);
            for (int s = 0; s < n_src; s++) {
                const gml_tensor *t = dst->src[s];
                const char *pt = gml_ptr(t, i0, i1, i2, 0);
                const int64_t st = (int64_t)t->nb[3];
                for (int64_t j = 0; j < len; j++)
                    memcpy(&buf[s][j], pt + (j0 + j) * st, sizeof(float));
            }
            run_kernel(kn, (size_t)len, in, y + j0);
        }
    }
}

static void unary_forward(const gml_compute_params *p, gml_tensor *dst, unop op) {
    const unary_kernel kn = kernel_of(p->isa, op);
    unary_drive(p, dst, &kn);
}

static gml_tensor *unary(gml_context *ctx, gml_op op, gml_tensor *x) {
    if (!x) return NULL;
    if (!gml_expect_type(ctx, gml_op_name(op), x, GML_F32)) return NULL;
    return gml_new_op(ctx, op, GML_F32, x->n_dims, x->ne + GML_MAX_DIMS - x->n_dims, &x, 1);
}

/* ---- unary_back: dy * f'(x) ------------------------------------------------
 * The reference: each element in double from double libm, rounded once,
 * rows split across threads. The fast kernel (below it): the micro-kernels
 * of ops/unary.inc, f' in double lanes (ops/simd/vmath.h). */

static const char *const BACK_FNS[] = {"tanh", "sigmoid", "silu", "gelu", "gelu_tanh", NULL};
static const gml_op BACK_OPS[] = {GML_OP_TANH, GML_OP_SIGMOID, GML_OP_SILU, GML_OP_GELU,
                                  GML_OP_GELU_TANH};
#define N_BACK_FNS (int)(sizeof BACK_OPS / sizeof *BACK_OPS)

typedef struct unary_back_params {
    int32_t fn; /* index into BACK_OPS */
} unary_back_params;
GML_PARAMS_FIT(unary_back_params);

static int back_fn_of(const gml_tensor *t) {
    unary_back_params p;
    gml_get_params(t, &p, sizeof p);
    return p.fn;
}

/* f'(x) in double; sigmoid from exp(-|x|) (no overflow at any x) */
static double derivative(gml_op op, double x) {
    switch (op) {
    case GML_OP_TANH: {
        const double t = tanh(x);
        return 1.0 - t * t;
    }
    case GML_OP_SIGMOID:
    case GML_OP_SILU: {
        const double e = exp(-fabs(x)), s = x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
        return op == GML_OP_SIGMOID ? s * (1.0 - s) : s + x * s * (1.0 - s);
    }
    case GML_OP_GELU: /* Phi(x) + x phi(x) */
        return 0.5 * erfc(-x * 0.70710678118654752) +
               x * exp(-0.5 * x * x) * 0.39894228040143268; /* 1 / sqrt(2 pi) */
    default: { /* GELU_TANH: 0.5 (1 + t) + 0.5 x (1 - t^2) u', u = c (x + a x^3) */
        const double c = 0.7978845608028654, a = 0.044715;
        const double t = tanh(c * (x + a * x * x * x));
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * a * x * x);
    }
    }
}

/* ---- scalar variants: the reference's arithmetic (double libm) ---- */
#define SCALAR_BACK(name, OP)                                                          \
    void gml_f32_##name##_ukernel__scalar_u1(size_t n, const float *x, const float *dy, \
                                             float *out) {                             \
        for (size_t i = 0; i < n; i++)                                                 \
            out[i] = (float)((double)dy[i] * derivative(OP, x[i]));                    \
    }
SCALAR_BACK(vtanh_back, GML_OP_TANH)
SCALAR_BACK(vsigmoid_back, GML_OP_SIGMOID)
SCALAR_BACK(vsilu_back, GML_OP_SILU)
SCALAR_BACK(vgelu_back, GML_OP_GELU)
SCALAR_BACK(vgelu_tanh_back, GML_OP_GELU_TANH)
#undef SCALAR_BACK

static void gml_f32_unary_back__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *x = dst->src[0], *dy = dst->src[1];
    const gml_op op = BACK_OPS[back_fn_of(dst)];
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        const char *px = gml_ptr(x, i0, i1, i2, 0), *pd = gml_ptr(dy, i0, i1, i2, 0);
        float *out = (float *)gml_ptr(dst, i0, i1, i2, 0);
        for (int64_t i = 0; i < dst->ne[3]; i++)
            out[i] = (float)((double)*(const float *)(pd + i * (int64_t)dy->nb[3]) *
                             derivative(op, *(const float *)(px + i * (int64_t)x->nb[3])));
    }
}

/* The fast kernel: the micro-kernel of the op and ISA (ops/unary.inc) through
 * unary's driver (unary_drive): runs where x and dy are both dense, else
 * rows with x and dy gathered. */
#define BACK_KERNEL(L) UNARY_KERNEL(fn2, gml_f32_vunary_back_ukernel, L)

static unary_kernel back_kernel_of(gml_isa isa, gml_op op) {
    switch (op) {
    case GML_OP_TANH: return BACK_KERNEL(GML_F32_VTANH_BACK_UKERNELS);
    case GML_OP_SIGMOID: return BACK_KERNEL(GML_F32_VSIGMOID_BACK_UKERNELS);
    case GML_OP_SILU: return BACK_KERNEL(GML_F32_VSILU_BACK_UKERNELS);
    case GML_OP_GELU: return BACK_KERNEL(GML_F32_VGELU_BACK_UKERNELS);
    default: return BACK_KERNEL(GML_F32_VGELU_TANH_BACK_UKERNELS);
    }
}

static void gml_f32_unary_back(const gml_compute_params *p, gml_tensor *dst) {
    const unary_kernel kn = back_kernel_of(p->isa, BACK_OPS[back_fn_of(dst)]);
    unary_drive(p, dst, &kn);
}

/* x [...], dy [...] (x's shape) -> [...] = dy * f'(x) */
gml_tensor *gml_unary_back(gml_context *ctx, gml_tensor *x, gml_tensor *dy, gml_op op) {
    GML_ENTER(ctx, 2, x, dy);
    if (!gml_expect_type(ctx, "unary_back", x, GML_F32) ||
        !gml_expect_type(ctx, "unary_back", dy, GML_F32))
        return NULL;
    char sx[GML_SHAPE_MAX], sd[GML_SHAPE_MAX];
    int fn = 0;
    while (fn < N_BACK_FNS && BACK_OPS[fn] != op) fn++;
    if (fn == N_BACK_FNS)
        return gml_fail(ctx, "unary_back(%s, %s): op '%s' is none of tanh, sigmoid, silu, gelu, "
                        "gelu_tanh", x->name, dy->name, gml_op_name(op));
    if (!gml_same_shape(x, dy))
        return gml_fail(ctx, "unary_back(%s, %s): x %s and dy %s differ in shape", x->name,
                        dy->name, GML_SHAPE(x, sx), GML_SHAPE(dy, sd));
    gml_tensor *t = gml_new_op(ctx, GML_OP_UNARY_BACK, GML_F32, x->n_dims,
                               x->ne + GML_MAX_DIMS - x->n_dims, (gml_tensor *[]){x, dy}, 2);
    if (!t) return NULL;
    gml_set_params(t, &(unary_back_params){fn}, sizeof(unary_back_params));
    return t;
}

static gml_tensor *build_unary_back(gml_context *ctx, const gml_arg *v) {
    return gml_unary_back(ctx, v[0].t, v[1].t, BACK_OPS[v[2].given ? v[2].i : 0]);
}

static void unary_back_args(const gml_tensor *t, gml_arg *v) {
    v[0].t = t->src[0];
    v[1].t = t->src[1];
    v[2].i = back_fn_of(t);
}

static double unary_back_flops(const gml_tensor *dst) { return 20.0 * (double)gml_nelements(dst); }

const gml_op_def gml_opdef_unary_back = {
    .forward = gml_f32_unary_back,
    .reference = gml_f32_unary_back__ref,
    .flops = unary_back_flops,
    GML_ARGS(GML_T("x"), GML_T("dy"), GML_OPT_ENUM("fn", "tanh", BACK_FNS)),
    .build = build_unary_back,
    .get_args = unary_back_args,
    .doc_args = "x, dy of one shape; fn tanh, sigmoid, silu, gelu or gelu_tanh",
    .doc_result = "dy * fn'(x) (the gradient of fn(x)), in double, rounded once",
};

/* ---- backwards (gml_grad) ---- */

static bool neg_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    return gml_backward_add(b, node->src[0], gml_neg(gml_backward_context(b), dy));
}
/* d exp(x) = dy exp(x): the result itself */
static bool exp_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    return gml_backward_add(b, node->src[0], gml_mul(gml_backward_context(b), dy, node));
}
static bool unary_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    return gml_backward_add(b, node->src[0],
                            gml_unary_back(gml_backward_context(b), node->src[0], dy, node->op));
}
#define tanh_backward unary_backward
#define sigmoid_backward unary_backward
#define silu_backward unary_backward
#define gelu_backward unary_backward
#define gelu_tanh_backward unary_backward

/* flops: an estimate of float operations per element (exp ~ 10). */
#define UNARY_OP(name, ID, U, flops_per, doc)                                           \
    static void gml_f32_##name##__ref(const gml_compute_params *p, gml_tensor *dst) {  \
        unary_ref(p, dst, U);                                                          \
    }                                                                                  \
    static void gml_f32_##name(const gml_compute_params *p, gml_tensor *dst) {         \
        unary_forward(p, dst, U);                                                      \
    }                                                                                  \
    static double name##_flops(const gml_tensor *dst) {                                \
        return (flops_per) * (double)gml_nelements(dst);                               \
    }                                                                                  \
    gml_tensor *gml_##name(gml_context *ctx, gml_tensor *x) {                          \
        GML_ENTER(ctx, 1, x);                                                          \
        return unary(ctx, GML_OP_##ID, x);                                             \
    }                                                                                  \
    static gml_tensor *build_##name(gml_context *ctx, const gml_arg *v) {              \
        return gml_##name(ctx, v[0].t);                                                \
    }                                                                                  \
    const gml_op_def gml_opdef_##name = {                                              \
        .forward = gml_f32_##name,                                                     \
        .reference = gml_f32_##name##__ref,                                            \
        .flops = name##_flops,                                                         \
        .flags = GML_OPF_INPLACE,                                                      \
        GML_ARGS(GML_T("x")),                                                          \
        .build = build_##name,                                                         \
        .get_args = gml_args_from_srcs,                                                \
        .doc_args = "any shape",                                                       \
        .doc_result = doc,                                                             \
        .backward = name##_backward,                                                   \
    };

UNARY_OP(neg, NEG, U_NEG, 1, "-x")
UNARY_OP(exp, EXP, U_EXP, 10, "exp(x)")
UNARY_OP(tanh, TANH, U_TANH, 14, "tanh(x)")
UNARY_OP(sigmoid, SIGMOID, U_SIGMOID, 14, "1 / (1 + exp(-x)); torch.sigmoid")
UNARY_OP(silu, SILU, U_SILU, 15, "x * sigmoid(x); F.silu (silu(-inf) is NaN)")
UNARY_OP(gelu, GELU, U_GELU, 20,
         "0.5 x (1 + erf(x / sqrt 2)); F.gelu (gelu(-inf) is NaN)")
UNARY_OP(gelu_tanh, GELU_TANH, U_GELU_TANH, 18,
         "0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); F.gelu(approximate='tanh')")
