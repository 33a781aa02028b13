/* Partial attention and its merge as ops (gml_flash_attn_partial,
 * gml_attn_partial_merge, gml_attn_partial_finish): K and V (and the mask)
 * split into 1 - 4 pieces at arbitrary points, each piece's partial with its
 * first key, merged in key order, finished with the sinks: equal to
 * flash_attn over all keys within 1e-6 of max |out| under every ISA (the
 * reference kernels included), with masks (-inf too), causal with
 * positions, a window, softcap, ALiBi, valid lengths, sinks (joining once),
 * more than 8 rows per kv head; bitwise flash_attn's when the keys are one
 * piece and the rows a decode step's; bitwise the same at 1 - 4 threads;
 * the exact rules (an empty piece changes nothing, no key seen gives zeros);
 * the builders' refusals and their messages. */
#include "check.h"

#include <inttypes.h>

static const gml_isa ISAS[] = {GML_TEST_ISAS};
#define TOL 1e-6

static double worst;

enum { O_PLAIN, O_MASK, O_CAUSAL, O_ALL, N_OPTS };
static const char *const OPT_NAMES[] = {"none", "mask with -inf", "causal + positions + lens",
                                        "window softcap alibi sinks + positions + lens"};

/* x [.., T, d] -> its rows [start, start + len) along dim -2 (a view) */
static gml_tensor *rows_of(gml_context *ctx, gml_tensor *x, int64_t start, int64_t len) {
    return gml_slice(ctx, x, -2, start, len);
}

