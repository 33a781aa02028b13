/* run-graph mha|gqa|llama ... --parallel heads: one block split over the
 * ranks of an MPI job (ggmlite/mpi.h), started by mpirun:
 *
 *   mpirun -np 4 run-graph gqa --heads 16 --kv-heads 4 --weights w.safetensors \
 *       --input x.npy --output y.npy --parallel heads
 *
 * Rank 0 reads the input and broadcasts it; every rank maps the weights file,
 * the ranks agree on its tensors (gml_mpi_weights_agree: names, shapes, XXH3
 * digests), and each computes on its share only (views into the mapping):
 * it builds its partial graph, computes it; the partials are summed in rank order on rank 0 (the
 * LLaMA layer: after the attention, then broadcast for the MLP, and after
 * the MLP); rank 0 writes the output and reports. A step that fails on any
 * rank is followed by a status exchange, so every rank stops with "rank R:
 * <cause>" instead of waiting for a partner that will not come.
 *
 * --parallel context is rg_mpi_ring.c's (the prompt split by rows, ring
 * attention) and, with --decode, rg_mpi_decode.c's (decoding with the KV
 * cache sharded by position): rg_parallel_main hands them the options.
 * Built without -DGGMLITE_MPI=ON, --parallel says how to build it. main hands
 * the parsed options here for the --parallel modes (rg_parse_args). */
#define _POSIX_C_SOURCE 200809L
#include "rg.h"

#include <stdlib.h>
#include <string.h>

#ifdef GGMLITE_HAVE_MPI
#include "rg_mpi.h"

#include <inttypes.h>
#include <math.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include <xxhash.h>
#endif

bool rg_parallel_built(const char *mode, rg_err *e) {
#ifdef GGMLITE_HAVE_MPI
    (void)mode, (void)e;
    return true;
#else
    return rg_fail(e, RG_USAGE, "--parallel %s: this run-graph was built without MPI. Build one "
                   "with it (Open MPI: apt-get install openmpi-bin libopenmpi-dev): cmake -S . -B "
                   "build-mpi -DGGMLITE_MPI=ON && cmake --build build-mpi --target run-graph, then "
                   "mpirun -np P build-mpi/tools/run-graph MODEL ... --parallel %s", mode, mode);
#endif
}

#ifdef GGMLITE_HAVE_MPI
static int run_heads(int argc, char **argv, const rg_opts *g, bool parsed, const rg_err *pe);
#endif

int rg_parallel_main(int argc, char **argv, rg_opts *o, bool parsed, const rg_err *e) {
#ifdef GGMLITE_HAVE_MPI
    if (o->mode == RG_MODE_CONTEXT_DECODE) /* the KV cache sharded */
        return rg_mpi_decode_main(argc, argv, o, parsed, e);
    if (o->mode == RG_MODE_CONTEXT) /* the prompt, ring attention */
        return rg_mpi_ring_main(argc, argv, o, parsed, e);
    return run_heads(argc, argv, o, parsed, e);
#else
    (void)argc, (void)argv, (void)o, (void)parsed; /* rg_parallel_built refused the mode */
    fprintf(stderr, "run-graph: %s\n", e->msg);
    return e->status;
#endif
}

#ifdef GGMLITE_HAVE_MPI

const char *const RG_MPI_KIND[3] = {"mha", "gqa", "llama"};
#define KIND RG_MPI_KIND

/* ---- the steps every --parallel mode takes (rg_mpi.h) ---------------------- */

int rg_mpi_default_threads(void) {
    MPI_Comm local;
    int n_local = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
        MPI_Comm_size(local, &n_local);
        MPI_Comm_free(&local);
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return cores / n_local < 1 ? 1 : cores / n_local > 512 ? 512 : (int)(cores / n_local);
}

bool rg_mpi_set_isa(const char *name, char *msg, size_t size) {
    gml_isa isa;
    if (name && gml_isa_from_name(name, &isa) && gml_set_isa(isa) != GML_OK) {
        snprintf(msg, size, "--isa %s: this CPU does not have it", name);
        return false;
    }
    return true;
}

const char *rg_mpi_weights_of(const char *weights, int rank) {
    const char *fault = getenv("GGMLITE_MPI_TEST_FAULT"); /* tests: "R:PATH", rank R reads PATH */
    const char *colon = fault ? strchr(fault, ':') : NULL;
    return weights && colon && atoi(fault) == rank ? colon + 1 : weights;
}

bool rg_mpi_read_x(const char *path, gml_context **xctx, int64_t xdim[3], char *msg, size_t size) {
    *xctx = gml_load_npy(path, "x", msg, size);
    const gml_tensor *x = *xctx ? gml_get_first_tensor(*xctx) : NULL;
    char s[64];
    if (x && (x->type != GML_F32 || x->n_dims != 3))
        snprintf(msg, size, "%s: x is %s %s, expected f32 [B, T, D]", path, gml_type_name(x->type),
                 gml_format_shape(x, s, sizeof s));
    else if (x)
        for (int i = 0; i < 3; i++) xdim[i] = x->ne[i + 1];
    return x && xdim[0];
}

