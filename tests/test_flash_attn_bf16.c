/* flash_attn with compute bf16 (gml_set_compute; docs/numerics.md, "bf16
 * compute", flash attention).
 *
 * The arithmetic: q * scale, k and v rounded to bf16 (an RNE written here,
 * not the library's), s = q~ . k~ summed in f32, the softmax statistics in
 * f32 with each weight p = exp(s - m) rounded to bf16 before it joins the
 * sum and weighs v~, out = o / l. Checked three ways, under the reference
 * kernels and every ISA the CPU has (the VDPBF16PS variants where it has
 * AVX512_BF16, the f32 variants on rounded operands elsewhere), each
 * result bitwise the same at 1, 2, 3, 4 and 7 threads (CHECK_RUN):
 *   - against a double-precision attention of the rounded operands, within
 *     the bound of docs/numerics.md computed per output from that
 *     reference (2^-8 sum_j w_j |v~_j| and the f32 terms), on odd shapes
 *     (d_k, d_v, Tq, Tk odd; several key blocks), GQA and MQA, f32, f16
 *     and bf16 K/V, non-contiguous q, k, v, and every option: masks (with
 *     rows fully masked and NaN in hidden V rows), causal both ways,
 *     windows, ALiBi, softcap, sinks, valid lengths [B] and [B, Tq],
 *     positions; few rows (the shapes f32 decodes with its own kernels);
 *   - exactly where the rounding decides: a row that sees one key is
 *     bf16(v) bitwise; rows seeing a few keys of one key block against the
 *     definition in double with each weight rounded as the kernel rounds it
 *     (a weight within 2^-17 of a rounding boundary is left out), which the
 *     f32 arithmetic, or bf16 missing on any operand or weight, misses by
 *     hundreds of times the tolerance;
 *   - the API: gml_set_compute / gml_get_compute on flash_attn, the
 *     context default reaching gml_flash_attn_ext (not flash_attn_lse), the
 *     refusals by name (int8; flash_attn_lse; gml_grad through a bf16
 *     flash_attn), graph files writing compute=bf16.
 *
 * Built once more as test_flash_attn_amx (GML_FLASH_AMX_TEST, with
 * ops/flash_attn_amx_tiles.c against the tile emulation tests/amx_emul.h):
 * the same bound and exact cases at AVX-512 with the AMX variant
 * (ops/flash_attn_amx.h; its order's bound is the one above, docs/numerics.md
 * "flash_attn on AMX") on the emulated tiles, which fault as the CPU would on
 * a missing configuration or shapes that do not fit; every case with more
 * than 16 query rows of a kv head must run it, the others the VDPBF16PS x16
 * variant. Skipped (77) where the CPU lacks avx512_bf16 (the AMX variant's
 * softmax is that object's). With --opt-in and GGMLITE_AMX=1
 * (test_flash_attn_amx_optin): no emulation; where the CPU has AMX the
 * real tiles must run those cases, elsewhere the VDPBF16PS ones (GGMLITE_AMX=1
 * changes nothing), and it says which. */
#define _POSIX_C_SOURCE 200809L /* mkstemp */
#include "check.h"
#include "../ops/flash_attn.h" /* gml_flash_attn_lse */
#ifdef GML_FLASH_AMX_TEST
#include "../ops/flash_attn_amx.h"
#include "amx_check.h"

static const gml_flash_amx_kernel EMUL = {
    gml_flash_amx_configure__amxemul, gml_flash_amx_tile__amxemul, gml_flash_amx_release__amxemul,
    "gml_bf16_flash_ukernel__avx512bf16amx_x32 (compute bf16, AMX tiles emulated)",
};
#endif

#include <ggmlite/io.h>

#include <float.h>
#include <inttypes.h>
#include <unistd.h>

