/* Grouped-query attention (models/attn_block.c, attn_unfused.c), both graph
 * forms, against the naive reference on many shapes (MQA, T = 1, d_k = 5,
 * 7, Tq != Tk) and every mask combination; the two forms against each
 * other; G = H against MHA; GQA against MHA with its K/V weights expanded
 * head by head; the memory each form needs; errors and parameter counts. */
#include "attn_check.h"
#include "attn_expect.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const attn_case SHAPES[] = {
    {.B = 2, .Tq = 5, .D = 16, .H = 4, .G = 2},
    {.B = 1, .Tq = 1, .D = 12, .H = 6, .G = 3},                         /* T = 1, d_k 2 */
    {.B = 2, .Tq = 4, .Tk = 6, .D = 30, .H = 6, .G = 2, .cross = true}, /* d_k 5 */
    {.B = 3, .Tq = 7, .D = 28, .H = 4, .G = 1},                         /* MQA, d_k 7 */
    {.B = 2, .Tq = 6, .Tk = 3, .D = 14, .H = 2, .G = 1, .cross = true}, /* MQA, Tq > Tk */
    {.B = 2, .Tq = 5, .D = 24, .H = 8, .G = 4},                         /* d_k 3 */
    {.B = 2, .Tq = 1, .Tk = 5, .D = 16, .H = 4, .G = 2, .cross = true}, /* decoding */
    {.B = 2, .Tq = 4, .D = 8, .H = 4, .G = 4},                          /* G = H */
};

static const struct {
    bool causal;
    int lens;
} MASKS[] = {
    {false, ATTN_LENS_NONE},  {true, ATTN_LENS_NONE},  {false, ATTN_LENS_BATCH},
    {false, ATTN_LENS_QUERY}, {true, ATTN_LENS_BATCH}, {true, ATTN_LENS_QUERY},
};

static void check_reference(void) {
    int n = 0;
    for (size_t s = 0; s < sizeof SHAPES / sizeof *SHAPES; s++)
        for (size_t m = 0; m < sizeof MASKS / sizeof *MASKS; m++)
            for (int form = 0; form < 2; form++) {
                attn_case c = SHAPES[s];
                c.causal = MASKS[m].causal;
                c.lens = MASKS[m].lens;
                c.form = form ? GML_GQA_REPEAT : GML_GQA_BROADCAST;
                int variant = (int)(s + m) % 4;
                c.bias = variant & 1;
                c.packed = variant & 2;
                c.strided = (s + m) % 3 == 1;
                fails += attn_check("gqa", gml_gqa, &c, 2000 + (uint64_t)n++);
                if (form) continue;
                c.impl = GML_ATTN_FUSED; /* K, V read at G heads by gml_flash_attn */
                fails += attn_check("gqa", gml_gqa, &c, 2000 + (uint64_t)n++);
            }
    printf("fused vs unfused output: max error %.2e relative\n", attn_fused_max_rel);
}

/* Builds and runs d's case with fn (reference kernels, 1 thread). */
static bool run(const attn_data *d, attn_block_fn fn, float *out, float *attn) {
    attn_graph ag;
    if (!attn_graph_build(&ag, fn, d, false)) return false;
    bool ok = attn_graph_run(&ag, GML_ISA_REFERENCE, 1);
    if (ok) {
        attn_read(ag.r.out, out);
        if (ag.r.weights) attn_read(ag.r.weights, attn); /* fused: none */
    }
    attn_graph_free(&ag);
    return ok;
}

/* Compares two runs of (possibly different) data/blocks to within tol. */
static void compare_runs(const char *what, const attn_data *d1, attn_block_fn f1,
                         const attn_data *d2, attn_block_fn f2, double tol) {
    const attn_case *c = &d1->c;
    size_t no = (size_t)c->B * c->Tq * c->D, na = (size_t)c->B * c->H * c->Tq * c->Tk;
    float *o1 = malloc(no * 4), *a1 = calloc(na, 4), *o2 = malloc(no * 4), *a2 = calloc(na, 4);
    if (run(d1, f1, o1, a1) && run(d2, f2, o2, a2)) {
        double eo = attn_max_err(o2, o1, no, 0, 0, NULL), ea = attn_max_err(a2, a1, na, 0, 0, NULL);
        char desc[160];
        printf("%s %-44s %-44s max diff out %.2e attn %.2e\n",
               eo <= tol && ea <= tol ? "ok  " : "FAIL", what, attn_case_str(c, desc, sizeof desc),
               eo, ea);
        EXPECT(eo <= tol && ea <= tol, "%s: differ by %.3g (out), %.3g (attn) > %.1g", what, eo, ea,
               tol);
    } else {
        fails++;
    }
    free(o1), free(a1), free(o2), free(a2);
}

