/* Compute precision (gml_set_compute, gml_set_default_compute) and matmul
 * in bf16 (docs/numerics.md, "bf16 compute").
 *
 * The API: which nodes take which precision, the messages of refusals, the
 * context default (autocast), and graph files carrying compute=bf16.
 *
 * The arithmetic, against references written here from the definition:
 * a and b rounded to bf16 (an RNE written here, not the library's), then
 *   - the chain order (reference kernels, every ISA without AVX512-BF16):
 *     acc = fmaf(a_k, b_k, acc) in k order from +0, compared bitwise;
 *   - the pairs order of VDPBF16PS (AVX-512 on a CPU with AVX512_BF16): an
 *     emulation of the instruction as the Intel SDM defines it, per pair
 *     (2p, 2p+1), the odd product first, each an fma with subnormal inputs
 *     taken as 0 and a subnormal result flushed to 0, compared bitwise;
 *   - the AMX order of TDPBF16PS (ops/gemm_amx.h; AVX-512 where
 *     gml_amx_bf16_pick hands out the AMX kernel: GGMLITE_AMX=1 on a CPU
 *     with AMX-BF16), written here from the SDM: per step of 32 k an even
 *     and an odd fma chain from +0, summed, added to c, with the same
 *     treatment of subnormals, compared bitwise;
 *   - each within its error bound of docs/numerics.md against the double
 *     product of the rounded operands: (K + 1) 2^-24 sum_k |a_k b_k| (plus
 *     K 2^-126 for flushed subnormals) for the chain and pairs orders,
 *     (18 + ceil(K / 32)) 2^-24 sum_k |a_k b_k| (plus (2K + 2 ceil(K / 32))
 *     2^-126) for the AMX order, which the f32 product of the unrounded
 *     operands misses by far (bf16 rounding is ~2^-9 relative).
 * The order expected of an ISA is the one of the kernel it picks, and the
 * kernel a run names must be of that order: so `GGMLITE_AMX=1 ctest` on an
 * AMX CPU holds the real AMX kernel to its order. With --amx-emulated
 * (test_matmul_bf16_amxemul), the AVX-512 runs pick the AMX kernel compiled
 * against the tile emulation (tests/amx_emul.h; gml_amx_bf16_set_kernel)
 * and every product below runs through it: AMX's dispatch, scratch and
 * packed weights on machines without AMX.
 * Shapes with tails (M, N, K odd, K not a multiple of 2 or 32), each GEMM
 * path (few rows, matrix-vector, Goto's loops, several K blocks), batches
 * with broadcasting, non-contiguous a and b, b of f32, bf16 and f16; every
 * result bitwise the same at 1, 2, 3, 4 and 7 threads (CHECK_RUN), under
 * the reference kernels and each ISA the CPU has. */
#include "check.h"
#include "../ops/gemm_amx.h"
#include "../ops/gemm_bf16.h"

#include <ggmlite/io.h>

#include <float.h>

/* ---- references, written from the definitions ------------------------------ */

static uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static float float_of(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* f32 -> bf16 -> f32: round to nearest, ties to even on the top 16 bits; a
 * NaN stays a NaN (made quiet). */
static float rbf16(float x) {
    uint32_t u = bits_of(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return float_of((u | 0x00400000u) & 0xffff0000u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return float_of(u & 0xffff0000u);
}

/* VDPBF16PS's treatment of subnormals: taken as 0 of their sign. */
static float daz(float x) { return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x; }
static float dp_step(float c, float a, float b) { return daz(fmaf(daz(a), daz(b), daz(c))); }

static float chain_dot(int64_t K, const float *a, int64_t as, const float *b, int64_t bs) {
    float c = 0.0f;
    for (int64_t k = 0; k < K; k++) c = fmaf(a[k * as], b[k * bs], c);
    return c;
}

static float pairs_dot(int64_t K, const float *a, int64_t as, const float *b, int64_t bs) {
    float c = 0.0f;
    for (int64_t k = 0; k < K; k += 2) {
        const float a1 = k + 1 < K ? a[(k + 1) * as] : 0.0f, b1 = k + 1 < K ? b[(k + 1) * bs] : 0.0f;
        c = dp_step(c, a1, b1);
        c = dp_step(c, a[k * as], b[k * bs]);
    }
    return c;
}

/* TDPBF16PS's order: per step of 32 k (16 pairs, past K zero) an even and
 * an odd chain from +0, their sum added to c. */
static float amx_dot(int64_t K, const float *a, int64_t as, const float *b, int64_t bs) {
    float c = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += 32) {
        float even = 0.0f, odd = 0.0f;
        for (int64_t k = k0; k < k0 + 32; k += 2) {
            even = dp_step(even, k < K ? a[k * as] : 0.0f, k < K ? b[k * bs] : 0.0f);
            odd = dp_step(odd, k + 1 < K ? a[(k + 1) * as] : 0.0f, k + 1 < K ? b[(k + 1) * bs] : 0.0f);
        }
        c = daz(daz(c) + daz(daz(even) + daz(odd)));
    }
    return c;
}

/* The order of the bf16 kernel that isa picks, and what its name says. */
typedef enum bf16_order { ORDER_CHAIN, ORDER_PAIRS, ORDER_AMX } bf16_order;
static const char *const ORDER_NAME[] = {"chain", "VDPBF16PS pairs", "TDPBF16PS (AMX)"};
static const char *const ORDER_KERNEL[] = {"bf16_gemm__chain", "avx512bf16_14x32 (pairs)", "__amx_"};

static bf16_order order_of(gml_isa isa) {
    if (gml_amx_bf16_pick(isa)) return ORDER_AMX;
    if (isa == GML_ISA_AVX512 && gml_cpu_has_feature(GML_CPU_AVX512_BF16)) return ORDER_PAIRS;
    return ORDER_CHAIN;
}

/* --amx-emulated: the AMX kernel on the tile emulation (tests/amx_emul.h),
 * which names itself so. */
static const gml_amx_bf16_kernel AMX_EMULATED = GML_AMX_BF16_KERNEL(amxemul);
static bool amx_emulated;

/* ---- filling inputs of any type -------------------------------------------- */

/* Element e (logical order) of t set to x stored in t's type; returns the
 * value t then holds, as f32. */
static float put(gml_tensor *t, int64_t e, float x) {
    void *p = chk_at(t, e);
    uint16_t h;
    switch (t->type) {
    case GML_F16: h = gml_fp32_to_fp16(x); memcpy(p, &h, 2); return gml_fp16_to_fp32(h);
    case GML_BF16: h = gml_fp32_to_bf16(x); memcpy(p, &h, 2); return gml_bf16_to_fp32(h);
    default: memcpy(p, &x, 4); return x;
    }
}

/* ---- the API ------------------------------------------------------------------ */

static void test_api(void) {
    chk_case("gml_set_compute, gml_set_default_compute");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *a = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 3, 32), "a");
    gml_tensor *b = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 32, 4), "b");
    gml_tensor *wq = gml_set_name(gml_new_tensor_2d(ctx, GML_Q8_0, 4, 32), "wq");
    gml_tensor *wb = gml_set_name(gml_new_tensor_2d(ctx, GML_BF16, 4, 32), "wb");
    gml_tensor *y = gml_matmul(ctx, a, b);
    CHECK(gml_get_compute(y) == GML_COMPUTE_F32, "a new matmul computes in f32");
    char buf[256];
    gml_format_node(y, NULL, NULL, buf, sizeof buf);
    CHECK(!strstr(buf, "compute"), "an f32 matmul prints without compute=: %s", buf);
    CHECK(gml_set_compute(ctx, y, GML_COMPUTE_BF16) == GML_OK, "bf16 on f32 b: %s", gml_last_error(ctx));
    CHECK(gml_get_compute(y) == GML_COMPUTE_BF16, "set to bf16");
    gml_format_node(y, NULL, NULL, buf, sizeof buf);
    CHECK(strstr(buf, "compute=bf16"), "a bf16 matmul prints compute=bf16: %s", buf);
    CHECK(gml_set_compute(ctx, y, GML_COMPUTE_F32) == GML_OK && gml_get_compute(y) == GML_COMPUTE_F32,
          "back to f32");

    gml_tensor *s = gml_set_name(gml_add(ctx, a, a), "s");
    CHECK(gml_set_compute(ctx, s, GML_COMPUTE_BF16) == GML_ERR_INVALID, "an add takes no precision");
    CHECK_CONTAINS(gml_last_error(ctx), "'s' is a add node; only matmul nodes");
    CHECK(gml_set_compute(ctx, a, GML_COMPUTE_BF16) == GML_ERR_INVALID, "a leaf takes no precision");
    CHECK_CONTAINS(gml_last_error(ctx), "'a' is a leaf node");
    CHECK(gml_get_compute(s) == GML_COMPUTE_F32 && gml_get_compute(NULL) == GML_COMPUTE_F32,
          "gml_get_compute of other nodes and NULL: f32");
    CHECK(gml_set_compute(ctx, NULL, GML_COMPUTE_BF16) == GML_ERR_INVALID, "a NULL node");
    CHECK_CONTAINS(gml_last_error(ctx), "gml_set_compute: the node is NULL");
    CHECK(gml_set_compute(NULL, y, (gml_compute)7) == GML_ERR_INVALID, "NULL ctx, bad value");

    gml_tensor *yq = gml_linear(ctx, a, wq, NULL);
    CHECK(yq && yq->op == GML_OP_MATMUL, "linear without bias is its matmul");
    CHECK(gml_set_compute(ctx, yq, GML_COMPUTE_BF16) == GML_ERR_INVALID, "bf16 on a q8_0 b");
    CHECK_CONTAINS(gml_last_error(ctx), "matmul(a, wq (transposed)) with b q8_0 [32,4]: bf16 compute takes a b of f32, f16 or bf16");
    CHECK(gml_set_compute(ctx, y, GML_COMPUTE_INT8) == GML_ERR_INVALID, "int8 on an f32 b");
    CHECK_CONTAINS(gml_last_error(ctx), "int8 compute takes a q8_0 b");
    CHECK(gml_set_compute(ctx, y, (gml_compute)7) == GML_ERR_INVALID, "7 is no precision");
    CHECK_CONTAINS(gml_last_error(ctx), "not a gml_compute value");
    CHECK(gml_get_compute(y) == GML_COMPUTE_F32 && gml_get_compute(yq) == GML_COMPUTE_F32,
          "refusals change nothing");

    /* the context's default: matmuls built after it, where their b allows */
    CHECK(gml_get_default_compute(ctx) == GML_COMPUTE_F32 && gml_get_default_compute(NULL) == GML_COMPUTE_F32,
          "the default default is f32");
    CHECK(gml_set_default_compute(ctx, GML_COMPUTE_INT8) == GML_OK &&
              gml_get_default_compute(ctx) == GML_COMPUTE_INT8, "an int8 default (tests/test_int8_matmul.c)");
    CHECK(gml_set_default_compute(ctx, (gml_compute)-1) == GML_ERR_INVALID, "a bad default");
    CHECK(gml_set_default_compute(NULL, GML_COMPUTE_BF16) == GML_ERR_INVALID, "a NULL context");
    CHECK(gml_set_default_compute(ctx, GML_COMPUTE_BF16) == GML_OK, "bf16 default");
    gml_tensor *bias = gml_new_tensor_1d(ctx, GML_F32, 4);
    gml_tensor *y2 = gml_matmul(ctx, a, b), *yl = gml_linear(ctx, a, wb, bias);
    gml_tensor *yq2 = gml_linear(ctx, a, wq, NULL);
    CHECK(gml_get_compute(y2) == GML_COMPUTE_BF16, "matmul after the default: bf16");
    CHECK(yl && yl->op == GML_OP_ADD && gml_get_compute(yl->src[0]) == GML_COMPUTE_BF16,
          "linear's matmul after the default: bf16");
    CHECK(gml_get_compute(yq2) == GML_COMPUTE_F32, "a q8_0 weight keeps f32 under a bf16 default");
    CHECK(gml_get_compute(y) == GML_COMPUTE_F32, "nodes built before keep theirs");
    CHECK(gml_set_default_compute(ctx, GML_COMPUTE_F32) == GML_OK &&
              gml_get_compute(gml_matmul(ctx, a, b)) == GML_COMPUTE_F32,
          "f32 default again");

    /* a refusal is a builder's error: the context builds no graph until cleared */
    CHECK(gml_build_graph(ctx, &y, 1) == NULL, "no graph after a refusal");
    gml_clear_error(ctx);
    /* the digest tells the precisions apart */
    gml_tensor *y3 = gml_matmul(ctx, a, b);
    gml_graph *g1 = gml_build_graph(ctx, &y3, 1);
    const uint64_t d1 = gml_graph_digest(g1);
    gml_graph_free(g1);
    gml_set_compute(ctx, y3, GML_COMPUTE_BF16);
    g1 = gml_build_graph(ctx, &y3, 1);
    CHECK(gml_graph_digest(g1) != d1, "digest differs between f32 and bf16");
    gml_graph_free(g1);
    gml_free(ctx);
}

