/* run-graph's graph: a built-in block (models/include/ggmlite/attention.h), a matmul, or a
 * graph file whose inputs and params are bound to the loaded data.
 *
 * The graph is built in a no_alloc context (headers only); the memory
 * planner then places every tensor that has no data in one buffer, reusing
 * the memory of intermediates once their last reader has run. */
#define _POSIX_C_SOURCE 200809L
#include "rg.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- built-in blocks -------------------------------------------------------- */

static bool build_block(const rg_opts *o, rg_data *d, gml_context *ctx, rg_model *m, rg_err *e) {
    if (o->kind == RG_MATMUL) { /* a [M, K] @ b [K, N] -> [M, N] */
        /* --compute bf16: both operands' values rounded to bf16 where they are
         * (random or --bind), kept as f32 (matmul's a is f32, and .npy, which
         * --save-inputs writes, has no bf16); the product rounds them again,
         * which changes nothing */
        if (o->compute == GML_COMPUTE_BF16)
            for (int i = 0; i < 2; i++) {
                gml_tensor *t = i ? d->b : d->a;
                float *x = t->data;
                for (int64_t k = 0; gml_is_contiguous(t) && k < gml_nelements(t); k++)
                    x[k] = gml_bf16_to_fp32(gml_fp32_to_bf16(x[k]));
            }
        m->outs[0] = gml_set_name(gml_matmul(ctx, d->a, d->b), "out");
        if (!m->outs[0]) return rg_fail(e, RG_RUNTIME, "matmul: %s", gml_last_error(ctx));
        m->out = m->outs[0];
        m->n_outs = 1;
        return true;
    }
    gml_attn_weights w;
    char err[1024];
    if (gml_attn_weights_find(d->wctx, &w, err, sizeof err) != GML_OK)
        return rg_fail(e, RG_RUNTIME, "%s: %s", o->weights, err);
    if (o->kind == RG_RELPOS && !w.rel_k) {
        char present[1024];
        rg_list_weights(d->wctx, present, sizeof present);
        return rg_fail(e, RG_RUNTIME, "%s: relpos needs rel_k.weight [2P+1, d_k] (rel_v.weight is "
                       "optional); %s", o->weights, present);
    }
    if (!rg_attn_sinks_asked(o->sinks, &w, d->wctx, o->weights, e)) return false;
    gml_attn_config cfg = rg_attn_config(o);
    cfg.dims = (gml_attn_dims){.d_model = d->dim[RG_D], .n_heads = (int)d->dim[RG_H],
                               .n_kv_heads = (int)d->dim[RG_G]};
    gml_attn_inputs in = {.query = d->x ? d->x : d->query, .key = d->key, .value = d->value,
                          .valid_lens = d->valid_lens, .mask = d->mask};
    gml_attn_result r = o->kind == RG_MHA   ? gml_mha(ctx, cfg, &w, in)
                        : o->kind == RG_GQA ? gml_gqa(ctx, cfg, &w, in)
                                            : gml_relpos_attn(ctx, cfg, (int)d->dim[RG_P], &w, in);
    if (!r.out) {
        if (o->weights) return rg_fail(e, RG_RUNTIME, "%s: %s", o->weights, gml_last_error(ctx));
        return rg_fail(e, RG_RUNTIME, "%s", gml_last_error(ctx));
    }
    m->out = m->outs[0] = r.out;
    /* The weights only when --attn-weights or --attn-svg asked for them
     * (cfg.graph.want_weights; else NULL, and the planner reuses their memory). */
    m->attn = m->outs[1] = r.weights;
    m->n_outs = r.weights ? 2 : 1;
    return true;
}

/* What a saved graph file calls inputs and params. */
static void flag_leafs(rg_data *d) {
    gml_tensor *inputs[] = {d->x, d->query, d->key, d->value, d->valid_lens, d->mask, d->a, d->b};
    for (size_t i = 0; i < sizeof inputs / sizeof *inputs; i++)
        if (inputs[i]) gml_set_flags(inputs[i], GML_FLAG_INPUT);
    if (d->wctx)
        for (gml_tensor *t = gml_get_first_tensor(d->wctx); t; t = gml_get_next_tensor(d->wctx, t))
            gml_set_flags(t, GML_FLAG_PARAM);
}

