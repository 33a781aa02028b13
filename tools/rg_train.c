/* run-graph train gpt2 | llama: a whole language model trained as PyTorch
 * trains it, through the library's trainer (models' <ggmlite/train.h>):
 *
 *   run-graph train gpt2 --weights init.safetensors --data tokens.npy --heads 8 \
 *       --optimizer adamw --lr 3e-4 --log losses.npy --save-weights out.safetensors
 *
 * --data is int32 or int64 [S, B, T+1]: step s trains on data[s, :, :-1] with
 * the targets data[s, :, 1:]. Every id is checked against V before the first
 * step; the outputs (--log, --save-weights, --grads) are staged and renamed
 * into place only when every step succeeded (rg_stage). run-graph.c hands it
 * the parsed options (rg_parse_args) when the first argument is "train". */
#define _POSIX_C_SOURCE 200809L
#include "rg.h"
#include "rg_time.h"

#include <ggmlite/train.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct train_run {
    gml_context *wctx;  /* --weights, an allocating context (the optimizer writes it) */
    gml_context *dctx;  /* --data as i32 [S, B, T+1] */
    gml_context *octx;  /* --grads' copies, --log's tensor */
    const int32_t *tok; /* the data */
    int64_t S, B, T;    /* T: the tokens a step trains on (the data's last dim less one) */
    gml_lm lm;
    bool lm_found;
    gml_trainer *tr;
    rg_stage stage;
    int steps;
    float *losses;
    double *ms;
} train_run;

/* ---- --data ------------------------------------------------------------------- */

/* The whole file, from a regular file only (a FIFO would block). */
static unsigned char *read_file(const char *path, size_t *len, rg_err *e) {
    const int fd = open(path, O_RDONLY | O_NONBLOCK);
    struct stat st;
    if (fd < 0) return rg_fail(e, RG_RUNTIME, "--data %s: cannot open: %s", path, strerror(errno)), NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return rg_fail(e, RG_RUNTIME, "--data %s: not a regular file", path), NULL;
    }
    unsigned char *buf = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (buf && got < (size_t)st.st_size) {
        const ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (!buf || got != (size_t)st.st_size) {
        free(buf);
        return rg_fail(e, RG_RUNTIME, "--data %s: cannot read it%s", path, buf ? "" : " (out of memory)"), NULL;
    }
    *len = got;
    return buf;
}

/* An int64 .npy ('<i8', numpy's default integers) as int32, in place: the
 * descr's "i8" becomes "i4" (the header keeps its length), the data is
 * narrowed. The first value outside int32 is kept in *wide_at / *wide (its
 * flat index), reported against V once the shape is known. False if the
 * file is not an '<i8' .npy (it goes to the library's parser as it is). */
