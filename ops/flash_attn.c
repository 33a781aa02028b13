/* Fused attention (flash attention): softmax(q k^T * scale + masks) v in one
 * op. For each query row the keys are visited in blocks; a running max m,
 * a running sum l and an accumulator o of d_v values are kept, and when a
 * block raises the max, l and o are rescaled by exp(m_old - m_new):
 *
 *     m' = max(m, max_j s_j)     l' = l e^(m - m') + sum_j e^(s_j - m')
 *     o' = o e^(m - m') + sum_j e^(s_j - m') v_j          out = o / l
 *
 * so the [Tq, Tk] scores never exist. Keys a query cannot see (causal,
 * valid lengths) are skipped, whole blocks at a time. Masked keys and
 * non-finite scores follow ggmlite.h's MASKS in every kernel (how the
 * variants do it: ops/ukernels.h, flash attention).
 *
 * This file: the op flash_attn, its fast forward kernel (the prefill
 * driver: blocks of query rows through the micro-kernels) and its builder.
 * Beside it: flash_attn.h (what these files share), flash_attn_dec.c (the
 * decoding driver, also flash_attn_partial's), flash_attn_partial.c (the
 * partial, merge and finish ops), flash_attn_ref.c (the reference
 * kernels), flash_common.c (what every micro-kernel calls), the micro-
 * kernels in flash_attn_scalar.c, flash_attn_simd.c and flash_dec_simd.c
 * (ops/flash_attn.inc lists them), and attn_opts.c (the options, shared
 * with softmax). */
#include "flash_attn_amx.h"

#include <math.h>
#include <string.h>

/* ---- fast kernel ------------------------------------------------------------
 * The rows of one batch entry and kv head g, r = H / G query heads by Tq
 * positions, are numbered row = i * r + (h - g r) and cut into blocks of the
 * variant's tile (so a block holds every head of the group at a position:
 * their keys and values are read once). A task is (b, g, block); threads take
 * tasks in turn (gml_chunk_next), each computed whole by one thread, keys in
 * order: results do not depend on the thread count. */

/* K and V are read by the micro-kernels as rows of d contiguous floats (any
 * row stride). When a tensor's rows are not (a permuted view whose last dim
 * is strided), each thread packs the [Tk, d] block of the (b, g) it works on
 * into its scratch, once per (b, g) it meets: the same floats in the same
 * order, so the result is bitwise the contiguous one.
 *
 * Rows of contiguous floats that are not adjacent are packed too, when the
 * block fits PACK_MAX_BYTES: the heads of a [B, T, G, d] projection viewed
 * as [B, G, T, d] (every attention block's K and V) are a row stride of G d
 * floats apart, 2 KiB for G d = 512, so the rows of a key block fall into a
 * few L1 sets (64 keys of 64 floats: 256 lines in 8 of the 64 sets, 12 ways
 * each) and 4 KiB pages (two rows a page): each block's K and V were read
 * from L2 again on every pass of the variants' loops, and the value loop
 * stalled on them (perf: 15% of the AVX-512 kernel's samples at its V load).
 * Packed, C3's flash_attn (B=1 T=2048 H=8 d=64) ran 1.4x to 1.5x faster on
 * AVX-512 and AVX2, 1 and 2 threads, C5's (H=16 G=4, 1 KiB apart) 1.1x, the
 * copy included (best of interleaved runs on the shared machine). */
#define PACK_MAX_BYTES ((size_t)8 << 20) /* per tensor and thread: Tk d <= 2M floats */
#define UNIT_TASKS 8 /* (b, g) per thread from which a task is a whole (b, g) (below) */

static bool elems_dense(const gml_tensor *t) {
    return (t->ne[3] == 1 || t->nb[3] == sizeof(float)) && t->nb[2] % sizeof(float) == 0 &&
           (uintptr_t)t->data % sizeof(float) == 0;
}

static bool rows_dense(const gml_tensor *t) {
    if (t->type != GML_F32) return true; /* typed: converted per key block, never packed */
    if (!elems_dense(t)) return false;
    const size_t row = (size_t)t->ne[3] * sizeof(float);
    return t->ne[2] == 1 || t->nb[2] == row || (size_t)t->ne[2] * row > PACK_MAX_BYTES;
}

/* Floats of t's packed [Tk, d] block (0 when t is read in place). */
static size_t packed_floats(const gml_tensor *t) {
    return rows_dense(t) ? 0 : gml_align_up((size_t)(t->ne[2] * t->ne[3]), GML_ALIGN / sizeof(float));
}

/* t[b, g, :, :] -> dst [Tk, d], contiguous. */
static void pack_rows(const gml_tensor *t, int64_t b, int64_t g, float *dst) {
    const int64_t n = t->ne[2], d = t->ne[3];
    const bool runs = elems_dense(t); /* each row one run of d floats */
    for (int64_t j = 0; j < n; j++) {
        const char *row = gml_ptr(t, b, g, j, 0);
        if (runs) {
            memcpy(dst + j * d, row, (size_t)d * sizeof(float));
            continue;
        }
        for (int64_t c = 0; c < d; c++)
            memcpy(dst + j * d + c, row + c * (int64_t)t->nb[3], sizeof(float));
    }
}
/* The conversion micro-kernel for rows of t, or NULL (element by element). */
static gml_cvt_ukernel *kv_cvt(gml_isa isa, const gml_tensor *t) {
    const char *name;
    if (t->type == GML_F32 || (t->ne[3] > 1 && t->nb[3] != gml_type_size(t->type))) return NULL;
    return gml_cvt_to_f32(isa, t->type, &name);
}

