/* What other ops may know of a view (ops/view.c), asked by name: the view's
 * params are its own file's. */
#ifndef GGMLITE_VIEW_H
#define GGMLITE_VIEW_H

#include "internal.h"

/* For a permute or transpose node t: the dim of its source that t's dim d
 * is, both counted as written (0..n-1, n = t->n_dims); -1 for a node of any
 * other op. */
int gml_view_source_dim(const gml_tensor *t, int d);

#endif /* GGMLITE_VIEW_H */
