/* Incremental decoding (models/kv_cache.c): decoding T tokens through the
 * KV cache, one at a time or after a prompt chunk, with ONE step graph built
 * before the first token and computed at every position, gives the outputs
 * of the full causal forward over the T tokens (gml_mha / gml_gqa, fused and
 * unfused graphs) within 1e-5 relative (+ 1e-6 absolute; outputs are O(1)),
 * for MHA, GQA and MQA, batch > 1, one and two layers; bitwise the same at
 * 1, 2, 3 and 7 threads; the step graph appends rows in place (no copy of
 * the past); passing T_max is a clear error; bad configurations too (a
 * max_len past INT32_MAX: positions are i32); with rope, the step rotates
 * q and k at its run-time positions and equals the full forward. */
#define _POSIX_C_SOURCE 200809L /* fork */
#include "attn_check.h"
#include "attn_expect.h"
#include <ggmlite/kv_cache.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define RTOL 1e-5
#define ATOL 1e-6

static double g_max_err; /* decode vs full, max |diff| / max |full| */

typedef struct dec_case {
    int B, T, D, H, G, layers;
    int prompt; /* tokens of the first step (a chunk); 0: one at a time from the start */
    bool rope;  /* rope on q and k (rotate_half; interleaved with rope_pairs) */
    bool rope_pairs;
    int rotary_dim;
    int64_t window; /* cfg.score options, at the step's absolute positions */
    float softcap, alibi;
    bool sinks; /* w.sinks [H] */
} dec_case;

/* Weights of every layer as tensors in wctx, random (with biases). */
typedef struct model {
    dec_case c;
    gml_context *wctx;
    gml_attn_weights w[2];
    attn_data *data[2]; /* the arrays (data[0]->xq is the input) */
} model;

static gml_tensor *param(gml_context *ctx, const char *name, int n, const int64_t *ne,
                         const float *src) {
    gml_tensor *t = gml_set_name(gml_new_tensor(ctx, GML_F32, n, ne), name);
    memcpy(t->data, src, (size_t)gml_nelements(t) * sizeof(float));
    return t;
}

static void model_new(model *m, dec_case c, uint64_t seed) {
    *m = (model){.c = c};
    m->wctx = gml_init((gml_init_params){.mem_size = 16 << 20});
    const int64_t D = c.D, kv = (int64_t)c.G * (c.D / c.H);
    for (int l = 0; l < c.layers; l++) {
        attn_case ac = {.B = c.B, .Tq = c.T, .D = c.D, .H = c.H, .G = c.G, .bias = true,
                        .sinks = c.sinks};
        attn_data *d = m->data[l] = attn_data_new(&ac, seed + (uint64_t)l);
        gml_attn_weights *w = &m->w[l];
        w->w_q = param(m->wctx, "w_q.weight", 2, (int64_t[]){D, D}, d->wq);
        w->w_k = param(m->wctx, "w_k.weight", 2, (int64_t[]){kv, D}, d->wk);
        w->w_v = param(m->wctx, "w_v.weight", 2, (int64_t[]){kv, D}, d->wv);
        w->w_o = param(m->wctx, "w_o.weight", 2, (int64_t[]){D, D}, d->wo);
        w->b_q = param(m->wctx, "w_q.bias", 1, (int64_t[]){D}, d->bq);
        w->b_k = param(m->wctx, "w_k.bias", 1, (int64_t[]){kv}, d->bk);
        w->b_v = param(m->wctx, "w_v.bias", 1, (int64_t[]){kv}, d->bv);
        w->b_o = param(m->wctx, "w_o.bias", 1, (int64_t[]){D}, d->bo);
        if (c.sinks) w->sinks = param(m->wctx, "sinks", 1, (int64_t[]){c.H}, d->sinks);
    }
}

static void model_free(model *m) {
    for (int l = 0; l < m->c.layers; l++) attn_data_free(m->data[l]);
    gml_free(m->wctx);
}

static gml_attn_config config(const dec_case *c, gml_attn_impl impl) {
    return (gml_attn_config){
        .dims = {.n_heads = c->H, .n_kv_heads = c->G},
        .score = {.causal = GML_CAUSAL_BOTTOM_RIGHT,
                  .window = c->window,
                  .softcap = c->softcap,
                  .alibi_max_bias = c->alibi},
        .pos = {.kind = c->rope ? GML_POS_ROPE : GML_POS_NONE,
                .rope = {.rotary_dim = c->rotary_dim, .interleaved = c->rope_pairs}},
        .graph.impl = impl};
}

