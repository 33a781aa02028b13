/* The portable part of the int8 GEMM (gemm_q8.h): the reference, the
 * scalar micro-kernel and quantizer, the packing of W's panels, the
 * variant table and the split into chunks. */
#include "gemm_q8.h"
#include "gemm_amx.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- CPU features ---------------------------------------------------------- */

bool gml_q8_cpu_has(int f) {
    switch (f) {
    case GML_Q8_FEAT_NONE: return true;
    case GML_Q8_FEAT_AVX512_VNNI: return gml_cpu_has_feature(GML_CPU_AVX512_VNNI);
    case GML_Q8_FEAT_AVX_VNNI: return gml_cpu_has_feature(GML_CPU_AVX_VNNI);
    case GML_Q8_FEAT_AMX_INT8: return gml_cpu_has_feature(GML_CPU_AMX_INT8);
    default: return false;
    }
}

const char *gml_q8_feature_name(int f) {
    return f == GML_Q8_FEAT_AVX512_VNNI ? gml_cpu_feature_name(GML_CPU_AVX512_VNNI)
           : f == GML_Q8_FEAT_AVX_VNNI  ? gml_cpu_feature_name(GML_CPU_AVX_VNNI)
           : f == GML_Q8_FEAT_AMX_INT8  ? gml_cpu_feature_name(GML_CPU_AMX_INT8)
                                        : "";
}

/* ---- variants ---------------------------------------------------------------- */

const gml_q8_gemm_variant gml_q8_gemm_variants[] = {
#define GML_Q8_UKERNEL(isa, feat, fn, pack, mr, nr) {isa, feat, fn, pack, mr, nr, #fn, NULL, NULL},
#define GML_Q8_QUANTIZE(isa, fn)
#include "gemm_q8.inc"
#undef GML_Q8_UKERNEL
#undef GML_Q8_QUANTIZE
};
const int gml_q8_gemm_n_variants =
    (int)(sizeof gml_q8_gemm_variants / sizeof gml_q8_gemm_variants[0]);

const gml_q8_gemm_variant *gml_q8_gemm_pick(gml_isa isa) {
    const gml_q8_gemm_variant *amx = gml_amx_q8_pick(isa); /* GGMLITE_AMX=1 only */
    if (amx) return amx;
    if (isa == GML_ISA_REFERENCE) isa = GML_ISA_SCALAR;
    const gml_q8_gemm_variant *pick = &gml_q8_gemm_variants[0];
    for (int i = 0; i < gml_q8_gemm_n_variants; i++) {
        const gml_q8_gemm_variant *v = &gml_q8_gemm_variants[i];
        if (v->isa <= isa && gml_q8_cpu_has(v->feature)) pick = v;
    }
    return pick;
}

static const struct {
    gml_isa isa;
    gml_q8_quantize_fn fn;
} QUANTIZERS[] = {
#define GML_Q8_UKERNEL(isa, feat, fn, pack, mr, nr)
#define GML_Q8_QUANTIZE(isa, fn) {isa, fn},
#include "gemm_q8.inc"
#undef GML_Q8_UKERNEL
#undef GML_Q8_QUANTIZE
};

gml_q8_quantize_fn gml_q8_quantize_pick(gml_isa isa) {
    enum { N = (int)(sizeof QUANTIZERS / sizeof QUANTIZERS[0]) };
    gml_isa isas[N];
    for (int i = 0; i < N; i++) isas[i] = QUANTIZERS[i].isa;
    return QUANTIZERS[gml_pick_variant(isa, isas, N)].fn;
}

/* ---- scalar: quantizer, packing, micro-kernel ---------------------------------- */

/* One block of 32 as gemm_q8.h defines it (gml_quantize_row_q8_0's rules,
 * q = 0 where the scale is 0): q[k] signed, *d the scale as f32. */
static void quantize_block(const float *x, int8_t q[32], float *d) {
    float amax = 0.0f;
    bool finite = true;
    for (int k = 0; k < 32; k++) {
        finite = finite && isfinite(x[k]);
        amax = fmaxf(amax, fabsf(x[k]));
    }
    memset(q, 0, 32);
    if (!finite) {
        *d = gml_fp16_to_fp32(0x7e00u);
        return;
    }
    const float df = amax / 127.0f;
    const uint16_t dh = gml_fp32_to_fp16(df);
    *d = gml_fp16_to_fp32(dh);
    if ((dh & 0x7fffu) == 0) return;
    const float id = 1.0f / df;
    for (int k = 0; k < 32; k++) q[k] = (int8_t)roundf(x[k] * id);
}

