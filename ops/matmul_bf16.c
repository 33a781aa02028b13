/* matmul with compute bf16 (ops/gemm_bf16.h): the reference loop, and the
 * fast kernel: the pairs order of the AVX512-BF16 GEMM (ops/gemm_bf16.c)
 * where the plan's ISA is AVX-512 and the CPU has AVX512_BF16, the chain
 * order through the f32 GEMM on rounded copies elsewhere; with GGMLITE_AMX=1
 * on a CPU with AMX-BF16, the AMX order (ops/gemm_amx.h, not verified on
 * an AMX CPU) in place of the pairs order. */
#include "gemm_amx.h"
#include "gemm_bf16.h"
#include "ukernels.h"

#include <math.h>

/* Element i of a run of type t (f32, f16, bf16) as f32, exactly. */
static inline float elem(gml_type t, const char *p) {
    uint16_t h;
    switch (t) {
    case GML_F16: memcpy(&h, p, 2); return gml_fp16_to_fp32(h);
    case GML_BF16: memcpy(&h, p, 2); return gml_bf16_to_fp32(h);
    default: return *(const float *)(const void *)p;
    }
}

/* out[.., m, n] = the chain over k of bf16(a[.., m, k]) * bf16(b[.., k, n]):
 * acc = fmaf(a_k, b_k, acc) from +0, one output element at a time. */
void gml_bf16_matmul__ref(const gml_compute_params *p, gml_tensor *dst) {
    const gml_tensor *a = dst->src[0], *b = dst->src[1];
    const int64_t N = dst->ne[3], K = a->ne[3];
    int64_t r0, r1;
    gml_split(gml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i0, i1, m;
        gml_row_index(dst, r, &i0, &i1, &m);
        const char *arow = gml_ptr(a, i0 % a->ne[0], i1 % a->ne[1], m, 0);
        const char *bmat = gml_ptr(b, i0 % b->ne[0], i1 % b->ne[1], 0, 0);
        float *out = (float *)gml_ptr(dst, i0, i1, m, 0);
        for (int64_t n = 0; n < N; n++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++) {
                const float x = gml_round_bf16(elem(GML_F32, arow + k * (int64_t)a->nb[3]));
                const float y = gml_round_bf16(
                    elem(b->type, bmat + k * (int64_t)b->nb[2] + n * (int64_t)b->nb[3]));
                acc = fmaf(x, y, acc);
            }
            out[n] = acc;
        }
    }
}

/* ---- the chain order on any ISA: the f32 GEMM on rounded copies --------
 * a and b are rounded into contiguous f32 copies at the start of the
 * scratch (the threads split the rows, then meet at a barrier), which the
 * f32 GEMM then multiplies: its fma chains in k order (gemm.h,
 * "Arithmetic") on exact products are the chain order, bitwise, on every
 * path, tile and thread count. b's copy keeps b's orientation: a b whose
 * elements are closer along k than along n (W^T of an nn.Linear weight)
 * is copied as W [.., N, K], so the GEMM takes its few-rows paths on it. */

typedef struct bf16_copies {
    gml_tensor a, b;      /* the copies' headers (data set when placed) */
    int64_t a_rows, b_rows; /* rows to round: a's along k; b's along k (wt) or n */
    bool b_wt;
    size_t a_bytes, b_bytes; /* each rounded up to GML_ALIGN */
} bf16_copies;