/* The full causal forward over all T tokens -> out [B, T, D]. */
static bool full_forward(const model *m, gml_attn_impl impl, float *out) {
    const dec_case *c = &m->c;
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 16 << 20});
    gml_tensor *y = param(ctx, "x", 3, (int64_t[]){c->B, c->T, c->D}, m->data[0]->xq);
    for (int l = 0; l < c->layers; l++)
        y = gml_gqa(ctx, config(c, impl), &m->w[l], (gml_attn_inputs){.query = y}).out;
    gml_graph *g = y ? gml_build_graph(ctx, &y, 1) : NULL;
    bool ok = g && gml_set_isa(GML_ISA_REFERENCE) == GML_OK && gml_graph_compute(g, 1) == GML_OK;
    if (ok) attn_read(y, out);
    else
        fprintf(stderr, "  full forward: %s%s\n", gml_last_error(ctx), g ? gml_graph_error(g) : "");
    gml_set_isa(GML_ISA_AUTO);
    gml_graph_free(g);
    gml_free(ctx);
    return ok;
}

/* A step graph for n new tokens through every layer. */
typedef struct step_graph {
    gml_context *ctx;
    gml_tensor *x, *y;
    gml_kv_step step;
    gml_graph *g;
} step_graph;

static bool step_graph_new(step_graph *s, const model *m, gml_kv_cache *cache, int n) {
    const dec_case *c = &m->c;
    s->ctx = gml_init((gml_init_params){.mem_size = 8 << 20});
    s->x = gml_set_name(gml_new_tensor_3d(s->ctx, GML_F32, c->B, n, c->D), "x");
    s->step = gml_kv_step_new(s->ctx, cache, n);
    gml_tensor *y = s->x;
    for (int l = 0; l < c->layers; l++)
        y = gml_attn_decode(s->ctx, config(c, GML_ATTN_AUTO), &m->w[l], y, &s->step, l);
    s->y = y;
    s->g = y ? gml_build_graph(s->ctx, &y, 1) : NULL;
    if (!s->g) {
        fprintf(stderr, "  step graph (n %d): %s\n", n, gml_last_error(s->ctx));
        gml_free(s->ctx);
        return false;
    }
    return true;
}

static void step_graph_free(step_graph *s) {
    gml_graph_free(s->g);
    gml_free(s->ctx);
}

/* Decodes all T tokens (the prompt chunk first, if any) under isa with nth
 * threads -> out [B, T, D]. The graphs are built once, before the first
 * token. */
