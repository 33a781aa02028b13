/* Head-parallel shares (mpi/tp.c, <ggmlite/mpi.h>) without MPI: P = 1..5
 * ranks simulated in one process. Each rank's partial graph is computed (at
 * 1 to 4 threads, varied by rank), the partials are summed in rank order in
 * float as gml_mpi_sum_ordered sums them, and the sum is checked against the
 * single-process block (gml_gqa, gml_llama_layer) under every ISA the CPU
 * has: bitwise for P = 1, else max |got - want| <= 1e-6 max |want|. The
 * cases cover kv heads split (P divides G) and replicated (a group spanning
 * two ranks: one segment per kv head), uneven head counts, biases, packed
 * in_proj weights, sinks, rope, causal, window and softcap; the LLaMA layer
 * with its MLP rows split. Also the shares themselves and the builders'
 * refusals with their messages. */
#include <ggmlite/mpi.h>

#include "check.h"

#define TOL 1e-6

static const gml_isa ISAS[] = {GML_TEST_ISAS};

static gml_tensor *rnd(gml_context *ctx, chk_rng *r, int n, const int64_t *ne, float a) {
    gml_tensor *t = gml_new_tensor(ctx, GML_F32, n, ne);
    chk_fill_uniform(t, r, -a, a);
    return t;
}
#define RND2(ctx, r, a, b) rnd(ctx, r, 2, (int64_t[]){a, b}, 1.0f / sqrtf((float)(b)))
#define RND1(ctx, r, a) rnd(ctx, r, 1, (int64_t[]){a}, 0.5f)

/* got against want: bitwise, or within TOL of max |want|. */
static void compare(const float *got, const gml_tensor *want_t, bool bitwise, const char *what) {
    float *want = chk_dense(want_t);
    CHECK_REL_CLOSE(got, want, gml_nelements(want_t), bitwise, TOL, what);
    free(want);
}

static bool compute(gml_graph *g, int threads, const char *what) {
    const gml_status st = gml_graph_compute(g, threads);
    return CHECK(st == GML_OK, "%s: compute: %s", what, gml_graph_error(g));
}

/* sum[i] += t's values (t contiguous) */
static void add_to(float *sum, const gml_tensor *t, bool first) {
    const float *p = t->data;
    for (int64_t i = 0; i < gml_nelements(t); i++) sum[i] = first ? p[i] : sum[i] + p[i];
}

/* ---- attention ---------------------------------------------------------------- */

typedef struct acase {
    const char *name;
    int64_t B, T, D;
    int H, G;
    bool bias, packed, sinks, rope;
    gml_causal causal;
    int64_t window;
    float softcap;
} acase;

static void attn_case(const acase *c) {
    chk_case("tp_attn %s", c->name);
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 96 << 20});
    chk_rng r = chk_seed(0x7a + (uint64_t)c->H * 31 + (uint64_t)c->G);
    const int64_t D = c->D, kv = c->G * (D / c->H);
    gml_tensor *x = rnd(ctx, &r, 3, (int64_t[]){c->B, c->T, D}, 1.0f);
    gml_attn_weights w = {0};
    if (c->packed) {
        w.in_proj_weight = RND2(ctx, &r, D + 2 * kv, D);
        if (c->bias) w.in_proj_bias = RND1(ctx, &r, D + 2 * kv);
    } else {
        w.w_q = RND2(ctx, &r, D, D), w.w_k = RND2(ctx, &r, kv, D), w.w_v = RND2(ctx, &r, kv, D);
        if (c->bias) w.b_q = RND1(ctx, &r, D), w.b_k = RND1(ctx, &r, kv), w.b_v = RND1(ctx, &r, kv);
    }
    w.w_o = RND2(ctx, &r, D, D);
    if (c->bias) w.b_o = RND1(ctx, &r, D);
    if (c->sinks) w.sinks = rnd(ctx, &r, 1, (int64_t[]){c->H}, 2.0f);
    gml_attn_config cfg = {.dims = {.d_model = D, .n_heads = c->H, .n_kv_heads = c->G},
                           .score = {.causal = c->causal, .window = c->window, .softcap = c->softcap},
                           .pos = {.kind = c->rope ? GML_POS_ROPE : GML_POS_NONE}};
    gml_tensor *want = gml_gqa(ctx, cfg, &w, (gml_attn_inputs){.query = x}).out;
    if (!CHECK(want, "gml_gqa: %s", gml_last_error(ctx))) return gml_free(ctx);
    gml_graph *gw = gml_build_graph(ctx, &want, 1);
    enum { PMAX = 5 };
    gml_graph *g[PMAX + 1][PMAX] = {{0}};
    gml_tensor *part[PMAX + 1][PMAX] = {{0}};
    const int pmax = c->H < PMAX ? c->H : PMAX;
    for (int P = 1; P <= pmax; P++)
        for (int k = 0; k < P; k++) {
            gml_tp_share s;
            char err[256];
            if (!CHECK(gml_tp_share_of(c->H, c->G, 0, P, k, &s, err, sizeof err) == GML_OK, "share: %s", err))
                return gml_free(ctx);
            part[P][k] = gml_tp_attn(ctx, &cfg, &w, x, NULL, &s, k == 0);
            if (!CHECK(part[P][k], "P=%d rank %d: %s", P, k, gml_last_error(ctx))) return gml_free(ctx);
            g[P][k] = gml_build_graph(ctx, &part[P][k], 1);
        }
    float *sum = malloc((size_t)gml_nelements(want) * sizeof *sum);
    for (size_t i = 0; i < sizeof ISAS / sizeof *ISAS; i++) {
        if (gml_set_isa(ISAS[i]) != GML_OK) continue;
        char what[128];
        snprintf(what, sizeof what, "%s single", gml_isa_name(ISAS[i]));
        if (!compute(gw, 2, what)) continue;
        for (int P = 1; P <= pmax; P++) {
            for (int k = 0; k < P; k++) {
                snprintf(what, sizeof what, "%s P=%d rank %d", gml_isa_name(ISAS[i]), P, k);
                compute(g[P][k], 1 + (k + P) % 4, what);
                add_to(sum, part[P][k], k == 0);
            }
            snprintf(what, sizeof what, "%s %s P=%d", c->name, gml_isa_name(ISAS[i]), P);
            compare(sum, want, P == 1, what);
        }
    }
    gml_set_isa(GML_ISA_AUTO);
    free(sum);
    for (int P = 1; P <= pmax; P++)
        for (int k = 0; k < P; k++) gml_graph_free(g[P][k]);
    gml_graph_free(gw);
    gml_free(ctx);
}

