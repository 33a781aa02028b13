/* Micro-kernels: the inner loops of the fast op kernels, one function per
 * (kind, ISA). Each works on one contiguous run; the op's forward kernel in
 * ops/<family>.c walks the strides, broadcasting and thread split and calls
 * them. Which variants exist is listed once per kind in ops/<family>.inc
 * (see "ISA variants" in ggmlite/internal.h); this header declares them all,
 * for the ops and for tests/test_ukernels_<family>.c. */
#ifndef GGMLITE_UKERNELS_H
#define GGMLITE_UKERNELS_H

#include "internal.h"

#include <math.h>
#include <stddef.h>

#include "binary.inc"
#include "copy.inc"
#include "flash_attn.inc"
#include "repeat.inc"
#include "softmax.inc"
#include "unary.inc"
#include "rope.inc"
#include "convert.inc"

/* Helpers to turn a list into tables (X-macros). */
#define GML_UKERNEL_ISA(isa, fn, tile) isa,
#define GML_UKERNEL_FN(isa, fn, tile) fn,
#define GML_UKERNEL_NAME(isa, fn, tile) #fn,

/* The variant of `list` (functions of type `type`) for ISA isa (a kernel's
 * p->isa), as gml_pick_variant chooses it. Kernels take it once per call. */
#define GML_PICK_UKERNEL(isa, list, type)                                            \
    ((type *const[]){list(GML_UKERNEL_FN)}[gml_pick_variant(isa,                     \
        (const gml_isa[]){list(GML_UKERNEL_ISA)},                                    \
        (int)(sizeof((gml_isa[]){list(GML_UKERNEL_ISA)}) / sizeof(gml_isa)))])
/* Its name, "gml_f32_vadd_ukernel__avx512_u32" (a literal: gml_kernel_note);
 * _AS: as the X-macro X(isa, fn, tile) spells it, e.g. with a path appended. */
#define GML_PICK_UKERNEL_NAME_AS(isa, list, X)                                       \
    ((const char *const[]){list(X)}[gml_pick_variant(isa,                            \
        (const gml_isa[]){list(GML_UKERNEL_ISA)},                                    \
        (int)(sizeof((gml_isa[]){list(GML_UKERNEL_ISA)}) / sizeof(gml_isa)))])
#define GML_PICK_UKERNEL_NAME(isa, list) GML_PICK_UKERNEL_NAME_AS(isa, list, GML_UKERNEL_NAME)
#define GML_UKERNEL_NAME_GATHERED(isa, fn, tile) #fn " (strided rows gathered)",

/* ---- masked keys and non-finite scores (ggmlite.h, MASKS) -----------------
 * Every kernel of softmax and flash_attn forms a key's score the same way:
 * a key is hidden when its additive mask value is -inf (softmax: or its
 * input x is -inf), whatever its score holds (NaN and inf too), and its
 * score is then -inf, which weighs exactly 0. A key that is not hidden and
 * whose float score is -inf (q k^T * scale, or x * scale, or the score plus
 * a finite mask, overflowed; or a -inf in the inputs) gets NaN instead, so
 * that it makes the row NaN as a NaN or +inf score does, never passes for
 * a masked key. */

/* The score of a key the length limits let through: s the scaled score, mv
 * its additive mask value. */
static inline float gml_masked_score(float s, float mv) {
    const float t = s + mv;
    return mv == -INFINITY ? -INFINITY : t == -INFINITY ? NAN : t;
}
/* The same with no mask. */
static inline float gml_visible_score(float s) { return s == -INFINITY ? NAN : s; }
/* softmax's: x * scale (+ mask, when has_mask), hidden when mv is -inf; a
 * -inf x is a score like any other (an overflow of the scores' matmul), so
 * it makes the row NaN. A multiply then an add, as every variant rounds them. */
static inline float gml_softmax_score(float x, float scale, bool has_mask, float mv) {
    float v = x * scale;
    if (has_mask) v += mv;
    const bool hidden = has_mask && mv == -INFINITY;
    return hidden ? -INFINITY : gml_visible_score(v);
}

