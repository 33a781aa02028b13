/* The int8 compute kernels (ops/gemm_q8.h) against definitions written
 * here:
 *  - every activation quantizer of ops/gemm_q8.inc against the public
 *    gml_quantize_row_q8_0 (scales bitwise; values bitwise where the scale
 *    is not 0, and 0 where it is), with exact ties (roundf rounds them away
 *    from zero), NaN, inf, zero and subnormal blocks;
 *  - every micro-kernel against the definition (int32 block sums, one fmaf
 *    per block in block order), bit for bit, on every tile shape m <= MR,
 *    n <= NR, and C outside the tile untouched;
 *  - the whole product (gml_q8_gemm) with every micro-kernel the CPU can
 *    run, at 1-4 and 7 threads, bitwise equal to the reference
 *    (gml_q8_gemm_ref), on odd M and N, K = 32 to 1056 (past a step of K), strided and
 *    transposed activations, batches with their own and with a shared
 *    weight; the reference within its rounding bound of a double product of
 *    the same quantized operands (quantized here by gml_quantize_row_q8_0),
 *    and within the bound docs/numerics.md states of the f32 product with
 *    the q8_0 weight (the cost of quantizing the activations).
 * Variants the CPU cannot run are skipped, saying why. */
#include "../ops/gemm_q8.h"
#include "check.h"
#include "kernel_check.h"

static chk_rng rng = {12345};
static uint64_t next(void) { return chk_next(&rng); }
static double urand(void) { return (double)(next() >> 11) * 0x1p-53; }
static float frand(void) { return (float)(2.0 * urand() - 1.0); }

/* ---- the quantizers ------------------------------------------------------- */

typedef struct {
    gml_isa isa;
    gml_q8_quantize_fn fn;
    const char *name;
} quantizer;
static const quantizer QUANTIZERS[] = {
#define GML_Q8_UKERNEL(isa, feat, fn, pack, mr, nr)
#define GML_Q8_QUANTIZE(isa, fn) {isa, fn, #fn},
#include "../ops/gemm_q8.inc"
#undef GML_Q8_UKERNEL
#undef GML_Q8_QUANTIZE
};

static void test_quantizers(void) {
    enum { NB = 9, K = 32 * NB };
    float x[K];
    for (int k = 0; k < K; k++) x[k] = frand() * 3.0f;
    /* block 1: exact ties; amax 127 makes the scale 1, so x * id = x */
    for (int k = 0; k < 32; k++) x[32 + k] = (float)(k % 2 ? k : -k) * 0.5f + (k % 4 == 1 ? 0.0f : 0.5f);
    x[32] = 127.0f;
    x[33] = -2.5f, x[34] = 2.5f, x[35] = -0.5f, x[36] = 0.5f, x[37] = 1.5f, x[38] = -126.5f;
    x[2 * 32 + 5] = NAN;                                   /* block 2: NaN */
    x[3 * 32 + 31] = -INFINITY;                            /* block 3: inf */
    for (int k = 0; k < 32; k++) x[4 * 32 + k] = 0.0f;    /* block 4: zero */
    for (int k = 0; k < 32; k++) x[5 * 32 + k] = frand() * 1e-40f; /* subnormal: scale 0 */
    for (int k = 0; k < 32; k++) x[6 * 32 + k] = frand() * 1e-6f;  /* tiny: scale 0 */
    for (int k = 0; k < 32; k++) x[7 * 32 + k] = frand() * 1e-3f;  /* f16-subnormal scale */
    for (int k = 0; k < 32; k++) x[8 * 32 + k] = frand() * 6e4f;   /* large */
    gml_block_q8_0 want[NB];
    gml_quantize_row_q8_0(x, want, K);
    for (size_t v = 0; v < sizeof QUANTIZERS / sizeof QUANTIZERS[0]; v++) {
        const quantizer *qz = &QUANTIZERS[v];
        if (!gml_cpu_has(qz->isa)) {
            printf("skip %s: this CPU lacks %s\n", qz->name, gml_isa_name(qz->isa));
            continue;
        }
        uint8_t aq[K + 1];
        float ad[NB + 1];
        aq[K] = 0xa5;
        ad[NB] = 42.0f;
        qz->fn(NB, x, aq, ad);
        for (int b = 0; b < NB; b++) {
            const float wd = gml_fp16_to_fp32(want[b].d);
            CHECK(memcmp(&ad[b], &wd, 4) == 0 || (isnan(ad[b]) && isnan(wd)),
                  "%s block %d: scale %.9g, want %.9g", qz->name, b, ad[b], wd);
            for (int k = 0; k < 32; k++) {
                const int q = aq[32 * b + k] - 128;
                const int wq = wd == 0.0f ? 0 : want[b].qs[k];
                CHECK(q == wq, "%s block %d value %d (x = %.9g): q %d, want %d", qz->name, b, k,
                      x[32 * b + k], q, wq);
            }
        }
        CHECK(aq[K] == 0xa5 && ad[NB] == 42.0f, "%s wrote past the row", qz->name);
    }
    /* the ties of block 1 round away from zero (roundf) */
    CHECK(want[1].qs[1] == -3 && want[1].qs[2] == 3 && want[1].qs[3] == -1 && want[1].qs[4] == 1 &&
              want[1].qs[5] == 2 && want[1].qs[6] == -127,
          "gml_quantize_row_q8_0 ties: %d %d %d %d %d %d", want[1].qs[1], want[1].qs[2],
          want[1].qs[3], want[1].qs[4], want[1].qs[5], want[1].qs[6]);
}

