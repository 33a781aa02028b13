#define _POSIX_C_SOURCE 200809L
/* Graph files: a graph saved as text and read back is the same graph (equal
 * digest) and computes the same bytes; hand-written files with symbols,
 * expressions and nested calls build what the C API builds; every parse
 * error says file:line:col and what was wrong; large files parse and save in
 * time linear in their size (names are found through the hash index). */
#include "check.h"
#include <ggmlite/hashindex.h>

#include <ggmlite/io.h>
#include <time.h>
#include <unistd.h>

static char tmpdir[64];

/* Binds `input`/`param` names to tensors of a table (the CLI binds files). */
typedef struct bindings {
    gml_tensor *t[16];
    int n;
} bindings;

static gml_tensor *bind_by_name(void *user, const char *name, bool is_param) {
    (void)is_param;
    bindings *b = user;
    for (int i = 0; i < b->n; i++)
        if (strcmp(b->t[i]->name, name) == 0) return b->t[i];
    return NULL;
}

/* Every op form at least once: an attention block with a relative-position
 * term, valid lengths, a cache copy and a view with an offset. */
typedef struct built {
    gml_tensor *out, *attn, *x, *w, *w2, *lens, *table, *cache;
} built;

static built build_reference(gml_context *ctx, bool flag_leafs) {
    built b;
    const int64_t B = 2, T = 5, D = 12, H = 3, dk = 4, P = 2;
    b.x = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, B, T, D), "x");
    b.w = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, D, D), "w_q.weight");
    b.w2 = gml_set_name(gml_new_tensor_1d(ctx, GML_F32, D), "w_q.bias");
    b.lens = gml_set_name(gml_new_tensor_1d(ctx, GML_I32, B), "valid_lens");
    b.table = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 2 * P + 1, dk), "rel_k.weight");
    b.cache = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, B, 2 * T, D), "cache");
    if (flag_leafs) {
        gml_set_flags(b.x, GML_FLAG_INPUT);
        gml_set_flags(b.lens, GML_FLAG_INPUT);
        gml_set_flags(b.cache, GML_FLAG_INPUT);
        gml_set_flags(b.w, GML_FLAG_PARAM);
        gml_set_flags(b.w2, GML_FLAG_PARAM);
        gml_set_flags(b.table, GML_FLAG_PARAM);
    }
    gml_tensor *q = gml_linear(ctx, b.x, b.w, b.w2);                  /* [B, T, D] */
    gml_tensor *qh = gml_permute(ctx, gml_reshape(ctx, q, 4, (int64_t[]){B, T, H, dk}),
                                 (int[]){0, 2, 1, 3});                 /* [B, H, T, dk] */
    gml_tensor *kh = gml_repeat_interleave(
        ctx, gml_view(ctx, qh, 4, (int64_t[]){B, 1, T, dk}, (size_t[]){qh->nb[0], qh->nb[1], qh->nb[2], 4}, 4 * dk),
        H, 1);                                                         /* [B, H, T, dk] */
    gml_tensor *s = gml_matmul(ctx, qh, gml_transpose(ctx, kh, -2, -1)); /* [B, H, T, T] */
    gml_tensor *rel = gml_get_rows(ctx, b.table, gml_relpos_index(ctx, T, T, P)); /* [T, T, dk] */
    gml_tensor *srel = gml_permute(ctx, gml_matmul(ctx, gml_permute(ctx, qh, (int[]){2, 0, 1, 3}),
                                                   gml_transpose(ctx, gml_reshape(ctx, rel, 4, (int64_t[]){T, 1, T, dk}), -2, -1)),
                                   (int[]){1, 2, 0, 3});              /* [B, H, T, T] */
    s = gml_add(ctx, s, srel);
    gml_tensor *mask = gml_valid_len_mask(ctx, b.lens, T);            /* [B, 1, 1, T] */
    b.attn = gml_softmax(ctx, s, mask, 0.5f, true);
    gml_set_name(b.attn, "attn");
    gml_tensor *c = gml_matmul(ctx, b.attn, kh);                      /* [B, H, T, dk] */
    c = gml_reshape(ctx, gml_cont(ctx, gml_permute(ctx, c, (int[]){0, 2, 1, 3})), 3, (int64_t[]){B, T, D});
    c = gml_mul(ctx, gml_scale(ctx, c, 1.0f / 3.0f), q);
    gml_tensor *slot = gml_view(ctx, b.cache, 3, (int64_t[]){B, T, D},
                                (size_t[]){b.cache->nb[1], b.cache->nb[2], b.cache->nb[3]}, (size_t)T * D * 4);
    b.out = gml_cpy(ctx, c, slot);
    gml_set_name(b.out, "out");
    return b;
}

static void fill(built *b, uint64_t seed) {
    chk_rng r = chk_seed(seed);
    chk_fill_uniform(b->x, &r, -1, 1);
    chk_fill_uniform(b->w, &r, -0.5f, 0.5f);
    chk_fill_uniform(b->w2, &r, -0.5f, 0.5f);
    chk_fill_uniform(b->table, &r, -1, 1);
    chk_fill_value(b->cache, 0.25f);
    ((int32_t *)b->lens->data)[0] = 3;
    ((int32_t *)b->lens->data)[1] = 5;
}

