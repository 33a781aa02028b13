/* Whole language models (models/lm.c, <ggmlite/lm.h>) against PyTorch: every
 * case of tests/fixtures/lm (argv[1]; written by tests/fixtures/gen_lm.py as
 * HF's GPT2LMHeadModel and LlamaForCausalLM compute, checked there against
 * float64 loops) is loaded with the library's loader, bound by its HF names
 * with gml_lm_find (prefix or none, tied head or lm_head.weight, layers
 * counted), run under the reference kernels and the best ISA the CPU has at
 * 1, 2, 3, 4 and 7 threads (bitwise equal across thread counts), with the
 * tokens contiguous and as a transposed and a sliced view, and must match
 * logits.npy within 2e-4 + 2e-4 |want|. Max errors are printed per case.
 * f16 and bf16 matrices give the bits of f32 ones holding their values.
 * Then the binding's and the builder's errors, with their messages, and
 * gml_grad through tiny whole models against finite differences. */
#define _POSIX_C_SOURCE 200809L /* strtok_r */

#include <ggmlite/io.h>
#include <ggmlite/lm.h>

#include "check.h"
#include "grad_check.h"

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

/* ---- a tiny model --------------------------------------------------------------- */

/* Sizes of the tiny models: V 11, D 8, H 2 (LLaMA: G 1, hd 4), F 12 (GPT-2: 4D
 * = 32 as HF's default n_inner), n_ctx 6. */
enum { TV = 11, TD = 8, TF = 12, TCTX = 6 };

typedef struct tspec {
    const char *name;
    int64_t rows, cols; /* cols 0: 1-D */
    float bound, base;  /* values base +- bound */
} tspec;

/* A tiny model's weights under their HF names (prefix + ...), random: norms
 * 1 +- 0.2, biases +- 0.2, matrices +- 1/sqrt(in), embeddings +- 1. odd:
 * one tensor (full name) made one longer in its first dim ("name:cols": in
 * its last, "name:1d": made 1-D, "name:i32": made i32), or NULL. */
static gml_context *tiny_weights(gml_lm_arch arch, const char *prefix, int layers, bool tied,
                                 const char *odd, chk_rng *r) {
    gml_context *w = chk_ctx(1 << 20);
    tspec t[64];
    int n = 0;
#define T_(nm, a, b, bd, bs) t[n++] = (tspec){nm, a, b, bd, bs}
    char names[64][96];
    const bool gpt2 = arch == GML_LM_GPT2;
    if (gpt2) {
        T_("wte.weight", TV, TD, 1.0f, 0);
        T_("wpe.weight", TCTX, TD, 0.5f, 0);
    } else {
        T_("embed_tokens.weight", TV, TD, 1.0f, 0);
    }
    for (int l = 0; l < layers; l++) {
        static const tspec G2[] = {{"ln_1.weight", TD, 0, 0.2f, 1},       {"ln_1.bias", TD, 0, 0.2f, 0},
                  {"attn.c_attn.weight", TD, 3 * TD, 0.35f, 0}, {"attn.c_attn.bias", 3 * TD, 0, 0.2f, 0},
                  {"attn.c_proj.weight", TD, TD, 0.35f, 0},     {"attn.c_proj.bias", TD, 0, 0.2f, 0},
                  {"ln_2.weight", TD, 0, 0.2f, 1},       {"ln_2.bias", TD, 0, 0.2f, 0},
                  {"mlp.c_fc.weight", TD, 4 * TD, 0.35f, 0},    {"mlp.c_fc.bias", 4 * TD, 0, 0.2f, 0},
                  {"mlp.c_proj.weight", 4 * TD, TD, 0.18f, 0},  {"mlp.c_proj.bias", TD, 0, 0.2f, 0}},
          LL[] = {{"input_layernorm.weight", TD, 0, 0.2f, 1},
                  {"self_attn.q_proj.weight", TD, TD, 0.35f, 0},
                  {"self_attn.k_proj.weight", TD / 2, TD, 0.35f, 0},
                  {"self_attn.v_proj.weight", TD / 2, TD, 0.35f, 0},
                  {"self_attn.o_proj.weight", TD, TD, 0.35f, 0},
                  {"post_attention_layernorm.weight", TD, 0, 0.2f, 1},
                  {"mlp.gate_proj.weight", TF, TD, 0.35f, 0},
                  {"mlp.up_proj.weight", TF, TD, 0.35f, 0},
                  {"mlp.down_proj.weight", TD, TF, 0.29f, 0}};
        const int m = gpt2 ? 12 : 9;
        for (int k = 0; k < m; k++) {
            snprintf(names[n], sizeof names[n], "%s.%d.%s", gpt2 ? "h" : "layers", l,
                     gpt2 ? G2[k].name : LL[k].name);
            const tspec *s = gpt2 ? &G2[k] : &LL[k];
            const char *nm = names[n];
            T_(nm, s->rows, s->cols, s->bound, s->base);
        }
    }
    if (gpt2) {
        T_("ln_f.weight", TD, 0, 0.2f, 1);
        T_("ln_f.bias", TD, 0, 0.2f, 0);
    } else {
        T_("norm.weight", TD, 0, 0.2f, 1);
    }
    if (!tied) T_("lm_head.weight", TV, TD, 0.35f, 0);
#undef T_
    for (int i = 0; i < n; i++) {
        char full[128];
        snprintf(full, sizeof full, "%s%s", strcmp(t[i].name, "lm_head.weight") ? prefix : "", t[i].name);
        const size_t fl = strlen(full);
        const bool hit = odd && strncmp(odd, full, fl) == 0 && (odd[fl] == '\0' || odd[fl] == ':');
        const bool one_d = hit && strcmp(odd + fl, ":1d") == 0, i32 = hit && strcmp(odd + fl, ":i32") == 0;
        const bool wide = hit && strcmp(odd + fl, ":cols") == 0;
        const int64_t rows = t[i].rows + (hit && !one_d && !i32 && !wide);
        gml_tensor *x = t[i].cols && !one_d
                            ? gml_new_tensor_2d(w, GML_F32, rows, t[i].cols + wide)
                            : gml_new_tensor_1d(w, i32 ? GML_I32 : GML_F32, rows);
        gml_set_name(x, full);
        if (x->type == GML_F32) chk_fill_uniform(x, r, t[i].base - t[i].bound, t[i].base + t[i].bound);
        else chk_fill_int(x, r, 0, 3);
    }
    return w;
}

