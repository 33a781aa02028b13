/* bench's limits: the FMA peak of the ISA and the read bandwidth, measured
 * by the machine itself before the table (each row is quoted as a share of
 * them). The ISA's loops are in bench_limits_avx2.c and
 * bench_limits_avx512.c, compiled for their ISA on x86 only and run only
 * when the CPU has it (gml_cpu_has); other CPUs get the plain read loop and
 * no FMA peak. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE; syscall */
#include "bench.h"
#include "rg_time.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* A limit is the fastest of many short runs: a neighbour's load on a
 * shared machine only ever slows a run down, and a run shorter than the
 * scheduler's time slice often runs alone even when the machine is busy
 * (a 50 ms FMA run measured a third of the peak with a load average of 6
 * on the 2 cores, 5 ms runs found it; with a load of 15, 5 ms runs fell
 * short by a third at 1 thread, so runs are 1 ms). The FMA peak: the threads start
 * together and each runs FMA_REPS runs of FMA_RUN_S seconds; the aggregate
 * is the sum of each thread's fastest run's rate (that all threads' fastest
 * runs coincide is rare on a busy machine; the cores do not share FMA
 * units). The bandwidth, a resource the cores share: READ_PASSES passes
 * over the buffer, the threads side by side, each step of READ_CHUNK bytes
 * per thread timed as a whole from the first start to the last end (the
 * buffer is 4x the last-level cache, so a chunk is never in it when read
 * again). */
enum { FMA_REPS = 200, READ_PASSES = 2 };
#define FMA_RUN_S 0.001
#define READ_CHUNK ((size_t)16 << 20)

static double now_s(void) { return rg_now_ms() * 1e-3; }

typedef enum { JOB_FMA_AVX2, JOB_FMA_AVX512, JOB_DP_BF16, JOB_READ_AVX2, JOB_READ_PLAIN,
               JOB_VNNI_AVX2, JOB_VNNI_AVX512, JOB_AMX_BF16, JOB_AMX_INT8 } job_kind;

typedef struct job {
    job_kind kind;
    int64_t iters;      /* FMA rounds of a run */
    int reps;           /* FMA runs */
    double best;        /* FMA: the fastest run's seconds */
    const float *p;     /* read: this thread's slice */
    size_t n;
    pthread_barrier_t *bar;
    double t0, t1;
    volatile float sink;
} job;

