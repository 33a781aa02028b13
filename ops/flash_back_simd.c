/* The flash attention backward's micro-kernels (ops/flash_back.h), written
 * once over the SIMD layer and compiled once per ISA; the register tiles
 * are chosen per ISA at the end. Query rows along the lanes of NV vectors
 * (tile = NV GML_VL), as the forward's. For each key block of KB keys:
 *
 *   scores   s[j][l]  = sum_d k[j][d] qt[d][l]        MRK keys x NV vectors
 *            dp[j][l] = sum_c v[j][c] dot[c][l]       (k, v broadcast from rows)
 *   weights  softcap (its tanh kept), the mask, ALiBi, the keys each lane
 *            sees; p = exp(s - lse); ds = p (dp - dd) (1 - tanh^2)
 *   dQ       dqt[d][l] += sum_j k[j][d] ds[j][l]      MR columns x NV vectors
 *   dK, dV   acc[j][c..] += sum_l w[j][l] rows[l][c..]  MRJ keys x NC vectors of
 *            columns (w = p with dO's rows, ds with q's; w broadcast)
 *
 * Before the keys, the block's rows laid out (lay_out_rows: q scaled, dO,
 * D); after them, dQ's rows written (write_dq). Every sum in one fixed
 * order (keys, lanes, columns ascending) whatever the thread count. */
#include "flash_back.h"
#include "simd/simd.h"
#include "simd/vmath.h"

#include <math.h>

/* gml_vexp_nosub of x = s - lse (<= 0 but for a rounding, -inf for a hidden
 * key), without the clamps: as the forward's vexp_nonpos (ops/flash_attn_simd.c). */
static GML_SIMD_INLINE gml_vf vexp_nonpos(gml_vf x) {
    gml_vf n;
    const gml_vf p = gml_vexp_reduce(x, &n);
    return gml_vf_ldexp_flush(p, n);
}

#define NV_MAX 4
#define MR_MAX 16
#define NC_MAX 4

/* out[j][.] = sum_d x[j][d] yt[d][.] for the key rows j < nkp of x (ld
 * ldx; rows past last read as row last), NV vectors of lanes. */
static GML_SIMD_INLINE void rows_by_lanes(const float *x, size_t ldx, size_t j0, size_t nkp,
                                          size_t last, size_t n, const float *yt, float *out,
                                          const int NV, const int MRK) {
    const size_t tile = GML_VL * (size_t)NV;
    for (size_t jt = 0; jt < nkp; jt += (size_t)MRK) {
        const float *xr[MR_MAX];
#pragma GCC unroll 16
        for (int r = 0; r < MRK; r++) xr[r] = x + GML_MIN(j0 + jt + (size_t)r, last) * ldx;
        gml_vf acc[MR_MAX][NV_MAX];
#pragma GCC unroll 16
        for (int r = 0; r < MRK; r++)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[r][v] = gml_vf_zero();
        for (size_t d = 0; d < n; d++) {
            gml_vf b[NV_MAX];
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) b[v] = gml_vf_loada(yt + d * tile + GML_VL * (size_t)v);
#pragma GCC unroll 16
            for (int r = 0; r < MRK; r++) {
                const gml_vf a = gml_vf_set1(xr[r][d]);
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++) acc[r][v] = gml_vf_fma(a, b[v], acc[r][v]);
            }
        }
#pragma GCC unroll 16
        for (int r = 0; r < MRK; r++)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                gml_vf_storea(out + (jt + (size_t)r) * tile + GML_VL * (size_t)v, acc[r][v]);
    }
}

/* acct[c][.] += sum_{j < nk} x[j][c] w[j][.] for c in [ct, ct + MR) (columns
 * past n read column n - 1; their rows of acct are padding). */
