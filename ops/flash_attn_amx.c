/* When flash_attn's AMX tiles run (ops/flash_attn_amx.h): where the AMX
 * GEMM's checks (ops/gemm_amx.c, gml_amx_flash_runs: GGMLITE_AMX=1, CPU,
 * Linux's permission) pass, or the tiles a test set. NOT VERIFIED ON AN
 * AMX CPU. */
#include "flash_attn_amx.h"
#include "gemm_amx.h"

static const gml_flash_amx_kernel *_Atomic flash_amx_override;

#ifdef GML_HAVE_AMX
static const gml_flash_amx_kernel AMX_TILES = {
    gml_flash_amx_configure__amx, gml_flash_amx_tile__amx, gml_flash_amx_release__amx,
    "gml_bf16_flash_ukernel__avx512bf16amx_x32 (compute bf16, AMX tiles)",
};
#endif

const gml_flash_amx_kernel *gml_flash_amx_pick(gml_isa isa) {
    if (isa != GML_ISA_AVX512) return NULL;
    const gml_flash_amx_kernel *k = atomic_load(&flash_amx_override);
    if (k) return k;
    /* says once why not, where GGMLITE_AMX=1 */
#ifdef GML_HAVE_AMX
    return gml_amx_flash_runs(isa) ? &AMX_TILES : NULL;
#else
    (void)gml_amx_flash_runs(isa);
    return NULL;
#endif
}

void gml_flash_amx_use(const gml_flash_amx_kernel *k) { atomic_store(&flash_amx_override, k); }
