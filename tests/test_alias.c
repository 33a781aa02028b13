/* Writes that alias: the overlap checks against a brute-force count of the
 * bytes every element covers, gml_cpy and gml_set_rows refusing destinations
 * that share memory with themselves or with what they read (also in a
 * no_alloc context, for data placed by hand, and through a graph file), and
 * the writes they allow computing the same on every ISA and thread count. */
#include "check.h"
#include "internal.h"

#include <ggmlite/io.h>

/* ---- the helpers against brute force ------------------------------------- */

/* Byte ranges of every element of t, offsets into its root (t a view of a
 * root of `bytes` bytes). out[k] is the first byte of element k. */
static void element_starts(const gml_tensor *t, int64_t *out) {
    int64_t k = 0;
    for (int64_t i0 = 0; i0 < t->ne[0]; i0++)
        for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
            for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
                for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
                    out[k++] = (int64_t)t->view_offs + i0 * (int64_t)t->nb[0] +
                               i1 * (int64_t)t->nb[1] + i2 * (int64_t)t->nb[2] +
                               i3 * (int64_t)t->nb[3];
}

static int64_t start_of(const gml_tensor *t, const int64_t *i) {
    int64_t at = (int64_t)t->view_offs;
    for (int k = 0; k < GML_MAX_DIMS; k++) at += i[k] * (int64_t)t->nb[k];
    return at;
}

static bool in_range(const gml_tensor *t, const int64_t *i) {
    for (int k = 0; k < GML_MAX_DIMS; k++)
        if (i[k] < 0 || i[k] >= t->ne[k]) return false;
    return true;
}

/* A random view of root: 1 to 4 dims, sizes 1..5, element strides 0..12
 * (stride 0 only sometimes), at a random offset, shrunk until it fits. */
static gml_tensor *random_view(gml_context *ctx, gml_tensor *root, chk_rng *r, bool zero_ok) {
    const int64_t n_root = gml_nelements(root);
    for (;;) {
        int n = chk_randint(r, 1, 4);
        int64_t ne[4];
        size_t nb[4];
        int64_t last = 0;
        for (int k = 0; k < n; k++) {
            ne[k] = chk_randint(r, 1, 5);
            int64_t s = chk_randint(r, zero_ok && chk_randint(r, 0, 9) == 0 ? 0 : 1, 12);
            nb[k] = (size_t)s * 4;
            last += (ne[k] - 1) * s;
        }
        if (last >= n_root) continue;
        int64_t off = chk_randint(r, 0, (int)(n_root - 1 - last));
        gml_tensor *v = gml_view(ctx, root, n, ne, nb, (size_t)off * 4);
        if (v) return v;
    }
}

