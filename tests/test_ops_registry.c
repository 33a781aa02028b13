/* The op registry (ggmlite.h, gml_form_*): every op of ops.inc has a call
 * form, and a graph using it
 *   - round-trips through a graph file (gml_save_graph, gml_load_graph into
 *     a fresh context: the same gml_graph_digest, and on the same inputs the
 *     same output bytes),
 *   - prints (gml_graph_print shows the call),
 *   - exports DOT (the label shows the call).
 * An op with no form, or one this test has no example of, fails it: adding
 * an op to ops.inc means adding a row to EXAMPLES.
 * Also: the forms' own consistency, build's range checks (an axis reported as
 * written), and that the op table of tools/graphs/README.md is what the
 * registry prints (usage: test_ops_registry README.md). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, open_memstream */
#include "check.h"
#include "internal.h"
#include "../ops/flash_attn.h"
#include "../ops/ops_back.h"

#include <ggmlite/io.h>

#include <unistd.h>

static char tmpdir[64];

/* ---- one example graph per op ------------------------------------------------ */

static gml_tensor *leaf(gml_context *ctx, const char *name, gml_type type, int n,
                        const int64_t *ne) {
    return gml_set_name(gml_new_tensor(ctx, type, n, ne), name);
}
#define F32(name, ...) \
    leaf(ctx, name, GML_F32, sizeof((int64_t[]){__VA_ARGS__}) / 8, (int64_t[]){__VA_ARGS__})
#define I32(name, ...) \
    leaf(ctx, name, GML_I32, sizeof((int64_t[]){__VA_ARGS__}) / 8, (int64_t[]){__VA_ARGS__})