void gml_q8_quantize_ukernel__scalar(size_t nblk, const float *x, uint8_t *aq, float *ad) {
    for (size_t b = 0; b < nblk; b++) {
        int8_t q[32];
        quantize_block(x + 32 * b, q, &ad[b]);
        for (int k = 0; k < 32; k++) aq[32 * b + k] = (uint8_t)(q[k] + 128);
    }
}

void gml_q8_pack_panel(const char *w, size_t ldw, int n, int nr, size_t nblk, void *panel) {
    char *out = panel;
    for (size_t b = 0; b < nblk; b++, out += GML_Q8_PANEL_BLOCK(nr)) {
        int32_t *corr = (int32_t *)(void *)out;
        float *dw = (float *)(void *)(out + 4 * (size_t)nr);
        int8_t *q = (int8_t *)(out + 8 * (size_t)nr);
        for (int j = 0; j < nr; j++) {
            if (j >= n) {
                corr[j] = 0;
                dw[j] = 0.0f;
                for (int k = 0; k < 32; k++) q[(k / 4 * nr + j) * 4 + k % 4] = 0;
                continue;
            }
            const gml_block_q8_0 *blk = (const gml_block_q8_0 *)(const void *)(w + (size_t)j * ldw) + b;
            uint16_t h;
            memcpy(&h, &blk->d, 2);
            dw[j] = gml_fp16_to_fp32(h);
            int32_t sum = 0;
            for (int k = 0; k < 32; k++) {
                q[(k / 4 * nr + j) * 4 + k % 4] = blk->qs[k];
                sum += blk->qs[k];
            }
            corr[j] = -128 * sum;
        }
    }
}

void gml_q8_pack_ukernel__scalar_x16(const char *w, size_t ldw, int n, size_t nblk, void *panel) {
    gml_q8_pack_panel(w, ldw, n, 16, nblk, panel);
}

void gml_q8_gemm_ukernel__scalar_4x16(size_t nblk, const uint8_t *aq, size_t lda, const float *ad,
                                      size_t ldd, int m, const void *panel, int n, float *c,
                                      size_t ldc, bool acc_c, const void *ahead) {
    (void)ahead; /* nothing to fetch ahead of plain loops */
    enum { NRS = 16 };
    float acc[4][NRS] = {{0}};
    for (int i = 0; i < m && acc_c; i++)
        for (int j = 0; j < n; j++) acc[i][j] = c[i * ldc + (size_t)j];
    for (size_t b = 0; b < nblk; b++) {
        const char *blk = (const char *)panel + b * GML_Q8_PANEL_BLOCK(NRS);
        const int32_t *corr = (const int32_t *)(const void *)blk;
        const float *dw = (const float *)(const void *)(blk + 4 * NRS);
        const int8_t *q = (const int8_t *)(blk + 8 * NRS);
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                int32_t s = corr[j];
                for (int k = 0; k < 32; k++)
                    s += (int32_t)aq[i * lda + 32 * b + (size_t)k] * q[(k / 4 * NRS + j) * 4 + k % 4];
                acc[i][j] = fmaf((float)s, ad[i * ldd + b] * dw[j], acc[i][j]);
            }
    }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) c[i * ldc + (size_t)j] = acc[i][j];
}

/* ---- the product -------------------------------------------------------------- */

/* A's row r of the folded M (batch i0, i1, row m), B's matrix of that
 * batch, C's row. */
static const char *a_row(const gml_gemm_desc *d, int64_t r) {
    const int64_t m = r % d->M, bt = r / d->M, i1 = bt % d->nb1, i0 = bt / d->nb1;
    return d->a + i0 * d->a_bs[0] + i1 * d->a_bs[1] + m * d->a_rs;
}
static const char *b_mat(const gml_gemm_desc *d, int64_t bt) {
    return d->b + bt / d->nb1 * d->b_bs[0] + bt % d->nb1 * d->b_bs[1];
}
static char *c_row(const gml_gemm_desc *d, int64_t r) {
    const int64_t m = r % d->M, bt = r / d->M, i1 = bt % d->nb1, i0 = bt / d->nb1;
    return d->c + i0 * d->c_bs[0] + i1 * d->c_bs[1] + m * d->c_rs;
}

/* Row r of A as K contiguous floats: in place, or gathered into tmp. */
static const float *a_floats(const gml_gemm_desc *d, int64_t r, float *tmp) {
    const char *p = a_row(d, r);
    if (d->a_cs == (int64_t)sizeof(float)) return (const float *)(const void *)p;
    for (int64_t k = 0; k < d->K; k++) memcpy(&tmp[k], p + k * d->a_cs, sizeof(float));
    return tmp;
}