/* The repeat and broadcast forms agree to within float rounding. */
static void check_forms_agree(void) {
    for (size_t s = 0; s < sizeof SHAPES / sizeof *SHAPES; s++) {
        attn_case c = SHAPES[s];
        c.causal = s % 2;
        c.lens = (int)(s % 3);
        c.bias = true;
        c.form = GML_GQA_BROADCAST;
        attn_data *b = attn_data_new(&c, 300 + s);
        c.form = GML_GQA_REPEAT;
        attn_data *r = attn_data_new(&c, 300 + s);
        compare_runs("forms: broadcast vs repeat", b, gml_gqa, r, gml_gqa, 1e-6);
        attn_data_free(b);
        attn_data_free(r);
    }
}

/* G = H is MHA, in both forms. */
static void check_equals_mha(void) {
    attn_case c = {.B = 2,
                   .Tq = 4,
                   .Tk = 5,
                   .D = 15,
                   .H = 3,
                   .G = 3,
                   .cross = true,
                   .causal = true,
                   .lens = ATTN_LENS_QUERY,
                   .bias = true};
    for (int form = 0; form < 2; form++) {
        c.form = form ? GML_GQA_REPEAT : GML_GQA_BROADCAST;
        attn_data *d = attn_data_new(&c, 41);
        compare_runs(form ? "G = H: gqa (repeat) vs mha" : "G = H: gqa (broadcast) vs mha", d,
                     gml_gqa, d, gml_mha, 1e-6);
        attn_data_free(d);
    }
}

/* GQA is MHA whose W_k, W_v rows for query head h are kv head h / (H/G)'s:
 * the head mapping repeat_interleave gives. */
static void check_expanded_mha(void) {
    attn_case c = {.B = 2, .Tq = 5, .D = 24, .H = 6, .G = 2, .causal = true, .bias = true};
    const int dk = c.D / c.H, r = c.H / c.G;
    for (int form = 0; form < 3; form++) { /* broadcast, repeat, fused */
        c.form = form == 1 ? GML_GQA_REPEAT : GML_GQA_BROADCAST;
        c.impl = form == 2 ? GML_ATTN_FUSED : GML_ATTN_AUTO;
        c.G = 2;
        attn_data *g = attn_data_new(&c, 51);
        c.G = c.H;
        attn_data *m = attn_data_new(&c, 51);
        memcpy(m->xq, g->xq, sizeof(float) * (size_t)(c.B * c.Tq * c.D));
        memcpy(m->wq, g->wq, sizeof(float) * (size_t)(c.D * c.D));
        memcpy(m->wo, g->wo, sizeof(float) * (size_t)(c.D * c.D));
        memcpy(m->bq, g->bq, sizeof(float) * (size_t)c.D);
        memcpy(m->bo, g->bo, sizeof(float) * (size_t)c.D);
        for (int h = 0; h < c.H; h++) {
            const int kv = h / r;
            memcpy(m->wk + (size_t)h * dk * c.D, g->wk + (size_t)kv * dk * c.D,
                   sizeof(float) * (size_t)(dk * c.D));
            memcpy(m->wv + (size_t)h * dk * c.D, g->wv + (size_t)kv * dk * c.D,
                   sizeof(float) * (size_t)(dk * c.D));
            memcpy(m->bk + (size_t)h * dk, g->bk + (size_t)kv * dk, sizeof(float) * (size_t)dk);
            memcpy(m->bv + (size_t)h * dk, g->bv + (size_t)kv * dk, sizeof(float) * (size_t)dk);
        }
        compare_runs(form == 2   ? "gqa (fused) vs mha (fused), W_k/W_v expanded"
                     : form == 1 ? "gqa (repeat) vs mha, W_k/W_v expanded"
                                 : "gqa (broadcast) vs mha, W_k/W_v expanded",
                     g, gml_gqa, m, gml_mha, 1e-6);
        attn_data_free(g);
        attn_data_free(m);
    }
}