/* x [4, 6] -> [2, 3] with strides [12, 2] elements at offset 7 */
static gml_tensor *ex_view(gml_context *ctx) {
    return gml_view(ctx, F32("x", 4, 6), 2, (int64_t[]){2, 3}, (size_t[]){48, 8}, 28);
}
static gml_tensor *ex_reshape(gml_context *ctx) {
    return gml_reshape(ctx, F32("x", 4, 6), 3, (int64_t[]){3, 2, 4});
}
static gml_tensor *ex_permute(gml_context *ctx) {
    return gml_permute(ctx, F32("x", 2, 3, 4), (int[]){2, 0, 1});
}
static gml_tensor *ex_transpose(gml_context *ctx) { /* dims negative from the end */
    return gml_transpose(ctx, F32("x", 2, 3, 4), -1, -3);
}
static gml_tensor *ex_cont(gml_context *ctx) {
    return gml_cont(ctx, gml_transpose(ctx, F32("x", 3, 5), 0, 1));
}
/* a [2, 3] into rows 1..2 of cache [4, 3] */
static gml_tensor *ex_cpy(gml_context *ctx) {
    gml_tensor *cache = F32("cache", 4, 3);
    return gml_cpy(ctx, F32("a", 2, 3), gml_view(ctx, cache, 2, (int64_t[]){2, 3},
                                                 (size_t[]){12, 4}, 12));
}
static gml_tensor *ex_matmul(gml_context *ctx) {
    return gml_matmul(ctx, F32("a", 2, 3, 4), F32("b", 4, 5));
}
static gml_tensor *ex_add(gml_context *ctx) { return gml_add(ctx, F32("a", 2, 3, 4), F32("b", 4)); }
static gml_tensor *ex_mul(gml_context *ctx) { return gml_mul(ctx, F32("a", 3, 4), F32("b", 3, 1)); }
static gml_tensor *ex_scale(gml_context *ctx) { /* 0.1f is no short decimal */
    return gml_scale(ctx, F32("a", 3, 4), 0.1f);
}
static gml_tensor *ex_sub(gml_context *ctx) { return gml_sub(ctx, F32("a", 3, 1), F32("b", 2, 1, 4)); }
static gml_tensor *ex_div(gml_context *ctx) { return gml_div(ctx, F32("a", 4), F32("b", 3, 4)); }
static gml_tensor *ex_neg(gml_context *ctx) { return gml_neg(ctx, F32("x", 2, 3)); }
static gml_tensor *ex_exp(gml_context *ctx) { return gml_exp(ctx, F32("x", 3, 4)); }
static gml_tensor *ex_tanh(gml_context *ctx) { return gml_tanh(ctx, F32("x", 5)); }
static gml_tensor *ex_sigmoid(gml_context *ctx) { return gml_sigmoid(ctx, F32("x", 2, 2, 3)); }
static gml_tensor *ex_silu(gml_context *ctx) { /* a strided input */
    return gml_silu(ctx, gml_transpose(ctx, F32("x", 3, 4), 0, 1));
}
static gml_tensor *ex_gelu(gml_context *ctx) { return gml_gelu(ctx, F32("x", 4, 3)); }
static gml_tensor *ex_gelu_tanh(gml_context *ctx) { return gml_gelu_tanh(ctx, F32("x", 1, 2, 3, 4)); }
static gml_tensor *ex_softmax(gml_context *ctx) { /* every option (gml_attn_opts) */
    const gml_attn_opts o = {.mask = F32("mask", 3, 5), .valid_lens = I32("lens", 2, 3),
                             .positions = I32("pos", 2, 3), .sinks = F32("sinks", 2),
                             .causal = GML_CAUSAL_TOP_LEFT, .window = 3, .softcap = 0.1f,
                             .alibi_max_bias = 8.0f};
    return gml_softmax_ext(ctx, F32("s", 2, 2, 3, 5), 1.0f / sqrtf(3.0f), &o);
}
static gml_tensor *ex_repeat_interleave(gml_context *ctx) {
    return gml_repeat_interleave(ctx, F32("x", 2, 3, 4), 3, -2);
}
static gml_tensor *ex_get_rows(gml_context *ctx) {
    return gml_get_rows(ctx, F32("table", 5, 4), I32("idx", 2, 3));
}
static gml_tensor *ex_valid_len_mask(gml_context *ctx) {
    return gml_valid_len_mask(ctx, I32("lens", 2, 3), 5);
}
static gml_tensor *ex_relpos_index(gml_context *ctx) { return gml_relpos_index(ctx, 4, 6, 2); }
static gml_tensor *ex_flash_attn(gml_context *ctx) { /* 2 query heads on 1 kv head */
    const gml_attn_opts o = {.mask = F32("mask", 1, 1, 3, 5), .valid_lens = I32("valid_lens", 1),
                             .positions = I32("pos", 1, 3), .sinks = F32("sinks", 2),
                             .causal = GML_CAUSAL_TOP_LEFT, .window = 2, .softcap = 30.0f,
                             .alibi_max_bias = 0.5f}; /* every option (gml_attn_opts) */
    return gml_flash_attn_ext(ctx, F32("q", 1, 2, 3, 4), F32("k", 1, 1, 5, 4),
                              F32("v", 1, 1, 5, 6), 0.3f, &o);
}
static gml_tensor *ex_flash_attn_partial(gml_context *ctx) { /* keys 7 .. 11, every option */
    const gml_attn_opts o = {.mask = F32("mask", 1, 1, 3, 5), .valid_lens = I32("valid_lens", 1),
                             .positions = I32("pos", 1, 3), .causal = GML_CAUSAL_BOTTOM_RIGHT,
                             .window = 2, .softcap = 30.0f, .alibi_max_bias = 0.5f};
    return gml_flash_attn_partial(ctx, F32("q", 1, 2, 3, 4), F32("k", 1, 1, 5, 4),
                                  F32("v", 1, 1, 5, 6), 0.3f, &o, 7);
}
static gml_tensor *ex_attn_partial_merge(gml_context *ctx) {
    return gml_attn_partial_merge(ctx, F32("pa", 1, 2, 3, 8), F32("pb", 1, 2, 3, 8));
}
static gml_tensor *ex_attn_partial_finish(gml_context *ctx) {
    return gml_attn_partial_finish(ctx, F32("p", 1, 2, 3, 8), F32("sinks", 2));
}
static gml_tensor *ex_set_rows(gml_context *ctx) {
    return gml_set_rows(ctx, F32("dst", 2, 6, 4), F32("src", 2, 2, 4), I32("idx", 2));
}
/* the cache after a write into a slot of it */
static gml_tensor *ex_after(gml_context *ctx) {
    gml_tensor *cache = F32("cache", 4, 3);
    gml_tensor *slot = gml_cpy(ctx, F32("a", 1, 3),
                               gml_view(ctx, cache, 2, (int64_t[]){1, 3}, (size_t[]){12, 4}, 24));
    return gml_after(ctx, cache, slot);
}
/* columns 1..3 of x [4, 6], start written from the end */
static gml_tensor *ex_slice(gml_context *ctx) { return gml_slice(ctx, F32("x", 4, 6), -1, -5, 3); }
/* a [2, 3, 4] (transposed) then b [2, 2, 4] along dim 1 */
static gml_tensor *ex_concat(gml_context *ctx) {
    return gml_concat(ctx, gml_transpose(ctx, F32("a", 2, 4, 3), -1, -2), F32("b", 2, 2, 4), -2);
}

