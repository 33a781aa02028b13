/* A C emulation of the AMX tile intrinsics that ops/gemm_amx_bf16.c and
 * ops/gemm_amx_q8.c use, for testing those kernels' logic (tile
 * configuration, strides, layouts) on machines without AMX:
 * _tile_loadconfig, _tile_loadd, _tile_stored, _tile_zero, _tile_dpbf16ps,
 * _tile_dpbssd, _tile_dpbsud, _tile_dpbusd, _tile_dpbuud and _tile_release
 * on a tile file per thread (the tile registers and their configuration
 * are per-thread state). Test-only: included by those kernels when
 * compiled with GML_AMX_EMULATE (tests/CMakeLists.txt, test_amx_bf16,
 * test_amx_q8).
 *
 * Semantics from the Intel SDM (vol. 2, LDTILECFG, TILELOADD, TILESTORED,
 * TILEZERO, TDPBF16PS, TDPBSSD/TDPBSUD/TDPBUSD/TDPBUUD, TILERELEASE; vol. 1
 * ch. 18 on the tile state):
 *  - LDTILECFG: palette 0 (the initial state) or 1 (8 tiles of up to 16
 *    rows x 64 bytes); reserved bytes and tiles 8..15 zero; rows and bytes
 *    per row both zero (unused tile) or both set; else #GP. It zeroes
 *    every tile. The CPU takes any start_row (the row an interrupted load
 *    or store resumes at, zeroed when one completes); a nonzero one would
 *    make the next load or store skip rows, so the emulation refuses it
 *    as a kernel's bug.
 *  - a tile instruction on an unconfigured state or an unused tile faults
 *    (#UD); TDPBF16PS also when its tiles are not distinct or their shapes
 *    do not fit (dst.rows == src1.rows, dst.colsb == src2.colsb,
 *    src1.colsb / 4 == src2.rows).
 *  - loads and stores move rows x colsb bytes, row r at base + r * stride
 *    (any base and stride: the SDM asks no alignment; stride 0 repeats a
 *    row); what lies past a tile's configured rows or bytes reads as zero.
 *  - TDPBF16PS, for each row m of dst: temp[0 .. 2 cols) = 0; for each
 *    pair k of src1's row and each column n: temp[2n] += a(m, 2k) b(k, 2n),
 *    temp[2n+1] += a(m, 2k+1) b(k, 2n+1), each an fma; then dst(m, n) +=
 *    temp[2n] + temp[2n+1]. Every operation rounds to nearest even, takes
 *    subnormal inputs as 0 and flushes subnormal results to 0 (DAZ, FTZ,
 *    MXCSR ignored). The Intrinsics Guide's shorter pseudo-code adds each
 *    product to dst in turn instead; the emulation holds the SDM's, which
 *    no AMX CPU has confirmed yet (docs/amx.md, "Verifying").
 *  - TDPB[SU][SU]D (the same faults and shapes as TDPBF16PS), for each row
 *    m of dst, each dword k of src1's row and each column n: dst(m, n) +=
 *    the 4 products of byte i of a(m, k) with byte i of b(k, n), bytes
 *    taken as signed (S) or unsigned (U), first letter src1's, second
 *    src2's; int32 arithmetic that wraps (no saturation).
 * Where the CPU would fault, the emulation prints what was wrong and
 * aborts, so a test that runs the kernel fails. */
#ifndef GGMLITE_TESTS_AMX_EMUL_H
#define GGMLITE_TESTS_AMX_EMUL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gml_amx_emul_state {
    bool configured;      /* palette 1 loaded */
    uint16_t colsb[8];
    uint8_t rows[8];
    uint8_t data[8][16][64];
} gml_amx_emul_state;

static _Thread_local gml_amx_emul_state gml_amx_emul;

static inline void gml_amx_emul_fault(const char *insn, const char *why, int t) {
    fprintf(stderr, "amx_emul: %s (tile %d): %s: the CPU would fault here\n", insn, t, why);
    abort();
}

static inline void gml_amx_emul_need(const char *insn, int t) {
    if (!gml_amx_emul.configured) gml_amx_emul_fault(insn, "no tile configuration loaded on this thread", t);
    if (t < 0 || t > 7) gml_amx_emul_fault(insn, "no such tile", t);
    if (!gml_amx_emul.rows[t]) gml_amx_emul_fault(insn, "tile not configured (0 rows)", t);
}

