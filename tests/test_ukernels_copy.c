/* Copies: every copy and transpose micro-kernel variant (ops/copy.inc)
 * against plain loops, bit for bit, then cont and cpy under every ISA
 * against their reference kernel on permuted, transposed, sliced and
 * strided views at 1-3 threads. */
#include "../ops/ukernels.h"
#include "simd_check.h"

typedef struct {
    gml_isa isa;
    gml_x32_copy_ukernel *fn;
    int tile;
    const char *name;
} copy_variant;

typedef struct {
    gml_isa isa;
    gml_x32_transpose_ukernel *fn;
    int tile;
    const char *name;
} transpose_variant;

#define ENTRY(isa, fn, tile) {isa, fn, tile, #fn},
static const copy_variant COPIES[] = {GML_X32_COPY_UKERNELS(ENTRY)};
static const transpose_variant TRANSPOSES[] = {GML_X32_TRANSPOSE_UKERNELS(ENTRY)};

#define SENTINEL 0xabababab

static void check_copy(const copy_variant *v) {
    size_t lens[12];
    const int nl = tile_lengths(GML_MAX(v->tile, 16), lens);
    for (int l = 0; l < nl; l++) {
        const size_t n = lens[l], pad = 40;
        uint32_t *src = malloc(n * 4), *dst = malloc((n + pad) * 4);
        for (size_t i = 0; i < n; i++) src[i] = (uint32_t)rand_u64();
        for (size_t i = 0; i < n + pad; i++) dst[i] = SENTINEL;
        v->fn(n, src, dst);
        for (size_t i = 0; i < n + pad; i++)
            CHECK(dst[i] == (i < n ? src[i] : SENTINEL), "%s n=%zu: dst[%zu] = %08x", v->name, n,
                  i, dst[i]);
        free(src);
        free(dst);
    }
}

/* rows x cols from each length class, in padded buffers (strides wider than
 * the block); nothing outside the block may change. */
static void check_transpose(const transpose_variant *v) {
    size_t lens[12];
    const int nl = tile_lengths(v->tile, lens);
    for (int a = 0; a < nl; a++)
        for (int b = 0; b < nl; b++) {
            const size_t rows = lens[a], cols = lens[b];
            if (rows * cols > 200000) continue;
            const size_t ss = cols + 3, ds = rows + 5;
            uint32_t *src = malloc(rows * ss * 4), *dst = malloc(cols * ds * 4);
            for (size_t i = 0; i < rows * ss; i++) src[i] = (uint32_t)rand_u64();
            for (size_t i = 0; i < cols * ds; i++) dst[i] = SENTINEL;
            v->fn(rows, cols, src, ss, dst, ds);
            int bad = 0;
            for (size_t j = 0; j < cols && bad < 3; j++)
                for (size_t i = 0; i < ds && bad < 3; i++) {
                    const uint32_t want = i < rows ? src[i * ss + j] : SENTINEL;
                    if (dst[j * ds + i] != want) {
                        bad++;
                        CHECK(false, "%s %zux%zu: dst[%zu][%zu] = %08x, want %08x", v->name, rows,
                              cols, j, i, dst[j * ds + i], want);
                    }
                }
            free(src);
            free(dst);
        }
}

/* ---- op level ------------------------------------------------------------ */

static gml_tensor *rnd(gml_context *ctx, gml_type type, int n_dims, const int64_t *ne) {
    gml_tensor *t = gml_new_tensor(ctx, type, n_dims, ne);
    uint32_t *d = t->data;
    for (int64_t i = 0; i < gml_nelements(t); i++) d[i] = (uint32_t)rand_u64();
    if (type == GML_F32) fill_uniform(t->data, (size_t)gml_nelements(t), -9, 9);
    return t;
}

static void cont_case(gml_context *ctx, const char *what, gml_tensor *view) {
    char name[160];
    snprintf(name, sizeof name, "cont %s", what);
    check_isas(ctx, gml_cont(ctx, view), (tolerance){.exact = true}, name);
}

