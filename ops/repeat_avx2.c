/* AVX2 variants of the repeat micro-kernels (ops/repeat.inc). */
#include "ukernels.h"

#include <immintrin.h>

/* The first r lanes, 0 <= r <= 8. */
static inline __m256i first_lanes(size_t r) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Chunks of 8 elements of x give 8 * reps outputs: for reps < 8, output
 * vector q of a chunk is x's vector permuted by lanes (8q + l) / reps; for
 * reps >= 8, each element is broadcast. */
void gml_x32_repeat_ukernel__avx2_u8(size_t n, size_t reps, const uint32_t *x, uint32_t *out) {
    if (reps >= 8) {
        for (size_t i = 0; i < n; i++) {
            const __m256i v = _mm256_set1_epi32((int)x[i]);
            size_t r = 0;
            for (; r + 8 <= reps; r += 8) _mm256_storeu_si256((__m256i *)(out + r), v);
            if (r < reps) _mm256_maskstore_epi32((int *)(out + r), first_lanes(reps - r), v);
            out += reps;
        }
        return;
    }
    /* floor((t + 0.5) / reps) = floor(t / reps) for t < 64: the quotient
     * stays 0.5/reps away from an integer, far more than its rounding */
    __m256i perm[8];
    const __m256 lane = _mm256_setr_ps(0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f, 7.5f);
    for (size_t q = 0; q < reps; q++)
        perm[q] = _mm256_cvttps_epi32(_mm256_div_ps(
            _mm256_add_ps(lane, _mm256_set1_ps(8.0f * (float)q)), _mm256_set1_ps((float)reps)));
    for (size_t i = 0; i < n; i += 8) {
        const size_t m = GML_MIN(8, n - i); /* elements of x in this chunk */
        const __m256i v = _mm256_maskload_epi32((const int *)(x + i), first_lanes(m));
        for (size_t q = 0; q < reps; q++) {
            const size_t done = 8 * q, left = m * reps - GML_MIN(m * reps, done);
            if (left == 0) break;
            _mm256_maskstore_epi32((int *)(out + done), first_lanes(GML_MIN(8, left)),
                                   _mm256_permutevar8x32_epi32(v, perm[q]));
        }
        out += m * reps;
    }
}