static gml_tensor *ex_sum(gml_context *ctx) { return gml_sum(ctx, F32("x", 2, 3, 5)); }
static gml_tensor *ex_mean(gml_context *ctx) { return gml_mean(ctx, F32("x", 3, 7)); }
static gml_tensor *ex_max(gml_context *ctx) { return gml_max(ctx, F32("x", 4)); }
static gml_tensor *ex_rms_norm(gml_context *ctx) {
    return gml_rms_norm(ctx, F32("x", 2, 3, 8), F32("w", 8), 1e-6f);
}
static gml_tensor *ex_layer_norm(gml_context *ctx) { /* no weight, a bias */
    return gml_layer_norm(ctx, F32("x", 3, 6), NULL, F32("b", 6), 1e-5f);
}

/* q [B, T, H, d] straight from a projection, positions per batch item,
 * partial interleaved rotary dims, scaled positions */
static gml_tensor *ex_arange(gml_context *ctx) { return gml_arange(ctx, 7, -3); }
static gml_tensor *ex_rope(gml_context *ctx) {
    return gml_rope(ctx, F32("q", 2, 3, 2, 6), I32("pos", 2, 3), -3, 4, 500000.0f, 0.1f, true);
}
static gml_tensor *ex_full(gml_context *ctx) { return gml_full(ctx, 2, (int64_t[]){3, 5}, -0.25f); }
/* x [2, 3, 4] summed back to [3, 1] (over dims 0 and 2) */
static gml_tensor *ex_sum_to(gml_context *ctx) {
    return gml_sum_to(ctx, F32("x", 2, 3, 4), 2, (int64_t[]){3, 1});
}
/* dy [2, 3] placed in [4, 5] at strides [5, 1], offset 6 (a slice's gradient) */
static gml_tensor *ex_view_back(gml_context *ctx) {
    return gml_view_back(ctx, F32("dy", 2, 3), 2, (int64_t[]){4, 5}, (int64_t[]){5, 1}, 6);
}
static gml_tensor *ex_get_rows_back(gml_context *ctx) { /* indices 1, 2, 0, 1, 2, 0 */
    return gml_get_rows_back(ctx, F32("dy", 2, 3, 4), I32("idx", 2, 3), 3);
}
static gml_tensor *ex_unary_back(gml_context *ctx) {
    return gml_unary_back(ctx, F32("x", 3, 4), F32("dy", 3, 4), GML_OP_GELU_TANH);
}
static gml_tensor *ex_max_back(gml_context *ctx) {
    gml_tensor *x = F32("x", 3, 5);
    return gml_max_back(ctx, x, gml_max(ctx, x), F32("dy", 3, 1));
}

