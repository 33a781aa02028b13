/* softmax_back, rms_norm_back, layer_norm_back and rope_back against finite
 * differences: each forward written here again in double from its formula,
 * L = sum(y * g) for a fixed random g, and dL/dx by central differences on
 * every element; the backward ops given the forward's output (computed by
 * the kernels under test) and g. Softmax with each option alone and
 * combined (scale, masks, causal both ways, window, softcap, ALiBi, sinks,
 * valid lengths, positions), norms with and without a weight on odd d,
 * rope in both pair modes, partial rotary dims, both layouts, scaled
 * positions; inputs contiguous and not; at 1, 2, 3, 4 and 7 threads
 * (bitwise equal) under the reference and every ISA the CPU has. */
#include "check.h"
#include "isas.h"

#include "../ops/ops_back.h"

#define FD_H 1e-5
#define RTOL 1e-4
#define ATOL 1e-6

typedef double (*loss_fn)(void *user, const double *x);

static void fd(loss_fn f, void *user, double *x, int64_t n, double *grad) {
    for (int64_t e = 0; e < n; e++) {
        const double x0 = x[e];
        x[e] = x0 + FD_H;
        const double lp = f(user, x);
        x[e] = x0 - FD_H;
        const double lm = f(user, x);
        x[e] = x0;
        grad[e] = (lp - lm) / (2 * FD_H);
    }
}

typedef struct gcheck {
    gml_tensor *dx;
    const double *want;
    const char *what;
} gcheck;

static void verify(void *user) {
    const gcheck *k = user;
    const int64_t n = chk_numel(k->dx);
    float *got = chk_dense(k->dx);
    double big = 0;
    for (int64_t e = 0; e < n; e++) big = fmax(big, fabs(k->want[e]));
    int bad = 0;
    for (int64_t e = 0; e < n && bad < 3; e++) {
        const double tol = RTOL * big + ATOL;
        if (fabs(got[e] - k->want[e]) <= tol) continue;
        bad++;
        CHECK(false, "%s[%lld]: got %.8g, finite differences %.8g (tol %.3g)", k->what,
              (long long)e, (double)got[e], k->want[e], tol);
    }
    free(got);
}

static void run_all(gml_context *ctx, gml_tensor *dx, gml_tensor *y, const double *want,
                    const char *what) {
    gml_tensor *outs[2] = {dx, y};
    gml_graph *g = gml_build_graph(ctx, outs, 2);
    gcheck k = {dx, want, what};
    static const gml_isa isas[] = {GML_TEST_FAST_ISAS};
    for (size_t i = 0; i < sizeof isas / sizeof *isas; i++) {
        if (!gml_cpu_has(isas[i])) continue;
        CHECK_RUN(g, .outs = outs, .n_outs = 2, .verify = verify, .user = &k, .isa = isas[i]);
    }
    gml_graph_free(g);
}

static double *dense_d(const gml_tensor *t) {
    float *f = chk_dense(t);
    double *d = malloc((size_t)chk_numel(t) * sizeof *d);
    for (int64_t e = 0; e < chk_numel(t); e++) d[e] = f[e];
    free(f);
    return d;
}

/* ---- softmax ------------------------------------------------------------------ */

typedef struct scase {
    const char *name;
    int B, H, Tq, Tk;
    float scale;
    gml_causal causal;
    int64_t window;
    float softcap, alibi;
    bool sinks, positions, lens, mask;
    int layout;
} scase;

typedef struct sdata {
    const scase *c;
    const double *g, *sinks;
    const float *mask; /* [Tq, Tk] */
    const int32_t *lens, *pos;
} sdata;

static double slope_of(double max_bias, int h, int H) {
    if (!(max_bias > 0)) return 0;
    int n = 1;
    while (n * 2 <= H) n *= 2;
    return h < n ? exp2(-max_bias * (h + 1) / n) : exp2(-max_bias / 2 * (2 * (h - n) + 1) / n);
}

