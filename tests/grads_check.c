/* Helper of tests/test_grads_cli.sh: run-graph --grads files against the
 * PyTorch fixtures (tests/fixtures/grads), with the library's safetensors
 * loader.
 *
 *   grads_check close GOT.safetensors WANT.safetensors
 *       the same names (none missing, none extra), each F32 of the same
 *       shape, each element |got - want| <= 1e-4 (|want| + max|want of the
 *       tensor|) + 1e-6 max|want of every tensor| (the last term: gradients
 *       that are 0 exactly, as a key bias's, get float32 rounding noise of
 *       the other gradients' size); prints the largest error as a share of
 *       that bound
 *   grads_check names FILE.safetensors
 *       prints "name dtype [shape]" of each tensor, in file order
 *
 * Exit status 0 when the check holds, 1 when not (with a message), 2 on
 * wrong usage. */
#include <ggmlite/ggmlite.h>
#include <ggmlite/io.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static gml_context *load(const char *path) {
    char err[1024];
    gml_context *c = gml_load_safetensors(path, err, sizeof err);
    if (!c) {
        fprintf(stderr, "grads_check: %s\n", err);
        exit(1);
    }
    return c;
}

static double max_abs(const gml_tensor *t) {
    double m = 0;
    for (int64_t i = 0; i < gml_nelements(t); i++) m = fmax(m, fabs((double)((const float *)t->data)[i]));
    return m;
}

static int close_check(const char *got_path, const char *want_path) {
    gml_context *cg = load(got_path), *cw = load(want_path);
    int bad_tensors = 0;
    double global = 0, worst = 0;
    const char *worst_name = "";
    for (gml_tensor *w = gml_get_first_tensor(cw); w; w = gml_get_next_tensor(cw, w)) global = fmax(global, max_abs(w));
    for (gml_tensor *g = gml_get_first_tensor(cg); g; g = gml_get_next_tensor(cg, g))
        if (!gml_get_tensor(cw, g->name)) {
            fprintf(stderr, "grads_check: %s has '%s', which %s has not\n", got_path, g->name, want_path);
            bad_tensors++;
        }
    for (gml_tensor *w = gml_get_first_tensor(cw); w; w = gml_get_next_tensor(cw, w)) {
        const gml_tensor *g = gml_get_tensor(cg, w->name);
        char sg[64], sw[64];
        if (!g) {
            fprintf(stderr, "grads_check: %s has no '%s'\n", got_path, w->name);
            bad_tensors++;
            continue;
        }
        if (g->type != GML_F32 || w->type != GML_F32 || !gml_same_shape(g, w)) {
            fprintf(stderr, "grads_check: '%s' is %s %s in %s, %s %s in %s\n", w->name, gml_type_name(g->type),
                    gml_format_shape(g, sg, sizeof sg), got_path, gml_type_name(w->type),
                    gml_format_shape(w, sw, sizeof sw), want_path);
            bad_tensors++;
            continue;
        }
        const float *gv = g->data, *wv = w->data;
        const double top = max_abs(w);
        int64_t bad = 0, at = 0;
        double tensor_worst = 0;
        for (int64_t i = 0; i < gml_nelements(w); i++) {
            const double err = fabs((double)gv[i] - (double)wv[i]);
            const double bound = 1e-4 * (fabs((double)wv[i]) + top) + 1e-6 * global;
            const double ratio = isnan(err) ? INFINITY : err / bound;
            if (!(err <= bound)) bad++;
            if (ratio > tensor_worst || i == 0) tensor_worst = ratio, at = i;
        }
        if (bad) {
            fprintf(stderr, "grads_check: '%s' %s: %" PRId64 " of %" PRId64 " values outside the bound, the worst "
                    "at [%" PRId64 "]: %.9g vs %.9g\n", w->name, gml_format_shape(w, sw, sizeof sw), bad,
                    gml_nelements(w), at, (double)gv[at], (double)wv[at]);
            bad_tensors++;
        }
        if (tensor_worst > worst) worst = tensor_worst, worst_name = w->name;
    }
    printf("%s vs %s: largest error %.3g of the bound (%s)\n", got_path, want_path, worst, worst_name);
    gml_free(cg);
    gml_free(cw);
    return bad_tensors ? 1 : 0;
}

static int names(const char *path) {
    gml_context *c = load(path);
    for (gml_tensor *t = gml_get_first_tensor(c); t; t = gml_get_next_tensor(c, t)) {
        char s[64];
        printf("%s %s %s\n", t->name, gml_type_name(t->type), gml_format_shape(t, s, sizeof s));
    }
    gml_free(c);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "close") == 0) return close_check(argv[2], argv[3]);
    if (argc == 3 && strcmp(argv[1], "names") == 0) return names(argv[2]);
    fprintf(stderr, "usage: grads_check close GOT.safetensors WANT.safetensors | names FILE.safetensors\n");
    return 2;
}