bool rg_mpi_start(int rank, const char *isa, const char *input, gml_context **xctx,
                  int64_t xdim[3], rg_err *e) {
    char msg[1536] = "", why[1600] = "";
    bool step = rg_mpi_set_isa(isa, msg, sizeof msg);
    if (step && rank == 0 && input) step = rg_mpi_read_x(input, xctx, xdim, msg, sizeof msg);
    if (!gml_mpi_agree(MPI_COMM_WORLD, step, msg, why, sizeof why)) return rg_fail(e, RG_RUNTIME, "%s", why);
    MPI_Bcast(xdim, 3, MPI_INT64_T, 0, MPI_COMM_WORLD);
    return true;
}

bool rg_mpi_weights_agree(const gml_context *wctx, rg_err *e) {
    char why[1600];
    if (gml_mpi_weights_agree(MPI_COMM_WORLD, wctx, why, sizeof why) != GML_OK)
        return rg_fail(e, RG_RUNTIME, "%s", why);
    return true;
}

int rg_mpi_finish(bool ok, int rank, int n_ranks, const rg_err *e) {
    /* Every rank knows the cause and says it (usage errors, the same everywhere, once) before
     * MPI_Finalize, which waits for all: mpirun ends the job at the first non-zero exit. */
    if (!ok && rank == 0)
        fprintf(stderr, "run-graph: %s\n", e->msg);
    else if (!ok && e->status == RG_RUNTIME)
        fprintf(stderr, "run-graph (rank %d of %d): %s\n", rank, n_ranks, e->msg);
    fflush(stderr);
    MPI_Finalize();
    return ok ? 0 : e->status ? e->status : RG_RUNTIME;
}

/* The mode's options from the parse (rg_parse_args), and the checks that
 * depend on the model. */
static bool options(const rg_opts *g, bool context, popts *o, rg_err *e) {
    *o = (popts){.kind = strcmp(g->model, "llama") == 0 ? K_LLAMA : g->kind == RG_GQA ? K_GQA : K_MHA,
                 .weights = g->weights, .input = g->input, .output = g->output, .isa = g->isa,
                 .B = g->dim[RG_B], .T = g->dim[RG_T], .D = g->dim[RG_D], .F = g->ffn,
                 .window = g->window, .H = (int)g->dim[RG_H], .G = (int)g->dim[RG_G],
                 .threads = g->threads, .repeat = g->repeat, .causal = g->causal, .rope = g->rope,
                 .done = g->help, .rope_theta = g->rope_theta, .rms_eps = g->rms_eps,
                 .softcap = g->softcap, .seed = g->seed, .context = context, .sinks = g->sinks,
                 .alibi = g->alibi, .zigzag = g->zigzag, .json = g->json,
                 .nan_trap = g->nan_trap, .non_strict = g->non_strict};
    if (o->done) return true;
    if (o->kind == K_LLAMA && (o->sinks || o->alibi))
        return rg_fail(e, RG_USAGE, "%s is for mha and gqa (llama's sinks come from its weights, "
                       "self_attn.sinks)", o->sinks ? "--sinks" : "--alibi");
    if (o->kind == K_LLAMA && (o->causal || o->rope))
        return rg_fail(e, RG_USAGE, "%s: llama is always causal with rope", o->causal ? "--causal" : "--rope");
    if (o->kind != K_LLAMA && (o->F || o->rms_eps))
        return rg_fail(e, RG_USAGE, "%s is for llama", o->F ? "--ffn" : "--rms-eps");
    if (o->kind == K_MHA && o->G && o->H && o->G != o->H)
        return rg_fail(e, RG_USAGE, "mha: --kv-heads %d differs from --heads %d (use gqa)", o->G, o->H);
    return true;
}

/* ---- one rank's state ------------------------------------------------------------ */


/* Strict, as the single-process run-graph (load_state_dict(strict=True)):
 * every tensor of the file is one the block binds; --non-strict lets the
 * others pass, as there. */
