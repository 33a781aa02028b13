/* run-graph's data: loads the input and weight files, works out every size
 * from the files, the flags and the defaults (each size remembers where it
 * came from, so a disagreement names both sources), and makes deterministic
 * random inputs and weights for what the files do not give. */
#define _POSIX_C_SOURCE 200809L
#include "rg.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

/* Defaults when neither files nor flags give a size (like the mha_seed
 * fixture): B=2 T=10 D=512 H=8, S=T, G=H (gqa: H/4), P=4, M=N=K=256. */
static const int64_t DEFAULT[RG_NSYM] = {2, 10, 0, 512, 8, 0, 4, 256, 256, 256};

static bool keep(rg_data *d, gml_context *c, rg_err *e) {
    if (!c) return rg_fail(e, RG_RUNTIME, "out of memory");
    if (d->n_ctxs == RG_MAX_CTX) {
        gml_free(c);
        return rg_fail(e, RG_RUNTIME, "too many files");
    }
    d->ctxs[d->n_ctxs++] = c;
    return true;
}

void rg_data_free(rg_data *d) {
    for (int i = 0; i < d->n_ctxs; i++) gml_free(d->ctxs[i]);
    gml_safetensors_close(d->st); /* after the contexts whose headers point into it */
    free(d->w_index);
    free(d->w_tensor);
    *d = (rg_data){0};
}

static const char *shape_of(const gml_tensor *t, char *buf, size_t size) {
    return gml_format_shape(t, buf, size);
}

/* ---- sizes and where they came from ----------------------------------------- */

static bool fact(rg_data *d, int sym, int64_t v, rg_err *e, const char *fmt, ...) RG_PRINTF(5, 6);
static bool fact(rg_data *d, int sym, int64_t v, rg_err *e, const char *fmt, ...) {
    char src[sizeof d->src[0]];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(src, sizeof src, fmt, ap);
    va_end(ap);
    if (!d->known[sym]) {
        d->known[sym] = true;
        d->dim[sym] = v;
        memcpy(d->src[sym], src, sizeof src);
        return true;
    }
    if (d->dim[sym] == v) return true;
    return rg_fail(e, RG_RUNTIME, "%s disagrees with %s (%s = %" PRId64 ")", src, d->src[sym],
                   RG_SYM[sym], d->dim[sym]);
}

/* ---- files -------------------------------------------------------------------- */

/* A .npy file; float64, float16 and bool data are converted to f32, with a
 * note on stderr (*from, if given, says which it was: NULL for f32/i32). */
static gml_tensor *load_npy_from(rg_data *d, const char *path, const char *name, const char **from,
                                 rg_err *e) {
    char err[1024];
    const char *conv = NULL;
    gml_context *c = gml_load_npy_converted(path, name, &conv, err, sizeof err);
    if (from) *from = conv;
    if (!c) {
        rg_fail(e, RG_RUNTIME, "%s", err);
        return NULL;
    }
    if (!keep(d, c, e)) return NULL;
    gml_tensor *t = gml_get_tensor(c, name);
    if (conv)
        fprintf(stderr, "run-graph: note: %s: %s data converted to f32%s\n", path, conv,
                strcmp(conv, "bool") == 0 ? (from ? " (a mask: True = not allowed, -inf)" : " (0 or 1)")
                : strcmp(conv, "float64") == 0 ? " (rounded to nearest)" : " (exactly)");
    return t;
}

static gml_tensor *load_npy(rg_data *d, const char *path, const char *name, rg_err *e) {
    return load_npy_from(d, path, name, NULL, e);
}

/* --seq-first: t [T, B, D] as a new contiguous [B, T, D] tensor. */
static gml_tensor *batch_first_copy(rg_data *d, const gml_tensor *t, rg_err *e) {
    const int64_t T = t->ne[1], B = t->ne[2], D = t->ne[3];
    gml_context *c = gml_init((gml_init_params){.mem_size = gml_tensor_overhead() + (size_t)gml_nbytes(t) + 256});
    if (!keep(d, c, e)) return NULL;
    gml_tensor *u = gml_new_tensor_3d(c, t->type, B, T, D);
    if (!u) {
        rg_fail(e, RG_RUNTIME, "%s", gml_last_error(c));
        return NULL;
    }
    gml_set_name(u, t->name);
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < T; i++)
            memcpy((char *)u->data + (size_t)(b * T + i) * (size_t)D * 4,
                   (const char *)t->data + (size_t)(i * B + b) * (size_t)D * 4, (size_t)D * 4);
    return u;
}

/* An attention input: f32 [B, len, D]. */
static gml_tensor *load_seq(rg_data *d, const char *path, const char *name, int len_sym,
                            bool self, rg_err *e) {
    gml_tensor *t = load_npy(d, path, name, e);
    if (!t) return NULL;
    char s[96];
    shape_of(t, s, sizeof s);
    if (t->type != GML_F32 || t->n_dims != 3) {
        rg_fail(e, RG_RUNTIME, "%s: %s %s is not an f32 %s input", path, gml_type_name(t->type), s,
                RG_SYM[len_sym][0] == 'T' ? (d->seq_first ? "[T, B, D]" : "[B, T, D]")
                                          : (d->seq_first ? "[S, B, D]" : "[B, S, D]"));
        return NULL;
    }
    if (d->seq_first) { /* [T, B, D] as nn.MultiheadAttention(batch_first=False) takes it */
        snprintf(s + strlen(s), sizeof s - strlen(s), " (--seq-first: [%s, B, D])", RG_SYM[len_sym]);
        if (!(t = batch_first_copy(d, t, e))) return NULL;
    }
    bool ok = fact(d, RG_B, t->ne[1], e, "%s %s", path, s) &&
              fact(d, len_sym, t->ne[2], e, "%s %s", path, s) &&
              /* key and value: kdim, vdim (nn.MultiheadAttention), checked against w_k, w_v */
              (len_sym == RG_S || fact(d, RG_D, t->ne[3], e, "%s %s", path, s)) &&
              (!self || fact(d, RG_S, t->ne[2], e, "%s %s (self-attention: S = T)", path, s));
    return ok ? t : NULL;
}

