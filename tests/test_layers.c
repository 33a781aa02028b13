/* Whole layers (models/llama.c, gpt2.c, bert.c) against PyTorch: every case
 * of tests/fixtures/layers (argv[1]; written by tests/fixtures/gen_layers.py
 * the way HF's modules compute) is loaded with the library's loaders, its
 * layers bound by their HF names (the prefix found the way run-graph finds
 * it), run under every ISA the CPU has at 1-4 and 7 threads (bitwise equal
 * across thread counts), with x contiguous and as a padded (sliced) view,
 * and must match out.npy within 2e-4 + 2e-4 |want|. Max errors are printed
 * per case and ISA.
 * Decoding: the LLaMA layer (one and two layers, GQA, MQA, sinks, softcap,
 * window) decoding
 * T tokens one at a time through a KV cache, and a prompt then single
 * tokens, against its full causal forward (within 1e-5 of max |out|).
 * Builder and binding errors, with their messages. */
#define _POSIX_C_SOURCE 200809L /* strtok_r */

#include <ggmlite/io.h>
#include <ggmlite/layers.h>

#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL_ABS 2e-4
#define TOL_REL 2e-4

static const char *const CASES[] = {"llama_gqa",   "llama_mha_bias", "llama_mqa_stack2",
                                    "llama_sinks", "llama_softcap",  "gpt2",
                                    "gpt2_stack2", "bert_padding",   "bert_stack2",
                                    "llama_window", "llama_all_opts", "bert_len0",
                                    "bert_len0_stack2"};

typedef enum { LLAMA, GPT2, BERT } kind;

typedef struct args {
    kind kind;
    int heads, kv_heads, layers;
    float theta, softcap;
    int64_t window;
    int32_t lens[16];
    int n_lens;
} args;

static bool parse_args(const char *path, args *a) {
    *a = (args){.layers = 1};
    FILE *f = fopen(path, "r");
    char line[1024] = "";
    if (!f || !fgets(line, sizeof line, f)) {
        if (f) fclose(f);
        return CHECK(false, "%s: cannot read", path);
    }
    fclose(f);
    char *save = NULL, *tok = strtok_r(line, " \n", &save);
    a->kind = strcmp(tok, "llama") == 0 ? LLAMA : strcmp(tok, "gpt2") == 0 ? GPT2 : BERT;
    while ((tok = strtok_r(NULL, " \n", &save))) {
        char *v = strtok_r(NULL, " \n", &save);
        if (!v) return CHECK(false, "%s: %s has no value", path, tok);
        if (!strcmp(tok, "--heads")) a->heads = atoi(v);
        else if (!strcmp(tok, "--kv-heads")) a->kv_heads = atoi(v);
        else if (!strcmp(tok, "--layers")) a->layers = atoi(v);
        else if (!strcmp(tok, "--rope-theta")) a->theta = strtof(v, NULL);
        else if (!strcmp(tok, "--softcap")) a->softcap = strtof(v, NULL);
        else if (!strcmp(tok, "--window")) a->window = atoi(v);
        else if (!strcmp(tok, "--valid-lens"))
            for (char *s2 = NULL, *n = strtok_r(v, ",", &s2); n && a->n_lens < 16;
                 n = strtok_r(NULL, ",", &s2))
                a->lens[a->n_lens++] = atoi(n);
    }
    return true;
}

/* The prefix of layer i: the first of these whose binding works (strict, so
 * a wrong prefix fails). */
static const char *const PREFIXES[] = {"", "model.layers.%d.", "layers.%d.", "h.%d.",
                                       "transformer.h.%d.", "encoder.layer.%d.",
                                       "bert.encoder.layer.%d."};

typedef union weights {
    gml_llama_weights llama;
    gml_gpt2_weights gpt2;
    gml_bert_weights bert;
} weights;

static bool bind(gml_context *wctx, kind k, int layer, weights *w) {
    char err[1024] = "";
    for (size_t p = 0; p < sizeof PREFIXES / sizeof *PREFIXES; p++) {
        if (p == 0 && layer > 0) continue;
        char prefix[64];
        snprintf(prefix, sizeof prefix, PREFIXES[p], layer);
        gml_status st = k == LLAMA  ? gml_llama_weights_find(wctx, prefix, &w->llama, err, sizeof err)
                        : k == GPT2 ? gml_gpt2_weights_find(wctx, prefix, &w->gpt2, err, sizeof err)
                                    : gml_bert_weights_find(wctx, prefix, &w->bert, err, sizeof err);
        if (st == GML_OK) return true;
    }
    return CHECK(false, "layer %d: no prefix binds: %s", layer, err);
}

