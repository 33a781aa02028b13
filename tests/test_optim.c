/* The optimizers (<ggmlite/optim.h>): SGD and AdamW with clipping
 *   - against PyTorch (tests/fixtures/optim/<case>.safetensors, written by
 *     gen_optim.py from torch.optim.AdamW / SGD and clip_grad_norm_): six
 *     steps of each case, the parameters after every step and the norms;
 *   - against this file's own loop in double (the update rules as the
 *     torch.optim docs write them: m / (1 - beta1^t), sqrt(v / (1 - beta2^t))),
 *     on parameters large enough that threads split them, strided ones too;
 *   - bitwise the same parameters at 1, 2, 3, 4 and 7 threads, and the
 *     gradients never written;
 *   - the defaults, every refusal of gml_optim_new and gml_optim_step, and a
 *     non-finite gradient (refused, nothing updated).
 *
 * Tolerances. Against the double loop: the f32 arithmetic rounds each of
 * the ~8 operations of an update (about 1e-7 relative each) and the
 * parameter itself every step, so after s steps |p - ref| <= 4e-7 s
 * (|ref| + 1) holds with a margin; a wrong rule (a missing bias correction,
 * dampening or momentum term) is off by lr-sized amounts, 1e-4 to 1e-1.
 * Against PyTorch: the same f32 operations in the same order, but its
 * vector kernels may fuse a multiply-add (one rounding less): 1e-6 (|w| + 1). */
#include "check.h"

#include <ggmlite/io.h>

static const char *fixtures;
/* the largest |w - want| / (|want| + 1) against PyTorch and the double loop */
static double worst_torch, worst_rel;
static const int THREADS[] = {1, 2, 3, 4, 7};
#define N_THREADS (int)(sizeof THREADS / sizeof *THREADS)

/* hparams [10] as gen_optim.py writes them */
static gml_optim_params from_hparams(const float *h) {
    gml_optim_params p = gml_optim_defaults(h[0] != 0 ? GML_OPTIM_ADAMW : GML_OPTIM_SGD);
    p.lr = h[1];
    p.beta1 = h[2];
    p.beta2 = h[3];
    p.eps = h[4];
    p.weight_decay = h[5];
    p.momentum = h[6];
    p.dampening = h[7];
    p.nesterov = h[8] != 0;
    p.clip_grad_norm = h[9];
    return p;
}

/* ---- the reference: the update rules in double ------------------------------------ */

typedef struct ref_state {
    int n;
    int64_t *numel;
    double **p, **m, **v;
    int64_t t;
} ref_state;

static ref_state ref_new(int n, float *const *p0, const int64_t *numel) {
    ref_state r = {.n = n};
    r.numel = malloc((size_t)n * sizeof *r.numel);
    r.p = malloc((size_t)n * sizeof *r.p);
    r.m = malloc((size_t)n * sizeof *r.m);
    r.v = malloc((size_t)n * sizeof *r.v);
    for (int i = 0; i < n; i++) {
        r.numel[i] = numel[i];
        r.p[i] = malloc((size_t)numel[i] * sizeof(double));
        r.m[i] = calloc((size_t)numel[i], sizeof(double));
        r.v[i] = calloc((size_t)numel[i], sizeof(double));
        for (int64_t e = 0; e < numel[i]; e++) r.p[i][e] = p0[i][e];
    }
    return r;
}

static void ref_free(ref_state *r) {
    for (int i = 0; i < r->n; i++) {
        free(r->p[i]);
        free(r->m[i]);
        free(r->v[i]);
    }
    free(r->p);
    free(r->m);
    free(r->v);
    free(r->numel);
}

/* The hyper-parameters as the user wrote them (decimal), from the floats. */
static double dec(float f) {
    char buf[32];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        if ((float)strtod(buf, NULL) == f) return strtod(buf, NULL);
    }
    return f;
}

