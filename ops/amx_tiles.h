/* What every AMX tile kernel file shares (ops/gemm_amx_bf16.c,
 * ops/gemm_amx_q8.c, ops/flash_attn_amx_tiles.c): the switch between the
 * real tile intrinsics and the C emulation the tests compile them against,
 * the names each build gives, and the layout of LDTILECFG's operand. Each
 * file keeps its own configuration constant: the emulation's tile file is
 * per thread and per translation unit (tests/amx_emul.h).
 *   GML_AMX_EMULATE (tests only): tests/amx_emul.h, names fn##__amxemul;
 *   otherwise <immintrin.h> with -mamx-tile and -mamx-bf16 / -mamx-int8,
 *   names fn##__amx. NOT VERIFIED ON AN AMX CPU. */
#ifndef GGMLITE_OPS_AMX_TILES_H
#define GGMLITE_OPS_AMX_TILES_H

#include <stdint.h>

#ifdef GML_AMX_EMULATE
#include "amx_emul.h" /* tests/ */
#define GML_AMX_NAME(fn) fn##__amxemul
/* the emulation is plain C: the compiler sees every access */
#define GML_AMX_MEMORY_BARRIER() ((void)0)
#else
#include <immintrin.h>
#define GML_AMX_NAME(fn) fn##__amx
/* gcc 12's tile loads and its ldtilecfg are asm statements that do not tell
 * the compiler which memory they read: stores before them must be done */
#define GML_AMX_MEMORY_BARRIER() __asm__ volatile("" ::: "memory")
#endif

/* LDTILECFG's 64 bytes (Intel SDM, "Tile configuration"): palette 1, no
 * restart row, then each tile's bytes per row and rows; the tiles a kernel
 * does not use and the reserved bytes zero. A file's configuration is a
 * constant, so that no store to it can be dropped. */
typedef struct gml_amx_tile_config {
    uint8_t palette_id, start_row;
    uint8_t reserved0[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} gml_amx_tile_config;
_Static_assert(sizeof(gml_amx_tile_config) == 64, "LDTILECFG reads 64 bytes");

#endif /* GGMLITE_OPS_AMX_TILES_H */
