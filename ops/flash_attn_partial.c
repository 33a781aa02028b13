/* The partial attention ops: flash_attn_partial (its forward kernel is the
 * decoding path, ops/flash_attn_dec.c; its reference ops/flash_attn_ref.c),
 * attn_partial_merge and attn_partial_finish (forward, reference, builder
 * each). */
#include "flash_attn.h"

#include <math.h>

/* ---- partial attention, its merge and its end --------------------------------
 * flash_attn_partial: flash_attn over the keys given, K and V being keys key0
 * .. key0 + Tk - 1 of the whole, stopped before the normalisation: per query
 * row [o (d_v values, unnormalized), m, l] (ops/ukernels.h, decoding: the
 * decode path's chunks do the same). attn_partial_merge joins two partials of the
 * same rows (log-sum-exp, gml_flash_partial_merge); attn_partial_finish divides
 * (gml_flash_partial_finish, the sink joining there once). Any split of the
 * keys, merged in key order, gives flash_attn within rounding. */

static void gml_f32_flash_partial(const gml_compute_params *p, gml_tensor *dst) {
    const char *refusal = fast_refusal(dst);
    if (refusal) {
        gml_kernel_note(p, refusal);
        gml_f32_flash_partial__ref(p, dst);
        return;
    }
    if (!gml_attn_lens_ok(p, "flash_attn_partial", dst->src[SRC_LENS], INT32_MAX)) return;
    gml_flash_dec_forward(p, dst);
}

static size_t flash_partial_work_size(const gml_tensor *dst, int nth) {
    return GML_MAX((size_t)nth * ref_work_doubles(dst) * sizeof(double),
                   (size_t)nth * gml_flash_dec_thread_bytes(dst) + gml_flash_dec_shared_bytes(dst));
}

/* q [B, H, Tq, d_k], k [B, G, Tk, d_k], v [B, G, Tk, d_v] (keys key0 .. key0 + Tk - 1)
 * -> [B, H, Tq, d_v + 2] contiguous: o, m, l per row */
gml_tensor *gml_flash_attn_partial(gml_context *ctx, gml_tensor *q, gml_tensor *k, gml_tensor *v,
                                   float scale, const gml_attn_opts *opts, int64_t key0) {
    GML_ENTER(ctx, 3, q, k, v);
    GML_ENTER_OPTS(ctx, opts);
    const gml_attn_opts none = {0};
    const gml_attn_opts *o = opts ? opts : &none;
    if (!gml_flash_check(ctx, "flash_attn_partial", q, k, v, scale, o)) return NULL;
    if (key0 < 0 || key0 > INT32_MAX - k->ne[2])
        return gml_fail(ctx, "flash_attn_partial(%s, %s, %s): first key %" PRId64 " must be in "
                        "[0, 2^31 - 1 - Tk] (Tk = %" PRId64 ")", q->name, k->name, v->name, key0,
                        k->ne[2]);
    if (o->sinks)
        return gml_fail(ctx, "flash_attn_partial(%s, %s): sinks join the sum once: give them to "
                        "attn_partial_finish", q->name, o->sinks->name);
    const bool needs_pos = o->causal == GML_CAUSAL_BOTTOM_RIGHT || o->window > 0 ||
                           (o->alibi_max_bias > 0 && o->causal != GML_CAUSAL_TOP_LEFT);
    if (needs_pos && !o->positions)
        return gml_fail(ctx, "flash_attn_partial(%s, %s, %s): %s needs positions (each query's "
                        "absolute position; the keys are %" PRId64 " .. %" PRId64 " of a whole "
                        "the op does not see), or causal top_left", q->name, k->name, v->name,
                        o->causal == GML_CAUSAL_BOTTOM_RIGHT ? "bottom-right causal"
                        : o->window > 0                      ? "a window"
                                                             : "alibi",
                        key0, key0 + k->ne[2] - 1);
    const int n = q->n_dims;
    int64_t ne[GML_MAX_DIMS] = {q->ne[0], q->ne[1], q->ne[2], v->ne[3] + 2};
    gml_tensor *t = gml_new_op(ctx, GML_OP_FLASH_ATTN_PARTIAL, GML_F32, n, ne + GML_MAX_DIMS - n,
                               (gml_tensor *[]){q, k, v, o->mask, o->valid_lens, o->positions, NULL},
                               7);
    if (!t) return NULL;
    const gml_partial_params pp = {{scale, (int32_t)o->causal, o->window, o->softcap,
                                    o->alibi_max_bias}, key0};
    gml_set_params(t, &pp, sizeof pp);
    return t;
}

