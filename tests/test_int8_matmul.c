/* matmul/linear in the int8 compute type (a q8_0 weight against activations
 * quantized per row; ops/gemm_q8.h, docs/numerics.md "int8 compute"):
 *  - set per node (gml_set_compute) and per context (gml_set_default_compute),
 *    at every ISA of tests/isas.h the CPU has (the others skipped, saying
 *    so) and 1-4 and 7 threads, the result bitwise equal to the definition
 *    written here (each row quantized by gml_quantize_row_q8_0, int32 block
 *    sums, one fmaf per block in block order), whatever the ISA and thread
 *    count, with the kernel that ran named (the reference under
 *    GML_ISA_REFERENCE, the variant gml_q8_gemm_pick gives otherwise);
 *  - within docs/numerics.md's bound of the f32-compute product with the
 *    same q8_0 weight (the cost of quantizing the activations);
 *  - odd M and N, K a multiple of 32 up to 1056, batched, sliced and
 *    transposed (non-contiguous) activations, 1-D x;
 *  - the refusals: int8 compute with an f32, f16 or bf16 weight; a q8_0
 *    weight whose K is not a multiple of 32; a context's int8 default leaves
 *    matmuls it cannot take (q k^T, f32 weights) in f32. */
#include "../ops/gemm_q8.h"
#include "check.h"

static const gml_isa ISAS[] = {GML_TEST_ISAS};

/* The definition for one row x [K] against q8_0 rows w [N, K]. */
static void definition(const float *x, const gml_block_q8_0 *w, int64_t N, int64_t K, float *out,
                       double *bound, const float *wf) {
    const int64_t nb = K / 32;
    gml_block_q8_0 *q = malloc(sizeof *q * (size_t)nb);
    gml_quantize_row_q8_0(x, q, K);
    for (int64_t n = 0; n < N; n++) {
        const gml_block_q8_0 *wr = w + n * nb;
        float c = 0.0f;
        double qb = 0, terms = 0, fterms = 0;
        for (int64_t b = 0; b < nb; b++) {
            const float da = gml_fp16_to_fp32(q[b].d), dw = gml_fp16_to_fp32(wr[b].d);
            int32_t s = 0;
            double amax = 0, wl1 = 0;
            for (int k = 0; k < 32; k++) {
                s += (da == 0.0f ? 0 : q[b].qs[k]) * wr[b].qs[k];
                amax = fmax(amax, fabs((double)x[32 * b + k]));
                wl1 += fabs((double)wf[n * K + 32 * b + k]);
                fterms += fabs((double)x[32 * b + k] * wf[n * K + 32 * b + k]);
            }
            c = fmaf((float)s, da * dw, c);
            terms += fabs((double)s * da * dw);
            const double dd = amax / 127.0;
            qb += (0.5 * dd * (1 + 0x1p-20) + 127.0 * fmax(dd * 0x1p-11, 0x1p-25)) * wl1;
        }
        out[n] = c;
        /* quantization + the int8 product's rounding + the f32 product's (both ways) */
        bound[n] = qb + (double)nb * 0x1p-24 * terms * 1.0001 + (double)K * 0x1p-23 * fterms + 1e-30;
    }
    free(q);
}

