/* The planner's training features, on planned (no_alloc) training graphs:
 *
 *   lifetime   a forward activation lives until its last reader in the
 *              backward and no longer: on a chain of tanh(h W) layers whose
 *              tensors are all [n, n] (so that a freed block fits any new
 *              one), the planned peak equals the largest count of tensors
 *              alive at once, worked out here from the graph's nodes with
 *              each activation dying at its last reader; activations kept to
 *              the end of the step would need more.
 *   accumulate a weight used three times (an embedding table tied to two
 *              linear layers, as GPT-2 ties wte to its head): every add of
 *              its gradient's chain whose left source dies there writes over
 *              it (nn.Linear's contributions arrive transposed), and the
 *              gradient is bitwise the sum, in gml_grad's order, of the
 *              three contributions taken from an untied copy of the graph.
 *   checkpoint gml_checkpoint: three LLaMA-style layers (rms_norm, GQA with
 *              rope, causal, SwiGLU) through fused and unfused attention,
 *              recomputing the attention or each whole layer: every gradient
 *              is bitwise the one without recomputation (at 1, 2, 3, 4 and 7
 *              threads, on every ISA the CPU has); no backward node reads a
 *              marked node (they die in the forward); the planned peak drops;
 *              the public gml_llama_layer takes it too; its errors.
 *   order      the backward passes the layers one at a time, last first,
 *              whichever order the gradients are given to gml_build_graph
 *              in: each layer's activations are last read before the
 *              backward reads the layer below's; the planned peak is about
 *              the same for both orders. */
#include "check.h"

#include <ggmlite/attention.h>
#include <ggmlite/layers.h>

static const int THREADS[] = {1, 2, 3, 4, 7};
#define N_THREADS (int)(sizeof THREADS / sizeof *THREADS)

static const gml_tensor *root_of(const gml_tensor *t) { return t->view_src ? t->view_src : t; }

/* Index of the last node of g that reads or writes r's storage, or -1. */
static int last_use(const gml_graph *g, const gml_tensor *r) {
    int last = -1;
    for (int j = 0; j < gml_graph_n_nodes(g); j++) {
        const gml_tensor *t = gml_graph_node(g, j);
        if (root_of(t) == r) last = j;
        for (int s = 0; s < GML_MAX_SRC; s++)
            if (t->src[s] && root_of(t->src[s]) == r) last = j;
    }
    return last;
}

/* ---- lifetime ------------------------------------------------------------ */

static void test_lifetime(void) {
    chk_case("lifetime");
    enum { L = 6 };
    const int64_t n = 16; /* [16, 16] f32: 1024 bytes, a multiple of the 64-byte alignment */
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 4 << 20, .no_alloc = true});
    gml_tensor *x = gml_new_tensor_2d(ctx, GML_F32, n, n), *w[L], *h = x;
    for (int l = 0; l < L; l++) {
        w[l] = gml_new_tensor_2d(ctx, GML_F32, n, n);
        h = gml_tanh(ctx, gml_matmul(ctx, h, w[l])); /* [n, n] */
    }
    gml_tensor *dy = gml_new_tensor_2d(ctx, GML_F32, n, n), *dw[L + 1], *wrt[L + 1], *outs[L + 2];
    for (int l = 0; l < L; l++) wrt[l] = w[l];
    wrt[L] = x;
    const int last_forward_id = h->id;
    if (!CHECK(gml_grad(ctx, h, dy, wrt, L + 1, dw) == GML_OK, "grad: %s", gml_last_error(ctx)))
        return;
    outs[0] = h;
    for (int l = 0; l <= L; l++) outs[l + 1] = dw[l];
    gml_graph *g = gml_build_graph(ctx, outs, L + 2);
    if (!CHECK(g && gml_graph_plan(g, &(gml_plan_options){.no_inplace = true}) == GML_OK,
               "plan: %s", g ? gml_graph_error(g) : gml_last_error(ctx)))
        return;
    const int N = gml_graph_n_nodes(g);
    /* Blocks alive at node j (each placed tensor is [n, n]): the leafs, and
     * each computed root from the node making it to its last use (outputs:
     * to the end). Nodes allocate before their dying sources free. */
    int peak = 0, peak_kept = 0, n_leafs = gml_graph_n_leafs(g), activations = 0;
    for (int j = 0; j < N; j++) {
        int alive = n_leafs, alive_kept = n_leafs;
        for (int k = 0; k <= j; k++) {
            const gml_tensor *t = gml_graph_node(g, k);
            if (t->view_src) continue;
            const int last = gml_graph_tensor(g, t)->flags & GML_FLAG_OUTPUT ? N : last_use(g, t);
            alive += last >= j;
            /* the same with the forward's activations kept to the end */
            alive_kept += (t->id <= last_forward_id ? N : last) >= j;
        }
        if (alive > peak) peak = alive;
        if (alive_kept > peak_kept) peak_kept = alive_kept;
    }
    for (int k = 0; k < N; k++) { /* the activations are read in the backward */
        const gml_tensor *t = gml_graph_node(g, k);
        if (t->view_src || t->id > last_forward_id || t == h) continue;
        const gml_tensor *reader = gml_graph_node(g, last_use(g, t));
        activations += reader->id > last_forward_id;
    }
    const size_t block = (size_t)(n * n) * sizeof(float);
    printf("chain of %d tanh(h W) layers [%lld, %lld]: planned peak %zu blocks, %d alive at most "
           "(%d with the activations kept to the end)\n", L, (long long)n, (long long)n,
           gml_graph_plan_peak(g) / block, peak, peak_kept);
    CHECK(activations == 2 * L - 1, "%d activations read in the backward, expected %d",
          activations, 2 * L - 1);
    CHECK(peak < peak_kept, "the check cannot tell: %d blocks either way", peak);
    CHECK(gml_graph_plan_peak(g) == (size_t)peak * block,
          "planned peak %zu bytes (%zu blocks); the activations dying at their last reader "
          "give %d blocks (%d if kept to the end)", gml_graph_plan_peak(g),
          gml_graph_plan_peak(g) / block, peak, peak_kept);
    gml_graph_free(g);
    gml_free(ctx);
}