static bool decode(const model *m, gml_isa isa, int nth, float *out) {
    const dec_case *c = &m->c;
    char err[512];
    gml_kv_cache *cache = gml_kv_cache_new(
        (gml_kv_cache_params){.n_layers = c->layers, .batch = c->B, .n_kv_heads = c->G,
                              .max_len = c->T, .d_k = c->D / c->H},
        err, sizeof err);
    if (!cache) {
        fprintf(stderr, "  %s\n", err);
        return false;
    }
    step_graph one, chunk = {0};
    bool ok = step_graph_new(&one, m, cache, 1) &&
              (!c->prompt || step_graph_new(&chunk, m, cache, c->prompt));
    const uint64_t digest = ok ? gml_graph_digest(one.g) : 0;
    ok = ok && gml_set_isa(isa) == GML_OK;
    const float *x = m->data[0]->xq;
    for (int t = 0; ok && t < c->T;) {
        step_graph *s = t == 0 && c->prompt ? &chunk : &one;
        const int n = (int)s->step.n;
        float *xs = s->x->data, *ys = s->y->data;
        for (int b = 0; b < c->B; b++) /* tokens t .. t+n-1 of every batch row */
            memcpy(xs + (size_t)b * n * c->D, x + ((size_t)b * c->T + t) * c->D,
                   (size_t)n * c->D * sizeof(float));
        if (gml_kv_step_compute(&s->step, s->g, nth, err, sizeof err) != GML_OK) {
            fprintf(stderr, "  step at %d: %s\n", t, err);
            ok = false;
            break;
        }
        for (int b = 0; b < c->B; b++)
            memcpy(out + ((size_t)b * c->T + t) * c->D, ys + (size_t)b * n * c->D,
                   (size_t)n * c->D * sizeof(float));
        t += n;
        EXPECT(gml_kv_cache_len(cache) == t, "cache length %lld after %d tokens",
               (long long)gml_kv_cache_len(cache), t);
    }
    gml_set_isa(GML_ISA_AUTO);
    EXPECT(!ok || gml_graph_digest(one.g) == digest, "the step graph changed while decoding");

    if (ok) { /* past T_max: refused, nothing computed, the length stays */
        gml_status st = gml_kv_step_compute(&one.step, one.g, nth, err, sizeof err);
        char want[128];
        snprintf(want, sizeof want, "kv_cache: 1 new token at position %d would pass the cache's "
                 "max_len %d", c->T, c->T);
        EXPECT(st == GML_ERR_INVALID && strstr(err, want), "step past T_max: status %d, '%s'",
               (int)st, err);
        EXPECT(gml_kv_cache_len(cache) == c->T, "a refused step moved the length");
        /* rewinding to a shorter context and decoding the rest again gives
         * the same outputs (within tolerance: the first pass may have taken
         * these tokens in a prompt chunk) */
        const int keep = c->T / 2;
        EXPECT(!gml_kv_cache_truncate(cache, c->T + 1) && gml_kv_cache_truncate(cache, keep) &&
                   gml_kv_cache_len(cache) == keep,
               "truncate to %d of %d", keep, c->T);
        ok = gml_set_isa(isa) == GML_OK;
        for (int t = keep; ok && t < c->T; t++) {
            float *xs = one.x->data, *ys = one.y->data;
            for (int b = 0; b < c->B; b++)
                memcpy(xs + (size_t)b * c->D, x + ((size_t)b * c->T + t) * c->D,
                       (size_t)c->D * sizeof(float));
            ok = gml_kv_step_compute(&one.step, one.g, nth, err, sizeof err) == GML_OK;
            for (int b = 0; ok && b < c->B; b++) {
                size_t bad;
                attn_max_err(ys + (size_t)b * c->D, out + ((size_t)b * c->T + t) * c->D,
                             (size_t)c->D, ATOL, RTOL, &bad);
                EXPECT(!bad, "token %d decoded again after a truncate differs", t);
            }
        }
        EXPECT(ok, "decoding after a truncate: %s", err);
        gml_set_isa(GML_ISA_AUTO);
    }
    step_graph_free(&one);
    if (chunk.g) step_graph_free(&chunk);
    gml_kv_cache_free(cache);
    return ok;
}

static void check_case(dec_case c, uint64_t seed) {
    model m;
    model_new(&m, c, seed);
    const size_t n = (size_t)c.B * c.T * c.D;
    float *fused = malloc(n * 4), *unfused = malloc(n * 4), *dec = malloc(n * 4),
          *first = malloc(n * 4);
    const int fails_before = fails;
    bool ok =
        full_forward(&m, GML_ATTN_FUSED, fused) && full_forward(&m, GML_ATTN_UNFUSED, unfused);
    double err = 0, scale = 0;
    static const struct {
        gml_isa isa;
        int nth;
    } runs[] = {{GML_ISA_REFERENCE, 1}, {GML_ISA_REFERENCE, 3}, {GML_ISA_AUTO, 1},
                {GML_ISA_AUTO, 2},      {GML_ISA_AUTO, 3},      {GML_ISA_AUTO, 7}};
    for (size_t r = 0; ok && r < sizeof runs / sizeof *runs; r++) {
        if (!decode(&m, runs[r].isa, runs[r].nth, dec)) {
            ok = false;
            break;
        }
        for (int f = 0; f < 2; f++) {
            const float *want = f ? unfused : fused;
            size_t bad;
            attn_max_err(dec, want, n, ATOL, RTOL, &bad);
            EXPECT(!bad, "%zu of %zu outputs differ from the full %s forward (%s, %d threads)", bad,
                   n, f ? "unfused" : "fused", gml_isa_name(runs[r].isa), runs[r].nth);
            for (size_t i = 0; i < n; i++) {
                err = fmax(err, fabs((double)dec[i] - want[i]));
                scale = fmax(scale, fabs((double)want[i]));
            }
        }
        /* thread counts never change a bit (within a kernel set) */
        if (runs[r].nth == 1) memcpy(first, dec, n * 4);
        else EXPECT(memcmp(first, dec, n * 4) == 0, "%s, %d threads: other bits than 1 thread",
                    gml_isa_name(runs[r].isa), runs[r].nth);
    }
    if (!ok) fails++;
    ok = fails == fails_before;
    g_max_err = fmax(g_max_err, err / scale);
    char opts[128];
    snprintf(opts, sizeof opts, "%s%s%.0lld%s%s%s", c.rope ? (c.rope_pairs ? ", rope interleaved" : ", rope") : "",
             c.window ? ", window " : "", (long long)c.window, c.sinks ? ", sinks" : "",
             c.alibi ? ", alibi" : "", c.softcap ? ", softcap" : "");
    printf("%s decode B%d T%d D%d H%d G%d layers %d%s%.0d%s: max |decode - full| %.2e (%.2e of max "
           "|out|)\n", ok ? "ok  " : "FAIL", c.B, c.T, c.D, c.H, c.G, c.layers,
           c.prompt ? ", prompt " : "", c.prompt, opts, err, err / scale);
    free(fused), free(unfused), free(dec), free(first);
    model_free(&m);
}

