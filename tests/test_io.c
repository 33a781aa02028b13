/* File I/O: .npy and safetensors readers and writers.
 *
 *   test_io FIXTURES_DIR     (tests/fixtures, written by gen_fixtures.py)
 *
 * - round trips are bit-exact (f32 specials: -0, inf, NaN payloads,
 *   denormals; i32; 1..4 dims, odd sizes), and views (permuted, sliced) are
 *   written in logical C order, checked against index arithmetic on the base;
 * - every PyTorch fixture loads with the shapes its case implies, and loaded
 *   values match bytes read by plain fread at the offsets the formats define;
 * - bad inputs (every truncation of valid files, broken headers, unsupported
 *   dtypes and layouts, overlaps, ...) fail with a one-line message naming
 *   the file and what was expected;
 * - failed saves leave no file behind and never clobber an existing one. */
#define _XOPEN_SOURCE 700 /* mkdtemp, setrlimit */
#include <ggmlite/ggmlite.h>
#include <ggmlite/io.h>

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- harness -------------------------------------------------------------- */

static long n_checks, n_failures;

static void check_at(bool ok, const char *file, int line, const char *fmt, ...) {
    n_checks++;
    if (ok) return;
    n_failures++;
    if (n_failures > 50) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s:%d: FAIL: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
#define CHECK(cond, ...) check_at((cond) != 0, __FILE__, __LINE__, __VA_ARGS__)

static char err[1024];

/* A loader call that must fail: NULL, a one-line message holding each of
 * the substrings. */
static void expect_fail_at(const char *file, int line, const char *call, gml_context *ctx,
                           const char *const *subs) {
    if (ctx) {
        check_at(false, file, line, "%s: expected a failure, got a context", call);
        gml_free(ctx);
        return;
    }
    check_at(err[0] != '\0', file, line, "%s: failed without a message", call);
    check_at(strchr(err, '\n') == NULL, file, line, "%s: message is not one line: %s", call, err);
    for (; *subs; subs++)
        check_at(strstr(err, *subs) != NULL, file, line, "%s: message \"%s\" lacks \"%s\"", call,
                 err, *subs);
}
#define EXPECT_FAIL(call, ...)                                                                  \
    expect_fail_at(__FILE__, __LINE__, #call, (err[0] = '\0', (call)),                          \
                   (const char *const[]){__VA_ARGS__, NULL})

static uint64_t rng_state = 12345;
static uint64_t rng(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* ---- scratch files -------------------------------------------------------- */

static char tmpdir[64];

/* tmpdir/name, in one of 4 rotating buffers: copy it to keep it longer. */
static const char *tmp_path(const char *name) {
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static bool write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* The whole file, malloc'd (NULL if it cannot be read). */
static unsigned char *read_bytes(const char *path, size_t *len) {
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *p = NULL;
    size_t cap = 0, n = 0, got;
    do {
        if (n == cap) {
            cap = cap ? cap * 2 : 4096;
            p = realloc(p, cap);
        }
        got = fread(p + n, 1, cap - n, f);
        n += got;
    } while (got > 0);
    fclose(f);
    *len = n;
    return p;
}

static bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* Names in tmpdir containing ".tmp." (leftovers of a failed save). */
static int count_temp_files(void) {
    DIR *d = opendir(tmpdir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (strstr(e->d_name, ".tmp.")) n++;
    if (d) closedir(d);
    return n;
}

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    char p[512];
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) remove_tree(p);
        else remove(p);
    }
    if (d) closedir(d);
    rmdir(dir);
}

/* ---- tensors -------------------------------------------------------------- */

static size_t nbytes_dense(const gml_tensor *t) { return (size_t)gml_nelements(t) * 4; }

static bool same_shape_type(const gml_tensor *a, const gml_tensor *b) {
    return a->type == b->type && gml_same_shape(a, b);
}

/* f32 bit patterns worth a round trip, then random bits. */
static uint32_t random_word(gml_type type) {
    static const uint32_t special[] = {
        0x00000000, 0x80000000,             /* +0, -0 */
        0x7f800000, 0xff800000,             /* +inf, -inf */
        0x7fc00000, 0x7fc12345, 0xffc00001, /* quiet NaNs with payloads */
        0x7f800001, 0xffbfffff,             /* signalling NaNs */
        0x00000001, 0x807fffff, 0x00400000, /* denormals */
        0x7f7fffff, 0x00800000,             /* FLT_MAX, FLT_MIN */
    };
    uint64_t r = rng();
    if (type == GML_F32 && r % 4 == 0) return special[(r >> 8) % (sizeof special / sizeof *special)];
    return (uint32_t)(r >> 32);
}

static gml_tensor *random_tensor(gml_context *ctx, gml_type type, int n_dims, const int64_t *ne) {
    gml_tensor *t = gml_new_tensor(ctx, type, n_dims, ne);
    uint32_t *w = t->data;
    for (int64_t i = 0; i < gml_nelements(t); i++) w[i] = random_word(type);
    return t;
}

/* ---- round trips ---------------------------------------------------------- */

static void test_round_trips(void) {
    const char *npy = tmp_path("rt.npy"), *st = tmp_path("rt.safetensors");
    for (int trial = 0; trial < 60; trial++) {
        gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20});
        int n_dims = 1 + trial % 4, n = 1 + (int)(rng() % 5);
        const gml_tensor *ts[5];
        for (int k = 0; k < n; k++) {
            int64_t ne[4];
            for (int d = 0; d < n_dims; d++) ne[d] = 1 + (int64_t)(rng() % 9); /* 1..9 */
            char name[32];
            snprintf(name, sizeof name, "t%d.w\"\\\xc3\xa9/%d", trial, k); /* JSON-escaped, UTF-8 */
            ts[k] = gml_set_name(random_tensor(ctx, rng() % 2 ? GML_F32 : GML_I32, n_dims, ne), name);
        }

        /* .npy: the first tensor */
        CHECK(gml_save_npy(npy, ts[0], err, sizeof err) == GML_OK, "save_npy: %s", err);
        gml_context *back = gml_load_npy(npy, "x", err, sizeof err);
        CHECK(back, "load_npy: %s", err);
        if (back) {
            gml_tensor *t = gml_get_tensor(back, "x");
            CHECK(t && same_shape_type(t, ts[0]) && !memcmp(t->data, ts[0]->data, nbytes_dense(t)),
                  "npy round trip %d differs", trial);
            gml_free(back);
        }
        size_t len;
        unsigned char *bytes = read_bytes(npy, &len);
        CHECK(bytes && len >= 10 && (len - nbytes_dense(ts[0])) % 64 == 0 && bytes[6] == 1,
              "npy %d: data should start at a multiple of 64 in a version 1.0 file", trial);
        back = gml_parse_npy(bytes, len, "mem", NULL, err, sizeof err);
        CHECK(back && gml_get_tensor(back, "mem"), "parse_npy names the tensor after what: %s", err);
        gml_free(back);
        free(bytes);

        /* safetensors: all of them, in order */
        CHECK(gml_save_safetensors(st, ts, n, err, sizeof err) == GML_OK, "save_safetensors: %s",
              err);
        back = gml_load_safetensors(st, err, sizeof err);
        CHECK(back, "load_safetensors: %s", err);
        size_t want_mem = 0;
        for (int k = 0; back && k < n; k++) {
            gml_tensor *t = gml_get_tensor(back, ts[k]->name);
            CHECK(t && t->id == k, "safetensors %d: tensor '%s' missing or out of order", trial,
                  ts[k]->name);
            if (!t) continue;
            CHECK(same_shape_type(t, ts[k]) && !memcmp(t->data, ts[k]->data, nbytes_dense(t)),
                  "safetensors round trip %d, tensor %d differs", trial, k);
            CHECK((uintptr_t)t->data % 64 == 0, "tensor data should be 64-byte aligned");
            want_mem += gml_tensor_overhead() + (nbytes_dense(t) + 63) / 64 * 64;
        }
        CHECK(back && gml_used_mem(back) == want_mem, "arena should be sized exactly: used %zu, "
              "want %zu", back ? gml_used_mem(back) : 0, want_mem);
        gml_free(back);
        bytes = read_bytes(st, &len);
        uint64_t hlen = 0;
        for (int i = 7; bytes && len >= 8 && i >= 0; i--) hlen = hlen << 8 | bytes[i];
        CHECK(bytes && hlen % 8 == 0 && bytes[8] == '{', "safetensors header: padded to 8 bytes");
        free(bytes);
        gml_free(ctx);
    }
}

/* Element i of a view, found from the base's dense data by index arithmetic:
 * the view has shape ne (n_dims, outermost first) and element strides es
 * into base, starting at element off. */
static uint32_t view_elem(const uint32_t *base, int n_dims, const int64_t *ne, const int64_t *es,
                          int64_t off, int64_t i) {
    int64_t pos = off;
    for (int d = n_dims - 1; d >= 0; d--) {
        pos += (i % ne[d]) * es[d];
        i /= ne[d];
    }
    return base[pos];
}

static void check_view_saved(gml_tensor *v, const uint32_t *base, int n_dims, const int64_t *ne,
                             const int64_t *es, int64_t off, const char *what) {
    int64_t n = 1;
    for (int d = 0; d < n_dims; d++) n *= ne[d];
    const char *path = tmp_path("view.npy");
    CHECK(gml_save_npy(path, v, err, sizeof err) == GML_OK, "%s: save_npy: %s", what, err);
    const gml_tensor *vs[1] = {v};
    const char *spath = tmp_path("view.safetensors");
    CHECK(gml_save_safetensors(spath, vs, 1, err, sizeof err) == GML_OK, "%s: save: %s", what, err);
    gml_context *a = gml_load_npy(path, "v", err, sizeof err);
    gml_context *b = gml_load_safetensors(spath, err, sizeof err);
    CHECK(a && b, "%s: load: %s", what, err);
    for (int k = 0; a && b && k < 2; k++) {
        gml_tensor *t = k ? gml_get_tensor(b, v->name) : gml_get_tensor(a, "v");
        CHECK(t && t->n_dims == n_dims, "%s: loaded shape", what);
        if (!t) continue;
        for (int d = 0; d < n_dims; d++)
            CHECK(gml_dim(t, d) == ne[d], "%s: dim %d is %" PRId64 ", want %" PRId64, what, d,
                  gml_dim(t, d), ne[d]);
        int bad = 0;
        for (int64_t i = 0; i < n; i++)
            bad += ((uint32_t *)t->data)[i] != view_elem(base, n_dims, ne, es, off, i);
        CHECK(bad == 0, "%s (%s): %d of %" PRId64 " elements differ from the view's logical order",
              what, k ? "safetensors" : "npy", bad, n);
    }
    gml_free(a);
    gml_free(b);
}