static bool check_all_used(const prun *r, char *msg, size_t size) {
    if (r->o.non_strict) return true;
    const gml_llama_weights *l = &r->lw;
    const gml_tensor *const layer[] = {l->attn_norm, l->wq, l->bq, l->wk, l->bk, l->wv, l->bv,
                                       l->wo, l->bo, l->sinks, l->mlp_norm, l->w_gate, l->b_gate,
                                       l->w_up, l->b_up, l->w_down, l->b_down};
    char list[800] = "";
    int unused = 0;
    for (gml_tensor *t = gml_get_first_tensor(r->wctx); t; t = gml_get_next_tensor(r->wctx, t)) {
        bool ok = rg_attn_weights_hold(&r->aw, t);
        for (size_t j = 0; j < sizeof layer / sizeof *layer && !ok; j++) ok = layer[j] == t;
        if (!ok) rg_names_add(list, sizeof list, unused++, t->name);
    }
    if (!unused) return true;
    rg_names_end(list, sizeof list, unused);
    return snprintf(msg, size, "%s: %d tensor%s not used by %s: %s (strict, as the single-process "
                    "run-graph; another block's weights? --non-strict allows extra tensors)", r->weights,
                    unused, unused == 1 ? "" : "s", KIND[r->o.kind], list), false;
}

/* The file's tensors as headers pointing into the mapping: nothing is read
 * until a graph reads its share. */
static bool map_weights(prun *r, char *msg, size_t size) {
    r->st = gml_safetensors_open(r->weights, msg, size);
    if (!r->st) return false;
    const int n = gml_safetensors_count(r->st);
    r->wctx = gml_init((gml_init_params){.mem_size = (size_t)(n + 8) * gml_tensor_overhead(), .no_alloc = true});
    if (!r->wctx) return snprintf(msg, size, "out of memory"), false;
    for (int i = 0; i < n; i++) {
        if (strlen(gml_safetensors_name(r->st, i)) >= GML_MAX_NAME && r->o.non_strict) continue;
        if (strlen(gml_safetensors_name(r->st, i)) >= GML_MAX_NAME) /* no block's name: strict below */
            return snprintf(msg, size, "%s: tensor '%.120s...' is not used by %s (strict, as the "
                            "single-process run-graph; --non-strict allows extra tensors)", r->weights,
                            gml_safetensors_name(r->st, i), KIND[r->o.kind]), false;
        if (!gml_safetensors_tensor(r->st, i, r->wctx, NULL, msg, size)) return false;
    }
    if (r->o.kind == K_LLAMA) { /* the layer's prefix: none, model.layers.0. or layers.0. */
        static const char *const P[] = {"", "model.layers.0.", "layers.0."};
        for (int p = 0; p < 3; p++) {
            char name[GML_MAX_NAME];
            snprintf(name, sizeof name, "%sinput_layernorm.weight", P[p]);
            if (gml_get_tensor(r->wctx, name)) {
                snprintf(r->prefix, sizeof r->prefix, "%s", P[p]);
                break;
            }
        }
        char err[1024];
        if (gml_llama_weights_find(r->wctx, r->prefix, &r->lw, err, sizeof err) != GML_OK)
            return snprintf(msg, size, "%s: %s", r->weights, err), false;
    } else {
        char err[1024];
        if (gml_attn_weights_find(r->wctx, &r->aw, err, sizeof err) != GML_OK)
            return snprintf(msg, size, "%s: %s", r->weights, err), false;
        /* sinks only with --sinks, as the single process */
        rg_err e = {0};
        if (!rg_attn_sinks_asked(r->o.sinks, &r->aw, r->wctx, r->weights, &e))
            return snprintf(msg, size, "%s", e.msg), false;
    }
    return check_all_used(r, msg, size);
}

/* Sizes from the input (rank 0's, broadcast: xdim), the weights, the flags and
 * the defaults (as run-graph's single-process runs: mha/gqa D 512, llama 256). */