/* Blocks of K per packed piece of a panel (gml_q8_gemm) */
enum { KB = 16, Q8_AHEAD = 8 /* blocks */ };

/* Scratch: the quantized rows of A (all batches), then per thread KB
 * blocks of a panel of the widest variant (the reference: one quantized
 * row and its scales) and K floats (a gathered row). */
static size_t aq_bytes(const gml_gemm_desc *d) {
    const int64_t rows = d->nb0 * d->nb1 * d->M;
    return gml_align_up((size_t)(rows * d->K), 64) +
           gml_align_up((size_t)(rows * (d->K / 32)) * sizeof(float), 64);
}
static size_t panel_bytes(const gml_gemm_desc *d) {
    const size_t ref_row = gml_align_up((size_t)d->K, 64) +
                           gml_align_up((size_t)(d->K / 32) * sizeof(float), 64);
    return GML_MAX(KB * GML_Q8_PANEL_BLOCK(GML_Q8_NR_MAX), ref_row);
}
static size_t thread_bytes(const gml_gemm_desc *d) {
    return panel_bytes(d) + gml_align_up((size_t)d->K * sizeof(float), 64);
}

size_t gml_q8_gemm_work_size(const gml_gemm_desc *d, int nth) {
    return aq_bytes(d) + (size_t)nth * thread_bytes(d);
}

/* W's matrices and panels as packed whole (gml_q8_gemm_packed_size). */
static int64_t w_mats(const gml_gemm_desc *d) { return d->b_bs[0] || d->b_bs[1] ? d->nb0 * d->nb1 : 1; }
static int64_t w_panels(const gml_gemm_desc *d, const gml_q8_gemm_variant *v) {
    return (d->N + v->nr - 1) / v->nr;
}

size_t gml_q8_gemm_packed_size(const gml_gemm_desc *d, const gml_q8_gemm_variant *v) {
    return (size_t)(w_mats(d) * w_panels(d, v) * (d->K / 32)) * GML_Q8_PANEL_BLOCK(v->nr);
}

void gml_q8_gemm(const gml_compute_params *p, const gml_gemm_desc *d,
                 const gml_q8_gemm_variant *v) {
    gml_q8_gemm_kept(p, d, v, NULL);
}

