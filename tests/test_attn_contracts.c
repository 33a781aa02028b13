/* The contracts every ISA keeps for masked keys and non-finite scores in
 * attention (ggmlite.h, MASKS; gml_softmax, gml_flash_attn), on hand-made
 * cases with the values they must give, under the reference kernels and
 * every variant the CPU has (skipped with a message otherwise), at 1, 2 and
 * 3 threads (bitwise equal across thread counts), in both graph forms: a
 * flash_attn node, and softmax then a plain matmul with v (unfused):
 *   - masked keys with NaN/inf in K and V (-inf mask, causal, valid lengths):
 *     flash_attn skips them; the unfused matmul is IEEE (0 * NaN = NaN);
 *   - every key masked with NaN in V: flash_attn zeros, unfused NaN;
 *   - scores that overflow to -inf and to +inf (q = 3e38, k = -+3e38, d_k 1
 *     and 2; score + finite mask; softmax's x * scale): a NaN row;
 *   - NaN in q, a +inf or NaN mask at a visible key, NaN/inf in a visible V:
 *     a NaN row; NaN in q with every key masked: zeros;
 *   - the documented differences: a float partial sum of the fast kernels'
 *     dot product, or their float value sums, overflow though the exact
 *     result fits (fast: NaN, reference: finite);
 *   - the NaN trap fires on such NaN rows and not on masked garbage;
 *   - the fast variants run (never a silent fallback to the reference);
 *   - larger cases (many lanes and key blocks) against the reference.
 * The exact cases are among them (named "issue"). */
#include "simd_check.h"

static const gml_isa ISAS[] = {GML_TEST_ISAS};

#define X NAN /* a NaN expected (any payload) */
#define TOL 2e-6

/* One attention case, B = H = G = 1. */
typedef struct att {
    const char *what;
    int64_t tq, tk, dk, dv;
    const float *q, *k, *v; /* [tq][dk], [tk][dk], [tk][dv] */
    const float *mask;      /* [tq][tk] or NULL */
    const int32_t *lens;    /* [tq] (lens [B, Tq]) or NULL */
    bool causal;
    float scale;
    const float *want;      /* [tq][dv]: flash_attn, every ISA */
    const float *want_fast; /* NULL, or flash_attn's under the fast variants (documented) */
    const float *want_unf;  /* NULL (not run), or the unfused graph's, every ISA */
} att;

static gml_tensor *tensor(gml_context *ctx, int64_t r, int64_t c, const float *x) {
    gml_tensor *t = gml_new_tensor_4d(ctx, GML_F32, 1, 1, r, c);
    memcpy(t->data, x, (size_t)(r * c) * 4);
    return t;
}

/* Computes out's graph under every ISA at 1-3 threads; each result against
 * want (want_fast for the fast ISAs when given): NaN where want is NaN,
 * else within TOL (exact zeros where want is 0); the kernel of node `kn`
 * must be the ISA's variant (kprefix...__<isa>), or "reference". */
