/* nn.MultiheadAttention's whole state_dict and the Hugging Face names,
 * against PyTorch: every case of tests/fixtures/mha_module (argv[1], written
 * by tests/fixtures/gen_mha_module.py) is bound by gml_attn_weights_find
 * from its own names (in_proj_*, q/k/v_proj_weight with kdim/vdim, bias_k,
 * bias_v; q_proj..o_proj; BERT's; GPT-2's Conv1D c_attn/c_proj), built by
 * gml_mha (unfused and fused) with its args (causal, valid lengths,
 * --add-zero-attn) and run under every ISA at 1, 2 and 3 threads: out and
 * the weights within 2e-4 + 2e-4 |want|. Then the errors of the binder and
 * of the extra key rows, messages checked. */
#define _POSIX_C_SOURCE 200809L /* strtok_r */

#include <ggmlite/attention.h>
#include <ggmlite/io.h>
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL_ABS 2e-4
#define TOL_REL 2e-4

static const char *const REQUIRED[] = {
    "bias_kv_lens", "bias_kv_causal", "zero_attn_causal_lens", "bias_kv_zero_attn_lens",
    "kdim_vdim_lens", "kdim_vdim_bias_kv_causal", "hf_names_causal", "bert_names_lens",
    "gpt2_conv1d_causal"};

typedef struct fargs {
    int heads;
    bool causal, zero_attn;
    char weights[256], input[256], query[256], key[256], value[256];
    int32_t lens[16];
    int n_lens;
} fargs;

static bool parse_args(const char *path, fargs *a) {
    *a = (fargs){0};
    FILE *f = fopen(path, "r");
    char line[2048];
    bool ok = f && fgets(line, sizeof line, f);
    if (f) fclose(f);
    if (!CHECK(ok, "%s: cannot read", path)) return false;
    char *save = NULL, *tok = strtok_r(line, " \t\r\n", &save);
    if (!CHECK(tok && strcmp(tok, "mha") == 0, "%s: not an mha case", path)) return false;
    while ((tok = strtok_r(NULL, " \t\r\n", &save))) {
        if (strcmp(tok, "--causal") == 0) {
            a->causal = true;
            continue;
        }
        if (strcmp(tok, "--add-zero-attn") == 0) {
            a->zero_attn = true;
            continue;
        }
        char *val = strtok_r(NULL, " \t\r\n", &save);
        if (!CHECK(val != NULL, "%s: %s has no value", path, tok)) return false;
        char *file = strcmp(tok, "--weights") == 0 ? a->weights
                     : strcmp(tok, "--input") == 0 ? a->input
                     : strcmp(tok, "--query") == 0 ? a->query
                     : strcmp(tok, "--key") == 0   ? a->key
                     : strcmp(tok, "--value") == 0 ? a->value
                                                   : NULL;
        if (file)
            snprintf(file, 256, "%s", val);
        else if (strcmp(tok, "--heads") == 0)
            a->heads = atoi(val);
        else if (strcmp(tok, "--valid-lens") == 0)
            for (char *s2 = NULL, *n = strtok_r(val, ",", &s2); n && a->n_lens < 16;
                 n = strtok_r(NULL, ",", &s2))
                a->lens[a->n_lens++] = (int32_t)atoi(n);
        else if (!CHECK(strcmp(tok, "--output") == 0 || strcmp(tok, "--attn-weights") == 0,
                        "%s: unknown option %s", path, tok))
            return false;
    }
    return CHECK(a->heads > 0 && a->weights[0], "%s: needs --heads and --weights", path);
}

static gml_context *owners[8];
static int n_owners;

static gml_tensor *load_npy(const char *dir, const char *file) {
    char path[1400], err[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    gml_context *c = gml_load_npy(path, NULL, err, sizeof err);
    if (!CHECK(c != NULL, "%s", err)) return NULL;
    owners[n_owners++] = c;
    return gml_get_first_tensor(c);
}

/* max |got - want| and whether every element is within the tolerance */
static double max_err(const gml_tensor *got, const gml_tensor *want, size_t *bad) {
    if (!CHECK(gml_is_contiguous(got), "'%s' is not contiguous", got->name)) return INFINITY;
    const int64_t n = gml_nelements(want);
    const float *g = got->data, *w = want->data; /* both contiguous (linear, softmax) */
    double e = 0;
    *bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)g[i] - w[i]);
        if (!(d <= TOL_ABS + TOL_REL * fabs((double)w[i]))) (*bad)++;
        if (!(d <= e)) e = d;
    }
    return e;
}

