/* The AMX bf16 GEMM (ops/gemm_amx.h), on every machine, through a C
 * emulation of the tile instructions: ops/gemm_amx_bf16.c, the kernel the
 * library compiles with -mamx-tile -mamx-bf16, is compiled into this test
 * against tests/amx_emul.h (which faults, as the CPU would, on a missing
 * tile configuration, a tile used unconfigured or instruction shapes that
 * do not fit). What this tests is the kernel's logic (tile configuration
 * per thread, strides, the packed layouts, edges, K blocks, tails, the
 * thread split) and TDPBF16PS's order as the Intel SDM defines it; NOT
 * that an AMX CPU computes what the SDM says (no AMX CPU here).
 *
 * Against a reference written here from the definition: a and b rounded to
 * bf16 (an RNE written here), K padded with 0 to a multiple of 32, per step
 * of 32 k an even and an odd fma chain from +0, summed, added to c, every
 * operation with DAZ and FTZ. Compared bitwise, and within the error bound
 * of docs/numerics.md against the double product of the rounded operands.
 * Shapes with tails (M, N, K odd, not multiples of 32), several K blocks
 * and A blocks, batches with their own and a shared B, a strided and a
 * transposed A, B of f32, f16 and bf16 as W^T and as [K, N], C with a row
 * stride past N (whose padding must stay untouched), K = 0, groups of at
 * most 16 rows (decoding's 1 to 4, M's tails), which must take the 16 x 32
 * kernel (the tile work is counted, and the node's kernel note must name
 * the kernels that ran); every result bitwise the same at 1, 2,
 * 3, 4 and 7 threads; B kept packed once and reused while valid.
 *
 * The opt-in (test_amx_bf16_optin runs this with --opt-in and GGMLITE_AMX=1):
 * without GGMLITE_AMX=1 no ISA picks AMX; with it, AMX is picked only at
 * AVX-512 on a CPU with AMX-BF16, and a bf16 matmul then runs it (on such a
 * CPU this checks the real instructions against the reference, bitwise). */
#define _POSIX_C_SOURCE 200809L /* fileno, dup: amx_check.h */
#include "check.h"
#include "../ops/gemm_amx.h"
#include "amx_check.h"
#include "kernel_check.h"

#include <float.h>
#include <stdatomic.h>

/* The emulated tile kernels, counting the rows of A times the steps each
 * call multiplies (32 a step for 32 x 32, 16 for 16 x 32): the TDPBF16PS
 * work a product does, so that a group of at most 16 rows is seen to take
 * the 16-row kernel. */
static _Atomic int64_t row_steps;

static void tile32(size_t kq, const uint32_t *a, const uint32_t *b, float *c, size_t ldc, bool acc) {
    atomic_fetch_add(&row_steps, 32 * (int64_t)kq);
    gml_bf16_gemm_ukernel__amxemul_32x32(kq, a, b, c, ldc, acc);
}
static void tile16(size_t kq, const uint32_t *a, const uint32_t *b, float *c, size_t ldc, bool acc) {
    atomic_fetch_add(&row_steps, 16 * (int64_t)kq);
    gml_bf16_gemm_ukernel__amxemul_16x32(kq, a, b, c, ldc, acc);
}

static const gml_amx_bf16_kernel EMUL = {
    gml_amx_bf16_configure__amxemul, tile32, tile16, gml_amx_bf16_release__amxemul,
    "gml_bf16_gemm_ukernel__amxemul_32x32 (tiles)", "gml_bf16_gemm_ukernel__amxemul_16x32 (tiles)",
    "gml_bf16_gemm_ukernel__amxemul_32x32 and __amxemul_16x32 (tiles)",
};

/* ---- the reference ------------------------------------------------------------- */

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

