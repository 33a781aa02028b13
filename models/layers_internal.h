/* What the layers (llama.c, gpt2.c, bert.c) share: parameter checks, binding
 * weights by Hugging Face name, Conv1D. Public API only (ggmlite.h and the
 * attention stages). */
#ifndef GGMLITE_LAYERS_INTERNAL_H
#define GGMLITE_LAYERS_INTERNAL_H

#include <ggmlite/layers.h>

#include <inttypes.h>
#include <stddef.h>

#define GML_LAY_SHAPE(t, buf) gml_format_shape((t), (buf), sizeof(buf))

/* gml_set_error for bool functions: records the message, returns false. */
bool gml_lay_fail(gml_context *ctx, const char *fmt, ...) GML_PRINTF(2, 3);

/* t must be f32 [rows] (cols < 0) or [rows, cols] of f32, f16, bf16 or
 * q8_0 (a weight matrix: linear converts it); `layer` and `name` (the HF
 * name) start the message, `what` says what the sizes are ("[G*hd, D]"). A
 * NULL t is an error when required, else fine. */
bool gml_lay_check_param(gml_context *ctx, const char *layer, const gml_tensor *t, const char *name,
                         bool required, int64_t rows, int64_t cols, const char *what);

/* x must be f32 [B, T, D] (D <= 0: any): sets *B, *T, *D. */
bool gml_lay_check_input(gml_context *ctx, const char *layer, const gml_tensor *x, int64_t *B,
                         int64_t *T, int64_t *D);

/* One weight of a layer: its HF name, the slot in the weights struct. */
typedef struct gml_lay_name {
    const char *name;
    ptrdiff_t offset; /* -1: a known name that binds nothing (a buffer) */
    bool required;
} gml_lay_name;

/* Binds prefix + names[i] of wctx into the struct at w (zeroed first);
 * strict as layers.h says. */
gml_status gml_lay_weights_find(const char *layer, gml_context *wctx, const char *prefix,
                                const gml_lay_name *names, int n_names, void *w, char *err,
                                size_t err_size);

/* A view of t [R, C] as [C, R] (transpose): Conv1D's [in, out] seen as
 * nn.Linear's [out, in], no copy. Columns [c0, c0 + n) first when n > 0. */
gml_tensor *gml_lay_conv1d_as_linear(gml_context *ctx, gml_tensor *t, int64_t c0, int64_t n,
                                     const char *name);

/* Conv1D (GPT-2): x [..., in] @ w [in, out] (any strides) + b [out]. */
gml_tensor *gml_lay_conv1d(gml_context *ctx, gml_tensor *x, gml_tensor *w, gml_tensor *b);

#endif
