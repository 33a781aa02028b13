/* ggmlite benchmark: one table of medians, each ggmlite row beside a
 * reference measured in the same run (OpenBLAS's cblas_sgemm when the build
 * found it) and as a share of the machine's own limits, measured first
 * (bench_limits.c: the FMA, VDPBF16PS, VPDPBUSD and, on an AMX CPU, the
 * AMX-BF16 and AMX-INT8 peaks at the ISA, the read bandwidth). A tool,
 * not a test: timings on a shared machine are noisy, so every number is
 * the median of --runs runs after warm-up.
 *
 *   bench [--runs N] [--max-cube N] [--threads 1,2]
 *         [--only matmul|bf16|attention|window|grad|decode|weights|decode_types|int8|train|train_mem]
 *         [--isa avx2|avx512|all]
 *
 * --isa: ggmlite's kernels at that ISA (gml_set_isa) and OpenBLAS's for
 * it (OPENBLAS_CORETYPE Haswell, SkylakeX); all: each ISA the CPU has, one
 * after the other; default GGMLITE_ISA's, else the best the CPU has. OpenBLAS reads the variable
 * when it loads, so with OpenBLAS each ISA runs in a child process, this
 * program executed again with the variable set and the internal flag
 * --isa-run ISA.
 *
 * Sections: matmul f32 (cubes, and M=20 rows against a 4096x4096 weight in
 * nn.Linear layout, the decoding shape); matmul in bf16 compute (cubes and
 * nn.Linear rows against a bf16 weight, beside f32, as shares of the
 * VDPBF16PS and AMX-BF16 peaks, beside PyTorch's bf16 matmul and nn.Linear
 * where /usr/bin/python3 has torch; C3's and C5's prefill with bf16 weights
 * and compute, beside f32); attention forward (C1..C5, each
 * through the unfused and the fused graph; the planned peak memory of both
 * at T=8192); fused attention's backward at C3's shapes, beside its forward
 * and PyTorch's SDPA backward (grad); decoding through the KV cache (C5's
 * dimensions, context 2048); a decoding step's weight products at C4's
 * dimensions with f32, bf16 and q8_0 weights; a whole attention block's decoding step at C4's dimensions
 * with those weights and an f16 KV cache (decode_types); int8 compute on
 * q8_0 weights: linear products (decoding's 1 to 4 rows at C5's D among
 * them) and C3's and C5's prefill (int8). With
 * --only train (not in the default table): one training step of a GPT-2-style
 * LM (train), beside PyTorch's (tools/bench_train_torch.py) when
 * /usr/bin/python3 has torch; the planned memory of one LLaMA layer's
 * training step at T=8192, fused and unfused (train_mem).
 *
 * The sections are a table (SECTIONS, what --only picks from), the
 * attention cases too (CASES: the README's C1..C5, whose dimensions the
 * decoding sections take), and one harness (measure) times every row. */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"
#include "rg_time.h"

#include <ggmlite/attention.h>
#include <ggmlite/ggmlite.h>
#include <ggmlite/kv_cache.h>
#include <ggmlite/train.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef GML_BENCH_OPENBLAS
#include <cblas.h>
void openblas_set_num_threads(int num_threads);
char *openblas_get_corename(void);
#endif

#define MAX_RUNS 1000
#define MAX_THREADS 8

/* Seconds on run-graph's clock (rg_time.h). */
static double now_s(void) { return rg_now_ms() * 1e-3; }

/* Deterministic values in [-1, 1). */
static void fill(float *x, int64_t n, uint32_t seed) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / (float)(1u << 23) - 1.0f;
    }
}

/* Seconds of one compute of g. */
static double time_graph(gml_graph *g, int nth) {
    const double t0 = now_s();
    if (gml_graph_compute(g, nth) != GML_OK) {
        fprintf(stderr, "bench: %s\n", gml_graph_error(g));
        exit(1);
    }
    return now_s() - t0;
}

/* ggmlite and the reference take turns, TURNS blocks of runs each, so that
 * a neighbour's load on the shared machine falls on both sides alike. A
 * pause before each block lets the other side's threads go idle: OpenBLAS's
 * workers spin on a core for ~100 ms after each call (measured here), which
 * halves whatever two-thread run comes next. Each block first warms up for
 * WARM_S seconds of runs: after a pause, threads (and cores) take a few
 * runs to be back at speed, a third of a 0.1 ms product. */
enum { TURNS = 3 };
#define WARM_S 0.1

/* Rows whose runs are long take fewer: --runs, or as many as fit in ROW_S
 * seconds, at least 3 (so `bench --isa all` stays within minutes: a 4096^3
 * product takes a second a run). A run longer than LONG_S is its own
 * warm-up. */
#define ROW_S 2.0
#define LONG_S 0.5

/* How many runs a row whose first run took sec gets. */
static int row_runs(int runs, double sec) {
    const int fit = sec > 0 ? (int)(ROW_S / sec) : runs;
    return fit >= runs ? runs : fit >= 3 ? fit : runs < 3 ? runs : 3;
}

static void pause_s(double sec) {
    struct timespec ts = {.tv_sec = (time_t)sec,
                          .tv_nsec = (long)((sec - (double)(time_t)sec) * 1e9)};
    nanosleep(&ts, NULL);
}

typedef struct opts {
    int runs;
    int64_t max_cube;
    int threads[MAX_THREADS], n_threads;
    const bench_limits *lim; /* the machine's limits at the ISA running */
} opts;

/* Shares of the limits at nth threads ("-" where unknown): of the FMA peak
 * for a rate in GFLOP/s, of the read bandwidth for one in GB/s. */
static const char *pct_fma(char *buf, const opts *o, double gflops, int nth) {
    return bench_pct(buf, 16, gflops, bench_fma_peak(o->lim, nth));
}
static const char *pct_bw(char *buf, const opts *o, double gbs, int nth) {
    return bench_pct(buf, 16, gbs, bench_read_bw(o->lim, nth));
}

/* "1.93x": the rate at threads[j] over the rate at 1 thread, when both ran;
 * rate[] is indexed like o->threads. "-" otherwise. */
static const char *speedup(char *buf, const opts *o, const double *rate, int j) {
    snprintf(buf, 16, "-");
    if (o->threads[j] != 1)
        for (int i = 0; i < o->n_threads; i++)
            if (o->threads[i] == 1 && rate[i] > 0) snprintf(buf, 16, "%.2fx", rate[j] / rate[i]);
    return buf;
}

/* ---- the harness: how every row is timed ---------------------------------- */

/* What a row times: run does it once at nth threads and returns its seconds
 * (of the row's unit: a product, a graph, a token). */
typedef struct timed {
    double (*run)(void *user, int nth);
    void *user;
} timed;

typedef enum policy {
    /* A pause, a first run setting the runs (row_runs), warm-up runs until
     * WARM_S (the first counted), the runs: one graph a row. */
    WARM_SECONDS,
    /* A first run of t[0] setting the runs (row_runs) and the warm-up (none
     * past LONG_S); then TURNS rounds, in each t[0..n) in turn: a pause,
     * warm-up runs for WARM_S, its share of the runs (ggmlite and the
     * reference). */
    TURNS_WITH_REFERENCE,
    /* A pause, one warm-up round, then `runs` rounds, each running every
     * t[0..n) once: rows taking turns run by run. */
    ROUNDS,
} policy;

enum { MAX_TIMED = 4 };

static double timed_run(const timed *t, int nth) { return t->run(t->user, nth); }

/* The median seconds of each of t[0..n) at nth threads into sec[], timed as
 * p says; runs: ROUNDS' rounds (the others take o->runs, fewer for long
 * runs). */
static void measure(const opts *o, policy p, const timed *t, int n, int nth, int runs, double *sec) {
    static double ts[MAX_TIMED][MAX_RUNS];
    if (p == ROUNDS) {
        pause_s(0.25);
        for (int r = -1; r < runs; r++) /* round -1 warms up */
            for (int k = 0; k < n; k++) {
                const double s = timed_run(&t[k], nth);
                if (r >= 0) ts[k][r] = s;
            }
    } else if (p == WARM_SECONDS) {
        pause_s(0.25);
        const double first = timed_run(&t[0], nth);
        runs = row_runs(o->runs, first);
        for (double warm = first; warm < WARM_S;) warm += timed_run(&t[0], nth);
        for (int r = 0; r < runs; r++) ts[0][r] = timed_run(&t[0], nth);
    } else {
        const double first = timed_run(&t[0], nth), warm_s = first > LONG_S ? 0 : WARM_S;
        runs = row_runs(o->runs, first);
        for (int round = 0, done = 0; round < TURNS; round++) {
            const int m = (runs - done) / (TURNS - round);
            for (int k = 0; k < n; k++) {
                pause_s(0.25);
                for (double warm = 0; warm < warm_s;) warm += timed_run(&t[k], nth);
                for (int r = 0; r < m; r++) ts[k][done + r] = timed_run(&t[k], nth);
            }
            done += m;
        }
    }
    for (int k = 0; k < n; k++) sec[k] = rg_median(ts[k], runs);
}

/* A graph's compute (timed). */
static double run_graph(void *g, int nth) { return time_graph(g, nth); }

/* ---- matmul ------------------------------------------------------------- */

typedef struct mm_case {
    const char *what;
    int64_t M, N, K;
    bool linear; /* B is an nn.Linear weight [N, K], used transposed */
} mm_case;

/* One product set up for ggmlite (a graph) and for the reference (plain
 * arrays with the same values). */
typedef struct mm_setup {
    gml_context *ctx;
    gml_graph *g;
    float *a, *b, *y; /* the reference's */
} mm_setup;

static mm_setup mm_setup_new(const mm_case *c) {
    mm_setup s = {0};
    const size_t na = (size_t)(c->M * c->K), nb = (size_t)(c->K * c->N), ny = (size_t)(c->M * c->N);
    s.ctx = gml_init((gml_init_params){.mem_size = (na + nb + ny) * sizeof(float) + (1 << 20)});
    gml_tensor *a = s.ctx ? gml_new_tensor_2d(s.ctx, GML_F32, c->M, c->K) : NULL;
    gml_tensor *b = !a ? NULL
                    : c->linear ? gml_new_tensor_2d(s.ctx, GML_F32, c->N, c->K)
                                : gml_new_tensor_2d(s.ctx, GML_F32, c->K, c->N);
    gml_tensor *y = !b ? NULL : c->linear ? gml_linear(s.ctx, a, b, NULL) : gml_matmul(s.ctx, a, b);
    s.g = y ? gml_build_graph(s.ctx, &y, 1) : NULL;
    if (!s.g) {
        fprintf(stderr, "bench: %s: %s\n", c->what,
                s.ctx ? gml_last_error(s.ctx) : "out of memory");
        exit(1);
    }
    fill(a->data, (int64_t)na, 1);
    fill(b->data, (int64_t)nb, 2);
#ifdef GML_BENCH_OPENBLAS
    s.a = malloc(na * sizeof(float));
    s.b = malloc(nb * sizeof(float));
    s.y = malloc(ny * sizeof(float));
    if (!s.a || !s.b || !s.y) {
        fprintf(stderr, "bench: out of memory\n");
        exit(1);
    }
    memcpy(s.a, a->data, na * sizeof(float));
    memcpy(s.b, b->data, nb * sizeof(float));
#endif
    return s;
}

static void mm_setup_free(mm_setup *s) {
    gml_graph_free(s->g);
    gml_free(s->ctx);
    free(s->a);
    free(s->b);
    free(s->y);
}

#ifdef GML_BENCH_OPENBLAS
typedef struct blas_run {
    const mm_setup *s;
    const mm_case *c;
} blas_run;

static double time_blas(void *user, int nth) {
    (void)nth; /* openblas_set_num_threads */
    const mm_setup *s = ((blas_run *)user)->s;
    const mm_case *c = ((blas_run *)user)->c;
    const double t0 = now_s();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, c->linear ? CblasTrans : CblasNoTrans, (int)c->M,
                (int)c->N, (int)c->K, 1.0f, s->a, (int)c->K, s->b,
                c->linear ? (int)c->K : (int)c->N, 0.0f, s->y, (int)c->N);
    return now_s() - t0;
}
#endif

static void bench_matmul(const opts *o) {
    static const mm_case cases[] = {
        {"256^3", 256, 256, 256, false},
        {"1024^3", 1024, 1024, 1024, false},
        {"2048^3", 2048, 2048, 2048, false},
        {"4096^3", 4096, 4096, 4096, false},
        {"M=20 N=K=4096 linear", 20, 4096, 4096, true},
    };
    printf("\nmatmul f32 (GFLOP/s; linear: x [M,K] @ w^T, w [N,K] nn.Linear layout;\n"
           "ggmlite and the reference take %d turns each, runs split among them;\n"
           "%%FMA: of the FMA peak at the threads; %%BW: A, B and C's bytes once, of the read "
           "bandwidth;\nvs 1: ggmlite's speed-up over 1 thread)\n", TURNS);
    printf("%-22s %7s %9s %6s %6s %9s %6s %6s %6s %6s\n", "shape", "threads", "ggmlite", "%FMA",
           "%BW", "OpenBLAS", "%FMA", "%BW", "ratio", "vs 1");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const mm_case *c = &cases[i];
        if (!c->linear && c->M > o->max_cube) continue;
        const double flop = 2.0 * (double)c->M * (double)c->N * (double)c->K;
        const double bytes = 4.0 * (double)(c->M * c->K + c->K * c->N + c->M * c->N);
        double rate_g[MAX_THREADS], rate_b[MAX_THREADS];
        mm_setup s = mm_setup_new(c);
#ifdef GML_BENCH_OPENBLAS
        blas_run br = {&s, c};
        const timed t[2] = {{run_graph, s.g}, {time_blas, &br}};
        const int n_timed = 2;
#else
        const timed t[1] = {{run_graph, s.g}};
        const int n_timed = 1;
#endif
        for (int j = 0; j < o->n_threads; j++) {
            const int nth = o->threads[j];
            double sec[2] = {0, 0};
#ifdef GML_BENCH_OPENBLAS
            openblas_set_num_threads(nth);
#endif
            measure(o, TURNS_WITH_REFERENCE, t, n_timed, nth, 0, sec);
            rate_g[j] = 1.0 / sec[0];
            rate_b[j] = sec[1] > 0 ? 1.0 / sec[1] : 0;
        }
        for (int j = 0; j < o->n_threads; j++) { /* printed once all ran: vs 1 known */
            const int nth = o->threads[j];
            const double g = flop * rate_g[j] * 1e-9, b = flop * rate_b[j] * 1e-9;
            char p[6][16], bs[16] = "-", rs[16] = "-";
            if (b > 0) {
                snprintf(bs, sizeof bs, "%.1f", b);
                snprintf(rs, sizeof rs, "%.2f", g / b);
            }
            printf("%-22s %7d %9.1f %6s %6s %9s %6s %6s %6s %6s\n", c->what, nth, g,
                   pct_fma(p[0], o, g, nth), pct_bw(p[1], o, bytes * rate_g[j] * 1e-9, nth), bs,
                   b > 0 ? pct_fma(p[2], o, b, nth) : "-",
                   b > 0 ? pct_bw(p[3], o, bytes * rate_b[j] * 1e-9, nth) : "-", rs,
                   speedup(p[4], o, rate_g, j));
        }
        fflush(stdout);
        mm_setup_free(&s);
    }
}

