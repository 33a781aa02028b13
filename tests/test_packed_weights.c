/* Weights packed once (compute.h, gml_graph_weights_changed): a matmul with
 * compute int8 or bf16 whose b is a constant of the graph (a leaf no node
 * writes, flagged neither input nor param) packs it at the first compute
 * and keeps it. Checked here:
 *   - the same bits as the same product on a weight that is not packed (a
 *     copy flagged input), at every ISA the CPU has and 1-4 and 7 threads,
 *     on tails of M, N and K, and for int8 as a plain loop of the
 *     definition in ops/gemm_q8.h (quantized rows, int32 block sums, one
 *     fma per block in order);
 *   - the contract: values written into the weight in place after a
 *     compute are not seen (packed once, never per call) until
 *     gml_graph_weights_changed, after which they are; a weight re-pointed
 *     to other memory is packed again by the next compute; so is one
 *     after the ISA changes;
 *   - what is not packed: inputs, params, and a leaf a node of the graph
 *     writes (gml_cpy into it) read by the matmul after that node. */
#include "check.h"

#include <math.h>
#include <string.h>

static const gml_isa ISAS[] = {GML_TEST_FAST_ISAS};
static const int THREADS[] = {1, 2, 3, 4, 7};

/* Deterministic values in [-1, 1) times scale. */
static void fill_vals(float *x, int64_t n, uint64_t seed, float scale) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = ((float)(seed >> 40) / (float)(1u << 24) * 2.0f - 1.0f) * scale;
    }
}

/* w [N, K] of type t from the f32 values v (row-major). */
static void store_w(gml_tensor *w, const float *v) {
    const int64_t N = w->ne[2], K = w->ne[3];
    for (int64_t n = 0; n < N; n++) {
        char *row = (char *)w->data + n * (int64_t)w->nb[2];
        if (w->type == GML_Q8_0) gml_quantize_row_q8_0(v + n * K, (gml_block_q8_0 *)(void *)row, K);
        else if (w->type == GML_BF16)
            for (int64_t k = 0; k < K; k++) ((uint16_t *)(void *)row)[k] = gml_fp32_to_bf16(v[n * K + k]);
        else if (w->type == GML_F16)
            for (int64_t k = 0; k < K; k++) ((uint16_t *)(void *)row)[k] = gml_fp32_to_fp16(v[n * K + k]);
        else memcpy(row, v + n * K, (size_t)K * sizeof(float));
    }
}

/* ---- the int8 definition as plain loops (ops/gemm_q8.h) --------------------- */

static void quantize_block(const float *x, int8_t q[32], float *d) {
    float amax = 0.0f;
    bool finite = true;
    for (int k = 0; k < 32; k++) {
        finite = finite && isfinite(x[k]);
        amax = fmaxf(amax, fabsf(x[k]));
    }
    memset(q, 0, 32);
    if (!finite) {
        *d = NAN;
        return;
    }
    const float df = amax / 127.0f;
    const uint16_t dh = gml_fp32_to_fp16(df);
    *d = gml_fp16_to_fp32(dh);
    if ((dh & 0x7fffu) == 0) return;
    const float id = 1.0f / df;
    for (int k = 0; k < 32; k++) q[k] = (int8_t)roundf(x[k] * id);
}

/* y [M, N] = x [M, K] @ w^T, w q8_0 [N, K] (its blocks as stored). */
static void int8_ref(const float *x, const gml_tensor *w, int64_t M, float *y) {
    const int64_t N = w->ne[2], K = w->ne[3], nblk = K / 32;
    int8_t *qa = malloc((size_t)K);
    float *da = malloc((size_t)nblk * sizeof *da);
    for (int64_t m = 0; m < M; m++) {
        for (int64_t b = 0; b < nblk; b++) quantize_block(x + m * K + 32 * b, qa + 32 * b, &da[b]);
        for (int64_t n = 0; n < N; n++) {
            const gml_block_q8_0 *wb = (const gml_block_q8_0 *)(const void *)((const char *)w->data + n * (int64_t)w->nb[2]);
            float acc = 0.0f;
            for (int64_t b = 0; b < nblk; b++) {
                int32_t s = 0;
                for (int k = 0; k < 32; k++) s += (int32_t)qa[32 * b + k] * wb[b].qs[k];
                uint16_t h;
                memcpy(&h, &wb[b].d, 2);
                acc = fmaf((float)s, da[b] * gml_fp16_to_fp32(h), acc);
            }
            y[m * N + n] = acc;
        }
    }
    free(qa);
    free(da);
}

