/* Softmax over the last dim with fused scale, additive broadcast mask and
 * causal masking. */
#include "attn_opts.h"
#include "ukernels.h"
#include "ops_back.h"

#include <math.h>

/* Sources: x, mask, valid_lens, positions, sinks. */
#define SRC_LENS 2
#define SRC_POS 3
#define SRC_SINKS 4

typedef gml_attn_params softmax_params;
static softmax_params params_of(const gml_tensor *t) { return gml_attn_params_of(t); }

/* True when an option other than scale, mask and bottom-right causal is set
 * (the rows then go through the options' path). */
static bool has_opts(const gml_tensor *dst, const softmax_params *par) {
    return par->causal == GML_CAUSAL_TOP_LEFT || par->window > 0 || par->softcap > 0 ||
           par->alibi > 0 || dst->src[SRC_LENS] || dst->src[SRC_POS] || dst->src[SRC_SINKS];
}

/* Row [i0, i1, i2, :]'s visible keys [lo, hi) and, for alibi, its slope and
 * query position. */
typedef struct row_geom {
    int64_t lo, hi;
    float slope, qpos, sink;
    bool has_sink;
} row_geom;

static row_geom geom_of(const gml_tensor *dst, const softmax_params *par, int64_t i0, int64_t i1,
                        int64_t i2) {
    const int64_t tq = dst->ne[2], tk = dst->ne[3];
    row_geom g = {0, tk, 0.0f, 0.0f, 0.0f, false};
    gml_attn_key_range(par, dst->src[SRC_LENS], dst->src[SRC_POS], i0, i2, tq, tk, &g.lo, &g.hi);
    if (par->alibi > 0) {
        g.slope = gml_alibi_slope(par->alibi, i1, dst->ne[1]);
        g.qpos = (float)gml_attn_qpos(par, dst->src[SRC_POS], i0, i2, tq, tk);
    }
    if (dst->src[SRC_SINKS]) {
        g.has_sink = true;
        g.sink = *(const float *)(const void *)gml_ptr(dst->src[SRC_SINKS], 0, 0, 0, i1);
    }
    return g;
}

/* Key j's score with every option, as floats (x * scale; c tanh(. / c) in
 * double, rounded; + mask; hidden by a -inf mask; a visible non-finite
 * score NaN; + slope (j - i')). The reference's (softcap in double). */