/* One step; returns the norm before clipping. */
static double ref_step(ref_state *r, const gml_optim_params *hp, float *const *grads) {
    double sq = 0;
    for (int i = 0; i < r->n; i++)
        for (int64_t e = 0; e < r->numel[i]; e++) sq += (double)grads[i][e] * grads[i][e];
    const double norm = sqrt(sq);
    double coef = 1;
    if (hp->clip_grad_norm > 0) coef = fmin(dec(hp->clip_grad_norm) / (norm + 1e-6), 1.0);
    r->t++;
    const double lr = dec(hp->lr), wd = dec(hp->weight_decay);
    for (int i = 0; i < r->n; i++)
        for (int64_t e = 0; e < r->numel[i]; e++) {
            const double g = grads[i][e] * coef;
            double *p = &r->p[i][e], *m = &r->m[i][e], *v = &r->v[i][e];
            if (hp->kind == GML_OPTIM_ADAMW) {
                const double b1 = dec(hp->beta1), b2 = dec(hp->beta2);
                *p *= 1 - lr * wd;
                *m = b1 * *m + (1 - b1) * g;
                *v = b2 * *v + (1 - b2) * g * g;
                const double mhat = *m / (1 - pow(b1, (double)r->t));
                const double vhat = *v / (1 - pow(b2, (double)r->t));
                *p -= lr * mhat / (sqrt(vhat) + dec(hp->eps));
            } else {
                double d = g + wd * *p;
                const double mom = dec(hp->momentum);
                if (mom != 0) {
                    *m = r->t == 1 ? d : mom * *m + (1 - dec(hp->dampening)) * d;
                    d = hp->nesterov ? d + mom * *m : *m;
                }
                *p -= lr * d;
            }
        }
    return norm;
}

/* ---- one run of an optimizer over tensors in given layouts --------------------------- */

typedef struct run_spec {
    int n;
    const int64_t *const *shape; /* [n] shapes */
    const int *n_dims;
    const chk_layout *lp, *lg;   /* layouts of params and grads */
} run_spec;

/* Runs steps on fresh tensors at nth threads: params start at p0, step s's
 * gradients are g[s]; after each step the params (dense) go to out[s][i]
 * and the norm to norms[s]. Returns false on a failure (reported). */
static bool run_optim(const run_spec *rs, const gml_optim_params *hp, float *const *p0,
                      float *const *const *g, int steps, int nth, float ***out, float *norms) {
    gml_context *ctx = chk_ctx(64 << 20);
    gml_tensor *params[8], *grads[8];
    for (int i = 0; i < rs->n; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        params[i] = chk_new_layout(ctx, GML_F32, rs->n_dims[i], rs->shape[i], rs->lp[i], name);
        snprintf(name, sizeof name, "dw%d", i);
        grads[i] = chk_new_layout(ctx, GML_F32, rs->n_dims[i], rs->shape[i], rs->lg[i], name);
        chk_write(params[i], p0[i]);
    }
    char err[512];
    gml_optim *o = gml_optim_new(hp, params, rs->n, err, sizeof err);
    bool ok = CHECK(o, "gml_optim_new: %s", err);
    for (int s = 0; ok && s < steps; s++) {
        for (int i = 0; i < rs->n; i++) chk_write(grads[i], g[s][i]);
        ok = CHECK(gml_optim_step(o, grads, nth, &norms[s]) == GML_OK, "step %d: %s", s,
                   gml_optim_error(o));
        for (int i = 0; ok && i < rs->n; i++) {
            out[s][i] = chk_dense(params[i]);
            float *gd = chk_dense(grads[i]);
            ok = CHECK(memcmp(gd, g[s][i], (size_t)chk_numel(grads[i]) * sizeof(float)) == 0,
                       "step %d: gradient %d was written", s, i);
            free(gd);
        }
    }
    CHECK(!ok || gml_optim_steps(o) == steps, "gml_optim_steps %lld, want %d",
          (long long)gml_optim_steps(o), steps);
    gml_optim_free(o);
    gml_free(ctx);
    return ok;
}

/* Runs at every thread count; checks the bits agree; returns the 1-thread
 * results (out[s][i], malloc'd) and norms. */
static bool run_all_threads(const run_spec *rs, const gml_optim_params *hp, float *const *p0,
                            float *const *const *g, int steps, float ***out, float *norms) {
    for (int k = 0; k < N_THREADS; k++) {
        float **o2[16];
        float n2[16];
        float ***dst = k == 0 ? out : o2;
        for (int s = 0; s < steps; s++) {
            if (k) o2[s] = calloc((size_t)rs->n, sizeof(float *));
        }
        const bool ok = run_optim(rs, hp, p0, g, steps, THREADS[k], dst, k == 0 ? norms : n2);
        for (int s = 0; k && s < steps; s++) {
            for (int i = 0; ok && i < rs->n; i++) {
                int64_t numel = 1;
                for (int d = 0; d < rs->n_dims[i]; d++) numel *= rs->shape[i][d];
                CHECK(memcmp(o2[s][i], out[s][i], (size_t)numel * sizeof(float)) == 0,
                      "%d threads: parameter %d after step %d differs from 1 thread's", THREADS[k],
                      i, s);
            }
            CHECK(!ok || memcmp(&n2[s], &norms[s], sizeof(float)) == 0,
                  "%d threads: norm of step %d differs", THREADS[k], s);
            for (int i = 0; i < rs->n; i++) free(o2[s][i]);
            free(o2[s]);
        }
        if (!ok) return false;
    }
    return true;
}

