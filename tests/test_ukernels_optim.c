/* The optimizers' update micro-kernels (ops/optim.inc): every variant of
 * AdamW and SGD against this file's loop, bit for bit, on runs shorter
 * than, equal to and longer than its tile, unaligned, with extreme values
 * and every SGD option; then gml_optim_step under every ISA and at 1, 2, 3,
 * 4 and 7 threads, on parameters of odd sizes (contiguous, transposed,
 * sliced), bitwise the same parameters and norms as under the reference ISA
 * at one thread (any NaN matching any NaN: parameters start with some
 * infinities and NaNs); the global norm bitwise that of its documented
 * order at every thread count.
 *
 * The loop below is torch.optim's single-tensor update (1.13) written out,
 * one f32 operation a statement (this file is compiled with
 * -ffp-contract=off too), so a variant that fuses a multiply and an add,
 * reorders the operations or mishandles a tail fails. */
#include "../ops/optim.h"
#include "simd_check.h"

/* ---- the loop ------------------------------------------------------------ */

static void loop_adamw(size_t n, const gml_adamw_scalars *s, float *p, const float *g, float *m,
                       float *v) {
    for (size_t i = 0; i < n; i++) {
        const float gr = g[i] * s->coef;          /* clip_grad_norm_: grad.mul_(clip_coef) */
        float w = p[i] * s->decay;                /* param.mul_(1 - lr * weight_decay) */
        float a = m[i] * s->b1;                   /* exp_avg.mul_(beta1) */
        const float a1 = s->omb1 * gr;
        a = a + a1;                               /* .add_(grad, alpha=1 - beta1) */
        float q = v[i] * s->b2;                   /* exp_avg_sq.mul_(beta2) */
        const float q1 = s->omb2 * gr;
        const float q2 = q1 * gr;
        q = q + q2;                               /* .addcmul_(grad, grad, value=1 - beta2) */
        const float r = sqrtf(q);                 /* exp_avg_sq.sqrt() */
        const float r1 = r / s->bc2_sqrt;         /* / bias_correction2_sqrt */
        const float denom = r1 + s->eps;          /* .add_(eps) */
        const float u = s->neg_step * a;
        const float u1 = u / denom;
        w = w + u1;                               /* param.addcdiv_(exp_avg, denom, -step_size) */
        m[i] = a;
        v[i] = q;
        p[i] = w;
    }
}

static void loop_sgd(size_t n, const gml_sgd_scalars *s, float *p, const float *g, float *m) {
    for (size_t i = 0; i < n; i++) {
        float d = g[i] * s->coef;
        if (s->wd != 0) {
            const float t = s->wd * p[i];
            d = d + t;                            /* d_p = d_p.add(param, alpha=weight_decay) */
        }
        if (m) {
            float b = d;                          /* buf = torch.clone(d_p) (first step) */
            if (!s->first) {
                const float b0 = m[i] * s->mom;   /* buf.mul_(momentum) */
                const float b1 = s->omdamp * d;
                b = b0 + b1;                      /* .add_(d_p, alpha=1 - dampening) */
            }
            m[i] = b;
            if (s->nesterov) {
                const float t = s->mom * b;
                d = d + t;                        /* d_p = d_p.add(buf, alpha=momentum) */
            } else {
                d = b;
            }
        }
        const float t = s->neg_lr * d;
        p[i] = p[i] + t;                          /* param.add_(d_p, alpha=-lr) */
    }
}

/* ---- the variants ---------------------------------------------------------- */

typedef struct {
    gml_isa isa;
    gml_f32_adamw_ukernel *adamw;
    gml_f32_sgd_ukernel *sgd;
    int tile;
    const char *name;
} variant;

#define ADAMW_ROW(isa, fn, tile) {isa, fn, NULL, tile, #fn},
#define SGD_ROW(isa, fn, tile) {isa, NULL, fn, tile, #fn},
static const variant VARIANTS[] = {
    GML_F32_ADAMW_UKERNELS(ADAMW_ROW) GML_F32_SGD_UKERNELS(SGD_ROW)
};

/* Values for parameters and gradients: mostly of a few magnitudes, now and
 * then an extreme one (a zero of either sign, a subnormal, a huge value, an
 * infinity, a NaN). */
