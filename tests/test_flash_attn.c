#define _POSIX_C_SOURCE 200809L
/* gml_flash_attn against two independent computations of the same attention:
 *   - a naive loop written here from the formula (two passes, double), and
 *   - the unfused graph of library ops (matmul, softmax with the masks,
 *     matmul; K and V repeat_interleave'd for GQA),
 * on every mask combination (causal, valid lengths [B] and [B, Tq], additive
 * masks of several broadcast shapes), Tq != Tk both ways, GQA and MQA, T = 1,
 * tails (Tk around the key blocks, odd d_k, d_v != d_k), fully masked rows
 * (exact zeros), scores whose max grows block after block, huge scores,
 * NaN and +inf mask entries (ignored at hidden keys, a NaN row at seen ones;
 * under every ISA), and q, k, v in non-contiguous layouts; every run at 1,
 * 2, 3, 4 and 7 threads under the reference and the best kernels, bitwise
 * equal across thread counts. Fused must equal unfused within 1e-5
 * relative (+ 1e-6 absolute, outputs are O(1)). Also: set_rows (the
 * KV-cache append), after (a dependency edge), builder errors, runtime
 * length errors and the graph-file forms of the three ops. */
#include "check.h"

#include <ggmlite/io.h>
#include <unistd.h>

#define FUSED_RTOL 1e-5
#define FUSED_ATOL 1e-6
/* the naive loop is double throughout: a float kernel stays within this */
#define REF_RTOL 1e-5
#define REF_ATOL 1e-6

enum { MASK_NONE, MASK_FULL, MASK_TQ_TK, MASK_B_TK, MASK_H_TK, N_MASKS };
static const char *const MASK_NAMES[] = {"none", "[B,H,Tq,Tk]", "[Tq,Tk]", "[B,1,1,Tk]",
                                         "[H,1,Tk]"};
enum { LENS_NONE, LENS_B, LENS_BQ };

typedef struct fa_case {
    int64_t B, H, G, Tq, Tk, dk, dv;
    bool causal;
    int lens, mask;
    float scale; /* 0: 1/sqrt(d_k) */
    float lo, hi; /* q and k values in [lo, hi]; 0, 0: [-1, 1] */
    bool growing; /* key j scaled by 1 + j/64: block after block raises the max */
    int layout;   /* picks the layouts of q, k, v */
    bool nonfinite; /* NaN and +inf in the mask at every key causality or the valid
                       lengths hide (ignored), and at two keys rows see (NaN rows) */
} fa_case;

typedef struct fa_run {
    fa_case c;
    gml_tensor *q, *k, *v, *mask, *lens, *fused, *unfused;
    gml_tensor *mask_unf; /* the unfused graph's mask when it differs (nonfinite) */
    double *want;     /* naive loop, [B, H, Tq, d_v] */
    bool *empty;      /* [B, H, Tq]: the row sees no key */
    double *unf;      /* the unfused graph's output (filled by verify) */
    double err_unfused, err_ref; /* max |diff| / max |want| */
} fa_run;

static double g_max_rel_unfused, g_max_rel_ref;
static gml_isa g_isa; /* the kernels CHECK_RUN tries besides the reference; AUTO: the best */

/* ---- the naive loop ------------------------------------------------------- */

static void naive(fa_run *r) {
    const fa_case *c = &r->c;
    float *q = chk_dense(r->q), *k = chk_dense(r->k), *v = chk_dense(r->v);
    float *m = r->mask ? chk_dense(r->mask) : NULL;
    int32_t *lens = r->lens ? chk_dense(r->lens) : NULL;
    const int64_t *mne = r->mask ? r->mask->ne : NULL;
    double *s = malloc((size_t)c->Tk * sizeof *s);
    const double scale = c->scale;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++) {
            const int64_t g = h / (c->H / c->G);
            for (int64_t i = 0; i < c->Tq; i++) {
                const float *qi = q + ((b * c->H + h) * c->Tq + i) * c->dk;
                double max = -INFINITY;
                bool nan = false; /* a NaN score (NaN in the mask at a key it sees) */
                for (int64_t j = 0; j < c->Tk; j++) {
                    s[j] = -INFINITY;
                    if (c->causal && j > i + (c->Tk - c->Tq)) continue;
                    if (lens && j >= lens[c->lens == LENS_B ? b : b * c->Tq + i]) continue;
                    const float *kj = k + ((b * c->G + g) * c->Tk + j) * c->dk;
                    double dot = 0;
                    for (int64_t d = 0; d < c->dk; d++) dot += (double)qi[d] * kj[d];
                    s[j] = dot * scale;
                    if (m)
                        s[j] += m[(((b % mne[0]) * mne[1] + h % mne[1]) * mne[2] + i % mne[2]) *
                                      mne[3] + j % mne[3]];
                    nan |= isnan(s[j]);
                    if (s[j] > max) max = s[j];
                }
                double *out = r->want + ((b * c->H + h) * c->Tq + i) * c->dv;
                r->empty[(b * c->H + h) * c->Tq + i] = max == -INFINITY && !nan;
                double sum = 0;
                for (int64_t d = 0; d < c->dv; d++) out[d] = nan ? NAN : 0;
                if (max == -INFINITY || nan) continue; /* +inf: inf - inf below, NaN */
                for (int64_t j = 0; j < c->Tk; j++) {
                    s[j] = s[j] == -INFINITY ? 0 : exp(s[j] - max);
                    sum += s[j];
                }
                for (int64_t j = 0; j < c->Tk; j++) {
                    const float *vj = v + ((b * c->G + g) * c->Tk + j) * c->dv;
                    for (int64_t d = 0; d < c->dv; d++) out[d] += s[j] / sum * vj[d];
                }
            }
        }
    free(q), free(k), free(v), free(m), free(lens), free(s);
}

