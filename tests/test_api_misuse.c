/* The C API given what a careless caller gives it: every public function of
 * <ggmlite/ggmlite.h> (types.h, tensor.h, registry.h, compute.h) and of
 * <ggmlite/hashindex.h> called with NULL for each pointer argument, with a
 * context, tensor or graph whose context was freed, with a tensor of another
 * context, and gml_init with sizes whose rounding overflows. Each must return
 * its error value (NULL, false, 0, -1, an error status) with a message
 * naming the function and the argument (gml_last_error of the context, or,
 * with no live context to keep it, gml_last_error(NULL) / gml_graph_error(NULL)),
 * or do nothing: never crash, never read or write freed memory (run under
 * ASan/UBSan as well). Each case runs in a child process, so a crash fails
 * that case and the others still run.
 *
 * The same for the other libraries' public functions: <ggmlite/io.h>
 * (io_* cases) and <ggmlite/attention.h>, <ggmlite/kv_cache.h>,
 * <ggmlite/layers.h> (models_* cases), each given NULL for each pointer
 * argument; the message goes into err where the function takes one, and
 * for the thread. <ggmlite/mpi.h>: test_mpi_misuse (label mpi). */
#define _POSIX_C_SOURCE 200809L /* fork, waitpid, strsignal */
#include "check.h"

#include <ggmlite/attention.h>
#include <ggmlite/hashindex.h>
#include <ggmlite/io.h>
#include <ggmlite/kv_cache.h>
#include <ggmlite/layers.h>

#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------ */

/* msg contains every piece (NULL-terminated list). */
static bool has_all(const char *msg, const char *const *pieces) {
    if (!msg) return false;
    for (const char *const *p = pieces; *p; p++)
        if (!strstr(msg, *p)) return false;
    return true;
}
#define MSG_HAS(msg, ...) has_all((msg), (const char *[]){__VA_ARGS__, NULL})
/* the message of a call that had no context to keep it */
#define TLS_HAS(...) MSG_HAS(gml_last_error(NULL), __VA_ARGS__)

static gml_context *new_ctx(bool no_alloc) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20, .no_alloc = no_alloc});
    if (!ctx) {
        fprintf(stderr, "gml_init(1 MiB) failed\n");
        exit(2);
    }
    return ctx;
}

static gml_tensor *f32(gml_context *ctx, const char *name, int64_t n0, int64_t n1) {
    return gml_set_name(gml_new_tensor_2d(ctx, GML_F32, n0, n1), name);
}

static void fill(gml_tensor *t, float v) {
    float *d = t->data;
    for (int64_t i = 0; i < gml_nelements(t); i++) d[i] = v;
}

static bool cb_stop(const gml_tensor *node, int index, void *user) {
    (void)node, (void)index, (void)user;
    return false;
}

/* ---- gml_init sizes ------------------------------------------------------- */

static void case_init_overflow(void) {
    const size_t sizes[] = {SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 62, SIZE_MAX - 63, SIZE_MAX - 64,
                            SIZE_MAX - ((size_t)2 << 20) + 1, SIZE_MAX / 2 + 1};
    for (int no_alloc = 0; no_alloc < 2; no_alloc++)
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
            gml_context *ctx = gml_init((gml_init_params){.mem_size = sizes[i], .no_alloc = no_alloc});
            char want[32];
            snprintf(want, sizeof want, "%zu", sizes[i]);
            CHECK(ctx == NULL, "gml_init(mem_size %zu, no_alloc %d) must be refused", sizes[i], no_alloc);
            CHECK(TLS_HAS("gml_init", want), "gml_init's message names the size %s: \"%s\"", want,
                  gml_last_error(NULL));
            if (ctx) { /* what the overflow did: a big tensor out of a small arena */
                gml_tensor *t = gml_new_tensor_1d(ctx, GML_F32, (int64_t)16 << 20);
                if (t && t->data) memset(t->data, 1, gml_nbytes(t));
                gml_free(ctx);
            }
        }
    /* a caller's buffer whose end would wrap past the address space */
    static char buf[4096];
    gml_context *ctx = gml_init((gml_init_params){.mem_size = SIZE_MAX - 8, .mem_buffer = buf});
    CHECK(ctx == NULL, "gml_init with a caller buffer of SIZE_MAX - 8 bytes must be refused");
    CHECK(TLS_HAS("gml_init"), "message: \"%s\"", gml_last_error(NULL));
    if (ctx) gml_free(ctx);
    /* sizes that fit still work, with and without data */
    for (int no_alloc = 0; no_alloc < 2; no_alloc++) {
        ctx = gml_init((gml_init_params){.mem_size = 4096 + 64, .no_alloc = no_alloc});
        CHECK(ctx != NULL, "a small context");
        gml_tensor *t = gml_new_tensor_1d(ctx, GML_F32, 16);
        CHECK(t && (no_alloc ? !t->data : t->data != NULL), "a tensor in it");
        gml_free(ctx);
    }
}

/* ---- NULL for each pointer argument ---------------------------------------- */

static void case_null_types(void) {
    gml_type t = GML_F32;
    CHECK(!gml_type_from_name(NULL, &t), "gml_type_from_name(NULL)");
    CHECK(!gml_type_from_name("f32", NULL), "gml_type_from_name(name, NULL)");
    float x[32] = {0};
    gml_block_q8_0 y[1];
    gml_quantize_row_q8_0(NULL, y, 32);
    gml_quantize_row_q8_0(x, NULL, 32);
    gml_dequantize_row_q8_0(NULL, x, 32);
    gml_dequantize_row_q8_0(y, NULL, 32);
    CHECK(TLS_HAS("gml_dequantize_row_q8_0", "y"), "message: \"%s\"", gml_last_error(NULL));
    CHECK(gml_version() != NULL, "version");
}

