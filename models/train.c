/* The trainer (train.h): one training step of a language model as a graph
 * built and planned once (logits -> cross-entropy -> gradients of every
 * parameter), computed each step, then the optimizer's update in place. */
#include "misuse.h"

#include <ggmlite/train.h>

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gml_trainer {
    gml_context *ctx; /* no_alloc: the step's nodes; the planner places their data */
    gml_graph *g;     /* outputs: loss, grads[0..n) */
    gml_tensor *tokens, *targets, *loss; /* [B, T] i32, [B, T] i32, [1] f32 */
    int n_params;
    gml_tensor **params; /* wctx's tensors the loss depends on */
    gml_tensor **grads;  /* their gradients, nodes of ctx */
    gml_tensor *ghdr;    /* after a step: the graph's headers of grads (data placed) */
    gml_tensor **gptr;   /* &ghdr[i], as gml_optim_step takes them */
    gml_optim *opt;
    int64_t B, T, V;
    bool stepped;
    float grad_norm;
    char err[1024];
};

static void fail(char *err, size_t err_size, const char *fmt, ...) GML_PRINTF(3, 4);
static void fail(char *err, size_t err_size, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (err && err_size) snprintf(err, err_size, "%s", msg);
    gml_set_error(NULL, "%s", msg);
}

void gml_trainer_free(gml_trainer *tr) {
    if (!tr) return;
    gml_optim_free(tr->opt);
    gml_graph_free(tr->g);
    gml_free(tr->ctx);
    free(tr->params);
    free(tr->grads);
    free(tr->ghdr);
    free(tr->gptr);
    free(tr);
}

/* Every tensor of wctx is f32 with data (the optimizer writes it). */
static bool check_weights(gml_context *wctx, int *n, char *err, size_t err_size) {
    *n = 0;
    for (gml_tensor *t = gml_get_first_tensor(wctx); t; t = gml_get_next_tensor(wctx, t), (*n)++) {
        char s[GML_SHAPE_MAX];
        if (t->type != GML_F32) {
            fail(err, err_size, "gml_trainer_new: weight '%s' is %s %s; training needs f32 "
                 "parameters (convert the checkpoint to float32)", t->name,
                 gml_type_name(t->type), gml_format_shape(t, s, sizeof s));
            return false;
        }
        if (!t->data) {
            fail(err, err_size, "gml_trainer_new: weight '%s' %s has no data (a no_alloc "
                 "context's header): the optimizer updates the weights in place; load them into "
                 "an allocating context (gml_load_safetensors)", t->name,
                 gml_format_shape(t, s, sizeof s));
            return false;
        }
    }
    if (!*n) fail(err, err_size, "gml_trainer_new: wctx holds no tensor");
    return *n > 0;
}

/* The step's nodes: logits, loss, and the parameters (the tensors of wctx
 * the loss reaches) with their gradients. */