/* 8 scalar sums: the read loop of a CPU without AVX2. */
static float read_plain(const float *p, size_t n) {
    float s[8] = {0};
    for (size_t k = 0; k < n; k += 8)
        for (int i = 0; i < 8; i++) s[i] += p[k + (size_t)i];
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

static void *run_job(void *arg) {
    job *j = arg;
    pthread_barrier_wait(j->bar);
    j->t0 = now_s();
    j->best = 1e9;
    switch (j->kind) {
#if defined(__x86_64__) || defined(__i386__)
    case JOB_FMA_AVX2:
    case JOB_FMA_AVX512:
    case JOB_DP_BF16:
        for (int r = 0; r < j->reps; r++) {
            const double t = now_s();
            j->sink = j->kind == JOB_FMA_AVX2     ? bench_fma_avx2(j->iters)
                      : j->kind == JOB_FMA_AVX512 ? bench_fma_avx512(j->iters)
                                                  : bench_dpbf16_avx512(j->iters);
            if (now_s() - t < j->best) j->best = now_s() - t;
        }
        break;
    case JOB_READ_AVX2: j->sink = bench_read_avx2(j->p, j->n); break;
    case JOB_VNNI_AVX2:
    case JOB_VNNI_AVX512:
        for (int r = 0; r < j->reps; r++) {
            const double t = now_s();
            j->sink = (float)(j->kind == JOB_VNNI_AVX2 ? bench_vnni_avx2(j->iters)
                                                       : bench_vnni_avx512(j->iters));
            if (now_s() - t < j->best) j->best = now_s() - t;
        }
        break;
#else /* the x86 loops are not built here, and gml_cpu_has never asks for them */
    case JOB_FMA_AVX2:
    case JOB_FMA_AVX512:
    case JOB_DP_BF16:
    case JOB_READ_AVX2:
    case JOB_VNNI_AVX2:
    case JOB_VNNI_AVX512: break;
#endif
#ifdef GML_BENCH_AMX
    case JOB_AMX_BF16:
    case JOB_AMX_INT8:
        for (int r = 0; r < j->reps; r++) {
            const double t = now_s();
            j->sink = j->kind == JOB_AMX_BF16 ? bench_amx_bf16(j->iters) : (float)bench_amx_int8(j->iters);
            if (now_s() - t < j->best) j->best = now_s() - t;
        }
        break;
#else /* not built here: measure_amx_peaks never runs them */
    case JOB_AMX_BF16:
    case JOB_AMX_INT8: break;
#endif
    case JOB_READ_PLAIN: j->sink = read_plain(j->p, j->n); break;
    }
    j->t1 = now_s();
    return NULL;
}

/* nth threads (the caller one of them) start together, each running its
 * own job (FMA: reps runs of iters rounds, each thread's fastest in
 * best[i]; reads: the i-th slice of n floats at p, slices a multiple of 64
 * floats); the seconds from the first start to the last end. */
static double run_threads(job_kind kind, int nth, int64_t iters, int reps, double *best,
                          const float *p, size_t n) {
    pthread_t th[BENCH_MAX_THREADS];
    job jobs[BENCH_MAX_THREADS];
    pthread_barrier_t bar;
    const size_t slice = n / (size_t)nth / 64 * 64;
    pthread_barrier_init(&bar, NULL, (unsigned)nth);
    for (int i = 0; i < nth; i++) {
        jobs[i] = (job){.kind = kind, .iters = iters, .reps = reps,
                        .p = p ? p + (size_t)i * slice : NULL,
                        .n = slice, .bar = &bar};
        if (i > 0 && pthread_create(&th[i], NULL, run_job, &jobs[i]) != 0) {
            fprintf(stderr, "bench: limits: cannot start thread %d\n", i);
            exit(1);
        }
    }
    run_job(&jobs[0]);
    for (int i = 1; i < nth; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&bar);
    for (int i = 0; best && i < nth; i++) best[i] = jobs[i].best;
    double t0 = jobs[0].t0, t1 = jobs[0].t1;
    for (int i = 1; i < nth; i++) {
        if (jobs[i].t0 < t0) t0 = jobs[i].t0;
        if (jobs[i].t1 > t1) t1 = jobs[i].t1;
    }
    return t1 - t0;
}

/* The largest cache's size from sysfs (cpu0's cache/index*), 0 if unknown. */
static size_t llc_bytes(void) {
    size_t best = 0;
    for (int i = 0; i < 8; i++) {
        char path[96];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        unsigned long long v = 0;
        char unit = 0;
        if (fscanf(f, "%llu%c", &v, &unit) >= 1) {
            const size_t b = (size_t)v * (unit == 'K' ? 1024u : unit == 'M' ? 1024u * 1024u : 1u);
            if (b > best) best = b;
        }
        fclose(f);
    }
    return best;
}

/* The peak of loop kind at each thread count of l into gflops[]: runs of
 * FMA_RUN_S seconds (calibrated on 1 thread, the fastest of 5), the
 * threads side by side, FMA_REPS runs each, the sum of their fastest. */
static void peak_loop(const bench_limits *l, job_kind kind, double flop_per_iter, double *gflops) {
    int64_t iters = 1 << 16;
    double best[BENCH_MAX_THREADS];
    run_threads(kind, 1, 8 * iters, 1, NULL, NULL, 0); /* wakes the vector units up */
    run_threads(kind, 1, iters, 5, best, NULL, 0);
    iters = (int64_t)((double)iters * FMA_RUN_S / (best[0] > 1e-7 ? best[0] : 1e-7)) + 1;
    for (int k = 0; k < l->n; k++) {
        run_threads(kind, l->threads[k], iters, FMA_REPS, best, NULL, 0);
        gflops[k] = 0;
        for (int i = 0; i < l->threads[k]; i++) gflops[k] += flop_per_iter * (double)iters / best[i] * 1e-9;
    }
}

static void measure_int8_peak(bench_limits *l);
static void measure_amx_peaks(bench_limits *l);

void bench_measure_limits(bench_limits *l, gml_isa isa, const int *threads, int n) {
    *l = (bench_limits){.isa = isa, .threads = {1}, .n = 1};
    for (int i = 0; i < n; i++) { /* 1 and each count asked for, once */
        bool seen = false;
        for (int k = 0; k < l->n; k++) seen |= l->threads[k] == threads[i];
        if (!seen && l->n < BENCH_MAX_THREADS) l->threads[l->n++] = threads[i];
    }
    const bool avx512 = isa == GML_ISA_AVX512 && gml_cpu_has(GML_ISA_AVX512);
    const bool avx2 = isa == GML_ISA_AVX2 && gml_cpu_has(GML_ISA_AVX2);
    const job_kind fk = avx512 ? JOB_FMA_AVX512 : JOB_FMA_AVX2;
    const double flop_per_iter = avx512 ? 2.0 * 16 * BENCH_FMA_CHAINS_AVX512
                                        : 2.0 * 8 * BENCH_FMA_CHAINS_AVX2;
    l->fma_what = avx512 ? "AVX-512 vfmadd231ps zmm, 16 independent chains per thread"
                  : avx2 ? "AVX2 vfmadd231ps ymm, 12 independent chains per thread"
                         : "none (no FMA loop for this ISA)";
    if (avx2 || avx512) peak_loop(l, fk, flop_per_iter, l->fma_gflops);
    if (avx512 && gml_cpu_has_feature(GML_CPU_AVX512_BF16))
        peak_loop(l, JOB_DP_BF16, 64.0 * BENCH_DP_CHAINS_AVX512BF16, l->bf16_gflops);
    /* Reads: max(1 GiB, 4x the last-level cache), halved while it cannot be
     * had (down to 256 MiB). */
    l->llc_bytes = llc_bytes();
    size_t bytes = (size_t)1 << 30;
    if (4 * l->llc_bytes > bytes) bytes = 4 * l->llc_bytes;
    bytes = bytes / ((size_t)2 << 20) * ((size_t)2 << 20);
    float *buf = NULL;
    while (!buf && bytes >= ((size_t)256 << 20)) {
        buf = aligned_alloc((size_t)2 << 20, bytes);
        if (!buf) bytes /= 2;
    }
    /* on the pages ggmlite's arenas get (ggmlite/context.c: 2 MiB pages
     * unless GGMLITE_HUGEPAGES=0), so that the rows compare like with like */
    const char *off = getenv("GGMLITE_HUGEPAGES");
    l->read_huge = !(off && strcmp(off, "0") == 0);
#ifdef MADV_HUGEPAGE
    if (buf && l->read_huge) madvise(buf, bytes, MADV_HUGEPAGE);
#else
    l->read_huge = false;
#endif
    if (!buf) {
        fprintf(stderr, "bench: limits: cannot allocate the read buffer (256 MiB)\n");
        exit(1);
    }
    memset(buf, 0, bytes); /* every page present before timing */
    l->read_bytes = bytes;
    const job_kind rk = gml_cpu_has(GML_ISA_AVX2) ? JOB_READ_AVX2 : JOB_READ_PLAIN;
    const size_t nf = bytes / sizeof(float);
    for (int k = 0; k < l->n; k++) {
        const int nth = l->threads[k];
        /* a step: nth threads each read READ_CHUNK bytes, side by side */
        const size_t chunk = READ_CHUNK / sizeof(float) * (size_t)nth, n_chunks = nf / chunk;
        double best = 1e9;
        for (int pass = 0; pass < READ_PASSES; pass++)
            for (size_t c = 0; c < n_chunks; c++) {
                const double ti = run_threads(rk, nth, 0, 0, NULL, buf + c * chunk, chunk);
                if (ti < best) best = ti;
            }
        l->read_gbs[k] = (double)(chunk * sizeof(float)) / best * 1e-9;
    }
    free(buf);
    measure_int8_peak(l);
    measure_amx_peaks(l);
}

/* The int8 peak, measured as the FMA peak is (peak_loop): vpdpbusd on zmm
 * at AVX-512 with AVX512-VNNI, on ymm at AVX2 with AVX-VNNI (what the int8
 * kernels of that ISA run). */
static void measure_int8_peak(bench_limits *l) {
    const bool z = l->isa == GML_ISA_AVX512 && gml_cpu_has_feature(GML_CPU_AVX512_VNNI);
    const bool y = l->isa == GML_ISA_AVX2 && gml_cpu_has_feature(GML_CPU_AVX_VNNI);
    l->int8_what = z   ? "AVX512-VNNI vpdpbusd zmm, 16 independent chains per thread"
                   : y ? "AVX-VNNI vpdpbusd ymm, 12 independent chains per thread"
                       : "none (no VNNI at this ISA)";
    if (!z && !y) return;
    const double ops_per_iter = z ? 2.0 * 64 * BENCH_VNNI_CHAINS : 2.0 * 32 * BENCH_VNNI_CHAINS_AVX2;
    peak_loop(l, z ? JOB_VNNI_AVX512 : JOB_VNNI_AVX2, ops_per_iter, l->int8_gops);
}

/* Linux (5.16 on) lets a process run AMX's tile data only once it asks
 * (arch_prctl ARCH_REQ_XCOMP_PERM, for all its threads): 0 when granted,
 * else why not (an errno). ggmlite's AMX kernels ask the same themselves
 * (ggmlite/cpu.c, not in the public API); asking twice is harmless. */
static int amx_permission(void) {
#if defined(__linux__) && defined(__x86_64__)
    enum { ARCH_GET_XCOMP_PERM = 0x1022, ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    unsigned long features = 0;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &features) == 0 && (features & (1ul << XFEATURE_XTILEDATA)))
        return 0;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 ? 0 : errno;
#else
    return ENOSYS;
#endif
}

