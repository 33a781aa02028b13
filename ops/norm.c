/* Normalizations over the last dim: rms_norm (as Hugging Face's
 * LlamaRMSNorm in float32) and layer_norm (as torch.nn.LayerNorm, biased
 * variance). x [..., d] any strides, w and b [d] or NULL; out contiguous.
 *
 * Numerics, every kernel: the row's statistics are sums of float terms
 * added in double (the fast kernels: ops/reduce.h, in float within blocks of
 * 256 and in double across them, one order on every ISA; the reference: in
 * order in double); the mean and the variance are those sums / d in double,
 * the inverse root 1 / sqrt(var + eps) is taken in double and rounded once
 * to float; then each element is formed in float as PyTorch forms it:
 *     rms_norm:   y = (x * r) * w            r = 1/sqrt(mean(x^2) + eps)
 *     layer_norm: y = ((x - mean) * r) * w + b   r = 1/sqrt(var + eps)
 * with x^2 and (x - mean)^2 rounded to float (as x.pow(2) in float: an |x|
 * above about 1.8e19 squares to inf, as in PyTorch) and layer_norm's
 * variance taken in a second pass over x - mean (the float mean), not
 * from E[x^2] - mean^2. */
#include "norm.h"
#include "ops_back.h"

#include <math.h>

typedef struct norm_params {
    float eps;
} norm_params;
GML_PARAMS_FIT(norm_params);

static float eps_of(const gml_tensor *t) {
    norm_params p;
    gml_get_params(t, &p, sizeof p);
    return p.eps;
}

/* 1 / sqrt(var + eps) in double, rounded once */
static inline float inv_root(double var, float eps) {
    return (float)(1.0 / sqrt(var + (double)eps));
}

/* ---- reference kernel: plain loops over any strides ------------------------ */

/* rms_norm (b NULL: src[2] absent) and layer_norm (layer true) */
static void norm_ref(const gml_compute_params *p, gml_tensor *dst, bool layer) {
    const gml_tensor *x = dst->src[0], *w = dst->src[1], *b = layer ? dst->src[2] : NULL;
    const float eps = eps_of(dst);
    const int64_t d = x->ne[3], sx = (int64_t)x->nb[3];
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        const char *xr = gml_ptr(x, i0, i1, i2, 0);
        float *out = (float *)gml_ptr(dst, i0, i1, i2, 0);
        float mean = 0.0f;
        if (layer) {
            double s = 0;
            for (int64_t j = 0; j < d; j++) s += *(const float *)(xr + j * sx);
            mean = (float)(s / (double)d);
        }
        double ss = 0;
        for (int64_t j = 0; j < d; j++) {
            const float v = *(const float *)(xr + j * sx) - mean;
            ss += (double)(v * v);
        }
        const float rr = inv_root(ss / (double)d, eps);
        /* read the whole row before the first write: out may be x (in place) */
        for (int64_t j = 0; j < d; j++) {
            float y = (*(const float *)(xr + j * sx) - mean) * rr;
            if (w) y *= *(const float *)gml_ptr(w, 0, 0, 0, j);
            if (b) y += *(const float *)gml_ptr(b, 0, 0, 0, j);
            out[j] = y;
        }
    }
}

static void gml_f32_rms_norm__ref(const gml_compute_params *p, gml_tensor *dst) {
    norm_ref(p, dst, false);
}
static void gml_f32_layer_norm__ref(const gml_compute_params *p, gml_tensor *dst) {
    norm_ref(p, dst, true);
}

/* ---- the portable variant ------------------------------------------------- */

void gml_f32_vnorm_ukernel__scalar_u1(size_t n, const float *x, float c, float s, const float *w,
                                      const float *b, float *out) {
    for (size_t i = 0; i < n; i++) {
        float y = (x[i] - c) * s;
        if (w) y = y * w[i];
        if (b) y = y + b[i];
        out[i] = y;
    }
}

/* ---- fast kernels ----------------------------------------------------------
 * Per row: the statistics by the reduce micro-kernels, then vnorm. A row of
 * x that is not contiguous is first gathered into its output row (dst is
 * contiguous) and normalized there in place: bitwise what the same numbers
 * give contiguous. A weight or bias that is not contiguous (a strided view)
 * sends the node to the reference kernel. */

static bool dense_vec(const gml_tensor *v) {
    return !v || v->ne[3] == 1 || v->nb[3] == sizeof(float);
}

