/* Losses: cross_entropy (a fused log-softmax and NLL, mean over rows), its
 * backward cross_entropy_back, and mse_loss (mean squared error), whose
 * backward is built of binary ops.
 *
 *   cross_entropy(logits [..., V], targets i32 [...]) -> [1]
 *       mean over the N rows of logsumexp(row) - row[target]
 *   cross_entropy_back(logits [..., V], targets [...], dy [1]) -> [..., V]
 *       (softmax(row) - onehot(target)) * dy / N
 *   mse_loss(a [...], b [...]) -> [1]
 *       mean((a - b)^2)
 *
 * The reference kernels do each row's arithmetic in double (max, then the
 * sum of exp(x - max) in order), each output rounded once. cross_entropy's
 * fast kernels are made of existing micro-kernels, picked by the plan's ISA:
 * a row's max (reduce's rmax), x - max (binary's vsubc), exp (softmax's
 * vexp), their sum (reduce's rsum, in double), and for the backward the
 * scale (vmulc); rmax and rsum give the same bits on every ISA, vexp on
 * every vector ISA (the scalar one is libm's expf). mse_loss has one plain
 * kernel, its reference. A loss's row terms are summed after a barrier by
 * thread 0 in row-major order, so no result depends on how threads split
 * the rows. */
#include "internal.h"
#include "ops_back.h"
#include "reduce.h"
#include "ukernels.h"

#include <math.h>

/* ---- targets --------------------------------------------------------------- */

/* The target of row (i0, i1, i2) of logits: targets has logits' leading
 * shape, right-aligned one place further. */
static int32_t target_at(const gml_tensor *targets, int64_t i0, int64_t i1, int64_t i2) {
    int32_t t;
    memcpy(&t, gml_ptr(targets, 0, i0, i1, i2), sizeof t);
    return t;
}

/* The first target outside [0, V) in row-major order, reported for the
 * node (the same message at every thread count); false if there is one. */
static bool targets_ok(const gml_compute_params *p, const gml_tensor *dst, const char *op) {
    const gml_tensor *logits = dst->src[0], *targets = dst->src[1];
    const int64_t V = logits->ne[3], n = gml_nrows(logits);
    for (int64_t r = 0; r < n; r++) {
        int64_t i0, i1, i2;
        gml_row_index(logits, r, &i0, &i1, &i2);
        const int32_t t = target_at(targets, i0, i1, i2);
        if (t >= 0 && t < V) continue;
        char at[64], st[GML_SHAPE_MAX], sl[GML_SHAPE_MAX];
        const int64_t idx[3] = {i0, i1, i2};
        size_t k = (size_t)snprintf(at, sizeof at, "[");
        for (int d = 4 - targets->n_dims - 1; d < 3 && k < sizeof at; d++)
            k += (size_t)snprintf(at + k, sizeof at - k, "%s%" PRId64,
                                  d == 4 - targets->n_dims - 1 ? "" : ",", idx[d]);
        if (k < sizeof at) snprintf(at + k, sizeof at - k, "]");
        gml_kernel_fail(p, "%s(%s, %s): target %d at %s of targets %s is outside [0, V) for "
                        "V = %" PRId64 " (logits %s)", op, logits->name, targets->name, (int)t, at,
                        GML_SHAPE(targets, st), V, GML_SHAPE(logits, sl));
        return false;
    }
    return true;
}

/* A row's max and sum of exp(x - max), in double, in order; lse = max +
 * log(sum). A row holding NaN gives NaN. */
static void row_stats(const char *xr, int64_t n, int64_t sx, double *max, double *sum) {
    double m = -INFINITY;
    bool nan = false;
    for (int64_t j = 0; j < n; j++) {
        const double v = *(const float *)(const void *)(xr + j * sx);
        nan |= v != v;
        m = v > m ? v : m;
    }
    if (nan) m = NAN;
    double s = 0;
    for (int64_t j = 0; j < n; j++) s += exp(*(const float *)(const void *)(xr + j * sx) - m);
    *max = m;
    *sum = s;
}

/* Row r of logits for the reference kernels: its indices, its start x, its
 * target t, and row_stats' max m and sum s. */
typedef struct ce_ref_row {
    int64_t i0, i1, i2;
    const char *x;
    int32_t t;
    double m, s;
} ce_ref_row;

