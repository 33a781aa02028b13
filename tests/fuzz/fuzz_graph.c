/* libFuzzer target: gml_parse_graph on any text, with the symbols run-graph
 * passes (small values) and no bind callback, builds a graph or gives a
 * one-line "fuzz.graph:line:col: what" message; it never crashes, hangs,
 * overflows its stack or leaks (ASan, UBSan and LeakSanitizer watch). What
 * it accepts is consistent: the outputs are flagged, and the graph saved as
 * text and read back is the same graph (equal digest). Nothing is computed. */
#include <ggmlite/ggmlite.h>
#include <ggmlite/io.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const NAMES[] = {"B", "T", "S", "D", "H", "G", "P", "M", "N", "K", "CAUSAL"};
static const int64_t VALUES[] = {2, 3, 4, 8, 2, 1, 2, 3, 5, 4, 1};

static int parse(gml_context *ctx, const char *text, size_t len, gml_tensor **outs, char *err, size_t size) {
    gml_graph_binder binder = {.sym_names = NAMES, .sym_values = VALUES, .n_syms = 11};
    return gml_parse_graph(ctx, text, len, "fuzz.graph", &binder, outs, 4, err, size);
}

/* Two arenas, reused by every input (made leafs have no data worth clearing). */
#define ARENA (1 << 22)
static _Alignas(64) unsigned char arena1[ARENA], arena2[ARENA];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[1024] = "";
    gml_tensor *outs[4];
    gml_context *ctx = gml_init((gml_init_params){.mem_size = ARENA, .mem_buffer = arena1});
    int n = parse(ctx, (const char *)data, size, outs, err, sizeof err);
    if (n < 0) {
        if (strncmp(err, "fuzz.graph:", 11) != 0 || strchr(err, '\n')) __builtin_trap();
        gml_free(ctx);
        return 0;
    }
    if (n < 1 || n > 4) __builtin_trap();
    gml_graph *g = gml_build_graph(ctx, outs, n);
    if (!g) __builtin_trap();
    for (int i = 0; i < n; i++)
        if (!(gml_graph_tensor(g, outs[i])->flags & GML_FLAG_OUTPUT) || outs[i]->flags & GML_FLAG_OUTPUT)
            __builtin_trap();

    /* save, read back: the same graph */
    char path[64];
    snprintf(path, sizeof path, "/tmp/fuzz_graph.%d.graph", (int)getpid());
    if (gml_save_graph(path, g, outs, n, err, sizeof err) != GML_OK) __builtin_trap();
    gml_context *ctx2 = gml_init((gml_init_params){.mem_size = ARENA, .mem_buffer = arena2});
    gml_tensor *outs2[4];
    int n2 = gml_load_graph(ctx2, path, NULL, outs2, 4, err, sizeof err);
    unlink(path);
    if (n2 != n) __builtin_trap();
    gml_graph *g2 = gml_build_graph(ctx2, outs2, n2);
    if (!g2 || gml_graph_digest(g2) != gml_graph_digest(g)) __builtin_trap();
    gml_graph_free(g2);
    gml_free(ctx2);
    gml_graph_free(g);
    gml_free(ctx);
    return 0;
}
