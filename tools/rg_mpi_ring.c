/* run-graph mha|gqa|llama ... --parallel context: the prompt (prefill) of one
 * block split by rows over the ranks of an MPI job, ring attention
 * (ggmlite/mpi.h gml_cp_*), started by mpirun:
 *
 *   mpirun -np 4 run-graph llama --heads 16 --kv-heads 4 --weights w.safetensors \
 *       --input x.npy --output y.npy --parallel context
 *
 * Rank 0 reads the input and broadcasts it; every rank maps the whole
 * weights file (replicated: every head is on every rank), keeps its rows
 * [t0, t0 + n) of the sequence and runs the ring; rank 0 gathers the output
 * rows in rank order and writes them. Loading, strictness, faults and
 * options are those of --parallel heads (rg_mpi.c), plus --sinks and
 * --alibi for mha and gqa. */
#define _POSIX_C_SOURCE 200809L
#include "rg_mpi.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include <xxhash.h>

static gml_cp_layout layout_of(const prun *r) { return r->o.zigzag ? GML_CP_ZIGZAG : GML_CP_CONTIGUOUS; }

/* The runner for the block the options ask for. */
static gml_cp *make_runner(prun *r, char *msg, size_t size) {
    const popts *o = &r->o;
    if (o->kind == K_LLAMA) {
        gml_llama_config lc = {.n_heads = r->H, .n_kv_heads = r->G, .rope_theta = o->rope_theta,
                               .rms_eps = o->rms_eps, .window = o->window, .softcap = o->softcap};
        return gml_cp_llama_create(MPI_COMM_WORLD, &lc, &r->lw, layout_of(r), r->B, r->T, r->D, msg, size);
    }
    gml_attn_config cfg = {
        .dims = {.d_model = r->D, .n_heads = r->H, .n_kv_heads = r->G},
        .score = {.causal = o->causal ? GML_CAUSAL_BOTTOM_RIGHT : GML_CAUSAL_NONE, .window = o->window,
                  .softcap = o->softcap, .alibi_max_bias = o->alibi ? 8.0f : 0.0f},
        .pos = {.kind = o->rope ? GML_POS_ROPE : GML_POS_NONE, .rope.theta = o->rope_theta}};
    return gml_cp_attn_create(MPI_COMM_WORLD, &cfg, &r->aw, layout_of(r), r->B, r->T, r->D, msg, size);
}

/* Rank 0: every rank's output rows [B, n_r, D] (its ranges in order) into out
 * [B, T, D], in rank order. */