/* the training ops: the forward keeping its lse, the backwards */
static gml_tensor *ex_flash_attn_lse(gml_context *ctx) { /* 2 query heads on 1 kv head, sinks */
    const gml_attn_opts o = {.sinks = F32("sinks", 2), .causal = GML_CAUSAL_BOTTOM_RIGHT};
    return gml_flash_attn_lse(ctx, F32("q", 1, 2, 3, 4), F32("k", 1, 1, 5, 4),
                              F32("v", 1, 1, 5, 6), 0.3f, &o);
}
static gml_tensor *ex_flash_attn_back(gml_context *ctx) { /* every option */
    const gml_attn_opts o = {.mask = F32("mask", 1, 1, 3, 5), .valid_lens = I32("valid_lens", 1),
                             .positions = I32("pos", 1, 3), .sinks = F32("sinks", 2),
                             .causal = GML_CAUSAL_TOP_LEFT, .window = 2, .softcap = 30.0f,
                             .alibi_max_bias = 0.5f};
    return gml_flash_attn_back(ctx, F32("q", 1, 2, 3, 4), F32("k", 1, 1, 5, 4),
                               F32("v", 1, 1, 5, 6), F32("fwd", 1, 2, 3, 8),
                               F32("dout", 1, 2, 3, 6), 0.3f, &o);
}
static gml_tensor *ex_softmax_back(gml_context *ctx) {
    return gml_softmax_back(ctx, F32("y", 2, 3, 5), F32("dy", 2, 3, 5), F32("x", 2, 3, 5), 0.5f,
                            20.0f);
}
static gml_tensor *ex_rms_norm_back(gml_context *ctx) {
    return gml_rms_norm_back(ctx, F32("x", 2, 3, 8), F32("dy", 2, 3, 8), F32("w", 8), 1e-6f);
}
static gml_tensor *ex_layer_norm_back(gml_context *ctx) { /* no weight */
    return gml_layer_norm_back(ctx, F32("x", 3, 6), F32("dy", 3, 6), NULL, 1e-5f);
}
static gml_tensor *ex_rope_back(gml_context *ctx) {
    return gml_rope_back(ctx, F32("dy", 2, 3, 2, 6), I32("pos", 2, 3), -3, 4, 500000.0f, 0.1f,
                         true);
}

/* targets 1, 2, 0, ... (fill_leafs): valid for V 5 */
static gml_tensor *ex_cross_entropy(gml_context *ctx) {
    return gml_cross_entropy(ctx, F32("logits", 2, 3, 5), I32("targets", 2, 3));
}
static gml_tensor *ex_cross_entropy_back(gml_context *ctx) {
    return gml_cross_entropy_back(ctx, F32("logits", 4, 7), I32("targets", 4), F32("dy", 1));
}
static gml_tensor *ex_mse_loss(gml_context *ctx) {
    return gml_mse_loss(ctx, F32("a", 3, 5), F32("b", 3, 5));
}

static const struct example {
    gml_op op;
    gml_tensor *(*make)(gml_context *ctx);
} EXAMPLES[] = {
    {GML_OP_VIEW, ex_view},
    {GML_OP_RESHAPE, ex_reshape},
    {GML_OP_PERMUTE, ex_permute},
    {GML_OP_TRANSPOSE, ex_transpose},
    {GML_OP_CONT, ex_cont},
    {GML_OP_CPY, ex_cpy},
    {GML_OP_MATMUL, ex_matmul},
    {GML_OP_ADD, ex_add},
    {GML_OP_MUL, ex_mul},
    {GML_OP_SCALE, ex_scale},
    {GML_OP_SOFTMAX, ex_softmax},
    {GML_OP_REPEAT_INTERLEAVE, ex_repeat_interleave},
    {GML_OP_GET_ROWS, ex_get_rows},
    {GML_OP_VALID_LEN_MASK, ex_valid_len_mask},
    {GML_OP_RELPOS_INDEX, ex_relpos_index},
    {GML_OP_FLASH_ATTN, ex_flash_attn},
    {GML_OP_SET_ROWS, ex_set_rows},
    {GML_OP_AFTER, ex_after},
    {GML_OP_SLICE, ex_slice},
    {GML_OP_CONCAT, ex_concat},
    {GML_OP_SUB, ex_sub},
    {GML_OP_DIV, ex_div},
    {GML_OP_NEG, ex_neg},
    {GML_OP_EXP, ex_exp},
    {GML_OP_TANH, ex_tanh},
    {GML_OP_SIGMOID, ex_sigmoid},
    {GML_OP_SILU, ex_silu},
    {GML_OP_GELU, ex_gelu},
    {GML_OP_GELU_TANH, ex_gelu_tanh},
    {GML_OP_SUM, ex_sum},
    {GML_OP_MEAN, ex_mean},
    {GML_OP_MAX, ex_max},
    {GML_OP_RMS_NORM, ex_rms_norm},
    {GML_OP_LAYER_NORM, ex_layer_norm},
    {GML_OP_ROPE, ex_rope},
    {GML_OP_ARANGE, ex_arange},
    {GML_OP_FLASH_ATTN_PARTIAL, ex_flash_attn_partial},
    {GML_OP_ATTN_PARTIAL_MERGE, ex_attn_partial_merge},
    {GML_OP_ATTN_PARTIAL_FINISH, ex_attn_partial_finish},
    {GML_OP_FULL, ex_full},
    {GML_OP_SUM_TO, ex_sum_to},
    {GML_OP_VIEW_BACK, ex_view_back},
    {GML_OP_GET_ROWS_BACK, ex_get_rows_back},
    {GML_OP_UNARY_BACK, ex_unary_back},
    {GML_OP_MAX_BACK, ex_max_back},
    {GML_OP_FLASH_ATTN_LSE, ex_flash_attn_lse},
    {GML_OP_FLASH_ATTN_BACK, ex_flash_attn_back},
    {GML_OP_SOFTMAX_BACK, ex_softmax_back},
    {GML_OP_RMS_NORM_BACK, ex_rms_norm_back},
    {GML_OP_LAYER_NORM_BACK, ex_layer_norm_back},
    {GML_OP_ROPE_BACK, ex_rope_back},
    {GML_OP_CROSS_ENTROPY, ex_cross_entropy},
    {GML_OP_CROSS_ENTROPY_BACK, ex_cross_entropy_back},
    {GML_OP_MSE_LOSS, ex_mse_loss},
};
#define N_EXAMPLES (int)(sizeof EXAMPLES / sizeof *EXAMPLES)

