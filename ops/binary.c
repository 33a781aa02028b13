/* Elementwise arithmetic: add and mul with PyTorch broadcasting, and scale. */
#include "ukernels.h"

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

BINARY_KERNEL(gml_f32_add__ref, x + y)
BINARY_KERNEL(gml_f32_mul__ref, x * y)

static void gml_f32_scale__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *a = dst->src[0];
    const float s = gml_param_f32(dst, 0);
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
 * dst is cut into runs: its innermost dims [k, 4) over which every input is
 * either dense (contiguous, one element per output) or constant (broadcast:
 * one value for the whole run). Each run is one micro-kernel call: vadd for
 * dense + dense, vaddc for dense + constant. Threads take equal ranges of
 * dst's elements, so a short or a single long run splits as well as many. */

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

/* An input as read along dst's runs. */
typedef struct {
    const char *data;
    int64_t nb[GML_MAX_DIMS]; /* byte strides, 0 along broadcast dims */
    bool dense;               /* else one value per run */
} operand;

static operand operand_of(const gml_tensor *t) {
    operand o = {.data = t->data};
    for (int d = 0; d < GML_MAX_DIMS; d++) o.nb[d] = t->ne[d] == 1 ? 0 : (int64_t)t->nb[d];
    return o;
}

/* Is o dense (want_dense) or constant over dst's dims [k, 4)? */
static bool run_ok(const operand *o, const gml_tensor *dst, int k, bool want_dense) {
    int64_t step = sizeof(float);
    for (int d = GML_MAX_DIMS - 1; d >= k; d--) {
        if (dst->ne[d] > 1 && o->nb[d] != (want_dense ? step : 0)) return false;
        step *= dst->ne[d];
    }
    return true;
}

/* Finds the innermost dims [k, 4) over which each input is dense or
 * constant, the smallest such k, and classifies the inputs. False when the
 * innermost dim of an input is strided (then the reference runs). */
static bool find_runs(const gml_tensor *dst, operand *ops, int n_ops, int *k_out) {
    int k = GML_MAX_DIMS;
    while (k > 0) {
        bool ok = true;
        for (int i = 0; i < n_ops && ok; i++)
            ok = run_ok(&ops[i], dst, k - 1, true) || run_ok(&ops[i], dst, k - 1, false);
        if (!ok) break;
        k--;
    }
    if (k == GML_MAX_DIMS) return false;
    for (int i = 0; i < n_ops; i++) ops[i].dense = run_ok(&ops[i], dst, k, true);
    *k_out = k;
    return true;
}

/* Start of run r (a flat index over dst's dims [0, k)) in o. */
static const char *run_start(const operand *o, const gml_tensor *dst, int k, int64_t r) {
    const char *p = o->data;
    for (int d = k - 1; d >= 0; d--) {
        p += (r % dst->ne[d]) * o->nb[d];
        r /= dst->ne[d];
    }
    return p;
}

typedef enum { OP_ADD, OP_MUL } binop;

/* dst = a (op) b for inputs ops[0], ops[1] classified by find_runs over
 * dims [k, 4); this thread's share of dst's elements. */
static void binary_runs(const gml_compute_params *p, gml_tensor *dst, binop op,
                        const operand *a, const operand *b, int k) {
    gml_f32_vbinary_ukernel *const vop =
        op == OP_ADD ? GML_PICK_UKERNEL(GML_F32_VADD_UKERNELS, gml_f32_vbinary_ukernel)
                     : GML_PICK_UKERNEL(GML_F32_VMUL_UKERNELS, gml_f32_vbinary_ukernel);
    gml_f32_vbinary_ukernel *const vopc =
        op == OP_ADD ? GML_PICK_UKERNEL(GML_F32_VADDC_UKERNELS, gml_f32_vbinary_ukernel)
                     : GML_PICK_UKERNEL(GML_F32_VMULC_UKERNELS, gml_f32_vbinary_ukernel);
    int64_t run = 1;
    for (int d = k; d < GML_MAX_DIMS; d++) run *= dst->ne[d];
    /* this thread's elements, in units of 16 (one zmm) */
    const int64_t total = gml_nelements(dst);
    int64_t u0, u1;
    gml_split((total + 15) / 16, p->ith, p->nth, &u0, &u1);
    int64_t e = u0 * 16;
    const int64_t end = GML_MIN(total, u1 * 16);
    float *out = dst->data;
    while (e < end) {
        const int64_t r = e / run, off = e % run, len = GML_MIN(run - off, end - e);
        const float *pa = (const float *)run_start(a, dst, k, r) + (a->dense ? off : 0);
        const float *pb = (const float *)run_start(b, dst, k, r) + (b->dense ? off : 0);
        if (a->dense && b->dense) {
            vop((size_t)len, pa, pb, out + e);
        } else if (a->dense) {
            vopc((size_t)len, pa, pb, out + e);
        } else if (b->dense) { /* a + b = b + a, bitwise */
            vopc((size_t)len, pb, pa, out + e);
        } else {
            const float v = op == OP_ADD ? *pa + *pb : *pa * *pb;
            for (int64_t i = 0; i < len; i++) out[e + i] = v;
        }
        e += len;
    }
}