/* A row with no score above -inf: its keys are all masked and it gets
 * zeros, unless a score is NaN (a visible key's non-finite score, as
 * above): then the row is NaN, so a NaN is never passed off as "fully
 * masked". out holds the row's n scores. */
static inline void gml_softmax_no_visible_key(size_t n, float *out) {
    float fill = 0.0f;
    for (size_t i = 0; i < n; i++)
        if (out[i] != out[i]) fill = out[i];
    for (size_t i = 0; i < n; i++) out[i] = fill;
}

/* ---- softmax (ops/softmax.inc) --------------------------------------------
 * out[j] = softmax_j(x[j] * scale + mask[j]) for j < n, n >= 1; mask may be
 * NULL (no mask) and may hold -inf. Three passes over the row: scores
 * (gml_softmax_score) and their max, exp and the sum, normalize. As the
 * reference: hidden keys weigh exactly 0, a row with every key hidden gives
 * zeros; a non-finite score at a key not hidden makes the whole row NaN. */
typedef void gml_f32_softmax_ukernel(size_t n, const float *x, const float *mask, float scale,
                                     float *out);
#define GML_DECLARE_SOFTMAX(isa, fn, tile) gml_f32_softmax_ukernel fn;
GML_F32_SOFTMAX_UKERNELS(GML_DECLARE_SOFTMAX)

/* y[i] = exp(x[i]), i < n. The vector variants share one algorithm; its
 * error bound is documented at the vexp kernel in ops/softmax_simd.c. */
typedef void gml_f32_vexp_ukernel(size_t n, const float *x, float *y);
#define GML_DECLARE_VEXP(isa, fn, tile) gml_f32_vexp_ukernel fn;
GML_F32_VEXP_UKERNELS(GML_DECLARE_VEXP)

/* ---- binary (ops/binary.inc) ----------------------------------------------
 * vadd: out[i] = a[i] + b[i]   vaddc: out[i] = a[i] + b[0]
 * vmul: out[i] = a[i] * b[i]   vmulc: out[i] = a[i] * b[0]      (i < n, n >= 1)
 * vsub: out[i] = a[i] - b[i]   vsubc: out[i] = a[i] - b[0]   vrsubc: b[0] - a[i]
 * vdiv: out[i] = a[i] / b[i]   vdivc: out[i] = a[i] / b[0]   vrdivc: b[0] / a[i]
 * out may be a or b (in place), but not overlap them otherwise. */
typedef void gml_f32_vbinary_ukernel(size_t n, const float *a, const float *b, float *out);
#define GML_DECLARE_VBINARY(isa, fn, tile) gml_f32_vbinary_ukernel fn;
GML_F32_VADD_UKERNELS(GML_DECLARE_VBINARY)
GML_F32_VADDC_UKERNELS(GML_DECLARE_VBINARY)
GML_F32_VMUL_UKERNELS(GML_DECLARE_VBINARY)
GML_F32_VMULC_UKERNELS(GML_DECLARE_VBINARY)
GML_F32_VSUB_UKERNELS(GML_DECLARE_VBINARY)
GML_F32_VSUBC_UKERNELS(GML_DECLARE_VBINARY)
GML_F32_VRSUBC_UKERNELS(GML_DECLARE_VBINARY)
GML_F32_VDIV_UKERNELS(GML_DECLARE_VBINARY)
GML_F32_VDIVC_UKERNELS(GML_DECLARE_VBINARY)
GML_F32_VRDIVC_UKERNELS(GML_DECLARE_VBINARY)

/* ---- unary (ops/unary.inc) -----------------------------------------------
 * y[i] = f(x[i]), i < n (n >= 1), f one of neg, tanh, sigmoid, silu, gelu,
 * gelu_tanh (exp: gml_f32_vexp_ukernel, the same type); y may be x (in
 * place), but not overlap it otherwise. Formulas, constants and measured
 * errors: ops/vunary.h. */
