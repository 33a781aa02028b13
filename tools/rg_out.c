/* run-graph's output files. Each is written to "<path>.run-graph-tmp" (the
 * library's savers are atomic themselves), and only when every one of them
 * was written are they renamed into place: a run that fails at any step
 * leaves no output file, partial or complete; nor does a run killed by a
 * signal (the staged paths are in the library's cleanup table).
 *
 * A test hook: with RUN_GRAPH_TEST_RAISE=<signal number> in the environment,
 * run-graph raises that signal once every output is staged, just before
 * renaming them into place (tests/test_cli.sh checks that nothing is left). */
#define _XOPEN_SOURCE 700 /* realpath */
#include "rg.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void *rg_dense(const gml_tensor *t, size_t *n_bytes) {
    const size_t es = gml_type_size(t->type);
    *n_bytes = (size_t)gml_nelements(t) * es;
    char *out = malloc(*n_bytes ? *n_bytes : 1), *p = out;
    if (!out) return NULL;
    for (int64_t i0 = 0; i0 < t->ne[0]; i0++)
        for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
            for (int64_t i2 = 0; i2 < t->ne[2]; i2++) {
                const char *row = (const char *)t->data + i0 * (int64_t)t->nb[0] + i1 * (int64_t)t->nb[1] +
                                  i2 * (int64_t)t->nb[2];
                if (t->nb[3] == es) {
                    memcpy(p, row, (size_t)t->ne[3] * es);
                    p += (size_t)t->ne[3] * es;
                } else {
                    for (int64_t i3 = 0; i3 < t->ne[3]; i3++, p += es) memcpy(p, row + i3 * (int64_t)t->nb[3], es);
                }
            }
    return out;
}

/* ---- staging -------------------------------------------------------------------- */

const char *rg_stage_add(rg_stage *s, const char *path) {
    if (s->n == RG_MAX_STAGED) return NULL;
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->final[i], path) == 0) return NULL;
    size_t len = strlen(path) + sizeof ".run-graph-tmp";
    char *tmp = malloc(len), *final = strdup(path);
    if (!tmp || !final) {
        free(tmp);
        free(final);
        return NULL;
    }
    snprintf(tmp, len, "%s.run-graph-tmp", path);
    s->final[s->n] = final;
    s->slot[s->n] = gml_cleanup_register(tmp) + 1; /* before anything creates it */
    s->tmp[s->n++] = tmp;
    return tmp;
}

void rg_stage_message(const rg_stage *s, char *msg, size_t size) {
    for (int i = 0; i < s->n; i++) {
        size_t tlen = strlen(s->tmp[i]), flen = strlen(s->final[i]);
        for (char *at = strstr(msg, s->tmp[i]); at; at = strstr(at + flen, s->tmp[i])) {
            char rest[2048];
            snprintf(rest, sizeof rest, "%s", at + tlen);
            snprintf(at, size - (size_t)(at - msg), "%s%s", s->final[i], rest);
        }
    }
}

/* After the staged files are renamed or removed. */
static void stage_free(rg_stage *s) {
    for (int i = 0; i < s->n; i++) {
        gml_cleanup_unregister(s->slot[i] - 1);
        free(s->final[i]);
        free(s->tmp[i]);
    }
    s->n = 0;
    gml_cleanup_unregister(s->dir_slot - 1);
    s->dir_slot = 0;
    free(s->made_dir);
    s->made_dir = NULL;
}

void rg_stage_abort(rg_stage *s) {
    for (int i = 0; i < s->n; i++) unlink(s->tmp[i]);
    if (s->made_dir) rmdir(s->made_dir);
    stage_free(s);
}

/* Renames every staged file into place. rg_check_output_paths has ruled out
 * what usually makes a rename fail; if one fails all the same, the files
 * already renamed are removed again, so the run still leaves no output. */
bool rg_stage_commit(rg_stage *s, rg_err *e) {
    int placed = 0;
    for (; placed < s->n; placed++)
        if (rename(s->tmp[placed], s->final[placed]) != 0) break;
    const bool ok = placed == s->n;
    if (!ok) {
        rg_fail(e, RG_RUNTIME, "%s: cannot rename %s into place: %s (no output file was written)",
                s->final[placed], s->tmp[placed], strerror(errno));
        for (int i = 0; i < placed; i++) unlink(s->final[i]);
        for (int i = placed; i < s->n; i++) unlink(s->tmp[i]);
        if (s->made_dir) rmdir(s->made_dir);
    }
    stage_free(s);
    return ok;
}