static void norm_forward(const gml_compute_params *p, gml_tensor *dst, bool layer) {
    const gml_tensor *x = dst->src[0], *w = dst->src[1], *b = layer ? dst->src[2] : NULL;
    if (!dense_vec(w) || !dense_vec(b)) {
        gml_kernel_note(p, "reference (strided weight or bias)");
        norm_ref(p, dst, layer);
        return;
    }
    const float eps = eps_of(dst);
    const int64_t d = x->ne[3], sx = (int64_t)x->nb[3];
    const bool gather = d > 1 && sx != (int64_t)sizeof(float);
    gml_f32_rsum_ukernel *const rsum = GML_PICK_UKERNEL(p->isa, GML_F32_RSUM_UKERNELS, gml_f32_rsum_ukernel);
    gml_f32_rsumsq_ukernel *const rsumsq =
        GML_PICK_UKERNEL(p->isa, GML_F32_RSUMSQ_UKERNELS, gml_f32_rsumsq_ukernel);
    gml_f32_vnorm_ukernel *const vnorm = GML_PICK_UKERNEL(p->isa, GML_F32_VNORM_UKERNELS, gml_f32_vnorm_ukernel);
    gml_kernel_note(p, gather ? GML_PICK_UKERNEL_NAME_AS(p->isa, GML_F32_VNORM_UKERNELS, GML_UKERNEL_NAME_GATHERED)
                              : GML_PICK_UKERNEL_NAME(p->isa, GML_F32_VNORM_UKERNELS));
    const float *wd = w ? (const float *)w->data : NULL, *bd = b ? (const float *)b->data : NULL;
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        const char *xr = gml_ptr(x, i0, i1, i2, 0);
        float *out = (float *)gml_ptr(dst, i0, i1, i2, 0);
        const float *row = (const float *)(const void *)xr;
        if (gather) {
            for (int64_t j = 0; j < d; j++) memcpy(&out[j], xr + j * sx, sizeof(float));
            row = out;
        }
        float mean = 0.0f;
        if (layer) mean = (float)(rsum((size_t)d, row) / (double)d);
        const float rr = inv_root(rsumsq((size_t)d, row, mean) / (double)d, eps);
        vnorm((size_t)d, row, mean, rr, wd, bd, out);
    }
}

static void gml_f32_rms_norm(const gml_compute_params *p, gml_tensor *dst) {
    norm_forward(p, dst, false);
}
static void gml_f32_layer_norm(const gml_compute_params *p, gml_tensor *dst) {
    norm_forward(p, dst, true);
}

static double rms_norm_flops(const gml_tensor *dst) { return 4.0 * (double)gml_nelements(dst); }
static double layer_norm_flops(const gml_tensor *dst) { return 7.0 * (double)gml_nelements(dst); }

/* w or b (what: "weight", "bias") of x's norm: NULL or f32 [d]. */
static bool check_vec(gml_context *ctx, const char *call, const char *op, gml_tensor *x,
                      gml_tensor *v, const char *what) {
    if (!v) return true;
    if (!gml_expect_type(ctx, op, v, GML_F32)) return false;
    if (v->n_dims != 1 || v->ne[3] != x->ne[3]) {
        char sv[GML_SHAPE_MAX], sx[GML_SHAPE_MAX];
        gml_fail(ctx, "%s: %s %s %s does not match the last dim of %s %s (want [%" PRId64 "])",
                 call, what, v->name, GML_SHAPE(v, sv), x->name, GML_SHAPE(x, sx), x->ne[3]);
        return false;
    }
    return true;
}

static gml_tensor *norm(gml_context *ctx, gml_op op, gml_tensor *x, gml_tensor *w, gml_tensor *b,
                        float eps) {
    if (!x) return NULL;
    const char *name = gml_op_name(op);
    gml_tensor *src[3] = {x, w, b};
    const int n_src = op == GML_OP_LAYER_NORM ? 3 : 2;
    char call[GML_CALL_MAX];
    gml_format_call(name, src, n_src, call, sizeof call);
    if (!gml_expect_type(ctx, name, x, GML_F32)) return NULL;
    if (!check_vec(ctx, call, name, x, w, "weight") || !check_vec(ctx, call, name, x, b, "bias"))
        return NULL;
    if (!isfinite(eps) || eps < 0)
        return gml_fail(ctx, "%s: eps %g must be finite and >= 0", call, (double)eps);
    gml_tensor *t = gml_new_op(ctx, op, GML_F32, x->n_dims, x->ne + GML_MAX_DIMS - x->n_dims, src,
                               n_src);
    if (!t) return NULL;
    gml_set_params(t, &(norm_params){eps}, sizeof(norm_params));
    return t;
}