/* ---- the unfused graph ---------------------------------------------------- */

static gml_tensor *unfused(gml_context *ctx, const fa_run *r) {
    const fa_case *c = &r->c;
    gml_tensor *k = r->k, *v = r->v;
    if (c->G != c->H) {
        k = gml_repeat_interleave(ctx, k, (int)(c->H / c->G), 1);
        v = gml_repeat_interleave(ctx, v, (int)(c->H / c->G), 1);
    }
    gml_tensor *s = gml_matmul(ctx, r->q, gml_transpose(ctx, k, -2, -1)); /* [B, H, Tq, Tk] */
    gml_tensor *mask = r->mask_unf ? r->mask_unf : r->mask;
    if (r->lens) {
        gml_tensor *lm = gml_valid_len_mask(ctx, r->lens, c->Tk); /* [B, 1, 1|Tq, Tk] */
        mask = mask ? gml_add(ctx, mask, lm) : lm;
    }
    gml_tensor *a = gml_softmax(ctx, s, mask, c->scale, c->causal);
    return gml_set_name(gml_matmul(ctx, a, v), "unfused"); /* [B, H, Tq, d_v] */
}

/* ---- running a case --------------------------------------------------------- */

static double max_abs(const double *x, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

static void verify(void *user) {
    fa_run *r = user;
    const int64_t n = chk_numel(r->fused), rows = n / r->c.dv;
    CHECK_CLOSE(r->fused, r->want, REF_ATOL, REF_RTOL, "fused vs the naive loop");
    float *u = chk_dense(r->unfused), *f = chk_dense(r->fused);
    for (int64_t e = 0; e < n; e++) r->unf[e] = u[e];
    CHECK_CLOSE(r->fused, r->unf, FUSED_ATOL, FUSED_RTOL, "fused vs unfused");
    double du = 0, dr = 0;
    for (int64_t e = 0; e < n; e++) {
        du = fmax(du, fabs(f[e] - r->unf[e]));
        dr = fmax(dr, fabs(f[e] - r->want[e]));
    }
    const double scale_u = fmax(max_abs(r->unf, n), 1e-30),
                 scale_r = fmax(max_abs(r->want, n), 1e-30);
    r->err_unfused = fmax(r->err_unfused, du / scale_u);
    r->err_ref = fmax(r->err_ref, dr / scale_r);
    for (int64_t row = 0; row < rows; row++) {
        if (!r->empty[row]) continue;
        bool zero = true;
        for (int64_t d = 0; d < r->c.dv; d++) zero = zero && f[row * r->c.dv + d] == 0.0f;
        if (!CHECK(zero, "row %lld sees no key: want exact zeros", (long long)row)) break;
    }
    free(u), free(f);
}

/* Mostly 0, some -inf, some finite negative biases; with mask_row, the
 * first row entirely -inf. */
static void fill_mask(gml_tensor *m, chk_rng *r, bool mask_row) {
    for (int64_t e = 0; e < chk_numel(m); e++) {
        int k = chk_randint(r, 0, 7);
        *(float *)chk_at(m, e) = k < 4 ? 0.0f : k < 6 ? -INFINITY : chk_uniform(r, -3, 0);
    }
    for (int64_t j = 0; mask_row && j < m->ne[3]; j++) *(float *)chk_at(m, j) = -INFINITY;
}

/* Whether key j is hidden from query i of batch b, by causality or by the
 * valid lengths. */
static bool key_hidden(const fa_run *r, int64_t b, int64_t i, int64_t j) {
    const fa_case *c = &r->c;
    if (c->causal && j > i + (c->Tk - c->Tq)) return true;
    if (!r->lens) return false;
    const int32_t *l = r->lens->data;
    return j >= l[c->lens == LENS_B ? b : b * c->Tq + i];
}

/* Whether mask element e (of any broadcast shape) is hidden from every
 * score it is added to (hidden true), or from none (hidden false). */
static bool mask_entry_all(const fa_run *r, int64_t e, bool hidden) {
    int64_t ix[GML_MAX_DIMS];
    chk_index(r->mask, e, ix);
    const int64_t *mne = r->mask->ne;
    for (int64_t b = ix[0]; b < r->c.B; b += mne[0] == 1 ? 1 : r->c.B)
        for (int64_t i = ix[2]; i < r->c.Tq; i += mne[2] == 1 ? 1 : r->c.Tq)
            if (key_hidden(r, b, i, ix[3]) != hidden) return false;
    return true;
}

/* NaN or +inf at every mask entry hidden from all its scores (fused and the
 * naive loop skip those keys, as every kernel must: -inf + NaN would make a
 * NaN row), then NaN and +inf at two entries every score sees (those rows
 * are NaN). The unfused graph adds the valid lengths' -inf mask to this
 * one, so it gets a copy with 0 at the hidden entries: the same attention,
 * written the way a graph of ops can say it. */
static void poison_mask(gml_context *ctx, fa_run *r, chk_rng *rng) {
    gml_tensor *m = r->mask;
    const int64_t n = chk_numel(m);
    float *unf = chk_dense(m);
    for (int64_t e = 0; e < n; e++)
        if (mask_entry_all(r, e, true)) {
            *(float *)chk_at(m, e) = chk_randint(rng, 0, 1) ? NAN : INFINITY;
            unf[e] = 0.0f;
        }
    int placed = 0;
    for (int64_t k = 0; k < n && placed < 2; k++) {
        const int64_t e = (k * 7919 + n / 3) % n; /* spread over the mask */
        if (!mask_entry_all(r, e, false)) continue;
        *(float *)chk_at(m, e) = unf[e] = placed++ ? INFINITY : NAN;
    }
    CHECK(placed == 2, "nonfinite: %d mask entries every score sees, want 2", placed);
    if (r->lens) {
        r->mask_unf = chk_new_layout(ctx, GML_F32, m->n_dims, m->ne + GML_MAX_DIMS - m->n_dims,
                                     CHK_CONTIGUOUS, "mask_unf");
        chk_write(r->mask_unf, unf);
    }
    free(unf);
}

static void run_case(fa_case c, uint64_t seed) {
    if (c.scale == 0) c.scale = (float)(1.0 / sqrt((double)c.dk));
    if (c.lo == 0 && c.hi == 0) c.lo = -1, c.hi = 1;
    chk_rng rng = chk_seed(seed);
    gml_context *ctx = chk_ctx(4 << 20);
    fa_run r = {.c = c};
    const chk_layout lq = (chk_layout)(c.layout % CHK_N_LAYOUTS),
                     lk = (chk_layout)((c.layout / 2) % CHK_N_LAYOUTS),
                     lv = (chk_layout)((c.layout / 3 + 1) % CHK_N_LAYOUTS);
    r.q = chk_new_input(ctx, GML_F32, 4, (int64_t[]){c.B, c.H, c.Tq, c.dk}, lq, "q", &rng, c.lo,
                        c.hi);
    r.k = chk_new_input(ctx, GML_F32, 4, (int64_t[]){c.B, c.G, c.Tk, c.dk}, lk, "k", &rng, c.lo,
                        c.hi);
    r.v = chk_new_input(ctx, GML_F32, 4, (int64_t[]){c.B, c.G, c.Tk, c.dv}, lv, "v", &rng, -1, 1);
    if (c.growing)
        for (int64_t e = 0; e < chk_numel(r.k); e++)
            *(float *)chk_at(r.k, e) *= 1.0f + (float)((e / c.dk) % c.Tk) / 64.0f;
    switch (c.mask) {
    case MASK_FULL:
        r.mask =
            chk_new_layout(ctx, GML_F32, 4, (int64_t[]){c.B, c.H, c.Tq, c.Tk}, CHK_SLICED, "mask");
        break;
    case MASK_TQ_TK:
        r.mask = chk_new_layout(ctx, GML_F32, 2, (int64_t[]){c.Tq, c.Tk}, CHK_CONTIGUOUS, "mask");
        break;
    case MASK_B_TK:
        r.mask =
            chk_new_layout(ctx, GML_F32, 4, (int64_t[]){c.B, 1, 1, c.Tk}, CHK_CONTIGUOUS, "mask");
        break;
    case MASK_H_TK:
        r.mask = chk_new_layout(ctx, GML_F32, 3, (int64_t[]){c.H, 1, c.Tk}, CHK_TRANSPOSED, "mask");
        break;
    }
    if (r.mask) fill_mask(r.mask, &rng, c.mask == MASK_FULL || c.mask == MASK_TQ_TK);
    if (c.lens) {
        const int64_t n = c.lens == LENS_B ? c.B : c.B * c.Tq;
        r.lens = c.lens == LENS_B ? gml_new_tensor_1d(ctx, GML_I32, c.B)
                                  : gml_new_tensor_2d(ctx, GML_I32, c.B, c.Tq);
        gml_set_name(r.lens, "lens");
        int32_t *l = r.lens->data;
        for (int64_t i = 0; i < n; i++) l[i] = chk_randint(&rng, 0, (int)c.Tk);
        l[0] = (int32_t)c.Tk; /* the edges: a full row and an empty one */
        if (n > 1) l[n - 1] = 0;
    }
    if (c.nonfinite && r.mask) poison_mask(ctx, &r, &rng);
    char desc[256];
    chk_case("B%lld H%lld G%lld Tq%lld Tk%lld d_k%lld d_v%lld%s lens %s mask %s%s, q %s k %s v "
             "%s%s",
             (long long)c.B, (long long)c.H, (long long)c.G, (long long)c.Tq, (long long)c.Tk,
             (long long)c.dk, (long long)c.dv, c.causal ? " causal" : "",
             c.lens == LENS_B ? "[B]" : c.lens == LENS_BQ ? "[B,Tq]" : "none", MASK_NAMES[c.mask],
             c.nonfinite ? " (NaN, +inf)" : "", chk_layout_name(lq), chk_layout_name(lk),
             chk_layout_name(lv), c.growing ? ", growing keys" : "");
    r.fused = gml_set_name(gml_flash_attn(ctx, r.q, r.k, r.v, r.mask, r.lens, c.scale, c.causal),
                           "fused");
    r.unfused = unfused(ctx, &r);
    if (!CHECK(r.fused && r.unfused, "build: %s", gml_last_error(ctx))) {
        gml_free(ctx);
        return;
    }
    char s[64];
    snprintf(s, sizeof s, "[%lld,%lld,%lld,%lld]", (long long)c.B, (long long)c.H, (long long)c.Tq,
             (long long)c.dv);
    CHECK(strcmp(gml_format_shape(r.fused, desc, sizeof desc), s) == 0, "shape %s, want %s", desc,
          s);
    const int64_t n = c.B * c.H * c.Tq * c.dv;
    r.want = malloc((size_t)n * sizeof *r.want);
    r.unf = malloc((size_t)n * sizeof *r.unf);
    r.empty = malloc((size_t)(c.B * c.H * c.Tq) * sizeof *r.empty);
    naive(&r);
    gml_tensor *outs[] = {r.fused, r.unfused};
    gml_graph *g = gml_build_graph(ctx, outs, 2);
    CHECK_RUN(g, .outs = outs, .n_outs = 2, .verify = verify, .user = &r, .isa = g_isa);
    g_max_rel_unfused = fmax(g_max_rel_unfused, r.err_unfused);
    g_max_rel_ref = fmax(g_max_rel_ref, r.err_ref);
    gml_graph_free(g);
    free(r.want), free(r.unf), free(r.empty);
    gml_free(ctx);
}

/* ---- the cases ---------------------------------------------------------------- */

static void test_masks_and_shapes(void) {
    static const fa_case shapes[] = {
        {.B = 2, .H = 4, .G = 4, .Tq = 5, .Tk = 5, .dk = 8, .dv = 8},
        {.B = 1, .H = 1, .G = 1, .Tq = 1, .Tk = 1, .dk = 1, .dv = 1},      /* T = 1 */
        {.B = 2, .H = 6, .G = 2, .Tq = 7, .Tk = 33, .dk = 7, .dv = 5},     /* GQA, odd d_k */
        {.B = 3, .H = 8, .G = 1, .Tq = 4, .Tk = 65, .dk = 3, .dv = 16},    /* MQA */
        {.B = 2, .H = 2, .G = 2, .Tq = 9, .Tk = 4, .dk = 16, .dv = 16},    /* Tq > Tk */
        {.B = 2, .H = 4, .G = 2, .Tq = 1, .Tk = 130, .dk = 64, .dv = 64},  /* decoding */
        {.B = 1, .H = 3, .G = 3, .Tq = 33, .Tk = 31, .dk = 5, .dv = 3},
        {.B = 1, .H = 2, .G = 1, .Tq = 40, .Tk = 140, .dk = 32, .dv = 24}, /* many blocks */
    };
    const size_t big = sizeof shapes / sizeof *shapes - 1; /* fewer masks: a fast ASan run */
    uint64_t seed = 1;
    int k = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int causal = 0; causal < 2; causal++)
            for (int lens = LENS_NONE; lens <= LENS_BQ; lens++)
                for (int mask = MASK_NONE; mask < N_MASKS; mask++, k++) {
                    if (s == big && mask != MASK_NONE && mask != MASK_FULL) continue;
                    fa_case c = shapes[s];
                    c.causal = causal;
                    c.lens = lens;
                    c.mask = mask;
                    c.layout = k;
                    if (k % 5 == 0) c.scale = 0.3f;
                    run_case(c, seed++);
                }
}