/* The step graph writes the new rows into the cache in place and reads the
 * cache through those writes: no copy of the past, no scores. */
static void check_graph(void) {
    dec_case c = {.B = 2, .T = 40, .D = 32, .H = 8, .G = 2, .layers = 2};
    model m;
    model_new(&m, c, 5);
    char err[256];
    gml_kv_cache *cache = gml_kv_cache_new((gml_kv_cache_params){.n_layers = 2, .batch = 2,
                                                                 .n_kv_heads = 2, .max_len = 40,
                                                                 .d_k = 4},
                                           err, sizeof err);
    EXPECT(cache && gml_kv_cache_bytes(cache) == 2 * 2 * (size_t)(2 * 2 * 40 * 4) * 4,
           "cache bytes %zu", cache ? gml_kv_cache_bytes(cache) : 0);
    step_graph s;
    if (cache && step_graph_new(&s, &m, cache, 1)) {
        int set_rows = 0, flash = 0;
        for (int i = 0; i < gml_graph_n_nodes(s.g); i++) {
            const gml_tensor *t = gml_graph_node(s.g, i);
            EXPECT(t->op != GML_OP_CONT && t->op != GML_OP_CPY && t->op != GML_OP_SOFTMAX,
                   "step graph node '%s' is a %s", t->name, gml_op_name(t->op));
            if (t->op == GML_OP_SET_ROWS) {
                const gml_tensor *kc = gml_kv_cache_k(cache, set_rows / 2),
                                 *vc = gml_kv_cache_v(cache, set_rows / 2);
                EXPECT(t->view_src == (set_rows % 2 ? vc : kc),
                       "set_rows node '%s' does not write the cache of its layer", t->name);
                set_rows++;
            }
            if (t->op == GML_OP_FLASH_ATTN) {
                flash++;
                EXPECT(t->src[1]->op == GML_OP_SET_ROWS && t->src[2]->op == GML_OP_SET_ROWS,
                       "flash_attn reads the cache not through the appends");
                EXPECT(gml_graph_find(s.g, t->src[1]) < i && gml_graph_find(s.g, t->src[2]) < i,
                       "flash_attn runs before an append");
            }
            EXPECT(gml_is_view(t) || gml_nelements(t) < 2 * 2 * 40 * 4,
                   "node '%s' is as large as a cache", t->name);
        }
        EXPECT(set_rows == 4 && flash == 2, "%d set_rows, %d flash_attn nodes (want 4, 2)",
               set_rows, flash);
        /* pos past T_max bypassing gml_kv_step_compute: set_rows refuses it */
        for (int b = 0; b < 2; b++) {
            ((int32_t *)s.step.pos->data)[b] = 40;
            ((int32_t *)s.step.lens->data)[b] = 40;
        }
        EXPECT(gml_graph_compute(s.g, 2) == GML_ERR_INVALID &&
                   strstr(gml_graph_error(s.g), "set_rows(k_cache.0, ") &&
                   strstr(gml_graph_error(s.g), "index 40 at [0,0] is out of range [0, 40)"),
               "pos 40 of 40: '%s'", gml_graph_error(s.g));
        step_graph_free(&s);
    } else {
        fails++;
    }
    gml_kv_cache_free(cache);
    model_free(&m);
}

