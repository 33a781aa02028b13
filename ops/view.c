/* Views: view, reshape, permute, transpose, and after (a dependency edge).
 * Each makes a new header over the same data (sizes and byte strides
 * rearranged); nothing is copied and no kernel runs. */
#include "view.h"
#include "runs.h"
#include "ukernels.h"

#include <string.h>

/* A view's shape and strides are its own; its params only what they lose. */
typedef struct view_params {
    uint64_t offset; /* bytes into the source's data */
} view_params;
GML_PARAMS_FIT(view_params);
typedef struct permute_params {
    int32_t axes[GML_MAX_DIMS]; /* out dim i is input dim axes[i], 0..n-1 */
} permute_params;
GML_PARAMS_FIT(permute_params);
typedef struct transpose_params {
    int32_t d0, d1; /* the swapped dims, 0..n-1 */
} transpose_params;
GML_PARAMS_FIT(transpose_params);

int gml_view_source_dim(const gml_tensor *t, int d) {
    if (t->op == GML_OP_TRANSPOSE) {
        transpose_params p;
        gml_get_params(t, &p, sizeof p);
        return d == p.d0 ? p.d1 : d == p.d1 ? p.d0 : d;
    }
    if (t->op == GML_OP_PERMUTE) {
        permute_params p;
        gml_get_params(t, &p, sizeof p);
        return p.axes[d];
    }
    return -1;
}

static void format_list(char *buf, size_t size, int n, const int64_t *v) {
    size_t k = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < n && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%" PRId64, i ? "," : "", v[i]);
    if (k < size) snprintf(buf + k, size - k, "]");
}

/* out [ne...] with byte strides nb[...], offset bytes into a's data */
gml_tensor *gml_view(gml_context *ctx, gml_tensor *a, int n_dims, const int64_t *ne,
                     const size_t *nb, size_t offset) {
    GML_ENTER(ctx, 1, a);
    if (!ne) return gml_fail(ctx, "gml_view: ne is NULL");
    if (!nb) return gml_fail(ctx, "gml_view: nb is NULL");
    char sa[GML_SHAPE_MAX], sn[GML_SHAPE_MAX], sb[GML_SHAPE_MAX * 2];
    if (n_dims < 1 || n_dims > GML_MAX_DIMS)
        return gml_fail(ctx, "view(%s): %d dimensions; ggmlite tensors have 1 to %d", a->name,
                        n_dims, GML_MAX_DIMS);
    format_list(sn, sizeof sn, n_dims, ne);
    int64_t nbi[GML_MAX_DIMS];
    size_t esize = gml_type_size(a->type); /* q8_0: one block of 32, the last dim's stride */
    const int64_t blk = gml_type_block_size(a->type);
    size_t last = offset; /* byte offset of the last element (block) */
    bool overflow = false;
    for (int i = 0; i < n_dims; i++) {
        nbi[i] = (int64_t)nb[i];
        if (ne[i] < 1)
            return gml_fail(ctx, "view(%s): size %" PRId64 " of dim %d in %s; sizes must be >= 1",
                            a->name, ne[i], i, sn);
        if (blk > 1 && i == n_dims - 1 && ne[i] % blk)
            return gml_fail(ctx, "view(%s): the last dim of %s is not whole %s blocks of %" PRId64
                            " values", a->name, sn, gml_type_name(a->type), blk);
        const int64_t n = blk > 1 && i == n_dims - 1 ? ne[i] / blk : ne[i]; /* blocks along a row */
        if (nb[i] && (uint64_t)(n - 1) > (SIZE_MAX - last) / nb[i]) overflow = true;
        else last += (size_t)(n - 1) * nb[i];
    }
    format_list(sb, sizeof sb, n_dims, nbi);
    for (int i = 0; i < n_dims; i++)
        if (nb[i] % esize)
            return gml_fail(ctx, "view(%s): stride %zu of dim %d in %s is not a multiple of the "
                            "%zu-byte element", a->name, nb[i], i, sb, esize);
    if (offset % esize)
        return gml_fail(ctx, "view(%s): offset %zu is not a multiple of the %zu-byte element",
                        a->name, offset, esize);
    const gml_tensor *root = a->view_src ? a->view_src : a;
    size_t have = gml_nbytes(root);
    if (overflow)
        return gml_fail(ctx, "view(%s): shape %s with byte strides %s at offset %zu spans more "
                        "than 2^64 bytes, past the %zu bytes of '%s' %s", a->name, sn, sb, offset,
                        have, root->name, GML_SHAPE(root, sa));
    /* a lies inside root, so have >= a->view_offs + esize */
    if (last > have - esize - a->view_offs)
        return gml_fail(ctx, "view(%s): shape %s with byte strides %s at offset %zu reaches byte "
                        "%zu, past the %zu bytes of '%s' %s", a->name, sn, sb, offset,
                        a->view_offs + last + esize, have, root->name,
                        GML_SHAPE(root, sa));
    gml_tensor *t = gml_new_view(ctx, GML_OP_VIEW, a, n_dims, ne, nb, offset, "view");
    if (t) gml_set_params(t, &(view_params){offset}, sizeof(view_params));
    return t;
}