/* ---- matmul in bf16 ---------------------------------------------------------
 * The same products with compute bf16 (gml_set_compute) on a b stored in
 * bf16 (a bf16 checkpoint's weight), against ggmlite's f32 product of the
 * shape on an f32 b, the two taking turns run by run; the bf16 rate as a
 * share of the bf16 peak (VDPBF16PS, where the ISA has it), of the
 * AMX-BF16 peak (TDPBF16PS, where the CPU has AMX: the share that counts
 * when the kernel line names the AMX kernel, GGMLITE_AMX=1) and as a ratio
 * to the f32 rate; and PyTorch's bf16 torch.matmul and nn.Linear of the
 * shape where /usr/bin/python3 has torch (tools/bench_torch_bf16.py, run
 * once per thread count before ggmlite's rows, in its own process; the
 * columns say "-" without it). The weight is packed once, by the first
 * compute (compute.h, gml_graph_weights_changed), as PyTorch's oneDNN
 * reorders it once per call of a linear: the rows time what a model's
 * repeated steps cost. */

#define GML_BENCH_TORCH_BF16 GML_BENCH_SOURCE_DIR "/tools/bench_torch_bf16.py"
#define TORCH_PYTHON "/usr/bin/python3"

/* PyTorch's GFLOP/s of each case at nth threads into gflops[] (0 where it
 * gave none); false, with why, when it cannot run (no python3 or torch). */
static bool torch_bf16_rates(const mm_case *cases, int n, const bool *run, int nth, int runs,
                             double *gflops, char *why, size_t why_size) {
    for (int i = 0; i < n; i++) gflops[i] = 0;
    if (access(TORCH_PYTHON, X_OK) != 0) {
        snprintf(why, why_size, "no %s", TORCH_PYTHON);
        return false;
    }
    char cmd[2048];
    int k = snprintf(cmd, sizeof cmd, "%s '%s' %d %d", TORCH_PYTHON, GML_BENCH_TORCH_BF16, nth, runs);
    for (int i = 0; i < n && k < (int)sizeof cmd; i++)
        if (run[i])
            k += snprintf(cmd + k, sizeof cmd - (size_t)k, " %lld,%lld,%lld,%s", (long long)cases[i].M,
                          (long long)cases[i].N, (long long)cases[i].K, cases[i].linear ? "linear" : "matmul");
    if (k >= (int)sizeof cmd - 32) {
        snprintf(why, why_size, "command too long");
        return false;
    }
    snprintf(cmd + k, sizeof cmd - (size_t)k, " 2>/dev/null");
    fflush(stdout);
    FILE *f = popen(cmd, "r");
    if (!f) {
        snprintf(why, why_size, "cannot run %s", TORCH_PYTHON);
        return false;
    }
    char line[256];
    while (fgets(line, sizeof line, f)) {
        long long M, N, K;
        char kind[16];
        double r;
        if (sscanf(line, "%lld,%lld,%lld,%15s %lf", &M, &N, &K, kind, &r) != 5) continue;
        kind[strcspn(kind, " ")] = '\0';
        for (int i = 0; i < n; i++)
            if (run[i] && cases[i].M == M && cases[i].N == N && cases[i].K == K &&
                cases[i].linear == (strncmp(kind, "linear", 6) == 0))
                gflops[i] = r;
    }
    const int st = pclose(f);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        snprintf(why, why_size, WIFEXITED(st) && WEXITSTATUS(st) == 3 ? "torch not installed for %s"
                                                                      : "%s bench_torch_bf16.py failed",
                 TORCH_PYTHON);
        return false;
    }
    return true;
}
/* Whether the section's rows may run on AMX: GGMLITE_AMX=1 (read by the
 * library, ops/gemm_amx.c) and the AMX peak measured (a CPU with AMX, this
 * ISA, Linux's permission); each row's kernel line says what ran. */
static void print_amx_state(bool peak) {
    const char *env = getenv("GGMLITE_AMX");
    const bool on = env && strcmp(env, "1") == 0;
    printf("AMX: %s; %s\n", on ? "GGMLITE_AMX=1 (opted in)" : "GGMLITE_AMX unset (off: the default kernels)",
           !peak ? "no AMX peak (see the limits): the rows run without AMX"
           : on  ? "the rows whose kernel names amx run on the tiles"
                 : "%AMX: how far the default kernels are from the tiles' peak");
}

static gml_graph *mm_graph(gml_context **ctx, const mm_case *c, gml_compute compute) {
    const gml_type bt = compute == GML_COMPUTE_BF16 ? GML_BF16 : GML_F32;
    const size_t na = (size_t)(c->M * c->K), nb = (size_t)(c->K * c->N), ny = (size_t)(c->M * c->N);
    *ctx = gml_init((gml_init_params){.mem_size = (na + nb + ny) * sizeof(float) + (1 << 20)});
    gml_tensor *a = *ctx ? gml_new_tensor_2d(*ctx, GML_F32, c->M, c->K) : NULL;
    gml_tensor *b = !a ? NULL
                    : c->linear ? gml_new_tensor_2d(*ctx, bt, c->N, c->K)
                                : gml_new_tensor_2d(*ctx, bt, c->K, c->N);
    gml_tensor *y = !b ? NULL : c->linear ? gml_linear(*ctx, a, b, NULL) : gml_matmul(*ctx, a, b);
    if (y && gml_set_compute(*ctx, y, compute) != GML_OK) y = NULL;
    gml_graph *g = y ? gml_build_graph(*ctx, &y, 1) : NULL;
    if (!g) {
        fprintf(stderr, "bench: %s: %s\n", c->what, *ctx ? gml_last_error(*ctx) : "out of memory");
        exit(1);
    }
    fill(a->data, (int64_t)na, 1);
    if (bt == GML_F32) {
        fill(b->data, (int64_t)nb, 2);
    } else {
        float *tmp = malloc(nb * sizeof(float));
        if (!tmp) exit(1);
        fill(tmp, (int64_t)nb, 2);
        for (size_t i = 0; i < nb; i++) ((uint16_t *)b->data)[i] = gml_fp32_to_bf16(tmp[i]);
        free(tmp);
    }
    return g;
}

static void bench_matmul_bf16(const opts *o) {
    static const mm_case cases[] = {
        {"bf16 1024^3", 1024, 1024, 1024, false},
        {"bf16 2048^3", 2048, 2048, 2048, false},
        {"bf16 4096^3", 4096, 4096, 4096, false},
        {"bf16 M=20 N=K=4096 lin", 20, 4096, 4096, true},
        {"bf16 M=512 N=K=4096 lin", 512, 4096, 4096, true},
        /* decoding at C5's dimensions (D 1024): 1 to 4 rows */
        {"bf16 M=1 N=K=1024 lin", 1, 1024, 1024, true},
        {"bf16 M=4 N=K=1024 lin", 4, 1024, 1024, true},
    };
    enum { NC = sizeof cases / sizeof cases[0] };
    bool run[NC];
    for (int i = 0; i < NC; i++) run[i] = cases[i].linear || cases[i].M <= o->max_cube;
    double torch[MAX_THREADS][NC];
    char why[128] = "";
    bool have_torch = true;
    for (int j = 0; j < o->n_threads && have_torch; j++)
        have_torch = torch_bf16_rates(cases, NC, run, o->threads[j], o->runs, torch[j], why, sizeof why);
    if (!have_torch)
        for (int j = 0; j < o->n_threads; j++)
            for (int i = 0; i < NC; i++) torch[j][i] = 0;
    printf("\nmatmul bf16 (GFLOP/s; compute bf16 on a bf16 b, beside ggmlite's f32 product of the\n"
           "shape on an f32 b, the two taking turns run by run; %%bf16: of the bf16 (VDPBF16PS)\n"
           "peak, %%AMX: of the AMX-BF16 (TDPBF16PS) peak, %%FMA: of the f32 FMA peak, at the threads;\n"
           "ratio: bf16 over f32; torch: PyTorch's bf16 torch.matmul or nn.Linear, vs torch: ggmlite's\n"
           "bf16 over it; kernel: what ran the bf16 product)\n");
    print_amx_state(o->lim->amx_bf16_gflops[0] > 0);
    if (have_torch) printf("PyTorch: %s %s, its own process, before each thread count's rows\n", TORCH_PYTHON,
                           GML_BENCH_TORCH_BF16);
    else printf("PyTorch: none (%s)\n", why);
    printf("%-24s %7s %9s %6s %6s %6s %9s %6s %6s %9s %8s\n", "shape", "threads", "bf16", "%bf16", "%AMX", "%FMA",
           "f32", "%FMA", "ratio", "torch", "vs torch");
    for (size_t i = 0; i < NC; i++) {
        const mm_case *c = &cases[i];
        if (!run[i]) continue;
        const double flop = 2.0 * (double)c->M * (double)c->N * (double)c->K;
        gml_context *cb, *cf;
        gml_graph *gb = mm_graph(&cb, c, GML_COMPUTE_BF16), *gf = mm_graph(&cf, c, GML_COMPUTE_F32);
        const timed t[2] = {{run_graph, gb}, {run_graph, gf}};
        for (int j = 0; j < o->n_threads; j++) {
            const int nth = o->threads[j];
            double sec[2];
            measure(o, ROUNDS, t, 2, nth, o->runs, sec);
            const double rb = flop / sec[0] * 1e-9, rf = flop / sec[1] * 1e-9;
            char p[4][16];
            const double rt = torch[j][i];
            char ts[16] = "-", vs[16] = "-";
            if (rt > 0) {
                snprintf(ts, sizeof ts, "%.1f", rt);
                snprintf(vs, sizeof vs, "%.2fx", rb / rt);
            }
            printf("%-24s %7d %9.1f %6s %6s %6s %9.1f %6s %6.2f %9s %8s\n", c->what, nth, rb,
                   bench_pct(p[0], 16, rb, bench_bf16_peak(o->lim, nth)),
                   bench_pct(p[3], 16, rb, bench_amx_bf16_peak(o->lim, nth)), pct_fma(p[1], o, rb, nth), rf,
                   pct_fma(p[2], o, rf, nth), rb / rf, ts, vs);
        }
        printf("%-24s kernel: %s\n", "", gml_graph_node_kernel(gb, -1) ? gml_graph_node_kernel(gb, -1) : "?");
        fflush(stdout);
        gml_graph_free(gb);
        gml_graph_free(gf);
        gml_free(cb);
        gml_free(cf);
    }
}

/* ---- attention forward ---------------------------------------------------
 * f32 self-attention, no bias, no mask: the models/ blocks (gml_mha,
 * gml_gqa in its broadcast form) as one graph per case, built without data
 * and placed by the memory planner. GFLOP/s counts gml_graph_flops;
 * "planned MiB" is the planner's buffer (weights, input, output and the
 * intermediates, reusing dead ones' memory), "unplanned" the same tensors
 * each with memory of its own. */
typedef struct attn_case {
    const char *id; /* the README's name of the case: C1 .. C5 */
    int64_t B, T, D;
    int H, G; /* G == H: MHA */
} attn_case;

/* The cases: the attention rows, and the dimensions the decoding rows take
 * (C5's, C4's). */
static const attn_case CASES[] = {
    {"C1", 2, 10, 512, 8, 8},
    {"C2", 4, 256, 512, 8, 8},
    {"C3", 1, 2048, 512, 8, 8},
    {"C4", 2, 10, 4096, 32, 8},
    {"C5", 1, 1024, 1024, 16, 4},
};
#define N_CASES (int)(sizeof CASES / sizeof *CASES)

static const attn_case *case_of(const char *id) {
    for (int i = 0; i < N_CASES; i++)
        if (strcmp(CASES[i].id, id) == 0) return &CASES[i];
    fprintf(stderr, "bench: no case %s\n", id);
    exit(1);
}

/* "C1 MHA B=2 T=10", "C4 GQA B=2 T=10 G=8" (no id: without it). */
static const char *case_name(const attn_case *c, char *buf, size_t size) {
    snprintf(buf, size, "%s%s%s B=%lld T=%lld", c->id ? c->id : "", c->id ? " " : "",
             c->G == c->H ? "MHA" : "GQA", (long long)c->B, (long long)c->T);
    if (c->G != c->H) snprintf(buf + strlen(buf), size - strlen(buf), " G=%d", c->G);
    return buf;
}

/* The case's graph in ctx (no_alloc), fused (one gml_flash_attn) or
 * unfused (scores, softmax, context); NULL (message printed) on failure. */