/* f32 -> bf16 -> f32, round to nearest even (no NaN in these inputs). */
static float to_bf16(float x) {
    const uint32_t u = bits_of(x);
    return float_of((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}

static float ftz(float x) { return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x; }

/* One element: k of a at a[k * as], of b at b[k * bs], already bf16. */
static float amx_dot(int64_t K, const float *a, int64_t as, const float *b, int64_t bs) {
    float c = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += 32) {
        float even = 0.0f, odd = 0.0f;
        for (int64_t k = k0; k < k0 + 32; k += 2) {
            const float ae = k < K ? a[k * as] : 0.0f, be = k < K ? b[k * bs] : 0.0f;
            const float ao = k + 1 < K ? a[(k + 1) * as] : 0.0f, bo = k + 1 < K ? b[(k + 1) * bs] : 0.0f;
            even = ftz(fmaf(ftz(ae), ftz(be), even));
            odd = ftz(fmaf(ftz(ao), ftz(bo), odd));
        }
        c = ftz(c + ftz(even + odd));
    }
    return c;
}

/* Orders TDPBF16PS could follow, for the hardware check to say which one
 * the CPU's bits fit where they differ from the SDM's (docs/amx.md); a
 * of k at a[k], b at b[k * bs], already bf16; DAZ and FTZ throughout. */
enum { ORD_SDM, ORD_SDM_ROUNDED, ORD_GUIDE, ORD_GUIDE_ROUNDED, ORD_PAIR, N_ORD };
static const char *const ORD_NAME[N_ORD] = {
    "the SDM's (per step of 32 an even and an odd fma chain from +0, then c + (e + o))",
    "the SDM's with each product rounded (and flushed) before its add",
    "the Intrinsics Guide's (each product fma'd into c in k order, c carried across steps)",
    "the Intrinsics Guide's with each product rounded (and flushed) before its add",
    "each pair's two products added to c at once, one rounding per pair",
};

static float order_dot(int ord, int64_t K, const float *a, const float *b, int64_t bs) {
    if (ord == ORD_SDM) return amx_dot(K, a, 1, b, bs);
    float c = 0.0f, e = 0.0f, o = 0.0f;
    for (int64_t k = 0; k < (K + 31) / 32 * 32; k += 2) {
        const float a0 = k < K ? ftz(a[k]) : 0.0f, b0 = k < K ? ftz(b[k * bs]) : 0.0f;
        const float a1 = k + 1 < K ? ftz(a[k + 1]) : 0.0f, b1 = k + 1 < K ? ftz(b[(k + 1) * bs]) : 0.0f;
        if (ord == ORD_SDM_ROUNDED) {
            e = ftz(e + ftz(a0 * b0));
            o = ftz(o + ftz(a1 * b1));
            if ((k + 2) % 32 == 0) c = ftz(c + ftz(e + o)), e = o = 0.0f;
        } else if (ord == ORD_GUIDE) {
            c = ftz(fmaf(a1, b1, ftz(fmaf(a0, b0, c))));
        } else if (ord == ORD_GUIDE_ROUNDED) {
            c = ftz(ftz(c + ftz(a0 * b0)) + ftz(a1 * b1));
        } else { /* bf16 products are exact in double, their sum nearly always */
            c = ftz((float)((double)c + ((double)a0 * b0 + (double)a1 * b1)));
        }
    }
    return c;
}

/* How many of c[M][N] (row stride ldc) = a[M][K] b[K][N] fit each order;
 * printed when print is set. */
static void count_orders(int64_t M, int64_t N, int64_t K, const float *a, const float *b, const float *c,
                         int64_t ldc, int64_t fit[N_ORD], bool print) {
    for (int ord = 0; ord < N_ORD; ord++) {
        fit[ord] = 0;
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++)
                fit[ord] += bits_of(c[m * ldc + n]) == bits_of(order_dot(ord, K, a + m * K, b + n, N));
        if (print)
            printf("  %" PRId64 " of %" PRId64 " outputs have the bits of %s\n", fit[ord], M * N, ORD_NAME[ord]);
    }
}

/* ---- running the product ---------------------------------------------------------- */

static struct {
    gml_gemm_desc d;
    gml_kept *kept;
} run_cfg;

static const char *noted; /* the kernel note the product records */

static void run_kernel(const gml_compute_params *p, gml_tensor *dst) {
    GML_UNUSED(dst);
    gml_compute_params q = *p;
    q.note = &noted;
    gml_amx_bf16_gemm(&q, &run_cfg.d, &EMUL, run_cfg.kept);
}