/* In elements: view(a, shape, strides, offset=0). */
static gml_tensor *build_view(gml_context *ctx, const gml_arg *v) {
    gml_tensor *a = v[0].t;
    char s[GML_SHAPE_MAX];
    if (v[2].n != v[1].n)
        return gml_fail(ctx, "view(%s): %d sizes but %d strides (input %s)", a->name, v[1].n,
                        v[2].n, GML_SHAPE(a, s));
    const size_t es = gml_type_size(a->type); /* whole numbers are < 2^53: no overflow */
    size_t nb[GML_MAX_DIMS];
    for (int i = 0; i < v[2].n; i++) {
        if (v[2].list[i] < 0)
            return gml_fail(ctx, "view(%s): negative stride %" PRId64, a->name, v[2].list[i]);
        nb[i] = (size_t)v[2].list[i] * es;
    }
    if (v[3].i < 0) return gml_fail(ctx, "view(%s): negative offset %" PRId64, a->name, v[3].i);
    return gml_view(ctx, a, v[1].n, v[1].list, nb, (size_t)v[3].i * es);
}

static void view_args(const gml_tensor *t, gml_arg *v) {
    const size_t es = gml_type_size(t->type);
    view_params p;
    gml_get_params(t, &p, sizeof p);
    v[0].t = t->src[0];
    v[1].n = v[2].n = t->n_dims;
    for (int i = 0; i < t->n_dims; i++) {
        v[1].list[i] = t->ne[GML_MAX_DIMS - t->n_dims + i];
        v[2].list[i] = (int64_t)(t->nb[GML_MAX_DIMS - t->n_dims + i] / es);
    }
    v[3].i = (int64_t)(p.offset / es);
}

/* A view's elements as positions in its source a (contiguous): a's element
 * at byte (view_offs - a's view_offs) + sum i_k nb_k. */
static bool view_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    gml_tensor *a = node->src[0];
    char sa[GML_SHAPE_MAX];
    if (!gml_is_contiguous(a))
        return gml_backward_fail(b, "the source '%s' %s is strided; the gradient of a view is "
                                 "taken into a contiguous source only (cont it first)", a->name,
                                 GML_SHAPE(a, sa));
    const size_t es = gml_type_size(a->type);
    int64_t st[GML_MAX_DIMS];
    for (int d = 0; d < node->n_dims; d++) st[d] = (int64_t)(node->nb[GML_MAX_DIMS - node->n_dims + d] / es);
    return gml_backward_add(b, a, gml_view_back(gml_backward_context(b), dy, a->n_dims,
                                                a->ne + GML_MAX_DIMS - a->n_dims, st,
                                                (int64_t)((node->view_offs - a->view_offs) / es)));
}

const gml_op_def gml_opdef_view = {
    .flags = GML_OPF_NOOP,
    GML_ARGS(GML_T("a"), GML_REQ("shape", INTS), GML_REQ("strides", INTS),
             GML_OPT("offset", INT, "0")),
    .build = build_view,
    .get_args = view_args,
    .doc_args = "sizes, strides in elements, offset in elements",
    .doc_result = "a view of a's data (no copy); every element must lie inside a",
    .backward = view_backward,
};