/* Key counts around every block size a kernel may use, one query block and
 * more; the max growing block after block (rescaling); huge scores. */
static void test_tails_and_values(void) {
    static const int64_t tks[] = {1,  2,  7,  8,  15,  16,  17,  31, 32,
                                  33, 63, 64, 65, 127, 128, 129, 257};
    static const int64_t tqs[] = {1, 3, 16, 17, 33};
    uint64_t seed = 1000;
    for (size_t i = 0; i < sizeof tks / sizeof *tks; i++) {
        fa_case c = {.B = 1,
                     .H = 2,
                     .G = 1,
                     .Tq = tqs[i % 5],
                     .Tk = tks[i],
                     .dk = 1 + 2 * (int64_t)i,
                     .dv = 9,
                     .causal = i % 2,
                     .lens = (int)(i % 3),
                     .layout = (int)i};
        run_case(c, seed++);
    }
    for (int causal = 0; causal < 2; causal++) {
        run_case((fa_case){.B = 2, .H = 2, .G = 2, .Tq = 20, .Tk = 150, .dk = 16, .dv = 16,
                           .causal = causal, .lo = 0, .hi = 1, .growing = true},
                 seed++);
        run_case((fa_case){.B = 1, .H = 2, .G = 2, .Tq = 9, .Tk = 70, .dk = 4, .dv = 8,
                           .causal = causal, .lo = -300, .hi = 300, .scale = 1},
                 seed++); /* scores up to 3.6e5: only the max survives */
    }
}

