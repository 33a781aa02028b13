/* The pairs-order bf16 GEMM (gemm_bf16.h): the scalar reference
 * micro-kernel, the variant table, packing from any strides and types,
 * and the loops around the micro-kernel.
 *
 * Both operands are packed in full before any product (one phase, all
 * threads, then a barrier): A into MR-row panels and B into NR-column
 * panels over all of K, each element converted to bf16 once. Then threads
 * take tiles of C (batch, M range, N range) with gml_chunk_next and run,
 * per tile,
 *
 *   for pc in KP, step KC pairs
 *     for ic in the tile's M, step MC           A block   mc x kc (L2)
 *       for jr in the tile's N, step NR          B micro-panel   (L1)
 *         for ir in mc, step MR
 *           ukernel(A panel ir at pc, B panel jr at pc) -> C[ir.., jr..]
 *
 * except a tile whose A fits the L2 block (its rows times all of K at most
 * MC x KC pairs: few rows), which sweeps each B panel over all of K in
 * turn (for jr, for pc, for ir): its B panels lie side by side, so B
 * streams from memory once, in order, at the pace of the micro-kernel,
 * while A stays in L2. Each C element sums its K blocks in order either
 * way: the same bits.
 *
 * A B of a bf16 weight (B = W^T, W [N, K] bf16 with K even and its rows
 * 4-byte aligned) is its own pairs along its rows, so with few rows
 * (M <= 64) the product runs as C^T = W A^T (run_swapped), W read in place
 * as the micro-kernel's A operand and only A^T packed. A constant B of a
 * graph (a weight: compute.c's const_srcs) is packed whole once instead,
 * into memory the graph keeps (gml_bf16_gemm_kept); only A is packed per
 * product then, never swapped: few rows sweep the kept panels as above,
 * at every row of the micro-kernel's tile (the swapped tile spends its 32
 * columns on the rows: 20 rows use 20 of 32, and 14 rows of W in place
 * are 14 streams from memory). Any other B is converted at each product,
 * K N conversions against M N K multiply-adds. */
#include "gemm_bf16.h"
#include "ukernels.h"

#include <assert.h>
#include <math.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* ---- the reference micro-kernel: VDPBF16PS emulated ----------------------- */

static inline float flush_sub(float x) { return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x; }
static inline float bf16_lo(uint32_t pair) { return gml_bf16_to_fp32((uint16_t)(pair & 0xffffu)); }
static inline float bf16_hi(uint32_t pair) { return gml_bf16_to_fp32((uint16_t)(pair >> 16)); }

/* One lane of VDPBF16PS: the odd (high) product, then the even (low) one,
 * each an fma with subnormal inputs as 0 and a subnormal result as 0. */
static inline float dpbf16(float c, uint32_t a, uint32_t b) {
    c = flush_sub(fmaf(flush_sub(bf16_hi(a)), flush_sub(bf16_hi(b)), flush_sub(c)));
    return flush_sub(fmaf(flush_sub(bf16_lo(a)), flush_sub(bf16_lo(b)), c));
}

void gml_bf16_gemm_ukernel__scalar_14x32(size_t kp, const uint32_t *a, size_t lda, const uint32_t *b,
                                         float *c, size_t ldc, int m, int n, bool acc) {
    enum { MR = 14, NR = 32 };
    const size_t a_rs = lda ? lda : 1, a_ps = lda ? 1 : MR; /* row and pair steps */
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float s = acc ? c[(size_t)i * ldc + j] : 0.0f;
            for (size_t p = 0; p < kp; p++)
                s = dpbf16(s, a[(size_t)i * a_rs + p * a_ps], b[p * NR + (size_t)j]);
            c[(size_t)i * ldc + j] = s;
        }
}

const gml_bf16_gemm_variant gml_bf16_gemm_variants[] = {
#define GML_BF16_GEMM_ENTRY(isa, fn, mr, nr) {isa, fn, mr, nr, #fn " (pairs)"},
    GML_BF16_GEMM_UKERNELS(GML_BF16_GEMM_ENTRY)
#undef GML_BF16_GEMM_ENTRY
};
const int gml_bf16_gemm_n_variants = sizeof gml_bf16_gemm_variants / sizeof gml_bf16_gemm_variants[0];