/* ---- against PyTorch ---------------------------------------------------------------- */

static void test_fixture(const char *name) {
    chk_case("PyTorch %s", name);
    char path[1024], err[512] = "";
    snprintf(path, sizeof path, "%s/%s.safetensors", fixtures, name);
    gml_context *fx = gml_load_safetensors(path, err, sizeof err);
    if (!CHECK(fx, "load %s: %s", path, err)) return;
    gml_tensor *hpt = gml_get_tensor(fx, "hparams"), *normt = gml_get_tensor(fx, "norm");
    if (!CHECK(hpt && normt && gml_nelements(hpt) == 10, "hparams and norm")) {
        gml_free(fx);
        return;
    }
    const gml_optim_params hp = from_hparams(hpt->data);
    const int steps = (int)gml_nelements(normt);
    int n = 0;
    char tn[32];
    for (;; n++) {
        snprintf(tn, sizeof tn, "p%d", n);
        if (!gml_get_tensor(fx, tn)) break;
    }
    if (!CHECK(n >= 1 && n <= 8 && steps >= 1 && steps <= 16, "%d params, %d steps", n, steps)) {
        gml_free(fx);
        return;
    }
    const int64_t *shape[8];
    int n_dims[8];
    float *p0[8];
    float **g[16];
    static const chk_layout lp[] = {CHK_TRANSPOSED, CHK_SLICED, CHK_REVERSED, CHK_CONTIGUOUS,
                                    CHK_CONTIGUOUS, CHK_CONTIGUOUS, CHK_CONTIGUOUS, CHK_CONTIGUOUS};
    static const chk_layout lg[] = {CHK_SLICED, CHK_CONTIGUOUS, CHK_OUTER_SWAPPED, CHK_SLICED,
                                    CHK_CONTIGUOUS, CHK_CONTIGUOUS, CHK_CONTIGUOUS, CHK_CONTIGUOUS};
    for (int i = 0; i < n; i++) {
        snprintf(tn, sizeof tn, "p%d", i);
        const gml_tensor *t = gml_get_tensor(fx, tn);
        n_dims[i] = t->n_dims;
        shape[i] = t->ne + GML_MAX_DIMS - t->n_dims;
        p0[i] = chk_dense(t);
    }
    for (int s = 0; s < steps; s++) {
        g[s] = calloc((size_t)n, sizeof *g[s]);
        for (int i = 0; i < n; i++) {
            snprintf(tn, sizeof tn, "g%d_%d", s, i);
            g[s][i] = chk_dense(gml_get_tensor(fx, tn));
        }
    }
    const run_spec rs = {n, shape, n_dims, lp, lg};
    float **out[16];
    float norms[16];
    for (int s = 0; s < steps; s++) out[s] = calloc((size_t)n, sizeof *out[s]);
    if (run_all_threads(&rs, &hp, p0, (float *const *const *)g, steps, out, norms)) {
        const float *want_norm = normt->data;
        for (int s = 0; s < steps; s++) {
            CHECK(fabsf(norms[s] - want_norm[s]) <= 1e-6f * want_norm[s],
                  "step %d: norm %.9g, PyTorch %.9g", s, (double)norms[s], (double)want_norm[s]);
            for (int i = 0; i < n; i++) {
                snprintf(tn, sizeof tn, "p%d_%d", i, s);
                const gml_tensor *w = gml_get_tensor(fx, tn);
                const float *wv = w->data;
                for (int64_t e = 0; e < gml_nelements(w); e++) {
                    const double err_ = fabs((double)out[s][i][e] - wv[e]);
                    worst_torch = fmax(worst_torch, err_ / (fabs(wv[e]) + 1));
                    if (!CHECK(err_ <= 1e-6 * (fabs(wv[e]) + 1), "step %d: w%d[%lld] %.9g, "
                               "PyTorch %.9g", s, i, (long long)e, (double)out[s][i][e],
                               (double)wv[e]))
                        break;
                }
            }
        }
    }
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < n; i++) {
            free(out[s][i]);
            free(g[s][i]);
        }
        free(out[s]);
        free(g[s]);
    }
    for (int i = 0; i < n; i++) free(p0[i]);
    gml_free(fx);
}

