/* The element types f16, bf16 and q8_0: sizes and names, the scalar
 * conversions against an independent reference that rounds by comparing
 * distances in double (every f16 and every bf16 pattern, the midpoints
 * between neighbours: ties; NaN, inf, subnormals, overflow), q8_0
 * quantization's rules, and builders refusing the types where an op does
 * not take them. */
#include "check.h"

#include <float.h>

static uint32_t bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static float from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* The value of an f16 pattern, from its definition. */
static double f16_value(uint16_t h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

/* Nearest of two neighbouring patterns lo < hi (positive magnitudes, hi
 * may be inf standing for `top`), ties to the even one. */
static uint16_t nearest(double x, uint16_t lo, double vlo, uint16_t hi, double vhi) {
    const double dl = x - vlo, dh = vhi - x;
    if (dl < dh) return lo;
    if (dh < dl) return hi;
    return (lo & 1) ? hi : lo;
}

/* f32 -> f16 by distances: find the neighbours among the 31744 finite
 * positive patterns by bisection; inf counts as 65536 for rounding. */
static uint16_t ref_to_f16(float f) {
    if (isnan(f)) return 0; /* checked apart */
    const double x = fabs((double)f);
    const uint16_t sign = signbit(f) ? 0x8000 : 0;
    uint16_t lo = 0, hi = 0x7c00; /* f16_value(lo) <= x < value(hi) (hi inf = 65536) */
    if (x >= 65536.0) return sign | 0x7c00;
    while (hi - lo > 1) {
        const uint16_t mid = (uint16_t)((lo + hi) / 2);
        if (f16_value(mid) <= x) lo = mid;
        else hi = mid;
    }
    const double vhi = hi == 0x7c00 ? 65536.0 : f16_value(hi);
    return sign | nearest(x, lo, f16_value(lo), hi, vhi);
}

/* f32 -> bf16 by distances: the two patterns around x, inf as 2^128. */
static uint16_t ref_to_bf16(float f) {
    const uint32_t u = bits(f) & 0x7fffffffu;
    const uint16_t sign = (uint16_t)((bits(f) >> 16) & 0x8000u);
    const uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    if (lo == 0x7f80) return sign | 0x7f80; /* inf */
    const double x = fabs((double)f), vlo = from_bits((uint32_t)lo << 16);
    const double vhi = hi == 0x7f80 ? ldexp(1, 128) : from_bits((uint32_t)hi << 16);
    return sign | nearest(x, lo, vlo, hi, vhi);
}

static void test_names(void) {
    chk_case("names and sizes");
    const struct { gml_type t; const char *name; size_t size; int64_t blk; } want[] = {
        {GML_F32, "f32", 4, 1}, {GML_I32, "i32", 4, 1}, {GML_F16, "f16", 2, 1},
        {GML_BF16, "bf16", 2, 1}, {GML_Q8_0, "q8_0", 34, 32}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        gml_type back = GML_TYPE_COUNT;
        CHECK(strcmp(gml_type_name(want[i].t), want[i].name) == 0, "name of %d", (int)want[i].t);
        CHECK(gml_type_size(want[i].t) == want[i].size, "size of %s", want[i].name);
        CHECK(gml_type_block_size(want[i].t) == want[i].blk, "block of %s", want[i].name);
        CHECK(gml_type_from_name(want[i].name, &back) && back == want[i].t, "from_name %s",
              want[i].name);
    }
    gml_type t;
    CHECK(!gml_type_from_name("f8", &t), "f8 is no type");
    CHECK(gml_row_size(GML_Q8_0, 96) == 102, "q8_0 row of 96: 3 blocks");
    CHECK(GML_F32 == 0 && GML_I32 == 1, "f32 and i32 keep their values");
}

static void test_f16(void) {
    chk_case("f16 -> f32, every pattern");
    for (uint32_t h = 0; h < 65536; h++) {
        const float got = gml_fp16_to_fp32((uint16_t)h);
        const double want = f16_value((uint16_t)h);
        if (isnan(want)) {
            if (!CHECK(isnan(got) && (bits(got) >> 31) == (h >> 15) &&
                           ((bits(got) >> 13) & 0x1ff) == (h & 0x1ff) && (bits(got) & 0x400000u),
                       "%04x: a quiet NaN with its sign and payload", h))
                return;
        } else if (!CHECK((double)got == want && (signbit(got) != 0) == (h >> 15 != 0),
                          "%04x: %.9g, want %.9g", h, (double)got, want)) {
            return;
        }
    }
    chk_case("f32 -> f16: every f16, its midpoints and their neighbours");
    long n = 0;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        const double v = f16_value((uint16_t)h);
        const double next = h + 1 == 0x7c00 ? 65536.0 : f16_value((uint16_t)(h + 1));
        const float mid = (float)((v + next) / 2); /* exact: f32 holds f16 midpoints */
        const float cand[] = {(float)v, mid, nextafterf(mid, 0), nextafterf(mid, INFINITY),
                              nextafterf((float)v, INFINITY)};
        for (size_t c = 0; c < sizeof cand / sizeof *cand; c++)
            for (int s = 0; s < 2; s++) {
                const float x = s ? -cand[c] : cand[c];
                const uint16_t got = gml_fp32_to_fp16(x), want = ref_to_f16(x);
                n++;
                if (!CHECK(got == want, "f16(%a) = %04x, want %04x", (double)x, got, want)) return;
            }
    }
    chk_case("f32 -> f16: random floats of every exponent");
    chk_rng r = chk_seed(16);
    for (int i = 0; i < 2000000; i++) {
        const float x = from_bits((uint32_t)chk_next(&r));
        if (isnan(x)) continue;
        const uint16_t got = gml_fp32_to_fp16(x), want = ref_to_f16(x);
        if (!CHECK(got == want, "f16(%a) = %04x, want %04x", (double)x, got, want)) return;
    }
    chk_case("f32 -> f16: special values");
    CHECK(gml_fp32_to_fp16(INFINITY) == 0x7c00 && gml_fp32_to_fp16(-INFINITY) == 0xfc00, "inf");
    CHECK(gml_fp32_to_fp16(65504.0f) == 0x7bff && gml_fp32_to_fp16(65520.0f) == 0x7c00,
          "65504 stays, 65520 (the tie above) overflows");
    CHECK(gml_fp32_to_fp16(FLT_MAX) == 0x7c00, "FLT_MAX overflows");
    CHECK(gml_fp32_to_fp16(0x1p-24f) == 0x0001 && gml_fp32_to_fp16(0x1p-25f) == 0x0000 &&
              gml_fp32_to_fp16(nextafterf(0x1p-25f, 1)) == 0x0001,
          "smallest subnormal; its half is a tie to 0; just above rounds up");
    CHECK(gml_fp32_to_fp16(-0.0f) == 0x8000 && gml_fp32_to_fp16(FLT_TRUE_MIN) == 0, "zeros");
    const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fa00000u, 0xff812345u};
    for (size_t i = 0; i < sizeof nans / sizeof *nans; i++) {
        const uint16_t h = gml_fp32_to_fp16(from_bits(nans[i]));
        CHECK((h & 0x7c00) == 0x7c00 && (h & 0x3ff) && (h & 0x200) &&
                  (h >> 15) == (nans[i] >> 31) && (h & 0x1ff) == ((nans[i] >> 13) & 0x1ff),
              "NaN %08x -> %04x: quiet, sign and top payload kept", nans[i], h);
    }
    CHECK(n > 300000, "%ld cases", n);
}