static ce_ref_row ce_ref_row_at(const gml_tensor *logits, const gml_tensor *targets, int64_t r) {
    ce_ref_row w;
    gml_row_index(logits, r, &w.i0, &w.i1, &w.i2);
    w.x = gml_ptr(logits, w.i0, w.i1, w.i2, 0);
    w.t = target_at(targets, w.i0, w.i1, w.i2);
    row_stats(w.x, logits->ne[3], (int64_t)logits->nb[3], &w.m, &w.s);
    return w;
}

/* ---- the fast kernels' row --------------------------------------------------------- */

typedef struct ce_ukernels {
    gml_f32_rmax_ukernel *rmax;
    gml_f32_rsum_ukernel *rsum;
    gml_f32_vbinary_ukernel *vsubc, *vmulc;
    gml_f32_vexp_ukernel *vexp;
} ce_ukernels;

static ce_ukernels ce_pick(const gml_compute_params *p) {
    gml_kernel_note(p, GML_PICK_UKERNEL_NAME(p->isa, GML_F32_VEXP_UKERNELS));
    return (ce_ukernels){
        GML_PICK_UKERNEL(p->isa, GML_F32_RMAX_UKERNELS, gml_f32_rmax_ukernel),
        GML_PICK_UKERNEL(p->isa, GML_F32_RSUM_UKERNELS, gml_f32_rsum_ukernel),
        GML_PICK_UKERNEL(p->isa, GML_F32_VSUBC_UKERNELS, gml_f32_vbinary_ukernel),
        GML_PICK_UKERNEL(p->isa, GML_F32_VMULC_UKERNELS, gml_f32_vbinary_ukernel),
        GML_PICK_UKERNEL(p->isa, GML_F32_VEXP_UKERNELS, gml_f32_vexp_ukernel),
    };
}

/* A row of logits as a contiguous run: the row itself, or gathered into buf. */
static const float *ce_row(const gml_tensor *logits, int64_t i0, int64_t i1, int64_t i2,
                           float *buf) {
    const char *xr = gml_ptr(logits, i0, i1, i2, 0);
    const int64_t V = logits->ne[3], sx = (int64_t)logits->nb[3];
    if (sx == (int64_t)sizeof(float) || V == 1) return (const float *)(const void *)xr;
    for (int64_t j = 0; j < V; j++) memcpy(&buf[j], xr + j * sx, sizeof(float));
    return buf;
}

/* e[j] = exp(x[j] - max) for a row x of n, its max into *m; returns the sum
 * of e in double (reduce.h's order); NaN when max is not finite (a NaN, an
 * inf, or every element -inf: the reference's NaN too). */
static double ce_exps(const ce_ukernels *u, size_t n, const float *x, float *e, float *m) {
    *m = u->rmax(n, x);
    if (!isfinite(*m)) return NAN;
    u->vsubc(n, x, m, e);
    u->vexp(n, e, e);
    return u->rsum(n, e);
}

/* The scratch of a row per thread, aligned. */
static size_t ce_row_bytes(const gml_tensor *dst) {
    return gml_align_up((size_t)dst->src[0]->ne[3] * sizeof(float), GML_ALIGN);
}

/* ---- cross_entropy ------------------------------------------------------------- */

static size_t rows_work_size(const gml_tensor *dst, int nth) {
    GML_UNUSED(nth);
    return (size_t)gml_nrows(dst->src[0]) * sizeof(double);
}

/* the row terms, then a row of scratch per thread */
static size_t ce_work_size(const gml_tensor *dst, int nth) {
    return gml_align_up(rows_work_size(dst, nth), GML_ALIGN) + (size_t)nth * ce_row_bytes(dst);
}

/* After every thread's row terms: thread 0 checks the targets and writes
 * the mean of the N terms, summed in row order. */
static void ce_mean(const gml_compute_params *p, gml_tensor *dst, const double *term, int64_t N) {
    gml_barrier(p);
    if (p->ith != 0 || !targets_ok(p, dst, "cross_entropy")) return;
    double sum = 0;
    for (int64_t r = 0; r < N; r++) sum += term[r];
    *(float *)dst->data = (float)(sum / (double)N);
}

/* Each thread its rows' terms into the scratch; after a barrier thread 0
 * checks the targets and sums the terms in row order. */
static void gml_f32_cross_entropy__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *logits = dst->src[0], *targets = dst->src[1];
    const int64_t V = logits->ne[3], sx = (int64_t)logits->nb[3], N = gml_nrows(logits);
    double *term = p->wdata;
    int64_t r0, r1;
    gml_split(N, p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const ce_ref_row w = ce_ref_row_at(logits, targets, r);
        term[r] = w.t >= 0 && w.t < V
                      ? w.m + log(w.s) - *(const float *)(const void *)(w.x + w.t * sx)
                      : NAN;
    }
    ce_mean(p, dst, term, N);
}

