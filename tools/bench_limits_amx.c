/* The AMX loops of bench's limits: TDPBF16PS and TDPBUSD on register tiles,
 * the instructions ggmlite's AMX kernels spend their time in
 * (ops/gemm_amx_bf16.c, ops/gemm_amx_q8.c). Compiled with -mamx-tile -mamx-bf16 -mamx-int8
 * (tools/CMakeLists.txt, where the compiler has them) and run only where
 * the CPU has AMX and Linux granted the tile data permission
 * (bench_limits.c). NOT RUN ON AN AMX CPU YET: written on machines
 * without AMX (docs/amx.md). */
#include "bench.h"

#include <immintrin.h>

/* LDTILECFG's 64 bytes: palette 1, tiles 0..7 each 16 rows x 64 bytes (the
 * largest), the rest zero; as ops/gemm_amx_bf16.c configures its tiles. */
typedef struct bench_tile_config {
    uint8_t palette_id, start_row;
    uint8_t reserved0[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} bench_tile_config;

static const _Alignas(64) bench_tile_config TILES = {
    .palette_id = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

/* gcc's tile loads, stores and ldtilecfg are asm statements that do not
 * say which memory they read or write: the stores before a load must be
 * done, and a tile's store must be done before its memory is read. */
#define BENCH_AMX_MEMORY_BARRIER() __asm__ volatile("" ::: "memory")

/* Tiles 4..7 from src (16 rows of 64 bytes), 0..3 zero. */
static void load_sources(const void *src) {
    BENCH_AMX_MEMORY_BARRIER();
    _tile_loadconfig(&TILES);
    _tile_loadd(4, src, 64);
    _tile_loadd(5, src, 64);
    _tile_loadd(6, src, 64);
    _tile_loadd(7, src, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
}

/* Four chains, C tile t += A (4 or 5) x B (6 or 7) by the tile
 * instruction dp, iters times, as oneDNN's kernels keep four
 * accumulators: a TMUL instruction issues about once per 16 cycles and
 * takes several times that to finish (Intel's optimization manual,
 * Sapphire Rapids), so the four keep it busy. */
#define FOUR_CHAINS(dp, iters)                                                                     \
    for (int64_t it = 0; it < (iters); it++) {                                                     \
        dp(0, 4, 6);                                                                               \
        dp(1, 4, 7);                                                                               \
        dp(2, 5, 6);                                                                               \
        dp(3, 5, 7);                                                                               \
    }

/* Tile 0 into out (16 rows of 64 bytes), the tiles released. */
static void store_result(void *out) {
    _tile_stored(0, out, 64);
    _tile_release();
    BENCH_AMX_MEMORY_BARRIER();
}

/* TDPBF16PS's chains: the machine measured 2,327 GFLOP/s on one
 * core, about 1,024 flops a cycle. Every bf16 is 2^-10: each step adds
 * 32 x 2^-20 to each f32 of C, far from overflow. */
float bench_amx_bf16(int64_t iters) {
    _Alignas(64) uint16_t src[16 * 32];
    _Alignas(64) float out[16 * 16];
    for (int i = 0; i < 16 * 32; i++) src[i] = 0x3a80; /* 2^-10 */
    load_sources(src);
    FOUR_CHAINS(_tile_dpbf16ps, iters)
    store_result(out);
    return out[0];
}

/* TDPBUSD's chains (unsigned x signed int8, int32 sums of 4 products per
 * dword), what the int8 kernel runs: every byte 1, so each step adds 64
 * to each int32 of C (the sums wrap harmlessly past 2^31). */
int32_t bench_amx_int8(int64_t iters) {
    _Alignas(64) int8_t src[16 * 64];
    _Alignas(64) int32_t out[16 * 16];
    for (int i = 0; i < 16 * 64; i++) src[i] = 1;
    load_sources(src);
    FOUR_CHAINS(_tile_dpbusd, iters)
    store_result(out);
    return out[0];
}
