/* run-graph llama | gpt2 | bert: whole transformer layers (models/include/ggmlite/layers.h),
 * one or --layers N stacked, on safetensors weights named as Hugging Face's
 * state_dict names them, or on deterministic random weights.
 *
 *   run-graph llama --heads 32 --kv-heads 8 --weights w.safetensors --input x.npy --output y.npy
 *   run-graph gpt2 --heads 12 --layers 12 --weights gpt2.safetensors --input x.npy
 *   run-graph bert --seq 16 --d-model 256 --heads 4 --valid-lens 16,9
 *
 * Names: layer i's tensors are "<list><i>.<HF name>" where the list (the
 * ModuleList holding the layers) is --prefix, or detected: model.layers. or
 * layers. (llama), h. or transformer.h. (gpt2), encoder.layer. or
 * bert.encoder.layer. (bert); a single layer may have no index ("<prefix>.<HF
 * name>" with --prefix, or just the HF names). The weights are read by
 * run-graph's loader (rg_weights_open: a safetensors file or a sharded
 * checkpoint's index, mapped), named as in the file (without the list when
 * a name is too long for a tensor's).
 * Loading is strict: a required tensor missing, or a tensor of the file that
 * none of the N layers uses (a whole checkpoint's embeddings and final norm,
 * a layer past --layers), is an error naming them; --non-strict lists the
 * unused ones on stderr as ignored.
 * run-graph.c hands it the parsed options (rg_parse_args) when MODEL names a
 * layer. */
#define _POSIX_C_SOURCE 200809L
#include "rg.h"
#include "rg_time.h"

#include <ggmlite/layers.h>

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

typedef enum lkind { L_LLAMA, L_GPT2, L_BERT } lkind;

static const char *const KIND_NAME[] = {"llama", "gpt2", "bert"};
/* The layers' lists as Hugging Face names them (layer i under "<list><i>."),
 * and a tensor every layer has. */
static const char *const LIST[3][2] = {{"model.layers.", "layers."},
                                       {"h.", "transformer.h."},
                                       {"encoder.layer.", "bert.encoder.layer."}};
static const char *const KEY_NAME[] = {"input_layernorm.weight", "ln_1.weight",
                                       "attention.self.query.weight"};

typedef struct lopts {
    lkind kind;
    const char *weights, *input, *output;
    const char *prefix; /* --prefix: the layers' list (or, one layer, the layer), NULL: detected */
    bool non_strict;
    int64_t batch, seq, d_model, ffn;
    int heads, kv_heads, layers, threads, repeat;
    uint64_t seed;
    float rope_theta, rms_eps, softcap;
    int64_t window;
    const int32_t *lens; /* --valid-lens */
    int n_lens;
    bool has_dtype;
    gml_type dtype;
    bool json, nan_trap, print_graph; /* --json, --nan-trap, --print-graph */
    const char *model;   /* as given */
    gml_compute compute; /* --compute */
    const rg_opts *args; /* the parse's options (--grads, --grad-output) */
} lopts;

/* The options of the layers from the parse (rg_parse_args). */
static lopts options(const rg_opts *g) {
    return (lopts){.kind = (lkind)g->layer, .weights = g->weights, .input = g->input,
                   .prefix = g->prefix, .non_strict = g->non_strict,
                   .output = g->output, .batch = g->dim[RG_B], .seq = g->dim[RG_T],
                   .d_model = g->dim[RG_D], .ffn = g->ffn, .heads = (int)g->dim[RG_H],
                   .kv_heads = (int)g->dim[RG_G], .layers = g->layers, .threads = g->threads,
                   .repeat = g->repeat, .seed = g->seed, .rope_theta = g->rope_theta,
                   .rms_eps = g->rms_eps, .softcap = g->softcap, .window = g->window,
                   .lens = g->valid_lens, .n_lens = g->n_valid_lens,
                   .has_dtype = g->has_weights_dtype, .dtype = g->weights_dtype, .json = g->json,
                   .nan_trap = g->nan_trap, .print_graph = g->print_graph, .model = g->model,
                   .compute = g->compute, .args = g};
}

/* ---- weights ------------------------------------------------------------------ */

typedef union lweights {
    gml_llama_weights llama;
    gml_gpt2_weights gpt2;
    gml_bert_weights bert;
} lweights;