static void expect(gml_context *ctx, gml_tensor *out, gml_tensor *kn, const char *kprefix,
                   const float *want, const float *want_fast, const char *what) {
    gml_graph *g = gml_build_graph(ctx, &out, 1);
    CHECK(g != NULL, "%s: build: %s", what, gml_last_error(ctx));
    if (!g) return;
    const size_t n = (size_t)gml_nelements(out);
    uint32_t *first = malloc(n * 4), *got = malloc(n * 4);
    for (size_t s = 0; s < sizeof ISAS / sizeof *ISAS; s++) {
        if (!gml_cpu_has(ISAS[s])) {
            printf("skip %s under %s: this CPU lacks it\n", what, gml_isa_name(ISAS[s]));
            continue;
        }
        const float *w = s > 0 && want_fast ? want_fast : want;
        for (int nth = 1; nth <= 3; nth++) {
            uint32_t *y = nth == 1 ? first : got;
            if (!compute_with(g, out, ISAS[s], nth, y)) continue;
            if (nth > 1) {
                CHECK(memcmp(first, got, n * 4) == 0, "%s (%s): %d threads differ from 1", what,
                      gml_isa_name(ISAS[s]), nth);
                continue;
            }
            const char *kname = gml_graph_node_kernel(g, gml_graph_find(g, kn));
            char tag[32]; /* the ISA's part of a micro-kernel's name */
            snprintf(tag, sizeof tag, "__%s", gml_isa_name(ISAS[s]));
            CHECK(kname && (s == 0 ? strcmp(kname, "reference") == 0
                                   : strncmp(kname, kprefix, strlen(kprefix)) == 0 &&
                                         strstr(kname, tag) != NULL),
                  "%s (%s): ran kernel '%s'", what, gml_isa_name(ISAS[s]), kname ? kname : "?");
            for (size_t i = 0; i < n; i++) {
                float a;
                memcpy(&a, &y[i], 4);
                const bool ok = isnan(w[i])                   ? isnan(a)
                                : w[i] == 0 || isinf(w[i]) ? a == w[i]
                                            : fabs((double)a - w[i]) <= TOL * (1 + fabs(w[i]));
                CHECK(ok, "%s (%s): element %zu is %.9g, want %.9g", what, gml_isa_name(ISAS[s]),
                      i, (double)a, (double)w[i]);
            }
        }
    }
    free(first);
    free(got);
    gml_graph_free(g);
}

typedef struct built {
    gml_tensor *fused, *sm, *unfused;
} built;

static built build(gml_context *ctx, const att *c) {
    gml_tensor *q = tensor(ctx, c->tq, c->dk, c->q), *k = tensor(ctx, c->tk, c->dk, c->k);
    gml_tensor *v = tensor(ctx, c->tk, c->dv, c->v);
    gml_tensor *mask = c->mask ? tensor(ctx, c->tq, c->tk, c->mask) : NULL, *lens = NULL;
    if (c->lens) {
        lens = gml_new_tensor_2d(ctx, GML_I32, 1, c->tq);
        memcpy(lens->data, c->lens, (size_t)c->tq * 4);
    }
    built b;
    b.fused = gml_flash_attn(ctx, q, k, v, mask, lens, c->scale, c->causal);
    /* unfused: scores, softmax with the same masks, a plain matmul with v */
    gml_tensor *um = lens ? gml_valid_len_mask(ctx, lens, c->tk) : mask;
    b.sm = gml_softmax(ctx, gml_matmul(ctx, q, gml_transpose(ctx, k, -2, -1)), um, c->scale,
                       c->causal);
    b.unfused = gml_matmul(ctx, b.sm, v);
    CHECK(b.fused && b.unfused, "%s: %s", c->what, gml_last_error(ctx));
    return b;
}

static void run(const att *c) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 4 << 20});
    built b = build(ctx, c);
    if (b.fused && b.unfused) {
        char w[300];
        snprintf(w, sizeof w, "%s [flash_attn]", c->what);
        expect(ctx, b.fused, b.fused, "gml_f32_flash_" /* ukernel__ or dec_ukernel__ (decoding) */, c->want, c->want_fast, w);
        if (c->want_unf) {
            snprintf(w, sizeof w, "%s [softmax + matmul]", c->what);
            expect(ctx, b.unfused, b.sm, "gml_f32_softmax_ukernel__", c->want_unf, NULL, w);
        }
    }
    gml_free(ctx);
}

#define F (const float[])
#define I (const int32_t[])
static const float INF = INFINITY;

