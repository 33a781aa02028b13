/* The AMX int8 tile kernel (ops/gemm_amx.h, "int8"): a tile of C of up to
 * 32 x 32, per block of 32 k four TDPBUSD into int32 sums, then each
 * element's f32 chain over the blocks in order, giving the bits of
 * ops/gemm_q8.h. Written once over the tile intrinsics and the SIMD layer
 * (AVX-512 only) and compiled twice:
 *   - in the library with -mamx-tile -mamx-int8 and the AVX-512 flags
 *     (names ..__amx), where the compiler has them (CMakeLists.txt:
 *     GML_HAVE_AMX); it runs only when gml_amx_q8_pick hands it out. NOT
 *     VERIFIED ON AN AMX CPU.
 *   - in tests/test_amx_q8.c with GML_AMX_EMULATE (names ..__amxemul),
 *     against tests/amx_emul.h, which checks the configuration and each
 *     instruction's shapes as the CPU would. */
#include "gemm_amx.h"
#include "simd/simd.h"

#include <string.h>

#include "amx_tiles.h"

#ifdef GML_AMX_EMULATE
#define Q8_AMX_UKERNEL gml_q8_gemm_ukernel__amxemul_32x32
#else
#define Q8_AMX_UKERNEL gml_q8_gemm_ukernel__amx_32x32
#endif

#if !defined(GML_SIMD_AVX512)
#error "ops/gemm_amx_q8.c is compiled for AVX-512 (-DGML_SIMD_AVX512) only"
#endif

enum {
    TR = 32,             /* rows and columns of C per call: GML_AMX_MR = GML_AMX_NR */
    NV = TR / GML_VL,    /* vectors per row of C */
    PB = TR * 40,        /* bytes of a panel's block: GML_Q8_PANEL_BLOCK(32) */
    G = 4,               /* blocks whose sums are stored before the chains take them (16 KiB) */
};
_Static_assert((int)GML_AMX_MR == (int)TR && (int)GML_AMX_NR == (int)TR, "a 32 x 32 tile of C");

/* The tiles: sums 16 x 64, A 16 x 32 (one block of k), W 8 x 64 (8 dwords
 * of 4 k, 16 columns). */
static const _Alignas(64) gml_amx_tile_config TILES = {
    .palette_id = 1,
    .colsb = {64, 64, 64, 64, 32, 32, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 8, 8},
};

void GML_AMX_NAME(gml_amx_q8_configure)(void) {
    GML_AMX_MEMORY_BARRIER();
    _tile_loadconfig(&TILES);
}

void GML_AMX_NAME(gml_amx_q8_release)(void) { _tile_release(); }

/* The gml_q8_gemm_ukernel_fn of gemm_q8.h, m <= 32, n <= 32. */
void Q8_AMX_UKERNEL(size_t nblk, const uint8_t *aq, size_t lda, const float *ad, size_t ldd, int m,
                    const void *panel, int n, float *c, size_t ldc, bool acc, const void *ahead) {
    (void)ahead; /* the tiles' loads run ahead of the chains' vector work */
    _Alignas(64) float f[TR][TR];         /* the chains, row i of C in f[i] */
    _Alignas(64) int32_t s[G][TR][TR];    /* block sums */
    _Alignas(64) uint8_t tail[TR][32];    /* a block of A's m < 32 rows, zero below */
    const bool two = m > 16;              /* rows 16..31: tiles 2, 3, 5 */
    const char *pan = panel;
    for (int i = 0; i < m; i++)
        for (int v = 0; v < NV; v++) {
            const gml_vm in = gml_vm_first((size_t)GML_MAX(0, GML_MIN(GML_VL, n - v * GML_VL)));
            gml_vf_storea(f[i] + v * GML_VL, acc ? gml_vf_load_m(c + (size_t)i * ldc + v * GML_VL, in) : gml_vf_zero());
        }
    if (m < TR) memset(tail, 0, sizeof tail);

    for (size_t b0 = 0; b0 < nblk; b0 += G) {
        const int gn = (int)GML_MIN((size_t)G, nblk - b0);
        /* the int32 sums of gn blocks, each from the correction -128 sum q */
        for (int g = 0; g < gn; g++) {
            const size_t b = b0 + (size_t)g;
            const char *blk = pan + b * PB;
            const int32_t *corr = (const int32_t *)(const void *)blk;
            const int8_t *q = (const int8_t *)(blk + 8 * TR);
            const uint8_t *a = aq + 32 * b;
            size_t as = lda;
            if (m < TR) {
                for (int i = 0; i < m; i++) memcpy(tail[i], aq + (size_t)i * lda + 32 * b, 32);
                a = tail[0];
                as = 32;
            }
            GML_AMX_MEMORY_BARRIER();
            _tile_loadd(0, corr, 0); /* every row the columns' corrections */
            _tile_loadd(1, corr + 16, 0);
            _tile_loadd(4, a, as);               /* A rows 0-15, one block */
            _tile_loadd(6, q, 2 * 64);           /* W columns 0-15: 8 rows of 4 k */
            _tile_loadd(7, q + 64, 2 * 64);      /* W columns 16-31 */
            _tile_dpbusd(0, 4, 6);
            _tile_dpbusd(1, 4, 7);
            _tile_stored(0, s[g][0], TR * 4);
            _tile_stored(1, s[g][0] + 16, TR * 4);
            if (two) {
                _tile_loadd(2, corr, 0);
                _tile_loadd(3, corr + 16, 0);
                _tile_loadd(5, a + 16 * as, as); /* A rows 16-31 */
                _tile_dpbusd(2, 5, 6);
                _tile_dpbusd(3, 5, 7);
                _tile_stored(2, s[g][16], TR * 4);
                _tile_stored(3, s[g][16] + 16, TR * 4);
            }
        }
        GML_AMX_MEMORY_BARRIER();
        /* the chains: c = fma((float)s_b, da * dw, c), blocks in order */
        for (int i = 0; i < m; i++)
            for (int v = 0; v < NV; v++) {
                gml_vf x = gml_vf_loada(f[i] + v * GML_VL);
                for (int g = 0; g < gn; g++) {
                    const size_t b = b0 + (size_t)g;
                    const float *dw = (const float *)(const void *)(pan + b * PB + 4 * TR) + v * GML_VL;
                    const gml_vf scale = gml_vf_mul(gml_vf_set1(ad[(size_t)i * ldd + b]), gml_vf_load(dw));
                    x = gml_vf_fma(gml_vf_from_vi(gml_vi_load(s[g][i] + v * GML_VL)), scale, x);
                }
                gml_vf_storea(f[i] + v * GML_VL, x);
            }
    }
    for (int i = 0; i < m; i++)
        for (int v = 0; v < NV; v++) {
            const gml_vm in = gml_vm_first((size_t)GML_MAX(0, GML_MIN(GML_VL, n - v * GML_VL)));
            gml_vf_store_m(c + (size_t)i * ldc + v * GML_VL, in, gml_vf_loada(f[i] + v * GML_VL));
        }
}
