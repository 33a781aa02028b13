/* AVX2 variants of the copy micro-kernels (ops/copy.inc). */
#include "ukernels.h"

#include <immintrin.h>

/* Transposes the 8x8 block at src (row stride ss) into dst (row stride ds). */
static inline void transpose_8x8(const uint32_t *src, size_t ss, uint32_t *dst, size_t ds) {
    __m256 r[8], t[8], u[8];
    for (int i = 0; i < 8; i++)
        r[i] = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(src + i * ss)));
    /* pairs of rows interleaved, then quads, within 128-bit lanes */
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    /* u[c] lane L holds column 4L + c of rows 0-3, u[4 + c] of rows 4-7 */
    for (int c = 0; c < 4; c++) {
        _mm256_storeu_si256((__m256i *)(dst + c * ds),
                            _mm256_castps_si256(_mm256_permute2f128_ps(u[c], u[4 + c], 0x20)));
        _mm256_storeu_si256((__m256i *)(dst + (4 + c) * ds),
                            _mm256_castps_si256(_mm256_permute2f128_ps(u[c], u[4 + c], 0x31)));
    }
}

void gml_x32_transpose_ukernel__avx2_8x8(size_t rows, size_t cols, const uint32_t *src,
                                         size_t src_stride, uint32_t *dst, size_t dst_stride) {
    const size_t rows8 = rows / 8 * 8, cols8 = cols / 8 * 8;
    for (size_t j = 0; j < cols8; j += 8)
        for (size_t i = 0; i < rows8; i += 8)
            transpose_8x8(src + i * src_stride + j, src_stride, dst + j * dst_stride + i,
                          dst_stride);
    /* edges: the last rows % 8 rows, then the last cols % 8 columns */
    for (size_t j = 0; j < cols8; j++)
        for (size_t i = rows8; i < rows; i++) dst[j * dst_stride + i] = src[i * src_stride + j];
    for (size_t j = cols8; j < cols; j++)
        for (size_t i = 0; i < rows; i++) dst[j * dst_stride + i] = src[i * src_stride + j];
}