/* x [..., d], w [d] or NULL -> [..., d] */
gml_tensor *gml_rms_norm(gml_context *ctx, gml_tensor *x, gml_tensor *w, float eps) {
    GML_ENTER(ctx, 1, x, w);
    return norm(ctx, GML_OP_RMS_NORM, x, w, NULL, eps);
}

/* x [..., d], w [d] or NULL, b [d] or NULL -> [..., d] */
gml_tensor *gml_layer_norm(gml_context *ctx, gml_tensor *x, gml_tensor *w, gml_tensor *b,
                           float eps) {
    GML_ENTER(ctx, 1, x, w, b);
    return norm(ctx, GML_OP_LAYER_NORM, x, w, b, eps);
}

static gml_tensor *build_rms_norm(gml_context *ctx, const gml_arg *v) {
    return gml_rms_norm(ctx, v[0].t, v[1].t, v[2].given ? v[2].f : 1e-6f);
}
static gml_tensor *build_layer_norm(gml_context *ctx, const gml_arg *v) {
    return gml_layer_norm(ctx, v[0].t, v[1].t, v[2].t, v[3].given ? v[3].f : 1e-5f);
}

static void rms_norm_args(const gml_tensor *t, gml_arg *v) {
    v[0].t = t->src[0];
    v[1].t = t->src[1];
    v[2].f = eps_of(t);
}
static void layer_norm_args(const gml_tensor *t, gml_arg *v) {
    v[0].t = t->src[0];
    v[1].t = t->src[1];
    v[2].t = t->src[2];
    v[3].f = eps_of(t);
}

/* Backwards (gml_grad): dx by rms_norm_back / layer_norm_back; the weight's
 * gradient sum_rows(dy * the norm of x without w and b) and the bias's
 * sum_rows(dy), each summed by sum_to in one fixed order. */
static bool norm_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy, bool layer) {
    gml_context *ctx = gml_backward_context(b);
    gml_tensor *x = node->src[0], *w = node->src[1], *bias = layer ? node->src[2] : NULL;
    const float eps = eps_of(node);
    if (gml_backward_needs(b, x) &&
        !gml_backward_add(b, x, layer ? gml_layer_norm_back(ctx, x, dy, w, eps)
                                      : gml_rms_norm_back(ctx, x, dy, w, eps)))
        return false;
    const int64_t d = x->ne[3];
    if (w && gml_backward_needs(b, w)) {
        gml_tensor *xh = layer ? gml_layer_norm(ctx, x, NULL, NULL, eps) : gml_rms_norm(ctx, x, NULL, eps);
        if (!gml_backward_add(b, w, gml_sum_to(ctx, gml_mul(ctx, dy, xh), 1, &d))) return false;
    }
    return !bias || !gml_backward_needs(b, bias) || gml_backward_add(b, bias, gml_sum_to(ctx, dy, 1, &d));
}
static bool rms_norm_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    return norm_backward(b, node, dy, false);
}
static bool layer_norm_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    return norm_backward(b, node, dy, true);
}

/* In place (GML_OPF_INPLACE): a row is read and written by one thread, and
 * every kernel reads x[j] for the statistics before it writes any out[j],
 * then reads x[j] just before it writes out[j]. */
const gml_op_def gml_opdef_rms_norm = {
    .backward = rms_norm_backward,
    .forward = gml_f32_rms_norm,
    .reference = gml_f32_rms_norm__ref,
    .flops = rms_norm_flops,
    .flags = GML_OPF_INPLACE,
    GML_ARGS(GML_T("x"), GML_OPT("w", OPT_TENSOR, "none"), GML_OPT("eps", FLOAT, "1e-6")),
    .build = build_rms_norm,
    .get_args = rms_norm_args,
    .doc_args = "x `[..., d]`; w `[d]` or none",
    .doc_result = "x / sqrt(mean(x^2 over the last dim) + eps) * w (Llama's RMSNorm in float32)",
};
const gml_op_def gml_opdef_layer_norm = {
    .backward = layer_norm_backward,
    .forward = gml_f32_layer_norm,
    .reference = gml_f32_layer_norm__ref,
    .flops = layer_norm_flops,
    .flags = GML_OPF_INPLACE,
    GML_ARGS(GML_T("x"), GML_OPT("w", OPT_TENSOR, "none"), GML_OPT("b", OPT_TENSOR, "none"),
             GML_OPT("eps", FLOAT, "1e-5")),
    .build = build_layer_norm,
    .get_args = layer_norm_args,
    .doc_args = "x `[..., d]`; w, b `[d]` or none",
    .doc_result = "(x - mean) / sqrt(var + eps) * w + b over the last dim, biased variance "
                  "(torch.nn.LayerNorm)",
};