static void test_round_trip(void) {
    chk_case("save then parse gives the same graph and the same bytes");
    gml_context *c1 = chk_ctx(1 << 22);
    built a = build_reference(c1, true);
    CHECK(a.out && a.attn, "reference graph builds: %s", gml_last_error(c1));
    if (!a.out) return;
    gml_tensor *outs1[2] = {a.out, a.attn};
    gml_graph *g1 = gml_build_graph(c1, outs1, 2);
    char path[128], err[512] = "";
    snprintf(path, sizeof path, "%s/attn.graph", tmpdir);
    CHECK(gml_save_graph(path, g1, outs1, 2, err, sizeof err) == GML_OK, "save: %s", err);

    /* Read it back, binding the leafs to the first context's tensors' data. */
    gml_context *c2 = chk_ctx(1 << 22);
    built b = build_reference(c2, true); /* only its leafs are used */
    bindings bind = {{b.x, b.w, b.w2, b.lens, b.table, b.cache}, 6};
    gml_graph_binder binder = {.bind = bind_by_name, .user = &bind};
    gml_tensor *outs2[4];
    int n = gml_load_graph(c2, path, &binder, outs2, 4, err, sizeof err);
    CHECK(n == 2, "load: %d outputs: %s", n, err);
    if (n != 2) return;
    CHECK(strcmp(outs2[0]->name, "out") == 0 && strcmp(outs2[1]->name, "attn") == 0,
          "outputs keep their names: %s, %s", outs2[0]->name, outs2[1]->name);
    gml_graph *g2 = gml_build_graph(c2, outs2, 2);
    CHECK(gml_graph_n_nodes(g2) == gml_graph_n_nodes(g1), "node count %d vs %d", gml_graph_n_nodes(g2),
          gml_graph_n_nodes(g1));
    CHECK(gml_graph_digest(g2) == gml_graph_digest(g1), "digest %016llx vs %016llx",
          (unsigned long long)gml_graph_digest(g2), (unsigned long long)gml_graph_digest(g1));

    fill(&a, 7);
    fill(&b, 7);
    CHECK(gml_graph_compute(g1, 2) == GML_OK, "compute original: %s", gml_graph_error(g1));
    CHECK_RUN(g2, .outs = outs2, .n_outs = 2);
    CHECK(gml_graph_compute(g2, 2) == GML_OK, "compute loaded: %s", gml_graph_error(g2));
    float *want_out = chk_dense(a.out), *want_attn = chk_dense(a.attn);
    CHECK_EQUAL(outs2[0], want_out, "loaded graph's out equals the original's");
    CHECK_EQUAL(outs2[1], want_attn, "loaded graph's attn equals the original's");
    free(want_out);
    free(want_attn);

    /* Saving the loaded graph again writes the same text. */
    char path2[128];
    snprintf(path2, sizeof path2, "%s/attn2.graph", tmpdir);
    CHECK(gml_save_graph(path2, g2, outs2, 2, err, sizeof err) == GML_OK, "save again: %s", err);
    FILE *f1 = fopen(path, "rb"), *f2 = fopen(path2, "rb");
    char t1[16384] = "", t2[16384] = "";
    size_t n1 = f1 ? fread(t1, 1, sizeof t1 - 1, f1) : 0, n2 = f2 ? fread(t2, 1, sizeof t2 - 1, f2) : 0;
    CHECK(n1 > 0 && n1 == n2 && memcmp(t1, t2, n1) == 0, "the text is a fixed point (%zu vs %zu bytes)", n1, n2);
    CHECK_CONTAINS(t1, "param w_q.weight f32 [12, 12]");
    CHECK_CONTAINS(t1, "input valid_lens i32 [2]");
    CHECK_CONTAINS(t1, "softmax(");
    CHECK_CONTAINS(t1, "output out\noutput attn\n");
    if (f1) fclose(f1);
    if (f2) fclose(f2);
    gml_graph_free(g1);
    gml_graph_free(g2);
    gml_free(c1);
    gml_free(c2);
}

/* A hand-written file with symbols, let, sqrt, nested calls and name=value
 * arguments builds the same graph as the C API. */
static const char *HAND =
    "# one attention head, written by hand\n"
    "let dk = D / H\n"
    "input x f32 [B, T, D]      # B and T come from the bound tensor\n"
    "param w f32 [D, D]\n"
    "qh = permute(reshape(linear(x, w), [B, T, H, dk]), [0, 2, 1, 3])\n"
    "a = softmax(matmul(qh, transpose(qh, -2, -1)), none, scale = 1 / sqrt(dk), causal=true)\n"
    "o = reshape(cont(permute(matmul(a, qh), [0, 2, 1, 3])), [B, T, H * dk])\n"
    "output o, a\n";

