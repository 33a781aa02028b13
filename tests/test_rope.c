/* rope: rotary position embeddings against a naive double reference written
 * as Hugging Face writes it (x * cos(emb) + rotate_half(x) * sin(emb), emb =
 * cat(freqs, freqs); interleaved: cos and sin repeated per pair), from the
 * same float32 angles (inv_freq = 1 / theta^((2i) / r) and (pos / pos_scale)
 * * inv_freq in float, as HF does). Both pairings, partial rotary dims,
 * theta, linear scaling, both layouts, pos [T] and [B, T] (strided too),
 * odd B, H, T, d = 2, 6, 64, 130, strided and permuted x (the head-split
 * permute of a projection), in place, huge and negative positions; under the
 * reference kernels and every ISA the CPU has, at 1, 2, 3, 4 and 7 threads
 * (bitwise the same at each). Properties: rope with -pos undoes rope with
 * pos; interleaved rope on x is rotate-half rope on x with its rotary dims
 * reordered (2i -> i, 2i+1 -> i + r/2), bitwise. Builder errors. Prints the
 * measured max error of each kernel set against the reference, in units of
 * 2^-24 (|x0| + |x1|) (an ulp of the pair's scale). */
#include "check.h"

#include <inttypes.h>
#include <math.h>

typedef struct rope_case {
    int64_t B, H, T, d;
    int seq_dim;      /* -2: [B, H, T, d]; -3: [B, T, H, d] */
    int rotary_dim;   /* 0: d */
    float theta, pos_scale;
    bool interleaved;
    bool pos_2d;      /* pos [B, T], else [T] */
    chk_layout x_layout, pos_layout;
    bool head_split;  /* x [B, H, T, d] as a permuted view of [B, T, H, d] storage */
    int pos_lo, pos_hi;
} rope_case;

/* The naive reference: out dense in x's logical order. */
static void naive_rope(const rope_case *c, const float *x, const int32_t *pos, double *out,
                       double *scale) {
    const int64_t d = c->d, r = c->rotary_dim ? c->rotary_dim : c->d, half = r / 2;
    const int64_t n1 = c->seq_dim == -2 ? c->H : c->T, n2 = c->seq_dim == -2 ? c->T : c->H;
    double *cs = malloc((size_t)r * sizeof(double)), *sn = malloc((size_t)r * sizeof(double));
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t i1 = 0; i1 < n1; i1++)
            for (int64_t i2 = 0; i2 < n2; i2++) {
                const int64_t t = c->seq_dim == -2 ? i2 : i1;
                const int32_t p = pos[c->pos_2d ? b * c->T + t : t];
                /* emb[j]: the angle of dim j */
                for (int64_t j = 0; j < r; j++) {
                    const int64_t i = c->interleaved ? j / 2 : j % half;
                    const float inv = 1.0f / powf(c->theta, (float)(2 * i) / (float)r);
                    const float a = ((float)p / c->pos_scale) * inv;
                    cs[j] = cos((double)a);
                    sn[j] = sin((double)a);
                }
                const float *xr = x + ((b * n1 + i1) * n2 + i2) * d;
                double *o = out + ((b * n1 + i1) * n2 + i2) * d;
                double *sc = scale + ((b * n1 + i1) * n2 + i2) * d;
                for (int64_t j = 0; j < d; j++) {
                    if (j >= r) {
                        o[j] = xr[j];
                        sc[j] = fabs(xr[j]);
                        continue;
                    }
                    /* rotate_half(x)[j] = -x[j + r/2] (j < r/2), x[j - r/2];
                     * interleaved: -x[j + 1] (j even), x[j - 1] */
                    double rot;
                    if (c->interleaved) rot = j % 2 == 0 ? -(double)xr[j + 1] : xr[j - 1];
                    else rot = j < half ? -(double)xr[j + half] : xr[j - half];
                    o[j] = (double)xr[j] * cs[j] + rot * sn[j];
                    sc[j] = fabs(xr[j]) + fabs(rot);
                }
            }
    free(cs);
    free(sn);
}

static gml_tensor *new_x(gml_context *ctx, const rope_case *c, chk_rng *rng) {
    const int64_t n1 = c->seq_dim == -2 ? c->H : c->T, n2 = c->seq_dim == -2 ? c->T : c->H;
    if (c->head_split) { /* storage [B, n2, n1, d], seen as [B, n1, n2, d] */
        gml_tensor *s = chk_new_input(ctx, GML_F32, 4, (int64_t[]){c->B, n2, n1, c->d},
                                      CHK_CONTIGUOUS, "proj", rng, -1, 1);
        return gml_set_name(gml_permute(ctx, s, (int[]){0, 2, 1, 3}), "x");
    }
    return chk_new_input(ctx, GML_F32, 4, (int64_t[]){c->B, n1, n2, c->d}, c->x_layout, "x", rng,
                         -1, 1);
}

