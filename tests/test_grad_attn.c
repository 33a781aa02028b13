/* Gradients through gml_grad of an attention block built from the ops whose
 * backwards ops/flash_attn_back.c, softmax.c, norm.c and rope.c define:
 *
 *     qr = rope(q, pos)            q [B, H, T, 6], rotary dims 4
 *     kn = rms_norm(k, wk)         k [B, G, T, 6] (GQA: G = 1, H = 2)
 *     o  = flash_attn(qr, kn, v)   causal, softcap, sinks s1 [H]
 *     y  = layer_norm(o, w, b)     over d_v = 5
 *     out = softmax(y * 0.9)       with sinks s2 [H]
 *
 * dL/d(q, k, v, wk, s1, w, b, s2) for L = sum(out * g), against central
 * finite differences of the same block written here in double; at 1, 2,
 * 3, 4 and 7 threads (bitwise equal) under the reference and every ISA the
 * CPU has. Also: a gradient that would reach flash_attn's or softmax's
 * mask is refused, naming the mask. */
#include "check.h"
#include "isas.h"

#define B 1
#define H 2
#define G 1
#define T 6
#define DK 6
#define DV 5
#define ROT 4
#define FD_H 1e-5

typedef struct params {
    double q[B * H * T * DK], k[B * G * T * DK], v[B * G * T * DV], wk[DK], s1[H], w[DV], b[DV],
        s2[H];
} params;
static double g_out[B * H * T * DV];
static int32_t g_pos[T];

static double loss(const params *p) {
    double qr[B * H * T * DK], kn[B * G * T * DK], o[B * H * T * DV];
    memcpy(qr, p->q, sizeof qr);
    for (int r = 0; r < B * H * T; r++) {
        const int t = r % T;
        for (int i = 0; i < ROT / 2; i++) {
            const double a = g_pos[t] * pow(100.0, -2.0 * i / ROT);
            const double x0 = p->q[r * DK + i], x1 = p->q[r * DK + i + ROT / 2];
            qr[r * DK + i] = x0 * cos(a) - x1 * sin(a);
            qr[r * DK + i + ROT / 2] = x1 * cos(a) + x0 * sin(a);
        }
    }
    for (int r = 0; r < B * G * T; r++) {
        double ss = 0;
        for (int j = 0; j < DK; j++) ss += p->k[r * DK + j] * p->k[r * DK + j];
        const double rr = 1 / sqrt(ss / DK + 1e-6);
        for (int j = 0; j < DK; j++) kn[r * DK + j] = p->k[r * DK + j] * rr * p->wk[j];
    }
    const double scale = 1 / sqrt((double)DK), cap = 3.0;
    for (int h = 0; h < H; h++)
        for (int i = 0; i < T; i++) {
            double s[T], m = p->s1[h], z = 0;
            for (int j = 0; j <= i; j++) {
                double dot = 0;
                for (int c = 0; c < DK; c++) dot += qr[(h * T + i) * DK + c] * kn[j * DK + c];
                s[j] = cap * tanh(dot * scale / cap);
                m = s[j] > m ? s[j] : m;
            }
            for (int j = 0; j <= i; j++) z += exp(s[j] - m);
            z += exp(p->s1[h] - m);
            for (int c = 0; c < DV; c++) {
                double acc = 0;
                for (int j = 0; j <= i; j++) acc += exp(s[j] - m) / z * p->v[j * DV + c];
                o[(h * T + i) * DV + c] = acc;
            }
        }
    double L = 0;
    for (int r = 0; r < B * H * T; r++) {
        const int h = r / T;
        double mean = 0, var = 0, y[DV], m = p->s2[h], z = 0;
        for (int c = 0; c < DV; c++) mean += o[r * DV + c];
        mean /= DV;
        for (int c = 0; c < DV; c++) var += (o[r * DV + c] - mean) * (o[r * DV + c] - mean);
        const double rr = 1 / sqrt(var / DV + 1e-5);
        for (int c = 0; c < DV; c++) {
            y[c] = ((o[r * DV + c] - mean) * rr * p->w[c] + p->b[c]) * 0.9;
            m = y[c] > m ? y[c] : m;
        }
        for (int c = 0; c < DV; c++) z += exp(y[c] - m);
        z += exp(p->s2[h] - m);
        for (int c = 0; c < DV; c++) L += exp(y[c] - m) / z * g_out[r * DV + c];
    }
    return L;
}

typedef struct gcheck {
    gml_tensor *grads[8];
    double *want[8];
    const char *names[8];
} gcheck;

static void verify(void *user) {
    gcheck *k = user;
    for (int t = 0; t < 8; t++) {
        const int64_t n = chk_numel(k->grads[t]);
        float *got = chk_dense(k->grads[t]);
        double big = 0;
        for (int64_t e = 0; e < n; e++) big = fmax(big, fabs(k->want[t][e]));
        for (int64_t e = 0; e < n; e++)
            CHECK(fabs(got[e] - k->want[t][e]) <= 2e-4 * big + 1e-6,
                  "d%s[%lld]: got %.8g, finite differences %.8g", k->names[t], (long long)e,
                  (double)got[e], k->want[t][e]);
        free(got);
    }
}