static void test_hand_written(void) {
    chk_case("hand-written file with symbols");
    const int64_t B = 2, T = 3, D = 8, H = 2;
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *x = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, B, T, D), "x");
    gml_tensor *w = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, D, D), "w");
    chk_rng r = chk_seed(3);
    chk_fill_uniform(x, &r, -1, 1);
    chk_fill_uniform(w, &r, -1, 1);
    bindings bind = {{x, w}, 2};
    const char *names[] = {"D", "H"};
    const int64_t values[] = {D, H};
    gml_graph_binder binder = {.bind = bind_by_name, .user = &bind, .sym_names = names, .sym_values = values,
                               .n_syms = 2};
    gml_tensor *outs[2];
    char err[512] = "";
    int n = gml_parse_graph(ctx, HAND, strlen(HAND), "hand.graph", &binder, outs, 2, err, sizeof err);
    CHECK(n == 2, "parse: %s", err);
    if (n != 2) return;

    /* the same through the C API */
    gml_tensor *qh = gml_permute(ctx, gml_reshape(ctx, gml_linear(ctx, x, w, NULL), 4, (int64_t[]){B, T, H, D / H}),
                                 (int[]){0, 2, 1, 3});
    gml_tensor *a = gml_softmax(ctx, gml_matmul(ctx, qh, gml_transpose(ctx, qh, -2, -1)), NULL,
                                1.0f / sqrtf((float)(D / H)), true);
    gml_tensor *o = gml_reshape(ctx, gml_cont(ctx, gml_permute(ctx, gml_matmul(ctx, a, qh), (int[]){0, 2, 1, 3})),
                                3, (int64_t[]){B, T, D});
    gml_tensor *api[2] = {o, a};
    gml_graph *g_file = gml_build_graph(ctx, outs, 2), *g_api = gml_build_graph(ctx, api, 2);
    CHECK(gml_graph_digest(g_file) == gml_graph_digest(g_api), "file and C API build the same graph");
    CHECK(gml_graph_compute(g_file, 1) == GML_OK && gml_graph_compute(g_api, 1) == GML_OK, "compute");
    float *want = chk_dense(o);
    CHECK_EQUAL(outs[0], want, "file graph output equals the C API's");
    free(want);
    CHECK(gml_graph_tensor(g_file, outs[0])->flags & GML_FLAG_OUTPUT, "outputs flagged");
    CHECK(x->flags & GML_FLAG_INPUT && w->flags & GML_FLAG_PARAM, "leafs flagged input/param");
    gml_graph_free(g_file);
    gml_graph_free(g_api);
    gml_free(ctx);
}

/* Unbound declarations make leafs in the context; symbols must be known. */
static void test_unbound(void) {
    chk_case("unbound inputs are created");
    gml_context *ctx = chk_ctx(1 << 20);
    const char *txt = "input a f32 [2, 3]\ninput b f32 [3]\ns = add(a, b)\noutput s\n";
    gml_tensor *out[1];
    char err[256] = "";
    CHECK(gml_parse_graph(ctx, txt, strlen(txt), "u.graph", NULL, out, 1, err, sizeof err) == 1, "%s", err);
    gml_tensor *a = gml_get_tensor(ctx, "a");
    CHECK(a && a->data && a->n_dims == 2 && a->ne[2] == 2 && a->ne[3] == 3, "leaf a [2,3] created with data");
    gml_free(ctx);
}

/* Optional declarations: unbound they are none, and none flows through the
 * file: linear without its bias, softmax without its mask, add(a, none) = a,
 * and a call needing a none tensor is none. The same file with everything
 * bound builds the full graph; make_optional makes leafs instead. */
static const char *OPTIONAL =
    "input x f32 [B, T, D]\n"
    "input lens i32 [B] optional\n"
    "param w f32 [D, D]\n"
    "param b f32 [D] optional\n"
    "param extra f32 [T, D] optional\n"
    "y = reshape(linear(x, w, b), [B, 1, T, D])\n"
    "s = matmul(y, transpose(y, -2, -1))\n"
    "m = valid_len_mask(lens, T)                 # none without lens\n"
    "a = softmax(s, m, scale=0.5, causal=CAUSAL)\n"
    "z = add(matmul(a, y), mul(extra, none))     # extra none -> z is the matmul\n"
    "zz = z                                      # an alias keeps z's name\n"
    "output zz, a\n";

/* The last tensor of ctx called name (the parser's, not the test's own). */
static gml_tensor *last_named(gml_context *ctx, const char *name) {
    gml_tensor *found = NULL;
    for (gml_tensor *t = gml_get_first_tensor(ctx); t; t = gml_get_next_tensor(ctx, t))
        if (strcmp(t->name, name) == 0) found = t;
    return found;
}

static bool make_params(void *user, const char *name, bool is_param) {
    (void)user, (void)name;
    return is_param;
}