/* ---- one case: y = linear(x, w) in compute c, w a constant, beside the
 * same product on wi (w's bytes, flagged input: never packed) --------------- */

typedef struct pcase {
    gml_context *ctx;
    gml_tensor *x, *w, *wi, *y, *yi;
    gml_graph *g, *gi;
    int64_t M, N, K;
    gml_compute c;
} pcase;

static bool pcase_new(pcase *p, gml_compute c, gml_type wt, int64_t M, int64_t N, int64_t K) {
    *p = (pcase){.M = M, .N = N, .K = K, .c = c};
    p->ctx = gml_init((gml_init_params){.mem_size = (size_t)(4 * (M * K + 2 * M * N + 4 * N * K)) + (1 << 20)});
    p->x = gml_new_tensor_2d(p->ctx, GML_F32, M, K);
    p->w = gml_set_name(gml_new_tensor_2d(p->ctx, wt, N, K), "w");
    p->wi = gml_set_name(gml_new_tensor_2d(p->ctx, wt, N, K), "w_input");
    gml_set_flags(p->x, GML_FLAG_INPUT);
    gml_set_flags(p->wi, GML_FLAG_INPUT);
    p->y = gml_linear(p->ctx, p->x, p->w, NULL);
    p->yi = gml_linear(p->ctx, p->x, p->wi, NULL);
    if (!CHECK(p->y && p->yi && gml_set_compute(p->ctx, p->y, c) == GML_OK &&
                   gml_set_compute(p->ctx, p->yi, c) == GML_OK,
               "build: %s", gml_last_error(p->ctx)))
        return false;
    p->g = gml_build_graph(p->ctx, &p->y, 1);
    p->gi = gml_build_graph(p->ctx, &p->yi, 1);
    return CHECK(p->g && p->gi, "graph: %s", gml_last_error(p->ctx));
}

static void pcase_set_w(pcase *p, const float *v) {
    store_w(p->w, v);
    store_w(p->wi, v);
}

static void pcase_free(pcase *p) {
    if (p->g) gml_graph_free(p->g);
    if (p->gi) gml_graph_free(p->gi);
    gml_free(p->ctx);
}

static bool compute(gml_graph *g, int nth) {
    return CHECK(gml_graph_compute(g, nth) == GML_OK, "compute: %s", gml_graph_error(g));
}

/* Whether ISA isa packs c's weight: every ISA but the reference does
 * (int8's panels; bf16's pairs where the pairs order runs, AVX512_BF16,
 * else b's rounded copy for the chain order), at every M, N and K: a bf16
 * weight of even K against 1 to 64 rows too, which runs swapped (read in
 * place) when it is not a weight. */
static bool packs(gml_isa isa) { return isa != GML_ISA_REFERENCE; }

static int first_diff(const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) return (int)i;
    return -1;
}

/* Packed against not packed (and against the int8 definition), every ISA
 * and thread count. */
