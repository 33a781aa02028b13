/* flash_attn's decoding path and flash_attn_partial's forward kernel: the
 * rows of one (b, g) together through the decode micro-kernels, keys in
 * chunks merged in order. */
#include "flash_attn.h"

#include <string.h>

/* ---- decoding path -----------------------------------------------------------
 * When a kv head has at most GML_FLASH_DEC_MAX_ROWS query rows (r = H / G
 * heads times Tq: decoding) and K and V have contiguous rows of elements,
 * the decode micro-kernels take the rows of one (b, g) together, lanes over
 * d. The keys are cut into chunks whose length depends on the shapes only
 * (B G, Tk), never on the thread count: a task is (b, g, chunk) and writes
 * its partial (o, m, l) to the shared scratch; after a barrier a task per
 * (b, g) merges its chunks' partials in chunk order (gml_flash_partial_merge)
 * and finishes them (gml_flash_partial_finish, the sink joining there once).
 * So the result is bitwise the same at every thread count, and at B = 1 the
 * keys of a few kv heads still feed every thread. */
#define DEC_MIN_CHUNK 256 /* keys: below this a chunk's partial costs more than it saves */
#define DEC_TASKS 16      /* chunks enough for B G = 1 .. 16 to feed a few threads */

static bool dec_contig(const gml_tensor *t) {
    return t->ne[3] == 1 || t->nb[3] == gml_type_size(t->type);
}

/* The work of dst: *groups of up to GML_FLASH_DEC_MAX_ROWS rows per (b, g)
 * (1 for flash_attn, whose decode path has at most that many), the keys in
 * *n chunks of *len keys (the last shorter), from the shapes only. */
static void dec_layout(const gml_tensor *dst, int64_t *groups, int64_t *n, int64_t *len) {
    const int64_t rows = dst->ne[1] / dst->src[1]->ne[1] * dst->ne[2], tk = dst->src[1]->ne[2];
    *groups = (rows + GML_FLASH_DEC_MAX_ROWS - 1) / GML_FLASH_DEC_MAX_ROWS;
    const int64_t tasks = dst->ne[0] * dst->src[1]->ne[1] * *groups;
    int64_t c = (DEC_TASKS + tasks - 1) / tasks;
    c = GML_MAX(1, GML_MIN(c, tk / DEC_MIN_CHUNK));
    int64_t l = (tk + c - 1) / c;
    l = GML_MAX(1, (l + GML_FLASH_DEC_KEY_BLOCK - 1) / GML_FLASH_DEC_KEY_BLOCK) *
        GML_FLASH_DEC_KEY_BLOCK;
    *len = l;
    *n = GML_MAX(1, (tk + l - 1) / l);
}

static size_t dec_ldq(const gml_tensor *dst) { return gml_align_up((size_t)dst->src[0]->ne[3], 16); }
static size_t dec_ldo(const gml_tensor *dst) { return gml_align_up((size_t)dst->src[2]->ne[3], 16); }
/* Floats of one partial record: GML_FLASH_DEC_MAX_ROWS rows of o, then m, l. */
static size_t dec_record_floats(const gml_tensor *dst) {
    return gml_align_up(GML_FLASH_DEC_MAX_ROWS * (dec_ldo(dst) + 2), GML_ALIGN / sizeof(float));
}
/* K or V whose elements are strided (a permuted view) is packed, a chunk
 * of rows at a time, as f32 rows (the same floats, converted when typed)
 * into the thread's scratch: the kernel then gives bitwise what contiguous
 * rows of those values give. Floats of that buffer (0: read in place). */
static size_t dec_pack_floats(const gml_tensor *dst, const gml_tensor *t) {
    if (dec_contig(t)) return 0;
    int64_t groups, n, len;
    dec_layout(dst, &groups, &n, &len);
    return gml_align_up((size_t)(len * t->ne[3]), GML_ALIGN / sizeof(float));
}
/* Per thread: q, the micro-kernel's scratch, the lane tables, one record,
 * the packed K and V chunks. */
