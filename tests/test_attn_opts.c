/* The options of flash_attn and softmax (gml_attn_opts: sliding window,
 * ALiBi, soft-capping, sinks, top-left / bottom-right causal, positions)
 * against a naive double reference written here, independently of the
 * ops' reference kernels: each option alone and combined, GQA, odd sizes,
 * non-contiguous q/k/v, thread counts 1-7, every ISA the CPU has; ALiBi
 * slopes against the paper's and BLOOM's closed forms; softmax_ext against
 * flash_attn_ext; fully masked rows with sinks; the builders' errors. */
#include "check.h"

#include <ggmlite/ggmlite.h>
#include <ggmlite/io.h>

typedef struct opt_case {
    int64_t B, H, G, Tq, Tk, dk, dv;
    gml_causal causal;
    int64_t window;
    float softcap, alibi;
    bool sinks, positions, mask;
    int lens; /* 0 none, 1 [B], 2 [B, Tq] */
    chk_layout lq, lk, lv;
} opt_case;

/* ---- the naive reference -------------------------------------------------- */

/* ALiBi slopes written from the papers: H a power of two: 2^(-mb (h+1) / H);
 * otherwise (BLOOM) the slopes of the closest power of two n below, then
 * every other slope of 2n, starting at the first: 2^(-mb p / (2n)), p = 1, 3, 5.. */
static double naive_slope(double mb, int64_t h, int64_t H) {
    int64_t n = 1;
    while (n * 2 <= H) n *= 2;
    if (h < n) return pow(2.0, -mb * (double)(h + 1) / (double)n);
    const int64_t p = 2 * (h - n) + 1;
    return pow(2.0, -mb * (double)p / (double)(2 * n));
}

typedef struct naive_in {
    const opt_case *c;
    const float *q, *k, *v, *mask, *sinks; /* dense */
    const int32_t *lens, *pos;
    float scale;
} naive_in;

/* Weights w[b, h, i, j] (dense [B, H, Tq, Tk]); a row of NaN where a
 * visible score is not finite (not used here: finite inputs). */
static void naive_weights(const naive_in *in, const float *x /* scores or NULL */, double *w) {
    const opt_case *c = in->c;
    const int64_t rep = c->H / c->G;
    double *s = malloc(sizeof(double) * (size_t)c->Tk);
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < c->Tq; i++) {
                double ip = in->pos ? in->pos[b * c->Tq + i]
                            : c->causal == GML_CAUSAL_TOP_LEFT ? (double)i
                                                               : (double)(i + c->Tk - c->Tq);
                double m = -INFINITY;
                for (int64_t j = 0; j < c->Tk; j++) {
                    bool seen = true;
                    if (c->causal != GML_CAUSAL_NONE || c->window > 0) seen = (double)j <= ip;
                    if (c->window > 0) seen = seen && ip - (double)j < (double)c->window;
                    if (c->lens == 1) seen = seen && j < in->lens[b];
                    if (c->lens == 2) seen = seen && j < in->lens[b * c->Tq + i];
                    const double mv = in->mask ? in->mask[(i * c->Tk) + j] : 0.0; /* mask [Tq, Tk] */
                    if (mv == -INFINITY) seen = false;
                    if (!seen) {
                        s[j] = -INFINITY;
                        continue;
                    }
                    double d;
                    if (x) {
                        d = (double)x[((b * c->H + h) * c->Tq + i) * c->Tk + j] * in->scale;
                    } else {
                        d = 0;
                        for (int64_t e = 0; e < c->dk; e++)
                            d += (double)in->q[((b * c->H + h) * c->Tq + i) * c->dk + e] *
                                 in->k[((b * c->G + h / rep) * c->Tk + j) * c->dk + e];
                        d *= in->scale;
                    }
                    if (c->softcap > 0) d = c->softcap * tanh(d / c->softcap);
                    d += mv;
                    if (c->alibi > 0) d += naive_slope(c->alibi, h, c->H) * ((double)j - ip);
                    s[j] = d;
                    if (d > m) m = d;
                }
                double *wr = w + ((b * c->H + h) * c->Tq + i) * c->Tk;
                if (m == -INFINITY) { /* no visible key: zeros, sink or not */
                    for (int64_t j = 0; j < c->Tk; j++) wr[j] = 0;
                    continue;
                }
                const double sk = in->sinks ? in->sinks[h] : -INFINITY;
                if (sk > m) m = sk;
                double sum = in->sinks ? exp(sk - m) : 0;
                for (int64_t j = 0; j < c->Tk; j++) sum += s[j] == -INFINITY ? 0 : exp(s[j] - m);
                for (int64_t j = 0; j < c->Tk; j++)
                    wr[j] = s[j] == -INFINITY ? 0 : exp(s[j] - m) / sum;
            }
    free(s);
}

