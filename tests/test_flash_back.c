/* flash_attn_lse and flash_attn_back against finite differences: a
 * double-precision attention written here from the formula (every option
 * of flash_attn_ext), L = sum(out * dout), and dL/dq, dL/dk, dL/dv,
 * dL/dsinks by central differences in double on every element. Each option
 * alone and several combined, GQA and MQA, tails (Tk past the key block,
 * odd head dims, rows past the tile), q, k and v in non-contiguous layouts,
 * rows that see no key; at 1, 2, 3, 4 and 7 threads (bitwise equal) under
 * the reference and every ISA the CPU has (tests/isas.h). Also: the lse
 * output against the double log-sum-exp, flash_attn_lse's output against
 * flash_attn's, and the builder's errors. */
#include "check.h"
#include "isas.h"

#include "../ops/flash_attn.h"

#define FD_H 1e-5
#define GRAD_RTOL 2e-4 /* of the largest |gradient| of the tensor */
#define GRAD_ATOL 1e-6

typedef struct bcase {
    const char *name;
    int B, H, G, Tq, Tk, dk, dv;
    gml_causal causal;
    int64_t window;
    float softcap, alibi, scale;
    bool sinks, positions;
    int lens;    /* 0 none, 1 [B], 2 [B, Tq] */
    int mask;    /* 0 none, 1 [B, H, Tq, Tk] with -inf, 2 [Tq, Tk] */
    int layout;  /* chk_layout of q, k, v */
    bool empty;  /* batch 0 sees no key (lens 0) */
    bool nan_pad; /* keys 1 and Tk - 2 hidden by the mask ([Tq, Tk]) from every query, their
                     k and v rows NaN and inf (a padded batch's garbage) */
    float amp;   /* q, k in [-amp, amp] */
    gml_type kv; /* K and V's type (f16, bf16; 0: f32); their gradients f32 */
} bcase;

typedef struct bdata {
    const bcase *c;
    double *q, *k, *v, *sinks, *g; /* dense, [B,H,Tq,dk], [B,G,Tk,dk], [B,G,Tk,dv], [H], [B,H,Tq,dv] */
    float *mask;                   /* dense, mask shape */
    int mne[4];
    int32_t *lens, *pos;
    double scale;
} bdata;

static double slope_of(double max_bias, int h, int H) {
    if (!(max_bias > 0)) return 0;
    int n = 1;
    while (n * 2 <= H) n *= 2;
    return h < n ? exp2(-max_bias * (h + 1) / n) : exp2(-max_bias / 2 * (2 * (h - n) + 1) / n);
}

/* The attention in double; out [B,H,Tq,dv] and lse [B,H,Tq] when not NULL;
 * returns L = sum(out * g). */