typedef void gml_f32_vunary_ukernel(size_t n, const float *x, float *y);
#define GML_DECLARE_VUNARY(isa, fn, tile) gml_f32_vunary_ukernel fn;
GML_F32_VNEG_UKERNELS(GML_DECLARE_VUNARY)
GML_F32_VTANH_UKERNELS(GML_DECLARE_VUNARY)
GML_F32_VSIGMOID_UKERNELS(GML_DECLARE_VUNARY)
GML_F32_VSILU_UKERNELS(GML_DECLARE_VUNARY)
GML_F32_VGELU_UKERNELS(GML_DECLARE_VUNARY)
GML_F32_VGELU_TANH_UKERNELS(GML_DECLARE_VUNARY)

/* unary_back: out[i] = dy[i] * f'(x[i]), i < n (n >= 1), f one of tanh,
 * sigmoid, silu, gelu, gelu_tanh; f' and the product in double, rounded
 * once (the scalar variants: double libm, as the reference kernel; the
 * vector ones: ops/simd/vmath.h's derivatives in double lanes). out may be
 * x or dy (in place), not overlap them otherwise. */
typedef void gml_f32_vunary_back_ukernel(size_t n, const float *x, const float *dy, float *out);
#define GML_DECLARE_VUNARY_BACK(isa, fn, tile) gml_f32_vunary_back_ukernel fn;
GML_F32_VTANH_BACK_UKERNELS(GML_DECLARE_VUNARY_BACK)
GML_F32_VSIGMOID_BACK_UKERNELS(GML_DECLARE_VUNARY_BACK)
GML_F32_VSILU_BACK_UKERNELS(GML_DECLARE_VUNARY_BACK)
GML_F32_VGELU_BACK_UKERNELS(GML_DECLARE_VUNARY_BACK)
GML_F32_VGELU_TANH_BACK_UKERNELS(GML_DECLARE_VUNARY_BACK)

/* ---- copy (ops/copy.inc) --------------------------------------------------
 * 4-byte elements of any type (f32, i32), moved bit for bit.
 * copy:      dst[i] = src[i], i < n; no overlap.
 * transpose: dst[j * dst_stride + i] = src[i * src_stride + j] for i < rows,
 *            j < cols (strides in elements); no overlap. */
typedef void gml_x32_copy_ukernel(size_t n, const uint32_t *src, uint32_t *dst);
typedef void gml_x32_transpose_ukernel(size_t rows, size_t cols, const uint32_t *src,
                                       size_t src_stride, uint32_t *dst, size_t dst_stride);
#define GML_DECLARE_COPY(isa, fn, tile) gml_x32_copy_ukernel fn;
#define GML_DECLARE_TRANSPOSE(isa, fn, tile) gml_x32_transpose_ukernel fn;
GML_X32_COPY_UKERNELS(GML_DECLARE_COPY)
GML_X32_TRANSPOSE_UKERNELS(GML_DECLARE_TRANSPOSE)

/* ---- repeat (ops/repeat.inc) ----------------------------------------------
 * out[i * reps + r] = x[i] for i < n, r < reps (n, reps >= 1); 4-byte
 * elements moved bit for bit; no overlap. */
typedef void gml_x32_repeat_ukernel(size_t n, size_t reps, const uint32_t *x, uint32_t *out);
#define GML_DECLARE_REPEAT(isa, fn, tile) gml_x32_repeat_ukernel fn;
GML_X32_REPEAT_UKERNELS(GML_DECLARE_REPEAT)

/* A conversion micro-kernel (ops/convert.inc; declared below). */
typedef void gml_cvt_ukernel(size_t n, const void *x, void *y);