typedef struct run {
    lopts o;
    rg_data d;                  /* --weights, mapped: d.st, d.wctx (named without d.prefix) */
    gml_context *wctx, *xctx, *ctx; /* wctx: d.wctx, or the random weights (the run's own) */
    gml_tensor *x, *lens, *out;
    gml_graph *g;
    char list[256];       /* the layers' list in the file's names: "model.layers.", "" */
    char prefix_fmt[600]; /* layer i's prefix in wctx's names: the list (unless d.prefix
                           * holds it: names too long) and "%d." (none for one layer) */
    bool noted;          /* --non-strict's note said */
    lweights *w;
    rg_grads grads; /* --grads */
    int64_t B, T, D, F;
    int H, G;
    bool random_weights, random_input;
    rg_err *e; /* the running step's errors */
} run;

/* Layer l's prefix in wctx's names. */
static void prefix_of(const run *r, int layer, char *buf, size_t size) {
    snprintf(buf, size, r->prefix_fmt, layer);
}

/* Layer l's prefix in the file's names. */
static void file_prefix_of(const run *r, int layer, char *buf, size_t size) {
    snprintf(buf, size, "%s", r->d.prefix);
    const size_t k = strlen(buf);
    if (k < size) snprintf(buf + k, size - k, r->prefix_fmt, layer);
}

/* prefix_fmt: the list (with any '%' doubled: it is a format) unless d.prefix
 * took it, then "%d." when the layers are indexed. */
static void set_prefix_fmt(run *r, bool indexed) {
    size_t k = 0;
    for (const char *c = r->d.prefix[0] ? "" : r->list; *c && k + 4 < sizeof r->prefix_fmt; c++) {
        if (*c == '%') r->prefix_fmt[k++] = '%';
        r->prefix_fmt[k++] = *c;
    }
    snprintf(r->prefix_fmt + k, sizeof r->prefix_fmt - k, "%s", indexed ? "%d." : "");
}

/* Whether the file holds name (list + rest). */
static bool file_has(const run *r, const char *list, const char *rest) {
    char name[512];
    snprintf(name, sizeof name, "%s%s", list, rest);
    return gml_safetensors_find(r->d.st, name) >= 0;
}

/* Where the file's layers are: the list, whether they are indexed under it
 * (layer i at "<list><i>.") or it is the one layer, and d.prefix: the list
 * when a tensor name under it is too long for a tensor's (named without it
 * then), else "". */
static bool settle_list(run *r, rg_err *e) {
    const lkind k = r->o.kind;
    const char *key = KEY_NAME[k];
    char key0[96];
    snprintf(key0, sizeof key0, "0.%s", key);
    bool found = false, indexed = true;
    if (r->o.prefix) { /* as PyTorch writes it, with or without the trailing dot */
        const size_t n = strlen(r->o.prefix);
        if (n + 2 > sizeof r->list) return rg_fail(e, RG_USAGE, "--prefix: '%.40s...' is too long", r->o.prefix);
        snprintf(r->list, sizeof r->list, "%s%s", r->o.prefix, n && r->o.prefix[n - 1] != '.' ? "." : "");
        found = file_has(r, r->list, key0);
        if (!found && r->o.layers == 1 && file_has(r, r->list, key)) found = true, indexed = false; /* the layer itself */
    } else if (r->o.layers == 1 && file_has(r, "", key)) {
        r->list[0] = '\0';
        found = true, indexed = false;
    } else {
        for (int p = 0; p < 2 && !found; p++)
            if (file_has(r, LIST[k][p], key0)) {
                snprintf(r->list, sizeof r->list, "%s", LIST[k][p]);
                found = true;
            }
    }
    if (found) {
        const size_t ll = strlen(r->list);
        bool too_long = false;
        for (int i = 0; i < gml_safetensors_count(r->d.st) && !too_long; i++) {
            const char *name = gml_safetensors_name(r->d.st, i);
            too_long = strncmp(name, r->list, ll) == 0 && strlen(name) >= GML_MAX_NAME;
        }
        snprintf(r->d.prefix, sizeof r->d.prefix, "%s", too_long ? r->list : "");
        set_prefix_fmt(r, indexed);
        return true;
    }
    /* what the file holds: with shapes when every name fits a tensor's */
    char some[1024] = "it holds ";
    r->d.prefix[0] = '\0';
    rg_err ignored = {0};
    const int count = gml_safetensors_count(r->d.st);
    bool all = rg_weights_under_prefix(r->o.weights, &r->d, &ignored);
    for (int i = 0; all && i < r->d.n_w; i++) all = r->d.w_tensor[i] != NULL;
    if (all) {
        rg_list_weights(r->d.wctx, some, sizeof some);
    } else {
        for (int i = 0; i < count; i++) rg_names_add(some, sizeof some, i, gml_safetensors_name(r->d.st, i));
        rg_names_end(some, sizeof some, count);
    }
    if (r->o.prefix)
        return rg_fail(e, RG_RUNTIME, "%s: no %s layer 0 under --prefix '%s': expected %s%s%s%s%s (--prefix names the "
                       "layers' list, as 'model.layers'%s); %s", r->o.weights, KIND_NAME[k], r->o.prefix,
                       r->list, key0, r->o.layers == 1 ? " or " : "", r->o.layers == 1 ? r->list : "",
                       r->o.layers == 1 ? key : "", r->o.layers == 1 ? ", or the one layer" : "", some);
    return rg_fail(e, RG_RUNTIME, "%s: no %s layer 0: expected %s%s%s%s or %s%s; %s (or give --prefix: the layers' list)",
                   r->o.weights, KIND_NAME[k], r->o.layers == 1 ? key : "", r->o.layers == 1 ? ", " : "",
                   LIST[k][0], key0, LIST[k][1], key0, some);
}

