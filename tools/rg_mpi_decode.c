/* run-graph mha|gqa --decode N --parallel context: decoding with the KV cache
 * sharded by position over the ranks of an MPI job (ggmlite/mpi.h, "context-
 * parallel decoding"), started by mpirun:
 *
 *   mpirun -np 4 run-graph gqa --heads 16 --kv-heads 4 --weights w.safetensors \
 *       --input prompt.npy --decode 64 --output y.npy --parallel context
 *
 * The flags are the single-process run-graph's (rg_parse_args checks them as for mha and gqa), plus
 * --cache-per-rank C; the output is the single-process --decode's: the N
 * decoded tokens' outputs [B, N, D]. Rank r's shard holds positions
 * [r C, (r+1) C) (default C = ceil((T + N) / P): every shard full at the end).
 *
 * Rank 0 reads the prompt (--input, or the random one) and sends each rank
 * its prompt rows and the last prompt row; every rank maps the weights
 * (replicated: each reads all of W_q, its K/V rows' W_k, W_v). The prompt is
 * one step per rank (its rows' K and V written, the last row's query
 * attended); then per token: rank 0 broadcasts the token's input x [B, 1, D]
 * (the previous output), every rank projects q, the rank holding the
 * position projects and writes K and V, every rank attends its shard, the
 * partials are gathered to rank 0 (rank order), which merges them, applies
 * W_o and has the output. After each step that can fail on one rank, a
 * status exchange (gml_mpi_agree): a fault is an error on every rank, not a
 * hang. rg_parallel_main (rg_mpi.c) hands the options here for --parallel
 * context with --decode. */
#define _POSIX_C_SOURCE 200809L
#include "rg_mpi.h"

#include <ggmlite/mpi.h>

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include <xxhash.h>

/* ---- one rank's state ------------------------------------------------------------ */

typedef struct drun {
    rg_opts o;
    rg_data d;
    int rank, P;
    int64_t B, T, D, H, G, N, C;
    int64_t n_rows; /* prompt rows this rank holds */
    gml_attn_weights w;
    gml_attn_config cfg;
    gml_kv_shard *shard;
    gml_context *dctx, *gctx; /* data (inputs, partials, output), graphs (no_alloc) */
    gml_tensor *xr;           /* [B, n_rows + 1, D]: the prompt rows held, then the last row */
    gml_tensor *x1;           /* [B, 1, D]: a decode step's input */
    gml_tensor *parts;        /* rank 0: [P B, H, 1, d_k + 2] */
    gml_tensor *out;          /* rank 0: [B, N, D], the decoded tokens */
    float *first;             /* rank 0: [B, D], the prompt's last output */
    gml_kv_shard_step sp, so, sr; /* prompt, own (writes the token), read */
    gml_tensor *pp, *po, *pr, *y;
    gml_graph *gp, *go, *gr, *gy;
    double prompt_ms;
} drun;

/* Rank 0 loads the input and weights; the others the weights at rank 0's sizes. */
static bool load(drun *r, char *msg, size_t size) {
    rg_err e = {0};
    bool ok;
    if (r->rank == 0) {
        ok = rg_data_load(&r->o, &r->d, &e);
    } else {
        rg_opts o = r->o;
        o.weights = rg_mpi_weights_of(o.weights, r->rank);
        o.input = NULL; /* rank 0's rows come by message; a one-row random x here */
        const int64_t dims[5] = {r->B, 1, r->D, r->H, r->G};
        const int syms[5] = {RG_B, RG_T, RG_D, RG_H, RG_G};
        for (int i = 0; i < 5; i++)
            if (rg_size_applies(o.kind, syms[i])) {
                o.dim[syms[i]] = dims[i];
                o.dim_given[syms[i]] = true;
            }
        ok = rg_data_load(&o, &r->d, &e);
    }
    if (!ok) snprintf(msg, size, "%s", e.msg);
    return ok;
}

