/* The backward ops' builders (internal: the gradient engine and the tests
 * call them; docs/training.md). Each op's file defines its own:
 * ops/softmax.c, ops/norm.c, ops/rope.c; flash attention's are in
 * ops/flash_attn.h. */
#ifndef GGMLITE_OPS_BACK_H
#define GGMLITE_OPS_BACK_H

#include "internal.h"

/* y [.., Tq, Tk] softmax's output, dy as y, x softmax's input (for a
 * softcap), scale and softcap as softmax's -> dx as y */
gml_tensor *gml_softmax_back(gml_context *ctx, gml_tensor *y, gml_tensor *dy, gml_tensor *x,
                             float scale, float softcap);
/* x [..., d] the norm's input, dy [..., d], w [d] or NULL, eps as the
 * forward's -> dx [..., d] */
gml_tensor *gml_rms_norm_back(gml_context *ctx, gml_tensor *x, gml_tensor *dy, gml_tensor *w,
                              float eps);
gml_tensor *gml_layer_norm_back(gml_context *ctx, gml_tensor *x, gml_tensor *dy, gml_tensor *w,
                                float eps);
/* dy as rope's x, its pos and parameters -> dx (the inverse rotation) */
gml_tensor *gml_rope_back(gml_context *ctx, gml_tensor *dy, gml_tensor *pos, int seq_dim,
                          int rotary_dim, float theta, float pos_scale, bool interleaved);
/* logits [..., V], targets i32 [...], dy [1] (cross_entropy's gradient) ->
 * d logits [..., V]: (softmax(row) - onehot(target)) * dy / N (ops/loss.c) */
gml_tensor *gml_cross_entropy_back(gml_context *ctx, gml_tensor *logits, gml_tensor *targets,
                                   gml_tensor *dy);

#endif /* GGMLITE_OPS_BACK_H */
