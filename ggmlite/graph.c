/* Graphs: DFS from the outputs into topologically ordered nodes and leafs,
 * use counts; the graph's own state (one compute or plan at a time, its
 * error message, the bound copies of its tensors and their data, freeing
 * what plan.c and compute.c keep in it); a printed table, Graphviz DOT and a
 * structural digest. */
#include "graph.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h> /* the digest */

/* ---- tensor -> entry, through the hash index --------------------------- */

/* Whether entry val of graph user is tensor key (the index's equality). */
static bool entry_is(const void *user, int val, const void *key) {
    const gml_graph *g = user;
    return g->entries[val].t == key;
}

/* Index of t in g->entries, or -1. */
static int lookup(const gml_graph *g, const gml_tensor *t) {
    return gml_hashindex_find(&g->entry_index, gml_hash_ptr(t), entry_is, g, t);
}

int gml_graph_entry(const gml_graph *g, const gml_tensor *t) { return lookup(g, t); }

/* Adds t as a new entry; returns its index or -1 on malloc failure. */
static int insert(gml_graph *g, gml_tensor *t) {
    if (g->n_entries == g->entries_cap) {
        int cap = g->entries_cap ? g->entries_cap * 2 : 64;
        struct gml_graph_entry *e = realloc(g->entries, (size_t)cap * sizeof *e);
        if (!e) return -1;
        g->entries = e;
        g->entries_cap = cap;
    }
    if (!gml_hashindex_add(&g->entry_index, gml_hash_ptr(t), g->n_entries)) return -1;
    g->entries[g->n_entries] = (struct gml_graph_entry){.t = t};
    return g->n_entries++;
}

/* ---- building --------------------------------------------------------- */

/* Appends t to the node list (or leaf list) and records its position. */
static bool push_sorted(gml_graph *g, gml_tensor *t) {
    bool leaf = t->op == GML_OP_NONE;
    gml_tensor ***list = leaf ? &g->leafs : &g->nodes;
    int *n = leaf ? &g->n_leafs : &g->n_nodes, *cap = leaf ? &g->leafs_cap : &g->nodes_cap;
    if (*n == *cap) { /* grow geometrically: building stays linear in the graph size */
        int c = *cap ? *cap * 2 : 64;
        gml_tensor **grown = realloc(*list, (size_t)c * sizeof **list);
        if (!grown) return false;
        *list = grown;
        *cap = c;
    }
    g->entries[lookup(g, t)].pos = leaf ? -1 - *n : *n;
    (*list)[(*n)++] = t;
    return true;
}

struct frame {
    gml_tensor *t;
    int next_src;
};

static bool push_frame(struct frame **stack, int *depth, int *cap, gml_tensor *t) {
    if (*depth == *cap) {
        int c = *cap ? *cap * 2 : 32;
        struct frame *s = realloc(*stack, (size_t)c * sizeof *s);
        if (!s) return false;
        *stack = s;
        *cap = c;
    }
    (*stack)[(*depth)++] = (struct frame){t, 0};
    return true;
}

/* Records the context of t (a tensor of a live context: live_ctx) among
 * g's; false on malloc failure. */
static bool note_ctx(gml_graph *g, const gml_tensor *t, const gml_context *c, uint64_t id) {
    for (int i = 0; i < g->n_ctxs; i++)
        if (g->ctxs[i].ctx == c && g->ctxs[i].id == id) return true;
    struct gml_graph_ctx *grown = realloc(g->ctxs, (size_t)(g->n_ctxs + 1) * sizeof *grown);
    if (!grown) return false;
    g->ctxs = grown;
    grown[g->n_ctxs] = (struct gml_graph_ctx){.ctx = c, .id = id};
    snprintf(grown[g->n_ctxs].tensor, sizeof grown[g->n_ctxs].tensor, "%s", t->name);
    g->n_ctxs++;
    return true;
}

/* Why a DFS stops: out of memory, or a tensor of no live context (not read:
 * its reader, or the output's index, is named instead). */
enum visit_result { VISIT_OK, VISIT_NOMEM, VISIT_DEAD };

/* Whether t may be read (a tensor of a live context); notes its context. */
static enum visit_result reach(gml_graph *g, const gml_tensor *t) {
    uint64_t id;
    const gml_context *c = gml_ctx_holding(t, &id);
    if (!c) return VISIT_DEAD;
    return note_ctx(g, t, c, id) ? VISIT_OK : VISIT_NOMEM;
}

