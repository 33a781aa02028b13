/* Every f32 GEMM micro-kernel in ops/gemm.inc against the reference
 * micro-kernel, and every matrix-vector one in ops/gemv.inc against the
 * scalar one, bit for bit (each element is one fma chain in k order, see
 * ops/gemm.h): k = 1, 2, 3, odd and block-sized; full and partial tiles
 * (m < MR, n < NR, both); storing and accumulating; A packed or read in
 * place by rows; B packed or read in place with a wider row stride. And
 * every few-rows kernel in ops/gemm_rt.inc against the fma chains.
 * Elements of C outside the m x n tile must be left alone. Variants whose
 * ISA the CPU lacks are skipped, with a message. */
#include "../ops/gemm.h"

#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int failures, checks;

static uint32_t rng = 12345;
static float rnd(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / (float)(1u << 23) - 1.0f;
}

/* One call of variant v against the reference; false on a mismatch. A is
 * packed (lda 0: MR rows, k-major) or in place (m rows of lda floats, no
 * more, so that a read past them is caught by ASan). */
static bool check_case(const gml_gemm_variant *v, size_t kc, size_t lda, int m, int n, bool acc,
                       size_t ldb) {
    const int mr = v->mr;
    const size_t ldc = (size_t)v->nr + 3, rows = (size_t)mr + 2;
    const size_t a_len = lda ? (size_t)m * lda : kc * (size_t)mr;
    float *a = malloc(sizeof(float) * a_len);
    float *b = malloc(sizeof(float) * kc * ldb);
    float *c = malloc(sizeof(float) * rows * ldc), *want = malloc(sizeof(float) * rows * ldc);
    for (size_t i = 0; i < a_len; i++) a[i] = rnd();
    for (size_t i = 0; i < kc * ldb; i++) b[i] = rnd();
    for (size_t i = 0; i < rows * ldc; i++) c[i] = want[i] = rnd() * 4.0f;
    gml_f32_gemm_ukernel__ref(mr, kc, a, lda, b, ldb, want, ldc, m, n, acc);
    v->fn(kc, a, lda, b, ldb, c, ldc, m, n, acc);
    bool ok = true;
    for (size_t i = 0; i < rows && ok; i++)
        for (size_t j = 0; j < ldc && ok; j++)
            if (memcmp(&c[i * ldc + j], &want[i * ldc + j], sizeof(float)) != 0) {
                fprintf(stderr,
                        "FAIL %s kc=%zu lda=%zu m=%d n=%d acc=%d ldb=%zu: c[%zu][%zu] = %.9g, "
                        "want %.9g%s\n",
                        v->name, kc, lda, m, n, acc, ldb, i, j, c[i * ldc + j], want[i * ldc + j],
                        (int)i < m && (int)j < n ? "" : " (outside the tile: must be untouched)");
                ok = false;
            }
    free(a);
    free(b);
    free(c);
    free(want);
    checks++;
    return ok;
}

/* One call of matrix-vector variant v against the scalar one (the
 * definition), bit for bit: a [m x k] (row stride lda), w [n x k] (row
 * stride ldw), exactly as long as they must be (ASan catches reads past
 * them); c's elements outside the m x n tile must be left alone. */
static bool check_gemv(const gml_gemv_variant *v, size_t k, int m, int n, size_t lda, size_t ldw) {
    const size_t ldc = (size_t)v->nr + 3, rows = (size_t)v->mr + 2;
    const size_t a_len = (size_t)(m - 1) * lda + k, w_len = (size_t)(n - 1) * ldw + k;
    float *a = malloc(sizeof(float) * a_len), *w = malloc(sizeof(float) * w_len);
    float *c = malloc(sizeof(float) * rows * ldc), *want = malloc(sizeof(float) * rows * ldc);
    for (size_t i = 0; i < a_len; i++) a[i] = rnd();
    for (size_t i = 0; i < w_len; i++) w[i] = rnd();
    for (size_t i = 0; i < rows * ldc; i++) c[i] = want[i] = rnd() * 4.0f;
    gml_f32_gemv_ukernel__scalar_4x16(k, a, lda, m, w, ldw, n, want, ldc);
    v->fn(k, a, lda, m, w, ldw, n, c, ldc);
    bool ok = true;
    for (size_t i = 0; i < rows && ok; i++)
        for (size_t j = 0; j < ldc && ok; j++)
            if (memcmp(&c[i * ldc + j], &want[i * ldc + j], sizeof(float)) != 0) {
                fprintf(
                    stderr,
                    "FAIL %s k=%zu m=%d n=%d lda=%zu ldw=%zu: c[%zu][%zu] = %.9g, want %.9g%s\n",
                    v->name, k, m, n, lda, ldw, i, j, c[i * ldc + j], want[i * ldc + j],
                    (int)i < m && (int)j < n ? "" : " (outside the tile: must be untouched)");
                ok = false;
            }
    free(a), free(w), free(c), free(want);
    checks++;
    return ok;
}