static bool settle(prun *r, const int64_t xdim[3], char *msg, size_t size) {
    const popts *o = &r->o;
    int64_t Dw = 0;
    if (r->wctx) {
        const gml_tensor *t = o->kind == K_LLAMA ? r->lw.attn_norm : r->aw.w_q ? r->aw.w_q : r->aw.in_proj_weight;
        Dw = t ? t->ne[3] : 0;
    }
    if (xdim[2] && Dw && xdim[2] != Dw)
        return snprintf(msg, size, "%s: x has d_model %" PRId64 ", the weights of %s %" PRId64, o->input,
                        xdim[2], r->weights, Dw), false;
    r->D = xdim[2] ? xdim[2] : Dw ? Dw : o->D ? o->D : o->kind == K_LLAMA ? 256 : 512;
    r->B = xdim[0] ? xdim[0] : o->B ? o->B : 2;
    r->T = xdim[1] ? xdim[1] : o->T ? o->T : 10;
    if ((o->D && o->D != r->D) || (o->B && o->B != r->B) || (o->T && o->T != r->T))
        return snprintf(msg, size, "the sizes given (--batch, --seq, --d-model) differ from the %s's [%" PRId64
                        ",%" PRId64 ",%" PRId64 "]", xdim[2] ? "input" : "weights", r->B, r->T, r->D), false;
    r->H = o->H;
    if (!r->H && o->kind == K_LLAMA && r->lw.sinks) r->H = (int)r->lw.sinks->ne[3];
    if (!r->H && r->wctx) return snprintf(msg, size, "%s: give --heads (the weights do not say)", r->weights), false;
    if (!r->H) r->H = 8;
    if (r->D % r->H)
        return snprintf(msg, size, "heads %d do not divide d_model %" PRId64, r->H, r->D), false;
    const int64_t hd = r->D / r->H;
    const gml_tensor *wk = o->kind == K_LLAMA ? r->lw.wk : r->aw.w_k;
    r->G = o->G;
    if (!r->G && wk && wk->n_dims == 2 && wk->ne[2] % hd == 0) r->G = (int)(wk->ne[2] / hd);
    if (!r->G && r->aw.in_proj_weight) r->G = r->H;
    if (!r->G) r->G = o->kind == K_MHA ? r->H : r->H % 4 == 0 ? r->H / 4 : o->kind == K_GQA ? 1 : r->H;
    if (o->kind == K_MHA && r->G != r->H)
        return snprintf(msg, size, "mha: the weights have %d kv heads for %d heads (use gqa)", r->G, r->H), false;
    if (r->G > r->H || r->H % r->G)
        return snprintf(msg, size, "kv heads %d do not divide heads %d", r->G, r->H), false;
    if (o->kind == K_LLAMA) {
        r->F = r->wctx && r->lw.w_gate ? r->lw.w_gate->ne[2] : o->F ? o->F : (8 * r->D / 3 + 15) / 16 * 16;
        if (o->F && r->wctx) return snprintf(msg, size, "--ffn is for random weights; the weights file sets it"), false;
    }
    return true;
}

/* Random weights, named and filled as run-graph's single-process ones. */
static bool random_weights(prun *r, char *msg, size_t size) {
    const int64_t D = r->D, kv = r->G * (D / r->H), F = r->F;
    struct { const char *name; int64_t a, b; } sp[10];
    int n = 0;
    if (r->o.kind == K_LLAMA) {
        sp[n++] = (__typeof__(sp[0])){"input_layernorm.weight", D, 0};
        sp[n++] = (__typeof__(sp[0])){"self_attn.q_proj.weight", D, D};
        sp[n++] = (__typeof__(sp[0])){"self_attn.k_proj.weight", kv, D};
        sp[n++] = (__typeof__(sp[0])){"self_attn.v_proj.weight", kv, D};
        sp[n++] = (__typeof__(sp[0])){"self_attn.o_proj.weight", D, D};
        sp[n++] = (__typeof__(sp[0])){"post_attention_layernorm.weight", D, 0};
        sp[n++] = (__typeof__(sp[0])){"mlp.gate_proj.weight", F, D};
        sp[n++] = (__typeof__(sp[0])){"mlp.up_proj.weight", F, D};
        sp[n++] = (__typeof__(sp[0])){"mlp.down_proj.weight", D, F};
    } else {
        sp[n++] = (__typeof__(sp[0])){"w_q.weight", D, D};
        sp[n++] = (__typeof__(sp[0])){"w_q.bias", D, 0};
        sp[n++] = (__typeof__(sp[0])){"w_k.weight", kv, D};
        sp[n++] = (__typeof__(sp[0])){"w_k.bias", kv, 0};
        sp[n++] = (__typeof__(sp[0])){"w_v.weight", kv, D};
        sp[n++] = (__typeof__(sp[0])){"w_v.bias", kv, 0};
        sp[n++] = (__typeof__(sp[0])){"w_o.weight", D, D};
        sp[n++] = (__typeof__(sp[0])){"w_o.bias", D, 0};
        if (r->o.sinks) sp[n++] = (__typeof__(sp[0])){"sinks", r->H, 0};
    }
    size_t bytes = 4096;
    for (int i = 0; i < n; i++) bytes += gml_tensor_overhead() + 64 + 4 * (size_t)sp[i].a * (size_t)(sp[i].b ? sp[i].b : 1);
    r->wctx = gml_init((gml_init_params){.mem_size = bytes});
    if (!r->wctx) return snprintf(msg, size, "out of memory for the random weights"), false;
    for (int i = 0; i < n; i++) {
        gml_tensor *t = sp[i].b ? gml_new_tensor_2d(r->wctx, GML_F32, sp[i].a, sp[i].b)
                                : gml_new_tensor_1d(r->wctx, GML_F32, sp[i].a);
        if (!t) return snprintf(msg, size, "%s", gml_last_error(r->wctx)), false;
        rg_fill_random(gml_set_name(t, sp[i].name), r->o.seed, true);
    }
    char err[1024];
    gml_status st = r->o.kind == K_LLAMA ? gml_llama_weights_find(r->wctx, "", &r->lw, err, sizeof err)
                                         : gml_attn_weights_find(r->wctx, &r->aw, err, sizeof err);
    if (st != GML_OK) return snprintf(msg, size, "%s", err), false;
    r->random_weights = true;
    return true;
}