/* Iterative post-order DFS (graphs can be deep): a tensor is listed after all
 * its sources, and each tensor once. Each tensor is checked to be of a live
 * context before it is read; on VISIT_DEAD, *reader and *src_index say whose
 * source it was (*reader NULL: root itself). */
static enum visit_result visit(gml_graph *g, gml_tensor *root, const gml_tensor **reader,
                               int *src_index) {
    *reader = NULL;
    if (lookup(g, root) >= 0) return VISIT_OK;
    enum visit_result r = reach(g, root);
    if (r != VISIT_OK) return r;
    struct frame *stack = NULL;
    int depth = 0, cap = 0;
    bool ok = insert(g, root) >= 0 && push_frame(&stack, &depth, &cap, root);
    while (ok && depth > 0) {
        struct frame *f = &stack[depth - 1];
        if (f->next_src < GML_MAX_SRC) {
            gml_tensor *s = f->t->src[f->next_src++];
            if (s && lookup(g, s) < 0) {
                r = reach(g, s);
                if (r == VISIT_DEAD) {
                    *reader = f->t;
                    *src_index = f->next_src - 1;
                }
                ok = r == VISIT_OK && insert(g, s) >= 0 && push_frame(&stack, &depth, &cap, s);
            }
            continue;
        }
        depth--;
        ok = push_sorted(g, f->t);
    }
    free(stack);
    return ok ? VISIT_OK : r == VISIT_DEAD ? VISIT_DEAD : VISIT_NOMEM;
}

gml_graph *gml_build_graph(gml_context *ctx, gml_tensor *const *outputs, int n_outputs) {
    if (!gml_check_ctx(ctx, __func__)) return NULL;
    if (!outputs) {
        gml_fail(ctx, "gml_build_graph: outputs is NULL");
        return NULL;
    }
    if (n_outputs < 1) {
        gml_fail(ctx, "build_graph: no outputs given");
        return NULL;
    }
    if (ctx->err[0]) return NULL; /* a builder failed: keep its message, it says why */
    for (int i = 0; i < n_outputs; i++)
        if (!outputs[i]) {
            gml_fail(ctx, "build_graph: output %d is NULL", i);
            return NULL;
        }
    gml_graph *g = calloc(1, sizeof *g);
    if (!g) {
        gml_fail(ctx, "build_graph: out of memory");
        return NULL;
    }
    g->ctx = ctx;
    static atomic_uint_least64_t last_id;
    g->id = atomic_fetch_add(&last_id, 1) + 1;
    if (pthread_mutex_init(&g->mu, NULL) != 0) {
        free(g);
        gml_fail(ctx, "build_graph: cannot make the graph's lock");
        return NULL;
    }
    enum visit_result r = VISIT_OK;
    const gml_tensor *reader = NULL;
    int src_index = 0, out_index = 0;
    for (; out_index < n_outputs && r == VISIT_OK; out_index++)
        r = visit(g, outputs[out_index], &reader, &src_index);
    bool ok = r == VISIT_OK;
    if (ok) {
        /* Use counts: one per consumer edge, plus one for being an output. */
        for (int i = 0; i < g->n_entries; i++) {
            gml_tensor *t = g->entries[i].t;
            for (int s = 0; s < GML_MAX_SRC; s++)
                if (t->src[s]) g->entries[lookup(g, t->src[s])].uses++;
        }
        /* marked in the graph, not on the headers: other graphs over the
         * same tensors have outputs of their own */
        for (int i = 0; i < n_outputs; i++) {
            struct gml_graph_entry *o = &g->entries[lookup(g, outputs[i])];
            o->output = true;
            o->uses++;
        }
        /* The graph's copies of the headers, bound now so that
         * gml_graph_tensor has them before any plan or compute. */
        ok = (g->bound = calloc((size_t)g->n_entries, sizeof *g->bound)) != NULL;
        if (ok) gml_graph_bind(g);
    }
    if (!ok) {
        gml_graph_free(g);
        if (r != VISIT_DEAD)
            gml_fail(ctx, "build_graph: out of memory");
        else if (reader)
            gml_fail(ctx, "gml_build_graph: source %d of '%s' (%s) is not a tensor of a live "
                     "context: its context was freed (gml_free) after '%s' was built",
                     src_index, reader->name, gml_op_name(reader->op), reader->name);
        else
            gml_fail(ctx, "gml_build_graph: output %d is not a tensor of a live context: its "
                     "context was freed (gml_free), or it is a graph's copy of a header",
                     out_index - 1);
        return NULL;
    }
    return g;
}