/* f32 leafs uniform in [-1, 1); i32 leafs 1, 2, 0, 1, 2, ...: valid row
 * indices and lengths for every example. */
static void fill_leafs(const gml_graph *g, uint64_t seed) {
    chk_rng rng = chk_seed(seed);
    for (int i = 0; i < gml_graph_n_leafs(g); i++) {
        gml_tensor *t = gml_graph_leaf(g, i);
        int64_t n = gml_nelements(t);
        for (int64_t e = 0; e < n; e++) {
            if (t->type == GML_F32)
                ((float *)t->data)[e] = chk_uniform(&rng, -1.0f, 1.0f);
            else
                ((int32_t *)t->data)[e] = (int32_t)((e + 1) % 3);
        }
    }
}

static char *slurp_path(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int c;
    while ((c = fgetc(f)) != EOF) {
        if (len + 2 > cap) {
            cap = cap ? 2 * cap : 4096;
            char *b = realloc(buf, cap);
            if (!b) break;
            buf = b;
        }
        buf[len++] = (char)c;
    }
    fclose(f);
    if (buf) buf[len] = '\0';
    return buf;
}

/* The text each view of a node of op shows: "op(". */
static void call_prefix(gml_op op, char *buf, size_t size) {
    snprintf(buf, size, "%s(", gml_op_name(op));
}