/* Floats of the typed K and V block buffers (compute bf16: every K and V,
 * rounded as they are converted). */
static size_t kv_block_floats(const gml_tensor *dst) {
    if (!kv_typed(dst) && gml_flash_compute(dst) != GML_COMPUTE_BF16) return 0;
    return gml_align_up((size_t)GML_FLASH_MAX_KEY_BLOCK * (size_t)dst->src[0]->ne[3],
                        GML_ALIGN / sizeof(float)) +
           gml_align_up((size_t)GML_FLASH_MAX_KEY_BLOCK * (size_t)dst->src[2]->ne[3],
                        GML_ALIGN / sizeof(float));
}

/* Per lane: n_keys, first_key, slope, qpos, sink, the mask and out rows. */
#define LANE_BYTES (2 * sizeof(int32_t) + 3 * sizeof(float) + 2 * sizeof(void *))

/* Per thread: q^T, the variant's scratch, the lane tables, the packed K
 * and V blocks (when packed), the bf16 pairs (compute bf16) and the AMX
 * variant's operands (amx); 64-byte aligned pieces. */
static size_t fast_work_bytes(const gml_tensor *dst, bool amx) {
    const size_t tile = 32, dk = (size_t)dst->src[0]->ne[3], dv = (size_t)dst->src[2]->ne[3];
    return gml_align_up(dk * tile * sizeof(float), GML_ALIGN) +
           gml_align_up(GML_FLASH_WORK_FLOATS(tile, dv) * sizeof(float), GML_ALIGN) +
           gml_align_up(tile * LANE_BYTES, GML_ALIGN) +
           (packed_floats(dst->src[1]) + packed_floats(dst->src[2]) + kv_block_floats(dst)) *
               sizeof(float) +
           gml_align_up(gml_flash_bf16_pair_words(dst, tile) * sizeof(uint32_t), GML_ALIGN) +
           (gml_flash_compute(dst) == GML_COMPUTE_BF16
                ? gml_align_up(gml_flash_bf16_head_words(dst) * sizeof(uint32_t), GML_ALIGN)
                : 0) +
           (amx && gml_flash_compute(dst) == GML_COMPUTE_BF16
                ? gml_align_up(gml_flash_amx_words(dst) * sizeof(uint32_t), GML_ALIGN)
                : 0);
}

typedef struct flash_variant {
    gml_f32_flash_ukernel *fn;
    size_t tile;
    const char *name, *packed_name, *typed_name; /* K or V packed; f16/bf16 K or V */
    const char *chain_name;                      /* compute bf16 on this ISA */
} flash_variant;