const gml_bf16_gemm_variant *gml_bf16_gemm_pick(gml_isa isa) {
    if (isa != GML_ISA_AVX512 || !gml_cpu_has_feature(GML_CPU_AVX512_BF16)) return NULL;
    for (int i = 0; i < gml_bf16_gemm_n_variants; i++)
        if (gml_bf16_gemm_variants[i].isa == GML_ISA_AVX512) return &gml_bf16_gemm_variants[i];
    return NULL;
}

/* ---- packing ------------------------------------------------------------------ */

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* n elements of type t (f32, f16, bf16), stride bytes apart, to bf16 in
 * dst, through the conversion micro-kernels of isa (the bits of
 * gml_fp32_to_bf16; f16 widened exactly first). */
static void to_bf16(gml_isa isa, gml_type t, const char *src, int64_t stride, int64_t n,
                    uint16_t *dst) {
    if (t == GML_BF16) {
        if (stride == 2) memcpy(dst, src, (size_t)n * 2);
        else for (int64_t j = 0; j < n; j++) memcpy(dst + j, src + j * stride, 2);
        return;
    }
    gml_cvt_ukernel *from_f32 = gml_cvt_from_f32(isa, GML_BF16, NULL);
    if (t == GML_F32 && stride == sizeof(float)) {
        if (n > 0) from_f32((size_t)n, src, dst);
        return;
    }
    enum { RUN = 256 };
    float tmp[RUN];
    gml_cvt_ukernel *f16_to_f32 = gml_cvt_to_f32(isa, GML_F16, NULL);
    for (int64_t j0 = 0; j0 < n; j0 += RUN) {
        const int64_t r = GML_MIN((int64_t)RUN, n - j0);
        const char *s = src + j0 * stride;
        if (t == GML_F16 && stride == 2) {
            f16_to_f32((size_t)r, s, tmp);
        } else {
            for (int64_t j = 0; j < r; j++) {
                uint16_t h;
                if (t == GML_F16) {
                    memcpy(&h, s + j * stride, 2);
                    tmp[j] = gml_fp16_to_fp32(h);
                } else {
                    memcpy(&tmp[j], s + j * stride, 4);
                }
            }
        }
        from_f32((size_t)r, tmp, dst + j0);
    }
}

/* The packed operands of a product: sizes in uint32 pairs. */
enum {
    MAX_KC = 512,    /* the largest K block, in pairs */
    SWAP_MAX_M = 64, /* swapped up to this many rows */
};

typedef struct bf16_pack {
    int64_t kp;           /* pairs of k */
    bool swap;            /* C^T = W A^T (swapped) */
    int64_t a_batches, b_batches; /* 1 when the operand is one matrix for every batch */
    int64_t a_groups, b_panels;   /* MR-row panels per A batch, NR-column panels per B batch */
    size_t a_pairs, b_pairs;      /* pairs per A batch, per B batch */
    size_t a_bytes, b_bytes, tmp_bytes; /* tmp: one row of K bf16 per thread */
} bf16_pack;

/* Whether the product runs swapped: few rows (M <= 64) against W^T of a
 * bf16 weight whose rows are its own pairs (K even, rows and batches
 * 4-byte aligned): C^T = W A^T, W read in place. More rows reuse each
 * packed B panel better (512 x 2048 x 2048, one thread on a loaded
 * machine: 83-114 GFLOP/s packed against 48-57 swapped). */
static bool swapped(const gml_gemm_desc *d) {
    return d->M <= SWAP_MAX_M && d->b_type == GML_BF16 && d->b_rs == 2 && d->K % 2 == 0 && d->b_cs % 4 == 0 &&
           (uintptr_t)d->b % 4 == 0 && d->b_bs[0] % 4 == 0 && d->b_bs[1] % 4 == 0;
}

