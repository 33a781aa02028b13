/* Matrix multiplication with torch.matmul semantics, and nn.Linear on top. */
#include "gemm.h"
#include "gemm_bf16.h"
#include "gemm_q8.h"
#include "view.h"

/* A matmul node's parameters: its compute precision (gml_compute; 0, f32,
 * unless set, so older graphs keep their digest). */
typedef struct matmul_params {
    int32_t compute;
} matmul_params;
GML_PARAMS_FIT(matmul_params);

static const char *compute_refused(gml_compute c, const gml_tensor *b);

gml_compute gml_matmul_compute(const gml_tensor *node) {
    matmul_params mp;
    gml_get_params(node, &mp, sizeof mp);
    return (gml_compute)mp.compute;
}

/* Element (k, n) of b's matrix bmat as f32: f32, f16, bf16 through b's
 * strides; q8_0 (the transpose of a q8_0 leaf: nb[2] the block size, nb[3]
 * the leaf's row stride) from block k / 32 of row n. */
static inline double b_elem(const gml_tensor *b, const char *bmat, int64_t k, int64_t n) {
    const char *p = bmat + n * (int64_t)b->nb[3];
    uint16_t h;
    switch (b->type) {
    case GML_Q8_0: {
        const gml_block_q8_0 *blk = (const void *)(p + k / GML_QK8_0 * (int64_t)b->nb[2]);
        memcpy(&h, &blk->d, 2);
        return (double)(gml_fp16_to_fp32(h) * (float)blk->qs[k % GML_QK8_0]);
    }
    case GML_F16: memcpy(&h, p + k * (int64_t)b->nb[2], 2); return gml_fp16_to_fp32(h);
    case GML_BF16: memcpy(&h, p + k * (int64_t)b->nb[2], 2); return gml_bf16_to_fp32(h);
    default: return *(const float *)(const void *)(p + k * (int64_t)b->nb[2]);
    }
}

/* out[.., m, n] = sum_k a[.., m, k] * b[.., k, n], batch dims broadcast.
 * Reference: one output row per step, double accumulation in k order; b's
 * values converted to f32 first (f16, bf16, q8_0: d * q). */
static void gml_f32_matmul__ref(const gml_compute_params *p, gml_tensor *dst) {
    if (gml_matmul_compute(dst) == GML_COMPUTE_BF16) {
        gml_bf16_matmul__ref(p, dst);
        return;
    }
    if (gml_matmul_compute(dst) == GML_COMPUTE_INT8) { /* ops/gemm_q8.h */
        const gml_gemm_desc d = gml_matmul_desc(dst, dst->src[0], dst->src[1], p->isa);
        gml_q8_gemm_ref(p, &d);
        return;
    }
    const gml_tensor *a = dst->src[0], *b = dst->src[1];
    const int64_t N = dst->ne[3], K = a->ne[3];
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, m;
        gml_row_index(dst, r, &i0, &i1, &m);
        const char *arow = gml_ptr(a, i0 % a->ne[0], i1 % a->ne[1], m, 0);
        const char *bmat = gml_ptr(b, i0 % b->ne[0], i1 % b->ne[1], 0, 0);
        float *out = (float *)gml_ptr(dst, i0, i1, m, 0);
        for (int64_t n = 0; n < N; n++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++)
                acc += (double)*(const float *)(arow + k * (int64_t)a->nb[3]) *
                       b_elem(b, bmat, k, n);
            out[n] = (float)acc;
        }
    }
}

/* The product as gemm.h sees it: operands through their strides, batch
 * dims of size 1 broadcast with stride 0. When B is one matrix for every
 * batch (a weight) and A's rows follow each other uniformly across batches
 * ([B, T, K] contiguous or row-sliced), the batches fold into M, so the
 * weight is read once for all B*T rows. */
