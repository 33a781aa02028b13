/* run-graph: ggmlite without writing C. Builds a built-in attention block (or
 * a matmul, or loads a graph file), binds weights and inputs from files (or
 * makes deterministic random ones), computes, and writes, prints, times,
 * profiles and draws the result. `run-graph --help` lists the flags; the
 * pieces are described in rg.h.
 *
 *   run-graph mha --seq 10 --d-model 512 --heads 8 --causal
 *   run-graph gqa --heads 32 --kv-heads 8 --weights w.safetensors --input x.npy --output out.npy
 *   run-graph tools/graphs/relpos.graph --heads 4 --max-rel 3 --repeat 20 --json
 *   run-graph gqa --seq 2048 --d-model 1024 --heads 16 --kv-heads 4 --decode 64
 *
 * The steps, each of which may fail with a one-line message and an exit
 * status (2 usage, 1 anything at run time): parse the flags; load the files
 * and settle the sizes; build the graph; check that the outputs asked for
 * fit it; compute (timed); write every output file, all or none; report. */
#define _POSIX_C_SOURCE 200809L
#include "rg.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

/* Outputs asked for that the graph cannot give, found before computing. */
static bool check_outputs(const rg_opts *o, const rg_model *m, rg_err *e) {
    if ((o->attn_weights || o->attn_svg) && !m->attn)
        return rg_fail(e, RG_RUNTIME, "%s: %s needs a second output (the attention weights); the file has one",
                       o->model, o->attn_weights ? "--attn-weights" : "--attn-svg");
    if (!o->attn_svg) return true;
    const gml_tensor *a = m->attn;
    char s[64];
    gml_format_shape(a, s, sizeof s);
    if (a->type != GML_F32 || a->n_dims != 4)
        return rg_fail(e, RG_RUNTIME, "%s: the attention weights are %s %s, not f32 [B, H, Tq, Tk]", o->model,
                       gml_type_name(a->type), s);
    if (o->attn_batch >= a->ne[0])
        return rg_fail(e, RG_RUNTIME, "--attn-batch %d: the batch has %" PRId64 " elements (weights %s)", o->attn_batch,
                       a->ne[0], s);
    const char *flag[2] = {"--tokens", "--query-tokens"}, *list[2] = {o->tokens, o->query_tokens};
    const char *what[2] = {"keys (Tk)", "queries (Tq)"};
    int64_t want[2] = {a->ne[3], a->ne[2]};
    for (int i = 0; i < 2; i++) {
        if (!list[i]) continue;
        int n = 1;
        for (const char *c = list[i]; *c; c++) n += *c == ',';
        if (n != want[i])
            return rg_fail(e, RG_RUNTIME, "%s has %d labels, but there are %" PRId64 " %s (weights %s)", flag[i], n,
                           want[i], what[i], s);
    }
    return true;
}

/* The sizes of this model: "B=2 T=10 ...". */
static void describe_sizes(const rg_opts *o, const rg_data *d, char *buf, size_t size) {
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < RG_NSYM && k < size; i++)
        if (d->known[i] && rg_size_applies(o->kind, i))
            k += (size_t)snprintf(buf + k, size - k, "%s%s=%" PRId64, k ? " " : "", RG_SYM[i], d->dim[i]);
}

/* The keys every --json report has (rg_json_head): what ran, on what, the
 * output and the time of one run (for --decode: of one token). */
static cJSON *json_head(const rg_opts *o, const rg_data *d, const gml_tensor *out, uint64_t digest,
                        int runs, double median_ms, double min_ms, double flops, size_t peak_bytes) {
    bool shown[RG_NSYM];
    for (int i = 0; i < RG_NSYM; i++) shown[i] = d->known[i] && rg_size_applies(o->kind, i);
    return rg_json_head(&(rg_summary){.model = o->model, .dim = d->dim, .shown = shown, .causal = o->causal,
                                      .out = out, .digest = digest, .threads = o->threads, .runs = runs,
                                      .median_ms = median_ms, .min_ms = min_ms, .flops = flops,
                                      .peak_bytes = peak_bytes, .random_weights = d->random_weights,
                                      .random_inputs = d->random_inputs});
}

