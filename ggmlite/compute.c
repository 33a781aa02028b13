/* Compute: runs a graph's nodes in order on n threads. Every thread walks the
 * same list of the nodes that compute (views cost nothing, not even a
 * barrier); for each, every thread runs the kernel on its own share, then all
 * meet at a barrier. A kernel failure stops every thread after the node. The
 * node callback and the NaN trap run on thread 0 between two barriers.
 *
 * Kernels run on the graph's own copies of the tensor headers (g->bound),
 * rebound at each compute: the headers, which other graphs may share, are
 * only read. A graph computes (or plans) once at a time: its lock. */
#include "graph.h"
#include "threadpool.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* What the threads of one compute share; on the caller's stack. */
struct gml_compute_shared {
    struct gml_sync_barrier barrier;
    _Alignas(GML_ALIGN) atomic_llong chunk; /* gml_chunk_next; 0 after each barrier */
    _Alignas(GML_ALIGN) atomic_int failed;  /* a kernel called gml_kernel_fail */
    atomic_int stopped;                     /* thread 0 stopped the run: status says why */
    /* failed or stopped as of the last barrier: the same for every thread
     * until the next one (failed itself may change in the node running). */
    atomic_int halt;
    gml_status status;

    struct gml_step *steps;
    int n_steps;
    void *wdata;
    size_t wsize;
    char *err; /* kernel failure message */
    size_t err_size;
    gml_graph *g; /* for the callback and the NaN trap; NULL in gml_run_kernels */
    bool checks;  /* the callback or the trap is on: thread 0 looks after each node */
};

/* Run by the last thread to reach a barrier, all others waiting. */
static void at_barrier(void *arg) {
    struct gml_compute_shared *sh = arg;
    atomic_store_explicit(&sh->chunk, 0, memory_order_relaxed);
    if (atomic_load_explicit(&sh->failed, memory_order_relaxed) ||
        atomic_load_explicit(&sh->stopped, memory_order_relaxed))
        atomic_store_explicit(&sh->halt, 1, memory_order_relaxed);
}

void gml_barrier(const gml_compute_params *p) {
    gml_sync_barrier_wait(&p->shared->barrier, p->nth, at_barrier, p->shared);
}

int64_t gml_chunk_next(const gml_compute_params *p) {
    return atomic_fetch_add_explicit(&p->shared->chunk, 1, memory_order_relaxed);
}

void gml_kernel_fail(const gml_compute_params *p, const char *fmt, ...) {
    int expected = 0;
    if (!atomic_compare_exchange_strong(&p->shared->failed, &expected, 1)) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->shared->err, p->shared->err_size, fmt, ap);
    va_end(ap);
}

void gml_graph_set_callback(gml_graph *g, gml_node_callback cb, void *user) {
    g->callback = cb;
    g->callback_user = user;
}

void gml_graph_set_nan_trap(gml_graph *g, bool on) { g->nan_trap = on; }

/* ---- one compute of a graph at a time ------------------------------------- */

/* The graphs this thread is computing, innermost first: a node callback that
 * starts a compute runs inside its caller's. On the computing thread's stack. */
struct computing {
    const gml_graph *g;
    const struct computing *up;
};
static _Thread_local const struct computing *computing;

/* A compute or plan refused because the graph was busy: its message belongs
 * to the refused thread (g->err belongs to the running compute), so it is
 * kept here and gml_graph_error shows it to this thread only, until this
 * thread next computes or plans that graph. Graphs are told apart by id, not
 * by address: a freed graph's address comes back. */
static _Thread_local struct {
    uint64_t id;
    char msg[GML_ERR_MAX];
} refused;