/* The file path names, as "<real directory>/<base name>", so that two
 * spellings of one file compare equal; false (errno set) if its directory
 * cannot be resolved. */
static bool canonical_path(const char *path, char out[PATH_MAX]) {
    char dir[PATH_MAX], real[PATH_MAX];
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) {
        errno = EISDIR;
        return false;
    }
    if (!realpath(dir, real)) return false;
    struct stat st;
    if (stat(real, &st) != 0) return false;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return false;
    }
    return snprintf(out, PATH_MAX, "%s/%s", strcmp(real, "/") ? real : "", base) < PATH_MAX ||
           (errno = ENAMETOOLONG, false);
}

bool rg_check_output_paths(const rg_opts *o, rg_err *e) {
    const char *const flag[] = {"--output", "--attn-weights", "--attn-svg", "--dot", "--save-graph",
                                "--log", "--save-weights", "--grads", "--save-inputs"};
    const char *const path[] = {o->output, o->attn_weights, o->attn_svg, o->dot, o->save_graph,
                                o->log, o->save_weights, o->grads, o->save_inputs};
    enum { N = sizeof path / sizeof *path, SAVE_INPUTS = N - 1 };
    static char canon[N][PATH_MAX];
    for (int i = 0; i < N; i++) {
        if (!path[i]) continue;
        if (!canonical_path(path[i], canon[i]))
            return rg_fail(e, RG_RUNTIME, "%s %s: cannot create: %s", flag[i], path[i],
                           errno == EISDIR ? "it names a directory, not a file"
                                           : errno == ENOENT ? "its directory does not exist"
                                                             : strerror(errno));
        struct stat st;
        const bool exists = stat(canon[i], &st) == 0;
        if (i != SAVE_INPUTS && exists && S_ISDIR(st.st_mode))
            return rg_fail(e, RG_RUNTIME, "%s %s: cannot create: it is a directory", flag[i],
                           path[i]);
        if (i == SAVE_INPUTS && exists && !S_ISDIR(st.st_mode))
            return rg_fail(e, RG_RUNTIME, "%s %s: exists and is not a directory", flag[i], path[i]);
        for (int k = 0; k < i; k++)
            if (path[k] && strcmp(canon[k], canon[i]) == 0)
                return rg_fail(e, RG_USAGE, "%s: given for two outputs (%s %s, %s %s)", path[i],
                               flag[k], path[k], flag[i], path[i]);
    }
    return true;
}

/* The staged path for `path`, or a failure (the same path given twice). */
static const char *stage(rg_stage *s, const char *path, rg_err *e) {
    const char *tmp = rg_stage_add(s, path);
    if (!tmp) rg_fail(e, RG_USAGE, "%s: given for two outputs", path);
    return tmp;
}

static bool library_failed(rg_stage *s, const char *err, rg_err *e) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", err);
    rg_stage_message(s, msg, sizeof msg);
    return rg_fail(e, RG_RUNTIME, "%s", msg);
}

static bool save_npy(rg_stage *s, const char *path, const gml_tensor *t, rg_err *e) {
    const char *tmp = stage(s, path, e);
    char err[1024];
    if (!tmp) return false;
    return gml_save_npy(tmp, t, err, sizeof err) == GML_OK || library_failed(s, err, e);
}

/* ---- the heatmap ------------------------------------------------------------------- */

/* The keys the options mask for batch element b, [H, Tq, Tk] (malloc'd; NULL
 * when out of memory): causal (bottom-right or top-left), the window, the
 * valid lengths, an -inf entry of the combined mask [B|1, H|1, T, S]. Keys
 * past S (bias_k, add_zero_attn's row) are seen by every query. */