/* Whether a name in wctx belongs to one of the layers (whose finds bind
 * every name under their prefix, or refuse it). */
static bool in_a_layer(const run *r, const char *name) {
    for (int l = 0; l < r->o.layers; l++) {
        char prefix[600];
        prefix_of(r, l, prefix, sizeof prefix);
        if (strncmp(name, prefix, strlen(prefix)) == 0) return true;
    }
    return false;
}

static bool bind_layers(run *r, rg_err *e) {
    const lkind k = r->o.kind;
    char err[1536];
    for (int l = 0; l < r->o.layers; l++) {
        char prefix[600];
        prefix_of(r, l, prefix, sizeof prefix);
        gml_status st = k == L_LLAMA  ? gml_llama_weights_find(r->wctx, prefix, &r->w[l].llama, err, sizeof err)
                        : k == L_GPT2 ? gml_gpt2_weights_find(r->wctx, prefix, &r->w[l].gpt2, err, sizeof err)
                                      : gml_bert_weights_find(r->wctx, prefix, &r->w[l].bert, err, sizeof err);
        if (st != GML_OK)
            return r->d.prefix[0] ? rg_fail(e, RG_RUNTIME, "%s: %s (names under '%s', shown without it)",
                                            r->o.weights, err, r->d.prefix)
                                  : rg_fail(e, RG_RUNTIME, "%s: %s", r->o.weights, err);
    }
    if (!r->d.st) return true; /* random weights: the layers' own */
    /* strict: every tensor of the file belongs to one of the layers (those
     * outside the list, or past the layers, or named too long to bind are not) */
    char unused[1024] = "";
    size_t len = 0;
    int n_unused = 0;
    const int count = gml_safetensors_count(r->d.st);
    const size_t pl = strlen(r->d.prefix);
    for (int i = 0; i < count; i++) {
        const char *name = gml_safetensors_name(r->d.st, i);
        if (strncmp(name, r->d.prefix, pl) == 0 && strlen(name + pl) < GML_MAX_NAME && in_a_layer(r, name + pl))
            continue;
        if (len + 8 < sizeof unused)
            len += (size_t)snprintf(unused + len, sizeof unused - len, "%s%s", n_unused ? ", " : "", name);
        n_unused++;
    }
    if (!n_unused) return true;
    const char *more = len + 8 >= sizeof unused ? "..." : "";
    if (!r->o.non_strict)
        return rg_fail(e, RG_RUNTIME, "%s: %d tensor%s not used by %d %s layer%s: %s%s (more layers? give --layers; "
                       "a whole checkpoint's embeddings and final norm: --non-strict ignores them)", r->o.weights,
                       n_unused, n_unused > 1 ? "s" : "", r->o.layers, KIND_NAME[k], r->o.layers > 1 ? "s" : "",
                       unused, more);
    if (!r->noted)
        fprintf(stderr, "run-graph: note: %s: %d tensor%s not used by %d %s layer%s, ignored (--non-strict): %s%s\n",
                r->o.weights, n_unused, n_unused > 1 ? "s" : "", r->o.layers, KIND_NAME[k],
                r->o.layers > 1 ? "s" : "", unused, more);
    r->noted = true;
    return true;
}

/* Random weights with the HF names, filled from (seed, name) as run-graph
 * fills graph-file params, so a graph file with the same seed sees them. */