static bool gather(const prun *r, const gml_cp *cp, float *out, char *msg, size_t size) {
    const int64_t B = r->B, T = r->T, D = r->D;
    int64_t t0[2], n[2];
    const int k = gml_cp_rows(cp, t0, n);
    const float *mine = gml_cp_output(cp);
    if (r->rank != 0) {
        int rc = MPI_Send(mine, (int)(B * (n[0] + (k > 1 ? n[1] : 0)) * D), MPI_FLOAT, 0, 7, MPI_COMM_WORLD);
        return rc == MPI_SUCCESS || (snprintf(msg, size, "MPI_Send of the output rows failed"), false);
    }
    int64_t most = 0;
    for (int q = 0; q < r->P; q++) {
        const int kq = gml_cp_rows_of(T, r->P, q, layout_of(r), t0, n);
        const int64_t m = n[0] + (kq > 1 ? n[1] : 0);
        most = m > most ? m : most;
    }
    float *tmp = malloc((size_t)(B * most * D) * sizeof *tmp);
    if (!tmp) return snprintf(msg, size, "out of memory for the output rows"), false;
    for (int q = 0; q < r->P; q++) {
        const int kq = gml_cp_rows_of(T, r->P, q, layout_of(r), t0, n);
        const int64_t m = n[0] + (kq > 1 ? n[1] : 0);
        const float *src = mine;
        if (q > 0) {
            if (MPI_Recv(tmp, (int)(B * m * D), MPI_FLOAT, q, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
                free(tmp);
                return snprintf(msg, size, "MPI_Recv of rank %d's output rows failed", q), false;
            }
            src = tmp;
        }
        for (int64_t b = 0; b < B; b++)
            for (int j = 0, off = 0; j < kq; off += (int)n[j], j++)
                memcpy(out + (b * T + t0[j]) * D, src + (b * m + off) * D, (size_t)(n[j] * D) * sizeof *out);
    }
    free(tmp);
    return true;
}

static void rows_text(const prun *r, char *buf, size_t size) {
    size_t k = (size_t)snprintf(buf, size, "rows");
    for (int q = 0; q < r->P && k < size; q++) {
        int64_t t0[2], n[2];
        const int kq = gml_cp_rows_of(r->T, r->P, q, layout_of(r), t0, n);
        k += (size_t)snprintf(buf + k, size - k, "%s%" PRId64, q ? "+" : " ", n[0] + (kq > 1 ? n[1] : 0));
    }
    const bool causal = r->o.kind == K_LLAMA || r->o.causal || r->o.window;
    if (k < size)
        snprintf(buf + k, size - k, "%s, K/V ring of %d step%s, %s", r->o.zigzag ? " (zigzag: segments r and 2P-1-r)" : "",
                 r->P - 1, r->P == 2 ? "" : "s",
                 r->P == 1      ? "one rank: the single-process graph"
                 : !causal      ? "every rank computes every chunk"
                 : r->o.zigzag  ? "causal: segment pairs out of sight skipped"
                                : "causal: rank r computes chunks 0..r only");
}

/* --json: the keys of the single process's report (rg_json_head), then the
 * mode's. The ring runner counts no flops and plans no single graph: flops,
 * gflops and peak_bytes are null. */
static bool report_json(const prun *r, const gml_tensor *out, uint64_t digest, const double *ms,
                        const double *cmp, const double *wait, const double *wait_max, double mib,
                        rg_err *e) {
    const int64_t dim[RG_NSYM] = {[RG_B] = r->B, [RG_T] = r->T, [RG_S] = r->T, [RG_D] = r->D,
                                  [RG_H] = r->H, [RG_G] = r->G};
    const bool shown[RG_NSYM] = {[RG_B] = true, [RG_T] = true, [RG_S] = r->o.kind != K_LLAMA, /* S = T */
                                 [RG_D] = true, [RG_H] = true, [RG_G] = r->o.kind != K_MHA};
    const int mid = r->o.repeat / 2;
    cJSON *j = rg_json_head(&(rg_summary){
        .model = RG_MPI_KIND[r->o.kind], .dim = dim, .shown = shown,
        .causal = r->o.kind == K_LLAMA || r->o.causal, .out = out, .digest = digest, .threads = r->o.threads,
        .runs = r->o.repeat, .median_ms = ms[mid], .min_ms = ms[0], .random_weights = r->random_weights,
        .random_inputs = r->random_input});
    if (!j) return rg_fail(e, RG_RUNTIME, "out of memory");
    cJSON_ReplaceItemInObject(j, "flops", cJSON_CreateNull());
    cJSON_ReplaceItemInObject(j, "gflops", cJSON_CreateNull());
    cJSON_ReplaceItemInObject(j, "peak_bytes", cJSON_CreateNull());
    char rows[512];
    rows_text(r, rows, sizeof rows);
    if (r->o.kind == K_LLAMA) cJSON_AddNumberToObject(j, "ffn", (double)r->F);
    cJSON_AddStringToObject(j, "parallel", "context");
    cJSON_AddNumberToObject(j, "ranks", r->P);
    cJSON_AddStringToObject(j, "rows", rows);
    cJSON_AddBoolToObject(j, "zigzag", r->o.zigzag);
    cJSON_AddNumberToObject(j, "kv_sent_mib", mib);
    cJSON_AddNumberToObject(j, "compute_ms", cmp[mid]);
    cJSON_AddNumberToObject(j, "wait_ms", wait[mid]);
    cJSON_AddNumberToObject(j, "wait_max_ms", wait_max[mid]);
    return rg_json_print(j, e);
}

/* Rank 0: checked, written, reported. */
static bool report(const prun *r, const gml_tensor *out, const double *ms, const double *cmp,
                   const double *wait, const double *wait_max, double mib, rg_err *e) {
    const size_t n = (size_t)(r->B * r->T * r->D);
    const float *o = out->data;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(o[i]))
            return rg_fail(e, RG_RUNTIME, "the output holds a non-finite value (%g at element %zu); the "
                           "inputs or weights may hold NaN or inf", o[i], i);
    char err[1024], shape[64], rows[512];
    if (r->o.output && gml_save_npy(r->o.output, out, err, sizeof err) != GML_OK)
        return rg_fail(e, RG_RUNTIME, "%s", err);
    if (r->o.json)
        return report_json(r, out, (uint64_t)XXH3_64bits(o, n * sizeof *o), ms, cmp, wait, wait_max, mib, e);
    printf("%s: B=%" PRId64 " T=%" PRId64 " D=%" PRId64 " H=%d G=%d", RG_MPI_KIND[r->o.kind], r->B, r->T,
           r->D, r->H, r->G);
    if (r->o.kind == K_LLAMA) printf(" F=%" PRId64 ", causal", r->F);
    else if (r->o.causal) printf(", causal");
    if (r->random_weights || r->random_input)
        printf(", random %s", r->random_weights && r->random_input ? "weights and inputs"
                              : r->random_weights                ? "weights"
                                                                 : "inputs");
    rows_text(r, rows, sizeof rows);
    printf("\nparallel context over %d rank%s: %s\n", r->P, r->P > 1 ? "s" : "", rows);
    printf("output  %s  xxh3 %016" PRIx64 "\n", gml_format_shape(out, shape, sizeof shape),
           (uint64_t)XXH3_64bits(o, n * sizeof *o));
    const int mid = r->o.repeat / 2;
    printf("time    %.3f ms", ms[mid]);
    if (r->o.repeat > 1) printf(" median, %.3f ms min of %d runs", ms[0], r->o.repeat);
    printf(" (%d rank%s x %d thread%s, %s)\n", r->P, r->P > 1 ? "s" : "", r->o.threads,
           r->o.threads == 1 ? "" : "s", gml_isa_name(gml_get_isa()));
    printf("ring    %.3f MiB of K/V sent per rank; rank 0: %.3f ms computing, %.3f ms waiting for "
           "the exchanges; the most any rank waited: %.3f ms (medians)\n", mib, cmp[mid], wait[mid],
           wait_max[mid]);
    return true;
}