/* positions uniform in [pos_lo, pos_hi] (any int32 range) */
static gml_tensor *new_pos(gml_context *ctx, const rope_case *c, chk_rng *rng) {
    gml_tensor *t = c->pos_2d ? chk_new_layout(ctx, GML_I32, 2, (int64_t[]){c->B, c->T},
                                               c->pos_layout, "pos")
                              : chk_new_layout(ctx, GML_I32, 1, (int64_t[]){c->T}, c->pos_layout,
                                               "pos");
    const int64_t n = chk_numel(t), span = (int64_t)c->pos_hi - c->pos_lo + 1;
    int32_t *v = malloc((size_t)n * sizeof(int32_t));
    for (int64_t e = 0; e < n; e++)
        v[e] = (int32_t)(c->pos_lo + (int64_t)(chk_next(rng) % (uint64_t)span));
    chk_write(t, v);
    free(v);
    return t;
}

/* Worst |got - want| / (2^-24 scale) seen per kernel set (0: reference). */
static double worst[2];

typedef struct verify_ctx {
    const gml_tensor *out;
    const double *want, *scale;
    double tol_ulps;
} verify_ctx;

static void verify(void *user) {
    const verify_ctx *v = user;
    const int64_t n = chk_numel(v->out);
    const int worst_set = gml_get_isa() == GML_ISA_REFERENCE ? 0 : 1;
    float *got = chk_dense(v->out);
    double *bound = malloc((size_t)n * sizeof(double));
    for (int64_t e = 0; e < n; e++) {
        const double unit = ldexp(v->scale[e], -24) + 1e-30;
        bound[e] = v->tol_ulps * unit;
        const double err = fabs(got[e] - v->want[e]) / unit;
        if (err > worst[worst_set]) worst[worst_set] = err;
    }
    CHECK_WITHIN(v->out, v->want, bound, "rope against the naive reference");
    free(bound);
    free(got);
}

static void run_rope_case(const rope_case *c, gml_isa isa) {
    chk_rng rng = chk_seed((uint64_t)(c->d * 1000 + c->B * 100 + c->T * 10 + c->H));
    gml_context *ctx = chk_ctx(8 << 20);
    gml_tensor *x = new_x(ctx, c, &rng), *pos = new_pos(ctx, c, &rng);
    gml_tensor *out = gml_rope(ctx, x, pos, c->seq_dim, c->rotary_dim, c->theta, c->pos_scale,
                               c->interleaved);
    if (!CHECK(out != NULL, "rope: %s", gml_last_error(ctx))) {
        gml_free(ctx);
        return;
    }
    CHECK(gml_is_contiguous(out), "rope's output is contiguous");
    gml_graph *g = gml_build_graph(ctx, &out, 1);
    const int64_t n = chk_numel(x);
    float *xd = chk_dense(x);
    int32_t *pd = malloc((size_t)chk_numel(pos) * sizeof(int32_t));
    chk_read(pos, pd);
    double *want = malloc((size_t)n * sizeof(double)), *scale = malloc((size_t)n * sizeof(double));
    naive_rope(c, xd, pd, want, scale);
    /* 4 ulps of the pair's scale: the reference rounds once (within 1), the
     * fast kernel rounds cos and sin to float and rotates in float (3 more
     * roundings) */
    verify_ctx v = {out, want, scale, 4.0};
    CHECK_RUN(g, .outs = &out, .n_outs = 1, .verify = verify, .user = &v, .isa = isa);
    free(xd);
    free(pd);
    free(want);
    free(scale);
    gml_graph_free(g);
    gml_free(ctx);
}

static const char *layout_name(int seq_dim) { return seq_dim == -2 ? "[B,H,T,d]" : "[B,T,H,d]"; }

