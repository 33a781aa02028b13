/* The attention blocks and the layers with f16, bf16 and q8_0 projection
 * and MLP weights (biases, norm weights, sinks stay f32): each output equals
 * the same block on f32 weights holding the converted (rounded or
 * dequantized) values within 1e-5 relative (of the output's largest
 * magnitude), at every ISA and 1 and 3 threads; the largest distance seen is
 * printed (0 with more than 4 rows: the GEMM path is bitwise the f32 one;
 * with up to 4 rows the matrix-vector kernels sum in another order). A
 * packed q8_0 in_proj_weight (row blocks as views) is bitwise the block on
 * separate q8_0 w_q, w_k, w_v. Also: the refusals (a typed bias, GPT-2's
 * q8_0 Conv1D) with their messages. */
#include "check.h"

#include <inttypes.h>

#include <ggmlite/attention.h>
#include <ggmlite/kv_cache.h>
#include <ggmlite/layers.h>

static const gml_isa ISAS[] = {GML_TEST_ISAS};
static double worst[3]; /* per type: max |typed - f32| / max |f32| seen */

static int type_index(gml_type t) { return t == GML_F16 ? 0 : t == GML_BF16 ? 1 : 2; }

/* A pair of weights [rows, cols] (or [rows] when cols == 0): *typed of type t
 * (f32 for vectors) and *ref, f32, holding the values *typed holds. */
static void make_pair(gml_context *ctx, gml_type t, int64_t rows, int64_t cols, chk_rng *r,
                      gml_tensor **typed, gml_tensor **ref) {
    const float scale = cols ? 1.0f / sqrtf((float)cols) : 0.1f;
    if (!cols) {
        *typed = gml_new_tensor_1d(ctx, GML_F32, rows);
        *ref = gml_new_tensor_1d(ctx, GML_F32, rows);
        for (int64_t i = 0; i < rows; i++)
            ((float *)(*ref)->data)[i] = ((float *)(*typed)->data)[i] = chk_uniform(r, -1, 1) * scale;
        return;
    }
    *typed = gml_new_tensor_2d(ctx, t, rows, cols);
    *ref = gml_new_tensor_2d(ctx, GML_F32, rows, cols);
    float *v = malloc((size_t)cols * sizeof *v);
    for (int64_t n = 0; n < rows; n++) {
        char *row = (char *)(*typed)->data + n * (int64_t)(*typed)->nb[2];
        float *rf = (float *)(*ref)->data + n * cols;
        for (int64_t k = 0; k < cols; k++) v[k] = chk_uniform(r, -1, 1) * scale;
        if (t == GML_Q8_0) {
            gml_quantize_row_q8_0(v, (void *)row, cols);
            gml_dequantize_row_q8_0((const void *)row, rf, cols);
        } else if (t == GML_F32) {
            memcpy(row, v, (size_t)cols * 4);
            memcpy(rf, v, (size_t)cols * 4);
        } else {
            for (int64_t k = 0; k < cols; k++) {
                const uint16_t h = t == GML_F16 ? gml_fp32_to_fp16(v[k]) : gml_fp32_to_bf16(v[k]);
                memcpy(row + 2 * k, &h, 2);
                rf[k] = t == GML_F16 ? gml_fp16_to_fp32(h) : gml_bf16_to_fp32(h);
            }
        }
    }
    free(v);
}

/* Computes both outputs at every ISA and 1, 3 threads; compares them. */
static void compare(gml_context *ctx, gml_type t, gml_tensor *typed, gml_tensor *ref) {
    if (!CHECK(typed && ref, "build: %s", gml_last_error(ctx))) return;
    gml_graph *g = gml_build_graph(ctx, (gml_tensor *[]){typed, ref}, 2);
    if (!CHECK(g, "graph: %s", gml_last_error(ctx))) return;
    const int64_t n = gml_nelements(ref);
    for (size_t i = 0; i < sizeof ISAS / sizeof *ISAS; i++) {
        if (!gml_cpu_has(ISAS[i])) continue;
        gml_set_isa(ISAS[i]);
        for (int th = 1; th <= 3; th += 2) {
            if (!CHECK(gml_graph_compute(g, th) == GML_OK, "%s", gml_graph_error(g))) continue;
            const float *a = gml_graph_data(g, typed), *b = gml_graph_data(g, ref);
            double mx = 0, d = 0;
            for (int64_t e = 0; e < n; e++) mx = fmax(mx, fabs(b[e]));
            for (int64_t e = 0; e < n; e++) d = fmax(d, fabs((double)a[e] - b[e]));
            CHECK(mx > 0.01 && d <= 1e-5 * mx, "%s, %s, %d threads: max |typed - f32| %.3g of max %.3g",
                  gml_type_name(t), gml_isa_name(ISAS[i]), th, d, mx);
            worst[type_index(t)] = fmax(worst[type_index(t)], d / mx);
        }
    }
    gml_set_isa(GML_ISA_AUTO);
    gml_graph_free(g);
}

