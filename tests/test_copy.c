/* Copies: gml_cont (any strides -> contiguous) and gml_cpy (write into a view
 * of another tensor, the KV-cache pattern). Exact, for f32 and i32, over
 * shapes with size-1 dims and odd sizes, inputs in every layout. */
#include "check.h"

static const struct {
    int n;
    int64_t ne[4];
} SHAPES[] = {
    {1, {1}},         {1, {7}},          {1, {65}},         {2, {3, 17}},
    {2, {1, 33}},     {2, {17, 1}},      {3, {2, 3, 7}},    {3, {3, 1, 17}},
    {4, {2, 3, 5, 7}}, {4, {1, 2, 1, 65}}, {4, {7, 3, 2, 1}}, {4, {1, 1, 1, 1}},
};
#define N_SHAPES (sizeof SHAPES / sizeof *SHAPES)

struct cont_case {
    gml_tensor *x, *y;
    void *want; /* x's elements in logical order */
};

static void verify_cont(void *user) {
    struct cont_case *c = user;
    CHECK(gml_is_contiguous(c->y) && gml_same_shape(c->x, c->y),
          "cont gives a contiguous tensor of the same shape");
    CHECK_EQUAL(c->y, c->want, "cont elements");
}

static void test_cont(void) {
    chk_rng r = chk_seed(21);
    for (size_t s = 0; s < N_SHAPES; s++) {
        for (int l = 0; l < CHK_N_LAYOUTS; l++) {
            for (int ty = 0; ty < 2; ty++) {
                gml_type type = ty ? GML_I32 : GML_F32;
                gml_context *ctx = chk_ctx(1 << 20);
                gml_tensor *x = chk_new_input(ctx, type, SHAPES[s].n, SHAPES[s].ne, (chk_layout)l, "x",
                                              &r, -1000, 1000);
                char shape[64];
                chk_case("cont of %s %s %s", chk_layout_name((chk_layout)l), gml_type_name(type),
                         chk_shape(x, shape, sizeof shape));
                gml_tensor *y = gml_cont(ctx, x);
                if (!CHECK(y, "cont: %s", gml_last_error(ctx))) {
                    gml_free(ctx);
                    continue;
                }
                CHECK(y->type == type && !gml_is_view(y), "cont makes a new %s tensor", gml_type_name(type));
                struct cont_case c = {x, y, chk_dense(x)};
                gml_graph *g = gml_build_graph(ctx, &y, 1);
                CHECK_RUN(g, .outs = &y, .n_outs = 1, .verify = verify_cont, .user = &c);
                gml_graph_free(g);
                free(c.want);
                gml_free(ctx);
            }
        }
    }
}

/* cont of a cont of a permuted sliced view: the chain is computed in order. */
static void test_cont_chain(void) {
    chk_case("cont chain");
    chk_rng r = chk_seed(22);
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *x = chk_new_input(ctx, GML_F32, 3, (int64_t[]){3, 5, 7}, CHK_SLICED, "x", &r, -1, 1);
    gml_tensor *a = gml_cont(ctx, gml_permute(ctx, x, (int[]){2, 0, 1}));          /* [7, 3, 5] */
    gml_tensor *b = gml_cont(ctx, gml_transpose(ctx, a, 0, 2));                     /* [5, 3, 7] */
    gml_tensor *y = gml_cont(ctx, gml_reshape(ctx, b, 2, (int64_t[]){15, 7}));      /* [15, 7] */
    if (!CHECK(y, "build: %s", gml_last_error(ctx))) return;
    float *xd = chk_dense(x), want[105];
    /* b[k, j, i] = a[i, j, k] = x[j, k, i]; y = b flattened */
    for (int k = 0; k < 5; k++)
        for (int j = 0; j < 3; j++)
            for (int i = 0; i < 7; i++) want[(k * 3 + j) * 7 + i] = xd[(j * 5 + k) * 7 + i];
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    CHECK(gml_graph_n_nodes(g) == 7, "the views and the three conts are nodes: %d", gml_graph_n_nodes(g));
    CHECK_RUN(g, .outs = &y, .n_outs = 1);
    CHECK_EQUAL(y, want, "cont chain elements");
    gml_graph_free(g);
    free(xd);
    gml_free(ctx);
}

/* ---- cpy: the KV-cache pattern -------------------------------------------- */

struct cache_case {
    gml_tensor *cache;   /* [B, H, Tmax, d] */
    gml_tensor *src;     /* what is written: [B, H, Tnew, d], any strides */
    gml_tensor *written; /* gml_cpy's result */
    gml_tensor *reader;  /* a node reading the copied values through `written` */
    int64_t pos;         /* first cache position written */
    void *init;          /* the cache before the copy */
    void *want_cache;    /* the cache after the copy */
    void *want_src;      /* src in logical order */
};