#define DEC_LANE_BYTES (2 * sizeof(int32_t) + 3 * sizeof(float) + sizeof(void *))
size_t gml_flash_dec_thread_bytes(const gml_tensor *dst) {
    return gml_align_up(GML_FLASH_DEC_MAX_ROWS * dec_ldq(dst) * sizeof(float), GML_ALIGN) +
           gml_align_up(GML_FLASH_DEC_WORK_FLOATS * sizeof(float), GML_ALIGN) +
           gml_align_up(GML_FLASH_DEC_MAX_ROWS * DEC_LANE_BYTES, GML_ALIGN) +
           (dec_record_floats(dst) + dec_pack_floats(dst, dst->src[1]) +
            dec_pack_floats(dst, dst->src[2])) * sizeof(float);
}
/* Shared: one record per task when the keys are split. */
size_t gml_flash_dec_shared_bytes(const gml_tensor *dst) {
    int64_t groups, n, len;
    dec_layout(dst, &groups, &n, &len);
    return n > 1 ? (size_t)(dst->ne[0] * dst->src[1]->ne[1] * groups * n) * dec_record_floats(dst) *
                       sizeof(float)
                 : 0;
}

/* The picked variant, and its note for the path taken: path 0 f32 read in
 * place, 1 rows packed (strided elements), 2 f16/bf16 converted in
 * registers, 3 f16/bf16 converted while packed; + 4 when the keys are split
 * in chunks. */