static void test_views(void) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20});
    const int64_t B = 3, T = 5, D = 7;
    gml_tensor *x = gml_set_name(random_tensor(ctx, GML_F32, 3, (int64_t[]){B, T, D}), "x");
    const uint32_t *base = x->data;

    /* permute(2, 0, 1): [D, B, T] */
    gml_tensor *p = gml_permute(ctx, x, (const int[]){2, 0, 1});
    check_view_saved(p, base, 3, (int64_t[]){D, B, T}, (int64_t[]){1, T * D, D}, 0, "permute");

    /* transpose(-2, -1) of a 4-D tensor */
    gml_tensor *y = random_tensor(ctx, GML_I32, 4, (int64_t[]){2, 3, 4, 5});
    check_view_saved(gml_transpose(ctx, y, -2, -1), y->data, 4, (int64_t[]){2, 3, 5, 4},
                     (int64_t[]){60, 20, 1, 5}, 0, "transpose");

    /* x[1:3, ::2, 2:6]: a sliced view at an offset */
    size_t nb[3] = {(size_t)(T * D * 4), (size_t)(2 * D * 4), 4};
    gml_tensor *s = gml_view(ctx, x, 3, (int64_t[]){2, 3, 4}, nb, (size_t)((T * D + 2) * 4));
    CHECK(s, "view: %s", gml_last_error(ctx));
    if (s)
        check_view_saved(s, base, 3, (int64_t[]){2, 3, 4}, (int64_t[]){T * D, 2 * D, 1},
                         T * D + 2, "slice");

    /* a column: x[:, :, 3] as a 2-D view */
    gml_tensor *c = gml_view(ctx, x, 2, (int64_t[]){B, T}, (size_t[]){(size_t)(T * D * 4),
                             (size_t)(D * 4)}, 3 * 4);
    if (c) check_view_saved(c, base, 2, (int64_t[]){B, T}, (int64_t[]){T * D, D}, 3, "column");
    gml_free(ctx);
}

/* ---- fixtures ------------------------------------------------------------- */

typedef struct fixture_case {
    const char *name;
    int64_t B, Tq, Tk, D;
    bool bias, native, rel_v;
} fixture_case;

/* The cases tests/fixtures/gen_fixtures.py writes (B, Tq, Tk, D and the
 * weights it saves); heads, kv-heads and max-rel are read from each args
 * file. Every one must be there: a missing file fails. */
static const fixture_case CASES[] = {
    {"mha_seed", 2, 10, 10, 40, false, false, false},
    {"mha_d2l_cross_validlens", 2, 5, 7, 30, false, false, false},
    {"mha_bias_causal", 2, 7, 7, 48, true, false, false},
    {"mha_torch_native", 3, 5, 5, 32, true, true, false},
    {"gqa_seed_small", 2, 10, 10, 48, false, false, false},
    {"mqa", 2, 7, 7, 40, false, false, false},
    {"relpos_key", 2, 9, 9, 32, false, false, false},
    {"relpos_key_value", 2, 9, 9, 32, false, false, true},
    {"mha_validlens", 3, 9, 9, 21, false, false, false},
    {"mha_causal_validlens", 3, 11, 11, 27, true, false, false},
    {"mha_validlens_per_query", 2, 6, 6, 20, false, false, false},
    {"mha_cross_causal_validlens", 2, 3, 13, 18, false, false, false},
    {"mha_cross_validlens_per_query", 2, 4, 19, 14, false, false, false},
    {"mha_long_causal", 1, 45, 45, 14, false, false, false},
    {"gqa_causal_validlens", 2, 11, 11, 36, false, false, false},
    {"gqa_cross_validlens_per_query", 2, 3, 9, 28, true, false, false},
    {"gqa_long_causal_validlens", 1, 37, 37, 24, false, false, false},
    {"relpos_gqa_causal", 2, 8, 8, 24, false, false, true},
};

/* The integer after `flag` in an args line, or dflt. */
static int64_t arg_int(const char *args, const char *flag, int64_t dflt) {
    const char *p = strstr(args, flag);
    return p ? strtoll(p + strlen(flag), NULL, 10) : dflt;
}

static void check_shape(const gml_tensor *t, const char *what, int n, const int64_t *ne) {
    char got[64];
    gml_format_shape(t, got, sizeof got);
    bool ok = t && t->type == GML_F32 && t->n_dims == n;
    for (int d = 0; ok && d < n; d++) ok = gml_dim(t, d) == ne[d];
    char want[64] = "[";
    for (int d = 0; d < n; d++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%" PRId64, d ? "," : "", ne[d]);
    strcat(want, "]");
    CHECK(ok, "%s: shape %s, want f32 %s", what, got, want);
}

/* Element k of t (contiguous) against the 4 bytes at file offset `at`. */
static void check_raw(const gml_tensor *t, int64_t k, const char *path, long at) {
    FILE *f = fopen(path, "rb");
    float raw = 0;
    bool ok = f && fseek(f, at, SEEK_SET) == 0 && fread(&raw, 4, 1, f) == 1;
    if (f) fclose(f);
    CHECK(ok && t && k < gml_nelements(t) && memcmp(&raw, (const float *)t->data + k, 4) == 0,
          "%s: element %" PRId64 " should equal the float at file offset %ld (%g)", path, k, at,
          (double)raw);
}

static void test_fixture(const char *dir, const fixture_case *c) {
    char path[512], args[512] = "";
    snprintf(path, sizeof path, "%s/%s/args", dir, c->name);
    FILE *f = fopen(path, "r");
    CHECK(f && fgets(args, sizeof args, f), "%s: cannot read", path);
    if (f) fclose(f);
    const int64_t H = arg_int(args, "--heads ", 0), KV = arg_int(args, "--kv-heads ", H),
                  P = arg_int(args, "--max-rel ", -1), B = c->B, Tq = c->Tq, Tk = c->Tk, D = c->D;
    CHECK(H > 0 && D % H == 0, "%s: heads %" PRId64 " from args", c->name, H);
    if (H <= 0) return;
    const int64_t dk = D / H;

    /* weights: names in file order, with shapes */
    typedef struct { const char *name; int n; int64_t ne[2]; } weight;
    weight w[12];
    int n = 0;
#define W(nm, ...) (w[n++] = (weight){nm, sizeof((int64_t[]){__VA_ARGS__}) / 8, {__VA_ARGS__}})
    if (c->native) {
        W("in_proj_weight", 3 * D, D);
        W("out_proj.weight", D, D);
        W("in_proj_bias", 3 * D);
        W("out_proj.bias", D);
    } else {
        static const char *const proj[4] = {"w_q", "w_k", "w_v", "w_o"};
        for (int i = 0; i < 4; i++) {
            int64_t rows = i == 1 || i == 2 ? KV * dk : D;
            static char names[4][2][16];
            snprintf(names[i][0], 16, "%s.weight", proj[i]);
            snprintf(names[i][1], 16, "%s.bias", proj[i]);
            W(names[i][0], rows, D);
            if (c->bias) W(names[i][1], rows);
        }
        if (P >= 0) W("rel_k.weight", 2 * P + 1, dk);
        if (c->rel_v) W("rel_v.weight", 2 * P + 1, dk);
    }
#undef W
    snprintf(path, sizeof path, "%s/%s/weights.safetensors", dir, c->name);
    gml_context *ctx = gml_load_safetensors(path, err, sizeof err);
    CHECK(ctx, "%s", err);
    if (ctx) {
        size_t mem = 0;
        for (int i = 0; i < n; i++) {
            gml_tensor *t = gml_get_tensor(ctx, w[i].name);
            char what[600];
            snprintf(what, sizeof what, "%s: '%s'", path, w[i].name);
            CHECK(t && t->id == i, "%s: missing or not tensor %d in file order", what, i);
            if (!t) continue;
            check_shape(t, what, w[i].n, w[i].ne);
            mem += gml_tensor_overhead() + (nbytes_dense(t) + 63) / 64 * 64;
        }
        /* Exactly these tensors: the arena holds them and nothing more. */
        CHECK(gml_used_mem(ctx) == mem, "%s: %zu arena bytes used; the %d expected tensors need %zu",
              path, gml_used_mem(ctx), n, mem);
        /* One value by plain fread: the second weight's element 5, at
         * 8 + header length + its begin offset (the first weight's size). */
        size_t len;
        unsigned char *bytes = read_bytes(path, &len);
        uint64_t hlen = 0;
        for (int i = 7; bytes && len >= 8 && i >= 0; i--) hlen = hlen << 8 | bytes[i];
        free(bytes);
        gml_tensor *t0 = gml_get_tensor(ctx, w[0].name), *t1 = gml_get_tensor(ctx, w[1].name);
        if (t0 && t1) check_raw(t1, 5, path, (long)(8 + hlen + nbytes_dense(t0) + 5 * 4));
        gml_free(ctx);
    }

    /* arrays */
    bool cross = strstr(args, "--query") != NULL;
    struct { const char *file; int n; int64_t ne[4]; } a[5] = {
        {"out.npy", 3, {B, Tq, D}},
        {"attn.npy", 4, {B, H, Tq, Tk}},
        {cross ? "q.npy" : "x.npy", 3, {B, Tq, D}},
        {"k.npy", 3, {B, Tk, D}},
        {"v.npy", 3, {B, Tk, D}},
    };
    for (int i = 0; i < (cross ? 5 : 3); i++) {
        snprintf(path, sizeof path, "%s/%s/%s", dir, c->name, a[i].file);
        ctx = gml_load_npy(path, NULL, err, sizeof err);
        CHECK(ctx, "%s", err);
        if (!ctx) continue;
        char name[16];
        snprintf(name, sizeof name, "%.*s", (int)(strlen(a[i].file) - 4), a[i].file);
        gml_tensor *t = gml_get_tensor(ctx, name);
        CHECK(t, "%s: no tensor named '%s' (the file's base name)", path, name);
        check_shape(t, path, a[i].n, a[i].ne);
        /* numpy puts these headers' data at byte 128 */
        if (t) check_raw(t, gml_nelements(t) - 3, path, 128 + (long)(gml_nelements(t) - 3) * 4);
        gml_free(ctx);
    }
}

/* ---- bad inputs ------------------------------------------------------------ */

static unsigned char buf[1 << 16];

/* A .npy file in buf: preamble of version major.0, the dict padded to 64
 * with spaces and '\n', then data_bytes bytes. */
static size_t make_npy(int major, const char *dict, size_t data_bytes) {
    size_t pre = major == 1 ? 10 : 12, dlen = strlen(dict);
    size_t total = (pre + dlen + 1 + 63) / 64 * 64, hlen = total - pre;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    for (size_t i = 0; i < pre - 8; i++) buf[8 + i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + pre, dict, dlen);
    memset(buf + pre + dlen, ' ', hlen - dlen - 1);
    buf[total - 1] = '\n';
    for (size_t i = 0; i < data_bytes; i++) buf[total + i] = (unsigned char)(i * 7 + 1);
    return total + data_bytes;
}

/* A safetensors file in buf: the JSON as it is, then data_bytes bytes. */
static size_t make_st(const char *json, size_t data_bytes) {
    size_t n = strlen(json);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, json, n);
    for (size_t i = 0; i < data_bytes; i++) buf[8 + n + i] = (unsigned char)(i * 7 + 1);
    return 8 + n + data_bytes;
}