/* Sizes the standard weights tell: D from every projection, P and d_k from
 * rel_k.weight [2P+1, d_k]. */
static bool weight_facts(const rg_opts *o, rg_data *d, int64_t *dk, rg_err *e) {
    char s[64], err[1024];
    gml_attn_weights w; /* by any of the binder's names; a file it refuses fails later, saying why */
    if (gml_attn_weights_find(d->wctx, &w, err, sizeof err) != GML_OK) { /* the plain names */
        w = (gml_attn_weights){.w_q = gml_get_tensor(d->wctx, "w_q.weight"),
                               .in_proj_weight = gml_get_tensor(d->wctx, "in_proj_weight")};
        w.w_o = gml_get_tensor(d->wctx, "w_o.weight");
        if (!w.w_o) w.w_o = gml_get_tensor(d->wctx, "out_proj.weight");
    }
    gml_tensor *const square[] = {w.w_q, w.w_o};
    for (int i = 0; i < 2; i++) {
        gml_tensor *t = square[i];
        if (!t || t->n_dims != 2) continue;
        shape_of(t, s, sizeof s);
        if (t->ne[2] != t->ne[3])
            return rg_fail(e, RG_RUNTIME, "%s: %s is %s, but it must be square, [D, D]", o->weights,
                           t->name, s);
        if (!fact(d, RG_D, t->ne[3], e, "%s: %s %s", o->weights, t->name, s)) return false;
    }
    gml_tensor *ip = w.in_proj_weight; /* [D + 2 kv, D], or Conv1D [D, D + 2 kv] */
    if (ip && ip->n_dims == 2 &&
        !fact(d, RG_D, w.conv1d ? ip->ne[2] : ip->ne[3], e, "%s: %s %s%s", o->weights, ip->name,
              shape_of(ip, s, sizeof s), w.conv1d ? " (Conv1D [D, 3D])" : ""))
        return false;
    gml_tensor *rk = gml_get_tensor(d->wctx, "rel_k.weight");
    if (rk && rk->n_dims == 2) {
        shape_of(rk, s, sizeof s);
        if (rk->ne[2] % 2 == 0)
            return rg_fail(e, RG_RUNTIME, "%s: rel_k.weight %s has %" PRId64 " rows; expected 2P+1 (odd)",
                           o->weights, s, rk->ne[2]);
        if (!fact(d, RG_P, (rk->ne[2] - 1) / 2, e, "%s: rel_k.weight %s (P = (rows - 1) / 2)", o->weights, s))
            return false;
        *dk = rk->ne[3];
    }
    return true;
}

/* G from the key projection's rows, once H (so d_k) is known. */
static bool kv_heads_fact(const rg_opts *o, rg_data *d, rg_err *e) {
    int64_t dk = d->dim[RG_D] / d->dim[RG_H], rows = -1;
    char s[64], err[1024];
    gml_attn_weights w;
    if (gml_attn_weights_find(d->wctx, &w, err, sizeof err) != GML_OK) return true; /* said later */
    gml_tensor *t = w.w_k;
    if (t && t->n_dims == 2) rows = t->ne[2];
    gml_tensor *ip = w.in_proj_weight;
    if (!t && ip && ip->n_dims == 2) {
        t = ip;
        const int64_t all = w.conv1d ? ip->ne[3] : ip->ne[2];
        if ((all - d->dim[RG_D]) % 2 || all <= d->dim[RG_D])
            return rg_fail(e, RG_RUNTIME, "%s: %s %s is not %s with D = %" PRId64, o->weights, ip->name,
                           shape_of(ip, s, sizeof s), w.conv1d ? "[D, D + 2*G*d_k] (Conv1D)" : "[D + 2*G*d_k, D]",
                           d->dim[RG_D]);
        rows = (all - d->dim[RG_D]) / 2;
    }
    if (rows < 0) return true;
    shape_of(t, s, sizeof s);
    if (rows % dk)
        return rg_fail(e, RG_RUNTIME, "%s: %s %s: %" PRId64 " key rows are not a multiple of d_k = D / H = %" PRId64,
                       o->weights, t->name, s, rows, dk);
    return fact(d, RG_G, rows / dk, e, "%s: %s %s (G = %" PRId64 " key rows / d_k %" PRId64 ")", o->weights,
                t->name, s, rows, dk);
}

/* ---- weights: mapped, under a prefix ---------------------------------------------- */

/* The names of a block's projections (models/attn_weights.c binds them), for
 * finding the prefix of a file that holds one block. Only the projections:
 * a whole layer's self_attn.sinks or rel_k beside its other tensors (a graph
 * file's params) does not make self_attn. the block's prefix. */
static const char *const BLOCK_NAMES[] = {
    "w_q.weight", "w_q.bias", "w_k.weight", "w_k.bias", "w_v.weight", "w_v.bias", "w_o.weight",
    "w_o.bias", "out_proj.weight", "out_proj.bias", "in_proj_weight", "in_proj_bias",
    /* the names below, for the built-in blocks only: a graph file of a whole layer (its
     * self_attn.q_proj beside mlp.*) takes the whole file. nn.MultiheadAttention's
     * kdim/vdim and add_bias_kv: */
    "q_proj_weight", "k_proj_weight", "v_proj_weight", "bias_k", "bias_v",
    /* Hugging Face: q_proj.., BERT, GPT-2 (Conv1D) */
    "q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias", "v_proj.weight", "v_proj.bias",
    "o_proj.weight", "o_proj.bias", "attention.self.query.weight", "attention.self.query.bias",
    "attention.self.key.weight", "attention.self.key.bias", "attention.self.value.weight",
    "attention.self.value.bias", "attention.output.dense.weight", "attention.output.dense.bias",
    "c_attn.weight", "c_attn.bias", "c_proj.weight", "c_proj.bias"};
enum { N_BLOCK_NAMES = sizeof BLOCK_NAMES / sizeof *BLOCK_NAMES, N_GRAPH_BLOCK_NAMES = 12 };

