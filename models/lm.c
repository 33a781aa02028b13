/* Whole language models (lm.h): GPT-2 and LLaMA from token ids to logits,
 * the layers of gpt2.c and llama.c between an embedding and a final norm and
 * head; weights bound by HF names, strictly. */
#include "misuse.h"
#include "layers_internal.h"

#include <ggmlite/lm.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The names of one architecture, under its optional prefix. */
typedef struct lm_names {
    const char *label;  /* messages start with it */
    const char *prefix; /* the optional one ("transformer.") */
    const char *tok, *pos, *layers, *norm_w, *norm_b; /* pos, norm_b NULL: none */
} lm_names;

static const lm_names GPT2_NAMES = {"gpt2 lm", "transformer.", "wte.weight", "wpe.weight",
                                    "h.", "ln_f.weight", "ln_f.bias"};
static const lm_names LLAMA_NAMES = {"llama lm", "model.", "embed_tokens.weight", NULL,
                                     "layers.", "norm.weight", NULL};
#define HEAD_NAME "lm_head.weight"

/* Appends printf text to buf of size at *len, truncating with "..." when full. */
static void appendf(char *buf, size_t size, size_t *len, const char *fmt, ...) GML_PRINTF(4, 5);
static void appendf(char *buf, size_t size, size_t *len, const char *fmt, ...) {
    if (*len + 1 >= size) return;
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(buf + *len, size - *len, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= size - *len) {
        *len = size - 1;
        if (size > 4) memcpy(buf + size - 4, "...", 4);
    } else {
        *len += (size_t)n;
    }
}

/* "h.12.rest" (layers "h.") -> 12, the layer's index, with *rest after its
 * dot; -1 when name is not a layer's (no digits, a leading zero, no dot,
 * more than 9 digits). */
static int64_t layer_index(const char *name, const char *layers) {
    const size_t n = strlen(layers);
    if (strncmp(name, layers, n) != 0) return -1;
    const char *p = name + n;
    int64_t i = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 10) i = i * 10 + (*p++ - '0'), digits++;
    if (digits == 0 || digits > 9 || *p != '.' || (digits > 1 && name[n] == '0')) return -1;
    return i;
}

/* A shape check of a top-level tensor: t is [rows] (cols < 0, f32) or
 * [rows, cols] (f32, f16, bf16 or q8_0); rows < 0: any. Writes the message
 * into err when not. */
static bool shape_ok(const lm_names *nm, const char *prefix, const char *name, const gml_tensor *t,
                     int64_t rows, int64_t cols, const char *what, char *err, size_t err_size) {
    const bool mat = cols >= 0;
    const bool type_ok = t->type == GML_F32 || (mat && (t->type == GML_F16 ||
                                                       t->type == GML_BF16 ||
                                                       t->type == GML_Q8_0));
    const bool ok =
        type_ok && (mat ? t->n_dims == 2 && (rows < 0 || t->ne[2] == rows) && t->ne[3] == cols
                        : t->n_dims == 1 && t->ne[3] == rows);
    if (ok) return true;
    char st[GML_SHAPE_MAX];
    if (err_size)
        snprintf(err, err_size, "%s: %s%s is %s %s, expected %s %s", nm->label,
                 strcmp(name, HEAD_NAME) ? prefix : "", name, gml_type_name(t->type),
                 gml_format_shape(t, st, sizeof st),
                 !type_ok ? (mat ? "f32, f16, bf16 or q8_0" : "f32") : gml_type_name(t->type),
                 what);
    return false;
}

/* The top-level tensors against each other: [V, D] embedding, head, norm. */
static bool check_top(const lm_names *nm, const char *prefix, const gml_lm *lm, char *err,
                      size_t err_size) {
    const gml_tensor *e = lm->tok_emb;
    char what[160], st[GML_SHAPE_MAX];
    if (!shape_ok(nm, prefix, nm->tok, e, -1, e->n_dims == 2 ? e->ne[3] : 0, "[V, D]", err,
                  err_size))
        return false;
    const int64_t V = e->ne[2], D = e->ne[3];
    snprintf(what, sizeof what, "[%" PRId64 ",%" PRId64 "] ([V, D], as %s%s %s)", V, D, prefix,
             nm->tok, gml_format_shape(e, st, sizeof st));
    if (lm->head != e && !shape_ok(nm, prefix, HEAD_NAME, lm->head, V, D, what, err, err_size))
        return false;
    snprintf(what, sizeof what, "[%" PRId64 "] ([D], D from %s%s %s)", D, prefix, nm->tok,
             gml_format_shape(e, st, sizeof st));
    if (!shape_ok(nm, prefix, nm->norm_w, lm->norm_w, D, -1, what, err, err_size)) return false;
    if (nm->norm_b && !shape_ok(nm, prefix, nm->norm_b, lm->norm_b, D, -1, what, err, err_size))
        return false;
    snprintf(what, sizeof what, "[n_ctx, %" PRId64 "] ([n_ctx, D], D from %s%s %s)", D, prefix,
             nm->tok, gml_format_shape(e, st, sizeof st));
    if (nm->pos && !shape_ok(nm, prefix, nm->pos, lm->pos_emb, -1, D, what, err, err_size))
        return false;
    return true;
}

