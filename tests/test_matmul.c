/* gml_matmul (torch.matmul) and gml_linear (nn.Linear) against a naive
 * double-precision loop, over M, N, K in {1, 3, 16, 17, 64, 65}, 2-D to 4-D
 * with batch broadcasting both ways, inputs in every layout (sliced with
 * offsets, permuted, transposed), and k.transpose(-2, -1) as a view.
 *
 * Tolerance: the exact sum is computed in double. A float kernel summing K
 * products in any order is off by at most about K u sum_k |a_k b_k| (u the
 * unit roundoff, 2^-24), plus the final rounding u |want|. We allow
 * FLT_EPSILON (2u) times (|want| + K sum_k |a_k b_k|) per element. A wrong,
 * missing or doubled term of any size near the typical |a_k b_k| exceeds it. */
#include "check.h"

#include <float.h>

static const int64_t SIZES[] = {1, 3, 16, 17, 64, 65};
#define N_SIZES 6

/* Dense row-major index of [i0, i1, i2, i3] in a tensor of right-aligned shape ne. */
static int64_t at4(const int64_t *ne, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return ((i0 * ne[1] + i1) * ne[2] + i2) * ne[3] + i3;
}

struct mm_case {
    gml_tensor *y;
    double *want, *bound;
};

static void verify_mm(void *user) {
    struct mm_case *c = user;
    CHECK_WITHIN(c->y, c->want, c->bound, "matmul vs the double-precision loop");
}

/* want = a @ b (+ bias along the last dim), computed from a's and b's elements
 * as torch.matmul broadcasts them; bound as explained at the top. With
 * b_t, b holds [.., N, K] (an nn.Linear weight, or keys) and the product is
 * a @ b^T, read from b's own elements. */
static void reference(const gml_tensor *a, const gml_tensor *b, bool b_t, const gml_tensor *bias,
                      const gml_tensor *y, double *want, double *bound) {
    float *ad = chk_dense(a), *bd = chk_dense(b), *biasd = bias ? chk_dense(bias) : NULL;
    const int64_t M = a->ne[2], K = a->ne[3], N = b_t ? b->ne[2] : b->ne[3];
    for (int64_t i0 = 0; i0 < y->ne[0]; i0++)
        for (int64_t i1 = 0; i1 < y->ne[1]; i1++)
            for (int64_t m = 0; m < M; m++)
                for (int64_t n = 0; n < N; n++) {
                    double acc = biasd ? biasd[n] : 0, mag = biasd ? fabs(biasd[n]) : 0;
                    for (int64_t k = 0; k < K; k++) {
                        const int64_t b0 = i0 % b->ne[0], b1 = i1 % b->ne[1];
                        double bv = b_t ? bd[at4(b->ne, b0, b1, n, k)] : bd[at4(b->ne, b0, b1, k, n)];
                        double p = (double)ad[at4(a->ne, i0 % a->ne[0], i1 % a->ne[1], m, k)] * bv;
                        acc += p;
                        mag += fabs(p);
                    }
                    int64_t e = at4(y->ne, i0, i1, m, n);
                    want[e] = acc;
                    bound[e] = FLT_EPSILON * (fabs(acc) + (double)(K + 1) * mag) + 1e-37;
                }
    free(ad);
    free(bd);
    free(biasd);
}

/* Builds a [a_shape] @ b [b_shape] with the given layouts, checks the result
 * shape, runs it at every thread count and kernel set. */