#define DEC_NAMES(isa, fn, lanes)                                                           \
    {#fn, #fn " (K/V rows packed)", #fn " (f16/bf16 K/V converted in registers)",           \
     #fn " (f16/bf16 K/V converted, rows packed)", #fn " (keys in chunks, merged in order)", \
     #fn " (K/V rows packed; keys in chunks, merged in order)",                             \
     #fn " (f16/bf16 K/V converted in registers; keys in chunks, merged in order)",         \
     #fn " (f16/bf16 K/V converted, rows packed; keys in chunks, merged in order)"},
static gml_f32_flash_dec_ukernel *dec_pick(gml_isa isa, int path, const char **name) {
    static const char *const names[][8] = {GML_F32_FLASH_DEC_UKERNELS(DEC_NAMES)};
    static const gml_isa isas[] = {GML_F32_FLASH_DEC_UKERNELS(GML_UKERNEL_ISA)};
    static gml_f32_flash_dec_ukernel *const fns[] = {GML_F32_FLASH_DEC_UKERNELS(GML_UKERNEL_FN)};
    const int v = gml_pick_variant(isa, isas, (int)(sizeof isas / sizeof *isas));
    *name = names[v][path];
    return fns[v];
}
#undef DEC_NAMES

/* The keys [*lo, *hi) of dst's K that query i of batch b may see, and its
 * position i' relative to dst's first key. flash_attn: gml_attn_key_range.
 * flash_attn_partial: key jj of its K is key key0 + jj of the whole; causal
 * and the window by i' (positions, or i for TOP_LEFT: the builder refuses
 * the rest), valid lengths absolute. */
void gml_flash_dec_key_range(const gml_tensor *dst, const gml_attn_params *par, int64_t key0,
                             int64_t b, int64_t i, int64_t *lo, int64_t *hi, float *qpos) {
    const int64_t Tq = dst->src[0]->ne[2], Tk = dst->src[1]->ne[2];
    const gml_tensor *lens = dst->src[SRC_LENS], *pos = dst->src[SRC_POS];
    const int64_t ip = gml_attn_qpos(par, pos, b, i, Tq, Tk);
    *qpos = (float)(ip - key0);
    if (!is_partial(dst)) {
        key_range(dst, par, b, i, lo, hi);
        return;
    }
    int64_t l = INT64_MIN / 4, h = INT64_MAX / 4; /* absolute */
    if (par->causal != GML_CAUSAL_NONE || par->window > 0) {
        h = ip + 1;
        if (par->window > 0) l = ip + 1 - par->window;
    }
    if (lens) h = GML_MIN(h, (int64_t)gml_attn_i32_at(lens, b, i));
    *hi = GML_MAX(0, GML_MIN(Tk, h - key0));
    *lo = GML_MIN(*hi, GML_MAX(0, l - key0));
}

void gml_flash_dec_forward(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *mask = dst->src[3];
    const gml_attn_params par = params_of(dst);
    const bool partial = is_partial(dst);
    const int64_t key0 = key0_of(dst);
    const int64_t B = dst->ne[0], H = dst->ne[1], Tq = dst->ne[2], dv = v->ne[3], Tk = k->ne[2];
    const int64_t G = k->ne[1], dk = q->ne[3], r = H / G, rows = r * Tq;
    int64_t groups, nchunks, chunk;
    dec_layout(dst, &groups, &nchunks, &chunk);
    const bool pk = !dec_contig(k), pv = !dec_contig(v), typed = kv_typed(dst);
    const char *name;
    gml_f32_flash_dec_ukernel *fn =
        dec_pick(p->isa, (typed ? 2 : 0) + (pk || pv ? 1 : 0) + (nchunks > 1 ? 4 : 0), &name);
    gml_kernel_note(p, name);

    const size_t ldq = dec_ldq(dst), ldo = dec_ldo(dst), rec = dec_record_floats(dst);
    char *w = (char *)p->wdata + (size_t)p->ith * gml_flash_dec_thread_bytes(dst);
    float *qbuf = (float *)(void *)w;
    w += gml_align_up(GML_FLASH_DEC_MAX_ROWS * ldq * sizeof(float), GML_ALIGN);
    float *work = (float *)(void *)w;
    w += gml_align_up(GML_FLASH_DEC_WORK_FLOATS * sizeof(float), GML_ALIGN);
    const float **mask_rows = (const float **)(void *)w;
    int32_t *n_keys = (int32_t *)(void *)(mask_rows + GML_FLASH_DEC_MAX_ROWS);
    int32_t *first_key = n_keys + GML_FLASH_DEC_MAX_ROWS;
    float *slope = (float *)(void *)(first_key + GML_FLASH_DEC_MAX_ROWS);
    float *qpos = slope + GML_FLASH_DEC_MAX_ROWS, *sink = qpos + GML_FLASH_DEC_MAX_ROWS;
    w += gml_align_up(GML_FLASH_DEC_MAX_ROWS * DEC_LANE_BYTES, GML_ALIGN);
    float *own = (float *)(void *)w; /* this thread's record */
    float *kpack = own + rec, *vpack = kpack + dec_pack_floats(dst, k);
    float *shared = (float *)(void *)((char *)p->wdata + (size_t)p->nth * gml_flash_dec_thread_bytes(dst));

    gml_flash_dec_args a = {.dk = (size_t)dk, .dv = (size_t)dv, .q = qbuf, .ldq = ldq,
                            .k_row = pk ? (size_t)dk * 4 : k->nb[2],
                            .v_row = pv ? (size_t)dv * 4 : v->nb[2],
                            .k_type = pk ? GML_F32 : k->type, .v_type = pv ? GML_F32 : v->type,
                            .n_keys = n_keys, .first_key = first_key,
                            .mask = mask ? mask_rows : NULL,
                            .mask_stride = mask && mask->ne[3] > 1 ? mask->nb[3] / 4 : 0,
                            .softcap = par.softcap, .slope = par.alibi > 0 ? slope : NULL,
                            .qpos = qpos, .ldo = ldo, .work = work};
    /* Row l of group grp of (b, g): row grp * 8 + l of its r Tq rows, query
     * position i = row / r, head g r + row % r. */
#define ROW_I(grp, l) (((grp) * GML_FLASH_DEC_MAX_ROWS + (l)) / r)
#define ROW_H(grp, l) (g * r + ((grp) * GML_FLASH_DEC_MAX_ROWS + (l)) % r)
#define NQ(grp) GML_MIN((int64_t)GML_FLASH_DEC_MAX_ROWS, rows - (grp) * GML_FLASH_DEC_MAX_ROWS)
    /* The end of a row: finished (flash_attn), or the partial written out. */
#define ROW_OUT(b_, grp, l, o_, m_, l_, sinkp)                                                     \
    do {                                                                                          \
        float *out_ = (float *)(void *)gml_ptr(dst, b_, ROW_H(grp, l), ROW_I(grp, l), 0);         \
        const int64_t so_ = (int64_t)(dst->nb[3] / 4);                                            \
        if (partial) {                                                                            \
            for (int64_t c_ = 0; c_ < dv; c_++) out_[c_ * so_] = (o_)[c_];                        \
            out_[dv * so_] = (m_);                                                                \
            out_[(dv + 1) * so_] = (l_);                                                          \
        } else {                                                                                  \
            gml_flash_partial_finish((size_t)dv, o_, 1, m_, l_, sinkp, out_, (size_t)so_);        \
        }                                                                                         \
    } while (0)
    int64_t lanes_of = -1; /* the (b, g, group) the lane tables hold */
    for (int64_t task; (task = gml_chunk_next(p)) < B * G * groups * nchunks;) {
        const int64_t unit = task / nchunks, c = task % nchunks, grp = unit % groups;
        const int64_t bg = unit / groups, b = bg / G, g = bg % G;
        a.nq = (size_t)NQ(grp);
        if (lanes_of != unit) {
            for (int64_t l = 0; l < (int64_t)a.nq; l++) {
                const int64_t i = ROW_I(grp, l), h = ROW_H(grp, l);
                const char *qi = gml_ptr(q, b, h, i, 0);
                for (size_t d = 0; d < ldq; d++)
                    qbuf[(size_t)l * ldq + d] =
                        d < (size_t)dk ? *(const float *)(const void *)(qi + (int64_t)d * (int64_t)q->nb[3]) *
                                             par.scale
                                       : 0.0f;
                int64_t lo, hi;
                gml_flash_dec_key_range(dst, &par, key0, b, i, &lo, &hi, &qpos[l]);
                n_keys[l] = (int32_t)hi;
                first_key[l] = (int32_t)lo;
                slope[l] = par.alibi > 0 ? gml_alibi_slope(par.alibi, h, H) : 0.0f;
                sink[l] = dst->src[SRC_SINKS] ? sink_of(dst, h) : 0.0f;
                if (mask)
                    mask_rows[l] = (const float *)(const void *)gml_ptr(
                        mask, b % mask->ne[0], h % mask->ne[1], i % mask->ne[2], 0);
            }
            lanes_of = unit;
        }
        float *recp = nchunks > 1 ? shared + (size_t)task * rec : own;
        a.j0 = (size_t)(c * chunk);
        a.j1 = (size_t)GML_MIN(Tk, (c + 1) * chunk);
        if (pk) gml_flash_kv_load_rows(gml_ptr(k, b, g, 0, 0), k->nb[2], k->nb[3], k->type, NULL, a.j0,
                             a.j1 - a.j0, (size_t)dk, kpack);
        if (pv) gml_flash_kv_load_rows(gml_ptr(v, b, g, 0, 0), v->nb[2], v->nb[3], v->type, NULL, a.j0,
                             a.j1 - a.j0, (size_t)dv, vpack);
        a.k = pk ? (const char *)kpack : gml_ptr(k, b, g, (int64_t)a.j0, 0);
        a.v = pv ? (const char *)vpack : gml_ptr(v, b, g, (int64_t)a.j0, 0);
        a.o = recp;
        a.m = recp + GML_FLASH_DEC_MAX_ROWS * ldo;
        a.l = a.m + GML_FLASH_DEC_MAX_ROWS;
        fn(&a);
        if (nchunks > 1) continue;
        for (int64_t l = 0; l < (int64_t)a.nq; l++)
            ROW_OUT(b, grp, l, a.o + (size_t)l * ldo, a.m[l], a.l[l],
                    dst->src[SRC_SINKS] ? &sink[l] : NULL);
    }
    if (nchunks == 1) return;
    gml_barrier(p); /* every partial written; the tasks count again from 0 */
    for (int64_t unit; (unit = gml_chunk_next(p)) < B * G * groups;) {
        const int64_t grp = unit % groups, bg = unit / groups, b = bg / G, g = bg % G;
        float *r0 = shared + (size_t)(unit * nchunks) * rec; /* chunk 0's record: the sum */
        float *m0 = r0 + GML_FLASH_DEC_MAX_ROWS * ldo, *l0 = m0 + GML_FLASH_DEC_MAX_ROWS;
        for (int64_t c = 1; c < nchunks; c++) {
            const float *rc = shared + (size_t)(unit * nchunks + c) * rec;
            const float *mc = rc + GML_FLASH_DEC_MAX_ROWS * ldo, *lc = mc + GML_FLASH_DEC_MAX_ROWS;
            for (int64_t l = 0; l < NQ(grp); l++)
                gml_flash_partial_merge((size_t)dv, r0 + (size_t)l * ldo, 1, &m0[l], &l0[l],
                                        rc + (size_t)l * ldo, 1, mc[l], lc[l]);
        }
        for (int64_t l = 0; l < NQ(grp); l++) {
            const float sk = dst->src[SRC_SINKS] ? sink_of(dst, ROW_H(grp, l)) : 0.0f;
            ROW_OUT(b, grp, l, r0 + (size_t)l * ldo, m0[l], l0[l], dst->src[SRC_SINKS] ? &sk : NULL);
        }
    }
#undef ROW_I
#undef ROW_H
#undef NQ
#undef ROW_OUT
}
