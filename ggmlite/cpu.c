/* Which instruction sets the CPU has, and which kernels compute runs. */
#define _DEFAULT_SOURCE /* syscall: arch_prctl for AMX's permission */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

static const char *const ISA_NAMES[] = {
    [GML_ISA_AUTO] = "auto",     [GML_ISA_REFERENCE] = "reference", [GML_ISA_SCALAR] = "scalar",
    [GML_ISA_AVX2] = "avx2",     [GML_ISA_AVX512] = "avx512",       [GML_ISA_NEON] = "neon",
};
#define LAST_ISA GML_ISA_NEON

const char *gml_isa_name(gml_isa isa) {
    return (unsigned)isa <= LAST_ISA ? ISA_NAMES[isa] : "?";
}

bool gml_isa_from_name(const char *name, gml_isa *out) {
    GML_NONNULL(name, false);
    GML_NONNULL(out, false);
    for (int i = 0; i <= LAST_ISA; i++)
        if (strcmp(name, ISA_NAMES[i]) == 0) {
            *out = (gml_isa)i;
            return true;
        }
    return false;
}

#if defined(__x86_64__) || defined(__i386__)
/* True if the OS saves and restores the register state in XCR0 bits `mask`
 * on context switches (CPUID.1:ECX.OSXSAVE, then XGETBV(0)). Without it the
 * CPU may list AVX yet the instructions fault. gcc's and compiler-rt's
 * __builtin_cpu_supports check this too, but which runtime provides it
 * depends on the toolchain, so we ask once more ourselves. */
static bool os_saves(uint32_t mask) {
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & bit_OSXSAVE)) return false;
    uint32_t xcr0_lo, xcr0_hi;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    return (xcr0_lo & mask) == mask;
}
#endif

#if defined(__x86_64__) || defined(__i386__)
/* F16C (vcvtph2ps, vcvtps2ph: the f16 kernels of the AVX2 and AVX-512
 * variants), CPUID.1:ECX bit 29; every AVX2 CPU made has it. */
static bool has_f16c(void) {
    unsigned eax, ebx, ecx, edx;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29));
}
#endif

/* The answers of CPUID and XGETBV, asked once each: under a hypervisor
 * each CPUID is a trap that costs microseconds, and kernels ask which
 * variant the CPU can run at every compute. 0: not asked yet; 1: no;
 * 2: yes (asking twice at once gives the same answer twice). */
static _Atomic unsigned char isa_known[LAST_ISA + 1], feature_known[GML_CPU_FEATURE_COUNT];

static bool ask_cpu_has(gml_isa isa);
static bool ask_cpu_has_feature(gml_cpu_feature f);

bool gml_cpu_has(gml_isa isa) {
    if ((unsigned)isa > LAST_ISA) return false;
    unsigned char k = atomic_load_explicit(&isa_known[isa], memory_order_relaxed);
    if (!k) atomic_store_explicit(&isa_known[isa], k = ask_cpu_has(isa) ? 2 : 1, memory_order_relaxed);
    return k == 2;
}

bool gml_cpu_has_feature(gml_cpu_feature f) {
    if ((unsigned)f >= GML_CPU_FEATURE_COUNT) return false;
    unsigned char k = atomic_load_explicit(&feature_known[f], memory_order_relaxed);
    if (!k) atomic_store_explicit(&feature_known[f], k = ask_cpu_has_feature(f) ? 2 : 1, memory_order_relaxed);
    return k == 2;
}

static bool ask_cpu_has(gml_isa isa) {
    switch (isa) {
    case GML_ISA_AUTO:
    case GML_ISA_REFERENCE:
    case GML_ISA_SCALAR:
        return true;
#if defined(__x86_64__) || defined(__i386__)
    /* XCR0: 0x06 = SSE and AVX (ymm) state; 0xe0 = opmask and zmm state.
     * AVX-512 variants are compiled with -mavx2 -mfma as well, so AVX512
     * requires what AVX2 does (every AVX-512F CPU has them). */
    case GML_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c() &&
               os_saves(0x06);
    case GML_ISA_AVX512:
        return gml_cpu_has(GML_ISA_AVX2) && __builtin_cpu_supports("avx512f") &&
               os_saves(0xe6);
#endif
#if defined(__aarch64__)
    /* Advanced SIMD (with FMA and the f16 conversions) is part of AArch64. */
    case GML_ISA_NEON:
        return true;
#endif
    default:
        return false;
    }
}

static const char *const FEATURE_NAMES[GML_CPU_FEATURE_COUNT] = {
    [GML_CPU_AVX512_BF16] = "avx512_bf16", [GML_CPU_AVX512_VNNI] = "avx512_vnni",
    [GML_CPU_AVX_VNNI] = "avx_vnni",       [GML_CPU_AMX_TILE] = "amx_tile",
    [GML_CPU_AMX_BF16] = "amx_bf16",       [GML_CPU_AMX_INT8] = "amx_int8",
};

