/* The norm micro-kernels (ops/norm.inc), written once over the SIMD layer
 * and compiled once per ISA. vnorm: two vectors a step, then the tail a
 * vector at a time with a lane mask. vnorm_back: a row's sums in double
 * lanes. Multiplies and adds only, in the order of ops/norm.h: every ISA's
 * variant gives the scalar variant's bits. */
#include "norm.h"
#include "simd/simd.h"

#include <math.h>

static inline gml_vf apply(gml_vf x, gml_vf vc, gml_vf vs, bool has_w, gml_vf w, bool has_b,
                           gml_vf b) {
    gml_vf y = gml_vf_mul(gml_vf_sub(x, vc), vs);
    if (has_w) y = gml_vf_mul(y, w);
    if (has_b) y = gml_vf_add(y, b);
    return y;
}

static inline void vnorm(size_t n, const float *x, float c, float s, const float *w,
                         const float *b, float *out, bool has_w, bool has_b) {
    const gml_vf vc = gml_vf_set1(c), vs = gml_vf_set1(s), z = gml_vf_zero();
    size_t i = 0;
    for (; i + 2 * GML_VL <= n; i += 2 * GML_VL) {
        const size_t j = i + GML_VL;
        const gml_vf y0 = apply(gml_vf_load(x + i), vc, vs, has_w, has_w ? gml_vf_load(w + i) : z,
                                has_b, has_b ? gml_vf_load(b + i) : z);
        const gml_vf y1 = apply(gml_vf_load(x + j), vc, vs, has_w, has_w ? gml_vf_load(w + j) : z,
                                has_b, has_b ? gml_vf_load(b + j) : z);
        gml_vf_store(out + i, y0);
        gml_vf_store(out + j, y1);
    }
    for (; i < n; i += GML_VL) {
        const gml_vm k = gml_vm_first(GML_MIN(n - i, (size_t)GML_VL));
        const gml_vf y = apply(gml_vf_load_m(x + i, k), vc, vs, has_w,
                               has_w ? gml_vf_load_m(w + i, k) : z, has_b,
                               has_b ? gml_vf_load_m(b + i, k) : z);
        gml_vf_store_m(out + i, k, y);
    }
}

void GML_SIMD_UKERNEL(f32_vnorm, GML_SIMD_U2)(size_t n, const float *x, float c, float s,
                                              const float *w, const float *b, float *out) {
    if (w && b) vnorm(n, x, c, s, w, b, out, true, true);
    else if (w) vnorm(n, x, c, s, w, b, out, true, false);
    else if (b) vnorm(n, x, c, s, w, b, out, false, true);
    else vnorm(n, x, c, s, w, b, out, false, false);
}

/* ---- rms_norm_back / layer_norm_back (gml_f32_vnorm_back_ukernel) ----------
 * The 16 lanes of ops/reduce.h as NDV vectors of doubles; a chunk of 16
 * elements is NLV float vectors, each two double halves. In the last chunk
 * the lanes past n read nothing and add +0 (their differences are zeroed):
 * a lane's sum never is -0, so this is the scalar variant's sum. */
enum { NLV = GML_REDUCE_LANES / GML_VL, NDV = 2 * NLV };

/* elements [i, i + k) of p (k <= 16; 16: a whole chunk) as doubles, 0 past k */
static GML_SIMD_INLINE void load16(const float *p, size_t k, gml_vd d[NDV]) {
    for (int v = 0; v < NLV; v++) {
        gml_vf f;
        if (k >= GML_REDUCE_LANES) {
            f = gml_vf_load(p + v * GML_VL);
        } else {
            const size_t done = (size_t)v * GML_VL;
            f = gml_vf_load_m(p + v * GML_VL, gml_vm_first(k > done ? GML_MIN(k - done, (size_t)GML_VL) : 0));
        }
        d[2 * v] = gml_vd_lo(f);
        d[2 * v + 1] = gml_vd_hi(f);
    }
}
/* 1 in the lanes below k, 0 past it */
static GML_SIMD_INLINE void ones16(size_t k, gml_vd d[NDV]) {
    for (int v = 0; v < NLV; v++) {
        const size_t done = (size_t)v * GML_VL;
        const gml_vf f = gml_vf_zero_unless(gml_vm_first(k > done ? GML_MIN(k - done, (size_t)GML_VL) : 0),
                                            gml_vf_set1(1.0f));
        d[2 * v] = gml_vd_lo(f);
        d[2 * v + 1] = gml_vd_hi(f);
    }
}
static inline double lanes_total(const gml_vd acc[NDV]) {
    double d[GML_REDUCE_LANES];
    for (int v = 0; v < NDV; v++) gml_vd_store(d + v * (GML_VL / 2), acc[v]);
    return gml_reduce_tree16(d);
}

