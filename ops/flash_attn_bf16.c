/* flash_attn with compute bf16 (gml_set_compute, docs/numerics.md "bf16
 * compute"): what the op's files share for it. The arithmetic, per query
 * row:
 *
 *   q~ = bf16(q * scale), k~ = bf16(k), v~ = bf16(v)   (round to nearest even)
 *   s_j = q~ . k~_j, summed in f32 (exact products), then the options as in
 *         f32 (softcap, mask, ALiBi, window, lengths, sinks)
 *   the online softmax in f32 (running max m, sum l, output o), with each
 *   p_j = bf16(exp(s_j - m)) rounded before it joins l and weighs v~_j
 *   out = o / l (f32)
 *
 * The two products sum in one of three fixed orders, as bf16 matmuls do
 * (ops/gemm_bf16.h): the chain (an fma per element, in order) in the
 * reference kernel and the fast kernels on every ISA without AVX512_BF16
 * (the f32 micro-kernels on the rounded operands, round_p set), or the
 * pairs of VDPBF16PS (pairs of d for q k^T, pairs of keys for p v, each
 * fma with subnormal inputs and results flushed) in the bf16 micro-kernels
 * where the plan's ISA is AVX-512 and the CPU has AVX512_BF16, or, with
 * GGMLITE_AMX=1 on a CPU with AMX, TDPBF16PS's on tiles, for kv
 * heads of more than 16 query rows (ops/flash_attn_amx.h). Each way
 * a row is computed whole by one thread, keys in order: the same bits at
 * every thread count. The decode kernels stay f32: a bf16 node takes the
 * prefill path whatever its rows. */
#include "flash_attn_amx.h"

/* NULL if node (a flash_attn) can compute in c, else what it takes. */
const char *gml_flash_bf16_refusal(const gml_tensor *node, gml_compute c) {
    (void)node;
    switch (c) {
    case GML_COMPUTE_F32:
    case GML_COMPUTE_BF16: return NULL; /* every option, f32, f16 and bf16 k and v */
    case GML_COMPUTE_INT8:
        return "flash_attn computes in f32 or bf16 (int8 compute is for matmuls with a q8_0 "
               "weight)";
    default: return "not a gml_compute value";
    }
}

gml_status gml_flash_attn_set_compute(gml_context *ctx, gml_tensor *node, gml_compute c) {
    const char *why = gml_flash_bf16_refusal(node, c);
    if (why) {
        if ((unsigned)c >= GML_COMPUTE_COUNT)
            gml_set_error(ctx, "gml_set_compute(%s, %d): %s (f32, bf16)", node->name, (int)c, why);
        else
            gml_set_error(ctx, "gml_set_compute(%s, %s): flash_attn(%s, %s, %s): %s", node->name,
                          gml_compute_name(c), node->src[0]->name, node->src[1]->name,
                          node->src[2]->name, why);
        return GML_ERR_INVALID;
    }
    gml_flash_params fp;
    gml_get_params(node, &fp, sizeof fp);
    fp.compute = (int32_t)c;
    gml_set_params(node, &fp, sizeof fp);
    return GML_OK;
}

size_t gml_flash_bf16_pair_words(const gml_tensor *dst, size_t tile) {
    if (gml_flash_compute(dst) != GML_COMPUTE_BF16) return 0;
    return GML_FLASH_BF16_PAIR_WORDS(tile, dst->src[0]->ne[3], dst->src[2]->ne[3]);
}

#define BF16_ENTRY(isa, fn, tile) {fn, tile, #fn " (compute bf16, pairs)"},
bool gml_flash_bf16_pick(gml_isa isa, int64_t rows, gml_flash_bf16_variant *out) {
#if defined(__x86_64__) || defined(__i386__)
    static const gml_flash_bf16_variant list[] = {GML_BF16_FLASH_UKERNELS(BF16_ENTRY)};
    if (isa != GML_ISA_AVX512 || !gml_cpu_has_feature(GML_CPU_AVX512_BF16)) return false;
    *out = rows <= (int64_t)list[1].tile ? list[1] : list[0];
    return true;
#else
    (void)isa, (void)rows, (void)out;
    return false;
#endif
}
#undef BF16_ENTRY

