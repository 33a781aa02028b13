/* The optimizers of <ggmlite/optim.h>: SGD and AdamW as torch.optim's
 * single-tensor loops (torch/optim/sgd.py, adamw.py, 1.13) compute them,
 * operation by operation in f32 with the scalars PyTorch forms in double,
 * and global-norm clipping as torch.nn.utils.clip_grad_norm_.
 *
 * Threads: the parameters' elements are cut into units of UNIT elements
 * (parameter by parameter, in order); threads take fixed ranges of units.
 * The norm adds each unit's squares in double, then the units in order; the
 * update is elementwise (the micro-kernels of ops/optim.h, the variant of
 * the ISA in effect, all giving the scalar one's bits). So nothing depends
 * on the thread count or the ISA. */
#include "internal.h"
#include "threadpool.h"
#include "../ops/optim.h"

#include <math.h>
#include <stdlib.h>

#define UNIT 8192

struct gml_optim {
    gml_optim_params p;
    /* the hyper-parameters as Python would hold them (optim_double) */
    double lr, beta1, beta2, eps, weight_decay, momentum, dampening, clip;
    int n;
    gml_tensor **params;
    int64_t *numel;
    int64_t *unit0;      /* first unit of each parameter; unit0[n] is the count */
    float **m, **v;      /* AdamW's exp_avg, exp_avg_sq; SGD's momentum buffer in m */
    int64_t steps;
    char err[GML_ERR_MAX];
};

/* The shortest decimal that reads back as f, as a double: 0.9f -> 0.9, the
 * number a user writes in Python. */
static double optim_double(float f) {
    if (!isfinite(f)) return f;
    char buf[32];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        const double d = strtod(buf, NULL);
        if ((float)d == f) return d;
    }
    return f;
}

gml_optim_params gml_optim_defaults(gml_optimizer kind) {
    gml_optim_params p = {.kind = kind};
    if (kind == GML_OPTIM_ADAMW) {
        p.lr = 1e-3f;
        p.beta1 = 0.9f;
        p.beta2 = 0.999f;
        p.eps = 1e-8f;
        p.weight_decay = 1e-2f;
    } else if (kind == GML_OPTIM_SGD) {
        p.lr = 1e-3f;
    }
    return p;
}

static void set_err(char *err, size_t size, const char *fmt, ...) GML_PRINTF(3, 4);
static void set_err(char *err, size_t size, const char *fmt, ...) {
    if (!err || !size) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
}

/* Element f (row-major) of an f32 tensor of any strides. */
static inline float *elem(const gml_tensor *t, int64_t f) {
    const int64_t n3 = t->ne[3], r = f / n3;
    int64_t i0, i1, i2;
    gml_row_index(t, r, &i0, &i1, &i2);
    return (float *)(void *)gml_ptr(t, i0, i1, i2, f % n3);
}

static const char *kind_name(gml_optimizer k) {
    return k == GML_OPTIM_ADAMW ? "adamw" : k == GML_OPTIM_SGD ? "sgd" : "?";
}

