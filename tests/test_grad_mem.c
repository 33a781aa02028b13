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
 */
#include "check.h"


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
            const int last = t->flags & GML_FLAG_OUTPUT ? N : last_use(g, t);
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

int main(void) {
    test_lifetime();
    test_accumulate();
    return chk_summary();
}
