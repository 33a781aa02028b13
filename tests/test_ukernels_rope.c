/* rope: every micro-kernel variant of both kinds (ops/rope.inc) against a
 * plain loop of the same float arithmetic, bit for bit, on runs shorter
 * than, equal to and longer than its tile, out of place and in place, with
 * guard elements past the end untouched; then the op under every ISA
 * against its reference kernel on dense, permuted and transposed x (the
 * ISAs bitwise equal to one another: test_rope and test_kernels check the
 * fast kernels against the reference within 4 units of 2^-24 (|x0| + |x1|)). */
#include "../ops/ukernels.h"
#include "simd_check.h"

typedef struct {
    gml_isa isa;
    gml_f32_rope_ukernel *fn;
    gml_f32_ropei_ukernel *fni;
    int tile;
    const char *name;
} variant;

#define ENTRY(isa, fn, tile) {isa, fn, NULL, tile, #fn},
#define ENTRYI(isa, fn, tile) {isa, NULL, fn, tile, #fn},
static const variant VARIANTS[] = {GML_F32_ROPE_UKERNELS(ENTRY) GML_F32_ROPEI_UKERNELS(ENTRYI)};

#define GUARD 0x7fc0beefu
#define PAD 40

static void check_run(const variant *v, size_t n, bool in_place) {
    float *c = malloc(n * 4), *s = malloc(n * 4), *x = malloc((2 * n + PAD) * 4);
    float *o = malloc((2 * n + PAD) * 4), *want = malloc(2 * n * 4);
    for (size_t i = 0; i < n; i++) {
        const float a = rand_uniform(-7, 7);
        c[i] = cosf(a);
        s[i] = sinf(a);
    }
    fill_uniform(x, 2 * n, -3, 3);
    if (n > 2) x[1] = -0.0f, x[2] = 0.0f; /* signed zeros */
    for (size_t i = 0; i < n; i++) {
        const size_t j0 = v->fn ? i : 2 * i, j1 = v->fn ? i + n : 2 * i + 1;
        const float a = x[j0], b = x[j1];
        want[j0] = a * c[i] - b * s[i];
        want[j1] = b * c[i] + a * s[i];
    }
    for (size_t i = 0; i < 2 * n + PAD; i++) memcpy(&o[i], &(uint32_t){GUARD}, 4);
    for (size_t i = 2 * n; i < 2 * n + PAD; i++) memcpy(&x[i], &(uint32_t){GUARD}, 4);
    float *out = o;
    if (in_place) {
        memcpy(o, x, 2 * n * 4);
        out = o;
        if (v->fn) v->fn(n, c, s, o, o + n, o, o + n);
        else v->fni(n, c, s, o, o);
    } else {
        if (v->fn) v->fn(n, c, s, x, x + n, o, o + n);
        else v->fni(n, c, s, x, o);
    }
    int bad = 0;
    for (size_t i = 0; i < 2 * n + PAD && bad < 3; i++) {
        uint32_t g, w;
        memcpy(&g, &out[i], 4);
        if (i < 2 * n) memcpy(&w, &want[i], 4);
        else w = GUARD;
        if (g != w) {
            bad++;
            CHECK(false, "%s n=%zu%s: out[%zu] = %08x, want %08x", v->name, n,
                  in_place ? " in place" : "", i, g, w);
        }
    }
    free(c);
    free(s);
    free(x);
    free(o);
    free(want);
}

static void check_ops(void) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 64 << 20});
    const int64_t B = 2, T = 5, H = 3, d = 70;
    gml_tensor *proj = gml_new_tensor(ctx, GML_F32, 4, (int64_t[]){B, T, H, d});
    fill_uniform(proj->data, (size_t)gml_nelements(proj), -2, 2);
    gml_tensor *pos = gml_new_tensor(ctx, GML_I32, 2, (int64_t[]){B, T});
    for (int i = 0; i < B * T; i++) ((int32_t *)pos->data)[i] = (int32_t)rand_int(40000) - 100;
    gml_tensor *q = gml_permute(ctx, proj, (int[]){0, 2, 1, 3});
    const tolerance tol = {.rel = 0, .abs = 8 * 0x1p-24 * 4};
    for (int ilv = 0; ilv < 2; ilv++)
        for (int r = 2; r <= d; r += 34) {
            char what[160];
            snprintf(what, sizeof what, "rope %s r=%d on [B,T,H,d]", ilv ? "interleaved" : "rotate-half", r);
            check_isas(ctx, gml_rope(ctx, proj, pos, -3, r, 10000.0f, 1.0f, ilv != 0), tol, what);
            snprintf(what, sizeof what, "rope %s r=%d on the head-split permute", ilv ? "interleaved" : "rotate-half", r);
            check_isas(ctx, gml_rope(ctx, q, pos, -2, r, 500000.0f, 3.0f, ilv != 0), tol, what);
            snprintf(what, sizeof what, "rope %s r=%d on a transposed x", ilv ? "interleaved" : "rotate-half", r);
            check_isas(ctx, gml_rope(ctx, gml_transpose(ctx, gml_cont(ctx, gml_transpose(ctx, q, -2, -1)), -2, -1),
                                     pos, -2, r, 10000.0f, 1.0f, ilv != 0), tol, what);
        }
    gml_free(ctx);
}

int main(void) {
    for (size_t i = 0; i < sizeof VARIANTS / sizeof *VARIANTS; i++) {
        if (!cpu_runs(VARIANTS[i].isa, VARIANTS[i].name)) continue;
        size_t lens[12];
        const int nl = tile_lengths(VARIANTS[i].tile, lens);
        for (int l = 0; l < nl; l++) {
            check_run(&VARIANTS[i], lens[l], false);
            check_run(&VARIANTS[i], lens[l], true);
        }
    }
    check_ops();
    return check_report("test_ukernels_rope");
}
