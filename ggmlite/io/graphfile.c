/* Graph files: a line-oriented text form of graphs (see "graph files" in
 * ggmlite/io.h and tools/graphs/README.md). What each op takes and how it is
 * written comes from the op registry (gml_form_*, ggmlite.h): the parser
 * reads a call's arguments as its form names them and calls its build; the
 * writer writes each node as gml_format_node does. */
#include "file.h"
#include <ggmlite/hashindex.h>

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_LEN (GML_MAX_NAME - 1)
#define MAX_DEPTH 100 /* nesting of ( ), unary minus and calls: keeps the recursion off the stack's end */

/* ---- the parser ------------------------------------------------------------ */

typedef struct named {
    char name[GML_MAX_NAME];
    gml_tensor *t;     /* a tensor, or NULL for a symbol or none */
    bool none;         /* an optional input left unbound, or what was made from one */
    bool used;         /* a symbol the file has read */
    int64_t sym;
} named;

typedef struct parser {
    gml_context *ctx;
    const char *what;
    const gml_graph_binder *binder;
    const char *line; /* current line (not NUL-terminated), its length, number */
    size_t line_len;
    int lineno;
    size_t pos;       /* cursor within the line */
    char *err;
    size_t err_size;
    bool failed;
    int depth;        /* nesting of expressions and calls, bounded (the parser recurses) */
    named *names;
    int n_names, cap_names;
    gml_hashindex name_index;   /* name -> its entry in names */
    gml_hashindex tensor_index; /* tensor -> the first entry in names that holds it */
} parser;

