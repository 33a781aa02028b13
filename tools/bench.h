/* tools/bench's shared pieces: the machine's limits (bench_limits.c) that
 * every row of the table is quoted against. */
#ifndef GGMLITE_TOOLS_BENCH_H
#define GGMLITE_TOOLS_BENCH_H

#include <ggmlite/ggmlite.h>

#include <stddef.h>
#include <stdint.h>

#define BENCH_MAX_THREADS 8

/* The limits at one ISA, per thread count: the FMA peak (each thread runs
 * its own loop of independent vector FMAs; the aggregate rate) and the read
 * bandwidth (each thread sums its own slice of a buffer much larger than the
 * last-level cache). 0 where not measured (no FMA loop for the ISA). */
typedef struct bench_limits {
    gml_isa isa;
    int n;                                  /* thread counts measured */
    int threads[BENCH_MAX_THREADS];
    double fma_gflops[BENCH_MAX_THREADS];   /* GFLOP/s, an FMA counts 2 */
    double read_gbs[BENCH_MAX_THREADS];     /* GB/s (1e9 bytes) */
    size_t read_bytes;                      /* the buffer read */
    bool read_huge;                         /* on 2 MiB pages (madvise), as ggmlite's arenas */
    size_t llc_bytes;                       /* the last-level cache, from sysfs (0: unknown) */
    const char *fma_what;                   /* the loop, e.g. "AVX-512 FMA, 16 zmm chains" */
    /* The int8 peak (bench_measure_int8_peak): vpdpbusd as the FMA peak is
     * measured, in GOP/s (a product and its add count 2: 128 per zmm
     * instruction), 0 where the CPU lacks the VNNI of the ISA. */
    double int8_gops[BENCH_MAX_THREADS];
    const char *int8_what;
    /* The bf16 dot-product peak: each thread a loop of independent
     * VDPBF16PS (AVX-512 with avx512_bf16 only; 0 elsewhere); a VDPBF16PS
     * on zmm counts 64 flops (16 lanes, 2 products, multiply and add). */
    double bf16_gflops[BENCH_MAX_THREADS];
    /* The AMX peaks (bench_limits_amx.c): each thread a register-only loop
     * of TDPBF16PS (GFLOP/s: 16 x 16 x 32 products, 16,384 flops each) and
     * of TDPBUSD (GOP/s: 16 x 16 x 64 products, 32,768 each), at AVX-512
     * (where ggmlite runs AMX) on a CPU with AMX-BF16 / AMX-INT8 once Linux
     * grants the tile data permission; 0 elsewhere, and *_what says why. */
    double amx_bf16_gflops[BENCH_MAX_THREADS];
    double amx_int8_gops[BENCH_MAX_THREADS];
    char amx_bf16_what[160], amx_int8_what[160];
} bench_limits;

/* Measures the limits at isa for 1 thread and each count in threads[0..n),
 * the fastest of a few runs. */
void bench_measure_limits(bench_limits *l, gml_isa isa, const int *threads, int n);
/* Prints the limits section. */
void bench_print_limits(const bench_limits *l);
/* The FMA peak and read bandwidth at nth threads (0: not measured). */
double bench_fma_peak(const bench_limits *l, int nth);
/* The int8 peak at nth threads (0: not measured). */
double bench_int8_peak(const bench_limits *l, int nth);
double bench_read_bw(const bench_limits *l, int nth);
double bench_bf16_peak(const bench_limits *l, int nth);
/* The AMX-BF16 (GFLOP/s) and AMX-INT8 (GOP/s) peaks at nth threads (0: not
 * measured). */
double bench_amx_bf16_peak(const bench_limits *l, int nth);
double bench_amx_int8_peak(const bench_limits *l, int nth);
/* "83.1%" of rate against limit into buf, "-" when the limit is unknown. */
const char *bench_pct(char *buf, size_t size, double rate, double limit);

/* The loops, in files compiled for their ISA (run only when the CPU has
 * it): iters rounds of BENCH_FMA_CHAINS_* independent FMAs on vectors of
 * 8 (AVX2) or 16 (AVX-512) floats; the sum of the accumulators is returned so
 * the work is not optimized away. bench_read_avx2 sums n floats (n a
 * multiple of 64, p 32-byte aligned). */
#define BENCH_FMA_CHAINS_AVX2 12
#define BENCH_FMA_CHAINS_AVX512 16
float bench_fma_avx2(int64_t iters);
float bench_fma_avx512(int64_t iters);
float bench_read_avx2(const float *p, size_t n);
/* bench_limits_vnni.c: iters rounds of BENCH_VNNI_CHAINS (zmm, AVX512-VNNI)
 * or BENCH_VNNI_CHAINS_AVX2 (ymm, AVX-VNNI) independent vpdpbusd; each
 * function compiled for its extension only, run only where the CPU has it. */
#define BENCH_VNNI_CHAINS 16
#define BENCH_VNNI_CHAINS_AVX2 12
int32_t bench_vnni_avx512(int64_t iters);
int32_t bench_vnni_avx2(int64_t iters);
/* iters rounds of BENCH_DP_CHAINS_AVX512BF16 independent VDPBF16PS on zmm
 * (run only when the CPU has avx512_bf16). */
#define BENCH_DP_CHAINS_AVX512BF16 16
float bench_dpbf16_avx512(int64_t iters);
/* bench_limits_amx.c (compiled with -mamx-tile -mamx-bf16 -mamx-int8 where
 * the compiler has them: GML_BENCH_AMX): iters rounds of
 * BENCH_AMX_TILES_PER_ROUND TDPBF16PS or TDPBUSD on tiles loaded once (four
 * accumulators from two A and two B tiles, the GEMM kernel's pattern
 * without its loads); each call configures the calling thread's tiles and
 * releases them. Run only where the CPU has AMX and Linux granted the tile
 * data permission. */
#define BENCH_AMX_TILES_PER_ROUND 4
float bench_amx_bf16(int64_t iters);
int32_t bench_amx_int8(int64_t iters);

#endif
