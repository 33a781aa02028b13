/* A KV cache of f16 or bf16 (gml_kv_cache_params.type): the new K and V rows
 * rounded as they are appended (set_rows converting), flash_attn reading
 * them converted per key block.
 * - Weights and tokens on a coarse grid, so every K and V value is exactly
 *   an f16 and a bf16 (the f32 cache then holds the same values the typed
 *   one does): decoding 11 tokens (GQA, B = 2, sinks, a window) through an
 *   f16 or bf16 cache gives bitwise the outputs through an f32 cache, at
 *   every ISA and 1 and 3 threads.
 * - Random weights with rope (K and V really rounded): the distance to the
 *   f32 cache is what rounding K and V costs (printed), under 4e-3 (f16)
 *   and 3e-2 (bf16) of the largest output.
 * - The cache is half the bytes; a bad type is refused with a message. */
#include "check.h"

#include <ggmlite/kv_cache.h>

static const gml_isa ISAS[] = {GML_TEST_ISAS};
enum { B = 2, T = 11, D = 32, H = 4, G = 2 };

/* grid: multiples of `step` in [-lim, lim] */
static float grid(chk_rng *r, float step, int lim) {
    return step * (float)chk_randint(r, -lim, lim);
}

typedef struct setup {
    gml_context *wctx;
    gml_attn_weights w;
    float x[B * T * D];
} setup;

static void setup_new(setup *s, bool exact, uint64_t seed) {
    chk_rng r = {seed};
    s->w = (gml_attn_weights){0};
    s->wctx = gml_init((gml_init_params){.mem_size = 1 << 20});
    const int64_t kv = G * D / H;
    gml_tensor **w[4] = {&s->w.w_q, &s->w.w_k, &s->w.w_v, &s->w.w_o};
    const int64_t rows[4] = {D, kv, kv, D};
    for (int i = 0; i < 4; i++) {
        *w[i] = gml_new_tensor_2d(s->wctx, GML_F32, rows[i], D);
        for (int64_t e = 0; e < rows[i] * D; e++)
            ((float *)(*w[i])->data)[e] = exact ? grid(&r, 0.125f, 1) : chk_uniform(&r, -0.3f, 0.3f);
    }
    s->w.sinks = gml_new_tensor_1d(s->wctx, GML_F32, H);
    for (int h = 0; h < H; h++) ((float *)s->w.sinks->data)[h] = chk_uniform(&r, -1, 1);
    for (int e = 0; e < B * T * D; e++) s->x[e] = exact ? grid(&r, 0.5f, 1) : chk_uniform(&r, -1, 1);
}

/* Decodes the T tokens one at a time through a cache of `type`: out [B, T, D]. */
static bool decode(const setup *s, gml_type type, bool rope, int nth, float *out) {
    char err[256];
    gml_kv_cache *c = gml_kv_cache_new((gml_kv_cache_params){.n_layers = 1, .batch = B,
                                                             .n_kv_heads = G, .max_len = T + 2,
                                                             .d_k = D / H, .type = type},
                                       err, sizeof err);
    if (!CHECK(c, "cache: %s", err)) return false;
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 4 << 20});
    gml_tensor *x = gml_new_tensor_3d(ctx, GML_F32, B, 1, D);
    gml_kv_step step = gml_kv_step_new(ctx, c, 1);
    gml_attn_config cfg = {.dims = {.n_heads = H, .n_kv_heads = G},
                           .score = {.causal = GML_CAUSAL_BOTTOM_RIGHT, .window = 7},
                           .pos.kind = rope ? GML_POS_ROPE : GML_POS_NONE};
    gml_tensor *y = gml_attn_decode(ctx, cfg, &s->w, x, &step, 0);
    gml_graph *g = y ? gml_build_graph(ctx, &y, 1) : NULL;
    bool ok = CHECK(g, "build: %s", gml_last_error(ctx));
    for (int t = 0; ok && t < T; t++) {
        for (int b = 0; b < B; b++) memcpy((float *)x->data + b * D, s->x + (b * T + t) * D, D * 4);
        ok = CHECK(gml_kv_step_compute(&step, g, nth, err, sizeof err) == GML_OK, "step %d: %s", t, err);
        for (int b = 0; ok && b < B; b++)
            memcpy(out + (b * T + t) * D, (float *)y->data + b * D, D * 4);
    }
    gml_graph_free(g);
    gml_free(ctx);
    gml_kv_cache_free(c);
    return ok;
}

