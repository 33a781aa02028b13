/* flash_attn with f16 / bf16 K and V, and set_rows converting f32 rows into
 * an f16 / bf16 destination (a half-precision KV cache):
 * - under every kernel set (reference, scalar, avx2, avx512, neon) and 1-4
 *   threads, flash_attn on typed K/V is bitwise flash_attn on f32 K/V
 *   holding the converted values (the key blocks are converted into the
 *   same floats), and within 1e-5 relative (of the output's largest
 *   magnitude) of the reference kernel on the typed K/V (double sums);
 * - odd d_k, d_v, Tk with key-block tails (1, 31, 65, 130 keys), Tq 1, 3, 17
 *   (the few-rows and the wide micro-kernels), G < H, causal, valid
 *   lengths, window, softcap, ALiBi, sinks, a mask; K and V as permuted
 *   views (elements strided: converted element by element) and as slices;
 * - the kernel notes name the typed path for each ISA;
 * - set_rows: the bits of gml_fp32_to_fp16 / bf16 per element, contiguous
 *   and strided sources, at every ISA;
 * - refusals: q8_0 K, an f16 q, set_rows of f16 into f32. */
#include "check.h"

#include "internal.h" /* gml_ptr */
#include <ggmlite/attention.h>

#include <inttypes.h>

static const gml_isa ISAS[] = {GML_TEST_ISAS};
static double worst_ref; /* max |typed fast - reference| / max |reference| */

static float rounded(gml_type t, float x) {
    return t == GML_F16 ? gml_fp16_to_fp32(gml_fp32_to_fp16(x)) : gml_bf16_to_fp32(gml_fp32_to_bf16(x));
}

/* A [B, G, T, d] K or V of type t (permuted view when `permuted`: stored
 * [B, G, d, T]) and an f32 twin holding the converted values. */
static void make_kv(gml_context *ctx, gml_type t, int64_t B, int64_t G, int64_t T, int64_t d,
                    bool permuted, chk_rng *r, gml_tensor **typed, gml_tensor **f32) {
    *f32 = gml_new_tensor_4d(ctx, GML_F32, B, G, T, d);
    gml_tensor *store = permuted ? gml_new_tensor_4d(ctx, t, B, G, d, T)
                                 : gml_new_tensor_4d(ctx, t, B, G, T + 3, d); /* a slice of T rows */
    *typed = permuted ? gml_transpose(ctx, store, -2, -1)
                      : gml_view(ctx, store, 4, (int64_t[]){B, G, T, d},
                                 (size_t[]){store->nb[0], store->nb[1], store->nb[2], store->nb[3]},
                                 store->nb[2]);
    for (int64_t e = 0; e < B * G * T * d; e++) {
        const int64_t c = e % d, j = e / d % T, g = e / (d * T) % G, b = e / (d * T * G);
        const float x = rounded(t, chk_uniform(r, -2, 2));
        ((float *)(*f32)->data)[e] = x;
        const uint16_t h = t == GML_F16 ? gml_fp32_to_fp16(x) : gml_fp32_to_bf16(x);
        memcpy(gml_ptr(*typed, b, g, j, c), &h, 2);
    }
}

