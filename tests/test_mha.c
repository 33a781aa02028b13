/* Multi-head attention (models/attn_block.c) against the naive reference on many
 * shapes (T = 1, d_k = 1, 5, 7, Tq != Tk) and every mask combination, with
 * and without bias, separate and packed (nn.MultiheadAttention) weights,
 * contiguous and strided inputs; plus its invariants, its graph (names,
 * views, copies), its error messages and its parameter count. */
#include "attn_check.h"
#include "attn_expect.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- against the reference ----------------------------------------------- */

static const attn_case SHAPES[] = {
    {.B = 2, .Tq = 5, .D = 16, .H = 4},                         /* d_k 4 */
    {.B = 1, .Tq = 1, .D = 8, .H = 2},                          /* T = 1 */
    {.B = 2, .Tq = 1, .D = 6, .H = 6},                          /* T = 1, d_k = 1 */
    {.B = 2, .Tq = 3, .D = 15, .H = 3},                         /* d_k 5 */
    {.B = 3, .Tq = 4, .Tk = 6, .D = 14, .H = 2, .cross = true}, /* d_k 7, Tq < Tk */
    {.B = 2, .Tq = 6, .Tk = 4, .D = 21, .H = 3, .cross = true}, /* d_k 7, Tq > Tk */
    {.B = 1, .Tq = 1, .Tk = 7, .D = 10, .H = 2, .cross = true}, /* one query (decoding) */
    {.B = 2, .Tq = 7, .D = 12, .H = 1},                         /* one head */
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
            for (int variant = 0; variant < 4; variant++) {
                attn_case c = SHAPES[s];
                c.causal = MASKS[m].causal;
                c.lens = MASKS[m].lens;
                c.bias = variant & 1;
                c.packed = variant & 2;
                c.strided = (s + m + (size_t)variant) % 3 == 0;
                fails += attn_check("mha", gml_mha, &c, 1000 + (uint64_t)n++);
                c.impl = GML_ATTN_FUSED; /* the same case through gml_flash_attn */
                fails += attn_check("mha", gml_mha, &c, 1000 + (uint64_t)n++);
            }
    printf("fused vs unfused output: max error %.2e relative\n", attn_fused_max_rel);
}

/* ---- invariants ------------------------------------------------------------ */

/* Runs case c on d (reference kernels, 2 threads) into out/attn (attn
 * untouched for a fused case). */
static bool run(const attn_data *d, attn_block_fn fn, float *out, float *attn) {
    attn_graph ag;
    if (!attn_graph_build(&ag, fn, d, false)) return false;
    bool ok = attn_graph_run(&ag, GML_ISA_REFERENCE, 2);
    if (ok) {
        attn_read(ag.r.out, out);
        if (ag.r.weights) attn_read(ag.r.weights, attn);
    }
    attn_graph_free(&ag);
    return ok;
}

/* Valid lengths all equal to Tk change nothing. */
static void check_full_lengths(void) {
    attn_case c = {.B = 3, .Tq = 4, .Tk = 6, .D = 15, .H = 3, .cross = true, .bias = true};
    for (int kind = ATTN_LENS_BATCH; kind <= ATTN_LENS_QUERY; kind++)
        for (int causal = 0; causal < 2; causal++) {
            c.causal = causal;
            c.lens = ATTN_LENS_NONE;
            attn_data *plain = attn_data_new(&c, 77);
            c.lens = kind;
            attn_data *full = attn_data_new(&c, 77);
            size_t n_len = kind == ATTN_LENS_BATCH ? (size_t)c.B : (size_t)c.B * c.Tq;
            for (size_t i = 0; i < n_len; i++)
                full->lens[i] = c.Tk;
            size_t no = (size_t)c.B * c.Tq * c.D, na = (size_t)c.B * c.H * c.Tq * c.Tk;
            float *o1 = malloc(no * 4), *a1 = malloc(na * 4), *o2 = malloc(no * 4),
                  *a2 = malloc(na * 4);
            if (run(plain, gml_mha, o1, a1) && run(full, gml_mha, o2, a2)) {
                double eo = attn_max_err(o2, o1, no, 0, 0, NULL),
                       ea = attn_max_err(a2, a1, na, 0, 0, NULL);
                EXPECT(eo <= 1e-6 && ea <= 1e-6,
                       "lengths == Tk (%s, causal %d) differ from no mask: out %.3g attn %.3g",
                       kind == ATTN_LENS_BATCH ? "[B]" : "[B,Tq]", causal, eo, ea);
            } else {
                fails++;
            }
            free(o1), free(a1), free(o2), free(a2);
            attn_data_free(plain);
            attn_data_free(full);
        }
}

