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

static gml_tensor *load_npy(rg_data *d, const char *path, const char *name, rg_err *e) {
    char err[1024];
    gml_context *c = gml_load_npy(path, name, err, sizeof err);
    if (!c) {
        rg_fail(e, RG_RUNTIME, "%s", err);
        return NULL;
    }
    if (!keep(d, c, e)) return NULL;
    return gml_get_tensor(c, name);
}

/* An attention input: f32 [B, len, D]. */
static gml_tensor *load_seq(rg_data *d, const char *path, const char *name, int len_sym,
                            bool self, rg_err *e) {
    gml_tensor *t = load_npy(d, path, name, e);
    if (!t) return NULL;
    char s[64];
    shape_of(t, s, sizeof s);
    if (t->type != GML_F32 || t->n_dims != 3) {
        rg_fail(e, RG_RUNTIME, "%s: %s %s is not an f32 [B, %s, D] input", path,
                gml_type_name(t->type), s, RG_SYM[len_sym]);
        return NULL;
    }
    bool ok = fact(d, RG_B, t->ne[1], e, "%s %s", path, s) &&
              fact(d, len_sym, t->ne[2], e, "%s %s", path, s) &&
              fact(d, RG_D, t->ne[3], e, "%s %s", path, s) &&
              (!self || fact(d, RG_S, t->ne[2], e, "%s %s (self-attention: S = T)", path, s));
    return ok ? t : NULL;
}

/* Sizes the standard weights tell: D from every projection, P and d_k from
 * rel_k.weight [2P+1, d_k]. */
static bool weight_facts(const rg_opts *o, rg_data *d, int64_t *dk, rg_err *e) {
    static const char *const SQUARE[] = {"w_q.weight", "w_o.weight", "out_proj.weight"};
    static const char *const BY_D[] = {"w_k.weight", "w_v.weight", "in_proj_weight"};
    char s[64];
    for (int i = 0; i < 3; i++) {
        gml_tensor *t = gml_get_tensor(d->wctx, SQUARE[i]);
        if (!t || t->n_dims != 2) continue;
        shape_of(t, s, sizeof s);
        if (t->ne[2] != t->ne[3])
            return rg_fail(e, RG_RUNTIME, "%s: %s is %s, but it must be square, [D, D]", o->weights,
                           t->name, s);
        if (!fact(d, RG_D, t->ne[3], e, "%s: %s %s", o->weights, t->name, s)) return false;
    }
    for (int i = 0; i < 3; i++) {
        gml_tensor *t = gml_get_tensor(d->wctx, BY_D[i]);
        if (t && t->n_dims == 2 &&
            !fact(d, RG_D, t->ne[3], e, "%s: %s %s", o->weights, t->name, shape_of(t, s, sizeof s)))
            return false;
    }
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
    char s[64];
    gml_tensor *t = gml_get_tensor(d->wctx, "w_k.weight");
    if (t && t->n_dims == 2) rows = t->ne[2];
    gml_tensor *ip = gml_get_tensor(d->wctx, "in_proj_weight");
    if (!t && ip && ip->n_dims == 2) {
        t = ip;
        if ((ip->ne[2] - d->dim[RG_D]) % 2 || ip->ne[2] <= d->dim[RG_D])
            return rg_fail(e, RG_RUNTIME, "%s: in_proj_weight %s is not [D + 2*G*d_k, D] with D = %" PRId64,
                           o->weights, shape_of(ip, s, sizeof s), d->dim[RG_D]);
        rows = (ip->ne[2] - d->dim[RG_D]) / 2;
    }
    if (rows < 0) return true;
    shape_of(t, s, sizeof s);
    if (rows % dk)
        return rg_fail(e, RG_RUNTIME, "%s: %s %s: %" PRId64 " key rows are not a multiple of d_k = D / H = %" PRId64,
                       o->weights, t->name, s, rows, dk);
    return fact(d, RG_G, rows / dk, e, "%s: %s %s (G = %" PRId64 " key rows / d_k %" PRId64 ")", o->weights,
                t->name, s, rows, dk);
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
        if (o->weights) {
            char err[1024];
            gml_context *w = gml_load_safetensors(o->weights, err, sizeof err);
            if (!w) return rg_fail(e, RG_RUNTIME, "%s", err);
            if (!keep(d, w, e)) return false;
            d->wctx = w;
            if (!weight_facts(o, d, &dk, e)) return false;
        }
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
        if (o->dim[i] && !fact(d, i, o->dim[i], e, "%s %" PRId64, RG_FLAG[i], o->dim[i])) return false;
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
    gml_context *old = d->wctx;
    if (!rg_convert_weights(&d->wctx, o->has_weights_dtype, o->weights_dtype, e)) return false;
    for (int i = 0; i < d->n_ctxs; i++)
        if (d->ctxs[i] == old) d->ctxs[i] = d->wctx;
    return true;
}

bool rg_data_load(const rg_opts *o, rg_data *d, rg_err *e) {
    *d = (rg_data){0};
    if (!sizes(o, d, e) || !random_inputs(o, d, e) || !valid_lens(o, d, e)) return false;
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