#define NPY(dict, bytes) gml_parse_npy(buf, make_npy(1, dict, bytes), "x.npy", "x", err, sizeof err)
#define ST(json, bytes) gml_parse_safetensors(buf, make_st(json, bytes), "w.safetensors", err, sizeof err)

/* Every proper prefix of a valid file fails cleanly, parsed and loaded. */
static void check_prefixes(const unsigned char *file, size_t len, bool npy, const char *name) {
    const char *path = tmp_path(name);
    for (size_t k = 0; k < len; k++) {
        err[0] = '\0';
        gml_context *a = npy ? gml_parse_npy(file, k, name, "x", err, sizeof err)
                             : gml_parse_safetensors(file, k, name, err, sizeof err);
        CHECK(!a && strstr(err, name) && !strchr(err, '\n'),
              "%s cut to %zu of %zu bytes: want a failure naming the file, got %s", name, k, len,
              a ? "a context" : err);
        gml_free(a);
        if (!write_bytes(path, file, k)) continue;
        err[0] = '\0';
        a = npy ? gml_load_npy(path, "x", err, sizeof err) : gml_load_safetensors(path, err, sizeof err);
        CHECK(!a && strstr(err, path), "%s cut to %zu bytes (file): got %s", name, k,
              a ? "a context" : err);
        gml_free(a);
    }
    gml_context *whole = npy ? gml_parse_npy(file, len, name, "x", err, sizeof err)
                             : gml_parse_safetensors(file, len, name, err, sizeof err);
    CHECK(whole, "%s: the whole file should load: %s", name, err);
    gml_free(whole);
}

