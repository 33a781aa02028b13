/* The decode micro-kernels of flash_attn (GML_F32_FLASH_DEC_UKERNELS,
 * ops/ukernels.h "flash attention, decoding"): every variant against the
 * partial (o, m, l) computed here in double, on 1 .. 8 query rows with their
 * own key ranges (empty ones included), odd d_k and d_v (tails of every
 * vector width), chunks [j0, j1) cutting the key blocks anywhere, f32, f16
 * and bf16 K and V, an additive mask with -inf, softcap, ALiBi, windows
 * (first keys); NaN and inf in K and V at hidden keys change nothing; a NaN
 * score at a seen key makes l NaN; an empty chunk is exactly (0, -inf, 0);
 * the kernels write nothing past their rows. Then gml_flash_partial_merge:
 * the partials of the chunks of a row merged in order, finished, against the
 * attention over all keys in double, and the exact empty-side rule. */
#include "../ops/ukernels.h"
#include "simd_check.h"

typedef struct {
    gml_isa isa;
    gml_f32_flash_dec_ukernel *fn;
    const char *name;
} variant;
#define ENTRY(isa, fn, lanes) {isa, fn, #fn},
static const variant VARIANTS[] = {GML_F32_FLASH_DEC_UKERNELS(ENTRY)};

enum { MAXK = 700, MAXD = 80, KB = GML_FLASH_DEC_KEY_BLOCK };

typedef struct {
    size_t nq, dk, dv, nk; /* rows, dims, keys stored */
    gml_type kt, vt;
    _Alignas(64) float q[8][96]; /* scaled, zero padded (ldq 96) */
    uint16_t kh[MAXK][MAXD], vh[MAXK][MAXD];
    float kf[MAXK][MAXD], vf[MAXK][MAXD]; /* the values as f32 */
    int32_t n_keys[8], first_key[8];
    float mask[8][MAXK];
    bool use_mask;
    float softcap, slope[8], qpos[8];
    bool use_alibi;
} problem;

static problem P;

static float as_type(gml_type t, float x, uint16_t *h) {
    if (t == GML_F16) return gml_fp16_to_fp32(*h = gml_fp32_to_fp16(x));
    if (t == GML_BF16) return gml_bf16_to_fp32(*h = gml_fp32_to_bf16(x));
    return x;
}

static void set_kv(size_t j, size_t c, bool isk, float x) {
    uint16_t h = 0;
    const float y = as_type(isk ? P.kt : P.vt, x, &h);
    if (isk) P.kf[j][c] = y, P.kh[j][c] = h;
    else P.vf[j][c] = y, P.vh[j][c] = h;
}

/* The partial of row l over [j0, j1) in double: the kernels' float scores
 * judged as they are (MASKS), arithmetic in double. nan: a seen key's
 * score is not finite. */
static void ref_partial(size_t l, size_t j0, size_t j1, double *o, double *m, double *sum, bool *nan) {
    *m = -INFINITY;
    *sum = 0;
    *nan = false;
    double s[MAXK];
    bool seen[MAXK];
    for (size_t c = 0; c < P.dv; c++) o[c] = 0;
    for (size_t j = j0; j < j1; j++) {
        seen[j] = false;
        if (j < (size_t)P.first_key[l] || j >= (size_t)P.n_keys[l]) continue;
        const float mv = P.use_mask ? P.mask[l][j] : 0.0f;
        if (mv == -INFINITY) continue;
        double dot = 0;
        for (size_t d = 0; d < P.dk; d++) dot += (double)P.q[l][d] * P.kf[j][d];
        if (!isfinite((float)dot)) { *nan = true; continue; }
        if (P.softcap > 0) dot = P.softcap * tanh(dot / P.softcap);
        dot += mv;
        if (P.use_alibi) dot += (double)P.slope[l] * ((double)j - P.qpos[l]);
        s[j] = dot;
        seen[j] = true;
        if (dot > *m) *m = dot;
    }
    for (size_t j = j0; j < j1; j++) {
        if (!seen[j]) continue;
        const double e = exp(s[j] - *m);
        *sum += e;
        for (size_t c = 0; c < P.dv; c++) o[c] += e * P.vf[j][c];
    }
}

