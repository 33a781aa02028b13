/* The AMX int8 kernel (ops/gemm_amx.h, "int8"), through a C emulation of
 * the tile instructions: ops/gemm_amx_q8.c, the kernel the library compiles
 * with -mamx-tile -mamx-int8, is compiled into this test against
 * tests/amx_emul.h (which faults, as the CPU would, on a missing tile
 * configuration, a tile used unconfigured or instruction shapes that do
 * not fit). What this tests is the kernel's logic (tile configuration per
 * thread, strides, the packed layouts, one q8 block per TDPBUSD, the
 * corrections, edges and tails, the f32 chains) and TDPBUSD as the Intel
 * SDM defines it; NOT that an AMX CPU computes what the SDM says (no AMX
 * CPU here). The kernel's vector part is AVX-512: without it the test
 * skips, saying so.
 *
 *  - the micro-kernel against the definition written here (int32 sums per
 *    block of 32, one fmaf per block in block order, from +0 or from C),
 *    bit for bit, on tiles m = 1..32 x n = 1..32 (each m against a few n,
 *    each n against a few m), 1 to 9 blocks (past a group of 4), any byte
 *    in A and W (-128 included), scales 0, f16-subnormal, NaN and inf, A's
 *    row stride odd, C outside the tile untouched, W packed by the
 *    definition (gml_q8_pack_panel) and by the variant's packer;
 *  - the whole product (gml_q8_gemm_kept with this variant) bitwise equal
 *    to the reference (gml_q8_gemm_ref), at 1, 2, 3, 4 and 7 threads: tails
 *    in M, N and K blocks (M, N around 16 and 32, K past a step of 16
 *    blocks), strided and transposed A, batches with their own W, a shared
 *    W, W shared along one batch dim, A broadcast; W packed per chunk and
 *    kept (packed by the first compute, reused while valid, repacked when
 *    not);
 *  - the same on products as matmul hands them over (gml_matmul_desc of
 *    matmul nodes with a q8_0 weight: batches folded into M, weights and
 *    activations broadcast across batch dims, non-contiguous activations).
 *
 * The opt-in (test_amx_q8_optin runs this with --opt-in and GGMLITE_AMX=1):
 * without GGMLITE_AMX=1 no ISA picks AMX; with it, AMX is picked only at
 * AVX-512 on a CPU with AMX-INT8 (and Linux's permission), and an int8
 * linear then runs it (on such a CPU this checks the real instructions
 * against the reference, bitwise). */
#define _POSIX_C_SOURCE 200809L /* fileno, dup: amx_check.h */
#include "check.h"
#include "../ops/gemm_amx.h"
#include "amx_check.h"
#include "kernel_check.h"
#include "../ops/gemm_bf16.h" /* gml_matmul_desc */

static const gml_q8_gemm_variant EMUL = GML_AMX_Q8_VARIANT(amxemul);

static chk_rng rng = {2025};
static uint64_t next(void) { return chk_next(&rng); }
static float frand(void) { return (float)((double)(next() >> 11) * 0x1p-52 - 1.0); }

static bool same(float a, float b) { return memcmp(&a, &b, 4) == 0 || (isnan(a) && isnan(b)); }

/* ---- the micro-kernel ------------------------------------------------------------ */

enum { MAXB = 9 }; /* blocks: past two groups of 4 */

static bool one_tile(const gml_block_q8_0 (*a)[MAXB], const gml_block_q8_0 (*w)[MAXB], size_t nblk, int m, int n,
                     const uint8_t *aq, size_t lda, const float *ad, size_t ldd, void *panel, bool own, bool acc) {
    enum { LDC = 32 + 3 };
    float c[33 * LDC];
    for (size_t e = 0; e < sizeof c / sizeof c[0]; e++) c[e] = -7.0f;
    for (int i = 0; i < m && acc; i++)
        for (int j = 0; j < n; j++) c[i * LDC + j] = (float)(i - j) * 0.25f;
    if (own) EMUL.pack((const char *)w, sizeof w[0], n, nblk, panel);
    else gml_q8_pack_panel((const char *)w, sizeof w[0], n, 32, nblk, panel);
    EMUL.begin();
    EMUL.fn(nblk, aq, lda, ad, ldd, m, panel, n, c, LDC, acc, NULL);
    EMUL.end();
    for (int i = 0; i < 33; i++)
        for (int j = 0; j < LDC; j++) {
            const float got = c[i * LDC + j];
            const bool in = i < m && j < n;
            const float want = in ? kc_q8_dot(a[i], w[j], nblk, acc ? (float)(i - j) * 0.25f : 0.0f) : -7.0f;
            if (!CHECK(same(got, want), "nblk=%zu m=%d n=%d%s%s: c[%d][%d] = %.9g, want %.9g%s", nblk, m, n,
                       own ? " (its packer)" : "", acc ? " (from C)" : "", i, j, got, want,
                       in ? "" : " (outside the tile: must be untouched)"))
                return false;
        }
    return true;
}