static void check_masked_garbage(void) {
    /* the issue: a -inf mask on a key whose V row holds NaN: [1 1] (was
     * [nan nan] under the scalar and AVX2 kernels) */
    run(&(att){"issue: -inf mask, NaN in V", 1, 2, 1, 2, F{1}, F{1, 1}, F{1, 1, X, X}, F{0, -INF},
               NULL, false, 1, F{1, 1}, NULL, F{X, X}});
    run(&(att){"-inf mask, NaN in K and inf in V", 1, 2, 1, 2, F{1}, F{1, X}, F{1, 2, INF, -INF},
               F{0, -INF}, NULL, false, 1, F{1, 2}, NULL, F{X, X}});
    run(&(att){"-inf mask, inf in K and NaN in V, d_k 2", 1, 3, 2, 2, F{1, 1}, F{0, 0, INF, X, 0, 0},
               F{1, 2, X, X, 3, 4}, F{0, -INF, 0}, NULL, false, 1, F{2, 3}, NULL, F{X, X}});
    /* causal: query 0 does not see key 1 (its row read by the lanes with
     * weight 0), query 1 does: NaN */
    run(&(att){"causal, NaN in K and V of a key query 0 does not see", 2, 2, 1, 2, F{1, 1},
               F{1, X}, F{1, 1, X, X}, NULL, NULL, true, 1, F{1, 1, X, X}, NULL,
               F{X, X, X, X}});
    /* valid lengths [B, Tq]: query 0 sees key 0, query 1 both */
    run(&(att){"valid lengths [B,Tq] {1, 2}, NaN in K and V of key 1", 2, 2, 1, 2, F{1, 1},
               F{1, X}, F{1, 1, X, X}, NULL, I{1, 2}, false, 1, F{1, 1, X, X}, NULL,
               F{X, X, X, X}});
    run(&(att){"valid lengths {1, 1}, inf in V of key 1", 2, 2, 1, 2, F{1, 1}, F{1, 1},
               F{1, 1, INF, INF}, NULL, I{1, 1}, false, 1, F{1, 1, 1, 1}, NULL,
               F{X, X, X, X}});
    /* the issue: every key masked, NaN in V: zeros (the reference already
     * did; the fast kernels and the unfused path gave NaN; the unfused path
     * still does: 0 * NaN in the matmul) */
    run(&(att){"issue: every key masked by -inf, NaN in V", 1, 2, 1, 2, F{1}, F{1, 1},
               F{X, X, X, X}, F{-INF, -INF}, NULL, false, 1, F{0, 0}, NULL, F{X, X}});
    run(&(att){"valid length 0, NaN in K and V", 1, 2, 1, 2, F{1}, F{X, X}, F{X, X, X, X}, NULL,
               I{0}, false, 1, F{0, 0}, NULL, F{X, X}});
    /* NaN in q where every key is masked: q is never multiplied: zeros */
    run(&(att){"NaN in q, every key masked", 1, 2, 1, 2, F{X}, F{1, 1}, F{1, 2, 3, 4},
               F{-INF, -INF}, NULL, false, 1, F{0, 0}, NULL, F{0, 0}});
}

