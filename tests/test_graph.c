/* Graphs: a whole multi-head attention block against plain loops, DFS
 * building (shared subexpressions once, use counts, topological order, leafs
 * apart, deep chains), the structural digest, the printed table, DOT, the
 * per-node callback and the NaN trap. */
#define _POSIX_C_SOURCE 200809L /* mkstemp */
#include "check.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

/* ---- multi-head attention ---------------------------------------------------- */

struct mha {
    int64_t B, tq, tk, D, H;
    bool causal;
    const int32_t *lens; /* [B] */
};

static double *zeros(int64_t n) { return calloc((size_t)n, sizeof(double)); }

/* y [B, T, out] = x [B, T, in] w[out, in]^T + bias, in double. */
static void ref_linear(const double *x, const float *w, const float *bias, int64_t rows, int64_t in,
                       int64_t out, double *y) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < out; o++) {
            double acc = bias[o];
            for (int64_t i = 0; i < in; i++) acc += x[r * in + i] * w[o * in + i];
            y[r * out + o] = acc;
        }
}

/* The reference: heads are the consecutive d_k-wide slices of the projected
 * features; query i of batch b sees key j iff j < lens[b] and, if causal,
 * j <= i + (Tk - Tq); a query that sees no key gets zero weights. */
static void ref_mha(const struct mha *m, const float *xq, const float *xkv, float *const w[8],
                    double *out, double *attn) {
    const int64_t B = m->B, tq = m->tq, tk = m->tk, D = m->D, H = m->H, dk = D / H;
    double *xqd = zeros(B * tq * D), *xkvd = zeros(B * tk * D);
    for (int64_t e = 0; e < B * tq * D; e++) xqd[e] = xq[e];
    for (int64_t e = 0; e < B * tk * D; e++) xkvd[e] = xkv[e];
    double *q = zeros(B * tq * D), *k = zeros(B * tk * D), *v = zeros(B * tk * D), *ctx = zeros(B * tq * D);
    ref_linear(xqd, w[0], w[1], B * tq, D, D, q);
    ref_linear(xkvd, w[2], w[3], B * tk, D, D, k);
    ref_linear(xkvd, w[4], w[5], B * tk, D, D, v);
    const double scale = 1.0 / sqrt((double)dk);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < tq; i++) {
                double *a = attn + ((b * H + h) * tq + i) * tk, max = -INFINITY, sum = 0;
                for (int64_t j = 0; j < tk; j++) {
                    bool visible = j < m->lens[b] && (!m->causal || j <= i + (tk - tq));
                    double s = 0;
                    for (int64_t c = 0; c < dk; c++)
                        s += q[(b * tq + i) * D + h * dk + c] * k[(b * tk + j) * D + h * dk + c];
                    a[j] = visible ? s * scale : -INFINITY;
                    if (a[j] > max) max = a[j];
                }
                for (int64_t j = 0; j < tk; j++) {
                    a[j] = max == -INFINITY ? 0 : exp(a[j] - max);
                    sum += a[j];
                }
                for (int64_t j = 0; j < tk; j++) {
                    a[j] = sum > 0 ? a[j] / sum : 0;
                    for (int64_t c = 0; c < dk; c++)
                        ctx[(b * tq + i) * D + h * dk + c] += a[j] * v[(b * tk + j) * D + h * dk + c];
                }
            }
    ref_linear(ctx, w[6], w[7], B * tq, D, D, out);
    free(xqd);
    free(xkvd);
    free(q);
    free(k);
    free(v);
    free(ctx);
}

static void check_structure(const gml_graph *g);

/* x [B, T, D] -> [B, H, T, d_k]: the usual split into heads. */
static gml_tensor *split_heads(gml_context *ctx, gml_tensor *x, int64_t H) {
    int64_t B = gml_dim(x, 0), T = gml_dim(x, 1), D = gml_dim(x, 2);
    gml_tensor *r = gml_reshape(ctx, x, 4, (int64_t[]){B, T, H, D / H});
    return gml_permute(ctx, r, (int[]){0, 2, 1, 3});
}

struct mha_case {
    gml_tensor *out, *attn;
    double *want_out, *want_attn;
};

/* The reference kernels land within about 4e-8 of the double loops here; the
 * tolerance leaves room for fast kernels summing in float. */
static void verify_mha(void *user) {
    struct mha_case *c = user;
    CHECK_CLOSE(c->attn, c->want_attn, 5e-7, 5e-6, "attention weights vs the loops");
    CHECK_CLOSE(c->out, c->want_out, 5e-7, 5e-6, "attention output vs the loops");
}

