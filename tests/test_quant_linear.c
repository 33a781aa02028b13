/* linear and matmul with an f16, bf16 or q8_0 weight against f32
 * activations: at every ISA and 1-4 threads, each result within 1e-5
 * relative (of sum |x w|) of a double-precision reference on the converted
 * (dequantized) weight, and bitwise equal to: for more than 4 rows, the
 * same graph on an f32 weight holding the converted values; for up to 4
 * rows (the matrix-vector kernels), the order gemm.h defines ("against a
 * converted weight"), transcribed here; the matrix-vector (M <= 4), few-rows and large paths; odd M,
 * N, K (K a multiple of 32 for q8_0), batched inputs, a plain (not
 * transposed) f16/bf16 b; builder refusals. */
#include "check.h"

static const gml_type TYPES[] = {GML_F16, GML_BF16, GML_Q8_0};
static const gml_isa ISAS[] = {GML_TEST_ISAS};

/* w [N, K] of type t from random values; wf: the f32 values it holds. */
static void make_weight(gml_tensor *w, float *wf, chk_rng *r) {
    const int64_t N = w->ne[2], K = w->ne[3];
    float *v = malloc((size_t)K * sizeof *v);
    for (int64_t n = 0; n < N; n++) {
        char *row = (char *)w->data + n * (int64_t)w->nb[2];
        for (int64_t k = 0; k < K; k++) v[k] = chk_uniform(r, -1, 1) * (1 + (float)(n % 7));
        if (w->type == GML_Q8_0) {
            gml_quantize_row_q8_0(v, (void *)row, K);
            gml_dequantize_row_q8_0((const void *)row, wf + n * K, K);
        } else {
            for (int64_t k = 0; k < K; k++) {
                const uint16_t h = w->type == GML_F16 ? gml_fp32_to_fp16(v[k]) : gml_fp32_to_bf16(v[k]);
                memcpy(row + 2 * k, &h, 2);
                wf[n * K + k] = w->type == GML_F16 ? gml_fp16_to_fp32(h) : gml_bf16_to_fp32(h);
            }
        }
    }
    free(v);
}

/* c = a . row j of w by gemm.h's definition: 16 lane sums over runs of 32
 * k, then a fixed tree. wf: the converted row; for q8_0 q and d per block. */
static float gemv_definition(gml_type t, const float *a, const char *wrow, const float *wf,
                             int64_t K) {
    float s[16] = {0};
    for (int64_t k0 = 0; k0 < K; k0 += 32)
        for (int l = 0; l < 16; l++) {
            const int64_t k1 = k0 + l, k2 = k1 + 16;
            const float a1 = k1 < K ? a[k1] : 0, a2 = k2 < K ? a[k2] : 0;
            if (t == GML_Q8_0) {
                const gml_block_q8_0 *b = (const gml_block_q8_0 *)(const void *)wrow + k0 / 32;
                const float p = fmaf(a2, (float)b->qs[l + 16], a1 * (float)b->qs[l]);
                s[l] = fmaf(gml_fp16_to_fp32(b->d), p, s[l]);
            } else {
                s[l] = fmaf(a2, k2 < K ? wf[k2] : 0, fmaf(a1, k1 < K ? wf[k1] : 0, s[l]));
            }
        }
    float t8[8];
    for (int l = 0; l < 8; l++) t8[l] = s[l] + s[l + 8];
    for (int l = 0; l < 4; l++) t8[l] += t8[l + 4];
    for (int l = 0; l < 2; l++) t8[l] += t8[l + 2];
    return t8[0] + t8[1];
}

/* y = linear(x, w) with x [B, M, K]: compared to linear(x, wf) and to a
 * double reference, at every ISA the CPU has and 1-4 threads. */