/* A row whose valid length is 0 gets exactly zero weights, and its output
 * is exactly b_o (zero context). */
static void check_empty_rows(gml_attn_impl impl) {
    attn_case c = {.impl = impl,
                   .B = 2,
                   .Tq = 3,
                   .Tk = 5,
                   .D = 12,
                   .H = 3,
                   .cross = true,
                   .bias = true,
                   .lens = ATTN_LENS_QUERY,
                   .causal = true};
    attn_data *d = attn_data_new(&c, 5);
    for (int i = 0; i < c.B * c.Tq; i++)
        d->lens[i] = i % 2 ? 0 : c.Tk; /* rows 1, 3, 5 empty */
    size_t no = (size_t)c.B * c.Tq * c.D, na = (size_t)c.B * c.H * c.Tq * c.Tk;
    float *out = malloc(no * 4), *attn = malloc(na * 4);
    if (run(d, gml_mha, out, attn)) {
        for (int b = 0; b < c.B; b++)
            for (int i = 0; i < c.Tq; i++) {
                if ((b * c.Tq + i) % 2 == 0) continue;
                for (int h = 0; h < c.H && impl != GML_ATTN_FUSED; h++)
                    for (int j = 0; j < c.Tk; j++)
                        EXPECT(attn[(((size_t)b * c.H + h) * c.Tq + i) * c.Tk + j] == 0.0f,
                               "empty row b%d i%d h%d: weight %d is not 0", b, i, h, j);
                for (int o = 0; o < c.D; o++)
                    EXPECT(out[((size_t)b * c.Tq + i) * c.D + o] == d->bo[o],
                           "empty row b%d i%d (impl %d): out[%d] = %g, not b_o = %g", b, i,
                           (int)impl, o,
                           (double)out[((size_t)b * c.Tq + i) * c.D + o], (double)d->bo[o]);
            }
    } else {
        fails++;
    }
    free(out), free(attn);
    attn_data_free(d);
}

/* ---- the graph ------------------------------------------------------------- */

static int count_op(const gml_graph *g, gml_op op) {
    int n = 0;
    for (int i = 0; i < gml_graph_n_nodes(g); i++)
        n += gml_graph_node(g, i)->op == op;
    return n;
}