static gml_graph *attn_graph(gml_context *ctx, const attn_case *c, gml_attn_impl impl) {
    const int64_t dk = c->D / c->H, dkv = (int64_t)c->G * dk;
    const gml_attn_weights w = {
        .w_q = gml_new_tensor_2d(ctx, GML_F32, c->D, c->D),
        .w_k = gml_new_tensor_2d(ctx, GML_F32, dkv, c->D),
        .w_v = gml_new_tensor_2d(ctx, GML_F32, dkv, c->D),
        .w_o = gml_new_tensor_2d(ctx, GML_F32, c->D, c->D),
    };
    const gml_attn_inputs in = {.query = gml_new_tensor_3d(ctx, GML_F32, c->B, c->T, c->D)};
    const gml_attn_config cfg = {.dims = {.n_heads = c->H, .n_kv_heads = c->G}, .graph.impl = impl};
    gml_attn_result r = c->G == c->H ? gml_mha(ctx, cfg, &w, in) : gml_gqa(ctx, cfg, &w, in);
    gml_graph *g = r.out ? gml_build_graph(ctx, &r.out, 1) : NULL;
    char name[64];
    if (!g) fprintf(stderr, "bench: %s: %s\n", case_name(c, name, sizeof name), gml_last_error(ctx));
    return g;
}

static void bench_window(const opts *o);

static void bench_attention(const opts *o) {
    printf("\nattention forward f32 (self-attention, no bias, no mask; D, H as in the case;\n"
           "graph: unfused = scores, softmax, context; fused = one flash_attn;\n"
           "%%FMA: of the FMA peak at the threads; t/peak: the time over the FLOPs' time at "
           "that peak;\nvs 1: speed-up over 1 thread)\n");
    printf("%-22s %5s %3s %-8s %7s %10s %10s %6s %7s %6s %12s %10s\n", "case", "D", "H", "graph",
           "threads", "ms", "GFLOP/s", "%FMA", "t/peak", "vs 1", "planned MiB", "unplanned");
    for (int i = 0; i < N_CASES; i++)
        for (int fused = 0; fused < 2; fused++) {
            const attn_case *c = &CASES[i];
            char name[64];
            case_name(c, name, sizeof name);
            gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true});
            gml_graph *g =
                ctx ? attn_graph(ctx, c, fused ? GML_ATTN_FUSED : GML_ATTN_UNFUSED) : NULL;
            if (!g) exit(1);
            if (gml_graph_plan(g, NULL) != GML_OK) {
                fprintf(stderr, "bench: %s: %s\n", name, gml_graph_error(g));
                exit(1);
            }
            for (int l = 0; l < gml_graph_n_leafs(g); l++) { /* weights and input */
                gml_tensor *t = gml_graph_leaf(g, l); /* planned: its data is the graph's */
                fill(gml_graph_data(g, t), gml_nelements(t), 11 + (uint32_t)l);
            }
            const double flop = gml_graph_flops(g), mib = 1024.0 * 1024.0;
            double rate[MAX_THREADS];
            for (int j = 0; j < o->n_threads; j++) {
                double sec;
                measure(o, WARM_SECONDS, &(timed){run_graph, g}, 1, o->threads[j], 0, &sec);
                rate[j] = 1.0 / sec;
            }
            for (int j = 0; j < o->n_threads; j++) { /* printed once all ran: vs 1 known */
                const double sec = 1.0 / rate[j], gf = flop / sec * 1e-9;
                const double peak = bench_fma_peak(o->lim, o->threads[j]);
                char p[2][16], tp[16] = "-";
                if (peak > 0) snprintf(tp, sizeof tp, "%.2fx", peak / gf);
                printf("%-22s %5lld %3d %-8s %7d %10.3f %10.1f %6s %7s %6s %12.1f %10.1f\n",
                       name, (long long)c->D, c->H, fused ? "fused" : "unfused",
                       o->threads[j], sec * 1e3, gf, pct_fma(p[0], o, gf, o->threads[j]), tp,
                       speedup(p[1], o, rate, j), (double)gml_graph_plan_peak(g) / mib,
                       (double)gml_graph_plan_naive(g) / mib);
            }
            fflush(stdout);
            gml_graph_free(g);
            gml_free(ctx);
        }

    /* A long sequence: the planner's peak for both graphs, planned only (the
     * unfused one would hold [B, H, T, T] scores: 2 GiB). */
    const attn_case lc = {NULL, 1, 8192, 512, 8, 8};
    char lname[64];
    case_name(&lc, lname, sizeof lname);
    size_t peak[2];
    for (int fused = 0; fused < 2; fused++) {
        gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true});
        gml_graph *g = ctx ? attn_graph(ctx, &lc, fused ? GML_ATTN_FUSED : GML_ATTN_UNFUSED)
                           : NULL;
        if (!g || gml_graph_plan(g, &(gml_plan_options){.measure_only = true}) != GML_OK) {
            fprintf(stderr, "bench: %s: %s\n", lname, g ? gml_graph_error(g) : "no graph");
            exit(1);
        }
        peak[fused] = gml_graph_plan_peak(g);
        gml_graph_free(g);
        gml_free(ctx);
    }
    printf("\nplanned peak memory, %s D=%lld H=%d: unfused %.1f MiB, fused %.1f MiB (1/%.1f)\n",
           lname, (long long)lc.D, lc.H, (double)peak[0] / (1 << 20),
           (double)peak[1] / (1 << 20), (double)peak[0] / (double)peak[1]);
    bench_window(o);
}

/* A sliding window against full causal attention: one flash_attn op (no
 * projections) with C5's heads (H=16, G=4, d=64), B=1, T=8192, the
 * window W=512 (bottom-right causal implied): the key blocks outside each
 * row block's windows are skipped, so the cost should be about W / (T / 2)
 * = 1/8 of the causal run's or less. */
static void bench_window(const opts *o) {
    const attn_case *c5 = case_of("C5");
    const int64_t T = 8192, H = c5->H, G = c5->G, d = c5->D / c5->H, W = 512;
    printf("\nsliding window, one flash_attn op: GQA B=1 H=%lld G=%lld d=%lld T=%lld "
           "(f32, fused)\n", (long long)H, (long long)G, (long long)d, (long long)T);
    printf("GFLOP/s: of the visible (query, key) pairs' 4 d FLOPs; %%FMA: of the FMA peak at the "
           "threads\n");
    printf("%-28s %7s %10s %10s %10s %6s\n", "case", "threads", "ms", "vs causal", "GFLOP/s",
           "%FMA");
    double causal_ms[MAX_THREADS] = {0};
    for (int win = 0; win < 2; win++) {
        gml_context *ctx = gml_init((gml_init_params){.mem_size = (size_t)1 << 20, .no_alloc = true});
        if (!ctx) exit(1);
        gml_tensor *q = gml_new_tensor(ctx, GML_F32, 4, (int64_t[]){1, H, T, d});
        gml_tensor *k = gml_new_tensor(ctx, GML_F32, 4, (int64_t[]){1, G, T, d});
        gml_tensor *v = gml_new_tensor(ctx, GML_F32, 4, (int64_t[]){1, G, T, d});
        const gml_attn_opts ao = {.causal = GML_CAUSAL_BOTTOM_RIGHT, .window = win ? W : 0};
        gml_tensor *out = gml_flash_attn_ext(ctx, q, k, v, 0.125f, &ao);
        gml_graph *g = out ? gml_build_graph(ctx, &out, 1) : NULL;
        if (!g || gml_graph_plan(g, NULL) != GML_OK) {
            fprintf(stderr, "bench: window: %s\n", g ? gml_graph_error(g) : gml_last_error(ctx));
            exit(1);
        }
        for (int l = 0; l < gml_graph_n_leafs(g); l++) {
            gml_tensor *t = gml_graph_leaf(g, l);
            fill(gml_graph_data(g, t), gml_nelements(t), 31 + (uint32_t)l);
        }
        /* FLOPs of the visible (query, key) pairs, 4 d each (q.k and p v):
         * query i sees min(i + 1, W) keys (gml_graph_flops counts all T^2) */
        double pairs = 0;
        for (int64_t i = 0; i < T; i++) pairs += (double)(win && i + 1 > W ? W : i + 1);
        const double flop = 4.0 * (double)d * (double)H * pairs;
        for (int j = 0; j < o->n_threads; j++) {
            double sec;
            measure(o, WARM_SECONDS, &(timed){run_graph, g}, 1, o->threads[j], 0, &sec);
            const double ms = sec * 1e3, gf = flop / ms * 1e-6;
            char pf[16];
            char what[64];
            snprintf(what, sizeof what, win ? "GQA T=%lld W=%lld (window)" : "GQA T=%lld causal",
                     (long long)T, (long long)W);
            if (!win) {
                causal_ms[j] = ms;
                printf("%-28s %7d %10.1f %10s %10.1f %6s\n", what, o->threads[j], ms, "1", gf,
                       pct_fma(pf, o, gf, o->threads[j]));
            } else {
                char ratio[32];
                snprintf(ratio, sizeof ratio, "1/%.1f", causal_ms[j] / ms);
                printf("%-28s %7d %10.1f %10s %10.1f %6s\n", what, o->threads[j], ms, ratio, gf,
                       pct_fma(pf, o, gf, o->threads[j]));
            }
            fflush(stdout);
        }
        gml_graph_free(g);
        gml_free(ctx);
    }
}

/* ---- attention backward ------------------------------------------------------
 * FlashAttention-2's backward (docs/attention.md, "Gradients: the backward
 * of fused attention") on one flash_attn op at C3's shapes, no projections:
 * q, k, v [B, H, T, d] = [1, 8, 2048, 64] (D 512), f32, without and with
 * the causal mask. gml_grad's gradient to q, k and v is a graph of
 * flash_attn_lse (the forward again, keeping each row's log-sum-exp) and
 * flash_attn_back. Columns: fwd, the flash_attn graph; back,
 * flash_attn_back alone (its node's time within the gradient graph's
 * compute, from the node callback); grad, the whole gradient graph.
 * FLOPs: the forward's two products, 4 d per visible (query, key) pair
 * (T^2 pairs; T (T + 1) / 2 causal); FA2's backward does five (S = Q K^T
 * again, dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q): 2.5x the
 * forward's; grad (lse + back) 3.5x. PyTorch: the forward and backward of
 * torch.nn.functional.scaled_dot_product_attention on the same shapes
 * (f32, autograd) where /usr/bin/python3 has torch
 * (tools/bench_torch_attn_back.py, run once per row in its own process);
 * "-" otherwise. */

#ifndef GML_BENCH_TORCH_ATTN_BACK
#define GML_BENCH_TORCH_ATTN_BACK "tools/bench_torch_attn_back.py"
#endif
#ifndef TORCH_PYTHON
#define TORCH_PYTHON "/usr/bin/python3"
#endif

/* PyTorch's median forward and backward ms of SDPA at [B, H, T, d] into
 * ms[0], ms[1], and what ran into impl ("sdpa", or "math": the attention
 * as its ops, in a torch without SDPA); false, with why, when it cannot
 * run (no python3 or torch). */
static bool torch_attn_back_ms(int64_t B, int64_t H, int64_t T, int64_t d, bool causal, int nth,
                               int runs, double ms[2], char impl[16], char *why, size_t why_size) {
    ms[0] = ms[1] = 0;
    snprintf(impl, 16, "-");
    if (access(TORCH_PYTHON, X_OK) != 0) {
        snprintf(why, why_size, "no %s", TORCH_PYTHON);
        return false;
    }
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s '%s' %lld %lld %lld %lld %d %d %d 2>/dev/null", TORCH_PYTHON,
             GML_BENCH_TORCH_ATTN_BACK, (long long)B, (long long)H, (long long)T, (long long)d,
             causal ? 1 : 0, nth, runs);
    fflush(stdout);
    FILE *f = popen(cmd, "r");
    if (!f) {
        snprintf(why, why_size, "cannot run %s", TORCH_PYTHON);
        return false;
    }
    char line[256];
    bool got = false;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "fwd_ms %lf back_ms %lf impl %15s", &ms[0], &ms[1], impl) == 3) got = true;
    const int st = pclose(f);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !got) {
        snprintf(why, why_size, WIFEXITED(st) && WEXITSTATUS(st) == 3 ? "torch not installed for %s"
                                                                      : "%s bench_torch_attn_back.py failed",
                 TORCH_PYTHON);
        ms[0] = ms[1] = 0;
        return false;
    }
    return true;
}

/* The gradient graph's compute, timed; the flash_attn_back node's share
 * (from the callback after each node: its time since the node before). */
typedef struct back_timer {
    gml_graph *g;
    double last, back; /* seconds */
} back_timer;

static bool back_node_done(const gml_tensor *node, int index, void *user) {
    back_timer *b = user;
    const double t = now_s();
    if (node->op == GML_OP_FLASH_ATTN_BACK) b->back += t - b->last;
    b->last = t;
    (void)index;
    return true;
}

static double run_back_node(void *user, int nth) {
    back_timer *b = user;
    b->back = 0;
    b->last = now_s();
    time_graph(b->g, nth);
    return b->back;
}

/* Plans g and fills its leafs by name (q, k, v, dy: seeds 1-4). */
static void grad_plan_fill(gml_graph *g, const char *what) {
    if (gml_graph_plan(g, NULL) != GML_OK) {
        fprintf(stderr, "bench: grad: %s: %s\n", what, gml_graph_error(g));
        exit(1);
    }
    static const char *names[] = {"q", "k", "v", "dy"};
    for (int l = 0; l < gml_graph_n_leafs(g); l++) {
        gml_tensor *t = gml_graph_leaf(g, l);
        uint32_t seed = 0;
        for (uint32_t i = 0; i < 4; i++)
            if (strcmp(t->name, names[i]) == 0) seed = i + 1;
        if (seed) fill(gml_graph_data(g, t), gml_nelements(t), seed);
    }
}