/* This rank's graphs: g1 the attention's partial; llama also g2, h = x + att
 * and the MLP's partial. */
static bool build(prun *r, char *msg, size_t size) {
    char err[1024];
    if (gml_tp_share_of(r->H, r->G, r->o.kind == K_LLAMA ? r->F : 0, r->P, r->rank, &r->s, err, sizeof err) != GML_OK)
        return snprintf(msg, size, "%s", err), false;
    const size_t data = 3 * (4 * (size_t)(r->B * r->T * r->D) + 64 + gml_tensor_overhead()) + 4096; /* x, att, out */
    r->dctx = gml_init((gml_init_params){.mem_size = data});
    r->gctx = gml_init((gml_init_params){.mem_size = (size_t)(160 + 48 * r->s.ng) * gml_tensor_overhead(), .no_alloc = true});
    if (!r->dctx || !r->gctx) return snprintf(msg, size, "out of memory for the graph"), false;
    r->x = gml_set_name(gml_new_tensor_3d(r->dctx, GML_F32, r->B, r->T, r->D), "x");
    gml_set_flags(r->x, GML_FLAG_INPUT);
    const bool bias = r->rank == 0; /* the output bias, once */
    gml_context *c = r->gctx;
    if (r->o.kind == K_LLAMA) {
        gml_llama_config lc = {.n_heads = r->H, .n_kv_heads = r->G, .rope_theta = r->o.rope_theta,
                               .rms_eps = r->o.rms_eps, .window = r->o.window, .softcap = r->o.softcap};
        r->att = gml_set_name(gml_new_tensor_3d(r->dctx, GML_F32, r->B, r->T, r->D), "attn_sum");
        gml_set_flags(r->att, GML_FLAG_INPUT);
        r->part = gml_tp_llama_attn(c, &lc, &r->lw, r->x, NULL, &r->s, bias);
        r->h = gml_set_name(gml_add(c, r->x, r->att), "h");
        r->mlp = gml_tp_llama_mlp(c, &lc, &r->lw, r->h, &r->s, bias);
    } else {
        gml_attn_config cfg = {
            .dims = {.d_model = r->D, .n_heads = r->H, .n_kv_heads = r->G},
            .score = {.causal = r->o.causal ? GML_CAUSAL_BOTTOM_RIGHT : GML_CAUSAL_NONE,
                      .window = r->o.window, .softcap = r->o.softcap},
            .pos = {.kind = r->o.rope ? GML_POS_ROPE : GML_POS_NONE, .rope.theta = r->o.rope_theta}};
        r->part = gml_tp_attn(c, &cfg, &r->aw, r->x, NULL, &r->s, bias);
    }
    if (!r->part || (r->o.kind == K_LLAMA && !r->mlp))
        return snprintf(msg, size, "%s%s%s", r->weights ? r->weights : "", r->weights ? ": " : "", gml_last_error(c)), false;
    r->g1 = gml_build_graph(c, &r->part, 1);
    if (r->g1 && r->o.kind == K_LLAMA) r->g2 = gml_build_graph(c, (gml_tensor *[]){r->h, r->mlp}, 2);
    if (!r->g1 || (r->o.kind == K_LLAMA && !r->g2)) return snprintf(msg, size, "%s", gml_last_error(c)), false;
    if (gml_graph_plan(r->g1, NULL) != GML_OK)
        return snprintf(msg, size, "placing the graph's tensors: %s", gml_graph_error(r->g1)), false;
    if (r->g2 && gml_graph_plan(r->g2, NULL) != GML_OK)
        return snprintf(msg, size, "placing the graph's tensors: %s", gml_graph_error(r->g2)), false;
    gml_graph_set_nan_trap(r->g1, r->o.nan_trap); /* a trap names the node; the exchange, the rank */
    if (r->g2) gml_graph_set_nan_trap(r->g2, r->o.nan_trap);
    if (r->rank == 0) {
        r->out = gml_set_name(gml_new_tensor_3d(r->dctx, GML_F32, r->B, r->T, r->D), "out");
        if (!r->out) return snprintf(msg, size, "out of memory for the output: %s", gml_last_error(r->dctx)), false;
    }
    return true;
}

/* A barrier before each sum splits rank 0's time there: waiting for the
 * slowest rank (*wait_ms) and moving and adding the partials (*comm_ms). */
static double wait_all(double *wait_ms) {
    const double t0 = rg_now_ms();
    MPI_Barrier(MPI_COMM_WORLD);
    const double t1 = rg_now_ms();
    *wait_ms += t1 - t0;
    return t1;
}

