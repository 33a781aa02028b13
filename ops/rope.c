/* Rotary position embeddings (RoPE, Su et al. 2021) on the heads of q or k:
 * rotate-half pairs (GPT-NeoX, Hugging Face LLaMA/Mistral/Qwen) or
 * interleaved pairs (GPT-J, Meta's LLaMA), partial rotary dims, a base theta
 * and linear position scaling. Positions are data (an i32 tensor), so a
 * decode step's graph is reused with new positions. */
#include "ukernels.h"
#include "ops_back.h"

#include <math.h>

typedef struct rope_params {
    int32_t seq_dim;     /* -2: x [B, H, T, d]; -3: x [B, T, H, d] */
    int32_t rotary_dim;  /* r, even, in [2, d] */
    float theta;         /* base */
    float pos_scale;     /* linear scaling: positions divided by it */
    int32_t interleaved; /* 0: pairs (i, i + r/2); 1: pairs (2i, 2i + 1) */
} rope_params;
GML_PARAMS_FIT(rope_params);

static rope_params params_of(const gml_tensor *t) {
    rope_params p;
    gml_get_params(t, &p, sizeof p);
    return p;
}

/* inv_freq_i = 1 / theta^(2i / r), in float as Hugging Face computes it:
 * 1.0 / (base ** (torch.arange(0, r, 2).float() / r)). */
static inline float rope_inv_freq(float theta, int64_t i, int64_t r) {
    const float e = (float)(2 * i) / (float)r;
    return 1.0f / powf(theta, e);
}

/* The angle of a position for frequency inv, in float: (pos / pos_scale) *
 * inv_freq, two roundings (HF's linear scaling, t / factor, then the outer
 * product; with pos_scale 1 the division is exact). */
static inline float rope_angle(int32_t pos, float pos_scale, float inv) {
    return ((float)pos / pos_scale) * inv;
}

static inline int32_t rope_pos(const gml_tensor *pos, int64_t b, int64_t t) {
    int32_t v;
    memcpy(&v, pos->n_dims == 1 ? gml_ptr(pos, 0, 0, 0, t) : gml_ptr(pos, 0, 0, b, t), sizeof v);
    return v;
}

/* (b, h, t) of row [i0, i1, i2] of a [B, H, T, d] or [B, T, H, d] tensor. */
static inline void rope_bht(int32_t seq_dim, int64_t i0, int64_t i1, int64_t i2, int64_t *b,
                            int64_t *h, int64_t *t) {
    *b = i0;
    *h = seq_dim == -2 ? i1 : i2;
    *t = seq_dim == -2 ? i2 : i1;
}

/* The two elements of pair i of a row: (i, i + r/2) or (2i, 2i + 1). */
static inline void rope_pair(bool interleaved, int64_t i, int64_t r, int64_t *j0, int64_t *j1) {
    *j0 = interleaved ? 2 * i : i;
    *j1 = interleaved ? 2 * i + 1 : i + r / 2;
}

/* Reference: per pair, the float angle, then cos, sin and the rotation in
 * double, rounded once to float:
 *     out[j0] = x[j0] cos a - x[j1] sin a,  out[j1] = x[j1] cos a + x[j0] sin a
 * Both elements of a pair are read before either is written (in place). */
