/* The repeat micro-kernel (ops/repeat.inc), written once over the SIMD
 * layer and compiled once per ISA. It moves 32-bit values as they are,
 * through float lanes that no arithmetic touches (bits kept, NaNs too). */
#include "simd/simd.h"
#include "ukernels.h"

#include <string.h>

/* Chunks of GML_VL elements of x give GML_VL * reps outputs: for reps <
 * GML_VL, output vector q of a chunk is x's vector permuted by lanes
 * (GML_VL q + l) / reps; for reps >= GML_VL, each element is broadcast. */
void GML_SIMD_UKERNEL(x32_repeat, GML_SIMD_U1)(size_t n, size_t reps, const uint32_t *x,
                                               uint32_t *out) {
    const float *xf = (const float *)x;
    float *of = (float *)out;
    if (reps >= GML_VL) {
        for (size_t i = 0; i < n; i++) {
            float b;
            memcpy(&b, x + i, sizeof b);
            const gml_vf v = gml_vf_set1(b);
            size_t r = 0;
            for (; r + GML_VL <= reps; r += GML_VL) gml_vf_store(of + r, v);
            if (r < reps) gml_vf_store_m(of + r, gml_vm_first(reps - r), v);
            of += reps;
        }
        return;
    }
    int32_t idx[GML_VL * GML_VL]; /* output t of a chunk takes lane t / reps */
    int32_t lane = 0;
    for (size_t t = 0, k = 0; t < GML_VL * reps; t++) {
        idx[t] = lane;
        if (++k == reps) {
            k = 0;
            lane++;
        }
    }
    gml_vi perm[GML_VL];
    for (size_t q = 0; q < reps; q++) perm[q] = gml_vi_load(idx + GML_VL * q);
    for (size_t i = 0; i < n; i += GML_VL) {
        const size_t m = GML_MIN((size_t)GML_VL, n - i); /* elements of x in this chunk */
        const gml_vf v = gml_vf_load_m(xf + i, gml_vm_first(m));
        for (size_t q = 0; q < reps; q++) {
            const size_t done = GML_VL * q, left = m * reps - GML_MIN(m * reps, done);
            if (left == 0) break;
            gml_vf_store_m(of + done, gml_vm_first(GML_MIN((size_t)GML_VL, left)),
                           gml_vf_permute(v, perm[q]));
        }
        of += m * reps;
    }
}