/* The note a product of d should record: the kernels its groups of 32
 * rows take (as want_row_steps counts them). */
static const char *want_note(const gml_gemm_desc *d) {
    bool k32 = false, k16 = false;
    for (int64_t m0 = 0; m0 < d->M; m0 += 32) *(d->M - m0 > 16 ? &k32 : &k16) = true;
    return k32 && k16 ? EMUL.name_both : k16 ? EMUL.name16 : EMUL.name;
}

/* The rows x steps a product of d should multiply: per batch, 32-column
 * panel and step, 32 for a group of 17 to 32 rows of A, 16 for one of 1 to
 * 16. */
static int64_t want_row_steps(const gml_gemm_desc *d) {
    int64_t rows = 0;
    for (int64_t m0 = 0; m0 < d->M; m0 += 32) rows += d->M - m0 > 16 ? 32 : 16;
    return d->nb0 * d->nb1 * ((d->N + 31) / 32) * ((d->K + 31) / 32) * rows;
}

static bool run(const gml_gemm_desc *d, gml_kept *kept, int nth) {
    atomic_store(&row_steps, 0);
    noted = NULL;
    run_cfg.d = *d;
    run_cfg.kept = kept;
    if (!kc_run(run_kernel, gml_amx_bf16_work_size(d, nth), nth)) return false;
    if (d->M > 0 && d->N > 0)
        CHECK(noted && strcmp(noted, want_note(d)) == 0, "%d threads, M = %" PRId64 ": the note says %s, want %s", nth,
              d->M, noted ? noted : "nothing", want_note(d));
    return CHECK(atomic_load(&row_steps) == want_row_steps(d),
                 "%d threads: the tiles multiplied %" PRId64 " rows x steps, want %" PRId64
                 " (16-row groups on the 16 x 32 kernel)", nth, (int64_t)atomic_load(&row_steps),
                 want_row_steps(d));
}

/* ---- shapes ----------------------------------------------------------------------- */

typedef struct shape {
    int64_t nb0, nb1, M, N, K;
    int a_layout;   /* 0 rows contiguous, 1 every other float, 2 transposed [K, M] */
    int b_layout;   /* 0 W^T (W [N, K], k contiguous), 1 [K, N] */
    gml_type b_type;
    bool b_shared;
} shape;

/* An input value: mostly spread over 2^-8 .. 2^8 (so that the order of the
 * sums shows), some zeros, some bf16 subnormals (taken as 0) and some
 * products that fall below the normal range (flushed). */
static float value(chk_rng *r) {
    const int kind = chk_randint(r, 0, 39);
    const float u = chk_uniform(r, -1.0f, 1.0f);
    if (kind == 0) return 0.0f;
    if (kind == 1) return u * 0x1p-128f;        /* subnormal: read as 0 */
    if (kind == 2) return u * 0x1p-70f;         /* its products fall under 2^-126 */
    return u * ldexpf(1.0f, chk_randint(r, -8, 8));
}

static void store(gml_type t, char *p, float x) {
    if (t == GML_F32) {
        memcpy(p, &x, 4);
    } else {
        const uint16_t h = t == GML_F16 ? gml_fp32_to_fp16(x) : gml_fp32_to_bf16(x);
        memcpy(p, &h, 2);
    }
}
static float load(gml_type t, const char *p) {
    uint16_t h;
    float x;
    if (t == GML_F32) {
        memcpy(&x, p, 4);
        return x;
    }
    memcpy(&h, p, 2);
    return t == GML_F16 ? gml_fp16_to_fp32(h) : gml_bf16_to_fp32(h);
}

typedef struct operands {
    float *a;   /* as laid out for the desc */
    char *b;
    float *c;
    float *ar, *br; /* rounded to bf16, dense: ar [bat][M][K], br [bat][K][N] */
    gml_gemm_desc d;
    int64_t ldc;
} operands;