void gml_flash_bf16_round_q(float *qt, size_t dk, size_t tile, size_t nq) {
    for (size_t d = 0; d < dk; d++)
        for (size_t l = 0; l < nq; l++)
            qt[d * tile + l] = gml_bf16_to_fp32(gml_fp32_to_bf16(qt[d * tile + l]));
}

/* ---- K and V of a head in pairs, once per (batch, kv head) ------------------
 * The VDPBF16PS variants read the whole head's K in pairs of d and V in
 * pairs of keys, rounded once per (b, g) a thread meets rather than per
 * block of query rows (which converted every key block again for each
 * block: a third of C3's bf16 flash_attn at T 1024). */

size_t gml_flash_bf16_head_words(const gml_tensor *dst) {
    const int64_t Tk = dst->src[1]->ne[2], dk = dst->src[0]->ne[3], dv = dst->src[2]->ne[3];
    const int64_t d = GML_MAX(dk, dv);
    const size_t words = (size_t)(Tk * ((dk + 1) / 2) + (Tk + 1) / 2 * dv) + (size_t)d + (size_t)d + 16;
    return words * sizeof(uint32_t) <= GML_FLASH_BF16_HEAD_MAX_BYTES ? words : 0;
}

/* Row j of t (b, g) rounded to bf16 into o (d elements), through tmp (d
 * floats) when not f32 with contiguous elements. */
static void row_bf16(gml_isa isa, const gml_tensor *t, int64_t b, int64_t g, int64_t j, float *tmp,
                     uint16_t *o) {
    const int64_t d = t->ne[3];
    const char *r = gml_ptr(t, b, g, j, 0);
    const bool dense = d == 1 || t->nb[3] == gml_type_size(t->type);
    gml_cvt_ukernel *from_f32 = gml_cvt_from_f32(isa, GML_BF16, NULL);
    if (t->type == GML_BF16 && dense) { /* bf16 already: exact */
        memcpy(o, r, (size_t)d * 2);
        return;
    }
    if (t->type == GML_F32 && dense && (uintptr_t)r % sizeof(float) == 0) {
        from_f32((size_t)d, r, o);
        return;
    }
    gml_flash_kv_load_rows(r, 0, t->nb[3], t->type,
                           dense ? gml_cvt_to_f32(isa, t->type, NULL) : NULL, 0, 1, (size_t)d, tmp);
    from_f32((size_t)d, tmp, o);
}

void gml_flash_bf16_pack_head(gml_isa isa, const gml_tensor *dst, int64_t b, int64_t g,
                              uint32_t *words) {
    const gml_tensor *k = dst->src[1], *v = dst->src[2];
    const int64_t Tk = k->ne[2], dk = k->ne[3], dv = v->ne[3], dkp = (dk + 1) / 2;
    uint32_t *kp = words, *vp = kp + Tk * dkp;
    float *tmp = (float *)(void *)(vp + (Tk + 1) / 2 * dv);
    uint16_t *t16 = (uint16_t *)(void *)(tmp + GML_MAX(dk, dv));
    for (int64_t j = 0; j < Tk; j++) { /* pairs of d: the bf16 row as it is, a 0 after an odd one */
        uint16_t *o = (uint16_t *)(void *)(kp + j * dkp);
        row_bf16(isa, k, b, g, j, tmp, o);
        if (dk % 2) o[dk] = 0;
    }
    for (int64_t j = 0; j < Tk; j += 2) { /* pairs of keys: rows j and j + 1 side by side */
        uint32_t *o = vp + j / 2 * dv;
        row_bf16(isa, v, b, g, j, tmp, t16);
        if (j + 1 < Tk) row_bf16(isa, v, b, g, j + 1, tmp, t16 + dv);
        else memset(t16 + dv, 0, (size_t)dv * 2);
        for (int64_t c = 0; c < dv; c++) o[c] = (uint32_t)t16[c] | (uint32_t)t16[dv + c] << 16;
    }
}