/* a contiguous [..] -> [ne...] with the same element count; one size may be -1 */
gml_tensor *gml_reshape(gml_context *ctx, gml_tensor *a, int n_dims, const int64_t *ne) {
    GML_ENTER(ctx, 1, a);
    if (!ne) return gml_fail(ctx, "gml_reshape: ne is NULL");
    char sa[GML_SHAPE_MAX], sn[GML_SHAPE_MAX];
    if (n_dims < 1 || n_dims > GML_MAX_DIMS)
        return gml_fail(ctx, "reshape(%s): %d dimensions; ggmlite tensors have 1 to %d", a->name,
                        n_dims, GML_MAX_DIMS);
    format_list(sn, sizeof sn, n_dims, ne);
    if (!gml_is_contiguous(a))
        return gml_fail(ctx, "reshape(%s): input %s is not contiguous (it is a permuted or "
                        "strided view); insert gml_cont before reshape", a->name,
                        GML_SHAPE(a, sa));
    int64_t shape[GML_MAX_DIMS], known = 1, n = gml_nelements(a);
    int infer = -1;
    for (int i = 0; i < n_dims; i++) {
        shape[i] = ne[i];
        if (ne[i] == -1 && infer < 0) {
            infer = i;
        } else if (ne[i] < 1) {
            return gml_fail(ctx, "reshape(%s): bad size %" PRId64 " in %s (sizes are >= 1, one "
                            "may be -1)", a->name, ne[i], sn);
        } else if (ne[i] > INT64_MAX / known) { /* the product would overflow */
            return gml_fail(ctx, "reshape(%s): %s has %" PRId64 " elements, %s has more than 2^63",
                            a->name, GML_SHAPE(a, sa), n, sn);
        } else {
            known *= ne[i];
        }
    }
    if (infer >= 0) {
        if (n % known)
            return gml_fail(ctx, "reshape(%s): cannot infer -1 in %s from %s (%" PRId64
                            " elements)", a->name, sn, GML_SHAPE(a, sa), n);
        shape[infer] = n / known;
        known *= shape[infer];
    }
    if (known != n)
        return gml_fail(ctx, "reshape(%s): %s has %" PRId64 " elements, %s has %" PRId64,
                        a->name, GML_SHAPE(a, sa), n, sn, known);
    int64_t full[GML_MAX_DIMS] = {1, 1, 1, 1};
    for (int i = 0; i < n_dims; i++) full[GML_MAX_DIMS - n_dims + i] = shape[i];
    size_t nb[GML_MAX_DIMS];
    gml_contiguous_strides(a->type, full, nb);
    return gml_new_view(ctx, GML_OP_RESHAPE, a, n_dims, shape, nb + GML_MAX_DIMS - n_dims, 0,
                        "reshaped");
}

static gml_tensor *build_reshape(gml_context *ctx, const gml_arg *v) {
    return gml_reshape(ctx, v[0].t, v[1].n, v[1].list);
}

static void reshape_args(const gml_tensor *t, gml_arg *v) {
    v[0].t = t->src[0];
    v[1].n = t->n_dims;
    memcpy(v[1].list, t->ne + GML_MAX_DIMS - t->n_dims, (size_t)t->n_dims * sizeof *t->ne);
}

/* reshape: dy reshaped back (made contiguous first when it is not) */
static bool reshape_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    gml_context *ctx = gml_backward_context(b);
    gml_tensor *a = node->src[0];
    gml_tensor *c = gml_is_contiguous(dy) ? dy : gml_cont(ctx, dy);
    return gml_backward_add(b, a, gml_reshape(ctx, c, a->n_dims, a->ne + GML_MAX_DIMS - a->n_dims));
}

const gml_op_def gml_opdef_reshape = {
    .flags = GML_OPF_NOOP,
    GML_ARGS(GML_T("a"), GML_REQ("shape", INTS)),
    .build = build_reshape,
    .get_args = reshape_args,
    .doc_args = "a contiguous; same element count",
    .doc_result = "a view `[shape]`",
    .backward = reshape_backward,
};