static void test_ukernel(void) {
    chk_case("the tile kernel against the definition");
    static const size_t nbs[] = {1, 4, MAXB};
    static const int some[] = {1, 2, 15, 16, 17, 31, 32};
    enum { NSOME = (int)(sizeof some / sizeof some[0]) };
    for (size_t ni = 0; ni < 3; ni++) {
        const size_t nblk = nbs[ni];
        gml_block_q8_0 a[32][MAXB], w[32][MAXB];
        for (int i = 0; i < 32; i++) kc_rand_q8(&rng, a[i], (int64_t)nblk, true);
        for (int j = 0; j < 32; j++) kc_rand_q8(&rng, w[j], (int64_t)nblk, true);
        /* A as the kernel takes it: rows of uint8 q + 128 (odd stride), f32 scales */
        const size_t lda = 32 * nblk + 3, ldd = nblk + 1;
        uint8_t aq[32 * (32 * MAXB + 3)];
        float ad[32 * (MAXB + 1)];
        for (int i = 0; i < 32; i++)
            for (size_t b = 0; b < nblk; b++) {
                ad[i * ldd + b] = gml_fp16_to_fp32(a[i][b].d);
                for (int k = 0; k < 32; k++) aq[i * lda + 32 * b + k] = (uint8_t)(a[i][b].qs[k] + 128);
            }
        void *panel = aligned_alloc(64, nblk * GML_Q8_PANEL_BLOCK(32));
        bool ok = true;
        for (int m = 1; m <= 32 && ok; m++)
            for (int t = 0; t < NSOME && ok; t++)
                ok = one_tile(a, w, nblk, m, some[t], aq, lda, ad, ldd, panel, t % 2, t % 3 == 1) &&
                     one_tile(a, w, nblk, some[t], m, aq, lda, ad, ldd, panel, t % 2 == 0, t % 3 == 2);
        free(panel);
    }
}

/* ---- the whole product -------------------------------------------------------------- */

static struct {
    gml_gemm_desc d;
    gml_kept *kept;
    bool ref;
} run_cfg;

static void run_kernel(const gml_compute_params *p, gml_tensor *dst) {
    GML_UNUSED(dst);
    gml_compute_params q = *p;
    q.isa = run_cfg.ref ? GML_ISA_REFERENCE : GML_ISA_AVX512;
    if (run_cfg.ref) gml_q8_gemm_ref(&q, &run_cfg.d);
    else gml_q8_gemm_kept(&q, &run_cfg.d, &EMUL, run_cfg.kept);
}

static bool run(const gml_gemm_desc *d, bool ref, gml_kept *kept, int nth) {
    run_cfg.d = *d;
    run_cfg.ref = ref;
    run_cfg.kept = kept;
    return kc_run(run_kernel, gml_q8_gemm_work_size(d, nth), nth);
}

typedef struct shape {
    int64_t nb0, nb1, M, N, K;
    int a_layout; /* 0 rows contiguous, 1 every other float, 2 transposed [K, M] */
    int w_mode;   /* 0 a W per batch, 1 one W, 2 one W per index of dim 1 (shared along dim 0) */
    bool a_bcast; /* one A for every batch */
} shape;

static int64_t c_diff(const float *c, const float *want, int64_t n, int64_t ldc, const char *what) {
    int64_t bad = 0;
    for (int64_t e = 0; e < n; e++)
        if (!same(c[e], want[e]) && bad++ < 3)
            CHECK(false, "%s: c[%" PRId64 "][%" PRId64 "] = %.9g, reference %.9g", what, e / ldc, e % ldc, c[e],
                  want[e]);
    CHECK(bad == 0, "%s: %" PRId64 " elements differ from the reference", what, bad);
    return bad;
}