static void check_linear(gml_type t, int64_t B, int64_t M, int64_t N, int64_t K, chk_rng *r) {
    chk_case("linear %s x [%lld,%lld,%lld] w [%lld,%lld]", gml_type_name(t), (long long)B,
             (long long)M, (long long)K, (long long)N, (long long)K);
    gml_context *ctx = chk_ctx(64 << 20);
    gml_tensor *x = gml_new_tensor_3d(ctx, GML_F32, B, M, K);
    gml_tensor *w = gml_set_name(gml_new_tensor_2d(ctx, t, N, K), "w");
    gml_tensor *wf = gml_new_tensor_2d(ctx, GML_F32, N, K);
    chk_fill_uniform(x, r, -1, 1);
    make_weight(w, wf->data, r);
    gml_tensor *y = gml_linear(ctx, x, w, NULL), *yf = gml_linear(ctx, x, wf, NULL);
    gml_tensor *outs[2] = {y, yf};
    gml_graph *g = gml_build_graph(ctx, outs, 2);
    if (!CHECK(g, "build: %s", gml_last_error(ctx))) {
        gml_free(ctx);
        return;
    }
    const int64_t n_out = B * M * N;
    double *want = malloc((size_t)n_out * sizeof *want), *mag = malloc((size_t)n_out * sizeof *mag);
    const float *xv = x->data, *wv = wf->data;
    for (int64_t i = 0; i < B * M; i++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0, m = 0;
            for (int64_t k = 0; k < K; k++) {
                s += (double)xv[i * K + k] * wv[n * K + k];
                m += fabs((double)xv[i * K + k] * wv[n * K + k]);
            }
            want[i * N + n] = s;
            mag[i * N + n] = m;
        }
    float *got = malloc((size_t)n_out * 4), *gotf = malloc((size_t)n_out * 4);
    float *def = malloc((size_t)n_out * 4);
    const bool gemv = B * M <= 4;
    for (int64_t i = 0; i < B * M && gemv; i++)
        for (int64_t n = 0; n < N; n++)
            def[i * N + n] = gemv_definition(t, xv + i * K, (const char *)w->data + n * (int64_t)w->nb[2],
                                             wv + n * K, K);
    double worst = 0, worst_vs_f32 = 0;
    for (size_t s = 0; s < sizeof ISAS / sizeof *ISAS; s++) {
        if (!gml_cpu_has(ISAS[s])) continue;
        gml_set_isa(ISAS[s]);
        for (int nth = 1; nth <= 4; nth++) {
            chk_poison_nodes(g);
            if (!CHECK(gml_graph_compute(g, nth) == GML_OK, "compute: %s", gml_graph_error(g)))
                continue;
            chk_read(y, got);
            chk_read(yf, gotf);
            const bool ref = ISAS[s] == GML_ISA_REFERENCE;
            if (!CHECK(memcmp(got, gemv && !ref ? def : gotf, (size_t)n_out * 4) == 0,
                       "%s, %d threads: differs from %s", gml_isa_name(ISAS[s]), nth,
                       gemv && !ref ? "gemm.h's definition" : "the f32 weight's result"))
                break;
            for (int64_t e = 0; e < n_out && gemv && ISAS[s] == GML_ISA_AVX512; e++)
                worst_vs_f32 = fmax(worst_vs_f32, fabs((double)got[e] - gotf[e]) / (mag[e] > 0 ? mag[e] : 1));
            for (int64_t e = 0; e < n_out; e++) {
                const double err = fabs(got[e] - want[e]) / (mag[e] > 0 ? mag[e] : 1);
                worst = fmax(worst, err);
                if (!CHECK(err <= 1e-5, "%s: [%lld] = %.9g, want %.9g", gml_isa_name(ISAS[s]),
                           (long long)e, (double)got[e], want[e]))
                    break;
            }
        }
        if (ISAS[s] != GML_ISA_REFERENCE) {
            const char *k = gml_graph_node_kernel(g, gml_graph_find(g, y));
            CHECK(k && !strstr(k, "reference"), "%s ran a fast kernel: %s", gml_isa_name(ISAS[s]),
                  k ? k : "(none)");
            if (M * B <= 4 && s == 3)
                CHECK(k && strstr(k, gml_type_name(t)) && strstr(k, "gemv"), "the %s gemv ran: %s",
                      gml_type_name(t), k ? k : "(none)");
        }
    }
    gml_set_isa(GML_ISA_AUTO);
    if (getenv("GML_TEST_VERBOSE"))
        printf("%s: worst relative error %.3g (of sum |x w|); gemv vs the f32 weight's result %.3g\n",
               chk_state.case_name, worst, worst_vs_f32);
    free(want), free(mag), free(got), free(gotf), free(def);
    gml_graph_free(g);
    gml_free(ctx);
}

