/* gml_add, gml_mul, gml_sub, gml_div, gml_scale: PyTorch broadcasting in every direction (each
 * operand of 1 to 4 dims, each dim 1 or full), inputs in every layout. One
 * float operation per element, so results must equal the loop's exactly. */
#include "check.h"

/* The result shape: [3, 5, 2, 17] with leading dims dropped to n dims. */
static const int64_t FULL[4] = {3, 5, 2, 17};

/* An operand of n dims (right-aligned against FULL) where bit d of ones makes
 * dim d size 1. */
static void operand_shape(int n, unsigned ones, int64_t *ne) {
    for (int d = 0; d < n; d++) ne[d] = ones >> d & 1 ? 1 : FULL[4 - n + d];
}

#define N_EW 7
static const char *const EW_NAMES[N_EW] = {"add(a, b)", "mul(a, b)", "add(b, a)", "sub(a, b)",
                                           "sub(b, a)", "div(a, b)", "div(b, a)"};

struct ew_case {
    gml_tensor *outs[N_EW];
    float *want[N_EW];
};

static void verify_ew(void *user) {
    struct ew_case *c = user;
    for (int o = 0; o < N_EW; o++) CHECK_EQUAL(c->outs[o], c->want[o], "%s", EW_NAMES[o]);
}

/* Element of dense t (right-aligned 4-D shape tne) that broadcasts to out[i]. */
static float bcast(const float *t, const int64_t *tne, const int64_t *i) {
    int64_t f = 0;
    for (int d = 0; d < 4; d++) f = f * tne[d] + i[d] % tne[d];
    return t[f];
}

static void test_broadcast(void) {
    uint64_t seed = 1;
    int k = 0;
    for (int na = 1; na <= 4; na++)
        for (unsigned oa = 0; oa < 1u << na; oa++)
            for (int nb = 1; nb <= 4; nb++)
                for (unsigned ob = 0; ob < 1u << nb; ob++, k++) {
                    int64_t ash[4], bsh[4];
                    operand_shape(na, oa, ash);
                    operand_shape(nb, ob, bsh);
                    chk_rng r = chk_seed(seed++);
                    gml_context *ctx = chk_ctx(1 << 20);
                    chk_layout la = (chk_layout)(k % CHK_N_LAYOUTS), lb = (chk_layout)(k / 7 % CHK_N_LAYOUTS);
                    gml_tensor *a = chk_new_input(ctx, GML_F32, na, ash, la, "a", &r, -2, 2);
                    gml_tensor *b = chk_new_input(ctx, GML_F32, nb, bsh, lb, "b", &r, -2, 2);
                    char sa[64], sb[64];
                    chk_case("a %s %s, b %s %s", chk_layout_name(la), chk_shape(a, sa, sizeof sa),
                             chk_layout_name(lb), chk_shape(b, sb, sizeof sb));
                    struct ew_case c = {{gml_add(ctx, a, b), gml_mul(ctx, a, b), gml_add(ctx, b, a),
                                         gml_sub(ctx, a, b), gml_sub(ctx, b, a), gml_div(ctx, a, b),
                                         gml_div(ctx, b, a)},
                                        {0}};
                    bool built = true;
                    for (int o = 0; o < N_EW; o++) built = built && c.outs[o];
                    if (!CHECK(built, "build: %s", gml_last_error(ctx))) {
                        gml_free(ctx);
                        continue;
                    }
                    /* PyTorch's result: max(n_a, n_b) dims, each the larger size */
                    int n = na > nb ? na : nb;
                    for (int o = 0; o < N_EW; o++) {
                        const gml_tensor *y = c.outs[o];
                        CHECK(y->n_dims == n, "result has %d dims, want %d", y->n_dims, n);
                        for (int d = 0; d < 4; d++)
                            CHECK(y->ne[d] == (a->ne[d] > b->ne[d] ? a->ne[d] : b->ne[d]), "result dim %d",
                                  d);
                    }
                    float *ad = chk_dense(a), *bd = chk_dense(b);
                    const gml_tensor *y = c.outs[0];
                    for (int o = 0; o < N_EW; o++) c.want[o] = malloc((size_t)chk_numel(y) * sizeof(float));
                    for (int64_t e = 0; e < chk_numel(y); e++) {
                        int64_t i[4];
                        chk_index(y, e, i);
                        float x = bcast(ad, a->ne, i), z = bcast(bd, b->ne, i);
                        c.want[0][e] = x + z;
                        c.want[1][e] = x * z;
                        c.want[2][e] = z + x;
                        c.want[3][e] = x - z;
                        c.want[4][e] = z - x;
                        c.want[5][e] = x / z;
                        c.want[6][e] = z / x;
                    }
                    gml_graph *g = gml_build_graph(ctx, c.outs, N_EW);
                    CHECK_RUN(g, .outs = c.outs, .n_outs = N_EW, .verify = verify_ew, .user = &c);
                    gml_graph_free(g);
                    for (int o = 0; o < N_EW; o++) free(c.want[o]);
                    free(ad);
                    free(bd);
                    gml_free(ctx);
                }
}

