/* Relative-position attention (models/relpos.c) against the naive reference
 * on many shapes (T = 1, P = 0, P beyond the sequence, Tq != Tk, d_k 5 and 7,
 * grouped kv heads), with and without a value table, every mask
 * combination; zero tables against MHA; P = 0 against MHA (a per-row
 * constant the softmax cancels); the graph's size not growing with T; errors. */
#include "attn_check.h"
#include "attn_expect.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const attn_case SHAPES[] = {
    {.B = 2, .Tq = 9, .D = 32, .H = 4, .P = 3},
    {.B = 1, .Tq = 1, .D = 8, .H = 2, .P = 2},                          /* T = 1 */
    {.B = 2, .Tq = 5, .D = 15, .H = 3, .P = 0},                         /* P = 0, d_k 5 */
    {.B = 2, .Tq = 4, .Tk = 7, .D = 14, .H = 2, .P = 2, .cross = true}, /* d_k 7, Tq < Tk */
    {.B = 3, .Tq = 6, .Tk = 3, .D = 21, .H = 3, .P = 1, .cross = true}, /* d_k 7, Tq > Tk */
    {.B = 1, .Tq = 8, .D = 12, .H = 2, .P = 20},                        /* P > T */
    {.B = 2, .Tq = 5, .D = 24, .H = 6, .G = 2, .P = 2},                 /* grouped kv heads */
    {.B = 2, .Tq = 1, .Tk = 6, .D = 10, .H = 2, .P = 3, .cross = true}, /* decoding */
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
            for (int rel_v = 0; rel_v < 2; rel_v++) {
                attn_case c = SHAPES[s];
                c.rel = true;
                c.rel_v = rel_v;
                c.causal = MASKS[m].causal;
                c.lens = MASKS[m].lens;
                c.bias = (s + m) % 2;
                c.packed = (s + m) % 4 == 3;
                c.strided = (s + m + (size_t)rel_v) % 3 == 2;
                c.form = (s + m) % 2 ? GML_GQA_REPEAT : GML_GQA_BROADCAST;
                fails += attn_check("relpos", attn_relpos, &c, 3000 + (uint64_t)n++);
            }
}

static bool run(const attn_data *d, attn_block_fn fn, float *out, float *attn) {
    attn_graph ag;
    if (!attn_graph_build(&ag, fn, d, false)) return false;
    bool ok = attn_graph_run(&ag, GML_ISA_REFERENCE, 1);
    if (ok) {
        attn_read(ag.r.out, out);
        attn_read(ag.r.weights, attn);
    }
    attn_graph_free(&ag);
    return ok;
}

/* relpos on d against mha on the same data: differences within tol. */
static void compare_with_mha(const char *what, const attn_data *d, double tol) {
    const attn_case *c = &d->c;
    size_t no = (size_t)c->B * c->Tq * c->D, na = (size_t)c->B * c->H * c->Tq * c->Tk;
    float *o1 = malloc(no * 4), *a1 = malloc(na * 4), *o2 = malloc(no * 4), *a2 = malloc(na * 4);
    if (run(d, attn_relpos, o1, a1) && run(d, gml_mha, o2, a2)) {
        double eo = attn_max_err(o1, o2, no, 0, 0, NULL), ea = attn_max_err(a1, a2, na, 0, 0, NULL);
        char desc[160];
        printf("%s %-32s %-56s max diff out %.2e attn %.2e\n",
               eo <= tol && ea <= tol ? "ok  " : "FAIL", what, attn_case_str(c, desc, sizeof desc),
               eo, ea);
        EXPECT(eo <= tol && ea <= tol, "%s: differ by %.3g (out), %.3g (attn) > %.1g", what, eo, ea,
               tol);
    } else {
        fails++;
    }
    free(o1), free(a1), free(o2), free(a2);
}

static void check_invariants(void) {
    /* Tables of zeros add nothing: exactly MHA. */
    attn_case c = {.B = 2,
                   .Tq = 4,
                   .Tk = 6,
                   .D = 15,
                   .H = 3,
                   .cross = true,
                   .causal = true,
                   .lens = ATTN_LENS_BATCH,
                   .bias = true,
                   .rel = true,
                   .P = 2,
                   .zero_tables = true};
    for (int rel_v = 0; rel_v < 2; rel_v++) {
        c.rel_v = rel_v;
        attn_data *d = attn_data_new(&c, 71);
        compare_with_mha(rel_v ? "zero rel_k, rel_v = mha" : "zero rel_k = mha", d, 0.0);
        attn_data_free(d);
    }
    /* P = 0: every pair gets rel_k[0], q_i . rel_k[0] is constant along a row,
     * and the softmax cancels it. Equal up to rounding. */
    attn_case p0 = {.B = 2, .Tq = 5, .D = 16, .H = 4, .causal = true, .rel = true, .P = 0};
    attn_data *d = attn_data_new(&p0, 72);
    compare_with_mha("P = 0, no rel_v ~ mha", d, 2e-6);
    attn_data_free(d);
}

