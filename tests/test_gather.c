/* Index ops, all exact: gml_repeat_interleave (along every dim, negative dims,
 * repeats 1..3, f32 and i32), gml_get_rows (indices of 1 to 3 dims, tables
 * that are permuted or sliced views), gml_valid_len_mask (lens [B] and
 * [B, Tq], lengths 0 and Tk), gml_relpos_index (P = 0, 1, 3, Tq != Tk) and
 * gml_arange (negative and i32-edge starts; sizes and values out of range). */
#include "check.h"

struct exact_case {
    gml_tensor *y;
    void *want;
};

static void verify_exact(void *user) {
    struct exact_case *c = user;
    CHECK_EQUAL(c->y, c->want, "result vs the loop");
}

/* Runs y at every thread count and kernel set, checking it equals want. */
static void run_exact(gml_context *ctx, gml_tensor *y, void *want) {
    struct exact_case c = {y, want};
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    CHECK_RUN(g, .outs = &y, .n_outs = 1, .verify = verify_exact, .user = &c);
    gml_graph_free(g);
}

/* ---- repeat_interleave ---------------------------------------------------- */

static void test_repeat_interleave(void) {
    static const int64_t FULL[4] = {2, 3, 1, 5};
    uint64_t seed = 1;
    int k = 0;
    for (int n = 1; n <= 4; n++)
        for (int dim = -n; dim < n; dim++)
            for (int reps = 1; reps <= 3; reps++, k++) {
                const int64_t *ne = FULL + 4 - n;
                gml_type type = k % 2 ? GML_I32 : GML_F32;
                chk_layout l = (chk_layout)(k % CHK_N_LAYOUTS);
                chk_rng r = chk_seed(seed++);
                gml_context *ctx = chk_ctx(1 << 20);
                gml_tensor *x = chk_new_input(ctx, type, n, ne, l, "x", &r, -1000, 1000);
                char sx[64];
                chk_case("repeat_interleave(%s %s %s, %d, dim %d)", chk_layout_name(l), gml_type_name(type),
                         chk_shape(x, sx, sizeof sx), reps, dim);
                gml_tensor *y = gml_repeat_interleave(ctx, x, reps, dim);
                if (!CHECK(y, "build: %s", gml_last_error(ctx))) {
                    gml_free(ctx);
                    continue;
                }
                const int ax = dim < 0 ? dim + n : dim; /* PyTorch dim */
                int64_t yne[4];
                for (int d = 0; d < n; d++) yne[d] = ne[d] * (d == ax ? reps : 1);
                CHECK(y->n_dims == n && y->type == type, "result type and dims");
                for (int d = 0; d < n; d++) CHECK(gml_dim(y, d) == yne[d], "dim %d", d);
                /* out[.., j, ..] = x[.., j / reps, ..] */
                int32_t *xd = chk_dense(x), *want = malloc((size_t)chk_numel(y) * 4);
                for (int64_t e = 0; e < chk_numel(y); e++) {
                    int64_t i[4], f = 0;
                    chk_index(y, e, i);
                    i[4 - n + ax] /= reps;
                    for (int d = 0; d < 4; d++) f = f * x->ne[d] + i[d];
                    want[e] = xd[f];
                }
                run_exact(ctx, y, want);
                free(xd);
                free(want);
                gml_free(ctx);
            }
}

/* GQA's use: K [B, KV, T, d] -> [B, KV * g, T, d], head h reading KV head h / g. */
static void test_repeat_interleave_gqa(void) {
    chk_case("repeat_interleave for GQA heads");
    chk_rng r = chk_seed(50);
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *k =
        chk_new_input(ctx, GML_F32, 4, (int64_t[]){2, 2, 5, 3}, CHK_OUTER_SWAPPED, "k", &r, -1, 1);
    gml_tensor *y = gml_repeat_interleave(ctx, k, 3, 1); /* [2, 6, 5, 3] */
    float *kd = chk_dense(k), want[180];
    for (int b = 0; b < 2; b++)
        for (int h = 0; h < 6; h++)
            for (int t = 0; t < 15; t++) want[(b * 6 + h) * 15 + t] = kd[(b * 2 + h / 3) * 15 + t];
    run_exact(ctx, y, want);
    free(kd);
    gml_free(ctx);
}

/* ---- get_rows ------------------------------------------------------------- */