static bool make_weights(run *r, rg_err *e) {
    const lkind k = r->o.kind;
    const int64_t D = r->D, F = r->F, hd = D / r->H, G = r->G;
    struct { const char *name; int64_t ne[2]; } spec[16];
    int n = 0;
#define S(nm, a, b) spec[n++] = (__typeof__(spec[0])){nm, {a, b}}
    if (k == L_LLAMA) {
        S("input_layernorm.weight", D, 0);
        S("self_attn.q_proj.weight", r->H * hd, D);
        S("self_attn.k_proj.weight", G * hd, D);
        S("self_attn.v_proj.weight", G * hd, D);
        S("self_attn.o_proj.weight", D, r->H * hd);
        S("post_attention_layernorm.weight", D, 0);
        S("mlp.gate_proj.weight", F, D);
        S("mlp.up_proj.weight", F, D);
        S("mlp.down_proj.weight", D, F);
    } else if (k == L_GPT2) {
        S("ln_1.weight", D, 0), S("ln_1.bias", D, 0);
        S("attn.c_attn.weight", D, 3 * D), S("attn.c_attn.bias", 3 * D, 0);
        S("attn.c_proj.weight", D, D), S("attn.c_proj.bias", D, 0);
        S("ln_2.weight", D, 0), S("ln_2.bias", D, 0);
        S("mlp.c_fc.weight", D, F), S("mlp.c_fc.bias", F, 0);
        S("mlp.c_proj.weight", F, D), S("mlp.c_proj.bias", D, 0);
    } else {
        S("attention.self.query.weight", D, D), S("attention.self.query.bias", D, 0);
        S("attention.self.key.weight", D, D), S("attention.self.key.bias", D, 0);
        S("attention.self.value.weight", D, D), S("attention.self.value.bias", D, 0);
        S("attention.output.dense.weight", D, D), S("attention.output.dense.bias", D, 0);
        S("attention.output.LayerNorm.weight", D, 0), S("attention.output.LayerNorm.bias", D, 0);
        S("intermediate.dense.weight", F, D), S("intermediate.dense.bias", F, 0);
        S("output.dense.weight", D, F), S("output.dense.bias", D, 0);
        S("output.LayerNorm.weight", D, 0), S("output.LayerNorm.bias", D, 0);
    }
#undef S
    uint64_t bytes = 0;
    for (int i = 0; i < n; i++) bytes += 4 * (uint64_t)spec[i].ne[0] * (uint64_t)(spec[i].ne[1] ? spec[i].ne[1] : 1);
    bytes *= (uint64_t)r->o.layers;
    if (!rg_check_memory(bytes, "the random weights", e)) return false;
    r->wctx = gml_init((gml_init_params){.mem_size = (size_t)bytes + (size_t)(n * r->o.layers) *
                                                         (gml_tensor_overhead() + 64) + 4096});
    if (!r->wctx) return rg_fail(e, RG_RUNTIME, "out of memory for the random weights");
    if (r->o.layers > 1) {
        snprintf(r->list, sizeof r->list, "%s", LIST[k][0]);
        set_prefix_fmt(r, true);
    }
    for (int l = 0; l < r->o.layers; l++)
        for (int i = 0; i < n; i++) {
            char name[GML_MAX_NAME];
            prefix_of(r, l, name, sizeof name);
            strncat(name, spec[i].name, sizeof name - strlen(name) - 1);
            gml_tensor *t = spec[i].ne[1] ? gml_new_tensor_2d(r->wctx, GML_F32, spec[i].ne[0], spec[i].ne[1])
                                          : gml_new_tensor_1d(r->wctx, GML_F32, spec[i].ne[0]);
            if (!t) return rg_fail(e, RG_RUNTIME, "%s", gml_last_error(r->wctx));
            rg_fill_random(gml_set_name(t, name), r->o.seed, true);
        }
    return true;
}

/* ---- sizes and data -------------------------------------------------------------- */