/* NaN and +inf in the mask at keys causality or the valid lengths hide are
 * ignored (by every kernel: the AVX2 and AVX-512 ones once added the mask
 * after setting those scores to -inf, making the rows NaN); at a key a row
 * sees they make it NaN. Rows of one kernel block see different numbers of
 * keys (causal, or lengths per query), so hidden keys sit inside the key
 * blocks. Every ISA the CPU has, each with the reference. */
static void test_nonfinite_masks(void) {
    static const fa_case cases[] = {
        {.B = 2, .H = 6, .G = 2, .Tq = 20, .Tk = 45, .dk = 8, .dv = 8, .causal = true,
         .mask = MASK_TQ_TK},
        {.B = 2, .H = 6, .G = 2, .Tq = 20, .Tk = 45, .dk = 7, .dv = 5, .causal = true,
         .lens = LENS_BQ, .mask = MASK_FULL, .layout = 1},
        {.B = 2, .H = 4, .G = 2, .Tq = 3, .Tk = 130, .dk = 16, .dv = 16, .lens = LENS_BQ,
         .mask = MASK_FULL, .layout = 2}, /* few rows: the narrow variants */
        {.B = 1, .H = 2, .G = 1, .Tq = 40, .Tk = 140, .dk = 32, .dv = 24, .lens = LENS_BQ,
         .mask = MASK_FULL, .layout = 3}, /* many key blocks */
    };
    static const gml_isa isas[] = {GML_TEST_FAST_ISAS};
    for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
        if (!gml_cpu_has(isas[k])) {
            printf("skip non-finite masks under %s: this CPU lacks it\n", gml_isa_name(isas[k]));
            continue;
        }
        g_isa = isas[k];
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            fa_case c = cases[i];
            c.nonfinite = true;
            run_case(c, 3000 + i);
        }
    }
    g_isa = GML_ISA_AUTO;
}

