/* A program outside the ggmlite tree, built against an installed ggmlite
 * with ggmlite::mpi (tests/install/test_install_mpi.sh), run under mpirun
 * with P ranks. Each rank computes its head-parallel share of a small GQA
 * block (gml_tp_attn: H = 4 heads, G = 2 kv heads, causal) on two threads;
 * the shares are summed in rank order (gml_mpi_sum_ordered), and rank 0
 * checks the sum against the same block computed whole in one process
 * (gml_gqa): within 1e-6 of its largest value. Every rank learns the
 * outcome through gml_mpi_agree; exit status 0 only if it held. */
#include <ggmlite/attention.h>
#include <ggmlite/ggmlite.h>
#include <ggmlite/mpi.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { B = 1, T = 6, D = 16, H = 4, G = 2, KV = G * (D / H) };

/* Deterministic values in [-0.5, 0.5), the same on every rank. */
static gml_tensor *filled(gml_context *ctx, int n_dims, const int64_t *ne, int salt) {
    gml_tensor *t = gml_new_tensor(ctx, GML_F32, n_dims, ne);
    float *d = t->data;
    for (int64_t i = 0; i < gml_nelements(t); i++)
        d[i] = (float)(((unsigned)i * 2654435761u + (unsigned)salt * 40503u) % 1000u) / 1000.0f - 0.5f;
    return t;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, P = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    char msg[512] = "", why[1100] = "";
    bool ok = true;

    gml_context *ctx = gml_init((gml_init_params){.mem_size = 16 << 20});
    gml_tensor *x = filled(ctx, 3, (int64_t[]){B, T, D}, 1);
    gml_attn_weights w = {.w_q = filled(ctx, 2, (int64_t[]){D, D}, 2),
                          .w_k = filled(ctx, 2, (int64_t[]){KV, D}, 3),
                          .w_v = filled(ctx, 2, (int64_t[]){KV, D}, 4),
                          .w_o = filled(ctx, 2, (int64_t[]){D, D}, 5),
                          .b_o = filled(ctx, 1, (int64_t[]){D}, 6)};
    gml_attn_config cfg = {.dims = {.d_model = D, .n_heads = H, .n_kv_heads = G},
                           .score = {.causal = GML_CAUSAL_BOTTOM_RIGHT}};
    gml_tp_share s;
    gml_tensor *part = NULL, *want = NULL;
    if (gml_tp_share_of(H, G, 0, P, rank, &s, msg, sizeof msg) != GML_OK) ok = false;
    if (ok && !(part = gml_tp_attn(ctx, &cfg, &w, x, NULL, &s, rank == 0))) {
        snprintf(msg, sizeof msg, "gml_tp_attn: %s", gml_last_error(ctx));
        ok = false;
    }
    gml_graph *g = ok ? gml_build_graph(ctx, &part, 1) : NULL;
    if (ok && (!g || gml_graph_compute(g, 2) != GML_OK)) {
        snprintf(msg, sizeof msg, "computing the share: %s", g ? gml_graph_error(g) : gml_last_error(ctx));
        ok = false;
    }
    if (!gml_mpi_agree(MPI_COMM_WORLD, ok, msg, why, sizeof why)) goto out;

    float sum[B * T * D];
    memcpy(sum, part->data, sizeof sum);
    if (gml_mpi_sum_ordered(MPI_COMM_WORLD, sum, B * T * D, false, msg, sizeof msg) != GML_OK) ok = false;
    if (ok && rank == 0) {
        want = gml_gqa(ctx, cfg, &w, (gml_attn_inputs){.query = x}).out;
        gml_graph *gw = want ? gml_build_graph(ctx, &want, 1) : NULL;
        if (!gw || gml_graph_compute(gw, 1) != GML_OK) {
            snprintf(msg, sizeof msg, "the whole block: %s", gw ? gml_graph_error(gw) : gml_last_error(ctx));
            ok = false;
        } else {
            const float *wd = want->data;
            double err = 0, scale = 0;
            for (int i = 0; i < B * T * D; i++) {
                err = fmax(err, fabs((double)sum[i] - wd[i]));
                scale = fmax(scale, fabs((double)wd[i]));
            }
            if (!(err <= 1e-6 * scale) || scale == 0) {
                snprintf(msg, sizeof msg, "sum of %d shares: max |got - want| %.3g > 1e-6 of %.4g", P, err, scale);
                ok = false;
            } else {
                printf("ggmlite %s, %d ranks: the head-parallel block matches (max err %.3g of %.4g)\n",
                       gml_version(), P, err, scale);
            }
        }
        gml_graph_free(gw);
    }
    gml_mpi_agree(MPI_COMM_WORLD, ok, msg, why, sizeof why);
out:
    if (why[0] && rank == 0) fprintf(stderr, "consumer_mpi: %s\n", why);
    const int status = why[0] ? 1 : 0;
    gml_graph_free(g);
    gml_free(ctx);
    MPI_Finalize();
    return status;
}
