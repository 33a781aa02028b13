/* Index and mask generators for attention: an additive mask from valid
 * lengths, and Shaw et al.'s clipped relative-position index matrix. */
#include "internal.h"

#include <math.h>
#include <string.h>

/* out [B, 1, Tq|1, Tk]: 0 where key j < lens[b(, i)], -inf elsewhere.
 * lens [B] or [B, Tq]; a length outside [0, Tk] fails compute. */
static void gml_f32_valid_len_mask__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *lens = dst->src[0];
    const int64_t tk = dst->ne[3];
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t b, h, i;
        gml_row_index(dst, r, &b, &h, &i);
        int32_t len;
        memcpy(&len, lens->n_dims == 1 ? gml_ptr(lens, 0, 0, 0, b) : gml_ptr(lens, 0, 0, b, i),
               sizeof len);
        if (len < 0 || len > tk) {
            char sl[GML_SHAPE_MAX];
            if (lens->n_dims == 1)
                gml_kernel_fail(p, "valid_len_mask(%s): length %d for batch %" PRId64 " is outside "
                                "[0, %" PRId64 "] (Tk = %" PRId64 ", lens %s)", lens->name, (int)len,
                                b, tk, tk, GML_SHAPE(lens, sl));
            else
                gml_kernel_fail(p, "valid_len_mask(%s): length %d at [%" PRId64 ",%" PRId64 "] is "
                                "outside [0, %" PRId64 "] (Tk = %" PRId64 ", lens %s)", lens->name,
                                (int)len, b, i, tk, tk, GML_SHAPE(lens, sl));
            return;
        }
        float *out = (float *)gml_ptr(dst, b, h, i, 0);
        for (int64_t j = 0; j < tk; j++) out[j] = j < len ? 0.0f : -INFINITY;
    }
}

/* No separate fast kernel: the reference's loop is already vectorized by
 * the compiler and bound by stores; two fills (memset, then -inf) measured
 * slower on [8,1,1024,1024]. */
/* lens i32 [B] or [B, Tq] -> out f32 [B, 1, 1, Tk] or [B, 1, Tq, Tk] */
gml_tensor *gml_valid_len_mask(gml_context *ctx, gml_tensor *lens, int64_t tk) {
    GML_ENTER(ctx, 1, lens);
    char sl[GML_SHAPE_MAX];
    if (lens->type != GML_I32 || lens->n_dims > 2)
        return gml_fail(ctx, "valid_len_mask(%s): lengths must be i32 [B] or [B, Tq], got %s %s",
                        lens->name, gml_type_name(lens->type), GML_SHAPE(lens, sl));
    if (tk < 1)
        return gml_fail(ctx, "valid_len_mask(%s): Tk is %" PRId64 ", must be >= 1", lens->name, tk);
    int64_t tq = lens->n_dims == 2 ? lens->ne[3] : 1;
    int64_t ne[4] = {lens->n_dims == 2 ? lens->ne[2] : lens->ne[3], 1, tq, tk};
    return gml_new_op(ctx, GML_OP_VALID_LEN_MASK, GML_F32, 4, ne, &lens, 1);
}

static gml_tensor *build_valid_len_mask(gml_context *ctx, const gml_arg *v) {
    return gml_valid_len_mask(ctx, v[0].t, v[1].i);
}

static void valid_len_mask_args(const gml_tensor *t, gml_arg *v) {
    v[0].t = t->src[0];
    v[1].i = t->ne[3];
}

const gml_op_def gml_opdef_valid_len_mask = {
    .forward = gml_f32_valid_len_mask__ref,
    .reference = gml_f32_valid_len_mask__ref,
    .flags = GML_OPF_INF_OK,
    GML_ARGS(GML_T("lens"), GML_REQ("tk", INT)),
    .build = build_valid_len_mask,
    .get_args = valid_len_mask_args,
    .doc_args = "lens i32 `[B]` or `[B, Tq]`",
    .doc_result = "f32 `[B, 1, 1, tk]` or `[B, 1, Tq, tk]`: 0 where key j < len, -inf elsewhere",
};

