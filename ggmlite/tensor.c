/* Tensor queries: sizes, strides, contiguity, shapes as text, element access. */
#include "internal.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int64_t gml_nelements(const gml_tensor *t) {
    GML_NONNULL(t, 0);
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

size_t gml_nbytes(const gml_tensor *t) {
    GML_NONNULL(t, 0);
    if (gml_type_block_size(t->type) > 1) {
        /* blocked (q8_0): a leaf, rows of ne[3] / block blocks; its views
         * are permutations of a whole leaf (context.c), spanning the leaf */
        if (t->view_src) return gml_nbytes(t->view_src);
        size_t n = gml_row_size(t->type, t->ne[3]);
        for (int i = 0; i < GML_MAX_DIMS - 1; i++) n += (size_t)(t->ne[i] - 1) * t->nb[i];
        return n;
    }
    size_t n = gml_type_size(t->type);
    for (int i = 0; i < GML_MAX_DIMS; i++) n += (size_t)(t->ne[i] - 1) * t->nb[i];
    return n;
}

size_t gml_storage_extent(const gml_tensor *t) { return t->view_offs + gml_nbytes(t); }

int64_t gml_dim(const gml_tensor *t, int d) {
    GML_NONNULL(t, 0);
    int ax = gml_axis(t, d);
    return ax < 0 ? 0 : t->ne[ax];
}

bool gml_is_contiguous(const gml_tensor *t) {
    GML_NONNULL(t, false);
    const int64_t blk = gml_type_block_size(t->type);
    if (blk > 1 && t->view_src) return false; /* a permuted q8_0 leaf */
    size_t want = gml_type_size(t->type);
    for (int i = GML_MAX_DIMS - 1; i >= 0; i--) {
        const int64_t n = i == GML_MAX_DIMS - 1 ? t->ne[i] / blk : t->ne[i];
        if (n != 1 && t->nb[i] != want) return false;
        want *= (size_t)n;
    }
    return true;
}

bool gml_is_view(const gml_tensor *t) {
    GML_NONNULL(t, false);
    return t->view_src != NULL;
}

bool gml_same_shape(const gml_tensor *a, const gml_tensor *b) {
    GML_NONNULL(a, false);
    GML_NONNULL(b, false);
    if (a->n_dims != b->n_dims) return false;
    for (int i = 0; i < GML_MAX_DIMS; i++)
        if (a->ne[i] != b->ne[i]) return false;
    return true;
}

char *gml_format_shape(const gml_tensor *t, char *buf, size_t size) {
    GML_NONNULL(buf, NULL);
    if (!t) {
        snprintf(buf, size, "(null)");
        return buf;
    }
    size_t n = 0;
    n += (size_t)snprintf(buf + n, size > n ? size - n : 0, "[");
    for (int i = GML_MAX_DIMS - t->n_dims; i < GML_MAX_DIMS; i++)
        n += (size_t)snprintf(buf + n, size > n ? size - n : 0, "%s%" PRId64,
                              i > GML_MAX_DIMS - t->n_dims ? "," : "", t->ne[i]);
    snprintf(buf + n, size > n ? size - n : 0, "]");
    return buf;
}

char *gml_format_call(const char *op, gml_tensor *const *src, int n_src, char *buf, size_t size) {
    size_t n = (size_t)snprintf(buf, size, "%s", op);
    int named = 0;
    for (int i = 0; i < n_src; i++) {
        if (!src[i]) continue;
        n += (size_t)snprintf(buf + GML_MIN(n, size), n < size ? size - n : 0, "%s%s",
                              named++ ? ", " : "(", src[i]->name);
    }
    if (named) snprintf(buf + GML_MIN(n, size), n < size ? size - n : 0, ")");
    return buf;
}

/* The address of element idx of t (n_dims indices, outermost first), or NULL
 * when the call is a mistake: no tensor or index, a type other than want, no
 * data, or an index outside [0, size). Always checked, also without asserts:
 * a bad index must never read or write outside the tensor. */