static void test_example(const struct example *ex) {
    const char *name = gml_op_name(ex->op);
    chk_case("op %s", name);
    gml_context *c1 = chk_ctx(1 << 20), *c2 = chk_ctx(1 << 20);
    gml_tensor *out = ex->make(c1);
    gml_graph *g1 = out ? gml_build_graph(c1, &out, 1) : NULL;
    if (!CHECK(g1, "the example builds: %s", gml_last_error(c1))) goto done;
    bool has_op = false;
    for (int i = 0; i < gml_graph_n_nodes(g1); i++) has_op |= gml_graph_node(g1, i)->op == ex->op;
    CHECK(has_op, "the example's graph has a %s node", name);
    const gml_op_form *form = gml_form_of_op(ex->op);
    if (!CHECK(form && gml_form_op(form) == ex->op, "%s has a call form", name)) goto done;

    /* graph file: save, load into a fresh context, the same digest */
    char path[128], err[512] = "", want[64];
    call_prefix(ex->op, want, sizeof want);
    snprintf(path, sizeof path, "%s/%s.graph", tmpdir, name);
    if (!CHECK(gml_save_graph(path, g1, &out, 1, err, sizeof err) == GML_OK, "save: %s", err))
        goto done;
    char *text = slurp_path(path);
    CHECK(text && strstr(text, want), "the file writes %s...:\n%s", want, text ? text : "");
    free(text);
    gml_tensor *out2 = NULL;
    int n = gml_load_graph(c2, path, NULL, &out2, 1, err, sizeof err);
    gml_graph *g2 = n == 1 ? gml_build_graph(c2, &out2, 1) : NULL;
    if (CHECK(g2, "load: %s", err)) {
        CHECK(gml_graph_digest(g1) == gml_graph_digest(g2), "save + load keeps the digest");
        /* the same inputs (by name) give the same output bytes */
        fill_leafs(g1, 42);
        bool bound = gml_graph_n_leafs(g1) == gml_graph_n_leafs(g2);
        for (int i = 0; i < gml_graph_n_leafs(g2) && bound; i++) {
            gml_tensor *l2 = gml_graph_leaf(g2, i), *l1 = gml_get_tensor(c1, l2->name);
            bound = l1 && l1->op == GML_OP_NONE && gml_nbytes(l1) == gml_nbytes(l2);
            if (bound) memcpy(l2->data, l1->data, gml_nbytes(l1));
        }
        if (CHECK(bound, "the loaded graph's leafs are the example's") &&
            CHECK(gml_graph_compute(g1, 2) == GML_OK, "compute: %s", gml_graph_error(g1)) &&
            CHECK(gml_graph_compute(g2, 2) == GML_OK, "compute loaded: %s", gml_graph_error(g2)))
            CHECK(gml_nbytes(out) == gml_nbytes(out2) && gml_same_shape(out, out2) &&
                      memcmp(out->data, out2->data, gml_nbytes(out)) == 0,
                  "the loaded graph computes the same bytes");
        gml_graph_free(g2);
    }

    /* gml_graph_print shows the call */
    char *printed = NULL;
    size_t printed_len = 0;
    FILE *ms = open_memstream(&printed, &printed_len);
    if (CHECK(ms, "open_memstream")) {
        gml_graph_print(g1, ms);
        fclose(ms);
        CHECK(strstr(printed, want), "gml_graph_print shows %s...:\n%s", want, printed);
        free(printed);
    }

    /* DOT labels show it too */
    snprintf(path, sizeof path, "%s/%s.dot", tmpdir, name);
    if (CHECK(gml_graph_dump_dot(g1, path) == GML_OK, "dump_dot")) {
        char *dot = slurp_path(path);
        CHECK(dot && strstr(dot, want), "the DOT labels show %s...", want);
        free(dot);
    }
done:
    gml_graph_free(g1);
    gml_free(c1);
    gml_free(c2);
}

static void test_every_op(void) {
    chk_case("every op has an example");
    for (int op = 1; op < GML_OP_COUNT; op++) {
        int found = 0;
        for (int i = 0; i < N_EXAMPLES; i++) found += EXAMPLES[i].op == (gml_op)op;
        CHECK(found == 1, "op %s: %d examples in EXAMPLES, want 1 (add one for a new op)",
              gml_op_name((gml_op)op), found);
    }
    for (int i = 0; i < N_EXAMPLES; i++) test_example(&EXAMPLES[i]);
}

/* Every form: found by its name, its op's form, arguments named once with
 * the required ones first (so a written call is positional, then name=value),
 * defaults shown for the optional ones. */