/* The same tensor on both sides, and a chain where one result feeds both
 * operands of the next op. */
static void test_same_operand(void) {
    chk_case("add(x, x), mul(t, t)");
    chk_rng r = chk_seed(99);
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *x = chk_new_input(ctx, GML_F32, 2, (int64_t[]){7, 33}, CHK_REVERSED, "x", &r, -3, 3);
    gml_tensor *t = gml_add(ctx, x, x);
    gml_tensor *y = gml_mul(ctx, t, t);
    float *xd = chk_dense(x), want[231];
    for (int e = 0; e < 231; e++) {
        float s = xd[e] + xd[e];
        want[e] = s * s;
    }
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    CHECK_RUN(g, .outs = &y, .n_outs = 1);
    CHECK_EQUAL(y, want, "mul(t, t) with t = add(x, x)");
    gml_graph_free(g);
    free(xd);
    gml_free(ctx);
}

struct scale_case {
    gml_tensor *y;
    float *want;
};

static void verify_scale(void *user) {
    struct scale_case *c = user;
    CHECK_EQUAL(c->y, c->want, "scale");
}

static void test_scale(void) {
    static const float scales[] = {0.5f, -3.7f, 0.0f, 1e-3f, 1.0f, 0.17677669f};
    static const struct {
        int n;
        int64_t ne[4];
    } shapes[] = {{1, {1}}, {1, {65}}, {2, {3, 17}}, {3, {2, 1, 33}}, {4, {2, 3, 5, 7}}, {4, {1, 1, 17, 1}}};
    uint64_t seed = 200;
    int k = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int l = 0; l < CHK_N_LAYOUTS; l++, k++) {
            float sc = scales[k % 6];
            chk_rng r = chk_seed(seed++);
            gml_context *ctx = chk_ctx(1 << 20);
            gml_tensor *x =
                chk_new_input(ctx, GML_F32, shapes[s].n, shapes[s].ne, (chk_layout)l, "x", &r, -5, 5);
            char sx[64];
            chk_case("scale %s %s by %g", chk_layout_name((chk_layout)l), chk_shape(x, sx, sizeof sx),
                     (double)sc);
            struct scale_case c = {gml_scale(ctx, x, sc), NULL};
            if (!CHECK(c.y, "scale: %s", gml_last_error(ctx))) {
                gml_free(ctx);
                continue;
            }
            CHECK(gml_same_shape(c.y, x), "scale keeps the shape");
            c.want = chk_dense(x);
            for (int64_t e = 0; e < chk_numel(x); e++) c.want[e] *= sc;
            gml_graph *g = gml_build_graph(ctx, &c.y, 1);
            CHECK_RUN(g, .outs = &c.y, .n_outs = 1, .verify = verify_scale, .user = &c);
            gml_graph_free(g);
            free(c.want);
            gml_free(ctx);
        }
}

int main(void) {
    test_broadcast();
    test_same_operand();
    test_scale();
    return chk_summary();
}
