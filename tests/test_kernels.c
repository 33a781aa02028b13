/* Which kernels ran (gml_graph_node_kernel), so that a fast path that
 * quietly hands its node to the reference kernel fails here.
 *
 * For each op family with fast kernels (matmul on each of its four paths,
 * flash_attn, softmax, add/mul/sub/div/scale, the unary ops, sum/mean/max,
 * rms_norm/layer_norm, rope, cont, repeat_interleave, concat) a graph on
 * strided, permuted, sliced, broadcast and odd-sized inputs is computed
 * under every ISA the CPU has (scalar, AVX2, AVX-512, NEON: gml_cpu_has decides;
 * those it lacks are skipped with a message) and under the reference
 * kernels, at 1, 2, 3, 4 and 7 threads. Each node must name the micro-kernel of
 * that ISA (gml_<type>_<what>_ukernel__<isa>_<tile>) and its path; under
 * GML_ISA_REFERENCE, "reference". Results: the same bits at every thread
 * count; within a tight tolerance of the reference kernels' (bitwise for
 * moves); and where a strided input is packed or gathered (flash_attn's K
 * and V, softmax's and add/mul's rows), bitwise what the same data made
 * contiguous gives. The moves that have no fast kernel for a layout (a copy
 * between two strided last dims, a repeat of a transposed tensor) must say
 * so in their name. */
#include "check.h"

/* One node's expected kernel: under an ISA, prefix + isa name + "_" and then
 * anything up to the suffix (NULL: no path in parentheses); any_isa: the
 * name is exactly prefix (a family with a single variant). */
typedef struct expect {
    const gml_tensor *t;
    const char *prefix, *suffix;
    bool any_isa;
} expect;

/* Pairs that must be bitwise equal (strided vs the same data contiguous). */
typedef struct same {
    const gml_tensor *a, *b;
} same;

static bool names_ok(const char *name, const expect *e, gml_isa isa, char *want, size_t size) {
    if (isa == GML_ISA_REFERENCE) {
        snprintf(want, size, "reference");
        return name && strcmp(name, "reference") == 0;
    }
    if (e->any_isa) {
        snprintf(want, size, "%s", e->prefix);
        return name && strcmp(name, e->prefix) == 0;
    }
    snprintf(want, size, "%s%s_<tile>%s%s", e->prefix, gml_isa_name(isa), e->suffix ? " " : "",
             e->suffix ? e->suffix : "");
    const size_t np = strlen(e->prefix), ni = strlen(gml_isa_name(isa));
    if (!name || strncmp(name, e->prefix, np) != 0 || strncmp(name + np, gml_isa_name(isa), ni) != 0 ||
        name[np + ni] != '_')
        return false;
    const char *paren = strchr(name, '(');
    if (!e->suffix) return paren == NULL;
    const size_t ns = strlen(e->suffix), n = strlen(name);
    return n > ns && strcmp(name + n - ns, e->suffix) == 0 && name[n - ns - 1] == ' ';
}

/* Computes g under the reference kernels and every ISA the CPU has, at 1, 2,
 * 3, 4 and 7 threads; checks each expect, the outputs against the reference
 * kernels' within tol (0: bitwise) and across thread counts (bitwise), and
 * each pair bitwise. */
static void run_case(gml_graph *g, const expect *ex, int n_ex, gml_tensor *const *outs, int n_outs,
                     double tol, const same *pairs, int n_pairs) {
    if (!CHECK(g != NULL, "no graph")) return;
    static const gml_isa isas[] = {GML_TEST_ISAS};
    const gml_isa saved = gml_get_isa();
    enum { MAX_OUTS = 32 };
    double *ref[MAX_OUTS] = {0};
    float *first[MAX_OUTS] = {0};
    for (size_t s = 0; s < sizeof isas / sizeof *isas; s++) {
        if (!gml_cpu_has(isas[s])) {
            printf("  %s: the CPU lacks %s: its kernels are not checked\n", chk_state.case_name,
                   gml_isa_name(isas[s]));
            continue;
        }
        if (!CHECK(gml_set_isa(isas[s]) == GML_OK, "gml_set_isa(%s)", gml_isa_name(isas[s]))) continue;
        for (size_t kth = 0; kth < sizeof CHK_THREADS / sizeof *CHK_THREADS; kth++) {
            const int nth = CHK_THREADS[kth];
            snprintf(chk_state.config, sizeof chk_state.config, "%s kernels, %d thread%s",
                     gml_isa_name(isas[s]), nth, nth > 1 ? "s" : "");
            chk_poison_nodes(g);
            if (!CHECK(gml_graph_compute(g, nth) == GML_OK, "compute: %s", gml_graph_error(g))) continue;
            for (int i = 0; i < n_ex; i++) {
                const int node = gml_graph_find(g, ex[i].t);
                const char *name = gml_graph_node_kernel(g, node);
                char want[256];
                CHECK(names_ok(name, &ex[i], isas[s], want, sizeof want),
                      "node %d '%s' (%s) ran '%s', expected '%s'", node, ex[i].t->name,
                      gml_op_name(ex[i].t->op), name ? name : "(null)", want);
            }
            for (int o = 0; o < n_outs && o < MAX_OUTS; o++) {
                if (nth == 1) {
                    free(first[o]);
                    first[o] = chk_dense(outs[o]);
                } else {
                    CHECK_EQUAL(outs[o], first[o], "'%s' differs from the 1-thread result",
                                outs[o]->name);
                }
                if (isas[s] == GML_ISA_REFERENCE && nth == 1) {
                    const int64_t n = chk_numel(outs[o]);
                    ref[o] = malloc((size_t)n * sizeof(double));
                    for (int64_t e = 0; e < n; e++) ref[o][e] = first[o][e];
                } else if (ref[o] && tol > 0) {
                    CHECK_CLOSE(outs[o], ref[o], tol, tol, "'%s' against the reference kernels",
                                outs[o]->name);
                } else if (ref[o]) {
                    float *want = malloc((size_t)chk_numel(outs[o]) * sizeof(float));
                    for (int64_t e = 0; e < chk_numel(outs[o]); e++) want[e] = (float)ref[o][e];
                    CHECK_EQUAL(outs[o], want, "'%s' against the reference kernels", outs[o]->name);
                    free(want);
                }
            }
            for (int i = 0; i < n_pairs; i++) {
                float *b = chk_dense(pairs[i].b);
                CHECK_EQUAL(pairs[i].a, b, "'%s' (strided inputs) differs from '%s' (the same "
                            "inputs made contiguous)", pairs[i].a->name, pairs[i].b->name);
                free(b);
            }
        }
    }
    chk_state.config[0] = '\0';
    gml_set_isa(saved);
    for (int o = 0; o < MAX_OUTS; o++) {
        free(ref[o]);
        free(first[o]);
    }
}