static void check_graph(void) {
    attn_case c = {.B = 4, .Tq = 9, .D = 32, .H = 4, .bias = true, .packed = true, .causal = true};
    attn_data *d = attn_data_new(&c, 9);
    attn_graph ag;
    if (!attn_graph_build(&ag, gml_mha, d, true)) {
        fails++;
        attn_data_free(d);
        return;
    }
    const char *names[] = {"q", "k", "v", "scores", "attn", "ctx", "out"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        EXPECT(gml_get_tensor(ag.ctx, names[i]) != NULL, "no tensor named '%s' in the MHA graph",
               names[i]);
    EXPECT(gml_get_tensor(ag.ctx, "out") == ag.r.out, "'out' is not the result");
    EXPECT(gml_get_tensor(ag.ctx, "attn") == ag.r.weights, "'attn' is not the weights");
    char s[64];
    EXPECT(strcmp(gml_format_shape(ag.r.weights, s, sizeof s), "[4,4,9,9]") == 0,
           "weights are %s, want [4,4,9,9]", s);
    EXPECT(strcmp(gml_format_shape(ag.r.out, s, sizeof s), "[4,9,32]") == 0, "out is %s", s);
    /* Packed weights are used through views of in_proj_weight, not copies. */
    gml_tensor *ipw = gml_get_tensor(ag.ctx, "in_proj_weight");
    const char *parts[] = {"in_proj_weight[q]", "in_proj_weight[k]", "in_proj_weight[v]",
                           "in_proj_bias[q]",   "in_proj_bias[k]",   "in_proj_bias[v]"};
    for (int i = 0; i < 6; i++) {
        gml_tensor *t = gml_get_tensor(ag.ctx, parts[i]);
        EXPECT(t && t->op == GML_OP_VIEW && gml_is_view(t), "%s is not a view", parts[i]);
        if (i == 1 && t)
            EXPECT(t->view_src == ipw && t->view_offs == 32 * 32 * 4,
                   "%s: view of the wrong rows (offset %zu)", parts[i], t->view_offs);
    }
    /* Lean: one copy (merging the heads), no separate scale, no mask op. */
    EXPECT(count_op(ag.g, GML_OP_CONT) == 1, "MHA graph has %d cont nodes, want 1 (head merge)",
           count_op(ag.g, GML_OP_CONT));
    EXPECT(count_op(ag.g, GML_OP_SCALE) == 0, "MHA graph has a scale node (fuse it in softmax)");
    EXPECT(count_op(ag.g, GML_OP_MATMUL) == 6, "MHA graph has %d matmuls, want 6",
           count_op(ag.g, GML_OP_MATMUL));
    attn_graph_free(&ag);
    attn_data_free(d);
}

/* The fused graph: projections, one flash_attn, the output projection; the
 * heads merge through views (no cont), and nothing [.., Tq, Tk] exists. */
static void check_graph_fused(void) {
    attn_case c = {.B = 2, .Tq = 9, .Tk = 11, .cross = true, .D = 32, .H = 4, .bias = true,
                   .causal = true, .lens = ATTN_LENS_QUERY, .impl = GML_ATTN_FUSED};
    attn_data *d = attn_data_new(&c, 9);
    attn_graph ag;
    if (!attn_graph_build(&ag, gml_mha, d, true)) {
        fails++;
        attn_data_free(d);
        return;
    }
    EXPECT(ag.r.weights == NULL, "the fused graph returns weights");
    EXPECT(count_op(ag.g, GML_OP_FLASH_ATTN) == 1, "%d flash_attn nodes, want 1",
           count_op(ag.g, GML_OP_FLASH_ATTN));
    EXPECT(count_op(ag.g, GML_OP_MATMUL) == 4, "%d matmuls, want the 4 projections",
           count_op(ag.g, GML_OP_MATMUL));
    EXPECT(count_op(ag.g, GML_OP_CONT) == 0, "%d cont nodes, want 0 (heads merge as views)",
           count_op(ag.g, GML_OP_CONT));
    EXPECT(count_op(ag.g, GML_OP_SOFTMAX) == 0 && count_op(ag.g, GML_OP_VALID_LEN_MASK) == 0,
           "the fused graph has a softmax or a mask op");
    gml_tensor *flash = gml_get_tensor(ag.ctx, "flash");
    char s[64];
    EXPECT(flash && flash->op == GML_OP_FLASH_ATTN &&
               strcmp(gml_format_shape(flash, s, sizeof s), "[2,4,9,8]") == 0,
           "no flash_attn node 'flash' [2,4,9,8]");
    for (int i = 0; i < gml_graph_n_nodes(ag.g); i++) {
        const gml_tensor *t = gml_graph_node(ag.g, i);
        EXPECT(!(t->ne[2] == c.Tq && t->ne[3] == c.Tk), "node '%s' %s is scores-shaped",
               t->name, gml_format_shape(t, s, sizeof s));
    }
    attn_graph_free(&ag);
    attn_data_free(d);
}

/* ---- errors ------------------------------------------------------------------ */

typedef struct {
    gml_context *ctx;
    gml_attn_weights w;
    gml_attn_inputs in;
} setup;

/* A well-formed MHA setup: D 32, H 4, B 2, Tq 3, Tk 5 (cross), no_alloc. */
static setup make_setup(void) {
    setup s = {.ctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true})};
    gml_context *x = s.ctx;
    s.w.w_q = gml_set_name(gml_new_tensor_2d(x, GML_F32, 32, 32), "w_q.weight");
    s.w.w_k = gml_set_name(gml_new_tensor_2d(x, GML_F32, 32, 32), "w_k.weight");
    s.w.w_v = gml_set_name(gml_new_tensor_2d(x, GML_F32, 32, 32), "w_v.weight");
    s.w.w_o = gml_set_name(gml_new_tensor_2d(x, GML_F32, 32, 32), "w_o.weight");
    s.in.query = gml_set_name(gml_new_tensor_3d(x, GML_F32, 2, 3, 32), "x");
    s.in.key = gml_set_name(gml_new_tensor_3d(x, GML_F32, 2, 5, 32), "mem");
    s.in.value = s.in.key;
    return s;
}

