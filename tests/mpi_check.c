/* Helper of tests/test_mpi.sh: a head-parallel output against the
 * single-process one.
 *
 *   mpi_check GOT.npy WANT.npy TOL
 *
 * Same shape and f32, and max |got - want| <= TOL * max |want| (the error
 * relative to the output's scale: a sum split over ranks rounds differently
 * near zero, where an elementwise relative error means nothing). Prints
 * "bitwise" when the bytes are equal, else the largest error, its index and
 * the relative figure. Exit 0 when it holds, 1 when not, 2 on wrong usage. */
#include <ggmlite/ggmlite.h>
#include <ggmlite/io.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const gml_tensor *load(const char *path, gml_context **ctx) {
    char err[1024];
    *ctx = gml_load_npy(path, "t", err, sizeof err);
    if (!*ctx) {
        fprintf(stderr, "mpi_check: %s\n", err);
        exit(1);
    }
    const gml_tensor *t = gml_get_first_tensor(*ctx);
    if (t->type != GML_F32) {
        fprintf(stderr, "mpi_check: %s is %s, not f32\n", path, gml_type_name(t->type));
        exit(1);
    }
    return t;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: mpi_check GOT.npy WANT.npy TOL\n");
        return 2;
    }
    const double tol = atof(argv[3]);
    gml_context *cg, *cw;
    const gml_tensor *g = load(argv[1], &cg), *w = load(argv[2], &cw);
    char sg[64], sw[64];
    if (!gml_same_shape(g, w)) {
        fprintf(stderr, "mpi_check: %s is %s, %s is %s\n", argv[1], gml_format_shape(g, sg, sizeof sg),
                argv[2], gml_format_shape(w, sw, sizeof sw));
        return 1;
    }
    const int64_t n = gml_nelements(g);
    const float *a = g->data, *b = w->data;
    double scale = 0, err = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= err)) { /* NaN counts as the largest */
            err = isnan(d) ? INFINITY : d;
            at = i;
        }
        if (fabs(b[i]) > scale) scale = fabs(b[i]);
    }
    const double rel = scale > 0 ? err / scale : err;
    if (memcmp(a, b, (size_t)n * sizeof *a) == 0)
        printf("bitwise (%lld values)\n", (long long)n);
    else
        printf("max |got - want| %.3g at %lld (got %.9g, want %.9g), %.3g of max |want| %.4g\n", err,
               (long long)at, a[at], b[at], rel, scale);
    gml_free(cg);
    gml_free(cw);
    if (rel <= tol) return 0;
    fprintf(stderr, "mpi_check: %s differs from %s by %.3g of the largest value, more than %g\n", argv[1],
            argv[2], rel, tol);
    return 1;
}