static void run_case(const char *root, const char *name) {
    char dir[1024], path[1400], err[1024];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    snprintf(path, sizeof path, "%s/args", dir);
    chk_case("%s", name);
    fargs a;
    if (!parse_args(path, &a)) return;
    n_owners = 0;
    snprintf(path, sizeof path, "%s/%s", dir, a.weights);
    gml_context *wctx = gml_load_safetensors(path, err, sizeof err);
    if (!CHECK(wctx != NULL, "%s", err)) return;
    gml_attn_weights w;
    if (!CHECK(gml_attn_weights_find(wctx, &w, err, sizeof err) == GML_OK, "%s: %s", path, err)) {
        gml_free(wctx);
        return;
    }
    CHECK(w.conv1d == (strstr(name, "gpt2") != NULL), "%s: conv1d %d", name, w.conv1d);
    CHECK((w.bias_k != NULL) == (strstr(name, "bias_kv") != NULL), "%s: bias_k bound", name);
    gml_attn_inputs in = {0};
    if (a.input[0]) {
        in.query = load_npy(dir, a.input);
    } else {
        in.query = load_npy(dir, a.query);
        in.key = load_npy(dir, a.key);
        in.value = load_npy(dir, a.value);
    }
    gml_tensor *out_want = load_npy(dir, "out.npy"), *attn_want = load_npy(dir, "attn.npy");
    gml_context *lctx = gml_init((gml_init_params){.mem_size = 1 << 12});
    if (a.n_lens) {
        in.valid_lens = gml_new_tensor_1d(lctx, GML_I32, a.n_lens);
        memcpy(in.valid_lens->data, a.lens, (size_t)a.n_lens * sizeof *a.lens);
    }
    double e_out = 0, e_attn = 0;
    for (int fused = 0; fused < 2 && in.query && out_want && attn_want; fused++) {
        gml_attn_config cfg = {
            .dims = {.n_heads = a.heads},
            .score = {.causal = a.causal ? GML_CAUSAL_BOTTOM_RIGHT : GML_CAUSAL_NONE,
                      .add_zero_attn = a.zero_attn},
            .graph = {.impl = fused ? GML_ATTN_FUSED : GML_ATTN_UNFUSED, .want_weights = !fused}};
        gml_context *ctx = gml_init((gml_init_params){.mem_size = 16 << 20});
        gml_attn_result r = gml_mha(ctx, cfg, &w, in);
        gml_graph *g =
            r.out ? gml_build_graph(ctx, (gml_tensor *[]){r.out, r.weights}, fused ? 1 : 2) : NULL;
        if (CHECK(g != NULL, "%s: %s", name, gml_last_error(ctx)) &&
            CHECK(gml_same_shape(r.out, out_want) && (fused || gml_same_shape(r.weights, attn_want)),
                  "%s: shapes", name)) {
            const gml_isa isas[] = {GML_TEST_ISAS};
            for (size_t ii = 0; ii < sizeof isas / sizeof *isas; ii++) {
                if (gml_set_isa(isas[ii]) != GML_OK) continue;
                for (int nth = 1; nth <= 3; nth++) {
                    if (!CHECK(gml_graph_compute(g, nth) == GML_OK, "%s: %s", name,
                               gml_graph_error(g)))
                        break;
                    size_t bo = 0, ba = 0;
                    e_out = fmax(e_out, max_err(r.out, out_want, &bo));
                    if (!fused) e_attn = fmax(e_attn, max_err(r.weights, attn_want, &ba));
                    CHECK(bo == 0 && ba == 0, "%s (%s, %s, %d threads): %zu outputs, %zu weights "
                          "out of tolerance", name, fused ? "fused" : "unfused",
                          gml_isa_name(isas[ii]), nth, bo, ba);
                }
            }
            gml_set_isa(GML_ISA_AUTO);
        }
        gml_graph_free(g);
        gml_free(ctx);
    }
    printf("%-26s max |err| out %.2e, attn %.2e\n", name, e_out, e_attn);
    for (int i = 0; i < n_owners; i++)
        gml_free(owners[i]);
    gml_free(lctx);
    gml_free(wctx);
}

/* ---- errors ------------------------------------------------------------------- */