static inline void gml_amx_emul_loadconfig(const void *config) {
    const uint8_t *b = (const uint8_t *)config;
    memset(&gml_amx_emul, 0, sizeof gml_amx_emul);
    if (b[0] == 0) return; /* palette 0: the initial state */
    if (b[0] != 1) gml_amx_emul_fault("ldtilecfg", "palette other than 0 and 1", -1);
    if (b[1]) { /* not a fault on the CPU: its next load or store would start at that row */
        fprintf(stderr, "amx_emul: ldtilecfg: start_row %d, not 0: the next tile load or store would skip rows\n",
                b[1]);
        abort();
    }
    for (int i = 2; i < 16; i++)
        if (b[i]) gml_amx_emul_fault("ldtilecfg", "a reserved byte not zero", -1);
    for (int t = 0; t < 16; t++) {
        uint16_t colsb;
        memcpy(&colsb, b + 16 + 2 * t, 2);
        const uint8_t rows = b[48 + t];
        if (t >= 8 && (colsb || rows)) gml_amx_emul_fault("ldtilecfg", "palette 1 has 8 tiles", t);
        if (t >= 8) continue;
        if (colsb > 64 || rows > 16) gml_amx_emul_fault("ldtilecfg", "more than 16 rows x 64 bytes", t);
        if (!colsb != !rows) gml_amx_emul_fault("ldtilecfg", "rows and bytes per row: one zero, one not", t);
        gml_amx_emul.colsb[t] = colsb;
        gml_amx_emul.rows[t] = rows;
    }
    gml_amx_emul.configured = true;
}

static inline void gml_amx_emul_release(void) { memset(&gml_amx_emul, 0, sizeof gml_amx_emul); }

static inline void gml_amx_emul_loadd(int t, const void *base, long stride) {
    gml_amx_emul_need("tileloadd", t);
    memset(gml_amx_emul.data[t], 0, sizeof gml_amx_emul.data[t]);
    for (int r = 0; r < gml_amx_emul.rows[t]; r++)
        memcpy(gml_amx_emul.data[t][r], (const char *)base + (long)r * stride, gml_amx_emul.colsb[t]);
}

static inline void gml_amx_emul_stored(int t, void *base, long stride) {
    gml_amx_emul_need("tilestored", t);
    for (int r = 0; r < gml_amx_emul.rows[t]; r++)
        memcpy((char *)base + (long)r * stride, gml_amx_emul.data[t][r], gml_amx_emul.colsb[t]);
}

static inline void gml_amx_emul_zero(int t) {
    gml_amx_emul_need("tilezero", t);
    memset(gml_amx_emul.data[t], 0, sizeof gml_amx_emul.data[t]);
}

/* DAZ and FTZ: a subnormal as 0 of its sign. */
static inline float gml_amx_emul_flush(float x) { return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x; }

/* make_fp32: a bf16 as the top half of an f32. */
static inline float gml_amx_emul_bf16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    const uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static inline float gml_amx_emul_fma(float a, float b, float c) {
    return gml_amx_emul_flush(fmaf(gml_amx_emul_flush(a), gml_amx_emul_flush(b), gml_amx_emul_flush(c)));
}

static inline void gml_amx_emul_dpbf16ps(int dst, int src1, int src2) {
    gml_amx_emul_need("tdpbf16ps", dst);
    gml_amx_emul_need("tdpbf16ps", src1);
    gml_amx_emul_need("tdpbf16ps", src2);
    if (dst == src1 || dst == src2 || src1 == src2) gml_amx_emul_fault("tdpbf16ps", "tiles not distinct", dst);
    const int rows = gml_amx_emul.rows[dst], cols = gml_amx_emul.colsb[dst] / 4;
    const int pairs = gml_amx_emul.colsb[src1] / 4;
    if (gml_amx_emul.rows[src1] != rows || gml_amx_emul.colsb[src2] != gml_amx_emul.colsb[dst] ||
        gml_amx_emul.rows[src2] != pairs)
        gml_amx_emul_fault("tdpbf16ps", "shapes do not fit (dst.rows = src1.rows, dst.colsb = src2.colsb, "
                           "src1.colsb / 4 = src2.rows)", dst);
    for (int m = 0; m < rows; m++) {
        float temp[32] = {0};
        for (int k = 0; k < pairs; k++)
            for (int n = 0; n < cols; n++) {
                const uint8_t *a = gml_amx_emul.data[src1][m] + 4 * k, *b = gml_amx_emul.data[src2][k] + 4 * n;
                temp[2 * n] = gml_amx_emul_fma(gml_amx_emul_bf16(a), gml_amx_emul_bf16(b), temp[2 * n]);
                temp[2 * n + 1] =
                    gml_amx_emul_fma(gml_amx_emul_bf16(a + 2), gml_amx_emul_bf16(b + 2), temp[2 * n + 1]);
            }
        for (int n = 0; n < cols; n++) {
            float c;
            memcpy(&c, gml_amx_emul.data[dst][m] + 4 * n, 4);
            const float t = gml_amx_emul_flush(gml_amx_emul_flush(temp[2 * n]) + gml_amx_emul_flush(temp[2 * n + 1]));
            c = gml_amx_emul_flush(gml_amx_emul_flush(c) + t);
            memcpy(gml_amx_emul.data[dst][m] + 4 * n, &c, 4);
        }
    }
}