static void test_get_rows(void) {
    static const int64_t tables[][2] = {{1, 1}, {7, 3}, {17, 65}, {33, 16}, {5, 1}};
    static const struct {
        int n;
        int64_t ne[3];
    } idxs[] = {{1, {1}}, {1, {9}}, {2, {2, 3}}, {2, {1, 7}}, {3, {2, 1, 4}}, {3, {3, 2, 2}}};
    static const chk_layout table_layouts[] = {CHK_CONTIGUOUS, CHK_TRANSPOSED, CHK_SLICED,
                                               CHK_SLICED_TRANSPOSED};
    uint64_t seed = 100;
    int k = 0;
    for (size_t t = 0; t < sizeof tables / sizeof *tables; t++)
        for (size_t s = 0; s < sizeof idxs / sizeof *idxs; s++)
            for (int tl = 0; tl < 4; tl++, k++) {
                const int64_t N = tables[t][0], d = tables[t][1];
                chk_rng r = chk_seed(seed++);
                gml_context *ctx = chk_ctx(1 << 20);
                gml_tensor *table = chk_new_input(ctx, GML_F32, 2, (int64_t[]){N, d}, table_layouts[tl],
                                                  "table", &r, -1, 1);
                chk_layout li = (chk_layout)(k % CHK_N_LAYOUTS);
                gml_tensor *idx = chk_new_input(ctx, GML_I32, idxs[s].n, idxs[s].ne, li, "idx", &r, 0,
                                                (float)(N - 1));
                char st[64], si[64];
                chk_case("get_rows(%s table %s, %s idx %s)", chk_layout_name(table_layouts[tl]),
                         chk_shape(table, st, sizeof st), chk_layout_name(li), chk_shape(idx, si, sizeof si));
                gml_tensor *y = gml_get_rows(ctx, table, idx);
                if (!CHECK(y, "build: %s", gml_last_error(ctx))) {
                    gml_free(ctx);
                    continue;
                }
                /* out [..idx shape, d] */
                CHECK(y->n_dims == idxs[s].n + 1 && gml_dim(y, -1) == d && y->type == GML_F32,
                      "result shape");
                for (int q = 0; q < idxs[s].n; q++) CHECK(gml_dim(y, q) == idxs[s].ne[q], "dim %d", q);
                float *td = chk_dense(table), *want = malloc((size_t)chk_numel(y) * 4);
                int32_t *id = chk_dense(idx);
                for (int64_t e = 0; e < chk_numel(idx); e++)
                    for (int64_t j = 0; j < d; j++) want[e * d + j] = td[id[e] * d + j];
                run_exact(ctx, y, want);
                free(td);
                free(id);
                free(want);
                gml_free(ctx);
            }
}

/* ---- valid_len_mask ------------------------------------------------------- */

static void test_valid_len_mask(void) {
    static const int64_t tks[] = {1, 3, 17};
    uint64_t seed = 200;
    int k = 0;
    for (size_t s = 0; s < 3; s++)
        for (int per_query = 0; per_query < 2; per_query++)
            for (int l = 0; l < CHK_N_LAYOUTS; l++, k++) {
                const int64_t tk = tks[s], B = 4, tq = 3;
                chk_rng r = chk_seed(seed++);
                gml_context *ctx = chk_ctx(1 << 20);
                gml_tensor *lens = per_query ? chk_new_input(ctx, GML_I32, 2, (int64_t[]){B, tq},
                                                             (chk_layout)l, "lens", &r, 0, (float)tk)
                                             : chk_new_input(ctx, GML_I32, 1, (int64_t[]){B}, (chk_layout)l,
                                                             "lens", &r, 0, (float)tk);
                /* always include 0 and Tk */
                *(int32_t *)chk_at(lens, 0) = 0;
                *(int32_t *)chk_at(lens, 1) = (int32_t)tk;
                char sl[64];
                chk_case("valid_len_mask(%s lens %s, Tk %lld)", chk_layout_name((chk_layout)l),
                         chk_shape(lens, sl, sizeof sl), (long long)tk);
                gml_tensor *m = gml_valid_len_mask(ctx, lens, tk);
                if (!CHECK(m, "build: %s", gml_last_error(ctx))) {
                    gml_free(ctx);
                    continue;
                }
                /* [B, 1, 1, Tk] or [B, 1, Tq, Tk] */
                const int64_t mq = per_query ? tq : 1;
                CHECK(m->n_dims == 4 && m->ne[0] == B && m->ne[1] == 1 && m->ne[2] == mq && m->ne[3] == tk,
                      "mask shape %s", chk_shape(m, sl, sizeof sl));
                int32_t *ld = chk_dense(lens);
                float *want = malloc((size_t)chk_numel(m) * 4);
                for (int64_t b = 0; b < B; b++)
                    for (int64_t i = 0; i < mq; i++)
                        for (int64_t j = 0; j < tk; j++)
                            want[(b * mq + i) * tk + j] = j < ld[b * mq + i] ? 0.0f : -INFINITY;
                run_exact(ctx, m, want);
                free(ld);
                free(want);
                gml_free(ctx);
            }
}

/* ---- relpos_index --------------------------------------------------------- */

