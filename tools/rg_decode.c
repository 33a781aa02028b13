/* run-graph --decode: incremental decoding through a KV cache (kv_cache.h).
 *
 * Two graphs over one cache, each built once and placed by the planner: the
 * prompt step (the input's T tokens at once, causal among themselves) and
 * the one-token step. After the prompt, each new token's input is the
 * previous token's output (the first one's: the prompt's last output), so
 * the N decoded outputs are a deterministic function of the weights and the
 * prompt. --repeat R decodes the N tokens R times (after one warm-up when
 * R > 1), rewinding the cache to the prompt each time; the times are per
 * token. */
#define _POSIX_C_SOURCE 200809L
#include <ggmlite/kv_cache.h>
#include "rg.h"
#include "rg_time.h"

#include <stdlib.h>
#include <string.h>

/* A step graph of n tokens in its own no_alloc context, placed. */
typedef struct step {
    gml_context *ctx;
    gml_graph *g;
    gml_kv_step kv;
    gml_tensor *y; /* [B, n, D] */
} step;

static bool step_build(step *s, const rg_opts *o, gml_kv_cache *cache, gml_attn_config cfg,
                       const gml_attn_weights *w, gml_tensor *x, rg_err *e) {
    s->ctx = gml_init((gml_init_params){.mem_size = 256 * gml_tensor_overhead(), .no_alloc = true});
    if (!s->ctx) return rg_fail(e, RG_RUNTIME, "out of memory");
    s->kv = gml_kv_step_new(s->ctx, cache, x->ne[2]);
    s->y = gml_attn_decode(s->ctx, cfg, w, x, &s->kv, 0);
    s->g = s->y ? gml_build_graph(s->ctx, &s->y, 1) : NULL;
    if (!s->g) {
        if (o->weights) return rg_fail(e, RG_RUNTIME, "%s: %s", o->weights, gml_last_error(s->ctx));
        return rg_fail(e, RG_RUNTIME, "--decode: %s", gml_last_error(s->ctx));
    }
    if (!rg_place(s->g, "the decode graph", 0, e)) return false;
    gml_graph_set_nan_trap(s->g, o->nan_trap);
    return true;
}

static void step_free(step *s) {
    if (s->g) gml_graph_free(s->g);
    if (s->ctx) gml_free(s->ctx);
}

static bool step_compute(step *s, int threads, double *ms, rg_err *e) {
    char err[1024];
    const double t0 = rg_now_ms();
    gml_status st = gml_kv_step_compute(&s->kv, s->g, threads, err, sizeof err);
    if (ms) *ms = rg_now_ms() - t0;
    if (st != GML_OK) return rg_fail(e, RG_RUNTIME, "--decode: %s", err);
    return true;
}

/* Row i of y [B, n, D] of every batch entry into row j of out [B, m, D]. */
static void copy_rows(const gml_tensor *y, int64_t i, gml_tensor *out, int64_t j) {
    const int64_t B = y->ne[1], D = y->ne[3];
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < D; c++) {
            const int64_t src[3] = {b, i, c}, dst[3] = {b, j, c};
            gml_set_f32(out, dst, gml_get_f32(y, src));
        }
}

/* One decoding of the N tokens after the prompt (rg_timed_run): the cache
 * rewound to the prompt, each token fed the output of the one before; *ms
 * the mean compute time of a token. */
typedef struct tokens_run {
    const rg_opts *o;
    rg_decode *r;
    gml_kv_cache *cache;
    step *prompt, *one;
    gml_tensor *x1;
    rg_err *e;
} tokens_run;

static bool decode_tokens(void *user, int i, double *ms_out) {
    (void)i;
    tokens_run *s = user;
    rg_decode *r = s->r;
    gml_kv_cache_truncate(s->cache, r->prompt);
    copy_rows(gml_graph_tensor(s->prompt->g, s->prompt->y), r->prompt - 1, s->x1, 0);
    double total = 0, ms;
    for (int64_t t = 0; t < r->tokens; t++) {
        if (!step_compute(s->one, s->o->threads, &ms, s->e)) return false;
        total += ms;
        /* y is planned: its data is the graph's */
        copy_rows(gml_graph_tensor(s->one->g, s->one->y), 0, r->out, t);
        copy_rows(gml_graph_tensor(s->one->g, s->one->y), 0, s->x1, 0);
    }
    *ms_out = total / (double)r->tokens;
    return true;
}