/* The prefix of the one block the file holds: name minus a block name, the
 * same for every tensor that ends in one ("" if none does). Several: an
 * error naming them. */
static bool detect_prefix(const rg_opts *o, rg_data *d, rg_err *e) {
    char found[4][256];
    int n_found = 0, n_more = 0;
    /* A graph file: the HF names too when every tensor is under their one prefix
     * (a saved built-in block), else the plain ones (a whole layer's file). */
    for (int pass = o->kind == RG_GRAPH ? 0 : 1; pass < 2; pass++) {
        const int n_names = pass == 0 ? N_BLOCK_NAMES : o->kind == RG_GRAPH ? N_GRAPH_BLOCK_NAMES
                                                                            : N_BLOCK_NAMES;
        n_found = n_more = 0;
        for (int i = 0; i < gml_safetensors_count(d->st); i++) {
            const char *name = gml_safetensors_name(d->st, i);
            size_t len = strlen(name);
            for (int k = 0; k < n_names; k++) {
                size_t bl = strlen(BLOCK_NAMES[k]);
                if (len < bl || strcmp(name + len - bl, BLOCK_NAMES[k]) != 0) continue;
                size_t pl = len - bl;
                if (pl && name[pl - 1] != '.') continue;
                if (pl >= sizeof found[0]) continue;
                bool seen = false;
                for (int f = 0; f < n_found && !seen; f++) seen = strlen(found[f]) == pl && !strncmp(found[f], name, pl);
                if (seen) break;
                if (n_found < 4) {
                    memcpy(found[n_found], name, pl);
                    found[n_found++][pl] = '\0';
                } else {
                    n_more++;
                }
                break;
            }
        }
        bool all_under = n_found == 1;
        for (int i = 0; all_under && i < gml_safetensors_count(d->st); i++)
            all_under = strncmp(gml_safetensors_name(d->st, i), found[0], strlen(found[0])) == 0;
        if (pass == 1 || all_under) break;
    }
    if (n_found <= 1) {
        snprintf(d->prefix, sizeof d->prefix, "%s", n_found ? found[0] : "");
        return true;
    }
    char list[800];
    size_t k = 0;
    for (int f = 0; f < n_found && k < sizeof list; f++)
        k += (size_t)snprintf(list + k, sizeof list - k, "%s'%s'", f ? ", " : "", found[f]);
    if (n_more && k < sizeof list) snprintf(list + k, sizeof list - k, " and %d more", n_more);
    return rg_fail(e, RG_USAGE, "%s holds several blocks (prefixes %s): choose one with --prefix",
                   o->weights, list);
}

bool rg_weights_open(const char *path, bool non_strict, rg_data *d, rg_err *e) {
    char err[1024];
    d->st = gml_safetensors_open_flags(path, GML_ST_UNLISTED, err, sizeof err);
    if (!d->st) return rg_fail(e, RG_RUNTIME, "%s", err);
    /* an index's shards' tensors its weight_map leaves out: unexpected */
    char list[900] = "";
    int n = 0;
    for (const char *file, *name; (name = gml_safetensors_unlisted(d->st, n, &file)); n++) {
        const char *base = strrchr(file, '/');
        const size_t k = strlen(list);
        if (n < 5 && k < sizeof list)
            snprintf(list + k, sizeof list - k, "%s'%.120s' (in %.120s)", n ? ", " : "", name, base ? base + 1 : file);
    }
    rg_names_end(list, sizeof list, n);
    if (n && !non_strict)
        return rg_fail(e, RG_RUNTIME, "%s: weight_map leaves out %d tensor%s its shards hold: %s (unexpected, as "
                       "load_state_dict(strict=True) says; --non-strict ignores them)", path, n,
                       n == 1 ? "" : "s", list);
    if (n)
        fprintf(stderr, "run-graph: note: %s: weight_map leaves out %d tensor%s its shards hold, ignored "
                "(--non-strict): %s\n", path, n, n == 1 ? "" : "s", list);
    return true;
}

bool rg_weights_under_prefix(const char *path, rg_data *d, rg_err *e) {
    char err[1024];
    const int count = gml_safetensors_count(d->st);
    const size_t pl = strlen(d->prefix);
    d->w_index = malloc(((size_t)count + 1) * sizeof *d->w_index);
    d->w_tensor = calloc((size_t)count + 1, sizeof *d->w_tensor);
    gml_context *c = gml_init((gml_init_params){.mem_size = ((size_t)count + 8) * gml_tensor_overhead(),
                                                .no_alloc = true});
    if (!d->w_index || !d->w_tensor || !keep(d, c, e)) return rg_fail(e, RG_RUNTIME, "out of memory");
    for (int i = 0; i < count; i++) {
        const char *name = gml_safetensors_name(d->st, i);
        if (strncmp(name, d->prefix, pl) != 0) continue;
        d->w_index[d->n_w] = i;
        if (strlen(name + pl) < GML_MAX_NAME) { /* longer: no block or graph file can name it */
            d->w_tensor[d->n_w] = gml_safetensors_tensor(d->st, i, c, name + pl, err, sizeof err);
            if (!d->w_tensor[d->n_w]) return rg_fail(e, RG_RUNTIME, "%s", err);
        }
        d->n_w++;
    }
    if (!d->n_w) {
        char some[600];
        size_t k = 0;
        for (int i = 0; i < count && i < 5 && k < sizeof some; i++)
            k += (size_t)snprintf(some + k, sizeof some - k, "%s'%.100s'", i ? ", " : "", gml_safetensors_name(d->st, i));
        if (count > 5 && k < sizeof some) snprintf(some + k, sizeof some - k, " and %d more", count - 5);
        return rg_fail(e, RG_RUNTIME, "%s: no tensor name starts with '%s'; it holds %s", path, d->prefix,
                       count ? some : "no tensors");
    }
    d->wctx = c;
    return true;
}

/* Maps --weights, settles the prefix, and makes wctx: a header for each
 * tensor under the prefix, named without it, its data in the mapping. */
