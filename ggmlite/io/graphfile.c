/* Graph files: a line-oriented text form of graphs (see "graph files" in
 * ggmlite.h and tools/graphs/README.md). One table below gives each op its
 * arguments (for the parser) and its text (for the writer). */
#include "file.h"
#include "graph.h"
#include "hashindex.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_LEN (GML_MAX_NAME - 1)
#define MAX_DEPTH 100 /* nesting of ( ), unary minus and calls: keeps the recursion off the stack's end */
#define MAX_ARGS 8

/* ---- values an argument can take ------------------------------------------ */

typedef enum { V_NONE, V_TENSOR, V_NUM, V_LIST, V_BOOL } vkind;

typedef struct value {
    vkind kind;
    gml_tensor *t;
    double num;     /* V_NUM (and V_BOOL as 0/1) */
    float num_f32;  /* the same number read straight as a float when it was a literal */
    int64_t list[GML_MAX_DIMS];
    int list_n;
} value;

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

/* ---- ops: arguments (parser) and text (writer), one row each --------------- */

/* Argument kinds: T tensor, M tensor or none, I whole number, F number,
 * L list of whole numbers, B true/false. */
typedef struct argspec {
    const char *name;
    char kind;
    bool optional;
} argspec;

typedef gml_tensor *(*build_fn)(gml_context *ctx, const value *v);

/* Writes the arguments of node t; `ref` names a source. */
typedef void (*write_fn)(FILE *f, const gml_tensor *t, const char *(*ref)(const void *, const gml_tensor *),
                         const void *names);

typedef struct opform {
    const char *name;
    gml_op op;        /* the node op it writes; GML_OP_NONE for parse-only forms */
    argspec args[MAX_ARGS];
    build_fn build;
    write_fn write;
} opform;

static float num_f32(const value *v) { return v->num_f32; }