static void test_helpers_brute_force(void) {
    chk_rng r = chk_seed(1);
    int64_t sa[625], sb[625];
    long self_yes = 0, pair_yes = 0, pair_no_inside = 0;
    gml_overlap_witness w;
    for (int it = 0; it < 20000; it++) {
        chk_case("random views, round %d", it);
        gml_context *ctx = chk_ctx(1 << 16);
        gml_tensor *root = gml_set_name(gml_new_tensor_1d(ctx, GML_F32, 96), "root");
        gml_tensor *a = random_view(ctx, root, &r, true), *b = random_view(ctx, root, &r, false);
        const int64_t na = gml_nelements(a), nb_ = gml_nelements(b);
        element_starts(a, sa);
        element_starts(b, sb);
        /* 4-byte elements at multiples of 4: sharing a byte is sharing a start */
        bool self = false, pair = false;
        for (int64_t i = 0; i < na; i++)
            for (int64_t j = i + 1; j < na && !self; j++) self = sa[i] == sa[j];
        for (int64_t i = 0; i < na; i++)
            for (int64_t j = 0; j < nb_ && !pair; j++) pair = sa[i] == sb[j];
        gml_overlap got = gml_self_overlap(a, &w);
        CHECK(got == (self ? GML_OVERLAP_YES : GML_OVERLAP_NO), "self overlap %d, brute force %d", (int)got,
              (int)self);
        if (got == GML_OVERLAP_YES) {
            self_yes++;
            bool differ = false;
            for (int k = 0; k < 4; k++) differ = differ || w.ia[k] != w.ib[k];
            CHECK(in_range(a, w.ia) && in_range(a, w.ib) && differ && start_of(a, w.ia) == start_of(a, w.ib),
                  "self witness: two different indices at one place");
            if (w.dim >= 0) CHECK(a->nb[w.dim] == 0 && a->ne[w.dim] > 1, "the dim named has stride 0");
        }
        got = gml_tensors_overlap(a, b, &w);
        CHECK(got == (pair ? GML_OVERLAP_YES : GML_OVERLAP_NO), "pair overlap %d, brute force %d", (int)got,
              (int)pair);
        CHECK(gml_tensors_overlap(b, a, NULL) == got, "symmetric");
        if (got == GML_OVERLAP_YES) {
            pair_yes++;
            CHECK(in_range(a, w.ia) && in_range(b, w.ib) && start_of(a, w.ia) == start_of(b, w.ib),
                  "pair witness: an element of each at one place");
        } else {
            const int64_t a0 = (int64_t)a->view_offs, b0 = (int64_t)b->view_offs;
            if (a0 < b0 + (int64_t)gml_nbytes(b) && b0 < a0 + (int64_t)gml_nbytes(a)) pair_no_inside++;
        }
        gml_free(ctx);
    }
    chk_case("random views");
    CHECK(self_yes > 1000 && pair_yes > 1000 && pair_no_inside > 1000,
          "every kind of answer seen: %ld self, %ld pairs overlapping, %ld pairs apart with intersecting "
          "byte ranges", self_yes, pair_yes, pair_no_inside);

    /* Data placed by hand at any byte: elements that share bytes without
     * sharing a start. */
    static unsigned char bytes[2048];
    for (int it = 0; it < 5000; it++) {
        chk_case("random views of data placed by hand, round %d", it);
        gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 16, .no_alloc = true});
        gml_tensor *ra = gml_new_tensor_1d(ctx, GML_F32, 96), *rb = gml_new_tensor_1d(ctx, GML_F32, 96);
        ra->data = bytes + 512;
        rb->data = bytes + chk_randint(&r, 0, 1024);
        gml_tensor *a = random_view(ctx, ra, &r, false), *b = random_view(ctx, rb, &r, false);
        element_starts(a, sa);
        element_starts(b, sb);
        const int64_t shift = (unsigned char *)rb->data - (unsigned char *)ra->data;
        bool pair = false;
        for (int64_t i = 0; i < gml_nelements(a); i++)
            for (int64_t j = 0; j < gml_nelements(b) && !pair; j++) {
                const int64_t d = sb[j] + shift - sa[i];
                pair = d > -4 && d < 4;
            }
        const gml_overlap got = gml_tensors_overlap(a, b, &w);
        CHECK(got == (pair ? GML_OVERLAP_YES : GML_OVERLAP_NO), "pair overlap %d, brute force %d", (int)got,
              (int)pair);
        if (got == GML_OVERLAP_YES) {
            const int64_t d = start_of(b, w.ib) + shift - start_of(a, w.ia);
            CHECK(in_range(a, w.ia) && in_range(b, w.ib) && d > -4 && d < 4, "witness: bytes shared");
        }
        gml_free(ctx);
    }

    /* Strides that interleave every way: the search may give up ("maybe"),
     * never says "yes" of tensors that are apart. */
    chk_case("tangled strides");
    {
        static const int64_t tn[4] = {200, 141, 11, 54}, tb[4] = {2362, 2072, 4366, 4038};
        static const int64_t un[4] = {14, 36, 38, 2}, ub[4] = {3666, 2624, 3608, 1866}, uoff = 16093;
        size_t tnb[4], unb[4];
        int64_t ext = 0;
        for (int k = 0; k < 4; k++) {
            tnb[k] = 4 * (size_t)tb[k];
            unb[k] = 4 * (size_t)ub[k];
            ext += (tn[k] - 1) * tb[k];
        }
        char *hit = calloc((size_t)ext + 1, 1);
        for (int64_t i0 = 0; i0 < tn[0]; i0++)
            for (int64_t i1 = 0; i1 < tn[1]; i1++)
                for (int64_t i2 = 0; i2 < tn[2]; i2++)
                    for (int64_t i3 = 0; i3 < tn[3]; i3++)
                        hit[i0 * tb[0] + i1 * tb[1] + i2 * tb[2] + i3 * tb[3]] = 1;
        bool pair = false;
        for (int64_t i0 = 0; i0 < un[0]; i0++)
            for (int64_t i1 = 0; i1 < un[1]; i1++)
                for (int64_t i2 = 0; i2 < un[2]; i2++)
                    for (int64_t i3 = 0; i3 < un[3]; i3++) {
                        const int64_t at = uoff + i0 * ub[0] + i1 * ub[1] + i2 * ub[2] + i3 * ub[3];
                        pair = pair || (at <= ext && hit[at]);
                    }
        free(hit);
        gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 16, .no_alloc = true});
        gml_tensor *root = gml_new_tensor_1d(ctx, GML_F32, 1 << 21);
        gml_tensor *t = gml_view(ctx, root, 4, tn, tnb, 0), *u = gml_view(ctx, root, 4, un, unb, 4 * uoff);
        const gml_overlap got = gml_tensors_overlap(t, u, NULL);
        CHECK(!pair && got != GML_OVERLAP_YES, "apart (brute force: %d), not 'yes' (got %d)", (int)pair, (int)got);
        printf("  tangled strides, apart: the search says %s\n", got == GML_OVERLAP_NO ? "no" : "maybe");
        gml_free(ctx);
    }

    /* Large tensors, no data: the search stays short. */
    chk_case("large views");
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 16, .no_alloc = true});
    gml_tensor *m = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 4096, 4096), "m");
    const size_t row = m->nb[2];
    gml_tensor *even = gml_view(ctx, m, 2, (int64_t[]){4096, 2048}, (size_t[]){row, 8}, 0);
    gml_tensor *odd = gml_view(ctx, m, 2, (int64_t[]){4096, 2048}, (size_t[]){row, 8}, 4);
    gml_tensor *top = gml_view(ctx, m, 2, (int64_t[]){4095, 4096}, (size_t[]){row, 4}, 0);
    gml_tensor *low = gml_view(ctx, m, 2, (int64_t[]){4095, 4096}, (size_t[]){row, 4}, row);
    gml_tensor *mt = gml_transpose(ctx, m, 0, 1);
    CHECK(gml_tensors_overlap(even, odd, NULL) == GML_OVERLAP_NO, "even and odd columns: apart");
    CHECK(gml_tensors_overlap(top, low, &w) == GML_OVERLAP_YES && w.ia[2] == 1 && w.ib[2] == 0 &&
              w.ia[3] == w.ib[3],
          "rows 0..4094 and 1..4095: row 1 of one is row 0 of the other");
    CHECK(gml_tensors_overlap(mt, m, NULL) == GML_OVERLAP_YES, "m and its transpose");
    CHECK(gml_self_overlap(mt, NULL) == GML_OVERLAP_NO && gml_self_overlap(even, NULL) == GML_OVERLAP_NO,
          "no self overlap");
    CHECK(gml_same_elements(m, gml_reshape(ctx, m, 2, (int64_t[]){4096, 4096})) &&
              !gml_same_elements(m, mt) && !gml_same_elements(even, odd),
          "same elements: the same storage, offset, shape and strides");

    /* Elements that share bytes without sharing a start: data placed by hand
     * 2 bytes apart. */
    chk_case("hand-placed data");
    static float buf[64];
    gml_tensor *x = gml_new_tensor_1d(ctx, GML_F32, 8), *y = gml_new_tensor_1d(ctx, GML_F32, 8);
    x->data = buf;
    y->data = (char *)buf + 30; /* y[0] (bytes 30..33) meets x[7] (28..31) */
    CHECK(gml_tensors_overlap(x, y, &w) == GML_OVERLAP_YES && w.ia[3] == 7 && w.ib[3] == 0,
          "x[7] and y[0] share bytes");
    y->data = (char *)buf + 32;
    CHECK(gml_tensors_overlap(x, y, NULL) == GML_OVERLAP_NO, "y starts past x's last byte");
    y->data = (char *)buf + 4;
    CHECK(gml_tensors_overlap(gml_view(ctx, x, 1, (int64_t[]){4}, (size_t[]){8}, 0), y, NULL) == GML_OVERLAP_YES,
          "by address, a view of x against y");
    y->data = NULL;
    CHECK(gml_tensors_overlap(x, y, NULL) == GML_OVERLAP_NO, "no data on one side: apart (placed apart)");
    gml_free(ctx);
}

