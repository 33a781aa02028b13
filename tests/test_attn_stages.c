/* The attention stages (attention.h: project, position, attend, merge) and
 * the config's position encoding and input mask, against the naive
 * reference of attn_ref.c under every ISA and 1-3 threads, fused and
 * unfused (which must agree):
 *   - a block built from the stages with Qwen3-style per-head RMS norms of q
 *     and k between projection and rope: docs/attention.md's example,
 *     included as it stands there;
 *   - the stages without a transform give gml_mha's and gml_gqa's bits;
 *   - rope (rotate_half and interleaved, partial rotary_dim, theta,
 *     pos_scale) at default positions (self-attention, cross-attention with
 *     Tq != Tk, top-left) and at given positions;
 *   - in.mask [Tq, Tk] and [B, 1, 1, Tk] with -inf entries, with valid
 *     lengths;
 *   - rope and masks through gml_relpos_attn;
 *   - GPT-2's Conv1D weights ([in, out], packed q|k|v columns) as transposed
 *     views;
 *   - the stages' and blocks' error messages for bad masks, positions, rope
 *     settings and head tensors. */
#include "attn_check.h"
#include "attn_expect.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* docs/attention.md's stages example, as it stands there
 * (tests/CMakeLists.txt extracts it): qk_norm_attention. */
#include "docs_stages.inc"

/* The doc's block as an attn_block_fn: the case's norms, or (none) the
 * four stages back to back. */
static gml_attn_result attn_stages(gml_context *ctx, gml_attn_config cfg,
                                   const gml_attn_weights *w, gml_attn_inputs in) {
    if (attn_q_norm) return qk_norm_attention(ctx, &cfg, w, attn_q_norm, attn_k_norm, in);
    gml_attn_qkv qkv = gml_attn_project(ctx, &cfg, w, in);
    qkv = gml_attn_position(ctx, &cfg, qkv, in);
    gml_attn_heads h = gml_attn_attend(ctx, &cfg, qkv, in, w->sinks);
    gml_tensor *out = gml_attn_merge(ctx, w, h.heads);
    if (!out) return (gml_attn_result){0};
    return (gml_attn_result){.out = out, .weights = h.weights};
}

/* Each case through the unfused graph, then the fused one (attn_check
 * compares the fused output with the unfused graph's too). */
static void both(const char *block, attn_block_fn fn, attn_case c, uint64_t seed) {
    c.impl = GML_ATTN_AUTO;
    fails += attn_check(block, fn, &c, seed);
    if (fn == attn_relpos) return; /* unfused only */
    c.impl = GML_ATTN_FUSED;
    fails += attn_check(block, fn, &c, seed);
}

static void check_stage_blocks(void) {
    uint64_t seed = 7000;
    /* Qwen3 / OLMo2: q_norm, k_norm per head, then rope */
    both("stages", attn_stages,
         (attn_case){.B = 2, .Tq = 7, .D = 32, .H = 4, .causal = true, .qk_norm = true,
                     .rope = true, .bias = true},
         seed++);
    both("stages", attn_stages,
         (attn_case){.B = 2, .Tq = 9, .D = 48, .H = 6, .G = 2, .causal = true, .qk_norm = true,
                     .rope = true, .lens = ATTN_LENS_BATCH},
         seed++);
    both("stages", attn_stages,
         (attn_case){.B = 1, .Tq = 5, .Tk = 11, .cross = true, .D = 24, .H = 3, .G = 1,
                     .qk_norm = true, .rope = true, .strided = true, .mask = ATTN_MASK_QK},
         seed++);
    /* no transform: a plain block */
    both("stages", attn_stages,
         (attn_case){.B = 3, .Tq = 6, .D = 16, .H = 2, .causal = true, .packed = true,
                     .bias = true, .lens = ATTN_LENS_QUERY},
         seed++);
}

