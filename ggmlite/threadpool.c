/* Threads: a persistent pool of workers that sleep between computes, the
 * barrier the threads of a compute meet at, and the process-wide default
 * pool (made on first use, grown on demand, joined at exit). In a
 * GGMLITE_OPENMP build, computes run in an OpenMP parallel region instead and
 * a pool only fixes the thread count.
 *
 * Waiting, everywhere here, is: spin a little while with a pause instruction
 * (a wake-up then costs nothing), then sleep in the kernel on the word that
 * will change (a futex on Linux, a condition variable elsewhere). A waiter
 * announces that it sleeps in a counter, so the thread that changes the word
 * makes a system call only when someone sleeps. */
#define _GNU_SOURCE /* syscall, pthread_setname_np */
#include "threadpool.h"

#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif
#ifdef GGMLITE_OPENMP
#include <omp.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

/* Spin rounds before sleeping (a pause is ~30 ns on Zen 5): at a barrier
 * between nodes, for the caller waiting for the workers to finish, and for a
 * worker waiting for its next compute. With more threads than cores a spinner
 * only steals time from the thread it waits for, so it sleeps almost at once. */
enum { SPIN_BARRIER = 2048, SPIN_IDLE = 4096, SPIN_OVERSUBSCRIBED = 16 };

static int online_cpus(void) {
    static atomic_int cached;
    int n = atomic_load_explicit(&cached, memory_order_relaxed);
    if (n == 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c < 1 ? 1 : c > INT_MAX ? INT_MAX : (int)c;
        atomic_store_explicit(&cached, n, memory_order_relaxed);
    }
    return n;
}

static int spin_rounds(int nth, int spin) { return nth > online_cpus() ? SPIN_OVERSUBSCRIBED : spin; }

/* ---- sleeping on a word ---------------------------------------------------- */