static void check_int8(int64_t B, int64_t M, int64_t N, int64_t K, chk_layout layout,
                       bool via_default, chk_rng *r) {
    if (B == 0)
        chk_case("int8 linear x [%lld] w q8_0 [%lld,%lld]", (long long)K, (long long)N, (long long)K);
    else
        chk_case("int8 linear x [%lld,%lld,%lld] (%s) w q8_0 [%lld,%lld]%s", (long long)B,
                 (long long)M, (long long)K, chk_layout_name(layout), (long long)N, (long long)K,
                 via_default ? ", context default" : "");
    gml_context *ctx = chk_ctx(64 << 20);
    const bool one_d = B == 0; /* x [K] */
    gml_tensor *x = one_d ? chk_new_input(ctx, GML_F32, 1, (int64_t[]){K}, layout, "x", r, -1, 1)
                          : chk_new_input(ctx, GML_F32, 3, (int64_t[]){B, M, K}, layout, "x", r, -2, 2);
    if (one_d) B = M = 1;
    gml_tensor *wf = gml_new_tensor_2d(ctx, GML_F32, N, K);
    gml_tensor *w = gml_set_name(gml_new_tensor_2d(ctx, GML_Q8_0, N, K), "w");
    float *row = malloc(sizeof(float) * (size_t)K);
    for (int64_t n = 0; n < N; n++) {
        for (int64_t k = 0; k < K; k++) row[k] = chk_uniform(r, -1, 1) * (1 + (float)(n % 5));
        gml_quantize_row_q8_0(row, (gml_block_q8_0 *)w->data + n * (K / 32), K);
        gml_dequantize_row_q8_0((gml_block_q8_0 *)w->data + n * (K / 32), (float *)wf->data + n * K, K);
    }
    if (via_default) CHECK(gml_set_default_compute(ctx, GML_COMPUTE_INT8) == GML_OK, "%s", gml_last_error(ctx));
    gml_tensor *y = gml_linear(ctx, x, w, NULL);
    gml_tensor *mm = y && y->op == GML_OP_RESHAPE ? y->src[0] : y; /* 1-D x: the matmul's reshape */
    if (!via_default && mm)
        CHECK(gml_set_compute(ctx, mm, GML_COMPUTE_INT8) == GML_OK, "%s", gml_last_error(ctx));
    CHECK(mm && gml_get_compute(mm) == GML_COMPUTE_INT8, "the matmul takes int8 compute");
    /* the f32-compute product of the same q8_0 weight (the context default
     * leaves an f32 weight's matmul in f32) */
    gml_tensor *yf = gml_linear(ctx, x, w, NULL);
    if (via_default && yf) {
        gml_tensor *mf = yf->op == GML_OP_RESHAPE ? yf->src[0] : yf;
        CHECK(gml_set_compute(ctx, mf, GML_COMPUTE_F32) == GML_OK, "%s", gml_last_error(ctx));
        gml_tensor *yff = gml_linear(ctx, x, wf, NULL);
        gml_tensor *mff = yff && yff->op == GML_OP_RESHAPE ? yff->src[0] : yff;
        CHECK(mff && gml_get_compute(mff) == GML_COMPUTE_F32,
              "an int8 default leaves an f32 weight's matmul in f32");
    }
    gml_tensor *outs[2] = {y, yf};
    gml_graph *g = y && yf ? gml_build_graph(ctx, outs, 2) : NULL;
    if (!CHECK(g, "build: %s", gml_last_error(ctx))) {
        free(row);
        gml_free(ctx);
        return;
    }
    const int64_t rows = B * M, n_out = rows * N;
    float *xd = malloc(sizeof(float) * (size_t)(rows * K));
    chk_read(x, xd);
    float *want = malloc(sizeof(float) * (size_t)n_out), *got = malloc(sizeof(float) * (size_t)n_out);
    float *gotf = malloc(sizeof(float) * (size_t)n_out);
    double *bound = malloc(sizeof(double) * (size_t)n_out);
    for (int64_t i = 0; i < rows; i++)
        definition(xd + i * K, w->data, N, K, want + i * N, bound + i * N, wf->data);
    double worst = 0, worst_rel = 0;
    for (size_t s = 0; s < sizeof ISAS / sizeof *ISAS; s++) {
        if (!gml_cpu_has(ISAS[s])) {
            printf("skip %s: this CPU lacks it\n", gml_isa_name(ISAS[s]));
            continue;
        }
        gml_set_isa(ISAS[s]);
        for (size_t t = 0; t < sizeof CHK_THREADS / sizeof *CHK_THREADS; t++) {
            const int nth = CHK_THREADS[t];
            chk_poison_nodes(g);
            if (!CHECK(gml_graph_compute(g, nth) == GML_OK, "compute: %s", gml_graph_error(g)))
                continue;
            chk_read(y, got);
            chk_read(yf, gotf);
            int bad = 0;
            for (int64_t e = 0; e < n_out; e++) {
                if (memcmp(&got[e], &want[e], 4) != 0 && bad++ < 3)
                    CHECK(false, "%s, %d threads: y[%lld] = %.9g, the definition %.9g",
                          gml_isa_name(ISAS[s]), nth, (long long)e, got[e], want[e]);
                const double err = fabs((double)got[e] - gotf[e]);
                worst = fmax(worst, err / bound[e]);
                double mag = 0;
                for (int64_t k = 0; k < K; k++)
                    mag += fabs((double)xd[e / N * K + k] * ((const float *)wf->data)[e % N * K + k]);
                worst_rel = fmax(worst_rel, err / (mag > 0 ? mag : 1));
                if (err > bound[e] && bad++ < 3)
                    CHECK(false, "%s, %d threads: y[%lld] = %.9g, f32 compute %.9g: off by %.3g > "
                          "the bound %.3g", gml_isa_name(ISAS[s]), nth, (long long)e, got[e],
                          gotf[e], err, bound[e]);
            }
            CHECK(bad == 0, "%s, %d threads: %d elements wrong", gml_isa_name(ISAS[s]), nth, bad);
        }
        const char *k = gml_graph_node_kernel(g, gml_graph_find(g, mm));
        const char *expect = ISAS[s] == GML_ISA_REFERENCE ? "reference" : gml_q8_gemm_pick(ISAS[s])->name;
        CHECK(k && strcmp(k, expect) == 0, "%s ran %s, expected %s", gml_isa_name(ISAS[s]),
              k ? k : "(none)", expect);
        if (B * M * N * K == 1 * 1 * 1 * 32) /* the first case: which kernel each ISA runs here */
            printf("%s: %s\n", gml_isa_name(ISAS[s]), k ? k : "(none)");
    }
    gml_set_isa(GML_ISA_AUTO);
    printf("%-72s worst: %.2f of the bound; %.2g of sum |x w|\n", chk_state.case_name, worst, worst_rel);
    free(row), free(xd), free(want), free(got), free(gotf), free(bound);
    gml_graph_free(g);
    gml_free(ctx);
}

