/* The matmul op through graphs, against a naive loop written here.
 *
 * Every output element of the fast path is one fma chain in k order from +0
 * (ops/gemm.h), so it must equal the naive fmaf loop below bit for bit, at
 * every ISA and every thread count. The op's reference kernel (double
 * accumulation) must agree within rounding.
 *
 * Shapes: tails around the tile and block sizes (MR, NR, MC, KC, NC), the
 * few-rows paths (M <= 32; M <= 4 against a weight) and their edges, batch
 * broadcast both ways, 4-D, transposed and permuted views, slices with
 * offsets, nn.Linear weights (batches folded into M), K = 1; and products
 * under small cache sizes (gml_gemm_set_caches), whose KC, MC, NC blocks
 * (ops/gemm.h, "Cache blocks") cut moderate shapes many times. */
#include <ggmlite/ggmlite.h>

#include "../ops/gemm.h"
#include "isas.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures, checks;
static const int THREADS[] = {1, 2, 3, 4, 7};

static uint32_t rng = 777;
static float rnd(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / (float)(1u << 23) - 1.0f;
}

static void fill(gml_tensor *t) {
    float *x = t->data;
    for (int64_t i = 0; i < gml_nelements(t); i++) x[i] = rnd();
}

/* Naive torch.matmul: one fmaf chain per element (want) and a double sum
 * with its magnitude (for the reference kernel's tolerance). Batch dims of
 * size 1 broadcast. */
static void naive(const gml_tensor *a, const gml_tensor *b, const gml_tensor *out, float *want,
                  double *mag) {
    const int64_t K = a->ne[3];
    int64_t idx = 0;
    for (int64_t i0 = 0; i0 < out->ne[0]; i0++)
        for (int64_t i1 = 0; i1 < out->ne[1]; i1++) {
            const char *pa = (const char *)a->data + (i0 % a->ne[0]) * a->nb[0] +
                             (i1 % a->ne[1]) * a->nb[1];
            const char *pb = (const char *)b->data + (i0 % b->ne[0]) * b->nb[0] +
                             (i1 % b->ne[1]) * b->nb[1];
            for (int64_t m = 0; m < out->ne[2]; m++)
                for (int64_t n = 0; n < out->ne[3]; n++, idx++) {
                    float s = 0.0f;
                    double g = 0;
                    for (int64_t k = 0; k < K; k++) {
                        const float x = *(const float *)(pa + m * a->nb[2] + k * a->nb[3]);
                        const float y = *(const float *)(pb + k * b->nb[2] + n * b->nb[3]);
                        s = fmaf(x, y, s);
                        g += fabs((double)x * y);
                    }
                    want[idx] = s;
                    mag[idx] = g;
                }
        }
}

static void fail_msg(const char *what, const char *how, int64_t i, float got, float want) {
    fprintf(stderr, "FAIL %s (%s): element %lld = %.9g, want %.9g\n", what, how, (long long)i,
            got, want);
    failures++;
}

/* Builds out = a @ b (or linear(a, w) when linear), computes it at every ISA
 * the CPU has and several thread counts, and compares. */