static void rope_ref(const gml_compute_params *p, gml_tensor *dst, double sign) {
    const gml_tensor *x = dst->src[0], *pos = dst->src[1];
    const rope_params par = params_of(dst);
    const int64_t d = dst->ne[3], r = par.rotary_dim;
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t row = r0; row < r1; row++) {
        int64_t i0, i1, i2, b, h, t;
        gml_row_index(dst, row, &i0, &i1, &i2);
        rope_bht(par.seq_dim, i0, i1, i2, &b, &h, &t);
        const int32_t ps = rope_pos(pos, b, t);
        for (int64_t i = 0; i < r / 2; i++) {
            int64_t j0, j1;
            rope_pair(par.interleaved != 0, i, r, &j0, &j1);
            const double a = rope_angle(ps, par.pos_scale, rope_inv_freq(par.theta, i, r));
            const double c = cos(a), s = sign * sin(a);
            const double x0 = *(const float *)gml_ptr(x, i0, i1, i2, j0);
            const double x1 = *(const float *)gml_ptr(x, i0, i1, i2, j1);
            *(float *)gml_ptr(dst, i0, i1, i2, j0) = (float)(x0 * c - x1 * s);
            *(float *)gml_ptr(dst, i0, i1, i2, j1) = (float)(x1 * c + x0 * s);
        }
        for (int64_t j = r; j < d; j++)
            *(float *)gml_ptr(dst, i0, i1, i2, j) = *(const float *)gml_ptr(x, i0, i1, i2, j);
    }
}

static void gml_f32_rope__ref(const gml_compute_params *p, gml_tensor *dst) {
    rope_ref(p, dst, 1.0);
}

/* Per-thread scratch: inv_freq, cos and sin of r/2 floats each. */
static size_t rope_scratch(int64_t r) { return gml_align_up(3 * (size_t)(r / 2) * sizeof(float), GML_ALIGN); }

static size_t rope_work_size(const gml_tensor *dst, int nth) {
    return (size_t)nth * rope_scratch(params_of(dst).rotary_dim);
}

void gml_f32_rope_ukernel__scalar_u1(size_t n, const float *c, const float *s, const float *x0,
                                     const float *x1, float *o0, float *o1) {
    for (size_t i = 0; i < n; i++) {
        const float a = x0[i], b = x1[i];
        o0[i] = a * c[i] - b * s[i];
        o1[i] = b * c[i] + a * s[i];
    }
}

void gml_f32_ropei_ukernel__scalar_u1(size_t n, const float *c, const float *s, const float *x,
                                      float *o) {
    for (size_t i = 0; i < n; i++) {
        const float a = x[2 * i], b = x[2 * i + 1];
        o[2 * i] = a * c[i] - b * s[i];
        o[2 * i + 1] = b * c[i] + a * s[i];
    }
}

/* Fast kernel: threads split over the rows in (batch, position, head)
 * order (a decode step's heads too); each computes the r/2 cos and sin of a
 * position once, as floats (the reference's double cos/sin of the same
 * float angle, rounded), and applies them to the heads of that position
 * that follow with the micro-kernels (ops/rope.inc:
 * x0*c - x1*s, x1*c + x0*s in float, no FMA, the same bits on every ISA).
 * Rows whose last dim is strided (a transposed x) take a strided loop of the
 * same arithmetic (this file is built without FMA). */