/* The block must fail with a message containing want. */
static void expect_error(const char *what,
                         gml_attn_result (*fn)(gml_context *, gml_attn_config,
                                               const gml_attn_weights *, gml_attn_inputs),
                         setup *s, gml_attn_config cfg, const char *want) {
    gml_attn_result r = fn(s->ctx, cfg, &s->w, s->in);
    const char *msg = gml_last_error(s->ctx);
    EXPECT(!r.out && !r.weights, "%s: built, expected an error", what);
    EXPECT(strstr(msg, want) != NULL, "%s: message '%s' lacks '%s'", what, msg, want);
    gml_free(s->ctx);
}

static void check_errors(void) {
    const gml_attn_config ok = {.dims.n_heads = 4};
    setup s = make_setup();
    gml_attn_result r = gml_mha(s.ctx, ok, &s.w, s.in);
    EXPECT(r.out && !r.weights, "the well-formed setup (fused by default): %s",
           gml_last_error(s.ctx));
    gml_free(s.ctx);
    /* The weights only when asked (as nn.MultiheadAttention's need_weights):
     * the unfused graph without want_weights gives none. */
    const gml_attn_config unfused[] = {
        {.dims.n_heads = 4, .graph.want_weights = true},
        {.dims.n_heads = 4, .graph = {.impl = GML_ATTN_UNFUSED, .want_weights = true}},
        {.dims.n_heads = 4, .graph.impl = GML_ATTN_UNFUSED}};
    for (int i = 0; i < 3; i++) {
        s = make_setup();
        r = gml_mha(s.ctx, unfused[i], &s.w, s.in);
        EXPECT(r.out && (r.weights != NULL) == unfused[i].graph.want_weights,
               "well-formed, unfused (%d): weights %s: %s", i, r.weights ? "given" : "absent",
               gml_last_error(s.ctx));
        /* the graph is the unfused one either way: its softmax node is named "attn" */
        EXPECT(gml_get_tensor(s.ctx, "attn") != NULL, "unfused (%d): no 'attn' node", i);
        gml_free(s.ctx);
    }

    s = make_setup();
    expect_error("fused with weights", gml_mha, &s,
                 (gml_attn_config){.dims.n_heads = 4, .graph = {.impl = GML_ATTN_FUSED, .want_weights = true}},
                 "mha: the fused graph has no attention weights");
    s = make_setup();
    expect_error("impl 9", gml_mha, &s, (gml_attn_config){.dims.n_heads = 4, .graph.impl = 9},
                 "mha: unknown attention impl 9");

    s = make_setup();
    s.in.query = gml_new_tensor_3d(s.ctx, GML_F32, 2, 3, 100);
    s.w.w_q = s.w.w_k = s.w.w_v = s.w.w_o = gml_new_tensor_2d(s.ctx, GML_F32, 100, 100);
    s.in.key = s.in.value = NULL;
    expect_error("D %% H", gml_mha, &s, (gml_attn_config){.dims.n_heads = 3},
                 "mha: d_model 100 is not divisible by heads 3");

    s = make_setup();
    s.w.w_k = gml_set_name(gml_new_tensor_2d(s.ctx, GML_F32, 64, 32), "w_k.weight");
    expect_error("w_k shape", gml_mha, &s, ok,
                 "mha: w_k.weight is [64,32], expected [32,32] ([d_model, d_model])");

    s = make_setup();
    s.w.w_o = gml_new_tensor_2d(s.ctx, GML_F32, 32, 16);
    expect_error("w_o shape", gml_mha, &s, ok, "mha: w_o.weight ('leaf_");

    s = make_setup();
    s.w.b_v = gml_new_tensor_1d(s.ctx, GML_F32, 31);
    expect_error("b_v shape", gml_mha, &s, ok, "is [31], expected [32]");

    s = make_setup();
    s.w.w_q = gml_new_tensor_2d(s.ctx, GML_I32, 32, 32);
    expect_error("w_q type", gml_mha, &s, ok, "is i32 [32,32], expected f32, f16, bf16 or q8_0 [32,32]");

    s = make_setup();
    s.w.w_v = NULL;
    expect_error("missing w_v", gml_mha, &s, ok, "mha: w_v.weight is missing");

    s = make_setup();
    s.w.in_proj_weight = gml_new_tensor_2d(s.ctx, GML_F32, 96, 32);
    expect_error("packed and separate", gml_mha, &s, ok, "both packed");

    s = make_setup();
    s.w.w_q = s.w.w_k = s.w.w_v = NULL;
    s.w.in_proj_weight = gml_set_name(gml_new_tensor_2d(s.ctx, GML_F32, 95, 32), "in_proj_weight");
    expect_error("in_proj shape", gml_mha, &s, ok,
                 "mha: in_proj_weight is [95,32], expected [96,32]");

    s = make_setup();
    s.in.key = gml_new_tensor_3d(s.ctx, GML_F32, 3, 5, 32);
    s.in.value = s.in.key;
    expect_error("key batch", gml_mha, &s, ok, "mha: key");

    s = make_setup();
    s.in.value = gml_new_tensor_3d(s.ctx, GML_F32, 2, 4, 32);
    expect_error("value length", gml_mha, &s, ok, "differ in length Tk");

    s = make_setup();
    s.in.query = gml_new_tensor_2d(s.ctx, GML_F32, 3, 32);
    expect_error("2-D query", gml_mha, &s, ok, "expected f32 [B, Tq, d_model]");

    s = make_setup();
    expect_error("d_model", gml_mha, &s, (gml_attn_config){.dims = {.d_model = 64, .n_heads = 4}},
                 "but d_model is 64");

    s = make_setup();
    s.in.valid_lens = gml_new_tensor_1d(s.ctx, GML_I32, 3);
    expect_error("lens [3] for B 2", gml_mha, &s, ok, "expected i32 [2] or [2,3]");

    s = make_setup();
    s.in.valid_lens = gml_new_tensor_2d(s.ctx, GML_F32, 2, 3);
    expect_error("f32 lens", gml_mha, &s, ok, "valid_lens");

    s = make_setup();
    expect_error("kv heads in mha", gml_mha, &s, (gml_attn_config){.dims = {.n_heads = 4, .n_kv_heads = 2}},
                 "grouped-query attention is gml_gqa");

    s = make_setup();
    s.in.query = NULL;
    expect_error("NULL query", gml_mha, &s, ok, "mha: query is NULL");

    /* A NULL input from a failed builder keeps that builder's message. */
    s = make_setup();
    s.in.query = gml_matmul(s.ctx, s.in.key, s.in.key); /* [2,5,32] @ [2,5,32]: fails */
    expect_error("earlier failure", gml_mha, &s, ok, "matmul(");

    /* A valid length out of range is data: compute fails and says which, in
     * both graphs. */
    for (int fused = 0; fused < 2; fused++) {
        attn_case c = {.B = 2, .Tq = 3, .Tk = 4, .D = 8, .H = 2, .cross = true,
                       .lens = ATTN_LENS_BATCH, .impl = fused ? GML_ATTN_FUSED : GML_ATTN_AUTO};
        attn_data *d = attn_data_new(&c, 3);
        d->lens[1] = 5;
        attn_graph ag;
        if (attn_graph_build(&ag, gml_mha, d, false)) {
            gml_status st = gml_graph_compute(ag.g, 1);
            EXPECT(st == GML_ERR_INVALID, "length 5 > Tk 4 computed (status %d)", (int)st);
            EXPECT(strstr(gml_graph_error(ag.g), "length 5 for batch 1 is outside [0, 4]"),
                   "length error (fused %d): '%s'", fused, gml_graph_error(ag.g));
            attn_graph_free(&ag);
        } else {
            fails++;
        }
        attn_data_free(d);
    }
}

