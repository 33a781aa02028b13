/* Reverse mode: gml_grad builds the gradients of a set of tensors as graph
 * nodes, calling each op's backward (its gml_op_def's, in the op's file) on
 * the nodes between them and the output, last node first. */
#include "internal.h"

#include <ggmlite/hashindex.h>

#include <stdio.h>
#include <stdlib.h>

struct gml_backward_ctx {
    gml_context *ctx;
    gml_tensor **topo;  /* every tensor out depends on, sources before their consumers */
    int n;
    gml_hashindex ix;   /* tensor -> its place in topo */
    bool *needs;        /* [n]: needs a gradient */
    gml_tensor **grad;  /* [n]: the sum of the contributions so far, or NULL */
    const gml_tensor *node; /* the node whose backward runs */
    /* Recomputation (GML_FLAG_RECOMPUTE): the backwards read stand-ins. */
    bool any_marked;
    gml_tensor **copy;  /* [n]: topo[i] recomputed, or NULL */
    gml_tensor **entry; /* [n]: after(topo[i], entry_dep[i]), a copy's input, or NULL */
    gml_tensor **entry_dep;
    gml_hashindex alias_ix; /* a stand-in -> its place in alias[] */
    gml_tensor **alias;     /* the stand-ins, each for topo[alias_of[k]] */
    int *alias_of, n_alias, alias_cap;
};

static bool same_ptr(const void *user, int val, const void *key) {
    return ((gml_tensor *const *)user)[val] == key;
}

/* t's place in topo, or that of the tensor t stands in for (a recomputed
 * copy, an after-view of a copy's input), or -1. */
static int find(const gml_backward_ctx *b, const gml_tensor *t) {
    const int i = gml_hashindex_find(&b->ix, gml_hash_ptr(t), same_ptr, b->topo, t);
    if (i >= 0 || !b->n_alias) return i;
    const int k = gml_hashindex_find(&b->alias_ix, gml_hash_ptr(t), same_ptr, b->alias, t);
    return k >= 0 ? b->alias_of[k] : -1;
}

static bool is_float(gml_type t) { return t == GML_F32 || t == GML_F16 || t == GML_BF16; }

gml_context *gml_backward_context(const gml_backward_ctx *b) { return b->ctx; }

bool gml_backward_needs(const gml_backward_ctx *b, const gml_tensor *t) {
    const int i = t ? find(b, t) : -1;
    return i >= 0 && b->needs[i];
}

bool gml_backward_fail(gml_backward_ctx *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    gml_set_error_v(b->ctx, fmt, ap);
    va_end(ap);
    return false;
}

/* sum + g, both of sum's shape. When sum is a permutation of a contiguous
 * tensor r (the gradient of a weight used through a transpose, as linear
 * does), the sum is taken in r's layout, permute(add(r, g permuted back)),
 * so that the planner can write it over r when r dies there (an add writes
 * in place only over a contiguous left source). The same pairs are added,
 * sum's element on the left: the same bits either way. */
static gml_tensor *accumulate(gml_context *ctx, gml_tensor *sum, gml_tensor *g) {
    gml_tensor *r = sum->src[0];
    const int n = sum->n_dims, o = GML_MAX_DIMS - n;
    if (gml_is_contiguous(sum) || !sum->view_src || !r || r->n_dims != n ||
        !gml_is_contiguous(r) || r->type != sum->type || sum->view_offs != r->view_offs ||
        (r->view_src ? r->view_src : r) != sum->view_src)
        return gml_add(ctx, sum, g);
    /* perm[i]: the dim of r that sum's dim i walks (sizes equal, strides
     * equal unless the size is 1), each dim of r once */
    int perm[GML_MAX_DIMS], inv[GML_MAX_DIMS];
    bool used[GML_MAX_DIMS] = {false};
    for (int i = 0; i < n; i++) {
        perm[i] = -1;
        for (int k = 0; k < n && perm[i] < 0; k++)
            if (!used[k] && sum->ne[o + i] == r->ne[o + k] &&
                (sum->ne[o + i] == 1 || sum->nb[o + i] == r->nb[o + k]))
                perm[i] = k;
        if (perm[i] < 0) return gml_add(ctx, sum, g);
        used[perm[i]] = true;
        inv[perm[i]] = i;
    }
    gml_tensor *s = gml_add(ctx, r, gml_permute(ctx, g, inv)); /* [r's shape] */
    return s ? gml_permute(ctx, s, perm) : NULL;
}