static void case_null_context_calls(void) {
    gml_free(NULL);
    CHECK(gml_last_error(NULL) != NULL, "gml_last_error(NULL) is a string");
    gml_clear_error(NULL);
    CHECK(gml_last_error(NULL)[0] == '\0', "gml_clear_error(NULL) clears the thread's message");
    CHECK(gml_set_error(NULL, "no context %d", 7) == NULL, "gml_set_error(NULL)");
    CHECK(strcmp(gml_last_error(NULL), "no context 7") == 0, "gml_set_error(NULL, ...) is kept for "
          "the thread: \"%s\"", gml_last_error(NULL));
    gml_context *ctx = new_ctx(false);
    const char *volatile no_fmt = NULL;
    CHECK(gml_set_error(ctx, no_fmt, 1) == NULL, "gml_set_error(ctx, NULL)");
    CHECK(MSG_HAS(gml_last_error(ctx), "gml_set_error", "fmt"), "message: \"%s\"", gml_last_error(ctx));
    gml_clear_error(ctx);
    CHECK(gml_used_mem(NULL) == 0, "gml_used_mem(NULL)");
    CHECK(TLS_HAS("gml_used_mem", "ctx"), "message: \"%s\"", gml_last_error(NULL));
    CHECK(gml_mem_required(NULL) == 0, "gml_mem_required(NULL)");
    CHECK(TLS_HAS("gml_mem_required", "ctx"), "message: \"%s\"", gml_last_error(NULL));
    CHECK(!gml_get_no_alloc(NULL), "gml_get_no_alloc(NULL)");
    const int64_t ne[2] = {2, 3};
    CHECK(!gml_new_tensor(NULL, GML_F32, 2, ne), "gml_new_tensor(NULL ctx)");
    CHECK(TLS_HAS("gml_new_tensor", "ctx"), "message: \"%s\"", gml_last_error(NULL));
    CHECK(!gml_new_tensor(ctx, GML_F32, 2, NULL), "gml_new_tensor(NULL ne)");
    CHECK(MSG_HAS(gml_last_error(ctx), "gml_new_tensor", "ne"), "message: \"%s\"", gml_last_error(ctx));
    gml_clear_error(ctx);
    CHECK(!gml_new_tensor_1d(NULL, GML_F32, 2), "1d");
    CHECK(!gml_new_tensor_2d(NULL, GML_F32, 2, 2), "2d");
    CHECK(!gml_new_tensor_3d(NULL, GML_F32, 2, 2, 2), "3d");
    CHECK(!gml_new_tensor_4d(NULL, GML_F32, 2, 2, 2, 2), "4d");
    CHECK(TLS_HAS("ctx"), "message: \"%s\"", gml_last_error(NULL));
    gml_tensor *x = f32(ctx, "x", 2, 3);
    CHECK(gml_set_name(NULL, "y") == NULL, "gml_set_name(NULL)");
    CHECK(gml_set_name(x, NULL) == x && strcmp(x->name, "x") == 0, "gml_set_name(x, NULL) keeps the name");
    CHECK(strcmp(gml_get_name(NULL), "(null)") == 0, "gml_get_name(NULL)");
    CHECK(!gml_get_tensor(NULL, "x"), "gml_get_tensor(NULL)");
    CHECK(!gml_get_tensor(ctx, NULL), "gml_get_tensor(ctx, NULL)");
    CHECK(MSG_HAS(gml_last_error(ctx), "gml_get_tensor", "name"), "message: \"%s\"", gml_last_error(ctx));
    gml_clear_error(ctx);
    CHECK(!gml_get_first_tensor(NULL), "gml_get_first_tensor(NULL)");
    CHECK(!gml_get_next_tensor(ctx, NULL), "gml_get_next_tensor(ctx, NULL)");
    CHECK(!gml_get_next_tensor(NULL, x), "gml_get_next_tensor(NULL, x)");
    gml_set_flags(NULL, GML_FLAG_INPUT);
    CHECK(gml_nelements(NULL) == 0, "gml_nelements(NULL)");
    CHECK(TLS_HAS("gml_nelements", "t"), "message: \"%s\"", gml_last_error(NULL));
    CHECK(gml_nbytes(NULL) == 0, "gml_nbytes(NULL)");
    CHECK(gml_dim(NULL, 0) == 0, "gml_dim(NULL)");
    CHECK(TLS_HAS("gml_dim", "t"), "message: \"%s\"", gml_last_error(NULL));
    CHECK(!gml_is_contiguous(NULL), "gml_is_contiguous(NULL)");
    CHECK(!gml_is_view(NULL), "gml_is_view(NULL)");
    CHECK(!gml_same_shape(NULL, x) && !gml_same_shape(x, NULL), "gml_same_shape(NULL)");
    char buf[GML_SHAPE_MAX];
    CHECK(strcmp(gml_format_shape(NULL, buf, sizeof buf), "(null)") == 0, "gml_format_shape(NULL)");
    CHECK(gml_format_shape(x, NULL, 16) == NULL, "gml_format_shape(x, NULL buf)");
    const int64_t idx[2] = {0, 0};
    CHECK(isnan(gml_get_f32(NULL, idx)) && isnan(gml_get_f32(x, NULL)), "gml_get_f32");
    CHECK(!gml_set_f32(NULL, idx, 1) && !gml_set_f32(x, NULL, 1), "gml_set_f32");
    CHECK(gml_get_i32(NULL, idx) == INT32_MIN, "gml_get_i32");
    CHECK(!gml_set_i32(NULL, idx, 1), "gml_set_i32");
    CHECK(strcmp(gml_last_error(ctx), "") == 0, "no message on ctx: \"%s\"", gml_last_error(ctx));
    gml_free(ctx);
}

/* Every builder: a NULL context (the message kept for the thread), then each
 * required tensor NULL in a fresh context (the message on it names the
 * function and the argument). */
typedef gml_tensor *(*build_fn)(gml_context *ctx, gml_tensor *const *a);
struct builder {
    const char *fn;    /* the public name */
    int n;             /* required tensors */
    const char *args;  /* their names, space-separated */
    build_fn build;
};

static gml_tensor *b_view(gml_context *ctx, gml_tensor *const *a) {
    return gml_view(ctx, a[0], 1, (const int64_t[]){2}, (const size_t[]){4}, 0);
}
static gml_tensor *b_reshape(gml_context *ctx, gml_tensor *const *a) {
    return gml_reshape(ctx, a[0], 1, (const int64_t[]){6});
}
static gml_tensor *b_permute(gml_context *ctx, gml_tensor *const *a) {
    return gml_permute(ctx, a[0], (const int[]){1, 0});
}
static gml_tensor *b_transpose(gml_context *ctx, gml_tensor *const *a) { return gml_transpose(ctx, a[0], 0, 1); }
static gml_tensor *b_slice(gml_context *ctx, gml_tensor *const *a) { return gml_slice(ctx, a[0], 0, 0, 1); }
static gml_tensor *b_after(gml_context *ctx, gml_tensor *const *a) { return gml_after(ctx, a[0], a[1]); }
static gml_tensor *b_cont(gml_context *ctx, gml_tensor *const *a) { return gml_cont(ctx, a[0]); }
static gml_tensor *b_cpy(gml_context *ctx, gml_tensor *const *a) { return gml_cpy(ctx, a[0], a[1]); }
static gml_tensor *b_concat(gml_context *ctx, gml_tensor *const *a) { return gml_concat(ctx, a[0], a[1], 0); }
static gml_tensor *b_matmul(gml_context *ctx, gml_tensor *const *a) { return gml_matmul(ctx, a[0], a[1]); }
static gml_tensor *b_linear(gml_context *ctx, gml_tensor *const *a) { return gml_linear(ctx, a[0], a[1], NULL); }
static gml_tensor *b_add(gml_context *ctx, gml_tensor *const *a) { return gml_add(ctx, a[0], a[1]); }
static gml_tensor *b_mul(gml_context *ctx, gml_tensor *const *a) { return gml_mul(ctx, a[0], a[1]); }
static gml_tensor *b_sub(gml_context *ctx, gml_tensor *const *a) { return gml_sub(ctx, a[0], a[1]); }
static gml_tensor *b_div(gml_context *ctx, gml_tensor *const *a) { return gml_div(ctx, a[0], a[1]); }
static gml_tensor *b_scale(gml_context *ctx, gml_tensor *const *a) { return gml_scale(ctx, a[0], 2); }
static gml_tensor *b_neg(gml_context *ctx, gml_tensor *const *a) { return gml_neg(ctx, a[0]); }
static gml_tensor *b_exp(gml_context *ctx, gml_tensor *const *a) { return gml_exp(ctx, a[0]); }
static gml_tensor *b_tanh(gml_context *ctx, gml_tensor *const *a) { return gml_tanh(ctx, a[0]); }
static gml_tensor *b_sigmoid(gml_context *ctx, gml_tensor *const *a) { return gml_sigmoid(ctx, a[0]); }
static gml_tensor *b_silu(gml_context *ctx, gml_tensor *const *a) { return gml_silu(ctx, a[0]); }
static gml_tensor *b_gelu(gml_context *ctx, gml_tensor *const *a) { return gml_gelu(ctx, a[0]); }
static gml_tensor *b_gelu_tanh(gml_context *ctx, gml_tensor *const *a) { return gml_gelu_tanh(ctx, a[0]); }
static gml_tensor *b_softmax(gml_context *ctx, gml_tensor *const *a) { return gml_softmax(ctx, a[0], NULL, 1, false); }
static gml_tensor *b_softmax_ext(gml_context *ctx, gml_tensor *const *a) { return gml_softmax_ext(ctx, a[0], 1, NULL); }
static gml_tensor *b_sum(gml_context *ctx, gml_tensor *const *a) { return gml_sum(ctx, a[0]); }
static gml_tensor *b_mean(gml_context *ctx, gml_tensor *const *a) { return gml_mean(ctx, a[0]); }
static gml_tensor *b_max(gml_context *ctx, gml_tensor *const *a) { return gml_max(ctx, a[0]); }
static gml_tensor *b_rms_norm(gml_context *ctx, gml_tensor *const *a) { return gml_rms_norm(ctx, a[0], NULL, 1e-6f); }
static gml_tensor *b_layer_norm(gml_context *ctx, gml_tensor *const *a) { return gml_layer_norm(ctx, a[0], NULL, NULL, 1e-5f); }
static gml_tensor *b_repeat(gml_context *ctx, gml_tensor *const *a) { return gml_repeat_interleave(ctx, a[0], 2, 0); }
static gml_tensor *b_get_rows(gml_context *ctx, gml_tensor *const *a) { return gml_get_rows(ctx, a[0], a[1]); }
static gml_tensor *b_set_rows(gml_context *ctx, gml_tensor *const *a) { return gml_set_rows(ctx, a[0], a[1], a[2]); }
static gml_tensor *b_flash(gml_context *ctx, gml_tensor *const *a) { return gml_flash_attn(ctx, a[0], a[1], a[2], NULL, NULL, 1, false); }
static gml_tensor *b_flash_ext(gml_context *ctx, gml_tensor *const *a) { return gml_flash_attn_ext(ctx, a[0], a[1], a[2], 1, NULL); }
static gml_tensor *b_flash_partial(gml_context *ctx, gml_tensor *const *a) {
    return gml_flash_attn_partial(ctx, a[0], a[1], a[2], 1, NULL, 0);
}
static gml_tensor *b_merge(gml_context *ctx, gml_tensor *const *a) { return gml_attn_partial_merge(ctx, a[0], a[1]); }
static gml_tensor *b_finish(gml_context *ctx, gml_tensor *const *a) { return gml_attn_partial_finish(ctx, a[0], NULL); }
static gml_tensor *b_valid_len_mask(gml_context *ctx, gml_tensor *const *a) { return gml_valid_len_mask(ctx, a[0], 4); }
static gml_tensor *b_relpos(gml_context *ctx, gml_tensor *const *a) { (void)a; return gml_relpos_index(ctx, 2, 2, 1); }
static gml_tensor *b_arange(gml_context *ctx, gml_tensor *const *a) { (void)a; return gml_arange(ctx, 4, 0); }
static gml_tensor *b_rope(gml_context *ctx, gml_tensor *const *a) { return gml_rope(ctx, a[0], a[1], -2, 0, 10000, 1, false); }
static gml_tensor *b_form(gml_context *ctx, gml_tensor *const *a) {
    gml_arg args[GML_MAX_ARGS] = {{.given = true, .t = a[0]}, {.given = true, .t = a[1]}};
    return gml_form_build(ctx, gml_form_find("matmul"), args);
}

