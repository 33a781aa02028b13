/* The clock and the timed runs of run-graph (every mode) and bench: one
 * monotonic clock, one median, one loop of a warm-up and timed runs. Needs
 * only the C library (bench includes it without run-graph's rg.h). */
#ifndef RUN_GRAPH_RG_TIME_H
#define RUN_GRAPH_RG_TIME_H

#include <stdbool.h>

/* Milliseconds on the monotonic clock. */
double rg_now_ms(void);

/* Ascending order of doubles, for qsort. */
int rg_cmp_double(const void *a, const void *b);

/* Sorts v[0..n) ascending and returns its median (n even: the mean of the
 * two middle values); v[0] is then the minimum. */
double rg_median(double *v, int n);

/* One run of what is timed: false when it failed. i is -1 for the warm-up,
 * else 0 .. repeat-1. A run that times only part of its work sets *ms to
 * that time; left negative, the run's time is the wall time of the call. */
typedef bool (*rg_timed_run)(void *user, int i, double *ms);

/* One warm-up when repeat > 1, then `repeat` timed runs, their times in
 * ms[0..repeat) in run order; false at the first run that fails. */
bool rg_time_runs(int repeat, rg_timed_run run, void *user, double *ms);

#endif