/* matmul(x, b) with a plain f16/bf16 b [K, N] (rows along N): the packing
 * path with strided loads. */
static void check_plain_b(gml_type t, int64_t M, int64_t K, int64_t N, chk_rng *r) {
    chk_case("matmul %s plain b [%lld,%lld], M=%lld", gml_type_name(t), (long long)K, (long long)N,
             (long long)M);
    gml_context *ctx = chk_ctx(16 << 20);
    gml_tensor *x = gml_new_tensor_2d(ctx, GML_F32, M, K);
    gml_tensor *bt = gml_new_tensor_2d(ctx, t, N, K); /* made as [N, K], used as its transpose, */
    gml_tensor *bf = gml_new_tensor_2d(ctx, GML_F32, N, K);
    chk_fill_uniform(x, r, -1, 1);
    make_weight(bt, bf->data, r);
    /* ... then copied into a [K, N] b: cont of the transpose */
    gml_tensor *b = gml_cont(ctx, gml_transpose(ctx, bt, 0, 1));
    gml_tensor *y = gml_matmul(ctx, x, b), *yf = gml_matmul(ctx, x, gml_transpose(ctx, bf, 0, 1));
    gml_tensor *outs[2] = {y, yf};
    gml_graph *g = gml_build_graph(ctx, outs, 2);
    if (!CHECK(g && b->type == t, "build: %s", gml_last_error(ctx))) {
        gml_free(ctx);
        return;
    }
    float *got = malloc((size_t)(M * N) * 4), *gotf = malloc((size_t)(M * N) * 4);
    for (size_t s = 0; s < sizeof ISAS / sizeof *ISAS; s++) {
        if (!gml_cpu_has(ISAS[s])) continue;
        gml_set_isa(ISAS[s]);
        for (int nth = 1; nth <= 3; nth += 2) {
            if (!CHECK(gml_graph_compute(g, nth) == GML_OK, "compute: %s", gml_graph_error(g)))
                continue;
            chk_read(y, got);
            chk_read(yf, gotf);
            CHECK(memcmp(got, gotf, (size_t)(M * N) * 4) == 0, "%s, %d threads: differs from f32",
                  gml_isa_name(ISAS[s]), nth);
        }
    }
    gml_set_isa(GML_ISA_AUTO);
    free(got), free(gotf);
    gml_graph_free(g);
    gml_free(ctx);
}