static void check(const char *what, gml_context *ctx, gml_tensor *a, gml_tensor *b, bool linear,
                  bool all_threads) {
    gml_tensor *out = linear ? gml_linear(ctx, a, b, NULL) : gml_matmul(ctx, a, b);
    if (!out) {
        fprintf(stderr, "FAIL %s: build: %s\n", what, gml_last_error(ctx));
        failures++;
        return;
    }
    const gml_tensor *mm = out, *ma = mm->src[0], *mb = mm->src[1];
    const int64_t n = gml_nelements(out);
    float *want = malloc(sizeof(float) * (size_t)n);
    double *mag = malloc(sizeof(double) * (size_t)n);
    naive(ma, mb, out, want, mag);
    gml_graph *g = gml_build_graph(ctx, &out, 1);
    const gml_isa isas[] = {GML_TEST_FAST_ISAS};
    for (size_t ii = 0; ii < sizeof isas / sizeof isas[0]; ii++) {
        if (!gml_cpu_has(isas[ii])) continue;
        gml_set_isa(isas[ii]);
        for (size_t ti = 0; ti < sizeof THREADS / sizeof THREADS[0]; ti++) {
            /* the split is the framework's, the same at every ISA: the slow
             * scalar kernel (fmaf calls) runs at two thread counts only */
            if ((!all_threads || isas[ii] == GML_ISA_SCALAR) && ti > 1) break;
            memset(out->data, 0xff, (size_t)n * sizeof(float)); /* NaN: nothing left unwritten */
            checks++;
            if (gml_graph_compute(g, THREADS[ti]) != GML_OK) {
                fprintf(stderr, "FAIL %s: compute: %s\n", what, gml_graph_error(g));
                failures++;
                continue;
            }
            const float *got = out->data;
            for (int64_t i = 0; i < n; i++)
                if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
                    char how[64];
                    snprintf(how, sizeof how, "%s, %d threads", gml_isa_name(isas[ii]),
                             THREADS[ti]);
                    fail_msg(what, how, i, got[i], want[i]);
                    break;
                }
        }
    }
    gml_set_isa(GML_ISA_REFERENCE);
    checks++;
    if (gml_graph_compute(g, 3) != GML_OK) {
        fprintf(stderr, "FAIL %s: reference compute: %s\n", what, gml_graph_error(g));
        failures++;
    } else {
        const float *got = out->data;
        for (int64_t i = 0; i < n; i++) {
            double tol = 1e-6 * mag[i] + 1e-30;
            if (!(fabs((double)got[i] - want[i]) <= tol)) {
                fail_msg(what, "reference kernel, within 1e-6 of sum |a b|", i, got[i], want[i]);
                break;
            }
        }
    }
    gml_set_isa(GML_ISA_AUTO);
    gml_graph_free(g);
    free(want);
    free(mag);
}

static gml_tensor *rand_tensor(gml_context *ctx, int n_dims, const int64_t *ne) {
    gml_tensor *t = gml_new_tensor(ctx, GML_F32, n_dims, ne);
    fill(t);
    return t;
}
#define T2(ctx, a, b) rand_tensor(ctx, 2, (int64_t[]){a, b})
#define T3(ctx, a, b, c) rand_tensor(ctx, 3, (int64_t[]){a, b, c})
#define T4(ctx, a, b, c, d) rand_tensor(ctx, 4, (int64_t[]){a, b, c, d})

/* Plain 2-D products on sizes around every tile and block edge. */
static void shapes_2d(void) {
    /* MR is 4, 6, 14 and NR 16, 32 across the variants; KC, MC, NC come
     * from the cache sizes (on the Xeon KC 384, 384, 192; MC 340, 336, 672;
     * NC 4096; small_caches() below cuts smaller ones); the rows path takes
     * M <= 64 (its KC is 512), Goto's loops the rest, reading A in place
     * when N <= 2 NR. */
    static const int64_t dims[][3] = {
        {1, 1, 1},     {1, 7, 1},     {7, 1, 7},      {5, 16, 3},     {6, 17, 2},
        {13, 31, 33},  {14, 32, 7},   {15, 33, 100},  {4, 15, 1},     {3, 64, 257},
        {20, 100, 64}, {32, 33, 513}, {33, 65, 64},   {34, 47, 255},  {28, 96, 256},
        {29, 16, 511}, {45, 100, 257}, {100, 257, 33}, {257, 100, 7}, {337, 40, 20},
        {60, 4100, 3}, {1, 300, 600}, {17, 1, 40},    {40, 50, 1100}, {34, 47, 513},
        {35, 2049, 2},   {64, 40, 70},   {65, 40, 70},   {70, 30, 300},  {80, 20, 1100},
        {70, 100, 1100}, {90, 2100, 3},   {700, 40, 200},
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        gml_context *ctx = gml_init((gml_init_params){.mem_size = 16 << 20});
        const int64_t M = dims[i][0], N = dims[i][1], K = dims[i][2];
        char what[64];
        snprintf(what, sizeof what, "[%lld,%lld] @ [%lld,%lld]", (long long)M, (long long)K,
                 (long long)K, (long long)N);
        check(what, ctx, T2(ctx, M, K), T2(ctx, K, N), false, true);
        gml_free(ctx);
    }
}