/* The same from the micro-kernels: each row's max, exp(x - max) in f32, their
 * sum in double; the term m + log(sum) - x[t] in double. */
static void gml_f32_cross_entropy(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *logits = dst->src[0], *targets = dst->src[1];
    const int64_t V = logits->ne[3], N = gml_nrows(logits);
    const ce_ukernels u = ce_pick(p);
    double *term = p->wdata;
    float *buf = (float *)(void *)((char *)p->wdata + gml_align_up(rows_work_size(dst, p->nth), GML_ALIGN) +
                                   (size_t)p->ith * ce_row_bytes(dst));
    int64_t r0, r1;
    gml_split(N, p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(logits, r, &i0, &i1, &i2);
        const float *x = ce_row(logits, i0, i1, i2, buf);
        const int32_t t = target_at(targets, i0, i1, i2);
        const float xt = t >= 0 && t < V ? x[t] : NAN; /* before buf holds the exps */
        float m;
        const double s = ce_exps(&u, (size_t)V, x, buf, &m);
        term[r] = (double)m + log(s) - xt;
    }
    ce_mean(p, dst, term, N);
}

/* The shapes cross_entropy and its backward take; NULL, or the message. */
static bool check_ce(gml_context *ctx, const char *op, gml_tensor *logits, gml_tensor *targets) {
    if (!gml_expect_type(ctx, op, logits, GML_F32) || !gml_expect_type(ctx, op, targets, GML_I32))
        return false;
    char sl[GML_SHAPE_MAX], st[GML_SHAPE_MAX];
    bool ok = logits->n_dims >= 2 && targets->n_dims == logits->n_dims - 1;
    for (int k = 0; ok && k < 3; k++) ok = targets->ne[k + 1] == logits->ne[k];
    if (!ok) {
        gml_fail(ctx, "%s(%s, %s): want logits [..., V] (2-D to 4-D) and targets of its leading "
                 "shape [...]; got logits %s, targets %s", op, logits->name, targets->name,
                 GML_SHAPE(logits, sl), GML_SHAPE(targets, st));
        return false;
    }
    return true;
}

/* logits [..., V] f32, targets [...] i32 -> [1] */
gml_tensor *gml_cross_entropy(gml_context *ctx, gml_tensor *logits, gml_tensor *targets) {
    GML_ENTER(ctx, 2, logits, targets);
    if (!check_ce(ctx, "cross_entropy", logits, targets)) return NULL;
    return gml_new_op(ctx, GML_OP_CROSS_ENTROPY, GML_F32, 1, (int64_t[]){1},
                      (gml_tensor *[]){logits, targets}, 2);
}

static gml_tensor *build_cross_entropy(gml_context *ctx, const gml_arg *v) {
    return gml_cross_entropy(ctx, v[0].t, v[1].t);
}

static double ce_flops(const gml_tensor *dst) { return 3.0 * (double)gml_nelements(dst->src[0]); }

/* d logits = cross_entropy_back(logits, targets, dy); none to targets */
static bool cross_entropy_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    gml_tensor *logits = node->src[0], *targets = node->src[1];
    if (!gml_backward_needs(b, logits)) return true;
    return gml_backward_add(b, logits,
                            gml_cross_entropy_back(gml_backward_context(b), logits, targets, dy));
}

const gml_op_def gml_opdef_cross_entropy = {
    .forward = gml_f32_cross_entropy,
    .reference = gml_f32_cross_entropy__ref,
    .work_size = ce_work_size,
    .flops = ce_flops,
    GML_ARGS(GML_T("logits"), GML_T("targets")),
    .build = build_cross_entropy,
    .get_args = gml_args_from_srcs,
    .doc_args = "logits `[..., V]`, targets i32 `[...]`",
    .doc_result = "`[1]`: the mean over rows of logsumexp(row) - row[target] "
                  "(torch.nn.functional.cross_entropy); a target outside [0, V) fails compute",
    .backward = cross_entropy_backward,
};

/* ---- cross_entropy_back ------------------------------------------------------------
 * dx [..., V] = (exp(x - lse) - onehot(t)) * dy / N per element, in double,
 * rounded once; rows split across threads. Every thread checks every target
 * first, so a bad one writes nothing. */
