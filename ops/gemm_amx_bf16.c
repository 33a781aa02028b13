/* The AMX bf16 tile kernels (ops/gemm_amx.h): a 32 x 32 block of C in four
 * tiles, per step of 16 pairs two tiles of A and two of B feeding four
 * TDPBF16PS; and its top half, 16 x 32 in two tiles, one tile of A and two
 * of B feeding two (a group of at most 16 rows). Written once over the
 * tile intrinsics and compiled twice:
 *   - in the library with -mamx-tile -mamx-bf16 (names ..__amx), where
 *     the compiler has them (CMakeLists.txt: GML_HAVE_AMX); it runs only
 *     when gml_amx_bf16_pick hands it out. NOT VERIFIED ON AN AMX CPU.
 *   - in tests/test_amx_bf16.c with GML_AMX_EMULATE (names ..__amxemul),
 *     against tests/amx_emul.h, a C emulation of the same intrinsics on a
 *     tile file per thread, which checks the configuration and each
 *     instruction's shapes as the CPU would.
 * Tiles: 0..3 C (rows 0-15 x columns 0-15, 0-15 x 16-31, 16-31 x 0-15,
 * 16-31 x 16-31), 4..5 A (rows 0-15, 16-31), 6..7 B (columns 0-15, 16-31);
 * every tile 16 rows x 64 bytes. */
#include "gemm_amx.h"

#include "amx_tiles.h"

#ifdef GML_AMX_EMULATE
#define GML_AMX_UKERNEL gml_bf16_gemm_ukernel__amxemul_32x32
#define GML_AMX_UKERNEL16 gml_bf16_gemm_ukernel__amxemul_16x32
#else
#define GML_AMX_UKERNEL gml_bf16_gemm_ukernel__amx_32x32
#define GML_AMX_UKERNEL16 gml_bf16_gemm_ukernel__amx_16x32
#endif

static const _Alignas(64) gml_amx_tile_config TILES = {
    .palette_id = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

void GML_AMX_NAME(gml_amx_bf16_configure)(void) {
    GML_AMX_MEMORY_BARRIER();
    _tile_loadconfig(&TILES);
}

void GML_AMX_NAME(gml_amx_bf16_release)(void) { _tile_release(); }

void GML_AMX_UKERNEL(size_t kq, const uint32_t *a, const uint32_t *b, float *c, size_t ldc, bool acc) {
    const size_t cs = ldc * sizeof(float); /* C's row stride in bytes */
    float *c1 = c + 16, *c2 = c + 16 * ldc, *c3 = c + 16 * ldc + 16;
    GML_AMX_MEMORY_BARRIER();
    if (acc) {
        _tile_loadd(0, c, cs);
        _tile_loadd(1, c1, cs);
        _tile_loadd(2, c2, cs);
        _tile_loadd(3, c3, cs);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    for (size_t q = 0; q < kq; q++) {
        const uint32_t *aq = a + q * GML_AMX_BLOCK, *bq = b + q * GML_AMX_BLOCK;
        _tile_loadd(4, aq, GML_AMX_STEP * 4);                       /* A rows 0-15 */
        _tile_loadd(5, aq + 16 * GML_AMX_STEP, GML_AMX_STEP * 4);   /* A rows 16-31 */
        _tile_loadd(6, bq, GML_AMX_NR * 4);                         /* B columns 0-15 */
        _tile_loadd(7, bq + 16, GML_AMX_NR * 4);                    /* B columns 16-31 */
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c, cs);
    _tile_stored(1, c1, cs);
    _tile_stored(2, c2, cs);
    _tile_stored(3, c3, cs);
}

/* Rows 0..15 of the group: tiles 0, 1, 4, 6 and 7 of the same
 * configuration, each element's steps as in the 32 x 32 kernel. */
void GML_AMX_UKERNEL16(size_t kq, const uint32_t *a, const uint32_t *b, float *c, size_t ldc, bool acc) {
    const size_t cs = ldc * sizeof(float);
    float *c1 = c + 16;
    GML_AMX_MEMORY_BARRIER();
    if (acc) {
        _tile_loadd(0, c, cs);
        _tile_loadd(1, c1, cs);
    } else {
        _tile_zero(0);
        _tile_zero(1);
    }
    for (size_t q = 0; q < kq; q++) {
        const uint32_t *aq = a + q * GML_AMX_BLOCK, *bq = b + q * GML_AMX_BLOCK;
        _tile_loadd(4, aq, GML_AMX_STEP * 4);    /* A rows 0-15 */
        _tile_loadd(6, bq, GML_AMX_NR * 4);      /* B columns 0-15 */
        _tile_loadd(7, bq + 16, GML_AMX_NR * 4); /* B columns 16-31 */
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
    }
    _tile_stored(0, c, cs);
    _tile_stored(1, c1, cs);
}