/* The weights bound, the config, the shard's capacity checked. */
static bool setup(drun *r, char *msg, size_t size) {
    char err[1024];
    rg_err e = {0};
    const rg_opts *o = &r->o;
    const char *file = o->weights ? o->weights : "the random weights";
    if (gml_attn_weights_find(r->d.wctx, &r->w, err, sizeof err) != GML_OK)
        return snprintf(msg, size, "%s: %s", file, err), false;
    if (!rg_attn_sinks_asked(o->sinks, &r->w, r->d.wctx, file, &e) || !rg_check_unused_weights(o, &r->d, NULL, &r->w, &e))
        return snprintf(msg, size, "%s", e.msg), false;
    if (r->H < 1 || r->D % r->H)
        return snprintf(msg, size, "--heads %" PRId64 " does not divide D = %" PRId64, r->H, r->D), false;
    r->cfg = rg_attn_config(o); /* causal bottom-right: rg_parse_args set it for --decode */
    r->cfg.dims = (gml_attn_dims){.d_model = r->D, .n_heads = (int)r->H, .n_kv_heads = (int)r->G};
    r->cfg.graph.impl = GML_ATTN_FUSED;
    const int64_t need = r->T + r->N;
    if (!r->C) r->C = (need + r->P - 1) / r->P;
    if (need > r->C * r->P)
        return snprintf(msg, size, "--decode %" PRId64 " after a prompt of %" PRId64 " tokens needs %"
                        PRId64 " cache positions, but the sharded cache holds %d rank%s x %" PRId64
                        " (--cache-per-rank) = %" PRId64 ": give more ranks or a larger "
                        "--cache-per-rank", r->N, r->T, need, r->P, r->P == 1 ? "" : "s", r->C,
                        r->C * r->P), false;
    return true;
}

static bool graph_of(drun *r, gml_tensor *t, gml_graph **g, const char *what, char *msg, size_t size) {
    *g = t ? gml_build_graph(r->gctx, &t, 1) : NULL;
    if (!*g)
        return snprintf(msg, size, "%s%s%s", r->o.weights ? r->o.weights : "", r->o.weights ? ": " : "",
                        gml_last_error(r->gctx)), false;
    if (gml_graph_plan(*g, NULL) != GML_OK)
        return snprintf(msg, size, "placing the %s graph: %s", what, gml_graph_error(*g)), false;
    gml_graph_set_nan_trap(*g, r->o.nan_trap);
    return true;
}

/* The shard and this rank's graphs: the prompt step, a decode step writing the
 * token (own) or not (read); rank 0 also the merge. */