/* ---- graph files -------------------------------------------------------------- */

typedef struct binding {
    const rg_opts *o;
    rg_data *d;
    gml_context *ctx;
    bool asked_lens; /* the file declares valid_lens */
    bool asked_mask; /* the file declares attn_mask */
    bool bind_used[RG_MAX_BINDS]; /* --bind NAME matched a declaration */
    char declared[512];           /* the names the file declares, for messages */
    size_t n_declared;
} binding;

/* Standard inputs: x and query are the same input; key defaults to the
 * query and value to the key, so one file serves self- and cross-attention. */
static gml_tensor *standard_input(rg_data *d, const char *name) {
    gml_tensor *q = d->query ? d->query : d->x;
    gml_tensor *k = d->key ? d->key : q;
    if (strcmp(name, "x") == 0 || strcmp(name, "query") == 0) return q;
    if (strcmp(name, "key") == 0) return k;
    if (strcmp(name, "value") == 0) return d->value ? d->value : k;
    if (strcmp(name, "valid_lens") == 0) return d->valid_lens;
    if (strcmp(name, "attn_mask") == 0) return d->mask;
    return NULL;
}

static gml_tensor *bind(void *user, const char *name, bool is_param) {
    binding *b = user;
    if (strcmp(name, "valid_lens") == 0) b->asked_lens = true;
    if (strcmp(name, "attn_mask") == 0) b->asked_mask = true;
    if (b->n_declared < sizeof b->declared)
        b->n_declared += (size_t)snprintf(b->declared + b->n_declared, sizeof b->declared - b->n_declared,
                                          "%s%s", b->n_declared ? ", " : "", name);
    for (int i = 0; i < b->o->n_bind; i++)
        if (strcmp(b->o->bind[i].name, name) == 0) {
            b->bind_used[i] = true;
            return b->d->bound[i];
        }
    return is_param ? rg_find_weight(b->d->wctx, b->ctx, name) : standard_input(b->d, name);
}

/* Optional params are made (then filled with random data) when there is no
 * weights file; otherwise an optional input or param not given is none. */
static bool make_optional(void *user, const char *name, bool is_param) {
    (void)name;
    const binding *b = user;
    return is_param && !b->d->wctx;
}

static int load_graph(const rg_opts *o, rg_data *d, gml_context *ctx, rg_model *m, rg_err *e) {
    const char *names[RG_NSYM + 1];
    int64_t values[RG_NSYM + 1];
    int n = 0;
    for (int i = 0; i < RG_NSYM; i++)
        if (d->known[i]) {
            names[n] = RG_SYM[i];
            values[n++] = d->dim[i];
        }
    names[n] = "CAUSAL";
    values[n++] = o->causal;
    binding b = {.o = o, .d = d, .ctx = ctx};
    bool used[RG_NSYM + 1];
    gml_graph_binder binder = {.bind = bind, .user = &b, .sym_names = names, .sym_values = values,
                               .n_syms = n, .sym_used = used, .make_optional = make_optional,
                               .optional_needs_default = true};
    char err[1024];
    m->n_outs = gml_load_graph(ctx, o->model, &binder, m->outs, 2, err, sizeof err);
    if (m->n_outs < 0) {
        /* A size the file needs that run-graph could not tell: say which flag gives it. */
        for (int i = 0; i < RG_NSYM; i++) {
            char pat[32];
            snprintf(pat, sizeof pat, "unknown symbol '%s'", RG_SYM[i]);
            if (strstr(err, pat)) {
                size_t len = strlen(err);
                snprintf(err + len, sizeof err - len, " (give %s)", RG_FLAG[i]);
                break;
            }
        }
        if (strstr(err, "declares no default: bind it"))
            snprintf(err + strlen(err), sizeof err - strlen(err), " (run-graph: --bind NAME=FILE.npy)");
        return rg_fail(e, RG_RUNTIME, "%s", err);
    }
    /* Files given for names the file does not have would change nothing: errors. */
    for (int i = 0; i < o->n_bind; i++)
        if (!b.bind_used[i])
            return rg_fail(e, RG_USAGE, "--bind %s=%s: %s declares no input or param '%s' (it declares %s)",
                           o->bind[i].name, o->bind[i].path, o->model, o->bind[i].name,
                           b.n_declared ? b.declared : "none");
    if (d->mask && !b.asked_mask)
        return rg_fail(e, RG_USAGE, "%s: %s declares no input attn_mask (input attn_mask f32 [MB, MH, T, S] "
                       "optional default none), so the mask would change nothing",
                       o->attn_mask ? "--attn-mask" : "--key-padding-mask", o->model);
    /* A flag the file never reads changes nothing: a warning says so (a
     * saved graph has its sizes and causal written in, and runs with the
     * flags it was saved with). Sizes it does not read leave the summary and
     * --save-inputs' args. */
    for (int i = 0, k = 0; i < RG_NSYM; i++) {
        if (!d->known[i] || used[k++]) continue;
        if (o->dim_given[i])
            fprintf(stderr, "run-graph: warning: %s %" PRId64 ": %s never reads %s; the flag changes "
                    "nothing\n", RG_FLAG[i], o->dim[i], o->model, RG_SYM[i]);
        d->known[i] = false;
    }
    if (o->causal && !used[n - 1])
        fprintf(stderr, "run-graph: warning: --causal: %s never reads CAUSAL (e.g. softmax(s, "
                "causal=CAUSAL)); the flag changes nothing\n", o->model);
    if (o->n_valid_lens && !b.asked_lens)
        fprintf(stderr, "run-graph: warning: --valid-lens: %s declares no input valid_lens (input "
                "valid_lens i32 [B] optional); the flag changes nothing\n", o->model);
    m->out = m->outs[0];
    m->attn = m->n_outs > 1 ? m->outs[1] : NULL;
    return true;
}