static void bench_grad(const opts *o) {
    const attn_case *c3 = case_of("C3");
    const int64_t B = c3->B, T = c3->T, H = c3->H, d = c3->D / c3->H;
    printf("\nattention backward f32, one flash_attn op at C3's shapes: q, k, v [B, H, T, d] = "
           "[%lld, %lld, %lld, %lld]\n(gradient to q, k, v; fwd: flash_attn; back: flash_attn_back "
           "alone; grad: gml_grad's graph,\nflash_attn_lse + flash_attn_back. FLOPs: fwd 4 d per "
           "visible (query, key) pair; back 2.5x fwd (FA2:\nfive products, S recomputed); grad 3.5x "
           "fwd. %%FMA: of the FMA peak at the threads;\ntorch: PyTorch's SDPA forward and backward, "
           "same shapes, f32; vs torch: PyTorch's backward time over ggmlite's)\n",
           (long long)B, (long long)H, (long long)T, (long long)d);
    printf("%-7s %7s %9s %6s %9s %6s %8s %9s %8s %9s %10s %8s %9s\n", "mask", "threads", "fwd ms",
           "%FMA", "back ms", "%FMA", "back/fwd", "grad ms", "grad/fwd", "torch fwd", "torch back",
           "back/fwd", "vs torch");
    const float scale = 1.0f / sqrtf((float)d);
    for (int causal = 0; causal < 2; causal++) {
        gml_context *ctx = gml_init((gml_init_params){.mem_size = (size_t)1 << 20, .no_alloc = true});
        if (!ctx) exit(1);
        const int64_t sh[4] = {B, H, T, d};
        gml_tensor *q = gml_set_name(gml_new_tensor(ctx, GML_F32, 4, sh), "q");
        gml_tensor *k = gml_set_name(gml_new_tensor(ctx, GML_F32, 4, sh), "k");
        gml_tensor *v = gml_set_name(gml_new_tensor(ctx, GML_F32, 4, sh), "v");
        gml_tensor *dy = gml_set_name(gml_new_tensor(ctx, GML_F32, 4, sh), "dy");
        const gml_attn_opts ao = {.causal = causal ? GML_CAUSAL_BOTTOM_RIGHT : GML_CAUSAL_NONE};
        gml_tensor *out = gml_flash_attn_ext(ctx, q, k, v, scale, &ao);
        gml_tensor *grads[3];
        if (!out || gml_grad(ctx, out, dy, (gml_tensor *[]){q, k, v}, 3, grads) != GML_OK) {
            fprintf(stderr, "bench: grad: %s\n", gml_last_error(ctx));
            exit(1);
        }
        gml_graph *gf = gml_build_graph(ctx, &out, 1), *gg = gml_build_graph(ctx, grads, 3);
        if (!gf || !gg) {
            fprintf(stderr, "bench: grad: %s\n", gml_last_error(ctx));
            exit(1);
        }
        grad_plan_fill(gf, "forward");
        grad_plan_fill(gg, "gradient");
        back_timer bt = {.g = gg};
        gml_graph_set_callback(gg, back_node_done, &bt);
        double pairs = 0;
        for (int64_t i = 0; i < T; i++) pairs += (double)(causal ? i + 1 : T);
        const double fwd_flop = 4.0 * (double)d * (double)(B * H) * pairs;
        for (int j = 0; j < o->n_threads; j++) {
            const int nth = o->threads[j];
            double sec[3];
            measure(o, WARM_SECONDS, &(timed){run_graph, gf}, 1, nth, 0, &sec[0]);
            measure(o, WARM_SECONDS, &(timed){run_back_node, &bt}, 1, nth, 0, &sec[1]);
            gml_graph_set_callback(gg, NULL, NULL); /* the whole graph without callbacks */
            measure(o, WARM_SECONDS, &(timed){run_graph, gg}, 1, nth, 0, &sec[2]);
            gml_graph_set_callback(gg, back_node_done, &bt);
            double tms[2];
            char why[128] = "", impl[16];
            const bool torch =
                torch_attn_back_ms(B, H, T, d, causal, nth, o->runs, tms, impl, why, sizeof why);
            char p[2][16], t[4][16];
            snprintf(t[0], 16, "-");
            snprintf(t[1], 16, "-");
            snprintf(t[2], 16, "-");
            snprintf(t[3], 16, "-");
            if (torch) {
                snprintf(t[0], 16, "%.1f", tms[0]);
                snprintf(t[1], 16, "%.1f", tms[1]);
                snprintf(t[2], 16, "%.2fx", tms[1] / tms[0]);
                snprintf(t[3], 16, "%.2fx", tms[1] / (sec[1] * 1e3)); /* a speed-up */
            }
            printf("%-7s %7d %9.1f %6s %9.1f %6s %7.2fx %9.1f %7.2fx %9s %10s %8s %9s\n",
                   causal ? "causal" : "none", nth, sec[0] * 1e3,
                   pct_fma(p[0], o, fwd_flop / sec[0] * 1e-9, nth), sec[1] * 1e3,
                   pct_fma(p[1], o, 2.5 * fwd_flop / sec[1] * 1e-9, nth), sec[1] / sec[0],
                   sec[2] * 1e3, sec[2] / sec[0], t[0], t[1], t[2], t[3]);
            if (j == 0 && causal == 0)
                printf("(torch: %s)\n", !torch ? why
                                        : strcmp(impl, "sdpa") == 0
                                            ? "scaled_dot_product_attention"
                                            : "no scaled_dot_product_attention in this torch: its "
                                              "ops, softmax(q k^T / sqrt(d) + mask) v, under autograd");
            fflush(stdout);
        }
        gml_graph_free(gf);
        gml_graph_free(gg);
        gml_free(ctx);
    }
}

/* ---- decoding --------------------------------------------------------------
 * C5's dimensions (D=1024, H=16, G=4), B=1, through the KV cache of
 * models/include/ggmlite/kv_cache.h: a prompt of CONTEXT tokens (one step, not timed) fills
 * the cache, then each run decodes DECODE_TOKENS tokens one at a time with
 * the step graph built once, the cache rewound to the prompt before it.
 * Tokens per second from the median run. */
#define CONTEXT 2048
#define DECODE_TOKENS 32

/* An attention block's weights w_q, w_k, w_v [D, D], [kv, D], [kv, D] and w_o
 * [D, D] in wctx, filled from seed (seed, seed + 1, ...) and scaled. */
static gml_attn_weights decode_weights(gml_context *wctx, int64_t D, int64_t kv, uint32_t seed,
                                       float scale) {
    const gml_attn_weights w = {
        .w_q = gml_new_tensor_2d(wctx, GML_F32, D, D),
        .w_k = gml_new_tensor_2d(wctx, GML_F32, kv, D),
        .w_v = gml_new_tensor_2d(wctx, GML_F32, kv, D),
        .w_o = gml_new_tensor_2d(wctx, GML_F32, D, D),
    };
    gml_tensor *const ws[] = {w.w_q, w.w_k, w.w_v, w.w_o};
    for (int i = 0; i < 4; i++) {
        float *d = ws[i]->data;
        fill(d, gml_nelements(ws[i]), seed + (uint32_t)i);
        for (int64_t k = 0; scale != 1.0f && k < gml_nelements(ws[i]); k++) d[k] *= scale;
    }
    return w;
}

/* A planned decode step of n tokens [B, n, D] through layers 0 .. n_layers - 1
 * of cache (w[l] layer l's weights, one's output the next one's input), in its
 * own no_alloc context *ctx; the input filled from seed. Exits with what and
 * the message on failure. */
static gml_graph *decode_graph(gml_context **ctx, const gml_attn_config *cfg, const gml_attn_weights *w,
                               int n_layers, gml_kv_cache *cache, int64_t B, int64_t n, int64_t D,
                               gml_kv_step *step, uint32_t seed, const char *what) {
    const size_t mem = (size_t)(64 + 64 * n_layers) << 10;
    *ctx = gml_init((gml_init_params){.mem_size = mem > (1 << 20) ? mem : 1 << 20, .no_alloc = true});
    gml_tensor *x = gml_new_tensor_3d(*ctx, GML_F32, B, n, D);
    gml_set_flags(x, GML_FLAG_INPUT);
    *step = gml_kv_step_new(*ctx, cache, n);
    gml_tensor *y = x;
    for (int l = 0; y && l < n_layers; l++) y = gml_attn_decode(*ctx, *cfg, &w[l], y, step, l);
    gml_graph *g = y ? gml_build_graph(*ctx, &y, 1) : NULL;
    if (!g || gml_graph_plan(g, NULL) != GML_OK) {
        fprintf(stderr, "bench: %s: %s\n", what, g ? gml_graph_error(g) : gml_last_error(*ctx));
        exit(1);
    }
    fill(gml_graph_data(g, x), gml_nelements(x), seed); /* planned */
    return g;
}

/* A run of decoding: the cache rewound to the context, then `tokens` steps
 * of one token; the seconds per token. Exits with what and the message on
 * failure. */
typedef struct tokens_run {
    gml_kv_cache *cache;
    gml_kv_step *step;
    gml_graph *g;
    int64_t context;
    int tokens;
    const char *what;
} tokens_run;

static double run_tokens(void *user, int nth) {
    const tokens_run *t = user;
    char err[512];
    gml_kv_cache_truncate(t->cache, t->context);
    const double t0 = now_s();
    for (int i = 0; i < t->tokens; i++)
        if (gml_kv_step_compute(t->step, t->g, nth, err, sizeof err) != GML_OK) {
            fprintf(stderr, "bench: %s: %s\n", t->what, err);
            exit(1);
        }
    return (now_s() - t0) / t->tokens;
}

static void bench_decode(const opts *o) {
    const attn_case *c = case_of("C5");
    const int64_t B = 1, D = c->D, dk = c->D / c->H;
    const int H = c->H, G = c->G;
    char err[512];
    gml_kv_cache *cache = gml_kv_cache_new(
        (gml_kv_cache_params){.n_layers = 1, .batch = B, .n_kv_heads = G,
                              .max_len = CONTEXT + DECODE_TOKENS, .d_k = dk},
        err, sizeof err);
    const size_t wbytes = (size_t)(2 * D * D + 2 * G * dk * D) * sizeof(float);
    gml_context *wctx = gml_init((gml_init_params){.mem_size = wbytes + (1 << 20)});
    if (!cache || !wctx) {
        fprintf(stderr, "bench: decode: %s\n", cache ? "out of memory" : err);
        exit(1);
    }
    const gml_attn_weights w = decode_weights(wctx, D, G * dk, 21, 1.0f);
    const gml_attn_config cfg = {.dims = {.n_heads = H, .n_kv_heads = G}, .score.causal = GML_CAUSAL_BOTTOM_RIGHT};
    gml_graph *g[2]; /* the prompt step, the one-token step; each planned */
    gml_kv_step step[2];
    gml_context *ctx[2];
    for (int k = 0; k < 2; k++)
        g[k] = decode_graph(&ctx[k], &cfg, &w, 1, cache, B, k ? 1 : CONTEXT, D, &step[k],
                            25 + (uint32_t)k, "decode");
    printf("\ndecoding f32, %s's dimensions (D=%lld H=%d G=%d), B=%lld, context %d (KV cache "
           "%.1f MiB):\n%d tokens one at a time per run, the step graph built once\n",
           c->id, (long long)D, H, G, (long long)B, CONTEXT, (double)gml_kv_cache_bytes(cache) / (1 << 20),
           DECODE_TOKENS);
    /* Bytes a token reads: the weights and the cache's K and V up to its
     * position (CONTEXT + i + 1 for the i-th token), averaged over the run. */
    const double per_pos = (double)gml_kv_cache_bytes(cache) / (CONTEXT + DECODE_TOKENS);
    const double tok_bytes = (double)wbytes + per_pos * (CONTEXT + (DECODE_TOKENS + 1) / 2.0);
    printf("MB/token: the weights and the K, V rows each token reads; %%BW: of the read "
           "bandwidth;\nvs 1: speed-up over 1 thread\n");
    printf("%-22s %7s %12s %12s %9s %7s %6s %6s\n", "case", "threads", "tokens/s", "ms/token",
           "MB/token", "GB/s", "%BW", "vs 1");
    double rate[MAX_THREADS];
    for (int j = 0; j < o->n_threads; j++) {
        const int nth = o->threads[j];
        gml_kv_cache_truncate(cache, 0);
        if (gml_kv_step_compute(&step[0], g[0], nth, err, sizeof err) != GML_OK) {
            fprintf(stderr, "bench: decode: the prompt: %s\n", err);
            exit(1);
        }
        tokens_run tr = {cache, &step[1], g[1], CONTEXT, DECODE_TOKENS, "decode"};
        double sec;
        measure(o, ROUNDS, &(timed){run_tokens, &tr}, 1, nth, o->runs, &sec);
        rate[j] = 1.0 / sec;
    }
    char what[32];
    snprintf(what, sizeof what, "decode %s ctx %d", c->id, CONTEXT);
    for (int j = 0; j < o->n_threads; j++) {
        const double gbs = tok_bytes * rate[j] * 1e-9;
        char p[2][16];
        printf("%-22s %7d %12.0f %12.3f %9.2f %7.1f %6s %6s\n", what,
               o->threads[j], rate[j], 1e3 / rate[j], tok_bytes * 1e-6, gbs,
               pct_bw(p[0], o, gbs, o->threads[j]), speedup(p[1], o, rate, j));
    }
    fflush(stdout);
    for (int k = 0; k < 2; k++) {
        gml_graph_free(g[k]);
        gml_free(ctx[k]);
    }
    gml_free(wctx);
    gml_kv_cache_free(cache);
}

/* ---- decoding a stack of layers ----------------------------------------------
 * The row above reads 14.7 MB a token, which a large last-level cache holds
 * (260 MiB on the 2-core Xeon, as its sysfs says): its %BW then measures
 * the cache as much as memory. A model reads every layer each token, so
 * here L such attention layers (each its own weights and cache; one
 * layer's output the next one's input; no MLPs) make one step graph, L the
 * smallest count whose bytes a token reads pass twice the last-level cache
 * (32 when sysfs gives no size; at most 64): the step streams from memory,
 * as decoding a real model does, and %BW is of the DRAM bandwidth measured
 * above. Layer 0's cache holds a computed prompt of CONTEXT tokens; the
 * other layers' K and V rows are filled with random values (the step reads
 * them the same way). */