static void check_refusals(void) {
    chk_case("int8 refusals");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *x = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 3, 64), "x");
    const gml_type types[] = {GML_F32, GML_F16, GML_BF16};
    for (int t = 0; t < 3; t++) {
        gml_tensor *w = gml_set_name(gml_new_tensor_2d(ctx, types[t], 5, 64), "w");
        gml_tensor *y = gml_linear(ctx, x, w, NULL);
        CHECK(y && gml_set_compute(ctx, y, GML_COMPUTE_INT8) == GML_ERR_INVALID,
              "int8 compute with a %s weight is refused", gml_type_name(types[t]));
        const char *msg = gml_last_error(ctx);
        CHECK(strstr(msg, "int8") && strstr(msg, "q8_0") && strstr(msg, gml_type_name(types[t])),
              "the message names int8, q8_0 and the weight's type: %s", msg);
        CHECK(y && gml_get_compute(y) == GML_COMPUTE_F32, "a refused node keeps f32");
    }
    /* q8_0 takes K in blocks of 32: a weight of K = 40 is refused when made */
    gml_tensor *w40 = gml_new_tensor_2d(ctx, GML_Q8_0, 5, 40);
    CHECK(w40 == NULL && strstr(gml_last_error(ctx), "32"),
          "a q8_0 [5, 40] weight is refused, saying 32: %s", gml_last_error(ctx));
    /* an int8 default: q k^T (f32 b) stays f32 */
    CHECK(gml_set_default_compute(ctx, GML_COMPUTE_INT8) == GML_OK, "%s", gml_last_error(ctx));
    gml_tensor *k = gml_new_tensor_2d(ctx, GML_F32, 7, 64);
    gml_tensor *s = gml_matmul(ctx, x, gml_transpose(ctx, k, 0, 1));
    CHECK(s && gml_get_compute(s) == GML_COMPUTE_F32, "q k^T under an int8 default stays f32");
    gml_free(ctx);
}

int main(void) {
    chk_rng r = chk_seed(2025);
    check_refusals();
    check_int8(1, 1, 1, 32, CHK_CONTIGUOUS, false, &r);
    check_int8(1, 3, 37, 64, CHK_CONTIGUOUS, false, &r);   /* few rows */
    check_int8(2, 7, 19, 96, CHK_SLICED, false, &r);
    check_int8(1, 13, 33, 160, CHK_TRANSPOSED, true, &r);
    check_int8(3, 5, 65, 256, CHK_SLICED_TRANSPOSED, false, &r);
    check_int8(1, 41, 70, 544, CHK_CONTIGUOUS, true, &r);  /* past a step of K */
    check_int8(2, 3, 9, 1056, CHK_OUTER_SWAPPED, false, &r);
    check_int8(0, 1, 21, 128, CHK_CONTIGUOUS, false, &r);  /* x [K] */
    return chk_summary();
}