static bool load_weights(const rg_opts *o, rg_data *d, rg_err *e) {
    if (!rg_weights_open(o->weights, o->non_strict, d, e)) return false;
    if (o->prefix) { /* as PyTorch writes it, with or without the trailing dot */
        size_t n = strlen(o->prefix);
        if (n + 2 > sizeof d->prefix) return rg_fail(e, RG_USAGE, "--prefix: '%.40s...' is too long", o->prefix);
        snprintf(d->prefix, sizeof d->prefix, "%s%s", o->prefix, n && o->prefix[n - 1] != '.' ? "." : "");
    } else if (!detect_prefix(o, d, e)) {
        return false;
    }
    return rg_weights_under_prefix(o->weights, d, e);
}

static bool is_used(const gml_tensor *t, const gml_tensor *w) {
    for (; t; t = t->view_src)
        if (t == w) return true;
    return false;
}

bool rg_attn_weights_hold(const gml_attn_weights *w, const gml_tensor *t) {
    const gml_tensor *const wt[] = {w->w_q, w->b_q, w->w_k, w->b_k, w->w_v, w->b_v, w->w_o, w->b_o,
                                    w->in_proj_weight, w->in_proj_bias, w->sinks, w->bias_k,
                                    w->bias_v, w->rel_k, w->rel_v};
    for (size_t j = 0; j < sizeof wt / sizeof *wt; j++)
        if (wt[j] == t) return true;
    return false;
}

bool rg_attn_sinks_asked(bool sinks, gml_attn_weights *w, gml_context *wctx, const char *file,
                         rg_err *e) {
    if (sinks && !w->sinks) {
        char present[1024];
        rg_list_weights(wctx, present, sizeof present);
        return rg_fail(e, RG_RUNTIME, "%s: --sinks needs the weight 'sinks' (or 'self_attn.sinks') [H]; %s",
                       file, present);
    }
    if (!sinks) w->sinks = NULL;
    return true;
}

void rg_names_add(char *list, size_t size, int n, const char *name) {
    const size_t k = strlen(list);
    if (n < 5 && k < size) snprintf(list + k, size - k, "%s'%.120s'", n ? ", " : "", name);
}

void rg_names_end(char *list, size_t size, int n) {
    const size_t k = strlen(list);
    if (n > 5 && k < size) snprintf(list + k, size - k, " and %d more", n - 5);
}

bool rg_check_unused_weights(const rg_opts *o, rg_data *d, const gml_graph *g,
                             const gml_attn_weights *w, rg_err *e) {
    if (!d->st || o->non_strict) return true;
    char list[900] = "";
    int unused = 0;
    for (int i = 0; i < d->n_w; i++) {
        const gml_tensor *t = d->w_tensor[i];
        bool used = false;
        if (t && g) {
            for (int l = 0; l < gml_graph_n_leafs(g) && !used; l++) used = is_used(gml_graph_leaf(g, l), t);
            for (int n = 0; n < gml_graph_n_nodes(g) && !used; n++) {
                const gml_tensor *node = gml_graph_node(g, n);
                used = is_used(node, t);
                for (int s = 0; s < GML_MAX_SRC && !used; s++) used = is_used(node->src[s], t);
            }
        } else if (t && w) {
            used = rg_attn_weights_hold(w, t);
        }
        if (used) continue;
        rg_names_add(list, sizeof list, unused++, gml_safetensors_name(d->st, d->w_index[i]));
    }
    if (!unused) return true;
    rg_names_end(list, sizeof list, unused);
    return rg_fail(e, RG_RUNTIME, "%s: %d tensor%s under the prefix '%s' %s not used by %s: %s (a misspelled "
                   "name, another block's weights? --prefix selects a module, --non-strict allows extra "
                   "tensors)", o->weights, unused, unused == 1 ? "" : "s", d->prefix, unused == 1 ? "is" : "are",
                   o->model, list);
}

const gml_tensor *rg_output_view(const rg_opts *o, const gml_tensor *t, gml_tensor *buf) {
    if (!o->seq_first || !t || t->n_dims != 3) return t;
    *buf = *t; /* [B, T, D] shown as [T, B, D]: the first two dims swapped, a view */
    buf->ne[1] = t->ne[2], buf->ne[2] = t->ne[1];
    buf->nb[1] = t->nb[2], buf->nb[2] = t->nb[1];
    return buf;
}