/* The stages, with nothing between them, are the blocks: same bits. */
static void check_stages_are_blocks(void) {
    const attn_case cases[] = {
        {.B = 2, .Tq = 8, .D = 32, .H = 4, .causal = true, .bias = true, .rope = true},
        {.B = 2, .Tq = 5, .Tk = 9, .cross = true, .D = 24, .H = 6, .G = 2, .lens = 1,
         .mask = ATTN_MASK_B, .rope = true, .interleaved = true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (int fused = 0; fused < 2; fused++) {
            attn_case c = cases[i];
            c.impl = fused ? GML_ATTN_FUSED : GML_ATTN_AUTO;
            attn_data *d = attn_data_new(&c, 7100 + i);
            attn_graph a, b;
            const size_t n = (size_t)c.B * c.Tq * c.D;
            float *oa = malloc(n * 4), *ob = malloc(n * 4);
            bool ok = attn_graph_build(&a, c.G && c.G != c.H ? gml_gqa : gml_mha, d, false);
            if (ok && !attn_graph_build(&b, attn_stages, d, false)) {
                attn_graph_free(&a);
                ok = false;
            }
            if (ok) {
                ok = attn_graph_run(&a, GML_ISA_AUTO, 2) && attn_graph_run(&b, GML_ISA_AUTO, 2);
                EXPECT(gml_graph_n_nodes(a.g) == gml_graph_n_nodes(b.g),
                       "case %zu: the block has %d nodes, the stages %d", i,
                       gml_graph_n_nodes(a.g), gml_graph_n_nodes(b.g));
                if (ok) {
                    attn_read(a.r.out, oa);
                    attn_read(b.r.out, ob);
                    EXPECT(memcmp(oa, ob, n * 4) == 0, "case %zu (%s): stages differ from the block",
                           i, fused ? "fused" : "unfused");
                }
                attn_graph_free(&a);
                attn_graph_free(&b);
            }
            EXPECT(ok, "case %zu: build or run failed", i);
            gml_set_isa(GML_ISA_AUTO);
            free(oa), free(ob);
            attn_data_free(d);
        }
    printf("ok   the stages without a transform give the blocks' bits\n");
}

static void check_rope(void) {
    uint64_t seed = 7200;
    const attn_case cases[] = {
        /* LLaMA-style: rotate_half, full d_k, causal self-attention */
        {.B = 2, .Tq = 9, .D = 32, .H = 4, .causal = true, .rope = true},
        /* GQA with valid lengths, GPT-J interleaved pairs, partial rotary */
        {.B = 2, .Tq = 7, .D = 48, .H = 6, .G = 3, .causal = true, .rope = true,
         .interleaved = true, .rotary_dim = 4, .lens = ATTN_LENS_QUERY},
        /* theta, pos_scale; d_k 12 with 8 rotated */
        {.B = 1, .Tq = 6, .D = 36, .H = 3, .rope = true, .theta = 500000, .pos_scale = 4,
         .rotary_dim = 8, .bias = true},
        /* cross-attention, Tq < Tk: queries at Tk - Tq + i, keys at j */
        {.B = 2, .Tq = 3, .Tk = 10, .cross = true, .D = 16, .H = 2, .causal = true, .rope = true},
        /* given positions (left padding, an offset per batch row), no causal */
        {.B = 3, .Tq = 5, .D = 16, .H = 4, .G = 2, .positions = true, .rope = true},
        {.B = 2, .Tq = 4, .Tk = 7, .cross = true, .D = 16, .H = 2, .positions = true,
         .rope = true, .strided = true},
        /* MQA, one query */
        {.B = 2, .Tq = 1, .D = 32, .H = 8, .G = 1, .causal = true, .rope = true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        attn_case c = cases[i];
        both(c.G && c.G != c.H ? "gqa" : "mha", c.G && c.G != c.H ? gml_gqa : gml_mha, c, seed++);
        if (c.G && c.G != c.H) {
            c.form = GML_GQA_REPEAT;
            c.impl = GML_ATTN_AUTO;
            fails += attn_check("gqa", gml_gqa, &c, seed++);
        }
    }
    /* relative positions and rope together (unfused only) */
    both("relpos", attn_relpos,
         (attn_case){.B = 2, .Tq = 6, .D = 16, .H = 4, .causal = true, .rel = true, .P = 2,
                     .rel_v = true, .rope = true},
         seed++);
}

/* GPT-2: Conv1D weights [D, 3D] (q | k | v columns) and [D, D], used through
 * transposed views as in_proj_weight and w_o, with biases; causal. */
static void check_conv1d(void) {
    both("mha", gml_mha,
         (attn_case){.B = 2, .Tq = 9, .D = 48, .H = 4, .causal = true, .bias = true,
                     .packed = true, .conv1d = true},
         7400);
    both("gqa", gml_gqa,
         (attn_case){.B = 2, .Tq = 7, .D = 32, .H = 4, .G = 2, .causal = true, .bias = true,
                     .packed = true, .conv1d = true, .lens = ATTN_LENS_BATCH, .rope = true},
         7401);
}

static void check_masks(void) {
    uint64_t seed = 7300;
    const attn_case cases[] = {
        {.B = 2, .Tq = 7, .D = 16, .H = 2, .mask = ATTN_MASK_QK},
        {.B = 3, .Tq = 5, .D = 24, .H = 3, .mask = ATTN_MASK_B, .causal = true},
        {.B = 2, .Tq = 4, .Tk = 9, .cross = true, .D = 32, .H = 8, .G = 2, .mask = ATTN_MASK_B,
         .lens = ATTN_LENS_BATCH},
        {.B = 2, .Tq = 6, .D = 16, .H = 4, .G = 1, .mask = ATTN_MASK_QK,
         .lens = ATTN_LENS_QUERY, .causal = true, .rope = true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const attn_case c = cases[i];
        both(c.G && c.G != c.H ? "gqa" : "mha", c.G && c.G != c.H ? gml_gqa : gml_mha, c, seed++);
    }
    both("relpos", attn_relpos,
         (attn_case){.B = 2, .Tq = 5, .D = 16, .H = 2, .rel = true, .P = 1,
                     .mask = ATTN_MASK_QK, .lens = ATTN_LENS_BATCH},
         seed++);
}

/* ---- errors -------------------------------------------------------------- */

typedef struct setup {
    gml_context *ctx;
    gml_attn_weights w;
    gml_attn_inputs in;
} setup;

/* D 32, 4 heads (d_k 8), B 2, T 3 */
static setup make_setup(void) {
    setup s = {.ctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true})};
    for (int i = 0; i < 4; i++) {
        gml_tensor *t = gml_new_tensor_2d(s.ctx, GML_F32, 32, 32);
        if (i == 0) s.w.w_q = t;
        if (i == 1) s.w.w_k = t;
        if (i == 2) s.w.w_v = t;
        if (i == 3) s.w.w_o = t;
    }
    s.in.query = gml_set_name(gml_new_tensor_3d(s.ctx, GML_F32, 2, 3, 32), "x");
    return s;
}

static void expect_block_error(const char *what, setup s, gml_attn_config cfg, const char *want) {
    gml_attn_result r = gml_mha(s.ctx, cfg, &s.w, s.in);
    const char *msg = gml_last_error(s.ctx);
    EXPECT(!r.out && !r.weights, "%s: built, expected an error", what);
    EXPECT(strstr(msg, want) != NULL, "%s: message '%s' lacks '%s'", what, msg, want);
    gml_free(s.ctx);
}

static void check_errors(void) {
    const gml_attn_config ok = {.dims.n_heads = 4};
    const gml_attn_config rope = {.dims.n_heads = 4, .pos.kind = GML_POS_ROPE};
    setup s = make_setup();
    s.in.mask = gml_new_tensor_2d(s.ctx, GML_F32, 3, 3);
    s.in.positions = gml_new_tensor_2d(s.ctx, GML_I32, 2, 3);
    EXPECT(gml_mha(s.ctx, rope, &s.w, s.in).out, "well-formed: %s", gml_last_error(s.ctx));
    gml_free(s.ctx);

    s = make_setup();
    s.in.mask = gml_set_name(gml_new_tensor_2d(s.ctx, GML_F32, 3, 4), "m");
    expect_block_error("mask [3,4]", s, ok,
                       "mha: mask 'm' is f32 [3,4], expected f32 broadcastable to [B, H, Tq, Tk] "
                       "= [2,4,3,3]");
    s = make_setup();
    s.in.mask = gml_set_name(gml_new_tensor_4d(s.ctx, GML_I32, 2, 1, 1, 3), "m");
    expect_block_error("i32 mask", s, ok, "mha: mask 'm' is i32 [2,1,1,3]");
    s = make_setup();
    s.in.positions = gml_set_name(gml_new_tensor_1d(s.ctx, GML_I32, 3), "pos");
    expect_block_error("positions [3]", s, rope,
                       "mha: positions 'pos' is i32 [3], expected i32 [2,3] ([B, Tq])");
    s = make_setup();
    s.in.positions = gml_set_name(gml_new_tensor_2d(s.ctx, GML_F32, 2, 3), "pos");
    expect_block_error("f32 positions", s, rope, "positions 'pos' is f32");
    s = make_setup();
    expect_block_error("odd rotary_dim", s,
                       (gml_attn_config){.dims.n_heads = 4, .pos = {GML_POS_ROPE, {.rotary_dim = 3}}},
                       "mha: rope rotary_dim 3 must be even and in [0, d_k 8]");
    s = make_setup();
    expect_block_error("rotary_dim > d_k", s,
                       (gml_attn_config){.dims.n_heads = 4, .pos = {GML_POS_ROPE, {.rotary_dim = 10}}},
                       "rotary_dim 10");
    s = make_setup();
    expect_block_error("theta", s,
                       (gml_attn_config){.dims.n_heads = 4, .pos = {GML_POS_ROPE, {.theta = -1}}},
                       "mha: rope theta -1 must be finite");
    s = make_setup();
    expect_block_error("pos kind", s, (gml_attn_config){.dims.n_heads = 4, .pos.kind = 5},
                       "mha: unknown position encoding 5");
    s = make_setup();
    expect_block_error("causal 7", s, (gml_attn_config){.dims.n_heads = 4, .score.causal = 7},
                       "mha: unknown causal alignment 7");
    s = make_setup();
    expect_block_error("window -1", s, (gml_attn_config){.dims.n_heads = 4, .score.window = -1},
                       "mha: window -1 is negative");
    s = make_setup();
    expect_block_error("softcap nan", s, (gml_attn_config){.dims.n_heads = 4, .score.softcap = NAN},
                       "mha: softcap nan must be finite and >= 0");
    s = make_setup();
    expect_block_error("scale -1", s, (gml_attn_config){.dims.n_heads = 4, .score.scale = -1},
                       "mha: scale -1 must be finite and > 0");
    s = make_setup();
    s.w.sinks = gml_set_name(gml_new_tensor_1d(s.ctx, GML_F32, 3), "sinks");
    expect_block_error("sinks [3]", s, ok, "mha: sinks 'sinks' is f32 [3], expected f32 [4]");

    /* the stages say who they are */
    s = make_setup();
    gml_attn_qkv qkv = gml_attn_project(s.ctx, &ok, &s.w, s.in);
    EXPECT(qkv.q && qkv.k && qkv.v && qkv.q->ne[1] == 4 && qkv.q->ne[2] == 3 && qkv.q->ne[3] == 8,
           "project: %s", gml_last_error(s.ctx));
    EXPECT(qkv.q && !gml_is_contiguous(qkv.q) && gml_is_view(qkv.q), "project: q is a view");
    gml_attn_qkv bad = qkv;
    bad.k = gml_new_tensor_4d(s.ctx, GML_F32, 2, 3, 3, 8); /* 3 kv heads for 4 heads */
    gml_attn_heads h = gml_attn_attend(s.ctx, &ok, bad, s.in, NULL);
    EXPECT(!h.heads && strstr(gml_last_error(s.ctx), "attn_attend: q ") &&
               strstr(gml_last_error(s.ctx), "G dividing H"),
           "attend with 3 kv heads: '%s'", gml_last_error(s.ctx));
    gml_attn_qkv cross = qkv;
    cross.k = cross.v = gml_new_tensor_4d(s.ctx, GML_F32, 2, 4, 5, 8);
    EXPECT(!gml_attn_position(s.ctx, &rope, cross, s.in).q &&
               strstr(gml_last_error(s.ctx), "attn_position: self-attention (no key input)"),
           "position, self with Tk 5: '%s'", gml_last_error(s.ctx));
    EXPECT(gml_attn_position(s.ctx, &rope, cross, (gml_attn_inputs){.query = s.in.query,
                                                                    .key = s.in.query}).q,
           "position, cross: %s", gml_last_error(s.ctx));
    h = gml_attn_attend(s.ctx, &ok, qkv, s.in, NULL);
    gml_attn_weights wo = {.w_o = gml_set_name(gml_new_tensor_2d(s.ctx, GML_F32, 32, 16), "wo")};
    EXPECT(!gml_attn_merge(s.ctx, &wo, h.heads) &&
               strstr(gml_last_error(s.ctx), "attn_merge: w_o.weight ('wo') is [32,16], expected "
                                             "[32,32]"),
           "merge: '%s'", gml_last_error(s.ctx));
    EXPECT(!gml_attn_merge(s.ctx, &wo, NULL) && strstr(gml_last_error(s.ctx), "attn_merge"),
           "merge NULL keeps a message: '%s'", gml_last_error(s.ctx));
    gml_free(s.ctx);
    printf("ok   errors\n");
}

int main(void) {
    check_stage_blocks();
    check_stages_are_blocks();
    check_rope();
    check_masks();
    check_conv1d();
    check_errors();
    if (fails) fprintf(stderr, "%d failures\n", fails);
    else printf("all passed\n");
    return fails != 0;
}