static void test_bf16(void) {
    chk_case("bf16 <-> f32");
    for (uint32_t h = 0; h < 65536; h++) {
        const float v = gml_bf16_to_fp32((uint16_t)h);
        if (!CHECK(bits(v) == h << 16, "bf16 %04x -> %08x", h, bits(v))) return;
        if ((h & 0x7fff) > 0x7f80) continue; /* NaN: below */
        /* the pattern, its midpoint to the next, and the floats around */
        const uint32_t base = h << 16;
        const uint32_t cand[] = {base, base + 0x8000u, base + 0x7fffu, base + 0x8001u, base + 1u};
        for (size_t c = 0; c < 5; c++) {
            const float x = from_bits(cand[c]);
            if (isnan(x)) continue;
            const uint16_t got = gml_fp32_to_bf16(x), want = ref_to_bf16(x);
            if (!CHECK(got == want, "bf16(%a) = %04x, want %04x", (double)x, got, want)) return;
        }
    }
    chk_rng r = chk_seed(17);
    for (int i = 0; i < 2000000; i++) {
        const float x = from_bits((uint32_t)chk_next(&r));
        if (isnan(x)) continue;
        const uint16_t got = gml_fp32_to_bf16(x), want = ref_to_bf16(x);
        if (!CHECK(got == want, "bf16(%a) = %04x, want %04x", (double)x, got, want)) return;
    }
    CHECK(gml_fp32_to_bf16(FLT_MAX) == 0x7f80, "FLT_MAX rounds to inf");
    CHECK(gml_fp32_to_bf16(FLT_TRUE_MIN) == 0x0000 && gml_fp32_to_bf16(0x1p-133f) == 0x0001,
          "subnormals round as any value");
    const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fffffffu, 0xff80ffffu};
    for (size_t i = 0; i < sizeof nans / sizeof *nans; i++) {
        const uint16_t h = gml_fp32_to_bf16(from_bits(nans[i]));
        CHECK((h & 0x7f80) == 0x7f80 && (h & 0x40) && (h >> 15) == (nans[i] >> 31) &&
                  (h & 0x3f) == ((nans[i] >> 16) & 0x3f),
              "NaN %08x -> %04x: quiet (never inf), sign and top payload kept", nans[i], h);
    }
}