/* Every matrix-vector variant on k around its 8 / 16 blocks, every m, n. */
static int check_gemv_variants(void) {
    const size_t ks[] = {1, 2, 7, 8, 9, 15, 16, 17, 33, 100, 301};
    for (int vi = 0; vi < gml_gemv_n_variants; vi++) {
        const gml_gemv_variant *v = &gml_gemv_variants[vi];
        if (!gml_cpu_has(v->isa)) {
            printf("skip %s: this CPU lacks %s\n", v->name, gml_isa_name(v->isa));
            continue;
        }
        int before = failures;
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
            for (int m = 1; m <= v->mr; m++)
                for (int n = 1; n <= v->nr; n++)
                    for (size_t pad = 0; pad <= 5; pad += 5)
                        if (!check_gemv(v, ks[ki], m, n, ks[ki] + pad, ks[ki] + 2 * pad) &&
                            ++failures > 20) {
                            fprintf(stderr, "too many failures\n");
                            return 1;
                        }
        printf("%s (%s, %dx%d): %s\n", v->name, gml_isa_name(v->isa), v->mr, v->nr,
               failures == before ? "ok" : "FAILED");
    }
    return 0;
}

/* The same for the matrix-vector kernels against a converted weight (f16,
 * bf16, q8_0; gemv.inc), each against its type's scalar variant (the
 * definition of gemm.h), bit for bit: w's rows of random bits (f16, bf16:
 * NaN and inf included where the bits fall so) or random q8_0 blocks. */
static bool check_xw_gemv(gml_type t, const gml_xw_gemv_variant *v, const gml_xw_gemv_variant *ref,
                          size_t k, int m, int n, size_t lda, size_t ldw_elems) {
    const size_t ldc = (size_t)v->nr + 3, rows = (size_t)v->mr + 2;
    const size_t ldw = gml_row_size(t, (int64_t)ldw_elems);
    const size_t a_len = (size_t)(m - 1) * lda + k, w_len = (size_t)(n - 1) * ldw + gml_row_size(t, (int64_t)k);
    float *a = malloc(sizeof(float) * a_len);
    unsigned char *w = malloc(w_len);
    float *c = malloc(sizeof(float) * rows * ldc), *want = malloc(sizeof(float) * rows * ldc);
    for (size_t i = 0; i < a_len; i++) a[i] = rnd();
    for (size_t i = 0; i < w_len; i++) w[i] = (unsigned char)((unsigned)(rnd() * 1000 + 1000) & 0xffu);
    if (t == GML_Q8_0) /* sane scales: f16 of values in [0, 1) */
        for (size_t r = 0; r < (size_t)n; r++)
            for (size_t b = 0; b < k / 32; b++) {
                const uint16_t d = gml_fp32_to_fp16(fabsf(rnd()) / 64);
                memcpy(w + r * ldw + b * 34, &d, 2);
            }
    if (t == GML_BF16) /* keep the exponents sane */
        for (size_t i = 1; i < w_len; i += 2) w[i] = (unsigned char)(0x3c + (w[i] & 3));
    if (t == GML_F16)
        for (size_t i = 1; i < w_len; i += 2) w[i] = (unsigned char)(0x30 + (w[i] & 0x8b));
    for (size_t i = 0; i < rows * ldc; i++) c[i] = want[i] = rnd() * 4.0f;
    ref->fn(k, a, lda, m, w, ldw, n, want, ldc);
    v->fn(k, a, lda, m, w, ldw, n, c, ldc);
    bool ok = true;
    for (size_t i = 0; i < rows && ok; i++)
        for (size_t j = 0; j < ldc && ok; j++)
            if (memcmp(&c[i * ldc + j], &want[i * ldc + j], sizeof(float)) != 0) {
                fprintf(stderr, "FAIL %s k=%zu m=%d n=%d: c[%zu][%zu] = %.9g, want %.9g%s\n", v->name,
                        k, m, n, i, j, c[i * ldc + j], want[i * ldc + j],
                        (int)i < m && (int)j < n ? "" : " (outside the tile: must be untouched)");
                ok = false;
            }
    free(a), free(w), free(c), free(want);
    checks++;
    return ok;
}