static double softmax_loss(void *user, const double *x) {
    const sdata *d = user;
    const scase *c = d->c;
    double L = 0, s[64];
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->H; h++)
            for (int i = 0; i < c->Tq; i++) {
                const int64_t ip = c->positions ? d->pos[b * c->Tq + i]
                                   : c->causal == GML_CAUSAL_TOP_LEFT ? i
                                                                      : i + c->Tk - c->Tq;
                const int len = c->lens ? d->lens[b] : c->Tk;
                const int64_t row = ((int64_t)(b * c->H + h) * c->Tq + i) * c->Tk;
                double m = -INFINITY;
                for (int j = 0; j < c->Tk; j++) {
                    bool seen = j < len;
                    if (c->causal != GML_CAUSAL_NONE || c->window > 0) seen &= j <= ip;
                    if (c->window > 0) seen &= ip - j < c->window;
                    const double mv = c->mask ? d->mask[i * c->Tk + j] : 0;
                    seen &= mv != -INFINITY;
                    s[j] = -INFINITY;
                    if (!seen) continue;
                    double v = x[row + j] * c->scale;
                    if (c->softcap > 0) v = c->softcap * tanh(v / c->softcap);
                    s[j] = v + mv + slope_of(c->alibi, h, c->H) * (double)(j - ip);
                    m = s[j] > m ? s[j] : m;
                }
                if (m == -INFINITY) continue; /* no key: zeros */
                if (c->sinks) m = d->sinks[h] > m ? d->sinks[h] : m;
                double z = c->sinks ? exp(d->sinks[h] - m) : 0;
                for (int j = 0; j < c->Tk; j++) z += s[j] == -INFINITY ? 0 : exp(s[j] - m);
                for (int j = 0; j < c->Tk; j++)
                    if (s[j] != -INFINITY) L += exp(s[j] - m) / z * d->g[row + j];
            }
    return L;
}

static void softmax_case(const scase *c, uint64_t seed) {
    chk_case("softmax_back: %s", c->name);
    chk_rng rng = chk_seed(seed);
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 16 << 20});
    const int64_t ne[4] = {c->B, c->H, c->Tq, c->Tk};
    gml_tensor *x = chk_new_layout(ctx, GML_F32, 4, ne, (chk_layout)c->layout, "x");
    gml_tensor *g = gml_new_tensor(ctx, GML_F32, 4, ne);
    chk_fill_uniform(x, &rng, -2, 2);
    chk_fill_uniform(g, &rng, -1, 1);
    sdata d = {.c = c};
    gml_attn_opts o = {.causal = c->causal, .window = c->window, .softcap = c->softcap,
                       .alibi_max_bias = c->alibi};
    float *mask = NULL;
    if (c->mask) {
        o.mask = gml_new_tensor_2d(ctx, GML_F32, c->Tq, c->Tk);
        mask = malloc((size_t)(c->Tq * c->Tk) * sizeof *mask);
        for (int e = 0; e < c->Tq * c->Tk; e++)
            mask[e] = chk_randint(&rng, 0, 4) == 0 ? -INFINITY : chk_uniform(&rng, -1, 1);
        chk_write(o.mask, mask);
        d.mask = mask;
    }
    double *sinks = NULL;
    if (c->sinks) {
        o.sinks = gml_new_tensor_1d(ctx, GML_F32, c->H);
        chk_fill_uniform(o.sinks, &rng, -1, 2);
        d.sinks = sinks = dense_d(o.sinks);
    }
    int32_t *lens = NULL, *pos = NULL;
    if (c->lens) {
        o.valid_lens = gml_new_tensor_1d(ctx, GML_I32, c->B);
        chk_fill_int(o.valid_lens, &rng, 0, c->Tk);
        d.lens = lens = chk_dense(o.valid_lens);
    }
    if (c->positions) {
        o.positions = gml_new_tensor_2d(ctx, GML_I32, c->B, c->Tq);
        chk_fill_int(o.positions, &rng, 0, c->Tk + 1);
        d.pos = pos = chk_dense(o.positions);
    }
    double *xd = dense_d(x), *gd = dense_d(g);
    d.g = gd;
    const int64_t n = chk_numel(x);
    double *want = malloc((size_t)n * sizeof *want);
    fd(softmax_loss, &d, xd, n, want);
    gml_tensor *y = gml_softmax_ext(ctx, x, c->scale, &o);
    gml_tensor *dx = gml_softmax_back(ctx, y, g, x, c->scale, c->softcap);
    if (CHECK(dx, "builders: %s", gml_last_error(ctx))) run_all(ctx, dx, y, want, "dx");
    free(want), free(xd), free(gd), free(mask), free(sinks), free(lens), free(pos);
    gml_free(ctx);
}