/* ---- the LLaMA layer -------------------------------------------------------------- */

static void llama_case(const char *name, int64_t T, int64_t D, int H, int G, int64_t F, bool bias,
                       bool sinks, int64_t window, float softcap) {
    chk_case("tp_llama %s", name);
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 96 << 20});
    chk_rng r = chk_seed(0x11a + (uint64_t)H);
    const int64_t B = 2, kv = G * (D / H);
    gml_tensor *x = rnd(ctx, &r, 3, (int64_t[]){B, T, D}, 1.0f);
    gml_llama_weights w = {.attn_norm = RND1(ctx, &r, D), .wq = RND2(ctx, &r, D, D),
                           .wk = RND2(ctx, &r, kv, D), .wv = RND2(ctx, &r, kv, D),
                           .wo = RND2(ctx, &r, D, D), .mlp_norm = RND1(ctx, &r, D),
                           .w_gate = RND2(ctx, &r, F, D), .w_up = RND2(ctx, &r, F, D),
                           .w_down = RND2(ctx, &r, D, F)};
    if (bias)
        w.bq = RND1(ctx, &r, D), w.bk = RND1(ctx, &r, kv), w.bv = RND1(ctx, &r, kv), w.bo = RND1(ctx, &r, D),
        w.b_gate = RND1(ctx, &r, F), w.b_up = RND1(ctx, &r, F), w.b_down = RND1(ctx, &r, D);
    if (sinks) w.sinks = rnd(ctx, &r, 1, (int64_t[]){H}, 2.0f);
    gml_llama_config lc = {.n_heads = H, .n_kv_heads = G, .window = window, .softcap = softcap};
    gml_tensor *want = gml_llama_layer(ctx, &lc, &w, x, NULL);
    if (!CHECK(want, "gml_llama_layer: %s", gml_last_error(ctx))) return gml_free(ctx);
    gml_graph *gw = gml_build_graph(ctx, &want, 1);
    enum { PMAX = 4 };
    gml_graph *ga[PMAX + 1][PMAX] = {{0}}, *gm[PMAX + 1][PMAX] = {{0}};
    gml_tensor *pa[PMAX + 1][PMAX] = {{0}}, *pm[PMAX + 1][PMAX] = {{0}}, *h[PMAX + 1];
    for (int P = 1; P <= PMAX; P++) {
        h[P] = gml_new_tensor_3d(ctx, GML_F32, B, T, D); /* x + the attention's sum */
        for (int k = 0; k < P; k++) {
            gml_tp_share s;
            char err[256];
            if (!CHECK(gml_tp_share_of(H, G, F, P, k, &s, err, sizeof err) == GML_OK, "share: %s", err))
                return gml_free(ctx);
            pa[P][k] = gml_tp_llama_attn(ctx, &lc, &w, x, NULL, &s, k == 0);
            pm[P][k] = gml_tp_llama_mlp(ctx, &lc, &w, h[P], &s, k == 0);
            if (!CHECK(pa[P][k] && pm[P][k], "P=%d rank %d: %s", P, k, gml_last_error(ctx))) return gml_free(ctx);
            ga[P][k] = gml_build_graph(ctx, &pa[P][k], 1);
            gm[P][k] = gml_build_graph(ctx, &pm[P][k], 1);
        }
    }
    const int64_t n = gml_nelements(want);
    float *sum = malloc((size_t)n * sizeof *sum), *xs = x->data;
    for (size_t i = 0; i < sizeof ISAS / sizeof *ISAS; i++) {
        if (gml_set_isa(ISAS[i]) != GML_OK) continue;
        char what[128];
        snprintf(what, sizeof what, "%s single", gml_isa_name(ISAS[i]));
        if (!compute(gw, 2, what)) continue;
        for (int P = 1; P <= PMAX; P++) {
            snprintf(what, sizeof what, "%s %s P=%d", name, gml_isa_name(ISAS[i]), P);
            for (int k = 0; k < P; k++) {
                compute(ga[P][k], 1 + (k + P) % 4, what);
                add_to(sum, pa[P][k], k == 0);
            }
            float *hp = h[P]->data;
            for (int64_t e = 0; e < n; e++) hp[e] = xs[e] + sum[e];
            for (int k = 0; k < P; k++) {
                compute(gm[P][k], 1 + (k + 2 * P) % 4, what);
                add_to(sum, pm[P][k], k == 0);
            }
            for (int64_t e = 0; e < n; e++) sum[e] = hp[e] + sum[e];
            compare(sum, want, P == 1, what);
        }
    }
    gml_set_isa(GML_ISA_AUTO);
    free(sum);
    for (int P = 1; P <= PMAX; P++)
        for (int k = 0; k < P; k++) gml_graph_free(ga[P][k]), gml_graph_free(gm[P][k]);
    gml_graph_free(gw);
    gml_free(ctx);
}