static GML_SIMD_INLINE void cols_by_lanes(const float *x, size_t ldx, size_t nk, size_t n,
                                          size_t ct, const float *w, float *acct, const int NV,
                                          const int MR) {
    const size_t tile = GML_VL * (size_t)NV;
    size_t off[MR_MAX];
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++) off[r] = GML_MIN(ct + (size_t)r, n - 1);
    gml_vf acc[MR_MAX][NV_MAX];
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            acc[r][v] = gml_vf_loada(acct + (ct + (size_t)r) * tile + GML_VL * (size_t)v);
    for (size_t j = 0; j < nk; j++) {
        const float *xr = x + j * ldx;
        gml_vf b[NV_MAX];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) b[v] = gml_vf_loada(w + j * tile + GML_VL * (size_t)v);
#pragma GCC unroll 16
        for (int r = 0; r < MR; r++) {
            const gml_vf a = gml_vf_set1(xr[off[r]]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[r][v] = gml_vf_fma(a, b[v], acc[r][v]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            gml_vf_storea(acct + (ct + (size_t)r) * tile + GML_VL * (size_t)v, acc[r][v]);
}

/* acc[j][c] += sum_{l < nq} w[j][l] rows[l][c] for keys j in [jt, jt + MRJ)
 * and NC vectors of columns from c0 (mask: the last vector's lanes, or all). */
static GML_SIMD_INLINE void keys_by_cols(const float *w, size_t tile, size_t nq,
                                         const float *rows, size_t ldr, size_t jt, size_t c0,
                                         float *acc_rows, size_t lda, gml_vm last_m, bool part,
                                         const int MRJ, const int NC) {
    gml_vf acc[MR_MAX][NC_MAX];
#pragma GCC unroll 8
    for (int r = 0; r < MRJ; r++) {
        float *ar = acc_rows + (jt + (size_t)r) * lda + c0;
#pragma GCC unroll 4
        for (int v = 0; v < NC; v++)
            acc[r][v] = part && v == NC - 1 ? gml_vf_load_m(ar + GML_VL * (size_t)v, last_m)
                                            : gml_vf_load(ar + GML_VL * (size_t)v);
    }
    for (size_t l = 0; l < nq; l++) {
        const float *rr = rows + l * ldr + c0;
        gml_vf b[NC_MAX];
#pragma GCC unroll 4
        for (int v = 0; v < NC; v++)
            b[v] = part && v == NC - 1 ? gml_vf_load_m(rr + GML_VL * (size_t)v, last_m)
                                       : gml_vf_load(rr + GML_VL * (size_t)v);
#pragma GCC unroll 8
        for (int r = 0; r < MRJ; r++) {
            const gml_vf a = gml_vf_set1(w[(jt + (size_t)r) * tile + l]);
#pragma GCC unroll 4
            for (int v = 0; v < NC; v++) acc[r][v] = gml_vf_fma(a, b[v], acc[r][v]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < MRJ; r++) {
        float *ar = acc_rows + (jt + (size_t)r) * lda + c0;
#pragma GCC unroll 4
        for (int v = 0; v < NC; v++) {
            if (part && v == NC - 1) gml_vf_store_m(ar + GML_VL * (size_t)v, last_m, acc[r][v]);
            else gml_vf_store(ar + GML_VL * (size_t)v, acc[r][v]);
        }
    }
}

/* Every column of acc_rows (n of them) for keys [0, nk) of the block at
 * acc_rows: groups of NC vectors, then single vectors (the last masked);
 * keys MRJ at a time, then one at a time. */
static GML_SIMD_INLINE void keys_all_cols(const float *w, size_t tile, size_t nq,
                                          const float *rows, size_t n, size_t nk,
                                          float *acc_rows, const int MRJ, const int NC) {
    const gml_vm all = gml_vm_first(GML_VL);
    size_t c0 = 0;
    for (; c0 + (size_t)NC * GML_VL <= n; c0 += (size_t)NC * GML_VL) {
        size_t jt = 0;
        for (; jt + (size_t)MRJ <= nk; jt += (size_t)MRJ)
            keys_by_cols(w, tile, nq, rows, n, jt, c0, acc_rows, n, all, false, MRJ, NC);
        for (; jt < nk; jt++)
            keys_by_cols(w, tile, nq, rows, n, jt, c0, acc_rows, n, all, false, 1, NC);
    }
    for (; c0 < n; c0 += GML_VL) {
        const bool part = n - c0 < GML_VL;
        const gml_vm m = part ? gml_vm_first(n - c0) : all;
        size_t jt = 0;
        for (; jt + (size_t)MRJ <= nk; jt += (size_t)MRJ)
            keys_by_cols(w, tile, nq, rows, n, jt, c0, acc_rows, n, m, part, MRJ, 1);
        for (; jt < nk; jt++) keys_by_cols(w, tile, nq, rows, n, jt, c0, acc_rows, n, m, part, 1, 1);
    }
}

/* r[i] = rows[l0 + i][c0 .. c0 + nc) (zeros past nc, and for rows >= nq) */
static GML_SIMD_INLINE void load_rows(const float *const *rows, size_t l0, size_t nq, size_t c0,
                                      size_t nc, gml_vf *r) {
    if (nc == GML_VL && l0 + GML_VL <= nq) {
#pragma GCC unroll 16
        for (size_t i = 0; i < GML_VL; i++) r[i] = gml_vf_load(rows[l0 + i] + c0);
        return;
    }
    const gml_vm m = gml_vm_first(nc);
#pragma GCC unroll 16
    for (size_t i = 0; i < GML_VL; i++)
        r[i] = l0 + i < nq ? gml_vf_load_m(rows[l0 + i] + c0, m) : gml_vf_zero();
}

/* out[(l0 + i) ld + c0 ..] = r[i] (nc columns) for every lane i */
static GML_SIMD_INLINE void store_rows(float *out, size_t ld, size_t l0, size_t c0, size_t nc,
                                       const gml_vf *r) {
    if (nc == GML_VL) {
#pragma GCC unroll 16
        for (size_t i = 0; i < GML_VL; i++) gml_vf_store(out + (l0 + i) * ld + c0, r[i]);
        return;
    }
    const gml_vm m = gml_vm_first(nc);
#pragma GCC unroll 16
    for (size_t i = 0; i < GML_VL; i++) gml_vf_store_m(out + (l0 + i) * ld + c0, m, r[i]);
}

/* The block's rows in lane layout (ops/flash_back.h): for each vector of
 * lanes and GML_VL columns at a time, the rows loaded (lanes >= nq zeros,
 * columns past the end not read), scaled (q), stored by rows, transposed
 * in registers and stored by columns; dd's FMA chain per lane over the
 * transposed columns in ascending order. */
static GML_SIMD_INLINE void lay_out_rows(const gml_flash_back_args *a, const int NV) {
    const size_t tile = GML_VL * (size_t)NV, nq = a->nq, dk = a->dk, dv = a->dv;
    const gml_vf sc = gml_vf_set1(a->scale);
    for (int v = 0; v < NV; v++) {
        const size_t l0 = GML_VL * (size_t)v;
        gml_vf r[GML_VL];
        for (size_t c0 = 0; c0 < dk; c0 += GML_VL) {
            const size_t nc = GML_MIN((size_t)GML_VL, dk - c0);
            load_rows(a->q_rows, l0, nq, c0, nc, r);
#pragma GCC unroll 16
            for (size_t i = 0; i < GML_VL; i++) r[i] = gml_vf_mul(r[i], sc);
            store_rows(a->qr, dk, l0, c0, nc, r);
            gml_vf_transpose(r);
            for (size_t i = 0; i < nc; i++) gml_vf_storea(a->qt + (c0 + i) * tile + l0, r[i]);
        }
        gml_vf dd = gml_vf_zero();
        for (size_t c0 = 0; c0 < dv; c0 += GML_VL) {
            const size_t nc = GML_MIN((size_t)GML_VL, dv - c0);
            load_rows(a->do_rows, l0, nq, c0, nc, r);
            store_rows(a->dor, dv, l0, c0, nc, r);
            gml_vf_transpose(r);
            for (size_t i = 0; i < nc; i++) gml_vf_storea(a->dot + (c0 + i) * tile + l0, r[i]);
            load_rows(a->o_rows, l0, nq, c0, nc, r);
            gml_vf_transpose(r);
            for (size_t i = 0; i < nc; i++)
                dd = gml_vf_fma(gml_vf_loada(a->dot + (c0 + i) * tile + l0), r[i], dd);
        }
        gml_vf_store(a->dd + l0, dd);
    }
}

/* dq_rows[l][d] = dqt[d][l] scale, GML_VL x GML_VL blocks transposed in
 * registers. */
static GML_SIMD_INLINE void write_dq(const gml_flash_back_args *a, const int NV) {
    const size_t tile = GML_VL * (size_t)NV, nq = a->nq, dk = a->dk;
    const gml_vf sc = gml_vf_set1(a->scale);
    for (int v = 0; v < NV; v++) {
        const size_t l0 = GML_VL * (size_t)v;
        if (l0 >= nq) break;
        for (size_t c0 = 0; c0 < dk; c0 += GML_VL) {
            const size_t nc = GML_MIN((size_t)GML_VL, dk - c0);
            const gml_vm m = gml_vm_first(nc);
            gml_vf r[GML_VL];
            for (size_t i = 0; i < GML_VL; i++)
                r[i] = i < nc ? gml_vf_loada(a->dqt + (c0 + i) * tile + l0) : gml_vf_zero();
            gml_vf_transpose(r);
            for (size_t i = 0; i < GML_VL && l0 + i < nq; i++)
                gml_vf_store_m(a->dq_rows[l0 + i] + c0, m, gml_vf_mul(r[i], sc));
        }
    }
}

static GML_SIMD_INLINE void back_block(const gml_flash_back_args *a, const int NV, const int MRK,
                                       const int MR, const int MRJ, const int NC) {
    const size_t tile = GML_VL * (size_t)NV, nq = a->nq, dk = a->dk, dv = a->dv;
    const size_t KB = GML_FLASH_BACK_KEY_BLOCK;
    lay_out_rows(a, NV);
    float *s = a->work, *dp = s + KB * tile, *th = dp + KB * tile;
    int32_t nmax = 0;
    for (size_t l = 0; l < nq; l++) nmax = GML_MAX(nmax, a->n_keys[l]);
    const size_t dkp = (dk + (size_t)MR - 1) / (size_t)MR * (size_t)MR;
    for (size_t i = 0; i < dkp * tile; i += GML_VL) gml_vf_storea(a->dqt + i, gml_vf_zero());
    const gml_vf zero = gml_vf_zero(), one = gml_vf_set1(1.0f), cap = gml_vf_set1(a->softcap);
    gml_vf lse[NV_MAX], dd[NV_MAX];
    gml_vi nk_v[NV_MAX], fk_v[NV_MAX];
    for (int v = 0; v < NV; v++) {
        lse[v] = gml_vf_load(a->lse + GML_VL * v);
        dd[v] = gml_vf_load(a->dd + GML_VL * v);
        nk_v[v] = gml_vi_load(a->n_keys + GML_VL * v);
        fk_v[v] = a->first_key ? gml_vi_load(a->first_key + GML_VL * v) : gml_vi_set1(0);
    }
    for (size_t j0 = a->key0; j0 < (size_t)nmax; j0 += KB) {
        const size_t nk = GML_MIN(KB, (size_t)nmax - j0);
        const size_t nkp = (nk + (size_t)MRK - 1) / (size_t)MRK * (size_t)MRK;
        rows_by_lanes(a->k, dk, j0, nkp, (size_t)nmax - 1, dk, a->qt, s, NV, MRK);
        rows_by_lanes(a->v, dv, j0, nkp, (size_t)nmax - 1, dv, a->dot, dp, NV, MRK);
        if (a->softcap > 0)
            for (size_t i = 0; i < nk * tile; i += GML_VL) {
                const gml_vf t = gml_vtanh(gml_vf_div(gml_vf_loada(s + i), cap));
                gml_vf_storea(th + i, t);
                gml_vf_storea(s + i, gml_vf_mul(cap, t));
            }
        if (a->mask)
            for (size_t l = 0; l < nq; l++)
                for (size_t j = 0; j < nk; j++) { /* -inf hides whatever the score holds */
                    const float mv = a->mask[l][(j0 + j) * a->mask_stride];
                    s[j * tile + l] = mv == -INFINITY ? -INFINITY : s[j * tile + l] + mv;
                }
        for (size_t j = 0; j < nk; j++) {
            const gml_vi jj = gml_vi_set1((int32_t)(j0 + j)), jj1 = gml_vi_set1((int32_t)(j0 + j + 1));
            const gml_vf jf = gml_vf_set1((float)(j0 + j));
            for (int v = 0; v < NV; v++) {
                const size_t o = j * tile + GML_VL * (size_t)v;
                gml_vf x = gml_vf_loada(s + o);
                if (a->slope)
                    x = gml_vf_add(x, gml_vf_mul(gml_vf_load(a->slope + GML_VL * v),
                                                 gml_vf_sub(jf, gml_vf_load(a->qpos + GML_VL * v))));
                /* seen: first_key <= j < n_keys (j + 1 > first_key) */
                const gml_vm seen = gml_vm_and(gml_vi_gt(nk_v[v], jj), gml_vi_gt(jj1, fk_v[v]));
                const gml_vf pr = gml_vf_select(seen, vexp_nonpos(gml_vf_sub(x, lse[v])), zero);
                gml_vf ds = gml_vf_mul(pr, gml_vf_sub(gml_vf_loada(dp + o), dd[v]));
                if (a->softcap > 0) {
                    const gml_vf t = gml_vf_loada(th + o);
                    ds = gml_vf_mul(ds, gml_vf_fnma(t, t, one));
                }
                gml_vf_storea(s + o, pr);
                /* a weight of 0 (a hidden key) gives 0, even where the key's v
                 * row holds a NaN or inf (dp) */
                gml_vf_storea(dp + o, gml_vf_select(gml_vf_eq(pr, zero), zero, ds));
            }
        }
        /* dQ^T += K^T dS over the block's keys */
        for (size_t ct = 0; ct < dk; ct += (size_t)MR)
            cols_by_lanes(a->kz + j0 * dk, dk, nk, dk, ct, dp, a->dqt, NV, MR);
        gml_flash_back_bad_rows(a, tile, j0, nk, dp);
        /* dV += P^T dO, dK += dS^T (q scale) */
        keys_all_cols(s, tile, nq, a->dor, dv, nk, a->dv_acc + j0 * dv, MRJ, NC);
        keys_all_cols(dp, tile, nq, a->qr, dk, nk, a->dk_acc + j0 * dk, MRJ, NC);
    }
    write_dq(a, NV);
}

/* ---- the register tiles, per ISA ---------------------------------------------
 * back_block(a, NV, MRK, MR, MRJ, NC): NV vectors of query rows, MRK keys a
 * score tile, MR columns a dQ tile, MRJ keys x NC vectors of columns a dK /
 * dV tile. */
#if defined(GML_SIMD_AVX512)
void gml_f32_flash_back_ukernel__avx512_x32(const gml_flash_back_args *a) {
    back_block(a, 2, 8, 8, 4, 4);
}
#elif defined(GML_SIMD_AVX2)
void gml_f32_flash_back_ukernel__avx2_x16(const gml_flash_back_args *a) {
    back_block(a, 2, 6, 6, 4, 2);
}
#elif defined(GML_SIMD_NEON)
void gml_f32_flash_back_ukernel__neon_x16(const gml_flash_back_args *a) {
    back_block(a, 4, 6, 6, 4, 4);
}
#endif