/* ---- the micro-kernels ----------------------------------------------------- */

static bool cpu_can(const gml_q8_gemm_variant *v, bool say) {
    if (!gml_cpu_has(v->isa)) {
        if (say) printf("skip %s: this CPU lacks %s\n", v->name, gml_isa_name(v->isa));
        return false;
    }
    if (!gml_q8_cpu_has(v->feature)) {
        if (say) printf("skip %s: this CPU lacks %s\n", v->name, gml_q8_feature_name(v->feature));
        return false;
    }
    return true;
}

static void test_ukernels(void) {
    enum { MAXB = 7 };
    for (int vi = 0; vi < gml_q8_gemm_n_variants; vi++) {
        const gml_q8_gemm_variant *v = &gml_q8_gemm_variants[vi];
        if (!cpu_can(v, true)) continue;
        const size_t nbs[] = {1, 2, MAXB};
        for (size_t ni = 0; ni < 3; ni++) {
            const size_t nblk = nbs[ni];
            gml_block_q8_0 a[4][MAXB], w[GML_Q8_NR_MAX][MAXB];
            for (int i = 0; i < 4; i++) kc_rand_q8(&rng, a[i], (int64_t)nblk, false);
            for (int j = 0; j < v->nr; j++) kc_rand_q8(&rng, w[j], (int64_t)nblk, false);
            /* A as the kernels take it: rows of uint8 q + 128 (lda 32 nblk + 3), f32 scales */
            const size_t lda = 32 * nblk + 3, ldd = nblk + 1;
            uint8_t aq[4 * (32 * MAXB + 3)];
            float ad[4 * (MAXB + 1)];
            for (int i = 0; i < 4; i++)
                for (size_t b = 0; b < nblk; b++) {
                    ad[i * ldd + b] = gml_fp16_to_fp32(a[i][b].d);
                    for (int k = 0; k < 32; k++) aq[i * lda + 32 * b + k] = (uint8_t)(a[i][b].qs[k] + 128);
                }
            void *panel = aligned_alloc(64, nblk * GML_Q8_PANEL_BLOCK(GML_Q8_NR_MAX));
            void *mine = aligned_alloc(64, nblk * GML_Q8_PANEL_BLOCK(GML_Q8_NR_MAX));
            for (int m = 1; m <= v->mr; m++)
                for (int n = 1; n <= v->nr; n++)
                    for (int own = 0; own < 2; own++) {
                        /* the variant's packing holds the layout's bytes in rows < n */
                        gml_q8_pack_panel((const char *)w, sizeof w[0], n, v->nr, nblk, panel);
                        if (own) {
                            memset(mine, 0x5a, nblk * GML_Q8_PANEL_BLOCK(v->nr));
                            v->pack((const char *)w, sizeof w[0], n, nblk, mine);
                            for (size_t b = 0; b < nblk; b++) {
                                const char *p0 = (const char *)panel + b * GML_Q8_PANEL_BLOCK(v->nr);
                                const char *p1 = (const char *)mine + b * GML_Q8_PANEL_BLOCK(v->nr);
                                for (int j = 0; j < n; j++) {
                                    bool same = memcmp(p0 + 4 * j, p1 + 4 * j, 4) == 0 &&
                                                memcmp(p0 + 4 * (v->nr + j), p1 + 4 * (v->nr + j), 4) == 0;
                                    for (int g = 0; g < 8; g++)
                                        same = same && memcmp(p0 + 8 * v->nr + (g * v->nr + j) * 4,
                                                              p1 + 8 * v->nr + (g * v->nr + j) * 4, 4) == 0;
                                    CHECK(same, "%s's packing, nblk=%zu n=%d: block %zu row %d differs "
                                          "from gml_q8_pack_panel's", v->name, nblk, n, b, j);
                                }
                            }
                        }
                        const size_t ldc = (size_t)v->nr + 3;
                        float c[6 * (GML_Q8_NR_MAX + 3)];
                        for (size_t e = 0; e < sizeof c / sizeof c[0]; e++) c[e] = -7.0f;
                        /* own packing: C's tile taken as the start of each chain (acc) */
                        for (int i = 0; i < m && own; i++)
                            for (int j = 0; j < n; j++) c[i * ldc + (size_t)j] = (float)(i - j) * 0.25f;
                        /* own packing: something to fetch ahead too (no bit changes) */
                        v->fn(nblk, aq, lda, ad, ldd, m, own ? mine : panel, n, c, ldc, own,
                              own ? panel : NULL);
                        bool ok = true;
                        for (int i = 0; i < 6 && ok; i++)
                            for (size_t j = 0; j < ldc && ok; j++) {
                                const float got = c[i * ldc + j];
                                const bool in = i < m && (int)j < n;
                                const float want =
                                    in ? kc_q8_dot(a[i], w[j], nblk, own ? (float)(i - (int)j) * 0.25f : 0.0f)
                                       : -7.0f;
                                ok = CHECK(memcmp(&got, &want, 4) == 0,
                                           "%s nblk=%zu m=%d n=%d%s: c[%d][%zu] = %.9g, want %.9g%s",
                                           v->name, nblk, m, n, own ? " (own packing)" : "", i, j, got, want,
                                           in ? "" : " (outside the tile: must be untouched)");
                            }
                    }
            free(panel);
            free(mine);
        }
    }
}