static void one_case(int64_t B, int64_t H, int64_t G, int64_t Tq, int64_t Tk, int64_t dk,
                     int64_t dv, int opt, int pieces, bool expect_bitwise) {
    chk_case("partial B%" PRId64 " H%" PRId64 " G%" PRId64 " Tq%" PRId64 " Tk%" PRId64 " dk%" PRId64
             " dv%" PRId64 ", %d pieces, options: %s", B, H, G, Tq, Tk, dk, dv, pieces, OPT_NAMES[opt]);
    chk_rng r = {(uint64_t)(Tk * 17 + pieces * 5 + opt)};
    gml_context *ctx = chk_ctx(64 << 20);
    gml_tensor *q = chk_new_input(ctx, GML_F32, 4, (int64_t[]){B, H, Tq, dk}, CHK_CONTIGUOUS, "q", &r, -1, 1);
    gml_tensor *k = chk_new_input(ctx, GML_F32, 4, (int64_t[]){B, G, Tk, dk}, CHK_CONTIGUOUS, "k", &r, -2, 2);
    gml_tensor *v = chk_new_input(ctx, GML_F32, 4, (int64_t[]){B, G, Tk, dv}, CHK_CONTIGUOUS, "v", &r, -1, 1);
    gml_attn_opts o = {0};
    gml_tensor *sinks = NULL;
    if (opt == O_MASK) {
        o.mask = gml_new_tensor_4d(ctx, GML_F32, B, 1, Tq, Tk);
        for (int64_t e = 0; e < gml_nelements(o.mask); e++)
            ((float *)o.mask->data)[e] = e % 4 == 1 ? -INFINITY : chk_uniform(&r, -1, 1);
    }
    if (opt == O_CAUSAL || opt == O_ALL) {
        o.causal = GML_CAUSAL_BOTTOM_RIGHT;
        o.positions = gml_new_tensor_2d(ctx, GML_I32, B, Tq);
        for (int64_t e = 0; e < B * Tq; e++)
            ((int32_t *)o.positions->data)[e] = (int32_t)(Tk - Tq + e % Tq - 13 * (e / Tq));
        o.valid_lens = gml_new_tensor_1d(ctx, GML_I32, B);
        for (int64_t b = 0; b < B; b++) ((int32_t *)o.valid_lens->data)[b] = (int32_t)(Tk - 7 * b);
    }
    if (opt == O_ALL) {
        o.window = Tk / 2 + 3;
        o.softcap = 5;
        o.alibi_max_bias = 8;
        sinks = gml_new_tensor_1d(ctx, GML_F32, H);
        for (int64_t h = 0; h < H; h++) ((float *)sinks->data)[h] = chk_uniform(&r, -1, 3);
    }
    gml_attn_opts full = o;
    full.sinks = sinks;
    const float scale = 1 / sqrtf((float)dk);
    /* flash_attn over all keys, made contiguous */
    gml_tensor *want = gml_cont(ctx, gml_flash_attn_ext(ctx, q, k, v, scale, &full));
    /* the pieces: cuts sorted, any length (0 too) */
    int64_t cuts[6] = {0};
    for (int s = 1; s < pieces; s++) cuts[s] = (int64_t)(chk_uniform(&r, 0, 1) * (float)(Tk + 1));
    cuts[pieces] = Tk;
    for (int s = 1; s < pieces; s++)
        for (int t = s + 1; t < pieces; t++)
            if (cuts[t] < cuts[s]) { const int64_t x = cuts[s]; cuts[s] = cuts[t]; cuts[t] = x; }
    gml_tensor *acc = NULL;
    for (int s = 0; s < pieces; s++) {
        const int64_t len = cuts[s + 1] - cuts[s];
        if (len == 0) continue; /* a view cannot be empty: an empty piece adds nothing anyway */
        gml_attn_opts po = o;
        if (o.mask) po.mask = gml_slice(ctx, o.mask, -1, cuts[s], len);
        gml_tensor *p = gml_flash_attn_partial(ctx, q, rows_of(ctx, k, cuts[s], len),
                                               rows_of(ctx, v, cuts[s], len), scale, &po, cuts[s]);
        acc = acc ? gml_attn_partial_merge(ctx, acc, p) : p;
    }
    gml_tensor *got = gml_attn_partial_finish(ctx, acc, sinks);
    gml_graph *g = got ? gml_build_graph(ctx, (gml_tensor *[]){got, want}, 2) : NULL;
    if (!CHECK(g, "build: %s", gml_last_error(ctx))) {
        gml_free(ctx);
        return;
    }
    const int64_t n = gml_nelements(got);
    float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4), *first = malloc((size_t)n * 4);
    for (size_t i = 0; i < sizeof ISAS / sizeof *ISAS; i++) {
        if (!gml_cpu_has(ISAS[i])) continue;
        gml_set_isa(ISAS[i]);
        for (int th = 1; th <= 4; th++) {
            if (!CHECK(gml_graph_compute(g, th) == GML_OK, "%s", gml_graph_error(g))) continue;
            chk_read(got, a);
            chk_read(want, b);
            if (th == 1) memcpy(first, a, (size_t)n * 4);
            else CHECK(memcmp(a, first, (size_t)n * 4) == 0, "%s: %d threads differ from 1",
                       gml_isa_name(ISAS[i]), th);
            if (th > 1) continue;
            if (expect_bitwise && i > 0)
                CHECK(memcmp(a, b, (size_t)n * 4) == 0, "%s: one piece, decode rows: not bitwise "
                      "flash_attn's", gml_isa_name(ISAS[i]));
            double mx = 0, err = 0;
            for (int64_t e = 0; e < n; e++) mx = fmax(mx, fabs(b[e]));
            for (int64_t e = 0; e < n; e++) {
                if (isnan(a[e]) || isnan(b[e])) {
                    CHECK(isnan(a[e]) && isnan(b[e]), "element %" PRId64 ": %g, flash_attn %g", e,
                          (double)a[e], (double)b[e]);
                    continue;
                }
                if (b[e] == 0) CHECK(a[e] == 0, "element %" PRId64 ": %g, flash_attn exactly 0", e, (double)a[e]);
                err = fmax(err, fabs((double)a[e] - b[e]) / (mx > 0 ? mx : 1));
            }
            worst = fmax(worst, err);
            CHECK(err <= TOL, "%s: %.3g of max |out| from flash_attn (tolerance %g; cuts %" PRId64
                  " %" PRId64 " %" PRId64 ")", gml_isa_name(ISAS[i]), err, TOL, cuts[1], cuts[2], cuts[3]);
        }
    }
    gml_set_isa(GML_ISA_AUTO);
    free(a), free(b), free(first);
    gml_graph_free(g);
    gml_free(ctx);
}