static void gml_f32_cross_entropy_back__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *logits = dst->src[0], *targets = dst->src[1], *dy = dst->src[2];
    if (!targets_ok(p, dst, "cross_entropy_back")) return;
    const int64_t V = logits->ne[3], sx = (int64_t)logits->nb[3], N = gml_nrows(logits);
    const double g = (double)*(const float *)dy->data / (double)N;
    int64_t r0, r1;
    gml_split(N, p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const ce_ref_row w = ce_ref_row_at(logits, targets, r);
        const double inv = 1.0 / w.s;
        float *out = (float *)gml_ptr(dst, w.i0, w.i1, w.i2, 0);
        for (int64_t j = 0; j < V; j++) {
            const double pj = exp(*(const float *)(const void *)(w.x + j * sx) - w.m) * inv;
            out[j] = (float)((pj - (j == w.t ? 1.0 : 0.0)) * g);
        }
    }
}

/* The same from the micro-kernels: exp(x - max) into the output row, their
 * sum s, the row scaled by dy / (N s) in f32; the target's element in
 * double from the same s, as the reference (no cancellation in p - 1). */
static void gml_f32_cross_entropy_back(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *logits = dst->src[0], *targets = dst->src[1], *dy = dst->src[2];
    const ce_ukernels u = ce_pick(p);
    if (!targets_ok(p, dst, "cross_entropy_back")) return;
    const int64_t V = logits->ne[3], N = gml_nrows(logits);
    const double g = (double)*(const float *)dy->data / (double)N;
    /* no scratch (wdata NULL) when the rows are contiguous: ce_row reads them in place */
    float *buf = p->wdata ? (float *)(void *)((char *)p->wdata + (size_t)p->ith * ce_row_bytes(dst)) : NULL;
    int64_t r0, r1;
    gml_split(N, p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(logits, r, &i0, &i1, &i2);
        const float *x = ce_row(logits, i0, i1, i2, buf);
        const int32_t t = target_at(targets, i0, i1, i2);
        float *out = (float *)gml_ptr(dst, i0, i1, i2, 0);
        float m;
        const double s = ce_exps(&u, (size_t)V, x, out, &m);
        if (s != s) {
            for (int64_t j = 0; j < V; j++) out[j] = NAN;
            continue;
        }
        const float c = (float)(g / s);
        u.vmulc((size_t)V, out, &c, out);
        out[t] = (float)((exp((double)x[t] - m) / s - 1.0) * g);
    }
}

/* gathered rows: a row of scratch per thread */
static size_t ce_back_work_size(const gml_tensor *dst, int nth) {
    const gml_tensor *x = dst->src[0];
    return x->ne[3] > 1 && x->nb[3] != sizeof(float) ? (size_t)nth * ce_row_bytes(dst) : 0;
}

/* logits [..., V], targets [...], dy [1] -> [..., V] */
gml_tensor *gml_cross_entropy_back(gml_context *ctx, gml_tensor *logits, gml_tensor *targets,
                                   gml_tensor *dy) {
    GML_ENTER(ctx, 3, logits, targets, dy);
    if (!check_ce(ctx, "cross_entropy_back", logits, targets) ||
        !gml_expect_type(ctx, "cross_entropy_back", dy, GML_F32))
        return NULL;
    if (gml_nelements(dy) != 1) {
        char sd[GML_SHAPE_MAX];
        return gml_fail(ctx, "cross_entropy_back(%s, %s, %s): dy must have one element (the "
                        "loss's gradient), got %s", logits->name, targets->name, dy->name,
                        GML_SHAPE(dy, sd));
    }
    return gml_new_op(ctx, GML_OP_CROSS_ENTROPY_BACK, GML_F32, logits->n_dims,
                      logits->ne + GML_MAX_DIMS - logits->n_dims,
                      (gml_tensor *[]){logits, targets, dy}, 3);
}

static gml_tensor *build_cross_entropy_back(gml_context *ctx, const gml_arg *v) {
    return gml_cross_entropy_back(ctx, v[0].t, v[1].t, v[2].t);
}

const gml_op_def gml_opdef_cross_entropy_back = {
    .forward = gml_f32_cross_entropy_back,
    .reference = gml_f32_cross_entropy_back__ref,
    .work_size = ce_back_work_size,
    .flops = ce_flops,
    GML_ARGS(GML_T("logits"), GML_T("targets"), GML_T("dy")),
    .build = build_cross_entropy_back,
    .get_args = gml_args_from_srcs,
    .doc_args = "logits `[..., V]`, targets i32 `[...]`, dy `[1]`",
    .doc_result = "`[..., V]`: (softmax(row) - onehot(target)) * dy / N, the gradient of "
                  "cross_entropy; a target outside [0, V) fails compute",
};