/* The packed operands of d, swapped or not. */
static bf16_pack pack_of(const gml_gemm_desc *d, int mr, int nr, int nth, bool swap) {
    bf16_pack k = {.kp = cdiv(d->K, 2), .swap = swap};
    const int64_t nbat = d->nb0 * d->nb1;
    k.a_batches = d->a_bs[0] == 0 && d->a_bs[1] == 0 ? 1 : nbat;
    k.b_batches = d->b_bs[0] == 0 && d->b_bs[1] == 0 ? 1 : nbat;
    /* swapped: A^T in NR-column panels (A's rows as columns), W not packed */
    k.a_groups = k.swap ? cdiv(d->M, nr) : cdiv(d->M, mr);
    k.b_panels = k.swap ? 0 : cdiv(d->N, nr);
    k.a_pairs = (size_t)(k.a_groups * (k.swap ? nr : mr) * k.kp);
    k.b_pairs = (size_t)(k.b_panels * nr * k.kp);
    k.a_bytes = gml_align_up(k.a_pairs * (size_t)k.a_batches * 4, GML_ALIGN);
    k.b_bytes = gml_align_up(k.b_pairs * (size_t)k.b_batches * 4, GML_ALIGN);
    /* two rows of K (A), or two rows of a B panel; swapped: also the last
     * rows of W packed (at most MAX_KC pairs of MR rows) */
    size_t tmp = (size_t)GML_MAX(4 * k.kp, (int64_t)(2 * nr)) * 2;
    if (k.swap) tmp = GML_MAX(tmp, (size_t)MAX_KC * (size_t)mr * 4);
    k.tmp_bytes = gml_align_up(tmp, GML_ALIGN) * (size_t)nth;
    return k;
}

/* Rows r0 and r1 of bf16 (2 kp values each) as pairs into an MR-row
 * panel: pair p of r0 at dst[p * mr], of r1 at dst[p * mr + 1]. */
static void spread_two(const uint16_t *r0, const uint16_t *r1, int64_t kp, uint32_t *dst, int mr) {
    int64_t p = 0;
#ifdef __SSE2__
    for (; p + 4 <= kp; p += 4) { /* 4 pairs of each row: 4 stores of a pair of pairs */
        const __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(r0 + 2 * p));
        const __m128i y = _mm_loadu_si128((const __m128i *)(const void *)(r1 + 2 * p));
        const __m128i lo = _mm_unpacklo_epi32(x, y), hi = _mm_unpackhi_epi32(x, y);
        _mm_storel_epi64((__m128i *)(void *)(dst + (p + 0) * mr), lo);
        _mm_storel_epi64((__m128i *)(void *)(dst + (p + 1) * mr), _mm_unpackhi_epi64(lo, lo));
        _mm_storel_epi64((__m128i *)(void *)(dst + (p + 2) * mr), hi);
        _mm_storel_epi64((__m128i *)(void *)(dst + (p + 3) * mr), _mm_unpackhi_epi64(hi, hi));
    }
#endif
    for (; p < kp; p++) {
        uint32_t x, y;
        memcpy(&x, r0 + 2 * p, 4);
        memcpy(&y, r1 + 2 * p, 4);
        dst[p * mr] = x;
        dst[p * mr + 1] = y;
    }
}

/* A's panel g of batch bi (rows g MR .., all of K), two rows at a time
 * (MR even). */
static void pack_a_group(const gml_gemm_desc *d, const bf16_pack *k, int mr, int64_t bi, int64_t g,
                         uint32_t *apk, uint16_t *row) {
    const int64_t i0 = bi / d->nb1, i1 = bi % d->nb1, rl = 2 * k->kp; /* values per row */
    uint32_t *dst = apk + (size_t)bi * k->a_pairs + (size_t)(g * mr * k->kp);
    uint16_t *r[2] = {row, row + rl};
    for (int i = 0; i < mr; i += 2) {
        for (int t = 0; t < 2; t++) {
            const int64_t m = g * mr + i + t;
            r[t][rl - 1] = 0; /* K odd: the pad */
            if (m >= d->M) {
                memset(r[t], 0, (size_t)rl * 2);
                continue;
            }
            const char *src = d->a + i0 * d->a_bs[0] + i1 * d->a_bs[1] + m * d->a_rs;
            to_bf16(d->isa, GML_F32, src, d->a_cs, d->K, r[t]);
        }
        spread_two(r[0], r[1], k->kp, dst + i, mr);
    }
}