/* d = x - mean of a chunk of k, zero past k */
static GML_SIMD_INLINE void diff16(const float *x, size_t k, gml_vd vm, gml_vd d[NDV]) {
    load16(x, k, d);
    gml_vd one[NDV];
    if (k < GML_REDUCE_LANES) ones16(k, one);
    for (int v = 0; v < NDV; v++) {
        d[v] = gml_vd_sub(d[v], vm);
        if (k < GML_REDUCE_LANES) d[v] = gml_vd_mul(d[v], one[v]);
    }
}
/* g = dy w (dy without w) of a chunk of k */
static GML_SIMD_INLINE void grad16(const float *dy, const float *w, size_t k, bool has_w,
                                   gml_vd g[NDV]) {
    load16(dy, k, g);
    if (!has_w) return;
    gml_vd wv[NDV];
    load16(w, k, wv);
    for (int v = 0; v < NDV; v++) g[v] = gml_vd_mul(g[v], wv[v]);
}

static GML_SIMD_INLINE void norm_back_row(size_t n, const float *x, const float *dy, const float *w,
                                          double eps, bool layer, float *out, bool has_w) {
    gml_vd acc[NDV], acc2[NDV], t[NDV], g[NDV];
    double mean = 0;
    if (layer) {
        for (int v = 0; v < NDV; v++) acc[v] = gml_vd_zero();
        for (size_t i = 0; i < n; i += GML_REDUCE_LANES) {
            load16(x + i, GML_MIN(n - i, (size_t)GML_REDUCE_LANES), t);
            for (int v = 0; v < NDV; v++) acc[v] = gml_vd_add(acc[v], t[v]);
        }
        mean = lanes_total(acc) / (double)n;
    }
    const gml_vd vm = gml_vd_set1(mean);
    for (int v = 0; v < NDV; v++) acc[v] = gml_vd_zero();
    for (size_t i = 0; i < n; i += GML_REDUCE_LANES) {
        diff16(x + i, GML_MIN(n - i, (size_t)GML_REDUCE_LANES), vm, t);
        for (int v = 0; v < NDV; v++) acc[v] = gml_vd_add(acc[v], gml_vd_mul(t[v], t[v]));
    }
    const double r = 1.0 / sqrt(lanes_total(acc) / (double)n + eps);
    for (int v = 0; v < NDV; v++) acc[v] = acc2[v] = gml_vd_zero();
    for (size_t i = 0; i < n; i += GML_REDUCE_LANES) {
        const size_t k = GML_MIN(n - i, (size_t)GML_REDUCE_LANES);
        diff16(x + i, k, vm, t);
        grad16(dy + i, has_w ? w + i : NULL, k, has_w, g);
        for (int v = 0; v < NDV; v++) {
            acc[v] = gml_vd_add(acc[v], g[v]);
            acc2[v] = gml_vd_add(acc2[v], gml_vd_mul(g[v], t[v]));
        }
    }
    const double mg = lanes_total(acc) / (double)n, mgx = lanes_total(acc2) * r / (double)n;
    const gml_vd vr = gml_vd_set1(r), vmg = gml_vd_set1(mg), vmgx = gml_vd_set1(mgx);
    for (size_t i = 0; i < n; i += GML_REDUCE_LANES) {
        const size_t k = GML_MIN(n - i, (size_t)GML_REDUCE_LANES);
        load16(x + i, k, t);
        grad16(dy + i, has_w ? w + i : NULL, k, has_w, g);
        for (int v = 0; v < NDV; v++) {
            const gml_vd xh = gml_vd_mul(gml_vd_sub(t[v], vm), vr);
            gml_vd u = layer ? gml_vd_sub(g[v], vmg) : g[v];
            u = gml_vd_sub(u, gml_vd_mul(xh, vmgx));
            t[v] = gml_vd_mul(vr, u);
        }
        for (int v = 0; v < NLV; v++) {
            const gml_vf y = gml_vf_from_vd(t[2 * v], t[2 * v + 1]);
            const size_t done = (size_t)v * GML_VL;
            if (k >= GML_REDUCE_LANES) gml_vf_store(out + i + done, y);
            else if (k > done) gml_vf_store_m(out + i + done, gml_vm_first(GML_MIN(k - done, (size_t)GML_VL)), y);
        }
    }
}

void GML_SIMD_UKERNEL(f32_vnorm_back, 16)(size_t n, const float *x, const float *dy, const float *w,
                                          double eps, bool layer, float *out) {
    if (w) norm_back_row(n, x, dy, w, eps, layer, out, true);
    else norm_back_row(n, x, dy, w, eps, layer, out, false);
}
