/* The AMX bf16 GEMM (gemm_amx.h): when it runs (and when the AMX int8
 * variant of gemm_q8.h does), packing into the tile layouts, and the loops
 * around the tile kernel. NOT VERIFIED ON AN AMX
 * CPU; tested against an emulation of the tiles (tests/test_amx_bf16.c).
 *
 * Both operands are packed before any product (one phase, all threads,
 * then a barrier), B only when the graph does not keep it packed already.
 * Then each thread loads its tile configuration and takes tiles of C
 * (batch, M range, N range) with gml_chunk_next, per tile
 *
 *   for pc in KQ, step KC steps                    (a K block)
 *     for ic in the tile's M, step MC              A block  mc x kc
 *       for jr in the tile's N, step 32            B panel step range
 *         for ir in mc, step 32
 *           tile kernel(A group ir at pc, B panel jr at pc) -> C[ir.., jr..]
 *
 * and releases its tiles. A group of at most 16 rows (decoding's few rows,
 * M's tail) takes the 16 x 32 kernel: half the tile work of 32 x 32, the
 * same order. A block of C that crosses M's or N's end is computed in the
 * thread's edge tile and its part inside C copied. */
#include "gemm_amx.h"
#include "gemm_bf16.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    KC = 16,  /* steps of 16 pairs per K block: a B panel's block is 32 KiB (L1) */
    MC = 256, /* rows per A block: 256 x 256 pairs, 256 KiB (L2) */
    AMX_MIN_CHUNK_FLOPS = 8 << 20,
};

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* ---- when it runs --------------------------------------------------------- */

/* GGMLITE_AMX=1, read once: 1 no, 2 yes. */
static _Atomic int amx_asked;

static bool opted_in(void) {
    int k = atomic_load_explicit(&amx_asked, memory_order_relaxed);
    if (!k) {
        const char *env = getenv("GGMLITE_AMX");
        atomic_store_explicit(&amx_asked, k = env && strcmp(env, "1") == 0 ? 2 : 1, memory_order_relaxed);
    }
    return k == 2;
}

/* What AMX would run for: bf16 matmuls, int8 matmuls, bf16 flash
 * attention; what then runs without it, as the refusal says. */
enum { KIND_BF16, KIND_INT8, KIND_FLASH, KINDS };
static const char *const KIND_RUNS[KINDS] = {"bf16 matmuls run", "int8 matmuls run", "bf16 flash attention runs"};
static _Atomic int amx_said_kind[KINDS];

/* Says once per kind on stderr why GGMLITE_AMX=1 does not run AMX. */
static void say_once(int kind, const char *why, int err) {
    int expected = 0;
    if (!atomic_compare_exchange_strong(&amx_said_kind[kind], &expected, 1)) return;
    if (err)
        fprintf(stderr, "ggmlite: GGMLITE_AMX=1: %s (%s); %s without AMX\n", why, strerror(err), KIND_RUNS[kind]);
    else fprintf(stderr, "ggmlite: GGMLITE_AMX=1: %s; %s without AMX\n", why, KIND_RUNS[kind]);
}

/* Whether AMX runs kind at ISA isa: opted in, AVX-512, a build with the
 * tile kernels, the CPU's feature (AMX-INT8 for int8, else AMX-BF16) and
 * Linux's permission; says once why not where opted in. */
static bool amx_runs(gml_isa isa, int kind) {
    if (isa != GML_ISA_AVX512 || !opted_in()) return false;
#ifdef GML_HAVE_AMX
    if (!gml_cpu_has_feature(kind == KIND_INT8 ? GML_CPU_AMX_INT8 : GML_CPU_AMX_BF16)) {
        say_once(kind, kind == KIND_INT8 ? "this CPU (or its OS) has no AMX-INT8"
                                         : "this CPU (or its OS) has no AMX-BF16", 0);
        return false;
    }
    int err = 0;
    if (!gml_cpu_amx_permit(&err)) {
        say_once(kind, "Linux refused the AMX tile data permission (arch_prctl ARCH_REQ_XCOMP_PERM)", err);
        return false;
    }
    return true;
#else
    say_once(kind, "this build has no AMX kernel (not x86-64, or a compiler without -mamx-tile -mamx-bf16 -mamx-int8)",
             0);
    return false;
#endif
}

#ifdef GML_HAVE_AMX
static const gml_amx_bf16_kernel AMX_KERNEL = GML_AMX_BF16_KERNEL(amx);
static const gml_q8_gemm_variant AMX_Q8 = GML_AMX_Q8_VARIANT(amx);
#endif