static void check_errors(void) {
    chk_case("builder refusals");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *x = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 3, 64), "x");
    gml_tensor *q = gml_set_name(gml_new_tensor_2d(ctx, GML_Q8_0, 64, 64), "q");
    gml_tensor *i = gml_set_name(gml_new_tensor_2d(ctx, GML_I32, 64, 8), "i");
    CHECK(!gml_matmul(ctx, x, q), "q8_0 b not transposed");
    CHECK_CONTAINS(gml_last_error(ctx), "matmul(x, q): a q8_0 b must be the transpose of a q8_0 "
                                        "weight [.., N, K]");
    gml_clear_error(ctx);
    CHECK(gml_matmul(ctx, x, gml_transpose(ctx, q, 0, 1)), "q8_0 b transposed: %s",
          gml_last_error(ctx));
    CHECK(!gml_matmul(ctx, x, gml_permute(ctx, q, (int[]){0, 1})), "identity permute of q8_0");
    CHECK_CONTAINS(gml_last_error(ctx), "must be the transpose of a q8_0 weight");
    gml_clear_error(ctx);
    CHECK(!gml_matmul(ctx, x, i), "i32 b");
    CHECK_CONTAINS(gml_last_error(ctx), "'i' is i32 [64,8]; b must be f32, f16, bf16 or q8_0");
    gml_clear_error(ctx);
    CHECK(!gml_linear(ctx, x, gml_transpose(ctx, q, 0, 1), NULL), "linear with a q8_0 view");
    CHECK_CONTAINS(gml_last_error(ctx), "weight must be [out, in] of f32, f16, bf16 or q8_0");
    gml_clear_error(ctx);
    CHECK(!gml_get_rows(ctx, gml_transpose(ctx, q, 0, 1), gml_new_tensor_1d(ctx, GML_I32, 2)),
          "get_rows from a q8_0 view");
    CHECK_CONTAINS(gml_last_error(ctx), "table must be [N, d] of f32, f16, bf16 or q8_0 (a q8_0 "
                                        "one a whole tensor), got q8_0 [64,64] (a view)");
    gml_clear_error(ctx);
    gml_tensor *x33 = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 3, 33), "x33");
    CHECK(!gml_linear(ctx, x33, q, NULL), "K mismatch");
    /* views of q8_0: a block of whole rows at a row offset, and nothing else */
    gml_clear_error(ctx);
    gml_tensor *rows = gml_view(ctx, q, 2, (int64_t[]){16, 64}, (size_t[]){q->nb[2], q->nb[3]}, 8 * q->nb[2]);
    CHECK(rows && gml_linear(ctx, x, rows, NULL) && gml_matmul(ctx, x, gml_transpose(ctx, rows, 0, 1)),
          "rows 8..23 of a q8_0 weight: %s", gml_last_error(ctx));
    CHECK(!gml_view(ctx, rows, 2, (int64_t[]){8, 64}, (size_t[]){q->nb[2], q->nb[3]}, 0), "a view of the view");
    CHECK_CONTAINS(gml_last_error(ctx), "(a view); of its views only transpose and permute of a q8_0 leaf and a block of a leaf's whole rows");
    gml_clear_error(ctx);
    CHECK(!gml_view(ctx, q, 2, (int64_t[]){16, 32}, (size_t[]){q->nb[2], q->nb[3]}, 0), "half rows");
    CHECK_CONTAINS(gml_last_error(ctx), "view(q): 'q' is q8_0 [64,64]; of its views only transpose and permute");
    gml_clear_error(ctx);
    CHECK(!gml_view(ctx, q, 2, (int64_t[]){16, 64}, (size_t[]){q->nb[2], q->nb[3]}, q->nb[3]),
          "an offset of one block (mid-row)");
    CHECK_CONTAINS(gml_last_error(ctx), "and a block of a leaf's whole rows (view with the leaf's strides at a row offset");
    gml_clear_error(ctx);
    CHECK(!gml_view(ctx, q, 2, (int64_t[]){16, 48}, (size_t[]){q->nb[2], q->nb[3]}, 0), "48 values a row");
    CHECK_CONTAINS(gml_last_error(ctx), "view(q): the last dim of [16,48] is not whole q8_0 blocks of 32");
    gml_clear_error(ctx);
    CHECK(!gml_view(ctx, q, 2, (int64_t[]){16, 64}, (size_t[]){q->nb[2], q->nb[3]}, 49 * q->nb[2]),
          "rows past the end");
    CHECK_CONTAINS(gml_last_error(ctx), "past the 4352 bytes of 'q' [64,64]");
    gml_free(ctx);
}