/* One forward pass over all ranks; rank 0's time in the sums: waiting and moving. */
static bool forward(prun *r, double *comm_ms, double *wait_ms, char *out, size_t size) {
    char msg[1024] = "";
    const size_t n = (size_t)(r->B * r->T * r->D);
    gml_status st = gml_graph_compute(r->g1, r->o.threads);
    if (st != GML_OK) snprintf(msg, sizeof msg, "compute failed: %s", gml_graph_error(r->g1));
    if (!gml_mpi_agree(MPI_COMM_WORLD, st == GML_OK, msg, out, size)) return false;
    float *p = gml_graph_data(r->g1, r->part);
    double t0 = wait_all(wait_ms);
    if (r->o.kind != K_LLAMA) {
        if (gml_mpi_sum_ordered(MPI_COMM_WORLD, p, n, false, out, size) != GML_OK) return false;
        *comm_ms = rg_now_ms() - t0;
        if (r->rank == 0) memcpy(r->out->data, p, n * sizeof *p);
        return true;
    }
    memcpy(r->att->data, p, n * sizeof *p);
    if (gml_mpi_sum_ordered(MPI_COMM_WORLD, r->att->data, n, true, out, size) != GML_OK) return false;
    *comm_ms = rg_now_ms() - t0;
    st = gml_graph_compute(r->g2, r->o.threads);
    if (st != GML_OK) snprintf(msg, sizeof msg, "compute failed: %s", gml_graph_error(r->g2));
    if (!gml_mpi_agree(MPI_COMM_WORLD, st == GML_OK, msg, out, size)) return false;
    float *m = gml_graph_data(r->g2, r->mlp);
    t0 = wait_all(wait_ms);
    if (gml_mpi_sum_ordered(MPI_COMM_WORLD, m, n, false, out, size) != GML_OK) return false;
    *comm_ms += rg_now_ms() - t0;
    if (r->rank == 0) { /* out = h + m, as the layer's last add */
        const float *h = gml_graph_data(r->g2, r->h);
        float *o = r->out->data;
        for (size_t i = 0; i < n; i++) o[i] = h[i] + m[i];
    }
    return true;
}

static void split_text(const prun *r, char *buf, size_t size) {
    size_t k = (size_t)snprintf(buf, size, "query heads");
    for (int i = 0; i < r->P && k < size; i++) {
        int64_t a, n;
        gml_tp_range(r->H, r->P, i, &a, &n);
        k += (size_t)snprintf(buf + k, size - k, "%s%" PRId64, i ? "+" : " ", n);
    }
    int n_kv = 0; /* kv heads projected, over all ranks: G when split */
    for (int i = 0; i < r->P; i++) {
        gml_tp_share s;
        if (gml_tp_share_of(r->H, r->G, 0, r->P, i, &s, NULL, 0) == GML_OK) n_kv += s.ng;
    }
    if (k < size)
        k += n_kv == r->G ? (size_t)snprintf(buf + k, size - k, ", kv heads split")
                          : (size_t)snprintf(buf + k, size - k, ", kv heads replicated (%d "
                                             "projections of %d: a group spans ranks)", n_kv, r->G);
    if (r->o.kind == K_LLAMA && k < size) {
        k += (size_t)snprintf(buf + k, size - k, ", MLP rows");
        for (int i = 0; i < r->P && k < size; i++) {
            int64_t a, n;
            gml_tp_range(r->F, r->P, i, &a, &n);
            k += (size_t)snprintf(buf + k, size - k, "%s%" PRId64, i ? "+" : " ", n);
        }
    }
}

/* --json: the keys of the single process's report (rg_json_head; flops summed
 * over the ranks, peak_bytes the largest rank's: its largest graph's tensor
 * data, as the single process counts it, rg_tensor_bytes), then the mode's. */
static bool finish_json(const prun *r, uint64_t digest, const double *ms, const double *comm,
                        const double *wait, double flops, double peak, rg_err *e) {
    const int64_t dim[RG_NSYM] = {[RG_B] = r->B, [RG_T] = r->T, [RG_S] = r->T, [RG_D] = r->D,
                                  [RG_H] = r->H, [RG_G] = r->G};
    const bool shown[RG_NSYM] = {[RG_B] = true, [RG_T] = true, [RG_S] = r->o.kind != K_LLAMA, /* S = T */
                                 [RG_D] = true, [RG_H] = true, [RG_G] = r->o.kind != K_MHA};
    const int mid = r->o.repeat / 2;
    cJSON *j = rg_json_head(&(rg_summary){
        .model = KIND[r->o.kind], .dim = dim, .shown = shown, .causal = r->o.kind == K_LLAMA || r->o.causal,
        .out = r->out, .digest = digest, .threads = r->o.threads, .runs = r->o.repeat, .median_ms = ms[mid],
        .min_ms = ms[0], .flops = flops, .peak_bytes = (size_t)peak, .random_weights = r->random_weights,
        .random_inputs = r->random_input});
    if (!j) return rg_fail(e, RG_RUNTIME, "out of memory");
    char split[512];
    split_text(r, split, sizeof split);
    if (r->o.kind == K_LLAMA) cJSON_AddNumberToObject(j, "ffn", (double)r->F);
    cJSON_AddStringToObject(j, "parallel", "heads");
    cJSON_AddNumberToObject(j, "ranks", r->P);
    cJSON_AddStringToObject(j, "split", split);
    cJSON_AddNumberToObject(j, "sums", r->o.kind == K_LLAMA ? 2 : 1);
    cJSON_AddNumberToObject(j, "sum_ms", comm[mid]);
    cJSON_AddNumberToObject(j, "wait_ms", wait[mid]);
    return rg_json_print(j, e);
}