static const gml_amx_bf16_kernel *test_kernel; /* gml_amx_bf16_set_kernel */

void gml_amx_bf16_set_kernel(const gml_amx_bf16_kernel *k) { test_kernel = k; }

const gml_amx_bf16_kernel *gml_amx_bf16_pick(gml_isa isa) {
    if (test_kernel) return isa == GML_ISA_AVX512 && opted_in() ? test_kernel : NULL;
    if (!amx_runs(isa, KIND_BF16)) return NULL;
#ifdef GML_HAVE_AMX
    return &AMX_KERNEL;
#else
    return NULL;
#endif
}

bool gml_amx_flash_runs(gml_isa isa) { return amx_runs(isa, KIND_FLASH); }

const gml_q8_gemm_variant *gml_amx_q8_pick(gml_isa isa) {
    if (!amx_runs(isa, KIND_INT8)) return NULL;
#ifdef GML_HAVE_AMX
    return &AMX_Q8;
#else
    return NULL;
#endif
}

/* ---- packing ------------------------------------------------------------- */

typedef struct amx_pack {
    int64_t kq;                   /* steps of 16 pairs: ceil(K / 32) */
    int64_t a_batches, b_batches; /* 1 when the operand is one matrix for every batch */
    int64_t a_groups, b_panels;   /* 32-row groups per A batch, 32-column panels per B batch */
    size_t a_pairs, b_pairs;      /* per batch */
    size_t a_bytes, b_bytes, tmp_bytes; /* tmp: per thread, a row of 32 KQ bf16 and the edge tile */
} amx_pack;

static amx_pack pack_of(const gml_gemm_desc *d, int nth) {
    amx_pack k = {.kq = cdiv(d->K, 2 * GML_AMX_STEP)};
    const int64_t nbat = d->nb0 * d->nb1;
    k.a_batches = d->a_bs[0] == 0 && d->a_bs[1] == 0 ? 1 : nbat;
    k.b_batches = d->b_bs[0] == 0 && d->b_bs[1] == 0 ? 1 : nbat;
    k.a_groups = cdiv(d->M, GML_AMX_MR);
    k.b_panels = cdiv(d->N, GML_AMX_NR);
    k.a_pairs = (size_t)(k.a_groups * k.kq) * GML_AMX_BLOCK;
    k.b_pairs = (size_t)(k.b_panels * k.kq) * GML_AMX_BLOCK;
    k.a_bytes = gml_align_up(k.a_pairs * (size_t)k.a_batches * 4, GML_ALIGN);
    k.b_bytes = gml_align_up(k.b_pairs * (size_t)k.b_batches * 4, GML_ALIGN);
    const size_t row = gml_align_up((size_t)GML_MAX(k.kq * 2 * GML_AMX_STEP, (int64_t)2 * GML_AMX_NR) * 2, GML_ALIGN);
    k.tmp_bytes = (row + GML_AMX_MR * GML_AMX_NR * sizeof(float)) * (size_t)nth;
    return k;
}

/* A's group g of batch bi: each row converted whole (pad zero), then cut
 * into its KQ blocks, 16 pairs (64 bytes) a block. */
static void pack_a_group(const gml_gemm_desc *d, const amx_pack *k, int64_t bi, int64_t g, uint32_t *apk,
                         uint16_t *row) {
    const int64_t i0 = bi / d->nb1, i1 = bi % d->nb1, rl = k->kq * 2 * GML_AMX_STEP;
    uint32_t *dst = apk + (size_t)bi * k->a_pairs + (size_t)(g * k->kq) * GML_AMX_BLOCK;
    for (int i = 0; i < GML_AMX_MR; i++) {
        const int64_t m = g * GML_AMX_MR + i;
        memset(row, 0, (size_t)rl * 2);
        if (m < d->M)
            gml_bf16_convert_run(d->isa, GML_F32, d->a + i0 * d->a_bs[0] + i1 * d->a_bs[1] + m * d->a_rs, d->a_cs,
                                 d->K, row);
        for (int64_t q = 0; q < k->kq; q++)
            memcpy(dst + (size_t)q * GML_AMX_BLOCK + (size_t)i * GML_AMX_STEP, row + q * 2 * GML_AMX_STEP,
                   GML_AMX_STEP * 4);
    }
}

/* B's panel q of batch bi: pair p of column j at [p * 32 + j]. Columns
 * whose k run along memory (W^T) convert a column at a time; others two
 * rows of the panel (k = 2p, 2p + 1) at a time. */
