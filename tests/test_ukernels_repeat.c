/* repeat_interleave: every repeat micro-kernel variant (ops/repeat.inc)
 * against a plain loop, bit for bit, then the op along every dim under every
 * ISA against its reference kernel, on permuted, transposed and sliced
 * inputs at 1-3 threads (other dims than the last run the copy
 * micro-kernels, tested in test_ukernels_copy). */
#include "../ops/ukernels.h"
#include "simd_check.h"

typedef struct {
    gml_isa isa;
    gml_x32_repeat_ukernel *fn;
    int tile;
    const char *name;
} variant;

#define ENTRY(isa, fn, tile) {isa, fn, tile, #fn},
static const variant VARIANTS[] = {GML_X32_REPEAT_UKERNELS(ENTRY)};

static void check_variant(const variant *v) {
    size_t lens[12];
    const int nl = tile_lengths(v->tile, lens);
    const size_t reps_list[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 33};
    for (int l = 0; l < nl; l++)
        for (size_t k = 0; k < sizeof reps_list / sizeof *reps_list; k++) {
            const size_t n = lens[l], reps = reps_list[k], pad = 40;
            uint32_t *x = malloc(n * 4), *out = malloc((n * reps + pad) * 4);
            for (size_t i = 0; i < n; i++) x[i] = (uint32_t)rand_u64();
            for (size_t i = 0; i < n * reps + pad; i++) out[i] = 0xabababab;
            v->fn(n, reps, x, out);
            int bad = 0;
            for (size_t i = 0; i < n * reps + pad && bad < 3; i++) {
                const uint32_t want = i < n * reps ? x[i / reps] : 0xabababab;
                if (out[i] != want) {
                    bad++;
                    CHECK(false, "%s n=%zu reps=%zu: out[%zu] = %08x, want %08x", v->name, n,
                          reps, i, out[i], want);
                }
            }
            free(x);
            free(out);
        }
}

static gml_tensor *rnd(gml_context *ctx, gml_type type, int n_dims, const int64_t *ne) {
    gml_tensor *t = gml_new_tensor(ctx, type, n_dims, ne);
    uint32_t *d = t->data;
    for (int64_t i = 0; i < gml_nelements(t); i++) d[i] = (uint32_t)rand_u64();
    if (type == GML_F32) fill_uniform(t->data, (size_t)gml_nelements(t), -9, 9);
    return t;
}

static void every_dim(gml_context *ctx, const char *what, gml_tensor *x) {
    const int reps[] = {1, 2, 3, 5, 17};
    for (int dim = -x->n_dims; dim < x->n_dims; dim++)
        for (size_t k = 0; k < sizeof reps / sizeof *reps; k++) {
            char name[160];
            snprintf(name, sizeof name, "repeat_interleave(%s, %d, dim %d)", what, reps[k], dim);
            check_isas(ctx, gml_repeat_interleave(ctx, x, reps[k], dim),
                       (tolerance){.exact = true}, name);
        }
}

static void check_ops(void) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 64 << 20});
    gml_tensor *x = rnd(ctx, GML_F32, 4, (int64_t[]){2, 3, 7, 19});
    every_dim(ctx, "[2,3,7,19]", x);
    every_dim(ctx, "permuted [2,7,3,19]", gml_permute(ctx, x, (int[]){0, 2, 1, 3}));
    every_dim(ctx, "transposed [2,3,19,7]", gml_transpose(ctx, x, -2, -1));
    every_dim(ctx, "sliced [2,2,5,17]",
              gml_view(ctx, x, 4, (int64_t[]){2, 2, 5, 17},
                       (size_t[]){x->nb[0], x->nb[1], x->nb[2], x->nb[3]},
                       x->nb[1] + 2 * x->nb[2] + x->nb[3]));
    every_dim(ctx, "i32 [5,33]", rnd(ctx, GML_I32, 2, (int64_t[]){5, 33}));
    every_dim(ctx, "[1000]", rnd(ctx, GML_F32, 1, (int64_t[]){1000}));
    /* GQA: K [B, h_kv, T, d] -> [B, h_kv * 4, T, d] */
    gml_tensor *k = rnd(ctx, GML_F32, 4, (int64_t[]){2, 2, 33, 16});
    check_isas(ctx, gml_repeat_interleave(ctx, k, 4, 1), (tolerance){.exact = true},
               "GQA heads [2,2,33,16] x4");
    gml_free(ctx);
}

int main(void) {
    for (size_t i = 0; i < sizeof VARIANTS / sizeof *VARIANTS; i++)
        if (cpu_runs(VARIANTS[i].isa, VARIANTS[i].name)) check_variant(&VARIANTS[i]);
    check_ops();
    return check_report("test_ukernels_repeat");
}