/* ---- cpy ------------------------------------------------------------------ */

#define EXPECT_REFUSED(ctx, call, want)                                                            \
    do {                                                                                           \
        gml_tensor *r_ = (call);                                                                   \
        CHECK(r_ == NULL, "refused: %s", #call);                                                   \
        CHECK_CONTAINS(gml_last_error(ctx), want);                                                 \
        gml_clear_error(ctx);                                                                      \
    } while (0)

static void test_cpy_refused(void) {
    for (int no_alloc = 0; no_alloc < 2; no_alloc++) {
        chk_case("cpy refused, %s", no_alloc ? "no_alloc" : "allocating");
        gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = no_alloc});
        gml_tensor *x = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 64, 64), "x");
        EXPECT_REFUSED(ctx, gml_cpy(ctx, gml_transpose(ctx, x, 0, 1), x),
                       "cpy(x (transposed), x): the destination overlaps the source: x (transposed) [64,64] "
                       "and x [64,64] share storage (source [0,0] and destination [0,0] share memory; copy "
                       "the source first: cont)");
        gml_tensor *a = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 4, 8), "a");
        EXPECT_REFUSED(ctx, gml_cpy(ctx, a, gml_view(ctx, x, 2, (int64_t[]){4, 8}, (size_t[]){0, 4}, 0)),
                       "cpy(a, x (view)): the destination has elements that share memory (dim 0 has stride 0 "
                       "and size 4 in x (view) [4,8])");
        /* rows 4 floats apart, 8 long: row 1 starts inside row 0 */
        EXPECT_REFUSED(ctx, gml_cpy(ctx, a, gml_view(ctx, x, 2, (int64_t[]){4, 8}, (size_t[]){16, 4}, 0)),
                       "cpy(a, x (view)): the destination has elements that share memory (elements [0,4] and "
                       "[1,0] of x (view) [4,8], byte strides [16,4])");
        /* rows 1..63 from rows 0..62 */
        gml_tensor *up = gml_set_name(gml_view(ctx, x, 2, (int64_t[]){63, 64}, x->nb + 2, 0), "up");
        gml_tensor *down = gml_set_name(gml_view(ctx, x, 2, (int64_t[]){63, 64}, x->nb + 2, x->nb[2]), "down");
        EXPECT_REFUSED(ctx, gml_cpy(ctx, up, down),
                       "cpy(up, down): the destination overlaps the source: up [63,64] and down [63,64] share "
                       "storage (source [1,0] and destination [0,0] share memory; copy the source first: "
                       "cont)");
        EXPECT_REFUSED(ctx, gml_cpy(ctx, down, up), "cpy(down, up): the destination overlaps the source");
        /* through the result of an earlier cpy: still x's storage */
        gml_tensor *b = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 63, 64), "b");
        gml_tensor *w = gml_cpy(ctx, b, up);
        CHECK(w != NULL, "cpy into up: %s", gml_last_error(ctx));
        EXPECT_REFUSED(ctx, gml_cpy(ctx, w, down), "the destination overlaps the source");
        CHECK(gml_cpy(ctx, w, up) != NULL, "the result of a cpy into up, copied onto up: allowed (%s)",
              gml_last_error(ctx));
        gml_free(ctx);
    }

    chk_case("cpy refused: data placed by hand");
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 16, .no_alloc = true});
    static float buf[32];
    gml_tensor *p = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 2, 8), "p");
    gml_tensor *q = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 2, 8), "q");
    p->data = buf;
    q->data = buf + 8;
    EXPECT_REFUSED(ctx, gml_cpy(ctx, p, q),
                   "cpy(p, q): the destination overlaps the source: p [2,8] and q [2,8] share storage (source "
                   "[1,0] and destination [0,0] share memory");
    q->data = buf + 16;
    CHECK(gml_cpy(ctx, p, q) != NULL, "placed apart: allowed (%s)", gml_last_error(ctx));
    q->data = buf;
    CHECK(gml_cpy(ctx, p, q) != NULL, "placed at one address: the same elements, allowed (%s)",
          gml_last_error(ctx));
    q->data = NULL;
    CHECK(gml_cpy(ctx, p, q) != NULL, "q without data yet: placed apart (%s)", gml_last_error(ctx));
    gml_free(ctx);
}