gml_gemm_desc gml_matmul_desc(const gml_tensor *dst, const gml_tensor *a, const gml_tensor *b,
                              gml_isa isa) {
    gml_gemm_desc d = {
        .M = dst->ne[2], .N = dst->ne[3], .K = a->ne[3], .nb0 = dst->ne[0], .nb1 = dst->ne[1],
        .a = a->data, .a_rs = (int64_t)a->nb[2], .a_cs = (int64_t)a->nb[3],
        .b = b->data, .b_rs = (int64_t)b->nb[2], .b_cs = (int64_t)b->nb[3],
        .c = dst->data, .c_rs = (int64_t)dst->nb[2],
        .b_type = b->type, .isa = isa,
    };
    for (int i = 0; i < 2; i++) {
        d.a_bs[i] = a->ne[i] == 1 ? 0 : (int64_t)a->nb[i];
        d.b_bs[i] = b->ne[i] == 1 ? 0 : (int64_t)b->nb[i];
        d.c_bs[i] = (int64_t)dst->nb[i];
    }
    const bool b_shared = d.b_bs[0] == 0 && d.b_bs[1] == 0;
    const bool a_rows = (d.nb1 == 1 || d.a_bs[1] == d.M * d.a_rs) &&
                        (d.nb0 == 1 || d.a_bs[0] == d.nb1 * d.M * d.a_rs);
    const bool c_rows = (d.nb1 == 1 || d.c_bs[1] == d.M * d.c_rs) &&
                        (d.nb0 == 1 || d.c_bs[0] == d.nb1 * d.M * d.c_rs);
    if (b_shared && a_rows && c_rows && d.nb0 * d.nb1 > 1) {
        d.M *= d.nb0 * d.nb1;
        d.nb0 = d.nb1 = 1;
        d.a_bs[0] = d.a_bs[1] = d.c_bs[0] = d.c_bs[1] = 0;
    }
    return d;
}

/* Fast path: the packed GEMM of ops/gemm.c with the micro-kernel of the
 * plan's ISA. */
static void gml_f32_matmul(const gml_compute_params *p, gml_tensor *dst) {
    if (gml_matmul_compute(dst) == GML_COMPUTE_BF16) {
        gml_bf16_matmul(p, dst);
        return;
    }
    const gml_gemm_desc d = gml_matmul_desc(dst, dst->src[0], dst->src[1], p->isa);
    if (gml_matmul_compute(dst) == GML_COMPUTE_INT8)
        gml_q8_gemm_kept(p, &d, gml_q8_gemm_pick(p->isa), p->const_srcs & 2 ? p->kept : NULL);
    else
        gml_gemm(p, &d, gml_gemm_pick(p->isa));
}

static size_t matmul_work_size(const gml_tensor *dst, int nth) {
    if (gml_matmul_compute(dst) == GML_COMPUTE_BF16) return gml_bf16_matmul_work_size(dst, nth);
    /* any variant's size */
    const gml_gemm_desc d = gml_matmul_desc(dst, dst->src[0], dst->src[1], GML_ISA_REFERENCE);
    if (gml_matmul_compute(dst) == GML_COMPUTE_INT8) return gml_q8_gemm_work_size(&d, nth);
    return gml_gemm_work_size(&d, nth);
}

/* A constant b (a weight: compute.c's const_srcs) packed once into the
 * kernel's layout and kept by the graph: int8's panels of q8_0 rows,
 * bf16's pairs where the ISA has VDPBF16PS, else its rounded f32 copy. */
static size_t matmul_kept_size(const gml_tensor *dst, unsigned const_srcs, gml_isa isa) {
    if (!(const_srcs & 2)) return 0;
    const gml_gemm_desc d = gml_matmul_desc(dst, dst->src[0], dst->src[1], isa);
    switch (gml_matmul_compute(dst)) {
    case GML_COMPUTE_INT8: return gml_q8_gemm_packed_size(&d, gml_q8_gemm_pick(isa));
    case GML_COMPUTE_BF16: return gml_bf16_matmul_kept_size(dst, isa);
    default: return 0;
    }
}

static double matmul_flops(const gml_tensor *dst) {
    return 2.0 * (double)gml_nelements(dst) * (double)dst->src[0]->ne[3];
}

/* A q8_0 b is usable when its dim -2 (K) is its leaf's last dim (the one
 * blocked): b is a transpose or permute of a q8_0 leaf, or of a block of
 * its whole rows (context.c allows no other view of one), that moves the
 * leaf's last dim to -2. Told from which of the leaf's dims (the block's
 * are the leaf's) the view put there (ops/view.h), as strides alone cannot
 * tell a [32, 32] w^T from w. */
static bool q8_0_is_w_t(const gml_tensor *b) {
    const int n = b->n_dims;
    const gml_tensor *s = b->src[0];
    if (!b->view_src || (s != b->view_src && s->op != GML_OP_VIEW)) return false;
    const int from = gml_view_source_dim(b, n - 2); /* the leaf's dim that b's dim n - 2 is */
    return from == n - 1 && b->nb[GML_MAX_DIMS - 2] == gml_type_size(GML_Q8_0);
}