/* ---- set_rows ---------------------------------------------------------------- */

typedef struct sr_run {
    gml_tensor *dst, *out;
    float *want;
} sr_run;

static void verify_set_rows(void *user) {
    sr_run *r = user;
    CHECK_EQUAL(r->out, r->want, "set_rows result");
    CHECK_EQUAL(r->dst, r->want, "set_rows wrote into dst");
}

/* dst [A, C, N, d] (or fewer dims), src rows at idx; duplicates: last wins. */
static void set_rows_case(int n_dims, bool per_slice, bool sliced_dst, bool dup, uint64_t seed) {
    chk_rng rng = chk_seed(seed);
    gml_context *ctx = chk_ctx(1 << 20);
    const int64_t full[4] = {3, 2, 10, 5}, nrows = 4;
    const int64_t *ne = full + 4 - n_dims;
    int64_t sne[4];
    memcpy(sne, ne, sizeof(int64_t) * (size_t)n_dims);
    sne[n_dims - 2] = nrows;
    sr_run r;
    r.dst = chk_new_input(ctx, GML_F32, n_dims, ne, sliced_dst ? CHK_SLICED : CHK_CONTIGUOUS,
                          "cache", &rng, -1, 1);
    gml_tensor *src = chk_new_input(ctx, GML_F32, n_dims, sne, (chk_layout)(seed % CHK_N_LAYOUTS),
                                    "rows", &rng, -1, 1);
    const int64_t A = ne[0];
    gml_tensor *idx = per_slice ? gml_new_tensor_2d(ctx, GML_I32, A, nrows)
                                : gml_new_tensor_1d(ctx, GML_I32, nrows);
    gml_set_name(idx, "pos");
    int32_t *ix = idx->data;
    const int64_t N = ne[n_dims - 2], d = ne[n_dims - 1];
    for (int64_t i = 0; i < gml_nelements(idx); i++)
        ix[i] = dup && i % nrows == 3 ? ix[i - 2] : chk_randint(&rng, 0, (int)N - 1);
    chk_case("set_rows %d-D dst %s, idx %s%s", n_dims, sliced_dst ? "sliced" : "contiguous",
             per_slice ? "[A, n]" : "[n]", dup ? ", a repeated index" : "");
    /* want: dst with the rows written in order */
    const int64_t numel = chk_numel(r.dst), slices = numel / (N * d);
    r.want = chk_dense(r.dst);
    float *s = chk_dense(src);
    for (int64_t sl = 0; sl < slices; sl++) {
        const int64_t a = n_dims == 2 ? 0 : sl / (slices / A);
        for (int64_t i = 0; i < nrows; i++) {
            const int32_t row = ix[per_slice ? a * nrows + i : i];
            memcpy(r.want + (sl * N + row) * d, s + (sl * nrows + i) * d,
                   (size_t)d * sizeof(float));
        }
    }
    free(s);
    r.out = gml_set_rows(ctx, r.dst, src, idx);
    if (CHECK(r.out, "set_rows: %s", gml_last_error(ctx))) {
        CHECK(gml_same_shape(r.out, r.dst) && r.out->data == r.dst->data && gml_is_view(r.out),
              "set_rows returns a view of all of dst");
        gml_graph *g = gml_build_graph(ctx, &r.out, 1);
        CHECK_RUN(g, .outs = &r.out, .n_outs = 1, .verify = verify_set_rows, .user = &r);
        gml_graph_free(g);
    }
    free(r.want);
    gml_free(ctx);
}

