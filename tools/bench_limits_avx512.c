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

/* The same 16 chains of acc = acc + pairs(m) . pairs(a) with VDPBF16PS
 * (compiled here under a target attribute: the loop above must run on
 * AVX-512 CPUs without avx512_bf16). The values stay small: each step adds
 * 2 * 0.999 * 1e-3. */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) float bench_dpbf16_avx512(int64_t iters) {
    const __m512bh m = (__m512bh)_mm512_set1_epi32(0x3f7f3f7f), a = (__m512bh)_mm512_set1_epi32(0x3a833a83);
    __m512 c[BENCH_DP_CHAINS_AVX512BF16];
    for (int i = 0; i < BENCH_DP_CHAINS_AVX512BF16; i++) c[i] = _mm512_set1_ps((float)i);
    for (int64_t it = 0; it < iters; it++)
        for (int i = 0; i < BENCH_DP_CHAINS_AVX512BF16; i++) c[i] = _mm512_dpbf16_ps(c[i], m, a);
    __m512 s = c[0];
    for (int i = 1; i < BENCH_DP_CHAINS_AVX512BF16; i++) s = _mm512_add_ps(s, c[i]);
    return _mm512_reduce_add_ps(s);
}
