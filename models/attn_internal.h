/* What the attention blocks share (the models/ sources only). A block is a fixed
 * sequence of these steps:
 *
 *   gml_attn_prepare   check config, inputs, weights; project q, k, v; mask
 *   gml_attn_scores    q k^T                          [B, H, Tq, Tk]
 *   gml_attn_softmax   scale, masks, softmax -> attn  [B, H, Tq, Tk]
 *   gml_attn_context   attn v                         [B, H, Tq, d_k]
 *   gml_attn_output    merge heads, W_o -> out        [B, Tq, D]
 *
 * with the relative-position terms of relpos.c added between them; or, for
 * the fused graph, gml_attn_prepare then gml_attn_fused (which ends in
 * gml_attn_output). */
#ifndef GGMLITE_ATTN_INTERNAL_H
#define GGMLITE_ATTN_INTERNAL_H

/* The models are a library on the engine's public API alone (ggmlite.h),
 * as a user's own blocks would be: messages go through gml_set_error. */
#include <ggmlite/attention.h>

#include <inttypes.h>
#include <stdarg.h>

/* Formats t's shape into the char array buf: "[2,8,10,64]". */
#define GML_SHAPE(t, buf) gml_format_shape((t), (buf), sizeof(buf))

typedef struct gml_attn_plan {
    const char *block; /* "mha", "gqa", "relpos": starts every message */
    int64_t B, Tq, Tk, D, H, G, dk;
    bool causal;
    gml_gqa_form form;
    const gml_attn_weights *w;
    gml_tensor *q;     /* [B, Tq, H*d_k] projected queries, contiguous */
    gml_tensor *k, *v; /* [B, Tk, G*d_k] projected keys and values, contiguous */
    gml_tensor *mask;  /* additive key mask [B, 1, 1|Tq, Tk], or NULL (unfused graph) */
    gml_tensor *lens;  /* the valid lengths i32 [B] or [B, Tq], or NULL */
    bool fused;        /* the graph is gml_attn_fused's */
} gml_attn_plan;

/* gml_set_error for functions returning bool: records the message, returns false. */
bool gml_attn_fail(gml_context *ctx, const char *fmt, ...) GML_PRINTF(2, 3);
/* A weight t must be f32 [rows, cols] (cols < 0: 1-D [rows]); else false,
 * with a message naming the block, the role ("w_k.weight"), t's shape and
 * what the shape means (`what`, e.g. "[d_model, d_model]"). */
bool gml_attn_check_param(gml_context *ctx, const gml_attn_plan *p, const gml_tensor *t,
                          const char *role, int64_t rows, int64_t cols, const char *what);

/* Validates everything the block needs (shapes, types, divisibility),
 * chooses the fused or unfused graph (can_fuse false: the block has only the
 * unfused one) and adds the q, k, v projections and, for the unfused graph,
 * the valid-length mask. False, with the reason on ctx, on any mistake.
 * (attn_common.c) */
bool gml_attn_prepare(gml_context *ctx, const char *block, const gml_attn_config *cfg,
                      const gml_attn_weights *w, const gml_attn_inputs *in, bool can_fuse,
                      gml_attn_plan *p);

/* The fused graph: q, k, v as heads (views), one gml_flash_attn, output
 * projection. Its result has no weights. (attn_common.c) */
gml_attn_result gml_attn_fused(gml_context *ctx, const gml_attn_plan *p);

/* x [B, T, n*d_k] -> [B, T, n, d_k] (a view). (attn_common.c) */
gml_tensor *gml_attn_split(gml_context *ctx, gml_tensor *x, int64_t n, int64_t dk);

/* Raw scores q k^T [B, H, Tq, Tk], unscaled. (gqa.c: both GQA forms) */
gml_tensor *gml_attn_scores(gml_context *ctx, const gml_attn_plan *p);

/* softmax(scores / sqrt(d_k) + mask, causal) -> attn [B, H, Tq, Tk]. */
gml_tensor *gml_attn_softmax(gml_context *ctx, const gml_attn_plan *p, gml_tensor *scores);

/* attn [B, H, Tq, Tk] @ v -> ctx [B, H, Tq, d_k]. (gqa.c: both GQA forms) */
gml_tensor *gml_attn_context(gml_context *ctx, const gml_attn_plan *p, gml_tensor *attn);

/* heads [B, Tq, H, d_k] (any strides) -> out [B, Tq, D] = merged W_o^T + b_o,
 * returned with attn (NULL for the fused graph) as the block's result.
 * (attn_common.c) */
gml_attn_result gml_attn_output(gml_context *ctx, const gml_attn_plan *p, gml_tensor *heads,
                                gml_tensor *attn);

#endif