/* ---- matmul: the four paths of ops/gemm.c ------------------------------------ */

static void test_matmul(void) {
    chk_rng r = chk_seed(1);
    gml_context *ctx = chk_ctx(16 << 20);
    /* Goto's loops (M = 71 > 64), A transposed in storage, B sliced */
    gml_tensor *a1 = chk_new_input(ctx, GML_F32, 3, (int64_t[]){3, 71, 29}, CHK_TRANSPOSED, "a1", &r, -1, 1);
    gml_tensor *b1 = chk_new_input(ctx, GML_F32, 2, (int64_t[]){29, 37}, CHK_SLICED, "b1", &r, -1, 1);
    gml_tensor *large = gml_set_name(gml_matmul(ctx, a1, b1), "large");
    /* few rows (M = 13), A's outer dims swapped, B reversed */
    gml_tensor *a2 = chk_new_input(ctx, GML_F32, 3, (int64_t[]){2, 13, 29}, CHK_OUTER_SWAPPED, "a2", &r, -1, 1);
    gml_tensor *b2 = chk_new_input(ctx, GML_F32, 3, (int64_t[]){2, 29, 19}, CHK_REVERSED, "b2", &r, -1, 1);
    gml_tensor *rows = gml_set_name(gml_matmul(ctx, a2, b2), "rows");
    /* few rows against an nn.Linear weight, long K: C^T = W A^T (M = 15 folded) */
    gml_tensor *x3 = chk_new_input(ctx, GML_F32, 3, (int64_t[]){3, 5, 301}, CHK_SLICED, "x3", &r, -1, 1);
    gml_tensor *w3 = chk_new_input(ctx, GML_F32, 2, (int64_t[]){37, 301}, CHK_CONTIGUOUS, "w3", &r, -1, 1);
    gml_tensor *rows_t = gml_set_name(gml_linear(ctx, x3, w3, NULL), "rows_t");
    /* one to four rows against a weight: matrix-vector */
    gml_tensor *x4 = chk_new_input(ctx, GML_F32, 2, (int64_t[]){3, 67}, CHK_SLICED, "x4", &r, -1, 1);
    gml_tensor *w4 = chk_new_input(ctx, GML_F32, 2, (int64_t[]){19, 67}, CHK_CONTIGUOUS, "w4", &r, -1, 1);
    gml_tensor *gemv = gml_set_name(gml_linear(ctx, x4, w4, NULL), "gemv");
    gml_tensor *outs[] = {large, rows, rows_t, gemv};
    gml_graph *g = gml_build_graph(ctx, outs, 4);
    const expect ex[] = {
        {large, "gml_f32_gemm_ukernel__", "(large)", false},
        {rows, "gml_f32_gemm_ukernel__", "(rows)", false},
        {rows_t, "gml_f32_gemm_ukernel__", "(rows_t)", false},
        {gemv, "gml_f32_gemv_ukernel__", NULL, false},
    };
    chk_case("matmul: large, rows, rows_t and gemv paths on strided operands");
    run_case(g, ex, 4, outs, 4, 1e-5, NULL, 0);
    gml_graph_free(g);
    gml_free(ctx);
}

/* ---- flash_attn: K and V rows strided (packed) or contiguous ------------------- */