static gml_tensor *build_layer(gml_context *ctx, const args *a, const weights *w, gml_tensor *x,
                               gml_tensor *pos, gml_tensor *lens) {
    switch (a->kind) {
    case LLAMA: {
        gml_llama_config c = {.n_heads = a->heads, .n_kv_heads = a->kv_heads, .rope_theta = a->theta,
                              .rms_eps = 0, .softcap = a->softcap, .window = a->window};
        return gml_llama_layer(ctx, &c, &w->llama, x, pos); /* pos NULL: 0..T-1 */
    }
    case GPT2: return gml_gpt2_layer(ctx, &(gml_gpt2_config){.n_heads = a->heads, .eps = 0}, &w->gpt2, x);
    default:
        return gml_bert_layer(ctx, &(gml_bert_config){.n_heads = a->heads, .eps = 0}, &w->bert, x, lens);
    }
}

typedef struct verify_data {
    const gml_tensor *out;
    const float *want;
    int64_t n;
    gml_isa isa; /* the kernels measured (CHECK_RUN also runs the reference ones) */
    double max_abs, max_scale, worst; /* worst: max |d| / (atol + rtol |want|) */
} verify_data;

static void verify(void *user) {
    verify_data *v = user;
    if (gml_get_isa() != v->isa) return;
    float *got = chk_dense(v->out);
    for (int64_t i = 0; i < v->n; i++) {
        double d = fabs((double)got[i] - v->want[i]);
        if (!(d <= v->max_abs)) v->max_abs = d; /* NaN sticks */
        double r = d / (TOL_ABS + TOL_REL * fabs(v->want[i]));
        if (!(r <= v->worst)) v->worst = r;
        if (fabs(v->want[i]) > v->max_scale) v->max_scale = fabs(v->want[i]);
    }
    free(got);
}

static void run_case(const char *root, const char *name) {
    char path[1024], err[512];
    chk_case("%s", name);
    snprintf(path, sizeof path, "%s/%s/args", root, name);
    args a;
    if (!parse_args(path, &a)) return;
    snprintf(path, sizeof path, "%s/%s/weights.safetensors", root, name);
    gml_context *wctx = gml_load_safetensors(path, err, sizeof err);
    snprintf(path, sizeof path, "%s/%s/x.npy", root, name);
    gml_context *xctx = gml_load_npy(path, "x", err, sizeof err);
    snprintf(path, sizeof path, "%s/%s/out.npy", root, name);
    gml_context *octx = gml_load_npy(path, "out", err, sizeof err);
    if (!CHECK(wctx && xctx && octx, "%s: %s", name, err)) goto done;
    const gml_tensor *x0 = gml_get_first_tensor(xctx), *want = gml_get_first_tensor(octx);
    weights w[4];
    for (int l = 0; l < a.layers; l++)
        if (!bind(wctx, a.kind, l, &w[l])) goto done;
    const int64_t B = x0->ne[1], T = x0->ne[2], D = x0->ne[3];
    const gml_isa isas[] = {GML_TEST_ISAS};
    for (chk_layout lay = CHK_CONTIGUOUS; lay <= CHK_SLICED; lay++) {
        gml_context *ctx = chk_ctx(16 << 20);
        gml_tensor *x = chk_new_layout(ctx, GML_F32, 3, (int64_t[]){B, T, D}, lay, "x");
        chk_write(x, x0->data);
        gml_tensor *pos = NULL; /* the default positions, 0..T-1 */
        gml_tensor *lens = NULL;
        if (a.n_lens) {
            lens = gml_set_name(gml_new_tensor_1d(ctx, GML_I32, B), "valid_lens");
            memcpy(lens->data, a.lens, (size_t)B * sizeof(int32_t));
        }
        gml_tensor *y = x;
        for (int l = 0; l < a.layers; l++) y = build_layer(ctx, &a, &w[l], y, pos, lens);
        gml_graph *g = gml_build_graph(ctx, &y, 1);
        if (CHECK(g, "%s: %s", name, gml_last_error(ctx))) {
            for (size_t i = 0; i < sizeof isas / sizeof *isas; i++) {
                if (!gml_cpu_has(isas[i])) continue;
                verify_data v = {.out = y, .want = want->data, .n = gml_nelements(want), .isa = isas[i]};
                CHECK_RUN(g, .outs = &y, .n_outs = 1, .verify = verify, .user = &v, .isa = isas[i]);
                CHECK(v.worst <= 1.0, "%s (%s x, %s): max error %.3g over the tolerance (x%.3g)",
                      name, chk_layout_name(lay), gml_isa_name(isas[i]), v.max_abs, v.worst);
                if (lay == CHK_CONTIGUOUS)
                    printf("%-17s %-9s max |err| %.2e  (%.2e of max |want| %.2f; %.3f of the "
                           "tolerance)\n", name, gml_isa_name(isas[i]), v.max_abs,
                           v.max_abs / v.max_scale, v.max_scale, v.worst);
            }
            gml_graph_free(g);
        }
        gml_free(ctx);
    }
done:
    gml_free(wctx);
    gml_free(xctx);
    gml_free(octx);
}

