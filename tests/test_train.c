/* The trainer (models/train.c, <ggmlite/train.h>) against PyTorch: every case
 * of tests/fixtures/train (argv[1]; written by tests/fixtures/gen_train.py:
 * whole GPT-2 and LLaMA LMs trained by torch.optim.AdamW / SGD on
 * cross_entropy, float32, checked there against the same training in
 * float64) is trained from init.safetensors on tokens.npy with the
 * hyper-parameters of its args, and must match
 *   each step's loss           within 1e-4 relative (losses.npy),
 *   the first step's gradients within 1e-4 (|g| + max|g| of the tensor) + 1e-7 (grads0),
 *   the final weights          within 1e-4 + 1e-3 |w| (final.safetensors),
 * under the reference kernels (1 thread) and the best ISA the CPU has at 1, 2,
 * 3, 4 and 7 threads, which must all give the same bits. The largest errors
 * are printed per case. Then the trainer's errors with their messages: ids
 * outside [0, V), a non-f32 weight, a GPT-2 position table shorter than T,
 * the optimizer's range checks, NULL arguments. */
#define _POSIX_C_SOURCE 200809L /* strtok_r */

#include <ggmlite/io.h>
#include <ggmlite/train.h>

#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL_LOSS 1e-4 /* relative */
#define TOL_W_ABS 1e-4
#define TOL_W_REL 1e-3
#define TOL_G 1e-4

/* ---- a case ------------------------------------------------------------------ */

typedef struct tcase {
    char dir[1024];
    gml_lm_config lm;
    gml_optim_params opt;
    int32_t *tokens; /* [S, B, T+1] */
    int64_t S, B, T;
    gml_context *losses, *grads0, *final;
} tcase;

/* args: run-graph train's command line ("train gpt2 --weights ... --lr 0.01 ..."). */
static bool parse_args(tcase *c) {
    char path[1100], line[1024] = "";
    snprintf(path, sizeof path, "%s/args", c->dir);
    FILE *f = fopen(path, "r");
    if (!f || !fgets(line, sizeof line, f)) {
        if (f) fclose(f);
        return CHECK(false, "%s: cannot read", path);
    }
    fclose(f);
    char *save = NULL, *tok = strtok_r(line, " \n", &save); /* "train" */
    tok = strtok_r(NULL, " \n", &save);
    c->lm = (gml_lm_config){.arch = tok && strcmp(tok, "gpt2") == 0 ? GML_LM_GPT2 : GML_LM_LLAMA};
    gml_optim_params o = {0};
    bool have_kind = false;
    while ((tok = strtok_r(NULL, " \n", &save))) {
        char *v = strtok_r(NULL, " \n", &save);
        if (!v) return CHECK(false, "%s: %s has no value", path, tok);
        if (!strcmp(tok, "--weights") || !strcmp(tok, "--data")) continue;
        if (!strcmp(tok, "--heads")) c->lm.gpt2.n_heads = c->lm.llama.n_heads = atoi(v);
        else if (!strcmp(tok, "--kv-heads")) c->lm.llama.n_kv_heads = atoi(v);
        else if (!strcmp(tok, "--rope-theta")) c->lm.llama.rope_theta = strtof(v, NULL);
        else if (!strcmp(tok, "--rms-eps")) c->lm.llama.rms_eps = strtof(v, NULL);
        else if (!strcmp(tok, "--optimizer")) {
            o = gml_optim_defaults(strcmp(v, "sgd") == 0 ? GML_OPTIM_SGD : GML_OPTIM_ADAMW);
            have_kind = true;
        } else if (!have_kind) return CHECK(false, "%s: %s before --optimizer", path, tok);
        else if (!strcmp(tok, "--lr")) o.lr = strtof(v, NULL);
        else if (!strcmp(tok, "--betas")) o.beta1 = strtof(v, &v), o.beta2 = strtof(v + 1, NULL);
        else if (!strcmp(tok, "--eps")) o.eps = strtof(v, NULL);
        else if (!strcmp(tok, "--weight-decay")) o.weight_decay = strtof(v, NULL);
        else if (!strcmp(tok, "--momentum")) o.momentum = strtof(v, NULL);
        else if (!strcmp(tok, "--clip-grad-norm")) o.clip_grad_norm = strtof(v, NULL);
        else return CHECK(false, "%s: unknown flag %s", path, tok);
    }
    c->opt = o;
    return CHECK(have_kind, "%s: no --optimizer", path);
}