bool gml_backward_add(gml_backward_ctx *b, gml_tensor *src, gml_tensor *g) {
    if (!g) return false;
    const int i = find(b, src);
    if (i < 0 || !b->needs[i]) return true;
    char ss[GML_SHAPE_MAX], sg[GML_SHAPE_MAX];
    if (g->type != GML_F32)
        return gml_backward_fail(b, "the gradient for '%s' %s is %s %s, not f32", src->name,
                                 GML_SHAPE(src, ss), gml_type_name(g->type), GML_SHAPE(g, sg));
    if (!gml_same_shape(src, g)) {
        if (src->n_dims > g->n_dims || !gml_broadcasts_to(src, g))
            return gml_backward_fail(b, "the gradient for '%s' %s has shape %s, which '%s' does "
                                     "not broadcast to", src->name, GML_SHAPE(src, ss),
                                     GML_SHAPE(g, sg), src->name);
        g = gml_sum_to(b->ctx, g, src->n_dims, src->ne + GML_MAX_DIMS - src->n_dims);
        if (!g) return false;
    }
    b->grad[i] = b->grad[i] ? accumulate(b->ctx, b->grad[i], g) : g;
    return b->grad[i] != NULL;
}

/* Every tensor out depends on through src[], each once, in post-order (a
 * tensor after all its sources) of a DFS that takes the sources left to
 * right: the order gradients are summed in follows from it. */
static gml_status collect(gml_backward_ctx *b, gml_tensor *out) {
    int cap = 64, depth = 0, stack_cap = 64;
    b->topo = malloc((size_t)cap * sizeof *b->topo);
    struct frame {
        gml_tensor *t;
        int next;
    } *stack = malloc((size_t)stack_cap * sizeof *stack);
    gml_hashindex seen = {0}; /* values: 0 (visited), in a table of its own */
    gml_tensor **seen_keys = malloc((size_t)cap * sizeof *seen_keys);
    int n_seen = 0, seen_cap = cap;
    gml_status st = GML_OK;
    if (!b->topo || !stack || !seen_keys) {
        st = GML_ERR_NOMEM;
        goto done;
    }
#define PUSH_SEEN(t)                                                                       \
    do {                                                                                   \
        if (n_seen == seen_cap) {                                                          \
            gml_tensor **k = realloc(seen_keys, (size_t)(seen_cap *= 2) * sizeof *k);      \
            if (!k) { st = GML_ERR_NOMEM; goto done; }                                     \
            seen_keys = k;                                                                 \
        }                                                                                  \
        seen_keys[n_seen] = (t);                                                           \
        if (!gml_hashindex_add(&seen, gml_hash_ptr(t), n_seen)) { st = GML_ERR_NOMEM; goto done; } \
        n_seen++;                                                                          \
    } while (0)
    PUSH_SEEN(out);
    stack[depth++] = (struct frame){out, 0};
    while (depth > 0) {
        struct frame *f = &stack[depth - 1];
        gml_tensor *next = NULL;
        while (f->next < GML_MAX_SRC && !next) {
            gml_tensor *s = f->t->src[f->next++];
            if (s && gml_hashindex_find(&seen, gml_hash_ptr(s), same_ptr, seen_keys, s) < 0)
                next = s;
        }
        if (next) {
            PUSH_SEEN(next);
            if (depth == stack_cap) {
                void *p = realloc(stack, (size_t)(stack_cap *= 2) * sizeof *stack);
                if (!p) { st = GML_ERR_NOMEM; goto done; }
                stack = p;
            }
            stack[depth++] = (struct frame){next, 0};
            continue;
        }
        if (b->n == cap) {
            gml_tensor **p = realloc(b->topo, (size_t)(cap *= 2) * sizeof *p);
            if (!p) { st = GML_ERR_NOMEM; goto done; }
            b->topo = p;
        }
        b->topo[b->n] = f->t;
        if (!gml_hashindex_add(&b->ix, gml_hash_ptr(f->t), b->n)) { st = GML_ERR_NOMEM; goto done; }
        b->n++;
        depth--;
    }
#undef PUSH_SEEN
done:
    free(stack);
    free(seen_keys);
    gml_hashindex_free(&seen);
    return st;
}