/* ---- half-precision weights ------------------------------------------------------ */

/* The case's weights with every matrix in f16 (GPT-2) or bf16 (LLaMA),
 * vectors f32, bound and run, against the same model with f32 matrices
 * holding the rounded values: the same bits (get_rows converts rows exactly;
 * matmul over more than 4 rows gives what an f32 b of the converted values
 * gives), at 1-4 and 7 threads. */
static void half_case(const char *root, const char *name, gml_type half) {
    chk_case("%s, %s matrices", name, gml_type_name(half));
    fixture f;
    if (!load(root, name, &f)) {
        unload(&f);
        return;
    }
    gml_context *wh = chk_ctx(2 << 20), *wr = chk_ctx(2 << 20);
    for (gml_tensor *t = gml_get_first_tensor(f.w); t; t = gml_get_next_tensor(f.w, t)) {
        const bool mat = t->n_dims == 2;
        gml_tensor *h = gml_new_tensor(wh, mat ? half : GML_F32, t->n_dims, t->ne + GML_MAX_DIMS - t->n_dims);
        gml_tensor *r = gml_new_tensor(wr, GML_F32, t->n_dims, t->ne + GML_MAX_DIMS - t->n_dims);
        gml_set_name(h, t->name);
        gml_set_name(r, t->name);
        const float *src = t->data;
        for (int64_t i = 0; i < gml_nelements(t); i++) {
            float v = src[i];
            if (mat) {
                const uint16_t b = half == GML_F16 ? gml_fp32_to_fp16(v) : gml_fp32_to_bf16(v);
                memcpy((uint16_t *)h->data + i, &b, 2);
                v = half == GML_F16 ? gml_fp16_to_fp32(b) : gml_bf16_to_fp32(b);
            } else {
                ((float *)h->data)[i] = v;
            }
            ((float *)r->data)[i] = v;
        }
    }
    char err[1024] = "";
    gml_lm lh, lr;
    const bool ok_h = CHECK(gml_lm_find(wh, &f.cfg, &lh, err, sizeof err) == GML_OK, "%s: %s", name, err);
    const bool ok_r = CHECK(gml_lm_find(wr, &f.cfg, &lr, err, sizeof err) == GML_OK, "%s: %s", name, err);
    if (ok_h && ok_r) {
        CHECK(lh.tok_emb->type == half && lh.head->type == half, "%s: half embedding and head", name);
        const gml_tensor *tok0 = gml_get_first_tensor(f.tok);
        gml_context *ctx = chk_ctx(32 << 20);
        gml_tensor *tok = gml_set_name(gml_new_tensor(ctx, GML_I32, 2, tok0->ne + 2), "tokens");
        memcpy(tok->data, tok0->data, (size_t)gml_nelements(tok0) * sizeof(int32_t));
        gml_tensor *y[2] = {gml_lm_logits(ctx, &lh, tok), gml_lm_logits(ctx, &lr, tok)};
        gml_graph *g = y[0] && y[1] ? gml_build_graph(ctx, y, 2) : NULL;
        if (CHECK(g, "%s: %s", name, gml_last_error(ctx))) {
            CHECK_RUN(g, .outs = y, .n_outs = 2);
            CHECK(memcmp(y[0]->data, y[1]->data, gml_nbytes(y[0])) == 0,
                  "%s: %s matrices differ from f32 ones of the rounded values", name,
                  gml_type_name(half));
            gml_graph_free(g);
        }
        gml_free(ctx);
    }
    gml_lm_free(&lh);
    gml_lm_free(&lr);
    gml_free(wh);
    gml_free(wr);
    unload(&f);
}