/* Leafs the parser made (nothing bound them): random data, or an error when
 * a weights file should have had them or they are indices. */
static bool fill_made_leafs(const rg_opts *o, rg_data *d, rg_model *m, rg_err *e) {
    for (gml_tensor *t = gml_get_first_tensor(m->ctx); t; t = gml_get_next_tensor(m->ctx, t)) {
        if (t->op != GML_OP_NONE || gml_graph_use_count(m->g, t) == 0) continue;
        bool param = t->flags & GML_FLAG_PARAM;
        char s[64];
        gml_format_shape(t, s, sizeof s);
        if (param && d->wctx) { /* every missing one, as load_state_dict's missing keys */
            char missing[600], present[1024];
            size_t k = 0;
            int n_missing = 0;
            for (gml_tensor *u = t; u; u = gml_get_next_tensor(m->ctx, u)) {
                if (u->op != GML_OP_NONE || !(u->flags & GML_FLAG_PARAM) || gml_graph_use_count(m->g, u) == 0)
                    continue;
                if (n_missing++ < 5 && k < sizeof missing) {
                    char us[64];
                    k += (size_t)snprintf(missing + k, sizeof missing - k, "%s'%s%s' %s", n_missing > 1 ? ", " : "",
                                          d->prefix, u->name, gml_format_shape(u, us, sizeof us));
                }
            }
            if (n_missing > 5 && k < sizeof missing) snprintf(missing + k, sizeof missing - k, " and %d more", n_missing - 5);
            rg_list_weights(d->wctx, present, sizeof present);
            return rg_fail(e, RG_RUNTIME, "%s: no weight%s %s for %s; %s", o->weights, n_missing > 1 ? "s" : "",
                           missing, o->model, present);
        }
        if (!param && d->any_file) /* random data beside real files would be a silently wrong answer */
            return rg_fail(e, RG_RUNTIME, "%s: input '%s' %s is not bound: give it with %s (random inputs "
                           "are made only when no file is given)", o->model, t->name, s,
                           strcmp(t->name, "valid_lens") == 0 ? "--valid-lens"
                           : strcmp(t->name, "x") == 0 || strcmp(t->name, "query") == 0 ? "--input or --query"
                           : strcmp(t->name, "attn_mask") == 0 ? "--attn-mask or --key-padding-mask"
                                                               : "--bind NAME=FILE.npy");
        if (t->type != GML_F32) {
            if (strcmp(t->name, "valid_lens") == 0)
                return rg_fail(e, RG_RUNTIME, "%s: input valid_lens %s needs --valid-lens (or declare it optional)",
                               o->model, s);
            return rg_fail(e, RG_RUNTIME, "%s: input '%s' is %s %s: give it with --bind %s=FILE.npy", o->model,
                           t->name, gml_type_name(t->type), s, t->name);
        }
        gml_tensor placed = *t; /* planned: the data is the graph's, not the header's */
        placed.data = gml_graph_data(m->g, t);
        rg_fill_random(&placed, o->seed, param);
    }
    return true;
}