/* tokens.npy, '<i4' or '<i8' [S, B, T+1] (as np.save writes them), as int32. */
static bool load_tokens(tcase *c) {
    char path[1100];
    snprintf(path, sizeof path, "%s/tokens.npy", c->dir);
    FILE *f = fopen(path, "rb");
    unsigned char head[10];
    if (!f || fread(head, 1, 10, f) != 10 || memcmp(head, "\x93NUMPY\x01", 7) != 0) {
        if (f) fclose(f);
        return CHECK(false, "%s: not a version 1 .npy", path);
    }
    const size_t hlen = (size_t)(head[8] | head[9] << 8);
    char *dict = calloc(hlen + 1, 1);
    bool ok = dict && fread(dict, 1, hlen, f) == hlen;
    const char *shape = ok ? strstr(dict, "'shape': (") : NULL;
    const int wide = ok && strstr(dict, "'<i8'") ? 8 : ok && strstr(dict, "'<i4'") ? 4 : 0;
    long long s = 0, b = 0, t1 = 0;
    ok = ok && shape && wide && sscanf(shape, "'shape': (%lld, %lld, %lld)", &s, &b, &t1) == 3;
    const size_t n = ok ? (size_t)(s * b * t1) : 0;
    unsigned char *raw = ok ? malloc(n * (size_t)wide) : NULL;
    c->tokens = ok ? malloc(n * sizeof *c->tokens) : NULL;
    ok = ok && raw && c->tokens && fread(raw, (size_t)wide, n, f) == n;
    for (size_t i = 0; ok && i < n; i++) {
        int64_t v = 0;
        if (wide == 8) memcpy(&v, raw + 8 * i, 8);
        else {
            int32_t w;
            memcpy(&w, raw + 4 * i, 4);
            v = w;
        }
        c->tokens[i] = (int32_t)v;
    }
    free(raw);
    free(dict);
    fclose(f);
    c->S = s, c->B = b, c->T = t1 - 1;
    return CHECK(ok, "%s: cannot read [S, B, T+1] int32/int64 tokens", path);
}

static gml_context *load_st(const char *dir, const char *file) {
    char path[1100], err[512] = "";
    snprintf(path, sizeof path, "%s/%s", dir, file);
    gml_context *ctx = gml_load_safetensors(path, err, sizeof err);
    CHECK(ctx != NULL, "%s", err);
    return ctx;
}

static bool load_case(const char *root, const char *name, tcase *c) {
    *c = (tcase){0};
    snprintf(c->dir, sizeof c->dir, "%s/%s", root, name);
    char path[1100], err[512] = "";
    snprintf(path, sizeof path, "%s/losses.npy", c->dir);
    c->losses = gml_load_npy(path, "losses", err, sizeof err);
    CHECK(c->losses != NULL, "%s", err);
    c->grads0 = load_st(c->dir, "grads0.safetensors");
    c->final = load_st(c->dir, "final.safetensors");
    return parse_args(c) && load_tokens(c) && c->losses && c->grads0 && c->final;
}

static void free_case(tcase *c) {
    free(c->tokens);
    gml_free(c->losses);
    gml_free(c->grads0);
    gml_free(c->final);
}

/* ---- a training run ---------------------------------------------------------- */

typedef struct result {
    int n;              /* parameters */
    float *losses;      /* [S] */
    float **grads0;     /* [n]: dense copies of the first step's gradients */
    float **final;      /* [n]: the parameters after training */
    int64_t *count;     /* [n]: elements */
    char (*name)[GML_MAX_NAME];
} result;

static void free_result(result *r) {
    for (int i = 0; i < r->n; i++) free(r->grads0[i]), free(r->final[i]);
    free(r->grads0), free(r->final), free(r->count), free(r->name), free(r->losses);
    *r = (result){0};
}

static float *dense_copy(const gml_tensor *t) {
    float *v = malloc((size_t)gml_nelements(t) * sizeof *v);
    if (v) memcpy(v, t->data, (size_t)gml_nelements(t) * sizeof *v); /* f32 contiguous */
    return v;
}

/* Trains c from its init.safetensors; false (a failure recorded) when a
 * library call fails. */