/* ---- the AMX variant's operands (ops/flash_attn_amx.h) ----------------------
 * K [Tk + 32][ldk] in pairs of d, V^T [dv rounded up to 32][ldv] in pairs of
 * keys, then q^T's pairs, the weights' pairs, a V^T block and the packing's
 * rows. */

typedef struct amx_layout {
    size_t ldk, ldv, dv32, k_words, vt_words, qp_words, pp_words, vblk_words, tmp_words;
} amx_layout;

static amx_layout amx_layout_of(const gml_tensor *dst) {
    const size_t Tk = (size_t)dst->src[1]->ne[2], dk = (size_t)dst->src[0]->ne[3];
    const size_t dv = (size_t)dst->src[2]->ne[3], d = dk > dv ? dk : dv;
    amx_layout l = {.ldk = (dk + 31) / 32 * 16, .ldv = ((Tk + 1) / 2 + 15) / 16 * 16,
                    .dv32 = (dv + 31) / 32 * 32};
    l.k_words = (Tk + 32) * l.ldk;
    l.vt_words = l.dv32 * l.ldv;
    l.qp_words = l.ldk * 32;
    l.pp_words = 32 * 32;
    l.vblk_words = l.dv32 * 32;
    l.tmp_words = d + (d + 1) / 2 + 16;
    return l;
}

size_t gml_flash_amx_words(const gml_tensor *dst) {
    const amx_layout l = amx_layout_of(dst);
    if ((l.k_words + l.vt_words) * sizeof(uint32_t) > GML_FLASH_BF16_HEAD_MAX_BYTES) return 0;
    return l.k_words + l.vt_words + l.qp_words + l.pp_words + l.vblk_words + l.tmp_words;
}

void gml_flash_amx_args_init(const gml_tensor *dst, const gml_flash_amx_kernel *k, uint32_t *words,
                             gml_flash_amx_args *x) {
    const amx_layout l = amx_layout_of(dst);
    x->tile = k->tile;
    x->ldk = l.ldk;
    x->ldv = l.ldv;
    x->k = words;
    x->vt = words + l.k_words;
    x->qp = words + l.k_words + l.vt_words;
    x->pp = x->qp + l.qp_words;
    x->vblk = x->pp + l.pp_words;
}

void gml_flash_amx_pack_head(gml_isa isa, const gml_tensor *dst, int64_t b, int64_t g,
                             uint32_t *words) {
    const gml_tensor *k = dst->src[1], *v = dst->src[2];
    const amx_layout l = amx_layout_of(dst);
    const int64_t Tk = k->ne[2], dk = k->ne[3], dv = v->ne[3], d = GML_MAX(dk, dv);
    uint32_t *kp = words, *vt = words + l.k_words;
    float *tmp = (float *)(void *)(vt + l.vt_words + l.qp_words + l.pp_words + l.vblk_words);
    uint16_t *t16 = (uint16_t *)(void *)(tmp + d);
    for (int64_t j = 0; j < Tk; j++) { /* pairs of d: the bf16 row, then 0 up to ldk pairs */
        uint16_t *o = (uint16_t *)(void *)(kp + (size_t)j * l.ldk);
        row_bf16(isa, k, b, g, j, tmp, o);
        memset(o + dk, 0, (2 * l.ldk - (size_t)dk) * sizeof(uint16_t));
    }
    memset(kp + (size_t)Tk * l.ldk, 0, 32 * l.ldk * sizeof(uint32_t));
    memset(vt, 0, l.vt_words * sizeof(uint32_t)); /* pairs past Tk, rows past dv */
    for (int64_t j = 0; j < Tk; j++) { /* V^T: key j is half j % 2 of pair j / 2 */
        row_bf16(isa, v, b, g, j, tmp, t16);
        const unsigned sh = (unsigned)(j % 2) * 16;
        for (int64_t c = 0; c < dv; c++)
            vt[(size_t)c * l.ldv + (size_t)j / 2] |= (uint32_t)t16[c] << sh;
    }
}