static bool settle_sizes(run *r, rg_err *e) {
    const lopts *o = &r->o;
    /* D: the input, else the weights, else --d-model (default 256) */
    int64_t Dw = 0;
    char key[GML_MAX_NAME + 64] = "", ks[64] = "";
    if (r->wctx) {
        snprintf(key, sizeof key, r->prefix_fmt, 0);
        strncat(key, KEY_NAME[o->kind], sizeof key - strlen(key) - 1);
        const gml_tensor *t = gml_get_tensor(r->wctx, key);
        Dw = t ? t->ne[3] : 0;
        if (t) gml_format_shape(t, ks, sizeof ks);
    }
    const int64_t Dx = r->x ? r->x->ne[3] : 0;
    if (Dx && Dw && Dx != Dw) /* the tensor d_model is read from, named with its shape */
        return rg_fail(e, RG_RUNTIME, "%s: %s is %s, but the input %s [%" PRId64 ",%" PRId64 ",%" PRId64
                       "] implies d_model %" PRId64 " (a %s layer's tensors are sized by d_model, the "
                       "input's last size)",
                       o->weights, key, ks, o->input, r->x->ne[1], r->x->ne[2], Dx, Dx, KIND_NAME[o->kind]);
    r->D = Dx ? Dx : Dw ? Dw : o->d_model ? o->d_model : 256;
    if (o->d_model && o->d_model != r->D)
        return rg_fail(e, RG_USAGE, "--d-model %" PRId64 ": the %s has d_model %" PRId64, o->d_model,
                       Dx ? "input" : "weights file", r->D);
    r->B = r->x ? r->x->ne[1] : o->batch ? o->batch : 2;
    r->T = r->x ? r->x->ne[2] : o->seq ? o->seq : 10;
    if (r->x && ((o->batch && o->batch != r->B) || (o->seq && o->seq != r->T)))
        return rg_fail(e, RG_USAGE, "%s %" PRId64 ": the input %s has %" PRId64, o->batch && o->batch != r->B ? "--batch" : "--seq",
                       o->batch && o->batch != r->B ? o->batch : o->seq, o->input,
                       o->batch && o->batch != r->B ? r->B : r->T);
    /* H: --heads, else the sinks' size, else 8 for random weights */
    r->H = o->heads;
    if (!r->H && r->wctx && o->kind == L_LLAMA) {
        char name[GML_MAX_NAME + 64];
        snprintf(name, sizeof name, r->prefix_fmt, 0);
        strncat(name, "self_attn.sinks", sizeof name - strlen(name) - 1);
        const gml_tensor *s = gml_get_tensor(r->wctx, name);
        if (s) r->H = (int)s->ne[3];
    }
    if (!r->H && r->wctx)
        return rg_fail(e, RG_USAGE, "%s: give --heads (the weights do not tell how many heads)", KIND_NAME[o->kind]);
    if (!r->H) r->H = 8;
    /* G (llama): --kv-heads, else k_proj's rows / head_dim, else H/4 */
    r->G = o->kv_heads;
    if (o->kind == L_LLAMA && !r->G && r->wctx) {
        char q[GML_MAX_NAME + 64], k[GML_MAX_NAME + 64];
        snprintf(q, sizeof q, r->prefix_fmt, 0);
        snprintf(k, sizeof k, r->prefix_fmt, 0);
        strncat(q, "self_attn.q_proj.weight", sizeof q - strlen(q) - 1);
        strncat(k, "self_attn.k_proj.weight", sizeof k - strlen(k) - 1);
        const gml_tensor *wq = gml_get_tensor(r->wctx, q), *wk = gml_get_tensor(r->wctx, k);
        if (wq && wk && wq->n_dims == 2 && wk->n_dims == 2 && wq->ne[2] % r->H == 0 &&
            wk->ne[2] % (wq->ne[2] / r->H) == 0)
            r->G = (int)(wk->ne[2] / (wq->ne[2] / r->H));
    }
    if (!r->G) r->G = r->H % 4 == 0 ? r->H / 4 : r->H;
    if (o->kind != L_LLAMA) r->G = r->H;
    if (!r->wctx && r->D % r->H)
        return rg_fail(e, RG_USAGE, "%s: heads %d do not divide d_model %" PRId64 " (each head takes "
                       "d_model / heads of it)", KIND_NAME[o->kind], r->H, r->D);
    if (!r->wctx && r->H % r->G)
        return rg_fail(e, RG_USAGE, "%s: kv heads %d do not divide heads %d (each kv head serves "
                       "heads / kv heads query heads)", KIND_NAME[o->kind], r->G, r->H);
    r->F = o->ffn ? o->ffn : o->kind == L_LLAMA ? (8 * r->D / 3 + 15) / 16 * 16 : 4 * r->D;
    if (o->ffn && r->wctx) return rg_fail(e, RG_USAGE, "--ffn is for random weights; the weights file sets it");
    if (o->n_lens && o->n_lens != r->B)
        return rg_fail(e, RG_USAGE, "--valid-lens: %d lengths for a batch of %" PRId64, o->n_lens, r->B);
    for (int i = 0; i < o->n_lens; i++)
        if (o->lens[i] > r->T)
            return rg_fail(e, RG_USAGE, "--valid-lens: length %d of batch row %d is past the %" PRId64 " tokens",
                           (int)o->lens[i], i, r->T);
    return true;
}