static void test_set_rows(void) {
    uint64_t seed = 2000;
    for (int n_dims = 2; n_dims <= 4; n_dims++)
        for (int per_slice = 0; per_slice < 2; per_slice++)
            for (int sliced = 0; sliced < 2; sliced++) {
                if (per_slice && n_dims == 2) continue;
                set_rows_case(n_dims, per_slice, sliced, false, seed++);
                set_rows_case(n_dims, per_slice, sliced, true, seed++);
            }

    chk_case("set_rows errors");
    gml_context *ctx = chk_ctx(1 << 20);
    gml_tensor *cache = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 2, 3, 8, 4), "cache");
    gml_tensor *rows = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 2, 3, 1, 4), "k_new");
    gml_tensor *pos = gml_set_name(gml_new_tensor_2d(ctx, GML_I32, 2, 1), "pos");
    gml_tensor *bad = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 2, 3, 1, 5), "bad");
    CHECK(!gml_set_rows(ctx, cache, bad, pos), "d differs: built");
    CHECK_CONTAINS(gml_last_error(ctx),
                   "set_rows(cache, bad, pos): src f32 [2,3,1,5] does not fit dst f32 [2,3,8,4]");
    gml_clear_error(ctx);
    gml_tensor *fpos = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 2, 1), "fpos");
    CHECK(!gml_set_rows(ctx, cache, rows, fpos), "f32 indices: built");
    CHECK_CONTAINS(gml_last_error(ctx),
                   "set_rows(cache, k_new, fpos): indices must be i32 [1] or [A, n]");
    gml_clear_error(ctx);
    gml_tensor *pos3 = gml_new_tensor_2d(ctx, GML_I32, 3, 1);
    CHECK(!gml_set_rows(ctx, cache, rows, pos3), "idx [3, 1] for A = 2: built");
    gml_clear_error(ctx);
    /* an index past N fails compute and names it */
    gml_tensor *out = gml_set_rows(ctx, cache, rows, pos);
    ((int32_t *)pos->data)[0] = 2;
    ((int32_t *)pos->data)[1] = 8;
    gml_graph *g = gml_build_graph(ctx, &out, 1);
    CHECK(g && gml_graph_compute(g, 2) == GML_ERR_INVALID, "index 8 of 8 rows computed");
    if (g)
        CHECK_CONTAINS(gml_graph_error(g),
                       "set_rows(cache, k_new, pos): index 8 at [1,0] is out of range [0, 8)");
    gml_graph_free(g);
    gml_free(ctx);
}

/* ---- after ---------------------------------------------------------------- */

/* A cpy into a slot of a cache, and a reader of the whole cache listed as
 * the graph's first output: only the edge gml_after adds orders the reader
 * after the copy. */
static void test_after(void) {
    chk_case("after: a reader of the whole cache runs after a cpy into its slot");
    gml_context *ctx = chk_ctx(1 << 20);
    chk_rng rng = chk_seed(7);
    gml_tensor *cache = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, 2, 6, 4), "cache");
    chk_fill_value(cache, 0.5f);
    gml_tensor *row =
        chk_new_input(ctx, GML_F32, 3, (int64_t[]){2, 1, 4}, CHK_SLICED, "k_new", &rng, -1, 1);
    gml_tensor *slot =
        gml_view(ctx, cache, 3, (int64_t[]){2, 1, 4},
                 (size_t[]){cache->nb[1], cache->nb[2], cache->nb[3]}, 3 * cache->nb[2]);
    gml_tensor *cp = gml_cpy(ctx, row, slot);
    gml_tensor *all = gml_after(ctx, cache, cp);
    gml_tensor *reader = gml_set_name(gml_scale(ctx, all, 2.0f), "reader");
    if (!CHECK(reader, "build: %s", gml_last_error(ctx))) return;
    CHECK(all->op == GML_OP_AFTER && gml_is_view(all) && all->data == cache->data &&
              gml_same_shape(all, cache) && all->src[0] == cache && all->src[1] == cp,
          "after is a view of the cache with the copy as its second source");
    CHECK_CONTAINS(all->name, "(after ");
    gml_tensor *outs[] = {reader, cp};
    gml_graph *g = gml_build_graph(ctx, outs, 2);
    CHECK(gml_graph_find(g, cp) < gml_graph_find(g, all) &&
              gml_graph_find(g, all) < gml_graph_find(g, reader),
          "node order: cpy %d, after %d, reader %d", gml_graph_find(g, cp), gml_graph_find(g, all),
          gml_graph_find(g, reader));
    float want[48], *r = chk_dense(row);
    for (int i = 0; i < 48; i++) want[i] = 1.0f;
    for (int b = 0; b < 2; b++)
        for (int d = 0; d < 4; d++) want[(b * 6 + 3) * 4 + d] = 2.0f * r[b * 4 + d];
    free(r);
    CHECK_RUN(g, .outs = outs, .n_outs = 1);
    CHECK(gml_graph_compute(g, 2) == GML_OK, "compute: %s", gml_graph_error(g));
    CHECK_EQUAL(reader, want, "the reader sees the copied row");
    gml_graph_free(g);
    CHECK(!gml_after(ctx, cache, NULL), "after(t, NULL) builds");
    gml_free(ctx);
}