/* ---- flash attention (ops/flash_attn.inc) ---------------------------------
 * One block of nq <= tile query rows (the lanes) against the keys and values
 * of one kv head: for lane l,
 *     s_j = qt[:, l] . k_j (+ mask[l][j * mask_stride])   over keys j < n_keys[l]
 *     out[l] = sum_j softmax(s)_j v_j
 * the keys taken in blocks with a running max and sum per lane, the output
 * accumulated transposed in work. The contract of ggmlite.h (MASKS): keys
 * past a lane's n_keys are hidden whatever the mask holds there (NaN and
 * +inf too), and so are keys whose mask is -inf; their k and v rows do not
 * count (a NaN or inf there changes nothing); a lane that sees no key gets
 * zeros. Scores are as gml_masked_score / gml_visible_score form them (the
 * vector variants add the mask plainly to a block whose scores are all
 * under 2^102 in magnitude, where that is the same): a non-finite score at
 * a key the lane sees (NaN, +inf, -inf by overflow), or a NaN or inf in a
 * v row it sees, makes the lane NaN; so does an overflow of the float
 * value sums. The variants read key and value rows
 * below max(n_keys) only (n_keys[l] <= Tk). How: the fast loops multiply
 * the weights of hidden keys, 0, with their v rows like any other (0 * inf
 * or NaN is NaN), and every variant ends with gml_flash_finish. When a lane
 * came out NaN or inf though its sum is finite (a v row with NaN or inf,
 * hidden or not), the vector variants compute the block again with such
 * rows skipped and the lanes that see them NaN (twice the time, for such
 * blocks only; the other lanes get bitwise the same but for the sign of a
 * zero); the scalar variant, and the vector ones if a lane is still not
 * finite (its float value sums overflowed), recompute the lane with
 * gml_flash_lane_exact. */
typedef struct gml_flash_args {
    size_t nq, dk, dv;        /* 1 <= nq <= tile; dk, dv >= 1 */
    const float *qt;          /* [dk][tile]: the queries transposed and scaled; lanes >= nq 0 */
    const float *k;           /* key j, element d at k[j * ldk + d] */
    size_t ldk;
    const float *v;           /* value j, element c at v[j * ldv + c] */
    size_t ldv;
    const int32_t *n_keys;    /* [tile]: lane l sees keys j < n_keys[l]; lanes >= nq 0 */
    const float *const *mask; /* NULL, or [nq] rows of additive mask */
    size_t mask_stride;       /* in floats */
    float *const *out;        /* [nq] rows: out[l][c], c < dv */
    float *work;              /* GML_FLASH_WORK_FLOATS(tile, dv) floats, 64-byte aligned */
    /* Options (gml_attn_opts); zero: none. */
    const int32_t *first_key; /* NULL, or [tile]: lane l sees keys j >= first_key[l] only (a
                                 window; lanes >= nq 0); the variants start at key key0 */
    size_t key0;              /* min first_key over the lanes < nq (0 without first_key) */
    float softcap;            /* > 0: dot -> softcap tanh(dot / softcap) before the mask (a
                                 non-finite dot becomes NaN first: an overflow stays one) */
    const float *slope, *qpos; /* NULL, or [tile]: ALiBi, + slope[l] (j - qpos[l]) after the
                                  mask (lanes >= nq 0) */
    const float *sink;        /* NULL, or [tile]: lane l's sink logit (gml_flash_finish) */
    bool lse;                 /* also out[l][dv] = the row's log-sum-exp (sink included, -inf
                                 for a row that sees no key) and out[l][dv + 1] = the sink's
                                 weight exp(sink - lse) (0 without one): flash_attn_lse */
    /* NULL for f32 K and V read in place (k, v above). Else K and V are f16
     * or bf16 (either may be f32 too) and k, v are NULL: the variants take
     * each key block's rows through gml_flash_kv_rows, which converts them
     * into kv->kbuf / kv->vbuf (ldk = dk, ldv = dv); never the whole head. */
    struct gml_flash_kv *kv;
    /* Compute bf16 (ops/flash_attn_bf16.c): qt, K and V hold bf16 values
     * (kv->round) and each weight p = exp(s - m) is rounded to bf16 (as
     * gml_fp32_to_bf16) before it joins the sum and weighs its v row, in
     * every variant and gml_flash_lane_exact. pairs: the bf16 variants'
     * scratch (GML_FLASH_BF16_PAIR_WORDS), NULL for the others. */
    bool round_p;
    uint32_t *pairs;
    /* NULL, or the bf16 variants' K and V of the whole head in pairs, K
     * [Tk][ceil(dk / 2)], V [ceil(Tk / 2)][dv] (pairs of keys 2i, 2i + 1;
     * a 0 after an odd Tk): then the variants read no K or V rows, and
     * start their key blocks at an even key. */
    const uint32_t *kpairs, *vpairs;
    /* NULL, or the AMX variant's tiles and operands (ops/flash_attn_amx.h) */
    const struct gml_flash_amx_args *amx;
} gml_flash_args;