static bool load(run *r, rg_err *e) {
    char err[1024];
    if (r->o.input) {
        r->xctx = gml_load_npy(r->o.input, "x", err, sizeof err);
        if (!r->xctx) return rg_fail(e, RG_RUNTIME, "%s", err);
        r->x = gml_get_first_tensor(r->xctx);
        char s[64];
        if (r->x->type != GML_F32 || r->x->n_dims != 3)
            return rg_fail(e, RG_RUNTIME, "%s: x is %s %s, expected f32 [B, T, D]", r->o.input,
                           gml_type_name(r->x->type), gml_format_shape(r->x, s, sizeof s));
    }
    if (r->o.weights) {
        if (!rg_weights_open(r->o.weights, r->o.non_strict, &r->d, e) || !settle_list(r, e) ||
            !rg_weights_under_prefix(r->o.weights, &r->d, e))
            return false;
        r->wctx = r->d.wctx;
        if (!bind_layers(r, e)) return false;
    }
    if (!settle_sizes(r, e)) return false;
    if (!r->wctx) {
        r->random_weights = true;
        if (!make_weights(r, e)) return false;
    }
    /* --weights-dtype, and a file's 1-D F16/BF16 widened; then bound (again) */
    if (r->d.st) {
        if (!rg_weights_convert(&r->d, r->o.has_dtype, r->o.dtype, e)) return false;
        r->wctx = r->d.wctx;
    } else if (!rg_convert_weights(&r->wctx, r->o.has_dtype, r->o.dtype, e)) {
        return false;
    }
    if (!bind_layers(r, e)) return false;
    /* x (random unless given) and the lengths: data of their own */
    size_t need = 2 * (gml_tensor_overhead() + 64) + 4096 + (size_t)r->B * 4;
    if (!r->x) {
        const double bytes = 4.0 * (double)r->B * (double)r->T * (double)r->D;
        if (!rg_check_memory(bytes < 0x1p62 ? (uint64_t)bytes : UINT64_MAX, "the random inputs", e))
            return false;
        need += (size_t)bytes;
    }
    gml_context *c = gml_init((gml_init_params){.mem_size = need});
    if (!c) return rg_fail(e, RG_RUNTIME, "out of memory");
    if (!r->x) {
        r->random_input = true;
        r->x = gml_set_name(gml_new_tensor_3d(c, GML_F32, r->B, r->T, r->D), "x");
        rg_fill_random(r->x, r->o.seed, false);
    }
    if (r->o.n_lens) {
        r->lens = gml_set_name(gml_new_tensor_1d(c, GML_I32, r->B), "valid_lens");
        memcpy(r->lens->data, r->o.lens, (size_t)r->B * sizeof(int32_t));
    }
    gml_set_flags(r->x, GML_FLAG_INPUT);
    if (r->lens) gml_set_flags(r->lens, GML_FLAG_INPUT);
    r->ctx = c; /* freed with the run; the graph gets its own context */
    return true;
}

/* ---- the graph ------------------------------------------------------------------- */

static bool build(run *r, gml_context *gctx, rg_err *e) {
    const lopts *o = &r->o;
    gml_tensor *y = r->x;
    for (int l = 0; l < o->layers; l++) {
        if (o->kind == L_LLAMA) {
            gml_llama_config c = {.n_heads = r->H, .n_kv_heads = r->G, .rope_theta = o->rope_theta,
                                  .rms_eps = o->rms_eps, .window = o->window, .softcap = o->softcap};
            y = gml_llama_layer(gctx, &c, &r->w[l].llama, y, NULL); /* rope at 0..T-1 */
        } else if (o->kind == L_GPT2) {
            y = gml_gpt2_layer(gctx, &(gml_gpt2_config){.n_heads = r->H, .eps = 0}, &r->w[l].gpt2, y);
        } else {
            y = gml_bert_layer(gctx, &(gml_bert_config){.n_heads = r->H, .eps = 0}, &r->w[l].bert, y, r->lens);
        }
        if (!y) {
            char prefix[320];
            file_prefix_of(r, l, prefix, sizeof prefix);
            return rg_fail(e, RG_RUNTIME, "%s%s%s%s%s", o->weights ? o->weights : "", o->weights ? ": " : "",
                           prefix[0] ? prefix : "", prefix[0] ? ": " : "", gml_last_error(gctx));
        }
    }
    r->out = y;
    return true;
}

/* --grads: the input as 'input' and every weight under its name in the file
 * (or the random weights' own), their gradients as nodes of gctx. */
static bool build_grads(run *r, gml_context *gctx, rg_err *e) {
    rg_grads *gr = &r->grads;
    if (!rg_grads_load_dy(r->o.args, r->out, gr, e) || !rg_grads_add(gr, r->x, "input", true, false, e))
        return false;
    for (gml_tensor *t = gml_get_first_tensor(r->wctx); t; t = gml_get_next_tensor(r->wctx, t)) {
        char name[sizeof r->d.prefix + GML_MAX_NAME];
        snprintf(name, sizeof name, "%s%s", r->d.st ? r->d.prefix : "", t->name);
        if (!rg_grads_add(gr, t, name, false, false, e)) return false;
    }
    return rg_grads_build(gctx, &r->out, 1, gr, e);
}