/* ---- accumulate ---------------------------------------------------------- */

enum { ACC_N = 7, ACC_V = 13 }; /* rows, and the table's rows = features (odd sizes) */

/* tok [N] -> e = table[tok] -> a = tanh(linear(tanh(e), wa)) -> y = linear(a, wb)
 * [N, V], table, wa, wb [V, V]: one tensor tied three times, or three. */
static gml_tensor *acc_build(gml_context *ctx, gml_tensor *tok, gml_tensor *table, gml_tensor *wa,
                             gml_tensor *wb) {
    gml_tensor *e = gml_tanh(ctx, gml_get_rows(ctx, table, tok));  /* [N, V] */
    gml_tensor *a = gml_tanh(ctx, gml_linear(ctx, e, wa, NULL));    /* [N, V] */
    return gml_linear(ctx, a, wb, NULL);                            /* [N, V] */
}

static void test_accumulate(void) {
    chk_case("accumulate");
    gml_context *data = gml_init((gml_init_params){.mem_size = 1 << 20});
    gml_tensor *w = gml_new_tensor_2d(data, GML_F32, ACC_V, ACC_V);
    gml_tensor *tok = gml_new_tensor_1d(data, GML_I32, ACC_N);
    gml_tensor *dy = gml_new_tensor_2d(data, GML_F32, ACC_N, ACC_V);
    chk_rng r = chk_seed(24);
    chk_fill_uniform(w, &r, -1.0f, 1.0f);
    chk_fill_uniform(dy, &r, -1.0f, 1.0f);
    for (int i = 0; i < ACC_N; i++) ((int32_t *)tok->data)[i] = (i * 5 + 2) % ACC_V;
    /* untied: three tensors with w's values (views of it: leafs for grad) */
    gml_context *uctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true});
    gml_tensor *parts[3], *gparts[3];
    for (int k = 0; k < 3; k++) {
        parts[k] = gml_new_tensor_2d(uctx, GML_F32, ACC_V, ACC_V);
        parts[k]->data = w->data;
    }
    gml_tensor *yu = acc_build(uctx, tok, parts[0], parts[1], parts[2]);
    CHECK(gml_grad(uctx, yu, dy, parts, 3, gparts) == GML_OK, "untied grad: %s", gml_last_error(uctx));
    gml_graph *gu = gml_build_graph(uctx, gparts, 3);
    CHECK(gu && gml_graph_plan(gu, NULL) == GML_OK && gml_graph_compute(gu, 1) == GML_OK,
          "untied: %s", gu ? gml_graph_error(gu) : gml_last_error(uctx));
    /* The sum in gml_grad's order: consumers last to first (wb's, wa's, the
     * table's), left to right: (c_wb + c_wa) + c_table, in f32. */
    float *want = malloc(sizeof(float) * ACC_V * ACC_V), *c[3];
    for (int k = 0; k < 3; k++) c[k] = chk_dense(gml_graph_tensor(gu, gparts[k]));
    for (int i = 0; i < ACC_V * ACC_V; i++) want[i] = (c[2][i] + c[1][i]) + c[0][i];

    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true});
    gml_tensor *y = acc_build(ctx, tok, w, w, w), *gw;
    if (!CHECK(gml_grad(ctx, y, dy, &w, 1, &gw) == GML_OK, "grad: %s", gml_last_error(ctx))) return;
    gml_graph *g = gml_build_graph(ctx, &gw, 1);
    if (!CHECK(g && gml_graph_plan(g, NULL) == GML_OK, "plan: %s",
               g ? gml_graph_error(g) : gml_last_error(ctx)))
        return;
    /* the adds whose left source is a gradient node dying at them */
    int chain = 0, in_place = 0;
    for (int j = 0; j < gml_graph_n_nodes(g); j++) {
        const gml_tensor *t = gml_graph_node(g, j), *a = t->src[0];
        if (t->op != GML_OP_ADD || root_of(a)->op == GML_OP_NONE || last_use(g, root_of(a)) != j)
            continue;
        chain++;
        const bool here = gml_graph_data(g, t) == gml_graph_data(g, root_of(a));
        in_place += here;
        CHECK(here, "add node %d '%s' = '%s' (%s) + '%s': its left source dies there, yet it "
              "is placed elsewhere", j, t->name, a->name, gml_op_name(a->op), t->src[1]->name);
    }
    printf("tied weight used 3 times: %d of the %d adds of its gradient in place; planned peak "
           "%zu bytes\n", in_place, chain, gml_graph_plan_peak(g));
    CHECK(chain == 2, "%d adds accumulate the tied weight's gradient, expected 2", chain);
    for (int i = 0; i < N_THREADS; i++) {
        chk_case("accumulate, %d threads", THREADS[i]);
        if (CHECK(gml_graph_compute(g, THREADS[i]) == GML_OK, "compute: %s", gml_graph_error(g)))
            CHECK_EQUAL(gml_graph_tensor(g, gw), want, "the tied gradient");
    }
    for (int k = 0; k < 3; k++) free(c[k]);
    free(want);
    gml_graph_free(g);
    gml_graph_free(gu);
    gml_free(ctx);
    gml_free(uctx);
    gml_free(data);
}

