/* What the layers share: parameter and input checks, weights bound by
 * Hugging Face name (strictly), Conv1D. */
#include "layers_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

bool gml_lay_fail(gml_context *ctx, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    gml_set_error_v(ctx, fmt, ap);
    va_end(ap);
    return false;
}

bool gml_lay_check_param(gml_context *ctx, const char *layer, const gml_tensor *t, const char *name,
                         bool required, int64_t rows, int64_t cols, const char *what) {
    if (!t) {
        if (!required) return true;
        return gml_lay_fail(ctx, "%s: %s is missing (NULL), expected %s", layer, name, what);
    }
    /* matrices may be f16, bf16 or q8_0 (linear converts them); vectors f32 */
    const bool type_ok =
        t->type == GML_F32 ||
        (cols >= 0 && (t->type == GML_F16 || t->type == GML_BF16 || t->type == GML_Q8_0));
    bool ok = type_ok &&
              (cols < 0 ? t->n_dims == 1 && t->ne[3] == rows
                        : t->n_dims == 2 && t->ne[2] == rows && t->ne[3] == cols);
    if (ok) return true;
    char st[GML_SHAPE_MAX], want[64];
    if (cols < 0)
        snprintf(want, sizeof want, "[%" PRId64 "]", rows);
    else
        snprintf(want, sizeof want, "[%" PRId64 ",%" PRId64 "]", rows, cols);
    return gml_lay_fail(ctx, "%s: %s is %s %s, expected %s %s (%s)", layer, name,
                        gml_type_name(t->type), GML_LAY_SHAPE(t, st),
                        !type_ok && cols >= 0 ? "f32, f16, bf16 or q8_0"
                        : type_ok             ? gml_type_name(t->type)
                                              : "f32",
                        want, what);
}

bool gml_lay_check_input(gml_context *ctx, const char *layer, const gml_tensor *x, int64_t *B,
                         int64_t *T, int64_t *D) {
    char sx[GML_SHAPE_MAX];
    if (x->type != GML_F32 || x->n_dims != 3)
        return gml_lay_fail(ctx, "%s: x '%s' is %s %s, expected f32 [B, T, D]", layer, x->name,
                            gml_type_name(x->type), GML_LAY_SHAPE(x, sx));
    *B = x->ne[1];
    *T = x->ne[2];
    *D = x->ne[3];
    return true;
}

/* ---- weights by name ------------------------------------------------------- */

/* Appends s to buf (of size), truncating with "..." when full. */
static void append(char *buf, size_t size, size_t *len, const char *s) {
    if (*len + 1 >= size) return;
    int n = snprintf(buf + *len, size - *len, "%s", s);
    if (n < 0) return;
    if ((size_t)n >= size - *len) {
        *len = size - 1;
        if (size > 4) memcpy(buf + size - 4, "...", 4);
    } else {
        *len += (size_t)n;
    }
}

gml_status gml_lay_weights_find(const char *layer, gml_context *wctx, const char *prefix,
                                const gml_lay_name *names, int n_names, void *w, char *err,
                                size_t err_size) {
    if (err_size) err[0] = '\0';
    if (!prefix) prefix = "";
    if (!wctx) {
        if (err_size) snprintf(err, err_size, "%s weights: no weights context (NULL)", layer);
        return GML_ERR_INVALID;
    }
    const size_t plen = strlen(prefix);
    char unknown[768] = "", missing[768] = "";
    size_t ulen = 0, mlen = 0;
    int n_unknown = 0, n_missing = 0;
    for (gml_tensor *t = gml_get_first_tensor(wctx); t; t = gml_get_next_tensor(wctx, t)) {
        if (strncmp(t->name, prefix, plen) != 0) continue;
        const char *rest = t->name + plen;
        int i = 0;
        while (i < n_names && strcmp(names[i].name, rest) != 0) i++;
        if (i == n_names) {
            append(unknown, sizeof unknown, &ulen, n_unknown++ ? ", " : "");
            append(unknown, sizeof unknown, &ulen, t->name);
            continue;
        }
        if (names[i].offset >= 0) *(gml_tensor **)((char *)w + names[i].offset) = t;
    }
    for (int i = 0; i < n_names; i++) {
        if (!names[i].required || *(gml_tensor **)((char *)w + names[i].offset)) continue;
        append(missing, sizeof missing, &mlen, n_missing++ ? ", " : "");
        append(missing, sizeof missing, &mlen, prefix);
        append(missing, sizeof missing, &mlen, names[i].name);
    }
    if (!n_unknown && !n_missing) return GML_OK;
    if (err_size) {
        if (n_missing && n_unknown)
            snprintf(err, err_size, "%s weights: missing %s; not %s weights: %s", layer, missing,
                     layer, unknown);
        else if (n_missing)
            snprintf(err, err_size, "%s weights: missing %s", layer, missing);
        else
            snprintf(err, err_size, "%s weights: tensor%s not of a %s layer: %s", layer,
                     n_unknown > 1 ? "s" : "", layer, unknown);
    }
    return GML_ERR_INVALID;
}

/* ---- attention ------------------------------------------------------------- */

gml_tensor *gml_lay_conv1d_as_linear(gml_context *ctx, gml_tensor *t, int64_t c0, int64_t n,
                                     const char *name) {
    if (!t) return NULL;
    if (n > 0 && t->n_dims == 2)
        t = gml_view(ctx, t, 2, (int64_t[]){t->ne[2], n}, (size_t[]){t->nb[2], t->nb[3]},
                     (size_t)c0 * t->nb[3]);
    else if (n > 0)
        t = gml_view(ctx, t, 1, (int64_t[]){n}, (size_t[]){t->nb[3]}, (size_t)c0 * t->nb[3]);
    if (t && t->n_dims == 2) t = gml_transpose(ctx, t, 0, 1);
    return gml_set_name(t, name);
}

gml_tensor *gml_lay_conv1d(gml_context *ctx, gml_tensor *x, gml_tensor *w, gml_tensor *b) {
    gml_tensor *y = gml_matmul(ctx, x, w);
    return b ? gml_add(ctx, y, b) : y;
}