#define FLASH_ENTRY(isa, fn, tile)                                                        \
    {fn, tile, #fn, #fn " (K/V rows packed)", #fn " (f16/bf16 K/V converted per key block)", \
     #fn " (compute bf16, chain: bf16 operands, f32 products)"},
static flash_variant pick_variant(gml_isa isa, bool few) {
    static const flash_variant wide[] = {GML_F32_FLASH_UKERNELS(FLASH_ENTRY)};
    static const flash_variant narrow[] = {GML_F32_FLASH_FEW_UKERNELS(FLASH_ENTRY)};
    static const gml_isa wide_isa[] = {GML_F32_FLASH_UKERNELS(GML_UKERNEL_ISA)};
    static const gml_isa narrow_isa[] = {GML_F32_FLASH_FEW_UKERNELS(GML_UKERNEL_ISA)};
    if (few)
        return narrow[gml_pick_variant(isa, narrow_isa, (int)(sizeof narrow_isa / sizeof(gml_isa)))];
    return wide[gml_pick_variant(isa, wide_isa, (int)(sizeof wide_isa / sizeof(gml_isa)))];
}
#undef FLASH_ENTRY

void gml_flash_forward(const gml_compute_params *p, gml_tensor *dst,
                       const gml_flash_amx_kernel *amx) {
    const char *refusal = fast_refusal(dst);
    if (refusal) {
        gml_kernel_note(p, refusal);
        gml_f32_flash_attn__ref(p, dst);
        return;
    }
    if (!lens_ok(p, dst)) return;
    if (dec_eligible(dst)) {
        gml_flash_dec_forward(p, dst);
        return;
    }
    const gml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *mask = dst->src[3];
    const gml_attn_params par = params_of(dst);
    const float scale = par.scale;
    const int64_t B = dst->ne[0], H = dst->ne[1], Tq = dst->ne[2], dv = v->ne[3], Tk = k->ne[2];
    const int64_t G = k->ne[1], dk = q->ne[3], r = H / G, rows = r * Tq;
    flash_variant var = pick_variant(p->isa, rows <= (int64_t)pick_variant(p->isa, true).tile);
    /* compute bf16 (ops/flash_attn_bf16.c): K and V always through the
     * converting path, rounded; q^T rounded; each weight rounded by the
     * variant (round_p); VDPBF16PS's variants where the CPU has them */
    const bool bf16 = gml_flash_compute(dst) == GML_COMPUTE_BF16;
    gml_flash_bf16_variant bv = {0};
    bool head = false; /* K and V of each (b, g) in pairs, for the VDPBF16PS variants */
    if (bf16 && gml_flash_bf16_pick(p->isa, rows, &bv)) {
        var.fn = bv.fn;
        var.tile = bv.tile;
        var.chain_name = bv.name;
        head = gml_flash_bf16_head_words(dst) > 0;
    }
    /* AMX (opt-in, ops/flash_attn_amx.h): in place of the x32 variant,
     * where the scratch was planned with its operands */
    bool use_amx = bf16 && amx && bv.fn && var.fn == bv.fn && bv.tile == 32 &&
                   gml_flash_amx_words(dst) > 0 &&
                   (size_t)p->nth * fast_work_bytes(dst, true) <= p->wsize;
#define AMX_ENTRY(isa, fn, tile) fn,
    static gml_f32_flash_ukernel *const amx_fns[] = {GML_BF16_FLASH_AMX_UKERNELS(AMX_ENTRY) NULL};
#undef AMX_ENTRY
    if (use_amx && amx_fns[0]) {
        var.fn = amx_fns[0];
        var.chain_name = amx->name;
        head = false;
    } else {
        use_amx = false;
    }
    const int64_t tile = (int64_t)var.tile, blocks = (rows + tile - 1) / tile;
    const bool pack_k = !bf16 && !rows_dense(k), pack_v = !bf16 && !rows_dense(v);
    const bool typed = kv_typed(dst) || bf16;
    gml_kernel_note(p, bf16    ? var.chain_name
                       : typed ? var.typed_name
                       : pack_k || pack_v ? var.packed_name
                                          : var.name);

    const size_t per_thread = fast_work_bytes(dst, use_amx);
    char *w = (char *)p->wdata + (size_t)p->ith * per_thread;
    float *qt = (float *)w;
    w += gml_align_up((size_t)(dk * tile) * sizeof(float), GML_ALIGN);
    float *work = (float *)w;
    w += gml_align_up(GML_FLASH_WORK_FLOATS(tile, dv) * sizeof(float), GML_ALIGN);
    const float **mask_rows = (const float **)(void *)w;
    float **out_rows = (float **)(void *)(mask_rows + tile);
    int32_t *n_keys = (int32_t *)(void *)(out_rows + tile), *first_key = n_keys + tile;
    float *slope = (float *)(void *)(first_key + tile), *qpos = slope + tile, *sink = qpos + tile;
    w += gml_align_up((size_t)tile * LANE_BYTES, GML_ALIGN);
    float *k_packed = (float *)w, *v_packed = k_packed + packed_floats(k);
    float *k_block = v_packed + packed_floats(v);
    uint32_t *pairs = bf16 ? (uint32_t *)(void *)(k_block + kv_block_floats(dst)) : NULL;
    uint32_t *head_words =
        pairs ? pairs + gml_align_up(gml_flash_bf16_pair_words(dst, 32), GML_ALIGN / sizeof(uint32_t))
              : NULL;
    gml_flash_kv kv = {.k_row = k->nb[2], .v_row = v->nb[2], .k_el = k->nb[3], .v_el = v->nb[3],
                       .k_type = k->type, .v_type = v->type, .cvt_k = kv_cvt(p->isa, k),
                       .cvt_v = kv_cvt(p->isa, v), .kbuf = k_block,
                       .to_bf16 = bf16 ? gml_cvt_from_f32(p->isa, GML_BF16, NULL) : NULL,
                       .from_bf16 = bf16 ? gml_cvt_to_f32(p->isa, GML_BF16, NULL) : NULL,
                       .vbuf = k_block + gml_align_up((size_t)GML_FLASH_MAX_KEY_BLOCK * (size_t)dk,
                                                      GML_ALIGN / sizeof(float))};
    gml_flash_amx_args amx_args;
    uint32_t *amx_words = NULL;
    if (use_amx) {
        amx_words = head_words +
                    gml_align_up(gml_flash_bf16_head_words(dst), GML_ALIGN / sizeof(uint32_t));
        gml_flash_amx_args_init(dst, amx, amx_words, &amx_args);
    }

    gml_flash_args a = {.dk = (size_t)dk, .dv = (size_t)dv, .qt = qt,
                        .ldk = pack_k || typed ? (size_t)dk : k->nb[2] / 4,
                        .ldv = pack_v || typed ? (size_t)dv : v->nb[2] / 4, .n_keys = n_keys,
                        .mask = mask ? mask_rows : NULL,
                        .mask_stride = mask && mask->ne[3] > 1 ? mask->nb[3] / 4 : 0,
                        .out = out_rows, .work = work,
                        .first_key = par.window > 0 ? first_key : NULL, .softcap = par.softcap,
                        .slope = par.alibi > 0 ? slope : NULL, .qpos = qpos,
                        .sink = dst->src[SRC_SINKS] ? sink : NULL, .kv = typed ? &kv : NULL,
                        .lse = dst->op == GML_OP_FLASH_ATTN_LSE, .round_p = bf16,
                        .pairs = pairs, .kpairs = head ? head_words : NULL,
                        .vpairs = head ? head_words + k->ne[2] * ((dk + 1) / 2) : NULL,
                        .amx = use_amx ? &amx_args : NULL};
    /* q rows of contiguous floats, 4-byte aligned: transposed in runs */
    const bool q_runs = (q->ne[3] == 1 || q->nb[3] == sizeof(float)) &&
                        (uintptr_t)q->data % sizeof(float) == 0 &&
                        q->nb[0] % sizeof(float) == 0 && q->nb[1] % sizeof(float) == 0 &&
                        q->nb[2] % sizeof(float) == 0;
    gml_x32_transpose_ukernel *const q_transpose =
        GML_PICK_UKERNEL(p->isa, GML_X32_TRANSPOSE_UKERNELS, gml_x32_transpose_ukernel);
    int64_t packed_bg = -1; /* the (b, g) this thread's packed blocks hold */
    if (use_amx) amx->configure(); /* the tile configuration is the thread's own */
    /* A task is one block, or every block of a (b, g) when K or V is packed
     * and there are (b, g) enough to share evenly (UNIT_TASKS per thread):
     * threads taking blocks in turn each met every (b, g) and packed its K
     * and V again (B=4 T=256 H=8 at 2 threads: both threads copied all 32
     * heads, about a tenth of the op). Blocks are computed whole by one
     * thread either way: the same results.
     * The next task is taken before a task's last kernel runs, not after:
     * the atomic waits for the store buffer to drain, which after a kernel
     * holds its output rows, mostly cache misses (perf: gml_chunk_next's
     * share of flash_attn, B=4 T=256 H=8, was 3.3%). */
    const bool packs = pack_k || pack_v || head || use_amx;
    const int64_t per_task = packs && p->nth > 1 && B * G >= UNIT_TASKS * p->nth ? blocks : 1;
    for (int64_t task = gml_chunk_next(p), next = 0, blk = task * per_task; blk < B * G * blocks;
         blk = (blk + 1) % per_task ? blk + 1 : (task = next) * per_task) {
        const int64_t b = blk / (G * blocks), g = blk / blocks % G, row0 = blk % blocks * tile;
        a.nq = (size_t)GML_MIN(tile, rows - row0);
        if (packs && packed_bg != b * G + g) {
            if (pack_k) pack_rows(k, b, g, k_packed);
            if (pack_v) pack_rows(v, b, g, v_packed);
            if (head) gml_flash_bf16_pack_head(p->isa, dst, b, g, head_words);
            if (use_amx) gml_flash_amx_pack_head(p->isa, dst, b, g, amx_words);
            packed_bg = b * G + g;
        }
        if (typed) { /* rows converted per key block (gml_flash_kv_rows) */
            kv.k = gml_ptr(k, b, g, 0, 0);
            kv.v = gml_ptr(v, b, g, 0, 0);
        } else {
            a.k = pack_k ? k_packed : (const float *)(const void *)gml_ptr(k, b, g, 0, 0);
            a.v = pack_v ? v_packed : (const float *)(const void *)gml_ptr(v, b, g, 0, 0);
        }
        int64_t key0 = Tk;
        /* the block's q rows (a row stride apart in a projection's layout,
         * rarely in cache) requested all at once before they are read: one
         * memory latency a block instead of one a row (perf: 4% of C3's
         * flash_attn time was the loop below waiting on them) */
        if (q_runs) {
            for (int64_t l = 0; l < (int64_t)a.nq; l++) {
                const char *qi = gml_ptr(q, b, g * r + (row0 + l) % r, (row0 + l) / r, 0);
                for (int64_t off = 0; off < dk * (int64_t)sizeof(float); off += 64)
                    __builtin_prefetch(qi + off);
            }
            /* then transposed by the ISA's transpose micro-kernel, a run of
             * rows an equal stride apart at a time (the whole block for
             * MHA, the r heads of a position for GQA), and scaled: the same
             * floats as the loop below (perf: that loop was 5% of
             * flash_attn at T=512, one thread) */
            for (int64_t l0 = 0; l0 < (int64_t)a.nq;) {
                const char *p0 = gml_ptr(q, b, g * r + (row0 + l0) % r, (row0 + l0) / r, 0);
                int64_t n = 1, stride = 0;
                for (; l0 + n < (int64_t)a.nq; n++) {
                    const int64_t R = row0 + l0 + n;
                    const int64_t st = gml_ptr(q, b, g * r + R % r, R / r, 0) - p0;
                    if (st < 0 || (n > 1 && st != n * stride)) break;
                    if (n == 1) stride = st;
                }
                q_transpose((size_t)n, (size_t)dk, (const uint32_t *)(const void *)p0,
                            (size_t)(stride / (int64_t)sizeof(float)),
                            (uint32_t *)(void *)(qt + l0), (size_t)tile);
                l0 += n;
            }
            for (int64_t d = 0; d < dk; d++)
                for (int64_t l = 0; l < (int64_t)a.nq; l++) qt[d * tile + l] *= scale;
        }
        for (int64_t l = 0; l < tile; l++) {
            if (l >= (int64_t)a.nq) { /* idle lane */
                n_keys[l] = first_key[l] = 0;
                slope[l] = qpos[l] = sink[l] = 0.0f;
                for (int64_t d = 0; d < dk; d++) qt[d * tile + l] = 0.0f;
                continue;
            }
            const int64_t i = (row0 + l) / r, h = g * r + (row0 + l) % r;
            if (!q_runs) {
                const char *qi = gml_ptr(q, b, h, i, 0);
                for (int64_t d = 0; d < dk; d++)
                    qt[d * tile + l] = *(const float *)(qi + d * (int64_t)q->nb[3]) * scale;
            }
            int64_t lo, hi;
            key_range(dst, &par, b, i, &lo, &hi);
            n_keys[l] = (int32_t)hi;
            first_key[l] = (int32_t)lo;
            key0 = GML_MIN(key0, lo);
            slope[l] = par.alibi > 0 ? gml_alibi_slope(par.alibi, h, H) : 0.0f;
            qpos[l] = (float)gml_attn_qpos(&par, dst->src[SRC_POS], b, i, Tq, Tk);
            sink[l] = dst->src[SRC_SINKS] ? sink_of(dst, h) : 0.0f;
            if (mask)
                mask_rows[l] = (const float *)(const void *)gml_ptr(
                    mask, b % mask->ne[0], h % mask->ne[1], i % mask->ne[2], 0);
            out_rows[l] = (float *)(void *)gml_ptr(dst, b, h, i, 0);
        }
        a.key0 = par.window > 0 ? (size_t)key0 : 0;
        if (bf16) gml_flash_bf16_round_q(qt, (size_t)dk, (size_t)tile, a.nq);
        if ((blk + 1) % per_task == 0) next = gml_chunk_next(p); /* its task's last block */
        var.fn(&a);
    }
    if (use_amx) amx->release();
}

static void gml_f32_flash_attn(const gml_compute_params *p, gml_tensor *dst) {
    const bool bf16 = gml_flash_compute(dst) == GML_COMPUTE_BF16;
    gml_flash_forward(p, dst, bf16 ? gml_flash_amx_pick(p->isa) : NULL);
}

size_t gml_flash_forward_work_size(const gml_tensor *dst, int nth, bool amx) {
    const size_t ref = ref_work_doubles(dst) * sizeof(double);
    const size_t dec = dec_eligible(dst) ? (size_t)nth * gml_flash_dec_thread_bytes(dst) + gml_flash_dec_shared_bytes(dst) : 0;
    return GML_MAX((size_t)nth * GML_MAX(ref, fast_work_bytes(dst, amx)), dec);
}

static size_t flash_attn_work_size(const gml_tensor *dst, int nth) {
    const bool bf16 = gml_flash_compute(dst) == GML_COMPUTE_BF16;
    return gml_flash_forward_work_size(dst, nth, bf16 && gml_flash_amx_pick(GML_ISA_AVX512) != NULL);
}

/* 2 Tk (d_k + d_v) per query row for the two products, 5 Tk for the softmax;
 * counted for every key, as the unfused graph's matmuls and softmax are. */
static double flash_attn_flops(const gml_tensor *dst) {
    const gml_tensor *q = dst->src[0], *k = dst->src[1];
    const double rows = (double)gml_nrows(dst), tk = (double)k->ne[2];
    return rows * tk * (2.0 * (double)(q->ne[3] + dst->src[2]->ne[3]) + 5.0);
}

/* ---- builder -------------------------------------------------------------- */

/* q [B, H, Tq, d_k], k [B, G, Tk, d_k], v [B, G, Tk, d_v], opts: mask
 * broadcastable to [B, H, Tq, Tk], valid_lens i32 [B] or [B, Tq], positions
 * i32 [B, Tq], sinks f32 [H] (each or NULL) -> out [B, H, Tq, d_v], stored
 * as [B, Tq, H, d_v] */
/* The checks of flash_attn and flash_attn_partial (op names the caller in
 * messages). False with the message on ctx. */
bool gml_flash_check(gml_context *ctx, const char *op, gml_tensor *q, gml_tensor *k,
                     gml_tensor *v, float scale, const gml_attn_opts *o) {
    gml_tensor *mask = o->mask, *valid_lens = o->valid_lens;
    char sq[GML_SHAPE_MAX], sk[GML_SHAPE_MAX], sv[GML_SHAPE_MAX], sx[GML_SHAPE_MAX];
    if (!gml_expect_type(ctx, op, q, GML_F32)) return false;
    for (int i = 0; i < 2; i++) { /* K and V: f32, f16 or bf16 (a half-precision KV cache) */
        const gml_tensor *t = i ? v : k;
        if (t->type != GML_F32 && t->type != GML_F16 && t->type != GML_BF16)
            return gml_fail(ctx, "%s(%s, %s, %s): '%s' is %s %s; k and v must be f32, f16 "
                            "or bf16", op, q->name, k->name, v->name, t->name, gml_type_name(t->type),
                            GML_SHAPE(t, sx)) != NULL;
    }
#define SHAPES q->name, k->name, v->name, GML_SHAPE(q, sq), GML_SHAPE(k, sk), GML_SHAPE(v, sv)
    const int64_t B = q->ne[0], H = q->ne[1], Tq = q->ne[2], G = k->ne[1], Tk = k->ne[2];
    if (k->ne[0] != B || v->ne[0] != B)
        return gml_fail(ctx, "%s(%s, %s, %s): batch sizes differ: q %s, k %s, v %s "
                        "(want q [B,H,Tq,d_k], k [B,G,Tk,d_k], v [B,G,Tk,d_v])", op, SHAPES) != NULL;
    if (v->ne[1] != G || v->ne[2] != Tk)
        return gml_fail(ctx, "%s(%s, %s, %s): k and v differ in kv heads or length: "
                        "q %s, k %s, v %s (want k [B,G,Tk,d_k], v [B,G,Tk,d_v])", op, SHAPES) != NULL;
    if (H % G)
        return gml_fail(ctx, "%s(%s, %s, %s): kv heads %" PRId64 " do not divide query "
                        "heads %" PRId64 ": q %s, k %s, v %s", op, q->name, k->name, v->name, G, H,
                        GML_SHAPE(q, sq), GML_SHAPE(k, sk), GML_SHAPE(v, sv)) != NULL;
    if (k->ne[3] != q->ne[3])
        return gml_fail(ctx, "%s(%s, %s, %s): q and k differ in d_k: q %s, k %s, v %s", op,
                        SHAPES) != NULL;
#undef SHAPES
    if (!isfinite(scale))
        return gml_fail(ctx, "%s(%s): scale %g is not finite", op, q->name, (double)scale) != NULL;
    const int64_t scores[GML_MAX_DIMS] = {B, H, Tq, Tk};
    if (mask) {
        if (!gml_expect_type(ctx, op, mask, GML_F32)) return false;
        for (int d = 0; d < GML_MAX_DIMS; d++)
            if (mask->ne[d] != 1 && mask->ne[d] != scores[d])
                return gml_fail(ctx, "%s(%s, %s, %s, %s): mask %s does not broadcast to "
                                "the scores [%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 "] "
                                "(each mask dim must be 1 or equal)", op, q->name, k->name, v->name,
                                mask->name, GML_SHAPE(mask, sx), B, H, Tq, Tk) != NULL;
    }
    if (valid_lens) {
        bool ok = valid_lens->type == GML_I32 &&
                  ((valid_lens->n_dims == 1 && valid_lens->ne[3] == B) ||
                   (valid_lens->n_dims == 2 && valid_lens->ne[2] == B && valid_lens->ne[3] == Tq));
        if (!ok)
            return gml_fail(ctx, "%s(%s, %s, %s, %s): valid lengths must be i32 [%" PRId64
                            "] or [%" PRId64 ",%" PRId64 "] ([B] or [B, Tq]), got %s %s", op, q->name,
                            k->name, v->name, valid_lens->name, B, B, Tq,
                            gml_type_name(valid_lens->type), GML_SHAPE(valid_lens, sx)) != NULL;
    }
    return gml_attn_opts_check(ctx, op, q->name, o, true, B, H, Tq, Tk);
}