static bool narrow_int64(unsigned char *buf, size_t *len, int64_t *wide_at, int64_t *wide) {
    *wide_at = -1;
    if (*len < 12 || memcmp(buf, "\x93NUMPY", 6) != 0) return false;
    const int major = buf[6];
    const size_t hstart = major == 1 ? 10 : 12;
    const size_t hlen = major == 1 ? (size_t)(buf[8] | buf[9] << 8)
                                   : (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
    if (major < 1 || major > 3 || hstart + hlen > *len) return false;
    char *descr = NULL;
    for (size_t i = hstart; i + 5 <= hstart + hlen && !descr; i++)
        if ((buf[i] == '\'' || buf[i] == '"') && memcmp(buf + i + 1, "<i8", 3) == 0 && buf[i + 4] == buf[i])
            descr = (char *)buf + i + 1;
    if (!descr) return false;
    descr[2] = '4';
    const size_t data = hstart + hlen, n = (*len - data) / 8;
    for (size_t i = 0; i < n; i++) {
        int64_t v;
        memcpy(&v, buf + data + 8 * i, 8); /* little-endian, as '<' says (the machines we build for) */
        if ((v < INT32_MIN || v > INT32_MAX) && *wide_at < 0) *wide_at = (int64_t)i, *wide = v;
        const int32_t w = v < INT32_MIN || v > INT32_MAX ? -1 : (int32_t)v;
        memcpy(buf + data + 4 * i, &w, 4);
    }
    memmove(buf + data + 4 * n, buf + data + 8 * n, *len - data - 8 * n); /* a tail the parser names */
    *len -= 4 * n;
    return true;
}

/* "[s, b, t]" of a flat index of the data. */
static void where(const train_run *r, int64_t i, char *buf, size_t size) {
    const int64_t T1 = r->T + 1;
    snprintf(buf, size, "[%" PRId64 ", %" PRId64 ", %" PRId64 "]", i / (r->B * T1), i / T1 % r->B, i % T1);
}

static bool load_tokens(const rg_opts *o, train_run *r, rg_err *e) {
    size_t len = 0;
    unsigned char *buf = read_file(o->data, &len, e);
    if (!buf) return false;
    int64_t wide_at = -1, wide = 0;
    const bool was64 = narrow_int64(buf, &len, &wide_at, &wide);
    char err[1024];
    r->dctx = gml_parse_npy(buf, len, o->data, "tokens", err, sizeof err);
    free(buf);
    if (!r->dctx) return rg_fail(e, RG_RUNTIME, "--data %s", err);
    const gml_tensor *t = gml_get_first_tensor(r->dctx);
    char s[GML_SHAPE_MAX];
    gml_format_shape(t, s, sizeof s);
    if (t->type != GML_I32)
        return rg_fail(e, RG_RUNTIME, "--data %s: the token ids are %s %s; expected int32 or int64 (np.save(path, "
                       "a.astype(np.int32)))", o->data, gml_type_name(t->type), s);
    if (t->n_dims != 3 || t->ne[3] < 2)
        return rg_fail(e, RG_RUNTIME, "--data %s: the token ids are %s %s; expected 3-D [S, B, T+1] (steps, batch, "
                       "a window of T+1 tokens, T >= 1: each step trains on [:, :-1] with targets [:, 1:])",
                       o->data, was64 ? "int64" : "int32", s);
    r->S = t->ne[1], r->B = t->ne[2], r->T = t->ne[3] - 1;
    r->tok = t->data;
    if (wide_at >= 0) {
        char at[96];
        where(r, wide_at, at, sizeof at);
        return rg_fail(e, RG_RUNTIME, "--data %s: token id %" PRId64 " at %s is outside [0, V) (V = %" PRId64 ")",
                       o->data, wide, at, r->lm.n_vocab);
    }
    for (int64_t i = 0; i < gml_nelements(t); i++)
        if (r->tok[i] < 0 || r->tok[i] >= r->lm.n_vocab) {
            char at[96];
            where(r, i, at, sizeof at);
            return rg_fail(e, RG_RUNTIME, "--data %s: token id %" PRId32 " at %s is outside [0, V) (V = %" PRId64
                           ", the rows of the embedding in %s)", o->data, r->tok[i], at, r->lm.n_vocab, o->weights);
        }
    return true;
}

/* ---- the model -------------------------------------------------------------- */

/* LLaMA's G when --kv-heads is not given: layer 0's k_proj rows over the head
 * size (D / H); 0 (= H) when the file does not tell. */
static int kv_heads_of(gml_context *wctx, int H) {
    const gml_tensor *k = NULL, *emb = NULL;
    for (gml_tensor *t = gml_get_first_tensor(wctx); t; t = gml_get_next_tensor(wctx, t)) {
        const size_t n = strlen(t->name);
        static const char KP[] = "layers.0.self_attn.k_proj.weight", EMB[] = "embed_tokens.weight";
        if (n >= sizeof KP - 1 && strcmp(t->name + n - (sizeof KP - 1), KP) == 0) k = t;
        if (n >= sizeof EMB - 1 && strcmp(t->name + n - (sizeof EMB - 1), EMB) == 0) emb = t;
    }
    if (!k || !emb || k->n_dims != 2 || emb->n_dims != 2 || emb->ne[3] % H) return 0;
    const int64_t hd = emb->ne[3] / H;
    return hd && k->ne[2] % hd == 0 && k->ne[2] / hd <= INT32_MAX ? (int)(k->ne[2] / hd) : 0;
}

static bool load_model(const rg_opts *o, train_run *r, rg_err *e) {
    char err[1024];
    r->wctx = gml_load_safetensors(o->weights, err, sizeof err);
    if (!r->wctx) return rg_fail(e, RG_RUNTIME, "--weights %s", err);
    const int H = (int)o->dim[RG_H];
    gml_lm_config cfg = {.arch = o->layer == RG_GPT2 ? GML_LM_GPT2 : GML_LM_LLAMA,
                         .gpt2 = {.n_heads = H},
                         .llama = {.n_heads = H,
                                   .n_kv_heads = o->dim[RG_G] ? (int)o->dim[RG_G] : kv_heads_of(r->wctx, H),
                                   .rope_theta = o->rope_theta,
                                   .rms_eps = o->rms_eps}};
    if (gml_lm_find(r->wctx, &cfg, &r->lm, err, sizeof err) != GML_OK)
        return rg_fail(e, RG_RUNTIME, "--weights %s: %s", o->weights, err);
    r->lm_found = true;
    return true;
}

static gml_optim_params optim_params(const rg_opts *o) {
    gml_optim_params p = gml_optim_defaults(o->sgd ? GML_OPTIM_SGD : GML_OPTIM_ADAMW);
    p.lr = o->lr;
    if (o->betas_given) p.beta1 = o->betas[0], p.beta2 = o->betas[1];
    if (o->eps_given) p.eps = o->eps;
    if (o->weight_decay_given) p.weight_decay = o->weight_decay;
    if (o->momentum_given) p.momentum = o->momentum;
    p.clip_grad_norm = o->clip_grad_norm;
    return p;
}

/* ---- outputs ---------------------------------------------------------------- */

static bool save_failed(train_run *r, const char *err, rg_err *e) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", err);
    rg_stage_message(&r->stage, msg, sizeof msg);
    return rg_fail(e, RG_RUNTIME, "%s", msg);
}