static int check_xw_gemv_variants(void) {
    const gml_type types[] = {GML_F16, GML_BF16, GML_Q8_0};
    const size_t ks[] = {1, 7, 31, 32, 33, 96, 301};
    for (int ti = 0; ti < 3; ti++) {
        int nv;
        const gml_xw_gemv_variant *vs = gml_xw_gemv_variants(types[ti], &nv);
        for (int vi = 0; vi < nv; vi++) {
            const gml_xw_gemv_variant *v = &vs[vi];
            if (!gml_cpu_has(v->isa)) {
                printf("skip %s: this CPU lacks %s\n", v->name, gml_isa_name(v->isa));
                continue;
            }
            int before = failures;
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
                if (types[ti] == GML_Q8_0 && ks[ki] % 32) continue;
                for (int m = 1; m <= v->mr; m++)
                    for (int n = 1; n <= v->nr; n++)
                        for (size_t pad = 0; pad <= 32; pad += 32)
                            if (!check_xw_gemv(types[ti], v, &vs[0], ks[ki], m, n, ks[ki] + pad / 4,
                                               ks[ki] + pad) &&
                                ++failures > 20) {
                                fprintf(stderr, "too many failures\n");
                                return 1;
                            }
            }
            printf("%s (%s, %dx%d): %s\n", v->name, gml_isa_name(v->isa), v->mr, v->nr,
                   failures == before ? "ok" : "FAILED");
        }
    }
    return 0;
}

/* One call of few-rows variant v (gemm_rt.inc) against the fma chains:
 * A [n x k] with row stride lda (packed by gml_gemm_rt_pack), W [m x k]
 * with row stride ldw, exactly m rows allocated (a read past them is an
 * ASan error), the tile of C [n x m] in a larger buffer whose other
 * elements must stay. */
static bool check_rt(const gml_gemm_rt_variant *v, size_t k, int m, int n, size_t lda,
                     size_t ldw) {
    const int nr = v->main + 4;
    const size_t ldc = (size_t)v->mr + 3, rows = (size_t)nr + 2; /* C [n x m] */
    float *a = malloc(sizeof(float) * ((size_t)n * lda + 1));
    float *w = malloc(sizeof(float) * ((size_t)(m - 1) * ldw + k));
    float *at = malloc(sizeof(float) * (k * (size_t)(v->main + v->lanes) + 1));
    float *c = malloc(sizeof(float) * rows * ldc), *want = malloc(sizeof(float) * rows * ldc);
    for (size_t i = 0; i < (size_t)n * lda; i++) a[i] = rnd();
    for (size_t i = 0; i < (size_t)(m - 1) * ldw + k; i++) w[i] = rnd();
    for (size_t i = 0; i < rows * ldc; i++) c[i] = want[i] = rnd() * 4.0f;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float s = 0.0f;
            for (size_t kk = 0; kk < k; kk++) s = fmaf(w[i * ldw + kk], a[j * lda + kk], s);
            want[j * ldc + i] = s;
        }
    if (lda > k) { /* packed from A stored transposed: (j, k) at a_t[k n + j] */
        float *a_t = malloc(sizeof(float) * ((size_t)n * k + 1));
        for (int j = 0; j < n; j++)
            for (size_t kk = 0; kk < k; kk++) a_t[kk * (size_t)n + (size_t)j] = a[j * lda + kk];
        gml_gemm_rt_pack(v, (const char *)a_t, sizeof(float), (int64_t)((size_t)n * sizeof(float)),
                         (int64_t)k, n, at);
        free(a_t);
    } else {
        gml_gemm_rt_pack(v, (const char *)a, (int64_t)(lda * sizeof(float)), sizeof(float),
                         (int64_t)k, n, at);
    }
    v->fn(k, w, ldw, m, at, n, c, ldc);
    bool ok = true;
    for (size_t i = 0; i < rows && ok; i++)
        for (size_t j = 0; j < ldc && ok; j++)
            if (memcmp(&c[i * ldc + j], &want[i * ldc + j], sizeof(float)) != 0) {
                fprintf(stderr, "FAIL %s k=%zu m=%d n=%d lda=%zu ldw=%zu: c[%zu][%zu] = %.9g, "
                        "want %.9g%s\n", v->name, k, m, n, lda, ldw, i, j, c[i * ldc + j],
                        want[i * ldc + j],
                        (int)i < n && (int)j < m ? "" : " (outside the tile: must be untouched)");
                ok = false;
            }
    free(a);
    free(w);
    free(at);
    free(c);
    free(want);
    checks++;
    return ok;
}

