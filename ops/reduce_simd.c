/* The row reductions (ops/reduce.inc), written once over the SIMD layer and
 * compiled once per ISA: the 16 lanes of ops/reduce.h are LV vectors of
 * GML_VL floats, their 16 double accumulators DV vectors of GML_VL / 2, so
 * every ISA adds the same terms in the same order (the tile is 16 on each)
 * and gives the scalar variant's bits. */
#include "reduce.h"
#include "simd/simd.h"

enum { LV = GML_REDUCE_LANES / GML_VL, DV = 2 * LV };

/* Adds the lane vectors, converted, to the double accumulators. */
static inline void accumulate(const gml_vf lane[LV], gml_vd acc[DV]) {
    for (int v = 0; v < LV; v++) {
        acc[2 * v] = gml_vd_add(acc[2 * v], gml_vd_lo(lane[v]));
        acc[2 * v + 1] = gml_vd_add(acc[2 * v + 1], gml_vd_hi(lane[v]));
    }
}

static inline double finish(const gml_vd acc[DV]) {
    double d[GML_REDUCE_LANES];
    for (int v = 0; v < DV; v++) gml_vd_store(d + v * (GML_VL / 2), acc[v]);
    return gml_reduce_tree16(d);
}

/* Lanes of the tail vector v of r (< 16) terms left: 0 when none. */
static inline size_t tail_lanes(size_t r, int v) {
    const size_t done = (size_t)v * GML_VL;
    return r > done ? GML_MIN(r - done, (size_t)GML_VL) : 0;
}

/* A term of a sum: x itself, or for the sum of squares (sq) (x - c)^2. */
static GML_SIMD_INLINE gml_vf term(gml_vf x, gml_vf c, bool sq) {
    if (!sq) return x;
    const gml_vf d = gml_vf_sub(x, c);
    return gml_vf_mul(d, d);
}

/* The terms of x in ops/reduce.h's order: each block of GML_REDUCE_BLOCK
 * summed in the 16 float lanes from -0 (the tail masked), then added to the
 * 16 double accumulators; sq picks the term (rsum, rsumsq). */
static GML_SIMD_INLINE double block_sum(size_t n, const float *x, float c, bool sq) {
    const gml_vf vc = gml_vf_set1(c), neg0 = gml_vf_set1(-0.0f);
    gml_vd acc[DV];
    for (int v = 0; v < DV; v++) acc[v] = gml_vd_zero();
    for (size_t b = 0; b < n; b += GML_REDUCE_BLOCK) {
        const size_t end = GML_MIN(n, b + GML_REDUCE_BLOCK);
        gml_vf lane[LV];
        for (int v = 0; v < LV; v++) lane[v] = neg0;
        size_t i = b;
        for (; i + 16 <= end; i += 16)
            for (int v = 0; v < LV; v++)
                lane[v] = gml_vf_add(lane[v], term(gml_vf_load(x + i + v * GML_VL), vc, sq));
        for (int v = 0; v < LV && i < end; v++) {
            const size_t k = tail_lanes(end - i, v);
            if (k == 0) break;
            const gml_vm m = gml_vm_first(k);
            const gml_vf t = term(gml_vf_load_m(x + i + v * GML_VL, m), vc, sq);
            lane[v] = gml_vf_add_m(lane[v], m, t);
        }
        accumulate(lane, acc);
    }
    return finish(acc);
}

double GML_SIMD_UKERNEL(f32_rsum, 16)(size_t n, const float *x) {
    return block_sum(n, x, 0.0f, false);
}

double GML_SIMD_UKERNEL(f32_rsumsq, 16)(size_t n, const float *x, float c) {
    return block_sum(n, x, c, true);
}

float GML_SIMD_UKERNEL(f32_rmax, 16)(size_t n, const float *x) {
    const gml_vf neg_inf = gml_vf_set1(-INFINITY);
    gml_vf m[LV];
    for (int v = 0; v < LV; v++) m[v] = neg_inf;
    gml_vm nan = gml_vm_first(0);
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int v = 0; v < LV; v++) {
            const gml_vf xv = gml_vf_load(x + i + v * GML_VL);
            nan = gml_vm_or(nan, gml_vf_unord(xv, xv));
            m[v] = gml_vf_max(xv, m[v]); /* x > m ? x : m */
        }
    for (int v = 0; v < LV && i < n; v++) {
        const size_t k = tail_lanes(n - i, v);
        if (k == 0) break;
        const gml_vm km = gml_vm_first(k);
        const gml_vf xv = gml_vf_select(km, gml_vf_load_m(x + i + v * GML_VL, km), neg_inf);
        nan = gml_vm_or(nan, gml_vf_unord(xv, xv));
        m[v] = gml_vf_max(xv, m[v]);
    }
    float lanes[GML_REDUCE_LANES];
    for (int v = 0; v < LV; v++) gml_vf_store(lanes + v * GML_VL, m[v]);
    return gml_reduce_tree16_max(lanes, gml_vm_any(nan));
}

/* sum_to's columns (gml_f32_colsum_ukernel): 4 float vectors of columns a
 * pass, their 8 halves in double accumulators, the terms in order; the
 * last pass masked (a lane past len reads nothing and is not stored). */
enum { CV = 4 };

static GML_SIMD_INLINE void colsum_pass(size_t k, const char *x, const gml_colsum_terms *t,
                                        float *out, bool masked) {
    gml_vm m[CV];
    for (int v = 0; v < CV; v++) {
        const size_t done = (size_t)v * GML_VL;
        m[v] = gml_vm_first(k > done ? GML_MIN(k - done, (size_t)GML_VL) : 0);
    }
    gml_vd acc[2 * CV];
    for (int v = 0; v < 2 * CV; v++) acc[v] = gml_vd_zero();
    int64_t idx[GML_MAX_DIMS] = {0};
    const char *p = x;
    for (int64_t r = gml_colsum_count(t); r > 0; r--) {
        const float *row = (const float *)(const void *)p;
        for (int v = 0; v < CV; v++) {
            const gml_vf xv = masked ? gml_vf_load_m(row + v * GML_VL, m[v]) : gml_vf_load(row + v * GML_VL);
            acc[2 * v] = gml_vd_add(acc[2 * v], gml_vd_lo(xv));
            acc[2 * v + 1] = gml_vd_add(acc[2 * v + 1], gml_vd_hi(xv));
        }
        gml_colsum_next(t, idx, &p);
    }
    for (int v = 0; v < CV; v++) {
        const gml_vf y = gml_vf_from_vd(acc[2 * v], acc[2 * v + 1]);
        if (masked) gml_vf_store_m(out + v * GML_VL, m[v], y);
        else gml_vf_store(out + v * GML_VL, y);
    }
}

void GML_SIMD_UKERNEL(f32_colsum, GML_SIMD_U4)(size_t len, const char *x, const gml_colsum_terms *t,
                                               float *out) {
    size_t c = 0;
    for (; c + CV * GML_VL <= len; c += CV * GML_VL)
        colsum_pass(CV * GML_VL, x + c * sizeof(float), t, out + c, false);
    if (c < len) colsum_pass(len - c, x + c * sizeof(float), t, out + c, true);
}