bool gml_graph_alive(const gml_graph *g, char *why, size_t size) {
    for (int i = 0; i < g->n_ctxs; i++)
        if (!gml_ctx_live_id(g->ctxs[i].ctx, g->ctxs[i].id)) {
            snprintf(why, size, "'%s' was freed with its context (gml_free) after the graph was "
                     "built%s; a graph computes and reads its tensors only while their contexts "
                     "are alive (it may still be freed)", g->ctxs[i].tensor,
                     g->ctxs[i].ctx == g->ctx ? " (the graph's own context)" : "");
            return false;
        }
    return true;
}

/* For the calls that read headers and have no graph message of their own
 * to set (a const graph): false, with "<fn>: <why>" for the thread, unless
 * g is alive. */
static bool alive_or_fail(const gml_graph *g, const char *fn) {
    char why[GML_ERR_MAX - 64];
    if (gml_graph_alive(g, why, sizeof why)) return true;
    gml_thread_fail("%s: %s", fn, why);
    return false;
}

void gml_graph_free(gml_graph *g) {
    if (!g) return;
    free(g->ctxs);
    gml_graph_release_compute(g);
    gml_graph_release_plan(g);
    free(g->bound);
    pthread_mutex_destroy(&g->mu);
    free(g->nodes);
    free(g->leafs);
    free(g->entries);
    gml_hashindex_free(&g->entry_index);
    free(g);
}

/* Counts and lookups by pointer read no header: they answer after the
 * contexts are freed too. What hands out a header checks them. */
int gml_graph_n_nodes(const gml_graph *g) {
    GML_NONNULL(g, 0);
    return g->n_nodes;
}
int gml_graph_n_leafs(const gml_graph *g) {
    GML_NONNULL(g, 0);
    return g->n_leafs;
}

gml_tensor *gml_graph_node(const gml_graph *g, int i) {
    GML_NONNULL(g, NULL);
    if (!alive_or_fail(g, __func__)) return NULL;
    if (i < 0) i += g->n_nodes;
    return i >= 0 && i < g->n_nodes ? g->nodes[i] : NULL;
}

gml_tensor *gml_graph_leaf(const gml_graph *g, int i) {
    GML_NONNULL(g, NULL);
    if (!alive_or_fail(g, __func__)) return NULL;
    if (i < 0) i += g->n_leafs;
    return i >= 0 && i < g->n_leafs ? g->leafs[i] : NULL;
}

int gml_graph_use_count(const gml_graph *g, const gml_tensor *t) {
    GML_NONNULL(g, 0);
    GML_NONNULL(t, 0);
    int idx = lookup(g, t);
    return idx < 0 ? 0 : g->entries[idx].uses;
}

int gml_graph_find(const gml_graph *g, const gml_tensor *t) {
    GML_NONNULL(g, -1);
    GML_NONNULL(t, -1);
    int idx = lookup(g, t);
    return idx < 0 || g->entries[idx].pos < 0 ? -1 : g->entries[idx].pos;
}

int gml_graph_n_tensors(const gml_graph *g) {
    GML_NONNULL(g, 0);
    return g->n_entries;
}

gml_tensor *gml_graph_tensor_at(const gml_graph *g, int i) {
    GML_NONNULL(g, NULL);
    if (!alive_or_fail(g, __func__)) return NULL;
    return i >= 0 && i < g->n_entries ? g->entries[i].t : NULL;
}

int gml_graph_tensor_index(const gml_graph *g, const gml_tensor *t) {
    GML_NONNULL(g, -1);
    GML_NONNULL(t, -1);
    return lookup(g, t);
}

/* ---- one compute of a graph at a time ------------------------------------- */

/* The graphs whose lock this thread holds, innermost first, linked through
 * their held_up: a node callback that computes or plans a graph does so
 * inside its caller's compute. */
static _Thread_local const gml_graph *held;

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
    if (!held) {
        pthread_mutex_lock(&g->mu); /* takes turns; this thread holds no graph */
    } else if (pthread_mutex_trylock(&g->mu) != 0) {
        /* Inside a compute (a node callback): waiting could deadlock, on this
         * very graph or on the pool this thread holds. */
        bool mine = false;
        for (const gml_graph *h = held; h && !mine; h = h->held_up) mine = h == g;
        snprintf(refused.msg, sizeof refused.msg, "%s: %s", what,
                 mine ? "the graph is being computed by this thread already (a node callback "
                        "cannot compute or plan its own graph)"
                      : "graph is being computed by another thread (a node callback cannot "
                        "wait for it)");
        refused.id = g->id;
        return GML_ERR_INVALID;
    }
    g->held_up = held;
    held = g;
    if (refused.id == g->id) refused.id = 0;
    return GML_OK;
}

