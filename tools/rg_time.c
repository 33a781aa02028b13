/* The clock and the timed runs (rg_time.h). */
#define _POSIX_C_SOURCE 200809L
#include "rg_time.h"

#include <stdlib.h>
#include <time.h>

double rg_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

int rg_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double rg_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, rg_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bool rg_time_runs(int repeat, rg_timed_run run, void *user, double *ms) {
    for (int i = repeat > 1 ? -1 : 0; i < repeat; i++) {
        const double t0 = rg_now_ms();
        double t = -1;
        if (!run(user, i, &t)) return false;
        if (i >= 0) ms[i] = t >= 0 ? t : rg_now_ms() - t0;
    }
    return true;
}