static double forward(const bdata *d, double *out, double *lse) {
    const bcase *c = d->c;
    const int r = c->H / c->G;
    double L = 0;
    double *p = malloc((size_t)c->Tk * sizeof *p);
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->H; h++)
            for (int i = 0; i < c->Tq; i++) {
                const int g = h / r;
                const int64_t ip = c->positions ? d->pos[b * c->Tq + i]
                                   : c->causal == GML_CAUSAL_TOP_LEFT ? i
                                                                      : i + c->Tk - c->Tq;
                const int len = c->lens == 1 ? d->lens[b] : c->lens == 2 ? d->lens[b * c->Tq + i] : c->Tk;
                double m = -INFINITY;
                for (int j = 0; j < c->Tk; j++) {
                    bool seen = j < len;
                    if (c->causal != GML_CAUSAL_NONE || c->window > 0) seen &= j <= ip;
                    if (c->window > 0) seen &= ip - j < c->window;
                    double mv = 0;
                    if (c->mask) {
                        const int mi[4] = {b % d->mne[0], h % d->mne[1], i % d->mne[2], j % d->mne[3]};
                        mv = d->mask[((mi[0] * d->mne[1] + mi[1]) * d->mne[2] + mi[2]) * d->mne[3] + mi[3]];
                        seen &= mv != -INFINITY;
                    }
                    p[j] = -INFINITY;
                    if (!seen) continue;
                    double s = 0;
                    for (int e = 0; e < c->dk; e++)
                        s += d->q[((b * c->H + h) * c->Tq + i) * c->dk + e] *
                             d->k[((b * c->G + g) * c->Tk + j) * c->dk + e];
                    s *= d->scale;
                    if (c->softcap > 0) s = c->softcap * tanh(s / c->softcap);
                    s += mv + slope_of(c->alibi, h, c->H) * (double)(j - ip);
                    p[j] = s;
                    m = s > m ? s : m;
                }
                double z = 0;
                if (m != -INFINITY) {
                    if (c->sinks) m = d->sinks[h] > m ? d->sinks[h] : m;
                    for (int j = 0; j < c->Tk; j++) z += p[j] == -INFINITY ? 0 : exp(p[j] - m);
                    if (c->sinks) z += exp(d->sinks[h] - m);
                }
                if (lse) lse[(b * c->H + h) * c->Tq + i] = z > 0 ? m + log(z) : -INFINITY;
                for (int e = 0; e < c->dv; e++) {
                    double o = 0;
                    for (int j = 0; j < c->Tk && z > 0; j++)
                        if (p[j] != -INFINITY)
                            o += exp(p[j] - m) / z * d->v[((b * c->G + g) * c->Tk + j) * c->dv + e];
                    const int64_t at = ((int64_t)(b * c->H + h) * c->Tq + i) * c->dv + e;
                    if (out) out[at] = o;
                    L += o * d->g[at];
                }
            }
    free(p);
    return L;
}

static void fd(bdata *d, double *x, int64_t n, double *grad) {
    for (int64_t e = 0; e < n; e++) {
        const double x0 = x[e];
        x[e] = x0 + FD_H;
        const double lp = forward(d, NULL, NULL);
        x[e] = x0 - FD_H;
        const double lm = forward(d, NULL, NULL);
        x[e] = x0;
        grad[e] = (lp - lm) / (2 * FD_H);
    }
}

typedef struct bcheck {
    gml_tensor *piece[4];
    double *want[4];
    double *out, *lse;
    gml_tensor *fwd;
    const bcase *c;
} bcheck;

static const char *const PIECE[4] = {"dq", "dk", "dv", "dsinks"};

static void verify(void *user) {
    bcheck *k = user;
    for (int t = 0; t < 4; t++) {
        if (!k->piece[t]) continue;
        const int64_t n = chk_numel(k->piece[t]);
        float *got = chk_dense(k->piece[t]);
        double big = 0;
        for (int64_t e = 0; e < n; e++) big = fmax(big, fabs(k->want[t][e]));
        int bad = 0;
        for (int64_t e = 0; e < n && bad < 3; e++) {
            const double tol = GRAD_RTOL * big + GRAD_ATOL;
            if (fabs(got[e] - k->want[t][e]) <= tol) continue;
            bad++;
            CHECK(false, "%s[%lld]: got %.8g, finite differences %.8g (tol %.3g)", PIECE[t],
                  (long long)e, (double)got[e], k->want[t][e], tol);
        }
        free(got);
    }
    /* the forward's outputs and lse */
    const bcase *c = k->c;
    float *f = chk_dense(k->fwd);
    for (int64_t row = 0; row < (int64_t)c->B * c->H * c->Tq; row++) {
        for (int e = 0; e < c->dv; e++)
            CHECK(fabs(f[row * (c->dv + 2) + e] - k->out[row * c->dv + e]) <= 1e-5,
                  "out[%lld][%d] %g vs %g", (long long)row, e, (double)f[row * (c->dv + 2) + e],
                  k->out[row * c->dv + e]);
        const double want = k->lse[row], got = f[row * (c->dv + 2) + c->dv];
        CHECK(want == -INFINITY ? got == -INFINITY : fabs(got - want) <= 1e-5 * (1 + fabs(want)),
              "lse[%lld] %g vs %g", (long long)row, got, want);
    }
    free(f);
}