void gml_graph_unlock(gml_graph *g) {
    /* A compute of g refused on this thread (a node callback computing its
     * own graph) was inside this one: its message is done with, and g->err
     * says how this compute ended. */
    if (refused.id == g->id) refused.id = 0;
    held = g->held_up;
    pthread_mutex_unlock(&g->mu);
}

const char *gml_graph_error(const gml_graph *g) {
    if (!g) return gml_last_error(NULL);
    return refused.id == g->id ? refused.msg : g->err;
}

gml_status gml_graph_fail(gml_graph *g, gml_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->err, sizeof g->err, fmt, ap);
    va_end(ap);
    return st;
}

/* ---- binding ------------------------------------------------------------- */

/* A root's data: its header's, else its place in the plan. */
static void *root_data(const gml_graph *g, int e) {
    const gml_tensor *t = g->entries[e].t;
    if (t->data) return t->data;
    if (g->plan_offs && g->plan_offs[e] != GML_UNPLACED) return g->plan_base + g->plan_offs[e];
    return NULL;
}

void *gml_entry_data(const gml_graph *g, int e) {
    const gml_tensor *t = g->entries[e].t;
    if (!t->view_src) return root_data(g, e);
    const int r = gml_graph_entry(g, t->view_src);
    char *base = r >= 0 ? root_data(g, r) : t->view_src->data;
    return base ? base + t->view_offs : t->data;
}

void gml_graph_bind(gml_graph *g) {
    bool changed = false;
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
        if (g->entries[e].output) c.flags |= GML_FLAG_OUTPUT;
        /* No write when nothing changed: readers of a result (gml_graph_tensor)
         * never see a store they did not expect. */
        if (memcmp(&g->bound[e], &c, sizeof c) != 0) {
            memcpy(&g->bound[e], &c, sizeof c);
            changed = true;
        }
    }
    if (changed) g->binds++; /* data or strides moved: the steps are planned again */
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
    free(g->chunks);
    g->chunks = NULL;
    free(g->touch);
    g->touch = NULL;
    g->prepared = false;
    free(g->neg_inf_ok);
    g->neg_inf_ok = NULL;
    for (int i = 0; g->kept && i < g->n_nodes; i++) free(g->kept[i].data);
    free(g->kept);
    g->kept = NULL;
    g->n_steps = 0;
}

void gml_graph_release_plan(gml_graph *g) {
    gml_free_arena(g->plan_buffer, g->plan_mapped);
    g->plan_buffer = NULL;
    g->plan_mapped = 0;
    g->plan_base = NULL;
    free(g->plan_offs);
    g->plan_offs = NULL;
    g->plan_peak = g->plan_naive = 0;
}

/* ---- printing ------------------------------------------------------------ */

static void format_strides(const gml_tensor *t, char *buf, size_t size) {
    size_t k = (size_t)snprintf(buf, size, "[");
    for (int i = GML_MAX_DIMS - t->n_dims; i < GML_MAX_DIMS && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%zu", i > GML_MAX_DIMS - t->n_dims ? "," : "",
                              t->nb[i] / gml_type_size(t->type));
    if (k < size) snprintf(buf + k, size - k, "]");
}

#define CALL_MAX 1024 /* room for any call but huge lists of huge names: cut then */

static void print_row(FILE *f, const char *kind, int i, const gml_tensor *t, int uses) {
    char shape[GML_SHAPE_MAX], strides[GML_SHAPE_MAX * 2], call[CALL_MAX];
    gml_format_shape(t, shape, sizeof shape);
    format_strides(t, strides, sizeof strides);
    gml_format_node(t, NULL, NULL, call, sizeof call);
    fprintf(f, "%-4s %4d  %-28.28s %-17s %-18s %-22s %4d  %s\n", kind, i, t->name,
            gml_op_name(t->op), shape, strides, uses, call);
}

void gml_graph_print(const gml_graph *g, FILE *f) {
    GML_NONNULL(g, );
    GML_NONNULL(f, );
    if (!alive_or_fail(g, __func__)) return;
    fprintf(f, "graph: %d nodes, %d leafs (strides in elements)\n", g->n_nodes, g->n_leafs);
    fprintf(f, "%-4s %4s  %-28s %-17s %-18s %-22s %4s  %s\n", "", "#", "name", "op", "shape",
            "strides", "uses", "call");
    for (int i = 0; i < g->n_leafs; i++)
        print_row(f, "leaf", i, g->leafs[i], gml_graph_use_count(g, g->leafs[i]));
    for (int i = 0; i < g->n_nodes; i++)
        print_row(f, "node", i, g->nodes[i], gml_graph_use_count(g, g->nodes[i]));
}