static bf16_copies copies_of(const gml_tensor *dst, void *wdata) {
    const gml_tensor *a = dst->src[0], *b = dst->src[1];
    bf16_copies c = {.a = *a, .b = *b};
    const int64_t M = a->ne[2], K = a->ne[3], N = b->ne[3];
    c.b_wt = b->nb[2] < b->nb[3];
    c.a.nb[3] = sizeof(float);
    c.a.nb[2] = (size_t)K * sizeof(float);
    c.a.nb[1] = c.a.nb[2] * (size_t)M;
    c.a.nb[0] = c.a.nb[1] * (size_t)a->ne[1];
    c.b.type = GML_F32;
    const size_t inner = c.b_wt ? (size_t)K : (size_t)N; /* floats per row of b's copy */
    c.b.nb[c.b_wt ? 2 : 3] = sizeof(float);
    c.b.nb[c.b_wt ? 3 : 2] = inner * sizeof(float);
    c.b.nb[1] = inner * sizeof(float) * (size_t)(c.b_wt ? N : K);
    c.b.nb[0] = c.b.nb[1] * (size_t)b->ne[1];
    c.a_rows = a->ne[0] * a->ne[1] * M;
    c.b_rows = b->ne[0] * b->ne[1] * (c.b_wt ? N : K);
    c.a_bytes = gml_align_up(c.a.nb[0] * (size_t)a->ne[0], GML_ALIGN);
    c.b_bytes = gml_align_up(c.b.nb[0] * (size_t)b->ne[0], GML_ALIGN);
    c.a.data = wdata;
    c.b.data = wdata ? (char *)wdata + c.a_bytes : NULL;
    return c;
}

/* n elements of type t, stride bytes apart, rounded to bf16 into dst as
 * f32, through the conversion micro-kernels of isa. */
static void round_run(gml_isa isa, gml_type t, const char *src, int64_t stride, int64_t n,
                      float *dst) {
    gml_cvt_ukernel *to_bf16 = gml_cvt_from_f32(isa, GML_BF16, NULL);
    gml_cvt_ukernel *to_f32 = gml_cvt_to_f32(isa, GML_BF16, NULL);
    enum { RUN = 256 };
    uint16_t tmp[RUN];
    for (int64_t j0 = 0; j0 < n; j0 += RUN) {
        const size_t m = (size_t)GML_MIN((int64_t)RUN, n - j0);
        const char *s = src + j0 * stride;
        if (t == GML_BF16 && stride == 2) { /* bf16 already: widened exactly */
            to_f32(m, s, dst + j0);
            continue;
        }
        if (t == GML_F32 && stride == sizeof(float)) {
            to_bf16(m, s, tmp);
        } else {
            for (size_t j = 0; j < m; j++) dst[j0 + (int64_t)j] = elem(t, s + (int64_t)j * stride);
            to_bf16(m, dst + j0, tmp);
        }
        to_f32(m, tmp, dst + j0);
    }
}

/* Rows [r0, r1) of the a rows then the b rows, rounded into the copies. */
static void round_rows(gml_isa isa, const gml_tensor *dst, const bf16_copies *c, int64_t r0,
                       int64_t r1) {
    const gml_tensor *a = dst->src[0], *b = dst->src[1];
    const int64_t M = a->ne[2], K = a->ne[3], N = b->ne[3];
    for (int64_t r = r0; r < r1; r++) {
        if (r < c->a_rows) {
            const int64_t m = r % M, i1 = r / M % a->ne[1], i0 = r / M / a->ne[1];
            round_run(isa, GML_F32, gml_ptr(a, i0, i1, m, 0), (int64_t)a->nb[3], K,
                      (float *)c->a.data + r * K);
            continue;
        }
        const int64_t q = r - c->a_rows, inner = c->b_wt ? K : N, outer = c->b_wt ? N : K;
        const int64_t j = q % outer, i1 = q / outer % b->ne[1], i0 = q / outer / b->ne[1];
        const char *src = c->b_wt ? gml_ptr(b, i0, i1, 0, j) : gml_ptr(b, i0, i1, j, 0);
        round_run(isa, b->type, src, (int64_t)b->nb[c->b_wt ? 2 : 3], inner,
                  (float *)c->b.data + q * inner);
    }
}

/* kept (c.b_bytes, or NULL): b's rounded copy made once there, checked
 * against b's pointer, strides and type at each compute. */