static void test_product(const shape *s) {
    const int64_t B = s->nb0 * s->nb1, M = s->M, N = s->N, K = s->K, nblk = K / 32;
    const int64_t nbw = s->w_mode == 0 ? B : s->w_mode == 1 ? 1 : s->nb1, nba = s->a_bcast ? 1 : B;
    chk_case("amx int8 product [%" PRId64 ",%" PRId64 "] %" PRId64 "x%" PRId64 "x%" PRId64 " layout %d, W %s%s",
             s->nb0, s->nb1, M, N, K, s->a_layout,
             s->w_mode == 0 ? "per batch" : s->w_mode == 1 ? "shared" : "per dim 1",
             s->a_bcast ? ", A broadcast" : "");
    const int64_t a_per = M * K * 2 + 5;
    float *a;
    gml_block_q8_0 *w;
    int64_t a_rs, a_cs;
    kc_q8_inputs(frand, nba, nbw, M, N, K, s->a_layout, &a, &w, &a_rs, &a_cs);
    const int64_t ldc = N + 3, nc = B * M * ldc, wb = N * nblk * 34;
    float *c = malloc(sizeof(float) * (size_t)nc), *want = malloc(sizeof(float) * (size_t)nc);
    gml_gemm_desc d = {
        .M = M, .N = N, .K = K, .nb0 = s->nb0, .nb1 = s->nb1,
        .a = (const char *)(a + 1), .a_rs = a_rs, .a_cs = a_cs,
        .a_bs = {s->a_bcast ? 0 : s->nb1 * a_per * 4, s->a_bcast ? 0 : a_per * 4},
        .b = (const char *)w, .b_rs = 34, .b_cs = nblk * 34,
        .b_bs = {s->w_mode == 0 ? s->nb1 * wb : 0, s->w_mode == 1 ? 0 : wb},
        .c = (char *)c, .c_rs = ldc * 4, .c_bs = {s->nb1 * M * ldc * 4, M * ldc * 4},
        .b_type = GML_Q8_0, .isa = GML_ISA_AVX512,
    };
    for (int64_t e = 0; e < nc; e++) c[e] = want[e] = -3.0f;
    d.c = (char *)want;
    if (!run(&d, true, NULL, 1)) return;
    d.c = (char *)c;
    int n_threads;
    const int *threads = chk_threads(&n_threads);
    char what[64];
    for (int t = 0; t < n_threads; t++) {
        for (int64_t e = 0; e < nc; e++) c[e] = -3.0f;
        snprintf(what, sizeof what, "W packed per chunk, %d threads", threads[t]);
        if (!run(&d, false, NULL, threads[t]) || c_diff(c, want, nc, ldc, what)) break;
    }
    /* W kept: packed by the first compute, reused by the next while valid
     * (W's values changed behind its back do not show), repacked when not */
    const size_t kb = gml_q8_gemm_packed_size(&d, &EMUL);
    gml_kept kept = {.data = aligned_alloc(64, gml_align_up(kb + 1, 64)), .size = kb};
    for (int t = 0; t < n_threads; t++) {
        for (int64_t e = 0; e < nc; e++) c[e] = -3.0f;
        snprintf(what, sizeof what, "W kept, %d threads", threads[t]);
        if (!run(&d, false, &kept, threads[t]) || c_diff(c, want, nc, ldc, what)) break;
        CHECK(kept.valid, "%s: kept marked valid", what);
    }
    for (int64_t e = 0; e < nbw * N * nblk; e++) w[e].qs[e % 32] = (int8_t)(w[e].qs[e % 32] ^ 0x55);
    for (int64_t e = 0; e < nc; e++) c[e] = -3.0f;
    if (run(&d, false, &kept, 3)) c_diff(c, want, nc, ldc, "W kept, reused after W changed");
    d.c = (char *)want;
    if (run(&d, true, NULL, 2)) {
        d.c = (char *)c;
        kept.valid = false;
        for (int64_t e = 0; e < nc; e++) c[e] = -3.0f;
        if (run(&d, false, &kept, 4)) c_diff(c, want, nc, ldc, "W kept, repacked");
    }
    free(kept.data);
    free(a);
    free(w);
    free(c);
    free(want);
}

/* The product as matmul hands it to the kernel (gml_matmul_desc of a
 * matmul node: batches folded into M where a weight is shared, broadcast
 * batch dims with stride 0, A in any of the checked layouts): the AMX
 * variant, per chunk and kept, bitwise the reference at every thread
 * count. x [b0, b1, M, K] in layout; w q8_0 [w0, w1, N, K] (a leaf) as
 * transpose(w). */