/* "no backward for op ..." naming the first wrt (in the caller's order) that
 * a source of node needing a gradient leads to. */
static gml_status refuse(gml_backward_ctx *b, const gml_tensor *node, gml_tensor *const *wrt,
                         int n_wrt) {
    const char *want = wrt[0]->name;
    bool *below = calloc((size_t)b->n, sizeof *below); /* reached from node's sources */
    if (below) {
        const int at = find(b, node);
        for (int s = 0; s < GML_MAX_SRC; s++)
            if (node->src[s] && gml_backward_needs(b, node->src[s]))
                below[find(b, node->src[s])] = true;
        for (int i = at - 1; i >= 0; i--) /* sources sit before their consumers */
            for (int s = 0; below[i] && s < GML_MAX_SRC; s++)
                if (b->topo[i]->src[s]) below[find(b, b->topo[i]->src[s])] = true;
        for (int w = 0; w < n_wrt; w++)
            if (below[find(b, wrt[w])]) {
                want = wrt[w]->name;
                break;
            }
        free(below);
    }
    gml_set_error(b->ctx, "grad: no backward for op '%s' (node '%s'), needed for the gradient of "
                  "'%s'", gml_op_name(node->op), node->name, want);
    return GML_ERR_INVALID;
}

/* ---- recomputation --------------------------------------------------------
 * A node marked GML_FLAG_RECOMPUTE (a view: its storage's owner marked) is
 * not read by the backwards: each backward that would read it reads a copy,
 * the same op on the same arguments (gml_form_get_args, gml_form_build, as a
 * graph file rebuilds a node), whose marked sources are copies in turn. A
 * copy's unmarked inputs are read through after(input, dy), dy the gradient
 * whose backward first asked for the copy, so that the graph computes the
 * copies once that gradient is there, in the backward, and not in the
 * forward: the marked originals then die in the forward. A copy computes
 * its original's bits (the same kernels on the same values). */

static bool recomputed(const gml_tensor *t) {
    const gml_tensor *r = t->view_src ? t->view_src : t;
    return t->op != GML_OP_NONE && r->op != GML_OP_NONE && (r->flags & GML_FLAG_RECOMPUTE);
}

/* Records s as a stand-in for topo[i]. */
static bool add_alias(gml_backward_ctx *b, gml_tensor *s, int i) {
    if (b->n_alias == b->alias_cap) {
        const int cap = b->alias_cap ? 2 * b->alias_cap : 64;
        gml_tensor **a = realloc(b->alias, (size_t)cap * sizeof *a);
        if (a) b->alias = a;
        int *o = a ? realloc(b->alias_of, (size_t)cap * sizeof *o) : NULL;
        if (o) b->alias_of = o;
        if (!a || !o) return false;
        b->alias_cap = cap;
    }
    if (!gml_hashindex_add(&b->alias_ix, gml_hash_ptr(s), b->n_alias)) return false;
    b->alias[b->n_alias] = s;
    b->alias_of[b->n_alias++] = i;
    return true;
}

/* Whether t's first tensor argument that is computed (not a leaf's storage)
 * and not q8_0 (after takes no view of a q8_0 view) is argument k; else the
 * first one that is not q8_0. The argument through which a copy of t waits. */