/* ---- against the double loop, large and strided ------------------------------------ */


static void test_double_loop(void) {
    /* 20011 elements: three units of 8192, so threads split them; a
     * transposed [129, 65]; a sliced [3, 5]; a single element */
    static const int64_t s0[] = {20011}, s1[] = {129, 65}, s2[] = {3, 5}, s3[] = {1};
    static const int64_t *const shape[] = {s0, s1, s2, s3};
    static const int n_dims[] = {1, 2, 2, 1};
    static const chk_layout lp[] = {CHK_CONTIGUOUS, CHK_TRANSPOSED, CHK_SLICED, CHK_CONTIGUOUS};
    static const chk_layout lg[] = {CHK_SLICED, CHK_CONTIGUOUS, CHK_TRANSPOSED, CHK_CONTIGUOUS};
    const run_spec rs = {4, shape, n_dims, lp, lg};
    enum { STEPS = 5, N = 4 };
    gml_optim_params cfg[9];
    int nc = 0;
    cfg[nc++] = gml_optim_defaults(GML_OPTIM_ADAMW);
    cfg[nc] = gml_optim_defaults(GML_OPTIM_ADAMW);
    cfg[nc].lr = 0.1f, cfg[nc].beta1 = 0.5f, cfg[nc].beta2 = 0.9f, cfg[nc].eps = 1e-3f;
    cfg[nc].weight_decay = 0.3f, cfg[nc++].clip_grad_norm = 10.0f;
    cfg[nc] = gml_optim_defaults(GML_OPTIM_ADAMW);
    cfg[nc].weight_decay = 0, cfg[nc++].clip_grad_norm = 1e6f; /* clipping that never engages */
    cfg[nc] = gml_optim_defaults(GML_OPTIM_SGD);
    cfg[nc++].lr = 0.1f;
    cfg[nc] = gml_optim_defaults(GML_OPTIM_SGD);
    cfg[nc].lr = 0.05f, cfg[nc++].momentum = 0.9f;
    cfg[nc] = gml_optim_defaults(GML_OPTIM_SGD);
    cfg[nc].lr = 0.05f, cfg[nc].momentum = 0.8f, cfg[nc].dampening = 0.3f;
    cfg[nc++].weight_decay = 0.02f;
    cfg[nc] = gml_optim_defaults(GML_OPTIM_SGD);
    cfg[nc].lr = 0.02f, cfg[nc].momentum = 0.9f, cfg[nc].nesterov = true;
    cfg[nc].weight_decay = 0.1f, cfg[nc++].clip_grad_norm = 5.0f;
    cfg[nc] = gml_optim_defaults(GML_OPTIM_SGD);
    cfg[nc].lr = 0.3f, cfg[nc++].weight_decay = 0.5f;
    for (int c = 0; c < nc; c++) {
        chk_case("double loop: %s lr %g wd %g mom %g damp %g nesterov %d clip %g",
                 cfg[c].kind == GML_OPTIM_ADAMW ? "adamw" : "sgd", (double)cfg[c].lr,
                 (double)cfg[c].weight_decay, (double)cfg[c].momentum, (double)cfg[c].dampening,
                 (int)cfg[c].nesterov, (double)cfg[c].clip_grad_norm);
        chk_rng r = chk_seed(500 + (uint64_t)c);
        int64_t numel[N];
        float *p0[N];
        float *gbuf[STEPS][N];
        float **g[STEPS];
        for (int i = 0; i < N; i++) {
            numel[i] = 1;
            for (int d = 0; d < n_dims[i]; d++) numel[i] *= shape[i][d];
            p0[i] = malloc((size_t)numel[i] * sizeof(float));
            for (int64_t e = 0; e < numel[i]; e++) p0[i][e] = chk_uniform(&r, -2, 2);
        }
        for (int s = 0; s < STEPS; s++) {
            /* gradients of varying size: clipping at 10 and 5 engages on some steps */
            const float scale = s % 2 ? 0.01f : 0.2f;
            for (int i = 0; i < N; i++) {
                gbuf[s][i] = malloc((size_t)numel[i] * sizeof(float));
                for (int64_t e = 0; e < numel[i]; e++) gbuf[s][i][e] = scale * chk_uniform(&r, -1, 1);
            }
            g[s] = gbuf[s];
        }
        float **out[STEPS];
        float norms[STEPS];
        for (int s = 0; s < STEPS; s++) out[s] = calloc(N, sizeof *out[s]);
        if (run_all_threads(&rs, &cfg[c], p0, (float *const *const *)g, STEPS, out, norms)) {
            ref_state ref = ref_new(N, p0, numel);
            for (int s = 0; s < STEPS; s++) {
                const double norm = ref_step(&ref, &cfg[c], g[s]);
                CHECK(fabs(norms[s] - norm) <= 0x1p-24 * norm, "step %d: norm %.9g, want %.9g "
                      "(rounded once: within half an ulp)", s, (double)norms[s], norm);
                const double tol = 4e-7 * (s + 1);
                for (int i = 0; i < N; i++)
                    for (int64_t e = 0; e < numel[i]; e++) {
                        const double want = ref.p[i][e], got = out[s][i][e];
                        worst_rel = fmax(worst_rel, fabs(got - want) / (fabs(want) + 1));
                        if (!CHECK(fabs(got - want) <= tol * (fabs(want) + 1),
                                   "step %d: w%d[%lld] %.9g, double loop %.9g", s, i,
                                   (long long)e, got, want))
                            break;
                    }
            }
            ref_free(&ref);
        }
        for (int s = 0; s < STEPS; s++) {
            for (int i = 0; i < N; i++) {
                free(out[s][i]);
                free(gbuf[s][i]);
            }
            free(out[s]);
        }
        for (int i = 0; i < N; i++) free(p0[i]);
    }
}