static void refusals(void) {
    chk_case("builder refusals");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *q = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 1, 4, 1, 8), "q");
    gml_tensor *k = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 1, 2, 5, 8), "k");
    gml_tensor *v = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 1, 2, 5, 6), "v");
    gml_tensor *s = gml_set_name(gml_new_tensor_1d(ctx, GML_F32, 4), "s");
    struct {
        gml_attn_opts o;
        int64_t key0;
        const char *msg;
    } cases[] = {
        {{.sinks = s}, 0, "flash_attn_partial(q, s): sinks join the sum once: give them to attn_partial_finish"},
        {{.causal = GML_CAUSAL_BOTTOM_RIGHT}, 0, "flash_attn_partial(q, k, v): bottom-right causal needs positions"},
        {{.window = 3, .causal = GML_CAUSAL_TOP_LEFT}, 0, "flash_attn_partial(q, k, v): a window needs positions"},
        {{.alibi_max_bias = 8}, 2, "flash_attn_partial(q, k, v): alibi needs positions (each query's absolute position; the keys are 2 .. 6"},
        {{0}, -1, "flash_attn_partial(q, k, v): first key -1 must be in [0, 2^31 - 1 - Tk] (Tk = 5)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gml_context *c = chk_ctx(1 << 20);
        gml_tensor *q2 = gml_set_name(gml_new_tensor_4d(c, GML_F32, 1, 4, 1, 8), "q");
        gml_tensor *k2 = gml_set_name(gml_new_tensor_4d(c, GML_F32, 1, 2, 5, 8), "k");
        gml_tensor *v2 = gml_set_name(gml_new_tensor_4d(c, GML_F32, 1, 2, 5, 6), "v");
        gml_attn_opts o = cases[i].o;
        if (o.sinks) o.sinks = gml_set_name(gml_new_tensor_1d(c, GML_F32, 4), "s");
        gml_tensor *t = gml_flash_attn_partial(c, q2, k2, v2, 0.5f, &o, cases[i].key0);
        const char *e = gml_last_error(c);
        CHECK(!t && e && strncmp(e, cases[i].msg, strlen(cases[i].msg)) == 0, "case %zu: got '%s', want '%s...'",
              i, e ? e : "(none)", cases[i].msg);
        gml_free(c);
    }
    /* top-left causal needs no positions; merge and finish check shapes */
    CHECK(gml_flash_attn_partial(ctx, q, k, v, 0.5f, &(gml_attn_opts){.causal = GML_CAUSAL_TOP_LEFT}, 3) != NULL,
          "top-left causal without positions: %s", gml_last_error(ctx));
    gml_tensor *pa = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 1, 4, 1, 8), "pa");
    gml_tensor *pb = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 1, 4, 2, 8), "pb");
    CHECK(!gml_attn_partial_merge(ctx, pa, pb) &&
              strcmp(gml_last_error(ctx), "attn_partial_merge(pa, pb): want two partials of one shape "
                     "[..., d_v + 2] (d_v >= 1; flash_attn_partial's), got [1,4,1,8] and [1,4,2,8]") == 0,
          "merge of different shapes: '%s'", gml_last_error(ctx));
    gml_context *c2 = chk_ctx(1 << 20);
    gml_tensor *p2 = gml_set_name(gml_new_tensor_4d(c2, GML_F32, 1, 4, 1, 8), "p");
    gml_tensor *s3 = gml_set_name(gml_new_tensor_1d(c2, GML_F32, 3), "s3");
    CHECK(!gml_attn_partial_finish(c2, p2, s3) &&
              strcmp(gml_last_error(c2), "attn_partial_finish(p, s3): sinks must be f32 [H] for a "
                     "partial [B, H, Tq, d_v + 2], got f32 [3] and [1,4,1,8]") == 0,
          "finish with wrong sinks: '%s'", gml_last_error(c2));
    gml_free(c2);
    gml_context *c3 = chk_ctx(1 << 20);
    gml_tensor *p3 = gml_set_name(gml_new_tensor_2d(c3, GML_F32, 3, 2), "p");
    CHECK(!gml_attn_partial_finish(c3, p3, NULL) &&
              strcmp(gml_last_error(c3), "attn_partial_finish(p): want a partial [..., d_v + 2] "
                     "(d_v >= 1), got [3,2]") == 0,
          "finish of a too narrow tensor: '%s'", gml_last_error(c3));
    gml_free(c3);
    gml_free(ctx);
}

int main(void) {
    for (int opt = 0; opt < N_OPTS; opt++)
        for (int pieces = 1; pieces <= 4; pieces++) {
            one_case(1, 8, 2, 1, 700, 32, 24, opt, pieces, pieces == 1); /* decode */
            one_case(2, 4, 2, 5, 90, 17, 9, opt, pieces, false); /* 10 rows per kv head: 2 groups */
        }
    one_case(1, 4, 4, 1, 1300, 64, 64, O_ALL, 3, false); /* chunks inside the pieces */
    refusals();
    printf("merged partials vs flash_attn: max %.3g of max |out|\n", worst);
    return chk_summary();
}
