/* Where each public function of ggmlite_mpi starts (mpi.h, "Misuse"):
 * one check per pointer argument, through the engine's public API alone as
 * the rest of mpi/ is. GML_MPI_NONNULL(ctx, p, ret): if p is NULL,
 * records "<function>: <p> is NULL" with gml_set_error(ctx, ...) (on ctx
 * when it is live, else for the calling thread) and returns ret.
 * GML_MPI_NONNULL_ERR(p, ret, err, err_size), for the functions that
 * write messages into err: the same message into err (nothing if err is
 * NULL or err_size 0) and for the thread. */
#ifndef GGMLITE_MPI_MISUSE_H
#define GGMLITE_MPI_MISUSE_H

#include <ggmlite/ggmlite.h>

#include <stdio.h>

#define GML_MPI_NONNULL(ctx, p, ret)                                 \
    do {                                                                \
        if (!(p)) {                                                     \
            gml_set_error((ctx), "%s: %s is NULL", __func__, #p);       \
            return ret;                                                 \
        }                                                               \
    } while (0)

#define GML_MPI_NONNULL_ERR(p, ret, err, err_size)                   \
    do {                                                                \
        if (!(p)) {                                                     \
            if ((err) && (err_size) > 0)                                \
                snprintf((err), (err_size), "%s: %s is NULL", __func__, #p); \
            gml_set_error(NULL, "%s: %s is NULL", __func__, #p);        \
            return ret;                                                 \
        }                                                               \
    } while (0)

#endif
