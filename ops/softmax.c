/* Softmax over the last dim with fused scale, additive broadcast mask and
 * causal masking. */
#include "ukernels.h"

#include <math.h>

typedef struct softmax_params {
    float scale;
    int32_t causal; /* 0 or 1 */
} softmax_params;
GML_PARAMS_FIT(softmax_params);

static softmax_params params_of(const gml_tensor *t) {
    softmax_params p;
    gml_get_params(t, &p, sizeof p);
    return p;
}

/* Row [i0, i1, i2, :] of x [.., Tq, Tk]: v_j = x_j * scale + mask_j, keys past
 * the causal limit dropped; out = exp(v - max) / sum, or all zeros when every
 * key is masked (gml_softmax_score: a -inf mask value hides a key; a
 * non-finite score at a key not hidden makes the row NaN). Reference: expf
 * per element, double sum. */
static void gml_f32_softmax__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *x = dst->src[0], *mask = dst->src[1];
    const softmax_params par = params_of(dst);
    const float scale = par.scale;
    const bool causal = par.causal != 0;
    const int64_t tq = dst->ne[2], tk = dst->ne[3];
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        const char *xr = gml_ptr(x, i0, i1, i2, 0);
        const char *mr = mask ? gml_ptr(mask, i0 % mask->ne[0], i1 % mask->ne[1], i2 % mask->ne[2], 0) : NULL;
        const int64_t ms = mask && mask->ne[3] > 1 ? (int64_t)mask->nb[3] : 0;
        float *out = (float *)gml_ptr(dst, i0, i1, i2, 0);
        /* keys j < n are visible: causal cuts at i + (Tk - Tq) */
        const int64_t n = causal ? GML_MAX(0, GML_MIN(tk, i2 + (tk - tq) + 1)) : tk;
        float max = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
            const float v = gml_softmax_score(*(const float *)(xr + j * (int64_t)x->nb[3]), scale,
                                              mr != NULL, mr ? *(const float *)(mr + j * ms) : 0);
            out[j] = v;
            max = v > max ? v : max;
        }
        if (max == -INFINITY) { /* every key masked, or NaN scores */
            gml_softmax_no_visible_key((size_t)n, out);
            for (int64_t j = n; j < tk; j++) out[j] = 0.0f;
            continue;
        }
        double sum = 0;
        for (int64_t j = 0; j < n; j++) {
            out[j] = expf(out[j] - max);
            sum += out[j];
        }
        const float inv = (float)(1.0 / sum);
        for (int64_t j = 0; j < n; j++) out[j] *= inv;
        for (int64_t j = n; j < tk; j++) out[j] = 0.0f;
    }
}

/* The portable variant: the reference's arithmetic on contiguous rows. */
void gml_f32_softmax_ukernel__scalar_u1(size_t n, const float *x, const float *mask, float scale,
                                        float *out) {
    float max = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        const float v = gml_softmax_score(x[i], scale, mask != NULL, mask ? mask[i] : 0);
        out[i] = v;
        max = v > max ? v : max;
    }
    if (max == -INFINITY) { /* every key masked, or NaN scores */
        gml_softmax_no_visible_key(n, out);
        return;
    }
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        out[i] = expf(out[i] - max);
        sum += out[i];
    }
    const float inv = (float)(1.0 / sum);
    for (size_t i = 0; i < n; i++) out[i] *= inv;
}

void gml_f32_vexp_ukernel__scalar_u1(size_t n, const float *x, float *y) {
    for (size_t i = 0; i < n; i++) y[i] = expf(x[i]);
}

/* Same as the reference, one micro-kernel call per row. Rows of x and of the
 * mask must be contiguous (last stride one element, or Tk = 1); otherwise
 * the reference runs. */
/* Rows of x or of the mask that are not contiguous (a permuted or
 * transposed view, a mask broadcast along the keys) are gathered into the
 * output row first, as gml_softmax_score forms them (x * scale (+ mask) with
 * the same two roundings the micro-kernels make, a multiply then an add:
 * this file is built without FMA; -inf for a hidden key, NaN for a -inf
 * score), and the micro-kernel then runs in place on that row given as both
 * x and mask, with scale 0: a hidden key's -inf mask hides it, a visible
 * score s enters as s * 0 + s = s (a non-finite s gives NaN, as it should).
 * Bitwise what it gives on the same numbers laid out contiguously. */
