/* Whole language models (models/lm.c, <ggmlite/lm.h>) against PyTorch: every
 * case of tests/fixtures/lm (argv[1]; written by tests/fixtures/gen_lm.py as
 * HF's GPT2LMHeadModel and LlamaForCausalLM compute, checked there against
 * float64 loops) is loaded with the library's loader, bound by its HF names
 * with gml_lm_find (prefix or none, tied head or lm_head.weight, layers
 * counted), run under the reference kernels and the best ISA the CPU has at
 * 1, 2, 3, 4 and 7 threads (bitwise equal across thread counts), with the
 * tokens contiguous and as a transposed and a sliced view, and must match
 * logits.npy within 2e-4 + 2e-4 |want|. Max errors are printed per case.
 * Then the binding's and the builder's errors, with their messages. */
#define _POSIX_C_SOURCE 200809L /* strtok_r */

#include <ggmlite/io.h>
#include <ggmlite/lm.h>

#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL_ABS 2e-4
#define TOL_REL 2e-4

static const char *const CASES[] = {"gpt2_tied", "gpt2_head", "llama_tied", "llama_head"};

/* args: "gpt2 --heads H" or "llama --heads H --kv-heads G --rope-theta T --rms-eps E" */
static bool parse_args(const char *path, gml_lm_config *c) {
    *c = (gml_lm_config){0};
    FILE *f = fopen(path, "r");
    char line[512] = "";
    if (!f || !fgets(line, sizeof line, f)) {
        if (f) fclose(f);
        return CHECK(false, "%s: cannot read", path);
    }
    fclose(f);
    char *save = NULL, *tok = strtok_r(line, " \n", &save);
    c->arch = tok && strcmp(tok, "gpt2") == 0 ? GML_LM_GPT2 : GML_LM_LLAMA;
    while ((tok = strtok_r(NULL, " \n", &save))) {
        char *v = strtok_r(NULL, " \n", &save);
        if (!v) return CHECK(false, "%s: %s has no value", path, tok);
        if (!strcmp(tok, "--heads")) c->gpt2.n_heads = c->llama.n_heads = atoi(v);
        else if (!strcmp(tok, "--kv-heads")) c->llama.n_kv_heads = atoi(v);
        else if (!strcmp(tok, "--rope-theta")) c->llama.rope_theta = strtof(v, NULL);
        else if (!strcmp(tok, "--rms-eps")) c->llama.rms_eps = strtof(v, NULL);
        else return CHECK(false, "%s: unknown flag %s", path, tok);
    }
    return true;
}

typedef struct verify_data {
    const gml_tensor *out;
    const float *want;
    int64_t n;
    double max_abs, max_scale, worst; /* worst: max |d| / (atol + rtol |want|) */
} verify_data;

static void verify(void *user) {
    verify_data *v = user;
    float *got = chk_dense(v->out);
    for (int64_t i = 0; i < v->n; i++) {
        const double d = fabs((double)got[i] - v->want[i]);
        if (!(d <= v->max_abs)) v->max_abs = d; /* NaN sticks */
        const double r = d / (TOL_ABS + TOL_REL * fabs(v->want[i]));
        if (!(r <= v->worst)) v->worst = r;
        if (fabs(v->want[i]) > v->max_scale) v->max_scale = fabs(v->want[i]);
    }
    free(got);
}

/* Loads a case's weights, tokens and logits; NULL contexts on failure. */
typedef struct fixture {
    gml_context *w, *tok, *logits;
    gml_lm_config cfg;
} fixture;

static bool load(const char *root, const char *name, fixture *f) {
    char path[1024], err[512] = "";
    *f = (fixture){0};
    snprintf(path, sizeof path, "%s/%s/args", root, name);
    if (!parse_args(path, &f->cfg)) return false;
    snprintf(path, sizeof path, "%s/%s/weights.safetensors", root, name);
    f->w = gml_load_safetensors(path, err, sizeof err);
    if (f->w) {
        snprintf(path, sizeof path, "%s/%s/tokens.npy", root, name);
        f->tok = gml_load_npy(path, "tokens", err, sizeof err);
    }
    if (f->tok) {
        snprintf(path, sizeof path, "%s/%s/logits.npy", root, name);
        f->logits = gml_load_npy(path, "logits", err, sizeof err);
    }
    return CHECK(f->logits, "%s: %s", name, err);
}