static void test_q8_0(void) {
    chk_case("q8_0 quantize and dequantize");
    chk_rng r = chk_seed(8);
    enum { N = 32 * 64 };
    static float x[N], y[N];
    static gml_block_q8_0 q[N / 32];
    for (int i = 0; i < N; i++) x[i] = chk_uniform(&r, -3, 3) * (float)(1 + i / 256);
    for (int j = 0; j < 32; j++) x[j] = 0; /* a zero block */
    x[64] = 1e-30f;                        /* a block of tiny values */
    gml_quantize_row_q8_0(x, q, N);
    gml_dequantize_row_q8_0(q, y, N);
    for (int b = 0; b < N / 32; b++) {
        double amax = 0;
        for (int j = 0; j < 32; j++) amax = fmax(amax, fabs(x[b * 32 + j]));
        const float dref = (float)amax / 127.0f, d16 = gml_fp16_to_fp32(q[b].d);
        CHECK(q[b].d == gml_fp32_to_fp16(dref), "block %d: scale f16(amax / 127)", b);
        for (int j = 0; j < 32; j++) {
            const int i = b * 32 + j;
            /* y = d16 * q exactly, q the nearest integer to x / d */
            CHECK(y[i] == d16 * (float)q[b].qs[j], "block %d [%d]: dequantized d * q", b, j);
            const double t = dref ? (double)x[i] / dref : 0;
            CHECK(fabs(t - q[b].qs[j]) <= 0.5 + 1e-5, "block %d [%d]: q %d for x / d = %.6f", b,
                  j, q[b].qs[j], t);
            if (fabs(x[i]) == amax && amax > 0)
                CHECK(abs(q[b].qs[j]) == 127, "block %d: its largest value is +-127", b);
        }
    }
    CHECK(q[0].d == 0 && y[5] == 0, "a zero block is zeros");
    /* ties: x / d exactly k + 1/2 rounds away from zero, as roundf */
    float t[32] = {127, 2.5f, -2.5f, 0.5f, -0.5f, 1.5f};
    gml_block_q8_0 tq;
    gml_quantize_row_q8_0(t, &tq, 32);
    CHECK(tq.d == gml_fp32_to_fp16(1.0f) && tq.qs[0] == 127 && tq.qs[1] == 3 && tq.qs[2] == -3 &&
              tq.qs[3] == 1 && tq.qs[4] == -1 && tq.qs[5] == 2,
          "ties away from zero: %d %d %d %d %d", tq.qs[1], tq.qs[2], tq.qs[3], tq.qs[4], tq.qs[5]);
    t[7] = NAN;
    gml_quantize_row_q8_0(t, &tq, 32);
    gml_dequantize_row_q8_0(&tq, y, 32);
    CHECK(isnan(y[0]) && isnan(y[31]), "a block with a NaN dequantizes to NaN");
    t[7] = -INFINITY;
    gml_quantize_row_q8_0(t, &tq, 32);
    gml_dequantize_row_q8_0(&tq, y, 32);
    CHECK(isnan(y[0]) && isnan(y[31]), "a block with an inf dequantizes to NaN");
}

