/* AVX-512F variants of the copy micro-kernels (ops/copy.inc). */
#include "ukernels.h"

#include <immintrin.h>

/* Transposes the top-left rows x cols (each <= 16) of the 16x16 block at src
 * (row stride ss) into dst (row stride ds); lanes outside are neither read
 * nor written. */
static inline void transpose_16x16(size_t rows, size_t cols, const uint32_t *src, size_t ss,
                                   uint32_t *dst, size_t ds) {
    const __mmask16 col_mask = (__mmask16)((1u << cols) - 1u);
    const __mmask16 row_mask = (__mmask16)((1u << rows) - 1u);
    __m512 r[16], t[16], u[16];
    for (size_t i = 0; i < 16; i++)
        r[i] = i < rows ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi32(col_mask, src + i * ss))
                        : _mm512_setzero_ps();
    /* pairs of rows interleaved, then quads, within 128-bit lanes */
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        u[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xee);
        u[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    /* u[4m + c] lane L holds column 4L + c of rows 4m..4m+3; gather the four
     * lanes L of u[c], u[4 + c], u[8 + c], u[12 + c] into output row 4L + c */
    for (size_t c = 0; c < 4; c++) {
        const __m512 lo01 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);  /* lanes 0,1 | 0,1 */
        const __m512 lo23 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xee);  /* lanes 2,3 | 2,3 */
        const __m512 hi01 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
        const __m512 hi23 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xee);
        const __m512 out[4] = {
            _mm512_shuffle_f32x4(lo01, hi01, 0x88), /* lane 0 of each */
            _mm512_shuffle_f32x4(lo01, hi01, 0xdd), /* lane 1 */
            _mm512_shuffle_f32x4(lo23, hi23, 0x88), /* lane 2 */
            _mm512_shuffle_f32x4(lo23, hi23, 0xdd), /* lane 3 */
        };
        for (size_t L = 0; L < 4; L++)
            if (4 * L + c < cols)
                _mm512_mask_storeu_epi32(dst + (4 * L + c) * ds, row_mask,
                                         _mm512_castps_si512(out[L]));
    }
}

void gml_x32_transpose_ukernel__avx512_16x16(size_t rows, size_t cols, const uint32_t *src,
                                             size_t src_stride, uint32_t *dst,
                                             size_t dst_stride) {
    for (size_t j = 0; j < cols; j += 16)
        for (size_t i = 0; i < rows; i += 16)
            transpose_16x16(GML_MIN(16, rows - i), GML_MIN(16, cols - j),
                            src + i * src_stride + j, src_stride, dst + j * dst_stride + i,
                            dst_stride);
}