/* Big enough to split into many chunks at 7 threads. */
static void many_chunks(void) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 16 << 20});
    gml_set_isa(GML_ISA_AUTO);
    check("[300,160] @ [160,530] (chunked)", ctx, T2(ctx, 300, 160), T2(ctx, 160, 530), false,
          true);
    check("[2,3,70,90] @ [2,3,90,80] (chunked)", ctx, T4(ctx, 2, 3, 70, 90), T4(ctx, 2, 3, 90, 80),
          false, true);
    gml_free(ctx);
}

static void batches(void) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 16 << 20});
    check("[2,1,9,20] @ [1,3,20,35] (broadcast both ways)", ctx, T4(ctx, 2, 1, 9, 20),
          T4(ctx, 1, 3, 20, 35), false, true);
    check("[21,18] @ [4,18,40] (a broadcast)", ctx, T2(ctx, 21, 18), T3(ctx, 4, 18, 40), false,
          true);
    check("[3,40,18] @ [18,37] (b broadcast: batches fold into M)", ctx, T3(ctx, 3, 40, 18),
          T2(ctx, 18, 37), false, true);
    check("[2,3,5,18] @ [18,37] (4-D fold, M = 30 <= 32)", ctx, T4(ctx, 2, 3, 5, 18),
          T2(ctx, 18, 37), false, true);
    check("[2,3,12,8] @ [3,8,50] (4-D, b 3-D)", ctx, T4(ctx, 2, 3, 12, 8), T3(ctx, 3, 8, 50), false,
          true);
    gml_free(ctx);
}

/* Attention-shaped views: q k^T with k transposed, permuted heads, slices. */
static void views(void) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 32 << 20});
    /* q, k [B, T, H, d] -> [B, H, T, d] (permute 0,2,1,3); scores = q @ k^T */
    const int perm[] = {0, 2, 1, 3};
    gml_tensor *q = gml_permute(ctx, T4(ctx, 2, 37, 3, 24), perm);
    gml_tensor *k = gml_permute(ctx, T4(ctx, 2, 37, 3, 24), perm);
    check("q @ k^T, permuted heads, [2,3,37,24] @ [2,3,24,37]", ctx, q,
          gml_transpose(ctx, k, -2, -1), false, true);
    gml_tensor *kt = gml_transpose(ctx, T3(ctx, 2, 50, 20), -2, -1);
    check("[2,19,20] @ k^T [2,20,50] (k contiguous [2,50,20])", ctx, T3(ctx, 2, 19, 20), kt, false,
          true);
    /* a transposed: [K, M] seen as [M, K] */
    check("a^T [40,9] @ [9,33]", ctx, gml_transpose(ctx, T2(ctx, 9, 40), 0, 1), T2(ctx, 9, 33),
          false, true);
    /* slices with offsets: rows 3.. and columns 5.. of bigger tensors */
    gml_tensor *big_a = T2(ctx, 60, 90), *big_b = T2(ctx, 80, 70);
    gml_tensor *sa =
        gml_view(ctx, big_a, 2, (int64_t[]){41, 70}, (size_t[]){90 * 4, 4}, (3 * 90 + 5) * 4);
    gml_tensor *sb =
        gml_view(ctx, big_b, 2, (int64_t[]){70, 45}, (size_t[]){70 * 4, 4}, (2 * 70 + 7) * 4);
    check("sliced [41,70] @ sliced [70,45]", ctx, sa, sb, false, true);
    /* every other column of B: no dim contiguous */
    gml_tensor *sb2 = gml_view(ctx, big_b, 2, (int64_t[]){40, 33}, (size_t[]){70 * 4, 8}, 4);
    gml_tensor *sa2 = gml_view(ctx, big_a, 2, (int64_t[]){29, 40}, (size_t[]){180 * 4, 8}, 8);
    check("strided [29,40] @ strided [40,33]", ctx, sa2, sb2, false, true);
    /* a batch of row slices of [B, T, 2K] that still folds into M */
    gml_tensor *xb = T3(ctx, 3, 11, 64);
    gml_tensor *xs = gml_view(ctx, xb, 3, (int64_t[]){3, 11, 32},
                              (size_t[]){11 * 64 * 4, 64 * 4, 4}, 32 * 4);
    check("row-sliced [3,11,32] @ [32,47]", ctx, xs, T2(ctx, 32, 47), false, true);
    gml_free(ctx);
}

