/* arange: the i32 sequence start, start + 1, ..., start + n - 1 as a graph
 * node (torch.arange(start, start + n, dtype=torch.int32)), so a block can
 * make default positions (rope, attention) without touching tensor data at
 * build time. */
#include "internal.h"

#include <string.h>

typedef struct arange_params {
    int32_t start;
} arange_params;
GML_PARAMS_FIT(arange_params);

static int32_t start_of(const gml_tensor *t) {
    arange_params p;
    gml_get_params(t, &p, sizeof p);
    return p.start;
}

/* out [n] i32: out[i] = start + i. One row: the first thread writes it. */
static void gml_i32_arange__ref(const gml_compute_params *p, gml_tensor *dst) {
    if (p->ith != 0) return;
    const int64_t start = start_of(dst);
    int32_t *out = (int32_t *)gml_ptr(dst, 0, 0, 0, 0);
    for (int64_t i = 0; i < dst->ne[3]; i++) out[i] = (int32_t)(start + i);
}

gml_tensor *gml_arange(gml_context *ctx, int64_t n, int64_t start) {
    GML_ENTER_CTX(ctx);
    if (n < 1 || n > INT32_MAX)
        return gml_fail(ctx, "arange: size %" PRId64 " is out of range [1, 2^31 - 1]", n);
    if (start < INT32_MIN || start > (int64_t)INT32_MAX - (n - 1))
        return gml_fail(ctx, "arange: start %" PRId64 " with size %" PRId64 " leaves i32 (values "
                        "start .. start + size - 1 must fit in [-2^31, 2^31 - 1])", start, n);
    gml_tensor *t = gml_new_op(ctx, GML_OP_ARANGE, GML_I32, 1, (int64_t[]){n}, NULL, 0);
    if (!t) return NULL;
    gml_set_params(t, &(arange_params){(int32_t)start}, sizeof(arange_params));
    return t;
}

static gml_tensor *build_arange(gml_context *ctx, const gml_arg *v) {
    return gml_arange(ctx, v[0].i, v[1].given ? v[1].i : 0);
}

static void arange_args(const gml_tensor *t, gml_arg *v) {
    v[0].i = t->ne[3];
    v[1].i = start_of(t);
}

const gml_op_def gml_opdef_arange = {
    .forward = gml_i32_arange__ref,
    .reference = gml_i32_arange__ref,
    GML_ARGS(GML_REQ("n", INT), GML_OPT("start", INT, "0")),
    .build = build_arange,
    .get_args = arange_args,
    .doc_args = "numbers",
    .doc_result = "i32 `[n]`: `start, start + 1, ..., start + n - 1`",
};

/* ---- full: a constant tensor ------------------------------------------------ */

typedef struct full_params {
    float value;
} full_params;
GML_PARAMS_FIT(full_params);

static float value_of(const gml_tensor *t) {
    full_params p;
    gml_get_params(t, &p, sizeof p);
    return p.value;
}

/* out [...] f32 contiguous = value; elements split across threads. */
static void gml_f32_full__ref(const gml_compute_params *p, gml_tensor *dst) {
    const float v = value_of(dst);
    int64_t e0, e1;
    gml_split(gml_nelements(dst), p->ith, p->nth, &e0, &e1);
    float *out = dst->data;
    for (int64_t e = e0; e < e1; e++) out[e] = v;
}

/* -> [ne...] f32, every element value */
gml_tensor *gml_full(gml_context *ctx, int n_dims, const int64_t *ne, float value) {
    GML_ENTER_CTX(ctx);
    if (!ne) return gml_fail(ctx, "gml_full: ne is NULL");
    gml_tensor *t = gml_new_op(ctx, GML_OP_FULL, GML_F32, n_dims, ne, NULL, 0);
    if (!t) return NULL;
    gml_set_params(t, &(full_params){value}, sizeof(full_params));
    return t;
}

static gml_tensor *build_full(gml_context *ctx, const gml_arg *v) {
    return gml_full(ctx, v[0].n, v[0].list, v[1].f);
}

static void full_args(const gml_tensor *t, gml_arg *v) {
    v[0].n = t->n_dims;
    memcpy(v[0].list, t->ne + GML_MAX_DIMS - t->n_dims, (size_t)t->n_dims * sizeof *t->ne);
    v[1].f = value_of(t);
}

const gml_op_def gml_opdef_full = {
    .forward = gml_f32_full__ref,
    .reference = gml_f32_full__ref,
    GML_ARGS(GML_REQ("shape", INTS), GML_REQ("value", FLOAT)),
    .build = build_full,
    .get_args = full_args,
    .doc_args = "sizes, a number",
    .doc_result = "f32 `[shape]`, every element the value (torch.full)",
};