static bool build(drun *r, char *msg, size_t size) {
    char err[1024];
    r->shard = gml_kv_shard_new((gml_kv_shard_params){.batch = r->B, .n_kv_heads = (int)r->G,
                                                      .d_k = r->D / r->H, .capacity = r->C,
                                                      .type = r->o.cache_dtype, .rank = r->rank,
                                                      .n_ranks = r->P},
                                err, sizeof err);
    if (!r->shard) return snprintf(msg, size, "%s", err), false;
    r->n_rows = gml_kv_shard_owned(r->shard, r->T);
    const int64_t B = r->B, D = r->D, H = r->H, dk = D / H;
    const size_t floats = (size_t)(B * (r->n_rows + 2) * D) +
                          (r->rank == 0 ? (size_t)(r->P * B * H * (dk + 2) + B * r->N * D + B * D) : 0);
    if (!rg_check_memory(4 * floats, "the inputs and outputs", &(rg_err){0}))
        return snprintf(msg, size, "the inputs and outputs (%zu bytes) exceed the memory", 4 * floats), false;
    r->dctx = gml_init((gml_init_params){.mem_size = 4 * floats + 8 * (gml_tensor_overhead() + 64) + 4096});
    r->gctx = gml_init((gml_init_params){.mem_size = (size_t)(512 + 4 * r->P) * gml_tensor_overhead(), .no_alloc = true});
    if (!r->dctx || !r->gctx) return snprintf(msg, size, "out of memory for the graphs"), false;
    r->xr = gml_set_name(gml_new_tensor_3d(r->dctx, GML_F32, B, r->n_rows + 1, D), "x");
    r->x1 = gml_set_name(gml_new_tensor_3d(r->dctx, GML_F32, B, 1, D), "x_token");
    gml_set_flags(r->xr, GML_FLAG_INPUT);
    gml_set_flags(r->x1, GML_FLAG_INPUT);
    gml_context *c = r->gctx;
    /* the prompt: rows [0, n_rows) written, row n_rows (the last prompt row) attended */
    r->sp = gml_kv_shard_step_new(c, r->shard, r->n_rows, 1);
    gml_tensor *rows = r->n_rows ? gml_slice(c, r->xr, 1, 0, r->n_rows) : NULL;
    r->pp = gml_shard_attn_partial(c, &r->cfg, &r->w, rows, gml_slice(c, r->xr, 1, r->n_rows, 1), &r->sp);
    if (!graph_of(r, r->pp, &r->gp, "prompt", msg, size)) return false;
    /* one token: written here (the rank holding its position) or not */
    r->so = gml_kv_shard_step_new(c, r->shard, 1, 1);
    r->po = gml_shard_attn_partial(c, &r->cfg, &r->w, r->x1, r->x1, &r->so);
    if (!graph_of(r, r->po, &r->go, "decode", msg, size)) return false;
    r->sr = gml_kv_shard_step_new(c, r->shard, 0, 1);
    r->pr = gml_shard_attn_partial(c, &r->cfg, &r->w, NULL, r->x1, &r->sr);
    if (!graph_of(r, r->pr, &r->gr, "decode", msg, size)) return false;
    if (r->rank == 0) {
        r->parts = gml_set_name(gml_new_tensor_4d(r->dctx, GML_F32, r->P * B, H, 1, dk + 2), "parts");
        r->out = gml_set_name(gml_new_tensor_3d(r->dctx, GML_F32, B, r->N, D), "out");
        r->first = r->out ? malloc((size_t)(B * D) * sizeof *r->first) : NULL;
        if (!r->parts || !r->out || !r->first) return snprintf(msg, size, "out of memory for the output"), false;
        gml_set_flags(r->parts, GML_FLAG_INPUT);
        r->y = gml_shard_attn_out(c, &r->cfg, &r->w, r->parts, r->P);
        if (!graph_of(r, r->y, &r->gy, "merge", msg, size)) return false;
    }
    return true;
}

/* Rank q's prompt rows [a, a + n) (n may be 0). */
static void prompt_rows(const drun *r, int q, int64_t *a, int64_t *n) {
    const int64_t f = (int64_t)q * r->C, e = f + r->C;
    *a = f < r->T ? f : r->T;
    *n = (e < r->T ? e : r->T) - *a;
}

/* Rank 0 sends each rank its prompt rows and the last row, [B, n + 1, D]: the buffer
 * first, then a status exchange (a rank waiting in MPI_Recv for a message that will
 * not come would hang), then the messages. */
static bool send_prompt(drun *r, char *out, size_t size) {
    const int64_t B = r->B, T = r->T, D = r->D;
    char msg[256] = "";
    float *buf = NULL;
    size_t most = 0;
    for (int q = 1; q < r->P && r->rank == 0; q++) {
        int64_t a, n;
        prompt_rows(r, q, &a, &n);
        const size_t cnt = (size_t)(B * (n + 1) * D);
        most = cnt > most ? cnt : most;
    }
    bool ok = true;
    if (most > INT32_MAX) {
        snprintf(msg, sizeof msg, "a rank's prompt rows pass MPI's int count");
        ok = false;
    } else if (most && !(buf = malloc(most * sizeof *buf))) {
        snprintf(msg, sizeof msg, "out of memory for the prompt rows");
        ok = false;
    }
    if (!gml_mpi_agree(MPI_COMM_WORLD, ok, msg, out, size)) {
        free(buf);
        return false;
    }
    if (r->rank != 0) {
        const int rc = MPI_Recv(r->xr->data, (int)(B * (r->n_rows + 1) * D), MPI_FLOAT, 0, 1, MPI_COMM_WORLD,
                                MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) snprintf(out, size, "receiving the prompt rows: MPI error %d", rc);
        return rc == MPI_SUCCESS;
    }
    const gml_tensor *x = r->d.x; /* [B, T, D], any strides (--seq-first: a view) */
    for (int q = r->P - 1; q >= 0 && ok; q--) { /* rank 0's own last, into its xr */
        int64_t a, n;
        prompt_rows(r, q, &a, &n);
        float *dst = q == 0 ? r->xr->data : buf;
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i <= n; i++) {
                const int64_t t = i < n ? a + i : T - 1;
                for (int64_t c = 0; c < D; c++)
                    dst[(b * (n + 1) + i) * D + c] = gml_get_f32(x, (const int64_t[]){b, t, c});
            }
        const int rc = q ? MPI_Send(dst, (int)(B * (n + 1) * D), MPI_FLOAT, q, 1, MPI_COMM_WORLD) : MPI_SUCCESS;
        if (rc != MPI_SUCCESS) {
            snprintf(out, size, "sending the prompt rows to rank %d: MPI error %d", q, rc);
            ok = false;
        }
    }
    free(buf);
    return ok;
}