static bool fail_at(parser *p, size_t col, const char *fmt, ...) GML_PRINTF(3, 4);
static bool fail_at(parser *p, size_t col, const char *fmt, ...) {
    if (p->failed) return false;
    p->failed = true;
    char msg[GML_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    gml_errf(p->err, p->err_size, "%s:%d:%zu: %s", p->what, p->lineno, col + 1, msg);
    return false;
}
#define FAIL(p, ...) fail_at((p), here(p), __VA_ARGS__)

/* The index's equalities: names[val] is called key / holds tensor key. */
static bool name_is(const void *names, int val, const void *key) {
    return strcmp(((const named *)names)[val].name, key) == 0;
}
static bool tensor_is(const void *names, int val, const void *key) {
    return ((const named *)names)[val].t == key;
}

static named *find_name(parser *p, const char *name) {
    int i = gml_hashindex_find(&p->name_index, gml_hash_str(name), name_is, p->names, name);
    return i < 0 ? NULL : &p->names[i];
}

/* Whether t already has a name in the file (then a statement that yields it
 * again, `y = x` or add(x, none), leaves its name alone). */
static bool is_named(const parser *p, const gml_tensor *t) {
    return gml_hashindex_find(&p->tensor_index, gml_hash_ptr(t), tensor_is, p->names, t) >= 0;
}

static const char *const RESERVED[] = {"input", "param", "let", "output", "true", "false",
                                       "none", "sqrt", "f32", "i32", "optional"};

static bool define(parser *p, size_t col, const char *name, gml_tensor *t, int64_t sym) {
    for (size_t i = 0; i < sizeof RESERVED / sizeof *RESERVED; i++)
        if (strcmp(name, RESERVED[i]) == 0) return fail_at(p, col, "'%s' is a reserved word", name);
    if (find_name(p, name)) return fail_at(p, col, "'%s' is already defined", name);
    if (p->n_names == p->cap_names) {
        int cap = p->cap_names ? 2 * p->cap_names : 32;
        named *n = realloc(p->names, (size_t)cap * sizeof *n);
        if (!n) return fail_at(p, col, "out of memory");
        p->names = n;
        p->cap_names = cap;
    }
    /* Fill the entry first: an index never refers to an unwritten one. Each
     * index holds the first entry of a name (binder symbols longer than a
     * name are cut, so two can end up the same; the first is the one found)
     * and of a tensor (is_named asks only whether there is one). */
    bool first_of_t = t && !is_named(p, t);
    named *n = &p->names[p->n_names];
    snprintf(n->name, sizeof n->name, "%s", name);
    n->t = t;
    n->none = false;
    n->used = false;
    n->sym = sym;
    bool first_of_name = !find_name(p, n->name);
    if ((first_of_name && !gml_hashindex_add(&p->name_index, gml_hash_str(n->name), p->n_names)) ||
        (first_of_t && !gml_hashindex_add(&p->tensor_index, gml_hash_ptr(t), p->n_names)))
        return fail_at(p, col, "out of memory");
    p->n_names++;
    return true;
}

/* Defines name as none (nothing: an unbound optional input, or a call that
 * had none for a tensor it needs). */
static bool define_none(parser *p, size_t col, const char *name) {
    if (!define(p, col, name, NULL, 0)) return false;
    p->names[p->n_names - 1].none = true;
    return true;
}

/* ---- tokens --------------------------------------------------------------- */

static void skip_space(parser *p) {
    while (p->pos < p->line_len && (p->line[p->pos] == ' ' || p->line[p->pos] == '\t' ||
                                    p->line[p->pos] == '\r'))
        p->pos++;
    if (p->pos < p->line_len && p->line[p->pos] == '#') p->pos = p->line_len;
}

/* The cursor at the next token (for the column of a message). */
static size_t here(parser *p) {
    skip_space(p);
    return p->pos;
}

static int peek(parser *p) {
    skip_space(p);
    return p->pos < p->line_len ? (unsigned char)p->line[p->pos] : 0;
}

static bool accept(parser *p, int c) {
    if (peek(p) != c) return false;
    p->pos++;
    return true;
}

static bool expect(parser *p, int c) {
    if (accept(p, c)) return true;
    int got = peek(p);
    if (!got) return FAIL(p, "expected '%c' before the end of the line", c);
    return FAIL(p, "expected '%c', found '%c'", c, isprint(got) ? got : '?');
}

static bool is_ident_start(int c) { return isalpha(c) || c == '_'; }
static bool is_ident_char(int c) { return isalnum(c) || c == '_' || c == '.'; }

/* Reads an identifier into buf (NAME_MAX_LEN chars at most). */
static bool ident(parser *p, char buf[GML_MAX_NAME]) {
    if (!is_ident_start(peek(p))) {
        int c = peek(p);
        return c ? FAIL(p, "expected a name, found '%c'", isprint(c) ? c : '?')
                 : FAIL(p, "expected a name before the end of the line");
    }
    size_t start = p->pos;
    while (p->pos < p->line_len && is_ident_char((unsigned char)p->line[p->pos])) p->pos++;
    size_t n = p->pos - start;
    if (n > NAME_MAX_LEN) return fail_at(p, start, "name longer than %d characters", NAME_MAX_LEN);
    memcpy(buf, p->line + start, n);
    buf[n] = '\0';
    return true;
}

/* Looks at the identifier at the cursor without consuming it. */
static bool peek_ident(parser *p, char buf[GML_MAX_NAME], int *after) {
    size_t save = p->pos;
    bool failed = p->failed;
    bool ok = is_ident_start(peek(p)) && ident(p, buf);
    *after = ok ? peek(p) : 0;
    p->pos = save;
    p->failed = failed;
    return ok;
}

/* ---- numbers: + - * / ( ) sqrt() over literals and symbols, in double ---- */

/* A number expression; *literal says it was one literal token, whose value
 * read straight as a float is *lit_f32 (so written floats read back exactly). */
static bool expr(parser *p, double *out, bool *literal, float *lit_f32);

static bool primary(parser *p, double *out, bool *literal, float *lit_f32) {
    int c = peek(p);
    *literal = false;
    if (c == '(') {
        p->pos++;
        bool lit;
        float f;
        return expr(p, out, &lit, &f) && expect(p, ')');
    }
    if (isdigit(c) || c == '.') {
        const char *s = p->line + p->pos;
        char buf[64];
        size_t n = 0;
        while (p->pos + n < p->line_len && n < sizeof buf - 1 &&
               (isalnum((unsigned char)s[n]) || s[n] == '.' ||
                ((s[n] == '+' || s[n] == '-') && (s[n - 1] == 'e' || s[n - 1] == 'E'))))
            n++;
        memcpy(buf, s, n);
        buf[n] = '\0';
        char *end;
        errno = 0;
        *out = strtod(buf, &end);
        if (end != buf + n || errno == ERANGE || !isfinite(*out))
            return FAIL(p, "bad number '%s'", buf);
        *lit_f32 = strtof(buf, NULL);
        *literal = true;
        p->pos += n;
        return true;
    }
    if (is_ident_start(c)) {
        size_t col = here(p);
        char name[GML_MAX_NAME];
        if (!ident(p, name)) return false;
        if (strcmp(name, "sqrt") == 0) {
            bool lit;
            float f;
            if (!expect(p, '(') || !expr(p, out, &lit, &f) || !expect(p, ')')) return false;
            if (*out < 0) return fail_at(p, col, "sqrt of a negative number (%g)", *out);
            *out = sqrt(*out);
            return true;
        }
        named *n = find_name(p, name);
        if (!n) return fail_at(p, col, "unknown symbol '%s'", name);
        if (n->t || n->none) return fail_at(p, col, "'%s' is a tensor, not a number", name);
        n->used = true;
        *out = (double)n->sym;
        return true;
    }
    if (!c) return FAIL(p, "expected a number before the end of the line");
    return FAIL(p, "expected a number, found '%c'", isprint(c) ? c : '?');
}

/* Counts one more level of nesting; fails past MAX_DEPTH. */
static bool enter(parser *p) {
    if (++p->depth <= MAX_DEPTH) return true;
    return FAIL(p, "nested more than %d levels deep", MAX_DEPTH);
}

static bool unary(parser *p, double *out, bool *literal, float *lit_f32) {
    if (accept(p, '-')) {
        bool ok = enter(p) && unary(p, out, literal, lit_f32);
        p->depth--;
        if (!ok) return false;
        *out = -*out;
        *lit_f32 = -*lit_f32;
        return true;
    }
    return primary(p, out, literal, lit_f32);
}

static bool term(parser *p, double *out, bool *literal, float *lit_f32) {
    if (!unary(p, out, literal, lit_f32)) return false;
    for (;;) {
        int op = peek(p);
        if (op != '*' && op != '/') return true;
        size_t col = p->pos++;
        double rhs;
        bool lit;
        float f;
        if (!unary(p, &rhs, &lit, &f)) return false;
        if (op == '/' && rhs == 0) return fail_at(p, col, "division by zero");
        *out = op == '*' ? *out * rhs : *out / rhs;
        *literal = false;
    }
}

static bool expr_body(parser *p, double *out, bool *literal, float *lit_f32);

static bool expr(parser *p, double *out, bool *literal, float *lit_f32) {
    bool ok = enter(p) && expr_body(p, out, literal, lit_f32);
    p->depth--;
    return ok;
}

static bool expr_body(parser *p, double *out, bool *literal, float *lit_f32) {
    if (!term(p, out, literal, lit_f32)) return false;
    for (;;) {
        int op = peek(p);
        if (op != '+' && op != '-') break;
        p->pos++;
        double rhs;
        bool lit;
        float f;
        if (!term(p, &rhs, &lit, &f)) return false;
        *out = op == '+' ? *out + rhs : *out - rhs;
        *literal = false;
    }
    if (!isfinite(*out)) return FAIL(p, "number overflows");
    if (!*literal) *lit_f32 = (float)*out;
    return true;
}

/* A whole number (sizes, axes, counts). */
static bool int_expr(parser *p, int64_t *out) {
    size_t col = here(p);
    double v;
    bool lit;
    float f;
    if (!expr(p, &v, &lit, &f)) return false;
    if (v != floor(v) || fabs(v) > 9.0e15)
        return fail_at(p, col, "expected a whole number, got %.17g", v);
    *out = (int64_t)v;
    return true;
}

/* [e, e, ...] with 1 to 4 entries. */
static bool int_list(parser *p, int64_t *out, int *n) {
    if (!expect(p, '[')) return false;
    *n = 0;
    if (accept(p, ']')) return FAIL(p, "an empty list; expected 1 to %d entries", GML_MAX_DIMS);
    do {
        if (*n == GML_MAX_DIMS) return FAIL(p, "more than %d entries", GML_MAX_DIMS);
        if (!int_expr(p, &out[(*n)++])) return false;
    } while (accept(p, ','));
    return expect(p, ']');
}

/* ---- calls ---------------------------------------------------------------- */

static bool call(parser *p, const char *opname, size_t col, gml_tensor **out);

/* A tensor argument: a name or a nested call. *out is NULL for none: the
 * word `none` (allowed only where allow_none says), or a name or call that
 * is none (always allowed here; the caller decides what none means). */
static bool tensor_arg(parser *p, gml_tensor **out, bool allow_none) {
    size_t col = here(p);
    char name[GML_MAX_NAME];
    if (!ident(p, name)) return false;
    *out = NULL;
    if (strcmp(name, "none") == 0) {
        if (allow_none) return true;
        return fail_at(p, col, "'none' where a tensor is needed");
    }
    if (peek(p) == '(') return call(p, name, col, out);
    named *n = find_name(p, name);
    if (!n) return fail_at(p, col, "unknown tensor '%s'", name);
    if (n->none) return true;
    if (!n->t) return fail_at(p, col, "'%s' is a number, not a tensor", name);
    *out = n->t;
    return true;
}

static bool arg_value(parser *p, const char *op, const gml_arg_spec *spec, gml_arg *v) {
    size_t col = here(p);
    switch (spec->kind) {
    case GML_ARG_TENSOR:
    case GML_ARG_OPT_TENSOR:
        return tensor_arg(p, &v->t, spec->kind == GML_ARG_OPT_TENSOR);
    case GML_ARG_INTS:
        return int_list(p, v->list, &v->n);
    case GML_ARG_BOOL: { /* true, false, or a whole number: 0 is false (e.g. causal=CAUSAL) */
        char word[GML_MAX_NAME];
        int after;
        if (peek_ident(p, word, &after) && (!strcmp(word, "true") || !strcmp(word, "false"))) {
            ident(p, word);
            v->i = word[0] == 't';
            return true;
        }
        int64_t i = 0;
        if (!int_expr(p, &i)) {
            p->failed = false;
            return fail_at(p, col, "%s: '%s' expects true, false or a whole number", op, spec->name);
        }
        v->i = i != 0;
        return true;
    }
    case GML_ARG_ENUM: { /* a name of the list, or its index as a whole number */
        char word[GML_MAX_NAME];
        int after, n = 0;
        while (spec->names[n]) n++;
        if (peek_ident(p, word, &after)) {
            const int e = gml_enum_index(spec, word, strlen(word));
            if (e >= 0) {
                ident(p, word);
                v->i = e;
                return true;
            }
        }
        /* a boolean-like enum (false, true, ...) takes a whole number as BOOL:
         * 0 false, else true (causal=CAUSAL in older graph files) */
        const bool boolish = n >= 2 && gml_enum_index(spec, "false", 5) == 0 &&
                             gml_enum_index(spec, "true", 4) == 1;
        int64_t i = 0;
        char list[256] = ""; /* every name, aliases too: "false, true, bottom_right, ..." */
        for (int e = 0; e < n; e++) {
            size_t at = strlen(list);
            snprintf(list + at, sizeof list - at, "%s%s", e ? ", " : "", spec->names[e]);
            for (char *c = list + at; *c; c++)
                if (*c == '|') *c = '/';
        }
        if (!boolish || !int_expr(p, &i)) {
            p->failed = false;
            return fail_at(p, col, "%s: '%s' expects one of %s%s", op, spec->name, list,
                           boolish ? " or a whole number (0 false, else true)" : "");
        }
        v->i = i != 0;
        return true;
    }
    case GML_ARG_INT:
        return int_expr(p, &v->i);
    case GML_ARG_FLOAT: {
        bool lit;
        double d;
        if (!expr(p, &d, &lit, &v->f)) return false;
        if (!isfinite(v->f)) return fail_at(p, col, "%s: '%s' is %g, past a float", op, spec->name, d);
        return true;
    }
    }
    return false;
}

static bool call_body(parser *p, const char *opname, size_t col, gml_tensor **out);

static bool call(parser *p, const char *opname, size_t col, gml_tensor **out) {
    bool ok = enter(p) && call_body(p, opname, col, out);
    p->depth--;
    return ok;
}

/* opname(args...) with the cursor on '('. Positional arguments fill the
 * form's arguments in order, then name=value ones any argument. */
static bool call_body(parser *p, const char *opname, size_t col, gml_tensor **out) {
    const gml_op_form *form = gml_form_find(opname);
    if (!form) {
        char known[512];
        size_t k = 0;
        for (int i = 0; i < gml_form_count() && k < sizeof known; i++)
            k += (size_t)snprintf(known + k, sizeof known - k, "%s%s", i ? ", " : "",
                                  gml_form_name(gml_form_at(i)));
        return fail_at(p, col, "unknown op '%s'; known ops: %s", opname, known);
    }
    const char *name_of = gml_form_name(form);
    const int n_spec = gml_form_n_args(form);
    gml_arg v[GML_MAX_ARGS];
    memset(v, 0, sizeof v);
    if (!expect(p, '(')) return false;
    int positional = 0;
    bool keywords = false;
    if (!accept(p, ')')) {
        do {
            size_t acol = here(p);
            char name[GML_MAX_NAME];
            int after, slot;
            if (peek_ident(p, name, &after) && after == '=') {
                ident(p, name);
                accept(p, '=');
                for (slot = 0; slot < n_spec && strcmp(gml_form_arg(form, slot)->name, name); slot++) {}
                if (slot == n_spec) return fail_at(p, acol, "%s has no argument '%s'", name_of, name);
                keywords = true;
            } else {
                if (keywords)
                    return fail_at(p, acol, "%s: a positional argument after name=value ones", name_of);
                if (positional == n_spec)
                    return fail_at(p, acol, "%s takes at most %d arguments", name_of, n_spec);
                slot = positional++;
            }
            if (v[slot].given)
                return fail_at(p, acol, "%s: argument '%s' given twice", name_of,
                               gml_form_arg(form, slot)->name);
            v[slot].given = true;
            if (!arg_value(p, name_of, gml_form_arg(form, slot), &v[slot])) return false;
        } while (accept(p, ','));
        if (!expect(p, ')')) return false;
    }
    for (int i = 0; i < n_spec; i++)
        if (!v[i].given && !gml_form_arg(form, i)->optional)
            return fail_at(p, col, "%s: missing argument '%s'", name_of, gml_form_arg(form, i)->name);
    /* add and mul take none on either side: add(none, b) is b, as add(a, none)
     * is a, so masks that are none compose (add(attn_mask, valid_len_mask(..))
     * keeps the valid lengths when attn_mask is none). */
    if ((strcmp(name_of, "add") == 0 || strcmp(name_of, "mul") == 0) && n_spec >= 2 && !v[0].t &&
        v[1].t) {
        *out = v[1].t;
        return true;
    }
    /* A tensor the op needs is none: so is the call (none flows on, as NaN does). */
    for (int i = 0; i < n_spec; i++)
        if (gml_form_arg(form, i)->kind == GML_ARG_TENSOR && !v[i].t) {
            *out = NULL;
            return true;
        }
    gml_tensor *t = gml_form_build(p->ctx, form, v);
    if (!t) return fail_at(p, col, "%s", gml_last_error(p->ctx));
    *out = t;
    return true;
}

/* ---- statements ------------------------------------------------------------ */

static bool at_end(parser *p) {
    if (peek(p) == 0) return true;
    return FAIL(p, "unexpected '%c' after the statement", isprint(peek(p)) ? peek(p) : '?');
}

/* input|param NAME TYPE [dims] [optional]: a dim that is a lone unknown
 * symbol takes the bound tensor's size. An optional declaration the binder
 * leaves unbound is none, unless its make_optional asks for a leaf. */
static bool declaration(parser *p, bool is_param) {
    size_t col = here(p);
    char name[GML_MAX_NAME], type_name[GML_MAX_NAME];
    if (!ident(p, name)) return false;
    size_t tcol = here(p);
    if (!ident(p, type_name)) return false;
    gml_type type;
    if (!gml_type_from_name(type_name, &type))
        return fail_at(p, tcol, "type '%s' is not f32, i32, f16, bf16 or q8_0", type_name);

    gml_tensor *bound = p->binder && p->binder->bind ? p->binder->bind(p->binder->user, name, is_param) : NULL;
    if (!expect(p, '[')) return false;
    int64_t ne[GML_MAX_DIMS];
    int n = 0;
    char pending[GML_MAX_DIMS][GML_MAX_NAME]; /* lone unknown symbols */
    size_t pending_col[GML_MAX_DIMS];
    do {
        if (n == GML_MAX_DIMS) return FAIL(p, "more than %d dimensions", GML_MAX_DIMS);
        char sym[GML_MAX_NAME];
        int after;
        pending[n][0] = '\0';
        pending_col[n] = here(p);
        if (peek_ident(p, sym, &after) && (after == ',' || after == ']') && !find_name(p, sym) &&
            strcmp(sym, "sqrt") != 0) {
            ident(p, sym);
            snprintf(pending[n], GML_MAX_NAME, "%s", sym);
            ne[n] = -1;
        } else if (!int_expr(p, &ne[n])) {
            return false;
        } else if (ne[n] < 1) {
            return fail_at(p, pending_col[n], "size %" PRId64 " of dim %d; sizes are >= 1", ne[n], n);
        }
        n++;
    } while (accept(p, ','));
    if (!expect(p, ']')) return false;
    bool optional = false;
    char word[GML_MAX_NAME];
    int after;
    bool default_none = false;
    if (peek_ident(p, word, &after) && strcmp(word, "optional") == 0) {
        ident(p, word);
        optional = true;
        if (peek_ident(p, word, &after) && strcmp(word, "default") == 0) {
            ident(p, word);
            size_t dcol = here(p);
            if (!ident(p, word)) return false;
            if (strcmp(word, "none") != 0)
                return fail_at(p, dcol, "default '%s': the only default is none", word);
            default_none = true;
        }
    }
    if (!at_end(p)) return false;

    char shape[GML_SHAPE_MAX];
    if (!bound && optional && p->binder && p->binder->bind &&
        !(p->binder->make_optional && p->binder->make_optional(p->binder->user, name, is_param))) {
        if (!is_param && !default_none && p->binder->optional_needs_default)
            return fail_at(p, col, "input '%s' is optional, but nothing binds it and it declares no "
                           "default: bind it, or write `optional default none` to make it none "
                           "when not given", name);
        return define_none(p, col, name);
    }
    if (bound) {
        /* a param declared f32 takes a weight of another float type (a bf16
         * checkpoint, run-graph --weights-dtype): the ops say what they take */
        const bool converted = is_param && type == GML_F32 && bound->type != GML_I32;
        if ((bound->type != type && !converted) || bound->n_dims != n)
            return fail_at(p, col, "%s '%s' is declared %s with %d dims, but the bound tensor is %s %s",
                           is_param ? "param" : "input", name, type_name, n,
                           gml_type_name(bound->type), GML_SHAPE(bound, shape));
        for (int i = 0; i < n; i++) {
            int64_t have = bound->ne[GML_MAX_DIMS - n + i];
            if (pending[i][0]) {
                if (!define(p, pending_col[i], pending[i], NULL, have)) return false;
            } else if (ne[i] != have) {
                return fail_at(p, col, "%s '%s': dim %d is declared %" PRId64 " but the bound tensor is %s",
                               is_param ? "param" : "input", name, i, ne[i], GML_SHAPE(bound, shape));
            }
        }
    } else {
        for (int i = 0; i < n; i++)
            if (pending[i][0]) return fail_at(p, pending_col[i], "unknown symbol '%s'", pending[i]);
        bound = gml_new_tensor(p->ctx, type, n, ne);
        if (!bound) return fail_at(p, col, "%s", gml_last_error(p->ctx));
        gml_set_name(bound, name);
    }
    gml_set_flags(bound, is_param ? GML_FLAG_PARAM : GML_FLAG_INPUT);
    return define(p, col, name, bound, 0);
}

static bool statement(parser *p, gml_tensor **outputs, int max_outputs, int *n_outputs) {
    size_t col = here(p);
    char word[GML_MAX_NAME];
    if (!ident(p, word)) return false;
    if (strcmp(word, "input") == 0 || strcmp(word, "param") == 0)
        return declaration(p, word[0] == 'p');
    if (strcmp(word, "let") == 0) {
        char name[GML_MAX_NAME];
        size_t ncol = here(p);
        int64_t v = 0;
        return ident(p, name) && expect(p, '=') && int_expr(p, &v) && at_end(p) &&
               define(p, ncol, name, NULL, v);
    }
    if (strcmp(word, "output") == 0) {
        do {
            size_t ocol = here(p);
            gml_tensor *t;
            if (!tensor_arg(p, &t, false)) return false;
            if (!t) return fail_at(p, ocol, "output is none (made from an optional input that was not given)");
            if (*n_outputs == max_outputs)
                return fail_at(p, ocol, "more than %d outputs", max_outputs);
            outputs[(*n_outputs)++] = t;
        } while (accept(p, ','));
        return at_end(p);
    }
    /* NAME = call(...) or NAME = other_name */
    if (!expect(p, '=')) return false;
    gml_tensor *t;
    if (!tensor_arg(p, &t, false) || !at_end(p)) return false;
    if (!t) return define_none(p, col, word);
    bool fresh = !is_named(p, t); /* a tensor named before keeps its name */
    if (!define(p, col, word, t, 0)) return false;
    if (fresh) gml_set_name(t, word);
    return true;
}

int gml_parse_graph(gml_context *ctx, const char *text, size_t len, const char *what,
                    const gml_graph_binder *binder, gml_tensor **outputs, int max_outputs,
                    char *err, size_t err_size) {
    GML_IO_NONNULL(ctx, -1, err, err_size);
    GML_IO_NONNULL(text, -1, err, err_size);
    if (max_outputs > 0) GML_IO_NONNULL(outputs, -1, err, err_size);
    if (binder && binder->n_syms > 0) {
        GML_IO_NONNULL(binder->sym_names, -1, err, err_size);
        GML_IO_NONNULL(binder->sym_values, -1, err, err_size);
    }
    parser p = {.ctx = ctx, .what = what ? what : "<graph>", .binder = binder, .err = err,
                .err_size = err_size};
    int n_outputs = 0;
    bool ok = true;
    if (binder)
        for (int i = 0; i < binder->n_syms && ok; i++)
            ok = define(&p, 0, binder->sym_names[i], NULL, binder->sym_values[i]);
    /* a UTF-8 byte-order mark (as some editors write) at the start is not text */
    size_t start = len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
    while (ok && start < len) {
        size_t end = start;
        while (end < len && text[end] != '\n') end++;
        p.line = text + start;
        p.line_len = end - start;
        p.lineno++;
        p.pos = 0;
        if (memchr(p.line, '\0', p.line_len)) ok = FAIL(&p, "a NUL byte: graph files are text");
        else if (peek(&p)) ok = statement(&p, outputs, max_outputs, &n_outputs);
        start = end + 1;
    }
    if (ok && n_outputs == 0) {
        p.lineno++;
        p.pos = 0;
        p.line_len = 0;
        ok = FAIL(&p, "no 'output' statement: nothing to compute");
    }
    if (ok && binder && binder->sym_used) /* the caller's symbols are the first names */
        for (int i = 0; i < binder->n_syms; i++) binder->sym_used[i] = p.names[i].used;
    free(p.names);
    gml_hashindex_free(&p.name_index);
    gml_hashindex_free(&p.tensor_index);
    return ok ? n_outputs : -1;
}

int gml_load_graph(gml_context *ctx, const char *path, const gml_graph_binder *binder,
                   gml_tensor **outputs, int max_outputs, char *err, size_t err_size) {
    GML_IO_NONNULL(ctx, -1, err, err_size);
    GML_IO_NONNULL(path, -1, err, err_size);
    if (max_outputs > 0) GML_IO_NONNULL(outputs, -1, err, err_size);
    void *buf;
    size_t len;
    if (!gml_read_file(path, &buf, &len, err, err_size)) return -1;
    int n = gml_parse_graph(ctx, buf, len, path, binder, outputs, max_outputs, err, err_size);
    free(buf);
    return n;
}

/* ---- the writer ------------------------------------------------------------ */

/* Names in the file: a tensor's own name when it is a fresh identifier
 * (leafs must keep theirs: binding is by name), else t<index>. */
typedef struct namer {
    const gml_graph *g;
    char (*names)[GML_MAX_NAME]; /* per graph entry */
    gml_hashindex taken;         /* the names given so far -> their entry */
} namer;

static const char *ref_name(void *n, const gml_tensor *t) {
    const namer *nm = n;
    int i = gml_graph_tensor_index(nm->g, t);
    return i < 0 ? "?" : nm->names[i];
}

static bool valid_ident(const char *s) {
    if (!is_ident_start((unsigned char)*s)) return false;
    for (const char *c = s; *c; c++)
        if (!is_ident_char((unsigned char)*c)) return false;
    for (size_t i = 0; i < sizeof RESERVED / sizeof *RESERVED; i++)
        if (strcmp(s, RESERVED[i]) == 0) return false;
    return true;
}

/* The index's equality: entry val was given the name key. */
static bool given_is(const void *names, int val, const void *key) {
    return strcmp(((const char (*)[GML_MAX_NAME])names)[val], key) == 0;
}

/* Whether a name given so far is s. */
static bool name_taken(const namer *nm, const char *s) {
    return gml_hashindex_find(&nm->taken, gml_hash_str(s), given_is, nm->names, s) >= 0;
}

/* Records entry i's name as given (false if malloc fails). */
static bool give(namer *nm, int i) {
    return gml_hashindex_add(&nm->taken, gml_hash_str(nm->names[i]), i);
}

/* Makes entry i's name differ from those given so far: append '_' while it
 * can grow, then make its last character '_'. A full-length name that ends
 * in '_' and is still taken would stay so (that looped forever): it becomes
 * t<i>_<k> instead, growing again; some k is free, there are finitely many
 * names. */
static void rename_apart(namer *nm, int i) {
    char *s = nm->names[i];
    int k = 0;
    while (name_taken(nm, s)) {
        size_t n = strlen(s);
        if (n + 2 < GML_MAX_NAME) strcat(s, "_");
        else if (s[n - 1] != '_') s[n - 1] = '_';
        else snprintf(s, GML_MAX_NAME, "t%d_%d", i, k++);
    }
}

/* Gives every entry its name in the file: its own unless an earlier entry
 * has it, else t<i>; then renames apart the ones that still collide. */
static gml_status name_entries(namer *nm, const char *path, char *err, size_t err_size) {
    const gml_graph *g = nm->g;
    const int n = gml_graph_n_tensors(g);
    for (int i = 0; i < n; i++) {
        const gml_tensor *t = gml_graph_tensor_at(g, i);
        if (t->op == GML_OP_NONE && !valid_ident(t->name)) {
            gml_errf(err, err_size,
                     "%s: leaf '%s' has no name a graph file can use ([A-Za-z_][A-Za-z0-9_.]*)",
                     path, t->name);
            return GML_ERR_INVALID;
        }
        if (valid_ident(t->name) && !name_taken(nm, t->name))
            snprintf(nm->names[i], GML_MAX_NAME, "%s", t->name);
        else
            snprintf(nm->names[i], GML_MAX_NAME, "t%d", i);
        if (!give(nm, i)) return gml_errf(err, err_size, "%s: out of memory", path), GML_ERR_NOMEM;
    }
    /* A generated t<i> may collide with a later tensor's own name: walk again,
     * renaming each entry apart from the final names before it. */
    gml_hashindex_clear(&nm->taken);
    for (int i = 0; i < n; i++) {
        rename_apart(nm, i);
        if (!give(nm, i)) return gml_errf(err, err_size, "%s: out of memory", path), GML_ERR_NOMEM;
    }
    return GML_OK;
}

gml_status gml_save_graph(const char *path, const gml_graph *g, gml_tensor *const *outputs,
                          int n_outputs, char *err, size_t err_size) {
    GML_IO_NONNULL(path, GML_ERR_INVALID, err, err_size);
    GML_IO_NONNULL(g, GML_ERR_INVALID, err, err_size);
    if (n_outputs > 0) GML_IO_NONNULL(outputs, GML_ERR_INVALID, err, err_size);
    namer nm = {.g = g, .names = calloc((size_t)gml_graph_n_tensors(g), GML_MAX_NAME)};
    if (!nm.names) return gml_errf(err, err_size, "%s: out of memory", path), GML_ERR_NOMEM;
    gml_status st = name_entries(&nm, path, err, err_size);
    gml_hashindex_free(&nm.taken); /* the names are final: only ref_name reads them now */
    if (st != GML_OK) {
        free(nm.names);
        return st;
    }

    gml_outfile out;
    if (!gml_outfile_open(&out, path, err, err_size)) {
        free(nm.names);
        return GML_ERR_IO;
    }
    FILE *f = out.f;
    char shape[GML_SHAPE_MAX], call[GML_MAX_ARGS * GML_MAX_NAME * 2];
    const int n_leafs = gml_graph_n_leafs(g), n_nodes = gml_graph_n_nodes(g);
    fprintf(f, "# ggmlite graph 1: %d leafs, %d nodes\n", n_leafs, n_nodes);
    for (int i = 0; i < n_leafs; i++) {
        const gml_tensor *t = gml_graph_leaf(g, i);
        fprintf(f, "%s %s %s ", t->flags & GML_FLAG_PARAM ? "param" : "input", ref_name(&nm, t),
                gml_type_name(t->type));
        fputc('[', f);
        for (int d = GML_MAX_DIMS - t->n_dims; d < GML_MAX_DIMS; d++)
            fprintf(f, "%s%" PRId64, d > GML_MAX_DIMS - t->n_dims ? ", " : "", t->ne[d]);
        fputs("]\n", f);
    }
    for (int i = 0; i < n_nodes; i++) {
        const gml_tensor *t = gml_graph_node(g, i);
        gml_format_node(t, ref_name, &nm, call, sizeof call); /* names < 64: it fits */
        fprintf(f, "%s = %s  # %s\n", ref_name(&nm, t), call, gml_format_shape(t, shape, sizeof shape));
    }
    for (int i = 0; i < n_outputs; i++) fprintf(f, "output %s\n", ref_name(&nm, outputs[i]));
    free(nm.names);
    bool ok = !ferror(f) ? gml_outfile_commit(&out, err, err_size)
                         : (gml_outfile_abort(&out), gml_errf(err, err_size, "%s: write failed", path));
    return ok ? GML_OK : GML_ERR_IO;
}

/* ---- the op table ------------------------------------------------------------ */

void gml_write_op_table(FILE *f) {
    GML_IO_NONNULL(f, , NULL, 0);
    fputs("| op | arguments | result |\n| --- | --- | --- |\n", f);
    for (int i = 0; i < gml_form_count(); i++) {
        const gml_op_form *form = gml_form_at(i);
        fprintf(f, "| `%s(", gml_form_name(form));
        for (int a = 0; a < gml_form_n_args(form); a++) {
            const gml_arg_spec *spec = gml_form_arg(form, a);
            fprintf(f, "%s%s", a ? ", " : "", spec->name);
            if (spec->optional) fprintf(f, "=%s", spec->def);
        }
        fprintf(f, ")` | %s | %s |\n", gml_form_doc_args(form), gml_form_doc_result(form));
    }
}