gml_status gml_graph_lock(gml_graph *g, const char *what) {
    if (!computing) {
        pthread_mutex_lock(&g->mu); /* takes turns; this thread holds no graph */
    } else if (pthread_mutex_trylock(&g->mu) != 0) {
        /* Inside a compute (a node callback): waiting could deadlock, on this
         * very graph or on the pool this thread holds. */
        bool mine = false;
        for (const struct computing *c = computing; c && !mine; c = c->up) mine = c->g == g;
        snprintf(refused.msg, sizeof refused.msg, "%s: %s", what,
                 mine ? "the graph is being computed by this thread already (a node callback "
                        "cannot compute or plan its own graph)"
                      : "graph is being computed by another thread (a node callback cannot "
                        "wait for it)");
        refused.id = g->id;
        return GML_ERR_INVALID;
    }
    if (refused.id == g->id) refused.id = 0;
    return GML_OK;
}

void gml_graph_unlock(gml_graph *g) { pthread_mutex_unlock(&g->mu); }

const char *gml_graph_error(const gml_graph *g) {
    return refused.id == g->id ? refused.msg : g->err;
}

/* ---- binding ------------------------------------------------------------- */

void gml_graph_bind(gml_graph *g) {
    for (int e = 0; e < g->n_entries; e++) {
        gml_tensor c;
        memcpy(&c, g->entries[e].t, sizeof c);
        for (int s = 0; s < GML_MAX_SRC; s++)
            if (c.src[s]) c.src[s] = &g->bound[gml_graph_entry(g, c.src[s])]; /* always in g */
        if (c.view_src) {
            const int r = gml_graph_entry(g, c.view_src);
            if (r >= 0) c.view_src = &g->bound[r];
        }
        c.data = gml_entry_data(g, e);
        /* No write when nothing changed: readers of a result (gml_graph_tensor)
         * never see a store they did not expect. */
        if (memcmp(&g->bound[e], &c, sizeof c) != 0) memcpy(&g->bound[e], &c, sizeof c);
    }
}

const gml_tensor *gml_graph_tensor(const gml_graph *g, const gml_tensor *t) {
    if (!g || !t) return NULL;
    const int e = gml_graph_entry(g, t);
    return e < 0 ? NULL : &g->bound[e];
}

void gml_graph_release_compute(gml_graph *g) {
    free(g->work);
    g->work = NULL;
    g->work_size = 0;
    free(g->steps);
    g->steps = NULL;
    free(g->neg_inf_ok);
    g->neg_inf_ok = NULL;
    g->n_steps = 0;
}

gml_status gml_graph_fail(gml_graph *g, gml_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->err, sizeof g->err, fmt, ap);
    va_end(ap);
    return st;
}

/* Every tensor must have data before anything runs: binds the graph's
 * copies afresh (the user may have placed an input, or re-pointed one, since
 * the last compute), then checks them. */
static gml_status check_data(gml_graph *g) {
    gml_graph_bind(g);
    for (int i = 0; i < g->n_entries; i++) {
        const gml_tensor *t = &g->bound[i];
        if (t->data) continue;
        char shape[GML_SHAPE_MAX];
        return gml_graph_fail(g, GML_ERR_INVALID,
                              "compute: '%s' %s (%s) has no data: it was made in a no_alloc "
                              "context; place the graph's data (gml_graph_plan) before computing",
                              t->name, GML_SHAPE(t, shape), gml_op_name(t->op));
    }
    return GML_OK;
}

/* Grows the shared scratch buffer to what the largest node needs with nth
 * threads, or with one: a compute falls back to one thread when it cannot
 * have nth (threadpool.h). */
static gml_status prepare_work(gml_graph *g, int nth) {
    size_t need = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const gml_op_def *def = gml_op_get(g->nodes[i]->op);
        if (def->work_size)
            need = GML_MAX(need, GML_MAX(def->work_size(g->nodes[i], nth),
                                         def->work_size(g->nodes[i], 1)));
    }
    if (need <= g->work_size) return GML_OK;
    free(g->work);
    g->work = aligned_alloc(GML_ALIGN, gml_align_up(need, GML_ALIGN));
    g->work_size = g->work ? need : 0;
    if (!g->work)
        return gml_graph_fail(g, GML_ERR_NOMEM, "compute: cannot allocate %zu bytes of scratch", need);
    return GML_OK;
}