static const struct builder BUILDERS[] = {
    {"gml_view", 1, "a", b_view},
    {"gml_reshape", 1, "a", b_reshape},
    {"gml_permute", 1, "a", b_permute},
    {"gml_transpose", 1, "a", b_transpose},
    {"gml_slice", 1, "x", b_slice},
    {"gml_after", 2, "t dep", b_after},
    {"gml_cont", 1, "a", b_cont},
    {"gml_cpy", 2, "a dst", b_cpy},
    {"gml_concat", 2, "a b", b_concat},
    {"gml_matmul", 2, "a b", b_matmul},
    {"gml_linear", 2, "x w", b_linear},
    {"gml_add", 2, "a b", b_add},
    {"gml_mul", 2, "a b", b_mul},
    {"gml_sub", 2, "a b", b_sub},
    {"gml_div", 2, "a b", b_div},
    {"gml_scale", 1, "a", b_scale},
    {"gml_neg", 1, "x", b_neg},
    {"gml_exp", 1, "x", b_exp},
    {"gml_tanh", 1, "x", b_tanh},
    {"gml_sigmoid", 1, "x", b_sigmoid},
    {"gml_silu", 1, "x", b_silu},
    {"gml_gelu", 1, "x", b_gelu},
    {"gml_gelu_tanh", 1, "x", b_gelu_tanh},
    {"gml_softmax", 1, "x", b_softmax},
    {"gml_softmax_ext", 1, "x", b_softmax_ext},
    {"gml_sum", 1, "x", b_sum},
    {"gml_mean", 1, "x", b_mean},
    {"gml_max", 1, "x", b_max},
    {"gml_rms_norm", 1, "x", b_rms_norm},
    {"gml_layer_norm", 1, "x", b_layer_norm},
    {"gml_repeat_interleave", 1, "x", b_repeat},
    {"gml_get_rows", 2, "table idx", b_get_rows},
    {"gml_set_rows", 3, "dst src idx", b_set_rows},
    {"gml_flash_attn", 3, "q k v", b_flash},
    {"gml_flash_attn_ext", 3, "q k v", b_flash_ext},
    {"gml_flash_attn_partial", 3, "q k v", b_flash_partial},
    {"gml_attn_partial_merge", 2, "a b", b_merge},
    {"gml_attn_partial_finish", 1, "p", b_finish},
    {"gml_valid_len_mask", 1, "lens", b_valid_len_mask},
    {"gml_relpos_index", 0, "", b_relpos},
    {"gml_arange", 0, "", b_arange},
    {"gml_rope", 2, "x pos", b_rope},
    {"gml_form_build", 2, "a b", b_form},
};
#define N_BUILDERS (int)(sizeof BUILDERS / sizeof *BUILDERS)

/* The i-th space-separated word of s into w. */
static void word(const char *s, int i, char *w, size_t size) {
    while (i-- > 0 && (s = strchr(s, ' '))) s++;
    size_t n = s ? strcspn(s, " ") : 0;
    snprintf(w, size, "%.*s", (int)(n < size ? n : size - 1), s ? s : "");
}

static void case_null_builders(void) {
    for (int k = 0; k < N_BUILDERS; k++) {
        const struct builder *b = &BUILDERS[k];
        gml_context *ctx = new_ctx(true);
        gml_tensor *t[3] = {f32(ctx, "t0", 2, 4), f32(ctx, "t1", 2, 4), f32(ctx, "t2", 2, 4)};
        gml_clear_error(NULL);
        CHECK(b->build(NULL, t) == NULL, "%s with a NULL context", b->fn);
        CHECK(TLS_HAS(b->fn, "ctx"), "%s(NULL, ...): \"%s\"", b->fn, gml_last_error(NULL));
        for (int i = 0; i < b->n; i++) {
            gml_clear_error(ctx);
            gml_tensor *u[3] = {t[0], t[1], t[2]};
            u[i] = NULL;
            char arg[32];
            word(b->args, i, arg, sizeof arg);
            CHECK(b->build(ctx, u) == NULL, "%s with %s NULL", b->fn, arg);
            CHECK(MSG_HAS(gml_last_error(ctx), b->fn, arg), "%s, %s NULL: \"%s\"", b->fn, arg,
                  gml_last_error(ctx));
            /* the first message is kept */
            gml_set_error(ctx, "first");
            CHECK(b->build(ctx, u) == NULL && strcmp(gml_last_error(ctx), "first") == 0,
                  "%s keeps the first message: \"%s\"", b->fn, gml_last_error(ctx));
        }
        gml_free(ctx);
    }
    /* the pointer arguments that are not tensors */
    gml_context *ctx = new_ctx(true);
    gml_tensor *x = f32(ctx, "x", 2, 3);
    CHECK(!gml_view(ctx, x, 1, NULL, (const size_t[]){4}, 0), "view, ne NULL");
    CHECK(MSG_HAS(gml_last_error(ctx), "gml_view", "ne"), "\"%s\"", gml_last_error(ctx));
    gml_clear_error(ctx);
    CHECK(!gml_view(ctx, x, 1, (const int64_t[]){2}, NULL, 0), "view, nb NULL");
    CHECK(MSG_HAS(gml_last_error(ctx), "gml_view", "nb"), "\"%s\"", gml_last_error(ctx));
    gml_clear_error(ctx);
    CHECK(!gml_reshape(ctx, x, 1, NULL), "reshape, ne NULL");
    CHECK(MSG_HAS(gml_last_error(ctx), "gml_reshape", "ne"), "\"%s\"", gml_last_error(ctx));
    gml_clear_error(ctx);
    CHECK(!gml_permute(ctx, x, NULL), "permute, perm NULL");
    CHECK(MSG_HAS(gml_last_error(ctx), "gml_permute", "perm"), "\"%s\"", gml_last_error(ctx));
    gml_clear_error(ctx);
    const gml_op_form *add = gml_form_find("add");
    CHECK(!gml_form_build(ctx, NULL, (gml_arg[GML_MAX_ARGS]){{0}}), "form_build, f NULL");
    CHECK(MSG_HAS(gml_last_error(ctx), "gml_form_build", "f"), "\"%s\"", gml_last_error(ctx));
    gml_clear_error(ctx);
    CHECK(!gml_form_build(ctx, add, NULL), "form_build, args NULL");
    CHECK(MSG_HAS(gml_last_error(ctx), "gml_form_build", "args"), "\"%s\"", gml_last_error(ctx));
    gml_clear_error(ctx);
    /* optional inputs left out are fine */
    CHECK(gml_softmax_ext(ctx, x, 1, NULL) != NULL, "softmax_ext, opts NULL: \"%s\"", gml_last_error(ctx));
    CHECK(gml_linear(ctx, x, f32(ctx, "w", 4, 3), NULL) != NULL, "linear, bias NULL: \"%s\"",
          gml_last_error(ctx));
    gml_free(ctx);
}

