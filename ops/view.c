/* Views: view, reshape, permute, transpose, and after (a dependency edge).
 * Each makes a new header over the same data (sizes and byte strides
 * rearranged); nothing is copied and no kernel runs. */
#include "internal.h"

#include <string.h>

const gml_op_def gml_opdef_view = {.name = "view", .flags = GML_OPF_NOOP};
const gml_op_def gml_opdef_reshape = {.name = "reshape", .flags = GML_OPF_NOOP};
const gml_op_def gml_opdef_permute = {.name = "permute", .flags = GML_OPF_NOOP};
const gml_op_def gml_opdef_transpose = {.name = "transpose", .flags = GML_OPF_NOOP};
const gml_op_def gml_opdef_after = {.name = "after", .flags = GML_OPF_NOOP};

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
    size_t esize = gml_type_size(a->type);
    size_t last = offset; /* byte offset of the last element */
    bool overflow = false;
    for (int i = 0; i < n_dims; i++) {
        nbi[i] = (int64_t)nb[i];
        if (ne[i] < 1)
            return gml_fail(ctx, "view(%s): size %" PRId64 " of dim %d in %s; sizes must be >= 1",
                            a->name, ne[i], i, sn);
        if (nb[i] && (uint64_t)(ne[i] - 1) > (SIZE_MAX - last) / nb[i]) overflow = true;
        else last += (size_t)(ne[i] - 1) * nb[i];
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
    if (t) {
        t->op_params[0] = (int32_t)(offset & 0x7fffffff);
        t->op_params[1] = (int32_t)(offset >> 31);
    }
    return t;
}

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
    if (t)
        for (int i = 0; i < n; i++) t->op_params[i] = axes[i];
    return t;
}

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
    if (t) {
        t->op_params[0] = x0;
        t->op_params[1] = x1;
    }
    return t;
}

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