/* The AMX variant's view (compute bf16 with TDPBF16PS, opt-in: ops/flash_attn_amx.h
 * gives the order and the layouts). tile: C[32 x 32] (row stride ldc floats) =
 * (acc ? C : 0) + kq steps, step q the product of A's 32 rows of 16 pairs
 * a + 16 q (row stride lda words) and B's 16 rows of 32 pair columns
 * b + 16 q ldb (row stride ldb words). K: the head's K in pairs of d, rows
 * of ldk words (a multiple of 16; pairs past d_k and rows past Tk + 31 0);
 * vt: its V transposed in pairs of keys, dv rounded up to 32 rows of ldv
 * words (a multiple of 16; pairs past Tk and rows past dv 0). Scratch: qp
 * [ldk][32] (q^T in pairs of d), pp [32][32] (a key block's weights in
 * pairs of keys), vblk [dv rounded up to 32][32] (a key block's vt, where
 * it needs zeros). */
typedef struct gml_flash_amx_args {
    void (*tile)(size_t kq, const uint32_t *a, size_t lda, const uint32_t *b, size_t ldb, float *c,
                 size_t ldc, bool acc);
    const uint32_t *k, *vt;
    size_t ldk, ldv;
    uint32_t *qp, *pp, *vblk;
} gml_flash_amx_args;

/* Typed K and V of one (batch, kv head): rows j at k + j * k_row bytes,
 * element d at + d * k_el (v likewise); cvt_k / cvt_v the conversion
 * micro-kernels (NULL: element by element, or f32 copied) for rows whose
 * elements are contiguous; kbuf, vbuf GML_FLASH_MAX_KEY_BLOCK rows of dk /
 * dv floats. */
typedef struct gml_flash_kv {
    const char *k, *v;
    size_t k_row, v_row, k_el, v_el;
    gml_type k_type, v_type;
    gml_cvt_ukernel *cvt_k, *cvt_v;
    float *kbuf, *vbuf;
    /* compute bf16: the rows, once f32, rounded to bf16 values through
     * to_bf16 then from_bf16 (the conversion micro-kernels of the ISA: the
     * bits of gml_fp32_to_bf16) */
    gml_cvt_ukernel *to_bf16, *from_bf16;
} gml_flash_kv;

/* Converts rows [j0, j0 + n) (n <= GML_FLASH_MAX_KEY_BLOCK) of a->kv's K and
 * V into its buffers (ops/flash_common.c). */
void gml_flash_kv_load(const gml_flash_args *a, size_t j0, size_t n);

/* The variants' only access to K and V: *kb, *vb point at rows j0 of K and
 * V (row j0 + i at *kb + i * a->ldk), rows j0 .. j0 + n - 1 readable: in
 * place for f32, else converted (kv's buffers: valid until the next call). */
static inline void gml_flash_kv_rows(const gml_flash_args *a, size_t j0, size_t n,
                                     const float **kb, const float **vb) {
    if (!a->kv) {
        *kb = a->k + j0 * a->ldk;
        *vb = a->v + j0 * a->ldv;
        return;
    }
    gml_flash_kv_load(a, j0, n);
    *kb = a->kv->kbuf;
    *vb = a->kv->vbuf;
}