static void binary_forward(const gml_compute_params *p, gml_tensor *dst, binop op,
                           gml_kernel_fn reference) {
    operand ops[2] = {operand_of(dst->src[0]), operand_of(dst->src[1])};
    int k;
    if (!find_runs(dst, ops, 2, &k)) {
        reference(p, dst);
        return;
    }
    binary_runs(p, dst, op, &ops[0], &ops[1], k);
}

static void gml_f32_add(const gml_compute_params *p, gml_tensor *dst) {
    binary_forward(p, dst, OP_ADD, gml_f32_add__ref);
}
static void gml_f32_mul(const gml_compute_params *p, gml_tensor *dst) {
    binary_forward(p, dst, OP_MUL, gml_f32_mul__ref);
}
/* a * s: b is the constant s */
static void gml_f32_scale(const gml_compute_params *p, gml_tensor *dst) {
    const float s = gml_param_f32(dst, 0);
    operand ops[2] = {operand_of(dst->src[0]), {.data = (const char *)&s}};
    int k;
    if (!find_runs(dst, ops, 2, &k)) {
        gml_f32_scale__ref(p, dst);
        return;
    }
    binary_runs(p, dst, OP_MUL, &ops[0], &ops[1], k);
}

static double elementwise_flops(const gml_tensor *dst) { return (double)gml_nelements(dst); }

const gml_op_def gml_opdef_add = {.name = "add", .forward = gml_f32_add,
                                  .reference = gml_f32_add__ref, .flops = elementwise_flops};
const gml_op_def gml_opdef_mul = {.name = "mul", .forward = gml_f32_mul,
                                  .reference = gml_f32_mul__ref, .flops = elementwise_flops};
const gml_op_def gml_opdef_scale = {.name = "scale", .forward = gml_f32_scale,
                                    .reference = gml_f32_scale__ref, .flops = elementwise_flops};

static gml_tensor *binary(gml_context *ctx, gml_op op, gml_tensor *a, gml_tensor *b) {
    if (!a || !b) return NULL;
    const char *name = gml_op_name(op);
    if (!gml_expect_type(ctx, name, a, GML_F32) || !gml_expect_type(ctx, name, b, GML_F32))
        return NULL;
    int64_t ne[GML_MAX_DIMS];
    int n;
    if (!gml_broadcast_shape(ctx, name, a, b, ne, &n)) return NULL;
    gml_tensor *t = gml_new_op(ctx, op, GML_F32, n, ne + GML_MAX_DIMS - n);
    if (!t) return NULL;
    t->src[0] = a;
    t->src[1] = b;
    return t;
}

/* a [...], b [...] broadcastable -> out [broadcast shape] */
gml_tensor *gml_add(gml_context *ctx, gml_tensor *a, gml_tensor *b) {
    return binary(ctx, GML_OP_ADD, a, b);
}

gml_tensor *gml_mul(gml_context *ctx, gml_tensor *a, gml_tensor *b) {
    return binary(ctx, GML_OP_MUL, a, b);
}

/* a [...] -> out [...] = a * s */
gml_tensor *gml_scale(gml_context *ctx, gml_tensor *a, float s) {
    if (!a) return NULL;
    if (!gml_expect_type(ctx, "scale", a, GML_F32)) return NULL;
    gml_tensor *t = gml_new_op(ctx, GML_OP_SCALE, GML_F32, a->n_dims, a->ne + GML_MAX_DIMS - a->n_dims);
    if (!t) return NULL;
    t->src[0] = a;
    gml_set_param_f32(t, 0, s);
    return t;
}
