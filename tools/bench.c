/* ggmlite benchmark: one table of medians, each ggmlite row beside a
 * reference measured in the same run (OpenBLAS's cblas_sgemm when the build
 * found it). A tool, not a test: timings on a shared machine are noisy, so
 * every number is the median of --runs runs after warm-up.
 *
 *   bench [--runs N] [--max-cube N] [--threads 1,2] [--only matmul|attention]
 *
 * Sections: matmul f32 (cubes, and M=20 rows against a 4096x4096 weight in
 * nn.Linear layout, the decoding shape); attention forward (C1..C5). */
#define _POSIX_C_SOURCE 200809L
#include "attention.h"
#include "ggmlite.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef GML_BENCH_OPENBLAS
#include <cblas.h>
void openblas_set_num_threads(int num_threads);
#endif

#define MAX_RUNS 1000
#define MAX_THREADS 8

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

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

static void pause_s(double sec) {
    struct timespec ts = {.tv_sec = (time_t)sec,
                          .tv_nsec = (long)((sec - (double)(time_t)sec) * 1e9)};
    nanosleep(&ts, NULL);
}

typedef struct opts {
    int runs;
    int64_t max_cube;
    int threads[MAX_THREADS], n_threads;
} opts;

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

static double time_ggml(const mm_setup *s, int nth) { return time_graph(s->g, nth); }

#ifdef GML_BENCH_OPENBLAS
static double time_blas(const mm_setup *s, const mm_case *c) {
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
           "ggmlite and the reference take %d turns each, runs split among them)\n", TURNS);
    printf("%-22s %7s %10s %10s %7s\n", "shape", "threads", "ggmlite", "OpenBLAS", "ratio");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const mm_case *c = &cases[i];
        if (!c->linear && c->M > o->max_cube) continue;
        const double flop = 2.0 * (double)c->M * (double)c->N * (double)c->K;
        mm_setup s = mm_setup_new(c);
        for (int j = 0; j < o->n_threads; j++) {
            const int nth = o->threads[j];
            double tg[MAX_RUNS], tb[MAX_RUNS] = {0};
#ifdef GML_BENCH_OPENBLAS
            openblas_set_num_threads(nth);
#endif
            for (int round = 0, done = 0; round < TURNS; round++) {
                const int n = (o->runs - done) / (TURNS - round);
                pause_s(0.25);
                for (double warm = 0; warm < WARM_S;) warm += time_ggml(&s, nth);
                for (int r = 0; r < n; r++) tg[done + r] = time_ggml(&s, nth);
#ifdef GML_BENCH_OPENBLAS
                pause_s(0.25);
                for (double warm = 0; warm < WARM_S;) warm += time_blas(&s, c);
                for (int r = 0; r < n; r++) tb[done + r] = time_blas(&s, c);
#endif
                done += n;
            }
            const double g = flop / median(tg, o->runs) * 1e-9;
#ifdef GML_BENCH_OPENBLAS
            const double b = flop / median(tb, o->runs) * 1e-9;
            printf("%-22s %7d %10.1f %10.1f %7.2f\n", c->what, nth, g, b, g / b);
#else
            (void)tb;
            printf("%-22s %7d %10.1f %10s %7s\n", c->what, nth, g, "-", "-");
#endif
            fflush(stdout);
        }
        mm_setup_free(&s);
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
    const char *what;
    int64_t B, T, D;
    int H, G; /* G == H: MHA */
} attn_case;

/* The case's graph in ctx (no_alloc); NULL (message printed) on failure. */
static gml_graph *attn_graph(gml_context *ctx, const attn_case *c) {
    const int64_t dk = c->D / c->H, dkv = (int64_t)c->G * dk;
    const gml_attn_weights w = {
        .w_q = gml_new_tensor_2d(ctx, GML_F32, c->D, c->D),
        .w_k = gml_new_tensor_2d(ctx, GML_F32, dkv, c->D),
        .w_v = gml_new_tensor_2d(ctx, GML_F32, dkv, c->D),
        .w_o = gml_new_tensor_2d(ctx, GML_F32, c->D, c->D),
    };
    const gml_attn_inputs in = {.query = gml_new_tensor_3d(ctx, GML_F32, c->B, c->T, c->D)};
    const gml_attn_config cfg = {.n_heads = c->H, .n_kv_heads = c->G};
    gml_attn_result r = c->G == c->H ? gml_mha(ctx, cfg, &w, in) : gml_gqa(ctx, cfg, &w, in);
    gml_graph *g = r.out ? gml_build_graph(ctx, &r.out, 1) : NULL;
    if (!g) fprintf(stderr, "bench: %s: %s\n", c->what, gml_last_error(ctx));
    return g;
}