/* ---- the whole product ------------------------------------------------------ */

static struct {
    gml_gemm_desc d;
    const gml_q8_gemm_variant *v; /* NULL: the reference */
} run_cfg;

static void run_kernel(const gml_compute_params *p, gml_tensor *dst) {
    GML_UNUSED(dst);
    gml_compute_params q = *p;
    q.isa = run_cfg.v ? run_cfg.v->isa : GML_ISA_REFERENCE;
    if (run_cfg.v)
        gml_q8_gemm(&q, &run_cfg.d, run_cfg.v);
    else
        gml_q8_gemm_ref(&q, &run_cfg.d);
}

static bool run(const gml_gemm_desc *d, const gml_q8_gemm_variant *v, int nth) {
    run_cfg.d = *d;
    run_cfg.v = v;
    return kc_run(run_kernel, gml_q8_gemm_work_size(d, nth), nth);
}

typedef struct {
    int64_t nb0, nb1, M, N, K;
    int a_layout; /* 0 rows contiguous, 1 every other float, 2 transposed [K, M] */
    bool b_shared;
} shape;

static void test_product(const shape *s) {
    const int64_t B = s->nb0 * s->nb1, M = s->M, N = s->N, K = s->K, nblk = K / 32;
    const int64_t nbw = s->b_shared ? 1 : B;
    chk_case("int8 product [%" PRId64 ",%" PRId64 "] x [%" PRId64 ",%" PRId64 ",%" PRId64
             "] K=%" PRId64 " layout %d%s", s->nb0, s->nb1, M, N, K, K, s->a_layout,
             s->b_shared ? " shared W" : "");
    /* A: B matrices [M, K], stored per layout; W: nbw weights [N, K] q8_0 */
    const int64_t a_per = M * K * 2 + 5;
    float *a;
    gml_block_q8_0 *w;
    int64_t a_rs, a_cs;
    kc_q8_inputs(frand, B, nbw, M, N, K, s->a_layout, &a, &w, &a_rs, &a_cs);
    const int64_t ldc = N + 3;
    float *c = malloc(sizeof(float) * (size_t)(B * M * ldc)), *want = malloc(sizeof(float) * (size_t)(B * M * ldc));
    gml_gemm_desc d = {
        .M = M, .N = N, .K = K, .nb0 = s->nb0, .nb1 = s->nb1,
        .a = (const char *)(a + 1), .a_rs = a_rs, .a_cs = a_cs,
        .a_bs = {s->nb1 * a_per * 4, a_per * 4},
        .b = (const char *)w, .b_rs = 34, .b_cs = nblk * 34,
        .b_bs = {s->b_shared ? 0 : s->nb1 * N * nblk * 34, s->b_shared ? 0 : N * nblk * 34},
        .c = (char *)c, .c_rs = ldc * 4, .c_bs = {s->nb1 * M * ldc * 4, M * ldc * 4},
        .b_type = GML_Q8_0,
    };
    for (int64_t e = 0; e < B * M * ldc; e++) c[e] = want[e] = -3.0f;
    d.c = (char *)want;
    if (!run(&d, NULL, 1)) return;
    d.c = (char *)c;
    /* the fast kernels, bitwise the reference at every thread count */
    for (int vi = 0; vi < gml_q8_gemm_n_variants; vi++) {
        const gml_q8_gemm_variant *v = &gml_q8_gemm_variants[vi];
        if (!cpu_can(v, false)) continue;
        const int threads[] = {1, 2, 3, 4, 7};
        for (int t = 0; t < 5; t++) {
            for (int64_t e = 0; e < B * M * ldc; e++) c[e] = -3.0f;
            if (!run(&d, v, threads[t])) return;
            int bad = 0;
            for (int64_t e = 0; e < B * M * ldc; e++)
                if (memcmp(&c[e], &want[e], 4) != 0 && bad++ < 3)
                    CHECK(false, "%s, %d threads: c[%" PRId64 "][%" PRId64 "] = %.9g, reference %.9g",
                          v->name, threads[t], e / ldc, e % ldc, c[e], want[e]);
            CHECK(bad == 0, "%s, %d threads: %d elements differ from the reference", v->name,
                  threads[t], bad);
        }
    }
    /* the reference against double products: of the same quantized operands
     * (its rounding: nblk fmas, each within 2^-24 of the running sum), and of
     * f32 A with the q8_0 weight (docs/numerics.md's bound) */
    float *arow = malloc(sizeof(float) * (size_t)K);
    gml_block_q8_0 *aqb = malloc(sizeof(gml_block_q8_0) * (size_t)nblk);
    double worst_q = 0, worst_f = 0;
    for (int64_t bt = 0; bt < B; bt++)
        for (int64_t m = 0; m < M; m++) {
            const float *ab = a + 1 + bt * a_per;
            for (int64_t k = 0; k < K; k++) arow[k] = ab[(m * a_rs + k * a_cs) / 4];
            gml_quantize_row_q8_0(arow, aqb, K);
            for (int64_t n = 0; n < N; n++) {
                const gml_block_q8_0 *wr = w + ((s->b_shared ? 0 : bt) * N + n) * nblk;
                double exact_q = 0, terms = 0, exact_f = 0, qbound = 0, fterms = 0;
                for (int64_t b = 0; b < nblk; b++) {
                    const double da = gml_fp16_to_fp32(aqb[b].d), dw = gml_fp16_to_fp32(wr[b].d);
                    double s = 0, amax = 0, wl1 = 0;
                    for (int k = 0; k < 32; k++) {
                        const double wv = dw * wr[b].qs[k], xv = arow[32 * b + k];
                        s += (double)aqb[b].qs[k] * wr[b].qs[k];
                        exact_f += xv * wv;
                        fterms += fabs(xv * wv);
                        amax = fmax(amax, fabs(xv));
                        wl1 += fabs(wv);
                    }
                    exact_q += s * da * dw;
                    terms += fabs(s * da * dw);
                    /* |x - da q| <= 0.5 d + 127 |d - da|, d = amax / 127 */
                    const double dd = amax / 127.0;
                    qbound += (0.5 * dd * (1 + 0x1p-20) + 127.0 * fmax(dd * 0x1p-11, 0x1p-25)) * wl1;
                }
                const double got = want[(bt * M + m) * ldc + n];
                const double round_b = (double)nblk * 0x1p-24 * terms * 1.0001 + 1e-30;
                worst_q = fmax(worst_q, fabs(got - exact_q) / round_b);
                CHECK(fabs(got - exact_q) <= round_b, "reference (%" PRId64 ", %" PRId64 ", %" PRId64
                      ") = %.9g, exact %.9g on the quantized operands: off by %.3g > %.3g", bt, m, n,
                      got, exact_q, fabs(got - exact_q), round_b);
                const double fb = qbound + round_b + (double)K * 0x1p-24 * fterms;
                worst_f = fmax(worst_f, fabs(got - exact_f) / fb);
                CHECK(fabs(got - exact_f) <= fb, "reference (%" PRId64 ", %" PRId64 ", %" PRId64
                      ") = %.9g, f32 A x q8_0 W %.9g: off by %.3g > bound %.3g", bt, m, n, got,
                      exact_f, fabs(got - exact_f), fb);
            }
        }
    printf("%-60s worst: %.2f of the rounding bound, %.2f of the quantization bound\n",
           chk_state.case_name, worst_q, worst_f);
    free(arow);
    free(aqb);
    free(a);
    free(w);
    free(c);
    free(want);
}

int main(void) {
    test_quantizers();
    test_ukernels();
    const shape shapes[] = {
        {1, 1, 1, 1, 32, 0, true},     {1, 1, 5, 7, 64, 0, true},    {1, 1, 13, 37, 96, 0, true},
        {1, 1, 33, 65, 160, 1, true},  {1, 1, 3, 100, 256, 2, true}, {1, 1, 9, 33, 288, 2, true},
        {2, 3, 5, 11, 64, 0, false},   {2, 3, 7, 9, 96, 1, true},    {1, 1, 66, 47, 128, 0, true},
        /* K past one step of the packed panel (16 blocks) */
        {1, 1, 6, 35, 544, 2, true},   {1, 1, 3, 20, 1056, 0, true}, {2, 1, 1, 9, 1024, 1, false},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) test_product(&shapes[i]);
    return chk_summary();
}