static void test_flash_attn(int64_t B, int64_t H, int64_t G, int64_t Tq, int64_t Tk, int64_t dk,
                            bool causal) {
    chk_rng r = chk_seed((uint64_t)(Tq * 131 + Tk));
    gml_context *ctx = chk_ctx(16 << 20);
    gml_tensor *q = chk_new_input(ctx, GML_F32, 4, (int64_t[]){B, H, Tq, dk}, CHK_OUTER_SWAPPED, "q", &r, -1, 1);
    /* K's rows strided (stored [B, G, d_k, Tk]); V all dims reversed */
    gml_tensor *k = chk_new_input(ctx, GML_F32, 4, (int64_t[]){B, G, Tk, dk}, CHK_TRANSPOSED, "k", &r, -1, 1);
    gml_tensor *v = chk_new_input(ctx, GML_F32, 4, (int64_t[]){B, G, Tk, dk + 2}, CHK_REVERSED, "v", &r, -1, 1);
    gml_tensor *lens = gml_new_tensor_1d(ctx, GML_I32, B);
    for (int64_t b = 0; b < B; b++) ((int32_t *)lens->data)[b] = (int32_t)(b % 2 ? Tk - 3 : Tk);
    const float scale = 1.0f / sqrtf((float)dk);
    gml_tensor *strided = gml_set_name(gml_flash_attn(ctx, q, k, v, NULL, lens, scale, causal), "strided");
    gml_tensor *kc = gml_cont(ctx, k), *vc = gml_cont(ctx, v);
    gml_tensor *dense = gml_set_name(gml_flash_attn(ctx, q, kc, vc, NULL, lens, scale, causal), "dense");
    /* only V strided */
    gml_tensor *v_only = gml_set_name(gml_flash_attn(ctx, q, kc, v, NULL, lens, scale, causal), "v_only");
    /* K and V heads of [B, Tk, G, d] projections viewed as [B, G, Tk, d]: rows
     * of contiguous floats a row stride apart (packed too, but for decoding) */
    const int perm[4] = {0, 2, 1, 3};
    gml_tensor *kh = gml_permute(ctx, chk_new_input(ctx, GML_F32, 4, (int64_t[]){B, Tk, G, dk},
                                                    CHK_CONTIGUOUS, "kh", &r, -1, 1), perm);
    gml_tensor *vh = gml_permute(ctx, chk_new_input(ctx, GML_F32, 4, (int64_t[]){B, Tk, G, dk + 2},
                                                    CHK_CONTIGUOUS, "vh", &r, -1, 1), perm);
    gml_tensor *heads = gml_set_name(gml_flash_attn(ctx, q, kh, vh, NULL, lens, scale, causal), "heads");
    gml_tensor *heads_c = gml_set_name(
        gml_flash_attn(ctx, q, gml_cont(ctx, kh), gml_cont(ctx, vh), NULL, lens, scale, causal),
        "heads_c");
    gml_tensor *outs[] = {strided, dense, v_only, heads, heads_c};
    gml_graph *g = gml_build_graph(ctx, outs, 5);
    /* up to 8 rows per kv head: the decode kernels (keys in chunks from 512) */
    const bool dec = H / G * Tq <= 8, split = dec && Tk >= 512 && B * G < 16;
    const char *pre = dec ? "gml_f32_flash_dec_ukernel__" : "gml_f32_flash_ukernel__";
    const expect ex[] = {
        {strided, pre, split ? "(K/V rows packed; keys in chunks, merged in order)" : "(K/V rows packed)", false},
        {dense, pre, split ? "(keys in chunks, merged in order)" : NULL, false},
        {v_only, pre, split ? "(K/V rows packed; keys in chunks, merged in order)" : "(K/V rows packed)", false},
        {heads, pre, dec ? (split ? "(keys in chunks, merged in order)" : NULL) : "(K/V rows packed)", false},
        {heads_c, pre, split ? "(keys in chunks, merged in order)" : NULL, false},
    };
    const same pairs[] = {{strided, dense}, {v_only, dense}, {heads, heads_c}};
    chk_case("flash_attn: B %lld H %lld G %lld Tq %lld Tk %lld d_k %lld%s, K and V strided, "
             "K and V heads of [B, Tk, G, d]",
             (long long)B, (long long)H, (long long)G, (long long)Tq, (long long)Tk, (long long)dk,
             causal ? " causal" : "");
    run_case(g, ex, 5, outs, 5, 1e-5, pairs, 3);
    gml_graph_free(g);
    gml_free(ctx);
}

/* ---- softmax: strided rows gathered ---------------------------------------- */

static void test_softmax(void) {
    chk_rng r = chk_seed(3);
    gml_context *ctx = chk_ctx(16 << 20);
    gml_tensor *x = chk_new_input(ctx, GML_F32, 4, (int64_t[]){2, 3, 13, 37}, CHK_TRANSPOSED, "x", &r, -4, 4);
    gml_tensor *m = chk_new_input(ctx, GML_F32, 4, (int64_t[]){2, 1, 13, 37}, CHK_TRANSPOSED, "m", &r, -2, 2);
    gml_tensor *strided = gml_set_name(gml_softmax(ctx, x, m, 0.37f, true), "strided");
    gml_tensor *dense = gml_set_name(gml_softmax(ctx, gml_cont(ctx, x), gml_cont(ctx, m), 0.37f, true), "dense");
    /* a mask broadcast along the keys: gathered too */
    gml_tensor *mk = chk_new_input(ctx, GML_F32, 4, (int64_t[]){1, 3, 13, 1}, CHK_CONTIGUOUS, "mk", &r, -2, 2);
    gml_tensor *bcast = gml_set_name(gml_softmax(ctx, gml_cont(ctx, x), mk, 1.0f, false), "bcast");
    gml_tensor *outs[] = {strided, dense, bcast};
    gml_graph *g = gml_build_graph(ctx, outs, 3);
    const expect ex[] = {
        {strided, "gml_f32_softmax_ukernel__", "(strided rows gathered)", false},
        {dense, "gml_f32_softmax_ukernel__", NULL, false},
        {bcast, "gml_f32_softmax_ukernel__", "(strided rows gathered)", false},
    };
    const same pairs[] = {{strided, dense}};
    chk_case("softmax: transposed scores and mask, a mask broadcast along the keys");
    run_case(g, ex, 3, outs, 3, 1e-6, pairs, 1);
    gml_graph_free(g);
    gml_free(ctx);
}

/* ---- the attention options (gml_attn_opts) take the fast kernels ------------ */

