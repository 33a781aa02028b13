/* The projection weights: their checks against a plan (shapes and types),
 * binding them by name (gml_attn_weights_find), GPT-2's Conv1D weights seen
 * as nn.Linear's, and parameter counts. */
#include "misuse.h"
#include "attn_internal.h"

#include <string.h>

/* "w_k.weight" or, when the tensor carries another name, "w_k.weight ('x')". */
static const char *role_label(const gml_tensor *t, const char *role, char *buf, size_t size) {
    if (strcmp(t->name, role) == 0)
        snprintf(buf, size, "%s", role);
    else
        snprintf(buf, size, "%s ('%s')", role, t->name);
    return buf;
}

bool gml_attn_weight_type(gml_type t) {
    return t == GML_F32 || t == GML_F16 || t == GML_BF16 || t == GML_Q8_0;
}

bool gml_attn_check_param(gml_context *ctx, const gml_attn_plan *p, const gml_tensor *t,
                          const char *role, int64_t rows, int64_t cols, const char *what) {
    bool shape_ok = cols < 0 ? t->n_dims == 1 && t->ne[3] == rows
                             : t->n_dims == 2 && t->ne[2] == rows && t->ne[3] == cols;
    /* matrices (projections, relative-position tables) may be f16, bf16 or
     * q8_0 (linear and get_rows convert them); vectors (biases, sinks) f32 */
    const bool type_ok = t->type == GML_F32 || (cols >= 0 && gml_attn_weight_type(t->type));
    if (shape_ok && type_ok) return true;
    char label[GML_MAX_NAME + 32], st[GML_SHAPE_MAX], want[GML_SHAPE_MAX];
    if (cols < 0)
        snprintf(want, sizeof want, "[%" PRId64 "]", rows);
    else
        snprintf(want, sizeof want, "[%" PRId64 ",%" PRId64 "]", rows, cols);
    role_label(t, role, label, sizeof label);
    if (!type_ok)
        return gml_attn_fail(ctx, "%s: %s is %s %s, expected %s %s (%s)", p->block, label,
                             gml_type_name(t->type), GML_SHAPE(t, st),
                             cols >= 0 ? "f32, f16, bf16 or q8_0" : "f32", want, what);
    return gml_attn_fail(ctx, "%s: %s is %s, expected %s (%s)", p->block, label, GML_SHAPE(t, st),
                         want, what);
}

