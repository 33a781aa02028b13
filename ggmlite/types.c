/* Element types: sizes, names, and the scalar conversions f32 <-> f16,
 * f32 <-> bf16, f32 <-> q8_0 (the definitions every kernel variant is held
 * to: tests/test_types.c checks them against an independent bit-level
 * reference, tests/test_ukernels_convert.c every vector variant against
 * them). */
#include "internal.h"

#include <math.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;     /* bytes per block */
    int64_t block;   /* elements per block */
} TYPES[GML_TYPE_COUNT] = {
    [GML_F32] = {"f32", 4, 1},
    [GML_I32] = {"i32", 4, 1},
    [GML_F16] = {"f16", 2, 1},
    [GML_BF16] = {"bf16", 2, 1},
    [GML_Q8_0] = {"q8_0", sizeof(gml_block_q8_0), GML_QK8_0},
};
_Static_assert(sizeof(gml_block_q8_0) == 34, "a q8_0 block is 34 bytes, as ggml's");

static bool known(gml_type t) { return (unsigned)t < GML_TYPE_COUNT; }

size_t gml_type_size(gml_type type) { return known(type) ? TYPES[type].size : 4; }
int64_t gml_type_block_size(gml_type type) { return known(type) ? TYPES[type].block : 1; }
const char *gml_type_name(gml_type type) { return known(type) ? TYPES[type].name : "?"; }

size_t gml_row_size(gml_type type, int64_t n) {
    return (size_t)(n / gml_type_block_size(type)) * gml_type_size(type);
}

bool gml_type_from_name(const char *name, gml_type *out) {
    GML_NONNULL(name, false);
    GML_NONNULL(out, false);
    for (int t = 0; t < GML_TYPE_COUNT; t++)
        if (name && strcmp(name, TYPES[t].name) == 0) {
            *out = (gml_type)t;
            return true;
        }
    return false;
}

static const char *const COMPUTE_NAMES[GML_COMPUTE_COUNT] = {"f32", "bf16", "int8"};

const char *gml_compute_name(gml_compute c) {
    return (unsigned)c < GML_COMPUTE_COUNT ? COMPUTE_NAMES[c] : "?";
}

bool gml_compute_from_name(const char *name, gml_compute *out) {
    for (int c = 0; c < GML_COMPUTE_COUNT; c++)
        if (name && strcmp(name, COMPUTE_NAMES[c]) == 0) {
            *out = (gml_compute)c;
            return true;
        }
    return false;
}

static uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
static float bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Rounds on the bits: the f32 significand (with its hidden bit) shifted
 * right into f16's place, ties to even, a carry out of the significand
 * moving into the exponent as IEEE encoding makes it. */
uint16_t gml_fp32_to_fp16(float x) {
    const uint32_t u = f32_bits(x);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t exp = (u >> 23) & 0xffu, man = u & 0x7fffffu;
    if (exp == 0xff) /* inf, NaN (quiet, top payload bits kept) */
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0u));
    const int e = (int)exp - 127 + 15; /* f16 biased exponent */
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    uint32_t sig, shift;
    if (e >= 1) { /* normal: drop 13 bits */
        sig = ((uint32_t)e << 10) | (man >> 13);
        shift = 13;
        const uint32_t rest = man & 0x1fffu, half = 0x1000u;
        if (rest > half || (rest == half && (sig & 1u))) sig++; /* may carry into inf: right */
        return (uint16_t)(sign | sig);
    }
    /* subnormal or zero in f16: value = m * 2^-24, m = full significand >> shift */
    if (e < -10) return sign; /* below half the smallest subnormal (2^-25): 0 */
    const uint32_t full = exp ? (man | 0x800000u) : man;
    shift = (uint32_t)(14 - e); /* 14..24 */
    sig = full >> shift;
    const uint32_t rest = full & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (sig & 1u))) sig++;
    return (uint16_t)(sign | sig);
}

float gml_fp16_to_fp32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) /* inf; NaN made quiet, as F16C's vcvtph2ps does */
        return bits_f32(sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0u));
    if (exp == 0) { /* zero or subnormal: man * 2^-24, exact in f32 */
        const float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp - 15 + 127) << 23) | (man << 13));
}

uint16_t gml_fp32_to_bf16(float x) {
    const uint32_t u = f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN, quiet */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float gml_bf16_to_fp32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

void gml_quantize_row_q8_0(const float *x, gml_block_q8_0 *y, int64_t n) {
    GML_NONNULL(x, );
    GML_NONNULL(y, );
    for (int64_t b = 0; b < n / GML_QK8_0; b++, x += GML_QK8_0) {
        float amax = 0.0f;
        bool finite = true;
        for (int j = 0; j < GML_QK8_0; j++) {
            finite = finite && isfinite(x[j]);
            amax = fmaxf(amax, fabsf(x[j]));
        }
        if (!finite) {
            y[b].d = 0x7e00u;
            memset(y[b].qs, 0, sizeof y[b].qs);
            continue;
        }
        const float d = amax / 127.0f;
        /* 1/d overflows when d < 1/FLT_MAX: d's f16 is then 0 and so are the
         * values; q is 0 there (x * inf cast to int8 is undefined) */
        const float id = d != 0.0f && isfinite(1.0f / d) ? 1.0f / d : 0.0f;
        y[b].d = gml_fp32_to_fp16(d);
        for (int j = 0; j < GML_QK8_0; j++) y[b].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

void gml_dequantize_row_q8_0(const gml_block_q8_0 *x, float *y, int64_t n) {
    GML_NONNULL(x, );
    GML_NONNULL(y, );
    for (int64_t b = 0; b < n / GML_QK8_0; b++, y += GML_QK8_0) {
        const float d = gml_fp16_to_fp32(x[b].d);
        for (int j = 0; j < GML_QK8_0; j++) y[j] = d * (float)x[b].qs[j];
    }
}