/* ---- norms ------------------------------------------------------------------- */

typedef struct ndata {
    bool layer;
    int64_t rows, d;
    const double *w, *g;
    double eps;
} ndata;

static double norm_loss(void *user, const double *x) {
    const ndata *n = user;
    double L = 0;
    for (int64_t r = 0; r < n->rows; r++) {
        const double *xr = x + r * n->d;
        double mean = 0, var = 0;
        if (n->layer) {
            for (int64_t j = 0; j < n->d; j++) mean += xr[j];
            mean /= (double)n->d;
        }
        for (int64_t j = 0; j < n->d; j++) var += (xr[j] - mean) * (xr[j] - mean);
        const double rr = 1 / sqrt(var / (double)n->d + n->eps);
        for (int64_t j = 0; j < n->d; j++)
            L += (xr[j] - mean) * rr * (n->w ? n->w[j] : 1) * n->g[r * n->d + j];
    }
    return L;
}

static void norm_case(bool layer, bool weight, int layout, uint64_t seed) {
    chk_case("%s_back: weight %d, %s", layer ? "layer_norm" : "rms_norm", weight,
             chk_layout_name((chk_layout)layout));
    chk_rng rng = chk_seed(seed);
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 16 << 20});
    const int64_t ne[3] = {3, 5, 7};
    gml_tensor *x = chk_new_layout(ctx, GML_F32, 3, ne, (chk_layout)layout, "x");
    gml_tensor *g = gml_new_tensor(ctx, GML_F32, 3, ne);
    gml_tensor *w = weight ? gml_new_tensor_1d(ctx, GML_F32, 7) : NULL;
    chk_fill_uniform(x, &rng, -2, 2);
    chk_fill_uniform(g, &rng, -1, 1);
    if (w) chk_fill_uniform(w, &rng, 0.5f, 1.5f);
    const float eps = layer ? 1e-5f : 1e-6f;
    double *xd = dense_d(x), *gd = dense_d(g), *wd = w ? dense_d(w) : NULL;
    ndata nd = {layer, 15, 7, wd, gd, eps};
    double *want = malloc(105 * sizeof *want);
    fd(norm_loss, &nd, xd, 105, want);
    gml_tensor *y = layer ? gml_layer_norm(ctx, x, w, NULL, eps) : gml_rms_norm(ctx, x, w, eps);
    gml_tensor *dx = layer ? gml_layer_norm_back(ctx, x, g, w, eps) : gml_rms_norm_back(ctx, x, g, w, eps);
    if (CHECK(dx, "builders: %s", gml_last_error(ctx))) run_all(ctx, dx, y, want, "dx");
    free(want), free(xd), free(gd), free(wd);
    gml_free(ctx);
}

/* ---- rope --------------------------------------------------------------------- */

typedef struct rdata {
    int64_t ne[4];
    int seq_dim, r;
    bool ilv;
    double theta, pos_scale;
    const int32_t *pos; /* [T] */
    const double *g;
} rdata;

static double rope_loss(void *user, const double *x) {
    const rdata *d = user;
    double L = 0;
    for (int64_t e = 0; e < d->ne[0] * d->ne[1] * d->ne[2]; e++) {
        const int64_t t = d->seq_dim == -2 ? e % d->ne[2] : (e / d->ne[2]) % d->ne[1];
        const double *xr = x + e * d->ne[3], *gr = d->g + e * d->ne[3];
        for (int i = 0; i < d->r / 2; i++) {
            const int j0 = d->ilv ? 2 * i : i, j1 = d->ilv ? 2 * i + 1 : i + d->r / 2;
            const double a = d->pos[t] / d->pos_scale * pow(d->theta, -2.0 * i / d->r);
            L += (xr[j0] * cos(a) - xr[j1] * sin(a)) * gr[j0] + (xr[j1] * cos(a) + xr[j0] * sin(a)) * gr[j1];
        }
        for (int64_t j = d->r; j < d->ne[3]; j++) L += xr[j] * gr[j];
    }
    return L;
}