/* Allowed: slices of one tensor that do not meet, and a tensor onto itself;
 * checked against a plain loop on every ISA the CPU has, at 1, 2, 3, 4 and
 * 7 threads. */
struct slices_case {
    gml_tensor *x;
    float *init, *want;
};

static void reset_slices(void *user) {
    struct slices_case *c = user;
    chk_write(c->x, c->init);
}

static void verify_slices(void *user) {
    struct slices_case *c = user;
    CHECK_EQUAL(c->x, c->want, "x after the copies");
}

static void run_every_isa(gml_graph *g, gml_tensor *const *outs, int n_outs, struct slices_case *c) {
    static const gml_isa isas[] = {GML_TEST_FAST_ISAS};
    for (size_t i = 0; i < sizeof isas / sizeof *isas; i++) {
        if (!gml_cpu_has(isas[i])) {
            printf("  (%s: not on this CPU, skipped)\n", gml_isa_name(isas[i]));
            continue;
        }
        CHECK_RUN(g, .outs = outs, .n_outs = n_outs, .before = reset_slices, .verify = verify_slices,
                  .user = c, .isa = isas[i]);
    }
}

static void test_cpy_disjoint_slices(void) {
    enum { H = 37, W = 42 }; /* W even, H odd: halves of unequal size not needed */
    chk_case("cpy between slices of one tensor that do not meet");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *x = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, H, W), "x");
    const size_t row = x->nb[2];
    struct slices_case c = {x, malloc(H * W * 4), malloc(H * W * 4)};
    for (int e = 0; e < H * W; e++) c.init[e] = (float)e;
    memcpy(c.want, c.init, H * W * 4);
    /* 1. even columns -> odd columns, rows 0..11 */
    gml_tensor *even = gml_set_name(gml_view(ctx, x, 2, (int64_t[]){12, W / 2}, (size_t[]){row, 8}, 0), "even");
    gml_tensor *odd = gml_set_name(gml_view(ctx, x, 2, (int64_t[]){12, W / 2}, (size_t[]){row, 8}, 4), "odd");
    gml_tensor *w1 = gml_cpy(ctx, even, odd);
    for (int i = 0; i < 12; i++)
        for (int j = 0; j < W / 2; j++) c.want[i * W + 2 * j + 1] = c.init[i * W + 2 * j];
    /* 2. rows 12..15 -> rows 16..19 (dense runs, the memcpy path) */
    gml_tensor *r12 = gml_view(ctx, x, 2, (int64_t[]){4, W}, x->nb + 2, 12 * row);
    gml_tensor *r16 = gml_view(ctx, x, 2, (int64_t[]){4, W}, x->nb + 2, 16 * row);
    gml_tensor *w2 = gml_cpy(ctx, r12, r16);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < W; j++) c.want[(16 + i) * W + j] = c.init[(12 + i) * W + j];
    /* 3. the transpose of block [20..29, 0..9] -> block [20..29, 10..19] (the
     * transposing path) */
    gml_tensor *b0 = gml_view(ctx, x, 2, (int64_t[]){10, 10}, x->nb + 2, 20 * row);
    gml_tensor *b1 = gml_view(ctx, x, 2, (int64_t[]){10, 10}, x->nb + 2, 20 * row + 40);
    gml_tensor *w3 = gml_cpy(ctx, gml_transpose(ctx, b0, 0, 1), b1);
    for (int i = 0; i < 10; i++)
        for (int j = 0; j < 10; j++) c.want[(20 + i) * W + 10 + j] = c.init[(20 + j) * W + i];
    /* 4. x's rows 30..36 onto themselves: nothing moves */
    gml_tensor *tail = gml_view(ctx, x, 2, (int64_t[]){7, W}, x->nb + 2, 30 * row);
    gml_tensor *tail2 = gml_view(ctx, x, 2, (int64_t[]){7, W}, x->nb + 2, 30 * row);
    gml_tensor *w4 = gml_cpy(ctx, tail, tail2);
    gml_tensor *outs[] = {w1, w2, w3, w4};
    if (CHECK(w1 && w2 && w3 && w4, "build: %s", gml_last_error(ctx))) {
        gml_graph *g = gml_build_graph(ctx, outs, 4);
        run_every_isa(g, outs, 4, &c);
        gml_graph_free(g);
    }
    free(c.init);
    free(c.want);
    gml_free(ctx);
}

