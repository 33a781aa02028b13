/* run-graph's compute: the timed runs and the per-node profile (the node
 * callback runs after each node, so a node's time is the time since the
 * previous callback). */
#define _POSIX_C_SOURCE 200809L
#include "rg.h"
#include "rg_time.h"

#include <stdlib.h>
#include <string.h>

bool rg_place(gml_graph *g, const char *what, size_t own, rg_err *e) {
    gml_status st = gml_graph_plan(g, &(gml_plan_options){.measure_only = true});
    if (st == GML_OK && !rg_check_memory((uint64_t)gml_graph_plan_peak(g) + own, what, e)) return false;
    if (st == GML_OK) st = gml_graph_plan(g, NULL);
    if (st != GML_OK) return rg_fail(e, RG_RUNTIME, "placing %s: %s", what, gml_graph_error(g));
    return true;
}

typedef struct profile {
    double last;
    double *ms; /* per node, summed over runs */
} profile;

static bool on_node(const gml_tensor *node, int index, void *user) {
    (void)node;
    profile *p = user;
    double t = rg_now_ms();
    p->ms[index] += t - p->last;
    p->last = t;
    return true;
}

/* One compute of the graph (rg_timed_run); the profile's callback from the
 * first timed run on. */
typedef struct run_state {
    rg_model *m;
    int threads;
    profile *prof; /* NULL: no profile */
    rg_err *e;
} run_state;

static bool compute(void *user, int i, double *ms) {
    run_state *s = user;
    if (i == 0 && s->prof) gml_graph_set_callback(s->m->g, on_node, s->prof);
    const double t0 = rg_now_ms();
    if (s->prof) s->prof->last = t0;
    gml_status st = gml_graph_compute(s->m->g, s->threads);
    *ms = rg_now_ms() - t0;
    if (st != GML_OK) return rg_fail(s->e, RG_RUNTIME, "compute: %s", gml_graph_error(s->m->g));
    return true;
}

bool rg_run(const rg_opts *o, rg_model *m, rg_timing *t, rg_err *e) {
    *t = (rg_timing){.runs = o->repeat, .flops = gml_graph_flops(m->g)};
    gml_graph_set_nan_trap(m->g, o->nan_trap);
    double *times = malloc((size_t)o->repeat * sizeof *times);
    if (!times) return rg_fail(e, RG_RUNTIME, "out of memory");
    int n_nodes = gml_graph_n_nodes(m->g);
    profile prof = {0};
    if (o->profile) {
        prof.ms = calloc((size_t)n_nodes + 1, sizeof *prof.ms);
        if (!prof.ms) {
            free(times);
            return rg_fail(e, RG_RUNTIME, "out of memory");
        }
    }
    run_state s = {m, o->threads, o->profile ? &prof : NULL, e};
    bool ok = rg_time_runs(o->repeat, compute, &s, times);
    gml_graph_set_callback(m->g, NULL, NULL);
    if (ok) {
        t->median_ms = rg_median(times, o->repeat);
        t->min_ms = times[0];
        if (prof.ms)
            for (int i = 0; i < n_nodes; i++) prof.ms[i] /= o->repeat;
        t->node_ms = prof.ms;
    } else {
        free(prof.ms);
    }
    free(times);
    return ok;
}

typedef struct op_total {
    const char *op;
    double ms;
    int count;
} op_total;

static int cmp_total(const void *a, const void *b) {
    double x = ((const op_total *)a)->ms, y = ((const op_total *)b)->ms;
    return (x < y) - (x > y);
}

void rg_print_profile(FILE *f, const rg_model *m, const rg_timing *t) {
    int n = gml_graph_n_nodes(m->g);
    double total = 0;
    for (int i = 0; i < n; i++) total += t->node_ms[i];
    if (total <= 0) total = 1e-12;
    fprintf(f, "profile: mean of %d run%s, node times in graph order\n", t->runs, t->runs == 1 ? "" : "s");
    fprintf(f, "%5s  %-24s %-17s %-16s %10s %7s  %s\n", "node", "name", "op", "shape", "ms", "share",
            "kernel");
    op_total ops[GML_OP_COUNT] = {{0}};
    for (int i = 0; i < n; i++) {
        const gml_tensor *node = gml_graph_node(m->g, i);
        char s[64];
        const char *kernel = gml_graph_node_kernel(m->g, i); /* NULL: a view */
        fprintf(f, "%5d  %-24.24s %-17s %-16s %10.4f %6.1f%%  %s\n", i, node->name,
                gml_op_name(node->op), gml_format_shape(node, s, sizeof s), t->node_ms[i],
                100.0 * t->node_ms[i] / total, kernel ? kernel : "-");
        ops[node->op].op = gml_op_name(node->op);
        ops[node->op].ms += t->node_ms[i];
        ops[node->op].count++;
    }
    qsort(ops, GML_OP_COUNT, sizeof *ops, cmp_total);
    fprintf(f, "per op:\n%-17s %5s %10s %7s\n", "op", "nodes", "ms", "share");
    for (int i = 0; i < GML_OP_COUNT; i++)
        if (ops[i].count)
            fprintf(f, "%-17s %5d %10.4f %6.1f%%\n", ops[i].op, ops[i].count, ops[i].ms, 100.0 * ops[i].ms / total);
    fprintf(f, "%-17s %5d %10.4f %6.1f%%\n", "total", n, total, 100.0);
}