/* Graph files: compute= read, written, and refused when unsupported. */
static void test_graph_text(void) {
    chk_case("graph text compute=");
    static const char *const GOOD = "input a f32 [3, 5]\ninput b f32 [5, 4]\n"
                                    "y = matmul(a, b, compute=bf16)\nz = matmul(a, b)\n"
                                    "output y\noutput z\n";
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *outs[2];
    char err[512] = "";
    CHECK(gml_parse_graph(ctx, GOOD, strlen(GOOD), "bf16.graph", NULL, outs, 2, err, sizeof err) == 2,
          "parse: %s", err);
    CHECK(gml_get_compute(outs[0]) == GML_COMPUTE_BF16 && gml_get_compute(outs[1]) == GML_COMPUTE_F32,
          "compute=bf16 read, none is f32");
    gml_graph *g = gml_build_graph(ctx, outs, 2);
    const char *path = "test_matmul_bf16.graph";
    CHECK(gml_save_graph(path, g, outs, 2, err, sizeof err) == GML_OK, "save: %s", err);
    gml_graph_free(g);
    gml_free(ctx);
    ctx = chk_ctx(1 << 20);
    CHECK(gml_load_graph(ctx, path, NULL, outs, 2, err, sizeof err) == 2, "load: %s", err);
    CHECK(gml_get_compute(outs[0]) == GML_COMPUTE_BF16 && gml_get_compute(outs[1]) == GML_COMPUTE_F32,
          "compute survives a save and load");
    remove(path);
    gml_free(ctx);

    static const char *const BAD[][2] = {
        {"input a f32 [3, 32]\ninput w q8_0 [4, 32]\ny = matmul(a, transpose(w, 0, 1), compute=bf16)\noutput y\n",
         "bf16 compute takes a b of f32, f16 or bf16"},
        {"input a f32 [3, 5]\ninput b f32 [5, 4]\ny = matmul(a, b, compute=f16)\noutput y\n", "f32, bf16, int8"},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) {
        ctx = chk_ctx(1 << 20);
        CHECK(gml_parse_graph(ctx, BAD[i][0], strlen(BAD[i][0]), "bad.graph", NULL, outs, 1, err,
                              sizeof err) == -1,
              "bad graph %zu refused", i);
        CHECK_CONTAINS(err, BAD[i][1]);
        gml_free(ctx);
    }
}

