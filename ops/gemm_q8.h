/* The int8 compute type of matmul/linear: f32 activations quantized per
 * row to q8 blocks against a q8_0 weight, int8 x int8 products summed in
 * int32 per block of 32, scaled in f32 (ggml's q8_0 x q8_0 dot product,
 * with the order of the f32 sum over blocks fixed).
 *
 * Semantics (every kernel gives these bits, on every ISA and thread count):
 *   A [M, K] f32, K a multiple of 32; W [N, K] q8_0 (B = W^T).
 *   Each run of 32 values x of a row of A becomes one q8 block as
 *   gml_quantize_row_q8_0 makes it: amax = max |x|, d = f16(amax / 127)
 *   (round to nearest even), q = roundf(x * (1 / (amax / 127))) (ties away
 *   from zero; 1 / ... in f32 before the f16 rounding, as ggml does), except
 *   that q = 0 where d is 0 (there ggml's quantizer divides by a subnormal
 *   or by 0; the block's values are 0 * q = 0 either way), and a block
 *   holding an inf or NaN gets d = NaN, q = 0 (its products NaN).
 *   Then, for output (m, n), over the K / 32 blocks b in order from +0:
 *       s_b = sum_{t < 32} qa[m][32b + t] * qw[n][32b + t]    (int32, exact)
 *       c   = fmaf((float)s_b, da[m][b] * dw[n][b], c)
 *   (float)s_b is exact (|s_b| <= 32 * 128 * 128 < 2^24), and so is the
 *   product of the two f16 scales in f32, so each block costs one rounding.
 *   ggml sums the same terms in an order of each ISA's choosing; ours is
 *   one order, so results are bitwise the same across ISAs and threads.
 *
 * Kernels. A's rows are quantized once per product into the scratch buffer
 * (q + 128 as uint8, the scale as f32); W is packed once and kept by the
 * graph when it is a constant of it (a weight: gml_q8_gemm_kept), else per
 * chunk, NR rows at a time, into panels where every 4 k of NR rows sit side by side (the
 * operand layout of VNNI's vpdpbusd: u8 x s8, 4 products summed into each
 * int32 lane), with -128 * sum q per row and block (what the +128 on A adds
 * to each block's sum) and the NR scales. A micro-kernel computes an MR x NR
 * tile: per block, the int32 sums start from the correction and take 8 dot4
 * steps, then one f32 fma per lane with the two scales. The vector kernels
 * are written once over the SIMD layer (ops/gemm_q8_simd.c; gml_vi_dot4_u8s8
 * is vpdpbusd under AVX512-VNNI and AVX-VNNI, and exact int16 products
 * (vpmaddwd, NEON's vmull) elsewhere), compiled per ISA and again with
 * -mavx512vnni / -mavxvnni; ops/gemm_q8.inc lists them, each with the CPU
 * feature it needs beyond its ISA, checked at run time. */
#ifndef GGMLITE_OPS_GEMM_Q8_H
#define GGMLITE_OPS_GEMM_Q8_H

#include "gemm.h"

/* CPU features a variant needs beyond its ISA (gml_q8_cpu_has: the
 * public gml_cpu_has_feature's answer). */
enum {
    GML_Q8_FEAT_NONE = 0,
    GML_Q8_FEAT_AVX512_VNNI, /* vpdpbusd on zmm (AVX512-VNNI) */
    GML_Q8_FEAT_AVX_VNNI,    /* vpdpbusd on ymm, VEX-encoded (AVX-VNNI) */
    GML_Q8_FEAT_AMX_INT8,    /* TDPBUSD on tiles (ops/gemm_amx.h; never in gemm_q8.inc) */
};
/* Whether the CPU has feature f (and the ISA the feature extends). */
bool gml_q8_cpu_has(int f);
/* "", "avx512_vnni", "avx_vnni", "amx_int8" */
const char *gml_q8_feature_name(int f);

/* Bytes of one packed block of a panel of nr rows: nr int32 corrections,
 * nr f32 scales, then 32 x nr int8 values, 4 k of each row side by side:
 * value k of row j at q[(k / 4 * nr + j) * 4 + k % 4]. */
#define GML_Q8_PANEL_BLOCK(nr) ((size_t)(nr) * 40)
#define GML_Q8_NR_MAX 32 /* the widest panel of any variant */

/* Packs rows [0, n) of W (row j at w + j * ldw bytes, nblk q8_0 blocks
 * each) into a panel of nr >= n rows (rows past n zero): the definition of
 * the layout, in plain C. */
void gml_q8_pack_panel(const char *w, size_t ldw, int n, int nr, size_t nblk, void *panel);

/* One row of K = 32 nblk floats x (contiguous) into nblk q8 blocks as
 * above: aq[k] = q + 128 (uint8), ad[b] the f16 scale as f32. */
