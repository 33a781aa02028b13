/* Computes from several application threads at once: two threads computing
 * two graphs that share tensors of one no_alloc context (each planned, so
 * each with its own places for the shared intermediates), re-planning them
 * as they go; two threads computing ONE graph at once (they take turns, each
 * result right); a node callback that computes or plans its own graph, or a
 * graph another thread is computing, gets GML_ERR_INVALID with a message that
 * only its own thread sees. Every compute asks for 2 threads of the
 * process-wide pool unless a callback must block (then 1).
 *
 * Worker threads never call CHECK (its counters are not atomic): they count
 * their failures, and the main thread checks the counts.
 *
 * `test_concurrency quick` runs fewer iterations (for valgrind). Built with
 * clang -fsanitize=thread it is the TSan check of compute's locking. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool quick;

/* ---- two graphs over shared tensors ------------------------------------------ */

/* x [16, 24] and w [24, 24]; h = softmax(x @ w * 0.5) [16, 24], shared by
 * y1 = h * 2 + x [16, 24] and y2 = cont(h^T) @ x [24, 24] (through a view). */
struct shared {
    gml_tensor *x, *w, *y1, *y2;
};

static struct shared shared_build(gml_context *ctx) {
    struct shared s;
    s.x = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 16, 24), "x");
    s.w = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 24, 24), "w");
    gml_set_flags(s.x, GML_FLAG_INPUT);
    gml_set_flags(s.w, GML_FLAG_PARAM);
    gml_tensor *h = gml_softmax(ctx, gml_matmul(ctx, s.x, s.w), NULL, 0.5f, false);
    s.y1 = gml_add(ctx, gml_scale(ctx, h, 2.0f), s.x);
    s.y2 = gml_matmul(ctx, gml_cont(ctx, gml_transpose(ctx, h, 0, 1)), s.x);
    return s;
}

static void fill(float *p, int64_t n, uint64_t seed) {
    chk_rng r = chk_seed(seed);
    for (int64_t i = 0; i < n; i++) p[i] = chk_uniform(&r, -1.0f, 1.0f);
}

/* The results of a fresh allocating graph: y1 [16*24], y2 [24*24]. */
static void reference(float *y1, float *y2) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20});
    struct shared s = shared_build(ctx);
    fill(s.x->data, 16 * 24, 1);
    fill(s.w->data, 24 * 24, 2);
    gml_tensor *outs[2] = {s.y1, s.y2};
    gml_graph *g = gml_build_graph(ctx, outs, 2);
    if (!g || gml_graph_compute(g, 1) != GML_OK) abort();
    memcpy(y1, s.y1->data, 16 * 24 * 4);
    memcpy(y2, s.y2->data, 24 * 24 * 4);
    gml_graph_free(g);
    gml_free(ctx);
}

struct job {
    gml_graph *g;
    const gml_tensor *x, *y;
    const float *want;
    size_t bytes;
    int iters, replan_every;
    int failures, mismatches;
    char err[256];
};

/* Plans (x planned: filled in this graph's place), computes, compares. */
static void *run_job(void *arg) {
    struct job *j = arg;
    for (int i = 0; i < j->iters; i++) {
        if (i % j->replan_every == 0) {
            gml_plan_options opt = {.no_inplace = (i / j->replan_every) % 2 == 1};
            if (gml_graph_plan(j->g, &opt) != GML_OK) {
                snprintf(j->err, sizeof j->err, "plan: %s", gml_graph_error(j->g));
                j->failures++;
                return NULL;
            }
            fill(gml_graph_data(j->g, j->x), 16 * 24, 1);
        }
        if (gml_graph_compute(j->g, 2) != GML_OK) {
            snprintf(j->err, sizeof j->err, "compute: %s", gml_graph_error(j->g));
            j->failures++;
            continue;
        }
        if (memcmp(gml_graph_data(j->g, j->y), j->want, j->bytes) != 0) j->mismatches++;
    }
    return NULL;
}