/* For the NaN trap, per node: whether -inf in it can be by design. The node
 * is a mask, or moves or adds values of a tensor that may hold it (a leaf:
 * user data, or such a node): cont(permute(mask)), scores + mask. NaN and
 * +inf never are. Filled once per graph, in node order (sources first), so
 * that each node looks at its sources' answers only: linear in the graph,
 * where asking each source again would walk every path (2^n of them through
 * n diamonds x = x + x). */
static void find_neg_inf_ok(const gml_graph *g) {
    bool *ok = g->neg_inf_ok;
    for (int i = 0; i < g->n_nodes; i++) {
        const gml_tensor *t = g->nodes[i];
        const unsigned flags = gml_op_get(t->op)->flags;
        ok[i] = flags & GML_OPF_INF_OK;
        if (ok[i] || !(flags & (GML_OPF_NOOP | GML_OPF_MOVES_VALUES))) continue;
        for (int s = 0; s < GML_MAX_SRC && !ok[i]; s++) {
            const gml_tensor *src = t->src[s];
            if (!src) continue;
            if (src->op == GML_OP_NONE) {
                ok[i] = true;
                continue;
            }
            const int e = gml_graph_entry(g, src);
            assert(e >= 0 && g->entries[e].pos >= 0 && g->entries[e].pos < i);
            ok[i] = ok[g->entries[e].pos];
        }
    }
}

/* The nodes that compute, with the kernel the ISA in effect picks. The list
 * is allocated (and neg_inf_ok found) by the first compute and refilled by
 * each (no allocation): a graph's nodes never change. */
static gml_status prepare_steps(gml_graph *g) {
    if (!g->steps && g->n_nodes > 0) {
        g->steps = malloc((size_t)g->n_nodes * sizeof *g->steps);
        g->neg_inf_ok = malloc((size_t)g->n_nodes * sizeof *g->neg_inf_ok);
        if (!g->steps || !g->neg_inf_ok) {
            gml_graph_release_compute(g);
            return gml_graph_fail(g, GML_ERR_NOMEM, "compute: out of memory");
        }
        find_neg_inf_ok(g);
    }
    const bool reference = gml_get_isa() == GML_ISA_REFERENCE;
    g->n_steps = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const gml_op_def *def = gml_op_get(g->nodes[i]->op);
        if (def->flags & GML_OPF_NOOP) continue;
        g->steps[g->n_steps++] = (struct gml_step){
            .fn = reference ? def->reference : def->forward,
            .t = &g->bound[gml_graph_entry(g, g->nodes[i])], .node = i};
    }
    return GML_OK;
}

const char *gml_graph_node_kernel(const gml_graph *g, int i) {
    if (i < 0) i += g->n_nodes;
    if (i < 0 || i >= g->n_nodes) return NULL;
    int lo = 0, hi = g->n_steps; /* steps are in node order */
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (g->steps[mid].node < i) lo = mid + 1;
        else hi = mid;
    }
    if (lo == g->n_steps || g->steps[lo].node != i) return NULL; /* a view, or not computed yet */
    const struct gml_step *st = &g->steps[lo];
    if (st->kernel) return st->kernel;
    const gml_op_def *def = gml_op_get(st->t->op);
    /* no note: the reference kernel (GML_ISA_REFERENCE), or the op's one kernel */
    return st->fn == def->reference && def->forward != def->reference ? "reference" : gml_op_name(st->t->op);
}

/* The NaN/Inf trap: the first non-finite element of t, as an index. */
static bool find_nonfinite(const gml_tensor *t, int64_t idx[GML_MAX_DIMS], float *val) {
    if (t->type != GML_F32) return false;
    for (int64_t i0 = 0; i0 < t->ne[0]; i0++)
        for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
            for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
                for (int64_t i3 = 0; i3 < t->ne[3]; i3++) {
                    float v = *(const float *)gml_ptr(t, i0, i1, i2, i3);
                    if (!isfinite(v)) {
                        idx[0] = i0, idx[1] = i1, idx[2] = i2, idx[3] = i3;
                        *val = v;
                        return true;
                    }
                }
    return false;
}