/* ---- shares and refusals ------------------------------------------------------------ */

static void shares(void) {
    chk_case("shares");
    gml_tp_share s;
    char err[256];
    CHECK(gml_tp_share_of(8, 2, 0, 3, 1, &s, err, sizeof err) == GML_OK, "%s", err);
    CHECK(s.h0 == 2 && s.nh == 3 && s.g0 == 0 && s.ng == 2 && !s.kv_split,
          "H 8 G 2 P 3 rank 1: heads [%d+%d] kv [%d+%d] split %d", s.h0, s.nh, s.g0, s.ng, s.kv_split);
    CHECK(gml_tp_share_of(8, 2, 0, 2, 1, &s, err, sizeof err) == GML_OK && s.h0 == 4 && s.nh == 4 &&
              s.g0 == 1 && s.ng == 1 && s.kv_split,
          "H 8 G 2 P 2 rank 1: heads [%d+%d] kv [%d+%d]", s.h0, s.nh, s.g0, s.ng);
    const int want[4] = {1, 2, 1, 2};
    for (int k = 0; k < 4; k++)
        CHECK(gml_tp_share_of(6, 6, 100, 4, k, &s, err, sizeof err) == GML_OK && s.nh == want[k] &&
                  s.ng == want[k] && s.nf == 25 && s.f0 == 25 * k,
              "H 6 P 4 rank %d: %d heads, %d kv, rows [%lld+%lld]", k, s.nh, s.ng, (long long)s.f0,
              (long long)s.nf);
    CHECK(gml_tp_share_of(2, 0, 0, 3, 0, &s, err, sizeof err) == GML_ERR_INVALID, "2 heads over 3 ranks");
    CHECK_CONTAINS(err, "heads 2 cannot be split over 3 ranks");
    CHECK(gml_tp_share_of(8, 3, 0, 2, 0, &s, err, sizeof err) == GML_ERR_INVALID, "G 3, H 8");
    CHECK_CONTAINS(err, "kv heads 3 must divide heads 8");
    CHECK(gml_tp_share_of(8, 2, 2, 3, 0, &s, err, sizeof err) == GML_ERR_INVALID, "F 2 over 3");
    CHECK_CONTAINS(err, "the MLP's 2 rows cannot be split over 3 ranks");
    CHECK(gml_tp_share_of(8, 2, 0, 3, 3, &s, err, sizeof err) == GML_ERR_INVALID, "rank 3 of 3");
}

