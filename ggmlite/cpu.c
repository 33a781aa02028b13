/* Which instruction sets the CPU has, and which kernels compute runs. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static const char *const ISA_NAMES[] = {
    [GML_ISA_AUTO] = "auto",     [GML_ISA_REFERENCE] = "reference", [GML_ISA_SCALAR] = "scalar",
    [GML_ISA_AVX2] = "avx2",     [GML_ISA_AVX512] = "avx512",
};

const char *gml_isa_name(gml_isa isa) {
    return (unsigned)isa <= GML_ISA_AVX512 ? ISA_NAMES[isa] : "?";
}

bool gml_isa_from_name(const char *name, gml_isa *out) {
    for (int i = 0; i <= GML_ISA_AVX512; i++)
        if (strcmp(name, ISA_NAMES[i]) == 0) {
            *out = (gml_isa)i;
            return true;
        }
    return false;
}

bool gml_cpu_has(gml_isa isa) {
    switch (isa) {
    case GML_ISA_AUTO:
    case GML_ISA_REFERENCE:
    case GML_ISA_SCALAR:
        return true;
#if defined(__x86_64__) || defined(__i386__)
    case GML_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case GML_ISA_AVX512:
        return __builtin_cpu_supports("avx512f");
#endif
    default:
        return false;
    }
}

static gml_isa best_isa(void) {
    if (gml_cpu_has(GML_ISA_AVX512)) return GML_ISA_AVX512;
    if (gml_cpu_has(GML_ISA_AVX2)) return GML_ISA_AVX2;
    return GML_ISA_SCALAR;
}

/* 0 until first use; then the ISA in effect. */
static _Atomic int current_isa;

gml_status gml_set_isa(gml_isa isa) {
    if ((unsigned)isa > GML_ISA_AVX512 || !gml_cpu_has(isa)) return GML_ERR_INVALID;
    atomic_store(&current_isa, (int)(isa == GML_ISA_AUTO ? best_isa() : isa));
    return GML_OK;
}

gml_isa gml_get_isa(void) {
    int isa = atomic_load(&current_isa);
    if (isa) return (gml_isa)isa;
    gml_isa want = GML_ISA_AUTO;
    const char *env = getenv("GGMLITE_ISA");
    if (env && *env && (!gml_isa_from_name(env, &want) || !gml_cpu_has(want))) {
        fprintf(stderr, "ggmlite: GGMLITE_ISA=%s is not one of reference, scalar, avx2, avx512 "
                "that this CPU has; using the best available\n", env);
        want = GML_ISA_AUTO;
    }
    gml_set_isa(want);
    return (gml_isa)atomic_load(&current_isa);
}
