/* The context: one arena holding tensor headers and data, and the error
 * message of the last failed builder call. */
#define _DEFAULT_SOURCE /* madvise, MAP_ANONYMOUS */
#include "internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

/* On the 2-core Xeon (a KVM guest, THP "madvise"), decoding C5's dimensions
 * through 38 layers (558 MB a token) on 1 thread went from about 51 to 45
 * ms a token (medians of 6 alternated runs) with its weights and KV cache
 * on huge pages: both the matrix-vector products and the attention over
 * the cache read faster. The memory is mapped, not malloc'ed, so that
 * freeing it returns it: a freed range left advised in malloc's heap would
 * have later small allocations there grow into 2 MiB resident pages. */
void *gml_alloc_arena(size_t bytes, size_t *mapped) {
    *mapped = 0;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const char *off = getenv("GGMLITE_HUGEPAGES");
    if (bytes >= GML_HUGE_MIN && !(off && strcmp(off, "0") == 0)) {
        const size_t page = (size_t)2 << 20, n = gml_align_up(bytes, page);
        char *m = mmap(NULL, n + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m != MAP_FAILED) { /* [m, m + n + page) -> [p, p + n), p on a 2 MiB boundary */
            char *p = (char *)gml_align_up((uintptr_t)m, page);
            if (p > m) munmap(m, (size_t)(p - m));
            munmap(p + n, (size_t)(m + page - p));
            madvise(p, n, MADV_HUGEPAGE); /* advice: a refusal changes nothing */
            *mapped = n;
            return p;
        }
    }
#endif
    return aligned_alloc(GML_ALIGN, gml_align_up(bytes, GML_ALIGN));
}

void gml_free_arena(void *p, size_t mapped) {
#if defined(__linux__)
    if (mapped) {
        munmap(p, mapped);
        return;
    }
#endif
    free(p);
}

/* Each tensor lives in the arena as an object: the header, then (unless
 * no_alloc or a view) its data at the next GML_ALIGN boundary. */
struct gml_object {
    gml_tensor tensor;
    struct gml_object *next;
};

static const size_t OBJ_SIZE = (sizeof(struct gml_object) + GML_ALIGN - 1) / GML_ALIGN * GML_ALIGN;

size_t gml_tensor_overhead(void) { return OBJ_SIZE; }

gml_context *gml_init(gml_init_params params) {
    gml_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return NULL;
    ctx->no_alloc = params.no_alloc;
    ctx->mem_size = params.mem_size;
    if (params.mem_buffer) {
        ctx->mem = params.mem_buffer;
    } else if (params.mem_size > 0) {
        /* headers only: no rows streamed, and a huge page would make the
         * few KiB touched 2 MiB resident */
        ctx->mem = params.no_alloc
                       ? aligned_alloc(GML_ALIGN, gml_align_up(params.mem_size, GML_ALIGN))
                       : gml_alloc_arena(params.mem_size, &ctx->mem_mapped);
        if (!ctx->mem) {
            free(ctx);
            return NULL;
        }
        ctx->mem_owned = true;
    }
    /* A caller's buffer may start anywhere: skip to the first aligned byte. */
    size_t skew = (size_t)((uintptr_t)ctx->mem % GML_ALIGN);
    ctx->used = skew ? GML_ALIGN - skew : 0;
    if (ctx->used > ctx->mem_size) ctx->used = ctx->mem_size;
    return ctx;
}

void gml_free(gml_context *ctx) {
    if (!ctx) return;
    if (ctx->mem_owned) gml_free_arena(ctx->mem, ctx->mem_mapped);
    free(ctx);
}

const char *gml_version(void) { return GML_VERSION; }

const char *gml_last_error(const gml_context *ctx) { return ctx ? ctx->err : ""; }
void gml_clear_error(gml_context *ctx) {
    if (ctx) ctx->err[0] = '\0';
}
size_t gml_used_mem(const gml_context *ctx) { return ctx->used; }
size_t gml_mem_required(const gml_context *ctx) { return ctx->required; }
bool gml_get_no_alloc(const gml_context *ctx) { return ctx->no_alloc; }

gml_tensor *gml_fail(gml_context *ctx, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
    va_end(ap);
    return NULL;
}

gml_tensor *gml_set_error_v(gml_context *ctx, const char *fmt, va_list ap) {
    if (ctx) vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
    return NULL;
}

gml_tensor *gml_set_error(gml_context *ctx, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    gml_set_error_v(ctx, fmt, ap);
    va_end(ap);
    return NULL;
}