/* ---- rounding, written from the definition -------------------------------- */

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
/* f32 -> bf16 -> f32: nearest, ties to even; a NaN stays a NaN */
static float rbf16(float x) {
    uint32_t u = bits_of(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return float_of((u | 0x00400000u) & 0xffff0000u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return float_of(u & 0xffff0000u);
}
/* x (double, > 0) rounded to bf16, and how far it is from a rounding
 * boundary relative to itself (a midpoint between two bf16 values) */
static double rbf16_d(double x, double *margin) {
    int e;
    frexp(x, &e); /* x = f 2^e, f in [0.5, 1): bf16 spacing 2^(e - 8) */
    const double ulp = ldexp(1.0, e - 8);
    const double lo = floor(x / ulp) * ulp, mid = lo + ulp / 2;
    *margin = fabs(x - mid) / x;
    if (x < mid) return lo;
    if (x > mid) return lo + ulp;
    return fmod(lo / ulp, 2.0) == 0 ? lo : lo + ulp;
}

/* ---- a case: shapes, options, inputs ------------------------------------- */

typedef struct fa_case {
    int64_t B, H, G, Tq, Tk, dk, dv;
    gml_type kv_type;
    chk_layout lq, lk, lv;
    int causal;                   /* gml_causal */
    int64_t window;
    float softcap, alibi;
    bool mask, sinks, lens, lens2d, positions;
    bool nan_hidden_v;            /* NaN in V rows only masked keys have */
    float qrange;                 /* q uniform in [-qrange, qrange] */
    uint64_t seed;
} fa_case;

typedef struct fa_run {
    const fa_case *c;
    gml_tensor *y;
    double *want, *bound;  /* [B, H, Tq, dv] */
    double worst;          /* max |got - want| / bound over the runs */
    int64_t n;
} fa_run;

/* ggml's ALiBi slopes (an independent writing of them) */
static double alibi_slope(double max_bias, int64_t h, int64_t H) {
    int64_t n2 = 1;
    while (n2 * 2 <= H) n2 *= 2;
    const double m0 = pow(2.0, -max_bias / (double)n2), m1 = pow(2.0, -max_bias / 2.0 / (double)n2);
    return h < n2 ? pow(m0, (double)(h + 1)) : pow(m1, (double)(2 * (h - n2) + 1));
}

static void verify_bound(void *user) {
    fa_run *r = user;
    float *got = malloc((size_t)r->n * sizeof *got);
    chk_read(r->y, got);
    long bad = 0;
    int64_t first = -1;
    for (int64_t e = 0; e < r->n; e++) {
        const double d = fabs((double)got[e] - r->want[e]);
        const bool ok = isfinite(got[e]) && d <= r->bound[e];
        if (!ok && first < 0) first = e;
        bad += !ok;
        if (isfinite(got[e]) && r->bound[e] > 0) r->worst = fmax(r->worst, d / r->bound[e]);
    }
    CHECK(bad == 0, "%ld outputs outside the bound; first [%" PRId64 "]: got %.9g, want %.9g, bound %.3g",
          bad, first, first >= 0 ? (double)got[first] : 0.0, first >= 0 ? r->want[first] : 0.0,
          first >= 0 ? r->bound[first] : 0.0);
    free(got);
}

/* The double reference of the rounded operands and the bound of
 * docs/numerics.md for each output. */
static void reference(const fa_case *c, const float *q, const float *k, const float *v,
                      const float *mask, const float *sinks, const int32_t *lens,
                      const int32_t *pos, float scale, double *want, double *bound) {
    const double u = 0x1p-24;
    const int64_t r = c->H / c->G;
    double *s = malloc((size_t)c->Tk * sizeof *s), *sab = malloc((size_t)c->Tk * sizeof *sab);
    bool *seen = malloc((size_t)c->Tk);
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < c->Tq; i++) {
                const int64_t g = h / r;
                const float *qi = q + ((b * c->H + h) * c->Tq + i) * c->dk;
                double *w = want + ((b * c->H + h) * c->Tq + i) * c->dv;
                double *bd = bound + ((b * c->H + h) * c->Tq + i) * c->dv;
                const int64_t ip = c->positions                      ? pos[b * c->Tq + i]
                                   : c->causal == GML_CAUSAL_TOP_LEFT ? i
                                                                      : i + c->Tk - c->Tq;
                int64_t lo = 0, hi = c->Tk;
                if (c->causal || c->window > 0) {
                    hi = ip + 1 < 0 ? 0 : ip + 1 > c->Tk ? c->Tk : ip + 1;
                    if (c->window > 0 && ip + 1 - c->window > lo) lo = ip + 1 - c->window;
                }
                if (c->lens) {
                    const int64_t L = c->lens2d ? lens[b * c->Tq + i] : lens[b];
                    hi = hi < L ? hi : L;
                }
                double M = -INFINITY, dsmax = 0, spread = 0;
                int64_t n_seen = 0;
                for (int64_t j = 0; j < c->Tk; j++) {
                    const double mv = c->mask ? mask[i * c->Tk + j] : 0.0;
                    seen[j] = j >= lo && j < hi && mv != -INFINITY;
                    if (!seen[j]) continue;
                    n_seen++;
                    const float *kj = k + ((b * c->G + g) * c->Tk + j) * c->dk;
                    double dot = 0, dabs = 0;
                    for (int64_t d = 0; d < c->dk; d++) {
                        const double x = (double)rbf16(qi[d] * scale) * (double)rbf16(kj[d]);
                        dot += x;
                        dabs += fabs(x);
                    }
                    double sc = c->softcap > 0 ? c->softcap * tanh(dot / c->softcap) : dot;
                    const double al = c->alibi > 0 ? alibi_slope(c->alibi, h, c->H) * (double)(j - ip) : 0;
                    sc += mv + al;
                    s[j] = sc;
                    /* the f32 score's error: the dot's chain, then one
                     * rounding per option's operation */
                    double ds = (double)(c->dk + 2) * u * dabs + 2 * u * (fabs(sc) + fabs(mv) + fabs(al)) +
                                (c->softcap > 0 ? 16 * u * c->softcap : 0);
                    sab[j] = ds;
                    dsmax = fmax(dsmax, ds);
                    M = fmax(M, sc);
                }
                double sk = c->sinks ? sinks[h] : -INFINITY;
                double l = 0;
                for (int64_t j = 0; j < c->Tk; j++)
                    if (seen[j]) {
                        l += exp(s[j] - M);
                        spread = fmax(spread, M - s[j]);
                    }
                if (n_seen > 0 && c->sinks) l += exp(sk - M);
                const double rho = 0x1p-9 + 2 * dsmax + (8 + spread) * u;
#ifdef GML_FLASH_AMX_TEST /* the AMX order's sums (docs/numerics.md, "flash_attn on AMX") */
                const double rel = 2 * rho / (1 - rho) + (double)(3 * n_seen + n_seen / 16 + 8) * u;
#else
                const double rel = 2 * rho / (1 - rho) + 2 * (double)(n_seen + n_seen / 16 + 4) * u;
#endif
                for (int64_t cc = 0; cc < c->dv; cc++) {
                    double o = 0, oa = 0, vmax = 0;
                    for (int64_t j = 0; j < c->Tk; j++) {
                        if (!seen[j]) continue;
                        const double vj = rbf16(v[((b * c->G + g) * c->Tk + j) * c->dv + cc]);
                        const double wj = exp(s[j] - M) / l;
                        o += wj * vj;
                        oa += wj * fabs(vj);
                        vmax = fmax(vmax, fabs(vj));
                    }
                    w[cc] = n_seen ? o : 0.0;
                    bd[cc] = n_seen ? rel * oa + 4 * u * fabs(o) + (double)(n_seen + 1) * 0x1p-120 * vmax : 0.0;
                }
            }
    free(s), free(sab), free(seen);
}

static gml_tensor *new_kv(gml_context *ctx, const fa_case *c, int64_t d, chk_layout l, const char *name) {
    const int64_t ne[4] = {c->B, c->G, c->Tk, d};
    return chk_new_layout(ctx, c->kv_type, 4, ne, l, name);
}

/* f32 values that are exact in the K/V type (f16 and bf16: rounded to it) */
static void fill_kv(gml_tensor *t, chk_rng *r, float *vals, int64_t n) {
    for (int64_t e = 0; e < n; e++) {
        float x = chk_uniform(r, -2, 2);
        if (t->type == GML_F16) x = gml_fp16_to_fp32(gml_fp32_to_fp16(x));
        if (t->type == GML_BF16) x = rbf16(x);
        vals[e] = x;
    }
    if (t->type == GML_F32) {
        chk_write(t, vals);
        return;
    }
    /* chk_write takes f32: write the typed elements one by one */
    for (int64_t e = 0; e < n; e++) {
        const uint16_t h = t->type == GML_F16 ? gml_fp32_to_fp16(vals[e]) : gml_fp32_to_bf16(vals[e]);
        memcpy(chk_at(t, e), &h, 2);
    }
}

static bool bf16_pairs_expected(gml_isa isa) {
    static bool said;
    if (!said && !gml_cpu_has_feature(GML_CPU_AVX512_BF16))
        printf("the VDPBF16PS variants are not tested: this CPU lacks avx512_bf16\n");
    said = true;
    return isa == GML_ISA_AVX512 && gml_cpu_has_feature(GML_CPU_AVX512_BF16);
}

static void fast_isas(gml_isa *out, int *n) {
#ifdef GML_FLASH_AMX_TEST
    static const gml_isa all[] = {GML_ISA_AVX512}; /* the AMX variant's ISA */
#else
    static const gml_isa all[] = {GML_TEST_FAST_ISAS};
#endif
    static bool said[sizeof all / sizeof *all];
    *n = 0;
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (gml_cpu_has(all[i])) out[(*n)++] = all[i];
        else if (!said[i]) {
            printf("skipped %s: this CPU lacks it\n", gml_isa_name(all[i]));
            said[i] = true;
        }
}

static double run_bound_case(const fa_case *c, const char *what) {
    chk_case("%s: B%" PRId64 " H%" PRId64 " G%" PRId64 " Tq%" PRId64 " Tk%" PRId64 " dk%" PRId64
             " dv%" PRId64 " %s K/V, q %s, k %s, v %s",
             what, c->B, c->H, c->G, c->Tq, c->Tk, c->dk, c->dv, gml_type_name(c->kv_type),
             chk_layout_name(c->lq), chk_layout_name(c->lk), chk_layout_name(c->lv));
    chk_rng rng = chk_seed(c->seed);
    gml_context *ctx = chk_ctx(64 << 20);
    const int64_t qne[4] = {c->B, c->H, c->Tq, c->dk};
    gml_tensor *q = chk_new_layout(ctx, GML_F32, 4, qne, c->lq, "q");
    gml_tensor *k = new_kv(ctx, c, c->dk, c->lk, "k"), *v = new_kv(ctx, c, c->dv, c->lv, "v");
    const int64_t nq = c->B * c->H * c->Tq * c->dk, nk = c->B * c->G * c->Tk * c->dk;
    const int64_t nv = c->B * c->G * c->Tk * c->dv;
    float *qv = malloc((size_t)nq * 4), *kv = malloc((size_t)nk * 4), *vv = malloc((size_t)nv * 4);
    for (int64_t e = 0; e < nq; e++) qv[e] = chk_uniform(&rng, -c->qrange, c->qrange);
    chk_write(q, qv);
    fill_kv(k, &rng, kv, nk);
    fill_kv(v, &rng, vv, nv);
    gml_attn_opts o = {.causal = (gml_causal)c->causal, .window = c->window, .softcap = c->softcap,
                       .alibi_max_bias = c->alibi};
    float *maskv = NULL, *sinkv = NULL;
    int32_t *lensv = NULL, *posv = NULL;
    if (c->mask) { /* [Tq, Tk]: every fifth key hidden, row 1 hidden whole */
        o.mask = gml_new_tensor_2d(ctx, GML_F32, c->Tq, c->Tk);
        maskv = o.mask->data;
        for (int64_t i = 0; i < c->Tq; i++)
            for (int64_t j = 0; j < c->Tk; j++)
                maskv[i * c->Tk + j] = (j % 5 == 2 || i == 1) ? -INFINITY : chk_uniform(&rng, -1, 1);
        if (c->nan_hidden_v && c->kv_type == GML_F32) /* keys every row hides: NaN V rows */
            for (int64_t e = 0; e < nv; e++)
                if ((e / c->dv) % c->Tk % 5 == 2) {
                    vv[e] = NAN;
                    memcpy(chk_at(v, e), &vv[e], 4);
                }
    }
    if (c->sinks) {
        o.sinks = gml_new_tensor_1d(ctx, GML_F32, c->H);
        sinkv = o.sinks->data;
        for (int64_t h = 0; h < c->H; h++) sinkv[h] = chk_uniform(&rng, -2, 3);
    }
    if (c->lens) {
        o.valid_lens = c->lens2d ? gml_new_tensor_2d(ctx, GML_I32, c->B, c->Tq)
                                 : gml_new_tensor_1d(ctx, GML_I32, c->B);
        lensv = o.valid_lens->data;
        for (int64_t e = 0; e < gml_nelements(o.valid_lens); e++)
            lensv[e] = (int32_t)chk_randint(&rng, 0, (int)c->Tk);
        lensv[0] = (int32_t)c->Tk;
    }
    if (c->positions) {
        o.positions = gml_new_tensor_2d(ctx, GML_I32, c->B, c->Tq);
        posv = o.positions->data;
        for (int64_t e = 0; e < c->B * c->Tq; e++)
            posv[e] = (int32_t)chk_randint(&rng, -1, (int)c->Tk + 2);
    }
    const float scale = 1.0f / sqrtf((float)c->dk);
    gml_tensor *y = gml_flash_attn_ext(ctx, q, k, v, scale, &o);
    if (!CHECK(y && gml_set_compute(ctx, y, GML_COMPUTE_BF16) == GML_OK, "build: %s",
               gml_last_error(ctx))) {
        gml_free(ctx);
        free(qv), free(kv), free(vv);
        return 0;
    }
    fa_run run = {.c = c, .y = y, .n = gml_nelements(y)};
    run.want = malloc((size_t)run.n * sizeof(double));
    run.bound = malloc((size_t)run.n * sizeof(double));
    reference(c, qv, kv, vv, maskv, sinkv, lensv, posv, scale, run.want, run.bound);
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    gml_isa isas[8];
    int n_isas;
    fast_isas(isas, &n_isas);
    for (int i = 0; i < n_isas; i++) {
        CHECK_RUN(g, .outs = &y, .n_outs = 1, .verify = verify_bound, .user = &run, .isa = isas[i]);
        const char *kern = gml_graph_node_kernel(g, -1);
        const char *want = bf16_pairs_expected(isas[i]) ? "avx512bf16" : "compute bf16, chain";
#ifdef GML_FLASH_AMX_TEST
        /* AMX for more than 16 query rows of a kv head, where tiles are given */
        const bool amx = gml_flash_amx_pick(isas[i]) && c->H / c->G * c->Tq > 16;
        want = amx ? "AMX tiles" : want;
        CHECK(amx || !kern || !strstr(kern, "AMX"), "%s ran %s with %" PRId64 " rows of a kv head",
              gml_isa_name(isas[i]), kern ? kern : "(none)", c->H / c->G * c->Tq);
#endif
        CHECK(kern && strstr(kern, want), "%s ran %s, not the bf16 kernel of its order (%s)",
              gml_isa_name(isas[i]), kern ? kern : "(none)", want);
    }
    gml_graph_free(g);
    gml_free(ctx);
    free(qv), free(kv), free(vv);
    free(run.want), free(run.bound);
    return run.worst;
}

static void test_bound(void) {
    const fa_case base = {.B = 2, .H = 6, .G = 2, .Tq = 13, .Tk = 41, .dk = 37, .dv = 19,
                          .kv_type = GML_F32, .qrange = 2, .seed = 1};
    double worst = 0;
#define RUN(what, ...)                                                           \
    do {                                                                         \
        fa_case c = base;                                                        \
        __VA_ARGS__;                                                             \
        worst = fmax(worst, run_bound_case(&c, what));                           \
    } while (0)
    RUN("plain", (void)0);
    RUN("several key blocks, MHA, dk even", c.H = 3, c.G = 3, c.Tq = 37, c.Tk = 150, c.dk = 64, c.dv = 64, c.seed = 2);
    RUN("MQA, large scores (rescales)", c.G = 1, c.Tk = 130, c.qrange = 8, c.seed = 3);
    RUN("bf16 K/V, permuted q, k, v", c.kv_type = GML_BF16, c.lq = CHK_REVERSED, c.lk = CHK_OUTER_SWAPPED,
        c.lv = CHK_TRANSPOSED, c.seed = 4);
    RUN("f16 K/V, sliced", c.kv_type = GML_F16, c.lq = CHK_SLICED, c.lk = CHK_SLICED, c.seed = 5);
    RUN("causal bottom-right", c.causal = GML_CAUSAL_BOTTOM_RIGHT, c.seed = 6);
    RUN("causal top-left", c.causal = GML_CAUSAL_TOP_LEFT, c.seed = 7);
    RUN("mask, a row hidden whole, NaN in hidden V rows", c.mask = true, c.nan_hidden_v = true, c.seed = 8);
    RUN("window", c.window = 5, c.seed = 9);
    RUN("ALiBi", c.alibi = 8, c.causal = GML_CAUSAL_BOTTOM_RIGHT, c.seed = 10);
    RUN("softcap", c.softcap = 2.5f, c.qrange = 6, c.seed = 11);
    RUN("sinks", c.sinks = true, c.seed = 12);
    RUN("valid lengths [B]", c.lens = true, c.seed = 13);
    RUN("valid lengths [B, Tq]", c.lens = true, c.lens2d = true, c.seed = 14);
    RUN("positions, window, causal", c.positions = true, c.window = 7, c.causal = GML_CAUSAL_BOTTOM_RIGHT,
        c.seed = 15);
    RUN("everything", c.mask = true, c.sinks = true, c.lens = true, c.window = 9, c.softcap = 3,
        c.alibi = 4, c.kv_type = GML_BF16, c.seed = 16);
    RUN("few rows (f32 would decode)", c.H = 2, c.G = 1, c.Tq = 3, c.Tk = 77, c.seed = 17);
    RUN("one row, dk 1, dv 1", c.B = 1, c.H = 1, c.G = 1, c.Tq = 1, c.Tk = 9, c.dk = 1, c.dv = 1, c.seed = 18);
    RUN("16 rows of a kv head, dk 2", c.H = 4, c.G = 1, c.Tq = 4, c.dk = 2, c.dv = 33, c.seed = 19);
    RUN("dk 70, dv 45, Tk 200: tails past 32 in d and keys", c.H = 4, c.G = 2, c.Tq = 21, c.Tk = 200,
        c.dk = 70, c.dv = 45, c.causal = GML_CAUSAL_BOTTOM_RIGHT, c.seed = 20);
    RUN("dk 128, dv 128 (LLaMA's heads), window", c.B = 1, c.H = 2, c.G = 1, c.Tq = 20, c.Tk = 100,
        c.dk = 128, c.dv = 128, c.window = 40, c.causal = GML_CAUSAL_BOTTOM_RIGHT, c.seed = 22);
    RUN("16 (batch, kv head) pairs: whole heads a task", c.B = 4, c.H = 8, c.G = 4, c.Tq = 9, c.Tk = 70,
        c.mask = true, c.seed = 21);
#undef RUN
    printf("bf16 flash_attn: worst |error| / bound over the cases: %.3f\n", worst);
}

/* ---- exact where the rounding decides ------------------------------------- */

typedef struct exact_run {
    gml_tensor *y;
    const double *want;
    const double *tol;  /* < 0: left out (a weight near a rounding boundary) */
    int64_t n;
} exact_run;

static void verify_exact(void *user) {
    exact_run *r = user;
    float *got = malloc((size_t)r->n * sizeof *got);
    chk_read(r->y, got);
    long bad = 0;
    int64_t first = -1;
    for (int64_t e = 0; e < r->n; e++) {
        if (r->tol[e] < 0) continue;
        const bool ok = r->tol[e] == 0 ? (double)got[e] == r->want[e]
                                       : fabs((double)got[e] - r->want[e]) <= r->tol[e];
        if (!ok && first < 0) first = e;
        bad += !ok;
    }
    CHECK(bad == 0, "%ld outputs differ from the definition; first [%" PRId64 "]: got %.9g, want %.9g "
          "(tolerance %.3g)", bad, first, first >= 0 ? (double)got[first] : 0.0,
          first >= 0 ? r->want[first] : 0.0, first >= 0 ? r->tol[first] : 0.0);
    free(got);
}

/* Causal top-left, Tk = Tq <= 16 keys (one key block in every variant, so
 * every weight is against the row's max): row 0 sees key 0 only, out =
 * bf16(v_0) exactly; row i sees keys 0..i: out = sum_j p_j v~_j / sum_j
 * p_j with p_j = bf16(exp(s_j - m)) from the double scores of the rounded
 * operands. d_k 5 (scale 1/sqrt(5): q * scale is not q shifted). */
static void test_exact(void) {
    const int64_t B = 2, H = 4, G = 2, T = 13, dk = 5, dv = 11, r = H / G;
    chk_case("exact: B%" PRId64 " H%" PRId64 " G%" PRId64 " T%" PRId64 " dk%" PRId64 " dv%" PRId64,
             B, H, G, T, dk, dv);
    chk_rng rng = chk_seed(99);
    gml_context *ctx = chk_ctx(16 << 20);
    gml_tensor *q = gml_new_tensor_4d(ctx, GML_F32, B, H, T, dk);
    gml_tensor *k = gml_new_tensor_4d(ctx, GML_F32, B, G, T, dk);
    gml_tensor *v = gml_new_tensor_4d(ctx, GML_F32, B, G, T, dv);
    float *qv = q->data, *kv = k->data, *vv = v->data;
    for (int64_t e = 0; e < B * H * T * dk; e++) qv[e] = chk_uniform(&rng, -3, 3);
    for (int64_t e = 0; e < B * G * T * dk; e++) kv[e] = chk_uniform(&rng, -3, 3);
    for (int64_t e = 0; e < B * G * T * dv; e++) vv[e] = chk_uniform(&rng, -2, 2);
    const float scale = 1.0f / sqrtf((float)dk);
    const gml_attn_opts o = {.causal = GML_CAUSAL_TOP_LEFT};
    gml_tensor *y = gml_flash_attn_ext(ctx, q, k, v, scale, &o);
    if (!CHECK(y && gml_set_compute(ctx, y, GML_COMPUTE_BF16) == GML_OK, "build: %s",
               gml_last_error(ctx))) {
        gml_free(ctx);
        return;
    }
    const int64_t n = gml_nelements(y);
    double *want = malloc((size_t)n * sizeof *want), *tol = malloc((size_t)n * sizeof *tol);
    double *s = malloc((size_t)T * sizeof *s), *p = malloc((size_t)T * sizeof *p);
    int64_t left_out = 0, miss_f32 = 0;
    double f32_gap = 0; /* how far the unrounded arithmetic is, in tolerances */
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < T; i++) {
                const float *qi = qv + ((b * H + h) * T + i) * dk;
                double m = -INFINITY;
                for (int64_t j = 0; j <= i; j++) {
                    const float *kj = kv + ((b * G + h / r) * T + j) * dk;
                    s[j] = 0;
                    for (int64_t d = 0; d < dk; d++) s[j] += (double)rbf16(qi[d] * scale) * rbf16(kj[d]);
                    m = fmax(m, s[j]);
                }
                double l = 0, l32 = 0, margin_min = 1;
                for (int64_t j = 0; j <= i; j++) {
                    double margin;
                    p[j] = rbf16_d(exp(s[j] - m), &margin);
                    margin_min = fmin(margin_min, margin);
                    l += p[j];
                    l32 += exp(s[j] - m);
                }
                for (int64_t c = 0; c < dv; c++) {
                    double o = 0, oa = 0, o32 = 0, m32 = -INFINITY, l32b = 0;
                    for (int64_t j = 0; j <= i; j++) {
                        const float vj = vv[((b * G + h / r) * T + j) * dv + c];
                        o += p[j] * rbf16(vj);
                        oa += p[j] * fabs(rbf16(vj));
                    }
                    /* the f32 attention of the unrounded operands, for the gap */
                    double s32[16];
                    for (int64_t j = 0; j <= i; j++) {
                        const float *kj = kv + ((b * G + h / r) * T + j) * dk;
                        s32[j] = 0;
                        for (int64_t d = 0; d < dk; d++) s32[j] += (double)qi[d] * scale * kj[d];
                        m32 = fmax(m32, s32[j]);
                    }
                    for (int64_t j = 0; j <= i; j++) {
                        const double e = exp(s32[j] - m32);
                        l32b += e;
                        o32 += e * vv[((b * G + h / r) * T + j) * dv + c];
                    }
                    const int64_t e = ((b * H + h) * T + i) * dv + c;
                    want[e] = o / l;
                    /* f32 roundings only: the scores (relative 2^-21 of
                     * e^(s - m) for |s| < 64), the sums, the division */
                    tol[e] = i == 0 ? 0.0 : 64 * 0x1p-24 * (oa / l + fabs(want[e]));
                    if (i > 0 && margin_min < 0x1p-17) {
                        tol[e] = -1;
                        left_out++;
                        continue;
                    }
                    if (i > 0 && tol[e] > 0) {
                        const double gap = fabs(o32 / l32b - want[e]) / tol[e];
                        f32_gap = fmax(f32_gap, gap);
                        miss_f32 += gap > 1;
                    }
                }
                (void)l32;
            }
    /* the definition differs from f32 attention by far more than the
     * tolerance: the check can tell them apart */
    CHECK(miss_f32 > n / 2 && f32_gap > 100,
          "the test cannot tell bf16 from f32: %" PRId64 " of %" PRId64 " outputs apart, gap %.3g",
          miss_f32, n, f32_gap);
    CHECK(left_out < n / 10, "%" PRId64 " of %" PRId64 " outputs left out", left_out, n);
    exact_run run = {.y = y, .want = want, .tol = tol, .n = n};
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    gml_isa isas[8];
    int n_isas;
    fast_isas(isas, &n_isas);
    for (int i = 0; i < n_isas; i++)
        CHECK_RUN(g, .outs = &y, .n_outs = 1, .verify = verify_exact, .user = &run, .isa = isas[i]);
    gml_graph_free(g);
    free(want), free(tol), free(s), free(p);
    gml_free(ctx);
}