/* nn.Linear weights [out, in]: b = w^T has unit row stride. Short rows
 * (K = 96) take the transposing packs; long ones (K >= 256 for M <= 32,
 * >= 512 up to M = 256) read W in place and write C^T. */
static void linear(void) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 32 << 20});
    static const int64_t cases[][3] = {/* M, K, N */
        {1, 96, 77},   {20, 96, 77},  {32, 96, 77},  {33, 96, 77},  {70, 96, 77},
        {1, 300, 77},  {20, 300, 77}, {32, 256, 15}, {33, 520, 77}, {70, 520, 43},
        {257, 520, 30}, {20, 255, 40},
        /* AVX-512's few-rows kernel (gemm_rt.inc): 16 of A's rows, 20 + 17, 20 + 20 */
        {16, 300, 50},  {37, 301, 45}, {40, 512, 33},
        /* one to four rows (and five): the matrix-vector path, k and n around its blocks */
        {1, 1, 1},     {1, 17, 33},   {2, 16, 16},   {3, 33, 17},   {4, 1024, 70},
        {4, 7, 1},     {5, 64, 20},   {1, 1024, 1030},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int64_t M = cases[i][0], K = cases[i][1], N = cases[i][2];
        char what[64];
        snprintf(what, sizeof what, "linear x [%lld,%lld], w [%lld,%lld]", (long long)M,
                 (long long)K, (long long)N, (long long)K);
        check(what, ctx, T2(ctx, M, K), T2(ctx, N, K), true, true);
    }
    check("linear x [2,10,300], w [130,300] (decode batch folds to M=20)", ctx,
          T3(ctx, 2, 10, 300), T2(ctx, 130, 300), true, true);
    check("linear x [4,9,40], w [50,40] (M=36)", ctx, T3(ctx, 4, 9, 40), T2(ctx, 50, 40), true,
          true);
    check("linear x [3,1,130], w [90,130] (decoding 3 sequences: M=3)", ctx, T3(ctx, 3, 1, 130),
          T2(ctx, 90, 130), true, true);
    gml_free(ctx);
}

/* The blocks as gemm.h's rule makes them from given cache sizes, and
 * products cut into many K, M and N blocks by tiny caches (KC 64, MC = MR,
 * NC = 4 NR; then KC 64, MC 2 MR or so, NC 8 NR), bitwise the naive chain
 * at every ISA and thread count like every other shape. */