/* ---- the arithmetic ------------------------------------------------------------ */

/* One product y = a @ b in bf16: the inputs' values (as f32) rounded, and
 * per output element the chain and pairs results, the double product of
 * the rounded operands and its bound. */
typedef struct bf16_case {
    gml_tensor *y;
    int64_t n;          /* elements of y */
    float *want[3];     /* per bf16_order */
    double *exact, *bound, *bound_amx;
    bool check_bound;   /* false for inputs with subnormal products */
} bf16_case;

static void verify_bf16(void *user) {
    const bf16_case *c = user;
    const gml_isa isa = gml_get_isa();
    const bf16_order o = order_of(isa);
    CHECK_EQUAL(c->y, c->want[o], "bf16 matmul vs the %s order (%s kernels)", ORDER_NAME[o], gml_isa_name(isa));
    if (c->check_bound)
        CHECK_WITHIN(c->y, c->exact, o == ORDER_AMX ? c->bound_amx : c->bound,
                     "bf16 matmul within the %s order's error bound", ORDER_NAME[o]);
}

/* Fills a [.., M, K] and b [.., K, N] (b's type any) with uniform values
 * in [-scale, scale) and computes the references into c. */
static void fill_and_reference(gml_tensor *a, gml_tensor *b, gml_tensor *y, chk_rng *r, float scale,
                               bf16_case *c) {
    const int64_t na = chk_numel(a), nbv = chk_numel(b);
    float *av = malloc((size_t)na * sizeof *av), *bv = malloc((size_t)nbv * sizeof *bv);
    for (int64_t e = 0; e < na; e++) av[e] = rbf16(put(a, e, scale * chk_uniform(r, -1, 1)));
    for (int64_t e = 0; e < nbv; e++) bv[e] = rbf16(put(b, e, scale * chk_uniform(r, -1, 1)));
    const int64_t M = a->ne[2], K = a->ne[3], N = b->ne[3];
    c->y = y;
    c->n = chk_numel(y);
    for (int o = 0; o < 3; o++) c->want[o] = malloc((size_t)c->n * sizeof(float));
    c->exact = malloc((size_t)c->n * sizeof(double));
    c->bound = malloc((size_t)c->n * sizeof(double));
    c->bound_amx = malloc((size_t)c->n * sizeof(double));
    for (int64_t i0 = 0; i0 < y->ne[0]; i0++)
        for (int64_t i1 = 0; i1 < y->ne[1]; i1++)
            for (int64_t m = 0; m < M; m++)
                for (int64_t n = 0; n < N; n++) {
                    const float *arow = av + (((i0 % a->ne[0]) * a->ne[1] + i1 % a->ne[1]) * M + m) * K;
                    const float *bcol = bv + ((i0 % b->ne[0]) * b->ne[1] + i1 % b->ne[1]) * K * N + n;
                    const int64_t e = ((i0 * y->ne[1] + i1) * M + m) * N + n;
                    double s = 0, mag = 0;
                    for (int64_t k = 0; k < K; k++) {
                        s += (double)arow[k] * (double)bcol[k * N]; /* exact: 16 bits each */
                        mag += fabs((double)arow[k] * (double)bcol[k * N]);
                    }
                    const int64_t steps = (K + 31) / 32;
                    c->want[ORDER_CHAIN][e] = chain_dot(K, arow, 1, bcol, N);
                    c->want[ORDER_PAIRS][e] = pairs_dot(K, arow, 1, bcol, N);
                    c->want[ORDER_AMX][e] = amx_dot(K, arow, 1, bcol, N);
                    c->exact[e] = s;
                    c->bound[e] = (double)(K + 1) * 0x1p-24 * mag + (double)(K + 1) * 0x1p-126;
                    c->bound_amx[e] = (double)(18 + steps) * 0x1p-24 * mag + (double)(2 * K + 2 * steps) * 0x1p-126;
                }
    free(av);
    free(bv);
}

static void free_case(bf16_case *c) {
    for (int o = 0; o < 3; o++) free(c->want[o]);
    free(c->exact);
    free(c->bound);
    free(c->bound_amx);
}

/* The ISAs to run besides the reference: each fast one the CPU has (with
 * --amx-emulated, AVX-512 only: the one that picks AMX). */
static int fast_isas(gml_isa *out) {
    static const gml_isa all[] = {GML_TEST_FAST_ISAS};
    int n = 0;
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (gml_cpu_has(all[i]) && (!amx_emulated || all[i] == GML_ISA_AVX512)) out[n++] = all[i];
    return n;
}