/* ---- the API ----------------------------------------------------------------- */

static void test_api(void) {
    chk_case("compute precision of flash_attn");
    gml_context *ctx = chk_ctx(4 << 20);
    gml_tensor *q = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 1, 2, 3, 8), "q");
    gml_tensor *k = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 1, 2, 5, 8), "k");
    gml_tensor *v = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 1, 2, 5, 8), "v");
    gml_tensor *y = gml_set_name(gml_flash_attn_ext(ctx, q, k, v, 0.5f, NULL), "y");
    CHECK(gml_get_compute(y) == GML_COMPUTE_F32, "a new flash_attn computes in f32");
    CHECK(gml_set_compute(ctx, y, GML_COMPUTE_BF16) == GML_OK, "bf16: %s", gml_last_error(ctx));
    CHECK(gml_get_compute(y) == GML_COMPUTE_BF16, "set to bf16");
    CHECK(gml_set_compute(ctx, y, GML_COMPUTE_INT8) == GML_ERR_INVALID, "int8 refused");
    CHECK_CONTAINS(gml_last_error(ctx), "gml_set_compute(y, int8): flash_attn(q, k, v): flash_attn "
                                        "computes in f32 or bf16");
    CHECK(gml_get_compute(y) == GML_COMPUTE_BF16, "a refusal keeps bf16");
    CHECK(gml_set_compute(ctx, y, (gml_compute)7) == GML_ERR_INVALID, "7 refused");
    CHECK(gml_set_compute(ctx, y, GML_COMPUTE_F32) == GML_OK && gml_get_compute(y) == GML_COMPUTE_F32,
          "back to f32");
    gml_tensor *lse = gml_set_name(gml_flash_attn_lse(ctx, q, k, v, 0.5f, NULL), "lse");
    CHECK(lse && gml_set_compute(ctx, lse, GML_COMPUTE_BF16) == GML_ERR_INVALID, "flash_attn_lse refused");
    CHECK_CONTAINS(gml_last_error(ctx), "'lse' is a flash_attn_lse node; only matmul nodes");
    /* the context default (autocast) */
    CHECK(gml_set_default_compute(ctx, GML_COMPUTE_BF16) == GML_OK, "bf16 default");
    gml_tensor *yb = gml_flash_attn_ext(ctx, q, k, v, 0.5f, NULL);
    CHECK(yb && gml_get_compute(yb) == GML_COMPUTE_BF16, "flash_attn under a bf16 default: bf16");
    gml_tensor *lb = gml_flash_attn_lse(ctx, q, k, v, 0.5f, NULL);
    CHECK(lb && gml_get_compute(lb) == GML_COMPUTE_F32, "flash_attn_lse under a bf16 default: f32");
    CHECK(gml_set_default_compute(ctx, GML_COMPUTE_INT8) == GML_OK, "int8 default");
    gml_tensor *yi = gml_flash_attn_ext(ctx, q, k, v, 0.5f, NULL);
    CHECK(yi && gml_get_compute(yi) == GML_COMPUTE_F32, "flash_attn under an int8 default: f32");
    CHECK(gml_set_default_compute(ctx, GML_COMPUTE_F32) == GML_OK, "f32 default");
    gml_free(ctx);
    /* the digest tells them apart */
    ctx = chk_ctx(4 << 20);
    q = gml_new_tensor_4d(ctx, GML_F32, 1, 2, 3, 8);
    k = gml_new_tensor_4d(ctx, GML_F32, 1, 2, 5, 8);
    v = gml_new_tensor_4d(ctx, GML_F32, 1, 2, 5, 8);
    y = gml_flash_attn_ext(ctx, q, k, v, 0.5f, NULL);
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    const uint64_t d32 = g ? gml_graph_digest(g) : 0;
    CHECK(gml_set_compute(ctx, y, GML_COMPUTE_BF16) == GML_OK, "%s", gml_last_error(ctx));
    gml_graph_free(g);
    g = gml_build_graph(ctx, &y, 1);
    CHECK(g && d32 != 0 && gml_graph_digest(g) != d32, "bf16 and f32 digests differ: %s",
          gml_last_error(ctx));
    gml_graph_free(g);
    /* gml_grad through a bf16 flash_attn: refused by name */
    gml_tensor *dy = gml_new_tensor_4d(ctx, GML_F32, 1, 2, 3, 8), *dq = NULL;
    const gml_status st = gml_grad(ctx, y, dy, (gml_tensor *[]){q}, 1, &dq);
    CHECK(st != GML_OK, "gml_grad through a bf16 flash_attn refused");
    CHECK_CONTAINS(gml_last_error(ctx), "flash_attn computes in bf16");
    gml_free(ctx);
}