/* Rank 0: the output checked, written, reported. */
static bool finish(prun *r, const double *ms, const double *comm, const double *wait, double flops,
                   double peak, rg_err *e) {
    const size_t n = (size_t)(r->B * r->T * r->D);
    const float *o = r->out->data;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(o[i]))
            return rg_fail(e, RG_RUNTIME, "the output holds a non-finite value (%g at element %zu); the "
                           "inputs or weights may hold NaN or inf", o[i], i);
    char err[1024], shape[64], split[512];
    if (r->o.output && gml_save_npy(r->o.output, r->out, err, sizeof err) != GML_OK)
        return rg_fail(e, RG_RUNTIME, "%s", err);
    if (r->o.json)
        return finish_json(r, (uint64_t)XXH3_64bits(o, n * sizeof *o), ms, comm, wait, flops, peak, e);
    printf("%s: B=%" PRId64 " T=%" PRId64 " D=%" PRId64 " H=%d G=%d", KIND[r->o.kind], r->B, r->T, r->D, r->H, r->G);
    if (r->o.kind == K_LLAMA) printf(" F=%" PRId64 ", causal", r->F);
    else if (r->o.causal) printf(", causal");
    if (r->random_weights || r->random_input)
        printf(", random %s", r->random_weights && r->random_input ? "weights and inputs"
                              : r->random_weights                ? "weights"
                                                                 : "inputs");
    split_text(r, split, sizeof split);
    printf("\nparallel heads over %d rank%s: %s\n", r->P, r->P > 1 ? "s" : "", split);
    printf("output  %s  xxh3 %016" PRIx64 "\n", gml_format_shape(r->out, shape, sizeof shape),
           (uint64_t)XXH3_64bits(o, n * sizeof *o));
    printf("time    %.3f ms", ms[r->o.repeat / 2]);
    if (r->o.repeat > 1) printf(" median, %.3f ms min of %d runs", ms[0], r->o.repeat);
    printf(" (%d rank%s x %d thread%s, %s)\n", r->P, r->P > 1 ? "s" : "", r->o.threads,
           r->o.threads == 1 ? "" : "s", gml_isa_name(gml_get_isa()));
    printf("sums    %d of %.3f MiB, rank 0: %.3f ms moving and adding, %.3f ms waiting for the "
           "slowest rank (medians)\n", r->o.kind == K_LLAMA ? 2 : 1, (double)(n * sizeof *o) / (1 << 20),
           comm[r->o.repeat / 2], wait[r->o.repeat / 2]);
    return true;
}

static void free_run(prun *r) {
    gml_graph_free(r->g1);
    gml_graph_free(r->g2);
    gml_free(r->gctx);
    gml_free(r->dctx);
    gml_free(r->wctx);
    gml_safetensors_close(r->st);
}

