/* The graph object, shared by graph.c (building, printing) and compute.c. */
#ifndef GGMLITE_GRAPH_H
#define GGMLITE_GRAPH_H

#include "hashindex.h"
#include "internal.h"

struct gml_graph_entry {
    gml_tensor *t;
    int uses; /* consumer edges, +1 if an output */
    int pos;  /* node index, or -1 - leaf index */
};

struct gml_graph {
    gml_context *ctx; /* the context it was built from (error messages) */

    gml_tensor **nodes; /* topological order */
    int n_nodes, nodes_cap;
    gml_tensor **leafs;
    int n_leafs, leafs_cap;

    /* every tensor of the graph, found by pointer through an index of
     * positions in entries */
    struct gml_graph_entry *entries;
    int n_entries, entries_cap;
    gml_hashindex entry_index;

    /* compute */
    gml_node_callback callback;
    void *callback_user;
    bool nan_trap;
    void *work;         /* scratch for kernels, reused across computes */
    size_t work_size;
    struct gml_step *steps; /* the nodes that compute, [n_nodes] once made */
    int n_steps;
    bool *neg_inf_ok;       /* [n_nodes]: -inf may be in the node by design (NaN trap) */
    char err[GML_ERR_MAX];

    /* memory plan (plan.c) */
    void *plan_buffer;        /* owned, or NULL */
    gml_tensor **plan_placed; /* tensors whose data the plan set */
    int n_plan_placed;
    size_t plan_peak, plan_naive;
};

/* One node that computes: the kernel compute runs on it (ISA-dependent). */
struct gml_step {
    gml_kernel_fn fn;
    gml_tensor *t;
    int node;           /* index among the graph's nodes */
    const char *kernel; /* what it ran (gml_kernel_note), or NULL; reset by each compute */
};

/* Index of t in g->entries, or -1. */
int gml_graph_entry(const gml_graph *g, const gml_tensor *t);
/* Writes the graph's error message (gml_graph_error) and returns st
 * (compute.c). */
gml_status gml_graph_fail(gml_graph *g, gml_status st, const char *fmt, ...) GML_PRINTF(3, 4);
/* Frees what compute keeps between runs (compute.c). */
void gml_graph_release_compute(gml_graph *g);
/* Frees the memory plan's buffer and lists, touching no tensor: the context
 * may be gone already (plan.c). */
void gml_graph_release_plan(gml_graph *g);

#endif