/* a [.., M, K] @ b [.., K, N] -> out [.., M, N]; 2-D to 4-D, batch broadcast */
gml_tensor *gml_matmul(gml_context *ctx, gml_tensor *a, gml_tensor *b) {
    GML_ENTER(ctx, 2, a, b);
    char sa[GML_SHAPE_MAX], sb[GML_SHAPE_MAX];
    if (!gml_expect_type(ctx, "matmul", a, GML_F32)) return NULL;
    if (b->type == GML_I32)
        return gml_fail(ctx, "matmul(%s, %s): '%s' is i32 %s; b must be f32, f16, bf16 or q8_0",
                        a->name, b->name, b->name, GML_SHAPE(b, sb));
    if (b->type == GML_Q8_0 && b->n_dims >= 2 && !q8_0_is_w_t(b))
        return gml_fail(ctx, "matmul(%s, %s): a q8_0 b must be the transpose of a q8_0 weight "
                        "[.., N, K] (its blocks along K), e.g. transpose(w, -2, -1); got %s%s",
                        a->name, b->name, GML_SHAPE(b, sb), b->view_src ? " (another view)" : "");
    if (a->n_dims < 2 || b->n_dims < 2)
        return gml_fail(ctx, "matmul(%s, %s): inputs must be 2-D to 4-D: %s @ %s", a->name, b->name,
                        GML_SHAPE(a, sa), GML_SHAPE(b, sb));
    if (a->ne[3] != b->ne[2])
        return gml_fail(ctx, "matmul(%s, %s): inner sizes differ: %s @ %s", a->name, b->name,
                        GML_SHAPE(a, sa), GML_SHAPE(b, sb));
    int n = GML_MAX(a->n_dims, b->n_dims);
    int64_t ne[GML_MAX_DIMS] = {1, 1, a->ne[2], b->ne[3]};
    for (int i = 0; i < 2; i++) {
        if (a->ne[i] != b->ne[i] && a->ne[i] != 1 && b->ne[i] != 1)
            return gml_fail(ctx, "matmul(%s, %s): batch dims do not broadcast: %s @ %s", a->name,
                            b->name, GML_SHAPE(a, sa), GML_SHAPE(b, sb));
        ne[i] = GML_MAX(a->ne[i], b->ne[i]);
    }
    gml_tensor *y = gml_new_op(ctx, GML_OP_MATMUL, GML_F32, n, ne + GML_MAX_DIMS - n,
                               (gml_tensor *[]){a, b}, 2);
    if (y && ctx->compute != GML_COMPUTE_F32 && !compute_refused(ctx->compute, b))
        gml_set_params(y, &(matmul_params){ctx->compute}, sizeof(matmul_params));
    return y;
}

/* ---- compute precision (<ggmlite/tensor.h>, docs/numerics.md) ---------- */

/* NULL if a matmul with b can compute in c, else what c takes. */
static const char *compute_refused(gml_compute c, const gml_tensor *b) {
    switch (c) {
    case GML_COMPUTE_F32: return NULL;
    case GML_COMPUTE_BF16:
        return b->type == GML_F32 || b->type == GML_F16 || b->type == GML_BF16
                   ? NULL
                   : "bf16 compute takes a b of f32, f16 or bf16 (a q8_0 b: f32 compute)";
    case GML_COMPUTE_INT8: /* K is a multiple of 32: a q8_0 b is blocked along K */
        return b->type == GML_Q8_0
                   ? NULL
                   : "int8 compute takes a q8_0 b (a q8_0 weight against a quantized per row); "
                     "quantize the weight to q8_0 first (gml_cpy into a q8_0 tensor, run-graph "
                     "--weights-dtype q8_0) or keep f32 compute";
    default: return "not a gml_compute value";
    }
}