static void test_attn_opts(void) {
    chk_rng r = chk_seed(8);
    gml_context *ctx = chk_ctx(16 << 20);
    gml_tensor *q = chk_new_input(ctx, GML_F32, 4, (int64_t[]){1, 4, 9, 13}, CHK_TRANSPOSED, "q", &r, -1, 1);
    gml_tensor *k = chk_new_input(ctx, GML_F32, 4, (int64_t[]){1, 2, 77, 13}, CHK_CONTIGUOUS, "k", &r, -1, 1);
    gml_tensor *v = chk_new_input(ctx, GML_F32, 4, (int64_t[]){1, 2, 77, 11}, CHK_CONTIGUOUS, "v", &r, -1, 1);
    gml_tensor *sk = chk_new_input(ctx, GML_F32, 1, (int64_t[]){4}, CHK_CONTIGUOUS, "sinks", &r, -1, 1);
    gml_tensor *x = chk_new_input(ctx, GML_F32, 4, (int64_t[]){1, 4, 9, 77}, CHK_CONTIGUOUS, "x", &r, -3, 3);
    const gml_attn_opts o = {.sinks = sk, .causal = GML_CAUSAL_TOP_LEFT, .window = 20,
                             .softcap = 2.0f, .alibi_max_bias = 8.0f};
    gml_tensor *fa = gml_set_name(gml_flash_attn_ext(ctx, q, k, v, 0.4f, &o), "fa");
    gml_tensor *sm = gml_set_name(gml_softmax_ext(ctx, x, 0.4f, &o), "sm");
    gml_tensor *outs[] = {fa, sm};
    gml_graph *g = gml_build_graph(ctx, outs, 2);
    const expect ex[] = {
        {fa, "gml_f32_flash_ukernel__", NULL, false},
        {sm, "gml_f32_softmax_ukernel__", "(options: scores formed in scratch)", false},
    };
    chk_case("flash_attn_ext and softmax_ext with every option");
    run_case(g, ex, 2, outs, 2, 1e-5, NULL, 0);
    gml_graph_free(g);
    gml_free(ctx);
}

/* ---- add, mul, scale: runs of the binary micro-kernels ------------------------ */

static void test_binary(void) {
    chk_rng r = chk_seed(4);
    gml_context *ctx = chk_ctx(16 << 20);
    gml_tensor *a = chk_new_input(ctx, GML_F32, 3, (int64_t[]){5, 7, 33}, CHK_OUTER_SWAPPED, "a", &r, -1, 1);
    gml_tensor *b = chk_new_input(ctx, GML_F32, 1, (int64_t[]){33}, CHK_SLICED, "b", &r, -1, 1);
    gml_tensor *c = chk_new_input(ctx, GML_F32, 3, (int64_t[]){5, 1, 1}, CHK_CONTIGUOUS, "c", &r, -1, 1);
    gml_tensor *d = chk_new_input(ctx, GML_F32, 3, (int64_t[]){5, 7, 33}, CHK_SLICED, "d", &r, -1, 1);
    gml_tensor *add = gml_set_name(gml_add(ctx, a, b), "add");    /* both dense along runs */
    gml_tensor *mul = gml_set_name(gml_mul(ctx, d, c), "mul");    /* c constant along runs */
    gml_tensor *addc = gml_set_name(gml_add(ctx, c, a), "addc");  /* the constant first */
    gml_tensor *scale = gml_set_name(gml_scale(ctx, a, 0.3f), "scale");
    /* a last dim strided (transposed, odd, longer than the gather stretch):
     * rows gathered, then the same micro-kernels */
    gml_tensor *t = chk_new_input(ctx, GML_F32, 3, (int64_t[]){3, 7, 301}, CHK_TRANSPOSED, "t", &r, -1, 1);
    gml_tensor *u = chk_new_input(ctx, GML_F32, 3, (int64_t[]){3, 7, 301}, CHK_REVERSED, "u", &r, -1, 1);
    gml_tensor *tu = gml_set_name(gml_mul(ctx, t, u), "tu");               /* both gathered */
    gml_tensor *tc = gml_set_name(gml_add(ctx, t, gml_cont(ctx, u)), "tc"); /* one gathered */
    gml_tensor *c3 = chk_new_input(ctx, GML_F32, 3, (int64_t[]){3, 7, 1}, CHK_CONTIGUOUS, "c3", &r, -1, 1);
    gml_tensor *ct = gml_set_name(gml_add(ctx, c3, t), "ct");              /* constant + gathered */
    gml_tensor *ts = gml_set_name(gml_scale(ctx, t, -1.5f), "ts");
    gml_tensor *tu_dense = gml_set_name(gml_mul(ctx, gml_cont(ctx, t), gml_cont(ctx, u)), "tu_dense");
    gml_tensor *sub = gml_set_name(gml_sub(ctx, a, b), "sub");     /* both dense along runs */
    gml_tensor *subc = gml_set_name(gml_sub(ctx, d, c), "subc");   /* c constant along runs */
    gml_tensor *rsubc = gml_set_name(gml_sub(ctx, c, a), "rsubc"); /* the constant first */
    gml_tensor *div = gml_set_name(gml_div(ctx, a, b), "div");
    gml_tensor *divc = gml_set_name(gml_div(ctx, d, c), "divc");
    gml_tensor *rdivc = gml_set_name(gml_div(ctx, c, a), "rdivc");
    gml_tensor *tsu = gml_set_name(gml_sub(ctx, t, u), "tsu");      /* both gathered */
    gml_tensor *cdt = gml_set_name(gml_div(ctx, c3, t), "cdt");     /* constant / gathered */
    gml_tensor *outs[] = {add, mul, addc, scale, tu, tc, ct, ts, tu_dense,
                          sub, subc, rsubc, div, divc, rdivc, tsu, cdt};
    gml_graph *g = gml_build_graph(ctx, outs, 17);
    const expect ex[] = {
        {add, "gml_f32_vadd_ukernel__", NULL, false},
        {mul, "gml_f32_vmulc_ukernel__", NULL, false},
        {addc, "gml_f32_vaddc_ukernel__", NULL, false},
        {scale, "gml_f32_vmulc_ukernel__", NULL, false},
        {tu, "gml_f32_vmul_ukernel__", "(strided rows gathered)", false},
        {tc, "gml_f32_vadd_ukernel__", "(strided rows gathered)", false},
        {ct, "gml_f32_vaddc_ukernel__", "(strided rows gathered)", false},
        {ts, "gml_f32_vmulc_ukernel__", "(strided rows gathered)", false},
        {tu_dense, "gml_f32_vmul_ukernel__", NULL, false},
        {sub, "gml_f32_vsub_ukernel__", NULL, false},
        {subc, "gml_f32_vsubc_ukernel__", NULL, false},
        {rsubc, "gml_f32_vrsubc_ukernel__", NULL, false},
        {div, "gml_f32_vdiv_ukernel__", NULL, false},
        {divc, "gml_f32_vdivc_ukernel__", NULL, false},
        {rdivc, "gml_f32_vrdivc_ukernel__", NULL, false},
        {tsu, "gml_f32_vsub_ukernel__", "(strided rows gathered)", false},
        {cdt, "gml_f32_vrdivc_ukernel__", "(strided rows gathered)", false},
    };
    const same pairs[] = {{tu, tu_dense}};
    chk_case("add, mul, sub, div, scale on permuted, sliced, transposed and broadcast operands");
    run_case(g, ex, 17, outs, 17, 0, pairs, 1);
    gml_graph_free(g);
    gml_free(ctx);
}

