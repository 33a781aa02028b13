/* What tests/test_train_cli.sh cannot check in a shell, with the library's
 * loaders:
 *
 *   train_check losses GOT.npy WANT.npy        same shape, each |got - want| <= 1e-4 |want|
 *   train_check weights GOT.st WANT.st A R     the same names and shapes, each element
 *                                              |got - want| <= A + R |want|
 *   train_check grads GOT.st WANT.st           the same names and shapes, each element
 *                                              |got - want| <= 1e-4 (|want| + max|want| of
 *                                              the tensor) + 1e-7
 *   train_check same A.st B.st                 the same names, shapes and bytes
 *   train_check prefix A.npy B.npy             A's values are B's first ones, bitwise
 *   train_check tokens OUT.npy i32|i64 V S B T1 [I X]   ids (i * 7 + 3) % V of shape [S, B, T1]
 *                                              (T1 0: [S, B]), element I set to X
 *
 * Each prints the largest error as a share of its tolerance. Exit status 0
 * when the check holds, 1 when not (with a message), 2 on wrong usage. */
#include <ggmlite/io.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void) {
    fprintf(stderr, "usage: train_check losses|weights|grads|same|prefix|tokens ... (see train_check.c)\n");
    return 2;
}

static gml_context *load(const char *path, bool npy) {
    char err[1024];
    gml_context *c = npy ? gml_load_npy(path, NULL, err, sizeof err) : gml_load_safetensors(path, err, sizeof err);
    if (!c) fprintf(stderr, "%s\n", err);
    return c;
}

static int count(gml_context *c) {
    int n = 0;
    for (gml_tensor *t = gml_get_first_tensor(c); t; t = gml_get_next_tensor(c, t)) n++;
    return n;
}

/* mode 'l' losses, 'w' weights (a, r), 'g' grads, 's' same bytes. */
static int compare(const char *got_path, const char *want_path, char mode, double a, double r) {
    const bool npy = mode == 'l';
    gml_context *got = load(got_path, npy), *want = load(want_path, npy);
    int status = got && want ? 0 : 1;
    if (!status && count(got) != count(want)) {
        fprintf(stderr, "%s holds %d tensors, %s %d\n", got_path, count(got), want_path, count(want));
        status = 1;
    }
    double worst = 0;
    for (gml_tensor *w = want ? gml_get_first_tensor(want) : NULL; w && !status; w = gml_get_next_tensor(want, w)) {
        gml_tensor *g = npy ? gml_get_first_tensor(got) : gml_get_tensor(got, w->name);
        char sg[GML_SHAPE_MAX] = "", sw[GML_SHAPE_MAX];
        if (!g || g->type != GML_F32 || w->type != GML_F32 || !gml_same_shape(g, w)) {
            fprintf(stderr, "%s: '%s' %s, %s has %s\n", got_path, w->name, g ? gml_format_shape(g, sg, sizeof sg) : "missing",
                    want_path, gml_format_shape(w, sw, sizeof sw));
            status = 1;
            break;
        }
        const float *x = g->data, *y = w->data;
        const int64_t n = gml_nelements(w);
        if (mode == 's') {
            if (memcmp(x, y, (size_t)n * 4) != 0) {
                fprintf(stderr, "%s: '%s' differs from %s's\n", got_path, w->name, want_path);
                status = 1;
            }
            continue;
        }
        double ymax = 0;
        for (int64_t i = 0; i < n; i++) ymax = fmax(ymax, fabs((double)y[i]));
        for (int64_t i = 0; i < n; i++) {
            const double d = fabs((double)x[i] - y[i]);
            const double tol = mode == 'l' ? 1e-4 * fabs((double)y[i])
                               : mode == 'w' ? a + r * fabs((double)y[i])
                                             : 1e-4 * (fabs((double)y[i]) + ymax) + 1e-7;
            if (!(d <= worst * tol)) worst = d / tol;
            if (!(d <= tol)) {
                fprintf(stderr, "%s: '%s'[%" PRId64 "] is %.9g, %s has %.9g (tolerance %.3g)\n", got_path, w->name, i,
                        (double)x[i], want_path, (double)y[i], tol);
                status = 1;
                break;
            }
        }
    }
    if (!status && mode != 's') printf("%.3f of the tolerance\n", worst);
    gml_free(got);
    gml_free(want);
    return status;
}