static float opt_score(float x, float scale, float cap, bool has_mask, float mv, float slope,
                       float jd) {
    float v = x * scale;
    if (cap > 0) v = isfinite(v) ? (float)((double)cap * tanh((double)v / cap)) : NAN;
    if (has_mask) v += mv;
    if (has_mask && mv == -INFINITY) return -INFINITY;
    v = gml_visible_score(v);
    return v + slope * jd;
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
    const bool opts = has_opts(dst, &par);
    if (opts && !gml_attn_lens_ok(p, "softmax", dst->src[SRC_LENS], tk)) return;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        const char *xr = gml_ptr(x, i0, i1, i2, 0);
        const char *mr = mask ? gml_ptr(mask, i0 % mask->ne[0], i1 % mask->ne[1], i2 % mask->ne[2], 0) : NULL;
        const int64_t ms = mask && mask->ne[3] > 1 ? (int64_t)mask->nb[3] : 0;
        float *out = (float *)gml_ptr(dst, i0, i1, i2, 0);
        /* keys lo <= j < n are visible: causal cuts at i + (Tk - Tq) */
        int64_t lo = 0, n = causal ? GML_MAX(0, GML_MIN(tk, i2 + (tk - tq) + 1)) : tk;
        row_geom g = {0, n, 0.0f, 0.0f, 0.0f, false};
        if (opts) {
            g = geom_of(dst, &par, i0, i1, i2);
            lo = g.lo;
            n = g.hi;
        }
        float max = -INFINITY;
        for (int64_t j = lo; j < n; j++) {
            const float xv = *(const float *)(xr + j * (int64_t)x->nb[3]);
            const float mv = mr ? *(const float *)(mr + j * ms) : 0;
            const float v = opts ? opt_score(xv, scale, par.softcap, mr != NULL, mv, g.slope,
                                             (float)j - g.qpos)
                                 : gml_softmax_score(xv, scale, mr != NULL, mv);
            out[j] = v;
            max = v > max ? v : max;
        }
        for (int64_t j = 0; j < lo; j++) out[j] = 0.0f;
        for (int64_t j = n; j < tk; j++) out[j] = 0.0f;
        if (max == -INFINITY) { /* every key masked, or NaN scores */
            gml_softmax_no_visible_key((size_t)(n - lo), out + lo);
            continue;
        }
        if (g.has_sink) max = g.sink > max ? g.sink : isnan(g.sink) ? NAN : max;
        double sum = g.has_sink ? expf(g.sink - max) : 0;
        for (int64_t j = lo; j < n; j++) {
            out[j] = expf(out[j] - max);
            sum += out[j];
        }
        const float inv = (float)(1.0 / sum);
        for (int64_t j = lo; j < n; j++) out[j] *= inv;
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

/* The options' path (gml_softmax_ext): per row, the visible keys' scores
 * [lo, hi) into this thread's scratch (x * scale; softcap: / c, the picked
 * vector tanh, * c; + mask, -inf where it is -inf, NaN for a visible
 * non-finite score; + slope (j - i')), the sink logit after them, then the
 * micro-kernel in place with scale 0 (as the gathered rows: a score s
 * enters as s * 0 + s), the sink's weight dropped. A row with no visible key
 * gives zeros: the sink alone is left, with weight 1, the keys 0. */
static void softmax_opts_rows(const gml_compute_params *p, gml_tensor *dst,
                              gml_f32_softmax_ukernel *ukernel) {
    const gml_tensor *x = dst->src[0], *mask = dst->src[1];
    const softmax_params par = params_of(dst);
    const int64_t tk = dst->ne[3];
    if (!gml_attn_lens_ok(p, "softmax", dst->src[SRC_LENS], tk)) return;
    gml_f32_vunary_ukernel *const vtanh =
        GML_PICK_UKERNEL(p->isa, GML_F32_VTANH_UKERNELS, gml_f32_vunary_ukernel);
    float *buf = (float *)p->wdata + (size_t)p->ith * gml_align_up((size_t)tk + 1, 16);
    const int64_t sx = (int64_t)x->nb[3], sm = mask && mask->ne[3] > 1 ? (int64_t)mask->nb[3] : 0;
    const float scale = par.scale, cap = par.softcap;
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        const row_geom g = geom_of(dst, &par, i0, i1, i2);
        const char *xr = gml_ptr(x, i0, i1, i2, 0);
        const char *mr = mask ? gml_ptr(mask, i0 % mask->ne[0], i1 % mask->ne[1], i2 % mask->ne[2], 0)
                              : NULL;
        float *out = (float *)gml_ptr(dst, i0, i1, i2, 0);
        const int64_t n = g.hi - g.lo;
        bool visible = false;
        for (int64_t j = 0; j < n; j++) buf[j] = *(const float *)(xr + (g.lo + j) * sx) * scale;
        if (cap > 0) {
            for (int64_t j = 0; j < n; j++) buf[j] = isfinite(buf[j]) ? buf[j] / cap : NAN;
            vtanh((size_t)n, buf, buf);
            for (int64_t j = 0; j < n; j++) buf[j] *= cap;
        }
        for (int64_t j = 0; j < n; j++) {
            float v = buf[j];
            const float mv = mr ? *(const float *)(mr + (g.lo + j) * sm) : 0.0f;
            if (mr) v += mv;
            v = mr && mv == -INFINITY ? -INFINITY : gml_visible_score(v);
            buf[j] = v + g.slope * ((float)(g.lo + j) - g.qpos);
            visible |= buf[j] != -INFINITY; /* NaN too: it makes the row NaN */
        }
        /* a row with no visible key is zeros, whatever the sink */
        if (g.has_sink) buf[n] = g.sink;
        const size_t len = (size_t)n + (g.has_sink && visible);
        if (len > 0) ukernel(len, buf, buf, 0.0f, buf);
        for (int64_t j = 0; j < g.lo; j++) out[j] = 0.0f;
        for (int64_t j = 0; j < n; j++) out[g.lo + j] = buf[j];
        for (int64_t j = g.hi; j < tk; j++) out[j] = 0.0f;
    }
}