/* flash_attn (extra 0) and flash_attn_lse (extra 2: the lse and the sink's
 * weight after each row's d_v outputs). */
static gml_tensor *flash_node(gml_context *ctx, gml_op op, gml_tensor *q, gml_tensor *k,
                              gml_tensor *v, float scale, const gml_attn_opts *opts, int64_t extra) {
    if (!q || !k || !v) return NULL;
    const gml_attn_opts none = {0};
    const gml_attn_opts *o = opts ? opts : &none;
    if (!gml_flash_check(ctx, gml_op_name(op), q, k, v, scale, o)) return NULL;
    gml_tensor *mask = o->mask, *valid_lens = o->valid_lens;
    const int64_t B = q->ne[0], H = q->ne[1], Tq = q->ne[2];
    const int n = q->n_dims;
    int64_t ne[GML_MAX_DIMS] = {B, H, Tq, v->ne[3] + extra};
    gml_tensor *t = gml_new_op(ctx, op, GML_F32, n, ne + GML_MAX_DIMS - n,
                               (gml_tensor *[]){q, k, v, mask, valid_lens, o->positions, o->sinks},
                               7);
    if (!t) return NULL;
    if (H > 1 && Tq > 1) { /* head-interleaved storage [B, Tq, H, d_v] */
        t->nb[1] = t->nb[3] * (size_t)ne[3];
        t->nb[2] = t->nb[1] * (size_t)H;
        t->nb[0] = t->nb[2] * (size_t)Tq;
    }
    /* a context's default compute bf16 reaches flash_attn (not the
     * training pair: flash_attn_lse stays f32; int8 is for matmuls) */
    const int32_t compute = op == GML_OP_FLASH_ATTN && ctx->compute == GML_COMPUTE_BF16
                                ? GML_COMPUTE_BF16 : GML_COMPUTE_F32;
    gml_set_params(t,
                   &(gml_flash_params){{scale, (int32_t)o->causal, o->window, o->softcap,
                                        o->alibi_max_bias},
                                       compute, 0},
                   sizeof(gml_flash_params));
    return t;
}

