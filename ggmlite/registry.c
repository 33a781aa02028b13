/* The op registry: the list of ops.inc (ops, then builder-only forms) with
 * each one's name and definition, and what follows from their call forms:
 * finding a form, building from argument values, the call text of a node. */
#include "internal.h"

#include <assert.h>

/* Leafs: nothing to compute, no call form. */
const gml_op_def gml_opdef_none = {.flags = GML_OPF_NOOP};

struct gml_op_form {
    const char *name;
    gml_op op; /* GML_OP_NONE: a builder-only form */
    const gml_op_def *def;
};

/* Index = op for the ops (GML_OP_NONE at 0 is no form); the builder-only
 * forms follow. */
static const gml_op_form FORMS[] = {
#define GML_OP(id, name) {#name, GML_OP_##id, &gml_opdef_##name},
#define GML_FORM(name) {#name, GML_OP_NONE, &gml_form_##name},
#include <ggmlite/ops.inc>
#undef GML_OP
#undef GML_FORM
};
#define N_FORMS (int)(sizeof FORMS / sizeof *FORMS)
_Static_assert(sizeof FORMS / sizeof *FORMS >= GML_OP_COUNT, "every op is in FORMS");

const gml_op_def *gml_op_get(gml_op op) {
    assert((unsigned)op < GML_OP_COUNT);
    return FORMS[op].def;
}

const char *gml_op_name(gml_op op) { return (unsigned)op < GML_OP_COUNT ? FORMS[op].name : "?"; }

int gml_form_count(void) { return N_FORMS - 1; }

const gml_op_form *gml_form_at(int i) { return i >= 0 && i < N_FORMS - 1 ? &FORMS[i + 1] : NULL; }

const gml_op_form *gml_form_find(const char *name) {
    GML_NONNULL(name, NULL);
    for (int i = 1; i < N_FORMS; i++)
        if (strcmp(FORMS[i].name, name) == 0) return &FORMS[i];
    return NULL;
}

const gml_op_form *gml_form_of_op(gml_op op) {
    return op > GML_OP_NONE && op < GML_OP_COUNT ? &FORMS[op] : NULL;
}

const char *gml_form_name(const gml_op_form *f) {
    GML_NONNULL(f, NULL);
    return f->name;
}
gml_op gml_form_op(const gml_op_form *f) {
    GML_NONNULL(f, GML_OP_NONE);
    return f->op;
}
int gml_form_n_args(const gml_op_form *f) {
    GML_NONNULL(f, 0);
    return f->def->n_args;
}
const char *gml_form_doc_args(const gml_op_form *f) {
    GML_NONNULL(f, NULL);
    return f->def->doc_args;
}
const char *gml_form_doc_result(const gml_op_form *f) {
    GML_NONNULL(f, NULL);
    return f->def->doc_result;
}

const gml_arg_spec *gml_form_arg(const gml_op_form *f, int i) {
    GML_NONNULL(f, NULL);
    return i >= 0 && i < f->def->n_args ? &f->def->args[i] : NULL;
}

/* A form's build sees every required argument given, every TENSOR one
 * non-NULL, and each tensor one of a live context (it reads them before the
 * builder it calls checks them). */
gml_tensor *gml_form_build(gml_context *ctx, const gml_op_form *f, const gml_arg *args) {
    GML_ENTER_CTX(ctx);
    if (!f) return gml_fail(ctx, "gml_form_build: f is NULL");
    if (!args) return gml_fail(ctx, "gml_form_build: args is NULL");
    for (int i = 0; i < f->def->n_args; i++) {
        const gml_arg_spec *spec = &f->def->args[i];
        if ((spec->kind == GML_ARG_TENSOR || spec->kind == GML_ARG_OPT_TENSOR) && args[i].t) {
            char name[GML_MAX_NAME + 16];
            snprintf(name, sizeof name, "%s's %s", f->name, spec->name);
            if (!gml_enter(ctx, "gml_form_build", name, (const gml_tensor *const[]){args[i].t}, 1, 1))
                return NULL;
        }
    }
    for (int i = 0; i < f->def->n_args; i++) {
        const gml_arg_spec *spec = &f->def->args[i];
        if (spec->kind == GML_ARG_TENSOR && !args[i].t) { /* as builders do */
            if (!ctx->err[0]) gml_fail(ctx, "gml_form_build: %s's %s is NULL", f->name, spec->name);
            return NULL;
        }
        if (!spec->optional && !args[i].given)
            return gml_fail(ctx, "%s: missing argument '%s'", f->name, spec->name);
    }
    return f->def->build(ctx, args);
}

bool gml_form_get_args(const gml_tensor *node, gml_arg args[GML_MAX_ARGS]) {
    GML_NONNULL(node, false);
    GML_NONNULL(args, false);
    const gml_op_form *f = gml_form_of_op(node->op);
    if (!f) return false;
    memset(args, 0, GML_MAX_ARGS * sizeof *args);
    f->def->get_args(node, args);
    for (int i = 0; i < f->def->n_args; i++) args[i].given = true;
    return true;
}

/* ---- call text ------------------------------------------------------------ */

typedef struct out {
    char *buf;
    size_t size, len; /* len: the whole text's, also past size */
} out;