/* TDPB[SU][SU]D: a_signed / b_signed say how src1's and src2's bytes read. */
static inline void gml_amx_emul_dpb(const char *insn, int dst, int src1, int src2, bool a_signed, bool b_signed) {
    gml_amx_emul_need(insn, dst);
    gml_amx_emul_need(insn, src1);
    gml_amx_emul_need(insn, src2);
    if (dst == src1 || dst == src2 || src1 == src2) gml_amx_emul_fault(insn, "tiles not distinct", dst);
    const int rows = gml_amx_emul.rows[dst], cols = gml_amx_emul.colsb[dst] / 4;
    const int dwords = gml_amx_emul.colsb[src1] / 4;
    if (gml_amx_emul.rows[src1] != rows || gml_amx_emul.colsb[src2] != gml_amx_emul.colsb[dst] ||
        gml_amx_emul.rows[src2] != dwords)
        gml_amx_emul_fault(insn, "shapes do not fit (dst.rows = src1.rows, dst.colsb = src2.colsb, "
                           "src1.colsb / 4 = src2.rows)", dst);
    for (int m = 0; m < rows; m++)
        for (int n = 0; n < cols; n++) {
            uint32_t c; /* int32 that wraps: unsigned arithmetic, the same bits */
            memcpy(&c, gml_amx_emul.data[dst][m] + 4 * n, 4);
            for (int k = 0; k < dwords; k++)
                for (int i = 0; i < 4; i++) {
                    const uint8_t a = gml_amx_emul.data[src1][m][4 * k + i], b = gml_amx_emul.data[src2][k][4 * n + i];
                    const int32_t x = a_signed ? (int32_t)(int8_t)a : (int32_t)a;
                    const int32_t y = b_signed ? (int32_t)(int8_t)b : (int32_t)b;
                    c += (uint32_t)(x * y); /* |x y| <= 2^16: exact in int32 */
                }
            memcpy(gml_amx_emul.data[dst][m] + 4 * n, &c, 4);
        }
}

/* The intrinsics take tile numbers as constants, as gcc's and clang's do.
 * Macros, in place of the compiler's own where <immintrin.h> came first
 * (a kernel over the SIMD layer includes it): gcc's _tile_loadconfig and
 * _tile_release are functions, which the macros hide at the call sites. */
#undef _tile_loadconfig
#undef _tile_release
#undef _tile_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbf16ps
#undef _tile_dpbssd
#undef _tile_dpbsud
#undef _tile_dpbusd
#undef _tile_dpbuud
#define _tile_loadconfig(config) gml_amx_emul_loadconfig(config)
#define _tile_release() gml_amx_emul_release()
#define _tile_loadd(dst, base, stride) gml_amx_emul_loadd((dst), (base), (long)(stride))
#define _tile_stored(dst, base, stride) gml_amx_emul_stored((dst), (base), (long)(stride))
#define _tile_zero(dst) gml_amx_emul_zero(dst)
#define _tile_dpbf16ps(dst, src1, src2) gml_amx_emul_dpbf16ps((dst), (src1), (src2))
#define _tile_dpbssd(dst, src1, src2) gml_amx_emul_dpb("tdpbssd", (dst), (src1), (src2), true, true)
#define _tile_dpbsud(dst, src1, src2) gml_amx_emul_dpb("tdpbsud", (dst), (src1), (src2), true, false)
#define _tile_dpbusd(dst, src1, src2) gml_amx_emul_dpb("tdpbusd", (dst), (src1), (src2), false, true)
#define _tile_dpbuud(dst, src1, src2) gml_amx_emul_dpb("tdpbuud", (dst), (src1), (src2), false, false)

#endif /* GGMLITE_TESTS_AMX_EMUL_H */