/* Bytes of the tensors the graph computes (non-view nodes), and how many
 * nodes of op it has. */
static size_t computed_bytes(const gml_graph *g) {
    size_t n = 0;
    for (int i = 0; i < gml_graph_n_nodes(g); i++) {
        const gml_tensor *t = gml_graph_node(g, i);
        if (!gml_is_view(t)) n += gml_nbytes(t);
    }
    return n;
}

static int count_op(const gml_graph *g, gml_op op) {
    int n = 0;
    for (int i = 0; i < gml_graph_n_nodes(g); i++)
        n += gml_graph_node(g, i)->op == op;
    return n;
}

/* The broadcast form needs less memory: it copies Q (B Tq D floats; nothing
 * when Tq = 1) where the repeat form writes K and V at H heads (2 B Tk D
 * floats). */
static void check_memory_case(attn_case c) {
    size_t bytes[2], arena[2];
    int reps[2], conts[2];
    for (int form = 0; form < 2; form++) {
        c.form = form ? GML_GQA_REPEAT : GML_GQA_BROADCAST;
        attn_data *d = attn_data_new(&c, 61);
        attn_graph ag;
        if (!attn_graph_build(&ag, gml_gqa, d, true)) {
            fails++;
            attn_data_free(d);
            return;
        }
        bytes[form] = computed_bytes(ag.g);
        arena[form] = gml_mem_required(ag.ctx);
        reps[form] = count_op(ag.g, GML_OP_REPEAT_INTERLEAVE);
        conts[form] = count_op(ag.g, GML_OP_CONT);
        attn_graph_free(&ag);
        attn_data_free(d);
    }
    const int tk = c.cross ? c.Tk : c.Tq;
    const size_t q_bytes = c.Tq > 1 ? (size_t)c.B * c.Tq * c.D * 4 : 0;
    const size_t kv_bytes = 2 * (size_t)c.B * tk * c.D * 4;
    printf("memory, B%d Tq%d Tk%d D%d H%d G%d: computed tensors: broadcast %zu bytes, repeat %zu "
           "bytes (%.2fx); whole arena: broadcast %zu, repeat %zu\n",
           c.B, c.Tq, tk, c.D, c.H, c.G, bytes[0], bytes[1], (double)bytes[1] / (double)bytes[0],
           arena[0], arena[1]);
    EXPECT(bytes[0] < bytes[1], "broadcast form computes %zu bytes, repeat %zu", bytes[0],
           bytes[1]);
    EXPECT(bytes[1] - bytes[0] == kv_bytes - q_bytes,
           "the forms differ by %zu bytes, expected repeated K, V (%zu) minus the copy of Q (%zu)",
           bytes[1] - bytes[0], kv_bytes, q_bytes);
    EXPECT(arena[0] < arena[1], "arena: broadcast %zu, repeat %zu", arena[0], arena[1]);
    EXPECT(reps[0] == 0 && reps[1] == 2,
           "repeat_interleave nodes: broadcast %d (want 0), repeat %d (want 2)", reps[0], reps[1]);
    /* The fused graph: no repeat, no copy, no scores; less than either. */
    c.impl = GML_ATTN_FUSED;
    attn_data *d = attn_data_new(&c, 61);
    attn_graph ag;
    if (attn_graph_build(&ag, gml_gqa, d, true)) {
        const size_t fused = computed_bytes(ag.g);
        printf("memory, fused: computed tensors %zu bytes (%.2fx less than broadcast)\n", fused,
               (double)bytes[0] / (double)fused);
        EXPECT(fused < bytes[0], "fused graph computes %zu bytes, broadcast %zu", fused, bytes[0]);
        EXPECT(count_op(ag.g, GML_OP_REPEAT_INTERLEAVE) == 0 && count_op(ag.g, GML_OP_CONT) == 0,
               "the fused graph repeats or copies");
        attn_graph_free(&ag);
    } else {
        fails++;
    }
    attn_data_free(d);
    const int q_copies = c.Tq > 1 ? 1 : 0, merge = c.Tq > 1 ? 1 : 0;
    EXPECT(conts[0] == q_copies + merge && conts[1] == merge,
           "cont nodes: broadcast %d (want %d), repeat %d (want %d)", conts[0], q_copies + merge,
           conts[1], merge);
}