/* ---- errors ------------------------------------------------------------------ */

static void expect_fail(gml_context *ctx, gml_tensor *t, const char *want) {
    CHECK(t == NULL, "built; expected \"%s\"", want);
    CHECK_CONTAINS(gml_last_error(ctx), want);
    gml_clear_error(ctx);
}

static void test_errors(void) {
    chk_case("flash_attn errors");
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true});
    gml_tensor *q = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 2, 8, 10, 64), "q");
    gml_tensor *k = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 2, 2, 12, 64), "k");
    gml_tensor *v = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 2, 2, 12, 32), "v");
    gml_tensor *t = gml_flash_attn(ctx, q, k, v, NULL, NULL, 0.125f, true);
    CHECK(t && t->op == GML_OP_FLASH_ATTN, "well-formed: %s", gml_last_error(ctx));
    char s[64];
    CHECK(t && strcmp(gml_format_shape(t, s, sizeof s), "[2,8,10,32]") == 0, "shape %s", s);
    /* stored [B, Tq, H, d_v]: permuted to that order it is contiguous */
    CHECK(t && !gml_is_contiguous(t) &&
              gml_is_contiguous(gml_permute(ctx, t, (int[]){0, 2, 1, 3})),
          "the output is stored head-interleaved");
    gml_tensor *k5 = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 2, 2, 12, 32), "k5");
    expect_fail(
        ctx, gml_flash_attn(ctx, q, k5, v, NULL, NULL, 1, false),
        "flash_attn(q, k5, v): q and k differ in d_k: q [2,8,10,64], k [2,2,12,32], v [2,2,12,32]");
    gml_tensor *k3 = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 2, 3, 12, 64), "k3");
    gml_tensor *v3 = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 2, 3, 12, 32), "v3");
    expect_fail(ctx, gml_flash_attn(ctx, q, k3, v3, NULL, NULL, 1, false),
                "flash_attn(q, k3, v3): kv heads 3 do not divide query heads 8");
    gml_tensor *kb = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 1, 2, 12, 64), "kb");
    expect_fail(ctx, gml_flash_attn(ctx, q, kb, v, NULL, NULL, 1, false),
                "flash_attn(q, kb, v): batch sizes differ");
    gml_tensor *vt = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 2, 2, 11, 32), "vt");
    expect_fail(ctx, gml_flash_attn(ctx, q, k, vt, NULL, NULL, 1, false),
                "flash_attn(q, k, vt): k and v differ in kv heads or length");
    gml_tensor *m = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 10, 11), "m");
    expect_fail(
        ctx, gml_flash_attn(ctx, q, k, v, m, NULL, 1, false),
        "flash_attn(q, k, v, m): mask [10,11] does not broadcast to the scores [2,8,10,12]");
    gml_tensor *lens = gml_set_name(gml_new_tensor_2d(ctx, GML_I32, 2, 12), "lens");
    expect_fail(ctx, gml_flash_attn(ctx, q, k, v, NULL, lens, 1, false),
                "flash_attn(q, k, v, lens): valid lengths must be i32 [2] or [2,10] ([B] or [B, "
                "Tq]), got i32 [2,12]");
    gml_tensor *qi = gml_set_name(gml_new_tensor_4d(ctx, GML_I32, 2, 8, 10, 64), "qi");
    expect_fail(ctx, gml_flash_attn(ctx, qi, k, v, NULL, NULL, 1, false),
                "flash_attn(qi): 'qi' must be f32");
    expect_fail(ctx, gml_flash_attn(ctx, q, k, v, NULL, NULL, INFINITY, false),
                "flash_attn(q): scale inf is not finite");
    /* a NULL input keeps the message of the builder that failed */
    gml_tensor *bad = gml_matmul(ctx, q, q);
    CHECK(!gml_flash_attn(ctx, bad, k, v, NULL, NULL, 1, false), "NULL q: built");
    CHECK_CONTAINS(gml_last_error(ctx), "matmul(q, q)");
    gml_free(ctx);

    chk_case("flash_attn: a valid length out of range fails compute");
    ctx = chk_ctx(1 << 20);
    chk_rng rng = chk_seed(3);
    q = chk_new_input(ctx, GML_F32, 4, (int64_t[]){2, 2, 3, 4}, CHK_CONTIGUOUS, "q", &rng, -1, 1);
    k = chk_new_input(ctx, GML_F32, 4, (int64_t[]){2, 1, 5, 4}, CHK_CONTIGUOUS, "k", &rng, -1, 1);
    v = chk_new_input(ctx, GML_F32, 4, (int64_t[]){2, 1, 5, 4}, CHK_CONTIGUOUS, "v", &rng, -1, 1);
    for (int per_query = 0; per_query < 2; per_query++) {
        lens =
            per_query ? gml_new_tensor_2d(ctx, GML_I32, 2, 3) : gml_new_tensor_1d(ctx, GML_I32, 2);
        gml_set_name(lens, "lens");
        for (int i = 0; i < (per_query ? 6 : 2); i++) ((int32_t *)lens->data)[i] = 5;
        ((int32_t *)lens->data)[per_query ? 4 : 1] = per_query ? 6 : -1;
        t = gml_flash_attn(ctx, q, k, v, NULL, lens, 0.5f, false);
        gml_graph *g = gml_build_graph(ctx, &t, 1);
        CHECK(g && gml_graph_compute(g, 3) == GML_ERR_INVALID, "bad length computed");
        if (g)
            CHECK_CONTAINS(gml_graph_error(g),
                           per_query
                               ? "flash_attn(lens): valid length 6 at [1,1] is outside [0, 5]"
                               : "flash_attn(lens): valid length -1 for batch 1 is outside [0, 5]");
        gml_graph_free(g);
    }
    gml_free(ctx);
}

