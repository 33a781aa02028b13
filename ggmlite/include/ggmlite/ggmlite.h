/*
 * ggmlite: a small tensor graph engine for attention blocks, in C11.
 *
 * You build a graph of ops on tensors, then compute it on CPU threads.
 *
 *     gml_context *ctx = gml_init((gml_init_params){ .mem_size = 16 << 20 });
 *     gml_tensor *x = gml_new_tensor(ctx, GML_F32, 3, (int64_t[]){2, 10, 64});
 *     gml_tensor *w = gml_new_tensor(ctx, GML_F32, 2, (int64_t[]){32, 64});
 *     gml_tensor *y = gml_linear(ctx, x, w, NULL);     // [2, 10, 32]
 *     if (!y) fprintf(stderr, "%s\n", gml_last_error(ctx));
 *     gml_graph *g = gml_build_graph(ctx, &y, 1);
 *     ... fill x->data and w->data ...
 *     if (gml_graph_compute(g, 4) != GML_OK) fprintf(stderr, "%s\n", gml_graph_error(g));
 *     gml_graph_free(g);
 *     gml_free(ctx);
 *
 * Conventions: README.md ("Conventions") states them once; each rule's fine
 * print is in docs/contracts.md, whose sections (DIMENSION ORDER, STORAGE,
 * MATMUL, MASKS, ERRORS, MISUSE, MEMORY, WRITES THAT ALIAS, THREADS) the
 * comments of these headers name.
 *
 * Every name ggmlite exports starts with gml_ (types, functions) or GML_
 * (macros, enum constants).
 *
 * Misuse (MISUSE): every function given NULL for a pointer argument, or a
 * context, tensor or graph that is not alive where this can be told,
 * returns its error value and records a message naming the function and
 * the argument ("gml_add: b is NULL"), or does nothing; it never crashes.
 * The error values: NULL for a pointer, false, 0 for a count or a size, -1
 * for an index, GML_ERR_INVALID for a status; a function whose value
 * differs says so where it is declared. The message is kept on the context
 * when the call has a live one (gml_last_error(ctx)), else for the calling
 * thread (gml_last_error(NULL); gml_graph_error(NULL) gives the same). What
 * is detected of freed objects, and what cannot be: docs/contracts.md,
 * MISUSE, and the comments of gml_free and gml_build_graph.
 */
#ifndef GGMLITE_H
#define GGMLITE_H

#include <ggmlite/export.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of these headers: GML_VERSION_MAJOR.MINOR.PATCH, the one
 * place it is written (CMake's project() reads it from here), GML_VERSION
 * the same as a string, and GML_VERSION_NUMBER for #if comparisons
 * (MAJOR * 10000 + MINOR * 100 + PATCH: 0.1.0 is 100). */
#define GML_VERSION_MAJOR 0
#define GML_VERSION_MINOR 1
#define GML_VERSION_PATCH 0
#define GML_VERSION "0.1.0"
#define GML_VERSION_NUMBER (GML_VERSION_MAJOR * 10000 + GML_VERSION_MINOR * 100 + GML_VERSION_PATCH)

/* The version of the library linked in: GML_VERSION as it was when the
 * library was built, e.g. "0.1.0". It differs from GML_VERSION when a
 * program was compiled against other headers than the library it runs with. */
GML_API const char *gml_version(void);

#ifdef __cplusplus
}
#endif

#include <ggmlite/types.h>
#include <ggmlite/tensor.h>
#include <ggmlite/registry.h>
#include <ggmlite/compute.h>
#include <ggmlite/grad.h>
#include <ggmlite/loss.h>
#include <ggmlite/optim.h>

#endif /* GGMLITE_H */