static void test_mha(const struct mha *m, chk_layout lq, uint64_t seed) {
    const int64_t B = m->B, tq = m->tq, tk = m->tk, D = m->D, H = m->H, dk = D / H;
    chk_case("mha B %lld Tq %lld Tk %lld D %lld H %lld %s, x %s", (long long)B, (long long)tq, (long long)tk,
             (long long)D, (long long)H, m->causal ? "causal" : "not causal", chk_layout_name(lq));
    chk_rng r = chk_seed(seed);
    gml_context *ctx = chk_ctx(16 << 20);
    gml_tensor *xq = chk_new_input(ctx, GML_F32, 3, (int64_t[]){B, tq, D}, lq, "xq", &r, -1, 1);
    gml_tensor *xkv = chk_new_input(ctx, GML_F32, 3, (int64_t[]){B, tk, D}, CHK_CONTIGUOUS, "xkv", &r, -1, 1);
    static const char *const names[8] = {"w_q", "b_q", "w_k", "b_k", "w_v", "b_v", "w_o", "b_o"};
    gml_tensor *w[8];
    const float bound = 1.0f / sqrtf((float)D); /* nn.Linear's init range */
    for (int i = 0; i < 8; i++) {
        w[i] = i % 2 ? gml_new_tensor_1d(ctx, GML_F32, D) : gml_new_tensor_2d(ctx, GML_F32, D, D);
        gml_set_name(w[i], names[i]);
        gml_set_flags(w[i], GML_FLAG_PARAM);
        chk_fill_uniform(w[i], &r, -bound, bound);
    }
    gml_tensor *lens = gml_set_name(gml_new_tensor_1d(ctx, GML_I32, B), "lens");
    memcpy(lens->data, m->lens, (size_t)B * 4);

    gml_tensor *q = split_heads(ctx, gml_linear(ctx, xq, w[0], w[1]), H);  /* [B, H, Tq, dk] */
    gml_tensor *k = split_heads(ctx, gml_linear(ctx, xkv, w[2], w[3]), H); /* [B, H, Tk, dk] */
    gml_tensor *v = split_heads(ctx, gml_linear(ctx, xkv, w[4], w[5]), H); /* [B, H, Tk, dk] */
    gml_tensor *scores = gml_matmul(ctx, q, gml_transpose(ctx, k, -2, -1)); /* [B, H, Tq, Tk] */
    gml_tensor *mask = gml_valid_len_mask(ctx, lens, tk);                   /* [B, 1, 1, Tk] */
    gml_tensor *attn = gml_softmax(ctx, scores, mask, 1.0f / sqrtf((float)dk), m->causal);
    gml_tensor *heads = gml_matmul(ctx, attn, v);                           /* [B, H, Tq, dk] */
    gml_tensor *merged = gml_cont(ctx, gml_permute(ctx, heads, (int[]){0, 2, 1, 3})); /* [B, Tq, H, dk] */
    gml_tensor *concat = gml_reshape(ctx, merged, 3, (int64_t[]){B, tq, D});
    gml_tensor *out = gml_linear(ctx, concat, w[6], w[7]);                  /* [B, Tq, D] */
    if (!CHECK(out, "building the attention graph: %s", gml_last_error(ctx))) {
        gml_free(ctx);
        return;
    }
    gml_set_name(attn, "attn");
    gml_set_name(out, "out");
    CHECK(gml_dim(out, 0) == B && gml_dim(out, 1) == tq && gml_dim(out, 2) == D, "output shape");
    CHECK(gml_dim(attn, 1) == H && gml_dim(attn, 2) == tq && gml_dim(attn, 3) == tk, "weights shape");

    float *wd[8];
    for (int i = 0; i < 8; i++) wd[i] = chk_dense(w[i]);
    float *xqd = chk_dense(xq), *xkvd = chk_dense(xkv);
    struct mha_case c = {out, attn, malloc((size_t)(B * tq * D) * sizeof(double)),
                         malloc((size_t)(B * H * tq * tk) * sizeof(double))};
    ref_mha(m, xqd, xkvd, wd, c.want_out, c.want_attn);

    gml_tensor *outs[] = {out, attn};
    gml_graph *g = gml_build_graph(ctx, outs, 2);
    check_structure(g);
    CHECK(gml_graph_n_leafs(g) == 11, "leafs: x_q (or the tensor it views), x_kv, 8 params, lens: %d",
          gml_graph_n_leafs(g));
    CHECK_RUN(g, .outs = outs, .n_outs = 2, .verify = verify_mha, .user = &c);
    gml_graph_set_nan_trap(g, true); /* -inf in the mask, fully masked rows: no trap */
    CHECK(gml_graph_compute(g, 2) == GML_OK, "with the NaN trap on: %s", gml_graph_error(g));
    gml_graph_free(g);
    for (int i = 0; i < 8; i++) free(wd[i]);
    free(xqd);
    free(xkvd);
    free(c.want_out);
    free(c.want_attn);
    gml_free(ctx);
}

static void test_attention(void) {
    /* self-attention, causal, one batch with every key, one with a prefix */
    test_mha(&(struct mha){.B = 2, .tq = 7, .tk = 7, .D = 24, .H = 3, .causal = true,
                           .lens = (int32_t[]){7, 4}}, CHK_CONTIGUOUS, 1);
    /* cross-attention, Tq < Tk (decoding against a longer context), a batch
     * with no valid key at all (its rows get zero weights: out = b_o) */
    test_mha(&(struct mha){.B = 3, .tq = 5, .tk = 9, .D = 32, .H = 4, .causal = true,
                           .lens = (int32_t[]){9, 0, 6}}, CHK_SLICED, 2);
    /* Tq > Tk, causal: the first Tq - Tk queries see nothing */
    test_mha(&(struct mha){.B = 1, .tq = 6, .tk = 3, .D = 16, .H = 2, .causal = true,
                           .lens = (int32_t[]){3}}, CHK_OUTER_SWAPPED, 3);
    /* not causal, one head, odd sizes */
    test_mha(&(struct mha){.B = 2, .tq = 17, .tk = 13, .D = 17, .H = 1, .causal = false,
                           .lens = (int32_t[]){13, 1}}, CHK_REVERSED, 4);
}

/* ---- building ------------------------------------------------------------------ */