/* ---- backwards ------------------------------------------------------------------
 * dx of rms_norm and layer_norm from x, dy and w (NULL: 1), per row in double
 * with the forward's statistics (mean, r = 1 / sqrt(var + eps)), one rounding:
 *     rms_norm:   g = dy w;  dx = r g - x r^3 mean(g x)
 *     layer_norm: g = dy w;  xh = (x - mean) r;  dx = r (g - mean(g) - xh mean(g xh))
 * The weight's and the bias's gradients are sums over the rows, which are
 * compositions (docs/training.md): dw = sum_rows(dy * norm(x) without w and
 * b), db = sum_rows(dy). The reference: plain loops in order, any strides;
 * the fast kernel (below it): the micro-kernels of ops/norm.inc, the same
 * formulas with the sums in 16 double lanes (ops/norm.h). */
static void norm_back(const gml_compute_params *p, gml_tensor *dst, bool layer) {
    const gml_tensor *x = dst->src[0], *dy = dst->src[1], *w = dst->src[2];
    const double eps = eps_of(dst);
    const int64_t d = x->ne[3], sx = (int64_t)x->nb[3], sg = (int64_t)dy->nb[3];
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        const char *xr = gml_ptr(x, i0, i1, i2, 0), *gr = gml_ptr(dy, i0, i1, i2, 0);
#define XV(j) ((double)*(const float *)(const void *)(xr + (j) * sx))
#define GV(j) ((double)*(const float *)(const void *)(gr + (j) * sg) * \
               (w ? (double)*(const float *)(const void *)gml_ptr(w, 0, 0, 0, j) : 1.0))
        double mean = 0, var = 0, mg = 0, mgx = 0;
        if (layer) {
            for (int64_t j = 0; j < d; j++) mean += XV(j);
            mean /= (double)d;
        }
        for (int64_t j = 0; j < d; j++) var += (XV(j) - mean) * (XV(j) - mean);
        const double rr = 1.0 / sqrt(var / (double)d + eps);
        for (int64_t j = 0; j < d; j++) {
            mg += GV(j);
            mgx += GV(j) * (XV(j) - mean) * rr;
        }
        mg /= (double)d;
        mgx /= (double)d;
        float *out = (float *)(void *)gml_ptr(dst, i0, i1, i2, 0);
        for (int64_t j = 0; j < d; j++) {
            const double xh = (XV(j) - mean) * rr;
            out[j] = (float)(layer ? rr * (GV(j) - mg - xh * mgx) : rr * (GV(j) - xh * mgx));
        }
#undef XV
#undef GV
    }
}

static void gml_f32_rms_norm_back__ref(const gml_compute_params *p, gml_tensor *dst) {
    norm_back(p, dst, false);
}
static void gml_f32_layer_norm_back__ref(const gml_compute_params *p, gml_tensor *dst) {
    norm_back(p, dst, true);
}