static gml_tensor *input(gml_context *ctx, int64_t B, int64_t T, int64_t D, chk_rng *r) {
    gml_tensor *x = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, B, T, D), "x");
    for (int64_t i = 0; i < B * T * D; i++) ((float *)x->data)[i] = chk_uniform(r, -1, 1);
    return x;
}

/* mha/gqa: separate weights (G < H, rope, causal, biases, sinks) and
 * nn.MultiheadAttention's packed in_proj_weight (f16/bf16). */
static void attention_blocks(gml_type t) {
    chk_case("attention blocks, %s weights", gml_type_name(t));
    chk_rng r = {42 + (uint64_t)t};
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 64 << 20});
    const int64_t B = 2, T = 7, D = 96, H = 6, G = 2, kv = G * D / H;
    gml_attn_weights wt = {0}, wf = {0};
    make_pair(ctx, t, D, D, &r, &wt.w_q, &wf.w_q);
    make_pair(ctx, t, kv, D, &r, &wt.w_k, &wf.w_k);
    make_pair(ctx, t, kv, D, &r, &wt.w_v, &wf.w_v);
    make_pair(ctx, t, D, D, &r, &wt.w_o, &wf.w_o);
    make_pair(ctx, t, D, 0, &r, &wt.b_q, &wf.b_q);
    make_pair(ctx, t, kv, 0, &r, &wt.b_v, &wf.b_v);
    make_pair(ctx, t, H, 0, &r, &wt.sinks, &wf.sinks);
    gml_tensor *x = input(ctx, B, T, D, &r);
    gml_attn_config c = {.dims = {.n_heads = (int)H, .n_kv_heads = (int)G},
                         .score.causal = GML_CAUSAL_BOTTOM_RIGHT,
                         .pos = {.kind = GML_POS_ROPE}};
    for (int impl = GML_ATTN_FUSED; impl <= GML_ATTN_UNFUSED; impl++) {
        c.graph.impl = (gml_attn_impl)impl;
        compare(ctx, t, gml_gqa(ctx, c, &wt, (gml_attn_inputs){.query = x}).out,
                gml_gqa(ctx, c, &wf, (gml_attn_inputs){.query = x}).out);
    }
    /* up to 4 rows: the matrix-vector kernels (a decoding step's shape) */
    gml_tensor *x1 = input(ctx, 1, 3, D, &r);
    compare(ctx, t, gml_gqa(ctx, c, &wt, (gml_attn_inputs){.query = x1}).out,
            gml_gqa(ctx, c, &wf, (gml_attn_inputs){.query = x1}).out);
    /* the stages one by one: project, attend, merge */
    c.graph.impl = GML_ATTN_FUSED;
    gml_attn_qkv qt = gml_attn_project(ctx, &c, &wt, (gml_attn_inputs){.query = x});
    gml_attn_qkv qf = gml_attn_project(ctx, &c, &wf, (gml_attn_inputs){.query = x});
    compare(ctx, t, qt.k, qf.k);
    compare(ctx, t, gml_attn_merge(ctx, &wt, qt.q), gml_attn_merge(ctx, &wf, qf.q));
    { /* packed q | k | v rows, MHA (q8_0: the row blocks are views at row offsets) */
        gml_attn_weights pt = {0}, pf = {0};
        make_pair(ctx, t, 3 * D, D, &r, &pt.in_proj_weight, &pf.in_proj_weight);
        make_pair(ctx, t, 3 * D, 0, &r, &pt.in_proj_bias, &pf.in_proj_bias);
        make_pair(ctx, t, D, D, &r, &pt.w_o, &pf.w_o);
        gml_attn_config m = {.dims = {.n_heads = (int)H}};
        compare(ctx, t, gml_mha(ctx, m, &pt, (gml_attn_inputs){.query = x}).out,
                gml_mha(ctx, m, &pf, (gml_attn_inputs){.query = x}).out);
    }
    gml_free(ctx);
}