/* The AMX peaks, measured as the FMA peak is (peak_loop), at AVX-512 only
 * (the ISA at which ggmlite runs AMX: GGMLITE_AMX=1), where this build has
 * the loops, the CPU has AMX-BF16 / AMX-INT8 and Linux grants the
 * permission; otherwise "no AMX" and why. */
static void measure_amx_peaks(bench_limits *l) {
    const double ops_bf16 = 2.0 * 16 * 16 * 32 * BENCH_AMX_TILES_PER_ROUND;
    const double ops_int8 = 2.0 * 16 * 16 * 64 * BENCH_AMX_TILES_PER_ROUND;
    const bool has[2] = {gml_cpu_has_feature(GML_CPU_AMX_BF16), gml_cpu_has_feature(GML_CPU_AMX_INT8)};
    char *what[2] = {l->amx_bf16_what, l->amx_int8_what};
    static const char *const loop[2] = {"AMX-BF16 tdpbf16ps", "AMX-INT8 tdpbusd"};
    int err = 0;
    for (int i = 0; i < 2; i++) {
        const size_t n = sizeof l->amx_bf16_what;
#ifndef GML_BENCH_AMX
        snprintf(what[i], n, "no AMX (this build has no AMX loop: not x86-64, or a compiler without "
                             "-mamx-tile -mamx-bf16 -mamx-int8)");
        continue;
#endif
        if (!has[i]) {
            snprintf(what[i], n, "no AMX (this CPU, or its OS, has no %s)", i ? "AMX-INT8" : "AMX-BF16");
        } else if (l->isa != GML_ISA_AVX512) {
            snprintf(what[i], n, "not measured at %s (ggmlite runs AMX at avx512 only)", gml_isa_name(l->isa));
        } else if (err || (err = amx_permission()) != 0) {
            snprintf(what[i], n, "no AMX (Linux refused the tile data permission, arch_prctl "
                                 "ARCH_REQ_XCOMP_PERM: %s)", strerror(err));
        } else {
            snprintf(what[i], n, "%s, 4 accumulator tiles from 2 A and 2 B tiles per thread, "
                                 "%.0f %s each, timed as the FMA peak", loop[i], (i ? ops_int8 : ops_bf16) / 4,
                     i ? "ops" : "flops");
            peak_loop(l, i ? JOB_AMX_INT8 : JOB_AMX_BF16, i ? ops_int8 : ops_bf16,
                      i ? l->amx_int8_gops : l->amx_bf16_gflops);
        }
    }
}