static void test_relpos_index(void) {
    static const int64_t tqk[][2] = {{1, 1}, {4, 4}, {3, 7}, {7, 3}, {1, 9}, {17, 5}};
    static const int ps[] = {0, 1, 3};
    for (size_t s = 0; s < sizeof tqk / sizeof *tqk; s++)
        for (int p = 0; p < 3; p++) {
            const int64_t tq = tqk[s][0], tk = tqk[s][1];
            const int P = ps[p];
            chk_case("relpos_index(Tq %lld, Tk %lld, P %d)", (long long)tq, (long long)tk, P);
            gml_context *ctx = chk_ctx(1 << 20);
            gml_tensor *y = gml_relpos_index(ctx, tq, tk, P);
            if (!CHECK(y, "build: %s", gml_last_error(ctx))) {
                gml_free(ctx);
                continue;
            }
            CHECK(y->type == GML_I32 && y->n_dims == 2 && gml_dim(y, 0) == tq && gml_dim(y, 1) == tk,
                  "i32 [Tq, Tk]");
            int32_t *want = malloc((size_t)(tq * tk) * 4);
            for (int64_t i = 0; i < tq; i++)
                for (int64_t j = 0; j < tk; j++) {
                    int64_t rel = j - i;
                    if (rel < -P) rel = -P;
                    if (rel > P) rel = P;
                    want[i * tk + j] = (int32_t)(rel + P);
                }
            run_exact(ctx, y, want);
            free(want);
            gml_free(ctx);
        }
}

/* Shaw et al.'s use: rel_k [2P+1, d] gathered by relpos_index -> [Tq, Tk, d]. */
static void test_relpos_gather(void) {
    chk_case("get_rows(rel_k, relpos_index)");
    chk_rng r = chk_seed(300);
    gml_context *ctx = chk_ctx(1 << 20);
    const int P = 2;
    gml_tensor *rel =
        chk_new_input(ctx, GML_F32, 2, (int64_t[]){2 * P + 1, 6}, CHK_SLICED, "rel_k", &r, -1, 1);
    gml_tensor *y = gml_get_rows(ctx, rel, gml_relpos_index(ctx, 5, 7, P)); /* [5, 7, 6] */
    float *rd = chk_dense(rel), want[5 * 7 * 6];
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 7; j++) {
            int rel_pos = j - i < -P ? -P : j - i > P ? P : j - i;
            for (int c = 0; c < 6; c++) want[(i * 7 + j) * 6 + c] = rd[(rel_pos + P) * 6 + c];
        }
    run_exact(ctx, y, want);
    free(rd);
    gml_free(ctx);
}

/* ---- arange ---------------------------------------------------------------- */

static void test_arange(void) {
    static const int64_t cases[][2] = {{1, 0}, {5, 0}, {17, 3}, {9, -4}, {3, 2147483645LL}};
    for (size_t s = 0; s < sizeof cases / sizeof *cases; s++) {
        const int64_t n = cases[s][0], start = cases[s][1];
        chk_case("arange(%lld, start %lld)", (long long)n, (long long)start);
        gml_context *ctx = chk_ctx(1 << 20);
        gml_tensor *y = gml_arange(ctx, n, start);
        if (!CHECK(y, "build: %s", gml_last_error(ctx))) {
            gml_free(ctx);
            continue;
        }
        CHECK(y->type == GML_I32 && y->n_dims == 1 && gml_dim(y, 0) == n, "i32 [n]");
        int32_t want[32];
        for (int64_t i = 0; i < n; i++) want[i] = (int32_t)(start + i);
        run_exact(ctx, y, want);
        gml_free(ctx);
    }
    /* sizes and values out of range are refused, with what and why */
    static const struct {
        int64_t n, start;
        const char *want;
    } bad[] = {{0, 0, "arange: size 0 is out of range"},
               {4, 2147483645LL, "arange: start 2147483645 with size 4 leaves i32"},
               {2, -2147483649LL, "arange: start -2147483649"}};
    for (size_t s = 0; s < sizeof bad / sizeof *bad; s++) {
        chk_case("arange(%lld, start %lld): error", (long long)bad[s].n, (long long)bad[s].start);
        gml_context *ctx = chk_ctx(1 << 16);
        gml_tensor *y = gml_arange(ctx, bad[s].n, bad[s].start);
        CHECK(!y && strstr(gml_last_error(ctx), bad[s].want), "message '%s' lacks '%s'",
              gml_last_error(ctx), bad[s].want);
        gml_free(ctx);
    }
}

int main(void) {
    test_repeat_interleave();
    test_repeat_interleave_gqa();
    test_get_rows();
    test_valid_len_mask();
    test_relpos_index();
    test_relpos_gather();
    test_arange();
    return chk_summary();
}