/* ---- errors ------------------------------------------------------------------ */

/* Renames tensor `from` of wctx to `to` (the test's way to drop, add or move one). */
static void rename_t(gml_context *wctx, const char *from, const char *to) {
    gml_tensor *t = gml_get_tensor(wctx, from);
    if (CHECK(t, "no tensor %s", from)) gml_set_name(t, to);
}

/* gml_lm_find on the case's weights after renames (pairs from, to; NULL ends):
 * must fail with a message containing want (and *lm zeroed). */
static void find_fails(const char *root, const char *name, const char *const *renames,
                       const gml_lm_config *cfg, const char *want) {
    fixture f;
    if (load(root, name, &f)) {
        for (int i = 0; renames && renames[i]; i += 2) rename_t(f.w, renames[i], renames[i + 1]);
        char err[1024] = "";
        gml_lm lm;
        lm.n_layers = 99;
        CHECK(gml_lm_find(f.w, cfg ? cfg : &f.cfg, &lm, err, sizeof err) == GML_ERR_INVALID,
              "%s: binds after renames (want \"%s\")", name, want);
        CHECK_CONTAINS(err, want);
        CHECK(lm.n_layers == 0 && !lm.gpt2 && !lm.llama && !lm.tok_emb, "%s: *lm zeroed", name);
        gml_lm_free(&lm);
    }
    unload(&f);
}