static gml_tensor *build_flash_partial(gml_context *ctx, const gml_arg *v) {
    const float scale = v[5].given ? v[5].f : (float)(1.0 / sqrt((double)v[0].t->ne[3]));
#define GIVEN(a, field) (v[a].given ? v[a].field : 0)
    const gml_attn_opts o = {.mask = GIVEN(3, t), .valid_lens = GIVEN(4, t),
                             .causal = (gml_causal)GIVEN(6, i), .positions = GIVEN(7, t),
                             .window = GIVEN(8, i), .softcap = GIVEN(9, f),
                             .alibi_max_bias = GIVEN(10, f)};
#undef GIVEN
    return gml_flash_attn_partial(ctx, v[0].t, v[1].t, v[2].t, scale, &o, v[11].given ? v[11].i : 0);
}

static void flash_partial_args(const gml_tensor *t, gml_arg *v) {
    const gml_attn_params p = params_of(t);
    for (int i = 0; i < 5; i++) v[i].t = t->src[i];
    v[5].f = p.scale;
    v[6].i = p.causal;
    v[7].t = t->src[SRC_POS];
    v[8].i = p.window;
    v[9].f = p.softcap;
    v[10].f = p.alibi;
    v[11].i = key0_of(t);
}

/* 2 Tk (d_k + d_v) + 5 Tk per row, as flash_attn. */
static double flash_partial_flops(const gml_tensor *dst) {
    const gml_tensor *q = dst->src[0], *k = dst->src[1];
    return (double)gml_nrows(dst) * (double)k->ne[2] *
           (2.0 * (double)(q->ne[3] + dst->src[2]->ne[3]) + 5.0);
}

const gml_op_def gml_opdef_flash_attn_partial = {
    .forward = gml_f32_flash_partial,
    .reference = gml_f32_flash_partial__ref,
    .work_size = flash_partial_work_size,
    .flops = flash_partial_flops,
    .flags = GML_OPF_INF_OK, /* m is -inf where a row sees no key */
    GML_ARGS(GML_T("q"), GML_T("k"), GML_T("v"), GML_OPT("mask", OPT_TENSOR, "none"),
             GML_OPT("valid_lens", OPT_TENSOR, "none"), GML_OPT("scale", FLOAT, "1/sqrt(d_k)"),
             GML_OPT_ENUM("causal", "false", gml_causal_names),
             GML_OPT("positions", OPT_TENSOR, "none"), GML_OPT_Z("window", INT),
             GML_OPT_Z("softcap", FLOAT), GML_OPT_Z("alibi", FLOAT), GML_OPT_Z("key0", INT)),
    .build = build_flash_partial,
    .get_args = flash_partial_args,
    .doc_args = "as flash_attn (no sinks: attn_partial_finish takes them), k and v being keys key0 .. "
                "key0 + Tk - 1 of the whole: the mask covers these keys, valid_lens and positions "
                "are absolute; bottom_right causal, a window or alibi need positions",
    .doc_result = "`[B, H, Tq, d_v + 2]` contiguous: per row o (d_v values, unnormalized), its "
                  "max m and sum l (no key seen: 0, -inf, 0; a NaN row: l NaN); attn_partial_merge joins "
                  "such partials, attn_partial_finish divides",
};

/* ---- attn_partial_merge ------------------------------------------------------------ */

static void gml_f32_attn_merge(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *a = dst->src[0], *b = dst->src[1];
    const int64_t n = dst->ne[3], dv = n - 2;
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        const char *ra = gml_ptr(a, i0, i1, i2, 0), *rb = gml_ptr(b, i0, i1, i2, 0);
        float *out = (float *)(void *)gml_ptr(dst, i0, i1, i2, 0); /* contiguous */
        for (int64_t c = 0; c < n; c++) out[c] = *(const float *)(const void *)(ra + c * (int64_t)a->nb[3]);
        const int64_t sb = (int64_t)b->nb[3]; /* b's row read at its stride */
        const float *bo = (const float *)(const void *)rb;
        gml_flash_partial_merge((size_t)dv, out, 1, &out[dv], &out[dv + 1], bo, (size_t)sb / 4,
                                *(const float *)(const void *)(rb + dv * sb),
                                *(const float *)(const void *)(rb + (dv + 1) * sb));
    }
}