static void args_for(gml_flash_dec_args *a, size_t j0, size_t j1, float *o, float *m, float *l,
                     float *work, const float *const *mrows) {
    const size_t ke = P.kt == GML_F32 ? 4 : 2, ve = P.vt == GML_F32 ? 4 : 2;
    const char *kbase = P.kt == GML_F32 ? (const char *)P.kf : (const char *)P.kh;
    const char *vbase = P.vt == GML_F32 ? (const char *)P.vf : (const char *)P.vh;
    *a = (gml_flash_dec_args){.nq = P.nq, .dk = P.dk, .dv = P.dv, .q = &P.q[0][0], .ldq = 96,
                              .k = kbase + j0 * MAXD * ke, .v = vbase + j0 * MAXD * ve,
                              .k_row = MAXD * ke, .v_row = MAXD * ve, .k_type = P.kt,
                              .v_type = P.vt, .j0 = j0, .j1 = j1, .n_keys = P.n_keys,
                              .first_key = P.first_key, .mask = P.use_mask ? mrows : NULL,
                              .mask_stride = 1, .softcap = P.softcap,
                              .slope = P.use_alibi ? P.slope : NULL,
                              .qpos = P.use_alibi ? P.qpos : NULL, .o = o, .ldo = 96, .m = m,
                              .l = l, .work = work};
}

static double worst[8];

/* Runs variant v on chunk [j0, j1) and checks each row's partial. */
static void check_chunk(int vi, size_t j0, size_t j1, const char *what) {
    const variant *v = &VARIANTS[vi];
    enum { PADF = 32 };
    float *o = aligned_alloc(64, (8 * 96 + PADF) * 4), m[8 + 4], l[8 + 4];
    float *work = aligned_alloc(64, GML_FLASH_DEC_WORK_FLOATS * 4);
    const float *mrows[8];
    for (size_t i = 0; i < 8; i++) mrows[i] = P.mask[i];
    for (size_t i = 0; i < 8 * 96 + PADF; i++) o[i] = 555.0f;
    for (size_t i = 0; i < 12; i++) m[i] = l[i] = 777.0f;
    gml_flash_dec_args a;
    args_for(&a, j0, j1, o, m, l, work, mrows);
    v->fn(&a);
    for (size_t i = P.nq * 96; i < 8 * 96 + PADF; i++)
        CHECK(o[i] == 555.0f, "%s %s: wrote o past its %zu rows", v->name, what, P.nq);
    for (size_t i = P.nq; i < 12; i++)
        CHECK(m[i] == 777.0f && l[i] == 777.0f, "%s %s: wrote m/l past its rows", v->name, what);
    for (size_t r = 0; r < P.nq; r++) {
        double ro[MAXD], rm, rl;
        bool nan;
        ref_partial(r, j0, j1, ro, &rm, &rl, &nan);
        if (nan) {
            CHECK(isnan(l[r]), "%s %s row %zu: a NaN score, l %g (want NaN)", v->name, what, r, (double)l[r]);
            continue;
        }
        if (rl == 0) {
            bool zero = m[r] == -INFINITY && l[r] == 0;
            for (size_t c = 0; c < P.dv; c++) zero &= o[r * 96 + c] == 0;
            CHECK(zero, "%s %s row %zu: no key seen, want (0, -inf, 0) exactly, got m %g l %g",
                  v->name, what, r, (double)m[r], (double)l[r]);
            continue;
        }
        /* the same max up to rounding, then l and o / l */
        const double dm = fabs((double)m[r] - rm), scale_l = exp((double)m[r] - rm);
        double err = dm / (1 + fabs(rm));
        err = fmax(err, fabs((double)l[r] - rl / scale_l) / (rl / scale_l));
        for (size_t c = 0; c < P.dv; c++)
            err = fmax(err, fabs((double)o[r * 96 + c] / l[r] - ro[c] / rl) / (1 + fabs(ro[c] / rl)));
        if (err > worst[vi]) worst[vi] = err;
        CHECK(err <= 1e-5, "%s %s row %zu: error %.3g (m %g want %g, l %g)", v->name, what, r, err,
              (double)m[r], rm, (double)l[r]);
        for (size_t c = P.dv; c < 96; c++)
            CHECK(o[r * 96 + c] == 0.0f,
                  "%s %s row %zu: o padding column %zu is %g, want 0", v->name, what, r, c,
                  (double)o[r * 96 + c]);
    }
    free(o);
    free(work);
}

enum { PLAIN, MASKED, OPTIONS, GARBAGE, NAN_SCORE, N_CASES };
static const char *const CASES[] = {"plain", "mask", "softcap+alibi+window", "NaN/inf at hidden keys",
                                    "a NaN score"};