gml_tensor *gml_flash_attn_ext(gml_context *ctx, gml_tensor *q, gml_tensor *k, gml_tensor *v,
                               float scale, const gml_attn_opts *opts) {
    GML_ENTER(ctx, 3, q, k, v);
    GML_ENTER_OPTS(ctx, opts);
    return flash_node(ctx, GML_OP_FLASH_ATTN, q, k, v, scale, opts, 0);
}

/* as gml_flash_attn_ext -> [B, H, Tq, d_v + 2]: row (out, lse, sink weight),
 * stored as [B, Tq, H, d_v + 2] */
gml_tensor *gml_flash_attn_lse(gml_context *ctx, gml_tensor *q, gml_tensor *k, gml_tensor *v,
                               float scale, const gml_attn_opts *opts) {
    GML_ENTER(ctx, 3, q, k, v);
    GML_ENTER_OPTS(ctx, opts);
    return flash_node(ctx, GML_OP_FLASH_ATTN_LSE, q, k, v, scale, opts, 2);
}

gml_tensor *gml_flash_attn_lse_out(gml_context *ctx, gml_tensor *fwd) {
    GML_ENTER(ctx, 1, fwd);
    int64_t ne[GML_MAX_DIMS];
    memcpy(ne, fwd->ne, sizeof ne);
    ne[3] -= 2;
    return gml_new_view(ctx, GML_OP_VIEW, fwd, fwd->n_dims, ne + GML_MAX_DIMS - fwd->n_dims,
                        fwd->nb + GML_MAX_DIMS - fwd->n_dims, 0, "out");
}

