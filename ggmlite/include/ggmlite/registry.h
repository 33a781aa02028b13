/* ggmlite's op registry: every op as a call with named arguments. Part of
 * <ggmlite/ggmlite.h>, which includes it. */
#ifndef GGMLITE_REGISTRY_H
#define GGMLITE_REGISTRY_H

#include <ggmlite/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- ops as calls: the registry ---------------------------------------------
 * Every op of ops.inc, and the builder-only forms (linear: a matmul and an
 * add), has a call form, "softmax(s, mask=m, scale=0.125, causal=true)": its
 * named arguments, a builder taking their values, and for ops the way back
 * from a node to the values. Graph files (ggmlite/io.h), gml_graph_print and
 * DOT labels all use it, and so can a bindings generator. Read-only. */

typedef enum gml_arg_kind {
    GML_ARG_TENSOR,     /* a tensor; none there makes the whole call none */
    GML_ARG_OPT_TENSOR, /* a tensor or none (NULL): a bias, a mask */
    GML_ARG_INT,        /* a whole number */
    GML_ARG_FLOAT,      /* a number, as a float */
    GML_ARG_BOOL,       /* true or false */
    GML_ARG_INTS,       /* a list of 1 to GML_MAX_DIMS whole numbers */
    GML_ARG_ENUM,       /* one of the spec's names (its index in i), or that index */
} gml_arg_kind;

typedef struct gml_arg_spec {
    const char *name;
    gml_arg_kind kind;
    bool optional;      /* may be left out (then its default applies) */
    const char *def;    /* the default as the reference shows it ("none", "1",
                           "1/sqrt(d_k)"), NULL for a required argument */
    const char *const *names; /* ENUM: value i is names[i], NULL-terminated; a name
                                 may list aliases after '|' ("true|bottom_right"),
                                 the first is the one printed; an ENUM whose first
                                 names are false and true also takes a whole number
                                 as BOOL does: 0 is names[0], any other names[1] */
    bool omit_zero;           /* INT, FLOAT, ENUM: left out of printed calls when 0 (options
                                 added later: older calls print as they did) */
} gml_arg_spec;

/* One argument's value (the field of its kind). */
typedef struct gml_arg {
    bool given;                 /* false: an optional argument left out */
    gml_tensor *t;              /* TENSOR, OPT_TENSOR (NULL: none) */
    int64_t i;                  /* INT; BOOL as 0 or 1; ENUM as the name's index */
    float f;                    /* FLOAT */
    int64_t list[GML_MAX_DIMS]; /* INTS: list[0..n-1] */
    int n;
} gml_arg;

#define GML_MAX_ARGS 16

/* The index of word (len bytes, no NUL needed) among an ENUM spec's names,
 * aliases after '|' included, or -1. */
GML_API int gml_enum_index(const gml_arg_spec *spec, const char *word, size_t len);

typedef struct gml_op_form gml_op_form;
/* The forms: the ops of ops.inc in order (GML_OP_NONE has none), then the
 * builder-only ones. */
GML_API int gml_form_count(void);
GML_API const gml_op_form *gml_form_at(int i);                /* NULL outside [0, count) */
GML_API const gml_op_form *gml_form_find(const char *name);   /* NULL if unknown */
GML_API const gml_op_form *gml_form_of_op(gml_op op);         /* NULL for GML_OP_NONE */
GML_API const char *gml_form_name(const gml_op_form *f);
/* The op whose nodes the form writes; GML_OP_NONE for a builder-only form
 * (and for f NULL). */
GML_API gml_op gml_form_op(const gml_op_form *f);
GML_API int gml_form_n_args(const gml_op_form *f);
GML_API const gml_arg_spec *gml_form_arg(const gml_op_form *f, int i);
/* What the arguments are and what the result is, one phrase each (Markdown). */
GML_API const char *gml_form_doc_args(const gml_op_form *f);
GML_API const char *gml_form_doc_result(const gml_op_form *f);
/* Calls the builder with args[0..n_args-1] (an optional one not `given`
 * takes its default); it checks what the C types cannot (an axis of 2^32 is
 * out of range as written, not cut to an int). NULL with the message on ctx,
 * as any builder; a NULL tensor argument that is not optional gives NULL and
 * keeps the first message, as builders do. */
GML_API gml_tensor *gml_form_build(gml_context *ctx, const gml_op_form *f, const gml_arg *args);
/* The argument values that build node again from its sources: false if node
 * has no form (a leaf). */
GML_API bool gml_form_get_args(const gml_tensor *node, gml_arg args[GML_MAX_ARGS]);
/* Writes node's call, "softmax(s, mask=m, scale=0.125, causal=false)", into
 * buf (always terminated): required arguments positional, optional ones as
 * name=value, none left out; floats with 9 digits, so they read back exactly.
 * name(user, t) gives each tensor argument's text (NULL: t's name). Returns
 * the length of the whole text, as snprintf does, or -1 if node has no form. */
GML_API int gml_format_node(const gml_tensor *node, const char *(*name)(void *user, const gml_tensor *t),
                    void *user, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif /* GGMLITE_REGISTRY_H */