/* The score of key j in lane l from its dot product (q scaled), every
 * option applied, as the variants form it: softcap, then the mask
 * (gml_masked_score / gml_visible_score), then ALiBi. Scalar code's (the
 * scalar variant, gml_flash_lane_exact); the vector variants do the same
 * operations in the same order, with a vector tanh. */
static inline float gml_flash_score(const gml_flash_args *a, size_t l, size_t j, float dot) {
    if (a->softcap > 0) dot = isfinite(dot) ? a->softcap * tanhf(dot / a->softcap) : NAN;
    float s = a->mask ? gml_masked_score(dot, a->mask[l][j * a->mask_stride])
                      : gml_visible_score(dot);
    if (a->slope) s += a->slope[l] * ((float)j - a->qpos[l]);
    return s;
}

/* Key blocks of at most this many keys, and the scratch a variant may use:
 * a key block of scores and the output, transposed, padded to whole tiles. */
#define GML_FLASH_MAX_KEY_BLOCK 128
#define GML_FLASH_WORK_FLOATS(tile, dv) \
    (((size_t)GML_FLASH_MAX_KEY_BLOCK + gml_align_up((size_t)(dv), 16) + 16) * (size_t)(tile))

typedef void gml_f32_flash_ukernel(const gml_flash_args *a);
#define GML_DECLARE_FLASH(isa, fn, tile) gml_f32_flash_ukernel fn;
GML_F32_FLASH_UKERNELS(GML_DECLARE_FLASH)
GML_F32_FLASH_FEW_UKERNELS(GML_DECLARE_FLASH)
GML_BF16_FLASH_UKERNELS(GML_DECLARE_FLASH)
GML_BF16_FLASH_AMX_UKERNELS(GML_DECLARE_FLASH)

/* The bf16 variants (VDPBF16PS) take the operands in pairs of bf16 (a
 * uint32: the element of even index in the low half): q^T in pairs of d
 * [ceil(dk / 2)][tile], each key block's K rows in pairs of d
 * [KB][ceil(dk / 2)], its V in pairs of keys [KB / 2][dv rounded up to 16]
 * and its weights in pairs of keys [KB / 2][tile]. */
#define GML_FLASH_BF16_PAIR_WORDS(tile, dk, dv)                                              \
    (((size_t)(dk) + 1) / 2 * (size_t)(tile) +                                                \
     (size_t)GML_FLASH_MAX_KEY_BLOCK * (((size_t)(dk) + 1) / 2) +                             \
     (size_t)GML_FLASH_MAX_KEY_BLOCK / 2 * (gml_align_up((size_t)(dv), 16) + (size_t)(tile)) + 64)

/* The end of every variant (ops/flash_common.c): out[l] = ot[:, l] / sum[l]
 * for l < nq (ot[c * tile + l], sum[tile], m[tile] the lanes' running max,
 * with which a sink is folded in: sum + e^(sink - m), or where the sink is
 * above m, ot e^(m - sink) / (sum e^(m - sink) + 1)); zeros where sum is 0 (no key
 * seen, whatever ot holds), NaN where it is NaN. A lane whose output has a
 * NaN or inf though its sum is finite is recomputed by gml_flash_lane_exact
 * (its column of ot is used as scratch) when exact is true; when it is
 * false, false is returned at the first such lane (out partly written),
 * true otherwise. */
bool gml_flash_finish(const gml_flash_args *a, size_t tile, const float *sum, const float *m,
                      float *ot, bool exact);
/* gml_flash_finish's pieces for lane l with running max m and sum sum (> 0),
 * which the vector variants' own finish calls to get its bits: the factor
 * lane l's column of ot takes, 1 / sum, or with a sink f / *total (*total
 * the sum with the sink folded in: NaN for a NaN or +inf sink); and flash_attn_lse's two columns, out[dv] = the log-sum-exp
 * log(sum e^(s_j) + e^sink) and out[dv + 1] = e^(sink - lse) (0 without a
 * sink; -inf and 0 where sum is 0). */