static int wait_arg(const gml_op_form *f, const gml_arg *args) {
    int first = -1;
    for (int k = 0; k < gml_form_n_args(f); k++) {
        const gml_arg_kind kind = gml_form_arg(f, k)->kind;
        const gml_tensor *a = args[k].t;
        if ((kind != GML_ARG_TENSOR && kind != GML_ARG_OPT_TENSOR) || !a || a->type == GML_Q8_0)
            continue;
        if ((a->view_src ? a->view_src : a)->op != GML_OP_NONE) return k;
        if (first < 0) first = k;
    }
    return first;
}

/* t rebuilt from args, checked to be t's op and shape; NULL with a message. */
static gml_tensor *rebuild(gml_backward_ctx *b, const gml_tensor *t, const gml_op_form *f,
                           const gml_arg *args, const char *what) {
    gml_tensor *c = gml_form_build(b->ctx, f, args);
    if (c && (c->op != t->op || c->type != t->type || !gml_same_shape(c, t))) {
        char st[GML_SHAPE_MAX], sc[GML_SHAPE_MAX];
        gml_set_error(b->ctx, "grad: the %s of node '%s' (%s %s) is %s %s", what, t->name,
                      gml_op_name(t->op), GML_SHAPE(t, st), gml_op_name(c->op), GML_SHAPE(c, sc));
        return NULL;
    }
    if (c) snprintf(c->name, sizeof c->name, "%.*s (%s)", GML_MAX_NAME - 16, t->name, what);
    return c;
}

/* The copy of topo[i] (marked), made with the copies of the marked nodes
 * it is computed from (a stack, not recursion: a marked region may be deep),
 * its other inputs waiting for dy. */
static gml_tensor *recompute(gml_backward_ctx *b, int i, gml_tensor *dy) {
    if (b->copy[i]) return b->copy[i];
    int *stack = malloc((size_t)b->n * sizeof *stack), depth = 0;
    if (!stack) {
        gml_set_error(b->ctx, "grad(%s): out of memory", b->topo[b->n - 1]->name);
        return NULL;
    }
    stack[depth++] = i;
    while (depth > 0) {
        const int u = stack[depth - 1];
        const gml_tensor *t = b->topo[u];
        const gml_op_form *f = gml_form_of_op(t->op);
        gml_arg args[GML_MAX_ARGS];
        if (!f || !gml_form_get_args(t, args)) {
            gml_set_error(b->ctx, "grad: node '%s' (%s) cannot be recomputed: its op has no "
                          "call form", t->name, gml_op_name(t->op));
            break;
        }
        bool ready = true, waits = false; /* waits: on a copy (else on dy, below) */
        for (int k = 0; k < gml_form_n_args(f); k++) {
            const gml_tensor *a = args[k].t;
            const gml_arg_kind kind = gml_form_arg(f, k)->kind;
            if ((kind != GML_ARG_TENSOR && kind != GML_ARG_OPT_TENSOR) || !a || !recomputed(a))
                continue;
            const int j = find(b, a);
            if (j < 0 || j >= u) continue; /* not a source of t's (cannot be) */
            if (b->copy[j]) {
                args[k].t = b->copy[j];
                waits = true;
            } else {
                stack[depth++] = j; /* sources sit before their consumers: depth < n */
                ready = false;
                break;
            }
        }
        if (!ready) continue;
        const int w = waits ? -1 : wait_arg(f, args);
        if (w >= 0) {
            const int j = find(b, args[w].t);
            if (j >= 0 && b->entry[j] && b->entry_dep[j] == dy) {
                args[w].t = b->entry[j];
            } else {
                gml_tensor *e = gml_after(b->ctx, args[w].t, dy);
                if (!e) break;
                if (j >= 0 && !add_alias(b, e, j)) {
                    gml_set_error(b->ctx, "grad: out of memory");
                    break;
                }
                if (j >= 0) b->entry[j] = e, b->entry_dep[j] = dy;
                args[w].t = e;
            }
        }
        gml_tensor *c = rebuild(b, t, f, args, "recomputed");
        if (c && !add_alias(b, c, u)) gml_set_error(b->ctx, "grad: out of memory"), c = NULL;
        if (!c) break;
        b->copy[u] = c;
        depth--;
    }
    free(stack);
    return b->copy[i];
}