static char *elem_ptr(const gml_tensor *t, const int64_t *idx, gml_type want) {
    if (!t || !idx || t->type != want || !t->data) return NULL;
    if (t->n_dims < 1 || t->n_dims > GML_MAX_DIMS) return NULL;
    int64_t i[GML_MAX_DIMS] = {0, 0, 0, 0};
    for (int d = 0; d < t->n_dims; d++) {
        const int ax = GML_MAX_DIMS - t->n_dims + d;
        if (idx[d] < 0 || idx[d] >= t->ne[ax]) return NULL;
        i[ax] = idx[d];
    }
    return gml_ptr(t, i[0], i[1], i[2], i[3]);
}

float gml_get_f32(const gml_tensor *t, const int64_t *idx) {
    const char *p = elem_ptr(t, idx, GML_F32);
    if (!p) return NAN;
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

bool gml_set_f32(gml_tensor *t, const int64_t *idx, float v) {
    char *p = elem_ptr(t, idx, GML_F32);
    if (p) memcpy(p, &v, sizeof v);
    return p != NULL;
}

int32_t gml_get_i32(const gml_tensor *t, const int64_t *idx) {
    const char *p = elem_ptr(t, idx, GML_I32);
    if (!p) return INT32_MIN;
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

bool gml_set_i32(gml_tensor *t, const int64_t *idx, int32_t v) {
    char *p = elem_ptr(t, idx, GML_I32);
    if (p) memcpy(p, &v, sizeof v);
    return p != NULL;
}

bool gml_broadcast_shape(gml_context *ctx, const char *op, const gml_tensor *a,
                         const gml_tensor *b, int64_t ne[GML_MAX_DIMS], int *n_dims) {
    for (int i = 0; i < GML_MAX_DIMS; i++) {
        if (a->ne[i] != b->ne[i] && a->ne[i] != 1 && b->ne[i] != 1) {
            char sa[GML_SHAPE_MAX], sb[GML_SHAPE_MAX];
            int n = GML_MAX(a->n_dims, b->n_dims);
            gml_fail(ctx, "%s(%s, %s): shapes %s and %s do not broadcast (dim %d of the result: "
                     "%" PRId64 " vs %" PRId64 ")", op, a->name, b->name, GML_SHAPE(a, sa),
                     GML_SHAPE(b, sb), i - (GML_MAX_DIMS - n), a->ne[i], b->ne[i]);
            return false;
        }
        ne[i] = GML_MAX(a->ne[i], b->ne[i]);
    }
    *n_dims = GML_MAX(a->n_dims, b->n_dims);
    return true;
}

bool gml_broadcasts_to(const gml_tensor *a, const gml_tensor *t) {
    if (a->n_dims > t->n_dims) return false;
    for (int i = 0; i < GML_MAX_DIMS; i++)
        if (a->ne[i] != 1 && a->ne[i] != t->ne[i]) return false;
    return true;
}

bool gml_expect_type(gml_context *ctx, const char *op, const gml_tensor *t, gml_type want) {
    if (t->type == want) return true;
    char s[GML_SHAPE_MAX];
    gml_fail(ctx, "%s(%s): '%s' must be %s, got %s %s", op, t->name, t->name, gml_type_name(want),
             gml_type_name(t->type), GML_SHAPE(t, s));
    return false;
}

/* ---- overlap ----------------------------------------------------------------
 * Element [i] of a tensor starts at byte base + sum_k i_k nb_k (strides are
 * never negative). Two elements, of one tensor or of two, share a byte iff
 * their starts x, y satisfy -(ea - 1) <= x - y <= eb - 1 (ea, eb: the element
 * sizes). Writing x - y as a sum of terms c_k nb_k over the dims of both
 * tensors (c_k = i_k for the first, -j_k for the second; for one tensor
 * against itself c_k = i_k - j_k, not all zero), the question is whether a
 * bounded integer sum reaches an interval. find_sum answers it exactly by a
 * depth-first search over the terms in decreasing stride order: at each term
 * only the c that leave the rest of the interval reachable by the inner terms
 * are tried, so tensors whose strides nest (each at least the extent of the
 * smaller ones: every layout views, permutes and slices make) take one branch
 * per term; the last two terms are solved in closed form (solve_two). Dims
 * of one stride (of the two tensors) are one term, c the sum of theirs.
 * Layouts whose strides interleave may take more branches; past a budget of
 * steps the search gives up and the answer is "maybe". */

#define OVERLAP_BUDGET (1 << 16) /* search steps before "maybe" */
#define OVERLAP_TERMS (2 * GML_MAX_DIMS)

/* One stride s and the dims that have it, c the sum of their parts. */
typedef struct overlap_term {
    int64_t s, lo, hi; /* stride (> 0), range of c: the sums of the parts' ranges */
    int n_parts;
    struct { int who, ax; int64_t lo, hi; } part[OVERLAP_TERMS];
} overlap_term;

typedef struct overlap_search {
    overlap_term t[OVERLAP_TERMS];
    int n;
    int64_t min_in[OVERLAP_TERMS + 1], max_in[OVERLAP_TERMS + 1]; /* sums of terms k.. */
    int64_t c[OVERLAP_TERMS];
    bool nonzero; /* one tensor against itself: some c must be nonzero */
    long steps;
} overlap_search;

static int64_t floor_div(int64_t a, int64_t b) { /* b > 0 */
    return a / b - (a % b != 0 && a < 0);
}
static int64_t ceil_div(int64_t a, int64_t b) { /* b > 0 */
    return a / b + (a % b != 0 && a > 0);
}

static int64_t mod_pos(int64_t a, int64_t m) { /* a mod m in [0, m), m > 0 */
    const int64_t r = a % m;
    return r < 0 ? r + m : r;
}

/* g = gcd(a, b) for a, b > 0, with a x + b y = g. */
static int64_t gcd_ext(int64_t a, int64_t b, int64_t *x, int64_t *y) {
    int64_t x0 = 1, y0 = 0, x1 = 0, y1 = 1;
    while (b) {
        const int64_t q = a / b, r = a % b, x2 = x0 - q * x1, y2 = y0 - q * y1;
        a = b;
        b = r;
        x0 = x1;
        y0 = y1;
        x1 = x2;
        y1 = y2;
    }
    *x = x0;
    *y = y0;
    return a;
}

/* a b mod m, for 0 <= a, b < m < 2^62, without overflow. */
static int64_t mul_mod(int64_t a, int64_t b, int64_t m) {
    int64_t r = 0;
    for (; b; b >>= 1) {
        if (b & 1) r = r + a >= m ? r + a - m : r + a;
        a = a + a >= m ? a + a - m : a + a;
    }
    return r;
}

/* The last two terms p, q in closed form: c_p s_p + c_q s_q = T for some T
 * in [t0, t1]. With g = gcd(s_p, s_q), a = s_p / g, b = s_q / g, U = T / g,
 * the c_p that solve it are one class mod b; the bounds of c_q bound c_p to
 * an interval, and the member of the class there nearest 0 is taken. */
static int solve_two(overlap_search *o, int k, int64_t t0, int64_t t1, bool any) {
    const overlap_term *p = &o->t[k], *q = &o->t[k + 1];
    int64_t x, y;
    const int64_t g = gcd_ext(p->s, q->s, &x, &y), a = p->s / g, b = q->s / g;
    for (int64_t T = ceil_div(t0, g) * g; T <= t1; T += g) {
        const int64_t U = T / g;
        /* c_q in [lo, hi] <=> c_p a in [U - hi b, U - lo b] */
        const int64_t L = GML_MAX(p->lo, ceil_div(U - q->hi * b, a));
        const int64_t H = GML_MIN(p->hi, floor_div(U - q->lo * b, a));
        if (L > H) continue;
        const int64_t cls = mul_mod(mod_pos(U, b), mod_pos(x, b), b); /* c_p = U x mod b */
        const int64_t z = GML_MAX(L, GML_MIN(H, 0));
        const int64_t up = z + mod_pos(cls - z, b); /* the least of the class >= z */
        const int64_t cand[3] = {up, up - b, up + b};
        int best = -1;
        for (int i = 0; i < 3; i++) {
            const int64_t c = cand[i];
            if (c < L || c > H) continue;
            if (!any && o->nonzero && c == 0 && U == 0) continue; /* then c_q = 0 too */
            if (best < 0 || (c < 0 ? -c : c) < (cand[best] < 0 ? -cand[best] : cand[best])) best = i;
        }
        if (best < 0) continue;
        o->c[k] = cand[best];
        o->c[k + 1] = (U - cand[best] * a) / b;
        return 1;
    }
    return 0;
}

/* 1: some c (from term k on) puts the sum in [t0, t1]; 0: none; -1: gave up. */
static int find_sum(overlap_search *o, int k, int64_t t0, int64_t t1, bool any) {
    if (++o->steps > OVERLAP_BUDGET) return -1;
    if (k == o->n) return t0 <= 0 && 0 <= t1 && (any || !o->nonzero);
    if (k == o->n - 2) return solve_two(o, k, t0, t1, any);
    const overlap_term *t = &o->t[k];
    const int64_t c0 = GML_MAX(t->lo, ceil_div(t0 - o->max_in[k + 1], t->s));
    const int64_t c1 = GML_MIN(t->hi, floor_div(t1 - o->min_in[k + 1], t->s));
    if (c0 > c1) return 0;
    /* nearest 0 first, so that the two elements a message names are the
     * first ones (small indices) */
    const int64_t from = GML_MAX(c0, GML_MIN(c1, 0));
    for (int64_t d = 0; from + d <= c1 || from - d >= c0; d++)
        for (int side = 0; side < (d ? 2 : 1); side++) {
            const int64_t c = side ? from - d : from + d;
            if (c < c0 || c > c1) continue;
            o->c[k] = c;
            const int r = find_sum(o, k + 1, t0 - c * t->s, t1 - c * t->s, any || c != 0);
            if (r) return r;
        }
    return 0;
}

static int cmp_term(const void *a, const void *b) {
    const overlap_term *x = a, *y = b;
    return x->s < y->s ? 1 : x->s > y->s ? -1 : 0; /* decreasing stride */
}

/* Adds t's dims of size > 1 and stride > 0, each with c in [lo, hi]:
 * [0, n - 1] for who 0, [-(n - 1), 0] for who 1, both for one tensor against
 * itself (c = i - j). A stride already there gets one more part. */
static void add_terms(overlap_search *o, const gml_tensor *t, int who, bool both_signs) {
    for (int k = 0; k < GML_MAX_DIMS; k++) {
        if (t->ne[k] < 2 || t->nb[k] == 0) continue;
        const int64_t hi = who == 0 ? t->ne[k] - 1 : 0;
        const int64_t lo = who == 0 && !both_signs ? 0 : -(t->ne[k] - 1);
        overlap_term *m = NULL;
        for (int j = 0; j < o->n && !m; j++)
            if (o->t[j].s == (int64_t)t->nb[k]) m = &o->t[j];
        if (!m) {
            m = &o->t[o->n++];
            *m = (overlap_term){.s = (int64_t)t->nb[k]};
        }
        m->lo += lo;
        m->hi += hi;
        m->part[m->n_parts].who = who;
        m->part[m->n_parts].ax = k;
        m->part[m->n_parts].lo = lo;
        m->part[m->n_parts++].hi = hi;
    }
}

/* Runs the search for sums in [t0, t1]; fills w's indices from the solution. */
static gml_overlap search(overlap_search *o, int64_t t0, int64_t t1, gml_overlap_witness *w) {
    qsort(o->t, (size_t)o->n, sizeof *o->t, cmp_term);
    o->min_in[o->n] = o->max_in[o->n] = 0;
    for (int k = o->n - 1; k >= 0; k--) {
        o->min_in[k] = o->min_in[k + 1] + o->t[k].lo * o->t[k].s;
        o->max_in[k] = o->max_in[k + 1] + o->t[k].hi * o->t[k].s;
    }
    const int r = find_sum(o, 0, t0, t1, false);
    if (r <= 0) return r < 0 ? GML_OVERLAP_MAYBE : GML_OVERLAP_NO;
    for (int k = 0; k < o->n; k++) {
        /* split c among the parts (every range holds 0): each part from 0
         * towards c's sign, as far as its range and what is left allow */
        const overlap_term *t = &o->t[k];
        int64_t left = o->c[k];
        for (int q = 0; q < t->n_parts; q++) {
            const int64_t c = left > 0 ? GML_MIN(left, t->part[q].hi) : GML_MAX(left, t->part[q].lo);
            const int ax = t->part[q].ax;
            left -= c;
            if (o->nonzero) { /* c = i - j */
                w->ia[ax] = c > 0 ? c : 0;
                w->ib[ax] = c > 0 ? 0 : -c;
            } else if (t->part[q].who == 0) {
                w->ia[ax] = c;
            } else {
                w->ib[ax] = -c;
            }
        }
    }
    return GML_OVERLAP_YES;
}

static void clear_witness(gml_overlap_witness *w) {
    memset(w, 0, sizeof *w);
    w->dim = -1;
}

/* A q8_0 leaf as the overlap checks see it: its blocks as elements (ne[3]
 * counted in blocks of type_size bytes each). Other tensors as they are. */
static const gml_tensor *as_blocks(const gml_tensor *t, gml_tensor *tmp) {
    const int64_t blk = gml_type_block_size(t->type);
    if (blk == 1) return t;
    *tmp = *t;
    tmp->ne[GML_MAX_DIMS - 1] /= blk;
    return tmp;
}

gml_overlap gml_self_overlap(const gml_tensor *t, gml_overlap_witness *w) {
    gml_tensor tmp_t;
    t = as_blocks(t, &tmp_t);
    gml_overlap_witness unused;
    if (!w) w = &unused;
    clear_witness(w);
    for (int k = 0; k < GML_MAX_DIMS; k++)
        if (t->ne[k] > 1 && t->nb[k] == 0) {
            w->dim = k;
            w->ib[k] = 1;
            return GML_OVERLAP_YES;
        }
    /* two dims of one stride: [.., 1, .., 0, ..] and [.., 0, .., 1, ..] meet
     * (and in the search below each stride is then one dim, so "some c
     * nonzero" is "some index differs") */
    for (int k = 0; k < GML_MAX_DIMS; k++)
        for (int j = k + 1; j < GML_MAX_DIMS; j++)
            if (t->ne[k] > 1 && t->ne[j] > 1 && t->nb[k] == t->nb[j]) {
                w->ia[k] = w->ib[j] = 1;
                return GML_OVERLAP_YES;
            }
    overlap_search o = {.nonzero = true};
    add_terms(&o, t, 0, true);
    const int64_t e = (int64_t)gml_type_size(t->type);
    const gml_overlap r = search(&o, -(e - 1), e - 1, w);
    if (r == GML_OVERLAP_YES && memcmp(w->ia, w->ib, sizeof w->ia) != 0) {
        int k = 0; /* the two in row-major order */
        while (w->ia[k] == w->ib[k]) k++;
        if (w->ia[k] > w->ib[k])
            for (int j = 0; j < GML_MAX_DIMS; j++) {
                const int64_t v = w->ia[j];
                w->ia[j] = w->ib[j];
                w->ib[j] = v;
            }
    }
    return r;
}

/* Where t's storage starts: its byte offset into its root, or, by_address,
 * the address (its root has data). */
static int64_t storage_start(const gml_tensor *t, bool by_address) {
    const gml_tensor *r = t->view_src ? t->view_src : t;
    return (by_address ? (int64_t)(intptr_t)r->data : 0) + (int64_t)t->view_offs;
}

gml_overlap gml_tensors_overlap(const gml_tensor *a, const gml_tensor *b, gml_overlap_witness *w) {
    gml_tensor tmp_a, tmp_b;
    a = as_blocks(a, &tmp_a);
    b = as_blocks(b, &tmp_b);
    gml_overlap_witness unused;
    if (!w) w = &unused;
    clear_witness(w);
    const gml_tensor *ra = a->view_src ? a->view_src : a, *rb = b->view_src ? b->view_src : b;
    const bool by_address = ra != rb;
    if (by_address && (!ra->data || !rb->data)) return GML_OVERLAP_NO; /* storages apart */
    const int64_t pa = storage_start(a, by_address), pb = storage_start(b, by_address);
    const int64_t ea = (int64_t)gml_type_size(a->type), eb = (int64_t)gml_type_size(b->type);
    /* byte ranges [pa, pa + nbytes(a)) and [pb, ...) apart: no search needed */
    if (pa + (int64_t)gml_nbytes(a) <= pb || pb + (int64_t)gml_nbytes(b) <= pa)
        return GML_OVERLAP_NO;
    overlap_search o = {.nonzero = false};
    add_terms(&o, a, 0, false);
    add_terms(&o, b, 1, false);
    /* x - y = (pa - pb) + sum: in [-(ea - 1), eb - 1] */
    return search(&o, pb - pa - (ea - 1), pb - pa + (eb - 1), w);
}

bool gml_same_elements(const gml_tensor *a, const gml_tensor *b) {
    const gml_tensor *ra = a->view_src ? a->view_src : a, *rb = b->view_src ? b->view_src : b;
    if (a->type != b->type || !gml_same_shape(a, b)) return false;
    if (ra == rb ? a->view_offs != b->view_offs
                 : !ra->data || !rb->data ||
                       (char *)ra->data + a->view_offs != (char *)rb->data + b->view_offs)
        return false;
    for (int k = 0; k < GML_MAX_DIMS; k++)
        if (a->ne[k] > 1 && a->nb[k] != b->nb[k]) return false;
    return true;
}

/* "[i0,i1,..]": t's n_dims entries of the right-aligned index i. */
static char *format_index(const gml_tensor *t, const int64_t *i, char *buf, size_t size) {
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int k = GML_MAX_DIMS - t->n_dims; k < GML_MAX_DIMS && n < size; k++)
        n += (size_t)snprintf(buf + n, size - n, "%s%" PRId64,
                              k > GML_MAX_DIMS - t->n_dims ? "," : "", i[k]);
    if (n < size) snprintf(buf + n, size - n, "]");
    return buf;
}

static char *format_strides(const gml_tensor *t, char *buf, size_t size) {
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int k = GML_MAX_DIMS - t->n_dims; k < GML_MAX_DIMS && n < size; k++)
        n += (size_t)snprintf(buf + n, size - n, "%s%zu", k > GML_MAX_DIMS - t->n_dims ? "," : "",
                              t->nb[k]);
    if (n < size) snprintf(buf + n, size - n, "]");
    return buf;
}