/* a [batch_a.., M, K] @ b [batch_b.., K, N] in bf16, a in layout la, b of
 * type bt in layout lb (CHK_TRANSPOSED: stored as [N, K], an nn.Linear
 * weight's W^T), at every thread count and kernel set. */
static void run_case(int nd, const int64_t *ba, const int64_t *bb, int64_t M, int64_t N, int64_t K,
                     chk_layout la, gml_type bt, chk_layout lb, float scale, bool check_bound,
                     uint64_t seed) {
    chk_rng r = chk_seed(seed);
    gml_context *ctx = chk_ctx(64 << 20);
    int64_t ash[4], bsh[4];
    for (int d = 0; d < nd - 2; d++) ash[d] = ba[d], bsh[d] = bb[d];
    ash[nd - 2] = M, ash[nd - 1] = K, bsh[nd - 2] = K, bsh[nd - 1] = N;
    gml_tensor *a = chk_new_layout(ctx, GML_F32, nd, ash, la, "a");
    gml_tensor *b = chk_new_layout(ctx, bt, nd, bsh, lb, "b");
    gml_tensor *y = gml_matmul(ctx, a, b);
    char sa[64], sb[64];
    chk_case("bf16 matmul %s %s @ %s %s %s (x%g)", chk_layout_name(la), chk_shape(a, sa, sizeof sa),
             gml_type_name(bt), chk_layout_name(lb), chk_shape(b, sb, sizeof sb), (double)scale);
    if (!CHECK(y && gml_set_compute(ctx, y, GML_COMPUTE_BF16) == GML_OK, "build: %s", gml_last_error(ctx))) {
        gml_free(ctx);
        return;
    }
    bf16_case c = {.check_bound = check_bound};
    fill_and_reference(a, b, y, &r, scale, &c);
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    gml_isa isas[8];
    const int n_isas = fast_isas(isas);
    for (int i = 0; i < n_isas; i++) {
        CHECK_RUN(g, .outs = &y, .n_outs = 1, .verify = verify_bf16, .user = &c, .isa = isas[i],
                  .no_reference = i > 0); /* the reference kernels once */
        const char *kern = gml_graph_node_kernel(g, -1);
        const bf16_order o = order_of(isas[i]);
        /* the AMX GEMM names its 32- and 16-row kernels as M takes them (test_amx_bf16) */
        const char *want = o == ORDER_AMX && amx_emulated ? "__amxemul_" : ORDER_KERNEL[o];
        CHECK(kern && strstr(kern, want), "%s ran the bf16 kernel of the %s order: %s",
              gml_isa_name(isas[i]), ORDER_NAME[o], kern ? kern : "(none)");
    }
    gml_graph_free(g);
    free_case(&c);
    gml_free(ctx);
}

/* 2-D products over the paths of the GEMM: matrix-vector (M <= 4 against
 * W^T), few rows (M <= 64), few rows against W^T with long K, Goto's loops
 * (M > 64); K odd, even, and not a multiple of 32 (several K blocks:
 * test_blocks). */
static void test_shapes(void) {
    static const int64_t mnk[][3] = {
        {1, 1, 1},   {1, 7, 2},    {3, 5, 7},    {2, 19, 33},   {4, 40, 129}, {5, 33, 31},
        {17, 33, 65}, {20, 37, 300}, {70, 45, 257}, {150, 67, 601}, {33, 96, 64},
    };
    static const gml_type types[] = {GML_F32, GML_BF16, GML_F16};
    static const chk_layout la[] = {CHK_CONTIGUOUS, CHK_SLICED, CHK_TRANSPOSED};
    static const chk_layout lb[] = {CHK_CONTIGUOUS, CHK_TRANSPOSED, CHK_SLICED, CHK_SLICED_TRANSPOSED};
    int k = 0;
    for (size_t s = 0; s < sizeof mnk / sizeof *mnk; s++)
        for (size_t t = 0; t < 3; t++, k++) {
            run_case(2, NULL, NULL, mnk[s][0], mnk[s][1], mnk[s][2], la[k % 3], types[t],
                     lb[(k / 3 + t) % 4], 1.0f, true, 500 + (uint64_t)k);
        }
}

/* A bf16 weight W [N, K] with K even, as linear gives it: up to 64 rows,
 * C^T = W A^T with W read in place (ops/gemm_bf16.c, swapped), in the same
 * pairs order; N not a multiple of the tile's 14 rows, M past one 32-row
 * panel, K past MAX_KC (the last rows of W packed in blocks), 70 rows
 * (packed); and a W whose rows are not 4-byte aligned (sliced: packed). */