/* The projection tensors: separate or packed, shapes as the config says. */
bool gml_attn_check_weights(gml_context *ctx, const gml_attn_plan *p, const gml_attn_weights *w,
                            bool out_proj) {
    if (!w) return gml_attn_fail(ctx, "%s: no weights given (NULL)", p->block);
    const int64_t D = p->D, kv = p->G * p->dk;
    const char *kv_rows = p->G == p->H ? "[d_model, d_model]" : "[kv_heads*d_k, d_model]";
    const char *kv_len = p->G == p->H ? "[d_model]" : "[kv_heads*d_k]";
    bool packed = w->in_proj_weight != NULL;
    if (packed && (w->w_q || w->w_k || w->w_v || w->b_q || w->b_k || w->b_v))
        return gml_attn_fail(ctx,
                             "%s: weights given both packed (in_proj_weight) and separate "
                             "(w_q/w_k/w_v); give one",
                             p->block);
    if (!packed && w->in_proj_bias && (w->b_q || w->b_k || w->b_v))
        return gml_attn_fail(ctx, "%s: in_proj_bias given with separate biases b_q/b_k/b_v; "
                             "give one", p->block);
    if (!packed && w->in_proj_bias &&
        !gml_attn_check_param(ctx, p, w->in_proj_bias, "in_proj_bias", D + 2 * kv, -1,
                              "b_q, b_k, b_v"))
        return false;
    const int64_t kdim = p->kdim ? p->kdim : D, vdim = p->vdim ? p->vdim : D;
    if (packed && (kdim != D || vdim != D))
        return gml_attn_fail(ctx,
                             "%s: in_proj_weight needs key and value of d_model %" PRId64
                             ", got kdim %" PRId64 " and vdim %" PRId64
                             "; give separate w_q, w_k [kv, kdim], w_v [kv, vdim] "
                             "(q_proj_weight, k_proj_weight, v_proj_weight)",
                             p->block, D, kdim, vdim);
    if (!!w->bias_k != !!w->bias_v)
        return gml_attn_fail(ctx, "%s: %s given without %s (add_bias_kv needs both)", p->block,
                             w->bias_k ? "bias_k" : "bias_v", w->bias_k ? "bias_v" : "bias_k");
    for (int i = 0; i < 2 && w->bias_k; i++) {
        const gml_tensor *t = i ? w->bias_v : w->bias_k;
        bool ok = t->type == GML_F32 && t->ne[3] == kv &&
                  (t->n_dims == 1 || (t->n_dims == 3 && t->ne[1] == 1 && t->ne[2] == 1));
        if (!ok) {
            char st[GML_SHAPE_MAX];
            return gml_attn_fail(ctx, "%s: %s '%s' is %s %s, expected f32 [1,1,%" PRId64
                                 "] or [%" PRId64 "] ([1, 1, %s])", p->block,
                                 i ? "bias_v" : "bias_k", t->name, gml_type_name(t->type),
                                 GML_SHAPE(t, st), kv, kv,
                                 p->G == p->H ? "d_model" : "kv_heads*d_k");
        }
    }
    if (packed) {
        char what[96];
        snprintf(what, sizeof what, "rows of w_q, w_k, w_v: [d_model + 2*%s, d_model]",
                 p->G == p->H ? "d_model" : "kv_heads*d_k");
        if (!gml_attn_check_param(ctx, p, w->in_proj_weight, "in_proj_weight", D + 2 * kv, D, what))
            return false;
        /* q8_0: the q, k, v row blocks are views at a row offset; whole rows are
         * whole blocks when d_model is a multiple of 32 (a q8_0 tensor's rows are) */
        if (w->in_proj_weight->type == GML_Q8_0 && D % GML_QK8_0) {
            char st[GML_SHAPE_MAX];
            return gml_attn_fail(ctx,
                                 "%s: in_proj_weight is q8_0 %s: its rows of d_model %" PRId64
                                 " values are not whole q8_0 blocks of %d",
                                 p->block, GML_SHAPE(w->in_proj_weight, st), D, GML_QK8_0);
        }
        if (w->in_proj_bias && !gml_attn_check_param(ctx, p, w->in_proj_bias, "in_proj_bias",
                                                     D + 2 * kv, -1, "b_q, b_k, b_v"))
            return false;
    } else {
        const char *missing = !w->w_q ? "w_q" : !w->w_k ? "w_k" : !w->w_v ? "w_v" : NULL;
        if (missing)
            return gml_attn_fail(ctx,
                                 "%s: %s.weight is missing (NULL): give w_q, w_k, w_v or "
                                 "in_proj_weight",
                                 p->block, missing);
        char k_rows[128], v_rows[128];
        snprintf(k_rows, sizeof k_rows, "%s", kv_rows);
        snprintf(v_rows, sizeof v_rows, "%s", kv_rows);
        if (kdim != D)
            snprintf(k_rows, sizeof k_rows, "[%s, kdim]: the key's last dim is %" PRId64,
                     p->G == p->H ? "d_model" : "kv_heads*d_k", kdim);
        if (vdim != D)
            snprintf(v_rows, sizeof v_rows, "[%s, vdim]: the value's last dim is %" PRId64,
                     p->G == p->H ? "d_model" : "kv_heads*d_k", vdim);
        if (!gml_attn_check_param(ctx, p, w->w_q, "w_q.weight", D, D, "[d_model, d_model]") ||
            !gml_attn_check_param(ctx, p, w->w_k, "w_k.weight", kv, kdim, k_rows) ||
            !gml_attn_check_param(ctx, p, w->w_v, "w_v.weight", kv, vdim, v_rows) ||
            (w->b_q && !gml_attn_check_param(ctx, p, w->b_q, "w_q.bias", D, -1, "[d_model]")) ||
            (w->b_k && !gml_attn_check_param(ctx, p, w->b_k, "w_k.bias", kv, -1, kv_len)) ||
            (w->b_v && !gml_attn_check_param(ctx, p, w->b_v, "w_v.bias", kv, -1, kv_len)))
            return false;
    }
    if (!out_proj) return true;
    if (!w->w_o)
        return gml_attn_fail(ctx, "%s: w_o.weight (out_proj.weight) is missing (NULL)", p->block);
    return gml_attn_check_param(ctx, p, w->w_o, "w_o.weight", D, D, "[d_model, d_model]") &&
           (!w->b_o || gml_attn_check_param(ctx, p, w->b_o, "w_o.bias", D, -1, "[d_model]"));
}

/* ---- weights by name ----------------------------------------------------- */

enum { CONV_FIXTURE, CONV_TORCH, CONV_HF, CONV_BERT, CONV_GPT2, CONV_ANY, N_CONV };
static const char *const CONV_NAME[N_CONV] = {
    "w_q/w_k/w_v/w_o", "nn.MultiheadAttention (in_proj_*, *_proj_weight, out_proj.*)",
    "q_proj/k_proj/v_proj/o_proj", "BERT (attention.self.*, attention.output.dense)",
    "GPT-2 (attn.c_attn, attn.c_proj)", ""};

