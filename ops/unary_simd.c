/* The vector unary micro-kernels (ops/unary.inc), written once over the
 * SIMD layer and compiled once per ISA: y[i] = f(x[i]), whole vectors, then
 * the tail with a lane mask. f from ops/simd/vmath.h: every ISA's variant
 * gives bitwise the same results. */
#include "simd/vmath.h"
#include "ukernels.h"

#define VUNARY(name, f)                                                                     \
    void GML_SIMD_UKERNEL(f32_##name, GML_SIMD_U1)(size_t n, const float *x, float *y) {    \
        size_t i = 0;                                                                       \
        for (; i + GML_VL <= n; i += GML_VL) gml_vf_store(y + i, f(gml_vf_load(x + i)));    \
        if (i < n) {                                                                        \
            const gml_vm k = gml_vm_first(n - i);                                           \
            gml_vf_store_m(y + i, k, f(gml_vf_load_m(x + i, k)));                           \
        }                                                                                   \
    }

VUNARY(vtanh, gml_vtanh)
VUNARY(vsigmoid, gml_vsigmoid)
VUNARY(vsilu, gml_vsilu)
VUNARY(vgelu_tanh, gml_vgelu_tanh)
VUNARY(vgelu, gml_vgelu)

/* unary_back: out = dy f'(x), f' (ops/simd/vmath.h) and the product in
 * double lanes, the low and high halves of a float vector, rounded once. */
static GML_SIMD_INLINE gml_vf back_step(gml_vf x, gml_vf dy, gml_vd (*d1)(gml_vd)) {
    return gml_vf_from_vd(gml_vd_mul(gml_vd_lo(dy), d1(gml_vd_lo(x))),
                          gml_vd_mul(gml_vd_hi(dy), d1(gml_vd_hi(x))));
}

#define VUNARY_BACK(name, d1)                                                                  \
    void GML_SIMD_UKERNEL(f32_##name, GML_SIMD_U1)(size_t n, const float *x, const float *dy,  \
                                                   float *out) {                               \
        size_t i = 0;                                                                          \
        for (; i + GML_VL <= n; i += GML_VL)                                                   \
            gml_vf_store(out + i, back_step(gml_vf_load(x + i), gml_vf_load(dy + i), d1));    \
        if (i < n) {                                                                           \
            const gml_vm k = gml_vm_first(n - i);                                              \
            gml_vf_store_m(out + i, k,                                                         \
                           back_step(gml_vf_load_m(x + i, k), gml_vf_load_m(dy + i, k), d1)); \
        }                                                                                      \
    }

VUNARY_BACK(vtanh_back, gml_vtanh_d1)
VUNARY_BACK(vsigmoid_back, gml_vsigmoid_d1)
VUNARY_BACK(vsilu_back, gml_vsilu_d1)
VUNARY_BACK(vgelu_back, gml_vgelu_d1)
VUNARY_BACK(vgelu_tanh_back, gml_vgelu_tanh_d1)