gml_tensor *gml_flash_attn(gml_context *ctx, gml_tensor *q, gml_tensor *k, gml_tensor *v,
                           gml_tensor *mask, gml_tensor *valid_lens, float scale, bool causal) {
    GML_ENTER(ctx, 3, q, k, v, mask, valid_lens);
    const gml_attn_opts o = {.mask = mask, .valid_lens = valid_lens,
                             .causal = causal ? GML_CAUSAL_BOTTOM_RIGHT : GML_CAUSAL_NONE};
    return gml_flash_attn_ext(ctx, q, k, v, scale, &o);
}

/* scale: 1/sqrt(d_k) unless given */
static gml_tensor *build_flash(gml_context *ctx, const gml_arg *v, gml_op op) {
    const float scale = v[5].given ? v[5].f : (float)(1.0 / sqrt((double)v[0].t->ne[3]));
#define GIVEN(a, field) (v[a].given ? v[a].field : 0) /* optional ones left out: none */
    const gml_attn_opts o = {.mask = GIVEN(3, t), .valid_lens = GIVEN(4, t),
                             .causal = (gml_causal)GIVEN(6, i), .positions = GIVEN(7, t),
                             .sinks = GIVEN(8, t), .window = GIVEN(9, i),
                             .softcap = GIVEN(10, f), .alibi_max_bias = GIVEN(11, f)};
#undef GIVEN
    gml_tensor *t = flash_node(ctx, op, v[0].t, v[1].t, v[2].t, scale, &o,
                               op == GML_OP_FLASH_ATTN_LSE ? 2 : 0);
    if (t && op == GML_OP_FLASH_ATTN && v[12].given &&
        gml_flash_attn_set_compute(ctx, t, (gml_compute)v[12].i) != GML_OK)
        return NULL;
    return t;
}
static gml_tensor *build_flash_attn(gml_context *ctx, const gml_arg *v) {
    return build_flash(ctx, v, GML_OP_FLASH_ATTN);
}
static gml_tensor *build_flash_attn_lse(gml_context *ctx, const gml_arg *v) {
    return build_flash(ctx, v, GML_OP_FLASH_ATTN_LSE);
}