static gml_context *names_ctx(const char *const *names, const int64_t (*shapes)[2], int n) {
    gml_context *c = gml_init((gml_init_params){.mem_size = 1 << 20});
    for (int i = 0; i < n; i++) {
        gml_tensor *t = shapes[i][1] ? gml_new_tensor_2d(c, GML_F32, shapes[i][0], shapes[i][1])
                                     : gml_new_tensor_1d(c, GML_F32, shapes[i][0]);
        memset(t->data, 0, (size_t)gml_nbytes(t));
        gml_set_name(t, names[i]);
    }
    return c;
}

static void find_expect(const char *const *names, int n, const char *want) {
    int64_t shapes[8][2];
    for (int i = 0; i < n; i++)
        shapes[i][0] = 8, shapes[i][1] = strstr(names[i], "bias") ? 0 : 8;
    gml_context *c = names_ctx(names, (const int64_t(*)[2])shapes, n);
    gml_attn_weights w;
    char err[1024];
    gml_status st = gml_attn_weights_find(c, &w, err, sizeof err);
    if (!want)
        CHECK(st == GML_OK, "%s ...: %s", names[0], err);
    else if (CHECK(st != GML_OK, "%s ...: accepted", names[0]))
        CHECK_CONTAINS(err, want);
    gml_free(c);
}

static void test_binder(void) {
    chk_case("binder");
    find_expect((const char *[]){"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                 "self_attn.v_proj.weight", "self_attn.o_proj.weight"},
                4, NULL);
    find_expect((const char *[]){"q_proj.weight", "k_proj.weight", "v_proj.weight",
                                 "out_proj.weight"},
                4, "two naming conventions mix: q_proj.weight is q_proj/k_proj/v_proj/o_proj, "
                   "out_proj.weight is nn.MultiheadAttention");
    find_expect((const char *[]){"w_q.weight", "w_k.weight", "w_v.weight", "attn.c_proj.weight"},
                4, "attn.c_proj.weight is GPT-2");
    find_expect((const char *[]){"attention.self.query.weight", "attention.self.key.weight"}, 2,
                "attention.self.query.weight, .key.weight and .value.weight are not all present; "
                "present: attention.self.query.weight [8,8], attention.self.key.weight [8,8]");
    find_expect((const char *[]){"o_proj.weight", "self_attn.o_proj.weight"}, 2,
                "both o_proj.weight and self_attn.o_proj.weight are present");
    find_expect((const char *[]){"foo.weight"}, 1, "no input projection");
    find_expect((const char *[]){"q_proj_weight", "k_proj_weight", "v_proj_weight"}, 3,
                "no output projection");
    CHECK(gml_attn_weight_name_known("attn.c_attn.bias") &&
              gml_attn_weight_name_known("self_attn.bias_k") &&
              gml_attn_weight_name_known("attention.output.dense.weight") &&
              !gml_attn_weight_name_known("mlp.c_fc.weight") &&
              !gml_attn_weight_name_known("attention.self.query"),
          "gml_attn_weight_name_known");
}

static void expect_fail(gml_context *ctx, gml_tensor *got, const char *want) {
    if (CHECK(got == NULL, "built, expected: %s", want)) CHECK_CONTAINS(gml_last_error(ctx), want);
}

static void test_block_errors(void) {
    chk_case("block errors");
    const int64_t B = 2, T = 4, D = 8;
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 4 << 20});
    gml_tensor *x = gml_new_tensor_3d(ctx, GML_F32, B, T, D);
    gml_tensor *xk = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, B, 6, 5), "xk");
    gml_tensor *wq = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, D, D), "wq");
    gml_tensor *wk5 = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, D, 5), "wk5");
    gml_tensor *packed = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 3 * D, D), "packed");
    gml_tensor *bk = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, 1, 1, D), "bk");
    gml_tensor *bad_bk = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 1, D), "bad_bk");
    gml_attn_config cfg = {.dims = {.n_heads = 2}};
    gml_attn_weights sep = {.w_q = wq, .w_k = wk5, .w_v = wk5, .w_o = wq};
    gml_attn_weights pk = {.in_proj_weight = packed, .w_o = wq};

    gml_attn_result r = gml_mha(ctx, cfg, &pk, (gml_attn_inputs){.query = x, .key = xk});
    expect_fail(ctx, r.out, "mha: in_proj_weight needs key and value of d_model 8, got kdim 5 "
                            "and vdim 5");
    gml_attn_weights wrong = {.w_q = wq, .w_k = wq, .w_v = wk5, .w_o = wq};
    gml_free(ctx), ctx = gml_init((gml_init_params){.mem_size = 4 << 20});
    x = gml_new_tensor_3d(ctx, GML_F32, B, T, D);
    xk = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, B, 6, 5), "xk");
    wrong.w_q = wrong.w_k = wrong.w_o = wq = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, D, D), "wq");
    wrong.w_v = wk5 = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, D, 5), "wk5");
    r = gml_mha(ctx, cfg, &wrong, (gml_attn_inputs){.query = x, .key = xk});
    expect_fail(ctx, r.out, "mha: w_k.weight ('wq') is [8,8], expected [8,5] ([d_model, kdim]: "
                            "the key's last dim is 5)");

