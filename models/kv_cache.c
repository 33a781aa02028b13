/* The KV cache and the decode step (see kv_cache.h). */
#include <ggmlite/kv_cache.h>

#include "misuse.h"
#include "attn_internal.h"

#include <stdlib.h>
#include <string.h>

struct gml_kv_cache {
    gml_kv_cache_params p;
    gml_context *ctx; /* owns the K and V tensors */
    gml_tensor **k, **v;
    int64_t len;
};

static void errf(char *err, size_t size, const char *fmt, ...) GML_PRINTF(3, 4);
static void errf(char *err, size_t size, const char *fmt, ...) {
    if (!err || !size) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
}

gml_kv_cache *gml_kv_cache_new(gml_kv_cache_params p, char *err, size_t err_size) {
    errf(err, err_size, "%s", "");
    if (p.n_layers < 1 || p.batch < 1 || p.n_kv_heads < 1 || p.max_len < 1 || p.d_k < 1) {
        errf(err, err_size, "kv_cache: layers %d, batch %" PRId64 ", kv heads %d, max_len %" PRId64
             ", d_k %" PRId64 ": each must be >= 1", p.n_layers, p.batch, p.n_kv_heads,
             p.max_len, p.d_k);
        return NULL;
    }
    if (p.type != GML_F32 && p.type != GML_F16 && p.type != GML_BF16) {
        errf(err, err_size, "kv_cache: type %s: K and V may be f32, f16 or bf16",
             (unsigned)p.type < GML_TYPE_COUNT ? gml_type_name(p.type) : "(unknown)");
        return NULL;
    }
    if (p.max_len > INT32_MAX) { /* gml_kv_step_compute writes pos and lens as i32 */
        errf(err, err_size, "kv_cache: max_len %" PRId64 " is past %" PRId32 " (INT32_MAX): "
             "positions and lengths are i32", p.max_len, INT32_MAX);
        return NULL;
    }
    const int64_t ne[4] = {p.batch, p.n_kv_heads, p.max_len, p.d_k};
    if (p.n_layers > 4096 || p.batch > (1 << 20) || p.d_k > (1 << 20) ||
        (double)ne[0] * ne[1] * ne[2] * ne[3] * 2 * p.n_layers > 0x1p40) {
        errf(err, err_size, "kv_cache: [%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 "] x %d "
             "layers x 2 is too large", ne[0], ne[1], ne[2], ne[3], p.n_layers);
        return NULL;
    }
    gml_kv_cache *c = calloc(1, sizeof *c);
    if (c) {
        c->p = p;
        c->k = calloc((size_t)p.n_layers, sizeof *c->k);
        c->v = calloc((size_t)p.n_layers, sizeof *c->v);
    }
    /* size the arena from a no_alloc twin */
    gml_context *probe = gml_init((gml_init_params){
        .mem_size = (size_t)(2 * p.n_layers + 1) * gml_tensor_overhead() + 4096, .no_alloc = true});
    for (int l = 0; probe && l < 2 * p.n_layers; l++) gml_new_tensor(probe, p.type, 4, ne);
    const size_t need = probe ? gml_mem_required(probe) : 0;
    gml_free(probe);
    if (c && c->k && c->v && need) c->ctx = gml_init((gml_init_params){.mem_size = need});
    if (!c || !c->k || !c->v || !c->ctx) {
        errf(err, err_size, "kv_cache: out of memory for %zu bytes", need);
        gml_kv_cache_free(c);
        return NULL;
    }
    for (int l = 0; l < p.n_layers; l++) {
        char name[GML_MAX_NAME];
        c->k[l] = gml_new_tensor(c->ctx, p.type, 4, ne);
        c->v[l] = gml_new_tensor(c->ctx, p.type, 4, ne);
        if (!c->k[l] || !c->v[l]) {
            errf(err, err_size, "kv_cache: %s", gml_last_error(c->ctx));
            gml_kv_cache_free(c);
            return NULL;
        }
        snprintf(name, sizeof name, "k_cache.%d", l);
        gml_set_name(c->k[l], name);
        snprintf(name, sizeof name, "v_cache.%d", l);
        gml_set_name(c->v[l], name);
        gml_set_flags(c->k[l], GML_FLAG_INPUT);
        gml_set_flags(c->v[l], GML_FLAG_INPUT);
        memset(c->k[l]->data, 0, gml_nbytes(c->k[l]));
        memset(c->v[l]->data, 0, gml_nbytes(c->v[l]));
    }
    return c;
}