static bool build(gml_trainer *tr, const gml_lm *lm, gml_context *wctx, int n_weights, char *err,
                  size_t err_size) {
    gml_context *ctx = tr->ctx;
    tr->tokens = gml_set_name(gml_new_tensor(ctx, GML_I32, 2, (int64_t[]){tr->B, tr->T}), "tokens");
    tr->targets =
        gml_set_name(gml_new_tensor(ctx, GML_I32, 2, (int64_t[]){tr->B, tr->T}), "targets");
    if (!tr->tokens || !tr->targets) {
        fail(err, err_size, "gml_trainer_new: %s", gml_last_error(ctx));
        return false;
    }
    gml_set_flags(tr->tokens, GML_FLAG_INPUT);
    gml_set_flags(tr->targets, GML_FLAG_INPUT);
    gml_tensor *logits = gml_lm_logits(ctx, lm, tr->tokens);                 /* [B, T, V] */
    tr->loss = logits ? gml_cross_entropy(ctx, logits, tr->targets) : NULL;  /* [1] */
    if (!tr->loss) {
        fail(err, err_size, "gml_trainer_new: %s", gml_last_error(ctx));
        return false;
    }
    gml_set_name(tr->loss, "loss");
    /* the parameters: wctx's tensors the forward graph holds */
    gml_graph *fwd = gml_build_graph(ctx, &tr->loss, 1);
    tr->params = malloc((size_t)n_weights * sizeof *tr->params);
    tr->grads = malloc((size_t)n_weights * sizeof *tr->grads);
    if (!fwd || !tr->params || !tr->grads) {
        fail(err, err_size, "gml_trainer_new: %s", fwd ? "out of memory" : gml_last_error(ctx));
        gml_graph_free(fwd);
        return false;
    }
    for (gml_tensor *t = gml_get_first_tensor(wctx); t; t = gml_get_next_tensor(wctx, t))
        if (gml_graph_tensor_index(fwd, t) >= 0) tr->params[tr->n_params++] = t;
    gml_graph_free(fwd);
    if (!tr->n_params) {
        fail(err, err_size, "gml_trainer_new: the loss depends on no tensor of wctx (lm is not "
             "bound to wctx's tensors)");
        return false;
    }
    if (gml_grad(ctx, tr->loss, NULL, tr->params, tr->n_params, tr->grads) != GML_OK) {
        fail(err, err_size, "gml_trainer_new: %s", gml_last_error(ctx));
        return false;
    }
    gml_tensor **outs = malloc((size_t)(tr->n_params + 1) * sizeof *outs);
    if (!outs) {
        fail(err, err_size, "gml_trainer_new: out of memory");
        return false;
    }
    outs[0] = tr->loss;
    memcpy(outs + 1, tr->grads, (size_t)tr->n_params * sizeof *outs);
    tr->g = gml_build_graph(ctx, outs, tr->n_params + 1);
    free(outs);
    if (!tr->g) {
        fail(err, err_size, "gml_trainer_new: %s", gml_last_error(ctx));
        return false;
    }
    if (gml_graph_plan(tr->g, NULL) != GML_OK) {
        fail(err, err_size, "gml_trainer_new: planning the step: %s", gml_graph_error(tr->g));
        return false;
    }
    return true;
}

gml_trainer *gml_trainer_new(const gml_lm *lm, gml_context *wctx, const gml_trainer_config *cfg,
                             char *err, size_t err_size) {
    GML_MODELS_NONNULL_ERR(lm, NULL, err, err_size);
    GML_MODELS_NONNULL_ERR(wctx, NULL, err, err_size);
    GML_MODELS_NONNULL_ERR(cfg, NULL, err, err_size);
    if (cfg->batch < 1 || cfg->seq < 1 || cfg->batch > INT32_MAX || cfg->seq > INT32_MAX) {
        fail(err, err_size, "gml_trainer_new: batch %" PRId64 " and seq %" PRId64
             " must be in [1, 2^31)", cfg->batch, cfg->seq);
        return NULL;
    }
    if (lm->n_ctx > 0 && cfg->seq > lm->n_ctx) {
        fail(err, err_size, "gml_trainer_new: seq %" PRId64 " is longer than the position table "
             "(wpe.weight has %" PRId64 " rows)", cfg->seq, lm->n_ctx);
        return NULL;
    }
    int n_weights = 0;
    if (!check_weights(wctx, &n_weights, err, err_size)) return NULL;
    gml_trainer *tr = calloc(1, sizeof *tr);
    if (!tr) {
        fail(err, err_size, "gml_trainer_new: out of memory");
        return NULL;
    }
    tr->B = cfg->batch, tr->T = cfg->seq, tr->V = lm->n_vocab;
    /* headers: the forward's (about 80 a layer), the backward's (a few times
     * that), one gradient per weight */
    const size_t headers = (size_t)(600 * (lm->n_layers + 2) + 8 * n_weights + 256);
    tr->ctx =
        gml_init((gml_init_params){.mem_size = headers * gml_tensor_overhead(), .no_alloc = true});
    if (!tr->ctx) {
        fail(err, err_size, "gml_trainer_new: %s", gml_last_error(NULL));
        gml_trainer_free(tr);
        return NULL;
    }
    if (!build(tr, lm, wctx, n_weights, err, err_size)) {
        gml_trainer_free(tr);
        return NULL;
    }
    tr->ghdr = calloc((size_t)tr->n_params, sizeof *tr->ghdr);
    tr->gptr = malloc((size_t)tr->n_params * sizeof *tr->gptr);
    if (!tr->ghdr || !tr->gptr) {
        fail(err, err_size, "gml_trainer_new: out of memory");
        gml_trainer_free(tr);
        return NULL;
    }
    for (int i = 0; i < tr->n_params; i++) tr->gptr[i] = &tr->ghdr[i];
    char oerr[512] = "";
    tr->opt = gml_optim_new(&cfg->optim, tr->params, tr->n_params, oerr, sizeof oerr);
    if (!tr->opt) {
        fail(err, err_size, "gml_trainer_new: %s", oerr);
        gml_trainer_free(tr);
        return NULL;
    }
    return tr;
}

