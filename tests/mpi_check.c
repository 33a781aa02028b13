/* Helper of tests/test_mpi*.sh: a head-parallel output against the
 * single-process one, and a copy of a weights file with one value changed.
 *
 *   mpi_check GOT.npy WANT.npy TOL
 *   mpi_check nudge IN.safetensors OUT.safetensors NAME
 *   mpi_check ffn IN.safetensors OUT.safetensors F
 *
 * nudge: OUT holds IN's tensors (names, order, types, shapes) with the first
 * value of f32 tensor NAME moved to the next float up (one ulp): the same
 * shapes, other values. ffn: IN's LLaMA layer with the MLP cut to its first
 * F rows (gate_proj and up_proj rows and biases, down_proj columns): a model
 * of another FFN size, every other tensor as IN's (test_mpi_weights.sh).
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

static bool ends_with(const char *s, const char *end) {
    const size_t a = strlen(s), b = strlen(end);
    return a >= b && strcmp(s + a - b, end) == 0;
}

/* The MLP's tensors of ctx cut to F rows, as new tensors of the same names in c. */
static bool cut_ffn(gml_context *ctx, gml_context *c, int64_t F, const char *in) {
    for (gml_tensor *t = gml_get_first_tensor(ctx); t; t = gml_get_next_tensor(ctx, t)) {
        const bool rows = ends_with(t->name, "gate_proj.weight") || ends_with(t->name, "up_proj.weight") ||
                          ends_with(t->name, "gate_proj.bias") || ends_with(t->name, "up_proj.bias");
        const bool cols = ends_with(t->name, "down_proj.weight");
        if (!rows && !cols) continue;
        const int64_t n_in = rows ? t->ne[4 - t->n_dims] : t->ne[3];
        if (t->type != GML_F32 || F < 1 || F >= n_in) {
            fprintf(stderr, "mpi_check: %s: '%s' is not f32 with more than %lld MLP rows\n", in, t->name,
                    (long long)F);
            return false;
        }
        gml_tensor *u = t->n_dims == 1 ? gml_new_tensor_1d(c, GML_F32, F)
                        : rows         ? gml_new_tensor_2d(c, GML_F32, F, t->ne[3])
                                       : gml_new_tensor_2d(c, GML_F32, t->ne[2], F);
        if (!u) return false;
        gml_set_name(u, t->name);
        const int64_t r_n = t->n_dims == 1 ? 1 : u->ne[2], k = u->ne[3], k_in = t->ne[3];
        for (int64_t r = 0; r < r_n; r++)
            memcpy((float *)u->data + r * k, (const float *)t->data + r * k_in, (size_t)k * sizeof(float));
    }
    return true;
}

/* nudge (F < 0: name) or ffn (F rows). */
static int rewrite(const char *in, const char *out, const char *name, int64_t F) {
    char err[1024];
    gml_context *ctx = gml_load_safetensors(in, err, sizeof err);
    if (!ctx) return fprintf(stderr, "mpi_check: %s\n", err), 1;
    size_t mem = 4096;
    for (gml_tensor *u = gml_get_first_tensor(ctx); u; u = gml_get_next_tensor(ctx, u))
        mem += gml_tensor_overhead() + 64 + gml_nbytes(u);
    gml_context *c = F >= 0 ? gml_init((gml_init_params){.mem_size = mem}) : NULL;
    if (F >= 0 && (!c || !cut_ffn(ctx, c, F, in))) {
        gml_free(c);
        gml_free(ctx);
        return 1;
    }
    gml_tensor *t = F < 0 ? gml_get_tensor(ctx, name) : NULL;
    if (F < 0 && (!t || t->type != GML_F32)) {
        fprintf(stderr, "mpi_check: %s has no f32 tensor '%s'\n", in, name);
        gml_free(c);
        gml_free(ctx);
        return 1;
    }
    if (t) {
        float *v = t->data;
        v[0] = nextafterf(v[0], INFINITY);
    }
    int n = 0;
    for (gml_tensor *u = gml_get_first_tensor(ctx); u; u = gml_get_next_tensor(ctx, u)) n++;
    const gml_tensor **all = calloc((size_t)n + 1, sizeof *all);
    int i = 0;
    for (gml_tensor *u = gml_get_first_tensor(ctx); u && all; u = gml_get_next_tensor(ctx, u)) {
        gml_tensor *cut = c ? gml_get_tensor(c, u->name) : NULL; /* in place of the original */
        all[i++] = cut ? cut : u;
    }
    const gml_status st = all ? gml_save_safetensors(out, all, n, err, sizeof err) : GML_ERR_NOMEM;
    if (st != GML_OK) fprintf(stderr, "mpi_check: %s\n", all ? err : "out of memory");
    free(all);
    gml_free(c);
    gml_free(ctx);
    return st == GML_OK ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "nudge") == 0) return rewrite(argv[2], argv[3], argv[4], -1);
    if (argc == 5 && strcmp(argv[1], "ffn") == 0) return rewrite(argv[2], argv[3], NULL, atoll(argv[4]));
    if (argc != 4) {
        fprintf(stderr, "usage: mpi_check GOT.npy WANT.npy TOL | nudge IN.safetensors OUT.safetensors NAME | "
                "ffn IN.safetensors OUT.safetensors F\n");
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