/* B's panel q of batch bi (columns q NR .., all of K). Columns whose k
 * run along memory (W^T) convert a column at a time; others a pair of
 * rows of the panel at a time. */
static void pack_b_panel(const gml_gemm_desc *d, const bf16_pack *k, int nr, int64_t bi, int64_t q,
                         uint32_t *bpk, uint16_t *row) {
    const int64_t i0 = bi / d->nb1, i1 = bi % d->nb1;
    uint32_t *dst = bpk + (size_t)bi * k->b_pairs + (size_t)(q * nr * k->kp);
    const char *b = d->b + i0 * d->b_bs[0] + i1 * d->b_bs[1];
    const int64_t es = d->b_type == GML_F32 ? 4 : 2, n0 = q * nr;
    const int cols = (int)GML_MIN((int64_t)nr, d->N - n0);
    if (d->b_rs == es) { /* k contiguous: W^T; two columns at a time (NR even) */
        const int64_t rl = 2 * k->kp;
        uint16_t *r[2] = {row, row + rl};
        for (int j = 0; j < cols; j += 2) {
            for (int t = 0; t < 2; t++) {
                r[t][rl - 1] = 0; /* K odd: the pad */
                if (j + t < cols) to_bf16(d->isa, d->b_type, b + (n0 + j + t) * d->b_cs, d->b_rs, d->K, r[t]);
                else memset(r[t], 0, (size_t)rl * 2);
            }
            spread_two(r[0], r[1], k->kp, dst + j, nr);
        }
    } else { /* a row of the panel (cols values along n) per k */
        uint16_t *lo = row, *hi = row + nr;
        for (int64_t p = 0; p < k->kp; p++) {
            to_bf16(d->isa, d->b_type, b + 2 * p * d->b_rs + n0 * d->b_cs, d->b_cs, cols, lo);
            if (2 * p + 1 < d->K)
                to_bf16(d->isa, d->b_type, b + (2 * p + 1) * d->b_rs + n0 * d->b_cs, d->b_cs, cols, hi);
            else
                memset(hi, 0, (size_t)cols * 2);
            int j = 0;
#ifdef __SSE2__
            for (; j + 8 <= cols; j += 8) { /* 8 values of each row: 8 pairs */
                const __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(lo + j));
                const __m128i y = _mm_loadu_si128((const __m128i *)(const void *)(hi + j));
                _mm_storeu_si128((__m128i *)(void *)(dst + p * nr + j), _mm_unpacklo_epi16(x, y));
                _mm_storeu_si128((__m128i *)(void *)(dst + p * nr + j + 4), _mm_unpackhi_epi16(x, y));
            }
#endif
            for (; j < cols; j++) dst[p * nr + j] = (uint32_t)lo[j] | (uint32_t)hi[j] << 16;
        }
    }
    for (int64_t p = 0; p < k->kp && cols < nr; p++)
        for (int j = cols; j < nr; j++) dst[p * nr + j] = 0;
}

/* A^T's panel g of batch bi (swapped): A's rows g NR .. as its columns,
 * two at a time (rows past M zero). */