/* a [d0, .., dn-1] -> [d_perm[0], .., d_perm[n-1]] */
gml_tensor *gml_permute(gml_context *ctx, gml_tensor *a, const int *perm) {
    GML_ENTER(ctx, 1, a);
    if (!perm) return gml_fail(ctx, "gml_permute: perm is NULL");
    char sa[GML_SHAPE_MAX], sp[GML_SHAPE_MAX];
    int n = a->n_dims;
    int64_t p64[GML_MAX_DIMS];
    for (int i = 0; i < n; i++) p64[i] = perm[i];
    format_list(sp, sizeof sp, n, p64);
    bool seen[GML_MAX_DIMS] = {false};
    int axes[GML_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        int d = perm[i] < 0 ? perm[i] + n : perm[i];
        if (d < 0 || d >= n || seen[d])
            return gml_fail(ctx, "permute(%s): axes %s are not a permutation of 0..%d for a "
                            "%d-D input %s", a->name, sp, n - 1, n, GML_SHAPE(a, sa));
        seen[d] = true;
        axes[i] = d;
    }
    int64_t ne[GML_MAX_DIMS];
    size_t nb[GML_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        int ax = GML_MAX_DIMS - n + axes[i];
        ne[i] = a->ne[ax];
        nb[i] = a->nb[ax];
    }
    gml_tensor *t = gml_new_view(ctx, GML_OP_PERMUTE, a, n, ne, nb, 0, "permuted");
    if (t) {
        permute_params p = {{0}};
        for (int i = 0; i < n; i++) p.axes[i] = axes[i];
        gml_set_params(t, &p, sizeof p);
    }
    return t;
}

static gml_tensor *build_permute(gml_context *ctx, const gml_arg *v) {
    gml_tensor *a = v[0].t;
    char s[GML_SHAPE_MAX];
    if (v[1].n != a->n_dims)
        return gml_fail(ctx, "permute(%s): %d axes for a %d-D input %s", a->name, v[1].n,
                        a->n_dims, GML_SHAPE(a, s));
    int axes[GML_MAX_DIMS];
    for (int i = 0; i < v[1].n; i++)
        if (!gml_arg_dim(ctx, "permute", a, "axis", v[1].list[i], &axes[i])) return NULL;
    return gml_permute(ctx, a, axes);
}

static void permute_args(const gml_tensor *t, gml_arg *v) {
    permute_params p;
    gml_get_params(t, &p, sizeof p);
    v[0].t = t->src[0];
    v[1].n = t->n_dims;
    for (int i = 0; i < t->n_dims; i++) v[1].list[i] = p.axes[i];
}

/* permute: dy permuted by the inverse */
static bool permute_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    permute_params p;
    gml_get_params(node, &p, sizeof p);
    int inv[GML_MAX_DIMS];
    for (int i = 0; i < node->n_dims; i++) inv[p.axes[i]] = i;
    return gml_backward_add(b, node->src[0], gml_permute(gml_backward_context(b), dy, inv));
}

const gml_op_def gml_opdef_permute = {
    .flags = GML_OPF_NOOP,
    GML_ARGS(GML_T("a"), GML_REQ("axes", INTS)),
    .build = build_permute,
    .get_args = permute_args,
    .doc_args = "PyTorch's order: `out.shape[i] = a.shape[axes[i]]`",
    .doc_result = "a view",
    .backward = permute_backward,
};

/* a -> a with dims d0 and d1 swapped */
gml_tensor *gml_transpose(gml_context *ctx, gml_tensor *a, int d0, int d1) {
    GML_ENTER(ctx, 1, a);
    char sa[GML_SHAPE_MAX];
    int n = a->n_dims;
    int x0 = d0 < 0 ? d0 + n : d0, x1 = d1 < 0 ? d1 + n : d1;
    if (x0 < 0 || x0 >= n || x1 < 0 || x1 >= n)
        return gml_fail(ctx, "transpose(%s): dims (%d, %d) out of range for a %d-D input %s",
                        a->name, d0, d1, n, GML_SHAPE(a, sa));
    int64_t ne[GML_MAX_DIMS];
    size_t nb[GML_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        int src = i == x0 ? x1 : i == x1 ? x0 : i;
        ne[i] = a->ne[GML_MAX_DIMS - n + src];
        nb[i] = a->nb[GML_MAX_DIMS - n + src];
    }
    gml_tensor *t = gml_new_view(ctx, GML_OP_TRANSPOSE, a, n, ne, nb, 0, "transposed");
    if (t) gml_set_params(t, &(transpose_params){x0, x1}, sizeof(transpose_params));
    return t;
}