static void one_case(gml_type t, int64_t B, int64_t H, int64_t G, int64_t Tq, int64_t Tk,
                     int64_t dk, int64_t dv, bool permuted, int opt) {
    chk_case("flash_attn %s K/V: B%" PRId64 " H%" PRId64 " G%" PRId64 " Tq%" PRId64 " Tk%" PRId64
             " dk%" PRId64 " dv%" PRId64 " %s, options %d", gml_type_name(t), B, H, G, Tq, Tk, dk,
             dv, permuted ? "permuted" : "sliced", opt);
    chk_rng r = {(uint64_t)(Tq * 131 + Tk * 7 + dk + opt)};
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 32 << 20});
    gml_tensor *q = gml_new_tensor_4d(ctx, GML_F32, B, H, Tq, dk);
    for (int64_t e = 0; e < gml_nelements(q); e++) ((float *)q->data)[e] = chk_uniform(&r, -1, 1);
    gml_tensor *k, *kf, *v, *vf;
    make_kv(ctx, t, B, G, Tk, dk, permuted, &r, &k, &kf);
    make_kv(ctx, t, B, G, Tk, dv, !permuted, &r, &v, &vf);
    gml_attn_opts o = {0};
    if (opt == 1) o.causal = GML_CAUSAL_BOTTOM_RIGHT;
    if (opt == 2) { /* lengths, a window, softcap, ALiBi, sinks */
        o.valid_lens = gml_new_tensor_1d(ctx, GML_I32, B);
        for (int64_t b = 0; b < B; b++) ((int32_t *)o.valid_lens->data)[b] = (int32_t)(Tk - b * Tk / 3);
        o.window = Tk / 2 + 1;
        o.softcap = 3;
        o.alibi_max_bias = 8;
        o.sinks = gml_new_tensor_1d(ctx, GML_F32, H);
        for (int64_t h = 0; h < H; h++) ((float *)o.sinks->data)[h] = chk_uniform(&r, -1, 1);
    }
    if (opt == 3) { /* a mask [Tq, Tk] hiding every third key */
        o.mask = gml_new_tensor_2d(ctx, GML_F32, Tq, Tk);
        for (int64_t e = 0; e < Tq * Tk; e++)
            ((float *)o.mask->data)[e] = e % 3 == 1 ? -INFINITY : chk_uniform(&r, -1, 1);
    }
    const float scale = 1 / sqrtf((float)dk);
    gml_tensor *yt = gml_flash_attn_ext(ctx, q, k, v, scale, &o);
    gml_tensor *yf = gml_flash_attn_ext(ctx, q, kf, vf, scale, &o);
    gml_graph *g = yt && yf ? gml_build_graph(ctx, (gml_tensor *[]){yt, yf}, 2) : NULL;
    if (!CHECK(g, "build: %s", gml_last_error(ctx))) {
        gml_free(ctx);
        return;
    }
    const int64_t n = gml_nelements(yt);
    float *ref = malloc((size_t)n * sizeof *ref), *first = malloc((size_t)n * sizeof *first);
    for (size_t i = 0; i < sizeof ISAS / sizeof *ISAS; i++) {
        if (!gml_cpu_has(ISAS[i])) continue;
        gml_set_isa(ISAS[i]);
        for (int th = 1; th <= 4; th++) {
            if (!CHECK(gml_graph_compute(g, th) == GML_OK, "%s", gml_graph_error(g))) continue;
            float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
            chk_read(yt, a);
            chk_read(yf, b);
            CHECK(memcmp(a, b, (size_t)n * 4) == 0, "%s, %d threads: typed K/V differs from f32 K/V "
                  "holding the same values", gml_isa_name(ISAS[i]), th);
            if (i == 0 && th == 1) memcpy(ref, a, (size_t)n * 4);
            if (th == 1) memcpy(first, a, (size_t)n * 4);
            CHECK(memcmp(a, first, (size_t)n * 4) == 0, "%s: %d threads differ from 1",
                  gml_isa_name(ISAS[i]), th);
            double mx = 0, d = 0;
            for (int64_t e = 0; e < n; e++) mx = fmax(mx, fabs(ref[e]));
            for (int64_t e = 0; e < n; e++) d = fmax(d, fabs((double)a[e] - ref[e]));
            CHECK(d <= 1e-5 * mx && mx > 0, "%s, %d threads: max |fast - reference| %.3g of %.3g",
                  gml_isa_name(ISAS[i]), th, d, mx);
            if (mx > 0) worst_ref = fmax(worst_ref, d / mx);
            if (th == 1 && i > 0) {
                const char *note = gml_graph_node_kernel(g, -1);
                char want[32];
                snprintf(want, sizeof want, "__%s", gml_isa_name(ISAS[i]));
                bool typed_node = false;
                for (int nd = -2; nd < 0; nd++) { /* the two flash_attn nodes */
                    const char *kn = gml_graph_node_kernel(g, nd);
                    if (kn && strstr(kn, "f16/bf16 K/V converted")) { /* per key block, in
                                                                        registers or packed */
                        typed_node = true;
                        CHECK(strstr(kn, want) != NULL, "note '%s' is not of %s", kn, want);
                    }
                }
                CHECK(typed_node, "no node notes the typed K/V path (last node: '%s')",
                      note ? note : "(none)");
            }
            free(a), free(b);
        }
    }
    gml_set_isa(GML_ISA_AUTO);
    free(ref), free(first);
    gml_graph_free(g);
    gml_free(ctx);
}

/* set_rows of f32 rows into an f16/bf16 cache: each element's bits are
 * gml_fp32_to_fp16/bf16's, rows not written untouched. */