void gml_contiguous_strides(gml_type type, const int64_t ne[GML_MAX_DIMS], size_t nb[GML_MAX_DIMS]) {
    /* a blocked type (q8_0): nb[3] is one block, a row n / block blocks */
    nb[GML_MAX_DIMS - 1] = gml_type_size(type);
    nb[GML_MAX_DIMS - 2] = gml_row_size(type, ne[GML_MAX_DIMS - 1]);
    for (int i = GML_MAX_DIMS - 3; i >= 0; i--) nb[i] = nb[i + 1] * (size_t)ne[i + 1];
}

/* The builder call a tensor is made for, as its messages name it: op and
 * sources ("add(a, b)"; "new_tensor" for leafs). */
struct caller {
    const char *op;
    gml_tensor *const *src;
    int n_src;
};

/* Reserves bytes in the arena, or records why it cannot: who could not have
 * what ("header" or "data") of t. t is not made yet, so it has no name; its
 * shape and type say which it is. */
static void *arena_take(gml_context *ctx, size_t bytes, const struct caller *who,
                        const char *what, const gml_tensor *t) {
    if (ctx->mem_size - ctx->used < bytes || ctx->used > ctx->mem_size) {
        char call[GML_CALL_MAX], shape[GML_SHAPE_MAX];
        gml_fail(ctx,
                 "%s: arena too small: %s of %s %s needs %zu bytes, %zu of %zu available "
                 "(%zu needed so far); size the arena with gml_mem_required() after a "
                 "no_alloc build",
                 gml_format_call(who->op, who->src, who->n_src, call, sizeof call), what,
                 GML_SHAPE(t, shape), gml_type_name(t->type), bytes,
                 ctx->mem_size > ctx->used ? ctx->mem_size - ctx->used : 0, ctx->mem_size,
                 ctx->required);
        return NULL;
    }
    void *p = ctx->mem + ctx->used;
    ctx->used += bytes;
    return p;
}

/* Makes a header (and data unless no_alloc or view) for shape ne, for the
 * call who (error messages); the caller names it. */
static gml_tensor *new_object(gml_context *ctx, const struct caller *who, gml_type type, int n_dims,
                              const int64_t *ne, bool view) {
    assert(n_dims >= 1 && n_dims <= GML_MAX_DIMS);
    gml_tensor tmp = {.type = type, .n_dims = n_dims};
    for (int i = 0; i < GML_MAX_DIMS; i++) tmp.ne[i] = 1;
    for (int i = 0; i < n_dims; i++) tmp.ne[GML_MAX_DIMS - n_dims + i] = ne[i];
    gml_contiguous_strides(type, tmp.ne, tmp.nb);

    size_t data_bytes = view ? 0 : gml_align_up(gml_nbytes(&tmp), GML_ALIGN);
    ctx->required += OBJ_SIZE + data_bytes;

    struct gml_object *obj = arena_take(ctx, OBJ_SIZE, who, "header", &tmp);
    if (!obj) return NULL;
    void *data = NULL;
    if (data_bytes && !ctx->no_alloc) {
        data = arena_take(ctx, data_bytes, who, "data", &tmp);
        if (!data) {
            ctx->used -= OBJ_SIZE;
            return NULL;
        }
    }
    memset(obj, 0, sizeof *obj);
    obj->tensor = tmp;
    obj->tensor.data = data;
    obj->tensor.id = ctx->n_tensors++;
    if (ctx->last) ctx->last->next = obj;
    else ctx->first = obj;
    ctx->last = obj;
    return &obj->tensor;
}

static bool valid_sizes(gml_context *ctx, const char *what, int n_dims, const int64_t *ne) {
    if (n_dims < 1 || n_dims > GML_MAX_DIMS) {
        gml_fail(ctx, "%s: %d dimensions; ggmlite tensors have 1 to %d", what, n_dims,
                 GML_MAX_DIMS);
        return false;
    }
    const int64_t limit = (int64_t)1 << 40;
    int64_t count = 1;
    for (int i = 0; i < n_dims; i++) {
        if (ne[i] < 1 || ne[i] > limit) {
            gml_fail(ctx, "%s: size %" PRId64 " of dim %d is out of range [1, 2^40]", what, ne[i], i);
            return false;
        }
        /* the element count too, so that byte sizes and strides cannot overflow */
        if (count > limit / ne[i]) {
            gml_fail(ctx, "%s: more than 2^40 elements (dim %d of size %" PRId64 " brings the count "
                     "past it)", what, i, ne[i]);
            return false;
        }
        count *= ne[i];
    }
    return true;
}