void gml_kv_cache_free(gml_kv_cache *c) {
    if (!c) return;
    gml_free(c->ctx);
    free(c->k);
    free(c->v);
    free(c);
}

gml_kv_cache_params gml_kv_cache_get_params(const gml_kv_cache *c) {
    GML_MODELS_NONNULL(NULL, c, (gml_kv_cache_params){0});
    return c->p;
}

gml_tensor *gml_kv_cache_k(const gml_kv_cache *c, int layer) {
    GML_MODELS_NONNULL(NULL, c, NULL);
    return layer >= 0 && layer < c->p.n_layers ? c->k[layer] : NULL;
}

gml_tensor *gml_kv_cache_v(const gml_kv_cache *c, int layer) {
    GML_MODELS_NONNULL(NULL, c, NULL);
    return layer >= 0 && layer < c->p.n_layers ? c->v[layer] : NULL;
}

int64_t gml_kv_cache_len(const gml_kv_cache *c) {
    GML_MODELS_NONNULL(NULL, c, 0);
    return c->len;
}

size_t gml_kv_cache_bytes(const gml_kv_cache *c) {
    GML_MODELS_NONNULL(NULL, c, 0);
    return 2 * (size_t)c->p.n_layers * gml_nbytes(c->k[0]);
}

bool gml_kv_cache_truncate(gml_kv_cache *c, int64_t len) {
    GML_MODELS_NONNULL(NULL, c, false);
    if (len < 0 || len > c->len) return false;
    c->len = len;
    return true;
}

gml_kv_step gml_kv_step_new(gml_context *ctx, gml_kv_cache *c, int64_t n) {
    gml_kv_step s = {.cache = c, .n = n};
    GML_MODELS_NONNULL(NULL, ctx, s);
    GML_MODELS_NONNULL(ctx, c, s);
    if (n < 1 || n > c->p.max_len) {
        gml_set_error(ctx, "kv_step: %" PRId64 " new tokens per step, but the cache holds %" PRId64
                      " (max_len)", n, c->p.max_len);
        return s;
    }
    gml_tensor *pos = gml_set_name(gml_new_tensor_2d(ctx, GML_I32, c->p.batch, n), "kv_pos");
    gml_tensor *lens = gml_set_name(gml_new_tensor_2d(ctx, GML_I32, c->p.batch, n), "kv_lens");
    if (!pos || !lens) return s;
    gml_set_flags(pos, GML_FLAG_INPUT);
    gml_set_flags(lens, GML_FLAG_INPUT);
    s.pos = pos;
    s.lens = lens;
    return s;
}