static void test_bad_npy(void) {
    const char *good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    size_t len = make_npy(1, good, 24);
    unsigned char file[256];
    memcpy(file, buf, len);
    check_prefixes(file, len, true, "small.npy");
    len = make_npy(2, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", 12);
    memcpy(file, buf, len);
    check_prefixes(file, len, true, "small_v2.npy");

    /* accepted variants */
    const char *ok[] = {
        good,
        "{\"shape\": (2, 3), \"descr\": \"<f4\", \"fortran_order\": False}",
        "  { 'fortran_order' :False,'shape':( 2 ,3 , ),'descr':'<f4' }  ",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 1, 3), }",
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        gml_context *c = NPY(ok[i], 24);
        CHECK(c && gml_nelements(gml_get_tensor(c, "x")) == 6, "should load: %s: %s", ok[i], err);
        gml_free(c);
    }
    for (int major = 2; major <= 3; major++) {
        gml_context *c = gml_parse_npy(buf, make_npy(major, good, 24), "x.npy", "x", err, sizeof err);
        CHECK(c, "version %d.0 should load: %s", major, err);
        gml_free(c);
    }
    /* 0-D: loads as [1] */
    gml_context *c = NPY("{'descr': '<i4', 'fortran_order': False, 'shape': (), }", 4);
    gml_tensor *t = c ? gml_get_tensor(c, "x") : NULL;
    CHECK(t && t->n_dims == 1 && t->ne[3] == 1 && t->type == GML_I32, "0-D loads as [1]: %s", err);
    gml_free(c);

    /* bad preamble */
    len = make_npy(1, good, 24);
    buf[0] = 'X';
    EXPECT_FAIL(gml_parse_npy(buf, len, "x.npy", "x", err, sizeof err), "x.npy: offset 0",
                "not a .npy file", "\\x93NUMPY");
    make_npy(1, good, 24);
    buf[6] = 4;
    EXPECT_FAIL(gml_parse_npy(buf, len, "x.npy", "x", err, sizeof err), "offset 6",
                "version 4.0 is not supported");
    buf[6] = 1;
    buf[7] = 1;
    EXPECT_FAIL(gml_parse_npy(buf, len, "x.npy", "x", err, sizeof err), "version 1.1");
    make_npy(1, good, 24);
    buf[8] = 0xe8, buf[9] = 0x03; /* header length 1000 */
    EXPECT_FAIL(gml_parse_npy(buf, len, "x.npy", "x", err, sizeof err), "offset 8",
                "header length 1000 goes past the end", "the file is 152 bytes");

    /* bad headers */
    EXPECT_FAIL(NPY("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", 48),
                "x.npy: offset 20: dtype '<f8' is not supported; expected '<f4', '<i4' or '<f2'");
    { /* '<f2' loads as f16, bits as stored; its size is 2 bytes an element */
        gml_context *c16 = NPY("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }", 12);
        const gml_tensor *h = c16 ? gml_get_tensor(c16, "x") : NULL;
        CHECK(h && h->type == GML_F16 && h->ne[2] == 2 && h->ne[3] == 3 && h->nb[3] == 2,
              "'<f2' loads as f16 [2,3]: %s", err);
        if (h) CHECK(((const unsigned char *)h->data)[11] == (unsigned char)(11 * 7 + 1), "its bytes");
        gml_free(c16);
        EXPECT_FAIL(NPY("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }", 24),
                    "data is 24 bytes, but shape (2, 3) of '<f2' needs exactly 12");
    }
    EXPECT_FAIL(NPY("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", 24), "'>f4'");
    EXPECT_FAIL(NPY("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24),
                "offset 44", "fortran_order is True");
    EXPECT_FAIL(NPY("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 1, 3, 1), }", 24),
                "shape has 5 dims", "1 to 4");
    EXPECT_FAIL(NPY("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20),
                "offset 128", "data is 20 bytes", "(2, 3)", "needs 24");
    EXPECT_FAIL(NPY("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 28),
                "data is 28 bytes", "needs exactly 24"); /* np.load would ignore them; we refuse */
    EXPECT_FAIL(gml_parse_npy(buf, make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", 24),
                              "x.npy", "\x1b[2J\x1b[2J\x1b[2J\x1b[2J\x1b[2J\x1b[2J\x1b[2J\x1b[2J\x1b[2J"
                              "\x1b[2J\x1b[2J\x1b[2J\x1b[2J\x1b[2J\x1b[2J\x1b[2J", err, sizeof err),
                "tensor name '\\x1b[2J\\x1b", "is 64 bytes");
    CHECK(!strchr(err, 0x1b), "a name is shown printably: %s", err);
    EXPECT_FAIL(NPY("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776), }", 24),
                "needs more than 2^62 (file truncated?)");
    EXPECT_FAIL(NPY("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}x", 24), "unexpected 'x'");
    EXPECT_FAIL(NPY("{'descr': '<f4', 'shape': (2, 3), }", 24), "no 'fortran_order' key");
    EXPECT_FAIL(NPY("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", 24),
                "unknown key 'x'");
    EXPECT_FAIL(NPY("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,)}", 24),
                "key 'descr' appears twice");
    EXPECT_FAIL(NPY("{'descr': '<f4', 'fortran_order': False, 'shape': (6)}", 24), "(n,)");
    EXPECT_FAIL(NPY("{'descr': '<f4', 'fortran_order': False, 'shape': (-6,)}", 24), "negative");
    EXPECT_FAIL(NPY("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 6)}", 24), "size 0");
    EXPECT_FAIL(NPY("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3.0)}", 24),
                "expected ',' or ')'");
    EXPECT_FAIL(NPY("{'descr': '<f4, 'fortran_order': False, 'shape': (6,)}", 24), "offset");
    EXPECT_FAIL(NPY("{'descr': '<f4', 'fortran_order': false, 'shape': (6,)}", 24),
                "expected True or False");
    EXPECT_FAIL(NPY("{'descr': '<f4' 'fortran_order': False, 'shape': (6,)}", 24),
                "expected ',' or '}'");
    EXPECT_FAIL(NPY("{'descr': '<f4', 'fortran_order': False, 'shape': (6,),,}", 24), "offset");
    EXPECT_FAIL(NPY("['<f4', False, (6,)]", 24), "offset 10", "expected '{'");
    EXPECT_FAIL(NPY("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,)}", 24),
                "descr as a quoted string");
    EXPECT_FAIL(NPY("{'descr': 'a\\'b', 'fortran_order': False, 'shape': (6,)}", 24), "escape");
    EXPECT_FAIL(gml_parse_npy("", 0, "x.npy", "x", err, sizeof err), "x.npy", "0 bytes");

    /* file errors */
    EXPECT_FAIL(gml_load_npy(tmp_path("missing.npy"), "x", err, sizeof err), "missing.npy",
                "No such file or directory");
    EXPECT_FAIL(gml_load_npy(tmpdir, "x", err, sizeof err), "is a directory, not a regular file");
    /* a FIFO with no writer: refused at once (an open() that blocked would
     * hang here: the alarm ends the test instead) */
    const char *fifo = tmp_path("fifo.npy");
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo %s: %s", fifo, strerror(errno));
    alarm(20);
    EXPECT_FAIL(gml_load_npy(fifo, "x", err, sizeof err), "fifo.npy: is a FIFO, not a regular file");
    EXPECT_FAIL(gml_load_safetensors(fifo, err, sizeof err), "fifo.npy: is a FIFO, not a regular file");
    gml_safetensors *st = gml_safetensors_open(fifo, err, sizeof err);
    CHECK(!st && strstr(err, "is a FIFO, not a regular file"), "mapping a FIFO: %s", err);
    gml_safetensors_close(st);
    EXPECT_FAIL(gml_load_npy("/dev/null", "x", err, sizeof err), "/dev/null: is a character device, not a regular file");
    alarm(0);
    remove(fifo);
}

static void test_bad_safetensors(void) {
    const char *good = "{\"__metadata__\":{\"format\":\"pt\"},"
                       "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                       "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[24,32]}}  ";
    size_t len = make_st(good, 32);
    unsigned char file[512];
    memcpy(file, buf, len);
    check_prefixes(file, len, false, "small.safetensors");

    gml_context *c = ST(good, 32);
    CHECK(c && gml_get_tensor(c, "a") && gml_get_tensor(c, "b") && !gml_get_tensor(c, "__metadata__"),
          "metadata is skipped, tensors load: %s", err);
    if (c) CHECK(!memcmp(gml_get_tensor(c, "b")->data, buf + len - 8, 8), "b's bytes");
    gml_free(c);
    c = ST("{}", 0);
    CHECK(c && gml_used_mem(c) == 0, "an empty header loads as an empty context: %s", err);
    gml_free(c);
    c = ST("{\"s\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4);
    gml_tensor *t = c ? gml_get_tensor(c, "s") : NULL;
    CHECK(t && t->n_dims == 1 && t->ne[3] == 1, "a 0-D scalar loads as [1]: %s", err);
    gml_free(c);
    len = make_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 16);
    c = gml_parse_safetensors(buf, len, "w.safetensors", err, sizeof err);
    CHECK(c && gml_get_tensor(c, "a")->id == 0 && !memcmp(gml_get_tensor(c, "a")->data, buf + len - 8, 8),
          "tensors in header order, data from their own offsets: %s", err);
    gml_free(c);

    /* header length */
    EXPECT_FAIL(gml_parse_safetensors(buf, 7, "w.safetensors", err, sizeof err), "w.safetensors",
                "file is 7 bytes", "8-byte header length");
    len = make_st(good, 32);
    buf[0] = 0xff, buf[1] = 0x7f;
    EXPECT_FAIL(gml_parse_safetensors(buf, len, "w.safetensors", err, sizeof err), "offset 0",
                "header length 32767 goes past the end of the file", "(185 bytes, so at most 177)");
    memset(buf, 0xff, 8);
    EXPECT_FAIL(gml_parse_safetensors(buf, len, "w.safetensors", err, sizeof err),
                "header length 18446744073709551615");

    /* JSON */
    EXPECT_FAIL(ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]", 24),
                "w.safetensors: offset", "not valid JSON");
    EXPECT_FAIL(ST("{\"a\":{\"dtype\":\"F32\" \"shape\":[2]}}", 24), "offset 28", "not valid JSON");
    EXPECT_FAIL(ST("[1, 2]", 24), "offset 8", "header is an array, expected a JSON object");
    EXPECT_FAIL(ST("{} x", 24), "offset 11", "unexpected byte 0x78");
    EXPECT_FAIL(ST("", 24), "not valid JSON");
    EXPECT_FAIL(ST("{\"__metadata__\":{\"k\":1}}", 0), "__metadata__ 'k' is a number");
    EXPECT_FAIL(ST("{\"__metadata__\":[]}", 0), "__metadata__ is an array");

    /* entries */
    EXPECT_FAIL(ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3]}}", 24),
                "w.safetensors: tensor 'a': entry has no \"data_offsets\"");
    EXPECT_FAIL(ST("{\"a\":{\"shape\":[2,3],\"data_offsets\":[0,24]}}", 24), "no \"dtype\"");
    EXPECT_FAIL(ST("{\"a\":[1]}", 24), "tensor 'a': entry is an array, expected an object");
    EXPECT_FAIL(ST("{\"a\":{\"dtype\":32,\"shape\":[2,3],\"data_offsets\":[0,24]}}", 24),
                "dtype is a number");
    EXPECT_FAIL(ST("{\"a\":{\"dtype\":\"F64\",\"shape\":[3],\"data_offsets\":[0,24]}}", 24),
                "tensor 'a': dtype 'F64' is not supported; expected F32, I32, F16 or BF16");
    EXPECT_FAIL(ST("{\"a\\u0001\\\\\":{\"dtype\":\"\nF32\",\"shape\":[3],\"data_offsets\":[0,12]}}", 24),
                "offset 11: tensor name 'a\\x01\\x5c' holds byte 0x01"); /* found by fuzz_safetensors */
    EXPECT_FAIL(ST("{\"a\":{\"dtype\":\"F16\",\"shape\":[6],\"data_offsets\":[0,24]}}", 24),
                "tensor 'a': data_offsets [0, 24] hold 24 bytes, but F16 shape [6] needs 12");
    /* F16 and BF16 load as GML_F16 and GML_BF16, their bits as in the file */
    {
        const size_t len_st = make_st("{\"h\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
                                      "\"b\":{\"dtype\":\"BF16\",\"shape\":[6],\"data_offsets\":[12,24]}}", 24);
        c = gml_parse_safetensors(buf, len_st, "w.safetensors", err, sizeof err);
        const gml_tensor *h = c ? gml_get_tensor(c, "h") : NULL, *b = c ? gml_get_tensor(c, "b") : NULL;
        CHECK(h && b && h->type == GML_F16 && b->type == GML_BF16 && h->ne[2] == 2 &&
                  h->nb[3] == 2 && b->ne[3] == 6,
              "F16 and BF16 load as their types: %s", err);
        if (h && b)
            CHECK(!memcmp(h->data, buf + len_st - 24, 12) && !memcmp(b->data, buf + len_st - 12, 12),
                  "their bytes");
    }
    gml_free(c);
    EXPECT_FAIL(ST("{\"a\":{\"dtype\":\"F32\",\"shape\":\"6\",\"data_offsets\":[0,24]}}", 24),
                "shape is a string");
    EXPECT_FAIL(ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2,-3],\"data_offsets\":[0,24]}}", 24),
                "offset 37: tensor 'a': shape dim 0 is -2, negative");
    EXPECT_FAIL(ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,24]}}", 24),
                "shape dim 0 is 2.5, not a whole number");
    EXPECT_FAIL(ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[6,0],\"data_offsets\":[0,0]}}", 24), "dim 1");
    EXPECT_FAIL(ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[6,null],\"data_offsets\":[0,0]}}", 24),
                "[6, (null)]");
    EXPECT_FAIL(ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,0]}}", 24), "dim 0");
    EXPECT_FAIL(ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,2,1,3],\"data_offsets\":[0,24]}}", 24),
                "has 5 dims; ggmlite tensors have 1 to 4");
    EXPECT_FAIL(ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776,1099511627776,"
                   "1099511627776],\"data_offsets\":[0,24]}}", 24), "needs more than 2^62");
    EXPECT_FAIL(ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0]}}", 24),
                "data_offsets [0]: expected [begin, end]");
    EXPECT_FAIL(ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":{}}}", 24),
                "data_offsets is an object, expected [begin, end]");
    EXPECT_FAIL(ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[-1,23]}}", 24),
                "data_offsets[0] is -1, negative");
    EXPECT_FAIL(ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[24,0]}}", 24),
                "[24, 0]: begin is after end");
    EXPECT_FAIL(ST("{\"w_q.weight\":{\"dtype\":\"F32\",\"shape\":[32,32],\"data_offsets\":[0,4096]}}", 1024),
                "w.safetensors: tensor 'w_q.weight': data_offsets [0, 4096] end past the data "
                "buffer (1024 bytes, at file offset 78)");
    EXPECT_FAIL(ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 24),
                "data_offsets [0, 20] hold 20 bytes, but F32 shape [2, 3] needs 24");
    EXPECT_FAIL(ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 24),
                "tensors 'a' [0, 8] and 'b' [4, 12] overlap");
    EXPECT_FAIL(ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 24),
                "tensor name 'a' appears twice");
    EXPECT_FAIL(ST("{\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\":{}}", 0),
                "name is 71 bytes");

    /* what the format forbids, as the reference loader refuses it */