static void setup(size_t nq, size_t dk, size_t dv, size_t nk, gml_type kt, gml_type vt, int c) {
    memset(&P, 0, sizeof P);
    P.nq = nq, P.dk = dk, P.dv = dv, P.nk = nk, P.kt = kt, P.vt = vt;
    for (size_t l = 0; l < nq; l++)
        for (size_t d = 0; d < dk; d++) P.q[l][d] = rand_uniform(-1, 1);
    for (size_t j = 0; j < nk; j++) {
        for (size_t d = 0; d < dk; d++) set_kv(j, d, true, rand_uniform(-1.5f, 1.5f));
        for (size_t d = 0; d < dv; d++) set_kv(j, d, false, rand_uniform(-1, 1));
    }
    for (size_t l = 0; l < nq; l++) {
        /* row 0 sees every key, the others their own ranges; the last none (2+ rows) */
        P.n_keys[l] = l == 0 ? (int32_t)nk : nq > 1 && l == nq - 1 ? 0 : (int32_t)rand_int((int64_t)nk + 1);
        P.first_key[l] = 0;
        for (size_t j = 0; j < nk; j++) P.mask[l][j] = rand_uniform(-2, 2);
    }
    if (c == MASKED || c == GARBAGE)
        for (size_t l = 0; l < nq; l++)
            for (size_t j = 0; j < nk; j++)
                if (rand_int(4) == 0) P.mask[l][j] = -INFINITY;
    P.use_mask = c == MASKED || c == GARBAGE;
    if (c == GARBAGE) /* hidden keys' rows (masked -inf for every row, or past every row) */
        for (size_t j = 0; j < nk; j++) {
            bool hidden = true;
            for (size_t l = 0; l < nq; l++)
                hidden &= P.mask[l][j] == -INFINITY || j >= (size_t)P.n_keys[l];
            if (!hidden) continue;
            for (size_t d = 0; d < dk; d++) set_kv(j, d, true, j % 2 ? NAN : INFINITY);
            for (size_t d = 0; d < dv; d++) set_kv(j, d, false, j % 2 ? INFINITY : NAN);
        }
    if (c == OPTIONS) {
        P.softcap = 1.5f;
        P.use_alibi = true;
        for (size_t l = 0; l < nq; l++) {
            P.slope[l] = 0.05f * (float)(l + 1);
            P.qpos[l] = (float)P.n_keys[l] - 1;
            P.first_key[l] = (int32_t)rand_int((int64_t)P.n_keys[l] + 1); /* a window */
        }
    }
    if (c == NAN_SCORE && nk > 2) P.q[0][0] = NAN; /* row 0 sees keys: its scores NaN */
}

static void merge_check(int vi, size_t nsplit) {
    /* row partials of nsplit chunks merged in order vs all keys in double */
    const variant *v = &VARIANTS[vi];
    float *o = aligned_alloc(64, 8 * 96 * 4), *acc = aligned_alloc(64, 8 * 96 * 4);
    float *work = aligned_alloc(64, GML_FLASH_DEC_WORK_FLOATS * 4);
    float m[8], l[8], am[8], al[8];
    const float *mrows[8];
    for (size_t i = 0; i < 8; i++) mrows[i] = P.mask[i];
    size_t cuts[6] = {0};
    for (size_t s = 1; s < nsplit; s++) cuts[s] = (size_t)rand_int((int64_t)P.nk + 1);
    cuts[nsplit] = P.nk;
    for (size_t s = 1; s < nsplit; s++) /* sorted */
        for (size_t t = s + 1; t < nsplit; t++)
            if (cuts[t] < cuts[s]) { size_t x = cuts[s]; cuts[s] = cuts[t]; cuts[t] = x; }
    for (size_t s = 0; s < nsplit; s++) {
        gml_flash_dec_args a;
        args_for(&a, cuts[s], cuts[s + 1], s ? o : acc, s ? m : am, s ? l : al, work, mrows);
        v->fn(&a);
        if (s)
            for (size_t r = 0; r < P.nq; r++)
                gml_flash_partial_merge(P.dv, acc + r * 96, 1, &am[r], &al[r], o + r * 96, 1, m[r], l[r]);
    }
    for (size_t r = 0; r < P.nq; r++) {
        float out[MAXD];
        gml_flash_partial_finish(P.dv, acc + r * 96, 1, am[r], al[r], NULL, out, 1);
        double ro[MAXD], rm, rl;
        bool nan;
        ref_partial(r, 0, P.nk, ro, &rm, &rl, &nan);
        for (size_t c = 0; c < P.dv; c++) {
            const double want = nan ? NAN : rl > 0 ? ro[c] / rl : 0.0;
            if (isnan(want)) {
                CHECK(isnan(out[c]), "%s merge of %zu: row %zu want NaN, got %g", v->name, nsplit, r, (double)out[c]);
                continue;
            }
            const double err = fabs((double)out[c] - want) / (1 + fabs(want));
            if (err > worst[vi]) worst[vi] = err;
            CHECK(err <= 1e-5, "%s merge of %zu pieces (cuts %zu %zu %zu): row %zu col %zu: %g want %g",
                  v->name, nsplit, cuts[1], cuts[2], cuts[3], r, c, (double)out[c], want);
        }
    }
    free(o), free(acc), free(work);
}