/* --grads: the first step's gradients under the parameters' names, copied
 * out now (the next step overwrites them), written to the staged file. */
static bool save_grads(const rg_opts *o, train_run *r, rg_err *e) {
    const int n = gml_trainer_n_params(r->tr);
    size_t bytes = 0;
    for (int i = 0; i < n; i++) bytes += gml_nbytes(gml_trainer_grad(r->tr, i)) + 64;
    gml_context *c = gml_init((gml_init_params){.mem_size = bytes + (size_t)n * gml_tensor_overhead() + 4096});
    const gml_tensor **list = calloc(n > 0 ? (size_t)n : 1, sizeof *list);
    const char *tmp = rg_stage_add(&r->stage, o->grads);
    bool ok = c && list && tmp;
    for (int i = 0; ok && i < n; i++) {
        const gml_tensor *g = gml_trainer_grad(r->tr, i), *p = gml_trainer_param(r->tr, i);
        gml_tensor *t = gml_new_tensor(c, GML_F32, g->n_dims, g->ne + GML_MAX_DIMS - g->n_dims);
        ok = t != NULL;
        if (ok) memcpy(t->data, g->data, gml_nbytes(g)), gml_set_name(t, p->name), list[i] = t;
    }
    char err[1024] = "out of memory";
    if (ok && gml_save_safetensors(tmp, list, n, err, sizeof err) != GML_OK) ok = false;
    free(list);
    gml_free(c);
    return ok || save_failed(r, err, e);
}

