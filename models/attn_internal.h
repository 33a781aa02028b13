/* What the attention blocks share (the models/ sources only). A block
 * (attn_block.c: gml_mha, gml_gqa) is the public stages of attention.h in
 * order, one file each:
 *
 *   gml_attn_plan_inputs    check config and inputs, fix the sizes  attn_plan.c
 *   gml_attn_check_weights  the projections' shapes                 attn_weights.c
 *   gml_attn_project_p      q, k, v heads                (stage 1)  attn_project.c
 *   gml_attn_position_p     rope on q and k              (stage 2)  attn_position.c
 *   gml_attn_append_extras  bias_k/bias_v, zero key rows            attn_extras.c
 *   gml_attn_attend_p       fused or unfused attention   (stage 3)  attn_attend.c
 *   gml_attn_merge_p        merge heads, W_o -> out      (stage 4)  attn_merge.c
 *
 * and the unfused attention (attn_unfused.c) is itself
 *
 *   gml_attn_scores        q k^T                          [B, H, Tq, Tk]
 *   gml_attn_softmax       scale, masks, softmax -> attn  [B, H, Tq, Tk]
 *   gml_attn_context       attn v                         [B, H, Tq, d_k]
 *
 * with the relative-position terms of relpos.c added between them. The
 * public form of each stage (gml_attn_project, ...) sits in its stage's
 * file. The files call only those listed before them below: attn_plan.c;
 * attn_weights.c, attn_extras.c, attn_unfused.c; the stages; attn_block.c,
 * relpos.c and kv_cache.c. Every function takes a plan whose `block` starts
 * its messages. */
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
    const char *block; /* "mha", "gqa", "relpos", "decode", "attn_attend", ...: starts messages */
    int64_t B, Tq, Tk, D, H, G, dk;
    int64_t kdim, vdim;  /* the key's and value's last dims (D unless kdim/vdim differ) */
    gml_attn_config cfg; /* n_kv_heads and d_model resolved */
    bool self;           /* self-attention: the keys are the queries (rope positions) */
    bool fused;          /* the fused graph (gml_flash_attn) */
    float scale;         /* the scores' factor */
} gml_attn_plan;

/* ---- attn_plan.c ---------------------------------------------------------- */

/* gml_set_error for functions returning bool: records the message, returns false. */
bool gml_attn_fail(gml_context *ctx, const char *fmt, ...) GML_PRINTF(2, 3);
/* Fills p from the config and the inputs (query, key, value: shapes,
 * types) and checks the config: dims, scoring, position encoding, graph
 * choice (can_fuse false: the block has only the unfused graph). False, with
 * the reason on ctx, on any mistake. */
bool gml_attn_plan_inputs(gml_context *ctx, const char *block, const gml_attn_config *cfg,
                          const gml_attn_inputs *in, bool can_fuse, gml_attn_plan *p);
/* The config's checks alone, with B, Tq, Tk, D, H, G, d_k already in p. */
bool gml_attn_check_config(gml_context *ctx, gml_attn_plan *p, const gml_attn_config *cfg,
                           bool can_fuse);
/* valid_lens, mask, positions of in and sinks against p. */
bool gml_attn_check_masks(gml_context *ctx, const gml_attn_plan *p, const gml_attn_inputs *in,
                          const gml_tensor *sinks);
/* Fills p's sizes from q [B, H, Tq, d_k], k and v [B, G, Tk, d_k] (the
 * public stages after the projections); false, with the reason on ctx, if
 * they do not fit. The config is checked apart (gml_attn_check_config). */
bool gml_attn_plan_qkv(gml_context *ctx, const char *block, const gml_attn_config *cfg,
                       gml_attn_qkv qkv, gml_attn_plan *p);
/* The options of the attention ops (softmax_ext, flash_attn_ext): the
 * config's scoring, the inputs' masks and positions, the sinks. */
gml_attn_opts gml_attn_opts_of(const gml_attn_plan *p, const gml_attn_inputs *in,
                               gml_tensor *sinks);

/* ---- attn_weights.c ------------------------------------------------------- */