static void check_errors(void) {
    char err[256];
    EXPECT(!gml_kv_cache_new((gml_kv_cache_params){.n_layers = 1, .batch = 2, .n_kv_heads = 0,
                                                   .max_len = 8, .d_k = 4},
                             err, sizeof err) &&
               strstr(err, "kv heads 0"),
           "kv heads 0: '%s'", err);
    gml_kv_cache *cache = gml_kv_cache_new(
        (gml_kv_cache_params){.n_layers = 1, .batch = 2, .n_kv_heads = 2, .max_len = 8, .d_k = 4},
        err, sizeof err);
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20});
    gml_attn_weights w = {
        .w_q = gml_new_tensor_2d(ctx, GML_F32, 16, 16),
        .w_k = gml_new_tensor_2d(ctx, GML_F32, 8, 16),
        .w_v = gml_new_tensor_2d(ctx, GML_F32, 8, 16),
        .w_o = gml_new_tensor_2d(ctx, GML_F32, 16, 16),
    };
    gml_tensor *x = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, 2, 1, 16), "x");
    gml_kv_step step = gml_kv_step_new(ctx, cache, 1);
    const gml_attn_config ok = {.dims = {.n_heads = 4, .n_kv_heads = 2}, .score.causal = GML_CAUSAL_BOTTOM_RIGHT};
    EXPECT(gml_attn_decode(ctx, ok, &w, x, &step, 0), "well-formed decode: %s",
           gml_last_error(ctx));
    static const struct {
        gml_attn_config cfg;
        int layer;
        const char *want;
    } cases[] = {
        {{.dims = {.n_heads = 4, .n_kv_heads = 2}, .score.causal = GML_CAUSAL_BOTTOM_RIGHT}, 1, "decode: layer 1 is out of range"},
        {{.dims = {.n_heads = 4, .n_kv_heads = 2}}, 0, "decode: decoding is causal"},
        {{.dims = {.n_heads = 4, .n_kv_heads = 2}, .score.causal = GML_CAUSAL_BOTTOM_RIGHT, .graph.want_weights = true}, 0,
         "decode: decoding uses the fused graph"},
        {{.dims = {.n_heads = 4, .n_kv_heads = 2}, .score.causal = GML_CAUSAL_BOTTOM_RIGHT, .graph.impl = GML_ATTN_UNFUSED}, 0,
         "decode: decoding uses the fused graph"},
        {{.dims = {.n_heads = 2, .n_kv_heads = 1}, .score.causal = GML_CAUSAL_BOTTOM_RIGHT}, 0, "does not fit the cache"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gml_attn_weights wi = w;
        if (i == 4) { /* 2 heads of d_k 8, 1 kv head: weights to match */
            wi.w_k = gml_new_tensor_2d(ctx, GML_F32, 8, 16);
            wi.w_v = wi.w_k;
        }
        gml_clear_error(ctx);
        gml_tensor *y = gml_attn_decode(ctx, cases[i].cfg, &wi, x, &step, cases[i].layer);
        EXPECT(!y && strstr(gml_last_error(ctx), cases[i].want), "case %zu: '%s' lacks '%s'", i,
               gml_last_error(ctx), cases[i].want);
    }
    gml_clear_error(ctx);
    gml_tensor *x2 = gml_new_tensor_3d(ctx, GML_F32, 2, 2, 16); /* 2 tokens into a 1-token step */
    EXPECT(!gml_attn_decode(ctx, ok, &w, x2, &step, 0) &&
               strstr(gml_last_error(ctx), "1 new tokens per step"),
           "x of 2 tokens, step of 1: '%s'", gml_last_error(ctx));
    gml_clear_error(ctx);
    gml_kv_step big = gml_kv_step_new(ctx, cache, 9);
    EXPECT(!big.pos && strstr(gml_last_error(ctx),
                              "9 new tokens per step, but the cache holds 8 (max_len)"),
           "step of 9 into 8: '%s'", gml_last_error(ctx));
    gml_free(ctx);
    gml_kv_cache_free(cache);
}

/* A max_len past INT32_MAX is refused, naming the value and the limit:
 * positions and lengths are i32 (2^31 would wrap to negative ones). */
static bool max_len_refused(int64_t max_len, int64_t d_k) {
    char err[256] = "";
    gml_kv_cache *c = gml_kv_cache_new((gml_kv_cache_params){.n_layers = 1, .batch = 1,
                                                            .n_kv_heads = 1, .max_len = max_len,
                                                            .d_k = d_k},
                                       err, sizeof err);
    char want[96];
    snprintf(want, sizeof want, "max_len %lld is past 2147483647 (INT32_MAX)", (long long)max_len);
    const bool ok = !c && strstr(err, want);
    if (!ok)
        fprintf(stderr, "FAIL %s:%d: max_len %lld, d_k %lld: %s; message '%s' lacks '%s'\n",
                __FILE__, __LINE__, (long long)max_len, (long long)d_k,
                c ? "made a cache" : "refused", err, want);
    gml_kv_cache_free(c);
    return ok;
}