static void check_overflow(void) {
    /* the issue: every score overflows to -inf in float: NaN (fast: zeros
     * were given, the reference [1 2]). In the unfused graph the matmul
     * makes the -inf, and softmax takes a -inf input as the overflow it is
     * (only masks mask): NaN too (it gave zeros). */
    run(&(att){"issue: q 3e38, k -3e38 (scores -inf by overflow), d_k 1", 1, 2, 1, 2, F{3e38f},
               F{-3e38f, -3e38f}, F{1, 2, 1, 2}, NULL, NULL, false, 1, F{X, X}, NULL, F{X, X}});
    run(&(att){"q 3e38, k -3e38, d_k 2", 1, 2, 2, 2, F{3e38f, 3e38f},
               F{-3e38f, -3e38f, -3e38f, -3e38f}, F{1, 2, 1, 2}, NULL, NULL, false, 1, F{X, X},
               NULL, F{X, X}});
    /* the issue: overflow to +inf: NaN everywhere (the reference gave [1 2]) */
    run(&(att){"issue: q 3e38, k 3e38 (scores +inf by overflow), d_k 1", 1, 2, 1, 2, F{3e38f},
               F{3e38f, 3e38f}, F{1, 2, 1, 2}, NULL, NULL, false, 1, F{X, X}, NULL, F{X, X}});
    run(&(att){"q 3e38, k 3e38, d_k 2", 1, 2, 2, 2, F{3e38f, 3e38f},
               F{3e38f, 3e38f, 3e38f, 3e38f}, F{1, 2, 1, 2}, NULL, NULL, false, 1, F{X, X}, NULL,
               F{X, X}});
    /* one key fine, one overflowing to -inf: not silently dropped */
    run(&(att){"one score -inf by overflow beside a finite one", 1, 2, 1, 2, F{3e38f},
               F{1e-38f, -3e38f}, F{1, 2, 5, 6}, NULL, NULL, false, 1, F{X, X}, NULL, F{X, X}});
    /* with a mask: causal hides nothing here, the -inf mask key is hidden */
    run(&(att){"-inf by overflow beside a -inf mask", 1, 3, 1, 2, F{3e38f},
               F{1, -3e38f, X}, F{1, 2, 5, 6, X, X}, F{0, 0, -INF}, NULL, false, 1, F{X, X}, NULL,
               F{X, X}});
    /* score + finite mask overflowing to -inf: NaN in both forms */
    run(&(att){"score -3e38 + mask -3e38", 1, 2, 1, 2, F{1}, F{1, -3e38f}, F{1, 2, 5, 6},
               F{0, -3e38f}, NULL, false, 1, F{X, X}, NULL, F{X, X}});
    /* an overflowing key hidden by the mask, causality, a valid length */
    run(&(att){"overflowing score at a -inf mask key", 1, 2, 1, 2, F{3e38f}, F{1e-38f, -3e38f},
               F{1, 2, 5, 6}, F{0, -INF}, NULL, false, 1, F{1, 2}, NULL, F{1, 2}});
    run(&(att){"overflowing score past a valid length", 1, 2, 1, 2, F{3e38f}, F{1e-38f, -3e38f},
               F{1, 2, 5, 6}, NULL, I{1}, false, 1, F{1, 2}, NULL, F{1, 2}});
    /* the documented difference: the fast kernels' float dot product
     * overflows in a partial sum though the score, 6e37, fits: 3.4e38 plus
     * 1e37 overflows whichever of the two comes first (sequential, pairwise,
     * lanes halves: every variant's order) */
    run(&(att){"partial-sum overflow (documented: fast NaN, reference finite)", 1, 1, 4, 2,
               F{1, 1, 1, 1}, F{3.4e38f, 1e37f, 1e37f, -3e38f}, F{5, 7}, NULL, NULL, false, 1,
               F{5, 7}, F{X, X}, NULL});
    /* and their value sums (unnormalized, float) overflow though the answer,
     * 3e38, fits: fast NaN, reference 3e38 */
    run(&(att){"value-sum overflow (documented: fast NaN, reference finite)", 1, 4, 1, 1, F{0},
               F{1, 1, 1, 1}, F{3e38f, 3e38f, 3e38f, 3e38f}, NULL, NULL, false, 1, F{3e38f},
               F{X}, NULL});
}

static void check_other_nonfinite(void) {
    run(&(att){"NaN in q", 1, 2, 1, 2, F{X}, F{1, 1}, F{1, 2, 3, 4}, NULL, NULL, false, 1,
               F{X, X}, NULL, F{X, X}});
    run(&(att){"+inf mask at a visible key", 1, 2, 1, 2, F{1}, F{1, 1}, F{1, 2, 3, 4},
               F{0, INF}, NULL, false, 1, F{X, X}, NULL, F{X, X}});
    run(&(att){"NaN mask at a visible key", 1, 2, 1, 2, F{1}, F{1, 1}, F{1, 2, 3, 4}, F{X, 0},
               NULL, false, 1, F{X, X}, NULL, F{X, X}});
    run(&(att){"NaN and +inf mask at keys causality hides", 3, 3, 1, 1, F{1, 1, 1}, F{1, 1, 1},
               F{1, 2, 3}, F{0, X, INF, 0, 0, X, 0, 0, 0}, NULL, true, 1, F{1, 1.5f, 2}, NULL,
               F{1, 1.5f, 2}});
    /* unfused: the plain matmul gives 0.5 * 1 + 0.5 * inf and 0.5 * 2 + 0.5 * 4 */
    run(&(att){"inf in a visible V", 1, 2, 1, 2, F{1}, F{1, 1}, F{1, 2, INF, 4}, NULL, NULL,
               false, 1, F{X, X}, NULL, F{INF, 3}});
    run(&(att){"NaN in a visible K", 1, 2, 1, 2, F{1}, F{1, X}, F{1, 2, 3, 4}, NULL, NULL, false,
               1, F{X, X}, NULL, F{X, X}});
    /* causal (both queries see keys 0, 1), the mask hides key 2 and its NaN */
    run(&(att){"causal, mask -inf elsewhere", 2, 3, 1, 1, F{1, 1}, F{1, 1, 1}, F{4, 5, X},
               F{0, 0, -INF, 0, 0, -INF}, NULL, true, 1, F{4.5f, 4.5f}, NULL, F{X, X}});
}

