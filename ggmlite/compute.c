/* Compute: runs a graph's nodes in order on n threads. Every thread walks the
 * same list of the nodes that compute (views cost nothing, not even a
 * barrier); for each, every thread runs the kernel on its own share. The
 * threads meet at a barrier only before a node that touches memory an
 * earlier node since the last barrier writes (or writes what one reads):
 * q, k and v of an attention block run back to back, a thread that is done
 * with one going on to the next. A tiny node (by its shape alone) runs on
 * thread 0 alone, the others going on; a run of tiny nodes needs no barrier
 * within. Where the barriers go, which nodes run alone and where each node's
 * scratch lies is planned once (plan_steps) and kept until the graph's
 * bindings, the thread count or the ISA change. A kernel failure stops every
 * thread at the next barrier. The node callback and the NaN trap run on
 * thread 0 between two barriers, with a barrier before every node.
 *
 * Kernels run on the graph's own copies of the tensor headers (g->bound),
 * rebound at each compute: the headers, which other graphs may share, are
 * only read. A graph computes (or plans) once at a time: its lock
 * (gml_graph_lock, graph.c). */
#include "graph.h"
#include "threadpool.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* What the threads of one compute share; on the caller's stack. */
struct gml_compute_shared {
    struct gml_sync_barrier barrier;
    _Alignas(GML_ALIGN) atomic_int failed; /* a kernel called gml_kernel_fail */
    atomic_int stopped;                    /* thread 0 stopped the run: status says why */
    /* failed or stopped as of the last barrier between steps: the same for
     * every thread until the next one (failed itself may change meanwhile). */
    atomic_int halt;
    atomic_flag fail_lock; /* held while a failure's message is written */
    int fail_step;         /* the step whose message err holds (failed set) */
    gml_status status;

    struct gml_step *steps;
    struct gml_chunk *chunks; /* [n_steps], all 0 when the compute starts */
    int n_steps;
    void *wdata; /* every step's scratch, at its work_off */
    char *err;   /* kernel failure message */
    size_t err_size;
    gml_graph *g; /* for the callback and the NaN trap; NULL in gml_run_kernels */
    bool checks;  /* the callback or the trap is on: thread 0 looks after each node */
    gml_isa isa;  /* the ISA the steps were planned for: kernels pick their variants by it */
};

/* Run by the last thread to reach a barrier between steps, all others
 * waiting: whether they all stop. */
static void at_step_barrier(void *arg) {
    struct gml_compute_shared *sh = arg;
    if (atomic_load_explicit(&sh->failed, memory_order_relaxed) ||
        atomic_load_explicit(&sh->stopped, memory_order_relaxed))
        atomic_store_explicit(&sh->halt, 1, memory_order_relaxed);
}

/* Run by the last thread to reach a barrier inside a node (every thread of
 * the compute is in that node: they call the same barriers in the same
 * order): the node's chunks count again from 0. */
static void restart_chunks(void *arg) {
    atomic_store_explicit((atomic_llong *)arg, 0, memory_order_relaxed);
}

void gml_barrier(const gml_compute_params *p) {
    gml_sync_barrier_wait(&p->shared->barrier, p->nth, restart_chunks, p->chunk);
}

int64_t gml_chunk_next(const gml_compute_params *p) {
    return atomic_fetch_add_explicit(p->chunk, 1, memory_order_relaxed);
}

void gml_kernel_fail(const gml_compute_params *p, const char *fmt, ...) {
    struct gml_compute_shared *sh = p->shared;
    while (atomic_flag_test_and_set_explicit(&sh->fail_lock, memory_order_acquire)) {
    }
    /* Nodes without a barrier between them run at once: the earliest one's
     * message wins, whichever fails first, so the message never varies. */
    if (!atomic_load_explicit(&sh->failed, memory_order_relaxed) || p->step < sh->fail_step) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(sh->err, sh->err_size, fmt, ap);
        va_end(ap);
        sh->fail_step = p->step;
        atomic_store_explicit(&sh->failed, 1, memory_order_relaxed);
    }
    atomic_flag_clear_explicit(&sh->fail_lock, memory_order_release);
}