double bench_amx_bf16_peak(const bench_limits *l, int nth) {
    for (int k = 0; k < l->n; k++)
        if (l->threads[k] == nth) return l->amx_bf16_gflops[k];
    return 0;
}

double bench_amx_int8_peak(const bench_limits *l, int nth) {
    for (int k = 0; k < l->n; k++)
        if (l->threads[k] == nth) return l->amx_int8_gops[k];
    return 0;
}

double bench_int8_peak(const bench_limits *l, int nth) {
    for (int k = 0; k < l->n; k++)
        if (l->threads[k] == nth) return l->int8_gops[k];
    return 0;
}

double bench_fma_peak(const bench_limits *l, int nth) {
    for (int k = 0; k < l->n; k++)
        if (l->threads[k] == nth) return l->fma_gflops[k];
    return 0;
}

double bench_bf16_peak(const bench_limits *l, int nth) {
    for (int k = 0; k < l->n; k++)
        if (l->threads[k] == nth) return l->bf16_gflops[k];
    return 0;
}

double bench_read_bw(const bench_limits *l, int nth) {
    for (int k = 0; k < l->n; k++)
        if (l->threads[k] == nth) return l->read_gbs[k];
    return 0;
}

const char *bench_pct(char *buf, size_t size, double rate, double limit) {
    if (limit > 0) snprintf(buf, size, "%.1f%%", 100.0 * rate / limit);
    else snprintf(buf, size, "-");
    return buf;
}