/* ---- checkpoint ---------------------------------------------------------- */

enum { CK_B = 2, CK_T = 33, CK_D = 16, CK_H = 2, CK_G = 1, CK_F = 24, CK_L = 4, CK_HD = CK_D / CK_H };
enum { CK_NONE, CK_ATTN, CK_LAYER, CK_LLAMA }; /* what is recomputed (LLAMA: gml_llama_layer's) */
static const char *const CK_NAMES[] = {"none", "attention", "layer", "gml_llama_layer"};
#define CK_NW 9

typedef struct ck_model {
    gml_context *data;
    gml_tensor *w[CK_L][CK_NW]; /* attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down */
    gml_tensor *x, *dy;
} ck_model;

static ck_model ck_model_new(void) {
    ck_model m = {.data = gml_init((gml_init_params){.mem_size = 4 << 20})};
    const int64_t kd = CK_G * CK_HD;
    const int64_t shapes[CK_NW][2] = {{CK_D, 0},  {CK_D, CK_D}, {kd, CK_D},
                                      {kd, CK_D}, {CK_D, CK_D}, {CK_D, 0},
                                      {CK_F, CK_D}, {CK_F, CK_D}, {CK_D, CK_F}};
    chk_rng r = chk_seed(7);
    for (int l = 0; l < CK_L; l++)
        for (int k = 0; k < CK_NW; k++) {
            gml_tensor *t = m.w[l][k] = shapes[k][1] ? gml_new_tensor_2d(m.data, GML_F32, shapes[k][0], shapes[k][1])
                                                     : gml_new_tensor_1d(m.data, GML_F32, shapes[k][0]);
            chk_fill_uniform(t, &r, shapes[k][1] ? -0.3f : 0.5f, shapes[k][1] ? 0.3f : 1.5f);
        }
    m.x = gml_new_tensor_3d(m.data, GML_F32, CK_B, CK_T, CK_D);
    m.dy = gml_new_tensor_3d(m.data, GML_F32, CK_B, CK_T, CK_D);
    chk_fill_uniform(m.x, &r, -1.0f, 1.0f);
    chk_fill_uniform(m.dy, &r, -1.0f, 1.0f);
    return m;
}