static void rope_fast(const gml_compute_params *p, gml_tensor *dst, float sign) {
    const gml_tensor *x = dst->src[0], *pos = dst->src[1];
    const rope_params par = params_of(dst);
    const bool ilv = par.interleaved != 0;
    const int64_t d = dst->ne[3], r = par.rotary_dim, half = r / 2;
    const int64_t B = dst->ne[0];
    const int64_t H = par.seq_dim == -2 ? dst->ne[1] : dst->ne[2];
    const int64_t T = par.seq_dim == -2 ? dst->ne[2] : dst->ne[1];
    float *inv = (float *)(void *)((char *)p->wdata + (size_t)p->ith * rope_scratch(r));
    float *cs = inv + half, *sn = cs + half;
    for (int64_t i = 0; i < half; i++) inv[i] = rope_inv_freq(par.theta, i, r);
    const int64_t sx = (int64_t)x->nb[3];
    const bool dense = sx == (int64_t)sizeof(float);
    gml_f32_rope_ukernel *const rot = GML_PICK_UKERNEL(p->isa, GML_F32_ROPE_UKERNELS, gml_f32_rope_ukernel);
    gml_f32_ropei_ukernel *const roti =
        GML_PICK_UKERNEL(p->isa, GML_F32_ROPEI_UKERNELS, gml_f32_ropei_ukernel);
    gml_kernel_note(p, !dense ? "strided loop (x's last dim is strided)"
                       : ilv  ? GML_PICK_UKERNEL_NAME(p->isa, GML_F32_ROPEI_UKERNELS)
                              : GML_PICK_UKERNEL_NAME(p->isa, GML_F32_ROPE_UKERNELS));
    /* rows in (b, t, h) order, so that a thread's rows of one position
     * follow one another; the table is made again only when the position
     * changes */
    int64_t u0, u1;
    gml_split(B * T * H, p->ith, p->nth, &u0, &u1);
    bool have = false;
    int32_t last = 0;
    for (int64_t u = u0; u < u1; u++) {
        const int64_t h = u % H, t = (u / H) % T, b = u / (H * T);
        const int32_t ps = rope_pos(pos, b, t);
        if (!have || ps != last) {
            for (int64_t i = 0; i < half; i++) {
                const double a = rope_angle(ps, par.pos_scale, inv[i]);
                cs[i] = (float)cos(a);
                sn[i] = sign * (float)sin(a);
            }
            have = true;
            last = ps;
        }
        const int64_t i1 = par.seq_dim == -2 ? h : t, i2 = par.seq_dim == -2 ? t : h;
        const char *xr = gml_ptr(x, b, i1, i2, 0);
        float *o = (float *)(void *)gml_ptr(dst, b, i1, i2, 0);
        if (dense) {
            const float *xf = (const float *)(const void *)xr;
            if (ilv) roti((size_t)half, cs, sn, xf, o);
            else rot((size_t)half, cs, sn, xf, xf + half, o, o + half);
            if (o != xf) memcpy(o + r, xf + r, (size_t)(d - r) * sizeof(float));
        } else {
            for (int64_t i = 0; i < half; i++) {
                int64_t j0, j1;
                rope_pair(ilv, i, r, &j0, &j1);
                const float x0 = *(const float *)(const void *)(xr + j0 * sx);
                const float x1 = *(const float *)(const void *)(xr + j1 * sx);
                o[j0] = x0 * cs[i] - x1 * sn[i];
                o[j1] = x1 * cs[i] + x0 * sn[i];
            }
            for (int64_t j = r; j < d; j++) o[j] = *(const float *)(const void *)(xr + j * sx);
        }
    }
}

static void gml_f32_rope(const gml_compute_params *p, gml_tensor *dst) { rope_fast(p, dst, 1.0f); }

/* rope_back: the inverse rotation (the transpose of each pair's rotation),
 * the forward's kernels with sin a negated: dx[j0] = dy[j0] cos a + dy[j1]
 * sin a, dx[j1] = dy[j1] cos a - dy[j0] sin a; the other dims copied. */
static void gml_f32_rope_back__ref(const gml_compute_params *p, gml_tensor *dst) {
    rope_ref(p, dst, -1.0);
}
static void gml_f32_rope_back(const gml_compute_params *p, gml_tensor *dst) {
    rope_fast(p, dst, -1.0f);
}

static double rope_flops(const gml_tensor *dst) {
    const rope_params par = params_of(dst);
    return 3.0 * (double)gml_nelements(dst) * (double)par.rotary_dim / (double)dst->ne[3];
}

/* x [B, H, T, d] (seq_dim -2) or [B, T, H, d] (seq_dim -3), pos i32 [T] or
 * [B, T] -> [B, H, T, d] or [B, T, H, d] */