/* A graph file writes compute=bf16 and reads it back. */
static void test_graph_file(void) {
    chk_case("graph file: flash_attn(..., compute=bf16)");
    gml_context *ctx = chk_ctx(4 << 20);
    gml_tensor *q = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 1, 2, 3, 8), "q");
    gml_tensor *k = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 1, 2, 5, 8), "k");
    gml_tensor *v = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 1, 2, 5, 8), "v");
    gml_tensor *y = gml_set_name(gml_flash_attn_ext(ctx, q, k, v, 0.5f, NULL), "y");
    gml_set_compute(ctx, y, GML_COMPUTE_BF16);
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    char path[] = "/tmp/test_flash_attn_bf16.XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd >= 0) close(fd);
    char err[512] = "";
    CHECK(gml_save_graph(path, g, &y, 1, err, sizeof err) == GML_OK, "save: %s", err);
    FILE *f = fopen(path, "r");
    char text[4096] = {0};
    if (f) {
        fread(text, 1, sizeof text - 1, f);
        fclose(f);
    }
    CHECK(strstr(text, "compute=bf16") != NULL, "the file says compute=bf16: %s", text);
    gml_context *c2 = chk_ctx(4 << 20);
    gml_tensor *y2 = NULL;
    const int n2 = gml_load_graph(c2, path, NULL, &y2, 1, err, sizeof err);
    CHECK(n2 == 1 && y2 && gml_get_compute(y2) == GML_COMPUTE_BF16, "read back bf16: %s", err);
    gml_graph *g2 = n2 == 1 ? gml_build_graph(c2, &y2, 1) : NULL;
    CHECK(g2 && gml_graph_digest(g2) == gml_graph_digest(g), "read back: the same digest");
    remove(path);
    gml_graph_free(g2);
    gml_graph_free(g);
    gml_free(c2);
    gml_free(ctx);
}