/* One LLaMA-style layer, as gml_llama_layer computes it, its attention
 * fused or not; mode says what is marked for recomputation. */
static gml_tensor *ck_layer(gml_context *ctx, gml_tensor *const *w, gml_tensor *x,
                            gml_attn_impl impl, int mode) {
    if (mode == CK_LLAMA) {
        const gml_llama_config cfg = {.n_heads = CK_H, .n_kv_heads = CK_G};
        const gml_llama_weights lw = {.attn_norm = w[0], .wq = w[1], .wk = w[2], .wv = w[3],
                                      .wo = w[4], .mlp_norm = w[5], .w_gate = w[6],
                                      .w_up = w[7], .w_down = w[8]};
        gml_tensor *y = gml_llama_layer(ctx, &cfg, &lw, x, NULL);
        return y && gml_checkpoint(ctx, y, &x, 1) == GML_OK ? y : NULL;
    }
    const gml_attn_config cfg = {
        .dims = {.d_model = CK_D, .n_heads = CK_H, .n_kv_heads = CK_G},
        .score = {.causal = GML_CAUSAL_BOTTOM_RIGHT},
        .pos = {.kind = GML_POS_ROPE, .rope = {.theta = 10000.0f}},
        .graph = {.impl = impl},
    };
    const gml_attn_weights aw = {.w_q = w[1], .w_k = w[2], .w_v = w[3], .w_o = w[4]};
    gml_tensor *h = gml_rms_norm(ctx, x, w[0], 1e-6f);                          /* [B, T, D] */
    gml_tensor *att = gml_gqa(ctx, cfg, &aw, (gml_attn_inputs){.query = h}).out; /* [B, T, D] */
    if (!att || (mode == CK_ATTN && gml_checkpoint(ctx, att, &h, 1) != GML_OK)) return NULL;
    gml_tensor *r = gml_add(ctx, x, att);
    gml_tensor *n = gml_rms_norm(ctx, r, w[5], 1e-6f);
    gml_tensor *gate = gml_silu(ctx, gml_linear(ctx, n, w[6], NULL));           /* [B, T, F] */
    gml_tensor *up = gml_linear(ctx, n, w[7], NULL);                            /* [B, T, F] */
    gml_tensor *y = gml_add(ctx, r, gml_linear(ctx, gml_mul(ctx, gate, up), w[8], NULL));
    if (mode == CK_LAYER && gml_checkpoint(ctx, y, &x, 1) != GML_OK) return NULL;
    return y;
}

typedef struct ck_graph {
    gml_context *ctx;
    gml_graph *g;
    gml_tensor *grads[CK_L * CK_NW + 1];
    int last_forward_id;
    int layer_end[CK_L]; /* id of each layer's output: layer l built ids (end[l-1], end[l]] */
} ck_graph;

static bool ck_graph_new(ck_graph *c, const ck_model *m, gml_attn_impl impl, int mode,
                         bool reversed) {
    c->ctx = gml_init((gml_init_params){.mem_size = 8 << 20, .no_alloc = true});
    gml_tensor *y = m->x, *wrt[CK_L * CK_NW + 1];
    for (int l = 0; l < CK_L && y; l++) {
        y = ck_layer(c->ctx, m->w[l], y, impl, mode);
        c->layer_end[l] = y ? y->id : 0;
    }
    if (!CHECK(y, "build the layers: %s", gml_last_error(c->ctx))) return false;
    c->last_forward_id = y->id;
    for (int l = 0; l < CK_L; l++)
        for (int k = 0; k < CK_NW; k++) wrt[l * CK_NW + k] = m->w[l][k];
    wrt[CK_L * CK_NW] = m->x;
    if (!CHECK(gml_grad(c->ctx, y, m->dy, wrt, CK_L * CK_NW + 1, c->grads) == GML_OK, "grad: %s",
               gml_last_error(c->ctx)))
        return false;
    /* reversed: the last layer's gradients first (x's still last) */
    gml_tensor *outs[CK_L * CK_NW + 1];
    for (int i = 0; i < CK_L * CK_NW; i++) outs[i] = c->grads[reversed ? CK_L * CK_NW - 1 - i : i];
    outs[CK_L * CK_NW] = c->grads[CK_L * CK_NW];
    c->g = gml_build_graph(c->ctx, outs, CK_L * CK_NW + 1);
    return CHECK(c->g && gml_graph_plan(c->g, NULL) == GML_OK, "plan: %s",
                 c->g ? gml_graph_error(c->g) : gml_last_error(c->ctx));
}