static gml_status trap_report(gml_graph *g, int i, const gml_tensor *t, const int64_t *idx,
                              float v) {
    char shape[GML_SHAPE_MAX], where[GML_SHAPE_MAX], srcs[256] = "";
    size_t k = 0;
    for (int d = GML_MAX_DIMS - t->n_dims; d < GML_MAX_DIMS; d++)
        k += (size_t)snprintf(where + k, sizeof where - k, "%s%" PRId64,
                              d > GML_MAX_DIMS - t->n_dims ? "," : "", idx[d]);
    k = 0;
    for (int s = 0; s < GML_MAX_SRC && k < sizeof srcs; s++) {
        if (!t->src[s]) continue;
        char ss[GML_SHAPE_MAX];
        k += (size_t)snprintf(srcs + k, sizeof srcs - k, "%s%s %s", k ? ", " : "",
                              t->src[s]->name, GML_SHAPE(t->src[s], ss));
    }
    return gml_graph_fail(g, GML_ERR_NONFINITE,
                          "nan trap: node %d '%s' (%s) %s holds %s at [%s]; sources: %s", i, t->name,
                          gml_op_name(t->op), GML_SHAPE(t, shape),
                          isnan(v) ? "nan" : v > 0 ? "inf" : "-inf", where, srcs);
}

/* The NaN/Inf trap's verdict on node t: the first element it must not hold.
 * neg_inf_ok: -inf may be in t by design. */
static bool trapped(const gml_tensor *t, bool neg_inf_ok, int64_t idx[GML_MAX_DIMS], float *v) {
    if (!find_nonfinite(t, idx, v)) return false;
    if (!(*v == -INFINITY && neg_inf_ok)) return true;
    /* -inf is allowed here: look for a NaN or +inf */
    for (int64_t i0 = 0; i0 < t->ne[0]; i0++)
        for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
            for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
                for (int64_t i3 = 0; i3 < t->ne[3]; i3++) {
                    float x = *(const float *)gml_ptr(t, i0, i1, i2, i3);
                    if (isnan(x) || x == INFINITY) {
                        idx[0] = i0, idx[1] = i1, idx[2] = i2, idx[3] = i3;
                        *v = x;
                        return true;
                    }
                }
    return false;
}

/* The checks after nodes [first, end) are done (on thread 0, the others
 * waiting): the NaN trap on each that computes, then the callback on each.
 * Both see the graph's bound copy of the node (its data the graph's). */
static gml_status check_nodes(gml_graph *g, int first, int end) {
    for (int i = first; i < end; i++) {
        const gml_tensor *node = &g->bound[gml_graph_entry(g, g->nodes[i])];
        if (g->nan_trap && !(gml_op_get(node->op)->flags & (GML_OPF_INF_OK | GML_OPF_NOOP))) {
            int64_t idx[GML_MAX_DIMS];
            float v;
            if (trapped(node, g->neg_inf_ok[i], idx, &v)) return trap_report(g, i, node, idx, v);
        }
        if (g->callback && !g->callback(node, i, g->callback_user))
            return gml_graph_fail(g, GML_ERR_ABORTED,
                                  "compute: stopped by the node callback after node %d '%s'", i,
                                  node->name);
    }
    return GML_OK;
}

/* Checks after step s: its node and the views that follow it, up to the next
 * step. */
static gml_status check_step(struct gml_compute_shared *sh, int s) {
    int end = s + 1 < sh->n_steps ? sh->steps[s + 1].node : sh->g->n_nodes;
    return check_nodes(sh->g, sh->steps[s].node, end);
}

/* What each thread runs: every step in order, a barrier after each but the
 * last (the caller then joins the threads anyway). */
