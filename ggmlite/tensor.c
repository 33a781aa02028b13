/* Tensor queries: sizes, strides, contiguity, shapes as text, element access. */
#include "internal.h"

#include <assert.h>
#include <math.h>
#include <string.h>

int64_t gml_nelements(const gml_tensor *t) {
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

size_t gml_nbytes(const gml_tensor *t) {
    size_t n = gml_type_size(t->type);
    for (int i = 0; i < GML_MAX_DIMS; i++) n += (size_t)(t->ne[i] - 1) * t->nb[i];
    return n;
}

size_t gml_storage_extent(const gml_tensor *t) { return t->view_offs + gml_nbytes(t); }

int64_t gml_dim(const gml_tensor *t, int d) {
    int ax = gml_axis(t, d);
    return ax < 0 ? 0 : t->ne[ax];
}

bool gml_is_contiguous(const gml_tensor *t) {
    size_t want = gml_type_size(t->type);
    for (int i = GML_MAX_DIMS - 1; i >= 0; i--) {
        if (t->ne[i] != 1 && t->nb[i] != want) return false;
        want *= (size_t)t->ne[i];
    }
    return true;
}

bool gml_is_view(const gml_tensor *t) { return t->view_src != NULL; }

bool gml_same_shape(const gml_tensor *a, const gml_tensor *b) {
    if (a->n_dims != b->n_dims) return false;
    for (int i = 0; i < GML_MAX_DIMS; i++)
        if (a->ne[i] != b->ne[i]) return false;
    return true;
}

char *gml_format_shape(const gml_tensor *t, char *buf, size_t size) {
    if (!t) {
        snprintf(buf, size, "(null)");
        return buf;
    }
    size_t n = 0;
    n += (size_t)snprintf(buf + n, size > n ? size - n : 0, "[");
    for (int i = GML_MAX_DIMS - t->n_dims; i < GML_MAX_DIMS; i++)
        n += (size_t)snprintf(buf + n, size > n ? size - n : 0, "%s%" PRId64,
                              i > GML_MAX_DIMS - t->n_dims ? "," : "", t->ne[i]);
    snprintf(buf + n, size > n ? size - n : 0, "]");
    return buf;
}

char *gml_format_call(const char *op, gml_tensor *const *src, int n_src, char *buf, size_t size) {
    size_t n = (size_t)snprintf(buf, size, "%s", op);
    int named = 0;
    for (int i = 0; i < n_src; i++) {
        if (!src[i]) continue;
        n += (size_t)snprintf(buf + GML_MIN(n, size), n < size ? size - n : 0, "%s%s",
                              named++ ? ", " : "(", src[i]->name);
    }
    if (named) snprintf(buf + GML_MIN(n, size), n < size ? size - n : 0, ")");
    return buf;
}

/* The address of element idx of t (n_dims indices, outermost first), or NULL
 * when the call is a mistake: no tensor or index, a type other than want, no
 * data, or an index outside [0, size). Always checked, also without asserts:
 * a bad index must never read or write outside the tensor. */
static char *elem_ptr(const gml_tensor *t, const int64_t *idx, gml_type want) {
    if (!t || !idx || t->type != want || !t->data) return NULL;
    if (t->n_dims < 1 || t->n_dims > GML_MAX_DIMS) return NULL;
    int64_t i[GML_MAX_DIMS] = {0, 0, 0, 0};
    for (int d = 0; d < t->n_dims; d++) {
        const int ax = GML_MAX_DIMS - t->n_dims + d;
        if (idx[d] < 0 || idx[d] >= t->ne[ax]) return NULL;
        i[ax] = idx[d];
    }
    return gml_ptr(t, i[0], i[1], i[2], i[3]);
}

float gml_get_f32(const gml_tensor *t, const int64_t *idx) {
    const char *p = elem_ptr(t, idx, GML_F32);
    if (!p) return NAN;
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

bool gml_set_f32(gml_tensor *t, const int64_t *idx, float v) {
    char *p = elem_ptr(t, idx, GML_F32);
    if (p) memcpy(p, &v, sizeof v);
    return p != NULL;
}

int32_t gml_get_i32(const gml_tensor *t, const int64_t *idx) {
    const char *p = elem_ptr(t, idx, GML_I32);
    if (!p) return INT32_MIN;
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

bool gml_set_i32(gml_tensor *t, const int64_t *idx, int32_t v) {
    char *p = elem_ptr(t, idx, GML_I32);
    if (p) memcpy(p, &v, sizeof v);
    return p != NULL;
}

bool gml_broadcast_shape(gml_context *ctx, const char *op, const gml_tensor *a,
                         const gml_tensor *b, int64_t ne[GML_MAX_DIMS], int *n_dims) {
    for (int i = 0; i < GML_MAX_DIMS; i++) {
        if (a->ne[i] != b->ne[i] && a->ne[i] != 1 && b->ne[i] != 1) {
            char sa[GML_SHAPE_MAX], sb[GML_SHAPE_MAX];
            int n = GML_MAX(a->n_dims, b->n_dims);
            gml_fail(ctx, "%s(%s, %s): shapes %s and %s do not broadcast (dim %d of the result: "
                     "%" PRId64 " vs %" PRId64 ")", op, a->name, b->name, GML_SHAPE(a, sa),
                     GML_SHAPE(b, sb), i - (GML_MAX_DIMS - n), a->ne[i], b->ne[i]);
            return false;
        }
        ne[i] = GML_MAX(a->ne[i], b->ne[i]);
    }
    *n_dims = GML_MAX(a->n_dims, b->n_dims);
    return true;
}

bool gml_broadcasts_to(const gml_tensor *a, const gml_tensor *t) {
    if (a->n_dims > t->n_dims) return false;
    for (int i = 0; i < GML_MAX_DIMS; i++)
        if (a->ne[i] != 1 && a->ne[i] != t->ne[i]) return false;
    return true;
}

bool gml_expect_type(gml_context *ctx, const char *op, const gml_tensor *t, gml_type want) {
    if (t->type == want) return true;
    char s[GML_SHAPE_MAX];
    gml_fail(ctx, "%s(%s): '%s' must be %s, got %s %s", op, t->name, t->name, gml_type_name(want),
             gml_type_name(t->type), GML_SHAPE(t, s));
    return false;
}