static unsigned char *masked_keys(const rg_opts *o, const rg_data *d, int64_t b, int64_t H, int64_t Tq,
                                  int64_t Tk) {
    unsigned char *mk = calloc((size_t)(H * Tq * Tk) + 1, 1);
    if (!mk) return NULL;
    const int64_t S = d->known[RG_S] && d->dim[RG_S] <= Tk ? d->dim[RG_S] : Tk;
    const int64_t len = d->valid_lens && d->valid_lens->type == GML_I32 && b < gml_nelements(d->valid_lens)
                            ? ((const int32_t *)d->valid_lens->data)[b]
                            : S;
    const gml_tensor *mt = d->mask;
    const bool use_mask = mt && mt->type == GML_F32 && mt->n_dims == 4 && mt->ne[2] == Tq && mt->ne[3] == S &&
                          gml_is_contiguous(mt);
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Tq; i++) {
            const int64_t pos = o->causal_top_left ? i : i + S - Tq; /* the query's position */
            const float *mrow = use_mask ? (const float *)mt->data +
                                               (((mt->ne[0] > 1 ? b : 0) * mt->ne[1] + (mt->ne[1] > 1 ? h : 0)) * Tq + i) * S
                                         : NULL;
            for (int64_t j = 0; j < S; j++)
                mk[(h * Tq + i) * Tk + j] = j >= len || ((o->causal || o->causal_top_left || o->window) && j > pos) ||
                                            (o->window && pos - j >= o->window) ||
                                            (mrow && mrow[j] == -INFINITY);
        }
    return mk;
}

static bool svg(const rg_opts *o, rg_data *d, rg_model *m, rg_stage *s, rg_err *e) {
    const gml_tensor *a = m->attn;
    rg_heatmap h = {.B = a->ne[0], .H = a->ne[1], .Tq = a->ne[2], .Tk = a->ne[3], .batch = o->attn_batch};
    int n_keys = 0, n_queries = 0;
    char **keys = o->tokens ? rg_split_labels(o->tokens, &n_keys) : NULL;
    char **queries = o->query_tokens ? rg_split_labels(o->query_tokens, &n_queries) : NULL;
    h.key_labels = keys;
    h.query_labels = queries ? queries : h.Tq == h.Tk ? keys : NULL;
    char title[512];
    snprintf(title, sizeof title, "%s attention weights, batch %d of %" PRId64 ": %" PRId64 " heads, %" PRId64
             " queries x %" PRId64 " keys%s%s",
             o->kind == RG_GRAPH ? o->model : (const char *[]){"mha", "gqa", "relpos"}[o->kind], h.batch, h.B, h.H,
             h.Tq, h.Tk, o->causal ? ", causal" : "", d->valid_lens ? ", valid lengths" : "");
    h.title = title;
    size_t n;
    float *dense = rg_dense(a, &n);
    h.attn = dense;
    unsigned char *mk = h.batch < h.B && h.H * h.Tq * h.Tk <= 1 << 21 ? masked_keys(o, d, h.batch, h.H, h.Tq, h.Tk) : NULL;
    h.masked = mk;
    const char *tmp = dense ? stage(s, o->attn_svg, e) : NULL;
    char err[1024] = "out of memory";
    bool ok = tmp && rg_write_svg(tmp, &h, err, sizeof err);
    if (!ok && (tmp || !dense)) library_failed(s, err, e);
    free(dense);
    free(mk);
    rg_free_labels(keys, n_keys);
    rg_free_labels(queries, n_queries);
    return ok;
}

/* ---- --save-inputs: the data of a run, as a fixture folder --------------------------- */

/* x.npy, q.npy, k.npy, v.npy as the fixtures name them; other inputs by name. */
static const char *input_file(const char *name) {
    static const char *const MAP[][2] = {{"query", "q"}, {"key", "k"}, {"value", "v"}};
    for (int i = 0; i < 3; i++)
        if (strcmp(name, MAP[i][0]) == 0) return MAP[i][1];
    return name;
}

