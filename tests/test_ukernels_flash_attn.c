/* Flash attention: every micro-kernel variant (both lists of
 * ops/flash_attn.inc) against attention computed here in double, on blocks
 * of 1 .. tile query rows (lanes) with their own key counts (0 included),
 * key counts around the key blocks, odd d_k and d_v, an additive mask (NaN
 * and +inf at the keys past a lane's count are ignored; at a key the lane
 * sees they make it NaN), a NaN score, scores whose max grows block after
 * block and huge ones; the variants must not read key or value rows past
 * the largest key count, nor write outside their rows and scratch; the
 * contracts of ggmlite.h (MASKS): NaN and inf in k and v at a key masked
 * -inf change nothing, a score overflowing to -inf is a NaN lane. Then the
 * op under every ISA against its reference kernel at 1-3 threads
 * (simd_check.h). */
#include "../ops/ukernels.h"
#include "simd_check.h"

/* Against the computation in double from the scores as every variant forms
 * them (an FMA chain over d in order, then + mask, in float): |got - want| <=
 * REL |want| + ABS (values and outputs O(1)), room for exp's ulp, the float
 * differences s - max and float sums over up to 200 keys. */
#define UKERNEL_REL_TOL 4e-6
#define UKERNEL_ABS_TOL 4e-6
#define OP_REL_TOL 1e-5
#define OP_ABS_TOL 2e-6

typedef struct {
    gml_isa isa;
    gml_f32_flash_ukernel *fn;
    int tile;
    const char *name;
} variant;

#define ENTRY(isa, fn, tile) {isa, fn, tile, #fn},
static const variant VARIANTS[] = {GML_F32_FLASH_UKERNELS(ENTRY) GML_F32_FLASH_FEW_UKERNELS(ENTRY)};

enum { PLAIN, MASKED, NAN_SCORE, GROWING, HUGE, GARBAGE, OVERFLOW, OVERFLOW_MASKED, N_CASES };
static const char *const CASE_NAMES[] = {"plain", "additive mask", "a NaN score",
                                         "growing max", "huge scores",
                                         "NaN/inf in k and v at a key masked -inf",
                                         "a score overflowing to -inf, no mask",
                                         "a score overflowing to -inf, additive mask"};

