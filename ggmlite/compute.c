/* Compute: runs a graph's nodes in order, each split over n_threads, with a
 * per-node callback and an optional NaN/Inf trap. */
#include "graph.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct gml_compute_shared {
    gml_graph *g;
    atomic_int failed;
    atomic_llong chunk; /* next chunk index for gml_chunk_next */
};

void gml_barrier(const gml_compute_params *p) {
    GML_UNUSED(p); /* every share of a node runs in turn on one thread */
}

int64_t gml_chunk_next(const gml_compute_params *p) {
    return atomic_fetch_add(&p->shared->chunk, 1);
}

void gml_kernel_fail(const gml_compute_params *p, const char *fmt, ...) {
    int expected = 0;
    if (!atomic_compare_exchange_strong(&p->shared->failed, &expected, 1)) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->shared->g->err, sizeof p->shared->g->err, fmt, ap);
    va_end(ap);
}

void gml_graph_set_callback(gml_graph *g, gml_node_callback cb, void *user) {
    g->callback = cb;
    g->callback_user = user;
}

void gml_graph_set_nan_trap(gml_graph *g, bool on) { g->nan_trap = on; }

const char *gml_graph_error(const gml_graph *g) { return g->err; }

void gml_graph_release_compute(gml_graph *g) {
    free(g->work);
    g->work = NULL;
    g->work_size = 0;
}

static gml_status fail(gml_graph *g, gml_status st, const char *fmt, ...) GML_PRINTF(3, 4);
static gml_status fail(gml_graph *g, gml_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->err, sizeof g->err, fmt, ap);
    va_end(ap);
    return st;
}

/* Every tensor must have data before anything runs. */
static gml_status check_data(gml_graph *g) {
    for (int i = 0; i < g->n_entries; i++) {
        const gml_tensor *t = g->entries[i].t;
        if (t->data) continue;
        char shape[GML_SHAPE_MAX];
        return fail(g, GML_ERR_INVALID,
                    "compute: '%s' %s (%s) has no data: it was made in a no_alloc context; "
                    "place the graph's data before computing", t->name,
                    GML_SHAPE(t, shape), gml_op_name(t->op));
    }
    return GML_OK;
}

/* Grows the shared scratch buffer to what the largest node needs. */
static gml_status prepare_work(gml_graph *g, int nth) {
    size_t need = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const gml_op_def *def = gml_op_get(g->nodes[i]->op);
        if (def->work_size) need = GML_MAX(need, def->work_size(g->nodes[i], nth));
    }
    if (need <= g->work_size) return GML_OK;
    free(g->work);
    g->work = aligned_alloc(GML_ALIGN, gml_align_up(need, GML_ALIGN));
    g->work_size = g->work ? need : 0;
    if (!g->work) return fail(g, GML_ERR_NOMEM, "compute: cannot allocate %zu bytes of scratch", need);
    return GML_OK;
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
    return fail(g, GML_ERR_NONFINITE, "nan trap: node %d '%s' (%s) %s holds %s at [%s]; sources: %s",
                i, t->name, gml_op_name(t->op), GML_SHAPE(t, shape),
                isnan(v) ? "nan" : v > 0 ? "inf" : "-inf", where, srcs);
}

gml_status gml_graph_compute(gml_graph *g, int n_threads) {
    g->err[0] = '\0';
    if (n_threads < 1) return fail(g, GML_ERR_INVALID, "compute: n_threads is %d, must be >= 1", n_threads);
    gml_status st = check_data(g);
    if (st == GML_OK) st = prepare_work(g, n_threads);
    if (st != GML_OK) return st;

    const bool reference = gml_get_isa() == GML_ISA_REFERENCE;
    struct gml_compute_shared shared = {.g = g};
    for (int i = 0; i < g->n_nodes; i++) {
        gml_tensor *node = g->nodes[i];
        const gml_op_def *def = gml_op_get(node->op);
        if (!(def->flags & GML_OPF_NOOP)) {
            atomic_store(&shared.chunk, 0);
            for (int ith = 0; ith < n_threads; ith++) {
                gml_compute_params p = {.ith = ith, .nth = n_threads, .wdata = g->work,
                                        .wsize = g->work_size, .shared = &shared};
                (reference ? def->reference : def->forward)(&p, node);
            }
            if (atomic_load(&shared.failed)) return GML_ERR_INVALID;
        }
        if (g->nan_trap && !(def->flags & (GML_OPF_INF_OK | GML_OPF_NOOP))) {
            int64_t idx[GML_MAX_DIMS];
            float v;
            if (find_nonfinite(node, idx, &v)) return trap_report(g, i, node, idx, v);
        }
        if (g->callback && !g->callback(node, i, g->callback_user))
            return fail(g, GML_ERR_ABORTED, "compute: stopped by the node callback after node %d '%s'",
                        i, node->name);
    }
    return GML_OK;
}