gml_optim *gml_optim_new(const gml_optim_params *p, gml_tensor *const *params, int n_params,
                         char *err, size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if (!p || !params) {
        set_err(err, err_size, "gml_optim_new: %s is NULL", !p ? "p" : "params");
        return NULL;
    }
    if (p->kind != GML_OPTIM_SGD && p->kind != GML_OPTIM_ADAMW) {
        set_err(err, err_size, "gml_optim_new: unknown optimizer kind %d (GML_OPTIM_SGD or "
                "GML_OPTIM_ADAMW)", (int)p->kind);
        return NULL;
    }
    if (n_params < 1) {
        set_err(err, err_size, "gml_optim_new: n_params is %d, must be at least 1", n_params);
        return NULL;
    }
    /* torch.optim's checks, and clip_grad_norm's */
    const struct {
        const char *name;
        float v;
        bool used;
    } nonneg[] = {
        {"lr", p->lr, true},
        {"eps", p->eps, p->kind == GML_OPTIM_ADAMW},
        {"weight_decay", p->weight_decay, true},
        {"momentum", p->momentum, p->kind == GML_OPTIM_SGD},
        {"dampening", p->dampening, p->kind == GML_OPTIM_SGD},
        {"clip_grad_norm", p->clip_grad_norm, true},
    };
    for (size_t k = 0; k < sizeof nonneg / sizeof *nonneg; k++)
        if (nonneg[k].used && !(nonneg[k].v >= 0 && isfinite(nonneg[k].v))) {
            set_err(err, err_size, "gml_optim_new (%s): %s is %g, must be finite and >= 0",
                    kind_name(p->kind), nonneg[k].name, (double)nonneg[k].v);
            return NULL;
        }
    if (p->kind == GML_OPTIM_ADAMW)
        for (int k = 0; k < 2; k++) {
            const float b = k ? p->beta2 : p->beta1;
            if (!(b >= 0 && b < 1)) {
                set_err(err, err_size, "gml_optim_new (adamw): beta%d is %g, must be in [0, 1)",
                        k + 1, (double)b);
                return NULL;
            }
        }
    if (p->kind == GML_OPTIM_SGD && p->nesterov && (p->momentum <= 0 || p->dampening != 0)) {
        set_err(err, err_size, "gml_optim_new (sgd): nesterov needs momentum > 0 and dampening 0, "
                "got momentum %g, dampening %g", (double)p->momentum, (double)p->dampening);
        return NULL;
    }
    for (int i = 0; i < n_params; i++) {
        const gml_tensor *t = params[i];
        char s[GML_SHAPE_MAX], s2[GML_SHAPE_MAX];
        if (!t) {
            set_err(err, err_size, "gml_optim_new: params[%d] is NULL", i);
            return NULL;
        }
        if (t->type != GML_F32 || !t->data) {
            set_err(err, err_size, "gml_optim_new: parameter %d '%s' %s %s must be f32 with data%s",
                    i, t->name, gml_type_name(t->type), GML_SHAPE(t, s),
                    t->data ? "" : " (it has none: a no_alloc context's tensor; a planned graph's "
                                   "is gml_graph_tensor(g, t))");
            return NULL;
        }
        gml_overlap_witness w;
        if (gml_self_overlap(t, &w) != GML_OVERLAP_NO) {
            set_err(err, err_size, "gml_optim_new: parameter %d '%s' %s has elements that share "
                    "memory (a broadcast view?): each would be updated twice", i, t->name,
                    GML_SHAPE(t, s));
            return NULL;
        }
        for (int j = 0; j < i; j++)
            if (gml_tensors_overlap(params[j], t, &w) != GML_OVERLAP_NO) {
                set_err(err, err_size, "gml_optim_new: parameters %d '%s' %s and %d '%s' %s "
                        "share memory", j, params[j]->name, GML_SHAPE(params[j], s2), i, t->name,
                        GML_SHAPE(t, s));
                return NULL;
            }
    }

    gml_optim *o = calloc(1, sizeof *o);
    if (!o) goto nomem;
    o->p = *p;
    o->lr = optim_double(p->lr);
    o->beta1 = optim_double(p->beta1);
    o->beta2 = optim_double(p->beta2);
    o->eps = optim_double(p->eps);
    o->weight_decay = optim_double(p->weight_decay);
    o->momentum = optim_double(p->momentum);
    o->dampening = optim_double(p->dampening);
    o->clip = optim_double(p->clip_grad_norm);
    o->n = n_params;
    o->params = malloc((size_t)n_params * sizeof *o->params);
    o->numel = malloc((size_t)n_params * sizeof *o->numel);
    o->unit0 = malloc(((size_t)n_params + 1) * sizeof *o->unit0);
    o->m = calloc((size_t)n_params, sizeof *o->m);
    o->v = calloc((size_t)n_params, sizeof *o->v);
    if (!o->params || !o->numel || !o->unit0 || !o->m || !o->v) goto nomem;
    const bool need_m = p->kind == GML_OPTIM_ADAMW || p->momentum != 0;
    const bool need_v = p->kind == GML_OPTIM_ADAMW;
    o->unit0[0] = 0;
    for (int i = 0; i < n_params; i++) {
        o->params[i] = params[i];
        o->numel[i] = gml_nelements(params[i]);
        o->unit0[i + 1] = o->unit0[i] + (o->numel[i] + UNIT - 1) / UNIT;
        const size_t bytes = (size_t)o->numel[i] * sizeof(float);
        if (need_m && !(o->m[i] = calloc(1, bytes ? bytes : 1))) goto nomem;
        if (need_v && !(o->v[i] = calloc(1, bytes ? bytes : 1))) goto nomem;
    }
    return o;
nomem:
    gml_optim_free(o);
    set_err(err, err_size, "gml_optim_new: out of memory for the state of %d parameters", n_params);
    return NULL;
}

void gml_optim_free(gml_optim *o) {
    if (!o) return;
    for (int i = 0; o->m && i < o->n; i++) free(o->m[i]);
    for (int i = 0; o->v && i < o->n; i++) free(o->v[i]);
    free(o->m);
    free(o->v);
    free(o->params);
    free(o->numel);
    free(o->unit0);
    free(o);
}

const char *gml_optim_error(const gml_optim *o) {
    return o ? o->err : "gml_optim_error: o is NULL";
}

int64_t gml_optim_steps(const gml_optim *o) { return o ? o->steps : -1; }

/* ---- one step --------------------------------------------------------------- */

