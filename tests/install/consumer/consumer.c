/* A program outside the ggmlite tree, built against an installed ggmlite
 * (tests/install/test_install.sh): it uses all three libraries. It builds a
 * small causal multi-head attention block with ggmlite::models, computes it
 * on two threads, saves the output as .npy and loads it back with
 * ggmlite::io, and checks every element against a naive computation here.
 * Exit status 0 only if everything agrees; prints the versions it saw.
 *
 *     consumer DIR     (DIR: where to write out.npy) */
#include <ggmlite/attention.h>
#include <ggmlite/ggmlite.h>
#include <ggmlite/io.h>
#include <ggmlite/kv_cache.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { B = 2, T = 5, D = 8, H = 2, DK = D / H };

/* Deterministic values in [-0.5, 0.5). */
static float val(int i, int salt) {
    return (float)((i * 2654435761u + (unsigned)salt * 40503u) % 1000u) / 1000.0f - 0.5f;
}

static void fill(gml_tensor *t, int salt) {
    float *d = t->data;
    for (int64_t i = 0; i < gml_nelements(t); i++) d[i] = val((int)i, salt);
}

/* y[t][o] = sum_i x[t][i] w[o][i] + b[o] for nn.Linear's w [D, D]. */
static void linear(const float *x, const float *w, const float *b, float *y) {
    for (int t = 0; t < B * T; t++)
        for (int o = 0; o < D; o++) {
            double s = b[o];
            for (int i = 0; i < D; i++) s += (double)x[t * D + i] * w[o * D + i];
            y[t * D + o] = (float)s;
        }
}

/* Causal multi-head attention, as PyTorch writes it. */
static void naive_mha(const float *x, const float *const wt[8], float *out) {
    static float q[B * T * D], k[B * T * D], v[B * T * D], ctx[B * T * D];
    linear(x, wt[0], wt[1], q);
    linear(x, wt[2], wt[3], k);
    linear(x, wt[4], wt[5], v);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                double s[T], mx = -INFINITY, sum = 0;
                for (int j = 0; j <= i; j++) {
                    s[j] = 0;
                    for (int d = 0; d < DK; d++)
                        s[j] += (double)q[(b * T + i) * D + h * DK + d] *
                                k[(b * T + j) * D + h * DK + d];
                    s[j] /= sqrt(DK);
                    if (s[j] > mx) mx = s[j];
                }
                for (int j = 0; j <= i; j++) sum += s[j] = exp(s[j] - mx);
                for (int d = 0; d < DK; d++) {
                    double c = 0;
                    for (int j = 0; j <= i; j++) c += s[j] / sum * v[(b * T + j) * D + h * DK + d];
                    ctx[(b * T + i) * D + h * DK + d] = (float)c;
                }
            }
    linear(ctx, wt[6], wt[7], out);
}

int main(int argc, char **argv) {
    if (argc != 2) return fprintf(stderr, "usage: consumer DIR\n"), 2;
    printf("ggmlite headers %s, library %s\n", GML_VERSION, gml_version());
    if (strcmp(GML_VERSION, gml_version()) != 0 ||
        GML_VERSION_NUMBER !=
            GML_VERSION_MAJOR * 10000 + GML_VERSION_MINOR * 100 + GML_VERSION_PATCH)
        return fprintf(stderr, "version mismatch\n"), 1;

    gml_context *ctx = gml_init((gml_init_params){.mem_size = 4 << 20});
    gml_tensor *x = gml_new_tensor_3d(ctx, GML_F32, B, T, D);
    gml_tensor *w[8];
    for (int i = 0; i < 8; i++) {
        w[i] = i % 2 ? gml_new_tensor_1d(ctx, GML_F32, D) : gml_new_tensor_2d(ctx, GML_F32, D, D);
        fill(w[i], i + 1);
    }
    fill(x, 0);
    gml_attn_weights aw = {.w_q = w[0], .b_q = w[1], .w_k = w[2], .b_k = w[3],
                           .w_v = w[4], .b_v = w[5], .w_o = w[6], .b_o = w[7]};
    gml_attn_result r = gml_mha(ctx, (gml_attn_config){.dims.n_heads = H, .score.causal = GML_CAUSAL_BOTTOM_RIGHT}, &aw,
                                (gml_attn_inputs){.query = x});
    gml_graph *g = r.out ? gml_build_graph(ctx, &r.out, 1) : NULL;
    if (!g) return fprintf(stderr, "mha: %s\n", gml_last_error(ctx)), 1;
    if (gml_graph_compute(g, 2) != GML_OK) return fprintf(stderr, "%s\n", gml_graph_error(g)), 1;

    /* A builder error of one's own, through the public API: recorded, and
     * the context refuses to build a graph until it is cleared. */
    if (gml_set_error(ctx, "consumer: %d", 42) != NULL ||
        strcmp(gml_last_error(ctx), "consumer: 42") != 0 || gml_set_error(NULL, "nothing") != NULL)
        return fprintf(stderr, "gml_set_error: '%s'\n", gml_last_error(ctx)), 1;
    if (gml_build_graph(ctx, &r.out, 1) != NULL)
        return fprintf(stderr, "gml_build_graph built a graph despite an error\n"), 1;
    gml_clear_error(ctx);

    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/out.npy", argv[1]);
    if (gml_save_npy(path, r.out, err, sizeof err) != GML_OK)
        return fprintf(stderr, "%s\n", err), 1;
    gml_context *back = gml_load_npy(path, "out", err, sizeof err);
    if (!back) return fprintf(stderr, "%s\n", err), 1;
    gml_tensor *o = gml_get_tensor(back, "out");

    static float want[B * T * D];
    const float *wt[8];
    for (int i = 0; i < 8; i++) wt[i] = w[i]->data;
    naive_mha(x->data, wt, want);
    char shape[GML_SHAPE_MAX];
    double worst = 0;
    if (!o || !gml_same_shape(o, r.out))
        return fprintf(stderr, "out.npy has the wrong shape\n"), 1;
    for (int i = 0; i < B * T * D; i++) {
        double e = fabs((double)((float *)o->data)[i] - want[i]);
        if (!(e <= worst)) worst = e; /* a NaN makes worst NaN */
    }
    printf("mha %s, computed, saved and loaded; largest difference from the naive one %.3g\n",
           gml_format_shape(o, shape, sizeof shape), worst);
    gml_free(back);
    gml_graph_free(g);
    gml_free(ctx);
    if (!(worst < 1e-5)) return fprintf(stderr, "wrong result\n"), 1;
    puts("ok");
    return 0;
}