static void test_two_graphs_shared(void) {
    chk_case("two threads, two graphs sharing the tensors of one context");
    static float want1[16 * 24], want2[24 * 24];
    reference(want1, want2);
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true});
    struct shared s = shared_build(ctx);
    float *w = aligned_alloc(64, 24 * 24 * 4);
    fill(w, 24 * 24, 2);
    s.w->data = w; /* by hand: both graphs read it */
    gml_graph *g1 = gml_build_graph(ctx, &s.y1, 1), *g2 = gml_build_graph(ctx, &s.y2, 1);
    if (!CHECK(g1 && g2, "build: %s", gml_last_error(ctx))) return;
    const int iters = quick ? 20 : 2000;
    struct job j1 = {g1, s.x, s.y1, want1, sizeof want1, iters, 7, 0, 0, ""};
    struct job j2 = {g2, s.x, s.y2, want2, sizeof want2, iters, 11, 0, 0, ""};
    pthread_t t1, t2;
    pthread_create(&t1, NULL, run_job, &j1);
    pthread_create(&t2, NULL, run_job, &j2);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    CHECK(j1.failures == 0 && j2.failures == 0, "failures: %d (%s), %d (%s)", j1.failures, j1.err,
          j2.failures, j2.err);
    CHECK(j1.mismatches == 0 && j2.mismatches == 0,
          "of %d computes each, y1 differed from a fresh graph %d times, y2 %d", iters,
          j1.mismatches, j2.mismatches);
    CHECK(!s.x->data && !s.y1->data && !s.y2->data, "a plan wrote a header");
    gml_graph_free(g1);
    gml_graph_free(g2);
    gml_free(ctx);
    free(w);
}

/* ---- one graph, two threads ------------------------------------------------------ */

/* The callback checks the output inside the compute (where the compute owns
 * the graph), so no thread reads a result another compute is writing. */
struct one {
    const float *want;
    size_t bytes;
    int last;
    atomic_int bad, ok_checks;
};

static bool check_last(const gml_tensor *node, int index, void *user) {
    struct one *o = user;
    if (index == o->last) {
        if (memcmp(node->data, o->want, o->bytes) != 0) atomic_fetch_add(&o->bad, 1);
        else atomic_fetch_add(&o->ok_checks, 1);
    }
    return true;
}

struct one_job {
    gml_graph *g;
    int iters, failures;
    char err[256];
};

static void *run_one(void *arg) {
    struct one_job *j = arg;
    for (int i = 0; i < j->iters; i++)
        if (gml_graph_compute(j->g, 2) != GML_OK) {
            snprintf(j->err, sizeof j->err, "%s", gml_graph_error(j->g));
            j->failures++;
        }
    return NULL;
}

static void test_one_graph_two_threads(void) {
    chk_case("two threads computing one graph");
    static float want1[16 * 24], want2[24 * 24];
    reference(want1, want2);
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true});
    struct shared s = shared_build(ctx);
    gml_graph *g = gml_build_graph(ctx, &s.y2, 1);
    if (!CHECK(g && gml_graph_plan(g, NULL) == GML_OK, "build, plan")) return;
    fill(gml_graph_data(g, s.x), 16 * 24, 1);
    fill(gml_graph_data(g, s.w), 24 * 24, 2);
    struct one o = {.want = want2, .bytes = sizeof want2, .last = gml_graph_n_nodes(g) - 1};
    gml_graph_set_callback(g, check_last, &o);
    const int iters = quick ? 20 : 2000;
    struct one_job a = {g, iters, 0, ""}, b = {g, iters, 0, ""};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, run_one, &a);
    pthread_create(&tb, NULL, run_one, &b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK(a.failures == 0 && b.failures == 0, "failed computes: %d, %d ('%s', '%s')", a.failures,
          b.failures, a.err, b.err);
    CHECK(atomic_load(&o.bad) == 0 && atomic_load(&o.ok_checks) == 2 * iters,
          "%d of %d computes gave a wrong result, %d right", atomic_load(&o.bad), 2 * iters,
          atomic_load(&o.ok_checks));
    gml_graph_free(g);
    gml_free(ctx);
}

/* ---- computes started from node callbacks ---------------------------------------- */

struct reenter {
    gml_graph *g;
    gml_status compute_st, plan_st;
    char compute_msg[512], plan_msg[512];
    int calls;
};

static bool reenter_cb(const gml_tensor *node, int index, void *user) {
    (void)node;
    struct reenter *r = user;
    if (index == 0) {
        r->compute_st = gml_graph_compute(r->g, 2);
        snprintf(r->compute_msg, sizeof r->compute_msg, "%s", gml_graph_error(r->g));
        r->plan_st = gml_graph_plan(r->g, NULL);
        snprintf(r->plan_msg, sizeof r->plan_msg, "%s", gml_graph_error(r->g));
    }
    r->calls++;
    return true;
}

/* Thread B computes g2 and, in its first callback, waits until the main
 * thread, inside a callback of its own compute of g1, has tried to compute
 * g2. Both computes on 1 thread: their callbacks must not wait for the pool. */
static atomic_int b_inside, a_tried;

static bool b_cb(const gml_tensor *node, int index, void *user) {
    (void)node;
    (void)user;
    if (index == 0) {
        atomic_store(&b_inside, 1);
        while (!atomic_load(&a_tried)) nanosleep(&(struct timespec){.tv_nsec = 100000}, NULL);
    }
    return true;
}

