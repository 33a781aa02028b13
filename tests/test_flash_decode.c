/* flash_attn's decoding path (ops/flash_attn_dec.c, "decoding path"): up to 8
 * query rows per kv head, keys in chunks merged in order. On decode shapes
 * (B = 1 or 2, Tq 1 - 2, Tk 600 - 1100: keys split in 2 - 4 chunks) with
 * every option of gml_attn_opts (causal both alignments, positions, valid
 * lengths [B] and [B, Tq], a window, softcap, ALiBi, sinks, an additive mask
 * with -inf and garbage (NaN, inf) in K and V at keys it hides), f16 / bf16
 * K and V, strided K and V: under every ISA, the result at 1 - 4 threads is
 * bitwise the 1-thread one, within tolerance of the reference kernel (double),
 * and the node ran the decode micro-kernel of that ISA (keys in chunks where
 * the shapes split them); typed K / V give bitwise what f32 K / V holding the
 * converted values give; 9 rows per kv head take the other kernels. */
#include "check.h"

#include <inttypes.h>

static const gml_isa ISAS[] = {GML_TEST_ISAS};

/* Relative to the largest |reference| output: room for the float dot
 * products (d_k up to 128) and sums over 2048 keys. */
#define TOL 2e-5

enum { O_PLAIN, O_CAUSAL_POS, O_ALL, O_MASK, O_TOPLEFT, N_OPTS };
static const char *const OPT_NAMES[] = {"none", "causal + positions + lens", "window softcap alibi sinks lens",
                                        "mask -inf, garbage at hidden keys", "top-left causal, lens [B,Tq]"};

static double worst;

static float rounded(gml_type t, float x) {
    return t == GML_F16 ? gml_fp16_to_fp32(gml_fp32_to_fp16(x))
           : t == GML_BF16 ? gml_bf16_to_fp32(gml_fp32_to_bf16(x)) : x;
}

/* K or V [B, G, T, d] of type t, contiguous or (strided) a transposed view,
 * and its f32 twin; values rounded to t. garbage: NaN / inf at rows j with
 * hide[j]. */
static void make_kv(gml_context *ctx, gml_type t, int64_t B, int64_t G, int64_t T, int64_t d,
                    bool strided, chk_rng *r, const bool *hide, gml_tensor **typed, gml_tensor **f32) {
    *f32 = gml_new_tensor_4d(ctx, GML_F32, B, G, T, d);
    gml_tensor *store = strided ? gml_new_tensor_4d(ctx, t, B, G, d, T) : gml_new_tensor_4d(ctx, t, B, G, T, d);
    *typed = strided ? gml_transpose(ctx, store, -2, -1) : store;
    for (int64_t e = 0; e < B * G * T * d; e++) {
        const int64_t c = e % d, j = e / d % T, g = e / (d * T) % G, b = e / (d * T * G);
        float x = rounded(t, chk_uniform(r, -2, 2));
        if (hide && hide[j]) x = j % 2 ? NAN : INFINITY;
        ((float *)(*f32)->data)[e] = x;
        char *p = (char *)(*typed)->data + b * (int64_t)(*typed)->nb[0] + g * (int64_t)(*typed)->nb[1] +
                  j * (int64_t)(*typed)->nb[2] + c * (int64_t)(*typed)->nb[3];
        if (t == GML_F32) {
            memcpy(p, &x, 4);
        } else {
            const uint16_t h = t == GML_F16 ? gml_fp32_to_fp16(x) : gml_fp32_to_bf16(x);
            memcpy(p, &h, 2);
        }
    }
}