const char *gml_cpu_feature_name(gml_cpu_feature f) {
    return (unsigned)f < GML_CPU_FEATURE_COUNT ? FEATURE_NAMES[f] : "?";
}

static bool ask_cpu_has_feature(gml_cpu_feature f) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a0, b0, c0, d0, a1, b1, c1, d1;
    if (!__get_cpuid_count(7, 0, &a0, &b0, &c0, &d0)) return false;
    /* subleaf 1 exists when leaf 7 subleaf 0 reports a max subleaf >= 1 */
    if (a0 < 1 || !__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) a1 = b1 = c1 = d1 = 0;
    /* XCR0 bits 17 and 18: the AMX tile configuration and tile data */
    const uint32_t amx_state = (1u << 17) | (1u << 18);
    switch (f) {
    case GML_CPU_AVX512_BF16: /* CPUID.(7,1):EAX bit 5 */
        return gml_cpu_has(GML_ISA_AVX512) && (a1 & (1u << 5));
    case GML_CPU_AVX512_VNNI: /* CPUID.(7,0):ECX bit 11 */
        return gml_cpu_has(GML_ISA_AVX512) && (c0 & (1u << 11));
    case GML_CPU_AVX_VNNI:    /* CPUID.(7,1):EAX bit 4 */
        return gml_cpu_has(GML_ISA_AVX2) && (a1 & (1u << 4));
    case GML_CPU_AMX_TILE:    /* CPUID.(7,0):EDX bit 24 */
        return (d0 & (1u << 24)) && os_saves(amx_state);
    case GML_CPU_AMX_BF16:    /* CPUID.(7,0):EDX bit 22 */
        return (d0 & (1u << 22)) && gml_cpu_has_feature(GML_CPU_AMX_TILE);
    case GML_CPU_AMX_INT8:    /* CPUID.(7,0):EDX bit 25 */
        return (d0 & (1u << 25)) && gml_cpu_has_feature(GML_CPU_AMX_TILE);
    default:
        return false;
    }
#else
    (void)f;
    return false;
#endif
}

/* Linux (5.16 on) enables AMX's tile data (XCR0 bit 18, XTILEDATA) for a
 * process only when it asks (arch_prctl ARCH_REQ_XCOMP_PERM, which covers
 * all its threads); until then a tile instruction faults (SIGILL). Asked
 * once, the answer kept: 0 not asked, 1 refused, 2 granted. Elsewhere
 * (other OS, 32-bit, not x86) refused with ENOSYS. */
static _Atomic int amx_permission, amx_refusal;

bool gml_cpu_amx_permit(int *err) {
    int k = atomic_load(&amx_permission);
    if (!k) {
        int e = ENOSYS;
#if defined(__linux__) && defined(__x86_64__)
        enum { ARCH_GET_XCOMP_PERM = 0x1022, ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
        unsigned long features = 0;
        if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &features) == 0 &&
            (features & (1ul << XFEATURE_XTILEDATA)))
            e = 0;
        else
            e = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 ? 0 : errno;
#endif
        atomic_store(&amx_refusal, e);
        atomic_store(&amx_permission, k = e ? 1 : 2); /* two asking at once ask twice: the same answer */
    }
    if (err) *err = k == 2 ? 0 : atomic_load(&amx_refusal);
    return k == 2;
}

static gml_isa best_isa(void) {
    if (gml_cpu_has(GML_ISA_NEON)) return GML_ISA_NEON;
    if (gml_cpu_has(GML_ISA_AVX512)) return GML_ISA_AVX512;
    if (gml_cpu_has(GML_ISA_AVX2)) return GML_ISA_AVX2;
    return GML_ISA_SCALAR;
}

/* 0 until first use; then the ISA in effect. */
static _Atomic int current_isa;

gml_status gml_set_isa(gml_isa isa) {
    if ((unsigned)isa > LAST_ISA || !gml_cpu_has(isa)) return GML_ERR_INVALID;
    atomic_store(&current_isa, (int)(isa == GML_ISA_AUTO ? best_isa() : isa));
    return GML_OK;
}

gml_isa gml_get_isa(void) {
    int isa = atomic_load(&current_isa);
    if (isa) return (gml_isa)isa;
    gml_isa want = GML_ISA_AUTO;
    const char *env = getenv("GGMLITE_ISA");
    if (env && *env && (!gml_isa_from_name(env, &want) || !gml_cpu_has(want))) {
        fprintf(stderr, "ggmlite: GGMLITE_ISA=%s is not one of reference, scalar, avx2, avx512, neon "
                "that this CPU has; using the best available\n", env);
        want = GML_ISA_AUTO;
    }
    gml_set_isa(want);
    return (gml_isa)atomic_load(&current_isa);
}