#define SLOT(f) offsetof(gml_attn_weights, f)
static const struct {
    const char *name;
    size_t offset;
    int conv;
} NAMES[] = {
    {"w_q.weight", SLOT(w_q), CONV_FIXTURE},
    {"w_q.bias", SLOT(b_q), CONV_FIXTURE},
    {"w_k.weight", SLOT(w_k), CONV_FIXTURE},
    {"w_k.bias", SLOT(b_k), CONV_FIXTURE},
    {"w_v.weight", SLOT(w_v), CONV_FIXTURE},
    {"w_v.bias", SLOT(b_v), CONV_FIXTURE},
    {"w_o.weight", SLOT(w_o), CONV_FIXTURE},
    {"w_o.bias", SLOT(b_o), CONV_FIXTURE},
    {"in_proj_weight", SLOT(in_proj_weight), CONV_TORCH},
    {"in_proj_bias", SLOT(in_proj_bias), CONV_TORCH},
    {"q_proj_weight", SLOT(w_q), CONV_TORCH},
    {"k_proj_weight", SLOT(w_k), CONV_TORCH},
    {"v_proj_weight", SLOT(w_v), CONV_TORCH},
    {"bias_k", SLOT(bias_k), CONV_TORCH},
    {"bias_v", SLOT(bias_v), CONV_TORCH},
    {"out_proj.weight", SLOT(w_o), CONV_TORCH},
    {"out_proj.bias", SLOT(b_o), CONV_TORCH},
    {"q_proj.weight", SLOT(w_q), CONV_HF},
    {"q_proj.bias", SLOT(b_q), CONV_HF},
    {"k_proj.weight", SLOT(w_k), CONV_HF},
    {"k_proj.bias", SLOT(b_k), CONV_HF},
    {"v_proj.weight", SLOT(w_v), CONV_HF},
    {"v_proj.bias", SLOT(b_v), CONV_HF},
    {"o_proj.weight", SLOT(w_o), CONV_HF},
    {"o_proj.bias", SLOT(b_o), CONV_HF},
    {"attention.self.query.weight", SLOT(w_q), CONV_BERT},
    {"attention.self.query.bias", SLOT(b_q), CONV_BERT},
    {"attention.self.key.weight", SLOT(w_k), CONV_BERT},
    {"attention.self.key.bias", SLOT(b_k), CONV_BERT},
    {"attention.self.value.weight", SLOT(w_v), CONV_BERT},
    {"attention.self.value.bias", SLOT(b_v), CONV_BERT},
    {"attention.output.dense.weight", SLOT(w_o), CONV_BERT},
    {"attention.output.dense.bias", SLOT(b_o), CONV_BERT},
    {"c_attn.weight", SLOT(in_proj_weight), CONV_GPT2},
    {"c_attn.bias", SLOT(in_proj_bias), CONV_GPT2},
    {"c_proj.weight", SLOT(w_o), CONV_GPT2},
    {"c_proj.bias", SLOT(b_o), CONV_GPT2},
    {"rel_k.weight", SLOT(rel_k), CONV_ANY},
    {"rel_v.weight", SLOT(rel_v), CONV_ANY},
    {"sinks", SLOT(sinks), CONV_ANY},
};
#undef SLOT
/* Optional prefixes of every name ("self_attn.sinks", "attn.c_proj.weight"). */
static const char *const PREFIXES[] = {"", "self_attn.", "attn."};

/* The NAMES entry name is, under one of PREFIXES; -1 if none. */
static int name_index(const char *name) {
    for (size_t p = 0; p < sizeof PREFIXES / sizeof *PREFIXES; p++) {
        size_t lp = strlen(PREFIXES[p]);
        if (strncmp(name, PREFIXES[p], lp) != 0) continue;
        for (size_t i = 0; i < sizeof NAMES / sizeof *NAMES; i++)
            if (strcmp(name + lp, NAMES[i].name) == 0) return (int)i;
    }
    return -1;
}

bool gml_attn_weight_name_known(const char *name) {
    GML_MODELS_NONNULL(NULL, name, false);
    return name_index(name) >= 0;
}