static void pack_at_panel(const gml_gemm_desc *d, const bf16_pack *k, int nr, int64_t bi, int64_t g,
                          uint32_t *apk, uint16_t *row) {
    const int64_t i0 = bi / d->nb1, i1 = bi % d->nb1, rl = 2 * k->kp;
    uint32_t *dst = apk + (size_t)bi * k->a_pairs + (size_t)(g * nr * k->kp);
    uint16_t *r[2] = {row, row + rl};
    for (int j = 0; j < nr; j += 2) {
        for (int t = 0; t < 2; t++) {
            const int64_t m = g * nr + j + t;
            r[t][rl - 1] = 0;
            if (m < d->M)
                to_bf16(d->isa, GML_F32, d->a + i0 * d->a_bs[0] + i1 * d->a_bs[1] + m * d->a_rs,
                        d->a_cs, d->K, r[t]);
            else
                memset(r[t], 0, (size_t)rl * 2);
        }
        spread_two(r[0], r[1], k->kp, dst + j, nr);
    }
}

/* ---- the product ---------------------------------------------------------------- */

enum {
    BF16_MIN_CHUNK_FLOPS = 4 << 20, /* smaller tiles cost more than they balance */
    GML_BF16_TILE_MAX = 16 * 32,    /* the largest MR x NR of gemm_bf16.inc */
};

/* Cache blocks in pairs and rows for a K of kp pairs: K in the fewest
 * blocks of at most MAX_KC pairs (1024 values of k), of equal size (a
 * multiple of 8), and MC rows of A over KC pairs filling half of L2.
 * The micro-kernel streams B's micro-panel (NR x KC pairs: 64 KiB at
 * MAX_KC) from L2 with its own prefetches, and each K block loads and
 * stores the C tile once more: L1-sized blocks (KC = 128 pairs with 32
 * KiB of L1) cost 5 to 12% at 1024^3 and 512 x 4096 x 4096 (one thread,
 * interleaved runs on a loaded machine, 2026-11-27). */
static void blocks(int64_t kp, int mr, int64_t *kc, int64_t *mc) {
    int64_t c[3];
    gml_gemm_caches(c);
    const int64_t nk = GML_MAX(cdiv(kp, MAX_KC), (int64_t)1);
    *kc = GML_MIN(GML_MAX(cdiv(cdiv(kp, nk), 8) * 8, (int64_t)8), (int64_t)MAX_KC);
    *mc = GML_MIN(GML_MAX(c[1] / 2 / (4 * *kc) / mr * mr, (int64_t)mr), (int64_t)(4096 / mr * mr));
}

/* Tiles of C: about 3 per thread, none under min_flops, the larger side
 * split first, M in MR and N in NR units. */
static void tiles(const gml_gemm_desc *d, int mr, int nr, int nth, double min_flops, int64_t *tm,
                  int64_t *tn) {
    const int64_t nbat = d->nb0 * d->nb1;
    int64_t want = 1;
    if (nth > 1) {
        const double flops = 2.0 * (double)d->M * (double)d->N * (double)d->K * (double)nbat;
        want = GML_MAX(GML_MIN(3 * (int64_t)nth, (int64_t)(flops / min_flops)), (int64_t)1);
    }
    const int64_t per_batch = cdiv(want, nbat);
    int64_t mt = 1, nt = 1;
    while (mt * nt < per_batch) {
        const int64_t tile_m = cdiv(d->M, mt), tile_n = cdiv(d->N, nt);
        const bool split_n = tile_n >= 4 * nr, split_m = tile_m >= 4 * mr;
        if (split_n && (tile_n >= tile_m || !split_m)) nt++;
        else if (split_m) mt++;
        else break;
    }
    *tm = cdiv(cdiv(d->M, mt), mr) * mr;
    *tn = cdiv(cdiv(d->N, nt), nr) * nr;
}

/* Swapped (C^T = W A^T, W a bf16 weight read in place): tiles of C over
 * (batch, N in MR rows of W, M in NR columns of A^T), per tile
 *
 *   for in in the tile's N, step MR       MR rows of W in place  (L2)
 *     for jm in the tile's M, step NR     an A^T panel           (L2/L3)
 *       ukernel(all of K) -> C^T tile, stored transposed
 *
 * The last rows of W of a tile, fewer than MR, are packed into wpk first
 * (the kernel reads MR rows in place), MAX_KC pairs at a time. Each C^T
 * element is C's, in the same pairs order. */