/* ---- one case -------------------------------------------------------------- */

typedef struct verify_data {
    gml_tensor *out;
    const double *want;
    double atol, rtol;
} verify_data;

static void verify(void *user) {
    verify_data *d = user;
    CHECK_CLOSE(d->out, d->want, d->atol, d->rtol, "against the naive reference");
}

static const gml_isa ISAS[] = {GML_TEST_FAST_ISAS};
static const gml_isa ALL_ISAS[] = {GML_TEST_ISAS};

/* Runs g's out under the reference and every ISA variant the CPU has, at
 * every thread count of CHECK_RUN, against want. */
static void run_all_isas(gml_graph *g, gml_tensor *out, const double *want, double atol,
                         double rtol) {
    verify_data d = {out, want, atol, rtol};
    const gml_isa saved = gml_get_isa();
    for (size_t s = 0; s < sizeof ISAS / sizeof *ISAS; s++) {
        if (gml_set_isa(ISAS[s]) != GML_OK) continue; /* not on this CPU */
        gml_set_isa(saved);
        CHECK_RUN(g, .outs = &out, .n_outs = 1, .verify = verify, .user = &d, .isa = ISAS[s]);
    }
}

static void run_case(const opt_case *c, uint64_t seed) {
    chk_case("B%lld H%lld G%lld Tq%lld Tk%lld dk%lld dv%lld causal%d W%lld cap%g alibi%g sinks%d "
             "pos%d mask%d lens%d layouts %s/%s/%s",
             (long long)c->B, (long long)c->H, (long long)c->G, (long long)c->Tq, (long long)c->Tk,
             (long long)c->dk, (long long)c->dv, (int)c->causal, (long long)c->window,
             (double)c->softcap, (double)c->alibi, c->sinks, c->positions, c->mask, c->lens,
             chk_layout_name(c->lq), chk_layout_name(c->lk), chk_layout_name(c->lv));
    chk_rng rng = chk_seed(seed);
    gml_context *ctx = chk_ctx((size_t)64 << 20);
    gml_tensor *q = chk_new_input(ctx, GML_F32, 4, (int64_t[]){c->B, c->H, c->Tq, c->dk}, c->lq,
                                  "q", &rng, -1.5f, 1.5f);
    gml_tensor *k = chk_new_input(ctx, GML_F32, 4, (int64_t[]){c->B, c->G, c->Tk, c->dk}, c->lk,
                                  "k", &rng, -1.5f, 1.5f);
    gml_tensor *v = chk_new_input(ctx, GML_F32, 4, (int64_t[]){c->B, c->G, c->Tk, c->dv}, c->lv,
                                  "v", &rng, -1, 1);
    gml_attn_opts o = {.causal = c->causal, .window = c->window, .softcap = c->softcap,
                       .alibi_max_bias = c->alibi};
    naive_in in = {.c = c, .scale = 1.0f / sqrtf((float)c->dk) * (c->softcap > 0 ? 3.0f : 1.0f)};
    if (c->mask) { /* [Tq, Tk]: some keys -inf, the others small biases */
        o.mask = gml_new_tensor(ctx, GML_F32, 2, (int64_t[]){c->Tq, c->Tk});
        gml_set_name(o.mask, "mask");
        float *m = o.mask->data;
        for (int64_t e = 0; e < c->Tq * c->Tk; e++)
            m[e] = chk_randint(&rng, 0, 6) == 0 ? -INFINITY : chk_uniform(&rng, -0.5f, 0.5f);
        in.mask = m;
    }
    if (c->sinks) {
        o.sinks = chk_new_input(ctx, GML_F32, 1, (int64_t[]){c->H}, CHK_CONTIGUOUS, "sinks", &rng,
                                -1, 3);
        in.sinks = o.sinks->data;
    }
    if (c->positions) { /* positions anywhere in the cache, some before the window's reach */
        o.positions = chk_new_input(ctx, GML_I32, 2, (int64_t[]){c->B, c->Tq}, CHK_CONTIGUOUS,
                                    "pos", &rng, -1, (float)(c->Tk + 2));
        in.pos = o.positions->data;
    }
    if (c->lens) {
        o.valid_lens = c->lens == 1 ? chk_new_input(ctx, GML_I32, 1, (int64_t[]){c->B},
                                                    CHK_CONTIGUOUS, "lens", &rng, 0, (float)c->Tk)
                                    : chk_new_input(ctx, GML_I32, 2, (int64_t[]){c->B, c->Tq},
                                                    CHK_CONTIGUOUS, "lens", &rng, 0, (float)c->Tk);
        in.lens = o.valid_lens->data;
    }
    float *qd = chk_dense(q), *kd = chk_dense(k), *vd = chk_dense(v);
    in.q = qd;
    in.k = kd;
    in.v = vd;
    const size_t nw = (size_t)(c->B * c->H * c->Tq * c->Tk), no = (size_t)(c->B * c->H * c->Tq * c->dv);
    double *w = malloc(nw * sizeof *w), *want = calloc(no, sizeof *want);
    naive_weights(&in, NULL, w);
    const int64_t rep = c->H / c->G;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < c->Tq; i++)
                for (int64_t j = 0; j < c->Tk; j++) {
                    const double wij = w[((b * c->H + h) * c->Tq + i) * c->Tk + j];
                    if (wij == 0) continue;
                    for (int64_t e = 0; e < c->dv; e++)
                        want[((b * c->H + h) * c->Tq + i) * c->dv + e] +=
                            wij * vd[((b * c->G + h / rep) * c->Tk + j) * c->dv + e];
                }

    gml_tensor *out = gml_flash_attn_ext(ctx, q, k, v, in.scale, &o);
    if (!CHECK(out != NULL, "flash_attn_ext: %s", gml_last_error(ctx))) goto done;
    gml_graph *g = gml_build_graph(ctx, &out, 1);
    run_all_isas(g, out, want, 3e-6, 3e-5);
    gml_graph_free(g);

    /* softmax_ext over the float scores x = q k^T (G = H here), with the
     * same options: against the weights, and its weights times v against
     * flash_attn_ext's output */
    if (c->G == c->H) {
        gml_tensor *x = gml_new_tensor(ctx, GML_F32, 4, (int64_t[]){c->B, c->H, c->Tq, c->Tk});
        gml_set_name(x, "x");
        float *xd = x->data;
        for (int64_t bh = 0; bh < c->B * c->H; bh++)
            for (int64_t i = 0; i < c->Tq; i++)
                for (int64_t j = 0; j < c->Tk; j++) {
                    double d = 0;
                    for (int64_t e = 0; e < c->dk; e++)
                        d += (double)qd[(bh * c->Tq + i) * c->dk + e] * kd[(bh * c->Tk + j) * c->dk + e];
                    xd[(bh * c->Tq + i) * c->Tk + j] = (float)d;
                }
        naive_weights(&in, xd, w);
        gml_tensor *p = gml_softmax_ext(ctx, x, in.scale, &o);
        if (!CHECK(p != NULL, "softmax_ext: %s", gml_last_error(ctx))) goto done;
        g = gml_build_graph(ctx, &p, 1);
        run_all_isas(g, p, w, 2e-6, 2e-5);
        /* softmax_ext's weights times v agree with flash_attn_ext's output */
        gml_graph *g2 = gml_build_graph(ctx, (gml_tensor *[]){out, p}, 2);
        CHECK(gml_graph_compute(g2, 2) == GML_OK, "compute: %s", gml_graph_error(g2));
        float *pd = chk_dense(p), *od = chk_dense(out);
        double worst = 0;
        for (int64_t bh = 0; bh < c->B * c->H; bh++)
            for (int64_t i = 0; i < c->Tq; i++)
                for (int64_t e = 0; e < c->dv; e++) {
                    double acc = 0;
                    for (int64_t j = 0; j < c->Tk; j++)
                        acc += (double)pd[(bh * c->Tq + i) * c->Tk + j] * vd[(bh * c->Tk + j) * c->dv + e];
                    worst = fmax(worst, fabs(acc - od[(bh * c->Tq + i) * c->dv + e]));
                }
        CHECK(worst < 1e-5, "softmax_ext . v vs flash_attn_ext: max |diff| %g", worst);
        free(pd);
        free(od);
        gml_graph_free(g2);
        gml_graph_free(g);
    }
