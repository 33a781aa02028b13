/* Conversions of runs between f32 and f16, bf16, q8_0: the scalar
 * micro-kernels (the scalar conversions of ggmlite/types.c in a loop) and
 * the picking of a variant (ops/convert.inc). */
#include "ukernels.h"

void gml_f32_f16_cvt_ukernel__scalar_u1(size_t n, const void *x, void *y) {
    const float *s = x;
    uint16_t *d = y;
    for (size_t i = 0; i < n; i++) d[i] = gml_fp32_to_fp16(s[i]);
}
void gml_f16_f32_cvt_ukernel__scalar_u1(size_t n, const void *x, void *y) {
    const uint16_t *s = x;
    float *d = y;
    for (size_t i = 0; i < n; i++) d[i] = gml_fp16_to_fp32(s[i]);
}
void gml_f32_bf16_cvt_ukernel__scalar_u1(size_t n, const void *x, void *y) {
    const float *s = x;
    uint16_t *d = y;
    for (size_t i = 0; i < n; i++) d[i] = gml_fp32_to_bf16(s[i]);
}
void gml_bf16_f32_cvt_ukernel__scalar_u1(size_t n, const void *x, void *y) {
    const uint16_t *s = x;
    float *d = y;
    for (size_t i = 0; i < n; i++) d[i] = gml_bf16_to_fp32(s[i]);
}
void gml_f32_q8_0_cvt_ukernel__scalar_u32(size_t n, const void *x, void *y) {
    gml_quantize_row_q8_0(x, y, (int64_t)n);
}
void gml_q8_0_f32_cvt_ukernel__scalar_u32(size_t n, const void *x, void *y) {
    gml_dequantize_row_q8_0(x, y, (int64_t)n);
}

#define PICK(list, name)                                                             \
    do {                                                                             \
        if (name) *(name) = GML_PICK_UKERNEL_NAME(isa, list);                                \
        return GML_PICK_UKERNEL(isa, list, gml_cvt_ukernel);                                 \
    } while (0)

gml_cvt_ukernel *gml_cvt_to_f32(gml_isa isa, gml_type type, const char **name) {
    switch (type) {
    case GML_F16: PICK(GML_F16_F32_CVT_UKERNELS, name);
    case GML_BF16: PICK(GML_BF16_F32_CVT_UKERNELS, name);
    case GML_Q8_0: PICK(GML_Q8_0_F32_CVT_UKERNELS, name);
    default: return NULL;
    }
}

gml_cvt_ukernel *gml_cvt_from_f32(gml_isa isa, gml_type type, const char **name) {
    switch (type) {
    case GML_F16: PICK(GML_F32_F16_CVT_UKERNELS, name);
    case GML_BF16: PICK(GML_F32_BF16_CVT_UKERNELS, name);
    case GML_Q8_0: PICK(GML_F32_Q8_0_CVT_UKERNELS, name);
    default: return NULL;
    }
}
