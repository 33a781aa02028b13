/* Elementwise add, mul, sub, div, scale: every micro-kernel variant (ops/binary.inc)
 * against a plain loop, bit for bit, then the ops under every ISA against
 * their reference kernels on broadcast, permuted, sliced and transposed
 * inputs at 1-3 threads. */
#include "../ops/ukernels.h"
#include "simd_check.h"

typedef struct {
    gml_isa isa;
    gml_f32_vbinary_ukernel *fn;
    int tile;
    const char *name;
    char op; /* + * - / */
    bool b_const, rev; /* rev: b[0] (op) a[i] */
} variant;

#define VADD(isa, fn, tile) {isa, fn, tile, #fn, '+', false, false},
#define VADDC(isa, fn, tile) {isa, fn, tile, #fn, '+', true, false},
#define VMUL(isa, fn, tile) {isa, fn, tile, #fn, '*', false, false},
#define VMULC(isa, fn, tile) {isa, fn, tile, #fn, '*', true, false},
#define VSUB(isa, fn, tile) {isa, fn, tile, #fn, '-', false, false},
#define VSUBC(isa, fn, tile) {isa, fn, tile, #fn, '-', true, false},
#define VRSUBC(isa, fn, tile) {isa, fn, tile, #fn, '-', true, true},
#define VDIV(isa, fn, tile) {isa, fn, tile, #fn, '/', false, false},
#define VDIVC(isa, fn, tile) {isa, fn, tile, #fn, '/', true, false},
#define VRDIVC(isa, fn, tile) {isa, fn, tile, #fn, '/', true, true},
static const variant VARIANTS[] = {
    GML_F32_VADD_UKERNELS(VADD) GML_F32_VADDC_UKERNELS(VADDC)
    GML_F32_VMUL_UKERNELS(VMUL) GML_F32_VMULC_UKERNELS(VMULC)
    GML_F32_VSUB_UKERNELS(VSUB) GML_F32_VSUBC_UKERNELS(VSUBC) GML_F32_VRSUBC_UKERNELS(VRSUBC)
    GML_F32_VDIV_UKERNELS(VDIV) GML_F32_VDIVC_UKERNELS(VDIVC) GML_F32_VRDIVC_UKERNELS(VRDIVC)
};

static float apply(char op, float x, float y) {
    return op == '+' ? x + y : op == '*' ? x * y : op == '-' ? x - y : x / y;
}

static float special(void) {
    const float s[] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f, 3e38f, -3e38f, 1e-40f};
    return s[rand_int(sizeof s / sizeof *s)];
}

static void check_variant(const variant *v) {
    size_t lens[12];
    const int nl = tile_lengths(v->tile, lens);
    for (int l = 0; l < nl; l++) {
        const size_t n = lens[l], pad = 40;
        float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
        float *out = malloc((n + pad) * sizeof *out), *want = malloc(n * sizeof *want);
        fill_uniform(a, n, -100, 100);
        fill_uniform(b, n, -100, 100);
        for (size_t i = 0; i < n; i += 1 + (size_t)rand_int(7)) a[i] = special();
        for (size_t i = 0; i < n; i += 1 + (size_t)rand_int(7)) b[i] = special();
        for (size_t i = 0; i < n; i++) {
            const float y = v->b_const ? b[0] : b[i];
            want[i] = v->rev ? apply(v->op, y, a[i]) : apply(v->op, a[i], y);
        }
        for (size_t i = 0; i < n + pad; i++) out[i] = 555.0f;
        v->fn(n, a, b, out);
        for (size_t i = 0; i < n; i++)
            CHECK(same_f32(out[i], want[i]), "%s n=%zu: out[%zu] = %.9g, want %.9g", v->name, n,
                  i, (double)out[i], (double)want[i]);
        for (size_t i = n; i < n + pad; i++)
            CHECK(out[i] == 555.0f, "%s n=%zu: wrote out[%zu] past the end", v->name, n, i);
        /* in place: out = a */
        v->fn(n, a, b, a);
        for (size_t i = 0; i < n; i++)
            CHECK(same_f32(a[i], want[i]), "%s n=%zu in place: a[%zu] = %.9g, want %.9g",
                  v->name, n, i, (double)a[i], (double)want[i]);
        free(a);
        free(b);
        free(out);
        free(want);
    }
}

/* ---- op level ------------------------------------------------------------ */

static gml_tensor *rnd(gml_context *ctx, int n_dims, const int64_t *ne) {
    gml_tensor *t = gml_new_tensor(ctx, GML_F32, n_dims, ne);
    fill_uniform(t->data, (size_t)gml_nelements(t), -10, 10);
    return t;
}