/* The way the header gives to transpose in place: through a copy. */
static void test_cpy_transpose_through_cont(void) {
    enum { N = 19 };
    chk_case("cpy(cont(transpose(x)), x)");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *x = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, N, N), "x");
    gml_tensor *w = gml_cpy(ctx, gml_cont(ctx, gml_transpose(ctx, x, 0, 1)), x);
    struct slices_case c = {x, malloc(N * N * 4), malloc(N * N * 4)};
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            c.init[i * N + j] = (float)(i * N + j);
            c.want[j * N + i] = (float)(i * N + j);
        }
    if (CHECK(w, "build: %s", gml_last_error(ctx))) {
        gml_graph *g = gml_build_graph(ctx, &w, 1);
        run_every_isa(g, &w, 1, &c);
        gml_graph_free(g);
    }
    free(c.init);
    free(c.want);
    gml_free(ctx);
}

/* ---- set_rows -------------------------------------------------------------- */

static void test_set_rows_refused(void) {
    chk_case("set_rows refused");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *cache = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, 2, 8, 4), "cache");
    gml_tensor *k = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, 2, 1, 4), "k");
    gml_tensor *pos = gml_set_name(gml_new_tensor_1d(ctx, GML_I32, 1), "pos");
    gml_tensor *zero = gml_view(ctx, cache, 3, (int64_t[]){2, 4, 4}, (size_t[]){128, 0, 4}, 0);
    EXPECT_REFUSED(ctx, gml_set_rows(ctx, zero, k, pos),
                   "set_rows(cache (view), k, pos): the destination has elements that share memory (dim 1 has "
                   "stride 0 and size 4 in cache (view) [2,4,4])");
    /* rows 2 floats apart, 4 long */
    gml_tensor *close = gml_view(ctx, cache, 3, (int64_t[]){2, 7, 4}, (size_t[]){128, 8, 4}, 0);
    EXPECT_REFUSED(ctx, gml_set_rows(ctx, close, k, pos),
                   "set_rows(cache (view), k, pos): the destination has elements that share memory (elements "
                   "[0,0,2] and [0,1,0] of cache (view) [2,7,4], byte strides [128,8,4])");
    /* the new row is a row of the cache itself */
    gml_tensor *row3 = gml_set_name(gml_view(ctx, cache, 3, (int64_t[]){2, 1, 4}, cache->nb + 1, 3 * 16), "row3");
    EXPECT_REFUSED(ctx, gml_set_rows(ctx, cache, row3, pos),
                   "set_rows(cache, row3, pos): the destination overlaps the source: row3 [2,1,4] and cache "
                   "[2,8,4] share storage (source [0,0,0] and destination [0,3,0] share memory; copy the "
                   "source first: cont)");
    /* i32 indices read from the i32 table written */
    gml_tensor *tab = gml_set_name(gml_new_tensor_2d(ctx, GML_I32, 4, 2), "tab");
    gml_tensor *isrc = gml_set_name(gml_new_tensor_2d(ctx, GML_I32, 2, 2), "isrc");
    gml_tensor *col = gml_set_name(gml_view(ctx, tab, 1, (int64_t[]){2}, (size_t[]){8}, 0), "col");
    EXPECT_REFUSED(ctx, gml_set_rows(ctx, tab, isrc, col),
                   "set_rows(tab, isrc, col): the destination overlaps the indices: col [2] and tab [4,2] "
                   "share storage (indices [0] and destination [0,0] share memory; copy the indices first: "
                   "cont)");
    /* rows of one half written from rows of the other: allowed */
    gml_tensor *lo = gml_view(ctx, cache, 3, (int64_t[]){2, 4, 4}, cache->nb + 1, 0);
    gml_tensor *hi = gml_view(ctx, cache, 3, (int64_t[]){2, 1, 4}, cache->nb + 1, 6 * 16);
    CHECK(gml_set_rows(ctx, lo, hi, pos) != NULL, "halves apart: allowed (%s)", gml_last_error(ctx));
    gml_free(ctx);
}

