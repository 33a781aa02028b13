/* Ops without micro-kernels of their own under every ISA: get_rows (its
 * rows are copy micro-kernel calls, tested in test_ukernels_copy),
 * valid_len_mask and relpos_index, against their reference kernels, bit for
 * bit, on strided tables and indices, at 1-3 threads; and the same error
 * for a bad index whichever kernel runs. */
#include "simd_check.h"

static gml_tensor *indices(gml_context *ctx, int n_dims, const int64_t *ne, int32_t below) {
    gml_tensor *t = gml_new_tensor(ctx, GML_I32, n_dims, ne);
    int32_t *d = t->data;
    for (int64_t i = 0; i < gml_nelements(t); i++) d[i] = (int32_t)rand_int(below);
    return t;
}

static gml_tensor *table(gml_context *ctx, int64_t n, int64_t d) {
    gml_tensor *t = gml_new_tensor_2d(ctx, GML_F32, n, d);
    fill_uniform(t->data, (size_t)(n * d), -5, 5);
    return t;
}

static const tolerance EXACT = {.exact = true};

static void check_get_rows(gml_context *ctx) {
    gml_tensor *tab = table(ctx, 50, 37);
    check_isas(ctx, gml_get_rows(ctx, tab, indices(ctx, 3, (int64_t[]){3, 4, 5}, 50)), EXACT,
               "get_rows [50,37] by [3,4,5]");
    check_isas(ctx, gml_get_rows(ctx, tab, indices(ctx, 1, (int64_t[]){1000}, 50)), EXACT,
               "get_rows [50,37] by [1000]");
    gml_tensor *idx = gml_permute(ctx, indices(ctx, 2, (int64_t[]){3, 4}, 50), (int[]){1, 0});
    check_isas(ctx, gml_get_rows(ctx, tab, idx), EXACT, "get_rows by permuted indices [4,3]");
    gml_tensor *tt = gml_transpose(ctx, table(ctx, 37, 50), 0, 1);
    check_isas(ctx, gml_get_rows(ctx, tt, indices(ctx, 2, (int64_t[]){6, 7}, 50)), EXACT,
               "get_rows from a transposed table");
    gml_tensor *ts = gml_view(ctx, tab, 2, (int64_t[]){40, 28}, (size_t[]){tab->nb[2], 4},
                              5 * tab->nb[2] + 2 * 4);
    check_isas(ctx, gml_get_rows(ctx, ts, indices(ctx, 2, (int64_t[]){6, 7}, 40)), EXACT,
               "get_rows from a sliced table [40,28]");
    gml_tensor *t1 = table(ctx, 9, 1);
    check_isas(ctx, gml_get_rows(ctx, t1, indices(ctx, 1, (int64_t[]){20}, 9)), EXACT,
               "get_rows [9,1]");
    /* relative-position embeddings: table [2P+1, d] by relpos_index */
    gml_tensor *rel = table(ctx, 2 * 5 + 1, 16);
    check_isas(ctx, gml_get_rows(ctx, rel, gml_relpos_index(ctx, 9, 13, 5)), EXACT,
               "get_rows [11,16] by relpos_index(9, 13, 5)");
}

/* A bad index fails compute with the same message under every ISA. */
static void check_bad_index(gml_context *ctx) {
    gml_tensor *idx = indices(ctx, 1, (int64_t[]){100}, 50);
    ((int32_t *)idx->data)[61] = 50;
    gml_tensor *out = gml_get_rows(ctx, table(ctx, 50, 8), idx);
    gml_graph *g = gml_build_graph(ctx, &out, 1);
    char want[512] = "";
    const gml_isa isas[] = {GML_TEST_ISAS};
    for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
        if (gml_set_isa(isas[k]) != GML_OK) continue;
        for (int nth = 1; nth <= 3; nth++) {
            gml_status st = gml_graph_compute(g, nth);
            CHECK(st == GML_ERR_INVALID, "bad index (%s, %d threads): status %d",
                  gml_isa_name(isas[k]), nth, (int)st);
            if (!want[0]) snprintf(want, sizeof want, "%s", gml_graph_error(g));
            CHECK(strcmp(gml_graph_error(g), want) == 0 && strstr(want, "index 50"),
                  "bad index (%s, %d threads): '%s', want '%s'", gml_isa_name(isas[k]), nth,
                  gml_graph_error(g), want);
        }
    }
    gml_set_isa(GML_ISA_AUTO);
    gml_graph_free(g);
}

static void check_masks(gml_context *ctx) {
    gml_tensor *lens = gml_new_tensor_1d(ctx, GML_I32, 5);
    const int32_t l1[] = {0, 1, 17, 33, 32};
    memcpy(lens->data, l1, sizeof l1);
    check_isas(ctx, gml_valid_len_mask(ctx, lens, 33), EXACT, "valid_len_mask [5] Tk 33");
    gml_tensor *lens2 = indices(ctx, 2, (int64_t[]){3, 7}, 41);
    check_isas(ctx, gml_valid_len_mask(ctx, lens2, 40), EXACT, "valid_len_mask [3,7] Tk 40");
    const int64_t shapes[][3] = {{7, 13, 3}, {13, 7, 0}, {1, 50, 100}, {64, 64, 8}, {5, 300, 2}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        char name[96];
        snprintf(name, sizeof name, "relpos_index(%d, %d, %d)", (int)shapes[i][0],
                 (int)shapes[i][1], (int)shapes[i][2]);
        check_isas(ctx, gml_relpos_index(ctx, shapes[i][0], shapes[i][1], (int)shapes[i][2]),
                   EXACT, name);
    }
}

int main(void) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 16 << 20});
    check_get_rows(ctx);
    check_bad_index(ctx);
    check_masks(ctx);
    gml_free(ctx);
    return check_report("test_isa_ops");
}