static void case_null_registry(void) {
    const gml_op_form *add = gml_form_find("add");
    CHECK(add != NULL, "the add form");
    CHECK(gml_enum_index(NULL, "x", 1) == -1, "gml_enum_index(NULL spec)");
    CHECK(gml_enum_index(gml_form_arg(add, 0), NULL, 1) == -1, "gml_enum_index(NULL word)");
    CHECK(gml_form_find(NULL) == NULL, "gml_form_find(NULL)");
    CHECK(TLS_HAS("gml_form_find", "name"), "\"%s\"", gml_last_error(NULL));
    CHECK(gml_form_name(NULL) == NULL, "gml_form_name(NULL)");
    CHECK(gml_form_op(NULL) == GML_OP_NONE, "gml_form_op(NULL)");
    CHECK(gml_form_n_args(NULL) == 0, "gml_form_n_args(NULL)");
    CHECK(gml_form_arg(NULL, 0) == NULL, "gml_form_arg(NULL)");
    CHECK(gml_form_doc_args(NULL) == NULL, "gml_form_doc_args(NULL)");
    CHECK(gml_form_doc_result(NULL) == NULL, "gml_form_doc_result(NULL)");
    gml_arg args[GML_MAX_ARGS];
    CHECK(!gml_form_get_args(NULL, args), "gml_form_get_args(NULL)");
    gml_context *ctx = new_ctx(true);
    gml_tensor *x = f32(ctx, "x", 2, 3), *y = gml_add(ctx, x, x);
    CHECK(!gml_form_get_args(y, NULL), "gml_form_get_args(node, NULL)");
    char buf[64];
    CHECK(gml_format_node(NULL, NULL, NULL, buf, sizeof buf) == -1, "gml_format_node(NULL)");
    CHECK(gml_format_node(y, NULL, NULL, NULL, 16) == -1, "gml_format_node(y, buf NULL, 16)");
    CHECK(gml_format_node(y, NULL, NULL, NULL, 0) > 0, "gml_format_node(y, NULL, 0) measures");
    gml_free(ctx);
}

static void case_null_graphs(void) {
    gml_context *ctx = new_ctx(false);
    gml_tensor *x = f32(ctx, "x", 2, 3), *y = gml_add(ctx, x, x);
    fill(x, 1);
    CHECK(!gml_build_graph(NULL, &y, 1), "gml_build_graph(NULL ctx)");
    CHECK(TLS_HAS("gml_build_graph", "ctx"), "\"%s\"", gml_last_error(NULL));
    CHECK(!gml_build_graph(ctx, NULL, 1), "gml_build_graph(ctx, NULL outputs)");
    CHECK(MSG_HAS(gml_last_error(ctx), "gml_build_graph", "outputs"), "\"%s\"", gml_last_error(ctx));
    gml_clear_error(ctx);
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    CHECK(g != NULL, "a graph: \"%s\"", gml_last_error(ctx));
    gml_graph_free(NULL);
    CHECK(gml_graph_n_nodes(NULL) == 0, "gml_graph_n_nodes(NULL)");
    CHECK(TLS_HAS("gml_graph_n_nodes", "g"), "\"%s\"", gml_last_error(NULL));
    CHECK(gml_graph_node(NULL, 0) == NULL, "gml_graph_node(NULL)");
    CHECK(gml_graph_n_leafs(NULL) == 0, "gml_graph_n_leafs(NULL)");
    CHECK(gml_graph_leaf(NULL, 0) == NULL, "gml_graph_leaf(NULL)");
    CHECK(gml_graph_use_count(NULL, y) == 0 && gml_graph_use_count(g, NULL) == 0, "use_count");
    CHECK(gml_graph_find(NULL, y) == -1 && gml_graph_find(g, NULL) == -1, "find");
    CHECK(gml_graph_n_tensors(NULL) == 0, "n_tensors");
    CHECK(gml_graph_tensor_at(NULL, 0) == NULL, "tensor_at");
    CHECK(gml_graph_tensor_index(NULL, y) == -1 && gml_graph_tensor_index(g, NULL) == -1, "tensor_index");
    gml_graph_print(NULL, stdout);
    CHECK(TLS_HAS("gml_graph_print", "g"), "\"%s\"", gml_last_error(NULL));
    gml_graph_print(g, NULL);
    CHECK(TLS_HAS("gml_graph_print", "f"), "\"%s\"", gml_last_error(NULL));
    CHECK(gml_graph_dump_dot(NULL, "/dev/null") == GML_ERR_INVALID, "dump_dot(NULL)");
    CHECK(gml_graph_dump_dot(g, NULL) == GML_ERR_INVALID, "dump_dot(g, NULL)");
    CHECK(TLS_HAS("gml_graph_dump_dot", "path"), "\"%s\"", gml_last_error(NULL));
    CHECK(gml_graph_digest(NULL) == 0, "digest(NULL)");
    CHECK(gml_graph_flops(NULL) == 0, "flops(NULL)");
    gml_isa isa;
    CHECK(gml_isa_name((gml_isa)99) != NULL, "isa_name(99)");
    CHECK(!gml_isa_from_name(NULL, &isa) && !gml_isa_from_name("avx2", NULL), "isa_from_name");
    CHECK(gml_graph_node_kernel(NULL, 0) == NULL, "node_kernel(NULL)");
    gml_graph_set_callback(NULL, cb_stop, NULL);
    gml_graph_set_nan_trap(NULL, true);
    CHECK(gml_graph_compute(NULL, 1) == GML_ERR_INVALID, "gml_graph_compute(NULL, 1)");
    CHECK(MSG_HAS(gml_graph_error(NULL), "gml_graph_compute", "g"), "gml_graph_error(NULL): \"%s\"",
          gml_graph_error(NULL));
    CHECK(gml_graph_data(NULL, y) == NULL && gml_graph_data(g, NULL) == NULL, "graph_data");
    CHECK(gml_graph_tensor(NULL, y) == NULL && gml_graph_tensor(g, NULL) == NULL, "graph_tensor");
    gml_threadpool_free(NULL);
    CHECK(gml_threadpool_n_threads(NULL) == 0, "n_threads(NULL)");
    gml_threadpool *pool = gml_threadpool_new(2);
    CHECK(gml_graph_compute_pool(NULL, pool) == GML_ERR_INVALID, "compute_pool(NULL g)");
    CHECK(gml_graph_compute_pool(g, NULL) == GML_ERR_INVALID, "compute_pool(g, NULL)");
    CHECK(MSG_HAS(gml_graph_error(g), "pool"), "\"%s\"", gml_graph_error(g));
    gml_threadpool_free(pool);
    CHECK(gml_graph_plan(NULL, NULL) == GML_ERR_INVALID, "plan(NULL)");
    CHECK(MSG_HAS(gml_graph_error(NULL), "gml_graph_plan", "g"), "\"%s\"", gml_graph_error(NULL));
    CHECK(gml_graph_plan_peak(NULL) == 0 && gml_graph_plan_naive(NULL) == 0, "plan sizes");
    /* the graph still computes */
    CHECK(gml_graph_compute(g, 2) == GML_OK, "compute: \"%s\"", gml_graph_error(g));
    CHECK(gml_get_f32(y, (const int64_t[]){1, 2}) == 2, "1 + 1");
    gml_graph_free(g);
    gml_free(ctx);
}