static bool sizes(const rg_opts *o, rg_data *d, rg_err *e) {
    const bool attn = o->kind != RG_MATMUL;
    int64_t dk = 0;
    /* 1. the files */
    if (attn) {
        const char *qpath = o->input ? o->input : o->query;
        if (qpath) {
            gml_tensor *q = load_seq(d, qpath, o->input ? "x" : "query", RG_T, !o->key, e);
            if (!q) return false;
            if (o->input) d->x = q;
            else d->query = q;
        }
        if (o->key && !(d->key = load_seq(d, o->key, "key", RG_S, false, e))) return false;
        if (o->value && !(d->value = load_seq(d, o->value, "value", RG_S, false, e))) return false;
        if (o->weights && (!load_weights(o, d, e) || !weight_facts(o, d, &dk, e))) return false;
    }
    for (int i = 0; i < o->n_bind; i++) {
        if (o->kind == RG_MATMUL && strcmp(o->bind[i].name, "a") && strcmp(o->bind[i].name, "b"))
            return rg_fail(e, RG_USAGE, "--bind %s=...: matmul's inputs are a [M, K] and b [K, N]", o->bind[i].name);
        gml_tensor *t = load_npy(d, o->bind[i].path, o->bind[i].name, e);
        if (!t) return false;
        d->bound[i] = t;
        if (o->kind != RG_MATMUL) continue;
        char s[64];
        shape_of(t, s, sizeof s);
        bool is_a = o->bind[i].name[0] == 'a';
        if (t->type != GML_F32 || t->n_dims != 2)
            return rg_fail(e, RG_RUNTIME, "%s: %s %s is not matmul's f32 %s", o->bind[i].path,
                           gml_type_name(t->type), s, is_a ? "a [M, K]" : "b [K, N]");
        if (!fact(d, is_a ? RG_M : RG_K, t->ne[2], e, "%s %s", o->bind[i].path, s) ||
            !fact(d, is_a ? RG_K : RG_N, t->ne[3], e, "%s %s", o->bind[i].path, s))
            return false;
        if (is_a) d->a = t;
        else d->b = t;
    }
    /* 2. the flags */
    for (int i = 0; i < RG_NSYM; i++)
        if (o->dim_given[i] && !fact(d, i, o->dim[i], e, "%s %" PRId64, RG_FLAG[i], o->dim[i])) return false;
    /* 3. what follows from them, then the defaults */
    for (int i = 0; i < RG_NSYM; i++)
        if (!d->known[i] && DEFAULT[i] && i != RG_H && rg_size_applies(o->kind, i))
            fact(d, i, DEFAULT[i], e, "the default %s %" PRId64, RG_FLAG[i], DEFAULT[i]);
    if (!attn) return true;
    if (!d->known[RG_S]) fact(d, RG_S, d->dim[RG_T], e, "S = T = %" PRId64, d->dim[RG_T]);
    if (dk) {
        char s[64];
        shape_of(gml_get_tensor(d->wctx, "rel_k.weight"), s, sizeof s);
        if (d->dim[RG_D] % dk)
            return rg_fail(e, RG_RUNTIME, "%s: rel_k.weight %s: d_k = %" PRId64 " does not divide D = %" PRId64 " (%s)",
                           o->weights, s, dk, d->dim[RG_D], d->src[RG_D]);
        if (!fact(d, RG_H, d->dim[RG_D] / dk, e, "%s: rel_k.weight %s (H = D %" PRId64 " / d_k %" PRId64 ")",
                  o->weights, s, d->dim[RG_D], dk))
            return false;
    }
    if (!d->known[RG_H]) {
        if (o->weights && o->kind != RG_GRAPH)
            return rg_fail(e, RG_USAGE, "%s: give --heads: the weights do not say how many heads", o->weights);
        if (!o->weights) fact(d, RG_H, DEFAULT[RG_H], e, "the default --heads %" PRId64, DEFAULT[RG_H]);
    }
    if (!d->known[RG_H]) return true; /* a graph file that may not need H */
    if (d->dim[RG_D] % d->dim[RG_H]) {
        if (o->kind != RG_GRAPH) /* (a graph file says for itself if it minds) */
            return rg_fail(e, RG_RUNTIME, "%s does not divide D = %" PRId64 " (%s)", d->src[RG_H],
                           d->dim[RG_D], d->src[RG_D]);
    } else if (d->wctx && !kv_heads_fact(o, d, e)) {
        return false;
    }
    if (!d->known[RG_G]) {
        int64_t h = d->dim[RG_H], g = o->kind == RG_GQA ? (h % 4 == 0 ? h / 4 : 1) : h;
        fact(d, RG_G, g, e, "the default --kv-heads %" PRId64, g);
    }
    return true;
}

/* ---- random data -------------------------------------------------------------- */

void rg_fill_random(gml_tensor *t, uint64_t seed, bool is_param) {
    uint64_t s = XXH3_64bits_withSeed(t->name, strlen(t->name), seed);
    double a = is_param ? 1.0 / sqrt((double)t->ne[3]) : 1.0;
    float *p = t->data;
    for (int64_t i = 0, n = gml_nelements(t); i < n; i++) {
        uint64_t z = (s += 0x9e3779b97f4a7c15u); /* splitmix64 */
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
        z ^= z >> 31;
        double u = (double)(z >> 40) * 0x1p-24; /* [0, 1) */
        p[i] = (float)((2.0 * u - 1.0) * a);
    }
}

typedef struct spec {
    const char *name;
    gml_type type;
    int n_dims;
    int64_t ne[3];
} spec;

bool rg_check_memory(uint64_t bytes, const char *what, rg_err *e) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    uint64_t ram = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
    if (bytes <= ram) return true;
    return rg_fail(e, RG_RUNTIME, "%s need %.3g GiB of tensor data; this machine has %.3g GiB", what,
                   (double)bytes / (1 << 30), (double)ram / (1 << 30));
}

/* A context holding new tensors of the given shapes. */
static bool make(rg_data *d, const spec *sp, int n, gml_tensor **out, rg_err *e) {
    uint64_t bytes = 4096;
    for (int i = 0; i < n; i++) {
        uint64_t count = 4; /* bytes of the data, then room to align it */
        for (int k = 0; k < sp[i].n_dims; k++)
            if (__builtin_mul_overflow(count, (uint64_t)sp[i].ne[k], &count)) count = UINT64_MAX;
        uint64_t tensor;
        if (__builtin_add_overflow(count, 127 + gml_tensor_overhead(), &tensor) ||
            __builtin_add_overflow(bytes, tensor, &bytes))
            bytes = UINT64_MAX;
    }
    if (!rg_check_memory(bytes, sp[0].name[0] == 'w' ? "the random weights" : "the inputs", e)) return false;
    gml_context *c = gml_init((gml_init_params){.mem_size = (size_t)bytes});
    if (!keep(d, c, e)) return false;
    for (int i = 0; i < n; i++) {
        out[i] = gml_new_tensor(c, sp[i].type, sp[i].n_dims, sp[i].ne);
        if (!out[i]) return rg_fail(e, RG_RUNTIME, "%s", gml_last_error(c));
        gml_set_name(out[i], sp[i].name);
    }
    return true;
}