static bool run_case(const tcase *c, int n_threads, result *r) {
    *r = (result){0};
    char err[1024] = "";
    gml_context *w = load_st(c->dir, "init.safetensors");
    gml_lm lm;
    if (!w) return false;
    if (!CHECK(gml_lm_find(w, &c->lm, &lm, err, sizeof err) == GML_OK, "gml_lm_find: %s", err)) {
        gml_free(w);
        return false;
    }
    const gml_trainer_config cfg = {.batch = c->B, .seq = c->T, .optim = c->opt};
    gml_trainer *tr = gml_trainer_new(&lm, w, &cfg, err, sizeof err);
    bool ok = CHECK(tr != NULL, "gml_trainer_new: %s", err);
    const int64_t BT = c->B * c->T;
    int32_t *x = malloc((size_t)BT * 2 * sizeof *x), *y = x + BT;
    r->losses = calloc((size_t)c->S, sizeof *r->losses);
    for (int64_t s = 0; ok && s < c->S; s++) {
        for (int64_t b = 0; b < c->B; b++) {
            const int32_t *row = c->tokens + (s * c->B + b) * (c->T + 1);
            memcpy(x + b * c->T, row, (size_t)c->T * sizeof *x);
            memcpy(y + b * c->T, row + 1, (size_t)c->T * sizeof *y);
        }
        ok = CHECK(gml_trainer_step(tr, x, y, n_threads, &r->losses[s]) == GML_OK, "step %lld: %s",
                   (long long)s, gml_trainer_error(tr));
        if (ok && s == 0) { /* the first step's gradients, before the next step overwrites them */
            r->n = gml_trainer_n_params(tr);
            r->grads0 = calloc((size_t)r->n, sizeof *r->grads0);
            r->final = calloc((size_t)r->n, sizeof *r->final);
            r->count = calloc((size_t)r->n, sizeof *r->count);
            r->name = calloc((size_t)r->n, sizeof *r->name);
            for (int i = 0; i < r->n; i++) {
                const gml_tensor *g = gml_trainer_grad(tr, i);
                CHECK(g && g->type == GML_F32 && gml_is_contiguous(g) &&
                          gml_same_shape(g, gml_trainer_param(tr, i)),
                      "gradient %d: not f32 contiguous of its parameter's shape", i);
                r->grads0[i] = dense_copy(g);
                r->count[i] = gml_nelements(g);
                snprintf(r->name[i], GML_MAX_NAME, "%s", gml_trainer_param(tr, i)->name);
            }
        }
    }
    for (int i = 0; ok && i < r->n; i++) r->final[i] = dense_copy(gml_trainer_param(tr, i));
    free(x);
    gml_trainer_free(tr);
    gml_lm_free(&lm);
    gml_free(w);
    return ok;
}

/* ---- the checks ---------------------------------------------------------------- */

static void check_against_torch(const tcase *c, const result *r, const char *config) {
    const float *want_loss = gml_get_first_tensor(c->losses)->data;
    double loss_err = 0, g_err = 0, w_err = 0;
    for (int64_t s = 0; s < c->S; s++) {
        const double e = fabs((double)r->losses[s] - want_loss[s]) / fabs((double)want_loss[s]);
        if (!(e <= loss_err)) loss_err = e;
        CHECK(e <= TOL_LOSS, "%s: step %lld: loss %.8g, torch %.8g (relative error %.2g > %g)", config,
              (long long)s, (double)r->losses[s], (double)want_loss[s], e, TOL_LOSS);
    }
    int n_torch = 0;
    for (gml_tensor *t = gml_get_first_tensor(c->final); t; t = gml_get_next_tensor(c->final, t)) n_torch++;
    CHECK(r->n == n_torch, "%s: %d parameters, torch has %d", config, r->n, n_torch);
    for (int i = 0; i < r->n; i++) {
        const gml_tensor *gw = gml_get_tensor(c->grads0, r->name[i]), *fw = gml_get_tensor(c->final, r->name[i]);
        if (!CHECK(gw && fw && gml_nelements(gw) == r->count[i] && gml_nelements(fw) == r->count[i],
                   "%s: parameter '%s' is not in torch's files with its size", config, r->name[i]))
            continue;
        const float *g = gw->data, *f = fw->data;
        double gmax = 0;
        for (int64_t k = 0; k < r->count[i]; k++) gmax = fmax(gmax, fabs((double)g[k]));
        for (int64_t k = 0; k < r->count[i]; k++) {
            const double eg = fabs((double)r->grads0[i][k] - g[k]) / (TOL_G * (fabs((double)g[k]) + gmax) + 1e-7);
            const double ew = fabs((double)r->final[i][k] - f[k]) / (TOL_W_ABS + TOL_W_REL * fabs((double)f[k]));
            if (!(eg <= g_err)) g_err = eg;
            if (!(ew <= w_err)) w_err = ew;
            CHECK(eg <= 1, "%s: grad of %s[%lld]: %.8g, torch %.8g", config, r->name[i], (long long)k,
                  (double)r->grads0[i][k], (double)g[k]);
            CHECK(ew <= 1, "%s: final %s[%lld]: %.8g, torch %.8g (allowed %.3g)", config, r->name[i], (long long)k,
                  (double)r->final[i][k], (double)f[k], TOL_W_ABS + TOL_W_REL * fabs((double)f[k]));
        }
    }
    printf("  %-26s losses %.1e relative; grads %.3f, final weights %.3f of the tolerance\n", config, loss_err,
           g_err, w_err);
}