#define LAYERS_TOKENS 8
#define LAYERS_MAX 64

static void bench_decode_layers(const opts *o) {
    const attn_case *c = case_of("C5");
    const int64_t B = 1, D = c->D, dk = c->D / c->H;
    const int H = c->H, G = c->G;
    const int64_t T_max = CONTEXT + LAYERS_TOKENS;
    const size_t wbytes = (size_t)(2 * D * D + 2 * G * dk * D) * sizeof(float);
    const size_t cbytes = (size_t)(2 * B * G * T_max * dk) * sizeof(float); /* one layer's K and V */
    /* the bytes a token reads per layer: the weights and K, V up to its position */
    const double per_layer = (double)wbytes +
                             (double)cbytes / (double)T_max * (CONTEXT + (LAYERS_TOKENS + 1) / 2.0);
    const size_t llc = o->lim ? o->lim->llc_bytes : 0;
    int L = llc ? (int)(2.0 * (double)llc / per_layer) + 1 : 32;
    L = L < 1 ? 1 : L > LAYERS_MAX ? LAYERS_MAX : L;
    char err[512];
    gml_kv_cache *cache = gml_kv_cache_new(
        (gml_kv_cache_params){.n_layers = L, .batch = B, .n_kv_heads = G, .max_len = T_max, .d_k = dk},
        err, sizeof err);
    gml_context *wctx = gml_init((gml_init_params){.mem_size = (size_t)L * (wbytes + (1 << 16)) + (1 << 20)});
    if (!cache || !wctx) {
        fprintf(stderr, "bench: decode layers: %s\n", cache ? "out of memory" : err);
        exit(1);
    }
    gml_attn_weights w[LAYERS_MAX];
    for (int l = 0; l < L; l++) /* scaled by 1/sqrt(D): the stack's activations stay of order 1 */
        w[l] = decode_weights(wctx, D, G * dk, 31 + 7 * (uint32_t)l, 1.0f / 32);
    const gml_attn_config cfg = {.dims = {.n_heads = H, .n_kv_heads = G},
                                 .score.causal = GML_CAUSAL_BOTTOM_RIGHT};
    gml_graph *g[2]; /* the prompt (layer 0), the one-token step through every layer */
    gml_kv_step step[2];
    gml_context *ctx[2];
    for (int k = 0; k < 2; k++)
        g[k] = decode_graph(&ctx[k], &cfg, w, k ? L : 1, cache, B, k ? 1 : CONTEXT, D, &step[k],
                            35 + (uint32_t)k, "decode layers");
    if (gml_kv_step_compute(&step[0], g[0], o->threads[0], err, sizeof err) != GML_OK) {
        fprintf(stderr, "bench: decode layers: the prompt: %s\n", err);
        exit(1);
    }
    for (int l = 1; l < L; l++) {
        fill(gml_kv_cache_k(cache, l)->data, gml_nelements(gml_kv_cache_k(cache, l)), 41 + (uint32_t)l);
        fill(gml_kv_cache_v(cache, l)->data, gml_nelements(gml_kv_cache_v(cache, l)), 43 + (uint32_t)l);
    }
    const double tok_bytes = per_layer * L;
    printf("\ndecoding f32 through %d layers of %s's dimensions (context %d, B=1; %.0f MB a token, "
           "2x the %.0f MiB last-level cache or more):\n%d tokens one at a time per run, one step "
           "graph through every layer\n",
           L, c->id, CONTEXT, tok_bytes * 1e-6, (double)llc / (1 << 20), LAYERS_TOKENS);
    printf("%-22s %7s %12s %12s %9s %7s %6s %6s\n", "case", "threads", "tokens/s", "ms/token",
           "MB/token", "GB/s", "%BW", "vs 1");
    double rate[MAX_THREADS];
    for (int j = 0; j < o->n_threads; j++) {
        const int nth = o->threads[j];
        const int runs = o->runs < 5 ? o->runs : 5; /* a run reads 8 x L layers */
        tokens_run tr = {cache, &step[1], g[1], CONTEXT, LAYERS_TOKENS, "decode layers"};
        double sec;
        measure(o, ROUNDS, &(timed){run_tokens, &tr}, 1, nth, runs, &sec);
        rate[j] = 1.0 / sec;
    }
    char what[32];
    snprintf(what, sizeof what, "decode %s x%d layers", c->id, L);
    for (int j = 0; j < o->n_threads; j++) {
        const double gbs = tok_bytes * rate[j] * 1e-9;
        char p[2][16];
        printf("%-22s %7d %12.1f %12.3f %9.1f %7.1f %6s %6s\n", what, o->threads[j], rate[j],
               1e3 / rate[j], tok_bytes * 1e-6, gbs, pct_bw(p[0], o, gbs, o->threads[j]),
               speedup(p[1], o, rate, j));
    }
    fflush(stdout);
    for (int k = 0; k < 2; k++) {
        gml_graph_free(g[k]);
        gml_free(ctx[k]);
    }
    gml_free(wctx);
    gml_kv_cache_free(cache);
}

/* ---- decoding weights by type ------------------------------------------------
 * The weight products of one decoding step at C4's dimensions (D=4096,
 * H=32, G=8, d_k=128, B=1): q = x W_q^T, k = x W_k^T, v = x W_v^T (W_k, W_v
 * [1024, 4096]) and o = q W_o^T, the 96 MiB of f32 weights a step reads,
 * with f32, bf16 and q8_0 weights (converted from the same f32 values).
 * Attention over the cache is left out (decode_types has it). The
 * types take turns run by run (a neighbour's load falls on all alike);
 * tokens/s from the median step, and the bytes a step holds: the weights
 * plus the planned buffer. */
static void bench_weights(const opts *o) {
    const attn_case *c = case_of("C4");
    const int64_t D = c->D, KV = c->G * (c->D / c->H);
    const gml_type types[] = {GML_F32, GML_BF16, GML_Q8_0};
    enum { NT = 3 };
    gml_context *wctx[NT], *ctx[NT];
    gml_graph *g[NT];
    size_t wbytes[NT];
    float *row = malloc((size_t)D * sizeof *row);
    for (int t = 0; t < NT; t++) {
        wctx[t] = gml_init((gml_init_params){.mem_size = (size_t)(2 * D * D + 2 * KV * D) * 4 + (1 << 20)});
        ctx[t] = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true});
        const int64_t rows[4] = {D, KV, KV, D};
        gml_tensor *w[4];
        wbytes[t] = 0;
        for (int i = 0; i < 4; i++) {
            w[i] = gml_new_tensor_2d(wctx[t], types[t], rows[i], D);
            for (int64_t r = 0; r < rows[i]; r++) {
                fill(row, D, 31 + (uint32_t)(i * 7919 + r));
                char *dst = (char *)w[i]->data + r * (int64_t)w[i]->nb[2];
                if (types[t] == GML_F32) memcpy(dst, row, (size_t)D * 4);
                else if (types[t] == GML_Q8_0) gml_quantize_row_q8_0(row, (gml_block_q8_0 *)(void *)dst, D);
                else for (int64_t k = 0; k < D; k++) ((uint16_t *)(void *)dst)[k] = gml_fp32_to_bf16(row[k]);
            }
            wbytes[t] += gml_nbytes(w[i]);
        }
        gml_tensor *x = gml_new_tensor_3d(ctx[t], GML_F32, 1, 1, D);
        gml_set_flags(x, GML_FLAG_INPUT);
        gml_tensor *q = gml_linear(ctx[t], x, w[0], NULL);
        gml_tensor *outs[3] = {gml_linear(ctx[t], q, w[3], NULL), gml_linear(ctx[t], x, w[1], NULL),
                               gml_linear(ctx[t], x, w[2], NULL)};
        g[t] = gml_build_graph(ctx[t], outs, 3);
        if (!g[t] || gml_graph_plan(g[t], NULL) != GML_OK) {
            fprintf(stderr, "bench: weights: %s\n", g[t] ? gml_graph_error(g[t]) : gml_last_error(ctx[t]));
            exit(1);
        }
        fill(gml_graph_data(g[t], x), D, 77);
    }
    free(row);
    printf("\ndecoding weights by type, %s's dimensions (D=%lld H=%d G=%d d_k=%lld), B=1: the step's "
           "q, k, v, o products\n(attention over the cache not included), types taking turns; GB/s: "
           "the weights' bytes\n(read once a step), %%BW: of the read bandwidth\n",
           c->id, (long long)D, c->H, c->G, (long long)(D / c->H));
    printf("%-10s %7s %12s %10s %9s %14s %7s %6s\n", "weights", "threads", "tokens/s", "ms/token",
           "vs f32", "memory MiB", "GB/s", "%BW");
    for (int j = 0; j < o->n_threads; j++) {
        const int nth = o->threads[j];
        const timed t[NT] = {{run_graph, g[0]}, {run_graph, g[1]}, {run_graph, g[2]}};
        double secs[NT];
        measure(o, ROUNDS, t, NT, nth, o->runs, secs);
        double f32_sec = 0;
        for (int tt = 0; tt < NT; tt++) {
            const double sec = secs[tt];
            if (tt == 0) f32_sec = sec;
            char pb[16]; /* a step reads its weights once */
            printf("%-10s %7d %12.1f %10.3f %8.2fx %14.1f %7.1f %6s\n", gml_type_name(types[tt]), nth,
                   1.0 / sec, sec * 1e3, f32_sec / sec,
                   (double)(wbytes[tt] + gml_graph_plan_peak(g[tt])) / (1 << 20),
                   (double)wbytes[tt] / sec * 1e-9, pct_bw(pb, o, (double)wbytes[tt] / sec * 1e-9, nth));
        }
        fflush(stdout);
    }
    for (int tt = 0; tt < NT; tt++) {
        gml_graph_free(g[tt]);
        gml_free(ctx[tt]);
        gml_free(wctx[tt]);
    }
}

/* ---- decoding at C4's dimensions by weight and cache type -------------------
 * One attention block's decoding step (gml_attn_decode: the q, k, v
 * projections, the append to the KV cache, flash_attn over the cache, the
 * output projection) at C4's dimensions (D=4096, H=32, G=8, d_k=128, B=1)
 * after a context of CONTEXT tokens, with f32, bf16 and q8_0 weights
 * (converted from the same f32 values) and an f16 cache, and f32 weights
 * with an f32 cache for reference. Each cache is filled once by a prompt
 * step of CONTEXT tokens (f32 weights, not timed); each run rewinds it to
 * the context and decodes DECODE_TYPES_TOKENS tokens, the rows taking turns
 * run by run. Memory: the weights + the cache + the step's planned buffer. */
#define DECODE_TYPES_TOKENS 8

static gml_context *c4_weights(gml_type type, gml_attn_weights *w, size_t *bytes) {
    const attn_case *c = case_of("C4");
    const int64_t D = c->D, KV = c->G * (c->D / c->H), rows[4] = {D, KV, KV, D};
    gml_context *wctx = gml_init((gml_init_params){.mem_size = (size_t)(2 * D * D + 2 * KV * D) * 4 + (1 << 20)});
    float *row = malloc((size_t)D * sizeof *row);
    if (!wctx || !row) {
        fprintf(stderr, "bench: decode types: out of memory\n");
        exit(1);
    }
    gml_tensor **slot[4] = {&w->w_q, &w->w_k, &w->w_v, &w->w_o};
    *w = (gml_attn_weights){0};
    *bytes = 0;
    for (int i = 0; i < 4; i++) {
        gml_tensor *t = *slot[i] = gml_new_tensor_2d(wctx, type, rows[i], D);
        for (int64_t r = 0; r < rows[i]; r++) {
            fill(row, D, 31 + (uint32_t)(i * 7919 + r));
            for (int64_t k = 0; k < D; k++) row[k] *= 0.03f; /* ~ nn.Linear's scale: softmax not flat */
            char *dst = (char *)t->data + r * (int64_t)t->nb[2];
            if (type == GML_F32) memcpy(dst, row, (size_t)D * 4);
            else if (type == GML_Q8_0) gml_quantize_row_q8_0(row, (gml_block_q8_0 *)(void *)dst, D);
            else for (int64_t k = 0; k < D; k++) ((uint16_t *)(void *)dst)[k] = gml_fp32_to_bf16(row[k]);
        }
        *bytes += gml_nbytes(t);
    }
    free(row);
    return wctx;
}

/* A planned decode step of n tokens over cache with weights w. */
static gml_graph *c4_step(gml_context **ctx, gml_kv_cache *cache, const gml_attn_weights *w,
                          int64_t n, gml_kv_step *step) {
    const attn_case *c = case_of("C4");
    const gml_attn_config cfg = {.dims = {.n_heads = c->H, .n_kv_heads = c->G},
                                 .score.causal = GML_CAUSAL_BOTTOM_RIGHT};
    *ctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true});
    gml_tensor *x = gml_new_tensor_3d(*ctx, GML_F32, 1, n, c->D);
    gml_set_flags(x, GML_FLAG_INPUT);
    *step = gml_kv_step_new(*ctx, cache, n);
    gml_tensor *y = gml_attn_decode(*ctx, cfg, w, x, step, 0);
    gml_graph *g = y ? gml_build_graph(*ctx, &y, 1) : NULL;
    if (!g || gml_graph_plan(g, NULL) != GML_OK) {
        fprintf(stderr, "bench: decode types: %s\n", g ? gml_graph_error(g) : gml_last_error(*ctx));
        exit(1);
    }
    fill(gml_graph_data(g, x), gml_nelements(x), 91 + (uint32_t)n);
    return g;
}

