/* The README's C example recomputed with naive loops in double, from the
 * same inputs, to check the value it prints:
 *
 *   readme_ref "out [2,10,64], out[1,9,0] = 0.123456"   (its whole output)
 *
 * x [2, 10, 64], x[i] = sinf(i); w [64, 64] ([out, in]), w[i] = cosf(i) / 8;
 * q = x w^T; s = q x^T [2, 10, 10]; a = softmax(s / sqrt(64)), causal (query
 * t sees keys u <= t); out = a x [2, 10, 64]. Exits 0 if the output names
 * the shape [2,10,64] and its value is within 1e-5 + 1e-5 |ref| of out[1,9,0]
 * (the example prints 6 decimals); 1, saying why, otherwise (NaN included).
 * Written from the math, sharing no code with the library. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 10, D = 64 };

static double reference(int b0, int t0, int d0) {
    static float x[B * T * D], w[D * D];
    for (int i = 0; i < B * T * D; i++) x[i] = sinf((float)i);
    for (int i = 0; i < D * D; i++) w[i] = cosf((float)i) / 8;
    double q[T][D], s[T], out = 0;
    const float *xb = x + b0 * T * D;
    for (int t = 0; t < T; t++)
        for (int o = 0; o < D; o++) {
            q[t][o] = 0;
            for (int i = 0; i < D; i++) q[t][o] += (double)xb[t * D + i] * w[o * D + i];
        }
    double max = -INFINITY, sum = 0;
    for (int u = 0; u <= t0; u++) { /* causal: keys u <= t0 */
        s[u] = 0;
        for (int d = 0; d < D; d++) s[u] += q[t0][d] * xb[u * D + d];
        s[u] /= sqrt((double)D);
        max = fmax(max, s[u]);
    }
    for (int u = 0; u <= t0; u++) sum += exp(s[u] - max);
    for (int u = 0; u <= t0; u++) out += exp(s[u] - max) / sum * xb[u * D + d0];
    return out;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: readme_ref \"OUTPUT OF readme_example\"\n");
        return 2;
    }
    const char *prefix = "out [2,10,64], out[1,9,0] = ";
    const char *at = strstr(argv[1], prefix);
    if (!at) {
        fprintf(stderr, "readme_ref: FAIL: the example printed no \"%s...\" line:\n%s\n", prefix,
                argv[1]);
        return 1;
    }
    char *end;
    const double got = strtod(at + strlen(prefix), &end);
    const double want = reference(1, 9, 0), tol = 1e-5 + 1e-5 * fabs(want);
    if (end == at + strlen(prefix) || !(fabs(got - want) <= tol)) {
        fprintf(stderr, "readme_ref: FAIL: the example printed out[1,9,0] = %.*s; the naive loops "
                "give %.7f (tolerance %.1e)\n", (int)strcspn(at + strlen(prefix), "\n"),
                at + strlen(prefix), want, tol);
        return 1;
    }
    printf("readme_example: out[1,9,0] = %.6f, the naive loops give %.7f (|diff| %.1e <= %.1e)\n",
           got, want, fabs(got - want), tol);
    return 0;
}