static bool eq_never(const void *user, int val, const void *key) {
    (void)user, (void)val, (void)key;
    return false;
}

static void case_null_hashindex(void) {
    (void)gml_hash_ptr(NULL);
    CHECK(gml_hash_str(NULL) == gml_hash_str(""), "gml_hash_str(NULL) hashes as \"\"");
    gml_hashindex ix = {0};
    CHECK(gml_hashindex_find(NULL, 1, eq_never, NULL, NULL) == -1, "find(NULL)");
    CHECK(gml_hashindex_add(&ix, 1, 0), "add");
    CHECK(gml_hashindex_find(&ix, 1, NULL, NULL, NULL) == -1, "find(eq NULL)");
    CHECK(!gml_hashindex_add(NULL, 1, 0), "add(NULL)");
    gml_hashindex_clear(NULL);
    gml_hashindex_free(NULL);
    gml_hashindex_free(&ix);
}

/* ---- freed and foreign objects ---------------------------------------------- */

static void case_freed_context(void) {
    gml_context *ctx = new_ctx(false);
    gml_tensor *x = f32(ctx, "x", 2, 3);
    (void)x;
    gml_free(ctx);
    gml_free(ctx); /* a second free does nothing */
    CHECK(TLS_HAS("gml_free", "ctx"), "\"%s\"", gml_last_error(NULL));
    CHECK(gml_last_error(ctx) != NULL, "last_error of a freed context is a string");
    gml_clear_error(ctx);
    CHECK(gml_used_mem(ctx) == 0 && gml_mem_required(ctx) == 0 && !gml_get_no_alloc(ctx), "sizes");
    CHECK(!gml_new_tensor_1d(ctx, GML_F32, 4), "new_tensor in a freed context");
    CHECK(TLS_HAS("gml_new_tensor", "ctx", "freed"), "\"%s\"", gml_last_error(NULL));
    CHECK(!gml_get_tensor(ctx, "x") && !gml_get_first_tensor(ctx), "lookups");
    CHECK(gml_set_error(ctx, "x") == NULL, "set_error");
    CHECK(!gml_arange(ctx, 4, 0), "arange");
    CHECK(TLS_HAS("gml_arange", "ctx"), "\"%s\"", gml_last_error(NULL));
}

/* A graph computed after gml_free of its own context: refused, whatever
 * else the graph offers (its bound copies aside) answers "nothing". */
static void case_graph_after_own_context(void) {
    for (int no_alloc = 0; no_alloc < 2; no_alloc++) {
        gml_context *ctx = new_ctx(no_alloc);
        gml_tensor *x = f32(ctx, "x", 2, 3), *y = gml_set_name(gml_add(ctx, x, x), "y");
        gml_graph *g = gml_build_graph(ctx, &y, 1);
        CHECK(g != NULL, "graph");
        if (no_alloc) CHECK(gml_graph_plan(g, NULL) == GML_OK, "plan");
        gml_free(ctx);
        CHECK(gml_graph_compute(g, 1) == GML_ERR_INVALID, "compute after gml_free of its context");
        CHECK(MSG_HAS(gml_graph_error(g), "compute", "freed", "'y'"), "\"%s\"", gml_graph_error(g));
        CHECK(gml_graph_plan(g, NULL) == GML_ERR_INVALID, "plan after gml_free");
        CHECK(MSG_HAS(gml_graph_error(g), "plan", "freed"), "\"%s\"", gml_graph_error(g));
        CHECK(gml_graph_node(g, 0) == NULL && gml_graph_leaf(g, 0) == NULL &&
              gml_graph_tensor_at(g, 0) == NULL, "no tensor handed out");
        CHECK(gml_graph_digest(g) == 0 && gml_graph_flops(g) == 0, "digest, flops");
        CHECK(gml_graph_data(g, y) == NULL, "graph_data");
        FILE *f = tmpfile();
        gml_graph_print(g, f);
        if (f) fclose(f);
        CHECK(TLS_HAS("gml_graph_print", "freed"), "\"%s\"", gml_last_error(NULL));
        CHECK(gml_graph_dump_dot(g, "/dev/null") == GML_ERR_INVALID, "dump_dot");
        CHECK(gml_graph_n_nodes(g) == 1, "counts are the graph's own");
        gml_graph_free(g);
    }
}

static void case_foreign_tensor(void) {
    gml_context *c1 = new_ctx(false), *c2 = new_ctx(false);
    gml_tensor *x = f32(c1, "x", 2, 3), *w = f32(c2, "w", 2, 3);
    fill(x, 1);
    fill(w, 2);
    /* a tensor of another live context may be used (weights, a KV cache) */
    gml_tensor *y = gml_set_name(gml_add(c1, x, w), "y");
    CHECK(y != NULL, "add(x of c1, w of c2): \"%s\"", gml_last_error(c1));
    CHECK(gml_get_next_tensor(c1, w) == NULL, "get_next_tensor(c1, a tensor of c2)");
    gml_graph *g = gml_build_graph(c1, &y, 1);
    CHECK(g && gml_graph_compute(g, 2) == GML_OK, "compute");
    CHECK(gml_get_f32(y, (const int64_t[]){1, 2}) == 3, "1 + 2");
    /* ... until its context is freed: the graph then refuses */
    gml_free(c2);
    CHECK(gml_graph_compute(g, 2) == GML_ERR_INVALID, "compute after the weights' context is freed");
    CHECK(MSG_HAS(gml_graph_error(g), "compute", "'w'", "freed"), "\"%s\"", gml_graph_error(g));
    gml_graph_free(g);
    /* so does building a graph over it, and a builder given it */
    CHECK(!gml_build_graph(c1, &y, 1), "build_graph over a tensor of a freed context");
    CHECK(MSG_HAS(gml_last_error(c1), "gml_build_graph", "'y'", "freed"), "\"%s\"", gml_last_error(c1));
    gml_clear_error(c1);
    CHECK(!gml_add(c1, x, w), "add(x, w of a freed context)");
    CHECK(MSG_HAS(gml_last_error(c1), "gml_add", "b", "freed"), "\"%s\"", gml_last_error(c1));
    gml_clear_error(c1);
    CHECK(!gml_form_build(c1, gml_form_find("add"),
                          (gml_arg[GML_MAX_ARGS]){{.given = true, .t = x}, {.given = true, .t = w}}),
          "form_build over it");
    CHECK(MSG_HAS(gml_last_error(c1), "gml_form_build", "freed"), "\"%s\"", gml_last_error(c1));
    gml_clear_error(c1);
    /* a graph's copy of a header is not a context's tensor */
    gml_tensor *z = gml_set_name(gml_scale(c1, x, 2), "z");
    gml_graph *g2 = gml_build_graph(c1, &z, 1);
    gml_tensor *copy = (gml_tensor *)gml_graph_tensor(g2, z);
    CHECK(copy != NULL, "a bound copy");
    CHECK(!gml_neg(c1, copy), "neg(a graph's copy)");
    CHECK(MSG_HAS(gml_last_error(c1), "gml_neg", "x", "live context"), "\"%s\"", gml_last_error(c1));
    gml_graph_free(g2);
    gml_free(c1);
}

/* A node callback that computes its own graph (refused) and then stops:
 * the outer compute reports the stop, not the refusal. */
struct nested {
    gml_graph *g;
    gml_status inner;
    char inner_msg[GML_ERR_MAX];
};
static bool cb_nested(const gml_tensor *node, int index, void *user) {
    (void)node, (void)index;
    struct nested *n = user;
    n->inner = gml_graph_compute(n->g, 1);
    snprintf(n->inner_msg, sizeof n->inner_msg, "%s", gml_graph_error(n->g));
    return false;
}

static void case_nested_compute(void) {
    gml_context *ctx = new_ctx(false);
    gml_tensor *x = f32(ctx, "x", 2, 3), *y = gml_neg(ctx, gml_neg(ctx, x));
    fill(x, 1);
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    struct nested n = {.g = g};
    gml_graph_set_callback(g, cb_nested, &n);
    for (int nth = 1; nth <= 2; nth++) {
        gml_status st = gml_graph_compute(g, nth);
        CHECK(n.inner == GML_ERR_INVALID && strstr(n.inner_msg, "own graph"),
              "the nested compute is refused: \"%s\"", n.inner_msg);
        CHECK(st == GML_ERR_ABORTED, "the outer compute stops (%d)", (int)st);
        CHECK(strstr(gml_graph_error(g), "stopped by the node callback") != NULL,
              "the outer compute's message is the stop: \"%s\"", gml_graph_error(g));
    }
    gml_graph_free(g);
    gml_free(ctx);
}