static void llama(gml_type t) {
    chk_case("llama layer, %s weights", gml_type_name(t));
    chk_rng r = {7 + (uint64_t)t};
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 64 << 20});
    const int64_t B = 2, T = 9, D = 64, H = 4, G = 2, kv = G * D / H, F = 96;
    gml_llama_weights a = {0}, b = {0};
    make_pair(ctx, t, D, 0, &r, &a.attn_norm, &b.attn_norm);
    make_pair(ctx, t, D, D, &r, &a.wq, &b.wq);
    make_pair(ctx, t, kv, D, &r, &a.wk, &b.wk);
    make_pair(ctx, t, kv, D, &r, &a.wv, &b.wv);
    make_pair(ctx, t, D, D, &r, &a.wo, &b.wo);
    make_pair(ctx, t, D, 0, &r, &a.mlp_norm, &b.mlp_norm);
    make_pair(ctx, t, F, D, &r, &a.w_gate, &b.w_gate);
    make_pair(ctx, t, F, D, &r, &a.w_up, &b.w_up);
    make_pair(ctx, t, D, F, &r, &a.w_down, &b.w_down);
    for (int64_t i = 0; i < D; i++) ((float *)a.attn_norm->data)[i] += 1, ((float *)b.attn_norm->data)[i] += 1;
    gml_tensor *x = input(ctx, B, T, D, &r);
    gml_llama_config c = {.n_heads = (int)H, .n_kv_heads = (int)G};
    compare(ctx, t, gml_llama_layer(ctx, &c, &a, x, NULL), gml_llama_layer(ctx, &c, &b, x, NULL));
    gml_free(ctx);
}

static void bert_gpt2(gml_type t) {
    chk_case("bert and gpt2 layers, %s weights", gml_type_name(t));
    chk_rng r = {99 + (uint64_t)t};
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 64 << 20});
    const int64_t B = 2, T = 5, D = 64, F = 128;
    gml_bert_weights a = {0}, b = {0};
    make_pair(ctx, t, D, D, &r, &a.wq, &b.wq), make_pair(ctx, t, D, 0, &r, &a.bq, &b.bq);
    make_pair(ctx, t, D, D, &r, &a.wk, &b.wk), make_pair(ctx, t, D, 0, &r, &a.bk, &b.bk);
    make_pair(ctx, t, D, D, &r, &a.wv, &b.wv), make_pair(ctx, t, D, 0, &r, &a.bv, &b.bv);
    make_pair(ctx, t, D, D, &r, &a.wo, &b.wo), make_pair(ctx, t, D, 0, &r, &a.bo, &b.bo);
    make_pair(ctx, t, D, 0, &r, &a.ln1_w, &b.ln1_w), make_pair(ctx, t, D, 0, &r, &a.ln1_b, &b.ln1_b);
    make_pair(ctx, t, F, D, &r, &a.wi, &b.wi), make_pair(ctx, t, F, 0, &r, &a.bi, &b.bi);
    make_pair(ctx, t, D, F, &r, &a.wout, &b.wout), make_pair(ctx, t, D, 0, &r, &a.bout, &b.bout);
    make_pair(ctx, t, D, 0, &r, &a.ln2_w, &b.ln2_w), make_pair(ctx, t, D, 0, &r, &a.ln2_b, &b.ln2_b);
    gml_tensor *x = input(ctx, B, T, D, &r);
    gml_bert_config c = {.n_heads = 4};
    compare(ctx, t, gml_bert_layer(ctx, &c, &a, x, NULL), gml_bert_layer(ctx, &c, &b, x, NULL));

    gml_gpt2_weights p = {0}, q = {0};
    const gml_type conv = t == GML_Q8_0 ? GML_BF16 : t; /* q8_0 Conv1D is refused (below) */
    make_pair(ctx, t, D, 0, &r, &p.ln1_w, &q.ln1_w), make_pair(ctx, t, D, 0, &r, &p.ln1_b, &q.ln1_b);
    make_pair(ctx, conv, D, 3 * D, &r, &p.attn_w, &q.attn_w);
    make_pair(ctx, t, 3 * D, 0, &r, &p.attn_b, &q.attn_b);
    make_pair(ctx, conv, D, D, &r, &p.proj_w, &q.proj_w), make_pair(ctx, t, D, 0, &r, &p.proj_b, &q.proj_b);
    make_pair(ctx, t, D, 0, &r, &p.ln2_w, &q.ln2_w), make_pair(ctx, t, D, 0, &r, &p.ln2_b, &q.ln2_b);
    make_pair(ctx, conv, D, F, &r, &p.fc_w, &q.fc_w), make_pair(ctx, t, F, 0, &r, &p.fc_b, &q.fc_b);
    make_pair(ctx, conv, F, D, &r, &p.mproj_w, &q.mproj_w);
    make_pair(ctx, t, D, 0, &r, &p.mproj_b, &q.mproj_b);
    gml_gpt2_config gc = {.n_heads = 4};
    compare(ctx, conv, gml_gpt2_layer(ctx, &gc, &p, x), gml_gpt2_layer(ctx, &gc, &q, x));
    gml_free(ctx);
}