gml_status gml_lm_find(gml_context *wctx, const gml_lm_config *cfg, gml_lm *lm, char *err,
                       size_t err_size) {
    if (!err) err_size = 0;
    if (err_size) err[0] = '\0';
    GML_MODELS_NONNULL_ERR(lm, GML_ERR_INVALID, err, err_size);
    *lm = (gml_lm){0};
    GML_MODELS_NONNULL_ERR(wctx, GML_ERR_INVALID, err, err_size);
    GML_MODELS_NONNULL_ERR(cfg, GML_ERR_INVALID, err, err_size);
    if (cfg->arch != GML_LM_GPT2 && cfg->arch != GML_LM_LLAMA) {
        if (err_size)
            snprintf(err, err_size,
                     "gml_lm_find: arch %d is not GML_LM_GPT2 (%d) or GML_LM_LLAMA (%d)",
                     (int)cfg->arch, (int)GML_LM_GPT2, (int)GML_LM_LLAMA);
        return GML_ERR_INVALID;
    }
    const lm_names *nm = cfg->arch == GML_LM_GPT2 ? &GPT2_NAMES : &LLAMA_NAMES;

    /* the prefix is in use when any tensor has it */
    const char *prefix = "";
    int64_t n_tensors = 0;
    for (gml_tensor *t = gml_get_first_tensor(wctx); t; t = gml_get_next_tensor(wctx, t)) {
        n_tensors++;
        if (strncmp(t->name, nm->prefix, strlen(nm->prefix)) == 0) prefix = nm->prefix;
    }
    const size_t plen = strlen(prefix);

    /* first pass: the top-level tensors, the unknown ones, the largest layer index */
    char unknown[512] = "", missing[512] = "";
    size_t ulen = 0, mlen = 0;
    int n_unknown = 0, n_missing = 0;
    int64_t n_layers = 0;
    for (gml_tensor *t = gml_get_first_tensor(wctx); t; t = gml_get_next_tensor(wctx, t)) {
        const char *rest = t->name + plen;
        int64_t li;
        if (strcmp(t->name, HEAD_NAME) == 0) lm->head = t;
        else if (strncmp(t->name, prefix, plen) != 0) goto unknown;
        else if (strcmp(rest, nm->tok) == 0) lm->tok_emb = t;
        else if (nm->pos && strcmp(rest, nm->pos) == 0) lm->pos_emb = t;
        else if (strcmp(rest, nm->norm_w) == 0) lm->norm_w = t;
        else if (nm->norm_b && strcmp(rest, nm->norm_b) == 0) lm->norm_b = t;
        else if ((li = layer_index(rest, nm->layers)) >= 0)
            n_layers = li + 1 > n_layers ? li + 1 : n_layers;
        else goto unknown;
        continue;
    unknown:
        appendf(unknown, sizeof unknown, &ulen, "%s%s", n_unknown++ ? ", " : "", t->name);
    }
    const char *need[] = {nm->tok, nm->pos, nm->norm_w, nm->norm_b};
    const gml_tensor *got[] = {lm->tok_emb, lm->pos_emb, lm->norm_w, lm->norm_b};
    for (int i = 0; i < 4; i++)
        if (need[i] && !got[i])
            appendf(missing, sizeof missing, &mlen, "%s%s%s", n_missing++ ? ", " : "", prefix,
                    need[i]);
    if (n_layers == 0)
        appendf(missing, sizeof missing, &mlen, "%s%s%s0.* (no layer)", n_missing++ ? ", " : "",
                prefix, nm->layers);
    if (n_unknown || n_missing) {
        if (err_size) {
            if (n_missing && n_unknown)
                snprintf(err, err_size, "%s: missing %s; not %s tensors: %s", nm->label, missing,
                         nm->label, unknown);
            else if (n_missing)
                snprintf(err, err_size, "%s: missing %s", nm->label, missing);
            else
                snprintf(err, err_size, "%s: tensor%s not of a %s: %s", nm->label,
                         n_unknown > 1 ? "s" : "", nm->label, unknown);
        }
        *lm = (gml_lm){0};
        return GML_ERR_INVALID;
    }
    if (!lm->head) lm->head = lm->tok_emb; /* tied */
    if (!check_top(nm, prefix, lm, err, err_size)) {
        *lm = (gml_lm){0};
        return GML_ERR_INVALID;
    }
    /* a layer index beyond the tensor count means layers are missing; the
     * arrays below stay bounded by the tensors there are */
    if (n_layers > n_tensors || n_layers > INT32_MAX) {
        if (err_size)
            snprintf(err, err_size, "%s: %s%s%" PRId64 ".* found but only %" PRId64
                     " tensors: layers 0..%" PRId64 " cannot all be there", nm->label, prefix,
                     nm->layers, n_layers - 1, n_tensors, n_layers - 1);
        *lm = (gml_lm){0};
        return GML_ERR_INVALID;
    }

    /* second pass: which layers have tensors, so a gap is named as one */
    bool *present = calloc((size_t)n_layers, sizeof *present);
    void *layers = calloc((size_t)n_layers, cfg->arch == GML_LM_GPT2 ? sizeof(gml_gpt2_weights)
                                                                      : sizeof(gml_llama_weights));
    if (!present || !layers) {
        free(present);
        free(layers);
        if (err_size)
            snprintf(err, err_size, "%s: out of memory for %" PRId64 " layers", nm->label,
                     n_layers);
        *lm = (gml_lm){0};
        return GML_ERR_NOMEM;
    }
    for (gml_tensor *t = gml_get_first_tensor(wctx); t; t = gml_get_next_tensor(wctx, t)) {
        const int64_t li =
            strncmp(t->name, prefix, plen) == 0 ? layer_index(t->name + plen, nm->layers) : -1;
        if (li >= 0) present[li] = true;
    }
    char gaps[256] = "";
    size_t glen = 0;
    int n_gaps = 0;
    for (int64_t i = 0; i < n_layers; i++)
        if (!present[i])
            appendf(gaps, sizeof gaps, &glen, "%s%s%s%" PRId64 ".*", n_gaps++ ? ", " : "", prefix,
                    nm->layers, i);
    free(present);
    gml_status st = GML_OK;
    if (n_gaps) {
        if (err_size)
            snprintf(err, err_size,
                     "%s: %" PRId64 " layers (up to %s%s%" PRId64 ".*) but no tensor of %s",
                     nm->label, n_layers, prefix, nm->layers, n_layers - 1, gaps);
        st = GML_ERR_INVALID;
    }
    for (int64_t i = 0; st == GML_OK && i < n_layers; i++) {
        char lp[96], lerr[448] = "";
        snprintf(lp, sizeof lp, "%s%s%" PRId64 ".", prefix, nm->layers, i);
        st = cfg->arch == GML_LM_GPT2
                 ? gml_gpt2_weights_find(wctx, lp, (gml_gpt2_weights *)layers + i, lerr,
                                         sizeof lerr)
                 : gml_llama_weights_find(wctx, lp, (gml_llama_weights *)layers + i, lerr,
                                          sizeof lerr);
        if (st != GML_OK && err_size) snprintf(err, err_size, "%s: %s", nm->label, lerr);
    }
    if (st != GML_OK) {
        free(layers);
        *lm = (gml_lm){0};
        return st;
    }
    lm->cfg = *cfg;
    lm->n_layers = (int)n_layers;
    lm->n_vocab = lm->tok_emb->ne[2];
    lm->d_model = lm->tok_emb->ne[3];
    lm->n_ctx = lm->pos_emb ? lm->pos_emb->ne[2] : 0;
    if (cfg->arch == GML_LM_GPT2) lm->gpt2 = layers;
    else lm->llama = layers;
    return GML_OK;
}