static void test_bf16_weights(void) {
    static const int64_t mnk[][3] = {{1, 1, 2}, {3, 15, 2}, {20, 45, 300}, {70, 31, 130},
                                     {33, 100, 1100}, {5, 14, 64}, {64, 27, 1030}};
    for (size_t s = 0; s < sizeof mnk / sizeof *mnk; s++)
        run_case(2, NULL, NULL, mnk[s][0], mnk[s][1], mnk[s][2], s % 2 ? CHK_SLICED : CHK_CONTIGUOUS,
                 GML_BF16, s == 5 ? CHK_SLICED_TRANSPOSED : CHK_TRANSPOSED, 1.0f, true, 700 + (uint64_t)s);
    static const int64_t ba[2] = {2, 3}, bb[2] = {1, 3};
    run_case(4, ba, bb, 7, 19, 34, CHK_CONTIGUOUS, GML_BF16, CHK_TRANSPOSED, 1.0f, true, 720);
}

/* Several K blocks (ops/gemm_bf16.c: at most 512 pairs, 1024 values of
 * k, each) in each loop of the pairs GEMM, with a 32 KiB L2
 * (gml_gemm_set_caches) so that MC is one 14-row panel: Goto's loops
 * over 30 rows (3 MC blocks, K odd), the few-rows sweep over 5; each C
 * element adds its K blocks in order, so the bits are those of one
 * block. */
static void test_blocks(void) {
    static const int64_t small[3] = {32 << 10, 32 << 10, 2 << 20};
    gml_gemm_set_caches(small);
    run_case(2, NULL, NULL, 30, 17, 1031, CHK_CONTIGUOUS, GML_F32, CHK_CONTIGUOUS, 1.0f, true, 960);
    run_case(2, NULL, NULL, 5, 17, 1030, CHK_TRANSPOSED, GML_F16, CHK_TRANSPOSED, 1.0f, true, 961);
    gml_gemm_set_caches(NULL);
}

/* Batches, broadcast either way, and batches folded into M (a weight
 * shared by every batch). */
static void test_batched(void) {
    static const int64_t ba[][2] = {{2, 3}, {1, 3}, {2, 3}, {2, 1}};
    static const int64_t bb[][2] = {{2, 3}, {2, 1}, {1, 1}, {2, 3}};
    for (int i = 0; i < 4; i++)
        run_case(4, ba[i], bb[i], 7, 9, 33, i % 2 ? CHK_SLICED : CHK_CONTIGUOUS,
                 i == 2 ? GML_BF16 : GML_F32, i == 2 ? CHK_TRANSPOSED : CHK_CONTIGUOUS, 1.0f, true,
                 900 + (uint64_t)i);
}

/* Tiny values: products below f32's normal range (subnormal, flushed by
 * VDPBF16PS) and bf16 operands that are subnormal (taken as 0 by it): the
 * results are held bitwise to each order's emulation, no bound. */
static void test_subnormal(void) {
    run_case(2, NULL, NULL, 9, 35, 67, CHK_CONTIGUOUS, GML_F32, CHK_CONTIGUOUS, 1e-20f, false, 950);
    run_case(2, NULL, NULL, 9, 35, 67, CHK_CONTIGUOUS, GML_F32, CHK_TRANSPOSED, 3e-19f, false, 951);
    run_case(2, NULL, NULL, 20, 35, 301, CHK_SLICED, GML_BF16, CHK_TRANSPOSED, 2e-38f, false, 952);
}

/* NaN and infinity: a NaN in a's row m makes out[m, :] NaN; a value past
 * bf16's largest (it rounds to inf) times a positive value gives inf; inf
 * times 0 gives NaN, on every kernel set. */
static void test_nonfinite(void) {
    chk_case("bf16 matmul with NaN and inf");
    gml_context *ctx = chk_ctx(1 << 20);
    const int64_t M = 3, K = 37, N = 18;
    gml_tensor *a = gml_new_tensor_2d(ctx, GML_F32, M, K), *b = gml_new_tensor_2d(ctx, GML_F32, K, N);
    float *ad = a->data, *bd = b->data;
    for (int64_t i = 0; i < M * K; i++) ad[i] = 0.5f;
    for (int64_t i = 0; i < K * N; i++) bd[i] = 0.25f;
    ad[0 * K + 5] = NAN;          /* row 0: NaN everywhere */
    ad[1 * K + 36] = 3.4e38f;     /* row 1: rounds to +inf in bf16: inf, and NaN in column 3 */
    bd[36 * N + 3] = 0.0f;
    gml_tensor *y = gml_matmul(ctx, a, b);
    gml_set_compute(ctx, y, GML_COMPUTE_BF16);
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    gml_isa isas[8];
    const int n_isas = fast_isas(isas);
    for (int i = -1; i < n_isas; i++) {
        gml_set_isa(i < 0 ? GML_ISA_REFERENCE : isas[i]);
        CHECK(gml_graph_compute(g, 3) == GML_OK, "compute: %s", gml_graph_error(g));
        const float *yd = y->data;
        for (int64_t n = 0; n < N; n++) {
            CHECK(isnan(yd[n]), "%s: out[0, %lld] NaN", gml_isa_name(gml_get_isa()), (long long)n);
            CHECK(n == 3 ? isnan(yd[N + n]) : yd[N + n] == INFINITY, "%s: out[1, %lld] = %g",
                  gml_isa_name(gml_get_isa()), (long long)n, (double)yd[N + n]);
            CHECK(yd[2 * N + n] == 0.125f * (float)(n == 3 ? K - 1 : K), "out[2, %lld]", (long long)n);
        }
    }
    gml_set_isa(GML_ISA_AUTO);
    gml_graph_free(g);
    gml_free(ctx);
}