static bool save_inputs(const rg_opts *o, rg_data *d, rg_model *m, rg_stage *s, rg_err *e) {
    const char *dir = o->save_inputs;
    if (mkdir(dir, 0777) == 0) { /* removed again if the run fails */
        s->made_dir = strdup(dir);
        s->dir_slot = gml_cleanup_register(dir) + 1;
    } else if (errno != EEXIST)
        return rg_fail(e, RG_RUNTIME, "%s: cannot create the directory: %s", dir, strerror(errno));
    int n_leafs = gml_graph_n_leafs(m->g), n_params = 0;
    const gml_tensor **params = malloc((size_t)n_leafs * sizeof *params + 1);
    if (!params) return rg_fail(e, RG_RUNTIME, "out of memory");
    char path[PATH_MAX], err[1024], args[4096];
    size_t k = 0;
    bool ok = true;
    /* the arguments that run the same case in the folder */
    const char *model = o->model;
    char abs[PATH_MAX];
    if (o->kind == RG_GRAPH && realpath(o->model, abs)) model = abs;
    k += (size_t)snprintf(args + k, sizeof args - k, "%s", model);
    static const int SIZES[] = {RG_H, RG_G, RG_P, RG_M, RG_N, RG_K};
    for (int i = 0; i < 6; i++) {
        int sym = SIZES[i];
        bool wanted = o->kind == RG_GRAPH ? d->known[sym]
                      : sym == RG_H       ? o->kind != RG_MATMUL
                      : sym == RG_G       ? o->kind == RG_GQA || o->kind == RG_RELPOS
                      : sym == RG_P       ? o->kind == RG_RELPOS
                                          : false;
        if (wanted) k += (size_t)snprintf(args + k, sizeof args - k, " %s %" PRId64, RG_FLAG[sym], d->dim[sym]);
    }
    if (o->kind == RG_GRAPH)
        for (int sym = RG_B; sym <= RG_D; sym++)
            k += (size_t)snprintf(args + k, sizeof args - k, " %s %" PRId64, RG_FLAG[sym], d->dim[sym]);
    if (o->causal) k += (size_t)snprintf(args + k, sizeof args - k, " --causal");
    /* the graph that ran (they round differently): --attn as given, else fused
     * unless the weights were asked for (relpos is unfused only) */
    if (o->kind == RG_MHA || o->kind == RG_GQA)
        k += (size_t)snprintf(args + k, sizeof args - k, " --attn %s",
                              o->attn_impl == GML_ATTN_UNFUSED ||
                                      (o->attn_impl == GML_ATTN_AUTO && (o->attn_weights || o->attn_svg))
                                  ? "unfused"
                                  : "fused");
    /* the inputs below are written [T, B, D] as they were read, and the output is too */
    if (o->seq_first) k += (size_t)snprintf(args + k, sizeof args - k, " --seq-first");
    char opts[160];
    k += (size_t)snprintf(args + k, sizeof args - k, "%s", rg_attn_options(o, true, opts, sizeof opts));
    for (int i = 0; i < o->n_valid_lens; i++)
        k += (size_t)snprintf(args + k, sizeof args - k, "%s%d", i ? "," : " --valid-lens ", (int)o->valid_lens[i]);
    if (o->compute != GML_COMPUTE_F32) /* the products' precision: other bits */
        k += (size_t)snprintf(args + k, sizeof args - k, " --compute %s", gml_compute_name(o->compute));
    for (int i = 0; i < n_leafs && ok; i++) {
        /* the graph's copy: a leaf the graph file made is planned, its data the graph's */
        const gml_tensor *t = gml_graph_tensor(m->g, gml_graph_leaf(m->g, i));
        if (rg_model_is_weight(m, gml_graph_leaf(m->g, i))) {
            params[n_params++] = t;
            continue;
        }
        if (strcmp(t->name, "valid_lens") == 0 && o->n_valid_lens) continue; /* --valid-lens says it */
        const char *file = input_file(t->name);
        snprintf(path, sizeof path, "%s/%s.npy", dir, file);
        const char *flag = NULL; /* the flag that binds it again, else --bind */
        if (o->kind != RG_MATMUL) {
            static const char *const FLAGS[][2] = {{"x", "--input"}, {"query", "--query"}, {"key", "--key"},
                                                   {"value", "--value"}};
            for (int f = 0; f < 4; f++)
                if (strcmp(t->name, FLAGS[f][0]) == 0) flag = FLAGS[f][1];
        }
        gml_tensor view; /* --seq-first: an input of those flags as it was read, [T, B, D] */
        ok = save_npy(s, path, flag ? rg_output_view(o, t, &view) : t, e);
        if (o->kind != RG_GRAPH && o->kind != RG_MATMUL && gml_graph_leaf(m->g, i) == d->mask) flag = "--attn-mask"; /* [B|1, H|1, T, S] */
        if (flag) k += (size_t)snprintf(args + k, sizeof args - k, " %s %s.npy", flag, file);
        else k += (size_t)snprintf(args + k, sizeof args - k, " --bind %s=%s.npy", t->name, file);
    }
    if (ok && n_params) {
        snprintf(path, sizeof path, "%s/weights.safetensors", dir);
        const char *tmp = stage(s, path, e);
        ok = tmp && (gml_save_safetensors(tmp, (const gml_tensor *const *)params, n_params, err, sizeof err) == GML_OK ||
                     library_failed(s, err, e));
        k += (size_t)snprintf(args + k, sizeof args - k, " --weights weights.safetensors");
    }
    free(params);
    if (!ok) return false;
    if (k >= sizeof args) return rg_fail(e, RG_RUNTIME, "%s/args: too long", dir);
    snprintf(path, sizeof path, "%s/args", dir);
    const char *tmp = stage(s, path, e);
    FILE *f = tmp ? fopen(tmp, "w") : NULL;
    if (tmp && !f) return rg_fail(e, RG_RUNTIME, "%s: cannot create: %s", path, strerror(errno));
    if (!f) return false;
    fprintf(f, "%s\n", args);
    if (fclose(f) != 0) return rg_fail(e, RG_RUNTIME, "%s: write failed: %s", path, strerror(errno));
    return true;
}