static void run_swapped(const gml_compute_params *p, const gml_gemm_desc *d, const gml_bf16_gemm_variant *v,
                        const bf16_pack *k, const uint32_t *apk, uint32_t *wpk) {
    const int mr = v->mr, nr = v->nr;
    /* all of K in one block: C^T's tiles are stored transposed, and
     * reloading them per K block cost more than the blocks saved (512 x
     * 2048 x 2048: 21 GFLOP/s with KC = 192 on a loaded core) */
    const int64_t kc = GML_MAX(k->kp, (int64_t)1);
    int64_t tm, tn;
    tiles(d, nr, mr, p->nth, BF16_MIN_CHUNK_FLOPS, &tm, &tn); /* M in NR units, N in MR units */
    const int64_t mt = cdiv(d->M, tm), nt = cdiv(d->N, tn), n_chunks = d->nb0 * d->nb1 * mt * nt;
    const size_t ldc = (size_t)d->c_rs / sizeof(float), ldw = (size_t)d->b_cs / 4;
    float tile[GML_BF16_TILE_MAX];
    assert(mr * nr <= GML_BF16_TILE_MAX);
    for (int64_t chunk; (chunk = gml_chunk_next(p)) < n_chunks;) {
        const int64_t tj = chunk % nt, ti = chunk / nt % mt, bi = chunk / (nt * mt);
        const int64_t i0 = bi / d->nb1, i1 = bi % d->nb1;
        const int64_t m0 = ti * tm, m1 = GML_MIN(m0 + tm, d->M);
        const int64_t n0 = tj * tn, n1 = GML_MIN(n0 + tn, d->N);
        const uint32_t *at = apk + (size_t)(k->a_batches > 1 ? bi : 0) * k->a_pairs;
        const uint32_t *w = (const uint32_t *)(const void *)(d->b + i0 * d->b_bs[0] + i1 * d->b_bs[1]);
        float *c = (float *)(void *)(d->c + i0 * d->c_bs[0] + i1 * d->c_bs[1]);
        for (int64_t in = n0; in < n1; in += mr) {
            const int rows = (int)GML_MIN((int64_t)mr, n1 - in);
            const uint32_t *wa = w + (size_t)in * ldw;
            /* MR rows in place: all of K at once; fewer: packed (rows past
             * N zero) MAX_KC pairs at a time, C^T reloaded between blocks */
            const int64_t step = rows == mr ? kc : MAX_KC;
            for (int64_t pc = 0; pc < k->kp || (pc == 0 && k->kp == 0); pc += step) {
                const int64_t kb = GML_MIN(step, k->kp - pc);
                const uint32_t *a = wa + pc;
                size_t lda = ldw;
                if (rows < mr) {
                    for (int64_t q = 0; q < kb; q++)
                        for (int i = 0; i < mr; i++) wpk[q * mr + i] = i < rows ? a[(size_t)i * ldw + (size_t)q] : 0;
                    a = wpk;
                    lda = 0;
                }
                for (int64_t jm = m0; jm < m1; jm += nr) {
                    const int cols = (int)GML_MIN((int64_t)nr, m1 - jm);
                    const uint32_t *bp = at + (size_t)(jm / nr * nr * k->kp + pc * nr);
                    if (pc > 0)
                        for (int i = 0; i < rows; i++)
                            for (int j = 0; j < cols; j++) tile[i * nr + j] = c[(jm + j) * (int64_t)ldc + in + i];
                    v->fn((size_t)kb, a, lda, bp, tile, (size_t)nr, rows, cols, pc > 0);
                    for (int i = 0; i < rows; i++)
                        for (int j = 0; j < cols; j++) c[(jm + j) * (int64_t)ldc + in + i] = tile[i * nr + j];
                }
            }
        }
    }
}

/* The micro-kernel down rows [i0, i1) of C in MR-row steps, against the
 * micro-panel of B at columns jr .. jr + n - 1 and pairs pc .. pc + kb - 1
 * (packed a and b of kp pairs). */