void gml_graph_set_callback(gml_graph *g, gml_node_callback cb, void *user) {
    GML_NONNULL(g, );
    g->callback = cb;
    g->callback_user = user;
}

void gml_graph_set_nan_trap(gml_graph *g, bool on) {
    GML_NONNULL(g, );
    g->nan_trap = on;
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

/* ---- planning the steps ----------------------------------------------------- */

/* A node is tiny below this many flops plus elements written: split among
 * threads it would cost less than the barriers and wake-ups around it
 * (a few microseconds), so thread 0 runs it alone. C1's scores, softmax,
 * context and merge ([2,8,10,10] and [2,10,512]) are tiny; its projections
 * (10 MFLOP) are not. */
#define TINY_COST 262144.0
/* The longest run of steps planned without a barrier, and the scratch such a
 * run may take beyond its largest step's (each step of a run has its own). */
enum { MAX_RUN = 32 };
#define RUN_SCRATCH ((size_t)1 << 20)

/* The bytes a tensor's elements span, [lo, hi); lo == hi when it has none. */
struct span {
    uintptr_t lo, hi;
};

static struct span span_of(const gml_tensor *t) {
    for (int i = 0; i < GML_MAX_DIMS; i++)
        if (t->ne[i] <= 0) return (struct span){0, 0};
    const uintptr_t lo = (uintptr_t)t->data;
    return (struct span){lo, lo + gml_nbytes(t)};
}

static bool overlap(struct span a, struct span b) { return a.lo < b.hi && b.lo < a.hi; }

/* What one step touches: what it writes, then its sources. */
struct gml_touch {
    struct span w, r[GML_MAX_SRC];
};

/* Whether steps with touches a and b must not run at once: one writes what
 * the other reads or writes. */
static bool conflict(const struct gml_touch *a, const struct gml_touch *b) {
    if (overlap(a->w, b->w)) return true;
    for (int i = 0; i < GML_MAX_SRC; i++)
        if (overlap(a->w, b->r[i]) || overlap(b->w, a->r[i])) return true;
    return false;
}

/* Plans the steps for n_threads (on the bound copies, data checked): the
 * kernels the ISA in effect picks, the barriers, the tiny nodes and each
 * step's scratch, which it then makes sure g->work holds. The step list is
 * allocated (and neg_inf_ok found) by the first compute; a plan is kept
 * until the bindings (gml_graph_bind), the thread count, the ISA or the
 * checks change: a graph's nodes never do. Every choice depends on shapes,
 * strides and addresses only, never on values or timing. */
static gml_status plan_steps(gml_graph *g, int nth, bool checks) {
    const gml_isa isa = gml_get_isa();
    if (g->prepared && g->prep_binds == g->binds && g->prep_nth == nth && g->prep_isa == isa &&
        g->prep_checks == checks)
        return GML_OK;
    if (!g->steps && g->n_nodes > 0) {
        g->steps = malloc((size_t)g->n_nodes * sizeof *g->steps);
        g->chunks = aligned_alloc(GML_ALIGN, (size_t)g->n_nodes * sizeof *g->chunks);
        g->touch = malloc((size_t)g->n_nodes * sizeof *g->touch);
        g->neg_inf_ok = malloc((size_t)g->n_nodes * sizeof *g->neg_inf_ok);
        g->kept = calloc((size_t)g->n_nodes, sizeof *g->kept);
        if (!g->steps || !g->chunks || !g->touch || !g->neg_inf_ok || !g->kept) {
            gml_graph_release_compute(g);
            return gml_graph_fail(g, GML_ERR_NOMEM, "compute: out of memory");
        }
        find_neg_inf_ok(g);
    }
    struct gml_touch *touch = g->touch;

    /* The constants: leafs flagged neither input nor param that no node
     * writes (a node that computes writes its root: cpy into a view). */
    bool *written = calloc((size_t)GML_MAX(g->n_entries, 1), sizeof *written);
    if (!written) return gml_graph_fail(g, GML_ERR_NOMEM, "compute: out of memory");
    for (int i = 0; i < g->n_nodes; i++) {
        const gml_tensor *t = g->nodes[i];
        const int r = gml_graph_entry(g, t->view_src ? t->view_src : t);
        if (!(gml_op_get(t->op)->flags & GML_OPF_NOOP) && r >= 0) written[r] = true;
    }

    /* The steps, each with its scratch: for nth threads or, run alone, for
     * one (a compute falls back to one thread when it cannot have nth,
     * threadpool.h); and the memory each keeps across computes. */
    const bool reference = isa == GML_ISA_REFERENCE;
    size_t max_work = 0;
    g->n_steps = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const gml_op_def *def = gml_op_get(g->nodes[i]->op);
        if (def->flags & GML_OPF_NOOP) continue;
        gml_tensor *t = &g->bound[gml_graph_entry(g, g->nodes[i])];
        size_t work = 0;
        if (def->work_size)
            work = gml_align_up(GML_MAX(def->work_size(t, nth), def->work_size(t, 1)), GML_ALIGN);
        unsigned const_srcs = 0;
        for (int k = 0; k < GML_MAX_SRC; k++) {
            const gml_tensor *u = g->nodes[i]->src[k];
            const int r = u ? gml_graph_entry(g, u->view_src ? u->view_src : u) : -1;
            if (r >= 0 && !written[r] && g->entries[r].t->op == GML_OP_NONE &&
                !(g->entries[r].t->flags & (GML_FLAG_INPUT | GML_FLAG_PARAM)))
                const_srcs |= 1u << k;
        }
        gml_kept *kept = &g->kept[i];
        const size_t keep = def->kept_size && const_srcs && !reference ? def->kept_size(t, const_srcs, isa) : 0;
        if (keep != kept->size) { /* made afresh, to be filled by the kernel */
            free(kept->data);
            *kept = (gml_kept){0};
            if (keep && !(kept->data = aligned_alloc(GML_ALIGN, gml_align_up(keep, GML_ALIGN)))) {
                free(written);
                return gml_graph_fail(g, GML_ERR_NOMEM, "compute: cannot allocate %zu bytes for "
                                      "the packed weight of node %d '%s'", keep, i, t->name);
            }
            kept->size = keep;
        }
        const double cost = (def->flops ? def->flops(t) : 0.0) + (double)gml_nelements(t);
        const int s = g->n_steps++;
        g->steps[s] = (struct gml_step){.fn = reference ? def->reference : def->forward,
                                        .t = t, .node = i, .work = work,
                                        .solo = cost < TINY_COST, .const_srcs = const_srcs,
                                        .kept = keep ? kept : NULL};
        touch[s].w = span_of(t);
        for (int k = 0; k < GML_MAX_SRC; k++)
            touch[s].r[k] = t->src[k] ? span_of(t->src[k]) : (struct span){0, 0};
        max_work = GML_MAX(max_work, work);
    }
    free(written);

    /* Runs of steps between barriers: a step joins the run unless it
     * conflicts with a step of it that another thread may still be running
     * (two tiny steps both run on thread 0, in order), the run is long, or
     * its scratch would grow past the cap. Within a run each step's scratch
     * follows the previous one's. */
    const size_t cap = GML_MAX(max_work, RUN_SCRATCH);
    size_t need = 0, run_end = 0;
    int run_start = 0;
    for (int s = 0; s < g->n_steps; s++) {
        struct gml_step *st = &g->steps[s];
        bool sync = s > 0 && (checks || s - run_start >= MAX_RUN || run_end + st->work > cap);
        for (int r = run_start; r < s && !sync; r++)
            sync = !(st->solo && g->steps[r].solo) && conflict(&touch[r], &touch[s]);
        if (sync) {
            run_start = s;
            run_end = 0;
        }
        st->sync = sync;
        st->work_off = run_end;
        run_end += st->work;
        need = GML_MAX(need, run_end);
    }
    if (need > g->work_size) {
        free(g->work);
        g->work = aligned_alloc(GML_ALIGN, gml_align_up(need, GML_ALIGN));
        g->work_size = g->work ? need : 0;
        if (!g->work)
            return gml_graph_fail(g, GML_ERR_NOMEM, "compute: cannot allocate %zu bytes of scratch",
                                  need);
    }
    g->prepared = true;
    g->prep_binds = g->binds;
    g->prep_nth = nth;
    g->prep_isa = isa;
    g->prep_checks = checks;
    return GML_OK;
}