static void one_case(int64_t B, int64_t H, int64_t G, int64_t Tq, int64_t Tk, int64_t dk,
                     int64_t dv, gml_type kt, gml_type vt, bool strided, int opt) {
    chk_case("decode B%" PRId64 " H%" PRId64 " G%" PRId64 " Tq%" PRId64 " Tk%" PRId64 " dk%" PRId64
             " dv%" PRId64 " K %s V %s%s, options: %s", B, H, G, Tq, Tk, dk, dv, gml_type_name(kt),
             gml_type_name(vt), strided ? " strided" : "", OPT_NAMES[opt]);
    chk_rng r = {(uint64_t)(Tk * 31 + dk * 7 + opt)};
    gml_context *ctx = chk_ctx((size_t)(B * G * Tk * (dk + dv) * 12) + (8 << 20));
    gml_tensor *q = gml_new_tensor_4d(ctx, GML_F32, B, H, Tq, dk);
    for (int64_t e = 0; e < gml_nelements(q); e++) ((float *)q->data)[e] = chk_uniform(&r, -1, 1);
    bool *hide = calloc((size_t)Tk, 1);
    gml_attn_opts o = {0};
    if (opt == O_MASK) { /* every 5th key hidden for every row, some others for some */
        o.mask = gml_new_tensor_4d(ctx, GML_F32, B, H, Tq, Tk);
        for (int64_t e = 0; e < gml_nelements(o.mask); e++) {
            const int64_t j = e % Tk;
            hide[j] = j % 5 == 2;
            ((float *)o.mask->data)[e] = hide[j] || e % 7 == 3 ? -INFINITY : chk_uniform(&r, -1, 1);
        }
    }
    gml_tensor *k, *kf, *v, *vf;
    make_kv(ctx, kt, B, G, Tk, dk, strided, &r, opt == O_MASK ? hide : NULL, &k, &kf);
    make_kv(ctx, vt, B, G, Tk, dv, strided, &r, opt == O_MASK ? hide : NULL, &v, &vf);
    if (opt == O_CAUSAL_POS || opt == O_ALL) {
        o.causal = GML_CAUSAL_BOTTOM_RIGHT;
        o.positions = gml_new_tensor_2d(ctx, GML_I32, B, Tq);
        for (int64_t e = 0; e < B * Tq; e++) /* a cache step: positions of the new rows */
            ((int32_t *)o.positions->data)[e] = (int32_t)(Tk - 1 - (Tq - 1 - e % Tq) - 37 * (e / Tq));
        o.valid_lens = gml_new_tensor_1d(ctx, GML_I32, B);
        for (int64_t b = 0; b < B; b++) ((int32_t *)o.valid_lens->data)[b] = (int32_t)(Tk - 11 * b);
    }
    if (opt == O_ALL) {
        o.window = Tk / 3 + 5;
        o.softcap = 4;
        o.alibi_max_bias = 8;
        o.sinks = gml_new_tensor_1d(ctx, GML_F32, H);
        for (int64_t h = 0; h < H; h++) ((float *)o.sinks->data)[h] = chk_uniform(&r, -1, 3);
    }
    if (opt == O_TOPLEFT) {
        o.causal = GML_CAUSAL_TOP_LEFT;
        o.valid_lens = gml_new_tensor_2d(ctx, GML_I32, B, Tq);
        for (int64_t e = 0; e < B * Tq; e++)
            ((int32_t *)o.valid_lens->data)[e] = (int32_t)(e == 0 ? 0 : Tk - 100 * e); /* row 0: no key */
    }
    const float scale = 1 / sqrtf((float)dk);
    gml_tensor *yt = gml_flash_attn_ext(ctx, q, k, v, scale, &o);
    gml_tensor *yf = kt != GML_F32 || vt != GML_F32 || strided ? gml_flash_attn_ext(ctx, q, kf, vf, scale, &o) : NULL;
    gml_graph *g = yt ? gml_build_graph(ctx, yf ? (gml_tensor *[]){yt, yf} : &yt, yf ? 2 : 1) : NULL;
    if (!CHECK(g, "build: %s", gml_last_error(ctx))) {
        free(hide);
        gml_free(ctx);
        return;
    }
    const int64_t n = gml_nelements(yt);
    float *ref = malloc((size_t)n * 4), *first = malloc((size_t)n * 4), *a = malloc((size_t)n * 4),
          *b = malloc((size_t)n * 4);
    const bool dec = H / G * Tq <= 8;
    const bool split = dec && B * G < 16 && Tk >= 512;
    for (size_t i = 0; i < sizeof ISAS / sizeof *ISAS; i++) {
        if (!gml_cpu_has(ISAS[i])) continue;
        gml_set_isa(ISAS[i]);
        for (int th = 1; th <= 4; th++) {
            if (!CHECK(gml_graph_compute(g, th) == GML_OK, "%s", gml_graph_error(g))) continue;
            chk_read(yt, a);
            if (yf) {
                chk_read(yf, b);
                CHECK(memcmp(a, b, (size_t)n * 4) == 0, "%s, %d threads: typed or strided K/V differ "
                      "from f32 contiguous K/V holding the same values", gml_isa_name(ISAS[i]), th);
            }
            if (th == 1) memcpy(first, a, (size_t)n * 4);
            else CHECK(memcmp(a, first, (size_t)n * 4) == 0, "%s: %d threads differ from 1",
                       gml_isa_name(ISAS[i]), th);
            if (i == 0) {
                if (th == 1) memcpy(ref, a, (size_t)n * 4);
                continue;
            }
            const char *kn = gml_graph_node_kernel(g, gml_graph_find(g, yt));
            char tag[32];
            snprintf(tag, sizeof tag, "__%s", gml_isa_name(ISAS[i]));
            CHECK(kn && strstr(kn, tag) && (strstr(kn, "gml_f32_flash_dec_ukernel__") != NULL) == dec &&
                      (strstr(kn, "keys in chunks, merged in order") != NULL) == split,
                  "ran '%s' (want the %s kernel of %s%s)", kn ? kn : "?", dec ? "decode" : "wide",
                  gml_isa_name(ISAS[i]), split ? ", keys in chunks" : "");
            if (th > 1) continue;
            double mx = 0, err = 0;
            for (int64_t e = 0; e < n; e++) mx = fmax(mx, fabs(ref[e]));
            for (int64_t e = 0; e < n; e++) {
                if (isnan(ref[e]) || isnan(a[e])) {
                    CHECK(isnan(ref[e]) && isnan(a[e]), "element %" PRId64 ": %g, reference %g", e,
                          (double)a[e], (double)ref[e]);
                    continue;
                }
                if (ref[e] == 0 && a[e] != 0) CHECK(0, "element %" PRId64 ": %g, reference exactly 0", e, (double)a[e]);
                err = fmax(err, fabs((double)a[e] - ref[e]) / (mx > 0 ? mx : 1));
            }
            worst = fmax(worst, err);
            CHECK(err <= TOL, "%s: %.3g of max |out| from the reference (tolerance %g)",
                  gml_isa_name(ISAS[i]), err, TOL);
        }
    }
    gml_set_isa(GML_ISA_AUTO);
    free(ref), free(first), free(a), free(b), free(hide);
    gml_graph_free(g);
    gml_free(ctx);
}