float gml_flash_lane_factor(const gml_flash_args *a, size_t l, float sum, float m, float *total);
void gml_flash_store_lse(const gml_flash_args *a, size_t l, float sum, float m, float *out);
/* Lane l of a, key by key in float, hidden keys skipped (their k and v rows
 * never read), into out[l]: NaN if a score or a value it sees is not finite
 * or the value sums overflow, else the attention. acc: dv floats at stride
 * acc_stride. */
void gml_flash_lane_exact(const gml_flash_args *a, size_t tile, size_t l, float *acc,
                          size_t acc_stride);

/* ---- flash attention, decoding (ops/flash_attn.inc, ops/flash_dec.h) ------
 * At most GML_FLASH_DEC_MAX_ROWS query rows (the r = H / G heads of one kv
 * head times Tq) against one chunk of keys [j0, j1) of that kv head, lanes
 * over d: q . k_j a vector dot product along d_k (one K row load for all
 * rows), then p v_j accumulated along d_v (one V row load for all rows).
 * K and V are read in place, f16 and bf16 converted in registers. The result
 * is a PARTIAL, per row l over the keys j of the chunk it sees (j in
 * [first_key[l], n_keys[l]) and not hidden by its mask, MASKS):
 *     m = max_j s_j (-inf: none),  l = sum_j e^(s_j - m),  o = sum_j e^(s_j - m) v_j
 * with s_j formed as gml_flash_score forms it. A chunk where the row sees no
 * key gives exactly (o = 0, m = -inf, l = 0). A key the row sees whose score
 * is not finite (NaN, +inf, -inf by overflow) makes l NaN; a NaN or inf in a
 * V row it sees reaches o (gml_flash_partial_finish makes the row NaN).
 * Hidden keys are skipped: their K and V rows are never multiplied for that
 * row. Keys are taken in blocks of GML_FLASH_DEC_KEY_BLOCK with a running
 * max, in order: the partial depends only on the chunk, never on threads. */
#define GML_FLASH_DEC_MAX_ROWS 8
#define GML_FLASH_DEC_KEY_BLOCK 64
typedef struct gml_flash_dec_args {
    size_t nq, dk, dv;          /* 1 <= nq <= GML_FLASH_DEC_MAX_ROWS; dk, dv >= 1 */
    const float *q;             /* [nq][ldq]: the queries scaled, zero past dk; 64-byte aligned */
    size_t ldq;                 /* >= dk rounded up to 16, a multiple of 16 */
    const char *k, *v;          /* key j (j0 <= j < j1) at k + (j - j0) * k_row bytes: dk
                                   contiguous elements (v likewise, dv) */
    size_t k_row, v_row;
    gml_type k_type, v_type;    /* f32, f16 or bf16 each */
    size_t j0, j1;              /* the chunk */
    const int32_t *n_keys, *first_key; /* [nq]: row l sees keys in [first_key[l], n_keys[l]) */
    const float *const *mask;   /* NULL, or [nq] rows of additive mask (key j at j * mask_stride) */
    size_t mask_stride;
    float softcap;              /* > 0: as gml_flash_args */
    const float *slope, *qpos;  /* NULL, or [nq]: ALiBi */
    float *o;                   /* [nq][ldo] out: o (ldo >= dv rounded up to 16, a multiple of
                                   16), 64-byte aligned; zero past dv */
    size_t ldo;
    float *m, *l;               /* [nq] out */
    float *work;                /* GML_FLASH_DEC_WORK_FLOATS, 64-byte aligned */
} gml_flash_dec_args;
#define GML_FLASH_DEC_WORK_FLOATS ((size_t)GML_FLASH_DEC_MAX_ROWS * GML_FLASH_DEC_KEY_BLOCK)

typedef void gml_f32_flash_dec_ukernel(const gml_flash_dec_args *a);
#define GML_DECLARE_FLASH_DEC(isa, fn, lanes) gml_f32_flash_dec_ukernel fn;
GML_F32_FLASH_DEC_UKERNELS(GML_DECLARE_FLASH_DEC)