#define FRESH()                                                                               \
    do {                                                                                      \
        gml_free(ctx);                                                                        \
        ctx = gml_init((gml_init_params){.mem_size = 4 << 20});                               \
        x = gml_new_tensor_3d(ctx, GML_F32, B, T, D);                                         \
        sep.w_q = sep.w_o = pk.w_o = gml_new_tensor_2d(ctx, GML_F32, D, D);                   \
        sep.w_k = sep.w_v = gml_new_tensor_2d(ctx, GML_F32, D, D);                            \
        pk.in_proj_weight = gml_new_tensor_2d(ctx, GML_F32, 3 * D, D);                        \
        bk = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, 1, 1, D), "bk");                    \
        bad_bk = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 1, D), "bad_bk");               \
    } while (0)
    FRESH();
    gml_attn_weights wb = sep;
    wb.bias_k = bk;
    r = gml_mha(ctx, cfg, &wb, (gml_attn_inputs){.query = x});
    expect_fail(ctx, r.out, "mha: bias_k given without bias_v (add_bias_kv needs both)");
    FRESH();
    wb = sep, wb.bias_k = bk, wb.bias_v = bad_bk;
    r = gml_mha(ctx, cfg, &wb, (gml_attn_inputs){.query = x});
    expect_fail(ctx, r.out, "mha: bias_v 'bad_bk' is f32 [1,8], expected f32 [1,1,8] or [8]");
    FRESH();
    gml_attn_config zc = cfg;
    zc.score.add_zero_attn = true;
    zc.score.window = 2;
    r = gml_mha(ctx, zc, &sep, (gml_attn_inputs){.query = x});
    expect_fail(ctx, r.out, "mha: add_zero_attn with a sliding window");
    FRESH();
    zc = cfg, zc.score.add_zero_attn = true, zc.score.causal = GML_CAUSAL_TOP_LEFT;
    gml_tensor *xs = gml_new_tensor_3d(ctx, GML_F32, B, 3, D);
    r = gml_mha(ctx, zc, &sep, (gml_attn_inputs){.query = x, .key = xs});
    expect_fail(ctx, r.out, "mha: causal (top-left) with add_zero_attn needs Tq <= Tk; Tq is 4, "
                            "Tk 3");
    FRESH();
    wb = sep, wb.bias_k = wb.bias_v = bk;
    gml_attn_qkv qkv = gml_attn_project(ctx, &cfg, &wb, (gml_attn_inputs){.query = x});
    expect_fail(ctx, qkv.q, "attn_project: bias_k/bias_v (add_bias_kv) are not supported by "
                            "the stages");
    FRESH();
    wb = sep, wb.bias_k = wb.bias_v = bk;
    r = gml_relpos_attn(ctx, cfg, 1, &wb, (gml_attn_inputs){.query = x});
    expect_fail(ctx, r.out, "relpos: bias_k/bias_v (add_bias_kv) are not supported");
    /* in_proj_bias with separate weights (nn.MultiheadAttention with kdim/vdim) builds */
    FRESH();
    wb = sep, wb.in_proj_bias = gml_new_tensor_1d(ctx, GML_F32, 3 * D);
    r = gml_mha(ctx, cfg, &wb, (gml_attn_inputs){.query = x});
    CHECK(r.out != NULL, "in_proj_bias with w_q/w_k/w_v: %s", gml_last_error(ctx));
#undef FRESH
    gml_free(ctx);
}

int main(int argc, char **argv) {
    const char *root = argc > 1 ? argv[1] : NULL;
    if (!root) {
        fprintf(stderr, "usage: test_attn_module tests/fixtures/mha_module\n");
        return 1;
    }
    for (size_t i = 0; i < sizeof REQUIRED / sizeof *REQUIRED; i++)
        run_case(root, REQUIRED[i]);
    test_binder();
    test_block_errors();
    return chk_summary();
}
