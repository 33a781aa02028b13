/* The scheduler's pieces shared by threadpool.c and compute.c: a barrier for
 * the threads of one compute, and running a task on n threads (ggmlite's own
 * pool, or OpenMP in a GGMLITE_OPENMP build). */
#ifndef GGMLITE_THREADPOOL_H
#define GGMLITE_THREADPOOL_H

#include "internal.h"

/* A reusable barrier for nth threads; zero-initialize it. The arrival count
 * and the generation that waiters watch sit on separate cache lines, so
 * arriving threads do not disturb the spinning ones. */
struct gml_sync_barrier {
    _Alignas(GML_ALIGN) atomic_uint arrived;
    _Alignas(GML_ALIGN) atomic_uint gen;
    atomic_uint sleepers; /* waiters asleep in the kernel: the last arrival wakes them */
};

/* Returns once all nth threads have called it. The last to arrive runs
 * last(arg) while every other thread waits, then releases them: shared state
 * changed there (gml_chunk_next's counter, the stop flag) is the same for
 * all threads until the next barrier. Waiters spin briefly, then sleep
 * (futex), so more threads than cores still work. */
void gml_sync_barrier_wait(struct gml_sync_barrier *b, int nth, void (*last)(void *arg), void *arg);

typedef void (*gml_task_fn)(void *arg, int ith, int nth);

/* Runs fn(arg, ith, nth) for ith = 0..nth-1 on nth threads, the caller being
 * ith 0, and returns when all have returned. pool NULL means the process-wide
 * pool. When nth threads cannot be had (a compute started from inside another
 * one, a pool smaller than nth, an OpenMP team smaller than asked, threads
 * that cannot be created) fn runs once on the caller with nth = 1. */
void gml_parallel_run(gml_threadpool *pool, int nth, gml_task_fn fn, void *arg);

#endif