static void fill_b(const shape *s, operands *o, chk_rng *r) {
    const int64_t es = s->b_type == GML_F32 ? 4 : 2, nbat = s->nb0 * s->nb1, nbb = s->b_shared ? 1 : nbat;
    for (int64_t bt = 0; bt < nbb; bt++)
        for (int64_t k = 0; k < s->K; k++)
            for (int64_t n = 0; n < s->N; n++) {
                char *p = o->b + bt * s->N * s->K * es +
                          (s->b_layout == 0 ? n * s->K + k : k * s->N + n) * es;
                store(s->b_type, p, value(r));
            }
    for (int64_t bi = 0; bi < nbat; bi++)
        for (int64_t k = 0; k < s->K; k++)
            for (int64_t n = 0; n < s->N; n++) {
                const char *p = o->b + (s->b_shared ? 0 : bi) * s->N * s->K * es +
                                (s->b_layout == 0 ? n * s->K + k : k * s->N + n) * es;
                o->br[(bi * s->K + k) * s->N + n] = to_bf16(load(s->b_type, p));
            }
}

static operands make(const shape *s, chk_rng *r) {
    operands o = {0};
    const int64_t nbat = s->nb0 * s->nb1, es = s->b_type == GML_F32 ? 4 : 2;
    const int64_t a_sz = 2 * s->M * s->K + 1; /* floats per batch of a, room for every layout */
    o.ldc = s->N + 3;
    o.a = calloc((size_t)(nbat * a_sz), 4);
    o.b = calloc((size_t)((s->b_shared ? 1 : nbat) * s->N * s->K * es + 4), 1);
    o.c = malloc((size_t)(nbat * s->M * o.ldc + 1) * 4);
    o.ar = calloc((size_t)(nbat * s->M * s->K + 1), 4);
    o.br = calloc((size_t)(nbat * s->K * s->N + 1), 4);
    for (int64_t i = 0; i < nbat * s->M * o.ldc; i++) o.c[i] = NAN;
    const int64_t a_rs = s->a_layout == 0 ? s->K : s->a_layout == 1 ? 2 * s->K : 1;
    const int64_t a_cs = s->a_layout == 0 ? 1 : s->a_layout == 1 ? 2 : s->M;
    for (int64_t bi = 0; bi < nbat; bi++)
        for (int64_t m = 0; m < s->M; m++)
            for (int64_t k = 0; k < s->K; k++) {
                const float x = value(r);
                o.a[bi * a_sz + m * a_rs + k * a_cs] = x;
                o.ar[(bi * s->M + m) * s->K + k] = to_bf16(x);
            }
    fill_b(s, &o, r);
    o.d = (gml_gemm_desc){
        .M = s->M, .N = s->N, .K = s->K, .nb0 = s->nb0, .nb1 = s->nb1,
        .a = (const char *)o.a, .a_rs = a_rs * 4, .a_cs = a_cs * 4,
        .a_bs = {s->nb1 * a_sz * 4, a_sz * 4},
        .b = o.b, .b_rs = (s->b_layout == 0 ? 1 : s->N) * es, .b_cs = (s->b_layout == 0 ? s->K : 1) * es,
        .b_bs = {s->b_shared ? 0 : s->nb1 * s->N * s->K * es, s->b_shared ? 0 : s->N * s->K * es},
        .c = (char *)o.c, .c_rs = o.ldc * 4, .c_bs = {s->nb1 * s->M * o.ldc * 4, s->M * o.ldc * 4},
        .b_type = s->b_type, .isa = gml_get_isa(),
    };
    return o;
}

static void release(operands *o) {
    free(o->a);
    free(o->b);
    free(o->c);
    free(o->ar);
    free(o->br);
}

/* C against the reference, bitwise; C's padding columns still NaN. */
static bool check_c(const shape *s, const operands *o, const char *what) {
    bool ok = true;
    for (int64_t bi = 0; bi < s->nb0 * s->nb1; bi++)
        for (int64_t m = 0; m < s->M; m++)
            for (int64_t n = 0; n < o->ldc; n++) {
                const float got = o->c[(bi * s->M + m) * o->ldc + n];
                if (n >= s->N) {
                    if (!isnan(got))
                        ok = CHECK(false, "%s: c[%" PRId64 "][%" PRId64 "][%" PRId64 "] past N written (%g)", what,
                                   bi, m, n, got);
                    continue;
                }
                const float want = amx_dot(s->K, o->ar + (bi * s->M + m) * s->K, 1, o->br + bi * s->K * s->N + n, s->N);
                if (bits_of(got) != bits_of(want))
                    ok = CHECK(false, "%s: c[%" PRId64 "][%" PRId64 "][%" PRId64 "] = %.9g, want %.9g", what, bi, m, n,
                               got, want);
                if (!ok) return false;
            }
    return ok;
}