static float value(float scale) {
    const float ex[] = {0.0f, -0.0f, 1e-40f, -3e-39f, 3e38f, -1e30f, INFINITY, NAN};
    if (rand_int(23) == 0) return ex[rand_int(sizeof ex / sizeof *ex)];
    return rand_uniform(-1, 1) * scale * (rand_int(4) == 0 ? 1000.0f : 1.0f);
}

/* Every buffer PAD floats longer than the run and starting `off` floats in,
 * so runs start unaligned and writes past the end show. */
enum { PAD = 40 };

typedef struct {
    float *p, *g, *m, *v;       /* the variant's */
    float *wp, *wm, *wv;        /* the loop's */
} bufs;

static bufs bufs_new(size_t n, size_t off) {
    bufs b;
    float **all[] = {&b.p, &b.g, &b.m, &b.v, &b.wp, &b.wm, &b.wv};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) {
        *all[k] = malloc((n + off + PAD) * sizeof(float));
        for (size_t i = 0; i < n + off + PAD; i++) (*all[k])[i] = 555.0f;
        *all[k] += off;
    }
    for (size_t i = 0; i < n; i++) {
        b.p[i] = b.wp[i] = value(1.0f);
        b.g[i] = value(0.01f);
        b.m[i] = b.wm[i] = value(0.01f);
        b.v[i] = b.wv[i] = fabsf(value(1e-4f)); /* exp_avg_sq: >= 0 */
    }
    return b;
}

static void bufs_free(bufs *b, size_t off) {
    float *all[] = {b->p, b->g, b->m, b->v, b->wp, b->wm, b->wv};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) free(all[k] - off);
}

/* got against want over n elements, then the PAD past them untouched. */
static void compare(const char *what, const variant *v, size_t n, size_t off, const char *cfg,
                    const float *got, const float *want) {
    int bad = 0;
    for (size_t i = 0; i < n && bad < 3; i++)
        if (!same_f32(got[i], want[i])) {
            bad++;
            CHECK(false, "%s n=%zu off=%zu %s: %s[%zu] = %.9g (%08x), the loop's %.9g (%08x)",
                  v->name, n, off, cfg, what, i, (double)got[i], f32_bits(got[i]),
                  (double)want[i], f32_bits(want[i]));
        }
    for (size_t i = n; i < n + PAD; i++)
        CHECK(got[i] == 555.0f, "%s n=%zu off=%zu %s: wrote %s[%zu] past the end", v->name, n,
              off, cfg, what, i);
}

static void check_adamw(const variant *v, size_t n, size_t off) {
    const gml_adamw_scalars configs[] = {
        /* torch's defaults at step 1 and step 7, clipped; lr 0.1, betas 0.5, 0.9, eps 1e-3 */
        {1.0f, 1 - 1e-5f, 0.9f, 0.1f, 0.999f, 0.001f, -1e-3f, 0.0316069f, 1e-8f},
        {0.37f, 1 - 1e-5f, 0.9f, 0.1f, 0.999f, 0.001f, -0.00191357f, 0.0836f, 1e-8f},
        {0.8f, 0.97f, 0.5f, 0.5f, 0.9f, 0.1f, -0.2f, 0.31622776f, 1e-3f},
    };
    for (size_t c = 0; c < sizeof configs / sizeof *configs; c++) {
        char cfg[32];
        snprintf(cfg, sizeof cfg, "config %zu", c);
        bufs b = bufs_new(n, off);
        for (int step = 0; step < 2; step++) { /* the second from the first's state */
            v->adamw(n, &configs[c], b.p, b.g, b.m, b.v);
            loop_adamw(n, &configs[c], b.wp, b.g, b.wm, b.wv);
        }
        compare("p", v, n, off, cfg, b.p, b.wp);
        compare("m", v, n, off, cfg, b.m, b.wm);
        compare("v", v, n, off, cfg, b.v, b.wv);
        bufs_free(&b, off);
    }
}