static void check_bits(gml_compute c, gml_type wt, int64_t M, int64_t N, int64_t K) {
    chk_case("%s, w %s [%lld, %lld], x [%lld, %lld]", gml_compute_name(c), gml_type_name(wt), (long long)N,
             (long long)K, (long long)M, (long long)K);
    pcase p;
    if (!pcase_new(&p, c, wt, M, N, K)) {
        pcase_free(&p);
        return;
    }
    float *v = malloc((size_t)(N * K) * sizeof *v), *ref = malloc((size_t)(M * N) * sizeof *ref);
    fill_vals(v, N * K, (uint64_t)(M * 131 + N * 7 + K), 1.0f);
    fill_vals(p.x->data, M * K, (uint64_t)(M + N * 3 + K * 5), 2.0f);
    pcase_set_w(&p, v);
    if (c == GML_COMPUTE_INT8) int8_ref(p.x->data, p.w, M, ref);
    for (size_t s = 0; s < sizeof ISAS / sizeof *ISAS; s++) {
        if (!gml_cpu_has(ISAS[s])) continue;
        gml_set_isa(ISAS[s]);
        for (size_t t = 0; t < sizeof THREADS / sizeof *THREADS; t++) {
            if (!compute(p.g, THREADS[t]) || !compute(p.gi, THREADS[t])) continue;
            const float *y = p.y->data, *yi = p.yi->data;
            int d = first_diff(y, yi, M * N);
            CHECK(d < 0, "%s, %d threads: packed y[%d] = %.9g, not packed %.9g", gml_isa_name(ISAS[s]),
                  THREADS[t], d, d < 0 ? 0.0 : (double)y[d], d < 0 ? 0.0 : (double)yi[d]);
            if (c == GML_COMPUTE_INT8) {
                d = first_diff(y, ref, M * N);
                CHECK(d < 0, "%s, %d threads: y[%d] = %.9g, the definition %.9g", gml_isa_name(ISAS[s]),
                      THREADS[t], d, d < 0 ? 0.0 : (double)y[d], d < 0 ? 0.0 : (double)ref[d]);
            }
            const bool want = packs(ISAS[s]);
            CHECK((gml_graph_packed_bytes(p.g) > 0) == want, "%s: %zu bytes packed, expected %s",
                  gml_isa_name(ISAS[s]), gml_graph_packed_bytes(p.g), want ? "some" : "none");
            CHECK(gml_graph_packed_bytes(p.gi) == 0, "%s: the input weight was packed (%zu bytes)",
                  gml_isa_name(ISAS[s]), gml_graph_packed_bytes(p.gi));
        }
    }
    gml_set_isa(GML_ISA_AUTO);
    free(v);
    free(ref);
    pcase_free(&p);
}

/* The contract, at the best ISA, 1 and 3 threads: written in place, not
 * seen until gml_graph_weights_changed; re-pointed, seen. */