static void bench_decode_types(const opts *o) {
    enum { NR = 4 };
    const gml_type wtype[NR] = {GML_F32, GML_F32, GML_BF16, GML_Q8_0};
    const gml_type ctype[NR] = {GML_F32, GML_F16, GML_F16, GML_F16};
    const attn_case *c4 = case_of("C4");
    char err[512];
    gml_kv_cache *cache[2]; /* f32, f16 */
    for (int c = 0; c < 2; c++) {
        cache[c] = gml_kv_cache_new((gml_kv_cache_params){.n_layers = 1, .batch = 1, .n_kv_heads = c4->G,
                                                          .max_len = CONTEXT + DECODE_TYPES_TOKENS,
                                                          .d_k = c4->D / c4->H, .type = c ? GML_F16 : GML_F32},
                                    err, sizeof err);
        if (!cache[c]) {
            fprintf(stderr, "bench: decode types: %s\n", err);
            exit(1);
        }
    }
    gml_context *wctx[3], *ctx[NR];
    gml_attn_weights w[3];
    size_t wbytes[3];
    const gml_type types[3] = {GML_F32, GML_BF16, GML_Q8_0};
    for (int t = 0; t < 3; t++) wctx[t] = c4_weights(types[t], &w[t], &wbytes[t]);
    /* the context: one prompt step per cache (f32 weights), not timed */
    for (int c = 0; c < 2; c++) {
        gml_context *pctx;
        gml_kv_step ps;
        gml_graph *pg = c4_step(&pctx, cache[c], &w[0], CONTEXT, &ps);
        if (gml_kv_step_compute(&ps, pg, o->threads[o->n_threads - 1], err, sizeof err) != GML_OK) {
            fprintf(stderr, "bench: decode types: the prompt: %s\n", err);
            exit(1);
        }
        gml_graph_free(pg);
        gml_free(pctx);
    }
    gml_graph *g[NR];
    gml_kv_step step[NR];
    size_t mem[NR];
    double rd[NR]; /* bytes a token reads: the weights, the cache's K and V up to its position */
    for (int r = 0; r < NR; r++) {
        const int wt = wtype[r] == GML_F32 ? 0 : wtype[r] == GML_BF16 ? 1 : 2, c = ctype[r] == GML_F16;
        g[r] = c4_step(&ctx[r], cache[c], &w[wt], 1, &step[r]);
        mem[r] = wbytes[wt] + gml_kv_cache_bytes(cache[c]) + gml_graph_plan_peak(g[r]);
        rd[r] = (double)wbytes[wt] + (double)gml_kv_cache_bytes(cache[c]) /
                (CONTEXT + DECODE_TYPES_TOKENS) * (CONTEXT + (DECODE_TYPES_TOKENS + 1) / 2.0);
    }
    printf("\ndecoding at %s's dimensions (D=%lld H=%d G=%d d_k=%lld), B=1, context %d: one attention "
           "block's step\n(projections, cache append, flash_attn over the cache), %d tokens per run, "
           "rows taking turns;\nmemory: weights + KV cache + the step's planned buffer; GB/s: the "
           "weights and the K, V rows\na token reads, %%BW: of the read bandwidth\n",
           c4->id, (long long)c4->D, c4->H, c4->G, (long long)(c4->D / c4->H), CONTEXT, DECODE_TYPES_TOKENS);
    printf("%-8s %-6s %7s %10s %10s %9s %9s %11s %7s %6s\n", "weights", "cache", "threads", "tokens/s",
           "ms/token", "vs f32/f16", "vs f32/f32", "memory MiB", "GB/s", "%BW");
    for (int j = 0; j < o->n_threads; j++) {
        const int nth = o->threads[j];
        tokens_run tr[NR];
        timed t[NR];
        for (int r = 0; r < NR; r++) {
            tr[r] = (tokens_run){step[r].cache, &step[r], g[r], CONTEXT, DECODE_TYPES_TOKENS, "decode types"};
            t[r] = (timed){run_tokens, &tr[r]};
        }
        double sec[NR];
        measure(o, ROUNDS, t, NR, nth, o->runs, sec);
        char pb[16];
        for (int r = 0; r < NR; r++)
            printf("%-8s %-6s %7d %10.1f %10.3f %9.2fx %9.2fx %11.1f %7.1f %6s\n", gml_type_name(wtype[r]),
                   gml_type_name(ctype[r]), nth, 1.0 / sec[r], sec[r] * 1e3, sec[1] / sec[r],
                   sec[0] / sec[r], (double)mem[r] / (1 << 20), rd[r] / sec[r] * 1e-9,
                   pct_bw(pb, o, rd[r] / sec[r] * 1e-9, nth));
        fflush(stdout);
    }
    for (int r = 0; r < NR; r++) {
        gml_graph_free(g[r]);
        gml_free(ctx[r]);
    }
    for (int t = 0; t < 3; t++) gml_free(wctx[t]);
    for (int c = 0; c < 2; c++) gml_kv_cache_free(cache[c]);
}

/* ---- int8 compute --------------------------------------------------------------
 * q8_0 weights against activations quantized per row (--compute int8,
 * ops/gemm_q8.h). An nn.Linear product x [M, K] @ w^T, w q8_0 [N, K], in
 * int8 and in f32 compute on the same weight, as GOP/s (a product and its
 * add count 2) and shares of the int8 peak (vpdpbusd, bench_limits.c), of
 * the AMX-INT8 peak (TDPBUSD, where the CPU has AMX: the share that counts
 * when the kernel line names an AMX kernel) and of the FMA peak, with the
 * kernel that ran; then C3's and C5's attention prefill (fused) with q8_0
 * weights in int8 compute, against the same case with f32 weights and with
 * q8_0 weights in f32 compute (the target: int8 at least 3x f32).
 * The q8_0 weight is packed once, by the first compute (compute.h,
 * gml_graph_weights_changed): the rows time a model's repeated steps.
 * Attention's own products (q k^T, p v) stay f32 in every row. */

/* w's rows (q8_0 [N, K]) from deterministic values. */
static void fill_q8_0(gml_block_q8_0 *w, int64_t N, int64_t K, uint32_t seed) {
    float *row = malloc(sizeof(float) * (size_t)K);
    if (!row) {
        fprintf(stderr, "bench: out of memory\n");
        exit(1);
    }
    for (int64_t n = 0; n < N; n++) {
        fill(row, K, seed + (uint32_t)n);
        gml_quantize_row_q8_0(row, w + n * (K / GML_QK8_0), K);
    }
    free(row);
}

/* linear(x [M, K], w q8_0 [N, K]) computed in c; exits on failure. */
static gml_graph *int8_linear_graph(gml_context **ctx, int64_t M, int64_t N, int64_t K,
                                    gml_compute c) {
    *ctx = gml_init((gml_init_params){.mem_size = (size_t)(4 * M * K + 4 * M * N) +
                                                  gml_row_size(GML_Q8_0, K) * (size_t)N + (1 << 20)});
    gml_tensor *x = *ctx ? gml_new_tensor_2d(*ctx, GML_F32, M, K) : NULL;
    gml_tensor *w = x ? gml_new_tensor_2d(*ctx, GML_Q8_0, N, K) : NULL;
    gml_tensor *y = w ? gml_linear(*ctx, x, w, NULL) : NULL;
    gml_graph *g = y && gml_set_compute(*ctx, y, c) == GML_OK ? gml_build_graph(*ctx, &y, 1) : NULL;
    if (!g) {
        fprintf(stderr, "bench: int8 linear: %s\n", *ctx ? gml_last_error(*ctx) : "out of memory");
        exit(1);
    }
    fill(x->data, M * K, 41);
    fill_q8_0(w->data, N, K, 42);
    return g;
}

/* The case's fused graph with weights of type wt (f32, bf16, q8_0), matmuls
 * (and in bf16 flash attention) in c where they take it (the context's
 * default), planned and filled. */
static gml_graph *prefill_graph(gml_context **ctx, const attn_case *c, gml_type wt,
                              gml_compute comp) {
    const int64_t dk = c->D / c->H, dkv = (int64_t)c->G * dk;
    *ctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true});
    if (!*ctx || gml_set_default_compute(*ctx, comp) != GML_OK) {
        fprintf(stderr, "bench: prefill: %s\n", *ctx ? gml_last_error(*ctx) : "out of memory");
        exit(1);
    }
    const gml_attn_weights w = {
        .w_q = gml_new_tensor_2d(*ctx, wt, c->D, c->D),
        .w_k = gml_new_tensor_2d(*ctx, wt, dkv, c->D),
        .w_v = gml_new_tensor_2d(*ctx, wt, dkv, c->D),
        .w_o = gml_new_tensor_2d(*ctx, wt, c->D, c->D),
    };
    const gml_attn_inputs in = {.query = gml_new_tensor_3d(*ctx, GML_F32, c->B, c->T, c->D)};
    const gml_attn_config cfg = {.dims = {.n_heads = c->H, .n_kv_heads = c->G},
                                 .graph.impl = GML_ATTN_FUSED};
    gml_attn_result r = c->G == c->H ? gml_mha(*ctx, cfg, &w, in) : gml_gqa(*ctx, cfg, &w, in);
    gml_graph *g = r.out ? gml_build_graph(*ctx, &r.out, 1) : NULL;
    if (!g || gml_graph_plan(g, NULL) != GML_OK) {
        fprintf(stderr, "bench: prefill %s: %s\n", c->id, g ? gml_graph_error(g) : gml_last_error(*ctx));
        exit(1);
    }
    for (int l = 0; l < gml_graph_n_leafs(g); l++) {
        gml_tensor *t = gml_graph_leaf(g, l);
        if (t->type == GML_Q8_0) {
            fill_q8_0(gml_graph_data(g, t), t->ne[2], t->ne[3], 51 + (uint32_t)l);
        } else if (t->type == GML_BF16) {
            const int64_t n = gml_nelements(t);
            float *tmp = malloc((size_t)n * sizeof *tmp);
            if (!tmp) {
                fprintf(stderr, "bench: out of memory\n");
                exit(1);
            }
            fill(tmp, n, 51 + (uint32_t)l);
            uint16_t *dst = gml_graph_data(g, t);
            for (int64_t i = 0; i < n; i++) dst[i] = gml_fp32_to_bf16(tmp[i]);
            free(tmp);
        } else {
            fill(gml_graph_data(g, t), gml_nelements(t), 51 + (uint32_t)l);
        }
    }
    return g;
}

/* The kernels that ran g's matmul and flash_attn nodes in its last compute,
 * each once, after "kernels: ". */
static void print_kernels(gml_graph *g) {
    const char *seen[16];
    int n = 0;
    printf("%-22s kernels:", "");
    for (int i = 0; i < gml_graph_n_nodes(g); i++) {
        const gml_op op = gml_graph_node(g, i)->op;
        const char *k = gml_graph_node_kernel(g, i);
        if ((op != GML_OP_MATMUL && op != GML_OP_FLASH_ATTN) || !k) continue;
        bool dup = false;
        for (int j = 0; j < n; j++) dup |= strcmp(seen[j], k) == 0;
        if (dup || n == 16) continue;
        seen[n++] = k;
        printf("%s %s", n > 1 ? "," : "", k);
    }
    printf("\n");
}

static const char *pct_int8(char *buf, const opts *o, double gops, int nth) {
    return bench_pct(buf, 16, gops, bench_int8_peak(o->lim, nth));
}
static const char *pct_amx_int8(char *buf, const opts *o, double gops, int nth) {
    return bench_pct(buf, 16, gops, bench_amx_int8_peak(o->lim, nth));
}

static void bench_int8(const opts *o) {
    static const struct {
        const char *what;
        int64_t M, N, K;
    } lin[] = {
        {"1024^3 linear", 1024, 1024, 1024},
        {"2048^3 linear", 2048, 2048, 2048},
        {"M=20 N=K=4096 linear", 20, 4096, 4096},
        /* decoding at C5's dimensions (D 1024): 1 to 4 rows */
        {"M=1 N=K=1024 linear", 1, 1024, 1024},
        {"M=2 N=K=1024 linear", 2, 1024, 1024},
        {"M=3 N=K=1024 linear", 3, 1024, 1024},
        {"M=4 N=K=1024 linear", 4, 1024, 1024},
    };
    printf("\nint8 compute, q8_0 weights (GOP/s; x [M,K] @ w^T, w q8_0 [N,K]; %%int8: of the "
           "int8 (VPDPBUSD) peak,\n%%AMX: of the AMX-INT8 (TDPBUSD) peak, %%FMA: of the FMA peak, at "
           "the threads; f32: the same q8_0\nweight in f32 compute; ratio: int8 / f32; kernel: what "
           "ran the int8 product)\n");
    print_amx_state(o->lim->amx_int8_gops[0] > 0);
    printf("%-22s %7s %9s %6s %6s %6s %9s %6s %6s\n", "shape", "threads", "int8", "%int8", "%AMX", "%FMA",
           "f32", "%FMA", "ratio");
    for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
        if (lin[i].M > 20 && lin[i].M > o->max_cube) continue;
        const double flop = 2.0 * (double)lin[i].M * (double)lin[i].N * (double)lin[i].K;
        gml_context *ctx[2];
        gml_graph *g[2] = {int8_linear_graph(&ctx[0], lin[i].M, lin[i].N, lin[i].K, GML_COMPUTE_INT8),
                           int8_linear_graph(&ctx[1], lin[i].M, lin[i].N, lin[i].K, GML_COMPUTE_F32)};
        for (int j = 0; j < o->n_threads; j++) {
            const int nth = o->threads[j];
            double sec[2];
            const timed t[2] = {{run_graph, g[0]}, {run_graph, g[1]}};
            measure(o, TURNS_WITH_REFERENCE, t, 2, nth, 0, sec);
            const double q = flop / sec[0] * 1e-9, f = flop / sec[1] * 1e-9;
            char p[4][16];
            printf("%-22s %7d %9.1f %6s %6s %6s %9.1f %6s %5.2fx\n", lin[i].what, nth, q,
                   pct_int8(p[0], o, q, nth), pct_amx_int8(p[3], o, q, nth), pct_fma(p[1], o, q, nth), f,
                   pct_fma(p[2], o, f, nth), sec[1] / sec[0]);
        }
        printf("%-22s kernel: %s\n", "", gml_graph_node_kernel(g[0], -1) ? gml_graph_node_kernel(g[0], -1) : "?");
        fflush(stdout);
        for (int k = 0; k < 2; k++) {
            gml_graph_free(g[k]);
            gml_free(ctx[k]);
        }
    }

    printf("\nint8 prefill, fused attention (ms; f32: f32 weights; q8_0: q8_0 weights in f32 "
           "compute;\nint8: q8_0 weights in int8 compute; GOP/s, %%int8 and %%AMX: the graph's "
           "operations over the int8 time)\n");
    printf("%-22s %7s %9s %9s %9s %8s %9s %6s %6s\n", "case", "threads", "f32", "q8_0", "int8",
           "vs f32", "GOP/s", "%int8", "%AMX");
    const char *ids[] = {"C3", "C5"};
    for (int i = 0; i < 2; i++) {
        const attn_case *c = case_of(ids[i]);
        char name[64];
        case_name(c, name, sizeof name);
        gml_context *ctx[3];
        gml_graph *g[3] = {prefill_graph(&ctx[0], c, GML_F32, GML_COMPUTE_F32),
                           prefill_graph(&ctx[1], c, GML_Q8_0, GML_COMPUTE_F32),
                           prefill_graph(&ctx[2], c, GML_Q8_0, GML_COMPUTE_INT8)};
        const double flop = gml_graph_flops(g[2]);
        for (int j = 0; j < o->n_threads; j++) {
            const int nth = o->threads[j];
            double sec[3];
            const timed t[3] = {{run_graph, g[0]}, {run_graph, g[1]}, {run_graph, g[2]}};
            measure(o, ROUNDS, t, 3, nth, o->runs, sec);
            char p[2][16];
            const double q = flop / sec[2] * 1e-9;
            printf("%-22s %7d %9.3f %9.3f %9.3f %7.2fx %9.1f %6s %6s\n", name, nth, sec[0] * 1e3,
                   sec[1] * 1e3, sec[2] * 1e3, sec[0] / sec[2], q, pct_int8(p[0], o, q, nth),
                   pct_amx_int8(p[1], o, q, nth));
        }
        print_kernels(g[2]);
        fflush(stdout);
        for (int k = 0; k < 3; k++) {
            gml_graph_free(g[k]);
            gml_free(ctx[k]);
        }
    }
}