static gml_tensor *b_view(gml_context *c, const value *v) {
    size_t nb[GML_MAX_DIMS];
    if (v[2].list_n != v[1].list_n) {
        char s[GML_SHAPE_MAX];
        return gml_fail(c, "view(%s): %d sizes but %d strides (input %s)", v[0].t->name,
                        v[1].list_n, v[2].list_n, GML_SHAPE(v[0].t, s));
    }
    size_t es = gml_type_size(v[0].t->type);
    for (int i = 0; i < v[2].list_n; i++) {
        if (v[2].list[i] < 0) return gml_fail(c, "view(%s): negative stride %" PRId64, v[0].t->name, v[2].list[i]);
        nb[i] = (size_t)v[2].list[i] * es;
    }
    if (v[3].num < 0) return gml_fail(c, "view(%s): negative offset %.0f", v[0].t->name, v[3].num);
    return gml_view(c, v[0].t, v[1].list_n, v[1].list, nb, (size_t)v[3].num * es);
}
static gml_tensor *b_reshape(gml_context *c, const value *v) { return gml_reshape(c, v[0].t, v[1].list_n, v[1].list); }
static gml_tensor *b_permute(gml_context *c, const value *v) {
    char s[GML_SHAPE_MAX];
    if (v[1].list_n != v[0].t->n_dims)
        return gml_fail(c, "permute(%s): %d axes for a %d-D input %s", v[0].t->name, v[1].list_n,
                        v[0].t->n_dims, GML_SHAPE(v[0].t, s));
    int axes[GML_MAX_DIMS];
    for (int i = 0; i < v[1].list_n; i++) axes[i] = (int)GML_MAX(GML_MIN(v[1].list[i], 64), -64);
    return gml_permute(c, v[0].t, axes);
}
static gml_tensor *b_transpose(gml_context *c, const value *v) {
    return gml_transpose(c, v[0].t, (int)GML_MAX(GML_MIN(v[1].num, 64), -64), (int)GML_MAX(GML_MIN(v[2].num, 64), -64));
}
static gml_tensor *b_cont(gml_context *c, const value *v) { return gml_cont(c, v[0].t); }
static gml_tensor *b_cpy(gml_context *c, const value *v) { return gml_cpy(c, v[0].t, v[1].t); }
static gml_tensor *b_matmul(gml_context *c, const value *v) { return gml_matmul(c, v[0].t, v[1].t); }
static gml_tensor *b_linear(gml_context *c, const value *v) { return gml_linear(c, v[0].t, v[1].t, v[2].t); }
/* add(a, none) and mul(a, none) are a: a term or factor left out. */
static gml_tensor *b_add(gml_context *c, const value *v) { return v[1].t ? gml_add(c, v[0].t, v[1].t) : v[0].t; }
static gml_tensor *b_mul(gml_context *c, const value *v) { return v[1].t ? gml_mul(c, v[0].t, v[1].t) : v[0].t; }
static gml_tensor *b_scale(gml_context *c, const value *v) { return gml_scale(c, v[0].t, num_f32(&v[1])); }
static gml_tensor *b_softmax(gml_context *c, const value *v) {
    return gml_softmax(c, v[0].t, v[1].t, v[2].kind == V_NONE ? 1.0f : num_f32(&v[2]), v[3].num != 0);
}
static gml_tensor *b_repeat(gml_context *c, const value *v) {
    if (v[1].num < 1 || v[1].num > INT32_MAX)
        return gml_fail(c, "repeat_interleave(%s): repeats is %.0f, must be in [1, 2^31)", v[0].t->name, v[1].num);
    return gml_repeat_interleave(c, v[0].t, (int)v[1].num, (int)GML_MAX(GML_MIN(v[2].num, 64), -64));
}
static gml_tensor *b_get_rows(gml_context *c, const value *v) { return gml_get_rows(c, v[0].t, v[1].t); }
static gml_tensor *b_set_rows(gml_context *c, const value *v) { return gml_set_rows(c, v[0].t, v[1].t, v[2].t); }
static gml_tensor *b_after(gml_context *c, const value *v) { return gml_after(c, v[0].t, v[1].t); }
static gml_tensor *b_flash(gml_context *c, const value *v) { /* scale: 1/sqrt(d_k) unless given */
    float scale = v[5].kind == V_NONE ? (float)(1.0 / sqrt((double)v[0].t->ne[3])) : num_f32(&v[5]);
    return gml_flash_attn(c, v[0].t, v[1].t, v[2].t, v[3].t, v[4].t, scale, v[6].num != 0);
}
static gml_tensor *b_len_mask(gml_context *c, const value *v) { return gml_valid_len_mask(c, v[0].t, (int64_t)v[1].num); }
static gml_tensor *b_relpos(gml_context *c, const value *v) {
    if (v[0].num < 1 || v[1].num < 1 || v[0].num > 1e9 || v[1].num > 1e9)
        return gml_fail(c, "relpos_index: sizes %.0f x %.0f out of range [1, 1e9]", v[0].num, v[1].num);
    if (v[2].num < 0 || v[2].num > (1 << 24))
        return gml_fail(c, "relpos_index: max relative position %.0f is out of range [0, 2^24]", v[2].num);
    return gml_relpos_index(c, (int64_t)v[0].num, (int64_t)v[1].num, (int)v[2].num);
}

