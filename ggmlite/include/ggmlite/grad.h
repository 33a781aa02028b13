/* ggmlite's reverse mode: gradients built as graph nodes. Part of
 * <ggmlite/ggmlite.h>, which includes it. What has a backward, the order
 * gradients add up in and what is refused: docs/training.md. */
#ifndef GGMLITE_GRAD_H
#define GGMLITE_GRAD_H

#include <ggmlite/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- gradients ------------------------------------------------------------
 * In the spirit of torch.autograd.grad(out, wrt, dout): builds, as ordinary
 * nodes of ctx, grads[i] = dL/d wrt[i] for L = sum(out * dout), then the
 * caller builds a graph with the grads among its outputs and plans and
 * computes it as any other (the forward nodes they need come with them).
 *
 *     gml_tensor *loss = gml_mean(ctx, ...);                  // [1]
 *     gml_tensor *dw[2];
 *     if (gml_grad(ctx, loss, NULL, (gml_tensor *[]){w, b}, 2, dw) != GML_OK)
 *         fprintf(stderr, "%s\n", gml_last_error(ctx));
 *     gml_graph *g = gml_build_graph(ctx, (gml_tensor *[]){loss, dw[0], dw[1]}, 3);
 *
 * out: any f32 tensor; dout: f32 of out's shape (any strides), or NULL for
 * a loss of one element (then dout is 1). wrt: n_wrt >= 1 float tensors
 * (f32, f16, bf16; leafs or nodes) that out depends on. Each grads[i] is f32,
 * contiguous, of wrt[i]'s shape (an f16 weight's gradient is f32); zeros
 * when wrt[i] reaches out only through values that are overwritten (cpy's
 * destination).
 *
 * Determinism: where a tensor feeds several nodes, its gradient is the sum
 * of their contributions taken in one fixed order (the consumers in reverse
 * topological order of a DFS from out, each consumer's sources left to
 * right, summed left to right); a broadcast operand's gradient is summed
 * back to its shape by sum_to in a fixed order. So gradients are the same
 * bits at every thread count, as forward results are.
 *
 * Memory: the graph made from the gradients computes each layer's backward
 * as the gradient passes that layer, whatever order the gradients are given
 * to gml_build_graph in, so that the planner frees each activation in its
 * layer's backward; a gradient summed from several contributions is summed
 * in place (docs/training.md, "Memory"). gml_checkpoint below trades
 * activations for recomputation.
 *
 * Errors (GML_ERR_INVALID, the message on ctx, grads untouched): a gradient
 * that must pass through an op with no backward, "grad: no backward for op
 * 'x' (node 'name'), needed for the gradient of 'w'"; a wrt out does not
 * depend on, an integer or q8_0 wrt, a dout of another shape (both shapes
 * named), an out of more than one element without dout; a backward that
 * cannot build (its op and node named, then why). GML_ERR_NOMEM: malloc
 * failed; a full arena is the builders' own message (INVALID). NULL ctx,
 * out, wrt or grads: GML_ERR_INVALID, nothing recorded when ctx is NULL. */
GML_API gml_status gml_grad(gml_context *ctx, gml_tensor *out, gml_tensor *dout,
                            gml_tensor *const *wrt, int n_wrt, gml_tensor **grads);

/* ---- recomputation (gradient checkpointing) -------------------------------
 * As torch.utils.checkpoint: the nodes computed from inputs on the way to out
 * (out and the inputs excepted) are marked GML_FLAG_RECOMPUTE, so that a
 * later gml_grad through them keeps none of them for the backward: each
 * backward that reads one reads a copy computed again, from the unmarked
 * tensors it depends on (the inputs, weights), once the gradient that needs
 * it has arrived. In a planned graph the marked nodes then die in the
 * forward (their memory reused); the copies live in the backward only.
 * Gradients are the same bits with and without (a copy is the same op on
 * the same values). Recompute a whole layer with its input and output, or
 * only its attention with the attention stages' input and output:
 *
 *     gml_tensor *y = gml_llama_layer(ctx, &cfg, &w, x, NULL);
 *     gml_checkpoint(ctx, y, &x, 1);     // then gml_grad(ctx, loss, ...)
 *
 * The marks are flags on the nodes (gml_set_flags(t, GML_FLAG_RECOMPUTE)
 * marks one by hand; a view follows the node owning its storage); every
 * gml_grad through them sees them. A node whose backward reads its own
 * value and reads marked sources is computed again from their copies.
 * Errors (GML_ERR_INVALID, the message on ctx, nothing marked): NULL out, an
 * input out is not computed from (named). NULL ctx: GML_ERR_INVALID. */
GML_API gml_status gml_checkpoint(gml_context *ctx, gml_tensor *out, gml_tensor *const *inputs,
                                  int n_inputs);

/* ---- ops the backwards build (each also a call form of graph files) ------- */

/* -> [ne...] f32 contiguous, every element value (torch.full). 1-D to 4-D. */
GML_API gml_tensor *gml_full(gml_context *ctx, int n_dims, const int64_t *ne, float value);
/* x [...] f32 (any strides) -> [ne...]: x summed over the dims that ne
 * broadcasts (x's shape is ne broadcast: right-aligned, each of ne's dims 1
 * or equal, ne no longer than x), as x.sum_to_size(ne). Each output element
 * is the sum of its elements of x in row-major order, in double, rounded
 * once: the same bits at every thread count and ISA. */
GML_API gml_tensor *gml_sum_to(gml_context *ctx, gml_tensor *x, int n_dims, const int64_t *ne);

/* dy [...] f32 (any strides) -> [ne...] f32: zeros, with dy's element i
 * added at flat position offset + sum_k i_k strides[k] (strides in elements
 * of the result, one per dim of dy, each >= 0; every position inside the
 * result): the gradient of a view or a slice. Places dy reaches twice (a
 * stride 0) sum in dy's row-major order; the same bits at every thread count. */
GML_API gml_tensor *gml_view_back(gml_context *ctx, gml_tensor *dy, int n_dims, const int64_t *ne,
                                  const int64_t *strides, int64_t offset);
/* dy [..., d] f32, idx i32 [...] (get_rows' indices, dy's leading shape) ->
 * [n_rows, d] f32: row r is the sum of the rows of dy whose index is r, in
 * idx's row-major order (rows no index names are zeros): the gradient of
 * get_rows' table, the same bits at every thread count. An index outside
 * [0, n_rows) fails compute, naming it. */
GML_API gml_tensor *gml_get_rows_back(gml_context *ctx, gml_tensor *dy, gml_tensor *idx,
                                      int64_t n_rows);
/* x [...] f32, dy f32 of x's shape (any strides) -> [...] f32: dy * f'(x)
 * for f = op, one of GML_OP_TANH, SIGMOID, SILU, GELU, GELU_TANH (the
 * gradient of gml_tanh(x), ...); each element in double, rounded once. */
GML_API gml_tensor *gml_unary_back(gml_context *ctx, gml_tensor *x, gml_tensor *dy, gml_op op);
/* x [..., n], y = gml_max(x) [..., 1], dy [..., 1] f32 -> [..., n] f32:
 * dy / c where x equals the row's max (c of them: ties share it evenly, as
 * PyTorch's amax backward), 0 elsewhere; a row whose max is NaN gets zeros. */
GML_API gml_tensor *gml_max_back(gml_context *ctx, gml_tensor *x, gml_tensor *y, gml_tensor *dy);

#ifdef __cplusplus
}
#endif

#endif /* GGMLITE_GRAD_H */