/* In double: the same rules (an empty side leaves the other as it is). */
static void gml_f32_attn_merge__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *a = dst->src[0], *b = dst->src[1];
    const int64_t n = dst->ne[3], dv = n - 2;
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
#define A(c) ((double)*(const float *)(const void *)(gml_ptr(a, i0, i1, i2, 0) + (c) * (int64_t)a->nb[3]))
#define BB(c) ((double)*(const float *)(const void *)(gml_ptr(b, i0, i1, i2, 0) + (c) * (int64_t)b->nb[3]))
        float *out = (float *)(void *)gml_ptr(dst, i0, i1, i2, 0);
        const double ma = A(dv), la = A(dv + 1), mb = BB(dv), lb = BB(dv + 1);
        if (lb == 0 || la == 0) {
            for (int64_t c = 0; c < n; c++) out[c] = (float)(lb == 0 ? A(c) : BB(c));
            continue;
        }
        const double m = mb > ma ? mb : ma, fa = exp(ma - m), fb = exp(mb - m);
        for (int64_t c = 0; c < dv; c++) out[c] = (float)(A(c) * fa + BB(c) * fb);
        out[dv] = (float)m;
        out[dv + 1] = (float)(la * fa + lb * fb);
#undef A
#undef BB
    }
}

/* a, b [..., d_v + 2] partials of the same rows (b's keys after a's) -> [..., d_v + 2] */
gml_tensor *gml_attn_partial_merge(gml_context *ctx, gml_tensor *a, gml_tensor *b) {
    GML_ENTER(ctx, 2, a, b);
    char sa[GML_SHAPE_MAX], sb[GML_SHAPE_MAX];
    if (!gml_expect_type(ctx, "attn_partial_merge", a, GML_F32) || !gml_expect_type(ctx, "attn_partial_merge", b, GML_F32))
        return NULL;
    bool same = a->n_dims == b->n_dims;
    for (int d = 0; d < GML_MAX_DIMS; d++) same &= a->ne[d] == b->ne[d];
    if (!same || a->ne[3] < 3)
        return gml_fail(ctx, "attn_partial_merge(%s, %s): want two partials of one shape [..., d_v + 2] "
                        "(d_v >= 1; flash_attn_partial's), got %s and %s", a->name, b->name,
                        GML_SHAPE(a, sa), GML_SHAPE(b, sb));
    const int n = a->n_dims;
    return gml_new_op(ctx, GML_OP_ATTN_PARTIAL_MERGE, GML_F32, n, a->ne + GML_MAX_DIMS - n,
                      (gml_tensor *[]){a, b}, 2);
}

static gml_tensor *build_attn_merge(gml_context *ctx, const gml_arg *v) {
    return gml_attn_partial_merge(ctx, v[0].t, v[1].t);
}
static void attn_merge_args(const gml_tensor *t, gml_arg *v) {
    v[0].t = t->src[0];
    v[1].t = t->src[1];
}

const gml_op_def gml_opdef_attn_partial_merge = {
    .forward = gml_f32_attn_merge,
    .reference = gml_f32_attn_merge__ref,
    .flags = GML_OPF_INF_OK,
    GML_ARGS(GML_T("a"), GML_T("b")),
    .build = build_attn_merge,
    .get_args = attn_merge_args,
    .doc_args = "a, b: partials `[..., d_v + 2]` of the same rows (flash_attn_partial's), b's keys "
                "after a's",
    .doc_result = "`[..., d_v + 2]`: the partial over both key sets (log-sum-exp merge: m = "
                  "max(ma, mb), o = oa e^(ma - m) + ob e^(mb - m), l likewise; an empty side (l "
                  "= 0) leaves the other bit for bit)",
};

/* ---- attn_partial_finish ----------------------------------------------------------- */

static void gml_f32_attn_finish(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *pa = dst->src[0], *sk = dst->src[1];
    const int64_t dv = dst->ne[3];
    const int64_t sp = (int64_t)pa->nb[3];
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        const char *row = gml_ptr(pa, i0, i1, i2, 0);
        const float *sink = sk ? (const float *)(const void *)gml_ptr(sk, 0, 0, 0, i1) : NULL;
        gml_flash_partial_finish((size_t)dv, (const float *)(const void *)row, (size_t)sp / 4,
                                 *(const float *)(const void *)(row + dv * sp),
                                 *(const float *)(const void *)(row + (dv + 1) * sp), sink,
                                 (float *)(void *)gml_ptr(dst, i0, i1, i2, 0), 1);
    }
}