static void check_contract(gml_compute c, gml_type wt, int nth) {
    const int64_t M = 3, N = 45, K = 96;
    chk_case("contract: %s, w %s, %d threads", gml_compute_name(c), gml_type_name(wt), nth);
    gml_set_isa(GML_ISA_AUTO);
    if (!packs(gml_get_isa())) {
        printf("skip %s: %s does not pack %s weights on this CPU (no AVX512_BF16)\n", chk_state.case_name,
               gml_isa_name(gml_get_isa()), gml_compute_name(c));
        return;
    }
    pcase p;
    if (!pcase_new(&p, c, wt, M, N, K)) {
        pcase_free(&p);
        return;
    }
    float *v0 = malloc((size_t)(N * K) * sizeof *v0), *v1 = malloc((size_t)(N * K) * sizeof *v1);
    float *old = malloc((size_t)(M * N) * sizeof *old);
    fill_vals(v0, N * K, 1, 1.0f);
    fill_vals(v1, N * K, 2, 1.0f);
    fill_vals(p.x->data, M * K, 3, 1.0f);
    pcase_set_w(&p, v0);
    if (compute(p.g, nth)) memcpy(old, p.y->data, (size_t)(M * N) * sizeof *old);
    CHECK(gml_graph_packed_bytes(p.g) > 0, "nothing packed");

    /* in place: the packed copy stays (packed once, not per compute) */
    pcase_set_w(&p, v1);
    if (compute(p.g, nth) && compute(p.gi, nth)) {
        CHECK(first_diff(p.y->data, old, M * N) < 0, "a weight written in place was packed again "
              "without gml_graph_weights_changed");
        CHECK(first_diff(p.yi->data, old, M * N) >= 0, "the new values give the old result: the check is void");
    }
    /* told: packed again, the new values' bits */
    CHECK(gml_graph_weights_changed(p.g) == GML_OK, "weights_changed: %s", gml_graph_error(p.g));
    if (compute(p.g, nth)) {
        const int d = first_diff(p.y->data, p.yi->data, M * N);
        CHECK(d < 0, "after gml_graph_weights_changed: y[%d] = %.9g, the new weight's %.9g", d,
              d < 0 ? 0.0 : (double)((float *)p.y->data)[d], d < 0 ? 0.0 : (double)((float *)p.yi->data)[d]);
    }
    /* re-pointed to other memory holding v0: packed again without being told */
    void *own = p.w->data, *other = malloc(gml_nbytes(p.w));
    p.w->data = other;
    store_w(p.w, v0);
    if (compute(p.g, nth))
        CHECK(first_diff(p.y->data, old, M * N) < 0, "a re-pointed weight was not packed again");
    p.w->data = own;
    /* and back: the old memory (v1) packed again */
    if (compute(p.g, nth))
        CHECK(first_diff(p.y->data, p.yi->data, M * N) < 0, "a weight pointed back was not packed again");
    /* another ISA: its own layout, packed again */
    for (size_t s = 0; s < sizeof ISAS / sizeof *ISAS; s++) {
        if (!gml_cpu_has(ISAS[s]) || ISAS[s] == gml_get_isa()) continue;
        const gml_isa best = gml_get_isa();
        gml_set_isa(ISAS[s]);
        if (compute(p.g, nth) && compute(p.gi, nth))
            CHECK(first_diff(p.y->data, p.yi->data, M * N) < 0, "after a switch to %s: other bits than "
                  "the unpacked product's", gml_isa_name(ISAS[s]));
        gml_set_isa(best);
    }
    gml_set_isa(GML_ISA_AUTO);
    free(other);
    free(v0);
    free(v1);
    free(old);
    pcase_free(&p);
}

/* Params, and a leaf that a node of the graph writes before the matmul
 * reads it (not for q8_0, whose linear takes only a leaf or a block of its
 * rows), are not packed, and follow their values. */
static void check_not_constants(gml_compute c, gml_type wt) {
    const int64_t M = 2, N = 33, K = 64;
    chk_case("not constants: %s, w %s", gml_compute_name(c), gml_type_name(wt));
    gml_set_isa(GML_ISA_AUTO);
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 22});
    gml_tensor *x = gml_new_tensor_2d(ctx, GML_F32, M, K);
    gml_tensor *wp = gml_new_tensor_2d(ctx, wt, N, K);
    gml_set_flags(wp, GML_FLAG_PARAM);
    gml_tensor *ws = gml_new_tensor_2d(ctx, wt, N, K), *wd = gml_new_tensor_2d(ctx, wt, N, K);
    gml_tensor *yp = gml_linear(ctx, x, wp, NULL);
    const bool written = wt != GML_Q8_0;
    gml_tensor *yw = written ? gml_linear(ctx, x, gml_cpy(ctx, ws, wd), NULL) : yp; /* wd written, then read */
    if (!CHECK(yp && yw && gml_set_compute(ctx, yp, c) == GML_OK && gml_set_compute(ctx, yw, c) == GML_OK,
               "build: %s", gml_last_error(ctx))) {
        gml_free(ctx);
        return;
    }
    gml_graph *g = gml_build_graph(ctx, (gml_tensor *[]){yp, yw}, written ? 2 : 1);
    float *v = malloc((size_t)(N * K) * sizeof *v), *before = malloc((size_t)(2 * M * N) * sizeof *before);
    fill_vals(x->data, M * K, 5, 1.0f);
    fill_vals(v, N * K, 6, 1.0f);
    store_w(wp, v);
    store_w(ws, v);
    if (compute(g, 2)) {
        CHECK(gml_graph_packed_bytes(g) == 0, "%zu bytes packed of a param and a written leaf",
              gml_graph_packed_bytes(g));
        memcpy(before, yp->data, (size_t)(M * N) * sizeof *before);
        memcpy(before + M * N, yw->data, (size_t)(M * N) * sizeof *before);
    }
    fill_vals(v, N * K, 7, 1.0f);
    store_w(wp, v);
    store_w(ws, v);
    if (compute(g, 2)) {
        CHECK(first_diff(yp->data, before, M * N) >= 0, "a param's new values were not seen");
        CHECK(first_diff(yw->data, before + M * N, M * N) >= 0, "a written leaf's new values were not seen");
    }
    free(v);
    free(before);
    gml_graph_free(g);
    gml_free(ctx);
}