done:
    free(w);
    free(want);
    free(qd);
    free(kd);
    free(vd);
    gml_free(ctx);
}

/* ---- ALiBi slopes ------------------------------------------------------------ */

static void test_slopes(void) {
    chk_case("alibi slopes");
    for (int64_t h = 0; h < 8; h++) { /* the paper, H = 8: 1/2, 1/4, ..., 1/256 */
        const float want = ldexpf(1.0f, -(int)(h + 1));
        CHECK(gml_alibi_slope(8.0f, h, 8) == want, "H=8 head %lld: %.9g, want %.9g", (long long)h,
              (double)gml_alibi_slope(8.0f, h, 8), (double)want);
    }
    /* BLOOM, H = 12: the 8 slopes of H = 8, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 */
    static const double bloom12[12] = {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125,
                                       0.00390625, 0.70710678118654752, 0.35355339059327376,
                                       0.17677669529663688, 0.08838834764831844};
    for (int64_t h = 0; h < 12; h++) {
        const float got = gml_alibi_slope(8.0f, h, 12);
        CHECK(got == (float)bloom12[h] && fabs(naive_slope(8, h, 12) - bloom12[h]) < 1e-15,
              "H=12 head %lld: %.9g, want %.9g", (long long)h, (double)got, bloom12[h]);
    }
    CHECK(gml_alibi_slope(0.0f, 0, 8) == 0.0f, "max_bias 0: no slope");
    CHECK(fabsf(gml_alibi_slope(4.0f, 2, 6) - (float)naive_slope(4, 2, 6)) < 1e-7f, "H=6 mb=4");
}