static void put(out *o, const char *fmt, ...) GML_PRINTF(2, 3);
static void put(out *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    /* measuring only (buf NULL, size 0): no pointer arithmetic on NULL */
    int n = vsnprintf(o->len < o->size ? o->buf + o->len : NULL,
                      o->len < o->size ? o->size - o->len : 0, fmt, ap);
    va_end(ap);
    if (n > 0) o->len += (size_t)n;
}

static void put_value(out *o, const gml_arg_spec *spec, const gml_arg *a,
                      const char *(*name)(void *, const gml_tensor *), void *user) {
    switch (spec->kind) {
    case GML_ARG_TENSOR:
    case GML_ARG_OPT_TENSOR: {
        const char *s = a->t && name ? name(user, a->t) : NULL;
        put(o, "%s", !a->t ? "none" : s ? s : a->t->name);
        break;
    }
    case GML_ARG_INT: put(o, "%" PRId64, a->i); break;
    case GML_ARG_FLOAT: put(o, "%.9g", (double)a->f); break; /* 9 digits: a float exactly */
    case GML_ARG_BOOL: put(o, "%s", a->i ? "true" : "false"); break;
    case GML_ARG_ENUM: { /* the first of the name's aliases */
        int n = 0;
        while (spec->names[n]) n++;
        if (a->i < 0 || a->i >= n) {
            put(o, "%" PRId64, a->i);
            break;
        }
        const char *nm = spec->names[a->i], *bar = strchr(nm, '|');
        put(o, "%.*s", (int)(bar ? (size_t)(bar - nm) : strlen(nm)), nm);
        break;
    }
    case GML_ARG_INTS:
        put(o, "[");
        for (int i = 0; i < a->n; i++) put(o, "%s%" PRId64, i ? ", " : "", a->list[i]);
        put(o, "]");
        break;
    }
}

int gml_format_node(const gml_tensor *node, const char *(*name)(void *user, const gml_tensor *t),
                    void *user, char *buf, size_t size) {
    GML_NONNULL(node, -1);
    if (!buf && size) return gml_thread_fail("gml_format_node: buf is NULL (size %zu)", size), -1;
    out o = {buf, size, 0};
    if (size) buf[0] = '\0';
    gml_arg args[GML_MAX_ARGS];
    if (!gml_form_get_args(node, args)) return -1;
    const gml_op_form *f = gml_form_of_op(node->op);
    put(&o, "%s(", f->name);
    bool first = true;
    for (int i = 0; i < f->def->n_args; i++) {
        const gml_arg_spec *spec = &f->def->args[i];
        if (spec->optional && spec->kind == GML_ARG_OPT_TENSOR && !args[i].t) continue;
        if (spec->omit_zero && ((spec->kind == GML_ARG_INT && args[i].i == 0) ||
                                (spec->kind == GML_ARG_ENUM && args[i].i == 0) ||
                                (spec->kind == GML_ARG_FLOAT && args[i].f == 0)))
            continue;
        put(&o, "%s", first ? "" : ", ");
        first = false;
        if (spec->optional) put(&o, "%s=", spec->name);
        put_value(&o, spec, &args[i], name, user);
    }
    put(&o, ")");
    return (int)GML_MIN(o.len, (size_t)INT32_MAX);
}

int gml_enum_index(const gml_arg_spec *spec, const char *word, size_t len) {
    GML_NONNULL(spec, -1);
    GML_NONNULL(word, -1);
    for (int i = 0; spec->names && spec->names[i]; i++)
        for (const char *nm = spec->names[i]; *nm;) {
            const char *bar = strchr(nm, '|');
            const size_t n = bar ? (size_t)(bar - nm) : strlen(nm);
            if (n == len && strncmp(nm, word, n) == 0) return i;
            nm += n + (bar != NULL);
        }
    return -1;
}

void gml_args_from_srcs(const gml_tensor *node, gml_arg *args) {
    for (int i = 0; i < GML_MAX_SRC; i++) args[i].t = node->src[i];
}

/* ---- checks for builds ---------------------------------------------------- */

bool gml_arg_dim(gml_context *ctx, const char *op, const gml_tensor *t, const char *what,
                 int64_t d, int *out) {
    if (d < -t->n_dims || d >= t->n_dims) {
        char s[GML_SHAPE_MAX];
        gml_fail(ctx, "%s(%s): %s %" PRId64 " is out of range for a %d-D input %s", op, t->name,
                 what, d, t->n_dims, GML_SHAPE(t, s));
        return false;
    }
    *out = (int)d;
    return true;
}

bool gml_arg_range(gml_context *ctx, const char *op, const gml_tensor *t, const char *what,
                   int64_t v, int64_t lo, int64_t hi) {
    if (v >= lo && v <= hi) return true;
    if (t)
        gml_fail(ctx, "%s(%s): %s is %" PRId64 ", must be in [%" PRId64 ", %" PRId64 "]", op,
                 t->name, what, v, lo, hi);
    else
        gml_fail(ctx, "%s: %s is %" PRId64 ", must be in [%" PRId64 ", %" PRId64 "]", op, what, v,
                 lo, hi);
    return false;
}
