/* libFuzzer target: a differential fuzzer of the kernels and the planner.
 *
 * The input bytes are decoded into a small program (decode()): a few leaf
 * tensors with random shapes (sizes 1 to 9) and values drawn from a PRNG
 * seeded by the bytes, some with special values (NaN, +-inf, huge, denormal,
 * -0), then up to MAX_OPS ops through the public builders, each taking
 * tensors made before: views with offsets and strides inside their storage,
 * reshape, permute, transpose, cont, cpy into a fresh leaf or a strided view
 * of one (read back whole through after), matmul, linear, add and mul with
 * broadcast shapes, scale, softmax (mask, scale, causal), repeat_interleave,
 * get_rows and set_rows (indices in range, sometimes out of range),
 * valid_len_mask, relpos_index, flash_attn (mask, valid lens, scale, causal,
 * GQA, permuted K/V; also on f16/bf16 K and V, converted by cpy or written
 * into a typed cache by set_rows, beside its twin on f32 K and V holding the
 * converted values, which must give the same bits in every run), after, and
 * an unfused attention chain. A builder that
 * refuses its inputs (shape errors, an aliased cpy) returns NULL: the op is
 * skipped and the error cleared. The graph's outputs are every op result no
 * later op read.
 *
 * The same program is built twice, in an allocating context and in a
 * no_alloc one that gml_graph_plan places, and computed
 * (LLVMFuzzerTestOneInput):
 *   - reference ISA at 1 and 3 threads (bitwise equal);
 *   - each fast ISA the CPU has (scalar, avx2, avx512, neon) at 1 thread and at
 *     one of 2, 3, 4 (chosen by the input; all three with the environment
 *     variable GGMLITE_FUZZ_DIFF_ALL_THREADS=1, as CTest's replay runs):
 *     bitwise equal across thread counts; bitwise equal across the ISAs
 *     too, except outputs that depend on a softmax or flash_attn (T_EXP:
 *     scalar uses expf, and each variant sums the exps in lanes of its
 *     width, so those agree within tolerance only; matmul is bitwise the
 *     same on every ISA by ops/gemm.h's contract);
 *   - the planned graph under the reference and each fast ISA: bitwise equal
 *     to the allocating context's result of that ISA;
 *   - every fast result against the reference by the rules of
 *     fast_vs_ref_ok() (tolerances from err_bound());
 *   - every softmax and flash_attn node of every run (reference too) against
 *     the masking contracts, row by row (check_contracts()).
 * "Bitwise" is NaN-aware: a NaN equals any NaN, everything else (-0 too)
 * compares by its bits. A compute may fail (an index out of range): then
 * every run must fail with the same message.
 *
 * Special values (NaN, +-inf, huge) in a share of the leaves: the
 * environment variable GGMLITE_FUZZ_DIFF_SPECIALS=1 turns them on, =0 off;
 * unset, FUZZ_DIFF_SPECIALS_DEFAULT decides: on (CI fuzzes with them; the
 * kernels keep the flash_attn/softmax NaN and masking contracts that
 * check_contracts() and fast_vs_ref_ok() encode, and the reproducers of
 * where they once did not are replayed from
 * tests/fuzz/regress/fuzz_diff_contracts/). Off, values stay finite and
 * moderate (masks still hold -inf, but only masks take them; denormals and
 * -0 still occur).
 *
 * On a discrepancy the fuzzer prints what differs, the graph and the ISA,
 * then traps. Debugging switches (environment): GGMLITE_FUZZ_DIFF_ALL_OUTPUTS=1
 * (every op result an output), GGMLITE_FUZZ_DIFF_DUMP=1 (leaf values on a
 * failure), GGMLITE_FUZZ_DIFF_PRINT=1 (each graph), GGMLITE_FUZZ_DIFF_CONTRACTS=0
 * (skip check_contracts). The same file, built without libFuzzer with fuzz_replay.c,
 * replays saved inputs as a CTest test (tests/CMakeLists.txt). */
#include <ggmlite/ggmlite.h>

#include "../isas.h"

#include <float.h>
#include <stdarg.h>
#include <stdbool.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#ifndef FUZZ_DIFF_SPECIALS_DEFAULT
#define FUZZ_DIFF_SPECIALS_DEFAULT 1
#endif

#define MAX_OPS 8
#define MAX_POOL 96
#define MAX_LEAVES 96
#define MAX_OUTS 32
#define MAX_ELEMS 2048 /* elements of one op result, at most (else the op is skipped) */
#define MAX_LEAF_ELEMS 1024 /* elements of one leaf, at most */

/* ---- the input bytes, read as choices ------------------------------------ */

typedef struct reader {
    const uint8_t *p;
    size_t n, i;
} reader;

/* The next byte; 0 once the input is used up (so every choice has a default). */
static unsigned next_byte(reader *r) { return r->i < r->n ? r->p[r->i++] : 0u; }
/* The op kinds decode() draws from, N_KINDS unless a saved reproducer asks
 * for the format it was found with: GGMLITE_FUZZ_DIFF_KINDS=n (20: the
 * first version, also GGMLITE_FUZZ_DIFF_V1; 25: before the norms and the
 * attention options; 26: before the typed tensors; 27: before flash_attn on
 * typed K and V). softmax and flash_attn draw options from 26 on. */
enum { N_KINDS = 28 };
static int g_kinds = -1;

static int pick(reader *r, int n) { return n <= 1 ? 0 : (int)(next_byte(r) % (unsigned)n); }
static bool chance(reader *r, int percent) { return pick(r, 100) < percent; }

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float unit(uint64_t *s) { return (float)(splitmix(s) >> 40) / (float)(1 << 24); } /* [0,1) */

/* ---- the program ----------------------------------------------------------- */

/* Taints: what a tensor's values may hold, from the leaves it depends on. */
enum {
    T_HUGE = 1,      /* finite values whose products or sums overflow float */
    T_NONFINITE = 2, /* NaN or inf (beyond masks' -inf) */
    T_EXP = 4,       /* made by softmax or flash_attn: their fast variants
                        sum exps in lanes of the ISA's width, so the ISAs
                        agree within tolerance, not bitwise */
};

typedef struct leaf {
    gml_tensor *t;
    uint32_t bits[MAX_LEAF_ELEMS]; /* the values, f32 or i32, contiguous */
    int64_t n;
} leaf;

typedef struct entry {
    gml_tensor *t;
    int taint;
    int32_t ibound; /* i32 tensors: every value is in [0, ibound) (0: unknown) */
    bool read;      /* an op took it as input */
    bool is_leaf;
    bool mask_only; /* holds -inf by design (a mask): without specials, only
                       masks take it, so data stays finite */
    bool written;   /* the destination of a cpy or set_rows: no other op takes
                       it (it would read it before or after the write) */
    bool keep;      /* an output even when read (one of a twin pair) */
} entry;

typedef struct program program;
struct program {
    gml_context *ctx;
    int specials; /* special values allowed in leaves */
    bool all_outs; /* debugging: every op result is an output */
    bool taking_mask; /* take() may return mask_only entries */
    uint64_t seed;
    entry pool[MAX_POOL];
    int n_pool;
    leaf *leaves; /* MAX_LEAVES */
    int n_leaves;
    gml_tensor *outs[MAX_OUTS];
    int out_taint[MAX_OUTS];
    int n_outs;
    /* Twins: two results the contracts say are bitwise equal in every run
     * (flash_attn on typed K/V and on f32 K/V holding the converted values). */
    gml_tensor *twins[MAX_OUTS][2];
    int n_twins;
};

static entry *push(program *p, gml_tensor *t, int taint, int32_t ibound, bool is_leaf) {
    if (!t || p->n_pool == MAX_POOL) return NULL;
    entry *e = &p->pool[p->n_pool++];
    *e = (entry){.t = t, .taint = taint, .ibound = ibound, .is_leaf = is_leaf};
    return e;
}

enum { V_NORMAL, V_MASK, V_INDEX, V_ANY };

/* A fresh leaf of shape ne[0..nd-1], filled by kind: V_NORMAL values in
 * [-2, 2] (with specials in a share when allowed), V_MASK 0 / -inf / small
 * values, V_INDEX i32 in [0, bound) (sometimes one out of range when bad).
 * Pushed to the pool; NULL if it cannot be made. */
static entry *new_leaf(program *p, reader *r, gml_type type, int nd, const int64_t *ne, int kind,
                       int32_t bound, bool bad) {
    if (p->n_leaves == MAX_LEAVES || p->n_pool == MAX_POOL) return NULL;
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= ne[i];
    if (n > MAX_LEAF_ELEMS) return NULL;
    gml_tensor *t = gml_new_tensor(p->ctx, type, nd, ne);
    if (!t) {
        gml_clear_error(p->ctx);
        return NULL;
    }
    leaf *l = &p->leaves[p->n_leaves++];
    l->t = t;
    l->n = n;
    int taint = 0;
    const int special_share = p->specials && kind == V_NORMAL && chance(r, 30) ? 1 + pick(r, 40) : 0;
    const int mask_share = 20 + pick(r, 60);
    const int tiny_share = chance(r, 10) ? 20 : 0; /* denormals, -0: always allowed */
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        if (type == GML_I32) {
            int32_t v = bound > 0 ? (int32_t)(splitmix(&p->seed) % (uint64_t)bound) : 0;
            memcpy(&u, &v, 4);
        } else {
            float v = 4.0f * unit(&p->seed) - 2.0f;
            const int roll = (int)(splitmix(&p->seed) % 100);
            if (kind == V_MASK) {
                v = roll < mask_share ? -INFINITY : roll < mask_share + 20 ? v : 0.0f;
            } else if (roll < special_share) {
                static const float SPECIAL[] = {NAN, INFINITY, -INFINITY, 1e20f, -1e20f,
                                                3e38f, -3e38f, 1e30f};
                v = SPECIAL[splitmix(&p->seed) % 8];
                taint |= isfinite(v) ? T_HUGE : T_NONFINITE;
            } else if (roll < special_share + tiny_share) {
                v = roll & 1 ? -0.0f : 1e-40f * v;
            }
            memcpy(&u, &v, 4);
        }
        l->bits[i] = u;
    }
    if (type == GML_I32 && bad && n > 0) { /* one index out of range */
        int32_t v = chance(r, 50) ? -1 : bound;
        memcpy(&l->bits[pick(r, (int)n)], &v, 4);
    }
    return push(p, t, taint, bad ? 0 : bound, true);
}

static int rand_dim(reader *r) { return 1 + pick(r, 9); }
static int small_dim(reader *r) { return 1 + pick(r, 5); }

static entry *normal_leaf(program *p, reader *r, int nd, const int64_t *ne) {
    return new_leaf(p, r, GML_F32, nd, ne, V_NORMAL, 0, false);
}