/* --log and --save-weights, staged; then every staged file into place. */
static bool write_outputs(const rg_opts *o, train_run *r, rg_err *e) {
    char err[1024] = "out of memory";
    if (o->log) {
        r->octx = gml_init((gml_init_params){.mem_size = (size_t)r->steps * 4 + gml_tensor_overhead() + 4096});
        gml_tensor *t = r->octx ? gml_new_tensor_1d(r->octx, GML_F32, r->steps) : NULL;
        const char *tmp = rg_stage_add(&r->stage, o->log);
        if (!t || !tmp) return save_failed(r, err, e);
        memcpy(t->data, r->losses, (size_t)r->steps * sizeof(float));
        if (gml_save_npy(tmp, t, err, sizeof err) != GML_OK) return save_failed(r, err, e);
    }
    if (o->save_weights) {
        int n = 0;
        for (gml_tensor *t = gml_get_first_tensor(r->wctx); t; t = gml_get_next_tensor(r->wctx, t)) n++;
        const gml_tensor **list = calloc(n > 0 ? (size_t)n : 1, sizeof *list);
        const char *tmp = rg_stage_add(&r->stage, o->save_weights);
        if (!list || !tmp) {
            free(list);
            return save_failed(r, err, e);
        }
        n = 0;
        for (gml_tensor *t = gml_get_first_tensor(r->wctx); t; t = gml_get_next_tensor(r->wctx, t)) list[n++] = t;
        const bool ok = gml_save_safetensors(tmp, list, n, err, sizeof err) == GML_OK;
        free(list);
        if (!ok) return save_failed(r, err, e);
    }
    return rg_stage_commit(&r->stage, e);
}

/* ---- the run ------------------------------------------------------------------ */

static bool train(const rg_opts *o, train_run *r, rg_err *e) {
    if (o->steps > r->S)
        return rg_fail(e, RG_RUNTIME, "--steps %" PRId64 ": --data %s holds %" PRId64 " steps ([S, B, T+1] = "
                       "[%" PRId64 ", %" PRId64 ", %" PRId64 "])", o->steps, o->data, r->S, r->S, r->B, r->T + 1);
    r->steps = (int)(o->steps ? o->steps : r->S);
    char err[1024];
    const gml_trainer_config cfg = {.batch = r->B, .seq = r->T, .optim = optim_params(o)};
    r->tr = gml_trainer_new(&r->lm, r->wctx, &cfg, err, sizeof err);
    if (!r->tr) return rg_fail(e, RG_RUNTIME, "train %s: %s", o->model, err);
    const int64_t BT = r->B * r->T;
    r->losses = malloc((size_t)r->steps * sizeof *r->losses);
    r->ms = malloc((size_t)r->steps * sizeof *r->ms);
    int32_t *x = malloc((size_t)BT * 2 * sizeof *x);
    if (!r->losses || !r->ms || !x) {
        free(x);
        return rg_fail(e, RG_RUNTIME, "out of memory");
    }
    int32_t *y = x + BT;
    bool ok = true;
    for (int s = 0; ok && s < r->steps; s++) {
        for (int64_t b = 0; b < r->B; b++) { /* data[s, b, :-1] and data[s, b, 1:] */
            const int32_t *row = r->tok + (s * r->B + b) * (r->T + 1);
            memcpy(x + b * r->T, row, (size_t)r->T * sizeof *x);
            memcpy(y + b * r->T, row + 1, (size_t)r->T * sizeof *y);
        }
        const double t0 = rg_now_ms();
        if (gml_trainer_step(r->tr, x, y, o->threads, &r->losses[s]) != GML_OK) {
            ok = rg_fail(e, RG_RUNTIME, "train %s: step %d: %s", o->model, s + 1, gml_trainer_error(r->tr));
            break;
        }
        r->ms[s] = rg_now_ms() - t0;
        if (!isfinite(r->losses[s])) {
            ok = rg_fail(e, RG_RUNTIME, "train %s: step %d: the loss is %s (the weights or the learning rate "
                         "make the logits overflow); nothing written", o->model, s + 1,
                         isnan(r->losses[s]) ? "NaN" : "infinite");
            break;
        }
        if (!o->json)
            fprintf(stderr, "step %d/%d  loss %.6f  %.3f ms  %.0f tokens/s\n", s + 1, r->steps,
                    (double)r->losses[s], r->ms[s], r->ms[s] > 0 ? (double)BT / r->ms[s] * 1e3 : 0.0);
        if (s == 0 && o->grads) ok = save_grads(o, r, e);
    }
    free(x);
    return ok && write_outputs(o, r, e);
}

/* The median step time, the first step (which makes the kernels' scratch)
 * excluded when there are others. */