static void test_sweep(void) {
    static const int64_t ds[] = {2, 6, 64, 130};
    static const gml_isa fast[] = {GML_TEST_FAST_ISAS};
    gml_isa isas[sizeof fast / sizeof *fast]; /* those the CPU has, in turn */
    int n_isas = 0;
    for (size_t i = 0; i < sizeof fast / sizeof *fast; i++)
        if (gml_cpu_has(fast[i])) isas[n_isas++] = fast[i];
    int k = 0;
    for (size_t di = 0; di < sizeof ds / sizeof *ds; di++)
        for (int seq = -3; seq <= -2; seq++)
            for (int ilv = 0; ilv < 2; ilv++)
                for (int partial = 0; partial < 2; partial++)
                    for (int p2 = 0; p2 < 2; p2++, k++) {
                        const int64_t d = ds[di];
                        if (partial && d == 2) continue;
                        rope_case c = {
                            .B = 1 + k % 3, .H = 1 + (k * 7) % 5, .T = 1 + (k * 5) % 9, .d = d,
                            .seq_dim = seq,
                            .rotary_dim = partial ? (int)(d / 2 + (d / 2) % 2) : (k % 2 ? (int)d : 0),
                            .theta = k % 3 == 0 ? 10000.0f : k % 3 == 1 ? 500000.0f : 100.0f,
                            .pos_scale = k % 4 == 3 ? 4.0f : k % 4 == 2 ? 0.3f : 1.0f,
                            .interleaved = ilv != 0, .pos_2d = p2 != 0,
                            .x_layout = (chk_layout)(k % CHK_N_LAYOUTS),
                            .pos_layout = k % 3 == 2 ? CHK_SLICED : CHK_CONTIGUOUS,
                            .head_split = k % 5 == 4,
                            .pos_lo = -40, .pos_hi = 5000,
                        };
                        const gml_isa isa = isas[k % n_isas];
                        chk_case("rope %s B=%" PRId64 " H=%" PRId64 " T=%" PRId64 " d=%" PRId64
                                 " r=%d theta=%g pos_scale=%g %s pos %s (%s) x %s under %s",
                                 layout_name(seq), c.B, c.H, c.T, d, c.rotary_dim, (double)c.theta,
                                 (double)c.pos_scale, ilv ? "interleaved" : "rotate-half",
                                 p2 ? "[B,T]" : "[T]", chk_layout_name(c.pos_layout),
                                 c.head_split ? "head-split permute" : chk_layout_name(c.x_layout),
                                 gml_isa_name(isa));
                        run_rope_case(&c, isa);
                    }
}

/* Odd sizes, a decode step (T = 1), and positions far out: 2^24 and beyond
 * (rounded to float), negative, INT32_MIN and INT32_MAX. */
static void test_sizes_and_positions(void) {
    const rope_case cases[] = {
        {3, 5, 7, 130, -2, 0, 10000.0f, 1.0f, false, true, CHK_SLICED, CHK_CONTIGUOUS, false, -3, 300},
        {3, 5, 7, 130, -3, 66, 10000.0f, 1.0f, true, true, CHK_SLICED_TRANSPOSED, CHK_SLICED, false, -3, 300},
        {1, 32, 1, 64, -2, 0, 10000.0f, 1.0f, false, false, CHK_CONTIGUOUS, CHK_CONTIGUOUS, false, 4095, 4095},
        {2, 3, 1, 64, -3, 0, 10000.0f, 1.0f, false, true, CHK_CONTIGUOUS, CHK_CONTIGUOUS, true, 1000, 2000},
        {2, 3, 5, 64, -2, 0, 10000.0f, 1.0f, false, true, CHK_CONTIGUOUS, CHK_CONTIGUOUS, true, (1 << 24) - 3, (1 << 24) + 50},
        {2, 3, 5, 6, -2, 0, 10000.0f, 1.0f, true, true, CHK_REVERSED, CHK_CONTIGUOUS, false, INT32_MAX - 100, INT32_MAX},
        {2, 3, 5, 6, -3, 4, 10000.0f, 1.0f, false, true, CHK_OUTER_SWAPPED, CHK_CONTIGUOUS, false, INT32_MIN, INT32_MIN + 100},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const rope_case *c = &cases[i];
        chk_case("rope %s B=%" PRId64 " H=%" PRId64 " T=%" PRId64 " d=%" PRId64 " r=%d positions [%d, %d]",
                 layout_name(c->seq_dim), c->B, c->H, c->T, c->d, c->rotary_dim, c->pos_lo, c->pos_hi);
        run_rope_case(c, GML_ISA_AUTO);
    }
}

/* rope(rope(x, pos), -pos) = x within 8 ulps of the pair's scale, on both
 * kernel sets; and in place (the first rope's output, a node, is the second
 * rope's x, which the planner may give its memory). */
typedef struct inverse_ctx {
    const gml_tensor *back;
    const float *x;
    int64_t n;
} inverse_ctx;

static void verify_inverse(void *user) {
    const inverse_ctx *v = user;
    float *got = chk_dense(v->back);
    double *want = malloc((size_t)v->n * sizeof(double));
    for (int64_t e = 0; e < v->n; e++) want[e] = v->x[e];
    CHECK_CLOSE(v->back, want, 4e-7, 8e-7, "rope with -pos undoes rope with pos");
    free(want);
    free(got);
}