static void small_caches(void) {
    static const char *const names[] = {"gml_f32_gemm_ukernel__scalar_4x16",
                                        "gml_f32_gemm_ukernel__avx2_4x24",
                                        "gml_f32_gemm_ukernel__avx2_6x16",
                                        "gml_f32_gemm_ukernel__avx512_14x32",
                                        "gml_f32_gemm_ukernel__neon_8x12"};
    static const struct {
        int64_t caches[3];
        int64_t want[5][3]; /* per variant in names[]: KC, MC, NC */
    } rules[] = {
        {{48 << 10, 2 << 20, 130 << 20},
         {{384, 340, 4096}, {256, 512, 4080}, {384, 336, 4096}, {192, 672, 4096},
          {512, 256, 4092}}},
        {{32 << 10, 512 << 10, 4 << 20},
         {{256, 128, 2048}, {168, 192, 3120}, {256, 126, 2048}, {128, 252, 4096}, {336, 96, 1560}}},
        {{1024, 1024, 1024},
         {{64, 4, 64}, {64, 4, 96}, {64, 6, 64}, {64, 14, 128}, {64, 8, 48}}},
    };
    int found = 0;
    for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++) {
        gml_gemm_set_caches(rules[r].caches);
        for (int v = 0; v < gml_gemm_n_variants; v++) {
            int x = 0;
            while (x < 5 && strcmp(names[x], gml_gemm_variants[v].name) != 0) x++;
            if (x == 5) continue;
            found += r == 0;
            const gml_gemm_blocks b = gml_gemm_blocking(&gml_gemm_variants[v]);
            checks++;
            if (b.kc != rules[r].want[x][0] || b.mc != rules[r].want[x][1] ||
                b.nc != rules[r].want[x][2]) {
                fprintf(stderr, "FAIL blocks of %s at caches %lld/%lld/%lld: KC %lld MC %lld NC "
                        "%lld, want %lld %lld %lld\n", gml_gemm_variants[v].name,
                        (long long)rules[r].caches[0], (long long)rules[r].caches[1],
                        (long long)rules[r].caches[2], (long long)b.kc, (long long)b.mc,
                        (long long)b.nc, (long long)rules[r].want[x][0],
                        (long long)rules[r].want[x][1], (long long)rules[r].want[x][2]);
                failures++;
            }
        }
    }
    checks++;
    if (found != gml_gemm_n_variants) { /* a new variant: add its blocks above */
        fprintf(stderr, "FAIL blocks: %d of %d variants have expected blocks here\n", found,
                gml_gemm_n_variants);
        failures++;
    }
    static const int64_t tiny[][3] = {{1024, 1024, 1024}, {1024, 8192, 16384}};
    static const int64_t dims[][3] = {
        {100, 300, 150}, {129, 65, 200}, {43, 130, 64}, {66, 257, 65}};
    for (size_t c = 0; c < sizeof tiny / sizeof tiny[0]; c++) {
        gml_gemm_set_caches(tiny[c]);
        for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
            gml_context *ctx = gml_init((gml_init_params){.mem_size = 16 << 20});
            const int64_t M = dims[i][0], N = dims[i][1], K = dims[i][2];
            char what[96];
            snprintf(what, sizeof what, "[%lld,%lld] @ [%lld,%lld], caches %lld/%lld/%lld",
                     (long long)M, (long long)K, (long long)K, (long long)N,
                     (long long)tiny[c][0], (long long)tiny[c][1], (long long)tiny[c][2]);
            check(what, ctx, T2(ctx, M, K), T2(ctx, K, N), false, true);
            gml_free(ctx);
        }
    }
    gml_gemm_set_caches(NULL);
}

/* M = 20 against an nn.Linear weight runs the few-rows kernel of AVX2 and
 * AVX-512 (gemm_rt.inc: every lane busy), not a register tile padded to 24
 * or 32 columns; M = 32 keeps the 14x32 tile on AVX-512 (no padding). */