static bool random_inputs(const rg_opts *o, rg_data *d, rg_err *e) {
    const int64_t *n = d->dim;
    gml_tensor *t[3];
    if (o->kind == RG_MATMUL) {
        spec sp[2] = {{"a", GML_F32, 2, {n[RG_M], n[RG_K]}}, {"b", GML_F32, 2, {n[RG_K], n[RG_N]}}};
        if (d->a && d->b) return true;
        if (!make(d, sp, 2, t, e)) return false;
        d->random_inputs = true;
        if (!d->a) rg_fill_random(d->a = t[0], o->seed, false);
        if (!d->b) rg_fill_random(d->b = t[1], o->seed, false);
        return true;
    }
    if (d->x || d->query) return true;
    d->random_inputs = true;
    if (n[RG_S] == n[RG_T]) {
        spec sp = {"x", GML_F32, 3, {n[RG_B], n[RG_T], n[RG_D]}};
        if (!make(d, &sp, 1, t, e)) return false;
        rg_fill_random(d->x = t[0], o->seed, false);
        return true;
    }
    spec sp[3] = {{"query", GML_F32, 3, {n[RG_B], n[RG_T], n[RG_D]}},
                  {"key", GML_F32, 3, {n[RG_B], n[RG_S], n[RG_D]}},
                  {"value", GML_F32, 3, {n[RG_B], n[RG_S], n[RG_D]}}};
    if (!make(d, sp, 3, t, e)) return false;
    for (int i = 0; i < 3; i++) rg_fill_random(t[i], o->seed, false);
    d->query = t[0], d->key = t[1], d->value = t[2];
    return true;
}

/* nn.Linear-like weights (with biases) for a built-in block. */
static bool random_weights(const rg_opts *o, rg_data *d, rg_err *e) {
    const int64_t D = d->dim[RG_D], dk = D / d->dim[RG_H], kv = d->dim[RG_G] * dk;
    const int64_t R = 2 * d->dim[RG_P] + 1;
    spec sp[] = {
        {"w_q.weight", GML_F32, 2, {D, D}},  {"w_q.bias", GML_F32, 1, {D}},
        {"w_k.weight", GML_F32, 2, {kv, D}}, {"w_k.bias", GML_F32, 1, {kv}},
        {"w_v.weight", GML_F32, 2, {kv, D}}, {"w_v.bias", GML_F32, 1, {kv}},
        {"w_o.weight", GML_F32, 2, {D, D}},  {"w_o.bias", GML_F32, 1, {D}},
        {"rel_k.weight", GML_F32, 2, {R, dk}}, {"rel_v.weight", GML_F32, 2, {R, dk}},
    };
    int n = o->kind == RG_RELPOS ? 10 : 8;
    if (o->sinks) sp[n++] = (spec){"sinks", GML_F32, 1, {d->dim[RG_H]}}; /* mha, gqa: in place of rel_k */
    gml_tensor *t[10];
    if (!make(d, sp, n, t, e)) return false;
    for (int i = 0; i < n; i++) rg_fill_random(t[i], o->seed, true);
    d->wctx = d->ctxs[d->n_ctxs - 1];
    d->random_weights = true;
    return true;
}

static bool valid_lens(const rg_opts *o, rg_data *d, rg_err *e) {
    if (!o->n_valid_lens) return true;
    if (o->n_valid_lens != d->dim[RG_B])
        return rg_fail(e, RG_RUNTIME, "--valid-lens has %d lengths, but the batch is %" PRId64 " (%s)",
                       o->n_valid_lens, d->dim[RG_B], d->src[RG_B]);
    for (int i = 0; i < o->n_valid_lens; i++)
        if (o->valid_lens[i] > d->dim[RG_S])
            return rg_fail(e, RG_RUNTIME, "--valid-lens: length %d (batch %d) is more than the %" PRId64 " keys (%s)",
                           (int)o->valid_lens[i], i, d->dim[RG_S], d->src[RG_S]);
    spec sp = {"valid_lens", GML_I32, 1, {d->dim[RG_B]}};
    if (!make(d, &sp, 1, &d->valid_lens, e)) return false;
    memcpy(d->valid_lens->data, o->valid_lens, (size_t)o->n_valid_lens * sizeof(int32_t));
    return true;
}

/* The weights' types as --weights-dtype asks: 2-D f32 matrices converted to
 * it (rounded, or quantized for q8_0) and 1-D F16/BF16 tensors (biases and
 * norm weights of a half-precision checkpoint) widened to f32, into a new
 * context that replaces the old one (freed: the weights are held once).
 * Without the flag, only the 1-D widening. Other tensors are copied as
 * they are (a file's F16 and BF16 matrices among them). */
bool rg_convert_weights(gml_context **wctx, bool has_dtype, gml_type dtype, rg_err *e) {
    gml_context *w = *wctx;
    if (!w) return true;
    bool any = false;
    size_t mem = 0;
    for (gml_tensor *t = gml_get_first_tensor(w); t; t = gml_get_next_tensor(w, t)) {
        gml_type to = t->type;
        if (t->n_dims >= 2 && t->type == GML_F32 && has_dtype) to = dtype;
        if (t->n_dims == 1 && (t->type == GML_F16 || t->type == GML_BF16)) to = GML_F32;
        if (to == GML_Q8_0 && t->ne[3] % GML_QK8_0) {
            char s[64];
            return rg_fail(e, RG_RUNTIME, "--weights-dtype q8_0: '%s' %s has rows of %" PRId64
                           " values, not a multiple of 32 (q8_0's block)", t->name,
                           gml_format_shape(t, s, sizeof s), t->ne[3]);
        }
        any = any || to != t->type;
        mem += gml_tensor_overhead() + 64 + gml_row_size(to, t->ne[3]) * (size_t)(gml_nelements(t) / t->ne[3]);
    }
    if (!any) return true;
    if (!rg_check_memory(mem, "the converted weights", e)) return false;
    gml_context *c = gml_init((gml_init_params){.mem_size = mem});
    if (!c) return rg_fail(e, RG_RUNTIME, "out of memory for %zu bytes of converted weights", mem);
    for (gml_tensor *t = gml_get_first_tensor(w); t; t = gml_get_next_tensor(w, t)) {
        gml_type to = t->type;
        if (t->n_dims >= 2 && t->type == GML_F32 && has_dtype) to = dtype;
        if (t->n_dims == 1 && (t->type == GML_F16 || t->type == GML_BF16)) to = GML_F32;
        gml_tensor *n = gml_new_tensor(c, to, t->n_dims, t->ne + GML_MAX_DIMS - t->n_dims);
        if (!n) {
            rg_fail(e, RG_RUNTIME, "%s", gml_last_error(c));
            gml_free(c);
            return false;
        }
        gml_set_name(n, t->name);
        n->flags = t->flags;
        const int64_t rows = gml_nelements(t) / t->ne[3], k = t->ne[3]; /* both contiguous */
        if (to == t->type) {
            memcpy(n->data, t->data, gml_nbytes(t));
            continue;
        }
        for (int64_t r = 0; r < rows; r++) {
            const char *src = (const char *)t->data + r * (int64_t)t->nb[2];
            char *dst = (char *)n->data + r * (int64_t)n->nb[2];
            const float *f = (const float *)(const void *)src;
            const uint16_t *h = (const uint16_t *)(const void *)src;
            for (int64_t i = 0; i < k && to != GML_Q8_0; i++) {
                const float x = t->type == GML_F32 ? f[i]
                                : t->type == GML_F16 ? gml_fp16_to_fp32(h[i])
                                                     : gml_bf16_to_fp32(h[i]);
                if (to == GML_F32) memcpy(dst + 4 * i, &x, 4);
                else ((uint16_t *)(void *)dst)[i] = to == GML_F16 ? gml_fp32_to_fp16(x) : gml_fp32_to_bf16(x);
            }
            if (to == GML_Q8_0) gml_quantize_row_q8_0(f, (gml_block_q8_0 *)(void *)dst, k);
        }
    }
    gml_free(w);
    *wctx = c;
    return true;
}