static void reset_cache(void *user) {
    struct cache_case *c = user;
    chk_write(c->cache, c->init);
}

static void verify_cache(void *user) {
    struct cache_case *c = user;
    CHECK_EQUAL(c->cache, c->want_cache, "cache after cpy at position %lld (rest untouched)",
                (long long)c->pos);
    CHECK_EQUAL(c->written, c->want_src, "cpy's result view holds the copy");
    if (c->reader) CHECK_EQUAL(c->reader, c->want_src, "a node reading cpy's result sees the copy");
}

static void run_cache_case(gml_type type, int64_t B, int64_t H, int64_t tmax, int64_t tnew, int64_t d,
                           int64_t pos, chk_layout layout, uint64_t seed) {
    chk_rng r = chk_seed(seed);
    gml_context *ctx = chk_ctx(4 << 20);
    chk_case("cpy %s [%lld,%lld,%lld,%lld] into cache [%lld,%lld,%lld,%lld] at %lld, source %s",
             gml_type_name(type), (long long)B, (long long)H, (long long)tnew, (long long)d,
             (long long)B, (long long)H, (long long)tmax, (long long)d, (long long)pos,
             chk_layout_name(layout));
    gml_tensor *cache = gml_set_name(gml_new_tensor_4d(ctx, type, B, H, tmax, d), "k_cache");
    /* the new keys arrive as [B, Tnew, H, d] and are permuted to [B, H, Tnew, d] */
    gml_tensor *k_new = chk_new_input(ctx, type, 4, (int64_t[]){B, tnew, H, d}, layout, "k_new", &r,
                                      -100, 100);
    gml_tensor *src = gml_permute(ctx, k_new, (int[]){0, 2, 1, 3});
    gml_tensor *slot = gml_view(ctx, cache, 4, (int64_t[]){B, H, tnew, d}, cache->nb, pos * cache->nb[2]);
    gml_tensor *written = gml_cpy(ctx, src, slot);
    gml_tensor *reader = gml_cont(ctx, written);
    if (!CHECK(reader, "build: %s", gml_last_error(ctx))) {
        gml_free(ctx);
        return;
    }
    CHECK(written->data == slot->data && written->view_src == cache, "cpy returns a view of its destination");

    struct cache_case c = {cache, src, written, reader, pos, NULL, NULL, NULL};
    size_t bytes = (size_t)chk_numel(cache) * 4;
    c.init = malloc(bytes);
    for (int64_t e = 0; e < chk_numel(cache); e++) {
        if (type == GML_F32) ((float *)c.init)[e] = 1000.0f + (float)e;
        else ((int32_t *)c.init)[e] = -1 - (int32_t)e;
    }
    /* src = k_new.permute(0, 2, 1, 3), written out by hand */
    char *kd = chk_dense(k_new);
    c.want_src = malloc((size_t)(B * H * tnew * d) * 4);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < tnew; t++)
                memcpy((char *)c.want_src + 4 * (((b * H + h) * tnew + t) * d),
                       kd + 4 * (((b * tnew + t) * H + h) * d), 4 * (size_t)d);
    free(kd);
    c.want_cache = malloc(bytes);
    memcpy(c.want_cache, c.init, bytes);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < tnew; t++)
                memcpy((char *)c.want_cache + 4 * (((b * H + h) * tmax + pos + t) * d),
                       (char *)c.want_src + 4 * (((b * H + h) * tnew + t) * d), 4 * (size_t)d);

    gml_graph *g = gml_build_graph(ctx, &reader, 1);
    CHECK_RUN(g, .outs = &reader, .n_outs = 1, .before = reset_cache, .verify = verify_cache, .user = &c);
    gml_graph_free(g);
    free(c.init);
    free(c.want_cache);
    free(c.want_src);
    gml_free(ctx);
}

static void test_cpy_cache(void) {
    static const int64_t dims[][6] = {
        /* B, H, Tmax, Tnew, d, pos */
        {2, 3, 16, 1, 8, 0},  {2, 3, 16, 1, 8, 15}, {2, 3, 16, 5, 8, 7}, {1, 1, 9, 9, 17, 0},
        {3, 2, 33, 4, 7, 29}, {1, 4, 5, 2, 1, 3},   {2, 1, 17, 16, 3, 1},
    };
    uint64_t seed = 30;
    for (size_t k = 0; k < sizeof dims / sizeof *dims; k++) {
        const int64_t *v = dims[k];
        for (int l = 0; l < CHK_N_LAYOUTS; l++)
            run_cache_case(l % 2 ? GML_I32 : GML_F32, v[0], v[1], v[2], v[3], v[4], v[5], (chk_layout)l,
                           seed++);
    }
}

