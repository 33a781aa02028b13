/* Elementwise arithmetic: add and mul with PyTorch broadcasting, and scale. */
#include "../ggmlite/internal.h"

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

static double elementwise_flops(const gml_tensor *dst) { return (double)gml_nelements(dst); }

/* In place (GML_OPF_INPLACE): out[i] is written right after a[i] is read. */
const gml_op_def gml_opdef_add = {.name = "add", .forward = gml_f32_add__ref,
                                  .reference = gml_f32_add__ref, .flops = elementwise_flops,
                                  .flags = GML_OPF_INPLACE};
const gml_op_def gml_opdef_mul = {.name = "mul", .forward = gml_f32_mul__ref,
                                  .reference = gml_f32_mul__ref, .flops = elementwise_flops,
                                  .flags = GML_OPF_INPLACE};
const gml_op_def gml_opdef_scale = {.name = "scale", .forward = gml_f32_scale__ref,
                                    .reference = gml_f32_scale__ref, .flops = elementwise_flops,
                                    .flags = GML_OPF_INPLACE};

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