int main(void) {
    for (size_t s = 0; s < sizeof ISAS / sizeof *ISAS; s++)
        if (!gml_cpu_has(ISAS[s])) printf("skip %s: this CPU lacks it\n", gml_isa_name(ISAS[s]));
    printf("bf16 packs %s here\n", gml_cpu_has_feature(GML_CPU_AVX512_BF16)
                                        ? "pairs at avx512 (AVX512_BF16) and rounded copies at the other ISAs"
                                        : "rounded copies at every ISA (no AVX512_BF16: the chain order)");
    /* int8: M 1-5 (decoding, one tile and past it), 17, 70; N tails of
     * every panel width (8, 16, 32); K of 1, 3, 17 blocks (KB = 16) */
    static const int64_t q8[][3] = {{1, 1, 32}, {1, 37, 96}, {2, 70, 544}, {3, 16, 64}, {4, 33, 128},
                                    {5, 9, 96}, {17, 65, 64}, {70, 40, 544}};
    for (size_t i = 0; i < sizeof q8 / sizeof *q8; i++)
        check_bits(GML_COMPUTE_INT8, GML_Q8_0, q8[i][0], q8[i][1], q8[i][2]);
    /* bf16: K odd (the pad), N tails of 32, M 1-4, 14, 15, 65 (swapped
     * when not packed up to 64); bf16, f16 and f32 weights */
    static const int64_t bf[][3] = {{1, 1, 1}, {1, 37, 33}, {2, 64, 70}, {3, 31, 128}, {4, 45, 7},
                                    {14, 33, 65}, {15, 70, 96}, {65, 20, 33}};
    static const gml_type bt[] = {GML_BF16, GML_F16, GML_F32};
    for (size_t i = 0; i < sizeof bf / sizeof *bf; i++)
        check_bits(GML_COMPUTE_BF16, bt[i % 3], bf[i][0], bf[i][1], bf[i][2]);
    /* bf16 weights of even K against 5 to 64 rows, packed, against the
     * same read in place (swapped): 5, 20 (14 + 6 rows) and 64 rows (4 x 14
     * + 8), N tails of 32, K past one K block */
    static const int64_t few[][3] = {{5, 37, 64}, {20, 45, 300}, {64, 33, 1030}};
    for (size_t i = 0; i < sizeof few / sizeof *few; i++)
        check_bits(GML_COMPUTE_BF16, GML_BF16, few[i][0], few[i][1], few[i][2]);
    for (int nth = 1; nth <= 3; nth += 2) {
        check_contract(GML_COMPUTE_INT8, GML_Q8_0, nth);
        check_contract(GML_COMPUTE_BF16, GML_BF16, nth);
        check_contract(GML_COMPUTE_BF16, GML_F32, nth);
    }
    check_not_constants(GML_COMPUTE_INT8, GML_Q8_0);
    check_not_constants(GML_COMPUTE_BF16, GML_BF16);
    return chk_summary();
}