/* --grads: the tensors that may get a gradient, under the names they are
 * written with, then their gradients as nodes of ctx (rg_grad.c). */
static bool build_grads(const rg_opts *o, rg_data *d, gml_context *ctx, rg_model *m, rg_err *e) {
    rg_grads *gr = m->grads;
    rg_grads_free(gr);
    if (!rg_grads_load_dy(o, m->outs[0], gr, e)) return false;
    /* the inputs under their flags' names (matmul's and --bind's: their NAME) */
    gml_tensor *const in[] = {d->x, d->query, d->key, d->value, d->a, d->b};
    static const char *const IN_NAME[] = {"input", "query", "key", "value", "a", "b"};
    for (int i = 0; i < 6; i++)
        if (!rg_grads_add(gr, in[i], IN_NAME[i], true, o->seq_first && i < 4, e)) return false;
    for (int i = 0; i < o->n_bind; i++)
        if (!rg_grads_add(gr, d->bound[i], o->bind[i].name, true, false, e)) return false;
    /* the weights under their names in the file (prefix included), or their own */
    for (int i = 0; d->st && i < d->n_w; i++)
        if (!rg_grads_add(gr, d->w_tensor[i], gml_safetensors_name(d->st, d->w_index[i]), false, false, e))
            return false;
    for (gml_tensor *t = d->st || !d->wctx ? NULL : gml_get_first_tensor(d->wctx); t;
         t = gml_get_next_tensor(d->wctx, t))
        if (!rg_grads_add(gr, t, t->name, false, false, e)) return false;
    /* a graph file's own leafs (random params, inputs no file gives) */
    for (gml_tensor *t = o->kind == RG_GRAPH ? gml_get_first_tensor(ctx) : NULL; t; t = gml_get_next_tensor(ctx, t))
        if (t->op == GML_OP_NONE && !t->view_src && t != d->mask && strcmp(t->name, "attn_mask") != 0 &&
            !rg_grads_add(gr, t, t->name, !(t->flags & GML_FLAG_PARAM), false, e))
            return false;
    return rg_grads_build(ctx, m->outs, m->n_outs, gr, e);
}

static bool build(const rg_opts *o, rg_data *d, gml_context *ctx, rg_model *m, rg_err *e) {
    if (!(o->kind == RG_GRAPH ? load_graph(o, d, ctx, m, e) : build_block(o, d, ctx, m, e))) return false;
    return !m->grads || build_grads(o, d, ctx, m, e);
}

size_t rg_leaf_bytes(const gml_graph *g) {
    size_t own = 0;
    for (int i = 0; i < gml_graph_n_leafs(g); i++) {
        const gml_tensor *t = gml_graph_leaf(g, i);
        if (t->data && !gml_is_view(t)) own += (gml_nbytes(t) + 63) / 64 * 64;
    }
    return own;
}

size_t rg_tensor_bytes(const gml_graph *g, bool naive) {
    return rg_leaf_bytes(g) + (naive ? gml_graph_plan_naive(g) : gml_graph_plan_peak(g)) +
           gml_graph_packed_bytes(g);
}

void rg_print_memory(const gml_graph *g) {
    const double mib = 1 << 20;
    const size_t packed = gml_graph_packed_bytes(g);
    printf("memory  %.2f MiB of tensor data (%.2f MiB without reuse",
           (double)rg_tensor_bytes(g, false) / mib, (double)rg_tensor_bytes(g, true) / mib);
    if (packed) printf("; %.2f MiB of it packed weights", (double)packed / mib);
    printf("), %d nodes\n", gml_graph_n_nodes(g));
}

/* Gives the graph's tensors without data (intermediates, and leafs a graph
 * file made) their places with the memory planner; the inputs and weights
 * keep the data they came with. */
static bool place(rg_model *m, rg_err *e) {
    const size_t own = rg_leaf_bytes(m->g); /* inputs and weights, from files or made random */
    return rg_place(m->g, "the graph's tensors", own, e);
}

