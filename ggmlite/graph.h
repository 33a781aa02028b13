/* The graph object, inside the engine. Its files depend one way:
 *
 *   graph.c    the object: building, lookups, the lock, the error message,
 *              the bound copies and the data each entry has, freeing,
 *              printing and the digest; it calls neither of the others
 *   plan.c     the memory planner: fills the plan fields; calls graph.c
 *   compute.c  the steps and running them: fills the compute fields;
 *              calls graph.c and threadpool.c */
#ifndef GGMLITE_GRAPH_H
#define GGMLITE_GRAPH_H

#include <ggmlite/hashindex.h>
#include "internal.h"

#include <pthread.h>

struct gml_graph_entry {
    gml_tensor *t;
    int uses; /* consumer edges, +1 if an output */
    bool output; /* one of the graph's outputs (kept by its plan; its copy flagged) */
    int pos;  /* node index, or -1 - leaf index */
};

/* A context whose tensors a graph holds, with the first of them met. */
struct gml_graph_ctx {
    const gml_context *ctx;
    uint64_t id; /* ctx's: a context made later at its address is another */
    char tensor[GML_MAX_NAME];
};

struct gml_graph {
    gml_context *ctx; /* the context it was built from (error messages) */
    /* every context its tensors belong to (found by address when built):
     * whatever reads a header needs them all alive (gml_graph_alive) */
    struct gml_graph_ctx *ctxs;
    int n_ctxs;
    uint64_t id;      /* unique in the process, never 0 (graph.c's thread-local messages) */
    /* Held by a compute or a plan of this graph: one at a time (gml_graph_lock). */
    pthread_mutex_t mu;
    /* While a thread holds mu: the graph it held before (gml_graph_lock). */
    const struct gml_graph *held_up;

    gml_tensor **nodes; /* topological order */
    int n_nodes, nodes_cap;
    gml_tensor **leafs;
    int n_leafs, leafs_cap;

    /* every tensor of the graph, found by pointer through an index of
     * positions in entries */
    struct gml_graph_entry *entries;
    int n_entries, entries_cap;
    gml_hashindex entry_index;

    /* The graph's own copies of its tensors' headers, [n_entries], made with
     * the graph: bound[e] is entries[e].t as of the last bind, its src[] and
     * view_src pointing at the copies (a view_src outside the graph stays the
     * header) and its data the one the graph computes with (gml_entry_data).
     * Kernels, the NaN trap and the callback see these, never the headers,
     * which other graphs may share. */
    gml_tensor *bound;
    uint64_t binds; /* how often a bind changed them */

    /* compute */
    gml_node_callback callback;
    void *callback_user;
    bool nan_trap;
    void *work;         /* scratch for kernels, reused across computes */
    size_t work_size;
    struct gml_step *steps; /* the nodes that compute, [n_nodes] once made */
    int n_steps;
    struct gml_chunk *chunks; /* [n_nodes]: gml_chunk_next's count, one per step */
    struct gml_touch *touch;  /* [n_nodes]: what each step touches, while planning them */
    /* What steps (their barriers, solo nodes, scratch places) and work were
     * prepared for: the bound copies as of binds, a thread count, an ISA and
     * a checks setting; any change of these plans the steps afresh. */
    bool prepared;
    uint64_t prep_binds;
    int prep_nth;
    gml_isa prep_isa;
    bool prep_checks;
    bool *neg_inf_ok;       /* [n_nodes]: -inf may be in the node by design (NaN trap) */
    gml_kept *kept;         /* [n_nodes]: what each node keeps across computes (packed weights) */
    char err[GML_ERR_MAX];

    /* memory plan (plan.c): where the plan put each entry. The headers are
     * never written: a placed tensor's header keeps data == NULL. */
    void *plan_buffer;  /* owned, or NULL */
    size_t plan_mapped; /* gml_alloc_arena's: 0 unless mapped */
    char *plan_base;    /* the buffer placed into (owned or the caller's); NULL: no plan */
    size_t *plan_offs;  /* [n_entries]: offset in plan_base, or GML_UNPLACED */
    size_t plan_peak, plan_naive;
};

#define GML_UNPLACED SIZE_MAX

/* One node that computes: the kernel compute runs on it (ISA-dependent),
 * and how it is scheduled (compute.c's plan_steps). */
struct gml_step {
    gml_kernel_fn fn;
    gml_tensor *t;      /* the graph's bound copy of the node */
    int node;           /* index among the graph's nodes */
    const char *kernel; /* what it ran (gml_kernel_note), or NULL; reset by each compute */
    /* The threads meet at a barrier before this step: it reads or writes
     * memory that a step since the last barrier writes, or writes memory
     * one reads (or a check, a callback, must see every node). */
    bool sync;
    bool solo;       /* tiny: thread 0 runs it alone (nth 1), the others go on */
    size_t work_off; /* its scratch: [work_off, work_off + work) of the compute's */
    size_t work;
    unsigned const_srcs; /* gml_compute_params.const_srcs */
    gml_kept *kept;      /* the node's entry of g->kept when it keeps memory, else NULL */
};

/* gml_chunk_next's count for one step, on a cache line of its own. */
struct gml_chunk {
    _Alignas(GML_ALIGN) atomic_llong next;
};

/* All in graph.c. */

/* Index of t in g->entries, or -1. */
int gml_graph_entry(const gml_graph *g, const gml_tensor *t);
/* Whether every context whose tensors g holds is alive, so that g may read
 * their headers. If not, writes into why (size bytes) which tensor was
 * freed, for "<call>: <why>" messages. */
bool gml_graph_alive(const gml_graph *g, char *why, size_t size);
/* Writes the graph's error message (gml_graph_error) and returns st. */
gml_status gml_graph_fail(gml_graph *g, gml_status st, const char *fmt, ...) GML_PRINTF(3, 4);
/* Frees what compute keeps between runs. */
void gml_graph_release_compute(gml_graph *g);
/* Frees the memory plan's buffer and lists, touching no tensor: the context
 * may be gone already. */
void gml_graph_release_plan(gml_graph *g);
/* The data entry e has in g's computes: for a root, its header's data if it
 * has some (the user's or an allocating context's; it wins over the plan),
 * else its planned address, else NULL; for a view, its root's (bound the same
 * way, inside the graph or not) plus view_offs, or the view's own header data
 * when the root has none. */
void *gml_entry_data(const gml_graph *g, int e);
/* Refreshes every bound copy from its header (writing only what changed, so
 * that a steady state writes nothing; a change makes the next compute plan
 * its steps afresh) and binds its data. */
void gml_graph_bind(gml_graph *g);
/* Takes g's compute lock for a compute or a plan (what: "compute", "plan"):
 * waits for another thread's compute or plan of g to finish, unless this
 * thread is inside a compute itself (a node callback), which cannot wait:
 * GML_ERR_INVALID then, with the message kept for this thread's
 * gml_graph_error. */
gml_status gml_graph_lock(gml_graph *g, const char *what);
void gml_graph_unlock(gml_graph *g);

#endif