static bool convert_weights(const rg_opts *o, rg_data *d, rg_err *e) {
    return rg_weights_convert(d, o->has_weights_dtype, o->weights_dtype, e);
}

bool rg_weights_convert(rg_data *d, bool has_dtype, gml_type dtype, rg_err *e) {
    gml_context *old = d->wctx;
    if (!rg_convert_weights(&d->wctx, has_dtype, dtype, e)) return false;
    if (d->wctx == old) return true;
    for (int i = 0; i < d->n_ctxs; i++)
        if (d->ctxs[i] == old) d->ctxs[i] = d->wctx;
    /* the strict check follows the converted tensors (named without the prefix) */
    for (int i = 0; i < d->n_w; i++)
        if (d->w_tensor[i])
            d->w_tensor[i] = gml_get_tensor(d->wctx, gml_safetensors_name(d->st, d->w_index[i]) +
                                                         strlen(d->prefix));
    return true;
}

/* One mask file: f32 (bool converted: 1 = not allowed) of 2 or 3 dims, or 2
 * for the key padding mask, its last two sizes checked against want. */
static gml_tensor *load_mask(rg_data *d, const char *path, const char *name, const char *flag, bool padding,
                             bool *is_bool, rg_err *e) {
    const char *from = NULL;
    gml_tensor *t = load_npy_from(d, path, name, &from, e);
    if (!t) return NULL;
    *is_bool = from && strcmp(from, "bool") == 0;
    char s[64];
    gml_format_shape(t, s, sizeof s);
    const int64_t B = d->dim[RG_B], T = d->dim[RG_T], S = d->dim[RG_S];
    const char *want = padding ? "[B, S]" : "[T, S] or [B*H, T, S] (or [B or 1, H or 1, T, S])";
    bool ok = t->type == GML_F32 && (padding ? t->n_dims == 2 : t->n_dims >= 2);
    if (!ok) {
        rg_fail(e, RG_RUNTIME, "%s %s: %s %s is not a bool or float mask %s", flag, path, gml_type_name(t->type), s, want);
        return NULL;
    }
    if (t->ne[3] != S || (padding ? t->ne[2] != B : t->ne[2] != T)) {
        rg_fail(e, RG_RUNTIME, "%s %s: %s is not %s with B = %" PRId64 " (%s), T = %" PRId64 " (%s), S = %" PRId64 " (%s)",
                flag, path, s, want, B, d->src[RG_B], T, d->src[RG_T], S, d->src[RG_S]);
        return NULL;
    }
    if (!padding && t->n_dims == 4 && ((t->ne[0] != 1 && t->ne[0] != B) || (t->ne[1] != 1 && d->known[RG_H] &&
                                                                           t->ne[1] != d->dim[RG_H]))) {
        rg_fail(e, RG_RUNTIME, "%s %s: %s is not %s with B = %" PRId64 " (%s), H = %" PRId64, flag, path, s, want, B,
                d->src[RG_B], d->dim[RG_H]);
        return NULL;
    }
    if (!padding && t->n_dims == 4 && t->ne[1] != 1 && !d->known[RG_H]) {
        rg_fail(e, RG_USAGE, "%s %s: a mask per head needs the number of heads: give --heads", flag, path);
        return NULL;
    }
    if (!padding && t->n_dims == 3) {
        if (!d->known[RG_H]) {
            rg_fail(e, RG_USAGE, "%s %s: a [B*H, T, S] mask needs the number of heads: give --heads", flag, path);
            return NULL;
        }
        if (t->ne[1] != B * d->dim[RG_H]) {
            rg_fail(e, RG_RUNTIME, "%s %s: %s: %" PRId64 " masks, but B*H = %" PRId64 " * %" PRId64 " = %" PRId64
                    " (%s; %s)", flag, path, s, t->ne[1], B, d->dim[RG_H], B * d->dim[RG_H], d->src[RG_B],
                    d->src[RG_H]);
            return NULL;
        }
    }
    return t;
}

/* --attn-mask and --key-padding-mask as one additive f32 mask [B or 1, H or
 * 1, T, S]: attn_mask [T, S] broadcast, [B*H, T, S] as [B, H, T, S] (batch
 * major, as nn.MultiheadAttention reads it), [B or 1, H or 1, T, S] as it is
 * (the form --save-inputs writes); key_padding_mask [B, S] as [B, 1, 1, S];
 * bool True is -inf, floats are added as they are; the two summed. */