int main(void) {
    static const gml_type TYPES[] = {GML_F32, GML_F16, GML_BF16};
    static const size_t DIMS[][2] = {{1, 1}, {7, 9}, {16, 16}, {17, 33}, {64, 64}, {80, 47}};
    static const size_t KEYS[] = {1, 5, 63, 64, 65, 300};
    int runs = 0;
    for (size_t vi = 0; vi < sizeof VARIANTS / sizeof *VARIANTS; vi++) {
        if (!gml_cpu_has(VARIANTS[vi].isa)) {
            printf("%s: the CPU lacks it, not checked\n", VARIANTS[vi].name);
            continue;
        }
        for (size_t ti = 0; ti < 3; ti++)
            for (size_t di = 0; di < sizeof DIMS / sizeof *DIMS; di++)
                for (size_t ki = 0; ki < sizeof KEYS / sizeof *KEYS; ki++)
                    for (int c = 0; c < N_CASES; c++) {
                        const size_t nq = 1 + (size_t)rand_int(8), nk = KEYS[ki];
                        if ((ti > 0 || di % 2) && c != PLAIN && ki % 2) continue; /* fewer */
                        setup(nq, DIMS[di][0], DIMS[di][1], nk, TYPES[ti], TYPES[(ti + di) % 3], c);
                        char what[160];
                        snprintf(what, sizeof what, "[%s, K %s V %s, nq %zu dk %zu dv %zu keys %zu]",
                                 CASES[c], gml_type_name(P.kt), gml_type_name(P.vt), nq, P.dk, P.dv, nk);
                        check_chunk((int)vi, 0, nk, what);
                        const size_t j0 = (size_t)rand_int((int64_t)nk + 1);
                        const size_t j1 = j0 + (size_t)rand_int((int64_t)(nk - j0) + 1);
                        check_chunk((int)vi, j0, j1, what); /* a chunk anywhere, maybe empty */
                        check_chunk((int)vi, nk, nk, what); /* empty */
                        if (c != NAN_SCORE && (c == PLAIN || ki % 2 == 0))
                            merge_check((int)vi, 1 + (size_t)rand_int(4)); /* 1 - 4 pieces */
                        runs++;
                    }
        printf("%-40s max relative error %.3g against double\n", VARIANTS[vi].name, worst[vi]);
    }
    /* the merge's exact rules */
    float oa[3] = {1, 2, 3}, ob[3] = {4, 5, 6}, ma = 0.5f, la = 2.0f;
    gml_flash_partial_merge(3, oa, 1, &ma, &la, ob, 1, -INFINITY, 0.0f);
    CHECK(oa[0] == 1 && oa[1] == 2 && oa[2] == 3 && ma == 0.5f && la == 2.0f,
          "merge with an empty partial changed the other");
    float oe[3] = {0, 0, 0}, me = -INFINITY, le = 0;
    gml_flash_partial_merge(3, oe, 1, &me, &le, oa, 1, ma, la);
    CHECK(oe[0] == 1 && oe[2] == 3 && me == 0.5f && le == 2.0f, "empty merged with a partial is not it");
    gml_flash_partial_merge(3, oe, 1, &me, &le, ob, 1, 0.25f, NAN);
    CHECK(isnan(le), "a NaN l was lost in the merge");
    float out[3] = {9, 9, 9};
    gml_flash_partial_finish(3, oe, 1, me, le, NULL, out, 1);
    CHECK(isnan(out[0]) && isnan(out[2]), "a NaN l did not finish as a NaN row");
    gml_flash_partial_finish(3, (float[]){0, 0, 0}, 1, -INFINITY, 0.0f, NULL, out, 1);
    CHECK(out[0] == 0 && out[1] == 0 && out[2] == 0, "no key: zeros");
    gml_flash_partial_finish(3, (float[]){1, INFINITY, 1}, 1, 0.0f, 1.0f, NULL, out, 1);
    CHECK(isnan(out[0]) && isnan(out[1]), "an inf value did not make the row NaN");
    printf("%d problems\n", runs);
    return check_report("test_ukernels_flash_dec");
}