#ifdef GML_FLASH_AMX_TEST
/* ---- the AMX order of p v, bitwise ------------------------------------------
 * q = 0: every score is 0 in any order, every weight bf16(e^0) = 1 and the
 * sum l = Tk exactly, so out_c = (the sum of v~_jc over the keys in
 * TDPBF16PS's order) * (1 / Tk), as the variants finish: per step of 32
 * keys from key 0 (a key block of 64 is two steps; the last block's keys
 * padded with +0), an even-key and an odd-key fma chain from +0, then
 * c + (e + o), DAZ and FTZ. The chain order (sum in key order) misses it
 * in many outputs, which the test checks too. */
static float ftz(float x) { return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x; }

typedef struct order_run {
    gml_tensor *y;
    const float *want; /* [dv]: every row's */
    int64_t rows, dv;
} order_run;

static void verify_order(void *user) {
    const order_run *r = user;
    float *got = malloc((size_t)(r->rows * r->dv) * sizeof *got);
    chk_read(r->y, got);
    long bad = 0;
    int64_t first = -1;
    for (int64_t e = 0; e < r->rows * r->dv; e++)
        if (got[e] != r->want[e % r->dv]) {
            bad++;
            if (first < 0) first = e;
        }
    CHECK(bad == 0, "%ld outputs differ from the AMX order of p v; first [%" PRId64 "]: got %.9g, want %.9g",
          bad, first, first >= 0 ? (double)got[first] : 0.0, first >= 0 ? (double)r->want[first % r->dv] : 0.0);
    free(got);
}