/* The pairs-order micro-kernels (ops/gemm_bf16.inc) against this file's
 * emulation of VDPBF16PS, on packed panels of random pairs (normal,
 * subnormal and zero bf16 of both signs): every m <= MR, n <= NR, several
 * kp, with and without accumulating into C. */
static void test_ukernels(void) {
    chk_rng r = chk_seed(77);
    for (int vi = 0; vi < gml_bf16_gemm_n_variants; vi++) {
        const gml_bf16_gemm_variant *v = &gml_bf16_gemm_variants[vi];
        chk_case("micro-kernel %s", v->name);
        if (!gml_cpu_has(v->isa) || (v->isa == GML_ISA_AVX512 && !gml_cpu_has_feature(GML_CPU_AVX512_BF16))) {
            printf("skipped %s: the CPU lacks %s\n", v->name,
                   v->isa == GML_ISA_AVX512 ? "avx512_bf16" : gml_isa_name(v->isa));
            continue;
        }
        static const size_t kps[] = {0, 1, 2, 7, 64, 131};
        for (size_t t = 0; t < sizeof kps / sizeof *kps; t++) {
            const size_t kp = kps[t];
            uint32_t *a = malloc((kp * (size_t)v->mr + 1) * 4), *b = malloc((kp * (size_t)v->nr + 1) * 4);
            for (size_t i = 0; i < kp * (size_t)v->mr; i++) {
                float x = chk_uniform(&r, -2, 2), y = chk_uniform(&r, -2, 2);
                const int kind = chk_randint(&r, 0, 9);
                if (kind == 0) x *= 1e-39f; /* a subnormal bf16 */
                if (kind == 1) y = -0.0f;
                a[i] = (uint32_t)gml_fp32_to_bf16(x) | (uint32_t)gml_fp32_to_bf16(y) << 16;
            }
            for (size_t i = 0; i < kp * (size_t)v->nr; i++) {
                float x = chk_uniform(&r, -2, 2), y = chk_uniform(&r, -2, 2);
                if (chk_randint(&r, 0, 9) == 0) y *= 1e-36f; /* products near the subnormals */
                b[i] = (uint32_t)gml_fp32_to_bf16(x) | (uint32_t)gml_fp32_to_bf16(y) << 16;
            }
            enum { LDC = 40 };
            float c0[16 * LDC], got[16 * LDC], want[16 * LDC];
            for (int i = 0; i < 16 * LDC; i++) c0[i] = chk_uniform(&r, -4, 4);
            for (int m = 1; m <= v->mr; m++)
                for (int n = 1; n <= v->nr; n++)
                    for (int acc = 0; acc < 2; acc++) {
                        memcpy(got, c0, sizeof got);
                        v->fn(kp, a, 0, b, got, LDC, m, n, acc);
                        for (int i = 0; i < 16; i++)
                            for (int j = 0; j < LDC; j++) {
                                float s = c0[i * LDC + j];
                                if (i < m && j < n) {
                                    float x[2 * 200], y[2 * 200];
                                    if (!acc) s = 0.0f;
                                    for (size_t p = 0; p < kp; p++) {
                                        x[2 * p] = gml_bf16_to_fp32((uint16_t)a[p * (size_t)v->mr + (size_t)i]);
                                        x[2 * p + 1] = gml_bf16_to_fp32((uint16_t)(a[p * (size_t)v->mr + (size_t)i] >> 16));
                                        y[2 * p] = gml_bf16_to_fp32((uint16_t)b[p * (size_t)v->nr + (size_t)j]);
                                        y[2 * p + 1] = gml_bf16_to_fp32((uint16_t)(b[p * (size_t)v->nr + (size_t)j] >> 16));
                                    }
                                    for (size_t p = 0; p < kp; p++) {
                                        s = dp_step(s, x[2 * p + 1], y[2 * p + 1]);
                                        s = dp_step(s, x[2 * p], y[2 * p]);
                                    }
                                }
                                want[i * LDC + j] = s;
                            }
                        if (!CHECK(memcmp(got, want, sizeof got) == 0,
                                   "%s: kp %zu, m %d, n %d, acc %d: not the emulated VDPBF16PS bits "
                                   "(or wrote outside its tile)", v->name, kp, m, n, acc))
                            m = v->mr + 1, n = v->nr + 1, acc = 2; /* one report per kp */
                    }
            /* rows in place (lda > 0, m = MR): the packed panel's bits */
            const size_t lda = kp + 3;
            uint32_t *ar = calloc((size_t)v->mr * lda + 1, 4);
            for (size_t p = 0; p < kp; p++)
                for (int i = 0; i < v->mr; i++) ar[(size_t)i * lda + p] = a[p * (size_t)v->mr + (size_t)i];
            for (int n = 1; n <= v->nr; n += 7)
                for (int acc = 0; acc < 2; acc++) {
                    memcpy(got, c0, sizeof got);
                    memcpy(want, c0, sizeof want);
                    v->fn(kp, a, 0, b, want, LDC, v->mr, n, acc);
                    v->fn(kp, ar, lda, b, got, LDC, v->mr, n, acc);
                    CHECK(memcmp(got, want, sizeof got) == 0, "%s: kp %zu, n %d, acc %d: rows in place "
                          "differ from the packed panel", v->name, kp, n, acc);
                }
            free(ar);
            free(a);
            free(b);
        }
    }
}

