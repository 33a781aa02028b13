/* AVX-512F variants of the repeat micro-kernels (ops/repeat.inc). */
#include "ukernels.h"

#include <immintrin.h>

/* The first r lanes, 0 <= r <= 16. */
static inline __mmask16 first_lanes(size_t r) { return (__mmask16)((1u << r) - 1u); }

/* Chunks of 16 elements of x give 16 * reps outputs: for reps < 16, output
 * vector q of a chunk is x's vector permuted by lanes (16q + l) / reps; for
 * reps >= 16, each element is broadcast. */
void gml_x32_repeat_ukernel__avx512_u16(size_t n, size_t reps, const uint32_t *x, uint32_t *out) {
    if (reps >= 16) {
        for (size_t i = 0; i < n; i++) {
            const __m512i v = _mm512_set1_epi32((int)x[i]);
            size_t r = 0;
            for (; r + 16 <= reps; r += 16) _mm512_storeu_si512(out + r, v);
            if (r < reps) _mm512_mask_storeu_epi32(out + r, first_lanes(reps - r), v);
            out += reps;
        }
        return;
    }
    /* floor((t + 0.5) / reps) = floor(t / reps) for t < 256: the quotient
     * stays 0.5/reps away from an integer, far more than its rounding */
    __m512i perm[16];
    const __m512 lane = _mm512_setr_ps(0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f, 7.5f, 8.5f, 9.5f,
                                       10.5f, 11.5f, 12.5f, 13.5f, 14.5f, 15.5f);
    for (size_t q = 0; q < reps; q++)
        perm[q] = _mm512_cvttps_epi32(_mm512_div_ps(
            _mm512_add_ps(lane, _mm512_set1_ps(16.0f * (float)q)), _mm512_set1_ps((float)reps)));
    for (size_t i = 0; i < n; i += 16) {
        const size_t m = GML_MIN(16, n - i); /* elements of x in this chunk */
        const __m512i v = _mm512_maskz_loadu_epi32(first_lanes(m), x + i);
        for (size_t q = 0; q < reps; q++) {
            const size_t done = 16 * q, left = m * reps - GML_MIN(m * reps, done);
            if (left == 0) break;
            _mm512_mask_storeu_epi32(out + done, first_lanes(GML_MIN(16, left)),
                                     _mm512_permutexvar_epi32(perm[q], v));
        }
        out += m * reps;
    }
}
