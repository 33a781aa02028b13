/* Conversions: every variant of ops/convert.inc against the scalar
 * conversions of ggmlite.h (gml_fp32_to_fp16, ...; test_types holds those
 * to a bit-level reference), bit for bit, on runs shorter than, equal to
 * and longer than the tile, with special values mixed in (NaN of both
 * kinds, inf, subnormals, exact ties, overflow); nothing past the run is
 * written. Variants whose ISA the CPU lacks are skipped. */
#include "../ops/ukernels.h"
#include "simd_check.h"

typedef struct {
    gml_isa isa;
    gml_cvt_ukernel *fn;
    int tile;
    const char *name;
} cvt_variant;

#define ENTRY(isa, fn, tile) {isa, fn, tile, #fn},
static const cvt_variant F32_F16[] = {GML_F32_F16_CVT_UKERNELS(ENTRY)};
static const cvt_variant F16_F32[] = {GML_F16_F32_CVT_UKERNELS(ENTRY)};
static const cvt_variant F32_BF16[] = {GML_F32_BF16_CVT_UKERNELS(ENTRY)};
static const cvt_variant BF16_F32[] = {GML_BF16_F32_CVT_UKERNELS(ENTRY)};
static const cvt_variant F32_Q8[] = {GML_F32_Q8_0_CVT_UKERNELS(ENTRY)};
static const cvt_variant Q8_F32[] = {GML_Q8_0_F32_CVT_UKERNELS(ENTRY)};
#define COUNT(a) (int)(sizeof a / sizeof *a)

static float special(void) {
    static const uint32_t bits[] = {
        0x7fc00000u, 0xffc12345u, 0x7f800001u, 0x7fa00000u, /* NaNs: quiet, signalling */
        0x7f800000u, 0xff800000u, 0x00000001u, 0x807fffffu, /* inf, subnormals */
        0x477ff000u, 0x477fefffu, 0x33800000u, 0x33000000u, /* f16 ties: 65520, 2^-24, 2^-25 */
        0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x00000000u, /* bf16 ties, FLT_MAX, 0 */
        0x80000000u, 0x38800000u, 0x387fc000u, 0x3c008000u};
    float f;
    memcpy(&f, &bits[rand_int((int64_t)(sizeof bits / sizeof *bits))], 4);
    return f;
}

/* from: element size of the input (4: f32 in, 2: 16-bit in); to: out. */
static void check_16(const cvt_variant *v, const cvt_variant *scalar, size_t from, size_t to) {
    if (!gml_cpu_has(v->isa)) {
        printf("skip %s (CPU lacks %s)\n", v->name, gml_isa_name(v->isa));
        return;
    }
    size_t lens[12];
    const int nl = tile_lengths(v->tile, lens);
    for (int l = 0; l < nl; l++) {
        const size_t n = lens[l], pad = 24;
        unsigned char *x = malloc(n * from), *want = malloc((n + pad) * to),
                      *got = malloc((n + pad) * to);
        for (size_t i = 0; i < n; i++) {
            if (from == 4) {
                float f = rand_u64() % 4 == 0 ? special() : rand_uniform(-70000, 70000);
                if (rand_u64() % 8 == 0) f *= 1e-38f;
                memcpy(x + 4 * i, &f, 4);
            } else {
                const uint16_t h = (uint16_t)rand_u64();
                memcpy(x + 2 * i, &h, 2);
            }
        }
        memset(want, 0xab, (n + pad) * to);
        memset(got, 0xab, (n + pad) * to);
        scalar->fn(n, x, want);
        v->fn(n, x, got);
        for (size_t i = 0; i < n + pad; i++)
            if (memcmp(got + i * to, want + i * to, to) != 0) {
                CHECK(false, "%s n=%zu: element %zu differs from the scalar conversion", v->name,
                      n, i);
                break;
            }
        free(x);
        free(want);
        free(got);
    }
}

static void check_q8(void) {
    for (int k = 0; k < COUNT(F32_Q8); k++) {
        const cvt_variant *v = &F32_Q8[k], *dv = &Q8_F32[k];
        if (!gml_cpu_has(v->isa)) {
            printf("skip %s (CPU lacks %s)\n", v->name, gml_isa_name(v->isa));
            continue;
        }
        for (size_t nb = 1; nb <= 9; nb += 2) {
            const size_t n = nb * 32;
            float *x = malloc(n * 4), *yw = malloc((n + 8) * 4), *yg = malloc((n + 8) * 4);
            gml_block_q8_0 *qw = malloc((nb + 1) * 34), *qg = malloc((nb + 1) * 34);
            for (size_t i = 0; i < n; i++) x[i] = rand_uniform(-4, 4);
            x[5] = 0.5f * 4 / 127; /* near a tie */
            if (nb > 2)
                for (size_t i = 32; i < 64; i++) x[i] = (float)((int)i - 48) * 0.5f; /* ties */
            if (nb > 4) x[100] = NAN, x[140] = -INFINITY;
            if (nb > 6)
                for (size_t i = 192; i < 224; i++) x[i] = 0; /* a zero block */
            memset(qw, 0xab, (nb + 1) * 34);
            memset(qg, 0xab, (nb + 1) * 34);
            F32_Q8[0].fn(n, x, qw);
            v->fn(n, x, qg);
            CHECK(memcmp(qw, qg, (nb + 1) * 34) == 0, "%s %zu blocks: differs from the scalar", v->name,
                  nb);
            memset(yw, 0xab, (n + 8) * 4);
            memset(yg, 0xab, (n + 8) * 4);
            Q8_F32[0].fn(n, qw, yw);
            dv->fn(n, qw, yg);
            CHECK(memcmp(yw, yg, (n + 8) * 4) == 0, "%s %zu blocks: differs from the scalar",
                  dv->name, nb);
            free(x), free(yw), free(yg), free(qw), free(qg);
        }
    }
}

int main(void) {
    for (int k = 0; k < COUNT(F32_F16); k++) check_16(&F32_F16[k], &F32_F16[0], 4, 2);
    for (int k = 0; k < COUNT(F16_F32); k++) check_16(&F16_F32[k], &F16_F32[0], 2, 4);
    for (int k = 0; k < COUNT(F32_BF16); k++) check_16(&F32_BF16[k], &F32_BF16[0], 4, 2);
    for (int k = 0; k < COUNT(BF16_F32); k++) check_16(&BF16_F32[k], &BF16_F32[0], 2, 4);
    check_q8();
    return check_report("test_ukernels_convert");
}