/* ---- defaults and refusals ---------------------------------------------------------- */

static void test_defaults(void) {
    chk_case("defaults");
    const gml_optim_params a = gml_optim_defaults(GML_OPTIM_ADAMW);
    CHECK(a.kind == GML_OPTIM_ADAMW && a.lr == 1e-3f && a.beta1 == 0.9f && a.beta2 == 0.999f &&
          a.eps == 1e-8f && a.weight_decay == 1e-2f && a.momentum == 0 && a.dampening == 0 &&
          !a.nesterov && a.clip_grad_norm == 0, "AdamW's defaults are torch.optim.AdamW's");
    const gml_optim_params s = gml_optim_defaults(GML_OPTIM_SGD);
    CHECK(s.kind == GML_OPTIM_SGD && s.lr == 1e-3f && s.momentum == 0 && s.dampening == 0 &&
          s.weight_decay == 0 && !s.nesterov && s.clip_grad_norm == 0, "SGD's defaults");
}

static void expect_new_error(const gml_optim_params *p, gml_tensor *const *params, int n,
                             const char *want) {
    char err[512] = "x";
    gml_optim *o = gml_optim_new(p, params, n, err, sizeof err);
    CHECK(!o && strstr(err, want), "gml_optim_new: want \"%s\", got %s \"%s\"", want,
          o ? "an optimizer" : "NULL", err);
    gml_optim_free(o);
}