/* One compute of the layers' graph (rg_timed_run). */
static bool compute(void *user, int i, double *ms) {
    (void)i, (void)ms; /* timed as a whole */
    run *r = user;
    if (gml_graph_compute(r->g, r->o.threads) == GML_OK) return true;
    return rg_fail(r->e, RG_RUNTIME, "compute failed: %s", gml_graph_error(r->g));
}

/* --json: the keys of every mode's report (rg_json_head), then the layers'. */
static bool report_json(const run *r, const gml_tensor *out, uint64_t digest, double *ms, rg_err *e) {
    const lopts *o = &r->o;
    const int64_t dim[RG_NSYM] = {[RG_B] = r->B, [RG_T] = r->T, [RG_D] = r->D, [RG_H] = r->H, [RG_G] = r->G};
    const bool shown[RG_NSYM] = {[RG_B] = true, [RG_T] = true, [RG_D] = true, [RG_H] = true,
                                 [RG_G] = o->kind == L_LLAMA};
    const double med = rg_median(ms, o->repeat); /* sorts ms: ms[0] is the fastest */
    cJSON *j = rg_json_head(&(rg_summary){
        .model = o->model, .dim = dim, .shown = shown, .causal = o->kind != L_BERT, .out = out,
        .digest = digest, .threads = o->threads, .runs = o->repeat, .median_ms = med,
        .min_ms = ms[0], .flops = gml_graph_flops(r->g), .peak_bytes = rg_tensor_bytes(r->g, false),
        .random_weights = r->random_weights, .random_inputs = r->random_input});
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, gml_graph_digest(r->g));
    cJSON_AddNumberToObject(j, "naive_bytes", (double)rg_tensor_bytes(r->g, true));
    cJSON_AddNumberToObject(j, "packed_bytes", (double)gml_graph_packed_bytes(r->g));
    cJSON_AddNumberToObject(j, "nodes", gml_graph_n_nodes(r->g));
    cJSON_AddStringToObject(j, "graph_digest", hex);
    cJSON_AddNumberToObject(j, "layers", o->layers);
    cJSON_AddBoolToObject(j, "valid_lens", r->lens != NULL);
    if (o->args->grads) cJSON_AddNumberToObject(j, "grads", r->grads.n);
    return rg_json_print(j, e);
}

