/* flash_attn's AMX tiles (ops/flash_attn_amx.h): a 32 x 32 block of C in
 * four tiles, per step of 16 pairs two tiles of A and two of B feeding
 * four TDPBF16PS, with A's and B's row strides given (the head's K or V^T,
 * q^T or the weights in the flash kernel's layouts). Written once over the
 * tile intrinsics and compiled twice, as ops/gemm_amx_bf16.c is:
 *   - in the library with -mamx-tile -mamx-bf16 (names ..__amx), where
 *     the compiler has them (CMakeLists.txt: GML_HAVE_AMX); it runs only
 *     when gml_flash_amx_pick hands it out. NOT VERIFIED ON AN AMX CPU.
 *   - in test_flash_attn_amx with GML_AMX_EMULATE (names ..__amxemul),
 *     against tests/amx_emul.h, whose tile file is per thread and per
 *     translation unit: the configuration below is this file's own.
 * Tiles: 0..3 C (rows 0-15 x columns 0-15, 0-15 x 16-31, 16-31 x 0-15,
 * 16-31 x 16-31), 4..5 A (rows 0-15, 16-31), 6..7 B (columns 0-15, 16-31);
 * every tile 16 rows x 64 bytes. */
#include "flash_attn_amx.h"

#include "amx_tiles.h"

static const _Alignas(64) gml_amx_tile_config TILES = {
    .palette_id = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

void GML_AMX_NAME(gml_flash_amx_configure)(void) {
    GML_AMX_MEMORY_BARRIER();
    _tile_loadconfig(&TILES);
}

void GML_AMX_NAME(gml_flash_amx_release)(void) { _tile_release(); }

void GML_AMX_NAME(gml_flash_amx_tile)(size_t kq, const uint32_t *a, size_t lda, const uint32_t *b,
                                      size_t ldb, float *c, size_t ldc, bool acc) {
    const size_t as = lda * 4, bs = ldb * 4, cs = ldc * sizeof(float); /* strides in bytes */
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
        const uint32_t *aq = a + 16 * q, *bq = b + 16 * q * ldb;
        _tile_loadd(4, aq, as);            /* A rows 0-15, pairs 16q .. 16q + 15 */
        _tile_loadd(5, aq + 16 * lda, as); /* A rows 16-31 */
        _tile_loadd(6, bq, bs);            /* B columns 0-15 */
        _tile_loadd(7, bq + 16, bs);       /* B columns 16-31 */
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
