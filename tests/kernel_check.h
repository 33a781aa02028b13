/* What the GEMM kernel tests share (test_amx_bf16.c, test_amx_q8.c,
 * test_int8_kernels.c): running one kernel function on the thread pool,
 * and q8_0's definition with random q8 rows. Include after check.h and
 * the ops' headers (ops/gemm_q8.h). */
#ifndef GGMLITE_TESTS_KERNEL_CHECK_H
#define GGMLITE_TESTS_KERNEL_CHECK_H

/* fn once on nth threads (gml_run_kernels) with ws bytes of scratch, on a
 * dst that only names the node; false (a failed check) on an error. */
static inline bool kc_run(gml_kernel_fn fn, size_t ws, int nth) {
    void *work = aligned_alloc(64, gml_align_up(ws, 64));
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 12});
    gml_tensor *dst = gml_new_tensor_1d(ctx, GML_F32, 1);
    char err[256];
    const gml_status st = gml_run_kernels(&fn, &dst, 1, nth, work, ws, err, sizeof err);
    gml_free(ctx);
    free(work);
    return CHECK(st == GML_OK, "gml_run_kernels: %s", err);
}

/* Random q8 rows from r: every byte value (-128 and 127 included), f16
 * scales 1e-4 .. 0.1; with odd, some scales 0, f16-subnormal, NaN or inf. */
static inline void kc_rand_q8(chk_rng *r, gml_block_q8_0 *blk, int64_t n, bool odd) {
    for (int64_t b = 0; b < n; b++) {
        const int kind = (int)(chk_next(r) % 16);
        float d = (float)(chk_next(r) % 1000 + 1) * 1e-4f;
        if (odd && kind == 0) d = 0.0f;
        if (odd && kind == 1) d = 3e-6f; /* an f16 subnormal */
        blk[b].d = gml_fp32_to_fp16(d);
        if (odd && kind == 2) blk[b].d = 0x7e00u; /* NaN */
        if (odd && kind == 3) blk[b].d = 0x7c00u; /* inf */
        for (int k = 0; k < 32; k++) blk[b].qs[k] = (int8_t)((int)(chk_next(r) % 256) - 128);
    }
}

/* The definition of q8_0's dot: A's row a (nblk q8 blocks) x W's row w,
 * from c; per block the int32 sum, then one fmaf in block order. */
static inline float kc_q8_dot(const gml_block_q8_0 *a, const gml_block_q8_0 *w, size_t nblk, float c) {
    for (size_t b = 0; b < nblk; b++) {
        int32_t s = 0;
        for (int k = 0; k < 32; k++) s += a[b].qs[k] * w[b].qs[k];
        c = fmaf((float)s, gml_fp16_to_fp32(a[b].d) * gml_fp16_to_fp32(w[b].d), c);
    }
    return c;
}

/* A product's f32 A and q8_0 W from frand (values in [-1, 1)): *a holds
 * nba matrices of a_per = 2 M K + 5 floats, each one's M x K from its
 * element 1 in layout 0 (rows contiguous), 1 (every other float) or 2
 * (transposed [K, M]), strides in bytes in *a_rs, *a_cs; *w holds nbw
 * weights [N, K] quantized; both malloc'ed. */
static inline void kc_q8_inputs(float (*frand)(void), int64_t nba, int64_t nbw, int64_t M, int64_t N, int64_t K,
                                int layout, float **a, gml_block_q8_0 **w, int64_t *a_rs, int64_t *a_cs) {
    const int64_t a_per = M * K * 2 + 5, nblk = K / 32;
    *a = malloc(sizeof(float) * (size_t)(nba * a_per));
    for (int64_t e = 0; e < nba * a_per; e++) (*a)[e] = frand() * (e % 7 == 0 ? 4.0f : 1.0f);
    *w = malloc(sizeof(gml_block_q8_0) * (size_t)(nbw * N * nblk));
    float *wf = malloc(sizeof(float) * (size_t)(nbw * N * K));
    for (int64_t e = 0; e < nbw * N * K; e++) wf[e] = frand();
    for (int64_t r = 0; r < nbw * N; r++) gml_quantize_row_q8_0(wf + r * K, *w + r * nblk, K);
    free(wf);
    *a_rs = K * 4, *a_cs = 4;
    if (layout == 1) *a_rs = 2 * K * 4, *a_cs = 8;
    if (layout == 2) *a_rs = 4, *a_cs = M * 4;
}

#endif /* GGMLITE_TESTS_KERNEL_CHECK_H */