/* ---- neg, exp, tanh, sigmoid, silu, gelu, gelu_tanh: the unary micro-kernels ---- */

static void test_unary(void) {
    chk_rng r = chk_seed(6);
    gml_context *ctx = chk_ctx(16 << 20);
    gml_tensor *a = chk_new_input(ctx, GML_F32, 3, (int64_t[]){5, 7, 33}, CHK_OUTER_SWAPPED, "a", &r, -4, 4);
    gml_tensor *t = chk_new_input(ctx, GML_F32, 3, (int64_t[]){3, 7, 301}, CHK_TRANSPOSED, "t", &r, -4, 4);
    gml_tensor *(*const fns[])(gml_context *, gml_tensor *) = {gml_neg, gml_exp, gml_tanh, gml_sigmoid,
                                                             gml_silu, gml_gelu, gml_gelu_tanh};
    static const char *const prefix[] = {
        "gml_f32_vneg_ukernel__scalar_u1", "gml_f32_vexp_ukernel__", "gml_f32_vtanh_ukernel__",
        "gml_f32_vsigmoid_ukernel__", "gml_f32_vsilu_ukernel__", "gml_f32_vgelu_ukernel__",
        "gml_f32_vgelu_tanh_ukernel__"};
    static const char *const gathered = "gml_f32_vneg_ukernel__scalar_u1 (strided rows gathered)";
    enum { N = 7 };
    gml_tensor *outs[3 * N];
    expect ex[2 * N];
    same pairs[N];
    gml_tensor *tc = gml_cont(ctx, t);
    for (int i = 0; i < N; i++) {
        const bool one = i == 0; /* neg: a scalar variant only */
        outs[i] = fns[i](ctx, a);            /* runs */
        outs[N + i] = fns[i](ctx, t);        /* a strided last dim: rows gathered */
        outs[2 * N + i] = fns[i](ctx, tc);   /* the same numbers, contiguous */
        ex[i] = (expect){outs[i], prefix[i], NULL, one};
        ex[N + i] = one ? (expect){outs[N + i], gathered, NULL, true}
                        : (expect){outs[N + i], prefix[i], "(strided rows gathered)", false};
        pairs[i] = (same){outs[N + i], outs[2 * N + i]};
    }
    gml_graph *g = gml_build_graph(ctx, outs, 3 * N);
    chk_case("unary ops on permuted and transposed inputs");
    run_case(g, ex, 2 * N, outs, 3 * N, 1e-5, pairs, N);
    gml_graph_free(g);
    gml_free(ctx);
}

/* ---- cont and repeat_interleave -------------------------------------------------- */

static void test_moves(void) {
    chk_rng r = chk_seed(5);
    gml_context *ctx = chk_ctx(16 << 20);
    gml_tensor *x = chk_new_input(ctx, GML_F32, 3, (int64_t[]){4, 19, 35}, CHK_TRANSPOSED, "x", &r, -1, 1);
    gml_tensor *y = chk_new_input(ctx, GML_F32, 3, (int64_t[]){4, 19, 35}, CHK_OUTER_SWAPPED, "y", &r, -1, 1);
    gml_tensor *transposed = gml_set_name(gml_cont(ctx, x), "transposed");
    gml_tensor *runs = gml_set_name(gml_cont(ctx, y), "runs");
    gml_tensor *z = chk_new_input(ctx, GML_F32, 4, (int64_t[]){2, 3, 7, 5}, CHK_OUTER_SWAPPED, "z", &r, -1, 1);
    gml_tensor *rep_heads = gml_set_name(gml_repeat_interleave(ctx, z, 3, 1), "rep_heads");
    gml_tensor *w = chk_new_input(ctx, GML_F32, 3, (int64_t[]){3, 5, 13}, CHK_SLICED, "w", &r, -1, 1);
    gml_tensor *rep_last = gml_set_name(gml_repeat_interleave(ctx, w, 3, -1), "rep_last");
    /* what has no fast kernel says so: both last dims strided, a repeat of
     * a transposed x */
    gml_tensor *into = gml_transpose(ctx, gml_new_tensor_3d(ctx, GML_F32, 4, 35, 19), -2, -1);
    gml_tensor *both = gml_set_name(gml_cpy(ctx, x, into), "both");
    gml_tensor *zt = chk_new_input(ctx, GML_F32, 4, (int64_t[]){2, 3, 7, 5}, CHK_TRANSPOSED, "zt", &r, -1, 1);
    gml_tensor *rep_t = gml_set_name(gml_repeat_interleave(ctx, zt, 2, 1), "rep_t");
    gml_tensor *rep_t_last = gml_set_name(gml_repeat_interleave(ctx, zt, 2, -1), "rep_t_last");
    gml_tensor *outs[] = {transposed, runs, rep_heads, rep_last, both, rep_t, rep_t_last};
    gml_graph *g = gml_build_graph(ctx, outs, 7);
    /* contiguous runs are glibc's memcpy, whatever the ISA (ops/copy.inc) */
    const expect ex[] = {
        {transposed, "gml_x32_transpose_ukernel__", NULL, false},
        {runs, "gml_x32_copy_ukernel__scalar_memcpy", NULL, true},
        {rep_heads, "gml_x32_copy_ukernel__scalar_memcpy", NULL, true},
        {rep_last, "gml_x32_repeat_ukernel__", NULL, false},
        {both, "reference (the last dims of both sides are strided)", NULL, true},
        {rep_t, "reference (x's last dim is strided)", NULL, true},
        {rep_t_last, "strided loop (x's last dim is strided)", NULL, true},
    };
    chk_case("cont, cpy and repeat_interleave on transposed, permuted and sliced inputs");
    run_case(g, ex, 7, outs, 7, 0, NULL, 0);
    gml_graph_free(g);
    gml_free(ctx);
}

