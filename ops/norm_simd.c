/* The norm micro-kernel (ops/norm.inc), written once over the SIMD layer
 * and compiled once per ISA: two vectors a step, then the tail a vector at
 * a time with a lane mask. Multiplies and adds only, in the order of
 * ops/norm.h: every ISA's variant gives the scalar variant's bits. */
#include "norm.h"
#include "simd/simd.h"

static inline gml_vf apply(gml_vf x, gml_vf vc, gml_vf vs, bool has_w, gml_vf w, bool has_b,
                           gml_vf b) {
    gml_vf y = gml_vf_mul(gml_vf_sub(x, vc), vs);
    if (has_w) y = gml_vf_mul(y, w);
    if (has_b) y = gml_vf_add(y, b);
    return y;
}

static inline void vnorm(size_t n, const float *x, float c, float s, const float *w,
                         const float *b, float *out, bool has_w, bool has_b) {
    const gml_vf vc = gml_vf_set1(c), vs = gml_vf_set1(s), z = gml_vf_zero();
    size_t i = 0;
    for (; i + 2 * GML_VL <= n; i += 2 * GML_VL) {
        const size_t j = i + GML_VL;
        const gml_vf y0 = apply(gml_vf_load(x + i), vc, vs, has_w, has_w ? gml_vf_load(w + i) : z,
                                has_b, has_b ? gml_vf_load(b + i) : z);
        const gml_vf y1 = apply(gml_vf_load(x + j), vc, vs, has_w, has_w ? gml_vf_load(w + j) : z,
                                has_b, has_b ? gml_vf_load(b + j) : z);
        gml_vf_store(out + i, y0);
        gml_vf_store(out + j, y1);
    }
    for (; i < n; i += GML_VL) {
        const gml_vm k = gml_vm_first(GML_MIN(n - i, (size_t)GML_VL));
        const gml_vf y = apply(gml_vf_load_m(x + i, k), vc, vs, has_w,
                               has_w ? gml_vf_load_m(w + i, k) : z, has_b,
                               has_b ? gml_vf_load_m(b + i, k) : z);
        gml_vf_store_m(out + i, k, y);
    }
}

void GML_SIMD_UKERNEL(f32_vnorm, GML_SIMD_U2)(size_t n, const float *x, float c, float s,
                                              const float *w, const float *b, float *out) {
    if (w && b) vnorm(n, x, c, s, w, b, out, true, true);
    else if (w) vnorm(n, x, c, s, w, b, out, true, false);
    else if (b) vnorm(n, x, c, s, w, b, out, false, true);
    else vnorm(n, x, c, s, w, b, out, false, false);
}