static void run_case(int na, const int64_t *ash, chk_layout la, int nb, const int64_t *bsh,
                     chk_layout lb, uint64_t seed) {
    chk_rng r = chk_seed(seed);
    gml_context *ctx = chk_ctx(4 << 20);
    gml_tensor *a = chk_new_input(ctx, GML_F32, na, ash, la, "a", &r, -1, 1);
    gml_tensor *b = chk_new_input(ctx, GML_F32, nb, bsh, lb, "b", &r, -1, 1);
    char sa[64], sb[64];
    chk_case("matmul %s %s @ %s %s", chk_layout_name(la), chk_shape(a, sa, sizeof sa),
             chk_layout_name(lb), chk_shape(b, sb, sizeof sb));
    gml_tensor *y = gml_matmul(ctx, a, b);
    if (!CHECK(y, "matmul: %s", gml_last_error(ctx))) {
        gml_free(ctx);
        return;
    }
    /* torch.matmul's shape: broadcast batch dims, then [M, N] */
    int n = na > nb ? na : nb;
    CHECK(y->n_dims == n && gml_dim(y, -2) == ash[na - 2] && gml_dim(y, -1) == bsh[nb - 1],
          "result shape %s", chk_shape(y, sa, sizeof sa));
    for (int d = 0; d < 2; d++) {
        int64_t want = a->ne[d] > b->ne[d] ? a->ne[d] : b->ne[d];
        CHECK(y->ne[d] == want, "batch dim %d is %lld, want %lld", d, (long long)y->ne[d], (long long)want);
    }
    struct mm_case c = {y, malloc((size_t)chk_numel(y) * sizeof(double)),
                        malloc((size_t)chk_numel(y) * sizeof(double))};
    reference(a, b, false, NULL, y, c.want, c.bound);
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    CHECK(gml_graph_flops(g) == 2.0 * (double)chk_numel(y) * (double)ash[na - 1],
          "flops 2 M N K times batches: %g", gml_graph_flops(g));
    CHECK_RUN(g, .outs = &y, .n_outs = 1, .verify = verify_mm, .user = &c);
    gml_graph_free(g);
    free(c.want);
    free(c.bound);
    gml_free(ctx);
}

/* 2-D: every M, N, K, with the layouts of a and b cycling through all pairs. */
static void test_2d_grid(void) {
    int k = 0;
    for (int im = 0; im < N_SIZES; im++)
        for (int in = 0; in < N_SIZES; in++)
            for (int ik = 0; ik < N_SIZES; ik++, k++) {
                int64_t M = SIZES[im], N = SIZES[in], K = SIZES[ik];
                run_case(2, (int64_t[]){M, K}, (chk_layout)(k % CHK_N_LAYOUTS), 2, (int64_t[]){K, N},
                         (chk_layout)(k / CHK_N_LAYOUTS % CHK_N_LAYOUTS), 100 + (uint64_t)k);
            }
}

/* Batched and broadcast: a's and b's batch dims each 1 or equal, and 2-D/3-D
 * operands against 4-D ones, in both directions. */
static void test_batched(void) {
    static const struct {
        int na;
        int64_t abatch[2];
        int nb;
        int64_t bbatch[2];
    } batch[] = {
        {4, {2, 3}, 4, {2, 3}}, /* equal */
        {4, {2, 3}, 2, {0, 0}}, /* 4-D @ 2-D */
        {2, {0, 0}, 4, {2, 3}}, /* 2-D @ 4-D */
        {4, {1, 3}, 4, {2, 1}}, /* each broadcasts one dim */
        {4, {2, 1}, 4, {2, 3}},
        {4, {2, 3}, 4, {1, 1}},
        {3, {0, 3}, 4, {2, 3}}, /* 3-D @ 4-D */
        {4, {2, 3}, 3, {0, 1}}, /* 4-D @ 3-D of batch 1 */
        {3, {0, 4}, 3, {0, 4}}, /* 3-D both */
        {3, {0, 1}, 3, {0, 5}}, /* batch 1 vs batch n */
        {3, {0, 5}, 3, {0, 1}}, /* and the other way */
        {3, {0, 5}, 2, {0, 0}},
    };
    static const int64_t mnk[][3] = {{1, 1, 1}, {3, 17, 7}, {17, 3, 65}, {16, 16, 16}, {1, 65, 33}};
    uint64_t seed = 1000;
    int k = 0;
    for (size_t s = 0; s < sizeof batch / sizeof *batch; s++)
        for (size_t t = 0; t < sizeof mnk / sizeof *mnk; t++, k++) {
            int64_t M = mnk[t][0], N = mnk[t][1], K = mnk[t][2];
            int64_t ash[4], bsh[4];
            int na = batch[s].na, nb = batch[s].nb;
            for (int d = 0; d < na - 2; d++) ash[d] = batch[s].abatch[2 - (na - 2) + d];
            for (int d = 0; d < nb - 2; d++) bsh[d] = batch[s].bbatch[2 - (nb - 2) + d];
            ash[na - 2] = M, ash[na - 1] = K;
            bsh[nb - 2] = K, bsh[nb - 1] = N;
            run_case(na, ash, (chk_layout)(k % CHK_N_LAYOUTS), nb, bsh,
                     (chk_layout)((k / 2 + 3) % CHK_N_LAYOUTS), seed++);
        }
}