static void check_sgd(const variant *v, size_t n, size_t off) {
    /* every option: weight decay or none, momentum (with dampening,
     * nesterov) or none, the buffer's first step or a later one */
    for (int c = 0; c < 24; c++) {
        const bool wd = c & 1, mom = c & 2, first = c & 4, nesterov = (c >> 3) == 1;
        const bool damp = (c >> 3) == 2;
        if (!mom && (first || nesterov || damp)) continue;
        const gml_sgd_scalars s = {
            .coef = c % 3 ? 1.0f : 0.41f,
            .wd = wd ? 0.02f : 0.0f,
            .mom = mom ? 0.9f : 0.0f,
            .omdamp = damp ? 0.7f : 1.0f,
            .neg_lr = -0.05f,
            .first = first,
            .nesterov = nesterov,
        };
        char cfg[96];
        snprintf(cfg, sizeof cfg, "wd %g momentum %g first %d nesterov %d dampening %g",
                 (double)s.wd, (double)s.mom, first, nesterov, 1 - (double)s.omdamp);
        bufs b = bufs_new(n, off);
        v->sgd(n, &s, b.p, b.g, mom ? b.m : NULL);
        loop_sgd(n, &s, b.wp, b.g, mom ? b.wm : NULL);
        compare("p", v, n, off, cfg, b.p, b.wp);
        compare("m", v, n, off, cfg, b.m, b.wm); /* untouched without momentum */
        bufs_free(&b, off);
    }
}

static void check_variant(const variant *v) {
    size_t lens[12];
    const int nl = tile_lengths(v->tile, lens);
    for (int l = 0; l < nl; l++)
        for (size_t off = 0; off < 2; off++) {
            if (v->adamw) check_adamw(v, lens[l], off);
            else check_sgd(v, lens[l], off);
        }
    /* n = 0 writes nothing */
    bufs b = bufs_new(0, 0);
    if (v->adamw) {
        const gml_adamw_scalars s = {1, 1, 0.9f, 0.1f, 0.999f, 0.001f, -1e-3f, 1, 1e-8f};
        v->adamw(0, &s, b.p, b.g, b.m, b.v);
    } else {
        const gml_sgd_scalars s = {.coef = 1, .mom = 0.9f, .omdamp = 1, .neg_lr = -0.1f};
        v->sgd(0, &s, b.p, b.g, b.m);
    }
    compare("p", v, 0, 0, "n=0", b.p, b.wp);
    compare("m", v, 0, 0, "n=0", b.m, b.wm);
    bufs_free(&b, 0);
}

/* ---- gml_optim_step under every ISA and thread count ------------------------- */

enum { N_PARAMS = 5, STEPS = 3 };

static float u32_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

typedef struct {
    gml_tensor *base[N_PARAMS], *param[N_PARAMS];   /* param: a view of base, or base */
    gml_tensor *gbase[N_PARAMS], *grad[STEPS][N_PARAMS];
    float *init[N_PARAMS];                          /* base's data at the start */
} step_case;

/* A tensor of shape ne viewed from base (its data random): contiguous,
 * transposed (ne's two dimensions swapped in base) or sliced (base one
 * larger in each). */
static gml_tensor *laid_out(gml_context *ctx, int nd, const int64_t *ne, int layout,
                            gml_tensor **base) {
    int64_t bne[2] = {ne[0], nd > 1 ? ne[1] : 1};
    if (layout == 1) bne[0] = ne[1], bne[1] = ne[0];
    if (layout == 2) bne[0]++, bne[1]++;
    *base = gml_new_tensor(ctx, GML_F32, nd, bne);
    for (int64_t i = 0; i < gml_nelements(*base); i++) ((float *)(*base)->data)[i] = value(1.0f);
    if (layout == 0) return *base;
    if (layout == 1) return gml_transpose(ctx, *base, 0, 1);
    gml_tensor *t = gml_slice(ctx, *base, 0, 1, ne[0]);
    return nd > 1 ? gml_slice(ctx, t, 1, 1, ne[1]) : t;
}