gml_tensor *gml_new_tensor(gml_context *ctx, gml_type type, int n_dims, const int64_t *ne) {
    if (!ctx) return NULL;
    if ((unsigned)type >= GML_TYPE_COUNT)
        return gml_fail(ctx, "new_tensor: unknown type %d", (int)type);
    if (!valid_sizes(ctx, "new_tensor", n_dims, ne)) return NULL;
    const int64_t blk = gml_type_block_size(type);
    if (ne[n_dims - 1] % blk)
        return gml_fail(ctx, "new_tensor: a %s tensor's last dim must be a multiple of %" PRId64
                        " (its block), got %" PRId64, gml_type_name(type), blk, ne[n_dims - 1]);
    gml_tensor *t = new_object(ctx, &(struct caller){"new_tensor", NULL, 0}, type, n_dims, ne,
                               false);
    if (t) snprintf(t->name, sizeof t->name, "leaf_%d", t->id);
    return t;
}

gml_tensor *gml_new_tensor_1d(gml_context *ctx, gml_type type, int64_t n0) {
    return gml_new_tensor(ctx, type, 1, (int64_t[]){n0});
}
gml_tensor *gml_new_tensor_2d(gml_context *ctx, gml_type type, int64_t n0, int64_t n1) {
    return gml_new_tensor(ctx, type, 2, (int64_t[]){n0, n1});
}
gml_tensor *gml_new_tensor_3d(gml_context *ctx, gml_type type, int64_t n0, int64_t n1, int64_t n2) {
    return gml_new_tensor(ctx, type, 3, (int64_t[]){n0, n1, n2});
}
gml_tensor *gml_new_tensor_4d(gml_context *ctx, gml_type type, int64_t n0, int64_t n1, int64_t n2,
                              int64_t n3) {
    return gml_new_tensor(ctx, type, 4, (int64_t[]){n0, n1, n2, n3});
}

/* The one place where the types beyond f32 and i32 (f16, bf16, q8_0) are
 * let into an op (see gml_type in ggmlite.h): cpy converts any pair; cont
 * moves f16 and bf16 too; matmul takes them as b, get_rows as the table,
 * flash_attn and flash_attn_partial f16/bf16 as k and v.
 * Every other op, and these in any other role, refuses them here, so no
 * kernel ever sees a type it was not written for. (The builders check their
 * own i32 and f32 rules before.) */
static bool types_taken(gml_context *ctx, const struct caller *who, gml_op op, gml_type type) {
    for (int i = 0; i < who->n_src; i++) {
        const gml_tensor *s = who->src[i];
        if (!s || s->type == GML_F32 || s->type == GML_I32) continue;
        const bool ok = (op == GML_OP_CONT && s->type != GML_Q8_0) ||
                        (op == GML_OP_MATMUL && i == 1) || (op == GML_OP_GET_ROWS && i == 0) ||
                        ((op == GML_OP_FLASH_ATTN || op == GML_OP_FLASH_ATTN_PARTIAL) && (i == 1 || i == 2) &&
                         s->type != GML_Q8_0);
        if (ok) continue;
        char call[GML_CALL_MAX], shape[GML_SHAPE_MAX];
        const char *takes = op == GML_OP_CONT    ? "f32, i32, f16 or bf16"
                            : op == GML_OP_MATMUL ? "an f32 a (b may be f16, bf16 or q8_0)"
                            : op == GML_OP_GET_ROWS ? "an f32, f16, bf16 or q8_0 table and i32 "
                                                      "indices"
                            : op == GML_OP_FLASH_ATTN || op == GML_OP_FLASH_ATTN_PARTIAL
                                ? "an f32 q and f32, f16 or bf16 k and v"
                                                    : "f32 (and i32 where it says)";
        gml_fail(ctx, "%s: '%s' is %s %s; %s takes %s (convert it with cpy into an f32 tensor "
                 "first)", gml_format_call(who->op, who->src, who->n_src, call, sizeof call),
                 s->name, gml_type_name(s->type), GML_SHAPE(s, shape), who->op, takes);
        return false;
    }
    if (type != GML_F32 && type != GML_I32 && op != GML_OP_CONT) {
        char call[GML_CALL_MAX];
        gml_fail(ctx, "%s: makes no %s result (only cpy and cont write other types than f32 and "
                 "i32)", gml_format_call(who->op, who->src, who->n_src, call, sizeof call),
                 gml_type_name(type));
        return false;
    }
    return true;
}

gml_tensor *gml_new_op(gml_context *ctx, gml_op op, gml_type type, int n_dims, const int64_t *ne,
                       gml_tensor *const *src, int n_src) {
    assert(n_src >= 0 && n_src <= GML_MAX_SRC);
    const struct caller who = {gml_op_name(op), src, n_src};
    if (!types_taken(ctx, &who, op, type)) return NULL;
    if (!valid_sizes(ctx, gml_op_name(op), n_dims, ne)) return NULL;
    gml_tensor *t = new_object(ctx, &who, type, n_dims, ne, false);
    if (!t) return NULL;
    t->op = op;
    for (int i = 0; i < n_src; i++) t->src[i] = src[i];
    snprintf(t->name, sizeof t->name, "node_%d", t->id);
    return t;
}