static void run_steps(void *arg, int ith, int nth) {
    struct gml_compute_shared *sh = arg;
    gml_compute_params p = {
        .ith = ith, .nth = nth, .wdata = sh->wdata, .wsize = sh->wsize, .shared = sh};
    for (int s = 0; s < sh->n_steps; s++) {
        p.note = &sh->steps[s].kernel;
        sh->steps[s].fn(&p, sh->steps[s].t);
        if (s + 1 == sh->n_steps) break;
        gml_barrier(&p);
        if (sh->checks) {
            if (ith == 0 && !atomic_load_explicit(&sh->halt, memory_order_relaxed)) {
                sh->status = check_step(sh, s);
                if (sh->status != GML_OK) atomic_store_explicit(&sh->stopped, 1, memory_order_relaxed);
            }
            gml_barrier(&p);
        }
        if (atomic_load_explicit(&sh->halt, memory_order_relaxed)) break; /* all stop together */
    }
}

/* Runs sh's steps on n threads of pool (NULL: the default pool). */
static gml_status run(struct gml_compute_shared *sh, gml_threadpool *pool, int n) {
    gml_parallel_run(pool, n, run_steps, sh);
    if (atomic_load(&sh->failed)) return GML_ERR_INVALID;
    if (atomic_load(&sh->stopped)) return sh->status;
    return GML_OK;
}

/* Computes g, its lock held. */
static gml_status compute_locked(gml_graph *g, gml_threadpool *pool, int n_threads) {
    g->err[0] = '\0';
    if (n_threads < 1 || n_threads > GML_MAX_THREADS)
        return gml_graph_fail(g, GML_ERR_INVALID, "compute: n_threads is %d, must be in [1, %d]",
                              n_threads, GML_MAX_THREADS);
    gml_status st = check_data(g);
    if (st == GML_OK) st = prepare_work(g, n_threads);
    if (st == GML_OK) st = prepare_steps(g);
    if (st != GML_OK) return st;

    struct gml_compute_shared sh = {
        .steps = g->steps, .n_steps = g->n_steps, .wdata = g->work, .wsize = g->work_size,
        .err = g->err, .err_size = sizeof g->err, .g = g, .checks = g->callback || g->nan_trap};
    /* Views before the first node that computes: only their callbacks. */
    if (sh.checks) {
        st = check_nodes(g, 0, g->n_steps ? g->steps[0].node : g->n_nodes);
        if (st != GML_OK) return st;
    }
    if (g->n_steps == 0) return GML_OK;
    st = run(&sh, pool, n_threads);
    if (st == GML_OK && sh.checks) st = check_step(&sh, g->n_steps - 1);
    return st;
}

/* pool NULL: the default pool, unless pooled (gml_graph_compute_pool). */
static gml_status compute(gml_graph *g, gml_threadpool *pool, bool pooled, int n_threads) {
    gml_status st = gml_graph_lock(g, "compute");
    if (st != GML_OK) return st;
    const struct computing frame = {g, computing};
    computing = &frame;
    if (pooled && !pool) st = gml_graph_fail(g, GML_ERR_INVALID, "compute: the thread pool is NULL");
    else st = compute_locked(g, pool, n_threads);
    computing = frame.up;
    gml_graph_unlock(g);
    return st;
}

gml_status gml_graph_compute(gml_graph *g, int n_threads) {
    return compute(g, NULL, false, n_threads);
}

gml_status gml_graph_compute_pool(gml_graph *g, gml_threadpool *pool) {
    return compute(g, pool, true, gml_threadpool_n_threads(pool));
}

gml_status gml_run_kernels(const gml_kernel_fn *fns, gml_tensor *const *dsts, int n,
                           int n_threads, void *wdata, size_t wsize, char *err, size_t err_size) {
    struct gml_step *steps = calloc((size_t)GML_MAX(n, 1), sizeof *steps);
    if (!steps) return GML_ERR_NOMEM;
    for (int k = 0; k < n; k++) steps[k] = (struct gml_step){.fn = fns[k], .t = dsts[k], .node = k};
    if (err_size) err[0] = '\0';
    struct gml_compute_shared sh = {.steps = steps, .n_steps = n, .wdata = wdata, .wsize = wsize,
                                    .err = err, .err_size = err_size};
    gml_status st = n > 0 ? run(&sh, NULL, n_threads) : GML_OK;
    free(steps);
    return st;
}