static void test_inverse(void) {
    for (int ilv = 0; ilv < 2; ilv++) {
        chk_rng rng = chk_seed(11 + (uint64_t)ilv);
        gml_context *ctx = chk_ctx(8 << 20);
        gml_tensor *x = chk_new_input(ctx, GML_F32, 4, (int64_t[]){2, 7, 3, 64}, CHK_OUTER_SWAPPED,
                                      "x", &rng, -1, 1);
        gml_tensor *pos = chk_new_input(ctx, GML_I32, 2, (int64_t[]){2, 7}, CHK_CONTIGUOUS, "pos",
                                        &rng, 0, 2000);
        gml_tensor *neg = gml_new_tensor(ctx, GML_I32, 2, (int64_t[]){2, 7});
        for (int e = 0; e < 14; e++) ((int32_t *)neg->data)[e] = -((int32_t *)pos->data)[e];
        gml_tensor *fwd = gml_rope(ctx, gml_cont(ctx, x), pos, -3, 48, 10000.0f, 2.0f, ilv != 0);
        gml_tensor *back = gml_rope(ctx, fwd, neg, -3, 48, 10000.0f, 2.0f, ilv != 0);
        gml_graph *g = gml_build_graph(ctx, &back, 1);
        inverse_ctx v = {back, chk_dense(x), chk_numel(x)};
        chk_case("rope(rope(x, pos), -pos) = x, %s", ilv ? "interleaved" : "rotate-half");
        CHECK_RUN(g, .outs = &back, .n_outs = 1, .verify = verify_inverse, .user = &v);
        free((void *)v.x);
        gml_graph_free(g);
        gml_free(ctx);
    }
}

/* Interleaved rope on x equals rotate-half rope on y, y[.., i] = x[.., 2i],
 * y[.., i + r/2] = x[.., 2i + 1] (the rest as is), read back through the same
 * reordering: bitwise, on both kernel sets (same pairs, same angles). */
typedef struct equiv_ctx {
    const gml_tensor *a, *b;
    int64_t rows, d, r;
} equiv_ctx;

static void verify_equiv(void *user) {
    const equiv_ctx *v = user;
    float *a = chk_dense(v->a), *b = chk_dense(v->b);
    float *want = malloc((size_t)(v->rows * v->d) * sizeof(float));
    for (int64_t row = 0; row < v->rows; row++)
        for (int64_t j = 0; j < v->d; j++) {
            const int64_t src = j >= v->r ? j : j % 2 == 0 ? j / 2 : j / 2 + v->r / 2;
            want[row * v->d + j] = b[row * v->d + src];
        }
    CHECK_EQUAL(v->a, want, "interleaved rope = rotate-half rope on the reordered dims");
    free(want);
    free(a);
    free(b);
}

static void test_equivalence(void) {
    chk_rng rng = chk_seed(21);
    gml_context *ctx = chk_ctx(8 << 20);
    const int64_t B = 3, H = 2, T = 5, d = 70, r = 54;
    gml_tensor *x = chk_new_input(ctx, GML_F32, 4, (int64_t[]){B, H, T, d}, CHK_CONTIGUOUS, "x",
                                  &rng, -1, 1);
    gml_tensor *y = gml_set_name(gml_new_tensor(ctx, GML_F32, 4, (int64_t[]){B, H, T, d}), "y");
    const float *xf = x->data;
    float *yf = y->data;
    for (int64_t row = 0; row < B * H * T; row++)
        for (int64_t j = 0; j < d; j++) {
            const int64_t dst = j >= r ? j : j % 2 == 0 ? j / 2 : j / 2 + r / 2;
            yf[row * d + dst] = xf[row * d + j];
        }
    gml_tensor *pos = chk_new_input(ctx, GML_I32, 1, (int64_t[]){T}, CHK_SLICED, "pos", &rng, -100,
                                    100000);
    gml_tensor *a = gml_rope(ctx, x, pos, -2, (int)r, 1e6f, 1.0f, true);
    gml_tensor *b = gml_rope(ctx, y, pos, -2, (int)r, 1e6f, 1.0f, false);
    gml_tensor *outs[] = {a, b};
    gml_graph *g = gml_build_graph(ctx, outs, 2);
    equiv_ctx v = {a, b, B * H * T, d, r};
    chk_case("interleaved rope on x = rotate-half rope on x's rotary dims reordered");
    CHECK_RUN(g, .outs = outs, .n_outs = 2, .verify = verify_equiv, .user = &v);
    gml_graph_free(g);
    gml_free(ctx);
}