static size_t softmax_work_size(const gml_tensor *dst, int nth) {
    const softmax_params par = params_of(dst);
    if (!has_opts(dst, &par)) return 0;
    return (size_t)nth * gml_align_up((size_t)dst->ne[3] + 1, 16) * sizeof(float);
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
        GML_PICK_UKERNEL(p->isa, GML_F32_SOFTMAX_UKERNELS, gml_f32_softmax_ukernel);
    if (has_opts(dst, &par)) {
#define OPTS_NAME(isa, fn, tile) #fn " (options: scores formed in scratch)",
        gml_kernel_note(p, GML_PICK_UKERNEL_NAME_AS(p->isa, GML_F32_SOFTMAX_UKERNELS, OPTS_NAME));
#undef OPTS_NAME
        softmax_opts_rows(p, dst, ukernel);
        return;
    }
    gml_kernel_note(p, gather ? GML_PICK_UKERNEL_NAME_AS(p->isa, GML_F32_SOFTMAX_UKERNELS,
                                                         GML_UKERNEL_NAME_GATHERED)
                              : GML_PICK_UKERNEL_NAME(p->isa, GML_F32_SOFTMAX_UKERNELS));
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

/* x [.., Tq, Tk] ([B, H, Tq, Tk] for lens, positions, sinks, alibi), opts:
 * mask broadcastable to x, valid_lens i32 [B] or [B, Tq], positions i32
 * [B, Tq], sinks f32 [H] (each or NULL) -> out [.., Tq, Tk] */
gml_tensor *gml_softmax_ext(gml_context *ctx, gml_tensor *x, float scale, const gml_attn_opts *opts) {
    GML_ENTER(ctx, 1, x);
    GML_ENTER_OPTS(ctx, opts);
    const gml_attn_opts none = {0};
    const gml_attn_opts *o = opts ? opts : &none;
    gml_tensor *mask = o->mask;
    char sx[GML_SHAPE_MAX], sm[GML_SHAPE_MAX];
    if (!gml_expect_type(ctx, "softmax", x, GML_F32)) return NULL;
    if (mask && !gml_expect_type(ctx, "softmax", mask, GML_F32)) return NULL;
    if (mask && !gml_broadcasts_to(mask, x))
        return gml_fail(ctx, "softmax(%s, %s): mask %s does not broadcast to scores %s (each "
                        "mask dim must be 1 or equal)", x->name, mask->name, GML_SHAPE(mask, sm),
                        GML_SHAPE(x, sx));
    if (!isfinite(scale))
        return gml_fail(ctx, "softmax(%s): scale %g is not finite", x->name, (double)scale);
    const int64_t B = x->ne[0], H = x->ne[1], Tq = x->ne[2], Tk = x->ne[3];
    if (!gml_attn_opts_check(ctx, "softmax", x->name, o, x->n_dims == 4, B, H, Tq, Tk)) return NULL;
    gml_tensor *lens = o->valid_lens;
    if (lens && !(lens->type == GML_I32 && ((lens->n_dims == 1 && lens->ne[3] == B) ||
                                           (lens->n_dims == 2 && lens->ne[2] == B && lens->ne[3] == Tq))))
        return gml_fail(ctx, "softmax(%s, %s): valid lengths must be i32 [%" PRId64 "] or [%" PRId64
                        ",%" PRId64 "] ([B] or [B, Tq]), got %s %s", x->name, lens->name, B, B, Tq,
                        gml_type_name(lens->type), GML_SHAPE(lens, sm));
    gml_tensor *t = gml_new_op(ctx, GML_OP_SOFTMAX, GML_F32, x->n_dims,
                               x->ne + GML_MAX_DIMS - x->n_dims,
                               (gml_tensor *[]){x, mask, lens, o->positions, o->sinks}, 5);
    if (!t) return NULL;
    gml_set_params(t,
                   &(softmax_params){scale, (int32_t)o->causal, o->window, o->softcap,
                                     o->alibi_max_bias},
                   sizeof(softmax_params));
    return t;
}

/* x [.., Tq, Tk], mask broadcastable to x or NULL -> out [.., Tq, Tk] */
gml_tensor *gml_softmax(gml_context *ctx, gml_tensor *x, gml_tensor *mask, float scale,
                        bool causal) {
    GML_ENTER(ctx, 1, x, mask);
    const gml_attn_opts o = {.mask = mask,
                             .causal = causal ? GML_CAUSAL_BOTTOM_RIGHT : GML_CAUSAL_NONE};
    return gml_softmax_ext(ctx, x, scale, &o);
}

static gml_tensor *build_softmax(gml_context *ctx, const gml_arg *v) {
#define GIVEN(a, field) (v[a].given ? v[a].field : 0) /* optional ones left out: none */
    const gml_attn_opts o = {.mask = GIVEN(1, t), .causal = (gml_causal)GIVEN(3, i),
                             .valid_lens = GIVEN(4, t), .positions = GIVEN(5, t),
                             .sinks = GIVEN(6, t), .window = GIVEN(7, i),
                             .softcap = GIVEN(8, f), .alibi_max_bias = GIVEN(9, f)};
#undef GIVEN
    return gml_softmax_ext(ctx, v[0].t, v[2].given ? v[2].f : 1.0f, &o);
}

static void softmax_args(const gml_tensor *t, gml_arg *v) {
    const softmax_params p = params_of(t);
    v[0].t = t->src[0];
    v[1].t = t->src[1];
    v[2].f = p.scale;
    v[3].i = p.causal;
    v[4].t = t->src[SRC_LENS];
    v[5].t = t->src[SRC_POS];
    v[6].t = t->src[SRC_SINKS];
    v[7].i = p.window;
    v[8].f = p.softcap;
    v[9].f = p.alibi;
}

/* Backward (gml_grad): dx by softmax_back; the sinks' gradient, a sink's
 * weight in a row being 1 - sum_j y_j, as the composition
 *     dsinks[h] = sum over (b, i) of (sum_j y - 1) (sum_j y dy)
 * (sum over the last dim, then sum_to [H], a fixed order). The mask gets
 * none: a gradient that would reach it is refused by name. */
static bool softmax_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    gml_context *ctx = gml_backward_context(b);
    gml_tensor *x = node->src[0], *mask = node->src[1], *sinks = node->src[SRC_SINKS];
    const softmax_params par = params_of(node);
    if (mask && gml_backward_needs(b, mask))
        return gml_backward_fail(b, "no gradient flows to the mask '%s' (an additive input "
                                 "held constant); make it a leaf no gradient is asked for",
                                 mask->name);
    if (!gml_backward_add(b, x, gml_softmax_back(ctx, node, dy, x, par.scale, par.softcap)))
        return false;
    if (!sinks || !gml_backward_needs(b, sinks)) return true;
    gml_tensor *rs = gml_sum(ctx, node), *dd = gml_sum(ctx, gml_mul(ctx, node, dy));
    gml_tensor *t = gml_sub(ctx, gml_mul(ctx, rs, dd), dd); /* [B, H, Tq, 1] */
    if (!t) return false;
    gml_tensor *t3 = gml_reshape(ctx, t, 3, node->ne); /* [B, H, Tq] */
    gml_tensor *per_h = t3 ? gml_sum_to(ctx, t3, 2, (int64_t[]){node->ne[1], 1}) : NULL;
    gml_tensor *ds = per_h ? gml_reshape(ctx, per_h, 1, (int64_t[]){node->ne[1]}) : NULL;
    return gml_backward_add(b, sinks, ds);
}