/* get_rows from an f16, bf16, q8_0 table [N, d]: f32 rows equal to the
 * converted table's rows, at every ISA and 1-4 threads; a transposed f16
 * table (strided rows) too. */
static void check_get_rows(gml_type t, bool transposed, chk_rng *r) {
    chk_case("get_rows %s%s", gml_type_name(t), transposed ? " (transposed table)" : "");
    gml_context *ctx = chk_ctx(8 << 20);
    const int64_t N = 70, d = 96;
    gml_tensor *w = gml_new_tensor_2d(ctx, t, transposed ? d : N, transposed ? N : d);
    float *wf = malloc((size_t)(N * d) * 4);
    make_weight(w, wf, r); /* wf [rows of w] */
    gml_tensor *table = transposed ? gml_transpose(ctx, w, 0, 1) : w;
    gml_tensor *idx = gml_new_tensor_2d(ctx, GML_I32, 3, 7);
    int32_t *iv = idx->data;
    for (int i = 0; i < 21; i++) iv[i] = (int32_t)((i * 37 + 5) % N);
    gml_tensor *y = gml_get_rows(ctx, table, idx);
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    if (!CHECK(g && y->type == GML_F32, "build: %s", gml_last_error(ctx))) {
        free(wf);
        gml_free(ctx);
        return;
    }
    float *got = malloc(21 * (size_t)d * 4);
    for (size_t s = 0; s < sizeof ISAS / sizeof *ISAS; s++) {
        if (!gml_cpu_has(ISAS[s])) continue;
        gml_set_isa(ISAS[s]);
        for (int nth = 1; nth <= 4; nth++) {
            chk_poison_nodes(g);
            if (!CHECK(gml_graph_compute(g, nth) == GML_OK, "compute: %s", gml_graph_error(g)))
                continue;
            chk_read(y, got);
            for (int i = 0; i < 21; i++)
                for (int64_t j = 0; j < d; j++) {
                    const float want = transposed ? wf[j * N + iv[i]] : wf[iv[i] * d + j];
                    if (!CHECK(memcmp(&got[i * d + j], &want, 4) == 0, "%s %d threads: [%d][%lld]",
                               gml_isa_name(ISAS[s]), nth, i, (long long)j))
                        i = 21, j = d;
                }
        }
    }
    gml_set_isa(GML_ISA_AUTO);
    free(got);
    free(wf);
    gml_graph_free(g);
    gml_free(ctx);
}

int main(void) {
    for (size_t i = 0; i < 3; i++) {
        check_get_rows(TYPES[i], false, &(chk_rng){7});
        if (TYPES[i] != GML_Q8_0) check_get_rows(TYPES[i], true, &(chk_rng){8});
    }
    chk_rng r = chk_seed(42);
    for (size_t i = 0; i < 3; i++) {
        const gml_type t = TYPES[i];
        const int64_t K1 = t == GML_Q8_0 ? 96 : 77, K2 = t == GML_Q8_0 ? 544 : 531;
        check_linear(t, 1, 1, 37, K1, &r);   /* gemv, tails of N and K */
        check_linear(t, 1, 3, 100, K2, &r);  /* gemv, 3 rows */
        check_linear(t, 2, 2, 17, K1, &r);   /* gemv after folding the batch */
        check_linear(t, 1, 5, 33, K2, &r);   /* few rows: packed panels, K > KC */
        check_linear(t, 3, 37, 70, K1, &r);  /* batch folded, few rows */
        check_linear(t, 1, 150, 45, K2, &r); /* Goto's loops */
        check_linear(t, 1, 130, 140, K2, &r); /* Goto's loops, B shared from 2 threads */
        if (t != GML_Q8_0) {
            check_plain_b(t, 3, 45, 29, &r);
            check_plain_b(t, 90, 45, 29, &r);
        }
    }
    check_errors();
    return chk_summary();
}