/* ---- the window skips key blocks ------------------------------------------ */

/* K and V rows outside the window hold NaN: they must not reach the output
 * (a kernel that weighed them, or multiplied their 0 weights with NaN, would
 * give NaN). Decode: one query, positions given. That whole key blocks are
 * skipped (not only masked) is what tools/bench.c's window row measures. */
static void test_window_skips(void) {
    chk_case("window: rows outside hold NaN");
    chk_rng rng = chk_seed(77);
    gml_context *ctx = chk_ctx(16 << 20);
    const int64_t Tk = 1000, W = 40, H = 4, d = 16;
    gml_tensor *q = chk_new_input(ctx, GML_F32, 4, (int64_t[]){1, H, 1, d}, CHK_CONTIGUOUS, "q",
                                  &rng, -1, 1);
    gml_tensor *k = chk_new_input(ctx, GML_F32, 4, (int64_t[]){1, 1, Tk, d}, CHK_CONTIGUOUS, "k",
                                  &rng, -1, 1);
    gml_tensor *v = chk_new_input(ctx, GML_F32, 4, (int64_t[]){1, 1, Tk, d}, CHK_CONTIGUOUS, "v",
                                  &rng, -1, 1);
    gml_tensor *pos = gml_new_tensor(ctx, GML_I32, 2, (int64_t[]){1, 1});
    ((int32_t *)pos->data)[0] = 700;
    float *kd = k->data, *vd = v->data;
    for (int64_t j = 0; j < Tk; j++)
        if (j <= 700 - W || j > 700)
            for (int64_t e = 0; e < d; e++) kd[j * d + e] = vd[j * d + e] = NAN;
    gml_attn_opts o = {.positions = pos, .window = W, .causal = GML_CAUSAL_BOTTOM_RIGHT};
    gml_tensor *out = gml_flash_attn_ext(ctx, q, k, v, 0.25f, &o);
    gml_graph *g = gml_build_graph(ctx, &out, 1);
    const gml_isa saved = gml_get_isa();
    for (size_t s = 0; s < sizeof ALL_ISAS / sizeof *ALL_ISAS; s++) {
        if (gml_set_isa(ALL_ISAS[s]) != GML_OK) continue;
        CHECK(gml_graph_compute(g, 2) == GML_OK, "compute");
        float *od = chk_dense(out);
        bool finite = true;
        for (int64_t e = 0; e < H * d; e++) finite &= isfinite(od[e]);
        CHECK(finite, "%s: NaN outside the window reached the output", gml_isa_name(ALL_ISAS[s]));
        free(od);
    }
    gml_set_isa(saved);
    gml_graph_free(g);
    gml_free(ctx);
}