static void ck_graph_free(ck_graph *c) {
    gml_graph_free(c->g);
    gml_free(c->ctx);
}

static void test_checkpoint_case(const ck_model *m, gml_attn_impl impl, int mode) {
    const char *iname = impl == GML_ATTN_FUSED ? "fused" : "unfused";
    chk_case("checkpoint %s, %s recomputed", iname, CK_NAMES[mode]);
    ck_graph plain = {0}, ck = {0};
    if (!ck_graph_new(&plain, m, impl, CK_NONE, false) || !ck_graph_new(&ck, m, impl, mode, false))
        return;
    /* the marked nodes are read in the forward only */
    int marked = 0, late = 0;
    for (int j = 0; j < gml_graph_n_nodes(ck.g); j++) {
        const gml_tensor *t = gml_graph_node(ck.g, j);
        for (int s = 0; s < GML_MAX_SRC; s++) {
            const gml_tensor *r = t->src[s] ? root_of(t->src[s]) : NULL;
            if (!r || !(r->flags & GML_FLAG_RECOMPUTE) || r->op == GML_OP_NONE) continue;
            marked++;
            if (t->id > ck.last_forward_id) {
                late++;
                CHECK(false, "backward node '%s' reads the marked node '%s'", t->name, r->name);
            }
        }
    }
    CHECK(marked > 0 && late == 0, "%d reads of marked nodes, %d in the backward", marked, late);
    const size_t p0 = gml_graph_plan_peak(plain.g), p1 = gml_graph_plan_peak(ck.g);
    printf("%d LLaMA layers B=%d T=%d D=%d H=%d G=%d F=%d, %s attention, %s recomputed: "
           "planned peak %zu bytes, %zu without (%.0f%%), %d nodes, %d without\n", CK_L, CK_B,
           CK_T, CK_D, CK_H, CK_G, CK_F, iname, CK_NAMES[mode], p1, p0, 100.0 * (double)p1 / (double)p0,
           gml_graph_n_nodes(ck.g), gml_graph_n_nodes(plain.g));
    CHECK(gml_graph_n_nodes(ck.g) > gml_graph_n_nodes(plain.g), "nothing recomputed");
    CHECK(p1 < p0, "planned peak %zu with recomputation, %zu without", p1, p0);
    static const gml_isa isas[] = {GML_TEST_ISAS};
    for (int k = 0; k < GML_TEST_N_ISAS; k++) {
        if (!gml_cpu_has(isas[k])) continue;
        gml_set_isa(isas[k]);
        for (int i = 0; i < N_THREADS; i++) {
            chk_case("checkpoint %s, %s recomputed, %s, %d threads", iname, CK_NAMES[mode],
                     gml_isa_name(isas[k]), THREADS[i]);
            if (!CHECK(gml_graph_compute(plain.g, THREADS[i]) == GML_OK &&
                           gml_graph_compute(ck.g, THREADS[i]) == GML_OK,
                       "compute: %s %s", gml_graph_error(plain.g), gml_graph_error(ck.g)))
                continue;
            for (int w = 0; w < CK_L * CK_NW + 1; w++) {
                float *want = chk_dense(gml_graph_tensor(plain.g, plain.grads[w]));
                CHECK_EQUAL(gml_graph_tensor(ck.g, ck.grads[w]), want, "gradient %d (layer %d)",
                            w, w / CK_NW);
                free(want);
            }
        }
    }
    gml_set_isa(GML_ISA_AUTO);
    ck_graph_free(&plain);
    ck_graph_free(&ck);
}

/* The backward passes the layers one at a time, last first, whatever the
 * order the gradients are given to gml_build_graph in: every activation of
 * layer l (a node built in layer l, its output excepted: the next layer's
 * input) has its last reader before the first backward node that reads an
 * activation of layer l - 1; so the planned peak hardly depends on that
 * order (listing layer 0's gradients first would otherwise have the graph
 * make every layer's input gradient before any weight gradient, each
 * layer's activations alive until the end). */