static void test_forms(void) {
    chk_case("forms");
    CHECK(gml_form_count() >= GML_OP_COUNT - 1, "%d forms for %d ops", gml_form_count(),
          GML_OP_COUNT - 1);
    CHECK(gml_form_of_op(GML_OP_NONE) == NULL, "leafs have no form");
    CHECK(gml_form_at(-1) == NULL && gml_form_at(gml_form_count()) == NULL, "form_at bounds");
    CHECK(gml_form_find("none") == NULL, "'none' is no form");
    for (int i = 0; i < gml_form_count(); i++) {
        const gml_op_form *f = gml_form_at(i);
        const char *name = gml_form_name(f);
        chk_case("form %s", name);
        CHECK(gml_form_find(name) == f, "found by its name");
        gml_op op = gml_form_op(f);
        CHECK(op == GML_OP_NONE ? i >= GML_OP_COUNT - 1 : gml_form_of_op(op) == f &&
                                                               strcmp(gml_op_name(op), name) == 0,
              "the form of op %s", gml_op_name(op));
        int n = gml_form_n_args(f);
        CHECK(n >= 1 && n <= GML_MAX_ARGS, "%d arguments", n);
        CHECK(gml_form_doc_args(f) && gml_form_doc_result(f), "documented");
        bool optional_seen = false;
        for (int a = 0; a < n; a++) {
            const gml_arg_spec *s = gml_form_arg(f, a);
            CHECK(!optional_seen || s->optional, "required '%s' after an optional one", s->name);
            optional_seen |= s->optional;
            CHECK(s->optional == (s->def != NULL), "'%s': a default iff optional", s->name);
            for (int b = 0; b < a; b++)
                CHECK(strcmp(gml_form_arg(f, b)->name, s->name) != 0, "'%s' twice", s->name);
        }
        CHECK(gml_form_arg(f, n) == NULL, "form_arg bounds");
    }
}

/* build's checks report whole numbers as written, not cut to an int; a
 * number no float holds is an error, not inf. */
static void test_build_ranges(void) {
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"input x f32 [3, 4]\ny = permute(x, [4294967297, 0])\noutput y\n",
         "r.graph:2:5: permute(x): axis 4294967297 is out of range for a 2-D input [3,4]"},
        {"input x f32 [3, 4]\ny = permute(x, [1, -3])\noutput y\n",
         "permute(x): axis -3 is out of range for a 2-D input [3,4]"},
        {"input x f32 [3, 4]\ny = permute(x, [1])\noutput y\n",
         "permute(x): 1 axes for a 2-D input [3,4]"},
        {"input x f32 [3, 4]\ny = transpose(x, 0, -4294967296)\noutput y\n",
         "transpose(x): dim -4294967296 is out of range for a 2-D input [3,4]"},
        {"input x f32 [3, 4]\ny = repeat_interleave(x, 2, 64)\noutput y\n",
         "repeat_interleave(x): dim 64 is out of range for a 2-D input [3,4]"},
        {"input x f32 [3, 4]\ny = repeat_interleave(x, 4294967298, 0)\noutput y\n",
         "repeat_interleave(x): repeats is 4294967298, must be in [1, 2147483647]"},
        {"y = relpos_index(4, 4, 16777217)\noutput y\n",
         "relpos_index: max relative position is 16777217, must be in [0, 16777216]"},
        {"input x f32 [3, 4]\ny = view(x, [2], [1], -1)\noutput y\n", "view(x): negative offset -1"},
        {"input x f32 [3, 4]\ny = scale(x, 1e39)\noutput y\n", "r.graph:2:14: scale: 's' is 1e+39, past a float"},
        {"input x f32 [3, 4]\ny = view(x, [2, 2], [1])\noutput y\n", "view(x): 2 sizes but 1 strides"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        chk_case("build range %zu", i);
        gml_context *ctx = chk_ctx(1 << 16);
        gml_tensor *out;
        char err[512] = "";
        int n = gml_parse_graph(ctx, cases[i].text, strlen(cases[i].text), "r.graph", NULL, &out,
                                1, err, sizeof err);
        CHECK(n == -1, "parse fails (got %d)", n);
        CHECK_CONTAINS(err, cases[i].want);
        gml_free(ctx);
    }
}

/* Optional arguments left out take their defaults; a call writes back as
 * the same node. */
static void test_format(void) {
    chk_case("format");
    gml_context *ctx = chk_ctx(1 << 16);
    static const char text[] = "input s f32 [2, 3]\n"
                               "input q f32 [1, 1, 2, 4]\n"
                               "y = softmax(s)\n"
                               "z = flash_attn(q, q, q, causal=1)\n"
                               "output y, z\n";
    gml_tensor *out[2];
    char err[512] = "", buf[256];
    if (!CHECK(gml_parse_graph(ctx, text, strlen(text), "f.graph", NULL, out, 2, err, sizeof err) == 2,
               "parse: %s", err))
        return;
    gml_format_node(out[0], NULL, NULL, buf, sizeof buf);
    CHECK(strcmp(buf, "softmax(s, scale=1, causal=false)") == 0, "%s", buf);
    gml_format_node(out[1], NULL, NULL, buf, sizeof buf);
    CHECK(strcmp(buf, "flash_attn(q, q, q, scale=0.5, causal=true)") == 0, "%s", buf);
    int n = gml_format_node(out[1], NULL, NULL, buf, 8);
    CHECK(n == (int)strlen("flash_attn(q, q, q, scale=0.5, causal=true)") && strlen(buf) == 7,
          "a short buffer: %d, '%s'", n, buf);
    CHECK(gml_format_node(gml_get_tensor(ctx, "s"), NULL, NULL, buf, sizeof buf) == -1,
          "a leaf has no call");
    gml_free(ctx);
}