static void check_same_bits(const result *a, const result *b, int64_t S, const char *config) {
    if (!CHECK(a->n == b->n, "%s: %d parameters vs %d", config, b->n, a->n)) return;
    CHECK(memcmp(a->losses, b->losses, (size_t)S * sizeof(float)) == 0, "%s: losses differ from 1 thread's", config);
    for (int i = 0; i < a->n; i++) {
        CHECK(memcmp(a->grads0[i], b->grads0[i], (size_t)a->count[i] * 4) == 0,
              "%s: the gradient of %s differs from 1 thread's", config, a->name[i]);
        CHECK(memcmp(a->final[i], b->final[i], (size_t)a->count[i] * 4) == 0,
              "%s: the trained %s differs from 1 thread's", config, a->name[i]);
    }
}

static void test_case(const char *root, const char *name) {
    chk_case("%s", name);
    tcase c;
    if (!load_case(root, name, &c)) {
        free_case(&c);
        return;
    }
    printf("%s: S=%lld B=%lld T=%lld\n", name, (long long)c.S, (long long)c.B, (long long)c.T);
    const gml_isa best = gml_get_isa();
    /* the reference kernels, one thread */
    result r;
    gml_set_isa(GML_ISA_REFERENCE);
    if (run_case(&c, 1, &r)) check_against_torch(&c, &r, "reference, 1 thread");
    free_result(&r);
    gml_set_isa(best);
    static const int THREADS[] = {1, 2, 3, 4, 7};
    result first;
    for (int k = 0; k < 5; k++) {
        char config[64];
        snprintf(config, sizeof config, "%s, %d thread%s", gml_isa_name(best), THREADS[k], THREADS[k] > 1 ? "s" : "");
        if (!run_case(&c, THREADS[k], k ? &r : &first)) break;
        if (k == 0) check_against_torch(&c, &first, config);
        else {
            check_same_bits(&first, &r, c.S, config);
            free_result(&r);
        }
    }
    free_result(&first);
    free_case(&c);
}

/* ---- the errors ----------------------------------------------------------------- */

static bool has(const char *msg, const char *part) {
    return CHECK(strstr(msg, part) != NULL, "message '%s' lacks '%s'", msg, part);
}