static void check_ops(void) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 64 << 20});
    gml_tensor *x = rnd(ctx, GML_F32, 4, (int64_t[]){3, 37, 5, 19});
    cont_case(ctx, "contiguous [3,37,5,19]", x);
    cont_case(ctx, "permute(0,2,1,3)", gml_permute(ctx, x, (int[]){0, 2, 1, 3}));
    cont_case(ctx, "transpose(-2,-1)", gml_transpose(ctx, x, -2, -1));
    cont_case(ctx, "permute(0,2,3,1)", gml_permute(ctx, x, (int[]){0, 2, 3, 1}));
    cont_case(ctx, "permute(3,2,1,0)", gml_permute(ctx, x, (int[]){3, 2, 1, 0}));
    cont_case(ctx, "permute(1,3,0,2)", gml_permute(ctx, x, (int[]){1, 3, 0, 2}));
    gml_tensor *xi = rnd(ctx, GML_I32, 3, (int64_t[]){4, 33, 17});
    cont_case(ctx, "i32 transpose(0,2)", gml_transpose(ctx, xi, 0, 2));
    cont_case(ctx, "i32 permute(1,0,2)", gml_permute(ctx, xi, (int[]){1, 0, 2}));
    gml_tensor *m = rnd(ctx, GML_F32, 2, (int64_t[]){300, 70});
    cont_case(ctx, "2-D transpose [70,300]", gml_transpose(ctx, m, 0, 1));
    cont_case(ctx, "[1,70] slice of a 2-D transpose",
              gml_view(ctx, gml_transpose(ctx, m, 0, 1), 2, (int64_t[]){1, 300},
                       (size_t[]){4, 280}, 8));
    /* slices with offsets: rows 2..34 of dim 1, columns 3..17 of dim 3 */
    gml_tensor *s = gml_view(ctx, x, 4, (int64_t[]){3, 33, 5, 15},
                             (size_t[]){x->nb[0], x->nb[1], x->nb[2], x->nb[3]},
                             2 * x->nb[1] + 3 * x->nb[3]);
    cont_case(ctx, "sliced", s);
    cont_case(ctx, "sliced, transposed", gml_transpose(ctx, s, 1, 3));
    /* every other element of the last dim: strided on both sides of a plane */
    gml_tensor *e = gml_view(ctx, x, 4, (int64_t[]){3, 37, 5, 9},
                             (size_t[]){x->nb[0], x->nb[1], x->nb[2], 2 * x->nb[3]}, 4);
    cont_case(ctx, "every other element", e);
    cont_case(ctx, "every other element, transposed", gml_transpose(ctx, e, 1, 2));

    /* cpy into a KV-cache slot: cache [2, 4, 40, 16], write positions 7..19
     * of every head from k [2, 13, 4, 16] permuted to [2, 4, 13, 16] */
    gml_tensor *cache = rnd(ctx, GML_F32, 4, (int64_t[]){2, 4, 40, 16});
    gml_tensor *k = rnd(ctx, GML_F32, 4, (int64_t[]){2, 13, 4, 16});
    gml_tensor *slot = gml_view(ctx, cache, 4, (int64_t[]){2, 4, 13, 16},
                                (size_t[]){cache->nb[0], cache->nb[1], cache->nb[2], cache->nb[3]},
                                7 * cache->nb[2]);
    check_isas(ctx, gml_cpy(ctx, gml_permute(ctx, k, (int[]){0, 2, 1, 3}), slot),
               (tolerance){.exact = true}, "cpy permuted k into a cache slot");
    /* into a transposed slot of v^T [2, 4, 16, 40]: dst's last dim strided */
    gml_tensor *vt = gml_transpose(ctx, rnd(ctx, GML_F32, 4, (int64_t[]){2, 4, 40, 16}), -2, -1);
    gml_tensor *vslot = gml_view(ctx, vt, 4, (int64_t[]){2, 4, 16, 13},
                                 (size_t[]){vt->nb[0], vt->nb[1], vt->nb[2], vt->nb[3]},
                                 7 * vt->nb[3]);
    check_isas(ctx, gml_cpy(ctx, gml_permute(ctx, k, (int[]){0, 2, 3, 1}), vslot),
               (tolerance){.exact = true}, "cpy into a transposed cache slot");
    gml_tensor *kt = gml_permute(ctx, k, (int[]){0, 2, 1, 3});
    gml_tensor *kt_t = gml_transpose(ctx, gml_cont(ctx, gml_transpose(ctx, kt, -2, -1)), -2, -1);
    check_isas(ctx, gml_cpy(ctx, kt_t, slot), (tolerance){.exact = true},
               "cpy a transposed view into a cache slot");
    gml_free(ctx);
}

int main(void) {
    for (size_t i = 0; i < sizeof COPIES / sizeof *COPIES; i++)
        if (cpu_runs(COPIES[i].isa, COPIES[i].name)) check_copy(&COPIES[i]);
    for (size_t i = 0; i < sizeof TRANSPOSES / sizeof *TRANSPOSES; i++)
        if (cpu_runs(TRANSPOSES[i].isa, TRANSPOSES[i].name)) check_transpose(&TRANSPOSES[i]);
    check_ops();
    return check_report("test_ukernels_copy");
}