/* ---- softmax alone: the weights ------------------------------------------- */

static void sm_case(const char *what, int64_t n, const float *x, const float *mask, float scale,
                    bool causal, int64_t tq, const float *want) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20});
    gml_tensor *xt = tensor(ctx, tq, n, x), *mt = mask ? tensor(ctx, tq, n, mask) : NULL;
    char w[300];
    snprintf(w, sizeof w, "softmax: %s", what);
    gml_tensor *o = gml_softmax(ctx, xt, mt, scale, causal);
    expect(ctx, o, o, "gml_f32_softmax_ukernel__", want, NULL, w);
    /* the gathered path: x transposed in storage */
    gml_tensor *xs = gml_new_tensor_4d(ctx, GML_F32, 1, 1, n, tq);
    for (int64_t i = 0; i < tq; i++)
        for (int64_t j = 0; j < n; j++) ((float *)xs->data)[j * tq + i] = x[i * n + j];
    gml_tensor *og = gml_softmax(ctx, gml_transpose(ctx, xs, -2, -1), mt, scale, causal);
    snprintf(w, sizeof w, "softmax (rows gathered): %s", what);
    expect(ctx, og, og, "gml_f32_softmax_ukernel__", want, NULL, w);
    gml_free(ctx);
}

static void check_softmax(void) {
    sm_case("NaN x at a -inf mask", 2, F{0, X}, F{0, -INF}, 1, false, 1, F{1, 0});
    sm_case("+inf x at a -inf mask", 2, F{0, INF}, F{0, -INF}, 1, false, 1, F{1, 0});
    /* a -inf x is a score (an overflow of the scores' matmul), not a mask */
    sm_case("-inf x: a NaN row", 3, F{-INF, 1, 1}, NULL, 1, false, 1, F{X, X, X});
    sm_case("-inf x, negative scale: a NaN row", 2, F{-INF, 1}, NULL, -1, false, 1, F{X, X});
    sm_case("-inf x, scale 0: a NaN row", 2, F{-INF, 1}, NULL, 0, false, 1, F{X, X});
    sm_case("-inf x at a -inf mask: hidden", 3, F{-INF, 1, 1}, F{-INF, 0, 0}, 1, false, 1,
            F{0, 0.5f, 0.5f});
    sm_case("every key masked, NaN and inf in x", 3, F{X, INF, -INF}, F{-INF, -INF, -INF}, 1,
            false, 1, F{0, 0, 0});
    sm_case("x * scale overflows to -inf", 2, F{1, -3e38f}, NULL, 2, false, 1, F{X, X});
    sm_case("x * scale overflows to +inf", 2, F{1, 3e38f}, NULL, 2, false, 1, F{X, X});
    sm_case("every x * scale overflows to -inf", 2, F{-3e38f, -3e38f}, NULL, 2, false, 1,
            F{X, X});
    sm_case("x + finite mask overflows to -inf", 2, F{1, -3e38f}, F{0, -3e38f}, 1, false, 1,
            F{X, X});
    sm_case("+inf mask at a visible key", 2, F{1, 1}, F{INF, 0}, 1, false, 1, F{X, X});
    sm_case("NaN x at a visible key", 2, F{1, X}, NULL, 1, false, 1, F{X, X});
    sm_case("causal hides NaN, inf and overflow", 4,
            F{1, X, INF, -3e38f, 1, 1, X, INF, 2, 2, 2, X, 1, 1, 1, 1}, NULL, 2, true, 4,
            F{1, 0, 0, 0, 0.5f, 0.5f, 0, 0, 1 / 3.0f, 1 / 3.0f, 1 / 3.0f, 0, 0.25f, 0.25f, 0.25f,
              0.25f});
    /* long rows (the vector loops and their tails): key 37 garbage hidden */
    enum { N = 77 };
    float x[N], m[N], want[N];
    for (int j = 0; j < N; j++) x[j] = 0.5f, m[j] = j % 5 == 0 ? -INF : 0, want[j] = 0;
    x[35] = NAN, x[36] = INFINITY, x[37] = -3e38f;
    m[35] = m[36] = m[37] = -INF;
    int vis = 0;
    for (int j = 0; j < N; j++) vis += m[j] == 0;
    for (int j = 0; j < N; j++) want[j] = m[j] == 0 ? 1.0f / (float)vis : 0;
    sm_case("77 keys, NaN, inf and -3e38 at -inf mask keys", N, x, m, 2, false, 1, want);
    m[37] = 0; /* now seen: -6e38 overflows */
    for (int j = 0; j < N; j++) want[j] = NAN;
    sm_case("77 keys, an overflow to -inf at a visible key", N, x, m, 2, false, 1, want);
}