void bench_print_limits(const bench_limits *l) {
    const double mib = 1024.0 * 1024.0;
    printf("\nlimits at %s (the shares below are of these), each the fastest of many short runs:\n",
           gml_isa_name(l->isa));
    if (l->fma_gflops[0] > 0)
        printf("  FMA peak: %s;\n  the threads side by side, each %d runs of %.0f ms; "
               "GFLOP/s: the sum of each thread's fastest run's\n",
               l->fma_what, FMA_REPS, FMA_RUN_S * 1e3);
    else
        printf("  FMA peak: %s\n", l->fma_what);
    printf("  read bandwidth: %d passes over a %.0f MiB buffer (last-level cache %.0f MiB) on %s "
           "pages, each thread\n  summing its own %.0f MiB chunks side by side, each step timed; "
           "aggregate GB/s\n",
           READ_PASSES, (double)l->read_bytes / mib, (double)l->llc_bytes / mib,
           l->read_huge ? "2 MiB (advised)" : "4 KiB", (double)READ_CHUNK / mib);
    printf("  bf16 peak: %s\n", l->bf16_gflops[0] > 0
                                     ? "AVX512-BF16 vdpbf16ps zmm, 16 independent chains per thread, "
                                       "64 flops each, timed as the FMA peak"
                                     : "none (no avx512_bf16 at this ISA)");
    printf("  int8 peak: %s; timed as the FMA peak, GOP/s (a product and its add count 2)\n",
           l->int8_what);
    printf("  AMX-BF16 peak: %s\n  AMX-INT8 peak: %s\n", l->amx_bf16_what, l->amx_int8_what);
    printf("%7s %14s %14s %12s %12s %12s %12s\n", "threads", "FMA GFLOP/s", "bf16 GFLOP/s", "int8 GOP/s",
           "read GB/s", "AMX GFLOP/s", "AMX GOP/s");
    for (int k = 0; k < l->n; k++) {
        const double v[5] = {l->fma_gflops[k], l->bf16_gflops[k], l->int8_gops[k], l->amx_bf16_gflops[k],
                             l->amx_int8_gops[k]};
        char s[5][32];
        for (int i = 0; i < 5; i++) {
            if (v[i] > 0) snprintf(s[i], sizeof s[i], "%.1f", v[i]);
            else snprintf(s[i], sizeof s[i], "-");
        }
        printf("%7d %14s %14s %12s %12.1f %12s %12s\n", l->threads[k], s[0], s[1], s[2], l->read_gbs[k], s[3],
               s[4]);
    }
    fflush(stdout);
}
