/* What the files of the flash attention ops share (ops/flash_attn.c and
 * the files beside it; not the micro-kernels, which see ops/ukernels.h
 * only): the sources, the params, and the helpers the drivers, the
 * reference kernels and the builders use. */
#ifndef GGMLITE_FLASH_ATTN_H
#define GGMLITE_FLASH_ATTN_H

#include "attn_opts.h"
#include "ukernels.h"

/* Sources: q, k, v, mask, valid_lens, positions, sinks. */
#define SRC_MASK 3
#define SRC_LENS 4
#define SRC_POS 5
#define SRC_SINKS 6

static inline gml_attn_params params_of(const gml_tensor *t) { return gml_attn_params_of(t); }

static inline bool lens_ok(const gml_compute_params *p, const gml_tensor *dst) {
    return gml_attn_lens_ok(p, "flash_attn", dst->src[SRC_LENS], dst->src[1]->ne[2]);
}

/* Keys [*lo, *hi) query i of batch b may see (the mask may still drop some). */
static inline void key_range(const gml_tensor *dst, const gml_attn_params *par, int64_t b, int64_t i,
                      int64_t *lo, int64_t *hi) {
    gml_attn_key_range(par, dst->src[SRC_LENS], dst->src[SRC_POS], b, i, dst->src[0]->ne[2],
                       dst->src[1]->ne[2], lo, hi);
}

static inline float sink_of(const gml_tensor *dst, int64_t h) {
    const gml_tensor *sk = dst->src[SRC_SINKS];
    return *(const float *)(const void *)gml_ptr(sk, 0, 0, 0, h);
}

#define REF_KEY_BLOCK 32

/* Per thread: the scores of one key block and the accumulator, in double. */
static inline size_t ref_work_doubles(const gml_tensor *dst) { return REF_KEY_BLOCK + (size_t)dst->ne[3]; }

static inline bool kv_typed(const gml_tensor *dst) {
    return dst->src[1]->type != GML_F32 || dst->src[2]->type != GML_F32;
}

/* Why the fast kernel cannot take dst (a note naming the reference), or
 * NULL: key counts must fit int32 with room for one more (the SIMD variants
 * compare j + 1 with them); the variants step their key blocks in size_t,
 * past any count. */
static inline const char *fast_refusal(const gml_tensor *dst) {
    const gml_tensor *k = dst->src[1], *mask = dst->src[3];
    if (k->ne[2] >= INT32_MAX) return "reference (Tk >= 2^31 - 1)";
    if (mask && mask->nb[3] % sizeof(float) != 0)
        return "reference (mask stride not a whole number of floats)";
    return NULL;
}

/* flash_attn's params: the options, then its compute precision
 * (gml_compute; 0, f32, unless set: a graph without it keeps its digest).
 * bf16 (ops/flash_attn_bf16.c, docs/numerics.md "bf16 compute"): q (scaled),
 * k and v rounded to bf16, each p = exp(s - m) rounded to bf16 before it
 * weighs v and joins the sum, the statistics and the output f32. */
typedef struct gml_flash_params {
    gml_attn_params attn;
    int32_t compute;
    int32_t unused; /* 0 (no padding in params) */
} gml_flash_params;
GML_PARAMS_FIT(gml_flash_params);

/* The compute precision of a flash_attn node (f32 for the other flash ops). */
static inline gml_compute gml_flash_compute(const gml_tensor *dst) {
    if (dst->op != GML_OP_FLASH_ATTN) return GML_COMPUTE_F32;
    gml_flash_params fp;
    gml_get_params(dst, &fp, sizeof fp);
    return (gml_compute)fp.compute;
}

/* flash_attn_partial's params: flash_attn's, then the absolute position of
 * its first key. */
typedef struct gml_partial_params {
    gml_attn_params attn;
    int64_t key0;
} gml_partial_params;
GML_PARAMS_FIT(gml_partial_params);

static inline bool is_partial(const gml_tensor *dst) { return dst->op == GML_OP_FLASH_ATTN_PARTIAL; }
static inline int64_t key0_of(const gml_tensor *dst) {
    gml_partial_params pp;
    gml_get_params(dst, &pp, sizeof pp);
    return is_partial(dst) ? pp.key0 : 0;
}

/* flash_attn_lse (the log-sum-exp kept for the backward) takes the prefill
 * path whatever its rows: the decode kernels keep no lse. */
static inline bool dec_eligible(const gml_tensor *dst) {
    if (dst->op == GML_OP_FLASH_ATTN_LSE) return false;
    if (gml_flash_compute(dst) == GML_COMPUTE_BF16) return false; /* the decode kernels are f32 */
    return is_partial(dst) || (dst->ne[1] / dst->src[1]->ne[1]) * dst->ne[2] <= GML_FLASH_DEC_MAX_ROWS;
}

/* The reference kernels (ops/flash_attn_ref.c; compute bf16:
 * ops/flash_attn_bf16_ref.c). */