static void gml_f32_softmax(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *x = dst->src[0], *mask = dst->src[1];
    const softmax_params par = params_of(dst);
    const float scale = par.scale;
    const bool causal = par.causal != 0;
    const int64_t tq = dst->ne[2], tk = dst->ne[3];
    const bool x_rows = tk == 1 || x->nb[3] == sizeof(float);
    const bool mask_rows = !mask || tk == 1 || (mask->ne[3] == tk && mask->nb[3] == sizeof(float));
    const bool gather = !(x_rows && mask_rows);
    gml_f32_softmax_ukernel *const ukernel =
        GML_PICK_UKERNEL(GML_F32_SOFTMAX_UKERNELS, gml_f32_softmax_ukernel);
    gml_kernel_note(p, gather ? GML_PICK_UKERNEL_NAME_AS(GML_F32_SOFTMAX_UKERNELS,
                                                         GML_UKERNEL_NAME_GATHERED)
                              : GML_PICK_UKERNEL_NAME(GML_F32_SOFTMAX_UKERNELS));
    const int64_t sx = (int64_t)x->nb[3], sm = mask && mask->ne[3] > 1 ? (int64_t)mask->nb[3] : 0;
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        const char *xr = gml_ptr(x, i0, i1, i2, 0);
        const char *mr = mask ? gml_ptr(mask, i0 % mask->ne[0], i1 % mask->ne[1], i2 % mask->ne[2], 0)
                              : NULL;
        float *out = (float *)gml_ptr(dst, i0, i1, i2, 0);
        /* keys j < n are visible: causal cuts at i + (Tk - Tq) */
        const int64_t n = causal ? GML_MAX(0, GML_MIN(tk, i2 + (tk - tq) + 1)) : tk;
        if (n > 0 && gather) {
            for (int64_t j = 0; j < n; j++) /* a hidden key -inf, a bad score NaN */
                out[j] = gml_softmax_score(*(const float *)(xr + j * sx), scale, mr != NULL,
                                           mr ? *(const float *)(mr + j * sm) : 0);
            ukernel((size_t)n, out, out, 0.0f, out);
        } else if (n > 0) {
            ukernel((size_t)n, (const float *)(const void *)xr,
                    (const float *)(const void *)mr, scale, out);
        }
        for (int64_t j = n; j < tk; j++) out[j] = 0.0f;
    }
}

static double softmax_flops(const gml_tensor *dst) { return 5.0 * (double)gml_nelements(dst); }

/* x [.., Tq, Tk], mask broadcastable to x or NULL -> out [.., Tq, Tk] */
gml_tensor *gml_softmax(gml_context *ctx, gml_tensor *x, gml_tensor *mask, float scale,
                        bool causal) {
    if (!x) return NULL;
    char sx[GML_SHAPE_MAX], sm[GML_SHAPE_MAX];
    if (!gml_expect_type(ctx, "softmax", x, GML_F32)) return NULL;
    if (mask && !gml_expect_type(ctx, "softmax", mask, GML_F32)) return NULL;
    if (mask && !gml_broadcasts_to(mask, x))
        return gml_fail(ctx, "softmax(%s, %s): mask %s does not broadcast to scores %s (each "
                        "mask dim must be 1 or equal)", x->name, mask->name, GML_SHAPE(mask, sm),
                        GML_SHAPE(x, sx));
    if (!isfinite(scale))
        return gml_fail(ctx, "softmax(%s): scale %g is not finite", x->name, (double)scale);
    gml_tensor *t = gml_new_op(ctx, GML_OP_SOFTMAX, GML_F32, x->n_dims,
                               x->ne + GML_MAX_DIMS - x->n_dims, (gml_tensor *[]){x, mask}, 2);
    if (!t) return NULL;
    gml_set_params(t, &(softmax_params){scale, causal}, sizeof(softmax_params));
    return t;
}

static gml_tensor *build_softmax(gml_context *ctx, const gml_arg *v) {
    return gml_softmax(ctx, v[0].t, v[1].t, v[2].given ? v[2].f : 1.0f, v[3].i != 0);
}

static void softmax_args(const gml_tensor *t, gml_arg *v) {
    const softmax_params p = params_of(t);
    v[0].t = t->src[0];
    v[1].t = t->src[1];
    v[2].f = p.scale;
    v[3].i = p.causal;
}

/* In place (GML_OPF_INPLACE): a row is read and written by one thread, and
 * every variant reads x[j] only in its first pass, before it stores out[j]. */
const gml_op_def gml_opdef_softmax = {
    .forward = gml_f32_softmax,
    .reference = gml_f32_softmax__ref,
    .flops = softmax_flops,
    .flags = GML_OPF_INPLACE,
    GML_ARGS(GML_T("x"), GML_OPT("mask", OPT_TENSOR, "none"), GML_OPT("scale", FLOAT, "1"),
             GML_OPT("causal", BOOL, "false")),
    .build = build_softmax,
    .get_args = softmax_args,
    .doc_args = "x `[..., Tq, Tk]`; mask additive, broadcast to x (0 keep, -inf drop)",
    .doc_result = "softmax over the last dim of x*scale + mask; causal: query i sees key j iff "
                  "j <= i + (Tk - Tq); a row with no key left is all 0",
};