/* ---- weights by name -------------------------------------------------------- */

static void check_weights_find(void) {
    gml_context *w = gml_init((gml_init_params){.mem_size = 1 << 16, .no_alloc = true});
    gml_set_name(gml_new_tensor_2d(w, GML_F32, 96, 32), "in_proj_weight");
    gml_set_name(gml_new_tensor_1d(w, GML_F32, 96), "in_proj_bias");
    gml_set_name(gml_new_tensor_2d(w, GML_F32, 32, 32), "out_proj.weight");
    gml_set_name(gml_new_tensor_1d(w, GML_F32, 32), "out_proj.bias");
    gml_attn_weights b;
    char err[512];
    EXPECT(gml_attn_weights_find(w, &b, err, sizeof err) == GML_OK, "torch state dict: %s", err);
    EXPECT(b.in_proj_weight && b.in_proj_bias && b.w_o && b.b_o && !b.w_q && !b.rel_k,
           "torch state dict bound wrongly");
    gml_free(w);

    w = gml_init((gml_init_params){.mem_size = 1 << 16, .no_alloc = true});
    gml_set_name(gml_new_tensor_2d(w, GML_F32, 32, 32), "w_q.weight");
    gml_set_name(gml_new_tensor_2d(w, GML_F32, 32, 32), "w_k.weight");
    gml_set_name(gml_new_tensor_2d(w, GML_F32, 32, 32), "w_o.weight");
    EXPECT(gml_attn_weights_find(w, &b, err, sizeof err) == GML_ERR_INVALID, "w_v missing: bound");
    EXPECT(strstr(err, "present: w_q.weight [32,32], w_k.weight [32,32], w_o.weight [32,32]"),
           "missing w_v: '%s'", err);
    EXPECT(!b.w_q, "a failed bind leaves weights set");
    gml_set_name(gml_new_tensor_2d(w, GML_F32, 32, 32), "w_v.weight");
    gml_set_name(gml_new_tensor_2d(w, GML_F32, 5, 8), "rel_k.weight");
    EXPECT(gml_attn_weights_find(w, &b, err, sizeof err) == GML_OK, "separate weights: %s", err);
    EXPECT(b.w_q && b.w_k && b.w_v && b.w_o && b.rel_k && !b.rel_v && !b.b_q && !b.in_proj_weight,
           "separate weights bound wrongly");
    gml_set_name(gml_new_tensor_2d(w, GML_F32, 32, 32), "out_proj.weight");
    EXPECT(gml_attn_weights_find(w, &b, err, sizeof err) == GML_ERR_INVALID &&
               strstr(err, "both w_o.weight and out_proj.weight are present"),
           "w_o and out_proj: '%s'", err);
    gml_free(w);

    w = gml_init((gml_init_params){.mem_size = 1 << 16, .no_alloc = true});
    gml_set_name(gml_new_tensor_2d(w, GML_F32, 96, 32), "in_proj_weight");
    gml_set_name(gml_new_tensor_2d(w, GML_F32, 32, 32), "w_q.weight");
    gml_set_name(gml_new_tensor_2d(w, GML_F32, 32, 32), "out_proj.weight");
    EXPECT(gml_attn_weights_find(w, &b, err, sizeof err) == GML_ERR_INVALID &&
               strstr(err, "two naming conventions mix: in_proj_weight is nn.MultiheadAttention"),
           "in_proj and w_q: '%s'", err);
    gml_free(w);

    w = gml_init((gml_init_params){.mem_size = 1 << 16, .no_alloc = true});
    EXPECT(gml_attn_weights_find(w, &b, err, sizeof err) == GML_ERR_INVALID &&
               strstr(err, "no input projection") && strstr(err, "present: (nothing)"),
           "empty weights: '%s'", err);
    gml_free(w);
}