void gml_f32_flash_attn__ref(const gml_compute_params *p, gml_tensor *dst);
void gml_bf16_flash_attn__ref(const gml_compute_params *p, gml_tensor *dst);
void gml_f32_flash_partial__ref(const gml_compute_params *p, gml_tensor *dst);

/* The decoding path (ops/flash_attn_dec.c): its scratch per thread and
 * shared, the keys a row sees, the forward kernel. */
size_t gml_flash_dec_thread_bytes(const gml_tensor *dst);
size_t gml_flash_dec_shared_bytes(const gml_tensor *dst);
void gml_flash_dec_key_range(const gml_tensor *dst, const gml_attn_params *par, int64_t key0,
                             int64_t b, int64_t i, int64_t *lo, int64_t *hi, float *qpos);
void gml_flash_dec_forward(const gml_compute_params *p, gml_tensor *dst);

/* Rows [j0, j0 + n) of K or V (row r at base + r * row bytes, element c at
 * + c * el) as f32 rows of d floats into buf (ops/flash_common.c). */
void gml_flash_kv_load_rows(const char *base, size_t row, size_t el, gml_type type,
                            gml_cvt_ukernel *cvt, size_t j0, size_t n, size_t d, float *buf);

/* Compute bf16 (ops/flash_attn_bf16.c): gml_set_compute's check of a
 * flash_attn node (NULL: it can take c; else why not); the pair words of
 * the fast kernel's scratch per thread (0 for f32 compute); the VDPBF16PS
 * variant for rows query rows of a kv head (false: the plan's ISA is not
 * AVX-512 or the CPU lacks AVX512_BF16, and the f32 variants run on the
 * rounded operands). */
const char *gml_flash_bf16_refusal(const gml_tensor *node, gml_compute c);
size_t gml_flash_bf16_pair_words(const gml_tensor *dst, size_t tile);
typedef struct gml_flash_bf16_variant {
    gml_f32_flash_ukernel *fn;
    size_t tile;
    const char *name;
} gml_flash_bf16_variant;
bool gml_flash_bf16_pick(gml_isa isa, int64_t rows, gml_flash_bf16_variant *out);
/* The VDPBF16PS variants' K and V of one (batch, kv head): the words of
 * scratch (0: more than GML_FLASH_BF16_HEAD_MAX_BYTES, and each key block
 * is packed as it comes), and the packing into them: K in pairs of d
 * [Tk][ceil(dk / 2)], then V in pairs of keys [ceil(Tk / 2)][dv]
 * (gml_flash_args.kpairs, vpairs), rounded as gml_fp32_to_bf16. */
#define GML_FLASH_BF16_HEAD_MAX_BYTES ((size_t)16 << 20)
size_t gml_flash_bf16_head_words(const gml_tensor *dst);
void gml_flash_bf16_pack_head(gml_isa isa, const gml_tensor *dst, int64_t b, int64_t g,
                              uint32_t *words);
/* Lanes l < nq of q^T [dk][tile] rounded to bf16 values. */
void gml_flash_bf16_round_q(float *qt, size_t dk, size_t tile, size_t nq);
/* gml_set_compute on a flash_attn node (ops/matmul.c hands it over). */
gml_status gml_flash_attn_set_compute(gml_context *ctx, gml_tensor *node, gml_compute c);

/* The builders' checks of flash_attn and flash_attn_partial
 * (ops/flash_attn.c). */
bool gml_flash_check(gml_context *ctx, const char *op, gml_tensor *q, gml_tensor *k,
                     gml_tensor *v, float scale, const gml_attn_opts *o);

/* The training pair (ops/flash_attn.c, ops/flash_attn_back.c; docs/training.md):
 * flash_attn_lse, the forward keeping each row's log-sum-exp and sink
 * weight: as gml_flash_attn_ext -> [B, H, Tq, d_v + 2]; its output alone as a
 * view [B, H, Tq, d_v] (gml_flash_attn_lse_out); the backward, f32 [n]
 * holding dQ, dK, dV, dsinks, and views of those pieces. */
gml_tensor *gml_flash_attn_lse(gml_context *ctx, gml_tensor *q, gml_tensor *k, gml_tensor *v,
                               float scale, const gml_attn_opts *opts);
gml_tensor *gml_flash_attn_lse_out(gml_context *ctx, gml_tensor *fwd);
gml_tensor *gml_flash_attn_back(gml_context *ctx, gml_tensor *q, gml_tensor *k, gml_tensor *v,
                                gml_tensor *fwd, gml_tensor *dout, float scale,
                                const gml_attn_opts *opts);
bool gml_flash_attn_back_views(gml_context *ctx, gml_tensor *back, gml_tensor **dq,
                               gml_tensor **dk, gml_tensor **dv, gml_tensor **dsinks);

#endif /* GGMLITE_FLASH_ATTN_H */