static void block(void) {
    chk_case("rope, rms_norm, flash_attn, layer_norm, softmax");
    chk_rng rng = chk_seed(7);
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 16 << 20});
    gml_tensor *q = gml_new_tensor_4d(ctx, GML_F32, B, H, T, DK);
    gml_tensor *k = gml_new_tensor_4d(ctx, GML_F32, B, G, T, DK);
    gml_tensor *v = gml_new_tensor_4d(ctx, GML_F32, B, G, T, DV);
    gml_tensor *wk = gml_new_tensor_1d(ctx, GML_F32, DK), *s1 = gml_new_tensor_1d(ctx, GML_F32, H);
    gml_tensor *w = gml_new_tensor_1d(ctx, GML_F32, DV), *bb = gml_new_tensor_1d(ctx, GML_F32, DV);
    gml_tensor *s2 = gml_new_tensor_1d(ctx, GML_F32, H), *pos = gml_new_tensor_1d(ctx, GML_I32, T);
    gml_tensor *dout = gml_new_tensor_4d(ctx, GML_F32, B, H, T, DV);
    gml_tensor *wrt[8] = {q, k, v, wk, s1, w, bb, s2};
    static const char *const names[8] = {"q", "k", "v", "wk", "s1", "w", "b", "s2"};
    params P;
    double *fields[8] = {P.q, P.k, P.v, P.wk, P.s1, P.w, P.b, P.s2};
    for (int t = 0; t < 8; t++) {
        chk_fill_uniform(wrt[t], &rng, t == 3 || t == 5 ? 0.5f : -1.0f, t == 4 || t == 7 ? 0.5f : 1.0f);
        float *f = chk_dense(wrt[t]);
        for (int64_t e = 0; e < chk_numel(wrt[t]); e++) fields[t][e] = f[e];
        free(f);
    }
    chk_fill_uniform(dout, &rng, -1, 1);
    float *gf = chk_dense(dout);
    for (int e = 0; e < B * H * T * DV; e++) g_out[e] = gf[e];
    free(gf);
    for (int t = 0; t < T; t++) g_pos[t] = 2 + 3 * t;
    chk_write(pos, g_pos);

    gml_tensor *qr = gml_rope(ctx, q, pos, -2, ROT, 100.0f, 1.0f, false);
    gml_tensor *kn = gml_rms_norm(ctx, k, wk, 1e-6f);
    const gml_attn_opts o1 = {.causal = GML_CAUSAL_BOTTOM_RIGHT, .softcap = 3.0f, .sinks = s1};
    gml_tensor *o = gml_flash_attn_ext(ctx, qr, kn, v, (float)(1 / sqrt((double)DK)), &o1);
    gml_tensor *y = gml_layer_norm(ctx, o, w, bb, 1e-5f);
    const gml_attn_opts o2 = {.sinks = s2};
    gml_tensor *out = gml_softmax_ext(ctx, y, 0.9f, &o2);
    gcheck k8 = {.names = {0}};
    if (!CHECK(gml_grad(ctx, out, dout, wrt, 8, k8.grads) == GML_OK, "grad: %s",
               gml_last_error(ctx))) {
        gml_free(ctx);
        return;
    }
    for (int t = 0; t < 8; t++) {
        const int64_t n = chk_numel(wrt[t]);
        k8.names[t] = names[t];
        k8.want[t] = malloc((size_t)n * sizeof(double));
        for (int64_t e = 0; e < n; e++) {
            const double x0 = fields[t][e];
            fields[t][e] = x0 + FD_H;
            const double lp = loss(&P);
            fields[t][e] = x0 - FD_H;
            const double lm = loss(&P);
            fields[t][e] = x0;
            k8.want[t][e] = (lp - lm) / (2 * FD_H);
        }
    }
    gml_graph *g = gml_build_graph(ctx, k8.grads, 8);
    static const gml_isa isas[] = {GML_TEST_FAST_ISAS};
    for (size_t i = 0; i < sizeof isas / sizeof *isas; i++) {
        if (!gml_cpu_has(isas[i])) continue;
        CHECK_RUN(g, .outs = k8.grads, .n_outs = 8, .verify = verify, .user = &k8, .isa = isas[i]);
    }
    gml_graph_free(g);
    for (int t = 0; t < 8; t++) free(k8.want[t]);
    gml_free(ctx);
}

/* A mask that needs a gradient (it depends on a tensor asked for): refused
 * by name, for flash_attn and for softmax. */
static void mask_refused(void) {
    chk_case("a gradient to the mask is refused");
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20});
    gml_tensor *q = gml_new_tensor_4d(ctx, GML_F32, 1, 2, 3, 4);
    gml_tensor *m = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 3, 3), "bias_mask");
    gml_tensor *o = gml_flash_attn_ext(ctx, q, q, q, 0.5f, &(gml_attn_opts){.mask = m});
    gml_tensor *gr[2];
    CHECK(gml_grad(ctx, o, NULL == o ? NULL : gml_new_tensor_4d(ctx, GML_F32, 1, 2, 3, 4),
                   (gml_tensor *[]){q, m}, 2, gr) != GML_OK,
          "flash_attn: a gradient for the mask is refused");
    CHECK_CONTAINS(gml_last_error(ctx), "bias_mask");
    gml_tensor *x = gml_new_tensor_4d(ctx, GML_F32, 1, 2, 3, 3);
    gml_tensor *s = gml_softmax_ext(ctx, x, 1.0f, &(gml_attn_opts){.mask = m});
    CHECK(gml_grad(ctx, s, gml_new_tensor_4d(ctx, GML_F32, 1, 2, 3, 3), (gml_tensor *[]){x, m}, 2,
                   gr) != GML_OK,
          "softmax: a gradient for the mask is refused");
    CHECK_CONTAINS(gml_last_error(ctx), "bias_mask");
    gml_free(ctx);
}

int main(void) {
    block();
    mask_refused();
    return chk_summary();
}