static void check_steps(void) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 32 << 20});
    /* 20011: three units of 8192 split over threads; 3 x 8229: units across
     * rows; odd shapes; one element */
    static const int64_t shapes[N_PARAMS][2] = {{20011, 1}, {3, 8229}, {129, 65}, {3, 5}, {1, 1}};
    static const int nd[N_PARAMS] = {1, 2, 2, 2, 1};
    static const int lp[N_PARAMS] = {0, 0, 1, 2, 0}, lg[N_PARAMS] = {2, 0, 0, 1, 0};
    step_case sc;
    for (int i = 0; i < N_PARAMS; i++) {
        sc.param[i] = laid_out(ctx, nd[i], shapes[i], lp[i], &sc.base[i]);
        const size_t bytes = (size_t)gml_nelements(sc.base[i]) * sizeof(float);
        sc.init[i] = malloc(bytes);
        memcpy(sc.init[i], sc.base[i]->data, bytes);
        for (int s = 0; s < STEPS; s++) {
            sc.grad[s][i] = laid_out(ctx, nd[i], shapes[i], lg[i], &sc.gbase[i]);
            /* finite gradients (a step refuses others) */
            float *gd = sc.gbase[i]->data;
            for (int64_t e = 0; e < gml_nelements(sc.gbase[i]); e++)
                gd[e] = isfinite(gd[e]) && fabsf(gd[e]) < 1e6f ? gd[e] * 0.01f : 1e-3f;
        }
    }
    gml_optim_params cfg[4];
    cfg[0] = gml_optim_defaults(GML_OPTIM_ADAMW);
    cfg[0].clip_grad_norm = 1.0f;
    cfg[1] = gml_optim_defaults(GML_OPTIM_ADAMW);
    cfg[1].lr = 0.1f, cfg[1].beta1 = 0.5f, cfg[1].beta2 = 0.9f, cfg[1].eps = 1e-3f;
    cfg[2] = gml_optim_defaults(GML_OPTIM_SGD);
    cfg[2].lr = 0.02f, cfg[2].momentum = 0.9f, cfg[2].nesterov = true;
    cfg[2].weight_decay = 0.1f, cfg[2].clip_grad_norm = 5.0f;
    cfg[3] = gml_optim_defaults(GML_OPTIM_SGD);
    cfg[3].lr = 0.05f, cfg[3].momentum = 0.8f, cfg[3].dampening = 0.3f;
    cfg[3].weight_decay = 0.02f;
    size_t total = 0;
    for (int i = 0; i < N_PARAMS; i++) total += (size_t)gml_nelements(sc.param[i]);
    uint32_t *ref = malloc(total * 4), *got = malloc(total * 4);
    static const int threads[] = {1, 2, 3, 4, 7};
    const gml_isa isas[] = {GML_TEST_ISAS};
    for (int c = 0; c < 4; c++) {
        float ref_norm[STEPS] = {0};
        for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
            if (!gml_cpu_has(isas[k])) {
                if (c == 0)
                    printf("skip gml_optim_step under %s: this CPU lacks it\n",
                           gml_isa_name(isas[k]));
                continue;
            }
            for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
                const bool is_ref = k == 0 && t == 0;
                for (int i = 0; i < N_PARAMS; i++)
                    memcpy(sc.base[i]->data, sc.init[i],
                           (size_t)gml_nelements(sc.base[i]) * sizeof(float));
                char err[256];
                gml_optim *o = gml_optim_new(&cfg[c], sc.param, N_PARAMS, err, sizeof err);
                CHECK(o != NULL, "config %d: %s", c, err);
                if (!o) continue;
                CHECK(gml_set_isa(isas[k]) == GML_OK, "gml_set_isa(%s)", gml_isa_name(isas[k]));
                for (int s = 0; s < STEPS; s++) {
                    float norm = 0;
                    const gml_status st = gml_optim_step(o, sc.grad[s], threads[t], &norm);
                    CHECK(st == GML_OK, "config %d step %d: %s", c, s, gml_optim_error(o));
                    if (is_ref) ref_norm[s] = norm;
                    CHECK(same_f32(norm, ref_norm[s]), "config %d (%s, %d threads) step %d: "
                          "norm %.9g, under %s at 1 thread %.9g", c, gml_isa_name(isas[k]),
                          threads[t], s, (double)norm, gml_isa_name(isas[0]),
                          (double)ref_norm[s]);
                }
                gml_set_isa(GML_ISA_AUTO);
                gml_optim_free(o);
                size_t off = 0;
                for (int i = 0; i < N_PARAMS; i++) {
                    read_elems(sc.param[i], (is_ref ? ref : got) + off);
                    off += (size_t)gml_nelements(sc.param[i]);
                }
                if (is_ref) continue;
                int bad = 0;
                for (size_t e = 0; e < total && bad < 3; e++)
                    if (got[e] != ref[e] && !(isnan(u32_f32(got[e])) && isnan(u32_f32(ref[e])))) {
                        bad++;
                        CHECK(false, "config %d (%s, %d threads): parameter element %zu (of "
                              "all, in order) is %08x, under %s at 1 thread %08x", c,
                              gml_isa_name(isas[k]), threads[t], e, got[e],
                              gml_isa_name(isas[0]), ref[e]);
                    }
            }
        }
    }
    free(ref);
    free(got);
    for (int i = 0; i < N_PARAMS; i++) free(sc.init[i]);
    gml_free(ctx);
}