static bool masks(const rg_opts *o, rg_data *d, rg_err *e) {
    if (!o->attn_mask && !o->key_padding_mask) return true;
    bool am_bool = false, kp_bool = false;
    gml_tensor *am = NULL, *kp = NULL;
    if (o->attn_mask && !(am = load_mask(d, o->attn_mask, "attn_mask_file", "--attn-mask", false, &am_bool, e)))
        return false;
    if (o->key_padding_mask &&
        !(kp = load_mask(d, o->key_padding_mask, "key_padding_mask", "--key-padding-mask", true, &kp_bool, e)))
        return false;
    const int64_t T = d->dim[RG_T], S = d->dim[RG_S];
    /* the attn_mask's own batch and head sizes (1: broadcast) */
    const int64_t Ba = !am || am->n_dims == 2 ? 1 : am->n_dims == 3 ? d->dim[RG_B] : am->ne[0];
    const int64_t Ha = !am || am->n_dims == 2 ? 1 : am->n_dims == 3 ? d->dim[RG_H] : am->ne[1];
    const int64_t B = Ba > 1 || kp ? d->dim[RG_B] : 1;
    const int64_t H = Ha;
    spec sp = {"attn_mask", GML_F32, 4, {0}};
    gml_tensor *m;
    {
        gml_context *c = gml_init((gml_init_params){.mem_size = gml_tensor_overhead() + (size_t)(B * H * T * S) * 4 + 256});
        if (!keep(d, c, e)) return false;
        m = gml_new_tensor_4d(c, GML_F32, B, H, T, S);
        if (!m) return rg_fail(e, RG_RUNTIME, "%s", gml_last_error(c));
        gml_set_name(m, sp.name);
    }
    float *out = m->data;
    const float *a = am ? am->data : NULL, *k = kp ? kp->data : NULL;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t j = 0; j < S; j++) {
                    float v = 0;
                    if (a) {
                        float x = a[(((Ba > 1 ? b : 0) * Ha + h) * T + t) * S + j];
                        v += am_bool ? (x != 0 ? -INFINITY : 0.0f) : x;
                    }
                    if (k) {
                        float x = k[b * S + j];
                        v += kp_bool ? (x != 0 ? -INFINITY : 0.0f) : x;
                    }
                    out[((b * H + h) * T + t) * S + j] = v;
                }
    d->mask = m;
    return true;
}

bool rg_data_load(const rg_opts *o, rg_data *d, rg_err *e) {
    *d = (rg_data){0};
    d->seq_first = o->seq_first;
    d->any_file = o->weights || o->input || o->query || o->n_bind || o->attn_mask || o->key_padding_mask;
    if (!sizes(o, d, e) || !random_inputs(o, d, e) || !valid_lens(o, d, e) || !masks(o, d, e)) return false;
    if (o->kind <= RG_RELPOS && !d->wctx) {
        if (!random_weights(o, d, e)) return false;
    } else {
        d->random_weights = o->kind == RG_GRAPH && !d->wctx; /* its params, if it has any */
    }
    return convert_weights(o, d, e);
}

/* ---- weights by name ---------------------------------------------------------------- */

/* Rows [r0, r0 + n) of a packed [R, C] matrix or [R] vector, as a view. */
static gml_tensor *rows(gml_context *ctx, gml_tensor *t, int64_t r0, int64_t n, const char *name) {
    gml_tensor *v = t->n_dims == 2
                        ? gml_view(ctx, t, 2, (int64_t[]){n, t->ne[3]}, (size_t[]){t->nb[2], t->nb[3]},
                                   (size_t)r0 * t->nb[2])
                        : gml_view(ctx, t, 1, (int64_t[]){n}, (size_t[]){t->nb[3]}, (size_t)r0 * t->nb[3]);
    return v ? gml_set_name(v, name) : NULL;
}

gml_tensor *rg_find_weight(gml_context *wctx, gml_context *ctx, const char *name) {
    if (!wctx) return NULL;
    gml_tensor *t = gml_get_tensor(wctx, name);
    if (t) return t;
    static const char *const ALIAS[][2] = {{"w_o.weight", "out_proj.weight"}, {"w_o.bias", "out_proj.bias"}};
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 2; k++)
            if (strcmp(name, ALIAS[i][k]) == 0) return gml_get_tensor(wctx, ALIAS[i][1 - k]);
    /* w_q/w_k/w_v .weight/.bias: rows q | k | v of in_proj_weight / in_proj_bias */
    gml_tensor *ipw = gml_get_tensor(wctx, "in_proj_weight");
    if (!ipw || ipw->n_dims != 2 || strncmp(name, "w_", 2) != 0 || !strchr("qkv", name[2]) || name[3] != '.')
        return NULL;
    bool bias = strcmp(name + 4, "bias") == 0;
    if (!bias && strcmp(name + 4, "weight") != 0) return NULL;
    gml_tensor *src = bias ? gml_get_tensor(wctx, "in_proj_bias") : ipw;
    const int64_t D = ipw->ne[3], kv = (ipw->ne[2] - D) / 2;
    if (!src || kv < 1 || (ipw->ne[2] - D) % 2 || src->ne[3 - !bias] != D + 2 * kv || src->n_dims != 2 - bias)
        return NULL;
    char label[GML_MAX_NAME];
    snprintf(label, sizeof label, "%s[%c]", bias ? "in_proj_bias" : "in_proj_weight", name[2]);
    int64_t r0 = name[2] == 'q' ? 0 : name[2] == 'k' ? D : D + kv;
    return rows(ctx, src, r0, name[2] == 'q' ? D : kv, label);
}

void rg_list_weights(gml_context *wctx, char *buf, size_t size) {
    size_t n = (size_t)snprintf(buf, size, "present:");
    int count = 0;
    for (gml_tensor *t = gml_get_first_tensor(wctx); t && n < size; t = gml_get_next_tensor(wctx, t)) {
        char s[64];
        n += (size_t)snprintf(buf + n, size - n, "%s %s %s", count++ ? "," : "", t->name,
                              gml_format_shape(t, s, sizeof s));
    }
    if (!count && n < size) snprintf(buf + n, size - n, " nothing");
}