/* m->weights: the graph's leafs flagged params, then unflagged (rg.h). */
static bool take_weights(rg_model *m, rg_err *e) {
    const int n_leafs = gml_graph_n_leafs(m->g);
    m->weights = malloc((size_t)n_leafs * sizeof *m->weights + 1);
    if (!m->weights) return rg_fail(e, RG_RUNTIME, "out of memory");
    for (int i = 0; i < n_leafs; i++) {
        gml_tensor *t = gml_graph_leaf(m->g, i);
        if (t->flags & GML_FLAG_PARAM) m->weights[m->n_weights++] = t;
    }
    rg_model_flag_weights(m, false);
    return true;
}

bool rg_model_is_weight(const rg_model *m, const gml_tensor *t) {
    for (int i = 0; i < m->n_weights; i++)
        if (m->weights[i] == t) return true;
    return false;
}

void rg_model_flag_weights(rg_model *m, bool flagged) {
    for (int i = 0; i < m->n_weights; i++) {
        if (flagged) gml_set_flags(m->weights[i], GML_FLAG_PARAM);
        else m->weights[i]->flags &= ~GML_FLAG_PARAM;
    }
}

bool rg_model_build(const rg_opts *o, rg_data *d, rg_model *m, rg_err *e) {
    *m = (rg_model){0};
    if (o->grads && !(m->grads = calloc(1, sizeof *m->grads))) return rg_fail(e, RG_RUNTIME, "out of memory");
    /* Headers only: the planner places the data. How many tensors a graph
     * file makes is known only once it is parsed: build in a small arena,
     * and again in a larger one while the arena is what ran out. */
    for (size_t headers = 1024;; headers *= 8) {
        const size_t arena = headers * gml_tensor_overhead();
        m->ctx = gml_init((gml_init_params){.mem_size = arena, .no_alloc = true});
        if (!m->ctx) return rg_fail(e, RG_RUNTIME, "out of memory");
        /* --compute: the matmuls built from here on (a graph file says its own) */
        if (o->kind != RG_GRAPH && gml_set_default_compute(m->ctx, o->compute) != GML_OK)
            return rg_fail(e, RG_USAGE, "--compute %s: %s", gml_compute_name(o->compute),
                           gml_last_error(m->ctx));
        rg_err attempt = {0};
        if (build(o, d, m->ctx, m, &attempt)) break;
        if (gml_mem_required(m->ctx) <= arena || headers >= ((size_t)1 << 22)) {
            *e = attempt;
            return false;
        }
        gml_free(m->ctx);
        m->ctx = NULL;
    }
    if (o->kind != RG_GRAPH) flag_leafs(d);
    if (m->grads) { /* the forward's outputs, then the gradients */
        const int n = m->n_outs + m->grads->n;
        gml_tensor **all = malloc((size_t)n * sizeof *all);
        if (!all) return rg_fail(e, RG_RUNTIME, "out of memory");
        memcpy(all, m->outs, (size_t)m->n_outs * sizeof *all);
        memcpy(all + m->n_outs, m->grads->grad, (size_t)m->grads->n * sizeof *all);
        m->g = gml_build_graph(m->ctx, all, n);
        free(all);
    } else {
        m->g = gml_build_graph(m->ctx, m->outs, m->n_outs);
    }
    if (!m->g) return rg_fail(e, RG_RUNTIME, "%s", gml_last_error(m->ctx));
    if (!place(m, e) || (o->kind == RG_GRAPH && !fill_made_leafs(o, d, m, e))) return false;
    if (o->kind != RG_MATMUL && !rg_check_unused_weights(o, d, m->g, NULL, e)) return false;
    if (!take_weights(m, e)) return false;
    /* The results are planned: read them through the graph's copies, whose
     * data is where the graph computes them. */
    m->out = gml_graph_tensor(m->g, m->out);
    if (m->attn) m->attn = gml_graph_tensor(m->g, m->attn);
    return true;
}

void rg_model_free(rg_model *m) {
    if (m->g) gml_graph_free(m->g);
    if (m->ctx) gml_free(m->ctx);
    rg_grads_free(m->grads);
    free(m->grads);
    free(m->weights);
    *m = (rg_model){0};
}