/* Sizes of t, outermost first. */
static int shape_of(const gml_tensor *t, int64_t *ne) {
    for (int i = 0; i < t->n_dims; i++) ne[i] = t->ne[GML_MAX_DIMS - t->n_dims + i];
    return t->n_dims;
}

/* An entry of the pool to take as an input: f32 (or i32 if want_i32), at
 * least min_dims dimensions; NULL if none. Marks it read. */
static entry *take(program *p, reader *r, bool want_i32, int min_dims) {
    int cand[MAX_POOL], n = 0;
    for (int i = 0; i < p->n_pool; i++)
        if ((p->pool[i].t->type == GML_I32) == want_i32 && p->pool[i].t->n_dims >= min_dims &&
            !p->pool[i].written && (p->taking_mask || !p->pool[i].mask_only))
            cand[n++] = i;
    if (!n) { /* none of that type: the other one */
        for (int i = 0; i < p->n_pool; i++)
            if (p->pool[i].t->n_dims >= min_dims && !p->pool[i].written &&
                (p->taking_mask || !p->pool[i].mask_only))
                cand[n++] = i;
        if (!n) return NULL;
    }
    /* favour the newest, so ops chain */
    int k = chance(r, 50) ? n - 1 - pick(r, n < 3 ? n : 3) : pick(r, n);
    entry *e = &p->pool[cand[k]];
    e->read = true;
    return e;
}

/* A shape that broadcasts against ne[0..nd-1]: trailing dims each kept or 1,
 * maybe fewer dims. */
static int broadcast_shape(reader *r, int nd, const int64_t *ne, int64_t *out) {
    int bd = nd - (chance(r, 30) ? pick(r, nd) : 0);
    for (int i = 0; i < bd; i++) out[i] = chance(r, 30) ? 1 : ne[nd - bd + i];
    return bd;
}

/* Ends an op: a NULL result clears the error (the op is skipped). */
static entry *result(program *p, gml_tensor *t, int taint, int32_t ibound) {
    if (!t) {
        gml_clear_error(p->ctx);
        return NULL;
    }
    if (gml_nelements(t) > MAX_ELEMS) return NULL; /* keep inputs fast */
    return push(p, t, taint, ibound, false);
}

static float pick_scale(reader *r) {
    static const float S[] = {1.0f, 0.5f, -1.25f, 2.0f, 0.125f, 0.0f, 1e-3f, 3.0f, 0.35355339f};
    return S[pick(r, 9)];
}

static void op_view(program *p, reader *r) {
    entry *a = take(p, r, chance(r, 15), 1);
    if (!a) return;
    const int64_t total = gml_is_contiguous(a->t) ? gml_nelements(a->t) : 1;
    int nd = 1 + pick(r, 4);
    int64_t ne[4];
    size_t nb[4];
    int64_t extent = 1;
    for (int i = nd - 1; i >= 0; i--) {
        ne[i] = 1 + pick(r, 4);
        int64_t st = chance(r, 60) ? extent : pick(r, (int)(total < 12 ? total : 12) + 1);
        if (extent + (ne[i] - 1) * st > total) ne[i] = 1;
        extent += (ne[i] - 1) * st;
        nb[i] = (size_t)st * 4;
    }
    size_t off = (size_t)pick(r, (int)(total - extent + 1)) * 4;
    result(p, gml_view(p->ctx, a->t, nd, ne, nb, off), a->taint, a->ibound);
}

static void op_reshape(program *p, reader *r) {
    entry *a = take(p, r, chance(r, 10), 1);
    if (!a) return;
    int64_t n = gml_nelements(a->t), ne[4];
    int nd = 1 + pick(r, 4);
    for (int i = 0; i < nd - 1; i++) { /* a divisor of what is left, or 1 */
        int64_t d = 1 + pick(r, 9);
        while (n % d) d--;
        ne[i] = d;
        n /= d;
    }
    ne[nd - 1] = n;
    if (chance(r, 20)) ne[pick(r, nd)] = -1;
    result(p, gml_reshape(p->ctx, a->t, nd, ne), a->taint, a->ibound);
}

static void op_permute(program *p, reader *r) {
    entry *a = take(p, r, chance(r, 10), 2);
    if (!a) return;
    int perm[4] = {0, 1, 2, 3};
    const int nd = a->t->n_dims;
    for (int i = nd - 1; i > 0; i--) {
        int j = pick(r, i + 1), s = perm[i];
        perm[i] = perm[j];
        perm[j] = s;
    }
    result(p, gml_permute(p->ctx, a->t, perm), a->taint, a->ibound);
}

static void op_transpose(program *p, reader *r) {
    entry *a = take(p, r, chance(r, 10), 2);
    if (!a) return;
    const int nd = a->t->n_dims;
    int d0 = pick(r, nd), d1 = pick(r, nd);
    if (chance(r, 30)) d0 -= nd;
    result(p, gml_transpose(p->ctx, a->t, d0, d1), a->taint, a->ibound);
}

static void op_cont(program *p, reader *r) {
    entry *a = take(p, r, chance(r, 10), 1);
    if (a) result(p, gml_cont(p->ctx, a->t), a->taint, a->ibound);
}

/* cpy into a fresh destination: a leaf of a's shape, a permuted leaf, or a
 * strided window of a larger leaf (then the whole larger leaf is read back
 * through after, so the rows the cpy did not write are checked too). */
static void op_cpy(program *p, reader *r) {
    entry *a = take(p, r, chance(r, 15), 1);
    if (!a) return;
    int64_t ne[4] = {1, 1, 1, 1}, big[4] = {1, 1, 1, 1};
    const int nd = shape_of(a->t, ne);
    const gml_type type = a->t->type;
    const int how = pick(r, 3);
    if (how == 0) {
        entry *d = new_leaf(p, r, type, nd, ne, V_NORMAL, 1, false);
        if (d) d->written = d->read = true;
        if (d) result(p, gml_cpy(p->ctx, a->t, d->t), a->taint | d->taint, a->ibound);
    } else if (how == 1 && nd >= 2) { /* dst = permute(leaf of the swapped shape) */
        const int i = pick(r, nd - 1);
        memcpy(big, ne, sizeof ne);
        big[i] = ne[nd - 1];
        big[nd - 1] = ne[i];
        entry *d = new_leaf(p, r, type, nd, big, V_NORMAL, 1, false);
        if (!d) return;
        d->written = d->read = true;
        gml_tensor *dv = gml_transpose(p->ctx, d->t, i, nd - 1);
        result(p, dv ? gml_cpy(p->ctx, a->t, dv) : NULL, a->taint | d->taint, a->ibound);
    } else {
        size_t off = 0;
        for (int i = 0; i < nd; i++) big[i] = ne[i] + pick(r, 3);
        entry *d = new_leaf(p, r, type, nd, big, V_NORMAL, 1, false);
        if (!d) return;
        d->written = d->read = true;
        size_t nb[4], st = 4;
        for (int i = nd - 1; i >= 0; i--) {
            nb[i] = st;
            off += (size_t)pick(r, (int)(big[i] - ne[i] + 1)) * st;
            st *= (size_t)big[i];
        }
        gml_tensor *dv = gml_view(p->ctx, d->t, nd, ne, nb, off);
        gml_tensor *c = dv ? gml_cpy(p->ctx, a->t, dv) : NULL;
        entry *e = result(p, c, a->taint | d->taint, a->ibound);
        if (e && chance(r, 70)) {
            e->read = true;
            result(p, gml_after(p->ctx, d->t, c), a->taint | d->taint, 0);
        }
    }
}

static void op_matmul(program *p, reader *r) {
    entry *a = take(p, r, false, 2);
    if (!a) return;
    int64_t ne[4], bne[4];
    const int nd = shape_of(a->t, ne);
    const int64_t K = ne[nd - 1], N = rand_dim(r);
    entry *b = NULL;
    if (chance(r, 25)) { /* another tensor of the pool with K rows */
        for (int i = p->n_pool - 1; i >= 0; i--) {
            const gml_tensor *t = p->pool[i].t;
            if (t->type == GML_F32 && t->n_dims >= 2 && t->ne[2] == K && !p->pool[i].written &&
                !p->pool[i].mask_only &&
                chance(r, 60)) {
                b = &p->pool[i];
                b->read = true;
                break;
            }
        }
    }
    gml_tensor *bt = b ? b->t : NULL;
    if (!b) {
        int lead = nd - 2 - (chance(r, 30) ? pick(r, nd - 1) : 0);
        int bd = 0;
        for (int i = 0; i < lead; i++) bne[bd++] = chance(r, 25) ? 1 : ne[nd - 2 - lead + i];
        const bool trans = chance(r, 40); /* b = leaf [.., N, K] transposed */
        bne[bd++] = trans ? N : K;
        bne[bd++] = trans ? K : N;
        b = normal_leaf(p, r, bd, bne);
        if (!b) return;
        b->read = true;
        bt = trans ? gml_transpose(p->ctx, b->t, -1, -2) : b->t;
    }
    result(p, gml_matmul(p->ctx, a->t, bt), a->taint | b->taint, 0);
}

static void op_linear(program *p, reader *r) {
    entry *x = take(p, r, false, 1);
    if (!x) return;
    const int64_t in = x->t->ne[3], out = rand_dim(r);
    entry *w = normal_leaf(p, r, 2, (int64_t[]){out, in});
    if (!w) return;
    w->read = true;
    entry *b = chance(r, 50) ? normal_leaf(p, r, 1, (int64_t[]){out}) : NULL;
    if (b) b->read = true;
    result(p, gml_linear(p->ctx, x->t, w->t, b ? b->t : NULL),
           x->taint | w->taint | (b ? b->taint : 0), 0);
}

/* add, mul, sub or div (build), broadcasting either way. */
static void op_binary(program *p, reader *r,
                      gml_tensor *(*build)(gml_context *, gml_tensor *, gml_tensor *)) {
    entry *a = take(p, r, false, 1);
    if (!a) return;
    int64_t ne[4], bne[4];
    const int nd = shape_of(a->t, ne);
    entry *b = NULL;
    if (chance(r, 30)) {
        b = take(p, r, false, 1); /* may not broadcast: the builder says so */
    } else {
        b = normal_leaf(p, r, broadcast_shape(r, nd, ne, bne), bne);
        if (b) b->read = true;
    }
    if (!b) return;
    gml_tensor *x = a->t, *y = b->t;
    if (chance(r, 30)) {
        x = b->t;
        y = a->t;
    }
    result(p, build(p->ctx, x, y), a->taint | b->taint, 0);
}

static void op_scale(program *p, reader *r) {
    entry *a = take(p, r, false, 1);
    if (a) result(p, gml_scale(p->ctx, a->t, pick_scale(r)), a->taint, 0);
}

/* A mask for scores of shape ne[0..nd-1]: a fresh V_MASK leaf (maybe with
 * specials when allowed), or an f32 tensor of the pool, or none. */