static void test_amx_order(void) {
    const int64_t B = 1, H = 4, G = 1, T = 8, Tk = 100, dk = 37, dv = 45;
    chk_case("AMX order of p v: B%" PRId64 " H%" PRId64 " Tq%" PRId64 " Tk%" PRId64 " dv%" PRId64, B, H, T,
             Tk, dv);
    chk_rng rng = chk_seed(31);
    gml_context *ctx = chk_ctx(16 << 20);
    gml_tensor *q = gml_new_tensor_4d(ctx, GML_F32, B, H, T, dk);
    gml_tensor *k = gml_new_tensor_4d(ctx, GML_F32, B, G, Tk, dk);
    gml_tensor *v = gml_new_tensor_4d(ctx, GML_F32, B, G, Tk, dv);
    float *kv = k->data, *vv = v->data;
    memset(q->data, 0, gml_nbytes(q));
    for (int64_t e = 0; e < Tk * dk; e++) kv[e] = chk_uniform(&rng, -3, 3);
    for (int64_t e = 0; e < Tk * dv; e++) vv[e] = chk_uniform(&rng, -1, 1) * ldexpf(1.0f, chk_randint(&rng, -8, 8));
    gml_tensor *y = gml_flash_attn_ext(ctx, q, k, v, 0.125f, NULL);
    if (!CHECK(y && gml_set_compute(ctx, y, GML_COMPUTE_BF16) == GML_OK, "build: %s", gml_last_error(ctx))) {
        gml_free(ctx);
        return;
    }
    float want[64], chain[64];
    int differ = 0;
    for (int64_t c = 0; c < dv; c++) {
        float acc = 0.0f, seq = 0.0f;
        for (int64_t k0 = 0; k0 < Tk; k0 += 32) {
            float e = 0.0f, o = 0.0f;
            for (int64_t j = k0; j < k0 + 32; j += 2) {
                e = ftz(fmaf(1.0f, j < Tk ? rbf16(vv[j * dv + c]) : 0.0f, e));
                o = ftz(fmaf(1.0f, j + 1 < Tk ? rbf16(vv[(j + 1) * dv + c]) : 0.0f, o));
            }
            acc = ftz(acc + ftz(e + o));
        }
        for (int64_t j = 0; j < Tk; j++) seq += rbf16(vv[j * dv + c]);
        want[c] = acc * (1.0f / (float)Tk);
        chain[c] = seq * (1.0f / (float)Tk);
        differ += want[c] != chain[c];
    }
    CHECK(differ > dv / 4, "the AMX order and the chain order differ in %d of %" PRId64 " columns only",
          differ, dv);
    order_run run = {y, want, B * H * T, dv};
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    const bool amx = gml_flash_amx_pick(GML_ISA_AVX512) != NULL;
    if (!amx) printf("the AMX order of p v not checked: no AMX tiles (see above)\n");
    CHECK_RUN(g, .outs = &y, .n_outs = 1, .isa = GML_ISA_AVX512, .no_reference = true,
              .verify = amx ? verify_order : NULL, .user = &run);
    const char *kern = gml_graph_node_kernel(g, -1);
    CHECK(!amx || (kern && strstr(kern, "AMX tiles")), "ran %s, not the AMX variant", kern ? kern : "(none)");
    gml_graph_free(g);
    gml_free(ctx);
}

