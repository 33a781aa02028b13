/* A shared object with ggmlite linked in statically (libggmlite.a is
 * position-independent); tests/install/test_install.sh loads it with
 * plugin_loader.c. */
#include <ggmlite/ggmlite.h>

/* 3 * 2 + 1, computed by a graph: 7.0f if the library works. */
float plugin_run(void);

float plugin_run(void) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 16});
    if (!ctx) return -1;
    gml_tensor *a = gml_new_tensor_1d(ctx, GML_F32, 1);
    gml_tensor *b = gml_new_tensor_1d(ctx, GML_F32, 1);
    ((float *)a->data)[0] = 3;
    ((float *)b->data)[0] = 1;
    gml_tensor *y = gml_add(ctx, gml_scale(ctx, a, 2), b);
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    float r = g && gml_graph_compute(g, 1) == GML_OK ? ((float *)y->data)[0] : -1;
    gml_graph_free(g);
    gml_free(ctx);
    return r;
}
