/* ggmlite's losses: cross-entropy and mean squared error, ops like any
 * other (ops/loss.c), each with its backward for gml_grad. Part of
 * <ggmlite/ggmlite.h>, which includes it. How they are computed and
 * checked: docs/training.md. */
#ifndef GGMLITE_LOSS_H
#define GGMLITE_LOSS_H

#include <ggmlite/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* logits f32 [..., V] (2-D to 4-D, any strides), targets i32 of logits'
 * leading shape [...] (any strides) -> [1] f32: the mean over the N rows of
 * logsumexp(row) - row[target], as torch.nn.functional.cross_entropy(
 * logits.reshape(-1, V), targets.reshape(-1)) (reduction mean). Each row's
 * term in double, the mean of the terms in row-major order in double,
 * rounded once: the same bits at every thread count. A target outside
 * [0, V) fails compute with a message naming it, where it is in targets
 * and V (the first such in row-major order). Its gradient (gml_grad) is
 * the op cross_entropy_back: (softmax(row) - onehot(target)) * dy / N for
 * logits, none for targets. */
GML_API gml_tensor *gml_cross_entropy(gml_context *ctx, gml_tensor *logits, gml_tensor *targets);

/* a, b f32 of one shape (any strides) -> [1] f32: mean((a - b)^2), as
 * torch.nn.functional.mse_loss (reduction mean). Sums in double, in a
 * fixed order (row-major), rounded once: the same bits at every thread
 * count. Gradients to both: 2 (a - b) dy / n and its negation. */
GML_API gml_tensor *gml_mse_loss(gml_context *ctx, gml_tensor *a, gml_tensor *b);

#ifdef __cplusplus
}
#endif

#endif /* GGMLITE_LOSS_H */