static void rope_case(int seq_dim, int r, bool ilv, float pos_scale, int layout, uint64_t seed) {
    chk_case("rope_back: seq_dim %d, r %d, interleaved %d, pos_scale %g, %s", seq_dim, r, ilv,
             (double)pos_scale, chk_layout_name((chk_layout)layout));
    chk_rng rng = chk_seed(seed);
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 16 << 20});
    const int64_t ne[4] = {2, seq_dim == -2 ? 3 : 5, seq_dim == -2 ? 5 : 3, 10};
    gml_tensor *x = chk_new_layout(ctx, GML_F32, 4, ne, (chk_layout)layout, "x");
    gml_tensor *g = gml_new_tensor(ctx, GML_F32, 4, ne);
    gml_tensor *pos = gml_new_tensor_1d(ctx, GML_I32, 5);
    chk_fill_uniform(x, &rng, -2, 2);
    chk_fill_uniform(g, &rng, -1, 1);
    chk_fill_int(pos, &rng, 0, 40);
    int32_t *pd = chk_dense(pos);
    double *xd = dense_d(x), *gd = dense_d(g);
    rdata d = {{ne[0], ne[1], ne[2], ne[3]}, seq_dim, r, ilv, 100.0, pos_scale, pd, gd};
    const int64_t n = chk_numel(x);
    double *want = malloc((size_t)n * sizeof *want);
    fd(rope_loss, &d, xd, n, want);
    gml_tensor *y = gml_rope(ctx, x, pos, seq_dim, r, 100.0f, pos_scale, ilv);
    gml_tensor *dx = gml_rope_back(ctx, g, pos, seq_dim, r, 100.0f, pos_scale, ilv);
    if (CHECK(dx, "builders: %s", gml_last_error(ctx))) run_all(ctx, dx, y, want, "dx");
    free(want), free(xd), free(gd), free(pd);
    gml_free(ctx);
}

int main(void) {
    static const scase sc[] = {
        {"plain, scale 0.7", 2, 2, 3, 7, 0.7f, .layout = 0},
        {"mask [Tq, Tk]", 2, 2, 3, 7, 1.0f, .mask = true},
        {"causal bottom-right", 1, 2, 4, 6, 1.0f, .causal = GML_CAUSAL_BOTTOM_RIGHT},
        {"causal top-left, transposed x", 1, 2, 6, 4, 1.0f, .causal = GML_CAUSAL_TOP_LEFT,
         .layout = CHK_TRANSPOSED},
        {"window", 1, 2, 5, 7, 1.0f, .window = 2},
        {"softcap", 1, 2, 3, 7, 1.5f, .softcap = 2.0f},
        {"alibi", 1, 4, 3, 5, 1.0f, .alibi = 8.0f},
        {"sinks", 2, 2, 3, 5, 1.0f, .sinks = true},
        {"valid lengths (some 0)", 3, 2, 3, 5, 1.0f, .lens = true},
        {"positions", 2, 2, 3, 6, 1.0f, .positions = true, .causal = GML_CAUSAL_BOTTOM_RIGHT},
        {"all at once, sliced x", 2, 4, 3, 9, 0.8f, .causal = GML_CAUSAL_BOTTOM_RIGHT,
         .softcap = 3.0f, .alibi = 2.0f, .sinks = true, .mask = true, .lens = true,
         .layout = CHK_SLICED},
    };
    for (size_t i = 0; i < sizeof sc / sizeof *sc; i++) softmax_case(&sc[i], 10 + i);
    for (int layer = 0; layer < 2; layer++)
        for (int w = 0; w < 2; w++) norm_case(layer, w, w ? CHK_TRANSPOSED : CHK_CONTIGUOUS, 50 + 2 * layer + w);
    rope_case(-2, 10, false, 1.0f, CHK_CONTIGUOUS, 70);
    rope_case(-2, 6, true, 1.0f, CHK_TRANSPOSED, 71);
    rope_case(-3, 4, false, 2.5f, CHK_SLICED, 72);
    rope_case(-3, 10, true, 0.5f, CHK_REVERSED, 73);
    return chk_summary();
}
