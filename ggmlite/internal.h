/* Internal declarations shared by the core (ggmlite/) and the ops (ops/).
 * Not installed; users include ggmlite.h only. */
#ifndef GGMLITE_INTERNAL_H
#define GGMLITE_INTERNAL_H

#include <ggmlite/ggmlite.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>


#define GML_UNUSED(x) (void)(x)
#define GML_MIN(a, b) ((a) < (b) ? (a) : (b))
#define GML_MAX(a, b) ((a) > (b) ? (a) : (b))

static inline size_t gml_align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/* Memory for a context's data arena (not no_alloc) or a plan's buffer:
 * GML_ALIGN-aligned; from GML_HUGE_MIN bytes on, mapped 2 MiB-aligned and
 * advised to be backed by transparent huge pages (madvise MADV_HUGEPAGE,
 * Linux; GGMLITE_HUGEPAGES=0 turns it off). Decoding streams every weight and
 * cache row once a token: on 4 KiB pages each page costs a page walk
 * (nested under a hypervisor), on 2 MiB pages almost none (context.c). */
#define GML_HUGE_MIN ((size_t)4 << 20)
/* *mapped: the bytes mapped (huge pages), 0 when from aligned_alloc; NULL
 * when out of memory. Freed with gml_free_arena(p, *mapped). */
void *gml_alloc_arena(size_t bytes, size_t *mapped);
void gml_free_arena(void *p, size_t mapped);

/* ---- context ------------------------------------------------------------ */

struct gml_context {
    uint64_t id;        /* unique in the process, never 0: a graph tells its contexts by it */
    char *mem;
    size_t mem_size;
    size_t used;        /* arena bytes handed out */
    size_t required;    /* bytes an allocating arena would need */
    bool mem_owned;
    size_t mem_mapped;  /* gml_alloc_arena's: 0 unless mapped */
    bool no_alloc;
    int n_tensors;
    struct gml_object *first, *last;
    char err[GML_ERR_MAX];
    gml_compute compute; /* gml_set_default_compute's: matmuls built after take it */
};

/* Records a message on the context (replacing any earlier one) and returns
 * NULL, so builders can `return gml_fail(ctx, ...)`; ctx NULL: on the
 * thread, as gml_thread_fail. */
gml_tensor *gml_fail(gml_context *ctx, const char *fmt, ...) GML_PRINTF(2, 3);

/* ---- misuse of the API: NULL, freed and foreign objects ---------------------
 * Every public function checks its pointer arguments where it is entered
 * (tensor.h, "Misuse"): NULL ones, and contexts, tensors and graphs that are
 * not alive. A message with no live context or graph to keep it is the
 * thread's: gml_last_error(NULL) and gml_graph_error(NULL) read it. */

/* Records this thread's message; returns NULL. */
void *gml_thread_fail(const char *fmt, ...) GML_PRINTF(1, 2);

/* For a function with nothing else to keep the message: if p is NULL,
 * records "<function>: <p> is NULL" for the thread and returns ret. */