/* Every node's sources come before it; leafs are apart; each tensor once. */
static void check_structure(const gml_graph *g) {
    const int n = gml_graph_n_nodes(g), nl = gml_graph_n_leafs(g);
    for (int i = 0; i < n; i++) {
        const gml_tensor *t = gml_graph_node(g, i);
        CHECK(t->op != GML_OP_NONE, "node %d '%s' is made by an op", i, t->name);
        CHECK(gml_graph_find(g, t) == i, "find(node %d '%s') is %d", i, t->name, gml_graph_find(g, t));
        for (int s = 0; s < GML_MAX_SRC; s++) {
            const gml_tensor *src = t->src[s];
            if (!src) continue;
            if (src->op == GML_OP_NONE) {
                bool listed = false;
                for (int j = 0; j < nl; j++) listed = listed || gml_graph_leaf(g, j) == src;
                CHECK(listed && gml_graph_find(g, src) == -1, "leaf '%s' of node '%s' is listed as a leaf",
                      src->name, t->name);
            } else {
                int j = gml_graph_find(g, src);
                CHECK(j >= 0 && j < i, "source '%s' (node %d) comes before its consumer '%s' (node %d)",
                      src->name, j, t->name, i);
            }
        }
    }
    for (int j = 0; j < nl; j++) {
        const gml_tensor *l = gml_graph_leaf(g, j);
        CHECK(l->op == GML_OP_NONE, "leaf %d '%s' has no op", j, l->name);
        for (int k = 0; k < j; k++) CHECK(gml_graph_leaf(g, k) != l, "leaf '%s' listed twice", l->name);
    }
    CHECK(gml_graph_node(g, -1) == gml_graph_node(g, n - 1) && gml_graph_node(g, n) == NULL,
          "negative node indices count from the end");
}

struct shared_case {
    gml_tensor *out;
    float want[12];
};

static void verify_shared(void *user) {
    struct shared_case *c = user;
    CHECK_EQUAL(c->out, c->want, "(a + b) * a + 2 (a + b)");
}

/* t = a + b used by two consumers is listed once and computed once. */
static void test_shared_subexpression(void) {
    chk_case("shared subexpression");
    chk_rng r = chk_seed(10);
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *a = chk_new_input(ctx, GML_F32, 2, (int64_t[]){3, 4}, CHK_CONTIGUOUS, "a", &r, -2, 2);
    gml_tensor *b = chk_new_input(ctx, GML_F32, 2, (int64_t[]){3, 4}, CHK_CONTIGUOUS, "b", &r, -2, 2);
    gml_tensor *t = gml_set_name(gml_add(ctx, a, b), "t");
    gml_tensor *u = gml_set_name(gml_mul(ctx, t, a), "u");
    gml_tensor *w = gml_set_name(gml_scale(ctx, t, 2.0f), "w");
    gml_tensor *out = gml_set_name(gml_add(ctx, u, w), "out");
    gml_graph *g = gml_build_graph(ctx, &out, 1);
    if (!CHECK(g, "build: %s", gml_last_error(ctx))) return;
    CHECK(gml_graph_n_nodes(g) == 4 && gml_graph_n_leafs(g) == 2, "%d nodes, %d leafs; want 4 and 2",
          gml_graph_n_nodes(g), gml_graph_n_leafs(g));
    CHECK(gml_graph_use_count(g, t) == 2, "t has 2 consumers: use count %d", gml_graph_use_count(g, t));
    CHECK(gml_graph_use_count(g, a) == 2 && gml_graph_use_count(g, b) == 1, "leaf use counts %d %d",
          gml_graph_use_count(g, a), gml_graph_use_count(g, b));
    CHECK(gml_graph_use_count(g, u) == 1 && gml_graph_use_count(g, w) == 1, "u and w are used once");
    CHECK(gml_graph_use_count(g, out) == 1, "the output counts one use: %d", gml_graph_use_count(g, out));
    CHECK(gml_graph_node(g, -1) == out && (gml_graph_tensor(g, out)->flags & GML_FLAG_OUTPUT),
          "the output is last and flagged in the graph");
    CHECK(!(out->flags & GML_FLAG_OUTPUT), "the output's header is not marked");
    CHECK(!(gml_graph_tensor(g, t)->flags & GML_FLAG_OUTPUT), "t is not an output");
    check_structure(g);

    struct shared_case c = {out, {0}};
    float *ad = chk_dense(a), *bd = chk_dense(b);
    for (int e = 0; e < 12; e++) {
        float s = ad[e] + bd[e];
        c.want[e] = s * ad[e] + s * 2.0f;
    }
    CHECK_RUN(g, .outs = &out, .n_outs = 1, .verify = verify_shared, .user = &c);
    gml_graph_free(g);

    /* t as a second output: one more use, still one node */
    gml_tensor *outs[] = {out, t};
    g = gml_build_graph(ctx, outs, 2);
    CHECK(gml_graph_n_nodes(g) == 4, "two outputs sharing nodes: %d nodes", gml_graph_n_nodes(g));
    CHECK(gml_graph_use_count(g, t) == 3, "t as an output too: use count %d, want 3",
          gml_graph_use_count(g, t));
    CHECK(gml_graph_use_count(g, u) == 1, "u is used once");
    CHECK(gml_graph_use_count(g, gml_new_tensor_1d(ctx, GML_F32, 1)) == 0,
          "a tensor outside the graph has no uses");
    check_structure(g);
    gml_graph_free(g);
    free(ad);
    free(bd);
    gml_free(ctx);
}