static void chain_matmul(const gml_compute_params *p, gml_tensor *dst, gml_kept *kept) {
    bf16_copies c = copies_of(dst, p->wdata);
    const gml_tensor *b = dst->src[1];
    const uint64_t key[6] = {(uint64_t)(uintptr_t)b->data, b->nb[0], b->nb[1], b->nb[2], b->nb[3],
                             (uint64_t)b->type};
    const bool keep = kept && kept->size >= c.b_bytes;
    const bool fresh = keep && kept->valid && memcmp(kept->key, key, sizeof key) == 0;
    if (keep) c.b.data = kept->data;
    int64_t r0, r1;
    gml_split(c.a_rows + (fresh ? 0 : c.b_rows), p->ith, p->nth, &r0, &r1);
    round_rows(p->isa, dst, &c, r0, r1);
    gml_barrier(p);
    if (keep && !fresh && p->ith == 0) { /* the others read kept only before the barrier */
        memcpy(kept->key, key, sizeof key);
        kept->valid = true;
    }
    gml_compute_params q = *p;
    q.wdata = (char *)p->wdata + c.a_bytes + c.b_bytes;
    q.wsize = p->wsize - c.a_bytes - c.b_bytes;
    const gml_gemm_desc d = gml_matmul_desc(dst, &c.a, &c.b, p->isa);
    gml_gemm(&q, &d, gml_gemm_pick(p->isa));
    gml_kernel_note(p, "gml_bf16_gemm__chain (rounded copies, f32 GEMM)");
}

static size_t chain_work_size(const gml_tensor *dst, int nth) {
    const bf16_copies c = copies_of(dst, NULL);
    const gml_gemm_desc d = gml_matmul_desc(dst, &c.a, &c.b, GML_ISA_REFERENCE);
    return c.a_bytes + c.b_bytes + gml_gemm_work_size(&d, nth);
}

void gml_bf16_matmul(const gml_compute_params *p, gml_tensor *dst) {
    const gml_bf16_gemm_variant *v = gml_bf16_gemm_pick(p->isa);
    gml_kept *kept = p->const_srcs & 2 ? p->kept : NULL;
    const gml_amx_bf16_kernel *amx = gml_amx_bf16_pick(p->isa); /* GGMLITE_AMX=1 only */
    if (amx) {
        const gml_gemm_desc d = gml_matmul_desc(dst, dst->src[0], dst->src[1], p->isa);
        gml_amx_bf16_gemm(p, &d, amx, kept);
        return;
    }
    if (!v) {
        chain_matmul(p, dst, kept);
        return;
    }
    const gml_gemm_desc d = gml_matmul_desc(dst, dst->src[0], dst->src[1], p->isa);
    gml_bf16_gemm_kept(p, &d, v, kept);
}

size_t gml_bf16_matmul_kept_size(const gml_tensor *dst, gml_isa isa) {
    if (gml_amx_bf16_pick(isa)) {
        const gml_gemm_desc d = gml_matmul_desc(dst, dst->src[0], dst->src[1], isa);
        return gml_amx_bf16_packed_size(&d);
    }
    const gml_bf16_gemm_variant *v = gml_bf16_gemm_pick(isa);
    if (!v) return copies_of(dst, NULL).b_bytes;
    const gml_gemm_desc d = gml_matmul_desc(dst, dst->src[0], dst->src[1], isa);
    return gml_bf16_gemm_packed_size(&d, v);
}

/* Either order's scratch (the plan does not know which ISA will run), and
 * the AMX order's where it may run (GGMLITE_AMX=1). */
size_t gml_bf16_matmul_work_size(const gml_tensor *dst, int nth) {
    const gml_gemm_desc d = gml_matmul_desc(dst, dst->src[0], dst->src[1], GML_ISA_REFERENCE);
    const size_t amx = gml_amx_bf16_pick(GML_ISA_AVX512) ? gml_amx_bf16_work_size(&d, nth) : 0;
    return GML_MAX(GML_MAX(chain_work_size(dst, nth), gml_bf16_gemm_work_size(&d, nth)), amx);
}