/* Attention scores: q [B, H, Tq, d] @ k.transpose(-2, -1) where k is a window
 * of a KV cache [B, H, Tmax, d] starting at a position (a sliced view). */
static void test_scores_from_cache(void) {
    static const int64_t cases[][6] = {
        /* B, H, Tq, Tk, d, start */
        {2, 3, 5, 7, 16, 2}, {1, 2, 1, 17, 64, 0}, {2, 1, 17, 17, 3, 3}, {1, 1, 3, 65, 17, 1},
    };
    for (size_t s = 0; s < sizeof cases / sizeof *cases; s++) {
        const int64_t B = cases[s][0], H = cases[s][1], tq = cases[s][2], tk = cases[s][3],
                      d = cases[s][4], start = cases[s][5], tmax = tk + start + 2;
        chk_case("q @ k_cache window transposed, Tq %lld Tk %lld d %lld", (long long)tq,
                 (long long)tk, (long long)d);
        chk_rng r = chk_seed(2000 + s);
        gml_context *ctx = chk_ctx(8 << 20);
        gml_tensor *q =
            chk_new_input(ctx, GML_F32, 4, (int64_t[]){B, H, tq, d}, CHK_CONTIGUOUS, "q", &r, -1, 1);
        gml_tensor *cache = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, B, H, tmax, d), "k_cache");
        chk_poison_bytes(cache->data, gml_nbytes(cache));
        gml_tensor *k = gml_view(ctx, cache, 4, (int64_t[]){B, H, tk, d}, cache->nb, start * cache->nb[2]);
        chk_fill_uniform(k, &r, -1, 1);
        gml_tensor *kt = gml_transpose(ctx, k, -2, -1);
        gml_tensor *y = gml_matmul(ctx, q, kt); /* [B, H, Tq, Tk] */
        if (!CHECK(y, "build: %s", gml_last_error(ctx))) continue;
        CHECK(gml_dim(y, 2) == tq && gml_dim(y, 3) == tk, "scores shape");
        struct mm_case c = {y, malloc((size_t)chk_numel(y) * sizeof(double)),
                            malloc((size_t)chk_numel(y) * sizeof(double))};
        reference(q, k, true, NULL, y, c.want, c.bound);
        gml_graph *g = gml_build_graph(ctx, &y, 1);
        CHECK_RUN(g, .outs = &y, .n_outs = 1, .verify = verify_mm, .user = &c);
        gml_graph_free(g);
        free(c.want);
        free(c.bound);
        gml_free(ctx);
    }
}

/* nn.Linear: x [.., in] @ w[out, in]^T + bias, with and without bias, x of 2
 * to 4 dims in every layout, w stored as is or transposed. */