/* A graph whose output is a leaf has no nodes and computes nothing. */
static void test_leaf_output(void) {
    chk_case("a leaf as the output");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *x = gml_new_tensor_1d(ctx, GML_F32, 5);
    chk_fill_value(x, 3.0f);
    gml_graph *g = gml_build_graph(ctx, &x, 1);
    if (!CHECK(g, "build: %s", gml_last_error(ctx))) return;
    CHECK(gml_graph_n_nodes(g) == 0 && gml_graph_n_leafs(g) == 1 && gml_graph_use_count(g, x) == 1,
          "no nodes, one leaf used once (as the output)");
    CHECK(gml_graph_node(g, 0) == NULL && gml_graph_node(g, -1) == NULL, "no node 0");
    CHECK(gml_graph_compute(g, 2) == GML_OK && ((float *)x->data)[4] == 3.0f, "compute is a no-op");
    CHECK(gml_graph_flops(g) == 0, "no flops");
    gml_graph_free(g);
    gml_free(ctx);
}

/* A chain 20000 ops deep builds (no recursion limit) and computes. */
static void test_deep_chain(void) {
    chk_case("deep chain");
    const int depth = 20000;
    gml_context *ctx = chk_ctx((size_t)depth * (gml_tensor_overhead() + 128) + (1 << 20));
    gml_tensor *x = gml_new_tensor_1d(ctx, GML_F32, 3);
    gml_tensor *one = gml_new_tensor_1d(ctx, GML_F32, 1);
    chk_fill_value(x, 0.0f);
    chk_fill_value(one, 1.0f);
    gml_tensor *y = x;
    for (int i = 0; i < depth; i++) y = gml_add(ctx, y, one);
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    if (!CHECK(g, "build: %s", gml_last_error(ctx))) return;
    CHECK(gml_graph_n_nodes(g) == depth && gml_graph_n_leafs(g) == 2, "%d nodes", gml_graph_n_nodes(g));
    CHECK(gml_graph_use_count(g, one) == depth, "one is used %d times", gml_graph_use_count(g, one));
    CHECK(gml_graph_compute(g, 2) == GML_OK, "compute: %s", gml_graph_error(g));
    CHECK_EQUAL(y, ((float[]){20000, 20000, 20000}), "0 + 1 + ... + 1");
    gml_graph_free(g);
    gml_free(ctx);
}

/* ---- digest ------------------------------------------------------------------------ */

enum variant { BASE, RENAMED, SHAPE, SCALE, CAUSAL, EDGE, VIEW_OFFSET };

static gml_tensor *named(gml_tensor *t, const char *prefix, const char *name) {
    char buf[GML_MAX_NAME];
    snprintf(buf, sizeof buf, "%s%s", prefix, name);
    return gml_set_name(t, buf);
}

/* A small attention-like graph; each variant changes one thing. */
static gml_graph *digest_graph(gml_context *ctx, enum variant v) {
    const char *p = v == RENAMED ? "renamed_" : "";
    gml_tensor *q = named(gml_new_tensor_4d(ctx, GML_F32, 2, 3, 5, 8), p, "q");
    gml_tensor *k = named(gml_new_tensor_4d(ctx, GML_F32, 2, 3, 7, 8), p, "k");
    gml_tensor *val = named(gml_new_tensor_4d(ctx, GML_F32, 2, 3, 7, 8), p, "v");
    gml_tensor *mask = named(gml_new_tensor_1d(ctx, GML_F32, 7), p, "mask");
    gml_tensor *cache = named(gml_new_tensor_2d(ctx, GML_F32, v == SHAPE ? 12 : 10, 8), p, "cache");
    gml_tensor *s = named(gml_matmul(ctx, q, gml_transpose(ctx, k, -2, -1)), p, "scores");
    gml_tensor *w = named(gml_softmax(ctx, s, mask, v == SCALE ? 0.36f : 0.35f, v != CAUSAL), p, "w");
    gml_tensor *o = named(gml_matmul(ctx, w, val), p, "o");                       /* [2, 3, 5, 8] */
    gml_tensor *crow = gml_view(ctx, cache, 1, (int64_t[]){8}, cache->nb + 3, v == VIEW_OFFSET ? 64 : 32);
    gml_tensor *qrow = gml_view(ctx, q, 1, (int64_t[]){8}, q->nb + 3, 32);
    /* the edge variant adds q's row instead of the cache's: same shapes, another source */
    gml_tensor *out = named(gml_add(ctx, o, v == EDGE ? qrow : crow), p, "out");
    gml_tensor *out2 = named(gml_mul(ctx, crow, qrow), p, "out2");
    gml_tensor *outs[] = {out, out2};
    return gml_build_graph(ctx, outs, 2);
}