static void errors(const char *root) {
    chk_case("binding errors");
    /* the other architecture's names: all of them unknown, its own missing */
    const gml_lm_config gpt2 = {.arch = GML_LM_GPT2, .gpt2 = {.n_heads = 6}};
    const gml_lm_config llama = {.arch = GML_LM_LLAMA, .llama = {.n_heads = 5}};
    find_fails(root, "llama_tied", NULL, &gpt2,
               "gpt2 lm: missing wte.weight, wpe.weight, ln_f.weight, ln_f.bias, h.0.* (no layer); "
               "not gpt2 lm tensors: model.embed_tokens.weight, model.layers.0.input_layernorm.weight");
    find_fails(root, "gpt2_head", NULL, &llama,
               "llama lm: missing embed_tokens.weight, norm.weight, layers.0.* (no layer); not "
               "llama lm tensors: wte.weight, wpe.weight, h.0.ln_1.weight");
    /* a missing top-level tensor, an unknown one, both */
    find_fails(root, "gpt2_tied", (const char *[]){"transformer.ln_f.bias", "transformer.ln_f.b", NULL},
               NULL, "gpt2 lm: missing transformer.ln_f.bias; not gpt2 lm tensors: transformer.ln_f.b");
    find_fails(root, "llama_head", (const char *[]){"norm.weight", "final_norm.weight", NULL}, NULL,
               "llama lm: missing norm.weight; not llama lm tensors: final_norm.weight");
    find_fails(root, "gpt2_head", (const char *[]){"lm_head.weight", "lm_head.bias", NULL}, NULL,
               "gpt2 lm: tensor not of a gpt2 lm: lm_head.bias");
    /* the prefix is all or nothing: one tensor without it is unknown (and missing with it) */
    find_fails(root, "llama_tied", (const char *[]){"model.norm.weight", "norm.weight", NULL}, NULL,
               "llama lm: missing model.norm.weight; not llama lm tensors: norm.weight");
    /* lm_head is never prefixed (HF's state_dict) */
    find_fails(root, "gpt2_head", (const char *[]){"lm_head.weight", "h.lm_head.weight", NULL}, NULL,
               "gpt2 lm: tensor not of a gpt2 lm: h.lm_head.weight");
    /* a layer's own tensor missing or unknown: that layer's binding names it */
    find_fails(root, "gpt2_tied",
               (const char *[]){"transformer.h.1.mlp.c_fc.bias", "transformer.h.1.mlp.c_fc.b", NULL},
               NULL, "gpt2 lm: gpt2 weights: missing transformer.h.1.mlp.c_fc.bias; not gpt2 weights: "
                     "transformer.h.1.mlp.c_fc.b");
    find_fails(root, "llama_tied",
               (const char *[]){"model.layers.1.self_attn.q_proj.weight",
                                "model.layers.1.self_attn.q_norm.weight", NULL},
               NULL, "llama lm: llama weights: missing model.layers.1.self_attn.q_proj.weight; not "
                     "llama weights: model.layers.1.self_attn.q_norm.weight");
    /* layers counted: a gap is named, an index past the tensor count too,
     * and names that are not a layer's (a leading zero, no index) are unknown */
    {
        static const char *const L1[] = {"input_layernorm.weight", "self_attn.q_proj.weight",
                                         "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                         "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                                         "mlp.gate_proj.weight", "mlp.up_proj.weight",
                                         "mlp.down_proj.weight"};
        const char *ren[2 * 9 + 1];
        char from[9][96], to[9][96];
        for (int i = 0; i < 9; i++) {
            snprintf(from[i], sizeof from[i], "model.layers.1.%s", L1[i]);
            snprintf(to[i], sizeof to[i], "model.layers.3.%s", L1[i]);
            ren[2 * i] = from[i], ren[2 * i + 1] = to[i];
        }
        ren[18] = NULL;
        find_fails(root, "llama_tied", ren, NULL,
                   "llama lm: 4 layers (up to model.layers.3.*) but no tensor of model.layers.1.*, "
                   "model.layers.2.*");
    }
    find_fails(root, "gpt2_head", (const char *[]){"h.0.ln_1.weight", "h.12345.ln_1.weight", NULL},
               NULL, "gpt2 lm: h.12345.* found but only 17 tensors: layers 0..12345 cannot all be there");
    find_fails(root, "gpt2_head", (const char *[]){"h.0.ln_1.bias", "h.00.ln_1.bias", NULL}, NULL,
               "gpt2 lm: tensor not of a gpt2 lm: h.00.ln_1.bias");
    find_fails(root, "gpt2_head", (const char *[]){"h.0.ln_2.bias", "h.x.ln_2.bias", NULL}, NULL,
               "gpt2 lm: tensor not of a gpt2 lm: h.x.ln_2.bias");
    find_fails(root, "gpt2_head", (const char *[]){"h.0.ln_2.bias", "h.1", NULL}, NULL,
               "gpt2 lm: tensor not of a gpt2 lm: h.1");

    /* top-level shapes, each against the embedding's [V, D] */
    struct {
        gml_lm_arch arch;
        const char *odd, *want;
    } shapes[] = {
        {GML_LM_GPT2, "lm_head.weight", "gpt2 lm: lm_head.weight is f32 [12,8], expected f32 [11,8] "
                                        "([V, D], as wte.weight [11,8])"},
        {GML_LM_GPT2, "ln_f.weight", "gpt2 lm: ln_f.weight is f32 [9], expected f32 [8] ([D], D from "
                                     "wte.weight [11,8])"},
        {GML_LM_GPT2, "ln_f.bias", "gpt2 lm: ln_f.bias is f32 [9], expected f32 [8]"},
        {GML_LM_GPT2, "wpe.weight:cols", "gpt2 lm: wpe.weight is f32 [6,9], expected f32 [n_ctx, 8] "
                                    "([n_ctx, D], D from wte.weight [11,8])"},
        {GML_LM_LLAMA, "model.norm.weight", "llama lm: model.norm.weight is f32 [9], expected f32 [8]"},
        {GML_LM_LLAMA, "lm_head.weight", "llama lm: lm_head.weight is f32 [12,8], expected f32 [11,8] "
                                         "([V, D], as model.embed_tokens.weight [11,8])"},
        {GML_LM_LLAMA, "model.embed_tokens.weight:1d", "llama lm: model.embed_tokens.weight is f32 [11], "
                                                      "expected f32 [V, D]"},
        {GML_LM_GPT2, "wte.weight:cols", "gpt2 lm: lm_head.weight is f32 [11,8], expected f32 [11,9] "
                                         "([V, D], as wte.weight [11,9])"},
        {GML_LM_LLAMA, "model.norm.weight:i32", "llama lm: model.norm.weight is i32 [8], expected f32 [8]"},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        chk_rng r = {7};
        const bool gpt2 = shapes[i].arch == GML_LM_GPT2;
        gml_context *w = tiny_weights(shapes[i].arch, gpt2 ? "" : "model.", 1, false, shapes[i].odd, &r);
        const gml_lm_config cfg = {.arch = shapes[i].arch, .gpt2 = {.n_heads = 2}, .llama = {.n_heads = 2}};
        char err[1024] = "";
        gml_lm lm;
        CHECK(gml_lm_find(w, &cfg, &lm, err, sizeof err) == GML_ERR_INVALID, "odd %s", shapes[i].odd);
        CHECK_CONTAINS(err, shapes[i].want);
        gml_free(w);
    }

    fixture f;
    /* the prefix is optional: the same weights without it bind the same tensors */
    if (load(root, "gpt2_tied", &f)) {
        char err[1024] = "";
        gml_lm a, b;
        CHECK(gml_lm_find(f.w, &f.cfg, &a, err, sizeof err) == GML_OK, "%s", err);
        for (gml_tensor *t = gml_get_first_tensor(f.w); t; t = gml_get_next_tensor(f.w, t)) {
            char n[128];
            snprintf(n, sizeof n, "%s", t->name + strlen("transformer."));
            gml_set_name(t, n);
        }
        CHECK(gml_lm_find(f.w, &f.cfg, &b, err, sizeof err) == GML_OK, "%s", err);
        CHECK(a.tok_emb == b.tok_emb && a.head == b.tok_emb && a.pos_emb == b.pos_emb &&
                  a.norm_b == b.norm_b && b.n_layers == 2 &&
                  memcmp(a.gpt2, b.gpt2, 2 * sizeof *a.gpt2) == 0,
              "without the prefix: the same tensors");
        gml_lm_free(&a);
        gml_lm_free(&b);
    }
    unload(&f);

    /* misuse */
    {
        char err[256] = "";
        gml_lm lm;
        CHECK(gml_lm_find(NULL, &gpt2, &lm, err, sizeof err) == GML_ERR_INVALID, "NULL wctx");
        CHECK_CONTAINS(err, "gml_lm_find: wctx is NULL");
        gml_context *w = chk_ctx(1 << 16);
        CHECK(gml_lm_find(w, NULL, &lm, err, sizeof err) == GML_ERR_INVALID, "NULL cfg");
        CHECK_CONTAINS(err, "gml_lm_find: cfg is NULL");
        CHECK(gml_lm_find(w, &gpt2, NULL, err, sizeof err) == GML_ERR_INVALID, "NULL lm");
        CHECK_CONTAINS(err, "gml_lm_find: lm is NULL");
        CHECK(gml_lm_find(w, &gpt2, &lm, NULL, 0) == GML_ERR_INVALID, "no err buffer");
        const gml_lm_config bad = {.arch = (gml_lm_arch)7};
        CHECK(gml_lm_find(w, &bad, &lm, err, sizeof err) == GML_ERR_INVALID, "arch 7");
        CHECK_CONTAINS(err, "gml_lm_find: arch 7 is not GML_LM_GPT2 (0) or GML_LM_LLAMA (1)");
        CHECK(gml_lm_find(w, &gpt2, &lm, err, sizeof err) == GML_ERR_INVALID, "empty");
        CHECK_CONTAINS(err, "gpt2 lm: missing wte.weight, wpe.weight, ln_f.weight, ln_f.bias, h.0.* (no layer)");
        gml_free(w);
        gml_lm_free(NULL);
    }

    chk_case("builder errors");
    if (load(root, "gpt2_tied", &f)) {
        char err[1024] = "";
        gml_lm lm;
        if (CHECK(gml_lm_find(f.w, &f.cfg, &lm, err, sizeof err) == GML_OK, "%s", err)) {
            gml_context *ctx = chk_ctx(8 << 20);
            gml_tensor *tf = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 2, 5), "tf");
            gml_tensor *t3 = gml_set_name(gml_new_tensor_3d(ctx, GML_I32, 1, 2, 5), "t3");
            gml_tensor *t14 = gml_set_name(gml_new_tensor_2d(ctx, GML_I32, 2, 14), "t14");
            gml_tensor *t13 = gml_set_name(gml_new_tensor_2d(ctx, GML_I32, 2, 13), "t13");
            CHECK(!gml_lm_logits(ctx, &lm, tf), "f32 tokens");
            CHECK_CONTAINS(gml_last_error(ctx), "gpt2 lm: tokens 'tf' is f32 [2,5], expected i32 [B, T]");
            gml_clear_error(ctx);
            CHECK(!gml_lm_logits(ctx, &lm, t3), "3-D tokens");
            CHECK_CONTAINS(gml_last_error(ctx), "gpt2 lm: tokens 't3' is i32 [1,2,5], expected i32 [B, T]");
            gml_clear_error(ctx);
            CHECK(!gml_lm_logits(ctx, &lm, t14), "T 14 > n_ctx 13");
            CHECK_CONTAINS(gml_last_error(ctx), "gpt2 lm: tokens 't14' [2,14] has T = 14 positions, more "
                                                "than wpe.weight's 13 (n_ctx)");
            gml_clear_error(ctx);
            CHECK(gml_lm_logits(ctx, &lm, t13), "T 13 = n_ctx: %s", gml_last_error(ctx));
            gml_lm bad = lm;
            bad.cfg.gpt2.n_heads = 7;
            CHECK(!gml_lm_logits(ctx, &bad, t13), "heads 7");
            CHECK_CONTAINS(gml_last_error(ctx), "gpt2 lm: layer 0: gpt2: heads 7 must be >= 1 and "
                                                "divide d_model 40");
            gml_clear_error(ctx);
            bad = lm;
            bad.gpt2 = NULL;
            CHECK(!gml_lm_logits(ctx, &bad, t13), "no layer array");
            CHECK_CONTAINS(gml_last_error(ctx), "gpt2 lm: n_layers 2 with no gpt2 weights array");
            gml_clear_error(ctx);
            bad = lm;
            bad.cfg.arch = GML_LM_LLAMA;
            CHECK(!gml_lm_logits(ctx, &bad, t13), "arch changed");
            CHECK_CONTAINS(gml_last_error(ctx), "llama lm: n_layers 2 with no llama weights array");
            gml_clear_error(ctx);
            bad = lm;
            bad.head = bad.pos_emb;
            CHECK(!gml_lm_logits(ctx, &bad, t13), "head [13, 40]");
            CHECK_CONTAINS(gml_last_error(ctx), "gpt2 lm: lm_head.weight is f32 [13,40], expected f32 [67,40]");
            gml_clear_error(ctx);
            bad = lm;
            bad.norm_b = NULL;
            CHECK(!gml_lm_logits(ctx, &bad, t13), "no norm_b");
            CHECK_CONTAINS(gml_last_error(ctx), "gpt2 lm: the model's norm_b is NULL (bind it with gml_lm_find)");
            gml_clear_error(ctx);
            bad = lm;
            bad.cfg.gpt2.eps = -1;
            CHECK(!gml_lm_logits(ctx, &bad, t13), "eps -1");
            CHECK_CONTAINS(gml_last_error(ctx), "gpt2 lm: eps -1 must be finite and >= 0");
            gml_clear_error(ctx);
            CHECK(!gml_lm_logits(ctx, &lm, NULL), "NULL tokens");
            CHECK_CONTAINS(gml_last_error(ctx), "gml_lm_logits: tokens is NULL");
            gml_clear_error(ctx);
            CHECK(!gml_lm_logits(ctx, NULL, t13), "NULL lm");
            CHECK_CONTAINS(gml_last_error(ctx), "gml_lm_logits: lm is NULL");
            gml_clear_error(ctx);
            CHECK(!gml_lm_logits(NULL, &lm, t13), "NULL ctx");
            CHECK_CONTAINS(gml_last_error(NULL), "gml_lm_logits: ctx is NULL");
            gml_free(ctx);

            /* a token outside [0, V) fails compute, naming it */
            ctx = chk_ctx(8 << 20);
            gml_tensor *tok = gml_set_name(gml_new_tensor_2d(ctx, GML_I32, 1, 3), "tokens");
            memcpy(tok->data, (int32_t[]){5, 67, 2}, 3 * sizeof(int32_t));
            gml_tensor *y = gml_lm_logits(ctx, &lm, tok);
            gml_graph *g = y ? gml_build_graph(ctx, &y, 1) : NULL;
            if (CHECK(g, "%s", gml_last_error(ctx))) {
                CHECK(gml_graph_compute(g, 2) != GML_OK, "token 67 of V 67 computes");
                CHECK_CONTAINS(gml_graph_error(g), "67");
                printf("token 67 of V 67: %s\n", gml_graph_error(g));
                gml_graph_free(g);
            }
            gml_free(ctx);
            gml_lm_free(&lm);
        }
    }
    unload(&f);
}

