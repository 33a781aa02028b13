/* The AVX-512 loop of bench's limits (compiled with -mavx512f). */
#include "bench.h"

#include <immintrin.h>

/* 16 chains of acc = acc * m + a on zmm registers: 2 ports x 4 cycles of
 * latency need 8 in flight; 16 cover a longer latency and fit the 32
 * registers. */
float bench_fma_avx512(int64_t iters) {
    const __m512 m = _mm512_set1_ps(0.999f), a = _mm512_set1_ps(1e-3f);
    __m512 c[BENCH_FMA_CHAINS_AVX512];
    for (int i = 0; i < BENCH_FMA_CHAINS_AVX512; i++) c[i] = _mm512_set1_ps((float)i);
    for (int64_t it = 0; it < iters; it++)
        for (int i = 0; i < BENCH_FMA_CHAINS_AVX512; i++) c[i] = _mm512_fmadd_ps(c[i], m, a);
    __m512 s = c[0];
    for (int i = 1; i < BENCH_FMA_CHAINS_AVX512; i++) s = _mm512_add_ps(s, c[i]);
    return _mm512_reduce_add_ps(s);
}
