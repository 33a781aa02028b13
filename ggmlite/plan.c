/* The memory planner: gives the data-less tensors of a graph places in one
 * buffer, reusing the memory of intermediates once their last reader has run.
 *
 * Storage belongs to a root (a tensor that is not a view); views only point
 * into their root. Walking the nodes in order, each node that needs storage
 * gets a block (or, elementwise, takes over its dying first source's block),
 * then the roots whose last use was this node give their blocks back. Blocks
 * come from a list of free ranges, best fit first, else from the end of the
 * buffer, which then grows: its final size is the peak.
 *
 * The plan is the graph's own: an offset per entry (plan_offs), never a
 * write to a tensor header, so graphs that share tensors each have their own
 * places for them. gml_graph_bind (graph.c) binds them into the graph's
 * copies of the headers; users read them with gml_graph_data. */
#include "graph.h"

#include <stdlib.h>
#include <string.h>

/* What the planner knows of one graph entry. */
struct slot {
    int root;    /* entry index of the tensor owning the storage (itself if not a view) */
    int last;    /* roots: the last node index that reads or writes the storage */
    bool place;  /* a root without data: the planner gives it storage */
    bool keep;   /* its storage is never reused (leafs, inputs, outputs, params) */
    bool placed; /* has a block */
    bool gone;   /* its block was given back, or taken over in place */
    size_t offs, size;
};

/* Free ranges of the buffer, sorted by offset, never adjacent (merged). */
struct freelist {
    struct { size_t offs, size; } *r;
    int n;
    size_t top; /* end of the used part of the buffer: the peak so far */
};

static size_t take(struct freelist *f, size_t size) {
    int best = -1;
    for (int i = 0; i < f->n; i++)
        if (f->r[i].size >= size && (best < 0 || f->r[i].size < f->r[best].size)) best = i;
    /* Nothing fits: grow the buffer, starting in a free range at its end. */
    if (best < 0 && f->n > 0 && f->r[f->n - 1].offs + f->r[f->n - 1].size == f->top) {
        best = f->n - 1;
        f->top = f->r[best].offs + size;
        f->r[best].size = size;
    }
    if (best < 0) {
        f->top += size;
        return f->top - size;
    }
    size_t offs = f->r[best].offs;
    f->r[best].offs += size;
    f->r[best].size -= size;
    if (f->r[best].size == 0) {
        memmove(&f->r[best], &f->r[best + 1], (size_t)(f->n - best - 1) * sizeof *f->r);
        f->n--;
    }
    return offs;
}

/* f->r has room for one more range: there are never more free ranges than
 * blocks handed out. */
static void give_back(struct freelist *f, size_t offs, size_t size) {
    int i = 0;
    while (i < f->n && f->r[i].offs < offs) i++;
    bool join_prev = i > 0 && f->r[i - 1].offs + f->r[i - 1].size == offs;
    bool join_next = i < f->n && offs + size == f->r[i].offs;
    if (join_prev && join_next) {
        f->r[i - 1].size += size + f->r[i].size;
        memmove(&f->r[i], &f->r[i + 1], (size_t)(f->n - i - 1) * sizeof *f->r);
        f->n--;
    } else if (join_prev) {
        f->r[i - 1].size += size;
    } else if (join_next) {
        f->r[i].offs = offs;
        f->r[i].size += size;
    } else {
        memmove(&f->r[i + 1], &f->r[i], (size_t)(f->n - i) * sizeof *f->r);
        f->r[i].offs = offs;
        f->r[i].size = size;
        f->n++;
    }
}

void *gml_graph_data(const gml_graph *g, const gml_tensor *t) {
    GML_NONNULL(g, NULL);
    GML_NONNULL(t, NULL);
    char why[GML_ERR_MAX - 64];
    if (!gml_graph_alive(g, why, sizeof why))
        return gml_thread_fail("gml_graph_data: %s", why);
    const int e = gml_graph_entry(g, t);
    return e < 0 ? NULL : gml_entry_data(g, e);
}