static gml_tensor *rope_node(gml_context *ctx, gml_op op, gml_tensor *x, gml_tensor *pos,
                             int seq_dim, int rotary_dim, float theta, float pos_scale,
                             bool interleaved) {
    if (!x || !pos) return NULL;
    const char *opn = gml_op_name(op);
    char sx[GML_SHAPE_MAX], sp[GML_SHAPE_MAX];
    if (!gml_expect_type(ctx, opn, x, GML_F32)) return NULL;
    if (x->n_dims != 4)
        return gml_fail(ctx, "%s(%s, %s): x must be 4-D [B, H, T, d] or [B, T, H, d], got %s",
                        opn, x->name, pos->name, GML_SHAPE(x, sx));
    if (seq_dim == 1 || seq_dim == 2) seq_dim -= 4;
    if (seq_dim != -2 && seq_dim != -3)
        return gml_fail(ctx, "%s(%s, %s): seq_dim is %d, must be -2 (x [B, H, T, d]) or -3 "
                        "(x [B, T, H, d])", opn, x->name, pos->name, seq_dim);
    const int64_t B = x->ne[0], T = x->ne[GML_MAX_DIMS + seq_dim], d = x->ne[3];
    const char *layout = seq_dim == -2 ? "[B, H, T, d]" : "[B, T, H, d]";
    if (pos->type != GML_I32 || pos->n_dims > 2 || pos->ne[3] != T ||
        (pos->n_dims == 2 && pos->ne[2] != B))
        return gml_fail(ctx, "%s(%s, %s): positions must be i32 [T] or [B, T] = [%" PRId64
                        "] or [%" PRId64 ", %" PRId64 "] for x %s as %s, got %s %s",
                        opn, x->name, pos->name, T, B, T, GML_SHAPE(x, sx), layout,
                        gml_type_name(pos->type), GML_SHAPE(pos, sp));
    if (rotary_dim == 0) rotary_dim = (int)GML_MIN(d, INT32_MAX);
    if (rotary_dim < 2 || rotary_dim % 2 != 0 || rotary_dim > d)
        return gml_fail(ctx, "%s(%s, %s): rotary_dim is %d, must be even and in [2, d = %" PRId64
                        "] (0: d) for x %s", opn, x->name, pos->name, rotary_dim, d, GML_SHAPE(x, sx));
    if (!(isfinite(theta) && theta > 0.0f))
        return gml_fail(ctx, "%s(%s, %s): theta %g must be finite and > 0", opn, x->name, pos->name,
                        (double)theta);
    if (!(isfinite(pos_scale) && pos_scale > 0.0f))
        return gml_fail(ctx, "%s(%s, %s): pos_scale %g must be finite and > 0", opn,
                        x->name, pos->name, (double)pos_scale);
    gml_tensor *t = gml_new_op(ctx, op, GML_F32, 4, x->ne, (gml_tensor *[]){x, pos}, 2);
    if (!t) return NULL;
    gml_set_params(t, &(rope_params){seq_dim, rotary_dim, theta, pos_scale, interleaved},
                   sizeof(rope_params));
    return t;
}

gml_tensor *gml_rope(gml_context *ctx, gml_tensor *x, gml_tensor *pos, int seq_dim, int rotary_dim,
                     float theta, float pos_scale, bool interleaved) {
    GML_ENTER(ctx, 2, x, pos);
    return rope_node(ctx, GML_OP_ROPE, x, pos, seq_dim, rotary_dim, theta, pos_scale, interleaved);
}

/* dy as x of gml_rope, the same pos and parameters -> dx (rope's gradient) */
gml_tensor *gml_rope_back(gml_context *ctx, gml_tensor *dy, gml_tensor *pos, int seq_dim,
                          int rotary_dim, float theta, float pos_scale, bool interleaved) {
    GML_ENTER(ctx, 2, dy, pos);
    return rope_node(ctx, GML_OP_ROPE_BACK, dy, pos, seq_dim, rotary_dim, theta, pos_scale,
                     interleaved);
}