static void test_tensors(void) {
    chk_case("tensors of the new types");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *h = gml_new_tensor_2d(ctx, GML_F16, 3, 5);
    CHECK(h && h->nb[3] == 2 && h->nb[2] == 10 && gml_nbytes(h) == 30, "f16 [3,5] strides");
    gml_tensor *q = gml_new_tensor_3d(ctx, GML_Q8_0, 2, 3, 64);
    CHECK(q && q->nb[3] == 34 && q->nb[2] == 68 && q->nb[1] == 204 && gml_nbytes(q) == 408 &&
              gml_is_contiguous(q),
          "q8_0 [2,3,64]: 2 blocks a row");
    CHECK(!gml_new_tensor_2d(ctx, GML_Q8_0, 3, 33), "q8_0 last dim 33");
    CHECK_CONTAINS(gml_last_error(ctx), "multiple of 32");
    gml_clear_error(ctx);
    CHECK(!gml_new_tensor_1d(ctx, (gml_type)9, 3), "unknown type");
    gml_clear_error(ctx);

    gml_tensor *f = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 3, 5), "f");
    gml_set_name(h, "h");
    gml_set_name(q, "q");
    CHECK(!gml_add(ctx, h, h), "add(f16)");
    CHECK_CONTAINS(gml_last_error(ctx), "add(h): 'h' must be f32, got f16 [3,5]");
    gml_clear_error(ctx);
    CHECK(!gml_softmax(ctx, h, NULL, 1, false), "softmax(f16)");
    CHECK_CONTAINS(gml_last_error(ctx), "softmax(h): 'h' must be f32, got f16");
    gml_clear_error(ctx);
    CHECK(!gml_matmul(ctx, h, gml_transpose(ctx, f, 0, 1)), "matmul(f16 a)");
    CHECK_CONTAINS(gml_last_error(ctx), "matmul(h): 'h' must be f32, got f16 [3,5]");
    gml_clear_error(ctx);
    CHECK(!gml_cont(ctx, gml_transpose(ctx, q, 1, 2)), "cont(q8_0)");
    CHECK_CONTAINS(gml_last_error(ctx), "is q8_0 [2,64,3]; cont takes f32, i32, f16 or bf16");
    gml_clear_error(ctx);
    CHECK(!gml_reshape(ctx, q, 1, (int64_t[]){384}), "reshape(q8_0)");
    CHECK_CONTAINS(gml_last_error(ctx), "reshape(q): 'q' is q8_0 [2,3,64]");
    gml_clear_error(ctx);
    CHECK(!gml_slice(ctx, q, 1, 0, 2), "slice(q8_0)");
    CHECK_CONTAINS(gml_last_error(ctx), "only transpose and permute of a q8_0 leaf");
    gml_clear_error(ctx);
    gml_tensor *qt = gml_transpose(ctx, q, 1, 2);
    CHECK(qt && gml_nbytes(qt) == gml_nbytes(q) && !gml_is_contiguous(qt), "transpose(q8_0)");
    CHECK(!gml_transpose(ctx, qt, 1, 2), "transpose of a q8_0 view");
    gml_clear_error(ctx);
    CHECK(!gml_rms_norm(ctx, h, NULL, 1e-6f) && !gml_exp(ctx, h) && !gml_sum(ctx, h) &&
              !gml_repeat_interleave(ctx, h, 2, 0) && !gml_concat(ctx, h, h, 0) &&
              !gml_scale(ctx, h, 2.0f),
          "other ops refuse f16");
    CHECK(strstr(gml_last_error(ctx), "f16") != NULL, "message names the type: %s",
          gml_last_error(ctx));
    gml_clear_error(ctx);
    gml_tensor *hc = gml_cont(ctx, gml_transpose(ctx, h, 0, 1));
    CHECK(hc && hc->type == GML_F16 && hc->nb[3] == 2, "cont(f16) is f16");
    gml_free(ctx);
}