static void test_optional(void) {
    const int64_t B = 2, T = 3, D = 4;
    for (int variant = 0; variant < 4; variant++) {
        /* 0: nothing optional bound; 1: lens and b bound; 2: make_optional
         * makes params; 3: no binder callback at all (everything made) */
        chk_case("optional declarations, variant %d", variant);
        gml_context *ctx = chk_ctx(1 << 20);
        gml_tensor *x = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, B, T, D), "x");
        gml_tensor *w = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, D, D), "w");
        gml_tensor *b = gml_set_name(gml_new_tensor_1d(ctx, GML_F32, D), "b");
        gml_tensor *lens = gml_set_name(gml_new_tensor_1d(ctx, GML_I32, B), "lens");
        chk_rng r = chk_seed(11);
        chk_fill_uniform(x, &r, -1, 1);
        chk_fill_uniform(w, &r, -1, 1);
        chk_fill_uniform(b, &r, -1, 1);
        ((int32_t *)lens->data)[0] = 2;
        ((int32_t *)lens->data)[1] = 3;
        bindings bind = {{x, w}, 2};
        if (variant == 1) bind = (bindings){{x, w, b, lens}, 4};
        const char *names[] = {"B", "T", "D", "CAUSAL"};
        const int64_t values[] = {B, T, D, 1};
        gml_graph_binder binder = {.bind = variant == 3 ? NULL : bind_by_name, .user = &bind,
                                   .sym_names = names, .sym_values = values, .n_syms = 4,
                                   .make_optional = variant == 2 ? make_params : NULL};
        gml_tensor *outs[2];
        char err[512] = "";
        int n = gml_parse_graph(ctx, OPTIONAL, strlen(OPTIONAL), "opt.graph", &binder, outs, 2, err, sizeof err);
        CHECK(n == 2, "parse: %s", err);
        if (n != 2) {
            gml_free(ctx);
            continue;
        }
        CHECK(strcmp(outs[0]->name, "z") == 0, "the alias kept the name 'z', got '%s'", outs[0]->name);
        CHECK(strcmp(x->name, "x") == 0, "the bound input kept its name, got '%s'", x->name);

        /* what the file should have built, through the C API */
        gml_tensor *bb = variant == 1 ? b : variant >= 2 ? last_named(ctx, "b") : NULL;
        CHECK((variant >= 2) == (bb != NULL && bb != b), "param b made only by make_optional or without a binder");
        gml_tensor *y = gml_reshape(ctx, gml_linear(ctx, x, w, bb), 4, (int64_t[]){B, 1, T, D});
        gml_tensor *m = variant == 1 ? gml_valid_len_mask(ctx, lens, T) : NULL;
        gml_tensor *a = gml_softmax(ctx, gml_matmul(ctx, y, gml_transpose(ctx, y, -2, -1)), m, 0.5f, true);
        gml_tensor *z = gml_matmul(ctx, a, y);
        if (variant >= 2) z = gml_add(ctx, z, last_named(ctx, "extra"));
        gml_tensor *api[2] = {z, a};
        if (variant == 3) { /* lens is made too; made leafs hold garbage: compare structure only */
            gml_tensor *lens_made = last_named(ctx, "lens");
            CHECK(lens_made && lens_made != lens, "without a binder, lens is made");
            a = gml_softmax(ctx, gml_matmul(ctx, y, gml_transpose(ctx, y, -2, -1)),
                            gml_valid_len_mask(ctx, lens_made, T), 0.5f, true);
            api[0] = gml_add(ctx, gml_matmul(ctx, a, y), last_named(ctx, "extra"));
            api[1] = a;
        }
        gml_graph *g_file = gml_build_graph(ctx, outs, 2), *g_api = gml_build_graph(ctx, api, 2);
        CHECK(gml_graph_digest(g_file) == gml_graph_digest(g_api), "file and C API build the same graph (%d vs %d nodes)",
              gml_graph_n_nodes(g_file), gml_graph_n_nodes(g_api));
        if (variant < 2) {
            CHECK(gml_graph_compute(g_file, 2) == GML_OK && gml_graph_compute(g_api, 1) == GML_OK, "compute");
            float *want = chk_dense(api[0]);
            CHECK_EQUAL(outs[0], want, "file output equals the C API's");
            free(want);
        }
        gml_graph_free(g_file);
        gml_graph_free(g_api);
        gml_free(ctx);
    }

    chk_case("an output that is none");
    gml_context *ctx = chk_ctx(1 << 16);
    bindings none_bound = {{NULL}, 0};
    gml_graph_binder binder = {.bind = bind_by_name, .user = &none_bound};
    const char *txt = "input a f32 [2] optional\nb = scale(a, 2)\noutput b\n";
    gml_tensor *out[1];
    char err[512] = "";
    CHECK(gml_parse_graph(ctx, txt, strlen(txt), "n.graph", &binder, out, 1, err, sizeof err) == -1, "fails");
    CHECK_CONTAINS(err, "n.graph:3:8: output is none");
    const char *txt2 = "input a f32 [2] optional\nlet k = a\n";
    CHECK(gml_parse_graph(ctx, txt2, strlen(txt2), "n.graph", &binder, out, 1, err, sizeof err) == -1, "fails");
    CHECK_CONTAINS(err, "n.graph:2:9: 'a' is a tensor, not a number");
    gml_free(ctx);

    chk_case("booleans from numbers");
    ctx = chk_ctx(1 << 20);
    gml_tensor *s = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 3, 3), "s");
    bindings sb = {{s}, 1};
    const char *nm[] = {"C"};
    for (int c = 0; c <= 1; c++) {
        const int64_t vals[] = {c};
        gml_graph_binder bd = {.bind = bind_by_name, .user = &sb, .sym_names = nm, .sym_values = vals, .n_syms = 1};
        const char *t3 = "input s f32 [3, 3]\na = softmax(s, causal=C * 2)\noutput a\n";
        gml_tensor *o[1];
        CHECK(gml_parse_graph(ctx, t3, strlen(t3), "c.graph", &bd, o, 1, err, sizeof err) == 1, "%s", err);
        gml_tensor *want = gml_softmax(ctx, s, NULL, 1.0f, c != 0);
        gml_graph *g1 = gml_build_graph(ctx, o, 1), *g2 = gml_build_graph(ctx, &want, 1);
        CHECK(gml_graph_digest(g1) == gml_graph_digest(g2), "causal=C*2 with C=%d is causal=%s", c, c ? "true" : "false");
        gml_graph_free(g1);
        gml_graph_free(g2);
    }
    gml_free(ctx);
}

typedef struct bad_case {
    const char *text, *want;
} bad_case;