/* ---- bf16 prefill ----------------------------------------------------------------
 * C3's and C5's attention prefill (fused) with bf16 weights in bf16 compute
 * (the matmuls and flash attention: run-graph --weights-dtype bf16 --compute
 * bf16), against the same case with f32 weights and with bf16 weights in
 * f32 compute, taking turns run by run; the target on an AMX CPU:
 * bf16 at least 4x the f32 weights' speed. */
static void bench_bf16_prefill(const opts *o) {
    printf("\nbf16 prefill, fused attention (ms; f32: f32 weights; bf16 w: bf16 weights in f32 "
           "compute;\nbf16: bf16 weights in bf16 compute, matmuls and flash attention; vs f32: f32's "
           "time over bf16's;\nGFLOP/s, %%bf16, %%AMX: the graph's FLOPs over the bf16 time, of the "
           "VDPBF16PS and AMX-BF16 peaks)\n");
    print_amx_state(o->lim->amx_bf16_gflops[0] > 0);
    printf("%-22s %7s %9s %9s %9s %8s %9s %6s %6s\n", "case", "threads", "f32", "bf16 w", "bf16", "vs f32",
           "GFLOP/s", "%bf16", "%AMX");
    const char *ids[] = {"C3", "C5"};
    for (int i = 0; i < 2; i++) {
        const attn_case *c = case_of(ids[i]);
        char name[64];
        case_name(c, name, sizeof name);
        gml_context *ctx[3];
        gml_graph *g[3] = {prefill_graph(&ctx[0], c, GML_F32, GML_COMPUTE_F32),
                           prefill_graph(&ctx[1], c, GML_BF16, GML_COMPUTE_F32),
                           prefill_graph(&ctx[2], c, GML_BF16, GML_COMPUTE_BF16)};
        const double flop = gml_graph_flops(g[2]);
        for (int j = 0; j < o->n_threads; j++) {
            const int nth = o->threads[j];
            double sec[3];
            const timed t[3] = {{run_graph, g[0]}, {run_graph, g[1]}, {run_graph, g[2]}};
            measure(o, ROUNDS, t, 3, nth, o->runs, sec);
            char p[2][16];
            const double r = flop / sec[2] * 1e-9;
            printf("%-22s %7d %9.3f %9.3f %9.3f %7.2fx %9.1f %6s %6s\n", name, nth, sec[0] * 1e3, sec[1] * 1e3,
                   sec[2] * 1e3, sec[0] / sec[2], r, bench_pct(p[0], 16, r, bench_bf16_peak(o->lim, nth)),
                   bench_pct(p[1], 16, r, bench_amx_bf16_peak(o->lim, nth)));
        }
        print_kernels(g[2]);
        fflush(stdout);
        for (int k = 0; k < 3; k++) {
            gml_graph_free(g[k]);
            gml_free(ctx[k]);
        }
    }
}

/* ---- a training step ----------------------------------------------------------
 * ISSUE24's target: a GPT-2-style LM (V 4096, D 512, H 8, 4 layers, n_ctx T,
 * head tied to wte) trained on B 4 x T 256 tokens a step with AdamW, through
 * the library's trainer (<ggmlite/train.h>: forward, cross-entropy, every
 * gradient, the update). ms per step (the step's first run excluded: it
 * makes the kernels' scratch and AdamW's first state), GFLOP/s and share of
 * the FMA peak for FLOPs = 6 x params x tokens + 12 x layers x B x T^2 x D
 * (the parameters' forward and backward products, and attention's), and
 * PyTorch's step on the same model (tools/bench_train_torch.py, plain torch
 * as HF computes, torch.optim.AdamW) at the same threads, run as
 * /usr/bin/python3 when it has torch; the column says why it is absent
 * otherwise. */

enum { TR_V = 4096, TR_D = 512, TR_H = 8, TR_L = 4, TR_B = 4, TR_T = 256 };

typedef struct train_bench {
    gml_trainer *tr;
    int32_t *x, *y; /* [B, T] */
} train_bench;

static double run_train_step(void *user, int nth) {
    train_bench *b = user;
    const double t0 = now_s();
    if (gml_trainer_step(b->tr, b->x, b->y, nth, NULL) != GML_OK) {
        fprintf(stderr, "bench: train: %s\n", gml_trainer_error(b->tr));
        exit(1);
    }
    return now_s() - t0;
}

/* Random GPT-2 weights under HF's names in an allocating context: norms'
 * weights 1 and biases 0, the rest N(0, 0.02)-sized uniform values. */
static gml_context *train_weights(int64_t *n_params) {
    const int64_t D = TR_D, F = 4 * TR_D;
    const struct { const char *name; int64_t r, c; } top[] = {
        {"wte.weight", TR_V, D}, {"wpe.weight", TR_T, D}, {"ln_f.weight", 0, D}, {"ln_f.bias", 0, D}};
    const struct { const char *name; int64_t r, c; } layer[] = {
        {"ln_1.weight", 0, D}, {"ln_1.bias", 0, D}, {"attn.c_attn.weight", D, 3 * D}, {"attn.c_attn.bias", 0, 3 * D},
        {"attn.c_proj.weight", D, D}, {"attn.c_proj.bias", 0, D}, {"ln_2.weight", 0, D}, {"ln_2.bias", 0, D},
        {"mlp.c_fc.weight", D, F}, {"mlp.c_fc.bias", 0, F}, {"mlp.c_proj.weight", F, D}, {"mlp.c_proj.bias", 0, D}};
    const int n_top = 4, n_layer = 12;
    int64_t count = 0;
    for (int i = 0; i < n_top; i++) count += (top[i].r ? top[i].r : 1) * top[i].c;
    for (int i = 0; i < n_layer; i++) count += TR_L * (layer[i].r ? layer[i].r : 1) * layer[i].c;
    *n_params = count;
    gml_context *w = gml_init((gml_init_params){
        .mem_size = (size_t)count * 4 + (size_t)(n_top + TR_L * n_layer) * (gml_tensor_overhead() + 64) + (1 << 20)});
    if (!w) return NULL;
    uint32_t seed = 7;
    for (int l = -1; l < TR_L; l++)
        for (int i = 0; i < (l < 0 ? n_top : n_layer); i++) {
            const char *base = l < 0 ? top[i].name : layer[i].name;
            const int64_t r = l < 0 ? top[i].r : layer[i].r, c = l < 0 ? top[i].c : layer[i].c;
            gml_tensor *t = r ? gml_new_tensor_2d(w, GML_F32, r, c) : gml_new_tensor_1d(w, GML_F32, c);
            char name[GML_MAX_NAME];
            if (l < 0) snprintf(name, sizeof name, "%s", base);
            else snprintf(name, sizeof name, "h.%d.%s", l, base);
            if (!t) return gml_free(w), NULL;
            gml_set_name(t, name);
            float *v = t->data;
            const int64_t n = gml_nelements(t);
            const bool norm_w = strstr(base, "ln_") && strstr(base, ".weight");
            fill(v, n, seed++);
            for (int64_t k = 0; k < n; k++) v[k] = r ? v[k] * 0.035f : norm_w ? 1.0f : 0.0f;
        }
    return w;
}

/* PyTorch's median ms per step at nth threads, or 0 with why in `why`. */
static double torch_train_ms(int nth, char *why, size_t size) {
    static const char *const py = "/usr/bin/python3";
    if (access(py, X_OK) != 0) return snprintf(why, size, "no %s", py), 0;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s/tools/bench_train_torch.py --threads %d --vocab %d --d-model %d --heads %d "
             "--layers %d --batch %d --seq %d --runs 5 2>/dev/null", py, GML_BENCH_SOURCE_DIR, nth, TR_V, TR_D,
             TR_H, TR_L, TR_B, TR_T);
    fflush(stdout);
    FILE *f = popen(cmd, "r");
    char line[512] = "";
    const bool got = f && fgets(line, sizeof line, f);
    const int status = f ? pclose(f) : -1;
    const char *at = got ? strstr(line, "\"median_ms\": ") : NULL;
    if (status != 0 || !at) {
        snprintf(why, size, "%s", WIFEXITED(status) && WEXITSTATUS(status) == 3 ? "no torch" : "its script failed");
        return 0;
    }
    return atof(at + strlen("\"median_ms\": "));
}

static void bench_train(const opts *o) {
    printf("\ntraining step: GPT-2-style LM, V %d, D %d, H %d, %d layers, B %d x T %d tokens, AdamW "
           "(forward, cross-entropy, every gradient, the update)\n", TR_V, TR_D, TR_H, TR_L, TR_B, TR_T);
    int64_t n_params = 0;
    gml_context *w = train_weights(&n_params);
    char err[1024] = "out of memory";
    gml_lm lm;
    const gml_lm_config lc = {.arch = GML_LM_GPT2, .gpt2 = {.n_heads = TR_H}};
    if (!w || gml_lm_find(w, &lc, &lm, err, sizeof err) != GML_OK) {
        fprintf(stderr, "bench: train: %s\n", err);
        exit(1);
    }
    const gml_trainer_config tc = {.batch = TR_B, .seq = TR_T, .optim = gml_optim_defaults(GML_OPTIM_ADAMW)};
    train_bench b = {.tr = gml_trainer_new(&lm, w, &tc, err, sizeof err)};
    b.x = malloc(2 * TR_B * TR_T * sizeof *b.x);
    if (!b.tr || !b.x) {
        fprintf(stderr, "bench: train: %s\n", err);
        exit(1);
    }
    b.y = b.x + TR_B * TR_T;
    for (int i = 0; i < TR_B * TR_T + TR_B; i++) { /* a window of T+1 tokens per row */
        const int32_t id = (int32_t)((i * 2654435761u >> 7) % TR_V);
        const int row = i / (TR_T + 1), col = i % (TR_T + 1);
        if (row >= TR_B) break;
        if (col < TR_T) b.x[row * TR_T + col] = id;
        if (col > 0) b.y[row * TR_T + col - 1] = id;
    }
    const double flops = 6.0 * (double)n_params * TR_B * TR_T + 12.0 * TR_L * TR_B * (double)TR_T * TR_T * TR_D;
    printf("%.1fM parameters; %.1f GFLOP a step (6 x params x tokens + 12 x layers x B x T^2 x D); planned "
           "%.1f MiB, %d nodes\n", (double)n_params / 1e6, flops / 1e9,
           (double)gml_graph_plan_peak(gml_trainer_graph(b.tr)) / (1 << 20), gml_graph_n_nodes(gml_trainer_graph(b.tr)));
    printf("(ms: median per step, the first excluded; %%FMA: of the FMA peak at the threads; PyTorch: "
           "eager torch, torch.optim.AdamW, same threads; ratio: PyTorch's time over ggmlite's)\n");
    printf("%-8s %10s %10s %8s %10s %12s %8s\n", "threads", "ms/step", "GFLOP/s", "%FMA", "tokens/s", "PyTorch ms",
           "ratio");
    run_train_step(&b, o->threads[0]); /* the first step: scratch, AdamW's state */
    for (int j = 0; j < o->n_threads; j++) {
        const int nth = o->threads[j];
        double sec;
        measure(o, WARM_SECONDS, &(timed){run_train_step, &b}, 1, nth, o->runs, &sec);
        const double gf = flops / sec / 1e9;
        char pf[16], why[64] = "", tcol[72], ratio[16] = "-";
        const double tms = torch_train_ms(nth, why, sizeof why);
        if (tms > 0) {
            snprintf(tcol, sizeof tcol, "%.1f", tms);
            snprintf(ratio, sizeof ratio, "%.2fx", tms / (sec * 1e3));
        } else {
            snprintf(tcol, sizeof tcol, "(%s)", why);
        }
        printf("%-8d %10.1f %10.1f %8s %10.0f %12s %8s\n", nth, sec * 1e3, gf, pct_fma(pf, o, gf, nth),
               TR_B * TR_T / sec, tcol, ratio);
    }
    free(b.x);
    gml_trainer_free(b.tr);
    gml_lm_free(&lm);
    gml_free(w);
}