static void run_case(const bcase *c, uint64_t seed) {
    chk_case("%s (B%d H%d G%d Tq%d Tk%d dk%d dv%d)", c->name, c->B, c->H, c->G, c->Tq, c->Tk,
             c->dk, c->dv);
    chk_rng rng = chk_seed(seed);
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 64 << 20});
    const int64_t qne[4] = {c->B, c->H, c->Tq, c->dk}, kne[4] = {c->B, c->G, c->Tk, c->dk},
                  vne[4] = {c->B, c->G, c->Tk, c->dv}, one[4] = {c->B, c->H, c->Tq, c->dv};
    gml_tensor *q = chk_new_layout(ctx, GML_F32, 4, qne, (chk_layout)c->layout, "q");
    const bool typed = c->kv == GML_F16 || c->kv == GML_BF16;
    gml_tensor *k = typed ? gml_new_tensor(ctx, c->kv, 4, kne)
                          : chk_new_layout(ctx, GML_F32, 4, kne, (chk_layout)c->layout, "k");
    gml_tensor *v = typed ? gml_new_tensor(ctx, c->kv, 4, vne)
                          : chk_new_layout(ctx, GML_F32, 4, vne, (chk_layout)c->layout, "v");
    gml_tensor *dout = gml_new_tensor(ctx, GML_F32, 4, one);
    const float amp = c->amp > 0 ? c->amp : 1.0f;
    chk_fill_uniform(q, &rng, -amp, amp);
    double *typed_kv[2] = {NULL, NULL}; /* the values K and V hold, as doubles */
    if (typed) {
        gml_tensor *t2[2] = {k, v};
        for (int t = 0; t < 2; t++) {
            const int64_t n = chk_numel(t2[t]);
            uint16_t *h = t2[t]->data;
            typed_kv[t] = malloc((size_t)n * sizeof(double));
            for (int64_t e = 0; e < n; e++) {
                const float x = chk_uniform(&rng, t ? -1.0f : -amp, t ? 1.0f : amp);
                h[e] = c->kv == GML_F16 ? gml_fp32_to_fp16(x) : gml_fp32_to_bf16(x);
                typed_kv[t][e] = c->kv == GML_F16 ? gml_fp16_to_fp32(h[e]) : gml_bf16_to_fp32(h[e]);
            }
        }
    } else {
        chk_fill_uniform(k, &rng, -amp, amp);
        chk_fill_uniform(v, &rng, -1, 1);
    }
    chk_fill_uniform(dout, &rng, -1, 1);
    bdata d = {.c = c, .scale = c->scale > 0 ? c->scale : 1.0 / sqrt((double)c->dk)};
    gml_attn_opts o = {.causal = c->causal, .window = c->window, .softcap = c->softcap,
                       .alibi_max_bias = c->alibi};
    if (c->sinks) {
        o.sinks = gml_new_tensor_1d(ctx, GML_F32, c->H);
        chk_fill_uniform(o.sinks, &rng, -1, 2);
    }
    if (c->mask) {
        const int64_t mne[4] = {c->mask == 1 ? c->B : 1, c->mask == 1 ? c->H : 1, c->Tq, c->Tk};
        o.mask = c->mask == 1 ? gml_new_tensor(ctx, GML_F32, 4, mne)
                              : gml_new_tensor_2d(ctx, GML_F32, c->Tq, c->Tk);
        float *m = malloc((size_t)(mne[0] * mne[1] * mne[2] * mne[3]) * sizeof *m);
        for (int64_t e = 0; e < mne[0] * mne[1] * mne[2] * mne[3]; e++)
            m[e] = chk_randint(&rng, 0, 5) == 0 ? -INFINITY : chk_uniform(&rng, -1, 1);
        for (int i = 0; i < c->Tq && c->nan_pad; i++)
            m[i * c->Tk + 1] = m[i * c->Tk + c->Tk - 2] = -INFINITY;
        chk_write(o.mask, m);
        d.mask = m;
        for (int i = 0; i < 4; i++) d.mne[i] = (int)mne[i];
    }
    if (c->lens) {
        o.valid_lens = c->lens == 1 ? gml_new_tensor_1d(ctx, GML_I32, c->B)
                                    : gml_new_tensor_2d(ctx, GML_I32, c->B, c->Tq);
        chk_fill_int(o.valid_lens, &rng, 1, c->Tk);
        d.lens = chk_dense(o.valid_lens);
        if (c->empty) {
            d.lens[0] = 0;
            chk_write(o.valid_lens, d.lens);
        }
    }
    if (c->nan_pad) { /* keys no query sees: their rows must not reach any gradient */
        float *kd = chk_dense(k), *vd = chk_dense(v);
        for (int b = 0; b < c->B; b++)
            for (int g = 0; g < c->G; g++)
                for (int j = 1; j < c->Tk; j += c->Tk - 3) {
                    kd[((b * c->G + g) * c->Tk + j) * c->dk] = NAN;
                    kd[((b * c->G + g) * c->Tk + j) * c->dk + 1] = INFINITY;
                    vd[((b * c->G + g) * c->Tk + j) * c->dv + c->dv - 1] = INFINITY;
                }
        chk_write(k, kd);
        chk_write(v, vd);
        free(kd), free(vd);
    }
    if (c->positions) {
        o.positions = gml_new_tensor_2d(ctx, GML_I32, c->B, c->Tq);
        chk_fill_int(o.positions, &rng, 0, c->Tk + 2);
        d.pos = chk_dense(o.positions);
    }
    float *tmp;
