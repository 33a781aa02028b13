/* The graph object, shared by graph.c (building, printing) and compute.c. */
#ifndef GGMLITE_GRAPH_H
#define GGMLITE_GRAPH_H

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

    /* every tensor of the graph, found through an XXH3-keyed hash set */
    struct gml_graph_entry *entries;
    int n_entries, entries_cap;
    const gml_tensor **hash_keys;
    int *hash_vals;
    size_t hash_cap;

    /* compute */
    gml_node_callback callback;
    void *callback_user;
    bool nan_trap;
    void *work;         /* scratch for kernels, reused across computes */
    size_t work_size;
    char err[GML_ERR_MAX];
};

/* Index of t in g->entries, or -1. */
int gml_graph_entry(const gml_graph *g, const gml_tensor *t);

/* Frees what compute keeps between runs (compute.c). */
void gml_graph_release_compute(gml_graph *g);

#endif