#ifdef __linux__
/* Sleeps while *word == val (returns at once if it already differs). */
static void sleep_while(atomic_uint *word, unsigned val) {
    syscall(SYS_futex, (unsigned *)word, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}
static void wake_all(atomic_uint *word) {
    syscall(SYS_futex, (unsigned *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}
#else
/* One condition variable for every word: a wake-up for one word wakes the
 * sleepers on all, which re-check theirs. Rare enough not to matter. */
static pthread_mutex_t sleep_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sleep_cv = PTHREAD_COND_INITIALIZER;
static void sleep_while(atomic_uint *word, unsigned val) {
    pthread_mutex_lock(&sleep_mu);
    if (atomic_load(word) == val) pthread_cond_wait(&sleep_cv, &sleep_mu);
    pthread_mutex_unlock(&sleep_mu);
}
static void wake_all(atomic_uint *word) {
    GML_UNUSED(word);
    pthread_mutex_lock(&sleep_mu);
    pthread_cond_broadcast(&sleep_cv);
    pthread_mutex_unlock(&sleep_mu);
}
#endif

/* Returns once *word != val (acquire). The sleeper count and the word are
 * accessed sequentially consistently on both sides, so either the waiter sees
 * the new value or the changer sees the sleeper and wakes it. */
static void await_change(atomic_uint *word, unsigned val, atomic_uint *sleepers, int spin) {
    for (int i = 0; i < spin; i++) {
        if (atomic_load_explicit(word, memory_order_acquire) != val) return;
        cpu_relax();
    }
    atomic_fetch_add(sleepers, 1);
    while (atomic_load(word) == val) sleep_while(word, val);
    atomic_fetch_sub(sleepers, 1);
}

/* After changing *word (seq_cst): wakes whoever sleeps on it. */
static void notify(atomic_uint *word, atomic_uint *sleepers) {
    if (atomic_load(sleepers)) wake_all(word);
}

/* ---- barrier --------------------------------------------------------------- */

void gml_sync_barrier_wait(struct gml_sync_barrier *b, int nth, void (*last)(void *arg), void *arg) {
    if (nth <= 1) {
        last(arg);
        return;
    }
    /* Read the generation before arriving: it cannot move until we have. */
    const unsigned gen = atomic_load_explicit(&b->gen, memory_order_relaxed);
    if (atomic_fetch_add_explicit(&b->arrived, 1, memory_order_acq_rel) + 1 == (unsigned)nth) {
        /* Last: everyone else waits, so last() runs alone; the generation
         * store publishes what it did (and all the threads' writes). */
        atomic_store_explicit(&b->arrived, 0, memory_order_relaxed);
        last(arg);
        atomic_fetch_add(&b->gen, 1);
        notify(&b->gen, &b->sleepers);
        return;
    }
    await_change(&b->gen, gen, &b->sleepers, spin_rounds(nth, SPIN_BARRIER));
}

/* Runs fn on the caller alone: the fallback whenever threads cannot be had. */
static void run_alone(gml_task_fn fn, void *arg) { fn(arg, 0, 1); }

/* A compute started from inside another on the same thread (from a node
 * callback) runs alone: the pool is busy with the outer one. */
static _Thread_local bool in_compute;

#ifdef GGMLITE_OPENMP
/* ---- OpenMP: the threads are OpenMP's; a pool is a thread count --------------- */

struct gml_threadpool {
    int n_threads;
};

gml_threadpool *gml_threadpool_new(int n_threads) {
    if (n_threads < 1 || n_threads > GML_MAX_THREADS) return NULL;
    gml_threadpool *pool = calloc(1, sizeof *pool);
    if (pool) pool->n_threads = n_threads;
    return pool;
}

void gml_threadpool_free(gml_threadpool *pool) { free(pool); }
void gml_threadpool_shutdown(void) {}

/* GCC's OpenMP runtime hangs a forked child that opens a parallel region
 * after its parent did: a forked child computes on one thread. */
static bool forked_child;
static void note_fork(void) { forked_child = true; }
static void watch_forks(void) { pthread_atfork(NULL, NULL, note_fork); }

void gml_parallel_run(gml_threadpool *pool, int nth, gml_task_fn fn, void *arg) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, watch_forks);
    if (nth <= 1 || in_compute || forked_child || (pool && pool->n_threads < nth)) {
        run_alone(fn, arg);
        return;
    }
    /* A team smaller than asked (thread limit, nested region) does nothing,
     * and the caller then runs alone: kernels were sized for nth or 1. */
    bool short_team = false;
    in_compute = true;
#pragma omp parallel num_threads(nth)
    {
        if (omp_get_num_threads() == nth) fn(arg, omp_get_thread_num(), nth);
        else if (omp_get_thread_num() == 0) short_team = true;
    }
    in_compute = false;
    if (short_team) run_alone(fn, arg);
}

#else
/* ---- the pool ---------------------------------------------------------------- */

/* One worker: its own cache line, so posting a job to one does not disturb
 * the others. Worker i runs thread index i + 1 of a compute. */
struct gml_worker {
    _Alignas(GML_ALIGN) atomic_uint seq; /* bumped to hand the worker a job (or to stop) */
    atomic_uint sleepers;
    struct gml_threadpool *pool;
    int ith;
    pthread_t thread;
};

struct gml_threadpool {
    int n_threads;              /* the caller plus n_threads - 1 workers */
    struct gml_worker *workers; /* [n_threads - 1] */
    pthread_mutex_t mu;         /* held by the compute that uses the pool */

    /* The job, written before the workers' seq is bumped. Only the workers
     * that take part are woken; the others sleep on. */
    gml_task_fn fn;
    void *arg;
    int nth;
    bool stop;

    _Alignas(GML_ALIGN) atomic_uint pending; /* workers still running the job */
    atomic_uint pending_sleepers;
};

static void *worker_main(void *arg) {
    struct gml_worker *w = arg;
    gml_threadpool *pool = w->pool;
    unsigned seen = 0;
    in_compute = true; /* a worker never starts a compute of its own */
    for (;;) {
        await_change(&w->seq, seen, &w->sleepers, spin_rounds(pool->n_threads, SPIN_IDLE));
        seen++; /* the caller bumps once per job and waits for it to finish */
        if (pool->stop) break;
        pool->fn(pool->arg, w->ith, pool->nth);
        if (atomic_fetch_sub(&pool->pending, 1) == 1) notify(&pool->pending, &pool->pending_sleepers);
    }
    return NULL;
}

/* Stops and joins the first n workers, frees the pool. */
static void pool_destroy(gml_threadpool *pool, int n_started) {
    pool->stop = true;
    for (int i = 0; i < n_started; i++) {
        atomic_fetch_add(&pool->workers[i].seq, 1);
        notify(&pool->workers[i].seq, &pool->workers[i].sleepers);
    }
    for (int i = 0; i < n_started; i++) pthread_join(pool->workers[i].thread, NULL);
    pthread_mutex_destroy(&pool->mu);
    free(pool->workers);
    free(pool);
}

gml_threadpool *gml_threadpool_new(int n_threads) {
    if (n_threads < 1 || n_threads > GML_MAX_THREADS) return NULL;
    gml_threadpool *pool = aligned_alloc(GML_ALIGN, gml_align_up(sizeof *pool, GML_ALIGN));
    if (!pool) return NULL;
    memset(pool, 0, sizeof *pool);
    pool->n_threads = n_threads;
    size_t bytes = gml_align_up((size_t)n_threads * sizeof *pool->workers, GML_ALIGN);
    pool->workers = aligned_alloc(GML_ALIGN, bytes);
    if (!pool->workers || pthread_mutex_init(&pool->mu, NULL) != 0) {
        free(pool->workers);
        free(pool);
        return NULL;
    }
    /* Workers block every signal: signals belong to the application's threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int started = 0;
    for (; started < n_threads - 1; started++) {
        struct gml_worker *w = &pool->workers[started];
        atomic_init(&w->seq, 0);
        atomic_init(&w->sleepers, 0);
        w->pool = pool;
        w->ith = started + 1;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) break;
#ifdef __linux__
        char name[16];
        snprintf(name, sizeof name, "ggmlite-%d", w->ith);
        pthread_setname_np(w->thread, name);
#endif
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (started < n_threads - 1) {
        pool_destroy(pool, started);
        return NULL;
    }
    return pool;
}

void gml_threadpool_free(gml_threadpool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mu); /* let a compute using it finish */
    pthread_mutex_unlock(&pool->mu);
    pool_destroy(pool, pool->n_threads - 1);
}

/* Runs the job on the caller (ith 0) and nth - 1 workers; the caller holds
 * pool->mu. */
static void pool_run(gml_threadpool *pool, int nth, gml_task_fn fn, void *arg) {
    pool->fn = fn;
    pool->arg = arg;
    pool->nth = nth;
    atomic_store_explicit(&pool->pending, (unsigned)(nth - 1), memory_order_relaxed);
    for (int i = 0; i < nth - 1; i++) { /* the seq_cst bump publishes the job */
        atomic_fetch_add(&pool->workers[i].seq, 1);
        notify(&pool->workers[i].seq, &pool->workers[i].sleepers);
    }
    in_compute = true;
    fn(arg, 0, nth);
    in_compute = false;
    unsigned left;
    while ((left = atomic_load(&pool->pending)) != 0)
        await_change(&pool->pending, left, &pool->pending_sleepers, spin_rounds(nth, SPIN_BARRIER));
}

/* ---- the process-wide pool --------------------------------------------------- */

static pthread_mutex_t default_mu = PTHREAD_MUTEX_INITIALIZER; /* guards default_pool */
static gml_threadpool *default_pool;
static bool default_hooks;

static void shutdown_at_exit(void) {
    /* Never hang an exiting process: leave a pool that is in use alone. */
    if (pthread_mutex_trylock(&default_mu) != 0) return;
    gml_threadpool *pool = default_pool;
    if (pool && pthread_mutex_trylock(&pool->mu) == 0) {
        pthread_mutex_unlock(&pool->mu);
        pool_destroy(pool, pool->n_threads - 1);
        default_pool = NULL;
    }
    pthread_mutex_unlock(&default_mu);
}

/* fork(): the child has none of the workers. It forgets the pool (freeing its
 * memory: no thread uses it there) and makes a new one when it needs one. */
static void fork_prepare(void) { pthread_mutex_lock(&default_mu); }
static void fork_parent(void) { pthread_mutex_unlock(&default_mu); }
static void fork_child(void) {
    if (default_pool) {
        free(default_pool->workers);
        free(default_pool);
        default_pool = NULL;
    }
    pthread_mutex_unlock(&default_mu);
}

void gml_threadpool_shutdown(void) {
    pthread_mutex_lock(&default_mu);
    if (default_pool) gml_threadpool_free(default_pool);
    default_pool = NULL;
    pthread_mutex_unlock(&default_mu);
}

/* The default pool with at least nth threads, locked for the caller; NULL if
 * threads cannot be made. Computes from several threads take turns. */
static gml_threadpool *acquire_default(int nth) {
    pthread_mutex_lock(&default_mu);
    if (!default_hooks) {
        default_hooks = true;
        atexit(shutdown_at_exit);
        pthread_atfork(fork_prepare, fork_parent, fork_child);
    }
    if (default_pool && default_pool->n_threads < nth) {
        gml_threadpool_free(default_pool); /* grow: a bigger one replaces it */
        default_pool = NULL;
    }
    if (!default_pool) default_pool = gml_threadpool_new(nth);
    gml_threadpool *pool = default_pool;
    if (pool) pthread_mutex_lock(&pool->mu);
    pthread_mutex_unlock(&default_mu);
    return pool;
}

void gml_parallel_run(gml_threadpool *pool, int nth, gml_task_fn fn, void *arg) {
    if (nth <= 1 || in_compute || (pool && pool->n_threads < nth)) {
        run_alone(fn, arg);
        return;
    }
    if (pool) pthread_mutex_lock(&pool->mu);
    else pool = acquire_default(nth);
    if (!pool) {
        run_alone(fn, arg);
        return;
    }
    pool_run(pool, nth, fn, arg);
    pthread_mutex_unlock(&pool->mu);
}
#endif /* GGMLITE_OPENMP */

int gml_threadpool_n_threads(const gml_threadpool *pool) { return pool ? pool->n_threads : 0; }