/* The partials to rank 0 and, there, merged: y [B, 1, D]. comm_ms += the gather's time. */
static bool gather_merge(drun *r, gml_graph *g, gml_tensor *part, double *comm_ms, char *msg, size_t size) {
    const size_t n = (size_t)(r->B * r->H * (r->D / r->H + 2));
    const double t0 = rg_now_ms();
    if (gml_mpi_gather_f32(MPI_COMM_WORLD, gml_graph_data(g, part), n, r->rank == 0 ? r->parts->data : NULL,
                           0, msg, size) != GML_OK)
        return false;
    *comm_ms += rg_now_ms() - t0;
    if (r->rank != 0) return true;
    if (gml_graph_compute(r->gy, r->o.threads) != GML_OK)
        return snprintf(msg, size, "merging the partials: %s", gml_graph_error(r->gy)), false;
    return true;
}

/* Rank 0: y [B, 1, D] into row i of out (i >= 0) and into x1 (the next input). */
static void take_output(drun *r, int64_t i) {
    const float *y = gml_graph_data(r->gy, r->y);
    float *o = r->out->data, *x = r->x1->data;
    for (int64_t b = 0; b < r->B; b++) {
        if (i >= 0) memcpy(o + (b * r->N + i) * r->D, y + b * r->D, (size_t)r->D * sizeof *y);
        memcpy(x + b * r->D, y + b * r->D, (size_t)r->D * sizeof *y);
    }
}

/* The prompt: every rank writes its rows and attends the last one's query; rank 0's
 * merged output is the first token's input (kept in r->first). */
static bool prompt(drun *r, char *out, size_t size) {
    char msg[1024] = "";
    double comm = 0, t0 = rg_now_ms();
    bool ok = gml_kv_shard_step_compute(&r->sp, r->gp, r->T, r->o.threads, msg, sizeof msg) == GML_OK;
    if (!gml_mpi_agree(MPI_COMM_WORLD, ok, msg, out, size)) return false;
    ok = gather_merge(r, r->gp, r->pp, &comm, msg, sizeof msg);
    if (!gml_mpi_agree(MPI_COMM_WORLD, ok, msg, out, size)) return false;
    if (r->rank == 0) {
        take_output(r, -1);
        memcpy(r->first, r->x1->data, (size_t)(r->B * r->D) * sizeof *r->first);
    }
    r->prompt_ms = rg_now_ms() - t0;
    return true;
}

/* The N tokens once, from the prompt's end, per token on rank 0: ms (wall), comm_ms
 * (moving: the broadcast of x, the gather of the partials) and wait_ms (the status
 * exchange after each rank's step: waiting for the slowest rank, and one allreduce).
 * A failure of rank 0's merge is told at the next exchange. */
