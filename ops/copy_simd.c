/* The transpose micro-kernel of the copies (ops/copy.inc), written once
 * over the SIMD layer and compiled once per ISA: GML_VL x GML_VL blocks
 * (8x8 on AVX2, 16x16 on AVX-512, 4x4 on NEON), transposed in registers,
 * the blocks at the edges with lane masks. It moves 32-bit values as they
 * are, through float lanes that no arithmetic touches. */
#include "simd/simd.h"
#include "ukernels.h"

#define TRANSPOSE_UKERNEL(tag, vl) TRANSPOSE_UKERNEL_(tag, vl)
#define TRANSPOSE_UKERNEL_(tag, vl) gml_x32_transpose_ukernel__##tag##_##vl##x##vl

/* Transposes the top-left rows x cols (each <= GML_VL) of the block at src
 * (row stride ss) into dst (row stride ds); lanes outside are neither read
 * nor written. */
static inline void transpose_block(size_t rows, size_t cols, const float *src, size_t ss,
                                   float *dst, size_t ds) {
    gml_vf r[GML_VL];
    if (rows == GML_VL && cols == GML_VL) {
        for (size_t i = 0; i < GML_VL; i++) r[i] = gml_vf_load(src + i * ss);
        gml_vf_transpose(r);
        for (size_t j = 0; j < GML_VL; j++) gml_vf_store(dst + j * ds, r[j]);
        return;
    }
    const gml_vm col_mask = gml_vm_first(cols), row_mask = gml_vm_first(rows);
    for (size_t i = 0; i < GML_VL; i++)
        r[i] = i < rows ? gml_vf_load_m(src + i * ss, col_mask) : gml_vf_zero();
    gml_vf_transpose(r);
    for (size_t j = 0; j < cols; j++) gml_vf_store_m(dst + j * ds, row_mask, r[j]);
}

void TRANSPOSE_UKERNEL(GML_SIMD_TAG, GML_SIMD_U1)(size_t rows, size_t cols, const uint32_t *src,
                                                  size_t src_stride, uint32_t *dst,
                                                  size_t dst_stride) {
    const float *s = (const float *)src;
    float *d = (float *)dst;
    for (size_t j = 0; j < cols; j += GML_VL)
        for (size_t i = 0; i < rows; i += GML_VL)
            transpose_block(GML_MIN((size_t)GML_VL, rows - i), GML_MIN((size_t)GML_VL, cols - j),
                            s + i * src_stride + j, src_stride, d + j * dst_stride + i, dst_stride);
}