#define NAN_BITS 0x7fc0beefu
static float nan_pattern(void) {
    uint32_t u = NAN_BITS;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* One block: nq lanes, key counts per lane (max nk_max), d_k, d_v. Returns
 * the largest relative error seen. */
static double check_block(const variant *var, size_t nq, int32_t nk_max, size_t dk, size_t dv,
                          int c) {
    const size_t tile = (size_t)var->tile, ldk = dk + 3, ldv = dv + 2, pad = 16;
    /* k and v rows 0 .. nk_max - 1, then NaN: reading past them shows */
    const size_t rows = (size_t)(nk_max > 0 ? nk_max : 1);
    float *k = malloc((rows * ldk + pad) * 4), *v = malloc((rows * ldv + pad) * 4);
    float *qt = aligned_alloc(64, gml_align_up(dk * tile * 4, 64));
    const size_t wfloats = GML_FLASH_WORK_FLOATS(tile, dv);
    float *work = aligned_alloc(64, gml_align_up((wfloats + pad) * 4, 64));
    float *outbuf = malloc((nq * (dv + pad) + pad) * 4);
    float *mask = malloc((nq * rows + pad) * 4);
    double *want = malloc(nq * dv * sizeof *want);
    int32_t n_keys[32] = {0};
    const float *mask_rows[32];
    float *out_rows[32];
    for (size_t i = 0; i < rows * ldk + pad; i++)
        k[i] = i < rows * ldk ? rand_uniform(-1, 1) : nan_pattern();
    for (size_t i = 0; i < rows * ldv + pad; i++)
        v[i] = i < rows * ldv ? rand_uniform(-1, 1) : nan_pattern();
    for (size_t i = 0; i < wfloats + pad; i++) work[i] = i < wfloats ? nan_pattern() : 555.0f;
    for (size_t i = 0; i < nq * (dv + pad) + pad; i++) outbuf[i] = 777.0f;
    const float qscale = c == HUGE ? 40.0f : 1.0f;
    for (size_t d = 0; d < dk; d++)
        for (size_t l = 0; l < tile; l++)
            qt[d * tile + l] = l < nq ? rand_uniform(-1, 1) * qscale : 0.0f;
    if (c == GROWING) /* key j grows with j, q positive: each block raises the max */
        for (size_t j = 0; j < rows; j++)
            for (size_t d = 0; d < dk; d++) {
                k[j * ldk + d] = fabsf(k[j * ldk + d]) * (1.0f + (float)j / 32.0f);
                for (size_t l = 0; l < nq; l++) qt[d * tile + l] = fabsf(qt[d * tile + l]);
            }
    for (size_t l = 0; l < nq; l++) {
        /* lane 0 sees every key, the last lane none (when there are 2+) */
        n_keys[l] = l == 0 ? nk_max : l + 1 == nq ? 0 : (int32_t)rand_int(nk_max + 1);
        out_rows[l] = outbuf + l * (dv + pad);
        mask_rows[l] = mask + l * rows;
        for (size_t j = 0; j < rows; j++)
            mask[l * rows + j] = rand_int(4) == 0 ? -INFINITY
                                 : rand_int(2)    ? 0.0f
                                                  : rand_uniform(-2, 0);
        /* Keys past the lane's count (hidden by causality or valid lengths
         * in the op) must stay hidden whatever the mask holds there: NaN and
         * +inf, which would make the lane NaN if added to a -inf. */
        for (size_t j = (size_t)n_keys[l]; j < rows; j++)
            mask[l * rows + j] = rand_int(2) ? NAN : INFINITY;
        /* At a key the lane sees, NaN or +inf (inf - inf in the softmax)
         * makes the lane NaN: lanes 1 and 2 when they see a key. */
        if ((l == 1 || l == 2) && l + 1 < nq && n_keys[l] > 0)
            mask[l * rows + (size_t)rand_int(n_keys[l])] = l == 1 ? NAN : INFINITY;
    }
    const bool masked = c == MASKED || c == GARBAGE || c == OVERFLOW_MASKED;
    if (c == GARBAGE && nk_max > 0) { /* key g: garbage, hidden by the mask but in lane 1 */
        const size_t g = (size_t)rand_int(nk_max);
        for (size_t d = 0; d < dk; d++) k[g * ldk + d] = d % 2 ? INFINITY : NAN;
        for (size_t cc = 0; cc < dv; cc++) v[g * ldv + cc] = cc % 2 ? NAN : -INFINITY;
        for (size_t l = 0; l < nq; l++)
            if (l != 1) mask[l * rows + g] = -INFINITY;
    }
    if ((c == OVERFLOW || c == OVERFLOW_MASKED) && nk_max > 0) { /* key o: -6e38 in the even lanes, -1.5e38 in the odd */
        const size_t o = (size_t)rand_int(nk_max);
        for (size_t d = 0; d < dk; d++) k[o * ldk + d] = d == 0 ? -3e38f : 0.0f;
        for (size_t l = 0; l < nq; l++) qt[l] = l % 2 ? 0.5f : 2.0f;
    }
    if (c == NAN_SCORE && nk_max > 0) {
        const size_t nan_key = (size_t)rand_int(nk_max); /* lane 0 sees it: its output is NaN */
        for (size_t d = 0; d < dk; d++) k[nan_key * ldk + d] = d == 0 ? NAN : k[nan_key * ldk + d];
    }
    gml_flash_args a = {.nq = nq, .dk = dk, .dv = dv, .qt = qt, .k = k, .ldk = ldk, .v = v,
                        .ldv = ldv, .n_keys = n_keys, .mask = masked ? mask_rows : NULL,
                        .mask_stride = 1, .out = out_rows, .work = work};
    var->fn(&a);

    /* want, in double from the same float inputs */
    double *s = malloc(rows * sizeof *s);
    for (size_t l = 0; l < nq; l++) {
        double max = -INFINITY;
        bool nan = false;
        /* the contract (ggmlite.h, MASKS): a key masked -inf is skipped, k
         * and v unread; a score (as floats) or a v row that is not finite
         * at a key the lane sees makes the lane NaN */
        for (int32_t j = 0; j < n_keys[l]; j++) {
            const float mv = masked ? mask[l * rows + (size_t)j] : 0.0f;
            s[j] = -INFINITY;
            if (mv == -INFINITY) continue;
            float dot = 0;
            for (size_t d = 0; d < dk; d++)
                dot = fmaf(k[(size_t)j * ldk + d], qt[d * tile + l], dot);
            if (masked) dot += mv;
            for (size_t cc = 0; cc < dv; cc++) nan |= !isfinite(v[(size_t)j * ldv + cc]);
            if (!isfinite(dot)) {
                nan = true;
                continue;
            }
            s[j] = dot;
            if (dot > max) max = dot;
        }
        double sum = 0;
        for (int32_t j = 0; j < n_keys[l]; j++) {
            s[j] = s[j] == -INFINITY || max == -INFINITY ? 0 : exp(s[j] - max);
            sum += s[j];
        }
        for (size_t cc = 0; cc < dv; cc++) {
            double o = 0;
            for (int32_t j = 0; j < n_keys[l]; j++)
                if (s[j] != 0) o += s[j] * v[(size_t)j * ldv + cc];
            want[l * dv + cc] = nan ? NAN : sum > 0 ? o / sum : 0.0;
        }
    }
    free(s);

    double worst = 0;
    int bad = 0;
    for (size_t l = 0; l < nq && bad < 3; l++) {
        for (size_t cc = 0; cc < dv && bad < 3; cc++) {
            const double got = out_rows[l][cc], w = want[l * dv + cc];
            bool ok;
            if (isnan(w)) ok = isnan(got);
            else if (n_keys[l] == 0 || (masked && w == 0 && got == 0)) ok = got == 0.0;
            else ok = fabs(got - w) <= UKERNEL_REL_TOL * fabs(w) + UKERNEL_ABS_TOL;
            if (!isnan(w) && fabs(w) > 1e-3) worst = fmax(worst, fabs(got - w) / fabs(w));
            if (!ok) {
                bad++;
                CHECK(false, "%s nq %zu keys %d d_k %zu d_v %zu (%s): lane %zu (%d keys) out[%zu] "
                      "= %.9g, want %.9g", var->name, nq, (int)nk_max, dk, dv, CASE_NAMES[c], l,
                      (int)n_keys[l], cc, got, w);
            }
        }
        for (size_t cc = dv; cc < dv + pad; cc++)
            if (out_rows[l][cc] != 777.0f) {
                CHECK(false, "%s: wrote past lane %zu's row (column %zu)", var->name, l, cc);
                break;
            }
    }
    for (size_t i = wfloats; i < wfloats + pad; i++)
        if (work[i] != 555.0f) {
            CHECK(false, "%s: wrote past its scratch (GML_FLASH_WORK_FLOATS)", var->name);
            break;
        }
    free(k), free(v), free(qt), free(work), free(outbuf), free(mask), free(want);
    return worst;
}

static void check_variants(void) {
    /* around the key blocks: 48 (AVX2), 64 (AVX-512), 32 (scalar) */
    static const int32_t keys[] = {0,  1,  5,  15, 16, 17,  31,  47,  48,  49,
                                   63, 64, 65, 95, 96, 97, 127, 128, 129, 200};
    static const size_t dks[] = {1, 7, 64, 33}, dvs[] = {1, 5, 9, 64, 62, 24};
    for (size_t k = 0; k < sizeof VARIANTS / sizeof *VARIANTS; k++) {
        const variant *v = &VARIANTS[k];
        if (!cpu_runs(v->isa, v->name)) continue;
        const size_t t = (size_t)v->tile;
        const size_t lanes[] = {1, t / 2 - 1, t / 2, t / 2 + 1, t - 1, t};
        double worst = 0;
        int n = 0;
        for (size_t li = 0; li < sizeof lanes / sizeof *lanes; li++)
            for (size_t ki = 0; ki < sizeof keys / sizeof *keys; ki++, n++) {
                if (lanes[li] < 1) continue;
                const size_t dk = dks[n % 4], dv = dvs[(n / 4) % 4];
                for (int c = 0; c < N_CASES; c++)
                    worst = fmax(worst, check_block(v, lanes[li], keys[ki], dk, dv, c));
            }
        printf("%-40s max relative error %.3g against attention in double\n", v->name, worst);
    }
}

/* ---- flash_attn_lse's columns and sinks -----------------------------------------
 * With a->lse (out[l][dv] the log-sum-exp, out[l][dv + 1] the sink's
 * weight) and with sinks, the vector variants end a block in vectors
 * (finish_vec) unless a lane needs gml_flash_finish, which then writes
 * every row: a block of nq lanes that all see keys takes the first, the
 * same block with one more lane that sees none the second, and the nq
 * lanes must come out bitwise the same (outputs and both columns; the
 * lanes are independent). Both against attention in double too: the lse
 * log(sum_j e^(s_j) + e^sink) and the weight e^(sink - lse); sinks above a
 * lane's max included (the other fold). Nothing written past column
 * dv + 1 (dv without lse). */
static void run_lse_block(const variant *var, size_t nq, size_t dk, size_t dv, const float *qt,
                          const float *k, const float *v, const int32_t *n_keys, const float *sink,
                          bool lse, float *outbuf, size_t ld) {
    const size_t tile = (size_t)var->tile, wfloats = GML_FLASH_WORK_FLOATS(tile, dv);
    float *work = aligned_alloc(64, gml_align_up(wfloats * 4, 64));
    float *out_rows[32];
    for (size_t i = 0; i < 32 * ld; i++) outbuf[i] = 777.0f;
    for (size_t l = 0; l < nq; l++) out_rows[l] = outbuf + l * ld;
    gml_flash_args a = {.nq = nq, .dk = dk, .dv = dv, .qt = qt, .k = k, .ldk = dk, .v = v,
                        .ldv = dv, .n_keys = n_keys, .mask_stride = 1, .out = out_rows,
                        .work = work, .sink = sink, .lse = lse};
    var->fn(&a);
    free(work);
}

static void check_lse_finish(void) {
    static const size_t dvs[] = {1, 5, 16, 33, 62, 64};
    const size_t dk = 16, nk = 150, pad = 8;
    for (size_t vi = 0; vi < sizeof VARIANTS / sizeof *VARIANTS; vi++) {
        const variant *var = &VARIANTS[vi];
        if (!cpu_runs(var->isa, var->name)) continue;
        const size_t tile = (size_t)var->tile;
        const size_t lanes[] = {1, tile / 2 + 1, tile - 1};
        int bad = 0;
        double worst = 0;
        for (size_t di = 0; di < sizeof dvs / sizeof *dvs; di++)
            for (size_t li = 0; li < sizeof lanes / sizeof *lanes; li++)
                for (int mode = 0; mode < 3; mode++) { /* lse; lse and sinks; sinks */
                    const size_t dv = dvs[di], nq = lanes[li], ld = dv + 2 + pad;
                    const bool lse = mode < 2, sinks = mode > 0;
                    float *k = malloc(nk * dk * 4), *v = malloc(nk * dv * 4);
                    float *qt = aligned_alloc(64, gml_align_up(dk * tile * 4, 64));
                    float *vec = malloc(32 * ld * 4), *ref = malloc(32 * ld * 4);
                    int32_t n_keys[32] = {0};
                    float sink[32] = {0};
                    fill_uniform(k, nk * dk, -1, 1);
                    fill_uniform(v, nk * dv, -1, 1);
                    for (size_t i = 0; i < dk * tile; i++)
                        qt[i] = i % tile < nq ? rand_uniform(-1, 1) : 0.0f;
                    for (size_t l = 0; l < nq; l++) {
                        n_keys[l] = 1 + (int32_t)rand_int((int64_t)nk);
                        /* scores within about +-4: some sinks above the max */
                        sink[l] = sinks ? rand_uniform(-3, 6) : 0.0f;
                    }
                    run_lse_block(var, nq, dk, dv, qt, k, v, n_keys, sinks ? sink : NULL, lse,
                                  vec, ld);
                    /* lane nq sees no key: gml_flash_finish for the block */
                    run_lse_block(var, nq + 1, dk, dv, qt, k, v, n_keys, sinks ? sink : NULL, lse,
                                  ref, ld);
                    const size_t cols = lse ? dv + 2 : dv;
                    for (size_t l = 0; l < nq && bad < 5; l++) {
                        for (size_t c = 0; c < cols; c++)
                            if (!same_f32(vec[l * ld + c], ref[l * ld + c])) {
                                bad++;
                                CHECK(false, "%s d_v %zu nq %zu%s%s: lane %zu column %zu: %.9g "
                                      "in vectors, %.9g by gml_flash_finish", var->name, dv, nq,
                                      lse ? ", lse" : "", sinks ? ", sinks" : "", l, c,
                                      (double)vec[l * ld + c], (double)ref[l * ld + c]);
                                break;
                            }
                        for (size_t c = cols; c < ld; c++)
                            if (vec[l * ld + c] != 777.0f) {
                                bad++;
                                CHECK(false, "%s d_v %zu nq %zu: wrote lane %zu's column %zu",
                                      var->name, dv, nq, l, c);
                                break;
                            }
                        /* in double, from the scores as the variants form them */
                        double s[150], max = -INFINITY, sum = 0;
                        for (size_t j = 0; j < (size_t)n_keys[l]; j++) {
                            float dot = 0;
                            for (size_t d = 0; d < dk; d++)
                                dot = fmaf(k[j * dk + d], qt[d * tile + l], dot);
                            max = fmax(max, s[j] = dot);
                        }
                        const double top = sinks ? fmax(max, sink[l]) : max;
                        for (size_t j = 0; j < (size_t)n_keys[l]; j++) sum += exp(s[j] - top);
                        const double ws = sinks ? exp(sink[l] - top) : 0.0;
                        const double want_lse = top + log(sum + ws), want_w = ws / (sum + ws);
                        for (size_t c = 0; c < dv && bad < 5; c++) {
                            double o = 0;
                            for (size_t j = 0; j < (size_t)n_keys[l]; j++)
                                o += exp(s[j] - top) * v[j * dv + c];
                            o /= sum + ws;
                            const double got = vec[l * ld + c];
                            if (fabs(o) > 1e-3) worst = fmax(worst, fabs(got - o) / fabs(o));
                            if (!(fabs(got - o) <= UKERNEL_REL_TOL * fabs(o) + UKERNEL_ABS_TOL)) {
                                bad++;
                                CHECK(false, "%s d_v %zu nq %zu: lane %zu out[%zu] = %.9g, want "
                                      "%.9g", var->name, dv, nq, l, c, got, o);
                            }
                        }
                        if (!lse) continue;
                        const double gl = vec[l * ld + dv], gw = vec[l * ld + dv + 1];
                        worst = fmax(worst, fabs(gl - want_lse) / fmax(fabs(want_lse), 1.0));
                        if (!(fabs(gl - want_lse) <= UKERNEL_REL_TOL * fabs(want_lse) +
                                                          UKERNEL_ABS_TOL) ||
                            !(fabs(gw - want_w) <= UKERNEL_REL_TOL * want_w + UKERNEL_ABS_TOL) ||
                            (!sinks && gw != 0.0)) {
                            bad++;
                            CHECK(false, "%s d_v %zu nq %zu%s: lane %zu lse %.9g weight %.9g, "
                                  "want %.9g and %.9g", var->name, dv, nq,
                                  sinks ? ", sinks" : "", l, gl, gw, want_lse, want_w);
                        }
                    }
                    free(k), free(v), free(qt), free(vec), free(ref);
                }
        printf("%-40s lse and sinks: in vectors = gml_flash_finish bitwise; max relative error "
               "%.3g\n", var->name, worst);
    }
}

/* ---- no subnormal arithmetic ----------------------------------------------------
 * Scores spread over hundreds (exp(s - max) far below FLT_MIN for most keys)
 * and a max that jumps by hundreds from block to block (the rescale factor
 * too): every variant must form its terms without a subnormal result or
 * operand (on Intel each one costs a microcode assist: 6x slower attention,
 * found on a Xeon). v in [1, 2] keeps the products of normal terms normal.
 * The thread's MXCSR flags show it: underflow (0x10) and denormal operand
 * (0x02) must stay clear. And the outputs stay within the tolerance of
 * attention in double. */
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>

static void check_no_subnormals(void) {
    const size_t dk = 16, dv = 9, nk = 200;
    for (size_t vi = 0; vi < sizeof VARIANTS / sizeof *VARIANTS; vi++) {
        const variant *var = &VARIANTS[vi];
        if (!cpu_runs(var->isa, var->name)) continue;
        const size_t tile = (size_t)var->tile, nq = tile;
        for (int growing = 0; growing < 2; growing++) {
            float *k = malloc(nk * dk * 4), *v = malloc(nk * dv * 4);
            float *qt = aligned_alloc(64, gml_align_up(dk * tile * 4, 64));
            const size_t wfloats = GML_FLASH_WORK_FLOATS(tile, dv);
            float *work = aligned_alloc(64, gml_align_up(wfloats * 4, 64));
            float *outbuf = malloc(nq * dv * 4);
            int32_t n_keys[32];
            float *out_rows[32];
            for (size_t j = 0; j < nk; j++)
                for (size_t d = 0; d < dk; d++) /* growing: scores about 6 j */
                    k[j * dk + d] = growing ? (float)j * rand_uniform(0.4f, 0.6f)
                                            : rand_uniform(-1, 1);
            for (size_t i = 0; i < nk * dv; i++) v[i] = rand_uniform(1, 2);
            for (size_t i = 0; i < dk * tile; i++) /* random: scores within +-500 */
                qt[i] = growing ? rand_uniform(0.5f, 1.0f) : rand_uniform(-60, 60);
            for (size_t l = 0; l < nq; l++) {
                n_keys[l] = (int32_t)(nk - l % 3);
                out_rows[l] = outbuf + l * dv;
            }
            gml_flash_args a = {.nq = nq, .dk = dk, .dv = dv, .qt = qt, .k = k, .ldk = dk,
                                .v = v, .ldv = dv, .n_keys = n_keys, .mask_stride = 1,
                                .out = out_rows, .work = work};
            _mm_setcsr(_mm_getcsr() & ~0x3fu);
            var->fn(&a);
            const unsigned flags = _mm_getcsr() & 0x3fu;
            CHECK((flags & 0x12u) == 0,
                  "%s (%s scores): MXCSR flags 0x%02x after the kernel: a subnormal %s", var->name,
                  growing ? "growing" : "spread", flags,
                  flags & 0x10u ? "result (underflow)" : "operand");
            int bad = 0;
            for (size_t l = 0; l < nq && bad < 3; l++) {
                double s[200], max = -INFINITY, sum = 0;
                for (size_t j = 0; j < (size_t)n_keys[l]; j++) {
                    float dot = 0;
                    for (size_t d = 0; d < dk; d++) dot = fmaf(k[j * dk + d], qt[d * tile + l], dot);
                    s[j] = dot;
                    max = fmax(max, dot);
                }
                for (size_t j = 0; j < (size_t)n_keys[l]; j++) sum += s[j] = exp(s[j] - max);
                for (size_t c = 0; c < dv && bad < 3; c++) {
                    double w = 0;
                    for (size_t j = 0; j < (size_t)n_keys[l]; j++) w += s[j] * v[j * dv + c];
                    w /= sum;
                    const double got = out_rows[l][c];
                    if (!(fabs(got - w) <= UKERNEL_REL_TOL * fabs(w) + UKERNEL_ABS_TOL)) {
                        bad++;
                        CHECK(false, "%s (%s scores): lane %zu out[%zu] = %.9g, want %.9g",
                              var->name, growing ? "growing" : "spread", l, c, got, w);
                    }
                }
            }
            free(k), free(v), free(qt), free(work), free(outbuf);
        }
    }
}
#else
static void check_no_subnormals(void) {}
#endif

/* ---- op level ---------------------------------------------------------------- */

static gml_tensor *random_tensor(gml_context *ctx, int n_dims, const int64_t *ne) {
    gml_tensor *t = gml_new_tensor(ctx, GML_F32, n_dims, ne);
    fill_uniform(t->data, (size_t)gml_nelements(t), -1, 1);
    return t;
}

static double op_worst;

static void op_case(const char *what, gml_context *ctx, gml_tensor *q, gml_tensor *k, gml_tensor *v,
                    gml_tensor *mask, gml_tensor *lens, bool causal) {
    gml_tensor *o = gml_flash_attn(ctx, q, k, v, mask, lens, 0.3f, causal);
    CHECK(o != NULL, "%s: %s", what, gml_last_error(ctx));
    if (!o) return;
    op_worst =
        fmax(op_worst, check_isas(ctx, o, (tolerance){.rel = OP_REL_TOL, .abs = OP_ABS_TOL}, what));
}

static void check_op(void) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 64 << 20});
    /* MHA, causal, the wide blocks */
    gml_tensor *q = random_tensor(ctx, 4, (int64_t[]){2, 3, 70, 16});
    gml_tensor *k = random_tensor(ctx, 4, (int64_t[]){2, 3, 70, 16});
    gml_tensor *v = random_tensor(ctx, 4, (int64_t[]){2, 3, 70, 12});
    op_case("MHA [2,3,70,16], causal", ctx, q, k, v, NULL, NULL, true);
    /* GQA with valid lengths per query, cross */
    gml_tensor *qg = random_tensor(ctx, 4, (int64_t[]){2, 6, 9, 8});
    gml_tensor *kg = random_tensor(ctx, 4, (int64_t[]){2, 2, 140, 8});
    gml_tensor *vg = random_tensor(ctx, 4, (int64_t[]){2, 2, 140, 8});
    gml_tensor *lens = gml_new_tensor_2d(ctx, GML_I32, 2, 9);
    for (int i = 0; i < 18; i++) ((int32_t *)lens->data)[i] = i == 3 ? 0 : (int32_t)rand_int(141);
    op_case("GQA 6/2 [2,6,9,8] x 140 keys, lens [B,Tq]", ctx, qg, kg, vg, NULL, lens, false);
    /* decoding: one query, a few rows per kv head (the narrow blocks) */
    gml_tensor *q1 = random_tensor(ctx, 4, (int64_t[]){2, 8, 1, 32});
    gml_tensor *k1 = random_tensor(ctx, 4, (int64_t[]){2, 2, 300, 32});
    gml_tensor *v1 = random_tensor(ctx, 4, (int64_t[]){2, 2, 300, 32});
    gml_tensor *l1 = gml_new_tensor_1d(ctx, GML_I32, 2);
    ((int32_t *)l1->data)[0] = 257, ((int32_t *)l1->data)[1] = 300;
    op_case("decoding [2,8,1,32] x 300 keys, lens [B]", ctx, q1, k1, v1, NULL, l1, false);
    /* permuted q, k, v as the models give them, an additive mask */
    gml_tensor *x = random_tensor(ctx, 4, (int64_t[]){2, 33, 4, 8});
    gml_tensor *qp = gml_permute(ctx, x, (int[]){0, 2, 1, 3});
    gml_tensor *m = random_tensor(ctx, 2, (int64_t[]){33, 33});
    for (int i = 0; i < 33 * 33; i++) if (rand_int(4) == 0) ((float *)m->data)[i] = -INFINITY;
    op_case("permuted q = k = v [2,4,33,8], mask [33,33], causal", ctx, qp, qp, qp, m, NULL, true);
    /* GQA, causal and valid lengths per query, a full mask holding NaN and
     * +inf at every key they hide (ignored there), and NaN or +inf at a key
     * two rows see (those rows NaN) */
    gml_tensor *qn = random_tensor(ctx, 4, (int64_t[]){2, 6, 20, 8});
    gml_tensor *kn = random_tensor(ctx, 4, (int64_t[]){2, 2, 45, 8});
    gml_tensor *vn = random_tensor(ctx, 4, (int64_t[]){2, 2, 45, 8});
    gml_tensor *ln = gml_new_tensor_2d(ctx, GML_I32, 2, 20);
    gml_tensor *mn = gml_new_tensor_4d(ctx, GML_F32, 2, 6, 20, 45);
    int32_t *lv = ln->data;
    float *mv = mn->data;
    for (int i = 0; i < 40; i++) lv[i] = i == 7 ? 0 : 1 + (int32_t)rand_int(45);
    for (int b = 0; b < 2; b++)
        for (int h = 0; h < 6; h++)
            for (int i = 0; i < 20; i++)
                for (int j = 0; j < 45; j++) {
                    const bool hidden = j > i + (45 - 20) || j >= lv[b * 20 + i];
                    mv[((b * 6 + h) * 20 + i) * 45 + j] = hidden ? (rand_int(2) ? NAN : INFINITY)
                                                          : rand_int(4) == 0 ? -INFINITY
                                                                             : rand_uniform(-2, 0);
                }
    mv[((0 * 6 + 1) * 20 + 3) * 45 + 0] = NAN;       /* row [0,1,3] sees key 0: NaN */
    mv[((1 * 6 + 4) * 20 + 10) * 45 + 0] = INFINITY; /* row [1,4,10]: NaN too */
    op_case("GQA 6/2 [2,6,20,8] x 45 keys, causal, lens [B,Tq], NaN/+inf mask at hidden keys",
            ctx, qn, kn, vn, mn, ln, true);
    /* k with strided rows along d: the reference path of the forward kernel */
    gml_tensor *kt = gml_transpose(ctx, random_tensor(ctx, 4, (int64_t[]){2, 3, 16, 70}), -2, -1);
    op_case("transposed k [2,3,70,16]", ctx, q, kt, v, NULL, NULL, false);
    printf("the op under every ISA: max relative difference %.3g from its reference\n", op_worst);
    gml_free(ctx);
}

int main(void) {
    check_variants();
    check_lse_finish();
    check_no_subnormals();
    check_op();
    return check_report("test_ukernels_flash_attn");
}