static entry *pick_mask(program *p, reader *r, int nd, const int64_t *ne) {
    const int how = pick(r, 4);
    if (how == 0) return NULL;
    int64_t mne[4];
    if (how == 3 && chance(r, 50)) {
        p->taking_mask = true;
        entry *m = take(p, r, false, 1);
        p->taking_mask = false;
        return m;
    }
    entry *m = new_leaf(p, r, GML_F32, broadcast_shape(r, nd, ne, mne), mne,
                        how == 3 ? V_NORMAL : V_MASK, 0, false);
    if (m) {
        m->read = true;
        m->mask_only = how != 3 && !p->specials;
    }
    return m;
}

static entry *lens_leaf(program *p, reader *r, int64_t B, int64_t tq, int64_t tk);

/* The attention options (gml_attn_opts) on top of what *o holds: causal
 * alignment, window, softcap, ALiBi and, with heads known (scores [B, H,
 * Tq, Tk]), positions, sinks and (softmax: lens, flash_attn draws its own)
 * valid lengths. Returns the taint of the leaves it added. */
static int pick_attn_opts(program *p, reader *r, gml_attn_opts *o, bool heads, int64_t B,
                          int64_t H, int64_t tq, int64_t tk, bool lens) {
    int taint = 0;
    o->causal = (gml_causal)pick(r, 3);
    if (chance(r, 30)) o->window = 1 + pick(r, (int)tk + 2);
    static const float CAP[] = {0.5f, 5.0f, 30.0f, 1e-3f};
    if (chance(r, 30)) o->softcap = CAP[pick(r, 4)];
    if (!heads) return taint;
    static const float BIAS[] = {8.0f, 0.5f, 3.0f};
    if (chance(r, 30)) o->alibi_max_bias = BIAS[pick(r, 3)];
    if (chance(r, 25)) {
        entry *pos = new_leaf(p, r, GML_I32, 2, (int64_t[]){B, tq}, V_INDEX, (int32_t)tk + 3, false);
        if (pos) pos->read = true, o->positions = pos->t;
    }
    if (chance(r, 30)) {
        entry *sk = normal_leaf(p, r, 1, (int64_t[]){H});
        if (sk) sk->read = true, o->sinks = sk->t, taint |= sk->taint;
    }
    if (lens && chance(r, 25)) {
        entry *l = lens_leaf(p, r, B, tq, tk);
        if (l) o->valid_lens = l->t;
    }
    return taint;
}

static void op_softmax(program *p, reader *r) {
    entry *x = take(p, r, false, 1);
    if (!x) return;
    int64_t ne[4];
    const int nd = shape_of(x->t, ne);
    entry *m = pick_mask(p, r, nd, ne);
    const float scale = pick_scale(r);
    const bool causal = chance(r, 40);
    gml_attn_opts o = {.mask = m ? m->t : NULL, .causal = causal};
    int taint = x->taint | (m ? m->taint : 0) | T_EXP;
    if (g_kinds >= 26 && chance(r, 40)) /* the options; per head ones need [B, H, Tq, Tk] */
        taint |= pick_attn_opts(p, r, &o, nd == 4, nd == 4 ? ne[0] : 1, nd == 4 ? ne[1] : 1,
                                nd >= 2 ? ne[nd - 2] : 1, ne[nd - 1], true);
    result(p, gml_softmax_ext(p->ctx, x->t, scale, &o), taint, 0);
}

static void op_repeat(program *p, reader *r) {
    entry *a = take(p, r, chance(r, 10), 1);
    if (!a) return;
    const int nd = a->t->n_dims;
    result(p, gml_repeat_interleave(p->ctx, a->t, 1 + pick(r, 3), pick(r, 2 * nd) - nd), a->taint,
           a->ibound);
}

/* Indices in [0, bound): a fresh leaf (bad: one out of range), or an i32
 * tensor of the pool whose values are known to be below bound. */
static entry *pick_index(program *p, reader *r, int nd, const int64_t *ne, int32_t bound) {
    if (chance(r, 30)) {
        for (int i = p->n_pool - 1; i >= 0; i--) {
            entry *e = &p->pool[i];
            if (e->t->type == GML_I32 && e->ibound > 0 && e->ibound <= bound && e->t->n_dims <= nd &&
                !e->written) {
                e->read = true;
                return e;
            }
        }
    }
    entry *e = new_leaf(p, r, GML_I32, nd, ne, V_INDEX, bound, chance(r, 4));
    if (e) e->read = true;
    return e;
}

static void op_get_rows(program *p, reader *r) {
    entry *tab = take(p, r, false, 2);
    int64_t ine[3];
    const int ind = 1 + pick(r, 3);
    for (int i = 0; i < ind; i++) ine[i] = small_dim(r);
    if (!tab || tab->t->n_dims != 2 || chance(r, 30)) {
        tab = normal_leaf(p, r, 2, (int64_t[]){rand_dim(r), rand_dim(r)});
        if (!tab) return;
        tab->read = true;
    }
    entry *idx = pick_index(p, r, ind, ine, (int32_t)tab->t->ne[2]);
    if (idx) result(p, gml_get_rows(p->ctx, tab->t, idx->t), tab->taint, 0);
}

/* set_rows into a fresh dst [.., N, d] (or a transposed view of one), from
 * src [.., n, d] of the pool, idx [n] or [A, n]. */
static void op_set_rows(program *p, reader *r) {
    entry *src = take(p, r, false, 2);
    if (!src) return;
    int64_t ne[4], dne[4];
    const int nd = shape_of(src->t, ne);
    memcpy(dne, ne, sizeof ne);
    const int64_t n = ne[nd - 2], N = n + pick(r, 4);
    dne[nd - 2] = N;
    const bool trans = chance(r, 25);
    if (trans) {
        dne[nd - 2] = ne[nd - 1];
        dne[nd - 1] = N;
    }
    entry *dst = normal_leaf(p, r, nd, dne);
    if (!dst) return;
    dst->read = dst->written = true;
    gml_tensor *dt = trans ? gml_transpose(p->ctx, dst->t, -1, -2) : dst->t;
    entry *idx = chance(r, 70) ? pick_index(p, r, 1, (int64_t[]){n}, (int32_t)N)
                               : pick_index(p, r, 2, (int64_t[]){ne[0], n}, (int32_t)N);
    if (dt && idx) result(p, gml_set_rows(p->ctx, dt, src->t, idx->t), src->taint | dst->taint, 0);
    else gml_clear_error(p->ctx);
}

static entry *lens_leaf(program *p, reader *r, int64_t B, int64_t tq, int64_t tk) {
    entry *e = chance(r, 50) ? new_leaf(p, r, GML_I32, 1, (int64_t[]){B}, V_INDEX, (int32_t)tk + 1, chance(r, 4))
                             : new_leaf(p, r, GML_I32, 2, (int64_t[]){B, tq}, V_INDEX, (int32_t)tk + 1,
                                        chance(r, 4));
    if (e) e->read = true;
    return e;
}

static void op_valid_len_mask(program *p, reader *r) {
    const int64_t B = small_dim(r), tq = rand_dim(r), tk = rand_dim(r);
    entry *l = lens_leaf(p, r, B, tq, tk);
    entry *m = l ? result(p, gml_valid_len_mask(p->ctx, l->t, tk), 0, 0) : NULL;
    if (m) m->mask_only = !p->specials;
}

static void op_relpos(program *p, reader *r) {
    const int P = pick(r, 5);
    result(p, gml_relpos_index(p->ctx, rand_dim(r), rand_dim(r), P), 0, 2 * P + 1);
}

/* k or v [B, G, Tk, d]: a leaf, or a [B, Tk, G, d] leaf permuted. */
static entry *kv_leaf(program *p, reader *r, int64_t B, int64_t G, int64_t tk, int64_t d, gml_tensor **t) {
    const bool perm = chance(r, 40);
    entry *e = perm ? normal_leaf(p, r, 4, (int64_t[]){B, tk, G, d}) : normal_leaf(p, r, 4, (int64_t[]){B, G, tk, d});
    if (!e) return NULL;
    e->read = true;
    *t = perm ? gml_permute(p->ctx, e->t, (int[]){0, 2, 1, 3}) : e->t;
    return *t ? e : NULL;
}

static void op_flash_attn(program *p, reader *r) {
    entry *q = chance(r, 40) ? take(p, r, false, 4) : NULL;
    if (!q) {
        q = normal_leaf(p, r, 4, (int64_t[]){small_dim(r), small_dim(r), rand_dim(r), rand_dim(r)});
        if (!q) return;
        q->read = true;
    }
    int64_t ne[4];
    shape_of(q->t, ne);
    const int64_t B = ne[0], H = ne[1], tq = ne[2], dk = ne[3];
    int64_t G = 1 + pick(r, (int)H);
    while (H % G) G--;
    const int64_t tk = rand_dim(r), dv = rand_dim(r);
    gml_tensor *kt, *vt;
    entry *k = kv_leaf(p, r, B, G, tk, dk, &kt);
    entry *v = k ? kv_leaf(p, r, B, G, tk, dv, &vt) : NULL;
    if (!v) {
        gml_clear_error(p->ctx);
        return;
    }
    int64_t sne[4] = {B, H, tq, tk};
    entry *m = pick_mask(p, r, 4, sne);
    entry *lens = chance(r, 30) ? lens_leaf(p, r, B, tq, tk) : NULL;
    const float scale = chance(r, 50) ? 1.0f / sqrtf((float)dk) : pick_scale(r);
    const bool causal = chance(r, 40);
    gml_attn_opts o = {.mask = m ? m->t : NULL, .valid_lens = lens ? lens->t : NULL, .causal = causal};
    int taint = q->taint | k->taint | v->taint | (m ? m->taint : 0) | T_EXP;
    if (g_kinds >= 26 && chance(r, 40)) taint |= pick_attn_opts(p, r, &o, true, B, H, tq, tk, false);
    result(p, gml_flash_attn_ext(p->ctx, q->t, kt, vt, scale, &o), taint, 0);
}

/* softmax(q k^T * scale + mask) v, unfused: the ops flash_attn stands for. */
static void op_attention_chain(program *p, reader *r) {
    const int64_t B = small_dim(r), tq = rand_dim(r), tk = rand_dim(r), dk = rand_dim(r), dv = rand_dim(r);
    entry *q = normal_leaf(p, r, 3, (int64_t[]){B, tq, dk});
    entry *k = normal_leaf(p, r, 3, (int64_t[]){B, tk, dk});
    entry *v = normal_leaf(p, r, 3, (int64_t[]){B, tk, dv});
    if (!q || !k || !v) return;
    q->read = k->read = v->read = true;
    gml_tensor *s = gml_matmul(p->ctx, q->t, gml_transpose(p->ctx, k->t, -1, -2));
    int64_t sne[3] = {B, tq, tk};
    entry *m = pick_mask(p, r, 3, sne);
    gml_tensor *w = gml_softmax(p->ctx, s, m ? m->t : NULL, pick_scale(r), chance(r, 40));
    const int taint = q->taint | k->taint | v->taint | (m ? m->taint : 0) | T_EXP;
    entry *es = result(p, s, q->taint | k->taint, 0), *ew = es ? result(p, w, taint, 0) : NULL;
    if (!ew) return;
    es->read = ew->read = true;
    result(p, gml_matmul(p->ctx, w, v->t), taint, 0);
}