static void test_errors(void) {
    chk_case("refusals");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *w = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 3, 4), "w");
    gml_tensor *b = gml_set_name(gml_new_tensor_1d(ctx, GML_F32, 4), "b");
    chk_rng r = chk_seed(9);
    chk_fill_uniform(w, &r, -1, 1);
    chk_fill_uniform(b, &r, -1, 1);
    gml_tensor *ps[] = {w, b};
    const gml_optim_params ad = gml_optim_defaults(GML_OPTIM_ADAMW);
    const gml_optim_params sg = gml_optim_defaults(GML_OPTIM_SGD);
    gml_optim_params p;

    expect_new_error(NULL, ps, 2, "gml_optim_new: p is NULL");
    expect_new_error(&ad, NULL, 2, "gml_optim_new: params is NULL");
    expect_new_error(&ad, ps, 0, "gml_optim_new: n_params is 0, must be at least 1");
    expect_new_error(&ad, (gml_tensor *[]){w, NULL}, 2, "gml_optim_new: params[1] is NULL");
    p = ad, p.kind = (gml_optimizer)7;
    expect_new_error(&p, ps, 2, "unknown optimizer kind 7");
    p = ad, p.lr = -1e-3f;
    expect_new_error(&p, ps, 2, "gml_optim_new (adamw): lr is -0.001, must be finite and >= 0");
    p = ad, p.eps = NAN;
    expect_new_error(&p, ps, 2, "eps is nan");
    p = ad, p.beta2 = 1.0f;
    expect_new_error(&p, ps, 2, "gml_optim_new (adamw): beta2 is 1, must be in [0, 1)");
    p = ad, p.beta1 = -0.1f;
    expect_new_error(&p, ps, 2, "beta1 is -0.1");
    p = ad, p.clip_grad_norm = -1;
    expect_new_error(&p, ps, 2, "clip_grad_norm is -1");
    p = sg, p.momentum = -0.5f;
    expect_new_error(&p, ps, 2, "gml_optim_new (sgd): momentum is -0.5");
    p = sg, p.weight_decay = -0.5f;
    expect_new_error(&p, ps, 2, "weight_decay is -0.5");
    p = sg, p.nesterov = true;
    expect_new_error(&p, ps, 2, "nesterov needs momentum > 0 and dampening 0, got momentum 0, "
                     "dampening 0");
    p = sg, p.nesterov = true, p.momentum = 0.9f, p.dampening = 0.1f;
    expect_new_error(&p, ps, 2, "got momentum 0.9, dampening 0.1");
    gml_tensor *wi = gml_set_name(gml_new_tensor_2d(ctx, GML_I32, 3, 4), "wi");
    expect_new_error(&ad, (gml_tensor *[]){w, wi}, 2,
                     "gml_optim_new: parameter 1 'wi' i32 [3,4] must be f32 with data");
    gml_context *na = gml_init((gml_init_params){.mem_size = 1 << 16, .no_alloc = true});
    gml_tensor *wn = gml_set_name(gml_new_tensor_1d(na, GML_F32, 5), "wn");
    expect_new_error(&ad, &wn, 1, "parameter 0 'wn' f32 [5] must be f32 with data (it has none");
    gml_free(na);
    /* two slices of one tensor: apart is fine, overlapping is refused */
    gml_tensor *lo = gml_slice(ctx, w, 0, 0, 2), *hi = gml_slice(ctx, w, 0, 2, 1);
    gml_tensor *mid = gml_slice(ctx, w, 0, 1, 2);
    char err[512];
    gml_optim *o = gml_optim_new(&ad, (gml_tensor *[]){lo, hi}, 2, err, sizeof err);
    CHECK(o, "disjoint slices of one tensor: %s", err);
    gml_optim_free(o);
    expect_new_error(&ad, (gml_tensor *[]){lo, mid}, 2, "share memory");
    gml_tensor *bc = gml_view(ctx, b, 2, (int64_t[]){3, 4}, (size_t[]){0, 4}, 0);
    expect_new_error(&ad, &bc, 1, "has elements that share memory");

    /* gml_optim_step's refusals: nothing updated */
    o = gml_optim_new(&ad, ps, 2, err, sizeof err);
    if (!CHECK(o, "gml_optim_new: %s", err)) goto done;
    gml_tensor *gw = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 3, 4), "gw");
    gml_tensor *gb = gml_set_name(gml_new_tensor_1d(ctx, GML_F32, 4), "gb");
    chk_fill_uniform(gw, &r, -1, 1);
    chk_fill_uniform(gb, &r, -1, 1);
    float *w0 = chk_dense(w), *b0 = chk_dense(b);
    gml_tensor *gbad = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 4, 3), "gbad");
    gml_tensor *gint = gml_set_name(gml_new_tensor_1d(ctx, GML_I32, 4), "gint");
    const struct {
        gml_tensor *g[2];
        gml_status st;
        const char *want;
    } cases[] = {
        {{gbad, gb}, GML_ERR_INVALID, "gml_optim_step: gradient 0 'gbad' f32 [4,3] does not fit "
                                      "parameter 'w' f32 [3,4]"},
        {{gw, NULL}, GML_ERR_INVALID, "gml_optim_step: grads[1] (of parameter 'b' [4]) is NULL"},
        {{gw, gint}, GML_ERR_INVALID, "gradient 1 'gint' i32 [4] does not fit parameter 'b' f32 [4]"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        float norm = -1;
        CHECK(gml_optim_step(o, cases[k].g, 2, &norm) == cases[k].st && 
              strstr(gml_optim_error(o), cases[k].want), "step case %zu: \"%s\"", k,
              gml_optim_error(o));
    }
    CHECK(gml_optim_step(o, NULL, 2, NULL) == GML_ERR_INVALID &&
          strstr(gml_optim_error(o), "gml_optim_step: grads is NULL"), "NULL grads: %s",
          gml_optim_error(o));
    CHECK(gml_optim_step(NULL, ps, 2, NULL) == GML_ERR_INVALID &&
          strstr(gml_last_error(NULL), "gml_optim_step: o is NULL"), "NULL o: %s",
          gml_last_error(NULL));
    CHECK(strcmp(gml_optim_error(NULL), "gml_optim_error: o is NULL") == 0, "gml_optim_error(NULL)");
    /* a NaN or an infinity in a gradient: refused, nothing updated */
    for (int k = 0; k < 2; k++) {
        ((float *)gb->data)[2] = k ? -INFINITY : NAN;
        float norm = 0;
        CHECK(gml_optim_step(o, (gml_tensor *[]){gw, gb}, 3, &norm) == GML_ERR_NONFINITE &&
              strstr(gml_optim_error(o), k ? "gml_optim_step: gradient 1 'gb' [4] holds -inf at "
                                             "flat index 2 (of parameter 'b'): the global norm "
                                             "is not finite; nothing updated"
                                           : "holds nan at flat index 2"),
              "non-finite gradient: %s", gml_optim_error(o));
        CHECK(!isfinite(norm), "the norm reported is %g", (double)norm);
    }
    float *w1 = chk_dense(w), *b1 = chk_dense(b);
    CHECK(memcmp(w0, w1, 12 * sizeof(float)) == 0 && memcmp(b0, b1, 4 * sizeof(float)) == 0,
          "refused steps update nothing");
    CHECK(gml_optim_steps(o) == 0, "no step counted: %lld", (long long)gml_optim_steps(o));
    /* and the next good step is the first: AdamW's first update moves each
     * element by lr (bias-corrected m / sqrt(v) = sign(g)), after decay */
    ((float *)gb->data)[2] = 0.5f;
    float *gwv = chk_dense(gw), *gbv = chk_dense(gb);
    CHECK(gml_optim_step(o, (gml_tensor *[]){gw, gb}, 1, NULL) == GML_OK, "step: %s",
          gml_optim_error(o));
    float *w2 = chk_dense(w), *b2 = chk_dense(b);
    for (int e = 0; e < 12; e++) {
        const double want = w0[e] * (1 - 1e-5) - 1e-3 * (gwv[e] > 0 ? 1 : -1);
        CHECK(fabs(w2[e] - want) <= 1e-6, "w[%d] after the first step %.9g, want %.9g", e,
              (double)w2[e], want);
    }
    for (int e = 0; e < 4; e++) {
        const double want = b0[e] * (1 - 1e-5) - 1e-3 * (gbv[e] > 0 ? 1 : -1);
        CHECK(fabs(b2[e] - want) <= 1e-6, "b[%d] after the first step %.9g, want %.9g", e,
              (double)b2[e], want);
    }
    free(w0), free(b0), free(w1), free(b1), free(w2), free(b2), free(gwv), free(gbv);
    gml_optim_free(o);
done:
    gml_optim_free(NULL);
    gml_free(ctx);
}