/* Repeated indices: the last row given for an index wins, on every ISA and
 * thread count; rows of the cache's other half are the source (one storage,
 * apart). */
struct rows_case {
    gml_tensor *dst, *out;
    float *want;
};

static gml_tensor *g_rows_x;
static float *g_rows_init;

static void reset_rows(void *user) {
    (void)user;
    chk_write(g_rows_x, g_rows_init);
}

static void verify_rows(void *user) {
    struct rows_case *c = user;
    CHECK_EQUAL(c->dst, c->want, "dst after set_rows with repeated indices (the last row wins)");
    CHECK_EQUAL(c->out, c->want, "set_rows' result");
}

static void test_set_rows_repeated(void) {
    enum { A = 3, B = 5, N = 10, D = 6, n = 7 };
    static const int32_t shared[n] = {2, 7, 2, 2, 9, 7, 0};
    static const int32_t per[A][n] = {{1, 1, 1, 1, 1, 1, 1}, {9, 0, 9, 4, 0, 9, 3}, {5, 6, 5, 6, 5, 6, 8}};
    static const gml_isa isas[] = {GML_TEST_FAST_ISAS};
    for (int per_slice = 0; per_slice < 2; per_slice++) {
        chk_case("set_rows, repeated indices, idx %s", per_slice ? "[A, n]" : "[n]");
        chk_rng r = chk_seed(7 + (uint64_t)per_slice);
        gml_context *ctx = chk_ctx(1 << 20);
        /* x [A, B, N + n, D]: rows 0..N-1 the destination, N.. the source */
        gml_tensor *x = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, A, B, N + n, D), "x");
        gml_tensor *dst = gml_set_name(gml_view(ctx, x, 4, (int64_t[]){A, B, N, D}, x->nb, 0), "dst");
        gml_tensor *src = gml_set_name(gml_view(ctx, x, 4, (int64_t[]){A, B, n, D}, x->nb, N * x->nb[2]), "src");
        gml_tensor *idx = per_slice ? gml_new_tensor_2d(ctx, GML_I32, A, n) : gml_new_tensor_1d(ctx, GML_I32, n);
        memcpy(idx->data, per_slice ? &per[0][0] : shared, (size_t)gml_nelements(idx) * 4);
        gml_tensor *out = gml_set_rows(ctx, dst, src, idx);
        if (!CHECK(out, "build: %s", gml_last_error(ctx))) {
            gml_free(ctx);
            continue;
        }
        const int64_t total = gml_nelements(x);
        g_rows_x = x;
        g_rows_init = malloc((size_t)total * 4);
        for (int64_t e = 0; e < total; e++) g_rows_init[e] = chk_uniform(&r, -1, 1);
        struct rows_case c = {dst, out, malloc((size_t)(A * B * N * D) * 4)};
        for (int a = 0; a < A; a++)
            for (int b = 0; b < B; b++) {
                const float *xs = g_rows_init + ((int64_t)(a * B + b) * (N + n)) * D;
                float *ws = c.want + (int64_t)(a * B + b) * N * D;
                memcpy(ws, xs, N * D * 4);
                for (int i = 0; i < n; i++) { /* in order: a later row overwrites */
                    const int32_t to = per_slice ? per[a][i] : shared[i];
                    memcpy(ws + to * D, xs + (N + i) * D, D * 4);
                }
            }
        gml_graph *g = gml_build_graph(ctx, &out, 1);
        for (size_t i = 0; i < sizeof isas / sizeof *isas; i++)
            if (gml_cpu_has(isas[i]))
                CHECK_RUN(g, .outs = &out, .n_outs = 1, .before = reset_rows, .verify = verify_rows, .user = &c,
                          .isa = isas[i]);
        gml_graph_free(g);
        free(g_rows_init);
        free(c.want);
        gml_free(ctx);
    }
}

