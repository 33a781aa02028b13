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
                           ((bits(got) >> 13) & 0x3ff) == (h & 0x3ff),
                       "%04x: NaN with its sign and payload", h))
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

int main(void) {
    test_names();
    test_f16();
    test_bf16();
    test_q8_0();
    test_tensors();
    return chk_summary();
}
