/* <ggmlite/mpi.h> given what a careless caller gives it (test_api_misuse
 * for the other libraries): every public function called with NULL for
 * each pointer argument returns its error value with a message naming the
 * function and the argument ("<function>: <arg> is NULL", in err where
 * the function takes one, and for the thread or on the context), or does
 * nothing; never crashes. The checks come before any MPI call, so this runs
 * as one process without MPI_Init (MPI_COMM_WORLD is only passed along).
 * Each case runs in a child process, so a crash fails that case. */
#define _POSIX_C_SOURCE 200809L /* fork, waitpid, strsignal */
#include "check.h"

#include <ggmlite/mpi.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static bool has(const char *msg, const char *piece) { return msg && strstr(msg, piece); }
/* the thread's message (a call with no live context to keep it) */
#define TLS_HAS(s) CHECK(has(gml_last_error(NULL), s), "thread: \"%s\"", gml_last_error(NULL))
/* the message in err and the thread's */
#define ERR_HAS(s)                                                       \
    do {                                                                 \
        CHECK(has(err, s), "err: \"%s\"", err);                          \
        TLS_HAS(s);                                                      \
    } while (0)
/* a builder's message on ctx */
#define CTX_HAS(ctx, s)                                                          \
    do {                                                                         \
        CHECK(has(gml_last_error(ctx), s), "ctx: \"%s\"", gml_last_error(ctx)); \
        gml_clear_error(ctx);                                                    \
    } while (0)

static void case_tp(void) {
    char err[256];
    CHECK(gml_tp_share_of(8, 8, 16, 2, 0, NULL, err, sizeof err) == GML_ERR_INVALID, "share_of");
    ERR_HAS("gml_tp_share_of: s is NULL");
    int64_t start = -1, len = -1;
    gml_tp_range(10, 2, 0, NULL, &len);
    TLS_HAS("gml_tp_range: start is NULL");
    gml_tp_range(10, 2, 0, &start, NULL);
    TLS_HAS("gml_tp_range: len is NULL");
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20});
    gml_tensor *x = gml_new_tensor(ctx, GML_F32, 3, (int64_t[]){1, 3, 8});
    gml_attn_config cfg = {.dims = {.d_model = 8, .n_heads = 2}};
    gml_attn_weights w = {0};
    gml_llama_config lc = {.n_heads = 2};
    gml_llama_weights lw = {0};
    gml_tp_share s = {0};
    CHECK(gml_tp_share_of(2, 2, 16, 1, 0, &s, err, sizeof err) == GML_OK, "a share: %s", err);
    CHECK(!gml_tp_attn(NULL, &cfg, &w, x, NULL, &s, true), "tp_attn ctx");
    TLS_HAS("gml_tp_attn: ctx is NULL");
    CHECK(!gml_tp_attn(ctx, NULL, &w, x, NULL, &s, true), "tp_attn cfg");
    CTX_HAS(ctx, "gml_tp_attn: cfg is NULL");
    CHECK(!gml_tp_attn(ctx, &cfg, NULL, x, NULL, &s, true), "tp_attn w");
    CTX_HAS(ctx, "gml_tp_attn: w is NULL");
    CHECK(!gml_tp_attn(ctx, &cfg, &w, x, NULL, NULL, true), "tp_attn s");
    CTX_HAS(ctx, "gml_tp_attn: s is NULL");
    CHECK(!gml_tp_llama_attn(NULL, &lc, &lw, x, NULL, &s, true), "tp_llama_attn ctx");
    TLS_HAS("gml_tp_llama_attn: ctx is NULL");
    CHECK(!gml_tp_llama_attn(ctx, NULL, &lw, x, NULL, &s, true), "tp_llama_attn cfg");
    CTX_HAS(ctx, "gml_tp_llama_attn: cfg is NULL");
    CHECK(!gml_tp_llama_attn(ctx, &lc, NULL, x, NULL, &s, true), "tp_llama_attn w");
    CTX_HAS(ctx, "gml_tp_llama_attn: w is NULL");
    CHECK(!gml_tp_llama_attn(ctx, &lc, &lw, x, NULL, NULL, true), "tp_llama_attn s");
    CTX_HAS(ctx, "gml_tp_llama_attn: s is NULL");
    CHECK(!gml_tp_llama_mlp(NULL, &lc, &lw, x, &s, true), "tp_llama_mlp ctx");
    TLS_HAS("gml_tp_llama_mlp: ctx is NULL");
    CHECK(!gml_tp_llama_mlp(ctx, NULL, &lw, x, &s, true), "tp_llama_mlp cfg");
    CTX_HAS(ctx, "gml_tp_llama_mlp: cfg is NULL");
    CHECK(!gml_tp_llama_mlp(ctx, &lc, NULL, x, &s, true), "tp_llama_mlp w");
    CTX_HAS(ctx, "gml_tp_llama_mlp: w is NULL");
    CHECK(!gml_tp_llama_mlp(ctx, &lc, &lw, x, NULL, true), "tp_llama_mlp s");
    CTX_HAS(ctx, "gml_tp_llama_mlp: s is NULL");
    gml_free(ctx);
}