/* ---- a training loop: gml_grad, a planned graph, the optimizer -------------------------
 * y = x w^T + b against targets, mse_loss, three AdamW steps (clipped), in an
 * allocating context and in a no_alloc one planned once (the gradients are
 * the graph's own copies); the same bits either way, and the loss falls. */
static void train(bool planned, float *w_out, float *b_out, float *losses) {
    gml_context *wctx = chk_ctx(1 << 20); /* the parameters, with data */
    gml_tensor *w = gml_set_name(gml_new_tensor_2d(wctx, GML_F32, 3, 5), "w");
    gml_tensor *b = gml_set_name(gml_new_tensor_1d(wctx, GML_F32, 3), "b");
    chk_rng r = chk_seed(77);
    chk_fill_uniform(w, &r, -1, 1);
    chk_fill_uniform(b, &r, -1, 1);
    gml_context *ctx = planned ? gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true})
                               : chk_ctx(1 << 20);
    gml_tensor *x = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 8, 5), "x");
    gml_tensor *y = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 8, 3), "y");
    gml_tensor *loss = gml_mse_loss(ctx, gml_linear(ctx, x, w, b), y);
    gml_tensor *grads[2];
    CHECK(gml_grad(ctx, loss, NULL, (gml_tensor *[]){w, b}, 2, grads) == GML_OK, "grad: %s",
          gml_last_error(ctx));
    gml_graph *g = gml_build_graph(ctx, (gml_tensor *[]){loss, grads[0], grads[1]}, 3);
    if (planned) CHECK(gml_graph_plan(g, NULL) == GML_OK, "plan: %s", gml_graph_error(g));
    float xv[40], yv[24];
    for (int e = 0; e < 40; e++) xv[e] = chk_uniform(&r, -1, 1);
    for (int e = 0; e < 24; e++) yv[e] = chk_uniform(&r, -1, 1);
    memcpy(planned ? gml_graph_data(g, x) : x->data, xv, sizeof xv);
    memcpy(planned ? gml_graph_data(g, y) : y->data, yv, sizeof yv);
    gml_tensor *gs[2] = {grads[0], grads[1]};
    if (planned) {
        gs[0] = (gml_tensor *)gml_graph_tensor(g, grads[0]);
        gs[1] = (gml_tensor *)gml_graph_tensor(g, grads[1]);
        char err[512];
        CHECK(!gml_optim_new(&(gml_optim_params){.kind = GML_OPTIM_SGD, .lr = 0.1f},
                             (gml_tensor *[]){grads[0]}, 1, err, sizeof err) &&
              strstr(err, "a planned graph's is gml_graph_tensor(g, t)"),
              "a planned tensor's header as a parameter: %s", err);
    }
    gml_optim_params hp = gml_optim_defaults(GML_OPTIM_ADAMW);
    hp.lr = 0.05f;
    hp.clip_grad_norm = 0.5f;
    char err[512];
    gml_optim *o = gml_optim_new(&hp, (gml_tensor *[]){w, b}, 2, err, sizeof err);
    CHECK(o, "gml_optim_new: %s", err);
    if (planned) {
        CHECK(gml_optim_step(o, grads, 2, NULL) == GML_ERR_INVALID &&
              strstr(gml_optim_error(o), "'w' f32 [3,5] (want f32 of its shape, computed): it has "
                                         "no data (a planned graph's output: pass "
                                         "gml_graph_tensor(g, t))"),
              "the planned gradient's header: %s", gml_optim_error(o));
    }
    for (int s = 0; s < 4 && o; s++) {
        CHECK(gml_graph_compute(g, 3) == GML_OK, "compute: %s", gml_graph_error(g));
        losses[s] = *(const float *)(planned ? gml_graph_data(g, loss) : loss->data);
        if (s < 3) CHECK(gml_optim_step(o, gs, 3, NULL) == GML_OK, "step: %s", gml_optim_error(o));
    }
    memcpy(w_out, w->data, 15 * sizeof(float));
    memcpy(b_out, b->data, 3 * sizeof(float));
    gml_optim_free(o);
    gml_graph_free(g);
    gml_free(ctx);
    gml_free(wctx);
}

