/* AVX2+FMA f32 GEMM micro-kernel (see gemm.h): 6 rows x 16 columns of C in
 * 12 ymm accumulators; per k, 2 vector loads of B and 6 broadcasts of A
 * feed 12 FMAs (15 of the 16 ymm registers). Compiled with -mavx2 -mfma.
 * Operands read in place are prefetched ahead as in gemm_avx512.c. */
#include "gemm.h"

#include <immintrin.h>

/* Lane mask for the first n of 8 lanes (n may be <= 0 or >= 8). */
static inline __m256i lanes(int n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

#define MR 6
#define NR 16
#define PF_B_ROWS 24
#define PF_A_FLOATS 128

/* A hint for the line `floats` floats past p; the address may lie past the
 * operand (prefetches never fault), hence integer arithmetic. */
static inline void prefetch(const float *p, size_t floats) {
    _mm_prefetch((const char *)((uintptr_t)p + floats * sizeof(float)), _MM_HINT_T0);
}

/* One k step: c[i] += a_i * b[k, 0:16] for the 6 rows, a_i at A_I. */
#define STEP(A_I)                                                           \
    do {                                                                    \
        const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);  \
        _Pragma("GCC unroll 6") for (int i = 0; i < MR; i++) {              \
            const __m256 ai = _mm256_broadcast_ss(A_I);                     \
            c0[i] = _mm256_fmadd_ps(ai, b0, c0[i]);                         \
            c1[i] = _mm256_fmadd_ps(ai, b1, c1[i]);                         \
        }                                                                   \
    } while (0)

void gml_f32_gemm_ukernel__avx2_6x16(size_t kc, const float *a, size_t lda, const float *b,
                                     size_t ldb, float *c, size_t ldc, int m, int n, bool acc) {
    const __m256i m0 = lanes(n), m1 = lanes(n - 8);
    __m256 c0[MR], c1[MR];
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
        c0[i] = c1[i] = _mm256_setzero_ps();
        if (acc && i < m) {
            c0[i] = _mm256_maskload_ps(c + i * ldc, m0);
            c1[i] = _mm256_maskload_ps(c + i * ldc + 8, m1);
        }
    }
    if (lda == 0 && ldb == NR) { /* both packed */
        for (size_t k = 0; k < kc; k++, a += MR, b += NR) STEP(a + i);
    } else if (lda == 0) { /* B in place */
        for (size_t k = 0; k < kc; k++, a += MR, b += ldb) {
            prefetch(b, PF_B_ROWS * ldb);
            STEP(a + i);
        }
    } else { /* A in place: a[i * lda + k]; rows past m reread row 0 */
        const float *row[MR];
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) row[i] = a + (i < m ? (size_t)i : 0) * lda;
        for (size_t k = 0; k < kc; k++, b += ldb) {
            if (k % 16 == 0) {
#pragma GCC unroll 6
                for (int i = 0; i < MR; i++) prefetch(row[i], k + PF_A_FLOATS);
            }
            STEP(row[i] + k);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
        if (i < m) {
            _mm256_maskstore_ps(c + i * ldc, m0, c0[i]);
            _mm256_maskstore_ps(c + i * ldc + 8, m1, c1[i]);
        }
    }
}

/* ---- matrix-vector (gemm.h): lanes over 8 rows of W ----------------------- */

/* r[j] = row j of an 8 x 8 block -> r[k] = column k. */
static inline void transpose8(__m256 r[8]) {
    __m256 t[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) { /* r[i + c], half H: rows i..i+3 of column 4H + c */
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int c = 0; c < 4; c++) { /* low halves make column c, high ones 4 + c */
        t[c] = _mm256_permute2f128_ps(r[c], r[4 + c], 0x20);
        t[4 + c] = _mm256_permute2f128_ps(r[c], r[4 + c], 0x31);
    }
    for (int i = 0; i < 8; i++) r[i] = t[i];
}