typedef struct step_task {
    gml_optim *o;
    gml_tensor *const *grads;
    double *partial;  /* the norm pass: each unit's sum of squares */
    bool norm_pass;
    /* the update: the scalars in f32 as PyTorch's kernels take them, and
     * the micro-kernel variant of the ISA in effect (ops/optim.h) */
    gml_adamw_scalars adamw;
    gml_sgd_scalars sgd;
    gml_f32_adamw_ukernel *adamw_fn;
    gml_f32_sgd_ukernel *sgd_fn;
} step_task;

/* Elements in a gathered run of a strided parameter or gradient. */
#define GATHER 256

/* Elements [f0, f1) of parameter i: one micro-kernel call on a contiguous
 * parameter and gradient; else runs of GATHER elements gathered, updated
 * and the parameter scattered back (the same bits: the update is
 * elementwise). */
static void update_range(const step_task *s, int i, int64_t f0, int64_t f1) {
    const gml_optim *o = s->o;
    const gml_tensor *pt = o->params[i], *gt = s->grads[i];
    const bool adamw = o->p.kind == GML_OPTIM_ADAMW;
    float *m = o->m[i], *v = o->v[i];
    if (gml_is_contiguous(pt) && gml_is_contiguous(gt)) {
        float *pd = (float *)pt->data + f0;
        const float *gd = (const float *)gt->data + f0;
        if (adamw) s->adamw_fn((size_t)(f1 - f0), &s->adamw, pd, gd, m + f0, v + f0);
        else s->sgd_fn((size_t)(f1 - f0), &s->sgd, pd, gd, m ? m + f0 : NULL);
        return;
    }
    float pb[GATHER], gb[GATHER];
    for (int64_t c0 = f0; c0 < f1; c0 += GATHER) {
        const int64_t n = GML_MIN(GATHER, f1 - c0);
        for (int64_t k = 0; k < n; k++) {
            pb[k] = *elem(pt, c0 + k);
            gb[k] = *elem(gt, c0 + k);
        }
        if (adamw) s->adamw_fn((size_t)n, &s->adamw, pb, gb, m + c0, v + c0);
        else s->sgd_fn((size_t)n, &s->sgd, pb, gb, m ? m + c0 : NULL);
        for (int64_t k = 0; k < n; k++) *elem(pt, c0 + k) = pb[k];
    }
}

/* The norm pass takes this many whole units of a contiguous gradient at
 * once: each unit still sums its squares in its own order, in its own
 * accumulator; the units' chains of adds interleave (one add waits for
 * the one before only within a unit). */
#define NORM_WAYS 8

/* out[j] = the sum of x[j UNIT + f]^2 over f < UNIT in order, in double,
 * for j < NORM_WAYS. */
static void sumsq_units(const float *x, double *out) {
    double acc[NORM_WAYS] = {0};
    for (int64_t f = 0; f < UNIT; f++)
        for (int j = 0; j < NORM_WAYS; j++) acc[j] += (double)x[j * UNIT + f] * x[j * UNIT + f];
    for (int j = 0; j < NORM_WAYS; j++) out[j] = acc[j];
}

static void step_worker(void *arg, int ith, int nth) {
    const step_task *s = arg;
    const gml_optim *o = s->o;
    int64_t u0, u1;
    gml_split(o->unit0[o->n], ith, nth, &u0, &u1);
    int i = 0;
    for (int64_t u = u0; u < u1;) {
        while (u >= o->unit0[i + 1]) i++;
        const int64_t f0 = (u - o->unit0[i]) * UNIT, f1 = GML_MIN(o->numel[i], f0 + UNIT);
        if (!s->norm_pass) {
            update_range(s, i, f0, f1);
            u++;
            continue;
        }
        const gml_tensor *gt = s->grads[i];
        if (!gml_is_contiguous(gt)) {
            double acc = 0;
            for (int64_t f = f0; f < f1; f++) {
                const double g = *elem(gt, f);
                acc += g * g;
            }
            s->partial[u++] = acc;
            continue;
        }
        const float *gd = gt->data;
        if (u + NORM_WAYS <= u1 && f0 + NORM_WAYS * UNIT <= o->numel[i]) {
            sumsq_units(gd + f0, s->partial + u);
            u += NORM_WAYS;
            continue;
        }
        double acc = 0;
        for (int64_t f = f0; f < f1; f++) acc += (double)gd[f] * gd[f];
        s->partial[u++] = acc;
    }
}