/* The node t = topo[i]'s backward is given in t's place: t, unless t or a
 * source of it is recomputed: then t's copy (t marked), or t rebuilt on its
 * sources' copies (read only for its sources, unless its backward reads its
 * value: then it is computed again from them). NULL with a message. */
static gml_tensor *stand_in(gml_backward_ctx *b, int i, gml_tensor *dy) {
    gml_tensor *t = b->topo[i];
    if (recomputed(t)) return recompute(b, i, dy);
    bool any = false;
    for (int s = 0; s < GML_MAX_SRC; s++) any |= t->src[s] && recomputed(t->src[s]);
    if (!any) return t;
    const gml_op_form *f = gml_form_of_op(t->op);
    gml_arg args[GML_MAX_ARGS];
    if (!f || !gml_form_get_args(t, args)) {
        gml_set_error(b->ctx, "grad: node '%s' (%s) reads recomputed tensors but its op has no "
                      "call form to rebuild it with", t->name, gml_op_name(t->op));
        return NULL;
    }
    for (int k = 0; k < gml_form_n_args(f); k++) {
        const gml_arg_kind kind = gml_form_arg(f, k)->kind;
        const int j = (kind == GML_ARG_TENSOR || kind == GML_ARG_OPT_TENSOR) && args[k].t &&
                              recomputed(args[k].t)
                          ? find(b, args[k].t)
                          : -1;
        if (j >= 0 && !(args[k].t = recompute(b, j, dy))) return NULL;
    }
    gml_tensor *c = rebuild(b, t, f, args, "on recomputed sources");
    if (c && !add_alias(b, c, i)) gml_set_error(b->ctx, "grad: out of memory"), c = NULL;
    return c;
}

/* The contributions one node's backward made (before[s]: src[s]'s sum
 * before it) are computed together: each one to a source computed from
 * others (an activation, whose gradient flows on) is read through
 * after(it, c) for each contribution c to a source that is a leaf's storage
 * (a weight, directly or through a view: its gradient flows no further).
 * The graph's depth-first order then makes a layer's weight gradients as
 * the gradient passes the layer, whatever order the caller lists the
 * gradients in, and the activations they read die there, not after every
 * layer's input gradient. Views: no value changes. */
static bool together(gml_backward_ctx *b, const gml_tensor *t, gml_tensor **before) {
    gml_tensor *dep[GML_MAX_SRC];
    int n_dep = 0;
    for (int s = 0; s < GML_MAX_SRC; s++) {
        const int k = t->src[s] ? find(b, t->src[s]) : -1;
        const gml_tensor *r = k >= 0 ? (t->src[s]->view_src ? t->src[s]->view_src : t->src[s]) : NULL;
        if (r && r->op == GML_OP_NONE && b->grad[k] && b->grad[k] != before[s]) dep[n_dep++] = b->grad[k];
    }
    for (int s = 0; s < GML_MAX_SRC && n_dep > 0; s++) {
        const int k = t->src[s] ? find(b, t->src[s]) : -1;
        const gml_tensor *r = k >= 0 ? (t->src[s]->view_src ? t->src[s]->view_src : t->src[s]) : NULL;
        if (!r || r->op == GML_OP_NONE || !b->grad[k] || b->grad[k] == before[s]) continue;
        for (int d = 0; d < n_dep && b->grad[k]; d++) b->grad[k] = gml_after(b->ctx, b->grad[k], dep[d]);
        if (!b->grad[k]) return false;
        for (int u = s + 1; u < GML_MAX_SRC; u++) /* a source given twice: done */
            if (t->src[u] && find(b, t->src[u]) == k) before[u] = b->grad[k];
    }
    return true;
}