int rg_mpi_ring_main(int argc, char **argv, const rg_opts *g, bool parsed, const rg_err *pe) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    prun r = {0};
    rg_err e = parsed ? (rg_err){0} : *pe;
    MPI_Comm_rank(MPI_COMM_WORLD, &r.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &r.P);
    bool ok = parsed && rg_mpi_options(g, true, &r.o, &e); /* the same on every rank */
    if (ok && r.o.done) {
        if (r.rank == 0) rg_print_help(stdout, RG_MODE_CONTEXT);
        MPI_Finalize();
        return 0;
    }
    char msg[1536] = "", why[1600] = "";
    /* 1. the ISA, rank 0's input, the weights and sizes (rg_mpi_setup) */
    gml_context *xctx = NULL;
    bool step = true;
    ok = ok && rg_mpi_setup(&r, &xctx, &e);
    /* 3. the runner (collective: its failure on any rank is everyone's) */
    gml_cp *cp = NULL;
    if (ok) {
        cp = make_runner(&r, msg, sizeof msg);
        if (!cp) ok = rg_fail(&e, RG_RUNTIME, "%s", msg); /* "rank R: ..." */
    }
    /* 4. the input, from rank 0, each rank copying its rows */
    gml_context *octx = NULL;
    gml_tensor *whole = NULL;
    if (ok) {
        const size_t n = (size_t)(r.B * r.T * r.D);
        octx = gml_init((gml_init_params){.mem_size = 2 * (n * sizeof(float) + 64 + gml_tensor_overhead()) + 1024});
        whole = octx ? gml_set_name(gml_new_tensor_3d(octx, GML_F32, r.B, r.T, r.D), "x") : NULL;
        step = whole != NULL;
        if (!step) snprintf(msg, sizeof msg, "out of memory for the input [%" PRId64 ", %" PRId64 ", %" PRId64 "]",
                            r.B, r.T, r.D);
        if (!gml_mpi_agree(MPI_COMM_WORLD, step, msg, why, sizeof why)) ok = rg_fail(&e, RG_RUNTIME, "%s", why);
    }
    ok = ok && rg_mpi_share_input(&r, xctx, whole, &e);
    if (ok) {
        int64_t t0[2], rows[2];
        const int k = gml_cp_rows(cp, t0, rows);
        const int64_t n_rows = rows[0] + (k > 1 ? rows[1] : 0);
        float *in = gml_cp_input(cp);
        for (int64_t b = 0; ok && b < r.B; b++)
            for (int j = 0, off = 0; j < k; off += (int)rows[j], j++)
                memcpy(in + (b * n_rows + off) * r.D, (float *)whole->data + (b * r.T + t0[j]) * r.D,
                       (size_t)(rows[j] * r.D) * sizeof(float));
    }
    gml_free(xctx);
    /* 5. the runs: one warm-up when timing several */
    const int R = ok ? r.o.repeat : 0;
    double *ms = calloc((size_t)R + 1, sizeof *ms), *cmp = calloc((size_t)R + 1, sizeof *cmp);
    double *wait = calloc((size_t)R + 1, sizeof *wait), *wmax = calloc((size_t)R + 1, sizeof *wmax);
    if (ok && (!ms || !cmp || !wait || !wmax)) ok = rg_fail(&e, RG_RUNTIME, "out of memory");
    double mib = 0;
    for (int i = R > 1 ? -1 : 0; ok && i < R; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = rg_now_ms();
        gml_cp_stats st;
        if (gml_cp_run(cp, r.o.threads, &st, why, sizeof why) != GML_OK) {
            ok = rg_fail(&e, RG_RUNTIME, "%s", why);
            break;
        }
        const double t = rg_now_ms() - t0;
        double w = 0;
        MPI_Reduce(&st.wait_ms, &w, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (i >= 0) {
            ms[i] = t;
            cmp[i] = st.compute_ms;
            wait[i] = st.wait_ms;
            wmax[i] = w;
        }
        mib = st.bytes_sent / (1 << 20);
    }
    /* 6. the output rows to rank 0 */
    if (ok) {
        step = gather(&r, cp, r.rank == 0 ? whole->data : NULL, msg, sizeof msg);
        if (!gml_mpi_agree(MPI_COMM_WORLD, step, msg, why, sizeof why)) ok = rg_fail(&e, RG_RUNTIME, "%s", why);
    }
    if (ok && r.rank == 0) {
        qsort(ms, (size_t)R, sizeof *ms, rg_cmp_double);
        qsort(cmp, (size_t)R, sizeof *cmp, rg_cmp_double);
        qsort(wait, (size_t)R, sizeof *wait, rg_cmp_double);
        qsort(wmax, (size_t)R, sizeof *wmax, rg_cmp_double);
        gml_set_name(whole, "out");
        ok = report(&r, whole, ms, cmp, wait, wmax, mib, &e);
    }
    free(ms);
    free(cmp);
    free(wait);
    free(wmax);
    gml_cp_free(cp);
    gml_free(octx);
    gml_free(r.wctx);
    gml_safetensors_close(r.st);
    return rg_mpi_finish(ok, r.rank, r.P, &e);
}