static bool report_json(const rg_opts *o, const rg_data *d, const rg_model *m, const rg_timing *t,
                        uint64_t digest, rg_err *e) {
    cJSON *j = json_head(o, d, m->out, digest, t->runs, t->median_ms, t->min_ms, t->flops,
                         rg_tensor_bytes(m->g, false));
    char hex[17];
    if (m->attn) cJSON_AddItemToObject(j, "attn_shape", rg_json_shape(m->attn));
    cJSON_AddNumberToObject(j, "naive_bytes", (double)rg_tensor_bytes(m->g, true));
    cJSON_AddNumberToObject(j, "packed_bytes", (double)gml_graph_packed_bytes(m->g));
    cJSON_AddNumberToObject(j, "nodes", gml_graph_n_nodes(m->g));
    snprintf(hex, sizeof hex, "%016" PRIx64, gml_graph_digest(m->g));
    cJSON_AddStringToObject(j, "graph_digest", hex);
    if (m->grads) cJSON_AddNumberToObject(j, "grads", m->grads->n);
    if (t->node_ms) {
        cJSON *p = cJSON_AddArrayToObject(j, "profile");
        for (int i = 0; i < gml_graph_n_nodes(m->g); i++) {
            const gml_tensor *n = gml_graph_node(m->g, i);
            cJSON *row = cJSON_CreateObject();
            cJSON_AddNumberToObject(row, "node", i);
            cJSON_AddStringToObject(row, "name", n->name);
            cJSON_AddStringToObject(row, "op", gml_op_name(n->op));
            cJSON_AddItemToObject(row, "shape", rg_json_shape(n));
            cJSON_AddNumberToObject(row, "ms", t->node_ms[i]);
            const char *kernel = gml_graph_node_kernel(m->g, i);
            if (kernel) cJSON_AddStringToObject(row, "kernel", kernel);
            cJSON_AddItemToArray(p, row);
        }
    }
    return rg_json_print(j, e);
}

static void report_human(const rg_opts *o, const rg_data *d, const rg_model *m, const rg_timing *t,
                         uint64_t digest) {
    char sizes[256], shape[64];
    describe_sizes(o, d, sizes, sizeof sizes);
    const char *random = d->random_weights ? (d->random_inputs ? ", random weights and inputs" : ", random weights")
                         : d->random_inputs  ? ", random inputs"
                                             : "";
    char opts[160], line[640]; /* each part after the sizes starts ", " */
    snprintf(line, sizeof line, "%s%s%s%s%s", sizes, o->causal ? ", causal" : "",
             d->valid_lens ? ", valid lengths" : "", rg_attn_options(o, false, opts, sizeof opts), random);
    /* a graph file that reads no size symbol has no sizes to list */
    const char *l = sizes[0] ? line : line[0] ? line + 2 : "no sizes";
    printf("%s: %s\n", o->model, l);
    printf("output  %s  xxh3 %016" PRIx64 "\n", gml_format_shape(m->out, shape, sizeof shape), digest);
    printf("time    %.3f ms", t->median_ms);
    if (t->runs > 1) printf(" median, %.3f ms min of %d runs", t->min_ms, t->runs);
    printf(" (%d thread%s, %s)", o->threads, o->threads == 1 ? "" : "s", gml_isa_name(gml_get_isa()));
    if (t->median_ms > 0 && t->flops > 0) printf(", %.2f GFLOP/s", t->flops / (t->median_ms * 1e6));
    printf("\n");
    rg_print_memory(m->g);
    if (m->grads) {
        char line[1024];
        rg_grads_describe(m->grads, o->grads, line, sizeof line);
        printf("grads   %s\n", line);
    }
}