static void down_rows(const gml_bf16_gemm_variant *v, int64_t kp, const uint32_t *a, const uint32_t *b, float *c,
                      size_t ldc, int64_t i0, int64_t i1, int64_t jr, int n, int64_t pc, int64_t kb) {
    const int mr = v->mr, nr = v->nr;
    const uint32_t *bp = b + (size_t)(jr / nr * nr * kp + pc * nr);
    for (int64_t ir = i0; ir < i1; ir += mr) {
        const int m = (int)GML_MIN((int64_t)mr, i1 - ir);
        const uint32_t *ap = a + (size_t)(ir / mr * mr * kp + pc * mr);
        v->fn((size_t)kb, ap, 0, bp, c + ir * (int64_t)ldc + jr, ldc, m, n, pc > 0);
    }
}

size_t gml_bf16_gemm_work_size(const gml_gemm_desc *d, int nth) {
    size_t most = 0;
    for (int i = 0; i < gml_bf16_gemm_n_variants; i++)
        for (int swap = 0; swap < 2; swap++) { /* swapped unless B is kept packed */
            const bf16_pack k =
                pack_of(d, gml_bf16_gemm_variants[i].mr, gml_bf16_gemm_variants[i].nr, nth, swap && swapped(d));
            most = GML_MAX(most, k.a_bytes + k.b_bytes + k.tmp_bytes);
        }
    return most;
}

size_t gml_bf16_gemm_packed_size(const gml_gemm_desc *d, const gml_bf16_gemm_variant *v) {
    const bf16_pack k = pack_of(d, v->mr, v->nr, 1, false);
    return k.b_pairs * (size_t)k.b_batches * 4;
}

void gml_bf16_gemm(const gml_compute_params *p, const gml_gemm_desc *d, const gml_bf16_gemm_variant *v) {
    gml_bf16_gemm_kept(p, d, v, NULL);
}

/* B kept packed: decoding's few rows are bound by reading it, so smaller
 * tiles (2 per thread at 1 x 1024 x 1024) keep every thread streaming. */
enum { BF16_KEPT_MIN_CHUNK_FLOPS = 1 << 20 };