/* ---- builder errors ------------------------------------------------------------ */

static void test_errors(void) {
    chk_case("builder errors");
    chk_rng rng = chk_seed(5);
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *q = chk_new_input(ctx, GML_F32, 4, (int64_t[]){2, 4, 3, 8}, CHK_CONTIGUOUS, "q",
                                  &rng, -1, 1);
    gml_tensor *k = chk_new_input(ctx, GML_F32, 4, (int64_t[]){2, 2, 5, 8}, CHK_CONTIGUOUS, "k",
                                  &rng, -1, 1);
    gml_tensor *x3 = chk_new_input(ctx, GML_F32, 3, (int64_t[]){4, 3, 5}, CHK_CONTIGUOUS, "x3",
                                   &rng, -1, 1);
    gml_tensor *bad_sinks = gml_set_name(gml_new_tensor(ctx, GML_F32, 1, (int64_t[]){2}), "sk");
    gml_tensor *bad_pos = gml_set_name(gml_new_tensor(ctx, GML_I32, 2, (int64_t[]){2, 4}), "ps");
    gml_tensor *f32_pos = gml_set_name(gml_new_tensor(ctx, GML_F32, 2, (int64_t[]){2, 3}), "pf");
    struct {
        gml_attn_opts o;
        bool softmax3;
        const char *want;
    } cases[] = {
        {{.sinks = bad_sinks}, false,
         "flash_attn(q, sk): sinks must be f32 [4] ([H], one logit per query head), got f32 [2]"},
        {{.positions = bad_pos}, false,
         "flash_attn(q, ps): positions must be i32 [2,3] ([B, Tq]), got i32 [2,4]"},
        {{.positions = f32_pos}, false,
         "flash_attn(q, pf): positions must be i32 [2,3] ([B, Tq]), got f32 [2,3]"},
        {{.window = -1}, false, "flash_attn(q): window -1 is negative (0: no window)"},
        {{.softcap = -1}, false, "flash_attn(q): softcap -1 must be finite and >= 0 (0: none)"},
        {{.softcap = NAN}, false, "flash_attn(q): softcap nan must be finite and >= 0 (0: none)"},
        {{.alibi_max_bias = INFINITY}, false,
         "flash_attn(q): alibi max bias inf must be finite and >= 0 (0: none)"},
        {{.causal = (gml_causal)3}, false,
         "flash_attn(q): causal 3 is not NONE (0), BOTTOM_RIGHT (1) or TOP_LEFT (2)"},
        {{.alibi_max_bias = 8}, true,
         "softmax(x3): alibi needs 4-D scores [B, H, Tq, Tk] (head = dim 1)"},
        {{.sinks = bad_sinks}, true,
         "softmax(x3): sinks needs 4-D scores [B, H, Tq, Tk] (head = dim 1)"},
        {{.window = -2}, true, "softmax(x3): window -2 is negative (0: no window)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gml_tensor *t = cases[i].softmax3 ? gml_softmax_ext(ctx, x3, 1.0f, &cases[i].o)
                                          : gml_flash_attn_ext(ctx, q, k, k, 0.5f, &cases[i].o);
        CHECK(t == NULL, "case %zu built", i);
        CHECK_CONTAINS(gml_last_error(ctx), cases[i].want);
    }
    /* fine on a 3-D softmax: causal, window, softcap, mask */
    gml_attn_opts ok = {.causal = GML_CAUSAL_TOP_LEFT, .window = 2, .softcap = 5};
    CHECK(gml_softmax_ext(ctx, x3, 1.0f, &ok) != NULL, "3-D softmax with a window: %s",
          gml_last_error(ctx));
    CHECK(gml_flash_attn_ext(ctx, q, k, k, 0.5f, NULL) != NULL, "opts NULL");
    gml_free(ctx);
}

/* ---- PyTorch's answers (tests/fixtures/gen_attn_opts.py) -------------------- */

static gml_context *load(const char *dir, const char *c, const char *file, gml_tensor **t) {
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/%s/%s", dir, c, file);
    gml_context *o = gml_load_npy(path, NULL, err, sizeof err);
    char name[32];
    snprintf(name, sizeof name, "%.*s", (int)(strlen(file) - 4), file); /* "q" of "q.npy" */
    *t = o ? gml_get_tensor(o, name) : NULL;
    if (!o) fprintf(stderr, "%s\n", err);
    return o;
}

static void test_fixtures(const char *dir) {
    static const char *const cases[] = {"sdpa_top_left", "window_softcap_alibi_sinks",
                                        "alibi_bloom_sinks"};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        chk_case("torch fixture %s", cases[ci]);
        gml_context *own[5] = {0};
        gml_tensor *q, *k, *v, *want, *sinks = NULL;
        own[0] = load(dir, cases[ci], "q.npy", &q);
        own[1] = load(dir, cases[ci], "k.npy", &k);
        own[2] = load(dir, cases[ci], "v.npy", &v);
        own[3] = load(dir, cases[ci], "out.npy", &want);
        char path[1024];
        snprintf(path, sizeof path, "%s/%s/sinks.npy", dir, cases[ci]);
        FILE *f = fopen(path, "rb");
        if (f) {
            fclose(f);
            own[4] = load(dir, cases[ci], "sinks.npy", &sinks);
        }
        snprintf(path, sizeof path, "%s/%s/opts.txt", dir, cases[ci]);
        f = fopen(path, "r");
        if (!CHECK(q && k && v && want && f, "cannot read the case")) {
            if (f) fclose(f);
            for (int i = 0; i < 5; i++) gml_free(own[i]);
            continue;
        }
        float scale = 1;
        gml_attn_opts o = {.sinks = sinks};
        char key[32], val[64];
        while (fscanf(f, "%31s %63s", key, val) == 2) {
            if (!strcmp(key, "scale")) scale = strtof(val, NULL);
            if (!strcmp(key, "window")) o.window = atoll(val);
            if (!strcmp(key, "softcap")) o.softcap = strtof(val, NULL);
            if (!strcmp(key, "alibi")) o.alibi_max_bias = strtof(val, NULL);
            if (!strcmp(key, "causal"))
                o.causal = !strcmp(val, "top_left")       ? GML_CAUSAL_TOP_LEFT
                           : !strcmp(val, "bottom_right") ? GML_CAUSAL_BOTTOM_RIGHT
                                                          : GML_CAUSAL_NONE;
        }
        fclose(f);
        gml_context *ctx = chk_ctx(1 << 20);
        gml_tensor *out = gml_flash_attn_ext(ctx, q, k, v, scale, &o);
        if (CHECK(out != NULL, "%s", gml_last_error(ctx))) {
            gml_graph *g = gml_build_graph(ctx, &out, 1);
            const int64_t n = gml_nelements(want);
            double *w = malloc(sizeof(double) * (size_t)n);
            for (int64_t e = 0; e < n; e++) w[e] = ((const float *)want->data)[e];
            run_all_isas(g, out, w, 2e-6, 2e-5);
            free(w);
            gml_graph_free(g);
        }
        gml_free(ctx);
        for (int i = 0; i < 5; i++) gml_free(own[i]);
    }
}