/* The types a projection matrix may have: f32, f16, bf16, q8_0. */
bool gml_attn_weight_type(gml_type t);
/* A weight t must be [rows, cols] of f32, f16, bf16 or q8_0 (a matrix), or
 * f32 [rows] (cols < 0: biases, sinks); else false,
 * with a message naming the block, the role ("w_k.weight"), t's shape and
 * what the shape means (`what`, e.g. "[d_model, d_model]"). */
bool gml_attn_check_param(gml_context *ctx, const gml_attn_plan *p, const gml_tensor *t,
                          const char *role, int64_t rows, int64_t cols, const char *what);
/* The projection weights (out_proj: W_o and b_o too) against p. */
bool gml_attn_check_weights(gml_context *ctx, const gml_attn_plan *p, const gml_attn_weights *w,
                            bool out_proj);
/* w, or (w->conv1d: GPT-2's Conv1D [in, out] weights) a copy in *tmp with
 * transposed views of them made in ctx. */
const gml_attn_weights *gml_attn_linear_weights(gml_context *ctx, const gml_attn_weights *w,
                                                gml_attn_weights *tmp);

/* ---- attn_extras.c -------------------------------------------------------- */

/* False, with a message, if w has bias_k/bias_v or the config add_zero_attn:
 * for what does not append the extra key rows (`which`: "relpos", ...). */
bool gml_attn_no_extras(gml_context *ctx, const gml_attn_plan *p, const gml_attn_weights *w,
                        const char *which);
/* k, v [B, G, Tk, d_k] -> [B, G, Tk + n, d_k] (bias_k/bias_v, then a zero
 * row); *p and *in become the plan and inputs of attending over them: Tk + n
 * keys, one additive mask of the valid lengths, causal and in.mask, padded.
 * Nothing to append (or no q: an earlier failure): true, all unchanged. */
bool gml_attn_append_extras(gml_context *ctx, gml_attn_plan *p, const gml_attn_weights *w,
                            gml_attn_qkv *qkv, gml_attn_inputs *in);

/* ---- attn_unfused.c ------------------------------------------------------- */

/* Raw scores q k^T [B, H, Tq, Tk], unscaled (both GQA forms). */
gml_tensor *gml_attn_scores(gml_context *ctx, const gml_attn_plan *p, gml_tensor *q,
                            gml_tensor *k);
/* softmax(scores * scale + masks, causal) -> attn [B, H, Tq, Tk], named "attn". */
gml_tensor *gml_attn_softmax(gml_context *ctx, const gml_attn_plan *p, gml_tensor *scores,
                             const gml_attn_inputs *in, gml_tensor *sinks);
/* attn [B, H, Tq, Tk] @ v [B, G, Tk, d_k] -> ctx [B, H, Tq, d_k]. */
gml_tensor *gml_attn_context(gml_context *ctx, const gml_attn_plan *p, gml_tensor *attn,
                             gml_tensor *v);

/* ---- the stages on a checked plan: attn_project.c, attn_position.c,
 * attn_attend.c, attn_merge.c ------------------------------------------------ */

gml_attn_qkv gml_attn_project_p(gml_context *ctx, const gml_attn_plan *p,
                                const gml_attn_weights *w, const gml_attn_inputs *in);
/* q_pos, k_pos: i32 [Tq] or [B, Tq], [Tk] or [B, Tk]; NULL: the defaults of
 * gml_attn_inputs (in.positions for q given or not). */
gml_attn_qkv gml_attn_position_p(gml_context *ctx, const gml_attn_plan *p, gml_attn_qkv qkv,
                                 gml_tensor *q_pos, gml_tensor *k_pos);
gml_attn_heads gml_attn_attend_p(gml_context *ctx, const gml_attn_plan *p, gml_attn_qkv qkv,
                                 const gml_attn_inputs *in, gml_tensor *sinks);
gml_tensor *gml_attn_merge_p(gml_context *ctx, const gml_attn_plan *p, const gml_attn_weights *w,
                             gml_tensor *heads);

/* ---- attn_block.c --------------------------------------------------------- */

/* Runs a whole block: plan, weights, the four stages. */
gml_attn_result gml_attn_block(gml_context *ctx, const char *block, const gml_attn_config *cfg,
                               const gml_attn_weights *w, const gml_attn_inputs *in);

#endif