static void test_errors(void) {
    static const bad_case cases[] = {
        {"input x f32 [2, 3]\ny = sofmax(x)\noutput y\n", "bad.graph:2:5: unknown op 'sofmax'; known ops: view"},
        {"input x f32 [2, 3]\ny = add(x, z)\noutput y\n", "bad.graph:2:12: unknown tensor 'z'"},
        {"input x f32 [2, 3]\ny = scale(x, 1.5.5)\noutput y\n", "bad.graph:2:14: bad number '1.5.5'"},
        {"input x f32 [2, 3]\ny = transpose(x, 0)\noutput y\n", "bad.graph:2:5: transpose: missing argument 'd1'"},
        {"input x f32 [2, 3]\ny = cont(x, x)\noutput y\n", "bad.graph:2:13: cont takes at most 1 arguments"},
        {"input x f32 [2, 3]\ny = softmax(x, causal=true, causal=false)\noutput y\n",
         "bad.graph:2:29: softmax: argument 'causal' given twice"},
        {"input x f32 [2, 3]\ny = softmax(x, causal=maybe)\noutput y\n",
         "bad.graph:2:23: softmax: 'causal' expects one of false, true/bottom_right, top_left or a whole number (0 false, else true)"},
        {"input x f32 [2, 3]\ny = cont(none)\noutput y\n", "bad.graph:2:10: 'none' where a tensor is needed"},
        {"input x f32 [2, 3] optionl\noutput x\n", "bad.graph:1:20: unexpected 'o' after the statement"},
        {"input optional f32 [2]\noutput optional\n", "bad.graph:1:7: 'optional' is a reserved word"},
        {"input x f32 [2, 3]\ny = softmax(x, warmth=1)\noutput y\n", "bad.graph:2:16: softmax has no argument 'warmth'"},
        {"input x f32 [2, 3]\ny = softmax(scale=2, x)\noutput y\n",
         "bad.graph:2:22: softmax: a positional argument after name=value ones"},
        {"input x f32 [2, 3]\ninput x f32 [3]\noutput x\n", "bad.graph:2:7: 'x' is already defined"},
        {"input let f32 [2]\noutput let\n", "bad.graph:1:7: 'let' is a reserved word"},
        {"input x f64 [2]\noutput x\n", "bad.graph:1:9: type 'f64' is not f32, i32, f16, bf16 or q8_0"},
        {"input x f32 [2, 0]\noutput x\n", "bad.graph:1:17: size 0 of dim 1; sizes are >= 1"},
        {"input x f32 [1, 2, 3, 4, 5]\noutput x\n", "bad.graph:1:26: more than 4 dimensions"},
        {"input x f32 [N]\noutput x\n", "bad.graph:1:14: unknown symbol 'N'"},
        {"let n = 7 / 2\n", "bad.graph:1:9: expected a whole number, got 3.5"},
        /* the axis as written, not cut to an int first (2^32 + 1 is not 1) */
        {"input x f32 [2, 3]\ny = permute(x, [4294967297, 0])\noutput y\n",
         "bad.graph:2:5: permute(x): axis 4294967297 is out of range for a 2-D input [2,3]"},
        {"input x f32 [2, 3]\ny = transpose(x, -4294967295, 0)\noutput y\n",
         "bad.graph:2:5: transpose(x): dim -4294967295 is out of range for a 2-D input [2,3]"},
        {"let n = 7 / (3 - 3)\n", "bad.graph:1:11: division by zero"},
        {"input x f32 [2, 3]\ny = reshape(x, [4, 2])\noutput y\n",
         "bad.graph:2:5: reshape(x): [2,3] has 6 elements, [4,2] has 8"},
        {"input q f32 [2, 8, 10, 64]\ninput k f32 [2, 8, 32, 10]\ns = matmul(q, k)\noutput s\n",
         "bad.graph:3:5: matmul(q, k): inner sizes differ: [2,8,10,64] @ [2,8,32,10]"},
        {"input x f32 [2, 3]\ny = cont(x) z\noutput y\n", "bad.graph:2:13: unexpected 'z' after the statement"},
        {"input x f32 [2, 3]\ny = cont(x\noutput y\n", "bad.graph:2:11: expected ')' before the end of the line"},
        {"input x f32 [2, 3]\n", "bad.graph:2:1: no 'output' statement"},
        {"input x f32 [2, 3]\noutput x, x, x\n", "bad.graph:2:14: more than 2 outputs"},
        {"let a = 1\ny = cont(a)\noutput y\n", "bad.graph:2:10: 'a' is a number, not a tensor"},
        {"input x f32 [2]\nlet n = x + 1\n", "bad.graph:2:9: 'x' is a tensor, not a number"},
        {"let n = sqrt(-4)\n", "bad.graph:1:9: sqrt of a negative number"},
        {"input x f32 [2]\ny = view(x, [2], [1], 1)\noutput y\n", "bad.graph:2:5: view(x): shape [2] with byte strides [4] at offset 4"},
        {"let n = 1e999\n", "bad.graph:1:9: bad number '1e999'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        chk_case("bad graph %zu", i);
        gml_context *ctx = chk_ctx(1 << 16);
        gml_tensor *out[2];
        char err[512] = "";
        int n = gml_parse_graph(ctx, cases[i].text, strlen(cases[i].text), "bad.graph", NULL, out, 2, err,
                                sizeof err);
        CHECK(n == -1, "parse fails (got %d)", n);
        CHECK_CONTAINS(err, cases[i].want);
        CHECK(strchr(err, '\n') == NULL, "one line: %s", err);
        gml_free(ctx);
    }

    chk_case("binding mismatch");
    gml_context *ctx = chk_ctx(1 << 16);
    gml_tensor *x = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 2, 5), "x");
    bindings bind = {{x}, 1};
    gml_graph_binder binder = {.bind = bind_by_name, .user = &bind};
    const char *txt = "input x f32 [2, 3]\noutput x\n";
    gml_tensor *out[1];
    char err[512] = "";
    CHECK(gml_parse_graph(ctx, txt, strlen(txt), "b.graph", &binder, out, 1, err, sizeof err) == -1, "fails");
    CHECK_CONTAINS(err, "b.graph:1:7: input 'x': dim 1 is declared 3 but the bound tensor is [2,5]");
    const char *txt2 = "input x i32 [2, 5]\noutput x\n";
    CHECK(gml_parse_graph(ctx, txt2, strlen(txt2), "b.graph", &binder, out, 1, err, sizeof err) == -1, "fails");
    CHECK_CONTAINS(err, "input 'x' is declared i32 with 2 dims, but the bound tensor is f32 [2,5]");

    chk_case("missing file");
    CHECK(gml_load_graph(ctx, "/nonexistent/g.graph", NULL, out, 1, err, sizeof err) == -1, "fails");
    CHECK_CONTAINS(err, "/nonexistent/g.graph");
    gml_free(ctx);

    chk_case("deep nesting fails cleanly (no stack overflow)");
    static const char *const open_close[][3] = {{"let a = ", "(", ")"}, {"let a = ", "-", ""},
                                                 {"input x f32 [2]\ny = ", "cont(", ")"}};
    for (int k = 0; k < 3; k++) {
        const int n = 200000;
        size_t cap = strlen(open_close[k][0]) + (size_t)n * 6 + 32, len = 0;
        char *deep = malloc(cap);
        len += (size_t)snprintf(deep + len, cap - len, "%s", open_close[k][0]);
        for (int i = 0; i < n; i++) len += (size_t)snprintf(deep + len, cap - len, "%s", open_close[k][1]);
        len += (size_t)snprintf(deep + len, cap - len, "%s", k == 2 ? "x" : "1");
        for (int i = 0; i < n; i++) len += (size_t)snprintf(deep + len, cap - len, "%s", open_close[k][2]);
        len += (size_t)snprintf(deep + len, cap - len, "\n");
        gml_context *dctx = chk_ctx(1 << 16);
        CHECK(gml_parse_graph(dctx, deep, len, "deep.graph", NULL, out, 1, err, sizeof err) == -1, "fails");
        CHECK_CONTAINS(err, "nested more than 100 levels deep");
        gml_free(dctx);
        free(deep);
    }
    chk_case("nesting up to the limit is fine");
    gml_context *nctx = chk_ctx(1 << 16);
    const char *ok_deep = "let a = ((((((((((((((((((((1))))))))))))))))))))\ninput x f32 [a]\noutput x\n";
    CHECK(gml_parse_graph(nctx, ok_deep, strlen(ok_deep), "ok.graph", NULL, out, 1, err, sizeof err) == 1, "%s", err);
    gml_free(nctx);

    chk_case("NUL byte");
    ctx = chk_ctx(1 << 16);
    const char nul[] = "input x f32 [2]\0\noutput x\n";
    CHECK(gml_parse_graph(ctx, nul, sizeof nul - 1, "n.graph", NULL, out, 1, err, sizeof err) == -1, "fails");
    CHECK_CONTAINS(err, "n.graph:1:1: a NUL byte");
    gml_free(ctx);
}