/* Whether a view [ne...] with byte strides nb at offset of the q8_0 leaf a
 * is a block of its whole rows: a's dims and strides, its last dim whole, at
 * a multiple of a row's bytes. */
static bool q8_0_rows_of(const gml_tensor *a, int n_dims, const int64_t *ne, const size_t *nb,
                         size_t offset) {
    if (n_dims != a->n_dims || ne[n_dims - 1] != a->ne[GML_MAX_DIMS - 1]) return false;
    for (int i = 0; i < n_dims; i++)
        if (nb[i] != a->nb[GML_MAX_DIMS - n_dims + i]) return false;
    return offset % a->nb[GML_MAX_DIMS - 2] == 0;
}

/* Whether t is such a block of rows of a q8_0 leaf (a view the rule above let in). */
static bool q8_0_rows(const gml_tensor *t) {
    return t->op == GML_OP_VIEW && t->view_src && t->src[0] == t->view_src;
}

gml_tensor *gml_new_view(gml_context *ctx, gml_op op, gml_tensor *a, int n_dims,
                         const int64_t *ne, const size_t *nb, size_t offset, const char *what) {
    if (!valid_sizes(ctx, gml_op_name(op), n_dims, ne)) return NULL;
    const struct caller who = {gml_op_name(op), &a, 1};
    /* A q8_0 tensor's blocks run along its last dim: a block of whole rows
     * of a leaf (a view with the leaf's strides at a row offset: its rows are
     * whole blocks) and a permutation of a leaf or of such a block (w^T for
     * matmul) keep them addressable, and the writes of cpy land on a whole
     * q8_0 leaf. */
    if (a->type == GML_Q8_0 &&
        !(((op == GML_OP_TRANSPOSE || op == GML_OP_PERMUTE) && (!a->view_src || q8_0_rows(a))) ||
          (op == GML_OP_VIEW && !a->view_src && q8_0_rows_of(a, n_dims, ne, nb, offset)) ||
          (op == GML_OP_CPY && !a->view_src && gml_is_contiguous(a)) ||
          (op == GML_OP_AFTER && !a->view_src))) {
        char shape[GML_SHAPE_MAX];
        return gml_fail(ctx, "%s(%s): '%s' is q8_0 %s%s; of its views only transpose and permute "
                        "of a q8_0 leaf and a block of a leaf's whole rows (view with the leaf's "
                        "strides at a row offset; also transposed or permuted) are supported (its "
                        "blocks of 32 run along the last dim)", gml_op_name(op), a->name, a->name,
                        GML_SHAPE(a, shape), a->view_src ? " (a view)" : "");
    }
    gml_tensor *t = new_object(ctx, &who, a->type, n_dims, ne, true);
    if (!t) return NULL;
    for (int i = 0; i < n_dims; i++) t->nb[GML_MAX_DIMS - n_dims + i] = nb[i];
    /* Leading unused dims: stride of the whole tensor, as a contiguous one. */
    for (int i = GML_MAX_DIMS - n_dims - 1; i >= 0; i--)
        t->nb[i] = t->nb[i + 1] * (size_t)t->ne[i + 1];
    t->op = op;
    t->src[0] = a;
    t->view_src = a->view_src ? a->view_src : a;
    t->view_offs = a->view_offs + offset;
    if (t->view_src->data) t->data = (char *)t->view_src->data + t->view_offs;
    snprintf(t->name, sizeof t->name, "%.*s (%s)", (int)(GML_MAX_NAME - 16), a->name, what);
    return t;
}

gml_tensor *gml_set_name(gml_tensor *t, const char *name) {
    if (t) snprintf(t->name, sizeof t->name, "%s", name);
    return t;
}

const char *gml_get_name(const gml_tensor *t) { return t ? t->name : "(null)"; }

gml_tensor *gml_get_tensor(gml_context *ctx, const char *name) {
    for (struct gml_object *o = ctx->first; o; o = o->next)
        if (strcmp(o->tensor.name, name) == 0) return &o->tensor;
    return NULL;
}

gml_tensor *gml_get_first_tensor(const gml_context *ctx) {
    return ctx && ctx->first ? &ctx->first->tensor : NULL;
}

/* t is the first member of its object, so the object starts where t does. */
gml_tensor *gml_get_next_tensor(const gml_context *ctx, const gml_tensor *t) {
    (void)ctx;
    if (!t) return NULL;
    const struct gml_object *o = (const struct gml_object *)(const void *)t;
    return o->next ? &o->next->tensor : NULL;
}

void gml_set_flags(gml_tensor *t, int flags) {
    if (t) t->flags |= flags;
}