gml_status gml_attn_weights_find(gml_context *wctx, gml_attn_weights *w, char *err,
                                 size_t err_size) {
    GML_MODELS_NONNULL_ERR(wctx, GML_ERR_INVALID, err, err_size);
    GML_MODELS_NONNULL_ERR(w, GML_ERR_INVALID, err, err_size);
    if (!err) err_size = 0;
    *w = (gml_attn_weights){0};
    if (err_size) err[0] = '\0';
    char problem[512] = "";
    const char *bound[sizeof(gml_attn_weights) / sizeof(gml_tensor *) + 1] = {0};
    int conv = -1;
    const char *conv_first = NULL;
    for (gml_tensor *t = gml_get_first_tensor(wctx); t && !problem[0];
         t = gml_get_next_tensor(wctx, t)) {
        int i = name_index(t->name);
        if (i < 0) continue;
        size_t slot_no = NAMES[i].offset / sizeof(gml_tensor *);
        gml_tensor **slot = (gml_tensor **)(void *)((char *)w + NAMES[i].offset);
        if (*slot) {
            snprintf(problem, sizeof problem, "both %s and %s are present", bound[slot_no],
                     t->name);
            break;
        }
        if (NAMES[i].conv != CONV_ANY) {
            if (conv >= 0 && conv != NAMES[i].conv) {
                snprintf(problem, sizeof problem,
                         "two naming conventions mix: %s is %s, %s is %s; give one", conv_first,
                         CONV_NAME[conv], t->name, CONV_NAME[NAMES[i].conv]);
                break;
            }
            conv = NAMES[i].conv;
            if (!conv_first) conv_first = t->name;
        }
        *slot = t;
        bound[slot_no] = t->name;
    }
    bool separate = w->w_q || w->w_k || w->w_v;
    if (problem[0]) {
    } else if (separate && w->in_proj_weight) {
        snprintf(problem, sizeof problem, "both in_proj_weight and q/k/v weights are present");
    } else if (!w->in_proj_weight && !(w->w_q && w->w_k && w->w_v)) {
        static const char *const QKV[N_CONV] = {
            "w_q.weight, w_k.weight and w_v.weight",
            "q_proj_weight, k_proj_weight and v_proj_weight",
            "q_proj.weight, k_proj.weight and v_proj.weight",
            "attention.self.query.weight, .key.weight and .value.weight", "", ""};
        if (separate)
            snprintf(problem, sizeof problem, "%s are not all present",
                     conv >= 0 ? QKV[conv] : "the query, key and value weights");
        else
            snprintf(problem, sizeof problem, "%s",
                     "no input projection (w_q/w_k/w_v.weight, in_proj_weight, "
                            "q_proj_weight.., q_proj/k_proj/v_proj.weight, "
                            "attention.self.query/key/value.weight or attn.c_attn.weight)");
    } else if (!w->w_o) {
        snprintf(problem, sizeof problem, "no output projection (w_o.weight, out_proj.weight, "
                 "o_proj.weight, attention.output.dense.weight or attn.c_proj.weight)");
    }
    if (!problem[0]) {
        w->conv1d = conv == CONV_GPT2;
        return GML_OK;
    }

    *w = (gml_attn_weights){0};
    size_t n =
        err_size ? (size_t)snprintf(err, err_size, "attention weights: %s; present:", problem) : 0;
    int count = 0;
    for (gml_tensor *t = gml_get_first_tensor(wctx); t; t = gml_get_next_tensor(wctx, t), count++) {
        char s[GML_SHAPE_MAX];
        if (n < err_size)
            n += (size_t)snprintf(err + n, err_size - n, "%s %s %s", count ? "," : "", t->name,
                                  GML_SHAPE(t, s));
    }
    if (!count && n < err_size) snprintf(err + n, err_size - n, " (nothing)");
    return GML_ERR_INVALID;
}

/* w with GPT-2's Conv1D weights [in, out] replaced by transposed views in
 * ctx (nn.Linear's [out, in]); w itself otherwise. */
const gml_attn_weights *gml_attn_linear_weights(gml_context *ctx, const gml_attn_weights *w,
                                                gml_attn_weights *tmp) {
    if (!w || !w->conv1d) return w;
    *tmp = *w;
    tmp->conv1d = false;
    if (w->in_proj_weight) tmp->in_proj_weight = gml_transpose(ctx, w->in_proj_weight, 0, 1);
    if (w->w_o) tmp->w_o = gml_transpose(ctx, w->w_o, 0, 1);
    for (int i = 0; i < 3; i++) { /* separate q/k/v under conv1d: transposed too */
        gml_tensor **s = i == 0 ? &tmp->w_q : i == 1 ? &tmp->w_k : &tmp->w_v;
        if (*s) *s = gml_transpose(ctx, *s, 0, 1);
    }
    return tmp;
}

/* ---- sizes -------------------------------------------------------------- */

int64_t gml_gqa_param_count(int64_t d_model, int n_heads, int n_kv_heads, bool bias) {
    if (d_model < 1 || n_heads < 1 || n_kv_heads < 1 || d_model % n_heads || n_heads % n_kv_heads)
        return -1;
    const int64_t kv = n_kv_heads * (d_model / n_heads);
    int64_t n = 2 * d_model * d_model + 2 * kv * d_model; /* W_q, W_o; W_k, W_v */
    if (bias) n += 2 * d_model + 2 * kv;
    return n;
}

int64_t gml_mha_param_count(int64_t d_model, int n_heads, bool bias) {
    return gml_gqa_param_count(d_model, n_heads, n_heads, bias);
}
