/* Views: view, reshape, permute, transpose, and after (a dependency edge).
 * Each makes a new header over the same data (sizes and byte strides
 * rearranged); nothing is copied and no kernel runs. */
#include "view.h"

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
    if (!a) return NULL;
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

const gml_op_def gml_opdef_view = {
    .flags = GML_OPF_NOOP,
    GML_ARGS(GML_T("a"), GML_REQ("shape", INTS), GML_REQ("strides", INTS),
             GML_OPT("offset", INT, "0")),
    .build = build_view,
    .get_args = view_args,
    .doc_args = "sizes, strides in elements, offset in elements",
    .doc_result = "a view of a's data (no copy); every element must lie inside a",
};

/* a contiguous [..] -> [ne...] with the same element count; one size may be -1 */
gml_tensor *gml_reshape(gml_context *ctx, gml_tensor *a, int n_dims, const int64_t *ne) {
    if (!a) return NULL;
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

const gml_op_def gml_opdef_reshape = {
    .flags = GML_OPF_NOOP,
    GML_ARGS(GML_T("a"), GML_REQ("shape", INTS)),
    .build = build_reshape,
    .get_args = reshape_args,
    .doc_args = "a contiguous; same element count",
    .doc_result = "a view `[shape]`",
};

/* a [d0, .., dn-1] -> [d_perm[0], .., d_perm[n-1]] */
gml_tensor *gml_permute(gml_context *ctx, gml_tensor *a, const int *perm) {
    if (!a) return NULL;
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

const gml_op_def gml_opdef_permute = {
    .flags = GML_OPF_NOOP,
    GML_ARGS(GML_T("a"), GML_REQ("axes", INTS)),
    .build = build_permute,
    .get_args = permute_args,
    .doc_args = "PyTorch's order: `out.shape[i] = a.shape[axes[i]]`",
    .doc_result = "a view",
};

/* a -> a with dims d0 and d1 swapped */
gml_tensor *gml_transpose(gml_context *ctx, gml_tensor *a, int d0, int d1) {
    if (!a) return NULL;
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

const gml_op_def gml_opdef_transpose = {
    .flags = GML_OPF_NOOP,
    GML_ARGS(GML_T("a"), GML_REQ("d0", INT), GML_REQ("d1", INT)),
    .build = build_transpose,
    .get_args = transpose_args,
    .doc_args = "dims (negative from the end)",
    .doc_result = "a view with d0, d1 swapped",
};

/* t [...] -> the same view of t's data, with dep as a second source: a graph
 * computes dep before any reader of the result. */
gml_tensor *gml_after(gml_context *ctx, gml_tensor *t, gml_tensor *dep) {
    if (!t || !dep) return NULL;
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

const gml_op_def gml_opdef_after = {
    .flags = GML_OPF_NOOP,
    GML_ARGS(GML_T("t"), GML_T("dep")),
    .build = build_after,
    .get_args = after_args,
    .doc_args = "any",
    .doc_result = "t (a view), computed after dep: orders a reader of t after a write into it "
                  "that the data flow does not show",
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
    if (!x) return NULL;
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

const gml_op_def gml_opdef_slice = {
    .flags = GML_OPF_NOOP,
    GML_ARGS(GML_T("x"), GML_REQ("dim", INT), GML_REQ("start", INT), GML_REQ("len", INT)),
    .build = build_slice,
    .get_args = slice_args,
    .doc_args = "dim and start negative from the end (torch.narrow); start + len <= size",
    .doc_result = "a view: len elements along dim from start (no copy)",
};