/* x [B, n, D] -> out [B, n, D] over the cache of layer */
gml_tensor *gml_attn_decode(gml_context *ctx, gml_attn_config cfg, const gml_attn_weights *w,
                            gml_tensor *x, const gml_kv_step *step, int layer) {
    GML_MODELS_NONNULL(NULL, ctx, NULL);
    GML_MODELS_NONNULL(ctx, w, NULL);
    GML_MODELS_NONNULL(ctx, step, NULL);
    GML_MODELS_NONNULL(ctx, step->cache, NULL);
    if (!x || !step->pos) {
        if (!gml_last_error(ctx)[0])
            gml_set_error(ctx, "decode: %s is NULL", !x ? "x" : "the step (or its positions)");
        return NULL;
    }
    const gml_kv_cache *c = step->cache;
    const gml_kv_cache_params *cp = &c->p;
    if (layer < 0 || layer >= cp->n_layers)
        return gml_set_error(ctx, "decode: layer %d is out of range; the cache has %d layers",
                             layer, cp->n_layers);
    if (cfg.score.causal != GML_CAUSAL_BOTTOM_RIGHT)
        return gml_set_error(ctx, "decode: decoding is causal (each token sees the ones before "
                             "it); set cfg.score.causal = GML_CAUSAL_BOTTOM_RIGHT");
    if (cfg.graph.want_weights || cfg.graph.impl == GML_ATTN_UNFUSED)
        return gml_set_error(ctx, "decode: decoding uses the fused graph, which has no attention "
                             "weights (impl auto or fused, want_weights false)");
    gml_attn_plan p;
    gml_attn_weights wt_;
    gml_attn_inputs in = {.query = x};
    if (!gml_attn_plan_inputs(ctx, "decode", &cfg, &in, true, &p) ||
        !gml_attn_check_weights(ctx, &p, (w = gml_attn_linear_weights(ctx, w, &wt_)), true) ||
        !gml_attn_check_masks(ctx, &p, &in, w->sinks) ||
        !gml_attn_no_extras(ctx, &p, w, "the decode step"))
        return NULL;
    char sx[GML_SHAPE_MAX];
    if (p.G != cp->n_kv_heads || p.dk != cp->d_k || p.B != cp->batch || p.Tq != step->n)
        return gml_set_error(ctx, "decode: x '%s' %s with %" PRId64 " heads, %" PRId64 " kv "
                             "heads (d_k %" PRId64 ") does not fit the cache: batch %" PRId64
                             ", kv heads %d, d_k %" PRId64 ", %" PRId64 " new tokens per step",
                             x->name, GML_SHAPE(x, sx), p.H, p.G, p.dk, cp->batch,
                             cp->n_kv_heads, cp->d_k, step->n);
    /* the new tokens: q [B, H, n, d_k], k, v [B, G, n, d_k], rope at their cache rows */
    gml_attn_qkv qkv = gml_attn_project_p(ctx, &p, w, &in);
    qkv = gml_attn_position_p(ctx, &p, qkv, step->pos, step->pos);
    if (!qkv.q) return NULL;
    gml_tensor *kc = gml_set_name(gml_set_rows(ctx, c->k[layer], qkv.k, step->pos), "k_all");
    gml_tensor *vc = gml_set_name(gml_set_rows(ctx, c->v[layer], qkv.v, step->pos), "v_all");
    /* over the whole cache [B, G, T_max, d_k], the queries at their cache
     * rows: causal, window and ALiBi at absolute positions; the lengths
     * (pos + 1) hide the rows not written yet a key block at a time */
    gml_attn_plan pa = p;
    pa.Tk = cp->max_len;
    gml_attn_inputs ain = {.valid_lens = step->lens, .positions = step->pos};
    gml_attn_heads h =
        gml_attn_attend_p(ctx, &pa, (gml_attn_qkv){.q = qkv.q, .k = kc, .v = vc}, &ain, w->sinks);
    return gml_attn_merge_p(ctx, &p, w, h.heads);
}

gml_status gml_kv_step_compute(gml_kv_step *s, gml_graph *g, int n_threads, char *err,
                               size_t err_size) {
    GML_MODELS_NONNULL_ERR(s, GML_ERR_INVALID, err, err_size);
    GML_MODELS_NONNULL_ERR(g, GML_ERR_INVALID, err, err_size);
    GML_MODELS_NONNULL_ERR(s->cache, GML_ERR_INVALID, err, err_size);
    errf(err, err_size, "%s", "");
    if (!s->pos) {
        errf(err, err_size, "kv_step: no step (its positions are NULL)");
        return GML_ERR_INVALID;
    }
    gml_kv_cache *c = s->cache;
    if (c->len + s->n > c->p.max_len) {
        errf(err, err_size, "kv_cache: %" PRId64 " new token%s at position %" PRId64 " would pass "
             "the cache's max_len %" PRId64, s->n, s->n > 1 ? "s" : "", c->len, c->p.max_len);
        return GML_ERR_INVALID;
    }
    /* The positions' data in this graph: their own, or their place in g's plan. */
    int32_t *pos = gml_graph_data(g, s->pos), *lens = gml_graph_data(g, s->lens);
    if (!pos || !lens) {
        errf(err, err_size, "kv_step: the step's positions have no data in this graph (not in "
             "it, or a no_alloc context: plan the graph first)");
        return GML_ERR_INVALID;
    }
    for (int64_t b = 0; b < c->p.batch; b++)
        for (int64_t i = 0; i < s->n; i++) {
            pos[b * s->n + i] = (int32_t)(c->len + i);
            lens[b * s->n + i] = (int32_t)(c->len + i + 1);
        }
    gml_status st = gml_graph_compute(g, n_threads);
    if (st != GML_OK) {
        errf(err, err_size, "%s", gml_graph_error(g));
        return st;
    }
    c->len += s->n;
    return GML_OK;
}