static void few_rows_kernels(void) {
    static const struct {
        gml_isa isa;
        int64_t M;
        const char *want;
    } cases[] = {
        {GML_ISA_AVX2, 20, "gml_f32_gemm_ukernel__avx2_rt4x20 (rows_t)"},
        {GML_ISA_AVX512, 20, "gml_f32_gemm_ukernel__avx512_rt16x20 (rows_t)"},
        {GML_ISA_AVX512, 16, "gml_f32_gemm_ukernel__avx512_rt16x20 (rows_t)"},
        {GML_ISA_AVX512, 32, "gml_f32_gemm_ukernel__avx512_14x32 (rows_t)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (!gml_cpu_has(cases[i].isa)) continue;
        gml_context *ctx = gml_init((gml_init_params){.mem_size = 4 << 20});
        gml_tensor *y = gml_linear(ctx, T2(ctx, cases[i].M, 300), T2(ctx, 40, 300), NULL);
        gml_graph *g = gml_build_graph(ctx, &y, 1);
        gml_set_isa(cases[i].isa);
        checks++;
        const char *got = gml_graph_compute(g, 2) == GML_OK ? gml_graph_node_kernel(g, 1) : NULL;
        if (!got || strcmp(got, cases[i].want) != 0) {
            fprintf(stderr, "FAIL linear M=%lld at %s ran %s, want %s\n", (long long)cases[i].M,
                    gml_isa_name(cases[i].isa), got ? got : "(nothing)", cases[i].want);
            failures++;
        }
        gml_set_isa(GML_ISA_AUTO);
        gml_graph_free(g);
        gml_free(ctx);
    }
}

/* Which path the last node of out's graph ran at this ISA and thread count. */
static const char *path_run(gml_context *ctx, gml_tensor *out, gml_isa isa, int nth) {
    gml_graph *g = gml_build_graph(ctx, &out, 1);
    gml_set_isa(isa);
    const char *name =
        g && gml_graph_compute(g, nth) == GML_OK ? gml_graph_node_kernel(g, -1) : NULL;
    gml_set_isa(GML_ISA_AUTO);
    gml_graph_free(g);
    return name ? name : "(none)";
}

/* One large product on several threads: the threads pack each B block
 * together (gemm.c, run_large_shared), one barrier per block, two buffers
 * in turn, and take chunks of rows dynamically (guided, at most MC rows).
 * Checked like every product above (bitwise, 1-7 threads), and the path
 * asserted at 2 threads on each vector ISA: B row-major, B = W^T
 * (transposing packs), tiny caches (blocks of K, N and M cut many times:
 * several B blocks through both buffers, one-panel row chunks), and small
 * caches where MC holds 8 MR-row panels at 2 threads (AVX-512; 9 on AVX2):
 * guided row chunks of 3 to 9 panels, the last panel 9 rows short
 * (AVX-512: 401 = 28 x 14 + 9), B blocks of 128, 128 and 77 columns and
 * K blocks of 56, 56 and 38 (AVX-512). */
static void shared_b(void) {
    static const struct {
        int64_t M, N, K;
        bool linear;
        int64_t caches[3]; /* 0: the machine's */
    } cases[] = {
        {301, 517, 200, false, {0}},
        {300, 150, 130, true, {0}},
        {200, 333, 150, false, {1024, 1024, 1024}},
        {130, 200, 400, true, {1024, 1024, 1024}},
        {401, 333, 150, false, {16 << 10, 128 << 10, 64 << 10}},
        {401, 333, 150, true, {16 << 10, 128 << 10, 64 << 10}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int64_t M = cases[i].M, N = cases[i].N, K = cases[i].K;
        gml_gemm_set_caches(cases[i].caches[0] ? cases[i].caches : NULL);
        gml_context *ctx = gml_init((gml_init_params){.mem_size = 16 << 20});
        gml_tensor *a = T2(ctx, M, K), *b = cases[i].linear ? T2(ctx, N, K) : T2(ctx, K, N);
        char what[128];
        snprintf(what, sizeof what, "%s [%lld,%lld], %s [%lld,%lld] (shared B%s)",
                 cases[i].linear ? "linear x" : "", (long long)M, (long long)K,
                 cases[i].linear ? "w" : "@", (long long)b->ne[2], (long long)b->ne[3],
                 !cases[i].caches[0]               ? ""
                 : cases[i].caches[0] == 1024      ? ", tiny caches"
                                                   : ", small caches");
        check(what, ctx, a, b, cases[i].linear, true);
        const gml_isa isas[] = {GML_TEST_SIMD_ISAS};
        for (size_t ii = 0; ii < sizeof isas / sizeof *isas; ii++) {
            if (!gml_cpu_has(isas[ii])) continue;
            gml_tensor *out = cases[i].linear ? gml_linear(ctx, a, b, NULL) : gml_matmul(ctx, a, b);
            const char *name = path_run(ctx, out, isas[ii], 2);
            checks++;
            if (!strstr(name, "(large, shared B)")) {
                fprintf(stderr, "FAIL %s at %s, 2 threads: ran '%s', want the shared-B path\n",
                        what, gml_isa_name(isas[ii]), name);
                failures++;
            }
        }
        gml_free(ctx);
    }
    gml_gemm_set_caches(NULL);
    /* few rows for many columns: the tiles split N alone (B packed once
     * anyway), each thread packing only its columns: not shared */
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 16 << 20});
    gml_tensor *a = T2(ctx, 120, 64), *b = T2(ctx, 64, 1500);
    const gml_isa isas[] = {GML_TEST_SIMD_ISAS};
    for (size_t ii = 0; ii < sizeof isas / sizeof *isas; ii++) {
        if (!gml_cpu_has(isas[ii])) continue;
        const char *name = path_run(ctx, gml_matmul(ctx, a, b), isas[ii], 2);
        checks++;
        if (!strstr(name, "(large)")) {
            fprintf(stderr, "FAIL [120,64] @ [64,1500] at %s, 2 threads: ran '%s', want "
                    "(large)\n", gml_isa_name(isas[ii]), name);
            failures++;
        }
    }
    gml_free(ctx);
}

int main(void) {
    few_rows_kernels();
    small_caches();
    shared_b();
    shapes_2d();
    many_chunks();
    batches();
    views();
    linear();
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