/* ---- io: NULL for each pointer argument ------------------------------------- */

/* err holds "<fn>: <arg> is NULL" and so does the thread's message */
#define ERR_HAS(fn, arg)                                                                      \
    do {                                                                                      \
        CHECK(MSG_HAS(err, fn ": " arg " is NULL"), "err: \"%s\"", err);                       \
        CHECK(TLS_HAS(fn ": " arg " is NULL"), "thread: \"%s\"", gml_last_error(NULL));        \
    } while (0)

static void case_io_null(void) {
    char err[256], path[64];
    snprintf(path, sizeof path, "misuse_%d.safetensors", (int)getpid());
    gml_context *ctx = new_ctx(false);
    gml_tensor *x = f32(ctx, "x", 2, 3);
    fill(x, 1);
    /* loaders and parsers */
    CHECK(!gml_load_safetensors(NULL, err, sizeof err), "load_safetensors");
    ERR_HAS("gml_load_safetensors", "path");
    CHECK(!gml_load_safetensors(NULL, NULL, 0), "load_safetensors, no err");
    CHECK(TLS_HAS("gml_load_safetensors: path is NULL"), "\"%s\"", gml_last_error(NULL));
    CHECK(!gml_safetensors_open(NULL, err, sizeof err), "open");
    ERR_HAS("gml_safetensors_open", "path");
    CHECK(!gml_safetensors_open_flags(NULL, 0, err, sizeof err), "open_flags");
    ERR_HAS("gml_safetensors_open_flags", "path");
    CHECK(!gml_load_npy(NULL, "x", err, sizeof err), "load_npy");
    ERR_HAS("gml_load_npy", "path");
    CHECK(!gml_load_npy_converted(NULL, "x", NULL, err, sizeof err), "load_npy_converted");
    ERR_HAS("gml_load_npy_converted", "path");
    const char bytes[16] = {0};
    CHECK(!gml_parse_npy(NULL, 16, "b", "x", err, sizeof err), "parse_npy");
    ERR_HAS("gml_parse_npy", "buf");
    CHECK(!gml_parse_npy(bytes, 16, NULL, "x", err, sizeof err), "parse_npy what: \"<memory>\"");
    CHECK(strstr(err, "<memory>") != NULL, "\"%s\"", err);
    CHECK(!gml_parse_npy_converted(NULL, 16, "b", "x", NULL, err, sizeof err), "parse_npy_converted");
    ERR_HAS("gml_parse_npy_converted", "buf");
    CHECK(!gml_parse_npy_converted(bytes, 16, NULL, "x", NULL, err, sizeof err), "parse_npy_converted what: \"<memory>\"");
    CHECK(strstr(err, "<memory>") != NULL, "\"%s\"", err);
    CHECK(!gml_parse_safetensors(NULL, 16, "b", err, sizeof err), "parse_safetensors");
    ERR_HAS("gml_parse_safetensors", "buf");
    CHECK(!gml_parse_safetensors(bytes, 16, NULL, err, sizeof err), "parse_safetensors what: \"<memory>\"");
    CHECK(strstr(err, "<memory>") != NULL, "\"%s\"", err);
    gml_st_index_entry *ents = NULL;
    int n_ents = 0;
    const char idx[] = "{\"weight_map\": {\"x\": \"a.safetensors\"}}";
    CHECK(gml_parse_safetensors_index(idx, sizeof idx - 1, "i", NULL, &n_ents, err, sizeof err) ==
              GML_ERR_INVALID, "index entries");
    ERR_HAS("gml_parse_safetensors_index", "entries");
    CHECK(gml_parse_safetensors_index(idx, sizeof idx - 1, "i", &ents, NULL, err, sizeof err) ==
              GML_ERR_INVALID, "index n");
    ERR_HAS("gml_parse_safetensors_index", "n");
    CHECK(gml_parse_safetensors_index(NULL, 10, "i", &ents, &n_ents, err, sizeof err) ==
              GML_ERR_INVALID && !ents, "index buf");
    ERR_HAS("gml_parse_safetensors_index", "buf");
    CHECK(gml_parse_safetensors_index(idx, sizeof idx - 1, NULL, &ents, &n_ents, err, sizeof err) ==
              GML_ERR_INVALID && !ents, "index what");
    ERR_HAS("gml_parse_safetensors_index", "what");
    gml_free_safetensors_index(NULL, 3);
    /* savers */
    const gml_tensor *ts[1] = {x};
    CHECK(gml_save_safetensors(NULL, ts, 1, err, sizeof err) == GML_ERR_INVALID, "save_safetensors");
    ERR_HAS("gml_save_safetensors", "path");
    CHECK(gml_save_safetensors(path, NULL, 1, err, sizeof err) == GML_ERR_INVALID, "save tensors");
    ERR_HAS("gml_save_safetensors", "tensors");
    CHECK(gml_save_npy(NULL, x, err, sizeof err) == GML_ERR_INVALID, "save_npy");
    ERR_HAS("gml_save_npy", "path");
    CHECK(gml_save_npy("misuse_x.npy", NULL, err, sizeof err) == GML_ERR_INVALID, "save_npy t");
    ERR_HAS("gml_save_npy", "t");
    /* a mapped file's accessors given NULL */
    CHECK(gml_safetensors_count(NULL) == 0, "count");
    CHECK(TLS_HAS("gml_safetensors_count: st is NULL"), "\"%s\"", gml_last_error(NULL));
    const char *file = NULL;
    CHECK(!gml_safetensors_unlisted(NULL, 0, &file), "unlisted");
    CHECK(TLS_HAS("gml_safetensors_unlisted: st is NULL"), "\"%s\"", gml_last_error(NULL));
    CHECK(!gml_safetensors_name(NULL, 0), "name");
    CHECK(TLS_HAS("gml_safetensors_name: st is NULL"), "\"%s\"", gml_last_error(NULL));
    CHECK(!gml_safetensors_file(NULL, 0), "file");
    CHECK(TLS_HAS("gml_safetensors_file: st is NULL"), "\"%s\"", gml_last_error(NULL));
    CHECK(gml_safetensors_find(NULL, "x") == -1, "find");
    CHECK(TLS_HAS("gml_safetensors_find: st is NULL"), "\"%s\"", gml_last_error(NULL));
    CHECK(!gml_safetensors_tensor(NULL, 0, ctx, NULL, err, sizeof err), "tensor st");
    ERR_HAS("gml_safetensors_tensor", "st");
    gml_safetensors_close(NULL);
    CHECK(gml_save_safetensors(path, ts, 1, err, sizeof err) == GML_OK, "save %s: %s", path, err);
    gml_safetensors *st = gml_safetensors_open(path, err, sizeof err);
    if (CHECK(st != NULL, "open %s: %s", path, err)) {
        CHECK(gml_safetensors_find(st, NULL) == -1, "find name");
        CHECK(TLS_HAS("gml_safetensors_find: name is NULL"), "\"%s\"", gml_last_error(NULL));
        CHECK(!gml_safetensors_tensor(st, 0, NULL, NULL, err, sizeof err), "tensor ctx");
        ERR_HAS("gml_safetensors_tensor", "ctx");
        /* a context freed before the call: the engine refuses it */
        gml_context *dead = new_ctx(false);
        gml_free(dead);
        CHECK(!gml_safetensors_tensor(st, 0, dead, NULL, err, sizeof err), "tensor into a freed context");
        gml_safetensors_close(st);
    }
    remove(path);
    /* temporary files */
    CHECK(gml_cleanup_register(NULL) == -1, "cleanup_register");
    CHECK(TLS_HAS("gml_cleanup_register: path is NULL"), "\"%s\"", gml_last_error(NULL));
    gml_cleanup_unregister(-1);
    /* graph files */
    const char text[] = "input x f32 [2, 3]\ny = neg(x)\noutput y\n";
    gml_tensor *outs[2];
    CHECK(gml_parse_graph(NULL, text, sizeof text - 1, "g", NULL, outs, 2, err, sizeof err) == -1,
          "parse_graph ctx");
    ERR_HAS("gml_parse_graph", "ctx");
    CHECK(gml_parse_graph(ctx, NULL, 10, "g", NULL, outs, 2, err, sizeof err) == -1, "parse_graph text");
    ERR_HAS("gml_parse_graph", "text");
    CHECK(gml_parse_graph(ctx, text, sizeof text - 1, "g", NULL, NULL, 2, err, sizeof err) == -1,
          "parse_graph outputs");
    ERR_HAS("gml_parse_graph", "outputs");
    gml_graph_binder binder = {.n_syms = 1};
    CHECK(gml_parse_graph(ctx, text, sizeof text - 1, "g", &binder, outs, 2, err, sizeof err) == -1,
          "parse_graph sym_names");
    ERR_HAS("gml_parse_graph", "binder->sym_names");
    CHECK(gml_load_graph(NULL, "g.graph", NULL, outs, 2, err, sizeof err) == -1, "load_graph ctx");
    ERR_HAS("gml_load_graph", "ctx");
    CHECK(gml_load_graph(ctx, NULL, NULL, outs, 2, err, sizeof err) == -1, "load_graph path");
    ERR_HAS("gml_load_graph", "path");
    CHECK(gml_load_graph(ctx, "g.graph", NULL, NULL, 2, err, sizeof err) == -1, "load_graph outputs");
    ERR_HAS("gml_load_graph", "outputs");
    gml_tensor *y = gml_neg(ctx, x);
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    CHECK(gml_save_graph(NULL, g, &y, 1, err, sizeof err) == GML_ERR_INVALID, "save_graph path");
    ERR_HAS("gml_save_graph", "path");
    CHECK(gml_save_graph("misuse.graph", NULL, &y, 1, err, sizeof err) == GML_ERR_INVALID, "save_graph g");
    ERR_HAS("gml_save_graph", "g");
    CHECK(gml_save_graph("misuse.graph", g, NULL, 1, err, sizeof err) == GML_ERR_INVALID,
          "save_graph outputs");
    ERR_HAS("gml_save_graph", "outputs");
    gml_write_op_table(NULL);
    CHECK(TLS_HAS("gml_write_op_table: f is NULL"), "\"%s\"", gml_last_error(NULL));
    /* a graph parsed into a freed context: the engine refuses it */
    gml_context *dead = new_ctx(false);
    gml_free(dead);
    CHECK(gml_parse_graph(dead, text, sizeof text - 1, "g", NULL, outs, 2, err, sizeof err) == -1,
          "parse_graph into a freed context");
    gml_graph_free(g);
    gml_free(ctx);
}