static void test_backward_order(const ck_model *m, gml_attn_impl impl) {
    const char *iname = impl == GML_ATTN_FUSED ? "fused" : "unfused";
    chk_case("backward order, %s", iname);
    ck_graph c[2] = {{0}, {0}};
    if (!ck_graph_new(&c[0], m, impl, CK_NONE, false) || !ck_graph_new(&c[1], m, impl, CK_NONE, true))
        return;
    const gml_graph *g = c[0].g;
    int last[CK_L], first[CK_L]; /* per layer: last use of an activation, first backward read */
    for (int l = 0; l < CK_L; l++) last[l] = -1, first[l] = gml_graph_n_nodes(g);
    for (int j = 0; j < gml_graph_n_nodes(g); j++) {
        const gml_tensor *t = gml_graph_node(g, j);
        for (int s = 0; s < GML_MAX_SRC; s++) {
            const gml_tensor *r = t->src[s] ? root_of(t->src[s]) : NULL;
            if (!r || r->op == GML_OP_NONE || r->id > c[0].last_forward_id) continue;
            int l = 0;
            while (r->id > c[0].layer_end[l]) l++;
            if (r->id == c[0].layer_end[l]) continue; /* a layer's output */
            if (j > last[l]) last[l] = j;
            if (!t->view_src && t->id > c[0].last_forward_id && j < first[l]) first[l] = j;
        }
    }
    for (int l = 1; l < CK_L; l++)
        CHECK(last[l] < first[l - 1], "layer %d's activations are last read at node %d, after the "
              "backward reads layer %d's at node %d", l, last[l], l - 1, first[l - 1]);
    const size_t p0 = gml_graph_plan_peak(c[0].g), p1 = gml_graph_plan_peak(c[1].g);
    printf("%d LLaMA layers, %s attention: planned peak %zu bytes with the gradients listed "
           "first layer first, %zu last layer first\n", CK_L, iname, p0, p1);
    CHECK((double)p0 <= 1.1 * (double)p1 && (double)p1 <= 1.1 * (double)p0,
          "planned peaks %zu and %zu: the order gradients are listed in matters", p0, p1);
    ck_graph_free(&c[0]);
    ck_graph_free(&c[1]);
}

static void test_checkpoint_errors(const ck_model *m) {
    chk_case("checkpoint errors");
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true});
    gml_tensor *a = gml_tanh(ctx, m->x), *b = gml_tanh(ctx, a), *other = gml_neg(ctx, m->dy);
    gml_set_name(other, "other");
    CHECK(gml_checkpoint(ctx, b, &other, 1) == GML_ERR_INVALID, "an input b does not read");
    CHECK_CONTAINS(gml_last_error(ctx), "checkpoint(node_");
    CHECK_CONTAINS(gml_last_error(ctx), "input 'other' [2,33,16] is not among the tensors");
    CHECK(!(a->flags & GML_FLAG_RECOMPUTE), "marked on an error");
    gml_clear_error(ctx);
    CHECK(gml_checkpoint(ctx, NULL, &a, 1) == GML_ERR_INVALID, "NULL out");
    CHECK_CONTAINS(gml_last_error(ctx), "checkpoint: out is NULL");
    gml_clear_error(ctx);
    CHECK(gml_checkpoint(NULL, b, &a, 1) == GML_ERR_INVALID, "NULL ctx");
    CHECK(gml_checkpoint(ctx, b, NULL, 1) == GML_ERR_INVALID, "NULL inputs");
    gml_clear_error(ctx);
    CHECK(gml_checkpoint(ctx, b, &m->x, 1) == GML_OK, "%s", gml_last_error(ctx));
    CHECK((a->flags & GML_FLAG_RECOMPUTE) && !(b->flags & GML_FLAG_RECOMPUTE) &&
              !(m->x->flags & GML_FLAG_RECOMPUTE),
          "marks: a %d, out %d, the input %d", a->flags, b->flags, m->x->flags);
    gml_free(ctx);
}

int main(void) {
    test_lifetime();
    test_accumulate();
    ck_model m = ck_model_new();
    const gml_attn_impl impls[] = {GML_ATTN_FUSED, GML_ATTN_UNFUSED};
    for (int i = 0; i < 2; i++)
        for (int mode = CK_ATTN; mode <= CK_LAYER; mode++) test_checkpoint_case(&m, impls[i], mode);
    test_checkpoint_case(&m, GML_ATTN_FUSED, CK_LLAMA);
    for (int i = 0; i < 2; i++) test_backward_order(&m, impls[i]);
    test_checkpoint_errors(&m);
    gml_free(m.data);
    return chk_summary();
}
