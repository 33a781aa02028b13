/* The AVX2+FMA loops of bench's limits (compiled with -mavx2 -mfma). */
#include "bench.h"

#include <immintrin.h>

/* 12 chains of acc = acc * m + a: with the FMA's latency of 4 cycles and 2
 * FMA ports, 8 chains in flight keep both ports busy; 12 leave room, and
 * with m and a they fit the 16 ymm registers. acc converges to a / (1 - m),
 * far from overflow and from subnormals. */
float bench_fma_avx2(int64_t iters) {
    const __m256 m = _mm256_set1_ps(0.999f), a = _mm256_set1_ps(1e-3f);
    __m256 c[BENCH_FMA_CHAINS_AVX2];
    for (int i = 0; i < BENCH_FMA_CHAINS_AVX2; i++) c[i] = _mm256_set1_ps((float)i);
    for (int64_t it = 0; it < iters; it++)
        for (int i = 0; i < BENCH_FMA_CHAINS_AVX2; i++) c[i] = _mm256_fmadd_ps(c[i], m, a);
    __m256 s = c[0];
    for (int i = 1; i < BENCH_FMA_CHAINS_AVX2; i++) s = _mm256_add_ps(s, c[i]);
    float v[8];
    _mm256_storeu_ps(v, s);
    return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}

/* 8 independent sums of 32-byte loads, 64 floats a round. */
float bench_read_avx2(const float *p, size_t n) {
    __m256 s[8];
    for (int i = 0; i < 8; i++) s[i] = _mm256_setzero_ps();
    for (size_t k = 0; k < n; k += 64)
        for (int i = 0; i < 8; i++) s[i] = _mm256_add_ps(s[i], _mm256_load_ps(p + k + 8 * i));
    for (int i = 1; i < 8; i++) s[0] = _mm256_add_ps(s[0], s[i]);
    float v[8];
    _mm256_storeu_ps(v, s[0]);
    return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}
