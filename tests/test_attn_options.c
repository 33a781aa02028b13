/* The scoring options of the attention config (cfg.score: causal alignment
 * top-left, sliding window, logit soft-capping, ALiBi, a scale override;
 * attention sinks from the weights; causal masking at given positions)
 * through gml_mha, gml_gqa (both GQA forms) and gml_relpos_attn, fused and
 * unfused (the two must agree), against the naive double-precision
 * reference of attn_ref.c under every ISA and 1-3 threads; alone and
 * combined with each other, rope, valid lengths and masks. No dense mask is
 * made by the blocks for any of them (checked on the graphs). */
#include "attn_check.h"
#include "attn_expect.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool gqa_case(const attn_case *c) { return c->G && c->G != c->H; }

/* The case unfused (with weights), fused (checked against the unfused too)
 * and, for GQA, in the repeat form. */
static void all_graphs(attn_case c, uint64_t seed) {
    attn_block_fn fn = gqa_case(&c) ? gml_gqa : gml_mha;
    const char *name = gqa_case(&c) ? "gqa" : "mha";
    c.impl = GML_ATTN_AUTO;
    fails += attn_check(name, fn, &c, seed);
    c.impl = GML_ATTN_FUSED;
    fails += attn_check(name, fn, &c, seed);
    if (gqa_case(&c)) {
        c.impl = GML_ATTN_AUTO;
        c.form = GML_GQA_REPEAT;
        fails += attn_check(name, fn, &c, seed);
    }
}

static void check_options(void) {
    uint64_t seed = 8000;
    const attn_case cases[] = {
        /* sliding window (implies causal), W 1, 3, past T */
        {.B = 2, .Tq = 9, .D = 32, .H = 4, .window = 3},
        {.B = 2, .Tq = 7, .D = 24, .H = 6, .G = 2, .window = 1, .causal = true},
        {.B = 1, .Tq = 40, .D = 16, .H = 2, .window = 37, .causal = true, .lens = ATTN_LENS_BATCH},
        {.B = 2, .Tq = 4, .Tk = 11, .cross = true, .D = 16, .H = 2, .window = 5},
        /* top-left causal, Tq < Tk and Tq > Tk */
        {.B = 2, .Tq = 4, .Tk = 9, .cross = true, .D = 16, .H = 4, .G = 2, .causal = true,
         .top_left = true},
        {.B = 2, .Tq = 8, .Tk = 5, .cross = true, .D = 16, .H = 2, .causal = true, .top_left = true},
        {.B = 2, .Tq = 6, .D = 16, .H = 2, .causal = true, .top_left = true, .rope = true},
        /* soft-capping: scores of 1/sqrt(d_k) scale, a cap that bites */
        {.B = 2, .Tq = 7, .D = 32, .H = 4, .softcap = 0.5f, .causal = true, .scale = 2.0f},
        {.B = 2, .Tq = 6, .D = 48, .H = 6, .G = 3, .softcap = 30.0f, .lens = ATTN_LENS_QUERY},
        /* ALiBi: H a power of two and not (the second slope series) */
        {.B = 2, .Tq = 9, .D = 32, .H = 8, .alibi = 8.0f, .causal = true},
        {.B = 1, .Tq = 7, .D = 36, .H = 6, .G = 2, .alibi = 8.0f, .causal = true, .bias = true},
        {.B = 2, .Tq = 5, .D = 12, .H = 3, .alibi = 4.0f},
        /* sinks: with and without causal, lengths (0 included), GQA */
        {.B = 2, .Tq = 8, .D = 32, .H = 4, .sinks = true, .causal = true},
        {.B = 3, .Tq = 6, .D = 24, .H = 6, .G = 2, .sinks = true, .lens = ATTN_LENS_BATCH},
        {.B = 2, .Tq = 3, .Tk = 10, .cross = true, .D = 16, .H = 4, .G = 1, .sinks = true},
        /* a scale override */
        {.B = 2, .Tq = 5, .D = 16, .H = 2, .scale = 0.3f, .causal = true},
        /* causal and window at given positions */
        {.B = 3, .Tq = 5, .Tk = 45, .cross = true, .D = 16, .H = 2, .positions = true,
         .causal = true},
        {.B = 2, .Tq = 6, .Tk = 45, .cross = true, .D = 16, .H = 4, .G = 2, .positions = true,
         .window = 4, .alibi = 8.0f},
        /* everything a gpt-oss / Gemma-2 / Mistral layer combines */
        {.B = 2, .Tq = 11, .D = 64, .H = 8, .G = 2, .causal = true, .window = 4, .sinks = true,
         .rope = true, .bias = true},
        {.B = 2, .Tq = 9, .D = 32, .H = 4, .G = 2, .causal = true, .window = 5, .softcap = 1.0f,
         .rope = true, .mask = ATTN_MASK_B},
        {.B = 2, .Tq = 7, .D = 32, .H = 4, .alibi = 8.0f, .softcap = 2.0f, .sinks = true,
         .lens = ATTN_LENS_QUERY, .mask = ATTN_MASK_QK},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) all_graphs(cases[i], seed++);
    /* relative positions take the scoring options too (unfused only) */
    const attn_case rel[] = {
        {.B = 2, .Tq = 7, .D = 16, .H = 4, .rel = true, .P = 2, .rel_v = true, .window = 3},
        {.B = 2, .Tq = 6, .D = 16, .H = 2, .rel = true, .P = 1, .sinks = true, .softcap = 1.0f,
         .alibi = 8.0f, .causal = true},
    };
    for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
        attn_case c = rel[i];
        fails += attn_check("relpos", attn_relpos, &c, seed++);
    }
}

/* The options are arguments of the attention ops, not masks: no
 * valid_len_mask or other [.., Tq, Tk] tensor is made besides the scores
 * and weights of the unfused graph. */
static void check_no_dense_mask(void) {
    for (int fused = 0; fused < 2; fused++) {
        attn_case c = {.B = 2, .Tq = 16, .D = 32, .H = 4, .G = 2, .causal = true, .window = 4,
                       .sinks = true, .alibi = 8.0f, .softcap = 5.0f, .lens = ATTN_LENS_BATCH,
                       .impl = fused ? GML_ATTN_FUSED : GML_ATTN_AUTO};
        attn_data *d = attn_data_new(&c, 8500);
        attn_graph ag;
        if (!attn_graph_build(&ag, gml_gqa, d, true)) {
            fails++;
        } else {
            int big = 0;
            for (int i = 0; i < gml_graph_n_nodes(ag.g); i++) {
                const gml_tensor *t = gml_graph_node(ag.g, i);
                EXPECT(t->op != GML_OP_VALID_LEN_MASK, "%s graph: a valid_len_mask node '%s'",
                       fused ? "fused" : "unfused", t->name);
                if (!gml_is_view(t) && gml_nelements(t) >= (int64_t)c.B * c.H * c.Tq * c.Tq) big++;
            }
            EXPECT(big == (fused ? 0 : 2), "%s graph: %d nodes of [B, H, Tq, Tk] (want %d: scores, "
                   "weights)", fused ? "fused" : "unfused", big, fused ? 0 : 2);
            attn_graph_free(&ag);
        }
        attn_data_free(d);
    }
    printf("ok   no dense mask in either graph\n");
}

int main(void) {
    check_options();
    check_no_dense_mask();
    if (fails) fprintf(stderr, "%d failures\n", fails);
    else printf("all passed\n");
    return fails != 0;
}