/* ---- cpy and cont between the types ------------------------------------------ */

static const gml_type FLOATS[] = {GML_F32, GML_F16, GML_BF16, GML_Q8_0};

/* Element e (row-major over t's shape) of t as f32, by the scalar
 * conversions; q8_0 only for a whole leaf. */
static float elem(const gml_tensor *t, const void *data, int64_t e) {
    int64_t i[4];
    int64_t r = e;
    for (int k = 3; k >= 0; k--) i[k] = r % t->ne[k], r /= t->ne[k];
    const char *base = (const char *)data + i[0] * (int64_t)t->nb[0] + i[1] * (int64_t)t->nb[1] +
                       i[2] * (int64_t)t->nb[2];
    uint16_t h;
    float f;
    switch (t->type) {
    case GML_Q8_0: {
        const gml_block_q8_0 *b = (const void *)(base + i[3] / 32 * 34);
        return gml_fp16_to_fp32(b->d) * (float)b->qs[i[3] % 32];
    }
    case GML_F16: memcpy(&h, base + i[3] * (int64_t)t->nb[3], 2); return gml_fp16_to_fp32(h);
    case GML_BF16: memcpy(&h, base + i[3] * (int64_t)t->nb[3], 2); return gml_bf16_to_fp32(h);
    default: memcpy(&f, base + i[3] * (int64_t)t->nb[3], 4); return f;
    }
}

/* Fills a whole leaf of any float type from random values. */
static void fill_any(gml_tensor *t, chk_rng *r) {
    const int64_t n = gml_nelements(t), row = t->ne[3];
    float *v = malloc((size_t)n * 4);
    for (int64_t e = 0; e < n; e++) v[e] = chk_uniform(r, -5, 5);
    if (n > 3) v[1] = NAN, v[2] = 1e-41f, v[3] = 70000.0f; /* q8_0: a NaN block */
    for (int64_t k = 0; k < n / row; k++) {
        char *d = (char *)t->data + k * (int64_t)t->nb[2]; /* 2-D..3-D leafs, contiguous */
        for (int64_t j = 0; j < row; j++) {
            const float x = v[k * row + j];
            if (t->type == GML_F32) memcpy(d + 4 * j, &x, 4);
            if (t->type == GML_F16) ((uint16_t *)(void *)d)[j] = gml_fp32_to_fp16(x);
            if (t->type == GML_BF16) ((uint16_t *)(void *)d)[j] = gml_fp32_to_bf16(x);
        }
        if (t->type == GML_Q8_0) gml_quantize_row_q8_0(v + k * row, (void *)d, row);
    }
    free(v);
}

static bool same_value(float a, float b) {
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, 4) == 0;
}

/* cpy(src, dst) for every pair of float types, src contiguous or (2-byte
 * and f32) transposed, at 1-4 threads under every ISA: the destination's
 * bytes equal the reference kernel's, and its values the scalar
 * conversion of the source's values. */