/* ---- the NaN trap ------------------------------------------------------------ */

static void trap_case(const att *c, bool unfused, bool fires) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 4 << 20});
    built b = build(ctx, c);
    gml_tensor *out = unfused ? b.unfused : b.fused;
    if (!out) {
        gml_free(ctx);
        return;
    }
    gml_set_name(out, "att_out");
    gml_graph *g = gml_build_graph(ctx, &out, 1);
    gml_graph_set_nan_trap(g, true);
    for (size_t s = 0; s < sizeof ISAS / sizeof *ISAS; s++) {
        if (!gml_cpu_has(ISAS[s])) continue;
        gml_set_isa(ISAS[s]);
        const gml_status st = gml_graph_compute(g, 2);
        gml_set_isa(GML_ISA_AUTO);
        if (fires)
            CHECK(st == GML_ERR_NONFINITE && strstr(gml_graph_error(g), "att_out"),
                  "trap on %s%s (%s): status %d, %s", c->what, unfused ? " (unfused)" : "",
                  gml_isa_name(ISAS[s]), (int)st, gml_graph_error(g));
        else
            CHECK(st == GML_OK, "no trap on %s%s (%s): status %d, %s", c->what,
                  unfused ? " (unfused)" : "", gml_isa_name(ISAS[s]), (int)st,
                  gml_graph_error(g));
    }
    gml_graph_free(g);
    gml_free(ctx);
}

static void check_trap(void) {
    const att garbage = {"masked NaN in V", 1, 2, 1, 2, F{1}, F{1, 1}, F{1, 1, X, X}, F{0, -INF},
                         NULL, false, 1, NULL, NULL, NULL};
    const att all_masked = {"every key masked, NaN in V", 1, 2, 1, 2, F{1}, F{1, 1},
                            F{X, X, X, X}, F{-INF, -INF}, NULL, false, 1, NULL, NULL, NULL};
    const att overflow = {"overflow to -inf", 1, 2, 1, 2, F{3e38f}, F{-3e38f, -3e38f},
                          F{1, 2, 1, 2}, NULL, NULL, false, 1, NULL, NULL, NULL};
    trap_case(&garbage, false, false);
    trap_case(&all_masked, false, false);
    trap_case(&overflow, false, true);
    trap_case(&garbage, true, true); /* the unfused matmul: 0 * NaN */
    trap_case(&all_masked, true, true);
}

/* ---- larger cases against the reference --------------------------------------- */