static void test_matmul_desc(int64_t b0, int64_t b1, int64_t w0, int64_t w1, int64_t M, int64_t N, int64_t K,
                             chk_layout layout) {
    chk_case("amx int8 as matmul takes it: x [%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 "] %s, w [%" PRId64
             ",%" PRId64 ",%" PRId64 ",%" PRId64 "] q8_0",
             b0, b1, M, K, chk_layout_name(layout), w0, w1, N, K);
    gml_context *ctx = chk_ctx(32 << 20);
    chk_rng r = chk_seed((uint64_t)(b0 * 7 + b1 * 5 + M * 3 + N + K));
    gml_tensor *x = chk_new_input(ctx, GML_F32, 4, (int64_t[]){b0, b1, M, K}, layout, "x", &r, -2, 2);
    gml_tensor *w = gml_new_tensor(ctx, GML_Q8_0, 4, (int64_t[]){w0, w1, N, K});
    float *row = malloc(sizeof(float) * (size_t)K);
    for (int64_t n = 0; n < w0 * w1 * N; n++) {
        for (int64_t k = 0; k < K; k++) row[k] = frand();
        gml_quantize_row_q8_0(row, (gml_block_q8_0 *)w->data + n * (K / 32), K);
    }
    free(row);
    gml_tensor *mm = x && w ? gml_matmul(ctx, x, gml_transpose(ctx, w, 2, 3)) : NULL;
    if (!CHECK(mm && gml_set_compute(ctx, mm, GML_COMPUTE_INT8) == GML_OK, "matmul: %s", gml_last_error(ctx))) {
        gml_free(ctx);
        return;
    }
    gml_gemm_desc d = gml_matmul_desc(mm, mm->src[0], mm->src[1], GML_ISA_AVX512);
    printf("%-90s desc: M %" PRId64 ", batches %" PRId64 " x %" PRId64 ", A's batch strides %" PRId64 " %" PRId64
           ", W's %" PRId64 " %" PRId64 "\n", chk_state.case_name, d.M, d.nb0, d.nb1, d.a_bs[0], d.a_bs[1], d.b_bs[0],
           d.b_bs[1]);
    const size_t bytes = gml_nbytes(mm), nf = bytes / 4;
    float *c = malloc(bytes), *want = malloc(bytes);
    for (size_t e = 0; e < nf; e++) want[e] = NAN;
    d.c = (char *)want;
    if (run(&d, true, NULL, 1)) {
        const size_t kb = gml_q8_gemm_packed_size(&d, &EMUL);
        gml_kept kept = {.data = aligned_alloc(64, gml_align_up(kb + 1, 64)), .size = kb};
        d.c = (char *)c;
        int n_threads;
        const int *threads = chk_threads(&n_threads);
        char what[80];
        for (int t = 0; t < 2 * n_threads; t++) {
            for (size_t e = 0; e < nf; e++) c[e] = NAN;
            const bool keep = t >= n_threads;
            snprintf(what, sizeof what, "M %" PRId64 " (folded: %s), %s, %d threads", d.M,
                     d.M > M ? "yes" : "no", keep ? "W kept" : "W packed per chunk", threads[t % n_threads]);
            if (!run(&d, false, keep ? &kept : NULL, threads[t % n_threads]) ||
                c_diff(c, want, (int64_t)nf, mm->ne[3], what))
                break;
        }
        free(kept.data);
    }
    free(c);
    free(want);
    gml_free(ctx);
}

/* ---- the opt-in ---------------------------------------------------------------------- */

/* Without GGMLITE_AMX=1 nothing picks AMX; with it, only AVX-512 on a CPU
 * with AMX-INT8 (and Linux's permission), and an int8 linear then runs it;
 * where it does not, stderr says once why, naming int8 matmuls. */
static const void *pick(gml_isa isa) { return gml_amx_q8_pick(isa); }