/* ---- graph files: the new arguments parse and print back -------------------- */

static void test_graph_text(void) {
    chk_case("graph text");
    static const struct {
        const char *call, *printed;
    } cases[] = {
        {"flash_attn(q, k, k, causal=bottom_right, window=2, softcap=1.5, alibi=8)",
         "flash_attn(q, k, k, scale=0.5, causal=true, window=2, softcap=1.5, alibi=8)"},
        {"flash_attn(q, k, k, causal=top_left, sinks=sk, positions=pos)",
         "flash_attn(q, k, k, scale=0.5, causal=top_left, positions=pos, sinks=sk)"},
        {"flash_attn(q, k, k, causal=1)", "flash_attn(q, k, k, scale=0.5, causal=true)"},
        {"softmax(s, causal=top_left, window=3, sinks=sk, valid_lens=lens)",
         "softmax(s, scale=1, causal=top_left, valid_lens=lens, sinks=sk, window=3)"},
        {"softmax(s, causal=false, alibi=0.5, softcap=30)",
         "softmax(s, scale=1, causal=false, softcap=30, alibi=0.5)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gml_context *ctx = chk_ctx(1 << 20);
        char text[512], err[512] = "", buf[256] = "";
        snprintf(text, sizeof text,
                 "input q f32 [1, 2, 3, 4]\ninput k f32 [1, 1, 5, 4]\ninput s f32 [1, 2, 3, 5]\n"
                 "input sk f32 [2]\ninput pos i32 [1, 3]\ninput lens i32 [1]\ny = %s\noutput y\n",
                 cases[i].call);
        gml_tensor *out[1];
        if (CHECK(gml_parse_graph(ctx, text, strlen(text), "o.graph", NULL, out, 1, err, sizeof err) == 1,
                  "%s: %s", cases[i].call, err)) {
            gml_format_node(out[0], NULL, NULL, buf, sizeof buf);
            CHECK(strcmp(buf, cases[i].printed) == 0, "%s printed as %s", cases[i].call, buf);
        }
        gml_free(ctx);
    }
    gml_context *ctx = chk_ctx(1 << 20);
    const char *bad = "input s f32 [2, 3]\ny = softmax(s, causal=sideways)\noutput y\n";
    char err[512] = "";
    gml_tensor *out[1];
    CHECK(gml_parse_graph(ctx, bad, strlen(bad), "b.graph", NULL, out, 1, err, sizeof err) == -1,
          "causal=sideways parsed");
    CHECK_CONTAINS(err, "b.graph:2:23: softmax: 'causal' expects one of false, true/bottom_right, "
                        "top_left or a whole number (0 false, else true)");
    gml_free(ctx);
}

int main(int argc, char **argv) {
    test_graph_text();
    if (argc > 1) test_fixtures(argv[1]);
    else CHECK(false, "usage: test_attn_opts FIXTURES_DIR (tests/fixtures/attn_opts)");
    test_slopes();
    test_errors();
    test_window_skips();
    const opt_case base = {.B = 2, .H = 4, .G = 2, .Tq = 7, .Tk = 45, .dk = 16, .dv = 12};
    opt_case cases[64];
    int n = 0;
#define ADD(...)                                                                                   \
    do {                                                                                           \
        opt_case c_ = base;                                                                        \
        __VA_ARGS__;                                                                               \
        cases[n++] = c_;                                                                           \
    } while (0)
    ADD(c_.window = 5);                                                   /* window alone */
    ADD(c_.window = 9, c_.lens = 2);                                      /* window + valid_lens */
    ADD(c_.window = 3, c_.lens = 1, c_.Tq = 45, c_.Tk = 45);              /* prefill */
    ADD(c_.alibi = 8, c_.causal = GML_CAUSAL_BOTTOM_RIGHT);               /* alibi causal */
    ADD(c_.alibi = 8, c_.H = 6, c_.G = 3);                                /* alibi both sides, BLOOM */
    ADD(c_.softcap = 2.5f);                                               /* softcap */
    ADD(c_.softcap = 1.0f, c_.sinks = true);                              /* softcap + sinks */
    ADD(c_.sinks = true, c_.causal = GML_CAUSAL_TOP_LEFT);                /* sinks, rows with no key */
    ADD(c_.causal = GML_CAUSAL_TOP_LEFT, c_.Tq = 7, c_.Tk = 45);          /* top-left, Tq < Tk */
    ADD(c_.causal = GML_CAUSAL_TOP_LEFT, c_.Tq = 45, c_.Tk = 7);          /* top-left, Tq > Tk */
    ADD(c_.causal = GML_CAUSAL_BOTTOM_RIGHT, c_.Tq = 45, c_.Tk = 7);      /* bottom-right, Tq > Tk */
    /* fully masked rows with sinks: rows i < Tq - Tk see no key (zeros, not NaN) */
    ADD(c_.sinks = true, c_.causal = GML_CAUSAL_BOTTOM_RIGHT, c_.Tq = 45, c_.Tk = 7, c_.softcap = 3);
    ADD(c_.sinks = true, c_.lens = 2, c_.window = 4, c_.Tq = 9, c_.Tk = 5); /* lens 0 rows too */
    ADD(c_.positions = true, c_.causal = GML_CAUSAL_BOTTOM_RIGHT, c_.window = 6, c_.alibi = 4);
    ADD(c_.positions = true, c_.Tq = 1, c_.Tk = 300, c_.window = 70, c_.sinks = true); /* decode */
    ADD(c_.mask = true, c_.alibi = 8, c_.softcap = 4, c_.sinks = true, c_.window = 11, c_.lens = 2);
    ADD(c_.dk = 1, c_.dv = 1, c_.window = 2, c_.sinks = true);
    ADD(c_.dk = 72, c_.dv = 67, c_.H = 8, c_.G = 1, c_.Tq = 40, c_.Tk = 131, c_.window = 50,
        c_.alibi = 8, c_.softcap = 3, c_.causal = GML_CAUSAL_TOP_LEFT);
    ADD(c_.dk = 33, c_.dv = 17, c_.H = 3, c_.G = 3, c_.Tq = 19, c_.Tk = 200, c_.window = 64,
        c_.sinks = true, c_.lq = CHK_TRANSPOSED, c_.lk = CHK_SLICED_TRANSPOSED, c_.lv = CHK_REVERSED);
    ADD(c_.lq = CHK_OUTER_SWAPPED, c_.lk = CHK_SLICED, c_.lv = CHK_TRANSPOSED, c_.softcap = 2,
        c_.alibi = 2, c_.mask = true);
    ADD(c_.Tq = 1, c_.Tk = 1, c_.sinks = true, c_.causal = GML_CAUSAL_BOTTOM_RIGHT);
    for (int i = 0; i < n; i++) run_case(&cases[i], 1000 + (uint64_t)i);
    return chk_summary();
}