/* Entry index of the storage owner of t. */
static int root_of(const gml_graph *g, const gml_tensor *t) {
    return gml_graph_entry(g, t->view_src ? t->view_src : t);
}

/* Liveness: roots, what gets placed, what is kept, last uses. False if a
 * view's storage is not in the graph (views made by hand). */
static bool find_lifetimes(gml_graph *g, struct slot *sl) {
    for (int e = 0; e < g->n_entries; e++) {
        const gml_tensor *t = g->entries[e].t;
        sl[e] = (struct slot){.root = root_of(g, t), .last = -1};
        sl[e].place = !t->view_src && !t->data;
        if (sl[e].root < 0) {
            gml_graph_fail(g, GML_ERR_INVALID,
                           "plan: '%s' is a view of '%s', which is not in the graph", t->name,
                           t->view_src->name);
            return false;
        }
    }
    for (int e = 0; e < g->n_entries; e++) {
        const gml_tensor *t = g->entries[e].t;
        if (t->op == GML_OP_NONE || g->entries[e].output ||
            t->flags & (GML_FLAG_INPUT | GML_FLAG_OUTPUT | GML_FLAG_PARAM))
            sl[sl[e].root].keep = true;
    }
    for (int j = 0; j < g->n_nodes; j++) {
        const gml_tensor *t = g->nodes[j];
        struct slot *own = &sl[root_of(g, t)]; /* a view node (cpy) writes its root */
        own->last = GML_MAX(own->last, j);
        for (int s = 0; s < GML_MAX_SRC; s++) {
            if (!t->src[s]) continue;
            struct slot *src = &sl[root_of(g, t->src[s])];
            src->last = GML_MAX(src->last, j);
        }
    }
    return true;
}

/* The entry whose storage node j (entry e) may take over in place, or -1. */
static int inplace_source(const gml_graph *g, const struct slot *sl, int j, int e) {
    const gml_tensor *t = g->nodes[j], *a = t->src[0];
    if (!(gml_op_get(t->op)->flags & GML_OPF_INPLACE) || !a) return -1;
    int r = root_of(g, a);
    const struct slot *src = &sl[r];
    if (!src->placed || src->keep || src->gone || src->last != j || src->size < sl[e].size)
        return -1;
    if (a->type != t->type || gml_nelements(a) != gml_nelements(t) || a->view_offs != 0 ||
        !gml_is_contiguous(a))
        return -1;
    for (int s = 1; s < GML_MAX_SRC; s++) /* no other source may read the memory */
        if (t->src[s] && t->src[s] != a && root_of(g, t->src[s]) == r) return -1;
    return r;
}

/* Offsets for every slot that needs storage, in node order. */
static void assign_offsets(const gml_graph *g, struct slot *sl, struct freelist *f, bool reuse,
                           bool inplace) {
    for (int e = 0; e < g->n_entries; e++) { /* leafs without data: kept from the start */
        if (!sl[e].place || g->entries[e].t->op != GML_OP_NONE) continue;
        sl[e].offs = take(f, sl[e].size);
        sl[e].placed = true;
    }
    for (int j = 0; j < g->n_nodes; j++) {
        const gml_tensor *t = g->nodes[j];
        int e = gml_graph_entry(g, t);
        if (sl[e].place) {
            int r = reuse && inplace ? inplace_source(g, sl, j, e) : -1;
            if (r >= 0) { /* take the whole block over */
                sl[e].offs = sl[r].offs;
                sl[e].size = sl[r].size;
                sl[r].gone = true;
            } else {
                sl[e].offs = take(f, sl[e].size);
            }
            sl[e].placed = true;
        }
        if (!reuse) continue;
        /* Give back the blocks whose last use was this node. */
        for (int s = -1; s < GML_MAX_SRC; s++) {
            const gml_tensor *u = s < 0 ? t : t->src[s];
            if (!u) continue;
            struct slot *r = &sl[root_of(g, u)];
            if (r->placed && !r->keep && !r->gone && r->last == j) {
                give_back(f, r->offs, r->size);
                r->gone = true;
            }
        }
    }
}