static void test_cpy_pairs(void) {
    const gml_isa isas[] = {GML_TEST_ISAS};
    chk_rng r = chk_seed(99);
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (int transposed = 0; transposed < 2; transposed++) {
                const gml_type ts = FLOATS[a], td = FLOATS[b];
                if (transposed && ts == GML_Q8_0) continue;
                chk_case("cpy %s -> %s%s", gml_type_name(ts), gml_type_name(td),
                         transposed ? " (transposed source)" : "");
                gml_context *ctx = chk_ctx(4 << 20);
                /* src leaf [3, 64, 96]: as [3, 96, 64] when transposed */
                gml_tensor *leaf = gml_new_tensor_3d(ctx, ts, 3, 64, 96);
                fill_any(leaf, &r);
                gml_tensor *src = transposed ? gml_transpose(ctx, leaf, 1, 2) : leaf;
                gml_tensor *dst = gml_new_tensor(ctx, td, 3, src->ne + 1);
                gml_tensor *y = gml_cpy(ctx, src, dst);
                gml_graph *g = gml_build_graph(ctx, &y, 1);
                if (!CHECK(g, "build: %s", gml_last_error(ctx))) {
                    gml_free(ctx);
                    continue;
                }
                const size_t bytes = gml_nbytes(dst);
                unsigned char *ref = malloc(bytes);
                const int64_t n = gml_nelements(dst);
                for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
                    if (!gml_cpu_has(isas[k])) continue;
                    gml_set_isa(isas[k]);
                    for (int nth = 1; nth <= 4; nth++) {
                        memset(dst->data, 0xcd, bytes);
                        if (!CHECK(gml_graph_compute(g, nth) == GML_OK, "compute: %s",
                                   gml_graph_error(g)))
                            continue;
                        if (k == 0 && nth == 1) {
                            memcpy(ref, dst->data, bytes);
                            /* values: the conversion of the source's (per q8_0 block:
                             * the quantization of the f32 values, checked apart) */
                            for (int64_t e = 0; e < n && td != GML_Q8_0; e++) {
                                const float want = td == GML_F16 ? gml_fp16_to_fp32(gml_fp32_to_fp16(elem(src, src->data, e)))
                                                   : td == GML_BF16 ? gml_bf16_to_fp32(gml_fp32_to_bf16(elem(src, src->data, e)))
                                                                    : elem(src, src->data, e);
                                if (!CHECK(same_value(elem(dst, dst->data, e), want),
                                           "element %lld: %g, want %g", (long long)e,
                                           (double)elem(dst, dst->data, e), (double)want))
                                    break;
                            }
                            if (td == GML_Q8_0) {
                                float row[96];
                                gml_block_q8_0 q[3];
                                for (int64_t k2 = 0; k2 < n / 96; k2++) {
                                    for (int j = 0; j < 96; j++) row[j] = elem(src, src->data, k2 * 96 + j);
                                    gml_quantize_row_q8_0(row, q, 96);
                                    CHECK(memcmp(q, (char *)dst->data + k2 * 102, 102) == 0,
                                          "row %lld quantized as gml_quantize_row_q8_0", (long long)k2);
                                }
                            }
                        } else {
                            CHECK(memcmp(ref, dst->data, bytes) == 0, "%s, %d threads: bytes differ "
                                  "from the reference kernel's", gml_isa_name(isas[k]), nth);
                        }
                    }
                }
                gml_set_isa(GML_ISA_AUTO);
                free(ref);
                gml_graph_free(g);
                gml_free(ctx);
            }
    chk_case("cpy refusals");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *q = gml_set_name(gml_new_tensor_2d(ctx, GML_Q8_0, 4, 64), "q");
    gml_tensor *i = gml_set_name(gml_new_tensor_2d(ctx, GML_I32, 64, 4), "i");
    gml_tensor *f = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 64, 4), "f");
    CHECK(!gml_cpy(ctx, i, gml_new_tensor_2d(ctx, GML_F16, 64, 4)), "i32 -> f16");
    CHECK_CONTAINS(gml_last_error(ctx), "types differ: [64,4] i32 into [64,4] f16");
    gml_clear_error(ctx);
    CHECK(!gml_cpy(ctx, gml_transpose(ctx, q, 0, 1), f), "q8_0 view as source");
    CHECK_CONTAINS(gml_last_error(ctx), "a q8_0 source must be a whole q8_0 tensor");
    gml_clear_error(ctx);
    CHECK(!gml_cpy(ctx, f, gml_transpose(ctx, q, 0, 1)), "q8_0 view as destination");
    CHECK_CONTAINS(gml_last_error(ctx), "only transpose and permute of a q8_0 leaf");
    gml_free(ctx);
}

int main(void) {
    test_cpy_pairs();
    test_names();
    test_f16();
    test_bf16();
    test_q8_0();
    test_tensors();
    return chk_summary();
}