static void bench_attention(const opts *o) {
    static const attn_case cases[] = {
        {"C1 MHA B=2 T=10", 2, 10, 512, 8, 8},
        {"C2 MHA B=4 T=256", 4, 256, 512, 8, 8},
        {"C3 MHA B=1 T=2048", 1, 2048, 512, 8, 8},
        {"C4 GQA B=2 T=10 G=8", 2, 10, 4096, 32, 8},
        {"C5 GQA B=1 T=1024 G=4", 1, 1024, 1024, 16, 4},
    };
    printf("\nattention forward f32 (self-attention, no bias, no mask; D, H as in the case)\n");
    printf("%-22s %5s %3s %7s %10s %10s %12s %10s\n", "case", "D", "H", "threads", "ms",
           "GFLOP/s", "planned MiB", "unplanned");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const attn_case *c = &cases[i];
        gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true});
        gml_graph *g = ctx ? attn_graph(ctx, c) : NULL;
        if (!g) exit(1);
        if (gml_graph_plan(g, NULL) != GML_OK) {
            fprintf(stderr, "bench: %s: %s\n", c->what, gml_graph_error(g));
            exit(1);
        }
        for (int l = 0; l < gml_graph_n_leafs(g); l++) { /* weights and input */
            gml_tensor *t = gml_graph_leaf(g, l);
            fill(t->data, gml_nelements(t), 11 + (uint32_t)l);
        }
        const double flop = gml_graph_flops(g), mib = 1024.0 * 1024.0;
        for (int j = 0; j < o->n_threads; j++) {
            double t[MAX_RUNS];
            pause_s(0.25);
            for (double warm = 0; warm < WARM_S;) warm += time_graph(g, o->threads[j]);
            for (int r = 0; r < o->runs; r++) t[r] = time_graph(g, o->threads[j]);
            const double sec = median(t, o->runs);
            printf("%-22s %5lld %3d %7d %10.3f %10.1f %12.1f %10.1f\n", c->what, (long long)c->D,
                   c->H, o->threads[j], sec * 1e3, flop / sec * 1e-9,
                   (double)gml_graph_plan_peak(g) / mib, (double)gml_graph_plan_naive(g) / mib);
            fflush(stdout);
        }
        gml_graph_free(g);
        gml_free(ctx);
    }
}

/* ---- main --------------------------------------------------------------- */

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
    printf("ggmlite %s bench: %s, %ld cores, ISA %s, %s\n", GML_VERSION, model,
           sysconf(_SC_NPROCESSORS_ONLN), gml_isa_name(gml_get_isa()), date);
    printf("medians of %d runs, each set after %.1f s of warm-up runs; reference: %s\n", o->runs,
           WARM_S,
#ifdef GML_BENCH_OPENBLAS
           "OpenBLAS cblas_sgemm, same run, same threads"
#else
           "none (OpenBLAS not found at build time)"
#endif
    );
}

static void usage(void) {
    fprintf(stderr, "usage: bench [--runs N (>= 1, default 10)] [--max-cube N (default 4096)] "
                    "[--threads 1,2] [--only matmul|attention]\n");
    exit(2);
}

int main(int argc, char **argv) {
    opts o = {.runs = 10, .max_cube = 4096, .threads = {1, 2}, .n_threads = 2};
    const char *only = "";
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
        } else if (strcmp(argv[i], "--only") == 0) {
            only = argv[++i];
            if (strcmp(only, "matmul") != 0 && strcmp(only, "attention") != 0) usage();
        } else {
            usage();
        }
    }
    print_machine(&o);
    if (strcmp(only, "attention") != 0) bench_matmul(&o);
    if (strcmp(only, "matmul") != 0) bench_attention(&o);
    return 0;
}