void gml_lm_free(gml_lm *lm) {
    if (!lm) return;
    free(lm->gpt2);
    free(lm->llama);
    *lm = (gml_lm){0};
}

/* ---- the graph ---------------------------------------------------------------- */

/* The model as gml_lm_logits uses it (lm may have been filled by hand). */
static bool check_model(gml_context *ctx, const lm_names *nm, const gml_lm *lm) {
    const bool gpt2 = lm->cfg.arch == GML_LM_GPT2;
    if (lm->n_layers < 0 || (lm->n_layers > 0 && !(gpt2 ? (void *)lm->gpt2 : (void *)lm->llama)))
        return gml_lay_fail(ctx, "%s: n_layers %d with no %s weights array", nm->label,
                            lm->n_layers, gpt2 ? "gpt2" : "llama");
    const char *miss = !lm->tok_emb ? "tok_emb" : !lm->head ? "head" : !lm->norm_w ? "norm_w"
                       : gpt2 && !lm->norm_b ? "norm_b" : gpt2 && !lm->pos_emb ? "pos_emb" : NULL;
    if (miss)
        return gml_lay_fail(ctx, "%s: the model's %s is NULL (bind it with gml_lm_find)", nm->label,
                            miss);
    char msg[GML_ERR_MAX];
    if (!check_top(nm, "", lm, msg, sizeof msg)) return gml_lay_fail(ctx, "%s", msg);
    const float eps = gpt2 ? lm->cfg.gpt2.eps : lm->cfg.llama.rms_eps;
    if (!(eps >= 0 && eps < INFINITY))
        return gml_lay_fail(ctx, "%s: %s %g must be finite and >= 0", nm->label,
                            gpt2 ? "eps" : "rms_eps", (double)eps);
    return true;
}