bool rg_decode_run(const rg_opts *o, rg_data *d, rg_decode *r, rg_err *e) {
    *r = (rg_decode){.prompt = d->x->ne[2], .tokens = o->decode, .runs = o->repeat};
    gml_attn_weights w;
    char err[1024];
    if (gml_attn_weights_find(d->wctx, &w, err, sizeof err) != GML_OK)
        return rg_fail(e, RG_RUNTIME, "%s: %s", o->weights, err);
    if (!rg_attn_sinks_asked(o->sinks, &w, d->wctx, o->weights, e) || !rg_check_unused_weights(o, d, NULL, &w, e))
        return false;
    const int64_t B = d->x->ne[1], D = d->dim[RG_D], H = d->dim[RG_H];
    const int64_t G = d->dim[RG_G] ? d->dim[RG_G] : H;
    if (H < 1 || D % H)
        return rg_fail(e, RG_RUNTIME, "--heads %lld does not divide D = %lld", (long long)H,
                       (long long)D);
    r->max_len = o->max_len ? o->max_len : r->prompt + r->tokens;
    if (r->prompt + r->tokens > r->max_len) /* said before any work */
        return rg_fail(e, RG_RUNTIME,
                       "--decode %lld after a prompt of %lld tokens needs %lld cache positions, "
                       "but --max-len is %lld",
                       (long long)r->tokens, (long long)r->prompt,
                       (long long)(r->prompt + r->tokens), (long long)r->max_len);
    gml_kv_cache *cache = gml_kv_cache_new(
        (gml_kv_cache_params){.n_layers = 1, .batch = B, .n_kv_heads = (int)G,
                              .max_len = r->max_len, .d_k = D / H,
                              .type = o->cache_dtype},
        err, sizeof err);
    if (!cache) return rg_fail(e, RG_RUNTIME, "--decode: %s", err);
    r->cache_bytes = gml_kv_cache_bytes(cache);
    gml_attn_config cfg = rg_attn_config(o); /* causal bottom-right: rg_parse_args set it */
    cfg.dims = (gml_attn_dims){.d_model = D, .n_heads = (int)H, .n_kv_heads = (int)G};
    cfg.graph.impl = GML_ATTN_FUSED;

    step prompt = {0}, one = {0};
    gml_context *xctx = gml_init((gml_init_params){.mem_size = 4 * gml_tensor_overhead() +
                                                               (size_t)(B * D * 4) + 256});
    r->ctx = gml_init((gml_init_params){.mem_size = 4 * gml_tensor_overhead() +
                                                    (size_t)(B * r->tokens * D * 4) + 256});
    gml_tensor *x1 = xctx ? gml_new_tensor_3d(xctx, GML_F32, B, 1, D) : NULL;
    r->out =
        r->ctx ? gml_set_name(gml_new_tensor_3d(r->ctx, GML_F32, B, r->tokens, D), "out") : NULL;
    bool ok = (x1 && r->out) || rg_fail(e, RG_RUNTIME, "out of memory for the decoded outputs");
    if (ok) gml_set_flags(gml_set_name(x1, "x"), GML_FLAG_INPUT);
    ok = ok && step_build(&prompt, o, cache, cfg, &w, d->x, e) &&
         step_build(&one, o, cache, cfg, &w, x1, e);
    if (ok) {
        r->step_nodes = gml_graph_n_nodes(one.g);
        r->flops = gml_graph_flops(one.g);
        r->peak_bytes = rg_leaf_bytes(prompt.g) + gml_graph_plan_peak(prompt.g) +
                        gml_graph_plan_peak(one.g);
    }
    ok = ok && step_compute(&prompt, o->threads, &r->prompt_ms, e);

    /* the N tokens, R times (one warm-up first when R > 1) */
    double *times = ok ? malloc((size_t)o->repeat * sizeof *times) : NULL;
    if (ok && !times) ok = rg_fail(e, RG_RUNTIME, "out of memory");
    tokens_run s = {o, r, cache, &prompt, &one, x1, e};
    ok = ok && rg_time_runs(o->repeat, decode_tokens, &s, times);
    if (ok) {
        r->median_ms = rg_median(times, o->repeat);
        r->min_ms = times[0];
    }
    free(times);
    step_free(&prompt);
    step_free(&one);
    gml_free(xctx);
    gml_kv_cache_free(cache);
    return ok;
}

void rg_decode_free(rg_decode *r) {
    if (r->ctx) gml_free(r->ctx);
    *r = (rg_decode){0};
}