/* Within the error bound against the double product of the rounded
 * operands: each product passes through at most 16 fmas, the pair sum and
 * ceil(K / 32) additions to c; flushes cost at most 2^-126 each. */
static void check_bound(const shape *s, const operands *o) {
    const int64_t steps = (s->K + 31) / 32, depth = 18 + steps; /* gamma_(17 + steps) <= (18 + steps) u */
    for (int64_t bi = 0; bi < s->nb0 * s->nb1; bi++)
        for (int64_t m = 0; m < s->M; m++)
            for (int64_t n = 0; n < s->N; n++) {
                double exact = 0.0, mag = 0.0;
                for (int64_t k = 0; k < s->K; k++) {
                    const double x = ftz(o->ar[(bi * s->M + m) * s->K + k]), y = ftz(o->br[(bi * s->K + k) * s->N + n]);
                    exact += x * y;
                    mag += fabs(x * y);
                }
                const double bound = (double)depth * 0x1p-24 * mag + (double)(2 * s->K + 2 * steps) * 0x1p-126;
                const double got = o->c[(bi * s->M + m) * o->ldc + n];
                if (!CHECK(fabs(got - exact) <= bound, "c[%" PRId64 "][%" PRId64 "][%" PRId64 "] = %.9g, exact %.9g, "
                           "bound %.3g", bi, m, n, got, exact, bound))
                    return;
            }
}

static void test_shape(const shape *s, uint64_t seed) {
    static const char *const tn[] = {[GML_F32] = "f32", [GML_F16] = "f16", [GML_BF16] = "bf16"};
    chk_case("amx bf16 gemm [%" PRId64 "x%" PRId64 "] %" PRId64 "x%" PRId64 "x%" PRId64 " a%d b %s %s%s", s->nb0,
             s->nb1, s->M, s->N, s->K, s->a_layout, s->b_layout ? "[K,N]" : "W^T", tn[s->b_type],
             s->b_shared ? " shared" : "");
    chk_rng r = chk_seed(seed);
    operands o = make(s, &r);
    int n_threads;
    const int *threads = chk_threads(&n_threads);
    for (int t = 0; t < n_threads; t++) {
        char what[32];
        snprintf(what, sizeof what, "%d threads", threads[t]);
        for (int64_t i = 0; i < s->nb0 * s->nb1 * s->M * o.ldc; i++) o.c[i] = NAN;
        if (!run(&o.d, NULL, threads[t]) || !check_c(s, &o, what)) break;
        if (t == 0) check_bound(s, &o);
    }

    /* B kept: packed by the first compute, reused by the next while valid
     * (B's values changed behind its back do not show), repacked once not */
    const size_t kb = gml_amx_bf16_packed_size(&o.d);
    gml_kept kept = {.data = aligned_alloc(64, gml_align_up(kb + 1, 64)), .size = kb};
    if (run(&o.d, &kept, 3) && check_c(s, &o, "kept, first")) {
        CHECK(kept.valid, "the first compute with kept marks it valid");
        float *old = o.br;
        o.br = calloc((size_t)(s->nb0 * s->nb1 * s->K * s->N + 1), 4);
        fill_b(s, &o, &r);
        float *fresh = o.br;
        o.br = old;
        if (run(&o.d, &kept, 2) && check_c(s, &o, "kept, reused"))
            CHECK(kept.valid, "still valid");
        o.br = fresh;
        free(old);
        kept.valid = false;
        if (run(&o.d, &kept, 4)) check_c(s, &o, "kept, repacked");
    }
    free(kept.data);
    release(&o);
}