/* The q8_0 bytes of rows [r0, r0 + n) of w [R, C] (f32 elements of a vector)
 * in a new tensor of the same type. */
static gml_tensor *rows_copy(gml_context *ctx, const gml_tensor *w, int64_t r0, int64_t n) {
    gml_tensor *t = w->n_dims == 2 ? gml_new_tensor_2d(ctx, w->type, n, w->ne[3])
                                   : gml_new_tensor_1d(ctx, w->type, n);
    const size_t row = w->n_dims == 2 ? w->nb[2] : w->nb[3];
    memcpy(t->data, (const char *)w->data + (size_t)r0 * row, (size_t)n * row);
    return t;
}

/* nn.MultiheadAttention's packed in_proj_weight as q8_0 [D + 2 kv, D]: its q,
 * k, v row blocks are views at row offsets (D and kv rows, so offsets of D and
 * D + kv rows), bitwise the block on three separate q8_0 tensors holding the
 * same rows, at every ISA and 1, 2, 3, 4 and 7 threads, and the same bits at
 * every thread count; MHA and packed GQA (kv < D), fused and unfused, a
 * prompt (the GEMM) and 3 rows (the matrix-vector kernels). */
static void packed_q8_0(void) {
    chk_case("packed in_proj_weight, q8_0");
    chk_rng r = {314};
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 64 << 20});
    const int64_t D = 96, H = 6;
    for (int G = 6; G >= 2; G -= 4) {
        const int64_t kv = G * D / H;
        gml_attn_weights pk = {0}, sp = {0};
        gml_tensor *unused;
        make_pair(ctx, GML_Q8_0, D + 2 * kv, D, &r, &pk.in_proj_weight, &unused);
        make_pair(ctx, GML_Q8_0, D + 2 * kv, 0, &r, &pk.in_proj_bias, &unused);
        make_pair(ctx, GML_Q8_0, D, D, &r, &pk.w_o, &unused);
        sp.w_q = rows_copy(ctx, pk.in_proj_weight, 0, D), sp.b_q = rows_copy(ctx, pk.in_proj_bias, 0, D);
        sp.w_k = rows_copy(ctx, pk.in_proj_weight, D, kv), sp.b_k = rows_copy(ctx, pk.in_proj_bias, D, kv);
        sp.w_v = rows_copy(ctx, pk.in_proj_weight, D + kv, kv);
        sp.b_v = rows_copy(ctx, pk.in_proj_bias, D + kv, kv);
        sp.w_o = pk.w_o;
        for (int impl = GML_ATTN_FUSED; impl <= GML_ATTN_UNFUSED; impl++)
            for (int64_t T = 3; T <= 11; T += 8) { /* B T = 3 rows (matrix-vector), 22 (GEMM) */
                gml_tensor *x = input(ctx, T == 3 ? 1 : 2, T, D, &r);
                gml_attn_config c = {.dims = {.n_heads = (int)H, .n_kv_heads = G},
                                     .score.causal = GML_CAUSAL_BOTTOM_RIGHT,
                                     .graph.impl = (gml_attn_impl)impl};
                gml_tensor *a = gml_gqa(ctx, c, &pk, (gml_attn_inputs){.query = x}).out;
                gml_tensor *b = gml_gqa(ctx, c, &sp, (gml_attn_inputs){.query = x}).out;
                if (!CHECK(a && b, "G %d, T %" PRId64 ": %s", G, T, gml_last_error(ctx))) continue;
                gml_graph *g = gml_build_graph(ctx, (gml_tensor *[]){a, b}, 2);
                if (!CHECK(g, "graph: %s", gml_last_error(ctx))) continue;
                const size_t n = (size_t)gml_nelements(a);
                float *first = malloc(n * sizeof *first);
                for (size_t i = 0; i < sizeof ISAS / sizeof *ISAS; i++) {
                    if (!gml_cpu_has(ISAS[i])) continue;
                    gml_set_isa(ISAS[i]);
                    static const int THREADS[] = {1, 2, 3, 4, 7};
                    for (int k = 0; k < 5; k++) {
                        if (!CHECK(gml_graph_compute(g, THREADS[k]) == GML_OK, "%s", gml_graph_error(g)))
                            continue;
                        const float *pa = gml_graph_data(g, a), *pb = gml_graph_data(g, b);
                        CHECK(memcmp(pa, pb, n * sizeof *pa) == 0, "G %d, T %" PRId64 ", %s, %s, %d "
                              "threads: packed differs from separate q8_0 weights", G, T,
                              impl == GML_ATTN_FUSED ? "fused" : "unfused", gml_isa_name(ISAS[i]),
                              THREADS[k]);
                        if (k == 0) memcpy(first, pa, n * sizeof *pa);
                        else CHECK(memcmp(pa, first, n * sizeof *pa) == 0, "G %d, T %" PRId64 ", %s: "
                                   "%d threads differ from 1", G, T, gml_isa_name(ISAS[i]), THREADS[k]);
                    }
                }
                gml_set_isa(GML_ISA_AUTO);
                free(first);
                gml_graph_free(g);
            }
    }
    gml_free(ctx);
}