/* ---- concat: each input's part by cpy's paths ------------------------------------- */

static void test_concat(void) {
    chk_rng r = chk_seed(6);
    gml_context *ctx = chk_ctx(16 << 20);
    /* dense runs: a sliced and a contiguous input along dim 1 (i32 too) */
    gml_tensor *a = chk_new_input(ctx, GML_F32, 3, (int64_t[]){3, 7, 37}, CHK_SLICED, "a", &r, -1, 1);
    gml_tensor *b = chk_new_input(ctx, GML_F32, 3, (int64_t[]){3, 2, 37}, CHK_CONTIGUOUS, "b", &r, -1, 1);
    gml_tensor *runs = gml_set_name(gml_concat(ctx, a, b, 1), "runs");
    gml_tensor *ia = chk_new_input(ctx, GML_I32, 2, (int64_t[]){5, 19}, CHK_SLICED, "ia", &r, -9, 9);
    gml_tensor *ib = chk_new_input(ctx, GML_I32, 2, (int64_t[]){5, 4}, CHK_CONTIGUOUS, "ib", &r, -9, 9);
    gml_tensor *ilast = gml_set_name(gml_concat(ctx, ia, ib, -1), "ilast");
    /* transposes: both inputs transposed in storage, along the last dim */
    gml_tensor *t = chk_new_input(ctx, GML_F32, 3, (int64_t[]){2, 21, 35}, CHK_TRANSPOSED, "t", &r, -1, 1);
    gml_tensor *u = chk_new_input(ctx, GML_F32, 3, (int64_t[]){2, 21, 9}, CHK_SLICED_TRANSPOSED, "u", &r, -1, 1);
    gml_tensor *tr = gml_set_name(gml_concat(ctx, t, u, -1), "tr");
    /* no dense dim in b (every other element): plain loops for it */
    gml_tensor *big = chk_new_input(ctx, GML_F32, 2, (int64_t[]){10, 26}, CHK_CONTIGUOUS, "big", &r, -1, 1);
    gml_tensor *every2 = gml_view(ctx, big, 2, (int64_t[]){5, 13}, (size_t[]){2 * 26 * 4, 8}, 0);
    gml_tensor *c = chk_new_input(ctx, GML_F32, 2, (int64_t[]){4, 13}, CHK_CONTIGUOUS, "c", &r, -1, 1);
    gml_tensor *loop = gml_set_name(gml_concat(ctx, c, every2, 0), "loop");
    gml_tensor *outs[] = {runs, ilast, tr, loop};
    gml_graph *g = gml_build_graph(ctx, outs, 4);
    const expect ex[] = {
        {runs, "gml_x32_copy_ukernel__scalar_memcpy", NULL, true},
        {ilast, "gml_x32_copy_ukernel__scalar_memcpy", NULL, true},
        {tr, "gml_x32_transpose_ukernel__", NULL, false},
        {loop, "strided loop (an input strided on every dim)", NULL, true},
    };
    chk_case("concat of sliced, transposed and strided inputs");
    run_case(g, ex, 4, outs, 4, 0, NULL, 0);
    gml_graph_free(g);
    gml_free(ctx);
}

/* ---- rope: the rotation micro-kernels, a sin/cos table per position ---------------- */

