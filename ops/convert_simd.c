/* The conversion micro-kernels (ops/convert.inc), written once over the
 * SIMD layer and compiled once per ISA: whole vectors, the tails by the
 * scalar conversions, which give the same bits. f16 and bf16 go through
 * the layer's conversions (bf16 rounded with integer operations: see
 * ops/convert.inc). */
#include "simd/simd.h"
#include "ukernels.h"

void GML_SIMD_UKERNEL(f32_f16_cvt, GML_SIMD_U1)(size_t n, const void *x, void *y) {
    const float *s = x;
    uint16_t *d = y;
    size_t i = 0;
    for (; i + GML_VL <= n; i += GML_VL) gml_vf_store_f16(d + i, gml_vf_load(s + i));
    for (; i < n; i++) d[i] = gml_fp32_to_fp16(s[i]);
}

void GML_SIMD_UKERNEL(f16_f32_cvt, GML_SIMD_U1)(size_t n, const void *x, void *y) {
    const uint16_t *s = x;
    float *d = y;
    size_t i = 0;
    for (; i + GML_VL <= n; i += GML_VL) gml_vf_store(d + i, gml_vf_load_f16(s + i));
    for (; i < n; i++) d[i] = gml_fp16_to_fp32(s[i]);
}

void GML_SIMD_UKERNEL(f32_bf16_cvt, GML_SIMD_U1)(size_t n, const void *x, void *y) {
    const float *s = x;
    uint16_t *d = y;
    size_t i = 0;
    for (; i + GML_VL <= n; i += GML_VL) gml_vf_store_bf16(d + i, gml_vf_load(s + i));
    for (; i < n; i++) d[i] = gml_fp32_to_bf16(s[i]);
}

void GML_SIMD_UKERNEL(bf16_f32_cvt, GML_SIMD_U1)(size_t n, const void *x, void *y) {
    const uint16_t *s = x;
    float *d = y;
    size_t i = 0;
    for (; i + GML_VL <= n; i += GML_VL) gml_vf_store(d + i, gml_vf_load_bf16(s + i));
    for (; i < n; i++) d[i] = gml_bf16_to_fp32(s[i]);
}

enum { QV = GML_QK8_0 / GML_VL }; /* vectors per q8_0 block */

/* q8_0 blocks as gml_quantize_row_q8_0: d = max |x| / 127, q = roundf(x /
 * d) (ties away from zero, by truncating and stepping up); a block with a
 * NaN or inf goes to the scalar rule. */
void GML_SIMD_UKERNEL(f32_q8_0_cvt, 32)(size_t n, const void *x, void *y) {
    const float *s = x;
    gml_block_q8_0 *b = y;
    const gml_vf inf = gml_vf_set1(INFINITY), sign = gml_vf_set1(-0.0f), one = gml_vf_set1(1.0f);
    for (size_t k = 0; k < n / GML_QK8_0; k++, s += GML_QK8_0) {
        gml_vf v[QV], amax = gml_vf_zero();
        gml_vm bad = gml_vm_first(0);
        for (int j = 0; j < QV; j++) {
            v[j] = gml_vf_load(s + GML_VL * j);
            amax = gml_vf_max(amax, gml_vf_abs(v[j]));
            bad = gml_vm_or(bad, gml_vm_not(gml_vf_lt(gml_vf_abs(v[j]), inf)));
        }
        if (gml_vm_any(bad)) { /* NaN or inf: as the scalar rule */
            gml_quantize_row_q8_0(s, b + k, GML_QK8_0);
            continue;
        }
        const float d = gml_vf_hmax(amax) / 127.0f;
        const float id = d != 0.0f && isfinite(1.0f / d) ? 1.0f / d : 0.0f; /* as the scalar */
        b[k].d = gml_fp32_to_fp16(d);
        for (int j = 0; j < QV; j++) {
            const gml_vf q = gml_vf_mul(v[j], gml_vf_set1(id));
            const gml_vf t = gml_vf_trunc(q);
            const gml_vm up = gml_vf_ge(gml_vf_abs(gml_vf_sub(q, t)), gml_vf_set1(0.5f));
            const gml_vf step = gml_vf_or(gml_vf_and(q, sign), one); /* +-1 */
            gml_vf_store_i8(b[k].qs + GML_VL * j, gml_vf_add_m(t, up, step));
        }
    }
}

void GML_SIMD_UKERNEL(q8_0_f32_cvt, 32)(size_t n, const void *x, void *y) {
    const gml_block_q8_0 *b = x;
    float *d = y;
    for (size_t k = 0; k < n / GML_QK8_0; k++, d += GML_QK8_0) {
        const gml_vf s = gml_vf_set1(gml_fp16_to_fp32(b[k].d));
        for (int j = 0; j < QV; j++)
            gml_vf_store(d + GML_VL * j, gml_vf_mul(s, gml_vf_load_i8(b[k].qs + GML_VL * j)));
    }
}
