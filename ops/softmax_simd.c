/* The softmax and exp micro-kernels (ops/softmax.inc), written once over
 * the SIMD layer and compiled once per ISA. exp is ops/simd/vmath.h's:
 * every ISA's vexp variant gives the same bits. softmax's sum ends in this
 * ISA's horizontal sum, so its variants may differ from one another in the
 * last bit. */
#include "simd/vmath.h"
#include "ukernels.h"

/* y = exp(x). Error against exp in double, measured over every float of
 * [-87.34, 88.72] (the normal results) by tests/test_ukernels_vexp.c with
 * GGMLITE_VEXP_EXHAUSTIVE=1: at most 7.7e-8 relative, 0.91 ulp (at x =
 * -26.737; glibc's expf: 0.50 ulp). Subnormal results (x in [-103.97,
 * -87.34]): within 0.86 ulp (of 2^-149). Below -103.98 and at -inf: +0.
 * Above 88.7229 and at +inf: +inf. NaN: NaN. The test asserts 1 ulp and
 * 1e-7 relative on every 128th float. */
void GML_SIMD_UKERNEL(f32_vexp, GML_SIMD_U1)(size_t n, const float *x, float *y) {
    size_t i = 0;
    for (; i + GML_VL <= n; i += GML_VL) gml_vf_store(y + i, gml_vexp(gml_vf_load(x + i)));
    if (i < n) {
        const gml_vm k = gml_vm_first(n - i);
        gml_vf_store_m(y + i, k, gml_vexp(gml_vf_load_m(x + i, k)));
    }
}

/* Scores of the lanes k at i: x * scale (+ mask), as gml_softmax_score:
 * -inf where the mask is -inf (hidden), else NaN for a -inf score;
 * masked-off lanes 0. */
static inline gml_vf scores(gml_vm k, const float *x, const float *mask, size_t i,
                            gml_vf vscale) {
    const gml_vf neg_inf = gml_vf_set1(-INFINITY);
    const gml_vf xv = gml_vf_load_m(x + i, k);
    gml_vf v = gml_vf_mul(xv, vscale);
    gml_vm hidden = gml_vm_first(0);
    if (mask) {
        const gml_vf mv = gml_vf_load_m(mask + i, k);
        v = gml_vf_add(v, mv);
        hidden = gml_vm_or(hidden, gml_vf_eq(mv, neg_inf));
    }
    v = gml_vf_select(gml_vf_eq(v, neg_inf), gml_vf_set1(NAN), v);
    return gml_vf_select(hidden, neg_inf, v);
}

/* Rows in blocks of 32 vectors: within a block each float lane sums at
 * most 16 exps, blocks are summed in double. */
#define SUM_BLOCK (32 * GML_VL)

void GML_SIMD_UKERNEL(f32_softmax, GML_SIMD_U2)(size_t n, const float *x, const float *mask,
                                                float scale, float *out) {
    const gml_vf vscale = gml_vf_set1(scale);
    const gml_vm all = gml_vm_first(GML_VL);
    const gml_vf neg_inf = gml_vf_set1(-INFINITY);

    /* pass 1: scores into out, and their max (NaN scores are not the max,
     * as in the reference; they make the sum NaN below) */
    gml_vf vmax0 = neg_inf, vmax1 = neg_inf;
    size_t i = 0;
    for (; i + 2 * GML_VL <= n; i += 2 * GML_VL) {
        const gml_vf v0 = scores(all, x, mask, i, vscale);
        const gml_vf v1 = scores(all, x, mask, i + GML_VL, vscale);
        gml_vf_store(out + i, v0);
        gml_vf_store(out + i + GML_VL, v1);
        vmax0 = gml_vf_max(v0, vmax0);
        vmax1 = gml_vf_max(v1, vmax1);
    }
    for (; i < n; i += GML_VL) {
        const gml_vm k = gml_vm_first(GML_MIN(n - i, (size_t)GML_VL));
        const gml_vf v = scores(k, x, mask, i, vscale);
        gml_vf_store_m(out + i, k, v);
        vmax0 = gml_vf_max(gml_vf_select(k, v, neg_inf), vmax0);
    }
    const float max = gml_vf_hmax(gml_vf_max(vmax0, vmax1));
    if (max == -INFINITY) { /* every key masked, or NaN scores */
        gml_softmax_no_visible_key(n, out);
        return;
    }

    /* pass 2: out = exp(out - max), summed; +0 below 2^-125.5, never a
     * subnormal (gml_vexp_nosub: a microcode assist each on Intel) */
    const gml_vf vmax = gml_vf_set1(max);
    gml_vd sum_lo = gml_vd_zero(), sum_hi = gml_vd_zero();
    for (i = 0; i < n;) {
        const size_t end = GML_MIN(n, i + SUM_BLOCK);
        gml_vf s0 = gml_vf_zero(), s1 = gml_vf_zero();
        for (; i + 2 * GML_VL <= end; i += 2 * GML_VL) {
            const gml_vf e0 = gml_vexp_nosub(gml_vf_sub(gml_vf_load(out + i), vmax));
            const gml_vf e1 = gml_vexp_nosub(gml_vf_sub(gml_vf_load(out + i + GML_VL), vmax));
            gml_vf_store(out + i, e0);
            gml_vf_store(out + i + GML_VL, e1);
            s0 = gml_vf_add(s0, e0);
            s1 = gml_vf_add(s1, e1);
        }
        for (; i < end; i += GML_VL) {
            const gml_vm k = gml_vm_first(GML_MIN(end - i, (size_t)GML_VL));
            const gml_vf e = gml_vexp_nosub(gml_vf_sub(gml_vf_load_m(out + i, k), vmax));
            gml_vf_store_m(out + i, k, e);
            s0 = gml_vf_add_m(s0, k, e);
        }
        s0 = gml_vf_add(s0, s1);
        sum_lo = gml_vd_add(sum_lo, gml_vd_lo(s0));
        sum_hi = gml_vd_add(sum_hi, gml_vd_hi(s0));
    }
    const double sum = gml_vd_hsum(gml_vd_add(sum_lo, sum_hi));

    /* pass 3: normalize */
    const gml_vf inv = gml_vf_set1((float)(1.0 / sum));
    for (i = 0; i + GML_VL <= n; i += GML_VL)
        gml_vf_store(out + i, gml_vf_mul(gml_vf_load(out + i), inv));
    if (i < n) {
        const gml_vm k = gml_vm_first(n - i);
        gml_vf_store_m(out + i, k, gml_vf_mul(gml_vf_load_m(out + i, k), inv));
    }
}