/* ---- main --------------------------------------------------------------- */

#ifdef GML_BENCH_OPENBLAS
/* OpenBLAS's core type for an ISA: its kernels for that ISA. */
static const char *blas_coretype(gml_isa isa) {
    return isa == GML_ISA_AVX512 ? "SkylakeX" : isa == GML_ISA_AVX2 ? "Haswell" : NULL;
}
#endif

/* ---- training memory -----------------------------------------------------
 * The planned peak of one training step of one LLaMA layer (RMSNorm, GQA
 * with rope, causal, SwiGLU; C5's heads: D 1024, H 16, G 4, F 2816), B 1:
 * the layer's output and the gradients of its input and of every weight
 * (L = sum(out * dy), dy an input), planned (measure_only, nothing
 * allocated, nothing computed) with the weights, x, dy, the output and the
 * gradients in the buffer beside the intermediates. Fused: one flash_attn
 * and its FlashAttention-2 backward; unfused: scores, softmax and context,
 * [B, H, T, T] each, and their backwards. The target: fused at most
 * 1/10 of unfused at T 8192. A planned number, no timing. */
typedef struct train_peak {
    size_t peak, naive;
    int nodes;
} train_peak;

/* -> the plan's sizes; exits (message printed) when a build or plan fails */
static train_peak llama_train_peak(int64_t T, gml_attn_impl impl) {
    const int64_t B = 1, D = 1024, H = 16, G = 4, F = 2816, kd = G * (D / H);
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 8 << 20, .no_alloc = true});
    if (!ctx) exit(1);
    gml_tensor *an = gml_new_tensor_1d(ctx, GML_F32, D), *mn = gml_new_tensor_1d(ctx, GML_F32, D);
    const gml_attn_weights aw = {
        .w_q = gml_new_tensor_2d(ctx, GML_F32, D, D),  .w_k = gml_new_tensor_2d(ctx, GML_F32, kd, D),
        .w_v = gml_new_tensor_2d(ctx, GML_F32, kd, D), .w_o = gml_new_tensor_2d(ctx, GML_F32, D, D),
    };
    gml_tensor *wg = gml_new_tensor_2d(ctx, GML_F32, F, D), *wu = gml_new_tensor_2d(ctx, GML_F32, F, D);
    gml_tensor *wd = gml_new_tensor_2d(ctx, GML_F32, D, F);
    gml_tensor *x = gml_new_tensor_3d(ctx, GML_F32, B, T, D), *dy = gml_new_tensor_3d(ctx, GML_F32, B, T, D);
    const gml_attn_config cfg = {
        .dims = {.d_model = D, .n_heads = (int)H, .n_kv_heads = (int)G},
        .score = {.causal = GML_CAUSAL_BOTTOM_RIGHT},
        .pos = {.kind = GML_POS_ROPE, .rope = {.theta = 10000.0f}},
        .graph = {.impl = impl},
    };
    /* as gml_llama_layer, the attention's graph chosen */
    gml_tensor *h = gml_rms_norm(ctx, x, an, 1e-6f);                                 /* [B, T, D] */
    gml_tensor *att = gml_gqa(ctx, cfg, &aw, (gml_attn_inputs){.query = h}).out;      /* [B, T, D] */
    gml_tensor *r = att ? gml_add(ctx, x, att) : NULL;
    gml_tensor *n = gml_rms_norm(ctx, r, mn, 1e-6f);
    gml_tensor *m = gml_mul(ctx, gml_silu(ctx, gml_linear(ctx, n, wg, NULL)),
                            gml_linear(ctx, n, wu, NULL));                            /* [B, T, F] */
    gml_tensor *y = gml_add(ctx, r, gml_linear(ctx, m, wd, NULL));                    /* [B, T, D] */
    gml_tensor *wrt[] = {an, aw.w_q, aw.w_k, aw.w_v, aw.w_o, mn, wg, wu, wd, x}, *outs[11];
    enum { N_WRT = sizeof wrt / sizeof *wrt };
    gml_graph *g = NULL;
    if (y && gml_grad(ctx, y, dy, wrt, N_WRT, outs + 1) == GML_OK) {
        outs[0] = y;
        g = gml_build_graph(ctx, outs, N_WRT + 1);
    }
    if (!g || gml_graph_plan(g, &(gml_plan_options){.measure_only = true}) != GML_OK) {
        fprintf(stderr, "bench: LLaMA layer training step, T=%lld: %s\n", (long long)T,
                g ? gml_graph_error(g) : gml_last_error(ctx));
        exit(1);
    }
    const train_peak p = {gml_graph_plan_peak(g), gml_graph_plan_naive(g), gml_graph_n_nodes(g)};
    gml_graph_free(g);
    gml_free(ctx);
    return p;
}

/* The section's table at the sequence lengths T[0..n-1]. */
static void print_train_peaks(const int64_t *T, int n) {
    printf("\ntraining step memory, planned (one LLaMA layer: D=1024 H=16 G=4 F=2816 B=1, "
           "causal, rope; output and the gradients of x and every weight; measure_only)\n");
    printf("%-8s %-8s %6s %14s %14s %14s\n", "T", "graph", "nodes", "planned MiB",
           "unplanned MiB", "fused/unfused");
    const double mib = 1024.0 * 1024.0;
    for (int i = 0; i < n; i++) {
        train_peak p[2];
        for (int fused = 0; fused < 2; fused++) {
            p[fused] = llama_train_peak(T[i], fused ? GML_ATTN_FUSED : GML_ATTN_UNFUSED);
            char ratio[32] = "";
            if (fused)
                snprintf(ratio, sizeof ratio, "1/%.1f%s", (double)p[0].peak / (double)p[1].peak,
                         10 * p[1].peak <= p[0].peak ? "" : " (target 1/10)");
            printf("%-8lld %-8s %6d %14.1f %14.1f %14s\n", (long long)T[i],
                   fused ? "fused" : "unfused", p[fused].nodes, (double)p[fused].peak / mib,
                   (double)p[fused].naive / mib, ratio);
        }
    }
    fflush(stdout);
}

static void bench_train_mem(const opts *o) {
    (void)o;
    print_train_peaks((const int64_t[]){8192}, 1);
}

static void print_machine(const opts *o) {
    char model[256] = "unknown CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            char *colon = strchr(line, ':');
            if (strncmp(line, "model name", 10) == 0 && colon) {
                snprintf(model, sizeof model, "%s", colon + 2);
                model[strcspn(model, "\n")] = '\0';
                break;
            }
        }
        fclose(f);
    }
    char date[32];
    time_t tnow = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M", localtime(&tnow));
    printf("\nggmlite %s bench: %s, %ld cores, ISA %s, %s\n", GML_VERSION, model,
           sysconf(_SC_NPROCESSORS_ONLN), gml_isa_name(gml_get_isa()), date);
    printf("medians of %d runs, each set after %.1f s of warm-up runs; matmul, attention and "
           "window\nrows whose run takes over %.2f s: as many as take %.0f s, at least 3\n",
           o->runs, WARM_S, ROW_S / o->runs, ROW_S);
#ifdef GML_BENCH_OPENBLAS
    const char *want = blas_coretype(gml_get_isa()), *env = getenv("OPENBLAS_CORETYPE");
    const char *core = openblas_get_corename();
    printf("reference: OpenBLAS cblas_sgemm, same run, same threads; its core %s "
           "(OPENBLAS_CORETYPE=%s)%s\n", core ? core : "?", env ? env : "unset",
           want && core && strcasecmp(core, want) != 0 ? ": not the core asked for" : "");
#else
    printf("reference: none (OpenBLAS not found at build time)\n");
#endif
}

/* The sections of the table, in order; --only NAME runs those of that name
 * (the window section alone is also the end of attention's). */
static const struct section {
    const char *name;
    void (*run)(const opts *o);
    bool in_table; /* run without --only */
} SECTIONS[] = {
    {"matmul", bench_matmul, true},
    {"bf16", bench_matmul_bf16, true},
    {"bf16", bench_bf16_prefill, true},
    {"attention", bench_attention, true},
    {"window", bench_window, false},
    {"grad", bench_grad, true},
    {"decode", bench_decode, true},
    {"decode", bench_decode_layers, true},
    {"weights", bench_weights, true},
    {"decode_types", bench_decode_types, true},
    {"int8", bench_int8, true},
    {"train", bench_train, false},
    {"train_mem", bench_train_mem, true},
};
#define N_SECTIONS (int)(sizeof SECTIONS / sizeof *SECTIONS)

static void usage(void) {
    fprintf(stderr, "usage: bench [--runs N (>= 1, default 10)] [--max-cube N (default 4096)] "
                    "[--threads 1,2] [--only matmul|bf16|attention|window|grad|decode|weights|decode_types|int8|train|train_mem] "
                    "[--isa avx2|avx512|all (default: GGMLITE_ISA, else the best the CPU has)]\n");
    exit(2);
}

/* The whole table at one ISA: ggmlite's kernels set to it, the machine's
 * limits measured at it first. */
static void run_isa(opts *o, gml_isa isa, const char *only) {
    if (gml_set_isa(isa) != GML_OK) {
        fprintf(stderr, "bench: this CPU lacks %s\n", gml_isa_name(isa));
        exit(2);
    }
    print_machine(o);
    bench_limits lim;
    bench_measure_limits(&lim, isa, o->threads, o->n_threads);
    o->lim = &lim;
    bench_print_limits(&lim);
    for (int i = 0; i < N_SECTIONS; i++)
        if (only[0] ? strcmp(only, SECTIONS[i].name) == 0 : SECTIONS[i].in_table) SECTIONS[i].run(o);
    o->lim = NULL;
}

#ifdef GML_BENCH_OPENBLAS
/* OpenBLAS reads OPENBLAS_CORETYPE once, when the library loads: each ISA
 * runs in a fresh process, this program again (/proc/self/exe) with the
 * variable set and --isa-run naming the ISA. argv is the original one. */
static void run_child(char **argv, int argc, gml_isa isa) {
    char **args = calloc((size_t)argc + 3, sizeof *args);
    if (!args) exit(1);
    for (int i = 0; i < argc; i++) args[i] = argv[i];
    args[argc] = "--isa-run";
    args[argc + 1] = (char *)gml_isa_name(isa);
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid < 0) {
        perror("bench: fork");
        exit(1);
    }
    if (pid == 0) {
        const char *core = blas_coretype(isa);
        if (core) setenv("OPENBLAS_CORETYPE", core, 1);
        execv("/proc/self/exe", args);
        perror("bench: execv /proc/self/exe");
        _exit(1);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        perror("bench: waitpid");
        exit(1);
    }
    free(args);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "bench: the %s run failed (%s %d)\n", gml_isa_name(isa),
                WIFEXITED(status) ? "exit status" : "signal",
                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        exit(1);
    }
}
#endif

int main(int argc, char **argv) {
    opts o = {.runs = 10, .max_cube = 4096, .threads = {1, 2}, .n_threads = 2};
    const char *only = "";
    gml_isa isas[2];
    int n_isas = 0;
    bool child = false;
    char **orig = calloc((size_t)argc + 1, sizeof *orig); /* strtok below writes in argv */
    for (int i = 0; orig && i < argc; i++)
        if (!(orig[i] = strdup(argv[i]))) orig = NULL;
    if (!orig) return fprintf(stderr, "bench: out of memory\n"), 1;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage();
        if (strcmp(argv[i], "--runs") == 0) {
            o.runs = atoi(argv[++i]);
            if (o.runs < 1 || o.runs > MAX_RUNS) usage();
        } else if (strcmp(argv[i], "--max-cube") == 0) {
            o.max_cube = atoll(argv[++i]);
        } else if (strcmp(argv[i], "--threads") == 0) {
            o.n_threads = 0;
            char *list = argv[++i];
            for (char *s = strtok(list, ","); s && o.n_threads < MAX_THREADS; s = strtok(NULL, ","))
                if ((o.threads[o.n_threads++] = atoi(s)) < 1) usage();
            if (o.n_threads == 0) usage();
        } else if (strcmp(argv[i], "--only") == 0) {
            only = argv[++i];
            bool known = false;
            for (int k = 0; k < N_SECTIONS; k++) known = known || strcmp(only, SECTIONS[k].name) == 0;
            if (!known) usage();
        } else if (strcmp(argv[i], "--isa") == 0 || strcmp(argv[i], "--isa-run") == 0) {
            child = strcmp(argv[i], "--isa-run") == 0; /* the last one: see run_child */
            const char *name = argv[++i];
            n_isas = 0;
            if (strcmp(name, "all") == 0 && !child) {
                for (gml_isa isa = GML_ISA_AVX2; isa <= GML_ISA_AVX512; isa++)
                    if (gml_cpu_has(isa)) isas[n_isas++] = isa;
                if (n_isas == 0) {
                    fprintf(stderr, "bench: --isa all: this CPU has neither avx2 nor avx512\n");
                    return 2;
                }
            } else if (gml_isa_from_name(name, &isas[0]) && isas[0] != GML_ISA_AUTO &&
                       (child || isas[0] == GML_ISA_AVX2 || isas[0] == GML_ISA_AVX512)) {
                /* --isa-run: any (the parent's GGMLITE_ISA may be scalar) */
                if (!gml_cpu_has(isas[0])) {
                    fprintf(stderr, "bench: --isa %s: this CPU lacks %s\n", name, name);
                    return 2;
                }
                n_isas = 1;
            } else {
                usage();
            }
        } else {
            usage();
        }
    }
    if (n_isas == 0) isas[n_isas++] = gml_get_isa(); /* GGMLITE_ISA, else the best */
#ifdef GML_BENCH_OPENBLAS
    if (!child)
        for (int k = 0; k < n_isas; k++) run_child(orig, argc, isas[k]);
    else
#endif
        for (int k = 0; k < n_isas; k++) run_isa(&o, isas[k], only);
    for (int i = 0; i < argc; i++) free(orig[i]);
    free(orig);
    return 0;
}