static void expect_error(gml_context *ctx, const void *result, const char *want) {
    const char *msg = gml_last_error(ctx);
    CHECK(!result && strstr(msg, want), "want an error containing \"%s\", got \"%s\"", want, msg);
}

static void refusals(void) {
    chk_case("refusals");
    chk_rng r = {5};
    const int64_t D = 64;
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 16 << 20});
    gml_tensor *x = input(ctx, 1, 3, D, &r), *unused;
    gml_attn_weights w = {0};
    make_pair(ctx, GML_F16, D, D, &r, &w.w_q, &unused);
    make_pair(ctx, GML_F16, D, D, &r, &w.w_k, &unused);
    make_pair(ctx, GML_F16, D, D, &r, &w.w_v, &unused);
    make_pair(ctx, GML_F16, D, D, &r, &w.w_o, &unused);
    w.b_q = gml_set_name(gml_new_tensor_1d(ctx, GML_F16, D), "bq");
    gml_attn_config c = {.dims = {.n_heads = 4}};
    expect_error(ctx, gml_mha(ctx, c, &w, (gml_attn_inputs){.query = x}).out,
                 "mha: w_q.bias ('bq') is f16 [64], expected f32 [64]");
    gml_free(ctx);

    ctx = gml_init((gml_init_params){.mem_size = 16 << 20});
    x = input(ctx, 1, 3, D, &r);
    gml_gpt2_weights g = {0};
    make_pair(ctx, GML_F32, D, 0, &r, &g.ln1_w, &unused), make_pair(ctx, GML_F32, D, 0, &r, &g.ln1_b, &unused);
    make_pair(ctx, GML_Q8_0, D, 3 * D, &r, &g.attn_w, &unused);
    make_pair(ctx, GML_F32, 3 * D, 0, &r, &g.attn_b, &unused);
    make_pair(ctx, GML_F32, D, D, &r, &g.proj_w, &unused), make_pair(ctx, GML_F32, D, 0, &r, &g.proj_b, &unused);
    make_pair(ctx, GML_F32, D, 0, &r, &g.ln2_w, &unused), make_pair(ctx, GML_F32, D, 0, &r, &g.ln2_b, &unused);
    make_pair(ctx, GML_F32, D, 4 * D, &r, &g.fc_w, &unused), make_pair(ctx, GML_F32, 4 * D, 0, &r, &g.fc_b, &unused);
    make_pair(ctx, GML_F32, 4 * D, D, &r, &g.mproj_w, &unused), make_pair(ctx, GML_F32, D, 0, &r, &g.mproj_b, &unused);
    expect_error(ctx, gml_gpt2_layer(ctx, &(gml_gpt2_config){.n_heads = 4}, &g, x),
                 "gpt2: attn.c_attn.weight is q8_0 [64,192]: Conv1D weights [in, out]");
    gml_free(ctx);
}

int main(void) {
    const gml_type types[] = {GML_F16, GML_BF16, GML_Q8_0};
    for (int i = 0; i < 3; i++) {
        attention_blocks(types[i]);
        llama(types[i]);
        bert_gpt2(types[i]);
    }
    packed_q8_0();
    refusals();
    printf("typed weights vs f32 weights holding their values, max |diff| / max |out|: "
           "f16 %.2g, bf16 %.2g, q8_0 %.2g\n", worst[0], worst[1], worst[2]);
    return chk_summary();
}