static void pack_b_panel(const gml_gemm_desc *d, const amx_pack *k, int64_t bi, int64_t q, uint32_t *bpk,
                         uint16_t *row) {
    const int64_t i0 = bi / d->nb1, i1 = bi % d->nb1, kp = k->kq * GML_AMX_STEP;
    uint32_t *dst = bpk + (size_t)bi * k->b_pairs + (size_t)(q * k->kq) * GML_AMX_BLOCK;
    const char *b = d->b + i0 * d->b_bs[0] + i1 * d->b_bs[1];
    const int64_t es = d->b_type == GML_F32 ? 4 : 2, n0 = q * GML_AMX_NR;
    const int cols = (int)GML_MIN((int64_t)GML_AMX_NR, d->N - n0);
    if (d->b_rs == es) {
        for (int j = 0; j < GML_AMX_NR; j++) {
            memset(row, 0, (size_t)kp * 4);
            if (j < cols) gml_bf16_convert_run(d->isa, d->b_type, b + (n0 + j) * d->b_cs, d->b_rs, d->K, row);
            for (int64_t p = 0; p < kp; p++) memcpy(dst + p * GML_AMX_NR + j, row + 2 * p, 4);
        }
        return;
    }
    uint16_t *lo = row, *hi = row + GML_AMX_NR;
    for (int64_t p = 0; p < kp; p++) {
        memset(row, 0, 2 * GML_AMX_NR * 2);
        if (2 * p < d->K) gml_bf16_convert_run(d->isa, d->b_type, b + 2 * p * d->b_rs + n0 * d->b_cs, d->b_cs, cols, lo);
        if (2 * p + 1 < d->K)
            gml_bf16_convert_run(d->isa, d->b_type, b + (2 * p + 1) * d->b_rs + n0 * d->b_cs, d->b_cs, cols, hi);
        for (int j = 0; j < GML_AMX_NR; j++) dst[p * GML_AMX_NR + j] = (uint32_t)lo[j] | (uint32_t)hi[j] << 16;
    }
}

/* ---- the product ------------------------------------------------------------ */

/* Groups of 32 rows from row 0: a group of 17 to 32 rows takes the
 * 32 x 32 kernel (every group but the last, and the last when M % 32 is 0
 * or past 16), one of 1 to 16 the 16 x 32 kernel (the last when M % 32 is
 * 1 to 16). */
const char *gml_amx_bf16_note(const gml_amx_bf16_kernel *k, int64_t M) {
    const int64_t last = M - (M - 1) / GML_AMX_MR * GML_AMX_MR; /* rows of the last group */
    if (M <= GML_AMX_MR / 2) return k->name16;
    return last <= GML_AMX_MR / 2 ? k->name_both : k->name;
}

size_t gml_amx_bf16_work_size(const gml_gemm_desc *d, int nth) {
    const amx_pack k = pack_of(d, nth);
    return k.a_bytes + k.b_bytes + k.tmp_bytes;
}

size_t gml_amx_bf16_packed_size(const gml_gemm_desc *d) {
    const amx_pack k = pack_of(d, 1);
    return k.b_pairs * (size_t)k.b_batches * 4;
}