/* --decode's report: --json, or the summary. */
static bool report_decode(const rg_opts *o, const rg_data *d, const rg_decode *r, uint64_t digest,
                          rg_err *e) {
    char hex[17], sizes[256], shape[64];
    snprintf(hex, sizeof hex, "%016" PRIx64, digest);
    const double tps = r->median_ms > 0 ? 1e3 / r->median_ms : 0;
    if (o->json) { /* the times and flops are those of one decoded token */
        cJSON *j = json_head(o, d, r->out, digest, r->runs, r->median_ms, r->min_ms, r->flops,
                             r->peak_bytes);
        cJSON_AddNumberToObject(j, "prompt_tokens", (double)r->prompt);
        cJSON_AddNumberToObject(j, "decode_tokens", (double)r->tokens);
        cJSON_AddNumberToObject(j, "max_len", (double)r->max_len);
        cJSON_AddNumberToObject(j, "prompt_ms", r->prompt_ms);
        cJSON_AddNumberToObject(j, "ms_per_token", r->median_ms);
        cJSON_AddNumberToObject(j, "min_ms_per_token", r->min_ms);
        cJSON_AddNumberToObject(j, "tokens_per_s", tps);
        cJSON_AddNumberToObject(j, "cache_bytes", (double)r->cache_bytes);
        cJSON_AddStringToObject(j, "cache_dtype", gml_type_name(o->cache_dtype));
        cJSON_AddNumberToObject(j, "step_nodes", r->step_nodes);
        return rg_json_print(j, e);
    }
    describe_sizes(o, d, sizes, sizeof sizes);
    const char *random = d->random_weights ? (d->random_inputs ? ", random weights and inputs" : ", random weights")
                         : d->random_inputs  ? ", random inputs"
                                             : "";
    char opts[160];
    printf("%s: %s, causal%s%s; decoding %" PRId64 " tokens after a prompt of %" PRId64 "\n", o->model, sizes,
           rg_attn_options(o, false, opts, sizeof opts), random, r->tokens, r->prompt);
    printf("output  %s  xxh3 %s  (the decoded tokens)\n", gml_format_shape(r->out, shape, sizeof shape), hex);
    printf("prompt  %" PRId64 " tokens in %.3f ms (one step)\n", r->prompt, r->prompt_ms);
    printf("decode  %.1f tokens/s, %.3f ms/token", tps, r->median_ms);
    if (r->runs > 1) printf(" median, %.3f min of %d runs", r->min_ms, r->runs);
    printf(" (%d thread%s, %s), a step graph of %d nodes built once\n", o->threads, o->threads == 1 ? "" : "s",
           gml_isa_name(gml_get_isa()), r->step_nodes);
    printf("memory  KV cache %.2f MiB (K and V %s [B, G, %" PRId64 ", d_k])\n", (double)r->cache_bytes / (1 << 20),
           gml_type_name(o->cache_dtype), r->max_len);
    return true;
}

/* Checks a result and, given digest, hashes it, in logical C order: its own
 * data when contiguous, else one dense copy (rg_dense) for both. An f32
 * result that holds NaN or an infinity is an error, not an output: the
 * message names the first such element and how to find the node that made
 * it. */
static bool check_result(const rg_opts *o, const gml_tensor *t, const char *what, uint64_t *digest,
                         rg_err *e) {
    size_t n_bytes = gml_nbytes(t);
    const bool own = gml_is_contiguous(t); /* no copy of a [B, H, T, S] result */
    void *copy = own ? NULL : rg_dense(t, &n_bytes);
    const void *bytes = own ? t->data : copy;
    if (!bytes) return rg_fail(e, RG_RUNTIME, "out of memory");
    int64_t bad = 0, first = 0;
    if (t->type == GML_F32) {
        const float *v = bytes;
        for (int64_t i = 0; i < gml_nelements(t); i++)
            if (!isfinite(v[i]) && !bad++) first = i;
    }
    if (digest) *digest = XXH3_64bits(bytes, n_bytes);
    const float first_v = bad ? ((const float *)bytes)[first] : 0;
    free(copy);
    if (!bad) return true;
    int64_t idx[4] = {0}; /* first's index, outermost first */
    for (int d = 3; d >= 4 - t->n_dims; d--) {
        idx[d] = first % t->ne[d];
        first /= t->ne[d];
    }
    char shape[64], at[64];
    size_t k = 0;
    for (int d = 4 - t->n_dims; d < 4; d++)
        k += (size_t)snprintf(at + k, sizeof at - k, "%s%" PRId64, k ? "," : "", idx[d]);
    return rg_fail(e, RG_RUNTIME,
                   "%s %s holds %" PRId64 " non-finite value%s, the first %s at [%s]; the inputs or "
                   "weights may hold NaN or inf%s",
                   what, gml_format_shape(t, shape, sizeof shape), bad, bad == 1 ? "" : "s",
                   isnan(first_v) ? "NaN" : first_v > 0 ? "inf" : "-inf", at,
                   o->nan_trap ? "" : " (--nan-trap names the first node that makes one)");
}