/* gml_form_build straight from C, as a binding would call it. */
static void test_build_api(void) {
    chk_case("gml_form_build");
    gml_context *ctx = chk_ctx(1 << 16);
    const gml_op_form *f = gml_form_find("permute");
    gml_tensor *x = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 3, 4), "x");
    gml_arg args[GML_MAX_ARGS] = {{.given = true, .t = x}, {.given = true, .list = {1, 0}, .n = 2}};
    gml_tensor *y = gml_form_build(ctx, f, args);
    CHECK(y && y->op == GML_OP_PERMUTE && gml_dim(y, 0) == 4, "permute(x, [1, 0]): %s",
          gml_last_error(ctx));
    gml_arg back[GML_MAX_ARGS];
    CHECK(gml_form_get_args(y, back) && back[0].t == x && back[1].n == 2 && back[1].list[0] == 1,
          "get_args gives the call back");
    CHECK(!gml_form_get_args(x, back), "a leaf has no arguments");
    args[0].t = NULL;
    CHECK(gml_form_build(ctx, f, args) == NULL, "a NULL tensor gives NULL, as builders do");
    CHECK_CONTAINS(gml_last_error(ctx), "gml_form_build: permute's a is NULL");
    gml_set_error(ctx, "first");
    CHECK(gml_form_build(ctx, f, args) == NULL && strcmp(gml_last_error(ctx), "first") == 0,
          "... and keeps the first message: '%s'", gml_last_error(ctx));
    gml_clear_error(ctx);
    args[0].t = x;
    args[1].given = false;
    CHECK(gml_form_build(ctx, f, args) == NULL, "a required argument left out");
    CHECK_CONTAINS(gml_last_error(ctx), "permute: missing argument 'axes'");
    gml_clear_error(ctx);
    /* flash_attn without q: its default scale would read q's shape */
    gml_arg fa[GML_MAX_ARGS] = {{.given = true}, {.given = true, .t = x}, {.given = true, .t = x}};
    CHECK(gml_form_build(ctx, gml_form_find("flash_attn"), fa) == NULL, "flash_attn(NULL, ...)");
    gml_free(ctx);
}

/* tools/graphs/README.md's op table is what the registry prints. */
static void test_readme_table(const char *readme) {
    chk_case("README op table");
    char *text = slurp_path(readme);
    if (!CHECK(text, "read %s", readme)) return;
    static const char begin[] = "<!-- ops: generated by run-graph --list-ops", end[] = "<!-- /ops -->";
    char *b = strstr(text, begin), *e = b ? strstr(b, end) : NULL;
    if (CHECK(b && e, "%s has the markers '%s' ... '%s'", readme, begin, end)) {
        b = strchr(b, '\n') + 1;
        char *table = NULL;
        size_t len = 0;
        FILE *ms = open_memstream(&table, &len);
        if (CHECK(ms, "open_memstream")) {
            gml_write_op_table(ms);
            fclose(ms);
            CHECK((size_t)(e - b) == len && memcmp(b, table, len) == 0,
                  "%s's op table differs from the registry's; regenerate it with run-graph "
                  "--list-ops:\n%s", readme, table);
            free(table);
        }
    }
    free(text);
}

int main(int argc, char **argv) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/gml_registry_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    test_forms();
    test_every_op();
    test_build_ranges();
    test_format();
    test_build_api();
    if (argc > 1) test_readme_table(argv[1]);
    else CHECK(false, "usage: test_ops_registry tools/graphs/README.md");
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return chk_summary();
}