bool gml_check_write(gml_context *ctx, const char *call, const gml_tensor *dst,
                     const gml_tensor *const *src, const char *const *role, int n_src,
                     bool same_ok) {
    char sd[GML_SHAPE_MAX], ss[GML_SHAPE_MAX], ia[GML_SHAPE_MAX], ib[GML_SHAPE_MAX];
    char nb[GML_MAX_DIMS * 24], why[GML_SHAPE_MAX * 3];
    gml_overlap_witness w;
    const gml_overlap self = gml_self_overlap(dst, &w);
    if (self == GML_OVERLAP_YES && w.dim >= 0) {
        gml_fail(ctx, "%s: the destination has elements that share memory (dim %d has stride 0 "
                 "and size %" PRId64 " in %s %s)", call, w.dim - (GML_MAX_DIMS - dst->n_dims),
                 dst->ne[w.dim], dst->name, GML_SHAPE(dst, sd));
        return false;
    }
    if (self == GML_OVERLAP_YES) {
        gml_fail(ctx, "%s: the destination has elements that share memory (elements %s and %s of "
                 "%s %s, byte strides %s)", call, format_index(dst, w.ia, ia, sizeof ia),
                 format_index(dst, w.ib, ib, sizeof ib), dst->name, GML_SHAPE(dst, sd),
                 format_strides(dst, nb, sizeof nb));
        return false;
    }
    if (self == GML_OVERLAP_MAYBE) {
        gml_fail(ctx, "%s: the destination may have elements that share memory (%s %s, byte "
                 "strides %s: too tangled to prove its elements apart)", call, dst->name,
                 GML_SHAPE(dst, sd), format_strides(dst, nb, sizeof nb));
        return false;
    }
    for (int i = 0; i < n_src; i++) {
        const gml_tensor *s = src[i];
        if (!s || (same_ok && gml_same_elements(s, dst))) continue;
        const gml_overlap o = gml_tensors_overlap(s, dst, &w);
        if (o == GML_OVERLAP_NO) continue;
        const bool yes = o == GML_OVERLAP_YES;
        if (yes)
            snprintf(why, sizeof why, "%s %s and destination %s share memory",
                     role[i], format_index(s, w.ia, ia, sizeof ia),
                     format_index(dst, w.ib, ib, sizeof ib));
        else
            snprintf(why, sizeof why, "their byte ranges intersect and their strides "
                     "interleave too much to prove their elements apart");
        gml_fail(ctx, "%s: the destination %s the %s: %s %s and %s %s share storage (%s; copy the "
                 "%s first: cont)", call, yes ? "overlaps" : "may overlap", role[i], s->name,
                 GML_SHAPE(s, ss), dst->name, GML_SHAPE(dst, sd), why, role[i]);
        return false;
    }
    return true;
}