static void op_cases(gml_context *ctx, const char *what, gml_tensor *a, gml_tensor *b) {
    const tolerance exact = {.exact = true};
    char name[160];
    snprintf(name, sizeof name, "add %s", what);
    check_isas(ctx, gml_add(ctx, a, b), exact, name);
    snprintf(name, sizeof name, "add %s, swapped", what);
    check_isas(ctx, gml_add(ctx, b, a), exact, name);
    snprintf(name, sizeof name, "mul %s", what);
    check_isas(ctx, gml_mul(ctx, a, b), exact, name);
    snprintf(name, sizeof name, "sub %s", what);
    check_isas(ctx, gml_sub(ctx, a, b), exact, name);
    snprintf(name, sizeof name, "sub %s, swapped", what);
    check_isas(ctx, gml_sub(ctx, b, a), exact, name);
    snprintf(name, sizeof name, "div %s", what);
    check_isas(ctx, gml_div(ctx, a, b), exact, name);
    snprintf(name, sizeof name, "div %s, swapped", what);
    check_isas(ctx, gml_div(ctx, b, a), exact, name);
    snprintf(name, sizeof name, "scale %s", what);
    check_isas(ctx, gml_scale(ctx, a, -0.37f), exact, name);
}

static void check_ops(void) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 64 << 20});
    gml_tensor *x = rnd(ctx, 4, (int64_t[]){2, 3, 5, 37});
    op_cases(ctx, "[2,3,5,37] + same", x, rnd(ctx, 4, (int64_t[]){2, 3, 5, 37}));
    op_cases(ctx, "[2,3,5,37] + bias [37]", x, rnd(ctx, 1, (int64_t[]){37}));
    op_cases(ctx, "[2,3,5,37] + [2,1,5,37]", x, rnd(ctx, 4, (int64_t[]){2, 1, 5, 37}));
    op_cases(ctx, "[2,3,5,37] + [3,1,37]", x, rnd(ctx, 3, (int64_t[]){3, 1, 37}));
    op_cases(ctx, "[2,3,5,37] + scalar [1]", x, rnd(ctx, 1, (int64_t[]){1}));
    op_cases(ctx, "[2,3,5,1] + [37]", rnd(ctx, 4, (int64_t[]){2, 3, 5, 1}),
             rnd(ctx, 1, (int64_t[]){37}));
    op_cases(ctx, "[2,3,1,1] + [5,1]", rnd(ctx, 4, (int64_t[]){2, 3, 1, 1}),
             rnd(ctx, 2, (int64_t[]){5, 1}));
    op_cases(ctx, "[3,1000,17] + [1000,1]", rnd(ctx, 3, (int64_t[]){3, 1000, 17}),
             rnd(ctx, 2, (int64_t[]){1000, 1}));
    op_cases(ctx, "[1001] + [1001]", rnd(ctx, 1, (int64_t[]){1001}),
             rnd(ctx, 1, (int64_t[]){1001}));
    /* permuted (rows contiguous), transposed (last dim strided), sliced */
    gml_tensor *p = gml_permute(ctx, rnd(ctx, 4, (int64_t[]){2, 5, 3, 37}), (int[]){0, 2, 1, 3});
    op_cases(ctx, "permuted [2,3,5,37] + same", p, x);
    gml_tensor *t = gml_transpose(ctx, rnd(ctx, 4, (int64_t[]){2, 3, 37, 5}), -2, -1);
    op_cases(ctx, "transposed [2,3,5,37] + bias [37]", t, rnd(ctx, 1, (int64_t[]){37}));
    gml_tensor *big = rnd(ctx, 4, (int64_t[]){2, 4, 6, 40});
    gml_tensor *s = gml_view(ctx, big, 4, (int64_t[]){2, 3, 5, 37},
                             (size_t[]){big->nb[0], big->nb[1], big->nb[2], big->nb[3]},
                             big->nb[1] + big->nb[2] + 3 * big->nb[3]);
    op_cases(ctx, "sliced [2,3,5,37] + [5,37]", s, rnd(ctx, 2, (int64_t[]){5, 37}));
    gml_free(ctx);
}

int main(void) {
    for (size_t i = 0; i < sizeof VARIANTS / sizeof *VARIANTS; i++)
        if (cpu_runs(VARIANTS[i].isa, VARIANTS[i].name)) check_variant(&VARIANTS[i]);
    check_ops();
    return check_report("test_ukernels_binary");
}
