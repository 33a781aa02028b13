/* Every exp micro-kernel variant (ops/softmax.inc, GML_F32_VEXP_UKERNELS):
 * tails of every length class, special values, and the measured maximum
 * error against exp in double over a sweep of floats. */
#include "../ops/ukernels.h"
#include "simd_check.h"

#include <float.h>

/* Documented bounds (ops/vexp.h): normal results within this relative error
 * and ulps of exp(x) in double; subnormal results within this many
 * subnormal ulps (2^-149). */
#define MAX_REL_ERR 1.0e-7
#define MAX_ULP_ERR 1.0
#define MAX_SUBNORMAL_ULPS 1.0

typedef struct {
    gml_isa isa;
    gml_f32_vexp_ukernel *fn;
    int tile;
    const char *name;
} variant;

#define ENTRY(isa, fn, tile) {isa, fn, tile, #fn},
static const variant VARIANTS[] = {GML_F32_VEXP_UKERNELS(ENTRY)};

/* Tails: every length class, values across the whole range, and nothing
 * written past n. */
static void check_lengths(const variant *v) {
    size_t lens[12];
    int nl = tile_lengths(v->tile, lens);
    for (int l = 0; l < nl; l++) {
        const size_t n = lens[l], pad = 32;
        float *x = malloc(n * sizeof *x), *y = malloc((n + pad) * sizeof *y);
        fill_uniform(x, n, -110.0f, 95.0f);
        for (size_t i = 0; i < n + pad; i++) y[i] = 12345.0f;
        v->fn(n, x, y);
        for (size_t i = 0; i < n; i++) {
            const double e = exp((double)x[i]);
            const bool ok = isinf(e) || e > FLT_MAX ? isinf(y[i])
                          : e < FLT_MIN             ? fabs(y[i] - e) <= 2 * 0x1p-149
                                                    : fabs(y[i] - e) <= MAX_REL_ERR * e;
            CHECK(ok, "%s n=%zu: exp(%.9g) = %.9g, want %.9g", v->name, n, (double)x[i],
                  (double)y[i], e);
        }
        for (size_t i = n; i < n + pad; i++)
            CHECK(y[i] == 12345.0f, "%s n=%zu: wrote y[%zu] past the end", v->name, n, i);
        free(x);
        free(y);
    }
}

static void check_specials(const variant *v) {
    const float x[] = {0.0f, -0.0f, -INFINITY, INFINITY, NAN, -NAN, 1.0f, -1.0f,
                       88.72283f, 88.72284f, 89.0f, 1000.0f, -87.33654f, -103.97208f,
                       -103.98f, -104.0f, -1000.0f, FLT_MAX, -FLT_MAX, 0x1p-149f, -0x1p-149f};
    const size_t n = sizeof x / sizeof *x;
    float y[sizeof x / sizeof *x];
    v->fn(n, x, y);
    for (size_t i = 0; i < n; i++) {
        const float want = expf(x[i]); /* glibc: correctly rounded here */
        const bool ok = isnan(want) ? isnan(y[i])
                      : want == 0 || isinf(want) || want == 1.0f ? y[i] == want
                      : fabs((double)y[i] - want) <= MAX_ULP_ERR * ulp_of(want);
        CHECK(ok, "%s: exp(%.9g) = %.9g, want %.9g", v->name, (double)x[i], (double)y[i],
              (double)want);
    }
}

/* Max error over every `step`-th float of [lo, hi] (same sign). */
typedef struct {
    double rel, ulps, sub_ulps;
    float rel_at, ulps_at, sub_at;
} errors;

static void sweep(const variant *v, float lo, float hi, uint32_t step, errors *err) {
    enum { CHUNK = 4096 };
    float x[CHUNK], y[CHUNK];
    /* walk the bit patterns of |x| from |hi| down to |lo| or the reverse */
    uint32_t a = f32_bits(fabsf(lo)), b = f32_bits(fabsf(hi));
    const float sign = lo < 0 ? -1.0f : 1.0f;
    if (a > b) {
        uint32_t t = a;
        a = b;
        b = t;
    }
    for (uint64_t u = a; u <= b;) {
        size_t n = 0;
        for (; n < CHUNK && u <= b; n++, u += step) {
            float m;
            uint32_t bits = (uint32_t)u;
            memcpy(&m, &bits, sizeof m);
            x[n] = sign * m;
        }
        v->fn(n, x, y);
        for (size_t i = 0; i < n; i++) {
            const double e = exp((double)x[i]), d = fabs((double)y[i] - e);
            if (e < FLT_MIN) {
                const double s = d / 0x1p-149;
                if (s > err->sub_ulps) err->sub_ulps = s, err->sub_at = x[i];
            } else if (e <= FLT_MAX) {
                const double r = d / e, q = d / ulp_of(e);
                if (r > err->rel) err->rel = r, err->rel_at = x[i];
                if (q > err->ulps) err->ulps = q, err->ulps_at = x[i];
            }
        }
    }
}

/* Every 128th float in optimized builds, every 1024th in debug ones (with
 * sanitizers); every float with GGMLITE_VEXP_EXHAUSTIVE=1 (two minutes). */
#ifdef __OPTIMIZE__
#define SWEEP_STEP 128
#else
#define SWEEP_STEP 1024
#endif
static void check_accuracy(const variant *v) {
    const char *env = getenv("GGMLITE_VEXP_EXHAUSTIVE");
    const uint32_t step = env && *env == '1' ? 1 : SWEEP_STEP;
    errors err = {0};
    /* softmax's range, then the rest where exp is a normal float, then the
     * subnormal results */
    sweep(v, -0x1.5d589ep+6f /* ln(FLT_MIN) = -87.3365 */, -0.0f, step, &err);
    sweep(v, 0.0f, 0x1.62e42ep+6f /* ln(FLT_MAX) = 88.7228 */, step, &err);
    sweep(v, -103.97f, -0x1.5d58a0p+6f, (step + 15) / 16, &err);
    printf("%-36s max error %.3g relative (%.2f ulp) at x = %.9g, %.2f ulp at x = %.9g; "
           "subnormal results %.2f ulp at x = %.9g\n",
           v->name, err.rel, err.ulps, (double)err.rel_at, err.ulps, (double)err.ulps_at,
           err.sub_ulps, (double)err.sub_at);
    CHECK(err.rel <= MAX_REL_ERR, "%s: max relative error %.3g > %.3g", v->name, err.rel,
          MAX_REL_ERR);
    CHECK(err.ulps <= MAX_ULP_ERR, "%s: max error %.2f ulp > %.2f", v->name, err.ulps,
          MAX_ULP_ERR);
    CHECK(err.sub_ulps <= MAX_SUBNORMAL_ULPS, "%s: subnormal error %.2f ulp > %.2f", v->name,
          err.sub_ulps, MAX_SUBNORMAL_ULPS);
}

int main(void) {
    for (size_t i = 0; i < sizeof VARIANTS / sizeof *VARIANTS; i++) {
        const variant *v = &VARIANTS[i];
        if (!cpu_runs(v->isa, v->name)) continue;
        check_lengths(v);
        check_specials(v);
        check_accuracy(v);
    }
    return check_report("test_ukernels_vexp");
}