/* ---- mse_loss -------------------------------------------------------------------
 * Units of up to MSE_BLOCK elements of one row: each unit's sum of squares
 * in double into the scratch, then thread 0 adds the units in order. */
#define MSE_BLOCK 4096

static int64_t mse_units(const gml_tensor *a, int64_t *blocks) {
    *blocks = (a->ne[3] + MSE_BLOCK - 1) / MSE_BLOCK;
    return gml_nrows(a) * *blocks;
}

static size_t mse_work_size(const gml_tensor *dst, int nth) {
    GML_UNUSED(nth);
    int64_t blocks;
    return (size_t)mse_units(dst->src[0], &blocks) * sizeof(double);
}

static void gml_f32_mse_loss__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *a = dst->src[0], *b = dst->src[1];
    const int64_t n = a->ne[3], sa = (int64_t)a->nb[3], sb = (int64_t)b->nb[3];
    int64_t blocks;
    const int64_t units = mse_units(a, &blocks);
    double *part = p->wdata;
    int64_t u0, u1;
    gml_split(units, p->ith, p->nth, &u0, &u1);
    for (int64_t u = u0; u < u1; u++) {
        int64_t i0, i1, i2;
        gml_row_index(a, u / blocks, &i0, &i1, &i2);
        const int64_t j0 = u % blocks * MSE_BLOCK, j1 = GML_MIN(n, j0 + MSE_BLOCK);
        const char *ar = gml_ptr(a, i0, i1, i2, 0), *br = gml_ptr(b, i0, i1, i2, 0);
        double s = 0;
        for (int64_t j = j0; j < j1; j++) {
            const double d = (double)*(const float *)(const void *)(ar + j * sa) -
                             (double)*(const float *)(const void *)(br + j * sb);
            s += d * d;
        }
        part[u] = s;
    }
    gml_barrier(p);
    if (p->ith != 0) return;
    double sum = 0;
    for (int64_t u = 0; u < units; u++) sum += part[u];
    *(float *)dst->data = (float)(sum / (double)gml_nelements(a));
}

/* a [...], b [...] f32, one shape -> [1] */
gml_tensor *gml_mse_loss(gml_context *ctx, gml_tensor *a, gml_tensor *b) {
    GML_ENTER(ctx, 2, a, b);
    if (!gml_expect_type(ctx, "mse_loss", a, GML_F32) || !gml_expect_type(ctx, "mse_loss", b, GML_F32))
        return NULL;
    if (!gml_same_shape(a, b)) {
        char sa[GML_SHAPE_MAX], sb[GML_SHAPE_MAX];
        return gml_fail(ctx, "mse_loss(%s, %s): a and b must have one shape, got %s and %s",
                        a->name, b->name, GML_SHAPE(a, sa), GML_SHAPE(b, sb));
    }
    return gml_new_op(ctx, GML_OP_MSE_LOSS, GML_F32, 1, (int64_t[]){1}, (gml_tensor *[]){a, b}, 2);
}

static gml_tensor *build_mse_loss(gml_context *ctx, const gml_arg *v) {
    return gml_mse_loss(ctx, v[0].t, v[1].t);
}

static double mse_flops(const gml_tensor *dst) { return 3.0 * (double)gml_nelements(dst->src[0]); }

/* da = (a - b) * (dy * 2/n), db = -da */
static bool mse_loss_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    gml_context *ctx = gml_backward_context(b);
    gml_tensor *x = node->src[0], *y = node->src[1];
    const bool nx = gml_backward_needs(b, x), ny = gml_backward_needs(b, y);
    if (!nx && !ny) return true;
    const double n = (double)gml_nelements(x);
    gml_tensor *da = gml_mul(ctx, gml_sub(ctx, x, y), gml_scale(ctx, dy, (float)(2.0 / n)));
    if (nx && !gml_backward_add(b, x, da)) return false;
    return !ny || gml_backward_add(b, y, gml_neg(ctx, da));
}

const gml_op_def gml_opdef_mse_loss = {
    .forward = gml_f32_mse_loss__ref,
    .reference = gml_f32_mse_loss__ref,
    .work_size = mse_work_size,
    .flops = mse_flops,
    GML_ARGS(GML_T("a"), GML_T("b")),
    .build = build_mse_loss,
    .get_args = gml_args_from_srcs,
    .doc_args = "a `[...]`, b of a's shape",
    .doc_result = "`[1]`: mean((a - b)^2) (torch.nn.functional.mse_loss)",
    .backward = mse_loss_backward,
};