void gml_bf16_gemm_kept(const gml_compute_params *p, const gml_gemm_desc *d, const gml_bf16_gemm_variant *v,
                        gml_kept *kept) {
    if (d->M <= 0 || d->N <= 0 || d->nb0 <= 0 || d->nb1 <= 0) return;
    const int mr = v->mr, nr = v->nr;
    /* B packed whole in kept: what it was made from, checked at every compute */
    const uint64_t key[6] = {(uint64_t)(uintptr_t)d->b, (uint64_t)d->b_rs, (uint64_t)d->b_cs,
                             (uint64_t)d->b_bs[0], (uint64_t)d->b_bs[1],
                             (uint64_t)(uintptr_t)v ^ (uint64_t)d->b_type << 56};
    uint32_t *whole =
        kept && kept->data && kept->size >= gml_bf16_gemm_packed_size(d, v) ? kept->data : NULL;
    const bool repack = whole && !(kept->valid && memcmp(kept->key, key, sizeof key) == 0);
    const bf16_pack k = pack_of(d, mr, nr, p->nth, !whole && swapped(d));
    assert(k.a_bytes + k.b_bytes + k.tmp_bytes <= p->wsize);
    uint32_t *apk = p->wdata, *bpk = whole ? whole : (uint32_t *)(void *)((char *)p->wdata + k.a_bytes);
    uint16_t *row = (uint16_t *)(void *)((char *)p->wdata + k.a_bytes + k.b_bytes +
                                         (size_t)p->ith * (k.tmp_bytes / (size_t)p->nth));
    gml_kernel_note(p, v->name);

    /* both operands packed (B only when not kept, or kept stale): A's
     * panels, then B's, shared out by chunks */
    const int64_t na = k.a_batches * k.a_groups, nbp = !whole || repack ? k.b_batches * k.b_panels : 0;
    if (k.kp > 0)
        for (int64_t u; (u = gml_chunk_next(p)) < na + nbp;) {
            if (u < na && k.swap) pack_at_panel(d, &k, nr, u / k.a_groups, u % k.a_groups, apk, row);
            else if (u < na) pack_a_group(d, &k, mr, u / k.a_groups, u % k.a_groups, apk, row);
            else pack_b_panel(d, &k, nr, (u - na) / k.b_panels, (u - na) % k.b_panels, bpk, row);
        }
    gml_barrier(p);
    if (repack && p->ith == 0) { /* the others read kept only before the barrier */
        memcpy(kept->key, key, sizeof key);
        kept->valid = true;
    }
    if (k.swap) {
        run_swapped(p, d, v, &k, apk, (uint32_t *)(void *)row);
        return;
    }

    int64_t kc, mc, tm, tn;
    blocks(k.kp, mr, &kc, &mc);
    tiles(d, mr, nr, p->nth, whole ? BF16_KEPT_MIN_CHUNK_FLOPS : BF16_MIN_CHUNK_FLOPS, &tm, &tn);
    /* mt x nt tiles sharing out C's MR-row and NR-column panels as evenly
     * as whole panels go (tiles of tm x tn would leave the last short:
     * 512 x 4096 at 2 threads, 5 of 22 column panels and one of 18) */
    const int64_t mt = cdiv(d->M, tm), nt = cdiv(d->N, tn), n_chunks = d->nb0 * d->nb1 * mt * nt;
    const int64_t gm = cdiv(d->M, mr), gn = cdiv(d->N, nr);
    const size_t ldc = (size_t)d->c_rs / sizeof(float);
    for (int64_t chunk; (chunk = gml_chunk_next(p)) < n_chunks;) {
        const int64_t tj = chunk % nt, ti = chunk / nt % mt, bi = chunk / (nt * mt);
        const int64_t i0 = bi / d->nb1, i1 = bi % d->nb1;
        const int64_t m0 = ti * gm / mt * mr, m1 = GML_MIN((ti + 1) * gm / mt * mr, d->M);
        const int64_t n0 = tj * gn / nt * nr, n1 = GML_MIN((tj + 1) * gn / nt * nr, d->N);
        const uint32_t *a = apk + (size_t)(k.a_batches > 1 ? bi : 0) * k.a_pairs;
        const uint32_t *b = bpk + (size_t)(k.b_batches > 1 ? bi : 0) * k.b_pairs;
        float *c = (float *)(void *)(d->c + i0 * d->c_bs[0] + i1 * d->c_bs[1]);
        if ((m1 - m0) * k.kp <= mc * kc) { /* few rows: each B panel swept over all of K */
            for (int64_t jr = n0; jr < n1; jr += nr)
                for (int64_t pc = 0; pc < k.kp || (pc == 0 && k.kp == 0); pc += kc)
                    down_rows(v, k.kp, a, b, c, ldc, m0, m1, jr, (int)GML_MIN((int64_t)nr, n1 - jr), pc,
                              GML_MIN(kc, k.kp - pc));
            continue;
        }
        /* K = 0: one empty block, so that C is written (zeros) */
        for (int64_t pc = 0; pc < k.kp || (pc == 0 && k.kp == 0); pc += kc) {
            const int64_t kb = GML_MIN(kc, k.kp - pc);
            for (int64_t ic = m0; ic < m1; ic += mc) {
                const int64_t ie = GML_MIN(ic + mc, m1);
                for (int64_t jr = n0; jr < n1; jr += nr)
                    down_rows(v, k.kp, a, b, c, ldc, ic, ie, jr, (int)GML_MIN((int64_t)nr, n1 - jr), pc, kb);
            }
        }
    }
}

void gml_bf16_convert_run(gml_isa isa, gml_type t, const char *src, int64_t stride, int64_t n, uint16_t *dst) {
    to_bf16(isa, t, src, stride, n, dst);
}

void gml_bf16_gemm_tiles(const gml_gemm_desc *d, int mr, int nr, int nth, double min_flops, int64_t *tm,
                         int64_t *tn) {
    tiles(d, mr, nr, nth, min_flops, tm, tn);
}