static void test_digest(void) {
    chk_case("digest");
    uint64_t d[VIEW_OFFSET + 1];
    for (int v = BASE; v <= VIEW_OFFSET; v++) {
        /* each build in its own context: no pointer or address may matter */
        gml_context *ctx = chk_ctx(1 << 20);
        gml_graph *g = digest_graph(ctx, (enum variant)v);
        if (!CHECK(g, "variant %d: %s", v, gml_last_error(ctx))) {
            gml_free(ctx);
            return;
        }
        d[v] = gml_graph_digest(g);
        CHECK(gml_graph_digest(g) == d[v], "digest is a function of the graph");
        gml_graph_free(g);
        gml_free(ctx);
    }
    gml_context *ctx = chk_ctx(1 << 20);
    gml_graph *g = digest_graph(ctx, BASE);
    CHECK(gml_graph_digest(g) == d[BASE], "two builds of the same graph in two contexts: %016llx vs %016llx",
          (unsigned long long)gml_graph_digest(g), (unsigned long long)d[BASE]);
    gml_graph_free(g);
    gml_free(ctx);
    CHECK(d[RENAMED] == d[BASE], "names do not change the digest");
    static const char *const what[] = {"", "", "one shape", "the softmax scale", "the causal flag",
                                       "one edge", "a view offset"};
    for (int v = SHAPE; v <= VIEW_OFFSET; v++) {
        CHECK(d[v] != d[BASE], "changing %s changes the digest", what[v]);
        for (int u = SHAPE; u < v; u++) CHECK(d[u] != d[v], "variants %d and %d differ", u, v);
    }
}

/* ---- print and DOT ------------------------------------------------------------------- */

/* The whole content of f (rewound), NUL-terminated; malloc'd. */
static char *slurp(FILE *f) {
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = '\0';
    return s;
}

/* The line of text holding word, or NULL (copied into buf). */
static const char *line_with(const char *text, const char *word, char *buf, size_t size) {
    const char *p = strstr(text, word);
    if (!p) return NULL;
    const char *b = p, *e = strchr(p, '\n');
    while (b > text && b[-1] != '\n') b--;
    size_t n = (size_t)((e ? e : p + strlen(p)) - b);
    if (n >= size) n = size - 1;
    memcpy(buf, b, n);
    buf[n] = '\0';
    return buf;
}

static gml_graph *small_named_graph(gml_context *ctx) {
    gml_tensor *x = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, 2, 5, 6), "x_in");
    gml_tensor *w = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 4, 6), "w_proj");
    gml_tensor *y = gml_set_name(gml_matmul(ctx, x, gml_transpose(ctx, w, 0, 1)), "y_mm");
    gml_tensor *z = gml_set_name(gml_softmax(ctx, y, NULL, 0.5f, false), "z_soft");
    gml_tensor *o = gml_set_name(gml_cont(ctx, gml_permute(ctx, z, (int[]){2, 0, 1})), "o_cont");
    return gml_build_graph(ctx, &o, 1);
}

static void test_print(void) {
    chk_case("graph_print");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_graph *g = small_named_graph(ctx);
    FILE *f = tmpfile();
    if (!CHECK(g && f, "graph and tmpfile")) return;
    gml_graph_print(g, f);
    char *text = slurp(f);
    fclose(f);
    char buf[512], shape[64];
    for (int i = 0; i < gml_graph_n_nodes(g) + gml_graph_n_leafs(g); i++) {
        const gml_tensor *t =
            i < gml_graph_n_nodes(g) ? gml_graph_node(g, i) : gml_graph_leaf(g, i - gml_graph_n_nodes(g));
        const char *line = line_with(text, t->name, buf, sizeof buf);
        if (!CHECK(line, "the table names '%s':\n%s", t->name, text)) continue;
        CHECK(strstr(line, gml_op_name(t->op)) != NULL, "'%s' row shows its op %s: %s", t->name,
              gml_op_name(t->op), line);
        CHECK(strstr(line, gml_format_shape(t, shape, sizeof shape)) != NULL,
              "'%s' row shows its shape %s: %s", t->name, shape, line);
    }
    snprintf(buf, sizeof buf, "%d nodes", gml_graph_n_nodes(g));
    CHECK_CONTAINS(text, buf);
    /* rows appear in node order */
    const char *p1 = strstr(text, "y_mm"), *p2 = strstr(text, "z_soft"), *p3 = strstr(text, "o_cont");
    CHECK(p1 && p2 && p3 && p1 < p2 && p2 < p3, "nodes printed in order");
    free(text);
    gml_graph_free(g);
    gml_free(ctx);
}

static int count_lines_with(const char *text, const char *word) {
    int n = 0;
    for (const char *line = text; *line;) {
        const char *e = strchr(line, '\n');
        size_t len = e ? (size_t)(e - line) : strlen(line);
        for (size_t k = 0; k + strlen(word) <= len; k++)
            if (strncmp(line + k, word, strlen(word)) == 0) {
                n++;
                break;
            }
        line += len + (e ? 1 : 0);
    }
    return n;
}

/* Quotes balance on every line, counting \" as escaped. */
static bool quotes_balance(const char *text) {
    bool in = false;
    for (const char *p = text; *p; p++) {
        if (in && *p == '\\' && p[1]) p++;
        else if (*p == '"') in = !in;
        else if (*p == '\n' && in) return false;
    }
    return !in;
}