static gml_tensor *build_transpose(gml_context *ctx, const gml_arg *v) {
    int d0, d1;
    if (!gml_arg_dim(ctx, "transpose", v[0].t, "dim", v[1].i, &d0) ||
        !gml_arg_dim(ctx, "transpose", v[0].t, "dim", v[2].i, &d1))
        return NULL;
    return gml_transpose(ctx, v[0].t, d0, d1);
}

static void transpose_args(const gml_tensor *t, gml_arg *v) {
    transpose_params p;
    gml_get_params(t, &p, sizeof p);
    v[0].t = t->src[0];
    v[1].i = p.d0;
    v[2].i = p.d1;
}

static bool transpose_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    transpose_params p;
    gml_get_params(node, &p, sizeof p);
    return gml_backward_add(b, node->src[0], gml_transpose(gml_backward_context(b), dy, p.d0, p.d1));
}

const gml_op_def gml_opdef_transpose = {
    .flags = GML_OPF_NOOP,
    GML_ARGS(GML_T("a"), GML_REQ("d0", INT), GML_REQ("d1", INT)),
    .build = build_transpose,
    .get_args = transpose_args,
    .doc_args = "dims (negative from the end)",
    .doc_result = "a view with d0, d1 swapped",
    .backward = transpose_backward,
};

/* t [...] -> the same view of t's data, with dep as a second source: a graph
 * computes dep before any reader of the result. */
gml_tensor *gml_after(gml_context *ctx, gml_tensor *t, gml_tensor *dep) {
    GML_ENTER(ctx, 2, t, dep);
    gml_tensor *r = gml_new_view(ctx, GML_OP_AFTER, t, t->n_dims, t->ne + GML_MAX_DIMS - t->n_dims,
                                 t->nb + GML_MAX_DIMS - t->n_dims, 0, "after");
    if (!r) return NULL;
    r->src[1] = dep;
    snprintf(r->name, sizeof r->name, "%.*s (after %.*s)", GML_MAX_NAME / 2 - 8, t->name,
             GML_MAX_NAME / 2 - 8, dep->name);
    return r;
}

static gml_tensor *build_after(gml_context *ctx, const gml_arg *v) {
    return gml_after(ctx, v[0].t, v[1].t);
}

static void after_args(const gml_tensor *t, gml_arg *v) {
    v[0].t = t->src[0];
    v[1].t = t->src[1];
}

/* after(t, dep): t's gradient passes; none to dep (an ordering). A dep that
 * writes into t's storage (cpy, set_rows into a cache the graph then reads
 * whole) changes t's values where the data flow does not show it: refused
 * when a gradient would have to pass that write. */
static bool after_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    gml_tensor *t = node->src[0], *dep = node->src[1];
    const gml_tensor *rt = t->view_src ? t->view_src : t, *rd = dep->view_src ? dep->view_src : dep;
    if (rt == rd)
        return gml_backward_fail(b, "'%s' writes into the storage of '%s' that the graph reads "
                                 "after it; gradients through such writes are not computed",
                                 dep->name, t->name);
    return gml_backward_add(b, t, dy);
}

const gml_op_def gml_opdef_after = {
    .flags = GML_OPF_NOOP,
    GML_ARGS(GML_T("t"), GML_T("dep")),
    .build = build_after,
    .get_args = after_args,
    .doc_args = "any",
    .doc_result = "t (a view), computed after dep: orders a reader of t after a write into it "
                  "that the data flow does not show",
    .backward = after_backward,
};

typedef struct slice_params {
    int32_t dim;   /* PyTorch's dim, 0..n-1 */
    int32_t pad;
    int64_t start; /* 0..size-1 along dim */
} slice_params;
GML_PARAMS_FIT(slice_params);

/* x [.., n, ..] -> out [.., len, ..]: elements start..start+len-1 along dim
 * (negative from the end); a negative start counts from the end of dim, as
 * torch.narrow's. A view: x's strides, start * stride bytes further in. */