/* ---- gradients through the whole model --------------------------------------- */

/* gml_grad from the logits (L = sum(logits * dy), dy random) to every
 * parameter of a tiny model, against central differences of grad_check.c's
 * double evaluator of the same graph (its own norms, rope and attention):
 * every element, under the reference kernels and every ISA the CPU has, at
 * 1, 2, 3, 4 and 7 threads, bitwise equal across thread counts. Tokens
 * repeat (the embedding's rows gather several gradients; a tied head adds its
 * own to the same tensor). One LLaMA soft-caps its attention scores. */
static void grad_case(gml_lm_arch arch, int layers, bool tied, float softcap, const char *label) {
    chk_case("grad %s", label);
    chk_rng r = {arch == GML_LM_GPT2 ? 11u : 12u};
    gml_context *w = tiny_weights(arch, "", layers, tied, NULL, &r);
    const gml_lm_config cfg = {.arch = arch, .gpt2 = {.n_heads = 2},
                               .llama = {.n_heads = 2, .n_kv_heads = 1, .rope_theta = 100, .softcap = softcap}};
    char err[1024] = "";
    gml_lm lm;
    if (!CHECK(gml_lm_find(w, &cfg, &lm, err, sizeof err) == GML_OK, "%s: %s", label, err)) {
        gml_free(w);
        return;
    }
    gml_context *ctx = chk_ctx(64 << 20);
    gml_tensor *tok = gml_set_name(gml_new_tensor_2d(ctx, GML_I32, 2, TCTX - 1), "tokens");
    memcpy(tok->data, (int32_t[]){3, 0, 7, 3, TV - 1, 5, 5, 1, 3, 10}, 10 * sizeof(int32_t));
    gml_tensor *y = gml_lm_logits(ctx, &lm, tok);
    gml_tensor *wrt[GRAD_CHECK_MAX_WRT];
    int n = 0;
    for (gml_tensor *t = gml_get_first_tensor(w); t && n < GRAD_CHECK_MAX_WRT; t = gml_get_next_tensor(w, t))
        wrt[n++] = t;
    if (CHECK(y, "%s: %s", label, gml_last_error(ctx)))
        CHECK(grad_check(label, ctx, y, wrt, n, NULL) == 0, "%s: gradients", label);
    gml_free(ctx);
    gml_lm_free(&lm);
    gml_free(w);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s tests/fixtures/lm\n", argv[0]);
        return 2;
    }
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) run_case(argv[1], CASES[i]);
    half_case(argv[1], "gpt2_tied", GML_F16);
    half_case(argv[1], "llama_head", GML_BF16);
    errors(argv[1]);
    grad_case(GML_LM_GPT2, 1, true, 0, "gpt2 lm, 1 layer, tied head");
    grad_case(GML_LM_GPT2, 2, false, 0, "gpt2 lm, 2 layers, lm_head");
    grad_case(GML_LM_LLAMA, 2, false, 0, "llama lm, 2 layers, GQA, lm_head");
    grad_case(GML_LM_LLAMA, 1, true, 0.8f, "llama lm, 1 layer, GQA, softcap, tied");
    printf("largest |g - fd| / (|fd| + max|fd|) over every check: %.2e\n", grad_check_max_rel);
    return chk_summary();
}