static void expect_error(gml_context *ctx, gml_tensor *t, const char *sub) {
    CHECK(t == NULL, "builder accepted a bad call (wanted an error with \"%s\")", sub);
    CHECK_CONTAINS(gml_last_error(ctx), sub);
}

static void test_errors(void) {
    chk_case("rope builder errors");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *x = gml_set_name(gml_new_tensor(ctx, GML_F32, 4, (int64_t[]){2, 4, 5, 8}), "q");
    gml_tensor *p5 = gml_set_name(gml_new_tensor(ctx, GML_I32, 1, (int64_t[]){5}), "pos");
    gml_tensor *p4 = gml_set_name(gml_new_tensor(ctx, GML_I32, 1, (int64_t[]){4}), "p4");
    gml_tensor *pf = gml_set_name(gml_new_tensor(ctx, GML_F32, 1, (int64_t[]){5}), "pf");
    gml_tensor *pb = gml_set_name(gml_new_tensor(ctx, GML_I32, 2, (int64_t[]){3, 5}), "pb");
    gml_tensor *x3 = gml_set_name(gml_new_tensor(ctx, GML_F32, 3, (int64_t[]){4, 5, 8}), "x3");
    expect_error(ctx, gml_rope(ctx, x, p4, -2, 0, 10000.0f, 1.0f, false),
                 "rope(q, p4): positions must be i32 [T] or [B, T] = [5] or [2, 5] for x [2,4,5,8] "
                 "as [B, H, T, d], got i32 [4]");
    expect_error(ctx, gml_rope(ctx, x, p5, -3, 0, 10000.0f, 1.0f, false),
                 "= [4] or [2, 4] for x [2,4,5,8] as [B, T, H, d], got i32 [5]");
    expect_error(ctx, gml_rope(ctx, x, pf, -2, 0, 10000.0f, 1.0f, false), "got f32 [5]");
    expect_error(ctx, gml_rope(ctx, x, pb, -2, 0, 10000.0f, 1.0f, false), "got i32 [3,5]");
    expect_error(ctx, gml_rope(ctx, x, p5, -2, 5, 10000.0f, 1.0f, false),
                 "rope(q, pos): rotary_dim is 5, must be even and in [2, d = 8] (0: d) for x "
                 "[2,4,5,8]");
    expect_error(ctx, gml_rope(ctx, x, p5, -2, 10, 10000.0f, 1.0f, false), "rotary_dim is 10");
    expect_error(ctx, gml_rope(ctx, x, p5, -2, -2, 10000.0f, 1.0f, false), "rotary_dim is -2");
    expect_error(ctx, gml_rope(ctx, x, p5, -1, 0, 10000.0f, 1.0f, false),
                 "rope(q, pos): seq_dim is -1, must be -2 (x [B, H, T, d]) or -3 (x [B, T, H, d])");
    expect_error(ctx, gml_rope(ctx, x3, p5, -2, 0, 10000.0f, 1.0f, false),
                 "rope(x3, pos): x must be 4-D [B, H, T, d] or [B, T, H, d], got [4,5,8]");
    expect_error(ctx, gml_rope(ctx, x, p5, -2, 0, 0.0f, 1.0f, false),
                 "rope(q, pos): theta 0 must be finite and > 0");
    expect_error(ctx, gml_rope(ctx, x, p5, -2, 0, 10000.0f, NAN, false),
                 "rope(q, pos): pos_scale nan must be finite and > 0");
    expect_error(ctx, gml_rope(ctx, p5, p5, -2, 0, 10000.0f, 1.0f, false), "rope(pos): 'pos' must be f32, got i32 [5]");
    /* positive dims as PyTorch counts them: 2 is -2, 1 is -3 */
    gml_tensor *ok = gml_rope(ctx, x, p5, 2, 0, 10000.0f, 1.0f, false);
    CHECK(ok != NULL, "seq_dim 2: %s", gml_last_error(ctx));
    gml_tensor *ok3 = gml_rope(ctx, x, p4, 1, 0, 10000.0f, 1.0f, false);
    CHECK(ok3 != NULL, "seq_dim 1: %s", gml_last_error(ctx));
    gml_free(ctx);
}

int main(void) {
    gml_isa sets[2];
    chk_kernel_sets(sets);
    test_sweep();
    test_sizes_and_positions();
    printf("max error, in units of 2^-24 (|x0| + |x1|): reference kernels %.3f, fast kernels %.3f\n",
           worst[0], worst[1]);
    test_inverse();
    test_equivalence();
    test_errors();
    return chk_summary();
}
