/* The elementwise micro-kernels (ops/binary.inc), written once over the
 * SIMD layer and compiled once per ISA: two vectors a step, then the tail
 * a vector at a time with a lane mask. */
#include "simd/simd.h"
#include "ukernels.h"

enum { ADD, MUL, SUB, DIV };

static inline gml_vf apply(int op, gml_vf x, gml_vf y) {
    return op == ADD   ? gml_vf_add(x, y)
           : op == MUL ? gml_vf_mul(x, y)
           : op == SUB ? gml_vf_sub(x, y)
                       : gml_vf_div(x, y);
}

/* out = a (op) b, b read densely or, if b_const, as one value; rev (with
 * b_const): out = b[0] (op) a. */
static inline void vbinary(int op, bool b_const, bool rev, size_t n, const float *a,
                           const float *b, float *out) {
    const gml_vf bc = b_const ? gml_vf_set1(*b) : gml_vf_zero();
    size_t i = 0;
    for (; i + 2 * GML_VL <= n; i += 2 * GML_VL) {
        const gml_vf a0 = gml_vf_load(a + i), a1 = gml_vf_load(a + i + GML_VL);
        const gml_vf b0 = b_const ? bc : gml_vf_load(b + i);
        const gml_vf b1 = b_const ? bc : gml_vf_load(b + i + GML_VL);
        const gml_vf y0 = rev ? apply(op, b0, a0) : apply(op, a0, b0);
        const gml_vf y1 = rev ? apply(op, b1, a1) : apply(op, a1, b1);
        gml_vf_store(out + i, y0);
        gml_vf_store(out + i + GML_VL, y1);
    }
    for (; i < n; i += GML_VL) {
        const gml_vm k = gml_vm_first(GML_MIN(n - i, (size_t)GML_VL));
        const gml_vf av = gml_vf_load_m(a + i, k);
        const gml_vf bv = b_const ? bc : gml_vf_load_m(b + i, k);
        gml_vf_store_m(out + i, k, rev ? apply(op, bv, av) : apply(op, av, bv));
    }
}

#define VBINARY(name, op, b_const, rev)                                                    \
    void GML_SIMD_UKERNEL(f32_##name, GML_SIMD_U2)(size_t n, const float *a, const float *b, \
                                                   float *out) {                           \
        vbinary(op, b_const, rev, n, a, b, out);                                           \
    }

VBINARY(vadd, ADD, false, false)
VBINARY(vaddc, ADD, true, false)
VBINARY(vmul, MUL, false, false)
VBINARY(vmulc, MUL, true, false)
VBINARY(vsub, SUB, false, false)
VBINARY(vsubc, SUB, true, false)
VBINARY(vrsubc, SUB, true, true)
VBINARY(vdiv, DIV, false, false)
VBINARY(vdivc, DIV, true, false)
VBINARY(vrdivc, DIV, true, true)