#define GML_NONNULL(p, ret)                                         \
    do {                                                            \
        if (!(p)) {                                                 \
            gml_thread_fail("%s: %s is NULL", __func__, #p);        \
            return ret;                                             \
        }                                                           \
    } while (0)

/* The live contexts: made by gml_init, not yet given to gml_free. Kept in a
 * process-wide list under a lock, so that asking never reads a freed
 * context: gml_ctx_live(ctx) says whether ctx is one (by address; a context
 * made later at a freed one's address is that one's), gml_ctx_live_id
 * whether the context made with that id still is (a graph's check), and
 * gml_ctx_holding which one's arena holds address p (a tensor's header), or
 * NULL, its id in *id. */
bool gml_ctx_live(const gml_context *ctx);
bool gml_ctx_live_id(const gml_context *ctx, uint64_t id);
gml_context *gml_ctx_holding(const void *p, uint64_t *id);

/* A context argument: false, with "<fn>: ctx is NULL" or "... is not a live
 * context" recorded for the thread, unless ctx is live. */
bool gml_check_ctx(const gml_context *ctx, const char *fn);

/* Where every public builder starts: GML_ENTER(ctx, n_required, t...)
 * returns NULL from it unless ctx is a live context and each of the tensors
 * t (named in messages as the builder's parameters are written) is NULL or a
 * tensor of a live context (of ctx or of another one: weights, a KV cache),
 * the first n_required of them not NULL. Messages: a NULL or dead ctx,
 * the thread's ("gml_add: ctx is NULL"); a NULL tensor, "gml_add: b is NULL"
 * on ctx unless it holds one already (the first message is kept: it says
 * why this input is NULL); a tensor of no live context, on ctx. */
bool gml_enter(gml_context *ctx, const char *fn, const char *names, const gml_tensor *const *t,
               int n, int n_required);
#define GML_ENTER(ctx, n_required, ...)                                                     \
    do {                                                                                    \
        const gml_tensor *const gml_enter_t_[] = {__VA_ARGS__};                             \
        if (!gml_enter((ctx), __func__, #__VA_ARGS__, gml_enter_t_,                         \
                       (int)(sizeof gml_enter_t_ / sizeof *gml_enter_t_), (n_required)))    \
            return NULL;                                                                    \
    } while (0)
/* A builder without tensor arguments (arange, relpos_index). */
#define GML_ENTER_CTX(ctx)                                                                  \
    do {                                                                                    \
        if (!gml_check_ctx((ctx), __func__)) return NULL;                                   \
    } while (0)
/* The tensors of attention options (each may be NULL; opts may be NULL). */
#define GML_ENTER_OPTS(ctx, opts)                                                           \
    do {                                                                                    \
        if ((opts) && !gml_enter((ctx), __func__,                                           \
                                 "opts->mask, opts->valid_lens, opts->positions, opts->sinks", \
                                 (const gml_tensor *const[]){(opts)->mask, (opts)->valid_lens, \
                                                             (opts)->positions, (opts)->sinks}, \
                                 4, 0))                                                     \
            return NULL;                                                                    \
    } while (0)

/* A new tensor made by op from its n_src sources (NULL ones allowed: an
 * optional input), set as src[0..n_src-1]; contiguous, data allocated unless
 * the context is no_alloc. Named "node_<id>". NULL (error set) if the arena
 * is full, the message naming the call as every builder message does:
 * "add(a, b): arena too small: data of [100] f32 needs 448 bytes, ...". */
gml_tensor *gml_new_op(gml_context *ctx, gml_op op, gml_type type, int n_dims, const int64_t *ne,
                       gml_tensor *const *src, int n_src);
/* A view of a (shape ne, byte strides nb, offset bytes into a's data) made by
 * op; view_src is the tensor that owns the data. Named "<a> (<what>)". A full
 * arena gives "<op>(<a>): arena too small: ...". */
gml_tensor *gml_new_view(gml_context *ctx, gml_op op, gml_tensor *a, int n_dims,
                         const int64_t *ne, const size_t *nb, size_t offset, const char *what);

/* Fills nb with the contiguous byte strides of ne (right-aligned, 4 entries). */
void gml_contiguous_strides(gml_type type, const int64_t ne[GML_MAX_DIMS], size_t nb[GML_MAX_DIMS]);
/* Storage a tensor's data must span: the byte just past its last element. */
size_t gml_storage_extent(const gml_tensor *t);

/* Maps PyTorch dim d (negative from the end) of an n-dim tensor to the index
 * into ne/nb, or -1 when out of range. */
static inline int gml_axis(const gml_tensor *t, int d) {
    if (d < 0) d += t->n_dims;
    if (d < 0 || d >= t->n_dims) return -1;
    return GML_MAX_DIMS - t->n_dims + d;
}

static inline char *gml_ptr(const gml_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return (char *)t->data + i0 * (int64_t)t->nb[0] + i1 * (int64_t)t->nb[1] +
           i2 * (int64_t)t->nb[2] + i3 * (int64_t)t->nb[3];
}

/* Op parameters: each op that has any keeps them in a small struct of its
 * own (no padding: 4- and 8-byte fields in order), copied into op_params
 * with the rest zeroed, so gml_graph_digest sees the same bytes for the same
 * values; only the op's file reads and writes them, through these. */
static inline void gml_set_params(gml_tensor *t, const void *p, size_t size) {
    memset(t->op_params, 0, sizeof t->op_params);
    memcpy(t->op_params, p, size);
}
static inline void gml_get_params(const gml_tensor *t, void *p, size_t size) {
    memcpy(p, t->op_params, size);
}
#define GML_PARAMS_FIT(type)                                                        \
    _Static_assert(sizeof(type) <= sizeof(((gml_tensor *)0)->op_params),            \
                   #type " fits in op_params")

/* Rows of t: every index but the last, flattened. Row r is [i0, i1, i2, :]. */
static inline int64_t gml_nrows(const gml_tensor *t) { return t->ne[0] * t->ne[1] * t->ne[2]; }
static inline void gml_row_index(const gml_tensor *t, int64_t r, int64_t *i0, int64_t *i1,
                                 int64_t *i2) {
    *i2 = r % t->ne[2];
    r /= t->ne[2];
    *i1 = r % t->ne[1];
    *i0 = r / t->ne[1];
}

/* Result shape of broadcasting a and b (right-aligned, each dim 1 or equal)
 * into ne/n_dims; false (and an error naming op, a and b) if they do not. */
bool gml_broadcast_shape(gml_context *ctx, const char *op, const gml_tensor *a,
                         const gml_tensor *b, int64_t ne[GML_MAX_DIMS], int *n_dims);
/* False, with "<op>(<t>): <t> must be f32, got i32 [3,4]" recorded, if t's
 * type is not want. */
bool gml_expect_type(gml_context *ctx, const char *op, const gml_tensor *t, gml_type want);
/* True if a can be broadcast to shape of t (a's dims 1 or equal). */
bool gml_broadcasts_to(const gml_tensor *a, const gml_tensor *t);

/* ---- overlap: writes that alias -------------------------------------------
 * Decided on headers, not data: two tensors of one storage root (view_src,
 * or the tensor itself) by their offsets into it and their strides, so that
 * a no_alloc context's tensors (data NULL until planned) are judged as they
 * will be placed; tensors of two roots only when both roots have data at the
 * time of the call (user data placed by hand), by address. Roots without
 * data are placed apart by the planner. */
typedef enum gml_overlap {
    GML_OVERLAP_NO = 0, /* proved apart */
    GML_OVERLAP_YES,    /* two elements share a byte (the witness says which) */
    GML_OVERLAP_MAYBE,  /* strides that interleave beyond the search budget */
} gml_overlap;
/* Two elements that share a byte: index ia of the first tensor and ib of
 * the second (of the one tensor, for gml_self_overlap), right-aligned as ne;
 * dim: for a stride 0 on a dim of size > 1, that dim (0..3), else -1. */
typedef struct gml_overlap_witness {
    int64_t ia[GML_MAX_DIMS], ib[GML_MAX_DIMS];
    int dim;
} gml_overlap_witness;
/* Whether two different elements of t share a byte (a stride 0 on a dim of
 * size > 1, or strides such that two indices reach one byte). YES and NO are
 * exact (a search over the strides, largest first, the last two solved in
 * closed form); MAYBE only when the search runs past its budget (2^16
 * steps), which strides that nest (sorted, each at least the extent of the
 * smaller ones: all that views, permutes and slices of a tensor make) never
 * do: they take one step per stride. w may be NULL. */
gml_overlap gml_self_overlap(const gml_tensor *t, gml_overlap_witness *w);
/* Whether an element of a and one of b share a byte (see above for how
 * storage is compared); exact as gml_self_overlap is (MAYBE past the same
 * budget), also for tensors whose byte ranges intersect while their elements
 * interleave (the even and the odd columns of one matrix are apart). Strides
 * two tensors share are searched as one. w may be NULL. */
gml_overlap gml_tensors_overlap(const gml_tensor *a, const gml_tensor *b, gml_overlap_witness *w);
/* a and b are the same elements in the same order: one type and shape, one
 * storage and offset, the same strides on every dim of size > 1. */
bool gml_same_elements(const gml_tensor *a, const gml_tensor *b);
/* For builders of ops that write into dst (cpy, set_rows): true if no two
 * elements of dst share memory and dst shares none with the sources
 * src[0..n_src-1] it reads (NULL ones skipped), except a source with exactly
 * dst's elements when same_ok (a copy onto itself: nothing moves). Otherwise
 * false with "<call>: the destination ..." recorded, naming the tensors,
 * their shapes and two elements that meet (or "may" when the check could
 * not tell); role[i] names src[i] in it ("source", "indices"). */
bool gml_check_write(gml_context *ctx, const char *call, const gml_tensor *dst,
                     const gml_tensor *const *src, const char *const *role, int n_src,
                     bool same_ok);

/* "name [2,8,10,64]" pieces for messages. */
#define GML_SHAPE(t, buf) gml_format_shape((t), (buf), sizeof(buf))
/* Writes how builder messages start, "op(a, b)": op and the names of the
 * non-NULL src[0..n_src-1], or just "op" when there are none; returns buf. */
char *gml_format_call(const char *op, gml_tensor *const *src, int n_src, char *buf, size_t size);
#define GML_CALL_MAX (GML_MAX_SRC * (GML_MAX_NAME + 2) + 32) /* room for any call */

/* ---- kernels ------------------------------------------------------------ */

struct gml_compute_shared; /* per compute: barrier, chunk counter, error */

/* What each kernel call gets: its thread index ith of nth threads that all
 * run the same node, a scratch buffer shared by those threads (work_size
 * bytes, 64-byte aligned, the node's own: a node running beside another, no
 * barrier between them, has other scratch), and the shared state behind
 * gml_barrier, gml_chunk_next and gml_kernel_fail. A kernel computes its own
 * share of dst, which it chooses from ith and nth alone, so that every output
 * element is always computed by the same code in the same order. nth is the
 * compute's thread count, or 1 for a tiny node that thread 0 runs alone
 * (compute.c); a kernel gives the same bits either way. A kernel reads only
 * its sources' elements and writes only dst's: compute orders the nodes by
 * the memory they touch. */
/* Memory a node keeps across computes of its graph (a weight packed into
 * its kernel's layout): made by compute (the op's kept_size), filled by
 * the kernel, which records in key what it was made from and sets valid;
 * gml_graph_weights_changed clears valid. Freed with the graph's compute
 * state. */
typedef struct gml_kept {
    void *data; /* size bytes, GML_ALIGN-aligned */
    size_t size;
    bool valid;
    uint64_t key[6];
} gml_kept;

typedef struct gml_compute_params {
    int ith, nth;
    void *wdata;
    size_t wsize;
    struct gml_compute_shared *shared;
    const char **note;   /* where gml_kernel_note writes for this node, or NULL */
    atomic_llong *chunk; /* gml_chunk_next's count for this node */
    int step;            /* the node's place in the compute (which failure wins) */
    gml_isa isa;         /* the ISA the plan chose kernels for (never AUTO): pick variants by it */
    /* Bit s: src[s] is a constant of the graph, a view of (or) a leaf that
     * no node of the graph writes, flagged neither input nor param: its
     * values stay the same between computes unless the user says they do
     * not (gml_graph_weights_changed). 0 outside a graph's compute. */
    unsigned const_srcs;
    gml_kept *kept; /* the node's kept memory (kept_size > 0), or NULL */
} gml_compute_params;

typedef void (*gml_kernel_fn)(const gml_compute_params *p, gml_tensor *dst);

enum {
    GML_OPF_NOOP = 1,     /* views: nothing to compute */
    GML_OPF_INF_OK = 2,   /* output holds -inf by design (masks) */
    /* The planner may give dst the memory of src[0] (contiguous, same element
     * count), dst[i] sitting where src[0][i] was. Every variant must then
     * still be right: each thread writes dst[i] only after it has read
     * src[0][i] for the last time, and the thread writing dst[i] is the one
     * reading src[0][i]. Other sources never share the memory. */
    GML_OPF_INPLACE = 4,
    /* Output elements are input elements, moved or added: a -inf from a mask
     * flows through by design (the NaN trap allows it; see compute.c). */
    GML_OPF_MOVES_VALUES = 8,
};

/* ---- reverse mode: what an op's backward may call (ggmlite/grad.c) ---------
 * One gml_grad call's state: which tensors need a gradient, the sum of the
 * contributions each has received so far, the context to build in. */
typedef struct gml_backward_ctx gml_backward_ctx;
/* The context the gradient nodes are built in (the forward's). */
gml_context *gml_backward_context(const gml_backward_ctx *b);
/* Whether t needs a gradient: a float tensor on a path from one of the
 * tensors differentiated with respect to. False for integer tensors, and
 * for sources no gradient asked for depends on (a weight held constant). */
bool gml_backward_needs(const gml_backward_ctx *b, const gml_tensor *t);
/* Adds g, a contribution to the gradient of src, to its sum: f32, src's
 * shape, or a shape src broadcasts to (right-aligned, 1 or equal: then
 * summed back to src's shape by sum_to, in a fixed order). Contributions
 * add up in the order they arrive, which is fixed (consumers in reverse
 * topological order, each's sources left to right), so gradients are the
 * same bits at every thread count. Does nothing (true) when src needs no
 * gradient. g NULL (a builder failed, its message on the context): false.
 * Another shape or type: false with a message naming src and both shapes. */
bool gml_backward_add(gml_backward_ctx *b, gml_tensor *src, gml_tensor *g);
/* Records a message (the engine puts "backward of <op> (node '<name>'): "
 * before it) and returns false, so a backward can
 * `return gml_backward_fail(b, "...")`. */
bool gml_backward_fail(gml_backward_ctx *b, const char *fmt, ...) GML_PRINTF(2, 3);

/* What the core knows of an op, defined by each op's file as gml_opdef_<name>
 * (its name is the one in ops.inc), and of a builder-only form (gml_form_<name>:
 * a call form, no kernels). The public gml_op_form (registry.c) is an entry
 * of the list: its name, its op, its def. */
typedef struct gml_op_def {
    gml_kernel_fn forward;    /* fast path: picks its ISA variant itself */
    gml_kernel_fn reference;  /* the plain kernel, kept forever */
    size_t (*work_size)(const gml_tensor *dst, int nth); /* NULL: none */
    /* Bytes the node keeps across computes (gml_kept) given which sources
     * are constants (gml_compute_params.const_srcs) and the ISA its kernel
     * runs at; NULL or 0: none. */
    size_t (*kept_size)(const gml_tensor *dst, unsigned const_srcs, gml_isa isa);
    double (*flops)(const gml_tensor *dst);              /* NULL: 0 */
    unsigned flags;

    /* The call form: the builder's arguments in its order, the required
     * ones first (a call is written positional, then name=value), ... */
    const gml_arg_spec *args;
    int n_args;
    /* ... the builder called with their values (gml_form_build sees that
     * the required ones are given, the TENSOR ones not NULL), checking what
     * the C types cannot (whole numbers as written: gml_arg_dim) ... */
    gml_tensor *(*build)(gml_context *ctx, const gml_arg *args);
    /* ... and the values back from a node of the op (NULL for a builder-only
     * form): tensors are its sources, numbers its shape and params. Every
     * optional argument is given (none as t NULL). */
    void (*get_args)(const gml_tensor *node, gml_arg *args);
    /* For the op table (Markdown): the arguments, and the result. */
    const char *doc_args, *doc_result;
    /* Reverse mode (ggmlite/grad.c, gml_grad): given node and dnode, the
     * gradient of the loss with respect to node (f32, node's shape, any
     * strides), builds each source's contribution as ordinary nodes and
     * hands it to gml_backward_add; a source that needs none (gml_backward_
     * needs false: an integer index, a constant) may be skipped, and
     * gml_backward_add ignores it anyway. Returns false when it cannot (a
     * builder's message is on the context, or gml_backward_fail's); the
     * engine puts "backward of <op> (node '<name>')" before it. Defined in
     * the op's own file, next to its forward. NULL: the op has no backward,
     * and gml_grad refuses by name a gradient that must pass through it;
     * leafs, and ops no gradient passes through, need none. */
    bool (*backward)(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dnode);
} gml_op_def;

/* The arguments of a call form, with their count. */
#define GML_ARGS(...) .args = (const gml_arg_spec[]){__VA_ARGS__},                  \
                      .n_args = (int)(sizeof((const gml_arg_spec[]){__VA_ARGS__}) /    \
                                      sizeof(gml_arg_spec))
#define GML_T(n) {n, GML_ARG_TENSOR, false, NULL, NULL, false} /* a required tensor */
#define GML_REQ(n, kind) {n, GML_ARG_##kind, false, NULL, NULL, false} /* a required value */
#define GML_OPT(n, kind, def) {n, GML_ARG_##kind, true, def, NULL, false} /* optional, default def */
/* optional INT or FLOAT, default 0, printed only when not 0 */
#define GML_OPT_Z(n, kind) {n, GML_ARG_##kind, true, "0", NULL, true}
/* optional ENUM, names a NULL-terminated list (value i is names[i]) */
#define GML_OPT_ENUM(n, def, names) {n, GML_ARG_ENUM, true, def, names, false}
/* optional ENUM, default names[0], printed only when not names[0] */
#define GML_OPT_ENUM_Z(n, def, names) {n, GML_ARG_ENUM, true, def, names, true}

#define GML_OP(id, name) extern const gml_op_def gml_opdef_##name;
#define GML_FORM(name) extern const gml_op_def gml_form_##name;
#include <ggmlite/ops.inc>
#undef GML_OP
#undef GML_FORM

const gml_op_def *gml_op_get(gml_op op);

/* get_args for ops whose arguments are their sources, in order. */
void gml_args_from_srcs(const gml_tensor *node, gml_arg *args);
/* For a form's build: the dim or axis d (as written, negative from the end)
 * of t as an int in [-n, n), or false with "<op>(<t>): <what> <d> is out of
 * range for a <n>-D input <shape>" recorded. */
bool gml_arg_dim(gml_context *ctx, const char *op, const gml_tensor *t, const char *what,
                 int64_t d, int *out);
/* For a form's build: v in [lo, hi], or false with "<call>: <what> is <v>,
 * must be in [lo, hi]" recorded (call: "op(t)" or "op" when t is NULL). */
bool gml_arg_range(gml_context *ctx, const char *op, const gml_tensor *t, const char *what,
                   int64_t v, int64_t lo, int64_t hi);

/* Whether Linux lets this process use AMX's tile data (arch_prctl
 * ARCH_REQ_XCOMP_PERM, XTILEDATA), asked once per process (cpu.c); else
 * false with the refusal's errno in *err (ENOSYS off Linux x86-64). Ask only
 * where gml_cpu_has_feature(GML_CPU_AMX_TILE). err may be NULL. */
bool gml_cpu_amx_permit(int *err);

/* Splits [0, n) into nth nearly equal parts; part ith is [*start, *end). */
static inline void gml_split(int64_t n, int ith, int nth, int64_t *start, int64_t *end) {
    int64_t per = n / nth, rem = n % nth;
    *start = ith * per + GML_MIN(ith, rem);
    *end = *start + per + (ith < rem ? 1 : 0);
}

/* Waits until all nth threads of this node reach it (no-op for nth == 1).
 * Every thread of the node must call it equally often, also after a
 * gml_kernel_fail, or the others wait forever. Writes before it are visible
 * to every thread after it. (Between nodes, compute puts barriers only where
 * a node needs what an earlier one did.) */
void gml_barrier(const gml_compute_params *p);
/* Hands out chunk indices 0, 1, 2, ... across the node's threads; each index
 * once. Which thread gets which chunk may vary; what a chunk computes not.
 * The count starts at 0 for every node and again after each gml_barrier, so
 * a kernel can hand out one phase of chunks, meet at a barrier, then hand out
 * the next phase from 0. */
int64_t gml_chunk_next(const gml_compute_params *p);
/* Reports a runtime error (bad index data, ...); the earliest node's wins
 * (the first call among its threads), and compute stops at the next barrier
 * between nodes: no node that needs this one's result runs. */
void gml_kernel_fail(const gml_compute_params *p, const char *fmt, ...) GML_PRINTF(2, 3);

/* Records which code the node ran: a kernel that chooses among paths or
 * micro-kernels calls it, on every thread or on thread 0 at least, with a
 * string that lives forever (a literal, or a variant list's #fn), before
 * returning. Named as XNNPACK names micro-kernels
 * ("gml_f32_flash_ukernel__avx512_x32"), with the path in parentheses when
 * there are several, and "reference (why)" when a fast kernel hands its node
 * to the reference kernel. Only thread 0's call is kept (no race, no
 * allocation, no effect on results); gml_graph_node_kernel reads it. */
static inline void gml_kernel_note(const gml_compute_params *p, const char *variant) {
    if (p->ith == 0 && p->note) *p->note = variant;
}

/* For the scheduler's tests: runs fns[k] on dsts[k] for k = 0..n-1 on
 * n_threads threads of the default pool, as compute runs a graph's nodes,
 * with a barrier after each (they have no sources to order them by) and a
 * chunk count per node, with scratch wdata of wsize bytes. GML_ERR_INVALID, the message in err, if a kernel
 * called gml_kernel_fail. */
gml_status gml_run_kernels(const gml_kernel_fn *fns, gml_tensor *const *dsts, int n,
                           int n_threads, void *wdata, size_t wsize, char *err, size_t err_size);
/* For the scheduler's tests: how the last compute of g ran node i (negative
 * from the end): GML_SCHED_BARRIER if the threads met before it,
 * GML_SCHED_ALONE if thread 0 ran it alone; -1 for a view, or before the
 * first compute. */
enum { GML_SCHED_BARRIER = 1, GML_SCHED_ALONE = 2 };
int gml_graph_node_schedule(const gml_graph *g, int i);

/* ---- ISA variants ---------------------------------------------------------
 * Fast kernels come in one variant per ISA, named as XNNPACK names them:
 * gml_<dtype>_<what>_ukernel__<isa>_<tile>, e.g. gml_f32_vadd_ukernel__avx512_u32.
 * Each op family lists its variants once, in ops/<family>.inc, as lines
 *     X(GML_ISA_AVX512, gml_f32_vadd_ukernel__avx512_u32, 32)
 * in ascending ISA order, scalar first, the rows of one architecture inside
 * GML_IF_X86(...) or GML_IF_ARM(...). The same list drives selection (the
 * family's forward kernel takes the entry gml_pick_variant names for its
 * plan's ISA, p->isa) and the family's test tests/test_ukernels_<family>.c,
 * which runs every variant against the reference on sizes shorter than,
 * equal to and longer than its tile, and skips, with a message, variants
 * whose ISA the CPU lacks.
 * The vector variants of a family are written once, in ops/<family>_simd.c,
 * over the SIMD layer (ops/simd/simd.h), and compiled once per ISA of the
 * architecture with that ISA's flags only (CMake: GGMLITE_SIMD_SOURCES,
 * GGMLITE_SIMD_ISAS), so the library still runs on any CPU of it.
 * A family with several kinds of micro-kernel (binary: vadd, vaddc, vmul,
 * vmulc) writes each kind's list as a macro in its .inc,
 *     #define GML_F32_VADD_UKERNELS(X) X(GML_ISA_SCALAR, fn, 1) X(...) ...
 * ops/ukernels.h declares every listed function and GML_PICK_UKERNEL(isa,
 * list, type) gives the one gml_pick_variant chooses. */

/* A variant list's rows for one architecture only: GML_IF_X86(rows) are
 * there on x86-64 only, GML_IF_ARM(rows) on AArch64 only. */
#if defined(__x86_64__) || defined(__i386__)
#define GML_IF_X86(...) __VA_ARGS__
#else
#define GML_IF_X86(...)
#endif
#if defined(__aarch64__)
#define GML_IF_ARM(...) __VA_ARGS__
#else
#define GML_IF_ARM(...)
#endif

/* Index of the variant to run among n with ISAs isas[0..n-1] (ascending):
 * the last one ISA cur covers (a kernel passes its plan's, p->isa).
 * REFERENCE covers SCALAR. */
static inline int gml_pick_variant(gml_isa cur, const gml_isa *isas, int n) {
    if (cur == GML_ISA_REFERENCE) cur = GML_ISA_SCALAR;
    int pick = 0;
    for (int i = 0; i < n; i++)
        if (isas[i] <= cur) pick = i;
    return pick;
}

#endif /* GGMLITE_INTERNAL_H */
