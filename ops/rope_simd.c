/* The rope micro-kernels (ops/rope.inc), written once over the SIMD layer
 * and compiled once per ISA. Multiplies and adds only (no FMA), in the
 * scalar variant's order: every ISA's variant gives the same bits. */
#include "simd/simd.h"
#include "ukernels.h"

/* Rotate-half pairs (x0[i], x1[i]): a vector a step, the tail with a mask. */
void GML_SIMD_UKERNEL(f32_rope, GML_SIMD_U1)(size_t n, const float *c, const float *s,
                                             const float *x0, const float *x1, float *o0,
                                             float *o1) {
    size_t i = 0;
    for (; i + GML_VL <= n; i += GML_VL) {
        const gml_vf vc = gml_vf_load(c + i), vs = gml_vf_load(s + i);
        const gml_vf a = gml_vf_load(x0 + i), b = gml_vf_load(x1 + i);
        gml_vf_store(o0 + i, gml_vf_sub(gml_vf_mul(a, vc), gml_vf_mul(b, vs)));
        gml_vf_store(o1 + i, gml_vf_add(gml_vf_mul(b, vc), gml_vf_mul(a, vs)));
    }
    if (i < n) {
        const gml_vm m = gml_vm_first(n - i);
        const gml_vf vc = gml_vf_load_m(c + i, m), vs = gml_vf_load_m(s + i, m);
        const gml_vf a = gml_vf_load_m(x0 + i, m), b = gml_vf_load_m(x1 + i, m);
        gml_vf_store_m(o0 + i, m, gml_vf_sub(gml_vf_mul(a, vc), gml_vf_mul(b, vs)));
        gml_vf_store_m(o1 + i, m, gml_vf_add(gml_vf_mul(b, vc), gml_vf_mul(a, vs)));
    }
}

/* Interleaved pairs (x[2i], x[2i+1]), GML_VL / 2 pairs a vector: cos and
 * sin duplicated per pair, sin negated on the even lanes, the pair
 * swapped: o = x c + swap(x) (-s, s); a c + b (-s) is a c - b s exactly,
 * b c + a s as is. */
void GML_SIMD_UKERNEL(f32_ropei, GML_SIMD_UHALF)(size_t n, const float *c, const float *s,
                                                 const float *x, float *o) {
    static const float neg_even_lanes[16] = {-0.0f, 0.0f, -0.0f, 0.0f, -0.0f, 0.0f, -0.0f, 0.0f,
                                             -0.0f, 0.0f, -0.0f, 0.0f, -0.0f, 0.0f, -0.0f, 0.0f};
    const gml_vf neg_even = gml_vf_load(neg_even_lanes);
    for (size_t i = 0; i < n; i += GML_VL / 2) {
        const size_t m = GML_MIN((size_t)GML_VL / 2, n - i);
        const gml_vm mc = gml_vm_first(m), mx = gml_vm_first(2 * m);
        const gml_vf vc = gml_vf_dup2(gml_vf_load_m(c + i, mc));
        const gml_vf vs = gml_vf_xor(gml_vf_dup2(gml_vf_load_m(s + i, mc)), neg_even);
        const gml_vf v = gml_vf_load_m(x + 2 * i, mx);
        const gml_vf sw = gml_vf_swap2(v);
        gml_vf_store_m(o + 2 * i, mx, gml_vf_add(gml_vf_mul(v, vc), gml_vf_mul(sw, vs)));
    }
}