static void test_rope(void) {
    chk_rng r = chk_seed(6);
    gml_context *ctx = chk_ctx(16 << 20);
    /* the head-split permute of a projection [B, T, H, d]: rows stay dense */
    gml_tensor *proj = chk_new_input(ctx, GML_F32, 4, (int64_t[]){2, 9, 3, 70}, CHK_CONTIGUOUS, "proj", &r, -1, 1);
    gml_tensor *q = gml_permute(ctx, proj, (int[]){0, 2, 1, 3});
    gml_tensor *pos = chk_new_input(ctx, GML_I32, 2, (int64_t[]){2, 9}, CHK_SLICED, "pos", &r, -5, 3000);
    gml_tensor *heads = gml_set_name(gml_rope(ctx, q, pos, -2, 0, 10000.0f, 1.0f, false), "heads");
    gml_tensor *ilv = gml_set_name(gml_rope(ctx, proj, pos, -3, 50, 500000.0f, 2.0f, true), "ilv");
    /* a transposed x (last dim strided): the same arithmetic through strides */
    gml_tensor *xt = chk_new_input(ctx, GML_F32, 4, (int64_t[]){2, 3, 9, 70}, CHK_TRANSPOSED, "xt", &r, -1, 1);
    gml_tensor *strided = gml_set_name(gml_rope(ctx, xt, pos, -2, 0, 10000.0f, 1.0f, false), "strided");
    gml_tensor *dense = gml_set_name(gml_rope(ctx, gml_cont(ctx, xt), pos, -2, 0, 10000.0f, 1.0f, false), "dense");
    gml_tensor *outs[] = {heads, ilv, strided, dense};
    gml_graph *g = gml_build_graph(ctx, outs, 4);
    const expect ex[] = {
        {heads, "gml_f32_rope_ukernel__", NULL, false},
        {ilv, "gml_f32_ropei_ukernel__", NULL, false},
        {strided, "strided loop (x's last dim is strided)", NULL, true},
        {dense, "gml_f32_rope_ukernel__", NULL, false},
    };
    const same pairs[] = {{strided, dense}};
    chk_case("rope: head-split permuted, [B, T, H, d] interleaved partial, transposed x");
    run_case(g, ex, 4, outs, 4, 1e-6, pairs, 1);
    gml_graph_free(g);
    gml_free(ctx);
}

/* ---- the query itself ------------------------------------------------------------ */

static void test_query(void) {
    chk_case("gml_graph_node_kernel: views, indices, before the first compute");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *a = gml_new_tensor_2d(ctx, GML_F32, 3, 5);
    chk_fill_value(a, 1.0f);
    gml_tensor *t = gml_transpose(ctx, a, 0, 1);
    gml_tensor *c = gml_cont(ctx, t);
    gml_tensor *s = gml_scale(ctx, c, 2.0f);
    gml_graph *g = gml_build_graph(ctx, &s, 1);
    const int it = gml_graph_find(g, t), is = gml_graph_find(g, s);
    CHECK(gml_graph_node_kernel(g, is) == NULL, "before any compute: NULL");
    CHECK(gml_graph_compute(g, 2) == GML_OK, "compute: %s", gml_graph_error(g));
    CHECK(it >= 0 && gml_graph_node_kernel(g, it) == NULL, "a view computes nothing: NULL");
    CHECK(gml_graph_node_kernel(g, gml_graph_n_nodes(g)) == NULL, "past the end: NULL");
    CHECK(gml_graph_node_kernel(g, -1 - gml_graph_n_nodes(g)) == NULL, "before the start: NULL");
    const char *last = gml_graph_node_kernel(g, -1);
    CHECK(last && last == gml_graph_node_kernel(g, is), "-1 is the last node: '%s'",
          last ? last : "(null)");
    gml_graph_free(g);
    gml_free(ctx);
}

/* ---- sum, mean, max; rms_norm, layer_norm: rows, strided ones gathered ------- */

static void test_reduce_norm(void) {
    chk_rng r = chk_seed(5);
    gml_context *ctx = chk_ctx(16 << 20);
    gml_tensor *x = chk_new_input(ctx, GML_F32, 3, (int64_t[]){3, 7, 301}, CHK_TRANSPOSED, "x", &r, -2, 2);
    gml_tensor *xc = gml_cont(ctx, x);
    gml_tensor *w = chk_new_input(ctx, GML_F32, 1, (int64_t[]){301}, CHK_CONTIGUOUS, "w", &r, -1, 1);
    gml_tensor *b = chk_new_input(ctx, GML_F32, 1, (int64_t[]){301}, CHK_CONTIGUOUS, "b", &r, -1, 1);
    gml_tensor *sum = gml_set_name(gml_sum(ctx, x), "sum");
    gml_tensor *sumc = gml_set_name(gml_sum(ctx, xc), "sumc");
    gml_tensor *mean = gml_set_name(gml_mean(ctx, xc), "mean");
    gml_tensor *max = gml_set_name(gml_max(ctx, x), "max");
    gml_tensor *maxc = gml_set_name(gml_max(ctx, xc), "maxc");
    gml_tensor *rms = gml_set_name(gml_rms_norm(ctx, x, w, 1e-6f), "rms");
    gml_tensor *rmsc = gml_set_name(gml_rms_norm(ctx, xc, w, 1e-6f), "rmsc");
    gml_tensor *ln = gml_set_name(gml_layer_norm(ctx, x, w, b, 1e-5f), "ln");
    gml_tensor *lnc = gml_set_name(gml_layer_norm(ctx, xc, w, b, 1e-5f), "lnc");
    gml_tensor *outs[] = {sum, sumc, mean, max, maxc, rms, rmsc, ln, lnc};
    gml_graph *g = gml_build_graph(ctx, outs, 9);
    const expect ex[] = {
        {sum, "gml_f32_rsum_ukernel__", "(strided rows gathered)", false},
        {sumc, "gml_f32_rsum_ukernel__", NULL, false},
        {mean, "gml_f32_rsum_ukernel__", NULL, false},
        {max, "gml_f32_rmax_ukernel__", "(strided rows gathered)", false},
        {maxc, "gml_f32_rmax_ukernel__", NULL, false},
        {rms, "gml_f32_vnorm_ukernel__", "(strided rows gathered)", false},
        {rmsc, "gml_f32_vnorm_ukernel__", NULL, false},
        {ln, "gml_f32_vnorm_ukernel__", "(strided rows gathered)", false},
        {lnc, "gml_f32_vnorm_ukernel__", NULL, false},
    };
    const same pairs[] = {{sum, sumc}, {max, maxc}, {rms, rmsc}, {ln, lnc}};
    chk_case("sum, mean, max, rms_norm, layer_norm: transposed rows gathered");
    run_case(g, ex, 9, outs, 9, 1e-5, pairs, 4);
    gml_graph_free(g);
    gml_free(ctx);
}