/* DOT label text: escape quotes and backslashes. */
static void dot_escape(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
}

gml_status gml_graph_dump_dot(const gml_graph *g, const char *path) {
    GML_NONNULL(g, GML_ERR_INVALID);
    GML_NONNULL(path, GML_ERR_INVALID);
    if (!alive_or_fail(g, __func__)) return GML_ERR_INVALID;
    FILE *f = fopen(path, "w");
    if (!f) return GML_ERR_IO;
    fprintf(f, "digraph ggmlite {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n");
    for (int i = 0; i < g->n_entries; i++) {
        const gml_tensor *t = g->entries[i].t;
        char shape[GML_SHAPE_MAX];
        gml_format_shape(t, shape, sizeof shape);
        const char *style = t->op == GML_OP_NONE ? "shape=box, style=filled, fillcolor=\"#dde8f5\""
                            : gml_op_get(t->op)->flags & GML_OPF_NOOP
                                ? "shape=ellipse, style=dashed"
                                : "shape=ellipse, style=filled, fillcolor=\"#f5e6c8\"";
        char call[CALL_MAX];
        fprintf(f, "  t%d [%s, label=\"", i, style);
        dot_escape(f, t->name);
        if (gml_format_node(t, NULL, NULL, call, sizeof call) >= 0) {
            fputs("\\n", f);
            dot_escape(f, call);
        }
        fprintf(f, "\\n%s %s\"];\n", shape, gml_type_name(t->type));
    }
    for (int i = 0; i < g->n_entries; i++) {
        const gml_tensor *t = g->entries[i].t;
        for (int s = 0; s < GML_MAX_SRC; s++)
            if (t->src[s]) fprintf(f, "  t%d -> t%d [label=\"%d\"];\n", lookup(g, t->src[s]), i, s);
    }
    fprintf(f, "}\n");
    return fclose(f) == 0 ? GML_OK : GML_ERR_IO;
}

/* ---- digest ------------------------------------------------------------ */

/* A source is named by its position: node i as i, leaf i as -1 - i. */
static int64_t position(const gml_graph *g, const gml_tensor *t) {
    return g->entries[lookup(g, t)].pos;
}

static void hash_tensor(XXH3_state_t *st, const gml_graph *g, const gml_tensor *t) {
    struct {
        int32_t op, type, n_dims, flags_unused;
        int64_t ne[GML_MAX_DIMS];
        uint64_t nb[GML_MAX_DIMS];
        int32_t params[GML_MAX_OP_PARAMS];
        uint64_t view_offs;
        int64_t src[GML_MAX_SRC];
    } rec;
    memset(&rec, 0, sizeof rec);
    rec.op = (int32_t)t->op;
    rec.type = (int32_t)t->type;
    rec.n_dims = t->n_dims;
    for (int i = 0; i < GML_MAX_DIMS; i++) {
        rec.ne[i] = t->ne[i];
        rec.nb[i] = t->nb[i];
    }
    memcpy(rec.params, t->op_params, sizeof rec.params);
    rec.view_offs = t->view_offs;
    for (int s = 0; s < GML_MAX_SRC; s++)
        rec.src[s] = t->src[s] ? position(g, t->src[s]) : INT64_MAX;
    XXH3_64bits_update(st, &rec, sizeof rec);
}

uint64_t gml_graph_digest(const gml_graph *g) {
    GML_NONNULL(g, 0);
    if (!alive_or_fail(g, __func__)) return 0;
    XXH3_state_t *st = XXH3_createState();
    if (!st) return 0;
    XXH3_64bits_reset(st);
    int32_t counts[2] = {g->n_leafs, g->n_nodes};
    XXH3_64bits_update(st, counts, sizeof counts);
    for (int i = 0; i < g->n_leafs; i++) hash_tensor(st, g, g->leafs[i]);
    for (int i = 0; i < g->n_nodes; i++) hash_tensor(st, g, g->nodes[i]);
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

double gml_graph_flops(const gml_graph *g) {
    GML_NONNULL(g, 0);
    if (!alive_or_fail(g, __func__)) return 0;
    double total = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const gml_op_def *def = gml_op_get(g->nodes[i]->op);
        if (def->flops) total += def->flops(g->nodes[i]);
    }
    return total;
}