/* The portable variant: ops/norm.h's order, element by element. */
void gml_f32_vnorm_back_ukernel__scalar_u16(size_t n, const float *x, const float *dy,
                                            const float *w, double eps, bool layer, float *out) {
    double acc[GML_REDUCE_LANES] = {0}, acc2[GML_REDUCE_LANES] = {0};
    double mean = 0;
    if (layer) {
        for (size_t i = 0; i < n; i++) acc[i % GML_REDUCE_LANES] += (double)x[i];
        mean = gml_reduce_tree16(acc) / (double)n;
    }
    for (int l = 0; l < GML_REDUCE_LANES; l++) acc[l] = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)x[i] - mean;
        const double dd = d * d;
        acc[i % GML_REDUCE_LANES] += dd;
    }
    const double r = 1.0 / sqrt(gml_reduce_tree16(acc) / (double)n + eps);
    for (int l = 0; l < GML_REDUCE_LANES; l++) acc[l] = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)x[i] - mean, g = w ? (double)dy[i] * (double)w[i] : (double)dy[i];
        const double gd = g * d;
        acc[i % GML_REDUCE_LANES] += g;
        acc2[i % GML_REDUCE_LANES] += gd;
    }
    const double mg = gml_reduce_tree16(acc) / (double)n;
    const double mgx = gml_reduce_tree16(acc2) * r / (double)n;
    for (size_t i = 0; i < n; i++) {
        const double xh = ((double)x[i] - mean) * r, g = w ? (double)dy[i] * (double)w[i] : (double)dy[i];
        const double xm = xh * mgx;
        const double u = (layer ? g - mg : g) - xm;
        out[i] = (float)(r * u);
    }
}

/* The fast kernel: a row per micro-kernel call (ops/norm.inc). A row of x
 * that is not contiguous is gathered into its output row, one of dy into
 * this thread's part of the scratch: bitwise what the same numbers give
 * contiguous. A weight that is not contiguous sends the node to the
 * reference kernel. */
static size_t norm_back_row_bytes(const gml_tensor *dst) {
    return gml_align_up((size_t)dst->ne[3] * sizeof(float), GML_ALIGN);
}
static size_t norm_back_work_size(const gml_tensor *dst, int nth) {
    const gml_tensor *dy = dst->src[1];
    return dy->ne[3] > 1 && dy->nb[3] != sizeof(float) ? (size_t)nth * norm_back_row_bytes(dst) : 0;
}

static void norm_back_fast(const gml_compute_params *p, gml_tensor *dst, bool layer) {
    const gml_tensor *x = dst->src[0], *dy = dst->src[1], *w = dst->src[2];
    if (!dense_vec(w)) {
        gml_kernel_note(p, "reference (strided weight)");
        norm_back(p, dst, layer);
        return;
    }
    const int64_t d = x->ne[3], sx = (int64_t)x->nb[3], sg = (int64_t)dy->nb[3];
    const bool gather_x = d > 1 && sx != (int64_t)sizeof(float);
    const bool gather_g = d > 1 && sg != (int64_t)sizeof(float);
    gml_f32_vnorm_back_ukernel *const fn =
        GML_PICK_UKERNEL(p->isa, GML_F32_VNORM_BACK_UKERNELS, gml_f32_vnorm_back_ukernel);
    gml_kernel_note(p, gather_x || gather_g
                           ? GML_PICK_UKERNEL_NAME_AS(p->isa, GML_F32_VNORM_BACK_UKERNELS, GML_UKERNEL_NAME_GATHERED)
                           : GML_PICK_UKERNEL_NAME(p->isa, GML_F32_VNORM_BACK_UKERNELS));
    float *gbuf = gather_g ? (float *)(void *)((char *)p->wdata + (size_t)p->ith * norm_back_row_bytes(dst))
                           : NULL;
    const float *wd = w ? (const float *)w->data : NULL;
    const double eps = eps_of(dst);
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        const char *xr = gml_ptr(x, i0, i1, i2, 0), *gr = gml_ptr(dy, i0, i1, i2, 0);
        float *out = (float *)gml_ptr(dst, i0, i1, i2, 0);
        const float *xrow = (const float *)(const void *)xr, *grow = (const float *)(const void *)gr;
        if (gather_x) {
            for (int64_t j = 0; j < d; j++) memcpy(&out[j], xr + j * sx, sizeof(float));
            xrow = out;
        }
        if (gather_g) {
            for (int64_t j = 0; j < d; j++) memcpy(&gbuf[j], gr + j * sg, sizeof(float));
            grow = gbuf;
        }
        fn((size_t)d, xrow, grow, wd, eps, layer, out);
    }
}

static void gml_f32_rms_norm_back(const gml_compute_params *p, gml_tensor *dst) {
    norm_back_fast(p, dst, false);
}
static void gml_f32_layer_norm_back(const gml_compute_params *p, gml_tensor *dst) {
    norm_back_fast(p, dst, true);
}