static gml_tensor *rnd(gml_context *ctx, int64_t b, int64_t h, int64_t t, int64_t d) {
    gml_tensor *x = gml_new_tensor_4d(ctx, GML_F32, b, h, t, d);
    fill_uniform(x->data, (size_t)gml_nelements(x), -1, 1);
    return x;
}

static void check_large(void) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 32 << 20});
    const tolerance tol = {.rel = 1e-5, .abs = 2e-6};
    const int64_t B = 2, H = 4, G = 2, Tq = 40, Tk = 150, d = 12;
    gml_tensor *q = rnd(ctx, B, H, Tq, d), *k = rnd(ctx, B, G, Tk, d), *v = rnd(ctx, B, G, Tk, d);
    float *kd = k->data, *vd = v->data;
    /* garbage in K and V at keys 77 (every row's mask hides it) and 149
     * (causal: only the last query of each head sees it: NaN rows) */
    for (int64_t b = 0; b < B; b++)
        for (int64_t g = 0; g < G; g++)
            for (int64_t c = 0; c < d; c++) {
                kd[((b * G + g) * Tk + 77) * d + c] = c % 2 ? NAN : INFINITY;
                vd[((b * G + g) * Tk + 77) * d + c] = c % 3 ? NAN : -INFINITY;
                vd[((b * G + g) * Tk + 149) * d + c] = NAN;
            }
    gml_tensor *m = gml_new_tensor_2d(ctx, GML_F32, Tq, Tk);
    for (int64_t i = 0; i < Tq * Tk; i++)
        ((float *)m->data)[i] = i % Tk == 77 ? -INFINITY : rand_uniform(-1, 0);
    check_isas(ctx, gml_flash_attn(ctx, q, k, v, m, NULL, 0.4f, true), tol,
               "[2,4,40,12] x 150 keys, causal, garbage at masked key 77 and at key 149");
    /* lens [B]: keys past 100 garbage, a -inf mask over 77 */
    gml_tensor *lens = gml_new_tensor_1d(ctx, GML_I32, B);
    ((int32_t *)lens->data)[0] = 100, ((int32_t *)lens->data)[1] = 78;
    gml_tensor *v2 = rnd(ctx, B, G, Tk, d);
    for (int64_t bg = 0; bg < B * G; bg++)
        for (int64_t i = 100 * d; i < Tk * d; i++) ((float *)v2->data)[bg * Tk * d + i] = NAN;
    check_isas(ctx, gml_flash_attn(ctx, q, k, v2, m, lens, 0.4f, false), tol,
               "valid lengths {100, 78}, garbage past them and at masked key 77");
    /* overflow for some rows only: q row 5 of head 1 huge, k key 3 huge */
    gml_tensor *q3 = rnd(ctx, B, H, Tq, d), *k3 = rnd(ctx, B, G, Tk, d);
    for (int64_t c = 0; c < d; c++) {
        ((float *)q3->data)[((0 * H + 1) * Tq + 5) * d + c] = c == 0 ? 3e38f : 0;
        ((float *)k3->data)[((0 * G + 0) * Tk + 3) * d + c] = c == 0 ? -3e38f : 0;
    }
    gml_tensor *v3 = rnd(ctx, B, G, Tk, d);
    check_isas(ctx, gml_flash_attn(ctx, q3, k3, v3, NULL, NULL, 1.0f, false), tol,
               "one row's score overflows to -inf, no mask (that row NaN)");
    check_isas(ctx, gml_flash_attn(ctx, q3, k3, v3, NULL, NULL, 1.0f, true), tol,
               "one row's score overflows to -inf, causal");
    check_isas(ctx, gml_flash_attn(ctx, q3, k3, v3, m, NULL, 1.0f, false), tol,
               "one row's score overflows to -inf, mask");
    gml_free(ctx);
}

int main(void) {
    check_masked_garbage();
    check_overflow();
    check_other_nonfinite();
    check_softmax();
    check_trap();
    check_large();
    return check_report("test_attn_contracts");
}