#define ENTRY(name, shape, offs) "\"" name "\":{\"dtype\":\"F32\",\"shape\":" shape ",\"data_offsets\":" offs "}"
    EXPECT_FAIL(ST("{" ENTRY("w_q.weight\\u0000junk", "[1]", "[0,4]") "}", 4),
                "w.safetensors: offset 20: tensor name 'w_q.weight\\x00junk' holds byte 0x00, a "
                "control character; names must be printable");
    EXPECT_FAIL(ST("{" ENTRY("a\\nb", "[1]", "[0,4]") "}", 4),
                "offset 11: tensor name 'a\\x0ab' holds byte 0x0a");
    EXPECT_FAIL(ST("{" ENTRY("a\nb", "[1]", "[0,4]") "}", 4),
                "offset 11: byte 0x0a inside a string; JSON needs control characters escaped");
    EXPECT_FAIL(ST("{" ENTRY("\\u001b[31mred", "[1]", "[0,4]") "}", 4),
                "offset 10: tensor name '\\x1b[31mred' holds byte 0x1b");
    EXPECT_FAIL(ST("{" ENTRY("\x1b[2J", "[1]", "[0,4]") "}", 4), "offset 10: byte 0x1b inside a string");
    EXPECT_FAIL(ST("{" ENTRY("del\x7f", "[1]", "[0,4]") "}", 4),
                "offset 13: tensor name 'del\\x7f' holds byte 0x7f");
    EXPECT_FAIL(ST("{\"a\":{\"dtype\":\"F32\\u0000junk\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
                "offset 22: tensor 'a': dtype 'F32\\x00junk' is not supported");
    EXPECT_FAIL(ST("{\"a\":{\"dtype\":\"F32\",\"shape\\u0000\":[9],\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
                "tensor 'a': field name 'shape\\x00' holds byte 0x00");
    EXPECT_FAIL(ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[9],\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
                "tensor 'a': entry has \"shape\" twice");
    EXPECT_FAIL(ST("{" ENTRY("a", "[2]", "[8,16]") "}", 16),
                "tensor 'a': data_offsets [8, 16]: the first tensor starts at 8, not 0, leaving a "
                "gap at file offset 63 (the format allows none)");
    EXPECT_FAIL(ST("{" ENTRY("a", "[2]", "[0,8]") "," ENTRY("b", "[2]", "[12,20]") "}", 20),
                "tensor 'b': data_offsets [12, 20]: a gap of 4 bytes after tensor 'a' (ends at 8");
    EXPECT_FAIL(ST("{" ENTRY("b", "[2]", "[12,20]") "," ENTRY("a", "[2]", "[0,8]") "}", 20),
                "a gap of 4 bytes after tensor 'a'"); /* sorted by offset, not header order */
    EXPECT_FAIL(ST("{" ENTRY("a", "[2]", "[0,8]") "}", 12),
                "w.safetensors: offset 70: 4 unused bytes after the last tensor's data (the data "
                "buffer is 12 bytes; the format allows no trailing bytes)");
    EXPECT_FAIL(ST("{}", 1), "offset 10: 1 unused bytes after the header, which lists no tensors");
    EXPECT_FAIL(ST("{" ENTRY("a", "[2]", "[0,8]") "," ENTRY("b", "[2]", "[0,8]") "}", 8),
                "tensors 'a' [0, 8] and 'b' [0, 8] overlap");
    EXPECT_FAIL(ST("{" ENTRY("w", "[2.0]", "[0,8]") "}", 8),
                "offset 37: tensor 'w': shape dim 0 is 2.0, not a whole number");
    EXPECT_FAIL(ST("{" ENTRY("w", "[1,2e0]", "[0,8]") "}", 8), "shape dim 1 is 2e0, not a whole number");
    EXPECT_FAIL(ST("{" ENTRY("w", "[-0]", "[0,8]") "}", 8), "shape dim 0 is -0, negative");
    EXPECT_FAIL(ST("{" ENTRY("w", "[[2]]", "[0,8]") "}", 8), "shape [(an array)]: dim 0 must be a whole number");
    EXPECT_FAIL(ST("{" ENTRY("w", "[2]", "[0,2.5]") "}", 8), "data_offsets[1] is 2.5, not a whole number");
    EXPECT_FAIL(ST("{" ENTRY("w", "[10]", "[0,4e1]") "}", 40), "data_offsets[1] is 4e1, not a whole number");
    EXPECT_FAIL(ST("{" ENTRY("w", "[10]", "[0,40.0]") "}", 40), "data_offsets[1] is 40.0");
    EXPECT_FAIL(ST("{" ENTRY("w", "[10]", "[0,040]") "}", 40),
                "header is not valid JSON: '040' is not a number");
    EXPECT_FAIL(ST("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1.}}", 4),
                "'1.' is not a number");
    EXPECT_FAIL(ST(" {}", 0), "offset 8: header starts with byte 0x20, expected '{'");
    EXPECT_FAIL(ST("{\"a\xff\":{}}", 0), "offset 11: header is not UTF-8 (byte 0xff)");
    EXPECT_FAIL(ST("{\"a\xc0\xaf\":{}}", 0), "offset 11: header is not UTF-8 (byte 0xc0)");
    EXPECT_FAIL(ST("{\"a\xed\xa0\x80\":{}}", 0), "offset 11: header is not UTF-8"); /* a surrogate */
    EXPECT_FAIL(ST("{\"a\\ud800\":{}}", 0), "offset 11: header is not valid JSON"); /* cJSON */
#undef ENTRY
    c = ST("{\"__metadata__\":null,\"\xc3\xa9\\u00e9\":{\"dtype\":\"F32\",\"shape\":[1],"
           "\"data_offsets\":[0,4]},\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8],"
           "\"extra\":[1.5e3, \"\\n\"]}}\t\r\n ", 8);
    CHECK(c && gml_get_tensor(c, "\xc3\xa9\xc3\xa9") && gml_get_tensor(c, "x"),
          "null metadata, UTF-8 names (raw and escaped), unknown fields, whitespace padding: %s", err);
    gml_free(c);
    c = ST("{\"__metadata__\":{\"text\":\"line 1\\nline 2\\u0000\"}}", 0);
    CHECK(c, "metadata values may hold control characters (they are ignored): %s", err);
    gml_free(c);

    EXPECT_FAIL(gml_load_safetensors(tmp_path("missing.safetensors"), err, sizeof err),
                "missing.safetensors: cannot open: No such file or directory");
}

/* ---- saving failures -------------------------------------------------------- */

static void test_save_failures(void) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20});
    gml_tensor *a = gml_set_name(random_tensor(ctx, GML_F32, 2, (int64_t[]){64, 64}), "a");
    gml_tensor *b = gml_set_name(random_tensor(ctx, GML_I32, 1, (int64_t[]){5}), "a");
    const gml_tensor *ts[2] = {a, b};

    /* a directory that does not exist */
    const char *nodir = tmp_path("nodir/x.npy");
    CHECK(gml_save_npy(nodir, a, err, sizeof err) == GML_ERR_IO && strstr(err, nodir) &&
              strstr(err, "No such file or directory"), "save into a missing directory: %s", err);
    CHECK(gml_save_safetensors(tmp_path("nodir/x.safetensors"), ts, 1, err, sizeof err) ==
              GML_ERR_IO && strstr(err, "No such file or directory"), "safetensors: %s", err);

    /* invalid arguments leave an existing file alone */
    char keep[256];
    snprintf(keep, sizeof keep, "%s", tmp_path("keep.safetensors"));
    CHECK(gml_save_safetensors(keep, ts, 1, err, sizeof err) == GML_OK, "%s", err);
    size_t len0, len1;
    unsigned char *before = read_bytes(keep, &len0);
    CHECK(gml_save_safetensors(keep, ts, 2, err, sizeof err) == GML_ERR_INVALID &&
              strstr(err, "both named 'a'"), "duplicate names: %s", err);
    gml_set_name(b, "__metadata__");
    CHECK(gml_save_safetensors(keep, ts, 2, err, sizeof err) == GML_ERR_INVALID &&
              strstr(err, "reserves"), "__metadata__ as a name: %s", err);
    gml_set_name(b, "b\x1b[2J");
    CHECK(gml_save_safetensors(keep, ts, 2, err, sizeof err) == GML_ERR_INVALID &&
              strstr(err, "tensor 1's name 'b\\x1b[2J' holds byte 0x1b") && !strchr(err, 0x1b),
          "a name the loader would refuse: %s", err);
    gml_context *na = gml_init((gml_init_params){.mem_size = 1 << 16, .no_alloc = true});
    gml_tensor *empty = gml_new_tensor_1d(na, GML_F32, 4);
    CHECK(gml_save_npy(tmp_path("empty.npy"), empty, err, sizeof err) == GML_ERR_INVALID &&
              strstr(err, "has no data") && !file_exists(tmp_path("empty.npy")), "no data: %s", err);
    gml_free(na);

    /* a write that fails midway (file size limit): no partial file, the old
     * one intact, no temporary left */
    struct rlimit old;
    getrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = {.rlim_cur = 1000, .rlim_max = old.rlim_max};
    if (setrlimit(RLIMIT_FSIZE, &small) == 0) {
        gml_tensor *big = gml_set_name(random_tensor(ctx, GML_F32, 1, (int64_t[]){4096}), "big");
        const gml_tensor *bigs[1] = {big};
        gml_status s1 = gml_save_safetensors(keep, bigs, 1, err, sizeof err);
        char err1[sizeof err];
        memcpy(err1, err, sizeof err);
        gml_status s2 = gml_save_npy(tmp_path("big.npy"), big, err, sizeof err);
        setrlimit(RLIMIT_FSIZE, &old);
        CHECK(s1 == GML_ERR_IO && strstr(err1, keep) && strstr(err1, "File too large"),
              "a failed write: %s", err1);
        CHECK(s2 == GML_ERR_IO && !file_exists(tmp_path("big.npy")), "no partial .npy: %s", err);
    }
    unsigned char *after = read_bytes(keep, &len1);
    CHECK(before && after && len0 == len1 && !memcmp(before, after, len0),
          "failed saves must leave the existing file as it was (%zu bytes, now %zu)", len0, len1);
    free(before);
    free(after);

    /* the target is a directory: rename fails, the temporary goes */
    mkdir(tmp_path("adir"), 0777);
    CHECK(gml_save_npy(tmp_path("adir"), a, err, sizeof err) == GML_ERR_IO &&
              strstr(err, "Is a directory"), "save over a directory: %s", err);
    CHECK(count_temp_files() == 0, "temporary files left behind: %d", count_temp_files());
    gml_free(ctx);
}

/* ---- fatal signals: gml_cleanup_on_signals ------------------------------------ */

/* Runs fn in a child process; its wait status. */
static int in_child(void (*fn)(void)) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        fn();
        _exit(0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
    return status;
}

/* Killed by SIGXFSZ midway through a save (its default action, past
 * `ulimit -f`): the handler removes the temporary file. */
static void child_xfsz(void) {
    signal(SIGXFSZ, SIG_DFL);
    if (!gml_cleanup_on_signals()) _exit(3);
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20});
    gml_tensor *big = random_tensor(ctx, GML_F32, 1, (int64_t[]){4096});
    struct rlimit small = {.rlim_cur = 1000, .rlim_max = 1000};
    if (setrlimit(RLIMIT_FSIZE, &small) != 0) _exit(4);
    gml_save_npy(tmp_path("killed.npy"), big, err, sizeof err);
    _exit(5); /* not reached: the write past 1000 bytes kills */
}

/* SIGTERM after a finished save, with a file and a directory of the
 * program's own registered: those go, the saved file stays. */