/* ---- large files and the hash index ----------------------------------------- */

/* CPU seconds of this thread: a loaded machine (CI runs tests side by side on
 * two cores) stretches wall time, not this. */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "input x f32 [4]", then a1 = scale(x, 2) ... an = scale(an-1, 2), then
 * "output an". If dup > 0, the line that defines a<dup> (line dup + 1)
 * redefines a5 instead, indented by two spaces. Sets *len; free the result. */
static char *chain_text(int n, int dup, size_t *len) {
    size_t cap = (size_t)n * 40 + 64, k = 0;
    char *txt = malloc(cap);
    if (!txt) return NULL;
    k += (size_t)snprintf(txt + k, cap - k, "input x f32 [4]\n");
    for (int i = 1; i <= n; i++) {
        char src[16];
        snprintf(src, sizeof src, i == 1 ? "x" : "a%d", i - 1);
        if (i == dup) k += (size_t)snprintf(txt + k, cap - k, "  a5 = scale(%s, 2)\n", src);
        else k += (size_t)snprintf(txt + k, cap - k, "a%d = scale(%s, 2)\n", i, src);
    }
    k += (size_t)snprintf(txt + k, cap - k, "output a%d\n", n);
    *len = k;
    return txt;
}

static void test_large(void) {
    enum { N = 100000 };
    const size_t mem = gml_tensor_overhead() * 2 * (N + 100);
    size_t len;
    char err[512] = "";
    gml_tensor *out[1];

    chk_case("a %d-line chain parses and saves in linear time", N);
    char *txt = chain_text(N, 0, &len);
    gml_context *ctx = gml_init((gml_init_params){.mem_size = mem, .no_alloc = true});
    if (!CHECK(txt && ctx, "out of memory")) return;
    double t0 = now_s();
    int n = gml_parse_graph(ctx, txt, len, "chain.graph", NULL, out, 1, err, sizeof err);
    double t_parse = now_s() - t0;
    CHECK(n == 1, "parse: %d outputs: %s", n, err);
    if (n != 1) return;
    CHECK(strcmp(out[0]->name, "a100000") == 0, "the output is a100000, got '%s'", out[0]->name);
    /* Found by a linear scan of the names, this took 30 s (7.4 s at 40,000 lines). */
    CHECK(t_parse < 5.0, "parsing %d lines took %.2f CPU s (want < 5 s)", N + 2, t_parse);
    gml_graph *g = gml_build_graph(ctx, out, 1);
    CHECK(g && gml_graph_n_nodes(g) == N && gml_graph_n_leafs(g) == 1, "graph of %d nodes", N);
    if (!g) return;

    /* The saver's names: each checked against the names given before it. */
    char path[128];
    snprintf(path, sizeof path, "%s/chain.graph", tmpdir);
    t0 = now_s();
    CHECK(gml_save_graph(path, g, out, 1, err, sizeof err) == GML_OK, "save: %s", err);
    double t_save = now_s() - t0;
    CHECK(t_save < 5.0, "saving %d nodes took %.2f CPU s (want < 5 s)", N, t_save);
    gml_context *ctx2 = gml_init((gml_init_params){.mem_size = mem, .no_alloc = true});
    gml_tensor *out2[1];
    n = gml_load_graph(ctx2, path, NULL, out2, 1, err, sizeof err);
    CHECK(n == 1, "load of the saved chain: %s", err);
    if (n == 1) {
        gml_graph *g2 = gml_build_graph(ctx2, out2, 1);
        CHECK(g2 && gml_graph_digest(g2) == gml_graph_digest(g),
              "gml_save_graph then gml_load_graph of the chain gives the same digest");
        CHECK(strcmp(out2[0]->name, "a100000") == 0, "the saved output keeps its name, got '%s'",
              out2[0]->name);
        gml_graph_free(g2);
    }
    gml_free(ctx2);
    gml_graph_free(g);
    gml_free(ctx);
    free(txt);
    printf("  %d-line chain: parse %.3f s, save %.3f s\n", N + 2, t_parse, t_save);

    chk_case("a duplicate name deep in a large file");
    txt = chain_text(N, N / 2, &len);
    ctx = gml_init((gml_init_params){.mem_size = mem, .no_alloc = true});
    if (!CHECK(txt && ctx, "out of memory")) return;
    n = gml_parse_graph(ctx, txt, len, "chain.graph", NULL, out, 1, err, sizeof err);
    CHECK(n == -1, "parse fails (got %d)", n);
    CHECK_CONTAINS(err, "chain.graph:50001:3: 'a5' is already defined");
    gml_free(ctx);
    free(txt);
}