/* In double: o / l, the sink folded in (flash_attn's reference rules). */
static void gml_f32_attn_finish__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *pa = dst->src[0], *sk = dst->src[1];
    const int64_t dv = dst->ne[3], sp = (int64_t)pa->nb[3];
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dst, r, &i0, &i1, &i2);
        const char *row = gml_ptr(pa, i0, i1, i2, 0);
#define P(c) ((double)*(const float *)(const void *)(row + (c) * sp))
        float *out = (float *)(void *)gml_ptr(dst, i0, i1, i2, 0);
        double l = P(dv + 1), f = 1;
        const double m = P(dv);
        bool nan = isnan(l);
        if (l != 0 && !nan && sk) {
            const double s = *(const float *)(const void *)gml_ptr(sk, 0, 0, 0, i1);
            if (isnan(s) || s == INFINITY) nan = true;
            else if (s > m) f = exp(m - s), l = l * f + 1;
            else l += exp(s - m);
        }
        for (int64_t c = 0; c < dv && !nan; c++) nan = !isfinite((float)(P(c) * f / l));
        for (int64_t c = 0; c < dv; c++) out[c] = l == 0 ? 0.0f : nan ? NAN : (float)(P(c) * f / l);
#undef P
    }
}

/* p [B, H, Tq, d_v + 2] (or any [..., d_v + 2] without sinks), sinks f32 [H] or NULL
 * -> [..., d_v] contiguous */
gml_tensor *gml_attn_partial_finish(gml_context *ctx, gml_tensor *p, gml_tensor *sinks) {
    GML_ENTER(ctx, 1, p, sinks);
    char sp[GML_SHAPE_MAX], ss[GML_SHAPE_MAX];
    if (!gml_expect_type(ctx, "attn_partial_finish", p, GML_F32)) return NULL;
    if (p->ne[3] < 3)
        return gml_fail(ctx, "attn_partial_finish(%s): want a partial [..., d_v + 2] (d_v >= 1), got %s",
                        p->name, GML_SHAPE(p, sp));
    if (sinks && !(p->n_dims == 4 && sinks->type == GML_F32 && sinks->n_dims == 1 &&
                   sinks->ne[3] == p->ne[1]))
        return gml_fail(ctx, "attn_partial_finish(%s, %s): sinks must be f32 [H] for a partial [B, H, Tq, "
                        "d_v + 2], got %s %s and %s", p->name, sinks->name,
                        gml_type_name(sinks->type), GML_SHAPE(sinks, ss), GML_SHAPE(p, sp));
    const int n = p->n_dims;
    int64_t ne[GML_MAX_DIMS] = {p->ne[0], p->ne[1], p->ne[2], p->ne[3] - 2};
    return gml_new_op(ctx, GML_OP_ATTN_PARTIAL_FINISH, GML_F32, n, ne + GML_MAX_DIMS - n,
                      (gml_tensor *[]){p, sinks}, 2);
}

static gml_tensor *build_attn_finish(gml_context *ctx, const gml_arg *v) {
    return gml_attn_partial_finish(ctx, v[0].t, v[1].given ? v[1].t : NULL);
}
static void attn_finish_args(const gml_tensor *t, gml_arg *v) {
    v[0].t = t->src[0];
    v[1].t = t->src[1];
}

const gml_op_def gml_opdef_attn_partial_finish = {
    .forward = gml_f32_attn_finish,
    .reference = gml_f32_attn_finish__ref,
    GML_ARGS(GML_T("p"), GML_OPT("sinks", OPT_TENSOR, "none")),
    .build = build_attn_finish,
    .get_args = attn_finish_args,
    .doc_args = "p: a partial `[B, H, Tq, d_v + 2]` (flash_attn_partial's, attn_merge's); sinks "
                "f32 `[H]` (joins the sum once, here)",
    .doc_result = "`[..., d_v]` contiguous: o / l with the sink folded in as flash_attn folds it; "
                  "zeros where no key was seen, the row NaN where l is NaN or an output is not "
                  "finite",
};