gml_tensor *gml_lm_logits(gml_context *ctx, const gml_lm *lm, gml_tensor *tokens) {
    GML_MODELS_NONNULL(NULL, ctx, NULL);
    GML_MODELS_NONNULL(ctx, lm, NULL);
    if (!tokens) {
        if (!gml_last_error(ctx)[0]) gml_set_error(ctx, "gml_lm_logits: tokens is NULL");
        return NULL;
    }
    if (lm->cfg.arch != GML_LM_GPT2 && lm->cfg.arch != GML_LM_LLAMA)
        return gml_set_error(ctx, "gml_lm_logits: arch %d is not GML_LM_GPT2 or GML_LM_LLAMA",
                             (int)lm->cfg.arch);
    const bool gpt2 = lm->cfg.arch == GML_LM_GPT2;
    const lm_names *nm = gpt2 ? &GPT2_NAMES : &LLAMA_NAMES;
    if (!check_model(ctx, nm, lm)) return NULL;
    char st[GML_SHAPE_MAX];
    if (tokens->type != GML_I32 || tokens->n_dims != 2)
        return gml_set_error(ctx, "%s: tokens '%s' is %s %s, expected i32 [B, T]", nm->label,
                             tokens->name, gml_type_name(tokens->type), GML_LAY_SHAPE(tokens, st));
    const int64_t T = tokens->ne[3];
    if (gpt2 && T > lm->pos_emb->ne[2])
        return gml_set_error(ctx, "%s: tokens '%s' %s has T = %" PRId64 " positions, more than "
                             "wpe.weight's %" PRId64 " (n_ctx)", nm->label, tokens->name,
                             GML_LAY_SHAPE(tokens, st), T, lm->pos_emb->ne[2]);

    gml_tensor *x = gml_set_name(gml_get_rows(ctx, lm->tok_emb, tokens), "tok_emb"); /* [B, T, D] */
    if (gpt2) {
        gml_tensor *pos = gml_get_rows(ctx, lm->pos_emb, gml_arange(ctx, T, 0)); /* [T, D] */
        x = gml_set_name(gml_add(ctx, x, gml_set_name(pos, "pos_emb")), "emb");   /* [B, T, D] */
    }
    for (int i = 0; x && i < lm->n_layers; i++) {
        gml_tensor *y = gpt2 ? gml_gpt2_layer(ctx, &lm->cfg.gpt2, &lm->gpt2[i], x)
                             : gml_llama_layer(ctx, &lm->cfg.llama, &lm->llama[i], x, NULL);
        if (!y) {
            char msg[GML_ERR_MAX];
            snprintf(msg, sizeof msg, "%s", gml_last_error(ctx));
            return gml_set_error(ctx, "%s: layer %d: %s", nm->label, i, msg);
        }
        x = y;
    }
    if (!x) return NULL;
    gml_tensor *n = gpt2 ? gml_layer_norm(ctx, x, lm->norm_w, lm->norm_b,
                                          lm->cfg.gpt2.eps != 0 ? lm->cfg.gpt2.eps : 1e-5f)
                         : gml_rms_norm(ctx, x, lm->norm_w,
                                        lm->cfg.llama.rms_eps != 0 ? lm->cfg.llama.rms_eps : 1e-6f);
    n = gml_set_name(n, gpt2 ? "ln_f" : "norm");                              /* [B, T, D] */
    return gml_set_name(gml_linear(ctx, n, lm->head, NULL), "logits");       /* [B, T, V] */
}