static double median_ms(const train_run *r) {
    const int n = r->steps > 1 ? r->steps - 1 : 1;
    double *v = malloc((size_t)n * sizeof *v);
    if (!v) return r->ms[0];
    memcpy(v, r->steps > 1 ? r->ms + 1 : r->ms, (size_t)n * sizeof *v);
    const double m = rg_median(v, n);
    free(v);
    return m;
}

static bool report(const rg_opts *o, const train_run *r, rg_err *e) {
    const double med = median_ms(r), tps = med > 0 ? (double)(r->B * r->T) / med * 1e3 : 0;
    int64_t n_elems = 0;
    const int n = gml_trainer_n_params(r->tr);
    for (int i = 0; i < n; i++) n_elems += gml_nelements(gml_trainer_param(r->tr, i));
    const gml_graph *g = gml_trainer_graph(r->tr);
    if (o->json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "model", o->model);
        cJSON_AddStringToObject(j, "optimizer", o->sgd ? "sgd" : "adamw");
        cJSON_AddNumberToObject(j, "steps", r->steps);
        cJSON_AddNumberToObject(j, "batch", (double)r->B);
        cJSON_AddNumberToObject(j, "seq", (double)r->T);
        cJSON_AddNumberToObject(j, "vocab", (double)r->lm.n_vocab);
        cJSON_AddNumberToObject(j, "params", (double)n_elems);
        cJSON_AddNumberToObject(j, "param_tensors", n);
        cJSON_AddNumberToObject(j, "threads", o->threads);
        cJSON_AddStringToObject(j, "isa", gml_isa_name(gml_get_isa()));
        cJSON *l = cJSON_AddArrayToObject(j, "losses");
        for (int s = 0; s < r->steps; s++) cJSON_AddItemToArray(l, cJSON_CreateNumber((double)r->losses[s]));
        cJSON_AddNumberToObject(j, "first_step_ms", r->ms[0]);
        cJSON_AddNumberToObject(j, "median_ms", med);
        cJSON_AddNumberToObject(j, "tokens_per_s", tps);
        cJSON_AddNumberToObject(j, "flops_per_step", gml_graph_flops(g));
        cJSON_AddNumberToObject(j, "nodes", gml_graph_n_nodes(g));
        cJSON_AddNumberToObject(j, "peak_bytes", (double)gml_graph_plan_peak(g));
        return rg_json_print(j, e);
    }
    printf("train %s: %d step%s of B=%" PRId64 " T=%" PRId64 " (V=%" PRId64 "), %" PRId64
           " parameters in %d tensors, %s lr %g\n", o->model, r->steps, r->steps == 1 ? "" : "s", r->B, r->T,
           r->lm.n_vocab, n_elems, n, o->sgd ? "sgd" : "adamw", (double)o->lr);
    printf("loss    %.6f -> %.6f\n", (double)r->losses[0], (double)r->losses[r->steps - 1]);
    printf("time    %.3f ms/step median%s, %.0f tokens/s (%d thread%s, %s); first step %.3f ms\n", med,
           r->steps > 1 ? " (first excluded)" : "", tps, o->threads, o->threads == 1 ? "" : "s",
           gml_isa_name(gml_get_isa()), r->ms[0]);
    printf("memory  %.2f MiB planned for the step's graph (%d nodes)\n",
           (double)gml_graph_plan_peak(g) / (1 << 20), gml_graph_n_nodes(g));
    return true;
}

int rg_train_main(const rg_opts *o) {
    rg_err e = {0};
    train_run r = {0};
    /* the weights first: V checks the data */
    bool ok = load_model(o, &r, &e) && load_tokens(o, &r, &e) && train(o, &r, &e) && report(o, &r, &e);
    rg_stage_abort(&r.stage); /* after a commit: nothing left to remove */
    gml_trainer_free(r.tr);
    if (r.lm_found) gml_lm_free(&r.lm);
    gml_free(r.octx);
    gml_free(r.dctx);
    gml_free(r.wctx);
    free(r.losses);
    free(r.ms);
    if (ok) return 0;
    fprintf(stderr, "run-graph: %s\n", e.msg);
    return e.status ? e.status : RG_RUNTIME;
}
