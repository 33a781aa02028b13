/* The context-parallel runner (mpi/ring.c, gml_cp_*) in one process, a
 * singleton MPI job of one rank (P > 1 runs under mpirun in test_mpi_ring.sh):
 * its refusals with their messages (what the ring cannot do, the layouts,
 * the single-process block's own checks), the rows it reports, and P = 1
 * against the single-process block: bitwise (it builds that graph), at 1
 * and 3 threads, run twice, under every ISA the CPU has. */
#include <ggmlite/mpi.h>

#include "check.h"

static gml_tensor *rnd(gml_context *ctx, chk_rng *r, int n, const int64_t *ne, float a, const char *name) {
    gml_tensor *t = gml_new_tensor(ctx, GML_F32, n, ne);
    chk_fill_uniform(t, r, -a, a);
    return gml_set_name(t, name);
}

/* gml_cp_attn_create's message for cfg/w, or "" when it was made (and freed). */
static void refused(const gml_attn_config *cfg, const gml_attn_weights *w, gml_cp_layout layout, int64_t T,
                    const char *want) {
    char err[1200] = "";
    gml_cp *cp = gml_cp_attn_create(MPI_COMM_WORLD, cfg, w, layout, 1, T, 32, err, sizeof err);
    CHECK(cp == NULL, "expected a refusal containing '%s'", want);
    CHECK_CONTAINS(err, want);
    gml_cp_free(cp);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    chk_rng r = chk_seed(15);
    gml_context *w_ctx = gml_init((gml_init_params){.mem_size = 1 << 22});
    const int64_t B = 2, T = 9, D = 32, H = 4, G = 2, kv = G * (D / H);
    gml_attn_weights w = {
        .w_q = rnd(w_ctx, &r, 2, (int64_t[]){D, D}, 0.2f, "w_q.weight"),
        .b_q = rnd(w_ctx, &r, 1, (int64_t[]){D}, 0.1f, "w_q.bias"),
        .w_k = rnd(w_ctx, &r, 2, (int64_t[]){kv, D}, 0.2f, "w_k.weight"),
        .w_v = rnd(w_ctx, &r, 2, (int64_t[]){kv, D}, 0.2f, "w_v.weight"),
        .w_o = rnd(w_ctx, &r, 2, (int64_t[]){D, D}, 0.2f, "w_o.weight"),
        .b_o = rnd(w_ctx, &r, 1, (int64_t[]){D}, 0.1f, "w_o.bias"),
        .sinks = rnd(w_ctx, &r, 1, (int64_t[]){H}, 1.0f, "sinks"),
    };
    gml_attn_config cfg = {.dims = {.n_heads = (int)H, .n_kv_heads = (int)G},
                           .score = {.causal = GML_CAUSAL_BOTTOM_RIGHT, .softcap = 10, .alibi_max_bias = 8},
                           .pos = {.kind = GML_POS_ROPE}};

    chk_case("refusals");
    gml_attn_config c = cfg;
    c.score.add_zero_attn = true;
    refused(&c, &w, GML_CP_CONTIGUOUS, T, "context_parallel: add_zero_attn is not supported");
    c = cfg;
    c.graph.want_weights = true;
    refused(&c, &w, GML_CP_CONTIGUOUS, T, "context_parallel: the attention weights are not gathered");
    gml_attn_weights wb = w;
    wb.bias_k = wb.bias_v = w.b_q;
    refused(&cfg, &wb, GML_CP_CONTIGUOUS, T, "bias_k/bias_v is not supported");
    refused(&cfg, &w, (gml_cp_layout)7, T, "layout 7 is not GML_CP_CONTIGUOUS or GML_CP_ZIGZAG");
    refused(&cfg, &w, GML_CP_ZIGZAG, 1, "1 rows of the sequence cannot be split over 1 ranks in zigzag segments");
    refused(&cfg, NULL, GML_CP_CONTIGUOUS, T, "gml_cp_attn_create: w is NULL");
    gml_attn_weights wk = w;
    wk.w_k = w.w_q; /* [D, D] where [G*d_k, D] belongs: the block's own message */
    refused(&cfg, &wk, GML_CP_CONTIGUOUS, T, "gqa: w_k.weight");
    c = cfg;
    c.dims.n_heads = 5;
    refused(&c, &w, GML_CP_CONTIGUOUS, T, "d_model 32 is not divisible by heads 5");

    chk_case("rows");
    int64_t t0[2], n[2];
    CHECK(gml_cp_rows_of(10, 3, 1, GML_CP_CONTIGUOUS, t0, n) == 1 && t0[0] == 3 && n[0] == 3,
          "contiguous rank 1 of 3 over 10 rows: [%lld, +%lld)", (long long)t0[0], (long long)n[0]);
    CHECK(gml_cp_rows_of(10, 3, 2, GML_CP_CONTIGUOUS, t0, n) == 1 && t0[0] == 6 && n[0] == 4,
          "contiguous rank 2 of 3: [%lld, +%lld)", (long long)t0[0], (long long)n[0]);
    CHECK(gml_cp_rows_of(12, 3, 0, GML_CP_ZIGZAG, t0, n) == 2 && t0[0] == 0 && n[0] == 2 && t0[1] == 10 &&
              n[1] == 2, "zigzag rank 0 of 3 over 12 rows: [%lld, +%lld) and [%lld, +%lld)",
          (long long)t0[0], (long long)n[0], (long long)t0[1], (long long)n[1]);
    CHECK(gml_cp_rows_of(12, 3, 2, GML_CP_ZIGZAG, t0, n) == 2 && t0[0] == 4 && t0[1] == 6,
          "zigzag rank 2 of 3: segments 2 and 3 start at %lld and %lld", (long long)t0[0], (long long)t0[1]);

    /* the single-process reference: gml_gqa fused over the same x */
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 24});
    gml_tensor *x = rnd(ctx, &r, 3, (int64_t[]){B, T, D}, 1.0f, "x");
    c = cfg;
    c.graph.impl = GML_ATTN_FUSED;
    gml_tensor *want = gml_gqa(ctx, c, &w, (gml_attn_inputs){.query = x}).out;
    gml_graph *g = gml_build_graph(ctx, &want, 1);
    CHECK(g && gml_graph_plan(g, NULL) == GML_OK, "the reference graph: %s", gml_last_error(ctx));
    static const gml_isa ISAS[] = {GML_TEST_ISAS};
    for (size_t i = 0; g && i < sizeof ISAS / sizeof *ISAS; i++) {
        if (gml_set_isa(ISAS[i]) != GML_OK) continue;
        for (int layout = 0; layout < 2; layout++) {
            chk_case("P = 1, %s, %s", gml_isa_name(ISAS[i]), layout ? "zigzag" : "contiguous");
            CHECK(gml_graph_compute(g, 2) == GML_OK, "reference: %s", gml_graph_error(g));
            const float *ref = gml_graph_data(g, want);
            char err[1200] = "";
            gml_cp *cp = gml_cp_attn_create(MPI_COMM_WORLD, &cfg, &w, (gml_cp_layout)layout, B, T, D, err, sizeof err);
            if (!CHECK(cp != NULL, "create: %s", err)) continue;
            CHECK(gml_cp_rows(cp, t0, n) == (layout ? 2 : 1), "rows: ranges");
            CHECK(t0[0] == 0 && n[0] + (layout ? n[1] : 0) == T, "rows: one rank holds all %lld", (long long)T);
            memcpy(gml_cp_input(cp), x->data, (size_t)(B * T * D) * sizeof(float)); /* ranges in order */
            float *first = malloc((size_t)(B * T * D) * sizeof *first);
            for (int threads = 1; first && threads <= 3; threads += 2) {
                gml_cp_stats st;
                CHECK(gml_cp_run(cp, threads, &st, err, sizeof err) == GML_OK, "run: %s", err);
                const float *got = gml_cp_output(cp);
                CHECK(got && memcmp(got, ref, (size_t)(B * T * D) * sizeof *got) == 0,
                      "%d threads: not bitwise the single process", threads);
                CHECK(st.bytes_sent == 0 && st.wait_ms == 0, "one rank sends nothing");
                if (threads == 1) memcpy(first, got, (size_t)(B * T * D) * sizeof *got);
                else CHECK(memcmp(first, got, (size_t)(B * T * D) * sizeof *got) == 0, "runs differ");
            }
            free(first);
            gml_cp_free(cp);
        }
    }
    gml_set_isa(GML_ISA_AUTO);
    gml_graph_free(g);
    gml_free(ctx);
    gml_free(w_ctx);
    MPI_Finalize();
    return chk_summary();
}