static void op_after(program *p, reader *r) {
    entry *t = take(p, r, chance(r, 10), 1), *dep = take(p, r, chance(r, 10), 1);
    if (t && dep) result(p, gml_after(p->ctx, t->t, dep->t), t->taint, t->ibound);
}

/* ---- the ops added after the first reproducers were saved ----------------
 * (decode() reaches them unless GGMLITE_FUZZ_DIFF_V1 is set: the files in
 * regress/ were found with the first 20 kinds and decode as they did then.) */

/* The unary ops; the exp-based ones agree across ISAs within a few ulp. */
static void op_unary(program *p, reader *r) {
    entry *a = take(p, r, false, 1);
    if (!a) return;
    gml_tensor *(*const fns[])(gml_context *, gml_tensor *) = {
        gml_neg, gml_exp, gml_tanh, gml_sigmoid, gml_silu, gml_gelu, gml_gelu_tanh};
    const int k = pick(r, 7);
    const bool bitwise = k == 0; /* neg; gelu: libm's erfc (scalar) or ggmlite's (AVX2, AVX-512) */
    result(p, fns[k](p->ctx, a->t), a->taint | (bitwise ? 0 : T_EXP), 0);
}

/* slice (a view) and concat (a copy of two inputs). */
static void op_slice_concat(program *p, reader *r) {
    entry *a = take(p, r, chance(r, 10), 1);
    if (!a) return;
    const int nd = a->t->n_dims, dim = pick(r, 2 * nd) - nd;
    const int64_t n = gml_dim(a->t, dim);
    if (chance(r, 50)) {
        const int64_t start = (int64_t)pick(r, (int)(2 * n)) - n; /* [-n, n) */
        const int64_t s0 = start < 0 ? start + n : start;
        result(p, gml_slice(p->ctx, a->t, dim, start, 1 + pick(r, (int)(n - s0))), a->taint, a->ibound);
        return;
    }
    int64_t ne[4];
    shape_of(a->t, ne);
    ne[dim < 0 ? dim + nd : dim] = small_dim(r);
    entry *b = a->t->type == GML_I32 ? new_leaf(p, r, GML_I32, nd, ne, V_INDEX, a->ibound > 0 ? a->ibound : 1, false)
                                     : normal_leaf(p, r, nd, ne);
    if (!b) return;
    b->read = true;
    const bool swap = chance(r, 30);
    const int32_t ib = a->ibound > 0 && b->ibound > 0 ? (a->ibound > b->ibound ? a->ibound : b->ibound) : 0;
    result(p, gml_concat(p->ctx, swap ? b->t : a->t, swap ? a->t : b->t, dim), a->taint | b->taint, ib);
}

/* sum, mean, max over the last dim. */
static void op_reduce(program *p, reader *r) {
    entry *a = take(p, r, false, 1);
    if (!a) return;
    const int k = pick(r, 3);
    result(p, k == 0 ? gml_sum(p->ctx, a->t) : k == 1 ? gml_mean(p->ctx, a->t) : gml_max(p->ctx, a->t),
           a->taint, 0);
}

/* rope on a 4-D tensor, positions [T] or [B, T] in [0, 4096). */
static void op_rope(program *p, reader *r) {
    entry *x = take(p, r, false, 4);
    if (!x || x->t->n_dims != 4) return;
    const int seq_dim = chance(r, 50) ? -2 : -3;
    const int64_t T = gml_dim(x->t, seq_dim), d = x->t->ne[3];
    entry *pos = chance(r, 50) ? new_leaf(p, r, GML_I32, 1, (int64_t[]){T}, V_INDEX, 4096, false)
                               : new_leaf(p, r, GML_I32, 2, (int64_t[]){x->t->ne[0], T}, V_INDEX, 4096, false);
    if (!pos) return;
    pos->read = true;
    const int rot = chance(r, 50) ? 0 : 2 * (int)(1 + pick(r, (int)(d / 2 > 0 ? d / 2 : 1)));
    static const float THETA[] = {10000.0f, 500000.0f, 100.0f};
    static const float SCALE[] = {1.0f, 4.0f, 0.25f};
    result(p, gml_rope(p->ctx, x->t, pos->t, seq_dim, rot, THETA[pick(r, 3)], SCALE[pick(r, 3)], chance(r, 50)),
           x->taint, 0);
}

/* rms_norm and layer_norm over the last dim, w and b [d] or none. */
static void op_norm(program *p, reader *r) {
    entry *x = take(p, r, false, 1);
    if (!x) return;
    const int64_t d = gml_dim(x->t, -1);
    entry *w = chance(r, 70) ? normal_leaf(p, r, 1, (int64_t[]){d}) : NULL;
    entry *b = chance(r, 70) ? normal_leaf(p, r, 1, (int64_t[]){d}) : NULL;
    if (w) w->read = true;
    if (b) b->read = true;
    static const float EPS[] = {1e-5f, 1e-6f, 1e-2f};
    const float eps = EPS[pick(r, 3)];
    const int taint = x->taint | (w ? w->taint : 0) | (b ? b->taint : 0);
    result(p, chance(r, 50) ? gml_rms_norm(p->ctx, x->t, w ? w->t : NULL, eps)
                            : gml_layer_norm(p->ctx, x->t, w ? w->t : NULL, b ? b->t : NULL, eps),
           taint, 0);
}

/* The typed tensors (f16, bf16, q8_0): an f32 tensor converted by cpy into
 * a fresh tensor of the type, then read back by cpy into f32, gathered by
 * get_rows or used as linear's weight (f16, bf16). Typed tensors stay out
 * of the pool: outputs and the other ops see f32 only. */
static void op_typed(program *p, reader *r) {
    static const gml_type TYPES[] = {GML_F16, GML_BF16, GML_Q8_0};
    const gml_type ty = TYPES[pick(r, 3)];
    /* back to f32, get_rows, linear (q8_0: back only, as a q8_0 tensor is
     * used only as a leaf or its permutation, not as cpy's result) */
    const int use = ty == GML_Q8_0 ? 0 : pick(r, 3);
    entry *a = NULL;
    if (ty == GML_Q8_0 || use > 0 || chance(r, 30)) { /* a fresh [N, K] */
        const int64_t k = ty == GML_Q8_0 ? 32 * (1 + pick(r, 2)) : rand_dim(r);
        a = normal_leaf(p, r, 2, (int64_t[]){1 + pick(r, 1024 / (int)k < 12 ? 1024 / (int)k : 12), k});
    } else {
        a = take(p, r, false, 1);
    }
    if (!a) return;
    a->read = true;
    int64_t ne[4];
    const int nd = shape_of(a->t, ne);
    gml_tensor *dst = gml_new_tensor(p->ctx, ty, nd, ne);
    gml_tensor *tv = dst ? gml_cpy(p->ctx, a->t, dst) : NULL;
    if (!tv) {
        gml_clear_error(p->ctx);
        return;
    }
    if (use == 0) {
        gml_tensor *back = gml_new_tensor(p->ctx, GML_F32, nd, ne);
        result(p, back ? gml_cpy(p->ctx, tv, back) : NULL, a->taint, 0);
    } else if (use == 1) {
        entry *idx = pick_index(p, r, 1, (int64_t[]){1 + pick(r, 6)}, (int32_t)ne[0]);
        if (idx) result(p, gml_get_rows(p->ctx, tv, idx->t), a->taint, 0);
    } else {
        entry *x = normal_leaf(p, r, 2, (int64_t[]){1 + pick(r, 7), ne[1]});
        if (!x) return;
        x->read = true;
        result(p, gml_linear(p->ctx, x->t, tv, NULL), a->taint | x->taint, 0);
    }
}

/* k or v [B, G, Tk, d] of type ty (f32, f16, bf16) for flash_attn: an f32
 * leaf ([B, Tk, G, d] permuted, sometimes) converted by cpy into a fresh
 * tensor of the type, and sometimes a KV cache: n new f32 rows written into
 * it by set_rows (rounded into the type) at indices [n] or [B, n] in range
 * (repeats allowed: the last row wins), the result read. NULL (error cleared by the caller) if it cannot be made. */
static gml_tensor *typed_kv(program *p, reader *r, gml_type ty, int64_t B, int64_t G, int64_t tk,
                            int64_t d, int *taint) {
    const bool perm = chance(r, 40);
    const int64_t ne[4] = {B, perm ? tk : G, perm ? G : tk, d};
    entry *e = normal_leaf(p, r, 4, ne);
    if (!e) return NULL;
    e->read = true;
    *taint |= e->taint;
    gml_tensor *t = e->t;
    if (ty != GML_F32) {
        gml_tensor *dst = gml_new_tensor(p->ctx, ty, 4, ne);
        t = dst ? gml_cpy(p->ctx, t, dst) : NULL;
    }
    if (t && perm) t = gml_permute(p->ctx, t, (int[]){0, 2, 1, 3});
    if (t && chance(r, 35)) { /* a cache: n new rows at run-time positions */
        const int64_t n = 1 + pick(r, (int)tk);
        entry *rows = normal_leaf(p, r, 4, (int64_t[]){B, G, n, d});
        /* indices in range: a failing compute would check nothing here
         * (op_set_rows has the out-of-range ones) */
        const bool per_batch = chance(r, 50);
        entry *idx = rows ? new_leaf(p, r, GML_I32, per_batch ? 2 : 1,
                                     per_batch ? (int64_t[]){B, n} : (int64_t[]){n}, V_INDEX,
                                     (int32_t)tk, false)
                          : NULL;
        if (!idx) return NULL;
        idx->read = rows->read = true;
        e->written = true; /* an f32 cache is the leaf itself */
        *taint |= rows->taint;
        t = gml_set_rows(p->ctx, t, rows->t, idx->t);
    }
    return t;
}

/* t (f16 or bf16; f32 as it is) copied into a fresh f32 tensor of its shape. */
static gml_tensor *as_f32_copy(program *p, gml_tensor *t) {
    if (!t || t->type == GML_F32) return t;
    int64_t ne[4];
    const int nd = shape_of(t, ne);
    gml_tensor *dst = gml_new_tensor(p->ctx, GML_F32, nd, ne);
    return dst ? gml_cpy(p->ctx, t, dst) : NULL;
}