static void test_opt_in(bool opted) {
    chk_case("GGMLITE_AMX%s", opted ? "=1" : " unset");
    if (!opted && !amx_check_default_env()) return;
    for (int isa = GML_ISA_REFERENCE; isa <= GML_ISA_NEON; isa++)
        if (isa != GML_ISA_AVX512 || !opted) {
            CHECK(gml_amx_q8_pick((gml_isa)isa) == NULL, "AMX picked at %s", gml_isa_name((gml_isa)isa));
            CHECK(!strstr(gml_q8_gemm_pick((gml_isa)isa)->name, "amx"), "gml_q8_gemm_pick at %s: %s",
                  gml_isa_name((gml_isa)isa), gml_q8_gemm_pick((gml_isa)isa)->name);
        }
    if (!opted) return;
    amx_check_refusal(pick, "int8 matmuls run");
    const gml_q8_gemm_variant *k = gml_amx_q8_pick(GML_ISA_AVX512);
    if (amx_check_real(k != NULL, GML_CPU_AMX_INT8, "AMX-INT8", "the real AMX int8 kernel"))
        CHECK(gml_q8_gemm_pick(GML_ISA_AVX512) == k, "gml_q8_gemm_pick at AVX-512 is not AMX's");
    /* an int8 linear at AVX-512 through a graph (W a weight, kept packed):
     * the AMX kernel where picked, bitwise the reference ISA's result */
    if (!gml_cpu_has(GML_ISA_AVX512)) return;
    enum { T = 37, N = 45, K = 96 };
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 22});
    gml_tensor *x = gml_new_tensor_3d(ctx, GML_F32, 2, T, K), *w = gml_new_tensor_2d(ctx, GML_Q8_0, N, K);
    for (int64_t e = 0; e < 2 * T * K; e++) ((float *)x->data)[e] = frand();
    float row[K];
    for (int n = 0; n < N; n++) {
        for (int kk = 0; kk < K; kk++) row[kk] = frand();
        gml_quantize_row_q8_0(row, (gml_block_q8_0 *)w->data + n * (K / 32), K);
    }
    gml_tensor *y = gml_linear(ctx, x, w, NULL);
    CHECK(gml_set_compute(ctx, y, GML_COMPUTE_INT8) == GML_OK, "int8: %s", gml_last_error(ctx));
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    const gml_isa was = gml_get_isa();
    static float want[2 * T * N];
    gml_set_isa(GML_ISA_REFERENCE);
    if (g && CHECK(gml_graph_compute(g, 2) == GML_OK, "compute: %s", gml_graph_error(g)))
        memcpy(want, y->data, sizeof want);
    gml_set_isa(GML_ISA_AVX512);
    for (int nth = 1; g && nth <= 7; nth += 2) {
        if (!CHECK(gml_graph_compute(g, nth) == GML_OK, "compute: %s", gml_graph_error(g))) break;
        const char *ran = gml_graph_node_kernel(g, -1);
        CHECK(ran && (strstr(ran, "amx") != NULL) == (k != NULL), "%d threads ran %s", nth, ran ? ran : "nothing");
        int bad = 0;
        for (int e = 0; e < 2 * T * N; e++)
            if (!same(((float *)y->data)[e], want[e]) && bad++ < 3)
                CHECK(false, "%s, %d threads: y[%d] = %.9g, reference %.9g", ran ? ran : "?", nth, e,
                      ((float *)y->data)[e], want[e]);
    }
    gml_set_isa(was);
    gml_graph_free(g);
    gml_free(ctx);
}

int main(int argc, char **argv) {
    bool opted;
    if (!amx_check_args(argc, argv, &opted)) return chk_summary();
    test_opt_in(opted);
    if (opted) return chk_summary();
    if (!gml_cpu_has(GML_ISA_AVX512)) {
        printf("skipped: the emulated AMX int8 kernel (its vector part is AVX-512, which this CPU lacks)\n");
        return chk_summary();
    }
    test_ukernel();
    const shape shapes[] = {
        {1, 1, 1, 1, 32, 0, 1, false},     {1, 1, 5, 7, 64, 0, 1, false},    {1, 1, 16, 16, 128, 0, 1, false},
        {1, 1, 17, 33, 160, 1, 1, false},  {1, 1, 31, 65, 96, 2, 1, false},  {1, 1, 32, 32, 256, 0, 1, false},
        {1, 1, 33, 31, 288, 0, 1, false},  {1, 1, 70, 100, 160, 1, 1, false},
        /* K past one step of the packed panel (16 blocks), and past two */
        {1, 1, 40, 35, 544, 2, 1, false},  {1, 1, 3, 20, 1056, 0, 1, false},
        /* batches */
        {2, 3, 5, 11, 64, 0, 0, false},    {2, 3, 19, 9, 96, 1, 1, false},   {2, 2, 9, 40, 64, 0, 2, false},
        {2, 2, 33, 17, 128, 0, 0, true},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) test_product(&shapes[i]);
    test_matmul_desc(2, 3, 1, 1, 7, 33, 96, CHK_CONTIGUOUS);  /* folded: M = 42 */
    test_matmul_desc(2, 3, 1, 1, 17, 40, 64, CHK_SLICED);     /* not folded */
    test_matmul_desc(2, 3, 1, 1, 9, 20, 128, CHK_TRANSPOSED);
    test_matmul_desc(1, 3, 2, 1, 33, 17, 64, CHK_CONTIGUOUS); /* x and w broadcast each other */
    test_matmul_desc(2, 2, 2, 2, 5, 31, 160, CHK_OUTER_SWAPPED);
    return chk_summary();
}