/* Writers: print after "name = op(". */
#define SRC(i) ref(names, t->src[i])
static void write_list_i64(FILE *f, const int64_t *v, int n) {
    fputc('[', f);
    for (int i = 0; i < n; i++) fprintf(f, "%s%" PRId64, i ? ", " : "", v[i]);
    fputc(']', f);
}
static void w_view(FILE *f, const gml_tensor *t, const char *(*ref)(const void *, const gml_tensor *), const void *names) {
    int64_t ne[GML_MAX_DIMS], nb[GML_MAX_DIMS];
    size_t es = gml_type_size(t->type);
    for (int i = 0; i < t->n_dims; i++) {
        ne[i] = t->ne[GML_MAX_DIMS - t->n_dims + i];
        nb[i] = (int64_t)(t->nb[GML_MAX_DIMS - t->n_dims + i] / es);
    }
    size_t offs = (size_t)(uint32_t)t->op_params[0] | (size_t)(uint32_t)t->op_params[1] << 31;
    fprintf(f, "%s, ", SRC(0));
    write_list_i64(f, ne, t->n_dims);
    fputs(", ", f);
    write_list_i64(f, nb, t->n_dims);
    fprintf(f, ", %zu", offs / es);
}
static void w_shape(FILE *f, const gml_tensor *t, const char *(*ref)(const void *, const gml_tensor *), const void *names) {
    fprintf(f, "%s, ", SRC(0));
    write_list_i64(f, t->ne + GML_MAX_DIMS - t->n_dims, t->n_dims);
}
static void w_permute(FILE *f, const gml_tensor *t, const char *(*ref)(const void *, const gml_tensor *), const void *names) {
    int64_t ax[GML_MAX_DIMS];
    for (int i = 0; i < t->n_dims; i++) ax[i] = t->op_params[i];
    fprintf(f, "%s, ", SRC(0));
    write_list_i64(f, ax, t->n_dims);
}
static void w_transpose(FILE *f, const gml_tensor *t, const char *(*ref)(const void *, const gml_tensor *), const void *names) {
    fprintf(f, "%s, %d, %d", SRC(0), (int)t->op_params[0], (int)t->op_params[1]);
}
static void w_srcs(FILE *f, const gml_tensor *t, const char *(*ref)(const void *, const gml_tensor *), const void *names) {
    for (int i = 0; i < GML_MAX_SRC && t->src[i]; i++) fprintf(f, "%s%s", i ? ", " : "", SRC(i));
}
static void w_scale(FILE *f, const gml_tensor *t, const char *(*ref)(const void *, const gml_tensor *), const void *names) {
    fprintf(f, "%s, %.9g", SRC(0), (double)gml_param_f32(t, 0));
}
static void w_softmax(FILE *f, const gml_tensor *t, const char *(*ref)(const void *, const gml_tensor *), const void *names) {
    fprintf(f, "%s", SRC(0));
    if (t->src[1]) fprintf(f, ", %s", SRC(1));
    fprintf(f, ", scale=%.9g, causal=%s", (double)gml_param_f32(t, 0), t->op_params[1] ? "true" : "false");
}
static void w_repeat(FILE *f, const gml_tensor *t, const char *(*ref)(const void *, const gml_tensor *), const void *names) {
    fprintf(f, "%s, %d, %d", SRC(0), (int)t->op_params[1], t->op_params[0] - (GML_MAX_DIMS - t->n_dims));
}
static void w_flash(FILE *f, const gml_tensor *t, const char *(*ref)(const void *, const gml_tensor *), const void *names) {
    fprintf(f, "%s, %s, %s", SRC(0), SRC(1), SRC(2));
    if (t->src[3]) fprintf(f, ", mask=%s", SRC(3));
    if (t->src[4]) fprintf(f, ", valid_lens=%s", SRC(4));
    fprintf(f, ", scale=%.9g, causal=%s", (double)gml_param_f32(t, 0), t->op_params[1] ? "true" : "false");
}
static void w_len_mask(FILE *f, const gml_tensor *t, const char *(*ref)(const void *, const gml_tensor *), const void *names) {
    fprintf(f, "%s, %" PRId64, SRC(0), t->ne[3]);
}
static void w_relpos(FILE *f, const gml_tensor *t, const char *(*ref)(const void *, const gml_tensor *), const void *names) {
    (void)ref, (void)names;
    fprintf(f, "%" PRId64 ", %" PRId64 ", %d", t->ne[2], t->ne[3], (int)t->op_params[0]);
}
#undef SRC

#define T(n) {n, 'T', false}
static const opform FORMS[] = {
    {"view", GML_OP_VIEW, {T("a"), {"shape", 'L', false}, {"strides", 'L', false}, {"offset", 'I', true}}, b_view, w_view},
    {"reshape", GML_OP_RESHAPE, {T("a"), {"shape", 'L', false}}, b_reshape, w_shape},
    {"permute", GML_OP_PERMUTE, {T("a"), {"axes", 'L', false}}, b_permute, w_permute},
    {"transpose", GML_OP_TRANSPOSE, {T("a"), {"d0", 'I', false}, {"d1", 'I', false}}, b_transpose, w_transpose},
    {"cont", GML_OP_CONT, {T("a")}, b_cont, w_srcs},
    {"cpy", GML_OP_CPY, {T("a"), T("dst")}, b_cpy, w_srcs},
    {"matmul", GML_OP_MATMUL, {T("a"), T("b")}, b_matmul, w_srcs},
    {"linear", GML_OP_NONE, {T("x"), T("w"), {"bias", 'M', true}}, b_linear, NULL},
    {"add", GML_OP_ADD, {T("a"), {"b", 'M', false}}, b_add, w_srcs},
    {"mul", GML_OP_MUL, {T("a"), {"b", 'M', false}}, b_mul, w_srcs},
    {"scale", GML_OP_SCALE, {T("a"), {"s", 'F', false}}, b_scale, w_scale},
    {"softmax", GML_OP_SOFTMAX, {T("x"), {"mask", 'M', true}, {"scale", 'F', true}, {"causal", 'B', true}}, b_softmax, w_softmax},
    {"repeat_interleave", GML_OP_REPEAT_INTERLEAVE, {T("x"), {"repeats", 'I', false}, {"dim", 'I', false}}, b_repeat, w_repeat},
    {"get_rows", GML_OP_GET_ROWS, {T("table"), T("idx")}, b_get_rows, w_srcs},
    {"valid_len_mask", GML_OP_VALID_LEN_MASK, {T("lens"), {"tk", 'I', false}}, b_len_mask, w_len_mask},
    {"relpos_index", GML_OP_RELPOS_INDEX, {{"tq", 'I', false}, {"tk", 'I', false}, {"max_rel", 'I', false}}, b_relpos, w_relpos},
    {"flash_attn", GML_OP_FLASH_ATTN, {T("q"), T("k"), T("v"), {"mask", 'M', true}, {"valid_lens", 'M', true}, {"scale", 'F', true}, {"causal", 'B', true}}, b_flash, w_flash},
    {"set_rows", GML_OP_SET_ROWS, {T("dst"), T("src"), T("idx")}, b_set_rows, w_srcs},
    {"after", GML_OP_AFTER, {T("t"), T("dep")}, b_after, w_srcs},
};
#undef T
#define N_FORMS (int)(sizeof FORMS / sizeof *FORMS)