/* ---- models: NULL for each pointer argument --------------------------------- */

/* a builder's message: on ctx when it is live, else the thread's */
#define CTX_HAS(ctx, fn, arg)                                                                 \
    do {                                                                                      \
        CHECK(MSG_HAS(gml_last_error(ctx), fn ": " arg " is NULL"), "\"%s\"", gml_last_error(ctx)); \
        gml_clear_error(ctx);                                                                 \
    } while (0)

static void case_models_null(void) {
    char err[256];
    gml_context *ctx = new_ctx(false);
    gml_tensor *x = f32(ctx, "x", 3, 8); /* [3, 8] as [B, T, D] below */
    x = gml_reshape(ctx, x, 3, (int64_t[]){1, 3, 8});
    gml_attn_config cfg = {.dims = {.d_model = 8, .n_heads = 2}};
    gml_attn_weights w = {0};
    gml_attn_inputs in = {.query = x};
    /* the blocks and stages */
    CHECK(!gml_mha(NULL, cfg, &w, in).out, "mha ctx");
    CHECK(TLS_HAS("gml_mha: ctx is NULL"), "\"%s\"", gml_last_error(NULL));
    CHECK(!gml_mha(ctx, cfg, NULL, in).out, "mha w");
    CTX_HAS(ctx, "gml_mha", "w");
    CHECK(!gml_gqa(NULL, cfg, &w, in).out, "gqa ctx");
    CHECK(TLS_HAS("gml_gqa: ctx is NULL"), "\"%s\"", gml_last_error(NULL));
    CHECK(!gml_gqa(ctx, cfg, NULL, in).out, "gqa w");
    CTX_HAS(ctx, "gml_gqa", "w");
    CHECK(!gml_relpos_attn(NULL, cfg, 4, &w, in).out, "relpos ctx");
    CHECK(TLS_HAS("gml_relpos_attn: ctx is NULL"), "\"%s\"", gml_last_error(NULL));
    CHECK(!gml_relpos_attn(ctx, cfg, 4, NULL, in).out, "relpos w");
    CTX_HAS(ctx, "gml_relpos_attn", "w");
    CHECK(!gml_attn_project(NULL, &cfg, &w, in).q, "project ctx");
    CHECK(TLS_HAS("gml_attn_project: ctx is NULL"), "\"%s\"", gml_last_error(NULL));
    CHECK(!gml_attn_project(ctx, NULL, &w, in).q, "project cfg");
    CTX_HAS(ctx, "gml_attn_project", "cfg");
    CHECK(!gml_attn_project(ctx, &cfg, NULL, in).q, "project w");
    CTX_HAS(ctx, "gml_attn_project", "w");
    gml_attn_qkv qkv = {x, x, x};
    CHECK(!gml_attn_position(NULL, &cfg, qkv, in).q, "position ctx");
    CHECK(TLS_HAS("gml_attn_position: ctx is NULL"), "\"%s\"", gml_last_error(NULL));
    CHECK(!gml_attn_position(ctx, NULL, qkv, in).q, "position cfg");
    CTX_HAS(ctx, "gml_attn_position", "cfg");
    CHECK(!gml_attn_attend(NULL, &cfg, qkv, in, NULL).heads, "attend ctx");
    CHECK(TLS_HAS("gml_attn_attend: ctx is NULL"), "\"%s\"", gml_last_error(NULL));
    CHECK(!gml_attn_attend(ctx, NULL, qkv, in, NULL).heads, "attend cfg");
    CTX_HAS(ctx, "gml_attn_attend", "cfg");
    CHECK(!gml_attn_merge(NULL, &w, x), "merge ctx");
    CHECK(TLS_HAS("gml_attn_merge: ctx is NULL"), "\"%s\"", gml_last_error(NULL));
    CHECK(gml_attn_weights_find(NULL, &w, err, sizeof err) == GML_ERR_INVALID, "weights_find wctx");
    ERR_HAS("gml_attn_weights_find", "wctx");
    CHECK(gml_attn_weights_find(ctx, NULL, err, sizeof err) == GML_ERR_INVALID, "weights_find w");
    ERR_HAS("gml_attn_weights_find", "w");
    CHECK(gml_attn_weights_find(NULL, &w, NULL, 64) == GML_ERR_INVALID, "weights_find err NULL");
    CHECK(!gml_attn_weight_name_known(NULL), "weight_name_known");
    CHECK(TLS_HAS("gml_attn_weight_name_known: name is NULL"), "\"%s\"", gml_last_error(NULL));
    /* the KV cache */
    gml_kv_cache *c = gml_kv_cache_new((gml_kv_cache_params){.n_layers = 1, .batch = 1, .n_kv_heads = 2,
                                                             .max_len = 8, .d_k = 4}, err, sizeof err);
    CHECK(c != NULL, "kv_cache_new: %s", err);
    CHECK(!gml_kv_cache_new((gml_kv_cache_params){0}, NULL, 64), "kv_cache_new(bad, err NULL)");
    gml_kv_cache_free(NULL);
    CHECK(gml_kv_cache_get_params(NULL).n_layers == 0, "get_params");
    CHECK(TLS_HAS("gml_kv_cache_get_params: c is NULL"), "\"%s\"", gml_last_error(NULL));
    CHECK(!gml_kv_cache_k(NULL, 0), "cache_k");
    CHECK(TLS_HAS("gml_kv_cache_k: c is NULL"), "\"%s\"", gml_last_error(NULL));
    CHECK(!gml_kv_cache_v(NULL, 0), "cache_v");
    CHECK(TLS_HAS("gml_kv_cache_v: c is NULL"), "\"%s\"", gml_last_error(NULL));
    CHECK(gml_kv_cache_len(NULL) == 0, "cache_len");
    CHECK(TLS_HAS("gml_kv_cache_len: c is NULL"), "\"%s\"", gml_last_error(NULL));
    CHECK(gml_kv_cache_bytes(NULL) == 0, "cache_bytes");
    CHECK(TLS_HAS("gml_kv_cache_bytes: c is NULL"), "\"%s\"", gml_last_error(NULL));
    CHECK(!gml_kv_cache_truncate(NULL, 0), "truncate");
    CHECK(TLS_HAS("gml_kv_cache_truncate: c is NULL"), "\"%s\"", gml_last_error(NULL));
    CHECK(!gml_kv_step_new(NULL, c, 1).pos, "step_new ctx");
    CHECK(TLS_HAS("gml_kv_step_new: ctx is NULL"), "\"%s\"", gml_last_error(NULL));
    CHECK(!gml_kv_step_new(ctx, NULL, 1).pos, "step_new c");
    CTX_HAS(ctx, "gml_kv_step_new", "c");
    gml_kv_step step = gml_kv_step_new(ctx, c, 1);
    CHECK(step.pos != NULL, "a step: %s", gml_last_error(ctx));
    CHECK(!gml_attn_decode(NULL, cfg, &w, x, &step, 0), "decode ctx");
    CHECK(TLS_HAS("gml_attn_decode: ctx is NULL"), "\"%s\"", gml_last_error(NULL));
    CHECK(!gml_attn_decode(ctx, cfg, NULL, x, &step, 0), "decode w");
    CTX_HAS(ctx, "gml_attn_decode", "w");
    CHECK(!gml_attn_decode(ctx, cfg, &w, x, NULL, 0), "decode step");
    CTX_HAS(ctx, "gml_attn_decode", "step");
    gml_tensor *y = gml_neg(ctx, x);
    gml_graph *g = gml_build_graph(ctx, &y, 1);
    CHECK(gml_kv_step_compute(NULL, g, 1, err, sizeof err) == GML_ERR_INVALID, "step_compute s");
    ERR_HAS("gml_kv_step_compute", "s");
    CHECK(gml_kv_step_compute(&step, NULL, 1, err, sizeof err) == GML_ERR_INVALID, "step_compute g");
    ERR_HAS("gml_kv_step_compute", "g");
    CHECK(gml_kv_step_compute(&step, NULL, 1, NULL, 64) == GML_ERR_INVALID, "step_compute err NULL");
    /* the layers */
    gml_llama_config lc = {.n_heads = 2};
    gml_llama_weights lw = {0};
    CHECK(!gml_llama_layer(NULL, &lc, &lw, x, NULL), "llama ctx");
    CHECK(TLS_HAS("gml_llama_layer: ctx is NULL"), "\"%s\"", gml_last_error(NULL));
    CHECK(!gml_llama_layer(ctx, NULL, &lw, x, NULL), "llama cfg");
    CTX_HAS(ctx, "gml_llama_layer", "cfg");
    CHECK(!gml_llama_layer(ctx, &lc, NULL, x, NULL), "llama w");
    CTX_HAS(ctx, "gml_llama_layer", "w");
    CHECK(!gml_llama_decode(NULL, &lc, &lw, x, &step, 0), "llama_decode ctx");
    CHECK(TLS_HAS("gml_llama_decode: ctx is NULL"), "\"%s\"", gml_last_error(NULL));
    CHECK(!gml_llama_decode(ctx, NULL, &lw, x, &step, 0), "llama_decode cfg");
    CTX_HAS(ctx, "gml_llama_decode", "cfg");
    CHECK(!gml_llama_decode(ctx, &lc, NULL, x, &step, 0), "llama_decode w");
    CTX_HAS(ctx, "gml_llama_decode", "w");
    gml_gpt2_config gc = {.n_heads = 2};
    gml_gpt2_weights gw = {0};
    CHECK(!gml_gpt2_layer(NULL, &gc, &gw, x), "gpt2 ctx");
    CHECK(TLS_HAS("gml_gpt2_layer: ctx is NULL"), "\"%s\"", gml_last_error(NULL));
    CHECK(!gml_gpt2_layer(ctx, NULL, &gw, x), "gpt2 cfg");
    CTX_HAS(ctx, "gml_gpt2_layer", "cfg");
    CHECK(!gml_gpt2_layer(ctx, &gc, NULL, x), "gpt2 w");
    CTX_HAS(ctx, "gml_gpt2_layer", "w");
    gml_bert_config bc = {.n_heads = 2};
    gml_bert_weights bw = {0};
    CHECK(!gml_bert_layer(NULL, &bc, &bw, x, NULL), "bert ctx");
    CHECK(TLS_HAS("gml_bert_layer: ctx is NULL"), "\"%s\"", gml_last_error(NULL));
    CHECK(!gml_bert_layer(ctx, NULL, &bw, x, NULL), "bert cfg");
    CTX_HAS(ctx, "gml_bert_layer", "cfg");
    CHECK(!gml_bert_layer(ctx, &bc, NULL, x, NULL), "bert w");
    CTX_HAS(ctx, "gml_bert_layer", "w");
    CHECK(gml_llama_weights_find(NULL, "", &lw, err, sizeof err) == GML_ERR_INVALID, "llama find wctx");
    ERR_HAS("gml_llama_weights_find", "wctx");
    CHECK(gml_llama_weights_find(ctx, "", NULL, err, sizeof err) == GML_ERR_INVALID, "llama find w");
    ERR_HAS("gml_llama_weights_find", "w");
    CHECK(gml_gpt2_weights_find(NULL, "", &gw, err, sizeof err) == GML_ERR_INVALID, "gpt2 find wctx");
    ERR_HAS("gml_gpt2_weights_find", "wctx");
    CHECK(gml_gpt2_weights_find(ctx, "", NULL, err, sizeof err) == GML_ERR_INVALID, "gpt2 find w");
    ERR_HAS("gml_gpt2_weights_find", "w");
    CHECK(gml_bert_weights_find(NULL, "", &bw, err, sizeof err) == GML_ERR_INVALID, "bert find wctx");
    ERR_HAS("gml_bert_weights_find", "wctx");
    CHECK(gml_bert_weights_find(ctx, "", NULL, err, sizeof err) == GML_ERR_INVALID, "bert find w");
    ERR_HAS("gml_bert_weights_find", "w");
    CHECK(gml_bert_weights_find(NULL, "", &bw, NULL, 64) == GML_ERR_INVALID, "bert find err NULL");
    /* a context freed before the call: refused, nothing read of it */
    gml_context *dead = new_ctx(false);
    gml_free(dead);
    CHECK(!gml_mha(dead, cfg, &w, in).out, "mha into a freed context");
    CHECK(!gml_llama_layer(dead, &lc, &lw, x, NULL), "llama into a freed context");
    CHECK(!gml_kv_step_new(dead, c, 1).pos, "kv_step into a freed context");
    gml_graph_free(g);
    gml_kv_cache_free(c);
    gml_free(ctx);
}

/* ---- the runner ------------------------------------------------------------- */

static const struct {
    const char *name;
    void (*fn)(void);
} CASES[] = {
    {"init_overflow", case_init_overflow},
    {"null_types", case_null_types},
    {"null_context_calls", case_null_context_calls},
    {"null_builders", case_null_builders},
    {"null_registry", case_null_registry},
    {"null_graphs", case_null_graphs},
    {"null_hashindex", case_null_hashindex},
    {"freed_context", case_freed_context},
    {"graph_after_own_context", case_graph_after_own_context},
    {"foreign_tensor", case_foreign_tensor},
    {"nested_compute", case_nested_compute},
    {"io_null", case_io_null},
    {"models_null", case_models_null},
};

int main(int argc, char **argv) {
    /* one case in this process: test_api_misuse <name> */
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
            chk_state.failures = 0; /* this case's own */
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