/* Built as a graph: the same number of nodes for any T (no loop over
 * positions), with the index matrix, gathers and batched matmuls. */
static void check_graph(void) {
    int nodes[2];
    const int T[2] = {4, 33};
    for (int i = 0; i < 2; i++) {
        attn_case c = {.B = 2, .Tq = T[i], .D = 16, .H = 4, .rel = true, .rel_v = true, .P = 3};
        attn_data *d = attn_data_new(&c, 81);
        attn_graph ag;
        if (!attn_graph_build(&ag, attn_relpos, d, true)) {
            fails++;
            attn_data_free(d);
            return;
        }
        nodes[i] = gml_graph_n_nodes(ag.g);
        int rows = 0, index = 0, cont = 0;
        for (int n = 0; n < nodes[i]; n++) {
            gml_op op = gml_graph_node(ag.g, n)->op;
            rows += op == GML_OP_GET_ROWS;
            index += op == GML_OP_RELPOS_INDEX;
            cont += op == GML_OP_CONT;
        }
        EXPECT(rows == 2 && index == 1,
               "relpos graph: %d get_rows (want 2), %d relpos_index (want 1)", rows, index);
        EXPECT(cont == 0, "relpos with rel_v: %d cont nodes (the rel_v add merges the heads)",
               cont);
        const char *names[] = {"rel_idx", "rel_k_rows", "rel_v_rows", "rel_scores",
                               "rel_ctx", "scores",     "attn",       "out"};
        for (size_t k = 0; k < sizeof names / sizeof *names; k++)
            EXPECT(gml_get_tensor(ag.ctx, names[k]), "no '%s' in the relpos graph", names[k]);
        attn_graph_free(&ag);
        attn_data_free(d);
    }
    EXPECT(nodes[0] == nodes[1], "relpos graph has %d nodes at T=%d, %d at T=%d", nodes[0], T[0],
           nodes[1], T[1]);
}

static void check_errors(void) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true});
    gml_attn_weights w = {
        .w_q = gml_new_tensor_2d(ctx, GML_F32, 32, 32),
        .w_k = gml_new_tensor_2d(ctx, GML_F32, 32, 32),
        .w_v = gml_new_tensor_2d(ctx, GML_F32, 32, 32),
        .w_o = gml_new_tensor_2d(ctx, GML_F32, 32, 32),
    };
    gml_attn_inputs in = {.query = gml_new_tensor_3d(ctx, GML_F32, 2, 3, 32)};
    const gml_attn_config cfg = {.dims.n_heads = 4};
    gml_attn_result r = gml_relpos_attn(ctx, cfg, 3, &w, in);
    EXPECT(!r.out && strstr(gml_last_error(ctx), "relpos: rel_k.weight is missing"),
           "no rel_k: '%s'", gml_last_error(ctx));
    w.rel_k = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 5, 8), "rel_k.weight");
    r = gml_relpos_attn(ctx, cfg, 3, &w, in);
    EXPECT(!r.out &&
               strstr(gml_last_error(ctx), "relpos: rel_k.weight is [5,8], expected [7,8] "
                                           "([2*max_rel+1, d_k] with max_rel 3, d_k 8)"),
           "rel_k rows: '%s'", gml_last_error(ctx));
    w.rel_k = gml_new_tensor_2d(ctx, GML_F32, 7, 8);
    w.rel_v = gml_new_tensor_2d(ctx, GML_F32, 7, 4);
    r = gml_relpos_attn(ctx, cfg, 3, &w, in);
    EXPECT(!r.out && strstr(gml_last_error(ctx), "rel_v.weight"), "rel_v d_k: '%s'",
           gml_last_error(ctx));
    w.rel_v = NULL;
    r = gml_relpos_attn(ctx, cfg, -1, &w, in);
    EXPECT(!r.out && strstr(gml_last_error(ctx), "max_rel -1"), "P -1: '%s'", gml_last_error(ctx));
    r = gml_relpos_attn(ctx, cfg, 3, &w, in);
    EXPECT(r.out && !r.weights, "well-formed relpos fails, or gives weights not asked for: %s",
           gml_last_error(ctx));
    r = gml_relpos_attn(ctx, (gml_attn_config){.dims.n_heads = 4, .graph.want_weights = true}, 3, &w,
                        in);
    EXPECT(r.out && r.weights, "relpos with want_weights: %s", gml_last_error(ctx));
    /* Relative positions have only the unfused graph: auto gives it (the
     * weights when asked), fused is refused. */
    r = gml_relpos_attn(ctx, (gml_attn_config){.dims.n_heads = 4, .graph.impl = GML_ATTN_FUSED},
                        3, &w, in);
    EXPECT(!r.out && strstr(gml_last_error(ctx), "relpos: has no fused graph"), "fused: '%s'",
           gml_last_error(ctx));
    gml_free(ctx);
}

int main(void) {
    check_reference();
    check_invariants();
    check_graph();
    check_errors();
    if (fails) {
        fprintf(stderr, "test_relpos: %d failures\n", fails);
        return 1;
    }
    printf("test_relpos: all passed\n");
    return 0;
}