void gml_amx_bf16_gemm(const gml_compute_params *p, const gml_gemm_desc *d, const gml_amx_bf16_kernel *kern,
                       gml_kept *kept) {
    if (d->M <= 0 || d->N <= 0 || d->nb0 <= 0 || d->nb1 <= 0) return;
    /* B packed whole in kept: what it was made from, checked at every compute */
    const uint64_t key[6] = {(uint64_t)(uintptr_t)d->b, (uint64_t)d->b_rs, (uint64_t)d->b_cs,
                             (uint64_t)d->b_bs[0], (uint64_t)d->b_bs[1],
                             (uint64_t)(uintptr_t)kern ^ (uint64_t)d->b_type << 56};
    uint32_t *whole = kept && kept->data && kept->size >= gml_amx_bf16_packed_size(d) ? kept->data : NULL;
    const bool repack = whole && !(kept->valid && memcmp(kept->key, key, sizeof key) == 0);
    const amx_pack k = pack_of(d, p->nth);
    assert(k.a_bytes + k.b_bytes + k.tmp_bytes <= p->wsize);
    uint32_t *apk = p->wdata, *bpk = whole ? whole : (uint32_t *)(void *)((char *)p->wdata + k.a_bytes);
    char *mine = (char *)p->wdata + k.a_bytes + k.b_bytes + (size_t)p->ith * (k.tmp_bytes / (size_t)p->nth);
    uint16_t *row = (uint16_t *)(void *)mine;
    float *edge = (float *)(void *)(mine + k.tmp_bytes / (size_t)p->nth - GML_AMX_MR * GML_AMX_NR * sizeof(float));
    gml_kernel_note(p, gml_amx_bf16_note(kern, d->M));

    const int64_t na = k.a_batches * k.a_groups, nbp = !whole || repack ? k.b_batches * k.b_panels : 0;
    for (int64_t u; (u = gml_chunk_next(p)) < na + nbp;) {
        if (u < na) pack_a_group(d, &k, u / k.a_groups, u % k.a_groups, apk, row);
        else pack_b_panel(d, &k, (u - na) / k.b_panels, (u - na) % k.b_panels, bpk, row);
    }
    gml_barrier(p);
    if (repack && p->ith == 0) { /* the others read kept only before the barrier */
        memcpy(kept->key, key, sizeof key);
        kept->valid = true;
    }

    int64_t tm, tn;
    gml_bf16_gemm_tiles(d, GML_AMX_MR, GML_AMX_NR, p->nth, AMX_MIN_CHUNK_FLOPS, &tm, &tn);
    const int64_t mt = cdiv(d->M, tm), nt = cdiv(d->N, tn), n_chunks = d->nb0 * d->nb1 * mt * nt;
    const size_t ldc = (size_t)d->c_rs / sizeof(float);
    kern->configure(); /* the tile configuration is the thread's own */
    for (int64_t chunk; (chunk = gml_chunk_next(p)) < n_chunks;) {
        const int64_t tj = chunk % nt, ti = chunk / nt % mt, bi = chunk / (nt * mt);
        const int64_t i0 = bi / d->nb1, i1 = bi % d->nb1;
        const int64_t m0 = ti * tm, m1 = GML_MIN(m0 + tm, d->M);
        const int64_t n0 = tj * tn, n1 = GML_MIN(n0 + tn, d->N);
        const uint32_t *a = apk + (size_t)(k.a_batches > 1 ? bi : 0) * k.a_pairs;
        const uint32_t *b = bpk + (size_t)(k.b_batches > 1 ? bi : 0) * k.b_pairs;
        float *c = (float *)(void *)(d->c + i0 * d->c_bs[0] + i1 * d->c_bs[1]);
        /* K = 0: one empty block, so that C is written (zeros) */
        for (int64_t pc = 0; pc < k.kq || (pc == 0 && k.kq == 0); pc += KC) {
            const size_t kb = (size_t)GML_MIN((int64_t)KC, k.kq - pc);
            for (int64_t ic = m0; ic < m1; ic += MC) {
                const int64_t ie = GML_MIN(ic + MC, m1);
                for (int64_t jr = n0; jr < n1; jr += GML_AMX_NR) {
                    const int n = (int)GML_MIN((int64_t)GML_AMX_NR, n1 - jr);
                    const uint32_t *bp = b + (size_t)((jr / GML_AMX_NR) * k.kq + pc) * GML_AMX_BLOCK;
                    for (int64_t ir = ic; ir < ie; ir += GML_AMX_MR) {
                        const int m = (int)GML_MIN((int64_t)GML_AMX_MR, ie - ir);
                        const uint32_t *ap = a + (size_t)((ir / GML_AMX_MR) * k.kq + pc) * GML_AMX_BLOCK;
                        float *cb = c + ir * (int64_t)ldc + jr;
                        const int rows = m <= GML_AMX_MR / 2 ? GML_AMX_MR / 2 : GML_AMX_MR;
                        void (*tile)(size_t, const uint32_t *, const uint32_t *, float *, size_t, bool) =
                            rows < GML_AMX_MR ? kern->tile16 : kern->tile;
                        if (m == rows && n == GML_AMX_NR) {
                            tile(kb, ap, bp, cb, ldc, pc > 0);
                            continue;
                        }
                        memset(edge, 0, (size_t)rows * GML_AMX_NR * sizeof(float));
                        if (pc > 0)
                            for (int i = 0; i < m; i++) memcpy(edge + i * GML_AMX_NR, cb + i * (int64_t)ldc, (size_t)n * 4);
                        tile(kb, ap, bp, edge, GML_AMX_NR, pc > 0);
                        for (int i = 0; i < m; i++) memcpy(cb + i * (int64_t)ldc, edge + i * GML_AMX_NR, (size_t)n * 4);
                    }
                }
            }
        }
    }
    kern->release();
}