/* cpy into a non-contiguous destination: the transposed view of a block in
 * the middle of a larger matrix. */
struct tdst_case {
    gml_tensor *big, *written;
    float *init, *want_big, *want_src;
};

static void reset_tdst(void *user) {
    struct tdst_case *c = user;
    chk_write(c->big, c->init);
}

static void verify_tdst(void *user) {
    struct tdst_case *c = user;
    CHECK_EQUAL(c->big, c->want_big, "matrix after cpy into a transposed block");
    CHECK_EQUAL(c->written, c->want_src, "cpy result");
}

static void test_cpy_strided_dst(void) {
    chk_case("cpy into a transposed block of a [9,11] matrix");
    chk_rng r = chk_seed(40);
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *big = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 9, 11), "big");
    /* block rows 2..6 (5), cols 3..5 (3) of big, seen transposed: [3, 5] */
    gml_tensor *block = gml_view(ctx, big, 2, (int64_t[]){5, 3}, (size_t[]){44, 4}, 2 * 44 + 3 * 4);
    gml_tensor *dst = gml_transpose(ctx, block, 0, 1);
    gml_tensor *a = chk_new_input(ctx, GML_F32, 2, (int64_t[]){3, 5}, CHK_SLICED, "a", &r, -1, 1);
    gml_tensor *w = gml_cpy(ctx, a, dst);
    if (!CHECK(w, "build: %s", gml_last_error(ctx))) return;
    struct tdst_case c = {big, w, malloc(99 * 4), malloc(99 * 4), chk_dense(a)};
    for (int e = 0; e < 99; e++) c.init[e] = c.want_big[e] = -(float)e;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 5; j++) c.want_big[(2 + j) * 11 + 3 + i] = c.want_src[i * 5 + j];
    gml_graph *g = gml_build_graph(ctx, &w, 1);
    CHECK_RUN(g, .outs = &w, .n_outs = 1, .before = reset_tdst, .verify = verify_tdst, .user = &c);
    gml_graph_free(g);
    free(c.init);
    free(c.want_big);
    free(c.want_src);
    gml_free(ctx);
}

/* The decode step: append the new keys to the cache, then read the whole
 * valid prefix of the cache. The reader depends on the cache leaf, not on the
 * cpy node, so the graph lists the cpy result first among its outputs: the
 * DFS visits outputs in the order given. */
static void test_cpy_then_read_prefix(void) {
    chk_case("append to a cache, then read the prefix");
    chk_rng r = chk_seed(41);
    gml_context *ctx = chk_ctx(1 << 20);
    const int64_t tmax = 8, d = 5, pos = 3, tnew = 2;
    gml_tensor *cache = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, tmax, d), "cache");
    gml_tensor *k_new =
        chk_new_input(ctx, GML_F32, 2, (int64_t[]){tnew, d}, CHK_TRANSPOSED, "k_new", &r, -1, 1);
    gml_tensor *slot = gml_view(ctx, cache, 2, (int64_t[]){tnew, d}, cache->nb + 2, pos * cache->nb[2]);
    gml_tensor *written = gml_cpy(ctx, k_new, slot);
    gml_tensor *prefix = gml_view(ctx, cache, 2, (int64_t[]){pos + tnew, d}, cache->nb + 2, 0);
    gml_tensor *read = gml_cont(ctx, prefix);
    gml_tensor *outs[] = {written, read};
    gml_graph *g = gml_build_graph(ctx, outs, 2);
    if (!CHECK(g, "build: %s", gml_last_error(ctx))) return;
    CHECK(gml_graph_find(g, written) < gml_graph_find(g, read), "the cpy runs before the reader");
    float *kd = chk_dense(k_new), want[25];
    for (int64_t e = 0; e < tmax * d; e++) ((float *)cache->data)[e] = (float)e;
    for (int64_t e = 0; e < (pos + tnew) * d; e++) want[e] = e < pos * d ? (float)e : kd[e - pos * d];
    CHECK(gml_graph_compute(g, 2) == GML_OK, "compute: %s", gml_graph_error(g));
    CHECK_EQUAL(read, want, "prefix read after the append");
    free(kd);
    gml_graph_free(g);
    gml_free(ctx);
}

int main(void) {
    test_cont();
    test_cont_chain();
    test_cpy_cache();
    test_cpy_strided_dst();
    test_cpy_then_read_prefix();
    return chk_summary();
}
