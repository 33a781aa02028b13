/* The int8 loops of bench's limits: vpdpbusd on registers only, the
 * instruction the int8 compute kernels spend their time in
 * (ops/gemm_q8_simd.c). Each function is compiled for its own extension
 * (target attributes: this file takes no -m flags, so nothing else in it
 * uses them) and run only when the CPU has it (gml_cpu_has_feature). */
#include "bench.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

/* BENCH_VNNI_CHAINS chains of acc += dot4(a, b) on zmm: vpdpbusd's latency
 * of 4-5 cycles at up to 2 a cycle needs 10 in flight; 16 leave room and
 * fit the 32 registers. The int32 sums wrap harmlessly (their lane sum is
 * returned so the work is not optimized away). */
__attribute__((target("avx512f,avx512vnni"))) int32_t bench_vnni_avx512(int64_t iters) {
    const __m512i a = _mm512_set1_epi8(1), b = _mm512_set1_epi8(-1);
    __m512i c[BENCH_VNNI_CHAINS];
    for (int i = 0; i < BENCH_VNNI_CHAINS; i++) c[i] = _mm512_set1_epi32(i);
    for (int64_t it = 0; it < iters; it++)
        for (int i = 0; i < BENCH_VNNI_CHAINS; i++) c[i] = _mm512_dpbusd_epi32(c[i], a, b);
    __m512i s = c[0];
    for (int i = 1; i < BENCH_VNNI_CHAINS; i++) s = _mm512_add_epi32(s, c[i]);
    return _mm512_reduce_add_epi32(s);
}

/* The same on ymm with AVX-VNNI's VEX form (12 chains: the 16 ymm). */
__attribute__((target("avx2,avxvnni"))) int32_t bench_vnni_avx2(int64_t iters) {
    const __m256i a = _mm256_set1_epi8(1), b = _mm256_set1_epi8(-1);
    __m256i c[BENCH_VNNI_CHAINS_AVX2];
    for (int i = 0; i < BENCH_VNNI_CHAINS_AVX2; i++) c[i] = _mm256_set1_epi32(i);
    for (int64_t it = 0; it < iters; it++)
        for (int i = 0; i < BENCH_VNNI_CHAINS_AVX2; i++) c[i] = _mm256_dpbusd_avx_epi32(c[i], a, b);
    __m256i s = c[0];
    for (int i = 1; i < BENCH_VNNI_CHAINS_AVX2; i++) s = _mm256_add_epi32(s, c[i]);
    int32_t v[8];
    _mm256_storeu_si256((__m256i *)v, s);
    return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}
#endif