static void test_errors(const char *root) {
    chk_case("errors");
    tcase c;
    if (!load_case(root, "gpt2_adamw", &c)) {
        free_case(&c);
        return;
    }
    char err[1024] = "";
    gml_context *w = load_st(c.dir, "init.safetensors");
    gml_lm lm;
    if (!w || !CHECK(gml_lm_find(w, &c.lm, &lm, err, sizeof err) == GML_OK, "%s", err)) {
        gml_free(w);
        free_case(&c);
        return;
    }
    /* a GPT-2 whose positions table is shorter than T (wpe has 11 rows) */
    gml_trainer_config cfg = {.batch = 2, .seq = 12, .optim = c.opt};
    CHECK(gml_trainer_new(&lm, w, &cfg, err, sizeof err) == NULL, "seq 12 > n_ctx 11 accepted");
    has(err, "seq 12"), has(err, "wpe.weight has 11 rows");
    cfg.seq = 0;
    CHECK(gml_trainer_new(&lm, w, &cfg, err, sizeof err) == NULL, "seq 0 accepted");
    has(err, "seq 0");
    /* the optimizer's own range checks come through */
    cfg = (gml_trainer_config){.batch = 2, .seq = 7, .optim = c.opt};
    cfg.optim.beta1 = 1.5f;
    CHECK(gml_trainer_new(&lm, w, &cfg, err, sizeof err) == NULL, "beta1 1.5 accepted");
    has(err, "gml_trainer_new: gml_optim_new");
    /* ids outside [0, V): refused before computing, named with where they are and V */
    cfg.optim = c.opt;
    gml_trainer *tr = gml_trainer_new(&lm, w, &cfg, err, sizeof err);
    if (CHECK(tr != NULL, "gml_trainer_new: %s", err)) {
        int32_t x[14] = {0}, y[14] = {0};
        const float before = ((const float *)gml_trainer_param(tr, 0)->data)[0];
        y[9] = 37;
        CHECK(gml_trainer_step(tr, x, y, 2, NULL) == GML_ERR_INVALID, "target 37 (V 37) accepted");
        has(gml_trainer_error(tr), "target 37 at [1, 2] is outside [0, V) (V = 37)");
        y[9] = 0, x[3] = -1;
        CHECK(gml_trainer_step(tr, x, y, 2, NULL) == GML_ERR_INVALID, "token -1 accepted");
        has(gml_trainer_error(tr), "token -1 at [0, 3]");
        CHECK(gml_trainer_grad(tr, 0) == NULL, "a gradient before the first step");
        CHECK(((const float *)gml_trainer_param(tr, 0)->data)[0] == before, "a refused step updated a weight");
        x[3] = 0;
        float loss = 0;
        CHECK(gml_trainer_step(tr, x, y, 2, &loss) == GML_OK && gml_trainer_error(tr)[0] == '\0',
              "a good step after refused ones: %s", gml_trainer_error(tr));
        CHECK(loss > 0 && gml_trainer_grad_norm(tr) > 0, "loss %g, grad norm %g", (double)loss,
              (double)gml_trainer_grad_norm(tr));
        CHECK(gml_trainer_step(tr, x, y, 0, NULL) == GML_ERR_INVALID, "0 threads accepted");
        has(gml_trainer_error(tr), "n_threads 0");
        CHECK(gml_trainer_param(tr, -1) == NULL && gml_trainer_grad(tr, gml_trainer_n_params(tr)) == NULL,
              "parameters outside [0, n)");
        gml_trainer_free(tr);
    }
    gml_lm_free(&lm);
    gml_free(w);
    /* a weight that is not f32: named, with its type */
    gml_context *h = gml_init((gml_init_params){.mem_size = 1 << 16});
    gml_tensor *t16 = gml_set_name(gml_new_tensor_1d(h, GML_F16, 4), "ln_f.bias");
    memset(t16->data, 0, 8);
    CHECK(gml_trainer_new(&(gml_lm){.n_vocab = 4}, h, &(gml_trainer_config){.batch = 1, .seq = 1}, err, sizeof err) ==
              NULL,
          "an f16 weight accepted");
    has(err, "'ln_f.bias' is f16");
    gml_free(h);
    /* NULL arguments */
    CHECK(gml_trainer_new(NULL, NULL, NULL, err, sizeof err) == NULL, "NULL lm accepted");
    has(err, "gml_trainer_new: lm is NULL");
    CHECK(gml_trainer_step(NULL, NULL, NULL, 1, NULL) == GML_ERR_INVALID, "NULL trainer stepped");
    has(gml_last_error(NULL), "gml_trainer_step: tr is NULL");
    CHECK(gml_trainer_n_params(NULL) == 0 && gml_trainer_param(NULL, 0) == NULL && gml_trainer_grad(NULL, 0) == NULL &&
              gml_trainer_graph(NULL) == NULL && gml_trainer_grad_norm(NULL) == 0,
          "NULL trainer");
    gml_trainer_free(NULL);
    free_case(&c);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_train tests/fixtures/train\n");
        return 2;
    }
    char path[1100], name[256];
    snprintf(path, sizeof path, "%s/CASES", argv[1]);
    FILE *f = fopen(path, "r");
    if (!CHECK(f != NULL, "%s: cannot open", path)) return chk_summary();
    int n = 0;
    while (fscanf(f, "%255s", name) == 1) test_case(argv[1], name), n++;
    fclose(f);
    CHECK(n >= 4, "%s lists %d cases", path, n);
    test_errors(argv[1]);
    return chk_summary();
}