static void child_term(void) {
    if (!gml_cleanup_on_signals()) _exit(3);
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20});
    gml_tensor *t = random_tensor(ctx, GML_F32, 1, (int64_t[]){16});
    if (gml_save_npy(tmp_path("saved.npy"), t, err, sizeof err) != GML_OK) _exit(4);
    char dir[256], file[256];
    snprintf(dir, sizeof dir, "%s", tmp_path("made"));
    snprintf(file, sizeof file, "%s", tmp_path("made/partial"));
    if (mkdir(dir, 0777) != 0 || gml_cleanup_register(dir) < 0) _exit(5);
    if (!write_bytes(file, "x", 1) || gml_cleanup_register(file) < 0) _exit(6);
    int gone = gml_cleanup_register(tmp_path("unregistered"));
    write_bytes(tmp_path("unregistered"), "x", 1);
    gml_cleanup_unregister(gone);
    raise(SIGTERM);
    _exit(7);
}

/* An ignored signal stays ignored. */
static void child_ignored(void) {
    signal(SIGINT, SIG_IGN);
    if (!gml_cleanup_on_signals()) _exit(3);
    struct sigaction now;
    sigaction(SIGINT, NULL, &now);
    _exit(now.sa_handler == SIG_IGN ? 0 : 4);
}

static void test_signal_cleanup(void) {
    int st = in_child(child_xfsz);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGXFSZ, "the child should die of SIGXFSZ (status "
          "%#x)", (unsigned)st);
    CHECK(count_temp_files() == 0 && !file_exists(tmp_path("killed.npy")),
          "killed by SIGXFSZ midway: %d temporary files left", count_temp_files());
    st = in_child(child_term);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "the child should die of SIGTERM (status "
          "%#x)", (unsigned)st);
    CHECK(file_exists(tmp_path("saved.npy")), "a finished save survives the signal");
    CHECK(!file_exists(tmp_path("made/partial")) && !file_exists(tmp_path("made")),
          "registered files and directories go");
    CHECK(file_exists(tmp_path("unregistered")), "an unregistered file stays");
    st = in_child(child_ignored);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "an ignored SIGINT stays ignored (status %#x)",
          (unsigned)st);
    CHECK(gml_cleanup_register(NULL) == -1, "no path, no slot");
    int slots[GML_CLEANUP_SLOTS + 1], n = 0;
    while (n <= GML_CLEANUP_SLOTS && (slots[n] = gml_cleanup_register("x")) >= 0) n++;
    CHECK(n == GML_CLEANUP_SLOTS, "the table holds %d paths, got %d", GML_CLEANUP_SLOTS, n);
    while (n > 0) gml_cleanup_unregister(slots[--n]);
}

/* ---- mapped safetensors, shard indexes, converted .npy -------------------- */

/* gml_safetensors_open: names of any length, data in the mapping or (at an
 * offset no multiple of 4) a copy, the same bytes either way; a header in an
 * allocating context gets a copy; other formats named. */
static void test_mapped_safetensors(void) {
    char name[200];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    char json[600];
    /* a: F32 [3] at 0, long name: I32 [2] at 12; header padded to 4k+2 bytes when odd */
    for (int odd = 0; odd < 2; odd++) {
        int n = snprintf(json, sizeof json, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
                                            "\"%s\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
                         name);
        while (odd ? n % 4 != 2 : n % 8 != 0) json[n++] = ' ', json[n] = '\0';
        size_t len = make_st(json, 20);
        const char *path = tmp_path(odd ? "odd.safetensors" : "long.safetensors");
        CHECK(write_bytes(path, buf, len), "write %s", path);
        EXPECT_FAIL(gml_load_safetensors(path, err, sizeof err), "name is 199 bytes",
                    "gml_safetensors_open reads names of any length");
        gml_safetensors *st = gml_safetensors_open(path, err, sizeof err);
        CHECK(st != NULL, "open %s: %s", path, err);
        if (!st) continue;
        CHECK(gml_safetensors_count(st) == 2, "2 tensors");
        int i = gml_safetensors_find(st, name);
        CHECK(i == 1 && strcmp(gml_safetensors_name(st, 1), name) == 0, "the long name is kept whole");
        CHECK(gml_safetensors_find(st, "nope") == -1, "find: -1 when absent");
        CHECK(strcmp(gml_safetensors_file(st, 0), path) == 0, "the file of a tensor");
        gml_context *c = gml_init((gml_init_params){.mem_size = 8 * gml_tensor_overhead(), .no_alloc = true});
        gml_tensor *a = gml_safetensors_tensor(st, 0, c, NULL, err, sizeof err);
        gml_tensor *b = gml_safetensors_tensor(st, 1, c, "short", err, sizeof err);
        CHECK(a && b && strcmp(b->name, "short") == 0 && b->type == GML_I32 && b->ne[3] == 2, "headers made: %s", err);
        const size_t data_at = 8 + strlen(json);
        if (a && b) {
            CHECK(memcmp(a->data, buf + data_at, 12) == 0 && memcmp(b->data, buf + data_at + 12, 8) == 0,
                  "the bytes of the file (%s)", odd ? "unaligned: copied" : "mapped");
            CHECK((uintptr_t)a->data % 4 == 0 && (uintptr_t)b->data % 4 == 0, "data 4-byte aligned");
            if (odd) CHECK((uintptr_t)a->data % 64 == 0, "an unaligned tensor is copied to an aligned buffer");
            gml_tensor *again = gml_safetensors_tensor(st, 0, c, "a2", err, sizeof err);
            CHECK(again && again->data == a->data, "one copy per tensor");
        }
        err[0] = '\0';
        CHECK(!gml_safetensors_tensor(st, 1, c, NULL, err, sizeof err) && strstr(err, "name is 199 bytes; give a shorter one"),
              "a long name as a tensor name: refused: %s", err);
        CHECK(!gml_safetensors_tensor(st, 2, c, NULL, err, sizeof err), "index out of range");
        gml_context *alloc = gml_init((gml_init_params){.mem_size = 1 << 12});
        gml_tensor *copy = gml_safetensors_tensor(st, 0, alloc, "a", err, sizeof err);
        CHECK(copy && memcmp(copy->data, buf + data_at, 12) == 0 && copy->data != (void *)a, "an allocating context copies");
        gml_free(alloc);
        gml_free(c);
        gml_safetensors_close(st);
    }
    gml_safetensors_close(NULL);
    /* other formats, named */
    const char *zip = tmp_path("model.pt");
    CHECK(write_bytes(zip, "PK\003\004\000\000\010\010rest of a zip archive", 30), "write");
    EXPECT_FAIL(gml_load_safetensors(zip, err, sizeof err), "model.pt: offset 0: a zip archive (torch.save",
                "not a safetensors file", "tools/export_safetensors.py");
    err[0] = '\0';
    CHECK(!gml_safetensors_open(zip, err, sizeof err) && strstr(err, "a zip archive"), "open: %s", err);
    const char *idx = tmp_path("index.txt");
    CHECK(write_bytes(idx, "{\"weight_map\": {}}", 18), "write");
    EXPECT_FAIL(gml_load_safetensors(idx, err, sizeof err), "a JSON text (a sharded checkpoint's index");
    EXPECT_FAIL(gml_parse_safetensors("\x80\x02}q\x00(X\x01\x00\x00\x00", 12, "p.pt", err, sizeof err),
                "p.pt: offset 0: a Python pickle");
    EXPECT_FAIL(gml_parse_safetensors("\x93NUMPY\x01\x00v\x00{'descr'", 18, "x.npy", err, sizeof err),
                "x.npy: offset 0: a NumPy .npy file");
    /* a real header whose length's low byte is '{' (123) is not taken for JSON */
    char pad[124];
    int n = snprintf(pad, sizeof pad, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}");
    while (n < 123) pad[n++] = ' ';
    pad[n] = '\0';
    gml_context *c = ST(pad, 4);
    CHECK(c && gml_get_tensor(c, "a"), "a 123-byte header loads: %s", err);
    gml_free(c);
    err[0] = '\0';
    CHECK(!gml_safetensors_open(tmp_path("nosuch.safetensors"), err, sizeof err) &&
              strstr(err, "nosuch.safetensors: cannot open"), "a missing file: %s", err);
}

/* The process's resident set (VmRSS of /proc/self/status), in KiB; -1 when
 * it cannot be read. */
static long rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
    fclose(f);
    return kib;
}

/* gml_safetensors_open reads only what is used: a file of a 48 MiB tensor
 * beside a small one; taking and reading the small one leaves the resident
 * set within 4 MiB of where it was, and reading the large one afterwards
 * raises it by most of 48 MiB (the measurement works: the test can fail). */
static void test_mapped_untouched(void) {
    enum { BIG = 12 << 20 }; /* floats: 48 MiB */
    char json[256];
    int n = snprintf(json, sizeof json,
                     "{\"small\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                     "\"big\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[16,%lld]}}",
                     (int)BIG, 16 + 4LL * BIG);
    while (n % 8 != 0) json[n++] = ' ', json[n] = '\0';
    const char *path = tmp_path("untouched.safetensors");
    FILE *f = fopen(path, "wb");
    const uint64_t hlen = (uint64_t)n;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(hlen >> (8 * i));
    const float small[4] = {1, 2, 3, 4};
    bool ok = f && fwrite(len8, 1, 8, f) == 8 && fwrite(json, 1, (size_t)n, f) == (size_t)n &&
              fwrite(small, sizeof small, 1, f) == 1;
    /* the big tensor: ones, written in 1 MiB pieces */
    static float piece[1 << 18];
    for (size_t i = 0; i < sizeof piece / sizeof *piece; i++) piece[i] = 1.0f;
    for (int i = 0; ok && i < BIG / (1 << 18); i++) ok = fwrite(piece, sizeof piece, 1, f) == 1;
    if (f) ok = fclose(f) == 0 && ok;
    CHECK(ok, "write %s", path);
    const long before = rss_kib();
    CHECK(before > 0, "VmRSS of /proc/self/status");
    gml_safetensors *st = ok && before > 0 ? gml_safetensors_open(path, err, sizeof err) : NULL;
    CHECK(!ok || before <= 0 || st, "open: %s", err);
    if (!st) return;
    gml_context *c = gml_init((gml_init_params){.mem_size = 4 * gml_tensor_overhead(), .no_alloc = true});
    gml_tensor *t = gml_safetensors_tensor(st, gml_safetensors_find(st, "small"), c, NULL, err, sizeof err);
    float sum = 0;
    for (int i = 0; t && i < 4; i++) sum += ((const float *)t->data)[i];
    const long used = rss_kib();
    CHECK(t && sum == 10.0f, "the small tensor's values: %s", err);
    CHECK(used - before < 4096, "after reading only the small tensor, the resident set grew by %ld KiB "
          "(the 48 MiB tensor is read, though unused?)", used - before);
    gml_tensor *b = gml_safetensors_tensor(st, gml_safetensors_find(st, "big"), c, NULL, err, sizeof err);
    double bsum = 0;
    for (int64_t i = 0; b && i < BIG; i += 1024) bsum += ((const float *)b->data)[i];
    const long all = rss_kib();
    CHECK(b && bsum == BIG / 1024, "the big tensor's values: %s", err);
    CHECK(all - used > 32 << 10, "reading the 48 MiB tensor raised the resident set by only %ld KiB: "
          "the measurement above tells nothing", all - used);
    gml_free(c);
    gml_safetensors_close(st);
    remove(path);
}

