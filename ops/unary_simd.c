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