gml_status gml_optim_step(gml_optim *o, gml_tensor *const *grads, int n_threads,
                          float *grad_norm) {
    GML_NONNULL(o, GML_ERR_INVALID);
    o->err[0] = '\0';
    if (!grads) {
        snprintf(o->err, sizeof o->err, "gml_optim_step: grads is NULL");
        return GML_ERR_INVALID;
    }
    for (int i = 0; i < o->n; i++) {
        const gml_tensor *g = grads[i], *p = o->params[i];
        char sg[GML_SHAPE_MAX], sp[GML_SHAPE_MAX];
        if (!g) {
            snprintf(o->err, sizeof o->err, "gml_optim_step: grads[%d] (of parameter '%s' %s) is "
                     "NULL", i, p->name, GML_SHAPE(p, sp));
            return GML_ERR_INVALID;
        }
        if (g->type != GML_F32 || !gml_same_shape(g, p) || !g->data) {
            snprintf(o->err, sizeof o->err, "gml_optim_step: gradient %d '%s' %s %s does not fit "
                     "parameter '%s' f32 %s (want f32 of its shape, computed)%s", i, g->name,
                     gml_type_name(g->type), GML_SHAPE(g, sg), p->name, GML_SHAPE(p, sp),
                     g->data ? "" : ": it has no data (a planned graph's output: pass "
                                    "gml_graph_tensor(g, t))");
            return GML_ERR_INVALID;
        }
    }
    const int nth = n_threads < 1 ? 1 : n_threads;
    const int64_t units = o->unit0[o->n];
    step_task s = {.o = o, .grads = grads, .norm_pass = true};

    /* the global norm: each unit's squares, then the units in order */
    s.partial = malloc((size_t)(units ? units : 1) * sizeof *s.partial);
    if (!s.partial) {
        snprintf(o->err, sizeof o->err, "gml_optim_step: out of memory (%" PRId64 " doubles)", units);
        return GML_ERR_NOMEM;
    }
    gml_parallel_run(NULL, (int)GML_MIN((int64_t)nth, GML_MAX(units, 1)), step_worker, &s);
    double sq = 0;
    for (int64_t u = 0; u < units; u++) sq += s.partial[u];
    free(s.partial);
    const float norm = (float)sqrt(sq);
    if (grad_norm) *grad_norm = norm;
    if (!isfinite(sq)) {
        for (int i = 0; i < o->n; i++)
            for (int64_t f = 0; f < o->numel[i]; f++) {
                const float g = gml_is_contiguous(grads[i]) ? ((const float *)grads[i]->data)[f]
                                                            : *elem(grads[i], f);
                if (isfinite(g)) continue;
                char sg[GML_SHAPE_MAX];
                snprintf(o->err, sizeof o->err, "gml_optim_step: gradient %d '%s' %s holds %g at "
                         "flat index %" PRId64 " (of parameter '%s'): the global norm is not "
                         "finite; nothing updated", i, grads[i]->name, GML_SHAPE(grads[i], sg),
                         (double)g, f, o->params[i]->name);
                return GML_ERR_NONFINITE;
            }
        snprintf(o->err, sizeof o->err, "gml_optim_step: the global norm is not finite; nothing "
                 "updated");
        return GML_ERR_NONFINITE;
    }
    /* clip_grad_norm_: coef = max_norm / (total_norm + 1e-6) (Python's
     * scalar / tensor: the f32 reciprocal times max_norm), at most 1 */
    float coef = 1.0f;
    if (o->clip > 0) {
        const float c = 1.0f / (norm + 1e-6f) * (float)o->clip;
        coef = c < 1.0f ? c : 1.0f;
    }

    o->steps++;
    const double t = (double)o->steps;
    const gml_isa isa = gml_get_isa();
    if (o->p.kind == GML_OPTIM_ADAMW) {
        const double bc1 = 1 - pow(o->beta1, t), bc2 = 1 - pow(o->beta2, t);
        s.adamw = (gml_adamw_scalars){
            .coef = coef,
            .decay = (float)(1 - o->lr * o->weight_decay),
            .b1 = (float)o->beta1,
            .omb1 = (float)(1 - o->beta1),
            .b2 = (float)o->beta2,
            .omb2 = (float)(1 - o->beta2),
            .neg_step = (float)-(o->lr / bc1),
            .bc2_sqrt = (float)sqrt(bc2),
            .eps = (float)o->eps,
        };
        s.adamw_fn = GML_PICK_UKERNEL(isa, GML_F32_ADAMW_UKERNELS, gml_f32_adamw_ukernel);
    } else {
        s.sgd = (gml_sgd_scalars){
            .coef = coef,
            .wd = (float)o->weight_decay,
            .mom = (float)o->momentum,
            .omdamp = (float)(1 - o->dampening),
            .neg_lr = (float)-o->lr,
            .first = o->steps == 1,
            .nesterov = o->p.nesterov,
        };
        s.sgd_fn = GML_PICK_UKERNEL(isa, GML_F32_SGD_UKERNELS, gml_f32_sgd_ukernel);
    }
    s.norm_pass = false;
    gml_parallel_run(NULL, (int)GML_MIN((int64_t)nth, GML_MAX(units, 1)), step_worker, &s);
    return GML_OK;
}