/* Every few-rows variant on k around its blocks of 16, m around its rows
 * and groups, n on both sides of MAIN. */
static int check_rt_variants(void) {
    const size_t ks[] = {1, 3, 15, 16, 17, 31, 32, 33, 47, 100, 301};
    for (int vi = 0; vi < gml_gemm_rt_n_variants; vi++) {
        const gml_gemm_rt_variant *v = &gml_gemm_rt_variants[vi];
        if (!gml_cpu_has(v->isa)) {
            printf("skip %s: this CPU lacks %s\n", v->name, gml_isa_name(v->isa));
            continue;
        }
        const int nr = v->main + 4;
        const int ms[] = {1, 2, 3, 4, 5, v->mr / 2 + 1, v->mr - 1, v->mr};
        const int ns[] = {1, 2, 7, v->main - 1, v->main, v->main + 1, v->main + 3, nr};
        const int before = failures;
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
            for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
                    for (size_t pad = 0; pad <= 5; pad += 5)
                        if (ms[mi] <= v->mr &&
                            !check_rt(v, ks[ki], ms[mi], ns[ni], ks[ki] + pad, ks[ki] + 2 * pad) &&
                            ++failures > 20) {
                            fprintf(stderr, "too many failures\n");
                            return 1;
                        }
        printf("%s (%s, %dx%d): %s\n", v->name, gml_isa_name(v->isa), v->mr, nr,
               failures == before ? "ok" : "FAILED");
    }
    return 0;
}

int main(void) {
    if (check_gemv_variants()) return 1;
    if (check_xw_gemv_variants()) return 1;
    if (check_rt_variants()) return 1;
    const size_t kcs[] = {1, 2, 3, 17, 301, 512}; /* 512: the rows path's KC (Goto's: gemm.h) */
    for (int vi = 0; vi < gml_gemm_n_variants; vi++) {
        const gml_gemm_variant *v = &gml_gemm_variants[vi];
        if (!gml_cpu_has(v->isa)) {
            printf("skip %s: this CPU lacks %s\n", v->name, gml_isa_name(v->isa));
            continue;
        }
        const int ms[] = {1, 2, v->mr / 2, v->mr - 1, v->mr};
        const int ns[] = {1, 2, 7, 8, 9, 15, 16, 17, v->nr / 2 + 1, v->nr - 1, v->nr};
        int before = failures;
        for (size_t ki = 0; ki < sizeof kcs / sizeof kcs[0]; ki++)
            for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                    const int m = ms[mi], n = ns[ni];
                    if (m < 1 || m > v->mr || n < 1 || n > v->nr) continue;
                    for (int acc = 0; acc < 2; acc++)
                        for (int inplace = 0; inplace < 2; inplace++)
                            for (size_t ldb = (size_t)v->nr; ldb <= (size_t)v->nr + 5; ldb += 5) {
                                const size_t lda = inplace ? kcs[ki] + 3 : 0;
                                if (check_case(v, kcs[ki], lda, m, n, acc, ldb)) continue;
                                if (++failures > 20) {
                                    fprintf(stderr, "too many failures\n");
                                    return 1;
                                }
                            }
                }
        printf("%s (%s, %dx%d): %s\n", v->name, gml_isa_name(v->isa), v->mr, v->nr,
               failures == before ? "ok" : "FAILED");
    }
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