/* ---- sizes ---------------------------------------------------------------------- */

static void check_param_count(void) {
    EXPECT(gml_mha_param_count(768, 12, false) == 2359296, "BERT-base MHA: %lld",
           (long long)gml_mha_param_count(768, 12, false));
    EXPECT(gml_mha_param_count(12288, 96, false) == 603979776, "GPT-3 MHA: %lld",
           (long long)gml_mha_param_count(12288, 96, false));
    EXPECT(gml_mha_param_count(768, 12, true) == 2359296 + 4 * 768, "with bias");
    EXPECT(gml_mha_param_count(100, 3, false) == -1, "100 %% 3");
    /* Against the tensors a graph actually binds. */
    attn_case c = {.B = 1, .Tq = 2, .D = 20, .H = 4, .bias = true};
    attn_data *d = attn_data_new(&c, 1);
    attn_graph ag;
    if (attn_graph_build(&ag, gml_mha, d, true)) {
        int64_t n = 0;
        for (int i = 0; i < gml_graph_n_leafs(ag.g); i++) {
            const gml_tensor *t = gml_graph_leaf(ag.g, i);
            if (strchr(t->name, '.')) n += gml_nelements(t); /* w_?.weight, w_?.bias */
        }
        EXPECT(n == gml_mha_param_count(20, 4, true),
               "graph binds %lld parameters, count says %lld", (long long)n,
               (long long)gml_mha_param_count(20, 4, true));
        attn_graph_free(&ag);
    }
    attn_data_free(d);
}

int main(void) {
    check_reference();
    check_full_lengths();
    check_empty_rows(GML_ATTN_UNFUSED);
    check_empty_rows(GML_ATTN_FUSED);
    check_graph_fused();
    check_graph();
    check_errors();
    check_weights_find();
    check_param_count();
    if (fails) {
        fprintf(stderr, "test_mha: %d failures\n", fails);
        return 1;
    }
    printf("test_mha: all passed\n");
    return 0;
}