/* The order, on numbers where it shows: k = 0..3 of a all 1, of b
 * 2^24, 1, -2^24, 1. TDPBF16PS's even chain gives 2^24 - 2^24 = 0, the odd
 * one 1 + 1 = 2: c = 2; one chain in k order (2^24 + 1 rounds to 2^24)
 * gives 1, VDPBF16PS's pairs order 2^24 + 1 -> 2^24, ... gives 1 too. */
static void test_order(void) {
    chk_case("TDPBF16PS's order on 2^24, 1, -2^24, 1");
    float a[4] = {1, 1, 1, 1}, b[4] = {0x1p24f, 1, -0x1p24f, 1}, c[2] = {NAN, NAN};
    const gml_gemm_desc d = {.M = 1, .N = 1, .K = 4, .nb0 = 1, .nb1 = 1, .a = (const char *)a, .a_rs = 16,
                             .a_cs = 4, .b = (const char *)b, .b_rs = 4, .b_cs = 16, .c = (char *)c, .c_rs = 4,
                             .b_type = GML_F32, .isa = gml_get_isa()};
    CHECK(amx_dot(4, a, 1, b, 1) == 2.0f, "the reference: %g", amx_dot(4, a, 1, b, 1));
    if (run(&d, NULL, 1)) CHECK(c[0] == 2.0f && isnan(c[1]), "c = %g (want 2), past it %g (want NaN)", c[0], c[1]);
}

/* The orders the hardware check reports (count_orders) tell each other
 * apart: on the emulated tiles every output has the SDM's bits, and the
 * Intrinsics Guide's order and one rounding per pair miss some. */
static void test_orders_told_apart(void) {
    chk_case("the candidate orders of the hardware check");
    const shape s = {1, 1, 20, 24, 200, 0, 1, GML_F32, false};
    chk_rng r = chk_seed(11);
    operands o = make(&s, &r);
    int64_t fit[N_ORD];
    if (run(&o.d, NULL, 2)) {
        count_orders(s.M, s.N, s.K, o.ar, o.br, o.c, o.ldc, fit, false);
        CHECK(fit[ORD_SDM] == s.M * s.N, "the SDM's order fits %" PRId64 " of %" PRId64, fit[ORD_SDM], s.M * s.N);
        CHECK(fit[ORD_GUIDE] < s.M * s.N && fit[ORD_GUIDE_ROUNDED] < s.M * s.N && fit[ORD_PAIR] < s.M * s.N,
              "an order other than the SDM's fits every output: %" PRId64 ", %" PRId64 ", %" PRId64, fit[ORD_GUIDE],
              fit[ORD_GUIDE_ROUNDED], fit[ORD_PAIR]);
    }
    release(&o);
}

/* Without GGMLITE_AMX=1 nothing picks AMX; with it, only AVX-512 on a CPU
 * with AMX-BF16 (and Linux's permission), and a bf16 matmul then runs it;
 * where it does not, stderr says once why, naming bf16 matmuls. */
static const void *pick(gml_isa isa) { return gml_amx_bf16_pick(isa); }