static void exact_values(gml_type type) {
    chk_case("%s cache, K and V exactly representable", gml_type_name(type));
    setup s;
    setup_new(&s, true, 3);
    static float want[B * T * D], got[B * T * D];
    for (size_t i = 0; i < sizeof ISAS / sizeof *ISAS; i++) {
        if (!gml_cpu_has(ISAS[i])) continue;
        gml_set_isa(ISAS[i]);
        for (int nth = 1; nth <= 3; nth += 2) {
            if (!decode(&s, GML_F32, false, nth, want) || !decode(&s, type, false, nth, got)) continue;
            double mx = 0;
            for (int e = 0; e < B * T * D; e++) mx = fmax(mx, fabs(want[e]));
            CHECK(mx > 0.1 && memcmp(want, got, sizeof want) == 0,
                  "%s, %d threads: not bitwise the f32 cache's outputs", gml_isa_name(ISAS[i]), nth);
        }
    }
    gml_set_isa(GML_ISA_AUTO);
    gml_free(s.wctx);
}

static void rounded_values(gml_type type, double tol) {
    chk_case("%s cache, random K and V, rope", gml_type_name(type));
    setup s;
    setup_new(&s, false, 5);
    static float want[B * T * D], got[B * T * D];
    if (decode(&s, GML_F32, true, 2, want) && decode(&s, type, true, 2, got)) {
        double mx = 0, d = 0;
        for (int e = 0; e < B * T * D; e++) mx = fmax(mx, fabs(want[e]));
        for (int e = 0; e < B * T * D; e++) d = fmax(d, fabs((double)got[e] - want[e]));
        CHECK(d > 0 && d <= tol * mx, "max |%s cache - f32 cache| %.3g of max %.3g", gml_type_name(type),
              d, mx);
        printf("%s cache vs f32 cache, K/V rounded: max |diff| / max |out| %.2g\n", gml_type_name(type),
               d / mx);
    }
    gml_free(s.wctx);
}

static void params(void) {
    chk_case("cache parameters");
    char err[256];
    gml_kv_cache_params p = {.n_layers = 2, .batch = 1, .n_kv_heads = 2, .max_len = 16, .d_k = 8};
    gml_kv_cache *f = gml_kv_cache_new(p, err, sizeof err);
    p.type = GML_F16;
    gml_kv_cache *h = gml_kv_cache_new(p, err, sizeof err);
    if (CHECK(f && h, "caches: %s", err)) {
        CHECK(gml_kv_cache_bytes(h) * 2 == gml_kv_cache_bytes(f), "f16 bytes %zu, f32 %zu",
              gml_kv_cache_bytes(h), gml_kv_cache_bytes(f));
        CHECK(gml_kv_cache_k(h, 1)->type == GML_F16 && gml_kv_cache_v(h, 0)->type == GML_F16,
              "K and V are f16");
    }
    gml_kv_cache_free(f);
    gml_kv_cache_free(h);
    p.type = GML_Q8_0;
    CHECK(!gml_kv_cache_new(p, err, sizeof err) &&
              strstr(err, "kv_cache: type q8_0: K and V may be f32, f16 or bf16"),
          "q8_0 cache: '%s'", err);
}

int main(void) {
    exact_values(GML_F16);
    exact_values(GML_BF16);
    rounded_values(GML_F16, 4e-3);
    rounded_values(GML_BF16, 3e-2);
    params();
    return chk_summary();
}