/* flash_attn on f16 or bf16 K and V (or one of them f32), as a KV cache of
 * that type gives them, and sometimes its twin on f32 K and V holding the
 * converted values: gml_flash_attn's contract is that the two are bitwise
 * equal on every ISA and thread count. */
static void op_flash_attn_typed(program *p, reader *r) {
    entry *q = chance(r, 40) ? take(p, r, false, 4) : NULL;
    if (!q) {
        q = normal_leaf(p, r, 4, (int64_t[]){small_dim(r), small_dim(r), rand_dim(r), rand_dim(r)});
        if (!q) return;
        q->read = true;
    }
    int64_t ne[4];
    shape_of(q->t, ne);
    const int64_t B = ne[0], H = ne[1], tq = ne[2], dk = ne[3];
    int64_t G = 1 + pick(r, (int)H);
    while (H % G) G--;
    const int64_t tk = rand_dim(r), dv = rand_dim(r);
    static const gml_type TY[] = {GML_F16, GML_BF16, GML_F32};
    gml_type tyk = TY[pick(r, 3)];
    const gml_type tyv = TY[pick(r, 3)];
    if (tyk == GML_F32 && tyv == GML_F32) tyk = GML_F16;
    int taint = q->taint | T_EXP;
    gml_tensor *kt = typed_kv(p, r, tyk, B, G, tk, dk, &taint);
    gml_tensor *vt = kt ? typed_kv(p, r, tyv, B, G, tk, dv, &taint) : NULL;
    if (!vt) {
        gml_clear_error(p->ctx);
        return;
    }
    int64_t sne[4] = {B, H, tq, tk};
    entry *m = pick_mask(p, r, 4, sne);
    entry *lens = chance(r, 30) ? lens_leaf(p, r, B, tq, tk) : NULL;
    const float scale = chance(r, 50) ? 1.0f / sqrtf((float)dk) : pick_scale(r);
    gml_attn_opts o = {.mask = m ? m->t : NULL, .valid_lens = lens ? lens->t : NULL,
                       .causal = chance(r, 40)};
    taint |= m ? m->taint : 0;
    if (chance(r, 40)) taint |= pick_attn_opts(p, r, &o, true, B, H, tq, tk, false);
    entry *f = result(p, gml_flash_attn_ext(p->ctx, q->t, kt, vt, scale, &o), taint, 0);
    if (!f || !chance(r, 60) || p->n_twins == MAX_OUTS) return;
    gml_tensor *k32 = as_f32_copy(p, kt), *v32 = as_f32_copy(p, vt);
    entry *f32 = k32 && v32 ? result(p, gml_flash_attn_ext(p->ctx, q->t, k32, v32, scale, &o), taint, 0)
                            : NULL;
    if (!f32) {
        gml_clear_error(p->ctx);
        return;
    }
    f->keep = f32->keep = true;
    p->twins[p->n_twins][0] = f->t;
    p->twins[p->n_twins++][1] = f32->t;
}

/* Builds the program the bytes describe in p->ctx; false if nothing to
 * compute. Deterministic: the same bytes build the same graph in any context. */
static bool decode(program *p, const uint8_t *data, size_t size) {
    reader r = {data, size, 0};
    for (int i = 0; i < 8; i++) p->seed = p->seed << 8 | next_byte(&r);
    /* a first leaf or two, for the ops to start from */
    const int n_first = 1 + pick(&r, 2);
    for (int i = 0; i < n_first; i++) {
        int64_t ne[4];
        const int nd = 1 + pick(&r, 4);
        for (int d = 0; d < nd; d++) ne[d] = rand_dim(&r);
        normal_leaf(p, &r, nd, ne);
    }
    if (g_kinds < 0) {
        const char *k = getenv("GGMLITE_FUZZ_DIFF_KINDS");
        g_kinds = getenv("GGMLITE_FUZZ_DIFF_V1") ? 20 : k && atoi(k) >= 20 && atoi(k) <= N_KINDS ? atoi(k) : N_KINDS;
    }
    const int n_ops = 1 + pick(&r, MAX_OPS);
    for (int i = 0; i < n_ops && r.i < r.n; i++) {
        switch (pick(&r, g_kinds)) {
        case 0: op_view(p, &r); break;
        case 1: op_reshape(p, &r); break;
        case 2: op_permute(p, &r); break;
        case 3: op_transpose(p, &r); break;
        case 4: op_cont(p, &r); break;
        case 5: op_cpy(p, &r); break;
        case 6: op_matmul(p, &r); break;
        case 7: op_linear(p, &r); break;
        case 8: op_binary(p, &r, gml_add); break;
        case 9: op_binary(p, &r, gml_mul); break;
        case 10: op_scale(p, &r); break;
        case 11: op_softmax(p, &r); break;
        case 12: op_repeat(p, &r); break;
        case 13: op_get_rows(p, &r); break;
        case 14: op_set_rows(p, &r); break;
        case 15: op_valid_len_mask(p, &r); break;
        case 16: op_relpos(p, &r); break;
        case 17: op_flash_attn(p, &r); break;
        case 18: op_attention_chain(p, &r); break;
        case 19: op_after(p, &r); break;
        case 20: op_binary(p, &r, chance(&r, 50) ? gml_div : gml_sub); break;
        case 21: op_unary(p, &r); break;
        case 22: op_slice_concat(p, &r); break;
        case 23: op_reduce(p, &r); break;
        case 24: op_rope(p, &r); break;
        case 25: op_norm(p, &r); break;
        case 26: op_typed(p, &r); break;
        default: op_flash_attn_typed(p, &r); break;
        }
    }
    if (gml_last_error(p->ctx)[0]) gml_clear_error(p->ctx);
    for (int i = 0; i < p->n_pool && p->n_outs < MAX_OUTS; i++) {
        const entry *e = &p->pool[i];
        if (e->is_leaf || (e->read && !p->all_outs && !e->keep)) continue;
        p->out_taint[p->n_outs] = e->taint;
        p->outs[p->n_outs++] = e->t;
    }
    return p->n_outs > 0;
}

static const program *g_prog; /* for the failure report */
static gml_graph *g_graph;
static _Noreturn void fail(const char *fmt, ...) GML_PRINTF(1, 2);

/* The argument `name` of node t's call (its scale, causal). */
static gml_arg arg_of(const gml_tensor *t, const char *name) {
    gml_arg args[GML_MAX_ARGS];
    const gml_op_form *f = gml_form_of_op(t->op);
    if (!f || !gml_form_get_args(t, args)) __builtin_trap();
    for (int i = 0; i < gml_form_n_args(f); i++)
        if (strcmp(gml_form_arg(f, i)->name, name) == 0) return args[i];
    __builtin_trap();
}
static double float_arg(const gml_tensor *t, const char *name) { return arg_of(t, name).f; }

/* ---- the masking contracts, checked on every run --------------------------
 * Independently of the reference, each softmax and flash_attn node of a
 * computed graph is checked row by row against the contracts of MASKS,
 * gml_softmax and gml_flash_attn (as the lead decided them):
 *   - a key is masked iff causal (or valid lens) hide it or its mask is -inf
 *     (a -inf score, softmax's x included, is an overflow, not a mask);
 *   - a row with no visible key is all zeros;
 *   - softmax: a visible score that is not finite makes the row NaN (its
 *     visible keys; masked ones may be NaN or 0, the contract does not say);
 *     else the row is finite and masked keys weigh exactly 0;
 *   - flash_attn: the row is all NaN if q's row, or a visible key's mask, K
 *     or V row, is not finite, or a visible key's exact score (in double)
 *     is beyond float's range; else nothing is required here (a partial sum
 *     may overflow in float: NaN is allowed, the documented difference).
 * Masked keys' V rows and mask values beyond -inf never count. */

/* The value at an index of an f32, f16 or bf16 tensor (typed: converted). */
static float at_f32(const gml_tensor *h, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    const char *at = (const char *)h->data + i0 * h->nb[0] + i1 * h->nb[1] + i2 * h->nb[2] + i3 * h->nb[3];
    if (h->type == GML_F16 || h->type == GML_BF16) {
        uint16_t u;
        memcpy(&u, at, 2);
        return h->type == GML_F16 ? gml_fp16_to_fp32(u) : gml_bf16_to_fp32(u);
    }
    float v;
    memcpy(&v, at, 4);
    return v;
}
static int32_t at_i32(const gml_tensor *h, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    int32_t v;
    memcpy(&v, (const char *)h->data + i0 * h->nb[0] + i1 * h->nb[1] + i2 * h->nb[2] + i3 * h->nb[3], 4);
    return v;
}

typedef enum { ROW_ZEROS, ROW_NAN, ROW_FINITE, ROW_ANY } row_rule;

static void check_row(const gml_tensor *out, int64_t i0, int64_t i1, int64_t i2, row_rule rule,
                      const bool *masked, const char *run_name, const char *why) {
    for (int64_t c = 0; c < out->ne[3]; c++) {
        const float v = at_f32(out, i0, i1, i2, c);
        const bool ok = rule == ROW_ZEROS    ? v == 0.0f
                        : rule == ROW_NAN    ? isnan(v) || (masked && masked[c])
                        : rule == ROW_FINITE ? isfinite(v) && (!masked || !masked[c] || v == 0.0f)
                                             : true;
        if (!ok)
            fail("%s: %s row [%lld,%lld,%lld] element %lld is %g: %s", run_name,
                 gml_op_name(out->op), (long long)i0, (long long)i1, (long long)i2, (long long)c,
                 (double)v, why);
    }
}

/* The attention options of a softmax or flash_attn node, as its call form
 * holds them (ggmlite.h MASKS, "Options"). */
typedef struct attn_opts_of {
    double scale;
    int64_t causal, window;
    double softcap, alibi;
    const gml_tensor *lens, *pos, *sinks;
} attn_opts_of;

static attn_opts_of opts_of(const gml_tensor *t) {
    return (attn_opts_of){.scale = float_arg(t, "scale"), .causal = arg_of(t, "causal").i,
                          .window = arg_of(t, "window").i, .softcap = float_arg(t, "softcap"),
                          .alibi = float_arg(t, "alibi"), .lens = arg_of(t, "valid_lens").t,
                          .pos = arg_of(t, "positions").t, .sinks = arg_of(t, "sinks").t};
}

/* Query i of batch b: its position i' and the keys [*lo, *hi) that causal,
 * the window and the valid lengths leave it. */