static void flash_attn_args(const gml_tensor *t, gml_arg *v) {
    const gml_attn_params p = params_of(t);
    for (int i = 0; i < 5; i++) v[i].t = t->src[i]; /* q, k, v, mask, valid_lens */
    v[5].f = p.scale;
    v[6].i = p.causal;
    v[7].t = t->src[SRC_POS];
    v[8].t = t->src[SRC_SINKS];
    v[9].i = p.window;
    v[10].f = p.softcap;
    v[11].f = p.alibi;
}
static void flash_attn_compute_args(const gml_tensor *t, gml_arg *v) {
    flash_attn_args(t, v);
    v[12].i = gml_flash_compute(t);
}
static const char *const compute_names[] = {"f32", "bf16", "int8", NULL};

/* ---- backward (gml_grad) --------------------------------------------------
 * flash_attn_back from the node's sources and options: dQ, dK, dV (summed
 * over the query heads of each kv head) and dsinks. fwd is a flash_attn_lse
 * of the same inputs: flash_attn's backward builds one (the forward again,
 * keeping the lse: one more forward's time, no [Tq, Tk] kept), while
 * flash_attn_lse's is its own node. The mask is data: a gradient that would
 * have to reach it is refused by name (valid lengths and positions are
 * integers: none needed). */
static bool flash_backward_from(gml_backward_ctx *b, gml_tensor *node, gml_tensor *fwd,
                                gml_tensor *dout) {
    gml_context *ctx = gml_backward_context(b);
    gml_tensor *mask = node->src[SRC_MASK], *sinks = node->src[SRC_SINKS];
    if (gml_flash_compute(node) == GML_COMPUTE_BF16)
        return gml_backward_fail(b, "flash_attn computes in bf16, whose backward is not "
                                 "implemented; build it with f32 compute (gml_set_compute(ctx, "
                                 "node, GML_COMPUTE_F32), or no bf16 default on the context)");
    if (mask && gml_backward_needs(b, mask))
        return gml_backward_fail(b, "no gradient flows to the mask '%s' (an additive input "
                                 "held constant); make it a leaf no gradient is asked for",
                                 mask->name);
    const gml_attn_params par = params_of(node);
    const gml_attn_opts o = {.mask = mask, .valid_lens = node->src[SRC_LENS],
                             .positions = node->src[SRC_POS], .sinks = sinks,
                             .causal = (gml_causal)par.causal, .window = par.window,
                             .softcap = par.softcap, .alibi_max_bias = par.alibi};
    gml_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2];
    if (!fwd) fwd = gml_flash_attn_lse(ctx, q, k, v, par.scale, &o);
    gml_tensor *back = gml_flash_attn_back(ctx, q, k, v, fwd, dout, par.scale, &o);
    gml_tensor *dq, *dk, *dv, *ds;
    if (!back || !gml_flash_attn_back_views(ctx, back, &dq, &dk, &dv, &ds)) return false;
    return gml_backward_add(b, q, dq) && gml_backward_add(b, k, dk) &&
           gml_backward_add(b, v, dv) && (!sinks || gml_backward_add(b, sinks, ds));
}