static bool env_no_reuse(void) {
    const char *v = getenv("GGMLITE_PLAN_NOREUSE");
    return v && *v && strcmp(v, "0") != 0;
}

/* Plans g, its lock held. */
static gml_status plan(gml_graph *g, const gml_plan_options *opt) {
    g->err[0] = '\0';
    /* Drop the previous plan. It wrote no header: what had no data then has
     * none now, unless the user has placed it since (then it keeps that). */
    gml_graph_release_plan(g);
    if (opt->buffer && (uintptr_t)opt->buffer % GML_ALIGN)
        return gml_graph_fail(g, GML_ERR_INVALID, "plan: the buffer %p is not %d-byte aligned",
                         opt->buffer, GML_ALIGN);

    const bool reuse = !opt->no_reuse && !env_no_reuse();
    struct slot *sl = calloc((size_t)GML_MAX(g->n_entries, 1), sizeof *sl);
    struct freelist f = {.r = calloc((size_t)g->n_entries + 1, sizeof *f.r)};
    if (!sl || !f.r) {
        free(sl);
        free(f.r);
        return gml_graph_fail(g, GML_ERR_NOMEM, "plan: out of memory");
    }
    if (!find_lifetimes(g, sl)) {
        free(sl);
        free(f.r);
        return GML_ERR_INVALID;
    }
    size_t naive = 0;
    for (int e = 0; e < g->n_entries; e++)
        if (sl[e].place) {
            sl[e].size = gml_align_up(gml_nbytes(g->entries[e].t), GML_ALIGN);
            naive += sl[e].size;
        }
    assign_offsets(g, sl, &f, reuse, !opt->no_inplace);
    const size_t peak = f.top;
    free(f.r);

    gml_status st = GML_OK;
    char *base = opt->buffer;
    if (opt->measure_only) {
        /* sizes only */
    } else if (base && opt->buffer_size < peak) {
        st = gml_graph_fail(g, GML_ERR_NOMEM, "plan: the graph needs a %zu-byte buffer, the one given "
                       "has %zu bytes", peak, opt->buffer_size);
    } else if (!base && peak > 0 && !(base = g->plan_buffer = gml_alloc_arena(peak, &g->plan_mapped))) {
        st = gml_graph_fail(g, GML_ERR_NOMEM, "plan: cannot allocate a %zu-byte buffer", peak);
    } else if (!(g->plan_offs = malloc((size_t)GML_MAX(g->n_entries, 1) * sizeof *g->plan_offs))) {
        st = gml_graph_fail(g, GML_ERR_NOMEM, "plan: out of memory");
    } else {
        /* The graph's own record: no header is written. */
        for (int e = 0; e < g->n_entries; e++)
            g->plan_offs[e] = sl[e].place ? sl[e].offs : GML_UNPLACED;
        g->plan_base = base;
    }
    free(sl);
    if (st != GML_OK) {
        gml_graph_release_plan(g);
        return st;
    }
    g->plan_peak = peak;
    g->plan_naive = naive;
    return GML_OK;
}

gml_status gml_graph_plan(gml_graph *g, const gml_plan_options *opt) {
    GML_NONNULL(g, GML_ERR_INVALID);
    const gml_plan_options defaults = {0};
    if (!opt) opt = &defaults;
    gml_status st = gml_graph_lock(g, "plan");
    if (st != GML_OK) return st;
    char why[GML_ERR_MAX - 64];
    if (!gml_graph_alive(g, why, sizeof why)) {
        st = gml_graph_fail(g, GML_ERR_INVALID, "plan: %s", why);
        gml_graph_unlock(g);
        return st;
    }
    st = plan(g, opt);
    gml_graph_bind(g); /* the copies take the new places (or lose the dropped ones) */
    gml_graph_unlock(g);
    return st;
}

size_t gml_graph_plan_peak(const gml_graph *g) {
    GML_NONNULL(g, 0);
    return g->plan_peak;
}
size_t gml_graph_plan_naive(const gml_graph *g) {
    GML_NONNULL(g, 0);
    return g->plan_naive;
}