/* ---- graph files --------------------------------------------------------- */

static void test_graph_file(void) {
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"input x f32 [64, 64]\ny = cpy(transpose(x, 0, 1), x)\noutput y\n",
         "bad.graph:2:5: cpy(x (transposed), x): the destination overlaps the source: x (transposed) [64,64] "
         "and x [64,64] share storage"},
        {"input c f32 [2, 8, 4]\ninput k f32 [2, 1, 4]\ninput pos i32 [1]\n"
         "y = set_rows(view(c, [2, 4, 4], [32, 0, 1]), k, pos)\noutput y\n",
         "bad.graph:4:5: set_rows(c (view), k, pos): the destination has elements that share memory (dim 1 "
         "has stride 0 and size 4 in c (view) [2,4,4])"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        chk_case("graph file %zu", i);
        gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 16, .no_alloc = true});
        gml_tensor *out[1];
        char err[512] = "";
        CHECK(gml_parse_graph(ctx, cases[i].text, strlen(cases[i].text), "bad.graph", NULL, out, 1, err,
                              sizeof err) == -1,
              "parse fails");
        CHECK_CONTAINS(err, cases[i].want);
        gml_free(ctx);
    }
}

int main(void) {
    test_helpers_brute_force();
    test_cpy_refused();
    test_cpy_disjoint_slices();
    test_cpy_transpose_through_cont();
    test_set_rows_refused();
    test_set_rows_repeated();
    test_graph_file();
    return chk_summary();
}