static void case_collectives(void) {
    char err[256];
    CHECK(gml_mpi_sum_ordered(MPI_COMM_WORLD, NULL, 4, false, err, sizeof err) == GML_ERR_INVALID,
          "sum_ordered");
    ERR_HAS("gml_mpi_sum_ordered: buf is NULL");
    CHECK(gml_mpi_bcast_f32(MPI_COMM_WORLD, NULL, 4, 0, err, sizeof err) == GML_ERR_INVALID, "bcast");
    ERR_HAS("gml_mpi_bcast_f32: buf is NULL");
    /* gml_mpi_weights_agree: wctx NULL is "no tensors" (mpi.h), a collective */
    float recv[4];
    CHECK(gml_mpi_gather_f32(MPI_COMM_WORLD, NULL, 4, recv, 0, err, sizeof err) == GML_ERR_INVALID,
          "gather");
    ERR_HAS("gml_mpi_gather_f32: send is NULL");
    gml_attn_config cfg = {.dims = {.d_model = 8, .n_heads = 2}};
    gml_attn_weights w = {0};
    gml_llama_config lc = {.n_heads = 2};
    gml_llama_weights lw = {0};
    CHECK(!gml_cp_attn_create(MPI_COMM_WORLD, NULL, &w, GML_CP_CONTIGUOUS, 1, 4, 8, err, sizeof err),
          "cp_attn_create cfg");
    ERR_HAS("gml_cp_attn_create: cfg is NULL");
    CHECK(!gml_cp_attn_create(MPI_COMM_WORLD, &cfg, NULL, GML_CP_CONTIGUOUS, 1, 4, 8, err, sizeof err),
          "cp_attn_create w");
    ERR_HAS("gml_cp_attn_create: w is NULL");
    CHECK(!gml_cp_llama_create(MPI_COMM_WORLD, NULL, &lw, GML_CP_CONTIGUOUS, 1, 4, 8, err, sizeof err),
          "cp_llama_create cfg");
    ERR_HAS("gml_cp_llama_create: cfg is NULL");
    CHECK(!gml_cp_llama_create(MPI_COMM_WORLD, &lc, NULL, GML_CP_CONTIGUOUS, 1, 4, 8, err, sizeof err),
          "cp_llama_create w");
    ERR_HAS("gml_cp_llama_create: w is NULL");
    int64_t t0[2], n[2];
    CHECK(gml_cp_rows_of(8, 2, 0, GML_CP_ZIGZAG, NULL, n) == 0, "rows_of t0");
    TLS_HAS("gml_cp_rows_of: t0 is NULL");
    CHECK(gml_cp_rows_of(8, 2, 0, GML_CP_CONTIGUOUS, t0, NULL) == 0, "rows_of n");
    TLS_HAS("gml_cp_rows_of: n is NULL");
    CHECK(gml_cp_rows(NULL, t0, n) == 0, "cp_rows");
    TLS_HAS("gml_cp_rows: cp is NULL");
    CHECK(!gml_cp_input(NULL), "cp_input");
    TLS_HAS("gml_cp_input: cp is NULL");
    CHECK(!gml_cp_output(NULL), "cp_output");
    TLS_HAS("gml_cp_output: cp is NULL");
    CHECK(gml_cp_run(NULL, 1, NULL, err, sizeof err) == GML_ERR_INVALID, "cp_run");
    ERR_HAS("gml_cp_run: cp is NULL");
    gml_cp_free(NULL);
}