/* Whether u, a tensor a backward made (id >= first_id in b's context) or
 * one it reads, is computed from a gradient: a forward tensor (in topo, or
 * a copy standing in for one) is not, a tensor made before this backward
 * (a gradient) is. The new nodes that are not, say flash_attn's forward
 * recomputed as flash_attn_lse from q, k, v, would be placed by the graph's
 * depth-first walk as soon as their sources are there, in the forward, and
 * live until the backward reads them: each reads its first computed source
 * (else its first) through after(source, dy), so that it is made in the
 * backward. seen: the new tensors met, with their answer in from[]. */
static int from_gradient(gml_backward_ctx *b, gml_tensor *u, int first_id, gml_tensor *dy,
                         gml_tensor **seen, bool *from, int *n_seen, int cap) {
    if (find(b, u) >= 0) return 0;
    if (u->id < first_id) return 1;
    for (int k = 0; k < *n_seen; k++)
        if (seen[k] == u) return from[k];
    bool any = false;
    for (int s = 0; s < GML_MAX_SRC; s++) {
        if (!u->src[s]) continue;
        const int r = from_gradient(b, u->src[s], first_id, dy, seen, from, n_seen, cap);
        if (r < 0) return r;
        any |= r;
    }
    if (!any && !u->view_src && u->op != GML_OP_NONE) {
        int w = -1;
        for (int s = 0; s < GML_MAX_SRC; s++) {
            const gml_tensor *a = u->src[s];
            if (!a || a->type == GML_Q8_0) continue;
            if (w < 0 || ((a->view_src ? a->view_src : a)->op != GML_OP_NONE &&
                          (u->src[w]->view_src ? u->src[w]->view_src : u->src[w])->op == GML_OP_NONE))
                w = s;
        }
        if (w >= 0) {
            gml_tensor *e = gml_after(b->ctx, u->src[w], dy);
            if (!e) return -1;
            u->src[w] = e;
            any = true;
        }
    }
    if (*n_seen < cap) {
        seen[*n_seen] = u;
        from[(*n_seen)++] = any;
    }
    return any;
}

/* from_gradient over the contributions node t's backward made. */
static bool wait_for_dy(gml_backward_ctx *b, const gml_tensor *t, gml_tensor *const *before,
                        int first_id, gml_tensor *dy) {
    enum { CAP = 256 };
    gml_tensor *seen[CAP];
    bool from[CAP];
    int n_seen = 0;
    for (int s = 0; s < GML_MAX_SRC; s++) {
        const int k = t->src[s] ? find(b, t->src[s]) : -1;
        if (k >= 0 && b->grad[k] && b->grad[k] != before[s] &&
            from_gradient(b, b->grad[k], first_id, dy, seen, from, &n_seen, CAP) < 0)
            return false;
    }
    return true;
}