/* ---- f16, bf16, q8_0: matmul's paths with a converted weight, cpy and
 * get_rows through the conversion micro-kernels ------------------------------ */

static gml_tensor *typed_weight(gml_context *ctx, gml_type t, int64_t n, int64_t k, chk_rng *r,
                                const char *name) {
    gml_tensor *f = chk_new_input(ctx, GML_F32, 2, (int64_t[]){n, k}, CHK_CONTIGUOUS, "wf", r, -1, 1);
    gml_tensor *w = gml_set_name(gml_new_tensor_2d(ctx, t, n, k), name);
    for (int64_t i = 0; i < n; i++) { /* through the scalar conversions */
        const float *src = (const float *)f->data + i * k;
        char *dst = (char *)w->data + i * (int64_t)w->nb[2];
        if (t == GML_Q8_0) gml_quantize_row_q8_0(src, (gml_block_q8_0 *)(void *)dst, k);
        for (int64_t j = 0; j < k && t != GML_Q8_0; j++)
            ((uint16_t *)(void *)dst)[j] = t == GML_F16 ? gml_fp32_to_fp16(src[j]) : gml_fp32_to_bf16(src[j]);
    }
    return w;
}

static void test_types(void) {
    chk_rng r = chk_seed(11);
    gml_context *ctx = chk_ctx(16 << 20);
    gml_tensor *wq = typed_weight(ctx, GML_Q8_0, 37, 96, &r, "wq");
    gml_tensor *wb = typed_weight(ctx, GML_BF16, 29, 77, &r, "wb");
    gml_tensor *wh = typed_weight(ctx, GML_F16, 23, 45, &r, "wh");
    gml_tensor *x1 = chk_new_input(ctx, GML_F32, 2, (int64_t[]){3, 96}, CHK_SLICED, "x1", &r, -1, 1);
    gml_tensor *x2 = chk_new_input(ctx, GML_F32, 3, (int64_t[]){2, 9, 77}, CHK_TRANSPOSED, "x2", &r, -1, 1);
    gml_tensor *x3 = chk_new_input(ctx, GML_F32, 2, (int64_t[]){70, 45}, CHK_CONTIGUOUS, "x3", &r, -1, 1);
    gml_tensor *gemv = gml_set_name(gml_linear(ctx, x1, wq, NULL), "gemv_q8_0");
    gml_tensor *rows = gml_set_name(gml_linear(ctx, x2, wb, NULL), "rows_bf16");
    gml_tensor *large = gml_set_name(gml_linear(ctx, x3, wh, NULL), "large_f16");
    gml_tensor *to_bf16 = gml_cpy(ctx, x3, gml_new_tensor_2d(ctx, GML_BF16, 70, 45));
    gml_tensor *back = gml_set_name(gml_cpy(ctx, to_bf16, gml_new_tensor_2d(ctx, GML_F32, 70, 45)), "back");
    gml_tensor *idx = gml_new_tensor_1d(ctx, GML_I32, 5);
    for (int i = 0; i < 5; i++) ((int32_t *)idx->data)[i] = (i * 7) % 23;
    gml_tensor *emb = gml_set_name(gml_get_rows(ctx, wh, idx), "emb_f16");
    gml_tensor *outs[] = {gemv, rows, large, back, emb};
    gml_graph *g = gml_build_graph(ctx, outs, 5);
    const expect ex[] = {
        {gemv, "gml_q8_0_gemv_ukernel__", NULL, false},
        {rows, "gml_f32_gemm_ukernel__", "(rows)", false},
        {large, "gml_f32_gemm_ukernel__", "(large)", false},
        {to_bf16, "gml_f32_bf16_cvt_ukernel__", NULL, false},
        {back, "gml_bf16_f32_cvt_ukernel__", NULL, false},
        {emb, "gml_f16_f32_cvt_ukernel__", NULL, false},
    };
    chk_case("f16, bf16, q8_0: matmul's gemv, rows and large paths, cpy, get_rows");
    run_case(g, ex, 6, outs, 5, 1e-5, NULL, 0);
    gml_graph_free(g);
    gml_free(ctx);
}

int main(void) {
    static const gml_isa isas[] = {GML_TEST_FAST_ISAS};
    gml_isa best = GML_ISA_SCALAR;
    for (size_t i = 0; i < sizeof isas / sizeof *isas; i++)
        if (gml_cpu_has(isas[i])) best = isas[i];
    printf("this CPU's best kernels: %s\n", gml_isa_name(best));
    test_query();
    test_matmul();
    test_flash_attn(2, 6, 3, 7, 41, 9, true);   /* 14 rows per kv head: the few-rows variant */
    test_flash_attn(1, 4, 2, 37, 70, 5, false); /* 74 rows: the wide one, tails everywhere */
    test_flash_attn(4, 8, 4, 37, 45, 8, true);  /* 16 (b, g) of 3 blocks: a (b, g) a task at 2 threads */
    test_flash_attn(3, 2, 1, 1, 33, 12, false); /* decoding: one query */
    test_flash_attn(1, 8, 2, 1, 1100, 12, false); /* decoding, keys split in 4 chunks */
    test_flash_attn(1, 4, 2, 3, 700, 7, true);    /* 6 rows, causal, 2 chunks */
    test_softmax();
    test_attn_opts();
    test_binary();
    test_unary();
    test_moves();
    test_concat();
    test_reduce_norm();
    test_rope();
    test_types();
    return chk_summary();
}