int main(void) {
    for (int opt = 0; opt < N_OPTS; opt++) {
        one_case(1, 8, 2, 1, opt ? 700 : 1100, 64, 64, GML_F32, GML_F32, false, opt); /* 4 rows, 2 or 4 chunks */
        one_case(2, 6, 3, 2, 600, 33, 17, GML_F32, GML_F32, false, opt);   /* 4 rows, tails, 2 chunks */
    }
    one_case(1, 32, 8, 1, 600, 128, 128, GML_F16, GML_F16, false, O_CAUSAL_POS); /* C4's dims */
    one_case(1, 16, 4, 1, 600, 64, 64, GML_BF16, GML_F32, false, O_ALL);         /* C5's, bf16 K */
    one_case(1, 4, 1, 2, 600, 24, 40, GML_F16, GML_BF16, true, O_MASK);           /* 8 rows, strided typed */
    one_case(1, 4, 2, 1, 900, 20, 20, GML_F32, GML_F32, true, O_CAUSAL_POS);      /* strided f32: packed */
    one_case(1, 8, 1, 1, 300, 16, 16, GML_F32, GML_F32, false, O_ALL);            /* 8 rows, one chunk */
    one_case(1, 9, 1, 1, 600, 16, 16, GML_F32, GML_F32, false, O_PLAIN);          /* 9 rows: the wide kernel */
    one_case(20, 2, 1, 1, 600, 8, 8, GML_F32, GML_F32, false, O_CAUSAL_POS);     /* B G >= 16: no split */
    printf("decode path vs reference: max %.3g of max |out|\n", worst);
    return chk_summary();
}
