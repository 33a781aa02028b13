/* The flash attention backward's micro-kernels (every variant of
 * ops/flash_attn.inc's GML_F32_FLASH_BACK_UKERNELS) on single blocks: the
 * rows they lay out themselves (ops/flash_back.h) bitwise (qr and qt = q
 * scale, dor and dot = dO, lanes past nq zeros, and D = the FMA chain over
 * the columns in order, fmaf's bits), then dQ (written through dq_rows),
 * dK and dV against the block's gradients computed here in double from the
 * same floats, within a bound from the magnitudes of the terms. Blocks of
 * 1 .. tile rows, odd d_k and d_v, key counts around the key block, lanes
 * with fewer keys, a softcap; the rows at scattered, unaligned addresses
 * given in a shuffled order; nothing written outside the dQ rows and the
 * dK, dV accumulators' rows. */
#include "../ops/flash_back.h"
#include "simd_check.h"

#define TOL_REL 3e-5 /* of the sum of |terms|: float sums, exp's ulps */
#define TOL_ABS 1e-7
#define CANARY 777.0f

typedef struct {
    gml_isa isa;
    gml_f32_flash_back_ukernel *fn;
    size_t tile;
    const char *name;
} variant;

#define ENTRY(isa, fn, tile) {isa, fn, tile, #fn},
static const variant VARIANTS[] = {GML_F32_FLASH_BACK_UKERNELS(ENTRY)};

static float *aligned_floats(size_t n, float fill) {
    float *p = aligned_alloc(64, gml_align_up(n * sizeof(float), 64));
    for (size_t i = 0; i < n; i++) p[i] = fill;
    return p;
}

/* Worst |got - want| / bound over n values (> 1: out of bounds). */
static double worst(const float *got, size_t stride_got, const double *want, const double *mag,
                    size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)got[i * stride_got] - want[i]);
        const double b = TOL_REL * mag[i] + TOL_ABS;
        if (!(e <= b)) w = fmax(w, isnan(e) ? INFINITY : e / b);
    }
    return w;
}