gml_status gml_set_compute(gml_context *ctx, gml_tensor *op, gml_compute c) {
    char sb[GML_SHAPE_MAX];
    if (!op) {
        gml_set_error(ctx, "gml_set_compute: the node is NULL");
        return GML_ERR_INVALID;
    }
    if (op->op != GML_OP_MATMUL) {
        gml_set_error(ctx, "gml_set_compute(%s, %s): '%s' is a %s node; only matmul nodes "
                      "(gml_matmul, the matmul gml_linear writes) take a compute precision",
                      op->name, gml_compute_name(c), op->name,
                      op->op == GML_OP_NONE ? "leaf" : gml_op_name(op->op));
        return GML_ERR_INVALID;
    }
    const gml_tensor *b = op->src[1];
    const char *why = compute_refused(c, b);
    if (why) {
        if ((unsigned)c >= GML_COMPUTE_COUNT)
            gml_set_error(ctx, "gml_set_compute(%s, %d): %s (f32, bf16, int8)", op->name, (int)c, why);
        else
            gml_set_error(ctx, "gml_set_compute(%s, %s): matmul(%s, %s) with b %s %s: %s", op->name,
                          gml_compute_name(c), op->src[0]->name, b->name, gml_type_name(b->type),
                          GML_SHAPE(b, sb), why);
        return GML_ERR_INVALID;
    }
    gml_set_params(op, &(matmul_params){c}, sizeof(matmul_params));
    return GML_OK;
}

gml_compute gml_get_compute(const gml_tensor *op) {
    return op && op->op == GML_OP_MATMUL ? gml_matmul_compute(op) : GML_COMPUTE_F32;
}

gml_status gml_set_default_compute(gml_context *ctx, gml_compute c) {
    if (!ctx) return GML_ERR_INVALID;
    if ((unsigned)c >= GML_COMPUTE_COUNT) {
        gml_set_error(ctx, "gml_set_default_compute(%s): not a gml_compute value (f32, bf16, int8)",
                      gml_compute_name(c));
        return GML_ERR_INVALID;
    }
    ctx->compute = c;
    return GML_OK;
}

gml_compute gml_get_default_compute(const gml_context *ctx) {
    return ctx ? ctx->compute : GML_COMPUTE_F32;
}

/* x [.., in] (1-D to 4-D), w [out, in], bias [out] or NULL -> [.., out] = x w^T + bias */
gml_tensor *gml_linear(gml_context *ctx, gml_tensor *x, gml_tensor *w, gml_tensor *bias) {
    GML_ENTER(ctx, 2, x, w, bias);
    char sx[GML_SHAPE_MAX], sw[GML_SHAPE_MAX], sbias[GML_SHAPE_MAX];
    if (w->n_dims != 2 || w->type == GML_I32 || (w->type == GML_Q8_0 && w->view_src && w->op != GML_OP_VIEW))
        return gml_fail(ctx, "linear(%s, %s): weight must be [out, in] of f32, f16, bf16 or q8_0 "
                        "(a q8_0 one a whole tensor or a block of its rows), got %s %s%s", x->name,
                        w->name, gml_type_name(w->type), GML_SHAPE(w, sw), w->view_src ? " (a view)" : "");
    if (x->ne[3] != w->ne[3])
        return gml_fail(ctx, "linear(%s, %s): input has %" PRId64 " features, weight [out, in] "
                        "expects %" PRId64 ": %s vs %s", x->name, w->name, x->ne[3], w->ne[3],
                        GML_SHAPE(x, sx), GML_SHAPE(w, sw));
    if (bias && (bias->n_dims != 1 || bias->ne[3] != w->ne[2]))
        return gml_fail(ctx, "linear(%s, %s, %s): bias must be [%" PRId64 "], got %s", x->name,
                        w->name, bias->name, w->ne[2], GML_SHAPE(bias, sbias));
    gml_tensor *x2 = x; /* [in] is taken as [1, in], as nn.Linear does */
    if (x->n_dims == 1)
        x2 = gml_view(ctx, x, 2, (int64_t[]){1, x->ne[3]},
                      (size_t[]){x->nb[3] * (size_t)x->ne[3], x->nb[3]}, 0);
    gml_tensor *y = gml_matmul(ctx, x2, gml_transpose(ctx, w, 0, 1));
    if (y && x->n_dims == 1) y = gml_reshape(ctx, y, 1, (int64_t[]){w->ne[2]});
    return bias ? gml_add(ctx, y, bias) : y;
}