/* The step of node i (negative from the end), or NULL: a view, or not
 * computed yet. */
static const struct gml_step *node_step(const gml_graph *g, int i) {
    if (i < 0) i += g->n_nodes;
    if (i < 0 || i >= g->n_nodes) return NULL;
    int lo = 0, hi = g->n_steps; /* steps are in node order */
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (g->steps[mid].node < i) lo = mid + 1;
        else hi = mid;
    }
    return lo == g->n_steps || g->steps[lo].node != i ? NULL : &g->steps[lo];
}

const char *gml_graph_node_kernel(const gml_graph *g, int i) {
    GML_NONNULL(g, NULL);
    const struct gml_step *st = node_step(g, i);
    if (!st) return NULL;
    if (st->kernel) return st->kernel;
    const gml_op_def *def = gml_op_get(st->t->op);
    /* no note: the reference kernel (GML_ISA_REFERENCE), or the op's one kernel */
    return st->fn == def->reference && def->forward != def->reference ? "reference" : gml_op_name(st->t->op);
}

int gml_graph_node_schedule(const gml_graph *g, int i) {
    const struct gml_step *st = node_step(g, i);
    if (!st) return -1;
    return (st->sync ? GML_SCHED_BARRIER : 0) | (st->solo ? GML_SCHED_ALONE : 0);
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

/* What each thread runs: every step in order, meeting the others at the
 * barriers the plan put between steps (the caller joins the threads after
 * the last). A barrier is where a failure or a check stops them all. */
static void run_steps(void *arg, int ith, int nth) {
    struct gml_compute_shared *sh = arg;
    for (int s = 0; s < sh->n_steps; s++) {
        const struct gml_step *st = &sh->steps[s];
        if (s > 0 && st->sync) {
            gml_sync_barrier_wait(&sh->barrier, nth, at_step_barrier, sh);
            if (sh->checks) {
                if (ith == 0 && !atomic_load_explicit(&sh->halt, memory_order_relaxed)) {
                    sh->status = check_step(sh, s - 1);
                    if (sh->status != GML_OK) atomic_store_explicit(&sh->stopped, 1, memory_order_relaxed);
                }
                gml_sync_barrier_wait(&sh->barrier, nth, at_step_barrier, sh);
            }
            if (atomic_load_explicit(&sh->halt, memory_order_relaxed)) break; /* all stop together */
        }
        const bool alone = st->solo && nth > 1;
        if (alone && ith != 0) continue; /* thread 0's: go on to the next step */
        gml_compute_params p = {.ith = alone ? 0 : ith, .nth = alone ? 1 : nth,
                                .wdata = sh->wdata ? (char *)sh->wdata + st->work_off : NULL,
                                .wsize = st->work,
                                .shared = sh, .note = &sh->steps[s].kernel,
                                .chunk = &sh->chunks[s].next, .step = s, .isa = sh->isa,
                                .const_srcs = st->const_srcs, .kept = st->kept};
        st->fn(&p, st->t);
    }
}

/* Runs sh's steps on n threads of pool (NULL: the default pool). */
static gml_status run(struct gml_compute_shared *sh, gml_threadpool *pool, int n) {
    for (int s = 0; s < sh->n_steps; s++) atomic_init(&sh->chunks[s].next, 0);
    atomic_flag_clear(&sh->fail_lock);
    gml_parallel_run(pool, n, run_steps, sh);
    if (atomic_load(&sh->failed)) return GML_ERR_INVALID;
    if (atomic_load(&sh->stopped)) return sh->status;
    return GML_OK;
}

/* Computes g, its lock held. */
static gml_status compute_locked(gml_graph *g, gml_threadpool *pool, int n_threads) {
    g->err[0] = '\0';
    char why[GML_ERR_MAX - 64];
    if (!gml_graph_alive(g, why, sizeof why)) return gml_graph_fail(g, GML_ERR_INVALID, "compute: %s", why);
    if (n_threads < 1 || n_threads > GML_MAX_THREADS)
        return gml_graph_fail(g, GML_ERR_INVALID, "compute: n_threads is %d, must be in [1, %d]",
                              n_threads, GML_MAX_THREADS);
    const bool checks = g->callback || g->nan_trap;
    gml_status st = check_data(g);
    if (st == GML_OK) st = plan_steps(g, n_threads, checks);
    if (st != GML_OK) return st;

    struct gml_compute_shared sh = {
        .steps = g->steps, .chunks = g->chunks, .n_steps = g->n_steps, .wdata = g->work,
        .isa = g->prep_isa,
        .err = g->err, .err_size = sizeof g->err, .g = g, .checks = checks};
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
    if (pooled && !pool) st = gml_graph_fail(g, GML_ERR_INVALID, "compute: the thread pool is NULL");
    else st = compute_locked(g, pool, n_threads);
    gml_graph_unlock(g);
    return st;
}

gml_status gml_graph_compute(gml_graph *g, int n_threads) {
    GML_NONNULL(g, GML_ERR_INVALID);
    return compute(g, NULL, false, n_threads);
}

gml_status gml_graph_compute_pool(gml_graph *g, gml_threadpool *pool) {
    GML_NONNULL(g, GML_ERR_INVALID);
    return compute(g, pool, true, gml_threadpool_n_threads(pool));
}

gml_status gml_graph_weights_changed(gml_graph *g) {
    GML_NONNULL(g, GML_ERR_INVALID);
    gml_status st = gml_graph_lock(g, "weights_changed");
    if (st != GML_OK) return st;
    for (int i = 0; g->kept && i < g->n_nodes; i++) g->kept[i].valid = false;
    gml_graph_unlock(g);
    return GML_OK;
}

size_t gml_graph_packed_bytes(const gml_graph *g) {
    GML_NONNULL(g, 0);
    size_t n = 0;
    for (int i = 0; g->kept && i < g->n_nodes; i++) n += g->kept[i].size;
    return n;
}

gml_status gml_run_kernels(const gml_kernel_fn *fns, gml_tensor *const *dsts, int n,
                           int n_threads, void *wdata, size_t wsize, char *err, size_t err_size) {
    struct gml_step *steps = calloc((size_t)GML_MAX(n, 1), sizeof *steps);
    struct gml_chunk *chunks = aligned_alloc(GML_ALIGN, (size_t)GML_MAX(n, 1) * sizeof *chunks);
    if (!steps || !chunks) {
        free(steps);
        free(chunks);
        return GML_ERR_NOMEM;
    }
    for (int k = 0; k < n; k++)
        steps[k] = (struct gml_step){.fn = fns[k], .t = dsts[k], .node = k, .sync = true, .work = wsize};
    if (err_size) err[0] = '\0';
    struct gml_compute_shared sh = {.steps = steps, .chunks = chunks, .n_steps = n, .wdata = wdata,
                                    .isa = gml_get_isa(),
                                    .err = err, .err_size = err_size};
    gml_status st = n > 0 ? run(&sh, NULL, n_threads) : GML_OK;
    free(steps);
    free(chunks);
    return st;
}