static void check_max_len(void) {
    /* 2^31 x 1024 or INT64_MAX rows: refused for the type, not only as too large */
    if (!max_len_refused(INT64_C(1) << 31, 1024)) fails++;
    if (!max_len_refused(INT64_MAX, 1)) fails++;
    /* 2^31 rows of d_k 1 (16 GiB of K and V) fit the size limit: only the i32
     * bound refuses them. In a child whose address space is capped near its
     * current size, so that without the bound the allocation fails there
     * instead of filling the machine's memory. */
    fflush(NULL);
    const pid_t pid = fork();
    if (pid == 0) {
        long pages = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (!f || fscanf(f, "%ld", &pages) != 1) _exit(2);
        fclose(f);
        const rlim_t cap = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)256 << 20);
        if (setrlimit(RLIMIT_AS, &(struct rlimit){cap, cap}) != 0) _exit(2);
        _exit(max_len_refused(INT64_C(1) << 31, 1) ? 0 : 1);
    }
    int status = 0;
    EXPECT(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
               WEXITSTATUS(status) == 0,
           "max_len 2^31, d_k 1: the child %s %d (0: refused with the message)",
           WIFEXITED(status) ? "exited with" : "died of signal",
           WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    /* INT32_MAX itself is allowed: past the size limit here, so refused as too large */
    char err[256] = "";
    EXPECT(!gml_kv_cache_new((gml_kv_cache_params){.n_layers = 1, .batch = 1, .n_kv_heads = 1,
                                                   .max_len = INT32_MAX, .d_k = 1024},
                             err, sizeof err) &&
               strstr(err, "too large"),
           "max_len INT32_MAX, d_k 1024: '%s'", err);
}

int main(void) {
    static const dec_case cases[] = {
        {.B = 2, .T = 13, .D = 32, .H = 4, .G = 4, .layers = 1},              /* MHA */
        {.B = 3, .T = 11, .D = 36, .H = 6, .G = 2, .layers = 1},              /* GQA, d_k 6 */
        {.B = 2, .T = 9, .D = 20, .H = 4, .G = 1, .layers = 1},               /* MQA, d_k 5 */
        {.B = 2, .T = 70, .D = 16, .H = 2, .G = 1, .layers = 1},              /* past a key block */
        {.B = 2, .T = 12, .D = 24, .H = 6, .G = 3, .layers = 1, .prompt = 5}, /* a prompt chunk */
        {.B = 1, .T = 1, .D = 8, .H = 2, .G = 2, .layers = 1},                /* T = 1 */
        {.B = 2, .T = 10, .D = 24, .H = 4, .G = 2, .layers = 2, .prompt = 3}, /* two layers */
        {.B = 2, .T = 8, .D = 16, .H = 4, .G = 4, .layers = 2},
        /* rope at the step's run-time positions equals the full forward's 0 .. T-1 */
        {.B = 2, .T = 12, .D = 32, .H = 4, .G = 4, .layers = 1, .rope = true},
        {.B = 2, .T = 11, .D = 48, .H = 6, .G = 2, .layers = 2, .prompt = 4, .rope = true,
         .rope_pairs = true},
        {.B = 1, .T = 70, .D = 32, .H = 4, .G = 1, .layers = 1, .prompt = 33, .rope = true,
         .rotary_dim = 4},
        /* the scoring options at the step's absolute positions */
        {.B = 2, .T = 13, .D = 32, .H = 4, .G = 2, .layers = 1, .window = 4},
        {.B = 1, .T = 70, .D = 16, .H = 2, .G = 1, .layers = 2, .prompt = 20, .window = 33},
        {.B = 2, .T = 10, .D = 24, .H = 6, .G = 3, .layers = 1, .sinks = true},
        {.B = 2, .T = 12, .D = 32, .H = 8, .G = 2, .layers = 2, .prompt = 5, .window = 3,
         .sinks = true, .rope = true},
        {.B = 2, .T = 9, .D = 24, .H = 6, .G = 6, .layers = 1, .alibi = 8.0f, .softcap = 2.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_case(cases[i], 100 + i);
    printf("decode vs full forward: max error %.2e of max |out|\n", g_max_err);
    check_graph();
    check_errors();
    check_max_len();
    if (fails) {
        fprintf(stderr, "test_kv_cache: %d failures\n", fails);
        return 1;
    }
    printf("test_kv_cache: all passed\n");
    return 0;
}