/* The CPU features against Linux's /proc/cpuinfo flags (which name them
 * alike), where it is there and on x86 (under qemu-user it is the host's);
 * none off x86; and what each implies. */
static void test_cpu_features(void) {
    chk_case("gml_cpu_has_feature");
    static const char *const names[] = {"avx512_bf16", "avx512_vnni", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8"};
    static char line[8192];
    const char *flags = NULL;
#if defined(__x86_64__) || defined(__i386__)
    FILE *f = fopen("/proc/cpuinfo", "r");
#else
    FILE *f = NULL;
    for (int i = 0; i < GML_CPU_FEATURE_COUNT; i++)
        CHECK(!gml_cpu_has_feature((gml_cpu_feature)i), "no x86 feature off x86: %s", names[i]);
#endif
    if (f) {
        while (!flags && fgets(line, sizeof line, f))
            if (strncmp(line, "flags", 5) == 0) flags = line;
        fclose(f);
    }
    for (int i = 0; i < GML_CPU_FEATURE_COUNT; i++) {
        const gml_cpu_feature ft = (gml_cpu_feature)i;
        CHECK(strcmp(gml_cpu_feature_name(ft), names[i]) == 0, "name %d: %s", i, gml_cpu_feature_name(ft));
        printf("cpu feature %-12s %s\n", names[i], gml_cpu_has_feature(ft) ? "yes" : "no");
        if (flags) { /* " name " or " name\n" among the flags */
            char word[32];
            snprintf(word, sizeof word, " %s", names[i]);
            const char *at = strstr(flags, word);
            while (at && at[strlen(word)] != ' ' && at[strlen(word)] != '\n') at = strstr(at + 1, word);
            CHECK((at != NULL) == gml_cpu_has_feature(ft), "%s: cpuid says %d, /proc/cpuinfo %d", names[i],
                  gml_cpu_has_feature(ft), at != NULL);
        }
    }
    CHECK(!gml_cpu_has_feature(GML_CPU_AVX512_BF16) || gml_cpu_has(GML_ISA_AVX512), "avx512_bf16 implies avx512");
    CHECK(!gml_cpu_has_feature(GML_CPU_AMX_BF16) || gml_cpu_has_feature(GML_CPU_AMX_TILE), "amx_bf16 implies amx_tile");
    CHECK(strcmp(gml_cpu_feature_name(GML_CPU_FEATURE_COUNT), "?") == 0, "an unknown feature is ?");
}

int main(int argc, char **argv) {
    amx_emulated = argc > 1 && strcmp(argv[1], "--amx-emulated") == 0;
    if (amx_emulated) { /* the products only, their AVX-512 runs on the emulated tiles */
        const char *env = getenv("GGMLITE_AMX");
        if (!CHECK(env && strcmp(env, "1") == 0, "--amx-emulated runs with GGMLITE_AMX=1 (tests/CMakeLists.txt)"))
            return chk_summary();
        if (!gml_cpu_has(GML_ISA_AVX512)) {
            printf("skipped: no AVX-512 here, the only ISA at which AMX is picked\n");
            return chk_summary();
        }
        gml_amx_bf16_set_kernel(&AMX_EMULATED);
    } else {
        test_cpu_features();
        test_ukernels();
    }
    gml_isa isas[8];
    const int n_isas = fast_isas(isas);
    printf("bf16 orders: reference kernels %s", ORDER_NAME[order_of(GML_ISA_REFERENCE)]);
    for (int i = 0; i < n_isas; i++)
        printf(", %s %s%s", gml_isa_name(isas[i]), ORDER_NAME[order_of(isas[i])],
               order_of(isas[i]) == ORDER_AMX ? (amx_emulated ? " on emulated tiles" : " on the CPU's tiles") : "");
    printf("\n");
    if (!gml_cpu_has(GML_ISA_AVX512))
        printf("note: no AVX-512 here: the pairs order (VDPBF16PS) is not run\n");
    else if (!gml_cpu_has_feature(GML_CPU_AVX512_BF16) && order_of(GML_ISA_AVX512) != ORDER_AMX)
        printf("note: AVX-512 without AVX512_BF16 here: its kernels run the chain order; the "
               "pairs order (VDPBF16PS) is not run\n");
    if (!amx_emulated) {
        test_api();
        test_graph_text();
    }
    test_shapes();
    test_bf16_weights();
    test_blocks();
    test_batched();
    test_subnormal();
    test_nonfinite();
    return chk_summary();
}
