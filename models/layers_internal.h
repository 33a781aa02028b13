/* What the layers (llama.c, gpt2.c, bert.c) share: parameter checks, binding
 * weights by Hugging Face name, and the attention core. Public API only. */
#ifndef GGMLITE_LAYERS_INTERNAL_H
#define GGMLITE_LAYERS_INTERNAL_H

#include <ggmlite/layers.h>

#include <inttypes.h>
#include <stddef.h>

#define LAY_SHAPE(t, buf) gml_format_shape((t), (buf), sizeof(buf))

/* gml_set_error for bool functions: records the message, returns false. */
bool lay_fail(gml_context *ctx, const char *fmt, ...) GML_PRINTF(2, 3);

/* t must be f32 [rows] (cols < 0) or [rows, cols]; `layer` and `name` (the HF
 * name) start the message, `what` says what the sizes are ("[G*hd, D]"). A
 * NULL t is an error when required, else fine. */
bool lay_check_param(gml_context *ctx, const char *layer, const gml_tensor *t, const char *name,
                     bool required, int64_t rows, int64_t cols, const char *what);

/* x must be f32 [B, T, D] (D <= 0: any): sets *B, *T, *D. */
bool lay_check_input(gml_context *ctx, const char *layer, const gml_tensor *x, int64_t *B,
                     int64_t *T, int64_t *D);

/* One weight of a layer: its HF name, the slot in the weights struct. */
typedef struct lay_name {
    const char *name;
    ptrdiff_t offset; /* -1: a known name that binds nothing (a buffer) */
    bool required;
} lay_name;

/* Binds prefix + names[i] of wctx into the struct at w (zeroed first);
 * strict as layers.h says. */
gml_status lay_weights_find(const char *layer, gml_context *wctx, const char *prefix,
                            const lay_name *names, int n_names, void *w, char *err,
                            size_t err_size);

/* The scoring of one attention: scale, the masks and the options. */
typedef struct lay_attn {
    const char *layer;
    float scale;
    bool causal;
    gml_tensor *lens;  /* i32 [B] or [B, Tq], or NULL */
    gml_tensor *sinks; /* [H] or NULL */
    float softcap;     /* 0: none */
    int64_t window;    /* 0: none */
} lay_attn;

/* q [B, H, Tq, hd], k, v [B, G, Tk, hd] (any strides) -> [B, Tq, H*hd]
 * contiguous: softmax(q k^T * scale (capped) + masks) v, per lay_attn. The
 * fused flash_attn unless sinks or softcap ask for the unfused graph. */
gml_tensor *lay_attend(gml_context *ctx, const lay_attn *a, gml_tensor *q, gml_tensor *k,
                       gml_tensor *v);

/* Conv1D (GPT-2): x [..., in] @ w [in, out] (any strides) + b [out]. */
gml_tensor *lay_conv1d(gml_context *ctx, gml_tensor *x, gml_tensor *w, gml_tensor *b);

#endif