#define DENSE(t, dst)                                                      \
    do {                                                                   \
        tmp = chk_dense(t);                                                \
        dst = malloc((size_t)chk_numel(t) * sizeof(double));               \
        for (int64_t e = 0; e < chk_numel(t); e++) dst[e] = tmp[e];        \
        free(tmp);                                                         \
    } while (0)
    DENSE(q, d.q);
    if (typed) {
        d.k = typed_kv[0];
        d.v = typed_kv[1];
    } else {
        DENSE(k, d.k);
        DENSE(v, d.v);
    }
    DENSE(dout, d.g);
    if (c->sinks) DENSE(o.sinks, d.sinks);
#undef DENSE
    const float scale = (float)d.scale;
    gml_tensor *fwd = gml_flash_attn_lse(ctx, q, k, v, scale, &o);
    gml_tensor *back = fwd ? gml_flash_attn_back(ctx, q, k, v, fwd, dout, scale, &o) : NULL;
    gml_tensor *plain = gml_flash_attn_ext(ctx, q, k, v, scale, &o);
    gml_tensor *dq = NULL, *dk = NULL, *dv = NULL, *ds = NULL;
    if (!CHECK(back && plain && gml_flash_attn_back_views(ctx, back, &dq, &dk, &dv, &ds),
               "builders: %s", gml_last_error(ctx))) {
        gml_free(ctx);
        return;
    }
    bcheck bk = {.piece = {dq, dk, dv, ds}, .fwd = fwd, .c = c};
    const int64_t nq = chk_numel(q), nk = chk_numel(k), nv = chk_numel(v);
    bk.out = malloc((size_t)chk_numel(dout) * sizeof(double));
    bk.lse = malloc((size_t)(c->B * c->H * c->Tq) * sizeof(double));
    forward(&d, bk.out, bk.lse);
    for (int t = 0; t < 4; t++) bk.want[t] = NULL;
    bk.want[0] = malloc((size_t)nq * sizeof(double));
    bk.want[1] = malloc((size_t)nk * sizeof(double));
    bk.want[2] = malloc((size_t)nv * sizeof(double));
    fd(&d, d.q, nq, bk.want[0]);
    fd(&d, d.k, nk, bk.want[1]);
    fd(&d, d.v, nv, bk.want[2]);
    if (c->sinks) {
        bk.want[3] = malloc((size_t)c->H * sizeof(double));
        fd(&d, d.sinks, c->H, bk.want[3]);
    }
    gml_tensor *outs[3] = {back, fwd, plain};
    gml_graph *g = gml_build_graph(ctx, outs, 3);
    static const gml_isa isas[] = {GML_TEST_FAST_ISAS};
    for (size_t i = 0; i < sizeof isas / sizeof *isas; i++) {
        if (!gml_cpu_has(isas[i])) continue;
        CHECK_RUN(g, .outs = outs, .n_outs = 3, .verify = verify, .user = &bk, .isa = isas[i]);
        /* flash_attn_lse's outputs are flash_attn's (bitwise when both take
         * the prefill path; the decode path's within float rounding) */
        const gml_isa saved = gml_get_isa();
        gml_set_isa(isas[i]);
        CHECK(gml_graph_compute(g, 2) == GML_OK, "compute: %s", gml_last_error(ctx));
        gml_set_isa(saved);
        /* the backward ran the ISA's micro-kernel */
        const char *kn = gml_graph_node_kernel(g, gml_graph_find(g, back));
        char want[48];
        snprintf(want, sizeof want, "gml_f32_flash_back_ukernel__%s", gml_isa_name(isas[i]));
        CHECK(kn && strstr(kn, want), "%s: the backward ran '%s'", gml_isa_name(isas[i]),
              kn ? kn : "(none)");
        float *f = chk_dense(fwd), *pl = chk_dense(plain);
        const bool prefill = (int64_t)(c->H / c->G) * c->Tq > GML_FLASH_DEC_MAX_ROWS;
        for (int64_t row = 0; row < (int64_t)c->B * c->H * c->Tq; row++)
            for (int e = 0; e < c->dv; e++) {
                const float a = f[row * (c->dv + 2) + e], b = pl[row * c->dv + e];
                CHECK(prefill ? memcmp(&a, &b, 4) == 0 : fabsf(a - b) <= 1e-6f,
                      "%s: flash_attn_lse's out[%lld][%d] %.9g, flash_attn's %.9g",
                      gml_isa_name(isas[i]), (long long)row, e, (double)a, (double)b);
            }
        free(f);
        free(pl);
    }
    gml_graph_free(g);
    for (int t = 0; t < 4; t++) free(bk.want[t]);
    free(bk.out), free(bk.lse);
    free(d.q), free(d.k), free(d.v), free(d.g), free(d.sinks), free(d.mask), free(d.lens), free(d.pos);
    gml_free(ctx);
}