/* ---- graph files ------------------------------------------------------------- */

typedef struct bindings {
    gml_tensor *t[8];
    int n;
} bindings;

static gml_tensor *bind_by_name(void *user, const char *name, bool is_param) {
    (void)is_param;
    bindings *b = user;
    for (int i = 0; i < b->n; i++)
        if (strcmp(b->t[i]->name, name) == 0) return b->t[i];
    return NULL;
}

/* A decoding step: append k and v rows to caches, attend over them. */
static gml_tensor *build_step(gml_context *ctx, bindings *b) {
    gml_tensor *q = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 2, 4, 1, 8), "q");
    gml_tensor *kn = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 2, 2, 1, 8), "k_new");
    gml_tensor *kc = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 2, 2, 6, 8), "k_cache");
    gml_tensor *vc = gml_set_name(gml_new_tensor_4d(ctx, GML_F32, 2, 2, 6, 8), "v_cache");
    gml_tensor *pos = gml_set_name(gml_new_tensor_2d(ctx, GML_I32, 2, 1), "pos");
    gml_tensor *lens = gml_set_name(gml_new_tensor_2d(ctx, GML_I32, 2, 1), "lens");
    gml_tensor *mask = gml_set_name(gml_new_tensor_1d(ctx, GML_F32, 6), "bias");
    *b = (bindings){{q, kn, kc, vc, pos, lens, mask}, 7};
    gml_tensor *k = gml_set_rows(ctx, kc, kn, pos);
    gml_tensor *vslot = gml_view(ctx, vc, 4, (int64_t[]){2, 2, 1, 8},
                                 (size_t[]){vc->nb[0], vc->nb[1], vc->nb[2], vc->nb[3]}, vc->nb[2]);
    gml_tensor *v = gml_after(ctx, vc, gml_cpy(ctx, kn, vslot));
    return gml_set_name(gml_flash_attn(ctx, q, k, v, mask, lens, 0.25f, true), "o");
}

static void test_graph_file(void) {
    chk_case("graph file: flash_attn, set_rows and after round-trip");
    char dir[] = "/tmp/gml_flash_XXXXXX", path[64], err[512] = "";
    if (!CHECK(mkdtemp(dir), "mkdtemp")) return;
    snprintf(path, sizeof path, "%s/step.graph", dir);
    gml_context *c1 = chk_ctx(1 << 20), *c2 = chk_ctx(1 << 20);
    bindings b1, b2;
    gml_tensor *o1 = build_step(c1, &b1);
    build_step(c2, &b2);
    gml_graph *g1 = gml_build_graph(c1, &o1, 1);
    CHECK(gml_save_graph(path, g1, &o1, 1, err, sizeof err) == GML_OK, "save: %s", err);
    gml_graph_binder binder = {.bind = bind_by_name, .user = &b2};
    gml_tensor *o2 = NULL;
    int n = gml_load_graph(c2, path, &binder, &o2, 1, err, sizeof err);
    if (CHECK(n == 1, "load: %s", err)) {
        gml_graph *g2 = gml_build_graph(c2, &o2, 1);
        CHECK(gml_graph_digest(g2) == gml_graph_digest(g1), "digests differ");
        gml_graph_free(g2);
    }
    /* the default scale is 1/sqrt(d_k) */
    const char *text = "input q f32 [1, 2, 3, 16]\ninput k f32 [1, 1, 5, 16]\n"
                       "o = flash_attn(q, k, k, causal=true)\noutput o\n";
    gml_tensor *o3 = NULL;
    n = gml_parse_graph(c2, text, strlen(text), "t.graph", NULL, &o3, 1, err, sizeof err);
    CHECK(n == 1 && o3->op == GML_OP_FLASH_ATTN, "parse: %s", err);
    gml_arg args[GML_MAX_ARGS]; /* q, k, v, mask, valid_lens, scale, causal */
    if (n == 1 && CHECK(gml_form_get_args(o3, args), "flash_attn's arguments")) {
        CHECK(args[6].i == 1, "causal=%d, want 1", (int)args[6].i);
        CHECK(args[5].f == 0.25f, "default scale %g, want 0.25", (double)args[5].f);
    }
    gml_graph_free(g1);
    gml_free(c1);
    gml_free(c2);
    unlink(path);
    rmdir(dir);
}

int main(void) {
    test_masks_and_shapes();
    test_tails_and_values();
    test_nonfinite_masks();
    printf("fused vs unfused: max |diff| %.2e of max |unfused|; fused vs the naive loop: %.2e\n",
           g_max_rel_unfused, g_max_rel_ref);
    test_set_rows();
    test_after();
    test_errors();
    test_graph_file();
    return chk_summary();
}