typedef void (*gml_q8_quantize_fn)(size_t nblk, const float *x, uint8_t *aq, float *ad);

/* C tile [m x n] (row stride ldc floats, m <= MR, n <= NR) = the int8
 * product of m quantized rows of A (row i: aq + i * lda bytes, scales
 * ad + i * ldd) with a panel of nr rows of W, over nblk blocks, as defined
 * above, each element's chain of fmas starting from +0, or from C's value
 * when acc (so that K may be taken in steps: the chain is unchanged); C
 * outside the tile is left alone. ahead (or NULL): memory laid out as the
 * panel, whose block b the vector kernels fetch into L1 (a prefetch, which
 * never faults) while they compute block b: the panel's blocks further on,
 * when the tile is the first to read them from memory. */
typedef void (*gml_q8_gemm_ukernel_fn)(size_t nblk, const uint8_t *aq, size_t lda,
                                       const float *ad, size_t ldd, int m, const void *panel,
                                       int n, float *c, size_t ldc, bool acc, const void *ahead);

/* A variant's packing: gml_q8_pack_panel for its NR, written over the SIMD
 * layer (rows past n may hold anything: their lanes are never stored). */
typedef void (*gml_q8_pack_fn)(const char *w, size_t ldw, int n, size_t nblk, void *panel);

#define GML_Q8_UKERNEL(isa, feat, fn, pack, mr, nr)                                         \
    void fn(size_t nblk, const uint8_t *aq, size_t lda, const float *ad, size_t ldd, int m, \
            const void *panel, int n, float *c, size_t ldc, bool acc, const void *ahead);    \
    void pack(const char *w, size_t ldw, int n, size_t nblk, void *panel);
#define GML_Q8_QUANTIZE(isa, fn) void fn(size_t nblk, const float *x, uint8_t *aq, float *ad);
#include "gemm_q8.inc"
#undef GML_Q8_UKERNEL
#undef GML_Q8_QUANTIZE

typedef struct gml_q8_gemm_variant {
    gml_isa isa;
    int feature; /* GML_Q8_FEAT_* */
    gml_q8_gemm_ukernel_fn fn;
    gml_q8_pack_fn pack;
    int mr, nr;
    const char *name;
    /* NULL, or what each thread calls before its first and after its last
     * micro-kernel call of a product (the AMX variant of ops/gemm_amx.h:
     * the thread's tile configuration, and its release) */
    void (*begin)(void), (*end)(void);
} gml_q8_gemm_variant;

extern const gml_q8_gemm_variant gml_q8_gemm_variants[];
extern const int gml_q8_gemm_n_variants;

/* The variant ISA isa (the plan's) selects: the AMX one where it runs
 * (GGMLITE_AMX=1: gml_amx_q8_pick), else the last one listed whose ISA isa
 * covers and whose feature the CPU has. */
const gml_q8_gemm_variant *gml_q8_gemm_pick(gml_isa isa);
/* The activation quantizer of ISA isa (the scalar one below SIMD). */
gml_q8_quantize_fn gml_q8_quantize_pick(gml_isa isa);

/* Scratch bytes for the int8 product d (b_type q8_0) on nth threads, for
 * gml_q8_gemm and gml_q8_gemm_ref alike. */
size_t gml_q8_gemm_work_size(const gml_gemm_desc *d, int nth);
/* Bytes of W packed whole for variant v: every panel of NR rows of every
 * matrix of B (one when B is shared by the batches), all blocks of K. */
size_t gml_q8_gemm_packed_size(const gml_gemm_desc *d, const gml_q8_gemm_variant *v);
/* Thread p->ith's share of the product d with micro-kernel v: the rows of
 * A quantized (rows split among threads), a barrier, then chunks (a batch
 * and NR rows of W) against all rows of A. W's panels are packed by the
 * thread that takes the chunk, KB blocks at a time; in gml_q8_gemm_kept
 * they come from kept instead (gml_q8_gemm_packed_size bytes; the threads
 * pack W whole there beside the quantizing when kept does not hold this W
 * for v yet). The bits are the same either way. d->K must be a multiple
 * of 32 (the builders refuse others). */
void gml_q8_gemm(const gml_compute_params *p, const gml_gemm_desc *d,
                 const gml_q8_gemm_variant *v);
void gml_q8_gemm_kept(const gml_compute_params *p, const gml_gemm_desc *d,
                      const gml_q8_gemm_variant *v, gml_kept *kept);
/* The reference: the definition above as plain loops, one output row per
 * step (its A row quantized by gml_quantize_row_q8_0's rules, in scalar
 * code), rows split among threads. */
void gml_q8_gemm_ref(const gml_compute_params *p, const gml_gemm_desc *d);

#endif /* GGMLITE_OPS_GEMM_Q8_H */