static gml_tensor *norm_back_node(gml_context *ctx, gml_op op, gml_tensor *x, gml_tensor *dy,
                                  gml_tensor *w, float eps) {
    if (!x || !dy) return NULL;
    const char *name = gml_op_name(op);
    gml_tensor *src[3] = {x, dy, w};
    char call[GML_CALL_MAX], sa[GML_SHAPE_MAX], sb[GML_SHAPE_MAX];
    gml_format_call(name, src, 3, call, sizeof call);
    if (!gml_expect_type(ctx, name, x, GML_F32) || !gml_expect_type(ctx, name, dy, GML_F32))
        return NULL;
    if (dy->n_dims != x->n_dims || memcmp(dy->ne, x->ne, sizeof x->ne) != 0)
        return gml_fail(ctx, "%s: dy %s %s must have x's shape %s", call, dy->name,
                        GML_SHAPE(dy, sa), GML_SHAPE(x, sb));
    if (!check_vec(ctx, call, name, x, w, "weight")) return NULL;
    if (!isfinite(eps) || eps < 0)
        return gml_fail(ctx, "%s: eps %g must be finite and >= 0", call, (double)eps);
    gml_tensor *t = gml_new_op(ctx, op, GML_F32, x->n_dims, x->ne + GML_MAX_DIMS - x->n_dims, src, 3);
    if (!t) return NULL;
    gml_set_params(t, &(norm_params){eps}, sizeof(norm_params));
    return t;
}

/* x [..., d] (the forward's input), dy [..., d], w [d] or NULL -> dx [..., d] */
gml_tensor *gml_rms_norm_back(gml_context *ctx, gml_tensor *x, gml_tensor *dy, gml_tensor *w,
                              float eps) {
    GML_ENTER(ctx, 2, x, dy, w);
    return norm_back_node(ctx, GML_OP_RMS_NORM_BACK, x, dy, w, eps);
}
gml_tensor *gml_layer_norm_back(gml_context *ctx, gml_tensor *x, gml_tensor *dy, gml_tensor *w,
                                float eps) {
    GML_ENTER(ctx, 2, x, dy, w);
    return norm_back_node(ctx, GML_OP_LAYER_NORM_BACK, x, dy, w, eps);
}

static gml_tensor *build_rms_norm_back(gml_context *ctx, const gml_arg *v) {
    return gml_rms_norm_back(ctx, v[0].t, v[1].t, v[2].t, v[3].given ? v[3].f : 1e-6f);
}
static gml_tensor *build_layer_norm_back(gml_context *ctx, const gml_arg *v) {
    return gml_layer_norm_back(ctx, v[0].t, v[1].t, v[2].t, v[3].given ? v[3].f : 1e-5f);
}
static void norm_back_args(const gml_tensor *t, gml_arg *v) {
    v[0].t = t->src[0];
    v[1].t = t->src[1];
    v[2].t = t->src[2];
    v[3].f = eps_of(t);
}
static double norm_back_flops(const gml_tensor *dst) { return 10.0 * (double)gml_nelements(dst); }

const gml_op_def gml_opdef_rms_norm_back = {
    .forward = gml_f32_rms_norm_back,
    .reference = gml_f32_rms_norm_back__ref,
    .work_size = norm_back_work_size,
    .flops = norm_back_flops,
    GML_ARGS(GML_T("x"), GML_T("dy"), GML_OPT("w", OPT_TENSOR, "none"),
             GML_OPT("eps", FLOAT, "1e-6")),
    .build = build_rms_norm_back,
    .get_args = norm_back_args,
    .doc_args = "x `[..., d]` rms_norm's input, dy its output's gradient; w `[d]` or none",
    .doc_result = "dx: r (dy w) - x r^3 mean(dy w x), r = 1/sqrt(mean(x^2) + eps)",
};
const gml_op_def gml_opdef_layer_norm_back = {
    .forward = gml_f32_layer_norm_back,
    .reference = gml_f32_layer_norm_back__ref,
    .work_size = norm_back_work_size,
    .flops = norm_back_flops,
    GML_ARGS(GML_T("x"), GML_T("dy"), GML_OPT("w", OPT_TENSOR, "none"),
             GML_OPT("eps", FLOAT, "1e-5")),
    .build = build_layer_norm_back,
    .get_args = norm_back_args,
    .doc_args = "x `[..., d]` layer_norm's input, dy its output's gradient; w `[d]` or none",
    .doc_result = "dx: r (g - mean(g) - xh mean(g xh)), g = dy w, xh = (x - mean) r",
};