typedef struct relpos_params {
    int32_t max_rel; /* P, in [0, 2^24] */
} relpos_params;
GML_PARAMS_FIT(relpos_params);

static int32_t max_rel_of(const gml_tensor *t) {
    relpos_params p;
    gml_get_params(t, &p, sizeof p);
    return p.max_rel;
}

/* out [Tq, Tk] i32 = clip(j - i, -P, P) + P */
static void gml_i32_relpos_index__ref(const gml_compute_params *p, gml_tensor *dst) {
    const int32_t P = max_rel_of(dst);
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t i = r0; i < r1; i++) {
        int32_t *out = (int32_t *)gml_ptr(dst, 0, 0, i, 0);
        for (int64_t j = 0; j < dst->ne[3]; j++) {
            int64_t d = j - i;
            out[j] = (int32_t)(d < -P ? -P : d > P ? P : d) + P;
        }
    }
}

/* Same as the reference, a row as three regions: 0 left of i - P, the ramp
 * j - i + P, 2P right of i + P; plain loops (no ISA variants), which the
 * compiler vectorizes: 6x the reference on [1024,1024]. */
static void gml_i32_relpos_index(const gml_compute_params *p, gml_tensor *dst) {
    const int32_t P = max_rel_of(dst);
    const int64_t tk = dst->ne[3];
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t i = r0; i < r1; i++) {
        int32_t *out = (int32_t *)gml_ptr(dst, 0, 0, i, 0);
        const int64_t ramp0 = GML_MIN(tk, GML_MAX(0, i - P));
        const int64_t ramp1 = GML_MIN(tk, GML_MAX(0, i + P + 1));
        for (int64_t j = 0; j < ramp0; j++) out[j] = 0;
        for (int64_t j = ramp0; j < ramp1; j++) out[j] = (int32_t)(j - i + P);
        for (int64_t j = ramp1; j < tk; j++) out[j] = 2 * P;
    }
}

gml_tensor *gml_relpos_index(gml_context *ctx, int64_t tq, int64_t tk, int max_rel) {
    GML_ENTER_CTX(ctx);
    if (max_rel < 0 || max_rel > (1 << 24))
        return gml_fail(ctx, "relpos_index: max relative position %d is out of range [0, 2^24]",
                        max_rel);
    gml_tensor *t = gml_new_op(ctx, GML_OP_RELPOS_INDEX, GML_I32, 2, (int64_t[]){tq, tk},
                               NULL, 0);
    if (!t) return NULL;
    gml_set_params(t, &(relpos_params){max_rel}, sizeof(relpos_params));
    return t;
}

/* Sizes in [1, 1e9]: checked here, as written (the builder takes any
 * int64, the arena says no). */
static gml_tensor *build_relpos_index(gml_context *ctx, const gml_arg *v) {
    if (v[0].i < 1 || v[1].i < 1 || v[0].i > 1000000000 || v[1].i > 1000000000)
        return gml_fail(ctx, "relpos_index: sizes %" PRId64 " x %" PRId64 " out of range [1, 1e9]",
                        v[0].i, v[1].i);
    if (!gml_arg_range(ctx, "relpos_index", NULL, "max relative position", v[2].i, 0, 1 << 24))
        return NULL;
    return gml_relpos_index(ctx, v[0].i, v[1].i, (int)v[2].i);
}

static void relpos_index_args(const gml_tensor *t, gml_arg *v) {
    v[0].i = t->ne[2];
    v[1].i = t->ne[3];
    v[2].i = max_rel_of(t);
}

const gml_op_def gml_opdef_relpos_index = {
    .forward = gml_i32_relpos_index,
    .reference = gml_i32_relpos_index__ref,
    GML_ARGS(GML_REQ("tq", INT), GML_REQ("tk", INT), GML_REQ("max_rel", INT)),
    .build = build_relpos_index,
    .get_args = relpos_index_args,
    .doc_args = "numbers",
    .doc_result = "i32 `[tq, tk]`: `clip(j - i, -max_rel, max_rel) + max_rel`",
};