/* The log-sum-exp merge of two partials of one row (d_v values o, then m,
 * l), the keys of b after those of a, into a (in place): with m = max(ma,
 * mb), o = oa e^(ma - m) + ob e^(mb - m), l likewise. Exact for an empty
 * side (l = 0: the other is kept bit for bit); a NaN l stays NaN. One
 * function (libm expf, in this order) for the decode path's chunks and the
 * attn_merge op: merging the same pieces in the same order gives the same
 * bits on every ISA and thread count. */
void gml_flash_partial_merge(size_t dv, float *oa, size_t sa, float *ma, float *la,
                             const float *ob, size_t sb, float mb, float lb);
/* The end of a partial: out[c] = o[c] / l (with a sink: folded into m and l
 * first, as gml_flash_finish folds it; sink NULL: none); zeros where l is 0
 * (no key seen); the whole row NaN where l is NaN or an output is not finite
 * (a NaN or inf in a V row the row sees, or the float sums overflowed). */
void gml_flash_partial_finish(size_t dv, const float *o, size_t so, float m, float l,
                              const float *sink, float *out, size_t sout);

/* ---- rope (ops/rope.inc) --------------------------------------------------
 * n pairs rotated by cos c[i] and sin s[i], in float, a multiply, a multiply
 * and an add or subtract each (no FMA: every variant gives the same bits):
 *     o0[i] = x0[i] c[i] - x1[i] s[i],  o1[i] = x1[i] c[i] + x0[i] s[i]
 * rope: pair i is (x0[i], x1[i]) -> (o0[i], o1[i]) (rotate-half: x1 = x0 +
 * r/2); ropei: pair i is (x[2i], x[2i+1]) -> (o[2i], o[2i+1]). In place
 * allowed (o0 = x0 and o1 = x1, o = x); the runs must not overlap otherwise. */
typedef void gml_f32_rope_ukernel(size_t n, const float *c, const float *s, const float *x0,
                                  const float *x1, float *o0, float *o1);
typedef void gml_f32_ropei_ukernel(size_t n, const float *c, const float *s, const float *x,
                                   float *o);
#define GML_DECLARE_ROPE(isa, fn, tile) gml_f32_rope_ukernel fn;
#define GML_DECLARE_ROPEI(isa, fn, tile) gml_f32_ropei_ukernel fn;
GML_F32_ROPE_UKERNELS(GML_DECLARE_ROPE)
GML_F32_ROPEI_UKERNELS(GML_DECLARE_ROPEI)

/* ---- conversions (ops/convert.inc) -----------------------------------------
 * y[i] = x[i] converted, i < n (n >= 1; for q8_0 a multiple of 32, in
 * values): f32 -> f16, bf16 (uint16_t), q8_0 (gml_block_q8_0) and back to
 * f32, bitwise as gml_fp32_to_fp16 and friends. No overlap. */
#define GML_DECLARE_CVT(isa, fn, tile) gml_cvt_ukernel fn;
GML_F32_F16_CVT_UKERNELS(GML_DECLARE_CVT)
GML_F16_F32_CVT_UKERNELS(GML_DECLARE_CVT)
GML_F32_BF16_CVT_UKERNELS(GML_DECLARE_CVT)
GML_BF16_F32_CVT_UKERNELS(GML_DECLARE_CVT)
GML_F32_Q8_0_CVT_UKERNELS(GML_DECLARE_CVT)
GML_Q8_0_F32_CVT_UKERNELS(GML_DECLARE_CVT)

/* The picked variant converting a run of `type` to f32 (to_f32) or f32 to
 * `type` (from_f32), for f16, bf16, q8_0; NULL for other types. With its
 * name for gml_kernel_note. */
gml_cvt_ukernel *gml_cvt_to_f32(gml_isa isa, gml_type type, const char **name);
gml_cvt_ukernel *gml_cvt_from_f32(gml_isa isa, gml_type type, const char **name);

#endif /* GGMLITE_UKERNELS_H */