/* In place (GML_OPF_INPLACE): a row is read and written by one thread, and
 * every variant reads x[j] only in its first pass, before it stores out[j]. */
const gml_op_def gml_opdef_softmax = {
    .backward = softmax_backward,
    .forward = gml_f32_softmax,
    .reference = gml_f32_softmax__ref,
    .flops = softmax_flops,
    .work_size = softmax_work_size,
    .flags = GML_OPF_INPLACE,
    GML_ARGS(GML_T("x"), GML_OPT("mask", OPT_TENSOR, "none"), GML_OPT("scale", FLOAT, "1"),
             GML_OPT_ENUM("causal", "false", gml_causal_names),
             GML_OPT("valid_lens", OPT_TENSOR, "none"), GML_OPT("positions", OPT_TENSOR, "none"),
             GML_OPT("sinks", OPT_TENSOR, "none"), GML_OPT_Z("window", INT),
             GML_OPT_Z("softcap", FLOAT), GML_OPT_Z("alibi", FLOAT)),
    .build = build_softmax,
    .get_args = softmax_args,
    .doc_args = "x `[..., Tq, Tk]`; mask additive, broadcast to x (0 keep, -inf drop); "
                "causal, positions, sinks, window, softcap, alibi as flash_attn's, valid_lens "
                "too (those naming B or H need x `[B, H, Tq, Tk]`)",
    .doc_result = "softmax over the last dim of x*scale (capped) + mask (+ alibi, sink in the "
                  "denominator); causal: query i sees key j iff "
                  "j <= i + (Tk - Tq) (top_left: j <= i); a row with no key left is all 0",
};

/* ---- softmax_back -------------------------------------------------------------
 * The gradient of softmax with respect to x, from its output y, the output's
 * gradient dy and x (read for a softcap only):
 *     dx_j = scale y_j (dy_j - sum_k y_k dy_k) (1 - tanh^2(x_j scale / c) with a softcap)
 * The mask, ALiBi, causality, windows, valid lengths and positions are
 * additive or hide keys: a hidden key has y_j = 0 and gets 0; the mask gets
 * no gradient. A sink only enlarges the denominator: the formula stands (its
 * own gradient, -sum_rows (1 - sum_j y_j) sum_j y_j dy_j, is a composition,
 * docs/training.md). Per row in double, one rounding: one kernel, the
 * reference's arithmetic at every ISA. */
typedef struct softmax_back_params {
    float scale, softcap;
} softmax_back_params;
GML_PARAMS_FIT(softmax_back_params);