/* ---- decoding ---------------------------------------------------------------- */

/* Decode the fixture's x one token at a time (prompt 0) or a prompt of P
 * tokens then one at a time; compare with the full forward. */
static void decode_case(const char *root, const char *name, int prompt) {
    char path[1024], err[512];
    chk_case("%s decode (prompt %d)", name, prompt);
    snprintf(path, sizeof path, "%s/%s/args", root, name);
    args a;
    if (!parse_args(path, &a)) return;
    snprintf(path, sizeof path, "%s/%s/weights.safetensors", root, name);
    gml_context *wctx = gml_load_safetensors(path, err, sizeof err);
    snprintf(path, sizeof path, "%s/%s/x.npy", root, name);
    gml_context *xctx = gml_load_npy(path, "x", err, sizeof err);
    if (!CHECK(wctx && xctx, "%s", err)) return;
    const gml_tensor *x0 = gml_get_first_tensor(xctx);
    const int64_t B = x0->ne[1], T = x0->ne[2], D = x0->ne[3];
    weights w[4];
    for (int l = 0; l < a.layers; l++) bind(wctx, LLAMA, l, &w[l]);
    gml_llama_config cfg = {.n_heads = a.heads, .n_kv_heads = a.kv_heads, .rope_theta = a.theta,
                            .rms_eps = 0, .softcap = a.softcap, .window = a.window};
    const int G = a.kv_heads ? a.kv_heads : a.heads;
    const int64_t hd = w[0].llama.wq->ne[2] / a.heads;

    /* the full forward */
    gml_context *ctx = chk_ctx(16 << 20);
    gml_tensor *x = gml_new_tensor_3d(ctx, GML_F32, B, T, D);
    memcpy(x->data, x0->data, gml_nbytes(x));
    gml_tensor *full = x;
    for (int l = 0; l < a.layers; l++) full = gml_llama_layer(ctx, &cfg, &w[l].llama, full, NULL);
    gml_graph *gf = gml_build_graph(ctx, &full, 1);
    CHECK(gf && gml_graph_compute(gf, 2) == GML_OK, "full forward: %s", gml_last_error(ctx));

    gml_kv_cache *cache = gml_kv_cache_new((gml_kv_cache_params){.n_layers = a.layers, .batch = B,
                                                                 .n_kv_heads = G, .max_len = T + 3,
                                                                 .d_k = hd}, err, sizeof err);
    CHECK(cache, "%s", err);
    double max_diff = 0, scale = 0;
    bool bitwise = true;
    /* two step graphs: n = prompt (if any) and n = 1 */
    for (int phase = prompt ? 0 : 1; cache && phase < 2; phase++) {
        const int64_t n = phase == 0 ? prompt : 1;
        gml_kv_step step = gml_kv_step_new(ctx, cache, n);
        gml_tensor *xs = gml_new_tensor_3d(ctx, GML_F32, B, n, D);
        gml_tensor *y = xs;
        for (int l = 0; l < a.layers; l++) y = gml_llama_decode(ctx, &cfg, &w[l].llama, y, &step, l);
        gml_graph *g = gml_build_graph(ctx, &y, 1);
        if (!CHECK(g, "step graph: %s", gml_last_error(ctx))) break;
        for (int64_t t0 = phase == 0 ? 0 : prompt; t0 < (phase == 0 ? prompt : T); t0 += n) {
            for (int64_t b = 0; b < B; b++)
                memcpy((float *)xs->data + b * n * D, (const float *)x0->data + (b * T + t0) * D,
                       (size_t)(n * D) * sizeof(float));
            if (!CHECK(gml_kv_step_compute(&step, g, 1 + (int)(t0 % 3), err, sizeof err) == GML_OK,
                       "step at %lld: %s", (long long)t0, err))
                break;
            for (int64_t b = 0; b < B; b++)
                for (int64_t i = 0; i < n * D; i++) {
                    float got = ((float *)y->data)[b * n * D + i];
                    float ref = ((float *)full->data)[(b * T + t0) * D + i];
                    double d = fabs((double)got - ref);
                    if (!(d <= max_diff)) max_diff = d;
                    if (got != ref) bitwise = false;
                    if (fabs(ref) > scale) scale = fabs(ref);
                }
        }
        gml_graph_free(g);
    }
    CHECK(max_diff <= 1e-5 * scale, "%s decode (prompt %d): max |decode - full| %.3g (max |full| %.3g)",
          name, prompt, max_diff, scale);
    printf("%-17s decode, prompt %-2d: max |decode - full| %.2e (%s; max |full| %.2f)\n", name,
           prompt, max_diff, bitwise ? "bitwise equal" : "not bitwise", scale);
    gml_kv_cache_free(cache);
    gml_graph_free(gf);
    gml_free(ctx);
    gml_free(wctx);
    gml_free(xctx);
}