void gml_q8_gemm_kept(const gml_compute_params *p, const gml_gemm_desc *d,
                      const gml_q8_gemm_variant *v, gml_kept *kept) {
    const int64_t rows = d->nb0 * d->nb1 * d->M, nblk = d->K / 32;
    /* W packed whole: what kept was made from, checked at every compute */
    const uint64_t key[6] = {(uint64_t)(uintptr_t)d->b, (uint64_t)d->b_rs, (uint64_t)d->b_cs,
                             (uint64_t)d->b_bs[0], (uint64_t)d->b_bs[1], (uint64_t)(uintptr_t)v};
    const int64_t panels = w_panels(d, v), wmats = w_mats(d);
    const size_t panel_size = (size_t)nblk * GML_Q8_PANEL_BLOCK(v->nr);
    char *whole = kept && kept->size >= gml_q8_gemm_packed_size(d, v) ? kept->data : NULL;
    const bool repack = whole && !(kept->valid && memcmp(kept->key, key, sizeof key) == 0);
    gml_kernel_note(p, v->name);
    uint8_t *aq = p->wdata;
    float *ad = (float *)(void *)((char *)p->wdata + gml_align_up((size_t)(rows * d->K), 64));
    char *mine = (char *)p->wdata + aq_bytes(d) + (size_t)p->ith * thread_bytes(d);
    void *panel = mine;
    float *tmp = (float *)(void *)(mine + panel_bytes(d));

    /* A's rows, quantized once: rows split among the threads */
    const gml_q8_quantize_fn quantize = gml_q8_quantize_pick(p->isa);
    int64_t r0, r1;
    gml_split(rows, p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++)
        quantize((size_t)nblk, a_floats(d, r, tmp), aq + r * d->K, ad + r * nblk);
    /* W packed whole (the first compute, or W changed): its panels shared
     * out by chunks */
    if (repack)
        for (int64_t u; (u = gml_chunk_next(p)) < wmats * panels;) {
            const int64_t j0 = u % panels * v->nr;
            v->pack(b_mat(d, u / panels) + j0 * d->b_cs, (size_t)d->b_cs,
                    (int)GML_MIN((int64_t)v->nr, d->N - j0), (size_t)nblk, whole + (size_t)u * panel_size);
        }
    gml_barrier(p);
    if (repack && p->ith == 0) { /* the others read kept only before the barrier */
        memcpy(kept->key, key, sizeof key);
        kept->valid = true;
    }

    /* chunks: (batch, NR rows of W), against every row of A of the batch,
     * K in steps of KB blocks so that the packed piece of the panel stays
     * in L1 (NR = 32: 20 KiB) while the rows of A pass by (W packed whole
     * and one tile of rows: all of K at once) */
    const int64_t n_chunks = d->nb0 * d->nb1 * panels;
    const int64_t kstep = whole && d->M <= v->mr ? GML_MAX(nblk, (int64_t)1) : KB;
    /* W packed whole against more rows than one tile: the first tile of
     * each step fetches W's blocks Q8_AHEAD on (the next step's, or the
     * next panel's: W streams from memory in order) while the other tiles
     * reuse the step's blocks from L1 (M = 20, N = K = 4096, one thread on
     * a loaded machine: 430 GOP/s without, 490-545 with; one tile, M <= 4,
     * ran slower with it: 397 -> 349 GOP/s at M = 4) */
    const size_t ahead = whole && d->M > v->mr ? Q8_AHEAD * GML_Q8_PANEL_BLOCK(v->nr) : 0;
    if (v->begin) v->begin();
    for (int64_t ch; (ch = gml_chunk_next(p)) < n_chunks;) {
        const int64_t bt = ch / panels, j0 = ch % panels * v->nr;
        const int n = (int)GML_MIN((int64_t)v->nr, d->N - j0);
        const char *wp = whole ? whole + (size_t)((wmats > 1 ? bt : 0) * panels + ch % panels) * panel_size : NULL;
        for (int64_t kb = 0; kb < nblk; kb += kstep) {
            const int64_t nb = GML_MIN(kstep, nblk - kb);
            const void *pan = wp ? (const void *)(wp + (size_t)kb * GML_Q8_PANEL_BLOCK(v->nr)) : panel;
            if (!wp)
                v->pack(b_mat(d, bt) + j0 * d->b_cs + kb * d->b_rs, (size_t)d->b_cs, n, (size_t)nb,
                        panel);
            for (int64_t m0 = 0; m0 < d->M; m0 += v->mr) {
                const int64_t r = bt * d->M + m0;
                const int m = (int)GML_MIN((int64_t)v->mr, d->M - m0);
                float *c = (float *)(void *)(c_row(d, r) + j0 * (int64_t)sizeof(float));
                v->fn((size_t)nb, aq + r * d->K + 32 * kb, (size_t)d->K, ad + r * nblk + kb,
                      (size_t)nblk, m, pan, n, c, (size_t)(d->c_rs / (int64_t)sizeof(float)),
                      kb > 0, ahead && m0 == 0 ? (const char *)pan + ahead : NULL);
            }
        }
    }
    if (v->end) v->end();
}

void gml_q8_gemm_ref(const gml_compute_params *p, const gml_gemm_desc *d) {
    const int64_t rows = d->nb0 * d->nb1 * d->M, nblk = d->K / 32;
    char *mine = (char *)p->wdata + aq_bytes(d) + (size_t)p->ith * thread_bytes(d);
    int8_t *qa = (int8_t *)mine; /* K values */
    float *da = (float *)(void *)(mine + gml_align_up((size_t)d->K, 64)); /* nblk scales */
    float *tmp = (float *)(void *)(mine + panel_bytes(d));
    int64_t r0, r1;
    gml_split(rows, p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const float *x = a_floats(d, r, tmp);
        for (int64_t b = 0; b < nblk; b++) quantize_block(x + 32 * b, qa + 32 * b, &da[b]);
        const char *bm = b_mat(d, r / d->M);
        float *out = (float *)(void *)c_row(d, r);
        for (int64_t n = 0; n < d->N; n++) {
            const gml_block_q8_0 *w = (const gml_block_q8_0 *)(const void *)(bm + n * d->b_cs);
            float acc = 0.0f;
            for (int64_t b = 0; b < nblk; b++) {
                int32_t s = 0;
                for (int k = 0; k < 32; k++) s += (int32_t)qa[32 * b + k] * w[b].qs[k];
                uint16_t h;
                memcpy(&h, &w[b].d, 2);
                acc = fmaf((float)s, da[b] * gml_fp16_to_fp32(h), acc);
            }
            out[n] = acc;
        }
    }
}