gml_tensor *gml_slice(gml_context *ctx, gml_tensor *x, int dim, int64_t start, int64_t len) {
    GML_ENTER(ctx, 1, x);
    char sx[GML_SHAPE_MAX];
    const int axis = gml_axis(x, dim);
    if (axis < 0)
        return gml_fail(ctx, "slice(%s): dim %d is out of range for a %d-D input %s %s", x->name,
                        dim, x->n_dims, x->name, GML_SHAPE(x, sx));
    const int64_t n = x->ne[axis];
    const int d = axis - (GML_MAX_DIMS - x->n_dims); /* dim as 0..n-1 */
    if (start < -n || start >= n)
        return gml_fail(ctx, "slice(%s): start %" PRId64 " is out of range for dim %d of size %"
                        PRId64 " in %s %s (start is in [-%" PRId64 ", %" PRId64 "), negative "
                        "from the end)", x->name, start, dim, n, x->name, GML_SHAPE(x, sx), n, n);
    const int64_t s = start < 0 ? start + n : start;
    if (len < 1)
        return gml_fail(ctx, "slice(%s): len %" PRId64 " along dim %d of %s %s; a slice has at "
                        "least one element", x->name, len, dim, x->name, GML_SHAPE(x, sx));
    if (len > n - s)
        return gml_fail(ctx, "slice(%s): start %" PRId64 " + len %" PRId64 " goes past dim %d of "
                        "size %" PRId64 " in %s %s", x->name, start, len, dim, n, x->name,
                        GML_SHAPE(x, sx));
    int64_t ne[GML_MAX_DIMS];
    for (int i = 0; i < GML_MAX_DIMS; i++) ne[i] = x->ne[i];
    ne[axis] = len;
    const int lead = GML_MAX_DIMS - x->n_dims;
    gml_tensor *t = gml_new_view(ctx, GML_OP_SLICE, x, x->n_dims, ne + lead, x->nb + lead,
                                 (size_t)s * x->nb[axis], "sliced");
    if (t) gml_set_params(t, &(slice_params){d, 0, s}, sizeof(slice_params));
    return t;
}

static gml_tensor *build_slice(gml_context *ctx, const gml_arg *v) {
    int dim;
    if (!gml_arg_dim(ctx, "slice", v[0].t, "dim", v[1].i, &dim)) return NULL;
    return gml_slice(ctx, v[0].t, dim, v[2].i, v[3].i);
}

static void slice_args(const gml_tensor *t, gml_arg *v) {
    slice_params p;
    gml_get_params(t, &p, sizeof p);
    v[0].t = t->src[0];
    v[1].i = p.dim;
    v[2].i = p.start;
    v[3].i = t->ne[GML_MAX_DIMS - t->n_dims + p.dim];
}

/* slice: dy placed at start along dim of zeros of x's shape */
static bool slice_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dy) {
    slice_params p;
    gml_get_params(node, &p, sizeof p);
    gml_tensor *x = node->src[0];
    const int n = x->n_dims;
    int64_t st[GML_MAX_DIMS], s = 1;
    for (int d = n - 1; d >= 0; d--) {
        st[d] = s;
        s *= x->ne[GML_MAX_DIMS - n + d];
    }
    return gml_backward_add(b, x, gml_view_back(gml_backward_context(b), dy, n,
                                                x->ne + GML_MAX_DIMS - n, st, p.start * st[p.dim]));
}

const gml_op_def gml_opdef_slice = {
    .flags = GML_OPF_NOOP,
    GML_ARGS(GML_T("x"), GML_REQ("dim", INT), GML_REQ("start", INT), GML_REQ("len", INT)),
    .build = build_slice,
    .get_args = slice_args,
    .doc_args = "dim and start negative from the end (torch.narrow); start + len <= size",
    .doc_result = "a view: len elements along dim from start (no copy)",
    .backward = slice_backward,
};

/* ---- view_back: a view's gradient, scattered back --------------------------- */

typedef struct view_back_params {
    int64_t strides[GML_MAX_DIMS]; /* in elements of the result, for dy's dims (as written) */
    int64_t offset;                /* in elements */
} view_back_params;
GML_PARAMS_FIT(view_back_params);

static view_back_params view_back_of(const gml_tensor *t) {
    view_back_params p;
    gml_get_params(t, &p, sizeof p);
    return p;
}

