/* run-graph's compute: the timed runs and the per-node profile (the node
 * callback runs after each node, so a node's time is the time since the
 * previous callback). */
#define _POSIX_C_SOURCE 200809L
#include "rg.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

typedef struct profile {
    double last;
    double *ms; /* per node, summed over runs */
} profile;

static bool on_node(const gml_tensor *node, int index, void *user) {
    (void)node;
    profile *p = user;
    double t = now_ms();
    p->ms[index] += t - p->last;
    p->last = t;
    return true;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static bool compute(const rg_opts *o, rg_model *m, profile *p, double *ms, rg_err *e) {
    double t0 = now_ms();
    if (p) p->last = t0;
    gml_status st = gml_graph_compute(m->g, o->threads);
    *ms = now_ms() - t0;
    if (st != GML_OK) return rg_fail(e, RG_RUNTIME, "compute: %s", gml_graph_error(m->g));
    return true;
}

bool rg_run(const rg_opts *o, rg_model *m, rg_timing *t, rg_err *e) {
    *t = (rg_timing){.runs = o->repeat, .flops = gml_graph_flops(m->g)};
    gml_graph_set_nan_trap(m->g, o->nan_trap);
    double ms, *times = malloc((size_t)o->repeat * sizeof *times);
    if (!times) return rg_fail(e, RG_RUNTIME, "out of memory");
    if (o->repeat > 1 && !compute(o, m, NULL, &ms, e)) { /* the warm-up */
        free(times);
        return false;
    }
    int n_nodes = gml_graph_n_nodes(m->g);
    profile prof = {0};
    if (o->profile) {
        prof.ms = calloc((size_t)n_nodes + 1, sizeof *prof.ms);
        if (!prof.ms) {
            free(times);
            return rg_fail(e, RG_RUNTIME, "out of memory");
        }
        gml_graph_set_callback(m->g, on_node, &prof);
    }
    bool ok = true;
    for (int r = 0; r < o->repeat && ok; r++) ok = compute(o, m, o->profile ? &prof : NULL, &times[r], e);
    gml_graph_set_callback(m->g, NULL, NULL);
    if (ok) {
        qsort(times, (size_t)o->repeat, sizeof *times, cmp_double);
        t->min_ms = times[0];
        t->median_ms = o->repeat % 2 ? times[o->repeat / 2]
                                     : 0.5 * (times[o->repeat / 2 - 1] + times[o->repeat / 2]);
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