static void check_block(const variant *var, size_t nq, size_t Tk, size_t dk, size_t dv,
                        float softcap) {
    const size_t tile = var->tile, ldr = 2 * (dk > dv ? dk : dv) + 5;
    const float scale = 0.3f;
    /* q, dO, O rows: row m of `store` at m ldr + 1 (unaligned), handed out
     * in a shuffled order; dQ rows likewise, with canaries around them */
    float *store = aligned_floats(3 * tile * ldr, NAN);
    float *dqs = aligned_floats(tile * ldr, CANARY);
    const float *q_rows[64], *do_rows[64], *o_rows[64];
    float *dq_rows[64];
    size_t perm[64];
    for (size_t l = 0; l < tile; l++) perm[l] = l;
    for (size_t l = tile; l > 1; l--) {
        const size_t m = (size_t)rand_int((int64_t)l), t = perm[l - 1];
        perm[l - 1] = perm[m];
        perm[m] = t;
    }
    for (size_t l = 0; l < nq; l++) {
        float *qrw = store + perm[l] * ldr + 1, *grw = store + (tile + perm[l]) * ldr + 1;
        float *orw = store + (2 * tile + perm[l]) * ldr + 1;
        fill_uniform(qrw, dk, -1, 1);
        fill_uniform(grw, dv, -1, 1);
        fill_uniform(orw, dv, -1, 1);
        q_rows[l] = qrw;
        do_rows[l] = grw;
        o_rows[l] = orw;
        dq_rows[l] = dqs + perm[l] * ldr + 1;
    }
    float *k = aligned_floats(Tk * dk, 0), *v = aligned_floats(Tk * dv, 0);
    fill_uniform(k, Tk * dk, -1, 1);
    fill_uniform(v, Tk * dv, -1, 1);
    const size_t pad = 16;
    float *dk_acc = aligned_floats(Tk * dk + pad, CANARY), *dv_acc = aligned_floats(Tk * dv + pad, CANARY);
    for (size_t i = 0; i < Tk * dk; i++) dk_acc[i] = 0;
    for (size_t i = 0; i < Tk * dv; i++) dv_acc[i] = 0;
    /* the scratch the variant writes: NaN first, so lanes it forgets show */
    float *qt = aligned_floats(dk * tile, NAN), *qr = aligned_floats(tile * dk, NAN);
    float *dot = aligned_floats(dv * tile, NAN), *dor = aligned_floats(tile * dv, NAN);
    float *dd = aligned_floats(tile, NAN), *dqt = aligned_floats((dk + 16) * tile, NAN);
    float *lse = aligned_floats(tile, INFINITY);
    float *work = aligned_floats(GML_FLASH_BACK_WORK_FLOATS(tile), NAN);
    int32_t n_keys[64] = {0};
    /* the expected layout; P, dS and the gradients in double from it */
    double *s = malloc(tile * Tk * sizeof *s), *ds = malloc(tile * Tk * sizeof *ds);
    double *dsm = malloc(tile * Tk * sizeof *dsm); /* |dS| as its float error scales */
    float *qsc = calloc(tile * dk, sizeof *qsc), *ddf = calloc(tile, sizeof *ddf);
    for (size_t l = 0; l < nq; l++) {
        n_keys[l] = (int32_t)(l % 3 == 2 && Tk > 1 ? Tk - 1 - l % (Tk - 1) : Tk);
        for (size_t c = 0; c < dk; c++) qsc[l * dk + c] = q_rows[l][c] * scale;
        float sum = 0;
        for (size_t c = 0; c < dv; c++) sum = fmaf(do_rows[l][c], o_rows[l][c], sum);
        ddf[l] = sum;
        double m = -INFINITY, z = 0;
        for (size_t j = 0; j < (size_t)n_keys[l]; j++) {
            double x = 0;
            for (size_t c = 0; c < dk; c++) x += (double)qsc[l * dk + c] * k[j * dk + c];
            if (softcap > 0) x = softcap * tanh(x / softcap);
            s[l * Tk + j] = x;
            m = fmax(m, x);
        }
        for (size_t j = 0; j < (size_t)n_keys[l]; j++) z += exp(s[l * Tk + j] - m);
        lse[l] = (float)(m + log(z));
        for (size_t j = 0; j < Tk; j++) {
            if (j >= (size_t)n_keys[l]) {
                s[l * Tk + j] = ds[l * Tk + j] = dsm[l * Tk + j] = 0;
                continue;
            }
            double x = 0, g = 0, gm = 0;
            for (size_t c = 0; c < dk; c++) x += (double)qsc[l * dk + c] * k[j * dk + c];
            for (size_t c = 0; c < dv; c++) {
                g += (double)do_rows[l][c] * v[j * dv + c];
                gm += fabs((double)do_rows[l][c] * v[j * dv + c]);
            }
            const double t = softcap > 0 ? tanh(x / softcap) : 0;
            const double p = exp(s[l * Tk + j] - (double)lse[l]);
            s[l * Tk + j] = p;
            ds[l * Tk + j] = p * (g - (double)ddf[l]) * (softcap > 0 ? 1 - t * t : 1);
            dsm[l * Tk + j] = p * (gm + fabs((double)ddf[l]));
        }
    }
    gml_flash_back_args a = {.nq = nq, .dk = dk, .dv = dv, .q_rows = q_rows, .do_rows = do_rows,
                             .o_rows = o_rows, .dq_rows = dq_rows, .scale = scale, .qt = qt,
                             .qr = qr, .dot = dot, .dor = dor, .dd = dd, .lse = lse, .k = k,
                             .v = v, .kz = k, .dk_acc = dk_acc, .dv_acc = dv_acc, .dqt = dqt,
                             .n_keys = n_keys, .softcap = softcap, .work = work};
    var->fn(&a);
    char what[160];
    snprintf(what, sizeof what, "%s nq %zu Tk %zu dk %zu dv %zu softcap %g", var->name, nq, Tk,
             dk, dv, (double)softcap);
    /* the layout, bitwise */
    size_t bad = 0;
    for (size_t l = 0; l < tile; l++) {
        for (size_t c = 0; c < dk; c++) {
            const float want = l < nq ? qsc[l * dk + c] : 0.0f;
            bad += !same_f32(qr[l * dk + c], want) || !same_f32(qt[c * tile + l], want);
        }
        for (size_t c = 0; c < dv; c++) {
            const float want = l < nq ? do_rows[l][c] : 0.0f;
            bad += !same_f32(dor[l * dv + c], want) || !same_f32(dot[c * tile + l], want);
        }
    }
    CHECK(bad == 0, "%s: %zu elements of qr, qt, dor, dot not q scale, dO (or 0 past nq)", what,
          bad);
    for (size_t l = 0; l < tile; l++)
        CHECK(same_f32(dd[l], l < nq ? ddf[l] : 0.0f),
              "%s: D of lane %zu %.9g (bits %08x), the in-order FMA chain gives %.9g (%08x)", what,
              l, (double)dd[l], f32_bits(dd[l]), (double)(l < nq ? ddf[l] : 0.0f),
              f32_bits(l < nq ? ddf[l] : 0.0f));
    /* dQ, dK, dV against double */
    double *want = malloc((Tk > tile ? Tk : tile) * (dk > dv ? dk : dv) * sizeof *want);
    double *mag = malloc((Tk > tile ? Tk : tile) * (dk > dv ? dk : dv) * sizeof *mag);
    double w = 0;
    for (size_t l = 0; l < nq; l++) {
        for (size_t c = 0; c < dk; c++) {
            double x = 0, m = 0;
            for (size_t j = 0; j < Tk; j++) {
                x += ds[l * Tk + j] * k[j * dk + c];
                m += dsm[l * Tk + j] * fabs(k[j * dk + c]);
            }
            want[c] = x * scale;
            mag[c] = m * scale;
        }
        w = fmax(w, worst(dq_rows[l], 1, want, mag, dk));
    }
    CHECK(w <= 1, "%s: dQ off by %.3g times the bound", what, w);
    w = 0;
    double wv = 0;
    for (size_t j = 0; j < Tk; j++) {
        for (size_t c = 0; c < dk; c++) {
            double x = 0, m = 0;
            for (size_t l = 0; l < nq; l++) {
                x += ds[l * Tk + j] * qsc[l * dk + c];
                m += dsm[l * Tk + j] * fabs(qsc[l * dk + c]);
            }
            want[j * dk + c] = x;
            mag[j * dk + c] = m;
        }
    }
    w = worst(dk_acc, 1, want, mag, Tk * dk);
    for (size_t j = 0; j < Tk; j++)
        for (size_t c = 0; c < dv; c++) {
            double x = 0, m = 0;
            for (size_t l = 0; l < nq; l++) {
                x += s[l * Tk + j] * do_rows[l][c];
                m += fabs(s[l * Tk + j] * do_rows[l][c]);
            }
            want[j * dv + c] = x;
            mag[j * dv + c] = m;
        }
    wv = worst(dv_acc, 1, want, mag, Tk * dv);
    CHECK(w <= 1 && wv <= 1, "%s: dK off by %.3g, dV by %.3g times the bound", what, w, wv);
    /* nothing written outside the rows */
    size_t out = 0;
    for (size_t m = 0; m < tile; m++)
        for (size_t i = 0; i < ldr; i++) {
            bool in_row = false;
            for (size_t l = 0; l < nq; l++) in_row |= perm[l] == m && i >= 1 && i < 1 + dk;
            out += !in_row && dqs[m * ldr + i] != CANARY;
        }
    for (size_t i = 0; i < pad; i++)
        out += (dk_acc[Tk * dk + i] != CANARY) + (dv_acc[Tk * dv + i] != CANARY);
    CHECK(out == 0, "%s: %zu floats written outside the dQ rows and dK, dV", what, out);
    void *bufs[] = {store, dqs, k, v, dk_acc, dv_acc, qt, qr, dot, dor, dd, dqt, lse, work, s,
                    ds, dsm, qsc, ddf, want, mag};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
}

int main(void) {
    static const size_t dims[][2] = {{1, 1}, {7, 5}, {16, 16}, {17, 33}, {64, 64}, {80, 48}};
    static const size_t tks[] = {1, 40, 64, 70, 131};
    for (size_t vi = 0; vi < sizeof VARIANTS / sizeof *VARIANTS; vi++) {
        const variant *var = &VARIANTS[vi];
        if (!cpu_runs(var->isa, var->name)) continue;
        const size_t t = var->tile, nqs[] = {1, t / 2 + 1, t - 1, t};
        for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
            for (size_t ni = 0; ni < sizeof nqs / sizeof *nqs; ni++)
                for (size_t ti = 0; ti < sizeof tks / sizeof *tks; ti++)
                    check_block(var, nqs[ni], tks[ti], dims[di][0], dims[di][1],
                                ti == 2 && ni == 3 ? 2.5f : 0.0f);
    }
    return check_report("test_ukernels_flash_back");
}