static void test_opt_in(bool opted) {
    chk_case("GGMLITE_AMX%s", opted ? "=1" : " unset");
    if (!opted && !amx_check_default_env()) return;
    for (int isa = GML_ISA_REFERENCE; isa <= GML_ISA_NEON; isa++)
        if (isa != GML_ISA_AVX512 || !opted)
            CHECK(gml_amx_bf16_pick((gml_isa)isa) == NULL, "AMX picked at %s", gml_isa_name((gml_isa)isa));
    if (!opted) return;
    amx_check_refusal(pick, "bf16 matmuls run");
    const gml_amx_bf16_kernel *k = gml_amx_bf16_pick(GML_ISA_AVX512);
    amx_check_real(k != NULL, GML_CPU_AMX_BF16, "AMX-BF16", "the real AMX kernel");
    /* a bf16 matmul at AVX-512 through a graph: the AMX order where picked */
    if (!gml_cpu_has(GML_ISA_AVX512)) return;
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 22});
    enum { M = 37, N = 45, K = 83 };
    gml_tensor *a = gml_new_tensor_2d(ctx, GML_F32, M, K), *w = gml_new_tensor_2d(ctx, GML_BF16, N, K);
    chk_rng r = chk_seed(7);
    float ar[M * K], wr[N * K];
    for (int i = 0; i < M * K; i++) ((float *)a->data)[i] = value(&r), ar[i] = to_bf16(((float *)a->data)[i]);
    for (int i = 0; i < N * K; i++) {
        const uint16_t h = gml_fp32_to_bf16(value(&r));
        memcpy((char *)w->data + 2 * i, &h, 2);
        wr[i] = gml_bf16_to_fp32(h);
    }
    gml_tensor *y = gml_linear(ctx, a, w, NULL);
    CHECK(gml_set_compute(ctx, y, GML_COMPUTE_BF16) == GML_OK, "bf16: %s", gml_last_error(ctx));
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    const gml_isa was = gml_get_isa();
    gml_set_isa(GML_ISA_AVX512);
    for (int nth = 1; g && nth <= 3; nth += 2) {
        if (!CHECK(gml_graph_compute(g, nth) == GML_OK, "compute: %s", gml_graph_error(g))) break;
        const char *ran = gml_graph_node_kernel(g, -1);
        CHECK(ran && (strstr(ran, "amx") != NULL) == (k != NULL), "%d threads ran %s", nth, ran ? ran : "nothing");
        if (!k) continue;
        bool same = true;
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                const float got = ((float *)y->data)[m * N + n], want = amx_dot(K, ar + m * K, 1, wr + n * K, 1);
                if (!CHECK(bits_of(got) == bits_of(want), "real AMX, %d threads: y[%d][%d] = %.9g, want %.9g", nth, m,
                           n, got, want))
                    m = M, n = N, same = false;
            }
        if (!same && nth == 1) { /* what the silicon does instead (docs/amx.md, "Verifying") */
            float wt[K * N]; /* W^T: [K][N] */
            for (int n = 0; n < N; n++)
                for (int kk = 0; kk < K; kk++) wt[kk * N + n] = wr[n * K + kk];
            int64_t fit[N_ORD];
            printf("the real AMX kernel's bits differ from the SDM's order; which order they fit:\n");
            count_orders(M, N, K, ar, wt, y->data, N, fit, true);
        }
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
    test_order();
    test_orders_told_apart();
    const shape shapes[] = {
        {1, 1, 1, 1, 1, 0, 0, GML_F32, false},
        {1, 1, 5, 7, 3, 0, 0, GML_BF16, false},
        {1, 1, 32, 32, 32, 0, 0, GML_F32, false},
        {1, 1, 31, 33, 17, 1, 1, GML_F32, false},
        {1, 1, 33, 65, 64, 2, 0, GML_F16, false},
        {1, 1, 64, 96, 95, 0, 1, GML_BF16, false},
        {1, 1, 70, 40, 1100, 0, 0, GML_BF16, false}, /* three K blocks of 256 pairs */
        {1, 1, 300, 50, 40, 1, 0, GML_F32, false},   /* two A blocks of 256 rows */
        {1, 1, 400, 200, 200, 0, 0, GML_BF16, false}, /* C split among threads in M and N */
        {2, 3, 9, 20, 45, 0, 1, GML_F16, false},
        {2, 1, 40, 33, 70, 2, 0, GML_BF16, true},
        {1, 1, 3, 5, 0, 0, 0, GML_F32, false},       /* K = 0: zeros */
        /* groups of at most 16 rows (the 16 x 32 kernel): decoding's rows
         * against a bf16 W^T over several K blocks, 16 and 17 rows, a tail
         * of 16 after a full group, a shared weight in batches */
        {1, 1, 4, 70, 1030, 0, 0, GML_BF16, false},
        {1, 1, 16, 33, 64, 1, 0, GML_F32, false},
        {1, 1, 17, 32, 40, 0, 1, GML_F16, false},
        {1, 1, 48, 40, 600, 2, 0, GML_BF16, false},
        {3, 1, 2, 45, 70, 0, 0, GML_BF16, true},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) test_shape(&shapes[i], 100 + i);
    return chk_summary();
}