static void refusals(void) {
    chk_case("refusals");
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true});
    const int64_t D = 32;
    gml_tensor *x = gml_new_tensor_3d(ctx, GML_F32, 1, 5, D);
    gml_attn_weights w = {.w_q = gml_new_tensor_2d(ctx, GML_F32, D, D), .w_k = gml_new_tensor_2d(ctx, GML_F32, D, D),
                          .w_v = gml_new_tensor_2d(ctx, GML_F32, D, D), .w_o = gml_new_tensor_2d(ctx, GML_F32, D, D)};
    gml_tp_share s;
    gml_tp_share_of(4, 4, 0, 2, 0, &s, NULL, 0);
    gml_attn_config cfg = {.dims = {.n_heads = 4}};
    CHECK(gml_tp_attn(ctx, &cfg, &w, x, NULL, &s, true), "valid: %s", gml_last_error(ctx));
    gml_attn_config alibi = cfg;
    alibi.score.alibi_max_bias = 8;
    CHECK(!gml_tp_attn(ctx, &alibi, &w, x, NULL, &s, true), "alibi accepted");
    CHECK_CONTAINS(gml_last_error(ctx), "tp_attn: ALiBi is not split by heads");
    gml_attn_config weights = cfg;
    weights.graph.want_weights = true;
    CHECK(!gml_tp_attn(ctx, &weights, &w, x, NULL, &s, true), "want_weights accepted");
    CHECK_CONTAINS(gml_last_error(ctx), "want_weights");
    gml_attn_config eight = {.dims = {.n_heads = 8}};
    CHECK(!gml_tp_attn(ctx, &eight, &w, x, NULL, &s, true), "a share of other heads accepted");
    CHECK_CONTAINS(gml_last_error(ctx), "the share is of 4 heads and 4 kv heads, the config has 8 and 8");
    gml_attn_weights bad = w;
    bad.w_o = gml_new_tensor_2d(ctx, GML_F32, D, D + 1);
    CHECK(!gml_tp_attn(ctx, &cfg, &bad, x, NULL, &s, true), "w_o [32,33] accepted");
    CHECK_CONTAINS(gml_last_error(ctx), "tp_attn: w_o.weight is f32 [32,33], expected f32, f16 or bf16 [32,32]");
    gml_llama_weights lw = {.attn_norm = gml_new_tensor_1d(ctx, GML_F32, D), .wq = gml_new_tensor_2d(ctx, GML_F32, D, D + 2),
                            .wk = w.w_k, .wv = w.w_v, .wo = w.w_o, .mlp_norm = gml_new_tensor_1d(ctx, GML_F32, D),
                            .w_gate = gml_new_tensor_2d(ctx, GML_F32, 8, D), .w_up = gml_new_tensor_2d(ctx, GML_F32, 8, D),
                            .w_down = gml_new_tensor_2d(ctx, GML_F32, D, 9)};
    gml_llama_config lc = {.n_heads = 4};
    CHECK(!gml_tp_llama_attn(ctx, &lc, &lw, x, NULL, &s, true), "q_proj [32,34] accepted");
    CHECK_CONTAINS(gml_last_error(ctx), "tp_llama: self_attn.q_proj.weight is f32 [32,34]");
    gml_tp_share_of(4, 4, 8, 2, 0, &s, NULL, 0);
    CHECK(!gml_tp_llama_mlp(ctx, &lc, &lw, x, &s, true), "down_proj [32,9] accepted");
    CHECK_CONTAINS(gml_last_error(ctx), "tp_llama: mlp.down_proj.weight is f32 [32,9], expected f32, f16 or bf16 [32,8]");
    gml_free(ctx);
}

int main(void) {
    shares();
    refusals();
    const acase cases[] = {
        {"mha causal bias", 2, 9, 64, 8, 8, true, false, false, false, GML_CAUSAL_BOTTOM_RIGHT, 0, 0},
        {"gqa G=2 rope window softcap sinks", 1, 13, 64, 8, 2, false, false, true, true, GML_CAUSAL_BOTTOM_RIGHT, 4, 10},
        {"gqa H=12 G=4 packed in_proj", 2, 7, 96, 12, 4, true, true, false, false, GML_CAUSAL_NONE, 0, 0},
        {"mqa H=5 top-left", 1, 11, 40, 5, 1, true, false, false, true, GML_CAUSAL_TOP_LEFT, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) attn_case(&cases[i]);
    llama_case("gqa", 9, 64, 8, 2, 176, false, false, 0, 0);
    llama_case("H=6 G=3 biases sinks window softcap", 7, 48, 6, 3, 100, true, true, 3, 5);
    return chk_summary();
}