static void case_shard(void) {
    char err[256];
    CHECK(!gml_kv_shard_new((gml_kv_shard_params){0}, NULL, 64), "shard_new(bad, err NULL)");
    gml_kv_shard_free(NULL);
    CHECK(gml_kv_shard_get_params(NULL).capacity == 0, "get_params");
    TLS_HAS("gml_kv_shard_get_params: s is NULL");
    CHECK(!gml_kv_shard_k(NULL), "k");
    TLS_HAS("gml_kv_shard_k: s is NULL");
    CHECK(!gml_kv_shard_v(NULL), "v");
    TLS_HAS("gml_kv_shard_v: s is NULL");
    CHECK(gml_kv_shard_len(NULL) == 0, "len");
    TLS_HAS("gml_kv_shard_len: s is NULL");
    CHECK(gml_kv_shard_first(NULL) == 0, "first");
    TLS_HAS("gml_kv_shard_first: s is NULL");
    CHECK(gml_kv_shard_held(NULL) == 0, "held");
    TLS_HAS("gml_kv_shard_held: s is NULL");
    CHECK(gml_kv_shard_owner(NULL, 0) == -1, "owner");
    TLS_HAS("gml_kv_shard_owner: s is NULL");
    CHECK(gml_kv_shard_owned(NULL, 1) == 0, "owned");
    TLS_HAS("gml_kv_shard_owned: s is NULL");
    CHECK(gml_kv_shard_bytes(NULL) == 0, "bytes");
    TLS_HAS("gml_kv_shard_bytes: s is NULL");
    CHECK(!gml_kv_shard_truncate(NULL, 0), "truncate");
    TLS_HAS("gml_kv_shard_truncate: s is NULL");
    gml_kv_shard *sh = gml_kv_shard_new((gml_kv_shard_params){.batch = 1, .n_kv_heads = 2, .d_k = 4,
                                                              .capacity = 4, .rank = 0, .n_ranks = 1},
                                        err, sizeof err);
    CHECK(sh != NULL, "a shard: %s", err);
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20});
    gml_tensor *x = gml_new_tensor(ctx, GML_F32, 3, (int64_t[]){1, 1, 8});
    CHECK(!gml_kv_shard_step_new(NULL, sh, 1, 1).q_pos, "step_new ctx");
    TLS_HAS("gml_kv_shard_step_new: ctx is NULL");
    CHECK(!gml_kv_shard_step_new(ctx, NULL, 1, 1).q_pos, "step_new s");
    CTX_HAS(ctx, "gml_kv_shard_step_new: s is NULL");
    gml_kv_shard_step st = gml_kv_shard_step_new(ctx, sh, 1, 1);
    gml_attn_config cfg = {.dims = {.d_model = 8, .n_heads = 2}};
    gml_attn_weights w = {0};
    gml_llama_config lc = {.n_heads = 2};
    gml_llama_weights lw = {0};
    CHECK(!gml_shard_attn_partial(NULL, &cfg, &w, x, x, &st), "attn_partial ctx");
    TLS_HAS("gml_shard_attn_partial: ctx is NULL");
    CHECK(!gml_shard_attn_partial(ctx, NULL, &w, x, x, &st), "attn_partial cfg");
    CTX_HAS(ctx, "gml_shard_attn_partial: cfg is NULL");
    CHECK(!gml_shard_attn_partial(ctx, &cfg, NULL, x, x, &st), "attn_partial w");
    CTX_HAS(ctx, "gml_shard_attn_partial: w is NULL");
    CHECK(!gml_shard_attn_partial(ctx, &cfg, &w, x, x, NULL), "attn_partial st");
    CTX_HAS(ctx, "gml_shard_attn_partial: st is NULL");
    CHECK(!gml_shard_attn_out(NULL, &cfg, &w, x, 1), "attn_out ctx");
    TLS_HAS("gml_shard_attn_out: ctx is NULL");
    CHECK(!gml_shard_attn_out(ctx, NULL, &w, x, 1), "attn_out cfg");
    CTX_HAS(ctx, "gml_shard_attn_out: cfg is NULL");
    CHECK(!gml_shard_attn_out(ctx, &cfg, NULL, x, 1), "attn_out w");
    CTX_HAS(ctx, "gml_shard_attn_out: w is NULL");
    CHECK(!gml_shard_llama_partial(NULL, &lc, &lw, x, x, &st), "llama_partial ctx");
    TLS_HAS("gml_shard_llama_partial: ctx is NULL");
    CHECK(!gml_shard_llama_partial(ctx, NULL, &lw, x, x, &st), "llama_partial cfg");
    CTX_HAS(ctx, "gml_shard_llama_partial: cfg is NULL");
    CHECK(!gml_shard_llama_partial(ctx, &lc, NULL, x, x, &st), "llama_partial w");
    CTX_HAS(ctx, "gml_shard_llama_partial: w is NULL");
    CHECK(!gml_shard_llama_partial(ctx, &lc, &lw, x, x, NULL), "llama_partial step");
    CTX_HAS(ctx, "gml_shard_llama_partial: step is NULL");
    CHECK(!gml_shard_llama_out(NULL, &lc, &lw, x, 1, x), "llama_out ctx");
    TLS_HAS("gml_shard_llama_out: ctx is NULL");
    CHECK(!gml_shard_llama_out(ctx, NULL, &lw, x, 1, x), "llama_out cfg");
    CTX_HAS(ctx, "gml_shard_llama_out: cfg is NULL");
    CHECK(!gml_shard_llama_out(ctx, &lc, NULL, x, 1, x), "llama_out w");
    CTX_HAS(ctx, "gml_shard_llama_out: w is NULL");
    gml_tensor *y = gml_neg(ctx, x);
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    CHECK(gml_kv_shard_step_compute(NULL, g, 1, 1, err, sizeof err) == GML_ERR_INVALID, "step_compute st");
    ERR_HAS("gml_kv_shard_step_compute: st is NULL");
    CHECK(gml_kv_shard_step_compute(&st, NULL, 1, 1, err, sizeof err) == GML_ERR_INVALID, "step_compute g");
    ERR_HAS("gml_kv_shard_step_compute: g is NULL");
    gml_graph_free(g);
    gml_free(ctx);
    gml_kv_shard_free(sh);
}

static const struct {
    const char *name;
    void (*fn)(void);
} CASES[] = {{"tp", case_tp}, {"collectives", case_collectives}, {"shard", case_shard}};

int main(int argc, char **argv) {
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        if (argc > 1 && strcmp(argv[1], CASES[i].name) != 0) continue;
        chk_case("%s", CASES[i].name);
        if (argc > 1) {
            CASES[i].fn();
            continue;
        }
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid == 0) {
            chk_state.failures = 0;
            CASES[i].fn();
            fflush(stdout);
            _exit(chk_state.failures ? 1 : 0);
        }
        int status = 0;
        if (!CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork/wait")) continue;
        if (WIFSIGNALED(status))
            CHECK(false, "crashed (signal %d: %s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
        else
            CHECK(WEXITSTATUS(status) == 0, "failed (exit %d; see above)", WEXITSTATUS(status));
    }
    return chk_summary();
}