static const void *flash_pick(gml_isa isa) { return gml_flash_amx_pick(isa); }

int main(int argc, char **argv) {
    gml_isa sets[2];
    chk_kernel_sets(sets);
    if (!gml_cpu_has(GML_ISA_AVX512) || !gml_cpu_has_feature(GML_CPU_AVX512_BF16)) {
        printf("skipped: the AMX variant's softmax is the AVX-512 BF16 object; this CPU lacks "
               "avx512_bf16\n");
        return 77;
    }
    bool opted;
    if (!amx_check_args(argc, argv, &opted)) return chk_summary();
    if (opted) {
        /* refused: stderr says once why, naming bf16 flash attention */
        amx_check_refusal(flash_pick, "bf16 flash attention runs");
        const gml_flash_amx_kernel *k = gml_flash_amx_pick(GML_ISA_AVX512);
        printf(k ? "the real AMX tiles: %s\n"
                 : "skipped: the real AMX tiles (no AMX-BF16 here, or no permission: see the line "
                   "above); checked that the VDPBF16PS variants run%s\n",
               k ? k->name : "");
    } else {
        gml_flash_amx_use(&EMUL);
    }
    test_api();
    test_graph_file();
    test_amx_order();
    test_exact();
    test_bound();
    return chk_summary();
}
#else
int main(void) {
    gml_isa sets[2];
    chk_kernel_sets(sets);
    test_api();
    test_graph_file();
    test_exact();
    test_bound();
    return chk_summary();
}
#endif