static int prefix(const char *a_path, const char *b_path) {
    gml_context *a = load(a_path, true), *b = load(b_path, true);
    int status = 1;
    if (a && b) {
        const gml_tensor *x = gml_get_first_tensor(a), *y = gml_get_first_tensor(b);
        status = x->n_dims == 1 && y->n_dims == 1 && x->ne[3] <= y->ne[3] &&
                         memcmp(x->data, y->data, (size_t)x->ne[3] * 4) == 0
                     ? 0
                     : 1;
        if (status) fprintf(stderr, "%s is not the first values of %s\n", a_path, b_path);
    }
    gml_free(a);
    gml_free(b);
    return status;
}

/* A .npy of int64 ids, written here (the library saves int32 only). */
static int save_i64(const char *path, const int64_t *v, int64_t n, const int64_t *shape, int nd) {
    char dict[128], s[64] = "";
    size_t k = 0;
    for (int i = 0; i < nd; i++) k += (size_t)snprintf(s + k, sizeof s - k, "%" PRId64 ", ", shape[i]);
    int len = snprintf(dict, sizeof dict, "{'descr': '<i8', 'fortran_order': False, 'shape': (%.*s), }", (int)k - (nd > 1 ? 2 : 1), s);
    const int total = 128; /* 10 + header, padded to 128 with spaces and a newline */
    FILE *f = fopen(path, "wb");
    if (!f || len + 11 > total) return 1;
    const unsigned short hl = (unsigned short)(total - 10);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc(hl & 0xff, f), fputc(hl >> 8, f);
    fputs(dict, f);
    for (int i = 10 + len; i < total - 1; i++) fputc(' ', f);
    fputc('\n', f);
    fwrite(v, 8, (size_t)n, f); /* little-endian machines */
    return fclose(f) != 0;
}

static int tokens(int argc, char **argv) {
    if (argc != 8 && argc != 10) return usage();
    const bool wide = strcmp(argv[3], "i64") == 0;
    const int64_t V = atoll(argv[4]), S = atoll(argv[5]), B = atoll(argv[6]), T1 = atoll(argv[7]);
    const int64_t shape[3] = {S, B, T1}, n = S * B * (T1 ? T1 : 1);
    const int nd = T1 ? 3 : 2;
    int64_t *v = malloc((size_t)n * sizeof *v);
    if (!v) return 1;
    for (int64_t i = 0; i < n; i++) v[i] = (i * 7 + 3) % V;
    if (argc == 10) v[atoll(argv[8])] = atoll(argv[9]);
    int status;
    if (wide) status = save_i64(argv[2], v, n, shape, nd);
    else {
        gml_context *c = gml_init((gml_init_params){.mem_size = (size_t)n * 4 + 4096});
        gml_tensor *t = gml_new_tensor(c, GML_I32, nd, shape);
        for (int64_t i = 0; i < n; i++) ((int32_t *)t->data)[i] = (int32_t)v[i];
        char err[512];
        status = gml_save_npy(argv[2], t, err, sizeof err) != GML_OK;
        if (status) fprintf(stderr, "%s\n", err);
        gml_free(c);
    }
    free(v);
    return status;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage();
    const char *m = argv[1];
    if (!strcmp(m, "losses") && argc == 4) return compare(argv[2], argv[3], 'l', 0, 0);
    if (!strcmp(m, "weights") && argc == 6) return compare(argv[2], argv[3], 'w', atof(argv[4]), atof(argv[5]));
    if (!strcmp(m, "grads") && argc == 4) return compare(argv[2], argv[3], 'g', 0, 0);
    if (!strcmp(m, "same") && argc == 4) return compare(argv[2], argv[3], 's', 0, 0);
    if (!strcmp(m, "prefix") && argc == 4) return prefix(argv[2], argv[3]);
    if (!strcmp(m, "tokens")) return tokens(argc, argv);
    return usage();
}