/* As the AVX-512 variant, 8 rows of W per call, 8 k at a time. */
void gml_f32_gemv_ukernel__avx2_4x8(size_t k, const float *a, size_t lda, int m, const float *w,
                                    size_t ldw, int n, float *c, size_t ldc) {
    const float *row[8];
    for (int j = 0; j < 8; j++) row[j] = w + (j < n ? (size_t)j : 0) * ldw;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    for (size_t k0 = 0; k0 < k; k0 += 8) {
        const int nk = (int)GML_MIN((size_t)8, k - k0);
        const __m256i km = lanes(nk);
        __m256 r[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) r[j] = _mm256_maskload_ps(row[j] + k0, km);
        transpose8(r);
        for (int kk = 0; kk < nk; kk++)
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
                if (i < m)
                    acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(a[i * lda + k0 + kk]), r[kk], acc[i]);
    }
    const __m256i nm = lanes(n);
    for (int i = 0; i < m; i++) _mm256_maskstore_ps(c + i * ldc, nm, acc[i]);
}

/* ---- matrix-vector against a converted weight (gemv.inc) -------------------
 * As the AVX-512 variants (ops/gemm_avx512.c): 8 rows of W, 8 k at a time,
 * each loaded as f16 (F16C vcvtph2ps), bf16 or q8_0 and converted in
 * registers, then transposed and used as the f32 kernel does. */

static inline __m256 load_f16(const char *row, size_t k0, int nk) {
    if (nk == 8) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * k0)));
    uint16_t tmp[8] = {0};
    memcpy(tmp, row + 2 * k0, (size_t)nk * 2);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)tmp));
}

static inline __m256 load_bf16(const char *row, size_t k0, int nk) {
    __m128i h;
    if (nk == 8) {
        h = _mm_loadu_si128((const __m128i *)(row + 2 * k0));
    } else {
        uint16_t tmp[8] = {0};
        memcpy(tmp, row + 2 * k0, (size_t)nk * 2);
        h = _mm_loadu_si128((const __m128i *)tmp);
    }
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline __m256 load_q8_0(const char *row, size_t k0, int nk) {
    (void)nk;
    const gml_block_q8_0 *b = (const gml_block_q8_0 *)(const void *)row + k0 / GML_QK8_0;
    uint16_t d;
    memcpy(&d, &b->d, 2);
    const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + k0 % 32)));
    return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(d)), _mm256_cvtepi32_ps(q));
}

#define XW_GEMV_AVX2(NAME, LOAD, PF_BYTES)                                                       \
    void NAME(size_t k, const float *a, size_t lda, int m, const void *w, size_t ldw, int n,    \
              float *c, size_t ldc) {                                                           \
        const char *row[8];                                                                     \
        for (int j = 0; j < 8; j++) row[j] = (const char *)w + (j < n ? (size_t)j : 0) * ldw;   \
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),         \
                         _mm256_setzero_ps()};                                                  \
        for (size_t k0 = 0; k0 < k; k0 += 8) {                                                  \
            const int nk = (int)GML_MIN((size_t)8, k - k0);                                     \
            __m256 r[8];                                                                        \
            _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) {                               \
                if (k0 % 32 == 0 && k0 + 64 < k)                                                \
                    _mm_prefetch(row[j] + PF_BYTES(k0 + 64), _MM_HINT_T0);                      \
                r[j] = LOAD(row[j], k0, nk);                                                    \
            }                                                                                   \
            transpose8(r);                                                                      \
            for (int kk = 0; kk < nk; kk++)                                                     \
                _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) if (i < m) acc[i] =         \
                    _mm256_fmadd_ps(_mm256_set1_ps(a[i * lda + k0 + kk]), r[kk], acc[i]);       \
        }                                                                                       \
        const __m256i nm = lanes(n);                                                            \
        for (int i = 0; i < m; i++) _mm256_maskstore_ps(c + i * ldc, nm, acc[i]);               \
    }

#define PF_2(k) (2 * (k))
#define PF_Q8(k) ((k) / 32 * 34)
XW_GEMV_AVX2(gml_f16_gemv_ukernel__avx2_4x8, load_f16, PF_2)
XW_GEMV_AVX2(gml_bf16_gemv_ukernel__avx2_4x8, load_bf16, PF_2)
XW_GEMV_AVX2(gml_q8_0_gemv_ukernel__avx2_4x8, load_q8_0, PF_Q8)