static void test_training_loop(void) {
    chk_case("a training loop, allocating and planned");
    float w[2][15], b[2][3], losses[2][4];
    train(false, w[0], b[0], losses[0]);
    train(true, w[1], b[1], losses[1]);
    CHECK(memcmp(w[0], w[1], sizeof w[0]) == 0 && memcmp(b[0], b[1], sizeof b[0]) == 0 &&
          memcmp(losses[0], losses[1], sizeof losses[0]) == 0,
          "planned and allocating graphs train to the same bits");
    CHECK(losses[0][3] < losses[0][2] && losses[0][2] < losses[0][1] && losses[0][1] < losses[0][0],
          "the loss falls: %g %g %g %g", (double)losses[0][0], (double)losses[0][1],
          (double)losses[0][2], (double)losses[0][3]);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_optim FIXTURES_DIR (tests/fixtures/optim)\n");
        return 2;
    }
    fixtures = argv[1];
    test_defaults();
    static const char *const cases[] = {"adamw_defaults", "adamw_clip",   "adamw_no_decay",
                                        "sgd_plain",      "sgd_momentum", "sgd_nesterov_clip"};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) test_fixture(cases[k]);
    test_double_loop();
    test_errors();
    test_training_loop();
    printf("largest |w - want| / (|want| + 1): against PyTorch %.2e, against the double loop "
           "%.2e\n", worst_torch, worst_rel);
    return chk_summary();
}