/* Positions [B, T] given as 0..T-1 in every row: the default's bits. */
static void positions_case(const char *root) {
    char path[1024], err[512];
    chk_case("llama positions");
    snprintf(path, sizeof path, "%s/llama_gqa/weights.safetensors", root);
    gml_context *wctx = gml_load_safetensors(path, err, sizeof err);
    snprintf(path, sizeof path, "%s/llama_gqa/x.npy", root);
    gml_context *xctx = gml_load_npy(path, "x", err, sizeof err);
    if (!CHECK(wctx && xctx, "%s", err)) return;
    weights w;
    bind(wctx, LLAMA, 0, &w);
    gml_tensor *x = gml_get_first_tensor(xctx);
    const int64_t B = x->ne[1], T = x->ne[2];
    gml_context *ctx = chk_ctx(8 << 20);
    gml_tensor *pos = gml_set_name(gml_new_tensor_2d(ctx, GML_I32, B, T), "positions");
    for (int64_t i = 0; i < B * T; i++) ((int32_t *)pos->data)[i] = (int32_t)(i % T);
    gml_llama_config c = {.n_heads = 6, .n_kv_heads = 2};
    gml_tensor *outs[2] = {gml_llama_layer(ctx, &c, &w.llama, x, NULL),
                           gml_llama_layer(ctx, &c, &w.llama, x, pos)};
    gml_graph *g = gml_build_graph(ctx, outs, 2);
    if (CHECK(g && gml_graph_compute(g, 2) == GML_OK, "%s", gml_last_error(ctx)))
        CHECK(memcmp(outs[0]->data, outs[1]->data, gml_nbytes(outs[0])) == 0,
              "positions 0..T-1 per row differ from the default positions");
    gml_graph_free(g);
    gml_free(ctx);
    gml_free(wctx);
    gml_free(xctx);
}

/* ---- errors ------------------------------------------------------------------- */

