/* flash_attn's bf16 prefill on AMX tiles (compute bf16 with TDPBF16PS;
 * docs/numerics.md, "flash_attn on AMX"). NOT VERIFIED ON AN AMX CPU:
 * written and tested on machines without AMX, against the C emulation of
 * the tile instructions (tests/amx_emul.h, tests/test_flash_attn_bf16.c
 * built as test_flash_attn_amx). It runs only where the AMX GEMM would
 * (gml_amx_bf16_pick: GGMLITE_AMX=1, the plan's ISA AVX-512, a CPU with
 * AMX-BF16 and Linux's tile data permission), for a flash_attn node with
 * compute bf16 whose kv heads have more than 16 query rows (decoding and
 * short blocks keep the VDPBF16PS variants), in place of the VDPBF16PS x32
 * variant.
 *
 * What changes: the two products. The online softmax, the options, the
 * masks and the end are the VDPBF16PS variant's (ops/flash_attn_simd.c,
 * the same source with its products on tiles): blocks of 32 query rows,
 * key blocks of 64 keys, each weight rounded to bf16.
 *   scores  s[j][l] for 32 keys x 32 rows a call: A = K's rows in pairs of
 *           d (the head's, packed once per (batch, kv head)), B = q^T in
 *           pairs of d; d_k padded with +0 to a multiple of 32;
 *   values  o^T[c][l] += for 32 columns x 32 rows a call: A = V^T in pairs
 *           of keys (the head's, packed once), B = the block's weights in
 *           pairs of keys; a key block's 64 keys two steps of 32, the
 *           partial block's keys padded with +0 (weights and values).
 * Each C element in TDPBF16PS's order (ops/gemm_amx.h): per step of 32
 * (16 pairs), an even and an odd fma chain from +0, then c + (e + o),
 * every operation with DAZ and FTZ; o^T starts each key block from its
 * value rescaled (o e^(m_old - m_new)) as the other variants do. Rows are
 * whole per thread, keys in order: the same bits at every thread count. */
#ifndef GGMLITE_OPS_FLASH_ATTN_AMX_H
#define GGMLITE_OPS_FLASH_ATTN_AMX_H

#include "flash_attn.h"

/* The tiles, compiled from ops/flash_attn_amx_tiles.c with the tile
 * instructions (suffix __amx, only where GML_HAVE_AMX) and against the
 * emulation (suffix __amxemul, in the test only):
 *   configure: loads the tile configuration (eight tiles of 16 rows x 64
 *              bytes) on the calling thread, before its first tile call;
 *   tile:      gml_flash_amx_args.tile (ops/ukernels.h);
 *   release:   TILERELEASE on the calling thread. */
typedef struct gml_flash_amx_kernel {
    void (*configure)(void);
    void (*tile)(size_t kq, const uint32_t *a, size_t lda, const uint32_t *b, size_t ldb, float *c,
                 size_t ldc, bool acc);
    void (*release)(void);
    const char *name; /* the note the node records (gml_kernel_note) */
} gml_flash_amx_kernel;

#define GML_FLASH_AMX_DECLARE(sfx)                                                                 \
    void gml_flash_amx_configure__##sfx(void);                                                     \
    void gml_flash_amx_tile__##sfx(size_t kq, const uint32_t *a, size_t lda, const uint32_t *b,    \
                                   size_t ldb, float *c, size_t ldc, bool acc);                    \
    void gml_flash_amx_release__##sfx(void);
GML_FLASH_AMX_DECLARE(amx)
GML_FLASH_AMX_DECLARE(amxemul)
#undef GML_FLASH_AMX_DECLARE

/* The tiles flash_attn with compute bf16 runs at ISA isa, or NULL: those
 * gml_flash_amx_use set, else the real ones where gml_amx_bf16_pick(isa)
 * hands out the AMX GEMM (the same opt-in, CPU check and permission; it
 * says once on stderr why not when GGMLITE_AMX=1 cannot be honoured). */
const gml_flash_amx_kernel *gml_flash_amx_pick(gml_isa isa);
/* For tests: k (the emulated tiles) in place of the real ones at ISA
 * AVX-512, for every later plan and compute; NULL: back to the real ones. */
void gml_flash_amx_use(const gml_flash_amx_kernel *k);

/* The words of the AMX variant's scratch per thread for dst (a flash_attn
 * with compute bf16): the head's K and V^T, q, the weights and a V block,
 * and the packing's rows; 0 when the head's K and V^T pass
 * GML_FLASH_BF16_HEAD_MAX_BYTES (the VDPBF16PS variant runs then). */
size_t gml_flash_amx_words(const gml_tensor *dst);
/* Points x's operands and scratch into words (gml_flash_amx_words of
 * them) and sets its tile function to k's. */
void gml_flash_amx_args_init(const gml_tensor *dst, const gml_flash_amx_kernel *k, uint32_t *words,
                             gml_flash_amx_args *x);
/* K and V^T of (batch b, kv head g) into their place in words (as
 * gml_flash_amx_args_init points them), rounded to bf16 as gml_fp32_to_bf16
 * (ops/flash_attn_bf16.c). */
void gml_flash_amx_pack_head(gml_isa isa, const gml_tensor *dst, int64_t b, int64_t g,
                             uint32_t *words);

/* The prefill forward of a flash_attn node (ops/flash_attn.c) with the AMX
 * tiles amx (NULL: none, as gml_flash_amx_pick says), and its scratch for
 * nth threads with amx or without. */
void gml_flash_forward(const gml_compute_params *p, gml_tensor *dst,
                       const gml_flash_amx_kernel *amx);
size_t gml_flash_forward_work_size(const gml_tensor *dst, int nth, bool amx);

#endif /* GGMLITE_OPS_FLASH_ATTN_AMX_H */