static int64_t key_range(const attn_opts_of *o, int64_t b, int64_t i, int64_t tq, int64_t tk,
                         int64_t *lo, int64_t *hi) {
    const int64_t ip = o->pos ? at_i32(o->pos, 0, 0, b, i) : o->causal == 2 ? i : i + tk - tq;
    int64_t l = 0, h = tk;
    if (o->causal || o->window > 0) {
        h = ip + 1 < 0 ? 0 : ip + 1 < tk ? ip + 1 : tk;
        if (o->window > 0 && ip + 1 - o->window > l) l = ip + 1 - o->window;
    }
    if (o->lens) {
        const int32_t len = o->lens->n_dims == 1 ? at_i32(o->lens, 0, 0, 0, b) : at_i32(o->lens, 0, 0, b, i);
        if (len < h) h = len;
    }
    *lo = l < h ? l : h;
    *hi = h;
    return ip;
}

/* A scaled score s (x * scale, q.k * scale in double for flash_attn) after
 * the soft cap: a non-finite s stays NaN, as the ops make it. */
static double capped(const attn_opts_of *o, double s) {
    if (!(o->softcap > 0)) return s;
    return fabs(s) <= FLT_MAX ? o->softcap * tanh(s / o->softcap) : NAN;
}

/* The sink of head h: NaN or +inf makes a row with a visible key NaN; -inf
 * is no sink. */
static row_rule sink_rule(const attn_opts_of *o, int64_t h, row_rule rule) {
    if (!o->sinks || rule == ROW_ZEROS) return rule;
    const float sv = at_f32(o->sinks, 0, 0, 0, h);
    return isnan(sv) || sv == INFINITY ? ROW_NAN : rule;
}

static void check_softmax_contract(const gml_tensor *t, const char *run_name) {
    const gml_tensor *x = t->src[0], *m = t->src[1];
    const attn_opts_of o = opts_of(t);
    const int64_t tq = t->ne[2], tk = t->ne[3];
    bool masked[16];
    if (tk > 16) return;
    for (int64_t i0 = 0; i0 < t->ne[0]; i0++)
        for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
            for (int64_t i2 = 0; i2 < t->ne[2]; i2++) {
                int64_t lo, hi;
                key_range(&o, i0, i2, tq, tk, &lo, &hi);
                int visible = 0;
                bool bad = false;
                for (int64_t j = 0; j < tk; j++) {
                    const float mv = m ? at_f32(m, i0 % m->ne[0], i1 % m->ne[1], i2 % m->ne[2],
                                                m->ne[3] > 1 ? j : 0)
                                       : 0.0f;
                    const float xs = x->data ? at_f32(x, i0, i1, i2, j) * (float)o.scale : 0.0f;
                    const float sc = (o.softcap > 0 ? (float)capped(&o, xs) : xs) + mv;
                    masked[j] = j < lo || j >= hi || mv == -INFINITY;
                    if (masked[j]) continue;
                    visible++;
                    bad |= !isfinite(sc);
                }
                const row_rule rule = sink_rule(&o, i1, !visible ? ROW_ZEROS : bad ? ROW_NAN : ROW_FINITE);
                check_row(t, i0, i1, i2, rule, masked, run_name,
                          !visible ? "no visible key: zeros" : rule == ROW_NAN ? "a visible score or the sink is not finite: NaN row"
                                                                   : "finite visible scores: finite row, masked keys 0");
            }
}

static void check_flash_contract(const gml_tensor *t, const char *run_name) {
    const gml_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2], *m = t->src[3];
    const attn_opts_of o = opts_of(t);
    const int64_t H = t->ne[1], tq = q->ne[2], tk = k->ne[2], dk = q->ne[3], dv = v->ne[3];
    const int64_t rep = H / k->ne[1];
    for (int64_t b = 0; b < t->ne[0]; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < tq; i++) {
                int64_t lo, hi;
                key_range(&o, b, i, tq, tk, &lo, &hi);
                bool q_ok = true, bad = false, borderline = false;
                const char *why = "q's row is not finite: NaN row";
                int visible = 0;
                for (int64_t d = 0; d < dk; d++) q_ok &= isfinite(at_f32(q, b, h, i, d));
                for (int64_t j = lo; j < hi; j++) {
                    const float mv = m ? at_f32(m, b % m->ne[0], h % m->ne[1], i % m->ne[2],
                                                m->ne[3] > 1 ? j : 0)
                                       : 0.0f;
                    if (mv == -INFINITY) continue;
                    visible++;
                    bool kv_ok = isfinite(mv);
                    double dot = 0;
                    for (int64_t d = 0; d < dk; d++) {
                        const float kd = at_f32(k, b, h / rep, j, d);
                        kv_ok &= isfinite(kd);
                        dot += (double)at_f32(q, b, h, i, d) * kd;
                    }
                    for (int64_t c = 0; c < dv; c++) kv_ok &= isfinite(at_f32(v, b, h / rep, j, c));
                    const double pre = dot * o.scale, sc = capped(&o, pre) + mv;
                    const bool over = !(fabs(pre) <= FLT_MAX * (1 + 1e-6)) || !(fabs(sc) <= FLT_MAX * (1 + 1e-6));
                    if (!bad && !kv_ok) why = "a visible key's mask, K or V is not finite: NaN row";
                    else if (!bad && over) why = "a visible key's exact score is beyond float: NaN row";
                    bad |= !kv_ok || over;
                    borderline |= fabs(pre) > FLT_MAX * (1 - 1e-6) || fabs(sc) > FLT_MAX * (1 - 1e-6);
                }
                row_rule rule = !visible ? ROW_ZEROS : !q_ok || bad ? ROW_NAN : ROW_ANY;
                if (rule == ROW_NAN && borderline && q_ok) continue; /* a score at float's edge */
                rule = sink_rule(&o, h, rule);
                if (rule == ROW_NAN && !q_ok && !bad) why = "q's row is not finite: NaN row";
                else if (rule == ROW_NAN && q_ok && !bad) why = "the sink is NaN or +inf: NaN row";
                check_row(t, b, h, i, rule, NULL, run_name, !visible ? "no visible key: zeros" : why);
            }
}

static void check_contracts(const gml_graph *g, const char *run_name) {
    for (int i = 0; i < gml_graph_n_nodes(g); i++) {
        const gml_tensor *t = gml_graph_tensor(g, gml_graph_node(g, i));
        if (t->op == GML_OP_SOFTMAX) check_softmax_contract(t, run_name);
        else if (t->op == GML_OP_FLASH_ATTN) check_flash_contract(t, run_name);
    }
}

/* ---- running ------------------------------------------------------------- */

/* Writes every leaf's values where g computes with them (before each compute:
 * cpy and set_rows write their destinations). */
static void fill_leaves(const program *p, const gml_graph *g) {
    for (int i = 0; i < p->n_leaves; i++) {
        void *d = gml_graph_data(g, p->leaves[i].t);
        if (d) memcpy(d, p->leaves[i].bits, (size_t)p->leaves[i].n * 4);
    }
}

typedef struct run {
    char name[48];
    gml_status st;
    char err[256];
    uint32_t *bits[MAX_OUTS]; /* each output's values in logical order */
} run;

static void read_out(const gml_graph *g, const gml_tensor *t, uint32_t *out) {
    const gml_tensor *h = gml_graph_tensor(g, t);
    const char *base = h->data;
    int64_t e = 0;
    for (int64_t i0 = 0; i0 < h->ne[0]; i0++)
        for (int64_t i1 = 0; i1 < h->ne[1]; i1++)
            for (int64_t i2 = 0; i2 < h->ne[2]; i2++)
                for (int64_t i3 = 0; i3 < h->ne[3]; i3++)
                    memcpy(&out[e++], base + i0 * h->nb[0] + i1 * h->nb[1] + i2 * h->nb[2] + i3 * h->nb[3], 4);
}

static bool same_bits(uint32_t a, uint32_t b);
static float as_f32(uint32_t u);

/* Each twin pair (both outputs) bitwise equal in this run. */
static void check_twins(const program *p, const run *out) {
    for (int k = 0; k < p->n_twins; k++) {
        int at[2] = {-1, -1};
        for (int i = 0; i < p->n_outs; i++)
            for (int j = 0; j < 2; j++)
                if (p->outs[i] == p->twins[k][j]) at[j] = i;
        if (at[0] < 0 || at[1] < 0) continue; /* past MAX_OUTS */
        for (int64_t e = 0; e < gml_nelements(p->outs[at[0]]); e++)
            if (!same_bits(out->bits[at[0]][e], out->bits[at[1]][e]))
                fail("%s: flash_attn on typed K/V (output #%d) and on f32 K/V holding the "
                     "converted values (output #%d) differ at element %lld: %.9g vs %.9g",
                     out->name, at[0], at[1], (long long)e, (double)as_f32(out->bits[at[0]][e]),
                     (double)as_f32(out->bits[at[1]][e]));
    }
}

static void compute(const program *p, gml_graph *g, gml_isa isa, int threads, run *out) {
    snprintf(out->name, sizeof out->name, "%s%s x%d", gml_isa_name(isa),
             gml_get_no_alloc(p->ctx) ? " (planned)" : "", threads);
    if (gml_set_isa(isa) != GML_OK) __builtin_trap();
    fill_leaves(p, g);
    out->st = gml_graph_compute(g, threads);
    snprintf(out->err, sizeof out->err, "%s", gml_graph_error(g));
    for (int i = 0; i < p->n_outs; i++) {
        out->bits[i] = malloc((size_t)gml_nelements(p->outs[i]) * 4);
        if (!out->bits[i]) abort();
        if (out->st == GML_OK) read_out(g, p->outs[i], out->bits[i]);
    }
    if (out->st == GML_OK) check_twins(p, out);
    static int contracts = -1; /* GGMLITE_FUZZ_DIFF_CONTRACTS=0: skip them (to see other breaks) */
    if (contracts < 0) contracts = !getenv("GGMLITE_FUZZ_DIFF_CONTRACTS") || getenv("GGMLITE_FUZZ_DIFF_CONTRACTS")[0] != '0';
    if (out->st == GML_OK && !gml_get_no_alloc(p->ctx) && contracts) check_contracts(g, out->name);
}

static void free_run(run *r, int n_outs) {
    for (int i = 0; i < n_outs; i++) free(r->bits[i]);
}

static float as_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- checking ------------------------------------------------------------ */

static _Noreturn void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz_diff: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    if (g_graph) {
        fprintf(stderr, "graph (outputs:");
        for (int i = 0; i < g_prog->n_outs; i++)
            fprintf(stderr, " #%d=node %d", i, gml_graph_find(g_graph, g_prog->outs[i]));
        fprintf(stderr, "):\n");
        gml_graph_print(g_graph, stderr);
        for (int i = 0; i < g_prog->n_leaves && getenv("GGMLITE_FUZZ_DIFF_DUMP"); i++) {
            const leaf *l = &g_prog->leaves[i];
            fprintf(stderr, "%s:", l->t->name);
            for (int64_t e = 0; e < l->n; e++)
                if (l->t->type == GML_I32) fprintf(stderr, " %d", (int)(int32_t)l->bits[e]);
                else fprintf(stderr, " %g", (double)as_f32(l->bits[e]));
            fprintf(stderr, "\n");
        }
    }
    __builtin_trap();
}