static void test_dot(void) {
    chk_case("graph_dump_dot");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_graph *g = small_named_graph(ctx);
    /* a name DOT must escape */
    gml_set_name(gml_graph_leaf(g, 0), "x \"quoted\" \\ in");
    const char *dir = getenv("TMPDIR");
    char path[512];
    snprintf(path, sizeof path, "%s/ggmlite_test_XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (!CHECK(fd >= 0, "mkstemp %s", path)) return;
    close(fd);
    CHECK(gml_graph_dump_dot(g, path) == GML_OK, "dump_dot to %s", path);
    FILE *f = fopen(path, "rb");
    char *text = f ? slurp(f) : NULL;
    if (f) fclose(f);
    if (CHECK(text, "read back %s", path)) {
        int edges = 0;
        for (int i = 0; i < gml_graph_n_nodes(g); i++)
            for (int s = 0; s < GML_MAX_SRC; s++) edges += gml_graph_node(g, i)->src[s] != NULL;
        CHECK(strncmp(text, "digraph", 7) == 0, "starts with digraph: %.40s", text);
        size_t n = strlen(text);
        CHECK(n >= 2 && strcmp(text + n - 2, "}\n") == 0, "ends with }");
        CHECK(count_lines_with(text, "->") == edges, "%d edge lines, want one per source edge (%d)",
              count_lines_with(text, "->"), edges);
        CHECK(count_lines_with(text, "label=") - edges == gml_graph_n_nodes(g) + gml_graph_n_leafs(g),
              "one labelled vertex per tensor");
        CHECK(quotes_balance(text), "quotes balance (names escaped)");
        CHECK_CONTAINS(text, "softmax");
        /* graphviz, if present, must accept it */
        if (system("command -v dot >/dev/null 2>&1") == 0) {
            char cmd[600];
            snprintf(cmd, sizeof cmd, "dot -Tsvg '%s' -o /dev/null", path);
            CHECK(system(cmd) == 0, "graphviz rejects %s", path);
        }
    }
    free(text);
    remove(path);
    CHECK(gml_graph_dump_dot(g, "/nonexistent-dir/x.dot") == GML_ERR_IO, "unwritable path: GML_ERR_IO");
    gml_graph_free(g);
    gml_free(ctx);
}

/* ---- callback ----------------------------------------------------------------------- */

struct cb_log {
    const gml_graph *g;
    int calls, stop_after;
    bool in_order;
};

static bool on_node(const gml_tensor *node, int index, void *user) {
    struct cb_log *log = user;
    const gml_tensor *want = gml_graph_node(log->g, log->calls);
    /* the callback gets the graph's own copy of the node, its data bound */
    log->in_order = log->in_order && index == log->calls &&
                    node == gml_graph_tensor(log->g, want) && node->op == want->op &&
                    node->data == want->data && !strcmp(node->name, want->name);
    log->calls++;
    return log->stop_after < 0 || index < log->stop_after;
}

static void test_callback(void) {
    chk_case("node callback");
    chk_rng r = chk_seed(20);
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *x = chk_new_input(ctx, GML_F32, 2, (int64_t[]){3, 4}, CHK_CONTIGUOUS, "x", &r, -1, 1);
    gml_tensor *a = gml_set_name(gml_scale(ctx, x, 2.0f), "a");
    gml_tensor *b = gml_set_name(gml_cont(ctx, gml_transpose(ctx, a, 0, 1)), "b");
    gml_tensor *c = gml_set_name(gml_matmul(ctx, a, b), "c");
    gml_tensor *y = gml_set_name(gml_softmax(ctx, c, NULL, 1.0f, true), "y");
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    const int n = gml_graph_n_nodes(g);

    struct cb_log log = {g, 0, -1, true};
    gml_graph_set_callback(g, on_node, &log);
    CHECK(gml_graph_compute(g, 3) == GML_OK, "compute: %s", gml_graph_error(g));
    CHECK(log.calls == n && log.in_order, "callback saw %d of %d nodes, in order: %d", log.calls, n,
          log.in_order);

    const int stop = gml_graph_find(g, c);
    log = (struct cb_log){g, 0, stop, true};
    chk_poison_nodes(g);
    gml_status st = gml_graph_compute(g, 3);
    CHECK(st == GML_ERR_ABORTED, "stopping after '%s': status %d", c->name, (int)st);
    CHECK(log.calls == stop + 1 && log.in_order, "callback ran %d times, want %d", log.calls, stop + 1);
    CHECK_CONTAINS(gml_graph_error(g), "'c'");
    uint32_t bits;
    memcpy(&bits, y->data, 4);
    CHECK(bits == CHK_POISON_BITS, "the node after the stop did not run");

    gml_graph_set_callback(g, NULL, NULL);
    CHECK(gml_graph_compute(g, 1) == GML_OK && gml_graph_error(g)[0] == '\0',
          "without the callback compute runs again and clears the error");
    gml_graph_free(g);
    gml_free(ctx);
}

/* ---- NaN trap ----------------------------------------------------------------------- */

static void expect_trap(gml_graph *g, const char *node, const char *what, const char *where) {
    if (!CHECK(g, "graph for the trap at '%s' builds", node)) return;
    gml_graph_set_nan_trap(g, true);
    gml_status st = gml_graph_compute(g, 2);
    CHECK(st == GML_ERR_NONFINITE, "trap fires at '%s': status %d (%s)", node, (int)st, gml_graph_error(g));
    char quoted[80];
    snprintf(quoted, sizeof quoted, "'%s'", node);
    CHECK_CONTAINS(gml_graph_error(g), quoted);
    CHECK_CONTAINS(gml_graph_error(g), what);
    CHECK_CONTAINS(gml_graph_error(g), where);
    gml_graph_set_nan_trap(g, false);
    CHECK(gml_graph_compute(g, 2) == GML_OK, "without the trap non-finite values pass: %s",
          gml_graph_error(g));
}

static void test_nan_trap(void) {
    gml_context *ctx = chk_ctx(1 << 20);
    chk_rng r = chk_seed(30);

    chk_case("trap: overflow by scaling");
    gml_tensor *x = chk_new_input(ctx, GML_F32, 2, (int64_t[]){3, 4}, CHK_CONTIGUOUS, "x", &r, 1, 2);
    gml_tensor *big1 = gml_set_name(gml_scale(ctx, x, 1e20f), "big1");     /* <= 2e20: fine */
    gml_tensor *big2 = gml_set_name(gml_scale(ctx, big1, 1e20f), "big2");  /* 1e40: inf */
    gml_tensor *nan = gml_set_name(gml_add(ctx, big2, gml_scale(ctx, big2, -1.0f)), "inf_minus_inf");
    gml_graph *g = gml_build_graph(ctx, &nan, 1);
    expect_trap(g, "big2", "inf", "[0,0]");
    gml_graph_free(g);

    chk_case("trap: a NaN input");
    gml_tensor *in = chk_new_input(ctx, GML_F32, 2, (int64_t[]){3, 4}, CHK_SLICED, "in", &r, -1, 1);
    *(float *)chk_at(in, 1 * 4 + 2) = NAN;
    gml_tensor *twice = gml_set_name(gml_scale(ctx, in, 2.0f), "twice");
    gml_tensor *sum = gml_add(ctx, twice, x);
    g = gml_build_graph(ctx, &sum, 1);
    expect_trap(g, "twice", "nan", "[1,2]");
    gml_graph_free(g);

    chk_case("trap: matmul overflow");
    gml_tensor *a = gml_new_tensor_2d(ctx, GML_F32, 2, 3);
    gml_tensor *b = gml_new_tensor_2d(ctx, GML_F32, 3, 2);
    chk_fill_value(a, 3e38f);
    chk_fill_value(b, 1.0f);
    gml_tensor *mm = gml_set_name(gml_matmul(ctx, a, b), "mm");
    g = gml_build_graph(ctx, &mm, 1);
    expect_trap(g, "mm", "inf", "[0,0]");
    gml_graph_free(g);

    chk_case("trap: -inf masks and fully masked softmax rows are fine");
    gml_tensor *lens = gml_new_tensor_1d(ctx, GML_I32, 3);
    memcpy(lens->data, (int32_t[]){0, 2, 5}, 12);
    gml_tensor *s = chk_new_input(ctx, GML_F32, 4, (int64_t[]){3, 2, 4, 5}, CHK_TRANSPOSED, "s", &r, -3, 3);
    gml_tensor *m = gml_valid_len_mask(ctx, lens, 5);                       /* [3, 1, 1, 5] */
    gml_tensor *p1 = gml_softmax(ctx, s, m, 1.0f, true);                    /* [3, 2, 4, 5] */
    /* the mask through a view (a permute) is still exempt */
    gml_tensor *sp = gml_permute(ctx, s, (int[]){1, 0, 2, 3});               /* [2, 3, 4, 5] */
    gml_tensor *mp = gml_permute(ctx, m, (int[]){1, 0, 2, 3});               /* [1, 3, 1, 5] */
    gml_tensor *p2 = gml_softmax(ctx, sp, mp, 0.5f, false);
    /* and through ops that move or add values: a copied, repeated mask added
     * to the scores by hand (its -inf is by design: no trap), and the same
     * mask given to softmax (a -inf x would not mask: it is an overflow) */
    gml_tensor *mc = gml_repeat_interleave(ctx, gml_cont(ctx, mp), 3, 0);  /* [3, 3, 1, 5] */
    gml_tensor *sv = gml_view(ctx, sp, 4, (int64_t[]){2, 3, 1, 5},
                              (size_t[]){sp->nb[0], sp->nb[1], sp->nb[2], sp->nb[3]}, 0);
    gml_tensor *mv = gml_view(ctx, mc, 4, (int64_t[]){1, 3, 1, 5},
                              (size_t[]){mc->nb[0], mc->nb[1], mc->nb[2], mc->nb[3]}, 0);
    gml_tensor *sm = gml_add(ctx, sv, mv);                                  /* [2, 3, 1, 5] */
    gml_tensor *p3 = gml_softmax(ctx, sv, mv, 1.0f, false);
    gml_tensor *outs[] = {p1, p2, sm, p3};
    g = gml_build_graph(ctx, outs, 4);
    if (CHECK(g, "build: %s", gml_last_error(ctx))) {
        gml_graph_set_nan_trap(g, true);
        CHECK(gml_graph_compute(g, 2) == GML_OK, "no trap: %s", gml_graph_error(g));
        CHECK(((float *)p1->data)[0] == 0.0f, "batch 0 sees no key: zero weights");
        gml_graph_free(g);
    }

    chk_case("trap: -inf that no mask explains still stops it");
    gml_tensor *na = gml_new_tensor_2d(ctx, GML_F32, 2, 3);
    chk_fill_value(na, -3e38f);
    gml_tensor *neg = gml_set_name(gml_matmul(ctx, na, b), "neg_mm");       /* -9e38: -inf */
    gml_tensor *neg2 = gml_cont(ctx, neg); /* moves values, but of no mask or input */
    g = gml_build_graph(ctx, &neg2, 1);
    expect_trap(g, "neg_mm", "-inf", "[0,0]");
    gml_graph_free(g);
    gml_free(ctx);
}

/* SIGALRM: the compute is taking forever; say so (write alone is safe in a
 * signal handler) and fail. */
static void too_slow(int sig) {
    (void)sig;
    static const char head[] = "test_graph: FAIL [",
                      tail[] = "]: compute still running after 10 s (does the trap walk every "
                               "path of the graph?)\n";
    bool ok = write(2, head, sizeof head - 1) >= 0 &&
              write(2, chk_state.case_name, strlen(chk_state.case_name)) >= 0 &&
              write(2, tail, sizeof tail - 1) >= 0;
    _exit(ok ? 1 : 2);
}

static double seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Computes g with the trap on, in under a second, with an alarm in case the
 * trap's work grows with the number of paths (2^60 here) and never ends. */
static gml_status timed_trap_compute(gml_graph *g, double *took) {
    struct sigaction sa = {.sa_handler = too_slow}, old;
    sigaction(SIGALRM, &sa, &old);
    alarm(10);
    gml_graph_set_nan_trap(g, true);
    double t0 = seconds();
    gml_status st = gml_graph_compute(g, 2);
    *took = seconds() - t0;
    alarm(0);
    sigaction(SIGALRM, &old, NULL);
    return st;
}

/* x = x + x sixty times: 60 nodes, 2^60 paths from the last to the first.
 * The first is a scale (whose output is never -inf by design), so whether
 * -inf may be at a node after the chain takes knowing it of every node in
 * it: the trap must not walk every path to find out. */
static gml_tensor *diamonds(gml_context *ctx, const float start[4], int n, const char *name) {
    gml_tensor *leaf = gml_new_tensor_1d(ctx, GML_F32, 4);
    if (leaf) memcpy(leaf->data, start, 16);
    gml_tensor *x = gml_scale(ctx, leaf, 1.0f);
    for (int i = 0; i < n; i++) x = gml_add(ctx, x, x);
    return gml_set_name(x, name);
}

static gml_tensor *leaf4(gml_context *ctx, const char *name, const float v[4]) {
    gml_tensor *t = gml_set_name(gml_new_tensor_1d(ctx, GML_F32, 4), name);
    if (t) memcpy(t->data, v, 16);
    return t;
}

static void test_nan_trap_diamonds(void) {
    const int n = 60;
    gml_context *ctx = chk_ctx(1 << 20);
    double took;

    chk_case("trap: a chain of diamonds plus a -inf mask");
    gml_tensor *x = diamonds(ctx, (float[]){1.0f, 2.0f, 0.5f, -3.0f}, n, "x60");
    gml_tensor *mask = leaf4(ctx, "mask", (float[]){0.0f, -INFINITY, 0.0f, 0.0f});
    gml_tensor *y = gml_set_name(gml_add(ctx, x, mask), "y");
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    if (!CHECK(g, "build: %s", gml_last_error(ctx))) return;
    gml_status st = timed_trap_compute(g, &took);
    CHECK(st == GML_OK, "-inf from the mask passes: status %d (%s)", (int)st, gml_graph_error(g));
    CHECK(took < 1.0, "%d diamonds with the trap on took %.2f s", n, took);
    CHECK_EQUAL(y, ((float[]){ldexpf(1.0f, n), -INFINITY, ldexpf(0.5f, n), ldexpf(-3.0f, n)}),
                "x * 2^%d + mask", n);
    gml_graph_free(g);

    chk_case("trap: a NaN after a chain of diamonds and a -inf mask");
    gml_tensor *inf = leaf4(ctx, "inf", (float[]){0.0f, INFINITY, 0.0f, 0.0f});
    gml_tensor *z = gml_set_name(gml_add(ctx, y, inf), "z"); /* z[1] = -inf + inf */
    g = gml_build_graph(ctx, &z, 1);
    if (!CHECK(g, "build: %s", gml_last_error(ctx))) return;
    st = timed_trap_compute(g, &took);
    CHECK(st == GML_ERR_NONFINITE, "status %d (%s)", (int)st, gml_graph_error(g));
    CHECK(took < 1.0, "%d diamonds and a NaN with the trap on took %.2f s", n, took);
    CHECK_CONTAINS(gml_graph_error(g), "'z'");
    CHECK_CONTAINS(gml_graph_error(g), "nan");
    CHECK_CONTAINS(gml_graph_error(g), "[1]");
    gml_graph_free(g);

    chk_case("trap: -inf at the end of a chain of diamonds, no mask");
    /* -1.5 * 2^(128 - n) doubled n times: -1.5 * 2^128 overflows at the last add */
    gml_tensor *w = diamonds(ctx, (float[]){ldexpf(-1.5f, 128 - n), 1.0f, 1.0f, 1.0f}, n, "w60");
    g = gml_build_graph(ctx, &w, 1);
    if (!CHECK(g, "build: %s", gml_last_error(ctx))) return;
    st = timed_trap_compute(g, &took);
    CHECK(st == GML_ERR_NONFINITE, "status %d (%s)", (int)st, gml_graph_error(g));
    CHECK(took < 1.0, "%d diamonds and a -inf with the trap on took %.2f s", n, took);
    CHECK_CONTAINS(gml_graph_error(g), "'w60'");
    CHECK_CONTAINS(gml_graph_error(g), "-inf");
    CHECK_CONTAINS(gml_graph_error(g), "[0]");
    gml_graph_free(g);
    gml_free(ctx);
}

int main(void) {
    test_attention();
    test_shared_subexpression();
    test_leaf_output();
    test_deep_chain();
    test_digest();
    test_print();
    test_dot();
    test_callback();
    test_nan_trap();
    test_nan_trap_diamonds();
    return chk_summary();
}