static gml_status run(gml_backward_ctx *b, gml_tensor *out, gml_tensor *dout,
                      gml_tensor *const *wrt, int n_wrt, gml_tensor **grads) {
    gml_context *ctx = b->ctx;
    char s1[GML_SHAPE_MAX], s2[GML_SHAPE_MAX];
    for (int w = 0; w < n_wrt; w++) {
        if (!wrt[w]) {
            gml_set_error(ctx, "grad(%s): wrt[%d] is NULL", out->name, w);
            return GML_ERR_INVALID;
        }
        if (!is_float(wrt[w]->type)) {
            gml_set_error(ctx, "grad(%s): '%s' is %s %s; gradients are taken with respect to "
                          "f32, f16 or bf16 tensors", out->name, wrt[w]->name,
                          gml_type_name(wrt[w]->type), GML_SHAPE(wrt[w], s1));
            return GML_ERR_INVALID;
        }
    }
    if (out->type != GML_F32) {
        gml_set_error(ctx, "grad(%s): the output is %s %s; it must be f32", out->name,
                      gml_type_name(out->type), GML_SHAPE(out, s1));
        return GML_ERR_INVALID;
    }
    if (dout && (dout->type != GML_F32 || !gml_same_shape(dout, out))) {
        gml_set_error(ctx, "grad(%s, %s): the output's gradient is %s %s, the output %s; they "
                      "must have one shape, f32", out->name, dout->name,
                      gml_type_name(dout->type), GML_SHAPE(dout, s1), GML_SHAPE(out, s2));
        return GML_ERR_INVALID;
    }
    if (!dout && gml_nelements(out) != 1) {
        gml_set_error(ctx, "grad(%s): the output %s has %" PRId64 " elements; without its "
                      "gradient (dout) it must be a loss of one element", out->name,
                      GML_SHAPE(out, s1), gml_nelements(out));
        return GML_ERR_INVALID;
    }
    gml_status st = collect(b, out);
    if (st != GML_OK) return st;
    b->needs = calloc((size_t)b->n, sizeof *b->needs);
    b->grad = calloc((size_t)b->n, sizeof *b->grad);
    if (!b->needs || !b->grad) return GML_ERR_NOMEM;
    for (int w = 0; w < n_wrt; w++) {
        const int i = find(b, wrt[w]);
        if (i < 0) {
            gml_set_error(ctx, "grad(%s): '%s' %s is not among the tensors '%s' is computed from",
                          out->name, wrt[w]->name, GML_SHAPE(wrt[w], s1), out->name);
            return GML_ERR_INVALID;
        }
        b->needs[i] = true;
    }
    for (int i = 0; i < b->n; i++) { /* sources come first */
        const gml_tensor *t = b->topo[i];
        if (b->needs[i] || !is_float(t->type)) continue;
        for (int s = 0; s < GML_MAX_SRC && !b->needs[i]; s++)
            b->needs[i] = t->src[s] && b->needs[find(b, t->src[s])];
    }
    for (int i = 0; i < b->n && !b->any_marked; i++) b->any_marked = recomputed(b->topo[i]);
    if (b->any_marked) {
        b->copy = calloc((size_t)b->n, sizeof *b->copy);
        b->entry = calloc((size_t)b->n, sizeof *b->entry);
        b->entry_dep = calloc((size_t)b->n, sizeof *b->entry_dep);
        if (!b->copy || !b->entry || !b->entry_dep) return GML_ERR_NOMEM;
    }
    b->grad[b->n - 1] =
        dout ? dout : gml_full(ctx, out->n_dims, out->ne + GML_MAX_DIMS - out->n_dims, 1.0f);
    if (!b->grad[b->n - 1]) return GML_ERR_INVALID;
    for (int i = b->n - 1; i >= 0; i--) {
        gml_tensor *t = b->topo[i];
        if (!b->needs[i] || !b->grad[i] || t->op == GML_OP_NONE) continue;
        bool any = false;
        for (int s = 0; s < GML_MAX_SRC; s++) any |= t->src[s] && gml_backward_needs(b, t->src[s]);
        if (!any) continue; /* a wrt whose own sources need nothing */
        const gml_op_def *def = gml_op_get(t->op);
        if (!def->backward) return refuse(b, t, wrt, n_wrt);
        b->node = t;
        gml_tensor *node = b->any_marked ? stand_in(b, i, b->grad[i]) : t;
        gml_tensor *before[GML_MAX_SRC];
        for (int s = 0; s < GML_MAX_SRC; s++)
            before[s] = t->src[s] && find(b, t->src[s]) >= 0 ? b->grad[find(b, t->src[s])] : NULL;
        const int first_id = ctx->n_tensors;
        if (!node || !def->backward(b, node, b->grad[i]) ||
            !wait_for_dy(b, t, before, first_id, b->grad[i]) || !together(b, t, before)) {
            char msg[GML_ERR_MAX];
            snprintf(msg, sizeof msg, "%s", gml_last_error(ctx));
            gml_set_error(ctx, "grad: backward of %s (node '%s'): %s", gml_op_name(t->op),
                          t->name, msg[0] ? msg : "failed");
            return GML_ERR_INVALID;
        }
    }
    /* grads is written only on success: the results go to grad[] first */
    for (int w = 0; w < n_wrt; w++) {
        const int i = find(b, wrt[w]);
        gml_tensor *g = b->grad[i];
        if (!g) /* only overwritten values lead from it to out */
            g = gml_full(ctx, wrt[w]->n_dims, wrt[w]->ne + GML_MAX_DIMS - wrt[w]->n_dims, 0.0f);
        else if (!gml_is_contiguous(g))
            g = gml_cont(ctx, g);
        if (!g) return GML_ERR_INVALID;
        b->grad[i] = g; /* a wrt given twice: the same tensor */
    }
    for (int w = 0; w < n_wrt; w++) grads[w] = b->grad[find(b, wrt[w])];
    return GML_OK;
}