/* The global norm (docs/training.md): each parameter's squares summed in
 * double over runs of 8192 elements from its start, in order, the runs
 * added in order, the square root rounded once to float. */
enum { RUN = 8192, NP = 4 };

static float norm_in_order(gml_tensor *const *g) {
    double sq = 0;
    for (int i = 0; i < NP; i++) {
        const int64_t n = gml_nelements(g[i]);
        uint32_t *bits = malloc((size_t)n * 4);
        read_elems(g[i], bits);
        for (int64_t r = 0; r < n; r += RUN) {
            double acc = 0;
            for (int64_t e = r; e < n && e < r + RUN; e++) {
                const double x = u32_f32(bits[e]);
                acc += x * x;
            }
            sq += acc;
        }
        free(bits);
    }
    return (float)sqrt(sq);
}

static void check_norm_threads(gml_tensor *const *p, gml_tensor *const *g, const char *what) {
    const float want = norm_in_order(g);
    static const int threads[] = {1, 2, 3, 4, 7};
    for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
        gml_optim_params op = gml_optim_defaults(GML_OPTIM_SGD);
        op.clip_grad_norm = 1e-3f;
        gml_optim *o = gml_optim_new(&op, p, NP, NULL, 0);
        float norm = 0;
        CHECK(o && gml_optim_step(o, g, threads[t], &norm) == GML_OK, "norm, %s: step (%d "
              "threads)", what, threads[t]);
        CHECK(f32_bits(norm) == f32_bits(want), "norm, %s, at %d threads: %.9g (%08x), want "
              "%.9g (%08x)", what, threads[t], (double)norm, f32_bits(norm), (double)want,
              f32_bits(want));
        gml_optim_free(o);
    }
}

/* On gradients long enough for many whole runs (the step takes several at
 * once), after a parameter whose runs shift the others', and a strided
 * one: random ones, then one run whose sum is rounded otherwise in another
 * order (8188 squares of 2^-54 first, then 2^-24, 2^-24, 2^-48 and 1: in
 * order the float norm is 1 + 2^-23; the big square first absorbs the small
 * ones, and the norm is (1 + 2^-24)^2's root exactly, which rounds to 1). */
static void check_norm(void) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 16 << 20});
    static const int64_t shapes[NP][2] = {{3, 5}, {17 * RUN + 4321, 1}, {9 * RUN, 1}, {515, 257}};
    static const int nd[NP] = {2, 1, 1, 2};
    gml_tensor *p[NP], *g[NP], *gb[NP];
    for (int i = 0; i < NP; i++) {
        p[i] = gml_new_tensor(ctx, GML_F32, nd[i], shapes[i]);
        g[i] = laid_out(ctx, nd[i], shapes[i], i == 3 ? 1 : 0, &gb[i]);
        float *gd = gb[i]->data;
        for (int64_t e = 0; e < gml_nelements(gb[i]); e++) gd[e] = rand_uniform(-1, 1) * 1e-3f;
        memset(p[i]->data, 0, (size_t)gml_nelements(p[i]) * sizeof(float));
    }
    check_norm_threads(p, g, "random gradients");
    for (int i = 0; i < NP; i++)
        memset(gb[i]->data, 0, (size_t)gml_nelements(gb[i]) * sizeof(float));
    float *run = (float *)g[1]->data + 3 * RUN;
    for (int e = 0; e < RUN - 4; e++) run[e] = 0x1p-27f;
    run[RUN - 4] = run[RUN - 3] = 0x1p-12f;
    run[RUN - 2] = 0x1p-24f;
    run[RUN - 1] = 1.0f;
    CHECK(norm_in_order(g) == 1.0f + 0x1p-23f, "norm: the order-sensitive case gives %.9g",
          (double)norm_in_order(g));
    check_norm_threads(p, g, "one run rounded by its order");
    gml_free(ctx);
}

int main(void) {
    for (size_t i = 0; i < sizeof VARIANTS / sizeof *VARIANTS; i++)
        if (cpu_runs(VARIANTS[i].isa, VARIANTS[i].name)) check_variant(&VARIANTS[i]);
    check_steps();
    check_norm();
    return check_report("test_ukernels_optim");
}