/* out [shape] f32 contiguous: zeros, plus out.flat[offset + sum_k i_k
 * strides_k] += dy[i] for every element i of dy, in row-major order of i.
 * Threads split out's elements; each zeroes its own and goes through all of
 * dy, adding what lands in them, so every output element sums its terms in
 * the same order at any thread count. */
static void gml_f32_view_back__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *dy = dst->src[0];
    const view_back_params vp = view_back_of(dst);
    int64_t st[GML_MAX_DIMS] = {0, 0, 0, 0};
    for (int d = 0; d < dy->n_dims; d++) st[GML_MAX_DIMS - dy->n_dims + d] = vp.strides[d];
    int64_t e0, e1;
    gml_split(gml_nelements(dst), p->ith, p->nth, &e0, &e1);
    float *out = dst->data;
    for (int64_t e = e0; e < e1; e++) out[e] = 0.0f;
    for (int64_t r = 0; r < gml_nrows(dy); r++) {
        int64_t i0, i1, i2;
        gml_row_index(dy, r, &i0, &i1, &i2);
        const int64_t base = vp.offset + i0 * st[0] + i1 * st[1] + i2 * st[2];
        const char *row = gml_ptr(dy, i0, i1, i2, 0);
        for (int64_t j = 0; j < dy->ne[3]; j++) {
            const int64_t at = base + j * st[3];
            if (at >= e0 && at < e1) out[at] += *(const float *)(row + j * (int64_t)dy->nb[3]);
        }
    }
}

/* Does each place of out get at most one element of dy? The strides of
 * dy's dims (of more than one element), in ascending order, each at least
 * the extent of the ones below it. */
static bool view_back_disjoint(const gml_tensor *dy, const int64_t st[GML_MAX_DIMS]) {
    int64_t s[GML_MAX_DIMS], n[GML_MAX_DIMS];
    int m = 0;
    for (int d = 0; d < GML_MAX_DIMS; d++) {
        if (dy->ne[d] == 1) continue;
        int k = m++;
        for (; k > 0 && s[k - 1] > st[d]; k--) {
            s[k] = s[k - 1];
            n[k] = n[k - 1];
        }
        s[k] = st[d];
        n[k] = dy->ne[d];
    }
    int64_t extent = 1;
    for (int k = 0; k < m; k++) {
        if (s[k] < extent) return false;
        extent += (n[k] - 1) * s[k];
    }
    return true;
}

/* The fast kernel, where each place gets at most one element of dy and
 * dy's rows land contiguous (its last stride 1, its rows dense): each
 * thread zeroes its share of out and fills the parts of dy's rows that
 * land in it with dy + 0 (the vaddc micro-kernel; the reference's 0 + dy,
 * a -0 made +0), so each element is the reference's; else the reference. */
static void gml_f32_view_back(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *dy = dst->src[0];
    const view_back_params vp = view_back_of(dst);
    int64_t st[GML_MAX_DIMS] = {0, 0, 0, 0};
    for (int d = 0; d < dy->n_dims; d++) st[GML_MAX_DIMS - dy->n_dims + d] = vp.strides[d];
    const int64_t n3 = dy->ne[3];
    if (!view_back_disjoint(dy, st) || (n3 > 1 && (st[3] != 1 || dy->nb[3] != sizeof(float)))) {
        gml_kernel_note(p, "reference (places shared, or dy's rows not contiguous in both)");
        gml_f32_view_back__ref(p, dst);
        return;
    }
    gml_f32_vbinary_ukernel *const fn = GML_PICK_UKERNEL(p->isa, GML_F32_VADDC_UKERNELS, gml_f32_vbinary_ukernel);
    gml_kernel_note(p, GML_PICK_UKERNEL_NAME(p->isa, GML_F32_VADDC_UKERNELS));
    int64_t e0, e1;
    gml_split_elements(gml_nelements(dst), p->ith, p->nth, &e0, &e1);
    float *out = dst->data;
    if (e1 > e0) memset(out + e0, 0, (size_t)(e1 - e0) * sizeof(float));
    const float zero = 0.0f;
    for (int64_t r = 0; r < gml_nrows(dy) && e1 > e0; r++) {
        int64_t i0, i1, i2;
        gml_row_index(dy, r, &i0, &i1, &i2);
        const int64_t base = vp.offset + i0 * st[0] + i1 * st[1] + i2 * st[2];
        const int64_t lo = GML_MAX(base, e0), hi = GML_MIN(base + n3, e1);
        if (lo < hi)
            fn((size_t)(hi - lo), (const float *)(const void *)gml_ptr(dy, i0, i1, i2, lo - base), &zero,
               out + lo);
    }
}