static bool execute(run *r, rg_err *e) {
    const lopts *o = &r->o;
    /* headers: the forward's, and with --grads the backward's */
    const size_t arena = (size_t)((o->args->grads ? 640 : 80) * o->layers + 64) * gml_tensor_overhead();
    gml_context *gctx = gml_init((gml_init_params){.mem_size = arena, .no_alloc = true});
    if (!gctx) return rg_fail(e, RG_RUNTIME, "out of memory");
    if (gml_set_default_compute(gctx, o->compute) != GML_OK) { /* --compute: the layers' matmuls */
        rg_fail(e, RG_USAGE, "--compute %s: %s", gml_compute_name(o->compute), gml_last_error(gctx));
        gml_free(gctx);
        return false;
    }
    bool ok = build(r, gctx, e) && (!o->args->grads || build_grads(r, gctx, e));
    if (ok) { /* the output, then the gradients */
        gml_tensor **outs = malloc((size_t)(1 + r->grads.n) * sizeof *outs);
        if (!outs) ok = rg_fail(e, RG_RUNTIME, "out of memory");
        for (int i = 0; ok && i < 1 + r->grads.n; i++) outs[i] = i ? r->grads.grad[i - 1] : r->out;
        r->g = ok ? gml_build_graph(gctx, outs, 1 + r->grads.n) : NULL;
        free(outs);
        if (!r->g) ok = rg_fail(e, RG_RUNTIME, "%s", gml_last_error(gctx));
    }
    ok = ok && rg_place(r->g, "the graph's tensors", rg_leaf_bytes(r->g), e);
    if (ok) gml_graph_set_nan_trap(r->g, o->nan_trap);
    if (ok && o->print_graph) gml_graph_print(r->g, o->json ? stderr : stdout);
    double *ms = ok ? malloc(sizeof *ms * (size_t)o->repeat) : NULL;
    if (ok && !ms) ok = rg_fail(e, RG_RUNTIME, "out of memory");
    r->e = e;
    ok = ok && rg_time_runs(o->repeat, compute, r, ms);
    const gml_tensor *out = ok ? gml_graph_tensor(r->g, r->out) : NULL;
    size_t n_bytes = 0;
    float *dense = ok ? rg_dense(out, &n_bytes) : NULL;
    if (ok && !dense) ok = rg_fail(e, RG_RUNTIME, "out of memory");
    for (size_t i = 0; ok && i < n_bytes / 4; i++)
        if (!isfinite(dense[i]))
            ok = rg_fail(e, RG_RUNTIME, "the output holds a non-finite value (%g at element %zu); the "
                         "inputs or weights may hold NaN or inf%s", dense[i], i,
                         o->nan_trap ? "" : " (--nan-trap names the first node that makes one)");
    char err[1024];
    if (ok && o->args->grads) { /* both files, or neither */
        rg_stage st = {0};
        const char *tmp = o->output ? rg_stage_add(&st, o->output) : NULL;
        if (o->output && !tmp) ok = rg_fail(e, RG_RUNTIME, "out of memory");
        if (ok && tmp && gml_save_npy(tmp, out, err, sizeof err) != GML_OK) {
            rg_stage_message(&st, err, sizeof err);
            ok = rg_fail(e, RG_RUNTIME, "%s", err);
        }
        ok = ok && rg_grads_save(&st, o->args->grads, r->g, &r->grads, e);
        if (ok) ok = rg_stage_commit(&st, e);
        else rg_stage_abort(&st);
    } else if (ok && o->output && gml_save_npy(o->output, out, err, sizeof err) != GML_OK) {
        ok = rg_fail(e, RG_RUNTIME, "%s", err);
    }
    if (ok && o->json) ok = report_json(r, out, XXH3_64bits(dense, n_bytes), ms, e);
    else if (ok) {
        const double med = rg_median(ms, o->repeat), flops = gml_graph_flops(r->g);
        char shape[64], pfx[320] = "none";
        if (r->list[0]) /* "model.layers.<i>." */
            snprintf(pfx, sizeof pfx, "%s%s", r->list, strstr(r->prefix_fmt, "%d.") ? "<i>." : "");
        printf("%s: B=%" PRId64 " T=%" PRId64 " D=%" PRId64 " H=%d", KIND_NAME[o->kind], r->B, r->T, r->D, r->H);
        if (o->kind == L_LLAMA) printf(" G=%d", r->G);
        printf(", %d layer%s", o->layers, o->layers > 1 ? "s" : "");
        if (o->kind != L_BERT) printf(", causal");
        if (r->lens) printf(", valid lengths");
        if (r->random_weights || r->random_input)
            printf(", random %s", r->random_weights && r->random_input ? "weights and inputs"
                                  : r->random_weights                ? "weights"
                                                                     : "inputs");
        else
            printf(", layer prefix %s", pfx);
        printf("\noutput  %s  xxh3 %016" PRIx64 "\n", gml_format_shape(out, shape, sizeof shape),
               (uint64_t)XXH3_64bits(dense, n_bytes));
        printf("time    %.3f ms", med);
        if (o->repeat > 1) printf(" median, %.3f ms min of %d runs", ms[0], o->repeat);
        printf(" (%d thread%s, %s)", o->threads, o->threads == 1 ? "" : "s", gml_isa_name(gml_get_isa()));
        if (med > 0 && flops > 0) printf(", %.2f GFLOP/s", flops / (med * 1e6));
        printf("\n");
        rg_print_memory(r->g);
        if (o->args->grads) {
            char line[1024];
            rg_grads_describe(&r->grads, o->args->grads, line, sizeof line);
            printf("grads   %s\n", line);
        }
    }
    free(dense);
    free(ms);
    gml_graph_free(r->g);
    r->g = NULL;
    gml_free(gctx);
    return ok;
}

int rg_layers_main(const rg_opts *g) {
    run r = {.o = options(g)};
    rg_err e = {0};
    r.w = calloc((size_t)r.o.layers, sizeof *r.w);
    bool ok = r.w || rg_fail(&e, RG_RUNTIME, "out of memory");
    ok = ok && load(&r, &e) && execute(&r, &e);
    free(r.w);
    rg_grads_free(&r.grads);
    gml_free(r.ctx);
    if (r.wctx != r.d.wctx) gml_free(r.wctx); /* the random weights */
    gml_free(r.xctx);
    rg_data_free(&r.d); /* after the graph and the contexts reading its mapping */
    if (ok) return 0;
    fprintf(stderr, "run-graph: %s\n", e.msg);
    return e.status ? e.status : RG_RUNTIME;
}