/* ---- f16 and bf16 saved ----------------------------------------------------- */

/* The 16-bit elements of t (any strides) in logical order. */
static uint16_t *dense16(const gml_tensor *t) {
    uint16_t *d = malloc((size_t)gml_nelements(t) * 2), *o = d;
    for (int64_t a = 0; a < t->ne[0]; a++)
        for (int64_t b = 0; b < t->ne[1]; b++)
            for (int64_t c = 0; c < t->ne[2]; c++)
                for (int64_t e = 0; e < t->ne[3]; e++, o++)
                    memcpy(o, (const char *)t->data + a * t->nb[0] + b * t->nb[1] + c * t->nb[2] + e * t->nb[3], 2);
    return d;
}

/* got (contiguous, loaded) holds want's type, shape and elements, bit for bit. */
static void check_same16(const gml_tensor *got, const gml_tensor *want, const char *what) {
    CHECK(got && got->type == want->type && got->n_dims == want->n_dims &&
              !memcmp(got->ne, want->ne, sizeof got->ne),
          "%s: type or shape differs", what);
    if (!got || got->type != want->type || memcmp(got->ne, want->ne, sizeof got->ne)) return;
    uint16_t *a = dense16(got), *b = dense16(want);
    CHECK(!memcmp(a, b, (size_t)gml_nelements(want) * 2), "%s: the bits differ", what);
    free(a);
    free(b);
}

/* f16 and bf16 tensors (random bit patterns: NaNs, infinities and
 * subnormals among them), contiguous, permuted and sliced, saved to
 * safetensors (F16, BF16, beside f32) and f16 to .npy ('<f2'), read back
 * by every loader bit for bit; q8_0 (both formats) and bf16 (.npy) are
 * refused with messages saying what to do. */
static void test_typed_saves(void) {
    const char *npy = tmp_path("t16.npy"), *st = tmp_path("t16.safetensors");
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 20});
    const gml_type types[2] = {GML_F16, GML_BF16};
    for (int trial = 0; trial < 12; trial++) {
        const gml_type type = types[trial % 2];
        const int64_t ne[3] = {1 + (int64_t)(rng() % 4), 1 + (int64_t)(rng() % 7), 1 + (int64_t)(rng() % 9)};
        gml_tensor *base = gml_new_tensor(ctx, type, 3, ne);
        uint16_t *bits = base->data;
        for (int64_t i = 0; i < gml_nelements(base); i++) bits[i] = (uint16_t)rng();
        /* as it is, permuted (2, 0, 1), or every other row of the middle dim */
        gml_tensor *t = base;
        if (trial % 3 == 1) t = gml_permute(ctx, base, (const int[]){2, 0, 1});
        if (trial % 3 == 2)
            t = gml_view(ctx, base, 3, (int64_t[]){ne[0], (ne[1] + 1) / 2, ne[2]},
                         (size_t[]){base->nb[1], 2 * base->nb[2], base->nb[3]}, 0);
        char name[32];
        snprintf(name, sizeof name, "w%d", trial);
        gml_set_name(t, name);
        gml_tensor *f = gml_set_name(random_tensor(ctx, GML_F32, 1, (int64_t[]){3}), "f");
        const gml_tensor *both[2] = {t, f};
        char what[64];
        snprintf(what, sizeof what, "%s trial %d safetensors", gml_type_name(type), trial);
        CHECK(gml_save_safetensors(st, both, 2, err, sizeof err) == GML_OK, "%s: save: %s", what, err);
        gml_context *back = gml_load_safetensors(st, err, sizeof err);
        CHECK(back, "%s: load: %s", what, err);
        if (back) {
            check_same16(gml_get_tensor(back, name), t, what);
            gml_tensor *fb = gml_get_tensor(back, "f");
            CHECK(fb && !memcmp(fb->data, f->data, 12), "%s: the f32 tensor beside it", what);
            gml_free(back);
        }
        gml_safetensors *m = gml_safetensors_open(st, err, sizeof err);
        CHECK(m, "%s: open: %s", what, err);
        if (m) {
            gml_context *c = gml_init((gml_init_params){.mem_size = 4 * gml_tensor_overhead(), .no_alloc = true});
            check_same16(gml_safetensors_tensor(m, gml_safetensors_find(m, name), c, NULL, err, sizeof err), t,
                         "mapped");
            gml_free(c);
            gml_safetensors_close(m);
        }
        if (type == GML_F16) {
            CHECK(gml_save_npy(npy, t, err, sizeof err) == GML_OK, "f16 trial %d: save_npy: %s", trial, err);
            back = gml_load_npy(npy, "x", err, sizeof err);
            CHECK(back, "f16 trial %d: load_npy: %s", trial, err);
            if (back) check_same16(gml_get_tensor(back, "x"), t, "npy '<f2'");
            gml_free(back);
            size_t len;
            unsigned char *bytes = read_bytes(npy, &len);
            bool f2 = false;
            for (size_t i = 0; bytes && !f2 && i + 14 <= len && i < 128; i++) f2 = !memcmp(bytes + i, "'descr': '<f2'", 14);
            CHECK(f2, "f16 trial %d: descr '<f2'", trial);
            free(bytes);
        } else {
            CHECK(gml_save_npy(npy, t, err, sizeof err) == GML_ERR_INVALID &&
                      strstr(err, "is bf16, which .npy has no dtype for") &&
                      strstr(err, "save it as safetensors, which has BF16"),
                  "bf16 to .npy refused: %s", err);
        }
    }
    gml_tensor *q = gml_set_name(gml_new_tensor(ctx, GML_Q8_0, 2, (int64_t[]){2, 64}), "q");
    memset(q->data, 0, 4 * 34);
    const gml_tensor *qs[1] = {q};
    CHECK(gml_save_safetensors(st, qs, 1, err, sizeof err) == GML_ERR_INVALID &&
              strstr(err, "tensor 'q' is q8_0, which safetensors has no dtype for") &&
              strstr(err, "convert it first (gml_cpy into an f32, f16 or bf16 tensor)"),
          "q8_0 to safetensors refused: %s", err);
    CHECK(gml_save_npy(npy, q, err, sizeof err) == GML_ERR_INVALID &&
              strstr(err, "tensor 'q' is q8_0, which .npy has no dtype for"),
          "q8_0 to .npy refused: %s", err);
    gml_free(ctx);
}