/* NaN-aware bitwise equality: any NaN equals any NaN; else the same bits. */
static bool same_bits(uint32_t a, uint32_t b) {
    const bool na = (a & 0x7fffffffu) > 0x7f800000u, nb = (b & 0x7fffffffu) > 0x7f800000u;
    return na || nb ? na && nb : a == b;
}

/* across_isas: a and b ran under different fast ISAs; outputs made by
 * softmax or flash_attn (T_EXP) are then left to check_vs_ref. */
static void check_bitwise(const program *p, const run *a, const run *b, bool across_isas) {
    if (a->st != b->st || strcmp(a->err, b->err) != 0)
        fail("%s: status %d \"%s\", %s: status %d \"%s\"", a->name, (int)a->st, a->err, b->name,
             (int)b->st, b->err);
    if (a->st != GML_OK) return;
    for (int o = 0; o < p->n_outs; o++)
        for (int64_t e = 0; e < gml_nelements(p->outs[o]); e++)
            if (!(across_isas && (p->out_taint[o] & T_EXP)) && !same_bits(a->bits[o][e], b->bits[o][e]))
                fail("output #%d element %lld: %s gives %a (0x%08x), %s gives %a (0x%08x)", o,
                     (long long)e, a->name, (double)as_f32(a->bits[o][e]), a->bits[o][e], b->name,
                     (double)as_f32(b->bits[o][e]), b->bits[o][e]);
}

/* ---- error bounds --------------------------------------------------------
 * How far a fast result may be from the reference's. The reference
 * accumulates matmul and flash_attn in double, the fast kernels in float
 * (FMA, other orders), and their exp differs: every node's error bound is
 * propagated from its sources' through the graph, with each source's
 * largest finite magnitude taken from the reference run:
 *   copies, views, gathers: the source's bound (values move exactly);
 *   add: ea + eb + u |out|;  mul: ea |b| + eb |a| + u |out|;  scale: ea |s|;
 *   matmul [M,K]@[K,N]: K (ea |b| + eb |a|) + K^2 u |a| |b|;
 *   softmax: scores off by d = es |scale| + em + u |scores|, weights by 2d +
 *     1e-6 (exp), at most 1;
 *   flash_attn: d as for softmax with the dot products' bound, out off by
 *     min(2d + 1e-6, 1) |v| + ev + Tk u |v|.
 * u is float's epsilon times a safety factor of 8; fast_vs_ref_ok allows
 * the bound plus 1e-6 (1 + |ref|). Non-finite values are judged by class,
 * not by these bounds. */

#define U (8.0 * FLT_EPSILON)


/* max |x| of an f16, bf16 or q8_0 tensor (the graph's copy, with data);
 * q8_0 rows contiguous, at most 1024 values. */
static double max_abs_typed(const gml_tensor *h) {
    double m = 0;
    for (int64_t i0 = 0; i0 < h->ne[0]; i0++)
        for (int64_t i1 = 0; i1 < h->ne[1]; i1++)
            for (int64_t i2 = 0; i2 < h->ne[2]; i2++) {
                const char *row = (const char *)h->data + i0 * h->nb[0] + i1 * h->nb[1] + i2 * h->nb[2];
                float v[1024];
                const int64_t n = h->ne[3] < 1024 ? h->ne[3] : 1024;
                if (h->type == GML_Q8_0) {
                    gml_dequantize_row_q8_0((const gml_block_q8_0 *)(const void *)row, v, n - n % GML_QK8_0);
                } else {
                    for (int64_t i = 0; i < n; i++) {
                        uint16_t u;
                        memcpy(&u, row + i * h->nb[3], 2);
                        v[i] = h->type == GML_F16 ? gml_fp16_to_fp32(u) : gml_bf16_to_fp32(u);
                    }
                }
                for (int64_t i = 0; i < n - (h->type == GML_Q8_0 ? n % GML_QK8_0 : 0); i++)
                    if (isfinite(v[i]) && fabs(v[i]) > m) m = fabs(v[i]);
            }
    return m;
}

static double max_abs(const gml_graph *g, const gml_tensor *t) {
    const gml_tensor *h = gml_graph_tensor(g, t);
    if (!h || !h->data) return 0;
    if (h->type == GML_F16 || h->type == GML_BF16 || h->type == GML_Q8_0) return max_abs_typed(h);
    double m = 0;
    for (int64_t i0 = 0; i0 < h->ne[0]; i0++)
        for (int64_t i1 = 0; i1 < h->ne[1]; i1++)
            for (int64_t i2 = 0; i2 < h->ne[2]; i2++)
                for (int64_t i3 = 0; i3 < h->ne[3]; i3++) {
                    float v;
                    memcpy(&v, (const char *)h->data + i0 * h->nb[0] + i1 * h->nb[1] + i2 * h->nb[2] + i3 * h->nb[3], 4);
                    if (h->type == GML_F32 && isfinite(v) && fabs(v) > m) m = fabs(v);
                }
    return m;
}

/* err[id] for every tensor of g (ids of the allocating context), after a
 * reference compute of g. */
/* HUGE: a magnitude from which one more product or sum of at most 9 terms
 * may overflow float (9 * HUGE^2 < FLT_MAX): a tensor is huge if it, or any
 * tensor it is computed from, has a finite value above it in the reference
 * run. Chains of finite inputs get there too (a matrix squared 7 times). */
#define HUGE_VALUE 1e18

/* What the attention options add to a score's error: the soft cap's tanh
 * in float (a few ulp of c), ALiBi's slope * (j - i') in float (|j - i'|
 * below span plus the positions' range), the sink's own error. */
static double opts_err(const gml_graph *g, const gml_tensor *t, const double *err, double span) {
    const double c = float_arg(t, "softcap"), alibi = float_arg(t, "alibi");
    const gml_tensor *sinks = arg_of(t, "sinks").t;
    return (c > 0 ? 4 * U * c : 0) + (alibi > 0 ? 4 * U * (span + 8) : 0) +
           (sinks ? err[sinks->id] + U * max_abs(g, sinks) : 0);
}

/* rms_norm / layer_norm: y = (x - m) r w + b with r = 1 / sqrt(var + eps)
 * per row (m = 0, var = mean(x^2) for rms_norm). The fast kernels' float
 * statistics differ from the reference's double ones by about 256 ulp of
 * the row (blocks of 256), which r magnifies; the inputs' own errors move
 * x - m and r. r is taken at the row where it is largest, from the
 * reference's data. */
static double norm_bound(const gml_graph *g, const gml_tensor *t, double ex, double ew, double eb) {
    gml_arg args[GML_MAX_ARGS];
    if (!gml_form_get_args(t, args)) return INFINITY;
    const bool layer = t->op == GML_OP_LAYER_NORM;
    const float eps = args[layer ? 3 : 2].f;
    const gml_tensor *x = gml_graph_tensor(g, t->src[0]);
    if (!x || !x->data) return INFINITY;
    const int64_t d = x->ne[3];
    double rmax = 0;
    for (int64_t i0 = 0; i0 < x->ne[0]; i0++)
        for (int64_t i1 = 0; i1 < x->ne[1]; i1++)
            for (int64_t i2 = 0; i2 < x->ne[2]; i2++) {
                const char *row = (const char *)x->data + i0 * x->nb[0] + i1 * x->nb[1] + i2 * x->nb[2];
                double s = 0, s2 = 0;
                for (int64_t i = 0; i < d; i++) {
                    float v;
                    memcpy(&v, row + i * x->nb[3], 4);
                    s += v, s2 += (double)v * v;
                }
                const double m = layer ? s / (double)d : 0;
                const double var = fmax(0, s2 / (double)d - m * m);
                rmax = fmax(rmax, 1 / sqrt(var + eps));
            }
    const double wmax = t->src[1] ? max_abs(g, t->src[1]) : 1, xmax = max_abs(g, t->src[0]);
    const double dm = 300 * U * xmax + ex;  /* error of x - m, float stats */
    const double xhat = sqrt((double)d);    /* |x - m| r <= sqrt(d) */
    return wmax * (3 * dm * rmax + xhat * (600 * U + 3 * ex * rmax)) + ew * xhat + eb +
           8 * U * max_abs(g, t);
}