int main(int argc, char **argv) {
    rg_opts o;
    rg_err e = {0};
    rg_data d = {0};
    rg_model m = {0};
    rg_timing t = {0};
    rg_decode dec = {0};
    uint64_t digest = 0;
    /* Outputs are staged in temporary files: past `ulimit -f` a write fails
     * with EFBIG and the run cleans up as for any error (SIGXFSZ ignored, as
     * POSIX allows); killed by another signal, the handler removes them and
     * the process still dies of it. */
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigemptyset(&ign.sa_mask);
    sigaction(SIGXFSZ, &ign, NULL);
    gml_cleanup_on_signals();
    bool ok = rg_parse_args(argc, argv, &o, &e); /* every mode's flags */
    if (o.mode == RG_MODE_HEADS || o.mode == RG_MODE_CONTEXT || o.mode == RG_MODE_CONTEXT_DECODE) {
        const int status = rg_parallel_main(argc, argv, &o, ok, &e); /* rg_mpi.c */
        rg_opts_free(&o);
        return status;
    }
    if (ok && o.help) rg_print_help(stdout, o.mode);
    if (ok && !o.done) { /* the threads (default: all cores) and the ISA, for one process */
        if (!o.threads) {
            long n = sysconf(_SC_NPROCESSORS_ONLN);
            o.threads = n < 1 ? 1 : n > 512 ? 512 : (int)n;
        }
        gml_isa isa;
        if (o.isa && gml_isa_from_name(o.isa, &isa) && gml_set_isa(isa) != GML_OK)
            ok = rg_fail(&e, RG_RUNTIME, "--isa %s: this CPU does not have it", o.isa);
    }
    if (ok && !o.done && o.mode == RG_MODE_TRAIN) {
        const int status = rg_train_main(&o); /* rg_train.c */
        rg_opts_free(&o);
        return status;
    }
    if (ok && !o.done && o.mode == RG_MODE_LAYER) {
        const int status = rg_layers_main(&o); /* rg_layers.c */
        rg_opts_free(&o);
        return status;
    }
    if (ok && !o.done) {
        ok = rg_data_load(&o, &d, &e);
        if (ok && o.decode) { /* a prompt, then tokens one at a time through a KV cache */
            gml_tensor view;
            ok = rg_decode_run(&o, &d, &dec, &e) &&
                 check_result(&o, rg_output_view(&o, dec.out, &view), "the output", &digest, &e);
            m.out = dec.out; /* --output: the decoded tokens */
            ok = ok && rg_write_outputs(&o, &d, &m, &e) && report_decode(&o, &d, &dec, digest, &e);
            m.out = NULL;
        } else if (ok) {
            ok = rg_model_build(&o, &d, &m, &e) && check_outputs(&o, &m, &e);
            if (ok && o.print_graph) gml_graph_print(m.g, o.json ? stderr : stdout);
            ok = ok && rg_run(&o, &m, &t, &e);
            gml_tensor view; /* --seq-first: the output as written, [T, B, D] */
            for (int i = 0; ok && i < m.n_outs; i++)
                ok = check_result(&o, i ? gml_graph_tensor(m.g, m.outs[i])
                                        : rg_output_view(&o, gml_graph_tensor(m.g, m.outs[i]), &view),
                                  /* planned: the graph's data */
                                  i ? "the attention weights" : "the output",
                                  i ? NULL : &digest, &e);
            ok = ok && rg_write_outputs(&o, &d, &m, &e);
            if (ok && o.profile) rg_print_profile(o.json ? stderr : stdout, &m, &t);
            if (ok && o.json) ok = report_json(&o, &d, &m, &t, digest, &e);
            else if (ok) report_human(&o, &d, &m, &t, digest);
        }
    }
    free(t.node_ms);
    rg_decode_free(&dec);
    rg_model_free(&m);
    rg_data_free(&d);
    rg_opts_free(&o);
    if (ok) return 0;
    fprintf(stderr, "run-graph: %s\n", e.msg);
    return e.status ? e.status : RG_RUNTIME;
}