static bool decode(drun *r, double *ms, double *comm_ms, double *wait_ms, char *out, size_t size) {
    char msg[1024] = "";
    gml_kv_shard_truncate(r->shard, r->T);
    if (r->rank == 0) memcpy(r->x1->data, r->first, (size_t)(r->B * r->D) * sizeof *r->first);
    double comm = 0, wait = 0;
    bool mine = true; /* rank 0's merge of the step before */
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = rg_now_ms();
    for (int64_t i = 0; i < r->N; i++) {
        double c0 = rg_now_ms();
        int rc = MPI_Bcast(r->x1->data, (int)(r->B * r->D), MPI_FLOAT, 0, MPI_COMM_WORLD);
        comm += rg_now_ms() - c0;
        bool ok = mine && rc == MPI_SUCCESS;
        if (rc != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI_Bcast: MPI error %d", rc);
        const bool own = gml_kv_shard_owned(r->shard, 1) == 1; /* this rank writes the token's K, V */
        if (ok)
            ok = gml_kv_shard_step_compute(own ? &r->so : &r->sr, own ? r->go : r->gr, 1, r->o.threads, msg,
                                           sizeof msg) == GML_OK;
        c0 = rg_now_ms();
        if (!gml_mpi_agree(MPI_COMM_WORLD, ok, msg, out, size)) return false;
        wait += rg_now_ms() - c0;
        mine = gather_merge(r, own ? r->go : r->gr, own ? r->po : r->pr, &comm, msg, sizeof msg);
        if (mine && r->rank == 0) take_output(r, i);
    }
    const double c0 = rg_now_ms();
    if (!gml_mpi_agree(MPI_COMM_WORLD, mine, msg, out, size)) return false;
    wait += rg_now_ms() - c0;
    *ms = (rg_now_ms() - t0) / (double)r->N;
    *comm_ms = comm / (double)r->N;
    *wait_ms = wait / (double)r->N;
    return true;
}

/* --json: the keys of the single process's --decode report (rg_json_head; the
 * times of one token), then the mode's. The steps are several graphs on
 * several ranks: flops, gflops and peak_bytes are null. */
static bool finish_json(const drun *r, uint64_t digest, double ms, double min_ms, double comp, double comm,
                        double wait, rg_err *e) {
    bool shown[RG_NSYM];
    for (int i = 0; i < RG_NSYM; i++) shown[i] = r->d.known[i] && rg_size_applies(r->o.kind, i);
    cJSON *j = rg_json_head(&(rg_summary){
        .model = r->o.model, .dim = r->d.dim, .shown = shown, .causal = r->o.causal, .out = r->out,
        .digest = digest, .threads = r->o.threads, .runs = r->o.repeat, .median_ms = ms, .min_ms = min_ms,
        .random_weights = r->d.random_weights, .random_inputs = r->d.random_inputs});
    if (!j) return rg_fail(e, RG_RUNTIME, "out of memory");
    cJSON_ReplaceItemInObject(j, "flops", cJSON_CreateNull());
    cJSON_ReplaceItemInObject(j, "gflops", cJSON_CreateNull());
    cJSON_ReplaceItemInObject(j, "peak_bytes", cJSON_CreateNull());
    cJSON_AddNumberToObject(j, "prompt_tokens", (double)r->T);
    cJSON_AddNumberToObject(j, "decode_tokens", (double)r->N);
    cJSON_AddNumberToObject(j, "max_len", (double)(r->P * r->C)); /* the positions of all shards */
    cJSON_AddNumberToObject(j, "prompt_ms", r->prompt_ms);
    cJSON_AddNumberToObject(j, "ms_per_token", ms);
    cJSON_AddNumberToObject(j, "min_ms_per_token", min_ms);
    cJSON_AddNumberToObject(j, "tokens_per_s", ms > 0 ? 1e3 / ms : 0);
    cJSON_AddNumberToObject(j, "cache_bytes", (double)gml_kv_shard_bytes(r->shard) * r->P); /* equal shards */
    cJSON_AddStringToObject(j, "cache_dtype", gml_type_name(r->o.cache_dtype));
    cJSON_AddStringToObject(j, "parallel", "context");
    cJSON_AddNumberToObject(j, "ranks", r->P);
    cJSON_AddNumberToObject(j, "cache_per_rank", (double)r->C);
    cJSON_AddNumberToObject(j, "compute_ms", comp);
    cJSON_AddNumberToObject(j, "comm_ms", comm);
    cJSON_AddNumberToObject(j, "wait_ms", wait);
    return rg_json_print(j, e);
}

/* Rank 0: the output checked, written, reported. */
static bool finish(drun *r, double ms, double min_ms, double comp, double comm, double wait, rg_err *e) {
    const size_t n = (size_t)(r->B * r->N * r->D);
    const float *o = r->out->data;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(o[i]))
            return rg_fail(e, RG_RUNTIME, "the output [%" PRId64 ",%" PRId64 ",%" PRId64 "] holds a "
                           "non-finite value (%g at element %zu); the inputs or weights may hold NaN or inf",
                           r->B, r->N, r->D, o[i], i);
    rg_model m = {.out = r->out};
    if (!rg_write_outputs(&r->o, &r->d, &m, e)) return false;
    gml_tensor view;
    const gml_tensor *v = rg_output_view(&r->o, r->out, &view);
    size_t n_bytes = 0;
    void *dense = rg_dense(v, &n_bytes); /* the bytes as written (--seq-first: [N, B, D]); the shape
                                           * printed is [B, N, D], as the single process prints it */
    if (!dense) return rg_fail(e, RG_RUNTIME, "out of memory");
    const uint64_t digest = XXH3_64bits(dense, n_bytes);
    free(dense);
    if (r->o.json) return finish_json(r, digest, ms, min_ms, comp, comm, wait, e);
    char shape[64], opts[160];
    const bool rw = r->d.random_weights, ri = r->d.random_inputs;
    printf("%s: B=%" PRId64 " T=%" PRId64 " D=%" PRId64 " H=%" PRId64 " G=%" PRId64 ", causal%s%s; decoding %"
           PRId64 " tokens after a prompt of %" PRId64 "\n", r->o.model, r->B, r->T, r->D, r->H, r->G,
           rg_attn_options(&r->o, false, opts, sizeof opts),
           rw ? (ri ? ", random weights and inputs" : ", random weights") : ri ? ", random inputs" : "", r->N, r->T);
    printf("output  %s  xxh3 %016" PRIx64 "  (the decoded tokens)\n", gml_format_shape(r->out, shape, sizeof shape), digest);
    printf("prompt  %" PRId64 " tokens in %.3f ms (each rank writes its rows, attends the last one)\n", r->T,
           r->prompt_ms);
    printf("decode  %.1f tokens/s, %.3f ms/token", ms > 0 ? 1e3 / ms : 0, ms);
    if (r->o.repeat > 1) printf(" median, %.3f min of %d runs", min_ms, r->o.repeat);
    printf(" (%d rank%s x %d thread%s, %s)\n", r->P, r->P > 1 ? "s" : "", r->o.threads,
           r->o.threads == 1 ? "" : "s", gml_isa_name(gml_get_isa()));
    printf("shards  %d x %" PRId64 " positions (K and V %s [B, G, %" PRId64 ", d_k], %.2f MiB per rank), "
           "holding", r->P, r->C, gml_type_name(r->o.cache_dtype), r->C,
           (double)gml_kv_shard_bytes(r->shard) / (1 << 20));
    for (int q = 0; q < r->P; q++) {
        const int64_t f = (int64_t)q * r->C, L = r->T + r->N;
        printf("%s%" PRId64, q ? "+" : " ", f >= L ? 0 : (L - f < r->C ? L - f : r->C));
    }
    printf(" of the %" PRId64 " positions\n", r->T + r->N);
    printf("comm    rank 0 per token: %.3f ms computing (its partial, the merge, W_o), %.3f ms moving (x "
           "broadcast, partials of %.2f KiB per rank gathered), %.3f ms waiting for the slowest rank "
           "(status exchange) (medians)\n", comp, comm, (double)(r->B * r->H * (r->D / r->H + 2) * 4) / 1024,
           wait);
    return true;
}