static void check_memory(void) {
    check_memory_case((attn_case){.B = 2, .Tq = 64, .D = 256, .H = 16, .G = 4});
    /* decoding one token against a long context */
    check_memory_case(
        (attn_case){.B = 2, .Tq = 1, .Tk = 1024, .D = 256, .H = 16, .G = 4, .cross = true});
}

static void check_errors(void) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true});
    gml_attn_weights w = {
        .w_q = gml_new_tensor_2d(ctx, GML_F32, 32, 32),
        .w_k = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 32, 32), "w_k.weight"),
        .w_v = gml_new_tensor_2d(ctx, GML_F32, 16, 32),
        .w_o = gml_new_tensor_2d(ctx, GML_F32, 32, 32),
    };
    gml_attn_inputs in = {.query = gml_new_tensor_3d(ctx, GML_F32, 2, 3, 32)};
    gml_attn_result r = gml_gqa(ctx, (gml_attn_config){.dims = {.n_heads = 8, .n_kv_heads = 3}}, &w, in);
    EXPECT(!r.out && strstr(gml_last_error(ctx), "gqa: kv_heads 3 must divide heads 8"),
           "kv 3, heads 8: '%s'", gml_last_error(ctx));
    gml_clear_error(ctx);
    r = gml_gqa(ctx, (gml_attn_config){.dims = {.n_heads = 8, .n_kv_heads = 4}}, &w, in);
    EXPECT(!r.out &&
               strstr(gml_last_error(ctx),
                      "gqa: w_k.weight is [32,32], expected [16,32] ([kv_heads*d_k, d_model])"),
           "w_k for 4 kv heads: '%s'", gml_last_error(ctx));
    gml_clear_error(ctx);
    r = gml_gqa(ctx, (gml_attn_config){.dims = {.n_heads = 8, .n_kv_heads = 16}}, &w, in);
    EXPECT(!r.out && strstr(gml_last_error(ctx), "kv_heads 16 must divide heads 8"), "'%s'",
           gml_last_error(ctx));
    gml_clear_error(ctx);
    r = gml_gqa(ctx, (gml_attn_config){.dims = {.n_heads = 8, .n_kv_heads = 2}, .graph.gqa_form = 7}, &w, in);
    EXPECT(!r.out && strstr(gml_last_error(ctx), "unknown gqa_form 7"), "'%s'",
           gml_last_error(ctx));
    gml_free(ctx);
}

static void check_param_count(void) {
    /* GQA 32/8 at D 4096 (d_k 128): 2 D^2 + 2 D (8*128) */
    EXPECT(gml_gqa_param_count(4096, 32, 8, false) == 2LL * 4096 * 4096 + 2LL * 4096 * 1024,
           "4096/32/8: %lld", (long long)gml_gqa_param_count(4096, 32, 8, false));
    EXPECT(gml_gqa_param_count(768, 12, 12, false) == gml_mha_param_count(768, 12, false), "G = H");
    EXPECT(gml_gqa_param_count(64, 8, 1, true) == 2 * 64 * 64 + 2 * 64 * 8 + 2 * 64 + 2 * 8, "MQA");
    EXPECT(gml_gqa_param_count(64, 8, 3, false) == -1, "8 %% 3");
    attn_case c = {.B = 1, .Tq = 2, .D = 24, .H = 6, .G = 2, .bias = true};
    attn_data *d = attn_data_new(&c, 1);
    attn_graph ag;
    if (attn_graph_build(&ag, gml_gqa, d, true)) {
        int64_t n = 0;
        for (int i = 0; i < gml_graph_n_leafs(ag.g); i++)
            if (strchr(gml_graph_leaf(ag.g, i)->name, '.'))
                n += gml_nelements(gml_graph_leaf(ag.g, i));
        EXPECT(n == gml_gqa_param_count(24, 6, 2, true), "graph binds %lld, count says %lld",
               (long long)n, (long long)gml_gqa_param_count(24, 6, 2, true));
        attn_graph_free(&ag);
    }
    attn_data_free(d);
}

int main(void) {
    check_reference();
    check_forms_agree();
    check_equals_mha();
    check_expanded_mha();
    check_memory();
    check_errors();
    check_param_count();
    if (fails) {
        fprintf(stderr, "test_gqa: %d failures\n", fails);
        return 1;
    }
    printf("test_gqa: all passed\n");
    return 0;
}