static void unload(fixture *f) {
    gml_free(f->w);
    gml_free(f->tok);
    gml_free(f->logits);
    *f = (fixture){0};
}

static void run_case(const char *root, const char *name) {
    chk_case("%s", name);
    fixture f;
    if (!load(root, name, &f)) {
        unload(&f);
        return;
    }
    char err[1024] = "";
    gml_lm lm;
    if (!CHECK(gml_lm_find(f.w, &f.cfg, &lm, err, sizeof err) == GML_OK, "%s: %s", name, err)) {
        unload(&f);
        return;
    }
    const gml_tensor *tok0 = gml_get_first_tensor(f.tok), *want = gml_get_first_tensor(f.logits);
    const bool gpt2 = f.cfg.arch == GML_LM_GPT2;
    const bool tied = strstr(name, "tied") != NULL;
    /* what the binding found: the case's layer count, sizes and head */
    CHECK(lm.n_layers == (strcmp(name, "gpt2_tied") == 0 || strcmp(name, "llama_tied") == 0 ? 2 : 1),
          "%s: n_layers %d", name, lm.n_layers);
    CHECK(lm.n_vocab == want->ne[3] && lm.d_model == lm.tok_emb->ne[3], "%s: V %lld", name,
          (long long)lm.n_vocab);
    CHECK(tied ? lm.head == lm.tok_emb : lm.head == gml_get_tensor(f.w, "lm_head.weight"),
          "%s: head '%s'", name, lm.head ? lm.head->name : "(null)");
    CHECK(gpt2 ? lm.gpt2 && !lm.llama && lm.pos_emb && lm.n_ctx == lm.pos_emb->ne[2] && lm.norm_b
               : lm.llama && !lm.gpt2 && !lm.pos_emb && lm.n_ctx == 0 && !lm.norm_b,
          "%s: the arch's fields", name);
    const int64_t B = tok0->ne[2], T = tok0->ne[3];
    const chk_layout lays[] = {CHK_CONTIGUOUS, CHK_TRANSPOSED, CHK_SLICED};
    for (size_t l = 0; l < sizeof lays / sizeof *lays; l++) {
        gml_context *ctx = chk_ctx(32 << 20);
        gml_tensor *tok = chk_new_layout(ctx, GML_I32, 2, (int64_t[]){B, T}, lays[l], "tokens");
        chk_write(tok, tok0->data);
        gml_tensor *y = gml_lm_logits(ctx, &lm, tok);
        gml_graph *g = y ? gml_build_graph(ctx, &y, 1) : NULL;
        if (CHECK(g, "%s: %s", name, gml_last_error(ctx))) {
            CHECK(y->n_dims == 3 && y->ne[1] == B && y->ne[2] == T && y->ne[3] == lm.n_vocab,
                  "%s: logits shape", name);
            verify_data v = {.out = y, .want = want->data, .n = gml_nelements(want)};
            CHECK_RUN(g, .outs = &y, .n_outs = 1, .verify = verify, .user = &v);
            CHECK(v.worst <= 1.0, "%s (%s tokens): max error %.3g over the tolerance (x%.3g)", name,
                  chk_layout_name(lays[l]), v.max_abs, v.worst);
            if (l == 0)
                printf("%-11s logits [%lld,%lld,%lld]: max |err| %.2e (%.2e of max |want| %.2f; "
                       "%.3f of the tolerance)\n", name, (long long)B, (long long)T,
                       (long long)lm.n_vocab, v.max_abs, v.max_abs / v.max_scale, v.max_scale, v.worst);
            gml_graph_free(g);
        }
        gml_free(ctx);
    }
    gml_lm_free(&lm);
    CHECK(!lm.gpt2 && !lm.llama && lm.n_layers == 0, "gml_lm_free zeroes");
    unload(&f);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s tests/fixtures/lm\n", argv[0]);
        return 2;
    }
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) run_case(argv[1], CASES[i]);
    return chk_summary();
}