static bool flash_attn_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dout) {
    return flash_backward_from(b, node, NULL, dout);
}

/* The gradient of the output columns only: the lse and sink-weight columns
 * are for the backward (a gradient reaching them is not propagated). */
static bool flash_attn_lse_backward(gml_backward_ctx *b, gml_tensor *node, gml_tensor *dnode) {
    gml_context *ctx = gml_backward_context(b);
    int64_t ne[GML_MAX_DIMS];
    memcpy(ne, dnode->ne, sizeof ne);
    ne[3] -= 2;
    const int n = dnode->n_dims;
    gml_tensor *dout = gml_new_view(ctx, GML_OP_VIEW, dnode, n, ne + GML_MAX_DIMS - n,
                                    dnode->nb + GML_MAX_DIMS - n, 0, "dout");
    return dout && flash_backward_from(b, node, node, dout);
}

const gml_op_def gml_opdef_flash_attn = {
    .backward = flash_attn_backward,
    .forward = gml_f32_flash_attn,
    .reference = gml_f32_flash_attn__ref,
    .work_size = flash_attn_work_size,
    .flops = flash_attn_flops,
    GML_ARGS(GML_T("q"), GML_T("k"), GML_T("v"), GML_OPT("mask", OPT_TENSOR, "none"),
             GML_OPT("valid_lens", OPT_TENSOR, "none"), GML_OPT("scale", FLOAT, "1/sqrt(d_k)"),
             GML_OPT_ENUM("causal", "false", gml_causal_names),
             GML_OPT("positions", OPT_TENSOR, "none"), GML_OPT("sinks", OPT_TENSOR, "none"),
             GML_OPT_Z("window", INT), GML_OPT_Z("softcap", FLOAT),
             GML_OPT_Z("alibi", FLOAT), GML_OPT_ENUM_Z("compute", "f32", compute_names)),
    .build = build_flash_attn,
    .get_args = flash_attn_compute_args,
    .doc_args = "q `[B, H, Tq, d_k]`, k `[B, G, Tk, d_k]`, v `[B, G, Tk, d_v]` (G divides H; k, "
                "v f32, f16 or bf16, converted per key block); "
                "mask as softmax's; valid_lens i32 `[B]` or `[B, Tq]`; causal false, true "
                "(= bottom_right: query i at i + Tk - Tq) or top_left (at i); positions i32 "
                "`[B, Tq]` (each query's i', instead); sinks f32 `[H]`; window W: key j seen iff "
                "0 <= i' - j < W (implies causal); softcap c: s -> c tanh(s/c); alibi: max bias "
                "(slopes as ggml's); compute f32 or bf16 (q, k, v and the weights rounded to bf16, "
                "statistics and output f32; docs/numerics.md)",
    .doc_result = "`[B, H, Tq, d_v]`: softmax(q k^T * scale (capped) + masks + alibi, sink in "
                  "the denominator) v in one op (online "
                  "softmax, no scores); query head h reads kv head h / (H/G); stored as "
                  "`[B, Tq, H, d_v]`, so `permute(.., [0, 2, 1, 3])` is contiguous",
};

/* The forward that keeps what flash_attn_back needs: each row's log-sum-exp
 * and its sink's weight, two floats after its d_v outputs (the lse from the
 * kernel's running max and sum, log in float). The same outputs as
 * flash_attn's, bitwise, on the prefill path whatever the rows (the decode
 * kernels keep no lse). */
const gml_op_def gml_opdef_flash_attn_lse = {
    .backward = flash_attn_lse_backward,
    .forward = gml_f32_flash_attn,
    .reference = gml_f32_flash_attn__ref,
    .work_size = flash_attn_work_size,
    .flops = flash_attn_flops,
    GML_ARGS(GML_T("q"), GML_T("k"), GML_T("v"), GML_OPT("mask", OPT_TENSOR, "none"),
             GML_OPT("valid_lens", OPT_TENSOR, "none"), GML_OPT("scale", FLOAT, "1/sqrt(d_k)"),
             GML_OPT_ENUM("causal", "false", gml_causal_names),
             GML_OPT("positions", OPT_TENSOR, "none"), GML_OPT("sinks", OPT_TENSOR, "none"),
             GML_OPT_Z("window", INT), GML_OPT_Z("softcap", FLOAT),
             GML_OPT_Z("alibi", FLOAT)),
    .build = build_flash_attn_lse,
    .get_args = flash_attn_args,
    .doc_args = "as flash_attn's",
    .doc_result = "`[B, H, Tq, d_v + 2]`: row (flash_attn's output, its log-sum-exp (the sink "
                  "included; -inf where no key is seen), the sink's weight exp(sink - lse)), "
                  "for flash_attn_back; stored as `[B, Tq, H, d_v + 2]`",
};