gml_status gml_grad(gml_context *ctx, gml_tensor *out, gml_tensor *dout, gml_tensor *const *wrt,
                    int n_wrt, gml_tensor **grads) {
    if (!ctx) return GML_ERR_INVALID;
    if (!out || !wrt || !grads || n_wrt < 1) {
        gml_set_error(ctx, "grad: %s", !out ? "the output is NULL"
                                       : n_wrt < 1 ? "no tensor to differentiate with respect to"
                                                   : "wrt or grads is NULL");
        return GML_ERR_INVALID;
    }
    gml_backward_ctx b = {.ctx = ctx};
    gml_status st = run(&b, out, dout, wrt, n_wrt, grads);
    if (st == GML_ERR_NOMEM) gml_set_error(ctx, "grad(%s): out of memory", out->name);
    free(b.topo);
    free(b.needs);
    free(b.grad);
    free(b.copy);
    free(b.entry);
    free(b.entry_dep);
    free(b.alias);
    free(b.alias_of);
    gml_hashindex_free(&b.ix);
    gml_hashindex_free(&b.alias_ix);
    return st;
}

gml_status gml_checkpoint(gml_context *ctx, gml_tensor *out, gml_tensor *const *inputs,
                          int n_inputs) {
    if (!ctx) return GML_ERR_INVALID;
    if (!out || n_inputs < 0 || (n_inputs > 0 && !inputs)) {
        gml_set_error(ctx, "checkpoint: %s", !out ? "out is NULL"
                                              : n_inputs < 0 ? "n_inputs is negative"
                                                             : "inputs is NULL");
        return GML_ERR_INVALID;
    }
    for (int k = 0; k < n_inputs; k++)
        if (!inputs[k]) {
            gml_set_error(ctx, "checkpoint(%s): inputs[%d] is NULL", out->name, k);
            return GML_ERR_INVALID;
        }
    gml_backward_ctx b = {.ctx = ctx};
    gml_status st = collect(&b, out);
    bool *dep = st == GML_OK ? calloc((size_t)b.n, sizeof *dep) : NULL;
    if (st == GML_OK && !dep) st = GML_ERR_NOMEM;
    char s1[GML_SHAPE_MAX];
    for (int k = 0; k < n_inputs && st == GML_OK; k++) {
        const int i = find(&b, inputs[k]);
        if (i < 0) {
            gml_set_error(ctx, "checkpoint(%s): input '%s' %s is not among the tensors '%s' is "
                          "computed from", out->name, inputs[k]->name, GML_SHAPE(inputs[k], s1),
                          out->name);
            st = GML_ERR_INVALID;
        } else {
            dep[i] = true;
        }
    }
    /* The nodes computed from an input (sources first), out and the inputs
     * excepted, are marked. */
    for (int i = 0; i < b.n && st == GML_OK; i++) {
        gml_tensor *t = b.topo[i];
        if (dep[i]) continue;
        for (int s = 0; s < GML_MAX_SRC && !dep[i]; s++) dep[i] = t->src[s] && dep[find(&b, t->src[s])];
        if (dep[i] && t != out && t->op != GML_OP_NONE) t->flags |= GML_FLAG_RECOMPUTE;
    }
    if (st == GML_ERR_NOMEM) gml_set_error(ctx, "checkpoint(%s): out of memory", out->name);
    free(dep);
    free(b.topo);
    gml_hashindex_free(&b.ix);
    return st;
}