bool rg_write_outputs(const rg_opts *o, rg_data *d, rg_model *m, rg_err *e) {
    rg_stage s = {0};
    char err[1024];
    bool ok = true;
    gml_tensor view;
    if (o->output) ok = save_npy(&s, o->output, rg_output_view(o, m->out, &view), e);
    if (ok && o->attn_weights) ok = save_npy(&s, o->attn_weights, m->attn, e);
    if (ok && o->attn_svg) ok = svg(o, d, m, &s, e);
    if (ok && o->dot) {
        const char *tmp = stage(&s, o->dot, e);
        ok = tmp && (gml_graph_dump_dot(m->g, tmp) == GML_OK ||
                     rg_fail(e, RG_RUNTIME, "%s: cannot write: %s", o->dot, strerror(errno)));
    }
    if (ok && o->save_graph) {
        const char *tmp = stage(&s, o->save_graph, e);
        rg_model_flag_weights(m, true); /* written as params */
        ok = tmp && (gml_save_graph(tmp, m->g, m->outs, m->n_outs, err, sizeof err) == GML_OK ||
                     library_failed(&s, err, e));
        rg_model_flag_weights(m, false);
    }
    if (ok && o->save_inputs) ok = save_inputs(o, d, m, &s, e);
    if (ok && o->grads && m->grads) ok = rg_grads_save(&s, o->grads, m->g, m->grads, e);
    if (!ok) {
        rg_stage_abort(&s);
        return false;
    }
    const char *hook = getenv("RUN_GRAPH_TEST_RAISE"); /* the test hook: see the top */
    if (hook) raise(atoi(hook));
    return rg_stage_commit(&s, e);
}

/* ---- --json ------------------------------------------------------------------ */

cJSON *rg_json_shape(const gml_tensor *t) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 4 - t->n_dims; a && i < 4; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)t->ne[i]));
    return a;
}

cJSON *rg_json_head(const rg_summary *s) {
    cJSON *j = cJSON_CreateObject(), *sizes = cJSON_CreateObject();
    if (!j || !sizes) {
        cJSON_Delete(j);
        cJSON_Delete(sizes);
        return NULL;
    }
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, s->digest);
    cJSON_AddStringToObject(j, "model", s->model);
    for (int i = 0; i < RG_NSYM; i++)
        if (s->shown[i]) cJSON_AddNumberToObject(sizes, RG_SYM[i], (double)s->dim[i]);
    cJSON_AddItemToObject(j, "sizes", sizes);
    cJSON_AddBoolToObject(j, "causal", s->causal);
    cJSON_AddItemToObject(j, "output_shape", rg_json_shape(s->out));
    cJSON_AddStringToObject(j, "xxh3", hex);
    cJSON_AddNumberToObject(j, "threads", s->threads);
    cJSON_AddStringToObject(j, "isa", gml_isa_name(gml_get_isa()));
    cJSON_AddNumberToObject(j, "runs", s->runs);
    cJSON_AddNumberToObject(j, "median_ms", s->median_ms);
    cJSON_AddNumberToObject(j, "min_ms", s->min_ms);
    cJSON_AddNumberToObject(j, "flops", s->flops);
    cJSON_AddNumberToObject(j, "gflops", s->median_ms > 0 ? s->flops / (s->median_ms * 1e6) : 0);
    cJSON_AddNumberToObject(j, "peak_bytes", (double)s->peak_bytes);
    cJSON_AddBoolToObject(j, "random_weights", s->random_weights);
    cJSON_AddBoolToObject(j, "random_inputs", s->random_inputs);
    return j;
}

bool rg_json_print(cJSON *j, rg_err *e) {
    char *text = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!text) return rg_fail(e, RG_RUNTIME, "out of memory");
    printf("%s\n", text);
    cJSON_free(text);
    return true;
}
