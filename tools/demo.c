/* The README's C example: one attention head over a tiny batch. */
#include "ggmlite.h"

#include <math.h>
#include <stdio.h>

int main(void) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20});
    gml_tensor *q = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, 2, 10, 64), "q"); /* [B, T, d] */
    gml_tensor *k = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, 2, 10, 64), "k");
    gml_tensor *v = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, 2, 10, 64), "v");
    for (int i = 0; i < 2 * 10 * 64; i++) {
        ((float *)q->data)[i] = sinf((float)i);
        ((float *)k->data)[i] = cosf((float)i);
        ((float *)v->data)[i] = (float)(i % 7) - 3.0f;
    }
    gml_tensor *scores = gml_matmul(ctx, q, gml_transpose(ctx, k, -2, -1)); /* [2, 10, 10] */
    gml_tensor *w = gml_softmax(ctx, scores, NULL, 1.0f / sqrtf(64.0f), true);
    gml_tensor *out = gml_matmul(ctx, w, v);                                 /* [2, 10, 64] */
    if (!out) {
        fprintf(stderr, "demo: %s\n", gml_last_error(ctx));
        return 1;
    }
    gml_graph *g = gml_build_graph(ctx, &out, 1);
    if (gml_graph_compute(g, 2) != GML_OK) {
        fprintf(stderr, "demo: %s\n", gml_graph_error(g));
        return 1;
    }
    char shape[64];
    printf("output %s, graph digest %016llx, out[0,0,0] = %.6f\n", gml_format_shape(out, shape, sizeof shape),
           (unsigned long long)gml_graph_digest(g), ((float *)out->data)[0]);
    gml_graph_free(g);
    gml_free(ctx);
    return 0;
}