/* Backward (gml_grad) of out = a @ b, a [.., M, K], b [.., K, N], dy [.., M, N]:
 *   da = dy @ b^T  [.., M, K], summed over the batch dims a broadcasts;
 *   db = a^T @ dy  [.., K, N], likewise for b. When b is one matrix for
 *   every batch (a weight), the batches fold into the rows instead: a and dy
 *   as [B M, K] and [B M, N] (made contiguous first where they are not),
 *   db = a^T @ dy in one product summing over all B M rows in its own fixed
 *   order. A q8_0 b gives no gradient to a (its transpose is no matmul
 *   operand). */
static bool matmul_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    gml_context *ctx = gml_backward_context(b);
    gml_tensor *a = node->src[0], *bm = node->src[1];
    char sb[GML_SHAPE_MAX];
    if (gml_backward_needs(b, a)) {
        if (bm->type == GML_Q8_0)
            return gml_backward_fail(b, "the gradient of '%s' through a q8_0 b '%s' %s is not "
                                     "computed (use an f32, f16 or bf16 weight)", a->name,
                                     bm->name, GML_SHAPE(bm, sb));
        if (!gml_backward_add(b, a, gml_matmul(ctx, dy, gml_transpose(ctx, bm, -1, -2))))
            return false;
    }
    if (!gml_backward_needs(b, bm)) return true;
    const int64_t batches = node->ne[0] * node->ne[1];
    if (bm->ne[0] * bm->ne[1] == 1 && batches > 1) {
        const int64_t rows = batches * a->ne[2];
        gml_tensor *ac = gml_is_contiguous(a) ? a : gml_cont(ctx, a);
        gml_tensor *dc = gml_is_contiguous(dy) ? dy : gml_cont(ctx, dy);
        gml_tensor *a2 = gml_reshape(ctx, ac, 2, (int64_t[]){rows, a->ne[3]});
        gml_tensor *d2 = gml_reshape(ctx, dc, 2, (int64_t[]){rows, dy->ne[3]});
        gml_tensor *g = gml_matmul(ctx, gml_transpose(ctx, a2, 0, 1), d2);
        if (g && bm->n_dims != 2)
            g = gml_reshape(ctx, g, bm->n_dims, bm->ne + GML_MAX_DIMS - bm->n_dims);
        return gml_backward_add(b, bm, g);
    }
    return gml_backward_add(b, bm, gml_matmul(ctx, gml_transpose(ctx, a, -1, -2), dy));
}

static gml_tensor *build_matmul(gml_context *ctx, const gml_arg *v) {
    gml_tensor *y = gml_matmul(ctx, v[0].t, v[1].t);
    if (y && v[2].given && gml_set_compute(ctx, y, (gml_compute)v[2].i) != GML_OK) return NULL;
    return y;
}

static void matmul_get_args(const gml_tensor *node, gml_arg *args) {
    gml_args_from_srcs(node, args);
    args[2].i = gml_matmul_compute(node);
}

static const char *const compute_names[] = {"f32", "bf16", "int8", NULL};

const gml_op_def gml_opdef_matmul = {
    .forward = gml_f32_matmul,
    .reference = gml_f32_matmul__ref,
    .work_size = matmul_work_size,
    .kept_size = matmul_kept_size,
    .flops = matmul_flops,
    GML_ARGS(GML_T("a"), GML_T("b"), GML_OPT_ENUM_Z("compute", "f32", compute_names)),
    .build = build_matmul,
    .get_args = matmul_get_args,
    .doc_args = "`[..., M, K] @ [..., K, N]`, 2-D to 4-D, leading dims broadcast; a f32, b f32, "
                "f16, bf16, or q8_0 as transpose(w) of a q8_0 weight; compute f32, bf16 "
                "(b f32, f16, bf16) or int8 (b q8_0; docs/numerics.md)",
    .doc_result = "`[..., M, N]` (torch.matmul; any strides)",
    .backward = matmul_backward,
};

static gml_tensor *build_linear(gml_context *ctx, const gml_arg *v) {
    return gml_linear(ctx, v[0].t, v[1].t, v[2].t);
}

/* Builder-only: its nodes are a matmul and an add, written as such. */
const gml_op_def gml_form_linear = {
    GML_ARGS(GML_T("x"), GML_T("w"), GML_OPT("bias", OPT_TENSOR, "none")),
    .build = build_linear,
    .doc_args = "x `[..., in]`, w `[out, in]` (nn.Linear; f32, f16, bf16 or q8_0), bias `[out]`",
    .doc_result = "`[..., out]`: written as matmul(x, w^T) (+ add)",
};