static void err_bound(const program *p, const gml_graph *g, double *err, bool *huge, int n_ids) {
    for (int i = 0; i < n_ids; i++) err[i] = 0, huge[i] = false;
    for (int i = 0; i < gml_graph_n_leafs(g); i++) {
        const gml_tensor *t = gml_graph_leaf(g, i);
        if (t->id >= 0 && t->id < n_ids) huge[t->id] = max_abs(g, t) > HUGE_VALUE;
    }
    for (int i = 0; i < gml_graph_n_nodes(g); i++) {
        const gml_tensor *t = gml_graph_node(g, i);
        bool h = max_abs(g, t) > HUGE_VALUE;
        for (int j = 0; j < GML_MAX_SRC; j++)
            if (t->src[j] && t->src[j]->id < n_ids) h |= huge[t->src[j]->id];
        if (t->id >= 0 && t->id < n_ids) huge[t->id] = h;
        const gml_tensor *a = t->src[0], *b = t->src[1];
        double ea = a ? err[a->id] : 0, eb = b ? err[b->id] : 0, e = 0;
        switch (t->op) {
        case GML_OP_ADD: e = ea + eb + U * max_abs(g, t); break;
        case GML_OP_MUL: e = ea * max_abs(g, b) + eb * max_abs(g, a) + U * max_abs(g, t); break;
        case GML_OP_SCALE:
            e = ea * fabs(float_arg(t, "s")) + U * max_abs(g, t);
            break;
        case GML_OP_MATMUL: {
            const double K = (double)a->ne[3], A = max_abs(g, a), B = max_abs(g, b);
            e = K * (ea * B + eb * A + ea * eb) + K * K * U * A * B;
            break;
        }
        case GML_OP_SOFTMAX: {
            const double s = fabs(float_arg(t, "scale"));
            const double d = ea * s + eb + U * (max_abs(g, a) * s + (b ? max_abs(g, b) : 0)) +
                             opts_err(g, t, err, (double)t->ne[2] + (double)t->ne[3]);
            e = fmin(2 * d + 1e-6, 1.0);
            break;
        }
        case GML_OP_FLASH_ATTN: {
            const gml_tensor *v = t->src[2], *m = t->src[3];
            const double s = fabs(float_arg(t, "scale")), dk = (double)a->ne[3], Q = max_abs(g, a),
                         Kx = max_abs(g, b), V = max_abs(g, v);
            const double d = s * (dk * (ea * Kx + eb * Q + ea * eb) + dk * dk * U * Q * Kx) +
                             (m ? err[m->id] + U * max_abs(g, m) : 0) +
                             opts_err(g, t, err, (double)a->ne[2] + (double)b->ne[2]);
            e = fmin(2 * d + 1e-6, 1.0) * V + err[v->id] + (double)b->ne[2] * U * V;
            break;
        }
        case GML_OP_SUB: e = ea + eb + U * max_abs(g, t); break;
        case GML_OP_DIV: e = ea == 0 && eb == 0 ? U * max_abs(g, t) : INFINITY; break;
        case GML_OP_NEG: e = ea; break;
        case GML_OP_EXP: e = (ea + U) * max_abs(g, t); break;
        case GML_OP_TANH:
        case GML_OP_SIGMOID: e = ea + U * max_abs(g, t); break;
        case GML_OP_SILU:
        case GML_OP_GELU:
        case GML_OP_GELU_TANH: e = 1.2 * ea + U * max_abs(g, t); break;
        case GML_OP_CONCAT: e = fmax(ea, eb); break;
        case GML_OP_SUM: e = (double)a->ne[3] * (ea + U * max_abs(g, a)); break;
        case GML_OP_MEAN: e = ea + U * max_abs(g, a); break;
        case GML_OP_ROPE: e = 2 * ea + 2 * U * max_abs(g, a); break;
        case GML_OP_SET_ROWS: e = fmax(ea, eb); break;
        /* after(t, dep): t read once dep ran, and dep may have written into
         * t (a cpy into a window of t, read back whole): t's values carry
         * dep's error too */
        case GML_OP_AFTER: e = fmax(ea, eb); break;
        case GML_OP_CPY: /* into f16, bf16, q8_0: an input error may round to the next step */
            e = t->type == GML_F16    ? ea + 0x1p-10 * max_abs(g, a) + 0x1p-24
                : t->type == GML_BF16 ? ea + 0x1p-7 * max_abs(g, a)
                : t->type == GML_Q8_0 ? ea + 2.0 * max_abs(g, a) / 127
                                      : ea;
            break;
        case GML_OP_RMS_NORM:
        case GML_OP_LAYER_NORM:
            e = norm_bound(g, t, ea, b ? eb : 0, t->src[2] ? err[t->src[2]->id] : 0);
            break;
        case GML_OP_VALID_LEN_MASK:
        case GML_OP_RELPOS_INDEX: e = 0; break;
        default: e = ea; break; /* views, cont, cpy, repeat, get_rows, after */
        }
        if (t->id >= 0 && t->id < n_ids) err[t->id] = isnan(e) ? INFINITY : e;
    }
    (void)p;
}

/* THE RULES: is fast value f acceptable where the reference gives r?
 * huge: the output is T_HUGE (huge inputs) or downstream of a tensor whose
 * reference values pass HUGE_VALUE; bound is its error bound (err_bound).
 *  0. huge: not compared. The documented difference: fast kernels
 *     accumulate in float, so a partial sum may overflow (inf, or NaN from
 *     inf - inf; a NaN row in flash_attn) where the reference's double sum
 *     fits, and downstream of that anything may differ (a matmul's -inf in
 *     the fast run, NaN in the reference, is a masked key to a softmax in
 *     one, a NaN row in the other). Huge outputs still get the bitwise
 *     checks among fast runs and against the planner, and check_contracts.
 *  1. both NaN, or the same infinity: yes.
 *  2. both finite: |f - r| <= bound + 1e-6 (1 + |r|).
 *  3. anything else (a non-finite value on one side only, NaN vs inf, +inf
 *     vs -inf): a discrepancy. Without huge values, NaN and inf propagate
 *     alike in float and double, in any order; a NaN or inf input never
 *     excuses a difference: a masked key's NaN V, a masked NaN score, must
 *     not leak (MASKS, gml_flash_attn).
 * i32 outputs must be equal (checked by the caller as bits). */
static bool fast_vs_ref_ok(float f, float r, bool huge, double bound) {
    if (huge) return true;                                            /* 0 */
    if ((isnan(f) && isnan(r)) || (isinf(f) && f == r)) return true; /* 1 */
    if (isfinite(f) && isfinite(r))                                   /* 2 */
        return fabs((double)f - (double)r) <= bound + 1e-6 * (1 + fabs((double)r));
    return false;                                                     /* 3 */
}

static void check_vs_ref(const program *p, const run *fast, const run *ref, const double *err,
                         const bool *huge) {
    if (fast->st != ref->st || strcmp(fast->err, ref->err) != 0)
        fail("%s: status %d \"%s\", %s: status %d \"%s\"", fast->name, (int)fast->st, fast->err,
             ref->name, (int)ref->st, ref->err);
    if (fast->st != GML_OK) return;
    for (int o = 0; o < p->n_outs; o++) {
        const gml_tensor *t = p->outs[o];
        const double bound = err[t->id];
        const bool is_huge = (p->out_taint[o] & T_HUGE) || huge[t->id];
        for (int64_t e = 0; e < gml_nelements(t); e++) {
            const uint32_t fb = fast->bits[o][e], rb = ref->bits[o][e];
            if (t->type == GML_I32 ? fb == rb
                                   : fast_vs_ref_ok(as_f32(fb), as_f32(rb), is_huge, bound))
                continue;
            fail("output #%d element %lld: %s gives %.9g, %s gives %.9g (bound %g, taint %d)", o,
                 (long long)e, fast->name, (double)as_f32(fb), ref->name, (double)as_f32(rb), bound,
                 p->out_taint[o]);
        }
    }
}

/* ---- the target ------------------------------------------------------------ */

#define ARENA (1 << 22)
static _Alignas(64) unsigned char arena_alloc[ARENA], arena_plan[1 << 20];
static leaf leaves_alloc[MAX_LEAVES], leaves_plan[MAX_LEAVES];

static int specials_enabled(void) {
    static int on = -1;
    if (on < 0) {
        const char *s = getenv("GGMLITE_FUZZ_DIFF_SPECIALS");
        on = s && *s ? s[0] != '0' : FUZZ_DIFF_SPECIALS_DEFAULT;
    }
    return on;
}

enum { N_FAST = GML_TEST_N_ISAS - 1, MAX_RUNS = 2 + N_FAST * 4 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 8) return 0;
    static program pa, pp; /* big: static */
    memset(&pa, 0, sizeof pa);
    memset(&pp, 0, sizeof pp);
    pa.specials = pp.specials = specials_enabled();
    pa.all_outs = pp.all_outs = getenv("GGMLITE_FUZZ_DIFF_ALL_OUTPUTS") != NULL;
    pa.leaves = leaves_alloc;
    pp.leaves = leaves_plan;
    pa.ctx = gml_init((gml_init_params){.mem_size = ARENA, .mem_buffer = arena_alloc});
    pp.ctx = gml_init((gml_init_params){.mem_size = sizeof arena_plan, .mem_buffer = arena_plan, .no_alloc = true});
    if (!pa.ctx || !pp.ctx) __builtin_trap();
    const bool ok_a = decode(&pa, data, size), ok_p = decode(&pp, data, size);
    if (ok_a != ok_p || pa.n_outs != pp.n_outs || pa.n_leaves != pp.n_leaves) __builtin_trap();
    gml_graph *ga = ok_a ? gml_build_graph(pa.ctx, pa.outs, pa.n_outs) : NULL;
    gml_graph *gp = ok_p ? gml_build_graph(pp.ctx, pp.outs, pp.n_outs) : NULL;
    if (ok_a && (!ga || !gp || gml_graph_digest(ga) != gml_graph_digest(gp))) {
        fprintf(stderr, "fuzz_diff: the two builds differ: %s / %s\n", gml_last_error(pa.ctx),
                gml_last_error(pp.ctx));
        __builtin_trap();
    }
    if (!ok_a) goto done;
    g_prog = &pa;
    g_graph = ga;
    if (getenv("GGMLITE_FUZZ_DIFF_PRINT")) gml_graph_print(ga, stderr);
    if (gml_graph_plan(gp, NULL) != GML_OK) fail("plan: %s", gml_graph_error(gp));

    const gml_isa saved = gml_get_isa();
    static int all_threads = -1;
    if (all_threads < 0) all_threads = getenv("GGMLITE_FUZZ_DIFF_ALL_THREADS") != NULL;
    static const gml_isa FAST[N_FAST] = {GML_TEST_FAST_ISAS};
    static run runs[MAX_RUNS], planned;
    int nr = 0;
    compute(&pa, ga, GML_ISA_REFERENCE, 1, &runs[nr++]);
    /* the error bounds, from the reference's values (its data is still there) */
    int n_ids = 0;
    for (gml_tensor *t = gml_get_first_tensor(pa.ctx); t; t = gml_get_next_tensor(pa.ctx, t)) n_ids++;
    double *err = calloc((size_t)n_ids + 1, sizeof *err);
    bool *huge = calloc((size_t)n_ids + 1, sizeof *huge);
    if (!err || !huge) abort();
    if (runs[0].st == GML_OK) err_bound(&pa, ga, err, huge, n_ids);
    compute(&pa, ga, GML_ISA_REFERENCE, 3, &runs[nr++]);
    check_bitwise(&pa, &runs[0], &runs[1], false);
    compute(&pp, gp, GML_ISA_REFERENCE, 1, &planned);
    check_bitwise(&pa, &runs[0], &planned, false);
    free_run(&planned, pa.n_outs);

    const run *first_fast = NULL;
    for (int i = 0; i < N_FAST; i++) {
        if (!gml_cpu_has(FAST[i])) continue;
        const int base = nr;
        /* 1 thread, then all of 2-4, or one of them chosen by the input
         * (waking the pool's threads for each node is most of the time) */
        const int th_lo = all_threads ? 2 : 2 + (int)((data[1] + i) % 3), th_hi = all_threads ? 4 : th_lo;
        for (int th = 1; th <= th_hi; th = th == 1 ? th_lo : th + 1) {
            compute(&pa, ga, FAST[i], th, &runs[nr]);
            if (th > 1) check_bitwise(&pa, &runs[base], &runs[nr], false);
            nr++;
        }
        compute(&pp, gp, FAST[i], 1 + (int)((data[0] + i) % 4), &planned);
        check_bitwise(&pa, &runs[base], &planned, false);
        free_run(&planned, pa.n_outs);
        check_vs_ref(&pa, &runs[base], &runs[0], err, huge);
        if (!first_fast) first_fast = &runs[base];
        else check_bitwise(&pa, first_fast, &runs[base], true);
    }
    gml_set_isa(saved);
    for (int i = 0; i < nr; i++) free_run(&runs[i], pa.n_outs);
    free(err);
    free(huge);
done:
    g_graph = NULL;
    gml_graph_free(ga);
    gml_graph_free(gp);
    gml_free(pa.ctx);
    gml_free(pp.ctx);
    return 0;
}