static void set_rows_case(gml_type t, bool strided_src) {
    chk_case("set_rows f32 -> %s, %s source", gml_type_name(t), strided_src ? "strided" : "contiguous");
    chk_rng r = {11};
    const int64_t B = 2, G = 3, N = 9, n = 4, d = 37;
    for (size_t i = 0; i < sizeof ISAS / sizeof *ISAS; i++) {
        if (!gml_cpu_has(ISAS[i])) continue;
        gml_set_isa(ISAS[i]);
        gml_context *ctx = gml_init((gml_init_params){.mem_size = 4 << 20});
        gml_tensor *dst = gml_new_tensor_4d(ctx, t, B, G, N, d);
        memset(dst->data, 0x5a, gml_nbytes(dst));
        gml_tensor *src = strided_src ? gml_transpose(ctx, gml_new_tensor_4d(ctx, GML_F32, B, G, d, n), -2, -1)
                                      : gml_new_tensor_4d(ctx, GML_F32, B, G, n, d);
        float *vals = malloc((size_t)(B * G * n * d) * sizeof *vals);
        for (int64_t e = 0; e < B * G * n * d; e++) {
            vals[e] = e % 17 == 0 ? 65504.5f + (float)e : e % 13 == 0 ? 1e-6f * chk_uniform(&r, -1, 1)
                                                                   : chk_uniform(&r, -3, 3);
        }
        chk_write(src, vals);
        gml_tensor *idx = gml_new_tensor_1d(ctx, GML_I32, n);
        const int32_t rows[4] = {7, 0, 3, 8};
        memcpy(idx->data, rows, sizeof rows);
        gml_tensor *y = gml_set_rows(ctx, dst, src, idx);
        gml_graph *g = y ? gml_build_graph(ctx, &y, 1) : NULL;
        if (CHECK(g, "build: %s", gml_last_error(ctx)) &&
            CHECK(gml_graph_compute(g, 3) == GML_OK, "%s", gml_graph_error(g))) {
            long bad = 0;
            for (int64_t b = 0; b < B; b++)
                for (int64_t gg = 0; gg < G; gg++)
                    for (int64_t j = 0; j < N; j++) {
                        int64_t from = -1;
                        for (int64_t i2 = 0; i2 < n; i2++)
                            if (rows[i2] == j) from = i2;
                        for (int64_t c = 0; c < d; c++) {
                            uint16_t got, want = 0x5a5a;
                            memcpy(&got, gml_ptr(dst, b, gg, j, c), 2);
                            if (from >= 0) {
                                const float x = vals[((b * G + gg) * n + from) * d + c];
                                want = t == GML_F16 ? gml_fp32_to_fp16(x) : gml_fp32_to_bf16(x);
                            }
                            bad += got != want;
                        }
                    }
            CHECK(bad == 0, "%s: %ld elements differ from the scalar conversion", gml_isa_name(ISAS[i]), bad);
        }
        free(vals);
        gml_graph_free(g);
        gml_free(ctx);
    }
    gml_set_isa(GML_ISA_AUTO);
}

static void refusals(void) {
    chk_case("refusals");
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20});
    gml_tensor *q = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 1, 2, 3, 32), "q");
    gml_tensor *k8 = gml_set_name(gml_new_tensor_4d(ctx, GML_Q8_0, 1, 2, 5, 32), "k8");
    gml_tensor *v = gml_set_name(gml_new_tensor_4d(ctx, GML_F16, 1, 2, 5, 32), "v");
    CHECK(!gml_flash_attn_ext(ctx, q, k8, v, 1, NULL), "q8_0 k accepted");
    CHECK(strstr(gml_last_error(ctx), "flash_attn(q, k8, v): 'k8' is q8_0 [1,2,5,32]; k and v must "
                 "be f32, f16 or bf16") != NULL, "message: %s", gml_last_error(ctx));
    gml_free(ctx);
    ctx = gml_init((gml_init_params){.mem_size = 1 << 20});
    gml_tensor *qh = gml_set_name(gml_new_tensor_4d(ctx, GML_F16, 1, 2, 3, 32), "qh");
    gml_tensor *k = gml_set_name(gml_new_tensor_4d(ctx, GML_F16, 1, 2, 5, 32), "k");
    v = gml_set_name(gml_new_tensor_4d(ctx, GML_F16, 1, 2, 5, 32), "v");
    CHECK(!gml_flash_attn_ext(ctx, qh, k, v, 1, NULL), "f16 q accepted");
    CHECK(strstr(gml_last_error(ctx), "'qh' must be f32, got f16") != NULL, "message: %s",
          gml_last_error(ctx));
    gml_free(ctx);
    ctx = gml_init((gml_init_params){.mem_size = 1 << 20});
    gml_tensor *dst = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 4, 8), "cache");
    gml_tensor *src = gml_set_name(gml_new_tensor_2d(ctx, GML_F16, 2, 8), "rows");
    gml_tensor *idx = gml_set_name(gml_new_tensor_1d(ctx, GML_I32, 2), "idx");
    CHECK(!gml_set_rows(ctx, dst, src, idx), "f16 rows into f32 accepted");
    CHECK(strstr(gml_last_error(ctx), "set_rows(cache, rows, idx): src f16 [2,8] does not fit dst "
                 "f32 [4,8]") != NULL, "message: %s", gml_last_error(ctx));
    gml_free(ctx);
}

int main(void) {
    const gml_type types[] = {GML_F16, GML_BF16};
    for (int ti = 0; ti < 2; ti++) {
        const gml_type t = types[ti];
        one_case(t, 1, 4, 2, 1, 1, 16, 16, false, 0);
        one_case(t, 2, 6, 2, 3, 65, 24, 40, false, 1);
        one_case(t, 1, 4, 1, 17, 130, 33, 17, true, 2);
        one_case(t, 2, 2, 2, 5, 31, 64, 64, true, 3);
        one_case(t, 1, 8, 2, 1, 130, 128, 128, false, 2);
        set_rows_case(t, false);
        set_rows_case(t, true);
    }
    refusals();
    printf("flash_attn f16/bf16 K/V: bitwise the f32 K/V run on every ISA; fast vs reference "
           "max |diff| / max |out| %.2g\n", worst_ref);
    return chk_summary();
}