static void errors(void) {
    chk_case("builder errors");
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20});
    gml_tensor *q = gml_new_tensor_4d(ctx, GML_F32, 1, 2, 3, 4);
    gml_tensor *k = gml_new_tensor_4d(ctx, GML_F32, 1, 2, 5, 4);
    gml_tensor *v = gml_new_tensor_4d(ctx, GML_F32, 1, 2, 5, 6);
    gml_tensor *fwd = gml_flash_attn_lse(ctx, q, k, v, 0.5f, NULL);
    gml_tensor *bad = gml_new_tensor_4d(ctx, GML_F32, 1, 2, 3, 5);
    CHECK(fwd && fwd->ne[3] == 8, "flash_attn_lse: [1,2,3,8]");
    CHECK(gml_flash_attn_back(ctx, q, k, v, fwd, bad, 0.5f, NULL) == NULL, "dout of the wrong shape");
    CHECK_CONTAINS(gml_last_error(ctx), "the output's gradient");
    CHECK(gml_flash_attn_back(ctx, q, k, v, bad, bad, 0.5f, NULL) == NULL, "fwd of the wrong shape");
    CHECK_CONTAINS(gml_last_error(ctx), "flash_attn_lse's");
    gml_tensor *sk = gml_new_tensor_1d(ctx, GML_F32, 3);
    gml_tensor *dout = gml_new_tensor_4d(ctx, GML_F32, 1, 2, 3, 6);
    CHECK(gml_flash_attn_back(ctx, q, k, v, fwd, dout, 0.5f, &(gml_attn_opts){.sinks = sk}) == NULL,
          "sinks of the wrong shape");
    CHECK_CONTAINS(gml_last_error(ctx), "sinks must be f32 [2]");
    gml_free(ctx);
}