static void gml_f32_softmax_back(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *y = dst->src[0], *dy = dst->src[1], *x = dst->src[2];
    softmax_back_params par;
    gml_get_params(dst, &par, sizeof par);
    const int64_t tk = dst->ne[3];
    const int64_t sy = (int64_t)y->nb[3], sg = (int64_t)dy->nb[3];
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        const char *yr = gml_ptr(y, i0, i1, i2, 0), *gr = gml_ptr(dy, i0, i1, i2, 0);
        double dot = 0;
        for (int64_t j = 0; j < tk; j++) {
            const float yv = *(const float *)(const void *)(yr + j * sy);
            if (yv != 0) dot += (double)yv * *(const float *)(const void *)(gr + j * sg);
        }
        float *out = (float *)(void *)gml_ptr(dst, i0, i1, i2, 0);
        for (int64_t j = 0; j < tk; j++) {
            const double yv = *(const float *)(const void *)(yr + j * sy);
            if (yv == 0) { /* hidden or underflowed: nothing flows back */
                out[j] = 0.0f;
                continue;
            }
            double g = (double)par.scale * yv *
                       (*(const float *)(const void *)(gr + j * sg) - dot);
            if (par.softcap > 0) {
                const double t = tanh((double)*(const float *)(const void *)gml_ptr(x, i0, i1, i2, j) *
                                      par.scale / par.softcap);
                g *= 1 - t * t;
            }
            out[j] = (float)g;
        }
    }
}

/* y [.., Tq, Tk] (softmax's output), dy as y, x softmax's input (its
 * softcap's derivative), scale and softcap as softmax's -> dx as y */
gml_tensor *gml_softmax_back(gml_context *ctx, gml_tensor *y, gml_tensor *dy, gml_tensor *x,
                             float scale, float softcap) {
    GML_ENTER(ctx, 3, y, dy, x);
    gml_tensor *src[3] = {y, dy, x};
    char call[GML_CALL_MAX], sa[GML_SHAPE_MAX], sb[GML_SHAPE_MAX];
    gml_format_call("softmax_back", src, 3, call, sizeof call);
    for (int i = 0; i < 3; i++) {
        if (!gml_expect_type(ctx, "softmax_back", src[i], GML_F32)) return NULL;
        if (i > 0 && (src[i]->n_dims != y->n_dims ||
                      memcmp(src[i]->ne, y->ne, sizeof y->ne) != 0))
            return gml_fail(ctx, "%s: %s %s must have y's shape %s", call, src[i]->name,
                            GML_SHAPE(src[i], sa), GML_SHAPE(y, sb));
    }
    if (!isfinite(scale) || !isfinite(softcap) || softcap < 0)
        return gml_fail(ctx, "%s: scale %g and softcap %g must be finite (softcap >= 0)", call,
                        (double)scale, (double)softcap);
    gml_tensor *t = gml_new_op(ctx, GML_OP_SOFTMAX_BACK, GML_F32, y->n_dims,
                               y->ne + GML_MAX_DIMS - y->n_dims, src, 3);
    if (!t) return NULL;
    gml_set_params(t, &(softmax_back_params){scale, softcap}, sizeof(softmax_back_params));
    return t;
}

static gml_tensor *build_softmax_back(gml_context *ctx, const gml_arg *v) {
    return gml_softmax_back(ctx, v[0].t, v[1].t, v[2].t, v[3].given ? v[3].f : 1.0f,
                            v[4].given ? v[4].f : 0.0f);
}

static void softmax_back_args(const gml_tensor *t, gml_arg *v) {
    softmax_back_params par;
    gml_get_params(t, &par, sizeof par);
    gml_args_from_srcs(t, v);
    v[3].f = par.scale;
    v[4].f = par.softcap;
}

static double softmax_back_flops(const gml_tensor *dst) { return 4.0 * (double)gml_nelements(dst); }

const gml_op_def gml_opdef_softmax_back = {
    .forward = gml_f32_softmax_back,
    .reference = gml_f32_softmax_back,
    .flops = softmax_back_flops,
    GML_ARGS(GML_T("y"), GML_T("dy"), GML_T("x"), GML_OPT("scale", FLOAT, "1"),
             GML_OPT_Z("softcap", FLOAT)),
    .build = build_softmax_back,
    .get_args = softmax_back_args,
    .doc_args = "y softmax's output, dy its gradient, x softmax's input (all one shape); scale, "
                "softcap as softmax's",
    .doc_result = "dx: scale y (dy - sum(y dy)) over the last dim (times 1 - tanh^2 with a "
                  "softcap); masks and hidden keys get 0",
};