static gml_tensor *build_rope(gml_context *ctx, const gml_arg *v) {
    const int64_t seq_dim = v[2].given ? v[2].i : -2;
    if (!gml_arg_range(ctx, "rope", v[0].t, "seq_dim", seq_dim, -3, 2) ||
        !gml_arg_range(ctx, "rope", v[0].t, "rotary_dim", v[3].i, 0, INT32_MAX))
        return NULL;
    return rope_node(ctx, GML_OP_ROPE, v[0].t, v[1].t, (int)seq_dim, (int)v[3].i,
                     v[4].given ? v[4].f : 10000.0f, v[5].given ? v[5].f : 1.0f, v[6].i != 0);
}
static gml_tensor *build_rope_back(gml_context *ctx, const gml_arg *v) {
    const int64_t seq_dim = v[2].given ? v[2].i : -2;
    if (!gml_arg_range(ctx, "rope_back", v[0].t, "seq_dim", seq_dim, -3, 2) ||
        !gml_arg_range(ctx, "rope_back", v[0].t, "rotary_dim", v[3].i, 0, INT32_MAX))
        return NULL;
    return rope_node(ctx, GML_OP_ROPE_BACK, v[0].t, v[1].t, (int)seq_dim, (int)v[3].i,
                     v[4].given ? v[4].f : 10000.0f, v[5].given ? v[5].f : 1.0f, v[6].i != 0);
}

static void rope_args(const gml_tensor *t, gml_arg *v) {
    const rope_params p = params_of(t);
    v[0].t = t->src[0];
    v[1].t = t->src[1];
    v[2].i = p.seq_dim;
    v[3].i = p.rotary_dim;
    v[4].f = p.theta;
    v[5].f = p.pos_scale;
    v[6].i = p.interleaved;
}

/* Backward (gml_grad): rope_back of dy, the inverse rotation. */
static bool rope_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    const rope_params p = params_of(node);
    return gml_backward_add(b, node->src[0],
                            gml_rope_back(gml_backward_context(b), dy, node->src[1], p.seq_dim,
                                          p.rotary_dim, p.theta, p.pos_scale, p.interleaved != 0));
}

/* In place (GML_OPF_INPLACE): each row is read and written by one thread,
 * and both kernels read the two elements of a pair before writing them. */
const gml_op_def gml_opdef_rope = {
    .backward = rope_backward,
    .forward = gml_f32_rope,
    .reference = gml_f32_rope__ref,
    .work_size = rope_work_size,
    .flops = rope_flops,
    .flags = GML_OPF_INPLACE,
    GML_ARGS(GML_T("x"), GML_T("pos"), GML_OPT("seq_dim", INT, "-2"),
             GML_OPT("rotary_dim", INT, "0"), GML_OPT("theta", FLOAT, "10000"),
             GML_OPT("pos_scale", FLOAT, "1"), GML_OPT("interleaved", BOOL, "false")),
    .build = build_rope,
    .get_args = rope_args,
    .doc_args = "x f32 `[B, H, T, d]` (seq_dim -2) or `[B, T, H, d]` (seq_dim -3), any strides; "
                "pos i32 `[T]` or `[B, T]`; rotary_dim r even, <= d (0: d)",
    .doc_result = "x's shape: the first r dims of each head rotated by angle (pos / pos_scale) * "
                  "theta^(-2i/r), pairs (i, i + r/2) or, interleaved, (2i, 2i + 1); the rest "
                  "copied",
};

/* In place as rope. */
const gml_op_def gml_opdef_rope_back = {
    .forward = gml_f32_rope_back,
    .reference = gml_f32_rope_back__ref,
    .work_size = rope_work_size,
    .flops = rope_flops,
    .flags = GML_OPF_INPLACE,
    GML_ARGS(GML_T("dy"), GML_T("pos"), GML_OPT("seq_dim", INT, "-2"),
             GML_OPT("rotary_dim", INT, "0"), GML_OPT("theta", FLOAT, "10000"),
             GML_OPT("pos_scale", FLOAT, "1"), GML_OPT("interleaved", BOOL, "false")),
    .build = build_rope_back,
    .get_args = rope_args,
    .doc_args = "dy as rope's x; pos and the rest as rope's",
    .doc_result = "rope's gradient: each pair rotated back by the angle rope turned it (the "
                  "rotation's transpose); the rest copied",
};