/* Own names that the saver's renaming walks up to the longest name, ending
 * in '_' and still taken: appending or replacing a last '_' changes nothing,
 * which looped forever. Entries (pre-order from the output): t1, t1, t1, t1_,
 * t1__, ... and the leaf, t1 and 60 '_'. */
static void test_save_long_renames(void) {
    chk_case("saving names that rename to the longest name ends");
    gml_context *ctx = chk_ctx(1 << 20);
    char name[GML_MAX_NAME] = "t1";
    while (strlen(name) < GML_MAX_NAME - 2) strcat(name, "_");
    gml_tensor *t = gml_set_name(gml_new_tensor_1d(ctx, GML_F32, 4), name);
    gml_set_flags(t, GML_FLAG_INPUT);
    for (size_t k = strlen(name) - 1; k >= 2; k--) { /* t1 and 59 '_', down to t1 */
        name[k] = '\0';
        t = gml_set_name(gml_scale(ctx, t, 2), name);
    }
    t = gml_set_name(gml_scale(ctx, gml_set_name(gml_scale(ctx, t, 2), "t1"), 2), "t1");
    gml_graph *g = gml_build_graph(ctx, &t, 1);
    char path[128], err[512] = "";
    snprintf(path, sizeof path, "%s/long.graph", tmpdir);
    CHECK(gml_save_graph(path, g, &t, 1, err, sizeof err) == GML_OK, "save: %s", err);
    gml_context *ctx2 = chk_ctx(1 << 20);
    gml_tensor *out[1];
    int n = gml_load_graph(ctx2, path, NULL, out, 1, err, sizeof err);
    CHECK(n == 1, "load: %s", err);
    if (n == 1) {
        gml_graph *g2 = gml_build_graph(ctx2, out, 1);
        CHECK(gml_graph_digest(g2) == gml_graph_digest(g), "saved and loaded: the same digest");
        gml_graph_free(g2);
    }
    gml_graph_free(g);
    gml_free(ctx);
    gml_free(ctx2);
}

/* The index alone: string keys kept by the caller, every hash equal (so the
 * equality decides, across growth), a key that is absent, and clear. */
static bool word_is(const void *words, int val, const void *key) {
    return strcmp(((const char (*)[16])words)[val], key) == 0;
}

static void test_hashindex(void) {
    chk_case("hash index");
    enum { N = 1000 };
    static char words[N][16];
    for (int pass = 0; pass < 2; pass++) { /* 0: real hashes; 1: all equal */
        gml_hashindex ix = {0};
        CHECK(gml_hashindex_find(&ix, gml_hash_str("w1"), word_is, words, "w1") == -1, "empty");
        bool ok = true;
        for (int i = 0; i < N; i++) {
            snprintf(words[i], sizeof words[i], "w%d", i);
            ok = ok && gml_hashindex_add(&ix, pass ? 42 : gml_hash_str(words[i]), i);
        }
        CHECK(ok && ix.n == N && ix.n * 2 <= ix.cap, "%d added, at most half full (cap %zu)", N,
              ix.cap);
        int wrong = 0;
        for (int i = 0; i < N; i++)
            wrong += gml_hashindex_find(&ix, pass ? 42 : gml_hash_str(words[i]), word_is, words,
                                        words[i]) != i;
        CHECK(wrong == 0, "pass %d: %d of %d keys found at the wrong value", pass, wrong, N);
        CHECK(gml_hashindex_find(&ix, pass ? 42 : gml_hash_str("w1000"), word_is, words, "w1000") ==
                  -1,
              "an absent key is not found");
        gml_hashindex_clear(&ix);
        CHECK(ix.n == 0 && gml_hashindex_find(&ix, pass ? 42 : gml_hash_str("w1"), word_is, words,
                                              "w1") == -1,
              "clear empties it");
        gml_hashindex_free(&ix);
    }
    int x, y;
    CHECK(gml_hash_ptr(&x) != gml_hash_ptr(&y) && gml_hash_str("a") != gml_hash_str("b"),
          "different keys hash apart");
}