static void test_linear(void) {
    static const int64_t io[][2] = {{1, 1}, {3, 17}, {16, 3}, {17, 64}, {65, 16}, {64, 65}};
    static const int64_t lead[][3] = {{0, 0, 0}, {1, 0, 0}, {5, 0, 0}, {2, 7, 0}, {2, 3, 3}};
    static const int nlead[] = {0, 1, 1, 2, 3}; /* 0: a 1-D input [in], as nn.Linear takes */
    uint64_t seed = 3000;
    int k = 0;
    for (size_t s = 0; s < sizeof io / sizeof *io; s++)
        for (size_t t = 0; t < sizeof nlead / sizeof *nlead; t++)
            for (int with_bias = 0; with_bias < 2; with_bias++, k++) {
                const int64_t in = io[s][0], out = io[s][1];
                int64_t xsh[4];
                int nx = nlead[t] + 1;
                for (int d = 0; d < nlead[t]; d++) xsh[d] = lead[t][d];
                xsh[nx - 1] = in;
                chk_rng r = chk_seed(seed++);
                gml_context *ctx = chk_ctx(4 << 20);
                chk_layout lx = (chk_layout)(k % CHK_N_LAYOUTS),
                           lw = k % 3 == 0 ? CHK_TRANSPOSED : CHK_CONTIGUOUS;
                gml_tensor *x = chk_new_input(ctx, GML_F32, nx, xsh, lx, "x", &r, -1, 1);
                gml_tensor *w = chk_new_input(ctx, GML_F32, 2, (int64_t[]){out, in}, lw, "w", &r, -1, 1);
                gml_tensor *bias = with_bias ? chk_new_input(ctx, GML_F32, 1, (int64_t[]){out},
                                                             k % 4 == 1 ? CHK_SLICED : CHK_CONTIGUOUS,
                                                             "bias", &r, -1, 1)
                                             : NULL;
                char sx[64], sw[64];
                chk_case("linear %s x %s, w %s %s, %s", chk_layout_name(lx), chk_shape(x, sx, sizeof sx),
                         chk_layout_name(lw), chk_shape(w, sw, sizeof sw), with_bias ? "bias" : "no bias");
                gml_tensor *y = gml_linear(ctx, x, w, bias);
                if (!CHECK(y, "linear: %s", gml_last_error(ctx))) {
                    gml_free(ctx);
                    continue;
                }
                CHECK(y->n_dims == nx && gml_dim(y, -1) == out, "result shape %s",
                      chk_shape(y, sx, sizeof sx));
                for (int d = 0; d < nx - 1; d++) CHECK(gml_dim(y, d) == xsh[d], "leading dim %d kept", d);
                struct mm_case c = {y, malloc((size_t)chk_numel(y) * sizeof(double)),
                                    malloc((size_t)chk_numel(y) * sizeof(double))};
                reference(x, w, true, bias, y, c.want, c.bound);
                gml_graph *g = gml_build_graph(ctx, &y, 1);
                CHECK_RUN(g, .outs = &y, .n_outs = 1, .verify = verify_mm, .user = &c);
                gml_graph_free(g);
                free(c.want);
                free(c.bound);
                gml_free(ctx);
            }
}

/* Values that make cancellation hard: exact integers whose products and sums
 * are exact in float, so every kernel must give the exact result. */
static void test_exact_integers(void) {
    chk_case("matmul of small integers is exact");
    chk_rng r = chk_seed(4000);
    gml_context *ctx = chk_ctx(4 << 20);
    gml_tensor *a = chk_new_input(ctx, GML_F32, 3, (int64_t[]){3, 17, 65}, CHK_CONTIGUOUS, "a", &r, 0, 0);
    gml_tensor *b = chk_new_input(ctx, GML_F32, 2, (int64_t[]){65, 33}, CHK_SLICED, "b", &r, 0, 0);
    for (int64_t e = 0; e < chk_numel(a); e++) *(float *)chk_at(a, e) = (float)chk_randint(&r, -8, 8);
    for (int64_t e = 0; e < chk_numel(b); e++) *(float *)chk_at(b, e) = (float)chk_randint(&r, -8, 8);
    gml_tensor *y = gml_matmul(ctx, a, b);
    struct mm_case c = {y, malloc((size_t)chk_numel(y) * sizeof(double)),
                        calloc((size_t)chk_numel(y), sizeof(double))};
    double *unused = malloc((size_t)chk_numel(y) * sizeof(double));
    reference(a, b, false, NULL, y, c.want, unused);
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    CHECK_RUN(g, .outs = &y, .n_outs = 1, .verify = verify_mm, .user = &c); /* bound 0: exact */
    gml_graph_free(g);
    free(c.want);
    free(c.bound);
    free(unused);
    gml_free(ctx);
}

int main(void) {
    test_2d_grid();
    test_batched();
    test_scores_from_cache();
    test_linear();
    test_exact_integers();
    return chk_summary();
}