static void test_shard_index(void) {
    gml_st_index_entry *e;
    int n;
    const char *good = "{\"metadata\": {\"total_size\": 20}, \"weight_map\": {\"a\": \"s1.safetensors\", "
                       "\"b\": \"s2.safetensors\"}}\n";
    CHECK(gml_parse_safetensors_index(good, strlen(good), "i.json", &e, &n, err, sizeof err) == GML_OK && n == 2 &&
              !strcmp(e[1].name, "b") && !strcmp(e[1].shard, "s2.safetensors"),
          "an index parses: %s", err);
    gml_free_safetensors_index(e, n);
    const char *backslash = "{\"weight_map\": {\"a\\\\u0000\": \"s\\\\\\\"\"}}"; /* "a\\u0000": "s\\\"" */
    CHECK(gml_parse_safetensors_index(backslash, strlen(backslash), "i.json", &e, &n, err, sizeof err) == GML_OK &&
              n == 1 && !strcmp(e[0].name, "a\\u0000") && !strcmp(e[0].shard, "s\\\""),
          "an escaped backslash before u0000 is no NUL: %s", err);
    gml_free_safetensors_index(e, n);
    static const struct { const char *text, *sub; } BAD[] = {
        {"{\"weight_map\": {\"a\": \"s.safetensors\"}", "i.json: offset"},
        {"{\"weight_map\": {\"a\": \"s.safetensors\"}} x", "unexpected byte 0x78 after the JSON object"},
        {"{\"metadata\": {}}", "no \"weight_map\" object"},
        {"[1]", "no \"weight_map\" object"},
        {"{\"weight_map\": {\"a\": 3}}", "weight_map 'a' is a number, expected a shard file name"},
        {"{\"weight_map\": {\"a\": \"../x.safetensors\"}}", "'../x.safetensors' is not a shard file name"},
        {"{\"weight_map\": {\"a\": \"/etc/x\"}}", "is not a shard file name beside the index"},
        {"{\"weight_map\": {\"a\": \"\"}}", "is not a shard file name"},
        {"{\"weight_map\": {\"a\\u0001\": \"s\"}}", "is not a shard file name"},
        {"{\"weight_map\": {\"a\": \"s\", \"a\": \"t\"}}", "weight_map names 'a' twice"},
        /* cJSON would cut these at the NUL: "w_q.weight" bound, "zz" lost */
        {"{\"weight_map\": {\"w_q.weight\\u0000zz\": \"s\"}}",
         "offset 16: key 'w_q.weight\\x00zz' holds \\u0000 (a NUL byte"},
        {"{\"weight_map\": {\"a\": \"s.safetensors\\u0000x\"}}",
         "the value 's.safetensors\\x00x' of key 'a' holds \\u0000"},
        {"{\"metadata\": {\"k\\u0000\": 1}, \"weight_map\": {\"a\": \"s\"}}", "key 'k\\x00' holds \\u0000"},
        {"{\"weight_map\": {\"a\tb\": \"s\"}}", "key 'a\\x09b' holds raw byte 0x09"},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) {
        err[0] = '\0';
        e = (gml_st_index_entry *)1;
        gml_status st = gml_parse_safetensors_index(BAD[i].text, strlen(BAD[i].text), "i.json", &e, &n, err, sizeof err);
        CHECK(st != GML_OK && e == NULL && n == 0 && strstr(err, BAD[i].sub) && !strchr(err, '\n'),
              "index %zu refused with \"%s\": %s", i, BAD[i].sub, err);
    }
    /* a sharded checkpoint on disk */
    size_t len = make_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    CHECK(write_bytes(tmp_path("s1.safetensors"), buf, len), "write s1");
    unsigned char a_bytes[8];
    memcpy(a_bytes, buf + len - 8, 8);
    len = make_st("{\"b\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                  "\"c\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8);
    CHECK(write_bytes(tmp_path("s2.safetensors"), buf, len), "write s2");
    const char *index = tmp_path("model.safetensors.index.json");
    CHECK(write_bytes(index, good, strlen(good)), "write the index");
    /* s2 holds c, which the index leaves out: unexpected (strict), or set aside */
    err[0] = '\0';
    gml_safetensors *st = gml_safetensors_open(index, err, sizeof err);
    CHECK(!st && strstr(err, "model.safetensors.index.json: weight_map leaves out 'c', which shard "
                             "s2.safetensors holds: an unexpected tensor (1 in all)"),
          "a tensor the index leaves out: %s", err);
    st = gml_safetensors_open_flags(index, GML_ST_UNLISTED, err, sizeof err);
    const char *c_file = NULL;
    CHECK(st && gml_safetensors_count(st) == 2 && gml_safetensors_find(st, "c") < 0 &&
              gml_safetensors_unlisted(st, 0, &c_file) && !strcmp(gml_safetensors_unlisted(st, 0, NULL), "c") &&
              c_file && strstr(c_file, "s2.safetensors") && !gml_safetensors_unlisted(st, 1, NULL),
          "GML_ST_UNLISTED: the index's tensors only, c set aside: %s", err);
    CHECK(!gml_safetensors_open_flags(index, 2, err, sizeof err) && strstr(err, "unknown flags 0x2"),
          "unknown flags: %s", err);
    if (st) {
        gml_context *c = gml_init((gml_init_params){.mem_size = 4 * gml_tensor_overhead(), .no_alloc = true});
        gml_tensor *a = gml_safetensors_tensor(st, gml_safetensors_find(st, "a"), c, NULL, err, sizeof err);
        CHECK(a && !memcmp(a->data, a_bytes, 8), "a's bytes from s1");
        CHECK(strstr(gml_safetensors_file(st, gml_safetensors_find(st, "b")), "s2.safetensors") != NULL, "b is s2's");
        gml_free(c);
        gml_safetensors_close(st);
    }
    const char *wrong = "{\"weight_map\": {\"a\": \"s2.safetensors\"}}";
    CHECK(write_bytes(index, wrong, strlen(wrong)), "write");
    err[0] = '\0';
    CHECK(!gml_safetensors_open(index, err, sizeof err) &&
              strstr(err, "weight_map puts 'a' in s2.safetensors, which does not hold it"), "a wrong shard: %s", err);
    CHECK(write_bytes(index, "{\"weight_map\": 1}", 17), "write");
    err[0] = '\0';
    CHECK(!gml_safetensors_open(index, err, sizeof err) && strstr(err, "no \"weight_map\" object"), "bad index: %s", err);
    const char *empty = "{\"weight_map\": {}}";
    CHECK(write_bytes(index, empty, strlen(empty)), "write");
    err[0] = '\0';
    CHECK(!gml_safetensors_open(index, err, sizeof err) && strstr(err, "weight_map is empty"), "empty: %s", err);
    remove(tmp_path("s1.safetensors"));
    remove(tmp_path("s2.safetensors"));
    remove(index);
}

/* float64, float16, bool .npy data converted to f32, exactly where exact. */
static void test_npy_converted(void) {
    const char *from = "x";
    const double d[4] = {1.5, -0.0, 1e-40, 3.0e38};
    size_t total = make_npy(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }", 32);
    memcpy(buf + total - 32, d, 32);
    gml_context *c = gml_parse_npy_converted(buf, total, "d.npy", "d", &from, err, sizeof err);
    gml_tensor *t = c ? gml_get_tensor(c, "d") : NULL;
    CHECK(t && t->type == GML_F32 && from && !strcmp(from, "float64"), "float64 converted: %s", err);
    for (int i = 0; t && i < 4; i++) {
        float want = (float)d[i], got = ((float *)t->data)[i];
        CHECK(!memcmp(&want, &got, 4), "float64 element %d rounded to nearest", i);
    }
    gml_free(c);
    CHECK(!gml_parse_npy(buf, total, "d.npy", "d", err, sizeof err) && strstr(err, "dtype '<f8' is not supported"),
          "gml_parse_npy still refuses float64: %s", err);
    double big = 1e300;
    memcpy(buf + total - 8, &big, 8);
    EXPECT_FAIL(gml_parse_npy_converted(buf, total, "d.npy", "d", &from, err, sizeof err),
                "d.npy: offset", "float64 element 3 is 1e+300, beyond float32's range");
    /* every float16, exactly */
    total = make_npy(1, "{'descr': '<f2', 'fortran_order': False, 'shape': (65536,), }", 0);
    unsigned char *big16 = malloc(total + 131072);
    memcpy(big16, buf, total);
    for (uint32_t h = 0; big16 && h < 65536; h++) {
        big16[total + 2 * h] = (unsigned char)h;
        big16[total + 2 * h + 1] = (unsigned char)(h >> 8);
    }
    c = big16 ? gml_parse_npy_converted(big16, total + 131072, "h.npy", "h", &from, err, sizeof err) : NULL;
    free(big16);
    t = c ? gml_get_tensor(c, "h") : NULL;
    CHECK(t && from && !strcmp(from, "float16"), "float16 converted: %s", err);
    int bad = 0;
    for (uint32_t h = 0; t && h < 65536; h++) {
        const int e = (int)(h >> 10 & 31), m = (int)(h & 1023);
        double want = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
        if (h >> 15) want = -want;
        float got = ((float *)t->data)[h];
        if (isnan(want) ? !isnan(got) : (got != (float)want || !signbit(got) != !signbit(want))) bad++;
    }
    CHECK(t && bad == 0, "every float16 value exact (%d wrong)", bad);
    gml_free(c);
    /* bool */
    total = make_npy(1, "{'descr': '|b1', 'fortran_order': False, 'shape': (2, 3), }", 6);
    memcpy(buf + total - 6, "\1\0\0\1\1\0", 6);
    c = gml_parse_npy_converted(buf, total, "m.npy", "m", &from, err, sizeof err);
    t = c ? gml_get_tensor(c, "m") : NULL;
    CHECK(t && t->ne[2] == 2 && t->ne[3] == 3 && from && !strcmp(from, "bool"), "bool converted: %s", err);
    const float want_b[6] = {1, 0, 0, 1, 1, 0};
    CHECK(t && !memcmp(t->data, want_b, sizeof want_b), "bool as 0 and 1");
    gml_free(c);
    buf[total - 1] = 2;
    EXPECT_FAIL(gml_parse_npy_converted(buf, total, "m.npy", "m", &from, err, sizeof err), "bool element 5 is byte 0x02");
    EXPECT_FAIL(gml_parse_npy_converted(buf, total - 1, "m.npy", "m", &from, err, sizeof err),
                "data is 5 bytes, but shape (2, 3) of '|b1' needs 6 (file truncated?)");
    /* f32 is not converted; other dtypes say how to convert */
    total = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8);
    c = gml_parse_npy_converted(buf, total, "x.npy", "x", &from, err, sizeof err);
    CHECK(c && from == NULL, "f32 loads as it is, converted_from NULL: %s", err);
    gml_free(c);
    EXPECT_FAIL(NPY("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", 16), "dtype '<i8' is not supported",
                "a.astype(np.float32)");
    total = make_npy(1, "{'descr': '>f8', 'fortran_order': False, 'shape': (2,), }", 16);
    EXPECT_FAIL(gml_parse_npy_converted(buf, total, "x.npy", "x", &from, err, sizeof err),
                "dtype '>f8' is not supported; expected '<f4' or '<i4' (or '<f8', '<f2', '|b1', converted)",
                "np.save(path, a.astype(np.float32))");
    /* every truncation fails cleanly */
    total = make_npy(1, "{'descr': '<f2', 'fortran_order': False, 'shape': (3,), }", 6);
    for (size_t k = 0; k < total; k++) {
        c = gml_parse_npy_converted(buf, k, "h.npy", "h", &from, err, sizeof err);
        CHECK(!c, "a truncated float16 file (%zu bytes) is refused", k);
        gml_free(c);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_io FIXTURES_DIR (tests/fixtures)\n");
        return 2;
    }
    struct stat fst; /* missing data fails, never skips */
    const bool have = stat(argv[1], &fst) == 0;
    if (!have || !S_ISDIR(fst.st_mode)) {
        fprintf(stderr, "test_io: FAIL: the fixtures directory %s: %s\n", argv[1],
                have ? "not a directory" : strerror(errno));
        return 1;
    }
    snprintf(tmpdir, sizeof tmpdir, "test_io.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "test_io: cannot make a scratch directory: %s\n", strerror(errno));
        return 2;
    }
    test_round_trips();
    test_views();
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) test_fixture(argv[1], &CASES[i]);
    test_bad_npy();
    test_bad_safetensors();
    test_save_failures();
    test_signal_cleanup();
    test_mapped_safetensors();
    test_mapped_untouched();
    test_shard_index();
    test_typed_saves();
    test_npy_converted();
    remove_tree(tmpdir);

    printf("%ld checks, %ld failed\n", n_checks, n_failures);
    if (n_checks == 0) return 1;
    return n_failures ? 1 : 0;
}