int main(void) {
    static const bcase cases[] = {
        {"plain", 2, 2, 2, 7, 9, 5, 3, .amp = 1},
        {"causal bottom-right", 1, 2, 2, 5, 9, 4, 4, .causal = GML_CAUSAL_BOTTOM_RIGHT},
        {"causal top-left", 1, 2, 2, 9, 6, 4, 3, .causal = GML_CAUSAL_TOP_LEFT},
        {"window", 1, 2, 2, 9, 9, 3, 3, .window = 3},
        {"alibi", 1, 4, 4, 5, 7, 4, 3, .alibi = 8.0f},
        {"softcap", 1, 2, 2, 5, 7, 4, 3, .softcap = 1.5f, .scale = 1.0f, .amp = 1.5f},
        {"sinks", 2, 2, 2, 5, 6, 4, 3, .sinks = true},
        {"valid lengths [B]", 2, 2, 2, 5, 8, 4, 3, .lens = 1},
        {"valid lengths [B, Tq] + a batch with none", 2, 2, 2, 5, 8, 4, 3, .lens = 2, .empty = true},
        {"NaN and inf in k and v rows the mask hides", 2, 2, 1, 9, 70, 4, 3, .mask = 2,
         .nan_pad = true},
        {"f16 K and V, GQA, causal", 1, 4, 2, 7, 9, 4, 3, .kv = GML_F16,
         .causal = GML_CAUSAL_BOTTOM_RIGHT},
        {"bf16 K and V, sinks, softcap", 2, 2, 1, 6, 8, 5, 4, .kv = GML_BF16, .sinks = true,
         .softcap = 2.0f},
        {"mask [B, H, Tq, Tk]", 2, 2, 2, 5, 7, 4, 3, .mask = 1},
        {"mask [Tq, Tk]", 1, 2, 2, 5, 7, 4, 3, .mask = 2},
        {"positions", 2, 2, 2, 5, 8, 4, 3, .positions = true, .causal = GML_CAUSAL_BOTTOM_RIGHT},
        {"GQA", 1, 4, 2, 5, 7, 4, 3, .amp = 1},
        {"MQA", 1, 3, 1, 6, 7, 3, 5, .amp = 1},
        {"transposed q, k, v", 1, 2, 2, 6, 7, 5, 5, .layout = CHK_TRANSPOSED},
        {"sliced q, k, v", 2, 2, 1, 5, 7, 4, 3, .layout = CHK_SLICED},
        {"tails: Tk past the key block, odd d", 1, 2, 1, 11, 70, 7, 5, .layout = CHK_OUTER_SWAPPED},
        {"causal + alibi + softcap + sinks + mask, GQA, reversed", 1, 4, 2, 6, 9, 5, 3,
         .causal = GML_CAUSAL_BOTTOM_RIGHT, .alibi = 4.0f, .softcap = 2.0f, .sinks = true,
         .mask = 1, .layout = CHK_REVERSED},
        {"window + lengths + positions + sinks, MQA", 2, 2, 1, 7, 9, 4, 4, .window = 4, .lens = 2,
         .positions = true, .sinks = true, .layout = CHK_SLICED_TRANSPOSED},
        {"top-left + softcap + mask [Tq, Tk] + lengths [B]", 2, 2, 2, 6, 5, 3, 6,
         .causal = GML_CAUSAL_TOP_LEFT, .softcap = 1.0f, .mask = 2, .lens = 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&cases[i], 100 + i);
    errors();
    return chk_summary();
}