/* dy [...] f32 -> out [ne...] f32: the gradient of a view, scattered back
 * (out.flat[offset + sum_k i_k strides_k] += dy[i]); every position within
 * out. */
gml_tensor *gml_view_back(gml_context *ctx, gml_tensor *dy, int n_dims, const int64_t *ne,
                          const int64_t *strides, int64_t offset) {
    GML_ENTER(ctx, 1, dy);
    if (!ne || !strides) return gml_fail(ctx, "gml_view_back: %s is NULL", !ne ? "ne" : "strides");
    if (!gml_expect_type(ctx, "view_back", dy, GML_F32)) return NULL;
    gml_tensor *t = gml_new_op(ctx, GML_OP_VIEW_BACK, GML_F32, n_dims, ne, &dy, 1);
    if (!t) return NULL;
    char sd[GML_SHAPE_MAX], ss[GML_SHAPE_MAX], so[GML_SHAPE_MAX];
    int64_t last = offset; /* the last position dy reaches */
    bool ok = offset >= 0;
    for (int d = 0; d < dy->n_dims; d++) {
        ok = ok && strides[d] >= 0 && strides[d] <= ((int64_t)1 << 40);
        if (ok) last += (dy->ne[GML_MAX_DIMS - dy->n_dims + d] - 1) * strides[d];
    }
    format_list(ss, sizeof ss, dy->n_dims, strides);
    if (!ok || last >= gml_nelements(t))
        return gml_fail(ctx, "view_back(%s): %s %s with strides %s at offset %" PRId64 " reaches "
                        "past the %" PRId64 " elements of %s", dy->name, dy->name,
                        GML_SHAPE(dy, sd), ss, offset, gml_nelements(t), GML_SHAPE(t, so));
    view_back_params vp = {{0}, offset};
    for (int d = 0; d < dy->n_dims; d++) vp.strides[d] = strides[d];
    gml_set_params(t, &vp, sizeof vp);
    return t;
}

static gml_tensor *build_view_back(gml_context *ctx, const gml_arg *v) {
    char s[GML_SHAPE_MAX];
    if (v[2].n != v[0].t->n_dims)
        return gml_fail(ctx, "view_back(%s): %d strides for a %d-D dy %s", v[0].t->name, v[2].n,
                        v[0].t->n_dims, GML_SHAPE(v[0].t, s));
    return gml_view_back(ctx, v[0].t, v[1].n, v[1].list, v[2].list, v[3].given ? v[3].i : 0);
}

static void view_back_args(const gml_tensor *t, gml_arg *v) {
    const view_back_params vp = view_back_of(t);
    v[0].t = t->src[0];
    v[1].n = t->n_dims;
    memcpy(v[1].list, t->ne + GML_MAX_DIMS - t->n_dims, (size_t)t->n_dims * sizeof *t->ne);
    v[2].n = t->src[0]->n_dims;
    memcpy(v[2].list, vp.strides, (size_t)v[2].n * sizeof *vp.strides);
    v[3].i = vp.offset;
}

static double view_back_flops(const gml_tensor *dst) { return (double)gml_nelements(dst->src[0]); }

const gml_op_def gml_opdef_view_back = {
    .forward = gml_f32_view_back,
    .reference = gml_f32_view_back__ref,
    .flops = view_back_flops,
    .flags = GML_OPF_MOVES_VALUES,
    GML_ARGS(GML_T("dy"), GML_REQ("shape", INTS), GML_REQ("strides", INTS),
             GML_OPT("offset", INT, "0")),
    .build = build_view_back,
    .get_args = view_back_args,
    .doc_args = "dy `[...]` f32; strides (in elements of the result, one per dim of dy) and "
                "offset place each element of dy in the result",
    .doc_result = "f32 `[shape]`: zeros, dy's elements added at their places (the gradient of a "
                  "view or slice; repeated places add up in dy's row-major order)",
};