static int run_heads(int argc, char **argv, const rg_opts *g, bool parsed, const rg_err *pe) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    prun r = {0};
    rg_err e = parsed ? (rg_err){0} : *pe;
    MPI_Comm_rank(MPI_COMM_WORLD, &r.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &r.P);
    bool ok = parsed && options(g, false, &r.o, &e); /* the same on every rank */
    if (ok && r.o.done) {
        if (r.rank == 0) rg_print_help(stdout, RG_MODE_HEADS);
        MPI_Finalize();
        return 0;
    }
    char msg[1536] = "", why[1600] = "";
    /* 1. the ISA, rank 0's input, the weights and sizes (rg_mpi_setup) */
    gml_context *xctx = NULL;
    ok = ok && rg_mpi_setup(&r, &xctx, &e);
    /* 2. every rank: its share and graphs */
    if (ok) {
        const bool step = build(&r, msg, sizeof msg);
        if (!gml_mpi_agree(MPI_COMM_WORLD, step, msg, why, sizeof why)) ok = rg_fail(&e, RG_RUNTIME, "%s", why);
    }
    /* 3. the input, from rank 0 */
    ok = ok && rg_mpi_share_input(&r, xctx, r.x, &e);
    gml_free(xctx);
    /* 4. the runs: one warm-up when timing several */
    double *ms = ok ? calloc((size_t)r.o.repeat, sizeof *ms) : NULL;
    double *comm = ok ? calloc((size_t)r.o.repeat, sizeof *comm) : NULL;
    double *wait = ok ? calloc((size_t)r.o.repeat, sizeof *wait) : NULL;
    if (ok && (!ms || !comm || !wait)) ok = rg_fail(&e, RG_RUNTIME, "out of memory");
    for (int i = r.o.repeat > 1 ? -1 : 0; ok && i < r.o.repeat; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = rg_now_ms(), c = 0, w = 0;
        if (!forward(&r, &c, &w, why, sizeof why)) ok = rg_fail(&e, RG_RUNTIME, "%s", why);
        if (ok && i >= 0) {
            ms[i] = rg_now_ms() - t0;
            comm[i] = c;
            wait[i] = w;
        }
    }
    /* the work over all ranks and the largest rank's memory, for --json */
    double flops = 0, peak = 0;
    if (ok && r.o.json) {
        const double f = gml_graph_flops(r.g1) + (r.g2 ? gml_graph_flops(r.g2) : 0);
        const size_t p1 = rg_tensor_bytes(r.g1, false), p2 = r.g2 ? rg_tensor_bytes(r.g2, false) : 0;
        const double p = (double)(p1 > p2 ? p1 : p2);
        MPI_Reduce(&f, &flops, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        MPI_Reduce(&p, &peak, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    }
    if (ok && r.rank == 0) {
        qsort(ms, (size_t)r.o.repeat, sizeof *ms, rg_cmp_double);
        qsort(comm, (size_t)r.o.repeat, sizeof *comm, rg_cmp_double);
        qsort(wait, (size_t)r.o.repeat, sizeof *wait, rg_cmp_double);
        ok = finish(&r, ms, comm, wait, flops, peak, &e);
    }
    free(ms);
    free(comm);
    free(wait);
    free_run(&r);
    return rg_mpi_finish(ok, r.rank, r.P, &e);
}
/* For the other --parallel modes (rg_mpi.h). */
bool rg_mpi_options(const rg_opts *g, bool context, popts *o, rg_err *e) {
    return options(g, context, o, e);
}
bool rg_mpi_map_weights(prun *r, char *msg, size_t size) { return map_weights(r, msg, size); }
bool rg_mpi_settle(prun *r, const int64_t xdim[3], char *msg, size_t size) { return settle(r, xdim, msg, size); }
bool rg_mpi_random_weights(prun *r, char *msg, size_t size) { return random_weights(r, msg, size); }

bool rg_mpi_setup(prun *r, gml_context **xctx, rg_err *e) {
    char msg[1536] = "", why[1600] = "";
    if (!r->o.threads) r->o.threads = rg_mpi_default_threads();
    /* the ISA (machines may differ), and rank 0 reads the input; its sizes go to everyone */
    int64_t xdim[3] = {0, 0, 0};
    if (!rg_mpi_start(r->rank, r->o.isa, r->o.input, xctx, xdim, e)) return false;
    /* every rank: its weights (mapped, or random), the same on every rank (names, shapes,
     * digests) before any share, and the sizes */
    r->weights = rg_mpi_weights_of(r->o.weights, r->rank);
    bool step = !r->weights || map_weights(r, msg, sizeof msg);
    if (!gml_mpi_agree(MPI_COMM_WORLD, step, msg, why, sizeof why))
        return rg_fail(e, RG_RUNTIME, "%s", why);
    if (!rg_mpi_weights_agree(r->o.weights ? r->wctx : NULL, e)) return false;
    step = settle(r, xdim, msg, sizeof msg) && (r->wctx || random_weights(r, msg, sizeof msg));
    if (!gml_mpi_agree(MPI_COMM_WORLD, step, msg, why, sizeof why))
        return rg_fail(e, RG_RUNTIME, "%s", why);
    return true;
}

bool rg_mpi_share_input(prun *r, const gml_context *xctx, gml_tensor *x, rg_err *e) {
    char msg[1536] = "";
    const size_t n = (size_t)(r->B * r->T * r->D);
    if (r->rank == 0 && xctx) memcpy(x->data, gml_get_first_tensor(xctx)->data, n * sizeof(float));
    if (r->rank == 0 && !xctx) {
        rg_fill_random(x, r->o.seed, false);
        r->random_input = true;
    }
    MPI_Bcast(&r->random_input, 1, MPI_C_BOOL, 0, MPI_COMM_WORLD);
    if (gml_mpi_bcast_f32(MPI_COMM_WORLD, x->data, n, 0, msg, sizeof msg) != GML_OK)
        return rg_fail(e, RG_RUNTIME, "%s", msg);
    return true;
}
#endif