/* sym_used: which of the caller's symbols the file read, in a shape, a let,
 * a number argument; a symbol only defined is not read. */
static void test_sym_used(void) {
    chk_case("sym_used: the caller's symbols a file reads");
    gml_context *ctx = chk_ctx(1 << 16);
    const char *names[] = {"B", "T", "H", "CAUSAL", "P"};
    const int64_t values[] = {2, 3, 4, 1, 5};
    bool used[5] = {true, true, true, true, true};
    gml_graph_binder binder = {.sym_names = names, .sym_values = values, .n_syms = 5,
                               .sym_used = used};
    const char *text = "input x f32 [B, 7]\nlet two = T - 1\n"
                       "y = softmax(x, causal=CAUSAL)\noutput y\n";
    gml_tensor *out[1];
    char err[512] = "";
    int n = gml_parse_graph(ctx, text, strlen(text), "u.graph", &binder, out, 1, err, sizeof err);
    CHECK(n == 1, "parse: %s", err);
    const bool want[5] = {true, true, false, true, false};
    for (int i = 0; i < 5; i++)
        CHECK(used[i] == want[i], "symbol %s: used %d, expected %d", names[i], used[i], want[i]);
    gml_free(ctx);
}

/* `optional default none`, binders that require it of inputs, and add/mul
 * with none on either side. */
static void test_optional_default(void) {
    chk_case("optional inputs and their default");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *x = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 3, 3), "x");
    gml_tensor *m = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 3, 3), "m");
    chk_rng r = chk_seed(5);
    chk_fill_uniform(x, &r, -1, 1);
    chk_fill_uniform(m, &r, -1, 1);
    bindings only_x = {{x}, 1}, both = {{x, m}, 2};
    char err[512] = "";
    gml_tensor *o[1];
    const char *no_default = "input x f32 [3, 3]\ninput m f32 [3, 3] optional\ny = add(m, x)\noutput y\n";
    const char *with_default = "input x f32 [3, 3]\ninput m f32 [3, 3] optional default none\ny = add(m, x)\noutput y\n";
    gml_graph_binder strict = {.bind = bind_by_name, .user = &only_x, .optional_needs_default = true};
    CHECK(gml_parse_graph(ctx, no_default, strlen(no_default), "d.graph", &strict, o, 1, err, sizeof err) == -1,
          "unbound, no default, a binder that requires one: refused");
    CHECK_CONTAINS(err, "d.graph:2:7: input 'm' is optional, but nothing binds it and it declares no default");
    CHECK(gml_parse_graph(ctx, with_default, strlen(with_default), "d.graph", &strict, o, 1, err, sizeof err) == 1 &&
              o[0] == x, "default none: add(none, x) is x: %s", err);
    gml_graph_binder lax = {.bind = bind_by_name, .user = &only_x};
    CHECK(gml_parse_graph(ctx, no_default, strlen(no_default), "d.graph", &lax, o, 1, err, sizeof err) == 1 && o[0] == x,
          "a binder that does not require defaults: none, as before: %s", err);
    const char *param = "input x f32 [3, 3]\nparam m f32 [3, 3] optional\ny = mul(m, x)\noutput y\n";
    CHECK(gml_parse_graph(ctx, param, strlen(param), "p.graph", &strict, o, 1, err, sizeof err) == 1 && o[0] == x,
          "an optional param needs no default (bias=False); mul(none, x) is x: %s", err);
    gml_graph_binder bound = {.bind = bind_by_name, .user = &both, .optional_needs_default = true};
    CHECK(gml_parse_graph(ctx, no_default, strlen(no_default), "d.graph", &bound, o, 1, err, sizeof err) == 1 &&
              o[0] && o[0]->op == GML_OP_ADD && o[0]->src[0] == m && o[0]->src[1] == x,
          "bound: add(m, x): %s", err);
    const char *both_none = "input a f32 [3] optional default none\ninput b f32 [3] optional default none\n"
                            "y = add(a, b)\noutput y\n";
    CHECK(gml_parse_graph(ctx, both_none, strlen(both_none), "n.graph", &strict, o, 1, err, sizeof err) == -1,
          "add(none, none) is none");
    CHECK_CONTAINS(err, "n.graph:4:8: output is none");
    const char *bad = "input m f32 [3] optional default zero\noutput m\n";
    CHECK(gml_parse_graph(ctx, bad, strlen(bad), "b.graph", &strict, o, 1, err, sizeof err) == -1, "a default other than none");
    CHECK_CONTAINS(err, "b.graph:1:34: default 'zero': the only default is none");
    const char *sub = "input x f32 [3, 3]\ninput m f32 [3, 3] optional default none\ny = sub(m, x)\noutput y\n";
    CHECK(gml_parse_graph(ctx, sub, strlen(sub), "s.graph", &strict, o, 1, err, sizeof err) == -1,
          "sub(none, x) stays none (only add and mul take none first)");
    CHECK_CONTAINS(err, "output is none");
    gml_free(ctx);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/gml_graphfile_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    test_round_trip();
    test_hand_written();
    test_unbound();
    test_optional();
    test_optional_default();
    test_errors();
    test_large();
    test_save_long_renames();
    test_hashindex();
    test_sym_used();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return chk_summary();
}