struct b_job {
    gml_graph *g;
    gml_status st;
    char err[512];
};

static void *run_b(void *arg) {
    struct b_job *j = arg;
    j->st = gml_graph_compute(j->g, 1);
    snprintf(j->err, sizeof j->err, "%s", gml_graph_error(j->g)); /* B's own view */
    return NULL;
}

struct a_state {
    gml_graph *other;
    gml_status st;
    char err[512];
};

static bool a_cb(const gml_tensor *node, int index, void *user) {
    (void)node;
    struct a_state *a = user;
    if (index == 0) {
        while (!atomic_load(&b_inside)) nanosleep(&(struct timespec){.tv_nsec = 100000}, NULL);
        a->st = gml_graph_compute(a->other, 1);
        snprintf(a->err, sizeof a->err, "%s", gml_graph_error(a->other));
        atomic_store(&a_tried, 1);
    }
    return true;
}

static void test_callbacks(void) {
    static float want1[16 * 24], want2[24 * 24];
    reference(want1, want2);
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = true});
    struct shared s = shared_build(ctx);
    gml_graph *g1 = gml_build_graph(ctx, &s.y1, 1), *g2 = gml_build_graph(ctx, &s.y2, 1);
    if (!CHECK(g1 && g2, "build: %s", gml_last_error(ctx))) return;
    gml_graph *gs[2] = {g1, g2};
    for (int k = 0; k < 2; k++) {
        CHECK(gml_graph_plan(gs[k], NULL) == GML_OK, "plan");
        fill(gml_graph_data(gs[k], s.x), 16 * 24, 1);
        fill(gml_graph_data(gs[k], s.w), 24 * 24, 2);
    }

    chk_case("a callback computing and planning its own graph");
    struct reenter r = {.g = g1};
    gml_graph_set_callback(g1, reenter_cb, &r);
    CHECK(gml_graph_compute(g1, 2) == GML_OK, "outer compute: %s", gml_graph_error(g1));
    CHECK(r.calls == gml_graph_n_nodes(g1), "callback ran %d times", r.calls);
    CHECK(r.compute_st == GML_ERR_INVALID, "inner compute: status %d", (int)r.compute_st);
    CHECK_CONTAINS(r.compute_msg, "compute: the graph is being computed by this thread already");
    CHECK(r.plan_st == GML_ERR_INVALID, "inner plan: status %d", (int)r.plan_st);
    CHECK_CONTAINS(r.plan_msg, "plan: the graph is being computed by this thread already");
    CHECK(memcmp(gml_graph_data(g1, s.y1), want1, sizeof want1) == 0,
          "the outer compute's result, its plan kept");
    gml_graph_set_callback(g1, NULL, NULL);
    CHECK(gml_graph_compute(g1, 2) == GML_OK && gml_graph_error(g1)[0] == '\0',
          "the next compute clears the refused message: '%s'", gml_graph_error(g1));

    chk_case("a callback computing a graph another thread is computing");
    struct a_state a = {.other = g2};
    struct b_job b = {.g = g2};
    gml_graph_set_callback(g1, a_cb, &a);
    gml_graph_set_callback(g2, b_cb, NULL);
    pthread_t tb;
    pthread_create(&tb, NULL, run_b, &b);
    gml_status st = gml_graph_compute(g1, 1);
    pthread_join(tb, NULL);
    CHECK(st == GML_OK, "A's compute: %s", gml_graph_error(g1));
    CHECK(a.st == GML_ERR_INVALID, "A's compute of g2 from its callback: status %d", (int)a.st);
    CHECK_CONTAINS(a.err, "compute: graph is being computed by another thread");
    CHECK(b.st == GML_OK && b.err[0] == '\0', "B's compute of g2: status %d, its message '%s'",
          (int)b.st, b.err);
    CHECK(memcmp(gml_graph_data(g2, s.y2), want2, sizeof want2) == 0, "B's result");
    CHECK(gml_graph_error(g2)[0] != '\0', "the refused thread still sees its message");
    gml_graph_set_callback(g1, NULL, NULL);
    gml_graph_set_callback(g2, NULL, NULL);
    CHECK(gml_graph_compute(g2, 2) == GML_OK && gml_graph_error(g2)[0] == '\0',
          "after its own compute of g2 the main thread sees ''");
    gml_graph_free(g1);
    gml_graph_free(g2);
    gml_free(ctx);
}

int main(int argc, char **argv) {
    quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    test_two_graphs_shared();
    test_one_graph_two_threads();
    test_callbacks();
    return chk_summary();
}