static const opform *form_by_name(const char *name) {
    for (int i = 0; i < N_FORMS; i++)
        if (strcmp(FORMS[i].name, name) == 0) return &FORMS[i];
    return NULL;
}

static const opform *form_by_op(gml_op op) {
    for (int i = 0; i < N_FORMS; i++)
        if (FORMS[i].op == op && FORMS[i].write) return &FORMS[i];
    return NULL;
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

static bool arg_value(parser *p, const opform *form, const argspec *spec, value *v) {
    size_t col = here(p);
    switch (spec->kind) {
    case 'T':
    case 'M':
        v->kind = V_TENSOR;
        if (!tensor_arg(p, &v->t, spec->kind == 'M')) return false;
        if (!v->t) v->kind = V_NONE;
        return true;
    case 'L':
        v->kind = V_LIST;
        return int_list(p, v->list, &v->list_n);
    case 'B': { /* true, false, or a whole number: 0 is false (e.g. causal=CAUSAL) */
        char word[GML_MAX_NAME];
        int after;
        v->kind = V_BOOL;
        if (peek_ident(p, word, &after) && (!strcmp(word, "true") || !strcmp(word, "false"))) {
            ident(p, word);
            v->num = word[0] == 't';
            return true;
        }
        int64_t i = 0;
        if (!int_expr(p, &i)) {
            p->failed = false;
            return fail_at(p, col, "%s: '%s' expects true, false or a whole number", form->name,
                           spec->name);
        }
        v->num = i != 0;
        return true;
    }
    case 'I': {
        int64_t i = 0;
        if (!int_expr(p, &i)) return false;
        v->kind = V_NUM;
        v->num = (double)i;
        v->num_f32 = (float)i;
        return true;
    }
    default: { /* 'F' */
        bool lit;
        v->kind = V_NUM;
        return expr(p, &v->num, &lit, &v->num_f32);
    }
    }
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
    const opform *form = form_by_name(opname);
    if (!form) {
        char known[512];
        size_t k = 0;
        for (int i = 0; i < N_FORMS && k < sizeof known; i++)
            k += (size_t)snprintf(known + k, sizeof known - k, "%s%s", i ? ", " : "", FORMS[i].name);
        return fail_at(p, col, "unknown op '%s'; known ops: %s", opname, known);
    }
    value v[MAX_ARGS];
    bool given[MAX_ARGS] = {false};
    memset(v, 0, sizeof v);
    int n_spec = 0;
    while (n_spec < MAX_ARGS && form->args[n_spec].name) n_spec++;
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
                for (slot = 0; slot < n_spec && strcmp(form->args[slot].name, name); slot++) {}
                if (slot == n_spec) return fail_at(p, acol, "%s has no argument '%s'", form->name, name);
                keywords = true;
            } else {
                if (keywords)
                    return fail_at(p, acol, "%s: a positional argument after name=value ones", form->name);
                if (positional == n_spec)
                    return fail_at(p, acol, "%s takes at most %d arguments", form->name, n_spec);
                slot = positional++;
            }
            if (given[slot])
                return fail_at(p, acol, "%s: argument '%s' given twice", form->name, form->args[slot].name);
            given[slot] = true;
            if (!arg_value(p, form, &form->args[slot], &v[slot])) return false;
        } while (accept(p, ','));
        if (!expect(p, ')')) return false;
    }
    for (int i = 0; i < n_spec; i++)
        if (!given[i] && !form->args[i].optional)
            return fail_at(p, col, "%s: missing argument '%s'", form->name, form->args[i].name);
    /* A tensor the op needs is none: so is the call (none flows on, as NaN does). */
    for (int i = 0; i < n_spec; i++)
        if (form->args[i].kind == 'T' && v[i].kind == V_NONE) {
            *out = NULL;
            return true;
        }
    gml_tensor *t = form->build(p->ctx, v);
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
    if (strcmp(type_name, "f32") == 0) type = GML_F32;
    else if (strcmp(type_name, "i32") == 0) type = GML_I32;
    else return fail_at(p, tcol, "type '%s' is not f32 or i32", type_name);

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
    if (peek_ident(p, word, &after) && strcmp(word, "optional") == 0) {
        ident(p, word);
        optional = true;
    }
    if (!at_end(p)) return false;

    char shape[GML_SHAPE_MAX];
    if (!bound && optional && p->binder && p->binder->bind &&
        !(p->binder->make_optional && p->binder->make_optional(p->binder->user, name, is_param)))
        return define_none(p, col, name);
    if (bound) {
        if (bound->type != type || bound->n_dims != n)
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
    parser p = {.ctx = ctx, .what = what ? what : "<graph>", .binder = binder, .err = err,
                .err_size = err_size};
    int n_outputs = 0;
    bool ok = true;
    if (binder)
        for (int i = 0; i < binder->n_syms && ok; i++)
            ok = define(&p, 0, binder->sym_names[i], NULL, binder->sym_values[i]);
    size_t start = 0;
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

static const char *ref_name(const void *n, const gml_tensor *t) {
    const namer *nm = n;
    int i = gml_graph_entry(nm->g, t);
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
    for (int i = 0; i < g->n_entries; i++) {
        const gml_tensor *t = g->entries[i].t;
        if (t->op == GML_OP_NONE && !valid_ident(t->name)) {
            gml_errf(err, err_size,
                     "%s: leaf '%s' has no name a graph file can use ([A-Za-z_][A-Za-z0-9_.]*)",
                     path, t->name);
            return GML_ERR_INVALID;
        }
        if (t->op != GML_OP_NONE && !form_by_op(t->op)) {
            gml_errf(err, err_size, "%s: op '%s' has no graph-file form", path, gml_op_name(t->op));
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
    for (int i = 0; i < g->n_entries; i++) {
        rename_apart(nm, i);
        if (!give(nm, i)) return gml_errf(err, err_size, "%s: out of memory", path), GML_ERR_NOMEM;
    }
    return GML_OK;
}

gml_status gml_save_graph(const char *path, const gml_graph *g, gml_tensor *const *outputs,
                          int n_outputs, char *err, size_t err_size) {
    namer nm = {.g = g, .names = calloc((size_t)g->n_entries, GML_MAX_NAME)};
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
    char shape[GML_SHAPE_MAX];
    fprintf(f, "# ggmlite graph 1: %d leafs, %d nodes\n", g->n_leafs, g->n_nodes);
    for (int i = 0; i < g->n_leafs; i++) {
        const gml_tensor *t = g->leafs[i];
        fprintf(f, "%s %s %s ", t->flags & GML_FLAG_PARAM ? "param" : "input", ref_name(&nm, t),
                gml_type_name(t->type));
        write_list_i64(f, t->ne + GML_MAX_DIMS - t->n_dims, t->n_dims);
        fputc('\n', f);
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const gml_tensor *t = g->nodes[i];
        const opform *form = form_by_op(t->op);
        fprintf(f, "%s = %s(", ref_name(&nm, t), form->name);
        form->write(f, t, ref_name, &nm);
        fprintf(f, ")  # %s\n", gml_format_shape(t, shape, sizeof shape));
    }
    for (int i = 0; i < n_outputs; i++) fprintf(f, "output %s\n", ref_name(&nm, outputs[i]));
    free(nm.names);
    bool ok = !ferror(f) ? gml_outfile_commit(&out, err, err_size)
                         : (gml_outfile_abort(&out), gml_errf(err, err_size, "%s: write failed", path));
    return ok ? GML_OK : GML_ERR_IO;
}