/* Each id in [0, V): else the message naming it, where it is, and V. */
static bool check_ids(gml_trainer *tr, const int32_t *ids, const char *what) {
    for (int64_t i = 0; i < tr->B * tr->T; i++)
        if (ids[i] < 0 || ids[i] >= tr->V) {
            snprintf(tr->err, sizeof tr->err,
                     "gml_trainer_step: %s %" PRId32 " at [%" PRId64 ", %" PRId64
                     "] is outside [0, V) (V = %" PRId64 ")",
                     what, ids[i], i / tr->T, i % tr->T, tr->V);
            return false;
        }
    return true;
}

gml_status gml_trainer_step(gml_trainer *tr, const int32_t *tokens, const int32_t *targets,
                            int n_threads, float *loss) {
    GML_MODELS_NONNULL(NULL, tr, GML_ERR_INVALID);
    GML_MODELS_NONNULL(NULL, tokens, GML_ERR_INVALID);
    GML_MODELS_NONNULL(NULL, targets, GML_ERR_INVALID);
    tr->err[0] = '\0';
    if (n_threads < 1 || n_threads > GML_MAX_THREADS) {
        snprintf(tr->err, sizeof tr->err, "gml_trainer_step: n_threads %d is outside [1, %d]",
                 n_threads, GML_MAX_THREADS);
        return GML_ERR_INVALID;
    }
    if (!check_ids(tr, tokens, "token") || !check_ids(tr, targets, "target"))
        return GML_ERR_INVALID;
    const size_t bytes = (size_t)(tr->B * tr->T) * sizeof(int32_t);
    memcpy(gml_graph_data(tr->g, tr->tokens), tokens, bytes);
    memcpy(gml_graph_data(tr->g, tr->targets), targets, bytes);
    gml_status st = gml_graph_compute(tr->g, n_threads);
    if (st != GML_OK) {
        snprintf(tr->err, sizeof tr->err, "gml_trainer_step: %s", gml_graph_error(tr->g));
        return st;
    }
    if (loss) *loss = *(const float *)gml_graph_data(tr->g, tr->loss);
    for (int i = 0; i < tr->n_params; i++) tr->ghdr[i] = *gml_graph_tensor(tr->g, tr->grads[i]);
    tr->stepped = true;
    st = gml_optim_step(tr->opt, tr->gptr, n_threads, &tr->grad_norm);
    if (st != GML_OK)
        snprintf(tr->err, sizeof tr->err, "gml_trainer_step: %s", gml_optim_error(tr->opt));
    return st;
}

int gml_trainer_n_params(const gml_trainer *tr) {
    GML_MODELS_NONNULL(NULL, tr, 0);
    return tr->n_params;
}

gml_tensor *gml_trainer_param(const gml_trainer *tr, int i) {
    GML_MODELS_NONNULL(NULL, tr, NULL);
    return i >= 0 && i < tr->n_params ? tr->params[i] : NULL;
}

const gml_tensor *gml_trainer_grad(const gml_trainer *tr, int i) {
    GML_MODELS_NONNULL(NULL, tr, NULL);
    return tr->stepped && i >= 0 && i < tr->n_params ? &tr->ghdr[i] : NULL;
}

float gml_trainer_grad_norm(const gml_trainer *tr) {
    GML_MODELS_NONNULL(NULL, tr, 0);
    return tr->grad_norm;
}

const gml_graph *gml_trainer_graph(const gml_trainer *tr) {
    GML_MODELS_NONNULL(NULL, tr, NULL);
    return tr->g;
}

const char *gml_trainer_error(const gml_trainer *tr) { return tr ? tr->err : gml_last_error(NULL); }