static void errors(const char *root) {
    char path[1024], err[1024];
    chk_case("errors");
    snprintf(path, sizeof path, "%s/llama_gqa/weights.safetensors", root);
    gml_context *wctx = gml_load_safetensors(path, err, sizeof err);
    if (!CHECK(wctx, "%s", err)) return;
    gml_llama_weights w;
    /* strict binding: a wrong prefix sees nothing (missing), extra tensors are named */
    CHECK(gml_llama_weights_find(wctx, "model.layers.0.", &w, err, sizeof err) == GML_ERR_INVALID,
          "prefix that binds nothing");
    CHECK_CONTAINS(err, "llama weights: missing model.layers.0.input_layernorm.weight");
    gml_gpt2_weights w2;
    CHECK(gml_gpt2_weights_find(wctx, "", &w2, err, sizeof err) == GML_ERR_INVALID, "gpt2 names");
    CHECK_CONTAINS(err, "missing ln_1.weight");
    CHECK_CONTAINS(err, "not gpt2 weights: input_layernorm.weight");
    CHECK(gml_llama_weights_find(wctx, "", &w, err, sizeof err) == GML_OK, "%s", err);

    gml_context *ctx = chk_ctx(4 << 20);
    gml_set_name(gml_new_tensor_1d(ctx, GML_F32, 4), "l.self_attn.rotary_emb.inv_freq"); /* known */
    gml_set_name(gml_new_tensor_1d(ctx, GML_F32, 4), "l.self_attn.q_norm.weight");
    CHECK(gml_llama_weights_find(ctx, "l.", &w, err, sizeof err) == GML_ERR_INVALID, "extra");
    CHECK_CONTAINS(err, "missing l.input_layernorm.weight");
    CHECK_CONTAINS(err, "; not llama weights: l.self_attn.q_norm.weight");
    CHECK(!strstr(err, "inv_freq"), "inv_freq is a known buffer: %s", err);
    CHECK(gml_llama_weights_find(wctx, "", &w, err, sizeof err) == GML_OK, "%s", err);

    gml_tensor *x = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, 2, 7, 48), "x");
    gml_tensor *pos = NULL;
    gml_llama_config c = {.n_heads = 6, .n_kv_heads = 3};
    CHECK(!gml_llama_layer(ctx, &c, &w, x, pos), "kv heads 3 with k_proj of 2 heads");
    CHECK_CONTAINS(gml_last_error(ctx),
                   "llama: self_attn.k_proj.weight is f32 [16,48], expected f32 [24,48] ([G*hd, D])");
    gml_clear_error(ctx);
    c.n_kv_heads = 4;
    CHECK(!gml_llama_layer(ctx, &c, &w, x, pos), "kv heads 4");
    CHECK_CONTAINS(gml_last_error(ctx), "llama: kv_heads 4 must divide heads 6");
    gml_clear_error(ctx);
    c.n_heads = 5;
    CHECK(!gml_llama_layer(ctx, &c, &w, x, pos), "heads 5");
    CHECK_CONTAINS(gml_last_error(ctx), "llama: d_model 48 is not divisible by heads 5");
    c.n_heads = 6;
    gml_clear_error(ctx);
    c.n_kv_heads = 2;
    gml_tensor *pos8 = gml_set_name(gml_new_tensor_1d(ctx, GML_I32, 8), "pos8");
    CHECK(!gml_llama_layer(ctx, &c, &w, x, pos8), "positions of 8");
    CHECK_CONTAINS(gml_last_error(ctx), "positions 'pos8' is i32 [8], expected i32 [2,7] ([B, Tq])");
    gml_clear_error(ctx);
    gml_tensor *x36 = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, 2, 7, 36), "x36");
    CHECK(!gml_llama_layer(ctx, &c, &w, x36, pos), "d_model 36");
    CHECK_CONTAINS(gml_last_error(ctx), "llama: input_layernorm.weight is f32 [48], expected f32 [36]");
    gml_clear_error(ctx);
    c.window = -1;
    CHECK(!gml_llama_layer(ctx, &c, &w, x, pos), "negative window");
    CHECK_CONTAINS(gml_last_error(ctx), "llama: window -1 must be >= 0 (0: none)");
    gml_clear_error(ctx);
    c.window = 0;
    c.softcap = -2;
    CHECK(!gml_llama_layer(ctx, &c, &w, x, pos), "negative softcap");
    CHECK_CONTAINS(gml_last_error(ctx), "llama: softcap -2 must be finite and >= 0 (0: none)");
    gml_clear_error(ctx);
    c.softcap = 0;
    gml_llama_weights no_up = w;
    no_up.w_up = NULL;
    CHECK(!gml_llama_layer(ctx, &c, &no_up, x, pos), "no up_proj");
    CHECK_CONTAINS(gml_last_error(ctx), "llama: mlp.up_proj.weight is missing (NULL)");
    gml_clear_error(ctx);
    CHECK(gml_llama_layer(ctx, &c, &w, x, pos) != NULL, "%s", gml_last_error(ctx));

    /* GPT-2's causal-mask buffers (older checkpoints) are known and bind nothing */
    snprintf(path, sizeof path, "%s/gpt2/weights.safetensors", root);
    gml_context *g2file = gml_load_safetensors(path, err, sizeof err);
    gml_context *g2ctx = chk_ctx(1 << 20);
    for (gml_tensor *t = g2file ? gml_get_first_tensor(g2file) : NULL; t;
         t = gml_get_next_tensor(g2file, t)) {
        char name[GML_MAX_NAME + 8];
        snprintf(name, sizeof name, "h.0.%s", t->name); /* the fixture's names are short */
        gml_set_name(gml_new_tensor_1d(g2ctx, GML_F32, 1), name);
    }
    gml_set_name(gml_new_tensor_1d(g2ctx, GML_F32, 1), "h.0.attn.bias");
    gml_set_name(gml_new_tensor_1d(g2ctx, GML_F32, 1), "h.0.attn.masked_bias");
    gml_set_name(gml_new_tensor_1d(g2ctx, GML_F32, 1), "h.1.ln_1.weight"); /* another layer's */
    gml_gpt2_weights gw;
    CHECK(gml_gpt2_weights_find(g2ctx, "h.0.", &gw, err, sizeof err) == GML_OK && gw.ln1_w &&
              gw.mproj_b, "gpt2 with its mask buffers: %s", err);
    gml_set_name(gml_new_tensor_1d(g2ctx, GML_F32, 1), "h.0.attn.c_attn.lora_A");
    CHECK(gml_gpt2_weights_find(g2ctx, "h.0.", &gw, err, sizeof err) == GML_ERR_INVALID, "lora");
    CHECK_CONTAINS(err, "gpt2 weights: tensor not of a gpt2 layer: h.0.attn.c_attn.lora_A");
    gml_free(g2ctx);
    gml_free(g2file);
    c.rms_eps = -1;
    CHECK(!gml_llama_layer(ctx, &c, &w, x, pos), "negative eps");
    CHECK_CONTAINS(gml_last_error(ctx), "llama: rms_eps -1 must be finite and >= 0 (0: 1e-6)");
    gml_clear_error(ctx);
    c.rms_eps = 0;

    gml_gpt2_weights g2 = {0};
    CHECK(!gml_gpt2_layer(ctx, &(gml_gpt2_config){.n_heads = 5}, &g2, x), "gpt2 heads 5");
    CHECK_CONTAINS(gml_last_error(ctx), "gpt2: heads 5 must be >= 1 and divide d_model 48");
    gml_clear_error(ctx);
    CHECK(!gml_gpt2_layer(ctx, &(gml_gpt2_config){.n_heads = 6}, &g2, x), "gpt2 no weights");
    CHECK_CONTAINS(gml_last_error(ctx), "gpt2: ln_1.weight is missing (NULL)");
    gml_clear_error(ctx);
    gml_bert_weights bw = {0};
    gml_tensor *lens = gml_set_name(gml_new_tensor_1d(ctx, GML_I32, 3), "lens");
    CHECK(!gml_bert_layer(ctx, &(gml_bert_config){.n_heads = 6}, &bw, x, lens), "bert lens");
    CHECK_CONTAINS(gml_last_error(ctx), "bert: valid_lens 'lens' is i32 [3], expected i32 [2] ([B])");
    gml_free(ctx);
    gml_free(wctx);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s tests/fixtures/layers\n", argv[0]);
        return 2;
    }
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) run_case(argv[1], CASES[i]);
    decode_case(argv[1], "llama_gqa", 0);
    decode_case(argv[1], "llama_gqa", 3);
    decode_case(argv[1], "llama_mha_bias", 4);
    decode_case(argv[1], "llama_mqa_stack2", 0);
    decode_case(argv[1], "llama_mqa_stack2", 5);
    decode_case(argv[1], "llama_sinks", 0);
    decode_case(argv[1], "llama_softcap", 2);
    decode_case(argv[1], "llama_window", 0);
    decode_case(argv[1], "llama_window", 6);
    decode_case(argv[1], "llama_all_opts", 0);
    decode_case(argv[1], "llama_all_opts", 4);
    positions_case(argv[1]);
    errors(argv[1]);
    return chk_summary();
}