static void free_run(drun *r) {
    gml_graph *g[4] = {r->gp, r->go, r->gr, r->gy};
    for (int i = 0; i < 4; i++)
        if (g[i]) gml_graph_free(g[i]);
    gml_free(r->gctx);
    gml_free(r->dctx);
    gml_kv_shard_free(r->shard);
    free(r->first);
    rg_data_free(&r->d);
}

int rg_mpi_decode_main(int argc, char **argv, const rg_opts *g, bool parsed, const rg_err *pe) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    drun r = {.o = *g, .C = g->cache_per_rank}; /* the options stay the caller's to free */
    rg_err e = parsed ? (rg_err){0} : *pe;
    MPI_Comm_rank(MPI_COMM_WORLD, &r.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &r.P);
    bool ok = parsed; /* the same on every rank: the single process's flags and checks */
    if (ok && r.o.help) {
        if (r.rank == 0) rg_print_help(stdout, RG_MODE_CONTEXT_DECODE);
        MPI_Finalize();
        return 0;
    }
    if (ok && !r.o.decode) ok = rg_fail(&e, RG_USAGE, "--parallel context: give --decode N");
    if (ok && r.o.max_len)
        ok = rg_fail(&e, RG_USAGE, "--max-len: with --parallel context the cache is sharded: give "
                     "--cache-per-rank C (positions per rank)");
    char msg[1536] = "", why[1600] = "";
    if (ok && !r.o.threads) r.o.threads = rg_mpi_default_threads();
    /* 1. the ISA (machines may differ); rank 0 reads the prompt and weights; sizes to all */
    bool step = true;
    if (ok) step = rg_mpi_set_isa(r.o.isa, msg, sizeof msg);
    if (ok && step && r.rank == 0) step = load(&r, msg, sizeof msg);
    if (ok && !gml_mpi_agree(MPI_COMM_WORLD, step, msg, why, sizeof why)) ok = rg_fail(&e, RG_RUNTIME, "%s", why);
    if (ok) {
        int64_t dims[5] = {0};
        if (r.rank == 0) {
            dims[0] = r.d.x->ne[1];
            dims[1] = r.d.x->ne[2];
            dims[2] = r.d.dim[RG_D];
            dims[3] = r.d.dim[RG_H];
            dims[4] = r.d.dim[RG_G] ? r.d.dim[RG_G] : r.d.dim[RG_H];
        }
        MPI_Bcast(dims, 5, MPI_INT64_T, 0, MPI_COMM_WORLD);
        r.B = dims[0], r.T = dims[1], r.D = dims[2], r.H = dims[3], r.G = dims[4];
        r.N = r.o.decode;
        /* 2. every rank: the weights (mapped or random), the same on every rank (names,
         * shapes, digests), the shard, the graphs */
        step = r.rank == 0 || load(&r, msg, sizeof msg);
        if (!gml_mpi_agree(MPI_COMM_WORLD, step, msg, why, sizeof why)) ok = rg_fail(&e, RG_RUNTIME, "%s", why);
    }
    ok = ok && rg_mpi_weights_agree(r.o.weights ? r.d.wctx : NULL, &e);
    if (ok) {
        step = setup(&r, msg, sizeof msg) && build(&r, msg, sizeof msg);
        if (!gml_mpi_agree(MPI_COMM_WORLD, step, msg, why, sizeof why)) ok = rg_fail(&e, RG_RUNTIME, "%s", why);
    }
    /* 3. the prompt rows, from rank 0 */
    if (ok && !send_prompt(&r, why, sizeof why)) ok = rg_fail(&e, RG_RUNTIME, "%s", why);
    if (ok && !prompt(&r, why, sizeof why)) ok = rg_fail(&e, RG_RUNTIME, "%s", why);
    /* 4. the tokens: one warm-up when timing several */
    const int R = ok ? r.o.repeat : 0;
    double *ms = ok ? calloc(4 * (size_t)R, sizeof *ms) : NULL;
    if (ok && !ms) ok = rg_fail(&e, RG_RUNTIME, "out of memory");
    double *comm = ms ? ms + R : NULL, *wait = ms ? ms + 2 * R : NULL, *comp = ms ? ms + 3 * R : NULL;
    for (int i = R > 1 ? -1 : 0; ok && i < R; i++) {
        double t = 0, c = 0, w = 0;
        if (!decode(&r, &t, &c, &w, why, sizeof why)) ok = rg_fail(&e, RG_RUNTIME, "%s", why);
        if (ok && i >= 0) ms[i] = t, comm[i] = c, wait[i] = w, comp[i] = t - c - w; /* the rest: computing */
    }
    if (ok && r.rank == 0) {
        const double med = rg_median(ms, R), min = ms[0], cm = rg_median(comm, R), wm = rg_median(wait, R);
        ok = finish(&r, med, min, rg_median(comp, R), cm, wm, &e);
    }
    free(ms);
    free_run(&r);
    return rg_mpi_finish(ok, r.rank, r.P, &e);
}
